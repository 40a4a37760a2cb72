"""Provider conventions: templated connection ids, Spark's INFO lines kept out of the task log, the
"Delta report" extra link, provider info (documentation URL, extra links), `py.typed`, the changelog."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

pytest.importorskip("airflow")

from airflow.providers.common.compat.sdk import AirflowException, TaskDeferred
from conftest import REPO
from provider_support import small_table, task_context
from spark_submit_stub import recorded, recording_spark_submit

from airflow_delta_provider.get_provider_info import DOCUMENTATION_URL, get_provider_info
from airflow_delta_provider.operators.delta import (
    SUBMIT_CONF_DEFAULTS,
    DeltaCheckpointOperator,
    DeltaLogCleanupOperator,
    DeltaResultLink,
    SnapshotReplayOperator,
    TombstoneReportOperator,
    result_link,
)
from airflow_delta_provider.sensors.delta import DeltaVersionSensor

pytestmark = pytest.mark.airflow
OPERATORS = (SnapshotReplayOperator, TombstoneReportOperator, DeltaCheckpointOperator, DeltaLogCleanupOperator)


# -- Spark's log level ---------------------------------------------------------------------------------------
def test_spark_submit_runs_at_warn_unless_conf_says_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spark_local2: None, submitted: list[list[str]]
) -> None:
    calls = recording_spark_submit(tmp_path, monkeypatch)
    b = small_table(tmp_path)
    with pytest.raises(AirflowException, match="Cannot execute"):  # the recording spark-submit exits 1
        SnapshotReplayOperator(task_id="r", table_uri=b.path, engine="spark").execute(task_context(tmp_path))
    with pytest.raises(AirflowException, match="Cannot execute"):
        SnapshotReplayOperator(task_id="r", table_uri=b.path, engine="spark", conf={"spark.log.level": "INFO"}).execute(
            task_context(tmp_path)
        )
    default, chosen = submitted  # the commands the Spark provider's hook built
    assert SUBMIT_CONF_DEFAULTS == {"spark.log.level": "WARN"}
    assert default[default.index("spark.log.level=WARN") - 1] == "--conf"
    assert "spark.log.level=INFO" in chosen and "spark.log.level=WARN" not in chosen
    received = recorded(calls)[0]["argv"]  # what the process received
    assert received[received.index("spark.log.level=WARN") - 1] == "--conf"


# -- templated connection ids -------------------------------------------------------------------------------
def test_connection_ids_are_templated_and_the_rendered_ones_are_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = recording_spark_submit(tmp_path, monkeypatch)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_RENDERED", json.dumps({"conn_type": "spark", "host": "local[3]"}))
    monkeypatch.setenv(
        "AIRFLOW_CONN_STORE_RENDERED",
        json.dumps({"conn_type": "aws", "login": "AKIARENDERED", "password": "rendered-secret"}),
    )
    params = {"spark": "spark_rendered", "store": "store_rendered"}
    for cls in OPERATORS:
        assert {"conn_id", "storage_conn_id"} <= set(cls.template_fields), cls
    assert "storage_conn_id" in DeltaVersionSensor.template_fields

    b = small_table(tmp_path)
    op = SnapshotReplayOperator(
        task_id="r",
        table_uri=b.path,
        engine="spark",
        conn_id="{{ params.spark }}",
        storage_conn_id="{{ params.store }}",
    )
    op.render_template_fields({"params": params})
    assert (op.conn_id, op.storage_conn_id) == ("spark_rendered", "store_rendered")
    with pytest.raises(AirflowException, match="Cannot execute"):
        op.execute(task_context(tmp_path))
    (call,) = recorded(calls)
    assert call["argv"][call["argv"].index("--master") + 1] == "local[3]"  # the rendered Spark connection
    assert json.loads(call["env"])["key"] == "AKIARENDERED"  # the rendered storage connection
    assert not any("rendered-secret" in part for part in call["argv"])

    sensor = DeltaVersionSensor(
        task_id="s", table_uri=b.path, newer_than=2, storage_conn_id="{{ params.store }}", deferrable=True
    )
    sensor.render_template_fields({"params": params})
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    assert deferred.value.trigger.storage_conn_id == "store_rendered"


def test_log_cleanup_apply_is_templated(tmp_path: Path) -> None:
    op = DeltaLogCleanupOperator(task_id="c", table_uri="/t", apply="{{ params.apply }}")
    op.render_template_fields({"params": {"apply": False}})
    assert op.extra_request_fields()["apply"] is False
    op = DeltaLogCleanupOperator(task_id="c", table_uri="/t", apply="{{ params.apply }}")
    op.render_template_fields({"params": {"apply": True}})
    assert op.extra_request_fields()["apply"] is True
    with pytest.raises(ValueError, match="apply must be a boolean"):
        DeltaLogCleanupOperator(task_id="c", table_uri="/t", apply="maybe").extra_request_fields()


# -- the "Delta report" extra link --------------------------------------------------------------------------
def test_every_operator_links_to_its_report_and_the_link_is_registered() -> None:
    for cls in OPERATORS:
        assert any(isinstance(link, DeltaResultLink) for link in cls.operator_extra_links), cls
    assert DeltaResultLink().name == "Delta report"
    from airflow.providers_manager import ProvidersManager

    assert "airflow_delta_provider.operators.delta.DeltaResultLink" in ProvidersManager().extra_links_class_names


def test_the_link_survives_dag_serialization() -> None:
    """The API server reads links from the serialized DAG: the link must be found there (Airflow 3 stores
    the URL the worker computed under the link's XCom key)."""
    from airflow.sdk import DAG
    from airflow.serialization.serialized_objects import DagSerialization

    with DAG("links", schedule=None) as dag:
        SnapshotReplayOperator(task_id="r", table_uri="/t")
    restored = DagSerialization.from_dict(DagSerialization.to_dict(dag))
    (link,) = restored.get_task("r").operator_extra_links
    assert (link.name, link.xcom_key) == ("Delta report", DeltaResultLink().xcom_key)


@pytest.mark.parametrize(
    ("summary", "url"),
    [
        ({"result_uri": "/r/d/t/run.json", "reports": {}}, "file:///r/d/t/run.json"),
        ({"result_uri": "/r/run.json", "reports": {"md": "/r/run.md", "html": "/r/run.html"}}, "file:///r/run.html"),
        ({"result_uri": "s3://bucket/results/run.json"}, "s3://bucket/results/run.json"),
        ({"result_uri": None, "reports": {}}, ""),  # no result kept (a temporary one, removed)
        (None, ""),  # the task failed before returning
    ],
)
def test_result_link(summary: dict | None, url: str) -> None:
    assert result_link(summary) == url


# -- packaging ----------------------------------------------------------------------------------------------
def test_provider_info_has_a_documentation_url_and_the_extra_link() -> None:
    info = get_provider_info()
    assert info["documentation-url"] == DOCUMENTATION_URL and DOCUMENTATION_URL.startswith("https://")
    for path in info["extra-links"]:
        module, _, name = path.rpartition(".")
        assert issubclass(getattr(__import__(module, fromlist=[name]), name), DeltaResultLink.__mro__[1])


def test_py_typed_ships_with_the_package() -> None:
    assert (REPO / "airflow_delta_provider" / "py.typed").is_file()
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    package_data = pyproject.get("tool", {}).get("setuptools", {}).get("package-data", {})
    assert "py.typed" in package_data.get("airflow_delta_provider", []), "add py.typed to package-data"


def test_changelog_covers_the_current_version() -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    text = (REPO / "CHANGELOG.md").read_text()
    assert f"## {version}" in text
