"""Benchmark `airflow_delta_provider.delta` against delta-rs, whole process and in-process.

    .venv/bin/python bench/run.py                  # S, M, L; 5 reps; latest-version; update()
    .venv/bin/python bench/run.py --quick          # S and M, 3 reps, log1k/log10k, update() on M
    .venv/bin/python bench/run.py --scales S,M --reps 7 --markdown /tmp/report.md --json /tmp/raw.json

Every timed command is a fresh `python -c` process. Within one benchmark the commands run
round-robin per repetition (the order rotates each round), after one warm-up round that is
discarded; medians are reported. Wall time is measured around spawn + exit; peak RSS and CPU time
(user + sys) come from `os.wait4` for that child alone. Each child also prints what it measured
in-process (import time, work time) and its answer, which is checked across implementations and
against the generator's manifest. Missing tables are generated first (bench/generate.py).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import benchlib

# ---------------------------------------------------------------------------------------------------
# Child programs (argv: table path, then program-specific values). Each prints one JSON line.

OURS_LOAD = """
import json, sys, time
t0 = time.perf_counter()
from airflow_delta_provider.delta import DeltaLog
t1 = time.perf_counter()
s = DeltaLog.for_table(sys.argv[1]).snapshot
answer = [s.version, s.num_files, s.size_in_bytes,
          s.num_tombstones(retention_hours=float(sys.argv[2]), now_ms=int(sys.argv[3]))]
t2 = time.perf_counter()
print(json.dumps({"answer": answer, "import": t1 - t0, "work": t2 - t1}))
"""

DELTARS_LOAD = """
import json, sys, time
t0 = time.perf_counter()
from deltalake import DeltaTable
t1 = time.perf_counter()
dt = DeltaTable(sys.argv[1])
t2 = time.perf_counter()
adds = dt.get_add_actions()
total = 0
for chunk in adds.column("size_bytes").chunks:
    view = memoryview(chunk.buffer()).cast("B").cast("q")
    if len(view) == len(chunk) and chunk.null_count == 0:
        total += sum(view)
    else:
        total += sum(x for x in chunk.to_pylist() if x is not None)
answer = [dt.version(), adds.num_rows, total]
t3 = time.perf_counter()
print(json.dumps({"answer": answer, "import": t1 - t0, "work": t3 - t1, "open": t2 - t1, "adds": t3 - t2}))
"""

# The raw floor: list, read the bytes, parse the checkpoint (all columns, or all but `*.stats` with
# argv[2] == "nostats") and every commit's JSON. No reconciliation, no validation.
FLOOR_LOAD = """
import json, os, sys, time
t0 = time.perf_counter()
import pyarrow as pa, pyarrow.parquet as pq
t1 = time.perf_counter()
log = os.path.join(sys.argv[1], "_delta_log")
names = sorted(os.listdir(log))
with open(os.path.join(log, "_last_checkpoint"), "rb") as fh:
    cp = json.loads(fh.read())["version"]
commits = [n for n in names if len(n) == 25 and n.endswith(".json") and int(n[:20]) > cp]
t2 = time.perf_counter()
with open(os.path.join(log, f"{cp:020d}.checkpoint.parquet"), "rb") as fh:
    cp_bytes = fh.read()
blobs = []
for n in commits:
    with open(os.path.join(log, n), "rb") as fh:
        blobs.append(fh.read())
t3 = time.perf_counter()
pf = pq.ParquetFile(pa.BufferReader(cp_bytes))  # not read_table: that imports pyarrow.dataset
if sys.argv[2] == "nostats":  # every leaf column but the stats strings
    def leaves(t, name):
        if pa.types.is_struct(t):
            for f in t:
                yield from leaves(f.type, name + "." + f.name)
        else:
            yield name
    columns = [c for f in pf.schema_arrow for c in leaves(f.type, f.name) if not c.endswith(".stats")]
    table = pf.read(columns=columns)
