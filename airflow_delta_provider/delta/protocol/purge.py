"""REORG TABLE ... APPLY (PURGE): which files to rewrite so the rows their deletion vectors hide are gone (pure).

Delta Spark (`DeltaPurgeOperation`) takes every file whose deletion vector deletes rows, or that has one and no
`numRecords`, and runs OPTIMIZE's packing on them with one-file bins kept; the commit is `REORG` with
`dataChange=false` (PROTOCOL.md "Deletion Vectors": the rows stay deleted, only their bytes go). Here
`min_deleted_ratio` narrows that to files whose vector hides at least that share of their rows (0: Spark's set).
Spark's other REORG selection, files whose footer holds a column the schema dropped, is not made.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidArgumentError, check_number
from .actions import AddFile, canonical_path
from .optimize import Bin, by_partition, deleted_ratio, num_records, pack, within_budget

#: Delta Spark `DeltaOperations.REORG_OPERATION_NAME`.
REORG_OPERATION = "REORG"


def needs_purge(add: AddFile, min_deleted_ratio: float = 0.0) -> bool:
    """A deletion vector that hides rows, at least `min_deleted_ratio` of them (unknown row counts always qualify,
    as in Spark, so the new file gets stats)."""
    dv = add.deletion_vector
    if dv is None:
        return False
    ratio = deleted_ratio(add)
    if ratio is None:
        return True
    return dv.cardinality > 0 and ratio >= min_deleted_ratio


def file_entry(add: AddFile, partition: str) -> dict[str, Any]:
    """One line of the plan a person reviews: where the file is, its bytes and what its deletion vector hides."""
    dv = add.deletion_vector
    ratio = deleted_ratio(add)
    return {
        "path": add.path,
        "partition": partition,
        "size": add.size,
        "num_records": num_records(add),
        "dv_cardinality": dv.cardinality if dv else 0,
        "dv_size_bytes": dv.size_in_bytes if dv else 0,
        "deleted_ratio": None if ratio is None else round(ratio, 6),
    }


@dataclass
class PurgePlan:
    """The files one PURGE rewrites at one version, packed in bins (one new file per bin)."""

    table: str | None
    version: int
    min_deleted_ratio: float
    target_size: int
    predicate: str | None
    bins: list[Bin] = field(default_factory=list)
    #: files of an earlier plan left out at apply: {"path", "reason"}
    dropped: list[dict[str, str]] = field(default_factory=list)
    #: bins a `max_files`/`max_bytes` budget left for a later run
    over_budget: list[Bin] = field(default_factory=list)

    @property
    def files(self) -> list[AddFile]:
        return [f for b in self.bins for f in b.files]

    def summary(self) -> dict[str, Any]:
        """What a dry run reports: the totals and every file with its deletion vector."""
        files = self.files
        dvs = [f.deletion_vector for f in files if f.deletion_vector is not None]
        return {
            "table": self.table,
            "version": self.version,
            "min_deleted_ratio": self.min_deleted_ratio,
            "target_size": self.target_size,
            "predicate": self.predicate,
            "num_bins": len(self.bins),
            "num_files": len(files),
            "bytes": sum(f.size for f in files),
            "num_deleted_rows": sum(d.cardinality for d in dvs),
            "dv_bytes": sum(d.size_in_bytes for d in dvs),
            "files": [file_entry(f, b.partition) for b in self.bins for f in b.files],
            "dropped": list(self.dropped),
            "num_files_over_budget": sum(len(b.files) for b in self.over_budget),
            "bytes_over_budget": sum(b.num_bytes for b in self.over_budget),
        }

    def to_dict(self) -> dict[str, Any]:
        """The summary plus the bins' `add` actions: what `purge(plan=...)` applies later."""
        return self.summary() | {"bins": [b.to_dict() for b in self.bins]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PurgePlan:
        try:
            return cls(
                table=d.get("table"),
                version=int(d["version"]),
                min_deleted_ratio=float(d["min_deleted_ratio"]),
                target_size=int(d["target_size"]),
                predicate=d.get("predicate"),
                bins=[Bin.from_dict(b) for b in d["bins"]],
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidArgumentError(
                f"Not a PURGE plan (a dry run's to_dict()['plan']): {type(exc).__name__}: {exc}", argument="plan"
            ) from None


def dead_bytes(files: Iterable[AddFile]) -> float:
    """Bytes of deleted rows, estimated as size x deleted share (a file of unknown row count counts whole)."""
    return sum(f.size * (1.0 if (r := deleted_ratio(f)) is None else r) for f in files)


def plan_purge(
    files: Iterable[AddFile],
    partition_columns: Sequence[str],
    *,
    table: str | None,
    version: int,
    target_size: int,
    min_deleted_ratio: float = 0.0,
    predicate: str | None = None,
    physical_names: Mapping[str, str] | None = None,
    max_files: int | None = None,
    max_bytes: int | None = None,
) -> PurgePlan:
    """Files of `files` that need a purge, per exact `partitionValues`, packed up to `target_size` (Spark's REORG
    packing: small files with vectors share a new file, a large one is rewritten alone). With a budget, the bins
    with the most dead bytes come first, taken up to `max_files` input files and `max_bytes` input bytes (the
    first always, so a run progresses); the rest are `over_budget`."""
    ratio = check_number(min_deleted_ratio, "min_deleted_ratio", maximum=1, table=table)
    within_budget([], len, max_files=max_files, max_bytes=max_bytes, table=table)  # a bad budget, before any work
    plan = PurgePlan(table, version, ratio, target_size, predicate)
    purged = (f for f in files if needs_purge(f, ratio))
    for key, members in by_partition(purged, partition_columns, physical_names):
        plan.bins.extend(Bin(key, dict(members[0].partition_values), tuple(b)) for b in pack(members, target_size))
    plan.bins, plan.over_budget = within_budget(
        plan.bins, lambda b: dead_bytes(b.files), max_files=max_files, max_bytes=max_bytes, table=table
    )
    return plan


def revalidate(plan: PurgePlan, active: Mapping[str, AddFile], version: int) -> PurgePlan:
    """`plan` against the active files (by canonical path) at `version`: a file removed, or whose deletion vector
    changed, since the plan is dropped with its reason (rewriting it would bring back rows deleted since, or
    purge rows the plan did not show); a bin left empty goes."""
    kept: list[Bin] = []
    dropped = list(plan.dropped)
    for b in plan.bins:
        files = []
        for f in b.files:
            now = active.get(canonical_path(f.path))
            if now is None:
                dropped.append({"path": f.path, "reason": f"removed after version {plan.version}"})
            elif now.deletion_vector != f.deletion_vector:
                before = f.deletion_vector.cardinality if f.deletion_vector else 0
                after = now.deletion_vector.cardinality if now.deletion_vector else 0
                reason = f"its deletion vector changed after version {plan.version} ({before} -> {after} rows)"
                dropped.append({"path": f.path, "reason": reason})
            else:
                files.append(now)
        if files:
            kept.append(Bin(b.partition, b.partition_values, tuple(files)))
    return PurgePlan(plan.table, version, plan.min_deleted_ratio, plan.target_size, plan.predicate, kept, dropped)


def operation_parameters(predicates: Sequence[str]) -> dict[str, Any]:
    """commitInfo.operationParameters of a REORG ... APPLY (PURGE) (Spark `DeltaOperations.Reorg`)."""
    return {"predicate": json.dumps(list(predicates)), "applyPurge": True}
