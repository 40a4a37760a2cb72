"""Issue 28, defects 1 and 4: one parser per kind of argument (`commands.arguments`), used by every face.

A flag is a `bool` or true/false, yes/no, on/off: `None`, `""`, numbers and other words are a typed
`InvalidArgumentError` naming the argument, never "delete". Hours, ratios, sizes, counts, choices and
versions are refused the same way. Each operator, the `deltalog` CLI and the spark-submit job's argv go
through these parsers, and a refused argument changes nothing on disk.
"""

from __future__ import annotations

import io
import math
import os
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_delta_provider import version_watch
from airflow_delta_provider.cli import EXIT_USAGE
from airflow_delta_provider.cli import main as cli_main
from airflow_delta_provider.commands import arguments
from airflow_delta_provider.commands.arguments import (
    as_version,
    cli_type,
    optional,
    parse_choice,
    parse_count,
    parse_flag,
    parse_hours,
    parse_ratio,
    parse_size,
)
from airflow_delta_provider.commands.request import Request
from airflow_delta_provider.delta.errors import DeltaError, InvalidArgumentError
from airflow_delta_provider.jobs import runner

#: What a flag must refuse: nothing here may be read as a boolean, least of all as "delete".
BAD_FLAGS: list[Any] = [None, "", 0, 1, "0", "1", 0.0, "bogus", "none", "null", "y", "n", []]
GOOD_FLAGS: list[tuple[Any, bool]] = [
    (True, True),
    (False, False),
    ("true", True),
    ("TRUE", True),
    (" True ", True),
    ("yes", True),
    ("on", True),
    ("ON", True),
    ("false", False),
    ("False", False),
    ("no", False),
    ("off", False),
    ("\tNo\n", False),
]


def _refused(call: Any, argument: str) -> InvalidArgumentError:
    with pytest.raises(InvalidArgumentError) as info:
        call()
    assert isinstance(info.value, DeltaError) and isinstance(info.value, ValueError)
    assert info.value.argument == argument and argument in str(info.value), str(info.value)
    assert "\n" not in str(info.value)
    return info.value


# -- the parsers ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "expected"), GOOD_FLAGS)
def test_flag_words(value, expected):
    assert parse_flag(value, "dry_run") is expected


@pytest.mark.parametrize("value", BAD_FLAGS)
def test_flag_refuses_everything_else(value):
    _refused(lambda: parse_flag(value, "dry_run"), "dry_run")


@pytest.mark.parametrize(("value", "expected"), [(0, 0.0), ("0", 0.0), (1.5, 1.5), (" 24 ", 24.0), ("1e3", 1000.0)])
def test_hours(value, expected):
    assert parse_hours(value, "retention_hours") == expected


@pytest.mark.parametrize("value", [True, False, "abc", math.nan, "nan", math.inf, "inf", -1, "-0.5", 1e13, None, ""])
def test_hours_refused(value):
    error = _refused(lambda: parse_hours(value, "retention_hours"), "retention_hours")
    assert "hours" in error.message


def test_optional_reads_what_a_template_renders_for_nothing():
    for nothing in (None, "", " ", "None", "null"):
        assert optional(parse_hours)(nothing, "retention_hours") is None
    assert optional(parse_hours)("12", "retention_hours") == 12.0
    _refused(lambda: optional(parse_hours)("abc", "retention_hours"), "retention_hours")


def test_ratio_size_count_choice():
    assert parse_ratio("0.5", "min_small_file_ratio") == 0.5 and parse_ratio(1, "r") == 1.0
    for bad in (-0.1, 1.1, "abc", True, math.nan):
        _refused(lambda bad=bad: parse_ratio(bad, "min_small_file_ratio"), "min_small_file_ratio")
    assert parse_size("0.5", "--target-size-mb") == 0.5
    for bad in (0, "0", -1, "abc", False, math.inf):
        error = _refused(lambda bad=bad: parse_size(bad, "--target-size-mb", unit="MiB"), "--target-size-mb")
        assert "> 0" in error.message
    assert parse_count("3", "min_num_files", minimum=1) == 3 and parse_count(0, "limit") == 0
    for bad in (1.5, "1.5", True, 0, "x", None):
        _refused(lambda bad=bad: parse_count(bad, "min_num_files", minimum=1), "min_num_files")
    assert parse_choice(" LITE ", "mode", ("full", "lite")) == "lite"
    error = _refused(lambda: parse_choice("bogus", "mode", ("full", "lite")), "mode")
    assert "full, lite" in error.message
    _refused(lambda: parse_choice(None, "mode", ("full", "lite")), "mode")


