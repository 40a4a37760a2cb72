"""Keep one Delta table in shape: check what changed, compact small files, plan VACUUM and apply it only on
a human's approval (into a quarantine a human can undo), checkpoint when the log is behind, clean up the log,
report.

    replay_and_check   SnapshotReplayOperator: every data version since the one the previous run checked
                       (OPTIMIZE and VACUUM commits change no data: skipped by the per-commit checks);
                       it leases the version it checked (params.lease_ttl, default 24h): this run's VACUUM
                       and log cleanup keep what that version reads; report releases the lease
      -> optimize_conditions   whether OPTIMIZE may rewrite files in this run; every condition with its
                               numbers in its XCom, and all must hold:
                                 params.optimize is true;
                                 threshold: the table's small-file ratio (replay_and_check) is at least
                                   params.optimize_min_small_file_ratio;
                                 new files: at least params.optimize_min_new_files data files were added
                                   since the last OPTIMIZE;
                                 interval: the last OPTIMIZE is at least params.optimize_min_interval_hours
                                   old (or there is none)
      -> choose_partitions   PartitionChoiceOperator (HITLOperator, Airflow 3.1+): asks only when
                             optimize_conditions holds, params.optimize_ask_partitions is true (default false:
                             runs stay unattended) and OPTIMIZE plans two partitions or more; else returns at
                             once. Options made when it runs: one per planned partition with its small files
                             and bytes, all preselected (multiple choice), and "none"; "none" or no answer
                             within 4 hours compacts nothing
      -> optimize        DeltaOptimizeOperator: compact the partitions where at least
                         params.optimize_min_small_file_ratio of the files are small (a dataChange=false
                         commit; deletes nothing), only the chosen ones (a partition `where`), when
                         optimize_conditions says so (and the person chose some); else only plans (a dry run:
                         what it would compact)
      -> vacuum_plan     DeltaVacuumOperator dry run, FULL mode: the files no version within retention
                         (nor a live lease) needs, listed from the table (after optimize: its replaced files
                         are tombstones), and what moving them to a quarantine costs
      -> vacuum_approval_needed   branch: params.apply_vacuum and the plan has files?
           -> approve_vacuum   VacuumApprovalOperator (ApprovalOperator, Airflow 3.1+): the plan's counts,
                               bytes, cutoff and report, and its retention to confirm (form field
                               retention_hours). Reject (or no answer within 16 hours) skips vacuum_apply. The
                               safe design for the retention: the plan's applies that plan; a longer one plans
                               VACUUM again at it and keeps only the files of the plan shown (never more than
                               the person saw); a shorter one would delete files not shown, so it is refused
                               (vacuum_apply skipped, the reason in the report): run again with
                               params.retention_hours set to it, which plans and asks again
                -> vacuum_apply    DeltaVacuumOperator(dry_run=False, plan=approve_vacuum's confirmed plan,
                                   quarantine=True): exactly that plan, re-validated against the table
                                   first, its files moved to <table>/_delta_quarantine/<id>/, not deleted:
                                   its XCom names the quarantine (quarantine_id) for an undo
                                   (DeltaVacuumUndoOperator, or `deltalog vacuum undo TABLE ID`)
           -> vacuum_not_applied
      -> vacuum_purge    DeltaVacuumPurgeOperator: delete the quarantines older than
                         params.quarantine_retention_hours (168: a week); a dry run unless params.apply_vacuum
      -> checkpoint_needed   branch: versions since the last checkpoint >= params.checkpoint_interval,
                             counted at the latest version (optimize and VACUUM commit versions too)?
           -> checkpoint         DeltaCheckpointOperator, at that latest version
           -> checkpoint_not_needed
      -> log_cleanup     DeltaLogCleanupOperator: a dry run unless params.apply_log_cleanup
      -> report          one summary of the run (and each task links to its full result: "Delta report");
                         releases replay_and_check's lease

Runs daily, right away when unpaused (`run_immediately`), and on each new data version the health DAG's
sensor records (the table's asset; its own OPTIMIZE and VACUUM commits change no data, so they trigger no
run). A run plans and changes nothing until its conditions hold: OPTIMIZE only plans unless
optimize_conditions holds, VACUUM only plans unless a human approves, a checkpoint is written only
params.checkpoint_interval versions after the last one, the log cleanup only plans unless asked. OPTIMIZE
rewrites small files into bigger ones but deletes nothing (readers see the same rows; the old files stay
for time travel). Data files leave the table only when a run asks and a human approves: `airflow dags test
delta_table_maintenance -c '{"apply_vacuum": true}'`, then answer `approve_vacuum` in the UI (Required
Actions) or the REST API (`PATCH .../taskInstances/approve_vacuum/-1/hitlDetails`); they are moved into a
quarantine, and deleted for good only by a later run's vacuum_purge (with apply_vacuum) once the quarantine
is older than params.quarantine_retention_hours. Until then `deltalog vacuum undo TABLE QUARANTINE_ID` (or a
DeltaVacuumUndoOperator task) puts them back. The quarantine moves run in the worker process (the local
engine): one rename per file on a local or HDFS table, a server-side copy and a delete on object stores.
Log files are deleted only with `{"apply_log_cleanup": true}`. On Airflow before 3.1 (no human-in-the-loop operators)
`approve_vacuum` skips itself, saying so, and VACUUM is never applied.

A run still going DELTA_MAINTENANCE_DEADLINE_HOURS (default 22; `none`: no alert) after it was queued
calls airflow_delta_provider.policies.maintenance_overran in the triggerer (a DeadlineAlert); the two
questions time out (4 + 16 hours) before it. Not under `airflow dags test` (see maintenance_deadline).

Configured by environment, as delta_table_health.py: DELTA_EXAMPLE_TABLE_URI (the table),
DELTA_RESULT_DIR (where full results and reports go), DELTA_SPARK_CONN_ID (default spark_default; `none`
runs every job in the worker process, no Spark), DELTA_STORAGE_CONN_ID (object-store connection, if any).
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pendulum
from airflow.exceptions import AirflowOptionalProviderFeatureException
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import Param, dag, task
from airflow.sdk.definitions.param import ParamsDict

try:
    from airflow.sdk import AssetOrTimeSchedule, CronTriggerTimetable
except ImportError:  # pragma: no cover - Airflow 3.0
    from airflow.timetables.assets import AssetOrTimeSchedule
    from airflow.timetables.trigger import CronTriggerTimetable
try:
    from airflow.sdk.exceptions import AirflowSkipException
except ImportError:  # pragma: no cover - Airflow 3.0
    from airflow.exceptions import AirflowSkipException
try:  # human-in-the-loop operators: Airflow 3.1+ (the module refuses to import before)
    from airflow.providers.standard.operators.hitl import ApprovalOperator, HITLOperator
except (ImportError, AirflowOptionalProviderFeatureException):  # Airflow < 3.1
    ApprovalOperator = HITLOperator = None

from airflow_delta_provider.assets import delta_table_asset
from airflow_delta_provider.commands.result_store import read_result, write_result
from airflow_delta_provider.delta.errors import InvalidArgumentError
from airflow_delta_provider.delta.maintenance.leases import release_lease
from airflow_delta_provider.delta.maintenance.optimize import optimize as plan_optimize
from airflow_delta_provider.delta.maintenance.vacuum import vacuum as plan_vacuum
from airflow_delta_provider.hooks.delta import DeltaTableHook
from airflow_delta_provider.operators.delta import (
    DeltaCheckpointOperator,
    DeltaLogCleanupOperator,
    DeltaOptimizeOperator,
    DeltaVacuumOperator,
    DeltaVacuumPurgeOperator,
    SnapshotReplayOperator,
    report_page,
)
from airflow_delta_provider.version_watch import since_last

REPO = Path(__file__).resolve().parents[1]
TABLE_URI = os.environ.get("DELTA_EXAMPLE_TABLE_URI") or str(REPO / "demo" / "sample_table")
RESULT_DIR = os.environ.get("DELTA_RESULT_DIR") or str(REPO / "demo" / "results")
SPARK_CONN_ID = os.environ.get("DELTA_SPARK_CONN_ID", "spark_default")
#: No Spark connection: the jobs run in the worker process (local engine), as in tests.
SUBMIT = SPARK_CONN_ID.strip().lower() not in ("", "none")
STORAGE_CONN_ID = os.environ.get("DELTA_STORAGE_CONN_ID") or None

#: The asset delta_table_health.py's sensor updates on each new version (same name and URI).
TABLE_ASSET = delta_table_asset(TABLE_URI, name="delta_example_table")
#: How long choose_partitions and approve_vacuum wait for an answer (none by then: compact nothing, Reject),
#: together less than the deadline and the next daily run (max_active_runs=1: a waiting run holds the next
#: one back; that one plans again).
PARTITION_CHOICE_TIMEOUT = timedelta(hours=4)
APPROVAL_TIMEOUT = timedelta(hours=16)
#: A run still going this many hours after it was queued calls `policies.maintenance_overran` (a
#: DeadlineAlert, Airflow 3.1+); `none` or 0: no alert. See `maintenance_deadline` for `airflow dags test`.
DEADLINE_HOURS = os.environ.get("DELTA_MAINTENANCE_DEADLINE_HOURS", "22")

#: What the report keeps of optimize's and vacuum_apply's results.
OPTIMIZE_KEYS = (
    "dry_run",
    "read_version",
    "version",
    "num_files_removed",
    "num_files_added",
    "bytes_removed",
    "bytes_added",
    "num_partitions",
)
VACUUM_KEYS = (
    "deleted",
    "deleted_bytes",
    "directories",
    "num_dropped",
    "quarantine_id",
    "quarantine",
    "lease_kept_files",
)
#: What the report keeps of vacuum_purge's result.
PURGE_KEYS = ("dry_run", "num_purged", "deleted_files", "deleted_bytes", "quarantine_ids")

COMMON: dict[str, Any] = {
    "table_uri": "{{ params.table_uri }}",
    "conn_id": SPARK_CONN_ID,
    "storage_conn_id": STORAGE_CONN_ID,
    "submit": SUBMIT,
    "result_uri": f"{RESULT_DIR.rstrip('/')}/",
}
try:  # Airflow 3.3+: a commit conflict retries in 10 s, a failing store in 2 min, the rest fails at once
    from airflow_delta_provider.policies import delta_retry_policy

    COMMON |= {"retries": 2, "retry_policy": delta_retry_policy()}
except ImportError:  # pragma: no cover - Airflow < 3.3: no retry policies, no retries
    pass


def maintenance_deadline(hours: str | None, argv: Sequence[str] = tuple(sys.argv)) -> Any:
    """The DAG's `DeadlineAlert`: `hours` after the run was queued (`DeadlineReference.DAGRUN_QUEUED_AT`),
    `policies.maintenance_overran` runs in the triggerer. None (no alert) for `none`/`0`, before Airflow 3.1,
    and under `airflow dags test`: Airflow 3.3.1's `dag.test()` fails every successful run of a DAG with a
    deadline (its run loop calls `DeadlineAlertModel.get_by_id` with the alert's serialized form, where the
    scheduler's DAG, written by the dag processor, holds the alert's row id: `DagRun.update_state`), whatever
    the reference or callback. Tests calling `dag.test()` set DELTA_MAINTENANCE_DEADLINE_HOURS=none."""
    text = (hours or "").strip().lower()
    if text in ("", "none", "0", "off") or list(argv[1:3]) == ["dags", "test"]:
        return None
    try:
        value = float(text)
    except ValueError:
        raise InvalidArgumentError(
            f"DELTA_MAINTENANCE_DEADLINE_HOURS: {hours!r} is not a number of hours",
            argument="DELTA_MAINTENANCE_DEADLINE_HOURS",
        ) from None
    try:
        from airflow.sdk import AsyncCallback, DeadlineAlert, DeadlineReference
    except ImportError:  # pragma: no cover - Airflow < 3.1
        return None
    return DeadlineAlert(
        reference=DeadlineReference.DAGRUN_QUEUED_AT,
        interval=timedelta(hours=value),
        callback=AsyncCallback("airflow_delta_provider.policies.maintenance_overran"),
    )


def report_of(result: Mapping[str, Any] | None) -> str | None:
    """Where a task's full result is best read: its HTML report when it has one, else its JSON result."""
    if not result:
        return None
    return (result.get("reports") or {}).get("html") or result.get("result_uri")


