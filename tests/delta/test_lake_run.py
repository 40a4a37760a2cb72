"""`delta.lake.run`: a table's planned tasks run in order with the options they were priced with, each rewrite
proved, one history row per step; VACUUM only when asked; a failed step ends that table's run and is recorded."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_delta_provider.delta import DeltaLog
from airflow_delta_provider.delta.errors import InvalidArgumentError
from airflow_delta_provider.delta.lake import parse_policy, plan, scan
from airflow_delta_provider.delta.lake.run import apply_task, run_table

DAY = 86_400_000


def _table(path: Path) -> Path:
    for i in range(6):
        write_deltalake(str(path), pa.table({"p": ["a"] * 3, "x": [i, i, None]}), partition_by=["p"], mode="append")
    DeltaTable(str(path)).delete("x = 0")
    for _ in range(5):
        write_deltalake(str(path), pa.table({"p": ["b"], "x": [9]}), partition_by=["p"], mode="append")
    return path


def _rows(path: Path) -> list[tuple]:
    DeltaLog.clear_cache()
    return sorted((repr(r["p"]), repr(r["x"])) for r in DeltaTable(str(path)).to_pyarrow_table().to_pylist())


def _tasks(path: Path, now: int) -> list[dict]:
    healths = scan([str(path)], policy=parse_policy({"defaults": {"min_small_files": 3}}), now_ms=now).healths
    return [t.to_dict() for t in plan(healths).tasks]


@pytest.mark.parametrize("apply_vacuum", [False, True])
def test_a_table_runs_its_plan_in_order_and_proves_it(tmp_path: Path, apply_vacuum: bool) -> None:
    path = _table(tmp_path / "t")
    before = _rows(path)
    now = int(time.time() * 1000) + 8 * DAY
    tasks = _tasks(path, now)
    assert {t["operation"] for t in tasks} == {"optimize", "vacuum", "checkpoint"}
    rows = run_table("file://" + str(path), tasks, verify="content", apply_vacuum=apply_vacuum, clock=lambda: now)
    ops = [r["operation"] for r in rows]
    assert ops == ["optimize", *(["vacuum"] if apply_vacuum else []), "checkpoint"]
    assert all(r["status"] == "done" and r["ended"] >= r["started"] for r in rows)
    opt = rows[0]
    assert opt["proof"] == "proven" and opt["rows_before"] == opt["rows_after"] == len(before) and "versions" not in opt
    assert _rows(path) == before
    assert (path / "_delta_log" / "_last_checkpoint").exists()
    assert _tasks(path, now) == [] or all(t["operation"] != "optimize" for t in _tasks(path, now))


def test_a_failed_step_ends_the_tables_run_and_is_recorded(tmp_path: Path) -> None:
    path = _table(tmp_path / "t")
    now = int(time.time() * 1000)
    tasks = _tasks(path, now)
    active = [u for u in DeltaTable(str(path)).file_uris() if "p=a" in u]
    Path(active[0].removeprefix("file://")).unlink()  # OPTIMIZE cannot read its input
    rows = run_table("file://" + str(path), tasks)
    assert [(r["operation"], r["status"], r.get("error_class")) for r in rows] == [
        ("optimize", "failed", "LogCorruptedError")
    ]
    with pytest.raises(InvalidArgumentError) as info:
        apply_task(str(path), {"operation": "defrag"})
    assert info.value.argument == "operation"
