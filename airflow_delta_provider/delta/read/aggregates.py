"""Mergeable summaries of a snapshot's files and tombstones: built row by row (`add`) and combined with
`merge`, locally or per Spark partition. Standard library only: executors import it from the shipped zip.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ..protocol.optimize import partition_key
from ..protocol.table_properties import DEFAULT_SMALL_FILE_BYTES


def _min(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def _max(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


@dataclass
class FileSummary:
    """Counts and sizes of active files."""

    small_file_bytes: int = DEFAULT_SMALL_FILE_BYTES
    num_files: int = 0
    size_bytes: int = 0
    min_size: int | None = None
    max_size: int | None = None
    small_files: int = 0

    def add(self, size: int) -> None:
        self.num_files += 1
        self.size_bytes += size
        self.min_size = _min(self.min_size, size)
        self.max_size = _max(self.max_size, size)
        if size < self.small_file_bytes:
            self.small_files += 1

    def merge(self, other: FileSummary) -> FileSummary:
        if other.small_file_bytes != self.small_file_bytes:
            raise ValueError("cannot merge file summaries with different small-file thresholds")
        return FileSummary(
            self.small_file_bytes,
            self.num_files + other.num_files,
            self.size_bytes + other.size_bytes,
            _min(self.min_size, other.min_size),
            _max(self.max_size, other.max_size),
            self.small_files + other.small_files,
        )

    @property
    def small_file_ratio(self) -> float:
        return self.small_files / self.num_files if self.num_files else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "num_files": self.num_files,
            "size_bytes": self.size_bytes,
            "min_size": self.min_size,
            "max_size": self.max_size,
            "small_file_bytes": self.small_file_bytes,
            "small_files": self.small_files,
            "small_file_ratio": round(self.small_file_ratio, 6),
        }


@dataclass
class PartitionTombstones:
    """Tombstones of one partition, split at the retention cutoff."""

    retained: int = 0
    expired: int = 0
    retained_bytes: int = 0
    reclaimable_bytes: int = 0
    oldest_deletion_ms: int | None = None
    newest_deletion_ms: int | None = None

    def merge(self, other: PartitionTombstones) -> PartitionTombstones:
        return PartitionTombstones(
            self.retained + other.retained,
            self.expired + other.expired,
            self.retained_bytes + other.retained_bytes,
            self.reclaimable_bytes + other.reclaimable_bytes,
            _min(self.oldest_deletion_ms, other.oldest_deletion_ms),
            _max(self.newest_deletion_ms, other.newest_deletion_ms),
        )

    def count(self, n: int, nbytes: int, deleted_ms: int | None, cutoff_ms: int) -> None:
        """Count `n` tombstones of `nbytes` deleted at `deleted_ms` (None counts as 0: past retention)."""
        if (deleted_ms or 0) <= cutoff_ms:
            self.expired += n
            self.reclaimable_bytes += nbytes
        else:
            self.retained += n
            self.retained_bytes += nbytes
        if deleted_ms is not None:
            self.oldest_deletion_ms = _min(self.oldest_deletion_ms, deleted_ms)
            self.newest_deletion_ms = _max(self.newest_deletion_ms, deleted_ms)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class TombstoneSummary:
    """Tombstones split at `cutoff_ms`: deleted at or before it is past retention (safe for VACUUM). As in
    Delta's VACUUM a missing `deletionTimestamp` counts as 0; a missing `size` as 0 bytes (and is counted)."""

    cutoff_ms: int
    partition_columns: tuple[str, ...] = ()
    removed_without_size: int = 0
    partitions: dict[str, PartitionTombstones] = field(default_factory=dict)

    def add(self, partition_values: Mapping[str, str | None] | None, size: int | None, deleted_ms: int | None) -> None:
        self.removed_without_size += size is None
        key = partition_key(partition_values, self.partition_columns)
        self.bucket(key).count(1, size or 0, deleted_ms, self.cutoff_ms)

    def bucket(self, key: str) -> PartitionTombstones:
        """The tombstones of partition `key` (created empty)."""
        return self.partitions.setdefault(key, PartitionTombstones())

    def merge(self, other: TombstoneSummary) -> TombstoneSummary:
        if (other.cutoff_ms, other.partition_columns) != (self.cutoff_ms, self.partition_columns):
            raise ValueError("cannot merge tombstone summaries with different cutoffs or partition columns")
        parts = dict(self.partitions)
        for key, bucket in other.partitions.items():
            parts[key] = parts[key].merge(bucket) if key in parts else bucket
        return TombstoneSummary(
            self.cutoff_ms, self.partition_columns, self.removed_without_size + other.removed_without_size, parts
        )

    @property
    def num_tombstones(self) -> int:
        return sum(b.retained + b.expired for b in self.partitions.values())

    def to_dict(self) -> dict[str, Any]:
        """Totals and per-partition buckets (sorted by partition key)."""
        total = functools.reduce(PartitionTombstones.merge, self.partitions.values(), PartitionTombstones())
        return {
            "num_tombstones": total.retained + total.expired,
            "retained": total.retained,
            "expired": total.expired,
            "retained_bytes": total.retained_bytes,
            "reclaimable_bytes": total.reclaimable_bytes,
            "removed_without_size": self.removed_without_size,
            "oldest_deletion_ms": total.oldest_deletion_ms,
            "newest_deletion_ms": total.newest_deletion_ms,
            "partitions": {k: self.partitions[k].to_dict() for k in sorted(self.partitions)},
        }


