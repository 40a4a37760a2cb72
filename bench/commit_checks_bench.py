"""Per-version checks over a range of commits: `check_commits` against re-loading every version.

On generate.py's M table (checkpoint at 2,400 with ~105k active files, then 500 commits to 2,900):

* **incremental**: `check_commits(log, 2400, until, spec)` with state checks at every version and the
  per-commit checks; its wall time split into the start (one snapshot load + the one Arrow lookup of
  the paths the range touches), reading the commit files, and the walk (action-by-action updates and
  the checks), the fastest of `--reps` runs. Ranges of 100, 300 and 500 commits show the start staying
  flat while the walk grows with the commits' actions.
* **re-load per version**: what checking every version costs without the walk: `snapshot_at(v)` and
  `file_summary()` for a sample of versions, extrapolated to the range (each is O(table)).

    .venv/bin/python bench/commit_checks_bench.py [--scale M] [--sample 12] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from benchlib import ensure_table  # noqa: E402

from airflow_delta_provider.commands.commit_checks import check_commits  # noqa: E402
from airflow_delta_provider.delta import DeltaLog  # noqa: E402
from airflow_delta_provider.delta.protocol.actions import AddFile, RemoveFile  # noqa: E402

SPEC = {
    "min_files": 1,
    "max_files": 10_000_000,
    "max_small_file_ratio": 0.95,
    "partition_columns": ["date"],
    "allowed_features": [],
    "no_duplicate_paths": True,
    "no_unknown_removes": True,
    "protocol_changes": "upgrades",
    "schema_changes": "added_columns",
    "append_only": "table",
    "max_dv_growth": 1_000_000,
}


def fresh_log(path: Path) -> DeltaLog:
    DeltaLog.clear_cache()
    return DeltaLog(str(path))


def count_actions(log: DeltaLog, since: int, until: int) -> int:
    return sum(
        sum(isinstance(a, AddFile | RemoveFile) for a in actions)
        for v, actions in log.get_changes(since + 1)
        if v <= until
    )


def incremental(path: Path, since: int, until: int, reps: int = 1) -> dict:
    """The fastest of `reps` runs (the machine is shared: the minimum is the least disturbed)."""
    runs = []
    for _ in range(reps):
        t0 = time.perf_counter()
        report = check_commits(fresh_log(path), since, until, SPEC)
        runs.append((time.perf_counter() - t0, report))
    wall, report = min(runs, key=lambda r: r[0])
    t = report.timings
    start = sum(t.get(k, 0) for k in ("list_s", "load_s", "summary_s", "lookup_s"))
    walk = t.get("walk_s", 0) + t.get("checks_s", 0)
    return {
        "range": f"({since}, {until}]",
        "commits": until - since,
        "wall_s": round(wall, 3),
        "start_s": round(start, 3),
        "read_commits_s": round(t.get("read_s", 0), 3),
        "walk_and_checks_s": round(walk, 3),
        "walk_us_per_commit": round(walk / max(1, until - since) * 1e6),
        "failures": len(report.failures),
        "timings": t,
    }


def reload_per_version(path: Path, since: int, until: int, sample: int) -> dict:
    step = max(1, (until - since) // sample)
    versions = list(range(since + step, until + 1, step))[:sample]
    seconds = []
    for v in versions:
        t0 = time.perf_counter()
        snap = fresh_log(path).snapshot_at(version=v)
        snap.file_summary()
        snap.num_distinct_paths()
        seconds.append(time.perf_counter() - t0)
    mean = sum(seconds) / len(seconds)
    return {
        "sampled_versions": versions,
        "mean_s_per_version": round(mean, 3),
        "extrapolated_s_for_range": round(mean * (until - since), 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", default="M")
    parser.add_argument("--sample", type=int, default=12, help="versions re-loaded for the comparison")
    parser.add_argument("--reps", type=int, default=3, help="runs per range; the fastest is shown")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    manifest = ensure_table(args.scale, generate=False)
    path = BENCH_DIR / ".data" / args.scale
    log = fresh_log(path)
    latest = log.latest_version()
    since = log.read_last_checkpoint().version if log.read_last_checkpoint() else 0
    print(f"{args.scale}: versions {since}..{latest}, loadavg {os.getloadavg()[0]:.2f}", file=sys.stderr)
    incremental(path, latest - 5, latest)  # warm-up: imports, first Arrow kernels
    ends = sorted({min(latest, since + n) for n in (100, 300, 500)})
    rows = [incremental(path, since, until, args.reps) for until in ends]
    actions = count_actions(log, since, latest)
    reload = reload_per_version(path, since, latest, args.sample)
    full = rows[-1]
    result = {
        "scale": args.scale,
        "manifest_active_files": manifest.get("active_files"),
        "file_actions_in_range": actions,
        "incremental": rows,
        "reload_per_version": reload,
        "speedup": round(reload["extrapolated_s_for_range"] / full["wall_s"], 1),
        "loadavg_end": round(os.getloadavg()[0], 2),
    }
    print(f"{'range':>14} {'wall s':>8} {'start s':>8} {'read s':>8} {'walk+checks s':>14} {'us/commit':>10}")
    for r in rows:
        print(
            f"{r['range']:>14} {r['wall_s']:>8} {r['start_s']:>8} {r['read_commits_s']:>8} "
            f"{r['walk_and_checks_s']:>14} {r['walk_us_per_commit']:>10}"
        )
    print(
        f"{actions} add/remove actions in the full range; re-loading each version: "
        f"{reload['mean_s_per_version']} s per version (sample of {len(reload['sampled_versions'])}), "
        f"~{reload['extrapolated_s_for_range']} s for {latest - since} versions: "
        f"{result['speedup']}x the incremental check"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
