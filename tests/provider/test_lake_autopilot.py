"""The lake autopilot DAG (`airflow_delta_provider.autopilot.lake_autopilot_dag`) end to end in `dag.test()` on a
lake of delta-rs tables (plus a corrupt log and a refused protocol from `support.lake_gen`) while delta-rs writers
race it: every planned operation happens (the rewrite's row proof passes), a table whose OPTIMIZE fails (a data
file gone, or a racing DELETE removing its inputs: a conflict) fails only its own tasks and is recorded with its
error, the history table holds one row per (table, operation) and delta-rs reads it; afterwards every table's rows
are the rows its writers left (racing appends and deletes included) and every version inside retention still
reads in delta-rs; the second run plans exactly the work the races left or created, and after it only the broken
table and one checkpoint (its own commits) are left.

The racing writes are real delta-rs commits; `support.lake_gen.RACE` only picks their moment (inside a driver's
snapshot-to-commit window, through the DAG's clock); one more writer appends freely through the first run."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
import pytest

pytest.importorskip("airflow")
pytest.importorskip("deltalake")

from conftest import metadata_db, task_states, xcom_return
from deltalake import DeltaTable, write_deltalake
from support.lake_gen import KINDS, RACE, Appender

from airflow_delta_provider.delta import DeltaLog, errors
from airflow_delta_provider.delta.lake import parse_policy, plan, scan

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
from support.lake_gen import RACE

from airflow_delta_provider.autopilot import lake_autopilot_dag

lake_autopilot_dag(
    "lake_autopilot_test",
    [{lake!r}],
    history_uri={history!r},
    policy={policy!r},
    verify="content",
    retries=0,  # a conflict fails its table's task at once (with retries, the retry policy would replan it)
    clock=RACE.clock,  # 8 days on (tombstones and old log files past retention), and the racing writes
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
    for _ in range(6):  # planned, then a racing DELETE removes its inputs before its OPTIMIZE commits
        _append(root / "sales" / "raced", "a")
    _append(root / "sales" / "raced", "b")
    _append(root / "healthy")  # nothing planned; appended to all through the first run
    for name in ("corrupt", "clustered"):  # a scan error and a refused OPTIMIZE: no task
        KINDS[name].build(root / "refused" / name)
    return root


def _rows(path: Path, version: int | None = None) -> list[tuple]:
    DeltaLog.clear_cache()
    return sorted(tuple(r.values()) for r in DeltaTable(str(path), version=version).to_pyarrow_table().to_pylist())


def _first_in_retention(path: Path, now_ms: int) -> int:
    """The oldest version a reader may still ask for: the log must rebuild it (a commit 0 or a checkpoint with
    its commit kept), and no file it needs was removed at or before VACUUM's cutoff (those may be deleted)."""
    log = path / "_delta_log"
    commits = sorted(int(p.name[:20]) for p in log.glob("*.json"))
    checkpoints = {int(p.name[:20]) for p in log.glob("*.checkpoint*.parquet")}
    first = min(v for v in commits if v == 0 or v in checkpoints)
    conf = DeltaTable(str(path)).metadata().configuration
    days = 1 if "1 day" in conf.get("delta.deletedFileRetentionDuration", "") else 7
    cutoff = now_ms - days * DAY
    for v in commits:
        for line in (log / f"{v:020d}.json").read_text().splitlines():
            remove = json.loads(line).get("remove")
            if remove and remove.get("deletionTimestamp", 0) <= cutoff:
                first = max(first, v)
    return first


