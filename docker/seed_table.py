"""Seed the demo's object store with the sample Delta table (the `delta-seed` service of docker-compose.yml).

    python seed_table.py              # create the bucket; write the sample table unless it is there
    python seed_table.py --recreate   # delete the table and write it again (versions 0..5)
    python seed_table.py --append     # add one commit to the table (wakes the version sensor)

The table is written by delta-rs (`scripts/sample_table.py`, the project's independent writer) into a
local directory, then uploaded: data files first, then the log in version order, `_last_checkpoint`
last, so a reader never sees a commit whose files are missing. `--append` downloads `_delta_log/`,
appends a batch with delta-rs and uploads the new files the same way.

Target: `--uri` or `DELTA_EXAMPLE_TABLE_URI` (an `s3://bucket/prefix`). Credentials and endpoint come
from the standard variables (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_ENDPOINT_URL`,
`AWS_REGION`), read as the `deltalog` CLI reads them. Ends by printing the version the provider's
own log reader sees through the store.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from airflow_delta_provider.commands.command import storage_options_from_env
from airflow_delta_provider.delta import DeltaLog

sys.path.insert(0, str(Path(__file__).resolve().parent))  # sample_table.py sits beside this file in the image

DEFAULT_URI = "s3://delta/sample_table"
LOG_DIR = "_delta_log"


def s3_filesystem(uri: str) -> Any:
    import s3fs

    return s3fs.S3FileSystem(**storage_options_from_env(uri))


def split_uri(uri: str) -> tuple[str, str]:
    """`s3://bucket/prefix` -> (`bucket`, `bucket/prefix`)."""
    if not uri.startswith(("s3://", "s3a://")):
        raise SystemExit(f"seed_table: expected an s3:// URI, got {uri!r}")
    path = uri.split("://", 1)[1].strip("/")
    bucket = path.split("/", 1)[0]
    if path == bucket:
        raise SystemExit(f"seed_table: {uri!r} names a bucket, not a table inside one")
    return bucket, path


def upload_order(relative: str) -> tuple[int, str]:
    """Data files, then log files by name (zero-padded versions sort numerically), `_last_checkpoint` last."""
    if not relative.startswith(LOG_DIR + "/"):
        return (0, relative)
    if relative == f"{LOG_DIR}/_last_checkpoint":
        return (2, relative)
    return (1, relative)


def local_files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def remote_files(fs: Any, path: str) -> set[str]:
    prefix = path.rstrip("/") + "/"
    return {key[len(prefix) :] for key in fs.find(path) if key.startswith(prefix)}


def upload(fs: Any, root: Path, path: str, relatives: set[str]) -> None:
    for relative in sorted(relatives, key=upload_order):
        fs.put_file(str(root / relative), f"{path}/{relative}")
    print(f"seed_table: uploaded {len(relatives)} files to s3://{path}")


def ensure_bucket(fs: Any, bucket: str) -> None:
    if fs.exists(bucket):
        return
    params: dict[str, Any] = {"Bucket": bucket}
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    if region != "us-east-1":  # S3 rejects an explicit us-east-1 location constraint
        params["CreateBucketConfiguration"] = {"LocationConstraint": region}
    fs.call_s3("create_bucket", **params)
    fs.invalidate_cache()
    print(f"seed_table: created bucket {bucket}")


def has_table(fs: Any, path: str) -> bool:
    return any(name.endswith(".json") for name in remote_files(fs, f"{path}/{LOG_DIR}"))


def write_sample(fs: Any, path: str) -> None:
    import sample_table

    with tempfile.TemporaryDirectory(prefix="seed-") as tmp:
        root = Path(tmp) / "table"
        sample_table.main(str(root))
        upload(fs, root, path, local_files(root))


def append_commit(fs: Any, path: str) -> None:
    from deltalake import DeltaTable, write_deltalake
    from sample_table import batch

    with tempfile.TemporaryDirectory(prefix="seed-") as tmp:
        root = Path(tmp) / "table"
        fs.get(f"{path}/{LOG_DIR}/", str(root / LOG_DIR) + "/", recursive=True)
        before = local_files(root)
        version = DeltaTable(str(root)).version()
        write_deltalake(str(root), batch(1000 + 10 * version, 10, "apac"), partition_by=["region"], mode="append")
        upload(fs, root, path, local_files(root) - before)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Seed the demo object store with the sample Delta table.")
    parser.add_argument("--uri", default=os.environ.get("DELTA_EXAMPLE_TABLE_URI", DEFAULT_URI))
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--recreate", action="store_true", help="delete the table and write it again")
    mode.add_argument("--append", action="store_true", help="add one commit to the existing table")
    args = parser.parse_args(argv)

    bucket, path = split_uri(args.uri)
    fs = s3_filesystem(args.uri)
    ensure_bucket(fs, bucket)
    exists = has_table(fs, path)
    if args.recreate and exists:
        fs.rm(path, recursive=True)
        fs.invalidate_cache()
        exists = False
        print(f"seed_table: deleted s3://{path}")
    if args.append:
        if not exists:
            raise SystemExit(f"seed_table: no table at {args.uri} to append to (run without --append first)")
        append_commit(fs, path)
    elif exists:
        print(f"seed_table: {args.uri} already holds a table; kept (--recreate writes it again)")
    else:
        write_sample(fs, path)
    fs.invalidate_cache()
    version = DeltaLog.for_table(args.uri, storage_options=storage_options_from_env(args.uri)).latest_version()
    print(f"seed_table: {args.uri} is at version {version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
