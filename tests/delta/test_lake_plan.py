"""The lake plan: on a lake of delta-rs tables (and corpus copies) it picks exactly the expected tables,
partitions and operations and nothing whose gain is nil; refusals, policy skips and unreadable tables are
reported; a budget takes the most valuable work first; compaction is incremental (from the log)."""

from __future__ import annotations

import json
import time

import pyarrow as pa
import pytest
from conftest import copy_table
from deltalake import DeltaTable, write_deltalake

from airflow_delta_provider.delta.errors import InvalidArgumentError
from airflow_delta_provider.delta.lake import Budget, Cost, Gain, Task, discover, parse_policy, plan, scan
from airflow_delta_provider.delta.protocol.lake_plan import PartitionWork, rank, within_budget

DAY = 86_400_000


def _append(path, p: str | None = None, n: int = 3, **kwargs) -> None:
    data = pa.table({"p": [p or "x"] * n, "x": list(range(n))})
    write_deltalake(str(path), data, partition_by=["p"] if p else None, mode="append", **kwargs)


@pytest.fixture
def lake(tmp_path):
    root = tmp_path / "lake"
    _append(root / "healthy")
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
    for _ in range(3):
        _append(root / "untouchable")
    copy_table("delta-rs/table_with_liquid_clustering", root)
    corrupt = root / "corrupt"
    _append(corrupt)
    _append(corrupt)
    (corrupt / "_delta_log" / "00000000000000000001.json").write_text("{not json")
    (root / "empty").mkdir()
    return root


POLICY = {
    "defaults": {"min_small_files": 3},
    "never_unattended": ["vacuum"],
    "tables": [
        {"match": "*/deep/er/longlog", "min_small_files": 100},
        {"match": "*/old", "disabled": ["optimize"]},
    ],
    "never_touch": ["*/untouchable"],
}


def _uri(root, name: str) -> str:
    return "file://" + str(root / name)


def test_the_plan_picks_exactly_the_work_with_a_gain(lake):
    found = discover([str(lake)])
    assert len(found.tables) == 8 and found.errors == []
    policy = parse_policy(POLICY)
    result = scan(found.tables, policy=policy, now_ms=int(time.time() * 1000) + 8 * DAY)
    lake_plan = plan(result.healths, errors=result.errors)
    got = {(t.table, t.operation, t.partitions) for t in lake_plan.tasks}
    assert got == {
        (_uri(lake, "sales/small"), "optimize", ("p=a",)),
        (_uri(lake, "gone/tombstones"), "vacuum", ()),
        (_uri(lake, "deep/er/longlog"), "checkpoint", ()),
        (_uri(lake, "old"), "log_cleanup", ()),
    }
    assert all(t.gain.value > 0 and t.cost.total_requests > 0 and t.cost.seconds > 0 for t in lake_plan.tasks)
    assert [t.needs_approval for t in lake_plan.tasks if t.operation == "vacuum"] == [True]
    optimize = next(t for t in lake_plan.tasks if t.operation == "optimize")
    # six small files into one: a footer and a body read each, and the GET of a commit read while committing
    assert (optimize.gain.files_removed, optimize.cost.requests["get"]) == (5, 13)
    skipped = {(s["table"].rsplit("/", 1)[-1], s.get("operation"), s.get("error_class")) for s in lake_plan.skipped}
    assert skipped == {
        ("untouchable", None, None),
        ("old", "optimize", None),
        ("table_with_liquid_clustering", "optimize", "UnsupportedFeatureError"),
    }
    assert [(e["table"], e["error_class"]) for e in lake_plan.errors] == [
        (_uri(lake, "corrupt"), "MalformedCommitError")
    ]
    # a budget that fits the most valuable half takes exactly it and defers the rest
    ranked = rank(lake_plan.tasks)
    half = Budget(requests=sum(t.cost.total_requests for t in ranked[:2]))
    halved = plan(result.healths, half)
    assert halved.tasks == ranked[:2] and halved.deferred == ranked[2:]
    out = json.loads(json.dumps(lake_plan.to_dict()))  # the `deltalog lake plan --json` shape, plain JSON
    assert {"tasks", "skipped", "errors"} <= set(out)
    assert {"table", "operation", "partitions", "cost", "gain"} <= set(out["tasks"][0])


def test_compaction_is_incremental(tmp_path):
    path = tmp_path / "t"
    for _ in range(6):
        _append(path, "a")
    for _ in range(3):
        _append(path, "b")
    policy = parse_policy({"defaults": {"min_small_files": 2}})

    def planned() -> set[str]:
        return {p for t in plan(scan([str(path)], policy=policy).healths).tasks for p in t.partitions}

    assert planned() == {"p=a", "p=b"}
    # an OPTIMIZE with a small target leaves several files per partition: all still "small" for the policy
    DeltaTable(str(path)).optimize.compact(target_size=1100)
    h = scan([str(path)], policy=policy).healths[0]
    assert all(p.small_files >= 2 for p in h.partitions.values())
    assert planned() == set()  # nothing changed since that OPTIMIZE
    _append(path, "b")
    assert planned() == {"p=b"}


