"""The statistics backfill on the Spark engine (real Spark, local[2]): each file's stats recomputed on the
executors (`local_stats.recompute_stats` in `mapInArrow` tasks) equal the local engine's, on corpus tables
with deletion vectors, INT96 timestamps, column mapping and partitions, and through the operation on a
delta-rs table whose stats were stripped (delta-rs then reads the same rows); a missing data file is the
typed error on the driver with nothing committed."""

from __future__ import annotations

import dataclasses
import json
import random
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

deltalake = pytest.importorskip("deltalake")
pytest.importorskip("pyspark")
from conftest import CORPUS  # noqa: E402
from deltalake import DeltaTable, write_deltalake  # noqa: E402

from airflow_delta_provider import commands  # noqa: E402
from airflow_delta_provider.commands.request import Request, StatsBackfillOptions  # noqa: E402
from airflow_delta_provider.delta.delta_log import DeltaLog  # noqa: E402
from airflow_delta_provider.delta.engines.local_stats import local_stats_recomputer  # noqa: E402
from airflow_delta_provider.delta.errors import LogCorruptedError  # noqa: E402
from airflow_delta_provider.delta.maintenance.optimize import table_layout  # noqa: E402
from airflow_delta_provider.delta.maintenance.stats_backfill import backfill_stats  # noqa: E402
from airflow_delta_provider.delta.protocol.actions import decode_path  # noqa: E402

pytestmark = pytest.mark.spark

#: Deletion vectors (inline and stored), INT96, column mapping, partitions.
CORPUS_TABLES = [
    "delta-rs/table_with_deletion_logs",
    "delta-golden/dv-partitioned-with-checkpoint",
    "delta-golden/kernel-timestamp-INT96",
    "delta-golden/data-skipping-basic-stats-all-types-columnmapping-name",
]


@pytest.fixture(scope="module")
def spark():
    """The suite's shared local[2] session (left running for the next module's `getOrCreate`)."""
    from support.spark_cluster import local_session

    return local_session("spark-executor-tests")


def spark_log(path: Path, spark: Any) -> DeltaLog:
    from airflow_delta_provider.delta.engines.spark import SparkEngine

    return DeltaLog(str(path), engine=SparkEngine(spark, snapshot_partitions=2))


def strip_stats(path: Path) -> None:
    """Every active file re-added without stats (`dataChange=false`) through our transaction."""
    snapshot = DeltaLog(str(path)).update()
    txn = snapshot.transaction("WRITE", {"mode": "Append"})
    txn.add(*[dataclasses.replace(f, stats=None, data_change=False) for f in snapshot.all_files()])
    txn.commit()


def make_table(path: Path) -> Path:
    rng = random.Random(8)
    for i in range(6):
        data = {
            "id": pa.array([rng.randrange(10**6) for _ in range(40)], pa.int64()),
            "name": pa.array([rng.choice([None, f"n{i}-{rng.randrange(99)}"]) for _ in range(40)]),
            "part": pa.array([rng.choice(["a", "b"]) for _ in range(40)]),
        }
        write_deltalake(str(path), pa.table(data), mode="append", partition_by=["part"])
    return path


def stats_by_path(path: Path) -> dict[str, Any]:
    return {f.path: f.parsed_stats() for f in DeltaLog(str(path)).update().all_files()}


@pytest.mark.skipif(not CORPUS.exists(), reason="reference corpus not found")
def test_spark_recomputes_the_local_engines_stats_on_corpus_tables(tmp_path: Path, spark: Any) -> None:
    from airflow_delta_provider.delta.engines.spark.stats import spark_stats_recomputer

    recompute = spark_stats_recomputer(spark, {}, files_per_task=2)  # several files per task, several tasks
    checked = 0
    for name in CORPUS_TABLES:
        snapshot = DeltaLog(str(CORPUS / name)).update()
        layout, files = table_layout(snapshot, snapshot.table), list(snapshot.all_files())
        local = local_stats_recomputer()(layout, files, store=snapshot.store)
        assert recompute(layout, files, store=snapshot.store) == local, name
        assert all(json.loads(s)["numRecords"] >= 0 for s in local)
        checked += len(files)
    assert checked > len(CORPUS_TABLES)


def test_backfill_on_spark_equals_local(tmp_path: Path, spark: Any) -> None:
    local = make_table(tmp_path / "local")
    written = stats_by_path(local)
    strip_stats(local)
    dist = tmp_path / "spark"
    shutil.copytree(local, dist)
    a = backfill_stats(str(local), dry_run=False)
    # the Spark side through the command layer, as `deltalog stats-backfill --engine spark --apply` runs it
    options = StatsBackfillOptions(apply=True)
    request = Request(str(dist), "stats_backfill", options, engine="spark", snapshot_partitions=2)
    outcome = commands.run(request, spark_factory=lambda _options: spark)
    assert outcome.engine == "spark" and outcome.body["version"] == a.version
    assert len(a.committed) == outcome.body["metrics"]["numFilesRecomputed"] == len(written) == 12
    assert stats_by_path(local) == stats_by_path(dist) == written  # what delta-rs wrote, back again
    rows = [
        Counter(json.dumps(r, sort_keys=True) for r in DeltaTable(str(p)).to_pyarrow_table().to_pylist())
        for p in (local, dist)
    ]
    assert rows[0] == rows[1] and sum(rows[0].values()) == 240
    assert DeltaTable(str(dist)).history(1)[0]["operation"] == "COMPUTE STATS"


def test_a_missing_file_is_the_typed_error_on_the_driver(tmp_path: Path, spark: Any) -> None:
    path = make_table(tmp_path / "t")
    strip_stats(path)
    victim = sorted(stats_by_path(path))[0]
    (path / decode_path(victim)).unlink()
    version = DeltaTable(str(path)).version()
    with pytest.raises(LogCorruptedError, match="missing") as info:
        backfill_stats(spark_log(path, spark), dry_run=False)
    assert info.value.file == victim and DeltaTable(str(path)).version() == version
