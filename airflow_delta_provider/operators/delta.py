"""The operators: one command-layer action on a Delta table each, run by `hooks.job.DeltaJobHook`.

They subclass `SparkSubmitOperator` (as `SparkJDBCOperator` does), so connection handling, driver tracking,
`on_kill` and every spark-submit option are the Spark provider's own. Arguments, XCom keys and semantics:
docs/airflow.md.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.common.compat.sdk import BaseOperatorLink, XCom

try:
    from airflow.providers.common.compat.sdk import AirflowFailException
except ImportError:  # pragma: no cover
    from airflow.exceptions import AirflowFailException

from ..commands import arguments as arg
from ..commands.checks import KNOWN_CHECKS, failed_checks_message, validate_checks
from ..commands.commit_checks import validate_commit_checks, version_ranges
from ..commands.reports import REPORT_KINDS
from ..commands.request import Request, option_names
from ..delta.errors import InvalidArgumentError
from ..delta.protocol.lake_policy import DEFAULT_MAX_DEPTH
from ..hooks.job import SUBMIT_CONF_DEFAULTS, DeltaJobError, DeltaJobHook, spark_target  # noqa: F401 (re-exported)
from ..jobs import job_script
from ..jobs.runner import job_argv
from ..version_watch import last_version, storage_options
from .leases import DeltaReleaseLeaseOperator as DeltaReleaseLeaseOperator  # re-exported with the operators
from .leases import take_lease
from .parsers import PARSERS, action_arguments

if TYPE_CHECKING:  # pragma: no cover
    from airflow.providers.common.compat.sdk import Context
    from airflow.providers.openlineage.extractors import OperatorLineage


class DeltaCheckFailed(AirflowFailException):
    """A declarative check of the table state failed (not retried: the state will not change by retrying)."""


def result_link(summary: Any) -> str:
    """A task's report URL from its XCom summary: the HTML report, else the full JSON result
    (`result_uri`), as `file://` for a local path; "" when the result was not kept."""
    if not isinstance(summary, Mapping):
        return ""
    reports = summary.get("reports")
    target = (reports.get("html") if isinstance(reports, Mapping) else None) or summary.get("result_uri")
    if not isinstance(target, str) or not target:
        return ""
    from ..delta.storage import is_local, local_path

    return "file://" + local_path(target) if is_local(target) else target


#: Where the provider plugin (`airflow_delta_provider.plugin`) serves reports in the API server.
REPORT_PAGES = "/delta/reports"


def report_page(dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> str:
    """The plugin's page for a task's report, on the UI's origin (under `[api] base_url`'s path)."""
    from urllib.parse import quote, urlsplit

    from airflow.configuration import conf

    base = urlsplit(conf.get("api", "base_url", fallback="") or "").path.rstrip("/")
    page = "/".join(quote(part, safe="") for part in (dag_id, run_id, task_id))
    return f"{base}{REPORT_PAGES}/{page}" + (f"?map_index={map_index}" if map_index >= 0 else "")


class DeltaResultLink(BaseOperatorLink):
    """The "Delta report" link: the plugin's page for the task's report (the HTML report, else the full JSON
    result, read from where the task wrote it); hidden when the task kept no result."""

    name = "Delta report"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        if not result_link(XCom.get_value(ti_key=ti_key, key="return_value")):
            return ""
        return report_page(ti_key.dag_id, ti_key.run_id, ti_key.task_id, getattr(ti_key, "map_index", -1))


class DeltaJobOperator(SparkSubmitOperator):
    """Run one command-layer action on a table (base of the concrete operators): in the worker process
    (`engine="local"`, or `submit=False`, which never starts a JVM), spark-submitted on `conn_id`
    (`engine="spark"`), or in process when the log segment is under `auto_threshold_mb` and fits the local
    memory limit, else on Spark (`engine="auto"`). A `conn_id` of conn type `spark_connect` runs the Spark
    work from this process over a Spark Connect session instead of spark-submit (`DeltaJobHook`)."""

    action: str = ""
    #: Defaults of the action's arguments that differ from its options' (`parsers.action_arguments`): the
    #: options' `apply` is taken as `dry_run`, a dry run by default, unless `apply` is named here.
    argument_defaults: Mapping[str, Any] = {"dry_run": True}
    #: The action's own arguments (set from its options by `__init_subclass__`), read into its request by
    #: their parsers (`dry_run` as `apply=not dry_run`, `plan` as `plan` or `plan_uri`); each is templated.
    request_arguments: tuple[str, ...] = ()
    #: The result's keys the XCom summary copies (besides `table_uri`, `engine`, `result_uri` and, for an
    #: action with a report, `reports`), and the counts it adds (summary key: the result's list or dict).
    summary_keys: tuple[str, ...] = ()
    summary_counts: tuple[tuple[str, str], ...] = ()
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
        #: The running task's hook (`on_kill` interrupts its Connect sessions).
        self._delta_hook: DeltaJobHook | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Give an operator of an action its arguments from the action's options, unless the class writes its
        own `__init__`: the request's names, the template fields and an `__init__` taking those its bases do
        not (`inspect.signature` shows them, so Airflow's `default_args` and `expand` see them too)."""
        super().__init_subclass__(**kwargs)
        if not cls.action or "__init__" in vars(cls):
            return
        arguments = action_arguments(cls.action, cls.argument_defaults)
        cls.request_arguments = tuple(arguments)
        cls.template_fields = tuple(dict.fromkeys((*cls.template_fields, *arguments)))
        taken = {name for base in cls.__mro__[1:] for name in inspect.signature(base.__init__).parameters}
        own = {name: p for name, p in arguments.items() if name not in taken}
        if own:
            cls.__init__ = _arguments_init(cls, own)  # type: ignore[method-assign]

    # -- the arguments and the request ----------------------------------------------------------------
    def set_arguments(self, **values: Any) -> None:
        """Set each argument, read by its parser now: a templated field keeps its value (a template is
        parsed once rendered), any other keeps the parsed one."""
        for name, value in values.items():
            parsed = value if name in self.template_fields and arg.is_template(value) else PARSERS[name](value, name)
            setattr(self, name, value if name in self.template_fields else parsed)

    def argument(self, name: str) -> Any:
        """Argument `name` (templates rendered) read by its parser: a bad one is an `InvalidArgumentError`."""
        return PARSERS[name](getattr(self, name), name)

    def build_request(self, storage_options: Mapping[str, Any]) -> Request:
        """The command-layer request this task runs (templates already rendered)."""
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
        fields = {name: self.argument(name) for name in self.request_arguments}
        if "dry_run" in fields:
            fields["apply"] = not fields.pop("dry_run")
        plan = fields.pop("plan", {})
        return {**fields, **plan}

    def report_formats_for(self, result_uri: str | None) -> Sequence[str]:
        """The renderings written beside a kept result (an action without a report gets none)."""
        return self.report_formats if result_uri and self.action in REPORT_KINDS else ()

    def job_arguments(self, result_uri: str, storage_options: Mapping[str, Any] | None = None) -> list[str]:
        """The spark-submit job's argv for this task (no secrets: credentials travel in the environment)."""
        return job_argv(self.build_request(storage_options or {}), result_uri, self.report_formats_for(result_uri))

    def _storage_options(self) -> dict[str, Any]:
        return storage_options(self.table_uri, self.storage_conn_id)

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
        self._delta_hook = hook
        why = "engine='local'" if self.submit else "submit=False"
        try:
            self._delta_result = hook.run(request, result_uri, self.report_formats_for(result_uri), why=why)
        except DeltaJobError as exc:
            self._delta_result = exc.result
            raise
        summary = self.summarize(self._delta_result, context, result_uri)
        self.log.info("%s", self.describe(self._delta_result))
        return summary

    def on_kill(self) -> None:
        """Interrupt a Connect run's operations, and kill a spark-submit (the Spark provider's own `on_kill`)."""
        if self._delta_hook is not None:
            self._delta_hook.on_kill()
        super().on_kill()

    def _spark_submit(self, context: Context, settings: dict[str, Any]) -> None:
        """spark-submit through `SparkSubmitOperator` (its driver tracking, `on_kill`) with the job's settings."""
        for name, value in settings.items():
            setattr(self, name, value)
        super().execute(context)

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

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage | None:
        """The table as an input dataset and the operation as a run facet (`lineage.operator_lineage`);
        None when the task ran no job in this process or the OpenLineage provider is absent."""
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


