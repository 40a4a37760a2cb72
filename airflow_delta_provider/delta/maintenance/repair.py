"""Repair (FSCK): remove the active files storage no longer holds (delta-rs `DeltaTable.repair`, Databricks
`FSCK REPAIR TABLE`). A dry run unless `dry_run=False`.

One HEAD per active file (delta-rs lists the table root instead: a HEAD costs in proportion to the table's
files, never to the files beside it). Applied, it asks again at the latest version and commits one `FSCK`
of `dataChange=true` removes (the rows are gone, so readers of changes see them go), recording the files
as read, so a concurrent remove of one is a `ConcurrentDeleteReadError`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..delta_log import DeltaLog
from ..engines import DEFAULT_HEAD_WORKERS, FileChecker, LocalFileChecker, missing_files
from ..errors import check_bool, check_int
from ..progress import PROGRESS
from ..protocol.actions import AddFile
from ..protocol.repair import FSCK_OPERATION, RepairPlan, operation_metrics, rows_lost
from ..protocol.table_features import check_can_write
from ..snapshot import Snapshot

log = logging.getLogger(__name__)

#: The progress phase (`delta.progress`) of the local checker: active files checked.
CHECKING = "REPAIR: checking the active files"
#: Files a local check asks about between two progress reports (only when a callback listens).
CHECK_CHUNK = 1024


@dataclass
class RepairResult:
    """What a repair found and, unless a dry run, committed."""

    plan: RepairPlan
    dry_run: bool
    version: int | None = None

    @property
    def files_removed(self) -> list[str]:
        return [f.path for f in self.plan.missing]

    def to_dict(self) -> dict[str, Any]:
        """The CLI's `--json` shape: `version` is the FSCK commit's, None when nothing was."""
        return {
            "dry_run": self.dry_run,
            "version": self.version,
            **self.plan.to_dict(),
            "metrics": {"numFilesRemoved": len(self.plan.missing), "files_removed": self.files_removed},
        }


def file_checker(snapshot: Snapshot, max_workers: int = DEFAULT_HEAD_WORKERS) -> FileChecker:
    """The engine's `FileChecker` (the local HEAD loop for an engine without one)."""
    getter = getattr(snapshot.engine, "file_checker", None)
    return getter(max_workers=max_workers) if getter is not None else LocalFileChecker(max_workers)


def plan_repair(snapshot: Snapshot, *, max_workers: int = DEFAULT_HEAD_WORKERS) -> RepairPlan:
    """The active files of `snapshot` storage no longer holds, by path (one HEAD each, on the engine's
    `file_checker(max_workers=...)`: Spark's runs them on its executors, where the state's files are)."""
    checker = file_checker(snapshot, max_workers)
    progress = PROGRESS.get()
    if progress is None or type(checker) is not LocalFileChecker:
        checked, missing = checker.missing_active(snapshot)
    else:  # `LocalFileChecker.missing_active` a chunk at a time, told to `progress` after each (same answer)
        files = list(snapshot.all_files(with_stats=True))
        gone: list[AddFile] = []
        progress(CHECKING, 0, len(files))
        for start in range(0, len(files), CHECK_CHUNK):
            chunk = files[start : start + CHECK_CHUNK]
            gone += checker.missing(snapshot.store, snapshot.table, chunk, table=snapshot.table)
            progress(CHECKING, start + len(chunk), len(files))
        checked, missing = len(files), sorted(gone, key=lambda f: f.path)
    return RepairPlan(snapshot.table, snapshot.version, num_files_checked=checked, missing=missing)


def repair(
    table_or_log: DeltaLog | str | os.PathLike[str],
    *,
    dry_run: bool = True,
    max_workers: int = DEFAULT_HEAD_WORKERS,
    clock: Callable[[], int] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> RepairResult:
    """Find (and unless `dry_run`, remove in one `FSCK` commit) the active files storage no longer holds.

    :raises UnsupportedFeatureError, OperationNotAllowedError: a table this library must not write (an
        append-only table included: the removes change data).
    :raises ConcurrentModificationError: a concurrent commit removed a file this repair removes.
    """
    check_bool(dry_run, "dry_run")
    check_int(max_workers, "max_workers", minimum=1)
    dlog = DeltaLog.of(table_or_log, storage_options, clock)
    snapshot = dlog.update()
    table = dlog.table_uri
    ops = ["commit"] if dry_run else ["remove", "commit"]
    check_can_write(snapshot.protocol, snapshot.metadata, ops, table=table, version=snapshot.version)
    plan = plan_repair(snapshot, max_workers=max_workers)
    result = RepairResult(plan, dry_run=dry_run)
    if dry_run or not plan.missing:
        return result
    # operationParameters: none (delta-rs `DeltaOperation::FileSystemCheck`)
    txn = snapshot.transaction(FSCK_OPERATION, {}, clock=clock or dlog.clock)
    txn.read_files(plan.missing).remove(*plan.missing, data_change=True)
    result.version = txn.commit(operation_metrics=operation_metrics(plan.missing))
    log.info("FSCK of %s: version %d removed %d missing files", table, result.version, len(plan.missing))
    return result


__all__ = ["DEFAULT_HEAD_WORKERS", "RepairPlan", "RepairResult", "missing_files", "plan_repair", "repair", "rows_lost"]
