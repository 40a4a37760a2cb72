"""A store wrapper that counts requests by kind and serves repeated log reads from memory.

A scan lists a table's `_delta_log` once and reads each commit once: the full listing answers the later
`list_from` calls from a start name, `_last_checkpoint` is not read once that listing is in hand (it names the
checkpoints), and commit files (immutable once written, PROTOCOL.md "Delta Log Entries") are kept to be parsed
again for their commitInfo without a second GET.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, BinaryIO

from ..protocol.filenames import FileInfo
from ..storage import LocalLogStore, LogStore, local_path
from ..storage.base import LevelEntry

LAST_CHECKPOINT = "_last_checkpoint"


#: Concurrent GETs of all prefetches together (one pool for the process: tables scanned at once share it, and
#: no thread is started per table).
PREFETCH_WORKERS = 16
_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _prefetch_pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=PREFETCH_WORKERS, thread_name_prefix="delta-lake-get")
        return _POOL


class CountingStore:
    """Delegates to `inner`; `requests` counts list, get and head calls (a ranged `open` counts as one get)."""

    def __init__(self, inner: LogStore) -> None:
        self.inner = inner
        self.requests: Counter[str] = Counter()
        self._listings: dict[str, list[FileInfo]] = {}
        self._sizes: dict[str, int] = {}  # listed path -> size
        self._commits: dict[str, bytes] = {}
        self._pending: dict[str, Future[None]] = {}
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _count(self, kind: str) -> None:
        with self._lock:
            self.requests[kind] += 1

    def list_from(self, directory: str, start: str = "") -> list[FileInfo]:
        full = self._listings.get(directory)
        if full is not None:
            return [f for f in full if f.name >= start]
        self._count("list")
        found = self.inner.list_from(directory, start)
        if not start:
            self._listings[directory] = found
            self._sizes.update((f.path, f.size) for f in found)
        return found

    def list_level(self, directory: str) -> Iterator[LevelEntry]:
        self._count("list")
        return self.inner.list_level(directory)

    def read_bytes(self, path: str) -> bytes:
        pending = self._pending.get(path)
        if pending is not None:  # prefetched: wait for that GET rather than send another
            pending.result()
        cached = self._commits.get(path)
        if cached is not None:
            return cached
        directory, _, name = path.rpartition("/")
        if name == LAST_CHECKPOINT and directory in self._listings:
            # the full listing names every checkpoint: the hint would only cost a GET (PROTOCOL.md "Last
            # Checkpoint File": readers may do without it), so it reads as absent
            raise FileNotFoundError(path)
        return self._get(path)

    def _get(self, path: str) -> bytes:
        self._count("get")
        data = self.inner.read_bytes(path)
        if path.endswith(".json") and "/_delta_log/" in path.replace("\\", "/"):
            with self._lock:
                self._commits[path] = data
        return data

    def prefetch(self, paths: Sequence[str]) -> None:
        """Start reading log files (commits) concurrently into the cache, each with the one GET a later
        `read_bytes` would make (which then waits for it): on an object store a tail of commits costs about
        one round trip, not one per commit, and overlaps the checkpoint's read. A read that fails is left to
        the later `read_bytes`, which sends it again and raises as the sequential read would."""
        todo = [p for p in dict.fromkeys(paths) if p not in self._commits and p not in self._pending]
        if len(todo) < 2:
            return

        def get(path: str) -> None:
            try:
                self._get(path)
            except Exception:  # not cached: the caller's own read meets (and types) the error
                pass

        pool = _prefetch_pool()
        for path in todo:
            self._pending[path] = pool.submit(get, path)

    def open(self, path: str) -> BinaryIO:
        """`inner.open`; a local file memory-mapped, as the checkpoint reader maps it from the store itself, and
        a listed log file no larger than the store's read block (`block_size`: one ranged GET either way) read
        whole into memory: Parquet reads then release the GIL and go through no Python file object."""
        import pyarrow as pa

        self._count("get")
        if type(self.inner) is LocalLogStore:
            return pa.memory_map(local_path(path))  # type: ignore[return-value]
        raw = self.inner.open(path)
        size = self._sizes.get(path)
        block = getattr(self.inner, "block_size", None)
        if size is None or not isinstance(block, int) or size > block:
            return raw
        with raw:
            return pa.BufferReader(raw.read())  # type: ignore[return-value]

    def head(self, path: str) -> FileInfo | None:
        self._count("head")
        return self.inner.head(path)

    def is_dir(self, path: str) -> bool:
        self._count("list")
        return self.inner.is_dir(path)

    def join(self, base: str, *parts: str) -> str:
        return self.inner.join(base, *parts)
