"""`DeltaVersionSensor`: poke, reschedule and deferrable modes on real tables."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("airflow")

from airflow.providers.common.compat.sdk import AirflowException, TaskDeferred
from provider_support import TaskStateStore, small_table

from airflow_delta_provider.sensors.delta import BASELINE_KEY, DeltaVersionSensor
from airflow_delta_provider.triggers.delta import DeltaVersionTrigger

pytestmark = pytest.mark.airflow


# -- sensor ---------------------------------------------------------------------------------------
def test_sensor_target_and_newer_than(tmp_path: Path) -> None:
    b = small_table(tmp_path)
    assert DeltaVersionSensor(task_id="s", table_uri=b.path, target_version=3).poke({}) is False
    done = DeltaVersionSensor(task_id="s", table_uri=b.path, target_version="2").poke({})
    assert done.is_done and done.xcom_value["version"] == 2 and done.xcom_value["operation"] == "WRITE"
    assert DeltaVersionSensor(task_id="s", table_uri=b.path, newer_than=2).poke({}) is False
    assert DeltaVersionSensor(task_id="s", table_uri=b.path, newer_than="1").poke({}).is_done


def test_sensor_reschedule_keeps_its_baseline(tmp_path: Path) -> None:
    b = small_table(tmp_path)
    store = TaskStateStore()
    # each reschedule poke is a fresh operator instance, as in a new worker process
    assert (
        DeltaVersionSensor(task_id="s", table_uri=b.path, mode="reschedule").poke({"task_state_store": store}) is False
    )
    assert store.data[BASELINE_KEY] == 2
    assert (
        DeltaVersionSensor(task_id="s", table_uri=b.path, mode="reschedule").poke({"task_state_store": store}) is False
    )
    b.append(["new.parquet"], size=1, partition={"date": "2024-03-01"})
    done = DeltaVersionSensor(task_id="s", table_uri=b.path, mode="reschedule").poke({"task_state_store": store})
    assert done.is_done and done.xcom_value["version"] == 3


def test_sensor_missing_table_waits_or_fails(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing")
    assert DeltaVersionSensor(task_id="s", table_uri=missing, target_version=0).poke({}) is False
    from airflow_delta_provider.delta import TableNotFoundError

    with pytest.raises(TableNotFoundError):
        DeltaVersionSensor(task_id="s", table_uri=missing, target_version=0, wait_for_table=False).poke({})


def test_deferrable_sensor_defers_with_its_baseline_and_completes(tmp_path: Path) -> None:
    b = small_table(tmp_path)
    sensor = DeltaVersionSensor(task_id="s", table_uri=b.path, deferrable=True, poke_interval=3, timeout=60)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    trigger = deferred.value.trigger
    assert isinstance(trigger, DeltaVersionTrigger)
    assert trigger.baseline == 2 and trigger.poll_interval == 3.0
    assert deferred.value.method_name == "execute_complete"
    event = {"status": "success", "version": 3, "table_uri": b.uri, "timestamp": 1, "operation": "WRITE"}
    assert sensor.execute_complete({}, event) == {
        k: event[k] for k in ("version", "table_uri", "timestamp", "operation")
    }
    with pytest.raises(AirflowException, match="MalformedCommitError: bad"):
        sensor.execute_complete({}, {"status": "error", "error_class": "MalformedCommitError", "message": "bad"})


def test_deferrable_sensor_done_at_first_poke_does_not_defer(tmp_path: Path) -> None:
    b = small_table(tmp_path)
    out = DeltaVersionSensor(task_id="s", table_uri=b.path, newer_than=0, deferrable=True).execute({})
    assert out["version"] == 2


def test_concurrent_commit_during_poll_is_seen_next_time(tmp_path: Path) -> None:
    b = small_table(tmp_path)
    sensor = DeltaVersionSensor(task_id="s", table_uri=b.path, newer_than=2)
    t = threading.Thread(target=lambda: (time.sleep(0.05), b.append(["x.parquet"], size=1, partition={"date": "x"})))
    t.start()
    t.join()
    assert sensor.poke({}).xcom_value["version"] == 3


# -- maintenance commits are not data --------------------------------------------------------------
def _rs_table(root: Path) -> str:
    """delta-rs, partitioned by `p`: versions 0..2."""
    import pyarrow as pa
    from deltalake import write_deltalake

    for i in range(3):
        write_deltalake(str(root), pa.table({"id": [i, 10 + i], "p": ["a", "b"]}), partition_by=["p"], mode="append")
    return str(root)


def _append(root: str) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    write_deltalake(root, pa.table({"id": [99], "p": ["a"]}), partition_by=["p"], mode="append")


def _maintain(root: str) -> None:
    """A real OPTIMIZE (version 3) and a real VACUUM (START and END: versions 4 and 5)."""
    from airflow_delta_provider.delta.maintenance.optimize import optimize
    from airflow_delta_provider.delta.maintenance.vacuum import vacuum

    assert optimize(root).version == 3
    assert vacuum(root, dry_run=False, retention_hours=0, enforce_retention_duration=False).audit_versions == [4, 5]


def test_sensor_ignores_optimize_and_vacuum_unless_asked(tmp_path: Path) -> None:
    root = _rs_table(tmp_path / "rs")
    _maintain(root)
    sensor = DeltaVersionSensor(task_id="s", table_uri=root, newer_than=2)
    assert sensor.poke({}) is False  # three new versions, none changes data
    assert sensor._scanned == 5  # read once: the next poke starts after them
    every = DeltaVersionSensor(task_id="s", table_uri=root, newer_than=2, include_maintenance=True).poke({})
    assert every.is_done and every.xcom_value["version"] == 5 and every.xcom_value["operation"] == "VACUUM END"
    store = TaskStateStore()
    store.data[BASELINE_KEY] = 2  # a reschedule that started before the maintenance commits
    assert DeltaVersionSensor(task_id="s", table_uri=root, mode="reschedule").poke({"task_state_store": store}) is False
    # the target version is a number: reached, whatever its commit
    assert DeltaVersionSensor(task_id="s", table_uri=root, target_version=4).poke({}).xcom_value["version"] == 5

    _append(root)  # version 6: data
    done = sensor.poke({})
    assert done.is_done and done.xcom_value["version"] == 6 and done.xcom_value["operation"] == "WRITE"
    again = DeltaVersionSensor(task_id="s", table_uri=root, mode="reschedule").poke({"task_state_store": store})
    assert again.is_done and again.xcom_value["version"] == 6
    with pytest.raises(ValueError, match="include_maintenance"):
        DeltaVersionSensor(task_id="s", table_uri=root, include_maintenance="maybe")


def test_deferred_sensor_fires_on_the_data_commit_after_maintenance(tmp_path: Path) -> None:
    import asyncio

    root = _rs_table(tmp_path / "rs")
    sensor = DeltaVersionSensor(task_id="s", table_uri=root, newer_than=2, deferrable=True, poke_interval=0.05)
    _maintain(root)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})  # only maintenance since 2: defers
    trigger = deferred.value.trigger
    assert trigger.include_maintenance is False and trigger.newer_than == 2

    async def scenario() -> dict:
        task = asyncio.create_task(trigger.run().__anext__())
        await asyncio.sleep(0.5)
        assert not task.done()  # polls see versions 3..5: maintenance, keep waiting
        await asyncio.to_thread(_append, root)
        return (await asyncio.wait_for(task, timeout=60)).payload

    payload = asyncio.run(scenario())
    assert payload["status"] == "success" and payload["version"] == 6 and payload["operation"] == "WRITE"
    assert sensor.execute_complete({}, payload)["version"] == 6
