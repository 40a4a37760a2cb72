"""OPTIMIZE (bin-packing compaction): which files to rewrite, in which bins, and what the commit says (pure).

Spark `OptimizeExecutor`: per partition, candidates sorted by size are packed into bins of at most the
target size; a bin of one file is dropped (rewriting it alone gains nothing) unless its deletion vector hides
more than `max_deleted_rows_ratio` of its rows: Spark drops that bin too, so such a file is never purged
(delta-io/delta #5781); here it is rewritten, as REORG would.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..errors import InvalidArgumentError, check_int
from .actions import AddFile
from .schema import HIVE_DEFAULT_PARTITION
from .table_properties import DEFAULT_SMALL_FILE_BYTES

#: When the table sets no `delta.targetFileSize`: delta-rs's default (100 MiB, `DEFAULT_TARGET_FILE_SIZE` in
#: its `table/config.rs`), not Delta Spark's `optimize.maxFileSize` (1 GiB): the local engine holds a bin in
#: a worker's memory, and at 1 GiB a ZORDER of a partition under 2 GiB writes one file and skips nothing.
DEFAULT_TARGET_SIZE = 100 * 1024 * 1024
TARGET_FILE_SIZE = "delta.targetFileSize"
DEFAULT_MIN_NUM_FILES = 2
#: Spark `spark.databricks.delta.optimize.maxDeletedRowsRatio`.
DEFAULT_MAX_DELETED_ROWS_RATIO = 0.05
#: `DEFAULT_SMALL_FILE_BYTES` in the MiB the command layer takes (`small_file_mb`).
DEFAULT_SMALL_FILE_MB = DEFAULT_SMALL_FILE_BYTES / 2**20

_SIZE = re.compile(r"^\s*(\d+)\s*(b|k|kb|kib|m|mb|mib|g|gb|gib|t|tb|tib)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


def parse_size(text: str, *, argument: str = TARGET_FILE_SIZE) -> int:
    """A byte count as table properties spell it: `134217728`, `128mb`, `1g`..."""
    m = _SIZE.match(str(text))
    if not m:
        raise InvalidArgumentError(f"{argument} must be a byte size such as 268435456 or 256mb, got {text!r}")
    unit = (m.group(2) or "").lower()[:1]
    value = int(m.group(1)) * _UNITS[unit]
    if value <= 0:
        raise InvalidArgumentError(f"{argument} must be positive, got {text!r}", argument=argument)
    return value


def target_file_size(configuration: Mapping[str, str | None], requested: int | None = None) -> int:
    """`requested`, else the table's `delta.targetFileSize`, else `DEFAULT_TARGET_SIZE` (100 MiB)."""
    if requested is not None:
        if isinstance(requested, bool) or not isinstance(requested, int) or requested <= 0:
            raise InvalidArgumentError(
                f"target_size must be a positive integer, got {requested!r}", argument="target_size"
            )
        return requested
    configured = configuration.get(TARGET_FILE_SIZE)
    return DEFAULT_TARGET_SIZE if configured in (None, "") else parse_size(str(configured))


def partition_key(
    partition_values: Mapping[str, str | None] | None,
    partition_columns: Iterable[str],
    physical_names: Mapping[str, str] | None = None,
) -> str:
    """`a=1/b=x` in partition column order ("" when unpartitioned), null as Hive's null partition;
    `physical_names` maps a logical column to its `partition_values` key under column mapping."""
    values, names = partition_values or {}, physical_names or {}
    pairs = [(c, values.get(names.get(c, c))) for c in partition_columns]
    return "/".join(f"{c}={HIVE_DEFAULT_PARTITION if v is None else v}" for c, v in pairs)


def by_partition(
    files: Iterable[AddFile],
    partition_columns: Iterable[str],
    physical_names: Mapping[str, str] | None = None,
) -> list[tuple[str, list[AddFile]]]:
    """`files` grouped by exact `partitionValues`, each group with its `partition_key`, ordered by that key
    (null before a value where two groups share one: null and the string `__HIVE_DEFAULT_PARTITION__`)."""
    groups: dict[tuple[tuple[str, str | None], ...], list[AddFile]] = {}
    for f in files:
        groups.setdefault(tuple(sorted(f.partition_values.items())), []).append(f)
    named = [(partition_key(dict(values), partition_columns, physical_names), values) for values in groups]
    named.sort(key=lambda kv: (kv[0], [(c, v is not None, v or "") for c, v in kv[1]]))
    return [(key, groups[values]) for key, values in named]


