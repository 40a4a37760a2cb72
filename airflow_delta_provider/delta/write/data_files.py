"""Rewrite a bin of data files as new Parquet files of the target size (OPTIMIZE's unit of work, Spark
`runOptimizeBinJob`).

Inputs are read through their deletion vectors and cast to the physical Arrow schema the Delta schema
declares (`arrow_type`, as delta-rs and the kernels write it), columns found by field id or (physical)
name. The new file's footer is checked against the table schema (`check_file_schema`) before it is written
once under a fresh name (`write_new`: a crash leaves at most an untracked file for VACUUM). Runs on a local
thread or a Spark executor; commits nothing.
"""

from __future__ import annotations

import threading
import uuid
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import DeltaError, LogCorruptedError, OperationNotAllowedError, StorageError
from ..protocol.actions import AddFile, decode_path
from ..protocol.optimize import Bin
from ..protocol.schema import COLUMN_ID_KEY, HIVE_DEFAULT_PARTITION, StructField, StructType, parse_partition_value
from ..protocol.table_properties import column_mapping_mode
from ..protocol.zorder import u64_scalar
from ..read.deletion_vectors import read_deletion_vector, store_path
from .file_schema import (
    FIELD_ID_KEY,
    VARIANT_TYPE,
    DeltaType,
    check_file_schema,
    primitive_arrow_type,
    shredding_allowed,
    variant_fields,
)
from .stats import StatsCollector

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


def new_file_name() -> str:
    """A fresh data file name as Delta Spark spells it (unique: never written over)."""
    return f"part-00000-{uuid.uuid4()}-c000.{COMPRESSION}.parquet"


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


def _has_partition_columns(data: pa.Table | pa.Schema, layout: TableLayout) -> bool:
    """Whether the file carries a partition column (a writer materializing them)."""
    schema = data if isinstance(data, pa.Schema) else data.schema
    mode, sources, partitions = layout.column_mapping_mode, list(schema), set(layout.partition_columns)
    return any(_source_index(sources, f, mode) >= 0 for f in layout.schema.fields if f.name in partitions)


#: A new file's rows are encoded a row group at a time: at most this many rows (pyarrow's default) ...
ROW_GROUP_ROWS = 1024 * 1024
#: ... and about this many decoded bytes, so a rewrite holds one row group, never a whole bin.
ROW_GROUP_BYTES = 64 * 1024 * 1024
#: Buffered batches are copied into one contiguous table (in `REWRITE_POOL`) every this many: a bin of many
#: small files otherwise keeps a row group as thousands of small buffers scattered over the reader's pool
#: pages, which the reader cannot reuse for the next files. A copy of the decoded rows, once (~1 ms per 10
#: MiB); the 2,000-file OPTIMIZE benchmark's peak RSS 215-222 -> 195-199 MiB (system pool), same CPU.
PACK_BATCHES = 8
#: Rows per batch read from an input file.
READ_BATCH_ROWS = 64 * 1024
#: An input file of at most this many bytes is read with one `read()` and decoded from memory: Parquet's
#: footer and column-chunk reads through a Python file object each take the GIL (about ten per file), which
#: the other bin thread holds much of the time. Reading 1,000 100 KiB files on two threads: 1.8-2.6 s wall
#: instead of 2.5-3.3 s (4 rounds each, load 12); on an object store, one GET per small file.
READ_WHOLE_BYTES = 2 * 1024 * 1024
#: A primitive column is dictionary-encoded unless more than this share of the first `DICTIONARY_SAMPLE_ROWS`
#: rows of its first row group are distinct: a near-unique column's dictionary is built and then dropped
#: (Parquet falls back to plain at 1 MiB), which took a third of the encoding's time and most of its memory.
DICTIONARY_MAX_DISTINCT = 0.9
DICTIONARY_SAMPLE_ROWS = 16 * 1024


