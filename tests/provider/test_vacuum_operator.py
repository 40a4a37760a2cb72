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


# -- reversible VACUUM: quarantine, undo, purge --------------------------------------------------------------


def _quarantine_files(root: Path, quarantine_id: str) -> list[str]:
    files = root / "_delta_quarantine" / quarantine_id / "files"
    return sorted(p.relative_to(files).as_posix() for p in files.rglob("*") if p.is_file())


def _version_zero(root: Path) -> list[int]:
    return sorted(DeltaTable(str(root), version=0).to_pyarrow_table().column("id").to_pylist())


def test_quarantine_moves_the_files_and_the_undo_operator_puts_them_back(tmp_path: Path) -> None:
    from airflow_delta_provider.operators.delta import DeltaVacuumUndoOperator

    root = _table_with_garbage(tmp_path)
    before = sorted(p.name for p in root.glob("*.parquet"))
    kw = dict(table_uri=str(root), submit=False, retention_hours=0, enforce_retention_duration=False, quarantine=True)
    plan = DeltaVacuumOperator(task_id="vacuum_plan", **kw).execute(task_context(tmp_path))
    # the dry run states what the moves cost and moves nothing
    assert plan["dry_run"] and plan["quarantine_id"] is None and plan["num_files"] == 2
    assert plan["quarantine"]["method"] == "rename" and plan["quarantine"]["files"] == 2
    assert sorted(p.name for p in root.glob("*.parquet")) == before and not (root / "_delta_quarantine").exists()

    done = DeltaVacuumOperator(task_id="vacuum_apply", dry_run="false", **kw).execute(task_context(tmp_path))
    assert not done["dry_run"] and done["deleted"] == 0 and done["deleted_bytes"] == 0
    moved = done["quarantine"]
    assert moved["id"] == done["quarantine_id"] and moved["state"] == "quarantined"
    assert moved["files"] == moved["moved"] == 2 and moved["moved_bytes"] == moved["bytes"] == plan["bytes"]
    quarantined = _quarantine_files(root, done["quarantine_id"])
    assert "stray.parquet" in quarantined and len(quarantined) == 2
    assert set(before) - {p.name for p in root.glob("*.parquet")} == set(quarantined)  # moved, not deleted
    assert _rows(root) == [3]
    with pytest.raises(Exception):  # noqa: B017 - delta-rs: version 0's file is not at its path
        _version_zero(root)

    # the undo task takes the id from the VACUUM task's XCom (a template)
    undo = DeltaVacuumUndoOperator(
        task_id="vacuum_undo", table_uri=str(root), submit=False,
        quarantine_id="{{ ti.xcom_pull(task_ids='vacuum_apply')['quarantine_id'] }}",
    )  # fmt: skip

    class TI:
        dag_id, task_id = "d", "vacuum_undo"

        @staticmethod
        def xcom_pull(task_ids: str) -> dict:
            assert task_ids == "vacuum_apply"
            return done

    undo.render_template_fields({"ti": TI()})
    assert undo.quarantine_id == done["quarantine_id"]
    back = undo.execute(task_context(tmp_path))
    assert back["quarantine_id"] == done["quarantine_id"] and back["state"] == "restored"
    assert back["moved"] == 2 and back["num_missing"] == 0 and back["version"] == plan["version"]
    assert sorted(p.name for p in root.glob("*.parquet")) == before
    assert _version_zero(root) == [1, 2] and _rows(root) == [3]


def test_undo_refuses_a_bad_or_unknown_quarantine_id(tmp_path: Path) -> None:
    from airflow_delta_provider.delta.errors import InvalidArgumentError
    from airflow_delta_provider.operators.delta import DeltaJobError, DeltaVacuumUndoOperator

    root = _table_with_garbage(tmp_path)
    for bad in ("../x", "", None, 7):
        with pytest.raises(InvalidArgumentError, match="quarantine_id"):
            DeltaVacuumUndoOperator(task_id="u", table_uri=str(root), submit=False, quarantine_id=bad)
    op = DeltaVacuumUndoOperator(task_id="u", table_uri=str(root), submit=False, quarantine_id="{{ params.q }}")
    op.render_template_fields({"params": {"q": None}})  # the VACUUM made no quarantine: renders "None"
    with pytest.raises(InvalidArgumentError, match="quarantine_id"):
        op.execute(task_context(tmp_path))
    unknown = DeltaVacuumUndoOperator(
        task_id="u", table_uri=str(root), submit=False, quarantine_id="20250101T120000Z-1a2b3c4d"
    )
    with pytest.raises(DeltaJobError, match="20250101T120000Z-1a2b3c4d"):
        unknown.execute(task_context(tmp_path))


def test_purge_operator_is_a_dry_run_by_default_and_keeps_young_quarantines(tmp_path: Path) -> None:
    from airflow_delta_provider.operators.delta import DeltaVacuumPurgeOperator

    root = _table_with_garbage(tmp_path)
    kw = dict(table_uri=str(root), submit=False, retention_hours=0, enforce_retention_duration=False)
    done = DeltaVacuumOperator(task_id="v", dry_run=False, quarantine=True, **kw).execute(task_context(tmp_path))
    qid = done["quarantine_id"]
    young = DeltaVacuumPurgeOperator(task_id="p", table_uri=str(root), submit=False, dry_run=False)
    assert young.older_than_hours == 168.0  # a week, by default
    kept = young.execute(task_context(tmp_path))
    assert not kept["dry_run"] and kept["num_purged"] == 0 and _quarantine_files(root, qid)
    assert kept["older_than_ms"] == 168 * 3_600_000

    dry = DeltaVacuumPurgeOperator(task_id="p", table_uri=str(root), submit=False, older_than_hours="0")
    planned = dry.execute(task_context(tmp_path))
    assert planned["dry_run"] and planned["quarantine_ids"] == [qid] and planned["deleted_files"] == 2
    assert len(_quarantine_files(root, qid)) == 2  # nothing deleted

    apply = DeltaVacuumPurgeOperator(
        task_id="p", table_uri=str(root), submit=False, older_than_hours="{{ params.h }}", dry_run="{{ params.dry }}"
    )
    apply.render_template_fields({"params": {"h": 0, "dry": False}})
    purged = apply.execute(task_context(tmp_path))
    assert not purged["dry_run"] and purged["num_purged"] == 1 and purged["deleted_files"] == 2
    assert purged["deleted_bytes"] == done["quarantine"]["bytes"] and not (root / "_delta_quarantine" / qid).exists()
    assert _rows(root) == [3]


def test_quarantine_is_refused_where_an_action_does_not_take_it(tmp_path: Path) -> None:
    from airflow_delta_provider.commands.request import Request
    from airflow_delta_provider.delta.errors import InvalidArgumentError

    for action in ("cleanup_log", "optimize", "vacuum_purge"):
        with pytest.raises(InvalidArgumentError, match="quarantine does not apply"):
            Request.make(table=str(tmp_path), action=action, quarantine=True)
    with pytest.raises(InvalidArgumentError, match="older_than_hours does not apply"):
        Request.make(table=str(tmp_path), action="vacuum", older_than_hours=1)
    with pytest.raises(InvalidArgumentError, match="lease_location"):
        Request.make(table=str(tmp_path), action="vacuum", lease_location="")
