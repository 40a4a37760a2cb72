"""The operators without spark-submit (in process) and the spark-submit command they build."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("airflow")

from airflow.providers.common.compat.sdk import AirflowException
from provider_support import small_table, task_context
from spark_submit_stub import recorded, recording_spark_submit

from airflow_delta_provider.delta import DeltaLog
from airflow_delta_provider.operators.delta import (
    DeltaCheckFailed,
    DeltaJobError,
    SnapshotReplayOperator,
    TombstoneReportOperator,
)

pytestmark = pytest.mark.airflow


def test_snapshot_replay_operator_in_process(tmp_path: Path) -> None:
    b = small_table(tmp_path)
    b.txn("app", 7)
    op = SnapshotReplayOperator(
        task_id="replay",
        table_uri=b.path,
        submit=False,
        result_uri=str(tmp_path / "out") + "/",
        checks={"min_files": 2, "partition_columns": ["date"], "no_duplicate_paths": True},
    )
    out = op.execute(task_context(tmp_path))
    assert out["version"] == 3 and out["num_files"] == 2 and out["size_bytes"] == 201
    assert out["set_transactions"] == {"app": 7} and out["engine"] == "local"
    assert out["checks"] == {"min_files": True, "partition_columns": True, "no_duplicate_paths": True}
    full = json.loads(Path(out["result_uri"]).read_text())
    assert full["status"] == "success" and full["metadata"]["partition_columns"] == ["date"]


def test_snapshot_replay_operator_failed_check_names_it(tmp_path: Path) -> None:
    b = small_table(tmp_path)
    op = SnapshotReplayOperator(
        task_id="replay", table_uri=b.path, submit=False, checks={"max_files": 1, "schema_since": {"version": 0}}
    )
    with pytest.raises(DeltaCheckFailed, match=r"max_files: 2 active files, more than the maximum 1"):
        op.execute(task_context(tmp_path))


def test_schema_check_catches_a_dropped_column(tmp_path: Path) -> None:
    b = small_table(tmp_path)
    b.add_column("extra", "string")
    ok = SnapshotReplayOperator(task_id="r", table_uri=b.path, submit=False, checks={"schema_since": {"version": 0}})
    assert ok.execute(task_context(tmp_path))["checks"] == {"schema_since": True}
    b.change_schema({"id": "long", "date": "string"})  # drops "extra"
    bad = SnapshotReplayOperator(
        task_id="r", table_uri=b.path, submit=False, checks={"schema_since": {"version": 3, "allow": "added_columns"}}
    )
    with pytest.raises(DeltaCheckFailed, match=r"dropped \['extra'\]"):
        bad.execute(task_context(tmp_path))


def test_unknown_check_fails_at_parse_time() -> None:
    from airflow_delta_provider.delta import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="unknown checks"):
        SnapshotReplayOperator(task_id="r", table_uri="/t", checks={"min_file": 1})


def test_tombstone_report_operator_in_process(tmp_path: Path) -> None:
    b = small_table(tmp_path)
    b.remove(["part-0.parquet"], deletion_timestamp_ms=b.timestamp(2))
    op = TombstoneReportOperator(
        task_id="report", table_uri=b.path, submit=False, retention_hours=0, result_uri=str(tmp_path / "r.json")
    )
    out = op.execute(task_context(tmp_path))
    assert out["num_tombstones"] == 1 and out["expired"] == 1 and out["reclaimable_bytes"] == 100
    assert out["retention"]["source"] == "override" and out["num_partitions"] == 1
    assert set(out["reports"]) == {"md", "html"}
    assert "date=2024-01-01" in Path(out["reports"]["md"]).read_text()
    assert (Path(b.path) / "_delta_log").exists() and DeltaLog(b.path).update().version == 3  # read-only


def test_operator_job_error_is_typed(tmp_path: Path) -> None:
    op = SnapshotReplayOperator(task_id="r", table_uri=str(tmp_path / "nope"), submit=False)
    with pytest.raises(DeltaJobError) as err:
        op.execute(task_context(tmp_path))
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
    request = json.loads(cmd[cmd.index("--request") + 1])
    assert job_script() in cmd and request["version"] == 5
    assert not any("very-secret-key" in part or "AKIAEXAMPLE" in part for part in cmd)


def test_auto_engine_on_a_small_table_starts_no_jvm(tmp_path: Path, monkeypatch, capsys) -> None:
    """engine='auto' (the default, with submit=True) decides from the listing: a small table runs in
    the worker process, and no spark-submit process is spawned. engine='spark' does spawn one."""
    calls = recording_spark_submit(tmp_path, monkeypatch)
    b = small_table(tmp_path)
    out = SnapshotReplayOperator(task_id="replay", table_uri=b.path).execute(task_context(tmp_path))
    assert out["engine"] == "local" and out["num_files"] == 2
    assert not calls.exists()
    messages = capsys.readouterr().out  # the task log (Airflow's structlog writes to stdout here)
    assert "in this process with the local engine" in messages and "under the threshold" in messages
    assert "ran on the local engine; result at" in messages
    with pytest.raises(AirflowException, match="Cannot execute"):  # the recording spark-submit exits 1
        SnapshotReplayOperator(task_id="replay", table_uri=b.path, engine="spark").execute(task_context(tmp_path))
    assert [call["request"]["engine"] for call in recorded(calls)] == ["spark"]


def test_auto_engine_submits_a_log_over_the_threshold(tmp_path: Path, monkeypatch) -> None:
    calls = recording_spark_submit(tmp_path, monkeypatch)
    b = small_table(tmp_path)
    op = SnapshotReplayOperator(task_id="replay", table_uri=b.path, auto_threshold_mb=0)
    with pytest.raises(AirflowException, match="Cannot execute"):  # the recording spark-submit exits 1
        op.execute(task_context(tmp_path))
    assert [call["request"]["engine"] for call in recorded(calls)] == ["spark"]


def _grows_then_shrinks(tmp_path: Path):
    """Versions: 0 create, 1 two files, 2 four files, 3 two files again."""
    from airflow_delta_provider.testing import DeltaLogBuilder

    b = DeltaLogBuilder(tmp_path / "g", schema={"id": "long"})
    b.create()
    b.append(["a.parquet", "b.parquet"], size=10)
    b.append(["c.parquet", "d.parquet"], size=10)
    b.remove(["c.parquet", "d.parquet"])
    return b


def test_a_check_failing_at_a_middle_version_fails_the_task_naming_it(tmp_path: Path) -> None:
    b = _grows_then_shrinks(tmp_path)
    latest_only = SnapshotReplayOperator(
        task_id="r", table_uri=b.path, submit=False, since_version=None, checks={"max_files": 3}
    ).execute(task_context(tmp_path))
    assert latest_only["version"] == 3 and latest_only["checked_versions"] == [3]
    op = SnapshotReplayOperator(task_id="r", table_uri=b.path, submit=False, since_version=0, checks={"max_files": 3})
    with pytest.raises(DeltaCheckFailed, match=r"first failing version 2\).*version 2: max_files: 4 active files"):
        op.execute(task_context(tmp_path))


def test_since_version_defaults_to_the_previous_runs_version(tmp_path: Path) -> None:
    """The default reads the version the task's previous run checked from XCom. The task instance is a
    stand-in with Airflow's `xcom_pull` signature (a real one needs the task runner); the shapes it
    returns are the ones Airflow 3 returns (a dict, or a list of dicts once several runs stored one)."""
    b = _grows_then_shrinks(tmp_path)

    class TI:
        dag_id, task_id = "d", "r"

        def __init__(self, pulled):
            self.pulled = pulled

        def xcom_pull(self, *, task_ids, include_prior_dates):
            assert task_ids == "r" and include_prior_dates
            return self.pulled

    def context(pulled):
        return {"ti": TI(pulled), "run_id": "manual__2"}

    checks = {"max_files": 3, "append_only": True}
    op = SnapshotReplayOperator(task_id="r", table_uri=b.path, submit=False, checks=checks)
    with pytest.raises(DeltaCheckFailed, match="first failing version 2"):
        op.execute(context([{"version": 0, "table_uri": b.path}, {"version": 1, "table_uri": "/another/table"}]))
    with pytest.raises(DeltaCheckFailed, match=r"first failing version 3\).*append_only"):  # 3 removes files
        op.execute(context({"version": 2, "table_uri": b.path}))
    counts_only = SnapshotReplayOperator(task_id="r", table_uri=b.path, submit=False, checks={"max_files": 3})
    assert counts_only.execute(context({"version": 2, "table_uri": b.path}))["checked_versions"] == [3]
    assert counts_only.execute(context(None))["checked_versions"] == [3]  # no earlier run: the latest only
