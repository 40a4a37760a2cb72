"""`DeltaVersionTrigger`: wait, in the triggerer, for a Delta table to reach a version, or watch every new one."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import AsyncIterator, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow.triggers.base import TriggerEvent

try:  # Airflow 3: triggers usable by AssetWatcher must be event triggers
    from airflow.triggers.base import BaseEventTrigger as _BaseTrigger
except ImportError:  # pragma: no cover - Airflow 2
    from airflow.triggers.base import BaseTrigger as _BaseTrigger
try:  # Airflow 3.3+: one shared poll per table, cursor written once the events are in the metadata DB
    from airflow.triggers.shared_stream import SharedStreamProducer as _Producer
except ImportError:  # pragma: no cover - Airflow < 3.3
    _Producer = None  # type: ignore[assignment,misc]

from ..commands.arguments import parse_flag, parse_number
from ..delta.errors import TableRecreatedError  # noqa: F401 (re-exported: what a recreated table raises)
from ..version_watch import chunks, commits_event, is_transient, probe_table, read_commits, storage_options, wait_event

log = logging.getLogger(__name__)
#: Whether the installed Airflow has the acknowledged shared stream (`airflow.triggers.shared_stream`, 3.3+).
SHARED_STREAM = _Producer is not None

#: Prefix of the asset state store key holding a watcher's cursor (the last version it fired).
CURSOR_KEY_PREFIX = "delta_last_version:"
# Raised (as ValueError) by Airflow's AssetStateStoreAccessors when one trigger watches several assets.
_MULTI_ASSET_ERROR = "concrete inlets and outlets"
#: The first element of a watcher's shared stream key.
_STREAM = "airflow_delta_provider.delta_log"


def cursor_key(table_uri: str) -> str:
    """The asset state store key of a watcher's cursor for `table_uri` (hashed past the store's 512 chars)."""
    key = CURSOR_KEY_PREFIX + table_uri
    if len(key) <= 512:
        return key
    return CURSOR_KEY_PREFIX + "sha256:" + hashlib.sha256(table_uri.encode()).hexdigest()


class DeltaVersionTrigger(_BaseTrigger):
    """Poll a table's latest version (log listing only): wait for a condition, or watch every new version.

    **Deferral** (`target_version`, `newer_than` or `baseline`, as `DeltaVersionSensor` defers): fires once,
    on the sensor's condition (`version_watch.wait_event`), or `{"status": "error", ...}` on a permanent
    error or after `max_transient_errors` transient ones in a row. **Watching** (none of them; what an
    `AssetWatcher` runs): never ends; one event per poll that finds new data versions, carrying all of them
    (`version_watch.commits_event`). Its cursor lives in the asset's state store (Airflow 3.3+), written only
    once the event is queued (or, on the shared stream, stored), so a restart neither skips nor repeats a
    recorded version. Serializes primitives only, the same for every run, as watchers need: credentials
    are looked up from `storage_conn_id` in the triggerer.
    """

    def __init__(
        self,
        table_uri: str,
        *,
        target_version: int | None = None,
        newer_than: int | None = None,
        baseline: int | None = None,
        storage_conn_id: str | None = None,
        poll_interval: float = 5.0,
        wait_for_table: bool = True,
        max_transient_errors: int = 5,
        allow_recreation: bool = False,
        include_maintenance: bool = False,
    ) -> None:
        super().__init__()
        self.table_uri = table_uri
        self.target_version = target_version
        self.newer_than = newer_than
        self.baseline = baseline
        self.storage_conn_id = storage_conn_id
        self.poll_interval = parse_number(poll_interval, "poll_interval", above_minimum=True, table=table_uri)
        self.wait_for_table = wait_for_table
        self.max_transient_errors = max_transient_errors
        self.allow_recreation = allow_recreation
        self.include_maintenance = parse_flag(include_maintenance, "include_maintenance", table=table_uri)
        #: Watching: the last version handled, once the first poll ran (runtime state, never serialized).
        self.cursor: int | None = None
        #: Deferral: versions up to this one are known to hold no data change (not read again).
        self._scanned: int | None = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        names = ("table_uri", "target_version", "newer_than", "baseline", "storage_conn_id", "poll_interval")
        names += ("wait_for_table", "max_transient_errors", "allow_recreation", "include_maintenance")
        return f"{type(self).__module__}.{type(self).__qualname__}", {n: getattr(self, n) for n in names}

    @property
    def watching(self) -> bool:
        """Whether this trigger watches every new version (no target, `newer_than` or baseline)."""
        return self.target_version is None and self.newer_than is None and self.baseline is None

    def _poll(self) -> dict[str, Any] | None:
        """One blocking poll of a wait: the event to fire, or None to keep waiting."""
        options = storage_options(self.table_uri, self.storage_conn_id)
        version = probe_table(self.table_uri, options, wait_for_table=self.wait_for_table)
        if version is None:
            return None
        event, self._scanned = wait_event(
            self.table_uri,
            options,
            version,
            target_version=self.target_version,
            newer_than=self.newer_than,
            baseline=self.baseline,
            scanned=self._scanned,
            allow_recreation=self.allow_recreation,
            include_maintenance=self.include_maintenance,
        )
        return None if event is None else {"status": "success", **event}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        if self.watching:
            producer = self.create_shared_stream_producer(self.serialize()[1])  # this watcher's own poll
            polls = (poll async for poll, _ in producer.open_stream())
            async for event in self._follow(polls, acked=False):
                yield event
            return
        failures = 0
        while True:
            try:
                event = await asyncio.to_thread(self._poll)
                failures = 0
            except Exception as exc:  # classified below: transient errors retry, others end the wait
                transient = is_transient(exc)
                failures += 1
                if not transient or failures > self.max_transient_errors:
                    error = {"error_class": type(exc).__name__, "message": str(exc), "transient": transient}
                    yield TriggerEvent({"status": "error", **error, "table_uri": self.table_uri})
                    return
                self.log.warning(
                    "transient error polling %s (%d/%d): %s", self.table_uri, failures, self.max_transient_errors, exc
                )
                event = None
            if event is not None:
                yield TriggerEvent(event)
                return
            await asyncio.sleep(self.poll_interval)

    # -- watching -------------------------------------------------------------------------------------
    async def _load_cursor(self, store: Any) -> tuple[Any | None, int | None]:
        """(store to keep using, stored cursor). A store serving several assets is dropped, with a warning."""
        try:
            saved = await asyncio.to_thread(store.get, cursor_key(self.table_uri))
        except ValueError as exc:
            if _MULTI_ASSET_ERROR not in str(exc):
                raise
            self.log.warning(
                "%s: this trigger watches several assets, so no cursor is persisted; a triggerer restart "
                "re-baselines at the latest version",
                self.table_uri,
            )
            return None, None
        return store, None if saved is None else int(saved)

    def _rebaseline(self, cursor: int | None, latest: int | None) -> int | None:
        """The new cursor when there is none yet or the table went back below it, else None."""
        if cursor is not None and (latest is None or latest >= cursor):
            return None
        baseline = -1 if latest is None else latest
        if cursor is not None:
            if self.allow_recreation:  # the new table's versions are all new: fire them from 0
                baseline = -1
            how = "firing its versions from 0" if self.allow_recreation else "re-baselined"
            self.log.warning("%s went back from version %s to %s (recreated): %s", self.table_uri, cursor, latest, how)
        self.log.info("watching %s from version %s", self.table_uri, baseline)
        return baseline

    def _batch(self, options: dict[str, Any], after: int, until: int) -> dict[str, Any] | None:
        """The event of versions (after, until], or None when all are maintenance commits (blocking)."""
        commits = read_commits(self.table_uri, options, after, until)
        return commits_event(self.table_uri, options, commits, include_maintenance=self.include_maintenance)

    @staticmethod
    async def _persist(store: Any, key: str, version: int) -> bool:
        """Write the cursor. A cancellation arriving meanwhile waits for the write; returns whether one did."""
        write = asyncio.ensure_future(asyncio.to_thread(store.set, key, version))
        try:
            await asyncio.shield(write)
        except asyncio.CancelledError:
            await write
            return True
        return False

    async def _follow(self, polls: AsyncIterator[TablePoll], *, acked: bool) -> AsyncIterator[TriggerEvent]:
        """One event per poll with new data versions after the cursor, forever.

        `acked` (the shared stream): each cursor write is handed to the poll (`TablePoll.record`), made by
        `DeltaLogProducer.advance` once the triggerer confirmed the poll's events are stored. Otherwise the
        triggerer asking for the next event is the receipt: only then is the cursor advanced and stored,
        so a stop before it fires the event again, and one arriving during the write waits for it.
        """
        store = getattr(self, "asset_state_store", None)  # injected by the triggerer, Airflow 3.3+
        loaded = store is None
        key = cursor_key(self.table_uri)

        async def move(poll: TablePoll, version: int) -> None:
            self.cursor = version
            if store is not None and acked:
                poll.record(store, key, version)
            elif store is not None and await self._persist(store, key, version):
                raise asyncio.CancelledError

        async for poll in polls:
            try:
                if not loaded:
                    store, self.cursor = await self._load_cursor(store)
                    loaded = True
                baseline = self._rebaseline(self.cursor, poll.latest)
                if baseline is not None:
                    await move(poll, baseline)
                latest = -1 if poll.latest is None else poll.latest  # no table yet: no versions after the cursor
                for after, until in chunks(self.cursor, latest):
                    payload = await asyncio.to_thread(self._batch, poll.options, after, until)
                    if payload is not None:
                        yield TriggerEvent(payload)  # resumed: the triggerer queued it
                    await move(poll, until)
            except Exception as exc:  # a watcher outlives errors: log, and the next poll retries
                log_ = self.log.warning if is_transient(exc) else self.log.error
                log_("watching %s (cursor %s): %s: %s", self.table_uri, self.cursor, type(exc).__name__, exc)

    # -- watching on Airflow 3.3+: one shared, acknowledged poll per table ------------------------------
    def shared_stream_key(self) -> Hashable | None:
        """Watchers of the same table share one poll (Airflow 3.3+); deferral waits poll on their own."""
        if not SHARED_STREAM or not self.watching:
            return None
        return (_STREAM, self.table_uri, self.storage_conn_id, float(self.poll_interval), bool(self.wait_for_table))

    @classmethod
    def create_shared_stream_producer(cls, kwargs: dict[str, Any]) -> Any:
        """Ack mode: the producer polls the table and stores the cursors once the events are persisted."""
        return DeltaLogProducer(
            kwargs["table_uri"],
            storage_conn_id=kwargs.get("storage_conn_id"),
            poll_interval=float(kwargs.get("poll_interval", 5.0)),
            wait_for_table=bool(kwargs.get("wait_for_table", True)),
        )

    def filter_shared_stream(self, shared_stream: AsyncIterator[Any]) -> AsyncIterator[TriggerEvent]:
        """This watcher's events from the shared poll (one `TablePoll` per raw event), cursor writes acked."""
        return self._follow(shared_stream, acked=True)


