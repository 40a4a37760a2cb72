"""The lake autopilot's library: discover a lake's tables, read each one's health from its log, resolve the
policy, and plan the maintenance worth doing within a budget. Running the plan is the maintenance drivers'."""

from __future__ import annotations

from ..protocol.lake_health import PartitionHealth, TableHealth
from ..protocol.lake_plan import Budget, Cost, Gain, Rates, Task
from ..protocol.lake_policy import LakePolicy, TablePolicy, parse_policy
from .discover import Discovery, discover
from .health import Scan, scan, table_health
from .plan import LakePlan, plan
from .policy import load_policy, parse_policy_text

__all__ = [
    "Budget",
    "Cost",
    "Discovery",
    "Gain",
    "LakePlan",
    "LakePolicy",
    "PartitionHealth",
    "Rates",
    "Scan",
    "TableHealth",
    "TablePolicy",
    "Task",
    "discover",
    "load_policy",
    "parse_policy",
    "parse_policy_text",
    "plan",
    "scan",
    "table_health",
]
