"""The statistics backfill on Spark executors: `local_stats.recompute_stats` (the local engine's function:
the writer's own `collect_stats`, PROTOCOL.md "Per-file Statistics") runs on each file in `mapInArrow`
tasks, a few files per task; only the stats JSON comes back to the driver, which commits."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...protocol.actions import AddFile
from ...write.data_files import TableLayout
from .zorder import TaskFactory, run_items

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

    from ...storage import LogStore
    from .. import StatsRecomputer

#: Files per Spark task (a task reads only the stats columns of each, so many fit).
FILES_PER_TASK = 16


def _stats_task(layout: TableLayout, storage_options: Mapping[str, Any]) -> TaskFactory:
    options = dict(storage_options)

    def make() -> Callable[[str], str]:
        from ...storage import store_for
        from ..local_stats import recompute_stats

        store = store_for(layout.table_uri, options)
        return lambda item: recompute_stats(store, layout, AddFile.from_json(json.loads(item)))

    return make


def spark_stats_recomputer(
    spark: SparkSession, storage_options: Mapping[str, Any], *, files_per_task: int = FILES_PER_TASK
) -> StatsRecomputer:
    """The Spark engine's `StatsRecomputer`: files dealt to tasks of about `files_per_task` each."""

    def run(layout: TableLayout, files: Sequence[AddFile], *, store: LogStore | None = None) -> list[str]:
        items = [json.dumps(f.to_json()) for f in files]
        tasks = -(-len(items) // max(1, files_per_task))
        return run_items(spark, items, _stats_task(layout, storage_options), tasks=tasks)

    return run
