"""Design boundaries: the `delta` library imports neither Airflow nor pyspark."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "module",
    ["airflow_delta_provider.delta", "airflow_delta_provider.cli", "airflow_delta_provider.delta.results"],
)
def test_library_imports_no_airflow_or_pyspark(module):
    code = (
        f"import sys, {module}\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('airflow', 'pyspark', 'deltalake'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
