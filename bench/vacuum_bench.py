"""Benchmark VACUUM on a large table: our dry run against delta-rs's, our apply against `rm` (issue 17).

    .venv/bin/python bench/vacuum_bench.py                        # 1,000,000 files, 3 reps
    .venv/bin/python bench/vacuum_bench.py --files 20000 --reps 1 --warmup 0

The table (built once, cached in bench/.data/vacuum-<files>/table): ~100 partitions `part=000..099`,
zero-byte data files, one in six tombstoned (removed 40 days ago; the removes are in the checkpoint),
one in six strays (no log entry), the rest active; tombstoned and stray files get a 40-day-old mtime
(`os.utime`), active files keep their creation time. The log is written directly: commits of 10,000
adds, then commits of 10,000 removes, a checkpoint written by `maintenance.checkpoint.write_checkpoint`
(its clock one hour after the removes, so the tombstones are kept in it) and five small commits after
the checkpoint. Both implementations use the table's default retention (7 days) in FULL mode, so both
plans are the tombstoned files and the strays: the bench asserts the two sets are equal.

Every timed command is a fresh process (`run.run_process`: whole-process wall and CPU from `os.wait4`;
peak RSS from GNU time, since `os.wait4` here would report at least this process's own peak RSS; the dry
runs also report their VmHWM right after the library call, before the paths are written out, one line at a
time: no joined copy of 333k paths adds to either peak); children import a frozen copy of the library, as
`run.py` does.

* **dry run**: ours through the library (`vacuum(p)`, the planned paths written to a file) and through the
  CLI (`deltalog vacuum TABLE --json` to a file), delta-rs `DeltaTable(p).vacuum(dry_run=True, full=True)`
  (its paths written the same way); one discarded warm-up round, then `--reps` rounds, order rotating.
* **apply**, each run on its own hard-linked copy of the table (`cp -al`, made and removed untimed):
  ours in one process (plan, re-validate, VACUUM START, delete, VACUUM END), ours applying the saved
  dry-run plan, delta-rs `vacuum(dry_run=False, full=True)`, and the floor: the same files deleted by
  `xargs -0 rm -f` from a NUL-separated list (one `xargs` process starting as few `rm` processes as the
  argument limit allows). After each run the copy must hold exactly the active files.

Target (issue 17): our dry run <= 0.5x delta-rs's wall.
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
import time
from pathlib import Path
from typing import Any

import benchlib
import run

GENERATOR_VERSION = 1
PARTITIONS = 100
ADDS_PER_COMMIT = 10_000
TAIL_COMMITS = 5
TAIL_ADDS = 10
AGE_MS = 40 * 86_400_000
SCHEMA = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "part", "type": "string", "nullable": True, "metadata": {}},
        ],
    }
)

# ---------------------------------------------------------------------------------------------------
# Child programs (argv: table path, then program-specific values). Each prints one JSON line.

#: Peak RSS so far (VmHWM), read in a dry-run child right after the library call: the whole-process peak
#: (GNU time) also counts writing the planned paths out.
_HWM = """
def PEAK_RSS_MIB():
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) / 1024 for line in fh if line.startswith("VmHWM:"))
"""

OURS_DRY = (
    _HWM
    + """
import json, sys, time
t0 = time.perf_counter()
from airflow_delta_provider.delta.maintenance.vacuum import vacuum
t1 = time.perf_counter()
plan = vacuum(sys.argv[1]).plan
t2 = time.perf_counter()
hwm = PEAK_RSS_MIB()
with open(sys.argv[2], "w") as fh:
    fh.writelines(f"{f.path}\\n" for f in plan.files)
t3 = time.perf_counter()
print(json.dumps({"answer": [len(plan.files)], "import": t1 - t0, "work": t2 - t1, "write": t3 - t2, "hwm": hwm}))
"""
)

OURS_CLI_DRY = """
import sys
from airflow_delta_provider.cli import main
sys.exit(main(["vacuum", sys.argv[1], "--json"]))
"""

DELTARS_DRY = (
    _HWM
    + """
import json, sys, time
t0 = time.perf_counter()
from deltalake import DeltaTable
t1 = time.perf_counter()
files = DeltaTable(sys.argv[1]).vacuum(dry_run=True, full=True)
t2 = time.perf_counter()
hwm = PEAK_RSS_MIB()
root = sys.argv[1].rstrip("/") + "/"
with open(sys.argv[2], "w") as fh:
    fh.writelines(f"{f[len(root):] if f.startswith(root) else f}\\n" for f in files)