def _parquet_options() -> dict[str, Any]:
    """Parquet as Delta readers expect it: int64 microsecond timestamps (never INT96 or ns)."""
    return {
        "compression": COMPRESSION,
        "coerce_timestamps": "us",
        "allow_truncated_timestamps": True,
        "use_deprecated_int96_timestamps": False,
    }


def _leaf_paths(name: str, type_: pa.DataType) -> list[str]:
    """The Parquet leaf paths of an Arrow column as pyarrow writes it (`st.x`, `arr.list.element`,
    `m.key_value.key`): what `use_dictionary` names."""
    if pa.types.is_struct(type_):
        return [p for f in type_ for p in _leaf_paths(f"{name}.{f.name}", f.type)]
    if pa.types.is_map(type_):
        return [
            *_leaf_paths(f"{name}.key_value.key", type_.key_type),
            *_leaf_paths(f"{name}.key_value.value", type_.item_type),
        ]
    if pa.types.is_list(type_) or pa.types.is_large_list(type_) or pa.types.is_fixed_size_list(type_):
        return _leaf_paths(f"{name}.list.{type_.value_field.name}", type_.value_type)
    return [name]


def dictionary_columns(rows: pa.Table) -> list[str]:
    """The Parquet leaf paths worth dictionary-encoding, judged on `rows` (a first row group): every leaf
    of a nested column, and a primitive column unless its sample is nearly all distinct values
    (`DICTIONARY_MAX_DISTINCT`)."""
    wanted: list[str] = []
    for field, column in zip(rows.schema, rows.columns, strict=True):
        leaves = _leaf_paths(field.name, field.type)
        if pa.types.is_nested(field.type) or pa.types.is_dictionary(field.type):
            wanted.extend(leaves)
            continue
        sample = column.slice(0, DICTIONARY_SAMPLE_ROWS)
        try:  # the distinct non-null values (as `count_distinct`, which takes ~1.5x as long)
            distinct = len(pc.unique(sample)) - (1 if sample.null_count else 0)
        except pa.ArrowNotImplementedError:  # a type without a hash kernel: Parquet's default
            distinct = 0
        if distinct <= DICTIONARY_MAX_DISTINCT * len(sample):
            wanted.extend(leaves)
    return wanted


