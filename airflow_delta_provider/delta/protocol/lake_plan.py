"""The lake autopilot's plan: which (table, partitions, operation) to run, what each costs and gains, and
which of them a budget takes, most valuable first.

Only work with a gain is planned: OPTIMIZE where a partition has enough small files (or files whose deletion
vectors hide too many rows, Spark's `maxDeletedRowsRatio`) and changed since the last OPTIMIZE covered it;
VACUUM where tombstoned bytes are past retention; a checkpoint once `delta.checkpointInterval` commits follow
the last one; log cleanup where log files past `delta.logRetentionDuration` can go (PROTOCOL.md "Metadata
Cleanup"). Gains are in one unit, the requests a reader saves, so that work of different kinds ranks together:
a removed data file saves a GET per scan, a commit folded into a checkpoint a GET per snapshot load; bytes
reclaimed count one per `BYTES_PER_UNIT` and log files removed one per listing page.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ..errors import InvalidArgumentError
from .lake_health import PartitionHealth, TableHealth
from .lake_policy import LAKE_OPERATIONS, TablePolicy

BYTES_PER_UNIT = 64 * 2**20
#: Objects per listing page and per batched delete (S3 ListObjectsV2 / DeleteObjects).
PAGE = 1000
#: Multipart part size assumed for a rewritten file's upload.
PART_BYTES = 16 * 2**20


@dataclass(frozen=True)
class Rates:
    """How fast the chosen engine moves bytes and how long a request takes: for the duration estimate."""

    bytes_per_second: float = 100 * 2**20
    request_seconds: float = 0.02
    parallel_requests: int = 16

    def seconds(self, nbytes: int, requests: int) -> float:
        return nbytes / self.bytes_per_second + requests * self.request_seconds / self.parallel_requests


@dataclass(frozen=True)
class Budget:
    """Limits per run; None: unlimited. `seconds` is wall time with `parallelism` tables at a time."""

    bytes: int | None = None
    requests: int | None = None
    seconds: float | None = None
    parallelism: int = 1

    def __post_init__(self) -> None:
        for name in ("bytes", "requests", "seconds"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value < 0):
                raise InvalidArgumentError(f"budget {name} must be a number >= 0, got {value!r}", argument=name)
        if isinstance(self.parallelism, bool) or not isinstance(self.parallelism, int) or self.parallelism < 1:
            raise InvalidArgumentError(
                f"budget parallelism must be an integer >= 1, got {self.parallelism!r}", argument="parallelism"
            )


@dataclass(frozen=True)
class Cost:
    bytes_read: int = 0
    bytes_written: int = 0
    files_deleted: int = 0
    #: Requests by kind: list, get, put, delete.
    requests: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def total_requests(self) -> int:
        return sum(self.requests.values())

    def __add__(self, other: Cost) -> Cost:
        kinds = {k: self.requests.get(k, 0) + other.requests.get(k, 0) for k in {*self.requests, *other.requests}}
        return Cost(
            self.bytes_read + other.bytes_read,
            self.bytes_written + other.bytes_written,
            self.files_deleted + other.files_deleted,
            dict(sorted(kinds.items())),
            self.seconds + other.seconds,
        )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        del out["seconds"]
        return {**out, "requests_total": self.total_requests, "estimated_seconds": round(self.seconds, 3)}


@dataclass(frozen=True)
class Gain:
    files_removed: int = 0
    bytes_reclaimed: int = 0
    #: Files a full scan opens today over what it would open after (1.0: nothing to gain).
    read_amplification_removed: float = 0.0
    dv_rows_purged: int = 0
    commits_folded: int = 0
    log_files_removed: int = 0
    #: Bytes of rows deleted by deletion vectors that scans stop reading.
    dead_bytes_removed: int = 0

    @property
    def value(self) -> float:
        """The gain in reader requests saved (module doc)."""
        return (
            self.files_removed
            + self.commits_folded
            + (self.bytes_reclaimed + self.dead_bytes_removed) / BYTES_PER_UNIT
            + self.log_files_removed / PAGE
        )

    def __add__(self, other: Gain) -> Gain:
        return Gain(
            self.files_removed + other.files_removed,
            self.bytes_reclaimed + other.bytes_reclaimed,
            0.0,
            self.dv_rows_purged + other.dv_rows_purged,
            self.commits_folded + other.commits_folded,
            self.log_files_removed + other.log_files_removed,
            self.dead_bytes_removed + other.dead_bytes_removed,
        )

    def to_dict(self) -> dict[str, Any]:
        rounded = {"read_amplification_removed": round(self.read_amplification_removed, 3)}
        return {**asdict(self), **rounded, "value": round(self.value, 6)}


@dataclass(frozen=True)
class PartitionWork:
    """One partition's share of an OPTIMIZE task (a budget may take only some partitions)."""

    partition: str
    files_before: int
    cost: Cost
    gain: Gain
    values: tuple[tuple[str, str | None], ...] = ()


