"""`DeltaRestoreOperator` and `DeltaRepairOperator` in process on delta-rs tables: a dry run commits
nothing, a reviewed plan is applied by a second task, delta-rs reads the result. (The operations themselves:
tests/delta/test_restore.py and test_repair.py.)"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

pytest.importorskip("airflow")

from deltalake import DeltaTable, write_deltalake
from provider_support import task_context

from airflow_delta_provider.delta.errors import InvalidArgumentError
from airflow_delta_provider.operators.delta import DeltaRepairOperator, DeltaRestoreOperator

pytestmark = pytest.mark.airflow


def _rows(root: Path, version: int | None = None) -> list[int]:
    return sorted(DeltaTable(str(root), version=version).to_pyarrow_table().column("id").to_pylist())


def _three_versions(tmp_path: Path) -> Path:
    root = tmp_path / "t"
    write_deltalake(str(root), pa.table({"id": [1, 2]}))
    write_deltalake(str(root), pa.table({"id": [3]}), mode="append")
    write_deltalake(str(root), pa.table({"id": [9]}), mode="overwrite")
    return root


def test_restore_plans_then_applies_the_reviewed_plan(tmp_path: Path) -> None:
    root = _three_versions(tmp_path)
    base = dict(table_uri=str(root), submit=False, version=1)
    plan_uri = str(tmp_path / "plan.json")
    plan = DeltaRestoreOperator(task_id="restore_plan", result_uri=plan_uri, **base).execute(task_context(tmp_path))
    assert plan["dry_run"] and plan["version"] is None and plan["target_version"] == 1
    assert plan["num_restored"] == 2 and plan["num_removed"] == 1 and DeltaTable(str(root)).version() == 2
    assert plan["result_uri"] == plan_uri
    done = DeltaRestoreOperator(task_id="restore", dry_run=False, plan=plan_uri, **base).execute(task_context(tmp_path))
    assert not done["dry_run"] and done["version"] == 3 and done["metrics"]["numRestoredFiles"] == 2
    assert _rows(root) == _rows(root, 1) == [1, 2, 3] and _rows(root, 2) == [9]
    assert DeltaTable(str(root)).history(1)[0]["operation"] == "RESTORE"


def test_repair_reports_then_removes_missing_files(tmp_path: Path) -> None:
    root = tmp_path / "t"
    write_deltalake(str(root), pa.table({"id": [1]}))
    write_deltalake(str(root), pa.table({"id": [2]}), mode="append")
    gone = sorted(root.glob("*.parquet"))[0]
    gone.unlink()
    dry = DeltaRepairOperator(task_id="r", table_uri=str(root), submit=False).execute(task_context(tmp_path))
    assert dry["dry_run"] and dry["num_missing"] == 1 and dry["version"] is None
    assert DeltaTable(str(root)).version() == 1
    done = DeltaRepairOperator(task_id="r2", table_uri=str(root), submit=False, dry_run="false").execute(
        task_context(tmp_path)
    )
    assert done["version"] == 2 and done["num_missing"] == 1
    assert len(_rows(root)) == 1 and DeltaTable(str(root)).history(1)[0]["operation"] == "FSCK"


@pytest.mark.parametrize("value", [None, "", 0, "bogus"])
def test_their_flags_are_read_by_the_one_parser(value: object) -> None:
    flags = [
        (DeltaRestoreOperator, "dry_run"),
        (DeltaRestoreOperator, "allow_partial"),
        (DeltaRepairOperator, "dry_run"),
    ]
    for cls, flag in flags:
        with pytest.raises(InvalidArgumentError) as info:
            cls(task_id="t", table_uri="/nowhere/t", **{flag: value})
        assert info.value.argument == flag
