"""Shared fixtures for the Delta log tests: the reference corpus and safe copies of its tables."""

from __future__ import annotations

import atexit
import functools
import json
import logging
import os
import shutil
import sqlite3
import stat
import tempfile
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]

# Airflow reads its configuration when first imported: set it before any test module imports it.
# A throwaway AIRFLOW_HOME (SQLite metadata DB, migrated on demand by the `airflow_db` fixture), the
# repo's example DAGs as the DAG bundle, no example DAGs, Spark bound to loopback.
if "AIRFLOW_HOME" not in os.environ:
    os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="airflow-home-")
    atexit.register(shutil.rmtree, os.environ["AIRFLOW_HOME"], ignore_errors=True)  # ours: gone with the run
os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(REPO / "dags"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__EXECUTOR", "LocalExecutor")
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
logging.getLogger("py4j").setLevel(logging.WARNING)  # its "closing down" lines outlive pytest's streams

from airflow_delta_provider.delta import DeltaLog  # noqa: E402 - after the Airflow settings above

#: The reference Delta tables (read-only). `DELTA_TABLES_DIR` points the tests at another copy.
CORPUS: Path = Path(
    os.environ.get("DELTA_TABLES_DIR") or Path(__file__).resolve().parents[2] / "shared" / "delta-tables"
).resolve()


@functools.cache
def _spark_module(module: str) -> bool:
    """Whether the test module (a path relative to the repository) marks tests `spark`."""
    return "pytest.mark.spark" in (REPO / module).read_text(encoding="utf-8")


def _scope(nodeid: str) -> str:
    """A test's scope under pytest-xdist: "spark" for a module with Spark tests, else its module."""
    module = nodeid.split("::", 1)[0]
    return "spark" if _spark_module(module) else module


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: no error without the plugin
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`scripts/test` runs two pytest-xdist workers. Every module with Spark tests runs on one worker, first,
    in collection order: the suite's shared `local[2]` session, Connect server and standalone cluster start
    once, and the rest of the suite, a module at a time, runs on the other worker meanwhile. (Scopes by
    nodeid: pytest-xdist's own `xdist_group` marks are lost under pytest 9, whose nodes no longer keep
    `_nodeid`.)"""
    from xdist.scheduler import LoadScopeScheduling

    class SparkTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid)

    config.option.loadscopereorder = False  # collection order: the Spark scope first
    return SparkTogether(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """On an xdist worker, the modules with Spark tests first (a stable sort: the same order on every
    worker, each module's own order kept)."""
    if "PYTEST_XDIST_WORKER" in os.environ:
        items.sort(key=lambda item: _scope(item.nodeid) != "spark")


def copy_table(name: str, tmp_path: Path) -> Path:
    """Copy the corpus table `name` (a root relative to CORPUS) under `tmp_path` and return the copy.

    `copy2` keeps the files' mtimes; the copy is made writable (the corpus is read-only), which changes
    no mtime. Tests that change mtimes or files work on the copy, never on the corpus.
    """
    src = CORPUS / name
    dst = tmp_path / name
    shutil.copytree(src, dst, copy_function=shutil.copy2, symlinks=False)
    for path in [dst, *dst.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
    return dst


@pytest.fixture(autouse=True)
def _clear_delta_log_cache():
    """Every test starts with an empty `DeltaLog` cache (instances are cached per table path)."""
    DeltaLog.clear_cache()
    yield
    DeltaLog.clear_cache()


@pytest.fixture(scope="session")
def airflow_db() -> str:
    """A migrated SQLite metadata DB under the session's AIRFLOW_HOME (what `dag.test()` needs)."""
    import subprocess
    import sys

    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True)
    return os.environ["AIRFLOW_HOME"]


def metadata_db() -> sqlite3.Connection:
    """The session's SQLite Airflow metadata DB (see `airflow_db`), for assertions on runs."""
    return sqlite3.connect(Path(os.environ["AIRFLOW_HOME"]) / "airflow.db", timeout=30)


def task_states(run_id: str) -> dict[str, str]:
    """task_id -> state of a DAG run's task instances."""
    with metadata_db() as db:
        rows = db.execute("SELECT task_id, state FROM task_instance WHERE run_id = ?", (run_id,)).fetchall()
    return dict(rows)


def xcom_return(run_id: str, task_id: str) -> Any:
    """A task's `return_value` XCom in a DAG run, decoded."""
    with metadata_db() as db:
        row = db.execute(
            "SELECT value FROM xcom WHERE run_id = ? AND task_id = ? AND key = 'return_value'", (run_id, task_id)
        ).fetchone()
    assert row is not None, f"no XCom from {task_id}"
    value = json.loads(row[0]) if isinstance(row[0], str | bytes) else row[0]
    return json.loads(value) if isinstance(value, str) else value


@pytest.fixture
def spark_local2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))


@pytest.fixture
def submitted(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Every spark-submit argv the Spark provider's hook builds (a spy: the hook runs unchanged)."""
    pytest.importorskip("airflow")
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    commands: list[list[str]] = []
    original = SparkSubmitHook._build_spark_submit_command

    def spy(self: SparkSubmitHook, application: str) -> list[str]:
        cmd = original(self, application)
        commands.append(list(cmd))
        return cmd

    monkeypatch.setattr(SparkSubmitHook, "_build_spark_submit_command", spy)
    return commands


@pytest.fixture(scope="session")
def spark_standalone(tmp_path_factory: pytest.TempPathFactory):
    """One Spark standalone master + worker (1 core, 1 GiB) on 127.0.0.1 for the whole session.

    The worker's default Python for executors (`worker_python`) is a bare venv with nothing installed;
    an application that needs packages on its executors picks its own Python (`spark.pyspark.python`).
    Each application's executor logs are under `<worker work dir>/<spark_app_id>/`.
    """
    from support.spark_cluster import bare_python, standalone_cluster

    work = tmp_path_factory.mktemp("spark-standalone")
    with standalone_cluster(work, bare_python(work / "bare-venv")) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def moto_s3():
    """One moto S3 server on 127.0.0.1 (authentication on) for the whole session: each module that uses it
    creates its own bucket (`support.s3_server.create_bucket`) and leaves the others' alone."""
    pytest.importorskip("moto.server")
    from support.s3_server import start_moto_server

    with start_moto_server() as server:
        yield server
