"""Sensor polls and snapshot loads on an S3-compatible server: HTTP requests per operation and time.

The generated long logs (`log1k`, `log10k` from generate.py: one small streaming commit per version, a
classic checkpoint every 10 versions, `_last_checkpoint` at the newest) are uploaded to moto's standalone
server on 127.0.0.1 (tests/support/s3_server.py). Each operation is run once through the counting proxy (requests
by kind) and then `--reps` times straight against the server (median and range of wall time):

* `latest_version()`, fresh `DeltaLog` each poll (the sensor's probe);
* `update()` on a cached `DeltaLog`, nothing new / after one new commit;
* a full snapshot load (fresh `DeltaLog(...).update()`);
* for reference, delta-rs `DeltaTable(uri)` (its own load, same table state, same server), the
  server's floor for the poll's two requests (plain boto3), and a listing of the whole `_delta_log`
  without the hint (what a poll would cost without `_last_checkpoint` and StartAfter).

The request counts should not depend on the log length; the whole-log listing should.

    .venv/bin/python bench/s3_bench.py [--scales log1k,log10k] [--reps 7] [--json out.json] [--markdown out.md]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent / "tests"))  # support/s3_server.py: the moto server and the proxy
sys.path.insert(0, str(BENCH_DIR))

from benchlib import ensure_table  # noqa: E402
from support.s3_server import (  # noqa: E402
    S3Proxy,
    S3Server,
    boto3_client,
    create_bucket,
    deltalake_storage_options,
    s3_storage_options,
    start_moto_server,
)

from airflow_delta_provider.delta import DeltaLog  # noqa: E402
from airflow_delta_provider.delta.storage import FsspecLogStore  # noqa: E402


def upload_log(server: S3Server, local: Path, bucket: str, prefix: str) -> tuple[int, float]:
    """Put every file of `local/_delta_log` under `s3://bucket/prefix/_delta_log/`; (objects, seconds)."""
    s3 = boto3_client(server)
    create_bucket(server, bucket)
    files = [p for p in (local / "_delta_log").iterdir() if p.is_file()]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(32) as pool:
        list(
            pool.map(
                lambda p: s3.put_object(Bucket=bucket, Key=f"{prefix}/_delta_log/{p.name}", Body=p.read_bytes()),
                files,
            )
        )
    return len(files), time.perf_counter() - t0


def put_commit(server: S3Server, bucket: str, prefix: str, version: int) -> None:
    """Commit `version` (commitInfo + one add), as the generator's streaming commits look."""
    ts = int(time.time() * 1000)
    actions = [
        {"commitInfo": {"timestamp": ts, "operation": "STREAMING UPDATE", "readVersion": version - 1}},
        {
            "add": {
                "path": f"date=2025-06-02/part-00000-s3bench-{version:08d}.c000.snappy.parquet",
                "partitionValues": {"date": "2025-06-02"},
                "size": 4096,
                "modificationTime": ts,
                "dataChange": True,
            }
        },
    ]
    body = ("\n".join(json.dumps(a, separators=(",", ":")) for a in actions) + "\n").encode()
    boto3_client(server).put_object(Bucket=bucket, Key=f"{prefix}/_delta_log/{version:020d}.json", Body=body)


def kinds(proxy: S3Proxy) -> Counter[str]:
    out: Counter[str] = Counter()
    for r in proxy.snapshot():
        if r.is_list:
            out["LIST"] += 1
        elif r.method == "GET" and "range" in r.headers:
            out["GET range"] += 1
        else:
            out[r.method] += 1
    return out


def describe(counts: Counter[str]) -> str:
    order = ["GET", "GET range", "LIST", "HEAD"]
    parts = [f"{counts[k]} {k}" for k in order if counts.get(k)]
    parts += [f"{v} {k}" for k, v in counts.items() if k not in order]
    return f"{sum(counts.values())} ({', '.join(parts)})"


