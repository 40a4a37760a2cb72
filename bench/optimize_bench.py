"""OPTIMIZE (bin-packing compaction), whole process: our local engine vs delta-rs `optimize.compact()`.

    .venv/bin/python bench/optimize_bench.py                       # 2,000 files, 3 reps, Spark at 1,000 and 2,000
    .venv/bin/python bench/optimize_bench.py --files 200 --reps 1 --spark-files 100,200 --max-load 100
        --max-busy 1   # a smoke run (one command line)
    .venv/bin/python bench/optimize_bench.py --no-spark --json /tmp/o.json --markdown /tmp/o.md

The table: `--files` small files (default 2,000 of ~100 KiB) in `--partitions` (20) partitions, written
once by delta-rs (`write_deltalake` appends, one file per partition each: a streaming-style table with
stats and a delta-rs checkpoint) and cached under `bench/.data/optimize-<files>x<partitions>/`.

Every timed command runs in a fresh process on its own identical copy (`cp -a`, untimed) and compacts
with the same target size (`--target-mb`, 256 MiB: one output file per partition for both):

* **ours**: `python -c` calling `maintenance.optimize.optimize(path, target_size=...)` (local engine:
  pyarrow on a thread pool);
* **ours CLI**: `python -m airflow_delta_provider.cli optimize --apply --json --target-size-mb N` (the `deltalog` face);
* **ours (baseline)**, with `--baseline DIR`: "ours" on another copy of the library (a directory holding
  `airflow_delta_provider/`, e.g. `git archive <commit> airflow_delta_provider | tar -x -C DIR`), in the same
  rounds, so that a change is measured against what it changes under the same load;
* **delta-rs**: `python -c` calling `DeltaTable(path).optimize.compact(target_size=...)`;
* floors, for context: **cat** (every data file read once to /dev/null: the bytes in) and **pyarrow**
  (each partition's files read one by one with `pq.read_table`, concatenated and written as one snappy
  file, two partitions at a time: the same rewrite with no Delta log, no stats, no fsync).

Rounds are round-robin with the order rotated each round; medians of `--reps` are reported. Wall time
is spawn to exit; CPU (user+sys) and peak RSS come from `os.wait4` (the child and the descendants it
waited for), and the process tree's RSS and CPU are also sampled every 0.2 s (a JVM a Python driver
does not wait for is counted only there). "others' CPU" is the share of the machine's CPU time that
other processes used during the run (from /proc/stat): wall times with a high share are not comparable.
After each run the copy is checked, untimed, with delta-rs (`SELECT count(*), sum(checksum)`, active
files, partitions, last operation): ours and delta-rs must give the source's rows and checksum and the
same number of files.

Spark (`python -m airflow_delta_provider.cli optimize --engine spark --master local[2]`) runs once per
size in `--spark-files` (default 500, 1,000 and 2,000 files of the same size), to show that its time
beyond the fixed JVM start grows linearly with bytes (a least-squares line and each size's residual);
the local engine is timed at the same sizes. A run that other processes disturbed (more than
`--max-others` of the CPU) is repeated, up to `--attempts` runs.

`--s3-stores` measures instead what writing finished files on a background thread (`BackgroundStores`)
does on an object store: the table is uploaded (untimed) to moto's standalone server on 127.0.0.1
(tests/support/s3_server.py) under a fresh prefix per run, and "ours" compacts it there, with the
background writes and with each file written by the bin thread that encoded it (`BackgroundStores`
replaced in the child by an inline stand-in), interleaved, `--reps` runs each. The server's own CPU is
reported beside the child's (it runs on the same cores). The credentials go to the child in its
environment, never on its command line or in the report.

The machine is shared: before each timed command the run waits (up to `--max-wait` s) until the
1-minute load average is below `--max-load` and other processes use less than `--max-busy` of the CPUs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import benchlib

MIB = 2**20

# -- child programs (argv: table path, then program-specific values); each prints one JSON line ------------

OURS = """
import json, sys
from airflow_delta_provider.delta.maintenance.optimize import optimize
d = optimize(sys.argv[1], target_size=int(sys.argv[2])).to_dict()
print(json.dumps({"version": d["version"], "removed": d["num_files_removed"], "added": d["num_files_added"]}))
"""

DELTARS = """
import json, sys
from deltalake import DeltaTable
m = DeltaTable(sys.argv[1]).optimize.compact(target_size=int(sys.argv[2]))
print(json.dumps({"removed": m["numFilesRemoved"], "added": m["numFilesAdded"]}))
"""

PYARROW_FLOOR = """
import json, os, sys
from concurrent.futures import ThreadPoolExecutor
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
root = sys.argv[1]
parts = sorted(d for d in os.listdir(root) if not d.startswith(("_", ".")))
def rewrite(part):
    d = os.path.join(root, part)
    files = [os.path.join(d, f) for f in sorted(os.listdir(d)) if f.endswith(".parquet")]
    t = pa.concat_tables([pq.read_table(f) for f in files])
    pq.write_table(t, os.path.join(d, "compacted.floor.parquet"), compression="snappy")
    return t.num_rows, pc.sum(t["checksum"]).as_py()
