"""`DeltaVersionSensor` and `DeltaVersionTrigger` when the table or its location misbehave: a table dropped
and recreated at a lower version (`allow_recreation`), transient storage errors in poke and reschedule modes
(`max_transient_errors`, with real 503s from a loopback S3 server behind a fault-injecting proxy), a missing
bucket and a malformed endpoint (typed errors, not "waiting for the table")."""

from __future__ import annotations

import asyncio
import json
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("airflow")
pytest.importorskip("moto")
pytest.importorskip("s3fs")

from airflow.providers.common.compat.sdk import TaskDeferred
from provider_support import TaskStateStore
from support.s3_server import (
    SLOW_DOWN,
    S3Proxy,
    S3Server,
    always,
    create_bucket,
    deltalake_storage_options,
    first,
    write_sample_table,
)

from airflow_delta_provider.delta import DeltaLog, InvalidArgumentError, StorageError
from airflow_delta_provider.delta.storage import RetryPolicy
from airflow_delta_provider.hooks.delta import BucketNotFoundError, DeltaTableHook
from airflow_delta_provider.sensors.delta import BASELINE_KEY, TRANSIENT_ERRORS_KEY, DeltaVersionSensor
from airflow_delta_provider.testing import DeltaLogBuilder
from airflow_delta_provider.triggers.delta import DeltaVersionTrigger, TableRecreatedError

pytestmark = pytest.mark.airflow
BUCKET = "sensor-errors"
#: Two attempts per storage call, millisecond backoff: each poll meets its 503s fast.
FAST = RetryPolicy(max_attempts=2, base_delay=0.001, max_delay=0.002)


# -- a dropped and recreated table --------------------------------------------------------------------
def _table_at_v5(path: Path) -> DeltaLogBuilder:
    b = DeltaLogBuilder(path, schema={"id": "long"})
    b.create()
    for i in range(5):
        b.append([f"old-{i}.parquet"], size=10)
    assert b.version == 5
    return b


def _recreate(path: Path, versions: int = 2) -> None:
    """Replace the table with a new one at the same path with versions 0..versions-1. The new table is built
    beside it and renamed in, so a poll sees the old table, no table, or the new one, never a half-deleted
    log (`rmtree` in place let a 20 ms watcher poll read version 4 of a log being deleted)."""
    staging = path.with_name(path.name + ".new")
    b = DeltaLogBuilder(staging, schema={"id": "long", "name": "string"})
    b.create()
    for i in range(versions - 1):
        b.append([f"new-{i}.parquet"], size=20)
    old = path.with_name(path.name + ".old")
    if path.exists():
        path.rename(old)
    staging.rename(path)
    shutil.rmtree(old, ignore_errors=True)
    DeltaLog.clear_cache()


def test_recreated_table_fires_with_allow_recreation_and_fails_clearly_without(tmp_path: Path) -> None:
    path = tmp_path / "t"
    _table_at_v5(path)
    sensor = DeltaVersionSensor(task_id="s", table_uri=str(path), newer_than=5, allow_recreation=True)
    strict = DeltaVersionSensor(task_id="s", table_uri=str(path), newer_than="5")
    assert sensor.poke({}) is False and strict.poke({}) is False  # version 5: nothing newer yet
    shutil.rmtree(path)
    DeltaLog.clear_cache()
    assert sensor.poke({}) is False and strict.poke({}) is False  # dropped: waiting for the table
    _recreate(path)  # versions 0..1

    done = sensor.poke({})
    assert done.is_done and done.xcom_value["version"] == 1 and done.xcom_value["recreated"] is True
    with pytest.raises(TableRecreatedError, match=r"latest version 1 is below newer_than=5.*allow_recreation=True"):
        strict.poke({})


def test_reschedule_baseline_sees_the_recreation(tmp_path: Path) -> None:
    path = tmp_path / "t"
    _table_at_v5(path)
    store = TaskStateStore()

    def poke(**kwargs: Any) -> Any:  # each reschedule poke is a fresh instance (a new worker process)
        return DeltaVersionSensor(task_id="s", table_uri=str(path), mode="reschedule", **kwargs).poke(
            {"task_state_store": store}
        )

    assert poke() is False and store.data[BASELINE_KEY] == 5
    _recreate(path)
    with pytest.raises(TableRecreatedError, match="below the baseline version 5"):
        poke()
    done = poke(allow_recreation=True)
    assert done.is_done and done.xcom_value["version"] == 1 and done.xcom_value["recreated"]