def _task(name: str, value: int, requests: int = 10, parts: tuple[PartitionWork, ...] = ()) -> Task:
    cost = Cost(100, 100, 0, {"get": requests}, 1.0)
    return Task(name, "optimize", tuple(w.partition for w in parts), cost, Gain(files_removed=value), parts=parts)


def test_a_budget_for_half_the_work_takes_the_most_valuable_half():
    tasks = [_task(f"t{v}", v) for v in (3, 8, 1, 5, 2, 7)]
    taken, deferred = within_budget(tasks, Budget(requests=30))
    assert [t.table for t in taken] == ["t8", "t7", "t5"] and [t.table for t in deferred] == ["t3", "t2", "t1"]
    assert [t.table for t in rank(tasks)] == ["t8", "t7", "t5", "t3", "t2", "t1"]
    by_bytes, _ = within_budget(tasks, Budget(bytes=600))
    by_time, _ = within_budget(tasks, Budget(seconds=1.5, parallelism=2))
    assert [t.table for t in by_bytes] == [t.table for t in by_time] == ["t8", "t7", "t5"]
    assert within_budget(tasks, Budget())[0] == rank(tasks)


def test_an_optimize_too_big_for_the_budget_keeps_its_most_valuable_partitions():
    def work(p: str, value: int) -> PartitionWork:
        return PartitionWork(p, 10, Cost(0, 0, 0, {"get": 10}, 0.1), Gain(files_removed=value))

    parts = (work("p=1", 9), work("p=2", 5), work("p=3", 1))
    big = _task("t", 15, requests=33, parts=parts)
    taken, deferred = within_budget([big], Budget(requests=25))
    assert [t.partitions for t in taken] == [("p=1", "p=2")] and taken[0].gain.files_removed == 14
    assert [t.partitions for t in deferred] == [("p=3",)]
    assert taken[0].cost.total_requests <= 25


@pytest.mark.parametrize("bad", [{"bytes": -1}, {"requests": "10"}, {"seconds": True}, {"parallelism": 0}])
def test_bad_budgets(bad):
    with pytest.raises(InvalidArgumentError):
        Budget(**bad)


def _health(files, policy=None):
    from airflow_delta_provider.delta.protocol.lake_health import TableHealth, summarize_partitions
    from airflow_delta_provider.delta.protocol.lake_policy import TablePolicy

    tp = policy or TablePolicy(target_file_size=100, small_file_bytes=50, min_small_files=3)
    parts = summarize_partitions(
        files,
        [],
        small_file_bytes=tp.small_file_bytes,
        target_file_size=tp.target_file_size,
        max_deleted_rows_ratio=0.05,
        retention_cutoff_ms=0,
    )
    refused = dict.fromkeys(("optimize", "vacuum", "checkpoint", "log_cleanup"))
    return TableHealth(
        table="t",
        version=1,
        partition_columns=("p",),
        configuration={},
        protocol={},
        refused=refused,
        partitions=parts,
        tombstones_all_reclaimable_at=None,
        checkpoint_version=None,
        commits_since_checkpoint=1,
        segment_bytes=0,
        log_files=2,
        log_files_past_retention=0,
        log_bytes_past_retention=0,
        write_rate_per_day=0.0,
        last_optimize=None,
        last_vacuum=None,
        last_checkpoint_timestamp=None,
        scanned_at=0,
        policy=tp,
    )


def test_deletion_vector_heavy_files_are_compacted_even_alone():
    from airflow_delta_provider.delta.protocol.lake_health import ActiveFile

    files = [
        ActiveFile("p=1", 1000, 100, 50),  # a big file whose DV hides half its rows: rewritten alone (delta #5781)
        ActiveFile("p=2", 1000, 100, 2),  # under the 5 % ratio: left alone
        ActiveFile("p=3", 10, 10, 0),  # two small files: under min_small_files
        ActiveFile("p=3", 10, 10, 0),
        *[ActiveFile("p=4", 20, 10, 5) for _ in range(4)],  # four small files hiding half their rows
    ]
    tasks = plan([_health(files)]).tasks
    assert [(t.operation, t.partitions) for t in tasks] == [("optimize", ("p=4", "p=1"))]
    by_part = {w.partition: w for w in tasks[0].parts}
    assert (by_part["p=1"].gain.files_removed, by_part["p=1"].gain.dv_rows_purged) == (0, 50)
    assert by_part["p=1"].cost.bytes_written == 500  # the hidden rows are not rewritten
    assert (by_part["p=4"].gain.files_removed, by_part["p=4"].gain.dv_rows_purged) == (3, 20)
    assert by_part["p=4"].cost.bytes_read == 80 and by_part["p=4"].cost.bytes_written == 40


