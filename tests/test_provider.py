"""The Airflow side without a JVM: provider metadata, hook, trigger, sensor, operators (submit=False).

Real tables written with `airflow_delta_provider.testing.DeltaLogBuilder`; real Airflow classes.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("airflow")

from airflow.providers.common.compat.sdk import AirflowException, TaskDeferred

from airflow_delta_provider.delta import DeltaLog, StorageError
from airflow_delta_provider.get_provider_info import get_provider_info
from airflow_delta_provider.hooks.delta import DeltaTableHook, storage_options_from_connection
from airflow_delta_provider.operators.delta import (
    DeltaCheckFailed,
    DeltaJobError,
    SnapshotReplayOperator,
    TombstoneReportOperator,
)
from airflow_delta_provider.sensors.delta import BASELINE_KEY, DeltaVersionSensor
from airflow_delta_provider.testing import DeltaLogBuilder
from airflow_delta_provider.triggers import delta as trigger_module
from airflow_delta_provider.triggers.delta import DeltaVersionTrigger

pytestmark = pytest.mark.airflow

NOW = 1_700_000_000_000


def _table(tmp_path: Path, commits: int = 2) -> DeltaLogBuilder:
    b = DeltaLogBuilder(tmp_path / "t", schema={"id": "long", "date": "string"}, partition_columns=["date"])
    b.create()
    for i in range(commits):
        b.append([f"part-{i}.parquet"], size=100 + i, partition={"date": f"2024-01-0{i + 1}"})
    return b


class TaskStateStore:
    """Stand-in for Airflow 3.3's `context["task_state_store"]` (the real one talks to the task
    supervisor, which only exists inside a running task). Same get/set contract."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)

    def set(self, key: str, value: Any, **_: Any) -> None:
        self.data[key] = value


# -- packaging ------------------------------------------------------------------------------------
def test_provider_info_matches_airflow_schema() -> None:
    import importlib.resources

    import jsonschema

    schema = json.loads(importlib.resources.files("airflow").joinpath("provider_info.schema.json").read_text())
    info = get_provider_info()
    jsonschema.validate(info, schema)
    for kind in ("operators", "sensors", "triggers", "hooks"):
        for entry in info[kind]:
            for module in entry["python-modules"]:
                __import__(module)


def test_airflow_providers_list_shows_the_provider() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "airflow", "providers", "list", "--output", "json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    names = {p["package_name"] for p in json.loads(out[out.index("[") :])}
    assert "airflow-delta-provider" in names


# -- hook -----------------------------------------------------------------------------------------
def test_aws_connection_becomes_storage_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_DELTA_S3",
        json.dumps(
            {
                "conn_type": "aws",
                "login": "AKIAEXAMPLE",
                "password": "s3cr3t-value",
                "extra": {"endpoint_url": "http://127.0.0.1:9000", "region_name": "eu-west-1"},
            }
        ),
    )
    hook = DeltaTableHook("s3://bucket/table", "delta_s3")
    assert hook.storage_options() == {
        "key": "AKIAEXAMPLE",
        "secret": "s3cr3t-value",
        "endpoint_url": "http://127.0.0.1:9000",
        "client_kwargs": {"region_name": "eu-west-1"},
    }


def test_unsupported_connection_type_is_refused() -> None:
    class Conn:
        conn_type = "postgres"

    with pytest.raises(ValueError, match="expected aws"):
        storage_options_from_connection(Conn(), "pg")


# -- trigger --------------------------------------------------------------------------------------
def test_trigger_serialization_round_trip() -> None:
    trigger = DeltaVersionTrigger(
        "s3://b/t", newer_than=4, baseline=None, storage_conn_id="aws_default", poll_interval=2.5
    )
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_delta_provider.triggers.delta.DeltaVersionTrigger"
    assert kwargs == {
        "table_uri": "s3://b/t",
        "target_version": None,
        "newer_than": 4,
        "baseline": None,
        "storage_conn_id": "aws_default",
        "poll_interval": 2.5,
        "wait_for_table": True,
        "max_transient_errors": 5,
    }
    assert all(isinstance(v, str | int | float | bool | type(None)) for v in kwargs.values())
    module, _, name = classpath.rpartition(".")
    clone = getattr(__import__(module, fromlist=[name]), name)(**kwargs)
    assert clone.serialize() == (classpath, kwargs)


def test_trigger_fires_when_a_real_table_gains_a_commit(tmp_path: Path) -> None:
    b = _table(tmp_path)
    trigger = DeltaVersionTrigger(b.path, baseline=b.version, poll_interval=0.05)

    async def scenario() -> dict[str, Any]:
        gen = trigger.run()
        task = asyncio.create_task(gen.__anext__())
        await asyncio.sleep(0.3)
        assert not task.done()  # no new version yet: still polling
        await asyncio.to_thread(b.append, ["late.parquet"], size=7, partition={"date": "2024-02-01"})
        event = await asyncio.wait_for(task, timeout=30)
        return event.payload

    payload = asyncio.run(scenario())
    assert payload["status"] == "success"
    assert payload["version"] == b.version == 3
    assert payload["operation"] == "WRITE"
    assert payload["timestamp"] == b.timestamp(3)
    assert payload["table_uri"] == DeltaLog(b.path).table_uri


