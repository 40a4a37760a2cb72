"""The job the operators submit: `delta_job.py --request JSON --result-uri URI [--report-formats md,html]`.

`--request` is `Request.to_json()`; the result is the action's JSON plus `status`, `action`, `engine`,
`duration_s`, `timings` and `spark_app_id`. Exit code 1 for a typed `DeltaError` (the result says which),
3 for anything else, 2 for a malformed command line. Credentials never travel on the command line
(spark-submit logs it): they come from `DELTA_STORAGE_OPTIONS` (JSON) and the store's standard variables.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from ..commands.command import SparkFactory, execute, storage_options_from_env
from ..commands.request import Request
from ..commands.result_store import sibling, write_result
from ..delta.errors import DeltaError, InvalidArgumentError

STORAGE_OPTIONS_ENV = "DELTA_STORAGE_OPTIONS"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="delta_job", description="Run one Delta request and write one JSON result.")
    p.add_argument("--request", required=True, help="the request as JSON (commands.request.Request.to_json)")
    p.add_argument("--result-uri", required=True, help="where to write the JSON result (path or fsspec URI)")
    p.add_argument("--report-formats", default="", help="also write md and/or html next to the result")
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


def job_argv(request: Request, result_uri: str, report_formats: Sequence[str] = ()) -> list[str]:
    """The job's argv for `request` (storage options stay out: they travel in `DELTA_STORAGE_OPTIONS`)."""
    args = ["--request", request.to_json(), "--result-uri", result_uri]
    if report_formats:
        args += ["--report-formats", ",".join(report_formats)]
    return args


def request_from_job(text: str, result_uri: str, storage_options: Mapping[str, Any]) -> Request:
    """The request a job was given; VACUUM on Spark keeps a big plan's file list beside the result."""
    request = Request.from_json(text, storage_options)
    if request.action == "vacuum" and request.options.plan_dir is None:
        request = request.with_options(plan_dir=sibling(result_uri, "plan"))
    return request


def run(
    argv: Sequence[str] | None = None,
    spark_factory: SparkFactory | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> tuple[int, dict[str, Any]]:
    """Run the job: (exit code, result), the result written to `--result-uri`; `storage_options` replace
    the environment's (an in-process run)."""
    args = build_parser().parse_args(argv)
    table, action = _peek(args.request)
    try:
        options = dict(storage_options) if storage_options is not None else job_storage_options(table)
        request = request_from_job(args.request, args.result_uri, options)
    except DeltaError as error:  # a bad request or bad options: still leave a result
        code, result = 1, {"status": "error", "action": action, **error.to_dict(), "engine": "local", "timings": {}}
        result["table"] = result.get("table") or table
        write_result(args.result_uri, result, storage_options)
    else:
        formats = args.report_formats.split(",")
        code, result = execute(request, result_uri=args.result_uri, report_formats=formats, spark_factory=spark_factory)
    if "result_write_error" in result:
        print(
            f"delta_job: cannot write the result to {args.result_uri}: {result['result_write_error']}", file=sys.stderr
        )
    if result["status"] == "error":
        print(f"delta_job: error: {result['error_class']}: {result['message']}", file=sys.stderr)
    return code, result


def main(argv: Sequence[str] | None = None) -> int:
    return run(argv)[0]


def _peek(text: str) -> tuple[str, str | None]:
    """(table, action) of a request's JSON as far as it can be read (for an error result)."""
    try:
        body = json.loads(text)
    except ValueError:
        return "", None
    if not isinstance(body, dict):
        return "", None
    return str(body.get("table") or ""), body.get("action")
