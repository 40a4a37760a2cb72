"""OPTIMIZE ZORDER BY on the Spark engine (real Spark, local[2]): the state replayed on Spark, one executor
task per partition, the commit on the driver. The z-order is deterministic, so Spark and the local engine
write the same files: the same rows in the same order per file in each partition, the same min/max stats;
delta-rs reads the rows the table held. A partition over a task's memory limit is sorted through spill files
on its executor into the same files; keys over it are refused naming the Spark remedies, nothing written; an
unreadable input is raised on the driver as the typed error."""

from __future__ import annotations

import json
import random
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

deltalake = pytest.importorskip("deltalake")
pytest.importorskip("pyspark")
from deltalake import DeltaTable, write_deltalake  # noqa: E402

from airflow_delta_provider.delta.delta_log import DeltaLog  # noqa: E402
from airflow_delta_provider.delta.errors import LogCorruptedError, ResourceLimitError  # noqa: E402
from airflow_delta_provider.delta.maintenance.optimize import optimize  # noqa: E402
from airflow_delta_provider.delta.protocol.actions import decode_path  # noqa: E402

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark():
    """The suite's shared local[2] session (`support.spark_cluster.local_session`; left running for the
    next module's `getOrCreate`)."""
    from support.spark_cluster import local_session

    return local_session("spark-executor-tests")


def spark_log(path: Path, spark: Any, **engine: Any) -> DeltaLog:
    from airflow_delta_provider.delta.engines.spark import SparkEngine

    return DeltaLog(str(path), engine=SparkEngine(spark, snapshot_partitions=2, **engine))


def make_table(path: Path, seed: int = 3) -> Path:
    rng = random.Random(seed)
    for _ in range(5):
        n = 60
        write_deltalake(
            str(path),
            pa.table(
                {
                    "x": pa.array([rng.randrange(10**9) for _ in range(n)], pa.int64()),
                    "y": pa.array(
                        [rng.choice([None, *(f"s{rng.randrange(500)}" for _ in range(3))]) for _ in range(n)]
                    ),
                    "p": pa.array([rng.choice(["a", "b", "b"]) for _ in range(n)]),
                    "pad": pa.array([rng.randbytes(100).hex() for _ in range(n)]),  # keys fit where rows do not
                }
            ),
            mode="append",
            partition_by=["p"],
        )
    return path


def file_set(path: Path) -> Counter[str]:
    """Each active file as (partition, its rows in order, its min/max stats), a multiset."""
    out: Counter[str] = Counter()
    for f in DeltaLog(str(path)).update().all_files():
        stats = f.parsed_stats() or {}
        rows = pq.read_table(path / decode_path(f.path)).to_pylist()
        key = [f.partition_values, rows, stats.get("minValues"), stats.get("maxValues"), stats.get("numRecords")]
        out[json.dumps(key, sort_keys=True)] += 1
    return out


def deltars_rows(path: Path) -> Counter[str]:
    return Counter(json.dumps(r, sort_keys=True) for r in DeltaTable(str(path)).to_pyarrow_table().to_pylist())


def test_spark_zorder_writes_the_local_engines_files(tmp_path: Path, spark: Any) -> None:
    local = make_table(tmp_path / "local")
    dist = tmp_path / "spark"
    shutil.copytree(local, dist)
    before = deltars_rows(local)
    a = optimize(str(local), zorder_by=["x", "y"], target_size=8_000)
    largest = max(b.num_bytes for b in a.plan.bins)
    # under 2x its files' bytes, the largest partition is sorted through spill files on its executor
    # (`local_zorder.zorder_bin`); its z-order keys alone fit
    limit = 2 * largest - 1
    b = optimize(spark_log(dist, spark, task_memory_bytes=limit), zorder_by=["x", "y"], target_size=8_000)
    assert len(a.plan.bins) == 2 and min(x.num_bytes for x in a.plan.bins) * 2 <= limit
    assert len(a.added) > 2 and len(a.added) == len(b.added) and len(a.removed) == len(b.removed)
    assert file_set(local) == file_set(dist)
    assert deltars_rows(dist) == before
    history = DeltaTable(str(dist)).history(1)[0]
    assert history["operation"] == "OPTIMIZE" and json.loads(history["operationParameters"]["zOrderBy"]) == ["x", "y"]


def test_an_unreadable_input_is_the_typed_error_on_the_driver(tmp_path: Path, spark: Any) -> None:
    path = make_table(tmp_path / "t", seed=4)
    victim = sorted(f.path for f in DeltaLog(str(path)).update().all_files())[0]
    (path / decode_path(victim)).write_bytes(b"not parquet")
    version = DeltaTable(str(path)).version()
    with pytest.raises(LogCorruptedError) as info:
        optimize(spark_log(path, spark), zorder_by=["x"])
    assert info.value.file == victim
    assert DeltaTable(str(path)).version() == version


def test_keys_over_a_tasks_memory_limit_are_refused_naming_the_spark_remedies(tmp_path: Path, spark: Any) -> None:
    path = make_table(tmp_path / "t", seed=5)
    files, version = sorted(p.name for p in path.rglob("*.parquet")), DeltaTable(str(path)).version()
    with pytest.raises(ResourceLimitError, match=r"Spark task's memory limit.*task_memory_bytes") as info:
        optimize(spark_log(path, spark, task_memory_bytes=1024), zorder_by=["x", "y"])
    assert info.value.table is not None and info.value.file is not None
    assert sorted(p.name for p in path.rglob("*.parquet")) == files and DeltaTable(str(path)).version() == version