def test_an_optimize_task_runs_as_planned_and_then_nothing_is_planned(tmp_path):
    """The task's `where` selects exactly its partitions (ints, nulls, quotes, `/` and `=` in values); our OPTIMIZE
    run with it and the policy's thresholds leaves delta-rs reading the same rows, and a rescan plans nothing."""
    from airflow_delta_provider.delta import DeltaLog
    from airflow_delta_provider.delta.maintenance.optimize import optimize

    path = tmp_path / "t"
    values = [(1, "a b"), (None, "c/=d"), (2, "x'y"), (3, "one")]
    for n, s in values:
        for i in range(4 if n != 3 else 1):
            data = pa.table({"n": pa.array([n], pa.int32()), "s": [s], "v": [i]})
            write_deltalake(str(path), data, partition_by=["n", "s"], mode="append")

    def rows() -> list[str]:
        return sorted(repr(r) for r in DeltaTable(str(path)).to_pyarrow_table().to_pylist())

    before = rows()
    policy = parse_policy({"defaults": {"min_small_files": 3}})
    tasks = plan(scan([str(path)], policy=policy).healths).tasks
    assert sorted(t.operation for t in tasks) == ["checkpoint", "optimize"]  # 13 commits, no checkpoint
    task = next(t for t in tasks if t.operation == "optimize")
    assert set(task.partitions) == {"n=1/s=a b", "n=__HIVE_DEFAULT_PARTITION__/s=c/=d", "n=2/s=x'y"}
    chosen = DeltaLog(str(path)).snapshot.files(task.where)
    assert len(chosen) == 12 and {f.partition_values["s"] for f in chosen} == {"a b", "c/=d", "x'y"}
    p = task.parts[0]
    assert p.values and task.where.count(" OR ") == 2

    assert task.options == {"where": task.where, "target_size": 100 * 2**20, "max_deleted_rows_ratio": 0.05}
    result = optimize(str(path), **task.options)  # the driver runs with the task's own options
    assert len(result.removed) == 12 and len(result.added) == 3
    assert rows() == before and len(before) == 13
    assert [t.operation for t in plan(scan([str(path)], policy=policy).healths).tasks] == ["checkpoint"]


def test_vacuum_is_not_planned_again_for_what_it_deleted(tmp_path):
    """Tombstones stay in the log after VACUUM deleted their files: the last completed VACUUM's START (its
    timestamp less its retention) says which are gone, so the next plan has no VACUUM, until a later DELETE
    (timed by a writer whose clock lags the VACUUM's) makes a new tombstone."""
    from airflow_delta_provider.delta.lake.run import apply_task

    path = tmp_path / "t"
    _append(path, n=6)
    DeltaTable(str(path)).delete("x < 2")
    now = int(time.time() * 1000) + 8 * DAY

    def vacuums() -> list:
        return [t for t in plan(scan([str(path)], now_ms=now).healths).tasks if t.operation == "vacuum"]

    (task,) = vacuums()
    assert apply_task(str(path), task.to_dict(), clock=lambda: now)["files_removed"] == 1
    assert vacuums() == []
    DeltaTable(str(path)).delete("x = 3")  # its tombstone is older than the VACUUM's cutoff, but newer than it
    (again,) = vacuums()
    assert again.cost.files_deleted == 1


def test_each_table_runs_on_the_engine_its_size_calls_for(tmp_path):
    """A policy's `spark_min_files` puts tables with that many active files on "spark" (in the plan and its JSON);
    `run_task` runs them on the engine given under that name and refuses, naming it, when none is. The engine
    given here is a real `LocalEngine` subclass that notes its use, standing in for a SparkEngine (the Spark
    drivers are tested in the test_spark_* modules)."""
    from airflow_delta_provider.delta.engines.local import LocalEngine
    from airflow_delta_provider.delta.lake.run import run_task

    big, small = tmp_path / "big", tmp_path / "small"
    for _ in range(6):
        _append(big, "a")
    for _ in range(3):
        _append(small, "a")
    policy = parse_policy({"defaults": {"min_small_files": 3, "spark_min_files": 5}})
    lake_plan = plan(scan([str(big), str(small)], policy=policy).healths)
    engines = {t.table.rsplit("/", 1)[-1]: t.engine for t in lake_plan.tasks}
    assert engines == {"big": "spark", "small": "local"}
    assert {t["engine"] for t in lake_plan.to_dict()["tasks"]} == {"spark", "local"}
    assert {t.engine for t in plan(scan([str(big)], policy=parse_policy(None)).healths).tasks} <= {"local"}

    task = next(t for t in lake_plan.tasks if t.engine == "spark").to_dict()
    with pytest.raises(InvalidArgumentError, match="no 'spark' engine") as refused:
        run_task(str(big), task)
    assert refused.value.to_dict()["argument"] == "engines"
    used: list[str] = []

    class NotingEngine(LocalEngine):
        def bin_rewriter(self, *args, **kwargs):
            used.append("bin_rewriter")
            return super().bin_rewriter(*args, **kwargs)

    row = run_task(str(big), task, engines={"spark": NotingEngine})
    assert row["status"] == "done" and row["files_removed"] == 6 and used == ["bin_rewriter"]