class DataFileWriter:
    """New data files of `bin_`'s partition, their rows given as they are read (`write`) and encoded a row
    group at a time (`ROW_GROUP_ROWS`, `ROW_GROUP_BYTES`) into memory, each file's stats folded per row group.
    With `target_size`, a file whose encoded bytes reach it is finished and the next rows go to a new one, as
    Delta's and delta-rs's writers roll files (the size estimated from the encoded/decoded ratio of the row
    groups written so far). Each file's footer is checked against the table schema, then it is written once
    under a fresh name (`write_new`); `close` returns their `add`s (none: no row). Rows must be in the
    physical schema (`physical_table`). With `stores`, a finished file (its footer checked here) is written
    by that `BackgroundStores` while the next rows are read and encoded (`close_deferred`)."""

    def __init__(
        self,
        store: LogStore,
        layout: TableLayout,
        bin_: Bin,
        prefix: str,
        now_ms: Callable[[], int],
        what: str,
        *,
        target_size: int | None = None,
        stores: BackgroundStores | None = None,
    ) -> None:
        self.store, self.layout, self.bin, self.prefix, self.now_ms, self.what = (
            store,
            layout,
            bin_,
            prefix,
            now_ms,
            what,
        )
        self.target_size = target_size
        self.stores = stores
        #: the files finished so far (written, or being written by `stores`)
        self.files: list[Future[AddFile]] = []
        self._pending: list[pa.Table] = []
        self._pending_rows = self._pending_bytes = 0
        self._packed = 0  # how many of `_pending` are already packed
        self.schema: pa.Schema | None = None
        self._encoded = self._decoded = 0  # over the row groups written: what the size estimate scales by
        self._start_file()

    def _start_file(self) -> None:
        self.stats = StatsCollector(
            self.layout.schema,
            self.layout.configuration,
            self.layout.partition_columns,
            tight_bounds=self.layout.tight_bounds,
        )
        self._sink = pa.BufferOutputStream(REWRITE_POOL)
        self._writer: pq.ParquetWriter | None = None

    def _estimated_size(self) -> int:
        """The current file's size once the pending rows are encoded (ratio 1 before any row group)."""
        ratio = self._encoded / self._decoded if self._decoded else 1.0
        return self._sink.tell() + int(self._pending_bytes * ratio)

    def write(self, rows: pa.Table) -> None:
        """Buffer `rows`; a full row group is encoded, and a file at the target size finished."""
        if self.schema is None:
            self.schema = rows.schema
        elif not rows.schema.equals(self.schema, check_metadata=False):  # as concatenating them would
            raise pa.ArrowInvalid(f"rows of schema {rows.schema} do not match the file's {self.schema}")
        if not rows.num_rows:
            return
        self._pending.append(rows)
        self._pending_rows += rows.num_rows
        self._pending_bytes += rows.nbytes
        if len(self._pending) - self._packed >= PACK_BATCHES:
            self._pack()
        if self.target_size is not None and self._estimated_size() >= self.target_size:
            guessed = not self._decoded  # no row group yet: the estimate took encoded = decoded
            self._flush()
            if not guessed or self._sink.tell() >= self.target_size:
                self._finish_file()
        elif self._pending_rows >= ROW_GROUP_ROWS or self._pending_bytes >= ROW_GROUP_BYTES:
            self._flush()
            if self.target_size is not None and self._sink.tell() >= self.target_size:
                self._finish_file()

    def _pack(self) -> None:
        """The batches buffered since the last pack as one contiguous table in `REWRITE_POOL`."""
        loose = self._pending[self._packed :]
        packed = pa.concat_tables(loose).combine_chunks(memory_pool=REWRITE_POOL)
        self._pending[self._packed :] = [packed]
        self._packed += 1

    def _flush(self) -> None:
        self._packed = 0
        if not self._pending:
            return
        group = pa.concat_tables(self._pending) if len(self._pending) > 1 else self._pending[0]
        self._pending, self._pending_rows, self._pending_bytes = [], 0, 0
        if self._writer is None:
            self._writer = pq.ParquetWriter(
                self._sink,
                group.schema,
                use_dictionary=dictionary_columns(group),
                memory_pool=REWRITE_POOL,
                **_parquet_options(),
            )
        self.stats.add(group)
        before = self._sink.tell()
        self._writer.write_table(group, row_group_size=ROW_GROUP_ROWS)
        self._encoded += self._sink.tell() - before
        self._decoded += group.nbytes
        del group

    def _finish_file(self) -> None:
        """Write the current file (its footer checked first) and start the next."""
        if self._writer is None:
            return
        self._writer.close()
        payload = self._sink.getvalue()
        self._sink = pa.BufferOutputStream()
        rel = _checked_name(self.layout, payload, self.prefix)
        write = _FileWrite(self.store, self.layout, self.bin, payload, self.stats.json(), rel, self.now_ms, self.what)
        del payload
        if self.stores is None:
            done: Future[AddFile] = Future()
            done.set_result(write())
            self.files.append(done)
        else:
            self.files.append(self.stores.submit(write))
        del write
        self._start_file()

    def close_deferred(self) -> list[Future[AddFile]]:
        """The pending rows written; every file's `add`, in order, once it is written (none: no row was)."""
        self._flush()
        self._finish_file()
        return self.files

    def close(self) -> list[AddFile]:
        """The pending rows written; the `add` of every file written, in order (empty when no row was)."""
        return [f.result() for f in self.close_deferred()]


