"""Event-driven: one run per batch of new versions of a Delta table, fired by an asset watcher (no sensor task).

The triggerer runs `DeltaVersionTrigger` for the asset's `AssetWatcher`, polling the table's `_delta_log`
every DELTA_WATCH_POLL_INTERVAL seconds (default 5; a poll costs one log listing). Each poll that finds
new versions fires **one** asset event carrying all of them: its extra is `{"from_trigger": true,
"payload": {"version" (the last), "first_version", "last_version", "versions", "operations",
"partitions", "skipped_versions", "table_uri", "timestamp", "operation", "status"}}`. So two commits
that land within one poll start one run that sees both, and none waits for the next commit. The
scheduler may still gather several events into one run: the task reads them all from
`triggering_asset_events`.

Maintenance commits are not data: OPTIMIZE (every file action `dataChange=false`) and VACUUM START/END
(commitInfo only) fire nothing and start no run; they still move the trigger's cursor past them
(`include_maintenance=True` on the trigger fires on them too). The cursor (the last version handled)
lives in the asset's state store (Airflow 3.3+): on 3.3 it is written once the triggerer confirmed the
events up to it are stored in the metadata DB, so a triggerer restart neither skips a version nor
repeats one it recorded.

The asset's URI is the table's `_delta_log`, distinct from the table's own asset (which
delta_table_health.py's sensor updates): Airflow keeps active asset URIs unique.

Configured by environment: DELTA_EXAMPLE_TABLE_URI (table to watch), DELTA_STORAGE_CONN_ID (object-store
connection, if any), DELTA_WATCH_POLL_INTERVAL (seconds between polls). Watchers run only while this DAG
is unpaused.
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
POLL_INTERVAL = float(os.environ.get("DELTA_WATCH_POLL_INTERVAL") or 5.0)

#: The table's commit stream. The trigger takes no run-specific arguments (watchers need stable kwargs).
TABLE_COMMITS = Asset(
    name="delta_example_table_commits",
    uri=delta_log_uri(TABLE_URI),
    watchers=[
        AssetWatcher(
            name="delta_example_table_new_version",
            trigger=DeltaVersionTrigger(TABLE_URI, storage_conn_id=STORAGE_CONN_ID, poll_interval=POLL_INTERVAL),
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
        """The table versions this run was triggered by, oldest first (each event carries one poll's)."""
        events = context["triggering_asset_events"].get(TABLE_COMMITS, [])
        payloads = sorted((e.extra["payload"] for e in events), key=lambda p: p["version"])
        versions: list[int] = []
        for p in payloads:
            batch = p.get("versions") or [p["version"]]
            print(
                f"{p['table_uri']} versions {batch} ({p.get('operations')}), last at {p['timestamp']}; "
                f"partitions {p.get('partitions')}; maintenance skipped {p.get('skipped_versions')}"
            )
            versions.extend(batch)
        return versions

    new_versions()


delta_table_commits()
