"""What the sensor and its trigger decide, without Airflow: probe a table's version, judge it, classify errors.

A probe reads `_last_checkpoint` and the `_delta_log` listing only (`DeltaLog.latest_version`), never
checkpoints or data; a firing poll reads one more file, the commit it reports.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .delta.delta_log import DeltaLog
from .delta.errors import DeltaError, StorageError, TableNotFoundError
from .delta.storage import normalize_table_uri


def last_version(pulled: Any, table_uri: str | None = None) -> int | None:
    """The version of the latest result among XCom results, whatever shape `xcom_pull` gave them in.

    `ti.xcom_pull(task_ids=..., include_prior_dates=True)` returns None (no earlier run), one dict,
    or, on Airflow 3 once several runs stored a value, a list of them (in no set order). The latest
    result is the one whose version was committed last (`timestamp_ms`, as the replay and the sensor
    report it), then the highest version: a table dropped and recreated (`allow_recreation`) restarts
    at a lower version, and its runs must not wait for the old table's higher ones. A bare int is taken
    as a version. With `table_uri`, only results whose `table_uri` names the same table (compared
    normalized) count, so runs of a DAG over another table are ignored. Register it as a macro
    (`user_defined_macros={"last_version": last_version}`) and template
    `newer_than="{{ last_version(ti.xcom_pull(task_ids='replay', include_prior_dates=True)) }}"`:
    None renders as "None", which the sensor reads as "no version".
    """
    items = pulled if isinstance(pulled, list | tuple) else [pulled]
    wanted = normalize_table_uri(table_uri) if table_uri else None
    found: list[tuple[bool, int, int]] = []  # (has a commit time, commit time, version)
    for item in items:
        if isinstance(item, bool) or item is None:
            continue
        if isinstance(item, int):
            found.append((False, 0, item))
        elif isinstance(item, Mapping) and isinstance(item.get("version"), int):
            uri = item.get("table_uri")
            if wanted is None or (isinstance(uri, str) and normalize_table_uri(uri) == wanted):
                ts = item.get("timestamp_ms")
                timed = isinstance(ts, int) and not isinstance(ts, bool)
                found.append((timed, ts if timed else 0, item["version"]))
    return max(found)[2] if found else None


def as_version(value: Any, name: str) -> int | None:
    """A templated version as an int (rendered templates are strings); None for empty or "None".

    Natively rendered XCom results (a dict, or a list of dicts) give their highest `version`.
    """
    if value is None or (isinstance(value, str) and value.strip() in ("", "None", "null")):
        return None
    if isinstance(value, Mapping | list | tuple):
        return last_version(value)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an integer version, got {value!r}") from None


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
