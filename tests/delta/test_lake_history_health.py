"""The history's health rows (`delta.lake.history.health_row`) and its schema evolution: a history created before
the health columns existed gains them (one ADD COLUMNS commit, nullable), its old rows read them as null in
delta-rs and in our own reader, and the table's health recorded at plan time is what delta-rs sees.

The older history is made by this module with its columns of that time (`COLUMNS` without `engine` and the
health columns, set through monkeypatch for the one call that creates it): the same recorder as shipped then."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_delta_provider.commands.lake_report import read_history
from airflow_delta_provider.delta import DeltaLog
from airflow_delta_provider.delta.errors import SchemaMismatchError
from airflow_delta_provider.delta.lake import history, scan
from airflow_delta_provider.delta.lake.history import COLUMNS, HEALTH_COLUMNS, health_row, record_runs

NOW = dt.datetime(2026, 11, 29, 4, 0, tzinfo=dt.UTC)
OLD = tuple(c for c in COLUMNS if c not in HEALTH_COLUMNS and c[0] != "engine")


def _old_history(uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as m:
        m.setattr(history, "COLUMNS", OLD)
        m.setattr(history, "_NAMES", {n for n, _ in OLD})
        assert record_runs(uri, [{"run_id": "r1", "table": "t", "operation": "optimize", "started": NOW}]) == 1


def test_an_old_history_gains_the_health_columns_and_still_reads(tmp_path: Path, monkeypatch) -> None:
    uri = str(tmp_path / "history")
    _old_history(uri, monkeypatch)
    assert [f.name for f in DeltaTable(uri).schema().fields] == [n for n, _ in OLD]
    table = tmp_path / "t"
    for i in range(3):
        write_deltalake(str(table), pa.table({"x": [i]}), mode="append")
    (health,) = scan([str(table)]).healths
    row = {**health_row(health), "run_id": "r2"}
    assert json.loads(json.dumps(row)) == row  # plain JSON: an XCom value
    assert record_runs(uri, [row]) == 3  # version 2 added the columns
    DeltaLog.clear_cache()
    hist = DeltaTable(uri)
    assert [f.name for f in hist.schema().fields] == [n for n, _ in COLUMNS]
    assert all(f.nullable for f in hist.schema().fields if f.name != "run_id")
    assert [h["operation"] for h in hist.history()] == ["WRITE", "ADD COLUMNS", "WRITE", "CREATE TABLE"]
    rows = {r["run_id"]: r for r in hist.to_pyarrow_table().to_pylist()}
    assert rows["r1"]["files"] is None and rows["r1"]["engine"] is None and rows["r1"]["operation"] == "optimize"
    got = rows["r2"]
    assert (got["operation"], got["status"], got["version"]) == ("health", "measured", 2)
    assert got["files"] == len(DeltaTable(str(table)).file_uris()) == 3 and got["commits_since_checkpoint"] == 3
    assert got["bytes"] == sum(f.stat().st_size for f in table.glob("*.parquet")) and got["small_file_share"] == 1.0
    assert got["tombstones"] == got["tombstone_bytes"] == 0 and got["partitions"] == 1
    version, ours = read_history("file://" + uri)
    assert version == 3 and sorted(r["run_id"] for r in ours) == ["r1", "r2"]
    assert next(r for r in ours if r["run_id"] == "r1").get("files") is None
    assert record_runs(uri, [{"run_id": "r3", "table": "t", "operation": "vacuum"}]) == 4  # no second evolution


def test_a_history_whose_column_has_another_type_is_refused(tmp_path: Path) -> None:
    uri = str(tmp_path / "history")
    write_deltalake(uri, pa.table({"run_id": ["r0"], "files": ["many"]}))
    with pytest.raises(SchemaMismatchError) as info:
        record_runs(uri, [{"run_id": "r1", "table": "t", "operation": "optimize"}])
    assert info.value.field_path == "files" and "not a maintenance history" in str(info.value)
    assert DeltaTable(uri).version() == 0


def test_a_recorder_that_read_the_old_schema_loses_to_the_evolution_and_finds_it_done(tmp_path, monkeypatch) -> None:
    """Two recorders at once, in order: the first read the old history, the second evolves it and appends; the
    first's ADD COLUMNS then loses (a metadata change won: `MetadataChangedError`) and finds the columns there,
    and an append for the old schema is refused the same way (`record_runs` writes it again for the new one)."""
    from airflow_delta_provider.delta.errors import MetadataChangedError

    uri = str(tmp_path / "history")
    _old_history(uri, monkeypatch)
    first = DeltaLog(uri)
    stale = first.update()
    assert record_runs(uri, [{"run_id": "r2", "table": "t", "operation": "health", "files": 1}]) == 3
    clock = stale.now_ms
    evolved = history._evolved(first, stale, clock)
    names = [f["name"] for f in evolved.metadata.schema_json["fields"]]
    assert evolved.version == 3 and names == [n for n, _ in COLUMNS]  # read, not written again
    row = history._normalized({"run_id": "r3", "table": "t", "operation": "health", "files": 2}, 0)
    with pytest.raises(MetadataChangedError):
        history._append(first, stale, [row], clock)
    assert record_runs(uri, [{"run_id": "r3", "table": "t", "operation": "health", "files": 2}]) == 4
    DeltaLog.clear_cache()
    table = DeltaTable(uri)
    assert [h["operation"] for h in table.history()].count("ADD COLUMNS") == 1
    assert sorted((r["run_id"], r["files"]) for r in table.to_pyarrow_table().to_pylist()) == [
        ("r1", None),
        ("r2", 1),
        ("r3", 2),
    ]
