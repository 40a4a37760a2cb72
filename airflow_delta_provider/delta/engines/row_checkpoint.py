"""Small checkpoints read without pyarrow: Parquet parts decoded by `checkpoint_parquet`, JSON parts
parsed as commits, V2 sidecars followed.

Adds become `AddRow` tuples built straight from the columns (the checks `from_json` would make are
made once per column: types by the Parquet schema, required values by a scan); `add.stats` is decoded
only when someone asks for it, from the bytes already read, as the Arrow path leaves large
checkpoints' stats unread. Whatever this cannot read raises `UnsupportedParquet` and the local engine
reads the checkpoint with pyarrow instead, which also reports malformed files.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..actions import (
    Action,
    AddFile,
    CheckpointMetadata,
    DeletionVectorDescriptor,
    FileKey,
    RemoveFile,
    Sidecar,
    action_from_json,
)
from ..checkpoint_parquet import (
    Column,
    ParquetColumns,
    UnsupportedParquet,
    first_leaf,
    flat_values,
    map_values,
    positions,
    read_columns,
    struct_values,
)
from ..file_rows import AddRow, CheckpointTooLarge, StatsLoader, row_keys
from ..log_segment import CheckpointInstance
from ..storage import LogStore
from .local import (
    NON_FILE_COLUMNS,
    SidecarCheck,
    checkpoint_read_errors,
    checkpoint_sidecars,
    parse_commit_bytes,
    sidecar_read_errors,
)

_STR, _INT, _BOOL = (6,), (1, 2), (0,)  # accepted Parquet physical types (INT32 widens to int)
_ADD_LEAVES = {
    "path": _STR,
    "size": _INT,
    "modificationTime": _INT,
    "dataChange": _BOOL,
    "stats": _STR,
    "baseRowId": _INT,
    "defaultRowCommitVersion": _INT,
    "clusteringProvider": _STR,
}
_REMOVE_LEAVES = {
    "path": _STR,
    "deletionTimestamp": _INT,
    "dataChange": _BOOL,
    "extendedFileMetadata": _BOOL,
    "size": _INT,
    "stats": _STR,
    "baseRowId": _INT,
    "defaultRowCommitVersion": _INT,
}
_ADD_NOW = {k: v for k, v in _ADD_LEAVES.items() if k != "stats"}  # stats: see `_stats_loader`
_MAPS = ("partitionValues", "tags")
#: `AddFile`'s fields, in order, by their checkpoint names
_ADD_ORDER = (
    "path",
    "partitionValues",
    "size",
    "modificationTime",
    "dataChange",
    "stats",
    "tags",
    "deletionVector",
    "baseRowId",
    "defaultRowCommitVersion",
    "clusteringProvider",
)
_DV_LEAVES = {
    "storageType": _STR,
    "pathOrInlineDv": _STR,
    "offset": _INT,
    "sizeInBytes": _INT,
    "cardinality": _INT,
    "maxRowIndex": _INT,
}
_FIELDS = [
    *((name,) for name in NON_FILE_COLUMNS),
    *(("add", f) for f in (*_ADD_LEAVES, *_MAPS, "deletionVector") if f != "stats"),
    *(("remove", f) for f in (*_REMOVE_LEAVES, *_MAPS, "deletionVector")),
]


class CheckpointRows:
    """A small checkpoint's content: non-file actions, adds as `AddRow`s (stats unread), removes."""

    __slots__ = ("actions", "adds", "removes", "stats_loader")

    def __init__(
        self, actions: list[Action], adds: list[AddRow], removes: list[RemoveFile], stats_loader: StatsLoader | None
    ) -> None:
        self.actions = actions
        self.adds = adds
        self.removes = removes
        self.stats_loader = stats_loader


