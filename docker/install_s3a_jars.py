"""Add the S3A connector to a pip-installed PySpark (build-time helper of `docker/Dockerfile`).

PySpark's wheel bundles the Hadoop client but not `hadoop-aws`, so `s3a://` paths fail with
`ClassNotFoundException: org.apache.hadoop.fs.s3a.S3AFileSystem`. This downloads, from Maven Central,
into `<pyspark>/jars`:

- `org.apache.hadoop:hadoop-aws:<HADOOP_VERSION>`: must equal the bundled `hadoop-client-api` exactly,
  else S3A fails at runtime (`NoSuchMethodError`); the build stops here when they differ;
- `software.amazon.awssdk:bundle:<AWS_SDK_VERSION>`: the AWS SDK v2 that Hadoop release is built
  against (`aws-java-sdk-v2.version` in `hadoop-project-<HADOOP_VERSION>.pom`);
- `software.amazon.s3.analyticsaccelerator:analyticsaccelerator-s3:<VERSION>`: a compile-scope
  dependency of hadoop-aws since 3.4.2; S3AFileSystem does not load without it
  (`amazon-s3-analyticsaccelerator-s3.version` in the same pom).

Each jar is checked against the SHA-1 Maven Central publishes beside it, then moved into place.

    python install_s3a_jars.py --hadoop 3.5.0 --aws-sdk 2.35.4 --analytics-accelerator 1.3.1
    python install_s3a_jars.py --hadoop 3.5.0 --check-only    # only compare with the bundled Hadoop
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
import urllib.request
from http.client import HTTPResponse
from pathlib import Path

MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
CHUNK = 1 << 20


def pyspark_jars_dir() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def bundled_hadoop_versions(jars: Path) -> list[str]:
    prefix, suffix = "hadoop-client-api-", ".jar"
    return sorted(p.name[len(prefix) : -len(suffix)] for p in jars.glob(f"{prefix}*{suffix}"))


def check_hadoop(jars: Path, version: str) -> None:
    found = bundled_hadoop_versions(jars)
    if found != [version]:
        raise SystemExit(
            f"install_s3a_jars: pyspark in {jars} bundles hadoop-client-api {found or 'none'}, but "
            f"HADOOP_VERSION is {version}: hadoop-aws must equal the bundled Hadoop (update the ARGs)"
        )


def artifacts(hadoop: str, aws_sdk: str, analytics_accelerator: str) -> list[tuple[str, str, str]]:
    return [
        ("org.apache.hadoop", "hadoop-aws", hadoop),
        ("software.amazon.awssdk", "bundle", aws_sdk),
        ("software.amazon.s3.analyticsaccelerator", "analyticsaccelerator-s3", analytics_accelerator),
    ]


def artifact_url(repo: str, group: str, artifact: str, version: str) -> str:
    return f"{repo}/{group.replace('.', '/')}/{artifact}/{version}/{artifact}-{version}.jar"


def _open(url: str, attempts: int = 4) -> HTTPResponse:
    for attempt in range(1, attempts + 1):
        try:
            return urllib.request.urlopen(url, timeout=60)
        except OSError as exc:
            if attempt == attempts:
                raise SystemExit(f"install_s3a_jars: cannot download {url}: {exc}") from exc
            time.sleep(2 * attempt)
    raise AssertionError("unreachable")


def download(url: str, target: Path) -> str:
    """Stream `url` into `target` (the AWS bundle is ~600 MB); return its SHA-1."""
    digest = hashlib.sha1(usedforsecurity=False)
    with _open(url) as response, target.open("wb") as out:
        while chunk := response.read(CHUNK):
            digest.update(chunk)
            out.write(chunk)
    return digest.hexdigest()


def install(repo: str, group: str, artifact: str, version: str, jars: Path) -> Path:
    url = artifact_url(repo, group, artifact, version)
    final = jars / f"{artifact}-{version}.jar"
    partial = final.with_suffix(".jar.part")
    actual = download(url, partial)
    with _open(url + ".sha1") as response:
        expected = response.read().decode().split()[0].strip().lower()
    if actual != expected:
        partial.unlink()
        raise SystemExit(f"install_s3a_jars: SHA-1 mismatch for {url}: got {actual}, published {expected}")
    partial.replace(final)
    print(f"install_s3a_jars: {final.name} ({final.stat().st_size} bytes, sha1 {actual})")
    return final


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hadoop", required=True, help="hadoop-aws version = the Hadoop pyspark bundles")
    parser.add_argument("--aws-sdk", help="software.amazon.awssdk:bundle version")
    parser.add_argument("--analytics-accelerator", help="analyticsaccelerator-s3 version")
    parser.add_argument("--jars-dir", type=Path, help="default: <pyspark>/jars")
    parser.add_argument("--repo", default=MAVEN_CENTRAL)
    parser.add_argument("--check-only", action="store_true", help="only compare --hadoop with the bundled Hadoop")
    args = parser.parse_args(argv)
    jars = args.jars_dir or pyspark_jars_dir()
    check_hadoop(jars, args.hadoop)
    if args.check_only:
        print(f"install_s3a_jars: pyspark bundles Hadoop {args.hadoop}")
        return 0
    if not (args.aws_sdk and args.analytics_accelerator):
        parser.error("--aws-sdk and --analytics-accelerator are required unless --check-only")
    for group, artifact, version in artifacts(args.hadoop, args.aws_sdk, args.analytics_accelerator):
        install(args.repo, group, artifact, version, jars)
    return 0


if __name__ == "__main__":
    sys.exit(main())
