"""The statistics backfill's executor in this process: each file's `add.stats` recomputed from its rows.

A file is read through its deletion vector and conformed to the table's physical schema (`physical_table`,
as OPTIMIZE rewrites it), then measured by the writer's own `collect_stats`, so columns, truncation and
nested fields are what a new file gets. With a deletion vector the stats are tight over the valid rows
while `numRecords` stays the physical row count (PROTOCOL.md "Per-file Statistics": `numRecords` must count
the data file's records; `tightBounds=true` bounds and null counts describe the valid ones), as Delta
Spark's `ComputeStats` commits them ("always tight bounds, even when DVs are present").

INT96 timestamps (older Spark and Hive writers) are re-read as microseconds: read at pyarrow's default
nanoseconds, a date past 2262 wraps around (9999-12-31 reads as 1816-03-29), and a max that is too small
would let readers skip a file that holds matching rows.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..protocol.actions import AddFile
from ..protocol.stats import stats_to_json
from ..read.deletion_vectors import read_data_file, read_deletion_vector, store_path
from ..write.data_files import physical_table
from ..write.stats import collect_stats

if TYPE_CHECKING:  # pragma: no cover
    from ..storage import LogStore
    from ..write.data_files import TableLayout
    from . import StatsRecomputer


def _has_nanoseconds(type_: pa.DataType) -> bool:
    if pa.types.is_timestamp(type_):
        return type_.unit == "ns"
    return any(_has_nanoseconds(type_.field(i).type) for i in range(type_.num_fields))


def _with_int96_as_micros(store: LogStore, table: str, add: AddFile, valid: pa.Table) -> pa.Table:
    """`valid` with its top-level columns that hold an INT96 leaf read again as microseconds (through the DV)."""
    if not any(_has_nanoseconds(f.type) for f in valid.schema):
        return valid
    with store.open(store_path(store, table, add.path)) as fh:
        parquet = pq.ParquetFile(fh, coerce_int96_timestamp_unit="us")
        leaves = (parquet.schema.column(i) for i in range(len(parquet.schema)))
        names = sorted({c.path.split(".")[0] for c in leaves if c.physical_type == "INT96"})
        if not names:
            return valid
        fixed = parquet.read(columns=names)
    if add.deletion_vector is not None and add.deletion_vector.cardinality:
        deleted = read_deletion_vector(store, table, add.deletion_vector, table=table, file=add.path)
        rows = pa.array(range(fixed.num_rows), pa.uint64())
        fixed = fixed.filter(pc.invert(pc.is_in(rows, value_set=deleted)))
    for name in names:
        valid = valid.set_column(valid.schema.get_field_index(name), name, fixed.column(name))
    return valid


def recompute_stats(store: LogStore, layout: TableLayout, add: AddFile) -> str:
    """The `add.stats` JSON of `add`'s data file as the table now collects them.

    :raises LogCorruptedError: the file or its deletion vector is missing or unreadable, or does not hold
        the table's schema (named).
    """
    valid = read_data_file(store, layout.table_uri, add, table=layout.table_uri)
    valid = _with_int96_as_micros(store, layout.table_uri, add, valid)
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
