"""The operators: one command-layer action on a Delta table each, run by `hooks.job.DeltaJobHook`.

They subclass `SparkSubmitOperator`, as the Spark provider's `SparkJDBCOperator` does, so the connection
handling, cluster-mode driver tracking, `on_kill`, retries and every spark-submit option are the Spark
provider's own. An operator holds the fields and their templating, reads them with the argument parsers
(`commands.arguments`) into a `commands.Request`, hands it to the hook (which runs it in this process or
submits the bundled job, and reads the result back), and returns a small summary as its XCom value.
`submit=False` never starts a JVM, which is what DAG unit tests want (see `airflow_delta_provider.testing`).

Provider conventions: each task links to its result (`DeltaResultLink`, the HTML report when there is
one), answers OpenLineage (`get_openlineage_facets_on_complete`, see `airflow_delta_provider.lineage`),
and templates its connection ids (`conn_id`, `storage_conn_id`). spark-submit runs with
`spark.log.level=WARN` unless `conf` sets it, so Spark's INFO lines stay out of the task log.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.common.compat.sdk import BaseOperator, BaseOperatorLink, XCom

try:
    from airflow.providers.common.compat.sdk import AirflowFailException
except ImportError:  # pragma: no cover
    from airflow.exceptions import AirflowFailException

from ..commands import arguments as arg
from ..commands.checks import KNOWN_CHECKS, failed_checks_message, validate_checks
from ..commands.commit_checks import validate_commit_checks, version_ranges
from ..commands.reports import REPORT_KINDS
from ..commands.request import ENGINES, VACUUM_MODES, Request, option_names
from ..delta.errors import InvalidArgumentError
from ..delta.protocol.optimize import DEFAULT_MIN_NUM_FILES, DEFAULT_SMALL_FILE_MB
from ..delta.protocol.quarantine import check_quarantine_id
from ..hooks.delta import DeltaTableHook
from ..hooks.job import SUBMIT_CONF_DEFAULTS, DeltaJobError, DeltaJobHook, spark_target  # noqa: F401 (re-exported)
from ..jobs import job_script
from ..jobs.runner import job_argv
from ..version_watch import last_version
from .leases import lease_owner, parse_lease_id, parse_lease_ttl, parse_location, take_lease

if TYPE_CHECKING:  # pragma: no cover
    from airflow.providers.common.compat.sdk import Context
    from airflow.providers.openlineage.extractors import OperatorLineage


class DeltaCheckFailed(AirflowFailException):
    """A declarative check of the table state failed (not retried: the state will not change by retrying)."""


def _quarantine_id(value: Any, argument: str) -> str:
    """A quarantine id, or a VACUUM task's XCom (its `quarantine_id`, natively rendered)."""
    if isinstance(value, Mapping):
        value = value.get("quarantine_id")
    return check_quarantine_id(value)


