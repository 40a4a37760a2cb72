"""Event-driven: one run per batch of new versions of a Delta table, fired by an asset watcher (no sensor task).

The triggerer runs `DeltaVersionTrigger` for the asset's `AssetWatcher`: each new table version becomes
one asset event whose extra is `{"from_trigger": true, "payload": {"version", "table_uri", "timestamp",
"operation", "status"}}`. Several commits between two polls give several events, in version order.
The trigger keeps its cursor (the last version fired) in the asset's state store (Airflow 3.3+), so a
triggerer restart neither repeats nor skips a version. The scheduler may gather several events into
one run: the task reads them all from `triggering_asset_events`.

The asset's URI is the table's `_delta_log`, distinct from the table's own asset (which
delta_table_health.py's sensor updates): Airflow keeps active asset URIs unique.

Configured by environment: DELTA_EXAMPLE_TABLE_URI (table to watch), DELTA_STORAGE_CONN_ID (object-store
connection, if any). Watchers run only while this DAG is unpaused.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import Asset, AssetWatcher, dag, task

from airflow_delta_provider.assets import delta_log_uri
from airflow_delta_provider.triggers.delta import DeltaVersionTrigger

TABLE_URI = os.environ.get("DELTA_EXAMPLE_TABLE_URI") or str(
    Path(__file__).resolve().parents[1] / "demo" / "sample_table"
)
STORAGE_CONN_ID = os.environ.get("DELTA_STORAGE_CONN_ID") or None

#: The table's commit stream. The trigger takes no run-specific arguments (watchers need stable kwargs).
TABLE_COMMITS = Asset(
    name="delta_example_table_commits",
    uri=delta_log_uri(TABLE_URI),
    watchers=[
        AssetWatcher(
            name="delta_example_table_new_version",
            trigger=DeltaVersionTrigger(TABLE_URI, storage_conn_id=STORAGE_CONN_ID, poll_interval=60.0),
        )
    ],
)


@dag(
    dag_id="delta_table_commits",
    schedule=[TABLE_COMMITS],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["delta", "example"],
    doc_md=__doc__,
)
def delta_table_commits() -> None:
    @task
    def new_versions(**context: Any) -> list[int]:
        """The table versions this run was triggered by, oldest first."""
        events = context["triggering_asset_events"].get(TABLE_COMMITS, [])
        payloads = sorted((e.extra["payload"] for e in events), key=lambda p: p["version"])
        for p in payloads:
            print(f"{p['table_uri']} version {p['version']}: {p['operation']} at {p['timestamp']}")
        return [p["version"] for p in payloads]

    new_versions()


delta_table_commits()
