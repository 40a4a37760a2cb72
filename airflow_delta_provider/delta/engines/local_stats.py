"""The statistics backfill's executor in this process: each file's `add.stats` recomputed from its rows.

A file is read through its deletion vector and conformed to the table's physical schema (`physical_table`,
as OPTIMIZE rewrites it), then measured by the writer's own `collect_stats`, so columns, truncation and
nested fields are what a new file gets. With a deletion vector the stats are tight over the valid rows
while `numRecords` stays the physical row count (PROTOCOL.md "Per-file Statistics": `numRecords` must count
the data file's records; `tightBounds=true` bounds and null counts describe the valid ones), as Delta
Spark's `ComputeStats` commits them ("always tight bounds, even when DVs are present").
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from ..protocol.actions import AddFile
from ..protocol.stats import stats_to_json
from ..read.deletion_vectors import read_data_file
from ..write.data_files import physical_table
from ..write.stats import collect_stats

if TYPE_CHECKING:  # pragma: no cover
    from ..storage import LogStore
    from ..write.data_files import TableLayout
    from . import StatsRecomputer


def recompute_stats(store: LogStore, layout: TableLayout, add: AddFile) -> str:
    """The `add.stats` JSON of `add`'s data file as the table now collects them.

    :raises LogCorruptedError: the file or its deletion vector is missing or unreadable, or does not hold
        the table's schema (named).
    """
    valid = read_data_file(store, layout.table_uri, add, table=layout.table_uri)
    data = physical_table(valid, layout, partition_values=add.partition_values, file=add.path)
    stats = collect_stats(
        data, layout.schema, layout.configuration, layout.partition_columns, tight_bounds=layout.tight_bounds
    )
    # read_data_file checked the DV's rows are distinct (its cardinality) and inside the file
    deleted = add.deletion_vector.cardinality if add.deletion_vector is not None else 0
    stats["numRecords"] = data.num_rows + deleted
    return stats_to_json(stats)


def local_stats_recomputer(max_workers: int | None = None) -> StatsRecomputer:
    """Files on a thread pool (Parquet decoding releases the GIL); the first failure is raised once the
    running files are done, and no other file starts."""

    def run(layout: TableLayout, files: Sequence[AddFile], *, store: LogStore) -> list[str]:
        workers = max_workers or min(len(files), os.cpu_count() or 1) or 1
        if workers == 1 or len(files) <= 1:
            return [recompute_stats(store, layout, f) for f in files]
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="stats-backfill") as pool:
            futures = [pool.submit(recompute_stats, store, layout, f) for f in files]
            try:
                return [f.result() for f in futures]
            finally:
                for f in futures:
                    f.cancel()

    return run


__all__ = ["local_stats_recomputer", "recompute_stats"]
