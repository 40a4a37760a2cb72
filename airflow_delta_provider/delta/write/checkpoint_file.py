"""The checkpoint file every engine writes, its `_last_checkpoint` hint and the result of a write
(PROTOCOL.md "Checkpoints", "Checkpoint Schema", "V2 Spec", "Last Checkpoint File Schema")."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pac
import pyarrow.parquet as pq

from ..protocol.actions import Action, action_to_json
from ..protocol.checkpoints import CheckpointKind, CheckpointPlan, StatsField, partition_value_text
from ..protocol.filenames import LAST_CHECKPOINT_NAME
from ..protocol.last_checkpoint import parse_last_checkpoint, render_last_checkpoint
from ..read import arrow_compute as pc
from ..read.arrow_build import bools_from_bytes, column, int64_scalar, int_array, string_array, string_scalar
from ..read.file_state import ADD_SCHEMA, REMOVE_SCHEMA
from ..storage import LogStore
from .data_file_writer import leaf_paths
from .data_files import primitive_arrow_type

if TYPE_CHECKING:  # pragma: no cover
    from ..snapshot import Snapshot

#: Bytes read at a time when checking what was stored.
_DIGEST_CHUNK = 16 * 2**20
#: Rows per Parquet row group (and per Arrow batch built at a time).
ROWS_PER_GROUP = 131_072

_DICTIONARY_PREFIXES = ("add.partitionValues", "remove.partitionValues", "add.deletionVector.storageType")
_STR_MAP = ADD_SCHEMA.field("partitionValues").type
_STR_LIST = pa.list_(pa.string())
ADD_FIELDS = ("path", "partitionValues", "size", "modificationTime", "dataChange", "tags", "deletionVector")
ADD_FIELDS += ("baseRowId", "defaultRowCommitVersion", "clusteringProvider")
#: Spark's checkpoint `remove`: no `stats`, no `tags`.
REMOVE_FIELDS = ("path", "deletionTimestamp", "dataChange", "extendedFileMetadata", "partitionValues", "size")
REMOVE_FIELDS += ("deletionVector", "baseRowId", "defaultRowCommitVersion")
REMOVE_TYPE = pa.struct([REMOVE_SCHEMA.field(n) for n in REMOVE_FIELDS])
TXN_TYPE = pa.struct([("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())])
FORMAT_TYPE = pa.struct([("provider", pa.string()), ("options", _STR_MAP)])
METADATA_TYPE = pa.struct(
    [
        ("id", pa.string()),
        ("name", pa.string()),
        ("description", pa.string()),
        ("format", FORMAT_TYPE),
        ("schemaString", pa.string()),
        ("partitionColumns", _STR_LIST),
        ("configuration", _STR_MAP),
        ("createdTime", pa.int64()),
    ]
)
PROTOCOL_TYPE = pa.struct(
    [
        ("minReaderVersion", pa.int32()),
        ("minWriterVersion", pa.int32()),
        ("readerFeatures", _STR_LIST),
        ("writerFeatures", _STR_LIST),
    ]
)
DOMAIN_TYPE = pa.struct([("domain", pa.string()), ("configuration", pa.string()), ("removed", pa.bool_())])
CHECKPOINT_METADATA_TYPE = pa.struct([("version", pa.int64()), ("tags", _STR_MAP)])
SIDECAR_TYPE = pa.struct(
    [("path", pa.string()), ("sizeInBytes", pa.int64()), ("modificationTime", pa.int64()), ("tags", _STR_MAP)]
)


@dataclass(frozen=True)
class CheckpointResult:
    """What `write_checkpoint` did. `written` is False when a classic checkpoint of that version existed
    (the counts are then the state's). `path` is the checkpoint file (a multi-part one's first `parts`)."""

    version: int
    kind: CheckpointKind
    path: str
    sidecars: tuple[str, ...]
    num_actions: int
    num_add_files: int
    num_tombstones: int
    size_in_bytes: int
    last_checkpoint_updated: bool
    written: bool = True
    parts: tuple[str, ...] = ()


def kept_tombstones(removes: pa.Table, plan: CheckpointPlan) -> pa.Table:
    """The rows of a REMOVE_SCHEMA table deleted after the plan's retention cutoff."""
    if not removes.num_rows:
        return removes
    ts = pc.fill_null(removes.column("deletionTimestamp"), int64_scalar(0))
    return pc.filter(removes, pc.greater(ts, int64_scalar(plan.min_file_retention_timestamp)))


