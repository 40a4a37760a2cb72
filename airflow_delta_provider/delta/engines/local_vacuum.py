"""The local engine's VACUUM executor: lists, re-validates and deletes (or quarantines) in this process.

The stock local store is walked here (`walk_candidates`), so that only the names no rule keeps are stat-ed
(never a table's active files); other stores are listed through `store.list_recursive`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from concurrent.futures import ThreadPoolExecutor
from stat import S_ISDIR, S_ISREG
from typing import TYPE_CHECKING

import pyarrow as pa

from ..errors import InvalidArgumentError
from ..progress import PROGRESS
from ..protocol.vacuum import (
    LISTING,
    Candidates,
    ListedFile,
    PlannedFile,
    VacuumPlan,
    candidates_of,
    grace_matters,
    partition_of,
    plan_candidates,
    revalidate,
    subdirectory_key,
    unprotected_names,
)
from ..read.protected_files import PathIndex, expired_index, protected_index
from ..storage.batch import delete_relative, remove_empty_dirs, stat_entries
from ..storage.local import LocalLogStore
from . import Deleted, Revalidation

if TYPE_CHECKING:  # pragma: no cover
    from ..delta_log import DeltaLog
    from ..snapshot import Snapshot

#: Moves in flight at once on a store that moves by copy and delete (`LocalVacuumExecutor.move`).
MOVE_WORKERS = 16


class LocalVacuumExecutor:
    """Lists, re-validates and deletes in this process (`store.list_recursive`, `store.delete_many`)."""

    in_process = True
    can_quarantine = True

    def __init__(self) -> None:
        #: the last protected paths, with their snapshot and (cutoff, root): a plan applied in the same call
        #: reuses them
        self._protected: tuple[Snapshot, tuple[int, str], PathIndex] | None = None

    def _sets(
        self, snapshot: Snapshot, cutoff_ms: int, root: str, now_ms: int, grace_ms: int
    ) -> tuple[PathIndex, AbstractSet[str]]:
        """The snapshot's protected paths at `cutoff_ms`, and its expired tombstones when the grace matters."""
        last = self._protected
        if last is None or last[0] is not snapshot or last[1] != (cutoff_ms, root):
            protected = protected_index(snapshot, cutoff_ms=cutoff_ms, table_root=root)
            last = self._protected = (snapshot, (cutoff_ms, root), protected)
        tracked: AbstractSet[str] = frozenset()
        if grace_matters(cutoff_ms=cutoff_ms, now_ms=now_ms, grace_ms=grace_ms):  # grouped when first asked
            tracked = expired_index(snapshot, cutoff_ms=cutoff_ms, table_root=root)
        return last[2], tracked

    def plan_full(
        self,
        dlog: DeltaLog,
        snapshot: Snapshot,
        *,
        cutoff_ms: int,
        retention_ms: int,
        partition_columns: list[str],
        now_ms: int,
        untracked_grace_ms: int,
    ) -> VacuumPlan:
        # The pages Arrow's default pool (mimalloc) freed go back to the system before the listing: after a
        # 1M-file state load ~140 MiB of freed checkpoint decode buffers stayed resident while the listing's
        # Python objects, which cannot use them, grew beside them (bench/RESULTS.md).
        pa.default_memory_pool().release_unused()
        protected, tracked = self._sets(snapshot, cutoff_ms, dlog.table_uri, now_ms, untracked_grace_ms)
        return plan_candidates(
            listed_candidates(dlog, protected, partition_columns),
            table=dlog.table_uri,
            version=snapshot.version,
            cutoff_ms=cutoff_ms,
            retention_ms=retention_ms,
            protocol=snapshot.protocol.to_json(),
            now_ms=now_ms,
            untracked_grace_ms=untracked_grace_ms,
            tracked=tracked,
            table_id=snapshot.metadata.id,
        )

    def revalidate(
        self,
        dlog: DeltaLog,
        snapshot: Snapshot,
        plan: VacuumPlan,
        *,
        cutoff_ms: int,
        partition_columns: list[str],
        now_ms: int,
        untracked_grace_ms: int,
    ) -> Revalidation:
        if not plan.files_inline:
            raise InvalidArgumentError(
                f"The plan carries counts only ({plan.num_files} files"
                + (f", listed at {plan.files_uri}" if plan.files_uri else "")
                + "): it was made on Spark and is applied there (engine='spark')",
                argument="plan",
                table=dlog.table_uri,
            )
        protected, tracked = self._sets(snapshot, cutoff_ms, plan.table, now_ms, untracked_grace_ms)
        checked = revalidate(
            plan,
            stored=lambda paths: stat_entries(dlog.store, dlog.table_uri, paths),
            cutoff_ms=cutoff_ms,
            now_ms=now_ms,
            grace_ms=untracked_grace_ms,
            partition_columns=partition_columns,
            protected=protected,
            tracked=tracked,
        )
        return Revalidation(
            plan.with_files(checked.keep),
            checked.dropped,
            len(checked.dropped),
            reasons=checked.reasons,
            missing=checked.missing,
            num_missing=len(checked.missing),
        )

    def delete(self, dlog: DeltaLog, checked: Revalidation, *, batch_size: int) -> Deleted:
        files = checked.plan.files
        done = delete_relative(dlog.store, dlog.table_uri, [f.path for f in files], batch_size)
        return Deleted(done, sum(f.size for f in files), _remove_dirs(dlog, checked))

    def move(self, dlog: DeltaLog, checked: Revalidation, *, destination: str) -> Deleted:
        """Each kept file moved to `destination/<its path>`: in turn where the store renames, `MOVE_WORKERS`
        at a time where it copies and deletes (a few requests each). A file gone meanwhile is not counted."""
        store = dlog.store
        files = checked.plan.files
        root = _root_dir(dlog)
        into = [p for p in destination.strip("/").split("/") if p]

        def one(f: PlannedFile) -> bool:
            parts = f.path.strip("/").split("/")
            try:
                store.move(store.join(root, *parts), store.join(root, *into, *parts))
            except FileNotFoundError:  # removed since re-validation
                return False
            return True

        if getattr(store, "move_method", "rename") == "rename" or len(files) < 2:
            moved = [one(f) for f in files]
        else:
            with ThreadPoolExecutor(min(MOVE_WORKERS, len(files))) as pool:
                moved = list(pool.map(one, files))
        done = [f for f, ok in zip(files, moved, strict=True) if ok]
        return Deleted(len(done), sum(f.size for f in done), _remove_dirs(dlog, checked))


