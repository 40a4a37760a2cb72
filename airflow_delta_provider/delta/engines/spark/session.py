"""The Spark engine's session plumbing: the settings it relies on, `s3a` options, the session's API mode
(classic or Spark Connect), Hadoop paths, and `run_spark`, which turns a JVM or executor failure into a typed
error naming the table. Every other module of the engine runs its Spark actions through these.

Needs `pyspark` only when a function that uses it is called.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any, TypeVar

from ...errors import ERROR_CLASSES, DeltaError, EngineError, StorageError, error_from_dict
from ...storage import is_local, local_path, s3fs_options

_EXECUTOR_ERROR = re.compile(r"airflow_delta_provider\.delta\.errors\.(?P<cls>\w+): (?P<msg>[^\n]+)")
_VERSION_IN = re.compile(r"version=(?P<v>\d+)")
#: The file a rendered DeltaError names: the last field of its trailing `[table=..., version=..., file=...]`.
_FILE_IN = re.compile(r"[\[ ]file=(?P<f>[^\]]+)\]\s*$")
_T = TypeVar("_T")

#: Spark settings the engine relies on: the local filesystem without Hadoop's `.crc` checks (log
#: directories often hold stale `.crc` sidecar files that are not Hadoop checksums).
SPARK_CONF: dict[str, str] = {
    "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
    "spark.sql.session.timeZone": "UTC",
}


def hadoop_s3a_conf(storage_options: Mapping[str, Any]) -> dict[str, str]:
    """Spark settings for `s3a://` from fsspec/s3fs-style storage options (key, secret, token, endpoint_url).

    Set on the session in the driver process, never on a command line; Spark's UI redacts them.
    """
    storage_options = s3fs_options(storage_options)  # delta-rs option names too
    conf: dict[str, str] = {}
    key, secret, token = storage_options.get("key"), storage_options.get("secret"), storage_options.get("token")
    if key and secret:
        conf["spark.hadoop.fs.s3a.access.key"] = str(key)
        conf["spark.hadoop.fs.s3a.secret.key"] = str(secret)
        provider = "SimpleAWSCredentialsProvider"
        if token:
            conf["spark.hadoop.fs.s3a.session.token"] = str(token)
            provider = "TemporaryAWSCredentialsProvider"
        conf["spark.hadoop.fs.s3a.aws.credentials.provider"] = f"org.apache.hadoop.fs.s3a.{provider}"
    endpoint = storage_options.get("endpoint_url")
    if endpoint:
        conf["spark.hadoop.fs.s3a.endpoint"] = str(endpoint)
        conf["spark.hadoop.fs.s3a.path.style.access"] = "true"
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(str(endpoint).startswith("https")).lower()
    region = (storage_options.get("client_kwargs") or {}).get("region_name")
    if region:
        conf["spark.hadoop.fs.s3a.endpoint.region"] = str(region)
    return conf


def is_connect(spark: Any) -> bool:
    """True for a Spark Connect client session (`pyspark.sql.connect.session.SparkSession`)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def match_session_mode(spark: Any) -> None:
    """Put this process in `spark`'s API mode, or say why it cannot be.

    PySpark routes `pyspark.sql.functions` (every Column this engine builds) by a process-wide mode:
    Connect when `SPARK_CONNECT_MODE_ENABLED` is set, which `SparkSession.builder.remote(...)` does and
    `pyspark.sql.connect.session.SparkSession.builder` does not. A Connect session in a classic process
    switches the process to Connect (as `builder.remote` would have); a classic session in a Connect
    process is an `EngineError`: one process holds one kind of session at a time.
    """
    import os

    from pyspark.sql.utils import is_remote

    if is_connect(spark):
        if not is_remote():
            os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    elif is_remote():
        raise EngineError(
            "A classic SparkSession in a process in Spark Connect mode (SPARK_CONNECT_MODE_ENABLED is set: a "
            "Connect session was built here): use the Connect session, or a process of its own for classic Spark"
        )


def spark_path(uri: str) -> str:
    """A URI Spark's Hadoop filesystems read: `file:///abs` locally, `s3a://` for `s3://`."""
    if is_local(uri):
        return "file://" + local_path(uri)
    if uri.startswith("s3://"):
        return "s3a://" + uri[len("s3://") :]
    return uri


def in_background(action: Callable[[], _T]) -> Future[_T]:
    """Start `action` (driver code that runs Spark jobs) in a daemon thread; its result or error
    is the future's. Daemon, so a driver that fails meanwhile still exits."""
    future: Future[_T] = Future()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(action())
        except BaseException as exc:  # handed to whoever waits for the result
            future.set_exception(exc)

    threading.Thread(target=run, name="delta-spark-engine", daemon=True).start()
    return future


def run_spark(action: Callable[[], Any], *, table: str, version: int | None = None) -> Any:
    """Run a Spark action; a JVM or executor failure becomes a typed error naming the table.

    A missing `s3a` filesystem (no hadoop-aws on the cluster) is said plainly.
    """
    try:
        return action()
    except DeltaError:
        raise
    except Exception as exc:  # Py4JJavaError, PythonException, AnalysisException: not importable here
        text = str(exc)
        raised = _EXECUTOR_ERROR.search(text)
        if raised and raised["cls"] in ERROR_CLASSES:  # a typed error raised on an executor
            where, file = _VERSION_IN.search(raised["msg"]), _FILE_IN.search(raised["msg"])
            raise error_from_dict(
                {
                    "error_class": raised["cls"],
                    "message": raised["msg"].strip(),
                    "table": table,
                    "version": int(where["v"]) if where else version,
                    "file": file["f"] if file else None,
                }
            ) from None
        if ("ClassNotFoundException" in text and "S3AFileSystem" in text) or 'No FileSystem for scheme "s3' in text:
            raise EngineError(
                "Spark cannot read s3a:// paths: the cluster lacks hadoop-aws and the AWS SDK bundle "
                "(add them with --packages org.apache.hadoop:hadoop-aws:<hadoop version> or to the cluster's jars), "
                "or use engine='local'",
                table=table,
                version=version,
            ) from None
        if "FileNotFoundException" in text or "PATH_NOT_FOUND" in text:
            raise StorageError(
                f"Spark could not find a log file (was the log cleaned up during the read?): {_first_line(text)}",
                table=table,
                version=version,
                transient=True,
            ) from None
        raise EngineError(
            f"Spark failed: {type(exc).__name__}: {_first_line(text)}", table=table, version=version
        ) from None


def _first_line(text: str) -> str:
    return next((line.strip()[:500] for line in text.splitlines() if line.strip()), "")
