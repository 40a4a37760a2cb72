"""The maintenance DAG changes nothing until its conditions hold: `optimize_conditions` (threshold, new files
since the last OPTIMIZE, minimum interval) decides whether `optimize` rewrites files or only plans.

The conditions task is called directly on a delta-rs table through a real OPTIMIZE and VACUUM; one
`dag.test()` run (jobs in the worker process, no JVM) shows a run right after an OPTIMIZE only plans.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import REPO, task_states, xcom_return

pytest.importorskip("airflow")

from deltalake import DeltaTable, write_deltalake

from airflow_delta_provider.delta import DeltaLog
from airflow_delta_provider.delta.maintenance.optimize import optimize
from airflow_delta_provider.delta.maintenance.vacuum import vacuum
from airflow_delta_provider.version_watch import since_last

pytestmark = pytest.mark.airflow
DAG_ID = "delta_table_maintenance"


@pytest.fixture
def maintenance_dag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("DELTA_SPARK_CONN_ID", "none")  # the jobs run in the worker process
    # no DeadlineAlert: Airflow 3.3.1's dag.test() fails a successful run of a DAG with one (see
    # maintenance_deadline in the DAG; tests/provider/test_policies.py shows the alert firing)
    monkeypatch.setenv("DELTA_MAINTENANCE_DEADLINE_HOURS", "none")
    monkeypatch.setenv("DELTA_RESULT_DIR", str(tmp_path / "results"))
    monkeypatch.delenv("DELTA_STORAGE_CONN_ID", raising=False)
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags" / "delta_table_maintenance.py"))
    assert bag.import_errors == {}
    return bag.dags[DAG_ID]


def _appends(root: Path, n: int, start: int = 0) -> None:
    """`n` small appends, two files each (partitions a and b)."""
    for i in range(start, start + n):
        write_deltalake(str(root), pa.table({"id": [i, 1000 + i], "p": ["a", "b"]}), partition_by=["p"], mode="append")


def _params(table: str, **overrides: Any) -> dict[str, Any]:
    params = {
        "table_uri": table,
        "optimize": True,
        "optimize_min_small_file_ratio": 0.5,
        "optimize_min_new_files": 10,
        "optimize_min_interval_hours": 24,
    }
    return {**params, **overrides}


def test_the_dag_plans_at_once_when_unpaused(maintenance_dag) -> None:
    timetable = maintenance_dag.timetable.timetable  # AssetOrTimeSchedule: the daily cron part
    assert timetable.run_immediately is True
    optimize_task = maintenance_dag.get_task("optimize")
    assert optimize_task.upstream_task_ids == {"choose_partitions"}
    assert maintenance_dag.get_task("choose_partitions").upstream_task_ids == {"optimize_conditions"}
    assert maintenance_dag.get_task("optimize_conditions").upstream_task_ids == {"replay_and_check"}
    assert "choose_partitions" in optimize_task.dry_run and "choose_partitions" in optimize_task.where
    assert maintenance_dag.params["optimize_ask_partitions"] is False  # the demo stays unattended


def test_optimize_conditions_threshold_new_files_and_interval(maintenance_dag, tmp_path: Path) -> None:
    root = tmp_path / "rs"
    _appends(root, 6)  # versions 0..5: 12 small files, never optimized
    table = str(root)
    decide = maintenance_dag.get_task("optimize_conditions").python_callable
    small = {"small_file_ratio": 1.0}

    first = decide(small, params=_params(table))
    assert first["apply"] is True and first["last_optimize_version"] is None
    assert first["conditions"]["new_files"]["added"] == 12 and first["conditions"]["interval"]["hours_since"] is None
    assert decide(small, params=_params(table, optimize=False))["apply"] is False  # not asked
    below = decide({"small_file_ratio": 0.4}, params=_params(table))
    assert below["apply"] is False and below["conditions"]["threshold"]["met"] is False

    assert optimize(table).version == 6
    after = decide(small, params=_params(table))
    assert after["apply"] is False and after["last_optimize_version"] == 6
    assert after["conditions"]["new_files"] == {"since_version": 6, "added": 0, "minimum": 10, "met": False}
    assert after["conditions"]["interval"]["met"] is False  # optimized a moment ago

    # VACUUM commits (START and END) add no file; five appends add ten
    assert vacuum(table, dry_run=False, retention_hours=0, enforce_retention_duration=False).audit_versions == [7, 8]
    _appends(root, 5, start=100)
    later = decide(small, params=_params(table))
    assert later["conditions"]["new_files"]["added"] == 10 and later["conditions"]["new_files"]["met"] is True
    assert later["apply"] is False  # the interval still holds it back
    assert decide(small, params=_params(table, optimize_min_interval_hours=0))["apply"] is True
    assert decide(small, params=_params(table, optimize_min_interval_hours=0, optimize_min_new_files=11))["apply"] is (
        False
    )


def test_since_last_reads_back_to_the_last_optimize_only(tmp_path: Path) -> None:
    root = tmp_path / "rs"
    _appends(root, 3)
    optimize(str(root))  # version 3
    _appends(root, 2, start=10)  # 4, 5
    found = since_last(DeltaLog(str(root)), "OPTIMIZE")
    assert found["latest_version"] == 5 and found["last_version"] == 3 and found["scanned_from"] == 3
    assert (found["data_versions"], found["data_files_added"]) == (2, 4)
    assert found["last_timestamp"] == DeltaLog(str(root)).commit_summary(3)["timestamp"]
    nothing = since_last(DeltaLog(str(root)), "OPTIMIZE", lookback=1)  # only version 5 is that recent
    assert nothing["last_version"] is None and nothing["data_files_added"] == 2


def test_a_run_right_after_an_optimize_changes_nothing(airflow_db: str, maintenance_dag, tmp_path: Path) -> None:
    root = tmp_path / "rs"
    _appends(root, 6)
    optimize(str(root))  # version 6: the interval since it has not passed
    _appends(root, 6, start=50)  # 12 new small files: the threshold and new-file conditions hold
    version = DeltaTable(str(root)).version()
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())

    dr = maintenance_dag.test(
        run_conf={"table_uri": str(root), "optimize": True, "apply_vacuum": False, "apply_log_cleanup": False}
    )
    states = task_states(dr.run_id)
    assert states["optimize_conditions"] == "success" and states["optimize"] == "success", states
    decided = xcom_return(dr.run_id, "optimize_conditions")
    assert decided["apply"] is False
    assert {k: c["met"] for k, c in decided["conditions"].items()} == {
        "asked": True,
        "threshold": True,
        "new_files": True,
        "interval": False,
    }
    planned = xcom_return(dr.run_id, "optimize")
    assert planned["dry_run"] is True and planned["version"] is None and planned["num_files_removed"] > 0
    assert DeltaTable(str(root)).version() == version  # no commit
    assert sorted(
        p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and "_delta_log" not in p.parts
    ) == [f for f in files if not f.startswith("_delta_log")]
    assert xcom_return(dr.run_id, "report")["optimize_conditions"]["apply"] is False


def _dag_module() -> Any:
    """The example DAG file as a module (its helpers; importing it only defines the DAG)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "delta_table_maintenance_dag", REPO / "dags" / "delta_table_maintenance.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_chosen_partitions_become_a_where_that_selects_only_them(tmp_path: Path) -> None:
    from airflow_delta_provider.delta.errors import InvalidArgumentError

    dag_file = _dag_module()
    where = dag_file.partition_predicate(["n=1/s=it's", "n=2/s=__HIVE_DEFAULT_PARTITION__"], ["n", "s"])
    assert where == "(`n` = '1' AND `s` = 'it''s') OR (`n` = '2' AND `s` IS NULL)"
    with pytest.raises(InvalidArgumentError, match="one value per partition column"):
        dag_file.partition_predicate(["n=1/s=a/b"], ["n", "s"])  # a value holding '/': refused, never widened
    root = tmp_path / "rs"
    for i in range(3):
        write_deltalake(
            str(root), pa.table({"id": [i, i, i], "n": [1, 2, 2], "s": ["it's", "x", None]}), partition_by=["n", "s"],
            mode="append",
        )  # fmt: skip
    planned = optimize(str(root), dry_run=True, where=where).to_dict()["partitions"]
    assert set(planned) == {"n=1/s=it's", "n=2/s=__HIVE_DEFAULT_PARTITION__"}  # not n=2/s=x


