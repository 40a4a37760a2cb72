"""VACUUM on Spark executors equals VACUUM in this process (real Spark, local[2], one session per module).

Tables are written by delta-rs with random operations, then stray files are added (old and new, visible
and hidden). The same plan must come out of the local engine, of Spark with the snapshot replayed on the
driver, and of Spark with it replayed by the Spark engine; applying it on Spark deletes exactly those files.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

pytest.importorskip("pyspark")
deltalake = pytest.importorskip("deltalake")
from deltalake import DeltaTable, write_deltalake  # noqa: E402

from airflow_delta_provider.delta.delta_log import DeltaLog  # noqa: E402
from airflow_delta_provider.delta.errors import InvalidArgumentError, OperationNotAllowedError  # noqa: E402
from airflow_delta_provider.delta.maintenance.vacuum import vacuum  # noqa: E402
from airflow_delta_provider.delta.protocol.actions import AddFile  # noqa: E402

#: Plan keys that say where Spark wrote the list (the local engine writes none).
SPARK_ONLY = {"files_uri", "files_inline"}
OLD = time.time() - 30 * 86_400


@pytest.fixture(scope="module")
def spark():
    from support.spark_cluster import local_session

    return local_session("delta-vacuum-tests")  # the suite's shared local[2] session: left running


def _data(n: int, part: str) -> pa.Table:
    return pa.table({"id": list(range(n)), "p": [part] * n})


def _random_table(path: Path, seed: int) -> None:
    """A delta-rs table after random appends, overwrites, deletes and compactions (and a checkpoint), with
    stray files."""
    rng = random.Random(seed)
    write_deltalake(str(path), _data(5, "a"), partition_by=["p"])
    for step in range(8):
        if step == 5:  # a checkpoint: the Spark engine's state then holds checkpoint rows as DataFrames
            DeltaTable(str(path)).create_checkpoint()
        op = rng.choice(["append", "append", "overwrite", "delete", "optimize"])
        if op == "append":
            write_deltalake(str(path), _data(rng.randint(1, 5), rng.choice("abc")), partition_by=["p"], mode="append")
        elif op == "overwrite":
            write_deltalake(str(path), _data(rng.randint(1, 5), rng.choice("ab")), partition_by=["p"], mode="overwrite")
        elif op == "delete":
            DeltaTable(str(path)).delete(f"id = {rng.randint(0, 4)}")
        else:
            DeltaTable(str(path)).optimize.compact()
    strays = {
        "stray.parquet": OLD,
        "p=a/stray2.parquet": OLD,
        "zz/deep/stray3.bin": OLD,
        "_change_data/cdc-0.parquet": OLD,
        "_hidden/x.parquet": OLD,
        ".dot.parquet": OLD,
        "p=b/.part.crc": OLD,
        "p=a/inflight.parquet": time.time(),  # a writer's file: newer than the cutoff
    }
    for rel, mtime in strays.items():
        f = path / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"x" * (len(rel) + 1))
        os.utime(f, (mtime, mtime))


def _files(path: Path) -> set[str]:
    """Every file under the table root but the log (the audit commits add to it)."""
    found = (p.relative_to(path) for p in path.rglob("*") if p.is_file())
    return {str(p) for p in found if p.parts[0] != "_delta_log"}


def _rows(path: Path) -> pa.Table:
    return DeltaTable(str(path)).to_pyarrow_table().sort_by([("id", "ascending"), ("p", "ascending")])


def _local_only(plan: dict) -> dict:
    return {k: v for k, v in plan.items() if k not in SPARK_ONLY}


def _read_plan_files(uri: str) -> list[dict]:
    directory = Path(uri.removeprefix("file://"))
    rows = []
    for part in sorted(directory.glob("part-*")):
        rows += [json.loads(line) for line in part.read_text().splitlines() if line.strip()]
    return sorted(rows, key=lambda r: r["path"])


# -- the per-row rules and the counts-only plan (pure, no JVM) ------------------------------------------------
PATHS = [
    "a.parquet",
    "p=1/a.parquet",
    "p=1/../a.parquet",
    "_delta_log/00000000000000000000.json",
    "_delta_log",
    "_tmp/x",
    ".hidden",
    "p=1/.a.crc",
    "_change_data/c.parquet",
    "_p=1/x.parquet",
    "dv/deletion_vector_0c5e1a36-4d2b-4a54-8d8f-6bd0b3d04c3f.bin",
    "dv/test%dv%prefix-deletion_vector_0c5e1a36-4d2b-4a54-8d8f-6bd0b3d04c3f.bin",
    "p=e\u0301/z.parquet",
    "/abs/path",
    "s3://b/k",
    "",
]


def test_per_row_rules_agree_with_the_set_rule() -> None:
    from airflow_delta_provider.delta.protocol.vacuum import (
        ListedFile,
        deletable,
        dv_alias_key,
        listed_candidate,
        normalize_relative,
        plan_entry_relative,
    )

    protected = {"dv/deletion_vector_0c5e1a36-4d2b-4a54-8d8f-6bd0b3d04c3f.bin", "p=\u00e9/z.parquet"}
    columns = ["p", "_p"]
    for path in PATHS:
        rel = normalize_relative(path)
        by_set = deletable(rel, protected, columns)
        # what the executors compute per row, then join: the name rules, then the path and its DV alias
        listed = listed_candidate(ListedFile(path, 1, 0), 1, columns)
        by_row = listed is not None and listed not in protected and dv_alias_key(listed) not in protected
        assert by_row == by_set, path
        entry = plan_entry_relative(path, columns)
        assert (entry is not None and entry not in protected and dv_alias_key(entry) not in protected) == (
            by_set and not path.startswith("/") and "://" not in path
        ), path
    assert listed_candidate(ListedFile("a.parquet", 1, 5), 5) is None  # not older than the cutoff


def test_counts_only_plan_round_trips_and_an_edited_list_stays_the_plan() -> None:
    from airflow_delta_provider.delta.protocol.vacuum import PlannedFile, PlanTotals, VacuumPlan

    parts = {"": {"files": 1, "bytes": 7}, "p=1": {"files": 2, "bytes": 10}}
    plan = VacuumPlan("file:///t", 3, 1000, 0, "full", [], {}, "file:///r.plan/x", PlanTotals(3, 17, parts))
    d = json.loads(json.dumps(plan.to_dict()))
    assert (d["files"], d["num_files"], d["bytes"], d["files_inline"]) == ([], 3, 17, False)
    again = VacuumPlan.from_dict(d)
    assert again.to_dict() == d and not again.files_inline and again.files_uri == "file:///r.plan/x"
    # a list carried inline is the plan, whatever counts a hand edit left beside it
    inline = VacuumPlan("file:///t", 3, 1000, 0, "full", [PlannedFile("a", 1), PlannedFile("b", 2)], {}, "u")
    edited = dict(inline.to_dict(), files=[{"path": "a", "size": 1}])
    kept = VacuumPlan.from_dict(edited)
    assert kept.files_inline and [f.path for f in kept.files] == ["a"] and kept.num_files == 1


@pytest.mark.spark
@pytest.mark.parametrize("seed", [21])
def test_spark_plan_equals_local_plan_and_apply_deletes_exactly_it(spark, tmp_path: Path, seed: int) -> None:
    from airflow_delta_provider.delta.engines.spark import SparkEngine
    from airflow_delta_provider.delta.engines.spark.vacuum import SparkVacuumExecutor

    path = tmp_path / "rnd"
    _random_table(path, seed)
    now = int(time.time() * 1000) + 1000
    kw: dict = dict(retention_hours=0, enforce_retention_duration=False, clock=lambda: now)
    local = vacuum(str(path), **kw).to_dict()
    assert {"stray.parquet", "p=a/stray2.parquet", "zz/deep/stray3.bin", "_change_data/cdc-0.parquet"} <= {
        f["path"] for f in local["files"]
    }
    assert len(local["files"]) > 4  # tombstoned files too, not only the strays

    executor = SparkVacuumExecutor(spark, plan_dir=str(tmp_path / "plans"))
    on_spark = vacuum(str(path), executor=executor, **kw).to_dict()
    assert _local_only(on_spark) == local  # same files, sizes, partitions, bytes, version, cutoff
    assert on_spark["files_inline"] and _read_plan_files(on_spark["files_uri"]) == local["files"]
    # the snapshot replayed by the Spark engine: protected paths from its distributed state
    replayed = DeltaLog(str(path), engine=SparkEngine(spark, snapshot_partitions=2))
    from_state = vacuum(replayed, executor=SparkVacuumExecutor(spark), **kw).to_dict()
    assert _local_only(from_state) == local and "files_uri" not in from_state

    before, expected = _files(path), _rows(path)
    version = DeltaTable(str(path)).version()
    result = vacuum(str(path), plan=on_spark, dry_run=False, executor=executor, **kw).to_dict()
    planned = {f["path"] for f in local["files"]}
    assert result["deleted"] == len(planned) and result["deleted_bytes"] == local["bytes"] and not result["dropped"]
    assert _files(path) == before - planned
    dirs = {str(parent) for p in planned for parent in Path(p).parents} - {"."}
    assert result["directories"] == sum(1 for d in dirs if not (path / d).exists()) > 0  # zz/deep and zz at least
    assert _rows(path) == expected  # delta-rs reads the latest version unchanged
    snap = DeltaLog(str(path)).update()
    assert all((path / a.path).exists() for a in snap.all_files(with_stats=False))
    history = DeltaTable(str(path)).history(2)
    assert [h["operation"] for h in history] == ["VACUUM END", "VACUUM START"]
    assert DeltaTable(str(path)).version() == version + 2
    assert int(history[0]["operationMetrics"]["numDeletedFiles"]) == len(planned)
    assert int(history[1]["operationMetrics"]["sizeOfDataToDelete"]) == local["bytes"]


@pytest.mark.spark
def test_plan_above_the_collect_limit_is_applied_from_its_file_list_and_revalidated(spark, tmp_path: Path) -> None:
    from airflow_delta_provider.delta.engines.spark import SparkEngine
    from airflow_delta_provider.delta.engines.spark.vacuum import SparkVacuumExecutor

    path = tmp_path / "t"
    _random_table(path, 5)
    now = int(time.time() * 1000) + 1000
    kw: dict = dict(retention_hours=0, enforce_retention_duration=False, clock=lambda: now)
    local = vacuum(str(path), **kw).to_dict()
    executor = SparkVacuumExecutor(spark, plan_dir=str(tmp_path / "plans"), collect_limit=1)
    plan = json.loads(json.dumps(vacuum(str(path), executor=executor, **kw).to_dict()))
    # counts only on the driver; the list is where the executors wrote it
    assert plan["files"] == [] and plan["files_inline"] is False
    assert (plan["num_files"], plan["bytes"], plan["partitions"]) == (
        local["num_files"],
        local["bytes"],
        local["partitions"],
    )
    assert _read_plan_files(plan["files_uri"]) == local["files"]
    with pytest.raises(InvalidArgumentError, match="applied there"):  # the local engine cannot apply it
        vacuum(str(path), plan=plan, dry_run=False, **kw)

    # a planned file becomes active again before the plan is applied: re-validation keeps it
    readded = next(f for f in local["files"] if f["path"].startswith("p=") and "/part-" in f["path"])
    snap = DeltaLog(str(path)).update()
    part = readded["path"].split("/")[0].split("=")[1]
    snap.transaction("WRITE").add(
        AddFile(path=readded["path"], partition_values={"p": part}, size=readded["size"], modification_time=1)
    ).commit()
    before, expected = _files(path), _rows(path)
    # applied with the snapshot replayed by the Spark engine: the re-added file is found in its state
    replayed = DeltaLog(str(path), engine=SparkEngine(spark, snapshot_partitions=2))
    result = vacuum(replayed, plan=plan, dry_run=False, executor=executor, **kw)
    assert [f.path for f in result.dropped] == [readded["path"]]
    assert result.deleted == local["num_files"] - 1 and (path / readded["path"]).exists()
    assert result.plan.num_files == local["num_files"] - 1 and not result.plan.files_inline  # kept: counts only
    assert _files(path) == before - {f["path"] for f in local["files"]} | {readded["path"]}
    assert _rows(path) == expected
    assert [h["operation"] for h in DeltaTable(str(path)).history(2)] == ["VACUUM END", "VACUUM START"]

    # a plan whose file list was changed after planning is refused
    (Path(plan["files_uri"].removeprefix("file://")) / "part-99999-extra.json").write_text(
        json.dumps({"path": "zz/other", "size": 1}) + "\n"
    )
    with pytest.raises(OperationNotAllowedError, match="plan again"):
        vacuum(str(path), plan=plan, dry_run=False, executor=executor, **kw)


@pytest.mark.spark
def test_one_shot_apply_without_plan_dir_deletes_the_plan(spark, tmp_path: Path) -> None:
    from airflow_delta_provider.delta.engines.spark.vacuum import SparkVacuumExecutor

    path = tmp_path / "t"
    _random_table(path, 7)
    now = int(time.time() * 1000) + 1000
    kw: dict = dict(retention_hours=0, enforce_retention_duration=False, clock=lambda: now)
    expected = {f["path"] for f in vacuum(str(path), **kw).to_dict()["files"]}
    before = _files(path)
    result = vacuum(str(path), dry_run=False, audit=False, executor=SparkVacuumExecutor(spark, collect_limit=1), **kw)
    assert result.deleted == len(expected) and _files(path) == before - expected


@pytest.mark.spark
def test_edited_plan_applied_on_spark_drops_refuses_and_counts_as_the_local_engine(spark, tmp_path: Path) -> None:
    """Issue 28 on the Spark executor: a plan edited by hand is re-checked against storage on the executors
    (a fresh file edited in, a directory, a repeat, a file already gone: dropped or missing with the local
    engine's reasons, the missing one not counted; the grace period joined with the expired tombstones),
    and a file list naming a path outside the table refuses the plan before anything is deleted."""
    from airflow_delta_provider.delta.engines.spark.vacuum import SparkVacuumExecutor
    from airflow_delta_provider.delta.protocol.vacuum import VacuumPlanRefusedError

    path = tmp_path / "t"
    _random_table(path, 21)
    _plant_old(path, "p=a/stray-gone.parquet")
    fresh = path / "p=b" / "part-00000-fresh.parquet"
    fresh.write_bytes(b"fresh")
    now = int(time.time() * 1000) + 1000
    kw: dict = dict(retention_hours=0, enforce_retention_duration=False, clock=lambda: now)
    executor = SparkVacuumExecutor(spark, plan_dir=str(tmp_path / "plans"))
    plan = vacuum(str(path), executor=executor, **kw).to_dict()
    local_plan = vacuum(str(path), **kw).to_dict()
    assert _local_only(plan) == local_plan and plan["grace_kept_files"] >= 2  # inflight.parquet, the fresh file
    st = fresh.stat()
    plan["files"] += [
        {"path": "p=b/part-00000-fresh.parquet", "size": st.st_size, "modification_time": st.st_mtime_ns // 10**6},
        {"path": "p=b", "size": 0, "modification_time": int(OLD * 1000)},
        dict(plan["files"][0]),
    ]
    (path / "p=a" / "stray-gone.parquet").unlink()
    twin = tmp_path / "twin"
    import shutil

    shutil.copytree(path, twin, copy_function=shutil.copy2)  # the same table, for the local engine
    local_plan = json.loads(json.dumps(plan).replace(str(path), str(twin)))
    local_plan.pop("files_uri"), local_plan.pop("files_inline")
    local = vacuum(str(twin), plan=local_plan, dry_run=False, **kw).to_dict()
    before = _files(path)
    done = vacuum(str(path), plan=plan, dry_run=False, executor=executor, **kw).to_dict()
    assert sorted((d["path"], d["reason"]) for d in done["dropped"]) == sorted(
        (d["path"], d["reason"]) for d in local["dropped"]
    )
    assert {d["reason"] for d in done["dropped"]} == {"untracked-grace", "directory", "duplicate"}
    assert done["missing"] == local["missing"] and [m["path"] for m in done["missing"]] == ["p=a/stray-gone.parquet"]
    assert (done["deleted"], done["deleted_bytes"]) == (local["deleted"], local["deleted_bytes"])
    assert done["deleted"] == len(plan["files"]) - 4 and fresh.exists() and (path / "p=b").is_dir()
    assert _files(path) == before - {f["path"] for f in plan["files"]} | {"p=b/part-00000-fresh.parquet"}

    # a counts-only plan whose file list names a path outside the table: refused on the executors' rows
    _plant_old(path, "p=a/stray-late.parquet")
    listed = SparkVacuumExecutor(spark, plan_dir=str(tmp_path / "plans2"), collect_limit=0)
    counts_only = vacuum(str(path), executor=listed, **kw).to_dict()
    assert counts_only["files_inline"] is False and counts_only["num_files"] == 1
    part = next(Path(counts_only["files_uri"].removeprefix("file://")).glob("part-*"))
    part.write_text(json.dumps({"path": "../outside", "size": 1, "modification_time": 1}) + "\n")
    part.with_name(f".{part.name}.crc").unlink(missing_ok=True)  # a session without RawLocalFileSystem checks it
    before = _files(path)
    with pytest.raises(VacuumPlanRefusedError, match="nothing was deleted") as info:
        vacuum(str(path), plan=counts_only, dry_run=False, executor=listed, **kw)
    assert info.value.file == "../outside" and _files(path) == before


def _is_cached(frame) -> bool:
    level = frame.storageLevel
    return level.useMemory or level.useDisk


def _plant_old(path: Path, rel: str) -> Path:
    f = path / rel
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_bytes(b"stray")
    os.utime(f, (OLD, OLD))
    return f


@pytest.mark.spark
def test_counts_only_plan_without_plan_dir_is_applied_from_its_cached_list(spark, tmp_path: Path) -> None:
    """Without `plan_dir`, a plan above `collect_limit` keeps its file list cached for this executor's apply:
    the apply never lists the table again (an old stray planted after the plan is not deleted), checks the
    list's count against the plan's, and frees the cache; `release()` frees it when the plan is not applied.
    The test reads the executor's cached frame (`_unlisted`) to see that it is freed."""
    from airflow_delta_provider.delta.engines.spark.vacuum import SparkVacuumExecutor
    from airflow_delta_provider.delta.protocol.vacuum import PlanTotals

    path = tmp_path / "t"
    _random_table(path, 7)
    now = int(time.time() * 1000) + 1000
    kw: dict = dict(retention_hours=0, enforce_retention_duration=False, clock=lambda: now)
    expected = {f["path"] for f in vacuum(str(path), **kw).to_dict()["files"]}
    executor = SparkVacuumExecutor(spark, collect_limit=1)
    plan = vacuum(str(path), executor=executor, **kw).plan
    assert plan.files == [] and plan.num_files == len(expected) > 1
    cached = executor._unlisted[1]
    assert _is_cached(cached)
    late = _plant_old(path, "p=a/late-stray.parquet")  # old enough to be planned, but written after the plan
    before = _files(path)
    result = vacuum(str(path), plan=plan, dry_run=False, audit=False, executor=executor, **kw)
    assert result.deleted == len(expected) and _files(path) == before - expected and late.exists()
    assert not _is_cached(cached) and executor._unlisted is None

    # the cached list's count is checked against the plan's (a list recomputed after a lost cache block
    # could differ: simulated by editing the plan's count)
    _plant_old(path, "stray-a.parquet")
    _plant_old(path, "p=b/stray-b.parquet")
    again = vacuum(str(path), executor=executor, **kw).plan
    assert again.num_files == len(vacuum(str(path), **kw).plan.files) == 3
    cached = executor._unlisted[1]
    again.totals = PlanTotals(again.num_files + 1, again.num_bytes, again.partitions())
    before = _files(path)
    with pytest.raises(OperationNotAllowedError, match="cached by this executor holds 3 files, the plan 4"):
        vacuum(str(path), plan=again, dry_run=False, audit=False, executor=executor, **kw)
    assert _files(path) == before and not _is_cached(cached) and executor._unlisted is None

    # a dry run that is not applied: release() frees its list, and the plan can no longer be applied
    unapplied = vacuum(str(path), executor=executor, **kw).plan
    cached = executor._unlisted[1]
    executor.release()
    assert not _is_cached(cached)
    with pytest.raises(OperationNotAllowedError, match="plan location"):
        vacuum(str(path), plan=unapplied, dry_run=False, audit=False, executor=executor, **kw)
    assert _files(path) == before


def _stage_tasks(spark, group: str) -> list[int]:
    """Tasks each stage of the job group ran (skipped stages ran none), from the status tracker."""
    tracker = spark.sparkContext.statusTracker()
    stages = {s for j in tracker.getJobIdsForGroup(group) for s in tracker.getJobInfo(j).stageIds}
    return [info.numCompletedTasks for info in map(tracker.getStageInfo, sorted(stages)) if info is not None]


@pytest.mark.spark
@pytest.mark.parametrize("broadcast_limit", [None, 0], ids=["broadcast", "sort-merge"])
def test_tiny_table_runs_few_tasks_whatever_the_shuffle_partitions(spark, tmp_path: Path, broadcast_limit) -> None:
    """A tiny table's plan and apply run a handful of tasks per stage even with the session's 200 shuffle
    partitions (Spark's default, set here on the test's own session and restored): the executor sizes what
    it caches and what feeds its delete tasks, whether the protected paths are broadcast or sort-merge joined
    (`broadcast_limit=0`). Counted by the status tracker over a job group; no timing."""
    from airflow_delta_provider.delta.engines.spark import SparkEngine
    from airflow_delta_provider.delta.engines.spark.vacuum import SparkVacuumExecutor

    path = tmp_path / "t"
    _random_table(path, 21)
    now = int(time.time() * 1000) + 1000
    kw: dict = dict(retention_hours=0, enforce_retention_duration=False, clock=lambda: now)
    local = vacuum(str(path), **kw).to_dict()
    before = _files(path)
    extra = {} if broadcast_limit is None else {"broadcast_limit": broadcast_limit}
    executor = SparkVacuumExecutor(spark, plan_dir=str(tmp_path / "plans"), **extra)
    replayed = DeltaLog(str(path), engine=SparkEngine(spark, snapshot_partitions=2))
    group = f"vacuum-tasks-{os.urandom(4).hex()}"
    saved = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "200")
    spark.sparkContext.setJobGroup(group, "tiny-table vacuum")
    try:
        plan = vacuum(replayed, executor=executor, **kw).to_dict()
        done = vacuum(replayed, plan=plan, dry_run=False, audit=False, executor=executor, **kw).to_dict()
    finally:
        for key in ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel"):
            spark.sparkContext.setLocalProperty(key, None)  # no clearJobGroup in PySpark
        spark.conf.set("spark.sql.shuffle.partitions", saved)
    assert _local_only(plan) == local
    assert (done["deleted"], done["deleted_bytes"], done["dropped"]) == (local["num_files"], local["bytes"], [])
    assert _files(path) == before - {f["path"] for f in local["files"]}
    tasks = _stage_tasks(spark, group)
    assert tasks and sum(tasks) > 0
    # two listing/delete tasks (parallelism), the engine's state over its 2 snapshot partitions from the
    # commits and the checkpoint: 4; never one task per shuffle partition
    assert executor.parallelism == 2 and max(tasks) <= 4, tasks
    assert sum(tasks) < 200, tasks


