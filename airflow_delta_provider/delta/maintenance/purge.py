"""PURGE (Delta's `REORG TABLE ... APPLY (PURGE)`): rewrite files with deletion vectors so the rows they hide
are physically gone (Spark `DeltaReorgTableCommand`).

A dry run by default. The engine's `bin_rewriter()` rewrites each bin through the files' vectors (as OPTIMIZE
does); every new file must hold exactly the rows its inputs show (`numRecords` minus the vectors' cardinality)
before anything commits. A plan applied later is re-validated first: a file removed, or whose vector changed,
since the plan is dropped with its reason. A concurrent commit that removes or changes an input between the
rewrite and the commit is the typed conflict (the new files are left for VACUUM); appends rebase. The old files
and vectors stay on storage until VACUUM deletes them after `delta.deletedFileRetentionDuration`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..delta_log import DeltaLog
from ..errors import (
    ConcurrentModificationError,
    DeltaError,
    InvalidArgumentError,
    LogCorruptedError,
    check_bool,
    check_int,
)
from ..progress import Progress, report_progress, with_progress
from ..protocol.actions import AddFile, RemoveFile, canonical_path
from ..protocol.optimize import commit_batches, expected_rows, num_records, operation_metrics, target_file_size
from ..protocol.purge import REORG_OPERATION, PurgePlan, operation_parameters, plan_purge, revalidate
from ..protocol.table_features import check_can_write
from ..snapshot import Snapshot
from .optimize import batch_failed, candidates, table_layout

if TYPE_CHECKING:  # pragma: no cover
    from ..engines import BinRewriter

log = logging.getLogger(__name__)

_BINS_WRITTEN = "; any file this PURGE wrote is not in the table and is left for VACUUM"
_FILES_WRITTEN = "; the {} files this PURGE wrote are not in the table and are left for VACUUM"


@dataclass
class PurgeResult:
    """What a PURGE planned and, unless a dry run, committed (one version per batch)."""

    plan: PurgePlan
    dry_run: bool
    versions: list[int] = field(default_factory=list)
    removed: list[AddFile] = field(default_factory=list)
    added: list[AddFile] = field(default_factory=list)
    #: files re-validation left out, at apply or before a later batch: {"path", "reason"}
    dropped: list[dict[str, str]] = field(default_factory=list)
    #: when VACUUM may first delete the old files and vectors (the last removes' time plus the table's
    #: `delta.deletedFileRetentionDuration`): until then the purged rows stay on storage, for time travel
    erasable_after_ms: int | None = None

    @property
    def version(self) -> int | None:
        """The last version committed, None when nothing was (a dry run, or nothing to purge)."""
        return self.versions[-1] if self.versions else None

    def to_dict(self) -> dict[str, Any]:
        """The CLI's `--json` shape; `plan` is what `purge(plan=...)` takes to apply a dry run later."""
        plan = self.plan
        removed = plan.files if self.dry_run else self.removed
        return {
            "dry_run": self.dry_run,
            "version": self.version,
            "versions": list(self.versions),
            "read_version": plan.version,
            "num_files_removed": len(removed),
            "num_files_added": None if self.dry_run else len(self.added),
            "bytes_removed": sum(f.size for f in removed),
            "bytes_added": None if self.dry_run else sum(f.size for f in self.added),
            "num_deleted_rows_purged": sum(f.deletion_vector.cardinality for f in removed if f.deletion_vector),
            "dropped": list(self.dropped),
            "erasable_after_ms": self.erasable_after_ms,
            "metrics": {} if self.dry_run else operation_metrics(self.removed, self.added),
            "plan": plan.to_dict(),
        }


def _active(snapshot: Snapshot) -> dict[str, AddFile]:
    return {canonical_path(f.path): f for f in snapshot.all_files(with_stats=True)}


def _check_rows(plan: PurgePlan, added: list[AddFile | None], table: str, version: int) -> None:
    """Each new file holds the rows its inputs show, else nothing commits (a wrong DV read loses or revives rows)."""
    for b, new in zip(plan.bins, added, strict=True):
        want = expected_rows(b.files)
        got = 0 if new is None else num_records(new)
        if want is not None and got is not None and got != want:
            raise LogCorruptedError(
                f"PURGE rewrote {len(b.files)} files as one of {got} rows, but they show {want} rows",
                table=table,
                version=version,
                file=b.files[0].path,
            )


_REWRITING = "PURGE: rewriting bins"


