"""The example autopilot DAG (`dags/delta_lake_autopilot.py`) with DELTA_LAKE_SPARK_MASTER set: a policy whose
`spark_min_files` is low puts the bigger table on "spark", and its mapped OPTIMIZE runs on a `SparkEngine` over a
local[2] session (the suite's shared one: the DAG's `spark_session("local[2]")` gets it), the smaller table's on
the local engine; both rewrites are proved, the history names each step's engine and each table's health.

Real components: delta-rs tables, the DAG file parsed by a DagBag, `dag.test()`, Spark in this process.

Lean by sharing: the Spark session (`support.spark_cluster.local_session`, left running by the Spark modules
before this one) and the migrated Airflow DB (`airflow_db`, session-scoped) are the suite's; two tables of 5 and
3 two-row files. After those modules (the suite's order) it took 5-16 s at loads 4-11; alone it also pays the
JVM's start, the DB migration and the first `dag.test()`'s imports."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

pytest.importorskip("airflow")
pytest.importorskip("deltalake")
pytest.importorskip("pyspark")

from conftest import task_states, xcom_return
from deltalake import DeltaTable, write_deltalake

from airflow_delta_provider.delta import DeltaLog

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow]

DAG_FILE = Path(__file__).resolve().parents[2] / "dags" / "delta_lake_autopilot.py"


def _append(path: Path, n: int) -> None:
    for i in range(n):
        write_deltalake(str(path), pa.table({"x": [i, i + 1]}), mode="append")


def _rows(path: Path) -> list[int]:
    DeltaLog.clear_cache()
    return sorted(r["x"] for r in DeltaTable(str(path)).to_pyarrow_table().to_pylist())


@pytest.fixture(scope="module")
def spark():
    """The suite's shared local[2] session (started by the first Spark module, left running)."""
    from support.spark_cluster import local_session

    return local_session("delta-lake-autopilot-tests")


def test_the_example_dag_runs_the_big_tables_on_spark(
    airflow_db: str, spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
    from airflow.utils.session import create_session

    lake = tmp_path / "lake"
    _append(lake / "big", 5)  # 5 active files: on Spark
    _append(lake / "mid", 3)  # 3: compacted too, on the local engine
    expected = {n: _rows(lake / n) for n in ("big", "mid")}
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"defaults": {"min_small_files": 3, "spark_min_files": 4}}))
    history = tmp_path / "history"
    monkeypatch.setenv("DELTA_LAKE_PREFIXES", str(lake))
    monkeypatch.setenv("DELTA_LAKE_POLICY", str(policy))
    monkeypatch.setenv("DELTA_LAKE_HISTORY_URI", str(history))
    monkeypatch.setenv("DELTA_LAKE_SPARK_MASTER", "local[2]")

    jobs_before = set(spark.sparkContext.statusTracker().getJobIdsForGroup())
    bag = DagBag(dag_folder=str(DAG_FILE))
    assert bag.import_errors == {}
    with create_session() as session:
        DagBundlesManager().sync_bundles_to_db(session=session)
    sync_bag_to_db(bag, "dags-folder", None)
    run = bag.dags["delta_lake_autopilot"].test(run_conf={"approve": True})

    states = task_states(run.run_id)
    assert states["record"] == "success", states
    groups = {Path(g["table_uri"]).name: g["tasks"] for g in xcom_return(run.run_id, "plan_work")["groups"]}
    assert {n: {(t["operation"], t["engine"]) for t in tasks} for n, tasks in groups.items()} == {
        "big": {("optimize", "spark")},
        "mid": {("optimize", "local")},
    }
    tracker = spark.sparkContext.statusTracker()
    new_jobs = set(tracker.getJobIdsForGroup()) - jobs_before
    stages = {tracker.getStageInfo(s).name for j in new_jobs for s in tracker.getJobInfo(j).stageIds}
    # Spark ran the rewrite, and only it: the log is replayed on the driver (one collect, which adaptive
    # execution runs as the repartition's shuffle job and the result job)
    assert new_jobs and all("engines/spark/optimize.py" in name for name in stages), stages
    for name, rows in expected.items():
        assert _rows(lake / name) == rows and len(DeltaTable(str(lake / name)).file_uris()) == 1
    DeltaLog.clear_cache()
    recorded = DeltaTable(str(history)).to_pyarrow_table().to_pylist()
    steps = {
        (Path(r["table"]).name, r["engine"], r["status"], r["proof"]) for r in recorded if r["operation"] == "optimize"
    }
    assert steps == {("big", "spark", "done", "proven"), ("mid", "local", "done", "proven")}
    health = {Path(r["table"]).name: r["files"] for r in recorded if r["operation"] == "health"}
    assert health == {"big": 5, "mid": 3}  # each table as the plan saw it
