"""Real Spark for tests: spark-submit argv, and a standalone master + worker on 127.0.0.1.

The cluster is started from the pyspark installation (`spark-class ...Master` / `...Worker`), its
worker runs executors with a bare Python (a venv with no packages: only the pyspark.zip Spark puts
on PYTHONPATH), so the job only works if it ships the provider with `--py-files`.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyspark

SPARK_HOME = Path(pyspark.__file__).resolve().parent


def spark_bin(name: str) -> str:
    return str(SPARK_HOME / "bin" / name)


def spark_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "SPARK_HOME": str(SPARK_HOME),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
        }
    )
    env.update(extra)
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bare_python(directory: Path) -> str:
    """A Python with nothing installed (a fresh venv of the base interpreter, no pip)."""
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(directory)], check=True)
    return str(directory / "bin" / "python")


def _wait_for(log: Path, needle: str, proc: subprocess.Popen[bytes], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        if needle in text:
            return
        if proc.poll() is not None:
            raise RuntimeError(f"process exited ({proc.returncode}) before {needle!r}:\n{text[-3000:]}")
        time.sleep(0.5)
    raise RuntimeError(f"timed out waiting for {needle!r} in {log}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@dataclass
class StandaloneCluster:
    master_url: str
    worker_python: str
    master_log: Path
    worker_log: Path


@contextmanager
def standalone_cluster(workdir: Path, worker_python: str, cores: int = 1) -> Iterator[StandaloneCluster]:
    """A Spark standalone master and one worker on 127.0.0.1, stopped on exit."""
    port, ui, wui = free_port(), free_port(), free_port()
    master_log, worker_log = workdir / "master.log", workdir / "worker.log"
    env = spark_env(SPARK_LOG_DIR=str(workdir), SPARK_WORKER_DIR=str(workdir / "work"), PYSPARK_PYTHON=worker_python)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with open(master_log, "wb") as out:
            procs.append(
                subprocess.Popen(
                    [
                        spark_bin("spark-class"),
                        "org.apache.spark.deploy.master.Master",
                        "--host",
                        "127.0.0.1",
                        "--port",
                        str(port),
                        "--webui-port",
                        str(ui),
                    ],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
            )
        _wait_for(master_log, "I have been elected leader", procs[0])
        url = f"spark://127.0.0.1:{port}"
        with open(worker_log, "wb") as out:
            procs.append(
                subprocess.Popen(
                    [
                        spark_bin("spark-class"),
                        "org.apache.spark.deploy.worker.Worker",
                        url,
                        "--host",
                        "127.0.0.1",
                        "--cores",
                        str(cores),
                        "--memory",
                        "1g",
                        "--webui-port",
                        str(wui),
                        "--work-dir",
                        str(workdir / "work"),
                    ],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
            )
        _wait_for(worker_log, "Successfully registered with master", procs[1])
        yield StandaloneCluster(url, worker_python, master_log, worker_log)
    finally:
        for proc in reversed(procs):
            _stop(proc)


def spark_submit(
    master: str,
    job_args: Sequence[str],
    *,
    py_files: str,
    conf: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """Run the bundled job with the real spark-submit; argv only, no shell."""
    from airflow_delta_provider.delta.engines.spark import SPARK_CONF
    from airflow_delta_provider.jobs import job_script

    argv = [spark_bin("spark-submit"), "--master", master, "--py-files", py_files]
    for key, value in {**SPARK_CONF, "spark.ui.enabled": "false", **(conf or {})}.items():
        argv += ["--conf", f"{key}={value}"]
    argv += [job_script(), *job_args]
    return subprocess.run(argv, env=env or spark_env(), capture_output=True, text=True, timeout=timeout)


def local_session(app_name: str) -> pyspark.sql.SparkSession:
    """A `local[2]` SparkSession as the engine tests use it: the engine's settings, this venv's Python on
    the executors (`mapInArrow` needs pyarrow), two shuffle partitions, no UI, errors-only logging."""
    from pyspark.sql import SparkSession

    from airflow_delta_provider.delta.engines.spark import SPARK_CONF

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = SparkSession.builder.master("local[2]").appName(app_name)
    conf = {
        **SPARK_CONF,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.default.parallelism": "2",
        "spark.sql.shuffle.partitions": "2",
    }
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