def _jobs(spark, group: str, run):
    """`run()`'s result and the Spark jobs it ran, counted by the status tracker over a job group."""
    spark.sparkContext.setJobGroup(group, group)
    try:
        result = run()
    finally:
        for key in ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel"):
            spark.sparkContext.setLocalProperty(key, None)
    return result, len(spark.sparkContext.statusTracker().getJobIdsForGroup(group))


@pytest.mark.spark
def test_a_state_replayed_on_the_driver_plans_in_one_listing_job_and_applies_in_two(spark, tmp_path: Path) -> None:
    """Issue 27's fixed costs: with the log under `driver_state_max_bytes` the Spark engine replays it on the
    driver (no Spark job), the protected paths travel in the listing tasks' closures (one job, no joins), and
    the apply is one re-validation job and one delete job; the plan, the deletes and the rows equal the local
    engine's. Jobs counted by the status tracker (an adaptive shuffle may add its map stage as a job)."""
    from airflow_delta_provider.delta.engines.spark import DistributedFileState, SparkEngine
    from airflow_delta_provider.delta.engines.spark.vacuum import SparkVacuumExecutor

    path = tmp_path / "t"
    _random_table(path, 23)
    now = int(time.time() * 1000) + 1000
    kw: dict = dict(retention_hours=0, enforce_retention_duration=False, clock=lambda: now)
    local = vacuum(str(path), **kw).to_dict()
    engine = SparkEngine(spark, snapshot_partitions=2, driver_state_max_bytes=1 << 30)
    dlog = DeltaLog(str(path), engine=engine)
    snap, replay_jobs = _jobs(spark, "driver-state-replay", dlog.update)
    assert replay_jobs == 0 and not isinstance(snap.state.files, DistributedFileState)
    executor = engine.vacuum_executor(plan_dir=str(tmp_path / "plans"))
    plan, plan_jobs = _jobs(spark, "driver-state-plan", lambda: vacuum(dlog, executor=executor, **kw).to_dict())
    assert _local_only(plan) == local and _read_plan_files(plan["files_uri"]) == local["files"]
    assert 1 <= plan_jobs <= 2, plan_jobs
    before, expected = _files(path), _rows(path)
    done, apply_jobs = _jobs(
        spark, "driver-state-apply", lambda: vacuum(dlog, plan=plan, dry_run=False, executor=executor, **kw).to_dict()
    )
    assert (done["deleted"], done["deleted_bytes"], done["dropped"]) == (local["num_files"], local["bytes"], [])
    assert 2 <= apply_jobs <= 4, apply_jobs
    assert _files(path) == before - {f["path"] for f in local["files"]} and _rows(path) == expected
    assert not isinstance(dlog.update().state.files, DistributedFileState)  # extended on the driver
    # its checkpoint is written on the driver, with every file's statistics; delta-rs reads from it
    from airflow_delta_provider.delta.maintenance.checkpoint import write_checkpoint

    _, checkpoint_jobs = _jobs(spark, "driver-state-checkpoint", lambda: write_checkpoint(dlog))
    assert checkpoint_jobs == 0 and DeltaLog(str(path)).update().log_segment.checkpoint is not None
    assert _rows(path) == expected
    # over the closure limit: the joins of a distributed plan, the same answer
    joined = SparkVacuumExecutor(spark, closure_limit=0)
    _plant_old(path, "p=a/late-stray.parquet")
    assert [f["path"] for f in vacuum(dlog, executor=joined, **kw).to_dict()["files"]] == ["p=a/late-stray.parquet"]