def read_checkpoint_rows(
    table: str,
    log_dir: str,
    store: LogStore,
    checkpoint: CheckpointInstance,
    max_bytes: int | None = None,
    check_sidecars: SidecarCheck | None = None,
) -> CheckpointRows:
    """Every file of a complete checkpoint, V2 sidecars followed. `CheckpointTooLarge` when the
    parts and the sidecars they name reach `max_bytes` (checked before any sidecar is read)."""
    actions: list[Action] = []
    adds: list[AddRow] = []
    removes: list[RemoveFile] = []
    with_stats: dict[str, bytes] = {}  # parquet files whose adds' stats are still unread, by path
    for part in checkpoint.files:
        with checkpoint_read_errors(table, checkpoint.version, part.name):
            data = store.read_bytes(part.file.path)
            if part.extension == "json":
                objs = parse_commit_bytes(data, table=table, version=checkpoint.version, file=part.name)
                for action in (action_from_json(o) for o in objs):
                    if isinstance(action, AddFile):
                        adds.append(_add_row(action))
                    elif isinstance(action, RemoveFile):
                        removes.append(action)
                    elif action is not None:
                        actions.append(action)
            elif _parquet_actions(data, actions, adds, removes, non_file=True):
                with_stats[part.file.path] = data
    sidecars = checkpoint_sidecars(store, log_dir, actions)
    if sidecars and max_bytes is not None:
        sizes = [size for _, size, _ in sidecars]
        if None in sizes:  # of unknown size: the Arrow reader reads it (and reports it if unreadable)
            raise CheckpointTooLarge("a sidecar of unknown size")
        if sum(f.file.size for f in checkpoint.files) + sum(s or 0 for s in sizes) >= max_bytes:
            raise CheckpointTooLarge(f"{len(sidecars)} sidecars of {sum(s or 0 for s in sizes)} bytes")
    if sidecars and check_sidecars is not None:
        check_sidecars(sidecars)
    for path, _, name in sidecars:
        with sidecar_read_errors(table, checkpoint.version, name):
            data = store.read_bytes(path)
        if _parquet_actions(data, actions, adds, removes, non_file=False):
            with_stats[path] = data
    actions = [a for a in actions if not isinstance(a, Sidecar | CheckpointMetadata)]
    loader = _stats_loader(table, checkpoint, store, with_stats) if with_stats else None
    return CheckpointRows(actions, adds, removes, loader)


def _stats_loader(table: str, checkpoint: CheckpointInstance, store: LogStore, files: dict[str, bytes]) -> StatsLoader:
    """Stats by file key, decoded once from the bytes read at load; with pyarrow (re-reading the
    files) if the pure reader cannot decode them."""
    loaded: list[dict[FileKey, str | None]] = []

    def load() -> dict[FileKey, str | None]:
        if not loaded:
            try:
                loaded.append({k: v for data in files.values() for k, v in _stats_by_key(data)})
            except UnsupportedParquet:
                from .arrow_checkpoint import stats_loader

                got = stats_loader(table, checkpoint, store, list(files))()
                loaded.append(dict(zip(got.column("key").to_pylist(), got.column("stats").to_pylist(), strict=True)))
        return loaded[0]

    return load


def _stats_by_key(data: bytes) -> Iterator[tuple[FileKey, str | None]]:
    cols = read_columns(data, [("add", "path"), ("add", "stats"), ("add", "deletionVector")])
    c = _file_columns(cols, "add", {"path": _STR, "stats": _STR}, maps=())
    if c is None:
        return iter(())
    return zip(row_keys(c["path"], c["deletionVector"]), c["stats"], strict=True)


def _add_row(add: AddFile) -> AddRow:
    return tuple(getattr(add, name) for name in AddFile.__dataclass_fields__)


def _parquet_actions(
    data: bytes, actions: list[Action], adds: list[AddRow], removes: list[RemoveFile], *, non_file: bool
) -> bool:
    """Decode one Parquet checkpoint file into the lists; True if its adds' stats are still to read."""
    cols = read_columns(data, _FIELDS)
    if non_file:
        for name in NON_FILE_COLUMNS:
            node = cols.node(name)
            if node is None:
                continue
            if node.physical is not None:
                raise UnsupportedParquet(f"{name} is not a struct")
            rows = positions(first_leaf(cols, (name,)).defs, node.def_level)
            for row in struct_values(cols, (name,), rows):
                action = action_from_json({name: row})
                if action is not None:
                    actions.append(action)
    new_adds = _adds(cols)
    adds.extend(new_adds)
    removes.extend(_removes(cols))
    return bool(new_adds) and cols.node("add", "stats") is not None


def _leaf(cols: ParquetColumns, path: tuple[str, ...], types: tuple[int, ...]) -> Column | None:
    node = cols.node(*path)
    if node is None:
        return None
    if node.physical not in types:
        raise UnsupportedParquet(f"{'.'.join(path)} has physical type {node.physical}")
    return cols.columns[path]