def test_versions_have_one_home():
    assert version_watch.as_version is arguments.as_version
    assert version_watch.last_version is arguments.last_version
    assert as_version("None", "version") is None and as_version(" 3 ", "version") == 3 and as_version(4, "v") == 4
    assert as_version([{"version": 2, "timestamp_ms": 5}, {"version": 1, "timestamp_ms": 9}], "newer_than") == 1
    for bad in (True, 1.5, "abc", "1.0"):
        _refused(lambda bad=bad: as_version(bad, "version"), "version")


def test_cli_type_names_the_flag():
    import argparse

    with pytest.raises(argparse.ArgumentTypeError, match=r"^must be a finite number of hours >= 0"):
        cli_type(parse_hours, "--retention-hours")("abc")


def test_the_request_takes_only_real_booleans():
    """The command layer's own check, under every face: a truthy stand-in never reaches an action."""
    pairs = [("vacuum", "apply"), ("vacuum", "enforce_retention_duration"), ("snapshot", "include_files")]
    pairs += [("snapshot", "fail_on_data_loss"), ("changes", "fail_on_data_loss"), ("optimize", "apply")]
    pairs += [("purge", "apply"), ("stats_backfill", "apply"), ("stats_backfill", "tighten")]
    for action, name in pairs:
        for bad in ("false", "", None, 0):
            _refused(lambda a=action, n=name, b=bad: Request.make(table="/t", action=a, **{n: b}), name)
    # a field the action does not take is refused too, naming it (never silently dropped)
    _refused(lambda: Request.make(table="/t", action="files", retention_hours=1), "retention_hours")
    _refused(lambda: Request.make(table="/t", action="vacuum", mode="bogus"), "mode")


# -- the operators ----------------------------------------------------------------------------------------

