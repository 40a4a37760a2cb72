"""The Spark engine's state reconstruction (Delta's `Snapshot.stateReconstruction`), DataFrame API only.

The driver builds the `LogSegment` as the local engine does. Spark reads the commits (whole files) and
JSON checkpoint parts with its text reader; a Python UDF parses each line (`tasks.parse_text`); the few
protocol, metadata, txn and domain actions are reconciled on the driver; the file actions are
hash-partitioned by file key into `snapshot_partitions` partitions and each partition is replayed with
the local engine's `InMemoryLogReplay`, key by key (`tasks.reconcile_key`). A parquet checkpoint's rows stay
in the JVM: a checkpoint is reconciled state, so its rows no later commit touches are final
(`frames.checkpoint_files`, a broadcast anti-join with the keys the commits touch).

Needs `pyspark` only once an engine is created.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar

import pyarrow as pa

from ...errors import (
    DeltaError,
    MalformedCheckpointError,
    MalformedCommitError,
)
from ...protocol.actions import (
    Action,
    AddFile,
    CheckpointMetadata,
    CommitInfo,
    Metadata,
    RemoveFile,
    Sidecar,
    action_from_json,
)
from ...protocol.checkpoints import NON_FILE_COLUMNS, sidecar_path
from ...protocol.filenames import ParsedLogPath
from ...protocol.log_segment import LogSegment
from ...protocol.replay import InMemoryLogReplay
from ...protocol.table_features import check_can_read
from ...read.aggregates import DEFAULT_SMALL_FILE_BYTES, MAX_DIGEST_GROUPS, FileDigest, FileSummary, TombstoneSummary
from ...read.checkpoint import checkpoint_read_errors, non_file_actions, read_parquet
from ...read.file_state import adds_to_table, removes_to_table
from ...read.table_state import TableState
from ...storage import LogStore
from .session import in_background, match_session_mode, run_spark, spark_path
from .tasks import (
    BAD_LINE,
    FILE_ACTIONS,
    FILES_TYPE,
    PARSED_TYPE,
    STATE_ACTIONS,
    commit_file_keys,
    parse_text,
    reconcile_key,
)

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

    from .frames import CheckpointFiles


_T = TypeVar("_T")

DEFAULT_SNAPSHOT_PARTITIONS = 50
#: Paths Spark lists on the driver; more, given by name, cost a listing job (Spark's default
#: `spark.sql.sources.parallelPartitionDiscovery.threshold`).
LISTING_JOB_PATHS = 32
#: Commits after the checkpoint, in total bytes, up to which the driver reads them for their file keys.
DEFAULT_DRIVER_KEYS_MAX_BYTES = 16 << 20
#: Threads the driver reads commit files with from an object store.
_DRIVER_READ_THREADS = 8
#: The summary columns of a reconciled file action (`tasks.FILES_TYPE`, `frames.checkpoint_files`).
FLAT_COLUMNS = ("is_add", "path", "size", "partition_values", "deletion_ts")


class DistributedFileState:
    """A snapshot's reconciled file actions, kept on the cluster: `replayed` (the commits' file actions
    replayed by the executors, `tasks.FILES_TYPE`, persisted) and `checkpoint` (its rows no commit
    touched). Same interface as the local `FileState`: reports are JVM aggregations (`frames`); the Arrow
    tables (`adds`, `removes`) collect the rows to the driver on first use only."""

    #: Tombstone groups the digest keeps before reports fall back to one query per cutoff.
    max_digest_groups: int = MAX_DIGEST_GROUPS

    def __init__(
        self,
        replayed: DataFrame,
        table: str,
        version: int,
        checkpoint: CheckpointFiles | None = None,
        partition_columns: tuple[str, ...] = (),
        persisted: tuple[DataFrame, ...] = (),
    ) -> None:
        self.replayed = replayed
        self._persisted = (*persisted, replayed)
        self.checkpoint = checkpoint
        self.partition_columns = tuple(partition_columns)
        self._table = table
        self._version = version
        self._adds: pa.Table | None = None
        self._removes: pa.Table | None = None
        self._digest: FileDigest | None = None
        #: (partition columns, max groups, the digest query started in the background by `prefetch`)
        self._prefetched: tuple[tuple[str, ...], int, Future[FileDigest]] | None = None

    def _run(self, action: Callable[[], _T]) -> _T:
        return run_spark(action, table=self._table, version=self._version)

    def apply(
        self, replay: InMemoryLogReplay, *, tables: tuple[pa.Table, pa.Table] | None = None
    ) -> DistributedFileState:
        """This state at the replay's version when the replay holds no file actions (`SparkReplay.extend_state`
        checks): the same files, so the new state takes over the persisted frames and what was computed
        from them (this one stays usable; `uncache` is then the new state's)."""
        if replay.active_files or replay.tombstones:
            raise ValueError("a Spark state is extended by commits without file actions only")
        carried = copy.copy(self)
        carried._version, self._persisted = replay.current_version, ()
        return carried

    def uncache(self) -> None:
        """Unpersist what this state persisted; later reads recompute it from the log."""
        for frame in self._persisted:
            frame.unpersist(blocking=False)

    @property
    def flat(self) -> DataFrame:
        """Every reconciled file action as one row of `FLAT_COLUMNS`."""
        replayed = self.replayed.select(*FLAT_COLUMNS)
        return replayed if self.checkpoint is None else replayed.unionByName(self.checkpoint.flat)

    def json_frame(self) -> DataFrame:
        """Every reconciled file action as `{"add": ...}` / `{"remove": ...}` JSON text (column `json`)."""
        frame = self.replayed.select("json")
        for other in [] if self.checkpoint is None else self.checkpoint.json_frames():
            frame = frame.unionByName(other)
        return frame

    def _collect(self, kind: str) -> pa.Table:
        """The `kind` ("add" or "remove") rows collected to the driver, once: the other kind stays on the
        cluster (OPTIMIZE's plan reads the active files only, tombstones often outnumber them)."""
        from pyspark.sql import functions as F

        cached = self._adds if kind == "add" else self._removes
        if cached is not None:
            return cached
        wanted = F.col("is_add") if kind == "add" else ~F.col("is_add")
        texts = [r[0] for r in self._run(self.replayed.where(wanted).select("json").collect)]
        if self.checkpoint is not None:
            texts += self._run(lambda: list(self.checkpoint.json_rows((kind,))))  # type: ignore[union-attr]
        adds, removes = json_file_tables(texts)
        if kind == "add":
            self._adds = adds
            return adds
        self._removes = removes
        return removes

    @property
    def adds(self) -> pa.Table:
        """Active files, collected to the driver (the tombstones are not)."""
        return self._collect("add")

    @property
    def adds_with_stats(self) -> pa.Table:
        return self.adds

    @property
    def removes(self) -> pa.Table:
        """Every tombstone, collected to the driver (the active files are not)."""
        return self._collect("remove")

    def prefetch(self) -> None:
        """Start the digest query in the background, for callers that will ask for counts or tombstones."""
        from . import frames

        cols, most, flat = self.partition_columns, self.max_digest_groups, self.flat
        query = in_background(lambda: self._run(lambda: frames.file_digest(flat, DEFAULT_SMALL_FILE_BYTES, cols, most)))
        self._prefetched = (cols, most, query)

    def digest(self) -> FileDigest:
        """File summary and tombstones by (partition, deletion time), computed once in one query: it answers
        `file_summary()`, `count_tombstones_after` and `tombstone_summary` at any cutoff."""
        from . import frames

        if self._digest is None:
            cols, most = self.partition_columns, self.max_digest_groups
            prefetched, self._prefetched = self._prefetched, None
            if prefetched is not None and prefetched[:2] == (cols, most):
                self._digest = prefetched[2].result()
            else:
                flat = self.flat
                self._digest = self._run(lambda: frames.file_digest(flat, DEFAULT_SMALL_FILE_BYTES, cols, most))
        return self._digest

    def file_summary(self, small_file_bytes: int = DEFAULT_SMALL_FILE_BYTES) -> FileSummary:
        from . import frames

        if small_file_bytes == DEFAULT_SMALL_FILE_BYTES:
            return self.digest().files
        return self._run(lambda: frames.file_summary(self.flat, small_file_bytes))

    @property
    def num_files(self) -> int:
        return self.file_summary().num_files

    @property
    def size_in_bytes(self) -> int:
        return self.file_summary().size_bytes

    def num_distinct_paths(self) -> int:
        from pyspark.sql import functions as F

        return int(self._run(self.flat.where(F.col("is_add")).select("path").distinct().count))

    def count_tombstones_after(self, cutoff_ms: int) -> int:
        from . import frames

        digest = self.digest()
        if digest.complete:
            return digest.count_tombstones_after(cutoff_ms)
        return self._run(lambda: frames.count_tombstones_after(self.flat, cutoff_ms))

    def tombstone_summary(self, cutoff_ms: int, partition_columns: tuple[str, ...]) -> TombstoneSummary:
        from . import frames

        cols = tuple(partition_columns)
        if cols == self.partition_columns:
            digest = self.digest()
            if digest.complete:
                return digest.tombstone_summary(cutoff_ms)
        return self._run(lambda: frames.tombstone_summary(self.flat, cutoff_ms, cols))


def json_file_tables(texts: Iterable[str]) -> tuple[pa.Table, pa.Table]:
    """The ADD_SCHEMA and REMOVE_SCHEMA tables of `{"add": ...}` / `{"remove": ...}` JSON texts."""
    actions = [action_from_json(json.loads(t)) for t in texts]
    adds = adds_to_table([a for a in actions if isinstance(a, AddFile)])
    return adds, removes_to_table([a for a in actions if isinstance(a, RemoveFile)])


def _partition_columns(metadata: Metadata | None) -> tuple[str, ...]:
    return () if metadata is None else tuple(metadata.partition_columns)


class SparkReplay:
    """State reconstruction on Spark (the state half of `SparkEngine`; the checkpoint writer re-reads
    what it wrote with it).

    `prefetch_digest` (default) starts the report digest (`DistributedFileState.digest`) of a state with
    checkpoint rows in the background once it is built: for callers that will ask for counts or tombstones.

    A checkpoint's rows are filtered by the keys the commits after it touch. When those commits total at
    most `driver_keys_max_bytes`, the driver reads them for the keys itself (`tasks.commit_file_keys`, in
    a background thread while the executors parse the log) and hands them to the JVM as an Arrow table;
    larger tails, and a commit the driver cannot read or parse (the executors then report it), take the
    keys from the executors' parse; 0 always does.
    """

    name = "spark"

    def __init__(
        self,
        spark: SparkSession,
        snapshot_partitions: int = DEFAULT_SNAPSHOT_PARTITIONS,
        *,
        prefetch_digest: bool = True,
        driver_keys_max_bytes: int = DEFAULT_DRIVER_KEYS_MAX_BYTES,
    ) -> None:
        if snapshot_partitions < 1:
            raise ValueError("snapshot_partitions must be >= 1")
        match_session_mode(spark)
        self.spark = spark
        self.snapshot_partitions = snapshot_partitions
        self.prefetch_digest = prefetch_digest
        self.driver_keys_max_bytes = driver_keys_max_bytes

    # -- reading --------------------------------------------------------------------------------------
    def _parsed(self, segment: LogSegment, json_parts: Sequence[str] = ()) -> DataFrame:
        """Every line of the segment's commits (whole files) and of the JSON checkpoint parts, parsed on
        the executors (`tasks.PARSED_TYPE`)."""
        from pyspark.sql import functions as F

        path = F.col("_metadata.file_path").alias("path")
        sources = []
        if segment.commits:
            commits = self._commit_files(segment.commits)
            sources.append(commits.select(path, F.lit(0).cast("long").alias("pos"), "value"))
        if json_parts:
            lines = self.spark.read.text([spark_path(p) for p in json_parts])
            sources.append(lines.select(path, F.monotonically_increasing_id().alias("pos"), "value"))
        if not sources:
            sources.append(self.spark.createDataFrame([], "path string, pos long, value string"))
        frame = sources[0] if len(sources) == 1 else sources[0].unionByName(sources[1])
        parsed = F.udf(parse_text, PARSED_TYPE, useArrow=False)("path", "pos", "value")
        return frame.select(F.explode(parsed).alias("p")).select("p.*")

    def _commit_files(self, commits: Sequence[ParsedLogPath]) -> DataFrame:
        """The commits' text, one row per file (`wholetext`). Spark lists more than
        `LISTING_JOB_PATHS` paths given by name with a Spark job of one task per path (a 1,000-commit
        tail: 1,000 tasks, to list files the driver has listed); so a longer run of consecutive
        `<log>/<version:020>.json` commits (PROTOCOL.md "Delta Log Entries") is read as its directory,
        its other files left out by name (`_metadata.file_name`: Spark prunes files by it before reading)."""
        from pyspark.sql import functions as F

        paths = [spark_path(c.file.path) for c in commits]
        first, last = commits[0].version, commits[-1].version
        log_dir = paths[0].rpartition("/")[0]
        names = [f"{c.version:020d}.json" for c in commits]
        plain = [c.version for c in commits] == list(range(first, last + 1)) and all(
            p == f"{log_dir}/{n}" for p, n in zip(paths, names, strict=True)
        )
        if len(paths) <= LISTING_JOB_PATHS or not plain:
            return self.spark.read.text(paths, wholetext=True)
        name = F.col("_metadata.file_name")
        read = self.spark.read.option("pathGlobFilter", "*.json").text(log_dir, wholetext=True)
        return read.where((F.length(name) == len(names[0])) & name.between(names[0], names[-1]))

    @staticmethod
    def _checkpoint_parts(
        table: str, log_dir: str, store: LogStore, segment: LogSegment
    ) -> tuple[list[str], list[str], list[str], list[Action]]:
        """The checkpoint's JSON parts, parquet parts and sidecars (checked to exist), and the non-file
        actions of its parquet parts, read on the driver (small columns only; JSON parts are parsed on the
        executors, only their sidecars read here)."""
        cp, version = segment.checkpoint, segment.checkpoint_version
        json_parts, parquet_parts, names, sidecars = [], [], [], []
        actions: list[Action] = []
        for part in [] if cp is None else cp.files:
            path = part.file.path
            if part.extension == "json":
                json_parts.append(path)
                lines = [line for line in store.read_bytes(path).splitlines() if b'"sidecar"' in line]
                found = [a for a in (action_from_json(json.loads(line)) for line in lines) if isinstance(a, Sidecar)]
            else:
                parquet_parts.append(path)
                with checkpoint_read_errors(table, part.version, path.rsplit("/", 1)[-1]):
                    found = non_file_actions(read_parquet(store, path, NON_FILE_COLUMNS))
                actions += [a for a in found if not isinstance(a, Sidecar | CheckpointMetadata)]
            names += [a.path for a in found if isinstance(a, Sidecar)]
        for name in names:
            sidecars.append(sidecar_path(store.join, log_dir, name))
            if store.head(sidecars[-1]) is None:
                raise MalformedCheckpointError(
                    "Sidecar named by the V2 checkpoint is missing", table=table, version=version, file=name
                )
        return json_parts, parquet_parts, sidecars, actions

    # -- reconstruction -------------------------------------------------------------------------------
    def reconstruct(self, table: str, log_dir: str, store: LogStore, segment: LogSegment) -> TableState:
        """Distributed state reconstruction of `segment`: a `TableState` whose files stay on the cluster."""
        return run_spark(
            lambda: self._reconstruct(table, log_dir, store, segment), table=table, version=segment.version
        )

    def _reconstruct(self, table: str, log_dir: str, store: LogStore, segment: LogSegment) -> TableState:
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        json_parts, parquet_parts, sidecars, driver_actions = self._checkpoint_parts(table, log_dir, store, segment)
        parsed = self._parsed(segment, json_parts).persist(StorageLevel.MEMORY_AND_DISK)
        keyed = parsed.where(F.col("name").isin(*FILE_ACTIONS))
        touched = in_background(lambda: self._touched(store, segment, keyed)) if parquet_parts or sidecars else None
        try:
            driver, last_info = self._state_actions(table, segment, parsed, driver_actions)
            checkpoint = None if touched is None else self._checkpoint_files(parquet_parts, sidecars, touched)
        except BaseException:
            parsed.unpersist()
            raise
        by_key = keyed.repartition(self.snapshot_partitions, "key").groupBy("key")  # no second shuffle
        actions = by_key.agg(F.collect_list(F.struct("version", "pos", "name", "body")).alias("a"))
        reconcile = F.udf(reconcile_key, FILES_TYPE, useArrow=False)  # pickled rows: workers need no pyarrow
        files = actions.select(F.explode(reconcile("a")).alias("f")).select("f.*")
        state = DistributedFileState(
            files.persist(StorageLevel.MEMORY_AND_DISK),
            table,
            segment.version,
            checkpoint,
            _partition_columns(driver.current_metadata),
            (parsed,),
        )
        if self.prefetch_digest and checkpoint is not None:
            state.prefetch()
        return TableState(
            segment.version,
            driver.current_protocol,
            driver.current_metadata,
            dict(driver.transactions),
            {d.domain: d for d in driver.get_domain_metadata()},
            state,  # type: ignore[arg-type]
            last_info,
            {} if last_info is None else {segment.version: last_info},
        )

    @staticmethod
    def _state_actions(
        table: str, segment: LogSegment, parsed: DataFrame, checkpoint_actions: list[Action]
    ) -> tuple[InMemoryLogReplay, CommitInfo | None]:
        """Protocol, metadata, txns, domains (few) reconciled on the driver, the protocol checked;
        and the newest commit's `commitInfo`."""
        from pyspark.sql import functions as F

        rows = parsed.where(F.col("name").isin(*STATE_ACTIONS, BAD_LINE)).select("name", "version", "pos", "body")
        driver = InMemoryLogReplay()
        last_info: CommitInfo | None = None
        actions: list[Action] = list(checkpoint_actions)
        for name, version, _, body in sorted(rows.collect(), key=lambda r: (r[1], r[2])):
            if name == BAD_LINE:  # not JSON, or not a valid action (`tasks.parse_line`)
                path = next((c.file.path for c in segment.commits if c.version == version), None)
                raise MalformedCommitError(json.loads(body)["message"], table=table, version=version, file=path)
            action = action_from_json({name: json.loads(body)})
            if isinstance(action, CommitInfo):
                if version == segment.version:
                    last_info = action
            elif action is not None:
                actions.append(action)
        driver.append(0, actions)
        if driver.current_protocol is not None:
            check_can_read(driver.current_protocol, table=table, version=segment.version)
        return driver, last_info

    def _driver_keys(self, store: LogStore, segment: LogSegment) -> list[str] | None:
        """The keys of the file actions in the segment's commits, read on the driver; `None` when the
        commits exceed `driver_keys_max_bytes` or one cannot be read or parsed here."""
        commits = segment.commits
        if sum(c.file.size for c in commits) > self.driver_keys_max_bytes:
            return None

        def keys(path: str) -> list[str]:
            return list(commit_file_keys(path, store.read_bytes(path).decode("utf-8")))

        pool = ThreadPoolExecutor(_DRIVER_READ_THREADS, thread_name_prefix="delta-commit-keys")
        try:
            return [key for group in pool.map(keys, [c.file.path for c in commits]) for key in group]
        except Exception:  # the executors read the same commits and raise the typed error
            return None
        finally:  # a failed read does not wait for the others
            pool.shutdown(wait=False, cancel_futures=True)

    def _touched(self, store: LogStore, segment: LogSegment, keyed: DataFrame) -> DataFrame | None:
        """The keys the commits after the checkpoint touch (one `key` column): the driver's as an Arrow
        table, else the executors' (`keyed`); `None` when there are none."""
        keys = self._driver_keys(store, segment)
        if keys is not None:
            if not keys:
                return None
            try:
                return self.spark.createDataFrame(pa.table({"key": pa.array(keys, pa.string())}))
            except Exception:  # a PySpark without Arrow input (before 4.0): the executors' keys
                pass
        return keyed.select("key")

    def _checkpoint_files(
        self, parts: list[str], sidecars: list[str], touched: Future[DataFrame | None]
    ) -> CheckpointFiles | None:
        """The checkpoint's parquet file actions minus the `touched` keys; parts and sidecars are read
        apart (a V2 part may hold no file actions at all)."""
        from . import frames

        sources = [self.spark.read.parquet(*[spark_path(p) for p in group]) for group in (parts, sidecars) if group]
        return frames.checkpoint_files(sources, touched.result())

    # -- Engine protocol ------------------------------------------------------------------------------
    def load_state(self, table: str, log_dir: str, store: LogStore, segment: LogSegment) -> TableState:
        return self.reconstruct(table, log_dir, store, segment)

    def extend_state(
        self, table: str, log_dir: str, store: LogStore, state: TableState, segment: LogSegment
    ) -> TableState:
        """A cluster state advanced by commits without file actions (VACUUM's START and END, a txn, a
        metadata change that keeps the partition columns) keeps its replayed files: the new commits (at
        most `driver_keys_max_bytes`) are read on the driver and their other actions applied on top, as
        the local engine extends a state (PROTOCOL.md "Action Reconciliation"). A file action, a commit the
        driver cannot read, or new partition columns replay the whole segment on the cluster again."""
        files = state.files
        new = [c for c in segment.commits if c.version > state.version]
        if (
            isinstance(files, DistributedFileState)
            and new
            and sum(c.file.size for c in new) <= self.driver_keys_max_bytes
        ):
            from ..local import LocalEngine

            try:
                replay, infos = LocalEngine().replay_commits(table, store, new, segment.version)
            except DeltaError:  # the cluster's replay reads the same commits and reports it its own way
                return self.load_state(table, log_dir, store, segment)
            metadata = replay.current_metadata
            same_partitions = metadata is None or _partition_columns(metadata) == files.partition_columns
            if not replay.active_files and not replay.tombstones and same_partitions:
                return state.apply(replay, infos)
        return self.load_state(table, log_dir, store, segment)
