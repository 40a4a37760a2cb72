"""Rewrite a bin of data files as new Parquet files of the target size (OPTIMIZE's unit of work, Spark
`runOptimizeBinJob`).

Inputs are read through their deletion vectors (PROTOCOL.md "Deletion Vectors") and cast to the physical
Arrow schema the Delta schema declares (`arrow_type`, as delta-rs and the kernels write it), columns found
by field id or (physical) name ("Column Mapping"). The new files are encoded, checked and written by
`data_file_writer.DataFileWriter`. Runs on a local thread or a Spark executor; commits nothing.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import LogCorruptedError, OperationNotAllowedError
from ..protocol.actions import AddFile
from ..protocol.optimize import Bin
from ..protocol.schema import COLUMN_ID_KEY, HIVE_DEFAULT_PARTITION, StructField, StructType, parse_partition_value
from ..protocol.table_properties import column_mapping_mode
from ..protocol.zorder import u64_scalar
from ..read.deletion_vectors import check_deleted_rows, open_data_file
from .data_file_writer import BackgroundStores, DataFileWriter
from .file_schema import (
    FIELD_ID_KEY,
    VARIANT_TYPE,
    DeltaType,
    primitive_arrow_type,
    variant_fields,
)

if TYPE_CHECKING:  # pragma: no cover
    from ..storage import LogStore


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
    #: the table version the rewrite read (named by its errors)
    version: int | None = None
    #: bytes per new file: a bin's rows past it roll over to another file (`compact_bin_files`); None: one
    target_size: int | None = None

    @cached_property
    def schema(self) -> StructType:
        return StructType.from_json(self.schema_json)

    @property
    def column_mapping_mode(self) -> str:
        return column_mapping_mode(self.configuration)

    @property
    def partition_keys(self) -> tuple[str, ...]:
        """The keys of `partitionValues` (and partition directory names), in `partition_columns` order."""
        return self.physical_partition_columns or self.partition_columns


def hive_partition_dir(partition_values: Mapping[str, str | None], partition_columns: Sequence[str]) -> str:
    """`a=1/b=x%20y`: the Hive-style directory of a partition, URI-encoded as an `add.path` prefix."""
    parts = []
    for c in partition_columns:
        v = partition_values.get(c)
        text = HIVE_DEFAULT_PARTITION if v is None else v
        parts.append(quote(f"{c}={quote(text, safe='')}", safe="=%"))
    return "/".join(parts)


def output_dir(bin_: Bin, partition_keys: Sequence[str]) -> str:
    """The encoded `add.path` prefix of the bin's new file: its first input's directory when under the
    table root (the writers' layout), else the Hive-style partition directory."""
    first = bin_.files[0].path
    if "://" not in first and not first.startswith("/") and ".." not in first.split("/"):
        return first.rpartition("/")[0]
    return hive_partition_dir(bin_.partition_values, partition_keys)


class _NotHeld(Exception):
    """A file's column cannot hold the Delta type (the caller names the file)."""


def arrow_type(delta_type: DeltaType, mode: str = "none") -> pa.DataType | None:
    """The Arrow type a Delta type is written as (None for a primitive type this writer does not know)."""
    if isinstance(delta_type, str):
        if delta_type == "variant":
            return VARIANT_TYPE
        return primitive_arrow_type(delta_type)
    kind = delta_type.get("type")
    if kind == "struct":
        fields = [(f, arrow_type(f.type, mode)) for f in StructType.from_json(delta_type).fields]
        return None if any(t is None for _, t in fields) else pa.struct([arrow_field(f, t, mode) for f, t in fields])
    if kind == "array":
        element = arrow_type(delta_type["elementType"], mode)
        return None if element is None else pa.list_(pa.field("element", element))
    if kind == "map":
        key, value = arrow_type(delta_type["keyType"], mode), arrow_type(delta_type["valueType"], mode)
        return None if key is None or value is None else pa.map_(pa.field("key", key, False), pa.field("value", value))
    return None


def arrow_field(field: StructField, type_: pa.DataType, mode: str) -> pa.Field:
    """`field` as written: physical name and field id under column mapping; always nullable, as Spark writes."""
    if mode == "none":
        return pa.field(field.name, type_)
    column_id = (field.metadata or {}).get(COLUMN_ID_KEY)
    metadata = None if column_id is None else {FIELD_ID_KEY: str(column_id).encode()}
    return pa.field(field.physical_name, type_, metadata=metadata)


def _source_index(fields: Sequence[pa.Field], field: StructField, mode: str) -> int:
    """The index of the file's column holding `field` (-1: none): by field id in `id` mode, else by
    (physical) name, exactly, then ignoring case as Spark resolves Parquet columns."""
    if mode == "id" and (column_id := (field.metadata or {}).get(COLUMN_ID_KEY)) is not None:
        wanted = str(column_id).encode()
        for i, f in enumerate(fields):
            if f.metadata and f.metadata.get(FIELD_ID_KEY) == wanted:
                return i
    name = field.name if mode == "none" else field.physical_name
    names = [f.name for f in fields]
    if name in names:
        return names.index(name)
    folded = [i for i, n in enumerate(names) if n.casefold() == name.casefold()]
    return folded[0] if len(folded) == 1 else -1


def _holds(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether a file's `source` column holds `target` (a primitive's Arrow type): the same kind in any
    width or encoding writers use, or a narrower type that type widening reads as the wider one."""
    t = pa.types
    if t.is_null(source) or source == target:
        return True
    if t.is_integer(target):
        return t.is_integer(source)
    if t.is_floating(target):
        return t.is_floating(source) or t.is_integer(source)
    if t.is_decimal(target):
        return t.is_decimal(source) or t.is_integer(source)
    if t.is_string(target):  # unannotated BYTE_ARRAY: how some legacy writers store strings
        return any(f(source) for f in (t.is_string, t.is_large_string, t.is_string_view, t.is_binary))
    if t.is_binary(target):
        return any(f(source) for f in (t.is_binary, t.is_large_binary, t.is_binary_view, t.is_fixed_size_binary))
    if t.is_date(target):
        return t.is_date(source)
    if t.is_timestamp(target):
        return t.is_timestamp(source) or (target.tz is None and t.is_date(source))
    return t.is_boolean(target) and t.is_boolean(source)


def _mask(array: pa.Array) -> pa.Array | None:
    return array.is_null() if array.null_count else None


def _required(child: pa.Array, parent: pa.Array, path: str) -> pa.Array:
    """`child` for a required field: a null under a non-null parent cannot be held; under a null parent it
    becomes an empty value (pyarrow refuses nulls in a required field; Parquet writes none there)."""
    if not child.null_count:
        return child
    if pc.any(pc.and_(parent.is_valid(), child.is_null())).as_py():
        raise _NotHeld(f"column {path} is null in a variant that is not (a variant's value and metadata are required)")
    return pc.fill_null(child, pa.scalar(b"", child.type))


def _variant(array: pa.Array, mode: str, path: str) -> pa.Array:
    """An unshredded variant column as `VARIANT_TYPE` (its fields' order, binary kind and `_` fields ignored)."""
    children = dict(zip([f.name for f in array.type], array.flatten(), strict=True))
    arrays = [
        _required(_conform(children[name], "binary", mode, f"{path}.{name}"), array, f"{path}.{name}")
        for name in VARIANT_TYPE.names
    ]
    return pa.StructArray.from_arrays(arrays, fields=list(VARIANT_TYPE), mask=_mask(array))


def _nulls(length: int, type_: pa.DataType | None) -> pa.Array:
    """`length` nulls of `type_` that Parquet can write (a struct's required binary children hold empty values)."""
    if type_ is None:
        return pa.nulls(length, pa.null())
    if not pa.types.is_struct(type_) or all(f.nullable and not pa.types.is_struct(f.type) for f in type_):
        return pa.nulls(length, type_)
    children = [
        _nulls(length, f.type) if f.nullable or not pa.types.is_binary(f.type) else pa.repeat(pa.scalar(b""), length)
        for f in type_
    ]
    return pa.StructArray.from_arrays(children, fields=list(type_), mask=pa.repeat(pa.scalar(True), length))


def _conform(array: pa.Array, delta_type: DeltaType, mode: str, path: str) -> pa.Array:
    """`array` (a file's column) as the Arrow type of `delta_type`; raises `_NotHeld` or `pa.ArrowInvalid`."""
    source = array.type
    if pa.types.is_dictionary(source):
        array = array.dictionary_decode()
        source = array.type
    if delta_type == "variant":  # unshredded: Spark's (value, metadata) struct; shredded: kept as the file has it
        fields = variant_fields(source)
        if fields is not None and set(fields) == set(VARIANT_TYPE.names):
            return _variant(array, mode, path)
        return array
    if isinstance(delta_type, str):
        target = arrow_type(delta_type, mode)
        if target is None:  # a type this writer does not know: kept as the file has it
            return array
        if source == target:
            return array
        if not _holds(source, target):
            raise _NotHeld(f"column {path} is {source}, which cannot hold Delta type {delta_type}")
        return pc.cast(array, options=pc.CastOptions(target, allow_time_truncate=True))
    kind = delta_type.get("type")
    if kind == "struct" and pa.types.is_struct(source):
        sources = list(source)
        children = array.flatten()  # offset-adjusted, the parent's nulls in each child
        fields, arrays = [], []
        for f in StructType.from_json(delta_type).fields:
            i = _source_index(sources, f, mode)
            child = (
                _conform(children[i], f.type, mode, f"{path}.{f.name}")
                if i >= 0
                else _nulls(len(array), arrow_type(f.type, mode))
            )
            fields.append(arrow_field(f, child.type, mode))
            arrays.append(child)
        return pa.StructArray.from_arrays(arrays, fields=fields, mask=_mask(array))
    if kind == "array" and (pa.types.is_list_view(source) or pa.types.is_large_list_view(source)):
        array = array.cast(pa.list_(source.value_field))
        source = array.type
    if kind == "array" and (pa.types.is_list(source) or pa.types.is_large_list(source)):
        values = _conform(array.values, delta_type["elementType"], mode, f"{path}.element")
        offsets = array.offsets.cast(pa.int32())
        element = pa.field("element", values.type)
        return pa.ListArray.from_arrays(offsets, values, type=pa.list_(element), mask=_mask(array))
    if kind == "map" and pa.types.is_map(source):
        keys = _conform(array.keys, delta_type["keyType"], mode, f"{path}.key")
        items = _conform(array.items, delta_type["valueType"], mode, f"{path}.value")
        type_ = pa.map_(pa.field("key", keys.type, False), pa.field("value", items.type))
        return pa.MapArray.from_arrays(array.offsets, keys, items, type=type_, mask=_mask(array))
    raise _NotHeld(f"column {path} is {source}, which cannot hold Delta type {kind}")


def _column(data: pa.Table, index: int, delta_type: DeltaType, mode: str, path: str) -> pa.ChunkedArray:
    column = data.column(index)
    chunks = column.chunks or [pa.array([], column.type)]
    conformed = [_conform(c, delta_type, mode, path) for c in chunks]
    return pa.chunked_array(conformed, type=conformed[0].type)


def physical_table(
    data: pa.Table,
    layout: TableLayout,
    *,
    partition_values: Mapping[str, str | None],
    partition_columns_in_files: bool = False,
    file: str | None = None,
) -> pa.Table:
    """`data` (a file's rows) in the table's physical schema: columns in schema order, cast to `arrow_type`,
    missing ones null, extra ones dropped. Partition columns only with `partition_columns_in_files`
    (`materializePartitionColumns`), filled from the partition values where a file lacks them.
    Raises `LogCorruptedError` naming `file` when a column cannot hold its type.
    """
    mode = layout.column_mapping_mode
    partitions = dict(zip(layout.partition_columns, layout.partition_keys, strict=False))
    sources = list(data.schema)
    fields, columns = [], []
    try:
        for f in layout.schema.fields:
            if f.name in partitions and not partition_columns_in_files:
                continue
            i = _source_index(sources, f, mode)
            if i >= 0:
                column = _column(data, i, f.type, mode, f.name)
            elif f.name in partitions:
                value = parse_partition_value(partition_values.get(partitions[f.name]), f.type_name)
                column = pa.chunked_array([pa.array([value] * data.num_rows, arrow_type(f.type, mode))])
            else:
                column = pa.chunked_array([_nulls(data.num_rows, arrow_type(f.type, mode))])
            fields.append(arrow_field(f, column.type, mode))
            columns.append(column)
    except (_NotHeld, pa.ArrowException) as exc:
        raise LogCorruptedError(
            f"Data file does not hold the table's schema: {exc}", table=layout.table_uri, file=file
        ) from None
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def _passthrough(schema: pa.Schema, layout: TableLayout, in_files: bool) -> list[int] | None:
    """The source column of each of `physical_table`'s columns when it keeps every one as it is (found, of a
    primitive Delta type, already its Arrow type); None when any would be cast, filled or rebuilt."""
    mode, sources = layout.column_mapping_mode, list(schema)
    partitions = set(layout.partition_columns)
    indices = []
    for f in layout.schema.fields:
        if f.name in partitions and not in_files:
            continue
        i = _source_index(sources, f, mode)
        if i < 0 or not isinstance(f.type, str) or f.type == "variant" or sources[i].type != arrow_type(f.type, mode):
            return None
        indices.append(i)
    return indices


def has_partition_columns(schema: pa.Schema, layout: TableLayout) -> bool:
    """Whether a file of `schema` carries a partition column (a writer materializing them)."""
    mode, sources, partitions = layout.column_mapping_mode, list(schema), set(layout.partition_columns)
    return any(_source_index(sources, f, mode) >= 0 for f in layout.schema.fields if f.name in partitions)


#: Rows per batch read from an input file.
READ_BATCH_ROWS = 64 * 1024
#: An input file of at most this many bytes is read with one `read()` and decoded from memory: Parquet's
#: footer and column-chunk reads through a Python file object each take the GIL (about ten per file), which
#: the other bin thread holds much of the time. Reading 1,000 100 KiB files on two threads: 1.8-2.6 s wall
#: instead of 2.5-3.3 s (4 rounds each, load 12); on an object store, one GET per small file.
READ_WHOLE_BYTES = 2 * 1024 * 1024
_ARANGE: list[pa.Array] = []


def _positions(n: int) -> pa.Array:
    """Row positions 0..n-1 as uint64 (n <= `READ_BATCH_ROWS`: one array built once, sliced)."""
    if not _ARANGE:
        positions = array("Q", range(READ_BATCH_ROWS))  # not pa.array: it imports pandas
        _ARANGE.append(pa.Array.from_buffers(pa.uint64(), READ_BATCH_ROWS, [None, pa.py_buffer(positions)]))
    return _ARANGE[0].slice(0, n)


def iter_file_rows(store: LogStore, table_root: str, add: AddFile, *, table: str | None = None) -> Iterator[pa.Table]:
    """The rows of `add`'s Parquet file its deletion vector keeps, in batches of at most `READ_BATCH_ROWS`
    (as `read_data_file` reads them whole: the file's own schema, INT96 at microseconds), each batch filtered
    by the vector's rows in its range. Raises as `read_data_file` does."""
    table = table if table is not None else table_root
    with open_data_file(store, table_root, add, table=table) as (fh, deleted):
        # INT96 past 2262 stays exact. No pre-buffering: on a Python file object it issues the reads
        # through Arrow's I/O thread pool, which costs ~0.4 ms CPU per file (1.27 vs 0.87 ms for a
        # 100 KiB file, 45% more) and buys nothing here (a local file, or an object store's block cache).
        source: Any = fh
        if add.size <= READ_WHOLE_BYTES:  # the log's size: a larger file than it says is read as a stream
            data = fh.read(READ_WHOLE_BYTES + 1)
            if len(data) <= READ_WHOLE_BYTES:
                source = pa.BufferReader(pa.py_buffer(data))
            else:
                fh.seek(0)
            del data
        parquet = pq.ParquetFile(source, coerce_int96_timestamp_unit="us", pre_buffer=False)
        num_rows = parquet.metadata.num_rows
        check_deleted_rows(deleted, num_rows, table=table, file=add.path)
        if not num_rows:
            yield parquet.schema_arrow.empty_table()
            return
        offset = start = 0  # `deleted` is ascending: each batch's rows are the slice from `start`
        for batch in parquet.iter_batches(batch_size=READ_BATCH_ROWS, use_threads=False):  # threads: per bin
            rows = pa.Table.from_batches([batch])
            n = rows.num_rows
            if start < len(deleted):
                end = bisect_left(deleted, offset + n, lo=start, key=lambda s: s.as_py())
                if end > start:
                    here = deleted.slice(start, end - start)
                    lo = u64_scalar(offset)  # pa.scalar of an int imports pandas
                    gone = pc.is_in(_positions(n), value_set=pc.subtract(here, lo))
                    rows = rows.filter(pc.invert(gone))
                start = end
            offset += n
            yield rows


class _Materialized(Exception):
    """A later input carries partition columns the earlier ones did not: the bin is written again with them."""


def _stream_bin(
    store: LogStore,
    layout: TableLayout,
    bin_: Bin,
    now_ms: Callable[[], int],
    in_files: bool,
    target_size: int | None,
    stores: BackgroundStores | None,
) -> list[Future[AddFile]]:
    table = layout.table_uri
    prefix = output_dir(bin_, layout.partition_keys)
    out = DataFileWriter(store, layout, bin_, prefix, now_ms, "compacted", target_size=target_size, stores=stores)
    any_rows = False
    # the inputs of a bin mostly share one schema: a batch of the schema last seen (field ids included) that
    # `physical_table` kept as it is needs no partition-column check, and its columns are only picked
    seen: tuple[pa.Schema, list[int], pa.Schema] | None = None
    for f in bin_.files:
        checked = in_files or not layout.partition_columns
        for rows in iter_file_rows(store, table, f):
            if seen is not None and rows.schema.equals(seen[0], check_metadata=True):
                data = pa.Table.from_arrays([rows.column(i) for i in seen[1]], schema=seen[2])
                checked = True
            else:
                if not checked:  # once per file: its batches share its schema
                    if has_partition_columns(rows.schema, layout):
                        raise _Materialized
                    checked = True
                data = physical_table(
                    rows,
                    layout,
                    partition_values=bin_.partition_values,
                    partition_columns_in_files=in_files,
                    file=f.path,
                )
                kept = _passthrough(rows.schema, layout, in_files)
                seen = (rows.schema, kept, data.schema) if kept is not None else None
            any_rows = any_rows or rows.num_rows > 0
            if data.num_columns == 0 and any_rows:  # Spark refuses such tables
                raise OperationNotAllowedError(
                    "OPTIMIZE cannot rewrite data files that hold no column (every column is a partition column)",
                    table=table,
                    file=bin_.files[0].path,
                )
            out.write(data)
    return out.close_deferred()


def _rewrite(
    store: LogStore,
    layout: TableLayout,
    bin_: Bin,
    now_ms: Callable[[], int],
    target_size: int | None,
    stores: BackgroundStores | None = None,
) -> list[Future[AddFile]]:
    try:
        try:
            return _stream_bin(store, layout, bin_, now_ms, False, target_size, stores)
        except _Materialized:  # a writer materialized partition columns: every row carries them
            # (with roll-over, files finished before this are not in the table: left for VACUUM)
            return _stream_bin(store, layout, bin_, now_ms, True, target_size, stores)
    except pa.ArrowException as exc:
        raise LogCorruptedError(
            f"Cannot rewrite the {len(bin_.files)} files of partition {bin_.partition or '(unpartitioned)'}: "
            f"{type(exc).__name__}: {exc}",
            table=layout.table_uri,
            file=bin_.files[0].path,
        ) from None


def compact_bin_files(store: LogStore, layout: TableLayout, bin_: Bin, *, now_ms: Callable[[], int]) -> list[AddFile]:
    """Rewrite `bin_`'s files as new files of about `layout.target_size` bytes each (one file when it is
    None) and return their `add`s (`dataChange=false`, stats per file; none when the DVs deleted every row).
    Streamed: input batches are read, masked by their deletion vectors, cast to the physical schema and
    encoded a row group at a time (`DataFileWriter`), never the whole bin at once.

    :raises LogCorruptedError: an input unreadable, or not holding the table's schema (named).
    :raises SchemaMismatchError: a new file's footer does not hold the table schema (not written).
    :raises OperationNotAllowedError: the files hold no column (every column a partition column).
    :raises StorageError: a new file could not be written.
    """
    return [f.result() for f in _rewrite(store, layout, bin_, now_ms, layout.target_size)]


def compact_bin_files_deferred(
    store: LogStore, layout: TableLayout, bin_: Bin, *, now_ms: Callable[[], int], stores: BackgroundStores
) -> list[Future[AddFile]]:
    """`compact_bin_files` handing each finished file to `stores`: returns once the bin is encoded, each
    file's `add` in its future once written. Raises as `compact_bin_files` does (a write's error from its
    future, or from a later bin's `submit`)."""
    return _rewrite(store, layout, bin_, now_ms, layout.target_size, stores)


def compact_bin(store: LogStore, layout: TableLayout, bin_: Bin, *, now_ms: Callable[[], int]) -> AddFile | None:
    """`compact_bin_files` writing one file whatever `layout.target_size` says; its `add` (None: no row left).
    The contract of `BinRewriter`s that return one `add` per bin (PURGE, the Spark executor)."""
    added = _rewrite(store, layout, bin_, now_ms, None)
    return added[0].result() if added else None


def write_data_file(
    store: LogStore, layout: TableLayout, bin_: Bin, rows: pa.Table, prefix: str, now_ms: Callable[[], int], what: str
) -> AddFile:
    """Write `rows` (physical schema) as a fresh file under `prefix` once its footer holds the table schema,
    and return its `add` (`dataChange=false`, the bin's partition values, Delta's stats)."""
    out = DataFileWriter(store, layout, bin_, prefix, now_ms, what)
    out.write(rows)
    added = out.close()
    assert len(added) == 1, "write_data_file takes rows"
    return added[0]
