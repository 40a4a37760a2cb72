"""`SnapshotReplayOperator` and `TombstoneReportOperator`: the bundled job on a SparkSubmit connection.

Both subclass `SparkSubmitOperator`, so the connection handling, cluster-mode driver tracking,
`on_kill` and retries are Spark's provider's own. `execute()` adds the job's arguments, ships the
library with `--py-files` (workers need only pyspark), runs spark-submit, and reads the job's JSON
result back; a small summary is the XCom value, the full result stays at `result_uri`.

`submit=False` runs the same job code in the worker process with the local engine: no JVM, which is
what DAG unit tests want (see `airflow_delta_provider.testing`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.common.compat.sdk import AirflowException

try:
    from airflow.providers.common.compat.sdk import AirflowFailException
except ImportError:  # pragma: no cover
    from airflow.exceptions import AirflowFailException

from ..checks import failed_checks_message, validate_checks
from ..delta.engines.spark import SPARK_CONF
from ..delta.errors import DeltaError, error_from_dict
from ..delta.storage import is_local, local_path
from ..jobs import DAEMON_MODULE_CONF, WORKER_DAEMON_MODULE, build_py_files_zip, driver_jvm, job_script, runner
from ..jobs import class_archive as cds
from ..version_watch import as_version

if TYPE_CHECKING:  # pragma: no cover
    from airflow.providers.common.compat.sdk import Context


class DeltaJobError(AirflowException):
    """The job failed; `error` is its typed `DeltaError` (`error_class`, table, version, file)."""

    def __init__(self, error: DeltaError, result: Mapping[str, Any]) -> None:
        self.error = error
        self.error_class = str(result.get("error_class"))
        self.result = dict(result)
        super().__init__(f"Delta job failed: {self.error_class}: {error}")


class DeltaCheckFailed(AirflowFailException):
    """A declarative check of the table state failed (not retried: the state will not change by retrying)."""


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", text)


class DeltaJobOperator(SparkSubmitOperator):
    """Submit the bundled Delta job for one action (base of the concrete operators).

    `class_archive`: a path, on the machine that runs the driver, for a JDK class-data sharing archive
    of the driver JVM (opt-in; `jobs/class_archive.py`). The first run records it at exit
    (`-XX:ArchiveClassesAtExit`, a slower run) into a temp file moved into place only when the run
    succeeded; later runs start with `-XX:SharedArchiveFile` (seconds less JVM class loading). Added to
    `spark.driver.extraJavaOptions` (a value given in `conf` is kept; one that already sets CDS wins).
    Client deploy mode only (the driver is the spark-submit process): ignored with a warning in cluster
    mode. The path may not contain whitespace or quotes. Delete the file to re-record after upgrading
    Spark or Java (a mismatched archive is refused with a warning and the JVM runs without it).

    `quick_start_driver` (default True) starts the driver JVM with the C1 JIT only
    (`-XX:TieredStopAtLevel=1`, `jobs/driver_jvm.py`): the job's driver is short-lived, and the C2
    compiler's work would not pay off (the L benchmark job: 25 s to 21 s on 2 cores). Kept out when
    `spark.driver.extraJavaOptions` in `conf` already chooses a JIT; turn it off for long `local[*]` jobs,
    whose driver JVM is also the executor.

    `quick_start_workers` (default True) starts the Python worker daemon of a `local[*]` master as
    `airflow_delta_provider.jobs.worker_daemon` (`spark.python.daemon.module`), which loads PySpark
    from its installed, byte-compiled copy when that is the version of Spark's `pyspark.zip`: each
    Python worker then skips compiling PySpark (~0.4 s of CPU each here). A daemon module given in
    `conf` stands. Cluster masters are left alone: a daemon module must be importable before the
    `--py-files` arrive, so set it in `conf` only where the workers' Python has this provider installed.
    """

    action: str = ""
    template_fields: Sequence[str] = (
        *SparkSubmitOperator.template_fields,
        "table_uri",
        "version",
        "timestamp",
        "result_uri",
        "retention_hours",
    )

    def __init__(
        self,
        *,
        table_uri: str,
        version: int | str | None = None,
        timestamp: str | None = None,
        engine: str = "auto",
        result_uri: str | None = None,
        storage_conn_id: str | None = None,
        snapshot_partitions: int = 50,
        include_files: bool = False,
        auto_threshold_mb: float | None = None,
        submit: bool = True,
        ship_library: bool = True,
        conn_id: str = "spark_default",
        retention_hours: float | str | None = None,
        class_archive: str | None = None,
        quick_start_driver: bool = True,
        quick_start_workers: bool = True,
        **kwargs: Any,
    ) -> None:
        if class_archive is not None:
            cds.check_path(class_archive)
        if engine not in runner.ENGINES:
            raise ValueError(f"engine must be one of {runner.ENGINES}, got {engine!r}")
        if not submit and engine == "spark":
            raise ValueError("submit=False runs the job in the worker process: use engine='local' or 'auto'")
        kwargs.setdefault("name", f"airflow-delta-{self.action}")
        super().__init__(application=job_script(), conn_id=conn_id, **kwargs)
        self.table_uri = table_uri
        self.version = version
        self.timestamp = timestamp
        self.engine = engine
        self.result_uri = result_uri
        self.storage_conn_id = storage_conn_id
        self.snapshot_partitions = snapshot_partitions
        self.include_files = include_files
        self.auto_threshold_mb = auto_threshold_mb
        self.submit = submit
        self.ship_library = ship_library
        self.retention_hours = retention_hours
        self.class_archive = class_archive
        self.quick_start_driver = quick_start_driver
        self.quick_start_workers = quick_start_workers

    # -- job arguments --------------------------------------------------------------------------------
    def job_arguments(self, result_uri: str) -> list[str]:
        """The job's argv (no secrets: credentials travel in the environment)."""
        args = ["--table", self.table_uri, "--action", self.action, "--result-uri", result_uri]
        version = as_version(self.version, "version")
        if version is not None:
            args += ["--version", str(version)]
        elif self.timestamp:
            args += ["--timestamp", str(self.timestamp)]
        args += ["--engine", self.engine if self.submit else "local"]
        args += ["--snapshot-partitions", str(self.snapshot_partitions)]
        if self.include_files:
            args.append("--include-files")
        if self.auto_threshold_mb is not None:
            args += ["--auto-threshold-mb", str(self.auto_threshold_mb)]
        if self.retention_hours not in (None, ""):
            args += ["--retention-hours", str(float(self.retention_hours))]
        return args + self.extra_job_arguments()

    def extra_job_arguments(self) -> list[str]:
        return []

    def _storage_options(self) -> dict[str, Any]:
        if not self.storage_conn_id:
            return {}
        from ..hooks.delta import DeltaTableHook

        return DeltaTableHook(self.table_uri, self.storage_conn_id).storage_options()

    def _result_target(self, context: Context) -> tuple[str, str | None]:
        """(result URI, temp dir to remove afterwards)."""
        uri = self.result_uri
        if uri:
            if uri.endswith("/"):
                ti = context["ti"]
                uri += f"{_safe(ti.dag_id)}/{_safe(ti.task_id)}/{_safe(str(context.get('run_id')))}.json"
            return uri, None
        tmp = tempfile.mkdtemp(prefix="airflow-delta-")
        return os.path.join(tmp, "result.json"), tmp

    @staticmethod
    def _read_result(uri: str, options: Mapping[str, Any]) -> dict[str, Any] | None:
        try:
            if is_local(uri):
                with open(local_path(uri), encoding="utf-8") as fh:
                    return json.load(fh)
            import fsspec

            fs, path = fsspec.core.url_to_fs(uri, **dict(options))
            return json.loads(fs.cat_file(path))
        except (FileNotFoundError, ValueError):
            return None

    # -- execution ------------------------------------------------------------------------------------
    def _ensure_spark_submit_on_path(self) -> None:
        """Find `spark-submit` in the pyspark installation when PATH lacks it (a venv used without
        activation): the Spark provider runs the binary by name."""
        if shutil.which(self._spark_binary or "spark-submit"):
            return
        import importlib.util

        spec = importlib.util.find_spec("pyspark")
        if spec is None or not spec.origin:
            return
        bin_dir = os.path.join(os.path.dirname(spec.origin), "bin")
        if os.path.exists(os.path.join(bin_dir, "spark-submit")):
            self.log.info("spark-submit not on PATH; using %s", bin_dir)
            os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")

    def _interpreter_conf(self, conf: dict[str, Any], master: str, deploy_mode: str | None) -> dict[str, Any]:
        """`conf` with the Pythons of a driver that runs here (this interpreter, which has the provider)
        and, for a `local[*]` master, of its workers and, when they run this interpreter, their daemon
        (`quick_start_workers`); values already in `conf` stand."""
        if deploy_mode == "cluster":
            return conf
        defaults = {"spark.pyspark.driver.python": sys.executable}
        if master.startswith("local"):
            defaults["spark.pyspark.python"] = sys.executable
            # only where the workers' Python is this one (which has the provider to run the daemon)
            if self.quick_start_workers and conf.get("spark.pyspark.python", sys.executable) == sys.executable:
                defaults[DAEMON_MODULE_CONF] = WORKER_DAEMON_MODULE
        return {**defaults, **conf}

    def _quick_start_conf(self, conf: dict[str, Any]) -> dict[str, Any]:
        """`conf` with the driver JVM's C1-only JIT added (`quick_start_driver`)."""
        if not self.quick_start_driver:
            return conf
        key = "spark.driver.extraJavaOptions"
        return {**conf, key: driver_jvm.quick_start(None if conf.get(key) is None else str(conf[key]))}

    def _class_archive_conf(self, deploy_mode: str | None) -> tuple[dict[str, Any], str, str | None] | None:
        """This run's conf with the driver JVM pointed at `class_archive` (or recording it), the archive
        and the temp path to promote; None when there is nothing to add."""
        if not self.class_archive:
            return None
        if deploy_mode == "cluster":
            self.log.warning("class_archive is ignored in cluster deploy mode (the driver JVM runs on the cluster)")
            return None
        key = "spark.driver.extraJavaOptions"
        current = None if self.conf.get(key) is None else str(self.conf[key])
        if cds.has_user_cds_option(current):
            self.log.info("%s already sets class-data sharing: class_archive not applied", key)
            return None
        archive = os.path.abspath(os.path.expanduser(self.class_archive))
        value, tmp = cds.java_options(archive, current, recorded=cds.is_recorded(archive))
        if tmp:
            os.makedirs(os.path.dirname(archive), exist_ok=True)  # a JVM that cannot write it at exit fails
            self.log.info("recording the driver's class archive %s (this run is slower)", archive)
        else:
            self.log.info("the driver JVM uses the class archive %s", archive)
        return {**self.conf, key: value}, archive, tmp

    def _submit(self, context: Context, job_args: list[str], options: Mapping[str, Any], result_uri: str) -> None:
        self.application_args = job_args
        if self.ship_library:
            self.py_files = ",".join(filter(None, [self.py_files, build_py_files_zip()]))
        self.conf = {**SPARK_CONF, **(self.conf or {})}
        self._ensure_spark_submit_on_path()
        hook = self._get_hook()
        deploy_mode = hook._connection.get("deploy_mode")
        if deploy_mode == "cluster" and not self.result_uri:
            raise ValueError("result_uri is required in cluster deploy mode (the driver runs on the cluster)")
        self.conf = self._interpreter_conf(self.conf, str(hook._connection.get("master", "")), deploy_mode)
        if options:
            if hook._is_yarn or hook._is_kubernetes or deploy_mode == "cluster":
                raise AirflowException(
                    "storage credentials can only be handed to a client-mode driver outside YARN/Kubernetes "
                    "(elsewhere spark-submit would put them on its command line); give the cluster its own "
                    "credentials and drop storage_conn_id"
                )
            self.env_vars = {**(self.env_vars or {}), runner.STORAGE_OPTIONS_ENV: json.dumps(options)}
        self.conf = self._quick_start_conf(self.conf)
        archive_conf = self._class_archive_conf(deploy_mode)
        self._hook = None  # rebuilt by SparkSubmitOperator.execute with the final settings
        if archive_conf is None:
            super().execute(context)
            return
        conf = self.conf
        self.conf, archive, tmp = archive_conf
        try:
            super().execute(context)
        except BaseException:
            if tmp:
                cds.discard(tmp)
            raise
        finally:
            self.conf = conf  # the archive option is this run's: a later execute() decides afresh
        if tmp and cds.promote(tmp, archive):
            self.log.info("class archive recorded: %s", archive)
        elif tmp:
            self.log.warning("the driver JVM wrote no class archive (a JDK without CDS?): nothing recorded")

    def execute(self, context: Context) -> Any:
        result_uri, tmp = self._result_target(context)
        job_args = self.job_arguments(result_uri)
        options = self._storage_options()
        try:
            if not self.submit:
                _, result = runner.run(job_args, storage_options=options)
            else:
                try:
                    self._submit(context, job_args, options, result_uri)
                except AirflowException as exc:
                    result = self._read_result(result_uri, options)
                    if result is not None and result.get("status") == "error":
                        error = error_from_dict(result)
                        raise DeltaJobError(error, result) from exc
                    raise
                result = self._read_result(result_uri, options)
                if result is None:
                    raise AirflowException(f"the Delta job finished but wrote no result at {result_uri}")
            if result.get("status") != "success":
                raise DeltaJobError(error_from_dict(result), result)
            return self.summarize(result, context, None if tmp else result_uri)
        finally:
            if tmp:
                shutil.rmtree(tmp, ignore_errors=True)

    def summarize(self, result: dict[str, Any], context: Context, result_uri: str | None) -> dict[str, Any]:
        raise NotImplementedError


