"""Benchmark `deltalog`'s output on a big result (issue 29): a VACUUM dry run planning ~333k files through
the CLI against the library call and delta-rs, in the same run.

    .venv/bin/python bench/cli_bench.py                          # the 1,000,000-file table, 3 reps
    .venv/bin/python bench/cli_bench.py --files 30000 --reps 1 --warmup 0

The table is `vacuum_bench.py`'s (cached in bench/.data/vacuum-<files>/table; one in three files planned).
Every timed command is a fresh process (`vacuum_bench.timed`: wall and CPU from `os.wait4`, peak RSS from
GNU time), its standard output into a file, order rotating each round after one discarded warm-up round:

* **library**: `vacuum(p)`, the planned paths written one a line (`vacuum_bench.py`'s "ours");
* **library + JSON**: `vacuum(p)`, then the result's `to_dict()` written as compact JSON by `write_json`:
  the same document the CLI prints, without the CLI;
* **CLI --json**: `deltalog vacuum TABLE --json` (compact, streamed: `cli/text.py:write_json`);
* **CLI text**: `deltalog vacuum TABLE` (a header, then one line a file);
* **delta-rs**: `DeltaTable(p).vacuum(dry_run=True, full=True)`, the paths written one a line.

With `--baseline DIR` (a directory holding another version's `airflow_delta_provider`, e.g. from `git archive
REV airflow_delta_provider | tar -x -C DIR`) a sixth command runs that version's `deltalog vacuum --json`: an A/B
in the same rounds. `--commands` picks some of them. The planned sets must be equal across all commands.
Target (issue 29): the CLI within ~15% of the library call.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import benchlib
import run
import vacuum_bench as vb

LIBRARY_JSON = """
import json, sys, time
t0 = time.perf_counter()
from airflow_delta_provider.cli.text import write_json
from airflow_delta_provider.delta.maintenance.vacuum import vacuum
t1 = time.perf_counter()
result = vacuum(sys.argv[1])
t2 = time.perf_counter()
with open(sys.argv[2], "w") as fh:
    write_json({"table": sys.argv[1], **result.to_dict(), "engine": "local"}, fh)
    fh.write("\\n")
t3 = time.perf_counter()
print(json.dumps({"answer": [len(result.plan.files)], "import": t1 - t0, "work": t2 - t1, "write": t3 - t2}))
"""

CLI_TEXT = """
import sys
from airflow_delta_provider.cli import main
sys.exit(main(["vacuum", sys.argv[1]]))
"""

NAMES = ("library", "library + JSON", "CLI --json", "CLI text", "delta-rs")
BASELINE = "CLI --json (baseline)"


def _paths(name: str, text: str) -> set[str]:
    """The planned paths in a command's output file."""
    if name in ("library + JSON", "CLI --json", BASELINE):
        return {f["path"] for f in json.loads(text)["files"]}
    if name == "CLI text":  # "  <path>  <size>" after the header line
        return {line.split()[0] for line in text.splitlines()[1:] if line.startswith("  ")}
    return set(filter(None, text.split("\n")))


def bench(table: Path, args: argparse.Namespace, quiet: tuple[float, float] | None) -> dict[str, Any]:
    py = benchlib.python()
    work = benchlib.scratch_dir()
    names = args.names
    outs = {name: work / f"{i}.out" for i, name in enumerate((*NAMES, BASELINE))}
    commands = {
        "library": [py, "-c", vb.OURS_DRY, str(table), str(outs["library"])],
        "library + JSON": [py, "-c", LIBRARY_JSON, str(table), str(outs["library + JSON"])],
        "CLI --json": vb._redirect([py, "-c", vb.OURS_CLI_DRY, str(table)], outs["CLI --json"]),
        "CLI text": vb._redirect([py, "-c", CLI_TEXT, str(table)], outs["CLI text"]),
        "delta-rs": [py, "-c", vb.DELTARS_DRY, str(table), str(outs["delta-rs"])],
    }
    if args.baseline:  # run from the baseline's directory: `-c` puts the working directory first on sys.path
        in_dir = ["sh", "-c", 'cd "$0" && exec "$@"', str(args.baseline), py, "-c", vb.OURS_CLI_DRY, str(table)]
        commands[BASELINE] = vb._redirect(in_dir, outs[BASELINE])
    commands = {name: commands[name] for name in names}
    samples: dict[str, list[run.Sample]] = {name: [] for name in names}
    sets: dict[str, set[str]] = {}
    sizes: dict[str, int] = {}
    try:
        for r in range(args.warmup + args.reps):
            shift = r % len(names)
            for name in names[shift:] + names[:shift]:
                sample = vb.timed(commands[name], quiet)
                text = outs[name].read_text()
                sets[name], sizes[name] = _paths(name, text), len(text.encode())
                if not sample.payload.get("answer"):
                    sample.payload = {"answer": [len(sets[name])]}
                if r >= args.warmup:
                    samples[name].append(sample)
            print(f"  round {r + 1}/{args.warmup + args.reps} done", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work)
    return {"samples": samples, "sets": sets, "sizes": sizes}