def _arguments_init(cls: type[DeltaJobOperator], own: Mapping[str, inspect.Parameter]) -> Any:
    """`cls.__init__`: takes `own` (keyword arguments: name to `inspect.Parameter`), hands the rest to the base
    class and sets each of `own` by its parser (`DeltaJobOperator.set_arguments`)."""
    required = [name for name, p in own.items() if p.default is inspect.Parameter.empty]

    def __init__(self: DeltaJobOperator, **kwargs: Any) -> None:
        missing = [name for name in required if name not in kwargs]
        if missing:
            raise TypeError(f"{cls.__name__}() missing required keyword argument {missing[0]!r}")
        values = {name: kwargs.pop(name, p.default) for name, p in own.items()}
        super(cls, self).__init__(**kwargs)
        self.set_arguments(**values)

    varkw = inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD, annotation="Any")
    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    __init__.__signature__ = inspect.Signature([self_param, *own.values(), varkw], return_annotation="None")  # type: ignore[attr-defined]
    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    __init__.__doc__ = f"Arguments: {', '.join(own)} (the {cls.action} options'), and `DeltaJobOperator`'s."
    return __init__


#: `since_version` default: the version the previous successful run of this task checked (its XCom).
PREVIOUS_RUN = "previous"


class SnapshotReplayOperator(DeltaJobOperator):
    """Replay a table's log at a version (latest, `version` or `timestamp`), report its state, check it.

    `checks` hold at the replayed version and, with `since_version` (default: the version the previous run
    checked, from its XCom), at every version after it; a failure raises `DeltaCheckFailed` naming the
    first failing version. `lease_ttl` leases the replayed version (see `DeltaVersionSensor`)."""

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
            (validate_checks if since_version is None else validate_commit_checks)(self.checks, allow_templates=True)

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
        return {**summary, **take_lease(self, context, summary["version"], ttl, location)}

    def extra_request_fields(self) -> dict[str, Any]:
        if self._since is None:
            known = {k: v for k, v in (self.checks or {}).items() if k in KNOWN_CHECKS}
            return {"checks": validate_checks(known)} if self.checks else {}
        fields = {"since_version": self._since, "fail_on_data_loss": self.argument("fail_on_data_loss")}
        return {**fields, "checks": validate_commit_checks(self.checks)} if self.checks else fields

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
    """Report tombstones (read-only): retained vs past retention (safe for VACUUM), bytes reclaimable, per
    partition. `retention_hours` overrides `delta.deletedFileRetentionDuration`."""

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
    """Write a checkpoint at the latest version (or `version`), as Delta Spark writes it (classic, or V2 on
    a `v2Checkpoint` table); `_last_checkpoint` moves only once it is read back and matches the replay.
    Idempotent: an existing checkpoint is not rewritten."""

    action = "checkpoint"
    summary_keys = (
        *("version", "kind", "path", "num_actions", "num_add_files", "num_tombstones", "size_in_bytes"),
        *("last_checkpoint_updated", "written"),
    )

    def describe(self, result: dict[str, Any]) -> str:
        done = "written" if result["written"] else "already there"
        return f"{result['table']}: checkpoint at version {result['version']} {done} ({result['num_add_files']} files)"