#: (operator class name, flag argument) for every flag of every operator.
OPERATOR_FLAGS = [
    ("SnapshotReplayOperator", "fail_on_data_loss"),
    ("SnapshotReplayOperator", "include_files"),
    ("TombstoneReportOperator", "include_files"),
    ("TombstoneReportOperator", "submit"),
    ("DeltaCheckpointOperator", "ship_library"),
    ("DeltaLogCleanupOperator", "apply"),
    ("DeltaLogCleanupOperator", "write_checkpoint_first"),
    ("DeltaVacuumOperator", "dry_run"),
    ("DeltaVacuumOperator", "enforce_retention_duration"),
    ("DeltaVacuumOperator", "quarantine"),
    ("DeltaVacuumPurgeOperator", "dry_run"),
    ("DeltaOptimizeOperator", "dry_run"),
    ("DeltaPurgeOperator", "dry_run"),
    ("DeltaStatsBackfillOperator", "dry_run"),
    ("DeltaStatsBackfillOperator", "tighten"),
]
#: (operator, argument, bad values) for the other kinds.
OPERATOR_VALUES = [
    ("TombstoneReportOperator", "retention_hours", ["abc", "nan", "inf", -1, True, math.nan]),
    ("DeltaVacuumOperator", "retention_hours", ["abc", "-1", False]),
    ("DeltaVacuumOperator", "mode", ["bogus", None, "", 1]),
    ("DeltaVacuumOperator", "untracked_grace_hours", ["abc", "-1", True, math.inf]),
    ("DeltaOptimizeOperator", "min_small_file_ratio", ["abc", 1.5, -0.1, True]),
    ("DeltaOptimizeOperator", "target_size", [0, "0", -1, 1.5, True]),
    ("DeltaOptimizeOperator", "min_num_files", [0, "abc", None]),
    ("DeltaOptimizeOperator", "small_file_mb", [0, "abc", None]),
    ("DeltaOptimizeOperator", "max_commit_bytes", [0, "x"]),
    ("DeltaCheckpointOperator", "version", ["abc", True, 1.5]),
    ("DeltaCheckpointOperator", "engine", ["bogus", None]),
    ("DeltaCheckpointOperator", "snapshot_partitions", [0, "abc"]),
    ("DeltaCheckpointOperator", "auto_threshold_mb", ["abc", -1]),
    ("SnapshotReplayOperator", "since_version", ["abc", True]),
    ("SnapshotReplayOperator", "lease_ttl", ["abc", 0, "-1", True, "400d", math.nan]),
    ("SnapshotReplayOperator", "lease_location", [1, True]),
    ("DeltaVacuumOperator", "lease_location", [1, True, ["/x"]]),
    ("DeltaLogCleanupOperator", "lease_location", [1, False]),
    ("DeltaVacuumPurgeOperator", "older_than_hours", ["abc", "-1", True, None, "", math.inf]),
    ("DeltaPurgeOperator", "min_deleted_ratio", [None, "", 0.0 - 1, "false", "no", "bogus", 1.5, True]),
    ("DeltaPurgeOperator", "max_files", [0, "0", "false", "no", "bogus", 1.5, True]),
    ("DeltaPurgeOperator", "max_bytes", [0, "0", "false", "no", "bogus", "-1", "5XB", True]),
    ("DeltaPurgeOperator", "target_size", [0, "no", True]),
    ("DeltaOptimizeOperator", "max_files", [0, "0", "false", "no", "bogus", 1.5, True]),
    ("DeltaOptimizeOperator", "max_bytes", [0, "0", "false", "no", "bogus", "-1", "5XB", True]),
    ("DeltaStatsBackfillOperator", "max_files", [0, "false", "no", "bogus"]),
    ("DeltaStatsBackfillOperator", "max_bytes", [0, "false", "no", "bogus"]),
    ("DeltaStatsBackfillOperator", "files_per_commit", [0, "false", "no", "bogus", True]),
    ("DeltaLakeScanOperator", "prefixes", [0, True, [""], ["/x", 1], "[1]", "[not json"]),
    ("DeltaLakeScanOperator", "tables", [0, False, [None]]),
    ("DeltaLakeScanOperator", "max_depth", [None, "", "false", "no", "bogus", -1, True, 1.5]),
    ("DeltaLakeScanOperator", "policy", [1, True]),
    ("DeltaLakePlanOperator", "budget_bytes", [0, "false", "no", "bogus", True]),
    ("DeltaLakePlanOperator", "budget_requests", ["false", "no", "bogus", -1, True, 1.5]),
    ("DeltaLakePlanOperator", "budget_seconds", ["false", "no", "bogus", -1, True, "nan"]),
]
#: Optional arguments of the new operators: None and "" (what a template renders for nothing) are not given.
OPERATOR_OPTIONAL = [
    ("DeltaOptimizeOperator", "max_files"),
    ("DeltaOptimizeOperator", "max_bytes"),
    ("DeltaPurgeOperator", "max_files"),
    ("DeltaPurgeOperator", "max_bytes"),
    ("DeltaStatsBackfillOperator", "max_files"),
    ("DeltaStatsBackfillOperator", "max_bytes"),
    ("DeltaStatsBackfillOperator", "files_per_commit"),
    ("DeltaLakeScanOperator", "policy"),
    ("DeltaLakePlanOperator", "budget_bytes"),
    ("DeltaLakePlanOperator", "budget_requests"),
    ("DeltaLakePlanOperator", "budget_seconds"),
]


@pytest.fixture
def ops():
    pytest.importorskip("airflow")
    from airflow_delta_provider.operators import delta

    return delta


def _op(ops: Any, cls: str, **kwargs: Any) -> Any:
    if cls.startswith("DeltaLake"):  # a lake's operators take prefixes (and tables), not one table
        return getattr(ops, cls)(task_id="t", **{"prefixes": ["/nowhere/lake"], **kwargs})
    return getattr(ops, cls)(task_id="t", table_uri="/nowhere/t", **kwargs)


@pytest.mark.airflow
@pytest.mark.parametrize(("cls", "flag"), OPERATOR_FLAGS)
@pytest.mark.parametrize("value", BAD_FLAGS)
def test_every_operator_flag_refuses_a_non_boolean(ops, cls, flag, value):
    _refused(lambda: _op(ops, cls, **{flag: value}), flag)