@dataclass(eq=False)
class TablePoll:
    """One poll of a table's log (`latest`: None while the table does not exist), broadcast to its watchers;
    `writes` are the cursor writes they recorded, made once the poll is acknowledged."""

    latest: int | None
    options: dict[str, Any]
    writes: list[tuple[Any, str, int]] = field(default_factory=list)

    def record(self, store: Any, key: str, version: int) -> None:
        """Write `version` as the cursor `key` in `store` once this poll is acknowledged."""
        self.writes.append((store, key, version))


_ProducerBase: type = _Producer if _Producer is not None else object


class DeltaLogProducer(_ProducerBase):  # type: ignore[misc,valid-type]
    """The poll of one table's log: shared by its watchers on Airflow 3.3+ (ack mode), a watcher's own before.

    `open_stream` yields one `TablePoll` every `poll_interval` seconds, changed or not, so a watcher joining
    late catches up within one poll; errors are logged and the next poll retries. `advance` writes the
    cursors recorded on acknowledged polls (the last per cursor); a poll a watcher failed on writes
    nothing, so the restarted watcher fires its events again.
    """

    def __init__(
        self, table_uri: str, *, storage_conn_id: str | None, poll_interval: float, wait_for_table: bool
    ) -> None:
        self.table_uri = table_uri
        self.storage_conn_id = storage_conn_id
        self.poll_interval = poll_interval
        self.wait_for_table = wait_for_table

    def _poll(self) -> TablePoll:
        options = storage_options(self.table_uri, self.storage_conn_id)
        return TablePoll(probe_table(self.table_uri, options, wait_for_table=self.wait_for_table), options)

    async def open_stream(self) -> AsyncIterator[tuple[TablePoll, TablePoll]]:
        while True:
            try:
                poll = await asyncio.to_thread(self._poll)
            except Exception as exc:
                level = logging.WARNING if is_transient(exc) else logging.ERROR
                log.log(level, "polling %s: %s: %s", self.table_uri, type(exc).__name__, exc)
            else:
                yield poll, poll
            await asyncio.sleep(self.poll_interval)

    async def advance(self, batch: Sequence[Any]) -> None:
        writes: dict[tuple[int, str], tuple[Any, str, int]] = {}
        for item in batch:
            if item.outcome.failed:
                continue
            for store, key, version in item.broker_payload.writes:
                writes[(id(store), key)] = (store, key, version)
        for store, key, version in writes.values():
            try:
                await asyncio.to_thread(store.set, key, version)
            except Exception as exc:  # the next acknowledged poll writes it again
                log.warning("%s: cannot store the cursor %s = %s: %s", self.table_uri, key, version, exc)
