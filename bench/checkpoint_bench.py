"""Benchmark the checkpoint writer against delta-rs `create_checkpoint()` (issue 16).

    .venv/bin/python bench/checkpoint_bench.py                    # M and L, 3 reps
    .venv/bin/python bench/checkpoint_bench.py --scales M --reps 5
    .venv/bin/python bench/checkpoint_bench.py --scales L --reps 1 --markdown /tmp/cp.md

Each timed command is a fresh `python -c` process writing a checkpoint of the latest version of a
generated table (bench/generate.py: M = 106,715 files, L = 1,026,312 files, a checkpoint then 500 /
1,000 commits): ours is `write_checkpoint(DeltaLog(p))` (build, publish, read back and compare,
`_last_checkpoint`), delta-rs's is `DeltaTable(p).create_checkpoint()`. Every run gets its own copy of
the table's `_delta_log` made of hard links (`_last_checkpoint` copied, since both writers replace
it), made before the clock starts and removed after. Whole-process wall (spawn to exit), CPU and
peak RSS come from `os.wait4` (`run.run_process`); one discarded warm-up round, then `--reps` rounds,
commands alternating, medians reported; before each run it waits for a quiet CPU (`benchlib`).
Children import a frozen copy of the library, as `run.py` does.

Targets (issue 16, for L): ours <= 0.5x delta-rs wall, and ours below delta-rs's peak RSS. Exits 1
when the L target is missed or any answer disagrees.
Answers: both report the version and the number of `add` rows written (ours from its result,
delta-rs's from its `_last_checkpoint`), which must equal the generator's manifest; with `--cross`
(default on) each library then loads the other's checkpoint once and must find the manifest's files.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

import benchlib
import run

OURS = """
import json, sys, time
t0 = time.perf_counter()
from airflow_delta_provider.delta import DeltaLog
from airflow_delta_provider.delta.maintenance.checkpoint import write_checkpoint
t1 = time.perf_counter()
r = write_checkpoint(DeltaLog(sys.argv[1]))
t2 = time.perf_counter()
answer = [r.version, r.num_add_files]
print(json.dumps({"answer": answer, "bytes": r.size_in_bytes, "import": t1 - t0, "work": t2 - t1}))
"""

DELTARS = """
import json, os, sys, time
t0 = time.perf_counter()
from deltalake import DeltaTable
t1 = time.perf_counter()
dt = DeltaTable(sys.argv[1])
dt.create_checkpoint()
t2 = time.perf_counter()
hint = json.load(open(os.path.join(sys.argv[1], "_delta_log", "_last_checkpoint")))
print(json.dumps({"answer": [hint["version"], hint["numOfAddFiles"]], "bytes": hint.get("sizeInBytes"),
                  "import": t1 - t0, "work": t2 - t1}))
"""

CROSS_OURS_READS = """
import json, sys
from airflow_delta_provider.delta import DeltaLog
s = DeltaLog(sys.argv[1]).update()
print(json.dumps({"answer": [s.version, s.num_files], "checkpoint": list(s.log_segment.checkpoint.names)}))
"""

CROSS_DELTARS_READS = """
import json, sys
from deltalake import DeltaTable
dt = DeltaTable(sys.argv[1])
print(json.dumps({"answer": [dt.version(), len(dt.file_uris())]}))
"""


def fresh_copy(scale: str, data: Path) -> Path:
    """A hard-linked copy of the table's `_delta_log` with its own `_last_checkpoint`."""
    dest = benchlib.scratch_dir() / "table"
    benchlib.link_copy(benchlib.table_dir(scale, data), dest)
    hint = dest / "_delta_log" / "_last_checkpoint"
    if hint.exists():
        hint.unlink()
        shutil.copy2(benchlib.table_dir(scale, data) / "_delta_log" / "_last_checkpoint", hint)
    return dest


def time_scale(scale: str, args: argparse.Namespace, quiet: tuple[float, float] | None) -> dict[str, list]:
    """{name: [Sample, ...]} for ours and delta-rs on one scale."""
    programs = {"ours": OURS, "delta-rs": DELTARS}
    samples: dict[str, list] = {name: [] for name in programs}
    names = list(programs)
    for r in range(args.warmup + args.reps):
        for name in names[r % 2 :] + names[: r % 2]:
            table = fresh_copy(scale, args.data)
            try:
                if quiet:
                    benchlib.wait_for_quiet(*quiet)
                sample = run.run_process([benchlib.python(), "-c", programs[name], str(table)])
            finally:
                shutil.rmtree(table.parent)
            if r >= args.warmup:
                samples[name].append(sample)
        print(f"  {scale} round {r + 1}/{args.warmup + args.reps} done", file=sys.stderr, flush=True)
    return samples


