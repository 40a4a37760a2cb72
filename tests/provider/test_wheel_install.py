"""Install as users do: the wheel `python -m build` makes installs into a clean venv with Airflow, and Airflow
finds the provider there (`airflow providers list`), with its CLI and package data.

The clean venv gets the same versions of Airflow and its dependencies as this one (a constraints file from
`pip freeze`); nothing of this repository is on its path. pip resolves the wheel's and Airflow's dependencies
offline (`--no-index`) from a wheelhouse: the wheels `pip download` picks for that same install (same wheel
requirements, same constraints) from the index, kept per machine under `~/.cache` and keyed by the
constraints and the wheel's `Requires-Dist`. The first run on a machine fills it (as slow as an online
install); later runs skip a minute or more of index look-ups. Byte-compiling is skipped (`--no-compile`):
Python compiles what the checks import. The venv has no pip of its own (`--without-pip`): this venv's pip
installs into it (`pip --python`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import REPO

pytest.importorskip("build")
pytest.importorskip("airflow")

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

#: Per-machine wheel cache (see the module docstring); one key kept at a time.
WHEELHOUSES = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "airflow-delta-provider" / "wheelhouse"


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


def _wheelhouse(wheel: Path, constraints: Path, airflow_pin: str) -> Path:
    """The wheels pip picks from the index for installing `wheel` and `airflow_pin` under `constraints`."""
    with zipfile.ZipFile(wheel) as zf:
        (meta,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        requires = [line for line in zf.read(meta).decode().splitlines() if line.startswith("Requires-Dist:")]
    key = hashlib.sha256("\n".join([constraints.read_text(), airflow_pin, *requires]).encode()).hexdigest()[:16]
    house = WHEELHOUSES / key
    if not (house / ".complete").exists():
        partial = WHEELHOUSES / f"{key}.{os.getpid()}.partial"  # another pytest may be filling it too
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        _run([sys.executable, "-m", "pip", "download", "--quiet", "-c", str(constraints), "-d", str(partial),
              str(wheel), airflow_pin])  # fmt: skip
        for own in partial.glob("airflow_delta_provider-*"):
            own.unlink()  # the wheel under test always comes from this run's build
        (partial / ".complete").touch()
        shutil.rmtree(house, ignore_errors=True)
        try:
            partial.rename(house)
        except OSError:  # another run finished first: its wheelhouse is the same
            shutil.rmtree(partial, ignore_errors=True)
        for old in WHEELHOUSES.iterdir():  # this test's own cache: drop other keys' complete wheelhouses
            if old.name != key and (old / ".complete").exists():
                shutil.rmtree(old, ignore_errors=True)
    return house


def test_wheel_installs_in_a_clean_venv_and_airflow_lists_the_provider(wheel: Path, tmp_path: Path) -> None:
    frozen = _run([sys.executable, "-m", "pip", "freeze", "--exclude-editable"]).stdout.splitlines()
    pins = [line for line in frozen if "==" in line and not line.lower().startswith("airflow-delta-provider")]
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("\n".join(pins) + "\n")
    airflow_pin = next(line for line in pins if line.lower().startswith("apache-airflow=="))
    house = _wheelhouse(wheel, constraints, airflow_pin)

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])  # this venv's pip installs into it
    py = venv / "bin" / "python"
    offline = ["--no-index", "--find-links", str(house), "--no-compile"]
    pip = [sys.executable, "-m", "pip", "--python", str(py), "install", "--quiet", *offline]
    _run([*pip, "-c", str(constraints), str(wheel), airflow_pin])

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
