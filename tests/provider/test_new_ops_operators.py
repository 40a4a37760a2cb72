"""`DeltaPurgeOperator`, `DeltaStatsBackfillOperator`, `DeltaLakeScanOperator` and `DeltaLakePlanOperator` in
process (`submit=False`) on tables written by delta-rs: a dry run changes nothing, applying does what was planned
and delta-rs reads the same rows, a plan gone stale under a concurrent DELETE is re-validated, and the lake plan's
XCom feeds a mapped task in `dag.test()`. (The operations themselves: tests/delta/test_purge.py,
test_stats_backfill.py, test_lake_*.py.)"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow as pa
import pytest

pytest.importorskip("airflow")
pytest.importorskip("deltalake")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "delta"))  # the delta tests' table builders

from conftest import task_states, xcom_return
from deltalake import DeltaTable, write_deltalake
from provider_support import task_context
from test_optimize import deltars_rows, listing
from test_purge import active_dvs, delete_rows, dv_table
from test_stats_backfill import stats_by_path, strip_stats, ten_files

from airflow_delta_provider.delta import DeltaLog
from airflow_delta_provider.delta.errors import InvalidArgumentError
from airflow_delta_provider.operators.delta import (
    DeltaLakePlanOperator,
    DeltaLakeScanOperator,
    DeltaPurgeOperator,
    DeltaStatsBackfillOperator,
)

pytestmark = pytest.mark.airflow


def _versions(root: Path) -> int:
    DeltaLog.clear_cache()
    return DeltaTable(str(root)).version()


def test_purge_plans_then_applies_the_kept_plan(tmp_path: Path) -> None:
    root = dv_table(tmp_path / "t", 3)
    rows, dvs, files, version = deltars_rows(root), active_dvs(root), listing(root), _versions(root)
    plan_uri = str(tmp_path / "purge.json")
    base = dict(table_uri=str(root), submit=False)
    dry = DeltaPurgeOperator(task_id="plan", result_uri=plan_uri, **base).execute(task_context(tmp_path))
    assert dry["dry_run"] and dry["version"] is None and dry["read_version"] == version
    assert dry["num_files_removed"] == len(dvs) and dry["num_deleted_rows_purged"] == sum(dvs.values())
    assert listing(root) == files and dry["result_uri"] == plan_uri
    done = DeltaPurgeOperator(task_id="apply", dry_run="false", plan=plan_uri, **base).execute(task_context(tmp_path))
    assert not done["dry_run"] and done["version"] == version + 1 and done["num_dropped"] == 0
    assert done["num_files_removed"] == len(dvs) and done["erasable_after_ms"] is not None
    assert active_dvs(root) == {} and deltars_rows(root) == rows  # delta-rs reads the same rows, no vector left
    assert DeltaTable(str(root)).history(1)[0]["operation"] == "REORG"


def test_a_purge_plan_gone_stale_drops_the_file_a_delete_changed(tmp_path: Path) -> None:
    """A DELETE commits between the dry run and the apply: the file whose vector it changed is dropped, not
    rewritten with the old vector (which would bring the newly deleted rows back)."""
    root = dv_table(tmp_path / "t", 4, partitioned=False)
    base = dict(table_uri=str(root), submit=False)
    dry = DeltaPurgeOperator(task_id="plan", result_uri=str(tmp_path / "p.json"), **base).execute(
        task_context(tmp_path)
    )
    planned = json.loads((tmp_path / "p.json").read_text())["plan"]["files"]
    changed = planned[0]["path"]
    delete_rows(root, changed, [0, 1, 2, 3])  # the racing writer
    rows = deltars_rows(root)
    done = DeltaPurgeOperator(task_id="apply", dry_run=False, plan=str(tmp_path / "p.json"), **base).execute(
        task_context(tmp_path)
    )
    assert done["num_dropped"] == 1 and done["num_files_removed"] == dry["num_files_removed"] - 1
    assert deltars_rows(root) == rows and changed in active_dvs(root)  # nothing lost, nothing revived


def test_stats_backfill_plans_then_applies(tmp_path: Path) -> None:
    root = tmp_path / "t"
    ten_files(root)
    strip_stats(root)
    rows, files, version = deltars_rows(root), listing(root), _versions(root)
    base = dict(table_uri=str(root), submit=False)
    dry = DeltaStatsBackfillOperator(task_id="plan", max_files="4", **base).execute(task_context(tmp_path))
    assert dry["dry_run"] and dry["version"] is None and (dry["num_files"], dry["num_files_over_budget"]) == (4, 6)
    assert listing(root) == files
    done = DeltaStatsBackfillOperator(task_id="apply", dry_run="no", **base).execute(task_context(tmp_path))
    assert not done["dry_run"] and done["version"] == version + 1 and done["metrics"]["numFilesRecomputed"] == 10
    assert all(s is not None and s["numRecords"] == 100 for s in stats_by_path(root).values())
    assert deltars_rows(root) == rows


def _lake(tmp_path: Path) -> Path:
    """Three tables under `lake/`: one with deletion vectors, one without stats, one small plain one; and a
    folder that holds no table."""
    lake = tmp_path / "lake"
    dv_table(lake / "sales" / "orders", 5)
    ten_files(lake / "ops" / "events")
    strip_stats(lake / "ops" / "events")
    write_deltalake(str(lake / "plain"), pa.table({"id": [1, 2, 3]}))
    (lake / "raw").mkdir()
    (lake / "raw" / "notes.txt").write_text("not a table")
    return lake


def test_lake_scan_writes_the_scan_and_returns_a_summary(tmp_path: Path) -> None:
    lake = _lake(tmp_path)
    result_uri = tmp_path / "scan.json"
    summary = DeltaLakeScanOperator(
        task_id="scan", prefixes=[str(lake)], submit=False, result_uri=str(result_uri)
    ).execute(task_context(tmp_path))
    names = ["ops/events", "plain", "sales/orders"]
    assert [t["table"] for t in summary["tables"]] == [(lake / n).as_uri() for n in names]
    assert summary["num_tables"] == 3 and summary["errors"] == [] and summary["table_uri"] == str(lake)
    full = json.loads(result_uri.read_text())
    assert full["status"] == "success" and [h["table"] for h in full["tables"]] == [
        t["table"] for t in summary["tables"]
    ]
    health = {h["table"].rsplit("/", 1)[1]: h for h in full["tables"]}
    assert health["events"]["totals"]["files_without_stats"] == 10 and health["orders"]["totals"]["dv_rows"] > 0
    assert len(json.dumps(summary)) < len(result_uri.read_text()) / 10  # the XCom stays small


def test_lake_scan_reports_a_missing_table_without_failing(tmp_path: Path) -> None:
    lake = _lake(tmp_path)
    summary = DeltaLakeScanOperator(
        task_id="scan", tables=[str(lake / "plain"), str(lake / "raw")], submit=False
    ).execute(task_context(tmp_path))
    assert summary["num_tables"] == 1 and summary["errors"][0]["error_class"] == "TableNotFoundError"


def test_lake_plan_groups_tasks_per_table(tmp_path: Path) -> None:
    lake = _lake(tmp_path)
    groups = DeltaLakePlanOperator(task_id="plan", prefixes=str(lake), submit=False).execute(task_context(tmp_path))
    assert [g["table_uri"] for g in groups] == sorted(g["table_uri"] for g in groups)
    by_table = {g["table_uri"].rsplit("/", 1)[1]: [t["operation"] for t in g["tasks"]] for g in groups}
    assert "optimize" in by_table["orders"]  # its deletion vectors make a purging compaction worth it
    order = ("optimize", "vacuum", "checkpoint", "log_cleanup")
    assert all(ops == sorted(ops, key=order.index) for ops in by_table.values())
    assert all(t["table"] == g["table_uri"] for g in groups for t in g["tasks"])
    json.dumps(groups)  # an XCom value
    cut = DeltaLakePlanOperator(task_id="cut", prefixes=[str(lake)], submit=False, budget_requests="0").execute(
        task_context(tmp_path)
    )
    assert cut == []  # a budget of no request defers every task


def test_lake_operators_need_a_prefix_or_a_table() -> None:
    for cls in (DeltaLakeScanOperator, DeltaLakePlanOperator):
        with pytest.raises(InvalidArgumentError) as info:
            cls(task_id="x")
        assert info.value.argument == "prefixes"


LAKE_DAG = """
from airflow.sdk import dag, task

