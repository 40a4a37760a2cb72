"""OPTIMIZE ZORDER BY, whole process: our local engine vs delta-rs `optimize.z_order()` on the same table.

    .venv/bin/python bench/zorder_bench.py                       # 2,000 files, 3 reps
    .venv/bin/python bench/zorder_bench.py --files 200 --reps 1  # a smoke run
    .venv/bin/python bench/zorder_bench.py --json /tmp/z.json --markdown /tmp/z.md

The table: `--files` files (default 2,000 of `--rows-per-file` 1,000 rows), unpartitioned, written by
delta-rs (`write_deltalake` appends, then a delta-rs checkpoint) and cached under
`bench/.data/zorder-<files>x<rows>/`: `x` and `y` uniform over [0, 2^40) (values spanning >= 2^24, where
delta-rs's byte-prefix key barely helps), `name` (12-character strings), `amount` (double), `ts`
(timestamp), `checksum` (int64). Every file's rows are random, as appends from a stream would be.

Every timed command runs in a fresh process on its own copy (`cp -a`, untimed) and Z-orders by `x, y` with
the same target size (`--target-mb`):

* **ours**: `python -c` calling `maintenance.optimize.optimize(path, zorder_by=["x", "y"], target_size=...)`;
* **delta-rs**: `python -c` calling `DeltaTable(path).optimize.z_order(["x", "y"], target_size=...)`.

Wall is spawn to exit, CPU and peak RSS from `os.wait4` (`optimize_bench.run_timed`: the process tree is
also sampled). After each run the copy is checked, untimed: delta-rs reads the source's rows and checksum,
and file skipping is measured on the files each engine wrote: for `--queries` random 1 % ranges
(`x` alone, `y` alone, and `x` and `y` together, each range 1 % of the 2^40 span), the share of the
table's files our file index (`Snapshot.files(predicate)`, the files' min/max stats) keeps.
Rounds are round-robin with the order rotated; medians of `--reps` are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import benchlib
from optimize_bench import Command, md_table, run_once

MIB = 2**20
SPAN = 2**40

OURS = """
import json, sys
from airflow_delta_provider.delta.maintenance.optimize import optimize
d = optimize(sys.argv[1], zorder_by=["x", "y"], target_size=int(sys.argv[2])).to_dict()
print(json.dumps({"version": d["version"], "removed": d["num_files_removed"], "added": d["num_files_added"]}))
"""

DELTARS = """
import json, sys
from deltalake import DeltaTable
m = DeltaTable(sys.argv[1]).optimize.z_order(["x", "y"], target_size=int(sys.argv[2]))
print(json.dumps({"removed": m["numFilesRemoved"], "added": m["numFilesAdded"]}))
"""

#: rows and checksum as delta-rs reads them; files, last operation; the share of files our file index
#: keeps for random 1 % ranges (argv: table, queries, span)
VERIFY = """
import json, random, sys
import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder
from airflow_delta_provider.delta.delta_log import DeltaLog
path, queries, span = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
dt = DeltaTable(path)
reader = QueryBuilder().register("t", dt).execute("SELECT count(*) AS n, sum(checksum) AS s FROM t")
n, s = pa.table(reader.read_all()).to_pylist()[0].values()
snap = DeltaLog(path).update()
files = len(list(snap.all_files(with_stats=False)))
rng, width = random.Random(7), span // 100
kept = {"x": [], "y": [], "x and y": []}
for _ in range(queries):
    lo = {c: rng.randrange(span - width) for c in ("x", "y")}
    ranges = {c: f"{c} >= {lo[c]} AND {c} <= {lo[c] + width}" for c in ("x", "y")}
    for key, where in (("x", ranges["x"]), ("y", ranges["y"]), ("x and y", ranges["x"] + " AND " + ranges["y"])):
        kept[key].append(len(snap.files(where)) / files)
print(json.dumps({"version": dt.version(), "rows": n, "checksum": s, "files": files,
                  "last_operation": dt.history(1)[0]["operation"],
                  "kept": {k: sum(v) / len(v) for k, v in kept.items()}}))
