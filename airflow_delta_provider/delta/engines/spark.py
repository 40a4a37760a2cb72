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
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..actions import (
    Action,
    AddFile,
    CommitInfo,
    RemoveFile,
    Sidecar,
    action_from_json,
)
from ..aggregates import DEFAULT_SMALL_FILE_BYTES, FileSummary, TombstoneSummary
from ..errors import (
    ERROR_CLASSES,
    DeltaError,
    EngineError,
    MalformedCheckpointError,
    MalformedCommitError,
    StorageError,
    error_from_dict,
)
from ..file_state import adds_to_table, removes_to_table
from ..filenames import SIDECAR_DIR_NAME
from ..log_segment import LogSegment
from ..replay import InMemoryLogReplay
from ..storage import LogStore, is_local, local_path, s3fs_options
from ..table_features import check_can_read
from ..table_state import TableState
from .spark_tasks import (
    BAD_LINE,
    FILE_ACTIONS,
    STATE_ACTIONS,
    add_path,
    commit_file_lines,
    file_summary_task,
    is_add,
    is_file_action,
    is_state_action,
    key_by_file,
    parse_line,
    reconcile_partition,
    removed_after,
    tagger,
    tombstone_summary_task,
)

if TYPE_CHECKING:  # pragma: no cover
    from pyspark import RDD
    from pyspark.sql import SparkSession

_EXECUTOR_ERROR = re.compile(r"airflow_delta_provider\.delta\.errors\.(?P<cls>\w+): (?P<msg>[^\n]+)")
_VERSION_IN = re.compile(r"version=(?P<v>\d+)")
_HADOOP_GLOB_CHARS = ",{}[]*?\\"

DEFAULT_SNAPSHOT_PARTITIONS = 50

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
    """A snapshot's reconciled file actions as an RDD (`{"add": {...}}` / `{"remove": {...}}` rows).

    Same interface as the local `FileState`: counts, sizes and tombstone summaries aggregate on the
    executors (`mapPartitions` + merge on the driver); the Arrow tables (`adds`, `removes`) collect
    the rows to the driver on first use only, for callers that ask for file lists.
    """

    def __init__(self, rdd: RDD, table: str, version: int) -> None:
        self.rdd = rdd
        self._table = table
        self._version = version
        self._adds: pa.Table | None = None
        self._removes: pa.Table | None = None
        self._summary: FileSummary | None = None

    def _run(self, action: Callable[[], Any]) -> Any:
        return run_spark(action, table=self._table, version=self._version)

    def _collect(self) -> None:
        if self._adds is not None and self._removes is not None:
            return
        adds: list[AddFile] = []
        removes: list[RemoveFile] = []
        for row in self._run(self.rdd.collect):
            action = action_from_json(row)
            if isinstance(action, AddFile):
                adds.append(action)
            elif isinstance(action, RemoveFile):
                removes.append(action)
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

    def file_summary(self, small_file_bytes: int = DEFAULT_SMALL_FILE_BYTES) -> FileSummary:
        if self._summary is not None and self._summary.small_file_bytes == small_file_bytes:
            return self._summary
        parts = self.rdd.mapPartitions(file_summary_task(small_file_bytes))
        summary = self._run(lambda: parts.fold(FileSummary(small_file_bytes), FileSummary.merge))
        if small_file_bytes == DEFAULT_SMALL_FILE_BYTES:
            self._summary = summary
        return summary

    @property
    def num_files(self) -> int:
        return self.file_summary().num_files

    @property
    def size_in_bytes(self) -> int:
        return self.file_summary().size_bytes

    def num_distinct_paths(self) -> int:
        return int(self._run(self.rdd.filter(is_add).map(add_path).distinct().count))

    def count_tombstones_after(self, cutoff_ms: int) -> int:
        return int(self._run(self.rdd.filter(removed_after(cutoff_ms)).count))

    def tombstone_summary(self, cutoff_ms: int, partition_columns: tuple[str, ...]) -> TombstoneSummary:
        cols = tuple(partition_columns)
        parts = self.rdd.mapPartitions(tombstone_summary_task(cutoff_ms, cols))
        return self._run(lambda: parts.fold(TombstoneSummary(cutoff_ms, cols), TombstoneSummary.merge))


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


