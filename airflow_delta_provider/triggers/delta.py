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
from ..delta.errors import (
    DeltaError,
    InvalidArgumentError,
    TableNotFoundError,
    TableRecreatedError,
)
from ..version_watch import (
    chunks,
    commits_event,
    condition_met,
    is_transient,
    last_data_version,
    probe_version,
    read_commits,
    version_event,
)

log = logging.getLogger(__name__)
#: Whether the installed Airflow has the acknowledged shared stream (`airflow.triggers.shared_stream`, 3.3+).
SHARED_STREAM = _Producer is not None

#: Prefix of the asset state store key holding a watcher's cursor (the last version it fired).
CURSOR_KEY_PREFIX = "delta_last_version:"
# Raised (as ValueError) by Airflow's AssetStateStoreAccessors when one trigger watches several assets.
_MULTI_ASSET_ERROR = "concrete inlets and outlets"


def recreated(version: int, target_version: int | None, newer_than: int | None, baseline: int | None) -> bool:
    """Whether `version` went below the version waited past (`newer_than`, else the baseline): the table
    was recreated. A `target_version` wait cannot tell (a lower version is simply not there yet)."""
    if target_version is not None:
        return False
    reference = newer_than if newer_than is not None else baseline
    return reference is not None and version < reference


def recreation_error(table_uri: str, version: int, newer_than: int | None, baseline: int | None) -> TableRecreatedError:
    what = f"newer_than={newer_than}" if newer_than is not None else f"the baseline version {baseline}"
    return TableRecreatedError(
        f"the latest version {version} is below {what}: the table was deleted and recreated (or the version "
        "waited past belongs to another table); allow_recreation=True fires on the new table's versions",
        table=table_uri,
        version=version,
    )


def probe_table(table_uri: str, storage_options: dict[str, Any], *, wait_for_table: bool = True) -> int | None:
    """`probe_version`, telling a misconfigured location from a table not created yet: a malformed S3
    endpoint raises `InvalidArgumentError` before any request, and a missing table in a missing bucket
    raises `BucketNotFoundError` (one HEAD of the bucket, only while the table is missing)."""
    from ..hooks.delta import check_bucket, check_endpoint

    check_endpoint(table_uri, storage_options)
    try:
        version = probe_version(table_uri, storage_options, wait_for_table=wait_for_table)
    except TableNotFoundError:
        check_bucket(table_uri, storage_options)
        raise
    except ValueError as exc:  # botocore's "Invalid endpoint: ..." for an endpoint check_endpoint let through
        if isinstance(exc, DeltaError) or "endpoint" not in str(exc).lower():
            raise
        raise InvalidArgumentError(f"storage endpoint: {exc}", argument="endpoint_url", table=table_uri) from None
    if version is None:
        check_bucket(table_uri, storage_options)
    return version


def cursor_key(table_uri: str) -> str:
    """The asset state store key of a watcher's cursor for `table_uri` (hashed past the store's 512 chars)."""
    key = CURSOR_KEY_PREFIX + table_uri
    if len(key) <= 512:
        return key
    return CURSOR_KEY_PREFIX + "sha256:" + hashlib.sha256(table_uri.encode()).hexdigest()


