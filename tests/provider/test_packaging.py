"""Provider packaging: provider info, `airflow providers list`, the job zip, the example DAGs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("airflow")


from airflow_delta_provider.get_provider_info import get_provider_info

pytestmark = pytest.mark.airflow


# -- packaging ------------------------------------------------------------------------------------
def test_provider_info_matches_airflow_schema() -> None:
    import importlib.resources

    import jsonschema

    schema = json.loads(importlib.resources.files("airflow").joinpath("provider_info.schema.json").read_text())
    info = get_provider_info()
    jsonschema.validate(info, schema)
    for kind in ("operators", "sensors", "triggers", "hooks"):
        for entry in info[kind]:
            for module in entry["python-modules"]:
                __import__(module)


def test_airflow_providers_list_shows_the_provider() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "airflow", "providers", "list", "--output", "json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    names = {p["package_name"] for p in json.loads(out[out.index("[") :])}
    assert "airflow-delta-provider" in names


def test_job_zip_imports_on_a_bare_python(tmp_path: Path) -> None:
    from airflow_delta_provider.jobs import build_py_files_zip

    zip_path = build_py_files_zip(tmp_path)
    assert build_py_files_zip(tmp_path) == zip_path  # reused while the sources are unchanged
    code = "import airflow_delta_provider.delta.engines.spark.tasks as t, airflow_delta_provider.delta.read.aggregates"
    env = {"PYTHONPATH": zip_path, "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-S", "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_example_dags_import_cleanly() -> None:
    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:  # pragma: no cover - Airflow 2
        from airflow.models.dagbag import DagBag

    bag = DagBag(dag_folder=str(Path(__file__).resolve().parents[2] / "dags"))
    assert bag.import_errors == {}
    assert {"delta_table_health", "delta_asset_consumer"} <= set(bag.dag_ids)
    health = bag.dags["delta_table_health"]
    assert [t.task_id for t in health.topological_sort()][:3] == [
        "wait_for_new_version",
        "replay_and_check",
        "tombstone_report",
    ]