def _file_columns(
    cols: ParquetColumns, name: str, leaves: dict[str, tuple[int, ...]], maps: tuple[str, ...] = _MAPS
) -> dict[str, list[Any]] | None:
    """The rows holding a `name` action (non-null path) and each wanted field's value in them."""
    node = cols.node(name)
    if node is None:
        return None
    if node.physical is not None:
        raise UnsupportedParquet(f"{name} is not a struct")
    path_col = _leaf(cols, (name, "path"), _STR)
    if path_col is None:
        raise UnsupportedParquet(f"{name} has no path")
    rows = positions(path_col.defs, path_col.node.def_level)
    if not rows:
        return None
    out: dict[str, list[Any]] = {}
    for field, types in leaves.items():
        col = _leaf(cols, (name, field), types)
        if col is None or not col.values:
            out[field] = [None] * len(rows)
        elif (
            col.defs is path_col.defs or col.defs == path_col.defs
        ):  # defined exactly where the path is: values are the rows
            out[field] = col.values
        else:
            values = flat_values(col)
            out[field] = [values[i] for i in rows]
    for field in maps:
        if cols.node(name, field) is None:
            out[field] = [None] * len(rows)
            continue
        for leaf in cols.columns:
            if leaf[:2] == (name, field) and cols.columns[leaf].node.physical not in _STR:
                raise UnsupportedParquet(f"{name}.{field} is not a map of strings")
        values = map_values(cols, (name, field)) or []
        out[field] = [values[i] for i in rows]
    out["deletionVector"] = _deletion_vectors(cols, name, rows)
    return out


def _deletion_vectors(cols: ParquetColumns, name: str, rows: list[int]) -> list[Any]:
    node = cols.node(name, "deletionVector")
    if node is None:
        return [None] * len(rows)
    if node.physical is not None:
        raise UnsupportedParquet(f"{name}.deletionVector is not a struct")
    for child in node.children:
        if child.name in _DV_LEAVES:
            _leaf(cols, (name, "deletionVector", child.name), _DV_LEAVES[child.name])
    defs = first_leaf(cols, (name, "deletionVector")).defs
    wanted = set(rows)
    present = [i for i in positions(defs, node.def_level) if i in wanted]
    if not present:
        return [None] * len(rows)
    by_row = dict(zip(present, struct_values(cols, (name, "deletionVector"), present), strict=True))
    return [DeletionVectorDescriptor.from_json(by_row.get(i)) for i in rows]


def _adds(cols: ParquetColumns) -> list[AddRow]:
    """The checkpoint's adds as `AddRow` tuples, `stats` unread (made `AddFile`s only when asked for)."""
    c = _file_columns(cols, "add", _ADD_NOW)
    if c is None:
        return []
    stats = cols.node("add", "stats")
    if stats is None and cols.node("add", "stats_parsed") is not None:
        raise UnsupportedParquet("struct-only stats (stats_parsed)")
    if stats is not None and stats.physical not in _STR:
        raise UnsupportedParquet("add.stats is not a string")
    c["stats"] = [None] * len(c["path"])
    if None in c["size"]:
        raise UnsupportedParquet("an add without size")
    # the defaults `AddFile.from_json` applies; its type checks hold by the column types above
    for name, default in (("partitionValues", {}), ("modificationTime", 0), ("dataChange", False)):
        if None in c[name]:
            c[name] = [default if v is None else v for v in c[name]]
    return list(zip(*(c[name] for name in _ADD_ORDER), strict=True))


def _removes(cols: ParquetColumns) -> list[RemoveFile]:
    c = _file_columns(cols, "remove", _REMOVE_LEAVES)
    if c is None:
        return []
    return [
        RemoveFile(
            path=c["path"][i],
            deletion_timestamp=c["deletionTimestamp"][i],
            data_change=bool(c["dataChange"][i]),
            extended_file_metadata=c["extendedFileMetadata"][i],
            partition_values=c["partitionValues"][i],
            size=c["size"][i],
            stats=c["stats"][i],
            tags=c["tags"][i],
            deletion_vector=c["deletionVector"][i],
            base_row_id=c["baseRowId"][i],
            default_row_commit_version=c["defaultRowCommitVersion"][i],
        )
        for i in range(len(c["path"]))
    ]
