"""`DeltaJobHook` on its own: in this process for `engine="local"`, a real spark-submit process for
`engine="spark"` (a recording stand-in first on PATH), an error result read back as a `DeltaJobError`,
the `auto` fallback to Spark, and `on_kill` killing a running spark-submit (the hook's and the operator's)."""

from __future__ import annotations

import json
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("airflow")

from airflow.providers.common.compat.sdk import AirflowException
from provider_support import small_table, task_context
from spark_submit_stub import recorded, recording_spark_submit

from airflow_delta_provider.commands.request import Request
from airflow_delta_provider.hooks.job import DeltaJobError, DeltaJobHook
from airflow_delta_provider.jobs import job_script
from airflow_delta_provider.operators.delta import SnapshotReplayOperator

pytestmark = pytest.mark.airflow
SECRETS = {"key": "AKIAEXAMPLE", "secret": "very-secret-key"}


def test_local_runs_in_this_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = recording_spark_submit(tmp_path, monkeypatch)
    b = small_table(tmp_path)
    hook = DeltaJobHook()
    kept = tmp_path / "r.json"
    result = hook.run(Request.make(table=b.path, action="snapshot", engine="local"), str(kept))
    assert result["status"] == "success" and result["engine"] == "local" and result["num_files"] == 2
    assert json.loads(kept.read_text())["version"] == result["version"] == 2
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    assert hook.run(Request.make(table=b.path, action="tombstones", engine="local"))["engine"] == "local"
    assert list(scratch.iterdir()) == []  # no result_uri: a temporary result, removed afterwards
    assert not calls.exists() and hook.spark_hook is None  # no spark-submit process


def test_spark_submits_the_job_with_credentials_only_in_its_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = recording_spark_submit(tmp_path, monkeypatch)
    request = Request.make(table="s3://bucket/t", action="snapshot", engine="spark", version=5, storage_options=SECRETS)
    hook = DeltaJobHook(conf={"spark.executor.memory": "1g"}, py_files="/opt/extra.zip")
    with pytest.raises(AirflowException, match="Cannot execute"):  # the stand-in exits 1 and writes no result
        hook.run(request, str(tmp_path / "r.json"))
    (call,) = recorded(calls)
    argv = call["argv"]
    assert argv[argv.index("--master") + 1] == "local[2]" and job_script() in argv
    py_files = argv[argv.index("--py-files") + 1].split(",")
    assert py_files[0] == "/opt/extra.zip" and py_files[1].endswith(".zip")  # the user's, then the library
    assert call["request"]["version"] == 5
    assert {"spark.executor.memory=1g", "spark.log.level=WARN"} <= set(argv)
    assert json.loads(call["env"]) == SECRETS
    log = capsys.readouterr().out
    assert "running snapshot on Spark (spark): spark-submit to local[2]" in log
    for secret in SECRETS.values():
        assert not any(secret in part for part in argv) and secret not in log


def test_credentials_are_refused_where_spark_submit_would_put_them_on_its_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = recording_spark_submit(tmp_path, monkeypatch)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_YARN", json.dumps({"conn_type": "spark", "host": "yarn"}))
    request = Request.make(table="s3://bucket/t", action="snapshot", engine="spark", storage_options=SECRETS)
    with pytest.raises(AirflowException, match="client-mode driver outside YARN/Kubernetes"):
        DeltaJobHook("spark_yarn").run(request, str(tmp_path / "r.json"))
    with pytest.raises(ValueError, match="result_uri is required in cluster deploy mode"):
        DeltaJobHook(deploy_mode="cluster").run(Request.make(table="/t", action="snapshot", engine="spark"))
    assert not calls.exists()


@pytest.mark.parametrize("code", [1, 0])
def test_an_error_result_is_read_back_as_a_delta_job_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    error = {
        "status": "error",
        "action": "snapshot",
        "engine": "spark",
        "error_class": "UnsupportedFeatureError",
        "message": "reader feature 'x' is not supported",
        "table": "s3://bucket/t",
        "version": 3,
    }
    recording_spark_submit(tmp_path, monkeypatch, result=error, code=code)
    request = Request.make(table="s3://bucket/t", action="snapshot", engine="spark")
    with pytest.raises(DeltaJobError, match="UnsupportedFeatureError: reader feature 'x'") as info:
        DeltaJobHook().run(request, str(tmp_path / "r.json"))
    assert info.value.error_class == "UnsupportedFeatureError" and info.value.result == error
    assert type(info.value.error).__name__ == "UnsupportedFeatureError" and info.value.error.version == 3
    assert isinstance(info.value.__cause__, AirflowException) == (code != 0)  # spark-submit's own failure


