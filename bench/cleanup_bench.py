"""Log cleanup on a long log: wall time and, on S3, HTTP requests (LIST pages, DeleteObjects, ...).

The log is generate.py's `log100k` (100,000 one-add streaming commits, a classic checkpoint every 10
versions: 110,000 objects, `_last_checkpoint` at 99,990).

* **local**: the log is copied (not hard-linked: mtimes are changed) and each file gets its commit's
  time (commit v at the generator's `t0 + v * 5 min`, its checkpoint a second later); the clock is the
  newest commit's time, so the default 30-day retention expires all but the last ~8,600 commits. A dry
  run, then an apply, on the copy; then the kept checkpoint's version and the latest version load.
* **s3** (moto's server on loopback, through the counting proxy of tests/support/s3_server.py): S3 keeps the
  upload time (one-second precision) as the object's mtime, so the log is uploaded in version order and
  the last checkpoint's commit after the adjusted times of the commits before it (commit times are
  made strictly increasing, and a checkpoint is kept only when its commit's time is its own; see
  `protocol/log_cleanup.py`); the clock is 32 days after the upload, so everything before checkpoint
  99,990 expires: the worst case, ~110k deletes. Requests are counted for the dry run and the apply;
  the time of one plain listing of the log is printed as the server's floor (moto scans the whole
  bucket for each 1,000-key page, so its listing of a long log is slow; S3's is not). Uploading 110k
  objects to moto takes ~20 minutes on a 2-core VM.

    .venv/bin/python bench/cleanup_bench.py [--scale log100k] [--where local,s3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent / "tests"))  # support/s3_server.py: the moto server and the proxy
sys.path.insert(0, str(BENCH_DIR))

from benchlib import ensure_table, scratch_dir  # noqa: E402
from generate import LOG_SCALES, T_BASE  # noqa: E402
from support.s3_server import S3Proxy, S3Server, boto3_client, create_bucket, s3_storage_options, start_moto_server  # noqa: E402

from airflow_delta_provider.delta import DeltaLog  # noqa: E402
from airflow_delta_provider.delta.maintenance.log_cleanup import cleanup_log  # noqa: E402
from airflow_delta_provider.delta.protocol.history import monotonize  # noqa: E402
from airflow_delta_provider.delta.storage import FsspecLogStore  # noqa: E402

DAY = 86_400_000


def commit_time(scale: str, version: int) -> int:
    p = LOG_SCALES[scale]
    return T_BASE - p.versions * p.commit_spacing_ms + version * p.commit_spacing_ms


def summary(name: str, seconds: float, result: Any, requests: Counter[str] | None = None) -> dict[str, Any]:
    row = {
        "step": name,
        "seconds": round(seconds, 2),
        "files": result.num_files,
        "bytes": result.num_bytes,
        "deleted": result.deleted,
        "kept_checkpoint_version": result.kept_checkpoint_version,
        "earliest_readable_version": result.earliest_readable_version,
        "reason": result.reason,
    }
    if requests is not None:
        row["requests"] = dict(requests)
    print(f"  {name}: {json.dumps(row)}", file=sys.stderr)
    return row


def bench_local(scale: str) -> list[dict[str, Any]]:
    src = BENCH_DIR / ".data" / scale
    work = scratch_dir() / scale
    t0 = time.perf_counter()
    shutil.copytree(src / "_delta_log", work / "_delta_log", copy_function=shutil.copy2)
    for entry in os.scandir(work / "_delta_log"):
        if entry.name[:20].isdigit():
            ns = (commit_time(scale, int(entry.name[:20])) + (1000 if "checkpoint" in entry.name else 0)) * 1_000_000
            os.utime(entry.path, ns=(ns, ns))
    print(f"{scale} local: copied and aged in {time.perf_counter() - t0:.1f}s ({work})", file=sys.stderr)
    now = commit_time(scale, LOG_SCALES[scale].versions - 1)
    rows = []
    try:
        for apply in (False, True):
            DeltaLog.clear_cache()
            t0 = time.perf_counter()
            result = cleanup_log(work, apply=apply, clock=lambda: now)
            rows.append(summary(f"local {'apply' if apply else 'dry run'}", time.perf_counter() - t0, result))
        log = DeltaLog(str(work))
        assert log.update().version == LOG_SCALES[scale].versions - 1
        assert log.snapshot_at(result.earliest_readable_version).version == result.earliest_readable_version
    finally:
        shutil.rmtree(work.parent)
    return rows


def upload(server: S3Server, local: Path, bucket: str, prefix: str, last_checkpoint: int) -> float:
    """Upload `_delta_log` in version order; the files from `last_checkpoint` on once the adjusted time
    of the commit before it has passed (so its commit keeps its own, one-second-precision, time)."""
    s3 = boto3_client(server)
    create_bucket(server, bucket)
    files = sorted(p for p in (local / "_delta_log").iterdir() if p.is_file())
    head = [p for p in files if not p.name[:20].isdigit() or int(p.name[:20]) < last_checkpoint]
    early = set(head)
    tail = [p for p in files if p not in early and p.name != "_last_checkpoint"]
    hint = [p for p in files if p.name == "_last_checkpoint"]

    def put(p: Path) -> None:
        s3.put_object(Bucket=bucket, Key=f"{prefix}/_delta_log/{p.name}", Body=p.read_bytes())

    t0 = time.perf_counter()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(put, [p for p in head if p.name != "_last_checkpoint"]))
    store = FsspecLogStore(f"s3://{bucket}/{prefix}", s3_storage_options(server))
    listed = store.list_from(f"s3://{bucket}/{prefix}/_delta_log")
    commits = sorted((int(f.name[:20]), f.modification_time) for f in listed if f.name.endswith(".json"))
    wait_until = (monotonize(commits)[-1][1] + 2000) / 1000
    time.sleep(max(0.0, wait_until - time.time()))
    for p in [*tail, *hint]:
        put(p)
    return time.perf_counter() - t0


def bench_s3(scale: str) -> list[dict[str, Any]]:
    manifest = ensure_table(scale)
    local = BENCH_DIR / ".data" / scale
    rows = []
    with start_moto_server(auth=False) as server, S3Proxy(server.endpoint) as proxy:
        bucket, prefix = f"cleanup-{scale.lower()}", "table"
        seconds = upload(server, local, bucket, prefix, manifest["checkpoint_version"])
        print(f"{scale} s3: uploaded {manifest['log_files']} objects in {seconds:.1f}s", file=sys.stderr)
        uri = f"s3://{bucket}/{prefix}"
        options = s3_storage_options(server, proxy.endpoint)
        now = int(time.time() * 1000) + 32 * DAY
        t0 = time.perf_counter()
        listed = len(FsspecLogStore(uri, s3_storage_options(server)).list_from(f"{uri}/_delta_log"))
        floor = time.perf_counter() - t0
        print(f"  s3 floor: one plain listing of {listed} objects takes {floor:.1f}s", file=sys.stderr)
        rows.append({"step": "s3 plain listing (floor)", "seconds": round(floor, 2), "files": listed})
        for apply in (False, True):
            DeltaLog.clear_cache()
            proxy.reset()
            t0 = time.perf_counter()
            result = cleanup_log(uri, storage_options=options, apply=apply, clock=lambda: now)
            seconds = time.perf_counter() - t0
            counts: Counter[str] = Counter()
            for r in proxy.snapshot():
                kind = "LIST" if r.is_list else "DeleteObjects" if r.is_delete_objects else r.method
                counts[kind] += 1
            rows.append(summary(f"s3 {'apply' if apply else 'dry run'}", seconds, result, counts))
        log = DeltaLog(uri, storage_options=s3_storage_options(server))
        assert log.update().version == manifest["version"]
        left = boto3_client(server).list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/_delta_log/")["KeyCount"]
        print(f"  s3: {left} objects left in _delta_log", file=sys.stderr)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", default="log100k", choices=sorted(LOG_SCALES))
    parser.add_argument("--where", default="local,s3")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    ensure_table(args.scale)
    rows: list[dict[str, Any]] = []
    where = {w.strip() for w in args.where.split(",")}
    if "local" in where:
        rows += bench_local(args.scale)
    if "s3" in where:
        if not hasattr(FsspecLogStore, "delete_many"):
            print("FsspecLogStore.delete_many is missing: S3 apply cannot run", file=sys.stderr)
        rows += bench_s3(args.scale)
    print(json.dumps(rows, indent=1))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
