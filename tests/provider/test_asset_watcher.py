"""`DeltaVersionTrigger` as an asset watcher: one asset event per new table version, none lost or repeated.

The DB test runs the watcher the way the triggerer does: the example DAG `delta_table_commits` is
synced to the metadata DB (which registers its watcher's trigger row), and Airflow's own
`TriggerRunner` inflates the trigger from that row's serialized kwargs, injects the asset state store
and runs it; the events it queues are stored with `Trigger.submit_event`, as the triggerer's
supervisor does. Only the runner-to-supervisor socket is replaced, by the in-process comms `dag.test()`
uses (`InProcessSupervisorComms`), so the cursor lives in the real `asset_state_store` table.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, metadata_db

pytest.importorskip("airflow")

from airflow.triggers.base import BaseEventTrigger

from airflow_delta_provider.delta import DeltaLog
from airflow_delta_provider.testing import DeltaLogBuilder
from airflow_delta_provider.triggers.delta import DeltaVersionTrigger, cursor_key

WATCH_DAG = REPO / "dags" / "delta_table_commits.py"
ASSET_NAME = "delta_example_table_commits"
TIMEOUT = 60.0  # a safety net for a hung test, never a measured duration


def _table(tmp_path: Path) -> DeltaLogBuilder:
    b = DeltaLogBuilder(tmp_path / "events", schema={"id": "long"})
    b.create()
    b.append(["seed.parquet"], size=10)
    return b


def _commit(b: DeltaLogBuilder, n: int) -> list[int]:
    """Append `n` commits; their versions."""
    return [b.append([f"part-{b.version + 1}.parquet"], size=10) for _ in range(n)]


def _from_serialized(trigger: DeltaVersionTrigger) -> DeltaVersionTrigger:
    """A new instance from `serialize()`, as the triggerer inflates one."""
    classpath, kwargs = trigger.serialize()
    module, _, name = classpath.rpartition(".")
    cls = getattr(__import__(module, fromlist=[name]), name)
    return cls(**json.loads(json.dumps(kwargs)))


async def _until(condition: Any, what: str) -> None:
    """Wait until `condition()` holds (checked every 20 ms), failing after TIMEOUT."""
    try:
        async with asyncio.timeout(TIMEOUT):
            while not condition():
                await asyncio.sleep(0.02)
    except TimeoutError:
        pytest.fail(f"not within {TIMEOUT:.0f} s: {what}")


# -- without a metadata DB ------------------------------------------------------------------------------
def test_watcher_trigger_is_an_event_trigger_with_stable_kwargs() -> None:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(WATCH_DAG))
    assert bag.import_errors == {}
    (asset,) = bag.dags["delta_table_commits"].timetable.asset_condition.objects
    (watcher,) = asset.watchers
    trigger = watcher.trigger
    assert isinstance(trigger, BaseEventTrigger) and trigger.watching
    classpath, kwargs = trigger.serialize()
    # what the DAG processor hashes to match the trigger row on every parse: no run-specific values
    assert BaseEventTrigger.hash(classpath, kwargs) == BaseEventTrigger.hash(*_from_serialized(trigger).serialize())
    assert kwargs["target_version"] is kwargs["newer_than"] is kwargs["baseline"] is None
    assert asset.uri == DeltaLog(kwargs["table_uri"]).table_uri + "/_delta_log"


def test_watching_fires_each_new_version_once_in_order(tmp_path: Path) -> None:
    b = _table(tmp_path)
    trigger = _from_serialized(DeltaVersionTrigger(b.path, poll_interval=0.05))
    assert trigger.watching

    async def scenario() -> list[dict[str, Any]]:
        gen = trigger.run()
        pending = asyncio.create_task(gen.__anext__())
        await _until(lambda: trigger.cursor == 1, "the first poll takes the latest version as the baseline")
        versions = await asyncio.to_thread(_commit, b, 3)  # in a row: mostly between two polls; any split works
        events = [await asyncio.wait_for(pending, TIMEOUT)]
        events += [await asyncio.wait_for(gen.__anext__(), TIMEOUT) for _ in versions[1:]]
        versions = await asyncio.to_thread(_commit, b, 2)
        events += [await asyncio.wait_for(gen.__anext__(), TIMEOUT) for _ in versions]
        await gen.aclose()
        return [e.payload for e in events]

    payloads = asyncio.run(scenario())
    assert [p["version"] for p in payloads] == [2, 3, 4, 5, 6]
    assert all(p["status"] == "success" and p["operation"] == "WRITE" for p in payloads)
    assert [p["timestamp"] for p in payloads] == [b.timestamp(v) for v in range(2, 7)]
    assert {p["table_uri"] for p in payloads} == {DeltaLog(b.path).table_uri}


def test_watching_a_table_not_created_yet_fires_from_version_0(tmp_path: Path) -> None:
    b = DeltaLogBuilder(tmp_path / "later", schema={"id": "long"})
    trigger = DeltaVersionTrigger(b.path, poll_interval=0.05)

    async def scenario() -> list[int]:
        gen = trigger.run()
        pending = asyncio.create_task(gen.__anext__())
        await _until(lambda: trigger.cursor == -1, "no table yet: baseline -1")
        await asyncio.to_thread(b.create)
        await asyncio.to_thread(_commit, b, 1)
        events = [await asyncio.wait_for(pending, TIMEOUT), await asyncio.wait_for(gen.__anext__(), TIMEOUT)]
        await gen.aclose()
        return [e.payload["version"] for e in events]

    assert asyncio.run(scenario()) == [0, 1]


def test_deferral_modes_still_fire_once_and_end(tmp_path: Path) -> None:
    b = _table(tmp_path)
    trigger = DeltaVersionTrigger(b.path, newer_than=0, poll_interval=0.05)
    assert not trigger.watching

    async def scenario() -> list[dict[str, Any]]:
        return [e.payload async for e in trigger.run()]

    (payload,) = asyncio.run(scenario())
    assert payload["status"] == "success" and payload["version"] == 1


# -- the triggerer's way, against the metadata DB -------------------------------------------------------
@pytest.fixture
def watched_table(airflow_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[DeltaLogBuilder, int]:
    """A table, and the id of the trigger row its watcher got when `delta_table_commits` was synced."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import BundleDagBag, sync_bag_to_db
    from airflow.models.asset import AssetModel
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session
    from sqlalchemy import select, update

    b = _table(tmp_path)
    monkeypatch.setenv("DELTA_EXAMPLE_TABLE_URI", b.path)
    monkeypatch.delenv("DELTA_STORAGE_CONN_ID", raising=False)

    def sync() -> None:
        manager = DagBundlesManager()
        manager.sync_bundles_to_db()
        bundle = manager.get_bundle("dags-folder")
        bag = BundleDagBag(dag_folder=str(WATCH_DAG), bundle_path=bundle.path, bundle_name=bundle.name)
        assert bag.import_errors == {}
        sync_bag_to_db(bag, bundle.name, None)

    sync()
    # watchers run only for unpaused DAGs (as `airflow dags unpause` would); the next parse registers it
    with create_session() as session:
        session.execute(update(DagModel).where(DagModel.dag_id == "delta_table_commits").values(is_paused=False))
    sync()
    with create_session() as session:
        asset = session.scalars(
            select(AssetModel).where(
                AssetModel.name == ASSET_NAME, AssetModel.uri == DeltaLog(b.path).table_uri + "/_delta_log"
            )
        ).one()
        (trigger,) = asset.triggers
        assert trigger.kwargs["table_uri"] == b.path
        return b, trigger.id


