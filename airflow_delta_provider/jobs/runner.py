"""The job the operators submit: one action on one table, one JSON result written atomically.

    delta_job.py --table URI --action snapshot|tombstones|files|changes [--version N | --timestamp T]
                 [--engine spark|local|auto] [--retention-hours H] [--snapshot-partitions N]
                 --result-uri URI [--include-files] [--where EXPR] [--checks JSON]
                 [--report-formats md,html] [--auto-threshold-mb MB]

The result is the CLI's `--json` shape for the action plus `status`, `action`, `engine`,
`duration_s`, `timings` and `spark_app_id` (null when the job replayed on the driver without
starting Spark). On failure it is `{"status": "error", "error_class": ..., "message": ..., ...}` and
the exit code is 1 (a typed `DeltaError`) or 3 (anything else); bad arguments exit with 2.

Storage credentials never travel on the command line (spark-submit logs it): they come from the
`DELTA_STORAGE_OPTIONS` environment variable (JSON of fsspec options) and the store's standard
variables (`AWS_ACCESS_KEY_ID`, ...). No Airflow import here: the job runs on a bare Spark driver.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..checks import evaluate_checks, failed_checks_message, small_file_bytes, validate_checks
from ..cli import files_where, storage_options_from_env
from ..delta.actions import action_to_json
from ..delta.delta_log import DeltaLog
from ..delta.errors import DeltaError, InvalidArgumentError, ResourceLimitError
from ..delta.results import file_dict, snapshot_dict, tombstone_report
from ..delta.storage import is_local, local_path
from ..reports import tombstone_html, tombstone_markdown

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

    from ..delta.snapshot import Snapshot

ACTIONS = ("snapshot", "tombstones", "files", "changes")
ENGINES = ("auto", "local", "spark")
#: `--engine auto` distributes when the log segment to replay (checkpoint + commits) is at least this
#: big; below it the driver replays with pyarrow, which is faster than any cluster round trip. The L
#: benchmark log (159 MiB, 1M files) replays locally in ~2 s and 650 MB RSS against ~60 s on a 2-core
#: local[2] Spark (bench/RESULTS.md), so the line sits where driver memory, not speed, becomes the issue.
DEFAULT_AUTO_THRESHOLD_MB = 1024.0
STORAGE_OPTIONS_ENV = "DELTA_STORAGE_OPTIONS"
EXIT_DELTA_ERROR = 1
EXIT_UNEXPECTED = 3

SparkFactory = Callable[[Mapping[str, Any]], "SparkSession"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="delta_job", description="Replay a Delta log and write one JSON result.")
    p.add_argument("--table", required=True, help="table root: local path or fsspec URI")
    p.add_argument("--action", required=True, choices=ACTIONS)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--version", type=int, help="version to load (for changes: the first version)")
    g.add_argument("--timestamp", help="latest commit at or before this time (ISO-8601 or epoch ms)")
    p.add_argument("--engine", choices=ENGINES, default="auto")
    p.add_argument("--retention-hours", type=float, help="override delta.deletedFileRetentionDuration")
    p.add_argument("--snapshot-partitions", type=int, default=50, help="Spark partitions for reconciliation")
    p.add_argument("--result-uri", required=True, help="where to write the JSON result (path or fsspec URI)")
    p.add_argument("--include-files", action="store_true", help="include file / tombstone lists (collects them)")
    p.add_argument("--where", help="files: filter expression, e.g. \"date = '2024-01-01'\"")
    p.add_argument("--checks", help="snapshot: JSON check spec (see airflow_delta_provider.checks)")
    p.add_argument("--report-formats", default="", help="tombstones: also write md and/or html next to the result")
    p.add_argument("--fail-on-data-loss", action="store_true", help="changes: error when a commit is missing")
    p.add_argument("--now-ms", type=int, help="clock for retention (default: now)")
    p.add_argument(
        "--auto-threshold-mb",
        type=float,
        default=float(os.environ.get("DELTA_AUTO_THRESHOLD_MB", DEFAULT_AUTO_THRESHOLD_MB)),
        help=f"auto engine: distribute at this many MB of log (default {DEFAULT_AUTO_THRESHOLD_MB:g})",
    )
    return p


def job_storage_options(table: str, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """fsspec options for `table` from `DELTA_STORAGE_OPTIONS` (JSON) over the store's standard variables."""
    env = os.environ if environ is None else environ
    explicit: dict[str, Any] = {}
    raw = env.get(STORAGE_OPTIONS_ENV)
    if raw:
        try:
            explicit = json.loads(raw)
        except ValueError:
            raise InvalidArgumentError(f"{STORAGE_OPTIONS_ENV} is not valid JSON", table=table) from None
    return storage_options_from_env(table, explicit)


