"""The lake autopilot's library: discover a lake's tables, read each one's health from its log, resolve the
policy, plan the maintenance worth doing within a budget, run a table's plan (the maintenance drivers do the
work), prove each rewrite changed no row, and record the runs in a history that is itself a Delta table."""

from __future__ import annotations

from ..protocol.lake_health import PartitionHealth, TableHealth
from ..protocol.lake_plan import Budget, Cost, Gain, Rates, Task
from ..protocol.lake_policy import LakePolicy, TablePolicy, parse_policy
from ..protocol.lake_proof import RowProofError
from .discover import Discovery, discover
from .health import Scan, scan, table_health
from .history import record_runs
from .plan import LakePlan, plan
from .policy import load_policy, parse_policy_text
from .proof import prove_rewrite
from .run import run_table

__all__ = [
    "Budget",
    "Cost",
    "Discovery",
    "Gain",
    "LakePlan",
    "LakePolicy",
    "PartitionHealth",
    "Rates",
    "RowProofError",
    "Scan",
    "TableHealth",
    "TablePolicy",
    "Task",
    "discover",
    "load_policy",
    "parse_policy",
    "parse_policy_text",
    "plan",
    "prove_rewrite",
    "record_runs",
    "run_table",
    "scan",
    "table_health",
]
