"""RESTORE: put a table back to an older version (Spark `RestoreTableCommand`). A dry run unless `dry_run=False`.

Files are told apart by path plus deletion vector (PROTOCOL.md "Action Reconciliation"), so a file whose
deletion vector changed since is removed with its new vector and added back with its old one. The protocol
is never downgraded (Spark `Protocol.merge`). Every file to add back is looked up in storage (a HEAD per data file and
stored deletion vector); any gone refuses with `RestoreMissingFilesError` unless `allow_partial`. The commit
reads the whole table, so any concurrent file, metadata or protocol change is a conflict (Spark's
`commitLarge` never rebases). A dry run's plan applied later must match a fresh plan (`check_plan`). A
VACUUM between the HEADs and the commit may delete a file to add back (Spark has the same window); the
plan flags a version older than the deleted-file retention (`beyond_file_retention`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..delta_log import DeltaLog
from ..errors import InvalidArgumentError, check_bool, check_int
from ..protocol.history import format_ms, to_epoch_ms
from ..protocol.restore import (
    RESTORE_OPERATION,
    RestoreMissingFilesError,
    RestorePlan,
    RestorePlanRefusedError,
    check_missing,
    check_plan,
    merge_protocols,
    restore_diff,
)
from ..protocol.table_features import check_can_write
from ..snapshot import Snapshot
from .repair import DEFAULT_HEAD_WORKERS, file_checker

log = logging.getLogger(__name__)


@dataclass
class RestoreResult:
    """What a RESTORE planned and, unless a dry run, committed."""

    plan: RestorePlan
    dry_run: bool
    allow_partial: bool
    version: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The CLI's `--json` shape; `plan` is what `restore(plan=...)` takes to apply a dry run later."""
        p = self.plan
        return {
            "dry_run": self.dry_run,
            "version": self.version,
            "read_version": p.read_version,
            "target_version": p.target_version,
            "timestamp": p.timestamp,
            "allow_partial": self.allow_partial,
            "metrics": p.metrics(),
            "files_restored": [f.path for f in p.to_add],
            "files_removed": [f.path for f in p.to_remove],
            "missing_files": [f.path for f in p.missing],
            "metadata_changed": p.metadata_changed,
            "protocol_changed": p.protocol_changed,
            "beyond_file_retention": p.beyond_file_retention,
            "plan": p.to_dict(),
        }


def _target_version(dlog: DeltaLog, version: int | None, timestamp: Any) -> tuple[int, str | None]:
    """The version to restore and the timestamp as the commit records it (None when a version was given)."""
    if (version is None) == (timestamp is None):
        raise InvalidArgumentError(
            "RESTORE takes exactly one of version or timestamp", argument="version", table=dlog.table_uri
        )
    if version is not None:
        return check_int(version, "version", minimum=0, table=dlog.table_uri), None
    text = timestamp if isinstance(timestamp, str) else format_ms(to_epoch_ms(timestamp, argument="timestamp"))
    if isinstance(timestamp, str) and timestamp.strip().lstrip("-").isdigit():
        timestamp = int(timestamp)
    # Spark: `getActiveCommitAtTime(ts, canReturnLastCommit = true)`; a time after the last commit resolves to
    # the latest version, which the "older than the latest" rule then refuses
    return dlog.snapshot_at(timestamp=timestamp, can_return_last_commit=True).version, text


