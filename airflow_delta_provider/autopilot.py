"""The lake autopilot as one Airflow DAG: discover a lake's Delta tables, plan their maintenance within a budget
(`delta.lake`), ask a person only about what the policy says needs one, run each table's work in its own mapped
task group, prove every rewrite changed no row, and append what happened to the maintenance history table.

    discover -> plan -> approval_needed -> approve (HITL, Airflow 3.1+) | no_approval_needed
             -> approved_work -> table[i]: optimize -> vacuum -> checkpoint -> log_cleanup -> prove  (mapped)
             -> record (one commit to the history table, whatever the tables' outcome, with each scanned
                table's health at plan time)

A table's tasks run in order and only do what was planned for it (a step with nothing planned returns at once);
its failure fails that table's tasks only; `record` still writes every table's rows (errors included). VACUUM
applies exactly the plan it made a moment before (`vacuum(plan=...)`). `params.approve=true` (or a policy
without `never_unattended`) runs everything unattended.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from airflow.exceptions import AirflowOptionalProviderFeatureException
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Param, get_current_context, task, task_group

from .delta.errors import DeltaError
from .delta.lake import Budget, LakePolicy, discover, load_policy, parse_policy, plan, scan
from .delta.lake.history import health_row, record_runs
from .delta.lake.run import STEPS, prove_versions, run_task, with_proofs

try:  # human-in-the-loop operators: Airflow 3.1+ (the module refuses to import before)
    from airflow.providers.standard.operators.hitl import ApprovalOperator
except (ImportError, AirflowOptionalProviderFeatureException):  # pragma: no cover - Airflow < 3.1
    ApprovalOperator = None
try:
    from airflow.sdk.exceptions import AirflowSkipException
except ImportError:  # pragma: no cover - Airflow 3.0
    from airflow.exceptions import AirflowSkipException

#: Each table task's XCom key for its history row (read by `record` per map index, failed tasks included).
ROW_KEY = "history_row"


def _retry_kwargs(retries: int) -> dict[str, Any]:
    """Retries read through the Delta retry policy (Airflow 3.3+); none before it."""
    try:
        from .policies import delta_retry_policy
    except ImportError:  # pragma: no cover - Airflow < 3.3
        return {}
    return {"retries": retries, "retry_policy": delta_retry_policy()} if retries else {}


def spark_engines(
    master: str | None,
    storage_options: Mapping[str, Any] | None = None,
    *,
    conf: Mapping[str, str] | None = None,
    app_name: str = "delta_lake_autopilot",
) -> dict[str, Callable[[], Any]]:
    """`engines=` for the plan's "spark" tables: a `SparkEngine` on the session `master` names
    (`commands.spark_session`: `local[...]`, `spark://...`, `yarn`, `k8s://...`, or `sc://host:port` for Spark
    Connect, this package shipped to its executors), made when a table's task runs (a classic session is
    the worker process's own, `getOrCreate`). A log under the command layer's auto threshold is replayed on
    the driver; the rewrites, VACUUM's listing and the checkpoint's writing run on the executors. None or ""
    master: no engine (a table planned on "spark" then fails its own tasks, naming `engines`)."""
    if not master:
        return {}
    options = dict(storage_options or {})

    def make() -> Any:
        from .commands.request import DEFAULT_AUTO_THRESHOLD_MB
        from .commands.spark_session import is_connect_master, spark_session
        from .delta.engines.spark import SparkEngine

        py_files: list[str] = []
        if is_connect_master(master):
            from .jobs import build_py_files_zip

            py_files = [build_py_files_zip()]
        spark = spark_session(master, options, app_name=app_name, py_files=py_files, conf=conf)
        threshold = int(DEFAULT_AUTO_THRESHOLD_MB * 1024 * 1024)
        return SparkEngine(spark, storage_options=options, driver_state_max_bytes=threshold)

    return {"spark": make}


def _label(group: Mapping[str, Any]) -> None:
    """Name the mapped task instance after its table (`map_index_template`)."""
    get_current_context()["table_label"] = group["table_uri"]  # type: ignore[typeddict-unknown-key]


def _step(
    group: Mapping[str, Any],
    operation: str,
    clock: Callable[[], int] | None,
    options: Mapping[str, Any],
    engines: Mapping[str, Callable[[], Any]] | None = None,
) -> dict[str, Any]:
    """Run the table's planned `operation` (nothing when none is planned), pushing its history row to XCom
    before any error propagates, so that `record` reads failed steps too."""
    _label(group)
    task_ = next((t for t in group["tasks"] if t["operation"] == operation), None)
    if task_ is None:
        return {"table": group["table_uri"], "operation": operation, "status": "not_planned"}
    ti = get_current_context()["ti"]
    return run_task(
        group["table_uri"],
        task_,
        clock=clock,
        storage_options=options,
        on_row=lambda r: ti.xcom_push(ROW_KEY, r),
        engines=engines,
    )


def lake_autopilot_dag(
    dag_id: str,
    prefixes: Sequence[str] | str,
    *,
    history_uri: str,
    tables: Sequence[str] = (),
    policy: LakePolicy | Mapping[str, Any] | str | None = None,
    budget: Budget | Mapping[str, Any] | None = None,
    max_depth: int = 4,
    verify: str = "counts",
    storage_options: Mapping[str, Any] | None = None,
    pool: str | None = None,
    retries: int = 2,
    approval_timeout: dt.timedelta = dt.timedelta(hours=20),
    clock: Callable[[], int] | None = None,
    engines: Mapping[str, Callable[[], Any]] | None = None,
    spark_master: str | None = None,
    **dag_kwargs: Any,
) -> DAG:
    """The autopilot DAG over the lake under `prefixes` (plus `tables`), its history appended at `history_uri`.

    :param policy: a `LakePolicy`, a policy document (a mapping), a policy file's URI (YAML or JSON), or None
        (Delta's table properties).
    :param budget: a `Budget` or its keywords (`bytes`, `requests`, `seconds`, `parallelism`); None: unlimited.
    :param verify: the row proof of each rewrite: "counts" (from the log) or "content" (reads the rows).
    :param pool: the Airflow pool the per-table tasks run in (bounds how many tables run at once).
    :param clock: epoch ms for the plan and the drivers (tests move time; default: the system clock).
    :param engines: engines by the name the plan gives a table (`{"spark": lambda: SparkEngine(spark)}`, made in
        the task that runs it): a policy's `spark_min_files` puts tables with that many active files on
        "spark"; the others run on the local engine. A table planned on an engine not given fails its own tasks.
    :param spark_master: the "spark" engine's master when `engines` names none (`spark_engines`).
    """
    prefix_list = [prefixes] if isinstance(prefixes, str) else list(prefixes)
    options = dict(storage_options or {})
    engines = {**spark_engines(spark_master, options), **(engines or {})}
    budget_ = Budget(**budget) if isinstance(budget, Mapping) else budget
    dag_kwargs = {"schedule": None, "catchup": False, "max_active_runs": 1, **dag_kwargs}
    params = {"approve": Param(False, type="boolean", description="run what needs approval without asking")}
    table_kwargs: dict[str, Any] = {"map_index_template": "{{ table_label }}", **_retry_kwargs(retries)}
    if pool:
        table_kwargs["pool"] = pool

    with DAG(dag_id, params=params, **dag_kwargs) as dag:

        @task
        def discover_tables() -> dict[str, Any]:
            """The lake's tables (a prefix's or table's error is an entry, never the task's failure)."""
            found = discover(prefix_list, tables=list(tables), max_depth=max_depth, storage_options=options)
            return {"tables": list(found.tables), "errors": list(found.errors)}

        @task
        def plan_work(found: dict[str, Any]) -> dict[str, Any]:
            """Each table's health from its log, planned within the budget: the work grouped per table."""
            if isinstance(policy, Mapping):
                lake_policy = parse_policy(policy)
            else:
                lake_policy = policy if isinstance(policy, LakePolicy) else load_policy(policy, options)
            now_ms = clock() if clock else int(time.time() * 1000)
            result = scan(found["tables"], policy=lake_policy, storage_options=options, now_ms=now_ms)
            lake_plan = plan(result.healths, budget_, errors=[*found["errors"], *result.errors])
            tables_ = sorted({t.table for t in lake_plan.tasks})
            groups = [{"table_uri": t, "tasks": [x.to_dict() for x in lake_plan.for_table(t)]} for t in tables_]
            return {
                "groups": groups,
                "health": [health_row(h) for h in result.healths],  # each table at plan time, for the history
                "needs_approval": [t.to_dict() for t in lake_plan.tasks if t.needs_approval],
                "deferred": len(lake_plan.deferred),
                "errors": lake_plan.errors,
            }

        @task.branch
        def approval_needed(planned: dict[str, Any]) -> str:
            ask = bool(planned["needs_approval"]) and not get_current_context()["params"]["approve"]
            return "approve" if ask else "no_approval_needed"

        if ApprovalOperator is not None:
            approve = ApprovalOperator(
                task_id="approve",
                subject="Lake autopilot {{ dag.dag_id }}: run "
                "{{ ti.xcom_pull(task_ids='plan_work')['needs_approval'] | length }} task(s) that need approval?",
                body="{% for t in ti.xcom_pull(task_ids='plan_work')['needs_approval'] %}"
                "- {{ t.operation }} of `{{ t.table }}`: {{ t.reason }}\n{% endfor %}",
                defaults="Reject",
                response_timeout=approval_timeout,
            )
        else:  # pragma: no cover - Airflow < 3.1

            @task(task_id="approve")
            def approval_unavailable() -> None:
                raise AirflowSkipException("approval needs Airflow 3.1+: the work that needs it is not run")

            approve = approval_unavailable().operator
        # a Reject skips the approver's direct downstream only: this gate, not approved_work
        approval_gate = EmptyOperator(task_id="approval_gate")
        no_approval = EmptyOperator(task_id="no_approval_needed")

        @task(trigger_rule="none_failed_min_one_success")
        def approved_work(planned: dict[str, Any]) -> list[dict[str, Any]]:
            """The groups to run: a task needing approval only when approved (or `params.approve`)."""
            context = get_current_context()
            approved = bool(context["params"]["approve"]) or bool(context["ti"].xcom_pull(task_ids="approve"))
            out = []
            for group in planned["groups"]:
                kept = [t for t in group["tasks"] if approved or not t["needs_approval"]]
                if kept:
                    out.append({"table_uri": group["table_uri"], "tasks": kept})
            return out

        @task(**table_kwargs)
        def optimize_table(group: dict[str, Any]) -> dict[str, Any]:
            return _step(group, "optimize", clock, options, engines)

        @task(**table_kwargs)
        def vacuum_table(group: dict[str, Any], optimized: dict[str, Any]) -> dict[str, Any]:
            return _step(group, "vacuum", clock, options, engines)

        @task(**table_kwargs)
        def checkpoint_table(group: dict[str, Any], vacuumed: dict[str, Any]) -> dict[str, Any]:
            return _step(group, "checkpoint", clock, options, engines)

        @task(**table_kwargs)
        def log_cleanup_table(group: dict[str, Any], checkpointed: dict[str, Any]) -> dict[str, Any]:
            return _step(group, "log_cleanup", clock, options, engines)

        @task(**table_kwargs)
        def prove(group: dict[str, Any], optimized: dict[str, Any], cleaned: dict[str, Any]) -> dict[str, Any]:
            """The row proof of each OPTIMIZE commit; a mismatch fails the task (and is recorded)."""
            _label(group)
            proofs: list[dict[str, Any]] = []
            try:
                versions = optimized.get("versions") or ()
                proofs = prove_versions(group["table_uri"], versions, verify=verify, storage_options=options)
            except DeltaError as exc:
                proofs.append({"status": "mismatch", "error_class": type(exc).__name__, "error": str(exc)})
                raise
            finally:
                get_current_context()["ti"].xcom_push(key="proofs", value=proofs)
            return {"table": group["table_uri"], "proofs": proofs}

        @task_group(group_id="table")
        def table_work(group: dict[str, Any]) -> Any:
            optimized = optimize_table(group)
            vacuumed = vacuum_table(group, optimized)
            checkpointed = checkpoint_table(group, vacuumed)
            cleaned = log_cleanup_table(group, checkpointed)
            return prove(group, optimized, cleaned)

        @task(trigger_rule="all_done")
        def record(planned: dict[str, Any] | None, groups: list[dict[str, Any]] | None) -> dict[str, Any]:
            """Every table's rows (done, failed, proof status) and the plan's errors: one commit to the history."""
            context = get_current_context()
            ti, run_id = context["ti"], context["run_id"]
            rows: list[dict[str, Any]] = []
            for i, _group in enumerate(groups or []):
                proofs = ti.xcom_pull(task_ids="table.prove", key="proofs", map_indexes=i) or []
                for op in STEPS:
                    row = ti.xcom_pull(task_ids=f"table.{op}_table", key=ROW_KEY, map_indexes=i)
                    if row:
                        rows.append(with_proofs(row, proofs) if op == "optimize" else dict(row))
            rows += [dict(h) for h in (planned or {}).get("health") or []]
            now = dt.datetime.now(dt.UTC).isoformat()
            for e in (planned or {}).get("errors") or []:
                rows.append(
                    {
                        "table": e.get("table") or e.get("prefix"),
                        "operation": "scan",
                        "status": "failed",
                        "started": now,
                        "ended": now,
                        "error_class": e.get("error_class"),
                        "error_message": (e.get("message") or e.get("error") or "")[:2000] or None,
                    }
                )
            for row in rows:
                row.update(run_id=run_id, dag_id=dag.dag_id)
            version = record_runs(history_uri, rows, storage_options=options)
            return {"history_version": version, "rows": len(rows)}

        found = discover_tables()
        planned = plan_work(found)
        branch = approval_needed(planned)
        branch >> [approve, no_approval]
        approve >> approval_gate
        work = approved_work(planned)
        [approval_gate, no_approval] >> work
        table_work.expand(group=work) >> record(planned, work)
    return dag
