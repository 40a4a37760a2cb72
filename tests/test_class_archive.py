"""The driver JVM's class-data sharing archive (`class_archive`): option composition, promotion, and the
operators end to end (`dag.test()` on SQLite, real `spark-submit --master local[2]`: record, then use)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from itertools import pairwise
from pathlib import Path

import pytest
from conftest import CORPUS, task_states, xcom_return

from airflow_delta_provider.delta import DeltaLog
from airflow_delta_provider.jobs import class_archive as cds

TABLE = CORPUS / "delta-golden" / "checkpoint"  # 14 versions, a checkpoint at 10, 1 file, 14 tombstones
KEY = "spark.driver.extraJavaOptions"

# -- option composition (no JVM) ------------------------------------------------------------------------


def test_recording_run_writes_a_temp_file_beside_the_archive() -> None:
    value, tmp = cds.java_options("/cache/spark.jsa", None, recorded=False)
    assert tmp is not None and value == f"-XX:ArchiveClassesAtExit={tmp}"
    assert os.path.dirname(tmp) == "/cache" and tmp.startswith("/cache/spark.jsa.") and tmp.endswith(".tmp")


def test_recorded_archive_is_used_and_existing_options_are_kept() -> None:
    assert cds.java_options("/cache/spark.jsa", None, recorded=True) == ("-XX:SharedArchiveFile=/cache/spark.jsa", None)
    value, tmp = cds.java_options("/cache/spark.jsa", "  -Dlog4j.x=1 -XX:+UseG1GC ", recorded=True)
    assert (value, tmp) == ("-Dlog4j.x=1 -XX:+UseG1GC -XX:SharedArchiveFile=/cache/spark.jsa", None)
    value, tmp = cds.java_options("/cache/spark.jsa", "-Dlog4j.x=1", recorded=False)
    assert value == f"-Dlog4j.x=1 -XX:ArchiveClassesAtExit={tmp}"


@pytest.mark.parametrize(
    "user",
    [
        "-XX:SharedArchiveFile=/mine.jsa",
        "-Dx=1 -XX:ArchiveClassesAtExit=/mine.jsa",
        "-Xshare:off -Dx=1",
        "-XX:-UseSharedSpaces",
    ],
)
@pytest.mark.parametrize("recorded", [True, False])
def test_options_that_already_set_class_data_sharing_are_left_alone(user: str, recorded: bool) -> None:
    assert cds.has_user_cds_option(user)
    assert cds.java_options("/cache/spark.jsa", user, recorded=recorded) == (user, None)


@pytest.mark.parametrize("path", ["/my cache/spark.jsa", "/c/spark\t.jsa", "/c/'q'.jsa", '/c/"q".jsa', "/c/a\\b", ""])
def test_paths_spark_would_split_are_refused(path: str) -> None:
    with pytest.raises(ValueError, match="class_archive"):
        cds.java_options(path, None, recorded=False)


def test_concurrent_recordings_get_distinct_temp_paths() -> None:
    names: list[str] = []
    lock = threading.Lock()

    def record() -> None:
        for _ in range(50):
            _, tmp = cds.java_options("/cache/spark.jsa", None, recorded=False)
            with lock:
                names.append(str(tmp))

    threads = [threading.Thread(target=record) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "from airflow_delta_provider.jobs import class_archive as c; print(c.temp_path('/cache/spark.jsa'))",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    names.append(child)
    assert len(set(names)) == len(names) == 201


# -- promote / discard ----------------------------------------------------------------------------------


def test_promote_replaces_the_archive_atomically(tmp_path: Path) -> None:
    final = tmp_path / "spark.jsa"
    final.write_bytes(b"old archive")
    tmp = Path(cds.temp_path(str(final)))
    tmp.write_bytes(b"new archive")
    assert cds.promote(str(tmp), str(final))
    assert final.read_bytes() == b"new archive" and not tmp.exists()
    assert cds.is_recorded(str(final))


def test_promote_drops_an_empty_recording_and_keeps_nothing(tmp_path: Path) -> None:
    final = tmp_path / "spark.jsa"
    tmp = Path(cds.temp_path(str(final)))
    tmp.touch()
    assert not cds.promote(str(tmp), str(final))
    assert list(tmp_path.iterdir()) == []
    assert not cds.promote(str(tmp), str(final))  # nothing written at all
    cds.discard(str(tmp))  # a missing temp file is fine
    final.touch()
    assert not cds.is_recorded(str(final))  # an empty file is no archive: record again


# -- the operator (no JVM) ------------------------------------------------------------------------------


def test_operator_refuses_a_path_with_spaces() -> None:
    pytest.importorskip("airflow")
    from airflow_delta_provider.operators.delta import SnapshotReplayOperator, TombstoneReportOperator

    for cls in (SnapshotReplayOperator, TombstoneReportOperator):
        with pytest.raises(ValueError, match="whitespace"):
            cls(task_id="t", table_uri=str(TABLE), class_archive="/tmp/my archive.jsa")


def test_operator_ignores_the_archive_in_cluster_mode(tmp_path: Path, capfd) -> None:
    pytest.importorskip("airflow")
    from airflow_delta_provider.operators.delta import TombstoneReportOperator

    op = TombstoneReportOperator(task_id="t", table_uri=str(TABLE), class_archive=str(tmp_path / "a.jsa"), conf={})
    assert op._class_archive_conf("client") is not None
    assert op._class_archive_conf("cluster") is None
    assert "ignored in cluster deploy mode" in capfd.readouterr().out


def test_hook_passes_java_options_with_spaces_as_one_argv_item(spark_local2: None) -> None:
    pytest.importorskip("airflow")
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    cmd = SparkSubmitHook(conf={KEY: "-XX:A -XX:B"})._build_spark_submit_command("app.py")
    i = cmd.index(f"{KEY}=-XX:A -XX:B")
    assert cmd[i - 1] == "--conf" and cmd[:3] == ["spark-submit", "--master", "local[2]"]


# -- real spark-submit ----------------------------------------------------------------------------------


def _java_options(cmd: list[str]) -> str:
    values = [b for a, b in pairwise(cmd) if a == "--conf" and b.startswith(f"{KEY}=")]
    assert len(values) == 1, cmd
    return values[0].removeprefix(f"{KEY}=")


@pytest.mark.spark
def test_failed_recording_run_leaves_no_archive(
    tmp_path: Path, spark_local2: None, submitted: list[list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_delta_provider.operators.delta import DeltaJobError, SnapshotReplayOperator

    discarded: list[bool] = []
    original = cds.discard

    def spy(tmp: str) -> None:
        discarded.append(os.path.exists(tmp))
        original(tmp)

    monkeypatch.setattr(cds, "discard", spy)
    cache = tmp_path / "cache"
    op = SnapshotReplayOperator(
        task_id="t", table_uri=str(tmp_path / "missing"), engine="local", class_archive=str(cache / "spark.jsa")
    )
    with pytest.raises(DeltaJobError, match="TableNotFoundError"):
        op.execute({})
    assert "-XX:ArchiveClassesAtExit=" in _java_options(submitted[-1])
    assert discarded == [True]  # the JVM wrote its archive at exit; the failed run's file was removed
    assert list(cache.iterdir()) == []
    assert "ArchiveClassesAtExit" not in (op.conf or {}).get(KEY, "")  # the archive option was this run's only


DAG_FILE = """
import pendulum
from airflow.providers.common.compat.sdk import dag