#: How each flag shows in the request an operator builds (or on the operator, where it never reaches one).
READ_BACK = {
    "include_files": lambda request, op: request.options.include_files,
    "submit": lambda request, op: request.engine != "local",
    "apply": lambda request, op: request.options.apply,
    "write_checkpoint_first": lambda request, op: request.options.write_checkpoint_first,
    "dry_run": lambda request, op: not request.options.apply,
    "enforce_retention_duration": lambda request, op: request.options.enforce_retention_duration,
    "quarantine": lambda request, op: request.options.quarantine,
    "tighten": lambda request, op: request.options.tighten,
    "fail_on_data_loss": lambda request, op: op.argument("fail_on_data_loss"),  # templated: parsed when read
    "ship_library": lambda request, op: op.ship_library,
}


@pytest.mark.airflow
@pytest.mark.parametrize(("cls", "flag"), OPERATOR_FLAGS)
@pytest.mark.parametrize(("value", "expected"), GOOD_FLAGS)
def test_every_operator_flag_reads_the_words(ops, cls, flag, value, expected):
    op = _op(ops, cls, **{flag: value})
    assert READ_BACK[flag](op.build_request({}), op) is expected


@pytest.mark.airflow
@pytest.mark.parametrize(
    ("cls", "flag"),
    [
        ("DeltaLogCleanupOperator", "apply"),
        ("DeltaOptimizeOperator", "dry_run"),
        ("DeltaVacuumPurgeOperator", "dry_run"),
        ("DeltaPurgeOperator", "dry_run"),
        ("DeltaStatsBackfillOperator", "dry_run"),
    ],
)
@pytest.mark.parametrize("value", ["", "0", "1", "None", "bogus"])
def test_a_templated_flag_is_parsed_once_rendered(ops, cls, flag, value):
    op = _op(ops, cls, **{flag: "{{ params.flag }}"})
    op.render_template_fields({"params": {"flag": value}})
    _refused(lambda: op.build_request({}), flag)


@pytest.mark.airflow
@pytest.mark.parametrize(("cls", "argument", "values"), OPERATOR_VALUES)
def test_every_operator_argument_is_a_typed_error(ops, cls, argument, values):
    for value in values:
        error = _refused(lambda value=value: _op(ops, cls, **{argument: value}), argument)
        if argument == "mode":
            assert "full, lite" in error.message


@pytest.mark.airflow
@pytest.mark.parametrize(("cls", "argument"), OPERATOR_OPTIONAL)
@pytest.mark.parametrize("value", [None, "", "None"])
def test_an_optional_argument_given_nothing_is_not_given(ops, cls, argument, value):
    assert getattr(_op(ops, cls, **{argument: value}).build_request({}).options, argument) is None


@pytest.mark.airflow
def test_the_new_operators_read_their_arguments_into_the_request(ops):
    purge = _op(ops, "DeltaPurgeOperator", min_deleted_ratio="0.25", max_files="3", max_bytes="1MiB", where="p = 1")
    o = purge.build_request({}).options
    assert (o.min_deleted_ratio, o.max_files, o.max_bytes, o.where, o.apply) == (0.25, 3, 2**20, "p = 1", False)
    lake = _op(ops, "DeltaLakePlanOperator", prefixes='["/a", "/b"]', tables="/c", budget_bytes="10GB")
    request = lake.build_request({})
    assert request.table == "/a" and request.options.prefixes == ("/a", "/b") and request.options.tables == ("/c",)
    assert request.options.budget_bytes == 10**10 and request.options.max_depth == 4


@pytest.mark.airflow
def test_a_templated_number_is_parsed_once_rendered(ops):
    op = _op(ops, "DeltaOptimizeOperator", min_small_file_ratio="{{ params.r }}", retention_hours="{{ params.h }}")
    op.render_template_fields({"params": {"r": "abc", "h": "24"}})
    _refused(lambda: op.build_request({}), "min_small_file_ratio")
    op = _op(ops, "DeltaOptimizeOperator", min_small_file_ratio="{{ params.r }}", retention_hours="{{ params.h }}")
    op.render_template_fields({"params": {"r": "None", "h": "x"}})
    _refused(lambda: op.build_request({}), "retention_hours")
    op = _op(ops, "DeltaOptimizeOperator", min_small_file_ratio="{{ params.r }}", retention_hours="{{ params.h }}")
    op.render_template_fields({"params": {"r": "0.5", "h": ""}})
    request = op.build_request({})
    assert request.options.min_small_file_ratio == 0.5 and not hasattr(request.options, "retention_hours")


