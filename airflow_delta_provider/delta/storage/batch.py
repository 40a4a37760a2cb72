"""Bulk verbs over many files of one table, by paths relative to its root; VACUUM runs them in this process
and on Spark executors."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from stat import S_ISDIR, S_ISREG

from ..progress import PROGRESS
from ..protocol.vacuum import DIR, FILE, OTHER, StoredEntry, partition_of
from .base import LogStore, is_local
from .local import LocalLogStore

#: `delete_relative`'s progress phase by default (VACUUM's, its caller's).
DELETING = "VACUUM: deleting files"

#: A directory holding at least this many entries to look up is listed once (`LogStore.list_level`)
#: instead of one HEAD per entry (`stat_entries`, object stores).
LIST_DIRECTORY_AT = 64


def stat_entries(store: LogStore, table_uri: str, paths: Sequence[str]) -> list[StoredEntry | None]:
    """What storage holds now at each of `paths`: a `StoredEntry` (file, directory or other) or None. Locally
    one `lstat` each (links not followed); elsewhere one HEAD each, or one `list_level` for a directory holding
    `LIST_DIRECTORY_AT` of the paths (an object store has no directories: a HEAD of a prefix finds nothing)."""
    root = store.join(table_uri).rstrip("/")
    if isinstance(store, LocalLogStore) and is_local(table_uri):
        out: list[StoredEntry | None] = []
        for p in paths:
            try:
                st = os.lstat(os.path.join(root, *p.split("/")))
            except (FileNotFoundError, NotADirectoryError):
                out.append(None)
                continue
            kind = FILE if S_ISREG(st.st_mode) else DIR if S_ISDIR(st.st_mode) else OTHER
            out.append(StoredEntry(kind, st.st_size, st.st_mtime_ns // 1_000_000))
        return out
    found: list[StoredEntry | None] = [None] * len(paths)
    by_directory: dict[str, list[int]] = {}
    for i, p in enumerate(paths):
        by_directory.setdefault(partition_of(p.strip("/")), []).append(i)
    for directory, indices in by_directory.items():
        if len(indices) >= LIST_DIRECTORY_AT:
            where = store.join(root, *directory.split("/")) if directory else root
            level = {e.name: e for e in store.list_level(where)}
            for i in indices:
                e = level.get(paths[i].strip("/").rpartition("/")[2])
                if e is not None:
                    found[i] = StoredEntry(DIR if e.is_dir else FILE, e.size, e.modification_time)
            continue
        for i in indices:
            info = store.head(store.join(root, *paths[i].split("/")))
            if info is not None:
                found[i] = StoredEntry(FILE, info.size, info.modification_time)
    return found


def delete_relative(
    store: LogStore, table_uri: str, paths: Sequence[str], batch_size: int, *, phase: str = DELETING
) -> int:
    """Delete `paths` with one `delete_many` per `batch_size` of them; returns files handled (a missing file
    counts). The context's progress callback (`delta.progress`) is told `phase` once a batch."""
    progress = PROGRESS.get()
    done = 0
    root = store.join(table_uri)
    prefix = store.join(root, "")
    if store.join(root, "a", "b") != f"{prefix}a/b":  # a store whose join is not a plain concatenation
        prefix = None
    for i in range(0, len(paths), batch_size):
        chunk = paths[i : i + batch_size]
        batch = [prefix + p for p in chunk] if prefix is not None else [store.join(root, *p.split("/")) for p in chunk]
        done += store.delete_many(batch)
        if progress is not None:
            progress(phase, done, len(paths))
    return done


def remove_empty_dirs(store: LogStore, table_uri: str, dirs: Iterable[str]) -> int:
    """Local stores: remove the directories `dirs` (with their parents) that deletes left empty (never the
    root, never `_delta_log`)."""
    if not is_local(table_uri):
        return 0  # object stores have no directories
    root = store.join(table_uri).rstrip("/")
    candidates: set[str] = set()
    for d in set(dirs) - {""}:
        parts = d.split("/")
        candidates.update("/".join(parts[:n]) for n in range(1, len(parts) + 1))
    removed = 0
    for d in sorted(candidates, key=lambda x: -x.count("/")):  # deepest first
        if d.split("/")[0] == "_delta_log":
            continue
        try:
            os.rmdir(os.path.join(root, *d.split("/")))
            removed += 1
        except OSError:  # not empty, or gone
            continue
    return removed