def choose_engine(requested: str, log_bytes: int, threshold_mb: float) -> str:
    """The engine `--engine auto` picks for a log segment of `log_bytes` (and the local engine's
    memory limit can still turn it to Spark: `Job.run`)."""
    if requested != "auto":
        return requested
    return "spark" if log_bytes >= threshold_mb * 1024 * 1024 else "local"


def default_spark_session(storage_options: Mapping[str, Any]) -> SparkSession:
    """The SparkSession of a spark-submit driver, with the engine's settings and S3A credentials."""
    from pyspark.sql import SparkSession

    from ..delta.engines.spark import SPARK_CONF, hadoop_s3a_conf

    builder = SparkSession.builder.appName("airflow-delta-provider")
    for key, value in {**SPARK_CONF, **hadoop_s3a_conf(storage_options)}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def write_result(uri: str, result: Mapping[str, Any], storage_options: Mapping[str, Any] | None = None) -> None:
    """Write `result` as JSON to `uri` atomically (temp file + rename locally, one PUT on object stores)."""
    write_text(uri, json.dumps(result, indent=2, default=str) + "\n", storage_options)


def write_text(uri: str, text: str, storage_options: Mapping[str, Any] | None = None) -> None:
    data = text.encode()
    if is_local(uri):
        path = local_path(uri)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
        return
    import fsspec

    fs, path = fsspec.core.url_to_fs(uri, **dict(storage_options or {}))
    fs.pipe_file(path, data)


def _sibling(uri: str, ext: str) -> str:
    base = uri[: -len(".json")] if uri.endswith(".json") else uri
    return f"{base}.{ext}"


