"""The lake report (`commands.lake_report`) over a maintenance history written by the real autopilot path.

Real components, no mocks: tables written by delta-rs, planned by `delta.lake.scan`/`plan`, maintained by
`delta.lake.run_table` (OPTIMIZE, checkpoint) and recorded by `delta.lake.record_runs` (the history table the
autopilot DAG appends to); delta-rs is the oracle for each health point's files.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_delta_provider.commands.lake_report import (
    _PAST,
    lake_report,
    render_lake_html,
    render_lake_json,
    render_lake_markdown,
)
from airflow_delta_provider.delta import DeltaLog
from airflow_delta_provider.delta.errors import InvalidArgumentError
from airflow_delta_provider.delta.lake import parse_policy, plan, record_runs, run_table, scan

POLICY = parse_policy({"defaults": {"min_small_files": 3, "checkpoint_interval": 4}})


def _append(path: Path, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        write_deltalake(str(path), pa.table({"p": ["a"] * 3, "x": [i] * 3}), partition_by=["p"], mode="append")


def _run(history: str, run_id: str, tables: list[str]) -> list[dict]:
    """One autopilot run: scan, plan, run each table's tasks, record every row in one commit."""
    DeltaLog.clear_cache()
    tasks = [t.to_dict() for t in plan(scan(tables, policy=POLICY).healths).tasks]
    rows = []
    for table in tables:
        rows += run_table(table, [t for t in tasks if t["table"] == table])
    for row in rows:
        row.update(run_id=run_id, dag_id="delta_lake_autopilot")
    record_runs(history, rows)
    return rows


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("lake")
    t, u = root / "t", root / "u"
    history = "file://" + str(root / "_maintenance_history")
    _append(t, 5)
    DeltaTable(str(t)).delete("x = 0")  # a tombstone before the first run
    first = _run(history, "r1", ["file://" + str(t)])
    _append(t, 4, start=10)
    _append(u, 4)
    second = _run(history, "r2", ["file://" + str(t), "file://" + str(u)])
    return {"history": history, "t": "file://" + str(t), "u": "file://" + str(u), "rows": first + second}


def _files_at(table: str, version: int) -> tuple[int, int]:
    adds = pa.table(DeltaTable(table, version=version).get_add_actions(flatten=True)).to_pydict()
    return len(adds["path"]), sum(adds["size_bytes"])


def test_each_tables_health_before_and_after_each_run_and_what_it_cost(lake: dict) -> None:
    report = lake_report(lake["history"])
    assert report["history_version"] == 2 and [r["run_id"] for r in report["runs"]] == ["r1", "r2"]
    assert report["totals"]["tables"] == 2 and report["totals"]["failed"] == 0
    t = next(tb for tb in report["tables"] if tb["table"] == lake["t"])
    assert t["runs"] == ["r1", "r2"] and t["operations"] == {"checkpoint": 2, "optimize": 2}
    points = t["health"]
    assert [(p["run_id"], p["phase"]) for p in points] == [("r1", "before"), ("r1", "after"), ("r2", "before"),
                                                             ("r2", "after")]  # fmt: skip
    for p in points:  # every point is the table at that version, as delta-rs reads it
        assert (p["files"], p["bytes"]) == _files_at(lake["t"], p["version"])
        assert p["small_files"] == p["files"] and p["dv_rows"] == 0
    before, after = points[0], points[1]
    assert before["files"] == 4 and after["files"] == 1  # OPTIMIZE compacted the four small files
    assert before["commits_since_checkpoint"] == before["version"] + 1 and after["commits_since_checkpoint"] == 0
    optimize_r1 = next(r for r in lake["rows"] if r["operation"] == "optimize" and r["table"] == lake["t"])
    # what the history says OPTIMIZE removed is what the log shows tombstoned since
    assert after["tombstone_bytes"] - before["tombstone_bytes"] == optimize_r1["bytes_removed"]
    t_rows = [r for r in lake["rows"] if r["table"] == lake["t"]]
    assert t["bytes_read"] == sum(r["bytes_removed"] for r in t_rows if r["operation"] == "optimize")
    assert t["bytes_written"] == sum(r.get("bytes_added") or 0 for r in t_rows)
    assert t["files_removed"] == sum(r.get("actual_files_removed") or 0 for r in t_rows) == 3 + 4
    assert [r["files_removed"] for r in t["per_run"]] == [3, 4]
    totals = report["totals"]
    assert totals["files_removed"] == sum(r.get("actual_files_removed") or 0 for r in lake["rows"])
    assert totals["files_now"] == 2 and totals["seconds"] > 0
    lake_points = [(p["run_id"], p["phase"], p["tables_counted"], p["files"]) for p in report["lake_health"]]
    u_before = next(tb for tb in report["tables"] if tb["table"] == lake["u"])["health"][0]["files"]
    r2_before = points[2]["files"] + u_before
    assert lake_points == [("r1", "before", 1, 4), ("r1", "after", 1, 1), ("r2", "before", 2, r2_before),
                           ("r2", "after", 2, 2)]  # fmt: skip
    assert json.loads(render_lake_json(report)) == json.loads(json.dumps(report))
    # past points are kept in memory once a later commit follows theirs; the table's latest is always read
    cached = {at for (table, at) in _PAST if table == lake["t"]}
    assert cached == {p["at_ms"] for p in points[:3]} and points[3]["at_ms"] not in cached
    again = next(tb for tb in lake_report(lake["history"])["tables"] if tb["table"] == lake["t"])["health"]
    assert again[:3] == points[:3] and again[3]["version"] == points[3]["version"]


