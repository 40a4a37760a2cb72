"""How much memory a local replay needs, estimated before any state is read: a load over
`LocalEngine(memory_limit_bytes=...)` fails first with a `ResourceLimitError` naming the Spark engine,
rather than swap the machine.

The estimate is `CHECKPOINT_FACTOR` times the uncompressed checkpoint column bytes a load decodes (from
the Parquet footers; stats excluded) plus `JSON_FACTOR` times the JSON bytes. Measured on `bench/` L
(1.03M files): the Arrow pool peaked at 2.7x the decoded columns, replayed commits at 1.9-2.0x their JSON.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence

from ..errors import ResourceLimitError
from ..storage import LogStore

CHECKPOINT_FACTOR = 3
JSON_FACTOR = 4
#: Uncompressed bytes per Parquet file byte assumed when skipping footers: far beyond what checkpoints
#: show (bench L: 0.6x; 1M sequential paths in zstd: 52x), so only a limit orders of magnitude above skips.
MAX_PARQUET_EXPANSION = 1000
#: The share of this process's memory (physical, or its cgroup's limit) the default limit allows.
DEFAULT_SHARE = 0.5

_LAZY_LEAVES = (("add", "stats"), ("add", "stats_parsed"))
_FILE_ACTIONS = ("add", "remove")


def decoded_bytes(sizes: Mapping[tuple[str, ...], int], non_file: Iterable[str], *, with_stats: bool = False) -> int:
    """Uncompressed bytes of the leaf columns a load decodes, from a map of leaf column path to bytes."""
    tops = {*_FILE_ACTIONS, *non_file}
    return sum(s for p, s in sizes.items() if p[0] in tops and (with_stats or p[:2] not in _LAZY_LEAVES))


def estimate(parquet_decoded: int, json_bytes: int) -> int:
    """Bytes a replay holds at its peak for that much decoded checkpoint and JSON."""
    return CHECKPOINT_FACTOR * parquet_decoded + JSON_FACTOR * json_bytes


def over_limit(table: str, version: int, needed: int, limit: int, *, file: str | None = None) -> ResourceLimitError:
    mib = 1024 * 1024
    return ResourceLimitError(
        f"Replaying this log in this process needs about {needed / mib:,.0f} MiB, over the local engine's "
        f"memory limit of {limit / mib:,.0f} MiB (LocalEngine(memory_limit_bytes=...)). Use the Spark engine "
        "for a log this size (engine='spark' on the operators, --engine spark in the CLI, "
        "SparkEngine in the library), or raise the limit",
        table=table,
        version=version,
        file=file,
    )


CGROUP_LIMIT_FILES = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")  # v2, v1


def cgroup_limit(files: Iterable[str] = CGROUP_LIMIT_FILES) -> int | None:
    """This process's cgroup memory limit, if it has one."""
    for path in files:
        try:
            with open(path) as fh:
                raw = fh.read().strip()
        except OSError:
            continue
        if raw.isdigit() and int(raw) < 1 << 60:  # "max" or a huge number: no limit
            return int(raw)
    return None


def available_memory() -> int | None:
    """Memory this process may use: physical memory, or its cgroup's limit when lower."""
    try:
        physical: int | None = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        physical = None
    cgroup = cgroup_limit()
    known = [m for m in (physical, cgroup) if m]
    return min(known) if known else None


def default_memory_limit() -> int | None:
    """`DEFAULT_SHARE` of `available_memory()`; None (no limit) where it cannot be known."""
    memory = available_memory()
    return None if memory is None else int(memory * DEFAULT_SHARE)


def footer_column_sizes(fh: object) -> dict[tuple[str, ...], int]:
    """Uncompressed bytes per leaf column path of an open Parquet file, from its footer alone."""
    import pyarrow.parquet as pq

    meta = pq.read_metadata(fh)
    sizes: dict[tuple[str, ...], int] = {}
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for c in range(group.num_columns):
            column = group.column(c)
            path = tuple(column.path_in_schema.split("."))
            sizes[path] = sizes.get(path, 0) + column.total_uncompressed_size
    return sizes


class MemoryBudget:
    """One load's check against the memory limit: commits and checkpoint parts, then V2 sidecars as found.
    A footer that cannot be read is left out (the read itself then reports the file)."""

    def __init__(self, limit: int, table: str, version: int, store: LogStore, non_file: Sequence[str]) -> None:
        self.limit = limit
        self.table = table
        self.version = version
        self.store = store
        self.non_file = non_file
        self.json_bytes = 0
        self.parquet: dict[str, int | None] = {}  # path -> file size (None: unknown)
        self.decoded: dict[str, int] = {}  # path -> decoded column bytes, once its footer was read

    def add(self, parquet: Sequence[tuple[str, int | None]], json_bytes: int = 0, *, file: str | None = None) -> None:
        """Count more files; raises `ResourceLimitError` when the load would exceed the limit."""
        self.json_bytes += json_bytes
        self.parquet.update(parquet)
        sizes = list(self.parquet.values())
        if None not in sizes:  # an estimate no footer can exceed, from file sizes alone
            if estimate(MAX_PARQUET_EXPANSION * sum(s or 0 for s in sizes), self.json_bytes) <= self.limit:
                return
        for path in self.parquet:
            if path not in self.decoded:
                got = self._footer_bytes(path)
                if got is not None:
                    self.decoded[path] = got
        needed = estimate(sum(self.decoded.values()), self.json_bytes)
        if needed > self.limit:
            raise over_limit(self.table, self.version, needed, self.limit, file=file)

    def sidecars(self, sidecars: Sequence[tuple[str, int | None, str]]) -> None:
        """Count a V2 checkpoint's sidecars (path, size, name) before they are read."""
        self.add([(path, size) for path, size, _ in sidecars], file=sidecars[0][2] if len(sidecars) == 1 else None)

    def _footer_bytes(self, path: str) -> int | None:
        """Decoded column bytes from the file's footer; None when it cannot be read."""
        import pyarrow as pa

        try:
            with self.store.open(path) as fh:
                sizes = footer_column_sizes(fh)
        except (OSError, ValueError, pa.ArrowException):
            return None
        return decoded_bytes(sizes, self.non_file)
