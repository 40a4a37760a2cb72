"""OPTIMIZE and the CLI never import pandas (pyarrow imports it when a Python object is converted, ~0.5 s)."""

from __future__ import annotations

import subprocess
import sys


def test_optimize_and_cli_do_not_import_pandas() -> None:
    code = (
        "import sys\n"
        "import airflow_delta_provider.delta.maintenance.optimize, airflow_delta_provider.cli\n"
        "import airflow_delta_provider.delta.read.deletion_vectors\n"
        "print('pandas' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