with ThreadPoolExecutor(2) as pool:
    out = list(pool.map(rewrite, parts))
print(json.dumps({"rows": sum(n for n, _ in out), "checksum": sum(s for _, s in out), "added": len(out)}))
"""

VERIFY = """
import json, sys
import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder
dt = DeltaTable(sys.argv[1])
reader = QueryBuilder().register("t", dt).execute("SELECT count(*) AS n, sum(checksum) AS s FROM t")
n, s = pa.table(reader.read_all()).to_pylist()[0].values()
adds = pa.table(dt.get_add_actions(flatten=True))
print(json.dumps({"version": dt.version(), "rows": n, "checksum": s, "files": adds.num_rows,
                  "partitions": len(set(adds.column("partition.part").to_pylist())),
                  "last_operation": dt.history(1)[0]["operation"]}))
"""

GENERATE = """
import json, sys
import numpy as np
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
path, files, partitions, rows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(2024)
letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype="S1")
total, checksum, start = 0, 0, 0
for _ in range(files // partitions):
    n = rows * partitions
    t = pa.table({
        "id": pa.array(np.arange(start, start + n, dtype=np.int64)),
        "part": pa.array([f"p{i:02d}" for i in range(partitions) for _ in range(rows)]),
        "amount": pa.array(rng.normal(100, 30, n).round(2)),
        "qty": pa.array(rng.integers(0, 1000, n, dtype=np.int32)),
        "name": pa.array(rng.choice(letters, size=(n, 8)).view("S8").ravel().astype(str)),
        "ts": pa.array(np.datetime64("2025-01-01") + rng.integers(0, 864 * 10**8, n).astype("timedelta64[us]"),
                       pa.timestamp("us", tz="UTC")),
        "checksum": pa.array(rng.integers(0, 10**6, n, dtype=np.int64)),
    })
    write_deltalake(path, t, mode="append", partition_by=["part"])
    total += n
    checksum += int(t["checksum"].to_numpy().sum())
    start += n
adds = pa.table(DeltaTable(path).get_add_actions(flatten=True))
sizes = adds.column("size_bytes").to_pylist()
print(json.dumps({"files": len(sizes), "bytes": sum(sizes), "rows": total, "checksum": checksum,
                  "partitions": partitions, "mean_file_kib": sum(sizes) / len(sizes) / 1024}))
"""


#: argv: s3 uri, target size, "1" background writes / "0" each file written by its bin thread; the storage
#: options (JSON) in the environment's BENCH_S3_OPTIONS
S3_OURS = """
import json, os, sys
from concurrent.futures import Future
from airflow_delta_provider.delta import DeltaLog
from airflow_delta_provider.delta.maintenance.optimize import optimize
uri, target, background = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
if not background:
    import airflow_delta_provider.delta.engines.local as local

    class Inline:  # each finished file written by the thread that encoded it, as without BackgroundStores
        def __init__(self, *args, **kwargs): pass
        def __enter__(self): return self
        def __exit__(self, *exc): pass
        def submit(self, write):
            done = Future()
            done.set_result(write())
            return done

    local.BackgroundStores = Inline
log = DeltaLog(uri, storage_options=json.loads(os.environ["BENCH_S3_OPTIONS"]))
d = optimize(log, target_size=target).to_dict()
print(json.dumps({"version": d["version"], "removed": d["num_files_removed"], "added": d["num_files_added"]}))
"""


# -- data ---------------------------------------------------------------------------------------------------


def ensure_data(files: int, partitions: int, rows_per_file: int) -> tuple[Path, dict[str, Any]]:
    """The cached source table (generated once) and its manifest; a cached copy whose log moved on (a
    command was once run on the source itself) is not used: a fresh one is generated beside it."""
    base = benchlib.DATA / f"optimize-{files}x{partitions}-{rows_per_file}"
    src = base
    for n in range(1, 10):
        manifest = src / benchlib.MANIFEST
        if not manifest.exists():
            break
        if not (src / "_delta_log" / f"{files // partitions:020d}.json").exists():
            return src, json.loads(manifest.read_text())
        print(f"{src} was changed after it was generated; using another copy", file=sys.stderr)
        src = base.with_name(f"{base.name}-{n}")
    if src.exists():
        shutil.rmtree(src)
    print(f"generating {files} files in {partitions} partitions at {src} ...", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    out = subprocess.run(
        [benchlib.python(), "-c", GENERATE, str(src), str(files), str(partitions), str(rows_per_file)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    facts = json.loads(out.strip().splitlines()[-1])
    manifest.write_text(json.dumps(facts))
    print(f"  done in {time.perf_counter() - t0:.0f}s: {facts}", file=sys.stderr)
    return src, facts


# -- timing -------------------------------------------------------------------------------------------------


@dataclass
class Sample:
    wall: float
    cpu: float
    rss_mib: float
    tree_rss_mib: float
    payload: dict[str, Any]
    check: dict[str, Any] = field(default_factory=dict)
    load: float = 0.0
    #: share of the machine's CPU time that other processes used while this one ran
    others: float = 0.0


@dataclass
class Command:
    name: str
    argv: list[str]  # `{table}` is replaced by the copy's path
    kind: str  # "table": a Delta table checked afterwards; "floor"
    samples: list[Sample] = field(default_factory=list)
    #: run on this copy of the library instead of the run's (`--baseline`)
    library: Path | None = None

    def med(self, attr: str) -> float:
        return statistics.median(getattr(s, attr) for s in self.samples) if self.samples else float("nan")


def _tree_usage(root: int) -> tuple[int, dict[int, int]]:
    """`root` and its descendants (from /proc): total VmRSS in KiB, and CPU clock ticks per process."""
    children: dict[int, list[int]] = {}
    stats: dict[int, tuple[int, int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as fh:
                fields = fh.read().rpartition(")")[2].split()
            with open(f"/proc/{entry.name}/status") as fh:
                kib = next((int(x.split()[1]) for x in fh if x.startswith("VmRSS:")), 0)
        except (OSError, ValueError, IndexError):
            continue
        pid = int(entry.name)
        children.setdefault(int(fields[1]), []).append(pid)
        stats[pid] = (kib, int(fields[11]) + int(fields[12]))  # utime + stime
    rss, ticks, stack = 0, {}, [root]
    while stack:
        pid = stack.pop()
        if pid in stats:
            rss += stats[pid][0]
            ticks[pid] = stats[pid][1]
        stack.extend(children.get(pid, []))
    return rss, ticks


def _cpu_ticks() -> tuple[int, int]:
    """(busy, total) clock ticks of all CPUs so far, from /proc/stat."""
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


def run_timed(argv: list[str], env: dict[str, str], cwd: Path, timeout: float) -> Sample:
    """Run `argv`: wall (spawn to exit); CPU and peak RSS from wait4 (the child and the descendants it
    waited for) or from sampling the process tree every 0.2 s, whichever is larger (a JVM that a Python
    driver does not wait for shows only in the samples)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        busy0, total0 = _cpu_ticks()
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd=cwd, env=env)
        peak = [0]
        ticks: dict[int, int] = {}
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.2):
                rss, now = _tree_usage(proc.pid)
                peak[0] = max(peak[0], rss)
                ticks.update(now)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        busy1, total1 = _cpu_ticks()
        timer.cancel()
        done.set()
        sampler.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])}... exited {proc.returncode}:\n{stderr[-3000:]}")
    rss = usage.ru_maxrss / 1024
    hz = os.sysconf("SC_CLK_TCK")
    cpu = max(usage.ru_utime + usage.ru_stime, sum(ticks.values()) / hz)
    others = max(0.0, (busy1 - busy0 - cpu * hz) / max(total1 - total0, 1))
    return Sample(wall, cpu, rss, max(rss, peak[0] / 1024), _json_payload(stdout), others=others)