"""

GENERATE = """
import json, sys
import numpy as np
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
path, files, rows, span = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(2030)
letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype="S1")
total = checksum = 0
for i in range(files):
    t = pa.table({
        "x": pa.array(rng.integers(0, span, rows, dtype=np.int64)),
        "y": pa.array(rng.integers(0, span, rows, dtype=np.int64)),
        "name": pa.array(rng.choice(letters, size=(rows, 12)).view("S12").ravel().astype(str)),
        "amount": pa.array(rng.normal(100, 30, rows).round(2)),
        "ts": pa.array(np.datetime64("2025-01-01") + rng.integers(0, 864 * 10**8, rows).astype("timedelta64[us]"),
                       pa.timestamp("us", tz="UTC")),
        "checksum": pa.array(rng.integers(0, 10**6, rows, dtype=np.int64)),
    })
    write_deltalake(path, t, mode="append")
    total += rows
    checksum += int(t["checksum"].to_numpy().sum())
dt = DeltaTable(path)
dt.create_checkpoint()
adds = pa.table(dt.get_add_actions(flatten=True))
sizes = adds.column("size_bytes").to_pylist()
print(json.dumps({"files": len(sizes), "bytes": sum(sizes), "rows": total, "checksum": checksum,
                  "mean_file_kib": sum(sizes) / len(sizes) / 1024}))