from airflow_delta_provider.operators.delta import SnapshotReplayOperator


@dag(dag_id="class_archive_e2e", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False)
def class_archive_e2e() -> None:
    SnapshotReplayOperator(
        task_id="replay",
        table_uri={table!r},
        engine="local",
        class_archive={archive!r},
        conf={conf!r},
        checks={{"min_files": 1}},
    )


class_archive_e2e()
"""


@pytest.fixture
def archive_dag(airflow_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spark_local2: None):
    """A one-task DAG (SnapshotReplayOperator with class_archive) in its own DAG bundle under tmp_path.

    The job replays with the local engine inside the spark-submit driver: the driver JVM (what the
    archive is about) starts all the same, without a SparkSession's minute-long recording run under load.
    """
    from airflow.configuration import conf

    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:  # pragma: no cover - Airflow 2
        from airflow.models.dagbag import DagBag

    folder = tmp_path / "dags"
    folder.mkdir()
    archive = tmp_path / "cache" / "spark.jsa"
    # -Xshare:on: a JVM that cannot map the archive fails to start instead of running without it
    user_options = {KEY: "-Xshare:on -Dclass.archive.e2e=1"}
    dag_file = folder / "class_archive_e2e.py"
    dag_file.write_text(DAG_FILE.format(table=str(TABLE), archive=str(archive), conf=user_options))
    bundles = conf.getjson("dag_processor", "dag_bundle_config_list") or []
    bundles = [
        *bundles,
        {"name": "class-archive-e2e", "classpath": bundles[0]["classpath"], "kwargs": {"path": str(folder)}},
    ]
    monkeypatch.setenv("AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST", json.dumps(bundles))
    bag = DagBag(dag_folder=str(dag_file))
    assert bag.import_errors == {}
    return bag.dags["class_archive_e2e"], archive


@pytest.mark.airflow
@pytest.mark.spark
def test_operator_records_then_uses_the_class_archive(archive_dag, submitted: list[list[str]]) -> None:
    if not TABLE.exists():
        pytest.skip("reference corpus not found")
    dag, archive = archive_dag
    expected = DeltaLog(str(TABLE)).update()

    def run_and_check() -> str:
        dr = dag.test()
        assert task_states(dr.run_id) == {"replay": "success"}
        out = xcom_return(dr.run_id, "replay")
        assert (out["version"], out["num_files"], out["engine"]) == (expected.version, expected.num_files, "local")
        assert out["size_bytes"] == expected.size_in_bytes and out["checks"] == {"min_files": True}
        assert [p.name for p in archive.parent.iterdir()] == [archive.name]  # no temp file left behind
        return _java_options(submitted[-1])

    # first run: records at exit into a temp file, promoted once the run succeeded
    options = run_and_check()
    assert options.startswith("-Xshare:on -Dclass.archive.e2e=1 -XX:TieredStopAtLevel=1 -XX:ArchiveClassesAtExit=")
    assert options.split("=")[-1].startswith(f"{archive}.") and cds.is_recorded(str(archive))
    recorded = archive.stat()

    # second run: the JVM maps it (with -Xshare:on a refused archive would fail the start)
    options = run_and_check()
    assert options == f"-Xshare:on -Dclass.archive.e2e=1 -XX:TieredStopAtLevel=1 -XX:SharedArchiveFile={archive}"
    assert archive.stat().st_mtime_ns == recorded.st_mtime_ns and archive.stat().st_ino == recorded.st_ino
