"""The paths a snapshot protects from VACUUM, and those it tracks as expired, from its Arrow file tables.

PROTOCOL.md "Delta Log Entries": a tombstone keeps its file until retention; "Deletion Vectors": a file's DV
file is kept with it. The rules are `protocol.vacuum`'s; this reads the columns. `protected_set` is a Python
set; `protected_index` keeps the same paths in Arrow, grouped by directory (`PathIndex`), for a walk that asks
one directory at a time.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Sequence
from collections.abc import Set as AbstractSet
from itertools import chain
from typing import TYPE_CHECKING, Any

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


def _protected_columns(snapshot: Snapshot, cutoff_ms: int) -> tuple[pa.ChunkedArray, pa.ChunkedArray]:
    """Paths and DVs of the active files and of the tombstones deleted after `cutoff_ms` (no copy of the
    active files' columns)."""
    import pyarrow as pa

    adds = snapshot.state.files.adds
    paths, dvs = _tombstones(snapshot, cutoff_ms, expired=False)
    paths = pa.chunked_array([*adds.column("path").chunks, *paths.chunks], type=pa.string())
    dv_type = adds.schema.field("deletionVector").type
    return paths, pa.chunked_array([*adds.column("deletionVector").chunks, *dvs.chunks], type=dv_type)


def protected_set(snapshot: Snapshot, *, cutoff_ms: int, table_root: str) -> set[str]:
    """`protocol.vacuum.protected_paths` of `snapshot`: active files, tombstones deleted after `cutoff_ms`,
    and their DV files."""
    return _logged_set(*_protected_columns(snapshot, cutoff_ms), table_root)


def protected_index(snapshot: Snapshot, *, cutoff_ms: int, table_root: str) -> PathIndex:
    """`protected_set` as a `PathIndex`: the same paths, kept in Arrow."""
    return _logged_index(*_protected_columns(snapshot, cutoff_ms), table_root)


def active_set(snapshot: Snapshot, *, table_root: str) -> set[str]:
    """The active files of `snapshot` and their DV files (what a version lease pins)."""
    adds = snapshot.state.files.adds
    return _logged_set(adds.column("path"), adds.column("deletionVector"), table_root)


def expired_set(snapshot: Snapshot, *, cutoff_ms: int, table_root: str) -> set[str]:
    """`protocol.vacuum.expired_tombstone_paths` of `snapshot`."""
    return _logged_set(*_tombstones(snapshot, cutoff_ms, expired=True), table_root)


def expired_index(snapshot: Snapshot, *, cutoff_ms: int, table_root: str) -> PathIndex:
    """`expired_set` as a `PathIndex`."""
    return _logged_index(*_tombstones(snapshot, cutoff_ms, expired=True), table_root)


def _logged_parts(paths: pa.ChunkedArray, dvs: pa.ChunkedArray, table_root: str) -> tuple[pa.ChunkedArray, set[str]]:
    """`protocol.vacuum.protected_from_logged` of Arrow columns, in two parts: the paths matching
    `SIMPLE_PATH_PATTERN` (tested on the whole column; the column itself when all do), which are their own
    relative form, and the relative forms of the others and of the DV files, through Python."""
    from . import arrow_compute as pc

    if not len(paths):
        return paths, set()
    simple = pc.match_substring_regex(paths, f"^(?:{SIMPLE_PATH_PATTERN})$")
    others: list[str] = []
    if simple.null_count or not pc.all(simple).as_py():  # a null path is in neither part
        others = pc.filter(paths, pc.invert(simple)).to_pylist()
        paths = pc.filter(paths, simple)
    storage = pc.struct_field(dvs, "storageType")
    has_dv = pc.is_valid(storage)
    pairs: list[tuple[str, str]] = []
    if pc.any(has_dv).as_py():
        where = pc.filter(pc.struct_field(dvs, "pathOrInlineDv"), has_dv).to_pylist()
        pairs = list(zip(pc.filter(storage, has_dv).to_pylist(), (w or "" for w in where), strict=True))
    extra = protected_from_logged(others, pairs, table_root=table_root) if others or pairs else set()
    return paths, extra


def _logged_set(paths: pa.ChunkedArray, dvs: pa.ChunkedArray, table_root: str) -> set[str]:
    column, extra = _logged_parts(paths, dvs, table_root)
    return set(column.to_pylist()) | extra


def _logged_index(paths: pa.ChunkedArray, dvs: pa.ChunkedArray, table_root: str) -> PathIndex:
    from .arrow_build import string_array

    column, extra = _logged_parts(paths, dvs, table_root)
    return PathIndex([*column.chunks, string_array(sorted(extra))])


class PathIndex(AbstractSet[str]):
    """A set of comparable relative paths kept as Arrow string arrays and grouped by directory.

    `directory(d)` is the subset directly under `d` (`""`: the root) as a Python frozenset, made when asked
    (the last `CACHED` are kept); `in` looks in the key's directory. A walk asking one directory at a time so
    holds a few directories' paths as Python strings, not all of them: on a 1M-file table, a Python set of
    the 667k protected paths took ~125 MiB beside the snapshot's column it was read from (bench/RESULTS.md).
    A table with everything in one directory gains nothing. Built on first use.
    """

    #: directories whose frozensets are kept (a listing in path order revisits a parent after its children)
    CACHED = 4
    #: rows grouped per pass, so the directories' temporary Arrow copy stays small
    SLICE = 1 << 16

    def __init__(self, arrays: Sequence[pa.Array]) -> None:
        self._arrays = [a for a in arrays if len(a)]
        self._groups: dict[str, list[tuple[int, pa.Array]]] | None = None
        self._cache: OrderedDict[str, frozenset[str]] = OrderedDict()
        self._len: int | None = None
        self._last: tuple[str | None, frozenset[str]] = (None, frozenset())

    def _grouped(self) -> dict[str, list[tuple[int, pa.Array]]]:
        """Directory -> [(array number, its row numbers in that directory)], rows ascending."""
        if self._groups is not None:
            return self._groups
        import numpy as np

        ids: dict[str, int] = {}
        parts = []
        for array in self._arrays:
            for start in range(0, len(array), self.SLICE):
                dirs = _directories(array.slice(start, self.SLICE)).dictionary_encode()
                local = np.array([ids.setdefault(d, len(ids)) for d in dirs.dictionary.to_pylist()], np.int32)
                parts.append(local[_int32_values(dirs.indices)])
        groups: dict[str, list[tuple[int, pa.Array]]] = {}
        if parts:
            codes = np.concatenate(parts)
            order = np.argsort(codes, kind="stable")  # each directory's rows ascending
            ends = np.cumsum(np.bincount(codes, minlength=len(ids)))
            starts = np.cumsum([0] + [len(a) for a in self._arrays])
            for directory, code in ids.items():
                rows = order[ends[code - 1] if code else 0 : ends[code]]
                cuts = np.searchsorted(rows, starts[1:-1])
                groups[directory] = [
                    (n, _int32_array(part - starts[n])) for n, part in enumerate(np.split(rows, cuts)) if len(part)
                ]
        self._groups = groups
        return groups

    def _build(self, directory: str) -> frozenset[str]:
        from . import arrow_compute as pc

        groups = self._grouped().get(directory, ())
        return frozenset(chain.from_iterable(pc.take(self._arrays[n], rows).to_pylist() for n, rows in groups))

    def directory(self, directory: str) -> frozenset[str]:
        """The paths directly under `directory` (a comparable relative path, `""` the root)."""
        if directory == self._last[0]:  # a listing or a sorted plan asks the same directory in a row
            return self._last[1]
        found = self._cache.get(directory)
        if found is None:
            found = self._cache[directory] = self._build(directory)
            if len(self._cache) > self.CACHED:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(directory)
        self._last = (directory, found)
        return found

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        directory = key.rpartition("/")[0]
        last = self._last  # `directory`'s first test, inlined: a plan re-validated asks once per entry
        return key in (last[1] if directory == last[0] else self.directory(directory))

    def __iter__(self) -> Iterator[str]:
        for directory in self._grouped():
            yield from self._build(directory)

    def __len__(self) -> int:
        if self._len is None:
            self._len = sum(len(self._build(d)) for d in self._grouped())
        return self._len


def _int32_array(values: Any) -> pa.Array:
    """A numpy integer array as an Arrow int32 array (`pa.array` of a numpy array imports pandas)."""
    import numpy as np
    import pyarrow as pa

    data = np.ascontiguousarray(values, dtype=np.int32)
    return pa.Array.from_buffers(pa.int32(), len(data), [None, pa.py_buffer(data)])


def _int32_values(array: pa.Array) -> Any:
    """The values of an int32 array without nulls, as a numpy view (`to_numpy` imports pandas)."""
    import numpy as np

    data = np.frombuffer(array.buffers()[1], dtype=np.int32, count=array.offset + len(array))
    return data[array.offset :]


def _directories(paths: pa.Array) -> pa.Array:
    """Each relative path's directory (all but its last component; `""` for none)."""
    import pyarrow as pa

    from . import arrow_compute as pc
    from .arrow_build import int_array, string_scalar

    split = pc.split_pattern(paths, "/", max_splits=1, reverse=True)  # [directory, name] or [name]
    two, zero = int_array([2, 0], pa.int32())
    first = pc.list_element(split, zero)
    return pc.if_else(pc.equal(pc.list_value_length(split), two), first, string_scalar(""))


def partition_columns(snapshot: Snapshot) -> list[str]:
    """Partition column names the hidden-path rule allows, physical names included."""
    cols = list(snapshot.partition_columns)  # column mapping: directories use physical names
    return cols + [p for p in snapshot.physical_partition_columns.values() if p not in cols]