# -- nothing is deleted -------------------------------------------------------------------------------------

OLD = time.time() - 30 * 24 * 3600


def _garbage_table(tmp_path: Path) -> Path:
    """A delta-rs table with a month-old tombstone and a month-old untracked file: VACUUM with
    `retention_hours=0, enforce_retention_duration=False` deletes 2 files when it applies."""
    import pyarrow as pa
    from deltalake import write_deltalake

    root = tmp_path / "t"
    write_deltalake(str(root), pa.table({"id": [1, 2]}))
    write_deltalake(str(root), pa.table({"id": [3]}), mode="overwrite")
    (root / "stray.parquet").write_bytes(b"not referenced")
    for p in root.glob("*.parquet"):
        os.utime(p, (OLD, OLD))
    return root


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _context() -> dict[str, Any]:
    class TI:
        dag_id, task_id = "d", "t"

    return {"ti": TI(), "run_id": "manual__1"}


@pytest.mark.airflow
@pytest.mark.parametrize("value", [None, "", 0, "0", "none", "bogus"])
def test_vacuum_dry_run_that_is_not_a_boolean_deletes_nothing(ops, tmp_path, value):
    root = _garbage_table(tmp_path)
    before = _listing(root)
    apply = dict(table_uri=str(root), submit=False, retention_hours=0, enforce_retention_duration=False)
    _refused(lambda: ops.DeltaVacuumOperator(task_id="v", dry_run=value, **apply).execute(_context()), "dry_run")
    op = ops.DeltaVacuumOperator(task_id="v", **apply)  # a value set after __init__ is parsed at execute time
    op.dry_run = value
    _refused(lambda: op.execute(_context()), "dry_run")
    assert _listing(root) == before


@pytest.mark.airflow
def test_vacuum_dry_run_words(ops, tmp_path):
    root = _garbage_table(tmp_path)
    before = _listing(root)
    apply = dict(table_uri=str(root), submit=False, retention_hours="0", enforce_retention_duration="no")
    for word in ("yes", "TRUE", "on"):
        plan = ops.DeltaVacuumOperator(task_id="v", dry_run=word, **apply).execute(_context())
        assert plan["dry_run"] and plan["num_files"] == 2 and _listing(root) == before
    done = ops.DeltaVacuumOperator(task_id="v", dry_run="false", **apply).execute(_context())
    assert not done["dry_run"] and done["deleted"] == 2 and not (root / "stray.parquet").exists()


@pytest.mark.airflow
@pytest.mark.parametrize("value", ["", None, 0, "0", "off-ish"])
def test_empty_enforce_retention_duration_is_an_error_not_the_check_turned_off(ops, tmp_path, value):
    """Regression: `enforce_retention_duration=""` was falsy, so a 0-hour retention deleted files the
    table's 7-day retention protects."""
    root = _garbage_table(tmp_path)
    before = _listing(root)
    kwargs = dict(table_uri=str(root), submit=False, retention_hours=0, dry_run=False)
    _refused(
        lambda: ops.DeltaVacuumOperator(task_id="v", enforce_retention_duration=value, **kwargs).execute(_context()),
        "enforce_retention_duration",
    )
    assert _listing(root) == before


@pytest.mark.airflow
@pytest.mark.parametrize("value", [None, "", "0"])
def test_log_cleanup_apply_that_is_not_a_boolean_deletes_nothing(ops, tmp_path, value):
    from airflow_delta_provider.testing import DeltaLogBuilder

    b = DeltaLogBuilder(tmp_path / "t", schema={"id": "long"})  # commits stamped long past any log retention
    b.create()
    for i in range(5):
        b.append([f"f{i}.parquet"], size=100 + i)
    b.checkpoint()
    b.append(["g.parquet"], size=10)
    before = _listing(tmp_path / "t")
    op = ops.DeltaLogCleanupOperator(task_id="c", table_uri=b.path, submit=False, apply="{{ params.apply }}")
    op.render_template_fields({"params": {"apply": value}})
    _refused(lambda: op.execute(_context()), "apply")
    assert _listing(tmp_path / "t") == before


# -- the CLI and the job's argv ---------------------------------------------------------------------------

