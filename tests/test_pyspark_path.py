"""PySpark from its byte-compiled installation (`jobs/pyspark_path.py`, `jobs/worker_daemon.py`) and the
byte-compiled `--py-files` zip: unit tests on made-up paths, then the real spark-submit (driver and
worker daemon) reporting where they imported PySpark and the library from."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from airflow_delta_provider.jobs import DAEMON_MODULE_CONF, WORKER_DAEMON_MODULE, build_py_files_zip
from airflow_delta_provider.jobs.pyspark_path import prefer_installed_pyspark


def _zip(path: Path, member: str, version: str) -> str:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(member, f"__version__: str = '{version}'\n")
    return str(path)


def _installed(root: Path, package: str, version: str) -> str:
    (root / package).mkdir(parents=True)
    (root / package / "__init__.py").write_text("")
    (root / package / "version.py").write_text(f'__version__ = "{version}"\n')
    return str(root)


@pytest.fixture
def no_pyspark_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "pyspark", raising=False)


def test_zips_move_behind_the_same_installed_version(tmp_path: Path, no_pyspark_imported: None) -> None:
    spark_zip = _zip(tmp_path / "pyspark.zip", "pyspark/version.py", "4.2.0")
    py4j_zip = _zip(tmp_path / "py4j-0.10.9.9-src.zip", "py4j/version.py", "0.10.9.9")
    site = tmp_path / "site"
    _installed(site, "pyspark", "4.2.0")
    _installed(site, "py4j", "0.10.9.9")
    path = [spark_zip, py4j_zip, "/work/job", str(site)]
    assert prefer_installed_pyspark(path) == [spark_zip, py4j_zip]
    assert path == ["/work/job", str(site), spark_zip, py4j_zip]


def test_nothing_moves_for_another_version_or_no_installed_copy(tmp_path: Path, no_pyspark_imported: None) -> None:
    spark_zip = _zip(tmp_path / "pyspark.zip", "pyspark/version.py", "4.2.0")
    py4j_zip = _zip(tmp_path / "py4j-0.10.9.9-src.zip", "py4j/version.py", "0.10.9.9")
    other = _installed(tmp_path / "other", "pyspark", "4.1.1")
    _installed(tmp_path / "other", "py4j", "0.10.9.9")
    path = [spark_zip, py4j_zip, other]
    assert prefer_installed_pyspark(path) == [py4j_zip]  # py4j matches; Spark's own pyspark stays first
    assert path == [spark_zip, other, py4j_zip]
    bare = [spark_zip, str(tmp_path / "empty")]
    assert prefer_installed_pyspark(bare) == [] and bare == [spark_zip, str(tmp_path / "empty")]


def test_nothing_moves_once_pyspark_is_imported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyspark", type(sys)("pyspark"))
    spark_zip = _zip(tmp_path / "pyspark.zip", "pyspark/version.py", "4.2.0")
    path = [spark_zip, _installed(tmp_path / "site", "pyspark", "4.2.0")]
    assert prefer_installed_pyspark(path) == [] and path[0] == spark_zip


def test_py_files_zip_holds_bytecode_that_zipimport_uses(tmp_path: Path) -> None:
    """Each module has a checked hash-based `.pyc` beside its source; a bare Python imports the library
    from the zip through it."""
    zip_path = build_py_files_zip(tmp_path)
    names = set(zipfile.ZipFile(zip_path).namelist())
    sources = {n for n in names if n.endswith(".py")}
    assert sources and {n + "c" for n in sources} <= names
    code = "import airflow_delta_provider.delta.engines.spark_tasks as t; print(t.__file__)"
    proc = subprocess.run(
        [sys.executable, "-S", "-c", code],
        env={"PYTHONPATH": zip_path, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    # loaded from the bytecode, not compiled from the source beside it
    assert proc.stdout.strip() == f"{zip_path}/airflow_delta_provider/delta/engines/spark_tasks.pyc"


#: Run by spark-submit: where the driver and a Python worker imported pyspark and the library from.
PROBE = """
import json, sys
from airflow_delta_provider.jobs.pyspark_path import prefer_installed_pyspark
prefer_installed_pyspark()
import pyspark
from pyspark.sql import SparkSession

def where(_):
    import pyspark, sys
    import airflow_delta_provider.delta.actions as actions
    return [pyspark.__file__, actions.__spec__.loader.__class__.__name__, sys.argv[0]]

spark = SparkSession.builder.getOrCreate()
worker = spark.sparkContext.parallelize([0], 1).map(where).collect()[0]
with open(sys.argv[1], "w") as fh:
    json.dump({"driver": pyspark.__file__, "worker": worker}, fh)
spark.stop()
"""


@pytest.mark.spark
@pytest.mark.parametrize("daemon", [True, False], ids=["worker-daemon", "pyspark-daemon"])
def test_spark_submit_driver_and_workers_import_installed_pyspark(tmp_path: Path, daemon: bool) -> None:
    from spark_cluster import spark_bin, spark_env

    script, out = tmp_path / "probe.py", tmp_path / "where.json"
    script.write_text(PROBE)
    conf = {"spark.ui.enabled": "false", **({DAEMON_MODULE_CONF: WORKER_DAEMON_MODULE} if daemon else {})}
    argv = [spark_bin("spark-submit"), "--master", "local[1]", "--py-files", build_py_files_zip(tmp_path)]
    for key, value in conf.items():
        argv += ["--conf", f"{key}={value}"]
    proc = subprocess.run(
        [*argv, str(script), str(out)], env=spark_env(), capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    where = json.loads(out.read_text())
    installed = str(Path(__import__("pyspark").__file__).resolve())
    assert str(Path(where["driver"]).resolve()) == installed  # not .../python/lib/pyspark.zip/pyspark/...
    assert (str(Path(where["worker"][0]).resolve()) == installed) is daemon
    assert "pyspark.zip" in where["worker"][0] or daemon
    if not daemon:  # (the library's daemon imports it before the worker adds the --py-files zip)
        assert where["worker"][1] == "zipimporter"  # the library comes from the --py-files zip


@pytest.mark.spark
@pytest.mark.airflow
def test_operator_runs_the_spark_engine_through_the_library_daemon(
    tmp_path: Path, spark_local2: None, submitted: list[list[str]]
) -> None:
    """The operators' default on a `local[*]` master: the real hook's spark-submit names the library's
    daemon, and the Spark engine's Python jobs run on it to the local engine's answer."""
    from conftest import CORPUS

    from airflow_delta_provider.delta import DeltaLog
    from airflow_delta_provider.operators.delta import SnapshotReplayOperator

    table = CORPUS / "delta-golden" / "checkpoint"
    if not table.exists():
        pytest.skip("reference corpus not found")
    op = SnapshotReplayOperator(task_id="t", table_uri=str(table), engine="spark", snapshot_partitions=2)
    out = op.execute({})
    assert f"{DAEMON_MODULE_CONF}={WORKER_DAEMON_MODULE}" in submitted[-1]
    expected = DeltaLog(str(table)).update()
    assert (out["engine"], out["version"], out["num_files"]) == ("spark", expected.version, expected.num_files)
    assert out["size_bytes"] == expected.size_in_bytes
