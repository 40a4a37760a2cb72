"""Repair (FSCK) on the Spark engine (real Spark, local[2]): the HEAD checks run on the executors (over the
state's files where they are, or chunks of files the driver holds; each task the local engine's bounded
loop `engines.missing_files`) and find exactly what the local engine and delta-rs find, in order; a deleted
deletion-vector file counts when asked; applied through the Spark engine, delta-rs reads the rows left and
finds nothing more to repair."""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

deltalake = pytest.importorskip("deltalake")
pytest.importorskip("pyspark")
from conftest import CORPUS, copy_table  # noqa: E402
from deltalake import DeltaTable, write_deltalake  # noqa: E402

from airflow_delta_provider import commands  # noqa: E402
from airflow_delta_provider.commands.request import RepairOptions, Request  # noqa: E402
from airflow_delta_provider.delta.delta_log import DeltaLog  # noqa: E402
from airflow_delta_provider.delta.engines import missing_files  # noqa: E402
from airflow_delta_provider.delta.maintenance.repair import repair  # noqa: E402
from airflow_delta_provider.delta.maintenance.restore import restore  # noqa: E402
from airflow_delta_provider.delta.protocol.actions import decode_path  # noqa: E402

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark():
    """The suite's shared local[2] session (left running for the next module's `getOrCreate`)."""
    from support.spark_cluster import local_session

    return local_session("spark-executor-tests")


def make_table(path: Path) -> Path:
    rng = random.Random(11)
    for i in range(8):
        if i == 5:  # a checkpoint: the state's files come from it and from the commits after it
            DeltaTable(str(path)).create_checkpoint()
        n = rng.randint(1, 10)
        data = {
            "id": pa.array([rng.randrange(10**6) for _ in range(n)], pa.int64()),
            "part": pa.array([rng.choice(["a", "b c", "d%e", None]) for _ in range(n)]),
        }
        write_deltalake(str(path), pa.table(data), mode="append", partition_by=["part"])
    return path


def test_repair_on_spark_equals_local_and_delta_rs(tmp_path: Path, spark: Any) -> None:
    from airflow_delta_provider.delta.engines.spark import SparkEngine

    ours, theirs = make_table(tmp_path / "ours"), tmp_path / "theirs"
    files = sorted(f.path for f in DeltaLog(str(ours)).update().all_files())
    gone = sorted(random.Random(2).sample(files, 3))
    for f in gone:
        (ours / decode_path(f)).unlink()
    shutil.copytree(ours, theirs)
    dlog = DeltaLog(str(ours), engine=SparkEngine(spark, snapshot_partitions=2))
    version = DeltaTable(str(ours)).version()

    dry = repair(dlog)
    local = repair(str(theirs))
    assert dry.files_removed == gone == local.files_removed  # by path
    assert dry.to_dict() | {"table": None} == local.to_dict() | {"table": None}  # rows lost, from the stats
    assert dlog.update().state.files._adds is None, "the active files stayed on the cluster"
    assert sorted(decode_path(p) for p in gone) == sorted(DeltaTable(str(theirs)).repair(dry_run=True)["files_removed"])
    assert DeltaTable(str(ours)).version() == version

    # applied through the command layer, as `deltalog repair --engine spark --apply` runs it
    request = Request(str(ours), "repair", RepairOptions(apply=True), engine="spark", snapshot_partitions=2)
    outcome = commands.run(request, spark_factory=lambda _options: spark)
    DeltaTable(str(theirs)).repair(dry_run=False)
    assert outcome.engine == "spark" and outcome.body["files_removed"] == gone
    assert outcome.body["version"] == version + 1 == DeltaTable(str(ours)).version()
    assert DeltaTable(str(ours)).repair(dry_run=True)["files_removed"] == []
    assert sorted(DeltaTable(str(ours)).file_uris()) != [] and len(DeltaTable(str(ours)).file_uris()) == len(files) - 3
    rows = [sorted(DeltaTable(str(p)).to_pyarrow_table().column("id").to_pylist()) for p in (ours, theirs)]
    assert rows[0] == rows[1]


@pytest.mark.skipif(not CORPUS.exists(), reason="reference corpus not found")
def test_file_checker_chunks_equal_the_local_loop_with_deletion_vectors(tmp_path: Path, spark: Any) -> None:
    from airflow_delta_provider.delta.engines.spark.repair import SparkFileChecker

    check = SparkFileChecker(spark, {}, max_workers=2, files_per_task=2).missing  # several tasks of two files
    path = make_table(tmp_path / "t")
    snap = DeltaLog(str(path)).update()
    files = sorted(snap.all_files(), key=lambda f: f.path)
    gone = [files[i] for i in (0, 3, 4, len(files) - 1)]
    for f in gone:
        (path / decode_path(f.path)).unlink()
    found = check(snap.store, snap.table, files, table=snap.table)
    assert found == missing_files(snap.store, snap.table, files, table=snap.table) == gone  # in order
    assert check(snap.store, snap.table, []) == []

    dv_table = copy_table("delta-rs/table_with_deletion_logs", tmp_path)
    snap = DeltaLog(str(dv_table)).update()
    (with_dv,) = snap.all_files()
    assert with_dv.deletion_vector is not None and with_dv.deletion_vector.storage_type == "u"
    for dv in dv_table.glob("deletion_vector_*.bin"):
        dv.unlink()
    for dvs, expected in ((False, []), (True, [with_dv])):
        local = missing_files(snap.store, snap.table, [with_dv], deletion_vectors=dvs, table=snap.table)
        assert check(snap.store, snap.table, [with_dv], deletion_vectors=dvs, table=snap.table) == local == expected