class DeltaLogCleanupOperator(DeltaJobOperator):
    """Delta's metadata cleanup: commits, checkpoints and `.crc` files older than the log retention
    (`retention_hours`, default `delta.logRetentionDuration`), keeping the newest complete checkpoint at or
    before the cutoff and the checkpoint and commits live leases read. **Dry run by default**
    (`apply=False`); `write_checkpoint_first=True` writes a checkpoint at the cutoff first."""

    action = "cleanup_log"
    argument_defaults: Mapping[str, Any] = {"apply": False}
    summary_keys = (
        *("dry_run", "cutoff", "num_files", "bytes", "deleted", "earliest_readable_version"),
        *("kept_checkpoint_version", "reason"),
    )

    def describe(self, result: dict[str, Any]) -> str:
        dry = result["dry_run"]
        done = f"{'would delete' if dry else 'deleted'} {result['num_files']} files"
        kept = f"the log keeps versions from {result['earliest_readable_version']} (older data files may be vacuumed)"
        return f"{result['table']}: log cleanup {done}; {kept}{' (dry run: apply=True deletes)' if dry else ''}"


class DeltaVacuumOperator(DeltaJobOperator):
    """VACUUM: delete the files no version within retention (or under a live lease) needs.

    **Dry run by default**: the result is the plan. `dry_run=False` applies `plan` (a dry run's result, or
    its `result_uri`) or a fresh plan, re-validated against the latest snapshot first. `quarantine=True`
    (local engine only) moves the files aside instead, for `DeltaVacuumUndoOperator` to put back."""

    action = "vacuum"
    summary_keys = (
        *("dry_run", "version", "cutoff", "mode", "num_files", "bytes", "deleted", "deleted_bytes"),
        *("directories", "quarantine_id", "quarantine", "lease_kept_files", "lease_kept_bytes"),
    )
    summary_counts = (("num_dropped", "dropped"), ("num_leases", "leases"))

    def describe(self, result: dict[str, Any]) -> str:
        table, moves, qid = result["table"], result.get("quarantine"), result.get("quarantine_id")
        dry = result["dry_run"]
        if moves is not None and dry:
            return f"{table}: vacuum would move {moves.get('files')} files ({moves.get('bytes')} bytes) to a quarantine"
        if moves is not None:
            moved = f"{moves.get('moved')} files ({moves.get('moved_bytes')} bytes)"
            undo = f"DeltaVacuumUndoOperator(quarantine_id={qid!r}) puts them back"
            return f"{table}: vacuum moved {moved} to quarantine {qid} ({moves.get('location')}); {undo}"
        if dry:
            return f"{table}: vacuum would delete {result['num_files']} files ({result['bytes']} bytes) (dry run)"
        return f"{table}: vacuum deleted {result.get('deleted')} files ({result.get('deleted_bytes')} bytes)"


