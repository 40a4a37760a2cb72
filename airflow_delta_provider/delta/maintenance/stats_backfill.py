"""Statistics backfill: recompute `add.stats` of files that lack them, or whose stats miss columns the table
now names, and re-add those files with `dataChange=false` (Delta Spark `StatisticsCollection.recompute`,
committed as `COMPUTE STATS`). A dry run unless `dry_run=False`.

Which files is `protocol.stats_backfill`; the engine's `stats_recomputer()` reads them (through their
deletion vectors) and measures them with the writer's own stats code. Each batch is then re-validated on
the latest snapshot: a file removed (or given a new deletion vector) since the plan is dropped, a changed
metadata or protocol refuses the batch (its stats would follow the old columns). The commit records the
files as read, so a remove racing the commit is a `ConcurrentDeleteReadError` with nothing committed;
concurrent appends never conflict (SnapshotIsolation, as for compaction). The re-added `add` is the
latest one for its path and DV, only `stats` and `dataChange` changed. No data file is written or deleted.
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
    check_bool,
    check_int,
)
from ..progress import Progress, report_progress, with_progress
from ..protocol.actions import AddFile
from ..protocol.stats import stats_columns
from ..protocol.stats_backfill import (
    COMPUTE_STATS_OPERATION,
    PlannedFile,
    StatsBackfillPlan,
    operation_metrics,
    operation_parameters,
    plan_stats_backfill,
)
from ..protocol.table_features import check_can_write
from ..snapshot import Snapshot
from .optimize import batch_failed, candidates, require_unchanged, table_layout

if TYPE_CHECKING:  # pragma: no cover
    from ..engines import StatsRecomputer

log = logging.getLogger(__name__)

#: What a backfill commit is checked as: `dataChange=false` adds, as compaction writes them.
_OPERATIONS = ["optimize", "commit"]


@dataclass
class StatsBackfillResult:
    """What a backfill planned and, unless a dry run, committed (`dropped`: planned files gone at apply)."""

    plan: StatsBackfillPlan
    dry_run: bool
    versions: list[int] = field(default_factory=list)
    committed: list[PlannedFile] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)

    @property
    def version(self) -> int | None:
        """The last version committed, None when nothing was (a dry run, or nothing to backfill)."""
        return self.versions[-1] if self.versions else None

    def to_dict(self) -> dict[str, Any]:
        """The CLI's `--json` shape: `version`, the metrics of what was (or, for a dry run, would be) done,
        and the plan."""
        done = self.plan.files if self.dry_run else self.committed
        metrics = operation_metrics(done, dropped=len(self.dropped), over_budget=self.plan.num_over_budget)
        return {
            "dry_run": self.dry_run,
            "version": self.version,
            "versions": list(self.versions),
            "read_version": self.plan.version,
            "metrics": metrics,
            "files_dropped": list(self.dropped),
            "plan": self.plan.summary(),
        }


def _latest_adds(snapshot: Snapshot, batch: list[PlannedFile]) -> dict[str, AddFile]:
    """The active `add` of each planned file's key (path and deletion vector) in `snapshot`."""
    keys = {p.add.key for p in batch}
    return {a.key: a for a in snapshot.all_files(with_stats=False) if a.key in keys}


def _batches(files: list[PlannedFile], size: int | None) -> list[list[PlannedFile]]:
    step = size or len(files) or 1
    return [files[i : i + step] for i in range(0, len(files), step)]


def _commit(
    dlog: DeltaLog,
    planned: Snapshot,
    batch: list[PlannedFile],
    stats: list[str],
    params: Mapping[str, Any],
    clock: Callable[[], int] | None,
    result: StatsBackfillResult,
) -> tuple[int | None, list[PlannedFile]]:
    """Re-validate `batch` on the latest snapshot (gone files go to `result.dropped`) and commit what is left;
    the version (None: nothing left) and the files committed."""
    snapshot = dlog.update()
    require_unchanged(snapshot, planned, "the statistics backfill")
    latest = _latest_adds(snapshot, batch)
    kept = [(p, s) for p, s in zip(batch, stats, strict=True) if p.add.key in latest]
    result.dropped.extend(p.add.path for p in batch if p.add.key not in latest)
    if not kept:
        return None, []
    adds = [dataclasses.replace(latest[p.add.key], stats=s, data_change=False) for p, s in kept]
    txn = snapshot.transaction(COMPUTE_STATS_OPERATION, params, clock=clock or dlog.clock)
    txn.read_files(adds).add(*adds)
    committed = [p for p, _ in kept]
    metrics = operation_metrics(committed, dropped=len(batch) - len(kept), over_budget=result.plan.num_over_budget)
    return txn.commit(operation_metrics=metrics), committed


