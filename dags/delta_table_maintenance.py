"""Keep one Delta table's log in shape: check what changed, plan VACUUM, checkpoint when the log is behind,
clean up the log, report.

    replay_and_check   SnapshotReplayOperator: every version since the one the previous run checked
      -> vacuum_plan     TombstoneReportOperator: files removed and past retention, what VACUUM would delete
                         (read-only; before the checkpoint, which drops expired tombstones as Delta's do)
      -> checkpoint_needed   branch: versions since the last checkpoint >= params.checkpoint_interval?
           -> checkpoint         DeltaCheckpointOperator, at the version just checked
           -> checkpoint_not_needed
      -> [OPTIMIZE of partitions over a small-file threshold: no operator yet, see below]
      -> [approval, then VACUUM apply of the plan: no VACUUM operator yet, see below]
      -> log_cleanup     DeltaLogCleanupOperator: a dry run unless params.apply_log_cleanup
      -> report          one summary of the run (and each task links to its full result: "Delta report")

Runs daily and on each new version the health DAG's sensor records (the table's asset). Nothing is
deleted unless a run asks: `airflow dags test delta_table_maintenance -c '{"apply_log_cleanup": true}'`.

Configured by environment, as delta_table_health.py: DELTA_EXAMPLE_TABLE_URI (the table),
DELTA_RESULT_DIR (where full results and reports go), DELTA_SPARK_CONN_ID (default spark_default; `none`
runs every job in the worker process, no Spark), DELTA_STORAGE_CONN_ID (object-store connection, if any).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pendulum
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import Param, dag, task

try:
    from airflow.sdk import AssetOrTimeSchedule, CronTriggerTimetable
except ImportError:  # pragma: no cover - Airflow 3.0
    from airflow.timetables.assets import AssetOrTimeSchedule
    from airflow.timetables.trigger import CronTriggerTimetable

from airflow_delta_provider.assets import delta_table_asset
from airflow_delta_provider.operators.delta import (
    DeltaCheckpointOperator,
    DeltaLogCleanupOperator,
    SnapshotReplayOperator,
    TombstoneReportOperator,
)

REPO = Path(__file__).resolve().parents[1]
TABLE_URI = os.environ.get("DELTA_EXAMPLE_TABLE_URI") or str(REPO / "demo" / "sample_table")
RESULT_DIR = os.environ.get("DELTA_RESULT_DIR") or str(REPO / "demo" / "results")
SPARK_CONN_ID = os.environ.get("DELTA_SPARK_CONN_ID", "spark_default")
#: No Spark connection: the jobs run in the worker process (local engine), as in tests.
SUBMIT = SPARK_CONN_ID.strip().lower() not in ("", "none")
STORAGE_CONN_ID = os.environ.get("DELTA_STORAGE_CONN_ID") or None

#: The asset delta_table_health.py's sensor updates on each new version (same name and URI).
TABLE_ASSET = delta_table_asset(TABLE_URI, name="delta_example_table")
#: The version replay_and_check checked: checkpoint and VACUUM plan work on that state.
CHECKED_VERSION = "{{ ti.xcom_pull(task_ids='replay_and_check')['version'] }}"

COMMON: dict[str, Any] = {
    "table_uri": "{{ params.table_uri }}",
    "conn_id": SPARK_CONN_ID,
    "storage_conn_id": STORAGE_CONN_ID,
    "submit": SUBMIT,
    "result_uri": f"{RESULT_DIR.rstrip('/')}/",
}


@dag(
    dag_id="delta_table_maintenance",
    schedule=AssetOrTimeSchedule(timetable=CronTriggerTimetable("0 3 * * *", timezone="UTC"), assets=[TABLE_ASSET]),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["delta", "example", "maintenance"],
    params={
        "table_uri": Param(TABLE_URI, type="string", description="Delta table root (path or URI)"),
        "checkpoint_interval": Param(
            10, type="integer", minimum=1, description="checkpoint when this many versions follow the last checkpoint"
        ),
        "retention_hours": Param(None, type=["null", "number"], description="VACUUM plan: override the retention"),
        "log_retention_hours": Param(
            None, type=["null", "number"], description="log cleanup: override delta.logRetentionDuration"
        ),
        "apply_log_cleanup": Param(False, type="boolean", description="delete the expired log files (else a dry run)"),
        "max_small_file_ratio": Param(1.0, type="number", minimum=0, maximum=1, description="check"),
    },
    doc_md=__doc__,
)
def delta_table_maintenance() -> None:
    replay = SnapshotReplayOperator(
        task_id="replay_and_check",
        engine="auto",
        checks={"no_duplicate_paths": True, "max_small_file_ratio": "{{ params.max_small_file_ratio }}"},
        **COMMON,
    )

    vacuum_plan = TombstoneReportOperator(
        task_id="vacuum_plan",
        version=CHECKED_VERSION,
        retention_hours="{{ params.retention_hours if params.retention_hours is not none else '' }}",
        **COMMON,
    )

    @task.branch
    def checkpoint_needed(state: dict[str, Any], **context: Any) -> str:
        """Checkpoint when `checkpoint_interval` versions or more follow the last checkpoint."""
        last = state["checkpoint_version"]
        behind = state["version"] - (-1 if last is None else last)
        interval = context["params"]["checkpoint_interval"]
        print(f"version {state['version']}, last checkpoint {last}: {behind} versions behind (interval {interval})")
        return "checkpoint" if behind >= interval else "checkpoint_not_needed"

    checkpoint = DeltaCheckpointOperator(task_id="checkpoint", version=CHECKED_VERSION, **COMMON)
    no_checkpoint = EmptyOperator(task_id="checkpoint_not_needed")

    # OPTIMIZE goes here: compact the partitions over a small-file threshold (replay_and_check reports the
    # table's `small_file_ratio`; a per-partition figure comes with the OPTIMIZE plan). No OPTIMIZE operator yet.

    # Approval and VACUUM apply go here: an ApprovalOperator (airflow.providers.standard.operators.hitl,
    # Airflow 3.1+) showing vacuum_plan's report, then a VACUUM operator deleting exactly the files of that
    # plan (not a fresh listing; files never logged need a listing VACUUM's own dry run). No VACUUM operator
    # yet: nothing here deletes data files.

    log_cleanup = DeltaLogCleanupOperator(
        task_id="log_cleanup",
        apply="{{ params.apply_log_cleanup }}",
        retention_hours="{{ params.log_retention_hours if params.log_retention_hours is not none else '' }}",
        trigger_rule="none_failed_min_one_success",
        **COMMON,
    )

    @task(trigger_rule="none_failed")
    def report(
        state: dict[str, Any], written: dict[str, Any] | None, plan: dict[str, Any], cleanup: dict[str, Any]
    ) -> dict[str, Any]:
        """One summary of the run: what was checked, checkpointed, planned and cleaned."""
        summary = {
            "table_uri": state["table_uri"],
            "version": state["version"],
            "checked_versions": state["checked_versions"],
            "checks": state["checks"],
            "checkpoint": None if written is None else {k: written[k] for k in ("version", "kind", "written")},
            "vacuum_plan": {k: plan[k] for k in ("expired", "reclaimable_bytes", "retained", "retention")},
            "log_cleanup": {k: cleanup[k] for k in ("dry_run", "num_files", "deleted", "earliest_readable_version")},
            "reports": {
                "replay": state["reports"].get("html", state["result_uri"]),
                "vacuum_plan": plan["reports"].get("html"),
            },
        }
        for key, value in summary.items():
            print(f"{key}: {value}")
        return summary

    branch = checkpoint_needed(replay.output)
    replay >> vacuum_plan >> branch >> [checkpoint, no_checkpoint] >> log_cleanup
    report(replay.output, checkpoint.output, vacuum_plan.output, log_cleanup.output)


delta_table_maintenance()
