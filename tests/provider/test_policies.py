"""The retry policy reads our typed errors (raised in the worker or wrapped by a job) and Airflow acts on it in
a real task run; the example maintenance DAG carries it and a DeadlineAlert whose callback fires."""

from __future__ import annotations

from datetime import timedelta

import pytest

pytest.importorskip("airflow.sdk.definitions.retry_policy")  # Airflow 3.3+

from airflow.sdk import RetryAction

from airflow_delta_provider.delta import errors
from airflow_delta_provider.hooks.job import DeltaJobError
from airflow_delta_provider.policies import PERMANENT, delta_retry_policy

pytestmark = pytest.mark.airflow

POLICY = delta_retry_policy(conflict_delay=timedelta(seconds=7), storage_delay=timedelta(minutes=3))


def _wrapped(error: errors.DeltaError) -> DeltaJobError:
    return DeltaJobError(error, error.to_dict())


@pytest.mark.parametrize("wrap", [False, True], ids=["raised", "from-a-job"])
@pytest.mark.parametrize(
    ("error", "action", "delay"),
    [
        (errors.ConcurrentAppendError("files were added", table="t", version=4), RetryAction.RETRY, 7),
        (errors.CommitRetriesExceededError("gave up", table="t"), RetryAction.RETRY, 7),
        (errors.StorageError("503 SlowDown", table="s3://b/t"), RetryAction.RETRY, 180),
        (errors.BucketNotFoundError("no such bucket", table="s3://b/t"), RetryAction.FAIL, None),
        (errors.UnsupportedFeatureError("needs columnMapping", table="t"), RetryAction.FAIL, None),
        (errors.InvalidArgumentError("retention_hours: 'abc'", table="t"), RetryAction.FAIL, None),
        (errors.RetentionConflictError("log retention below file retention", table="t"), RetryAction.FAIL, None),
        (errors.LogGapError("missing 00003.json", table="t", version=3), RetryAction.FAIL, None),
        (errors.EngineError("executor lost", table="t"), RetryAction.DEFAULT, None),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Exception) else None,
)
def test_typed_errors_decide_the_retry(error: errors.DeltaError, action: RetryAction, delay: int | None, wrap: bool):
    decision = POLICY.evaluate(_wrapped(error) if wrap else error, try_number=1, max_tries=3)
    assert decision.action is action
    assert decision.retry_delay == (None if delay is None else timedelta(seconds=delay))
    if action is not RetryAction.DEFAULT:
        assert decision.reason


def test_other_exceptions_keep_airflows_default():
    assert POLICY.evaluate(RuntimeError("boom"), try_number=1, max_tries=3).action is RetryAction.DEFAULT
    assert POLICY.evaluate(DeltaJobError.__new__(DeltaJobError), 1, 3).action is RetryAction.DEFAULT  # no .error


def test_every_permanent_error_is_a_delta_error_and_no_conflict_is_permanent():
    assert all(issubclass(cls, errors.DeltaError) for cls in PERMANENT)
    assert not any(issubclass(cls, errors.ConcurrentModificationError) for cls in PERMANENT)


DAG_FILE = """
from datetime import timedelta
from pathlib import Path

from airflow.sdk import dag, task

from airflow_delta_provider.delta import errors
from airflow_delta_provider.policies import delta_retry_policy

MARKER = Path({marker!r})
FAST = delta_retry_policy(conflict_delay=timedelta(seconds=0))


@dag(dag_id="delta_retry_policy_test", schedule=None, catchup=False)
def retry_dag():
    @task(retries=3, retry_policy=FAST, retry_delay=timedelta(seconds=0))
    def conflicting() -> str:
        if not MARKER.exists():
            MARKER.write_text("1")
            raise errors.ConcurrentWriteError("another writer took version 5", table="t", version=5)
        return "committed"

    @task(retries=3, retry_policy=FAST, retry_delay=timedelta(seconds=0))
    def unsupported() -> None:
        raise errors.UnsupportedFeatureError("the table needs a reader feature", table="t")

    conflicting()
    unsupported()


retry_dag()
"""