_RECOMPUTING = "COMPUTE STATS: recomputing files"


@with_progress
def backfill_stats(
    table_or_log: DeltaLog | str | os.PathLike[str],
    *,
    dry_run: bool = True,
    where: str | None = None,
    max_files: int | None = None,
    max_bytes: int | None = None,
    files_per_commit: int | None = None,
    tighten: bool = False,
    max_workers: int | None = None,
    executor: StatsRecomputer | None = None,
    clock: Callable[[], int] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    progress: Progress | None = None,
) -> StatsBackfillResult:
    """Recompute the statistics of the files that need them and re-add those files (unless `dry_run`).

    :param where: a predicate on partition columns (`deltalog files` grammar) selecting the files.
    :param max_files: recompute at most this many files; the rest are reported as over budget.
    :param max_bytes: read at most about this many bytes of data files (the first file always).
    :param files_per_commit: commit after each batch of this many files, so a long run keeps its progress.
    :param tighten: also recompute stats that are wide (`tightBounds=false`, left by deletion vectors).
    :param executor: reads the files (default: the engine's `stats_recomputer(max_workers=...)`).
    :param progress: told the files recomputed after each commit (default: `delta.progress.PROGRESS`'s).
    :raises UnsupportedFeatureError, OperationNotAllowedError: a table this library must not write.
    :raises InvalidArgumentError: a bad argument, or stats properties that cannot be parsed.
    :raises LogCorruptedError: a planned file (or its deletion vector) unreadable or not holding the schema.
    :raises ConcurrentModificationError: a concurrent commit removed a file of the batch being committed, or
        changed the metadata or protocol (batches committed before stay).
    """
    check_bool(dry_run, "dry_run")
    check_bool(tighten, "tighten")
    for value, name in ((max_files, "max_files"), (max_bytes, "max_bytes"), (files_per_commit, "files_per_commit")):
        if value is not None:
            check_int(value, name, minimum=1)
    if max_workers is not None:
        check_int(max_workers, "max_workers", minimum=1)
    dlog = DeltaLog.of(table_or_log, storage_options, clock)
    planned = dlog.update()
    table = dlog.table_uri
    check_can_write(planned.protocol, planned.metadata, _OPERATIONS, table=table, version=planned.version)
    columns = stats_columns(planned.schema, planned.configuration, planned.partition_columns)
    plan = plan_stats_backfill(
        candidates(planned, where, "A statistics backfill's"),
        columns,
        table=table,
        version=planned.version,
        tighten=tighten,
        max_files=max_files,
        max_bytes=max_bytes,
        predicate=where,
    )
    result = StatsBackfillResult(plan, dry_run=dry_run)
    if dry_run or not plan.files:
        return result
    run = executor or dlog.engine.stats_recomputer(max_workers=max_workers)
    layout = table_layout(planned, table)
    params = operation_parameters([where] if where else [])
    files_done = 0
    report_progress(_RECOMPUTING, 0, len(plan.files))
    for batch in _batches(plan.files, files_per_commit):
        stats = run(layout, [p.add for p in batch], store=dlog.store)
        try:
            version, committed = _commit(dlog, planned, batch, stats, params, clock, result)
        except ConcurrentModificationError as exc:
            if not result.versions:  # nothing committed before it: the conflict as it is
                raise
            raise batch_failed(exc, "", result.versions, "; rerun for the rest") from exc
        files_done += len(batch)
        report_progress(_RECOMPUTING, files_done, len(plan.files))
        if version is None:
            continue
        result.versions.append(version)
        result.committed.extend(committed)
        log.info("COMPUTE STATS of %s: version %d re-added %d files with new stats", table, version, len(committed))
    return result


__all__ = ["StatsBackfillResult", "backfill_stats"]
