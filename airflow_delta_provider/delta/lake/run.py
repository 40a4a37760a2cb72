"""Running a lake plan's tasks on one table: each step through its maintenance driver with the options it was
priced with, its history row (the plan's estimates beside what it did), and the row proof of each rewrite. The
autopilot DAG runs one step per Airflow task; `run_table` runs a table's steps in order (a `lake run` command)."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..delta_log import DeltaLog
from ..errors import DeltaError, InvalidArgumentError
from ..maintenance.checkpoint import write_checkpoint
from ..maintenance.log_cleanup import cleanup_log
from ..maintenance.optimize import optimize
from ..maintenance.vacuum import vacuum
from .proof import prove_rewrite

#: A table's steps, in running order (the plan's operation names).
STEPS = ("optimize", "vacuum", "checkpoint", "log_cleanup")
Options = Mapping[str, Any] | None
#: Engines other than the local one by the name a plan's task gives (`Task.engine`), each made on demand
#: (e.g. `{"spark": lambda: SparkEngine(spark)}`).
Engines = Mapping[str, Callable[[], Any]] | None


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


def estimate_row(table: str, task: Mapping[str, Any]) -> dict[str, Any]:
    """A history row's identity and the plan's estimates (`Task.to_dict()`)."""
    cost, gain = task.get("cost") or {}, task.get("gain") or {}
    return {
        "table": table,
        "operation": task["operation"],
        "engine": task.get("engine") or "local",
        "est_bytes": (cost.get("bytes_read") or 0) + (cost.get("bytes_written") or 0),
        "est_requests": sum((cost.get("requests") or {}).values()),
        "est_seconds": cost.get("seconds"),
        "est_files_removed": gain.get("files_removed"),
        "est_bytes_reclaimed": gain.get("bytes_reclaimed"),
        "est_value": gain.get("value"),
    }


def _log(
    table: str, task: Mapping[str, Any], clock: Callable[[], int] | None, options: Options, engines: Engines
) -> DeltaLog:
    """The task's table on the engine its plan chose; a non-local engine not given is an error naming it."""
    name = task.get("engine") or "local"
    if name == "local":
        return DeltaLog.of(table, options, clock=clock)
    factory = (engines or {}).get(name)
    if factory is None:
        raise InvalidArgumentError(
            f"The plan runs the {task['operation']} of {table} on the {name} engine (the policy's "
            f"spark_min_files), but no {name!r} engine was given",
            argument="engines",
            table=table,
        )
    return DeltaLog(table, storage_options=options, clock=clock, engine=factory())


def apply_task(
    table: str,
    task: Mapping[str, Any],
    *,
    clock: Callable[[], int] | None = None,
    storage_options: Options = None,
    engines: Engines = None,
) -> dict[str, Any]:
    """Run one planned task with its options, on its engine; what it did, in history columns (`versions`:
    OPTIMIZE's commits). With a `clock`, the drivers' commits are timed by it too, so their commitInfo and
    tombstone times agree with the retention they applied (the next scan reads what VACUUM deleted from them)."""
    op, options = task["operation"], dict(task.get("options") or {})
    log = _log(table, task, clock, storage_options, engines)
    if op == "optimize":
        r = optimize(log, clock=clock, storage_options=storage_options, **options)
        return {
            "version": r.version,
            "versions": list(r.versions),
            "files_removed": len(r.removed),
            "files_added": len(r.added),
            "bytes_removed": sum(f.size for f in r.removed),
            "bytes_added": sum(f.size for f in r.added),
            "actual_files_removed": len(r.removed) - len(r.added),
        }
    if op == "vacuum":
        kw = {"clock": clock, "storage_options": storage_options, **options}
        planned = vacuum(log, dry_run=True, **kw)
        done = vacuum(log, dry_run=False, plan=planned.plan, **kw)  # exactly the plan it made
        return {
            "version": done.audit_versions[-1] if done.audit_versions else None,  # VACUUM END
            "files_removed": done.deleted,
            "bytes_removed": done.deleted_bytes,
            "actual_files_removed": done.deleted,
            "actual_bytes_reclaimed": done.deleted_bytes,
        }
    if op == "checkpoint":
        result = write_checkpoint(log, clock=clock)
        return {"version": result.version, "bytes_added": result.size_in_bytes}
    if op == "log_cleanup":
        r = cleanup_log(log, apply=True, clock=clock, storage_options=storage_options, **options)
        return {"files_removed": r.deleted, "bytes_removed": r.num_bytes, "actual_files_removed": r.deleted}
    raise InvalidArgumentError(f"unknown lake operation {op!r}; expected one of {list(STEPS)}", argument="operation")