def approval_of(asked: bool | None, approval: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The human's answer: None when none was asked, else approve_vacuum's result (`approved`, by whom and
    when, the confirmed retention and plan, or why it was refused); `{"approved": False}` when it has none."""
    if not asked:
        return None
    return {"approved": False} if not approval else dict(approval)


def vacuum_approval_body(plan: Mapping[str, Any], dag_id: str | None = None, run_id: str | None = None) -> str:
    """The approval request's body (Markdown): what approving moves to a quarantine, from vacuum_plan's XCom,
    with a link to vacuum_plan's report page (served by the provider's plugin in the API server)."""
    result_uri = plan.get("result_uri")
    html = (plan.get("reports") or {}).get("html")
    if not html and isinstance(result_uri, str) and result_uri.endswith(".json"):
        html = result_uri[: -len(".json")] + ".html"  # the job renders its report beside the result
    cost = plan.get("quarantine") or {}
    moves = f"{cost.get('method')}, {cost.get('bytes_copied', 0):,} bytes copied, about {cost.get('requests')} requests"
    return "\n".join(
        [
            f"VACUUM ({plan['mode'].upper()}) of `{plan['table_uri']}`, planned at version {plan['version']}:",
            "",
            f"- files to quarantine: **{plan['num_files']}** ({plan['bytes']:,} bytes)",
            f"- cutoff: {plan['cutoff']} (files removed from the table before it, and files no version "
            "references older than it)",
            f"- moves: {moves}",
            f"- kept for live version leases: {plan.get('lease_kept_files') or 0} files",
            f"- report: [open the plan's report]({report_page(dag_id, run_id, 'vacuum_plan')})"
            if html and dag_id and run_id
            else f"- report: {html or 'none kept'}",
            f"- plan (the exact file list): {result_uri or 'none kept'}",
            "",
            "Approve moves exactly these files to a quarantine in the table (`_delta_quarantine/`), after "
            "checking them again against the table's latest version (a file needed again is kept). Time travel "
            "to versions that need them ends until an undo (`deltalog vacuum undo`, with the quarantine id in "
            "vacuum_apply's result); vacuum_purge deletes the quarantine once it is older than "
            "params.quarantine_retention_hours. Reject moves nothing.",
        ]
    )


# -- human-in-the-loop: which partitions to compact, which retention to apply --------------------------------

#: The partition choice's option that compacts nothing (an answer a person can give besides a subset).
COMPACT_NOTHING = "none: compact nothing this run"


def partition_predicate(keys: Sequence[str], partition_columns: Sequence[str], table: str | None = None) -> str:
    """A `where` (the predicate grammar of `delta.protocol.predicate`) selecting exactly the partitions `keys`,
    as OPTIMIZE's plan names them (`a=1/b=x` in partition column order, Hive's null partition for null):
    `(a = '1' AND b = 'x') OR ...`. A key that does not split into one `column=value` per partition column
    (a value holding `/`) is refused (`InvalidArgumentError`), never widened."""
    from airflow_delta_provider.delta.protocol.schema import HIVE_DEFAULT_PARTITION

    if not keys or not partition_columns:
        raise InvalidArgumentError("no partitions chosen", argument="partitions", table=table)
    terms = []
    for key in keys:
        parts = key.split("/")
        if len(parts) != len(partition_columns) or any(
            not part.startswith(f"{c}=") for part, c in zip(parts, partition_columns, strict=True)
        ):
            raise InvalidArgumentError(
                f"partition {key!r} does not name one value per partition column {list(partition_columns)}",
                argument="partitions",
                table=table,
            )
        conds = []
        for part, c in zip(parts, partition_columns, strict=True):
            value = part[len(c) + 1 :]
            name = "`" + c.replace("`", "``") + "`"
            conds.append(
                f"{name} IS NULL"
                if value == HIVE_DEFAULT_PARTITION
                else f"{name} = '{value.replace(chr(39), chr(39) * 2)}'"
            )
        terms.append("(" + " AND ".join(conds) + ")")
    return " OR ".join(terms)


def partition_label(key: str, planned: Mapping[str, int]) -> str:
    """One option of the partition choice: the partition and what OPTIMIZE plans there."""
    return f"{key or '(unpartitioned)'}: {planned['files']} small files, {planned['bytes']:,} bytes"


def partition_choice_body(table: str, version: int, planned: Mapping[str, Mapping[str, int]]) -> str:
    """The partition choice's body (Markdown): the plan per partition."""
    rows = [f"| `{k}` | {p['files']} | {p['bytes']:,} | {p['expected_output_files']} |" for k, p in planned.items()]
    return "\n".join(
        [
            f"OPTIMIZE of `{table}` at version {version} would compact these partitions (its conditions hold):",
            "",
            "| partition | small files | bytes | files written |",
            "|---|---:|---:|---:|",
            *rows,
            "",
            "Choose the partitions to compact now (all are preselected); the others keep their small files until "
            f"a later run. OPTIMIZE deletes nothing: readers see the same rows. `{COMPACT_NOTHING}` (or no answer "
            "in time) only plans.",
        ]
    )