def test_the_pages_render_charts_with_a_point_per_state(lake: dict) -> None:
    page = render_lake_html(lake_report(lake["history"]), table_link="health/table?uri=")
    assert page.count("<svg") == 3 and "Lake health across runs" in page and "Files per table" in page
    assert 'href="health/table?uri=file%3A%2F%2F' in page
    one = lake_report(lake["history"], table=lake["t"])
    html = render_lake_html(one)
    assert [t["table"] for t in one["tables"]] == [lake["t"]] and html.count("<svg") == 2
    health_svg = html[html.index('id="chart-health-runs"') : html.index('id="chart-maintenance"')]
    assert health_svg.count("<use ") >= 4 * 4  # four points on each of the four panels' first line at least
    markdown = render_lake_markdown(one)
    assert "| r1 |" in markdown and "| r2 |" in markdown and lake["t"] in markdown


def test_a_table_with_one_run_still_renders(lake: dict) -> None:
    one = lake_report(lake["history"], table=lake["u"])
    (u,) = one["tables"]
    assert u["runs"] == ["r2"] and [p["phase"] for p in u["health"]] == ["before", "after"]
    assert u["latest"]["files"] == 1 and u["latest"]["commits_since_checkpoint"] == 0
    html = render_lake_html(one)
    assert html.count("<svg") == 2 and "Every step of these runs succeeded" in html


def test_no_history_is_an_empty_report_and_bad_arguments_are_named(tmp_path: Path) -> None:
    report = lake_report("file://" + str(tmp_path / "none"))
    assert report["runs"] == [] and report["tables"] == [] and report["history_version"] is None
    assert "No maintenance run is recorded" in render_lake_html(report)
    assert "No maintenance run is recorded" in render_lake_markdown(report)
    with pytest.raises(InvalidArgumentError) as err:
        lake_report("file://" + str(tmp_path / "none"), max_runs=0)
    assert err.value.argument == "max_runs"


def test_a_table_that_cannot_be_read_is_a_point_with_its_error(tmp_path: Path) -> None:
    history = "file://" + str(tmp_path / "history")
    gone = "file://" + str(tmp_path / "gone")
    record_runs(history, [{"run_id": "r1", "table": gone, "operation": "optimize", "status": "failed",
                           "started": "2026-01-01T00:00:00+00:00", "ended": "2026-01-01T00:00:05+00:00",
                           "error_class": "TableNotFoundError", "error_message": "no table"}])  # fmt: skip
    report = lake_report(history)
    (tb,) = report["tables"]
    assert tb["latest"] is None and tb["failures"][0]["error_class"] == "TableNotFoundError"
    assert {p["files"] for p in tb["health"]} == {None} and all(
        "TableNotFoundError" in p["error"] for p in tb["health"]
    )
    html = render_lake_html(lake_report(history, table=gone))
    assert "TableNotFoundError" in html and "1 step failed" in html


def test_many_runs_name_at_most_a_dozen_ticks() -> None:
    from airflow_delta_provider.commands.charts import MAX_RUN_LABELS, _run_labels

    few = ["11-01 06:00\nbefore", "after", "now"]
    assert _run_labels(few) == few
    many = [label for i in range(30) for label in (f"11-{i:02d} 06:00\nbefore", "after")] + ["now"]
    shown = [label for label in _run_labels(many) if label]
    assert 1 < len(shown) <= MAX_RUN_LABELS and shown[0] == "11-00 06:00" and "after" not in shown