# -- S3: executors list with a delimiter and delete with DeleteObjects, through the store's retries --------
@pytest.fixture(scope="module")
def s3_server():
    pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    from support.s3_server import create_bucket, start_moto_server

    with start_moto_server() as server:
        create_bucket(server, "vacuum")
        yield server


@pytest.mark.spark
def test_s3_table_listed_and_deleted_by_the_executors(spark, s3_server) -> None:
    from support.s3_server import SLOW_DOWN, S3Proxy, boto3_client, deltalake_storage_options, s3_storage_options

    from airflow_delta_provider.delta.engines.spark.vacuum import SparkVacuumExecutor

    uri = f"s3://vacuum/t-{os.urandom(4).hex()}"
    dl_opts = deltalake_storage_options(s3_server)
    write_deltalake(uri, _data(3, "a"), partition_by=["p"], storage_options=dl_opts)
    write_deltalake(uri, _data(4, "b"), partition_by=["p"], mode="append", storage_options=dl_opts)
    write_deltalake(uri, _data(2, "a"), partition_by=["p"], mode="overwrite", storage_options=dl_opts)
    client, key = boto3_client(s3_server), uri.split("/", 3)[3]
    for stray in ("stray.parquet", "p=a/stray.parquet", "zz/deep/stray.bin", "_delta_log/_stray", "_tmp/x"):
        client.put_object(Bucket="vacuum", Key=f"{key}/{stray}", Body=b"xy")
    expected = DeltaTable(uri, storage_options=dl_opts).to_pyarrow_table().sort_by("id")
    now = int(time.time() * 1000) + 8 * 86_400_000  # eight days later: today's files and tombstones are old
    local = vacuum(uri, storage_options=s3_storage_options(s3_server), clock=lambda: now).to_dict()
    assert {"stray.parquet", "p=a/stray.parquet", "zz/deep/stray.bin"} <= {f["path"] for f in local["files"]}

    with S3Proxy(s3_server.endpoint) as proxy:
        opts = s3_storage_options(s3_server, proxy.endpoint)
        executor = SparkVacuumExecutor(spark, storage_options=opts)
        plan = vacuum(uri, storage_options=opts, executor=executor, clock=lambda: now).to_dict()
        assert plan == local
        assert any(r.is_list and r.query.get("delimiter") == "/" for r in proxy.snapshot())  # the root, one level
        deletes = iter(range(1, 1_000))
        # the first DeleteObjects is throttled: the executor's store retries it
        proxy.inject(lambda _i, seen: SLOW_DOWN if seen.is_delete_objects and next(deletes) == 1 else None)
        result = vacuum(uri, storage_options=opts, executor=executor, plan=plan, dry_run=False, clock=lambda: now)
        requests = [r for r in proxy.snapshot() if r.is_delete_objects]
    assert result.deleted == local["num_files"] and result.deleted_bytes == local["bytes"] and result.directories == 0
    assert requests[0].injected and 2 <= len(requests) <= executor.parallelism + 1  # one per task, one retried
    keys = {o["Key"][len(key) + 1 :] for o in client.list_objects_v2(Bucket="vacuum", Prefix=key + "/")["Contents"]}
    assert not keys & {f["path"] for f in local["files"]} and {"_delta_log/_stray", "_tmp/x"} <= keys
    assert DeltaTable(uri, storage_options=dl_opts).to_pyarrow_table().sort_by("id") == expected


