"""The Airflow versions the README claims are the ones the package requires and the code can run on."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata

import pytest
from conftest import REPO
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

pytest.importorskip("airflow")

from airflow_delta_provider.get_provider_info import get_provider_info

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
README = (REPO / "README.md").read_text()
#: How the README states the floor, e.g. "Requires Apache Airflow 3.0 or later".
MINIMUM_RE = re.compile(r"Requires Apache Airflow (\d+(?:\.\d+)+) or later")
#: Support claims, e.g. "runs on Airflow 2.11", "supports Airflow 3.1".
CLAIM_RE = re.compile(r"\b(?:runs?|works?|supports?|supported)\s+(?:on\s+)?(?:Apache\s+)?Airflow\s+(\d+(?:\.\d+)+)")


def _airflow_requirement() -> Requirement:
    """The `apache-airflow` requirement of the `airflow` extra in pyproject.toml."""
    reqs = [Requirement(r) for r in PYPROJECT["project"]["optional-dependencies"]["airflow"]]
    (req,) = [r for r in reqs if r.name == "apache-airflow"]
    return req


def _lower_bound(spec: SpecifierSet) -> Version:
    (bound,) = [Version(s.version) for s in spec if s.operator in (">=", "~=", "==")]
    return bound


def test_readme_states_the_minimum_pyproject_requires() -> None:
    floor = _lower_bound(_airflow_requirement().specifier)
    stated = {Version(v) for v in MINIMUM_RE.findall(README)}
    assert stated == {floor}, f"README states {sorted(map(str, stated))}, pyproject requires apache-airflow>={floor}"
    below = [v for v in CLAIM_RE.findall(README) if Version(v) < floor]
    assert below == [], f"README claims support for Airflow {below}, below the required {floor}"


def test_the_floor_is_one_the_code_can_run_on() -> None:
    """The provider is built on Airflow 3 APIs (event triggers for asset watchers, `airflow.sdk`)."""
    from airflow.triggers.base import BaseEventTrigger

    from airflow_delta_provider.triggers.delta import DeltaVersionTrigger

    assert issubclass(DeltaVersionTrigger, BaseEventTrigger)  # BaseEventTrigger and AssetWatcher: 3.0+
    assert "from airflow.sdk import" in (REPO / "dags" / "delta_table_commits.py").read_text()
    assert _lower_bound(_airflow_requirement().specifier) >= Version("3.0")


def test_installed_airflow_and_package_metadata_agree_with_pyproject() -> None:
    import airflow

    spec = _airflow_requirement().specifier
    assert spec.contains(Version(airflow.__version__), prereleases=True), (airflow.__version__, str(spec))
    name = PYPROJECT["project"]["name"]
    installed = [Requirement(r) for r in metadata.requires(name) or []]
    airflow_reqs = [r for r in installed if r.name == "apache-airflow"]
    assert [r.specifier for r in airflow_reqs] == [spec], "the installed package is stale: run ./scripts/bootstrap"


def test_provider_info_is_what_airflow_discovers() -> None:
    from airflow.providers_manager import ProvidersManager

    info = get_provider_info()
    assert info["package-name"] == PYPROJECT["project"]["name"]
    discovered = ProvidersManager().providers[info["package-name"]]
    assert discovered.version == PYPROJECT["project"]["version"]
    assert discovered.data["package-name"] == info["package-name"]
    assert discovered.data["triggers"] == info["triggers"]
