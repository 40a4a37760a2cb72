"""Profiles that explain bench/run.py's numbers.

    .venv/bin/python bench/profiles.py --imports             # python -X importtime, top modules
    .venv/bin/python bench/profiles.py --scale S,M,L         # cProfile of import + snapshot load, fresh process each
    .venv/bin/python bench/profiles.py --update L            # cProfile of update() after one appended commit
    .venv/bin/python bench/profiles.py --latest log100k      # cProfile of a cold latest_version()
    .venv/bin/python bench/profiles.py --stages S,M,L        # wall time per library stage (no profiler overhead)

Everything runs in child processes, so each profile starts from a fresh interpreter.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import benchlib

PROFILE_LOAD = """
import cProfile, pstats, sys, time
prof = cProfile.Profile()
t0 = time.perf_counter()
prof.enable()
from airflow_delta_provider.delta import DeltaLog
s = DeltaLog.for_table(sys.argv[1]).snapshot
answer = (s.version, s.num_files, s.size_in_bytes, s.num_tombstones(now_ms=0))
prof.disable()
print(f"answer {answer}; {time.perf_counter() - t0:.3f} s under cProfile")
for key in ("cumulative", "tottime"):
    print(f"--- top {sys.argv[2]} by {key}")
    pstats.Stats(prof).sort_stats(key).print_stats(int(sys.argv[2]))
"""

PROFILE_UPDATE = """
import cProfile, pstats, shutil, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import benchlib
from airflow_delta_provider.delta import DeltaLog
work = benchlib.scratch_dir()
try:
    table = benchlib.link_copy(Path(sys.argv[2]), work / "table")
    log = DeltaLog.for_table(str(table))
    snap = log.snapshot
    base = (snap.num_files, snap.size_in_bytes, snap.num_tombstones(now_ms=0))  # steady state, as in run.py
    benchlib.append_commit(table, snap.version + 1, 0)
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    snap = log.update()
    t1 = time.perf_counter()
    answers = (snap.version, snap.num_files, snap.size_in_bytes, snap.num_tombstones(now_ms=0))
    t2 = time.perf_counter()
    prof.disable()
    print(f"update(): {(t1 - t0) * 1000:.1f} ms; then version/files/bytes/tombstones {answers}: "
          f"{(t2 - t1) * 1000:.1f} ms (both under cProfile)")
    for key in ("cumulative", "tottime"):
        print(f"--- top {sys.argv[3]} by {key}")
        pstats.Stats(prof).sort_stats(key).print_stats(int(sys.argv[3]))
finally:
    shutil.rmtree(work, ignore_errors=True)
"""

PROFILE_LATEST = """
import cProfile, pstats, sys, time
prof = cProfile.Profile()
prof.enable()
from airflow_delta_provider.delta import DeltaLog
t0 = time.perf_counter()
v = DeltaLog.for_table(sys.argv[1]).latest_version()
t1 = time.perf_counter()
prof.disable()
print(f"latest_version() = {v}: call {(t1 - t0) * 1000:.2f} ms (import included in the profile)")
pstats.Stats(prof).sort_stats("cumulative").print_stats(int(sys.argv[2]))
"""

# Wraps library internals with timers (names that no longer exist are skipped). Nested stages are
# included in their callers' times.
STAGES = """
import sys, time, importlib, json
from collections import defaultdict
spent, calls = defaultdict(float), defaultdict(int)
t0 = time.perf_counter()
import airflow_delta_provider.delta.delta_log
t_import = time.perf_counter() - t0
targets = [
    ("airflow_delta_provider.delta.engines.local", "_read_parquet"),
    ("airflow_delta_provider.delta.engines.local", "_file_actions"),
    ("airflow_delta_provider.delta.engines.local", "_non_file_actions"),
    ("airflow_delta_provider.delta.engines.local", "LocalEngine.read_checkpoint"),
    ("airflow_delta_provider.delta.engines.local", "LocalEngine.replay_commits"),
    ("airflow_delta_provider.delta.engines.local", "read_commit"),
    ("airflow_delta_provider.delta.read.file_state", "conform_table"),
    ("airflow_delta_provider.delta.read.file_state", "key_column"),
    ("airflow_delta_provider.delta.read.file_state", "FileState.apply"),
    ("airflow_delta_provider.delta.read.file_state", "FileState._resolve"),
    ("airflow_delta_provider.delta.read.file_state", "_matching_rows"),
    ("airflow_delta_provider.delta.read.file_state", "adds_to_table"),
    ("airflow_delta_provider.delta.read.file_state", "removes_to_table"),
    ("airflow_delta_provider.delta.read.table_state", "TableState.apply"),
    ("airflow_delta_provider.delta.read.table_state", "TableState.empty"),
    ("airflow_delta_provider.delta.delta_log", "DeltaLog._segment_for"),
    ("airflow_delta_provider.delta.delta_log", "DeltaLog._load"),
]
def wrap(name, fn):
    def timed(*a, **k):
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            spent[name] += time.perf_counter() - t
            calls[name] += 1
    return timed
