"""VACUUM on Spark executors (`SparkVacuumExecutor`, the Spark engine's `VacuumExecutor`); the checks, the
retention rules and the commits stay on the driver (`maintenance.vacuum`), the rules are `protocol.vacuum`'s.

* Listing (Delta's `recursiveListDirs`): one task lists the root one level, `parallelism` tasks list its
  directories recursively; the per-file rules run where files are listed.
* Plan: candidates anti-joined with the protected paths on the path and its DV alias; when the grace period
  matters, left-joined with the expired tombstones so that young untracked files are counted, not planned.
* Every persisted frame, and the delete tasks, get at most `parallelism` partitions, never
  `spark.sql.shuffle.partitions`: a cached plan keeps its shuffles' partition count (a tiny table's VACUUM
  ran 200 tasks per stage). The session's settings are never changed.
* Dry run: with `plan_dir` the file list is written there (JSON lines) and named by the plan's `files_uri`;
  the driver collects it only up to `collect_limit` files. Without `plan_dir` a larger plan carries
  counts only and its files stay cached for this executor's apply (`release()` frees them).
* Apply: the plan's files, hash-partitioned by path, re-validated on the executors (per-row rules, storage
  now) and by the same joins, each dropped entry with its reason; the rest deleted in batches.

Each task builds its store from the table URI and the storage options (inside its closure).

One unit over 600 lines: the plan, its re-validation and the deletes share the executor's frames, joins and
cached lists (a counts-only plan is applied from the list its planning cached), and each has a closure path for
a state replayed on the driver beside the joined one; what runs in the tasks is in `vacuum_tasks.py`.
"""

from __future__ import annotations

import json
import logging
import uuid
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ...errors import OperationNotAllowedError
from ...protocol.vacuum import (
    DUPLICATE,
    FULL,
    HIDDEN,
    MISSING,
    PROTECTED,
    UNTRACKED_GRACE,
    PlannedFile,
    PlanTotals,
    VacuumPlan,
    VacuumPlanRefusedError,
    grace_matters,
    partition_of,
)
from ...read.protected_files import expired_set, protected_set
from ...storage import store_for
from ...storage.batch import remove_empty_dirs
from .. import Deleted, Revalidation
from .vacuum_tasks import (
    CANDIDATE_SCHEMA,
    DELETED_SCHEMA,
    ENTRY_SCHEMA,
    FLAGGED_SCHEMA,
    LISTED_SCHEMA,
    PLAN_FILE_SCHEMA,
    REFUSED,
    delete_task,
    entry_task,
    expand_task,
    flag_task,
    list_root_task,
    listed_table,
    paths_task,
    plan_task,
    root_rows,
)

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
#: Protected paths and expired tombstones, together, at most this many travel in the tasks' closures (about
#: 1 MB pickled) when the state was replayed on the driver: the plan then takes one Spark job, no joins.
DEFAULT_CLOSURE_LIMIT = 10_000
#: Listing tasks of a plan made in one job when no parallelism is given (one per root directory, at most).
_CLOSURE_TASKS = 16
#: Planned files per task when a plan carried inline is re-validated and deleted (one delete batch).
_FILES_PER_TASK = 1000
#: `protocol.vacuum.partition_of(path)` in SQL (no regular expression: names may hold anything).
_PARTITION_OF_PATH = (
    "CASE WHEN instr(path, '/') = 0 THEN '' "
    "ELSE substring(path, 1, length(path) - length(substring_index(path, '/', -1)) - 1) END"
)


def _planned(row: Any) -> PlannedFile:
    mtime = row["modification_time"]
    return PlannedFile(row["path"], int(row["size"] or 0), None if mtime is None else int(mtime))


def _refused(plan: VacuumPlan, path: str, why: str) -> VacuumPlanRefusedError:
    return VacuumPlanRefusedError(
        f"The vacuum plan names {path!r}: {why}. No planner writes such an entry; nothing was deleted",
        argument="plan",
        table=plan.table,
        file=path,
    )


def _by_partition(rows: Iterable[Any]) -> dict[str, dict[str, int]]:
    """`VacuumPlan.partitions()` from rows of (partition, files, bytes)."""
    return {r["partition"]: {"files": int(r["files"]), "bytes": int(r["bytes"] or 0)} for r in rows}


