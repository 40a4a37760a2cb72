"""Checkpoint reading (classic, multi-part, V2 with JSON or Parquet top-level files and sidecars).

File actions stay Arrow columns; non-file actions become action objects; failures become typed errors
naming the table, version and file.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ..errors import DeltaError, MalformedCheckpointError, StorageError
from ..protocol.actions import (
    Action,
    AddFile,
    CheckpointMetadata,
    Protocol,
    RemoveFile,
    Sidecar,
    _stats_text,
    action_from_json,
)
from ..protocol.checkpoints import NON_FILE_COLUMNS, sidecar_path
from ..protocol.commits import parse_commit_bytes
from ..protocol.filenames import SIDECAR_DIR_NAME
from ..protocol.log_segment import CheckpointInstance
from ..storage import LocalLogStore, LogStore, local_path
from . import arrow_compute as pc
from .arrow_build import string_array
from .arrow_memory import ParquetSource
from .file_state import (
    ADD_SCHEMA,
    REMOVE_SCHEMA,
    FileState,
    adds_to_table,
    conform,
    conform_table,
    empty_table,
    fill_stats,
    key_column,
    removes_to_table,
)
from .table_state import TableState, table_state_from_actions

#: A V2 checkpoint's sidecar to read: (path, size in bytes or None when unknown, name in the log).
SidecarRef = tuple[str, int | None, str]
#: Called with a V2 checkpoint's sidecars before they are read (the memory limit's check).
SidecarCheck = Callable[[list[SidecarRef]], None]


@contextmanager
def checkpoint_read_errors(table: str, version: int, file: str) -> Iterator[None]:
    """Reading one checkpoint file: a missing or unreadable file is a malformed checkpoint; permission and
    connection failures are storage errors (transient unless permission)."""
    try:
        yield
    except DeltaError:
        raise
    except FileNotFoundError:
        raise MalformedCheckpointError(
            "Checkpoint file listed but missing", table=table, version=version, file=file
        ) from None
    except (PermissionError, ConnectionError, TimeoutError) as exc:
        raise StorageError(
            f"Cannot read checkpoint: {type(exc).__name__}: {exc}",
            table=table,
            version=version,
            file=file,
            transient=not isinstance(exc, PermissionError),
        ) from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError, OverflowError, pa.ArrowException) as exc:
        raise MalformedCheckpointError(
            f"Cannot read checkpoint: {exc}", table=table, version=version, file=file
        ) from None


@contextmanager
def sidecar_read_errors(table: str, version: int, sidecar: str) -> Iterator[None]:
    """Reading a V2 checkpoint's sidecar: a missing or unreadable one is a malformed checkpoint."""
    try:
        yield
    except FileNotFoundError:
        raise MalformedCheckpointError(
            "Sidecar named by the V2 checkpoint is missing",
            table=table,
            version=version,
            file=f"{SIDECAR_DIR_NAME}/{sidecar}",
        ) from None
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise MalformedCheckpointError(
            f"Cannot read sidecar: {exc}", table=table, version=version, file=sidecar
        ) from None


def checkpoint_sidecars(store: LogStore, log_dir: str, actions: Sequence[Action]) -> list[SidecarRef]:
    """The sidecars a V2 checkpoint's actions name, with their sizes: as logged, else from the store, else
    None (the read then reports a sidecar the store cannot stat)."""
    out: list[SidecarRef] = []
    for action in actions:
        if not isinstance(action, Sidecar):
            continue
        path = sidecar_path(store.join, log_dir, action.path)
        size: int | None = action.size_in_bytes
        if size <= 0:
            try:
                info = store.head(path)
            except (OSError, ValueError):
                info = None
            size = info.size if info is not None and info.size > 0 else None
        out.append((path, size, action.path))
    return out


@dataclass
class CheckpointData:
    """A checkpoint's content: non-file actions as objects, file actions as Arrow tables."""

    actions: list[Action]
    adds: pa.Table
    removes: pa.Table
    stats_loader: Callable[[], pa.Table] | None = None

    @property
    def protocol(self) -> Protocol | None:
        return next((a for a in self.actions if isinstance(a, Protocol)), None)


def _open_native(store: LogStore, path: str) -> Any:
    """A local file memory-mapped (reads release the GIL and allocate no read buffers; checkpoints are
    immutable); other stores, and subclasses that may wrap reads, through `store.open`."""
    if type(store) is LocalLogStore:
        return pa.memory_map(local_path(path))
    return store.open(path)


def _wanted(schema: pa.Schema, columns: Sequence[str]) -> list[str]:
    """The `columns` (top-level names or `parent.child` leaves) that exist in a file of `schema`."""
    wanted: list[str] = []
    for c in columns:
        parent, _, child = c.partition(".")
        idx = schema.get_field_index(parent)
        if idx < 0:
            continue
        ptype = schema.field(idx).type
        if child and not pa.types.is_struct(ptype):
            # not a struct: read it whole so the caller sees (and refuses) the wrong type
            if parent not in wanted:
                wanted.append(parent)
            continue
        if child and ptype.get_field_index(child) < 0:
            continue
        wanted.append(c)
    return wanted