def run_task(
    table: str,
    task: Mapping[str, Any],
    *,
    clock: Callable[[], int] | None = None,
    storage_options: Options = None,
    on_row: Callable[[dict[str, Any]], None] | None = None,
    engines: Engines = None,
) -> dict[str, Any]:
    """`apply_task` timed into a history row (status done, or failed with its error); `on_row` gets the row
    either way before the error propagates (so a failed step is still recorded)."""
    row = {**estimate_row(table, task), "started": _now()}
    began = time.monotonic()
    try:
        done = apply_task(table, task, clock=clock, storage_options=storage_options, engines=engines)
        row.update(done, status="done")
    except DeltaError as exc:
        row.update(status="failed", error_class=type(exc).__name__, error_message=str(exc)[:2000])
        raise
    finally:
        row.update(ended=_now(), actual_seconds=time.monotonic() - began)
        if on_row is not None:
            on_row(row)
    return row


def prove_versions(
    table: str, versions: Iterable[int], *, verify: str = "counts", storage_options: Options = None
) -> list[dict[str, Any]]:
    """The row proof of each rewrite commit (`RowProofError` on the first mismatch)."""
    return [prove_rewrite(table, v, verify=verify, storage_options=storage_options).to_dict() for v in versions]


def proof_status(proofs: Iterable[Mapping[str, Any]]) -> str | None:
    """One status for a step's proofs: mismatch over unproven over proven; None when nothing was proved."""
    statuses = [p.get("status") for p in proofs]
    if not statuses:
        return None
    return next((s for s in ("mismatch", "unproven") if s in statuses), "proven")


def with_proofs(row: Mapping[str, Any], proofs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """An OPTIMIZE row with its proof status and the rows its rewrites read and wrote."""
    out = {k: v for k, v in row.items() if k != "versions"}
    before = [p["rows_before"] for p in proofs if p.get("rows_before") is not None]
    after = [p["rows_after"] for p in proofs if p.get("rows_after") is not None]
    out.update(proof=proof_status(proofs), rows_before=sum(before) if before else None)
    out["rows_after"] = sum(after) if after else None
    return out


def run_table(
    table: str,
    tasks: Sequence[Mapping[str, Any]],
    *,
    verify: str = "counts",
    apply_vacuum: bool = False,
    clock: Callable[[], int] | None = None,
    storage_options: Options = None,
    engines: Engines = None,
) -> list[dict[str, Any]]:
    """A table's planned tasks in order, each rewrite proved; its history rows. VACUUM deletes, so it runs only
    with `apply_vacuum`. A failed step (or proof) ends the table's run: its row says failed, later steps are
    not run, and no error escapes (one table's failure never stops a lake run)."""
    rows: list[dict[str, Any]] = []
    for step in STEPS:
        task = next((t for t in tasks if t["operation"] == step), None)
        if task is None or (step == "vacuum" and not apply_vacuum):
            continue
        try:
            row = run_task(
                table, task, clock=clock, storage_options=storage_options, on_row=rows.append, engines=engines
            )
            if step == "optimize":
                proofs: list[dict[str, Any]] = []
                try:
                    proofs = prove_versions(
                        table, row.get("versions") or (), verify=verify, storage_options=storage_options
                    )
                except DeltaError as exc:
                    proofs = [{"status": "mismatch"}]
                    row.update(status="failed", error_class=type(exc).__name__, error_message=str(exc)[:2000])
                    raise
                finally:
                    rows[-1] = with_proofs(row, proofs)
        except DeltaError:
            break
    return rows