def num_records(add: AddFile) -> int | None:
    """`numRecords` from the file's stats, None when unknown."""
    if not add.stats:
        return None
    try:
        value = json.loads(add.stats).get("numRecords")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def expected_rows(files: Iterable[AddFile]) -> int | None:
    """Rows a rewrite of `files` must hold: `numRecords` minus DV cardinality, summed; None when one is unknown."""
    total = 0
    for f in files:
        records = num_records(f)
        if records is None:
            return None
        total += records - (f.deletion_vector.cardinality if f.deletion_vector else 0)
    return total


def deleted_ratio(add: AddFile) -> float | None:
    """The share of the file's rows its deletion vector hides (0 without one); None when `numRecords` is unknown."""
    dv = add.deletion_vector
    if dv is None:
        return 0.0
    records = num_records(add)
    if records is None:
        return None
    return dv.cardinality / records if records else 1.0


def too_many_deleted_rows(add: AddFile, max_deleted_rows_ratio: float) -> bool:
    """Its deletion vector hides more than the ratio of its rows, or it has one and no `numRecords` (Spark
    rewrites those so the new file gets stats)."""
    dv = add.deletion_vector
    if dv is None:
        return False
    records = num_records(add)
    return records is None or (records > 0 and dv.cardinality / records > max_deleted_rows_ratio)


def is_candidate(add: AddFile, target_size: int, max_deleted_rows_ratio: float) -> bool:
    """Small, or with too many rows deleted by its deletion vector (Spark `filterCandidateFileList`)."""
    return add.size < target_size or too_many_deleted_rows(add, max_deleted_rows_ratio)


def keep_bin(files: Sequence[AddFile], max_deleted_rows_ratio: float) -> bool:
    """A bin worth rewriting: several files, or one whose deletion vector hides too many rows (#5781)."""
    return len(files) > 1 or (len(files) == 1 and too_many_deleted_rows(files[0], max_deleted_rows_ratio))


