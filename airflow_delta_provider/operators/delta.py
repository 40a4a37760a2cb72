"""`SnapshotReplayOperator` and `TombstoneReportOperator`: the bundled job on a SparkSubmit connection.

Both subclass `SparkSubmitOperator`, so the connection handling, cluster-mode driver tracking,
`on_kill` and retries are Spark's provider's own. `execute()` adds the job's arguments, ships the
library with `--py-files` (workers need only pyspark), runs spark-submit, and reads the job's JSON
result back; a small summary is the XCom value, the full result stays at `result_uri`.

`submit=False` runs the same job code in the worker process with the local engine: no JVM, which is
what DAG unit tests want (see `airflow_delta_provider.testing`).

Provider conventions: each task links to its result (`DeltaResultLink`, the HTML report when there is
one), answers OpenLineage (`get_openlineage_facets_on_complete`, see `airflow_delta_provider.lineage`),
and templates its connection ids (`conn_id`, `storage_conn_id`). spark-submit runs with
`spark.log.level=WARN` unless `conf` sets it, so Spark's INFO lines stay out of the task log.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.common.compat.sdk import AirflowException, BaseOperatorLink, XCom

try:
    from airflow.providers.common.compat.sdk import AirflowFailException
except ImportError:  # pragma: no cover
    from airflow.exceptions import AirflowFailException

from ..commands.arguments import (
    as_version,
    is_template,
    optional,
    parse_choice,
    parse_count,
    parse_flag,
    parse_hours,
    parse_number,
    parse_ratio,
    parse_size,
)
from ..commands.checks import KNOWN_CHECKS, failed_checks_message, validate_checks
from ..commands.command import execute, plan_engine, read_result
from ..commands.commit_checks import validate_commit_checks, version_ranges
from ..commands.reports import REPORT_KINDS
from ..commands.request import ENGINES, VACUUM_MODES, Request, option_names
from ..delta.engines.spark import SPARK_CONF
from ..delta.errors import DeltaError, InvalidArgumentError, error_from_dict
from ..delta.protocol.optimize import DEFAULT_MIN_NUM_FILES, DEFAULT_SMALL_FILE_MB
from ..jobs import build_py_files_zip, job_script
from ..jobs.runner import STORAGE_OPTIONS_ENV, job_argv
from ..version_watch import last_version

if TYPE_CHECKING:  # pragma: no cover
    from airflow.providers.common.compat.sdk import Context
    from airflow.providers.openlineage.extractors import OperatorLineage

#: Conf every spark-submit gets unless the operator's `conf` sets the key: Spark 4's driver log level
#: (applied as the SparkContext starts), so the task log shows the job's lines and Spark's warnings only.
SUBMIT_CONF_DEFAULTS: dict[str, str] = {"spark.log.level": "WARN"}


class DeltaJobError(AirflowException):
    """The job failed; `error` is its typed `DeltaError` (`error_class`, table, version, file)."""

    def __init__(self, error: DeltaError, result: Mapping[str, Any]) -> None:
        self.error = error
        self.error_class = str(result.get("error_class"))
        self.result = dict(result)
        super().__init__(f"Delta job failed: {self.error_class}: {error}")


class DeltaCheckFailed(AirflowFailException):
    """A declarative check of the table state failed (not retried: the state will not change by retrying)."""


def _check_now(value: Any, parse: Callable[..., Any], argument: str, **options: Any) -> None:
    """Parse a templated field's value at `__init__` unless it is a template: a bad literal fails the DAG
    at parse time; a template is parsed when `execute` runs, once rendered (to a string)."""
    if not is_template(value):
        parse(value, argument, **options)


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", text)


def spark_target(conn_id: str, deploy_mode: str | None = None) -> tuple[str, str | None, str]:
    """(master, deploy mode, spark-submit binary) of a SparkSubmit connection, read from the connection
    as the Spark provider reads it (host holds the master URL; port appended; `deploy-mode` and
    `spark-binary` extras). An undefined connection is an error here, not a silent `--master yarn`."""
    from airflow.providers.common.compat.sdk import BaseHook

    conn = BaseHook.get_connection(conn_id)
    if conn.conn_type == "spark" and conn.host and ("://" in conn.host or not conn.port):
        master = conn.host
    else:
        master = f"{conn.conn_type}://{conn.host or ''}"
    if conn.port:
        master = f"{master}:{conn.port}"
    extra = conn.extra_dejson
    return master, deploy_mode or extra.get("deploy-mode"), extra.get("spark-binary") or "spark-submit"


def result_link(summary: Any) -> str:
    """The URL of a task's report from its XCom summary: the HTML report when there is one, else the
    full JSON result (`result_uri`); `file://` for a local path, the object-store URI otherwise; "" when
    the result was not kept (no `result_uri`)."""
    if not isinstance(summary, Mapping):
        return ""
    reports = summary.get("reports")
    target = (reports.get("html") if isinstance(reports, Mapping) else None) or summary.get("result_uri")
    if not isinstance(target, str) or not target:
        return ""
    from ..delta.storage import is_local, local_path

    return "file://" + local_path(target) if is_local(target) else target


class DeltaResultLink(BaseOperatorLink):
    """The "Delta report" link: the task's HTML report or full JSON result, read from its XCom
    (`reports.html`, else `result_uri`). Empty (hidden) when the task kept no result."""

    name = "Delta report"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        return result_link(XCom.get_value(ti_key=ti_key, key="return_value"))


class DeltaJobOperator(SparkSubmitOperator):
    """Run one command-layer action on a table (base of the concrete operators).

    Where it runs: `engine="local"` (or `submit=False`) runs the command in the worker process with
    the local engine, no JVM; `engine="spark"` submits the bundled job (spark-submit on the
    connection `conn_id`, conn type `spark`) with the Spark engine; `engine="auto"` (default) reads the
    log listing first and runs in process when the local engine will do it (the log segment is under
    `auto_threshold_mb` and its state fits the local memory limit), else submits with the Spark
    engine. The task log says which engine ran, why, and where the result went.

    `conn_id` and `storage_conn_id` are templated; the task links to its report (`DeltaResultLink`)
    and reports OpenLineage (the table as an input dataset, the operation as a run facet).
    """

    action: str = ""
    template_fields: Sequence[str] = (
        *SparkSubmitOperator.template_fields,
        "table_uri",
        "version",
        "timestamp",
        "result_uri",
        "retention_hours",
        "conn_id",
        "storage_conn_id",
    )
    operator_extra_links = (DeltaResultLink(),)

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
        deploy_mode: str | None = None,
        report_formats: Sequence[str] = ("md", "html"),
        **kwargs: Any,
    ) -> None:
        engine = parse_choice(engine, "engine", ENGINES)
        submit = parse_flag(submit, "submit")
        if not submit and engine == "spark":
            raise InvalidArgumentError(
                "submit=False runs the job in the worker process: use engine='local' or 'auto'", argument="submit"
            )
        _check_now(version, as_version, "version")
        _check_now(retention_hours, optional(parse_hours), "retention_hours")
        kwargs.setdefault("name", f"airflow-delta-{self.action}")
        super().__init__(application=job_script(), conn_id=conn_id, deploy_mode=deploy_mode, **kwargs)
        self.table_uri = table_uri
        self.version = version
        self.timestamp = timestamp
        self.engine = engine
        self.result_uri = result_uri
        self.storage_conn_id = storage_conn_id
        self.snapshot_partitions = parse_count(snapshot_partitions, "snapshot_partitions", minimum=1)
        self.include_files = parse_flag(include_files, "include_files")
        self.auto_threshold_mb = optional(parse_number)(auto_threshold_mb, "auto_threshold_mb")
        self.submit = submit
        self.ship_library = parse_flag(ship_library, "ship_library")
        self.retention_hours = retention_hours
        self.conn_id = conn_id
        self.spark_conn_id = conn_id
        self.spark_deploy_mode = deploy_mode
        self.report_formats = tuple(report_formats)
        #: The last job result this instance saw (success or error), for OpenLineage after the task.
        self._delta_result: dict[str, Any] | None = None

    # -- the request ----------------------------------------------------------------------------------
    def build_request(self, storage_options: Mapping[str, Any]) -> Request:
        """The command-layer request this task runs (templates already rendered), every argument read by
        the parser of its kind (`commands.arguments`): a bad one is an `InvalidArgumentError` naming it."""
        fields: dict[str, Any] = {}
        if self.auto_threshold_mb is not None:
            fields["auto_threshold_mb"] = parse_number(self.auto_threshold_mb, "auto_threshold_mb")
        taken = option_names(self.action)
        hours = optional(parse_hours)(self.retention_hours, "retention_hours")
        if hours is not None and "retention_hours" in taken:
            fields["retention_hours"] = hours
        include_files = parse_flag(self.include_files, "include_files")
        if "include_files" in taken:
            fields["include_files"] = include_files
        version = as_version(self.version, "version")
        submit = parse_flag(self.submit, "submit")
        return Request.make(
            table=self.table_uri,
            action=self.action,
            version=version,
            timestamp=None if version is not None else (self.timestamp or None),
            engine=parse_choice(self.engine, "engine", ENGINES) if submit else "local",
            storage_options=storage_options,
            snapshot_partitions=parse_count(self.snapshot_partitions, "snapshot_partitions", minimum=1),
            **fields,
            **self.extra_request_fields(),
        )

    def extra_request_fields(self) -> dict[str, Any]:
        return {}

    def report_formats_for(self, result_uri: str | None) -> Sequence[str]:
        """The renderings written beside a kept result (an action without a report gets none)."""
        if not result_uri or self.action not in REPORT_KINDS:
            return ()
        return self.report_formats

    def job_arguments(self, result_uri: str, storage_options: Mapping[str, Any] | None = None) -> list[str]:
        """The spark-submit job's argv for this task (no secrets: credentials travel in the environment)."""
        return job_argv(self.build_request(storage_options or {}), result_uri, self.report_formats_for(result_uri))

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

    # -- execution ------------------------------------------------------------------------------------
    def _ensure_spark_submit_on_path(self, binary: str) -> None:
        """Find `spark-submit` in the pyspark installation when PATH lacks it (a venv used without
        activation): the Spark provider runs the binary by name."""
        if shutil.which(binary):
            return
        import importlib.util

        spec = importlib.util.find_spec("pyspark")
        if spec is None or not spec.origin:
            return
        bin_dir = os.path.join(os.path.dirname(spec.origin), "bin")
        if os.path.exists(os.path.join(bin_dir, binary)):
            self.log.info("%s not on PATH; using %s", binary, bin_dir)
            os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")

    def _submit(self, context: Context, request: Request, options: Mapping[str, Any], result_uri: str) -> None:
        master, deploy_mode, binary = spark_target(self.spark_conn_id, self.spark_deploy_mode)
        if deploy_mode == "cluster" and not self.result_uri:
            raise ValueError("result_uri is required in cluster deploy mode (the driver runs on the cluster)")
        self.application_args = job_argv(request, result_uri, self.report_formats_for(self.result_uri))
        if self.ship_library:
            self.py_files = ",".join(filter(None, [self.py_files, build_py_files_zip()]))
        conf = {**SPARK_CONF, **SUBMIT_CONF_DEFAULTS, **(self.conf or {})}
        if deploy_mode != "cluster":  # a driver that runs here runs this interpreter, which has the provider
            defaults = {"spark.pyspark.driver.python": sys.executable}
            if master.startswith("local"):
                defaults["spark.pyspark.python"] = sys.executable
            conf = {**defaults, **conf}
        self.conf = conf
        self._ensure_spark_submit_on_path(binary)
        if options:
            if "yarn" in master or "k8s" in master or deploy_mode == "cluster":
                raise AirflowException(
                    "storage credentials can only be handed to a client-mode driver outside YARN/Kubernetes "
                    "(elsewhere spark-submit would put them on its command line); give the cluster its own "
                    "credentials and drop storage_conn_id"
                )
            self.env_vars = {**(self.env_vars or {}), STORAGE_OPTIONS_ENV: json.dumps(options)}
        self.log.info("running %s on Spark (%s): spark-submit to %s", self.action, request.engine, master)
        super().execute(context)

    def _run_submitted(
        self, context: Context, request: Request, options: Mapping[str, Any], result_uri: str
    ) -> dict[str, Any]:
        try:
            self._submit(context, request, options, result_uri)
        except AirflowException as exc:
            result = read_result(result_uri, options)
            if result is not None and result.get("status") == "error":
                self._delta_result = result
                raise DeltaJobError(error_from_dict(result), result) from exc
            raise
        result = read_result(result_uri, options)
        if result is None:
            raise AirflowException(f"the Delta job finished but wrote no result at {result_uri}")
        return result

    def _run_here(self, request: Request, result_uri: str, why: str, segment: Any = None) -> dict[str, Any]:
        """Run in this process; `segment` is the log segment `auto` already listed (not listed again)."""
        self.log.info("running %s in this process with the local engine (%s)", self.action, why)
        formats = self.report_formats_for(self.result_uri)
        _, result = execute(request, result_uri=result_uri, report_formats=formats, segment=segment)
        return result

    def execute(self, context: Context) -> Any:
        self._conn_id = self.spark_conn_id = self.conn_id  # rendered now (templated)
        options = self._storage_options()
        request = self.build_request(options)  # a bad argument fails here, before any temp dir or job
        result_uri, tmp = self._result_target(context)
        try:
            if request.engine == "local":
                why = "submit=False" if not self.submit else "engine='local'"
                result = self._run_here(request, result_uri, why)
            elif request.engine == "spark":
                result = self._run_submitted(context, request, options, result_uri)
            else:
                result = self._run_auto(context, request, options, result_uri)
            self._delta_result = result
            if result.get("status") != "success":
                raise DeltaJobError(error_from_dict(result), result)
            self.log.info("%s ran on the %s engine; result at %s", self.action, result.get("engine"), result_uri)
            return self.summarize(result, context, None if tmp else result_uri)
        finally:
            if tmp:
                shutil.rmtree(tmp, ignore_errors=True)

    def _run_auto(
        self, context: Context, request: Request, options: Mapping[str, Any], result_uri: str
    ) -> dict[str, Any]:
        """`engine="auto"`: in process when the listing says the local engine will do, else Spark."""
        segment = None
        try:
            planned, segment = plan_engine(request)
        except DeltaError:
            planned = "local"  # the in-process run reports the error (table not found, ...) as a result
        if planned == "local":
            local = replace(request, engine="local")
            why = "engine='auto': the log segment is under the threshold"
            result = self._run_here(local, result_uri, why, segment)
            if result.get("error_class") != "ResourceLimitError":
                return result
            self.log.info("the state would not fit the local engine's memory limit: submitting to Spark")
        return self._run_submitted(context, replace(request, engine="spark"), options, result_uri)

    def summarize(self, result: dict[str, Any], context: Context, result_uri: str | None) -> dict[str, Any]:
        raise NotImplementedError

    # -- OpenLineage ----------------------------------------------------------------------------------
    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage | None:
        """The table as an input dataset (namespace/name per OpenLineage's naming spec; schema, version,
        storage facets) and the operation as the `delta_operation` run facet. None when the task ran no
        job in this process or the OpenLineage provider is absent."""
        if self._delta_result is None:
            return None
        try:
            from ..lineage import operator_lineage
        except ImportError:  # the OpenLineage client is not installed: no lineage
            return None
        options = self._storage_options() if self.storage_conn_id else None
        return operator_lineage(self.action, self._delta_result, storage_options=options)

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> OperatorLineage | None:
        """As on completion: a failed check is reported as a failed data quality assertion."""
        return self.get_openlineage_facets_on_complete(task_instance)