def test_lake_scan_as_one_spark_job_equals_the_local_scan(tmp_path: Path, spark: Any) -> None:
    """`deltalog lake scan --engine spark`: one Spark task per table (`engines.spark.lake.scan_tables`) gives
    the local scan's healths and error entries; here beside repair for want of a Spark lake module of its own."""
    from airflow_delta_provider.commands.request import LakeScanOptions
    from airflow_delta_provider.delta.lake import scan

    now = 1_900_000_000_000
    tables = [str(make_table(tmp_path / "lake" / name)) for name in ("a", "b")]
    (tmp_path / "lake" / "c" / "_delta_log").mkdir(parents=True)  # a folder that looks like a table, with no log

    def run(engine: str) -> Any:
        request = Request(str(tmp_path / "lake"), "lake_scan", LakeScanOptions(), engine=engine, now_ms=now)
        return commands.run(request, spark_factory=lambda _options: spark)

    ours, local = run("spark"), run("local")
    assert ours.engine == "spark" and local.engine == "local"
    assert ours.body == local.body and len(ours.body["tables"]) == 2 and len(ours.body["errors"]) == 1
    assert [h.to_dict() for h in scan(tables, now_ms=now).healths] == ours.body["tables"]


def test_restore_on_spark_checks_files_on_the_executors_and_refuses_like_local(tmp_path: Path, spark: Any) -> None:
    """RESTORE through the command layer on Spark: the files to add back are looked up by the engine's file
    checker; one deleted is refused, naming it, as the local engine does; with allow_partial it is left out."""
    from airflow_delta_provider.commands.request import RestoreOptions
    from airflow_delta_provider.delta.protocol.restore import RestoreMissingFilesError

    path = make_table(tmp_path / "t")
    at_one = DeltaLog(str(path)).snapshot_at(version=1).all_files(with_stats=True)
    first = {f.path: f.parsed_stats()["numRecords"] for f in at_one}
    DeltaTable(str(path)).delete()  # every row gone: restoring version 1 adds its files back
    gone = sorted(first)[0]
    (path / decode_path(gone)).unlink()
    version = DeltaTable(str(path)).version()

    def run(**options: Any) -> Any:
        options = RestoreOptions(**options)
        request = Request(str(path), "restore", options, version=1, engine="spark", snapshot_partitions=2)
        return commands.run(request, spark_factory=lambda _options: spark)

    with pytest.raises(RestoreMissingFilesError) as info:
        run()
    with pytest.raises(RestoreMissingFilesError) as local:
        restore(str(path), version=1)
    assert info.value.missing_files == local.value.missing_files == [gone]
    assert DeltaTable(str(path)).version() == version
    done = run(apply=True, allow_partial=True)
    assert done.engine == "spark" and done.body["version"] == version + 1
    assert [m["path"] if isinstance(m, dict) else m for m in done.body["missing_files"]] == [gone]
    rows = DeltaTable(str(path)).to_pyarrow_table().num_rows  # delta-rs reads the restored table
    assert rows == sum(n for p, n in first.items() if p != gone) > 0


def test_an_executor_that_cannot_see_the_table_is_a_storage_error_not_every_file_missing(
    tmp_path: Path, spark: Any
) -> None:
    """Workers that do not mount a local table would find none of its files: the checker refuses to call them
    missing (RESTORE with allow_partial would leave out files that exist)."""
    from airflow_delta_provider.delta.engines.spark.repair import SparkFileChecker
    from airflow_delta_provider.delta.errors import StorageError

    path = make_table(tmp_path / "t")
    snapshot = DeltaLog(str(path)).update()
    files = list(snapshot.all_files())
    unseen = tmp_path / "not-mounted"  # the same files, at a root whose _delta_log the executors cannot see
    shutil.copytree(path, unseen)
    shutil.rmtree(unseen / "_delta_log")
    checker = SparkFileChecker(spark, {}, files_per_task=3)
    assert checker.missing(snapshot.store, str(path), files) == []
    with pytest.raises(StorageError, match="cannot see the table") as info:
        checker.missing(snapshot.store, str(unseen), files)
    assert info.value.table == str(unseen)
