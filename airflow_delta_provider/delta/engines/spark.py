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
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from ..actions import (
    Action,
    AddFile,
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    SetTransaction,
    Sidecar,
    action_from_json,
)
from ..errors import MalformedCheckpointError
from ..file_state import FileState, adds_to_table, removes_to_table
from ..filenames import SIDECAR_DIR_NAME
from ..log_segment import LogSegment
from ..replay import InMemoryLogReplay
from ..storage import LogStore, is_local, local_path
from ..table_features import check_can_read
from ..table_state import TableState
from .spark_tasks import (
    FILE_ACTIONS,
    STATE_ACTIONS,
    is_file_action,
    is_state_action,
    key_by_file,
    parse_line,
    reconcile_partition,
    tagger,
)

if TYPE_CHECKING:  # pragma: no cover
    from pyspark import RDD
    from pyspark.sql import SparkSession

DEFAULT_SNAPSHOT_PARTITIONS = 50

#: Spark settings the engine relies on: the local filesystem without Hadoop's `.crc` checks (log
#: directories often hold stale `.crc` sidecar files that are not Hadoop checksums).
SPARK_CONF: dict[str, str] = {
    "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
    "spark.sql.session.timeZone": "UTC",
}


def spark_path(uri: str) -> str:
    """A URI Spark's Hadoop filesystems read: `file:///abs` locally, `s3a://` for `s3://`."""
    if is_local(uri):
        return "file://" + local_path(uri)
    if uri.startswith("s3://"):
        return "s3a://" + uri[len("s3://") :]
    return uri


@dataclass
class SparkState:
    """A reconstructed state: driver-side protocol/metadata/txns/domains, file actions as an RDD."""

    version: int
    protocol: Protocol | None
    metadata: Metadata | None
    transactions: dict[str, SetTransaction]
    domain_metadata: dict[str, DomainMetadata]
    last_commit_info: CommitInfo | None
    files: RDD  # of {"add": {...}} / {"remove": {...}}

    def collect_state(self) -> TableState:
        """The full `TableState` on the driver (collects every file action: small tables only)."""
        adds: list[AddFile] = []
        removes: list[RemoveFile] = []
        for row in self.files.collect():
            action = action_from_json(row)
            if isinstance(action, AddFile):
                adds.append(action)
            elif isinstance(action, RemoveFile):
                removes.append(action)
        info = {} if self.last_commit_info is None else {self.version: self.last_commit_info}
        return TableState(
            self.version,
            self.protocol,
            self.metadata,
            self.transactions,
            self.domain_metadata,
            FileState(adds_to_table(adds), removes_to_table(removes)),
            self.last_commit_info,
            info,
        )


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
        rdds = []
        for commit in segment.commits:
            text = self.spark.read.text(spark_path(commit.file.path))
            rdds.append(text.rdd.map(tuple).mapPartitionsWithIndex(tagger(commit.version)))
        return self.spark.sparkContext.union(rdds)

    # -- reconstruction -------------------------------------------------------------------------------
    def reconstruct(self, table: str, log_dir: str, store: LogStore, segment: LogSegment) -> SparkState:
        """Distributed state reconstruction of `segment`."""
        sources = [
            r for r in (self._checkpoint_lines(table, log_dir, store, segment), self._commit_lines(segment)) if r
        ]
        parsed = self.spark.sparkContext.union(sources).map(parse_line).cache()
        # Protocol, metadata, txns, domains, commitInfo: few; reconcile them on the driver.
        state_rows = parsed.filter(is_state_action).collect()
        state_rows.sort(key=lambda p: (p[1], p[2]))
        driver = InMemoryLogReplay()
        last_info: CommitInfo | None = None
        actions: list[Action] = []
        for name, version, _, body in state_rows:
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
        )
        return SparkState(
            version=segment.version,
            protocol=driver.current_protocol,
            metadata=driver.current_metadata,
            transactions=dict(driver.transactions),
            domain_metadata={d.domain: d for d in driver.get_domain_metadata()},
            last_commit_info=last_info,
            files=files,
        )

    # -- Engine protocol ------------------------------------------------------------------------------
    def load_state(self, table: str, log_dir: str, store: LogStore, segment: LogSegment) -> TableState:
        return self.reconstruct(table, log_dir, store, segment).collect_state()

    def extend_state(
        self, table: str, log_dir: str, store: LogStore, state: TableState, segment: LogSegment
    ) -> TableState:
        return self.load_state(table, log_dir, store, segment)