def test_a_retention_shorter_than_the_plans_is_refused_and_the_same_one_applies_the_plan() -> None:
    dag_file = _dag_module()
    seen = {"retention_ms": 168 * 3_600_000, "result_uri": "/results/plan.json", "num_files": 7, "mode": "full"}
    same = dag_file.confirmed_vacuum_plan("/no/table", seen, 168.0, "/results/confirmed.json")
    assert same == {
        "retention_hours": 168.0, "planned_retention_hours": 168.0, "plan": "/results/plan.json",
        "replanned": False, "num_files": 7,
    }  # fmt: skip
    shorter = dag_file.confirmed_vacuum_plan("/no/table", seen, 24.0, "/results/confirmed.json")
    assert "plan" not in shorter and "shorter than the plan's 168 h" in shorter["refused"]
    assert "params.retention_hours=24" in shorter["refused"]  # how to plan it and be asked again


def test_the_deadline_is_off_under_airflow_dags_test_and_when_asked() -> None:
    """`airflow dags test` (the demo) gets no DeadlineAlert: Airflow 3.3.1's dag.test() fails a successful run of
    a DAG with one (tests/provider/test_policies.py shows the alert firing through the scheduler's code)."""
    from airflow_delta_provider.delta.errors import InvalidArgumentError

    dag_file = _dag_module()
    alert = dag_file.maintenance_deadline("22", argv=["airflow", "scheduler"])
    assert alert.interval.total_seconds() == 22 * 3600
    assert alert.callback.path == "airflow_delta_provider.policies.maintenance_overran"
    assert dag_file.maintenance_deadline("22", argv=["airflow", "dags", "test", "delta_table_maintenance"]) is None
    assert dag_file.maintenance_deadline("none", argv=["airflow", "scheduler"]) is None
    with pytest.raises(InvalidArgumentError, match="DELTA_MAINTENANCE_DEADLINE_HOURS"):
        dag_file.maintenance_deadline("a day", argv=["airflow", "scheduler"])
    # both questions together are answered (or time out) before the deadline
    assert dag_file.PARTITION_CHOICE_TIMEOUT + dag_file.APPROVAL_TIMEOUT < alert.interval
