"""Assets for Delta tables: what `DeltaVersionSensor(outlets=[...])` emits and consumers schedule on."""

from __future__ import annotations

from airflow.providers.common.compat.sdk import Asset

from .delta.storage import normalize_table_uri


def delta_table_asset(table_uri: str, name: str | None = None) -> Asset:
    """The asset of a table: URI normalized (`file:///abs` locally, `s3://...` as given), so every DAG
    naming the same table names the same asset. `name` defaults to the URI."""
    uri = normalize_table_uri(table_uri)
    return Asset(name=name or uri, uri=uri)