def existing_result(
    snapshot: Snapshot, plan: CheckpointPlan, actions: list[Action], path: str, size: int, parts: tuple[str, ...] = ()
) -> CheckpointResult:
    """The result when the classic checkpoint is already there: nothing written, the state's counts."""
    tombstones = snapshot.state.files.count_tombstones_after(plan.min_file_retention_timestamp)
    return CheckpointResult(
        version=plan.version,
        kind=plan.kind,
        path=path,
        sidecars=(),
        num_actions=len(actions) + snapshot.num_files + tombstones + int(plan.kind == "v2"),
        num_add_files=snapshot.num_files,
        num_tombstones=tombstones,
        size_in_bytes=size,
        last_checkpoint_updated=False,
        written=False,
        parts=parts,
    )


def checkpoint_parquet(
    plan: CheckpointPlan,
    adds: pa.Table,
    removes: pa.Table,
    *,
    actions: Sequence[Action] | None = None,
    sidecars: Sequence[Mapping[str, Any]] = (),
    sidecar_file: bool = False,
    key_value_metadata: Mapping[str, str] | None = None,
) -> bytes:
    """One checkpoint Parquet file: `actions` first (V2: after `checkpointMetadata`, then a `sidecar` row per
    `sidecars` entry; None for a part without them), then the `adds` (ADD_SCHEMA) and `removes`
    (REMOVE_SCHEMA) rows. `sidecar_file`: a V2 sidecar, with `add` and `remove` columns only.
    """
    add_type = _add_type(plan)
    if sidecar_file:
        schema = pa.schema([("add", add_type), ("remove", REMOVE_TYPE)])
    else:
        schema = _top_schema(plan, add_type)
    # Snappy, a row group per batch. Dictionaries only for partition values (elsewhere they cost more than
    # they save); statistics only for the parsed structs (readers skip row groups).
    leaves = [leaf for f in schema for leaf in leaf_paths(f.name, f.type)]
    dictionary = [p for p in leaves if p.startswith(_DICTIONARY_PREFIXES)]
    parsed = [p for p in leaves if p.startswith(("add.stats_parsed.", "add.partitionValues_parsed."))]
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, schema, use_dictionary=dictionary, write_statistics=parsed) as writer:
        if actions is not None and not sidecar_file:
            writer.write_batch(_non_file_batch(schema, plan, actions, list(sidecars)))
        for batch in _file_batches(schema, plan, add_type, adds, removes):
            writer.write_batch(batch)
        if key_value_metadata:
            writer.add_key_value_metadata(dict(key_value_metadata))
    return sink.getvalue().to_pybytes()


def _top_schema(plan: CheckpointPlan, add_type: pa.StructType) -> pa.Schema:
    columns = [("txn", TXN_TYPE), ("add", add_type), ("remove", REMOVE_TYPE), ("metaData", METADATA_TYPE)]
    columns += [("protocol", PROTOCOL_TYPE), ("domainMetadata", DOMAIN_TYPE)]
    if plan.kind == "v2":
        columns += [("checkpointMetadata", CHECKPOINT_METADATA_TYPE), ("sidecar", SIDECAR_TYPE)]
    return pa.schema(columns)


def _non_file_batch(
    schema: pa.Schema, plan: CheckpointPlan, actions: Sequence[Action], sidecars: list[dict[str, Any]]
) -> pa.RecordBatch:
    """One row per action: checkpointMetadata (V2) first, the actions, then the sidecar rows."""
    rows: list[dict[str, Any]] = [{"checkpointMetadata": {"version": plan.version}}] if plan.kind == "v2" else []
    rows += [action_to_json(a) for a in actions]
    rows += [{"sidecar": s} for s in sidecars]
    return pa.RecordBatch.from_arrays([column([r.get(f.name) for r in rows], f.type) for f in schema], schema=schema)


