"""The example DAG `delta_table_health` run after run: real Airflow (`dag.test()` on the session's SQLite DB).

From the third run on, `ti.xcom_pull(..., include_prior_dates=True)` returns a list on Airflow 3; the
sensor's `newer_than` template must still find the version the earlier runs replayed. The jobs run in
the worker process (`DELTA_SPARK_CONN_ID=none`), so no JVM starts.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REPO, metadata_db, task_states, xcom_return

pytest.importorskip("airflow")

from airflow_delta_provider.testing import DeltaLogBuilder
from airflow_delta_provider.version_watch import as_version, last_version

TASKS = ["wait_for_new_version", "replay_and_check", "tombstone_report", "summarize"]


def test_last_version_reads_every_shape_xcom_pull_returns() -> None:
    a = {"version": 3, "table_uri": "file:///lake/a"}
    a_later = {"version": 5, "table_uri": "/lake/a/"}
    b = {"version": 9, "table_uri": "s3://lake/b"}
    assert last_version(None) is None
    assert last_version([]) is None
    assert last_version(a) == 3  # one earlier run: a dict
    assert last_version([a_later, a, None]) == 5  # several (Airflow 3): a list
    assert last_version([a, a_later]) == 5  # whatever the order
    assert last_version([b, a], "/lake/a") == 3  # only the same table, URIs compared normalized
    assert last_version([b], "/lake/a") is None
    assert last_version(7) == 7 and last_version(True) is None
    assert as_version([a, a_later], "newer_than") == 5 and as_version(str(None), "newer_than") is None


@pytest.fixture
def health_dag(airflow_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("DELTA_SPARK_CONN_ID", "none")  # the jobs run in the worker process
    monkeypatch.setenv("DELTA_RESULT_DIR", str(tmp_path / "results"))
    monkeypatch.delenv("DELTA_STORAGE_CONN_ID", raising=False)
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags" / "delta_table_health.py"))
    assert bag.import_errors == {}
    dag = bag.dags["delta_table_health"]
    assert {t.submit for t in dag.tasks if hasattr(t, "submit")} == {False}
    return dag


@pytest.mark.airflow
def test_health_dag_runs_green_three_times_with_a_commit_between_runs(health_dag, tmp_path: Path) -> None:
    b = DeltaLogBuilder(tmp_path / "table", schema={"id": "long", "region": "string"}, partition_columns=["region"])
    b.create()
    b.append(["a.parquet"], size=4096, partition={"region": "eu"})

    sensed: list[int] = []
    for run in range(3):
        # run 1 starts the chain (as `airflow dags test ... -c '{"newer_than": -1}'`); runs 2 and 3 take
        # newer_than from the template: the highest version an earlier run replayed for this table.
        # (`newer_than: None` is explicit: dag.test() keeps the previous run's conf in the DAG's params.)
        dr = health_dag.test(run_conf={"table_uri": b.path, "newer_than": -1 if run == 0 else None})
        states = task_states(dr.run_id)
        assert states == dict.fromkeys(TASKS, "success"), (run + 1, states)
        assert rendered_newer_than(dr.run_id) == str(sensed[-1] if sensed else -1)
        sensed.append(xcom_return(dr.run_id, "wait_for_new_version")["version"])
        replay = xcom_return(dr.run_id, "replay_and_check")
        assert replay["version"] == b.version and replay["engine"] == "local"
        b.append([f"run{run}.parquet"], size=1024, partition={"region": "us"})  # the next run's new version

    assert sensed == [1, 2, 3]


def rendered_newer_than(run_id: str) -> str:
    """The sensor's `newer_than` as rendered in a DAG run."""
    with metadata_db() as db:
        (fields,) = db.execute(
            "SELECT rendered_fields FROM rendered_task_instance_fields WHERE run_id = ? AND task_id = ?",
            (run_id, "wait_for_new_version"),
        ).fetchone()
    return json.loads(fields)["newer_than"]
