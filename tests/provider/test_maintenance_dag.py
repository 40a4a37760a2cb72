"""The example DAG `delta_table_maintenance` run twice through real Airflow (`dag.test()` on the session's
SQLite DB), jobs in the worker process (`DELTA_SPARK_CONN_ID=none`): no JVM.

Run 1, a log thirteen versions past any checkpoint: the VACUUM plan sees the expired tombstone, the
checkpoint is written at the checked version, the log cleanup is a dry run, nothing is deleted.
Run 2, one commit later: the branch skips the checkpoint, the per-commit checks cover only the new
version, and the run's `apply_log_cleanup` deletes the expired commits, leaving a table delta-rs
still reads.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REPO, metadata_db, task_states, xcom_return

pytest.importorskip("airflow")

from deltalake import DeltaTable

from airflow_delta_provider.testing import DeltaLogBuilder

pytestmark = pytest.mark.airflow

DAG_ID = "delta_table_maintenance"


@pytest.fixture
def maintenance_dag(airflow_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("DELTA_SPARK_CONN_ID", "none")  # the jobs run in the worker process
    monkeypatch.setenv("DELTA_RESULT_DIR", str(tmp_path / "results"))
    monkeypatch.delenv("DELTA_STORAGE_CONN_ID", raising=False)
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags" / "delta_table_maintenance.py"))
    assert bag.import_errors == {}
    dag = bag.dags[DAG_ID]
    assert {t.submit for t in dag.tasks if hasattr(t, "submit")} == {False}
    return dag


def _log(b: DeltaLogBuilder) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in (Path(b.path) / "_delta_log").iterdir()}


def _link(run_id: str, task_id: str) -> str | None:
    """The "Delta report" extra link the task runner stored for a task (Airflow 3 keeps links in XCom)."""
    with metadata_db() as db:
        row = db.execute(
            "SELECT value FROM xcom WHERE run_id = ? AND task_id = ? AND key = '_link_DeltaResultLink'",
            (run_id, task_id),
        ).fetchone()
    if row is None:
        return None
    value = json.loads(row[0]) if isinstance(row[0], str | bytes) else row[0]
    return json.loads(value) if isinstance(value, str) and value.startswith('"') else value


@pytest.mark.airflow
def test_maintenance_dag_checkpoints_when_behind_and_deletes_nothing_by_default(
    maintenance_dag, tmp_path: Path
) -> None:
    b = DeltaLogBuilder(tmp_path / "table", schema={"id": "long", "region": "string"}, partition_columns=["region"])
    b.create()
    for i in range(11):  # versions 0..11, stamped in 2023: past any log retention, no checkpoint
        b.append([f"f{i}.parquet"], size=1000 + i, partition={"region": "eu" if i % 2 else "us"})
    b.remove(["f0.parquet"])  # one tombstone, long expired
    assert b.version == 12
    before = _log(b)

    dr = maintenance_dag.test(run_conf={"table_uri": b.path, "apply_log_cleanup": False})
    states = task_states(dr.run_id)
    assert states == {
        "replay_and_check": "success",
        "checkpoint_needed": "success",
        "checkpoint": "success",
        "checkpoint_not_needed": "skipped",
        "vacuum_plan": "success",
        "log_cleanup": "success",
        "report": "success",
    }, states
    written = xcom_return(dr.run_id, "checkpoint")
    assert written["version"] == 12 and written["written"] and written["kind"] == "classic"
    after = _log(b)
    assert set(after) - set(before) == {f"{12:020d}.checkpoint.parquet", "_last_checkpoint"}
    assert all(after[name] == mtime for name, mtime in before.items())  # nothing deleted or rewritten
    cleanup = xcom_return(dr.run_id, "log_cleanup")
    assert cleanup["dry_run"] and cleanup["deleted"] == 0 and cleanup["num_files"] > 0
    plan = xcom_return(dr.run_id, "vacuum_plan")
    assert plan["version"] == 12 and plan["expired"] == 1 and plan["reclaimable_bytes"] == 1000
    summary = xcom_return(dr.run_id, "report")
    assert summary["checkpoint"] == {"version": 12, "kind": "classic", "written": True}
    assert summary["log_cleanup"]["dry_run"] and summary["log_cleanup"]["deleted"] == 0
    # extra links: the replay's and the VACUUM plan's HTML reports
    assert _link(dr.run_id, "replay_and_check") == "file://" + summary["reports"]["replay"]
    assert summary["reports"]["replay"].endswith(".html") and Path(summary["reports"]["replay"]).exists()
    assert _link(dr.run_id, "vacuum_plan") == "file://" + summary["reports"]["vacuum_plan"]
    assert summary["reports"]["vacuum_plan"].endswith(".html") and Path(summary["reports"]["vacuum_plan"]).exists()

    b.append(["late.parquet"], size=5, partition={"region": "eu"})  # version 13: one past the checkpoint
    dr = maintenance_dag.test(run_conf={"table_uri": b.path, "apply_log_cleanup": True})
    states = task_states(dr.run_id)
    assert states["checkpoint"] == "skipped" and states["checkpoint_not_needed"] == "success", states
    assert {states[t] for t in ("replay_and_check", "vacuum_plan", "log_cleanup", "report")} == {"success"}
    assert xcom_return(dr.run_id, "replay_and_check")["checked_versions"] == [13]
    cleanup = xcom_return(dr.run_id, "log_cleanup")
    assert not cleanup["dry_run"] and cleanup["deleted"] == cleanup["num_files"] > 0
    assert cleanup["earliest_readable_version"] == 12
    assert not Path(b.commit_path(0)).exists()
    assert DeltaTable(b.path).version() == 13 and len(DeltaTable(b.path).file_uris()) == 11