#: `since_version` default: the version the previous successful run of this task checked (its XCom).
PREVIOUS_RUN = "previous"


class SnapshotReplayOperator(DeltaJobOperator):
    """Replay a table's log at a version (latest, `version` or `timestamp`), report its state, check it.

    `checks` (see `airflow_delta_provider.commands.checks` and `commands.commit_checks`) are evaluated
    at the replayed version and, with `since_version`, at every version in `(since_version, version]`,
    with the per-commit checks (append-only, protocol and schema changes, unknown removes, DV growth,
    allowed operations, missing commits with `fail_on_data_loss`). `since_version` defaults to the
    version the previous run of this task checked (from its XCom); on a first run only the replayed
    version is checked. Failed checks fail the task naming the first failing version
    (`DeltaCheckFailed`, not retried).

    XCom: `{table_uri, version, timestamp, operation, num_files, size_bytes, num_tombstones,
    protocol, partition_columns, set_transactions, checkpoint_version, engine, spark_app_id,
    checks, checked_versions, first_failing_version, result_uri}`.
    """

    action = "snapshot"
    template_fields: Sequence[str] = (*DeltaJobOperator.template_fields, "checks", "since_version")

    def __init__(
        self,
        *,
        checks: Mapping[str, Any] | None = None,
        since_version: int | str | None = PREVIOUS_RUN,
        fail_on_data_loss: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if since_version != PREVIOUS_RUN:
            _check_now(since_version, as_version, "since_version")
        self.checks = dict(checks) if checks else None
        self.since_version = since_version
        self.fail_on_data_loss = parse_flag(fail_on_data_loss, "fail_on_data_loss")
        self._since: int | None = None
        if self.checks:  # fail at parse time on typos
            if since_version is None:
                validate_checks(self.checks, allow_templates=True)
            else:
                validate_commit_checks(self.checks, allow_templates=True)

    def _resolve_since(self, context: Context) -> int | None:
        if self.since_version != PREVIOUS_RUN:
            return as_version(self.since_version, "since_version")
        pull = getattr(context.get("ti"), "xcom_pull", None)
        if pull is None:
            return None
        return last_version(pull(task_ids=self.task_id, include_prior_dates=True), self.table_uri)

    def execute(self, context: Context) -> Any:
        self._since = self._resolve_since(context)
        if self._since is None and self.since_version == PREVIOUS_RUN:
            self.log.info("no earlier run of %s checked this table: checking the replayed version only", self.task_id)
        return super().execute(context)

    def extra_request_fields(self) -> dict[str, Any]:
        if self._since is not None:
            fields: dict[str, Any] = {
                "since_version": self._since,
                "fail_on_data_loss": parse_flag(self.fail_on_data_loss, "fail_on_data_loss"),
            }
            if self.checks:
                fields["checks"] = validate_commit_checks(self.checks)
            return fields
        if not self.checks:
            return {}
        return {"checks": validate_checks({k: v for k, v in self.checks.items() if k in KNOWN_CHECKS})}

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
            "checked_versions": result.get("checked_versions", [result["version"]]),
            "first_failing_version": result.get("first_failing_version"),
            "result_uri": result_uri,
            "reports": result.get("reports", {}),
        }
        failed = failed_checks_message(result.get("checks", []))
        if failed and summary["first_failing_version"] is None:
            summary["first_failing_version"] = result["version"]
        in_range = result.get("commit_checks_failed")
        if failed or in_range:
            first = summary["first_failing_version"]
            parts = [f"at version {result['version']}: {failed}" if failed else None, in_range]
            raise DeltaCheckFailed(
                f"Delta table checks failed for {result['table']} (first failing version {first}): "
                + "; ".join(p for p in parts if p)
            )
        self.log.info(
            "%s at version %s: %s files, %s bytes; checked versions %s",
            result["table"],
            result["version"],
            result["num_files"],
            result["size_bytes"],
            version_ranges(summary["checked_versions"]),
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


class DeltaCheckpointOperator(DeltaJobOperator):
    """Write a checkpoint of the table at its latest version (or `version`), as Delta Spark writes it:
    classic, or V2 when the table has `v2Checkpoint`. The protocol is checked for the write first (an
    unknown writer feature or a catalog-managed table is refused before anything is written); the
    checkpoint is published atomically, read back and compared with the replay, and only then is
    `_last_checkpoint` moved forward. Idempotent: a checkpoint that exists is not rewritten.

    XCom: `{table_uri, version, kind, path, num_actions, num_add_files, num_tombstones, size_in_bytes,
    last_checkpoint_updated, written, engine, result_uri}`.
    """

    action = "checkpoint"

    def summarize(self, result: dict[str, Any], context: Context, result_uri: str | None) -> dict[str, Any]:
        keys = ("version", "kind", "path", "num_actions", "num_add_files", "num_tombstones", "size_in_bytes")
        summary = {"table_uri": result["table"], **{k: result[k] for k in keys}}
        summary.update(
            last_checkpoint_updated=result["last_checkpoint_updated"],
            written=result["written"],
            engine=result["engine"],
            result_uri=result_uri,
        )
        self.log.info(
            "%s: checkpoint at version %s %s (%s files)",
            result["table"],
            result["version"],
            "written" if result["written"] else "already there",
            result["num_add_files"],
        )
        return summary


class DeltaLogCleanupOperator(DeltaJobOperator):
    """Delta's metadata cleanup: the commit, checkpoint and `.crc` files older than the log retention
    (`retention_hours`, default the table's `delta.logRetentionDuration`, 30 days), keeping the newest
    complete checkpoint at or before the cutoff and everything after it.

    **Dry run by default** (`apply=False`): the result lists what would be deleted and the earliest
    version that stays readable; nothing is deleted. `apply=True` deletes. A table without a
    checkpoint at the cutoff loses nothing (`write_checkpoint_first=True` writes one there first).

    XCom: `{table_uri, dry_run, cutoff, num_files, bytes, deleted, earliest_readable_version,
    kept_checkpoint_version, reason, engine, result_uri}` (the file list stays in the result at
    `result_uri`).
    """

    action = "cleanup_log"
    template_fields: Sequence[str] = (*DeltaJobOperator.template_fields, "apply")

    def __init__(self, *, apply: bool | str = False, write_checkpoint_first: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _check_now(apply, parse_flag, "apply")
        self.apply = apply
        self.write_checkpoint_first = parse_flag(write_checkpoint_first, "write_checkpoint_first")

    def extra_request_fields(self) -> dict[str, Any]:
        return {
            "apply": parse_flag(self.apply, "apply"),
            "write_checkpoint_first": parse_flag(self.write_checkpoint_first, "write_checkpoint_first"),
        }

    def summarize(self, result: dict[str, Any], context: Context, result_uri: str | None) -> dict[str, Any]:
        keys = ("dry_run", "cutoff", "num_files", "bytes", "deleted", "earliest_readable_version")
        summary = {"table_uri": result["table"], **{k: result[k] for k in keys}}
        summary.update(
            kept_checkpoint_version=result.get("kept_checkpoint_version"),
            reason=result.get("reason"),
            engine=result["engine"],
            result_uri=result_uri,
        )
        self.log.info(
            "%s: log cleanup %s %s files; versions from %s stay readable%s",
            result["table"],
            "would delete" if result["dry_run"] else "deleted",
            result["num_files"],
            result["earliest_readable_version"],
            " (dry run: apply=True deletes)" if result["dry_run"] else "",
        )
        return summary


class DeltaVacuumOperator(DeltaJobOperator):
    """VACUUM: delete the files under the table root that no version within retention needs.

    **Dry run by default** (`dry_run=True`): the result (at `result_uri`, and its summary on XCom) is a
    plan: table, version, cutoff, mode, files with sizes, bytes, per partition. `dry_run=False` applies
    `plan` (a dry run's result, e.g. `"{{ ti.xcom_pull(task_ids='vacuum_plan')['result_uri'] }}"` read
    back, or the dict itself) or a fresh plan, re-validated against the table's latest snapshot first:
    a file active or within retention again is dropped from the plan and reported. `retention_hours`
    (default: the table's `delta.deletedFileRetentionDuration`, 7 days) shorter than the table's is
    refused unless `enforce_retention_duration=False`. `mode="lite"` plans from the log alone.

    XCom: `{table_uri, dry_run, version, cutoff, mode, num_files, bytes, deleted, deleted_bytes,
    directories, num_dropped, engine, result_uri, reports}` (the file list stays in the result).
    """

    action = "vacuum"
    template_fields: Sequence[str] = (*DeltaJobOperator.template_fields, "plan", "untracked_grace_hours")

    def __init__(
        self,
        *,
        dry_run: bool = True,
        mode: str = "full",
        enforce_retention_duration: bool = True,
        untracked_grace_hours: float | str | None = None,
        plan: Mapping[str, Any] | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        _check_now(untracked_grace_hours, optional(parse_hours), "untracked_grace_hours")
        self.untracked_grace_hours = untracked_grace_hours
        self.dry_run = parse_flag(dry_run, "dry_run")
        self.mode = parse_choice(mode, "mode", VACUUM_MODES)
        self.enforce_retention_duration = parse_flag(enforce_retention_duration, "enforce_retention_duration")
        self.plan = plan

    def _plan(self) -> dict[str, Any]:
        """The plan to apply: a dict or its JSON (`plan`), or the path/URI of a dry run's result
        (`plan_uri`, read where the job runs: a big plan never goes on a command line)."""
        if self.plan is None or self.plan == "":
            return {}
        if isinstance(self.plan, Mapping):
            return {"plan": self.plan}
        text = str(self.plan)
        if text.lstrip().startswith("{"):
            return {"plan": json.loads(text)}
        return {"plan_uri": text}

    def extra_request_fields(self) -> dict[str, Any]:
        return {
            "apply": not parse_flag(self.dry_run, "dry_run"),
            "mode": parse_choice(self.mode, "mode", VACUUM_MODES),
            "enforce_retention_duration": parse_flag(self.enforce_retention_duration, "enforce_retention_duration"),
            "untracked_grace_hours": optional(parse_hours)(self.untracked_grace_hours, "untracked_grace_hours"),
            **self._plan(),
        }

    def summarize(self, result: dict[str, Any], context: Context, result_uri: str | None) -> dict[str, Any]:
        keys = ("dry_run", "version", "cutoff", "mode", "num_files", "bytes", "deleted", "deleted_bytes", "directories")
        summary = {"table_uri": result["table"], **{k: result.get(k) for k in keys}}
        summary.update(num_dropped=len(result.get("dropped", [])), engine=result["engine"], result_uri=result_uri)
        summary["reports"] = result.get("reports", {})
        self.log.info(
            "%s: vacuum %s %s files (%s bytes)%s",
            result["table"],
            "would delete" if result["dry_run"] else "deleted",
            result["num_files"] if result["dry_run"] else result.get("deleted"),
            result["bytes"] if result["dry_run"] else result.get("deleted_bytes"),
            " (dry run: dry_run=False deletes)" if result["dry_run"] else "",
        )
        return summary


class DeltaOptimizeOperator(DeltaJobOperator):
    """OPTIMIZE: compact small files into files of about `target_size` bytes, with a `dataChange=false` commit.

    It applies by default, as Delta and delta-rs do: it deletes nothing (the replaced files stay for time
    travel until VACUUM) and readers see the same rows. `dry_run=True` only plans. On the Spark engine
    the bins are rewritten on the executors (`mapInArrow`) and only the new files' `add` actions come
    back to the driver, which commits. A concurrent commit that removed or changed an input file fails
    the task with a typed conflict (the files written for it are left for VACUUM); concurrent appends
    do not.

    :param target_size: bytes per output file (default: `delta.targetFileSize`, else 256 MiB).
    :param min_num_files: a partition needs this many candidate files to be compacted (default 2).
    :param where: a predicate on partition columns, e.g. `"date >= '2024-01-01'"` (templated).
    :param min_small_file_ratio: compact only partitions where at least this share of the files is
        smaller than `small_file_mb` (default 32): the replay checks' small-file ratio, per partition.
    :param max_commit_bytes: commit after each batch of bins of about this many input bytes.

    XCom: `{table_uri, dry_run, read_version, version, versions, num_files_removed, num_files_added,
    bytes_removed, bytes_added, num_partitions, engine, result_uri}` (per-partition figures in the result).
    """

    action = "optimize"
    template_fields: Sequence[str] = (*DeltaJobOperator.template_fields, "where", "dry_run", "min_small_file_ratio")

    def __init__(
        self,
        *,
        dry_run: bool | str = False,
        target_size: int | None = None,
        min_num_files: int = DEFAULT_MIN_NUM_FILES,
        where: str | None = None,
        min_small_file_ratio: float | str | None = None,
        small_file_mb: float = DEFAULT_SMALL_FILE_MB,
        max_commit_bytes: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        _check_now(dry_run, parse_flag, "dry_run")
        _check_now(min_small_file_ratio, optional(parse_ratio), "min_small_file_ratio")
        self.dry_run = dry_run
        self.target_size = optional(parse_count)(target_size, "target_size", minimum=1)
        self.min_num_files = parse_count(min_num_files, "min_num_files", minimum=1)
        self.where = where
        self.min_small_file_ratio = min_small_file_ratio
        self.small_file_mb = parse_size(small_file_mb, "small_file_mb", unit="MiB")
        self.max_commit_bytes = optional(parse_count)(max_commit_bytes, "max_commit_bytes", minimum=1)

    def extra_request_fields(self) -> dict[str, Any]:
        return {
            "apply": not parse_flag(self.dry_run, "dry_run"),
            "target_size": optional(parse_count)(self.target_size, "target_size", minimum=1),
            "min_num_files": parse_count(self.min_num_files, "min_num_files", minimum=1),
            "where": self.where or None,
            "min_small_file_ratio": optional(parse_ratio)(self.min_small_file_ratio, "min_small_file_ratio"),
            "small_file_mb": parse_size(self.small_file_mb, "small_file_mb", unit="MiB"),
            "max_commit_bytes": optional(parse_count)(self.max_commit_bytes, "max_commit_bytes", minimum=1),
        }

    def summarize(self, result: dict[str, Any], context: Context, result_uri: str | None) -> dict[str, Any]:
        keys = (
            "dry_run",
            "read_version",
            "version",
            "versions",
            "num_files_removed",
            "num_files_added",
            "bytes_removed",
            "bytes_added",
        )
        summary = {"table_uri": result["table"], **{k: result.get(k) for k in keys}}
        summary.update(
            num_partitions=len(result.get("partitions") or {}), engine=result["engine"], result_uri=result_uri
        )
        self.log.info(
            "%s: optimize %s %s files (%s bytes) into %s%s",
            result["table"],
            "would compact" if result["dry_run"] else "compacted",
            result.get("num_files_removed"),
            result.get("bytes_removed"),
            result.get("num_files_added"),
            f" at version {result['version']}" if result.get("version") is not None else "",
        )
        return summary