#: Each argument's parser (`commands.arguments`), called as `parse(value, name)`: at `__init__` (a bad literal
#: fails the DAG at parse time; a template waits), and again once templates are rendered (`argument`).
PARSERS: dict[str, Callable[[Any, str], Any]] = {
    "engine": partial(arg.parse_choice, choices=ENGINES),
    "mode": partial(arg.parse_choice, choices=VACUUM_MODES),
    "version": arg.as_version,
    "since_version": arg.as_version,
    "snapshot_partitions": partial(arg.parse_count, minimum=1),
    "min_num_files": partial(arg.parse_count, minimum=1),
    "target_size": partial(arg.optional(arg.parse_count), minimum=1),
    "max_commit_bytes": partial(arg.optional(arg.parse_count), minimum=1),
    "auto_threshold_mb": arg.optional(arg.parse_number),
    "retention_hours": arg.optional(arg.parse_hours),
    "untracked_grace_hours": arg.optional(arg.parse_hours),
    "older_than_hours": arg.parse_hours,
    "lease_ttl": parse_lease_ttl,
    "lease_location": parse_location,
    "lease_id": parse_lease_id,
    "quarantine_id": _quarantine_id,
    "min_small_file_ratio": arg.optional(arg.parse_ratio),
    "small_file_mb": partial(arg.parse_size, unit="MiB"),
    **dict.fromkeys(("submit", "ship_library", "include_files", "fail_on_data_loss", "apply"), arg.parse_flag),
    **dict.fromkeys(("write_checkpoint_first", "dry_run", "enforce_retention_duration"), arg.parse_flag),
    **dict.fromkeys(("allow_partial", "quarantine", "missing_ok"), arg.parse_flag),
}


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
        *("table_uri", "version", "timestamp", "result_uri", "retention_hours", "conn_id", "storage_conn_id"),
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
        kwargs.setdefault("name", f"airflow-delta-{self.action}")
        super().__init__(application=job_script(), conn_id=conn_id, deploy_mode=deploy_mode, **kwargs)
        self.set_arguments(engine=engine, submit=submit, version=version, retention_hours=retention_hours)
        if not self.submit and self.engine == "spark":
            raise InvalidArgumentError(
                "submit=False runs the job in the worker process: use engine='local' or 'auto'", argument="submit"
            )
        self.set_arguments(snapshot_partitions=snapshot_partitions, include_files=include_files)
        self.set_arguments(auto_threshold_mb=auto_threshold_mb, ship_library=ship_library)
        self.table_uri = table_uri
        self.timestamp = timestamp
        self.result_uri = result_uri
        self.storage_conn_id = storage_conn_id
        self.conn_id = conn_id
        self.spark_conn_id = conn_id
        self.spark_deploy_mode = deploy_mode
        self.report_formats = tuple(report_formats)
        #: The last job result this instance saw (success or error), for OpenLineage after the task.
        self._delta_result: dict[str, Any] | None = None

    # -- the arguments and the request ----------------------------------------------------------------
    def set_arguments(self, **values: Any) -> None:
        """Set each argument, read by its parser (`PARSERS`) now: a templated field keeps its value (a
        template is parsed once rendered), any other keeps the parsed one."""
        for name, value in values.items():
            parsed = value if name in self.template_fields and arg.is_template(value) else PARSERS[name](value, name)
            setattr(self, name, value if name in self.template_fields else parsed)

    def argument(self, name: str) -> Any:
        """The value of argument `name` (templates rendered) read by its parser: a bad one is an
        `InvalidArgumentError` naming it."""
        return PARSERS[name](getattr(self, name), name)

    def build_request(self, storage_options: Mapping[str, Any]) -> Request:
        """The command-layer request this task runs (templates already rendered), every argument read by
        the parser of its kind (`commands.arguments`): a bad one is an `InvalidArgumentError` naming it."""
        names = ("version", "engine", "submit", "snapshot_partitions", "auto_threshold_mb", "retention_hours")
        args = {name: self.argument(name) for name in (*names, "include_files")}
        fields = {k: args[k] for k in ("auto_threshold_mb", *option_names(self.action)) if args.get(k) is not None}
        return Request.make(
            table=self.table_uri,
            action=self.action,
            version=args["version"],
            timestamp=None if args["version"] is not None else (self.timestamp or None),
            engine=args["engine"] if args["submit"] else "local",
            storage_options=storage_options,
            snapshot_partitions=args["snapshot_partitions"],
            **fields,
            **self.extra_request_fields(),
        )

    def extra_request_fields(self) -> dict[str, Any]:
        return {}

    def report_formats_for(self, result_uri: str | None) -> Sequence[str]:
        """The renderings written beside a kept result (an action without a report gets none)."""
        return self.report_formats if result_uri and self.action in REPORT_KINDS else ()

    def job_arguments(self, result_uri: str, storage_options: Mapping[str, Any] | None = None) -> list[str]:
        """The spark-submit job's argv for this task (no secrets: credentials travel in the environment)."""
        return job_argv(self.build_request(storage_options or {}), result_uri, self.report_formats_for(result_uri))

    def _storage_options(self) -> dict[str, Any]:
        return DeltaTableHook(self.table_uri, self.storage_conn_id).storage_options()

    def _result_uri(self, context: Context) -> str | None:
        """Where the full result is kept (None: a temporary file); a trailing `/` adds dag/task/run_id.json."""
        uri = self.result_uri
        if uri and uri.endswith("/"):
            names = (context["ti"].dag_id, context["ti"].task_id, str(context.get("run_id")))
            uri += "/".join(re.sub(r"[^A-Za-z0-9._=-]+", "_", name) for name in names) + ".json"
        return uri or None

    # -- execution ------------------------------------------------------------------------------------
    def execute(self, context: Context) -> Any:
        self._conn_id = self.spark_conn_id = self.conn_id  # rendered now (templated)
        request = self.build_request(self._storage_options())  # a bad argument fails here, before any job
        result_uri = self._result_uri(context)
        hook = DeltaJobHook(
            self.conn_id,
            deploy_mode=self.spark_deploy_mode,
            ship_library=self.ship_library,
            spark_submit=partial(self._spark_submit, context),
            conf=self.conf,
            py_files=self.py_files,
            env_vars=self.env_vars,
        )
        why = "engine='local'" if self.submit else "submit=False"
        try:
            self._delta_result = hook.run(request, result_uri, self.report_formats_for(result_uri), why=why)
        except DeltaJobError as exc:
            self._delta_result = exc.result
            raise
        summary = self.summarize(self._delta_result, context, result_uri)
        self.log.info("%s", self.describe(self._delta_result))
        return summary

    def _spark_submit(self, context: Context, settings: dict[str, Any]) -> None:
        """spark-submit through `SparkSubmitOperator` (its driver tracking, `on_kill`) with the job's settings."""
        for name, value in settings.items():
            setattr(self, name, value)
        super().execute(context)

    #: The result's keys the XCom summary copies (besides `table_uri`, `engine`, `result_uri` and, for an
    #: action with a report, `reports`), and the counts it adds (summary key: the result's list or dict).
    summary_keys: tuple[str, ...] = ()
    summary_counts: tuple[tuple[str, str], ...] = ()

    def summarize(self, result: dict[str, Any], context: Context, result_uri: str | None) -> dict[str, Any]:
        """The XCom value: a small summary of the result (the full result stays at `result_uri`)."""
        summary = {"table_uri": result["table"], **{k: result.get(k) for k in self.summary_keys}}
        summary.update(engine=result["engine"], result_uri=result_uri)
        summary.update({name: len(result.get(key) or ()) for name, key in self.summary_counts})
        if self.action in REPORT_KINDS:
            summary["reports"] = result.get("reports", {})
        return summary

    def describe(self, result: dict[str, Any]) -> str:
        """The task log's one line on what the action found or did."""
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

    #: As on completion: a failed check is reported as a failed data quality assertion.
    get_openlineage_facets_on_failure = get_openlineage_facets_on_complete


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

    `lease_ttl` (None: no lease; `"6h"`, `"1d"`, a `timedelta` or seconds; templated): once the replay
    succeeded, a version lease (`delta.maintenance.leases.add_lease`) pins the replayed version for
    that long, owned by `<dag_id>.<task_id>.<run_id>`, and the XCom carries its `lease_id` (and
    `lease_expires_at`, `lease_owner`). The lease keeps the version's data files and log from the
    VACUUM and log cleanup this provider runs (`DeltaVacuumOperator`, `DeltaLogCleanupOperator`,
    `deltalog`, the library), not from Spark's or delta-rs's own maintenance, which do not read leases.
    The last task that reads the version releases it (`DeltaReleaseLeaseOperator`); otherwise it expires.
    `lease_location` (templated) is the lease folder when it is not `<table>/_delta_leases` (VACUUM and
    log cleanup must then be given the same one).

    XCom: `{table_uri, version, timestamp, operation, num_files, size_bytes, num_tombstones,
    protocol, partition_columns, set_transactions, checkpoint_version, engine, spark_app_id,
    checks, checked_versions, first_failing_version, result_uri}`, plus `lease_id`, `lease_expires_at`
    and `lease_owner` with `lease_ttl`.
    """

    action = "snapshot"
    summary_keys = (
        *("version", "timestamp", "timestamp_ms", "operation", "num_files", "size_bytes", "num_tombstones"),
        *("protocol", "partition_columns", "set_transactions", "checkpoint_version", "spark_app_id"),
        "first_failing_version",
    )
    template_fields: Sequence[str] = (
        *DeltaJobOperator.template_fields,
        *("checks", "since_version", "lease_ttl", "lease_location"),
    )

    def __init__(
        self,
        *,
        checks: Mapping[str, Any] | None = None,
        since_version: int | str | None = PREVIOUS_RUN,
        fail_on_data_loss: bool = True,
        lease_ttl: Any = None,
        lease_location: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.set_arguments(lease_ttl=lease_ttl, lease_location=lease_location)
        self.since_version = since_version
        if since_version != PREVIOUS_RUN:
            self.set_arguments(since_version=since_version)
        self.set_arguments(fail_on_data_loss=fail_on_data_loss)
        self.checks = dict(checks) if checks else None
        self._since: int | None = None
        if self.checks:  # fail at parse time on typos
            if since_version is None:
                validate_checks(self.checks, allow_templates=True)
            else:
                validate_commit_checks(self.checks, allow_templates=True)

    def _resolve_since(self, context: Context) -> int | None:
        if self.since_version != PREVIOUS_RUN:
            return self.argument("since_version")
        pull = getattr(context.get("ti"), "xcom_pull", None)
        if pull is None:
            return None
        return last_version(pull(task_ids=self.task_id, include_prior_dates=True), self.table_uri)

    def execute(self, context: Context) -> Any:
        self._since = self._resolve_since(context)
        if self._since is None and self.since_version == PREVIOUS_RUN:
            self.log.info("no earlier run of %s checked this table: checking the replayed version only", self.task_id)
        ttl, location = self.argument("lease_ttl"), self.argument("lease_location")  # refused before the job
        summary = super().execute(context)
        if ttl is not None:
            owner = lease_owner(context, self.task_id, self.dag_id)
            lease = take_lease(
                self.table_uri,
                summary["version"],
                ttl,
                owner=owner,
                location=location,
                storage_options=self._storage_options(),
            )
            self.log.info(
                "leased version %s to %s until %s: lease %s",
                *(summary["version"], owner, lease["lease_expires_at"], lease["lease_id"]),
            )
            summary.update(lease)
        return summary

    def extra_request_fields(self) -> dict[str, Any]:
        if self._since is not None:
            fields: dict[str, Any] = {
                "since_version": self._since,
                "fail_on_data_loss": self.argument("fail_on_data_loss"),
            }
            if self.checks:
                fields["checks"] = validate_commit_checks(self.checks)
            return fields
        if not self.checks:
            return {}
        return {"checks": validate_checks({k: v for k, v in self.checks.items() if k in KNOWN_CHECKS})}

    def summarize(self, result: dict[str, Any], context: Context, result_uri: str | None) -> dict[str, Any]:
        summary = super().summarize(result, context, result_uri)
        summary.update(
            small_file_ratio=result.get("file_summary", {}).get("small_file_ratio"),
            checks={r["name"]: r["passed"] for r in result.get("checks", [])},
            checked_versions=result.get("checked_versions", [result["version"]]),
        )
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
        return summary

    def describe(self, result: dict[str, Any]) -> str:
        checked = version_ranges(result.get("checked_versions", [result["version"]]))
        files = f"{result['num_files']} files, {result['size_bytes']} bytes"
        return f"{result['table']} at version {result['version']}: {files}; checked versions {checked}"


class TombstoneReportOperator(DeltaJobOperator):
    """Report tombstones: retained vs past retention (safe for VACUUM), bytes reclaimable, per partition.

    Read-only: it deletes nothing. `retention_hours` overrides `delta.deletedFileRetentionDuration`.
    The full report (JSON, plus Markdown and HTML renderings, `report_formats`) goes to `result_uri`;
    XCom: `{table_uri, version, num_tombstones, retained, expired, retained_bytes, reclaimable_bytes,
    removed_without_size, oldest_deletion_ms, newest_deletion_ms, num_partitions, retention, engine,
    result_uri, reports}`.
    """

    action = "tombstones"
    summary_keys = (
        *("version", "num_tombstones", "retained", "expired", "retained_bytes", "reclaimable_bytes"),
        *("removed_without_size", "oldest_deletion_ms", "newest_deletion_ms", "retention"),
    )
    summary_counts = (("num_partitions", "partitions"),)

    def describe(self, result: dict[str, Any]) -> str:
        found = f"{result['num_tombstones']} tombstones, {result['expired']} past retention"
        found += f" ({result['reclaimable_bytes']} bytes reclaimable)"
        return f"{result['table']} at version {result['version']}: {found}; nothing deleted"


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
    summary_keys = (
        *("version", "kind", "path", "num_actions", "num_add_files", "num_tombstones", "size_in_bytes"),
        *("last_checkpoint_updated", "written"),
    )

    def describe(self, result: dict[str, Any]) -> str:
        done = "written" if result["written"] else "already there"
        return f"{result['table']}: checkpoint at version {result['version']} {done} ({result['num_add_files']} files)"


class DeltaLogCleanupOperator(DeltaJobOperator):
    """Delta's metadata cleanup: the commit, checkpoint and `.crc` files older than the log retention
    (`retention_hours`, default the table's `delta.logRetentionDuration`, 30 days), keeping the newest
    complete checkpoint at or before the cutoff and everything after it.

    **Dry run by default** (`apply=False`): the result lists what would be deleted and the earliest
    version that stays readable; nothing is deleted. `apply=True` deletes. A table without a
    checkpoint at the cutoff loses nothing (`write_checkpoint_first=True` writes one there first).

    Live version leases (`DeltaVersionSensor` / `SnapshotReplayOperator` with `lease_ttl`) bound the
    cleanup: the checkpoint and commits the earliest leased version is made from stay. `lease_location`
    (templated) names the lease folder when it is not `<table>/_delta_leases`.

    XCom: `{table_uri, dry_run, cutoff, num_files, bytes, deleted, earliest_readable_version,
    kept_checkpoint_version, reason, engine, result_uri}` (the file list stays in the result at
    `result_uri`).
    """

    action = "cleanup_log"
    summary_keys = (
        *("dry_run", "cutoff", "num_files", "bytes", "deleted", "earliest_readable_version"),
        *("kept_checkpoint_version", "reason"),
    )
    template_fields: Sequence[str] = (*DeltaJobOperator.template_fields, "apply", "lease_location")

    def __init__(
        self,
        *,
        apply: bool | str = False,
        write_checkpoint_first: bool = False,
        lease_location: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.set_arguments(apply=apply, write_checkpoint_first=write_checkpoint_first, lease_location=lease_location)

    def extra_request_fields(self) -> dict[str, Any]:
        return {name: self.argument(name) for name in ("apply", "write_checkpoint_first", "lease_location")}

    def describe(self, result: dict[str, Any]) -> str:
        dry = result["dry_run"]
        done = f"{'would delete' if dry else 'deleted'} {result['num_files']} files"
        kept = f"versions from {result['earliest_readable_version']} stay readable"
        return f"{result['table']}: log cleanup {done}; {kept}{' (dry run: apply=True deletes)' if dry else ''}"


class DeltaVacuumOperator(DeltaJobOperator):
    """VACUUM: delete the files under the table root that no version within retention needs.

    **Dry run by default** (`dry_run=True`): the result (at `result_uri`, and its summary on XCom) is a
    plan: table, version, cutoff, mode, files with sizes, bytes, per partition. `dry_run=False` applies
    `plan` (a dry run's result, e.g. `"{{ ti.xcom_pull(task_ids='vacuum_plan')['result_uri'] }}"` read
    back, or the dict itself) or a fresh plan, re-validated against the table's latest snapshot first:
    a file active or within retention again is dropped from the plan and reported. `retention_hours`
    (default: the table's `delta.deletedFileRetentionDuration`, 7 days) shorter than the table's is
    refused unless `enforce_retention_duration=False`. `mode="lite"` plans from the log alone.

    `quarantine=True` (local engine only; `engine="spark"` is refused) moves the files to
    `<table>/_delta_quarantine/<id>/` instead of deleting them: the XCom names the quarantine
    (`quarantine_id`) and states the moves' cost (`quarantine`: method, files, bytes, bytes copied, storage
    requests; applied: also its location, the files moved and its state), `deleted` stays 0.
    `DeltaVacuumUndoOperator(quarantine_id=...)` puts the files back; `DeltaVacuumPurgeOperator` deletes
    quarantines past an age. A dry run with `quarantine=True` states what the moves would cost.

    Live version leases (`DeltaVersionSensor` / `SnapshotReplayOperator` with `lease_ttl`) are honoured:
    the files their versions read are left out of the plan and again at apply (`lease_kept_files`,
    `lease_kept_bytes`, `num_leases`). `lease_location` (templated) names the lease folder when it is
    not `<table>/_delta_leases`.

    XCom: `{table_uri, dry_run, version, cutoff, mode, num_files, bytes, deleted, deleted_bytes,
    directories, num_dropped, quarantine_id, quarantine, lease_kept_files, lease_kept_bytes, num_leases,
    engine, result_uri, reports}` (the file list stays in the result).
    """

    action = "vacuum"
    summary_keys = (
        *("dry_run", "version", "cutoff", "mode", "num_files", "bytes", "deleted", "deleted_bytes"),
        *("directories", "quarantine_id", "quarantine", "lease_kept_files", "lease_kept_bytes"),
    )
    summary_counts = (("num_dropped", "dropped"), ("num_leases", "leases"))
    template_fields: Sequence[str] = (
        *DeltaJobOperator.template_fields,
        *("plan", "untracked_grace_hours", "lease_location"),
    )

    def __init__(
        self,
        *,
        dry_run: bool = True,
        mode: str = "full",
        enforce_retention_duration: bool = True,
        untracked_grace_hours: float | str | None = None,
        plan: Mapping[str, Any] | str | None = None,
        quarantine: bool = False,
        lease_location: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.set_arguments(untracked_grace_hours=untracked_grace_hours, dry_run=dry_run, mode=mode)
        self.set_arguments(enforce_retention_duration=enforce_retention_duration, quarantine=quarantine)
        self.set_arguments(lease_location=lease_location)
        self.plan = plan

    def extra_request_fields(self) -> dict[str, Any]:
        names = ("mode", "enforce_retention_duration", "untracked_grace_hours", "quarantine", "lease_location")
        return {
            "apply": not self.argument("dry_run"),
            **{n: self.argument(n) for n in names},
            **_plan_fields(self.plan),
        }

    def describe(self, result: dict[str, Any]) -> str:
        dry, moves = result["dry_run"], result.get("quarantine")
        if moves is not None:
            files, size = moves.get("files"), moves.get("bytes")
            if dry:
                return f"{result['table']}: vacuum would move {files} files ({size} bytes) to a quarantine (dry run)"
            where = f"quarantine {result.get('quarantine_id')} ({moves.get('location')})"
            undo = f"DeltaVacuumUndoOperator(quarantine_id={result.get('quarantine_id')!r}) puts them back"
            moved = f"{moves.get('moved')} files ({moves.get('moved_bytes')} bytes)"
            return f"{result['table']}: vacuum moved {moved} to {where}; {undo}"
        files, size = (
            (result["num_files"], result["bytes"]) if dry else (result.get("deleted"), result.get("deleted_bytes"))
        )
        done = f"{'would delete' if dry else 'deleted'} {files} files ({size} bytes)"
        return f"{result['table']}: vacuum {done}{' (dry run: dry_run=False deletes)' if dry else ''}"


class DeltaVacuumUndoOperator(DeltaJobOperator):
    """Undo a quarantining VACUUM (`DeltaVacuumOperator(quarantine=True)`): every file of quarantine
    `quarantine_id` goes back to its path, so the versions that read them can be read again
    (`delta.maintenance.quarantine.undo_quarantine`). `quarantine_id` is templated, e.g.
    `"{{ ti.xcom_pull(task_ids='vacuum_apply')['quarantine_id'] }}"` (or, natively rendered, that XCom).

    Refused, moving nothing, when something else now sits at a path a file must go back to, when the
    quarantine is another table's or is being purged. A rerun of an interrupted undo continues it; an
    undone quarantine is left as it is. The moves are made by one process: the worker (`engine="auto"`,
    the default, or `"local"`) or a Spark driver (`engine="spark"`). After an undo the files are again
    what VACUUM would delete: take a lease or raise the retention before the next VACUUM.

    XCom: `{table_uri, quarantine_id, location, state, num_files, moved, moved_bytes, finished,
    already_in_place, num_missing, version (the one VACUUM ran at), engine, result_uri}`.
    """

    action = "vacuum_undo"
    summary_keys = (
        *("quarantine_id", "location", "state", "num_files", "moved", "moved_bytes", "finished"),
        "already_in_place",
    )
    summary_counts = (("num_missing", "missing"),)
    template_fields: Sequence[str] = (*DeltaJobOperator.template_fields, "quarantine_id")

    def __init__(self, *, quarantine_id: str | Mapping[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.set_arguments(quarantine_id=quarantine_id)

    def extra_request_fields(self) -> dict[str, Any]:
        return {"quarantine_id": self.argument("quarantine_id")}

    def summarize(self, result: dict[str, Any], context: Context, result_uri: str | None) -> dict[str, Any]:
        summary = super().summarize(result, context, result_uri)
        summary["version"] = (result.get("manifest") or {}).get("version")
        return summary

    def describe(self, result: dict[str, Any]) -> str:
        back = f"{result.get('moved')} files back ({result.get('moved_bytes')} bytes)"
        return f"{result['table']}: quarantine {result.get('quarantine_id')} {result.get('state')}: {back}"


class DeltaVacuumPurgeOperator(DeltaJobOperator):
    """Delete, for good, the table's VACUUM quarantines made at least `older_than_hours` ago (default 168:
    a week) (`delta.maintenance.quarantine.purge_quarantines`). Unfinished quarantines (a VACUUM or an
    undo killed midway) are left and reported.

    **Dry run by default** (`dry_run=True`): the XCom lists what would be purged; nothing is deleted.
    `dry_run` and `older_than_hours` are templated (`dry_run="{{ not params.apply_vacuum }}"`).

    XCom: `{table_uri, dry_run, older_than_ms, num_purged, deleted_files, deleted_bytes, quarantine_ids,
    num_skipped, engine, result_uri}` (`deleted_*`: what a dry run would delete).
    """

    action = "vacuum_purge"
    summary_keys = ("dry_run", "older_than_ms", "num_purged", "deleted_files", "deleted_bytes")
    summary_counts = (("num_skipped", "skipped"),)
    template_fields: Sequence[str] = (*DeltaJobOperator.template_fields, "older_than_hours", "dry_run")

    def __init__(
        self,
        *,
        older_than_hours: float | str = 168.0,
        dry_run: bool | str = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.set_arguments(older_than_hours=older_than_hours, dry_run=dry_run)

    def extra_request_fields(self) -> dict[str, Any]:
        return {"older_than_hours": self.argument("older_than_hours"), "apply": not self.argument("dry_run")}

    def summarize(self, result: dict[str, Any], context: Context, result_uri: str | None) -> dict[str, Any]:
        summary = super().summarize(result, context, result_uri)
        summary["quarantine_ids"] = [p["quarantine_id"] for p in result.get("purged") or ()]
        return summary

    def describe(self, result: dict[str, Any]) -> str:
        hours = result["older_than_ms"] / 3_600_000
        done = "would purge" if result["dry_run"] else "purged"
        counts = (
            f"{result['num_purged']} quarantines ({result['deleted_files']} files, {result['deleted_bytes']} bytes)"
        )
        left = f"; {len(result['skipped'])} left" if result.get("skipped") else ""
        tail = " (dry run: dry_run=False deletes)" if result["dry_run"] else ""
        return f"{result['table']}: {done} {counts} at least {hours:g} hours old{left}{tail}"


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
    summary_keys = (
        *("dry_run", "read_version", "version", "versions", "num_files_removed", "num_files_added"),
        *("bytes_removed", "bytes_added"),
    )
    summary_counts = (("num_partitions", "partitions"),)
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
        self.set_arguments(dry_run=dry_run, min_small_file_ratio=min_small_file_ratio, target_size=target_size)
        self.set_arguments(min_num_files=min_num_files, small_file_mb=small_file_mb, max_commit_bytes=max_commit_bytes)
        self.where = where

    def extra_request_fields(self) -> dict[str, Any]:
        names = ("target_size", "min_num_files", "min_small_file_ratio", "small_file_mb", "max_commit_bytes")
        return {
            "apply": not self.argument("dry_run"),
            "where": self.where or None,
            **{n: self.argument(n) for n in names},
        }

    def describe(self, result: dict[str, Any]) -> str:
        done = f"{'would compact' if result['dry_run'] else 'compacted'} {result.get('num_files_removed')} files"
        into = f"({result.get('bytes_removed')} bytes) into {result.get('num_files_added')}"
        at = f" at version {result['version']}" if result.get("version") is not None else ""
        return f"{result['table']}: optimize {done} {into}{at}"


def _plan_fields(plan: Mapping[str, Any] | str | None) -> dict[str, Any]:
    """A plan to apply: a dict or its JSON (`plan`), or the path/URI of a dry run's result (`plan_uri`,
    read where the job runs: a big plan never goes on a command line)."""
    if plan is None or plan == "":
        return {}
    if isinstance(plan, Mapping):
        return {"plan": plan}
    text = str(plan)
    return {"plan": json.loads(text)} if text.lstrip().startswith("{") else {"plan_uri": text}


class DeltaRestoreOperator(DeltaJobOperator):
    """RESTORE: make the table's latest version hold what `version` (or `timestamp`) held, in one `RESTORE`
    commit (files of that version added back, later ones removed; metadata restored, the protocol never
    downgraded). The files to add back must still be in storage: a vacuumed one refuses the restore,
    naming it, unless `allow_partial=True`.

    **Dry run by default** (`dry_run=True`): the result's `plan` is what a person reviews; `dry_run=False`
    with `plan` (that dry run's result, its dict or the path/URI of its `result_uri`) applies it only if a
    fresh plan still matches, else refuses.

    XCom: `{table_uri, dry_run, version, read_version, target_version, metrics, num_restored,
    num_removed, num_missing, engine, result_uri}`.
    """

    action = "restore"
    summary_keys = ("dry_run", "version", "read_version", "target_version", "metrics")
    summary_counts = (
        ("num_restored", "files_restored"),
        ("num_removed", "files_removed"),
        ("num_missing", "missing_files"),
    )
    template_fields: Sequence[str] = (*DeltaJobOperator.template_fields, "plan", "dry_run")

    def __init__(
        self,
        *,
        dry_run: bool | str = True,
        allow_partial: bool = False,
        plan: Mapping[str, Any] | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.set_arguments(dry_run=dry_run, allow_partial=allow_partial)
        self.plan = plan

    def extra_request_fields(self) -> dict[str, Any]:
        fields = {"apply": not self.argument("dry_run"), "allow_partial": self.argument("allow_partial")}
        return {**fields, **_plan_fields(self.plan)}

    def describe(self, result: dict[str, Any]) -> str:
        m = result.get("metrics") or {}
        done = "would restore" if result["dry_run"] else f"restored (version {result['version']})"
        counts = f"{m.get('numRestoredFiles')} files back, {m.get('numRemovedFiles')} removed"
        return f"{result['table']}: {done} version {result['target_version']}: {counts}"


class DeltaRepairOperator(DeltaJobOperator):
    """Repair (Delta's `FSCK REPAIR TABLE`, delta-rs `repair`): the active files storage no longer holds,
    found with one HEAD each, removed in an `FSCK` commit so readers stop failing on them.

    **Dry run by default** (`dry_run=True`): the result lists the missing files; nothing is committed.

    XCom: `{table_uri, dry_run, version, read_version, num_files_checked, num_missing, missing_bytes, engine,
    result_uri}` (the file list stays in the result).
    """

    action = "repair"
    summary_keys = ("dry_run", "version", "read_version", "num_files_checked", "num_missing", "missing_bytes")
    template_fields: Sequence[str] = (*DeltaJobOperator.template_fields, "dry_run")

    def __init__(self, *, dry_run: bool | str = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.set_arguments(dry_run=dry_run)

    def extra_request_fields(self) -> dict[str, Any]:
        return {"apply": not self.argument("dry_run")}

    def describe(self, result: dict[str, Any]) -> str:
        done = "would remove" if result["dry_run"] else f"removed (version {result['version']})"
        return f"{result['table']}: repair {done} {result.get('num_missing')} missing files"


class DeltaReleaseLeaseOperator(BaseOperator):
    """Release a version lease (`delta.maintenance.leases.release_lease`): the one a `DeltaVersionSensor`
    or `SnapshotReplayOperator` took with `lease_ttl`, once the last task reading its version is done.

    `lease_id` is templated: `"{{ ti.xcom_pull(task_ids='replay')['lease_id'] }}"` (or, natively rendered,
    that XCom itself). Nothing to release (the task took no lease: the template renders nothing) is not
    an error, and neither, with `missing_ok=True` (the default), is a lease already gone (released, or
    purged once expired). From then on the next VACUUM may delete the version's files. A lease nobody
    releases pins the version only until it expires. `lease_location` and `storage_conn_id` are
    templated too.

    XCom: `{table_uri, lease_id, released, version, owner}`.
    """

    template_fields: Sequence[str] = ("table_uri", "lease_id", "lease_location", "storage_conn_id")
    ui_color = "#00add4"

    def __init__(
        self,
        *,
        table_uri: str,
        lease_id: str | Mapping[str, Any] | None,
        lease_location: str | None = None,
        storage_conn_id: str | None = None,
        missing_ok: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table_uri = table_uri
        self.lease_id, self.lease_location = lease_id, lease_location  # read once rendered (`execute`)
        if not arg.is_template(lease_id):  # a bad literal fails the DAG at parse time
            parse_lease_id(lease_id)
        if not arg.is_template(lease_location):
            parse_location(lease_location, "lease_location")
        self.storage_conn_id = storage_conn_id
        self.missing_ok = arg.parse_flag(missing_ok, "missing_ok")

    def execute(self, context: Context) -> dict[str, Any]:
        from ..delta.maintenance.leases import release_lease

        lease_id = parse_lease_id(self.lease_id)
        out: dict[str, Any] = {"table_uri": self.table_uri, "lease_id": lease_id, "released": False}
        if lease_id is None:
            self.log.info("no lease to release for %s (the task took none)", self.table_uri)
            return {**out, "version": None, "owner": None}
        options = DeltaTableHook(self.table_uri, self.storage_conn_id).storage_options()
        lease = release_lease(
            self.table_uri,
            lease_id,
            missing_ok=self.missing_ok,
            location=parse_location(self.lease_location, "lease_location"),
            storage_options=options,
        )
        if lease is None:
            self.log.info("lease %s of %s: already gone (released, or purged once expired)", lease_id, self.table_uri)
        else:
            self.log.info("released lease %s on version %s of %s", lease_id, lease.version, self.table_uri)
        return {
            **out,
            "released": lease is not None,
            "version": None if lease is None else lease.version,
            "owner": None if lease is None else lease.owner,
        }