#: Each session's default parallelism, asked for once per session (two Spark jobs; a VACUUM's plan and its apply
#: each made an executor and asked again: about 4 of a tiny table's 25 jobs).
_PARALLELISM: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def _default_parallelism(spark: SparkSession) -> int:
    """Spark's default parallelism: the partitions of a range given no count (`leafNodeDefaultParallelism`),
    once per session."""
    from pyspark.sql import functions as F

    if spark not in _PARALLELISM:
        row = spark.range(0, 1 << 16).select(F.spark_partition_id().alias("p")).agg(F.max("p")).first()
        _PARALLELISM[spark] = 1 + int(row[0]) if row else 1
    return _PARALLELISM[spark]


class SparkVacuumExecutor:
    """The Spark engine's `VacuumExecutor` (see the module doc).

    :param plan_dir: where dry runs write their file lists (`<plan_dir>/vacuum-plan-v<version>-<uuid>/`).
    :param collect_limit: most files a plan (or the dropped files of a re-validation) collected to the driver.
    :param parallelism: listing tasks, and the most partitions a persisted frame or the delete tasks get
        (default: the session's default parallelism, asked for once per session).
    :param broadcast_limit: most protected paths broadcast to the joins (above, they are sort-merge joined).
    :param closure_limit: most protected paths (and expired tombstones) of a state replayed on the driver
        that travel in the tasks' closures, so that a plan or its re-validation takes no join (0: never).
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
        closure_limit: int = DEFAULT_CLOSURE_LIMIT,
    ) -> None:
        if collect_limit < 0:
            raise ValueError("collect_limit must be >= 0")
        if broadcast_limit < 0:
            raise ValueError("broadcast_limit must be >= 0")
        from .session import match_session_mode

        match_session_mode(spark)
        self.spark = spark
        self.storage_options = dict(storage_options or {})
        self.plan_dir = plan_dir
        self.collect_limit = collect_limit
        self._parallelism = parallelism
        self.broadcast_limit = broadcast_limit
        self.closure_limit = closure_limit
        #: the last plan made without a file list, with its files (persisted) for the same executor's apply
        self._unlisted: tuple[VacuumPlan, DataFrame] | None = None
        #: frames the cached list of `_unlisted` was computed from, freed with it
        self._unlisted_inputs: list[DataFrame] = []

    @property
    def parallelism(self) -> int:
        """The listing tasks and most partitions of a frame: as given, else the session's default (asked for
        once, when first needed: a Spark job)."""
        if self._parallelism is None:
            self._parallelism = _default_parallelism(self.spark)
        return self._parallelism

    # -- frames ------------------------------------------------------------------------------------------
    def candidates(self, dlog: DeltaLog, *, cutoff_ms: int, partition_columns: Sequence[str]) -> DataFrame:
        """The listed files FULL mode may delete if nothing protects them (`CANDIDATE_SCHEMA`)."""
        table, options = dlog.table_uri, self.storage_options
        root = self.spark.createDataFrame([("",)], "dir string")
        level = root.mapInArrow(list_root_task(table, options, cutoff_ms, partition_columns), LISTED_SCHEMA)
        return level.repartition(self.parallelism).mapInArrow(
            expand_task(table, options, cutoff_ms, partition_columns), CANDIDATE_SCHEMA
        )

    def _lookups(
        self, snapshot: Snapshot, table_uri: str, cutoff_ms: int, now_ms: int, grace_ms: int
    ) -> tuple[Callable[[str], DataFrame], Callable[[str], DataFrame] | None, list[DataFrame]]:
        """Join sides over the snapshot's protected paths and, when the grace period matters
        (`grace_matters`), its expired tombstones: each `side(name)` is the paths as column `name`,
        broadcast when at most `broadcast_limit`; and the frames to unpersist when done.

        Each is persisted and counted first: it feeds two joins (the path's and the DV alias's), so the
        state's task would run twice. Each path once: a left join keeps one row per entry."""
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        frames = [self._paths(snapshot, table_uri, cutoff_ms, expired=False)]
        if grace_matters(cutoff_ms=cutoff_ms, now_ms=now_ms, grace_ms=grace_ms):
            frames.append(self._paths(snapshot, table_uri, cutoff_ms, expired=True))
        sides = []
        for frame in frames:
            small = frame.persist(StorageLevel.MEMORY_AND_DISK).count() <= self.broadcast_limit

            def side(name: str, frame: DataFrame = frame, small: bool = small) -> DataFrame:
                paths = frame.select(F.col("rel").alias(name))
                return F.broadcast(paths) if small else paths

            sides.append(side)
        return sides[0], sides[1] if len(sides) > 1 else None, frames

    def _paths(self, snapshot: Snapshot, table_uri: str, cutoff_ms: int, *, expired: bool) -> DataFrame:
        """The protected relative paths (`protocol.vacuum.protected_paths`) or, `expired`, the expired
        tombstones and their DV files (tracked files the grace period does not apply to), in a `rel`
        column, each once: from the Spark engine's state when it replayed the snapshot, else from the
        driver's snapshot (`read.protected_files`)."""
        from .state import DistributedFileState

        files = snapshot.state.files
        if isinstance(files, DistributedFileState):
            rows = files.json_frame().mapInArrow(paths_task(table_uri, cutoff_ms, expired=expired), "rel string")
            # distinct: a DV file two state partitions share; hash-partitioned first, so no second shuffle
            return rows.repartition(self.parallelism, "rel").distinct()
        local = expired_set if expired else protected_set
        paths = sorted(local(snapshot, cutoff_ms=cutoff_ms, table_root=table_uri))
        if not paths:
            return self.spark.createDataFrame([], "rel string")
        return self.spark.createDataFrame(pa.table({"rel": pa.array(paths, pa.string())}))

    def _flag(
        self, entries: DataFrame, protected: Callable[[str], DataFrame], tracked: Callable[[str], DataFrame] | None
    ) -> DataFrame:
        """(path, size, modification_time, partition, reason) for `ENTRY_SCHEMA` rows: `reason` null when the
        entry may be deleted. In `protocol.vacuum.revalidate`'s order: the per-row name reasons (refused,
        hidden, duplicate), then `PROTECTED` (the path or its DV alias), then what the row found in storage,
        then `UNTRACKED_GRACE` for a `young` entry the expired tombstones (`tracked`) do not hold."""
        from pyspark.sql import functions as F

        by_rel, by_alias = protected("_rel_hit"), protected("_alias_hit")
        joined = entries.join(by_rel, entries["rel"] == by_rel["_rel_hit"], "left").join(
            by_alias, entries["alias"] == by_alias["_alias_hit"], "left"
        )
        untracked = F.lit(True)
        if tracked is not None:
            side = tracked("_tracked")
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
        from .session import run_spark

        return run_spark(action, table=dlog.table_uri, version=version)

    def _driver_sets(
        self, snapshot: Snapshot, table_uri: str, cutoff_ms: int, now_ms: int, grace_ms: int
    ) -> tuple[frozenset[str], frozenset[str] | None] | None:
        """The protected paths and (when the grace period matters) the expired tombstones as sets that travel
        in the tasks' closures, for a state replayed on the driver with at most `closure_limit` of them;
        else None (the frames and joins of `_lookups`)."""
        from .state import DistributedFileState

        if isinstance(snapshot.state.files, DistributedFileState) or snapshot.num_files > self.closure_limit:
            return None  # (every active file is protected: too many, known before any set is built)
        protected = protected_set(snapshot, cutoff_ms=cutoff_ms, table_root=table_uri)
        tracked = None
        if grace_matters(cutoff_ms=cutoff_ms, now_ms=now_ms, grace_ms=grace_ms):
            tracked = frozenset(expired_set(snapshot, cutoff_ms=cutoff_ms, table_root=table_uri))
        if len(protected) + len(tracked or ()) > self.closure_limit:
            return None
        return frozenset(protected), tracked

    def _plan_in_tasks(
        self,
        dlog: DeltaLog,
        plan: VacuumPlan,
        sets: tuple[frozenset[str], frozenset[str] | None],
        *,
        partition_columns: list[str],
        young_after_ms: int,
    ) -> bool:
        """Fill `plan` in one Spark job: the root listed here, its directories listed by one task each (at
        most `parallelism`), the joins done in the tasks (`plan_task`), the rows collected. False, and
        `plan` untouched, when more than `collect_limit` files would come back."""
        table, cutoff_ms = dlog.table_uri, plan.cutoff_ms
        listed = list(root_rows(dlog.store, table, cutoff_ms, partition_columns))
        if not listed:
            return True
        tasks = min(len(listed), self._parallelism or _CLOSURE_TASKS)
        protected, tracked = sets
        task = plan_task(
            table,
            self.storage_options,
            cutoff_ms,
            partition_columns,
            protected=protected,
            tracked=tracked,
            young_after_ms=young_after_ms,
            max_rows=-(-(self.collect_limit + 1) // tasks),
        )
        frame = self.spark.createDataFrame(listed_table(listed)).repartition(tasks)
        rows = frame.mapInArrow(task, FLAGGED_SCHEMA).collect()
        if any(r["path"] is None for r in rows) or len(rows) > self.collect_limit:
            return False
        young = [r for r in rows if r["young"]]
        plan.grace_kept_files, plan.grace_kept_bytes = len(young), sum(int(r["size"] or 0) for r in young)
        plan.files = sorted((_planned(r) for r in rows if not r["young"]), key=lambda f: f.path)
        if self.plan_dir:  # the list where the executors would have written it, as JSON lines
            plan.files_uri = f"{self.plan_dir.rstrip('/')}/vacuum-plan-v{plan.version}-{uuid.uuid4().hex}"
            store = store_for(plan.files_uri, self.storage_options)
            lines = (json.dumps(f.to_dict()) for f in plan.files)
            store.write_new(store.join(plan.files_uri, "part-00000.json"), "".join(f"{x}\n" for x in lines).encode())
        return True

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
        sets = self._driver_sets(snapshot, table, cutoff_ms, now_ms, untracked_grace_ms)
        if sets is not None:
            young_after = now_ms - untracked_grace_ms
            run_in_tasks = lambda: self._plan_in_tasks(  # noqa: E731
                dlog, plan, sets, partition_columns=partition_columns, young_after_ms=young_after
            )
            if self._run(run_in_tasks, dlog, snapshot.version):
                return plan
        cands = self.candidates(dlog, cutoff_ms=cutoff_ms, partition_columns=partition_columns)
        lookups: list[DataFrame] = []
        flagged: list[DataFrame] = []  # the grace period's flagged candidates

        def run() -> VacuumPlan:
            protected, tracked, frames = self._lookups(snapshot, table, cutoff_ms, now_ms, untracked_grace_ms)
            lookups.extend(frames)
            planned = cands.join(protected("rel"), "rel", "left_anti").join(protected("alias"), "alias", "left_anti")
            if tracked is not None:  # untracked candidates within the grace period: counted, not planned
                side = tracked("_tracked")
                young = F.col("modification_time") > F.lit(now_ms - untracked_grace_ms)
                flagged.append(
                    planned.join(side, planned["rel"] == side["_tracked"], "left")
                    .select("path", "size", "modification_time", (young & F.col("_tracked").isNull()).alias("_young"))
                    .coalesce(self.parallelism)
                    .persist(StorageLevel.MEMORY_AND_DISK)
                )
                kept = flagged[0].where(F.col("_young")).agg(F.count(F.lit(1)).alias("n"), F.sum("size").alias("b"))
                row = kept.collect()[0]
                plan.grace_kept_files, plan.grace_kept_bytes = int(row["n"] or 0), int(row["b"] or 0)
                planned = flagged[0].where(~F.col("_young"))
            return self._materialize(
                plan, planned.select("path", "size", "modification_time").coalesce(self.parallelism)
            )

        try:
            return self._run(run, dlog, snapshot.version)
        finally:
            for frame in lookups:
                frame.unpersist()
            if self._unlisted is not None and self._unlisted[0] is plan:
                self._unlisted_inputs.extend(flagged)  # the cached list is made from it: freed with it
            else:
                for frame in flagged:
                    frame.unpersist()

    def _materialize(self, plan: VacuumPlan, planned: DataFrame) -> VacuumPlan:
        """Write (with `plan_dir`) and summarize the planned files; collect them when few enough. Without
        `plan_dir`, a plan above `collect_limit` keeps its files cached for the same call's apply."""
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        from .session import spark_path

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

    def _plan_files(self, plan: VacuumPlan) -> DataFrame:
        """The plan's files as (path, size): inline, else read from `files_uri`, else the same call's plan."""
        from .session import spark_path

        if plan.files_inline:
            if not plan.files:
                return self.spark.createDataFrame([], PLAN_FILE_SCHEMA)
            paths = pa.array([f.path for f in plan.files], pa.string())
            sizes = pa.array([f.size for f in plan.files], pa.int64())
            mtimes = pa.array([f.modification_time for f in plan.files], pa.int64())
            parts = min(self._parallelism or _CLOSURE_TASKS, -(-len(plan.files) // _FILES_PER_TASK))
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
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        grace_ms = untracked_grace_ms
        options = self.storage_options
        task = entry_task(plan.table, options, partition_columns, cutoff_ms=cutoff_ms, now_ms=now_ms, grace_ms=grace_ms)
        cached: list[DataFrame] = []

        def release() -> None:
            for frame in cached:
                frame.unpersist()
            if self._unlisted is not None and self._unlisted[0] is plan:
                self.release()

        sets = self._driver_sets(snapshot, plan.table, cutoff_ms, now_ms, grace_ms) if plan.files_inline else None
        if sets is not None:
            in_tasks = lambda: self._revalidate_in_tasks(plan, task, sets)  # noqa: E731
            return self._run(in_tasks, dlog, snapshot.version)

        def run() -> Revalidation:
            entries = self._plan_files(plan).mapInArrow(task, ENTRY_SCHEMA)
            try:
                protected, tracked, frames = self._lookups(snapshot, plan.table, cutoff_ms, now_ms, grace_ms)
                cached.extend(frames)
                flagged = self._flag(entries, protected, tracked).persist(StorageLevel.MEMORY_AND_DISK)
                cached.append(flagged)
                rows = (
                    flagged.groupBy("reason", "partition")
                    .agg(F.count(F.lit(1)).alias("files"), F.sum("size").alias("bytes"))
                    .collect()
                )
                refused = [r for r in rows if (r["reason"] or "").startswith(REFUSED)]
                if refused:
                    first = flagged.where(F.col("reason").startswith(REFUSED)).select("path", "reason").first()
                    path, why = (first["path"], first["reason"][len(REFUSED) :]) if first else ("?", "refused")
                    raise _refused(plan, path, why)
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

        return self._run(run, dlog, snapshot.version)

    def _revalidate_in_tasks(
        self, plan: VacuumPlan, task: Any, sets: tuple[frozenset[str], frozenset[str] | None]
    ) -> Revalidation:
        """`revalidate` of an inline plan in one Spark job: the per-row rules and storage checks on the
        executors (`entry_task`), the joins in the same tasks (`flag_task`), every entry collected."""
        rows = self._plan_files(plan).mapInArrow(task, ENTRY_SCHEMA).mapInArrow(flag_task(*sets), ENTRY_SCHEMA)
        entries = sorted(rows.collect(), key=lambda r: r["path"])
        refused = next((r for r in entries if (r["reason"] or "").startswith(REFUSED)), None)
        if refused is not None:
            raise _refused(plan, refused["path"], refused["reason"][len(REFUSED) :])
        kept = [r for r in entries if r["reason"] is None]
        dropped = [r for r in entries if r["reason"] not in (None, MISSING)]
        missing = [_planned(r) for r in entries if r["reason"] == MISSING]
        checked = plan.with_files([_planned(r) for r in kept])
        handle = None
        if kept:
            columns = {"path": pa.string(), "size": pa.int64(), "partition": pa.string()}
            table = pa.table({c: pa.array([r[c] for r in kept], t) for c, t in columns.items()})
            handle = self.spark.createDataFrame(table).repartition(min(len(kept) // _FILES_PER_TASK + 1, 64))
        return Revalidation(
            checked,
            [_planned(r) for r in dropped[: self.collect_limit]],
            len(dropped),
            handle,
            lambda: None,
            reasons=[r["reason"] for r in dropped[: self.collect_limit]],
            missing=missing[: self.collect_limit],
            num_missing=len(missing),
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
        kept: DataFrame | None = checked.handle
        if kept is None:  # nothing to delete (`_revalidate_in_tasks`)
            return Deleted(
                0, 0, remove_empty_dirs(dlog.store, dlog.table_uri, [partition_of(f.path) for f in checked.missing])
            )
        task = delete_task(dlog.table_uri, self.storage_options, batch_size)

        def run() -> list[Any]:  # a row per (task, directory): few, summed here
            return kept.select("path", "size", "partition").mapInArrow(task, DELETED_SCHEMA).collect()

        rows = self._run(run, dlog, checked.plan.version)
        files = sum(int(r["files"] or 0) for r in rows)
        size = sum(int(r["bytes"] or 0) for r in rows)
        # the directories of missing entries too (those collected): a killed run left them behind
        dirs = list(dict.fromkeys(r["partition"] for r in rows)) + [partition_of(f.path) for f in checked.missing]
        return Deleted(files, size, remove_empty_dirs(dlog.store, dlog.table_uri, dirs))


__all__ = ["DEFAULT_BROADCAST_LIMIT", "DEFAULT_COLLECT_LIMIT", "SparkVacuumExecutor"]