def _json_payload(stdout: str) -> dict[str, Any]:
    """The child's answer: its whole output as JSON (the CLI's indented `--json`), else its last JSON line."""
    try:
        return json.loads(stdout)
    except ValueError:
        lines = [line for line in stdout.splitlines() if line.startswith("{")]
        return json.loads(lines[-1]) if lines else {}


def wait_for_quiet(max_load: float, max_busy: float, max_wait: float) -> float:
    """Wait (up to `max_wait` s) until the 1-minute load average is below `max_load` and other processes
    use less than `max_busy` of the CPUs (over 1 s: between two commands nothing of ours runs); return
    the load average."""
    deadline = time.monotonic() + max_wait
    while time.monotonic() < deadline:
        if os.getloadavg()[0] <= max_load and benchlib.cpu_busy(1.0) <= max_busy:
            break
        time.sleep(2)
    return os.getloadavg()[0]


def verify(table: Path, env: dict[str, str], cwd: Path) -> dict[str, Any]:
    out = subprocess.run(
        [benchlib.python(), "-c", VERIFY, str(table)], env=env, cwd=cwd, capture_output=True, text=True
    )
    if out.returncode:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_once(cmd: Command, src: Path, work: Path, env: dict[str, str], cwd: Path, args: argparse.Namespace) -> Sample:
    """`run_attempt`, again (up to `--attempts` in all) while other processes took more than `--max-others`
    of the CPU during the run; the attempt they disturbed least."""
    best: Sample | None = None
    for _ in range(args.attempts):
        sample = run_attempt(cmd, src, work, env, cwd, args)
        if best is None or sample.others < best.others:
            best = sample
        if sample.others <= args.max_others:
            break
        print(f"  (other processes used {sample.others:.0%} of the CPU: again)", file=sys.stderr, flush=True)
    assert best is not None
    return best