# -- the job through the real spark-submit: local[2] and a standalone cluster ------------------------------
#: Result keys that say how the job ran, not what it planned or deleted.
VOLATILE = {"engine", "timings", "duration_s", "spark_app_id", "status", "action", *SPARK_ONLY}


def _vacuum_job(master: str, path: Path, out: Path, now: int, py_files: str, conf=None, **options: Any) -> dict:
    from support.spark_cluster import spark_submit

    from airflow_delta_provider.commands.request import Request
    from airflow_delta_provider.jobs.runner import job_argv

    request = Request.make(
        table=str(path), action="vacuum", engine="spark", now_ms=now, snapshot_partitions=2,
        retention_hours=0, enforce_retention_duration=False, **options,
    )  # fmt: skip
    proc = spark_submit(master, job_argv(request, str(out)), py_files=py_files, conf=conf)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["status"] == "success" and result["engine"] == "spark", result
    return result


@pytest.fixture(scope="module")
def py_files(tmp_path_factory: pytest.TempPathFactory) -> str:
    from airflow_delta_provider.jobs import build_py_files_zip

    return build_py_files_zip(tmp_path_factory.mktemp("pyfiles"))


@pytest.mark.spark
def test_spark_submit_local_plans_then_applies_as_the_local_engine(tmp_path: Path, py_files: str) -> None:
    path = tmp_path / "t"
    _random_table(path, 21)
    now = int(time.time() * 1000) + 1000
    kw: dict = dict(retention_hours=0, enforce_retention_duration=False, clock=lambda: now)
    local = vacuum(str(path), **kw).to_dict()
    plan = _vacuum_job("local[2]", path, tmp_path / "plan.json", now, py_files)
    assert {k: v for k, v in plan.items() if k not in VOLATILE} == {**local, "dry_run": True}
    assert _read_plan_files(plan["files_uri"]) == local["files"]  # the executors wrote the list beside the result

    before, expected = _files(path), _rows(path)
    plan_file = str(tmp_path / "plan.json")
    done = _vacuum_job("local[2]", path, tmp_path / "apply.json", now, py_files, apply=True, plan_uri=plan_file)
    assert (done["deleted"], done["deleted_bytes"], done["dropped"]) == (local["num_files"], local["bytes"], [])
    assert done["files"] == local["files"] and len(done["audit_versions"]) == 2
    assert _files(path) == before - {f["path"] for f in local["files"]}
    assert _rows(path) == expected


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    import pyarrow
    from support.spark_cluster import bare_python, standalone_cluster

    work = tmp_path_factory.mktemp("standalone")
    python = bare_python(work / "venv")
    # the workers' Python has pyarrow (mapInArrow needs it) and nothing else: the provider comes from --py-files
    only_arrow = work / "only-pyarrow"
    only_arrow.mkdir()
    (only_arrow / "pyarrow").symlink_to(Path(pyarrow.__file__).parent)
    site = next((work / "venv" / "lib").glob("python*/site-packages"))
    (site / "only-pyarrow.pth").write_text(str(only_arrow) + "\n")
    with standalone_cluster(work, python) as c:
        yield c


