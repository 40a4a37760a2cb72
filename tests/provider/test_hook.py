"""`DeltaTableHook`: Airflow connections turned into fsspec storage options."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("airflow")


from airflow_delta_provider.hooks.delta import DeltaTableHook, storage_options_from_connection

pytestmark = pytest.mark.airflow


# -- hook -----------------------------------------------------------------------------------------
def test_aws_connection_becomes_storage_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_DELTA_S3",
        json.dumps(
            {
                "conn_type": "aws",
                "login": "AKIAEXAMPLE",
                "password": "s3cr3t-value",
                "extra": {"endpoint_url": "http://127.0.0.1:9000", "region_name": "eu-west-1"},
            }
        ),
    )
    hook = DeltaTableHook("s3://bucket/table", "delta_s3")
    assert hook.storage_options() == {
        "key": "AKIAEXAMPLE",
        "secret": "s3cr3t-value",
        "endpoint_url": "http://127.0.0.1:9000",
        "client_kwargs": {"region_name": "eu-west-1"},
    }


def test_unsupported_connection_type_is_refused() -> None:
    class Conn:
        conn_type = "postgres"

    with pytest.raises(ValueError, match="expected aws"):
        storage_options_from_connection(Conn(), "pg")


def test_check_location_refuses_a_malformed_endpoint_before_any_request(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_delta_provider.delta.errors import InvalidArgumentError

    monkeypatch.setenv(
        "AIRFLOW_CONN_DELTA_S3_BAD",
        json.dumps({"conn_type": "aws", "login": "k", "password": "s", "extra": {"endpoint_url": "127.0.0.1:9000"}}),
    )
    with pytest.raises(InvalidArgumentError, match="endpoint"):
        DeltaTableHook("s3://bucket/table", "delta_s3_bad").check_location()
    DeltaTableHook(".", None).check_location()  # a local path: nothing to check