def timed(fn: Callable[[], Any], reps: int, before: Callable[[], None] | None = None) -> list[float]:
    out = []
    for _ in range(reps):
        if before is not None:
            before()
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def bench_scale(server: S3Server, proxy: S3Proxy, scale: str, reps: int) -> list[dict[str, Any]]:
    manifest = ensure_table(scale)
    local = BENCH_DIR / ".data" / scale
    bucket, prefix = f"bench-{scale.lower()}", "table"  # a bucket per log: moto lists by scanning the bucket
    objects, upload_s = upload_log(server, local, bucket, prefix)
    print(f"{scale}: uploaded {objects} objects in {upload_s:.1f}s", file=sys.stderr)
    uri = f"s3://{bucket}/{prefix}"
    via_proxy = s3_storage_options(server, proxy.endpoint)
    direct = s3_storage_options(server)
    version = manifest["version"]
    rows: list[dict[str, Any]] = []

    def row(name: str, counts: Counter[str], times: list[float], answer: Any) -> None:
        rows.append(
            {
                "scale": scale,
                "log_objects": objects,
                "versions": version + 1,
                "operation": name,
                "requests": sum(counts.values()),
                "requests_by_kind": dict(counts),
                "median_ms": statistics.median(times),
                "min_ms": min(times),
                "max_ms": max(times),
                "reps": len(times),
                "answer": answer,
            }
        )
        print(f"  {name}: {describe(counts)}, median {statistics.median(times):.1f} ms -> {answer}", file=sys.stderr)

    def counted(fn: Callable[[], Any]) -> tuple[Counter[str], Any]:
        proxy.reset()
        result = fn()
        return kinds(proxy), result

    # 1. the sensor's probe on a fresh DeltaLog
    counts, v = counted(lambda: DeltaLog(uri, storage_options=via_proxy).latest_version())
    assert v == version, (v, version)
    times = timed(lambda: DeltaLog(uri, storage_options=direct).latest_version(), reps)
    row("latest_version(), fresh DeltaLog", counts, times, v)

    # 2. a full snapshot load (fresh DeltaLog)
    counts, snap = counted(lambda: DeltaLog(uri, storage_options=via_proxy).update())
    assert (snap.version, snap.num_files) == (version, manifest["num_files"])
    times = timed(lambda: DeltaLog(uri, storage_options=direct).update(), reps)
    row("snapshot load, fresh DeltaLog", counts, times, f"v{snap.version}, {snap.num_files} files")

    # 2b. reference: delta-rs loading the same table (its own requests, through the proxy)
    from deltalake import DeltaTable

    counts, dt = counted(lambda: DeltaTable(uri, storage_options=deltalake_storage_options(server, proxy.endpoint)))
    dl_direct = deltalake_storage_options(server)
    times = timed(lambda: DeltaTable(uri, storage_options=dl_direct), reps)
    assert dt.version() == version
    row("delta-rs DeltaTable(uri) (reference)", counts, times, f"v{dt.version()}")

    # 3. update() on a cached DeltaLog: nothing new, then one new commit each time
    cached_proxy = DeltaLog(uri, storage_options=via_proxy)
    cached_proxy.update()
    counts, snap = counted(cached_proxy.update)
    cached = DeltaLog(uri, storage_options=direct)
    cached.update()
    times = timed(cached.update, reps)
    row("update(), cached DeltaLog, no new commit", counts, times, f"v{snap.version}")

    state = {"next": version + 1}

    def new_commit() -> None:
        put_commit(server, bucket, prefix, state["next"])
        state["next"] += 1

    new_commit()
    counts, snap = counted(cached_proxy.update)
    assert snap.version == state["next"] - 1
    cached.update()
    times = timed(cached.update, reps, before=new_commit)
    assert cached.update().version == state["next"] - 1
    row("update(), cached DeltaLog, 1 new commit", counts, times, f"v{snap.version}")

    # 4. the server's own floor for the poll's two requests (boto3, no library): GET the hint, LIST after it
    s3 = boto3_client(server)
    hint = json.loads(s3.get_object(Bucket=bucket, Key=f"{prefix}/_delta_log/_last_checkpoint")["Body"].read())

    def raw_poll() -> None:
        s3.get_object(Bucket=bucket, Key=f"{prefix}/_delta_log/_last_checkpoint")["Body"].read()
        s3.list_objects_v2(
            Bucket=bucket,
            Prefix=f"{prefix}/_delta_log/",
            Delimiter="/",
            StartAfter=f"{prefix}/_delta_log/{hint['version']:020d}-",
        )

    times = timed(raw_poll, reps)
    row("server floor: GET + LIST StartAfter (boto3)", Counter({"GET": 1, "LIST": 1}), times, "-")

    # 5. contrast: the whole log listed without the hint
    store = FsspecLogStore(uri, via_proxy)
    counts, listing = counted(lambda: store.list_from(f"{uri}/_delta_log", ""))
    direct_store = FsspecLogStore(uri, direct)
    times = timed(lambda: direct_store.list_from(f"{uri}/_delta_log", ""), reps)
    row("whole _delta_log listing (no hint; contrast)", counts, times, f"{len(listing)} objects")

    return rows


def markdown(rows: list[dict[str, Any]], reps: int) -> str:
    lines = [
        f"| log | operation | HTTP requests | median ms (min-max, {reps} reps) |",
        "|---|---|---|---|",
    ]
    for r in rows:
        counts = Counter(r["requests_by_kind"])
        lines.append(
            f"| {r['scale']} ({r['versions']:,} versions, {r['log_objects']:,} objects) | {r['operation']} "
            f"| {describe(counts)} | {r['median_ms']:.1f} ({r['min_ms']:.1f}-{r['max_ms']:.1f}) |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scales", default="log1k,log10k", help="comma-separated generate.py log scales")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--json", type=Path, help="write the rows as JSON here")
    parser.add_argument("--markdown", type=Path, help="write the Markdown table here")
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    with start_moto_server(auth=False) as server:
        with S3Proxy(server.endpoint) as proxy:
            for scale in args.scales.split(","):
                rows += bench_scale(server, proxy, scale.strip(), args.reps)
    table = markdown(rows, args.reps)
    print(table)
    if args.markdown:
        args.markdown.write_text(table)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
