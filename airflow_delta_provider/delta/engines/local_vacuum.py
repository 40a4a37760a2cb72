"""The local engine's VACUUM executor: lists, re-validates and deletes (or, for a quarantine, moves) in this process.

A table on the local store is walked here (`walk_candidates`): directory names first, then one `lstat`
only for the names no rule keeps (a table's active files are never stat-ed); other stores are listed
through `store.list_recursive`. The rules are `protocol.vacuum`'s; the protected paths come from the
snapshot's Arrow columns (`read.protected_files`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from concurrent.futures import ThreadPoolExecutor
from stat import S_ISDIR, S_ISREG
from typing import TYPE_CHECKING

from ..errors import InvalidArgumentError
from ..protocol.vacuum import (
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
from ..read.protected_files import expired_set, protected_set
from ..storage.batch import delete_relative, remove_empty_dirs, stat_entries
from ..storage.local import LocalLogStore
from . import Deleted, Revalidation

if TYPE_CHECKING:  # pragma: no cover
    from ..delta_log import DeltaLog
    from ..snapshot import Snapshot
    from ..storage import LogStore

#: Moves in flight at once on a store that moves by copy and delete (`LocalVacuumExecutor.move`).
MOVE_WORKERS = 16


class LocalVacuumExecutor:
    """Lists, re-validates and deletes in this process (`store.list_recursive`, `store.delete_many`)."""

    in_process = True
    can_quarantine = True

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
        protected = protected_set(snapshot, cutoff_ms=cutoff_ms, table_root=dlog.table_uri)
        candidates = listed_candidates(dlog, protected, partition_columns)
        del protected  # freed before the plan's objects are made (peak memory)
        tracked: set[str] = set()
        if grace_matters(cutoff_ms=cutoff_ms, now_ms=now_ms, grace_ms=untracked_grace_ms):
            tracked = expired_set(snapshot, cutoff_ms=cutoff_ms, table_root=dlog.table_uri)
        return plan_candidates(
            candidates,
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
        protected = protected_set(snapshot, cutoff_ms=cutoff_ms, table_root=plan.table)
        tracked: set[str] = set()
        if grace_matters(cutoff_ms=cutoff_ms, now_ms=now_ms, grace_ms=untracked_grace_ms):
            tracked = expired_set(snapshot, cutoff_ms=cutoff_ms, table_root=plan.table)
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
        # the directories of missing entries too: a run killed after its deletes left them behind
        dirs = {partition_of(f.path) for f in [*files, *checked.missing]}
        directories = remove_empty_dirs(dlog.store, dlog.table_uri, dirs)
        return Deleted(done, sum(f.size for f in files), directories)

    def move(self, dlog: DeltaLog, checked: Revalidation, *, destination: str) -> Deleted:
        """VACUUM's quarantine: each kept file moved to `destination/<its path>` (`store.move`): one after
        the other where the store renames, `MOVE_WORKERS` at a time where it copies and deletes (each move
        is a few requests). A file gone meanwhile is not counted."""
        store = dlog.store
        files = checked.plan.files
        root = store.join(dlog.table_uri).rstrip("/")
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
        dirs = {partition_of(f.path) for f in [*files, *checked.missing]}
        directories = remove_empty_dirs(store, dlog.table_uri, dirs)
        done = [f for f, ok in zip(files, moved, strict=True) if ok]
        return Deleted(len(done), sum(f.size for f in done), directories)


def _root_dir(dlog: DeltaLog) -> str:
    return dlog.store.join(dlog.table_uri).rstrip("/")


def _walks_locally(store: LogStore) -> bool:
    """True for the stock local store: the table is walked here, with a `stat` only for the files the
    name rules leave (`walk_candidates`). Any other store (a subclass changing `list_recursive` too) is
    listed through its `list_recursive`."""
    return getattr(type(store), "list_recursive", None) is LocalLogStore.list_recursive


_Directory = tuple[str, str, str]  # (local path, stored relative prefix "a/b/" or "", comparable path)
_AT_FD = os.listdir in os.supports_fd and os.stat in os.supports_dir_fd


def _walk_directory(
    directory: _Directory, protected: AbstractSet[str], partition_columns: Sequence[str]
) -> tuple[list[_Directory], Candidates]:
    """One directory of `walk_candidates`: its subdirectories to walk and its files' candidates. Names the
    rules drop are never stat-ed; the `lstat` of the others tells files from directories."""
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
                if fd is None:
                    st = os.lstat(os.path.join(path, name))
                else:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:  # removed while listing
                continue
            if S_ISREG(st.st_mode):
                add_path(name_key if same and name.isascii() else stored + name)
                add_key(name_key)
                add_size(st.st_size)
                add_mtime(st.st_mtime_ns // 1_000_000)
            elif S_ISDIR(st.st_mode) and subdirectory_key(key, name, partition_columns) is not None:
                subdirs.append((os.path.join(path, name), f"{stored}{name}/", name_key))
    finally:
        if fd is not None:
            os.close(fd)
    return subdirs, found


def walk_candidates(root: str, protected: AbstractSet[str], partition_columns: Sequence[str] = ()) -> Candidates:
    """A local table directory's FULL candidates (`protocol.vacuum.Candidates`): each directory's names
    through `unprotected_names` (hidden, protected and DV-alias names dropped: a protected file needs no
    `stat`), then one `lstat` per remaining name: regular files are candidates, directories are walked
    (`subdirectory_key`), anything else (symlinks: as in `LocalLogStore.list_recursive`) is skipped. A
    directory named as a protected file (a corrupt table) is not walked: VACUUM deletes less, never more.
    The walk is single-threaded: on a local disk, handing listings and `stat` calls to threads costs more
    than it gains (measured on a 2-core VM: up to 1.7x the CPU, no faster). The candidates come out
    ordered by directory, each directory's in listing order. A file or directory removed while listing
    is skipped."""
    columns = list(partition_columns)
    parts: list[tuple[str, Candidates]] = []
    pending = [(root, "", "")]
    while pending:
        directory = pending.pop()
        subdirs, found = _walk_directory(directory, protected, columns)
        parts.append((directory[1], found))
        pending.extend(subdirs)
    parts.sort(key=lambda part: part[0])
    out = Candidates()
    for _, found in parts:
        out.paths += found.paths
        out.keys += found.keys
        out.sizes += found.sizes
        out.mtimes += found.mtimes
    return out


def listed_candidates(dlog: DeltaLog, protected: AbstractSet[str], partition_columns: Sequence[str]) -> Candidates:
    """The table's FULL candidates: walked here on the local store, else from `store.list_recursive`."""
    root = _root_dir(dlog)
    if _walks_locally(dlog.store):
        return walk_candidates(root, protected, partition_columns)
    prefix = root + "/"
    listing = (
        ListedFile(info.path[len(prefix) :], info.size, info.modification_time)
        for info in dlog.store.list_recursive(root)
        if info.path.startswith(prefix)
    )
    return candidates_of(listing, protected, partition_columns)