def _file_batches(
    schema: pa.Schema, plan: CheckpointPlan, add_type: pa.StructType, adds: pa.Table, removes: pa.Table
) -> Iterator[pa.RecordBatch]:
    """The adds, then the tombstones, as batches with only `add` or `remove` set."""
    for table, name in ((adds, "add"), (removes, "remove")):
        for batch in table.to_batches(max_chunksize=ROWS_PER_GROUP) if table.num_rows else ():
            struct = _add_struct(batch, plan, add_type) if name == "add" else _struct(batch, REMOVE_TYPE)
            arrays = [struct if f.name == name else pa.nulls(batch.num_rows, f.type) for f in schema]
            yield pa.RecordBatch.from_arrays(arrays, schema=schema)


def _struct(batch: pa.RecordBatch, type_: pa.StructType, extra: Mapping[str, pa.Array] | None = None) -> pa.Array:
    """A struct of `type_` from the batch's columns of the same names (`dataChange` false, as Spark's replay)."""
    extra = {**(extra or {}), "dataChange": bools_from_bytes(bytearray(batch.num_rows))}
    children = [extra[f.name] if f.name in extra else batch.column(f.name) for f in type_]
    return pa.StructArray.from_arrays(children, fields=list(type_))


def _add_type(plan: CheckpointPlan) -> pa.StructType:
    fields = [ADD_SCHEMA.field(n) for n in ADD_FIELDS]
    if plan.stats_as_json:
        fields.append(ADD_SCHEMA.field("stats"))
    if plan.stats_as_struct and plan.partition_fields:
        parsed = [pa.field(name, primitive_arrow_type(t) or pa.string()) for name, t in plan.partition_fields]
        fields.append(pa.field("partitionValues_parsed", pa.struct(parsed)))
    if plan.stats_as_struct and plan.stats_fields:
        fields.append(pa.field("stats_parsed", _stats_type(plan)))
    return pa.struct(fields)


def _add_struct(batch: pa.RecordBatch, plan: CheckpointPlan, add_type: pa.StructType) -> pa.Array:
    extra: dict[str, pa.Array] = {}
    names = {f.name for f in add_type}
    if "partitionValues_parsed" in names:
        extra["partitionValues_parsed"] = _partition_values_parsed(batch.column("partitionValues"), plan)
    if "stats_parsed" in names:
        extra["stats_parsed"] = _stats_parsed(batch.column("stats"), add_type.field("stats_parsed").type)
    return _struct(batch, add_type, extra)


def _values_type(fields: Sequence[StatsField], leaf: Callable[[StatsField], pa.DataType | None]) -> pa.DataType | None:
    out = []
    for f in fields:
        t = _values_type(f.children, leaf) if f.children else leaf(f)
        if t is not None:
            out.append(pa.field(f.name, t))
    return pa.struct(out) if out else None


def _stats_type(plan: CheckpointPlan) -> pa.StructType:
    """`stats_parsed`: numRecords, minValues, maxValues, nullCount[, tightBounds] (Spark's order)."""
    fields = [pa.field("numRecords", pa.int64())]
    values = _values_type(plan.stats_fields, lambda f: primitive_arrow_type(f.type_name) if f.min_max else None)
    if values is not None:
        fields += [pa.field("minValues", values), pa.field("maxValues", values)]
    nulls = _values_type(plan.stats_fields, lambda f: pa.int64())
    if nulls is not None:
        fields.append(pa.field("nullCount", nulls))
    if plan.tight_bounds:
        fields.append(pa.field("tightBounds", pa.bool_()))
    return pa.struct(fields)


def _json_type(type_: pa.DataType) -> pa.DataType:
    """`type_` with dates as strings: Arrow's JSON reader takes dates only as numbers."""
    if pa.types.is_struct(type_):
        return pa.struct([pa.field(f.name, _json_type(f.type)) for f in type_])
    return pa.string() if pa.types.is_date32(type_) else type_


