"""The statistics backfill's executor in this process: each file's `add.stats` recomputed from its rows.

A file is read (only the columns that hold stats columns) through its deletion vector and conformed to the
table's physical schema (`physical_table`, as OPTIMIZE rewrites it), then measured by the writer's own
`collect_stats`, so columns, truncation and nested fields are what a new file gets. With a deletion vector
the stats are tight over the valid rows while `numRecords` stays the physical row count (PROTOCOL.md
"Per-file Statistics": `numRecords` must count the data file's records; `tightBounds=true` bounds and null
counts describe the valid ones), as Delta Spark's `ComputeStats` commits them ("always tight bounds, even
when DVs are present").

INT96 timestamps (older Spark and Hive writers) are read as microseconds: read at pyarrow's default
nanoseconds, a date past 2262 wraps around (9999-12-31 reads as 1816-03-29), and a max that is too small
would let readers skip a file that holds matching rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import DeltaError, LogCorruptedError, StorageError
from ..protocol.actions import AddFile
from ..protocol.schema import COLUMN_ID_KEY, StructField
from ..protocol.stats import stats_columns, stats_to_json
from ..read.deletion_vectors import read_data_file, read_deletion_vector, store_path
from ..write.data_files import physical_table
from ..write.file_schema import FIELD_ID_KEY
from ..write.stats import collect_stats
from . import pool_workers, run_pooled

if TYPE_CHECKING:  # pragma: no cover
    from ..storage import LogStore
    from ..write.data_files import TableLayout
    from . import StatsRecomputer


def _stats_layout(layout: TableLayout) -> TableLayout:
    """`layout` with only the top-level fields that hold a stats column (what the file is read for)."""
    columns = stats_columns(layout.schema, layout.configuration, layout.partition_columns)
    heads = {c.logical_path[0] for c in columns}
    fields = [f for f in layout.schema_json.get("fields", ()) if f.get("name") in heads]
    return dataclasses.replace(layout, schema_json={**layout.schema_json, "fields": fields})


def _matches(column: pa.Field, field: StructField, mode: str) -> bool:
    """Whether a file's top-level `column` may hold `field` (a superset of `physical_table`'s resolution)."""
    column_id = (field.metadata or {}).get(COLUMN_ID_KEY) if mode == "id" else None
    if column_id is not None and column.metadata and column.metadata.get(FIELD_ID_KEY) == str(column_id).encode():
        return True
    return column.name.casefold() == (field.name if mode == "none" else field.physical_name).casefold()


def _footer(store: LogStore, layout: TableLayout, add: AddFile) -> tuple[list[str], pa.Table | None]:
    """The file's top-level columns holding the stats columns, and those of them with an INT96 leaf read as
    microseconds (all rows; None when there are none)."""
    table, mode = layout.table_uri, layout.column_mapping_mode
    try:
        with store.open(store_path(store, table, add.path)) as fh:
            parquet = pq.ParquetFile(fh, coerce_int96_timestamp_unit="us")
            columns = [c.name for c in parquet.schema_arrow if any(_matches(c, f, mode) for f in layout.schema.fields)]
            leaves = (parquet.schema.column(i) for i in range(len(parquet.schema)))
            int96 = {c.path.split(".")[0] for c in leaves if c.physical_type == "INT96"}
            names = [c for c in columns if c in int96]
            return columns, parquet.read(columns=names) if names else None
    except DeltaError:
        raise
    except FileNotFoundError:
        message = "Data file is missing (the log names a file that is not on storage)"
        raise LogCorruptedError(message, table=table, file=add.path) from None
    except (pa.ArrowException, ValueError) as exc:
        message = f"Cannot read data file as Parquet: {type(exc).__name__}: {exc}"
        raise LogCorruptedError(message, table=table, file=add.path) from None
    except OSError as exc:
        message = f"Cannot read data file: {type(exc).__name__}: {exc}"
        raise StorageError(
            message, table=table, file=add.path, transient=not isinstance(exc, PermissionError)
        ) from None


def _valid_rows(store: LogStore, table: str, add: AddFile, rows: pa.Table) -> pa.Table:
    """`rows` (all of the file's) without those its deletion vector deletes."""
    if add.deletion_vector is None or not add.deletion_vector.cardinality:
        return rows
    deleted = read_deletion_vector(store, table, add.deletion_vector, table=table, file=add.path)
    index = pa.array(range(rows.num_rows), pa.uint64())
    return rows.filter(pc.invert(pc.is_in(index, value_set=deleted)))


def recompute_stats(store: LogStore, layout: TableLayout, add: AddFile) -> str:
    """The `add.stats` JSON of `add`'s data file as the table now collects them; only the columns that hold
    stats columns are read.

    :raises LogCorruptedError: the file or its deletion vector is missing or unreadable, or does not hold
        the table's schema (named).
    :raises StorageError: storage failed.
    """
    table = layout.table_uri
    read_layout = _stats_layout(layout)
    columns, int96 = _footer(store, read_layout, add)
    valid = read_data_file(store, table, add, columns=columns, table=table)
    if int96 is not None:
        fixed = _valid_rows(store, table, add, int96)
        for name in fixed.column_names:
            valid = valid.set_column(valid.schema.get_field_index(name), name, fixed.column(name))
    data = physical_table(valid, read_layout, partition_values=add.partition_values, file=add.path)
    stats = collect_stats(
        data, layout.schema, layout.configuration, layout.partition_columns, tight_bounds=layout.tight_bounds
    )
    # read_data_file checked the DV's rows are distinct (its cardinality) and inside the file
    deleted = add.deletion_vector.cardinality if add.deletion_vector is not None else 0
    stats["numRecords"] = valid.num_rows + deleted
    return stats_to_json(stats)


def local_stats_recomputer(max_workers: int | None = None) -> StatsRecomputer:
    """Files on a thread pool (Parquet decoding releases the GIL); the first failure is raised once the
    running files are done, and no other file starts."""

    def run(layout: TableLayout, files: Sequence[AddFile], *, store: LogStore) -> list[str]:
        workers = pool_workers(max_workers, len(files))
        return run_pooled(lambda f: recompute_stats(store, layout, f), files, workers, "stats-backfill")

    return run


__all__ = ["local_stats_recomputer", "recompute_stats"]