def read_parquet(store: LogStore, path: str, columns: Sequence[str] | None = None) -> pa.Table:
    """Read `columns` (top-level names or `parent.child` leaves) that exist in the file."""
    with _open_native(store, path) as fh:
        pf = ParquetSource(fh)
        wanted = None if columns is None else _wanted(pf.schema_arrow, columns)
        return pa.table({}) if wanted == [] else pf.read(columns=wanted)


def read_parquet_groups(store: LogStore, path: str, columns: Sequence[str]) -> Iterator[pa.Table]:
    """`read_parquet`, one row group at a time: a caller keeping part of each group (the file actions of a
    checkpoint) holds one group's decode at once, not the whole file's."""
    with _open_native(store, path) as fh:
        pf = ParquetSource(fh)
        wanted = _wanted(pf.schema_arrow, columns)
        if not wanted:
            yield pa.table({})
            return
        yield from pf.read_row_groups(columns=wanted)


#: Checkpoint `add` fields read with the file set; `stats` is read later, only when asked for.
_ADD_FIELDS = [f.name for f in ADD_SCHEMA if f.name != "stats"]
_REMOVE_FIELDS = [f.name for f in REMOVE_SCHEMA]
_ACTION_COLUMNS = [*NON_FILE_COLUMNS, *(f"add.{f}" for f in _ADD_FIELDS), *(f"remove.{f}" for f in _REMOVE_FIELDS)]
#: The file-action fields a file set cannot do without, whatever a projection leaves out: the file identity
#: (PROTOCOL.md "Add File and Remove File": path and deletion vector) and the sizes the state totals.
IDENTITY_FIELDS = frozenset({"path", "deletionVector", "size"})


def _action_columns(eager_stats: bool, file_fields: Collection[str] | None) -> list[str]:
    """The checkpoint columns a read decodes: every non-file action, the file actions' fields (only
    `file_fields` and `IDENTITY_FIELDS` of them when a projection is given), `add.stats` when eager."""
    keep = None if file_fields is None else IDENTITY_FIELDS | set(file_fields)
    columns = [
        c for c in _ACTION_COLUMNS if keep is None or not c.startswith(("add.", "remove.")) or c.split(".")[1] in keep
    ]
    return [*columns, "add.stats"] if eager_stats else columns


def read_checkpoint_stats(store: LogStore, paths: Sequence[str]) -> pa.Table:
    """(key, stats) of every add row in the given checkpoint/sidecar parquet files."""
    parts = []
    for path in paths:
        data = read_parquet(store, path, ["add.path", "add.deletionVector", "add.stats", "add.stats_parsed"])
        if "add" not in data.column_names:
            continue
        col = data.column("add")
        col = pc.filter(col, pc.is_valid(pc.struct_field(col, "path")))
        names = {col.type.field(i).name for i in range(col.type.num_fields)}
        if "stats" in names:
            stats = pc.struct_field(col, "stats")
        elif "stats_parsed" in names:
            stats = string_array(
                [
                    None if r is None else _stats_text({"stats_parsed": r})
                    for r in pc.struct_field(col, "stats_parsed").to_pylist()
                ]
            )
        else:
            continue
        keyed = conform_table(col, pa.schema([ADD_SCHEMA.field("path"), ADD_SCHEMA.field("deletionVector")]))
        parts.append(pa.table({"key": key_column(keyed), "stats": stats}))
    if not parts:
        return pa.table({"key": string_array([]), "stats": string_array([])})
    return pa.concat_tables(parts)


def _file_actions(table: pa.Table, name: str, schema: pa.Schema) -> pa.Table:
    """The rows of action column `name` that hold a file action, as a table of `schema` (zero-copy where
    the rows are one contiguous run, as writers group adds and removes, and children already fit)."""
    col = _struct_column(table, name)
    if col is None:
        return empty_table(schema)
    if col.type.get_field_index("path") < 0:
        raise ValueError(f"column {name!r} has no 'path' field")
    target = pa.struct(list(schema))
    # no parent row of a row with a `path` is null: the struct converts to a batch as it is
    rows = [r for r in map(_file_rows, col.chunks) if r is not None]
    batches = [pa.RecordBatch.from_struct_array(conform(r, target)) for r in rows]
    return pa.Table.from_batches(batches, schema=schema) if batches else empty_table(schema)


def _struct_column(table: pa.Table, name: str) -> pa.ChunkedArray | None:
    """Action column `name`, None when absent or all null; `ValueError` when it is not a struct."""
    if name not in table.column_names:
        return None
    col = table.column(name)
    if pa.types.is_null(col.type) or col.null_count == len(col):
        return None
    if not pa.types.is_struct(col.type):
        raise ValueError(f"column {name!r} has type {col.type}, expected a struct")
    return col


