"""`DeltaTableHook`: a table's log through storage credentials from an Airflow connection.

Connections (`aws`, `google_cloud_platform`, `wasb`) become fsspec storage options (docs/airflow.md
"Connections"). They hold secrets: passed in memory or in the spark-submit process's environment, never
logged, templated, put on a command line or returned as XCom.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from airflow.providers.common.compat.sdk import BaseHook

from ..delta import DeltaLog
from ..delta.errors import BucketNotFoundError  # noqa: F401 (re-exported: what `check_bucket` raises)
from ..delta.storage import is_local
from ..delta.storage.s3 import check_s3_endpoint as check_endpoint


def _extra(conn: Any) -> dict[str, Any]:
    extra = conn.extra_dejson if hasattr(conn, "extra_dejson") else json.loads(conn.extra or "{}")
    return dict(extra or {})


def _aws_options(conn: Any, conn_id: str) -> dict[str, Any]:
    extra = _extra(conn)
    key, secret, token = conn.login, conn.password, extra.get("aws_session_token")
    if not (key and secret):
        try:  # the Amazon provider resolves profiles, role assumption, web identity...
            from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

            creds = AwsBaseHook(aws_conn_id=conn_id, client_type="s3").get_credentials()
            key, secret, token = creds.access_key, creds.secret_key, creds.token
        except ImportError:
            pass
    endpoint = extra.get("endpoint_url") or (extra.get("service_config", {}).get("s3", {}) or {}).get("endpoint_url")
    region = extra.get("region_name")
    opts = {"key": key, "secret": secret} if key and secret else {}
    opts |= {"token": token, "endpoint_url": endpoint, "client_kwargs": region and {"region_name": region}}
    return {k: v for k, v in opts.items() if v}


def _gcp_options(conn: Any) -> dict[str, Any]:
    extra = {k.removeprefix("extra__google_cloud_platform__"): v for k, v in _extra(conn).items()}
    keyfile = extra.get("keyfile_dict")
    token = (json.loads(keyfile) if isinstance(keyfile, str) else keyfile) if keyfile else extra.get("key_path")
    return {k: v for k, v in {"token": token, "project": extra.get("project")}.items() if v}


def _wasb_options(conn: Any) -> dict[str, Any]:
    extra = _extra(conn)
    opts = {"account_name": conn.login or (conn.host or "").split(".")[0], "account_key": conn.password}
    opts |= {k: extra.get(k) for k in ("sas_token", "connection_string", "tenant_id", "client_id", "client_secret")}
    return {k: v for k, v in opts.items() if v}


def storage_options_from_connection(conn: Any, conn_id: str) -> dict[str, Any]:
    """fsspec storage options from an Airflow connection (aws, google_cloud_platform, wasb)."""
    kind = (conn.conn_type or "").lower()
    if kind in ("aws", "s3"):
        return _aws_options(conn, conn_id)
    if kind in ("google_cloud_platform", "gcp", "gs"):
        return _gcp_options(conn)
    if kind in ("wasb", "azure_data_lake", "adls"):
        return _wasb_options(conn)
    raise ValueError(f"connection {conn_id!r} has type {conn.conn_type!r}; expected aws, google_cloud_platform or wasb")


def check_bucket(table_uri: str, storage_options: Mapping[str, Any] | None = None) -> None:
    """Raise `BucketNotFoundError` when the bucket (container) of an object-store table does not exist, so
    a missing bucket is not mistaken for a table not created yet. One request through the table's store
    (its retries and error classification apply); local paths and other schemes are not checked."""
    store = None if is_local(table_uri) else DeltaLog.for_table(table_uri, storage_options).store
    check = getattr(store, "check_bucket", None)
    if check is not None:
        check()


class DeltaTableHook(BaseHook):
    """The log of one Delta table, read with credentials from `storage_conn_id` (or none, locally)."""

    conn_name_attr = "storage_conn_id"
    hook_name = "Delta Lake table"

    def __init__(self, table_uri: str, storage_conn_id: str | None = None) -> None:
        super().__init__()
        self.table_uri = table_uri
        self.storage_conn_id = storage_conn_id

    def storage_options(self) -> dict[str, Any]:
        """fsspec options for the table (secrets included: keep them out of logs and XCom)."""
        if not self.storage_conn_id:
            return {}
        conn = self.get_connection(self.storage_conn_id)
        return storage_options_from_connection(conn, self.storage_conn_id)

    def delta_log(self) -> DeltaLog:
        """The (cached) `DeltaLog` of the table."""
        return DeltaLog.for_table(self.table_uri, self.storage_options())

    def latest_version(self) -> int:
        """The newest version, from the log listing alone."""
        return self.delta_log().latest_version()

    def check_location(self) -> None:
        """Refuse a malformed S3 endpoint (`InvalidArgumentError`, before any request) or a missing bucket."""
        options = self.storage_options()
        check_endpoint(self.table_uri, options)
        check_bucket(self.table_uri, options)