def _plan_of(run_id: str) -> set[tuple[str, str]]:
    groups = xcom_return(run_id, "plan_work")["groups"]
    return {(t["table"], t["operation"]) for g in groups for t in g["tasks"]}


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
    names = ("sales/small", "gone/tombstones", "deep/er/longlog", "old", "sales/raced", "healthy")
    uri = {n: "file://" + str(lake / n) for n in (*names, "broken")}
    expected = {n: _rows(lake / n) for n in names}  # what the writers leave: updated with each racing write
    tombstoned = {f.name for f in (lake / "gone" / "tombstones").glob("*.parquet")}
    live = {Path(u).name for u in DeltaTable(str(lake / "gone" / "tombstones")).file_uris()}
    old_log = sorted(p.name for p in (lake / "old" / "_delta_log").glob("*.json"))
    appender = Appender(lake / "healthy")

    def write(name: str, delete: str | None = None, dropped=lambda r: False, start: bool = False):
        def racing_write() -> None:
            if delete:
                DeltaTable(str(lake / name)).delete(delete)
                expected[name] = [r for r in expected[name] if not dropped(r)]
            else:
                _append(lake / name, "a" if name.startswith("sales") else None)
                expected[name] = sorted([*expected[name], *_rows_of_append(name)])
            if start:
                appender.start()

        return racing_write

    def _rows_of_append(name: str) -> list[tuple]:
        return [("a" if name.startswith("sales") else "x", x) for x in range(3)]

    RACE.offset_ms = 8 * DAY
    RACE.events.clear()
    RACE.fired.clear()
    # inside OPTIMIZE's window: a DELETE removing its inputs (a conflict), an append (none); inside VACUUM's
    # (its new file must survive), the checkpoint's and the log cleanup's: appends; from VACUUM's on, the
    # appender on `healthy`
    RACE.on(
        "table.optimize_table", uri["sales/raced"], write("sales/raced", "p = 'a' AND x = 0", lambda r: r == ("a", 0))
    )
    RACE.on("table.optimize_table", uri["sales/small"], write("sales/small"))
    RACE.on(
        "table.vacuum_table",
        uri["gone/tombstones"],
        write("gone/tombstones", start=True),
    )
    RACE.on("table.checkpoint_table", uri["deep/er/longlog"], write("deep/er/longlog"))
    RACE.on("table.log_cleanup_table", uri["old"], write("old"))

    path = tmp_path / "autopilot_dag.py"
    path.write_text(DAG_TEXT.format(lake=str(lake), history=str(history), policy=POLICY))
    bag = DagBag(dag_folder=str(path))
    assert bag.import_errors == {}
    with create_session() as session:
        DagBundlesManager().sync_bundles_to_db(session=session)
    sync_bag_to_db(bag, "dags-folder", None)
    dag = bag.dags["lake_autopilot_test"]
    try:
        run = dag.test(run_conf={"approve": True})  # the policy's vacuum approval given by conf
    finally:
        if appender.is_alive():
            appender.stop()
    assert appender.failures == [] and RACE.events == {}, (appender.failures, RACE.events)
    assert len(RACE.fired) == 5
    expected["healthy"] = sorted([*expected["healthy"], *(r for rows in appender.appended for r in rows)])

    plan_ = xcom_return(run.run_id, "plan_work")
    planned = _plan_of(run.run_id)
    broken, raced = uri["broken"], uri["sales/raced"]
    assert planned == {
        (uri["sales/small"], "optimize"),
        (raced, "optimize"),
        (broken, "optimize"),
        (uri["gone/tombstones"], "vacuum"),
        (uri["deep/er/longlog"], "checkpoint"),
        (uri["old"], "log_cleanup"),
    }
    assert [t["operation"] for t in plan_["needs_approval"]] == ["vacuum"]
    refused = "file://" + str(lake / "refused")
    assert [(e["table"], e["error_class"]) for e in plan_["errors"]] == [(f"{refused}/corrupt", "MalformedCommitError")]
    states = task_states(run.run_id)
    assert states["approve"] == "skipped" and states["record"] == "success", states
    mapped = _mapped("lake_autopilot_test", run.run_id)
    index = {g["table_uri"]: i for i, g in enumerate(plan_["groups"])}
    assert len(mapped) == 5 * len(index)
    # the broken and the raced tables' tasks fail, and only theirs (those that ran are named after their table)
    for failed in (broken, raced):
        assert {(m[0], m[3]) for m in mapped if m[1] == index[failed]} == {
            ("table.optimize_table", "failed"),
            *(
                (f"table.{t}", "upstream_failed")
                for t in ("vacuum_table", "checkpoint_table", "log_cleanup_table", "prove")
            ),
        }
    assert {m[3] for m in mapped if m[1] not in (index[broken], index[raced])} == {"success"}, mapped
    assert {(m[1], m[2]) for m in mapped if m[3] != "upstream_failed"} == {(i, t) for t, i in index.items()}

    # every planned operation happened; delta-rs reads what the writers left, racing writes included
    assert {n: _rows(lake / n) for n in names} == expected
    assert len(expected["healthy"]) == 3 + 3 * len(appender.appended)
    small = DeltaTable(str(lake / "sales" / "small"))
    assert small.history(1)[0]["operation"] == "OPTIMIZE"
    assert len([u for u in small.file_uris() if "p=a" in u]) == 2  # the compacted file and the racing append
    gone_left = {f.name for f in (lake / "gone" / "tombstones").glob("*.parquet")}
    assert (tombstoned - live).isdisjoint(gone_left) and live <= gone_left  # vacuumed what it planned
    assert (lake / "deep" / "er" / "longlog" / "_delta_log" / "_last_checkpoint").exists()
    assert sorted(p.name for p in (lake / "old" / "_delta_log").glob("*.json")) != old_log  # log cleaned
    _all_versions_read(lake, names)

    # the history: one row per (table, operation), one commit, read by delta-rs
    recorded = xcom_return(run.run_id, "record")
    DeltaLog.clear_cache()
    hist = DeltaTable(str(history))
    assert hist.version() == recorded["history_version"] == 1  # version 0 created it
    every_row = hist.to_pyarrow_table().to_pylist()
    # each readable table's health as the plan saw it (before the racing writes), then the steps' rows
    health = {r["table"]: r for r in every_row if r["operation"] == "health"}
    assert set(health) == {*uri.values(), f"{refused}/clustered"} and health[uri["sales/small"]]["files"] == 7
    assert {r["status"] for r in health.values()} == {"measured"} and health[uri["old"]]["checkpoint_version"] == 3
    rows = [r for r in every_row if r["operation"] != "health"]
    assert {(r["table"], r["operation"], r["status"]) for r in rows} == {
        *((t, o, "failed" if t in (broken, raced) else "done") for t, o in planned),
        (f"{refused}/corrupt", "scan", "failed"),  # the scan's error, recorded too
    }
    assert len(rows) == len(planned) + 1 and {r["run_id"] for r in rows} == {run.run_id}
    failed = next(r for r in rows if r["table"] == broken)
    assert failed["error_class"] == "LogCorruptedError" and "parquet" in failed["error_message"].lower()
    conflict = next(r for r in rows if r["table"] == raced)
    assert issubclass(getattr(errors, conflict["error_class"]), errors.ConcurrentModificationError), conflict
    opt = next(r for r in rows if (r["table"], r["operation"]) == (uri["sales/small"], "optimize"))
    assert opt["proof"] == "proven" and opt["rows_before"] == opt["rows_after"] == 18
    assert opt["files_removed"] == 6 and opt["files_added"] == 1 and opt["est_value"] > 0
    by_op = {r["operation"]: r for r in rows if r["table"] not in (broken, raced)}
    assert by_op["vacuum"]["files_removed"] == len(tombstoned - gone_left) > 0
    longlog = json.loads((lake / "deep" / "er" / "longlog" / "_delta_log" / "_last_checkpoint").read_text())
    assert by_op["checkpoint"]["version"] == longlog["version"]
    assert by_op["log_cleanup"]["files_removed"] > 0 and all(
        r["actual_seconds"] >= 0 for r in rows if r["operation"] != "scan"
    )
    assert hist.history(1)[0]["operation"] == "WRITE"

    # the second run plans exactly what the first left or created: the tombstones of the raced table's DELETE
    # (which rewrote p=a's six files into one: its compaction is no longer needed); the appended table's compaction (and
    # checkpoint) once it has enough small files (commits); the broken table again. Not the first run's OPTIMIZE
    # tombstones: its commit is timed by the DAG's clock, so they are not past retention yet.
    n = len(appender.appended)
    healthy = {(uri["healthy"], "optimize")} if n + 1 >= 3 else set()
    healthy |= {(uri["healthy"], "checkpoint")} if n + 1 >= 10 else set()
    second = dag.test(run_conf={"approve": True})
    assert len([u for u in DeltaTable(str(lake / "sales" / "raced")).file_uris() if "p=a" in u]) == 1
    assert _plan_of(second.run_id) == {
        (raced, "vacuum"),
        (broken, "optimize"),
        *healthy,
    }
    assert task_states(second.run_id)["record"] == "success"
    assert {n: _rows(lake / n) for n in names} == expected
    _all_versions_read(lake, names)
    # and then nothing is left but the broken table and one checkpoint
    now = int(time.time() * 1000) + 8 * DAY
    result = scan([str(lake / n) for n in (*names, "broken")], policy=parse_policy(POLICY), now_ms=now)
    left = {(t.table, t.operation) for t in plan(result.healths).tasks}
    # (the raced table's 7 appends, its DELETE and the second run's VACUUM START and END make the 10 commits of
    # its checkpoint interval: work the second run created)
    assert left == {(broken, "optimize"), (raced, "checkpoint")}
    json.dumps(xcom_return(second.run_id, "plan_work"))


def _all_versions_read(lake: Path, names: tuple[str, ...]) -> None:
    """Every version inside retention reads in delta-rs (the latest checked against the expected rows above)."""
    now = int(time.time() * 1000) + 8 * DAY
    for n in names:
        latest = DeltaTable(str(lake / n)).version()
        for v in range(_first_in_retention(lake / n, now), latest + 1):
            _rows(lake / n, v)


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
