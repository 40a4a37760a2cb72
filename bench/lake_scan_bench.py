"""The lake scan at scale (issue 26): `delta.lake.scan` over N tables, each a classic checkpoint of F active files
and a tail of C commits after it, locally and on the loopback S3 server (moto, tests/support/s3_server.py).

For each store it reports, per table, wall and CPU milliseconds (this process: `getrusage`; on S3 the moto
server's CPU is reported apart) and requests, for two scans (`row_counts=True`, the default, and
`row_counts=False`, which leaves the checkpoint's `add.stats` unread) against floors measured the same way (same
tables, same thread count, each a pass over every table):

* `list floor`: listing every `_delta_log` once (the issue's floor);
* `I/O floor`: that listing plus reading, as raw bytes without parsing, what a log-only health reads: the
  checkpoint (one GET) and each commit after it (one GET each; on S3 all at once after the listing, so a
  table costs two round trips);
* `health floor`: the listing, the commits' raw bytes and pyarrow decoding exactly the checkpoint columns the
  health needs (`HEALTH_COLUMNS`: the file actions' path, size, partition values, deletion vector and stats,
  the tombstones' fields, metaData and protocol), nothing else; `lean floor`: the same without `add.stats`
  (what `row_counts=False` needs).

`--s3-latency-ms L` runs the S3 phases through a proxy that holds every request L ms first (requests overlap),
as a store with that first-byte latency (moto on loopback has almost none; its cost is its own CPU).
Requests on S3 are counted by the counting proxy (`S3Proxy`), by kind; the expected set per table is the listing
page(s), the checkpoint's reads (footer and row groups) and one GET per commit, nothing more. Locally the
library's own counts (`TableHealth.requests`) are reported. `--profile N` also times (CPU, one thread, N tables)
where one table's scan goes: listing, checkpoint decode, snapshot, the health's counting.

The template log is generated directly with pyarrow (bench/generate.py's checkpoint writer, the Delta checkpoint
schema), not through delta-rs writes, then copied to each table (the tables are identical; on disk each is its own
copy, so the page cache holds N copies). The runs are warm (the floors run first and fill the cache).

    .venv/bin/python bench/lake_scan_bench.py --tables 1000 --files 10000 [--s3 --s3-tables 100] [--profile 20]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import resource
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
from benchlib import loadavg, machine_info  # noqa: E402

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


#: What a log-only health needs of a checkpoint (as `pyarrow.parquet` column paths; absent ones are skipped).
HEALTH_COLUMNS = (
    "metaData",
    "protocol",
    "add.path",
    "add.size",
    "add.partitionValues",
    "add.deletionVector",
    "add.stats",
    "remove.path",
    "remove.size",
    "remove.partitionValues",
    "remove.deletionTimestamp",
    "remove.deletionVector",
)
LEAN_COLUMNS = tuple(c for c in HEALTH_COLUMNS if c != "add.stats")
#: Concurrent GETs of the S3 floors (a table's checkpoint and commits are fetched at once after its listing).
FLOOR_GETS = 16


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def measured(fn: Callable[[], Any], server_cpu: Callable[[], float] | None = None) -> tuple[dict[str, Any], Any]:
    """Wall and CPU seconds of `fn` (this process; `server_cpu`'s too when given), the 1-minute load."""
    c0, s0 = cpu_seconds(), server_cpu() if server_cpu else 0.0
    wall, out = timed(fn)
    m = {"wall_s": round(wall, 3), "cpu_s": round(cpu_seconds() - c0, 3), "load1": loadavg().split()[0]}
    if server_cpu:
        m["server_cpu_s"] = round(server_cpu() - s0, 3)
    return m, out


def run_phases(
    phases: dict[str, Callable[[], Any]], repeat: int, server_cpu: Callable[[], float] | None = None
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Each phase `repeat` times, round-robin (a change of load touches every phase alike); per phase the run
    with the least wall time (with its CPU, load and the walls of every run) and its last output."""
    best: dict[str, dict[str, Any]] = {}
    outputs: dict[str, Any] = {}
    for _ in range(repeat):
        for name, fn in phases.items():
            m, outputs[name] = measured(fn, server_cpu)
            walls = [*best.get(name, {}).get("walls", []), m["wall_s"]]
            if name not in best or m["wall_s"] < best[name]["wall_s"]:
                best[name] = m
            best[name]["walls"] = walls
    return best, outputs


def decode(source: Any, columns: tuple[str, ...]) -> int:
    """Rows of `columns` (those present) decoded from a checkpoint with pyarrow: the floor's parse."""
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(source)
    names = set(pf.schema_arrow.names)
    present = []
    for c in columns:
        parent, _, child = c.partition(".")
        if parent not in names:
            continue
        ptype = pf.schema_arrow.field(parent).type
        if not child or ptype.get_field_index(child) >= 0:
            present.append(c)
    return pf.read(columns=present).num_rows


def _tail(names: list[str], cp: str) -> list[str]:
    return [n for n in names if n.endswith(".json") and n > cp[:20]]


def local_phases(paths: list[Path], pool: ThreadPoolExecutor) -> dict[str, Callable[[], Any]]:
    """The floors over `paths` (see the module docstring) on `pool`."""

    def listing(p: Path) -> list[str]:
        return os.listdir(p / "_delta_log")

    def raw(p: Path) -> int:
        names = listing(p)
        log = p / "_delta_log"
        cp = max(n for n in names if n.endswith(".checkpoint.parquet"))
        return sum(len((log / n).read_bytes()) for n in [cp, *_tail(names, cp)])

    def health(p: Path, columns: tuple[str, ...]) -> int:
        names = listing(p)
        log = p / "_delta_log"
        cp = max(n for n in names if n.endswith(".checkpoint.parquet"))
        return decode(str(log / cp), columns) + sum(len((log / n).read_bytes()) for n in _tail(names, cp))

    return {
        "list floor": lambda: list(pool.map(listing, paths)),
        "I/O floor": lambda: list(pool.map(raw, paths)),
        "health floor": lambda: list(pool.map(lambda p: health(p, HEALTH_COLUMNS), paths)),
        "lean floor": lambda: list(pool.map(lambda p: health(p, LEAN_COLUMNS), paths)),
    }


def run_scan(uris: list[str], threads: int, options: dict[str, Any] | None, row_counts: bool = True) -> Any:
    result = scan(
        uris, storage_options=options, concurrency=threads, now_ms=BASE_MS + 86_400_000, row_counts=row_counts
    )
    assert not result.errors, result.errors[:3]
    return result


def scan_phases(uris: list[str], threads: int, options: dict[str, Any] | None) -> dict[str, Callable[[], Any]]:
    """The scan with row counts (the default) and without (`row_counts=False`), after a scan of a few tables in
    each mode (imports, clients and connections are set up outside the measured runs)."""
    for row_counts in (True, False):
        run_scan(uris[:4], threads, options, row_counts)
    return {
        "scan": lambda: run_scan(uris, threads, options, True),
        "scan, row_counts=False": lambda: run_scan(uris, threads, options, False),
    }


def per_table(result: Any) -> dict[str, float]:
    counts: Counter[str] = Counter()
    for h in result.healths:
        counts.update(h.requests)
    n = max(len(result.healths), 1)
    return {k: round(v / n, 2) for k, v in sorted(counts.items())}


def bench_local(paths: list[Path], threads: int, repeat: int) -> dict[str, Any]:
    with ThreadPoolExecutor(threads) as pool:
        phases = local_phases(paths, pool)
        for fn in phases.values():  # warm the page cache
            fn()
        phases.update(scan_phases([str(p) for p in paths], threads, None))
        best, outputs = run_phases(phases, repeat)
    return {
        "store": "local",
        "tables": len(paths),
        "phases": best,
        "requests_per_table": per_table(outputs["scan"]),
        "peak_rss_mib": round(peak_rss_mib(), 1),
    }


def _process_cpu(pid: int) -> float:
    """CPU seconds of process `pid` (utime + stime, /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children_cpu() -> float:
    """CPU seconds of this process's running children (the moto server)."""
    total = 0.0
    me = str(os.getpid())
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
            if text.rsplit(")", 1)[1].split()[1] == me:
                total += _process_cpu(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    return total


def _kinds(seen: list[Any]) -> Counter[str]:
    """HTTP requests seen by the proxy, by kind."""
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
    return kinds


def _delayed_proxy(base: type) -> type:
    """`S3Proxy` whose every request first waits `latency_s` (in its own handler thread: requests overlap)."""

    class Delayed(base):  # type: ignore[misc, valid-type]
        latency_s = 0.0

        def _decide(self, seen: Any) -> None:
            time.sleep(self.latency_s)

    return Delayed


def bench_s3(paths: list[Path], threads: int, repeat: int, latency_ms: float = 0) -> dict[str, Any]:
    from support.s3_server import (
        S3Proxy,
        boto3_client,
        create_bucket,
        s3_storage_options,
        start_moto_server,
    )

    bucket = "lake"
    with start_moto_server(auth=False) as server:
        create_bucket(server, bucket)
        client = boto3_client(server)

        def floor_client(endpoint: str) -> Any:
            import boto3
            from botocore.config import Config

            return boto3.client(
                "s3",
                endpoint_url=endpoint,
                region_name=server.region,
                aws_access_key_id=server.access_key,
                aws_secret_access_key=server.secret_key,
                config=Config(max_pool_connections=FLOOR_GETS + threads),
            )

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

        gets = ThreadPoolExecutor(FLOOR_GETS)  # the floors' GETs after a listing, all at once

        def get(key: str) -> bytes:
            return client.get_object(Bucket=bucket, Key=key)["Body"].read()

        def after_listing(name: str) -> tuple[str, list[str]]:
            keys = [o["Key"] for o in listing(name)]
            cp = max(k for k in keys if k.endswith(".checkpoint.parquet"))
            base = cp.rsplit("/", 1)[1][:20]
            return cp, [k for k in keys if k.endswith(".json") and k.rsplit("/", 1)[1] > base]

        def io_floor(name: str) -> int:
            cp, tail = after_listing(name)
            return sum(len(b) for b in gets.map(get, [cp, *tail]))

        def health(name: str, columns: tuple[str, ...]) -> int:
            cp, tail = after_listing(name)
            data, *commits = gets.map(get, [cp, *tail])
            return decode(io.BytesIO(data), columns) + sum(len(b) for b in commits)

        names = [p.name for p in paths]
        uris = [f"s3://{bucket}/{n}" for n in names]
        with contextlib.ExitStack() as stack, ThreadPoolExecutor(threads) as pool, gets:
            endpoint = server.endpoint
            if latency_ms:  # every request waits first, as on a store with that latency to the first byte
                delayed = stack.enter_context(_delayed_proxy(S3Proxy)(server.endpoint))
                delayed.latency_s = latency_ms / 1000
                endpoint = delayed.endpoint
            client = floor_client(endpoint)
            phases: dict[str, Callable[[], Any]] = {
                "list floor": lambda: list(pool.map(listing, names)),
                "I/O floor": lambda: list(pool.map(io_floor, names)),
                "health floor": lambda: list(pool.map(lambda n: health(n, HEALTH_COLUMNS), names)),
                "lean floor": lambda: list(pool.map(lambda n: health(n, LEAN_COLUMNS), names)),
                **scan_phases(uris, threads, s3_storage_options(server, endpoint)),
            }
            best, outputs = run_phases(phases, repeat, _children_cpu)
        result = outputs["scan"]
        http: dict[str, dict[str, float]] = {}
        for name, row_counts in (("scan", True), ("scan, row_counts=False", False)):
            with S3Proxy(server.endpoint) as proxy:
                options = s3_storage_options(server, proxy.endpoint)
                counted = scan(uris, storage_options=options, concurrency=threads, row_counts=row_counts)
                assert not counted.errors, counted.errors[:3]
                http[name] = {k: round(v / len(paths), 2) for k, v in sorted(_kinds(proxy.snapshot()).items())}
    n = len(paths)
    return {
        "store": "s3 (moto, loopback)" + (f", +{latency_ms:g} ms per request" if latency_ms else ""),
        "tables": n,
        "upload_s": round(upload_s, 1),
        "phases": best,
        "requests_per_table": per_table(result),
        "peak_rss_mib": round(peak_rss_mib(), 1),
        "http_per_table": http,
    }


def profile(paths: list[Path]) -> dict[str, float]:
    """CPU milliseconds per table (one thread, warm) of each part of a local scan, over `paths`."""
    from airflow_delta_provider.delta.delta_log import DeltaLog
    from airflow_delta_provider.delta.engines.local import EAGER_STATS, LocalEngine
    from airflow_delta_provider.delta.lake import table_health
    from airflow_delta_provider.delta.lake.health import HEALTH_FILE_FIELDS, _file_columns

    def log(p: Path) -> Path:
        return p / "_delta_log"

    def cp(p: Path) -> str:
        return str(max(log(p).glob("*.checkpoint.parquet")))

    def update(p: Path, lazy: int, fields: tuple[str, ...] | None = None) -> Any:
        engine = LocalEngine(lazy_stats_bytes=lazy, threaded=False, memory_limit_bytes=None, file_fields=fields)
        return DeltaLog(str(p), engine=engine).update()

    snap = update(paths[0], EAGER_STATS)
    physical = snap.physical_partition_columns
    parts: dict[str, Callable[[Path], Any]] = {
        "listing": lambda p: os.listdir(log(p)),
        "commits, raw bytes": lambda p: [f.read_bytes() for f in sorted(log(p).glob("*.json"))],
        "checkpoint, health columns (pyarrow)": lambda p: decode(cp(p), HEALTH_COLUMNS),
        "checkpoint, health columns but add.stats (pyarrow)": lambda p: decode(cp(p), LEAN_COLUMNS),
        "checkpoint, add.stats alone (pyarrow)": lambda p: decode(cp(p), ("add.stats",)),
        "checkpoint, every column (pyarrow)": lambda p: _read_all(cp(p)),
        "snapshot (listing, checkpoint, commits, state), stats read": lambda p: update(p, EAGER_STATS),
        "snapshot, stats unread": lambda p: update(p, 0),
        "snapshot as health reads it (file actions projected onto HEALTH_FILE_FIELDS), stats read": lambda p: update(
            p, EAGER_STATS, HEALTH_FILE_FIELDS
        ),
        "health counting (numRecords, partitions, sizes; on a loaded snapshot)": lambda p: _file_columns(
            snap, physical
        ),
        "table_health": lambda p: table_health(str(p), now_ms=BASE_MS + 86_400_000),
        "table_health(row_counts=False)": lambda p: table_health(str(p), now_ms=BASE_MS + 86_400_000, row_counts=False),
    }
    out = {}
    for name, fn in parts.items():
        fn(paths[0])
        c0 = cpu_seconds()
        for p in paths:
            fn(p)
        out[name] = round(1000 * (cpu_seconds() - c0) / len(paths), 2)
    out["load1"] = float(loadavg().split()[0])
    return out


def _read_all(path: str) -> int:
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).read().num_rows


def markdown(rows: list[dict[str, Any]], files: int, commits: int) -> str:
    lines = [
        f"Tables of {files:,} active files in one checkpoint and {commits} commits after it; per table: wall ms, "
        "this process's CPU ms (moto's apart), and each phase's ratio to the floors (wall); each phase the fastest of "
        "its runs (round-robin).",
        "",
        "| store | tables | phase | wall ms/table | CPU ms/table | server CPU ms/table | load1 "
        "| / list floor | / health floor | / lean floor | CPU / health floor | CPU / lean floor |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        n, ph = r["tables"], r["phases"]
        for name, m in ph.items():
            server = f"{1000 * m['server_cpu_s'] / n:.1f}" if "server_cpu_s" in m else ""
            ratios = " | ".join(
                [
                    *(
                        f"{m['wall_s'] / ph[f]['wall_s']:.2f}x" if ph[f]["wall_s"] else "-"
                        for f in ("list floor", "health floor", "lean floor")
                    ),
                    *(
                        f"{m['cpu_s'] / ph[f]['cpu_s']:.2f}x" if ph[f]["cpu_s"] else "-"
                        for f in ("health floor", "lean floor")
                    ),
                ]
            )
            lines.append(
                f"| {r['store']} | {n} | {name} | {1000 * m['wall_s'] / n:.2f} | {1000 * m['cpu_s'] / n:.2f} "
                f"| {server} | {m['load1']} | {ratios} |"
            )
    lines.append("")
    for r in rows:
        reqs = r.get("http_per_table") or {"scan": r["requests_per_table"]}
        lines.append(f"Requests per table, {r['store']}: {json.dumps(reqs)}; peak RSS {r['peak_rss_mib']} MiB.")
        if "profile_cpu_ms" in r:
            lines.append("")
            parts = json.dumps(r["profile_cpu_ms"])
            lines.append(f"Where one table's scan goes (CPU ms per table, one thread): {parts}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=int, default=1000)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--commits", type=int, default=5)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--s3", action="store_true", help="also on the loopback S3 server")
    parser.add_argument("--s3-tables", type=int, default=None, help="tables on S3 (default: --tables)")
    parser.add_argument(
        "--s3-latency-ms", type=float, default=0, help="S3 phases through a proxy that delays every request"
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs of each phase, round-robin (the fastest kept)")
    parser.add_argument("--profile", type=int, default=0, help="time the parts of a scan over this many tables")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--from-json", type=Path, help="only print the markdown of an earlier --json")
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args(argv)
    if args.from_json:
        print(markdown(json.loads(args.from_json.read_text()), args.files, args.commits))
        return 0
    t0 = time.perf_counter()
    tmpl = template(args.files, args.commits)
    root = DATA / f"lake_{args.files}_{args.commits}"
    paths = build_lake(root, args.tables, tmpl)
    print(f"generated {args.tables} tables in {time.perf_counter() - t0:.1f} s", flush=True)
    rows = [bench_local(paths, args.threads, args.repeat)]
    if args.profile:
        rows[0]["profile_cpu_ms"] = profile(paths[: args.profile])
    print(json.dumps(rows[-1]), flush=True)
    if args.s3:
        rows.append(bench_s3(paths[: args.s3_tables or args.tables], args.threads, args.repeat, args.s3_latency_ms))
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
