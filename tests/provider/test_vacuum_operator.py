"""`DeltaVacuumOperator` and `deltalog vacuum` in process: a dry run plans and deletes nothing; the plan,
kept at `result_uri`, is applied by a second task after review. (The plan itself: tests/delta/test_vacuum.py.)"""

from __future__ import annotations

import io
import json
import os
import time
from pathlib import Path

import pyarrow as pa
import pytest

pytest.importorskip("airflow")

from deltalake import DeltaTable, write_deltalake
from provider_support import task_context

from airflow_delta_provider.cli import main as cli_main
from airflow_delta_provider.operators.delta import DeltaVacuumOperator

pytestmark = pytest.mark.airflow

OLD = time.time() - 30 * 24 * 3600


def _table_with_garbage(tmp_path: Path) -> Path:
    """A delta-rs table whose first file was overwritten (a tombstone), plus an old untracked file;
    every data file is a month old, the tombstone too (deletion timestamps are rewritten below)."""
    root = tmp_path / "t"
    write_deltalake(str(root), pa.table({"id": [1, 2]}))
    write_deltalake(str(root), pa.table({"id": [3]}), mode="overwrite")
    (root / "stray.parquet").write_bytes(b"not referenced")
    for p in root.glob("*.parquet"):
        os.utime(p, (OLD, OLD))
    return root


def _rows(root: Path) -> list[int]:
    return sorted(DeltaTable(str(root)).to_pyarrow_table().column("id").to_pylist())


def test_plan_then_apply_that_plan(tmp_path: Path) -> None:
    root = _table_with_garbage(tmp_path)
    before = sorted(p.name for p in root.glob("*.parquet"))
    out = tmp_path / "out"
    plan = DeltaVacuumOperator(
        task_id="vacuum_plan", table_uri=str(root), submit=False, retention_hours=0, enforce_retention_duration=False,
        result_uri=str(out / "plan.json"),
    ).execute(task_context(tmp_path))  # fmt: skip
    assert plan["dry_run"] and plan["num_files"] == 2 and plan["deleted"] == 0
    assert sorted(p.name for p in root.glob("*.parquet")) == before  # a dry run deletes nothing
    kept = json.loads((out / "plan.json").read_text())
    assert {f["path"] for f in kept["files"]} >= {"stray.parquet"}
    done = DeltaVacuumOperator(
        task_id="vacuum_apply", table_uri=str(root), submit=False, retention_hours=0, enforce_retention_duration=False,
        dry_run=False, plan=str(out / "plan.json"),
    ).execute(task_context(tmp_path))  # fmt: skip
    assert not done["dry_run"] and done["deleted"] == 2 and done["num_dropped"] == 0
    assert not (root / "stray.parquet").exists() and _rows(root) == [3]


def test_a_short_retention_is_refused_unless_asked_for(tmp_path: Path) -> None:
    root = _table_with_garbage(tmp_path)
    from airflow_delta_provider.operators.delta import DeltaJobError

    with pytest.raises(DeltaJobError, match="retention"):
        DeltaVacuumOperator(task_id="v", table_uri=str(root), submit=False, retention_hours=0).execute(
            task_context(tmp_path)
        )


def test_deltalog_vacuum_json_is_the_issue_shape(tmp_path: Path) -> None:
    root = _table_with_garbage(tmp_path)
    out, err = io.StringIO(), io.StringIO()
    args = ["vacuum", str(root), "--retention-hours", "0", "--no-enforce-retention", "--json"]
    assert cli_main(args, out=out, err=err) == 0, err.getvalue()
    body = json.loads(out.getvalue())
    assert body["dry_run"] is True and body["num_files"] == len(body["files"]) == 2
    assert body["bytes"] == sum(f["size"] for f in body["files"]) and (root / "stray.parquet").exists()
    assert all(set(f) >= {"path", "size"} and not f["path"].startswith("/") for f in body["files"])
    out = io.StringIO()
    assert cli_main([*args[:-1], "--apply"], out=out, err=err) == 0, err.getvalue()
    assert "deleted 2 files" in out.getvalue() and _rows(root) == [3]
