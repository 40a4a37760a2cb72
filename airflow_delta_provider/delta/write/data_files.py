"""Rewrite a bin of data files as one new Parquet file (OPTIMIZE's unit of work, Spark `runOptimizeBinJob`).

Each input is read through its deletion vector (the rows it marks are dropped) with the file's physical
column names and field ids, the inputs are concatenated (columns one file lacks are null there, types
widened where a later file has the wider one), and the result is written once under a fresh name in the
directory the table's writers used for that partition, never over an existing file (`write_new`: a crash
leaves at most a visible untracked file, which VACUUM removes, never a hidden temp file). The returned
`add` carries `dataChange=false`, the partition values copied from the inputs and the statistics Delta
writes (`write.stats`). The function runs where the bytes are: a thread of the local
engine or a Spark executor; it commits nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import StorageError
from ..protocol.actions import AddFile, decode_path
from ..protocol.optimize import Bin
from ..protocol.schema import StructType
from ..read.deletion_vectors import read_data_file
from .stats import stats_json

if TYPE_CHECKING:  # pragma: no cover
    from ..storage import LogStore

#: Delta Spark's and delta-rs's default codec for data files.
COMPRESSION = "snappy"


@dataclass(frozen=True)
class TableLayout:
    """What a bin's rewrite needs to know about the table (picklable: it travels to Spark executors)."""

    table_uri: str
    schema_json: Mapping[str, Any]
    configuration: Mapping[str, str | None]
    partition_columns: tuple[str, ...]
    tight_bounds: bool | None = None
    #: the keys of `partitionValues`, in `partition_columns` order (physical names under column mapping)
    physical_partition_columns: tuple[str, ...] = ()

    @property
    def schema(self) -> StructType:
        return StructType.from_json(self.schema_json)


def hive_partition_dir(partition_values: Mapping[str, str | None], partition_columns: Sequence[str]) -> str:
    """`a=1/b=x%20y`: the Hive-style directory of a partition, URI-encoded as an `add.path` prefix."""
    parts = []
    for c in partition_columns:
        v = partition_values.get(c)
        text = "__HIVE_DEFAULT_PARTITION__" if v is None else v
        parts.append(quote(f"{c}={quote(text, safe='')}", safe="=%"))
    return "/".join(parts)


def output_dir(bin_: Bin, partition_keys: Sequence[str]) -> str:
    """Where the bin's new file goes, as an encoded `add.path` prefix: the directory of its first input
    when that lies under the table root (the layout the table's writers chose, random column-mapping
    prefixes included), else the Hive-style partition directory."""
    first = bin_.files[0].path
    if "://" not in first and not first.startswith("/") and ".." not in first.split("/"):
        return first.rpartition("/")[0]
    return hive_partition_dir(bin_.partition_values, partition_keys)


def new_file_name() -> str:
    """A fresh data file name as Delta Spark spells it (unique: never written over)."""
    return f"part-00000-{uuid.uuid4()}-c000.{COMPRESSION}.parquet"


def _plain_type(t: pa.DataType) -> pa.DataType:
    """`t` with Arrow's view types (which readers of some writers' files produce) as their plain layout."""
    if pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_binary_view(t):
        return pa.binary()
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_plain_type(f.type)) for f in t])
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t):
        item = t.value_field.with_type(_plain_type(t.value_type))
        return pa.large_list(item) if pa.types.is_large_list(t) else pa.list_(item)
    if pa.types.is_map(t):
        return pa.map_(t.key_field.with_type(_plain_type(t.key_type)), t.item_field.with_type(_plain_type(t.item_type)))
    return t


def _plain(table: pa.Table) -> pa.Table:
    schema = pa.schema([f.with_type(_plain_type(f.type)) for f in table.schema], metadata=table.schema.metadata)
    return table if schema.equals(table.schema) else table.cast(schema)


def _concat(tables: list[pa.Table]) -> pa.Table:
    """The inputs as one table: missing columns null, compatible types widened (typeWidening)."""
    tables = [_plain(t) for t in tables]
    if len(tables) == 1:
        return tables[0]
    return pa.concat_tables(tables, promote_options="permissive")


def encode_parquet(data: pa.Table) -> bytes:
    """Parquet bytes as Delta readers expect them: int64 microsecond timestamps (never INT96 or ns)."""
    sink = pa.BufferOutputStream()
    pq.write_table(
        data,
        sink,
        compression=COMPRESSION,
        coerce_timestamps="us",
        allow_truncated_timestamps=True,
        use_deprecated_int96_timestamps=False,
    )
    return sink.getvalue().to_pybytes()


def compact_bin(
    store: LogStore,
    layout: TableLayout,
    bin_: Bin,
    *,
    now_ms: Callable[[], int],
    table: str | None = None,
) -> AddFile | None:
    """Read `bin_`'s files through their deletion vectors, write them as one new file, return its `add`
    (None when no row is left: every row deleted by the DVs; the bin's files are then only removed)."""
    tables = [read_data_file(store, layout.table_uri, f, table=table) for f in bin_.files]
    data = _concat(tables)
    if data.num_rows == 0:
        return None
    stats = stats_json(
        data, layout.schema, layout.configuration, layout.partition_columns, tight_bounds=layout.tight_bounds
    )
    payload = encode_parquet(data)
    prefix = output_dir(bin_, layout.physical_partition_columns or layout.partition_columns)
    name = new_file_name()
    rel = f"{prefix}/{name}" if prefix else name
    target = store.join(layout.table_uri, *decode_path(rel).split("/"))
    try:
        store.write_new(target, payload)
    except OSError as exc:
        raise StorageError(
            f"Cannot write compacted file: {type(exc).__name__}: {exc}",
            table=table,
            file=rel,
            transient=not isinstance(exc, PermissionError | FileExistsError),
        ) from exc
    return AddFile(
        path=rel,
        partition_values=dict(bin_.partition_values),
        size=len(payload),
        modification_time=now_ms(),
        data_change=False,
        stats=stats,
    )
