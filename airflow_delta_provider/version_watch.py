"""What the sensor and its trigger decide, without Airflow: probe a table's version, judge it, classify errors.

A probe reads `_last_checkpoint` and the `_delta_log` listing only; a poll that finds new versions reads
their commit files to tell data from maintenance. A commit that changes no data (every file action
`dataChange` false, as OPTIMIZE writes, or none, as VACUUM START/END) fires nothing unless
`include_maintenance=True`: PROTOCOL.md "Add File and Remove File" lets tailing readers skip such actions.
`as_version` and `last_version` live in `commands.arguments` and are re-exported here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .commands.arguments import as_version, last_version  # noqa: F401 (re-exported)
from .commands.commit_checks import changes_data
from .delta.delta_log import DeltaLog
from .delta.errors import (
    DeltaError,
    InvalidArgumentError,
    StorageError,
    TableNotFoundError,
    TableRecreatedError,
    VersionNotFoundError,
)
from .delta.protocol.actions import Action, AddCDCFile, AddFile, CommitInfo, RemoveFile
from .delta.protocol.filenames import LogFileKind, ParsedLogPath
from .delta.protocol.log_segment import parse_listing
from .delta.read.commits import read_commit

#: At most this many versions in one watcher event: a longer backlog fires several events in a row.
MAX_EVENT_VERSIONS = 1000
#: At most this many distinct partitions listed in one event; beyond, `partitions` is None (not listed).
MAX_EVENT_PARTITIONS = 100

Partition = tuple[tuple[str, str | None], ...]


def storage_options(table_uri: str, storage_conn_id: str | None) -> dict[str, Any]:
    """The storage options of `storage_conn_id` for the table ({} without a connection)."""
    if not storage_conn_id:
        return {}
    from .hooks.delta import DeltaTableHook

    return DeltaTableHook(table_uri, storage_conn_id).storage_options()


def probe_version(table_uri: str, storage_options: Mapping[str, Any], *, wait_for_table: bool = True) -> int | None:
    """The table's latest version; None when the table does not exist yet and `wait_for_table`."""
    try:
        return DeltaLog.for_table(table_uri, storage_options).latest_version()
    except TableNotFoundError:
        if wait_for_table:
            return None
        raise


def probe_table(table_uri: str, storage_options: dict[str, Any], *, wait_for_table: bool = True) -> int | None:
    """`probe_version`, telling a misconfigured location from a table not created yet: a malformed S3
    endpoint is an `InvalidArgumentError` before any request, a missing bucket a `BucketNotFoundError`
    (one HEAD of the bucket, only while the table is missing)."""
    from .hooks.delta import check_bucket, check_endpoint

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


def version_event(table_uri: str, storage_options: Mapping[str, Any], version: int) -> dict[str, Any]:
    """`{version, table_uri, timestamp, operation}` of the commit at `version` (XCom and asset extra)."""
    log = DeltaLog.for_table(table_uri, storage_options)
    summary = log.commit_summary(version)
    return {"version": version, "table_uri": log.table_uri, **{k: summary[k] for k in ("timestamp", "operation")}}


def wait_event(
    table_uri: str,
    storage_options: Mapping[str, Any],
    version: int,
    *,
    target_version: int | None,
    newer_than: int | None,
    baseline: int | None,
    scanned: int | None,
    allow_recreation: bool,
    include_maintenance: bool,
) -> tuple[dict[str, Any] | None, int | None]:
    """A wait's poll at the probed latest `version`: (its event or None, the new `scanned`). The condition:
    `>= target_version`, else `> newer_than`, else `> baseline`. Without a target the event names the newest
    data version past the reference; `scanned` marks versions found to be maintenance only, not read again.
    A version below the reference means the table was recreated (a `target_version` wait cannot tell: a lower
    version is simply not there yet): `TableRecreatedError`, unless `allow_recreation` (then the event
    carries `"recreated": True`)."""
    reference = newer_than if newer_than is not None else baseline
    if target_version is None and reference is not None and version < reference:
        if not allow_recreation:
            what = f"newer_than={newer_than}" if newer_than is not None else f"the baseline version {baseline}"
            raise TableRecreatedError(
                f"the latest version {version} is below {what}: the table was deleted and recreated (or the "
                "version waited past belongs to another table); allow_recreation=True fires on the new table's "
                "versions",
                table=table_uri,
                version=version,
            )
        return {**version_event(table_uri, storage_options, version), "recreated": True}, scanned
    if target_version is not None:
        if version < target_version:
            return None, scanned
    elif reference is None or version <= reference:
        return None, scanned
    elif not include_maintenance:
        after = scanned if scanned is not None and reference <= scanned < version else reference
        found = last_data_version(table_uri, storage_options, after, version)
        if found is None:
            return None, version
        version = found
    return version_event(table_uri, storage_options, version), scanned


def is_transient(exc: BaseException) -> bool:
    """Errors worth retrying: throttling, timeouts, connection resets. Auth errors and a corrupt log are not."""
    if isinstance(exc, StorageError):
        return exc.transient
    if isinstance(exc, DeltaError):
        return False
    return isinstance(exc, TimeoutError | ConnectionError)


