"""`DeltaTableHook`: a table's log through storage credentials from an Airflow connection.

Connections become fsspec storage options:

- `aws` (`s3://`): `key`/`secret` from login/password and `token` from extra `aws_session_token`
  (without a login, the Amazon provider's resolved credentials, role assumption included, when it
  is installed); `endpoint_url` and `region_name` from extra.
- `google_cloud_platform` (`gs://`): `token` from extra `key_path` or `keyfile_dict`; `project`.
- `wasb` (`abfs://`, `az://`): `account_name` (login or host), `account_key` (password), and
  `sas_token`, `connection_string`, `tenant_id`, `client_id`, `client_secret` from extra.

The options hold secrets: they are passed in memory or through the environment of the spark-submit
process, never logged, templated, put on a command line or returned as XCom.

`check_endpoint` and `check_bucket` tell a misconfigured location from a table that does not exist
yet: a malformed endpoint URL is an `InvalidArgumentError` before any request, and a missing bucket
(container) is a `BucketNotFoundError`, where the log alone would only say "no `_delta_log`".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from airflow.providers.common.compat.sdk import BaseHook

from ..delta import DeltaLog
from ..delta.errors import BucketNotFoundError  # noqa: F401 (re-exported: what `check_bucket` raises)
from ..delta.storage import is_local
from ..delta.storage.s3 import check_s3_endpoint


def _extra(conn: Any) -> dict[str, Any]:
    extra = conn.extra_dejson if hasattr(conn, "extra_dejson") else json.loads(conn.extra or "{}")
    return dict(extra or {})


def _aws_options(conn: Any, conn_id: str) -> dict[str, Any]:
    extra = _extra(conn)
    opts: dict[str, Any] = {}
    key, secret, token = conn.login, conn.password, extra.get("aws_session_token")
    if not (key and secret):
        try:  # the Amazon provider resolves profiles, role assumption, web identity...
            from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

            creds = AwsBaseHook(aws_conn_id=conn_id, client_type="s3").get_credentials()
            key, secret, token = creds.access_key, creds.secret_key, creds.token
        except ImportError:
            pass
    if key and secret:
        opts["key"], opts["secret"] = key, secret
    if token:
        opts["token"] = token
    endpoint = extra.get("endpoint_url") or (extra.get("service_config", {}).get("s3", {}) or {}).get("endpoint_url")
    if endpoint:
        opts["endpoint_url"] = endpoint
    region = extra.get("region_name")
    if region:
        opts["client_kwargs"] = {"region_name": region}
    return opts


def _gcp_options(conn: Any) -> dict[str, Any]:
    extra = {k.removeprefix("extra__google_cloud_platform__"): v for k, v in _extra(conn).items()}
    opts: dict[str, Any] = {}
    if extra.get("keyfile_dict"):
        kd = extra["keyfile_dict"]
        opts["token"] = json.loads(kd) if isinstance(kd, str) else kd
    elif extra.get("key_path"):
        opts["token"] = extra["key_path"]
    if extra.get("project"):
        opts["project"] = extra["project"]
    return opts


def _wasb_options(conn: Any) -> dict[str, Any]:
    extra = _extra(conn)
    opts: dict[str, Any] = {}
    account = conn.login or (conn.host or "").split(".")[0] or None
    if account:
        opts["account_name"] = account
    if conn.password:
        opts["account_key"] = conn.password
    for key in ("sas_token", "connection_string", "tenant_id", "client_id", "client_secret"):
        if extra.get(key):
            opts[key] = extra[key]
    return opts


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


def check_endpoint(table_uri: str, storage_options: Mapping[str, Any] | None = None) -> None:
    """Refuse a malformed S3 endpoint (from the storage options, else `AWS_ENDPOINT_URL_S3` /
    `AWS_ENDPOINT_URL`) with an `InvalidArgumentError` naming where it came from, before a request: the
    library's `check_s3_endpoint`.

    botocore raises a bare `ValueError("Invalid endpoint")` at the first request for some of these and
    reads others (`ftp://...`) as a retryable failure; neither is "waiting for the table"."""
    check_s3_endpoint(table_uri, storage_options)


def check_bucket(table_uri: str, storage_options: Mapping[str, Any] | None = None) -> None:
    """Raise `BucketNotFoundError` when the bucket (container) of an object-store table does not exist.

    One request through the table's store (its `check_bucket`: S3 `HeadBucket`, `info` of the container
    on GCS and Azure), so its retries and error classification apply: denied access is a `StorageError`,
    throttling a transient one. Local paths and other schemes are not checked."""
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
        """Refuse a malformed endpoint or a missing bucket (see `check_endpoint`, `check_bucket`)."""
        options = self.storage_options()
        check_endpoint(self.table_uri, options)
        check_bucket(self.table_uri, options)
