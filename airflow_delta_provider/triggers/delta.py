"""`DeltaVersionTrigger`: wait, in the triggerer, for a Delta table to reach a version."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import TriggerEvent

try:  # Airflow 3: triggers usable by AssetWatcher must be event triggers
    from airflow.triggers.base import BaseEventTrigger as _BaseTrigger
except ImportError:  # pragma: no cover - Airflow 2
    from airflow.triggers.base import BaseTrigger as _BaseTrigger

from ..version_watch import condition_met, is_transient, probe_version, version_event


class DeltaVersionTrigger(_BaseTrigger):
    """Poll a table's latest version (log listing only) until the sensor's condition holds.

    Fires `{"status": "success", "version", "table_uri", "timestamp", "operation"}`, or
    `{"status": "error", "error_class", "message", "transient"}` on a permanent error, or after
    `max_transient_errors` transient errors in a row (throttling, timeouts). Serializes primitives
    only; the baseline is captured before deferring, so a triggerer restart keeps it.
    Storage credentials are looked up from `storage_conn_id` in the triggerer, never serialized.
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
            },
        )

    def _storage_options(self) -> dict[str, Any]:
        if not self.storage_conn_id:
            return {}
        from ..hooks.delta import DeltaTableHook

        return DeltaTableHook(self.table_uri, self.storage_conn_id).storage_options()

    def _poll(self) -> dict[str, Any] | None:
        """One blocking poll: the event to fire, or None to keep waiting."""
        options = self._storage_options()
        version = probe_version(self.table_uri, options, wait_for_table=self.wait_for_table)
        if version is None or not condition_met(version, self.target_version, self.newer_than, self.baseline):
            return None
        return {"status": "success", **version_event(self.table_uri, options, version)}

    async def run(self) -> AsyncIterator[TriggerEvent]:
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
