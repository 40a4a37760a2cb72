"""The driver JVM's quick-start JIT option (`jobs/driver_jvm.py`) and the operators' `quick_start_driver`."""

from __future__ import annotations

import pytest

from airflow_delta_provider.jobs.driver_jvm import QUICK_START, quick_start

KEY = "spark.driver.extraJavaOptions"


@pytest.mark.parametrize(
    ("given", "want"),
    [
        (None, QUICK_START),
        ("", QUICK_START),
        ("  -Dx=1 ", f"-Dx=1 {QUICK_START}"),
        (QUICK_START, QUICK_START),  # idempotent: a re-run operator does not add it twice
        ("-XX:TieredStopAtLevel=4 -Dx=1", "-XX:TieredStopAtLevel=4 -Dx=1"),  # the user's JIT choice stands
        ("-XX:-TieredCompilation", "-XX:-TieredCompilation"),
        ("-Xint", "-Xint"),
    ],
)
def test_quick_start_adds_c1_only_unless_a_jit_is_chosen(given: str | None, want: str) -> None:
    assert quick_start(given) == want


def test_operator_adds_it_by_default_and_can_leave_it_out() -> None:
    pytest.importorskip("airflow")
    from airflow_delta_provider.operators.delta import SnapshotReplayOperator

    on = SnapshotReplayOperator(task_id="on", table_uri="/t")
    assert on._quick_start_conf({KEY: "-Dx=1", "a": "b"}) == {KEY: f"-Dx=1 {QUICK_START}", "a": "b"}
    assert on._quick_start_conf({}) == {KEY: QUICK_START}
    off = SnapshotReplayOperator(task_id="off", table_uri="/t", quick_start_driver=False)
    assert off._quick_start_conf({"a": "b"}) == {"a": "b"}


def test_local_workers_start_through_the_library_daemon_unless_told_otherwise() -> None:
    """`quick_start_workers`: the worker daemon of a `local[*]` master is the library's; a cluster's
    workers may not have the provider before the --py-files arrive, so they keep PySpark's."""
    pytest.importorskip("airflow")
    import sys

    from airflow_delta_provider.jobs import DAEMON_MODULE_CONF, WORKER_DAEMON_MODULE
    from airflow_delta_provider.operators.delta import SnapshotReplayOperator

    on = SnapshotReplayOperator(task_id="on", table_uri="/t")
    local = on._interpreter_conf({"a": "b"}, "local[2]", None)
    assert local == {
        "a": "b",
        "spark.pyspark.driver.python": sys.executable,
        "spark.pyspark.python": sys.executable,
        DAEMON_MODULE_CONF: WORKER_DAEMON_MODULE,
    }
    assert on._interpreter_conf({DAEMON_MODULE_CONF: "mine"}, "local[*]", "client")[DAEMON_MODULE_CONF] == "mine"
    assert on._interpreter_conf({}, "spark://127.0.0.1:7077", "client") == {
        "spark.pyspark.driver.python": sys.executable
    }
    assert on._interpreter_conf({}, "yarn", "cluster") == {}
    # workers on another Python may not have the provider: PySpark's daemon stays
    other = on._interpreter_conf({"spark.pyspark.python": "/opt/py/bin/python"}, "local[2]", None)
    assert DAEMON_MODULE_CONF not in other and other["spark.pyspark.python"] == "/opt/py/bin/python"
    off = SnapshotReplayOperator(task_id="off", table_uri="/t", quick_start_workers=False)
    assert DAEMON_MODULE_CONF not in off._interpreter_conf({}, "local[2]", None)
