"""Design boundaries: the `delta` library imports neither Airflow nor pyspark."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "module",
    ["airflow_delta_provider.delta", "airflow_delta_provider.cli", "airflow_delta_provider.commands.results"],
)
def test_library_imports_no_airflow_or_pyspark(module):
    code = (
        f"import sys, {module}\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('airflow', 'pyspark', 'deltalake'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_executor_side_modules_need_only_the_standard_library():
    """What Spark executors import (a worker may have only pyspark): no pyarrow, no fsspec."""
    code = (
        "import sys, airflow_delta_provider.delta.engines.spark.tasks\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('pyarrow', 'fsspec', 'airflow', 'numpy'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_sensor_probe_imports_no_pyarrow(tmp_path):
    log_dir = tmp_path / "_delta_log"
    log_dir.mkdir()
    (log_dir / "00000000000000000000.json").write_text('{"protocol":{"minReaderVersion":1,"minWriterVersion":2}}\n')
    (log_dir / "00000000000000000001.json").write_text('{"commitInfo":{}}\n')
    code = (
        "import sys\n"
        "from airflow_delta_provider.delta import DeltaLog\n"
        f"v = DeltaLog.for_table({str(tmp_path)!r}).latest_version()\n"
        "print(v, ','.join(sorted(m for m in sys.modules if m.split('.')[0] in ('pyarrow', 'numpy'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1"]
