"""A table's health from its log alone, as values: what the lake autopilot plans from.

Everything here comes from the active files' add actions (size, partition, `numRecords` stats, the deletion
vector's `cardinality`), the tombstones (PROTOCOL.md "Add File and Remove File": a removed file may be deleted
once its `deletionTimestamp` is older than `delta.deletedFileRetentionDuration`), the log listing and the
commitInfo of the commits read; no data file is read.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

from .lake_policy import TablePolicy

#: Upper bounds (bytes, exclusive) of the size histogram's buckets; the last bucket is open.
SIZE_BUCKETS: tuple[tuple[str, int], ...] = (
    ("<1MiB", 2**20),
    ("1-8MiB", 8 * 2**20),
    ("8-32MiB", 32 * 2**20),
    ("32-128MiB", 128 * 2**20),
    ("128-512MiB", 512 * 2**20),
    ("512MiB-1GiB", 2**30),
    (">=1GiB", 2**62),
)


class ActiveFile(NamedTuple):
    """What health needs of one active file; `records` None when it has no `numRecords` stat; `values` its
    partition values as logged, by logical column."""

    partition: str
    size: int
    records: int | None
    dv_rows: int
    values: tuple[tuple[str, str | None], ...] = ()


class Tombstone(NamedTuple):
    partition: str
    size: int
    deletion_timestamp: int


@dataclass
class PartitionHealth:
    """One partition's files (`partition` is `a=1/b=x`, "" for an unpartitioned table)."""

    partition: str
    #: Partition values as logged, by logical column.
    values: tuple[tuple[str, str | None], ...] = ()
    num_files: int = 0
    bytes: int = 0
    small_files: int = 0
    small_bytes: int = 0
    #: Files with more rows deleted by their deletion vector than the ratio (any size).
    dv_heavy_files: int = 0
    #: What an OPTIMIZE of the partition rewrites (`protocol.optimize.is_candidate`, as `maintenance.optimize`
    #: selects: under the target size, or over the deleted-rows ratio): files, bytes, rows and rows DVs hide.
    rewrite_files: int = 0
    rewrite_bytes: int = 0
    #: None (as `rows` and `files_without_stats`) when the scan did not read the files' statistics.
    rewrite_rows: int | None = 0
    rewrite_dv_rows: int = 0
    rows: int | None = 0
    dv_rows: int = 0
    files_without_stats: int | None = 0
    histogram: dict[str, int] = field(default_factory=dict)
    tombstone_files_now: int = 0
    tombstone_bytes_now: int = 0
    tombstone_files_later: int = 0
    tombstone_bytes_later: int = 0
    #: Whether a data-changing commit touched it since the last OPTIMIZE that covered it (True when unknown).
    changed_since_optimize: bool = True

    @property
    def small_file_share(self) -> float:
        return self.small_files / self.num_files if self.num_files else 0.0


#: The counts that need the files' `numRecords` statistics.
UNREAD_WITHOUT_STATS = frozenset({"rows", "rewrite_rows", "files_without_stats"})


def summarize_partitions(
    files: Iterable[ActiveFile],
    tombstones: Iterable[Tombstone],
    *,
    small_file_bytes: int,
    target_file_size: int,
    max_deleted_rows_ratio: float,
    retention_cutoff_ms: int,
) -> dict[str, PartitionHealth]:
    """Per-partition counts of `ActiveFile`s: `summarize_columns` (the one rule) over their columns. A
    tombstone deleted at or before `retention_cutoff_ms` is reclaimable now."""
    files = list(files)
    code_of: dict[str, int] = {}
    partitions: list[tuple[str, tuple[tuple[str, str | None], ...]]] = []
    for f in files:
        if f.partition not in code_of:
            code_of[f.partition] = len(partitions)
            partitions.append((f.partition, f.values))
    return summarize_columns(
        [code_of[f.partition] for f in files],
        partitions,
        [f.size for f in files],
        [-1 if f.records is None else f.records for f in files],
        [f.dv_rows for f in files],
        tombstones,
        small_file_bytes=small_file_bytes,
        target_file_size=target_file_size,
        max_deleted_rows_ratio=max_deleted_rows_ratio,
        retention_cutoff_ms=retention_cutoff_ms,
    )