def retention_hours_of(plan_result: Mapping[str, Any]) -> float:
    """A VACUUM plan's retention in hours (its `retention_ms`)."""
    return plan_result["retention_ms"] / 3_600_000


def confirmed_vacuum_plan(
    table_uri: str,
    seen: Mapping[str, Any],
    retention_hours: float,
    target_uri: str,
    storage_conn_id: str | None = None,
) -> dict[str, Any]:
    """The VACUUM plan to apply after a person confirmed `retention_hours`, never more than they saw.

    The same retention as the plan `seen` (its full result): that plan. A longer one: VACUUM planned again
    now (FULL, with the longer retention and the live leases), kept to the files of `seen`, written to
    `target_uri`. A shorter one would delete files the person was not shown: refused (`refused`), nothing
    planned; a run with `params.retention_hours` set to it plans and asks again."""
    planned = retention_hours_of(seen)
    out: dict[str, Any] = {"retention_hours": retention_hours, "planned_retention_hours": planned}
    if abs(retention_hours - planned) < 1e-9:
        return out | {"plan": seen["result_uri"], "replanned": False, "num_files": seen["num_files"]}
    if retention_hours < planned:
        return out | {
            "refused": f"a retention of {retention_hours:g} h is shorter than the plan's {planned:g} h, so VACUUM "
            "would delete files that were not shown: nothing applied; run with params.retention_hours="
            f"{retention_hours:g} to plan it and be asked again"
        }
    hook = DeltaTableHook(table_uri, storage_conn_id)
    again = plan_vacuum(
        hook.delta_log(), dry_run=True, mode=seen["mode"], retention_hours=retention_hours, quarantine=True
    )
    shown = {f["path"] for f in seen["files"]}
    plan = again.plan.with_files([f for f in again.plan.files if f.path in shown])
    write_result(target_uri, plan.to_dict(), hook.storage_options())
    return out | {"plan": target_uri, "replanned": True, "num_files": plan.num_files, "bytes": plan.num_bytes}