class Job:
    """One run of the job: parsed arguments in, result dict out."""

    def __init__(
        self,
        args: argparse.Namespace,
        spark_factory: SparkFactory | None = None,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.args = args
        self.storage_options = dict(storage_options) if storage_options is not None else None
        self.spark_factory = spark_factory or default_spark_session
        self.spark: SparkSession | None = None
        self.engine = "local"
        self.timings: dict[str, float] = {}

    def _log(self, storage_options: Mapping[str, Any]) -> DeltaLog:
        a = self.args
        clock = None if a.now_ms is None else (lambda: a.now_ms)
        probe = DeltaLog(a.table, storage_options=storage_options, clock=clock)
        if a.action == "changes":
            return probe
        t0 = time.perf_counter()
        segment = probe.log_segment(a.version)
        self.timings["listing_s"] = round(time.perf_counter() - t0, 4)
        self.engine = choose_engine(a.engine, segment.size_in_bytes, a.auto_threshold_mb)
        if self.engine == "local":
            return probe
        return self._spark_log(storage_options)

    def _spark_log(self, storage_options: Mapping[str, Any]) -> DeltaLog:
        from ..delta.engines.spark import SparkEngine

        a = self.args
        clock = None if a.now_ms is None else (lambda: a.now_ms)
        self.engine = "spark"
        self.spark = self.spark_factory(storage_options)
        # snapshot and tombstones report from the digest: start its checkpoint half early
        prefetch = a.action in ("snapshot", "tombstones")
        engine = SparkEngine(self.spark, snapshot_partitions=a.snapshot_partitions, prefetch_digest=prefetch)
        return DeltaLog(a.table, storage_options=storage_options, clock=clock, engine=engine)

    def _snapshot(self, log: DeltaLog) -> Snapshot:
        a = self.args
        t0 = time.perf_counter()
        if a.version is not None:
            snap = log.snapshot_at(version=a.version)
        elif a.timestamp is not None:
            ts: int | str = int(a.timestamp) if a.timestamp.lstrip("-").isdigit() else a.timestamp
            snap = log.snapshot_at(timestamp=ts, can_return_last_commit=True)
        else:
            snap = log.update()
        self.timings["replay_s"] = round(time.perf_counter() - t0, 4)
        return snap

    def run(self) -> dict[str, Any]:
        a = self.args
        options = self.storage_options if self.storage_options is not None else job_storage_options(a.table)
        checks = validate_checks(a.checks) if a.checks else {}
        log = self._log(options)
        if a.action == "changes":
            start = a.version or 0
            changes = [
                {"version": v, "actions": [action_to_json(x) for x in actions]}
                for v, actions in log.get_changes(start, fail_on_data_loss=a.fail_on_data_loss)
            ]
            return {"table": log.table_uri, "start_version": start, "changes": changes}
        try:
            snap = self._snapshot(log)
        except ResourceLimitError:
            # `auto` chose local from the log's size, but its state would not fit the local engine's
            # memory limit (checked before any state is read, V2 sidecars included): distribute it
            if a.engine != "auto" or self.engine != "local":
                raise
            snap = self._snapshot(self._spark_log(options))
        t0 = time.perf_counter()
        if a.action == "snapshot":
            out = snapshot_dict(snap, include_files=a.include_files)
            out["file_summary"] = snap.file_summary(small_file_bytes(checks)).to_dict()
            if checks:
                results = [
                    r.to_dict()
                    for r in evaluate_checks(
                        checks, snap, lambda v: DeltaLog(a.table, storage_options=options).snapshot_at(version=v).schema
                    )
                ]
                out["checks"] = results
                out["checks_failed"] = failed_checks_message(results)
        elif a.action == "tombstones":
            out = tombstone_report(snap, a.retention_hours, now_ms=a.now_ms, include_files=a.include_files)
            for fmt in filter(None, (f.strip() for f in a.report_formats.split(","))):
                render = {"md": tombstone_markdown, "html": tombstone_html}.get(fmt)
                if render is None:
                    raise InvalidArgumentError(f"unknown report format {fmt!r} (md, html)", table=a.table)
                uri = _sibling(a.result_uri, fmt)
                write_text(uri, render(out), options)
                out.setdefault("reports", {})[fmt] = uri
        else:  # files
            files = files_where(snap, a.where)
            out = {"table": snap.table, "version": snap.version, "files": [file_dict(x) for x in files]}
        self.timings["report_s"] = round(time.perf_counter() - t0, 4)
        return out


def run(
    argv: Sequence[str] | None = None,
    spark_factory: SparkFactory | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> tuple[int, dict[str, Any]]:
    """Run the job; returns (exit code, result) after writing the result to `--result-uri`.

    `storage_options` replaces the environment's (an in-process run, e.g. `submit=False`).
    """
    args = build_parser().parse_args(argv)
    started = time.perf_counter()
    job = Job(args, spark_factory, storage_options)
    code = 0
    try:
        body = job.run()
        result: dict[str, Any] = {"status": "success", "action": args.action, **body}
    except DeltaError as exc:
        code = EXIT_DELTA_ERROR
        result = {"status": "error", "action": args.action, **exc.to_dict()}
        if result.get("table") is None:
            result["table"] = args.table
    except Exception as exc:  # the job must always leave a result behind
        code = EXIT_UNEXPECTED
        result = {
            "status": "error",
            "action": args.action,
            "error_class": type(exc).__name__,
            "message": f"{type(exc).__name__}: {exc}",
            "table": args.table,
        }
        traceback.print_exc()
    result["engine"] = job.engine
    result["spark_app_id"] = None if job.spark is None else job.spark.sparkContext.applicationId
    result["timings"] = job.timings
    result["duration_s"] = round(time.perf_counter() - started, 4)
    try:
        options = job.storage_options if job.storage_options is not None else job_storage_options(args.table)
        write_result(args.result_uri, result, options)
    except Exception as exc:
        print(f"delta_job: cannot write the result to {args.result_uri}: {type(exc).__name__}: {exc}", file=sys.stderr)
        code = code or EXIT_UNEXPECTED
    if result["status"] == "error":
        print(f"delta_job: error: {result['error_class']}: {result['message']}", file=sys.stderr)
    return code, result


def main(argv: Sequence[str] | None = None) -> int:
    code, _ = run(argv)
    return code
