"""The sensor, its trigger and an operator against s3:// on a real S3-compatible server (moto on loopback),
with credentials from an Airflow `aws` connection."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from typing import Any

import pytest

pytest.importorskip("airflow")
pytest.importorskip("moto")
pytest.importorskip("s3fs")

from support.s3_server import (
    S3Server,
    create_bucket,
    deltalake_storage_options,
    write_sample_table,
)

from airflow_delta_provider.operators.delta import SnapshotReplayOperator
from airflow_delta_provider.sensors.delta import DeltaVersionSensor
from airflow_delta_provider.triggers.delta import DeltaVersionTrigger

pytestmark = pytest.mark.airflow
BUCKET = "provider-bucket"


@pytest.fixture(scope="module")
def server(moto_s3: S3Server) -> S3Server:
    """The session's moto server, with this module's bucket."""
    create_bucket(moto_s3, BUCKET)
    return moto_s3


def _connection(server: S3Server, secret: str | None = None) -> str:
    return json.dumps(
        {
            "conn_type": "aws",
            "login": server.access_key,
            "password": secret or server.secret_key,
            "extra": {"endpoint_url": server.endpoint, "region_name": server.region},
        }
    )


@pytest.fixture
def table(server: S3Server, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("AIRFLOW_CONN_DELTA_S3", _connection(server))
    uri = f"s3://{BUCKET}/t-{uuid.uuid4().hex[:10]}"
    write_sample_table(uri, deltalake_storage_options(server), commits=3)  # versions 0..2
    return uri


def test_sensor_pokes_an_s3_table_with_connection_credentials(table: str) -> None:
    done = DeltaVersionSensor(task_id="s", table_uri=table, target_version=2, storage_conn_id="delta_s3").poke({})
    assert done.is_done and done.xcom_value["version"] == 2 and done.xcom_value["table_uri"] == table
    assert done.xcom_value["operation"] == "WRITE"
    assert DeltaVersionSensor(task_id="s", table_uri=table, newer_than=2, storage_conn_id="delta_s3").poke({}) is False


def test_deferred_trigger_fires_on_a_commit_to_s3(table: str, server: S3Server) -> None:
    trigger = DeltaVersionTrigger(table, baseline=2, storage_conn_id="delta_s3", poll_interval=0.2)

    async def scenario() -> dict[str, Any]:
        task = asyncio.create_task(trigger.run().__anext__())
        await asyncio.sleep(1.0)
        assert not task.done()
        await asyncio.to_thread(write_sample_table, table, deltalake_storage_options(server), commits=1, start_id=100)
        return (await asyncio.wait_for(task, timeout=60)).payload

    payload = asyncio.run(scenario())
    assert payload["status"] == "success" and payload["version"] == 3


def test_wrong_connection_secret_is_a_permanent_error_without_the_secret(
    table: str, server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = "wrong-" + uuid.uuid4().hex
    monkeypatch.setenv("AIRFLOW_CONN_DELTA_S3", _connection(server, secret=wrong))
    payload = asyncio.run(
        DeltaVersionTrigger(table, target_version=0, storage_conn_id="delta_s3", poll_interval=0.1).run().__anext__()
    ).payload
    assert payload["status"] == "error" and payload["transient"] is False
    assert payload["error_class"] == "StorageError"
    assert wrong not in json.dumps(payload)


def test_snapshot_operator_in_process_on_s3(table: str, server: S3Server) -> None:
    from deltalake import DeltaTable

    out = SnapshotReplayOperator(
        task_id="r", table_uri=table, storage_conn_id="delta_s3", submit=False, checks={"min_files": 1}
    ).execute({"ti": None, "run_id": "r"})
    expected = DeltaTable(table, storage_options=deltalake_storage_options(server))
    assert out["version"] == expected.version() == 2
    assert out["num_files"] == len(expected.file_uris())
    assert server.secret_key not in json.dumps(out)


def test_poke_tolerates_a_concurrent_writer(table: str, server: S3Server) -> None:
    writer = threading.Thread(
        target=write_sample_table,
        args=(table, deltalake_storage_options(server)),
        kwargs={"commits": 2, "start_id": 50},
    )
    writer.start()
    sensor = DeltaVersionSensor(task_id="s", table_uri=table, newer_than=1, storage_conn_id="delta_s3")
    assert sensor.poke({}).xcom_value["version"] >= 2
    writer.join()
    assert sensor.poke({}).xcom_value["version"] == 4


def test_the_report_plugin_reads_an_s3_report_with_connection_credentials(
    server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A report stored on S3 is served with its task's storage connection (the plugin called `dict()` on the
    hook's `storage_options` method before, a TypeError for every report read through a connection)."""
    from support.s3_server import boto3_client

    from airflow_delta_provider.plugin import _read

    monkeypatch.setenv("AIRFLOW_CONN_DELTA_S3", _connection(server))
    key = f"reports/{uuid.uuid4().hex[:10]}.html"
    boto3_client(server).put_object(Bucket=BUCKET, Key=key, Body=b"<html>report</html>")
    assert _read(f"s3://{BUCKET}/{key}", "delta_s3") == b"<html>report</html>"
