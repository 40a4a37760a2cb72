"""The job the operators submit: arguments in, one `commands.Request` run, one JSON result written.

    delta_job.py --table URI --action snapshot|tombstones|files|changes|checkpoint|cleanup_log
                 [--version N | --timestamp T] [--since-version N] [--apply] [--write-checkpoint-first]
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
from collections.abc import Mapping, Sequence
from typing import Any

from ..commands.arguments import cli_type, parse_choice, parse_count, parse_hours, parse_number, parse_ratio, parse_size
from ..commands.command import (
    DEFAULT_AUTO_THRESHOLD_MB,
    ENGINES,
    VACUUM_MODES,
    Request,
    SparkFactory,
    execute,
    sibling,
    storage_options_from_env,
    write_result,
)
from ..delta.errors import DeltaError, InvalidArgumentError
from ..delta.protocol.optimize import DEFAULT_MIN_NUM_FILES, DEFAULT_SMALL_FILE_MB

#: The actions the job runs (the command layer's that read a snapshot or the commits).
ACTIONS = ("snapshot", "tombstones", "files", "changes", "checkpoint", "cleanup_log", "vacuum", "optimize")
STORAGE_OPTIONS_ENV = "DELTA_STORAGE_OPTIONS"


def _count(flag: str, minimum: int = 0) -> Any:
    return cli_type(parse_count, flag, minimum=minimum)


def build_parser() -> argparse.ArgumentParser:
    """The job's argv, each option read by the parser of its kind (`commands.arguments`), as the CLI's."""
    p = argparse.ArgumentParser(prog="delta_job", description="Replay a Delta log and write one JSON result.")
    p.add_argument("--table", required=True, help="table root: local path or fsspec URI")
    p.add_argument("--action", required=True, type=cli_type(parse_choice, "--action", choices=ACTIONS), choices=ACTIONS)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--version", type=_count("--version"), help="version to load (for changes: the first version)")
    g.add_argument("--timestamp", help="latest commit at or before this time (ISO-8601 or epoch ms)")
    p.add_argument(
        "--engine", type=cli_type(parse_choice, "--engine", choices=ENGINES), choices=ENGINES, default="auto"
    )
    p.add_argument(
        "--retention-hours", type=cli_type(parse_hours, "--retention-hours"), help="override the table's retention"
    )
    p.add_argument(
        "--snapshot-partitions",
        type=_count("--snapshot-partitions", 1),
        default=50,
        help="Spark partitions for reconciliation",
    )
    p.add_argument("--result-uri", required=True, help="where to write the JSON result (path or fsspec URI)")
    p.add_argument("--include-files", action="store_true", help="include file / tombstone lists (collects them)")
    p.add_argument("--where", help="files: filter expression, e.g. \"date = '2024-01-01'\"")
    p.add_argument("--checks", help="snapshot: JSON check spec (see airflow_delta_provider.commands.checks)")
    p.add_argument("--report-formats", default="", help="tombstones: also write md and/or html next to the result")
    p.add_argument("--fail-on-data-loss", action="store_true", help="changes, --since-version: a missing commit fails")
    p.add_argument(
        "--since-version",
        type=_count("--since-version"),
        help="snapshot: check every version and commit after this one",
    )
    p.add_argument("--apply", action="store_true", help="cleanup_log, vacuum: delete; optimize: commit (default: plan)")
    p.add_argument(
        "--mode",
        type=cli_type(parse_choice, "--mode", choices=VACUUM_MODES),
        choices=VACUUM_MODES,
        default="full",
        help="vacuum: list the table, or the log only",
    )
    p.add_argument("--no-enforce-retention", action="store_true", help="vacuum: allow a shorter retention")
    p.add_argument(
        "--untracked-grace-hours",
        type=cli_type(parse_hours, "--untracked-grace-hours"),
        help="vacuum: never delete an untracked file younger than this (default 1 hour)",
    )
    p.add_argument("--plan", help="vacuum: apply this plan (JSON of a dry run's result, or a path/URI to it)")
    p.add_argument("--plan-dir", help="vacuum on Spark: where executors write the file list (default <result>.plan)")
    p.add_argument("--target-size", type=_count("--target-size", 1), help="optimize: bytes per output file")
    p.add_argument(
        "--min-num-files",
        type=_count("--min-num-files", 1),
        default=DEFAULT_MIN_NUM_FILES,
        help="optimize: candidates a partition needs",
    )
    p.add_argument(
        "--max-commit-bytes",
        type=_count("--max-commit-bytes", 1),
        help="optimize: commit after each batch of this many input bytes",
    )
    p.add_argument(
        "--min-small-file-ratio",
        type=cli_type(parse_ratio, "--min-small-file-ratio"),
        help="optimize: small-file share a partition needs",
    )
    p.add_argument(
        "--small-file-mb",
        type=cli_type(parse_size, "--small-file-mb", unit="MiB"),
        default=DEFAULT_SMALL_FILE_MB,
        help="optimize: what --min-small-file-ratio counts",
    )
    p.add_argument("--write-checkpoint-first", action="store_true", help="cleanup_log: checkpoint at the cutoff first")
    p.add_argument("--now-ms", type=_count("--now-ms"), help="clock for retention (default: now)")
    p.add_argument(
        "--auto-threshold-mb",
        type=cli_type(parse_number, "--auto-threshold-mb", expected="a number of MB"),
        default=DEFAULT_AUTO_THRESHOLD_MB,
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


def request_from_args(args: argparse.Namespace, storage_options: Mapping[str, Any]) -> Request:
    """The command-layer request the job's arguments describe."""
    return Request(
        table=args.table,
        action=args.action,
        version=args.version,
        timestamp=args.timestamp,
        engine=args.engine,
        storage_options=storage_options,
        retention_hours=args.retention_hours,
        include_files=args.include_files,
        where=args.where,
        checks=json.loads(args.checks) if args.checks else None,
        fail_on_data_loss=args.fail_on_data_loss,
        since_version=args.since_version,
        apply=args.apply,
        write_checkpoint_first=args.write_checkpoint_first,
        vacuum_mode=args.mode,
        enforce_retention_duration=not args.no_enforce_retention,
        untracked_grace_hours=args.untracked_grace_hours,
        plan=json.loads(args.plan) if args.plan and args.plan.lstrip().startswith("{") else None,
        plan_uri=args.plan if args.plan and not args.plan.lstrip().startswith("{") else None,
        vacuum_plan_dir=args.plan_dir or (sibling(args.result_uri, "plan") if args.action == "vacuum" else None),
        target_size=args.target_size,
        min_num_files=args.min_num_files,
        max_commit_bytes=args.max_commit_bytes,
        min_small_file_ratio=args.min_small_file_ratio,
        small_file_mb=args.small_file_mb,
        now_ms=args.now_ms,
        snapshot_partitions=args.snapshot_partitions,
        auto_threshold_mb=args.auto_threshold_mb,
    )


