"""Keep every Delta table under a lake's prefixes healthy, within a budget, and prove it
(`airflow_delta_provider.autopilot.lake_autopilot_dag`):

    discover_tables -> plan_work -> approval_needed -> approve (Airflow 3.1+) | no_approval_needed
        -> approved_work -> table (mapped per table, named after it):
             optimize_table -> vacuum_table -> checkpoint_table -> log_cleanup_table -> prove
        -> record: one commit of every (table, operation) row to the maintenance history table

Each table task runs only what the plan holds for its table; a failure fails that table's tasks only.
VACUUM deletes, so the default policy here keeps it behind a person (`never_unattended: [vacuum]`); trigger
with `-c '{"approve": true}'` to run it unattended.

Configured by environment: DELTA_LAKE_PREFIXES (comma-separated URIs; default: the demo folder),
DELTA_LAKE_POLICY (a policy file, YAML or JSON; docs/lake.md), DELTA_LAKE_HISTORY_URI (the history table;
default <first prefix>/_maintenance_history), DELTA_LAKE_BUDGET_BYTES / _REQUESTS / _SECONDS, DELTA_LAKE_POOL.

Big tables on Spark: DELTA_LAKE_SPARK_MASTER (`local[*]`, `spark://host:7077`, `yarn`, `k8s://...`, or
`sc://host:15002` for Spark Connect) gives the plan's "spark" tables a Spark engine, made in the table's task.
Which tables are "spark" is the policy's `spark_min_files`: in a DELTA_LAKE_POLICY file, else
DELTA_LAKE_SPARK_MIN_FILES (default 10000 active files) over the built-in policy. Without a master every table
runs on the local engine.
"""

from __future__ import annotations

import os
from pathlib import Path

import pendulum

from airflow_delta_provider.autopilot import lake_autopilot_dag
from airflow_delta_provider.delta.lake import Budget, parse_policy

REPO = Path(__file__).resolve().parents[1]
PREFIXES = [p.strip() for p in (os.environ.get("DELTA_LAKE_PREFIXES") or str(REPO / "demo")).split(",") if p.strip()]
HISTORY_URI = os.environ.get("DELTA_LAKE_HISTORY_URI") or f"{PREFIXES[0].rstrip('/')}/_maintenance_history"


def _number(name: str) -> float | None:
    value = os.environ.get(name)
    return float(value) if value else None


_bytes, _requests = _number("DELTA_LAKE_BUDGET_BYTES"), _number("DELTA_LAKE_BUDGET_REQUESTS")
BUDGET = Budget(
    bytes=int(_bytes) if _bytes is not None else None,
    requests=int(_requests) if _requests is not None else None,
    seconds=_number("DELTA_LAKE_BUDGET_SECONDS"),
    parallelism=4,
)

SPARK_MASTER = os.environ.get("DELTA_LAKE_SPARK_MASTER", "").strip() or None
_spark_min_files = _number("DELTA_LAKE_SPARK_MIN_FILES")
#: The built-in policy: VACUUM behind a person; with a Spark master, tables from this many files on Spark.
POLICY_DOC: dict = {"never_unattended": ["vacuum"]}
if SPARK_MASTER:
    POLICY_DOC["defaults"] = {"spark_min_files": int(_spark_min_files) if _spark_min_files is not None else 10_000}

dag = lake_autopilot_dag(
    "delta_lake_autopilot",
    PREFIXES,
    history_uri=HISTORY_URI,
    policy=os.environ.get("DELTA_LAKE_POLICY") or parse_policy(POLICY_DOC),
    budget=BUDGET,
    spark_master=SPARK_MASTER,
    pool=os.environ.get("DELTA_LAKE_POOL") or None,
    schedule="@daily",
    start_date=pendulum.datetime(2025, 1, 1, tz="UTC"),
    tags=["delta", "lake"],
)