"""


def ensure_data(files: int, rows_per_file: int) -> tuple[Path, dict[str, Any]]:
    """The cached source table (generated once) and its manifest; a cached copy whose log moved on
    (someone ran a command on the source) is not used: a fresh one is generated beside it."""
    base = benchlib.DATA / f"zorder-{files}x{rows_per_file}"
    src = base
    for n in range(1, 10):
        manifest = src / benchlib.MANIFEST
        if manifest.exists():
            facts = json.loads(manifest.read_text())
            if (src / "_delta_log" / f"{facts['version'] + 1:020d}.json").exists():
                print(f"{src} was changed after it was generated; using another copy", file=sys.stderr)
                src = base.with_name(f"{base.name}-{n}")
                continue
            return src, facts
        break
    if src.exists():
        shutil.rmtree(src)
    print(f"generating {files} files of {rows_per_file} rows at {src} ...", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    out = subprocess.run(
        [benchlib.python(), "-c", GENERATE, str(src), str(files), str(rows_per_file), str(SPAN)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    facts = json.loads(out.strip().splitlines()[-1]) | {"version": files - 1}
    (src / benchlib.MANIFEST).write_text(json.dumps(facts))
    print(f"  done in {time.perf_counter() - t0:.0f}s: {facts}", file=sys.stderr)
    return src, facts


def check_results(commands: list[Command], facts: dict[str, Any]) -> list[str]:
    problems = []
    for cmd in commands:
        for s in cmd.samples:
            got = s.check
            if (got.get("rows"), got.get("checksum")) != (facts["rows"], facts["checksum"]):
                problems.append(f"{cmd.name}: rows/checksum {got.get('rows')}/{got.get('checksum')}")
            if got.get("last_operation") != "OPTIMIZE":
                problems.append(f"{cmd.name}: last operation {got.get('last_operation')}")
    return problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--files", type=int, default=2000)
    p.add_argument("--rows-per-file", type=int, default=1000)
    p.add_argument("--target-mb", type=float, default=1.0, help="target file size for both engines")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--queries", type=int, default=40, help="random 1 %% ranges per skipping figure")
    p.add_argument("--attempts", type=int, default=3, help="runs of a command while others disturb it")
    p.add_argument("--max-others", type=float, default=0.10, help="others' CPU share that makes a run disturbed")
    p.add_argument("--max-load", type=float, default=1.5, help="wait for a 1-min load average below this")
    p.add_argument("--max-busy", type=float, default=0.15, help="... and other processes below this CPU share")
    p.add_argument("--max-wait", type=float, default=900, help="seconds to wait for that before each command")
    p.add_argument("--timeout", type=float, default=1800, help="seconds before a timed command is killed")
    p.add_argument("--library", type=Path, help="run the children on this copy (holding airflow_delta_provider/)")
    p.add_argument("--json", type=Path)
    p.add_argument("--markdown", type=Path)
    args = p.parse_args(argv)

    if args.library:
        root, fingerprint = args.library.resolve(), benchlib.library_fingerprint(args.library.resolve())
    else:
        root, fingerprint = benchlib.snapshot_library()
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    machine = benchlib.machine_info()
    print(f"library {fingerprint}, loadavg {machine['loadavg']}", file=sys.stderr)
    target = int(args.target_mb * MIB)
    py = benchlib.python()
    src, facts = ensure_data(args.files, args.rows_per_file)
    commands = [
        Command("ours", [py, "-c", OURS, "{table}", str(target)], "table"),
        Command("delta-rs", [py, "-c", DELTARS, "{table}", str(target)], "table"),
    ]
    work = benchlib.scratch_dir()

    def verify(table: Path, env: dict[str, str], cwd: Path) -> dict[str, Any]:
        out = subprocess.run(
            [py, "-c", VERIFY, str(table), str(args.queries), str(SPAN)],
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
        )
        if out.returncode:
            raise RuntimeError(out.stderr[-3000:])
        return json.loads(out.stdout.strip().splitlines()[-1])

    import optimize_bench

    optimize_bench.verify = verify  # run_attempt checks each copy with it
    try:
        for r in range(args.reps):
            for cmd in commands[r % 2 :] + commands[: r % 2]:
                cmd.samples.append(run_once(cmd, src, work, env, root, args))
            print(f"round {r + 1}/{args.reps} done", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    problems = check_results(commands, facts)
    ours, theirs = commands
    wall = ours.med("wall") / theirs.med("wall")
    rss = ours.med("tree_rss_mib") / theirs.med("tree_rss_mib")
    kept = {
        c.name: {k: statistics.median(s.check["kept"][k] for s in c.samples) for k in ("x", "y", "x and y")}
        for c in commands
    }
    parts = [
        f"## OPTIMIZE ZORDER BY x, y: {facts['files']:,} files, {facts['rows']:,} rows, {facts['bytes'] / MIB:.0f} MiB "
        f"(mean {facts['mean_file_kib']:.0f} KiB), target {args.target_mb:g} MiB\n",
        f"library `{fingerprint}`, {machine['cpu']}, {machine['nproc']} CPUs, deltalake {machine.get('deltalake')}, "
        f"pyarrow {machine.get('pyarrow')}; load at start {machine['loadavg']}; median of {args.reps}\n",
        md_table(
            [
                "command",
                "wall s (median)",
                "min-max",
                "CPU s",
                "peak RSS MiB",
                "files after",
                "kept: x",
                "kept: y",
                "kept: x and y",
                "others' CPU",
            ],
            [
                [
                    c.name,
                    f"{c.med('wall'):.2f}",
                    f"{min(s.wall for s in c.samples):.2f}-{max(s.wall for s in c.samples):.2f}",
                    f"{c.med('cpu'):.2f}",
                    f"{c.med('tree_rss_mib'):.0f}",
                    str(c.samples[0].check.get("files", "")),
                    *(f"{kept[c.name][k]:.1%}" for k in ("x", "y", "x and y")),
                    f"{statistics.median(s.others for s in c.samples):.0%}",
                ]
                for c in commands
            ],
        ),
        f"\nours / delta-rs wall: **{wall:.2f}x** (target <= 0.8x: {'met' if wall <= 0.8 else 'MISSED'}); "
        f"peak RSS **{rss:.2f}x** (target <= 1.0x: {'met' if rss <= 1.0 else 'MISSED'}); a 1 % range on x keeps "
        f"{kept['ours']['x']:.1%} of our files vs {kept['delta-rs']['x']:.1%} of delta-rs's (target <= 45 %: "
        f"{'met' if max(kept['ours']['x'], kept['ours']['y']) <= 0.45 else 'MISSED'})",
    ]
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
        }
        args.json.write_text(json.dumps(raw | {"problems": problems}, indent=1, default=str))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
