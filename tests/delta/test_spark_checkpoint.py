"""Checkpoints written from Spark executors (issue 16): `engines.spark.checkpoint` (real Spark, local[2]).

One SparkSession for the module (the crash test's writer is a separate process and has its own).

* Classic table (randomized, written by delta-rs): a multi-part checkpoint, one part per partition,
  written by the executors; delta-rs then loads the latest version with the same files, protocol,
  metadata and txns as before, our local reader loads it from these parts with the state it replayed
  before, `_last_checkpoint` names the parts, and the schema is the one the local writer writes.
* V2 table (corpus): one sidecar per partition with rows, the top-level file as the local writer's,
  read back the same by delta-rs and by us.
* The driver never holds the file list: `no_driver_file_list` makes the two paths that collect the
  Spark state's files to the driver (`DistributedFileState._collect`, `CheckpointFiles.json_rows`)
  fail the test (a spy; nothing else is replaced).
* kill -9 of the writer once the executors' sidecars exist and the top-level file does not: delta-rs
  and we read the table as before, and the next attempt writes the checkpoint.
* A part changed between the write and the verification is caught by the Spark re-read and every
  file of the attempt deleted.

The clock is at 0 ms (`test_checkpoint_writer.clock`): every tombstone is inside retention.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REPO, copy_table

pytest.importorskip("pyspark")
pytest.importorskip("deltalake")

from test_checkpoint_writer import clock, deltars, fresh, listing, set_aside_checkpoint, state
from test_randomized import RandomTable, Scenario

from airflow_delta_provider.delta import DeltaLog
from airflow_delta_provider.delta.errors import CheckpointMismatchError
from airflow_delta_provider.delta.maintenance.checkpoint import write_checkpoint

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def engine():
    from support.spark_cluster import local_session

    from airflow_delta_provider.delta.engines.spark import SparkEngine

    spark = local_session("delta-checkpoint-tests")  # the suite's shared local[2] session: left running
    return SparkEngine(spark, snapshot_partitions=4)


@pytest.fixture(scope="module")
def random_table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A partitioned delta-rs table after 30 random operations (files, tombstones, txns)."""
    table = RandomTable(tmp_path_factory.mktemp("random") / "table", Scenario(3))
    table.build()
    return table.path


@pytest.fixture
def no_driver_file_list(monkeypatch: pytest.MonkeyPatch) -> None:
    """A spy: collecting the Spark state's file list to the driver fails the test."""
    from airflow_delta_provider.delta.engines.spark import DistributedFileState
    from airflow_delta_provider.delta.engines.spark.frames import CheckpointFiles

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the file list was collected to the driver")

    monkeypatch.setattr(DistributedFileState, "_collect", refuse)
    monkeypatch.setattr(CheckpointFiles, "json_rows", refuse)


def spark_write(table: Path, engine, **kwargs):
    """Checkpoint the latest version of `table` on Spark; (result, the executor that wrote it)."""
    from airflow_delta_provider.delta.engines.spark.checkpoint import SparkCheckpointExecutor

    executor = SparkCheckpointExecutor(engine.spark)
    log = DeltaLog(str(table), clock=clock, engine=engine)
    return write_checkpoint(log, executor=executor, **kwargs), executor


def local_schemas(table: Path, tmp_path: Path, **kwargs) -> dict[str, pa.Schema]:
    """The schemas of the checkpoint the local writer writes for a copy of `table`."""
    copy = tmp_path / "local-copy"
    shutil.copytree(table, copy)
    result = write_checkpoint(DeltaLog(str(copy), clock=clock), **kwargs)
    out = {"top": pq.read_schema(result.path).remove_metadata()}
    if result.sidecars:
        out["sidecar"] = pq.read_schema(result.sidecars[0]).remove_metadata()
    return out


def file_rows(path: str) -> int:
    """Rows of a checkpoint file holding an add or a remove."""
    data = pq.read_table(path, columns=["add", "remove"])
    return data.num_rows - sum(
        1 for a, r in zip(data.column("add").is_null(), data.column("remove").is_null(), strict=True) if a and r
    )


