"""`DeltaVersionTrigger` as an asset watcher: one asset event per poll carrying every new version, none lost
or repeated; maintenance commits (a real OPTIMIZE and VACUUM) fire nothing and still move the cursor.

Unit tests drive the watcher poll by poll (`PollDriver`), on its own loop (`run()`) and on Airflow 3.3's
shared stream (`filter_shared_stream` fed by `DeltaLogProducer`, whose `advance` stores the cursor). The
DB test runs the watcher the way the triggerer does: the example DAG `delta_table_commits` is synced
to the metadata DB (which registers its watcher's trigger row), and Airflow's own
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

from airflow_delta_provider import version_watch
from airflow_delta_provider.delta import DeltaLog
from airflow_delta_provider.testing import DeltaLogBuilder
from airflow_delta_provider.triggers.delta import SHARED_STREAM, DeltaVersionTrigger, cursor_key

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
    assert kwargs["poll_interval"] == float(os.environ.get("DELTA_WATCH_POLL_INTERVAL") or 5.0)
    assert kwargs["include_maintenance"] is False
    assert (trigger.shared_stream_key() is not None) is SHARED_STREAM  # one shared poll per table on 3.3
    assert asset.uri == DeltaLog(kwargs["table_uri"]).table_uri + "/_delta_log"


#: The poll interval of the watchers driven poll by poll (`PollDriver`): a value no other sleep uses.
PAUSE = 3600.0
REAL_SLEEP = asyncio.sleep


class PollDriver:
    """Runs a watcher poll by poll: its pauses of `PAUSE` seconds (its `poll_interval`) wait for `poll()`.

    Installed as `asyncio.sleep` (other delays sleep for real), so which commits a poll sees is decided
    by the test, not by timing.
    """

    def __init__(self) -> None:
        self.pauses = 0
        self._release: asyncio.Future[None] | None = None

    async def sleep(self, delay: float, result: Any = None) -> Any:
        if delay != PAUSE:
            return await REAL_SLEEP(delay, result)
        self.pauses += 1
        self._release = asyncio.get_running_loop().create_future()
        await self._release
        return result

    async def paused(self) -> None:
        await _until(lambda: self._release is not None and not self._release.done(), "the watcher pauses")

    async def poll(self) -> None:
        """Let the paused watcher run exactly one more poll; return once it pauses again."""
        await self.paused()
        n = self.pauses
        assert self._release is not None
        self._release.set_result(None)
        await _until(lambda: self.pauses > n, "the poll ends")


@pytest.fixture
def driver(monkeypatch: pytest.MonkeyPatch) -> PollDriver:
    d = PollDriver()
    monkeypatch.setattr(asyncio, "sleep", d.sleep)
    return d


class CursorStore:
    """Stand-in for the asset state store accessor the triggerer injects (`get`/`set`)."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}
        self.writes: list[int] = []

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)

    def set(self, key: str, value: Any) -> None:
        self.data[key] = value
        self.writes.append(value)


async def _collect(gen: AsyncIterator[Any], into: list[dict[str, Any]]) -> None:
    async for event in gen:
        into.append(event.payload)


def _partitioned(tmp_path: Path) -> DeltaLogBuilder:
    b = DeltaLogBuilder(tmp_path / "events", schema={"id": "long", "date": "string"}, partition_columns=["date"])
    b.create()
    b.append(["seed.parquet"], size=10, partition={"date": "2024-01-01"})
    return b


def test_one_event_per_poll_carries_every_new_version(tmp_path: Path, driver: PollDriver) -> None:
    b = _partitioned(tmp_path)
    trigger = _from_serialized(DeltaVersionTrigger(b.path, poll_interval=PAUSE))
    assert trigger.watching

    async def scenario() -> list[list[dict[str, Any]]]:
        events: list[dict[str, Any]] = []
        collector = asyncio.create_task(_collect(trigger.run(), events))
        await driver.paused()
        assert trigger.cursor == 1 and events == []  # the first poll takes the latest version as the baseline
        seen = []
        # two commits within one poll: one event listing both
        await asyncio.to_thread(b.append, ["a.parquet"], size=10, partition={"date": "2024-01-02"})
        await asyncio.to_thread(b.append, ["b.parquet", "c.parquet"], size=10, partition={"date": "2024-01-03"})
        await driver.poll()
        seen.append(list(events))
        await asyncio.to_thread(b.remove, ["a.parquet"])  # a data-changing remove, one commit
        await driver.poll()
        await driver.poll()  # nothing new: no event
        seen.append(list(events))
        collector.cancel()
        return seen

    first, after = asyncio.run(scenario())
    (event,) = first
    assert event["status"] == "success"
    assert (event["first_version"], event["last_version"], event["version"]) == (2, 3, 3)
    assert event["versions"] == [2, 3] and event["operations"] == ["WRITE", "WRITE"]
    assert event["partitions"] == [{"date": "2024-01-02"}, {"date": "2024-01-03"}]
    assert event["skipped_versions"] == []
    assert event["timestamp"] == b.timestamp(3) and event["operation"] == "WRITE"
    assert event["table_uri"] == DeltaLog(b.path).table_uri
    assert [e["versions"] for e in after] == [[2, 3], [4]]
    assert after[1]["partitions"] == [{"date": "2024-01-02"}] and after[1]["operation"] == "DELETE"


