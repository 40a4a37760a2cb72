"""The maintenance history table (`delta.lake.history.record_runs`): created on first use, one blind-append WRITE per
call, partitioned by date, read by delta-rs; two processes recording at once both land."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable

from airflow_delta_provider.delta.errors import InvalidArgumentError
from airflow_delta_provider.delta.lake.history import COLUMNS, record_runs

REPO = Path(__file__).resolve().parents[2]
NOW = dt.datetime(2026, 11, 29, 4, 0, tzinfo=dt.UTC)


def test_rows_land_partitioned_by_date_and_delta_rs_reads_them(tmp_path: Path) -> None:
    uri = str(tmp_path / "history")
    first = [{"run_id": "r1", "table": "s3://l/t", "operation": "optimize", "started": NOW, "ended": NOW, "version": 4}]
    assert record_runs(uri, first) == 1  # version 0 created the table
    second = [
        {"run_id": "r2", "table": "s3://l/t", "operation": "vacuum", "started": NOW - dt.timedelta(days=1)},
        {"run_id": "r2", "table": "s3://l/u", "operation": "checkpoint", "started": NOW.isoformat(), "est_value": 2.5},
    ]
    assert record_runs(uri, second) == 2 and record_runs(uri, []) is None
    table = DeltaTable(uri)
    assert table.metadata().partition_columns == ["date"]
    assert [f.name for f in table.schema().fields] == [name for name, _ in COLUMNS]
    rows = sorted(table.to_pyarrow_table().to_pylist(), key=lambda r: (r["run_id"], r["operation"]))
    assert [(r["run_id"], r["operation"], r["date"].isoformat()) for r in rows] == [
        ("r1", "optimize", "2026-11-29"),
        ("r2", "checkpoint", "2026-11-29"),
        ("r2", "vacuum", "2026-11-28"),
    ]
    assert rows[0]["version"] == 4 and rows[0]["started"] == NOW and rows[1]["est_value"] == 2.5
    ops = [(h["operation"], h.get("isBlindAppend")) for h in table.history()]
    assert ops == [("WRITE", True), ("WRITE", True), ("CREATE TABLE", True)]
    assert len(list((tmp_path / "history").glob("date=*/*.parquet"))) == 3  # a file per date per commit


def test_bad_rows_change_nothing(tmp_path: Path) -> None:
    uri = tmp_path / "history"
    with pytest.raises(InvalidArgumentError) as info:
        record_runs(str(uri), [{"run_id": "r", "colour": "red"}])
    assert info.value.argument == "rows[0]"
    with pytest.raises(InvalidArgumentError) as info:
        record_runs(str(uri), [{"table": "t"}])
    assert info.value.argument == "rows[0].run_id"
    assert not uri.exists()


RECORDER = """
import sys
from airflow_delta_provider.delta.lake.history import record_runs
uri, name = sys.argv[1], sys.argv[2]
for i in range(8):
    record_runs(uri, [{"run_id": f"{name}-{i}", "table": "t", "operation": "optimize"}])
"""


@pytest.mark.slow
def test_two_recorders_racing_both_land(tmp_path: Path) -> None:
    uri = str(tmp_path / "history")  # neither finds the table: both race to create it too
    procs = [
        subprocess.Popen([sys.executable, "-c", RECORDER, uri, name], cwd=REPO, stderr=subprocess.PIPE, text=True)
        for name in ("a", "b")
    ]
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stderr.read() if p.stderr else ""
    table = DeltaTable(uri)
    got = sorted(r["run_id"] for r in table.to_pyarrow_table().to_pylist())
    assert got == sorted(f"{n}-{i}" for n in "ab" for i in range(8))
    assert table.version() == 16 and [h["operation"] for h in table.history()].count("CREATE TABLE") == 1
