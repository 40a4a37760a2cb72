"""The reconciled file set of a snapshot, held as Arrow tables.

A checkpoint of a million files stays a million rows in a few Arrow buffers: no Python object per
file until someone asks for one. Stats stay raw JSON strings; partition values stay strings until
typed by the file index.

`FileState.apply(replay)` is reconciliation in bulk: the commits after a base state are replayed
with `InMemoryLogReplay`; every key the replay touched supersedes the base's entry for that key
(the replay holds its final action: an add or a tombstone, never both), and everything else in the
base stands. That equals replaying base and commits together, because a checkpoint is itself a
reconciled state.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from .actions import (
    KEY_SEPARATOR,
    AddFile,
    DeletionVectorDescriptor,
    RemoveFile,
)
from .replay import InMemoryLogReplay

_STR_MAP = pa.map_(pa.string(), pa.string())
DV_TYPE = pa.struct(
    [
        ("storageType", pa.string()),
        ("pathOrInlineDv", pa.string()),
        ("offset", pa.int32()),
        ("sizeInBytes", pa.int32()),
        ("cardinality", pa.int64()),
        ("maxRowIndex", pa.int64()),
    ]
)
ADD_SCHEMA = pa.schema(
    [
        ("path", pa.string()),
        ("partitionValues", _STR_MAP),
        ("size", pa.int64()),
        ("modificationTime", pa.int64()),
        ("dataChange", pa.bool_()),
        ("stats", pa.string()),
        ("tags", _STR_MAP),
        ("deletionVector", DV_TYPE),
        ("baseRowId", pa.int64()),
        ("defaultRowCommitVersion", pa.int64()),
        ("clusteringProvider", pa.string()),
    ]
)
REMOVE_SCHEMA = pa.schema(
    [
        ("path", pa.string()),
        ("deletionTimestamp", pa.int64()),
        ("dataChange", pa.bool_()),
        ("extendedFileMetadata", pa.bool_()),
        ("partitionValues", _STR_MAP),
        ("size", pa.int64()),
        ("stats", pa.string()),
        ("tags", _STR_MAP),
        ("deletionVector", DV_TYPE),
        ("baseRowId", pa.int64()),
        ("defaultRowCommitVersion", pa.int64()),
    ]
)


def conform(array: pa.Array | pa.ChunkedArray, target: pa.DataType) -> pa.Array | pa.ChunkedArray:
    """`array` cast to `target`, structs matched by child name (missing children become nulls)."""
    if isinstance(array, pa.ChunkedArray):
        chunks = [conform(c, target) for c in array.chunks]
        return pa.chunked_array(chunks, type=target)
    if array.type == target:
        return array
    if pa.types.is_struct(target) and pa.types.is_struct(array.type):
        names = {array.type.field(i).name for i in range(array.type.num_fields)}
        children = []
        for f in target:
            if f.name in names:
                children.append(conform(array.field(f.name), f.type))
            else:
                children.append(pa.nulls(len(array), type=f.type))
        return pa.StructArray.from_arrays(children, fields=list(target), mask=array.is_null())
    return array.cast(target)


def conform_table(struct_column: pa.ChunkedArray | pa.Array, schema: pa.Schema) -> pa.Table:
    """A table of `schema` from a column of action structs whose null rows were already dropped."""
    target = pa.struct(list(schema))
    conformed = conform(struct_column, target)
    if isinstance(conformed, pa.ChunkedArray):
        conformed = conformed.combine_chunks() if conformed.num_chunks != 1 else conformed.chunk(0)
    if len(conformed) == 0:
        return schema.empty_table()
    return pa.Table.from_struct_array(conformed).cast(schema)


def key_column(table: pa.Table) -> pa.ChunkedArray:
    """File identity per row, computed in bulk exactly like `actions.file_key`."""
    path = table.column("path")
    path = pc.if_else(pc.starts_with(path, "/"), pc.binary_join_element_wise("file:", path, ""), path)
    for prefix in ("file:///", "file://localhost/"):
        hits = pc.starts_with(path, prefix)
        if pc.any(hits).as_py():
            path = pc.if_else(
                hits, pc.binary_join_element_wise("file:/", pc.utf8_slice_codeunits(path, len(prefix)), ""), path
            )
    dv = table.column("deletionVector")
    storage = pc.struct_field(dv, "storageType")
    if pc.all(pc.is_null(storage)).as_py():
        return path
    inline = pc.struct_field(dv, "pathOrInlineDv")
    offset = pc.struct_field(dv, "offset")
    uid = pc.binary_join_element_wise(storage, pc.fill_null(inline, ""), "")
    with_offset = pc.binary_join_element_wise(uid, pc.cast(offset, pa.string()), "@")
    uid = pc.if_else(pc.is_null(offset), uid, with_offset)
    keyed = pc.binary_join_element_wise(path, uid, KEY_SEPARATOR)
    return pc.if_else(pc.is_null(storage), path, keyed)


def _dv_json(dv: DeletionVectorDescriptor | None) -> dict[str, Any] | None:
    return None if dv is None else dv.to_json()


def adds_to_table(adds: Iterable[AddFile]) -> pa.Table:
    rows = [
        {
            "path": a.path,
            "partitionValues": list(a.partition_values.items()),
            "size": a.size,
            "modificationTime": a.modification_time,
            "dataChange": a.data_change,
            "stats": a.stats,
            "tags": None if a.tags is None else list(a.tags.items()),
            "deletionVector": _dv_json(a.deletion_vector),
            "baseRowId": a.base_row_id,
            "defaultRowCommitVersion": a.default_row_commit_version,
            "clusteringProvider": a.clustering_provider,
        }
        for a in adds
    ]
    return pa.Table.from_pylist(rows, schema=ADD_SCHEMA) if rows else ADD_SCHEMA.empty_table()


def removes_to_table(removes: Iterable[RemoveFile]) -> pa.Table:
    rows = [
        {
            "path": r.path,
            "deletionTimestamp": r.deletion_timestamp,
            "dataChange": r.data_change,
            "extendedFileMetadata": r.extended_file_metadata,
            "partitionValues": None if r.partition_values is None else list(r.partition_values.items()),
            "size": r.size,
            "stats": r.stats,
            "tags": None if r.tags is None else list(r.tags.items()),
            "deletionVector": _dv_json(r.deletion_vector),
            "baseRowId": r.base_row_id,
            "defaultRowCommitVersion": r.default_row_commit_version,
        }
        for r in removes
    ]
    return pa.Table.from_pylist(rows, schema=REMOVE_SCHEMA) if rows else REMOVE_SCHEMA.empty_table()


def iter_adds(table: pa.Table) -> Iterator[AddFile]:
    """`AddFile` objects for the rows of an ADD_SCHEMA table (made on demand)."""
    for batch in table.to_batches(max_chunksize=65536):
        for row in batch.to_pylist():
            yield AddFile.from_json(row)


def iter_removes(table: pa.Table) -> Iterator[RemoveFile]:
    for batch in table.to_batches(max_chunksize=65536):
        for row in batch.to_pylist():
            yield RemoveFile.from_json(row)


@dataclass(frozen=True)
class FileState:
    """Active files and tombstones of one version, columnar."""

    adds: pa.Table
    removes: pa.Table

    @classmethod
    def empty(cls) -> FileState:
        return cls(ADD_SCHEMA.empty_table(), REMOVE_SCHEMA.empty_table())

    @classmethod
    def from_replay(cls, replay: InMemoryLogReplay) -> FileState:
        """The full state held by a replay (all tombstones, expired ones included)."""
        return cls(adds_to_table(replay.active_files.values()), removes_to_table(replay.tombstones.values()))

    def apply(self, replay: InMemoryLogReplay) -> FileState:
        """This state with a later replay's file actions reconciled on top."""
        touched = list(replay.active_files.keys() | replay.tombstones.keys())
        if not touched:
            return self
        touched_arr = pa.array(touched, type=pa.string())
        adds, removes = self.adds, self.removes
        if adds.num_rows:
            adds = adds.filter(pc.invert(pc.is_in(key_column(adds), value_set=touched_arr)))
        if removes.num_rows:
            removes = removes.filter(pc.invert(pc.is_in(key_column(removes), value_set=touched_arr)))
        new_adds = adds_to_table(replay.active_files.values())
        new_removes = removes_to_table(replay.tombstones.values())
        return FileState(
            pa.concat_tables([adds, new_adds]) if new_adds.num_rows else adds,
            pa.concat_tables([removes, new_removes]) if new_removes.num_rows else removes,
        )

    @property
    def num_files(self) -> int:
        return self.adds.num_rows

    @property
    def size_in_bytes(self) -> int:
        if not self.adds.num_rows:
            return 0
        return int(pc.sum(self.adds.column("size")).as_py() or 0)