def test_a_backlog_longer_than_one_event_fires_several_in_order(
    tmp_path: Path, driver: PollDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_delta_provider import triggers

    monkeypatch.setattr(triggers.delta, "chunks", lambda a, u: version_watch.chunks(a, u, size=2))
    b = _partitioned(tmp_path)
    trigger = DeltaVersionTrigger(b.path, poll_interval=PAUSE)

    async def scenario() -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        collector = asyncio.create_task(_collect(trigger.run(), events))
        await driver.paused()
        await asyncio.to_thread(_commit, b, 5)
        await driver.poll()
        collector.cancel()
        return events

    assert [e["versions"] for e in asyncio.run(scenario())] == [[2, 3], [4, 5], [6]]


# -- maintenance commits: a real OPTIMIZE and a real VACUUM on a delta-rs table ------------------------------
def _rs_table(root: Path) -> str:
    """delta-rs, partitioned by `p`: versions 0..2, two small files per version."""
    import pyarrow as pa
    from deltalake import write_deltalake

    for i in range(3):
        write_deltalake(str(root), pa.table({"id": [i, 10 + i], "p": ["a", "b"]}), partition_by=["p"], mode="append")
    return str(root)


def _append(root: str, i: int, p: str = "a") -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    write_deltalake(root, pa.table({"id": [100 + i], "p": [p]}), partition_by=["p"], mode="append")


def _optimize(root: str) -> int:
    from airflow_delta_provider.delta.maintenance.optimize import optimize

    done = optimize(root)
    assert done.version is not None
    return done.version


def _vacuum(root: str) -> list[int]:
    from airflow_delta_provider.delta.maintenance.vacuum import vacuum

    done = vacuum(root, dry_run=False, retention_hours=0, enforce_retention_duration=False)
    assert done.deleted > 0 and len(done.audit_versions) == 2  # VACUUM START and END (commitInfo only)
    return list(done.audit_versions)


def _maintenance_scenario(root: str, trigger: DeltaVersionTrigger, driver: PollDriver, stream: Any) -> Any:
    """OPTIMIZE, then VACUUM, each alone in a poll; then OPTIMIZE and an append in one poll; then an append.
    Returns (events after each of the four polls, cursor after each, versions committed)."""

    async def scenario() -> tuple[list[list[dict[str, Any]]], list[int | None], dict[str, Any]]:
        events: list[dict[str, Any]] = []
        collector = asyncio.create_task(_collect(stream, events))
        await driver.paused()
        assert trigger.cursor == 2
        done: dict[str, Any] = {}
        seen, cursors = [], []
        done["optimize"] = await asyncio.to_thread(_optimize, root)
        await driver.poll()
        seen.append(list(events)), cursors.append(trigger.cursor)
        done["vacuum"] = await asyncio.to_thread(_vacuum, root)
        await driver.poll()
        seen.append(list(events)), cursors.append(trigger.cursor)
        await asyncio.to_thread(_append, root, 1)
        await asyncio.to_thread(_append, root, 2)
        done["optimize_2"] = await asyncio.to_thread(_optimize, root)
        await driver.poll()
        seen.append(list(events)), cursors.append(trigger.cursor)
        await asyncio.to_thread(_append, root, 3, "b")
        await driver.poll()
        seen.append(list(events)), cursors.append(trigger.cursor)
        collector.cancel()
        return seen, cursors, done

    return asyncio.run(scenario())


@pytest.mark.parametrize("include_maintenance", [False, True])
def test_maintenance_commits_fire_nothing_but_move_the_cursor(
    tmp_path: Path, driver: PollDriver, include_maintenance: bool
) -> None:
    root = _rs_table(tmp_path / "rs")
    trigger = DeltaVersionTrigger(root, poll_interval=PAUSE, include_maintenance=include_maintenance)
    store = CursorStore()
    trigger.asset_state_store = store
    seen, cursors, done = _maintenance_scenario(root, trigger, driver, trigger.run())
    assert done == {"optimize": 3, "vacuum": [4, 5], "optimize_2": 8}
    assert cursors == [3, 5, 8, 9]  # maintenance versions are passed, never delivered later
    assert store.data[cursor_key(root)] == 9
    if not include_maintenance:
        assert seen[0] == [] and seen[1] == []  # OPTIMIZE alone, VACUUM START/END alone: no event
        (mixed,) = seen[2]
        assert mixed["versions"] == [6, 7] and mixed["skipped_versions"] == [8]
        assert mixed["version"] == 7 and mixed["operation"] == "WRITE"
        assert [e["versions"] for e in seen[3]] == [[6, 7], [9]]
        assert seen[3][1]["partitions"] == [{"p": "b"}] and seen[3][1]["skipped_versions"] == []
        assert 3 in store.writes and 5 in store.writes  # stored although nothing fired
    else:
        assert [e["versions"] for e in seen[3]] == [[3], [4, 5], [6, 7, 8], [9]]
        assert seen[0][0]["operations"] == ["OPTIMIZE"] and seen[0][0]["partitions"] == [{"p": "a"}, {"p": "b"}]
        assert seen[1][1]["operations"] == ["VACUUM START", "VACUUM END"] and seen[1][1]["partitions"] == []
        assert all(e["skipped_versions"] == [] for e in seen[3])


@pytest.mark.skipif(not SHARED_STREAM, reason="Airflow < 3.3: no shared stream")
@pytest.mark.parametrize("include_maintenance", [False, True])
def test_shared_stream_path_skips_maintenance_and_records_the_cursor_for_the_ack(
    tmp_path: Path, driver: PollDriver, include_maintenance: bool
) -> None:
    """Airflow 3.3's path: the producer's polls fan out to `filter_shared_stream`; the same events as `run()`,
    and the cursor is written by `advance`, never before."""
    from airflow.triggers.shared_stream import AdvanceItem, AdvanceOutcome

    root = _rs_table(tmp_path / "rs")
    trigger = _from_serialized(DeltaVersionTrigger(root, poll_interval=PAUSE, include_maintenance=include_maintenance))
    store = CursorStore()
    trigger.asset_state_store = store
    assert trigger.shared_stream_key() is not None
    assert DeltaVersionTrigger(root, newer_than=1).shared_stream_key() is None  # deferral polls on its own
    producer = DeltaVersionTrigger.create_shared_stream_producer(trigger.serialize()[1])
    polls: list[Any] = []

    async def raw() -> AsyncIterator[Any]:
        async for poll, payload in producer.open_stream():
            assert payload is poll
            polls.append(poll)
            yield poll

    seen, cursors, _ = _maintenance_scenario(root, trigger, driver, trigger.filter_shared_stream(raw()))
    assert cursors == [3, 5, 8, 9]
    if include_maintenance:
        assert [e["versions"] for e in seen[3]] == [[3], [4, 5], [6, 7, 8], [9]]
    else:
        assert [e["versions"] for e in seen[3]] == [[6, 7], [9]]
        assert seen[2][0]["skipped_versions"] == [8]
    assert store.writes == []  # nothing stored until the triggerer acknowledges
    key = cursor_key(root)
    assert [p.writes for p in polls[:2]] == [[(store, key, 2)], [(store, key, 3)]]

    async def ack(items: list[Any]) -> None:
        await producer.advance(items)

    failed = AdvanceOutcome(acked=0, failed=1)
    asyncio.run(ack([AdvanceItem(polls[1], failed)]))  # an event not confirmed stored: no cursor write
    assert store.writes == []
    clean = AdvanceOutcome(acked=1, failed=0)
    asyncio.run(ack([AdvanceItem(p, clean) for p in polls[:3]]))
    assert store.writes == [5] and store.data[key] == 5  # the last cursor of the batch, once
    asyncio.run(ack([AdvanceItem(p, clean) for p in polls[3:]]))
    assert store.data[key] == 9


def test_watching_a_table_not_created_yet_fires_from_version_0(tmp_path: Path, driver: PollDriver) -> None:
    b = DeltaLogBuilder(tmp_path / "later", schema={"id": "long"})
    trigger = DeltaVersionTrigger(b.path, poll_interval=PAUSE)

    async def scenario() -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        collector = asyncio.create_task(_collect(trigger.run(), events))
        await driver.paused()
        assert trigger.cursor == -1  # no table yet: baseline -1
        await asyncio.to_thread(b.create)  # version 0: metaData and protocol, no file: not maintenance
        await asyncio.to_thread(_commit, b, 1)
        await driver.poll()
        collector.cancel()
        return events

    (event,) = asyncio.run(scenario())
    assert event["versions"] == [0, 1] and event["operations"] == ["CREATE TABLE", "WRITE"]
    assert event["partitions"] == []  # unpartitioned


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
    monkeypatch.setenv("DELTA_WATCH_POLL_INTERVAL", "0.2")
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
async def triggerer(trigger_id: int, *, persist: bool = True) -> AsyncIterator[list[Any]]:
    """Airflow's `TriggerRunner` running the trigger row `trigger_id` as a watcher, until the block ends.

    Yields the list of the payloads it has queued so far. With `persist`, each event is stored with
    `Trigger.submit_event` as it comes and its storage confirmed to the runner, as the triggerer's
    supervisor does (on Airflow 3.3 that confirmation is what lets a shared stream advance). Without, the
    events are dropped unstored and unconfirmed: a triggerer that died before its supervisor stored them.
    On exit the trigger is cancelled (a triggerer stop).
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

    def store() -> None:
        while runner.events:
            entry = runner.events.popleft()
            seen.append(entry.event.payload)
            if not persist:
                continue
            Trigger.submit_event(trigger_id=trigger_id, event=entry.event)
            seq = getattr(entry, "persist_seq", None)
            if seq is not None:  # Airflow 3.3: the supervisor's `events_persisted` reply
                runner._shared_streams.confirm_persisted([seq])

    async def collect() -> None:
        while True:
            store()
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
        store()


def _stored_cursor(table_uri: str) -> int | None:
    with metadata_db() as db:
        row = db.execute(
            "SELECT s.value FROM asset_state_store s JOIN asset a ON a.id = s.asset_id WHERE a.name = ? AND s.key = ?",
            (ASSET_NAME, cursor_key(table_uri)),
        ).fetchone()
    return None if row is None else json.loads(row[0])


def _asset_event_versions() -> list[list[int]]:
    with metadata_db() as db:
        rows = db.execute(
            "SELECT e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id WHERE a.name = ? ORDER BY e.id",
            (ASSET_NAME,),
        ).fetchall()
    extras = [json.loads(r[0]) for r in rows]
    assert all(x["from_trigger"] is True and x["payload"]["status"] == "success" for x in extras)
    return [x["payload"]["versions"] for x in extras]


@pytest.mark.airflow
@pytest.mark.skipif(not SHARED_STREAM, reason="the asset state store and shared streams are Airflow 3.3+")
def test_watcher_fires_one_asset_event_per_poll_and_stores_its_cursor_once_the_event_is_stored(
    watched_table,
) -> None:
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
        # 2. three commits while the triggerer is down: the next poll finds them together
        await asyncio.to_thread(_commit, b, 3)
        # 3. restart: one event carries 2, 3 and 4; the triggerer dies before its supervisor stores it,
        #    so the cursor stays where it was
        async with triggerer(trigger_id, persist=False) as events:
            await _until(lambda: len(events) >= 1, "the restarted watcher fires")
            await asyncio.sleep(1.0)  # a few 0.2 s polls: the unconfirmed event holds the cursor back
            assert _stored_cursor(b.path) == 1
        runs.append(events)
        # 4. restart: the lost event fires again and is stored; then one more commit
        async with triggerer(trigger_id) as events:
            await _until(lambda: _stored_cursor(b.path) == 4, "the cursor follows the stored event")
            await asyncio.to_thread(_commit, b, 1)
            await _until(lambda: _stored_cursor(b.path) == 5, "the watcher catches up")
        runs.append(events)
        # 5. a restart with nothing new: no event
        async with triggerer(trigger_id) as events:
            await asyncio.sleep(1.0)
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

    assert runs[0] == [] and runs[3] == []
    assert [p["versions"] for p in runs[1]] == [[2, 3, 4]]  # three commits, one poll, one event
    assert [p["versions"] for p in runs[2]] == [[2, 3, 4], [5]]  # the lost event again, never skipped
    assert all(p["table_uri"] == DeltaLog(b.path).table_uri for run in runs for p in run)
    assert _stored_cursor(b.path) == 5
    assert _asset_event_versions()[len(before) :] == [[2, 3, 4], [5]]  # each version stored once
