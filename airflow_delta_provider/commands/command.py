"""The one command layer: a `Request` in, a result dict out, for the CLI (`run`), the spark-submit job and
the operators (`execute`, which never raises for a failed action). No Airflow import: the job runs on a
bare Spark driver. `_Run` holds one short handler per action, named after it, each the only place that
action's request meets the library; results are stored by `result_store`."""

from __future__ import annotations

import contextlib
import os
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from ..delta.delta_log import DeltaLog
from ..delta.errors import BucketNotFoundError, DeltaError, InvalidArgumentError, ResourceLimitError, TableNotFoundError
from ..delta.protocol.actions import AddFile, action_to_json
from ..delta.protocol.predicate import parse_predicate
from ..delta.protocol.table_properties import DEFAULT_SMALL_FILE_BYTES
from ..delta.storage import is_local
from .checks import KNOWN_CHECKS, evaluate_checks, failed_checks_message, small_file_bytes, validate_checks
from .report_data import file_size_histogram, snapshot_health, tombstone_age_histogram
from .reports import HEALTH_KINDS, RENDERERS, REPORT_KINDS, REWRITE_KINDS
from .request import OPTIONS, Request
from .result_store import previous_runs, read_result, sibling, write_result, write_text
from .results import file_dict, snapshot_dict, tombstone_report
from .spark_session import application_id

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

    from ..delta.protocol.log_segment import LogSegment
    from ..delta.snapshot import Snapshot

_S3_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL")

SparkFactory = Callable[[Mapping[str, Any]], "SparkSession"]


@dataclass
class Outcome:
    """What running a request produced: the action's result and how it ran."""

    body: dict[str, Any]
    engine: str = "local"
    spark_app_id: str | None = None
    timings: dict[str, float] = field(default_factory=dict)