class DeltaVersionTrigger(_BaseTrigger):
    """Poll a table's latest version (log listing only): wait for a condition, or watch every new version.

    **Deferral** (`target_version`, `newer_than` or `baseline` given; what `DeltaVersionSensor` defers
    with): fires once, `{"status": "success", "version", "table_uri", "timestamp", "operation"}`, or
    `{"status": "error", "error_class", "message", "transient"}` on a permanent error, or after
    `max_transient_errors` transient errors in a row (throttling, timeouts), and ends. With `newer_than`
    or `baseline`, only a version that changes data counts (see below), and the event names the newest
    such version; `target_version` waits for the version number alone.

    **Watching** (none of the three given; what an `AssetWatcher` runs): never ends, and fires **one
    event per poll** that finds new versions, carrying all of them: `version` (the last), `first_version`,
    `last_version`, `versions`, `operations`, `partitions` (the partition values the commits' file actions
    touched, when at most `MAX_EVENT_PARTITIONS`), `skipped_versions`, `timestamp` and `operation` of the
    last (`version_watch.commits_event`). So the run Airflow starts for the event sees every version the
    poll found, and none waits for the next commit. A backlog of more than `MAX_EVENT_VERSIONS` fires
    several events in a row.

    **Maintenance commits are not data** (`include_maintenance=False`, the default): commits that change
    no data (OPTIMIZE, statistics backfills: every file action `dataChange=false`; VACUUM START/END and
    other commitInfo-only commits) fire nothing; they still advance the cursor, so they are never
    delivered later, and a later data commit fires as usual. `include_maintenance=True` fires on them too.

    **Cursor** (the last version handled): read at start from the watched asset's state store
    (`asset_state_store`, Airflow 3.3+) and written back there, so a triggerer restart resumes after it:
    nothing skipped, nothing repeated once recorded. Without a stored cursor the first poll takes the
    latest version as the baseline (-1 for a table not created yet: its version 0 fires). On Airflow
    3.3+ the triggerer runs watchers of the same table (same `table_uri`, `storage_conn_id`,
    `poll_interval`, `wait_for_table`) on one **shared poll** in ack mode (`shared_stream_key`,
    `create_shared_stream_producer`, `airflow.triggers.shared_stream`): the cursor is written only once the
    triggerer confirmed the events up to it are stored in the metadata DB (`SharedStreamProducer.advance`),
    so a triggerer stop before that fires them again rather than losing them. Run directly (`run()`, and
    the path Airflow < 3.3 takes), the cursor is written when the triggerer resumes the trigger after
    queuing an event. Without a store (Airflow < 3.3, or one trigger shared by several assets) the cursor
    lives in memory and a restart re-baselines, so commits made while the triggerer was down fire no
    event. Errors never become events: they are logged and the next poll retries. A table whose latest
    version falls below the cursor (replaced by a new table) is re-baselined without events, or, with
    `allow_recreation`, fires each version of the new table from 0.

    **Recreation**: a latest version below `newer_than` (or `baseline`) means the table was deleted and
    created again. With `allow_recreation=True` that fires at once, the event carrying `"recreated":
    true`; without, it is a permanent error (`TableRecreatedError`), never a silent wait for a version
    the new table may take months to reach. A missing bucket (`BucketNotFoundError`) and a malformed
    endpoint (`InvalidArgumentError`) are permanent errors too, not "the table does not exist yet".

    `poll_interval` (seconds, default 5): a poll costs one `_delta_log` listing (locally a few HEADs).
    Serializes primitives only, the same kwargs for every run (no run-specific values, as watchers
    need). Storage credentials are looked up from `storage_conn_id` in the triggerer, never serialized.
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
        #: Watching: the last version handled (or the baseline) once the first poll ran. Runtime state,
        #: never serialized: a restart reads the persisted cursor instead.
        self.cursor: int | None = None
        #: Deferral: versions up to this one are known to hold no data change (not read again).
        self._scanned: int | None = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "table_uri": self.table_uri,
                "target_version": self.target_version,
                "newer_than": self.newer_than,
                "baseline": self.baseline,
                "storage_conn_id": self.storage_conn_id,
                "poll_interval": self.poll_interval,
                "wait_for_table": self.wait_for_table,
                "max_transient_errors": self.max_transient_errors,
                "allow_recreation": self.allow_recreation,
                "include_maintenance": self.include_maintenance,
            },
        )

    @property
    def watching(self) -> bool:
        """Whether this trigger watches every new version (no target, `newer_than` or baseline)."""
        return self.target_version is None and self.newer_than is None and self.baseline is None

    def _storage_options(self) -> dict[str, Any]:
        return storage_options(self.table_uri, self.storage_conn_id)

    def _poll(self) -> dict[str, Any] | None:
        """One blocking poll: the event to fire, or None to keep waiting."""
        options = self._storage_options()
        version = probe_table(self.table_uri, options, wait_for_table=self.wait_for_table)
        if version is None:
            return None
        if recreated(version, self.target_version, self.newer_than, self.baseline):
            if not self.allow_recreation:
                raise recreation_error(self.table_uri, version, self.newer_than, self.baseline)
            return {"status": "success", **version_event(self.table_uri, options, version), "recreated": True}
        if not condition_met(version, self.target_version, self.newer_than, self.baseline):
            return None
        if self.target_version is None and not self.include_maintenance:
            reference = self.newer_than if self.newer_than is not None else self.baseline
            assert reference is not None  # not watching, no target
            after = reference if self._scanned is None or not reference <= self._scanned < version else self._scanned
            found = last_data_version(self.table_uri, options, after, version)
            if found is None:  # only maintenance commits since: keep waiting, without reading them again
                self._scanned = version
                return None
            version = found
        return {"status": "success", **version_event(self.table_uri, options, version)}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        if self.watching:
            async for event in self._watch():
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
                    yield TriggerEvent(
                        {
                            "status": "error",
                            "error_class": type(exc).__name__,
                            "message": str(exc),
                            "transient": transient,
                            "table_uri": self.table_uri,
                        }
                    )
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
    def _cursor_store(self) -> Any | None:
        """The watched asset's state store accessor (injected by the triggerer, Airflow 3.3+), if any."""
        return getattr(self, "asset_state_store", None)

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
            self.log.warning(
                "%s went back from version %s to %s (recreated): %s",
                self.table_uri,
                cursor,
                latest,
                "firing its versions from 0" if self.allow_recreation else "re-baselined",
            )
        self.log.info("watching %s from version %s", self.table_uri, baseline)
        return baseline

    def _batch(self, options: dict[str, Any], after: int, until: int) -> dict[str, Any] | None:
        """The event of versions (after, until], or None when all are maintenance commits (blocking)."""
        commits = read_commits(self.table_uri, options, after, until)
        return commits_event(self.table_uri, options, commits, include_maintenance=self.include_maintenance)

    async def _batches(self, options: dict[str, Any], latest: int) -> AsyncIterator[tuple[dict[str, Any] | None, int]]:
        """(event or None, version it covers up to) for the versions after the cursor, oldest first."""
        assert self.cursor is not None
        for after, until in chunks(self.cursor, latest):
            yield await asyncio.to_thread(self._batch, options, after, until), until

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

    async def _watch(self) -> AsyncIterator[TriggerEvent]:
        """Poll on its own (Airflow < 3.3, or run directly): one event per poll with new data versions,
        forever, recording the cursor once the triggerer took the event.

        The triggerer queues an event, then asks for the next one: that resumption is the receipt, and only
        then is the cursor advanced and stored. A stop (cancellation) before it leaves the event unrecorded,
        so the restarted trigger fires it again; one arriving while the cursor is written waits for the
        write. Either way each version is queued once. A poll that finds only maintenance commits fires
        nothing and stores the cursor past them at once.
        """
        store = self._cursor_store()
        loaded = store is None
        key = cursor_key(self.table_uri)
        while True:
            try:
                if not loaded:
                    store, self.cursor = await self._load_cursor(store)
                    loaded = True
                options = await asyncio.to_thread(self._storage_options)
                latest = await asyncio.to_thread(
                    probe_table, self.table_uri, options, wait_for_table=self.wait_for_table
                )
                baseline = self._rebaseline(self.cursor, latest)
                if baseline is not None:
                    if store is not None and await self._persist(store, key, baseline):
                        raise asyncio.CancelledError
                    self.cursor = baseline
                if latest is not None:
                    async for payload, until in self._batches(options, latest):
                        if payload is not None:
                            yield TriggerEvent(payload)
                            # Resumed: the triggerer queued the event (it asks for the next one right after).
                        self.cursor = until
                        if store is not None and await self._persist(store, key, until):
                            raise asyncio.CancelledError
            except Exception as exc:  # a watcher outlives errors: log, and the next poll retries
                log_ = self.log.warning if is_transient(exc) else self.log.error
                log_("watching %s (cursor %s): %s: %s", self.table_uri, self.cursor, type(exc).__name__, exc)
            await asyncio.sleep(self.poll_interval)

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

    async def filter_shared_stream(self, shared_stream: AsyncIterator[Any]) -> AsyncIterator[TriggerEvent]:
        """This watcher's events from the shared poll: one per poll with new data versions after its cursor.

        Each raw event is one poll (`TablePoll`): the latest version and the storage options. The cursor
        advances in memory at once; its write is handed to the poll (`TablePoll.record`) and made by
        `DeltaLogProducer.advance` once the triggerer confirmed every event derived from the poll is stored.
        """
        store = self._cursor_store()
        loaded = store is None
        key = cursor_key(self.table_uri)
        async for poll in shared_stream:
            try:
                if not loaded:
                    store, self.cursor = await self._load_cursor(store)
                    loaded = True
                baseline = self._rebaseline(self.cursor, poll.latest)
                if baseline is not None:
                    self.cursor = baseline
                    if store is not None:
                        poll.record(store, key, baseline)
                if poll.latest is not None:
                    async for payload, until in self._batches(poll.options, poll.latest):
                        if payload is not None:
                            yield TriggerEvent(payload)
                        self.cursor = until
                        if store is not None:
                            poll.record(store, key, until)
            except Exception as exc:  # a watcher outlives errors: log, and the next poll retries
                log_ = self.log.warning if is_transient(exc) else self.log.error
                log_("watching %s (cursor %s): %s: %s", self.table_uri, self.cursor, type(exc).__name__, exc)