@with_progress
def purge(
    table_or_log: DeltaLog | str | os.PathLike[str],
    *,
    min_deleted_ratio: float = 0.0,
    where: str | None = None,
    dry_run: bool = True,
    plan: Mapping[str, Any] | None = None,
    target_size: int | None = None,
    max_files: int | None = None,
    max_bytes: int | None = None,
    max_commit_bytes: int | None = None,
    max_workers: int | None = None,
    executor: BinRewriter | None = None,
    clock: Callable[[], int] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    progress: Progress | None = None,
) -> PurgeResult:
    """Rewrite the files whose deletion vector hides at least `min_deleted_ratio` of their rows (0: every file with
    one) without those rows; plans only unless `dry_run=False`.

    :param where: a predicate on partition columns (`deltalog files` grammar), as REORG's WHERE.
    :param plan: apply an earlier dry run's `to_dict()["plan"]` (re-validated; the other selection arguments unused).
    :param target_size: bytes per output file (default: `delta.targetFileSize`, else OPTIMIZE's default).
    :param max_files: with `max_bytes`, a budget of input files and bytes: the bins with most dead bytes go first,
        the rest are reported over budget.
    :param max_commit_bytes: commit after each batch of bins of about this many input bytes (progress is kept).
    :param executor: runs the bins (default: the engine's `bin_rewriter(max_workers=...)`).
    :param progress: told the bins rewritten after each commit (default: `delta.progress.PROGRESS`'s).
    :raises UnsupportedFeatureError: the table uses a feature a rewrite cannot preserve (row tracking, ...).
    :raises ConcurrentModificationError: a concurrent commit removed or changed an input.
    :raises LogCorruptedError: an input unreadable, or a new file not holding the rows its inputs show.
    """
    check_bool(dry_run, "dry_run")
    for name, value in (("max_commit_bytes", max_commit_bytes), ("max_workers", max_workers)):
        if value is not None:
            check_int(value, name, minimum=1)
    dlog = DeltaLog.of(table_or_log, storage_options)
    snapshot = dlog.update()
    table = dlog.table_uri
    check_can_write(snapshot.protocol, snapshot.metadata, ["optimize", "commit"], table=table, version=snapshot.version)
    if plan is None:
        the_plan = plan_purge(
            candidates(snapshot, where, "PURGE's"),
            snapshot.partition_columns,
            table=table,
            version=snapshot.version,
            target_size=target_file_size(snapshot.metadata.configuration, target_size),
            min_deleted_ratio=min_deleted_ratio,
            predicate=where,
            physical_names=snapshot.physical_partition_columns,
            max_files=max_files,
            max_bytes=max_bytes,
        )
    else:
        if not isinstance(plan, Mapping):
            raise InvalidArgumentError("plan must be a dry run's to_dict()['plan']", argument="plan", table=table)
        earlier = PurgePlan.from_dict(plan)
        if earlier.table != table or earlier.version > snapshot.version:
            raise InvalidArgumentError(
                f"The plan was made for {earlier.table} at version {earlier.version}, not this table up to its "
                f"version {snapshot.version}",
                argument="plan",
                table=table,
            )
        the_plan = revalidate(earlier, _active(snapshot), snapshot.version)
        for d in the_plan.dropped:
            log.warning("PURGE of %s: %s left out: %s", table, d["path"], d["reason"])
    result = PurgeResult(the_plan, dry_run=dry_run, dropped=list(the_plan.dropped))
    if dry_run or not the_plan.bins:
        return result
    run = executor or dlog.engine.bin_rewriter(max_workers=max_workers)
    clock = clock or dlog.clock
    params = operation_parameters([the_plan.predicate] if the_plan.predicate else [])
    bins_done = 0
    report_progress(_REWRITING, 0, len(the_plan.bins))
    for n, bins in enumerate(commit_batches(the_plan.bins, max_commit_bytes)):
        batch = dataclasses.replace(the_plan, bins=bins, dropped=[], over_budget=[])
        bins_done += len(bins)
        if n:  # a later batch starts from the latest version, its files re-validated there
            snapshot = dlog.update()
            check_can_write(
                snapshot.protocol, snapshot.metadata, ["optimize", "commit"], table=table, version=snapshot.version
            )
            batch = revalidate(batch, _active(snapshot), snapshot.version)
            result.dropped.extend(batch.dropped)
            if not batch.bins:
                report_progress(_REWRITING, bins_done, len(the_plan.bins))
                continue
        try:
            added = run(table_layout(snapshot, table), batch.bins, store=dlog.store, clock=clock)
        except DeltaError as exc:
            raise batch_failed(exc, _BINS_WRITTEN, result.versions) from exc
        new = [a for a in added if a is not None]
        try:
            _check_rows(batch, added, table, snapshot.version)
        except DeltaError as exc:
            raise batch_failed(exc, _FILES_WRITTEN.format(len(new)), result.versions) from exc
        txn = snapshot.transaction(REORG_OPERATION, params, clock=clock)
        txn.read_files(batch.files).remove(*batch.files, data_change=False).add(*new)
        removed_at = max(a.del_timestamp for a in txn.actions if isinstance(a, RemoveFile))
        try:
            version = txn.commit(operation_metrics=operation_metrics(batch.files, new))
        except ConcurrentModificationError as exc:
            raise batch_failed(exc, _FILES_WRITTEN.format(len(new)), result.versions) from exc
        result.versions.append(version)
        result.erasable_after_ms = removed_at + snapshot.tombstone_retention_ms
        result.removed.extend(batch.files)
        result.added.extend(new)
        log.info("PURGE of %s: version %d replaced %d files with %d", table, version, len(batch.files), len(new))
        report_progress(_REWRITING, bins_done, len(the_plan.bins))
    return result


__all__ = ["PurgeResult", "purge"]
