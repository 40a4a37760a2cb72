"""The one place a Spark master becomes a SparkSession: `sc://host:port` is a Spark Connect server
(`SparkSession.builder.remote`), anything else (`local[...]`, `spark://`, `yarn`, `k8s://`) a classic
session started in this process. Used by the CLI (`--master`) and the command layer's default factory."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

#: The URL scheme of a Spark Connect server.
CONNECT_SCHEME = "sc://"


def is_connect_master(master: str | None) -> bool:
    """True when `master` names a Spark Connect server (`sc://host:port[/;param=value...]`)."""
    return bool(master) and str(master).strip().lower().startswith(CONNECT_SCHEME)


def is_connect_session(spark: Any) -> bool:
    """True for a Spark Connect client session (`pyspark.sql.connect.session.SparkSession`)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def spark_session(
    master: str | None,
    storage_options: Mapping[str, Any],
    *,
    app_name: str,
    py_files: Sequence[str] = (),
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A SparkSession for the Spark engine at `master` (None: whatever spark-submit configured).

    Classic: the engine's settings (`SPARK_CONF`), S3A settings from `storage_options` and `conf` on the
    builder; this Python on the executors when Spark runs in this process. Connect (`sc://`): a client
    session; the same settings are set on the server session (static ones such as the Hadoop local
    filesystem belong to the server's start), and each of `py_files` (a zip of this package for a
    server whose Python does not have it) is added with `addArtifacts(..., pyfile=True)`, so the
    executors' Python UDFs and `mapInArrow` tasks import it.
    """
    from pyspark.sql import SparkSession

    from ..delta.engines.spark import SPARK_CONF, hadoop_s3a_conf

    settings = {**SPARK_CONF, **hadoop_s3a_conf(storage_options), **dict(conf or {})}
    if is_connect_master(master):
        assert master is not None
        builder = SparkSession.builder.remote(master.strip())
        spark = builder.getOrCreate()
        for key, value in settings.items():
            _set_runtime(spark, key, value)
        if py_files:
            spark.addArtifacts(*py_files, pyfile=True)
        return spark
    builder = SparkSession.builder.appName(app_name)
    if master:  # Spark in this process: its Python workers run this interpreter unless told otherwise
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        builder = builder.master(master)
        settings.setdefault("spark.ui.enabled", "false")
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if master:
        spark.sparkContext.setLogLevel("ERROR")
    return spark


def _set_runtime(spark: Any, key: str, value: str) -> None:
    """Set `key` on a Connect session; a static setting the server fixed at its start is left as it is."""
    try:
        spark.conf.set(key, value)
    except Exception as exc:  # AnalysisException CANNOT_MODIFY_CONFIG / static config: the server's value holds
        text = str(exc)
        if "CANNOT_MODIFY" not in text and "static" not in text.lower():
            raise


def application_id(spark: Any) -> str | None:
    """The Spark application id of a classic or Connect session (None when it cannot be read)."""
    if spark is None:
        return None
    if is_connect_session(spark):
        try:
            return str(spark.conf.get("spark.app.id"))
        except Exception:  # a server that does not expose it
            return None
    return str(spark.sparkContext.applicationId)


__all__ = ["CONNECT_SCHEME", "application_id", "is_connect_master", "is_connect_session", "spark_session"]