def partition_predicate(partitions: Sequence[tuple[tuple[str, str | None], ...]]) -> str | None:
    """A `protocol.predicate` text selecting exactly these partitions (values as logged: string literals, which
    the predicate coerces to the column's type; null or empty is `IS NULL`); None for an unpartitioned table."""

    def one(values: tuple[tuple[str, str | None], ...]) -> str:
        terms = []
        for column, value in values:
            name = "`" + column.replace("`", "``") + "`"
            terms.append(
                f"{name} IS NULL" if value in (None, "") else f"{name} = '{value.replace(chr(39), chr(39) * 2)}'"
            )
        return " AND ".join(terms)

    clauses = [one(v) for v in partitions if v]
    if not clauses:
        return None
    return clauses[0] if len(clauses) == 1 else " OR ".join(f"({c})" for c in clauses)


@dataclass(frozen=True)
class Task:
    table: str
    operation: str
    partitions: tuple[str, ...]
    cost: Cost
    gain: Gain
    needs_approval: bool = False
    reason: str = ""
    parts: tuple[PartitionWork, ...] = ()
    #: The `where` an OPTIMIZE runs with (`maintenance.optimize(where=...)`): exactly its partitions.
    where: str | None = None
    #: The keyword arguments the operation's maintenance driver runs with, so it does what was priced.
    options: dict[str, Any] = field(default_factory=dict)
    #: Where it runs: "local", or "spark" for a table at or over the policy's `spark_min_files`.
    engine: str = "local"

    @property
    def value(self) -> float:
        return self.gain.value

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "operation": self.operation,
            "partitions": list(self.partitions),
            "cost": self.cost.to_dict(),
            "gain": self.gain.to_dict(),
            "where": self.where,
            "options": dict(self.options),
            "needs_approval": self.needs_approval,
            "reason": self.reason,
            "engine": self.engine,
        }


