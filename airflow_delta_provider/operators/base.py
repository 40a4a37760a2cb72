"""The operators' base: `DeltaJobOperator` (one command-layer action on a table, run by
`hooks.job.DeltaJobHook`; each subclass's arguments come from its action's options) and the "Delta report"
link. Import them from `operators.delta`, their public path (the link's class path is the one the provider
info registers, so it names that module)."""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.common.compat.sdk import BaseOperatorLink, XCom

from ..commands import arguments as arg
from ..commands.reports import REPORT_KINDS
from ..commands.request import Request, option_names
from ..delta.errors import InvalidArgumentError
from ..hooks.job import DeltaJobError, DeltaJobHook
from ..jobs import job_script
from ..jobs.runner import job_argv
from ..version_watch import storage_options
from .parsers import PARSERS, action_arguments

if TYPE_CHECKING:  # pragma: no cover
    from airflow.providers.common.compat.sdk import Context
    from airflow.providers.openlineage.extractors import OperatorLineage


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

    __module__ = "airflow_delta_provider.operators.delta"  # its public path, registered in the provider info

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
        bases = [base for base in cls.__mro__[1:] if issubclass(base, DeltaJobOperator)]
        taken = {name for base in bases for name in inspect.signature(base.__init__).parameters}
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