t0 = time.perf_counter()
for mod_name, attr in targets:
    try:
        mod = importlib.import_module(mod_name)
    except ImportError:
        continue
    owner, _, leaf = attr.rpartition(".")
    holder = getattr(mod, owner, None) if owner else mod
    fn = getattr(holder, leaf, None) if holder is not None else None
    if fn is None:
        continue
    setattr(holder, leaf, wrap(attr, fn))
t_engine = time.perf_counter() - t0  # the engine modules (pyarrow) load here, before the timed load
from airflow_delta_provider.delta import DeltaLog
t1 = time.perf_counter()
s = DeltaLog.for_table(sys.argv[1]).snapshot
t2 = time.perf_counter()
n = (s.num_files, s.size_in_bytes, s.num_tombstones(now_ms=0))
t3 = time.perf_counter()
print(json.dumps({"import": t_import, "import engine (pyarrow)": t_engine, "load": t2 - t1, "counts": t3 - t2,
                  "stages": {k: [round(v, 4), calls[k]] for k, v in spent.items()}}))
"""

#: cwd/env for children; `--library ROOT` points them at a frozen copy (see run.py).
CHILD: dict = {"cwd": None, "env": None}

IMPORT_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)")


def importtime(stmt: str, top: int) -> None:
    """`python -X importtime -c stmt` (best of 5 by total), top modules by self and cumulative time."""
    best: list[tuple[int, int, int, str]] | None = None
    for _ in range(5):
        proc = subprocess.run(
            [benchlib.python(), "-X", "importtime", "-c", stmt], capture_output=True, text=True, **CHILD
        )
        rows = [(int(m[1]), int(m[2]), len(m[3]), m[4]) for m in map(IMPORT_LINE.match, proc.stderr.splitlines()) if m]
        if best is None or sum(r[0] for r in rows) < sum(r[0] for r in best):
            best = rows
    assert best is not None
    total = sum(r[0] for r in best)
    print(f"\n## `{stmt}`: {len(best)} modules, {total / 1e6:.3f} s of import time (best of 5)\n")
    print("| module | self ms | cumulative ms |\n|---|---|---|")
    for self_us, cum_us, _, name in sorted(best, key=lambda r: -r[0])[:top]:
        print(f"| {name} | {self_us / 1000:.1f} | {cum_us / 1000:.1f} |")
    print("\nTop-level imports by cumulative time:\n\n| module | cumulative ms |\n|---|---|")
    for _, cum_us, _, name in sorted((r for r in best if r[2] == 1), key=lambda r: -r[1])[:top]:
        print(f"| {name} | {cum_us / 1000:.1f} |")
    packages: dict[str, int] = {}
    for self_us, _, _, name in best:
        root = name.split(".")[0]
        packages[root] = packages.get(root, 0) + self_us
    print("\nSelf time by top-level package:\n\n| package | ms |\n|---|---|")
    for name, us in sorted(packages.items(), key=lambda kv: -kv[1])[:top]:
        print(f"| {name} | {us / 1000:.1f} |")


def stages(args: argparse.Namespace, py: str) -> None:
    import json
    import statistics

    scales = [s for s in args.stages.split(",") if s]
    results: dict[str, list[dict]] = {}
    for scale in scales:
        benchlib.ensure_table(scale)
        runs = []
        for _ in range(args.reps):
            out = subprocess.run(
                [py, "-c", STAGES, str(benchlib.table_dir(scale))], capture_output=True, text=True, check=True, **CHILD
            ).stdout
            runs.append(json.loads(out.strip().splitlines()[-1]))
        results[scale] = runs
    names = sorted({k for runs in results.values() for r in runs for k in r["stages"]})
    print(f"\n## Library stages, in-process wall seconds (median of {args.reps} fresh processes)\n")
    print("| stage | " + " | ".join(scales) + " |\n|---|" + "---|" * len(scales))

    def med(scale: str, key: str) -> str:
        vals = [r["stages"][key] for r in results[scale] if key in r["stages"]]
        return f"{statistics.median(v[0] for v in vals):.3f} ({vals[0][1]})" if vals else "-"

    for key in ("import", "import engine (pyarrow)", "load", "counts"):
        row = [f"{statistics.median(r[key] for r in results[s]):.3f}" for s in scales]
        print(f"| **{key}** | " + " | ".join(row) + " |")
    for name in names:
        print(f"| {name} | " + " | ".join(med(s, name) for s in scales) + " |")
    print("\nCells: seconds (calls). Nested stages are included in their callers.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--imports", action="store_true", help="python -X importtime summary")
    parser.add_argument("--scale", default="", help="comma-separated scales to profile a snapshot load of")
    parser.add_argument("--update", default="", help="scale to profile update() after one commit on")
    parser.add_argument("--latest", default="", help="long log to profile a cold latest_version() on")
    parser.add_argument("--stages", default="", help="comma-separated scales: wall time per library stage")
    parser.add_argument("--reps", type=int, default=3, help="--stages: runs per scale (median reported)")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--library", type=Path, help="root holding a copy of airflow_delta_provider to profile")
    args = parser.parse_args(argv)
    if args.library:
        root = args.library.resolve()
        CHILD.update(cwd=str(root), env={**os.environ, "PYTHONPATH": str(root)})
        print(f"library: {root} ({benchlib.library_fingerprint(root)})")
    py = benchlib.python()
    if args.imports:
        importtime("import airflow_delta_provider.delta", args.top)
        importtime("from airflow_delta_provider.delta import DeltaLog", args.top)
        importtime("from deltalake import DeltaTable", args.top)
    for scale in [s for s in args.scale.split(",") if s]:
        benchlib.ensure_table(scale)
        print(f"\n## snapshot load of {scale} (fresh process, import included)\n", flush=True)
        subprocess.run([py, "-c", PROFILE_LOAD, str(benchlib.table_dir(scale)), str(args.top)], check=True, **CHILD)
    if args.stages:
        stages(args, py)
    if args.update:
        benchlib.ensure_table(args.update)
        print(f"\n## update() after one commit on {args.update}\n", flush=True)
        argv_ = [py, "-c", PROFILE_UPDATE, str(benchlib.BENCH_DIR), str(benchlib.table_dir(args.update)), str(args.top)]
        subprocess.run(argv_, check=True, **CHILD)
    if args.latest:
        benchlib.ensure_table(args.latest)
        print(f"\n## cold latest_version() on {args.latest}\n", flush=True)
        subprocess.run(
            [py, "-c", PROFILE_LATEST, str(benchlib.table_dir(args.latest)), str(args.top)], check=True, **CHILD
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