from airflow_delta_provider.operators.delta import DeltaLakePlanOperator


@dag(dag_id="delta_lake_plan_expand", schedule=None, catchup=False, params={{"lake": ""}})
def lake_dag():
    plan = DeltaLakePlanOperator(task_id="plan", prefixes="{{{{ params.lake }}}}", submit=False)

    @task
    def run_table(group: dict) -> str:
        assert group["tasks"] and all(t["table"] == group["table_uri"] for t in group["tasks"])
        return group["table_uri"]

    run_table.expand(group=plan.output)


lake_dag()
"""


def test_lake_plan_feeds_a_mapped_task(airflow_db: str, tmp_path: Path) -> None:
    """The plan's XCom is ready for `.expand()`: one mapped task instance per table with work, each given its
    table's tasks (the prefix a rendered template)."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
    from airflow.utils.session import create_session
    from conftest import metadata_db

    lake = _lake(tmp_path)
    path = tmp_path / "lake_dag.py"
    path.write_text(LAKE_DAG.format())
    bag = DagBag(dag_folder=str(path))
    assert bag.import_errors == {}
    with create_session() as session:
        DagBundlesManager().sync_bundles_to_db(session=session)
    sync_bag_to_db(bag, "dags-folder", None)  # dag.test() runs only serialized DAGs
    run = bag.dags["delta_lake_plan_expand"].test(run_conf={"lake": str(lake)})
    groups = xcom_return(run.run_id, "plan")
    assert len(groups) >= 2 and "sales/orders" in groups[-1]["table_uri"]
    mapped = (
        metadata_db()
        .execute(
            "SELECT map_index, state FROM task_instance WHERE dag_id = ? AND run_id = ? AND task_id = 'run_table'",
            ("delta_lake_plan_expand", run.run_id),
        )
        .fetchall()
    )
    assert sorted(mapped) == [(i, "success") for i in range(len(groups))]
    assert task_states(run.run_id)["plan"] == "success"