@asynccontextmanager
async def triggerer(trigger_id: int) -> AsyncIterator[list[Any]]:
    """Airflow's `TriggerRunner` running the trigger row `trigger_id` as a watcher, until the block ends.

    Yields the list of the events it has queued so far (their payloads once the block ends). On exit the
    trigger is cancelled (a triggerer stop) and its events stored with `Trigger.submit_event`, as the
    supervisor does with the events the runner hands it.
    """
    from airflow.executors.workloads import RunTrigger
    from airflow.jobs.triggerer_job_runner import TriggerRunner
    from airflow.models.trigger import Trigger
    from airflow.utils.session import create_session

    with create_session() as session:
        row = session.get(Trigger, trigger_id)
        workload = RunTrigger(  # what TriggerRunnerSupervisor._create_workload builds for a watcher
            id=row.id,
            classpath=row.classpath,
            encrypted_kwargs=row.encrypted_kwargs,
            watched_assets={a.name: a.uri for a in row.assets},
        )
    runner = TriggerRunner()
    runner.to_create.append(workload)
    await runner.create_triggers()
    task = runner.triggers[trigger_id]["task"]
    seen: list[Any] = []

    async def collect() -> None:
        while True:
            while runner.events:
                seen.append(runner.events.popleft().event)
            await asyncio.sleep(0.01)

    collector = asyncio.create_task(collect())
    try:
        yield seen
    finally:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
        collector.cancel()
        with suppress(asyncio.CancelledError):
            await collector
        seen.extend(entry.event for entry in runner.events)
        for event in seen:
            Trigger.submit_event(trigger_id=trigger_id, event=event)
        seen[:] = [e.payload for e in seen]


