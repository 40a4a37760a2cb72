"""The lake plan: every table's candidate tasks (`protocol.lake_plan`), ranked, cut to a budget; with what was
skipped and why and the tables that could not be read, in the shape `deltalog lake plan --json` prints."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..protocol.lake_health import TableHealth
from ..protocol.lake_plan import Budget, Rates, Task, plan_table, within_budget


@dataclass
class LakePlan:
    tasks: list[Task] = field(default_factory=list)
    #: Tasks with a gain that the budget left for a later run, most valuable first.
    deferred: list[Task] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)

    def for_table(self, table: str) -> list[Task]:
        """A table's tasks in the order they run (OPTIMIZE, VACUUM, checkpoint, log cleanup)."""
        order = ("optimize", "vacuum", "checkpoint", "log_cleanup")
        return sorted((t for t in self.tasks if t.table == table), key=lambda t: order.index(t.operation))

    def to_dict(self) -> dict[str, Any]:
        return {
            "tasks": [t.to_dict() for t in self.tasks],
            "deferred": [t.to_dict() for t in self.deferred],
            "skipped": self.skipped,
            "errors": self.errors,
            "totals": {
                "tasks": len(self.tasks),
                "value": round(sum(t.value for t in self.tasks), 3),
                "bytes": sum(t.cost.bytes_read + t.cost.bytes_written for t in self.tasks),
                "requests": sum(t.cost.total_requests for t in self.tasks),
                "estimated_seconds": round(sum(t.cost.seconds for t in self.tasks), 3),
            },
        }


def plan(
    healths: Iterable[TableHealth],
    budget: Budget | None = None,
    *,
    rates: Rates | None = None,
    errors: Iterable[dict[str, Any]] = (),
) -> LakePlan:
    """Ranked tasks within `budget` (None: unlimited); `errors` (a scan's unreadable tables) are carried along.
    Each health carries the policy it was counted with (`table_health(policy=...)`)."""
    rates = rates or Rates()
    out = LakePlan(errors=list(errors))
    candidates: list[Task] = []
    for health in healths:
        tasks, skipped = plan_table(health, rates)
        candidates.extend(tasks)
        out.skipped.extend(skipped)
    out.tasks, out.deferred = within_budget(candidates, budget or Budget(), rates)
    return out
