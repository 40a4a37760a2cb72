"""What the sensor and its trigger decide, without Airflow: probe a table's version, judge it, classify errors.

`last_version` and `as_version` (reading XCom results and templated versions) live with the other
argument parsers in `commands.arguments`, and are re-exported here.

A probe reads `_last_checkpoint` and the `_delta_log` listing only (`DeltaLog.latest_version`), never
checkpoints or data; a poll that finds new versions lists the log from the first of them once and reads
their commit files, to tell data from maintenance commits (`read_commits`, `last_data_version`).

**Maintenance commits are not data.** A commit that changes no data (`commands.commit_checks.changes_data`
is false: every `add`/`remove` with `dataChange` false, as OPTIMIZE and statistics backfills write them,
or no file action at all, as VACUUM START/END) fires nothing unless `include_maintenance=True`. PROTOCOL.md
("Add File and Remove File"): `dataChange` false means the actions "only rearrange existing data or add
new statistics", so "streaming queries that are tailing the transaction log can use this flag to skip
actions that would not affect the final results". A `metaData` or `protocol` commit (a schema or property
change, the table's creation) is not maintenance.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .commands.arguments import as_version, last_version
from .commands.commit_checks import changes_data
from .delta.delta_log import DeltaLog
from .delta.errors import DeltaError, StorageError, TableNotFoundError, VersionNotFoundError
from .delta.protocol.actions import Action, AddCDCFile, AddFile, CommitInfo, RemoveFile
from .delta.protocol.filenames import LogFileKind, ParsedLogPath
from .delta.protocol.log_segment import parse_listing
from .delta.read.commits import read_commit

__all__ = [
    "MAX_EVENT_PARTITIONS",
    "MAX_EVENT_VERSIONS",
    "Commit",
    "as_version",
    "commits_event",
    "condition_met",
    "is_transient",
    "last_data_version",
    "last_version",
    "probe_version",
    "read_commits",
    "since_last",
    "version_event",
]

#: At most this many versions in one watcher event: a longer backlog fires several events in a row.
MAX_EVENT_VERSIONS = 1000
#: At most this many distinct partitions listed in one event; beyond, `partitions` is None (not listed).
MAX_EVENT_PARTITIONS = 100

Partition = tuple[tuple[str, str | None], ...]


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


# -- new commits: data or maintenance -------------------------------------------------------------------
@dataclass(frozen=True)
class Commit:
    """What a watcher needs to know about one new version.

    `data`: the commit changes data (`changes_data`); `partitions`: the partition values its file actions
    touched (those with `dataChange` true, else all of them), empty for an unpartitioned table or a commit
    without file actions, None when unknown (its commit file is gone from the log).
    """

    version: int
    operation: str | None
    data: bool
    partitions: frozenset[Partition] | None


def _commit_files(log: DeltaLog, after: int, until: int) -> dict[int, ParsedLogPath]:
    """The commit files of versions in (after, until]: one listing of the log from `after + 1`."""
    parsed = parse_listing(log.list_log(after + 1))
    return {p.version: p for p in parsed if p.kind is LogFileKind.COMMIT and after < p.version <= until}


def _partitions(actions: list[Action]) -> frozenset[Partition]:
    files = [a for a in actions if isinstance(a, AddFile | RemoveFile | AddCDCFile)]
    changed = [a for a in files if a.data_change or isinstance(a, AddCDCFile)] or files
    return frozenset(tuple(sorted(a.partition_values.items())) for a in changed if a.partition_values)


def _commit(version: int, actions: list[Action]) -> Commit:
    info = next((a for a in actions if isinstance(a, CommitInfo)), None)
    return Commit(version, info.operation if info else None, changes_data(actions), _partitions(actions))


def read_commits(table_uri: str, storage_options: Mapping[str, Any], after: int, until: int) -> list[Commit]:
    """Every version in (after, until], oldest first: one listing, then one read per commit file.

    A version whose commit file is gone (log cleanup) counts as a data commit whose partitions are unknown:
    a watcher never drops a version it cannot classify.
    """
    log = DeltaLog.for_table(table_uri, storage_options)
    files = _commit_files(log, after, until)
    out = []
    for version in range(after + 1, until + 1):
        found = files.get(version)
        if found is None:
            out.append(Commit(version, None, True, None))
        else:
            out.append(_commit(version, read_commit(log.store, log.table_uri, found)))
    return out


def last_data_version(table_uri: str, storage_options: Mapping[str, Any], after: int, until: int) -> int | None:
    """The newest version in (after, until] that changes data, reading commits newest first and stopping
    at the first such one; None when every one of them is a maintenance commit. A version whose commit
    file is gone counts as data."""
    log = DeltaLog.for_table(table_uri, storage_options)
    files = _commit_files(log, after, until)
    for version in range(until, after, -1):
        found = files.get(version)
        if found is None or changes_data(read_commit(log.store, log.table_uri, found)):
            return version
    return None


def _jsonable_partitions(partitions: set[Partition] | None) -> list[dict[str, str | None]] | None:
    if partitions is None or len(partitions) > MAX_EVENT_PARTITIONS:
        return None
    return [dict(p) for p in sorted(partitions, key=lambda p: [(k, "" if v is None else v) for k, v in p])]


def commits_event(
    table_uri: str,
    storage_options: Mapping[str, Any],
    commits: list[Commit],
    *,
    include_maintenance: bool = False,
) -> dict[str, Any] | None:
    """The one event of a batch of new versions, or None when none is delivered (all maintenance).

    `{"status": "success", "version", "table_uri", "timestamp", "operation"` (those three of the last
    version delivered), `"first_version", "last_version", "versions", "operations"` (each delivered
    version's commitInfo.operation), `"partitions"` (the distinct partition values the delivered commits
    touched, as `{column: value}` dicts; `[]` unpartitioned; None when unknown or more than
    `MAX_EVENT_PARTITIONS`), `"skipped_versions"` (the maintenance versions of the batch not delivered)`}`.
    """
    delivered = [c for c in commits if include_maintenance or c.data]
    if not delivered:
        return None
    last = delivered[-1]
    try:
        head = version_event(table_uri, storage_options, last.version)
    except VersionNotFoundError:  # cleaned from the log since: still delivered, without its details
        head = {"version": last.version, "table_uri": DeltaLog.for_table(table_uri, storage_options).table_uri}
        head.update(timestamp=None, operation=last.operation)
    partitions: set[Partition] | None = set()
    for c in delivered:
        if c.partitions is None or partitions is None:
            partitions = None
        else:
            partitions |= c.partitions
    return {
        "status": "success",
        **head,
        "first_version": delivered[0].version,
        "last_version": last.version,
        "versions": [c.version for c in delivered],
        "operations": [c.operation for c in delivered],
        "partitions": _jsonable_partitions(partitions),
        "skipped_versions": [c.version for c in commits if not (include_maintenance or c.data)],
    }


def chunks(after: int, until: int, size: int = MAX_EVENT_VERSIONS) -> Iterator[tuple[int, int]]:
    """(after, until] cut into (a, b] ranges of at most `size` versions, oldest first."""
    while after < until:
        end = min(until, after + size)
        yield after, end
        after = end


def since_last(log: DeltaLog, operation: str = "OPTIMIZE", *, lookback: int = 1000) -> dict[str, Any]:
    """What changed since the newest `operation` commit (commitInfo.operation) among the last `lookback`
    versions: one listing, then commits read newest first until that one.

    `{"latest_version", "last_version"` (the newest `operation` commit; None when none is that recent),
    `"last_timestamp"` (its commit time, ms), `"data_versions"` (versions after it that change data),
    `"data_files_added"` (their `add` actions with `dataChange` true), `"scanned_from"` (the oldest version
    read)`}`. A commit file already cleaned from the log is not counted.
    """
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
    for version in range(latest, after, -1):
        found = files.get(version)
        if found is None:
            continue
        out["scanned_from"] = version
        actions = read_commit(log.store, log.table_uri, found)
        info = next((a for a in actions if isinstance(a, CommitInfo)), None)
        if info is not None and info.operation == operation:
            out["last_version"] = version
            out["last_timestamp"] = log.commit_summary(version)["timestamp"]
            break
        if changes_data(actions):
            out["data_versions"] += 1
            out["data_files_added"] += sum(1 for a in actions if isinstance(a, AddFile) and a.data_change)
    return out