def test_trigger_waits_for_a_table_that_does_not_exist_yet(tmp_path: Path) -> None:
    b = DeltaLogBuilder(tmp_path / "later", schema={"id": "long"})
    trigger = DeltaVersionTrigger(b.path, target_version=0, poll_interval=0.05)

    async def scenario() -> dict[str, Any]:
        task = asyncio.create_task(trigger.run().__anext__())
        await asyncio.sleep(0.3)
        assert not task.done()
        await asyncio.to_thread(b.create)
        return (await asyncio.wait_for(task, timeout=30)).payload

    assert asyncio.run(scenario())["version"] == 0


def test_trigger_permanent_error_ends_the_wait(tmp_path: Path) -> None:
    b = _table(tmp_path)
    Path(b.commit_path(3)).write_text('{"commitInfo": {"operation": "WRITE"}}\n{"add": {"path": ')  # torn
    trigger = DeltaVersionTrigger(b.path, newer_than=2, poll_interval=0.05)
    payload = asyncio.run(trigger.run().__anext__()).payload
    assert payload["status"] == "error"
    assert payload["error_class"] == "MalformedCommitError"
    assert payload["transient"] is False
    assert "version=3" in payload["message"]


def test_trigger_retries_transient_errors_then_fires(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A local directory cannot throttle: the first two probes raise what an object store's 503
    # SlowDown becomes (StorageError(transient=True)); tests/test_s3.py injects real 503s.
    b = _table(tmp_path)
    real = trigger_module.probe_version
    calls = {"n": 0}

    def flaky(*args: Any, **kwargs: Any) -> int | None:
        calls["n"] += 1
        if calls["n"] <= 2:
            raise StorageError("SlowDown", table=b.uri, transient=True)
        return real(*args, **kwargs)

    monkeypatch.setattr(trigger_module, "probe_version", flaky)
    payload = asyncio.run(DeltaVersionTrigger(b.path, target_version=2, poll_interval=0.01).run().__anext__()).payload
    assert payload["status"] == "success" and payload["version"] == 2 and calls["n"] == 3

    calls["n"] = -100  # now always transient: gives up after max_transient_errors in a row
    monkeypatch.setattr(trigger_module, "probe_version", lambda *a, **k: (_ for _ in ()).throw(TimeoutError("t/o")))
    payload = asyncio.run(
        DeltaVersionTrigger(b.path, target_version=2, poll_interval=0.01, max_transient_errors=2).run().__anext__()
    ).payload
    assert payload["status"] == "error" and payload["transient"] is True and payload["error_class"] == "TimeoutError"


# -- sensor ---------------------------------------------------------------------------------------
def test_sensor_target_and_newer_than(tmp_path: Path) -> None:
    b = _table(tmp_path)
    assert DeltaVersionSensor(task_id="s", table_uri=b.path, target_version=3).poke({}) is False
    done = DeltaVersionSensor(task_id="s", table_uri=b.path, target_version="2").poke({})
    assert done.is_done and done.xcom_value["version"] == 2 and done.xcom_value["operation"] == "WRITE"
    assert DeltaVersionSensor(task_id="s", table_uri=b.path, newer_than=2).poke({}) is False
    assert DeltaVersionSensor(task_id="s", table_uri=b.path, newer_than="1").poke({}).is_done


def test_sensor_reschedule_keeps_its_baseline(tmp_path: Path) -> None:
    b = _table(tmp_path)
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
    b = _table(tmp_path)
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
    b = _table(tmp_path)
    out = DeltaVersionSensor(task_id="s", table_uri=b.path, newer_than=0, deferrable=True).execute({})
    assert out["version"] == 2


# -- operators without spark-submit ---------------------------------------------------------------
def _context(tmp_path: Path) -> dict[str, Any]:
    class TI:
        dag_id, task_id = "d", "t"

    return {"ti": TI(), "run_id": "manual__1"}


def test_snapshot_replay_operator_in_process(tmp_path: Path) -> None:
    b = _table(tmp_path)
    b.txn("app", 7)
    op = SnapshotReplayOperator(
        task_id="replay",
        table_uri=b.path,
        submit=False,
        result_uri=str(tmp_path / "out") + "/",
        checks={"min_files": 2, "partition_columns": ["date"], "no_duplicate_paths": True},
    )
    out = op.execute(_context(tmp_path))
    assert out["version"] == 3 and out["num_files"] == 2 and out["size_bytes"] == 201
    assert out["set_transactions"] == {"app": 7} and out["engine"] == "local"
    assert out["checks"] == {"min_files": True, "partition_columns": True, "no_duplicate_paths": True}
    full = json.loads(Path(out["result_uri"]).read_text())
    assert full["status"] == "success" and full["metadata"]["partition_columns"] == ["date"]


def test_snapshot_replay_operator_failed_check_names_it(tmp_path: Path) -> None:
    b = _table(tmp_path)
    op = SnapshotReplayOperator(
        task_id="replay", table_uri=b.path, submit=False, checks={"max_files": 1, "schema_since": {"version": 0}}
    )
    with pytest.raises(DeltaCheckFailed, match=r"max_files: 2 active files, more than the maximum 1"):
        op.execute(_context(tmp_path))


def test_schema_check_catches_a_dropped_column(tmp_path: Path) -> None:
    b = _table(tmp_path)
    b.add_column("extra", "string")
    ok = SnapshotReplayOperator(task_id="r", table_uri=b.path, submit=False, checks={"schema_since": {"version": 0}})
    assert ok.execute(_context(tmp_path))["checks"] == {"schema_since": True}
    b.change_schema({"id": "long", "date": "string"})  # drops "extra"
    bad = SnapshotReplayOperator(
        task_id="r", table_uri=b.path, submit=False, checks={"schema_since": {"version": 3, "allow": "added_columns"}}
    )
    with pytest.raises(DeltaCheckFailed, match=r"dropped \['extra'\]"):
        bad.execute(_context(tmp_path))


def test_unknown_check_fails_at_parse_time() -> None:
    from airflow_delta_provider.delta import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="unknown checks"):
        SnapshotReplayOperator(task_id="r", table_uri="/t", checks={"min_file": 1})


