"""VACUUM on Spark executors: the listing split by directory, the plan joined in Spark, deletes on the executors.

`SparkVacuumExecutor` is the Spark engine's `VacuumExecutor` (`SparkEngine.vacuum_executor()`)
keeps the checks, the retention rules and the `VACUUM START`/`END` commits on the driver and runs these here:

* **Listing** (as Delta's `DeltaFileOperations.recursiveListDirs`): one task lists the table root one level
  (`store.list_level`; `_delta_log` and hidden directories pruned, as `protocol.vacuum.is_hidden` says);
  the entries are spread round-robin over `parallelism` tasks, each listing its directories recursively
  (`store.list_recursive`). The per-file rules (`protocol.vacuum.listed_candidate`: mtime before the
  cutoff, no hidden part, ...) run where the files are listed, so only candidates leave the executors.
* **Plan**: the candidates anti-joined with the protected paths (`protocol.vacuum.protected_paths`: active
  files, tombstones within retention, their DV files) on the path and on its DV alias (`dv_alias_key`).
  When the grace period for untracked files reaches back past the cutoff (`protocol.vacuum.grace_matters`:
  a retention shorter than the grace), the candidates are also left-joined with the expired tombstones
  (`expired_tombstone_paths`, built as the protected paths are): an untracked candidate `within_grace`
  is left out of the plan and counted (`grace_kept_files`, `grace_kept_bytes`).
  The protected paths come from the Spark engine's state when the snapshot was replayed on Spark, else
  from the driver's snapshot (`read.protected_files.protected_set`); they are persisted and counted first
  (one job builds the cache both joins read) and, when at most `broadcast_limit`, broadcast to the joins,
  which then shuffle nothing.
* **Partitions**: nothing here leaves a partition count to `spark.sql.shuffle.partitions` where it would
  stick: the protected paths are de-duplicated into at most `parallelism` partitions, every frame that is
  persisted or feeds the delete tasks is coalesced to at most `parallelism` partitions, and a plan carried
  inline is re-validated and deleted in one task per 1000 files (at most `parallelism`). A cached plan
  keeps its shuffles' partition count (`spark.sql.optimizer.canChangeCachedPlanOutputPartitioning` is off
  by default, so adaptive execution does not coalesce it): a tiny table's VACUUM otherwise ran every scan
  of its caches, and its `mapInArrow` deletes, as 200 tasks. The session's settings are never changed.
* **Dry run**: with `plan_dir`, the executors write the file list there as JSON lines (`{"path", "size"}`,
  one directory per plan, never overwritten) and the plan records it in `files_uri`; the driver gets counts
  and bytes per directory from a DataFrame aggregation, and the file list itself only when it holds at most
  `collect_limit` files (the plan's dict then has them as the local engine's does). A larger plan carries
  counts only (`VacuumPlan.totals`): it is applied from `files_uri` or, without `plan_dir`, only by the
  same executor, from its file list kept cached on the cluster until then (`release()` frees it unapplied).
* **Apply**: the plan's files (inline, else read from `files_uri` or the cache, and checked against the
  plan's count) are re-validated against the latest snapshot and storage: hash-partitioned by path, each
  task runs the per-row rules (`protocol.vacuum.refused_entry`, which refuses the whole plan;
  `plan_entry_relative`; duplicates; `storage.batch.stat_entries` and `protocol.vacuum.recheck`: the
  file as it is now must match the plan's listed size and mtime, be a regular file older than the cutoff),
  then the same joins (protected paths; expired tombstones for the grace period), each dropped entry with
  its reason, the missing ones apart; the executors delete what stays in batches (`storage.batch.delete_relative`:
  `batch_size` files per `delete_many`, one S3 DeleteObjects each, retried), returning files and bytes per
  directory that the driver sums. Directories left empty are removed by the driver on local stores.

DataFrame API only (`mapInArrow`, joins, aggregations, the JSON reader and writer), so it also runs over
Spark Connect, except the protected paths of a snapshot the Spark engine replayed (its state is an RDD).
Executors need pyarrow (`mapInArrow`), this package (`--py-files`) and, for object stores, fsspec and
s3fs: each task builds its store from the table URI and the storage options, which travel inside the
task's closure, never in a DataFrame.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ...errors import OperationNotAllowedError
from ...protocol.actions import AddFile, RemoveFile, action_from_json
from ...protocol.vacuum import (
    DUPLICATE,
    FULL,
    HIDDEN,
    MISSING,
    PROTECTED,
    UNTRACKED_GRACE,
    ListedFile,
    LoggedFile,
    PlannedFile,
    PlanTotals,
    VacuumPlan,
    VacuumPlanRefusedError,
    dv_alias_key,
    expired_tombstone_paths,
    grace_matters,
    is_hidden,
    listed_candidate,
    partition_of,
    plan_entry_relative,
    protected_paths,
    recheck,
    refused_entry,
    within_grace,
)
from ...read.protected_files import expired_set, protected_set
from ...storage import LogStore, store_for
from ...storage.batch import delete_relative, remove_empty_dirs, stat_entries
from .. import Deleted, Revalidation

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

    from ...delta_log import DeltaLog
    from ...snapshot import Snapshot

log = logging.getLogger(__name__)

#: Files a plan may hold and still be collected to the driver (its dict then lists them).
DEFAULT_COLLECT_LIMIT = 100_000
#: Protected paths at most this many are broadcast to the plan's joins (about 10 MB, Spark's default
#: broadcast threshold); more are sort-merge joined.
DEFAULT_BROADCAST_LIMIT = 100_000
#: Planned files per task when a plan carried inline is re-validated and deleted (one delete batch).
_FILES_PER_TASK = 1000
#: Rows per Arrow batch the executors yield.
_BATCH_ROWS = 8192

LISTED_SCHEMA = "path string, size long, modification_time long, directory boolean"
CANDIDATE_SCHEMA = "path string, size long, modification_time long, rel string, alias string, partition string"
PLAN_FILE_SCHEMA = "path string, size long, modification_time long"
#: a plan entry after the per-row rules: `reason` (null: so far deletable; `REFUSED:<why>` refuses the
#: plan), `young` (within the grace period, if untracked)
ENTRY_SCHEMA = f"{CANDIDATE_SCHEMA}, reason string, young boolean"
DELETED_SCHEMA = "partition string, files long, bytes long"
#: `ENTRY_SCHEMA.reason` of an entry that refuses the whole plan (`protocol.vacuum.refused_entry`)
REFUSED = "refused:"
_LISTED = (("path", pa.string()), ("size", pa.int64()), ("modification_time", pa.int64()), ("directory", pa.bool_()))
_CANDIDATE = (
    ("path", pa.string()),
    ("size", pa.int64()),
    ("modification_time", pa.int64()),
    ("rel", pa.string()),
    ("alias", pa.string()),
    ("partition", pa.string()),
)
_ENTRY = (*_CANDIDATE, ("reason", pa.string()), ("young", pa.bool_()))
_DELETED = (("partition", pa.string()), ("files", pa.int64()), ("bytes", pa.int64()))

Row = tuple[Any, ...]
ArrowTask = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


# -- executor side: listing ------------------------------------------------------------------------------
def _batches(rows: Iterable[Row], fields: Sequence[tuple[str, pa.DataType]]) -> Iterator[pa.RecordBatch]:
    """`rows` as Arrow batches of at most `_BATCH_ROWS` rows."""
    chunk: list[Row] = []

    def flush() -> pa.RecordBatch:
        columns = list(zip(*chunk, strict=True)) if chunk else [() for _ in fields]
        arrays = [pa.array(list(c), t) for c, (_, t) in zip(columns, fields, strict=True)]
        return pa.RecordBatch.from_arrays(arrays, [n for n, _ in fields])

    for row in rows:
        chunk.append(row)
        if len(chunk) >= _BATCH_ROWS:
            yield flush()
            chunk = []
    if chunk:
        yield flush()


def _root(store: LogStore, table_uri: str) -> str:
    return store.join(table_uri).rstrip("/")


def _candidate(path: str, size: int, mtime: int, cutoff_ms: int, columns: Sequence[str]) -> Row | None:
    """A `CANDIDATE_SCHEMA` row for a listed file FULL mode may delete if nothing protects it."""
    rel = listed_candidate(ListedFile(path, size, mtime), cutoff_ms, columns)
    if rel is None:
        return None
    stored = path.strip("/")
    return stored, size, mtime, rel, dv_alias_key(rel), partition_of(stored)


def list_root_task(table_uri: str, options: Mapping[str, Any], cutoff_ms: int, columns: Sequence[str]) -> ArrowTask:
    """`mapInArrow` over one row: the table root's directories (hidden ones and `_delta_log` pruned) and
    its files that pass the per-file rules, as `LISTED_SCHEMA` rows."""
    options, columns = dict(options), list(columns)

    def rows(store: LogStore) -> Iterator[Row]:
        for entry in store.list_level(_root(store, table_uri)):
            if entry.is_dir:
                if not is_hidden(entry.name, columns):
                    yield entry.name, 0, 0, True
            elif _candidate(entry.name, entry.size, entry.modification_time, cutoff_ms, columns) is not None:
                yield entry.name, entry.size, entry.modification_time, False

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        if any(b.num_rows for b in batches):
            yield from _batches(rows(store_for(table_uri, options)), _LISTED)

    return run


def expand_task(table_uri: str, options: Mapping[str, Any], cutoff_ms: int, columns: Sequence[str]) -> ArrowTask:
    """`mapInArrow` over `LISTED_SCHEMA` rows: each directory listed recursively, its files and the root's
    passed through the per-file rules, as `CANDIDATE_SCHEMA` rows (paths relative to the root, as stored)."""
    options, columns = dict(options), list(columns)

    def rows(store: LogStore, batches: Iterator[pa.RecordBatch]) -> Iterator[Row]:
        root = _root(store, table_uri)
        for batch in batches:
            for path, size, mtime, directory in zip(*(batch.column(n).to_pylist() for n, _ in _LISTED), strict=True):
                if not directory:
                    found = _candidate(path, size, mtime, cutoff_ms, columns)
                    if found is not None:
                        yield found
                    continue
                for info in store.list_recursive(store.join(table_uri, *path.split("/"))):
                    if info.path.startswith(root + "/"):
                        found = _candidate(
                            info.path[len(root) + 1 :], info.size, info.modification_time, cutoff_ms, columns
                        )
                        if found is not None:
                            yield found

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from _batches(rows(store_for(table_uri, options), batches), _CANDIDATE)

    return run


# -- executor side: protected paths, plan entries, deletes ----------------------------------------------
def protected_task(table_uri: str, cutoff_ms: int) -> Callable[[Iterable[Mapping[str, Any]]], Iterator[Row]]:
    """`mapPartitions` over reconciled file actions (`{"add": ...}` / `{"remove": ...}` rows of the Spark
    engine's state): the protected relative paths (`protocol.vacuum.protected_paths`), one per row."""

    def run(rows: Iterable[Mapping[str, Any]]) -> Iterator[Row]:
        active: list[LoggedFile] = []
        tombstones: list[LoggedFile] = []
        for row in rows:
            action = action_from_json(row)
            if isinstance(action, AddFile):
                active.append(LoggedFile(action.path, action.deletion_vector))
            elif isinstance(action, RemoveFile):
                tombstones.append(
                    LoggedFile(action.path, action.deletion_vector, action.deletion_timestamp, action.size)
                )
        for rel in protected_paths(active, tombstones, cutoff_ms=cutoff_ms, table_root=table_uri):
            yield (rel,)

    return run


def expired_task(table_uri: str, cutoff_ms: int) -> Callable[[Iterable[Mapping[str, Any]]], Iterator[Row]]:
    """`mapPartitions` over reconciled file actions: the relative paths of the tombstones deleted at or
    before `cutoff_ms` and of their DV files (`protocol.vacuum.expired_tombstone_paths`), one per row."""

    def run(rows: Iterable[Mapping[str, Any]]) -> Iterator[Row]:
        tombstones: list[LoggedFile] = []
        for row in rows:
            action = action_from_json(row)
            if isinstance(action, RemoveFile):
                tombstones.append(
                    LoggedFile(action.path, action.deletion_vector, action.deletion_timestamp, action.size)
                )
        for rel in expired_tombstone_paths(tombstones, cutoff_ms=cutoff_ms, table_root=table_uri):
            yield (rel,)

    return run


def entry_task(
    table_uri: str,
    options: Mapping[str, Any],
    columns: Sequence[str],
    *,
    cutoff_ms: int,
    now_ms: int,
    grace_ms: int,
) -> ArrowTask:
    """`mapInArrow` over plan entries (`PLAN_FILE_SCHEMA`, hash-partitioned by path so that repeats meet in
    one task): `ENTRY_SCHEMA` rows, `reason` set by the per-row rules in `protocol.vacuum.revalidate`'s
    order: `REFUSED:<why>` (`refused_entry`: the driver refuses the plan), `HIDDEN` (`plan_entry_relative`;
    `rel` null), `DUPLICATE`, then what `recheck` finds in storage now (`storage.batch.stat_entries`),
    the grace period aside: `young` says whether the file is `within_grace`, which only drops it when the
    driver's join finds it untracked. The protected paths are the driver's join too."""
    options, columns = dict(options), list(columns)

    def rows(store: Any, batches: Iterator[pa.RecordBatch]) -> Iterator[Row]:
        seen: set[str] = set()
        for batch in batches:
            names = ("path", "size", "modification_time")
            cols = (batch.column(n).to_pylist() for n in names)
            entries = [PlannedFile(p, s or 0, m) for p, s, m in zip(*cols, strict=True)]
            out: list[list[Any]] = []
            pending: list[int] = []
            for f in entries:
                why = refused_entry(f.path)
                rel = None if why is not None else plan_entry_relative(f.path, columns)
                row = [f.path, f.size, f.modification_time, rel, None if rel is None else dv_alias_key(rel)]
                row += [partition_of(f.path), None, False]
                if why is not None:
                    row[6] = REFUSED + why
                elif rel is None:
                    row[6] = HIDDEN
                elif f.path in seen:
                    row[6] = DUPLICATE
                else:
                    seen.add(f.path)
                    pending.append(len(out))
                out.append(row)
            found = stat_entries(store, table_uri, [out[i][0] for i in pending]) if pending else []
            for i, now in zip(pending, found, strict=True):
                f = entries[i]
                # tracked=True: every rule but the grace period, which the driver applies to untracked files
                why = recheck(f, now, cutoff_ms=cutoff_ms, now_ms=now_ms, grace_ms=grace_ms, tracked=True)
                out[i][6] = why
                if why is None and now is not None and f.modification_time is not None:
                    mtime = max(f.modification_time, now.modification_time)
                    out[i][7] = within_grace(mtime, now_ms=now_ms, grace_ms=grace_ms)
            yield from map(tuple, out)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from _batches(rows(store_for(table_uri, options), batches), _ENTRY)

    return run


def delete_task(table_uri: str, options: Mapping[str, Any], batch_size: int) -> ArrowTask:
    """`mapInArrow` over (path, size, partition) rows: delete them in batches of `batch_size`
    (`storage.batch.delete_relative`); one `DELETED_SCHEMA` row per directory: files handled, bytes."""
    options = dict(options)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        store = store_for(table_uri, options)
        done: dict[str, list[int]] = {}
        pending: list[tuple[str, int, str]] = []

        def flush() -> None:
            delete_relative(store, table_uri, [p for p, _, _ in pending], batch_size)
            for _, size, part in pending:
                entry = done.setdefault(part, [0, 0])
                entry[0] += 1
                entry[1] += size or 0
            pending.clear()

        for batch in batches:
            cols = (batch.column(n).to_pylist() for n in ("path", "size", "partition"))
            for row in zip(*cols, strict=True):
                pending.append(row)
                if len(pending) >= batch_size:
                    flush()
        if pending:
            flush()
        yield from _batches(((part, n, b) for part, (n, b) in done.items()), _DELETED)

    return run


# -- driver side -----------------------------------------------------------------------------------------
#: `protocol.vacuum.partition_of(path)` in SQL (no regular expression: names may hold anything).
_PARTITION_OF_PATH = (
    "CASE WHEN instr(path, '/') = 0 THEN '' "
    "ELSE substring(path, 1, length(path) - length(substring_index(path, '/', -1)) - 1) END"
)


def _planned(row: Any) -> PlannedFile:
    """A `PlannedFile` from a row with path, size and modification_time."""
    mtime = row["modification_time"]
    return PlannedFile(row["path"], int(row["size"] or 0), None if mtime is None else int(mtime))


def _by_partition(rows: Iterable[Any]) -> dict[str, dict[str, int]]:
    """`VacuumPlan.partitions()` from rows of (partition, files, bytes)."""
    return {r["partition"]: {"files": int(r["files"]), "bytes": int(r["bytes"] or 0)} for r in rows}


def _default_parallelism(spark: SparkSession) -> int:
    try:
        return max(1, int(spark.sparkContext.defaultParallelism))
    except Exception:  # Spark Connect has no SparkContext
        return max(1, int(spark.conf.get("spark.sql.shuffle.partitions") or 200))


class SparkVacuumExecutor:
    """The Spark engine's `VacuumExecutor` (see the module doc).

    :param spark: the session (classic or Spark Connect).
    :param storage_options: the table's storage options, for the stores the executors build.
    :param plan_dir: where dry runs write their file lists (`<plan_dir>/vacuum-plan-v<version>-<uuid>/`);
        without it a plan above `collect_limit` files carries counts only, and its file list stays cached
        on the cluster (one plan at a time) until this executor applies it or `release()` is called.
    :param collect_limit: most files a plan (or the dropped files of a re-validation) collected to the driver.
    :param parallelism: listing tasks, and the most partitions a persisted frame or the delete tasks get
        (default: the session's default parallelism).
    :param broadcast_limit: most protected paths broadcast to the joins (above, they are sort-merge joined).
    """

    in_process = False

    def __init__(
        self,
        spark: SparkSession,
        *,
        storage_options: Mapping[str, Any] | None = None,
        plan_dir: str | None = None,
        collect_limit: int = DEFAULT_COLLECT_LIMIT,
        parallelism: int | None = None,
        broadcast_limit: int = DEFAULT_BROADCAST_LIMIT,
    ) -> None:
        if collect_limit < 0:
            raise ValueError("collect_limit must be >= 0")
        if broadcast_limit < 0:
            raise ValueError("broadcast_limit must be >= 0")
        self.spark = spark
        self.storage_options = dict(storage_options or {})
        self.plan_dir = plan_dir
        self.collect_limit = collect_limit
        self.parallelism = parallelism or _default_parallelism(spark)
        self.broadcast_limit = broadcast_limit
        #: the last plan made without a file list, with its files (persisted) for the same executor's apply
        self._unlisted: tuple[VacuumPlan, DataFrame] | None = None
        #: frames the cached list of `_unlisted` was computed from, freed with it
        self._unlisted_inputs: list[DataFrame] = []

    # -- frames ------------------------------------------------------------------------------------------
    def candidates(self, dlog: DeltaLog, *, cutoff_ms: int, partition_columns: Sequence[str]) -> DataFrame:
        """The listed files FULL mode may delete if nothing protects them (`CANDIDATE_SCHEMA`)."""
        table, options = dlog.table_uri, self.storage_options
        root = self.spark.createDataFrame([("",)], "dir string")
        level = root.mapInArrow(list_root_task(table, options, cutoff_ms, partition_columns), LISTED_SCHEMA)
        return level.repartition(self.parallelism).mapInArrow(
            expand_task(table, options, cutoff_ms, partition_columns), CANDIDATE_SCHEMA
        )

    def protected(self, snapshot: Snapshot, *, cutoff_ms: int, table_uri: str) -> DataFrame:
        """The snapshot's protected relative paths (`rel`, each once): on the cluster when the Spark engine
        replayed it, else from the driver's snapshot (`read.protected_files.protected_set`, its Arrow fast path).

        Lazy: the plan and the re-validation persist it and count it first (`_protected_side`), since it feeds
        two joins (the path's and the DV alias's; `.explain()` shows two scans of it, so the state's
        protected-path task would run twice). De-duplicated by a shuffle into at most `parallelism`
        partitions (the state's count when smaller), not `spark.sql.shuffle.partitions`: it is cached."""
        return self._paths(snapshot, protected_task(table_uri, cutoff_ms), protected_set, cutoff_ms, table_uri)

    def expired(self, snapshot: Snapshot, *, cutoff_ms: int, table_uri: str) -> DataFrame:
        """The snapshot's expired tombstones and their DV files (`rel`, each once): tracked files the grace
        period does not apply to; made as `protected` makes its paths (lazy, persisted by the caller)."""
        return self._paths(snapshot, expired_task(table_uri, cutoff_ms), expired_set, cutoff_ms, table_uri)

    def _paths(
        self,
        snapshot: Snapshot,
        task: Callable[..., Any],
        local: Callable[..., set[str]],
        cutoff_ms: int,
        table_uri: str,
    ) -> DataFrame:
        """One `rel` column: from the Spark state's partitions (`task`), else from the driver's snapshot (`local`)."""
        from .state import DistributedFileState

        files = snapshot.state.files
        if isinstance(files, DistributedFileState):
            rows = files.rdd.mapPartitions(task)
            parts = max(1, min(rows.getNumPartitions(), self.parallelism))
            # distinct: a DV file two state partitions share; hash-partitioned first, so no second shuffle
            return self.spark.createDataFrame(rows, "rel string").repartition(parts, "rel").distinct()
        paths = sorted(local(snapshot, cutoff_ms=cutoff_ms, table_root=table_uri))
        if not paths:
            return self.spark.createDataFrame([], "rel string")
        return self.spark.createDataFrame(pa.table({"rel": pa.array(paths, pa.string())}))

    def _protected_side(self, protected: DataFrame) -> bool:
        """Persist `protected` (the caller unpersists it), build its cache in one job, and say whether it is
        small enough (`broadcast_limit`) to broadcast to the joins."""
        from pyspark import StorageLevel

        protected.persist(StorageLevel.MEMORY_AND_DISK)
        return protected.count() <= self.broadcast_limit

    @staticmethod
    def _side(frame: DataFrame, broadcast: bool) -> DataFrame:
        from pyspark.sql import functions as F

        return F.broadcast(frame) if broadcast else frame

    def _flag(
        self,
        entries: DataFrame,
        protected: DataFrame,
        broadcast: bool,
        tracked: tuple[DataFrame, bool] | None = None,
    ) -> DataFrame:
        """(path, size, modification_time, partition, reason) for `ENTRY_SCHEMA` rows: `reason` null when the
        entry may be deleted. In `protocol.vacuum.revalidate`'s order: the per-row name reasons (refused,
        hidden, duplicate) first, then `PROTECTED` when the path or its DV alias is protected (`protected`
        holds each path once, as `protected` makes it: a left join keeps one row per entry), then what the
        row found in storage, then `UNTRACKED_GRACE` for a `young` entry `tracked` (the expired tombstones,
        and whether to broadcast them) does not hold. In at most `parallelism` partitions."""
        from pyspark.sql import functions as F

        by_rel = self._side(protected.select(F.col("rel").alias("_rel_hit")), broadcast)
        by_alias = self._side(protected.select(F.col("rel").alias("_alias_hit")), broadcast)
        joined = entries.join(by_rel, entries["rel"] == by_rel["_rel_hit"], "left").join(
            by_alias, entries["alias"] == by_alias["_alias_hit"], "left"
        )
        untracked = F.lit(True)
        if tracked is not None:
            side = self._side(tracked[0].select(F.col("rel").alias("_tracked")), tracked[1])
            joined = joined.join(side, joined["rel"] == side["_tracked"], "left")
            untracked = F.col("_tracked").isNull()
        name_reason = F.col("reason").startswith(REFUSED) | F.col("reason").isin(HIDDEN, DUPLICATE)
        hit = F.col("_rel_hit").isNotNull() | F.col("_alias_hit").isNotNull()
        reason = (
            F.when(name_reason, F.col("reason"))
            .when(hit, F.lit(PROTECTED))
            .when(F.col("reason").isNotNull(), F.col("reason"))
            .when(F.col("young") & untracked, F.lit(UNTRACKED_GRACE))  # never young without `tracked`
        )
        columns = ("path", "size", "modification_time", "partition")
        return joined.select(*columns, reason.alias("reason")).coalesce(self.parallelism)

    def _run(self, action: Callable[[], Any], dlog: DeltaLog, version: int | None) -> Any:
        from .state import run_spark

        return run_spark(action, table=dlog.table_uri, version=version)

    # -- VacuumExecutor ----------------------------------------------------------------------------------
    def plan_full(
        self,
        dlog: DeltaLog,
        snapshot: Snapshot,
        *,
        cutoff_ms: int,
        retention_ms: int,
        partition_columns: list[str],
        now_ms: int,
        untracked_grace_ms: int,
    ) -> VacuumPlan:
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        table = dlog.table_uri
        cands = self.candidates(dlog, cutoff_ms=cutoff_ms, partition_columns=partition_columns)
        protected = self.protected(snapshot, cutoff_ms=cutoff_ms, table_uri=table)
        grace = grace_matters(cutoff_ms=cutoff_ms, now_ms=now_ms, grace_ms=untracked_grace_ms)
        tracked = self.expired(snapshot, cutoff_ms=cutoff_ms, table_uri=table) if grace else None
        plan = VacuumPlan(
            table,
            snapshot.version,
            cutoff_ms,
            retention_ms,
            FULL,
            [],
            snapshot.protocol.to_json(),
            untracked_grace_ms=untracked_grace_ms,
            table_id=snapshot.metadata.id,
        )
        flagged: DataFrame | None = None

        def run() -> VacuumPlan:
            nonlocal flagged
            small = self._protected_side(protected)
            by_rel = self._side(protected, small)
            by_alias = self._side(protected.withColumnRenamed("rel", "alias"), small)
            planned = cands.join(by_rel, "rel", "left_anti").join(by_alias, "alias", "left_anti")
            if tracked is not None:  # untracked candidates within the grace period: counted, not planned
                side = self._side(tracked.select(F.col("rel").alias("_tracked")), self._protected_side(tracked))
                young = F.col("modification_time") > F.lit(now_ms - untracked_grace_ms)
                flagged = (
                    planned.join(side, planned["rel"] == side["_tracked"], "left")
                    .select("path", "size", "modification_time", (young & F.col("_tracked").isNull()).alias("_young"))
                    .coalesce(self.parallelism)
                    .persist(StorageLevel.MEMORY_AND_DISK)
                )
                kept = flagged.where(F.col("_young")).agg(F.count(F.lit(1)).alias("n"), F.sum("size").alias("b"))
                row = kept.collect()[0]
                plan.grace_kept_files, plan.grace_kept_bytes = int(row["n"] or 0), int(row["b"] or 0)
                planned = flagged.where(~F.col("_young"))
            return self._materialize(
                plan, planned.select("path", "size", "modification_time").coalesce(self.parallelism)
            )

        try:
            return self._run(run, dlog, snapshot.version)
        finally:
            protected.unpersist()
            if tracked is not None:
                tracked.unpersist()
            if flagged is not None:
                if self._unlisted is not None and self._unlisted[0] is plan:
                    self._unlisted_inputs.append(flagged)  # the cached list is made from it: freed with it
                else:
                    flagged.unpersist()

    def _materialize(self, plan: VacuumPlan, planned: DataFrame) -> VacuumPlan:
        """Write (with `plan_dir`) and summarize the planned files; collect them when few enough. Without
        `plan_dir`, a plan above `collect_limit` keeps its files cached for the same call's apply."""
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        from .state import spark_path

        if self.plan_dir:
            plan.files_uri = f"{self.plan_dir.rstrip('/')}/vacuum-plan-v{plan.version}-{uuid.uuid4().hex}"
            planned.write.mode("error").json(spark_path(plan.files_uri))
            source = self.spark.read.schema(PLAN_FILE_SCHEMA).json(spark_path(plan.files_uri))
        else:
            source = planned.persist(StorageLevel.MEMORY_AND_DISK)
        cached = False
        try:
            rows = (
                source.groupBy(F.expr(_PARTITION_OF_PATH).alias("partition"))
                .agg(F.count(F.lit(1)).alias("files"), F.sum("size").alias("bytes"))
                .collect()
            )
            parts = _by_partition(rows)
            num = sum(p["files"] for p in parts.values())
            if num <= self.collect_limit:
                plan.files = sorted(map(_planned, source.collect()), key=lambda f: f.path)
                return plan
            cached = not self.plan_dir
        finally:
            if not self.plan_dir and not cached:
                source.unpersist()
        plan.totals = PlanTotals(num, sum(p["bytes"] for p in parts.values()), parts)
        if cached:
            self.release()
            self._unlisted = (plan, source)
            log.warning(
                "VACUUM of %s: the plan has %d files (over %d) and no plan_dir: it carries counts only, its "
                "files stay cached on the cluster for this executor to apply (release() frees them)",
                plan.table,
                num,
                self.collect_limit,
            )
        return plan

    def release(self) -> None:
        """Free the cached files of the last counts-only plan made without `plan_dir` (applying it frees them
        too; a dry run that will not be applied should call this)."""
        if self._unlisted is not None:
            self._unlisted[1].unpersist()
            self._unlisted = None
        for frame in self._unlisted_inputs:
            frame.unpersist()
        self._unlisted_inputs = []

    def _release_plan(self, plan: VacuumPlan) -> None:
        if self._unlisted is not None and self._unlisted[0] is plan:
            self.release()

    def _plan_files(self, plan: VacuumPlan) -> DataFrame:
        """The plan's files as (path, size): inline, else read from `files_uri`, else the same call's plan."""
        from .state import spark_path

        if plan.files_inline:
            if not plan.files:
                return self.spark.createDataFrame([], PLAN_FILE_SCHEMA)
            paths = pa.array([f.path for f in plan.files], pa.string())
            sizes = pa.array([f.size for f in plan.files], pa.int64())
            mtimes = pa.array([f.modification_time for f in plan.files], pa.int64())
            parts = min(self.parallelism, -(-len(plan.files) // _FILES_PER_TASK))
            table = pa.table({"path": paths, "size": sizes, "modification_time": mtimes})
            return self.spark.createDataFrame(table).repartition(parts, "path")  # repeats meet in one task
        if plan.files_uri:
            listed = self.spark.read.schema(PLAN_FILE_SCHEMA).json(spark_path(plan.files_uri))
            return listed.repartition(self.parallelism, "path")
        if self._unlisted is not None and self._unlisted[0] is plan:
            # persisted: re-validated without listing the table again
            return self._unlisted[1].repartition(self.parallelism, "path")
        raise OperationNotAllowedError(
            f"The vacuum plan carries counts only ({plan.num_files} files, no file list was written): plan "
            "again with a plan location to apply it",
            table=plan.table,
            version=plan.version,
        )

    def revalidate(
        self,
        dlog: DeltaLog,
        snapshot: Snapshot,
        plan: VacuumPlan,
        *,
        cutoff_ms: int,
        partition_columns: list[str],
        now_ms: int,
        untracked_grace_ms: int,
    ) -> Revalidation:
        return self._run(
            lambda: self._revalidate(dlog, snapshot, plan, cutoff_ms, partition_columns, now_ms, untracked_grace_ms),
            dlog,
            snapshot.version,
        )

    def _revalidate(
        self,
        dlog: DeltaLog,
        snapshot: Snapshot,
        plan: VacuumPlan,
        cutoff_ms: int,
        partition_columns: list[str],
        now_ms: int,
        grace_ms: int,
    ) -> Revalidation:
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        task = entry_task(
            plan.table,
            self.storage_options,
            partition_columns,
            cutoff_ms=cutoff_ms,
            now_ms=now_ms,
            grace_ms=grace_ms,
        )
        entries = self._plan_files(plan).mapInArrow(task, ENTRY_SCHEMA)
        protected = self.protected(snapshot, cutoff_ms=cutoff_ms, table_uri=plan.table)
        grace = grace_matters(cutoff_ms=cutoff_ms, now_ms=now_ms, grace_ms=grace_ms)
        tracked = self.expired(snapshot, cutoff_ms=cutoff_ms, table_uri=plan.table) if grace else None
        flagged: DataFrame | None = None

        def release() -> None:
            if flagged is not None:
                flagged.unpersist()
            protected.unpersist()
            if tracked is not None:
                tracked.unpersist()
            self._release_plan(plan)

        try:
            small = self._protected_side(protected)
            tracked_side = None if tracked is None else (tracked, self._protected_side(tracked))
            flagged = self._flag(entries, protected, small, tracked_side).persist(StorageLevel.MEMORY_AND_DISK)
            rows = (
                flagged.groupBy("reason", "partition")
                .agg(F.count(F.lit(1)).alias("files"), F.sum("size").alias("bytes"))
                .collect()
            )
            refused = [r for r in rows if (r["reason"] or "").startswith(REFUSED)]
            if refused:
                first = flagged.where(F.col("reason").startswith(REFUSED)).select("path", "reason").first()
                path, why = (first["path"], first["reason"][len(REFUSED) :]) if first else ("?", "refused")
                raise VacuumPlanRefusedError(
                    f"The vacuum plan names {path!r}: {why}. No planner writes such an entry; nothing was deleted",
                    argument="plan",
                    table=plan.table,
                    file=path,
                )
            kept = _by_partition(r for r in rows if r["reason"] is None)
            num_kept = sum(p["files"] for p in kept.values())
            num_missing = sum(int(r["files"]) for r in rows if r["reason"] == MISSING)
            num_dropped = sum(int(r["files"]) for r in rows if r["reason"] not in (None, MISSING))
            if not plan.files_inline and num_kept + num_dropped + num_missing != plan.num_files:
                where = f"at {plan.files_uri}" if plan.files_uri else "cached by this executor"
                raise OperationNotAllowedError(
                    f"The vacuum plan's file list {where} holds {num_kept + num_dropped + num_missing} files, "
                    f"the plan {plan.num_files}: plan again",
                    table=plan.table,
                    version=plan.version,
                )
            is_dropped = F.col("reason").isNotNull() & (F.col("reason") != MISSING)
            dropped = self._collect(flagged.where(is_dropped), num_dropped, with_reason=True)
            missing = self._collect(flagged.where(F.col("reason") == MISSING), num_missing)
            checked = plan.with_files([])
            if num_kept <= self.collect_limit:
                checked.files = self._collect(flagged.where(F.col("reason").isNull()), num_kept)
            else:
                checked.totals = PlanTotals(num_kept, sum(p["bytes"] for p in kept.values()), kept)
        except BaseException:
            release()
            raise
        return Revalidation(
            checked,
            [f for f, _ in dropped],
            num_dropped,
            flagged.where(F.col("reason").isNull()),
            release,
            reasons=[why for _, why in dropped],
            missing=missing,
            num_missing=num_missing,
        )

    def _collect(self, frame: DataFrame, count: int, *, with_reason: bool = False) -> list[Any]:
        """At most `collect_limit` of `frame`'s entries, by path: `PlannedFile`s, or (`PlannedFile`, reason)."""
        if not count:
            return []
        columns = ["path", "size", "modification_time"] + (["reason"] if with_reason else [])
        rows = sorted(frame.select(*columns).limit(self.collect_limit).collect(), key=lambda r: r["path"])
        if with_reason:
            return [(_planned(r), r["reason"]) for r in rows]
        return [_planned(r) for r in rows]

    def delete(self, dlog: DeltaLog, checked: Revalidation, *, batch_size: int) -> Deleted:
        from pyspark.sql import functions as F

        kept: DataFrame = checked.handle
        task = delete_task(dlog.table_uri, self.storage_options, batch_size)

        def run() -> list[Any]:
            done = kept.select("path", "size", "partition").mapInArrow(task, DELETED_SCHEMA)
            return done.groupBy("partition").agg(F.sum("files").alias("files"), F.sum("bytes").alias("bytes")).collect()

        rows = self._run(run, dlog, checked.plan.version)
        files = sum(int(r["files"] or 0) for r in rows)
        size = sum(int(r["bytes"] or 0) for r in rows)
        # the directories of missing entries too (those collected): a killed run left them behind
        dirs = [r["partition"] for r in rows] + [partition_of(f.path) for f in checked.missing]
        return Deleted(files, size, remove_empty_dirs(dlog.store, dlog.table_uri, dirs))


__all__ = ["DEFAULT_BROADCAST_LIMIT", "DEFAULT_COLLECT_LIMIT", "SparkVacuumExecutor"]
