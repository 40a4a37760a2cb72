"""`deltalog purge`, `stats-backfill` and `lake scan|plan` on delta-rs tables: dry runs change nothing, `--apply`
commits what delta-rs reads back with the same rows, stable JSON, text lines, typed errors naming the flag, and
completion from the parser. (The operations themselves: tests/delta/test_purge.py, test_stats_backfill.py,
test_lake_*.py; every flag's bad values: tests/test_arguments.py.)"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pyarrow as pa
import pytest

pytest.importorskip("deltalake")
sys.path.insert(0, str(Path(__file__).resolve().parent / "delta"))  # the delta tests' table builders

from deltalake import DeltaTable, write_deltalake
from test_optimize import deltars_rows, listing
from test_purge import active_dvs, dv_table
from test_stats_backfill import stats_by_path, strip_stats, ten_files

from airflow_delta_provider.cli import EXIT_USAGE, main
from airflow_delta_provider.delta import DeltaLog


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    DeltaLog.clear_cache()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_purge_plans_unless_apply_then_delta_rs_reads_the_same_rows(tmp_path: Path) -> None:
    root = dv_table(tmp_path / "t", 1)  # vectors in both partitions: two bins
    rows, dvs, files = deltars_rows(root), active_dvs(root), listing(root)
    version = DeltaTable(str(root)).version()
    code, out, err = run("purge", str(root))
    assert code == 0 and err == "" and listing(root) == files
    assert out.startswith(f"purge dry run at version {version}: would rewrite {len(dvs)} files")
    assert f"to drop {sum(dvs.values())} deleted rows; --apply rewrites them" in out
    code, out, _ = run("purge", str(root), "--max-files", "2", "--json")
    plan = json.loads(out)
    assert code == 0 and plan["dry_run"] and plan["plan"]["num_bins"] == 1 and listing(root) == files
    assert plan["num_files_removed"] + plan["plan"]["num_files_over_budget"] == len(dvs) > plan["num_files_removed"]
    code, out, _ = run("purge", str(root), "--apply", "--json")
    done = json.loads(out)
    assert code == 0 and done["version"] == version + 1 and done["num_deleted_rows_purged"] == sum(dvs.values())
    assert active_dvs(root) == {} and deltars_rows(root) == rows
    code, out, _ = run("purge", str(root), "--apply")
    assert code == 0 and out == f"purge: nothing to rewrite at version {version + 1}\n"


def test_purge_where_takes_partition_columns_only(tmp_path: Path) -> None:
    root = dv_table(tmp_path / "t", 8)
    code, out, _ = run("purge", str(root), "--where", "part = 'a'", "--min-deleted-ratio", "0.1", "--json")
    plan = json.loads(out)["plan"]
    assert code == 0 and {f["partition"] for f in plan["files"]} <= {"part=a"}
    assert all(f["dv_cardinality"] >= 5 for f in plan["files"])  # 50 rows a file: a ratio of 0.1 is 5 rows
    code, _, err = run("purge", str(root), "--where", "id > 3")
    assert code == EXIT_USAGE and "partition columns" in err


def test_stats_backfill_plans_unless_apply(tmp_path: Path) -> None:
    root = tmp_path / "t"
    ten_files(root)
    strip_stats(root)
    rows, files = deltars_rows(root), listing(root)
    code, out, _ = run("stats-backfill", str(root), "--where", "part = 'a'")
    assert code == 0 and listing(root) == files
    assert (
        out.splitlines()[0]
        == "stats backfill dry run at version 10: 5 of 5 files need stats (5 missing); --apply recomputes them"
    )
    code, out, _ = run("stats-backfill", str(root), "--apply", "--json")
    done = json.loads(out)
    assert code == 0 and done["version"] == 11 and done["metrics"]["numFilesRecomputed"] == 10
    assert all(s and s["numRecords"] == 100 for s in stats_by_path(root).values())
    assert deltars_rows(root) == rows and DeltaTable(str(root)).version() == 11


def _lake(tmp_path: Path) -> Path:
    lake = tmp_path / "lake"
    dv_table(lake / "sales" / "orders", 9)
    ten_files(lake / "ops" / "events")
    write_deltalake(str(lake / "plain"), pa.table({"id": [1, 2, 3]}))
    (lake / "raw").mkdir()
    return lake


def test_lake_scan_and_plan(tmp_path: Path) -> None:
    lake = _lake(tmp_path)
    files = listing(lake)
    code, out, _ = run("lake", "scan", str(lake), "--table", str(tmp_path / "nowhere"), "--json")
    scan = json.loads(out)
    assert code == 0 and [h["table"] for h in scan["tables"]] == [
        (lake / n).as_uri() for n in ("ops/events", "plain", "sales/orders")
    ]
    assert [e["error_class"] for e in scan["errors"]] == ["TableNotFoundError"]
    code, out, _ = run("lake", "scan", str(lake), "--max-depth", "1")
    assert code == 0 and "1 tables read" in out and f"not walked below {lake / 'ops'}" in out
    code, out, _ = run("lake", "plan", str(lake), "--json")
    plan = json.loads(out)
    assert code == 0 and plan["totals"]["tasks"] == len(plan["tasks"]) > 0
    assert [g["table"] for g in plan["by_table"]] == sorted({t["table"] for t in plan["tasks"]})
    code, out, _ = run("lake", "plan", str(lake), "--budget-requests", "0", "--json")
    cut = json.loads(out)
    assert code == 0 and cut["tasks"] == [] and len(cut["deferred"]) == len(plan["tasks"])
    code, out, _ = run("lake", "plan", str(lake))
    assert code == 0 and out.splitlines()[0].split() == ["table", "operation", "value", "bytes", "why"]
    assert listing(lake) == files  # a lake scan or plan reads only


def test_lake_policy_file_errors_name_the_policy(tmp_path: Path) -> None:
    lake = _lake(tmp_path)
    (tmp_path / "p.json").write_text('{"defaults": {"bogus_key": 1}}')
    code, _, err = run("lake", "plan", str(lake), "--policy", str(tmp_path / "p.json"))
    assert code == EXIT_USAGE and "InvalidArgumentError" in err
    code, _, err = run("lake", "scan", str(lake), "--policy", str(tmp_path / "missing.json"), "--json")
    assert code == EXIT_USAGE and json.loads(err)["argument"] == "policy"


def test_help_and_completion_list_the_new_commands(tmp_path: Path) -> None:
    code, out, _ = run("purge", "--help")
    assert code == 0 and all(f in out for f in ("--min-deleted-ratio", "--where", "--max-files", "--max-bytes"))
    code, out, _ = run("lake", "plan", "--help")
    assert code == 0 and all(f in out for f in ("PREFIX", "--table", "--policy", "--budget-bytes", "--max-depth"))
    code, script, _ = run("completion", "bash")
    assert code == 0 and all(name in script for name in ("purge", "stats-backfill", "lake", "--tighten"))


def test_the_new_requests_travel_to_the_job_and_back(tmp_path: Path) -> None:
    from airflow_delta_provider.commands.request import Request
    from airflow_delta_provider.jobs import runner

    for request in (
        Request.make(table="/a", action="lake_plan", prefixes=["/a", "/b"], tables=["/c"], budget_bytes=10**9),
        Request.make(table="/t", action="purge", min_deleted_ratio=0.5, max_files=3, where="p = 1", apply=True),
        Request.make(table="/t", action="stats_backfill", tighten=True, max_bytes=2**20),
    ):
        argv = runner.job_argv(request, str(tmp_path / "r.json"))
        back = runner.request_from_job(runner.build_parser().parse_args(argv).request, str(tmp_path / "r.json"), {})
        assert back == request


def test_lake_run_plans_unless_apply_then_runs_proves_and_records(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    events = lake / "ops" / "events"
    ten_files(events)  # ten small files: OPTIMIZE is planned
    policy = tmp_path / "policy.json"
    policy.write_text('{"defaults": {"min_small_files": 4}}')
    rows, files = deltars_rows(events), listing(lake)
    code, out, err = run("lake", "run", str(lake), "--policy", str(policy), "--json")
    result = json.loads(out)
    assert code == 0, err
    assert result["apply"] is False and result["runs"] == [] and listing(lake) == files  # a plan only
    assert any(t["operation"] == "optimize" for t in result["tasks"])
    history = tmp_path / "history"
    code, out, err = run(
        *("lake", "run", str(lake), "--policy", str(policy)),
        *("--apply", "--verify", "content", "--history", str(history), "--json"),
    )
    result = json.loads(out)
    assert code == 0, err
    optimized = [r for r in result["runs"] if r["operation"] == "optimize"]
    assert optimized and all(r["status"] == "done" and r["proof"] == "proven" for r in optimized), result["runs"]
    assert deltars_rows(events) == rows
    assert not any(r["operation"] == "vacuum" for r in result["runs"])  # VACUUM only with --apply-vacuum
    recorded = DeltaTable(str(history)).to_pyarrow_table().to_pylist()
    assert result["history_version"] == DeltaTable(str(history)).version() and len(recorded) == len(result["runs"])
    assert {(r["table"], r["operation"]) for r in recorded} == {(r["table"], r["operation"]) for r in result["runs"]}
    code, out, _ = run("lake", "run", str(lake), "--verify", "bogus")
    assert code == EXIT_USAGE