def job_argv(request: Request, result_uri: str, report_formats: Sequence[str] = ()) -> list[str]:
    """The job's argv for `request` (the inverse of `request_from_args`; storage options stay out:
    they travel in `DELTA_STORAGE_OPTIONS`)."""
    r = request
    args = ["--table", r.table, "--action", r.action, "--result-uri", result_uri, "--engine", r.engine]
    if r.version is not None:
        args += ["--version", str(r.version)]
    elif r.timestamp is not None:
        args += ["--timestamp", str(r.timestamp)]
    args += ["--snapshot-partitions", str(r.snapshot_partitions)]
    if r.auto_threshold_mb != DEFAULT_AUTO_THRESHOLD_MB:
        args += ["--auto-threshold-mb", str(r.auto_threshold_mb)]
    if r.include_files:
        args.append("--include-files")
    if r.retention_hours is not None:
        args += ["--retention-hours", str(r.retention_hours)]
    if r.where:
        args += ["--where", r.where]
    if r.checks:
        args += ["--checks", json.dumps(dict(r.checks))]
    if r.fail_on_data_loss:
        args.append("--fail-on-data-loss")
    if r.since_version is not None:
        args += ["--since-version", str(r.since_version)]
    if r.apply:
        args.append("--apply")
    if r.write_checkpoint_first:
        args.append("--write-checkpoint-first")
    if r.action == "vacuum":
        args += ["--mode", r.vacuum_mode]
        if not r.enforce_retention_duration:
            args.append("--no-enforce-retention")
        if r.untracked_grace_hours is not None:
            args += ["--untracked-grace-hours", repr(float(r.untracked_grace_hours))]
        if r.plan_uri:  # a kept plan travels as its URI: a big plan would not fit on a command line
            args += ["--plan", r.plan_uri]
        elif r.plan is not None:
            args += ["--plan", json.dumps(dict(r.plan))]
        if r.vacuum_plan_dir:
            args += ["--plan-dir", r.vacuum_plan_dir]
    if r.action == "optimize":
        args += ["--min-num-files", str(r.min_num_files), "--small-file-mb", str(r.small_file_mb)]
        for flag, value in (
            ("--target-size", r.target_size),
            ("--max-commit-bytes", r.max_commit_bytes),
            ("--min-small-file-ratio", r.min_small_file_ratio),
        ):
            if value is not None:
                args += [flag, str(value)]
    if r.now_ms is not None:
        args += ["--now-ms", str(r.now_ms)]
    if report_formats:
        args += ["--report-formats", ",".join(report_formats)]
    return args


def run(
    argv: Sequence[str] | None = None,
    spark_factory: SparkFactory | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> tuple[int, dict[str, Any]]:
    """Run the job; returns (exit code, result) after writing the result to `--result-uri`.

    `storage_options` replaces the environment's (an in-process run).
    """
    args = build_parser().parse_args(argv)
    try:
        options = dict(storage_options) if storage_options is not None else job_storage_options(args.table)
        request = request_from_args(args, options)
    except (DeltaError, ValueError) as exc:  # bad --checks JSON, bad options: still leave a result
        error = (
            exc if isinstance(exc, DeltaError) else InvalidArgumentError(f"bad job argument: {exc}", table=args.table)
        )
        result = {"status": "error", "action": args.action, **error.to_dict(), "engine": "local", "timings": {}}
        result["table"] = result.get("table") or args.table
        write_result(args.result_uri, result, storage_options)
        print(f"delta_job: error: {result['error_class']}: {result['message']}", file=sys.stderr)
        return 1, result
    code, result = execute(
        request,
        result_uri=args.result_uri,
        report_formats=args.report_formats.split(","),
        spark_factory=spark_factory,
    )
    if "result_write_error" in result:
        print(
            f"delta_job: cannot write the result to {args.result_uri}: {result['result_write_error']}", file=sys.stderr
        )
    if result["status"] == "error":
        print(f"delta_job: error: {result['error_class']}: {result['message']}", file=sys.stderr)
    return code, result


def main(argv: Sequence[str] | None = None) -> int:
    code, _ = run(argv)
    return code
