"""The Spark engine: state reconstruction distributed over a cluster (Delta `Snapshot.stateReconstruction`).

The driver builds the `LogSegment` with the same listing code as the local engine. Spark then reads
the checkpoint parquet (and V2 sidecars) with its parquet reader and the commits with its text
reader, tags every action with its version and position, repartitions file actions by file
identity into `snapshot_partitions` partitions, sorts each partition by (version, position) and
reconciles it with **the same `InMemoryLogReplay`** the local engine uses (`mapPartitions`).
Protocol, metadata, txns and domain metadata are few: they are reconciled on the driver.

The result (`SparkState`) keeps the reconciled file actions as an RDD: reports aggregate on the
executors, and the file list reaches the driver only when asked (`collect_state`).

Needs `pyspark` only; importing this module does not import it until an engine is created.
"""

from __future__ import annotations

import json
import operator
import re
import threading
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from ...errors import (
    ERROR_CLASSES,
    DeltaError,
    EngineError,
    MalformedCheckpointError,
    MalformedCommitError,
    StorageError,
    error_from_dict,
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
from ...storage import LocalLogStore, LogStore, is_local, local_path, s3fs_options
from .tasks import (
    BAD_LINE,
    FILE_ACTIONS,
    STATE_ACTIONS,
    add_path_row,
    commit_file_keys,
    commit_file_lines,
    digest_task,
    file_summary_task,
    first_json,
    is_add,
    is_file_action,
    is_state_action,
    key_by_file,
    key_row,
    parse_line,
    reconcile_partition,
    removed_after,
    tagger,
    tombstone_summary_task,
)

if TYPE_CHECKING:  # pragma: no cover
    from pyspark import RDD
    from pyspark.sql import DataFrame, SparkSession

    from . import frames as spark_frames

_EXECUTOR_ERROR = re.compile(r"airflow_delta_provider\.delta\.errors\.(?P<cls>\w+): (?P<msg>[^\n]+)")
_VERSION_IN = re.compile(r"version=(?P<v>\d+)")
_HADOOP_GLOB_CHARS = ",{}[]*?\\"

DEFAULT_SNAPSHOT_PARTITIONS = 50
#: Commits after the checkpoint, in total bytes, up to which the driver reads them for their file keys
#: (`SparkReplay.driver_keys_max_bytes`).
DEFAULT_DRIVER_KEYS_MAX_BYTES = 16 << 20
#: Threads the driver reads commit files with from an object store.
_DRIVER_READ_THREADS = 8

_T = TypeVar("_T")

#: Spark settings the engine relies on: the local filesystem without Hadoop's `.crc` checks (log
#: directories often hold stale `.crc` sidecar files that are not Hadoop checksums).
SPARK_CONF: dict[str, str] = {
    "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
    "spark.sql.session.timeZone": "UTC",
}


def hadoop_s3a_conf(storage_options: Mapping[str, Any]) -> dict[str, str]:
    """Spark settings for `s3a://` from fsspec/s3fs-style storage options (key, secret, token, endpoint_url).

    Set on the session in the driver process, never on a command line; Spark's UI redacts them.
    """
    storage_options = s3fs_options(storage_options)  # delta-rs option names too
    conf: dict[str, str] = {}
    key, secret, token = storage_options.get("key"), storage_options.get("secret"), storage_options.get("token")
    if key and secret:
        conf["spark.hadoop.fs.s3a.access.key"] = str(key)
        conf["spark.hadoop.fs.s3a.secret.key"] = str(secret)
        provider = "SimpleAWSCredentialsProvider"
        if token:
            conf["spark.hadoop.fs.s3a.session.token"] = str(token)
            provider = "TemporaryAWSCredentialsProvider"
        conf["spark.hadoop.fs.s3a.aws.credentials.provider"] = f"org.apache.hadoop.fs.s3a.{provider}"
    endpoint = storage_options.get("endpoint_url")
    if endpoint:
        conf["spark.hadoop.fs.s3a.endpoint"] = str(endpoint)
        conf["spark.hadoop.fs.s3a.path.style.access"] = "true"
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(str(endpoint).startswith("https")).lower()
    region = (storage_options.get("client_kwargs") or {}).get("region_name")
    if region:
        conf["spark.hadoop.fs.s3a.endpoint.region"] = str(region)
    return conf


def spark_path(uri: str) -> str:
    """A URI Spark's Hadoop filesystems read: `file:///abs` locally, `s3a://` for `s3://`."""
    if is_local(uri):
        return "file://" + local_path(uri)
    if uri.startswith("s3://"):
        return "s3a://" + uri[len("s3://") :]
    return uri


class DistributedFileState:
    """A snapshot's reconciled file actions, kept on the cluster.

    Two parts: `replayed`, an RDD of `{"add": {...}}` / `{"remove": {...}}` rows that the executors
    reconciled with `InMemoryLogReplay`, and `checkpoint`, the checkpoint's file actions that no later
    commit touched, as DataFrames (`spark_frames`). Same interface as the local `FileState`: counts,
    sizes and tombstone summaries aggregate on the cluster and merge on the driver; the Arrow tables
    (`adds`, `removes`) collect the rows to the driver on first use only, for callers that ask for
    file lists.
    """

    #: Tombstone groups the digest keeps before reports fall back to one query per cutoff.
    max_digest_groups: int = MAX_DIGEST_GROUPS

    def __init__(
        self,
        replayed: RDD,
        table: str,
        version: int,
        checkpoint: spark_frames.CheckpointFiles | None = None,
        partition_columns: tuple[str, ...] = (),
        prefetched: tuple[tuple[str, ...], int, Future[FileDigest]] | None = None,
        persisted: tuple[RDD, ...] = (),
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
        # (partition columns, max groups, the checkpoint half of the digest started during reconstruction)
        self._prefetched = prefetched

    def _run(self, action: Callable[[], Any]) -> Any:
        return run_spark(action, table=self._table, version=self._version)

    def uncache(self) -> None:
        """Unpersist the RDDs this state persisted (parsed log lines, keyed and replayed file actions);
        later reads recompute them from the log."""
        for rdd in self._persisted:
            rdd.unpersist(blocking=False)

    @property
    def rdd(self) -> RDD:
        """Every reconciled file action as a dict row (checkpoint rows serialized by the JVM)."""
        if self.checkpoint is None:
            return self.replayed
        rows = [frame.rdd.map(first_json) for frame in self.checkpoint.json_frames()]
        return self.replayed.context.union([self.replayed, *rows])

    def _both(
        self,
        replayed: Callable[[], _T],
        checkpoint: Callable[[DataFrame], _T],
        merge: Callable[[_T, _T], _T],
        pending: Future[_T] | None = None,
    ) -> _T:
        """`replayed()` merged with `checkpoint(flat)` (or with `pending`, that result already under
        way), the two Spark jobs running side by side.

        The checkpoint's summary is a JVM scan of the untouched rows (one task per parquet row
        group, so often one); the replayed half fills the other cores meanwhile. The flat
        projection is not persisted: each summary reads only the columns it needs, which costs
        less than caching a million rows.
        """
        if self.checkpoint is None:
            return self._run(replayed)
        if pending is None:
            flat = self.checkpoint.flat
            pending = in_background(lambda: self._run(lambda: checkpoint(flat)))
        mine = self._run(replayed)
        return merge(mine, pending.result())

    def _collect(self) -> None:
        if self._adds is not None and self._removes is not None:
            return
        adds: list[AddFile] = []
        removes: list[RemoveFile] = []

        def take(row: Mapping[str, Any]) -> None:
            action = action_from_json(row)
            if isinstance(action, AddFile):
                adds.append(action)
            elif isinstance(action, RemoveFile):
                removes.append(action)

        for row in self._run(self.replayed.collect):
            take(row)
        if self.checkpoint is not None:
            for text in self._run(lambda: list(self.checkpoint.json_rows())):  # type: ignore[union-attr]
                take(json.loads(text))
        self._adds, self._removes = adds_to_table(adds), removes_to_table(removes)

    @property
    def adds(self) -> pa.Table:
        """Active files, collected to the driver."""
        self._collect()
        assert self._adds is not None
        return self._adds

    @property
    def adds_with_stats(self) -> pa.Table:
        return self.adds

    @property
    def removes(self) -> pa.Table:
        """Every tombstone, collected to the driver."""
        self._collect()
        assert self._removes is not None
        return self._removes

    def digest(self) -> FileDigest:
        """File summary and tombstones by (partition, deletion time), computed once: one Python job and
        one JVM query answer `file_summary()`, `count_tombstones_after` and `tombstone_summary` at any cutoff."""
        from . import frames as spark_frames

        if self._digest is None:
            cols, small, most = self.partition_columns, DEFAULT_SMALL_FILE_BYTES, self.max_digest_groups
            prefetched, self._prefetched = self._prefetched, None
            pending = prefetched[2] if prefetched is not None and prefetched[:2] == (cols, most) else None
            parts = self.replayed.mapPartitions(digest_task(small, cols, most))
            self._digest = self._both(
                lambda: parts.fold(FileDigest(FileSummary(small), cols, max_groups=most), FileDigest.merge),
                lambda flat: spark_frames.file_digest(flat, small, cols, most),
                FileDigest.merge,
                pending,
            )
        return self._digest

    def file_summary(self, small_file_bytes: int = DEFAULT_SMALL_FILE_BYTES) -> FileSummary:
        from . import frames as spark_frames

        if small_file_bytes == DEFAULT_SMALL_FILE_BYTES:
            return self.digest().files
        parts = self.replayed.mapPartitions(file_summary_task(small_file_bytes))
        return self._both(
            lambda: parts.fold(FileSummary(small_file_bytes), FileSummary.merge),
            lambda flat: spark_frames.file_summary(flat, small_file_bytes),
            FileSummary.merge,
        )

    @property
    def num_files(self) -> int:
        return self.file_summary().num_files

    @property
    def size_in_bytes(self) -> int:
        return self.file_summary().size_bytes

    def num_distinct_paths(self) -> int:
        paths = self.replayed.filter(is_add).map(add_path_row)
        if self.checkpoint is None:
            return int(self._run(paths.distinct().count))
        from pyspark.sql import functions as F

        flat = self.checkpoint.flat
        frame = flat.sparkSession.createDataFrame(paths, "path string")
        both = flat.where(F.col("is_add")).select("path").unionByName(frame)
        return int(self._run(both.distinct().count))

    def count_tombstones_after(self, cutoff_ms: int) -> int:
        from . import frames as spark_frames

        digest = self.digest()
        if digest.complete:
            return digest.count_tombstones_after(cutoff_ms)
        return self._both(
            self.replayed.filter(removed_after(cutoff_ms)).count,
            lambda flat: spark_frames.count_tombstones_after(flat, cutoff_ms),
            operator.add,
        )

    def tombstone_summary(self, cutoff_ms: int, partition_columns: tuple[str, ...]) -> TombstoneSummary:
        from . import frames as spark_frames

        cols = tuple(partition_columns)
        if cols == self.partition_columns:
            digest = self.digest()
            if digest.complete:
                return digest.tombstone_summary(cutoff_ms)
        parts = self.replayed.mapPartitions(tombstone_summary_task(cutoff_ms, cols))
        return self._both(
            lambda: parts.fold(TombstoneSummary(cutoff_ms, cols), TombstoneSummary.merge),
            lambda flat: spark_frames.tombstone_summary(flat, cutoff_ms, cols),
            TombstoneSummary.merge,
        )


def _partition_columns(metadata: Metadata | None) -> tuple[str, ...]:
    return () if metadata is None else tuple(metadata.partition_columns)


def in_background(action: Callable[[], _T]) -> Future[_T]:
    """Start `action` (driver code that runs Spark jobs) in a daemon thread; its result or error
    is the future's. Daemon, so a driver that fails meanwhile still exits."""
    future: Future[_T] = Future()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(action())
        except BaseException as exc:  # handed to whoever waits for the result
            future.set_exception(exc)

    threading.Thread(target=run, name="delta-spark-engine", daemon=True).start()
    return future


def run_spark(action: Callable[[], Any], *, table: str, version: int | None = None) -> Any:
    """Run a Spark action; a JVM or executor failure becomes a typed error naming the table.

    A missing `s3a` filesystem (no hadoop-aws on the cluster) is said plainly.
    """
    try:
        return action()
    except DeltaError:
        raise
    except Exception as exc:  # Py4JJavaError, PythonException, AnalysisException: not importable here
        text = str(exc)
        raised = _EXECUTOR_ERROR.search(text)
        if raised and raised["cls"] in ERROR_CLASSES:  # a typed error raised on an executor
            where = _VERSION_IN.search(raised["msg"])
            raise error_from_dict(
                {
                    "error_class": raised["cls"],
                    "message": raised["msg"].strip(),
                    "table": table,
                    "version": int(where["v"]) if where else version,
                }
            ) from None
        if ("ClassNotFoundException" in text and "S3AFileSystem" in text) or 'No FileSystem for scheme "s3' in text:
            raise EngineError(
                "Spark cannot read s3a:// paths: the cluster lacks hadoop-aws and the AWS SDK bundle "
                "(add them with --packages org.apache.hadoop:hadoop-aws:<hadoop version> or to the cluster's jars), "
                "or use engine='local'",
                table=table,
                version=version,
            ) from None
        if "FileNotFoundException" in text or "PATH_NOT_FOUND" in text:
            raise StorageError(
                f"Spark could not find a log file (was the log cleaned up during the read?): {_first_line(text)}",
                table=table,
                version=version,
                transient=True,
            ) from None
        raise EngineError(
            f"Spark failed: {type(exc).__name__}: {_first_line(text)}", table=table, version=version
        ) from None


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:500]
    return ""


def _footer_schema(store: LogStore, path: str) -> pa.Schema:
    """The Arrow schema in a parquet file's footer (an empty one when it cannot be read: Spark then
    infers the schema itself and reports the problem)."""
    try:
        with store.open(path) as fh:
            return pq.read_schema(fh)
    except (OSError, pa.ArrowException, ValueError):
        return pa.schema([])


class SparkReplay:
    """State reconstruction on Spark, with the local engine's replay code in each partition (the state
    half of `SparkEngine`, which adds the executors; the checkpoint writer re-reads what it wrote with it).

    By default the checkpoint's file actions stay in the JVM: the rows no commit after the
    checkpoint touches are final (a checkpoint is reconciled state), so only the commits' file
    actions are keyed, shuffled and replayed in Python (`spark_frames`). `plain=True` replays every
    action, checkpoint rows included, through the shuffle and `InMemoryLogReplay`: the reference
    path the default is tested against. `prefetch_digest` (default) starts the checkpoint's half of
    the report digest (`DistributedFileState.digest`) while the commits are still being read: for
    callers that will ask for counts or tombstones; a caller that only lists files turns it off.

    The checkpoint's rows are filtered by the keys the commits touch. When the commits after the
    checkpoint total at most `driver_keys_max_bytes` (16 MiB), the driver reads them for those keys
    itself (the executors' `parse_line`; ~15-30 ms of driver CPU per MB, in a background thread), so the
    checkpoint's scan starts at once, beside the commits' replay, instead of after it. Larger commit
    tails, and any commit the driver cannot read or parse (the executors then report it), take the keys
    from the executors' replay; 0 always does.
    """

    name = "spark"

    def __init__(
        self,
        spark: SparkSession,
        snapshot_partitions: int = DEFAULT_SNAPSHOT_PARTITIONS,
        *,
        plain: bool = False,
        prefetch_digest: bool = True,
        driver_keys_max_bytes: int = DEFAULT_DRIVER_KEYS_MAX_BYTES,
    ) -> None:
        if snapshot_partitions < 1:
            raise ValueError("snapshot_partitions must be >= 1")
        self.spark = spark
        self.snapshot_partitions = snapshot_partitions
        self.plain = plain
        self.prefetch_digest = prefetch_digest
        self.driver_keys_max_bytes = driver_keys_max_bytes

    # -- reading --------------------------------------------------------------------------------------
    def _checkpoint_lines(self, table: str, log_dir: str, store: LogStore, segment: LogSegment) -> RDD | None:
        """Every checkpoint action as a tagged JSON line (the plain path)."""
        cp = segment.checkpoint
        if cp is None:
            return None
        rdds = self._json_part_lines(table, store, segment)
        parquet_paths: list[str] = []
        for part in cp.files:
            if part.extension == "json":
                sidecars = self._json_sidecars(store, part.file.path)
            else:
                parquet_paths.append(part.file.path)
                sidecars = [a.path for a in self._parquet_part_actions(table, store, part.file.path, cp.version)[1]]
            parquet_paths.extend(self._sidecar_paths(table, log_dir, store, cp.version, sidecars))
        if parquet_paths:
            df = self.spark.read.parquet(*[spark_path(p) for p in parquet_paths])
            from pyspark.sql import functions as F

            cols = [c for c in (*FILE_ACTIONS, *STATE_ACTIONS) if c in df.columns]
            lines = df.select(F.to_json(F.struct(*cols))).rdd  # one-column rows: what `tagger` reads
            rdds.append(lines.mapPartitionsWithIndex(tagger(cp.version)))
        return self.spark.sparkContext.union(rdds) if len(rdds) > 1 else rdds[0] if rdds else None

    def _json_part_lines(self, table: str, store: LogStore, segment: LogSegment) -> list[RDD]:
        """The lines of a JSON (V2) checkpoint, tagged with the checkpoint version."""
        cp = segment.checkpoint
        assert cp is not None
        return [
            self.spark.read.text(spark_path(part.file.path)).rdd.map(tuple).mapPartitionsWithIndex(tagger(cp.version))
            for part in cp.files
            if part.extension == "json"
        ]

    @staticmethod
    def _json_sidecars(store: LogStore, path: str) -> list[str]:
        out = []
        for line in store.read_bytes(path).splitlines():
            if b'"sidecar"' in line:
                action = action_from_json(json.loads(line))
                if isinstance(action, Sidecar):
                    out.append(action.path)
        return out

    @staticmethod
    def _parquet_part_actions(
        table: str, store: LogStore, path: str, version: int
    ) -> tuple[list[Action], list[Sidecar]]:
        """Non-file actions of one checkpoint parquet file, read on the driver (small columns only)."""
        with checkpoint_read_errors(table, version, path.rsplit("/", 1)[-1]):
            actions = non_file_actions(read_parquet(store, path, NON_FILE_COLUMNS))
        sidecars = [a for a in actions if isinstance(a, Sidecar)]
        return [a for a in actions if not isinstance(a, Sidecar | CheckpointMetadata)], sidecars

    @staticmethod
    def _sidecar_paths(table: str, log_dir: str, store: LogStore, version: int, names: list[str]) -> list[str]:
        paths = []
        for name in names:
            path = sidecar_path(store.join, log_dir, name)
            if store.head(path) is None:
                raise MalformedCheckpointError(
                    "Sidecar named by the V2 checkpoint is missing", table=table, version=version, file=name
                )
            paths.append(path)
        return paths

    def _commit_lines(self, segment: LogSegment) -> RDD | None:
        if not segment.commits:
            return None
        sc = self.spark.sparkContext
        paths = [spark_path(c.file.path) for c in segment.commits]
        if not any(ch in p for p in paths for ch in _HADOOP_GLOB_CHARS):
            # one job over all commit files: (path, text) pairs, version from the file name
            return sc.wholeTextFiles(",".join(paths)).flatMap(commit_file_lines)
        rdds = [  # names Hadoop would read as globs or lists: one reader per file
            self.spark.read.text(path).rdd.map(tuple).mapPartitionsWithIndex(tagger(commit.version))
            for path, commit in zip(paths, segment.commits, strict=True)
        ]
        return sc.union(rdds)

    # -- reconstruction -------------------------------------------------------------------------------
    def reconstruct(self, table: str, log_dir: str, store: LogStore, segment: LogSegment) -> TableState:
        """Distributed state reconstruction of `segment`: a `TableState` whose files stay on the cluster."""
        return run_spark(
            lambda: self._reconstruct(table, log_dir, store, segment), table=table, version=segment.version
        )

    def _reconstruct(self, table: str, log_dir: str, store: LogStore, segment: LogSegment) -> TableState:
        from pyspark import StorageLevel

        cp = segment.checkpoint
        fast = not self.plain and cp is not None
        # The fast path reads the checkpoint's non-file actions on the driver and its file actions as
        # DataFrames; the plain path turns every checkpoint row into a JSON line for the replay.
        driver_actions: list[Action] = []
        parquet_parts: list[str] = []
        sidecar_names: list[str] = []
        sources: list[RDD] = []
        if fast:
            assert cp is not None
            sources.extend(self._json_part_lines(table, store, segment))
            for part in cp.files:
                if part.extension == "json":
                    sidecar_names.extend(self._json_sidecars(store, part.file.path))
                else:
                    actions, sidecars = self._parquet_part_actions(table, store, part.file.path, cp.version)
                    driver_actions.extend(actions)
                    sidecar_names.extend(a.path for a in sidecars)
                    parquet_parts.append(part.file.path)
        else:
            sources.append(self._checkpoint_lines(table, log_dir, store, segment))
        planned: Future[tuple[spark_frames.CheckpointFiles | None, Any]] | None = None
        group = f"delta-checkpoint-{uuid.uuid4().hex}"
        failed = threading.Event()  # a failed load: the checkpoint's query must not start afterwards
        keyed_rdd: Future[RDD] = Future()  # the executors' keys, for a plan whose driver keys fall back
        if fast:
            assert cp is not None
            sidecar_paths = self._sidecar_paths(table, log_dir, store, cp.version, sidecar_names)
            # planning the checkpoint's DataFrames (and starting its report query) overlaps building the
            # commits' RDDs and the job below
            cols = _partition_columns(next((a for a in reversed(driver_actions) if isinstance(a, Metadata)), None))
            planned = in_background(
                lambda: self._plan_checkpoint(
                    table, segment, store, keyed_rdd, parquet_parts, sidecar_paths, cols, (group, failed)
                )
            )
        try:
            sources.append(self._commit_lines(segment))
            sources = [r for r in sources if r is not None]
            parsed = (
                self.spark.sparkContext.union(sources).map(parse_line).persist(StorageLevel.MEMORY_AND_DISK)
                if sources
                else self.spark.sparkContext.emptyRDD()
            )
            keyed = parsed.filter(is_file_action).map(key_by_file)
            if fast:  # feeds the replay and, when the driver's keys fall back, the broadcast keys
                keyed = keyed.persist(StorageLevel.MEMORY_AND_DISK)
            keyed_rdd.set_result(keyed)
            driver, last_info = self._state_actions(table, segment, parsed, driver_actions)
        except BaseException as exc:
            failed.set()
            if not keyed_rdd.done():
                keyed_rdd.set_exception(exc)
            self.spark.sparkContext.cancelJobGroup(group)
            raise
        checkpoint, prefetched = (None, None) if planned is None else planned.result()
        files = (
            keyed.partitionBy(self.snapshot_partitions)
            .mapPartitions(reconcile_partition)
            .persist(StorageLevel.MEMORY_AND_DISK)
        )
        info = {} if last_info is None else {segment.version: last_info}
        return TableState(
            segment.version,
            driver.current_protocol,
            driver.current_metadata,
            dict(driver.transactions),
            {d.domain: d for d in driver.get_domain_metadata()},
            DistributedFileState(  # type: ignore[arg-type]
                files,
                table,
                segment.version,
                checkpoint,
                _partition_columns(driver.current_metadata),
                prefetched,
                (parsed, keyed),
            ),
            last_info,
            info,
        )

    @staticmethod
    def _state_actions(
        table: str, segment: LogSegment, parsed: RDD, checkpoint_actions: list[Action]
    ) -> tuple[InMemoryLogReplay, CommitInfo | None]:
        """Protocol, metadata, txns, domains (few) reconciled on the driver, the protocol checked;
        and the newest commit's `commitInfo`."""
        state_rows = parsed.filter(is_state_action).collect()
        state_rows.sort(key=lambda p: (p[1], p[2]))
        driver = InMemoryLogReplay()
        last_info: CommitInfo | None = None
        actions: list[Action] = list(checkpoint_actions)
        for name, version, _, body, _ in state_rows:
            if name == BAD_LINE:  # not JSON, or not a valid action (`parse_line`)
                path = next((c.file.path for c in segment.commits if c.version == version), None)
                raise MalformedCommitError(body["message"], table=table, version=version, file=path)
            action = action_from_json({name: body})
            if isinstance(action, CommitInfo):
                if version == segment.version:
                    last_info = action
                continue
            if action is not None:
                actions.append(action)
        driver.append(0, actions)
        if driver.current_protocol is not None:
            check_can_read(driver.current_protocol, table=table, version=segment.version)
        return driver, last_info

    def _plan_checkpoint(
        self,
        table: str,
        segment: LogSegment,
        store: LogStore,
        keyed: Future[RDD],
        parts: list[str],
        sidecars: list[str],
        partition_columns: tuple[str, ...],
        cancel: tuple[str, threading.Event],
    ) -> tuple[spark_frames.CheckpointFiles | None, tuple[tuple[str, ...], int, Future[FileDigest]] | None]:
        """The checkpoint's DataFrames and, when `prefetch_digest`, their half of the `FileDigest`
        already running, for `partition_columns` (the checkpoint's; a commit that changes them makes the
        report ask again). `cancel`: the job group the load cancels when it fails, and the event it sets
        first (a query that has not started by then does not start)."""
        from . import frames as spark_frames

        version = segment.version
        files = self._checkpoint_files(store, segment, keyed, parts, sidecars)
        if files is None or not self.prefetch_digest:
            return files, None
        most = DistributedFileState.max_digest_groups
        flat = files.flat

        group, failed = cancel

        def query() -> FileDigest:
            self.spark.sparkContext.setJobGroup(group, "checkpoint file digest", interruptOnCancel=True)
            if failed.is_set():
                raise EngineError("the load failed before the checkpoint's digest started", table=table)
            return spark_frames.file_digest(flat, DEFAULT_SMALL_FILE_BYTES, partition_columns, most)

        return files, (partition_columns, most, in_background(lambda: run_spark(query, table=table, version=version)))

    def _driver_keys(self, store: LogStore, segment: LogSegment) -> list[str] | None:
        """The keys of the file actions in the segment's commits, read on the driver; `None` when the
        commits exceed `driver_keys_max_bytes` or one cannot be read or parsed here (the executors'
        replay then supplies the keys, and reports what is wrong)."""
        commits = segment.commits
        if sum(c.file.size for c in commits) > self.driver_keys_max_bytes:
            return None

        def keys(commit: ParsedLogPath) -> list[str]:
            return list(commit_file_keys(commit.file.path, store.read_bytes(commit.file.path).decode("utf-8")))

        try:
            if isinstance(store, LocalLogStore) or len(commits) < 2:
                per_commit = [keys(c) for c in commits]
            else:
                from concurrent.futures import ThreadPoolExecutor

                pool = ThreadPoolExecutor(_DRIVER_READ_THREADS, thread_name_prefix="delta-commit-keys")
                try:
                    per_commit = list(pool.map(keys, commits))
                finally:  # a failed read does not wait for the others
                    pool.shutdown(wait=False, cancel_futures=True)
        except Exception:  # the executors read the same commits and raise the typed error
            return None
        return [key for group in per_commit for key in group]

    def _touched(self, store: LogStore, segment: LogSegment, keyed: Future[RDD]) -> DataFrame | None:
        """The keys the commits after the checkpoint touch, as a one-column DataFrame: read by the
        driver (an Arrow table handed to the JVM: no Python job) or, past `driver_keys_max_bytes`, the
        keys of the executors' `keyed` RDD; `None` when there are none."""
        keys = self._driver_keys(store, segment)
        if keys is not None:
            if not keys:
                return None
            try:
                return self.spark.createDataFrame(pa.table({"key": pa.array(keys, pa.string())}))
            except Exception:  # a PySpark without Arrow input (before 4.0): the executors' keys
                pass
        return self.spark.createDataFrame(keyed.result().map(key_row), "key string")

    def _checkpoint_files(
        self, store: LogStore, segment: LogSegment, keyed: Future[RDD], parts: list[str], sidecars: list[str]
    ) -> spark_frames.CheckpointFiles | None:
        """The checkpoint's parquet file actions (parts, then sidecars) minus the keys the commits touch
        (`_touched`, built beside the checkpoint's DataFrames).

        Parts and sidecars are read apart (a V2 part may hold no file actions at all), each with a
        read schema taken from its first footer, so Spark neither infers schemas nor reads stats.
        """
        from . import frames as spark_frames

        touched_frame = in_background(lambda: self._touched(store, segment, keyed))
        groups = [group for group in (parts, sidecars) if group]
        sources = []
        for group in groups:
            schema = spark_frames.summary_read_schema(_footer_schema(store, group[0]))
            reader = self.spark.read if schema is None else self.spark.read.schema(schema)
            sources.append(reader.parquet(*[spark_path(p) for p in group]))
        return spark_frames.checkpoint_files(
            sources,
            lambda: [self.spark.read.parquet(*[spark_path(p) for p in group]) for group in groups],
            touched_frame.result(),
        )

    # -- Engine protocol ------------------------------------------------------------------------------
    def load_state(self, table: str, log_dir: str, store: LogStore, segment: LogSegment) -> TableState:
        return self.reconstruct(table, log_dir, store, segment)

    def extend_state(
        self, table: str, log_dir: str, store: LogStore, state: TableState, segment: LogSegment
    ) -> TableState:
        return self.load_state(table, log_dir, store, segment)
