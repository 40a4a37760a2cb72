"""Runs whenever `DeltaVersionSensor` in delta_table_health reports a new version of the table.

The sensor attaches `{version, table_uri, timestamp, operation}` to the asset event; this DAG reads it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pendulum
from airflow.providers.common.compat.sdk import dag, task

from airflow_delta_provider.assets import delta_table_asset

# the same table as delta_table_health.py, hence the same asset
TABLE_URI = os.environ.get("DELTA_EXAMPLE_TABLE_URI") or str(
    Path(__file__).resolve().parents[1] / "demo" / "sample_table"
)
TABLE_ASSET = delta_table_asset(TABLE_URI, name="delta_example_table")


@dag(
    dag_id="delta_asset_consumer",
    schedule=[TABLE_ASSET],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["delta", "example"],
)
def delta_asset_consumer() -> None:
    @task
    def on_new_version(**context: Any) -> list[dict[str, Any]]:
        """The versions that triggered this run, from the asset events' extra."""
        events = context["triggering_asset_events"].get(TABLE_ASSET, [])
        seen = [dict(e.extra) for e in events]
        for extra in seen:
            print(f"{extra.get('table_uri')} is at version {extra.get('version')} ({extra.get('operation')})")
        return seen

    on_new_version()


delta_asset_consumer()
