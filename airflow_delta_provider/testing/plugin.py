"""The testing kit's pytest fixtures (registered as the ``pytest11`` plugin ``airflow_delta_provider``;
documented in `airflow_delta_provider.testing`)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_delta_provider.testing import DEFAULT_SCHEMA, DeltaLogBuilder, FakeClock

#: Credentials and region the loopback S3 server accepts (moto without authentication takes any).
S3_KEY, S3_SECRET, S3_REGION = "testing", "testing", "us-east-1"


@pytest.fixture
def delta_table(tmp_path: Path) -> DeltaLogBuilder:
    """A `DeltaLogBuilder` at ``tmp_path / "table"`` with `DEFAULT_SCHEMA`, not yet created."""
    return DeltaLogBuilder(tmp_path / "table", schema=DEFAULT_SCHEMA)


@pytest.fixture
def delta_clock() -> FakeClock:
    """A `FakeClock` at the builder's version 0 time, for ``DeltaLog(path, clock=delta_clock)``."""
    return FakeClock()


@pytest.fixture(scope="session")
def _delta_s3_endpoint() -> Iterator[str]:
    """moto's threaded S3 server on 127.0.0.1 and a free port, for the whole session."""
    pytest.importorskip("s3fs", reason="delta_s3_table needs s3fs (pip install 'airflow-delta-provider[s3]')")
    server_module = pytest.importorskip("moto.server", reason="delta_s3_table needs moto (pip install 'moto[server]')")
    if logging.getLogger("werkzeug").level == logging.NOTSET:  # one INFO line per request otherwise
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def delta_s3_table(_delta_s3_endpoint: str) -> DeltaLogBuilder:
    """The ``delta_table`` table in a new bucket on the loopback S3 server (``s3://<bucket>/table``);
    its ``storage_options`` are the library's (s3fs) names for ``DeltaLog(uri, storage_options=...)``."""
    import boto3

    bucket = f"delta-{uuid.uuid4().hex[:16]}"
    client = boto3.client(
        "s3",
        endpoint_url=_delta_s3_endpoint,
        region_name=S3_REGION,
        aws_access_key_id=S3_KEY,
        aws_secret_access_key=S3_SECRET,
    )
    client.create_bucket(Bucket=bucket)
    options = {
        "key": S3_KEY,
        "secret": S3_SECRET,
        "endpoint_url": _delta_s3_endpoint,
        "client_kwargs": {"region_name": S3_REGION},
    }
    return DeltaLogBuilder(f"s3://{bucket}/table", schema=DEFAULT_SCHEMA, storage_options=options)