def _plan_result(context: Mapping[str, Any]) -> dict[str, Any]:
    """vacuum_plan's full result (its file list, retention), read from its `result_uri`."""
    summary = context["ti"].xcom_pull(task_ids="vacuum_plan")
    found = read_result(
        summary["result_uri"], DeltaTableHook(context["params"]["table_uri"], STORAGE_CONN_ID).storage_options()
    )
    if not isinstance(found, dict):
        raise InvalidArgumentError(
            "vacuum_plan kept no result to confirm", argument="plan", table=context["params"]["table_uri"]
        )
    return {**found, "result_uri": summary["result_uri"]}


def _answer(event: Mapping[str, Any]) -> dict[str, Any]:
    """Who answered and when (nobody on a timeout: the scheduler applied the defaults)."""
    by = event.get("responded_by_user") or {}
    at = event.get("responded_at")
    return {"by": by.get("name"), "at": None if at is None else str(at), "timed_out": bool(event.get("timedout"))}


if HITLOperator is not None:

    class PartitionChoiceOperator(HITLOperator):
        """Which of OPTIMIZE's planned partitions to compact: asked only when optimize_conditions holds,
        params.optimize_ask_partitions is true and the plan has two partitions or more (else it returns at
        once, asking nothing). The options are made when the task runs, from OPTIMIZE's dry-run plan (read
        from the log in the worker): one per planned partition (with its small files and bytes), all
        preselected, and `COMPACT_NOTHING`; they are kept in XCom (`choices`) for the answer. Returns
        `compact` and the `where` that selects the chosen partitions (optimize compacts them as they are
        when it runs); `COMPACT_NOTHING` or no answer within the timeout (the defaults applied by the
        scheduler) compacts nothing."""

        def __init__(self, **kwargs: Any) -> None:
            super().__init__(options=[COMPACT_NOTHING], multiple=True, **kwargs)

        def execute(self, context: Any) -> Any:
            params, ti = context["params"], context["ti"]
            decided = ti.xcom_pull(task_ids="optimize_conditions")
            if not decided["apply"] or not params["optimize_ask_partitions"]:
                return {"asked": False, "compact": bool(decided["apply"]), "where": None, "partitions": None}
            hook = DeltaTableHook(params["table_uri"], STORAGE_CONN_ID)
            log = hook.delta_log()
            plan = plan_optimize(log, dry_run=True, min_small_file_ratio=params["optimize_min_small_file_ratio"])
            planned = plan.plan.partitions()
            if len(planned) < 2:
                print(f"the plan has {len(planned)} partition(s): nothing to choose")
                return {"asked": False, "compact": True, "where": None, "partitions": None}
            labels = {partition_label(key, p): key for key, p in planned.items()}
            ti.xcom_push(key="choices", value={"labels": labels, "columns": list(plan.plan_partition_columns)})
            self.options, self.defaults = [*labels, COMPACT_NOTHING], list(labels)
            self.subject = f"OPTIMIZE {params['table_uri']}: which of {len(labels)} partitions to compact?"
            self.body = partition_choice_body(params["table_uri"], plan.plan.version, planned)
            return super().execute(context)

        def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
            choices = context["ti"].xcom_pull(task_ids=self.task_id, key="choices")
            labels = choices["labels"]
            self.options = [*labels, COMPACT_NOTHING]  # as asked (the DAG file declares only COMPACT_NOTHING)
            ret = super().execute_complete(context, event)
            chosen = [labels[c] for c in ret["chosen_options"] if c in labels]
            answer = _answer(event)
            compact = bool(chosen) and COMPACT_NOTHING not in ret["chosen_options"] and not answer["timed_out"]
            table = context["params"]["table_uri"]
            where = partition_predicate(chosen, choices["columns"], table) if compact else None
            print(f"compact {chosen} where {where}" if compact else "compact nothing: OPTIMIZE only plans")
            return {"asked": True, "compact": compact, "where": where, "partitions": chosen if compact else []} | answer

    class VacuumApprovalOperator(ApprovalOperator):
        """Approve or reject vacuum_plan, confirming its retention (`retention_hours`, the plan's by default)
        or raising it. Approve with the plan's retention applies the plan; with a longer one, VACUUM plans
        again and applies only the files of the plan shown (`confirmed_vacuum_plan`); with a shorter one it
        refuses and skips vacuum_apply (it would delete files that were not shown). Reject, or no answer
        within the timeout (the default, Reject), skips vacuum_apply."""

        def _ask_retention(self, plan: Mapping[str, Any]) -> float:
            hours = retention_hours_of(plan)
            self.params = ParamsDict(
                {
                    "retention_hours": Param(
                        hours,
                        type="number",
                        minimum=0,
                        description=f"VACUUM retention in hours (the plan's: {hours:g}); longer applies only the "
                        "plan's files still expired under it, shorter is refused (plan again with it)",
                    )
                }
            )
            return hours

        def execute(self, context: Any) -> Any:
            self._ask_retention(_plan_result(context))
            return super().execute(context)

        def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
            seen = _plan_result(context)
            planned = self._ask_retention(seen)
            ti, answer = context["ti"], _answer(event)
            if "error" not in event and event["chosen_options"] != [self.APPROVE]:
                # Reject (or the timeout's default): skipping vacuum_apply ends the task, returning nothing
                ti.xcom_push(key="answer", value={"approved": False} | answer)
            ret = super().execute_complete(context, event)
            if ret["chosen_options"] != [self.APPROVE]:  # only when there is nothing downstream to skip
                return {"approved": False} | answer
            hours = float((ret.get("params_input") or {}).get("retention_hours", planned))
            run = re.sub(r"[^A-Za-z0-9._=-]+", "_", ti.run_id)
            target = f"{RESULT_DIR.rstrip('/')}/{ti.dag_id}/{ti.task_id}/{run}.plan.json"
            confirmed = confirmed_vacuum_plan(context["params"]["table_uri"], seen, hours, target, STORAGE_CONN_ID)
            if "refused" in confirmed:
                print(confirmed["refused"])
                ti.xcom_push(key="answer", value={"approved": False} | confirmed | answer)
                self.skip(ti=ti, tasks=context["task"].get_direct_relatives(upstream=False))
                return {"approved": False} | confirmed | answer  # (skip ends the task when there is a downstream)
            print(f"VACUUM applies {confirmed['num_files']} files at a retention of {hours:g} h: {confirmed['plan']}")
            ti.xcom_push(key="answer", value={"approved": True} | confirmed | answer)
            return {"approved": True} | confirmed | answer