CLI_BAD = [
    (["vacuum", "{T}", "--retention-hours", "abc"], "--retention-hours"),
    (["vacuum", "{T}", "--retention-hours", ""], "--retention-hours"),
    (["vacuum", "{T}", "--retention-hours", "nan"], "--retention-hours"),
    (["vacuum", "{T}", "--mode", "bogus"], "--mode"),
    (["vacuum", "{T}", "--mode", ""], "--mode"),
    (["vacuum", "{T}", "--untracked-grace-hours", "abc"], "--untracked-grace-hours"),
    (["vacuum", "{T}", "--untracked-grace-hours", ""], "--untracked-grace-hours"),
    (["vacuum", "{T}", "--untracked-grace-hours", "-1"], "--untracked-grace-hours"),
    (["vacuum", "{T}", "--apply=false", "--retention-hours", "0", "--no-enforce-retention"], "--apply"),
    (["vacuum", "{T}", "--engine", "bogus"], "--engine"),
    (["cleanup-log", "{T}", "--apply=no"], "--apply"),
    (["cleanup-log", "{T}", "--retention-hours", "-1"], "--retention-hours"),
    (["optimize", "{T}", "--target-size-mb", "0"], "--target-size-mb"),
    (["optimize", "{T}", "--target-size-mb", ""], "--target-size-mb"),
    (["optimize", "{T}", "--min-small-file-ratio", "abc"], "--min-small-file-ratio"),
    (["optimize", "{T}", "--min-num-files", "0"], "--min-num-files"),
    (["snapshot", "{T}", "--version", "true"], "--version"),
    (["purge", "{T}", "--apply=no"], "--apply"),
    (["purge", "{T}", "--min-deleted-ratio", ""], "--min-deleted-ratio"),
    (["purge", "{T}", "--min-deleted-ratio", "bogus"], "--min-deleted-ratio"),
    (["purge", "{T}", "--min-deleted-ratio", "1.5"], "--min-deleted-ratio"),
    (["purge", "{T}", "--max-files", "0"], "--max-files"),
    (["purge", "{T}", "--max-files", "no"], "--max-files"),
    (["purge", "{T}", "--max-bytes", ""], "--max-bytes"),
    (["purge", "{T}", "--max-bytes", "false"], "--max-bytes"),
    (["stats-backfill", "{T}", "--tighten=false", "--apply"], "--tighten"),
    (["stats-backfill", "{T}", "--apply=yes"], "--apply"),
    (["stats-backfill", "{T}", "--max-files", "bogus"], "--max-files"),
    (["stats-backfill", "{T}", "--max-bytes", "0"], "--max-bytes"),
    (["stats-backfill", "{T}", "--engine", "spark", "--apply"], "--engine"),
    (["lake", "scan", "{T}", "--max-depth", ""], "--max-depth"),
    (["lake", "scan", "{T}", "--max-depth", "no"], "--max-depth"),
    (["lake", "scan"], "PREFIX"),
    (["lake", "plan", "{T}", "--budget-bytes", "bogus"], "--budget-bytes"),
    (["lake", "plan", "{T}", "--budget-bytes", "0"], "--budget-bytes"),
    (["lake", "plan", "{T}", "--budget-requests", "-1"], "--budget-requests"),
    (["lake", "plan", "{T}", "--budget-seconds", "false"], "--budget-seconds"),
    (["lake", "plan", "{T}", "--budget-seconds", ""], "--budget-seconds"),
    (["lake", "report", "{T}", "--max-runs", "0"], "--max-runs"),
]


@pytest.mark.parametrize(("argv", "flag"), CLI_BAD)
def test_cli_refuses_a_bad_value_naming_the_flag_and_deletes_nothing(tmp_path, argv, flag):
    root = _garbage_table(tmp_path)
    before = _listing(root)
    out, err = io.StringIO(), io.StringIO()
    code = cli_main([a.replace("{T}", str(root)) for a in argv], out=out, err=err)
    assert (code, out.getvalue()) == (EXIT_USAGE, ""), err.getvalue()
    line = err.getvalue()
    assert line.count("\n") == 1 and line.startswith("deltalog: error: InvalidArgumentError: ") and flag in line
    assert "Traceback" not in line
    assert _listing(root) == before