class DeltaVacuumUndoOperator(DeltaJobOperator):
    """Undo a quarantining VACUUM: every file of quarantine `quarantine_id` (templated; or the VACUUM task's
    XCom) goes back to its path. Refused, moving nothing, when something else sits at a path, or the
    quarantine is another table's or being purged; a rerun continues an interrupted undo."""

    action = "vacuum_undo"
    argument_defaults: Mapping[str, Any] = {"quarantine_id": inspect.Parameter.empty}
    summary_keys = (
        *("quarantine_id", "location", "state", "num_files", "moved", "moved_bytes", "finished"),
        "already_in_place",
    )
    summary_counts = (("num_missing", "missing"),)

    def summarize(self, result: dict[str, Any], context: Context, result_uri: str | None) -> dict[str, Any]:
        summary = super().summarize(result, context, result_uri)
        summary["version"] = (result.get("manifest") or {}).get("version")
        return summary

    def describe(self, result: dict[str, Any]) -> str:
        back = f"{result.get('moved')} files back ({result.get('moved_bytes')} bytes)"
        return f"{result['table']}: quarantine {result.get('quarantine_id')} {result.get('state')}: {back}"


class DeltaVacuumPurgeOperator(DeltaJobOperator):
    """Delete, for good, the table's VACUUM quarantines at least `older_than_hours` old (default a week);
    unfinished ones are left and reported. **Dry run by default** (`dry_run=True`)."""

    action = "vacuum_purge"
    summary_keys = ("dry_run", "older_than_ms", "num_purged", "deleted_files", "deleted_bytes")
    summary_counts = (("num_skipped", "skipped"),)

    def summarize(self, result: dict[str, Any], context: Context, result_uri: str | None) -> dict[str, Any]:
        summary = super().summarize(result, context, result_uri)
        summary["quarantine_ids"] = [p["quarantine_id"] for p in result.get("purged") or ()]
        return summary

    def describe(self, result: dict[str, Any]) -> str:
        done = "would purge" if result["dry_run"] else "purged"
        counts = (
            f"{result['num_purged']} quarantines ({result['deleted_files']} files, {result['deleted_bytes']} bytes)"
        )
        left = f"; {len(result['skipped'])} left" if result.get("skipped") else ""
        return f"{result['table']}: {done} {counts} at least {result['older_than_ms'] / 3_600_000:g} hours old{left}"


