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
