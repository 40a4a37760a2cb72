"""Statistics backfill rules, pure: which active files need their `add.stats` recomputed, and the commit's
parameters and metrics (Delta Spark `StatisticsCollection.recompute`, committed as `COMPUTE STATS`).

A file needs stats when it has none or no `numRecords` (`missing`), or when a column the table now names
for data skipping (`delta.dataSkippingStatsColumns`, else the first `delta.dataSkippingNumIndexedCols`
leaves) and eligible for min/max has no statistic at all (`stale`: collected for other columns, e.g. before
the property changed or the column was added). Only min/max-eligible columns count: writers disagree on the
null counts of binary, boolean, array and map columns (delta-rs writes none), which would otherwise make
every file of such tables stale. Statistics for extra columns are harmless and never make a file stale.
With `tighten`, files whose stats are wide (`tightBounds=false`, left by deletion vectors) are included
(`wide`): recomputed stats are tight (PROTOCOL.md "Per-file Statistics").
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .actions import AddFile
from .stats import StatsColumn

COMPUTE_STATS_OPERATION = "COMPUTE STATS"
MISSING, STALE, WIDE = "missing", "stale", "wide"
REASONS = (MISSING, STALE, WIDE)
#: Files a plan's summary lists (the counts cover all; a dry run's JSON stays small on a huge table).
LISTED_FILES = 1000


def _covered(stats: Mapping[str, Any], path: Sequence[str]) -> bool:
    """Whether `stats` holds a null count, min or max for the column at `path` (names compared casefolded)."""
    for key in ("nullCount", "minValues", "maxValues"):
        node: Any = stats.get(key)
        for name in path:
            if not isinstance(node, Mapping):
                node = None
                break
            folded = name.casefold()
            node = next((v for k, v in node.items() if k.casefold() == folded), None)
        if node is not None and not isinstance(node, Mapping):
            return True
    return False


def stats_reason(
    stats: Mapping[str, Any] | None, columns: Sequence[StatsColumn], *, tighten: bool = False
) -> str | None:
    """Why a file with parsed `stats` needs them recomputed (`MISSING`, `STALE`, `WIDE`), None when not.
    `columns`: what the table now collects (`protocol.stats.stats_columns`)."""
    if not isinstance(stats, Mapping):
        return MISSING
    num_records = stats.get("numRecords")
    if not isinstance(num_records, int) or isinstance(num_records, bool):
        return MISSING
    # A file of no rows has no per-column stats to judge (writers leave its null counts out).
    if num_records > 0 and any(c.min_max and not _covered(stats, c.physical_path) for c in columns):
        return STALE
    if tighten and stats.get("tightBounds") is False:
        return WIDE
    return None


def _parsed(add: AddFile) -> Mapping[str, Any] | None:
    try:
        stats = add.parsed_stats()
    except ValueError:  # unparsable stats are as good as none
        return None
    return stats if isinstance(stats, Mapping) else None


@dataclass(frozen=True)
class PlannedFile:
    """An active file whose stats the backfill recomputes, and why."""

    add: AddFile
    reason: str


@dataclass
class StatsBackfillPlan:
    """The files of `table` at `version` that need stats, within the budget; `num_over_budget` files
    (`bytes_over_budget` bytes) more need them and are left for a later run."""

    table: str
    version: int
    num_files_checked: int = 0
    files: list[PlannedFile] = field(default_factory=list)
    num_over_budget: int = 0
    bytes_over_budget: int = 0
    predicate: str | None = None

    @property
    def num_bytes(self) -> int:
        return sum(f.add.size for f in self.files)

    def counts(self) -> dict[str, int]:
        return dict.fromkeys(REASONS, 0) | Counter(f.reason for f in self.files)

    def summary(self, listed: int = LISTED_FILES) -> dict[str, Any]:
        """The plan as JSON: counts of all files, and the first `listed` files with their reason."""
        return {
            "table": self.table,
            "read_version": self.version,
            "predicate": self.predicate,
            "num_files_checked": self.num_files_checked,
            "num_files": len(self.files),
            "num_bytes": self.num_bytes,
            "by_reason": self.counts(),
            "num_files_over_budget": self.num_over_budget,
            "bytes_over_budget": self.bytes_over_budget,
            "files": [{"path": f.add.path, "reason": f.reason, "size": f.add.size} for f in self.files[:listed]],
            "files_listed": min(listed, len(self.files)),
        }


def plan_stats_backfill(
    files: Iterable[AddFile],
    columns: Sequence[StatsColumn],
    *,
    table: str,
    version: int,
    tighten: bool = False,
    max_files: int | None = None,
    max_bytes: int | None = None,
    predicate: str | None = None,
) -> StatsBackfillPlan:
    """The files among `files` that need stats, in the given order, the first ones up to `max_files` files
    and `max_bytes` bytes read (a first file larger than `max_bytes` is still taken, so a run always
    progresses); the rest are counted as over budget."""
    plan = StatsBackfillPlan(table, version, predicate=predicate)
    taken_bytes = 0
    for add in files:
        plan.num_files_checked += 1
        reason = stats_reason(_parsed(add), columns, tighten=tighten)
        if reason is None:
            continue
        over_files = max_files is not None and len(plan.files) >= max_files
        over_bytes = max_bytes is not None and plan.files and taken_bytes + add.size > max_bytes
        if over_files or over_bytes:
            plan.num_over_budget += 1
            plan.bytes_over_budget += add.size
            continue
        plan.files.append(PlannedFile(add, reason))
        taken_bytes += add.size
    return plan


def operation_parameters(predicates: Sequence[str]) -> dict[str, Any]:
    """commitInfo.operationParameters of a `COMPUTE STATS` commit (Spark `DeltaOperations.ComputeStats`: its
    partition predicates as SQL, `["true"]` for the whole table)."""
    return {"predicate": json.dumps(list(predicates) or ["true"])}


def operation_metrics(committed: Sequence[PlannedFile], *, dropped: int, over_budget: int) -> dict[str, int]:
    """commitInfo.operationMetrics of a `COMPUTE STATS` commit (Spark records none; these say what was done:
    files re-added by reason, files dropped at re-validation, files left over the budget)."""
    reasons = [f.reason for f in committed]
    return {
        "numFilesRecomputed": len(committed),
        "numBytesRead": sum(f.add.size for f in committed),
        "numFilesMissingStats": reasons.count(MISSING),
        "numFilesStaleStats": reasons.count(STALE),
        "numFilesWideStats": reasons.count(WIDE),
        "numDeletionVectorFiles": sum(1 for f in committed if f.add.deletion_vector is not None),
        "numFilesDropped": dropped,
        "numFilesOverBudget": over_budget,
    }