JOB_BAD = [
    ({"action": "vacuum", "options": {"retention_hours": "abc"}}, "retention_hours"),
    ({"action": "vacuum", "options": {"mode": "bogus"}}, "mode"),
    ({"action": "vacuum", "options": {"apply": "false"}}, "apply"),
    ({"action": "vacuum", "options": {"untracked_grace_hours": -1}}, "untracked_grace_hours"),
    ({"action": "optimize", "options": {"target_size": 0}}, "target_size"),
    ({"action": "optimize", "options": {"min_small_file_ratio": 2}}, "min_small_file_ratio"),
    ({"action": "optimize", "options": {"small_file_mb": 0}}, "small_file_mb"),
    ({"action": "snapshot", "version": True}, "version"),
    ({"action": "snapshot", "engine": ""}, "engine"),
    ({"action": "files", "options": {"retention_hours": 1}}, "retention_hours"),
    ({"action": "bogus"}, "action"),
    ({"action": "purge", "options": {"apply": "false"}}, "apply"),
    ({"action": "purge", "options": {"min_deleted_ratio": 2}}, "min_deleted_ratio"),
    ({"action": "purge", "options": {"max_bytes": 0}}, "max_bytes"),
    ({"action": "stats_backfill", "options": {"tighten": "no"}}, "tighten"),
    ({"action": "lake_scan", "options": {"prefixes": "/one/string"}}, "prefixes"),
    ({"action": "lake_plan", "options": {"budget_requests": -1}}, "budget_requests"),
]


@pytest.mark.parametrize(("body", "field"), JOB_BAD)
def test_job_request_is_checked_by_the_same_rules(tmp_path, capsys, body, field):
    """The job takes the request as JSON; a bad field is a typed error result naming it, nothing deleted."""
    import json

    root = _garbage_table(tmp_path)
    before = _listing(root)
    request = json.dumps({"table": str(root), **body})
    code, result = runner.run(["--request", request, "--result-uri", str(tmp_path / "r.json")])
    assert code == 1 and result["status"] == "error" and result["error_class"] == "InvalidArgumentError"
    assert result["argument"] == field and result["table"] == str(root)
    assert "InvalidArgumentError: " in capsys.readouterr().err
    assert json.loads((tmp_path / "r.json").read_text())["argument"] == field
    assert _listing(root) == before


# -- the untracked-file grace period on every face ----------------------------------------------------------


def _fresh_stray(root: Path) -> Path:
    """An untracked file written just now (a writer's data file before its commit)."""
    fresh = root / "in-flight.parquet"
    fresh.write_bytes(b"staged by a writer that has not committed yet")
    return fresh


def test_cli_keeps_a_fresh_untracked_file_unless_the_grace_is_zero(tmp_path):
    root = _garbage_table(tmp_path)
    fresh = _fresh_stray(root)
    base = ["vacuum", str(root), "--retention-hours", "0", "--no-enforce-retention", "--apply", "--json"]
    out = io.StringIO()
    assert cli_main(base, out=out, err=io.StringIO()) == 0
    assert fresh.exists() and not (root / "stray.parquet").exists()
    assert cli_main([*base, "--untracked-grace-hours", "0"], out=io.StringIO(), err=io.StringIO()) == 0
    assert not fresh.exists()


def test_job_argv_carries_the_grace_both_ways(tmp_path):
    request = Request.make(table=str(tmp_path), action="vacuum", untracked_grace_hours=0.5)
    argv = runner.job_argv(request, str(tmp_path / "r.json"))
    again = runner.request_from_job(runner.build_parser().parse_args(argv).request, str(tmp_path / "r.json"), {})
    assert again.options.untracked_grace_hours == 0.5 and again.options.plan_dir == str(tmp_path / "r.plan")
    assert again.with_options(plan_dir=None) == request


@pytest.mark.airflow
def test_vacuum_operator_passes_the_grace(ops, tmp_path):
    root = _garbage_table(tmp_path)
    fresh = _fresh_stray(root)
    apply = dict(table_uri=str(root), submit=False, retention_hours=0, enforce_retention_duration=False, dry_run=False)
    ops.DeltaVacuumOperator(task_id="v", **apply).execute(_context())
    assert fresh.exists()
    ops.DeltaVacuumOperator(task_id="v", untracked_grace_hours="0", **apply).execute(_context())
    assert not fresh.exists()