@pytest.mark.spark
@pytest.mark.slow
def test_standalone_cluster_vacuum_equals_the_local_engine(tmp_path: Path, py_files: str, cluster) -> None:
    path = tmp_path / "t"
    _random_table(path, 22)
    now = int(time.time() * 1000) + 1000
    kw: dict = dict(retention_hours=0, enforce_retention_duration=False, clock=lambda: now)
    local = vacuum(str(path), **kw).to_dict()
    before, expected = _files(path), _rows(path)
    conf = {
        "spark.pyspark.python": cluster.worker_python,
        "spark.pyspark.driver.python": sys.executable,
        "spark.executor.memory": "512m",
        "spark.cores.max": "1",
    }
    done = _vacuum_job(cluster.master_url, path, tmp_path / "out.json", now, py_files, conf=conf, apply=True)
    assert done["spark_app_id"].startswith("app-")  # a standalone application, not local mode
    assert done["files"] == local["files"] and done["partitions"] == local["partitions"]
    assert (done["deleted"], done["deleted_bytes"], done["dropped"]) == (local["num_files"], local["bytes"], [])
    assert _files(path) == before - {f["path"] for f in local["files"]}
    assert _rows(path) == expected


# Spark Connect: the same executor over a Connect server, in tests/delta/test_spark_connect.py.
