"""The paths a snapshot protects from VACUUM, and those it tracks as expired, read from its Arrow file
tables (PROTOCOL.md "Delta Log Entries": a tombstone keeps its file until retention; "Deletion
Vectors": a file's DV is protected with it). The rules are `protocol.vacuum`'s; this reads the columns."""

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
    """The snapshot's active files and every tombstone it holds, as the plan's rules read them (from the
    snapshot's file tables' columns; `protected_set` is the faster way to the protected paths)."""
    files = snapshot.state.files
    adds, removes = files.adds, files.removes
    active = [
        LoggedFile(path, dv)
        for path, dv in zip(
            adds.column("path").to_pylist(), _dv_descriptors(adds.column("deletionVector")), strict=True
        )
    ]
    tombs = [
        LoggedFile(path, dv, ts, size)
        for path, dv, ts, size in zip(
            removes.column("path").to_pylist(),
            _dv_descriptors(removes.column("deletionVector")),
            removes.column("deletionTimestamp").to_pylist(),
            removes.column("size").to_pylist(),
            strict=True,
        )
    ]
    return active, tombs


def protected_set(snapshot: Snapshot, *, cutoff_ms: int, table_root: str) -> set[str]:
    """`protocol.vacuum.protected_paths` of `snapshot` (active files, tombstones deleted after `cutoff_ms`,
    their DV files), read from the snapshot's Arrow file tables: logged paths matching `SIMPLE_PATH_PATTERN`
    (tested on the whole column) are their own relative form; only the others and the DV descriptors go
    through `protocol.vacuum.protected_from_logged`."""
    import pyarrow as pa

    from . import arrow_compute as pc
    from .arrow_build import int64_scalar

    files = snapshot.state.files
    adds, removes = files.adds, files.removes
    recent = pc.greater(pc.fill_null(removes.column("deletionTimestamp"), int64_scalar(0)), int64_scalar(cutoff_ms))
    paths = pa.chunked_array(
        [*adds.column("path").chunks, *pc.filter(removes.column("path"), recent).chunks], type=pa.string()
    )
    dvs = pa.chunked_array(
        [*adds.column("deletionVector").chunks, *pc.filter(removes.column("deletionVector"), recent).chunks],
        type=adds.schema.field("deletionVector").type,
    )
    return _logged_set(paths, dvs, table_root)


def active_set(snapshot: Snapshot, *, table_root: str) -> set[str]:
    """The normalized relative paths a reader of `snapshot` needs: its active files and their DV files
    (what a version lease pins, `protocol.leases`), read as `protected_set` reads its paths."""
    adds = snapshot.state.files.adds
    return _logged_set(adds.column("path"), adds.column("deletionVector"), table_root)


def expired_set(snapshot: Snapshot, *, cutoff_ms: int, table_root: str) -> set[str]:
    """`protocol.vacuum.expired_tombstone_paths` of `snapshot`: its tombstones deleted at or before
    `cutoff_ms` and their DV files (tracked: the untracked grace period does not apply to them), read as
    `protected_set` reads its paths."""
    import pyarrow.compute as _c

    from . import arrow_compute as pc
    from .arrow_build import int64_scalar
    from .arrow_memory import POOL

    removes = snapshot.state.files.removes
    recent = pc.greater(pc.fill_null(removes.column("deletionTimestamp"), int64_scalar(0)), int64_scalar(cutoff_ms))
    expired = _c.call_function("invert", [recent], memory_pool=POOL)
    paths = pc.filter(removes.column("path"), expired)
    return _logged_set(paths, pc.filter(removes.column("deletionVector"), expired), table_root)


def _logged_set(paths: pa.ChunkedArray, dvs: pa.ChunkedArray, table_root: str) -> set[str]:
    """`protocol.vacuum.protected_from_logged` of Arrow columns of logged paths and their DV descriptors."""
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