def _parse_stats(texts: pa.Array, target: pa.StructType) -> pa.Array:
    """JSON stats (no nulls) parsed into `target`; raises `pa.ArrowInvalid` on any bad row."""
    import pyarrow.json as pj

    lines = pa.ListArray.from_arrays(int_array([0, len(texts)], pa.int32()), texts)
    data = pac.binary_join(lines, string_scalar("\n"))[0].as_buffer()
    options = pj.ParseOptions(explicit_schema=pa.schema(list(_json_type(target))), unexpected_field_behavior="ignore")
    parsed = pj.read_json(pa.BufferReader(data), parse_options=options).combine_chunks()
    if parsed.num_rows != len(texts):
        raise pa.ArrowInvalid(f"{parsed.num_rows} stats rows parsed from {len(texts)}")
    children = [_single_chunk(parsed.column(f.name), f.type) for f in _json_type(target)]
    return pc.cast(pa.StructArray.from_arrays(children, fields=list(_json_type(target))), target)


def _parse_or_split(texts: pa.Array, target: pa.StructType) -> pa.Array:
    """`_parse_stats`, halving the rows around any that do not parse (those become null)."""
    try:
        return _parse_stats(texts, target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        if len(texts) == 1:
            return pa.nulls(1, target)
        half = len(texts) // 2
        return pa.concat_arrays(
            [_parse_or_split(texts.slice(0, half), target), _parse_or_split(texts.slice(half), target)]
        )


def _single_chunk(col: pa.ChunkedArray, type_: pa.DataType) -> pa.Array:
    return col.chunk(0) if col.num_chunks else pa.nulls(0, type_)


def _stats_parsed(stats: pa.Array, target: pa.StructType) -> pa.Array:
    """`stats_parsed` from `add.stats` (Spark `from_json`: a row that does not parse is null)."""
    texts = pac.replace_substring(pc.fill_null(stats, string_scalar("{}")), "\n", " ")  # pretty-printed JSON
    parsed = _parse_or_split(texts, target)
    if stats.null_count == 0 and parsed.null_count == 0:
        return parsed
    valid = pac.and_(pc.is_valid(stats), pc.is_valid(parsed)).buffers()[1]
    return pa.Array.from_buffers(target, len(stats), [valid], children=[parsed.field(i) for i in range(len(target))])


def _partition_values_parsed(values: pa.Array, plan: CheckpointPlan) -> pa.Array:
    """`partitionValues_parsed`: each partition column typed from the string map (null when it does not
    parse, as Spark's cast), distinct values parsed once."""
    children, fields = [], []
    for name, delta_type in plan.partition_fields:
        target = primitive_arrow_type(delta_type) or pa.string()
        encoded = pac.map_lookup(values, string_scalar(name), "first").dictionary_encode()
        texts = [partition_value_text(v, delta_type) for v in encoded.dictionary.to_pylist()]
        children.append(pc.take(pc.cast(string_array(texts), target), encoded.indices))
        fields.append(pa.field(name, target))
    return pa.StructArray.from_arrays(children, fields=fields)


def stored_digest(store: LogStore, path: str) -> tuple[int, int]:
    """(length, CRC-32) of a stored file, read in chunks; (-1, 0) when it is gone."""
    crc, length = 0, 0
    try:
        with store.open(path) as fh:
            while chunk := fh.read(_DIGEST_CHUNK):
                crc, length = zlib.crc32(chunk, crc), length + len(chunk)
    except FileNotFoundError:
        return -1, 0
    return length, crc


def update_last_checkpoint(
    store: LogStore,
    log_dir: str,
    top: str,
    plan: CheckpointPlan,
    *,
    num_actions: int,
    size: int,
    num_add_files: int,
    parts: int | None = None,
) -> bool:
    """Point `_last_checkpoint` at this checkpoint unless it names this version or a newer one
    (`num_actions`, `size`: rows and bytes of all its files; `parts`: of a multi-part one)."""
    path = store.join(log_dir, LAST_CHECKPOINT_NAME)
    try:
        current = parse_last_checkpoint(store.read_bytes(path), origin=path)
    except (FileNotFoundError, IsADirectoryError):
        current = None
    if current is not None and current.version >= plan.version:
        return False
    v2 = None
    if plan.kind == "v2" and not plan.name:
        info = store.head(top)
        assert info is not None, "the checkpoint was just verified"
        v2 = {"path": info.name, "sizeInBytes": info.size, "modificationTime": info.modification_time}
    hint = render_last_checkpoint(
        plan.version,
        size=num_actions,
        size_in_bytes=size,
        num_of_add_files=num_add_files,
        v2_checkpoint=v2,
        parts=parts,
    )
    store.put(path, hint)
    return True
