"""`DeltaVersionTrigger` on real tables: serialization, firing, waiting, errors."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("airflow")


from provider_support import small_table

from airflow_delta_provider import version_watch
from airflow_delta_provider.delta import DeltaLog, InvalidArgumentError, StorageError
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
        "include_maintenance": False,
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
    real = version_watch.probe_version
    calls = {"n": 0}

    def flaky(*args: Any, **kwargs: Any) -> int | None:
        calls["n"] += 1
        if calls["n"] <= 2:
            raise StorageError("SlowDown", table=b.uri, transient=True)
        return real(*args, **kwargs)

    monkeypatch.setattr(version_watch, "probe_version", flaky)
    payload = asyncio.run(DeltaVersionTrigger(b.path, target_version=2, poll_interval=0.01).run().__anext__()).payload
    assert payload["status"] == "success" and payload["version"] == 2 and calls["n"] == 3

    calls["n"] = -100  # now always transient: gives up after max_transient_errors in a row
    monkeypatch.setattr(version_watch, "probe_version", lambda *a, **k: (_ for _ in ()).throw(TimeoutError("t/o")))
    payload = asyncio.run(
        DeltaVersionTrigger(b.path, target_version=2, poll_interval=0.01, max_transient_errors=2).run().__anext__()
    ).payload
    assert payload["status"] == "error" and payload["transient"] is True and payload["error_class"] == "TimeoutError"


# -- the poll interval ------------------------------------------------------------------------------
def test_poll_interval_is_a_parameter_defaulting_to_a_few_seconds() -> None:
    assert DeltaVersionTrigger("/t").poll_interval == 5.0
    assert DeltaVersionTrigger("/t", poll_interval="0.5").poll_interval == 0.5
    for bad in (0, -1, "soon", None, float("inf")):
        with pytest.raises(InvalidArgumentError, match="poll_interval"):
            DeltaVersionTrigger("/t", poll_interval=bad)
    with pytest.raises(InvalidArgumentError, match="include_maintenance"):
        DeltaVersionTrigger("/t", include_maintenance="sometimes")


@pytest.mark.parametrize("watching", [True, False])
def test_the_trigger_sleeps_its_poll_interval_between_polls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, watching: bool
) -> None:
    """Every pause between two polls is `poll_interval` (watching and deferral alike); each poll lists the log."""
    b = small_table(tmp_path)
    trigger = DeltaVersionTrigger(b.path, poll_interval=7.25, **({} if watching else {"target_version": 99}))
    real_sleep = asyncio.sleep
    pauses: list[float] = []
    probes = {"n": 0}
    real_probe = version_watch.probe_version

    def probe(*args: Any, **kwargs: Any) -> int | None:
        probes["n"] += 1
        return real_probe(*args, **kwargs)

    async def sleep(delay: float, *args: Any) -> Any:
        pauses.append(delay)
        return await real_sleep(0)

    monkeypatch.setattr(version_watch, "probe_version", probe)

    async def scenario() -> None:
        monkeypatch.setattr(trigger_module.asyncio, "sleep", sleep)
        gen = trigger.run()
        task = asyncio.ensure_future(gen.__anext__())
        async with asyncio.timeout(60):  # a safety net for a hung test, not a measured duration
            while len(pauses) < 4:
                assert not task.done(), task.result()
                await real_sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert pauses[:4] == [7.25] * 4
    assert probes["n"] >= 4