@dataclass(frozen=True)
class Bin:
    """Files of one partition to be rewritten together (as one new file, or several of the target size)."""

    partition: str
    partition_values: Mapping[str, str | None]
    files: tuple[AddFile, ...]

    @property
    def num_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def to_dict(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "partition_values": dict(self.partition_values),
            "files": [f.to_json() for f in self.files],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Bin:
        return cls(
            partition=str(d["partition"]),
            partition_values=dict(d["partition_values"]),
            files=tuple(AddFile.from_json(f) for f in d["files"]),
        )


@dataclass
class OptimizePlan:
    """The bins of one OPTIMIZE at one version, and what they amount to per partition."""

    table: str | None
    version: int
    target_size: int
    min_num_files: int
    predicate: str | None
    bins: list[Bin] = field(default_factory=list)
    #: partitions skipped by `min_small_file_ratio`: key -> their small-file ratio
    skipped_partitions: dict[str, float] = field(default_factory=dict)
    #: bins a `max_files`/`max_bytes` budget left for a later run (`within_budget`)
    over_budget: list[Bin] = field(default_factory=list)

    @property
    def num_files(self) -> int:
        return sum(len(b.files) for b in self.bins)

    @property
    def num_bytes(self) -> int:
        return sum(b.num_bytes for b in self.bins)

    def partitions(self) -> dict[str, dict[str, int]]:
        """Per partition: files and bytes to rewrite, and the files expected out (one per bin; a bin whose
        rows encode past the target size rolls over into more)."""
        out: dict[str, dict[str, int]] = {}
        for b in self.bins:
            p = out.setdefault(b.partition, {"files": 0, "bytes": 0, "expected_output_files": 0})
            p["files"] += len(b.files)
            p["bytes"] += b.num_bytes
            p["expected_output_files"] += 1
        return dict(sorted(out.items()))

    def summary(self) -> dict[str, Any]:
        """The plan without its file list (what a dry run reports)."""
        return {
            "table": self.table,
            "version": self.version,
            "target_size": self.target_size,
            "min_num_files": self.min_num_files,
            "predicate": self.predicate,
            "num_bins": len(self.bins),
            "num_files": self.num_files,
            "bytes": self.num_bytes,
            "partitions": self.partitions(),
            "skipped_partitions": dict(sorted(self.skipped_partitions.items())),
            "num_bins_over_budget": len(self.over_budget),
            "num_files_over_budget": sum(len(b.files) for b in self.over_budget),
            "bytes_over_budget": sum(b.num_bytes for b in self.over_budget),
            "partitions_over_budget": sorted({b.partition for b in self.over_budget}),
        }


def plan_optimize(
    files: Iterable[AddFile],
    partition_columns: Sequence[str],
    *,
    table: str | None,
    version: int,
    target_size: int,
    min_num_files: int = DEFAULT_MIN_NUM_FILES,
    max_deleted_rows_ratio: float = DEFAULT_MAX_DELETED_ROWS_RATIO,
    min_small_file_ratio: float | None = None,
    small_file_bytes: int = DEFAULT_SMALL_FILE_BYTES,
    predicate: str | None = None,
    physical_names: Mapping[str, str] | None = None,
    max_files: int | None = None,
    max_bytes: int | None = None,
) -> OptimizePlan:
    """Bins of the candidates among `files` (active files the predicate kept), grouped by exact
    `partitionValues`; a partition with fewer than `min_num_files` candidates (none of them with too many
    deleted rows), or (`min_small_file_ratio`) too small a share of files under `small_file_bytes`, is left alone.
    With a budget (`max_files` input files, `max_bytes` input bytes), the bins that remove the most files per
    byte read come first (`compaction_value`), taken by `within_budget`; the rest are `over_budget`."""
    if isinstance(min_num_files, bool) or not isinstance(min_num_files, int) or min_num_files < 1:
        raise InvalidArgumentError(
            f"min_num_files must be an integer >= 1, got {min_num_files!r}", argument="min_num_files"
        )
    if min_small_file_ratio is not None and not 0 <= min_small_file_ratio <= 1:
        raise InvalidArgumentError(
            f"min_small_file_ratio must be between 0 and 1, got {min_small_file_ratio!r}",
            argument="min_small_file_ratio",
        )
    plan = OptimizePlan(table, version, target_size, min_num_files, predicate)
    for key, members in by_partition(files, partition_columns, physical_names):
        if min_small_file_ratio is not None:
            ratio = sum(f.size < small_file_bytes for f in members) / len(members)
            if ratio < min_small_file_ratio:
                plan.skipped_partitions[key] = round(ratio, 6)
                continue
        candidates = [f for f in members if is_candidate(f, target_size, max_deleted_rows_ratio)]
        purging = any(too_many_deleted_rows(f, max_deleted_rows_ratio) for f in candidates)
        if len(candidates) < min_num_files and not purging:
            continue
        values = dict(candidates[0].partition_values)
        bins = pack(candidates, target_size)
        plan.bins.extend(Bin(key, values, tuple(b)) for b in bins if keep_bin(b, max_deleted_rows_ratio))
    plan.bins, plan.over_budget = within_budget(
        plan.bins, compaction_value, max_files=max_files, max_bytes=max_bytes, table=table
    )
    return plan


def compaction_value(b: Bin) -> float:
    """What compacting `b` is worth per byte read: the files it removes (inputs less its one output; a
    file alone in its bin counts its deleted-rows share instead: #5781's purge) per input byte."""
    removed = len(b.files) - 1
    if not removed:
        ratio = deleted_ratio(b.files[0])
        removed = 1.0 if ratio is None else ratio
    return removed / max(1, b.num_bytes)


def within_budget(
    bins: Sequence[Bin],
    value: Callable[[Bin], float],
    *,
    max_files: int | None = None,
    max_bytes: int | None = None,
    table: str | None = None,
) -> tuple[list[Bin], list[Bin]]:
    """The budget rule of every rewriting operation (OPTIMIZE, Z-ORDER, PURGE): without a budget every bin,
    in its order; with one, the bins ranked by `value` (most first; ties keep their order), each taken when
    it still fits in `max_files` input files and `max_bytes` input bytes, the first always (so a run
    progresses). Returns (taken, over budget), each in rank order."""
    for name, limit in (("max_files", max_files), ("max_bytes", max_bytes)):
        if limit is not None:
            check_int(limit, name, minimum=1, table=table)
    if max_files is None and max_bytes is None:
        return list(bins), []
    taken: list[Bin] = []
    over: list[Bin] = []
    files = size = 0
    for b in sorted(bins, key=value, reverse=True):
        fits = (max_files is None or files + len(b.files) <= max_files) and (
            max_bytes is None or size + b.num_bytes <= max_bytes
        )
        if taken and not fits:
            over.append(b)
            continue
        taken.append(b)
        files, size = files + len(b.files), size + b.num_bytes
    return taken, over


T = TypeVar("T")


def next_fit(items: Iterable[T], size: Callable[[T], int], max_size: int) -> list[list[T]]:
    """Consecutive items in groups of at most `max_size` (an item over it is a group of its own)."""
    groups: list[list[T]] = []
    current: list[T] = []
    total = 0
    for item in items:
        if current and total + size(item) > max_size:
            groups.append(current)
            current, total = [], 0
        current.append(item)
        total += size(item)
    if current:
        groups.append(current)
    return groups


def pack(files: Sequence[AddFile], max_bin_size: int) -> list[list[AddFile]]:
    """Files sorted by size (then path, for a stable plan), a new bin whenever the next would overflow."""
    return next_fit(sorted(files, key=lambda f: (f.size, f.path)), lambda f: f.size, max_bin_size)


def commit_batches(bins: Sequence[Bin], max_commit_bytes: int | None) -> list[list[Bin]]:
    """Consecutive bins in commits of at most `max_commit_bytes` input bytes (one commit when None)."""
    if max_commit_bytes is None:
        return [list(bins)] if bins else []
    return next_fit(bins, lambda b: b.num_bytes, max_commit_bytes)


def operation_parameters(predicates: Sequence[str]) -> dict[str, Any]:
    """commitInfo.operationParameters of an OPTIMIZE (Spark `DeltaOperations.Optimize`)."""
    return {"predicate": json.dumps(list(predicates)), "zOrderBy": "[]", "clusterBy": "[]", "auto": False}


def _percentile(sorted_sizes: Sequence[int], p: float) -> int:
    """Nearest-rank percentile of a sorted list (Spark `FileSizeStatsWithHistogram`)."""
    index = min(len(sorted_sizes) - 1, max(0, round(p * (len(sorted_sizes) - 1))))
    return sorted_sizes[index]


def operation_metrics(removed: Sequence[AddFile], added: Sequence[AddFile]) -> dict[str, int]:
    """commitInfo.operationMetrics of an OPTIMIZE commit (Spark `OptimizeExecutor.createMetrics`)."""
    sizes = sorted(a.size for a in added)
    dvs = [f.deletion_vector for f in removed if f.deletion_vector is not None]
    out = {
        "numAddedFiles": len(added),
        "numRemovedFiles": len(removed),
        "numAddedBytes": sum(sizes),
        "numRemovedBytes": sum(f.size for f in removed),
        "numDeletionVectorsRemoved": len(dvs),
        "numDeletionVectorRowsRemoved": sum(d.cardinality for d in dvs),
        "numDeletionVectorBytesRemoved": sum(d.size_in_bytes for d in dvs),
    }
    if sizes:
        out |= {
            "minFileSize": sizes[0],
            "p25FileSize": _percentile(sizes, 0.25),
            "p50FileSize": _percentile(sizes, 0.5),
            "p75FileSize": _percentile(sizes, 0.75),
            "maxFileSize": sizes[-1],
        }
    return out