def summarize_columns(
    codes: Any,
    partitions: Sequence[tuple[str, tuple[tuple[str, str | None], ...]]],
    sizes: Any,
    records: Any | None,
    dv_rows: Any,
    tombstones: Iterable[Tombstone],
    *,
    small_file_bytes: int,
    target_file_size: int,
    max_deleted_rows_ratio: float,
    retention_cutoff_ms: int,
) -> dict[str, PartitionHealth]:
    """Per-partition counts over columns (numpy arrays, one entry per active file): `codes` index
    `partitions` ((key, values) of each), `records` is -1 where a file has no `numRecords`, None when the
    statistics were not read (`rows`, `rewrite_rows` and `files_without_stats` are then None; a file with a
    deletion vector counts as one without stats, so the caller reads them when any file has one). The same
    counts, vectorized: a table of 10k files is summed in a few bincounts instead of 10k Python steps."""
    import numpy as np

    k = len(partitions)
    sizes = np.asarray(sizes, dtype=np.int64)
    unknown = records is None
    records = np.full(len(sizes), -1, dtype=np.int64) if records is None else np.asarray(records, dtype=np.int64)
    dv_rows = np.asarray(dv_rows, dtype=np.int64)
    codes = np.asarray(codes, dtype=np.int64)
    has_stats = records >= 0
    dv_heavy = (dv_rows > 0) & (~has_stats | (dv_rows > max_deleted_rows_ratio * np.where(has_stats, records, 0)))
    small = sizes < small_file_bytes
    rewrite = (sizes < target_file_size) | dv_heavy
    live_records = np.where(has_stats, records, 0)

    def total(weights: Any = None) -> list[int]:
        return [int(x) for x in np.rint(np.bincount(codes, weights=weights, minlength=k))]

    files = total()
    columns = {
        "bytes": total(sizes),
        "dv_rows": total(dv_rows),
        "files_without_stats": total(~has_stats),
        "rows": total(live_records),
        "dv_heavy_files": total(dv_heavy),
        "small_files": total(small),
        "small_bytes": total(np.where(small, sizes, 0)),
        "rewrite_files": total(rewrite),
        "rewrite_bytes": total(np.where(rewrite, sizes, 0)),
        "rewrite_rows": total(np.where(rewrite, live_records, 0)),
        "rewrite_dv_rows": total(np.where(rewrite, dv_rows, 0)),
    }
    bounds = np.array([bound for _, bound in SIZE_BUCKETS[:-1]], dtype=np.int64)
    buckets = np.searchsorted(bounds, sizes, side="right")
    hist = np.bincount(codes * len(SIZE_BUCKETS) + buckets, minlength=k * len(SIZE_BUCKETS))
    out: dict[str, PartitionHealth] = {}
    for i, (key, values) in enumerate(partitions):
        if not files[i]:
            continue
        p = out.setdefault(key, PartitionHealth(key, values))
        p.num_files += files[i]
        for name, sums in columns.items():
            if unknown and name in UNREAD_WITHOUT_STATS:
                setattr(p, name, None)
            else:
                setattr(p, name, getattr(p, name) + sums[i])
        for b, (label, _) in enumerate(SIZE_BUCKETS):
            n = int(hist[i * len(SIZE_BUCKETS) + b])
            if n:
                p.histogram[label] = p.histogram.get(label, 0) + n
    for t in tombstones:
        p = out.get(t.partition) or out.setdefault(t.partition, PartitionHealth(t.partition))
        if t.deletion_timestamp <= retention_cutoff_ms:
            p.tombstone_files_now += 1
            p.tombstone_bytes_now += t.size
        else:
            p.tombstone_files_later += 1
            p.tombstone_bytes_later += t.size
    return out


#: The partition counts `TableHealth.to_dict` totals, in its order.
_TOTALS = """num_files bytes small_files rows dv_rows files_without_stats tombstone_files_now tombstone_bytes_now
tombstone_files_later tombstone_bytes_later""".split()


@dataclass
class LastOperation:
    version: int
    timestamp: int
    operation: str


@dataclass
class TableHealth:
    """One table's health; `partitions` keyed by partition text."""

    table: str
    version: int
    partition_columns: tuple[str, ...]
    configuration: dict[str, str | None]
    protocol: dict[str, Any]
    #: Lake operation -> None when this library may run it on the table, else the refusal (error class and
    #: message naming the feature).
    refused: dict[str, dict[str, Any] | None]
    partitions: dict[str, PartitionHealth]
    #: When the last tombstone now inside retention becomes reclaimable (ms), None when none is.
    tombstones_all_reclaimable_at: int | None
    checkpoint_version: int | None
    commits_since_checkpoint: int
    #: Bytes of the checkpoint and commits a snapshot load reads.
    segment_bytes: int
    log_files: int
    log_files_past_retention: int
    log_bytes_past_retention: int
    #: Commits per day over the commits listed in the last `write_rate_window_ms`.
    write_rate_per_day: float
    last_optimize: LastOperation | None
    last_vacuum: LastOperation | None
    last_checkpoint_timestamp: int | None
    scanned_at: int
    #: The thresholds these numbers were counted with (small files, retention).
    policy: TablePolicy = field(default_factory=TablePolicy)
    #: Untracked files (`files`, `bytes`, `reclaimable_files`, `reclaimable_bytes`: older than the tombstone
    #: retention) when a data listing was asked for, else None.
    untracked: dict[str, int] | None = None
    requests: dict[str, int] = field(default_factory=dict)

    def _sum(self, name: str) -> Any:
        """The partitions' total of `name`; None when a partition's is unknown (statistics not read)."""
        values = [getattr(p, name) for p in self.partitions.values()]
        return None if None in values else sum(values)

    @property
    def num_files(self) -> int:
        return self._sum("num_files")

    @property
    def bytes(self) -> int:
        return self._sum("bytes")

    @property
    def small_file_share(self) -> float:
        n = self.num_files
        return self._sum("small_files") / n if n else 0.0

    @property
    def stats_missing_share(self) -> float | None:
        """None when the scan did not read the files' statistics."""
        n, missing = self.num_files, self._sum("files_without_stats")
        return None if missing is None else missing / n if n else 0.0

    @property
    def histogram(self) -> dict[str, int]:
        out: Counter[str] = Counter()
        for p in self.partitions.values():
            out.update(p.histogram)
        return {label: out[label] for label, _ in SIZE_BUCKETS if label in out}

    def allows(self, operation: str) -> bool:
        return self.refused.get(operation) is None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON: the totals, then every field (partitions as a list)."""
        out = asdict(self)
        out["partitions"] = [{**asdict(p), "small_file_share": p.small_file_share} for p in self.partitions.values()]
        out["partition_columns"] = list(self.partition_columns)
        out["policy"] = self.policy.to_dict()
        totals = {k: self._sum(k) for k in _TOTALS}
        totals.update(
            small_file_share=self.small_file_share,
            stats_missing_share=self.stats_missing_share,
            histogram=self.histogram,
        )
        return {"table": self.table, "totals": totals, **out}