#: Most (partition, deletionTimestamp) groups a `FileDigest` keeps (tombstones share a timestamp per commit).
MAX_DIGEST_GROUPS = 100_000


@dataclass
class TombstoneGroup:
    """Tombstones of one partition deleted at one timestamp."""

    count: int = 0
    size_bytes: int = 0
    without_size: int = 0


@dataclass
class FileDigest:
    """A file state's `FileSummary` and its tombstones grouped by (partition, `deletionTimestamp`), so one
    pass over the files answers any retention cutoff. Past `max_groups` groups it gives up (`complete`
    False) and callers ask the files again.
    """

    files: FileSummary
    partition_columns: tuple[str, ...] = ()
    groups: dict[tuple[str, int | None], TombstoneGroup] = field(default_factory=dict)
    complete: bool = True
    max_groups: int = MAX_DIGEST_GROUPS

    def add_group(self, partition: str, deleted_ms: int | None, count: int, size_bytes: int, without_size: int) -> None:
        """Count `count` tombstones of `partition` deleted at `deleted_ms` (already aggregated)."""
        if not self.complete:
            return
        group = self.groups.get((partition, deleted_ms))
        if group is None:
            if len(self.groups) >= self.max_groups:
                self.complete, self.groups = False, {}
                return
            group = self.groups[(partition, deleted_ms)] = TombstoneGroup()
        group.count += count
        group.size_bytes += size_bytes
        group.without_size += without_size

    def merge(self, other: FileDigest) -> FileDigest:
        if other.partition_columns != self.partition_columns:
            raise ValueError("cannot merge file digests with different partition columns")
        out = FileDigest(self.files.merge(other.files), self.partition_columns, max_groups=self.max_groups)
        for source in (self, other):
            if not source.complete:
                out.complete, out.groups = False, {}
                break
            for (partition, deleted), g in source.groups.items():
                out.add_group(partition, deleted, g.count, g.size_bytes, g.without_size)
        return out

    def tombstone_summary(self, cutoff_ms: int) -> TombstoneSummary:
        """The same `TombstoneSummary` as adding every tombstone row at `cutoff_ms`."""
        if not self.complete:
            raise ValueError("the digest has too many tombstone groups to answer from")
        out = TombstoneSummary(cutoff_ms, self.partition_columns)
        for (partition, deleted), g in self.groups.items():
            out.removed_without_size += g.without_size
            out.bucket(partition).count(g.count, g.size_bytes, deleted, cutoff_ms)
        return out

    def count_tombstones_after(self, cutoff_ms: int) -> int:
        """Tombstones deleted after `cutoff_ms` (a missing timestamp counts as 0)."""
        if not self.complete:
            raise ValueError("the digest has too many tombstone groups to answer from")
        return sum(g.count for (_, deleted), g in self.groups.items() if (deleted or 0) > cutoff_ms)


def digest_file_rows(
    rows: Iterable[dict[str, Any]],
    small_file_bytes: int,
    partition_columns: tuple[str, ...],
    max_groups: int = MAX_DIGEST_GROUPS,
) -> FileDigest:
    """A `FileDigest` of `{"add": {...}}` / `{"remove": {...}}` rows."""
    out = FileDigest(FileSummary(small_file_bytes), partition_columns, max_groups=max_groups)
    for row in rows:
        add = row.get("add")
        if add is not None:
            out.files.add(int(add.get("size") or 0))
            continue
        rm = row.get("remove")
        if rm is not None:
            size, partition = rm.get("size"), partition_key(rm.get("partitionValues"), partition_columns)
            out.add_group(partition, rm.get("deletionTimestamp"), 1, size or 0, int(size is None))
    return out
