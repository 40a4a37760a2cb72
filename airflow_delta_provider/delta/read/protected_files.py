"""The paths a snapshot protects from VACUUM, and those it tracks as expired, from its Arrow file tables.

PROTOCOL.md "Delta Log Entries": a tombstone keeps its file until retention; "Deletion Vectors": a file's DV
file is kept with it. The rules are `protocol.vacuum`'s; this reads the columns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..protocol.actions import DeletionVectorDescriptor
from ..protocol.vacuum import SIMPLE_PATH_PATTERN, LoggedFile, protected_from_logged

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

    from ..snapshot import Snapshot


def _dv_descriptors(dvs: pa.ChunkedArray) -> list[DeletionVectorDescriptor | None]:
    from . import arrow_compute as pc

    if not pc.any(pc.is_valid(pc.struct_field(dvs, "storageType"))).as_py():
        return [None] * len(dvs)
    return [DeletionVectorDescriptor.from_json(d) for d in dvs.to_pylist()]


def logged_files(snapshot: Snapshot) -> tuple[list[LoggedFile], list[LoggedFile]]:
    """The snapshot's active files and every tombstone it holds, as `protocol.vacuum.LoggedFile`s."""
    files = snapshot.state.files
    adds, removes = files.adds, files.removes
    add_dvs = _dv_descriptors(adds.column("deletionVector"))
    active = [LoggedFile(path, dv) for path, dv in zip(adds.column("path").to_pylist(), add_dvs, strict=True)]
    columns = [removes.column(c).to_pylist() for c in ("path", "deletionTimestamp", "size")]
    remove_dvs = _dv_descriptors(removes.column("deletionVector"))
    tombs = [LoggedFile(p, dv, ts, size) for p, dv, ts, size in zip(columns[0], remove_dvs, *columns[1:], strict=True)]
    return active, tombs


def _tombstones(snapshot: Snapshot, cutoff_ms: int, *, expired: bool) -> tuple[pa.ChunkedArray, pa.ChunkedArray]:
    """Paths and DVs of the tombstones deleted after `cutoff_ms`, or at or before it when `expired`."""
    from . import arrow_compute as pc
    from .arrow_build import int64_scalar

    removes = snapshot.state.files.removes
    deleted = pc.fill_null(removes.column("deletionTimestamp"), int64_scalar(0))
    keep = pc.less(deleted, int64_scalar(cutoff_ms + 1)) if expired else pc.greater(deleted, int64_scalar(cutoff_ms))
    return pc.filter(removes.column("path"), keep), pc.filter(removes.column("deletionVector"), keep)


def protected_set(snapshot: Snapshot, *, cutoff_ms: int, table_root: str) -> set[str]:
    """`protocol.vacuum.protected_paths` of `snapshot`: active files, tombstones deleted after `cutoff_ms`,
    and their DV files."""
    import pyarrow as pa

    adds = snapshot.state.files.adds
    paths, dvs = _tombstones(snapshot, cutoff_ms, expired=False)
    paths = pa.chunked_array([*adds.column("path").chunks, *paths.chunks], type=pa.string())
    dv_type = adds.schema.field("deletionVector").type
    dvs = pa.chunked_array([*adds.column("deletionVector").chunks, *dvs.chunks], type=dv_type)
    return _logged_set(paths, dvs, table_root)


def active_set(snapshot: Snapshot, *, table_root: str) -> set[str]:
    """The active files of `snapshot` and their DV files (what a version lease pins)."""
    adds = snapshot.state.files.adds
    return _logged_set(adds.column("path"), adds.column("deletionVector"), table_root)


def expired_set(snapshot: Snapshot, *, cutoff_ms: int, table_root: str) -> set[str]:
    """`protocol.vacuum.expired_tombstone_paths` of `snapshot`."""
    return _logged_set(*_tombstones(snapshot, cutoff_ms, expired=True), table_root)


def _logged_set(paths: pa.ChunkedArray, dvs: pa.ChunkedArray, table_root: str) -> set[str]:
    """`protocol.vacuum.protected_from_logged` of Arrow columns: paths matching `SIMPLE_PATH_PATTERN` (tested
    on the whole column) are their own relative form; only the others and the DVs go through Python."""
    import pyarrow.compute as _c

    from . import arrow_compute as pc
    from .arrow_memory import POOL

    if not len(paths):
        return set()
    options = _c.MatchSubstringOptions(f"^(?:{SIMPLE_PATH_PATTERN})$")
    simple = _c.call_function("match_substring_regex", [paths], options, memory_pool=POOL)
    out = set(pc.filter(paths, simple).to_pylist())
    others = pc.filter(paths, _c.call_function("invert", [simple], memory_pool=POOL)).to_pylist()
    storage = pc.struct_field(dvs, "storageType")
    has_dv = pc.is_valid(storage)
    pairs: list[tuple[str, str]] = []
    if pc.any(has_dv).as_py():
        where = pc.filter(pc.struct_field(dvs, "pathOrInlineDv"), has_dv).to_pylist()
        pairs = list(zip(pc.filter(storage, has_dv).to_pylist(), (w or "" for w in where), strict=True))
    if others or pairs:
        out |= protected_from_logged(others, pairs, table_root=table_root)
    return out


def partition_columns(snapshot: Snapshot) -> list[str]:
    """Partition column names the hidden-path rule allows, physical names included."""
    cols = list(snapshot.partition_columns)  # column mapping: directories use physical names
    return cols + [p for p in snapshot.physical_partition_columns.values() if p not in cols]