class SparkEngine:
    """State reconstruction on Spark, with the local engine's replay code in each partition."""

    name = "spark"

    def __init__(self, spark: SparkSession, snapshot_partitions: int = DEFAULT_SNAPSHOT_PARTITIONS) -> None:
        if snapshot_partitions < 1:
            raise ValueError("snapshot_partitions must be >= 1")
        self.spark = spark
        self.snapshot_partitions = snapshot_partitions

    # -- reading --------------------------------------------------------------------------------------
    def _checkpoint_lines(self, table: str, log_dir: str, store: LogStore, segment: LogSegment) -> RDD | None:
        cp = segment.checkpoint
        if cp is None:
            return None
        sc = self.spark.sparkContext
        rdds = []
        parquet_paths: list[str] = []
        sidecars: list[str] = []
        for part in cp.files:
            if part.extension == "json":
                text = self.spark.read.text(spark_path(part.file.path))
                rdds.append(text.rdd.map(tuple).mapPartitionsWithIndex(tagger(cp.version)))
                for line in store.read_bytes(part.file.path).splitlines():
                    if b'"sidecar"' in line:
                        action = action_from_json(json.loads(line))
                        if isinstance(action, Sidecar):
                            sidecars.append(action.path)
            else:
                parquet_paths.append(part.file.path)
                sidecars.extend(self._sidecars_in_parquet(table, store, part.file.path, cp.version))
        for name in sidecars:
            path = name if ("://" in name or name.startswith("/")) else store.join(log_dir, SIDECAR_DIR_NAME, name)
            if store.head(path) is None:
                raise MalformedCheckpointError(
                    "Sidecar named by the V2 checkpoint is missing", table=table, version=cp.version, file=name
                )
            parquet_paths.append(path)
        if parquet_paths:
            df = self.spark.read.parquet(*[spark_path(p) for p in parquet_paths])
            cols = [c for c in (*FILE_ACTIONS, *STATE_ACTIONS) if c in df.columns]
            lines = df.select(*cols).toJSON().map(lambda s: (s,))
            rdds.append(lines.mapPartitionsWithIndex(tagger(cp.version)))
        return sc.union(rdds) if len(rdds) > 1 else rdds[0]

    @staticmethod
    def _sidecars_in_parquet(table: str, store: LogStore, path: str, version: int) -> list[str]:
        try:
            with store.open(path) as fh:
                pf = pq.ParquetFile(fh)
                if "sidecar" not in pf.schema_arrow.names:
                    return []
                col = pf.read(columns=["sidecar"]).column("sidecar")
        except (OSError, pa.ArrowException) as exc:
            raise MalformedCheckpointError(f"Cannot read checkpoint: {exc}", table=table, version=version) from None
        return [row["path"] for row in col.to_pylist() if row and row.get("path")]

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

        sources = [
            r for r in (self._checkpoint_lines(table, log_dir, store, segment), self._commit_lines(segment)) if r
        ]
        parsed = self.spark.sparkContext.union(sources).map(parse_line).persist(StorageLevel.MEMORY_AND_DISK)
        # Protocol, metadata, txns, domains, commitInfo: few; reconcile them on the driver.
        state_rows = parsed.filter(is_state_action).collect()
        state_rows.sort(key=lambda p: (p[1], p[2]))
        driver = InMemoryLogReplay()
        last_info: CommitInfo | None = None
        actions: list[Action] = []
        for name, version, _, body in state_rows:
            if name == BAD_LINE:
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
        files = (
            parsed.filter(is_file_action)
            .map(key_by_file)
            .partitionBy(self.snapshot_partitions)
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
            DistributedFileState(files, table, segment.version),  # type: ignore[arg-type]
            last_info,
            info,
        )

    # -- Engine protocol ------------------------------------------------------------------------------
    def load_state(self, table: str, log_dir: str, store: LogStore, segment: LogSegment) -> TableState:
        return self.reconstruct(table, log_dir, store, segment)

    def extend_state(
        self, table: str, log_dir: str, store: LogStore, state: TableState, segment: LogSegment
    ) -> TableState:
        return self.load_state(table, log_dir, store, segment)
