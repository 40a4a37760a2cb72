"""What the sensor and its trigger decide, without Airflow: probe a table's version, judge it, classify errors.

`last_version` and `as_version` (reading XCom results and templated versions) live with the other
argument parsers in `commands.arguments`, and are re-exported here.

A probe reads `_last_checkpoint` and the `_delta_log` listing only (`DeltaLog.latest_version`), never
checkpoints or data; a firing poll reads one more file, the commit it reports.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .commands.arguments import as_version, last_version
from .delta.delta_log import DeltaLog
from .delta.errors import DeltaError, StorageError, TableNotFoundError

__all__ = ["as_version", "condition_met", "is_transient", "last_version", "probe_version", "version_event"]


def condition_met(version: int, target_version: int | None, newer_than: int | None, baseline: int | None) -> bool:
    """Whether `version` satisfies the sensor: `>= target_version`, else `> newer_than`, else `> baseline`."""
    if target_version is not None:
        return version >= target_version
    if newer_than is not None:
        return version > newer_than
    return baseline is not None and version > baseline


def probe_version(table_uri: str, storage_options: Mapping[str, Any], *, wait_for_table: bool = True) -> int | None:
    """The table's latest version; None when the table does not exist yet and `wait_for_table`."""
    try:
        return DeltaLog.for_table(table_uri, storage_options).latest_version()
    except TableNotFoundError:
        if wait_for_table:
            return None
        raise


def version_event(table_uri: str, storage_options: Mapping[str, Any], version: int) -> dict[str, Any]:
    """`{version, table_uri, timestamp, operation}` of the commit at `version` (XCom and asset extra)."""
    log = DeltaLog.for_table(table_uri, storage_options)
    summary = log.commit_summary(version)
    return {
        "version": version,
        "table_uri": log.table_uri,
        "timestamp": summary["timestamp"],
        "operation": summary["operation"],
    }


def is_transient(exc: BaseException) -> bool:
    """Errors worth retrying: throttling, timeouts, connection resets. Auth errors and a corrupt log are not."""
    if isinstance(exc, StorageError):
        return exc.transient
    if isinstance(exc, DeltaError):
        return False
    return isinstance(exc, TimeoutError | ConnectionError)