class SnapshotReplayOperator(DeltaJobOperator):
    """Replay a table's log at a version (latest, `version` or `timestamp`), report its state, check it.

    XCom: `{table_uri, version, timestamp, operation, num_files, size_bytes, num_tombstones,
    protocol, partition_columns, set_transactions, checkpoint_version, engine, spark_app_id,
    checks, result_uri}`. `checks` (see `airflow_delta_provider.checks`) fail the task with every
    failed check's message (`DeltaCheckFailed`, not retried).
    """

    action = "snapshot"
    template_fields: Sequence[str] = (*DeltaJobOperator.template_fields, "checks")

    def __init__(self, *, checks: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.checks = dict(checks) if checks else None
        if self.checks:
            validate_checks(self.checks, allow_templates=True)  # fail at parse time on typos

    def extra_job_arguments(self) -> list[str]:
        return ["--checks", json.dumps(validate_checks(self.checks))] if self.checks else []

    def summarize(self, result: dict[str, Any], context: Context, result_uri: str | None) -> dict[str, Any]:
        summary = {
            "table_uri": result["table"],
            "version": result["version"],
            "timestamp": result["timestamp"],
            "timestamp_ms": result["timestamp_ms"],
            "operation": result["operation"],
            "num_files": result["num_files"],
            "size_bytes": result["size_bytes"],
            "num_tombstones": result["num_tombstones"],
            "protocol": result["protocol"],
            "partition_columns": result["partition_columns"],
            "set_transactions": result["set_transactions"],
            "checkpoint_version": result["checkpoint_version"],
            "small_file_ratio": result.get("file_summary", {}).get("small_file_ratio"),
            "engine": result["engine"],
            "spark_app_id": result.get("spark_app_id"),
            "checks": {r["name"]: r["passed"] for r in result.get("checks", [])},
            "result_uri": result_uri,
        }
        failed = failed_checks_message(result.get("checks", []))
        if failed:
            where = f"{result['table']} at version {result['version']}"
            raise DeltaCheckFailed(f"Delta table checks failed for {where}: {failed}")
        self.log.info(
            "%s at version %s: %s files, %s bytes",
            result["table"],
            result["version"],
            result["num_files"],
            result["size_bytes"],
        )
        return summary


class TombstoneReportOperator(DeltaJobOperator):
    """Report tombstones: retained vs past retention (safe for VACUUM), bytes reclaimable, per partition.

    Read-only: it deletes nothing. `retention_hours` overrides `delta.deletedFileRetentionDuration`.
    The full report (JSON, plus Markdown and HTML renderings, `report_formats`) goes to `result_uri`;
    XCom: `{table_uri, version, num_tombstones, retained, expired, retained_bytes, reclaimable_bytes,
    removed_without_size, oldest_deletion_ms, newest_deletion_ms, num_partitions, retention, engine,
    result_uri, reports}`.
    """

    action = "tombstones"

    def __init__(self, *, report_formats: Sequence[str] = ("md", "html"), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.report_formats = tuple(report_formats)

    def extra_job_arguments(self) -> list[str]:
        if not self.report_formats or not self.result_uri:  # renderings live beside a kept result
            return []
        return ["--report-formats", ",".join(self.report_formats)]

    def summarize(self, result: dict[str, Any], context: Context, result_uri: str | None) -> dict[str, Any]:
        keys = (
            "version",
            "num_tombstones",
            "retained",
            "expired",
            "retained_bytes",
            "reclaimable_bytes",
            "removed_without_size",
            "oldest_deletion_ms",
            "newest_deletion_ms",
            "retention",
            "engine",
        )
        summary = {"table_uri": result["table"], **{k: result[k] for k in keys}}
        summary["num_partitions"] = len(result.get("partitions", {}))
        summary["result_uri"] = result_uri
        summary["reports"] = result.get("reports", {})
        self.log.info(
            "%s at version %s: %s tombstones, %s past retention (%s bytes reclaimable); nothing deleted",
            result["table"],
            result["version"],
            result["num_tombstones"],
            result["expired"],
            result["reclaimable_bytes"],
        )
        return summary