def _file_rows(chunk: pa.StructArray) -> pa.StructArray | None:
    """The rows of `chunk` with a non-null `path` (a slice when they are contiguous)."""
    valid = pc.is_valid(pc.struct_field(chunk, "path"))
    count = valid.true_count
    if count == 0:
        return None
    if count == len(chunk):
        return chunk
    first = pc.first_true(valid)
    if valid.slice(first, count).true_count == count:  # bit counts: no index array is allocated
        return chunk.slice(first, count)
    return pc.filter(chunk, valid)


def non_file_actions(table: pa.Table) -> list[Action]:
    out: list[Action] = []
    for name in NON_FILE_COLUMNS:
        col = _struct_column(table, name)
        if col is not None:
            rows = pc.filter(col, pc.is_valid(col)).to_pylist()
            out += [a for a in (action_from_json({name: r}) for r in rows if r is not None) if a is not None]
    return out


#: Checkpoints at least this large (bytes) have `add.stats` read only when asked for: stats are most of a
#: checkpoint's bytes and few reports need them (110k files: 0.04 s without them, 0.18 s with them).
LAZY_STATS_BYTES = 4 * 1024 * 1024


def read_checkpoint(
    table: str,
    log_dir: str,
    store: LogStore,
    checkpoint: CheckpointInstance,
    lazy_stats_bytes: int = LAZY_STATS_BYTES,
    check_sidecars: SidecarCheck | None = None,
    file_fields: Collection[str] | None = None,
) -> CheckpointData:
    """Every file of a complete checkpoint, V2 sidecars too (`check_sidecars` sees them before the read).

    `file_fields`: the add/remove fields to decode from Parquet parts (with `IDENTITY_FIELDS`; `stats` as
    `lazy_stats_bytes` says); the others come back null. None: every field."""
    actions: list[Action] = []
    adds: list[pa.Table] = []
    removes: list[pa.Table] = []
    parquet_paths: list[str] = []
    eager_stats = sum(f.file.size for f in checkpoint.files) < lazy_stats_bytes
    columns = _action_columns(eager_stats, file_fields)
    for part in checkpoint.files:
        name = part.name
        with checkpoint_read_errors(table, checkpoint.version, name):
            if part.extension == "json":
                objs = parse_commit_bytes(
                    store.read_bytes(part.file.path), table=table, version=checkpoint.version, file=name
                )
                parsed = [a for a in (action_from_json(o) for o in objs) if a is not None]
                actions.extend(a for a in parsed if not isinstance(a, AddFile | RemoveFile))
                adds.append(adds_to_table(a for a in parsed if isinstance(a, AddFile)))
                removes.append(removes_to_table(a for a in parsed if isinstance(a, RemoveFile)))
            else:
                for data in read_parquet_groups(store, part.file.path, columns):
                    actions.extend(non_file_actions(data))
                    adds.append(_file_actions(data, "add", ADD_SCHEMA))
                    removes.append(_file_actions(data, "remove", REMOVE_SCHEMA))
                parquet_paths.append(part.file.path)
    sidecars = checkpoint_sidecars(store, log_dir, actions)
    if sidecars and check_sidecars is not None:
        check_sidecars(sidecars)
    for path, _, name in sidecars:
        with sidecar_read_errors(table, checkpoint.version, name):
            for data in read_parquet_groups(store, path, [c for c in columns if c.startswith(("add.", "remove."))]):
                adds.append(_file_actions(data, "add", ADD_SCHEMA))
                removes.append(_file_actions(data, "remove", REMOVE_SCHEMA))
            parquet_paths.append(path)
    actions = [a for a in actions if not isinstance(a, Sidecar | CheckpointMetadata)]
    add_table = pa.concat_tables(adds) if adds else empty_table(ADD_SCHEMA)

    def load_stats() -> pa.Table:
        try:
            return read_checkpoint_stats(store, parquet_paths)
        except FileNotFoundError as exc:
            raise StorageError(
                f"Checkpoint {checkpoint.version} was removed after this snapshot was loaded, so its file "
                f"stats can no longer be read; load the snapshot again ({exc})",
                table=table,
                version=checkpoint.version,
                file=checkpoint.files[0].name,
            ) from None
        except (OSError, pa.ArrowException, ValueError, TypeError) as exc:
            raise MalformedCheckpointError(
                f"Cannot read checkpoint stats: {exc}", table=table, version=checkpoint.version
            ) from None

    loader: Callable[[], pa.Table] | None = load_stats if parquet_paths else None
    if eager_stats and loader is not None:
        # stats came with the first read; only struct-only stats (`stats_parsed`) still need the loader
        if add_table.num_rows and pc.all(pc.is_null(add_table.column("stats"))).as_py():
            add_table = fill_stats(add_table, loader())
        loader = None
    return CheckpointData(
        actions, add_table, pa.concat_tables(removes) if removes else empty_table(REMOVE_SCHEMA), loader
    )


def state_from_checkpoint(version: int, cp: CheckpointData) -> TableState:
    files = FileState(cp.adds, cp.removes, stats_loader=cp.stats_loader)
    return table_state_from_actions(version, cp.actions, files)
