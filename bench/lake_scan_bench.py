"""The lake scan at scale (issue 26): `delta.lake.scan` over N tables, each a classic checkpoint of F active files
and a tail of C commits after it, locally and on the loopback S3 server (moto, tests/support/s3_server.py).

For each store it reports seconds per table and requests per table, against two floors measured the same way
(same tables, same thread count):

* `list floor`: listing every `_delta_log` once (the issue's floor);
* `I/O floor`: that listing plus reading, as raw bytes without parsing, exactly what a log-only health needs:
  the checkpoint (one GET) and each commit after it (one GET each).

Requests on S3 are counted by the counting proxy (`S3Proxy`), by kind; the expected set per table is the listing
page(s), the checkpoint's reads (footer and row groups) and one GET per commit, nothing more. Locally the
library's own counts (`TableHealth.requests`) are reported.

The template log is generated directly with pyarrow (bench/generate.py's checkpoint writer, the Delta checkpoint
schema), not through delta-rs writes, then copied to each table (the tables are identical; on disk each is its own
copy, so the page cache holds N copies). The runs are warm (the floor runs first and fills the cache).

    .venv/bin/python bench/lake_scan_bench.py --tables 1000 --files 1000 [--s3] [--markdown out.md]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent / "tests"))
sys.path.insert(0, str(BENCH_DIR))

import generate as gen  # noqa: E402
from benchlib import machine_info  # noqa: E402

from airflow_delta_provider.delta.lake import scan  # noqa: E402

DATA = BENCH_DIR / ".data" / "lake"
CHECKPOINT_VERSION = 10
BASE_MS = 1_748_736_000_000  # 2025-06-01T00:00:00Z


def template(files: int, commits: int) -> Path:
    """A table's `_delta_log`: a checkpoint at version 10 with `files` adds, then `commits` appends of one file."""
    out = DATA / f"template_{files}_{commits}"
    marker = out / "_done"
    if marker.exists():
        return out
    shutil.rmtree(out, ignore_errors=True)
    log = out / "_delta_log"
    log.mkdir(parents=True)
    rng = random.Random(files * 7 + commits)
    maker = gen.Files(rng)
    dates = [f"2025-05-{d:02d}" for d in range(1, 31)]
    adds = [maker.new(dates[i % len(dates)], BASE_MS - i) for i in range(files)]
    meta = gen.metadata_action("lake-bench", {}, BASE_MS - 86_400_000)
    gen.write_checkpoint(log, CHECKPOINT_VERSION, metadata=meta, txns={}, adds=adds, removes=[])
    for i in range(1, commits + 1):
        v = CHECKPOINT_VERSION + i
        ts = BASE_MS + i * 60_000
        info = gen.commit_info(ts, "WRITE", v - 1, {"mode": "Append"}, {"numFiles": 1})
        gen.write_commit(log, v, [info, gen.add_action(maker.new("2025-06-01", ts))])
    marker.write_text("")
    return out


def build_lake(root: Path, tables: int, tmpl: Path) -> list[Path]:
    """`tables` copies of the template's log under `root` (reused when already there)."""
    paths = [root / f"t{i:05d}" for i in range(tables)]
    for p in paths:
        if not (p / "_delta_log" / "_last_checkpoint").exists():
            shutil.copytree(tmpl / "_delta_log", p / "_delta_log", dirs_exist_ok=True)
    return paths


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def local_floors(paths: list[Path], threads: int) -> tuple[float, float]:
    def listing(p: Path) -> list[str]:
        return os.listdir(p / "_delta_log")

    def io(p: Path) -> int:
        names = listing(p)
        log = p / "_delta_log"
        cp = max(n for n in names if n.endswith(".checkpoint.parquet"))
        tail = [n for n in names if n.endswith(".json") and n > cp[:20]]
        return sum(len((log / n).read_bytes()) for n in [cp, *tail])

    with ThreadPoolExecutor(threads) as pool:
        list_s, _ = timed(lambda: list(pool.map(listing, paths)))
        io_s, _ = timed(lambda: list(pool.map(io, paths)))
    return list_s, io_s


def run_scan(uris: list[str], threads: int, options: dict[str, Any] | None) -> tuple[float, Any]:
    return timed(lambda: scan(uris, storage_options=options, concurrency=threads, now_ms=BASE_MS + 86_400_000))


def per_table(result: Any) -> dict[str, float]:
    counts: Counter[str] = Counter()
    for h in result.healths:
        counts.update(h.requests)
    n = max(len(result.healths), 1)
    return {k: round(v / n, 2) for k, v in sorted(counts.items())}


def bench_local(paths: list[Path], threads: int) -> dict[str, Any]:
    local_floors(paths, threads)  # warm the page cache
    list_s, io_s = local_floors(paths, threads)
    uris = [str(p) for p in paths]
    scan_s, result = run_scan(uris, threads, None)
    assert not result.errors, result.errors[:3]
    return {
        "store": "local",
        "tables": len(paths),
        "list_floor_s": list_s,
        "io_floor_s": io_s,
        "scan_s": scan_s,
        "requests_per_table": per_table(result),
    }


