"""OPTIMIZE: compact small files with `dataChange=false` commits (Spark `OptimizeTableCommand`).

The engine's `bin_rewriter()` rewrites each bin (`write.data_files.compact_bin_files` on the local engine:
files of about the target size, a bin's rows past it rolling over to another file, as Delta's and
delta-rs's writers roll them; `compact_bin`, one file per bin, on Spark); the commit rebases over
concurrent appends (SnapshotIsolation, as Spark downgrades compaction) but not over a removed or changed
input. With `max_commit_bytes` bins commit in batches, so a long run keeps its progress; a later batch
starts from the latest version and refuses a metadata or protocol change since the plan (its layout would
not follow). A failed batch's error says which files it left for VACUUM. Nothing is deleted.

`zorder_by` makes it Delta's OPTIMIZE ZORDER BY: every file of each selected partition is rewritten by
the engine's `zorder_rewriter()`, sorted on the columns' z-order key (`protocol.zorder`), into files of
the target size; the result reports each column's file overlap before and after.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..delta_log import DeltaLog
from ..errors import (
    ConcurrentDeleteReadError,
    ConcurrentModificationError,
    DeltaError,
    InvalidArgumentError,
    MetadataChangedError,
    OperationNotAllowedError,
    ProtocolChangedError,
    check_bool,
    check_int,
)
from ..protocol.actions import AddFile
from ..protocol.optimize import (
    DEFAULT_MAX_DELETED_ROWS_RATIO,
    DEFAULT_MIN_NUM_FILES,
    DEFAULT_SMALL_FILE_BYTES,
    OptimizePlan,
    commit_batches,
    operation_metrics,
    operation_parameters,
    partition_key,
    plan_optimize,
    target_file_size,
)
from ..protocol.predicate import parse_predicate
from ..protocol.stats import tight_bounds_for
from ..protocol.table_features import check_can_write
from ..protocol.zorder import (
    ZOrderColumn,
    ZOrderPlan,
    check_not_clustered,
    file_ranges,
    overlap,
    plan_zorder,
    resolve_columns,
)
from ..protocol.zorder import operation_parameters as zorder_parameters
from ..snapshot import Snapshot
from ..write.data_files import TableLayout

if TYPE_CHECKING:  # pragma: no cover
    from ..engines import BinRewriter, ZOrderRewriter

log = logging.getLogger(__name__)


@dataclass
class OptimizeResult:
    """What an OPTIMIZE planned and, unless a dry run, committed."""

    plan: OptimizePlan
    dry_run: bool
    versions: list[int] = field(default_factory=list)
    removed: list[AddFile] = field(default_factory=list)
    added: list[AddFile] = field(default_factory=list)
    plan_partition_columns: tuple[str, ...] = ()
    physical_names: Mapping[str, str] = field(default_factory=dict)
    #: ZORDER BY columns (none: compaction)
    zorder_columns: tuple[ZOrderColumn, ...] = ()

    @property
    def version(self) -> int | None:
        """The last version committed, None when nothing was (a dry run, or nothing to compact)."""
        return self.versions[-1] if self.versions else None

    def partitions(self) -> dict[str, dict[str, int]]:
        """Per partition: files and bytes removed and added (planned, for a dry run)."""
        if self.dry_run:
            return self.plan.partitions()
        cols = self.plan_partition_columns
        out: dict[str, dict[str, int]] = {}
        for kind, files in (("removed", self.removed), ("added", self.added)):
            for f in files:
                p = out.setdefault(
                    partition_key(f.partition_values, cols, self.physical_names),
                    {"files_removed": 0, "bytes_removed": 0, "files_added": 0, "bytes_added": 0},
                )
                p[f"files_{kind}"] += 1
                p[f"bytes_{kind}"] += f.size
        return dict(sorted(out.items()))

    def zorder_overlap(self) -> dict[str, dict[str, int | None]]:
        """Per ZORDER BY column, the sum over files of how many other files' [min, max] ranges intersect
        theirs (`protocol.zorder.overlap`, partition by partition) in the planned files (`before`) and the
        files written (`after`; None for a dry run)."""
        planned = [b.files for b in self.plan.bins]
        written: dict[str, list[AddFile]] = {}
        for f in self.added:
            key = partition_key(f.partition_values, self.plan_partition_columns, self.physical_names)
            written.setdefault(key, []).append(f)
        out: dict[str, dict[str, int | None]] = {}
        for c in self.zorder_columns:
            before = sum(overlap(file_ranges(files, c.physical_path)) for files in planned)
            after = sum(overlap(file_ranges(files, c.physical_path)) for files in written.values())
            out[c.name] = {"before": before, "after": None if self.dry_run else after}
        return out

    def to_dict(self) -> dict[str, Any]:
        """The CLI's `--json` shape plus the plan's summary (JSON, XCom)."""
        removed = self.plan.num_files if self.dry_run else len(self.removed)
        planned_out = self.plan.expected_output_files if isinstance(self.plan, ZOrderPlan) else len(self.plan.bins)
        zorder = (
            {"zorder_by": list(self.plan.zorder_by), "zorder_overlap": self.zorder_overlap()}
            if isinstance(self.plan, ZOrderPlan)
            else {}
        )
        return {
            "dry_run": self.dry_run,
            "version": self.version,
            "versions": list(self.versions),
            "read_version": self.plan.version,
            "num_files_removed": removed,
            "num_files_added": planned_out if self.dry_run else len(self.added),
            "bytes_removed": self.plan.num_bytes if self.dry_run else sum(f.size for f in self.removed),
            "bytes_added": None if self.dry_run else sum(f.size for f in self.added),
            "partitions": self.partitions(),
            "num_files_over_budget": sum(len(b.files) for b in self.plan.over_budget),
            "bytes_over_budget": sum(b.num_bytes for b in self.plan.over_budget),
            "plan": self.plan.summary(),
        } | zorder


def table_layout(snapshot: Snapshot, table_uri: str) -> TableLayout:
    """What rewriting a bin needs: schema, configuration, partition columns, stats tightness."""
    return TableLayout(
        table_uri=table_uri,
        schema_json=snapshot.metadata.schema_json,
        configuration=dict(snapshot.metadata.configuration),
        partition_columns=tuple(snapshot.partition_columns),
        tight_bounds=tight_bounds_for(snapshot.protocol),
        physical_partition_columns=tuple(snapshot.physical_partition_columns.values()),
        version=snapshot.version,
    )


def candidates(snapshot: Snapshot, where: str | None, operation: str) -> list[AddFile]:
    """Active files (with stats) in the partitions `where` selects; `where` may name only partition columns
    (as Spark's), else the error names `operation` ("OPTIMIZE's", ...)."""
    if not where:
        return list(snapshot.all_files(with_stats=True))
    expr = parse_predicate(where, label="where")
    parts = {c.casefold() for c in snapshot.partition_columns}
    others = [c for c in expr.columns() if c.casefold() not in parts]
    if others:
        raise InvalidArgumentError(
            f"{operation} where may only use partition columns {list(snapshot.partition_columns)}, not {others}",
            argument="where",
            table=snapshot.table,
        )
    return snapshot.files(expr, with_stats=True)


def require_unchanged(snapshot: Snapshot, planned: Snapshot, operation: str) -> None:
    """The metadata and protocol still the plan's, else the typed conflict naming `operation`: a later batch
    works with the plan's layout, and its transaction does not read the window from the plan to its start."""
    for changed, error, what in (
        (snapshot.metadata != planned.metadata, MetadataChangedError, "metadata"),
        (snapshot.protocol != planned.protocol, ProtocolChangedError, "protocol"),
    ):
        if changed:
            raise error(
                f"The table's {what} changed after {operation} planned at version {planned.version}",
                table=snapshot.table,
                version=snapshot.version,
            )


def _require_active(snapshot: Snapshot, inputs: Sequence[AddFile], planned_at: int) -> None:
    """Every input still active with the same deletion vector, else the conflict a commit would raise."""
    active = {f.key for f in snapshot.all_files(with_stats=False)}
    for f in inputs:
        if f.key not in active:
            raise ConcurrentDeleteReadError(
                f"A file OPTIMIZE planned to compact at version {planned_at} was removed or changed by a "
                "concurrent update",
                table=snapshot.table,
                version=snapshot.version,
                file=f.path,
            )


#: What became of a failed batch's files, by where it failed.
_NOTHING_WRITTEN = "; this OPTIMIZE wrote no file for the batch"
_BINS_WRITTEN = "; any file this OPTIMIZE wrote for the batch's bins is not in the table and is left for VACUUM"
_FILES_WRITTEN = "; the {} files this OPTIMIZE wrote for the batch are not in the table and are left for VACUUM"


def batch_failed(exc: DeltaError, note: str, committed: Sequence[int], then: str = "") -> DeltaError:
    """The same error (class and fields) with `note` and the versions committed before it (`then`: what to do)."""
    if committed:
        note += f" (versions {list(committed)} were committed before{then})"
    out = copy.copy(exc)
    out.message = exc.message + note
    out.args = (out._render(),)  # the message with the error's table/version/file, as DeltaError writes it
    return out


def _flat(per_bin: Sequence[AddFile | Sequence[AddFile] | None]) -> list[AddFile]:
    """Each bin's new files in bin order: a rewriter's result per bin is its `add` (or None, no row left),
    or, where it rolls files over at the target size (the local engine), the list of them."""
    out: list[AddFile] = []
    for r in per_bin:
        if isinstance(r, AddFile):
            out.append(r)
        elif r is not None:
            out.extend(r)
    return out


def _rewriter(
    dlog: DeltaLog,
    executor: BinRewriter | ZOrderRewriter | None,
    columns: Sequence[ZOrderColumn],
    target_size: int,
    max_workers: int | None,
) -> Callable[..., list[AddFile]]:
    """The batch runner: the bin rewriter's adds, or the ZORDER rewriter's flattened."""
    if not columns:
        bins = executor or dlog.engine.bin_rewriter(max_workers=max_workers)
        return lambda layout, batch, **kw: _flat(bins(layout, batch, **kw))
    getter = getattr(dlog.engine, "zorder_rewriter", None)
    if executor is None and getter is None:
        raise OperationNotAllowedError(
            f"The {dlog.engine.name} engine cannot run OPTIMIZE ZORDER BY; use the local engine",
            table=dlog.table_uri,
        )
    zorder = executor or getter(max_workers=max_workers)
    return lambda layout, batch, **kw: [
        a for adds in zorder(layout, batch, columns, target_size=target_size, **kw) for a in adds
    ]


def optimize(
    table_or_log: DeltaLog | str | os.PathLike[str],
    *,
    target_size: int | None = None,
    min_num_files: int = DEFAULT_MIN_NUM_FILES,
    where: str | None = None,
    dry_run: bool = False,
    max_commit_bytes: int | None = None,
    min_small_file_ratio: float | None = None,
    small_file_bytes: int = DEFAULT_SMALL_FILE_BYTES,
    max_deleted_rows_ratio: float = DEFAULT_MAX_DELETED_ROWS_RATIO,
    max_workers: int | None = None,
    zorder_by: str | Sequence[str] | None = None,
    max_files: int | None = None,
    max_bytes: int | None = None,
    executor: BinRewriter | ZOrderRewriter | None = None,
    clock: Callable[[], int] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> OptimizeResult:
    """Compact the table's small files, or with `zorder_by` Z-order every file of the selected partitions
    (applies unless `dry_run`; deletes nothing).

    :param target_size: bytes per output file (default: `delta.targetFileSize`, else 100 MiB, delta-rs's default).
    :param where: a predicate on partition columns (`deltalog files` grammar).
    :param max_commit_bytes: commit after each batch of bins of about this many input bytes.
    :param max_files: with `max_bytes`, a budget of input files and bytes (`protocol.optimize.within_budget`):
        the bins that remove most files per byte (with `zorder_by`, the partitions whose files overlap most
        per byte) go first, the first always; the rest are reported over budget for a later run.
    :param zorder_by: columns (names, or one comma-separated text) to Z-order by; `min_num_files`,
        `min_small_file_ratio`, `small_file_bytes` and `max_deleted_rows_ratio` then do not apply (every
        file is rewritten, as Delta's ZORDER BY does). A column without statistics is logged as a warning.
    :param executor: runs the bins (default: the engine's `bin_rewriter(max_workers=...)`, or with
        `zorder_by` its `zorder_rewriter(max_workers=...)`).
    :raises ConcurrentModificationError: a concurrent commit removed or changed an input, or the metadata
        or protocol.
    :raises LogCorruptedError: an input file unreadable, or not holding the table's schema.
    :raises SchemaMismatchError: a new file's schema does not hold the table's (nothing committed for its batch).
    :raises InvalidArgumentError: a ZORDER BY column absent, a partition column, repeated or not primitive.
    :raises OperationNotAllowedError: ZORDER BY on a table with liquid clustering, or on an engine without
        a ZORDER executor.
    :raises ResourceLimitError: a partition whose z-order keys alone exceed the local engine's memory limit
        (larger rows are sorted through spill files).
    """
    check_bool(dry_run, "dry_run")
    if max_commit_bytes is not None:
        check_int(max_commit_bytes, "max_commit_bytes", minimum=1)
    if max_workers is not None:
        check_int(max_workers, "max_workers", minimum=1)
    check_int(small_file_bytes, "small_file_bytes", minimum=1)
    dlog = DeltaLog.of(table_or_log, storage_options)
    snapshot = planned = dlog.update()
    table = dlog.table_uri
    columns: list[ZOrderColumn] = []
    if zorder_by is not None:
        check_not_clustered(snapshot.domain_metadata, table=table, version=snapshot.version)
    check_can_write(snapshot.protocol, snapshot.metadata, ["optimize", "commit"], table=table, version=snapshot.version)
    size = target_file_size(snapshot.metadata.configuration, target_size)
    physical_names = snapshot.physical_partition_columns
    if zorder_by is not None:
        columns, no_stats = resolve_columns(
            zorder_by,
            snapshot.schema,
            snapshot.partition_columns,
            snapshot.metadata.configuration,
            table=table,
            version=snapshot.version,
        )
        if no_stats:  # Spark refuses unless its check is off; the rewrite still clusters them
            log.warning(
                "ZORDER BY on %s: no statistics are collected for %s (delta.dataSkippingNumIndexedCols / "
                "delta.dataSkippingStatsColumns), so data skipping cannot use their clustering",
                table,
                no_stats,
            )
        plan: OptimizePlan = plan_zorder(
            candidates(snapshot, where, "OPTIMIZE's"),
            snapshot.partition_columns,
            columns,
            table=table,
            version=snapshot.version,
            target_size=size,
            predicate=where,
            physical_names=physical_names,
            max_files=max_files,
            max_bytes=max_bytes,
        )
    else:
        plan = plan_optimize(
            candidates(snapshot, where, "OPTIMIZE's"),
            snapshot.partition_columns,
            table=table,
            version=snapshot.version,
            target_size=size,
            min_num_files=min_num_files,
            max_deleted_rows_ratio=max_deleted_rows_ratio,
            min_small_file_ratio=min_small_file_ratio,
            small_file_bytes=small_file_bytes,
            predicate=where,
            physical_names=physical_names,
            max_files=max_files,
            max_bytes=max_bytes,
        )
    result = OptimizeResult(
        plan,
        dry_run=dry_run,
        plan_partition_columns=tuple(snapshot.partition_columns),
        physical_names=physical_names,
        zorder_columns=tuple(columns),
    )
    if dry_run or not plan.bins:
        return result
    clock = clock or dlog.clock
    layout = dataclasses.replace(table_layout(snapshot, table), target_size=size)  # new files roll over at it
    predicates = [where] if where else []
    run = _rewriter(dlog, executor, columns, size, max_workers)
    params = zorder_parameters(predicates, columns) if columns else operation_parameters(predicates)
    for n, batch in enumerate(commit_batches(plan.bins, max_commit_bytes)):
        inputs = [f for b in batch for f in b.files]
        if n:  # a later batch starts from the latest version: nothing it relies on may have changed since the plan
            snapshot = dlog.update()
            try:
                require_unchanged(snapshot, planned, "OPTIMIZE")
                _require_active(snapshot, inputs, plan.version)
            except ConcurrentModificationError as exc:
                raise batch_failed(exc, _NOTHING_WRITTEN, result.versions) from exc
            layout = dataclasses.replace(layout, version=snapshot.version)  # what its errors name
        try:
            added = run(layout, batch, store=dlog.store, clock=clock)
        except DeltaError as exc:  # the batch's bins that were done wrote their files
            raise batch_failed(exc, _BINS_WRITTEN, result.versions) from exc
        txn = snapshot.transaction("OPTIMIZE", params)
        txn.read_files(inputs).remove(*inputs, data_change=False).add(*added)
        try:
            version = txn.commit(operation_metrics=operation_metrics(inputs, added))
        except ConcurrentModificationError as exc:
            raise batch_failed(exc, _FILES_WRITTEN.format(len(added)), result.versions) from exc
        result.versions.append(version)
        result.removed.extend(inputs)
        result.added.extend(added)
        log.info("OPTIMIZE of %s: version %d replaced %d files with %d", table, version, len(inputs), len(added))
    return result


__all__ = ["OptimizeResult", "candidates", "optimize", "require_unchanged", "table_layout"]