t3 = time.perf_counter()
print(json.dumps({"answer": [len(files)], "import": t1 - t0, "work": t2 - t1, "write": t3 - t2, "hwm": hwm}))
"""
)

OURS_APPLY = """
import json, sys, time
t0 = time.perf_counter()
from airflow_delta_provider.delta.maintenance.vacuum import vacuum
t1 = time.perf_counter()
r = vacuum(sys.argv[1], dry_run=False)
t2 = time.perf_counter()
print(json.dumps({"answer": [r.deleted], "import": t1 - t0, "work": t2 - t1, "audit": r.audit_versions}))
"""

OURS_APPLY_PLAN = """
import json, sys, time
t0 = time.perf_counter()
from airflow_delta_provider.delta import DeltaLog
from airflow_delta_provider.delta.maintenance.vacuum import vacuum
t1 = time.perf_counter()
with open(sys.argv[2]) as fh:
    plan = json.load(fh)
log = DeltaLog(sys.argv[1])
plan["table"] = log.table_uri  # the plan was made on the cached table, this is a copy of it
r = vacuum(log, plan=plan, dry_run=False)
t2 = time.perf_counter()
print(json.dumps({"answer": [r.deleted], "import": t1 - t0, "work": t2 - t1, "dropped": len(r.dropped)}))
"""

DELTARS_APPLY = """
import json, sys, time
t0 = time.perf_counter()
from deltalake import DeltaTable
t1 = time.perf_counter()
files = DeltaTable(sys.argv[1]).vacuum(dry_run=False, full=True)
t2 = time.perf_counter()
print(json.dumps({"answer": [len(files)], "import": t1 - t0, "work": t2 - t1}))
"""

# ---------------------------------------------------------------------------------------------------
# The table


def file_path(i: int) -> str:
    tail = i * 2654435761 % 16**12  # spreads the names like random UUIDs do
    return f"part={i % PARTITIONS:03d}/part-00000-{i:08x}-0000-4000-8000-{tail:012x}-c000.snappy.parquet"


def kind(i: int) -> str:
    """One in six tombstoned, one in six stray, the rest active."""
    return "tombstone" if i % 6 == 0 else "stray" if i % 6 == 1 else "active"


def _write_commit(log_dir: Path, version: int, ts: int, operation: str, lines: list[str]) -> None:
    info = json.dumps(
        {"commitInfo": {"timestamp": ts, "operation": operation, "operationParameters": {}, "isBlindAppend": False}}
    )
    (log_dir / f"{version:020d}.json").write_text("\n".join([info, *lines]) + "\n")


def _add(i: int, ts: int) -> str:
    p = i % PARTITIONS
    return (
        f'{{"add":{{"path":"{file_path(i)}","partitionValues":{{"part":"{p:03d}"}},"size":0,'
        f'"modificationTime":{ts},"dataChange":true}}}}'
    )


def _remove(i: int, ts: int) -> str:
    p = i % PARTITIONS
    return (
        f'{{"remove":{{"path":"{file_path(i)}","deletionTimestamp":{ts},"dataChange":true,'
        f'"extendedFileMetadata":true,"partitionValues":{{"part":"{p:03d}"}},"size":0}}}}'
    )


def build_table(out: Path, n: int) -> dict[str, Any]:
    """Write the table (log and zero-byte files) to `out` (see the module doc); returns its manifest."""
    from airflow_delta_provider.delta import DeltaLog
    from airflow_delta_provider.delta.maintenance.checkpoint import write_checkpoint

    t_start = time.perf_counter()
    log_dir = out / "_delta_log"
    log_dir.mkdir(parents=True)
    t0 = int(time.time() * 1000) - AGE_MS
    kinds = [kind(i) for i in range(n)]
    logged = [i for i in range(n) if kinds[i] != "stray"]
    active = [i for i in logged if kinds[i] == "active"]
    tail = set(active[-TAIL_COMMITS * TAIL_ADDS :])
    head = [i for i in logged if i not in tail]
    version = 0
    protocol = '{"protocol":{"minReaderVersion":1,"minWriterVersion":2}}'
    metadata = json.dumps(
        {
            "metaData": {
                "id": "00000000-0000-4000-8000-000000000017",
                "format": {"provider": "parquet", "options": {}},
                "schemaString": SCHEMA,
                "partitionColumns": ["part"],
                "configuration": {},
                "createdTime": t0,
            }
        }
    )
    for start in range(0, max(len(head), 1), ADDS_PER_COMMIT):
        ts = t0 + version * 60_000
        lines = [protocol, metadata] if version == 0 else []
        lines += [_add(i, ts) for i in head[start : start + ADDS_PER_COMMIT]]
        _write_commit(log_dir, version, ts, "WRITE", lines)
        version += 1
    tombstoned = [i for i in logged if kinds[i] == "tombstone"]
    for start in range(0, len(tombstoned), ADDS_PER_COMMIT):
        ts = t0 + version * 60_000
        _write_commit(
            log_dir, version, ts, "DELETE", [_remove(i, ts) for i in tombstoned[start : start + ADDS_PER_COMMIT]]
        )
        version += 1
    checkpoint_version = version - 1
    t_log = time.perf_counter()
    cp_clock = t0 + version * 60_000 + 3_600_000  # the removes are an hour old: kept as tombstones
    cp = write_checkpoint(DeltaLog(str(out)), clock=lambda: cp_clock)
    t_cp = time.perf_counter()
    ordered_tail = sorted(tail)
    for c in range(TAIL_COMMITS):
        ts = t0 + version * 60_000
        _write_commit(
            log_dir, version, ts, "WRITE", [_add(i, ts) for i in ordered_tail[c * TAIL_ADDS : (c + 1) * TAIL_ADDS]]
        )
        version += 1
    for p in range(PARTITIONS):
        (out / f"part={p:03d}").mkdir()
    old = t0 / 1000
    flags = os.O_CREAT | os.O_WRONLY | os.O_EXCL
    for i in range(n):
        path = str(out / file_path(i))
        os.close(os.open(path, flags, 0o644))
        if kinds[i] != "active":
            os.utime(path, (old, old))
    t_files = time.perf_counter()
    return {
        "generator": GENERATOR_VERSION,
        "files": n,
        "active": len(active),
        "tombstoned": len(tombstoned),
        "strays": n - len(logged),
        "partitions": PARTITIONS,
        "version": version - 1,
        "checkpoint_version": checkpoint_version,
        "checkpoint_tombstones": cp.num_tombstones,
        "build_seconds": {
            "log": round(t_log - t_start, 1),
            "checkpoint": round(t_cp - t_log, 1),
            "files": round(t_files - t_cp, 1),
        },
    }


def ensure_vacuum_table(n: int, data: Path) -> tuple[Path, dict[str, Any]]:
    """The cached table of `n` files, built (into a temporary directory, then renamed) when missing."""
    base = data / f"vacuum-{n}"
    table, manifest_file = base / "table", base / "manifest.json"
    try:
        manifest = json.loads(manifest_file.read_text())
        if manifest.get("generator") == GENERATOR_VERSION and table.is_dir():
            return table, manifest
    except (OSError, ValueError):
        pass
    shutil.rmtree(base, ignore_errors=True)
    tmp = data / f".vacuum-{n}.building-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"building a {n:,}-file table in {tmp} ...", file=sys.stderr, flush=True)
    manifest = build_table(tmp / "table", n)
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    tmp.rename(base)
    print(f"built: {json.dumps(manifest)}", file=sys.stderr, flush=True)
    return table, manifest


# ---------------------------------------------------------------------------------------------------
# Measuring


def link_copy(table: Path) -> Path:
    """A copy of the whole table made of hard links (`cp -al`), in a fresh scratch directory."""
    dest = benchlib.scratch_dir() / "table"
    subprocess.run(["cp", "-al", str(table), str(dest)], check=True)
    return dest


def data_files(table: Path) -> set[str]:
    out = set()
    for entry in os.scandir(table):
        if entry.is_dir() and entry.name != "_delta_log":
            out.update(f"{entry.name}/{f.name}" for f in os.scandir(entry.path))
    return out


#: GNU time, to read a child's peak RSS: `os.wait4` in this process reports at least this process's own
#: peak RSS for any child (the child's pre-exec memory is this process's image), and this process holds
#: the plans.
GNU_TIME = "/usr/bin/time"


def timed(argv: list[str], quiet: tuple[float, float] | None) -> run.Sample:
    """One run of `argv` (after waiting for a quiet CPU, unless `--no-wait-idle`); peak RSS from GNU time."""
    if quiet:
        benchlib.wait_for_quiet(*quiet)
    if not os.access(GNU_TIME, os.X_OK):
        return run.run_process(argv)
    with tempfile.TemporaryDirectory() as tmp:
        rss_file = Path(tmp) / "rss"
        sample = run.run_process([GNU_TIME, "-f", "%M", "-o", str(rss_file), *argv])
        sample.rss_mib = int(rss_file.read_text().split()[-1]) / 1024
    return sample


def _redirect(argv: list[str], stdout: Path) -> list[str]:
    """`argv` with its standard output sent to `stdout` (through `sh -c`, whose own cost is in the sample)."""
    return ["sh", "-c", 'out="$1"; shift; exec "$@" > "$out"', "sh", str(stdout), *argv]


def bench_dry_runs(table: Path, args: argparse.Namespace, quiet: tuple[float, float] | None) -> dict[str, Any]:
    py = benchlib.python()
    work = benchlib.scratch_dir()
    outs = {name: work / f"{name}.txt" for name in ("ours", "ours-cli", "delta-rs")}
    commands = {
        "ours": [py, "-c", OURS_DRY, str(table), str(outs["ours"])],
        "ours-cli": [py, "-c", OURS_CLI_DRY, str(table)],
        "delta-rs": [py, "-c", DELTARS_DRY, str(table), str(outs["delta-rs"])],
    }
    samples: dict[str, list[run.Sample]] = {name: [] for name in commands}
    names = list(commands)
    sets: dict[str, set[str]] = {}
    try:
        for r in range(args.warmup + args.reps):
            shift = r % len(names)
            for name in names[shift:] + names[:shift]:
                if name == "ours-cli":
                    sample = timed(_redirect(commands[name], outs[name]), quiet)
                    doc = json.loads(outs[name].read_text())
                    sample.payload = {"answer": [doc["num_files"]]}
                    sets[name] = {f["path"] for f in doc["files"]}
                else:
                    sample = timed(commands[name], quiet)
                    sets[name] = set(filter(None, outs[name].read_text().split("\n")))
                if r >= args.warmup:
                    samples[name].append(sample)
            print(f"  dry runs: round {r + 1}/{args.warmup + args.reps} done", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work)
    return {"samples": samples, "sets": sets}


def bench_applies(
    table: Path, planned: list[str], args: argparse.Namespace, quiet: tuple[float, float] | None
) -> dict[str, list[run.Sample]]:
    from airflow_delta_provider.delta.maintenance.vacuum import vacuum

    py = benchlib.python()
    work = benchlib.scratch_dir()
    plan_file, list_file = work / "plan.json", work / "files.nul"
    plan_file.write_text(json.dumps(vacuum(str(table)).to_dict()))
    list_file.write_bytes(b"\0".join(p.encode() for p in planned))
    expected_left = data_files(table) - set(planned)
    programs = {
        "ours (plan + apply)": lambda t: [py, "-c", OURS_APPLY, str(t)],
        "ours (saved plan)": lambda t: [py, "-c", OURS_APPLY_PLAN, str(t), str(plan_file)],
        "delta-rs": lambda t: [py, "-c", DELTARS_APPLY, str(t)],
        "rm floor": lambda t: ["sh", "-c", 'cd "$1" && xargs -0 rm -f < "$2"', "sh", str(t), str(list_file)],
    }
    samples: dict[str, list[run.Sample]] = {name: [] for name in programs}
    names = list(programs)
    try:
        for r in range(args.apply_reps):
            shift = r % len(names)
            for name in names[shift:] + names[:shift]:
                copy = link_copy(table)
                try:
                    sample = timed(programs[name](copy), quiet)
                    left = data_files(copy)
                    if left != expected_left:
                        raise SystemExit(
                            f"{name}: {len(left)} data files left, expected {len(expected_left)} "
                            f"(extra {sorted(left - expected_left)[:3]}, missing {sorted(expected_left - left)[:3]})"
                        )
                    samples[name].append(sample)
                finally:
                    shutil.rmtree(copy.parent)
            print(f"  applies: round {r + 1}/{args.apply_reps} done", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work)
    return samples


# ---------------------------------------------------------------------------------------------------
# Report


def med(samples: list[run.Sample], attr: str) -> float:
    return statistics.median(getattr(s, attr) for s in samples)


def row(name: str, samples: list[run.Sample], base: list[run.Sample] | None, base_name: str) -> list[str]:
    walls = [s.wall for s in samples]
    answers = sorted({f"{s.payload['answer'][0]:,}" for s in samples if s.payload.get("answer")}) or ["-"]
    ratio = f"{med(samples, 'wall') / med(base, 'wall'):.2f}x {base_name}" if base else ""
    inproc = [s.payload for s in samples if "import" in s.payload and "work" in s.payload]
    hwms = [s for s in samples if "hwm" in s.payload]
    split = (
        f"{statistics.median(p['import'] for p in inproc):.2f} + {statistics.median(p['work'] for p in inproc):.2f} s"
        if inproc
        else ""
    )
    return [
        name,
        f"{med(samples, 'wall'):.2f} s",
        f"{min(walls):.2f}-{max(walls):.2f}",
        f"{med(samples, 'cpu'):.2f} s",
        f"{med(samples, 'rss_mib'):.0f} MiB",
        f"{statistics.median(s.payload['hwm'] for s in hwms):.0f} MiB" if hwms else "",
        ratio,
        split,
        ", ".join(answers),
    ]


def report(manifest: dict[str, Any], machine: dict[str, str], dry: dict[str, Any], applies: dict | None) -> str:
    s = dry["samples"]
    header = ["command", "wall (median)", "wall range", "CPU", "peak RSS", "peak RSS after the call", "ratio"]
    header += ["in-process import + work", "files"]
    rows = [
        row("dry run: ours, `vacuum(p)`", s["ours"], s["delta-rs"], "delta-rs"),
        row("dry run: ours, `deltalog vacuum --json`", s["ours-cli"], s["delta-rs"], "delta-rs"),
        row("dry run: delta-rs `vacuum(dry_run=True, full=True)`", s["delta-rs"], None, ""),
    ]
    if applies:
        floor = applies["rm floor"]
        rows += [row(f"apply: {name}", applies[name], floor if name != "rm floor" else None, "rm") for name in applies]
    ratio = med(s["ours"], "wall") / med(s["delta-rs"], "wall")
    lines = [
        f"# VACUUM, {manifest['files']:,} files ({manifest['active']:,} active, {manifest['tombstoned']:,} "
        f"tombstoned, {manifest['strays']:,} strays; {manifest['partitions']} partitions; version "
        f"{manifest['version']}, checkpoint {manifest['checkpoint_version']})",
        "",
        *[f"- {k}: {v}" for k, v in machine.items()],
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *["| " + " | ".join(r) + " |" for r in rows],
        "",
        f"Target: our dry run <= 0.5x delta-rs wall: {ratio:.2f}x, {'met' if ratio <= 0.5 else 'MISSED'}. "
        f"Plans: ours = CLI = delta-rs ({len(dry['sets']['ours']):,} files).",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=1_000_000, help="files in the table (default 1,000,000)")
    parser.add_argument("--reps", type=int, default=3, help="timed dry-run rounds (default 3)")
    parser.add_argument("--warmup", type=int, default=1, help="discarded dry-run rounds first (default 1)")
    parser.add_argument("--apply-reps", type=int, default=1, help="apply rounds, each on fresh copies (default 1)")
    parser.add_argument("--no-apply", action="store_true", help="dry runs only")
    benchlib.add_quiet_options(parser, max_wait=10.0)
    parser.add_argument("--no-library-snapshot", action="store_true", help="children import the working tree")
    parser.add_argument("--data", type=Path, default=benchlib.DATA)
    parser.add_argument("--markdown", type=Path, help="also write the report here")
    args = parser.parse_args(argv)
    args.data = args.data.resolve()
    args.data.mkdir(parents=True, exist_ok=True)
    quiet = benchlib.quiet_setting(args)
    table, manifest = ensure_vacuum_table(args.files, args.data)
    machine = benchlib.machine_info()
    machine["table build"] = json.dumps(manifest["build_seconds"])
    if not args.no_library_snapshot:
        root, fingerprint = benchlib.snapshot_library()
        run.CHILD["cwd"] = str(root)
        run.CHILD["env"] = {**os.environ, "PYTHONPATH": str(root)}
        machine["library sources sha256"] = f"{fingerprint} (frozen copy in {root.relative_to(benchlib.REPO)})"
    started = time.time()
    dry = bench_dry_runs(table, args, quiet)
    sets = dry["sets"]
    expected = manifest["tombstoned"] + manifest["strays"]
    if not sets["ours"] == sets["ours-cli"] == sets["delta-rs"] or len(sets["ours"]) != expected:
        only_ours, only_rs = sorted(sets["ours"] - sets["delta-rs"]), sorted(sets["delta-rs"] - sets["ours"])
        raise SystemExit(
            f"plans differ: ours {len(sets['ours'])}, CLI {len(sets['ours-cli'])}, delta-rs {len(sets['delta-rs'])}, "
            f"expected {expected}; only ours {only_ours[:3]}, only delta-rs {only_rs[:3]}"
        )
    applies = None if args.no_apply else bench_applies(table, sorted(sets["ours"]), args, quiet)
    machine["loadavg (start -> end)"] = f"{machine.pop('loadavg')} -> {benchlib.loadavg()}"
    machine["duration"] = f"{time.time() - started:.0f} s"
    text = report(manifest, machine, dry, applies)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
