"""`deltalog lake report HISTORY_URI`: the lake report's command-line face, over a history written by two real
`deltalog lake run --apply --history` runs (delta-rs tables, our scan, plan, drivers and recorder; no mocks).

Each run records every scanned table's health at plan time beside what its steps did, so the report charts
a table's health across runs from the history alone and says what changed since the previous run; delta-rs
reads those rows too."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow as pa
import pytest

pytest.importorskip("deltalake")

from deltalake import DeltaTable, write_deltalake

from airflow_delta_provider.cli import EXIT_NOT_FOUND, EXIT_USAGE, main
from airflow_delta_provider.delta import DeltaLog


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    DeltaLog.clear_cache()
    code = main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def _append(path: Path, n: int) -> None:
    for i in range(n):
        write_deltalake(str(path), pa.table({"p": ["a"] * 2, "x": [i, i]}), partition_by=["p"], mode="append")


def _files(table: str, version: int) -> int:
    return len(DeltaTable(table, version=version).file_uris())


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Two `lake run`s: t gets compacted in each (4, then 3 more small files), u is only measured."""
    root = tmp_path_factory.mktemp("lake_report")
    lake, hist = root / "lake", str(root / "history")
    _append(lake / "t", 4)
    _append(lake / "u", 1)
    policy = root / "policy.json"
    policy.write_text(json.dumps({"defaults": {"min_small_files": 3}}))
    argv = ("lake", "run", str(lake), "--policy", str(policy), "--apply", "--history", hist, "--json")
    first = run(*argv)
    assert first[0] == 0, first[2]
    _append(lake / "t", 3)
    second = run(*argv)
    assert second[0] == 0, second[2]
    tables = {t.rstrip("/").rsplit("/", 1)[-1]: t for t in json.loads(first[1])["discovery"]["tables"]}
    return {"history": hist, "t": tables["t"], "u": tables["u"], "root": root}


def test_the_report_charts_each_tables_recorded_health_across_runs(history: dict) -> None:
    code, out, err = run("lake", "report", history["history"], "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["history_version"] == 2 and report["totals"]["runs"] == 2 and report["out"] is None
    t = next(tb for tb in report["tables"] if tb["table"] == history["t"])
    points = t["recorded_health"]
    assert [p["phase"] for p in points] == ["plan", "plan"] and len(t["runs"]) == 2
    for p in points:  # each recorded point is the table at the version the run scanned, as delta-rs reads it
        assert p["files"] == _files(history["t"], p["version"]) == p["small_files"]
    assert [p["files"] for p in points] == [4, 4]  # 4 small files, compacted to 1, then 3 more appended
    change = t["since_previous"]
    # between the scans: OPTIMIZE's commit and the three appends
    assert change["files"] == 0 and change["versions"] == points[1]["version"] - points[0]["version"] == 4
    assert t["operations"]["optimize"] == 2 and t["failures"] == []
    u = next(tb for tb in report["tables"] if tb["table"] == history["u"])
    assert [p["files"] for p in u["recorded_health"]] == [1, 1] and u["since_previous"]["versions"] == 0
    lake = report["lake_recorded"]
    assert [(p["tables_counted"], p["files"]) for p in lake] == [(2, 5), (2, 5)]
    # delta-rs reads the history, health rows and step rows alike
    rows = DeltaTable(history["history"]).to_pyarrow_table().to_pylist()
    health = sorted((r["table"], r["version"], r["files"]) for r in rows if r["operation"] == "health")
    assert [(h[0], h[2]) for h in health] == [(history["t"], 4), (history["t"], 4), (history["u"], 1),
                                              (history["u"], 1)]  # fmt: skip
    assert all(r["files"] is None for r in rows if r["operation"] != "health")
    assert {r["engine"] for r in rows if r["operation"] != "health"} == {"local"}


def test_text_and_written_pages(history: dict) -> None:
    code, out, err = run("lake", "report", history["history"])
    assert code == 0, err
    assert "2 runs, 2 tables" in out and history["t"] in out and "files since last" in out
    page = history["root"] / "t.html"  # its log not read: the chart and tables say plan time, not before/after
    argv = ("lake", "report", history["history"], "--table", history["t"], "--no-health", "--out", str(page))
    code, out, _ = run(*argv)
    assert code == 0 and f"report written to {page}" in out
    html = page.read_text()
    assert html.count("<svg") == 2 and history["t"] in html and "Health at plan time" in html
    assert "The table at each run&#39;s plan time, as the run recorded it, oldest first" in html
    assert "before and after each run" not in html
    lake_page = history["root"] / "lake.html"
    assert run("lake", "report", history["history"], "--out", str(lake_page), "--no-health")[0] == 0
    lake_html = lake_page.read_text()  # t was compacted, u only measured: 1 of the 2 tables maintained
    assert "Health at plan time" in lake_html and "files since last run" in lake_html
    assert '<div class="value">1</div><div class="label">tables maintained</div>' in lake_html
    assert "A table whose log was not read counts at its last plan-time record." in lake_html
    md = history["root"] / "lake.md"
    assert run("lake", "report", history["history"], "--out", str(md), "--max-runs", "1")[0] == 0
    text = md.read_text()
    assert "## Health at plan time (recorded by each run)" in text and "Runs: 1 (the last 1 at most)" in text
    md2 = history["root"] / "all.md"
    assert run("lake", "report", history["history"], "--out", str(md2), "--no-health")[0] == 0
    assert "## Changed since the previous run" in md2.read_text()


def test_no_health_reads_no_table_log_and_charts_the_recorded_points(history: dict) -> None:
    code, out, _ = run("lake", "report", history["history"], "--no-health", "--json")
    report = json.loads(out)
    t = next(tb for tb in report["tables"] if tb["table"] == history["t"])
    assert code == 0 and t["health"] == t["recorded_health"] and t["latest"] == t["recorded_health"][-1]
    assert report["lake_health"][-1]["files"] == 5 and report["lake_health"][-1]["tables_counted"] == 2


def test_bad_arguments_and_a_missing_history_are_named(tmp_path: Path) -> None:
    code, _, err = run("lake", "report", str(tmp_path / "h"), "--max-runs", "0", "--json")
    assert code == EXIT_USAGE and json.loads(err)["argument"] == "--max-runs"
    code, _, err = run("lake", "report", str(tmp_path / "nowhere"))
    assert code == EXIT_NOT_FOUND and "No maintenance history table" in err
    code, _, err = run("lake", "report")
    assert code == EXIT_USAGE and "HISTORY_URI" in err
    assert not (tmp_path / "h").exists() and not (tmp_path / "nowhere").exists()
