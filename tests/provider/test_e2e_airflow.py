"""The example DAG end to end: real Airflow (`dag.test()` on a migrated SQLite DB), real spark-submit.

wait_for_new_version defers, its trigger runs inline and fires on a commit made while it waits;
replay_and_check and tombstone_report each spark-submit the bundled job (`--master local[*]`);
summarize asserts on the XComs. Then a run whose check fails and one whose Spark job fails.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import pytest
from conftest import CORPUS, REPO, copy_table, metadata_db, task_states, xcom_return

pytest.importorskip("airflow")

from airflow_delta_provider.testing import DeltaLogBuilder

pytestmark = [pytest.mark.airflow, pytest.mark.spark]


@pytest.fixture
def health_dag(airflow_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[*]"}))
    monkeypatch.setenv("DELTA_RESULT_DIR", str(tmp_path / "results"))
    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:  # pragma: no cover - Airflow 2
        from airflow.models.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags" / "delta_table_health.py"))
    assert bag.import_errors == {}
    return bag.dags["delta_table_health"]


def _table(tmp_path: Path) -> DeltaLogBuilder:
    now = int(time.time() * 1000)
    b = DeltaLogBuilder(
        tmp_path / "table",
        schema={"id": "long", "region": "string"},
        partition_columns=["region"],
        start_time_ms=now - 3_600_000,
    )
    b.create()
    b.append(["a.parquet", "b.parquet"], size=4096, partition={"region": "eu"})
    b.append(["c.parquet"], size=2048, partition={"region": "us"})
    b.remove(["a.parquet"])
    return b


def _commit_once_deferred(b: DeltaLogBuilder, monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Append a commit once the sensor has deferred and its trigger is polling (it then fires on it).

    The trigger's own `run` is wrapped (a spy, not a stub): it runs unchanged, and the wrapper only
    signals that polling has started so the commit lands while the trigger waits.
    """
    from airflow_delta_provider.triggers.delta import DeltaVersionTrigger

    started = threading.Event()
    original = DeltaVersionTrigger.run

    async def spy(self: DeltaVersionTrigger):
        started.set()
        async for event in original(self):
            yield event

    monkeypatch.setattr(DeltaVersionTrigger, "run", spy)

    def commit() -> None:
        if started.wait(timeout=300):
            time.sleep(1.0)  # let a poll or two see no new version
            b.append(["d.parquet"], size=1024, partition={"region": "us"})

    threading.Thread(target=commit, daemon=True).start()
    return started


def test_example_dag_end_to_end(health_dag, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    b = _table(tmp_path)
    deferred = _commit_once_deferred(b, monkeypatch)
    dr = health_dag.test(run_conf={"table_uri": b.path, "newer_than": b.version, "retention_hours": 0})
    assert deferred.is_set(), "the sensor never deferred"
    states = task_states(dr.run_id)
    assert states == dict.fromkeys(
        ["wait_for_new_version", "replay_and_check", "tombstone_report", "summarize"], "success"
    ), states

    sensed = xcom_return(dr.run_id, "wait_for_new_version")
    assert sensed["version"] == 4 and sensed["operation"] == "WRITE"
    replay = xcom_return(dr.run_id, "replay_and_check")
    assert replay["version"] == 4 and replay["num_files"] == 3 and replay["size_bytes"] == 4096 + 2048 + 1024
    assert replay["partition_columns"] == ["region"] and replay["engine"] == "local"
    assert replay["checks"] == {"min_files": True, "max_small_file_ratio": True, "no_duplicate_paths": True}
    report = xcom_return(dr.run_id, "tombstone_report")
    assert report["num_tombstones"] == 1 and report["expired"] == 1 and report["reclaimable_bytes"] == 4096
    assert report["retention"]["source"] == "override"
    assert xcom_return(dr.run_id, "summarize") == {"version": 4, "num_files": 3, "expired": 1}
    # full results and renderings were kept where the DAG said
    full = json.loads(Path(replay["result_uri"]).read_text())
    assert full["status"] == "success" and full["metadata"]["partition_columns"] == ["region"]
    assert Path(report["reports"]["md"]).read_text().startswith("# Tombstone report")
    assert "a.parquet" not in json.dumps(replay)  # XCom stays a summary
    # the sensor's asset event carries the version it saw
    with metadata_db() as db:
        extra = db.execute("SELECT extra FROM asset_event ORDER BY id DESC LIMIT 1").fetchone()
    assert extra is not None and json.loads(extra[0])["version"] == 4


def test_failed_check_fails_the_task_with_its_message(health_dag, tmp_path: Path, capfd) -> None:
    b = _table(tmp_path)
    dr = health_dag.test(run_conf={"table_uri": b.path, "newer_than": -1, "min_files": 1000})
    states = task_states(dr.run_id)
    assert states["wait_for_new_version"] == "success"
    assert states["replay_and_check"] == "failed"
    assert states["tombstone_report"] == "upstream_failed"
    out = capfd.readouterr()
    assert "min_files: 2 active files, fewer than the minimum 1000" in out.out + out.err


def test_spark_job_failure_carries_the_typed_error(health_dag, tmp_path: Path, capfd) -> None:
    if not (CORPUS / "delta-rs" / "simple_table_features").exists():
        pytest.skip("reference corpus not found")
    table = copy_table("delta-rs/simple_table_features", tmp_path)
    dr = health_dag.test(run_conf={"table_uri": str(table), "newer_than": -1})
    states = task_states(dr.run_id)
    assert states["replay_and_check"] == "failed", states
    out = capfd.readouterr()
    text = out.out + out.err
    assert "DeltaJobError" in text and "UnsupportedFeatureError" in text
    shutil.rmtree(table, ignore_errors=True)
