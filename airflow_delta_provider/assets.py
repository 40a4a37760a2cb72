"""Assets for Delta tables: what `DeltaVersionSensor(outlets=[...])` emits and consumers schedule on, and
the URI of a table's commit stream for an `AssetWatcher` running `DeltaVersionTrigger`."""

from __future__ import annotations

from airflow.providers.common.compat.sdk import Asset

from .delta.storage import normalize_table_uri


def delta_table_asset(table_uri: str, name: str | None = None) -> Asset:
    """The asset of a table: URI normalized (`file:///abs` locally, `s3://...` as given), so every DAG
    naming the same table names the same asset. `name` defaults to the URI."""
    uri = normalize_table_uri(table_uri)
    return Asset(name=name or uri, uri=uri)


def delta_log_uri(table_uri: str) -> str:
    """The URI of a table's transaction log (`<table uri>/_delta_log`): the asset URI for a table's commit
    stream when the table's own URI is already an asset (Airflow keeps active asset URIs unique)."""
    return normalize_table_uri(table_uri) + "/_delta_log"