# -- new commits: data or maintenance -------------------------------------------------------------------
@dataclass(frozen=True)
class Commit:
    """One new version for a watcher: `data` (it changes data); `partitions`, the partition values its file
    actions touched (those with `dataChange`, else all), None when unknown (its commit file is gone)."""

    version: int
    operation: str | None
    data: bool
    partitions: frozenset[Partition] | None


def _commit_files(log: DeltaLog, after: int, until: int) -> dict[int, ParsedLogPath]:
    """The commit files of versions in (after, until]: one listing of the log from `after + 1`."""
    parsed = parse_listing(log.list_log(after + 1))
    return {p.version: p for p in parsed if p.kind is LogFileKind.COMMIT and after < p.version <= until}


def _commit(version: int, actions: list[Action]) -> Commit:
    info = next((a for a in actions if isinstance(a, CommitInfo)), None)
    files = [a for a in actions if isinstance(a, AddFile | RemoveFile | AddCDCFile)]
    changed = [a for a in files if a.data_change or isinstance(a, AddCDCFile)] or files
    partitions = frozenset(tuple(sorted(a.partition_values.items())) for a in changed if a.partition_values)
    return Commit(version, info.operation if info else None, changes_data(actions), partitions)


def read_commits(table_uri: str, storage_options: Mapping[str, Any], after: int, until: int) -> list[Commit]:
    """Every version in (after, until], oldest first. A version whose commit file is gone (log cleanup)
    counts as data with unknown partitions: a watcher never drops a version it cannot classify."""
    log = DeltaLog.for_table(table_uri, storage_options)
    files = _commit_files(log, after, until)
    return [
        Commit(v, None, True, None) if v not in files else _commit(v, read_commit(log.store, log.table_uri, files[v]))
        for v in range(after + 1, until + 1)
    ]


def last_data_version(table_uri: str, storage_options: Mapping[str, Any], after: int, until: int) -> int | None:
    """The newest version in (after, until] that changes data (commits read newest first); None when all
    are maintenance. A version whose commit file is gone counts as data."""
    log = DeltaLog.for_table(table_uri, storage_options)
    files = _commit_files(log, after, until)
    for version in range(until, after, -1):
        found = files.get(version)
        if found is None or changes_data(read_commit(log.store, log.table_uri, found)):
            return version
    return None


def commits_event(
    table_uri: str,
    storage_options: Mapping[str, Any],
    commits: list[Commit],
    *,
    include_maintenance: bool = False,
) -> dict[str, Any] | None:
    """The one event of a batch of new versions (docs/airflow.md lists its keys), or None when all are
    maintenance. `partitions` is None when unknown or more than `MAX_EVENT_PARTITIONS`."""
    delivered = [c for c in commits if include_maintenance or c.data]
    if not delivered:
        return None
    last = delivered[-1]
    try:
        head = version_event(table_uri, storage_options, last.version)
    except VersionNotFoundError:  # cleaned from the log since: still delivered, without its details
        head = {"version": last.version, "table_uri": DeltaLog.for_table(table_uri, storage_options).table_uri}
        head.update(timestamp=None, operation=last.operation)
    known = [c.partitions for c in delivered if c.partitions is not None]
    partitions = set().union(*known) if len(known) == len(delivered) else None
    if partitions is not None and len(partitions) <= MAX_EVENT_PARTITIONS:
        listed = [dict(p) for p in sorted(partitions, key=lambda p: [(k, "" if v is None else v) for k, v in p])]
    else:
        listed = None
    return {
        "status": "success",
        **head,
        "first_version": delivered[0].version,
        "last_version": last.version,
        "versions": [c.version for c in delivered],
        "operations": [c.operation for c in delivered],
        "partitions": listed,
        "skipped_versions": [c.version for c in commits if not (include_maintenance or c.data)],
    }


def chunks(after: int, until: int, size: int = MAX_EVENT_VERSIONS) -> Iterator[tuple[int, int]]:
    """(after, until] cut into (a, b] ranges of at most `size` versions, oldest first."""
    while after < until:
        end = min(until, after + size)
        yield after, end
        after = end


def since_last(log: DeltaLog, operation: str = "OPTIMIZE", *, lookback: int = 1000) -> dict[str, Any]:
    """What changed since the newest `operation` commit among the last `lookback` versions (`last_version`,
    None when none is that recent): the later versions that change data and their `add`s with
    `dataChange`. A commit file already cleaned from the log is not counted."""
    latest = log.latest_version()
    after = max(-1, latest - lookback)
    files = _commit_files(log, after, latest)
    out: dict[str, Any] = {
        "latest_version": latest,
        "last_version": None,
        "last_timestamp": None,
        "data_versions": 0,
        "data_files_added": 0,
        "scanned_from": latest + 1,
    }
    for version in sorted(files, reverse=True):
        out["scanned_from"] = version
        actions = read_commit(log.store, log.table_uri, files[version])
        info = next((a for a in actions if isinstance(a, CommitInfo)), None)
        if info is not None and info.operation == operation:
            out["last_version"] = version
            out["last_timestamp"] = log.commit_summary(version)["timestamp"]
            break
        if changes_data(actions):
            out["data_versions"] += 1
            out["data_files_added"] += sum(1 for a in actions if isinstance(a, AddFile) and a.data_change)
    return out