else:
    table = pf.read()
t4 = time.perf_counter()
actions = 0
for data in blobs:
    lines = [line for line in data.split(b"\\n") if line.strip()]
    actions += len(json.loads(b"[" + b",".join(lines) + b"]"))
t5 = time.perf_counter()
print(json.dumps({"answer": [cp, table.num_rows, len(commits), actions], "import": t1 - t0, "work": t5 - t1,
                  "list": t2 - t1, "read": t3 - t2, "parse_checkpoint": t4 - t3, "parse_json": t5 - t4}))
"""

STARTUP = {
    "python -c pass": "pass",
    "import json, pyarrow.parquet": "import json, pyarrow.parquet",
    "import airflow_delta_provider.delta": "import airflow_delta_provider.delta",
    "from airflow_delta_provider.delta import DeltaLog": "from airflow_delta_provider.delta import DeltaLog",
    "import deltalake": "import deltalake",
}


def startup_program(stmt: str) -> str:
    return (
        "import time, json\nt0 = time.perf_counter()\n"
        f"{stmt}\n"
        "print(json.dumps({'answer': None, 'import': time.perf_counter() - t0, 'work': 0.0}))\n"
    )


OURS_LATEST = """
import json, sys, time
t0 = time.perf_counter()
from airflow_delta_provider.delta import DeltaLog
t1 = time.perf_counter()
v = DeltaLog.for_table(sys.argv[1]).latest_version()
t2 = time.perf_counter()
print(json.dumps({"answer": [v], "import": t1 - t0, "work": t2 - t1}))
"""

DELTARS_LATEST = """
import json, sys, time
t0 = time.perf_counter()
from deltalake import DeltaTable
t1 = time.perf_counter()
v = DeltaTable(sys.argv[1]).version()
t2 = time.perf_counter()
print(json.dumps({"answer": [v], "import": t1 - t0, "work": t2 - t1}))
"""

OURS_LATEST_WARM = """
import json, sys, timeit
from airflow_delta_provider.delta import DeltaLog
p, n = sys.argv[1], int(sys.argv[2])
log = DeltaLog.for_table(p)
v = log.latest_version()
g = {"DeltaLog": DeltaLog, "p": p, "log": log}
via = min(timeit.repeat("DeltaLog.for_table(p).latest_version()", globals=g, number=n, repeat=5)) / n
direct = sorted(timeit.repeat("log.latest_version()", globals=g, number=n, repeat=5))
print(json.dumps({"answer": [v], "for_table_us": via * 1e6, "direct_us": direct[0] / n * 1e6,
                  "direct_median_us": direct[2] / n * 1e6}))
"""

# ---------------------------------------------------------------------------------------------------
# Measuring one process


@dataclass
class Sample:
    wall: float
    cpu: float
    rss_mib: float
    payload: dict
    busy: float = -1.0


@dataclass
class Command:
    key: tuple[str, str]  # (group, name)
    argv: list[str]
    samples: list[Sample] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def med(self, attr: str) -> float:
        return statistics.median(getattr(s, attr) for s in self.samples)

    def pmed(self, key: str) -> float:
        values = [s.payload[key] for s in self.samples if key in s.payload]
        return statistics.median(values) if values else float("nan")

    @property
    def answer(self) -> object:
        answers = {json.dumps(s.payload.get("answer")) for s in self.samples}
        return json.loads(answers.pop()) if len(answers) == 1 else f"UNSTABLE: {sorted(answers)}"


#: Where children run and what they import: set by `main` to a frozen copy of the library.
CHILD: dict[str, object] = {"cwd": None, "env": None}


def run_process(argv: list[str]) -> Sample:
    """Run `argv`; wall time, CPU time and peak RSS of exactly this child; its JSON line."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd=CHILD["cwd"], env=CHILD["env"]
        )
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:3]}... exited {proc.returncode}:\n{stderr[-3000:]}")
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    payload = json.loads(lines[-1]) if lines else {}
    return Sample(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, payload)


