"""`deltalog optimize --zorder-by` and `DeltaOptimizeOperator(zorder_by=...)`: a dry run writes nothing, an apply
commits an OPTIMIZE with `zOrderBy` that delta-rs reads back with the same rows; bad columns are typed errors
naming them, nothing changed. (Z-ORDER itself: tests/delta/test_zorder.py.)"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow as pa
import pytest

pytest.importorskip("deltalake")
from deltalake import DeltaTable, write_deltalake

from airflow_delta_provider.cli import main
from airflow_delta_provider.delta import DeltaLog


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    DeltaLog.clear_cache()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def _table(root: Path) -> Path:
    for i in range(6):
        xs = list(range(i, 600, 6))
        write_deltalake(
            str(root),
            pa.table({"x": xs, "y": [v * 7 % 101 for v in xs], "p": ["a"] * len(xs)}),
            partition_by=["p"],
            mode="append",
        )
    return root


def _rows(root: Path) -> list[tuple]:
    t = DeltaTable(str(root)).to_pyarrow_table()
    return sorted(zip(*(t.column(c).to_pylist() for c in ("x", "y", "p")), strict=True))


def _commit(root: Path, version: int) -> dict:
    lines = (root / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
    return next(json.loads(line)["commitInfo"] for line in lines if "commitInfo" in line)


def test_cli_zorder_plans_then_applies(tmp_path: Path) -> None:
    root = _table(tmp_path / "t")
    rows, version = _rows(root), DeltaTable(str(root)).version()
    code, out, err = run("optimize", str(root), "--zorder-by", "x,y", "--json")
    assert code == 0, err
    assert json.loads(out)["zorder_by"] == ["x", "y"] and DeltaTable(str(root)).version() == version
    code, out, err = run("optimize", str(root), "--zorder-by", "x,y", "--apply", "--json")
    assert code == 0, err
    assert DeltaTable(str(root)).version() == version + 1 and _rows(root) == rows
    info = _commit(root, version + 1)
    assert info["operation"] == "OPTIMIZE" and json.loads(info["operationParameters"]["zOrderBy"]) == ["x", "y"]


@pytest.mark.parametrize(("columns", "named"), [("p", "p"), ("nope", "nope"), ("", "zorder")])
def test_cli_refuses_bad_columns_naming_them(tmp_path: Path, columns: str, named: str) -> None:
    root = _table(tmp_path / "t")
    before = sorted(p.name for p in (root / "_delta_log").iterdir())
    code, _, err = run("optimize", str(root), "--zorder-by", columns, "--apply")
    assert code != 0 and named in err
    assert sorted(p.name for p in (root / "_delta_log").iterdir()) == before


def test_operator_zorders_with_a_list_of_columns(tmp_path: Path) -> None:
    pytest.importorskip("airflow")
    from airflow_delta_provider.operators.delta import DeltaOptimizeOperator

    root = _table(tmp_path / "t")
    rows, version = _rows(root), DeltaTable(str(root)).version()
    op = DeltaOptimizeOperator(task_id="z", table_uri=str(root), zorder_by=["y", "x"], submit=False)
    out = op.execute({"ti": None, "run_id": "r"})
    assert out["zorder_by"] == ["y", "x"] and out["version"] == version + 1
    assert _rows(root) == rows
    assert json.loads(_commit(root, version + 1)["operationParameters"]["zOrderBy"]) == ["y", "x"]