def _remove_dirs(dlog: DeltaLog, checked: Revalidation) -> int:
    """The empty directories of the kept and the missing entries removed (a killed run left the latter's)."""
    dirs = {partition_of(f.path) for f in [*checked.plan.files, *checked.missing]}
    return remove_empty_dirs(dlog.store, dlog.table_uri, dirs)


def _root_dir(dlog: DeltaLog) -> str:
    return dlog.store.join(dlog.table_uri).rstrip("/")


_Directory = tuple[str, str, str]  # (local path, stored relative prefix "a/b/" or "", comparable path)


#: stat relative to an open directory: no path resolution per file. On the 1M-file VACUUM benchmark (333k
#: files stat-ed) this and the bound list appends below keep the dry run ~12 % faster (bench/RESULTS.md).
_AT_FD = os.listdir in os.supports_fd and os.stat in os.supports_dir_fd


def _walk_directory(
    directory: _Directory, protected: AbstractSet[str], partition_columns: Sequence[str]
) -> tuple[list[_Directory], Candidates]:
    """One directory of `walk_candidates`: its subdirectories to walk and its files' candidates."""
    path, stored, key = directory
    found = Candidates()
    subdirs: list[_Directory] = []
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)) if _AT_FD else None
    except (FileNotFoundError, NotADirectoryError):  # removed while listing
        return subdirs, found
    try:
        try:
            names = os.listdir(path if fd is None else fd)
        except (FileNotFoundError, NotADirectoryError):
            return subdirs, found
        prefix = path.rstrip(os.sep) + os.sep
        add_path, add_key, add_size, add_mtime = (
            found.paths.append,
            found.keys.append,
            found.sizes.append,
            found.mtimes.append,
        )
        same = stored == (f"{key}/" if key else "")  # stored spelling is the comparable one
        for i, name_key in unprotected_names(key, names, protected, partition_columns):
            name = names[i]
            try:
                st = os.lstat(prefix + name) if fd is None else os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:  # removed while listing
                continue
            if S_ISREG(st.st_mode):
                add_path(name_key if same and name.isascii() else stored + name)
                add_key(name_key)
                add_size(st.st_size)
                add_mtime(st.st_mtime_ns // 1_000_000)
            elif S_ISDIR(st.st_mode) and subdirectory_key(key, name, partition_columns) is not None:
                subdirs.append((prefix + name, f"{stored}{name}/", name_key))
    finally:
        if fd is not None:
            os.close(fd)
    return subdirs, found


def walk_candidates(root: str, protected: AbstractSet[str], partition_columns: Sequence[str] = ()) -> Candidates:
    """A local table directory's FULL candidates: each directory's names through `unprotected_names` (a
    protected file is never stat-ed), regular files kept, directories walked (`subdirectory_key`), symlinks
    skipped. A directory named as a protected file is not walked: VACUUM deletes less, never more. One thread:
    on a local disk, threads cost more CPU than they gain. Ordered by directory, then listing order."""
    columns = list(partition_columns)
    parts: list[tuple[str, Candidates]] = []
    pending = [(root, "", "")]
    progress = PROGRESS.get()  # directories listed; the total is known once the walk ends
    while pending:
        directory = pending.pop()
        subdirs, found = _walk_directory(directory, protected, columns)
        parts.append((directory[1], found))
        pending.extend(subdirs)
        if progress is not None:
            progress(LISTING, len(parts), None if pending else len(parts))
    parts.sort(key=lambda part: part[0], reverse=True)
    out = Candidates()
    while parts:  # each directory's lists freed once copied: no second copy of every candidate at the end
        out.extend(parts.pop()[1])
    return out


def listed_candidates(dlog: DeltaLog, protected: AbstractSet[str], partition_columns: Sequence[str]) -> Candidates:
    """The table's FULL candidates: walked here on the stock local store, else from `store.list_recursive`."""
    root = _root_dir(dlog)
    if getattr(type(dlog.store), "list_recursive", None) is LocalLogStore.list_recursive:
        return walk_candidates(root, protected, partition_columns)
    prefix = root + "/"
    listing = (
        ListedFile(info.path[len(prefix) :], info.size, info.modification_time)
        for info in dlog.store.list_recursive(root)
        if info.path.startswith(prefix)
    )
    return candidates_of(listing, protected, partition_columns)
