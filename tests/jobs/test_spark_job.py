"""The bundled job through the real spark-submit: local[2], a real standalone cluster, and failures.

No mocks: spark-submit, the JVM, a standalone master and worker started from the pyspark install.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import CORPUS
from support.spark_cluster import spark_submit

from airflow_delta_provider.commands.request import Request
from airflow_delta_provider.commands.results import snapshot_dict, tombstone_report
from airflow_delta_provider.delta import DeltaLog
from airflow_delta_provider.jobs import build_py_files_zip
from airflow_delta_provider.jobs.runner import job_argv

pytestmark = pytest.mark.spark

TABLE = CORPUS / "delta-golden" / "checkpoint"  # 14 versions, a checkpoint at 10, 1 file, 14 tombstones
PARTITIONED = CORPUS / "delta-rs" / "delta-0.8.0-partitioned"
NOW_MS = 1_700_000_000_000
VOLATILE = {"engine", "timings", "duration_s", "spark_app_id", "status", "action"}


def _stable(result: dict) -> dict:
    return {k: v for k, v in result.items() if k not in VOLATILE}


@pytest.fixture(scope="module")
def py_files(tmp_path_factory: pytest.TempPathFactory) -> str:
    return build_py_files_zip(tmp_path_factory.mktemp("pyfiles"))


def _read(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.mark.skipif(not TABLE.exists(), reason="reference corpus not found")
def test_spark_submit_local_snapshot_and_tombstones(tmp_path: Path, py_files: str) -> None:
    out = tmp_path / "snapshot.json"
    proc = spark_submit(
        "local[2]",
        job_argv(Request.make(table=str(TABLE), action="snapshot", engine="spark", snapshot_partitions=4,
                              now_ms=NOW_MS, auto_threshold_mb=0), str(out)),  # replayed on the cluster
        py_files=py_files,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = _read(out)
    assert result["status"] == "success" and result["engine"] == "spark"
    assert result["spark_app_id"].startswith("local-")
    expected = snapshot_dict(DeltaLog(str(TABLE), clock=lambda: NOW_MS).update(), include_files=False)
    assert {k: v for k, v in _stable(result).items() if k not in ("file_summary",)} == json.loads(
        json.dumps(expected, default=str)
    )
    assert result["file_summary"]["num_files"] == expected["num_files"] == 1
    assert result["duration_s"] > 0 and result["timings"]["replay_s"] >= 0


@pytest.mark.skipif(not PARTITIONED.exists(), reason="reference corpus not found")
def test_spark_submit_local_tombstone_report_with_renderings(tmp_path: Path, py_files: str) -> None:
    out = tmp_path / "report.json"
    proc = spark_submit(
        "local[2]",
        job_argv(Request.make(table=str(PARTITIONED), action="tombstones", engine="spark", retention_hours=0,
                              now_ms=NOW_MS, include_files=True), str(out), ("md", "html")),
        py_files=py_files,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = _read(out)
    snap = DeltaLog(str(PARTITIONED), clock=lambda: NOW_MS).update()
    assert _stable({k: v for k, v in result.items() if k != "reports"}) == json.loads(
        json.dumps(tombstone_report(snap, 0, now_ms=NOW_MS), default=str)
    )
    assert (tmp_path / "report.md").read_text().startswith("# Tombstone report")
    assert "<table>" in (tmp_path / "report.html").read_text() or result["num_tombstones"] == 0


@pytest.mark.skipif(not TABLE.exists(), reason="reference corpus not found")
@pytest.mark.parametrize(
    ("table", "error_class"),
    [
        ("does/not/exist", "TableNotFoundError"),
        ("delta-rs/simple_table_features", "UnsupportedFeatureError"),
    ],
)
def test_failing_job_writes_typed_error_and_exits_non_zero(
    tmp_path: Path, py_files: str, table: str, error_class: str
) -> None:
    out = tmp_path / "error.json"
    path = str(CORPUS / table) if (CORPUS / table).exists() else str(tmp_path / table)
    proc = spark_submit(
        "local[2]",
        job_argv(Request.make(table=path, action="snapshot", engine="spark"), str(out)),
        py_files=py_files,
    )
    assert proc.returncode != 0
    result = _read(out)
    assert result["status"] == "error"
    assert result["error_class"] == error_class
    assert result["table"].endswith(Path(path).name)
    assert f"{error_class}:" in proc.stdout + proc.stderr  # the driver's stderr may come out on stdout


@pytest.fixture(scope="module")
def cluster(spark_standalone):
    """The session's standalone cluster, whose worker Python is a bare venv."""
    # the worker's Python really has nothing: the provider can only come from --py-files
    python = spark_standalone.worker_python
    probe = subprocess.run([python, "-c", "import airflow_delta_provider"], capture_output=True, cwd="/")
    assert probe.returncode != 0
    return spark_standalone


@pytest.mark.skipif(not PARTITIONED.exists(), reason="reference corpus not found")
def test_job_on_standalone_cluster_with_bare_worker(tmp_path: Path, py_files: str, cluster) -> None:
    out = tmp_path / "files.json"
    proc = spark_submit(
        cluster.master_url,
        job_argv(Request.make(table=str(PARTITIONED), action="files", engine="spark", snapshot_partitions=3,
                              auto_threshold_mb=0, where="year = '2021'"), str(out)),
        py_files=py_files,
        conf={
            "spark.pyspark.python": cluster.worker_python,
            "spark.pyspark.driver.python": __import__("sys").executable,
            "spark.executor.memory": "512m",
            "spark.cores.max": "1",
        },
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = _read(out)
    assert result["status"] == "success" and result["engine"] == "spark"
    assert result["spark_app_id"].startswith("app-")  # a standalone application, not local mode
    snap = DeltaLog(str(PARTITIONED)).update()
    expected = sorted(a.path for a in snap.files(partition_filters=[("year", "=", "2021")]))
    assert [f["path"] for f in result["files"]] == expected and expected
    # this application's executors ran on the worker (their stderr lands in its work dir, per application)
    assert any((Path(cluster.worker_log).parent / "work" / result["spark_app_id"]).rglob("stderr"))
