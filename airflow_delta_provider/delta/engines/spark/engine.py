"""`SparkEngine`: the state replayed on Spark (`state.SparkReplay`) plus the executors it hands out.

A log smaller than `driver_state_max_bytes` is replayed on the driver by the local engine (a Spark job
costs seconds; a small log's replay milliseconds): the operation's heavy work (listing, deletes,
rewrites, HEAD checks) still runs on the executors, and a checkpoint of such a state is written here.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..local import LocalEngine
from .state import DEFAULT_SNAPSHOT_PARTITIONS, DistributedFileState, SparkReplay

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

    from ...protocol.log_segment import LogSegment
    from ...read.table_state import TableState
    from ...storage import LogStore
    from .. import BinRewriter, CheckpointWriter, FileChecker, StatsRecomputer, VacuumExecutor, ZOrderRewriter


class SparkEngine(SparkReplay):
    """The state replayed on Spark (`SparkReplay`), and each operation's heavy work on the executors.
    `storage_options` (the table's, fsspec) travel inside task closures, never in a DataFrame.

    :param driver_state_max_bytes: logs (checkpoint plus commits) smaller than this are replayed on the
        driver by the local engine (default 0: every state is replayed on the cluster).
    """

    in_process = False

    def __init__(
        self,
        spark: SparkSession,
        snapshot_partitions: int = DEFAULT_SNAPSHOT_PARTITIONS,
        *,
        storage_options: Mapping[str, Any] | None = None,
        task_memory_bytes: int | None = None,
        driver_state_max_bytes: int = 0,
        **replay: Any,
    ) -> None:
        super().__init__(spark, snapshot_partitions, **replay)
        self.driver_state_max_bytes = driver_state_max_bytes
        self.driver = LocalEngine()
        self.storage_options = dict(storage_options or {})
        #: memory one ZORDER task may sort in (default: `zorder.task_memory_limit` on the executor)
        self.task_memory_bytes = task_memory_bytes

    def load_state(self, table: str, log_dir: str, store: LogStore, segment: LogSegment) -> TableState:
        """On the driver when the log is under `driver_state_max_bytes`, else on the cluster."""
        if segment.size_in_bytes < self.driver_state_max_bytes:
            return self.driver.load_state(table, log_dir, store, segment)
        return super().load_state(table, log_dir, store, segment)

    def extend_state(
        self, table: str, log_dir: str, store: LogStore, state: TableState, segment: LogSegment
    ) -> TableState:
        """A driver state gains the new commits on the driver; a cluster state is replayed again."""
        if isinstance(state.files, DistributedFileState):
            return super().extend_state(table, log_dir, store, state, segment)
        return self.driver.extend_state(table, log_dir, store, state, segment)

    def for_checkpoint(self) -> SparkEngine:
        """A driver state read with every file's statistics (the checkpoint writes them all)."""
        if not self.driver_state_max_bytes:
            return self
        engine = copy.copy(self)
        engine.driver = self.driver.for_checkpoint()
        return engine

    def checkpoint_writer(self) -> CheckpointWriter:
        """The executors write a cluster state's file actions (the driver never holds them); a driver
        state's checkpoint is written here."""
        from .checkpoint import SparkCheckpointExecutor

        return SparkCheckpointExecutor(
            self.spark, storage_options=self.storage_options, driver_writer=self.driver.checkpoint_writer()
        )

    def bin_rewriter(self, *, max_workers: int | None = None) -> BinRewriter:
        """One Spark task per bin (`max_workers` is the local engine's)."""
        from .optimize import spark_bin_rewriter

        return spark_bin_rewriter(self.spark, self.storage_options)

    def vacuum_executor(self, *, plan_dir: str | None = None) -> VacuumExecutor:
        """Listing, re-validation and deletes on the executors; a big plan's file list kept at `plan_dir`."""
        from .vacuum import SparkVacuumExecutor

        return SparkVacuumExecutor(self.spark, storage_options=self.storage_options, plan_dir=plan_dir)

    def zorder_rewriter(self, *, max_workers: int | None = None) -> ZOrderRewriter:
        """One Spark task per partition, within `task_memory_bytes` (`max_workers` is the local engine's)."""
        from .zorder import spark_zorder_rewriter

        return spark_zorder_rewriter(self.spark, self.storage_options, memory_limit_bytes=self.task_memory_bytes)

    def stats_recomputer(self, *, max_workers: int | None = None) -> StatsRecomputer:
        """Files read on the executors, a few per task (`max_workers` is the local engine's)."""
        from .stats import spark_stats_recomputer

        return spark_stats_recomputer(self.spark, self.storage_options)

    def file_checker(self, *, max_workers: int | None = None) -> FileChecker:
        """HEAD requests on the executors where the state's files are, `max_workers` in flight per task."""
        from .repair import SparkFileChecker

        return SparkFileChecker(self.spark, self.storage_options, max_workers=max_workers)