def plan_restore(
    dlog: DeltaLog,
    latest: Snapshot,
    target_version: int,
    timestamp: str | None,
    *,
    max_workers: int = DEFAULT_HEAD_WORKERS,
) -> RestorePlan:
    """The plan to restore `target_version` over `latest`, its files to add back looked up in storage."""
    table = dlog.table_uri
    if target_version >= latest.version:
        raise InvalidArgumentError(
            f"Version to restore ({target_version}) must be older than the latest version ({latest.version})",
            argument="timestamp" if timestamp is not None else "version",
            table=table,
            version=target_version,
        )
    target = dlog.snapshot_at(version=target_version)
    protocol = merge_protocols(target.protocol, latest.protocol)
    check_can_write(protocol, target.metadata, ["restore", "commit"], table=table, version=target_version)
    target_files = list(target.all_files(with_stats=True))
    to_add, to_remove = restore_diff(target_files, latest.all_files(with_stats=True))
    # HEADs where the engine runs them (Spark: on its executors)
    missing = file_checker(latest, max_workers).missing(dlog.store, table, to_add, deletion_vectors=True, table=table)
    gone = {f.key for f in missing}
    return RestorePlan(
        table=table,
        table_id=latest.metadata.id,
        read_version=latest.version,
        target_version=target_version,
        timestamp=timestamp,
        to_add=[f for f in to_add if f.key not in gone],
        to_remove=to_remove,
        missing=missing,
        target_num_files=len(target_files),
        target_size_bytes=sum(f.size for f in target_files),
        metadata=target.metadata,
        protocol=protocol,
        metadata_changed=target.metadata != latest.metadata,
        protocol_changed=protocol != latest.protocol,
        beyond_file_retention=target.timestamp < latest.now_ms() - latest.tombstone_retention_ms,
    )


def restore(
    table_or_log: DeltaLog | str | os.PathLike[str],
    *,
    version: int | None = None,
    timestamp: int | str | Any | None = None,
    allow_partial: bool = False,
    dry_run: bool = True,
    plan: Mapping[str, Any] | None = None,
    max_workers: int = DEFAULT_HEAD_WORKERS,
    clock: Callable[[], int] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> RestoreResult:
    """Restore the table to `version`, or to the last commit at or before `timestamp` (a dry run unless
    `dry_run=False`).

    :param allow_partial: leave out (and report) files storage no longer holds instead of refusing
        (Spark's `spark.sql.files.ignoreMissingFiles`).
    :param plan: apply an earlier dry run's `to_dict()["plan"]`, which must match a plan made now.
    :raises InvalidArgumentError: neither or both of version and timestamp, a version not older than the
        latest, or (`RestorePlanRefusedError`) a plan the table no longer gives.
    :raises RestoreMissingFilesError: files to add back are gone from storage (nothing committed).
    """
    check_bool(allow_partial, "allow_partial")
    check_bool(dry_run, "dry_run")
    check_int(max_workers, "max_workers", minimum=1)
    dlog = DeltaLog.of(table_or_log, storage_options, clock)
    latest = dlog.update()
    table = dlog.table_uri
    check_can_write(latest.protocol, latest.metadata, ["restore", "commit"], table=table, version=latest.version)
    if plan is not None and version is None and timestamp is None:
        planned_version = plan.get("target_version") if isinstance(plan, Mapping) else None
        if isinstance(planned_version, bool) or not isinstance(planned_version, int):
            raise InvalidArgumentError("The plan names no target_version", argument="plan", table=table)
        stamped = plan.get("timestamp")
        target, asked = planned_version, stamped if isinstance(stamped, str) else None
    else:
        target, asked = _target_version(dlog, version, timestamp)
    the_plan = plan_restore(dlog, latest, target, asked, max_workers=max_workers)
    if plan is not None:
        check_plan(plan, the_plan)
    check_missing(the_plan, allow_partial)
    result = RestoreResult(the_plan, dry_run=dry_run, allow_partial=allow_partial)
    if dry_run:
        return result
    assert the_plan.metadata is not None and the_plan.protocol is not None
    txn = latest.transaction(RESTORE_OPERATION, the_plan.parameters(), clock=clock or dlog.clock)
    txn.read_whole_table()
    txn.add(the_plan.protocol, the_plan.metadata, *the_plan.to_add)
    txn.remove(*the_plan.to_remove, data_change=True)
    result.version = txn.commit(operation_metrics=the_plan.metrics())
    log.info(
        "RESTORE of %s to version %d: version %d added back %d files, removed %d, left out %d missing",
        table,
        the_plan.target_version,
        result.version,
        len(the_plan.to_add),
        len(the_plan.to_remove),
        len(the_plan.missing),
    )
    return result


__all__ = ["RestoreMissingFilesError", "RestorePlanRefusedError", "RestoreResult", "plan_restore", "restore"]