def test_tombstone_report_operator_in_process(tmp_path: Path) -> None:
    b = _table(tmp_path)
    b.remove(["part-0.parquet"], deletion_timestamp_ms=b.timestamp(2))
    op = TombstoneReportOperator(
        task_id="report", table_uri=b.path, submit=False, retention_hours=0, result_uri=str(tmp_path / "r.json")
    )
    out = op.execute(_context(tmp_path))
    assert out["num_tombstones"] == 1 and out["expired"] == 1 and out["reclaimable_bytes"] == 100
    assert out["retention"]["source"] == "override" and out["num_partitions"] == 1
    assert set(out["reports"]) == {"md", "html"}
    assert "date=2024-01-01" in Path(out["reports"]["md"]).read_text()
    assert (Path(b.path) / "_delta_log").exists() and DeltaLog(b.path).update().version == 3  # read-only


def test_operator_job_error_is_typed(tmp_path: Path) -> None:
    op = SnapshotReplayOperator(task_id="r", table_uri=str(tmp_path / "nope"), submit=False)
    with pytest.raises(DeltaJobError) as err:
        op.execute(_context(tmp_path))
    assert err.value.error_class == "TableNotFoundError"
    assert type(err.value.error).__name__ == "TableNotFoundError"
    assert "TableNotFoundError" in str(err.value)


def test_spark_submit_command_ships_library_and_keeps_secrets_off_argv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    monkeypatch.setenv(
        "AIRFLOW_CONN_DELTA_S3",
        json.dumps({"conn_type": "aws", "login": "AKIAEXAMPLE", "password": "very-secret-key"}),
    )
    op = SnapshotReplayOperator(task_id="r", table_uri="s3://bucket/t", storage_conn_id="delta_s3", version="5")
    args = op.job_arguments("/tmp/result.json")
    op.application_args = args
    from airflow_delta_provider.jobs import build_py_files_zip, job_script

    op.py_files = build_py_files_zip(tmp_path)
    cmd = op._get_hook()._build_spark_submit_command(op.application)
    assert cmd[cmd.index("--master") + 1] == "local[2]"
    assert cmd[cmd.index("--py-files") + 1].endswith(".zip")
    assert job_script() in cmd and cmd[cmd.index("--version") + 1] == "5"
    assert not any("very-secret-key" in part or "AKIAEXAMPLE" in part for part in cmd)


def test_job_zip_imports_on_a_bare_python(tmp_path: Path) -> None:
    from airflow_delta_provider.jobs import build_py_files_zip

    zip_path = build_py_files_zip(tmp_path)
    assert build_py_files_zip(tmp_path) == zip_path  # reused while the sources are unchanged
    code = "import airflow_delta_provider.delta.engines.spark_tasks as t, airflow_delta_provider.delta.read.aggregates"
    env = {"PYTHONPATH": zip_path, "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-S", "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_example_dags_import_cleanly() -> None:
    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:  # pragma: no cover - Airflow 2
        from airflow.models.dagbag import DagBag

    bag = DagBag(dag_folder=str(Path(__file__).resolve().parents[1] / "dags"))
    assert bag.import_errors == {}
    assert {"delta_table_health", "delta_asset_consumer"} <= set(bag.dag_ids)
    health = bag.dags["delta_table_health"]
    assert [t.task_id for t in health.topological_sort()][:3] == [
        "wait_for_new_version",
        "replay_and_check",
        "tombstone_report",
    ]


def test_concurrent_commit_during_poll_is_seen_next_time(tmp_path: Path) -> None:
    b = _table(tmp_path)
    sensor = DeltaVersionSensor(task_id="s", table_uri=b.path, newer_than=2)
    t = threading.Thread(target=lambda: (time.sleep(0.05), b.append(["x.parquet"], size=1, partition={"date": "x"})))
    t.start()
    t.join()
    assert sensor.poke({}).xcom_value["version"] == 3