def bench_s3(paths: list[Path], threads: int) -> dict[str, Any]:
    from support.s3_server import S3Proxy, boto3_client, create_bucket, s3_storage_options, start_moto_server

    bucket = "lake"
    with start_moto_server(auth=False) as server:
        create_bucket(server, bucket)
        client = boto3_client(server)
        objects = [(p.name, f) for p in paths for f in sorted((p / "_delta_log").iterdir())]
        upload_s, _ = timed(
            lambda: list(
                ThreadPoolExecutor(16).map(
                    lambda o: client.put_object(
                        Bucket=bucket, Key=f"{o[0]}/_delta_log/{o[1].name}", Body=o[1].read_bytes()
                    ),
                    objects,
                )
            )
        )

        def listing(name: str) -> list[dict[str, Any]]:
            out: list[dict[str, Any]] = []
            for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{name}/_delta_log/"):
                out.extend(page.get("Contents", []))
            return out

        def io(name: str) -> int:
            keys = [o["Key"] for o in listing(name)]
            cp = max(k for k in keys if k.endswith(".checkpoint.parquet"))
            base = cp.rsplit("/", 1)[1][:20]
            tail = [k for k in keys if k.endswith(".json") and k.rsplit("/", 1)[1] > base]
            return sum(len(client.get_object(Bucket=bucket, Key=k)["Body"].read()) for k in [cp, *tail])

        names = [p.name for p in paths]
        with ThreadPoolExecutor(threads) as pool:
            list_s, _ = timed(lambda: list(pool.map(listing, names)))
            io_s, _ = timed(lambda: list(pool.map(io, names)))
        uris = [f"s3://{bucket}/{n}" for n in names]
        options = s3_storage_options(server)
        scan_s, result = run_scan(uris, threads, options)
        assert not result.errors, result.errors[:3]
        with S3Proxy(server.endpoint) as proxy:
            counted = scan(uris, storage_options=s3_storage_options(server, proxy.endpoint), concurrency=threads)
            assert not counted.errors, counted.errors[:3]
            seen = proxy.snapshot()
        kinds: Counter[str] = Counter()
        for r in seen:
            if r.is_list:
                kinds["LIST"] += 1
            elif r.method == "GET" and "range" in r.headers:
                kinds["GET range (checkpoint)" if r.path.endswith(".parquet") else "GET range"] += 1
            elif r.method == "GET":
                kind = "GET _last_checkpoint" if r.path.endswith("_last_checkpoint") else "GET"
                kinds[kind + (" commit" if r.path.endswith(".json") else "")] += 1
            else:
                kinds[r.method + (" checkpoint" if r.path.endswith(".parquet") else "")] += 1
    n = len(paths)
    return {
        "store": "s3 (moto, loopback)",
        "tables": n,
        "upload_s": upload_s,
        "list_floor_s": list_s,
        "io_floor_s": io_s,
        "scan_s": scan_s,
        "requests_per_table": per_table(result),
        "http_per_table": {k: round(v / n, 2) for k, v in sorted(kinds.items())},
        "http_total_per_table": round(sum(kinds.values()) / n, 2),
    }


def markdown(rows: list[dict[str, Any]], files: int, commits: int) -> str:
    lines = [
        f"Tables of {files:,} active files in one checkpoint and {commits} commits after it.",
        "",
        "| store | tables | scan s | ms/table | list floor s | I/O floor s | scan / list floor | scan / I/O floor "
        "| requests per table |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        reqs = r.get("http_per_table") or r["requests_per_table"]
        lines.append(
            f"| {r['store']} | {r['tables']} | {r['scan_s']:.2f} | {1000 * r['scan_s'] / r['tables']:.1f} "
            f"| {r['list_floor_s']:.2f} | {r['io_floor_s']:.2f} | {r['scan_s'] / r['list_floor_s']:.1f}x "
            f"| {r['scan_s'] / r['io_floor_s']:.2f}x | {json.dumps(reqs)} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=int, default=1000)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--commits", type=int, default=5)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--s3", action="store_true", help="also on the loopback S3 server")
    parser.add_argument("--s3-tables", type=int, default=None, help="tables on S3 (default: --tables)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    tmpl = template(args.files, args.commits)
    root = DATA / f"lake_{args.files}_{args.commits}"
    paths = build_lake(root, args.tables, tmpl)
    print(f"generated {args.tables} tables in {time.perf_counter() - t0:.1f} s", flush=True)
    rows = [bench_local(paths, args.threads)]
    print(json.dumps(rows[-1]), flush=True)
    if args.s3:
        rows.append(bench_s3(paths[: args.s3_tables or args.tables], args.threads))
        print(json.dumps(rows[-1]), flush=True)
    text = markdown(rows, args.files, args.commits)
    print(text)
    print(machine_info())
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    if args.markdown:
        args.markdown.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
