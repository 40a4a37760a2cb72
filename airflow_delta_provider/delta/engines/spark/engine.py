"""`SparkEngine`: the state replayed on Spark (`state.SparkReplay`) plus the executors it hands out."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .state import DEFAULT_SNAPSHOT_PARTITIONS, SparkReplay

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

    from .. import BinRewriter, CheckpointWriter, FileChecker, StatsRecomputer, VacuumExecutor, ZOrderRewriter


class SparkEngine(SparkReplay):
    """The state replayed on Spark (`SparkReplay`), and each operation's heavy work on the executors.
    `storage_options` (the table's, fsspec) travel inside task closures, never in a DataFrame."""

    in_process = False

    def __init__(
        self,
        spark: SparkSession,
        snapshot_partitions: int = DEFAULT_SNAPSHOT_PARTITIONS,
        *,
        storage_options: Mapping[str, Any] | None = None,
        task_memory_bytes: int | None = None,
        **replay: Any,
    ) -> None:
        super().__init__(spark, snapshot_partitions, **replay)
        self.storage_options = dict(storage_options or {})
        #: memory one ZORDER task may sort in (default: `zorder.task_memory_limit` on the executor)
        self.task_memory_bytes = task_memory_bytes

    def for_checkpoint(self) -> SparkEngine:
        return self

    def checkpoint_writer(self) -> CheckpointWriter:
        """The executors write the file actions; the driver never holds them."""
        from .checkpoint import SparkCheckpointExecutor

        return SparkCheckpointExecutor(self.spark, storage_options=self.storage_options)

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