def run_attempt(
    cmd: Command, src: Path, work: Path, env: dict[str, str], cwd: Path, args: argparse.Namespace
) -> Sample:
    """Copy `src` (untimed), run `cmd` on the copy (timed), check the result (untimed), remove the copy."""
    copy = work / cmd.name.replace(" ", "-")
    subprocess.run(["cp", "-a", str(src), str(copy)], check=True)
    load = wait_for_quiet(args.max_load, args.max_busy, args.max_wait)
    if cmd.library is not None:  # `python -c` imports from its working directory first
        env, cwd = {**env, "PYTHONPATH": str(cmd.library)}, cmd.library
    try:
        argv = [str(copy) if a == "{table}" else a for a in cmd.argv]
        sample = run_timed(argv, env, cwd, args.timeout)
        sample.load = load
        if cmd.kind == "table":
            sample.check = verify(copy, env, cwd)
    finally:
        shutil.rmtree(copy)
    print(
        f"  {cmd.name}: {sample.wall:.2f}s wall, {sample.cpu:.2f}s cpu, {sample.tree_rss_mib:.0f} MiB, "
        f"load {load:.2f}, others {sample.others:.0%} "
        f"{json.dumps(_brief(sample.payload))} {json.dumps(sample.check)}",
        file=sys.stderr,
        flush=True,
    )
    return sample


