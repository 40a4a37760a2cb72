"""OPTIMIZE's bins on Spark executors: `mapInArrow` runs `write.data_files.compact_bin` (the local thread
pool's function) on each bin, and only the new files' `add` actions come back to the driver, which commits
them. Each task builds its own store from the table URI and the storage options (inside its closure).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...protocol.actions import AddFile
from ...protocol.optimize import Bin
from ...write.data_files import TableLayout
from .tasks import batch_rows

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from ...storage import LogStore

BIN_SCHEMA = "bin_id long, bin string"
ADD_SCHEMA = "bin_id long, add string"


def compact_task(layout: TableLayout, storage_options: Mapping[str, Any]) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The `mapInArrow` function: each input row is one bin (JSON), each output row one of its new files'
    `add` (JSON; with `layout.target_size` a bin's rows roll over to several files, as on the local engine),
    or a null `add` for a bin whose deletion vectors deleted every row."""
    options = dict(storage_options)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        from ...storage import store_for
        from ...write.data_files import compact_bin_files

        store = store_for(layout.table_uri, options)
        clock = lambda: int(time.time() * 1000)  # noqa: E731
        for batch in batches:
            ids, adds = [], []
            for bin_id, text in batch_rows(batch, ("bin_id", "bin")):
                files = compact_bin_files(store, layout, Bin.from_dict(json.loads(text)), now_ms=clock)
                for add in files or [None]:
                    ids.append(bin_id)
                    adds.append(None if add is None else json.dumps(add.to_json()))
            columns = [pa.array(ids, pa.int64()), pa.array(adds, pa.string())]
            yield pa.RecordBatch.from_arrays(columns, ["bin_id", "add"])

    return run


#: Bins whose plan (JSON) totals at most this travel in the tasks' closure: one stage, no shuffle.
_CLOSURE_BYTES = 1 << 20


def _with_bins(texts: Sequence[str]) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """`mapInArrow` over a range's `id` column: each id's row of `BIN_SCHEMA`, its bin from the closure."""
    texts = list(texts)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        for batch in batches:
            ids = batch.column("id").to_pylist()
            yield pa.RecordBatch.from_arrays(
                [pa.array(ids, pa.int64()), pa.array([texts[i] for i in ids], pa.string())], ["bin_id", "bin"]
            )

    return run


def spark_bin_rewriter(spark: SparkSession, storage_options: Mapping[str, Any]) -> Callable[..., list[AddFile | None]]:
    """The Spark engine's `BinRewriter`: each bin one Spark task."""
    from .session import match_session_mode, run_spark

    match_session_mode(spark)

    def run(
        layout: TableLayout,
        bins: Sequence[Bin],
        *,
        store: LogStore | None = None,
        clock: Callable[[], int] | None = None,
    ) -> list[AddFile | None]:
        if not bins:
            return []
        texts = [json.dumps(b.to_dict()) for b in bins]
        if sum(map(len, texts)) <= _CLOSURE_BYTES:  # one stage: a range of bin ids, the bins in the closure
            ids = spark.range(0, len(bins), 1, len(bins))
            df = ids.mapInArrow(_with_bins(texts), BIN_SCHEMA)
        else:  # round-robin: one bin per task
            df = spark.createDataFrame(list(enumerate(texts)), BIN_SCHEMA).repartition(len(bins))
        rewritten = df.mapInArrow(compact_task(layout, storage_options), ADD_SCHEMA)
        # an executor's typed error stays typed; the lambda keeps this module as the job's call site
        out = run_spark(lambda: rewritten.collect(), table=layout.table_uri)
        by_bin: list[list[AddFile]] = [[] for _ in bins]
        for r in out:
            if r["add"] is not None:
                by_bin[r["bin_id"]].append(AddFile.from_json(json.loads(r["add"])))
        if layout.target_size is not None:  # each bin's files, as the local engine's rewriter returns them
            return by_bin  # type: ignore[return-value]
        return [files[0] if files else None for files in by_bin]

    return run
