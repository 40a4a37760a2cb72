"""Active-file counts, sizes and small files of one version, kept up to date action by action for
`commit_checks.check_commits`: each version then costs its own actions, not the table's size."""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..delta.protocol.actions import canonical_path
from ..delta.read.aggregates import FileSummary

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa


def _spellings(key_path: str) -> list[str]:
    """Logged path spellings whose `canonical_path` is `key_path` (absolute paths have four)."""
    if key_path.startswith("file:/"):
        rest = key_path[len("file:") :]
        return [rest, "file:" + rest, "file://" + rest, "file://localhost" + rest]
    return [key_path]


@dataclass
class BaseFiles:
    """The start snapshot's files that the range touches, looked up once."""

    entries: dict[str, tuple[int, str, int]]  # key -> (row, raw path, size), active at the seed
    path_counts: Counter[str]  # raw path -> active rows at the seed, for every path the range touches
    smallest: list[tuple[int, int]]  # (row, size), ascending: enough rows to outlast every touched one
    largest: list[tuple[int, int]]  # (row, size), descending


def lookup_base(adds: pa.Table, raw_paths: Iterable[str]) -> BaseFiles:
    """The seed's rows whose path a range action names: one `is_in` over the path column, keys only
    for the hits, and the k smallest and largest sizes (k = hits + 1) for exact min/max later."""
    import pyarrow as pa
    import pyarrow.compute as pac

    from ..delta.read import arrow_compute as pc
    from ..delta.read.arrow_build import int64_scalar, string_array
    from ..delta.read.arrow_memory import POOL
    from ..delta.read.file_state import key_column, take_rows

    spellings = sorted({s for p in raw_paths for s in _spellings(canonical_path(p))})
    if not adds.num_rows:
        return BaseFiles({}, Counter(), [], [])
    hits = pc.indices_nonzero(pc.is_in(adds.column("path"), value_set=string_array(spellings)))
    entries: dict[str, tuple[int, str, int]] = {}
    counts: Counter[str] = Counter()
    if len(hits):
        sub = take_rows(adds.select(["path", "size", "deletionVector"]), hits)
        sizes = pc.fill_null(sub.column("size"), int64_scalar(0)).to_pylist()
        raws = sub.column("path").to_pylist()
        for row, key, raw, size in zip(hits.to_pylist(), key_column(sub).to_pylist(), raws, sizes, strict=True):
            entries[key] = (row, raw, size)
            counts[raw] += 1
    all_sizes = pa.table({"size": pc.fill_null(adds.column("size"), int64_scalar(0))})
    k = min(len(hits) + 1, adds.num_rows)
    ends = []
    for order in ("ascending", "descending"):
        rows = pac.select_k_unstable(all_sizes, k=k, sort_keys=[("size", order)], memory_pool=POOL)
        ends.append(list(zip(rows.to_pylist(), pc.take(all_sizes.column("size"), rows).to_pylist(), strict=True)))
    return BaseFiles(entries, counts, ends[0], ends[1])


class ActiveFiles:
    """Active-file counts of one version, updated per add/remove (no I/O). Untouched keys stay as the seed
    had them; min/max sizes come from the seed's untouched extremes and lazily cleaned heaps of live sizes."""

    def __init__(self, summary: FileSummary, base: BaseFiles, distinct_paths: int | None) -> None:
        self.threshold = summary.small_file_bytes
        self.num_files, self.size_bytes, self.small_files = summary.num_files, summary.size_bytes, summary.small_files
        self.distinct_paths = distinct_paths  # None: not tracked
        self._base = base
        self._live: dict[str, tuple[str, int]] = {}
        self._touched: set[str] = set()
        self._superseded: set[int] = set()
        self._lo = self._hi = 0
        self._live_sizes: Counter[int] = Counter()
        self._min_heap: list[int] = []
        self._max_heap: list[int] = []

    def active(self, key: str) -> tuple[str, int] | None:
        """(raw path, size) of the active file with this key, or None."""
        if key in self._touched:
            return self._live.get(key)
        found = self._base.entries.get(key)
        return None if found is None else found[1:]

    def add(self, key: str, raw: str, size: int) -> None:
        self.remove(key)
        self._live[key] = (raw, size)
        self._count(raw, size, +1)
        self._live_sizes[size] += 1
        heapq.heappush(self._min_heap, size)
        heapq.heappush(self._max_heap, -size)

    def remove(self, key: str) -> bool:
        """Deactivate `key`; False when it was not active."""
        was_live = key in self._touched
        prev = self.active(key)
        if not was_live:
            self._touched.add(key)
            found = self._base.entries.get(key)
            if found is not None:
                self._superseded.add(found[0])
        if prev is None:
            return False
        if was_live:
            del self._live[key]
            self._live_sizes[prev[1]] -= 1
        self._count(prev[0], prev[1], -1)
        return True

    def _count(self, raw: str, size: int, sign: int) -> None:
        self.num_files += sign
        self.size_bytes += sign * size
        self.small_files += sign * (size < self.threshold)
        counts = self._base.path_counts
        before = counts[raw]
        counts[raw] = before + sign
        if self.distinct_paths is not None and (before == 0 or before + sign == 0):
            self.distinct_paths += sign

    def _base_extreme(self, rows: list[tuple[int, int]], pos: int) -> tuple[int | None, int]:
        """The first size among `rows` whose row no action superseded, and the pointer to it."""
        while pos < len(rows) and rows[pos][0] in self._superseded:
            pos += 1
        return (rows[pos][1] if pos < len(rows) else None), pos

    def _live_top(self, heap: list[int], sign: int) -> int | None:
        while heap and self._live_sizes[sign * heap[0]] <= 0:
            heapq.heappop(heap)
        return sign * heap[0] if heap else None

    def summary(self) -> FileSummary:
        lo, self._lo = self._base_extreme(self._base.smallest, self._lo)
        hi, self._hi = self._base_extreme(self._base.largest, self._hi)
        live_lo, live_hi = self._live_top(self._min_heap, 1), self._live_top(self._max_heap, -1)
        lo = live_lo if lo is None else lo if live_lo is None else min(lo, live_lo)
        hi = live_hi if hi is None else hi if live_hi is None else max(hi, live_hi)
        if self.num_files == 0:
            lo = hi = None
        return FileSummary(self.threshold, self.num_files, self.size_bytes, lo, hi, self.small_files)