class DeltaOptimizeOperator(DeltaJobOperator):
    """OPTIMIZE: compact small files into files of about `target_size` bytes, in `dataChange=false` commits.

    Applies by default, as Delta and delta-rs do (it deletes nothing; `dry_run=True` only plans). A
    concurrent commit that removed an input file fails it with a typed conflict; appends do not.
    `max_files`/`max_bytes` bound one run (most valuable bins first); the rest is reported over budget."""

    action = "optimize"
    argument_defaults: Mapping[str, Any] = {"dry_run": False}
    summary_keys = (
        *("dry_run", "read_version", "version", "versions", "num_files_removed", "num_files_added"),
        *("bytes_removed", "bytes_added", "zorder_by", "zorder_overlap"),
        *("num_files_over_budget", "bytes_over_budget"),
    )
    summary_counts = (("num_partitions", "partitions"),)

    def describe(self, result: dict[str, Any]) -> str:
        verb = ("would z-order" if result["dry_run"] else "z-ordered") if result.get("zorder_by") else None
        verb = verb or ("would compact" if result["dry_run"] else "compacted")
        done = f"{verb} {result.get('num_files_removed')} files"
        into = f"({result.get('bytes_removed')} bytes) into {result.get('num_files_added')}"
        at = f" at version {result['version']}" if result.get("version") is not None else ""
        return f"{result['table']}: optimize {done} {into}{at}"


class DeltaRestoreOperator(DeltaJobOperator):
    """RESTORE: make the latest version hold what `version` (or `timestamp`) held, in one `RESTORE` commit.
    A vacuumed file to add back refuses it unless `allow_partial=True`. **Dry run by default**:
    `dry_run=False` with `plan` (that dry run's result or `result_uri`) applies it only if a fresh plan matches."""

    action = "restore"
    summary_keys = ("dry_run", "version", "read_version", "target_version", "metrics")
    summary_counts = (
        ("num_restored", "files_restored"),
        ("num_removed", "files_removed"),
        ("num_missing", "missing_files"),
    )

    def describe(self, result: dict[str, Any]) -> str:
        m = result.get("metrics") or {}
        done = "would restore" if result["dry_run"] else f"restored (version {result['version']})"
        counts = f"{m.get('numRestoredFiles')} files back, {m.get('numRemovedFiles')} removed"
        return f"{result['table']}: {done} version {result['target_version']}: {counts}"


class DeltaRepairOperator(DeltaJobOperator):
    """Repair (Delta's `FSCK REPAIR TABLE`): the active files storage no longer holds (one HEAD each),
    removed in an `FSCK` commit so readers stop failing on them. **Dry run by default** (`dry_run=True`)."""

    action = "repair"
    summary_keys = ("dry_run", "version", "read_version", "num_files_checked", "num_missing", "missing_bytes")

    def describe(self, result: dict[str, Any]) -> str:
        done = "would remove" if result["dry_run"] else f"removed (version {result['version']})"
        return f"{result['table']}: repair {done} {result.get('num_missing')} missing files"


class DeltaPurgeOperator(DeltaJobOperator):
    """PURGE (Delta's `REORG TABLE ... APPLY (PURGE)`): rewrite the files whose deletion vector hides at least
    `min_deleted_ratio` of their rows so those rows are physically gone (a `REORG` commit, `dataChange=false`).
    **Dry run by default**: `dry_run=False` applies `plan` (a dry run's result, its `plan`, or its `result_uri`),
    re-validated, or a fresh plan. The old files stay until VACUUM deletes them after the table's retention."""

    action = "purge"
    summary_keys = (
        *("dry_run", "read_version", "version", "versions", "num_files_removed", "num_files_added"),
        *("bytes_removed", "bytes_added", "num_deleted_rows_purged", "erasable_after_ms"),
    )
    summary_counts = (("num_dropped", "dropped"),)

    def describe(self, result: dict[str, Any]) -> str:
        done = "would rewrite" if result["dry_run"] else f"rewrote (version {result['version']})"
        files = f"{result.get('num_files_removed')} files ({result.get('bytes_removed')} bytes)"
        return f"{result['table']}: purge {done} {files}, {result.get('num_deleted_rows_purged')} deleted rows"


