"""OPTIMIZE on Spark: bins rewritten on executors (`mapInArrow`), the commit on the driver. Same rows and the
same number of files as the local engine, in process on local[2], through the real spark-submit, and on a
real standalone master and worker (the session's; the application runs its executors on this venv's Python:
`mapInArrow` needs pyarrow there)."""

from __future__ import annotations

import json
import random
import shutil
import sys
from collections import Counter
from pathlib import Path

import pytest

deltalake = pytest.importorskip("deltalake")
pytest.importorskip("pyspark")
from deltalake import DeltaTable, write_deltalake  # noqa: E402
from support.spark_cluster import spark_submit  # noqa: E402

from airflow_delta_provider.commands.request import Request  # noqa: E402
from airflow_delta_provider.delta.engines.spark.optimize import spark_bin_rewriter  # noqa: E402
from airflow_delta_provider.delta.maintenance.optimize import optimize  # noqa: E402
from airflow_delta_provider.jobs import build_py_files_zip  # noqa: E402
from airflow_delta_provider.jobs.runner import job_argv  # noqa: E402

pytestmark = pytest.mark.spark


def _table(path: Path, seed: int = 1) -> Path:
    import pyarrow as pa

    rng = random.Random(seed)
    for _ in range(6):
        n = 30
        batch = pa.table(
            {
                "id": [rng.randrange(10**6) for _ in range(n)],
                "p": [rng.choice(["a", "b", None]) for _ in range(n)],
                "s": [rng.choice(["x", None, "yy" * rng.randrange(30)]) for _ in range(n)],
            }
        )
        write_deltalake(str(path), batch, mode="append", partition_by=["p"])
    return path


def _rows(path: Path) -> Counter[str]:
    t = DeltaTable(str(path)).to_pyarrow_table()
    return Counter(json.dumps(r, sort_keys=True) for r in t.to_pylist())


def _per_partition(path: Path) -> Counter[str]:
    import pyarrow as pa

    adds = pa.table(DeltaTable(str(path)).get_add_actions(flatten=True))
    return Counter(str(v) for v in adds.column("partition.p").to_pylist())


@pytest.fixture(scope="module")
def spark():
    """The suite's shared local[2] session (the engine's settings: `support.spark_cluster.local_session`)."""
    from support.spark_cluster import local_session

    return local_session("optimize-tests")


def test_local2_executors_match_the_local_engine(tmp_path: Path, spark) -> None:
    local = _table(tmp_path / "local")
    dist = tmp_path / "spark"
    shutil.copytree(local, dist)
    rows = _rows(local)
    a = optimize(str(local))
    b = optimize(str(dist), executor=spark_bin_rewriter(spark, {}))
    assert a.plan.summary() | {"table": None} == b.plan.summary() | {"table": None}
    assert _rows(local) == _rows(dist) == rows
    assert _per_partition(local) == _per_partition(dist)
    assert len(b.added) == len(a.added) == len(b.plan.bins) > 0
    assert DeltaTable(str(dist)).history(1)[0]["operation"] == "OPTIMIZE"


def test_local2_executors_roll_a_bin_over_at_the_target_as_the_local_engine(tmp_path: Path, spark) -> None:
    """A bin whose rows encode larger than the target (inputs zstd-compressed, ours snappy) is written as
    several files on the executors too, the same count and rows as the local engine's; delta-rs reads both."""
    import pyarrow as pa
    from deltalake import WriterProperties

    rng = random.Random(5)
    words = "delta lake table file row group parquet commit version snapshot log stats column bin".split()
    local = tmp_path / "local"
    zstd = WriterProperties(compression="ZSTD", compression_level=9)
    for k in range(8):
        text = [" ".join(rng.choice(words) for _ in range(20)) + f" {k * 1000 + i}" for i in range(1000)]
        batch = pa.table({"id": list(range(k * 1000, k * 1000 + 1000)), "text": text})
        write_deltalake(str(local), batch, mode="append", writer_properties=zstd)
    dist = tmp_path / "spark"
    shutil.copytree(local, dist)
    rows = _rows(local)
    target = sum(pa.table(DeltaTable(str(local)).get_add_actions(flatten=True)).column("size_bytes").to_pylist())
    a = optimize(str(local), target_size=target)
    b = optimize(str(dist), target_size=target, executor=spark_bin_rewriter(spark, {}))
    assert len(a.plan.bins) == len(b.plan.bins) == 1 and len(b.removed) == 8
    assert len(b.added) == len(a.added) >= 2, ([f.size for f in a.added], [f.size for f in b.added])
    assert sum(json.loads(f.stats)["numRecords"] for f in b.added) == 8000
    assert _rows(local) == _rows(dist) == rows


@pytest.fixture(scope="module")
def py_files(tmp_path_factory: pytest.TempPathFactory) -> str:
    return build_py_files_zip(tmp_path_factory.mktemp("pyfiles"))


def _job_args(table: Path, out: Path) -> list[str]:
    return job_argv(Request.make(table=str(table), action="optimize", engine="spark", apply=True), str(out))


def test_spark_submit_local2(tmp_path: Path, py_files: str) -> None:
    table = _table(tmp_path / "t", 2)
    rows, v = _rows(table), DeltaTable(str(table)).version()
    out = tmp_path / "result.json"
    proc = spark_submit("local[2]", _job_args(table, out), py_files=py_files)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["status"] == "success" and result["engine"] == "spark", result
    assert result["version"] == v + 1 and result["num_files_added"] == 3
    assert _rows(table) == rows and len(DeltaTable(str(table)).file_uris()) == 3


@pytest.mark.slow
def test_standalone_cluster(tmp_path: Path, py_files: str, spark_standalone) -> None:
    table = _table(tmp_path / "t", 3)
    reference = tmp_path / "reference"
    shutil.copytree(table, reference)
    optimize(str(reference))
    out = tmp_path / "result.json"
    proc = spark_submit(
        spark_standalone.master_url,  # the session's cluster: its worker's default Python is a bare venv,
        _job_args(table, out),
        py_files=py_files,
        conf={
            "spark.pyspark.python": sys.executable,  # so mapInArrow works only with this application's choice
            "spark.pyspark.driver.python": sys.executable,
            "spark.executor.memory": "512m",
            "spark.cores.max": "1",
        },
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["status"] == "success" and result["spark_app_id"].startswith("app-")
    assert _rows(table) == _rows(reference)
    assert _per_partition(table) == _per_partition(reference)