def test_a_job_that_writes_no_result_fails_saying_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recording_spark_submit(tmp_path, monkeypatch, code=0)
    request = Request.make(table="/t", action="snapshot", engine="spark")
    with pytest.raises(AirflowException, match="the Delta job finished but wrote no result at"):
        DeltaJobHook().run(request, str(tmp_path / "r.json"))


def test_a_local_error_is_a_delta_job_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = recording_spark_submit(tmp_path, monkeypatch)
    with pytest.raises(DeltaJobError) as info:
        DeltaJobHook().run(Request.make(table=str(tmp_path / "nope"), action="snapshot", engine="auto"))
    assert info.value.error_class == "TableNotFoundError" and not calls.exists()


def test_auto_submits_when_the_state_would_not_fit_the_local_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    b = small_table(tmp_path)
    done = {"status": "success", "action": "snapshot", "engine": "spark", "table": b.path, "version": 2}
    calls = recording_spark_submit(tmp_path, monkeypatch, result=done, code=0)
    request = Request.make(table=b.path, action="snapshot", engine="auto", memory_limit_bytes=1)
    assert DeltaJobHook().run(request, str(tmp_path / "r.json")) == done
    (call,) = recorded(calls)
    assert call["request"]["engine"] == "spark"
    log = capsys.readouterr().out
    assert "in this process with the local engine (engine='auto': the log segment is under the threshold)" in log
    assert "would not fit the local engine's memory limit: running it on Spark" in log
    assert "snapshot ran on the spark engine; result at" in log


def _killed_while_running(run: Any, kill: Any, calls: Path) -> BaseException:
    """Run `run` in a thread, call `kill` once spark-submit has started, and return what `run` raised."""
    raised: list[BaseException] = []

    def target() -> None:
        try:
            run()
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    deadline = time.monotonic() + 60
    while not calls.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    started = time.monotonic()
    kill()
    thread.join(30)
    assert not thread.is_alive() and time.monotonic() - started < 30  # not the stand-in's 120 s
    return raised[0]


def test_on_kill_kills_the_hooks_running_spark_submit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = recording_spark_submit(tmp_path, monkeypatch, code=0, sleep=120)
    hook = DeltaJobHook()
    request = Request.make(table="/t", action="snapshot", engine="spark")
    error = _killed_while_running(lambda: hook.run(request, str(tmp_path / "r.json")), hook.on_kill, calls)
    assert isinstance(error, AirflowException) and "Cannot execute" in str(error)


def test_on_kill_kills_the_operators_running_spark_submit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = recording_spark_submit(tmp_path, monkeypatch, code=0, sleep=120)
    b = small_table(tmp_path)
    op = SnapshotReplayOperator(task_id="r", table_uri=b.path, engine="spark")
    error = _killed_while_running(lambda: op.execute(task_context(tmp_path)), op.on_kill, calls)
    assert isinstance(error, AirflowException) and "Cannot execute" in str(error)


def test_a_spark_connect_connection_gives_the_connect_url_and_logs_it_without_its_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The URL comes from the Spark provider's `SparkConnectHook`; a `spark` connection has none (spark-submit).
    The Connect runs themselves: tests/provider/test_spark_connect_operators.py (a real server)."""
    from airflow_delta_provider.hooks.job import public_url

    conn = {"conn_type": "spark_connect", "host": "connect.example", "port": 15002, "password": "tok/en"}
    monkeypatch.setenv("AIRFLOW_CONN_SC", json.dumps(conn))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_LOCAL", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    url = DeltaJobHook("sc").connect_url()
    assert url == "sc://connect.example:15002/;token=tok/en"  # the provider quotes with safe="/"
    assert public_url(url) == "sc://connect.example:15002" and DeltaJobHook("spark_local").connect_url() is None