class DeltaStatsBackfillOperator(DeltaJobOperator):
    """Statistics backfill (Delta's `COMPUTE STATS`): recompute `add.stats` of the files that lack them, or whose
    stats miss columns the table now names (`tighten=True`: also wide ones), re-added with `dataChange=false`.
    **Dry run by default**. Runs in the worker process: the Spark engine has no stats recomputer yet, so
    `engine="spark"` is refused before anything runs."""

    action = "stats_backfill"
    summary_keys = ("dry_run", "read_version", "version", "versions", "metrics")
    summary_counts = (("num_dropped", "files_dropped"),)

    def summarize(self, result: dict[str, Any], context: Context, result_uri: str | None) -> dict[str, Any]:
        summary = super().summarize(result, context, result_uri)
        plan = result.get("plan") or {}
        summary.update({k: plan.get(k) for k in ("num_files_checked", "num_files", "num_files_over_budget")})
        return summary

    def describe(self, result: dict[str, Any]) -> str:
        plan = result.get("plan") or {}
        found = f"{plan.get('num_files')} of {plan.get('num_files_checked')} files need stats"
        done = "dry run" if result["dry_run"] else f"committed version {result['version']}"
        return f"{result['table']}: stats backfill {done}: {found}"


class _LakeOperator(DeltaJobOperator):
    """A lake action over `prefixes` (walked for tables) and `tables`; the task's `table_uri` is the first of
    them (it labels the result). Runs in the worker process: a lake scan reads logs only."""

    def __init__(
        self,
        *,
        prefixes: Sequence[str] | str = (),
        tables: Sequence[str] | str = (),
        policy: str | None = None,
        max_depth: int | str = DEFAULT_MAX_DEPTH,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("table_uri", "")  # set from the rendered prefixes and tables (`lake_label`)
        super().__init__(**kwargs)
        self.set_arguments(prefixes=prefixes, tables=tables, policy=policy, max_depth=max_depth)
        if not any(arg.is_template(v) for v in (prefixes, tables)):
            self.lake_label()  # neither given: fail at parse time

    def lake_label(self) -> str:
        """The first prefix, else the first table: the lake's name in the result and its storage options."""
        found = self.argument("prefixes") or self.argument("tables")
        if not found:
            raise InvalidArgumentError("give at least one of prefixes or tables", argument="prefixes")
        return found[0]

    def _storage_options(self) -> dict[str, Any]:
        return storage_options(self.lake_label(), self.storage_conn_id)

    def build_request(self, storage_options: Mapping[str, Any]) -> Request:
        self.table_uri = self.lake_label()
        return super().build_request(storage_options)


class DeltaLakeScanOperator(_LakeOperator):
    """Discover the Delta tables under `prefixes` (plus `tables`) and read each one's health from its log
    (`delta.lake.scan`), with `policy`'s thresholds. The full scan is written to `result_uri`; the XCom is a
    summary: the tables read and the errors (a table that cannot be read never fails the task)."""

    action = "lake_scan"

    def summarize(self, result: dict[str, Any], context: Context, result_uri: str | None) -> dict[str, Any]:
        summary = super().summarize(result, context, result_uri)
        errors = [*result["discovery"]["errors"], *result["errors"]]
        summary.update(
            tables=[{"table": h["table"], "version": h["version"]} for h in result["tables"]],
            num_tables=len(result["tables"]),
            errors=[{"table": e.get("table") or e.get("prefix"), "error_class": e.get("error_class")} for e in errors],
            requests=result["discovery"]["requests"],
        )
        return summary

    def describe(self, result: dict[str, Any]) -> str:
        errors = len(result["discovery"]["errors"]) + len(result["errors"])
        return f"lake scan of {result['table']}: {len(result['tables'])} tables read, {errors} errors"


class DeltaLakePlanOperator(_LakeOperator):
    """Plan the lake's maintenance (`delta.lake.plan`): each table's candidate tasks ranked, cut to the budget
    (`budget_bytes`, `budget_requests`, `budget_seconds`; None: unlimited). The full plan is written to
    `result_uri`; the XCom is the tasks grouped per table, `[{"table_uri": ..., "tasks": [...]}]` in running
    order, ready for `.expand()` (a table with nothing to do is left out)."""

    action = "lake_plan"

    def summarize(self, result: dict[str, Any], context: Context, result_uri: str | None) -> list[dict[str, Any]]:  # type: ignore[override]
        return [{"table_uri": group["table"], "tasks": group["tasks"]} for group in result["by_table"]]

    def describe(self, result: dict[str, Any]) -> str:
        totals = result["totals"]
        left = f"{len(result['deferred'])} deferred by the budget, {len(result['errors'])} errors"
        return f"lake plan of {result['table']}: {totals['tasks']} tasks on {len(result['by_table'])} tables; {left}"
