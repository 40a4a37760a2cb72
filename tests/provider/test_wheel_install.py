"""Install as users do: the wheel `python -m build` makes installs into a clean venv with Airflow, and Airflow
finds the provider there (`airflow providers list`), with its CLI and package data.

The clean venv gets the same versions of Airflow and its dependencies as this one (a constraints file from
`pip freeze`), so pip resolves from its cache instead of the index; nothing of this repository is on its path.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

pytest.importorskip("build")
pytest.importorskip("airflow")

pytestmark = [pytest.mark.airflow, pytest.mark.slow]


def _run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]
    assert proc.returncode == 0, f"{argv[:4]} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    # Built from a copy: building in the checkout leaves build/ and an egg-info there, whose entry points
    # a process started in the checkout would then see twice.
    source = tmp_path_factory.mktemp("source") / "src"
    skip = (".venv", ".git", "bench", "demo", "serve", "build", "dist", "*.egg-info", "__pycache__", "node_modules")
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(*skip))
    _run([sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(source)])
    (whl,) = out.glob("airflow_delta_provider-*.whl")
    return whl


def test_wheel_installs_in_a_clean_venv_and_airflow_lists_the_provider(wheel: Path, tmp_path: Path) -> None:
    frozen = _run([sys.executable, "-m", "pip", "freeze", "--exclude-editable"]).stdout.splitlines()
    pins = [line for line in frozen if "==" in line and not line.lower().startswith("airflow-delta-provider")]
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("\n".join(pins) + "\n")
    airflow_pin = next(line for line in pins if line.lower().startswith("apache-airflow=="))

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    py = venv / "bin" / "python"
    _run([str(py), "-m", "pip", "install", "--quiet", "-c", str(constraints), str(wheel), airflow_pin])

    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYTHONPATH"))}
    env |= {"AIRFLOW_HOME": str(tmp_path / "airflow-home"), "PATH": f"{venv / 'bin'}:/usr/bin:/bin"}
    # Imported from the venv's site-packages, not from this checkout.
    where = _run([str(py), "-c", "import airflow_delta_provider as p; print(p.__file__)"], env=env, cwd=tmp_path)
    assert where.stdout.strip().startswith(str(venv)), where.stdout
    listed = _run([str(venv / "bin" / "airflow"), "providers", "list", "--output", "json"], env=env, cwd=tmp_path)
    out = listed.stdout
    names = {p["package_name"]: p["version"] for p in json.loads(out[out.index("[") :])}
    assert names.get("airflow-delta-provider") == "0.1.0", names
    # The console script and the report templates (package data) came with the wheel.
    version = _run([str(venv / "bin" / "deltalog"), "--help"], env=env, cwd=tmp_path)
    assert "deltalog" in version.stdout
    templates = _run(
        [
            str(py),
            "-c",
            "import importlib.resources as r; print(sorted(p.name for p in "
            "r.files('airflow_delta_provider.commands').joinpath('templates').iterdir()))",
        ],
        env=env,
        cwd=tmp_path,
    )
    assert ".j2" in templates.stdout
