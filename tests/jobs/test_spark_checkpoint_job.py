"""`--action checkpoint --engine spark` through the real spark-submit (local[2]): the command layer hands the
write to the executors (`SparkCheckpointExecutor`); delta-rs reads the table at the checkpoint's version
with the same files."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

deltalake = pytest.importorskip("deltalake")
pytest.importorskip("pyspark")
import pyarrow as pa  # noqa: E402
from deltalake import DeltaTable, write_deltalake  # noqa: E402
from support.spark_cluster import spark_submit  # noqa: E402

from airflow_delta_provider.commands.request import Request  # noqa: E402
from airflow_delta_provider.delta import DeltaLog  # noqa: E402
from airflow_delta_provider.jobs import build_py_files_zip  # noqa: E402
from airflow_delta_provider.jobs.runner import job_argv  # noqa: E402

pytestmark = pytest.mark.spark


def test_spark_submit_checkpoint_on_the_executors(tmp_path: Path) -> None:
    table = tmp_path / "t"
    rng = random.Random(5)
    for _ in range(5):
        ids = [rng.randrange(1000) for _ in range(20)]
        batch = pa.table({"id": ids, "p": [rng.choice("abc") for _ in ids]})
        write_deltalake(str(table), batch, mode="append", partition_by=["p"])
    before = sorted(DeltaTable(str(table)).file_uris())
    out = tmp_path / "result.json"
    proc = spark_submit(
        "local[2]",
        # auto_threshold_mb=0: the state replayed on the cluster (a small log is otherwise replayed on the driver)
        job_argv(Request.make(table=str(table), action="checkpoint", engine="spark", auto_threshold_mb=0), str(out)),
        py_files=build_py_files_zip(tmp_path / "pyfiles"),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["status"] == "success" and result["engine"] == "spark", result
    assert result["written"] and result["version"] == 4
    log = DeltaLog(str(table))
    assert log.update().log_segment.checkpoint is not None  # our reader starts from the new checkpoint
    assert sorted(DeltaTable(str(table)).file_uris()) == before