def optimize_partition(p: PartitionHealth, health: TableHealth, rates: Rates) -> PartitionWork | None:
    """The compaction of one partition, or None when it has nothing worth compacting."""
    policy = health.policy
    if not p.changed_since_optimize:
        return None
    if p.small_files < policy.min_small_files and not p.dv_heavy_files:
        return None
    # what the OPTIMIZE rewrites there: every candidate, a DV-heavy file alone too (delta #5781)
    files, read, rows, dv_rows = p.rewrite_files, p.rewrite_bytes, p.rewrite_rows, p.rewrite_dv_rows
    live = int(read * (1 - min(1.0, dv_rows / rows))) if rows else read  # rows hidden by DVs are not rewritten
    outputs = min(files, max(1, math.ceil(live / policy.target_file_size)))
    removed = files - outputs
    if removed <= 0 and dv_rows == 0:
        return None
    puts = outputs * (1 + live // max(outputs, 1) // PART_BYTES)
    requests = {"get": 2 * files, "put": puts}  # a footer and a body read per input
    cost = Cost(read, live, 0, requests, rates.seconds(read + live, 2 * files + puts))
    after = p.num_files - removed
    gain = Gain(removed, 0, p.num_files / after if after else 0.0, dv_rows, dead_bytes_removed=read - live)
    return PartitionWork(p.partition, p.num_files, cost, gain, p.values)


def _commit_cost(rates: Rates, puts: int = 1) -> Cost:
    """A commit: the listing of new commits, a GET of each (assume one) and the put-if-absent."""
    requests = {"list": 1, "get": 1, "put": puts}
    return Cost(0, 0, 0, requests, rates.seconds(0, 1 + 1 + puts))


def plan_table(health: TableHealth, rates: Rates = Rates()) -> tuple[list[Task], list[dict[str, Any]]]:
    """Candidate tasks for one table, in the order they run, and what was skipped and why."""
    skipped: list[dict[str, Any]] = []
    if health.policy.skip:
        return [], [{"table": health.table, "reason": "policy: never touch"}]
    tasks: list[Task] = []
    threshold = health.policy.spark_min_files  # a table with this many active files runs on Spark
    engine = "spark" if threshold is not None and health.num_files >= threshold else "local"
    for op in LAKE_OPERATIONS:
        if op in health.policy.disabled:
            skipped.append({"table": health.table, "operation": op, "reason": "policy: operation disabled"})
            continue
        task = _PLANNERS[op](health, rates)
        if task is None:
            continue
        refusal = health.refused.get(op)
        if refusal is not None:
            skipped.append({"table": health.table, "operation": op, "reason": refusal.get("message"), **refusal})
            continue
        approval = op in health.policy.never_unattended
        options = driver_options(task, health.policy)
        tasks.append(replace(task, needs_approval=approval, options=options, engine=engine))
    return tasks, skipped


def driver_options(task: Task, policy: TablePolicy) -> dict[str, Any]:
    """`maintenance.optimize`, `vacuum` and `cleanup_log` keywords for `task` under `policy` (retentions are the
    policy's, never shorter than the table's); a checkpoint needs none."""
    if task.operation == "optimize":
        ratio = policy.max_deleted_rows_ratio
        return {"where": task.where, "target_size": policy.target_file_size, "max_deleted_rows_ratio": ratio}
    if task.operation == "vacuum":
        return {"retention_hours": policy.deleted_file_retention_ms / 3_600_000}
    if task.operation == "log_cleanup":
        return {"retention_hours": policy.log_retention_ms / 3_600_000}
    return {}


def _optimize(health: TableHealth, rates: Rates) -> Task | None:
    parts = [w for p in health.partitions.values() if (w := optimize_partition(p, health, rates)) is not None]
    if not parts:
        return None
    parts.sort(key=lambda w: (-w.gain.value, w.partition))
    cost = sum((w.cost for w in parts), _commit_cost(rates))
    return _optimize_task(health.table, parts, cost)


def _optimize_task(table: str, parts: Sequence[PartitionWork], cost: Cost) -> Task:
    gain = sum((w.gain for w in parts), Gain())
    before = sum(w.files_before for w in parts)
    gain = replace(gain, read_amplification_removed=before / max(before - gain.files_removed, 1))
    reason = f"{gain.files_removed} files fewer, {gain.dv_rows_purged} deleted rows purged in {len(parts)} partition(s)"
    where = partition_predicate([w.values for w in parts])
    partitions = tuple(w.partition for w in parts)
    return Task(table, "optimize", partitions, cost, gain, reason=reason, parts=tuple(parts), where=where)


def _vacuum(health: TableHealth, rates: Rates) -> Task | None:
    files = sum(p.tombstone_files_now for p in health.partitions.values())
    nbytes = sum(p.tombstone_bytes_now for p in health.partitions.values())
    if health.untracked is not None:  # measured by a data listing: VACUUM deletes the old untracked files too
        files += health.untracked["reclaimable_files"]
        nbytes += health.untracked["reclaimable_bytes"]
    if files == 0 or nbytes < health.policy.min_vacuum_bytes:
        return None
    # VACUUM lists the whole table (one page per 1000 objects, one listing per directory) to find untracked files
    listed = health.num_files + files
    lists = math.ceil(listed / PAGE) + len(health.partitions)
    requests = {"list": lists, "delete": math.ceil(files / PAGE), "put": 2}  # VACUUM START and END commits
    cost = Cost(0, 0, files, requests, rates.seconds(0, sum(requests.values())))
    partitions = tuple(sorted(k for k, p in health.partitions.items() if p.tombstone_files_now and k))
    reason = f"{files} tombstoned or untracked files past retention"
    return Task(health.table, "vacuum", partitions, cost, Gain(bytes_reclaimed=nbytes), reason=reason)


def _checkpoint(health: TableHealth, rates: Rates) -> Task | None:
    commits = health.commits_since_checkpoint
    if commits < health.policy.checkpoint_interval:
        return None
    requests = {"list": 1, "get": commits + (health.checkpoint_version is not None), "put": 2}
    written = health.num_files * 200  # about one add action's columns per active file
    cost = Cost(health.segment_bytes, written, 0, requests, rates.seconds(health.segment_bytes + written, 3 + commits))
    reason = f"{commits} commits since the last checkpoint (interval {health.policy.checkpoint_interval})"
    return Task(health.table, "checkpoint", (), cost, Gain(commits_folded=commits), reason=reason)


def _log_cleanup(health: TableHealth, rates: Rates) -> Task | None:
    files = health.log_files_past_retention
    if files < health.policy.min_log_files:
        return None
    requests = {"list": 1, "delete": math.ceil(files / PAGE)}
    cost = Cost(0, 0, files, requests, rates.seconds(0, sum(requests.values())))
    gain = Gain(bytes_reclaimed=health.log_bytes_past_retention, log_files_removed=files)
    return Task(health.table, "log_cleanup", (), cost, gain, reason=f"{files} log files past retention")


_PLANNERS = {"optimize": _optimize, "vacuum": _vacuum, "checkpoint": _checkpoint, "log_cleanup": _log_cleanup}


def _fits(b: Budget, spent: Cost) -> bool:
    """Whether `spent` (what the taken tasks cost together) is within the budget."""
    return (
        (b.bytes is None or spent.bytes_read + spent.bytes_written <= b.bytes)
        and (b.requests is None or spent.total_requests <= b.requests)
        and (b.seconds is None or spent.seconds / b.parallelism <= b.seconds)
    )


def rank(tasks: Iterable[Task]) -> list[Task]:
    """Most valuable first; ties: cheaper first, then by table and operation order (deterministic)."""
    order = {op: i for i, op in enumerate(LAKE_OPERATIONS)}
    return sorted(tasks, key=lambda t: (-t.value, t.cost.seconds, t.table, order.get(t.operation, 99)))


def _part_of(task: Task, parts: Sequence[PartitionWork], cost: Cost) -> Task:
    """The OPTIMIZE `task` cut to `parts` (its approval and driver options kept, the `where` narrowed)."""
    split = _optimize_task(task.table, parts, cost)
    options = {**task.options, "where": split.where}
    return replace(split, needs_approval=task.needs_approval, options=options, engine=task.engine)


def within_budget(tasks: Iterable[Task], budget: Budget, rates: Rates = Rates()) -> tuple[list[Task], list[Task]]:
    """(taken, deferred): tasks in value order while they fit; an OPTIMIZE that does not fit whole keeps its most
    valuable partitions that do (the rest deferred)."""
    spent = Cost()
    taken: list[Task] = []
    deferred: list[Task] = []
    for task in rank(tasks):
        if _fits(budget, spent + task.cost):
            spent += task.cost
            taken.append(task)
            continue
        if task.operation == "optimize" and len(task.parts) > 1:
            kept: list[PartitionWork] = []
            cost = _commit_cost(rates)
            for w in task.parts:
                if _fits(budget, spent + (cost + w.cost)):
                    cost += w.cost
                    kept.append(w)
            if kept:
                spent += cost
                rest = [w for w in task.parts if w not in kept]
                taken.append(_part_of(task, kept, cost))
                deferred.append(_part_of(task, rest, sum((w.cost for w in rest), _commit_cost(rates))))
                continue
        deferred.append(task)
    return taken, deferred