def test_deferred_trigger_and_watcher_on_a_recreated_table(tmp_path: Path) -> None:
    path = tmp_path / "t"
    _table_at_v5(path)
    sensor = DeltaVersionSensor(task_id="s", table_uri=str(path), deferrable=True, allow_recreation=True)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    trigger = deferred.value.trigger
    assert trigger.allow_recreation and trigger.baseline == 5
    assert trigger.serialize()[1]["allow_recreation"] is True
    watcher = DeltaVersionTrigger(str(path), poll_interval=0.02, allow_recreation=True)
    strict = DeltaVersionTrigger(str(path), baseline=5, poll_interval=0.02)

    async def scenario() -> tuple[dict, dict, list[int]]:
        watching = watcher.run()
        first_event = asyncio.create_task(watching.__anext__())
        await asyncio.sleep(0.2)  # the watcher has taken version 5 as its baseline
        assert not first_event.done()
        await asyncio.to_thread(_recreate, path)
        fired = list((await asyncio.wait_for(first_event, 30)).payload["versions"])
        while len(fired) < 2:  # one event per poll: both versions, or one each if a poll fell between them
            fired += (await asyncio.wait_for(watching.__anext__(), 30)).payload["versions"]
        await watching.aclose()
        deferred_event = (await asyncio.wait_for(trigger.run().__anext__(), 30)).payload
        strict_event = (await asyncio.wait_for(strict.run().__anext__(), 30)).payload
        return deferred_event, strict_event, fired

    deferred_event, strict_event, fired = asyncio.run(scenario())
    assert fired == [0, 1]  # every version of the new table
    assert deferred_event["status"] == "success" and deferred_event["version"] == 1 and deferred_event["recreated"]
    assert sensor.execute_complete({}, deferred_event)["recreated"] is True
    assert strict_event["status"] == "error" and strict_event["error_class"] == "TableRecreatedError"
    assert strict_event["transient"] is False


# -- object-store failures ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def server(moto_s3: S3Server) -> S3Server:
    """The session's moto server, with this module's bucket."""
    create_bucket(moto_s3, BUCKET)
    return moto_s3


@pytest.fixture
def proxy(server: S3Server):
    with S3Proxy(server.endpoint) as p:
        yield p


def _conn(server: S3Server, endpoint: str) -> str:
    extra = {"endpoint_url": endpoint, "region_name": server.region}
    return json.dumps({"conn_type": "aws", "login": server.access_key, "password": server.secret_key, "extra": extra})


@pytest.fixture
def table(server: S3Server, proxy: S3Proxy, monkeypatch: pytest.MonkeyPatch) -> str:
    """A table (versions 0..1) on the S3 server; connection `delta_s3` reaches it through the proxy, and
    the table's (cached) store retries each call twice with millisecond backoff."""
    monkeypatch.setenv("AIRFLOW_CONN_DELTA_S3", _conn(server, proxy.endpoint))
    uri = f"s3://{BUCKET}/t-{uuid.uuid4().hex[:10]}"
    write_sample_table(uri, deltalake_storage_options(server), commits=2)
    DeltaLog.for_table(uri, DeltaTableHook(uri, "delta_s3").storage_options()).store.retry = FAST
    proxy.reset()
    return uri


def test_poke_mode_gives_up_after_max_transient_errors(table: str, proxy: S3Proxy) -> None:
    proxy.inject(always(SLOW_DOWN))  # every request: 503 SlowDown
    sensor = DeltaVersionSensor(
        task_id="s",
        table_uri=table,
        target_version=1,
        storage_conn_id="delta_s3",
        max_transient_errors=2,
        poke_interval=0,
    )
    with pytest.raises(StorageError) as info:
        sensor.execute({})  # Airflow's own poke loop
    assert info.value.transient and "SlowDown" in str(info.value)
    assert len(proxy.snapshot()) == 3 * FAST.max_attempts  # 3 polls: 2 tolerated, the third gives up