def test_airflow_retries_a_conflict_and_fails_an_unsupported_feature_at_once(airflow_db, tmp_path):
    """Two real tasks through `dag.test()`: the conflict is retried (and succeeds on try 2), the unsupported
    feature fails on try 1 although the task has 3 retries."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState
    from conftest import metadata_db

    path = tmp_path / "retry_dag.py"
    path.write_text(DAG_FILE.format(marker=str(tmp_path / "tried")))
    bag = DagBag(dag_folder=str(path))
    assert bag.import_errors == {}
    with create_session() as session:
        DagBundlesManager().sync_bundles_to_db(session=session)
    sync_bag_to_db(bag, "dags-folder", None)  # dag.test() runs only serialized DAGs
    run = bag.dags["delta_retry_policy_test"].test()
    assert run.state == DagRunState.FAILED
    rows = {
        task_id: (state, tries)
        for task_id, state, tries in metadata_db().execute(
            "SELECT task_id, state, try_number FROM task_instance WHERE dag_id = ? AND run_id = ?",
            ("delta_retry_policy_test", run.run_id),
        )
    }
    assert rows["conflicting"] == ("success", 2)
    assert rows["unsupported"] == ("failed", 1)


def test_the_maintenance_dag_retries_by_the_policy():
    from airflow.dag_processing.dagbag import DagBag
    from conftest import REPO

    bag = DagBag(dag_folder=str(REPO / "dags" / "delta_table_maintenance.py"))
    dag = bag.dags["delta_table_maintenance"]
    for task_id in ("replay_and_check", "optimize", "vacuum_plan", "vacuum_apply", "checkpoint", "log_cleanup"):
        t = dag.get_task(task_id)
        assert t.retries == 2 and type(t.retry_policy).__name__ == "DeltaRetryPolicy", task_id
    for task_id in ("choose_partitions", "approve_vacuum"):  # a person's answer is not retried
        assert not getattr(dag.get_task(task_id), "retry_policy", None), task_id


def test_a_maintenance_run_past_its_deadline_calls_maintenance_overran(
    airflow_db: str, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The example maintenance DAG's DeadlineAlert (DELTA_MAINTENANCE_DEADLINE_HOURS, default 22) through
    Airflow's own code, without dag.test() (Airflow 3.3.1's fails a successful run of a DAG with a deadline:
    `maintenance_deadline` in the DAG): the DAG written as the dag processor writes it, a run created queued as
    the scheduler creates it (Airflow adds its deadline row), the deadline moved into the past as if 22 hours
    had gone by, the scheduler loop's missed-deadline step (its query, `Deadline.handle_miss`), then the
    trigger the triggerer would run (`CallbackTrigger`), here awaited in this process, and its events handled
    as the triggerer hands them back: `policies.maintenance_overran` ran and its result is the callback's output."""
    import asyncio

    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
    from airflow.models import Deadline
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.sdk import timezone
    from airflow.triggers.base import TriggerEvent
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState
    from airflow.utils.types import DagRunTriggeredByType, DagRunType
    from conftest import REPO
    from sqlalchemy import select

    monkeypatch.setenv("DELTA_SPARK_CONN_ID", "none")
    monkeypatch.setenv("DELTA_RESULT_DIR", str(tmp_path / "results"))
    monkeypatch.delenv("DELTA_MAINTENANCE_DEADLINE_HOURS", raising=False)
    # write this DAG now even if another test wrote it less than 30 s ago (the dag processor's throttle)
    monkeypatch.setenv("AIRFLOW__CORE__MIN_SERIALIZED_DAG_UPDATE_INTERVAL", "0")
    bag = DagBag(dag_folder=str(REPO / "dags" / "delta_table_maintenance.py"))
    assert bag.import_errors == {}
    (alert,) = bag.dags["delta_table_maintenance"].deadline
    assert alert.interval == timedelta(hours=22)
    with create_session() as session:
        DagBundlesManager().sync_bundles_to_db(session=session)
    sync_bag_to_db(bag, "dags-folder", None)

    with create_session() as session:
        dag = SerializedDagModel.get_dag("delta_table_maintenance", session=session)
        assert [type(a) for a in dag.deadline] == [str]  # the alert's row id, as the scheduler reads it
        now = timezone.utcnow()
        run = dag.create_dagrun(
            run_id=f"manual__deadline_{now.timestamp()}",
            logical_date=now,
            data_interval=(now, now),
            run_after=now,
            run_type=DagRunType.MANUAL,
            triggered_by=DagRunTriggeredByType.TEST,
            state=DagRunState.QUEUED,
            session=session,
        )
        session.flush()  # (Airflow sessions do not autoflush)
        (deadline,) = session.scalars(select(Deadline).where(Deadline.dagrun_id == run.id)).all()
        assert deadline.deadline_time == run.queued_at + timedelta(hours=22) and not deadline.missed
        deadline.deadline_time = now - timedelta(minutes=1)  # 22 hours later
        session.flush()
        # the scheduler loop's step (SchedulerJobRunner._run_scheduler_loop): every unhandled deadline passed
        for missed in session.scalars(
            select(Deadline).where(Deadline.deadline_time < timezone.utcnow()).where(~Deadline.missed)
        ):
            missed.handle_miss(session)
        session.flush()
        assert deadline.missed
        callback = deadline.callback
        trigger = callback.trigger  # what the triggerer picks up
        assert trigger.classpath == "airflow.triggers.callback.CallbackTrigger"
        kwargs = trigger.kwargs
        assert kwargs["callback_path"] == "airflow_delta_provider.policies.maintenance_overran"

        from airflow.triggers.callback import CallbackTrigger

        async def events() -> list[TriggerEvent]:
            return [e async for e in CallbackTrigger(**kwargs).run()]

        for event in asyncio.run(events()):
            callback.handle_event(event, session)
        assert callback.state == "success", callback.output
        assert callback.output.startswith(f"Delta maintenance run {run.run_id} of delta_table_maintenance (")
        assert "queued) is past its deadline" in callback.output
        session.delete(deadline)  # the run is left for no other test: max_active_runs=1
        session.delete(run)
