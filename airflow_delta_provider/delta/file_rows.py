"""The file set of a small snapshot, held as Python actions: no pyarrow until a table is asked for.

`FileState` keeps a million files in a few Arrow buffers, but importing pyarrow costs more than
replaying a small table. The local engine holds snapshots whose checkpoint is under
`row_state_max_bytes` (or that have none) here instead: the active files and tombstones keyed by
file identity, as `InMemoryLogReplay` holds them. The answers (`num_files`, `size_in_bytes`,
tombstone counts, summaries) come from the actions; `adds` / `removes` build the same Arrow tables
`FileState` holds, on first use. Same interface as `FileState` and the Spark engine's file state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .actions import AddFile, FileKey, RemoveFile, file_key
from .aggregates import DEFAULT_SMALL_FILE_BYTES, FileSummary, TombstoneSummary
from .replay import InMemoryLogReplay

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa


class DuplicateFileKey(Exception):
    """A checkpoint names one file twice: only the columnar `FileState` keeps both rows."""


AddRow = tuple[Any, ...]
"""A checkpoint add not yet made an `AddFile`: its field values in `AddFile`'s field order."""


def _row_key(row: AddRow) -> FileKey:
    path, dv = row[0], row[7]
    if dv is None and not path.startswith(("/", "file:")):
        return path
    return file_key(path, dv)


def _size(add: AddFile | AddRow) -> int:
    return add[2] if type(add) is tuple else add.size  # type: ignore[union-attr]


class RowFileState:
    """Active files and tombstones of one version, keyed by file identity. A checkpoint's adds stay
    field tuples (`AddRow`) until someone asks for the files: counts and sizes never need objects."""

    def __init__(self, active: dict[FileKey, AddFile | AddRow], tombstones: dict[FileKey, RemoveFile]) -> None:
        self.active = active
        self.tombstones = tombstones
        self._tables: tuple[Any, Any] | None = None

    @classmethod
    def empty(cls) -> RowFileState:
        return cls({}, {})

    @classmethod
    def from_checkpoint(cls, adds: Sequence[AddRow], removes: Sequence[RemoveFile]) -> RowFileState:
        """A checkpoint's file actions; `DuplicateFileKey` if one key appears twice."""
        active: dict[FileKey, AddFile | AddRow] = dict(zip(map(_row_key, adds), adds, strict=True))
        tombstones = {r.key: r for r in removes}
        if len(active) != len(adds) or len(tombstones) != len(removes) or not active.keys().isdisjoint(tombstones):
            raise DuplicateFileKey("a file key appears twice in the checkpoint")
        return cls(active, tombstones)

    def add_files(self) -> list[AddFile]:
        """The active files as `AddFile` objects (made once)."""
        active = self.active
        for key, add in active.items():
            if type(add) is tuple:
                active[key] = AddFile(*add)
        return list(active.values())  # type: ignore[arg-type]

    def apply(self, replay: InMemoryLogReplay, *, tables: Any = None) -> RowFileState:
        """This state with a later replay's file actions on top (each touched key moves to the end,
        as in `FileState`, whose touched rows are dropped and the replay's appended)."""
        if not replay.active_files and not replay.tombstones:
            return self
        active, tombstones = dict(self.active), dict(self.tombstones)
        for key, add in replay.active_files.items():
            active.pop(key, None)
            active[key] = add
            tombstones.pop(key, None)
        for key, remove in replay.tombstones.items():
            active.pop(key, None)
            tombstones.pop(key, None)
            tombstones[key] = remove
        return RowFileState(active, tombstones)

    def _arrow(self) -> tuple[pa.Table, pa.Table]:
        if self._tables is None:
            from .file_state import adds_to_table, removes_to_table

            self._tables = (adds_to_table(self.add_files()), removes_to_table(self.tombstones.values()))
        return self._tables

    @property
    def adds(self) -> pa.Table:
        """Active files as an ADD_SCHEMA table (stats included: small checkpoints are read whole)."""
        return self._arrow()[0]

    @property
    def removes(self) -> pa.Table:
        return self._arrow()[1]

    @property
    def adds_with_stats(self) -> pa.Table:
        return self.adds

    @property
    def num_files(self) -> int:
        return len(self.active)

    @property
    def size_in_bytes(self) -> int:
        return sum(map(_size, self.active.values()))

    def file_summary(self, small_file_bytes: int = DEFAULT_SMALL_FILE_BYTES) -> FileSummary:
        out = FileSummary(small_file_bytes)
        for size in map(_size, self.active.values()):
            out.add(size)
        return out

    def uncache(self) -> None:
        """Nothing to release: the state is plain memory of this process."""

    def num_distinct_paths(self) -> int:
        return len({a[0] if type(a) is tuple else a.path for a in self.active.values()})  # type: ignore[union-attr]

    def count_tombstones_after(self, cutoff_ms: int) -> int:
        return sum(1 for r in self.tombstones.values() if (r.deletion_timestamp or 0) > cutoff_ms)

    def tombstone_summary(self, cutoff_ms: int, partition_columns: tuple[str, ...]) -> TombstoneSummary:
        out = TombstoneSummary(cutoff_ms, tuple(partition_columns))
        for r in self.tombstones.values():
            out.add(dict(r.partition_values) if r.partition_values else None, r.size, r.deletion_timestamp)
        return out