def test_poke_mode_recovers_and_resets_the_count(table: str, proxy: S3Proxy) -> None:
    proxy.inject(first(2 * FAST.max_attempts))  # the first two polls fail, the third succeeds
    sensor = DeltaVersionSensor(
        task_id="s",
        table_uri=table,
        target_version=1,
        storage_conn_id="delta_s3",
        max_transient_errors=2,
        poke_interval=0,
    )
    assert sensor.execute({})["version"] == 1
    assert sensor._transient_errors == 0


def test_reschedule_mode_counts_across_pokes(table: str, proxy: S3Proxy) -> None:
    store = TaskStateStore()

    def poke() -> Any:  # a fresh sensor per poke, as reschedule mode runs each poke in a new process
        sensor = DeltaVersionSensor(
            task_id="s",
            table_uri=table,
            newer_than=0,
            storage_conn_id="delta_s3",
            mode="reschedule",
            max_transient_errors=2,
        )
        return sensor.poke({"task_state_store": store})

    proxy.inject(always(SLOW_DOWN))
    assert poke() is False and store.data[TRANSIENT_ERRORS_KEY] == 1
    assert poke() is False and store.data[TRANSIENT_ERRORS_KEY] == 2
    with pytest.raises(StorageError, match="SlowDown"):  # the third in a row: the task fails...
        poke()
    assert store.data[TRANSIENT_ERRORS_KEY] == 0  # ...and its retry starts counting afresh
    assert poke() is False and store.data[TRANSIENT_ERRORS_KEY] == 1
    proxy.inject(None)
    assert poke().xcom_value["version"] == 1  # a good poll...
    assert store.data[TRANSIENT_ERRORS_KEY] == 0  # ...resets the count


def test_missing_bucket_is_an_error_not_a_wait(server: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_DELTA_S3", _conn(server, server.endpoint))
    missing = f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/t"
    with pytest.raises(BucketNotFoundError, match=r"bucket 'no-such-bucket-\w+' does not exist") as info:
        DeltaVersionSensor(task_id="s", table_uri=missing, target_version=0, storage_conn_id="delta_s3").poke({})
    assert info.value.transient is False and info.value.table == missing
    payload = asyncio.run(
        DeltaVersionTrigger(missing, target_version=0, storage_conn_id="delta_s3", poll_interval=0.01).run().__anext__()
    ).payload
    assert payload["status"] == "error" and payload["error_class"] == "BucketNotFoundError" and not payload["transient"]
    # a missing table in a bucket that exists is still waited for
    absent = f"s3://{BUCKET}/not-yet-{uuid.uuid4().hex[:8]}"
    assert (
        DeltaVersionSensor(task_id="s", table_uri=absent, target_version=0, storage_conn_id="delta_s3").poke({})
        is False
    )


@pytest.mark.parametrize("endpoint", ["localhost:9000", "http://", "ftp://127.0.0.1:9000", "http://bad host:9000"])
def test_malformed_endpoint_is_an_error_before_any_request(
    server: S3Server, proxy: S3Proxy, monkeypatch: pytest.MonkeyPatch, endpoint: str
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_DELTA_S3", _conn(server, endpoint))
    uri = f"s3://{BUCKET}/t"
    with pytest.raises(InvalidArgumentError, match="malformed S3 endpoint") as info:
        DeltaVersionSensor(task_id="s", table_uri=uri, target_version=0, storage_conn_id="delta_s3").poke({})
    assert info.value.argument == "endpoint_url" and server.secret_key not in str(info.value)
    payload = asyncio.run(
        DeltaVersionTrigger(uri, target_version=0, storage_conn_id="delta_s3", poll_interval=0.01).run().__anext__()
    ).payload
    assert payload["status"] == "error" and payload["error_class"] == "InvalidArgumentError"


def test_malformed_endpoint_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "minio:9000")  # what botocore would read: no scheme
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    with pytest.raises(InvalidArgumentError, match=r"environment variable AWS_ENDPOINT_URL\): it needs an http"):
        DeltaVersionSensor(task_id="s", table_uri="s3://bucket/t", target_version=0).poke({})
