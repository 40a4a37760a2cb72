"""`DeltaVersionTrigger` on real tables: serialization, firing, waiting, errors."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("airflow")


from provider_support import small_table

from airflow_delta_provider.delta import DeltaLog, StorageError
from airflow_delta_provider.testing import DeltaLogBuilder
from airflow_delta_provider.triggers import delta as trigger_module
from airflow_delta_provider.triggers.delta import DeltaVersionTrigger

pytestmark = pytest.mark.airflow


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
        "allow_recreation": False,
    }
    assert all(isinstance(v, str | int | float | bool | type(None)) for v in kwargs.values())
    module, _, name = classpath.rpartition(".")
    clone = getattr(__import__(module, fromlist=[name]), name)(**kwargs)
    assert clone.serialize() == (classpath, kwargs)


def test_trigger_fires_when_a_real_table_gains_a_commit(tmp_path: Path) -> None:
    b = small_table(tmp_path)
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
    b = small_table(tmp_path)
    Path(b.commit_path(3)).write_text('{"commitInfo": {"operation": "WRITE"}}\n{"add": {"path": ')  # torn
    trigger = DeltaVersionTrigger(b.path, newer_than=2, poll_interval=0.05)
    payload = asyncio.run(trigger.run().__anext__()).payload
    assert payload["status"] == "error"
    assert payload["error_class"] == "MalformedCommitError"
    assert payload["transient"] is False
    assert "version=3" in payload["message"]


def test_trigger_retries_transient_errors_then_fires(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A local directory cannot throttle: the first two probes raise what an object store's 503
    # SlowDown becomes (StorageError(transient=True)); tests/delta/test_s3_store.py injects real 503s.
    b = small_table(tmp_path)
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
