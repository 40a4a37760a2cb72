"""`DeltaOptimizeOperator` and `deltalog optimize` in process (the compaction itself: tests/delta/test_optimize.py)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow as pa
import pytest

pytest.importorskip("airflow")

from deltalake import DeltaTable, write_deltalake
from provider_support import task_context

from airflow_delta_provider.cli import main as cli_main
from airflow_delta_provider.commands.request import Request
from airflow_delta_provider.delta.errors import InvalidArgumentError
from airflow_delta_provider.jobs.runner import build_parser, job_argv
from airflow_delta_provider.operators.delta import DeltaOptimizeOperator

pytestmark = pytest.mark.airflow


def _small_files(tmp_path: Path, n: int = 6) -> Path:
    root = tmp_path / "t"
    for i in range(n):
        write_deltalake(str(root), pa.table({"id": [i, i + 100], "p": ["a", "b"]}), mode="append", partition_by=["p"])
    return root


def _ids(root: Path, version: int | None = None) -> list[int]:
    return sorted(DeltaTable(str(root), version=version).to_pyarrow_table().column("id").to_pylist())


def test_operator_plans_then_compacts(tmp_path: Path) -> None:
    root = _small_files(tmp_path)
    ids, v = _ids(root), DeltaTable(str(root)).version()
    plan = DeltaOptimizeOperator(task_id="plan", table_uri=str(root), submit=False, dry_run=True).execute(
        task_context(tmp_path)
    )
    assert plan["dry_run"] and plan["version"] is None and plan["num_files_removed"] == 12
    assert plan["num_partitions"] == 2 and DeltaTable(str(root)).version() == v
    done = DeltaOptimizeOperator(task_id="optimize", table_uri=str(root), submit=False).execute(task_context(tmp_path))
    assert not done["dry_run"] and done["version"] == v + 1 and done["read_version"] == v
    assert (done["num_files_removed"], done["num_files_added"]) == (12, 2) and done["engine"] == "local"
    assert _ids(root) == ids and len(DeltaTable(str(root)).file_uris()) == 2


def test_operator_small_file_ratio_threshold(tmp_path: Path) -> None:
    root = _small_files(tmp_path)
    done = DeltaOptimizeOperator(
        task_id="optimize", table_uri=str(root), submit=False, where="p = 'a'", min_small_file_ratio=0.9
    ).execute(task_context(tmp_path))
    assert done["num_files_removed"] == 6 and done["num_partitions"] == 1


def test_job_argv_round_trips(tmp_path: Path) -> None:
    op = DeltaOptimizeOperator(
        task_id="o", table_uri="s3://b/t", target_size=1 << 20, min_num_files=3, where="p = 'a'",
        max_commit_bytes=1 << 30, min_small_file_ratio=0.5, engine="spark",
    )  # fmt: skip
    argv = op.job_arguments("file:///tmp/r.json")
    request = Request.from_json(build_parser().parse_args(argv).request, {})
    assert request == op.build_request({})
    assert job_argv(request, "file:///tmp/r.json", ("md", "html")) == argv  # OPTIMIZE has reports
    assert request.options.apply and request.action == "optimize"


def test_deltalog_optimize_json_is_the_issue_shape(tmp_path: Path) -> None:
    root = _small_files(tmp_path)
    ids, v = _ids(root), DeltaTable(str(root)).version()
    out, err = io.StringIO(), io.StringIO()
    assert cli_main(["optimize", str(root), "--json"], out=out, err=err) == 0, err.getvalue()
    body = json.loads(out.getvalue())
    assert body["version"] is None and body["dry_run"] and DeltaTable(str(root)).version() == v
    out = io.StringIO()
    args = ["optimize", str(root), "--target-size-mb", "64", "--min-num-files", "2", "--apply", "--json"]
    assert cli_main(args, out=out, err=err) == 0, err.getvalue()
    body = json.loads(out.getvalue())
    assert set(body) >= {
        "version",
        "num_files_removed",
        "num_files_added",
        "bytes_removed",
        "bytes_added",
        "partitions",
    }
    assert body["version"] == v + 1 and body["num_files_removed"] == 12 and body["num_files_added"] == 2
    assert body["bytes_removed"] > 0 and body["bytes_added"] > 0 and set(body["partitions"]) == {"p=a", "p=b"}
    assert _ids(root) == ids and _ids(root, v) == ids
    out = io.StringIO()
    assert cli_main(["optimize", str(root), "--apply"], out=out, err=err) == 0
    assert "nothing to compact" in out.getvalue()


def test_deltalog_optimize_bad_input(tmp_path: Path) -> None:
    root = _small_files(tmp_path, 2)
    err = io.StringIO()
    assert cli_main(["optimize", str(root), "--min-num-files", "0"], out=io.StringIO(), err=err) == 2
    err = io.StringIO()
    assert cli_main(["optimize", str(root), "--where", "id > 1"], out=io.StringIO(), err=err) != 0
    assert "partition columns" in err.getvalue()


@pytest.mark.parametrize("value", ["y", "apply", "ture", "2", "", "0", "1", "None"])
def test_dry_run_refuses_a_value_that_is_not_a_boolean(tmp_path: Path, value: str) -> None:
    """A rendered `dry_run` that is no boolean (a typo) is a typed error naming the argument, before any
    run: the table is not compacted."""
    root = _small_files(tmp_path, 3)
    v = DeltaTable(str(root)).version()
    op = DeltaOptimizeOperator(task_id="o", table_uri=str(root), submit=False, dry_run="{{ params.dry }}")
    op.render_template_fields({"params": {"dry": value}})
    with pytest.raises(InvalidArgumentError, match="dry_run must be a boolean") as info:
        op.execute(task_context(tmp_path))
    assert info.value.argument == "dry_run"
    assert DeltaTable(str(root)).version() == v


@pytest.mark.parametrize(
    ("value", "dry"), [("True", True), ("on", True), ("yes", True), ("False", False), (" off ", False), ("NO", False)]
)
def test_dry_run_reads_rendered_booleans(value: str, dry: bool) -> None:
    op = DeltaOptimizeOperator(task_id="o", table_uri="/t", dry_run="{{ params.dry }}")
    op.render_template_fields({"params": {"dry": value}})
    assert op.extra_request_fields()["apply"] is (not dry)


def test_optimize_defaults_are_one_constant_everywhere() -> None:
    """The request (which the Spark job receives whole) and the operator default to the protocol layer's
    constants, and the small-file line is the replay checks' (`table_properties.DEFAULT_SMALL_FILE_BYTES`)."""
    from airflow_delta_provider.delta.protocol import optimize as protocol_optimize
    from airflow_delta_provider.delta.protocol import table_properties

    assert protocol_optimize.DEFAULT_SMALL_FILE_BYTES is table_properties.DEFAULT_SMALL_FILE_BYTES
    assert protocol_optimize.DEFAULT_SMALL_FILE_MB * 2**20 == table_properties.DEFAULT_SMALL_FILE_BYTES
    expected = (protocol_optimize.DEFAULT_MIN_NUM_FILES, protocol_optimize.DEFAULT_SMALL_FILE_MB)
    request = Request(table="/t", action="optimize")
    op = DeltaOptimizeOperator(task_id="o", table_uri="/t")
    assert (request.options.min_num_files, request.options.small_file_mb) == expected
    assert (op.min_num_files, op.small_file_mb) == expected


def test_operator_and_cli_budget_compact_one_partition_and_report_the_other(tmp_path: Path) -> None:
    root = _small_files(tmp_path)  # two partitions of six files
    ids, v = _ids(root), DeltaTable(str(root)).version()
    op = DeltaOptimizeOperator(task_id="o", table_uri=str(root), submit=False, max_files="{{ params.n }}")
    op.render_template_fields({"params": {"n": "6"}})
    done = op.execute(task_context(tmp_path))
    assert (done["num_files_removed"], done["num_files_added"], done["num_files_over_budget"]) == (6, 1, 6)
    assert done["version"] == v + 1 and done["bytes_over_budget"] > 0 and _ids(root) == ids
    out, err = io.StringIO(), io.StringIO()
    assert cli_main(["optimize", str(root), "--max-bytes", "1KiB", "--apply", "--json"], out=out, err=err) == 0
    body = json.loads(out.getvalue())
    assert (body["num_files_removed"], body["version"]) == (6, v + 2)  # the first bin always
    assert _ids(root) == ids and len(DeltaTable(str(root)).file_uris()) == 2
    with pytest.raises(InvalidArgumentError, match="max_files"):
        DeltaOptimizeOperator(task_id="o", table_uri=str(root), max_files=0)
