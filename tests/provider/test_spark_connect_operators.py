"""Operators on a `spark_connect` connection (issue 27), through `dag.test()`: the task runs the command
layer in the worker process against a real Spark Connect server on 127.0.0.1 (no spark-submit, no JVM in
the worker), and its answers equal the local engine's on a copy of the same table: the replayed state,
VACUUM's dry-run plan and the files VACUUM deletes. The connection's token never reaches the task log or
XCom. Nothing is mocked."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("airflow")
deltalake = pytest.importorskip("deltalake")
pa = pytest.importorskip("pyarrow")

from conftest import task_states, xcom_return  # noqa: E402
from support import spark_connect  # noqa: E402

#: The pytest session's Connect server (`support.spark_connect`: local[2], 127.0.0.1), shared with other modules.
spark_connect_server = spark_connect.spark_connect_server

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.airflow]

TOKEN = "connect-token-never-logged"

DAG = """
from airflow.sdk import dag

from airflow_delta_provider.operators.delta import DeltaVacuumOperator, SnapshotReplayOperator

RESULTS = {results!r}
KW = dict(table_uri={table!r}, engine="spark", conn_id="spark_connect_test", snapshot_partitions=2, report_formats=())
VACUUM = dict(retention_hours=0, enforce_retention_duration=False)


@dag(dag_id="delta_spark_connect", schedule=None, catchup=False)
def spark_connect_dag():
    replay = SnapshotReplayOperator(task_id="replay", result_uri=f"{{RESULTS}}/replay.json", **KW)
    plan = DeltaVacuumOperator(task_id="plan", result_uri=f"{{RESULTS}}/plan.json", **VACUUM, **KW)
    apply = DeltaVacuumOperator(
        task_id="apply", result_uri=f"{{RESULTS}}/apply.json", dry_run=False, plan=f"{{RESULTS}}/plan.json",
        **VACUUM, **KW,
    )
    replay >> plan >> apply


spark_connect_dag()
"""


def _table(root: Path) -> Path:
    """A tiny delta-rs table: two appends, then an overwrite that removes their files (VACUUM's work)."""
    path = root / "t"
    for i in range(2):
        deltalake.write_deltalake(
            str(path), pa.table({"id": [i, i + 10], "part": ["a", "b"]}), mode="append", partition_by=["part"]
        )
    deltalake.write_deltalake(str(path), pa.table({"id": [7], "part": ["a"]}), mode="overwrite", partition_by=["part"])
    return path


def _result(results: Path, name: str) -> dict[str, Any]:
    return json.loads((results / f"{name}.json").read_text())


def _local(table: Path, action: str, **options: Any) -> dict[str, Any]:
    """The local engine's answer for `action` on `table` (the command layer in this process)."""
    from airflow_delta_provider.commands.command import execute
    from airflow_delta_provider.commands.request import Request

    if action == "vacuum":
        options = {"retention_hours": 0, "enforce_retention_duration": False, **options}
    code, result = execute(Request.make(table=str(table), action=action, engine="local", **options))
    assert code == 0, result
    return result


def _data_files(table: Path) -> list[str]:
    return sorted(str(p.relative_to(table)) for p in table.rglob("*.parquet"))


def test_replay_and_vacuum_over_spark_connect_equal_the_local_engine(
    airflow_db: str, spark_connect_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: Any
) -> None:
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
    from airflow.utils.session import create_session

    # with a token and no use_ssl, pyspark speaks to "localhost" over gRPC's local credentials (any other host
    # name would need TLS); this server does not check it, the task must still never show it
    conn = {"conn_type": "spark_connect", "host": "localhost", "port": spark_connect_server.port, "password": TOKEN}
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CONNECT_TEST", json.dumps(conn))
    spark_connect.stop_classic_session()  # an Airflow worker runs no classic session; this pytest process may
    connect = _table(tmp_path / "connect")
    local = tmp_path / "local" / "t"
    shutil.copytree(connect, local, copy_function=shutil.copy2)
    results = tmp_path / "results"
    path = tmp_path / "spark_connect_dag.py"
    path.write_text(DAG.format(results=str(results), table=str(connect)))
    bag = DagBag(dag_folder=str(path))
    assert bag.import_errors == {}
    with create_session() as session:
        DagBundlesManager().sync_bundles_to_db(session=session)
    sync_bag_to_db(bag, "dags-folder", None)  # dag.test() runs only serialized DAGs
    run = bag.dags["delta_spark_connect"].test()
    assert task_states(run.run_id) == {"replay": "success", "plan": "success", "apply": "success"}
    ran = {name: _result(results, name) for name in ("replay", "plan", "apply")}
    print({name: (r["duration_s"], r["timings"]) for name, r in ran.items()})  # the fixed costs, for the record
    assert {r["engine"] for r in ran.values()} == {"spark"}

    # the replay: the Spark answer over Connect is the local engine's
    mine = _local(local, "snapshot")
    keys = ("version", "num_files", "size_bytes", "num_tombstones", "partition_columns", "protocol", "metadata")
    assert {k: ran["replay"][k] for k in keys} == {k: mine[k] for k in keys}
    assert ran["replay"]["version"] == 2 and ran["replay"]["num_files"] == 1

    # the VACUUM plan: the same files (the four the overwrite removed), the same bytes
    mine = _local(local, "vacuum")
    assert ran["plan"]["dry_run"] is True and ran["plan"]["num_files"] == mine["num_files"] == 4
    assert sorted(f["path"] for f in ran["plan"]["files"]) == sorted(f["path"] for f in mine["files"])
    assert ran["plan"]["bytes"] == mine["bytes"]

    # the plan applied: the same files deleted as the local engine deletes, the active one kept
    mine = _local(local, "vacuum", apply=True)
    assert ran["apply"]["dry_run"] is False and ran["apply"]["deleted"] == mine["deleted"] == 4
    assert ran["apply"]["deleted_bytes"] == mine["deleted_bytes"]
    assert _data_files(connect) == _data_files(local) and len(_data_files(connect)) == 1
    assert deltalake.DeltaTable(str(connect)).to_pyarrow_table().to_pylist() == [{"id": 7, "part": "a"}]

    summary = xcom_return(run.run_id, "apply")
    assert summary["engine"] == "spark" and summary["deleted"] == 4
    captured = capfd.readouterr()
    assert "over Spark Connect at sc://localhost:" in captured.out + captured.err
    assert TOKEN not in captured.out + captured.err
    assert all(TOKEN not in json.dumps(xcom_return(run.run_id, t)) for t in ("replay", "plan", "apply"))