def run_round_robin(commands: list[Command], reps: int, warmup: int, quiet: tuple[float, float] | None) -> None:
    """`warmup` discarded rounds, then `reps` rounds; each round runs every command once, rotated."""
    total = warmup + reps
    for r in range(total):
        shift = r % len(commands)
        order = commands[shift:] + commands[:shift]
        for cmd in order:
            busy = benchlib.wait_for_quiet(*quiet) if quiet else -1.0
            try:
                sample = run_process(cmd.argv)
            except RuntimeError as exc:  # a rare crash (seen once: SIGABRT at pyarrow teardown): rerun once
                cmd.failures.append(str(exc).splitlines()[-1][:200])
                print(f"  {'/'.join(cmd.key)} failed ({cmd.failures[-1]}); rerunning", file=sys.stderr)
                sample = run_process(cmd.argv)
            sample.busy = busy
            if r >= warmup:
                cmd.samples.append(sample)
        print(f"  round {r + 1}/{total} done{' (warm-up)' if r < warmup else ''}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------------
# Formatting


def fmt_s(x: float) -> str:
    if x != x:
        return "n/a"
    return f"{x:.3f}" if x < 10 else f"{x:.2f}"


def fmt_ms(x: float) -> str:
    return "n/a" if x != x else (f"{x * 1000:.2f}" if x < 0.1 else f"{x * 1000:.0f}")


def spread(cmd: Command) -> str:
    walls = [s.wall for s in cmd.samples]
    return f"{fmt_s(min(walls))}-{fmt_s(max(walls))}"


def table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def verdict(ok: bool) -> str:
    return "met" if ok else "**MISSED**"


# ---------------------------------------------------------------------------------------------------
# Benchmarks


def bench_loads(scales: list[str], manifests: dict[str, dict], args: argparse.Namespace, quiet: tuple | None) -> dict:
    py = benchlib.python()
    commands: list[Command] = []
    for name, stmt in STARTUP.items():
        commands.append(Command(("startup", name), [py, "-c", startup_program(stmt)]))
    for scale in scales:
        m = manifests[scale]
        path = str(benchlib.table_dir(scale, args.data))
        commands.append(
            Command((scale, "ours"), [py, "-c", OURS_LOAD, path, str(m["retention_hours"]), str(m["now_ms"])])
        )
        commands.append(Command((scale, "delta-rs"), [py, "-c", DELTARS_LOAD, path]))
        commands.append(Command((scale, "floor"), [py, "-c", FLOOR_LOAD, path, "all"]))
        commands.append(Command((scale, "floor-nostats"), [py, "-c", FLOOR_LOAD, path, "nostats"]))
    print(f"snapshot loads: {len(commands)} commands x ({args.warmup} warm-up + {args.reps}) rounds", file=sys.stderr)
    run_round_robin(commands, args.reps, args.warmup, quiet)
    return {c.key: c for c in commands}


def bench_latest(logs: list[str], manifests: dict[str, dict], args: argparse.Namespace, quiet: tuple | None) -> dict:
    py = benchlib.python()
    commands: list[Command] = []
    for name in logs:
        path = str(benchlib.table_dir(name, args.data))
        commands.append(Command((name, "ours"), [py, "-c", OURS_LATEST, path]))
        commands.append(Command((name, "delta-rs"), [py, "-c", DELTARS_LATEST, path]))
    print(f"latest version: {len(commands)} commands x ({args.warmup} + {args.reps}) rounds", file=sys.stderr)
    run_round_robin(commands, args.reps, args.warmup, quiet)
    result: dict = {c.key: c for c in commands}
    for name in logs:
        path = str(benchlib.table_dir(name, args.data))
        result[(name, "warm")] = run_process([py, "-c", OURS_LATEST_WARM, path, str(args.warm_iterations)])
    return result


UPDATE_CHILD = """
import json, shutil, statistics, sys, time
sys.path.insert(0, sys.argv[1])
import benchlib
from pathlib import Path
from airflow_delta_provider.delta import DeltaLog
src, n_updates, with_deltars = Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
work = benchlib.scratch_dir()
try:
    table = benchlib.link_copy(src, work / "table")
    t0 = time.perf_counter()
    log = DeltaLog.for_table(str(table))
    snap = log.snapshot
    t_load = time.perf_counter() - t0
    base_version, base_files = snap.version, snap.num_files
    dt = None
    if with_deltars:
        from deltalake import DeltaTable
        dt = DeltaTable(str(table))
    noop = []
    for _ in range(5):
        t = time.perf_counter(); log.update(); noop.append(time.perf_counter() - t)
    ours, ours_answers, theirs, ok = [], [], [], True
    for i in range(n_updates):
        v = snap.version + 1
        benchlib.append_commit(table, v, i)
        t = time.perf_counter()
        snap = log.update()
        t1 = time.perf_counter()
        answers = (snap.version, snap.num_files, snap.size_in_bytes, snap.num_tombstones(now_ms=0))
        t2 = time.perf_counter()
        ours.append(t1 - t)
        ours_answers.append(t2 - t1)
        ok = ok and answers[0] == v and answers[1] == base_files + i + 1
        if dt is not None:
            t = time.perf_counter()
            dt.update_incremental()
            theirs.append(time.perf_counter() - t)
            ok = ok and dt.version() == v
    DeltaLog.clear_cache()
    t = time.perf_counter()
    full = DeltaLog.for_table(str(table)).snapshot
    t_reload = time.perf_counter() - t
    same = (full.version, full.num_files, full.size_in_bytes, full.num_tombstones(now_ms=0)) == (
        snap.version, snap.num_files, snap.size_in_bytes, snap.num_tombstones(now_ms=0))
    print(json.dumps({"base_version": base_version, "base_files": base_files, "load": t_load,
        "reload": t_reload, "updates": ours, "answers_after": ours_answers, "deltars_updates": theirs, "noop": noop,
        "consistent": ok, "equals_full_reload": same, "final_files": snap.num_files,
        "full_reload_files": full.num_files}))
finally:
    shutil.rmtree(work, ignore_errors=True)
"""


def bench_update(scale: str, args: argparse.Namespace) -> Sample:
    path = str(benchlib.table_dir(scale, args.data))
    argv = [
        benchlib.python(),
        "-c",
        UPDATE_CHILD,
        str(benchlib.BENCH_DIR),
        path,
        str(args.updates),
        "0" if args.no_deltars_update else "1",
    ]
    print(f"update(): {args.updates} single-commit appends on a hard-linked copy of {scale}", file=sys.stderr)
    return run_process(argv)


# ---------------------------------------------------------------------------------------------------
# Report

TARGET_RATIO = {"S": 1.5, "M": 0.5, "L": 0.3}  # issue 15: S may be slower without the pure-Python reader


def report(
    args: argparse.Namespace,
    machine: dict,
    manifests: dict[str, dict],
    loads: dict | None,
    latest: dict | None,
    update: tuple[str, Sample] | None,
) -> tuple[str, list[list[str]]]:
    parts: list[str] = []
    targets: list[list[str]] = []
    parts.append("### Machine\n")
    parts.append(table(["", ""], [[k, str(v)] for k, v in machine.items()]))
    parts.append(
        f"\nreps: {args.reps} (+{args.warmup} warm-up round), interleaved round-robin; "
        + ("quiet-wait: off" if args.no_wait_idle else f"quiet-wait: other CPU use < {args.idle_threshold:.0%}")
    )
    if loads:
        scales = [s for s in args.scales if (s, "ours") in loads]
        parts.append("\n### Snapshot load, whole process (median wall; peak RSS of the process)\n")
        rows = []
        for s in scales:
            m = manifests[s]
            ours, theirs, floor = loads[(s, "ours")], loads[(s, "delta-rs")], loads[(s, "floor")]
            ratio = ours.med("wall") / theirs.med("wall")
            rows.append(
                [
                    s,
                    f"{m['num_files']:,}",
                    f"{m['checkpoint_rows']:,} ({m['checkpoint_bytes'] / 1e6:.0f} MB)",
                    str(m["commits_after_checkpoint"]),
                    f"{fmt_s(ours.med('wall'))} ({spread(ours)})",
                    f"{fmt_s(theirs.med('wall'))} ({spread(theirs)})",
                    f"**{ratio:.2f}x**",
                    f"<= {TARGET_RATIO.get(s, float('nan')):.1f}x",
                    f"{ours.med('rss_mib'):.0f}",
                    f"{theirs.med('rss_mib'):.0f}",
                    fmt_s(floor.med("wall")),
                    f"{floor.med('rss_mib'):.0f}",
                    fmt_s(loads[(s, "floor-nostats")].med("wall")),
                ]
            )
            if s in TARGET_RATIO:
                targets.append(
                    [
                        f"{s}: ours/delta-rs wall <= {TARGET_RATIO[s]}x",
                        f"{ratio:.2f}x",
                        verdict(ratio <= TARGET_RATIO[s]),
                    ]
                )
            if s == "L":
                ok = ours.med("rss_mib") <= theirs.med("rss_mib")
                targets.append(
                    [
                        "L: peak RSS <= delta-rs",
                        f"{ours.med('rss_mib'):.0f} MiB vs {theirs.med('rss_mib'):.0f} MiB",
                        verdict(ok),
                    ]
                )
        parts.append(
            table(
                [
                    "scale",
                    "active files",
                    "checkpoint rows",
                    "commits after",
                    "ours s (min-max)",
                    "delta-rs s (min-max)",
                    "ours/delta-rs",
                    "target",
                    "ours RSS MiB",
                    "delta-rs RSS MiB",
                    "parse floor s",
                    "floor RSS MiB",
                    "floor w/o stats s",
                ],
                rows,
            )
        )
        parts.append("\n### Where the time goes (medians; in-process numbers are measured inside the child)\n")
        rows = []
        for s in scales:
            ours, theirs, floor = loads[(s, "ours")], loads[(s, "delta-rs")], loads[(s, "floor")]
            rows.append(
                [
                    s,
                    fmt_s(ours.med("cpu")),
                    fmt_s(theirs.med("cpu")),
                    fmt_s(ours.pmed("import")),
                    fmt_s(ours.pmed("work")),
                    fmt_s(theirs.pmed("import")),
                    fmt_s(theirs.pmed("open")),
                    fmt_s(theirs.pmed("adds")),
                    fmt_s(floor.pmed("read")),
                    fmt_s(floor.pmed("parse_checkpoint")),
                    fmt_s(loads[(s, "floor-nostats")].pmed("parse_checkpoint")),
                    fmt_s(floor.pmed("parse_json")),
                    fmt_s(floor.pmed("work")),
                ]
            )
        parts.append(
            table(
                [
                    "scale",
                    "ours CPU s",
                    "delta-rs CPU s",
                    "ours import",
                    "ours load",
                    "delta-rs import",
                    "DeltaTable(p)",
                    "get_add_actions + sum",
                    "floor: read bytes",
                    "floor: parse checkpoint",
                    "floor: parse checkpoint w/o stats",
                    "floor: parse JSON",
                    "floor: list+read+parse",
                ],
                rows,
            )
        )
        parts.append("\n### Answers (version, active files, bytes, tombstones within retention)\n")
        rows = []
        for s in scales:
            m = manifests[s]
            ours, theirs = loads[(s, "ours")].answer, loads[(s, "delta-rs")].answer
            expected = [m["version"], m["num_files"], m["size_in_bytes"], m["tombstones_unexpired"]]
            agree = ours == expected and isinstance(theirs, list) and theirs == expected[:3]
            rows.append(
                [s, str(ours), str(theirs) + " (no tombstone API)", str(expected), "yes" if agree else "**NO**"]
            )
            targets.append([f"{s}: answers agree", "yes" if agree else "no", verdict(agree)])
        parts.append(table(["scale", "ours", "delta-rs", "expected (generator)", "agree"], rows))
        parts.append(
            "\nTombstones are counted with retention_hours/now_ms from the manifest (a fixed instant). "
            "delta-rs has no tombstone API; `generate.py --verify` counts them with a VACUUM dry run."
        )
        parts.append("\n### Interpreter and imports (whole process; `import` = measured inside the child)\n")
        rows = []
        for name in STARTUP:
            c = loads[("startup", name)]
            rows.append([f"`{name}`", fmt_s(c.med("wall")), fmt_s(c.pmed("import")), f"{c.med('rss_mib'):.0f}"])
        parts.append(table(["command", "wall s", "import s", "RSS MiB"], rows))
        for name in ("import airflow_delta_provider.delta", "from airflow_delta_provider.delta import DeltaLog"):
            imp = loads[("startup", name)].pmed("import")
            targets.append([f"`{name}` < 0.15 s (in-process)", f"{imp:.3f} s", verdict(imp < 0.15)])
    if latest:
        logs = [n for n in args.logs if (n, "ours") in latest]
        parts.append("\n### Latest version of a long log (fresh process; in-process = the call alone)\n")
        rows = []
        for n in logs:
            m = manifests[n]
            ours, theirs, warm = latest[(n, "ours")], latest[(n, "delta-rs")], latest[(n, "warm")]
            cold = ours.pmed("work")
            agree = ours.answer == theirs.answer == [m["version"]] == warm.payload["answer"]
            rows.append(
                [
                    n,
                    f"{m['log_files']:,}",
                    fmt_s(ours.med("wall")),
                    fmt_ms(cold),
                    fmt_s(theirs.med("wall")),
                    fmt_s(theirs.pmed("work")),
                    f"{theirs.med('wall') / cold:,.0f}x",
                    f"{theirs.pmed('work') / cold:,.0f}x",
                    f"{theirs.med('wall') / ours.med('wall'):.1f}x",
                    f"{warm.payload['direct_us']:.1f}",
                    f"{warm.payload['for_table_us']:.1f}",
                    "yes" if agree else "**NO**",
                ]
            )
            if n == "log100k":
                r = theirs.med("wall") / cold
                targets.append(
                    ["log100k: >= 500x cheaper than delta-rs fresh process", f"{r:,.0f}x", verdict(r >= 500)]
                )
                us = warm.payload["direct_us"]
                targets.append(["log100k: warm latest_version() < 1 ms", f"{us:.1f} us", verdict(us < 1000)])
        parts.append(
            table(
                [
                    "log",
                    "log files",
                    "ours wall s",
                    "ours call ms",
                    "delta-rs wall s",
                    "delta-rs DeltaTable(p).version() s",
                    "delta-rs wall / ours call",
                    "delta-rs call / ours call",
                    "wall / wall",
                    "ours warm us",
                    "ours warm via for_table us",
                    "agree",
                ],
                rows,
            )
        )
        parts.append(
            '\n"ours call" is `DeltaLog.for_table(p).latest_version()` timed inside a fresh process '
            '(after imports); "warm" is the same call repeated in one process (timeit, best of 5).'
        )
    if update:
        scale, sample = update
        p = sample.payload
        ups = p["updates"]
        med = statistics.median(ups)
        after = p.get("answers_after") or [float("nan")]
        med_after = statistics.median(after)
        med_total = statistics.median(u + a for u, a in zip(ups, after, strict=False))
        parts.append(f"\n### Incremental update on {scale} (one process; one single-file append commit per update)\n")
        rows = [
            [
                scale,
                f"{p['base_files']:,}",
                fmt_s(p["load"]),
                f"{med * 1000:.1f}",
                f"{min(ups) * 1000:.1f}-{max(ups) * 1000:.1f}",
                f"{med_after * 1000:.1f}",
                f"{after[0] * 1000:.1f}",
                f"{med_total * 1000:.1f}",
                f"{statistics.median(p['noop']) * 1000:.2f}",
                f"{statistics.median(p['deltars_updates']) * 1000:.1f}" if p["deltars_updates"] else "n/a",
                fmt_s(p["reload"]),
                "yes" if p["equals_full_reload"] and p["consistent"] else "**NO**",
            ]
        ]
        parts.append(
            table(
                [
                    "scale",
                    "files",
                    "initial load s",
                    f"update() ms (median of {len(ups)})",
                    "min-max ms",
                    "then the 4 answers ms",
                    "answers after the 1st update ms",
                    "update() + answers ms",
                    "update() with nothing new ms",
                    "delta-rs update_incremental() ms",
                    "full reload s",
                    "equals full reload",
                ],
                rows,
            )
        )
        parts.append(
            '\n"then the 4 answers" is reading `version, num_files, size_in_bytes, num_tombstones()` from the '
            "snapshot `update()` returned: state the library defers is paid there. The first update after a "
            "load of a checkpoint with >= 100k files also sorts its paths once (the index later updates "
            'search): that one-time cost is the "after the 1st update" column, not in the median.'
        )

        if scale == "L":
            targets.append(["L: update() after one commit <= 5 ms", f"{med * 1000:.1f} ms", verdict(med <= 0.005)])
            targets.append(
                [
                    "L: update() + version/files/bytes/tombstones <= 5 ms",
                    f"{med_total * 1000:.1f} ms",
                    verdict(med_total <= 0.005),
                ]
            )
        targets.append(
            [f"{scale}: update() equals a full reload", str(p["equals_full_reload"]), verdict(p["equals_full_reload"])]
        )
    crashed = [
        f"{'/'.join(c.key)}: {f}"
        for group in (loads or {}, latest or {})
        for c in group.values()
        if isinstance(c, Command)
        for f in c.failures
    ]
    if crashed:
        parts.append("\nChild processes that crashed and were rerun: " + "; ".join(crashed))
    if targets:
        parts.append("\n### Targets\n")
        parts.append(table(["target", "measured", ""], targets))
    return "\n".join(parts) + "\n", targets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scales", default="S,M,L", help="comma-separated, of S,M,L (default all)")
    parser.add_argument("--logs", default="log1k,log10k,log100k", help="long logs for the latest-version bench")
    parser.add_argument("--update-scale", default=None, help="table for the update() bench (default: largest)")
    parser.add_argument("--reps", type=int, default=5, help="timed rounds per benchmark (default 5)")
    parser.add_argument("--warmup", type=int, default=1, help="discarded rounds first (default 1)")
    parser.add_argument("--quick", action="store_true", help="S and M, 3 reps, log1k/log10k, update() on M")
    parser.add_argument("--updates", type=int, default=20, help="single-commit updates to time (default 20)")
    parser.add_argument("--warm-iterations", type=int, default=2000)
    parser.add_argument("--skip-loads", action="store_true")
    parser.add_argument("--skip-latest", action="store_true")
    parser.add_argument("--skip-update", action="store_true")
    parser.add_argument("--no-deltars-update", action="store_true", help="don't time delta-rs update_incremental")
    benchlib.add_quiet_options(parser, max_wait=10.0)
    parser.add_argument(
        "--no-library-snapshot",
        action="store_true",
        help="import the working tree in children instead of a frozen copy taken at the start",
    )
    parser.add_argument("--library", type=Path, help="root of an existing library copy to run against")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a performance target is missed")
    parser.add_argument("--data", type=Path, default=benchlib.DATA)
    parser.add_argument("--markdown", type=Path, help="also write the report here")
    parser.add_argument("--json", type=Path, help="write raw samples here")
    args = parser.parse_args(argv)
    args.data = args.data.resolve()
    if args.quick:
        args.scales, args.reps = "S,M", min(args.reps, 3)
        if args.logs == parser.get_default("logs"):
            args.logs = "log1k,log10k"
    args.scales = [s for s in args.scales.split(",") if s]
    args.logs = [s for s in args.logs.split(",") if s]
    if args.update_scale is None:
        args.update_scale = next((s for s in ("L", "M", "S") if s in args.scales), "S")
    quiet = benchlib.quiet_setting(args)

    needed = [*args.scales] if not args.skip_loads else []
    if not args.skip_latest:
        needed += args.logs
    if not args.skip_update and args.update_scale not in needed:
        needed.append(args.update_scale)
    manifests = {s: benchlib.ensure_table(s, args.data, generate=not args.no_generate) for s in needed}

    machine = benchlib.machine_info()
    start_print = machine["library sources sha256"]
    if args.library:
        root = args.library.resolve()
        CHILD["cwd"] = str(root)
        CHILD["env"] = {**os.environ, "PYTHONPATH": str(root)}
        machine["library sources sha256"] = f"{benchlib.library_fingerprint(root)} (copy in {args.library})"
    elif not args.no_library_snapshot:
        root, fingerprint = benchlib.snapshot_library()
        CHILD["cwd"] = str(root)
        CHILD["env"] = {**os.environ, "PYTHONPATH": str(root)}
        machine["library sources sha256"] = f"{fingerprint} (frozen copy in {root.relative_to(benchlib.REPO)})"
    started = time.time()
    loads = None if args.skip_loads else bench_loads(args.scales, manifests, args, quiet)
    latest = None if args.skip_latest or not args.logs else bench_latest(args.logs, manifests, args, quiet)
    update = None if args.skip_update else (args.update_scale, bench_update(args.update_scale, args))
    end_print = benchlib.library_fingerprint()
    if end_print != start_print:
        if args.no_library_snapshot:
            machine["library sources sha256"] += f" -> {end_print} (**the library changed during the run**)"
            print("WARNING: the library's sources changed during the run", file=sys.stderr)
        else:
            machine["library sources sha256"] += f"; the working tree changed to {end_print} during the run"
    machine["loadavg (start -> end)"] = f"{machine.pop('loadavg')} -> {benchlib.loadavg()}"
    busy = [
        s.busy
        for group in (loads or {}, latest or {})
        for c in group.values()
        if isinstance(c, Command)
        for s in c.samples
        if s.busy >= 0
    ]
    if busy:
        machine["other CPU load before runs (median)"] = f"{statistics.median(busy):.0%}"
    machine["duration"] = f"{time.time() - started:.0f} s"
    text, targets = report(args, machine, manifests, loads, latest, update)
    print(text)
    if args.markdown:
        args.markdown.write_text(text)
    if args.json:
        raw: dict = {
            "machine": machine,
            "manifests": {k: {x: y for x, y in v.items() if x != "tombstone_paths"} for k, v in manifests.items()},
        }
        for name, group in (("loads", loads), ("latest", latest)):
            if group:
                raw[name] = {
                    "/".join(k): ([s.__dict__ for s in v.samples] if isinstance(v, Command) else v.__dict__)
                    for k, v in group.items()
                }
        if update:
            raw["update"] = {"scale": update[0], **update[1].__dict__}
        args.json.write_text(json.dumps(raw, indent=1))
    wrong = [t for t in targets if t[2] != "met" and ("agree" in t[0] or "equals" in t[0])]
    missed = [t for t in targets if t[2] != "met"]
    return 1 if wrong or (missed and args.strict) else 0


if __name__ == "__main__":
    sys.exit(main())