def storage_options_from_env(uri: str, explicit: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Storage options for `uri`: the store's standard environment variables (S3: `AWS_*`), then explicit ones."""
    if not uri.startswith(("s3://", "s3a://")):
        return dict(explicit or {})
    from ..delta.storage.s3 import check_endpoint, s3fs_options

    env = {name: os.environ[name] for name in _S3_ENV if os.environ.get(name)}
    if "AWS_ENDPOINT_URL" in env and "endpoint_url" not in s3fs_options(explicit):  # the endpoint comes from here
        check_endpoint(env["AWS_ENDPOINT_URL"], "AWS_ENDPOINT_URL", where="environment variable", table=uri)
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        env["AWS_REGION"] = region
    return s3fs_options({**env, **(explicit or {})})


def choose_engine(requested: str, log_bytes: int, threshold_mb: float) -> str:
    """The engine `auto` picks for a log segment of `log_bytes`."""
    if requested != "auto":
        return requested
    return "spark" if log_bytes >= threshold_mb * 1024 * 1024 else "local"


def plan_engine(request: Request) -> tuple[str, LogSegment | None]:
    """The engine a request will start on, from the log listing alone, and the segment listed (or None)."""
    if request.action not in STATE_ACTIONS or request.engine != "auto":
        return ("local" if request.engine == "auto" else request.engine), None
    log = DeltaLog(request.table, storage_options=dict(request.storage_options))
    segment = log.log_segment(request.version)
    return choose_engine("auto", segment.size_in_bytes, request.auto_threshold_mb), segment


def default_spark_session(storage_options: Mapping[str, Any]) -> SparkSession:
    """The SparkSession of a spark-submit driver, with the engine's settings and S3A credentials."""
    from .spark_session import spark_session

    return spark_session(None, storage_options, app_name="airflow-delta-provider")


def files_where(snap: Snapshot, where: str | None) -> list[AddFile]:
    """Active files that may match a `where` predicate (partition pruning + stats skipping), by path."""
    from ..delta.read.file_index import file_predicate

    expr = None
    if where:
        expr = file_predicate(
            snap.schema, snap.partition_columns, parse_predicate(where, label="--where"), label="--where"
        )
    return sorted(snap.files(expr), key=lambda a: a.path)


class _Run:
    """One request being run: the engine it ended on and what each phase took."""

    def __init__(self, request: Request, spark_factory: SparkFactory | None, segment: LogSegment | None = None) -> None:
        self.request = request
        self.segment = segment
        self.options = dict(request.storage_options)
        self.spark_factory = spark_factory or default_spark_session
        self.spark: SparkSession | None = None
        #: the lake scan's table healths (`lake_plan`), recorded by `lake_run`
        self.healths: list[Any] = []
        #: the snapshot the action read, and its small-file threshold (for a report's histograms)
        self.snap: Snapshot | None = None
        self.small_file_bytes = 0
        self.engine = "local"
        self.timings: dict[str, float] = {}

    @contextlib.contextmanager
    def _timed(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        yield  # a failure records no time
        self.timings[name] = round(time.perf_counter() - t0, 4)

    def _clock(self) -> Callable[[], int] | None:
        now = self.request.now_ms
        return None if now is None else (lambda: now)

    def _delta_log(self, engine: Any = None) -> DeltaLog:
        return DeltaLog(self.request.table, storage_options=self.options, clock=self._clock(), engine=engine)

    def _local_log(self) -> DeltaLog:
        limit = self.request.memory_limit_bytes
        if limit == "auto":
            return self._delta_log()
        from ..delta.engines.local import LocalEngine

        return self._delta_log(LocalEngine(memory_limit_bytes=limit))  # type: ignore[arg-type]

    def _spark_log(self) -> DeltaLog:
        from ..delta.engines.spark import SparkEngine

        r = self.request
        self.engine = "spark"
        self.spark = self.spark_factory(self.options)
        # snapshot and tombstones report from the digest: start its checkpoint half early
        prefetch = r.action in ("snapshot", "tombstones", "checkpoint")
        engine = SparkEngine(
            self.spark,
            snapshot_partitions=r.snapshot_partitions,
            prefetch_digest=prefetch,
            storage_options=self.options,
            # a log under the auto threshold is replayed here; only the heavy work goes to the executors
            driver_state_max_bytes=int(r.auto_threshold_mb * 1024 * 1024),
        )
        return self._delta_log(engine)

    def _engine_log(self) -> DeltaLog:
        """The log on the requested engine (`auto`: local; state-reading actions size it first, `_log`)."""
        return self._spark_log() if self.request.engine == "spark" else self._local_log()

    def _log(self) -> tuple[DeltaLog, LogSegment | None]:
        """The log to read, and the segment `auto` listed to size it (loaded without a second listing)."""
        r = self.request
        probe, segment = self._local_log(), self.segment
        if r.engine == "spark":
            return self._spark_log(), None
        if r.engine == "auto":
            with self._timed("listing_s"):
                segment = probe.log_segment(r.version)
            if choose_engine(r.engine, segment.size_in_bytes, r.auto_threshold_mb) == "spark":
                return self._spark_log(), None
        return probe, segment if r.timestamp is None else None

    def _snapshot_of(self, log: DeltaLog, segment: LogSegment | None = None) -> Snapshot:
        r, ts = self.request, self.request.timestamp
        with self._timed("replay_s"):
            if segment is not None:
                return log.load_segment(segment)
            if r.version is not None:
                return log.snapshot_at(version=r.version)
            if ts is not None:
                ts = int(ts) if isinstance(ts, str) and ts.lstrip("-").isdigit() else ts
                return log.snapshot_at(timestamp=ts, can_return_last_commit=True)
            return log.update()

    def _read_state(self, small_files: int = 0) -> Snapshot:
        """The state the request names, kept with its small-file threshold for a report's histograms."""
        try:
            snap = self._snapshot_of(*self._log())
        except ResourceLimitError:
            # `auto` chose local from the log's size, but its state would not fit the local engine's
            # memory limit (checked before any state is read, V2 sidecars included): distribute it
            if self.request.engine != "auto" or self.engine != "local":
                raise
            snap = self._snapshot_of(self._spark_log())
        self.snap, self.small_file_bytes = snap, small_files
        return snap

    def body(self) -> dict[str, Any]:
        """The action's result; a table not found in a bucket that does not exist is a `BucketNotFoundError`."""
        if not is_local(self.request.table):
            from ..delta.storage.s3 import check_s3_endpoint

            check_s3_endpoint(self.request.table, self.options)
        try:
            return ACTIONS[self.request.action](self)
        except TableNotFoundError:
            self._check_bucket()
            raise

    def _check_bucket(self) -> None:
        """`BucketNotFoundError` when the table's bucket does not exist (one HEAD); else nothing."""
        from ..delta.storage import store_for

        check = getattr(store_for(self.request.table, self.options), "check_bucket", None)
        if check is None:
            return
        try:
            check()
        except BucketNotFoundError:
            raise
        except Exception:  # the probe failing (denied, unreachable) must not hide the table's own error
            return

    # -- the actions (one handler each; `ACTIONS` below) ------------------------------------------------
    def version(self) -> dict[str, Any]:
        return {"table": self.request.table, "version": self._local_log().latest_version()}

    def history(self) -> dict[str, Any]:
        return {"table": self.request.table, "history": self._local_log().history(self.request.options.limit)}

    def changes(self) -> dict[str, Any]:
        r = self.request
        start = r.version or 0
        changes = [
            {"version": v, "actions": [action_to_json(x) for x in actions]}
            for v, actions in self._local_log().get_changes(start, fail_on_data_loss=r.options.fail_on_data_loss)
        ]
        return {"table": r.table, "start_version": start, "changes": changes}

    def checkpoint(self) -> dict[str, Any]:
        from ..delta.maintenance.checkpoint import write_checkpoint

        log = self._engine_log()  # on Spark the executors write the file actions; the driver never holds them
        done = write_checkpoint(log, version=self.request.version, clock=self._clock())
        return {"table": log.table_uri, **asdict(done)}

    def cleanup_log(self) -> dict[str, Any]:
        from ..delta.maintenance.log_cleanup import cleanup_log

        cleaned = cleanup_log(self._local_log(), clock=self._clock(), **self._kwargs(dry_run=False))
        return {"table": self.request.table, **cleaned.to_dict()}

    def _kwargs(self, *drop: str, dry_run: bool = True) -> dict[str, Any]:
        """The options as a maintenance function's keywords (`apply` as `dry_run` when `dry_run`), less `drop`."""
        o = self.request.options
        out = {f.name: getattr(o, f.name) for f in fields(o) if f.name not in drop}
        if dry_run:
            out["dry_run"] = not out.pop("apply")
        return out

    def _plan(self, action: str, within: str | None = None) -> dict[str, Any] | None:
        """The options' `plan`, else the dry run's result at `plan_uri` (its `within` key); None without either."""
        o = self.request.options
        if o.plan is not None or not o.plan_uri:
            return o.plan
        found = read_result(o.plan_uri, self.options)
        plan = found.get(within, found) if within and isinstance(found, dict) else found
        if not isinstance(plan, dict):
            raise InvalidArgumentError(f"no {action} plan at {o.plan_uri}", argument="plan", table=self.request.table)
        return plan

    def vacuum(self) -> dict[str, Any]:
        from ..delta.maintenance.vacuum import vacuum

        plan = self._plan("vacuum")
        log = self._engine_log()  # on Spark: listing, re-validation and deletes on the executors
        done = vacuum(log, clock=self._clock(), **{**self._kwargs("plan_uri"), "plan": plan})
        return {"table": self.request.table, **done.to_dict()}

    def vacuum_undo(self) -> dict[str, Any]:
        """A VACUUM quarantine's files put back at their paths (`maintenance.quarantine`), from this process."""
        from ..delta.maintenance.quarantine import undo_quarantine

        done = undo_quarantine(self._local_log(), self.request.options.quarantine_id, clock=self._clock())
        return done.to_dict()

    def vacuum_purge(self) -> dict[str, Any]:
        """The table's VACUUM quarantines at least `older_than_hours` old deleted (a dry run unless `apply`)."""
        from ..delta.maintenance.quarantine import purge_quarantines

        o = self.request.options
        done = purge_quarantines(
            self._local_log(), older_than=o.older_than_hours * 3600, dry_run=not o.apply, clock=self._clock()
        )
        return done.to_dict()

    def optimize(self) -> dict[str, Any]:
        """The state replayed and the bins rewritten where the engine runs them; plan and commits on the driver."""
        from ..delta.maintenance.optimize import optimize

        small = int(self.request.options.small_file_mb * 1024 * 1024)
        done = optimize(
            self._engine_log(), small_file_bytes=small, clock=self._clock(), **self._kwargs("small_file_mb")
        )
        return {"table": self.request.table, **done.to_dict()}

    def restore(self) -> dict[str, Any]:
        """RESTORE to the request's version or timestamp (or a dry run's plan), on the driver."""
        from ..delta.maintenance.restore import restore

        r = self.request
        plan = self._plan("restore", within="plan")
        if plan is None and r.version is None and r.timestamp is None:
            raise InvalidArgumentError("restore takes a version or a timestamp to restore", argument="version")
        kwargs = {**self._kwargs("plan_uri"), "plan": plan}
        done = restore(self._engine_log(), version=r.version, timestamp=r.timestamp, clock=self._clock(), **kwargs)
        return {"table": r.table, **done.to_dict()}

    def repair(self) -> dict[str, Any]:
        """FSCK: the active files storage no longer holds (HEADs where the engine runs them), removed with `apply`."""
        from ..delta.maintenance.repair import repair

        done = repair(self._engine_log(), dry_run=not self.request.options.apply, clock=self._clock())
        return {"table": self.request.table, **done.to_dict()}

    def purge(self) -> dict[str, Any]:
        """PURGE (REORG ... APPLY (PURGE)): files with deletion vectors rewritten where the engine runs bins."""
        from ..delta.maintenance.purge import purge

        plan = self._plan("purge", within="plan")
        if plan is not None and "bins" not in plan and isinstance(plan.get("plan"), Mapping):
            plan = plan["plan"]  # a whole dry-run result given as the plan
        done = purge(self._engine_log(), clock=self._clock(), **{**self._kwargs("plan_uri"), "plan": plan})
        return {"table": self.request.table, **done.to_dict()}

    def stats_backfill(self) -> dict[str, Any]:
        """COMPUTE STATS of the files lacking them, recomputed where the engine runs them."""
        from ..delta.maintenance.stats_backfill import backfill_stats

        done = backfill_stats(self._engine_log(), clock=self._clock(), **self._kwargs())
        return {"table": self.request.table, **done.to_dict()}

    def _lake(self) -> tuple[Any, Any, Any]:
        """The lake's discovery, its policy and the scan of the tables found (`delta.lake`): from this process,
        or with engine `spark` one Spark job of a task per table."""
        from ..delta.lake import discover, load_policy, scan

        r, o = self.request, self.request.options
        prefixes = list(o.prefixes) or ([] if o.tables else [r.table])
        policy = load_policy(o.policy, self.options)  # a bad policy fails before any listing
        with self._timed("discover_s"):
            found = discover(prefixes, tables=o.tables, max_depth=o.max_depth, storage_options=self.options)
        with self._timed("scan_s"):
            if r.engine == "spark":
                self.engine, self.spark = "spark", self.spark_factory(self.options)
            spark = self.spark if r.engine == "spark" else None
            scanned = scan(found.tables, policy=policy, storage_options=self.options, now_ms=r.now_ms, spark=spark)
        return found, policy, scanned

    def lake_scan(self) -> dict[str, Any]:
        found, _, scanned = self._lake()
        return {"table": self.request.table, "discovery": found.to_dict(), **scanned.to_dict()}

    def lake_plan(self) -> dict[str, Any]:
        """The lake's maintenance within the budget; `by_table` groups the tasks per table in running order."""
        from ..delta.lake import Budget, plan

        o = self.request.options
        found, _, scanned = self._lake()
        budget = Budget(bytes=o.budget_bytes, requests=o.budget_requests, seconds=o.budget_seconds)
        planned = plan(scanned.healths, budget, errors=[*found.errors, *scanned.errors])
        self.healths = list(scanned.healths)  # `lake_run` records them
        tables = sorted({t.table for t in planned.tasks})
        by_table = [{"table": t, "tasks": [x.to_dict() for x in planned.for_table(t)]} for t in tables]
        return {"table": self.request.table, "discovery": found.to_dict(), **planned.to_dict(), "by_table": by_table}

    def lake_run(self) -> dict[str, Any]:
        """`lake_plan`, then (with `apply`) each table's tasks in order, rewrites proved; the rows appended to
        the `history` table in one commit, with each scanned table's health at plan time. A table's failure is
        its rows' error, never the others'. With engine `spark`, the tables the plan put on "spark" (the
        policy's `spark_min_files`) run on the session the scan used."""
        from ..delta.lake.history import health_row, record_runs
        from ..delta.lake.run import run_table

        o = self.request.options
        planned = self.lake_plan()
        rows: list[dict[str, Any]] = []
        if o.apply:
            for group in planned["by_table"]:
                rows += run_table(
                    group["table"],
                    group["tasks"],
                    verify=o.verify,
                    apply_vacuum=o.apply_vacuum,
                    clock=self._clock(),
                    storage_options=self.options,
                    engines=self._lake_engines(),
                )
            rows += [health_row(h) for h in self.healths]
        run_id = f"deltalog-{uuid.uuid4()}"  # one CLI or job run; the autopilot DAG records its DAG run's id
        rows = [{"run_id": run_id, **row} for row in rows]
        version = record_runs(o.history, rows, storage_options=self.options) if o.history and rows else None
        return {**planned, "apply": o.apply, "runs": rows, "history_version": version}

    def lake_report(self) -> dict[str, Any]:
        """The lake report of the history at the request's `table` (`commands.lake_report`), written to `out`
        when given (HTML; Markdown or JSON for a `.md` or `.json` name): the report and `out`. No history
        table there is a `TableNotFoundError`."""
        from .lake_report import LAKE_RENDERERS, lake_report
        from .request import REPORT_FORMATS

        r, o = self.request, self.request.options
        with self._timed("report_s"):
            report = lake_report(
                r.table, table=o.table_uri, storage_options=self.options, max_runs=o.max_runs, health=o.health
            )
        if report["history_version"] is None:  # the report pages show an empty history; a command names it
            raise TableNotFoundError(f"No maintenance history table at {r.table}", table=r.table)
        if o.out:
            fmt = next((f for ext, f in REPORT_FORMATS.items() if o.out.lower().endswith(ext)), "html")
            write_text(o.out, LAKE_RENDERERS[fmt](report), self.options)
        return {**report, "out": o.out}

    def _lake_engines(self) -> dict[str, Callable[[], Any]]:
        """The lake run's "spark" engine: this run's session (engine `spark`), else none."""
        if self.request.engine != "spark" or self.spark is None:
            return {}
        from ..delta.engines.spark import SparkEngine

        spark, threshold = self.spark, int(self.request.auto_threshold_mb * 1024 * 1024)
        return {"spark": lambda: SparkEngine(spark, storage_options=self.options, driver_state_max_bytes=threshold)}

    def snapshot(self) -> dict[str, Any]:
        o = self.request.options
        if o.since_version is not None:
            from .commit_checks import validate_commit_checks

            commit_spec = validate_commit_checks(dict(o.checks) if o.checks else {})
            checks = {k: v for k, v in commit_spec.items() if k in KNOWN_CHECKS}
        else:
            checks = validate_checks(dict(o.checks)) if o.checks else {}
        snap = self._read_state(small_file_bytes(checks))
        with self._timed("report_s"):
            out = snapshot_dict(snap, include_files=o.include_files)
            out["file_summary"] = snap.file_summary(small_file_bytes(checks)).to_dict()
            if checks:
                schema_at = lambda v: self._local_log().snapshot_at(version=v).schema  # noqa: E731
                results = [c.to_dict() for c in evaluate_checks(checks, snap, schema_at)]
                out["checks"] = results
                out["checks_failed"] = failed_checks_message(results)
            if o.since_version is not None:
                out.update(self._commit_checks(snap.version, commit_spec))
        return out

    def tombstones(self) -> dict[str, Any]:
        r, o = self.request, self.request.options
        snap = self._read_state()
        with self._timed("report_s"):
            return tombstone_report(snap, o.retention_hours, now_ms=r.now_ms, include_files=o.include_files)

    def files(self) -> dict[str, Any]:
        snap = self._read_state()
        with self._timed("report_s"):
            files = [file_dict(x) for x in files_where(snap, self.request.options.where)]
        return {"table": snap.table, "version": snap.version, "num_files": snap.num_files, "files": files}

    def report_extras(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The histogram a report draws beyond the result (local engine only: on Spark it would collect
        every file to the driver)."""
        snap = self.snap
        if snap is None or self.engine != "local":
            return {}
        if self.request.action == "snapshot":
            return {"file_size_histogram": file_size_histogram(snap, self.small_file_bytes)}
        if self.request.action == "tombstones":
            cutoff = body["retention"]["cutoff_ms"]
            return {"deletion_age_histogram": tombstone_age_histogram(snap, now_ms=body["now_ms"], cutoff_ms=cutoff)}
        return {}

    def health_extras(self, body: Mapping[str, Any], result_uri: str) -> dict[str, Any]:
        """A maintenance report's table health (before and after a rewrite; files with their stats, read in
        this process, local engine only) and the earlier runs of the same task beside `result_uri`."""
        action, o = self.request.action, self.request.options
        runs = previous_runs(result_uri, action, self.request.table, self.options)
        if self.engine != "local":  # reading every file's stats would collect the table to the driver
            return {"runs": runs}
        mb = getattr(o, "small_file_mb", None)
        small = DEFAULT_SMALL_FILE_BYTES if mb is None else int(mb * 1024 * 1024)
        log = self._local_log()
        target = (body.get("plan") or {}).get("target_size") if action == "optimize" else None
        health: dict[str, Any] = {}
        if action in REWRITE_KINDS:
            health["before"] = snapshot_health(log.snapshot_at(version=body["read_version"]), small, target)
            if not body.get("dry_run", True) and body.get("version") is not None:
                health["after"] = snapshot_health(log.snapshot_at(version=body["version"]), small, target)
            elif action == "restore":  # a plan: the table as it would be, the target version's state
                health["after"] = snapshot_health(log.snapshot_at(version=body["target_version"]), small)
        else:
            snap = log.snapshot_at(version=body["version"]) if action == "checkpoint" else log.snapshot
            health["after"] = snapshot_health(snap, small)
        return {"health": health, "runs": runs}

    def _commit_checks(self, version: int, spec: Mapping[str, Any]) -> dict[str, Any]:
        """`since_version`'s part of a snapshot result: every version and commit in (since, version]."""
        from .commit_checks import check_commits, xcom_fields

        o = self.request.options
        since = min(o.since_version or 0, version)
        report = check_commits(self._local_log(), since, version, spec, fail_on_data_loss=o.fail_on_data_loss)
        return {
            **xcom_fields(report),
            "since_version": since,
            "commit_checks": report.to_dict(),
            "commit_checks_failed": report.failed_message(),
        }


#: Each action's handler: the `_Run` method of its name (its options class is `request.OPTIONS[name]`).
ACTIONS: dict[str, Callable[[_Run], dict[str, Any]]] = {name: getattr(_Run, name) for name in OPTIONS}
#: Actions that read a whole table state (the ones `engine="auto"` sizes by their log segment).
STATE_ACTIONS = ("snapshot", "tombstones", "files")


def run(request: Request, spark_factory: SparkFactory | None = None) -> Outcome:
    """Run one request; typed `DeltaError`s propagate."""
    state = _Run(request, spark_factory)
    body = state.body()
    app_id = application_id(state.spark)
    return Outcome(body, state.engine, app_id, state.timings)


def execute(
    request: Request,
    *,
    result_uri: str | None = None,
    report_formats: Sequence[str] = (),
    spark_factory: SparkFactory | None = None,
    segment: LogSegment | None = None,
) -> tuple[int, dict[str, Any]]:
    """Run one request: (exit code, result): 0 success, 1 a typed `DeltaError`, 3 anything else. The result
    is written to `result_uri` when given, with `report_formats` beside it; a rendering whose libraries are
    missing on a cluster driver is recorded in `report_errors` and the result still stands."""
    started = time.perf_counter()
    state = _Run(request, spark_factory, segment)
    code = 0
    try:
        formats = [f for f in (s.strip() for s in report_formats) if f]
        unknown = [f for f in formats if f not in RENDERERS]
        if unknown:
            raise InvalidArgumentError(f"unknown report format {unknown[0]!r} (md, html)", table=request.table)
        body = state.body()
        result: dict[str, Any] = {"status": "success", "action": request.action, **body}
        if result_uri and request.action in REPORT_KINDS and formats:
            extras = state.report_extras(body)
            if request.action in HEALTH_KINDS:
                try:
                    extras = {**extras, **state.health_extras(body, result_uri)}
                except Exception as exc:  # the operation stands: its report goes without the table's health
                    extras = {**extras, "report_errors": {"health": f"{type(exc).__name__}: {exc}"}}
            elif request.action == "snapshot":
                extras = {**extras, "runs": previous_runs(result_uri, "snapshot", request.table, state.options)}
            body, result = {**body, **extras}, {**result, **extras}
            for fmt in formats:
                uri = sibling(result_uri, fmt)
                try:
                    text = RENDERERS[fmt](request.action, body)
                except ImportError as exc:  # jinja2/matplotlib not installed where the job runs
                    result.setdefault("report_errors", {})[fmt] = f"{type(exc).__name__}: {exc}"
                    continue
                write_text(uri, text, state.options)
                result.setdefault("reports", {})[fmt] = uri
    except DeltaError as exc:
        code = 1
        result = {"status": "error", "action": request.action, **exc.to_dict()}
        if result.get("table") is None:
            result["table"] = request.table
    except Exception as exc:  # the job must always leave a result behind
        code = 3
        result = {
            "status": "error",
            "action": request.action,
            "error_class": type(exc).__name__,
            "message": f"{type(exc).__name__}: {exc}",
            "table": request.table,
        }
        traceback.print_exc()
    result["engine"] = state.engine
    result["spark_app_id"] = application_id(state.spark)
    result["timings"] = state.timings
    result["duration_s"] = round(time.perf_counter() - started, 4)
    if result_uri:
        try:
            write_result(result_uri, result, state.options)
        except Exception as exc:
            result = {**result, "result_write_error": f"{type(exc).__name__}: {exc}"}
            code = code or 3
    return code, result