def _brief(payload: dict[str, Any]) -> dict[str, Any]:
    """A child's answer without its per-partition detail (for the progress lines)."""
    return {k: v for k, v in payload.items() if not isinstance(v, dict | list)}


def check_results(commands: list[Command], facts: dict[str, Any], partitions: int) -> list[str]:
    """The answers every run must give: the source's rows and checksum, the same number of files."""
    problems = []
    counts = set()
    for cmd in commands:
        for s in cmd.samples:
            got = s.check or s.payload
            if cmd.kind == "table" or "rows" in got:
                if (got.get("rows"), got.get("checksum")) != (facts["rows"], facts["checksum"]):
                    problems.append(f"{cmd.name}: rows/checksum {got.get('rows')}/{got.get('checksum')}")
            if cmd.kind == "table":
                counts.add(got["files"])
                if got["last_operation"] != "OPTIMIZE":
                    problems.append(f"{cmd.name}: last operation {got['last_operation']}")
    if len(counts) > 1:
        problems.append(f"the engines left different numbers of files: {sorted(counts)}")
    if counts and counts != {partitions}:
        problems.append(f"expected one file per partition ({partitions}), got {sorted(counts)}")
    return problems


# -- report -------------------------------------------------------------------------------------------------


def linear_fit(name: str, points: list[tuple[int, float]]) -> str:
    """Least squares wall = fixed + per_gib * GiB over the sizes, and how far each point is from the line."""
    xs = [b / 2**30 for b, _ in points]
    ys = [w for _, w in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    per_gib = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    fixed = my - per_gib * mx
    residuals = ", ".join(f"{y - (fixed + per_gib * x):+.1f}" for x, y in zip(xs, ys, strict=True))
    return f"{name}: wall = {fixed:.1f} s + {per_gib:.1f} s/GiB (residuals {residuals} s)  "


def md_table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(out + ["| " + " | ".join(r) + " |" for r in rows])


def _proc_cpu(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (from /proc)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _server_pid(endpoint: str) -> int | None:
    """The pid of the moto server listening at `endpoint` (its command line names the port)."""
    port = endpoint.rpartition(":")[2]
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                argv = Path(f"/proc/{entry.name}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"moto.server" in argv and port.encode() in argv:
                return int(entry.name)
    return None


def s3_stores(src: Path, facts: dict[str, Any], env: dict[str, str], root: Path, args: argparse.Namespace) -> str:
    """Compaction on the loopback S3 server with and without background writes (see the module docstring)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from concurrent.futures import ThreadPoolExecutor

    from support.s3_server import boto3_client, create_bucket, s3_storage_options, start_moto_server

    py, target = benchlib.python(), args.target_mb * MIB
    files = [p for p in src.rglob("*") if p.is_file() and benchlib.MANIFEST not in p.name]
    samples: dict[str, list[tuple[Sample, float]]] = {"background": [], "bin thread": []}
    with start_moto_server(auth=False) as server:
        s3, bucket = boto3_client(server), "bench-optimize"
        create_bucket(server, bucket)
        moto = _server_pid(server.endpoint)
        child_env = {**env, "BENCH_S3_OPTIONS": json.dumps(s3_storage_options(server))}
        for r in range(args.reps):
            for mode in ["background", "bin thread"][:: 1 if r % 2 == 0 else -1]:
                prefix = f"run-{r}-{mode.replace(' ', '-')}"
                with ThreadPoolExecutor(16) as pool:  # untimed
                    keys = [f"{prefix}/{p.relative_to(src).as_posix()}" for p in files]
                    list(
                        pool.map(
                            lambda kp: s3.put_object(Bucket=bucket, Key=kp[0], Body=kp[1].read_bytes()),
                            zip(keys, files, strict=True),
                        )
                    )
                load = wait_for_quiet(args.max_load, args.max_busy, args.max_wait)
                before = _proc_cpu(moto) if moto else float("nan")
                argv = [py, "-c", S3_OURS, f"s3://{bucket}/{prefix}", str(target), "1" if mode == "background" else "0"]
                sample = run_timed(argv, child_env, root, args.timeout)
                sample.load = load
                server_cpu = (_proc_cpu(moto) if moto else float("nan")) - before
                if (sample.payload.get("removed"), sample.payload.get("added")) != (facts["files"], args.partitions):
                    raise RuntimeError(f"{mode}: unexpected result {sample.payload}")
                samples[mode].append((sample, server_cpu))
                print(
                    f"  {mode}: wall {sample.wall:.2f} s, CPU {sample.cpu:.2f} s, server CPU {server_cpu:.2f} s, "
                    f"RSS {sample.tree_rss_mib:.0f} MiB, load1 {load:.2f}",
                    file=sys.stderr,
                    flush=True,
                )
                listed = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/")
                for page in listed:  # the run's objects dropped: the server holds them in memory
                    objects = [{"Key": o["Key"]} for o in page.get("Contents", [])]
                    if objects:
                        s3.delete_objects(Bucket=bucket, Delete={"Objects": objects})
    rows = []
    for mode, runs in samples.items():
        walls = [s.wall for s, _ in runs]
        rows.append(
            [
                mode,
                f"{statistics.median(walls):.2f} ({min(walls):.2f}-{max(walls):.2f})",
                f"{statistics.median(s.cpu for s, _ in runs):.2f}",
                f"{statistics.median(c for _, c in runs):.2f}",
                f"{statistics.median(s.tree_rss_mib for s, _ in runs):.0f}",
                ", ".join(f"{s.load:.1f}" for s, _ in runs),
            ]
        )
    return "\n".join(
        [
            f"## OPTIMIZE on loopback S3 (moto): {facts['files']:,} files, {facts['bytes'] / MIB:.0f} MiB, "
            f"{args.partitions} partitions, target {args.target_mb} MiB; finished files written in the background "
            f"or by their bin thread, interleaved, {args.reps} runs each\n",
            md_table(
                [
                    "finished files written by",
                    "wall s median (min-max)",
                    "CPU s",
                    "server CPU s",
                    "peak RSS MiB",
                    "load1",
                ],
                rows,
            ),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--files", type=int, default=2000)
    p.add_argument("--partitions", type=int, default=20)
    p.add_argument("--rows-per-file", type=int, default=2600, help="~100 KiB per file with the default schema")
    p.add_argument("--target-mb", type=int, default=256)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--spark-files", default="500,1000,2000", help="sizes (files) for the Spark runs")
    p.add_argument("--attempts", type=int, default=3, help="runs of a command while others disturb it")
    p.add_argument("--max-others", type=float, default=0.10, help="others' CPU share that makes a run disturbed")
    p.add_argument("--no-spark", action="store_true")
    p.add_argument("--commands", help="run only these of the main table's commands (comma-separated names)")
    p.add_argument("--max-load", type=float, default=1.5, help="wait for a 1-min load average below this")
    p.add_argument("--max-busy", type=float, default=0.15, help="... and other processes below this CPU share")
    p.add_argument("--max-wait", type=float, default=900, help="seconds to wait for that before each command")
    p.add_argument("--timeout", type=float, default=1800, help="seconds before a timed command is killed")
    p.add_argument("--library", type=Path, help="run the children on this copy (holding airflow_delta_provider/)")
    p.add_argument(
        "--baseline",
        type=Path,
        help="also run `ours` on this copy of the library (`ours (baseline)`), interleaved with the others",
    )
    p.add_argument("--s3-stores", action="store_true", help="only: background writes on loopback S3, with/without")
    p.add_argument("--json", type=Path)
    p.add_argument("--markdown", type=Path)
    args = p.parse_args(argv)

    if args.library:  # a given copy of the library (e.g. with a change to measure)
        root, fingerprint = args.library.resolve(), benchlib.library_fingerprint(args.library.resolve())
    else:
        root, fingerprint = benchlib.snapshot_library()
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    machine = benchlib.machine_info()
    print(f"library {fingerprint}, loadavg {machine['loadavg']}", file=sys.stderr)
    target = args.target_mb * MIB
    py = benchlib.python()
    cli = [py, "-m", "airflow_delta_provider.cli", "optimize", "--apply", "--json"]
    cli += ["--target-size-mb", str(args.target_mb)]
    src, facts = ensure_data(args.files, args.partitions, args.rows_per_file)
    if args.s3_stores:
        report = s3_stores(src, facts, env, root, args)
        print(report)
        if args.markdown:
            args.markdown.write_text(report + "\n")
        return 0
    commands = [
        Command("ours", [py, "-c", OURS, "{table}", str(target)], "table"),
        Command("ours CLI", [*cli, "{table}"], "table"),
        Command("delta-rs", [py, "-c", DELTARS, "{table}", str(target)], "table"),
        Command("floor: pyarrow rewrite", [py, "-c", PYARROW_FLOOR, "{table}"], "floor"),
        Command(
            "floor: cat", ["sh", "-c", "find \"$0\" -name '*.parquet' -exec cat {} + > /dev/null", "{table}"], "floor"
        ),
    ]
    if args.baseline is not None:
        baseline = args.baseline.resolve()
        print(f"baseline library {benchlib.library_fingerprint(baseline)}", file=sys.stderr)
        argv_ours = [py, "-c", OURS, "{table}", str(target)]
        commands.insert(1, Command("ours (baseline)", argv_ours, "table", library=baseline))
    if args.commands is not None:
        wanted = {c.strip() for c in args.commands.split(",")}  # "none": the Spark runs only
        commands = [c for c in commands if c.name in wanted or (c.library is not None and "ours" in wanted)]
    work = benchlib.scratch_dir()
    spark_rows: list[dict[str, Any]] = []
    try:
        for r in range(args.reps):
            shift = r % len(commands)
            for cmd in commands[shift:] + commands[:shift]:
                cmd.samples.append(run_once(cmd, src, work, env, root, args))
            print(f"round {r + 1}/{args.reps} done", file=sys.stderr, flush=True)
        problems = check_results(commands, facts, args.partitions)
        if not args.no_spark:
            for n in [int(x) for x in args.spark_files.split(",") if x]:
                s_src, s_facts = ensure_data(n, args.partitions, args.rows_per_file)
                spark = Command(
                    "Spark local[2]",
                    [*cli[:4], "--engine", "spark", "--master", "local[2]", *cli[4:], "{table}"],
                    "table",
                )
                local = Command("ours", [py, "-c", OURS, "{table}", str(target)], "table")
                for cmd in (spark, local):
                    cmd.samples.append(run_once(cmd, s_src, work, env, root, args))
                problems += check_results([spark, local], s_facts, args.partitions)
                spark_rows.append(
                    {"files": n, "bytes": s_facts["bytes"], "spark": spark.samples[0], "ours": local.samples[0]}
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)

    by_name = {c.name: c for c in commands}
    ratio = (
        by_name["ours"].med("wall") / by_name["delta-rs"].med("wall") if {"ours", "delta-rs"} <= set(by_name) else None
    )
    parts = [
        f"## OPTIMIZE: {facts['files']:,} files, {facts['bytes'] / MIB:.0f} MiB "
        f"(mean {facts['mean_file_kib']:.0f} KiB), "
        f"{args.partitions} partitions, target {args.target_mb} MiB\n",
        f"library `{fingerprint}`, {machine['cpu']}, {machine['nproc']} CPUs, deltalake {machine.get('deltalake')}, "
        f"pyarrow {machine.get('pyarrow')}; load at start {machine['loadavg']}; median of {args.reps}\n",
        md_table(
            [
                "command",
                "wall s (median)",
                "min-max",
                "CPU s",
                "peak RSS MiB (min-max)",
                "files after",
                "others' CPU",
                "1-min load",
            ],
            [
                [
                    c.name,
                    f"{c.med('wall'):.2f}",
                    f"{min(s.wall for s in c.samples):.2f}-{max(s.wall for s in c.samples):.2f}",
                    f"{c.med('cpu'):.2f}",
                    f"{c.med('tree_rss_mib'):.0f} ({min(s.tree_rss_mib for s in c.samples):.0f}-"
                    f"{max(s.tree_rss_mib for s in c.samples):.0f})",
                    str(c.samples[0].check.get("files", c.samples[0].payload.get("added", ""))),
                    f"{statistics.median(s.others for s in c.samples):.0%}",
                    f"{min(s.load for s in c.samples):.1f}-{max(s.load for s in c.samples):.1f}",
                ]
                for c in commands
            ],
        ),
    ]
    if ratio is not None:
        rss = by_name["ours"].med("tree_rss_mib") / by_name["delta-rs"].med("tree_rss_mib")
        cpu = by_name["ours"].med("cpu") / by_name["delta-rs"].med("cpu")
        parts.append(
            f"\nours / delta-rs wall: **{ratio:.2f}x** (target <= 0.8x: {'met' if ratio <= 0.8 else 'MISSED'}); "
            f"CPU {cpu:.2f}x; peak RSS **{rss:.2f}x** (target <= 1.0x: {'met' if rss <= 1.0 else 'MISSED'})"
        )
    if "ours (baseline)" in by_name and "ours" in by_name:
        new, old = by_name["ours"], by_name["ours (baseline)"]
        rss = new.med("tree_rss_mib") / old.med("tree_rss_mib")
        parts.append(
            f"\nours / ours (baseline): wall {new.med('wall') / old.med('wall'):.2f}x, "
            f"CPU {new.med('cpu') / old.med('cpu'):.2f}x, peak RSS {rss:.2f}x"
        )
    if spark_rows:
        rows = [
            [
                f"{x['files']:,}",
                f"{x['bytes'] / MIB:.0f}",
                f"{x['spark'].wall:.1f}",
                f"{x['spark'].tree_rss_mib:.0f}",
                f"{x['ours'].wall:.2f}",
            ]
            for x in spark_rows
        ]
        parts += ["\n### Spark local[2] (one run per size) vs the local engine\n"]
        parts.append(md_table(["files", "MiB", "Spark wall s", "Spark tree RSS MiB", "ours wall s"], rows))
        if len(spark_rows) >= 2:
            parts.append("\n" + linear_fit("Spark", [(x["bytes"], x["spark"].wall) for x in spark_rows]))
            parts.append(linear_fit("ours", [(x["bytes"], x["ours"].wall) for x in spark_rows]))
    if problems:
        parts.append("\n**WRONG ANSWERS**: " + "; ".join(problems))
    report = "\n".join(parts)
    print(report)
    if args.markdown:
        args.markdown.write_text(report + "\n")
    if args.json:
        raw = {
            "machine": machine,
            "facts": facts,
            "commands": {c.name: [s.__dict__ for s in c.samples] for c in commands},
            "spark": [
                {"files": x["files"], "bytes": x["bytes"], "spark": x["spark"].__dict__, "ours": x["ours"].__dict__}
                for x in spark_rows
            ],
            "problems": problems,
        }
        args.json.write_text(json.dumps(raw, indent=1, default=str))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