@dag(
    dag_id="delta_table_maintenance",
    schedule=AssetOrTimeSchedule(
        timetable=CronTriggerTimetable("0 3 * * *", timezone="UTC", run_immediately=True), assets=[TABLE_ASSET]
    ),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["delta", "example", "maintenance"],
    params={
        "table_uri": Param(TABLE_URI, type="string", description="Delta table root (path or URI)"),
        "checkpoint_interval": Param(
            10, type="integer", minimum=1, description="checkpoint when this many versions follow the last checkpoint"
        ),
        "optimize": Param(
            True, type="boolean", description="compact small files (deletes nothing); false: only plan the compaction"
        ),
        "optimize_min_small_file_ratio": Param(
            0.5,
            type="number",
            minimum=0,
            maximum=1,
            description="compact only when at least this share of the table's files (and, per partition, of "
            "the partition's files) is under 32 MiB",
        ),
        "optimize_min_new_files": Param(
            10,
            type="integer",
            minimum=0,
            description="compact only when this many data files were added since the last OPTIMIZE",
        ),
        "optimize_min_interval_hours": Param(
            24, type="number", minimum=0, description="compact at most once in this many hours"
        ),
        "optimize_ask_partitions": Param(
            False,
            type="boolean",
            description="when OPTIMIZE may apply and plans two partitions or more, ask a person which to compact "
            "(choose_partitions; no answer in time compacts nothing); false: compact every planned partition",
        ),
        "retention_hours": Param(None, type=["null", "number"], description="VACUUM plan: override the retention"),
        "apply_vacuum": Param(
            False,
            type="boolean",
            description="ask a human to approve the VACUUM plan, then move its files to a quarantine; and purge "
            "the quarantines older than quarantine_retention_hours",
        ),
        "quarantine_retention_hours": Param(
            168,
            type="number",
            minimum=0,
            description="vacuum_purge deletes VACUUM quarantines older than this (until then they can be undone)",
        ),
        "lease_ttl": Param(
            "24h",
            type=["null", "string"],
            description="replay_and_check leases the version it checked for this long (released by report; "
            "null: no lease)",
        ),
        "log_retention_hours": Param(
            None, type=["null", "number"], description="log cleanup: override delta.logRetentionDuration"
        ),
        "apply_log_cleanup": Param(False, type="boolean", description="delete the expired log files (else a dry run)"),
        "max_small_file_ratio": Param(1.0, type="number", minimum=0, maximum=1, description="check"),
    },
    user_defined_macros={"vacuum_approval_body": vacuum_approval_body},
    deadline=maintenance_deadline(DEADLINE_HOURS),
    doc_md=__doc__,
)
def delta_table_maintenance() -> None:
    replay = SnapshotReplayOperator(
        task_id="replay_and_check",
        engine="auto",
        checks={"no_duplicate_paths": True, "max_small_file_ratio": "{{ params.max_small_file_ratio }}"},
        lease_ttl="{{ params.lease_ttl }}",
        **COMMON,
    )

    @task
    def optimize_conditions(state: dict[str, Any], **context: Any) -> dict[str, Any]:
        """Whether OPTIMIZE may rewrite files in this run (`apply`), and each condition with its numbers. The
        table's history is read from the latest version back to the last OPTIMIZE commit."""
        params = context["params"]
        log = DeltaTableHook(params["table_uri"], STORAGE_CONN_ID).delta_log()
        since = since_last(log, "OPTIMIZE")
        now_ms = time.time() * 1000
        hours = None if since["last_timestamp"] is None else max(0.0, now_ms - since["last_timestamp"]) / 3_600_000
        ratio, new_files = state.get("small_file_ratio"), since["data_files_added"]
        conditions = {
            "asked": {"met": bool(params["optimize"])},
            "threshold": {
                "small_file_ratio": ratio,
                "minimum": params["optimize_min_small_file_ratio"],
                "met": ratio is not None and ratio >= params["optimize_min_small_file_ratio"],
            },
            "new_files": {
                "since_version": since["last_version"],
                "added": new_files,
                "minimum": params["optimize_min_new_files"],
                "met": new_files >= params["optimize_min_new_files"],
            },
            "interval": {
                "hours_since": None if hours is None else round(hours, 3),
                "minimum": params["optimize_min_interval_hours"],
                "met": hours is None or hours >= params["optimize_min_interval_hours"],
            },
        }
        apply = all(c["met"] for c in conditions.values())
        for name, c in conditions.items():
            print(f"{name}: {'met' if c['met'] else 'NOT met'} {c}")
        print("OPTIMIZE applies" if apply else "OPTIMIZE only plans (a dry run): a condition does not hold")
        return {"apply": apply, "conditions": conditions, "last_optimize_version": since["last_version"]}

    conditions = optimize_conditions(replay.output)

    if HITLOperator is not None:
        choose = PartitionChoiceOperator(
            task_id="choose_partitions",
            subject="OPTIMIZE {{ params.table_uri }}: which partitions to compact?",
            response_timeout=PARTITION_CHOICE_TIMEOUT,
        )
    else:  # Airflow < 3.1

        @task(task_id="choose_partitions")
        def choice_unavailable(**context: Any) -> dict[str, Any]:
            """No human-in-the-loop operators on this Airflow: asked to choose, OPTIMIZE only plans."""
            apply = context["ti"].xcom_pull(task_ids="optimize_conditions")["apply"]
            if context["params"]["optimize_ask_partitions"] and apply:
                print("choosing partitions needs Airflow 3.1+: OPTIMIZE only plans")
                apply = False
            return {"asked": False, "compact": apply, "where": None, "partitions": None}

        choose = choice_unavailable().operator

    optimize = DeltaOptimizeOperator(
        task_id="optimize",
        dry_run="{{ not ti.xcom_pull(task_ids='choose_partitions')['compact'] }}",
        where="{{ ti.xcom_pull(task_ids='choose_partitions')['where'] or '' }}",
        min_small_file_ratio="{{ params.optimize_min_small_file_ratio }}",
        **COMMON,
    )

    vacuum_plan = DeltaVacuumOperator(
        task_id="vacuum_plan",
        dry_run=True,
        mode="full",
        quarantine=True,  # the plan states what the moves cost
        retention_hours="{{ params.retention_hours if params.retention_hours is not none else '' }}",
        **COMMON,
    )

    @task.branch
    def vacuum_approval_needed(plan: dict[str, Any], **context: Any) -> str:
        """Ask for approval only when the run asks to apply VACUUM and the plan deletes something (XCom
        `approval_asked` says which, for the report)."""
        ask = bool(plan["num_files"]) and context["params"]["apply_vacuum"]
        if not plan["num_files"]:
            print(f"the VACUUM plan at version {plan['version']} deletes nothing")
        elif not ask:
            print(
                f"VACUUM would delete {plan['num_files']} files ({plan['bytes']} bytes); not applied: "
                f"params.apply_vacuum is false (plan at {plan['result_uri']})"
            )
        context["ti"].xcom_push(key="approval_asked", value=ask)
        return "approve_vacuum" if ask else "vacuum_not_applied"

    if ApprovalOperator is not None:
        approve = VacuumApprovalOperator(
            task_id="approve_vacuum",
            subject="VACUUM {{ params.table_uri }}: quarantine "
            "{{ ti.xcom_pull(task_ids='vacuum_plan')['num_files'] }} files?",
            body="{{ vacuum_approval_body(ti.xcom_pull(task_ids='vacuum_plan'), dag.dag_id, run_id) }}",
            defaults="Reject",
            response_timeout=APPROVAL_TIMEOUT,
        )
    else:  # Airflow < 3.1

        @task(task_id="approve_vacuum")
        def approval_unavailable() -> None:
            """No human-in-the-loop operators on this Airflow: VACUUM is never applied."""
            raise AirflowSkipException(
                "approval needs Airflow 3.1+ (airflow.providers.standard.operators.hitl): VACUUM not applied; "
                "the plan stays at vacuum_plan's result"
            )

        approve = approval_unavailable().operator

    vacuum_apply = DeltaVacuumOperator(
        task_id="vacuum_apply",
        dry_run=False,
        mode="full",
        plan="{{ ti.xcom_pull(task_ids='approve_vacuum')['plan'] }}",
        quarantine=True,
        **COMMON,
    )
    no_vacuum = EmptyOperator(task_id="vacuum_not_applied")

    vacuum_purge = DeltaVacuumPurgeOperator(
        task_id="vacuum_purge",
        older_than_hours="{{ params.quarantine_retention_hours }}",
        dry_run="{{ not params.apply_vacuum }}",
        trigger_rule="none_failed",
        **COMMON,
    )

    @task.branch(trigger_rule="none_failed")
    def checkpoint_needed(state: dict[str, Any], **context: Any) -> str:
        """Checkpoint when `checkpoint_interval` versions or more follow the last checkpoint, counted at the
        table's latest version (optimize and VACUUM commit versions after the one replay_and_check checked).
        Pushes that version (XCom `latest_version`): the checkpoint is written there."""
        hook = DeltaTableHook(context["params"]["table_uri"], STORAGE_CONN_ID)
        latest = hook.latest_version()
        hint = hook.delta_log().read_last_checkpoint()
        known = [v for v in (state["checkpoint_version"], hint and hint.version) if v is not None]
        last = max(known, default=None)
        behind = latest - (-1 if last is None else last)
        interval = context["params"]["checkpoint_interval"]
        print(f"latest version {latest}, last checkpoint {last}: {behind} versions behind (interval {interval})")
        context["ti"].xcom_push(key="latest_version", value=latest)
        return "checkpoint" if behind >= interval else "checkpoint_not_needed"

    checkpoint = DeltaCheckpointOperator(
        task_id="checkpoint",
        version="{{ ti.xcom_pull(task_ids='checkpoint_needed', key='latest_version') }}",
        **COMMON,
    )
    no_checkpoint = EmptyOperator(task_id="checkpoint_not_needed")

    log_cleanup = DeltaLogCleanupOperator(
        task_id="log_cleanup",
        apply="{{ params.apply_log_cleanup }}",
        retention_hours="{{ params.log_retention_hours if params.log_retention_hours is not none else '' }}",
        trigger_rule="none_failed_min_one_success",
        **COMMON,
    )

    @task(trigger_rule="none_failed")
    def report(
        state: dict[str, Any],
        optimized: dict[str, Any],
        plan: dict[str, Any],
        cleanup: dict[str, Any],
        purged: dict[str, Any],
        **context: Any,
    ) -> dict[str, Any]:
        """One summary of the run: what was checked, compacted, planned, approved, quarantined, purged,
        checkpointed; then the replay's version lease is released (the run's last reader is done).

        The approval, the VACUUM apply and the checkpoint are read from XCom only when their task succeeded
        (a branch not taken or a Reject skips them; pulling a skipped task's XCom logs an error)."""
        ti = context["ti"]
        optional = ("approve_vacuum", "vacuum_apply", "checkpoint")
        states = ti.get_task_states(dag_id=ti.dag_id, task_ids=list(optional), run_ids=[ti.run_id]).get(ti.run_id, {})

        def succeeded(task_id: str, key: str = "return_value") -> Any:
            return ti.xcom_pull(task_ids=task_id, key=key) if states.get(task_id) == "success" else None

        vacuumed, written = succeeded("vacuum_apply"), succeeded("checkpoint")
        lease = None
        if state.get("lease_id"):
            hook = DeltaTableHook(context["params"]["table_uri"], STORAGE_CONN_ID)
            released = release_lease(
                hook.table_uri, state["lease_id"], missing_ok=True, storage_options=hook.storage_options()
            )
            lease = {"id": state["lease_id"], "version": state["version"], "released": released is not None}
        asked = ti.xcom_pull(task_ids="vacuum_approval_needed", key="approval_asked")
        approval = approval_of(asked, succeeded("approve_vacuum", key="answer"))
        summary = {
            "table_uri": state["table_uri"],
            "version": state["version"],
            "latest_version": ti.xcom_pull(task_ids="checkpoint_needed", key="latest_version"),
            "checked_versions": state["checked_versions"],
            "checks": state["checks"],
            "optimize_conditions": ti.xcom_pull(task_ids="optimize_conditions"),
            "optimize_partitions": ti.xcom_pull(task_ids="choose_partitions"),
            "optimize": {k: optimized[k] for k in OPTIMIZE_KEYS},
            "vacuum_plan": {k: plan[k] for k in ("version", "mode", "cutoff", "num_files", "bytes")},
            "vacuum_approval": approval,
            "vacuum": None if vacuumed is None else {k: vacuumed[k] for k in VACUUM_KEYS},
            "vacuum_purge": {k: purged[k] for k in PURGE_KEYS},
            "lease": lease,
            "checkpoint": None if written is None else {k: written[k] for k in ("version", "kind", "written")},
            "log_cleanup": {k: cleanup[k] for k in ("dry_run", "num_files", "deleted", "earliest_readable_version")},
            "reports": {
                "replay": state["reports"].get("html", state["result_uri"]),
                "optimize": report_of(optimized),
                "vacuum_plan": report_of(plan),
                "vacuum_apply": report_of(vacuumed),
            },
        }
        for key, value in summary.items():
            print(f"{key}: {value}")
        return summary

    approval_branch = vacuum_approval_needed(vacuum_plan.output)
    checkpoint_branch = checkpoint_needed(replay.output)
    conditions >> choose >> optimize >> vacuum_plan >> approval_branch >> [approve, no_vacuum]
    approve >> vacuum_apply
    [vacuum_apply, no_vacuum] >> vacuum_purge >> checkpoint_branch >> [checkpoint, no_checkpoint] >> log_cleanup
    summary = report(replay.output, optimize.output, vacuum_plan.output, log_cleanup.output, vacuum_purge.output)
    [vacuum_apply, checkpoint] >> summary


delta_table_maintenance()