def report(manifest: dict[str, Any], machine: dict[str, str], done: dict[str, Any]) -> str:
    s = done["samples"]
    header = ["command", "wall (median)", "wall range", "CPU", "peak RSS", "vs library", "vs delta-rs", "output"]
    header[5:5] = ["CPU vs library"]

    def med(name: str, attr: str) -> float:
        return statistics.median(getattr(x, attr) for x in s[name]) if name in s else math.nan

    rows = []
    for name in s:
        walls = [x.wall for x in s[name]]
        rows.append(
            [
                name,
                f"{med(name, 'wall'):.2f} s",
                f"{min(walls):.2f}-{max(walls):.2f}",
                f"{med(name, 'cpu'):.2f} s",
                f"{med(name, 'rss_mib'):.0f} MiB",
                f"{med(name, 'cpu') / med('library', 'cpu'):.2f}x",
                f"{med(name, 'wall') / med('library', 'wall'):.2f}x",
                f"{med(name, 'wall') / med('delta-rs', 'wall'):.2f}x",
                f"{done['sizes'][name] / 2**20:.1f} MiB",
            ]
        )
    lib, cli = med("library", "wall"), med("CLI --json", "wall")
    return "\n".join(
        [
            f"# deltalog output: VACUUM dry run, {manifest['files']:,}-file table, "
            f"{len(done['sets']['library']):,} files planned",
            "",
            *[f"- {k}: {v}" for k, v in machine.items()],
            "",
            "| " + " | ".join(header) + " |",
            "|" + "---|" * len(header),
            *["| " + " | ".join(r) + " |" for r in rows],
            "",
            f"Target: `deltalog vacuum --json` within ~15% of the library call: {cli / lib:.2f}x, "
            f"{'met' if cli / lib <= 1.15 else 'MISSED'} "
            f"(CPU: {med('CLI --json', 'cpu') / med('library', 'cpu'):.2f}x). "
            "Plans equal across the commands.",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=1_000_000, help="files in the table (default 1,000,000)")
    parser.add_argument("--reps", type=int, default=3, help="timed rounds (default 3)")
    parser.add_argument("--warmup", type=int, default=1, help="discarded rounds first (default 1)")
    benchlib.add_quiet_options(parser, max_wait=10.0)
    parser.add_argument("--no-library-snapshot", action="store_true", help="children import the working tree")
    parser.add_argument("--data", type=Path, default=benchlib.DATA)
    parser.add_argument("--markdown", type=Path, help="also write the report here")
    parser.add_argument("--baseline", type=Path, help="a directory with another airflow_delta_provider: its CLI too")
    parser.add_argument("--commands", help=f"comma-separated subset of: {', '.join(NAMES)}, {BASELINE}")
    args = parser.parse_args(argv)
    args.names = tuple(args.commands.split(",")) if args.commands else NAMES + ((BASELINE,) if args.baseline else ())
    if args.baseline:
        args.baseline = args.baseline.resolve()
    args.data = args.data.resolve()
    args.data.mkdir(parents=True, exist_ok=True)
    quiet = benchlib.quiet_setting(args)
    table, manifest = vb.ensure_vacuum_table(args.files, args.data)
    machine = benchlib.machine_info()
    if not args.no_library_snapshot:
        root, fingerprint = benchlib.snapshot_library()
        run.CHILD["cwd"] = str(root)
        run.CHILD["env"] = {**os.environ, "PYTHONPATH": str(root)}
        machine["library sources sha256"] = f"{fingerprint} (frozen copy in {root.relative_to(benchlib.REPO)})"
    started = time.time()
    done = bench(table, args, quiet)
    sets = done["sets"]
    first = sets[args.names[0]]
    if any(sets[name] != first for name in args.names) or not first:
        raise SystemExit("plans differ: " + ", ".join(f"{name} {len(sets[name])}" for name in args.names))
    machine["loadavg (start -> end)"] = f"{machine.pop('loadavg')} -> {benchlib.loadavg()}"
    machine["duration"] = f"{time.time() - started:.0f} s"
    text = report(manifest, machine, done)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
