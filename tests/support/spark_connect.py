"""A real Spark Connect server on 127.0.0.1 for tests, one per pytest session, and client sessions to it.

The server is `org.apache.spark.sql.connect.service.SparkConnectServer` started with pyspark's own
`spark-submit` and connect jar (`local[2]`, the engine's settings, no UI), its Python workers this venv's
interpreter (which has the provider installed: no artifacts needed). It is started on first use and
stopped when the pytest session ends (`config.add_cleanup`), so every module that imports the
`spark_connect_server` fixture shares it.

A Connect client session built with `SparkSession.builder.remote(...)` switches the whole process to
Connect mode (PySpark sets `SPARK_CONNECT_MODE_ENABLED`, which routes `pyspark.sql.functions` to Connect):
`connect_session` restores the environment when it stops the session, so later modules' classic
`local[2]` sessions work again. Never hold a classic and a Connect session at the same time.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from support.spark_cluster import SPARK_HOME, _stop, free_port, spark_bin, spark_env

CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
#: Process-wide variables PySpark sets when a Connect session is created.
_CONNECT_ENV = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")


@dataclass
class ConnectServer:
    host: str
    port: int
    log: Path
    proc: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        """The `sc://` URL clients (and `deltalog --master`) connect to."""
        return f"sc://{self.host}:{self.port}"


def connect_jar() -> Path:
    (jar,) = (SPARK_HOME / "jars").glob("spark-connect_*.jar")
    return jar


def server_conf(port: int) -> dict[str, str]:
    from airflow_delta_provider.delta.engines.spark import SPARK_CONF

    return {
        **SPARK_CONF,
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.default.parallelism": "2",
        "spark.sql.shuffle.partitions": "2",
    }


@contextmanager
def connect_server(workdir: Path, master: str = "local[2]", timeout: float = 180.0) -> Iterator[ConnectServer]:
    """A Spark Connect server on 127.0.0.1 at a free port, stopped (its process group) on exit."""
    port = free_port()
    log = workdir / "connect-server.log"
    argv = [spark_bin("spark-submit"), "--master", master, "--class", CONNECT_SERVER_CLASS]
    for key, value in server_conf(port).items():
        argv += ["--conf", f"{key}={value}"]
    argv.append(str(connect_jar()))
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=spark_env(), start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while "Spark Connect server started" not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Spark Connect server did not start:\n{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.5)
        yield ConnectServer("127.0.0.1", port, log, proc)
    finally:
        _stop(proc)


_SERVER: ConnectServer | None = None


@pytest.fixture(scope="session")
def spark_connect_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> ConnectServer:
    """The session's Spark Connect server (started once, whichever module asks first)."""
    global _SERVER
    if _SERVER is None or _SERVER.proc.poll() is not None:
        context = connect_server(tmp_path_factory.mktemp("spark-connect"))
        server = context.__enter__()

        def stop() -> None:
            global _SERVER
            context.__exit__(None, None, None)
            _SERVER = None

        request.config.add_cleanup(stop)
        _SERVER = server
    return _SERVER


def restore_connect_env(saved: dict[str, str | None]) -> None:
    """Put back the process-wide Connect variables as they were in `saved`."""
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def stop_classic_session() -> None:
    """Stop this process's classic SparkContext, if any: PySpark refuses to start a Connect client beside one
    (SESSION_ALREADY_EXIST), and the classic Spark test modules leave the shared local[2] session running."""
    from pyspark import SparkContext

    if SparkContext._active_spark_context is not None:
        from pyspark.sql import SparkSession

        (SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()).stop()


@contextmanager
def connect_session(server: ConnectServer) -> Iterator[Any]:
    """A Connect client session to `server` (through `commands.spark_session`, as the CLI builds it),
    stopped on exit with the process's Connect mode undone."""
    from airflow_delta_provider.commands.spark_session import spark_session

    stop_classic_session()
    saved = {key: os.environ.get(key) for key in _CONNECT_ENV}
    spark = spark_session(server.url, {}, app_name="delta-connect-tests")
    try:
        yield spark
    finally:
        try:
            spark.stop()
        finally:
            restore_connect_env(saved)
