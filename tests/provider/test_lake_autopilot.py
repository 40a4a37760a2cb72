"""The lake autopilot DAG (`airflow_delta_provider.autopilot.lake_autopilot_dag`) end to end in `dag.test()` on a
lake of delta-rs tables: every planned operation happens (delta-rs reads the same rows after, the rewrite's row
proof passes), a table whose OPTIMIZE fails fails only its own tasks and is recorded with its error, the history
table holds one row per (table, operation) and delta-rs reads it, and a second run plans no new compaction for the
compacted table."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

pytest.importorskip("airflow")
pytest.importorskip("deltalake")

from deltalake import DeltaTable, write_deltalake

from airflow_delta_provider.delta import DeltaLog
from tests.conftest import metadata_db, task_states, xcom_return

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

DAY = 86_400_000
POLICY = {
    "defaults": {"min_small_files": 3},
    "never_unattended": ["vacuum"],
    "tables": [
        {"match": "*/deep/er/longlog", "min_small_files": 100},
        {"match": "*/old", "disabled": ["optimize"]},
    ],
}

DAG_TEXT = """
import time

from airflow_delta_provider.autopilot import lake_autopilot_dag

lake_autopilot_dag(
    "lake_autopilot_test",
    [{lake!r}],
    history_uri={history!r},
    policy={policy!r},
    verify="content",
    clock=lambda: int(time.time() * 1000) + 8 * {day},  # tombstones and old log files past retention
)
"""


def _append(path: Path, p: str | None = None, n: int = 3, **kwargs) -> None:
    data = pa.table({"p": [p or "x"] * n, "x": list(range(n))})
    write_deltalake(str(path), data, partition_by=["p"] if p else None, mode="append", **kwargs)


def _lake(root: Path) -> Path:
    for _ in range(6):
        _append(root / "sales" / "small", "a")
    _append(root / "sales" / "small", "b")
    _append(root / "gone" / "tombstones")
    DeltaTable(str(root / "gone" / "tombstones")).delete("x < 1")
    for _ in range(12):
        _append(root / "deep" / "er" / "longlog")
    day = "interval 1 day"
    _append(root / "old", configuration={"delta.logRetentionDuration": day, "delta.deletedFileRetentionDuration": day})
    for _ in range(3):
        _append(root / "old")
    DeltaTable(str(root / "old")).create_checkpoint()
    for _ in range(4):  # planned from its log, then its OPTIMIZE fails: a data file is gone
        _append(root / "broken", "a")
    next((root / "broken" / "p=a").glob("*.parquet")).unlink()
    return root


def _rows(path: Path) -> list[tuple]:
    DeltaLog.clear_cache()
    return sorted(tuple(r.values()) for r in DeltaTable(str(path)).to_pyarrow_table().to_pylist())


def _mapped(dag_id: str, run_id: str) -> list[tuple[str, int, str, str]]:
    with metadata_db() as db:
        return db.execute(
            "SELECT task_id, map_index, rendered_map_index, state FROM task_instance "
            "WHERE dag_id = ? AND run_id = ? AND map_index >= 0",
            (dag_id, run_id),
        ).fetchall()


def test_the_autopilot_runs_the_plan_proves_it_and_records_it(airflow_db: str, tmp_path: Path) -> None:
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
    from airflow.utils.session import create_session

    lake = _lake(tmp_path / "lake")
    history = tmp_path / "history"
    names = ("sales/small", "gone/tombstones", "deep/er/longlog", "old")
    before = {n: _rows(lake / n) for n in names}
    tombstoned = {f.name for f in (lake / "gone" / "tombstones").glob("*.parquet")}
    old_log = sorted(p.name for p in (lake / "old" / "_delta_log").glob("*.json"))

    path = tmp_path / "autopilot_dag.py"
    path.write_text(DAG_TEXT.format(lake=str(lake), history=str(history), policy=POLICY, day=DAY))
    bag = DagBag(dag_folder=str(path))
    assert bag.import_errors == {}
    with create_session() as session:
        DagBundlesManager().sync_bundles_to_db(session=session)
    sync_bag_to_db(bag, "dags-folder", None)
    dag = bag.dags["lake_autopilot_test"]
    run = dag.test(run_conf={"approve": True})  # the policy's vacuum approval given by conf

    plan = xcom_return(run.run_id, "plan_work")
    uri = {n: "file://" + str(lake / n) for n in names}
    planned = {(t["table"], t["operation"]) for g in plan["groups"] for t in g["tasks"]}
    broken = "file://" + str(lake / "broken")
    assert planned - {(broken, "optimize")} == {
        (uri["sales/small"], "optimize"),
        (uri["gone/tombstones"], "vacuum"),
        (uri["deep/er/longlog"], "checkpoint"),
        (uri["old"], "log_cleanup"),
    }
    assert [t["operation"] for t in plan["needs_approval"]] == ["vacuum"]
    assert (broken, "optimize") in planned
    states = task_states(run.run_id)
    assert states["approve"] == "skipped" and states["record"] == "success", states
    mapped = _mapped("lake_autopilot_test", run.run_id)
    index = {g["table_uri"]: i for i, g in enumerate(plan["groups"])}
    assert len(mapped) == 5 * len(index)
    # the broken table's tasks fail, and only its tasks (those that ran are named after their table)
    assert {(m[0], m[3]) for m in mapped if m[1] == index[broken]} == {
        ("table.optimize_table", "failed"),
        *(
            (f"table.{t}", "upstream_failed")
            for t in ("vacuum_table", "checkpoint_table", "log_cleanup_table", "prove")
        ),
    }
    assert {m[3] for m in mapped if m[1] != index[broken]} == {"success"}, mapped
    assert {(m[1], m[2]) for m in mapped if m[3] != "upstream_failed"} == {(i, t) for t, i in index.items()}

    # every planned operation happened, and delta-rs reads the same rows
    assert {n: _rows(lake / n) for n in names} == before
    small = DeltaTable(str(lake / "sales" / "small"))
    assert small.history(1)[0]["operation"] == "OPTIMIZE"
    assert len([u for u in small.file_uris() if "p=a" in u]) == 1
    gone_left = {f.name for f in (lake / "gone" / "tombstones").glob("*.parquet")}
    assert gone_left < tombstoned  # vacuumed
    assert (lake / "deep" / "er" / "longlog" / "_delta_log" / "_last_checkpoint").exists()
    assert sorted(p.name for p in (lake / "old" / "_delta_log").glob("*.json")) != old_log  # log cleaned
    DeltaTable(str(lake / "old")).to_pyarrow_table()  # the table still reads at its latest version

    # the history: one row per (table, operation), one commit, read by delta-rs
    recorded = xcom_return(run.run_id, "record")
    DeltaLog.clear_cache()
    hist = DeltaTable(str(history))
    assert hist.version() == recorded["history_version"] == 1  # version 0 created it
    rows = hist.to_pyarrow_table().to_pylist()
    assert {(r["table"], r["operation"], r["status"]) for r in rows} == {
        (t, o, "failed" if t == broken else "done") for t, o in planned
    }
    assert len(rows) == len(planned) and {r["run_id"] for r in rows} == {run.run_id}
    failed = next(r for r in rows if r["table"] == broken)
    assert failed["error_class"] == "LogCorruptedError" and "parquet" in failed["error_message"].lower()
    opt = next(r for r in rows if (r["table"], r["operation"]) == (uri["sales/small"], "optimize"))
    assert opt["proof"] == "proven" and opt["rows_before"] == opt["rows_after"] == 18
    assert opt["files_removed"] == 6 and opt["files_added"] == 1 and opt["est_value"] > 0
    by_op = {r["operation"]: r for r in rows if r["table"] != broken}
    assert by_op["vacuum"]["files_removed"] == len(tombstoned - gone_left) > 0
    longlog = json.loads((lake / "deep" / "er" / "longlog" / "_delta_log" / "_last_checkpoint").read_text())
    assert by_op["checkpoint"]["version"] == longlog["version"]
    assert by_op["log_cleanup"]["files_removed"] > 0 and all(r["actual_seconds"] >= 0 for r in rows)
    assert hist.history(1)[0]["operation"] == "WRITE"

    # a second run: the compacted partition is not compacted again
    second = dag.test(run_conf={"approve": True})
    replanned = xcom_return(second.run_id, "plan_work")
    assert (uri["sales/small"], "optimize") not in {
        (t["table"], t["operation"]) for g in replanned["groups"] for t in g["tasks"]
    }
    assert task_states(second.run_id)["record"] == "success"
    assert {n: _rows(lake / n) for n in names} == before
    json.dumps(replanned)


def test_the_example_dag_parses_without_io(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """dags/delta_lake_autopilot.py builds its DAG from the environment, touching no store at parse time."""
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("DELTA_LAKE_PREFIXES", f"{tmp_path / 'nowhere'},s3://no-such-bucket/lake")
    monkeypatch.setenv("DELTA_LAKE_BUDGET_BYTES", "1000")
    bag = DagBag(dag_folder=str(Path(__file__).resolve().parents[2] / "dags" / "delta_lake_autopilot.py"))
    assert bag.import_errors == {}
    dag = bag.dags["delta_lake_autopilot"]
    table_tasks = [t for t in dag.task_dict if t.startswith("table.")]
    assert sorted(table_tasks) == sorted(
        f"table.{t}" for t in ("optimize_table", "vacuum_table", "checkpoint_table", "log_cleanup_table", "prove")
    )
    assert dag.task_dict["record"].trigger_rule == "all_done"
    assert not (tmp_path / "nowhere").exists()