def _checked_name(layout: TableLayout, payload: pa.Buffer, prefix: str) -> str:
    """A fresh name under `prefix` for `payload`, once its footer holds the table schema (else raises)."""
    rel = f"{prefix}/{new_file_name()}" if prefix else new_file_name()
    check_file_schema(
        pq.read_schema(pa.BufferReader(payload)),  # the footer: what readers will see
        layout.schema,
        column_mapping_mode=layout.column_mapping_mode,
        partition_columns=layout.partition_columns,
        allow_shredded_variants=shredding_allowed(layout.configuration),
        table=layout.table_uri,
        version=layout.version,
        file=rel,
        note="; the file was not written",
    )
    return rel


@dataclass
class _FileWrite:
    """A checked file's one write under `rel` (`write_new`), returning its `add`; its bytes are dropped once
    it ran."""

    store: LogStore
    layout: TableLayout
    bin: Bin
    payload: pa.Buffer | None
    stats: str
    rel: str
    now_ms: Callable[[], int]
    what: str

    @property
    def size(self) -> int:
        return self.payload.size if self.payload is not None else 0

    def __call__(self) -> AddFile:
        payload, self.payload = self.payload, None
        assert payload is not None, "a file is written once"
        store, table = self.store, self.layout.table_uri
        try:
            store.write_new(store.join(table, *decode_path(self.rel).split("/")), memoryview(payload))  # type: ignore[arg-type]  # bytes-like, no copy
        except OSError as exc:
            raise StorageError(
                f"Cannot write {self.what} file: {type(exc).__name__}: {exc}",
                table=table,
                file=self.rel,
                transient=not isinstance(exc, PermissionError | FileExistsError),
            ) from exc
        return AddFile(
            path=self.rel,
            partition_values=dict(self.bin.partition_values),
            size=payload.size,
            modification_time=self.now_ms(),
            data_change=False,
            stats=self.stats,
        )


#: Encoded bytes a `BackgroundStores` holds at most (waiting or being written); a larger file is written by
#: the thread that encoded it, as without one, so a rewrite never holds two such files.
STORE_AHEAD_BYTES = 32 * 1024 * 1024


class BackgroundStores:
    """Finished data files written (`write_new`) on one background thread while the threads that encoded them
    read and encode the next: storage latency (a local fsync, an object store's PUT) overlaps CPU work
    instead of idling a core. At most `max_bytes` of encoded files are held for it (the caller waits for
    room); a file larger than that is written by its caller once nothing is in flight. Once a write failed,
    `submit` raises its error. Exiting the context waits for every write.
    """

    def __init__(self, max_bytes: int = STORE_AHEAD_BYTES) -> None:
        self.max_bytes = max_bytes
        self._held = 0
        self._failed: BaseException | None = None
        self._cond = threading.Condition()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="delta-store")

    def __enter__(self) -> BackgroundStores:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(wait=True)

    def submit(self, write: _FileWrite) -> Future[AddFile]:
        """`write` run in the background once its bytes fit (in this thread when they never would)."""
        size = write.size
        alone = size > self.max_bytes
        with self._cond:
            while self._failed is None and self._held and (alone or self._held + size > self.max_bytes):
                self._cond.wait()
            if self._failed is not None:
                raise self._failed
            if not alone:
                self._held += size
        if alone:
            done: Future[AddFile] = Future()
            done.set_result(write())
            return done
        return self._pool.submit(self._run, write, size)

    def _run(self, write: _FileWrite, size: int) -> AddFile:
        try:
            return write()
        except BaseException as exc:
            with self._cond:
                self._failed = self._failed or exc
            raise
        finally:
            with self._cond:
                self._held -= size
                self._cond.notify_all()


#: The pool a rewrite's packed rows, encoding and output buffer allocate from: the system allocator (reads
#: decode into pyarrow's default pool: `ParquetFile` takes none). Measured on the 2,000-file OPTIMIZE
#: benchmark (peak RSS, 4 runs each): system 197-203 MiB; jemalloc 198-207; jemalloc after each row group
#: `release_unused()` 191-206; jemalloc with `jemalloc_set_decay_ms(0)` 185-187, but that setting is
#: process-wide for jemalloc, which the library's own pool uses too (`read.arrow_memory.POOL`): it made a
#: 1M-file load's CPU ~15% higher (medians 1.08 vs 0.91 s of 6 runs), so it is not set here.
REWRITE_POOL = pa.system_memory_pool()