def test_classic_table_gets_a_multipart_checkpoint_from_the_executors(
    engine, random_table: Path, no_driver_file_list: None, tmp_path: Path
) -> None:
    table = tmp_path / "t"
    shutil.copytree(random_table, table)
    before_snap = fresh(table)
    before = state(before_snap)
    app_ids = sorted(before["txns"])
    rs_before = deltars(table, app_ids)
    assert set_aside_checkpoint(table, before_snap)
    total = len(before["files"]) + len(before["tombstones"])
    per = max(1, total // 3)
    assert total >= 20, "the scenario should leave enough files for several parts"

    result, executor = spark_write(table, engine, actions_per_sidecar=per)

    n = math.ceil(total / per)
    version = before["version"]
    assert (result.kind, result.written, result.version, result.sidecars) == ("classic", True, version, ())
    assert (result.num_add_files, result.num_tombstones) == (len(before["files"]), len(before["tombstones"]))
    # one part per partition, every partition with data
    assert len(executor.partition_rows) == n and all(executor.partition_rows) and sum(executor.partition_rows) == total
    assert [Path(p).name for p in result.parts] == [
        f"{version:020d}.checkpoint.{i:010d}.{n:010d}.parquet" for i in range(1, n + 1)
    ]
    assert [file_rows(p) for p in result.parts] == list(executor.partition_rows)
    first = pq.read_table(result.parts[0], columns=["protocol", "metaData"])
    assert first.column("protocol").null_count == first.column("metaData").null_count == first.num_rows - 1
    for later in result.parts[1:]:
        assert (
            pq.read_table(later, columns=["protocol"]).column("protocol").null_count == pq.read_metadata(later).num_rows
        )
    hint = json.loads((table / "_delta_log" / "_last_checkpoint").read_bytes())
    assert (hint["version"], hint["parts"], hint["size"], hint["numOfAddFiles"]) == (
        version,
        n,
        result.num_actions,
        len(before["files"]),
    )
    assert hint["size"] == sum(pq.read_metadata(p).num_rows for p in result.parts)
    # both engines write one schema
    assert {pq.read_schema(p).remove_metadata() for p in result.parts} == {local_schemas(table, tmp_path)["top"]}
    # others read: our reader from these parts, delta-rs
    after = fresh(table)
    assert after.log_segment.checkpoint is not None
    assert after.log_segment.checkpoint.names == tuple(Path(p).name for p in result.parts)
    assert state(after) == before
    assert deltars(table, app_ids) == rs_before


def test_v2_table_gets_one_sidecar_per_partition_with_rows(engine, no_driver_file_list: None, tmp_path: Path) -> None:
    table = copy_table("delta-rs/checkpoint-v2-table", tmp_path)
    before_snap = fresh(table)
    before = state(before_snap)
    app_ids = sorted(before["txns"])
    rs_before = deltars(table, app_ids)
    assert set_aside_checkpoint(table, before_snap)
    total = len(before["files"]) + len(before["tombstones"])

    result, executor = spark_write(table, engine, actions_per_sidecar=3)

    name = Path(result.path).name
    assert result.kind == "v2" and result.written and name.startswith(f"{before['version']:020d}.checkpoint.")
    assert len(name.split(".")) == 4  # UUID-named
    assert len(executor.partition_rows) == math.ceil(total / 3) and sum(executor.partition_rows) == total
    with_rows = [r for r in executor.partition_rows if r]
    assert len(result.sidecars) == len(with_rows)
    assert [file_rows(p) for p in result.sidecars] == with_rows
    top = pq.read_table(result.path)
    assert top.column("checkpointMetadata").to_pylist()[0] == {"version": before["version"], "tags": None}
    assert top.column("add").null_count == top.num_rows and top.column("remove").null_count == top.num_rows
    entries = [r for r in top.column("sidecar").to_pylist() if r]
    assert [e["path"] for e in entries] == [Path(p).name for p in result.sidecars]
    assert [e["sizeInBytes"] for e in entries] == [os.path.getsize(p) for p in result.sidecars]
    assert all(Path(p).parent.name == "_sidecars" for p in result.sidecars)
    hint = json.loads((table / "_delta_log" / "_last_checkpoint").read_bytes())
    assert hint["v2Checkpoint"]["path"] == name and "parts" not in hint
    assert hint["size"] == result.num_actions == top.num_rows + total
    # the same schemas as the local writer's V2 checkpoint with sidecars
    local = local_schemas(table, tmp_path, actions_per_sidecar=3)
    assert pq.read_schema(result.path).remove_metadata() == local["top"]
    assert {pq.read_schema(p).remove_metadata() for p in result.sidecars} == {local["sidecar"]}
    after = fresh(table)
    assert after.log_segment.checkpoint is not None and name in after.log_segment.checkpoint.names
    assert state(after) == before
    assert deltars(table, app_ids) == rs_before


CRASH_WRITER = """
import sys
from pyspark.sql import SparkSession
from airflow_delta_provider.delta import DeltaLog
from airflow_delta_provider.delta.engines.spark import SPARK_CONF, SparkEngine
from airflow_delta_provider.delta.maintenance.checkpoint import write_checkpoint
from airflow_delta_provider.delta.storage import LocalLogStore
from support.faults import KillingStore
builder = SparkSession.builder.master("local[1]").appName("delta-checkpoint-crash")
for key, value in {**SPARK_CONF, "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "1"}.items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
store = KillingStore(LocalLogStore(), "executor_files_written")
log = DeltaLog(sys.argv[1], store=store, engine=SparkEngine(spark, snapshot_partitions=2))
write_checkpoint(log, actions_per_sidecar=int(sys.argv[2]))
"""


@pytest.mark.slow
def test_writer_killed_after_the_executors_wrote_sidecars_leaves_a_readable_table(engine, tmp_path: Path) -> None:
    table = copy_table("delta-rs/checkpoint-v2-table", tmp_path)
    before = state(fresh(table))
    app_ids = sorted(before["txns"])
    rs_before = deltars(table, app_ids)
    files = listing(table)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")]),
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    proc = subprocess.run(
        [sys.executable, "-c", CRASH_WRITER, str(table), "3"], env=env, capture_output=True, timeout=600
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-3000:]
    new = sorted(set(listing(table)) - set(files))
    assert new and all(n.startswith("_delta_log/_sidecars/") for n in new), new  # sidecars, no top-level file
    assert state(fresh(table)) == before
    assert deltars(table, app_ids) == rs_before
    # the next attempt writes the checkpoint (the dead attempt's sidecars stay unreferenced, for log cleanup)
    result, _ = spark_write(table, engine, actions_per_sidecar=3)
    assert result.written and not set(result.sidecars) & {str(table / n) for n in new}
    after = fresh(table)
    assert Path(result.path).name in after.log_segment.checkpoint.names
    assert state(after) == before and deltars(table, app_ids) == rs_before


def test_a_part_changed_before_verification_is_caught_and_the_attempt_removed(
    engine, random_table: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Fault injection (nothing in a real run changes a part on cue): once the executors' parts exist
    and are counted, one add of the last part gets another size, still valid Parquet. The Spark re-read
    must see it, and every file of the attempt goes."""
    from airflow_delta_provider.delta.engines.spark.checkpoint import SparkCheckpointExecutor

    table = tmp_path / "t"
    shutil.copytree(random_table, table)
    assert set_aside_checkpoint(table, fresh(table))
    files = listing(table)
    hint_path = table / "_delta_log" / "_last_checkpoint"
    hint = hint_path.read_bytes() if hint_path.exists() else None

    check_counts = SparkCheckpointExecutor._check_counts

    def tamper(*args: object) -> None:  # `_check_counts` is a staticmethod
        check_counts(*args)
        parts = sorted((table / "_delta_log").glob("*.checkpoint.*.parquet"))
        # a part holding an add (not every part does: the adds are spread by path hash, and one part holds
        # the protocol, metadata and txn rows)
        with_adds = [
            p
            for p in parts
            if pq.read_table(p, columns=["add"]).column("add").null_count < pq.ParquetFile(p).metadata.num_rows
        ]
        assert with_adds, f"the attempt wrote no part holding an add: {[p.name for p in parts]}"
        part = with_adds[-1]
        data = pq.read_table(part)
        add = data.column("add").combine_chunks()
        sizes = add.field("size").to_pylist()
        row = next(i for i, valid in enumerate(add.is_valid().to_pylist()) if valid)
        sizes[row] += 1
        children = [pa.array(sizes, pa.int64()) if f.name == "size" else add.field(f.name) for f in add.type]
        changed = pa.StructArray.from_arrays(children, fields=list(add.type), mask=add.is_null())
        pq.write_table(data.set_column(data.schema.get_field_index("add"), "add", changed), part)

    monkeypatch.setattr(SparkCheckpointExecutor, "_check_counts", staticmethod(tamper))
    before = state(fresh(table))
    total = len(before["files"]) + len(before["tombstones"])
    with pytest.raises(CheckpointMismatchError, match="add rows") as info:
        spark_write(table, engine, actions_per_sidecar=max(1, total // 2))  # two or three parts
    assert info.value.version == before["version"] and str(table) in str(info.value)
    assert listing(table) == files
    assert (hint_path.read_bytes() if hint_path.exists() else None) == hint


def test_a_table_without_file_actions_gets_its_checkpoint(engine, tmp_path: Path) -> None:
    """A state with no add and no remove (corpus `delta-rs/issue-2152`: version 0, metadata only): Spark
    runs no write task (AQE drops the empty shuffle), so the driver writes the one file; found by the corpus
    parity, where it was a `CheckpointMismatchError` ("0 of 1 partitions reported")."""
    table = copy_table("delta-rs/issue-2152", tmp_path)
    result = write_checkpoint(DeltaLog(str(table), clock=clock, engine=engine))
    assert (result.version, result.kind, result.num_add_files, result.num_tombstones) == (0, "classic", 0, 0)
    assert result.written and result.path.endswith("00000000000000000000.checkpoint.parquet")
    fresh_log = DeltaLog(str(table))
    assert fresh_log.log_segment().checkpoint.version == 0 and fresh_log.update().num_files == 0
    seen = deltars(table, [])
    assert (seen["version"], seen["files"]) == (0, {})


def test_a_multi_part_checkpoint_of_the_version_does_not_stop_the_single_file(engine, tmp_path: Path) -> None:
    """As the local writer: a complete 2-part checkpoint of the version (corpus `delta-golden/multi-part-checkpoint`)
    does not count as this write's file; the classic single file is written beside it (found by the corpus parity:
    the Spark writer reported `written=False`)."""
    table = copy_table("delta-golden/multi-part-checkpoint", tmp_path)
    result = write_checkpoint(DeltaLog(str(table), clock=clock, engine=engine))
    assert (result.version, result.kind, result.num_add_files, result.written) == (1, "classic", 10, True)
    assert result.path.endswith("00000000000000000001.checkpoint.parquet") and result.parts == ()
    assert len(list(DeltaLog(str(table)).update().all_files())) == 10