def _stored_cursor(table_uri: str) -> int | None:
    with metadata_db() as db:
        row = db.execute(
            "SELECT s.value FROM asset_state_store s JOIN asset a ON a.id = s.asset_id WHERE a.name = ? AND s.key = ?",
            (ASSET_NAME, cursor_key(table_uri)),
        ).fetchone()
    return None if row is None else json.loads(row[0])


def _asset_event_versions() -> list[int]:
    with metadata_db() as db:
        rows = db.execute(
            "SELECT e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id WHERE a.name = ? ORDER BY e.id",
            (ASSET_NAME,),
        ).fetchall()
    extras = [json.loads(r[0]) for r in rows]
    assert all(x["from_trigger"] is True and x["payload"]["status"] == "success" for x in extras)
    return [x["payload"]["version"] for x in extras]


@pytest.mark.airflow
def test_watcher_fires_one_asset_event_per_version_across_triggerer_restarts(watched_table) -> None:
    import psutil
    import structlog
    from airflow.sdk.execution_time.supervisor import (
        InProcessSupervisorComms,
        InProcessTestSupervisor,
        set_supervisor_comms,
    )

    b, trigger_id = watched_table
    before = _asset_event_versions()  # earlier sessions' events for this asset name, if any

    async def scenario() -> list[list[dict[str, Any]]]:
        runs: list[list[dict[str, Any]]] = []
        # 1. first start: no cursor yet, the latest version (1) becomes the baseline; no event
        async with triggerer(trigger_id) as events:
            await _until(lambda: _stored_cursor(b.path) == 1, "the baseline is stored")
        runs.append(events)
        # 2. three commits while the triggerer is down (between its last poll and the next one)
        await asyncio.to_thread(_commit, b, 3)
        # 3. restart: resumes after the stored cursor; stopped again as soon as an event is out,
        #    wherever that cuts the batch of three
        async with triggerer(trigger_id) as events:
            await _until(lambda: len(events) >= 1, "the restarted watcher fires")
        runs.append(events)
        # 4. one more commit, then a restart that must deliver the rest of the batch and the new one
        await asyncio.to_thread(_commit, b, 1)
        async with triggerer(trigger_id) as events:
            await _until(lambda: _stored_cursor(b.path) == 5, "the watcher catches up")
            await _until(lambda: len(runs[1]) + len(events) >= 4, "every version's event is out")
        runs.append(events)
        return runs

    supervisor = InProcessTestSupervisor(  # as dag.test() builds one to run a trigger inline
        id=uuid.uuid4(),
        pid=os.getpid(),
        process=psutil.Process(),
        process_log=structlog.get_logger(logger_name="triggerer").bind(),
        client=InProcessTestSupervisor._api_client(),
    )
    supervisor.comms = InProcessSupervisorComms(supervisor=supervisor)
    with set_supervisor_comms(supervisor.comms):
        runs = asyncio.run(scenario())

    assert runs[0] == []
    fired = [p["version"] for run in runs for p in run]
    assert fired == [2, 3, 4, 5], runs  # each version once, in order, across two restarts
    assert _stored_cursor(b.path) == 5
    assert _asset_event_versions()[len(before) :] == [2, 3, 4, 5]
    assert all(p["table_uri"] == DeltaLog(b.path).table_uri for run in runs for p in run)
