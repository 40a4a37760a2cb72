"""The file set of a small snapshot, held as Python actions: no pyarrow until a table is asked for.

`FileState` keeps a million files in a few Arrow buffers, but importing pyarrow costs more than
replaying a small table. The local engine holds snapshots whose checkpoint is under
`row_state_max_bytes` (or that have none) here instead: the active files and tombstones keyed by
file identity, as `InMemoryLogReplay` holds them. The answers (`num_files`, `size_in_bytes`,
tombstone counts, summaries) come from the actions; `adds` / `removes` build the same Arrow tables
`FileState` holds, on first use. Same interface as `FileState` and the Spark engine's file state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from operator import itemgetter, methodcaller
from typing import TYPE_CHECKING, Any

from .actions import AddFile, FileKey, RemoveFile, file_key
from .replay import InMemoryLogReplay
from .table_properties import DEFAULT_SMALL_FILE_BYTES

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

    from .aggregates import FileSummary, TombstoneSummary


class DuplicateFileKey(Exception):
    """A checkpoint names one file twice: only the columnar `FileState` keeps both rows."""


class CheckpointTooLarge(Exception):
    """A checkpoint's parts and sidecars together exceed the row path's size: read it as Arrow."""


AddRow = tuple[Any, ...]
"""A checkpoint add not yet made an `AddFile`: its field values in `AddFile`'s field order."""

StatsLoader = Callable[[], Mapping[FileKey, "str | None"]]
"""Returns the stats of the checkpoint's adds by file key (read only when someone asks for them)."""

_STATS = 5  # index of `stats` in an AddRow


def row_keys(paths: Sequence[str], dvs: Sequence[Any]) -> list[FileKey]:
    """The file key of each (path, deletion vector): the paths themselves when none is absolute or has a DV."""
    if any(dvs) or any(map(methodcaller("startswith", ("/", "file:")), paths)):
        return [file_key(p, dv) for p, dv in zip(paths, dvs, strict=True)]
    return list(paths)


def _size(add: AddFile | AddRow) -> int:
    return add[2] if type(add) is tuple else add.size  # type: ignore[union-attr]


class RowFileState:
    """Active files and tombstones of one version, keyed by file identity. A checkpoint's adds stay
    field tuples (`AddRow`) until someone asks for the files: counts and sizes never need objects.
    Their stats may be left unread (`stats_loader`), as `FileState` leaves them."""

    def __init__(
        self,
        active: dict[FileKey, AddFile | AddRow],
        tombstones: dict[FileKey, RemoveFile],
        stats_loader: StatsLoader | None = None,
    ) -> None:
        self.active = active
        self.tombstones = tombstones
        self._stats_loader = stats_loader
        self._files: dict[bool, list[AddFile]] = {}
        self._tables: dict[bool, Any] = {}
        self._removes: Any = None

    @classmethod
    def empty(cls) -> RowFileState:
        return cls({}, {})

    @classmethod
    def from_checkpoint(
        cls, adds: Sequence[AddRow], removes: Sequence[RemoveFile], stats_loader: StatsLoader | None = None
    ) -> RowFileState:
        """A checkpoint's file actions; `DuplicateFileKey` if one key appears twice."""
        keys = row_keys(list(map(itemgetter(0), adds)), list(map(itemgetter(7), adds)))
        active: dict[FileKey, AddFile | AddRow] = dict(zip(keys, adds, strict=True))
        tombstones = {r.key: r for r in removes}
        if len(active) != len(adds) or len(tombstones) != len(removes) or not active.keys().isdisjoint(tombstones):
            raise DuplicateFileKey("a file key appears twice in the checkpoint")
        return cls(active, tombstones, stats_loader)

    def add_files(self, with_stats: bool = True) -> list[AddFile]:
        """The active files as `AddFile` objects (`with_stats=False` leaves unread checkpoint stats unread)."""
        with_stats = with_stats and self._stats_loader is not None
        files = self._files.get(with_stats)
        if files is None:
            stats = self._stats_loader() if with_stats and self._stats_loader is not None else None
            files = []
            for key, add in self.active.items():
                if type(add) is not tuple:
                    files.append(add)  # type: ignore[arg-type]
                elif stats is not None and add[_STATS] is None:
                    files.append(AddFile(*add[:_STATS], stats.get(key), *add[_STATS + 1 :]))
                else:
                    files.append(AddFile(*add))
            self._files[with_stats] = files
        return files

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
        return RowFileState(active, tombstones, self._stats_loader)

    def _adds_table(self, with_stats: bool) -> pa.Table:
        with_stats = with_stats and self._stats_loader is not None
        if with_stats not in self._tables:
            from .file_state import adds_to_table

            self._tables[with_stats] = adds_to_table(self.add_files(with_stats))
        return self._tables[with_stats]

    @property
    def adds(self) -> pa.Table:
        """Active files as an ADD_SCHEMA table; `stats` may be null for checkpoint rows, see `adds_with_stats`."""
        return self._adds_table(False)

    @property
    def removes(self) -> pa.Table:
        if self._removes is None:
            from .file_state import removes_to_table

            self._removes = removes_to_table(self.tombstones.values())
        return self._removes

    @property
    def adds_with_stats(self) -> pa.Table:
        """Active files with every stats string (reads checkpoint stats on first use)."""
        return self._adds_table(True)

    @property
    def num_files(self) -> int:
        return len(self.active)

    @property
    def size_in_bytes(self) -> int:
        return sum(map(_size, self.active.values()))

    def file_summary(self, small_file_bytes: int = DEFAULT_SMALL_FILE_BYTES) -> FileSummary:
        from .aggregates import FileSummary

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
        from .aggregates import TombstoneSummary

        out = TombstoneSummary(cutoff_ms, tuple(partition_columns))
        for r in self.tombstones.values():
            out.add(dict(r.partition_values) if r.partition_values else None, r.size, r.deletion_timestamp)
        return out
