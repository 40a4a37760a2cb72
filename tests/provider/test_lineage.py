"""OpenLineage from the operators, through the OpenLineage provider's own machinery: its `ExtractorManager`
picks the operator's `get_openlineage_facets_on_complete` (the `DefaultExtractor`), and its
`OpenLineageAdapter` turns the result into a COMPLETE run event, redacts it and emits it with the
OpenLineage client's file transport; the tests read the emitted JSON back. Dataset names are compared
with the OpenLineage client's naming classes (the naming spec in code)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("airflow")
pytest.importorskip("airflow.providers.openlineage")

from airflow.models.dagrun import DagRun
from airflow.providers.openlineage.extractors.manager import ExtractorManager
from airflow.providers.openlineage.plugins.adapter import OpenLineageAdapter
from airflow.sdk import DAG
from airflow.utils.state import TaskInstanceState
from openlineage.client import OpenLineageClient
from openlineage.client.naming import dataset as naming
from openlineage.client.transport.file import FileConfig, FileTransport
from provider_support import task_context

from airflow_delta_provider.lineage import table_dataset_name
from airflow_delta_provider.operators.delta import (
    DeltaCheckFailed,
    DeltaCheckpointOperator,
    DeltaJobOperator,
    DeltaLogCleanupOperator,
    SnapshotReplayOperator,
    TombstoneReportOperator,
)
from airflow_delta_provider.testing import DeltaLogBuilder

pytestmark = pytest.mark.airflow

NESTED = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": False, "metadata": {"comment": "row key"}},
        {
            "name": "address",
            "type": {
                "type": "struct",
                "fields": [
                    {"name": "city", "type": "string", "nullable": True, "metadata": {}},
                    {"name": "zip", "type": "integer", "nullable": True, "metadata": {}},
                ],
            },
            "nullable": True,
            "metadata": {},
        },
        {
            "name": "tags",
            "type": {"type": "array", "elementType": "string", "containsNull": True},
            "nullable": True,
            "metadata": {},
        },
        {
            "name": "scores",
            "type": {"type": "map", "keyType": "string", "valueType": "double", "valueContainsNull": True},
            "nullable": True,
            "metadata": {},
        },
        {"name": "day", "type": "string", "nullable": True, "metadata": {}},
    ],
}


def _table(tmp_path: Path) -> DeltaLogBuilder:
    """Versions 0..4 (a tombstone at 3), stamped in 2023, a checkpoint at 4; a description and comments."""
    b = DeltaLogBuilder(tmp_path / "people", schema=NESTED, partition_columns=["day"], description="People we know")
    b.create()
    for i in range(3):
        b.append([f"p{i}.parquet"], size=100 + i, partition={"day": f"2024-01-0{i + 1}"})
    b.remove(["p0.parquet"])
    b.checkpoint()
    return b


def _event(op: DeltaJobOperator, tmp_path: Path, state: TaskInstanceState = TaskInstanceState.SUCCESS) -> dict:
    """The COMPLETE (or FAIL) event the OpenLineage provider emits for a task that ran `op`, as JSON."""
    metadata = ExtractorManager().extract_metadata(
        dagrun=DagRun(dag_id=op.dag_id, run_id="manual__1"), task=op, task_instance_state=state, task_instance=None
    )
    path = tmp_path / f"ol-{op.task_id}-{state.value}.jsonl"
    client = OpenLineageClient(transport=FileTransport(FileConfig(log_file_path=str(path), append=True)))
    adapter = OpenLineageAdapter(client=client)
    common: dict[str, Any] = {
        "run_id": "01990000-0000-7000-8000-000000000001",
        "job_name": f"{op.dag_id}.{op.task_id}",
        "end_time": "2026-01-01T00:00:00+00:00",
        "task": metadata,
        "nominal_start_time": None,
        "nominal_end_time": None,
        "owners": [],
        "tags": [],
        "job_description": None,
    }
    if state == TaskInstanceState.FAILED:
        adapter.fail_task(**common, error=RuntimeError("check failed"))
    else:
        adapter.complete_task(**common)
    (line,) = path.read_text().splitlines()
    return json.loads(line)


def _in_dag(op_class: type[DeltaJobOperator], **kwargs: Any) -> DeltaJobOperator:
    with DAG("lineage_test", schedule=None):
        return op_class(submit=False, **kwargs)


def _schema(dataset: dict) -> list[dict]:
    def strip(fields: list[dict]) -> list[dict]:
        return [
            {k: (strip(v) if k == "fields" else v) for k, v in f.items() if v not in (None, []) or k == "name"}
            for f in fields
        ]

    return strip(dataset["facets"]["schema"]["fields"])


EXPECTED_SCHEMA = [
    {"name": "id", "type": "long", "description": "row key", "ordinal_position": 1},
    {
        "name": "address",
        "type": "struct",
        "ordinal_position": 2,
        "fields": [
            {"name": "city", "type": "string", "ordinal_position": 1},
            {"name": "zip", "type": "integer", "ordinal_position": 2},
        ],
    },
    {"name": "tags", "type": "array<string>", "ordinal_position": 3},
    {"name": "scores", "type": "map<string,double>", "ordinal_position": 4},
    {"name": "day", "type": "string", "ordinal_position": 5},
]


# -- naming -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("uri", "spec"),
    [
        ("s3://lake/warehouse/people", naming.S3(bucket_name="lake", object_key="warehouse/people")),
        ("s3a://lake/warehouse/people/", naming.S3(bucket_name="lake", object_key="warehouse/people")),
        ("gs://lake/people", naming.GCS(bucket_name="lake", object_key="people")),
        (
            "abfss://data@acct.dfs.core.windows.net/people",
            naming.ABFSS(container="data", service="acct", path="people"),
        ),
        (
            "wasbs://data@acct.blob.core.windows.net/people",
            naming.WASBS(container="data", service_name="acct", object_key="people"),
        ),
        (
            "hdfs://namenode:8020/lake/people",
            naming.HDFS(namenode_host="namenode", namenode_port="8020", path="/lake/people"),
        ),
        ("/lake/people", naming.LocalFileSystem(path="/lake/people")),
        ("file:///lake/people/", naming.LocalFileSystem(path="/lake/people")),
    ],
)
def test_dataset_names_follow_the_openlineage_naming_spec(uri: str, spec: Any) -> None:
    assert table_dataset_name(uri) == (spec.get_namespace(), spec.get_name())


def test_abfs_without_an_account_in_the_uri_takes_it_from_the_storage_options() -> None:
    spec = naming.ABFSS(container="data", service="acct", path="people")
    assert table_dataset_name("abfs://data/people", account_name="acct") == (spec.get_namespace(), spec.get_name())


# -- events ------------------------------------------------------------------------------------------------
def test_snapshot_replay_emits_the_table_with_schema_version_and_assertions(tmp_path: Path) -> None:
    b = _table(tmp_path)
    op = _in_dag(SnapshotReplayOperator, task_id="replay", table_uri=b.path, checks={"min_files": 1, "max_files": 5})
    op.execute(task_context(tmp_path))
    event = _event(op, tmp_path)
    assert event["eventType"] == "COMPLETE" and event["outputs"] == []
    (dataset,) = event["inputs"]
    assert (dataset["namespace"], dataset["name"]) == ("file", b.path)
    facets = dataset["facets"]
    assert _schema(dataset) == EXPECTED_SCHEMA
    assert facets["version"]["datasetVersion"] == "4"
    assert facets["storage"] == {**facets["storage"], "storageLayer": "delta", "fileFormat": "parquet"}
    assert facets["datasetType"]["datasetType"] == "TABLE"
    assert facets["documentation"]["description"] == "People we know"
    assert all(f["_schemaURL"].startswith("https://openlineage.io/spec/facets/") for f in facets.values())
    quality = dataset["inputFacets"]
    assert (quality["dataQualityMetrics"]["fileCount"], quality["dataQualityMetrics"]["bytes"]) == (2, 203)
    assertions = {a["assertion"]: a["success"] for a in quality["dataQualityAssertions"]["assertions"]}
    assert assertions == {"min_files": True, "max_files": True}
    operation = event["run"]["facets"]["delta_operation"]
    assert operation["operation"] == "SNAPSHOT_REPLAY" and operation["tableVersion"] == 4
    assert operation["details"]["num_files"] == 2 and operation["engine"] == "local"
    assert event["job"]["facets"]["jobType"]["jobType"] == "TASK"  # the provider's own job facet stays


def test_maintenance_operations_are_what_they_are(tmp_path: Path) -> None:
    """A checkpoint and a log cleanup read the table (an input, schema read from the log's checkpoint) and
    change no data: no output dataset; the operation and its counts are the `delta_operation` run facet."""
    b = _table(tmp_path)
    b.append(["p9.parquet"], size=9, partition={"day": "2024-02-01"})  # version 5, after the checkpoint
    runs = {  # the plan first: the checkpoint drops the expired tombstone, as Delta's checkpoints do
        "plan": _in_dag(TombstoneReportOperator, task_id="plan", table_uri=b.path, retention_hours=0),
        "checkpoint": _in_dag(DeltaCheckpointOperator, task_id="checkpoint", table_uri=b.path),
        "cleanup": _in_dag(DeltaLogCleanupOperator, task_id="cleanup", table_uri=b.path),
    }
    events = {}
    for name, op in runs.items():
        op.execute(task_context(tmp_path))
        events[name] = _event(op, tmp_path)
    for event in events.values():
        (dataset,) = event["inputs"]
        assert event["outputs"] == [] and dataset["name"] == b.path
        assert _schema(dataset) == EXPECTED_SCHEMA and dataset["facets"]["version"]["datasetVersion"] == "5"
    checkpoint = events["checkpoint"]["run"]["facets"]["delta_operation"]
    assert checkpoint["operation"] == "CHECKPOINT" and checkpoint["tableVersion"] == 5
    assert checkpoint["details"]["written"] is True and checkpoint["details"]["kind"] == "classic"
    cleanup = events["cleanup"]["run"]["facets"]["delta_operation"]
    assert cleanup["operation"] == "LOG_CLEANUP" and cleanup["dryRun"] is True and cleanup["details"]["deleted"] == 0
    plan = events["plan"]["run"]["facets"]["delta_operation"]
    assert plan["operation"] == "TOMBSTONE_REPORT" and plan["details"]["expired"] == 1


def test_a_failed_check_is_a_failed_assertion_in_the_fail_event(tmp_path: Path) -> None:
    b = _table(tmp_path)
    op = _in_dag(SnapshotReplayOperator, task_id="replay", table_uri=b.path, checks={"max_files": 1})
    with pytest.raises(DeltaCheckFailed):
        op.execute(task_context(tmp_path))
    event = _event(op, tmp_path, TaskInstanceState.FAILED)
    assert event["eventType"] == "FAIL"
    (dataset,) = event["inputs"]
    (assertion,) = dataset["inputFacets"]["dataQualityAssertions"]["assertions"]
    assert assertion["assertion"] == "max_files" and assertion["success"] is False
    assert assertion["actual"] == "2" and assertion["expected"] == "1"


def test_no_lineage_without_a_job_or_without_openlineage(tmp_path: Path) -> None:
    b = _table(tmp_path)
    assert (
        _in_dag(SnapshotReplayOperator, task_id="r", table_uri=b.path).get_openlineage_facets_on_complete(None) is None
    )
    # A fresh interpreter where the OpenLineage client cannot be imported: the operators import, run, and
    # answer None (the provider's listener is what calls them, and it is absent there too).
    code = f"""
import sys
sys.modules["openlineage"] = None
from airflow_delta_provider.operators.delta import SnapshotReplayOperator
op = SnapshotReplayOperator(task_id="r", table_uri={b.path!r}, submit=False)
assert op.execute({{"ti": None, "run_id": "r"}})["version"] == 4
assert op.get_openlineage_facets_on_complete(None) is None
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-2000:]


def test_the_lineage_module_is_imported_only_when_lineage_is_asked_for() -> None:
    """(The Spark provider's operator module imports the OpenLineage provider itself when it is installed;
    this provider's lineage code and its facet classes load only when a listener asks.)"""
    code = "import sys, airflow_delta_provider.operators.delta; print('airflow_delta_provider.lineage' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip().splitlines()[-1] == "False", proc.stderr[-2000:]
