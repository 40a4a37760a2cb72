"""OPTIMIZE ZORDER BY on Spark executors: one `mapInArrow` task per partition runs the local engine's
`local_zorder.zorder_bin` (the z-order key is `protocol.zorder.zorder_key`, one function for both engines),
within a memory limit of its own (over it, sorted through spill files on the executor's disk). Only the new
files' `add` actions come back to the driver, which commits them.

`run_items` is the shared driver side of the Spark executors that run one function over JSON items (ZORDER,
the statistics backfill, repair's HEAD checks, the lake scan): each task builds its own store from the
table URI and storage options inside its closure, and a `DeltaError` raised in a task comes back as a
column and is raised on the driver with its class and fields (`errors.error_from_dict`).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...errors import ResourceLimitError
from ...protocol.actions import AddFile
from ...protocol.optimize import Bin
from ...protocol.zorder import ZOrderColumn
from ...write.data_files import TableLayout
from .tasks import batch_rows

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from ...storage import LogStore
    from .. import ZOrderRewriter

ITEM_SCHEMA = "item_id long, item string"
RESULT_SCHEMA = "item_id long, result string, error string"

#: A task's work: built once per task (`() -> run`), then `run(item)` for each of its items (JSON in, out).
TaskFactory = Callable[[], Callable[[str], str]]


def _arrow_task(make: TaskFactory) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The `mapInArrow` function: each input row one item; a `DeltaError` is returned in `error`."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        from ...errors import DeltaError

        work = make()
        for batch in batches:
            ids, results, errors = [], [], []
            for item_id, item in batch_rows(batch, ("item_id", "item")):
                ids.append(item_id)
                try:
                    results.append(work(item))
                    errors.append(None)
                except DeltaError as exc:
                    results.append(None)
                    errors.append(json.dumps(exc.to_dict(), default=str))
            columns = [pa.array(ids, pa.int64()), pa.array(results, pa.string()), pa.array(errors, pa.string())]
            yield pa.RecordBatch.from_arrays(columns, ["item_id", "result", "error"])

    return run


def run_items(spark: SparkSession, items: Sequence[str], make: TaskFactory, *, tasks: int | None = None) -> list[str]:
    """`make()(item)` of each item (JSON text) on the executors, in order; `tasks` Spark tasks (default: one
    per item; rows are dealt round-robin). The first item's `DeltaError` (by item order) is raised here."""
    if not items:
        return []
    from ...errors import error_from_dict

    df = spark.createDataFrame(list(enumerate(items)), ITEM_SCHEMA)
    rows = df.repartition(max(1, min(tasks or len(items), len(items)))).mapInArrow(_arrow_task(make), RESULT_SCHEMA)
    by_id = {r["item_id"]: (r["result"], r["error"]) for r in rows.collect()}
    out = []
    for i in range(len(items)):
        result, error = by_id[i]
        if error is not None:
            raise error_from_dict(json.loads(error))
        out.append(result)
    return out


def task_memory_limit(limit: int | None) -> int | None:
    """The memory one task may sort in: `limit`, else the executor's default limit (half its memory, as the
    local engine's) shared by the tasks its cores run at once."""
    if limit is not None:
        return limit
    from ...read.memory_budget import default_memory_limit

    memory = default_memory_limit()
    return None if memory is None else memory // max(1, os.cpu_count() or 1)


def _over_task_limit(exc: ResourceLimitError, bin_: Bin, limit: int | None) -> ResourceLimitError:
    mib = 1024 * 1024
    return ResourceLimitError(
        f"ZORDER of partition {bin_.partition or '(unpartitioned)'} ({len(bin_.files)} files) needs more than "
        f"a Spark task's memory limit of {(limit or 0) / mib:,.1f} MiB for its z-order keys alone. Raise "
        "SparkEngine(task_memory_bytes=...) or the executors' memory, or select fewer partitions with where; "
        "no file was written for it",
        table=exc.table,
        version=exc.version,
        file=exc.file,
    )


def _zorder_task(
    layout: TableLayout,
    columns: Sequence[ZOrderColumn],
    target_size: int,
    storage_options: Mapping[str, Any],
    memory_limit: int | None,
) -> TaskFactory:
    options, cols = dict(storage_options), list(columns)

    def make() -> Callable[[str], str]:
        from ...storage import store_for
        from ..local_zorder import zorder_bin

        store = store_for(layout.table_uri, options)
        limit = task_memory_limit(memory_limit)
        clock = lambda: int(time.time() * 1000)  # noqa: E731

        def one(item: str) -> str:
            bin_ = Bin.from_dict(json.loads(item))
            try:
                adds = zorder_bin(store, layout, bin_, cols, target_size=target_size, now_ms=clock, memory_limit=limit)
            except ResourceLimitError as exc:  # its message names the local engine's remedies
                raise _over_task_limit(exc, bin_, limit) from None
            return json.dumps([a.to_json() for a in adds])

        return one

    return make


def spark_zorder_rewriter(
    spark: SparkSession, storage_options: Mapping[str, Any], *, memory_limit_bytes: int | None = None
) -> ZOrderRewriter:
    """The Spark engine's `ZOrderRewriter`: each partition one Spark task, sorted within `memory_limit_bytes`
    (default: `task_memory_limit`)."""

    def run(
        layout: TableLayout,
        bins: Sequence[Bin],
        columns: Sequence[ZOrderColumn],
        *,
        target_size: int,
        store: LogStore | None = None,
        clock: Callable[[], int] | None = None,
    ) -> list[list[AddFile]]:
        items = [json.dumps(b.to_dict()) for b in bins]
        make = _zorder_task(layout, columns, target_size, storage_options, memory_limit_bytes)
        return [[AddFile.from_json(a) for a in json.loads(r)] for r in run_items(spark, items, make)]

    return run
