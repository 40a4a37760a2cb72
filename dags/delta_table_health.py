"""Keep one Delta table healthy: wait for a new version, replay and check it, report its tombstones.

    wait_for_new_version (DeltaVersionSensor, deferrable)
      -> replay_and_check (SnapshotReplayOperator: spark-submit of the bundled job, declarative checks)
      -> tombstone_report (TombstoneReportOperator: retained vs past retention, per partition; read-only)
      -> summarize (asserts the three agree, prints the XCom summaries)

Configured by environment (defaults suit a laptop; `docker/` sets them for the compose stack):
DELTA_EXAMPLE_TABLE_URI (table to watch), DELTA_RESULT_DIR (where full results go),
DELTA_SPARK_CONN_ID (default spark_default; `none` runs both jobs in the worker process with the local
engine, no Spark: `submit=False`), DELTA_STORAGE_CONN_ID (object-store connection, if any),
DELTA_TOMBSTONE_ENGINE (the tombstone report's engine, default `auto`: Spark only for a table above the
auto threshold; `./scripts/demo` sets `spark` so one task shows a spark-submit job on a small table).
Each run may override through params (`airflow dags test delta_table_health -c '{"newer_than": -1}'`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pendulum
from airflow.providers.common.compat.sdk import Param, dag, task

from airflow_delta_provider.assets import delta_table_asset
from airflow_delta_provider.operators.delta import SnapshotReplayOperator, TombstoneReportOperator
from airflow_delta_provider.sensors.delta import DeltaVersionSensor
from airflow_delta_provider.version_watch import last_version

REPO = Path(__file__).resolve().parents[1]
TABLE_URI = os.environ.get("DELTA_EXAMPLE_TABLE_URI") or str(REPO / "demo" / "sample_table")
RESULT_DIR = os.environ.get("DELTA_RESULT_DIR") or str(REPO / "demo" / "results")
SPARK_CONN_ID = os.environ.get("DELTA_SPARK_CONN_ID", "spark_default")
#: No Spark connection: the jobs run in the worker process (local engine), as in tests.
SUBMIT = SPARK_CONN_ID.strip().lower() not in ("", "none")
STORAGE_CONN_ID = os.environ.get("DELTA_STORAGE_CONN_ID") or None
TOMBSTONE_ENGINE = os.environ.get("DELTA_TOMBSTONE_ENGINE") or "auto"

#: The asset the sensor updates: consumers (see delta_asset_consumer.py) run on each new version.
TABLE_ASSET = delta_table_asset(TABLE_URI, name="delta_example_table")

# newer_than: the run's param when given, else the highest version earlier runs replayed for this
# table, else (first run ever) the version seen at the first poke: wait for the next commit.
# `xcom_pull(..., include_prior_dates=True)` gives None, one dict, or (Airflow 3, from the third run
# on) a list of them: `last_version` (a macro, below) reads all three.
NEWER_THAN = (
    "{{ params.newer_than if params.newer_than is not none else "
    "last_version(ti.xcom_pull(task_ids='replay_and_check', include_prior_dates=True), params.table_uri) }}"
)


@dag(
    dag_id="delta_table_health",
    schedule="@hourly",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["delta", "example"],
    user_defined_macros={"last_version": last_version},
    params={
        "table_uri": Param(TABLE_URI, type="string", description="Delta table root (path or URI)"),
        "newer_than": Param(None, type=["null", "integer"], description="fire on a version above this one"),
        "retention_hours": Param(None, type=["null", "number"], description="override the table's retention"),
        "min_files": Param(1, type="integer", minimum=0, description="check: at least this many active files"),
        "max_small_file_ratio": Param(1.0, type="number", minimum=0, maximum=1, description="check"),
    },
    doc_md=__doc__,
)
def delta_table_health() -> None:
    wait = DeltaVersionSensor(
        task_id="wait_for_new_version",
        table_uri="{{ params.table_uri }}",
        newer_than=NEWER_THAN,
        storage_conn_id=STORAGE_CONN_ID,
        deferrable=True,
        poke_interval=5,
        timeout=6 * 3600,
        outlets=[TABLE_ASSET],
    )
    replay = SnapshotReplayOperator(
        task_id="replay_and_check",
        table_uri="{{ params.table_uri }}",
        version="{{ ti.xcom_pull(task_ids='wait_for_new_version')['version'] }}",
        conn_id=SPARK_CONN_ID,
        storage_conn_id=STORAGE_CONN_ID,
        submit=SUBMIT,
        engine="auto",
        result_uri=f"{RESULT_DIR.rstrip('/')}/",
        checks={
            "min_files": "{{ params.min_files }}",
            "max_small_file_ratio": "{{ params.max_small_file_ratio }}",
            "no_duplicate_paths": True,
        },
    )
    report = TombstoneReportOperator(
        task_id="tombstone_report",
        table_uri="{{ params.table_uri }}",
        version="{{ ti.xcom_pull(task_ids='replay_and_check')['version'] }}",
        retention_hours="{{ params.retention_hours if params.retention_hours is not none else '' }}",
        conn_id=SPARK_CONN_ID,
        storage_conn_id=STORAGE_CONN_ID,
        submit=SUBMIT,
        engine=TOMBSTONE_ENGINE if SUBMIT else "local",
        result_uri=f"{RESULT_DIR.rstrip('/')}/",
    )

    @task
    def summarize(seen: dict[str, Any], state: dict[str, Any], tombstones: dict[str, Any]) -> dict[str, Any]:
        """Check the three results agree and print them."""
        assert state["version"] == seen["version"] == tombstones["version"], (seen, state, tombstones)
        assert state["num_tombstones"] == tombstones["retained"] or tombstones["retention"]["source"] == "override"
        print(f"sensor:     {seen}")
        print(f"replay:     {state}")
        print(f"tombstones: {tombstones}")
        return {"version": state["version"], "num_files": state["num_files"], "expired": tombstones["expired"]}

    wait >> replay >> report
    summarize(wait.output, replay.output, report.output)


delta_table_health()