def cross_read(scale: str, args: argparse.Namespace) -> dict[str, list]:
    """Each library reads the checkpoint the other wrote: [version, files] it finds."""
    out = {}
    for writer, reader, program in (("ours", "delta-rs", CROSS_DELTARS_READS), ("delta-rs", "ours", CROSS_OURS_READS)):
        table = fresh_copy(scale, args.data)
        try:
            run.run_process([benchlib.python(), "-c", OURS if writer == "ours" else DELTARS, str(table)])
            # the new checkpoint is the newest one and `_last_checkpoint` names it: that is what is read
            out[f"{reader} reads {writer}'s"] = run.run_process([benchlib.python(), "-c", program, str(table)]).payload
        finally:
            shutil.rmtree(table.parent)
    return out


def report(results: dict[str, dict], manifests: dict[str, dict], machine: dict[str, str]) -> tuple[str, bool]:
    lines = ["# Checkpoint writer vs delta-rs `create_checkpoint()`", ""]
    lines += [f"- {k}: {v}" for k, v in machine.items()]
    header = ["scale", "files", "ours wall", "delta-rs wall", "ours/delta-rs", "target", "ours RSS", "delta-rs RSS"]
    header += ["ours CPU", "delta-rs CPU", "ours in-process (import + write)", "answers"]
    lines += ["", "| " + " | ".join(header) + " |"]
    lines.append("|" + "---|" * 12)
    ok_all = True
    for scale, res in results.items():
        ours, rs = res["ours"], res["delta-rs"]

        def med(samples: list, attr: str) -> float:
            return statistics.median(getattr(s, attr) for s in samples)

        ratio = med(ours, "wall") / med(rs, "wall")
        rss_ok = med(ours, "rss_mib") < med(rs, "rss_mib")
        expected = [manifests[scale]["version"], manifests[scale]["num_files"]]
        answers = {json.dumps(s.payload.get("answer")) for s in ours + rs}
        right = answers == {json.dumps(expected)}
        cross = res.get("cross", {})
        right = right and all(v.get("answer") == expected for v in cross.values())
        met = ratio <= 0.5 and rss_ok and right
        target = ("met" if met else "MISSED") if scale == "L" else "(set for L)"
        ok_all = ok_all and right and (met or scale != "L")
        inproc = statistics.median(s.payload["import"] + s.payload["work"] for s in ours)
        lines.append(
            f"| {scale} | {expected[1]:,} | {med(ours, 'wall'):.2f} s | {med(rs, 'wall'):.2f} s | {ratio:.2f}x "
            f"| <= 0.5x, RSS below: {target} | {med(ours, 'rss_mib'):.0f} MiB "
            f"| {med(rs, 'rss_mib'):.0f} MiB | {med(ours, 'cpu'):.2f} s | {med(rs, 'cpu'):.2f} s | {inproc:.2f} s "
            f"| {'agree' if right else 'DISAGREE: ' + str(sorted(answers)) + str(cross)} |"
        )
        bytes_ = [s.payload.get("bytes") for s in ours[:1] + rs[:1]]
        lines.append(f"|  | checkpoint bytes: ours {bytes_[0]:,}, delta-rs {bytes_[1]:,} |" + " |" * 10)
    for scale, res in results.items():
        for k, v in res.get("cross", {}).items():
            lines.append(f"\n{scale}: {k} checkpoint: {v}")
    return "\n".join(lines), ok_all


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scales", default="M,L", help="comma-separated, of S,M,L (default M,L)")
    parser.add_argument("--reps", type=int, default=3, help="timed rounds (default 3)")
    parser.add_argument("--warmup", type=int, default=1, help="discarded rounds first (default 1)")
    parser.add_argument("--no-cross", action="store_true", help="skip reading each other's checkpoint")
    benchlib.add_quiet_options(parser, max_wait=10.0)
    parser.add_argument("--no-library-snapshot", action="store_true", help="children import the working tree")
    parser.add_argument("--data", type=Path, default=benchlib.DATA)
    parser.add_argument("--markdown", type=Path, help="also write the report here")
    args = parser.parse_args(argv)
    args.data = args.data.resolve()
    scales = [s for s in args.scales.split(",") if s]
    quiet = benchlib.quiet_setting(args)
    manifests = {s: benchlib.ensure_table(s, args.data, generate=not args.no_generate) for s in scales}
    machine = benchlib.machine_info()
    if not args.no_library_snapshot:
        root, fingerprint = benchlib.snapshot_library()
        run.CHILD["cwd"] = str(root)
        run.CHILD["env"] = {**os.environ, "PYTHONPATH": str(root)}
        machine["library sources sha256"] = f"{fingerprint} (frozen copy in {root.relative_to(benchlib.REPO)})"
    started = time.time()
    results: dict[str, dict] = {}
    for scale in scales:
        results[scale] = time_scale(scale, args, quiet)
        if not args.no_cross:
            results[scale]["cross"] = cross_read(scale, args)
    machine["loadavg (start -> end)"] = f"{machine.pop('loadavg')} -> {benchlib.loadavg()}"
    machine["duration"] = f"{time.time() - started:.0f} s"
    text, ok = report(results, manifests, machine)
    print(text)
    if args.markdown:
        args.markdown.write_text(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
