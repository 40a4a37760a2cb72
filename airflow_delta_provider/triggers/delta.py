"""`DeltaVersionTrigger`: wait, in the triggerer, for a Delta table to reach a version, or watch every new one."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import TriggerEvent

try:  # Airflow 3: triggers usable by AssetWatcher must be event triggers
    from airflow.triggers.base import BaseEventTrigger as _BaseTrigger
except ImportError:  # pragma: no cover - Airflow 2
    from airflow.triggers.base import BaseTrigger as _BaseTrigger

from ..delta.errors import (
    DeltaError,
    InvalidArgumentError,
    TableNotFoundError,
    TableRecreatedError,
    VersionNotFoundError,
)
from ..version_watch import condition_met, is_transient, probe_version, version_event

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
    `max_transient_errors` transient errors in a row (throttling, timeouts), and ends.

    **Watching** (none of the three given; what an `AssetWatcher` runs): never ends, and fires one
    success event per new table version, in order, several in a row when several commits landed
    between two polls. Its cursor (the last version fired) is read at start from the watched asset's
    state store (`asset_state_store`, Airflow 3.3+) and written there once the triggerer has queued
    each event, so a triggerer restart resumes after the last version fired: nothing repeated,
    nothing skipped. Without a stored cursor the first poll takes the latest version as the baseline
    (-1 for a table not created yet: its version 0 fires) and stores it. Without a store (Airflow < 3.3,
    or one trigger shared by several assets) the cursor lives in memory and a restart re-baselines,
    so commits made while the triggerer was down fire no event. Errors never become events: they are
    logged and the next poll retries. A table whose latest version falls below the cursor (replaced
    by a new table) is re-baselined without events, or, with `allow_recreation`, fires each version of
    the new table from 0.

    **Recreation**: a latest version below `newer_than` (or `baseline`) means the table was deleted and
    created again. With `allow_recreation=True` that fires at once, the event carrying `"recreated":
    true`; without, it is a permanent error (`TableRecreatedError`), never a silent wait for a version
    the new table may take months to reach. A missing bucket (`BucketNotFoundError`) and a malformed
    endpoint (`InvalidArgumentError`) are permanent errors too, not "the table does not exist yet".

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
        poll_interval: float = 60.0,
        wait_for_table: bool = True,
        max_transient_errors: int = 5,
        allow_recreation: bool = False,
    ) -> None:
        super().__init__()
        self.table_uri = table_uri
        self.target_version = target_version
        self.newer_than = newer_than
        self.baseline = baseline
        self.storage_conn_id = storage_conn_id
        self.poll_interval = poll_interval
        self.wait_for_table = wait_for_table
        self.max_transient_errors = max_transient_errors
        self.allow_recreation = allow_recreation
        #: Watching: the last version fired (or the baseline) once the first poll ran. Runtime state,
        #: never serialized: a restart reads the persisted cursor instead.
        self.cursor: int | None = None

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
            },
        )

    @property
    def watching(self) -> bool:
        """Whether this trigger watches every new version (no target, `newer_than` or baseline)."""
        return self.target_version is None and self.newer_than is None and self.baseline is None

    def _storage_options(self) -> dict[str, Any]:
        if not self.storage_conn_id:
            return {}
        from ..hooks.delta import DeltaTableHook

        return DeltaTableHook(self.table_uri, self.storage_conn_id).storage_options()

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

    def _version_payload(self, options: dict[str, Any], version: int) -> dict[str, Any]:
        """The event of one version; a commit already cleaned from the log still fires, without details."""
        try:
            return {"status": "success", **version_event(self.table_uri, options, version)}
        except VersionNotFoundError:
            return {
                "status": "success",
                "version": version,
                "table_uri": self.table_uri,
                "timestamp": None,
                "operation": None,
            }

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
        """Fire one event per new version, forever, recording each as the cursor once the triggerer took it.

        The triggerer queues an event, then asks for the next one: that resumption is the receipt, and only
        then is the cursor advanced and stored. A stop (cancellation) before it leaves the event unrecorded,
        so the restarted trigger fires it again; one arriving while the cursor is written waits for the
        write. Either way each version is queued exactly once.
        """
        store = self._cursor_store()
        loaded = store is None
        key = cursor_key(self.table_uri)
        while True:
            cursor = self.cursor
            try:
                if not loaded:
                    store, cursor = await self._load_cursor(store)
                    self.cursor = cursor
                    loaded = True
                options = await asyncio.to_thread(self._storage_options)
                latest = await asyncio.to_thread(
                    probe_table, self.table_uri, options, wait_for_table=self.wait_for_table
                )
                if cursor is None or (latest is not None and latest < cursor):
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
                    if store is not None and await self._persist(store, key, baseline):
                        raise asyncio.CancelledError
                    self.cursor = cursor = baseline
                    self.log.info("watching %s from version %s", self.table_uri, baseline)
                if cursor is not None and latest is not None and latest > cursor:
                    for version in range(cursor + 1, latest + 1):
                        payload = await asyncio.to_thread(self._version_payload, options, version)
                        yield TriggerEvent(payload)
                        # Resumed: the triggerer queued the event (it asks for the next one right after).
                        self.cursor = version
                        if store is not None and await self._persist(store, key, version):
                            raise asyncio.CancelledError
            except Exception as exc:  # a watcher outlives errors: log, and the next poll retries
                log = self.log.warning if is_transient(exc) else self.log.error
                log("watching %s (cursor %s): %s: %s", self.table_uri, self.cursor, type(exc).__name__, exc)
            await asyncio.sleep(self.poll_interval)
