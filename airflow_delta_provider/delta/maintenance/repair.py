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
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ..delta_log import DeltaLog
from ..errors import check_bool, check_int
from ..protocol.actions import AddFile
from ..protocol.deletion_vectors import dv_location
from ..protocol.repair import FSCK_OPERATION, RepairPlan, operation_metrics, rows_lost
from ..protocol.table_features import check_can_write
from ..read.deletion_vectors import store_path
from ..snapshot import Snapshot
from ..storage import LogStore

log = logging.getLogger(__name__)

#: HEAD requests in flight at once (delta-rs and Spark run these sequentially or per executor task).
DEFAULT_HEAD_WORKERS = 8


def _gone(store: LogStore, path: str) -> bool:
    try:
        return store.head(path) is None
    except NotADirectoryError:  # a local path under a file: nothing there
        return True


def missing_files(
    store: LogStore,
    table_root: str,
    files: Sequence[AddFile],
    *,
    deletion_vectors: bool = False,
    max_workers: int = DEFAULT_HEAD_WORKERS,
    table: str | None = None,
) -> list[AddFile]:
    """The files among `files` whose data file (with `deletion_vectors`, or stored DV) storage no longer
    holds, in order; a storage failure other than "not found" raises (`StorageError`)."""

    def paths(f: AddFile) -> list[str]:
        out = [store_path(store, table_root, f.path)]
        dv = f.deletion_vector
        if deletion_vectors and dv is not None and dv.cardinality > 0:
            loc = dv_location(dv, table_root, table=table, file=f.path)
            if loc.kind == "file":
                out.append(
                    store.join(table_root, *loc.relative_path.split("/")) if loc.relative_path else loc.path or ""
                )
        return out

    def probe(f: AddFile) -> bool:
        return any(_gone(store, p) for p in paths(f))

    if not files:
        return []
    with ThreadPoolExecutor(max_workers=min(max_workers, len(files)), thread_name_prefix="delta-head") as pool:
        gone = list(pool.map(probe, files))
    return [f for f, g in zip(files, gone, strict=True) if g]


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


def plan_repair(snapshot: Snapshot, *, max_workers: int = DEFAULT_HEAD_WORKERS) -> RepairPlan:
    """The active files of `snapshot` storage no longer holds (one HEAD each)."""
    files = list(snapshot.all_files(with_stats=True))
    missing = missing_files(snapshot.store, snapshot.table, files, max_workers=max_workers, table=snapshot.table)
    return RepairPlan(snapshot.table, snapshot.version, num_files_checked=len(files), missing=missing)


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