_ARANGE: list[pa.Array] = []


def _positions(n: int) -> pa.Array:
    """Row positions 0..n-1 as uint64 (n <= `READ_BATCH_ROWS`: one array built once, sliced)."""
    if not _ARANGE:
        positions = array("Q", range(READ_BATCH_ROWS))  # not pa.array: it imports pandas
        _ARANGE.append(pa.Array.from_buffers(pa.uint64(), READ_BATCH_ROWS, [None, pa.py_buffer(positions)]))
    return _ARANGE[0].slice(0, n)


def _as_int(value: pa.Scalar) -> int:
    return value.as_py()


def iter_file_rows(store: LogStore, table_root: str, add: AddFile, *, table: str | None = None) -> Iterator[pa.Table]:
    """The rows of `add`'s Parquet file its deletion vector keeps, in batches of at most `READ_BATCH_ROWS`
    (as `read_data_file` reads them whole: the file's own schema, INT96 at microseconds), each batch filtered
    by the vector's rows in its range. Raises as `read_data_file` does."""
    table = table if table is not None else table_root
    deleted = (
        read_deletion_vector(store, table_root, add.deletion_vector, table=table, file=add.path)
        if add.deletion_vector is not None
        else None
    )
    try:
        fh = store.open(store_path(store, table_root, add.path))
    except FileNotFoundError:
        raise LogCorruptedError(
            "Data file is missing (the log names a file that is not on storage)", table=table, file=add.path
        ) from None
    except DeltaError:
        raise
    except OSError as exc:
        raise StorageError(
            f"Cannot open Data file: {type(exc).__name__}: {exc}",
            table=table,
            file=add.path,
            transient=not isinstance(exc, PermissionError | IsADirectoryError | NotADirectoryError),
        ) from None
    with fh:
        try:
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
            if deleted is not None and len(deleted) and deleted[-1].as_py() >= num_rows:
                raise LogCorruptedError(
                    f"Deletion vector of data file {add.path} deletes row {deleted[-1].as_py()}, the file has "
                    f"{num_rows} rows",
                    table=table,
                    file=add.path,
                )
            if not num_rows:
                yield parquet.schema_arrow.empty_table()
                return
            offset = start = 0  # `deleted` is ascending: each batch's rows are the slice from `start`
            for batch in parquet.iter_batches(batch_size=READ_BATCH_ROWS, use_threads=False):  # threads: per bin
                rows = pa.Table.from_batches([batch])
                n = rows.num_rows
                if deleted is not None and start < len(deleted):
                    end = bisect_left(deleted, offset + n, lo=start, key=_as_int)
                    if end > start:
                        here = deleted.slice(start, end - start)
                        lo = u64_scalar(offset)  # pa.scalar of an int imports pandas
                        gone = pc.is_in(_positions(n), value_set=pc.subtract(here, lo))
                        rows = rows.filter(pc.invert(gone))
                    start = end
                offset += n
                yield rows
        except DeltaError:  # storage failures mid-read come typed from the store
            raise
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise LogCorruptedError(
                f"Cannot read data file as Parquet: {type(exc).__name__}: {exc}", table=table, file=add.path
            ) from None


def _no_columns(layout: TableLayout, bin_: Bin) -> OperationNotAllowedError:
    return OperationNotAllowedError(
        "OPTIMIZE cannot rewrite data files that hold no column (every column is a partition column)",
        table=layout.table_uri,
        file=bin_.files[0].path,
    )


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
                    if _has_partition_columns(rows, layout):
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
                raise _no_columns(layout, bin_)
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
