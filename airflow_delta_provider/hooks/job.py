"""`DeltaJobHook`: run one command-layer `Request` where it should, and read its result back.

As `SparkJDBCHook` runs its bundled script, this hook runs the bundled job (`jobs/delta_job.py`) in this
process with the local engine, or with spark-submit through the Spark provider's `SparkSubmitHook`, and
reads the JSON result back; a result with `status: error` is a `DeltaJobError` carrying the typed error.
Storage credentials reach a submitted job only through the spark-submit process's environment
(`DELTA_STORAGE_OPTIONS`): never its argv, a log line or a result.

On a Spark Connect connection (conn type `spark_connect`) the Spark runs need no spark-submit and no JVM
here: the command layer runs in this process against a Connect session built from the Spark provider's
`SparkConnectHook.get_connection_url()` (whose token is never logged or returned).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.common.compat.sdk import AirflowException, BaseHook

from ..commands.command import execute, plan_engine
from ..commands.request import Request
from ..commands.result_store import read_result
from ..commands.spark_session import spark_session
from ..delta.engines.spark import SPARK_CONF
from ..delta.errors import DeltaError, error_from_dict
from ..jobs import build_py_files_zip, job_script
from ..jobs.runner import STORAGE_OPTIONS_ENV, job_argv, request_from_job

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

#: Conf every spark-submit gets unless `conf` sets the key: Spark's INFO lines stay out of the task log.
SUBMIT_CONF_DEFAULTS: dict[str, str] = {"spark.log.level": "WARN"}


class DeltaJobError(AirflowException):
    """The job failed; `error` is its typed `DeltaError` (`error_class`, table, version, file)."""

    def __init__(self, error: DeltaError, result: Mapping[str, Any]) -> None:
        self.error = error
        self.error_class = str(result.get("error_class"))
        self.result = dict(result)
        super().__init__(f"Delta job failed: {self.error_class}: {error}")


#: The conn type of the Spark provider's `SparkConnectHook`: such a connection runs Spark over Connect.
SPARK_CONNECT_CONN_TYPE = "spark_connect"
#: Process-wide variables PySpark sets when a Connect session is created (restored after a run).
CONNECT_MODE_ENV = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")


def public_url(url: str) -> str:
    """A Connect URL without its parameters (`token`, `user_id`): what a log line may show."""
    return url.split(";", 1)[0].rstrip("/")


def spark_target(conn_id: str, deploy_mode: str | None = None) -> tuple[str, str | None, str]:
    """(master, deploy mode, spark-submit binary) of a SparkSubmit connection, read as the Spark provider
    reads it. An undefined connection is an error here, not a silent `--master yarn`."""
    conn = BaseHook.get_connection(conn_id)
    if conn.conn_type == "spark" and conn.host and ("://" in conn.host or not conn.port):
        master = conn.host
    else:
        master = f"{conn.conn_type}://{conn.host or ''}"
    if conn.port:
        master = f"{master}:{conn.port}"
    extra = conn.extra_dejson
    return master, deploy_mode or extra.get("deploy-mode"), extra.get("spark-binary") or "spark-submit"


class DeltaJobHook(BaseHook):
    """Runs one `Request` in this process or on Spark and returns its successful result.

    `spark_options` are `SparkSubmitHook` arguments, to which a submit adds `submit_settings`.
    `spark_submit`, when given, runs spark-submit with those settings instead of this hook's own
    `SparkSubmitHook` (the operators pass `SparkSubmitOperator.execute`, for its driver tracking).
    """

    conn_name_attr = "conn_id"
    default_conn_name = "spark_default"
    hook_name = "Delta Lake job"

    def __init__(
        self,
        conn_id: str = default_conn_name,
        *,
        deploy_mode: str | None = None,
        ship_library: bool = True,
        spark_submit: Callable[[dict[str, Any]], None] | None = None,
        **spark_options: Any,
    ) -> None:
        super().__init__()
        self.conn_id = conn_id
        self.deploy_mode = deploy_mode
        self.ship_library = ship_library
        self.spark_submit = spark_submit or self._submit_here
        self.spark_options = spark_options
        #: The `SparkSubmitHook` of this hook's own submit (`on_kill` kills its spark-submit).
        self.spark_hook: SparkSubmitHook | None = None
        #: The sessions of the running Connect run (`on_kill` interrupts and stops them).
        self.connect_sessions: list[SparkSession] = []

    def run(
        self, request: Request, result_uri: str | None = None, report_formats: Sequence[str] = (), *, why: str = ""
    ) -> dict[str, Any]:
        """Run `request` where its engine says and return the result (kept at `result_uri`, else in a
        temporary file); an error result raises `DeltaJobError`. `why`: the log's reason for a local run."""
        with tempfile.TemporaryDirectory(prefix="airflow-delta-", ignore_cleanup_errors=True) as tmp:
            target, kept = result_uri or os.path.join(tmp, "result.json"), bool(result_uri)
            if request.engine == "local":
                result = self._run_here(request, target, report_formats, why or "engine='local'")
            elif request.engine == "spark":
                result = self._run_spark(request, target, report_formats, kept=kept)
            else:
                result = self._run_auto(request, target, report_formats, kept=kept)
        if result.get("status") != "success":
            raise DeltaJobError(error_from_dict(result), result)
        self.log.info("%s ran on the %s engine; result at %s", request.action, result.get("engine"), target)
        return result

    def _run_here(
        self, request: Request, result_uri: str, formats: Sequence[str], why: str, segment: Any = None
    ) -> dict[str, Any]:
        """Run in this process; `segment` is the log segment `auto` already listed (not listed again)."""
        self.log.info("running %s in this process with the local engine (%s)", request.action, why)
        return execute(request, result_uri=result_uri, report_formats=formats, segment=segment)[1]

    def _run_auto(self, request: Request, result_uri: str, formats: Sequence[str], kept: bool) -> dict[str, Any]:
        """`engine="auto"`: in process on the segment just listed when the local engine will do (then Spark
        if it hits its memory limit, `ResourceLimitError`), else Spark."""
        segment = None
        try:
            planned, segment = plan_engine(request)
        except DeltaError:
            planned = "local"  # the in-process run reports the error (table not found, ...) as a result
        if planned == "local":
            why = "engine='auto': the log segment is under the threshold"
            result = self._run_here(replace(request, engine="local"), result_uri, formats, why, segment)
            if result.get("error_class") != "ResourceLimitError":
                return result
            self.log.info("the state would not fit the local engine's memory limit: running it on Spark")
        return self._run_spark(replace(request, engine="spark"), result_uri, formats, kept)

    def _run_spark(self, request: Request, result_uri: str, formats: Sequence[str], kept: bool) -> dict[str, Any]:
        """On Spark: in this process over Spark Connect on a `spark_connect` connection, else spark-submit."""
        if self.connect_url() is not None:
            return self._run_connect(request, result_uri, formats)
        return self._run_submitted(request, result_uri, formats, kept)

    def connect_url(self) -> str | None:
        """The connection's Spark Connect URL (`sc://host:port/;token=...`, a secret), None unless the
        connection is of type `spark_connect`; read once."""
        if not hasattr(self, "_connect_url"):
            conn = BaseHook.get_connection(self.conn_id)
            url = None
            if conn.conn_type == SPARK_CONNECT_CONN_TYPE:
                from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

                url = SparkConnectHook(self.conn_id).get_connection_url()
            self._connect_url: str | None = url
        return self._connect_url

    def _run_connect(self, request: Request, result_uri: str, formats: Sequence[str]) -> dict[str, Any]:
        """The command layer in this process on a Connect session (`commands.spark_session`: the engine's
        settings, S3A credentials, the operator's `conf`, the library zip as an artifact unless
        `ship_library=False`), stopped afterwards (no spark-submit, no JVM here). A VACUUM keeps a big
        plan's file list beside the result, as the spark-submit job does."""
        url = self.connect_url()
        assert url is not None
        request = request_from_job(request.to_json(), result_uri, request.storage_options)
        sessions: list[SparkSession] = []
        self.connect_sessions = sessions  # for on_kill
        py_files = [build_py_files_zip()] if self.ship_library else []  # as --py-files ships it to spark-submit

        def factory(options: Mapping[str, Any]) -> SparkSession:
            conf = self.spark_options.get("conf")
            sessions.append(spark_session(url, options, app_name="airflow-delta-job", py_files=py_files, conf=conf))
            return sessions[-1]

        self.log.info("running %s on Spark over Spark Connect at %s", request.action, public_url(url))
        saved = {key: os.environ.get(key) for key in CONNECT_MODE_ENV}
        try:
            return execute(request, result_uri=result_uri, report_formats=formats, spark_factory=factory)[1]
        finally:
            for spark in sessions:
                try:
                    spark.stop()
                except Exception as exc:  # the result stands; a session the server already dropped
                    self.log.warning("could not stop the Spark Connect session: %s", type(exc).__name__)
            for key, value in saved.items():  # the process leaves Connect mode (a later classic session works)
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    def _run_submitted(self, request: Request, result_uri: str, formats: Sequence[str], kept: bool) -> dict[str, Any]:
        options = request.storage_options
        try:
            self.spark_submit(self.submit_settings(request, result_uri, formats, kept=kept))
        except AirflowException as exc:
            result = read_result(result_uri, options)
            if result is not None and result.get("status") == "error":
                raise DeltaJobError(error_from_dict(result), result) from exc
            raise
        result = read_result(result_uri, options)
        if result is None:
            raise AirflowException(f"the Delta job finished but wrote no result at {result_uri}")
        return result

    def submit_settings(
        self, request: Request, result_uri: str, report_formats: Sequence[str] = (), *, kept: bool = True
    ) -> dict[str, Any]:
        """The job's `SparkSubmitHook` arguments: argv (no secrets), `py_files` with the library zip, `conf`
        with the engine's and the driver's Python, `env_vars` with the credentials. `kept`: `result_uri` is
        the caller's, not a temporary file (which a cluster-mode driver cannot write)."""
        master, deploy_mode, binary = spark_target(self.conn_id, self.deploy_mode)
        if deploy_mode == "cluster" and not kept:
            raise ValueError("result_uri is required in cluster deploy mode (the driver runs on the cluster)")
        py_files = self.spark_options.get("py_files")
        if self.ship_library:
            py_files = ",".join(filter(None, [py_files, build_py_files_zip()]))
        conf = {**SPARK_CONF, **SUBMIT_CONF_DEFAULTS, **(self.spark_options.get("conf") or {})}
        if deploy_mode != "cluster":  # a driver that runs here runs this interpreter, which has the provider
            defaults = {"spark.pyspark.driver.python": sys.executable}
            if master.startswith("local"):
                defaults["spark.pyspark.python"] = sys.executable
            conf = {**defaults, **conf}
        env_vars = self.spark_options.get("env_vars")
        if request.storage_options:
            if "yarn" in master or "k8s" in master or deploy_mode == "cluster":
                raise AirflowException(
                    "storage credentials can only be handed to a client-mode driver outside YARN/Kubernetes "
                    "(elsewhere spark-submit would put them on its command line); give the cluster its own "
                    "credentials and drop storage_conn_id"
                )
            env_vars = {**(env_vars or {}), STORAGE_OPTIONS_ENV: json.dumps(dict(request.storage_options))}
        self._ensure_on_path(binary)
        self.log.info("running %s on Spark (%s): spark-submit to %s", request.action, request.engine, master)
        argv = job_argv(request, result_uri, report_formats)
        return {"application_args": argv, "py_files": py_files, "conf": conf, "env_vars": env_vars}

    def _ensure_on_path(self, binary: str) -> None:
        """Put pyspark's `bin` on PATH when PATH lacks `binary` (a venv used without activation)."""
        spec = None if shutil.which(binary) else importlib.util.find_spec("pyspark")
        if spec is None or not spec.origin:
            return
        bin_dir = os.path.join(os.path.dirname(spec.origin), "bin")
        if os.path.exists(os.path.join(bin_dir, binary)):
            self.log.info("%s not on PATH; using %s", binary, bin_dir)
            os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")

    def _submit_here(self, settings: dict[str, Any]) -> None:
        options = {"name": "airflow-delta-job", **self.spark_options, **settings}
        self.spark_hook = SparkSubmitHook(conn_id=self.conn_id, deploy_mode=self.deploy_mode, **options)
        self.spark_hook.submit(job_script())

    def on_kill(self) -> None:
        """Kill the spark-submit (and the driver it tracks) this hook started, if any, and interrupt and stop
        its running Connect sessions."""
        if self.spark_hook is not None:
            self.spark_hook.on_kill()
        for spark in list(self.connect_sessions):
            try:
                spark.interruptAll()  # what runs now
                spark.stop()  # and whatever the run would start next fails
            except Exception as exc:  # a session already stopped
                self.log.warning("could not interrupt the Spark Connect session: %s", type(exc).__name__)