#: The first element of a watcher's shared stream key.
_STREAM = "airflow_delta_provider.delta_log"


def storage_options(table_uri: str, storage_conn_id: str | None) -> dict[str, Any]:
    """The storage options of `storage_conn_id` for the table ({} without a connection)."""
    if not storage_conn_id:
        return {}
    from ..hooks.delta import DeltaTableHook

    return DeltaTableHook(table_uri, storage_conn_id).storage_options()


@dataclass(eq=False)
class TablePoll:
    """One poll of a table's log, broadcast to every watcher of the table (a shared stream's raw event).

    `latest`: the latest version, None while the table does not exist. `writes`: the cursor writes the
    watchers recorded while handling it, made once all of them handled it and their events are stored.
    """

    latest: int | None
    options: dict[str, Any]
    writes: list[tuple[Any, str, int]] = field(default_factory=list)

    def record(self, store: Any, key: str, version: int) -> None:
        """Write `version` as the cursor `key` in `store` once this poll is acknowledged."""
        self.writes.append((store, key, version))


_ProducerBase: type = _Producer if _Producer is not None else object


class DeltaLogProducer(_ProducerBase):  # type: ignore[misc,valid-type]
    """The shared poll of one table's log (Airflow 3.3+ ack mode, `airflow.triggers.shared_stream`).

    `open_stream` lists the log every `poll_interval` seconds and yields one `TablePoll` per poll, changed
    or not, so a watcher joining late or restarted catches up within one poll. Errors are logged and the
    next poll retries: a watcher outlives them. `advance` receives polls every watcher has moved past and
    whose events the triggerer confirmed stored in the metadata DB, and writes the cursors the watchers
    recorded on them (the last per cursor); a poll a watcher failed on (ack timeout) writes nothing, so the
    restarted watcher fires its events again.
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
