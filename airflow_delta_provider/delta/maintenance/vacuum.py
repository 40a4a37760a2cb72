"""VACUUM: delete the files no version within retention needs (PROTOCOL.md "Delta Log Entries").

`vacuum(table)` runs the writer check for `vacuum`, lists the table (FULL, through the engine's
`VacuumExecutor`) or reads the tombstones from the commits (LITE), and lets `protocol.vacuum` plan. It is a
dry run unless `dry_run=False`. An apply refuses a plan for another table or a changed protocol, re-validates
every entry against the latest snapshot and storage (a writer may have committed since the listing), commits
`VACUUM START`, deletes in batches, removes empty local directories and commits `VACUUM END` (status
`COMPLETED` or `FAILED`; a failed END commit is logged: the files are gone either way). The audit commits are
written where Spark writes them by default (`AUDIT_SCHEMES`; `audit=` forces either way).

LITE needs every commit from version 0: checkpoints drop expired tombstones (Spark `deltaCannotVacuumLite`;
`_last_vacuum_info` is neither read nor written). A LITE plan stats its files once, so it carries the same
evidence as a FULL one.

Retention: `retention_hours`, else `delta.deletedFileRetentionDuration`. As in Delta >= 4.1 the table
property is the floor: a shorter value only with `enforce_retention_duration=False` (Spark's `RETAIN 0 HOURS`
with the retention check off). Independently, an untracked file younger than `untracked_grace_hours`
(default 1) is never deleted: delta-rs writes its data files before it commits them.

Live version leases (`maintenance.leases`) are read when a plan is made and again when an apply starts its
re-validation; their versions' files leave the plan before the engine sees it (dropped as `leased`).
`quarantine=True` (local engine) moves the kept files to `_delta_quarantine/<id>/` between START and END
(`maintenance.quarantine`), after resuming the quarantines a killed VACUUM left unfinished.
"""

from __future__ import annotations

import gc
import logging
import math
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from numbers import Real
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from ..delta_log import DeltaLog, commit_files
from ..errors import DeltaError, InvalidArgumentError, OperationNotAllowedError, check_bool, check_int
from ..progress import Progress, report_progress, with_progress
from ..protocol import vacuum as rules
from ..protocol.actions import AddFile, RemoveFile
from ..protocol.leases import split_leased
from ..protocol.quarantine import files_dir, move_cost, new_quarantine_id
from ..protocol.table_features import check_can_write
from ..protocol.table_properties import DELETED_FILE_RETENTION, deleted_file_retention_ms
from ..protocol.vacuum import PlannedFile, VacuumPlan
from ..read.protected_files import logged_files, partition_columns
from ..snapshot import Snapshot
from ..storage.batch import remove_empty_dirs, stat_entries
from .leases import LeasePins, lease_pins
from .quarantine import finish_quarantine, resume_unfinished, start_quarantine
from .quarantine import location as quarantine_location

if TYPE_CHECKING:  # pragma: no cover
    from ..engines import Revalidation, VacuumExecutor

log = logging.getLogger(__name__)

#: Schemes on which Spark writes the VACUUM START/END commits by default (Delta Spark `VacuumCommand`).
AUDIT_SCHEMES = frozenset({"wasbs", "wasbss", "abfs", "abfss", "adl", "gs", "file", "hdfs"})


@dataclass
class VacuumResult:
    """A vacuum's plan and, when applied, what was deleted. `dropped[i]` was kept for `reasons[i]`
    (`protocol.vacuum.DROP_REASONS`), `missing` were gone (not counted); Spark lists a bounded number of
    either, `num_dropped` and `num_missing` count all."""

    plan: VacuumPlan
    dry_run: bool
    deleted: int = 0
    deleted_bytes: int = 0
    directories: int = 0
    dropped: list[PlannedFile] = field(default_factory=list)
    audit_versions: list[int] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    missing: list[PlannedFile] = field(default_factory=list)
    num_dropped: int = 0
    num_missing: int = 0
    #: the live version leases honoured (`Lease.to_dict`), and the planned files they kept
    leases: list[dict[str, Any]] = field(default_factory=list)
    lease_kept_files: int = 0
    lease_kept_bytes: int = 0
    #: `quarantine=True`: the moves' cost (`protocol.quarantine.move_cost`; applied: id, location, moves),
    #: the quarantine's id, and the unfinished quarantines this call resumed first
    quarantine: dict[str, Any] | None = None
    quarantine_id: str | None = None
    resumed: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Primitive form (JSON, XCom); a dry run's dict is a plan `vacuum(plan=...)` accepts."""
        out = self.plan.to_dict()
        reasons = list(self.reasons) + ["unknown"] * (len(self.dropped) - len(self.reasons))
        out.update(
            dry_run=self.dry_run,
            deleted=self.deleted,
            deleted_bytes=self.deleted_bytes,
            directories=self.directories,
            dropped=[{**f.to_dict(), "reason": why} for f, why in zip(self.dropped, reasons, strict=True)],
            num_dropped=max(self.num_dropped, len(self.dropped)),
            missing=[f.to_dict() for f in self.missing],
            num_missing=max(self.num_missing, len(self.missing)),
            audit_versions=list(self.audit_versions),
            leases=list(self.leases),
            lease_kept_files=self.lease_kept_files,
            lease_kept_bytes=self.lease_kept_bytes,
        )
        if self.quarantine is not None:
            out.update(quarantine_id=self.quarantine_id, quarantine=dict(self.quarantine), resumed=list(self.resumed))
        return out


def _retention_ms(snapshot: Snapshot, retention_hours: float | None, enforce: bool) -> int:
    conf = snapshot.metadata.configuration
    table_ms = deleted_file_retention_ms(conf)
    if table_ms < 0:
        raise InvalidArgumentError(
            f"Table property {DELETED_FILE_RETENTION}={conf.get(DELETED_FILE_RETENTION)!r} is negative",
            argument=DELETED_FILE_RETENTION,
            table=snapshot.table,
        )
    if retention_hours is None:
        return table_ms
    ms = snapshot.retention_window_ms(retention_hours)  # finite, >= 0, else InvalidArgumentError
    if enforce and ms < table_ms:
        raise InvalidArgumentError(
            f"Retention of {retention_hours} hours is shorter than the table's {DELETED_FILE_RETENTION} "
            f"({table_ms / 3_600_000:g} hours): files a reader or writer still needs could be deleted. Pass "
            "enforce_retention_duration=False to vacuum with it anyway",
            argument="retention_hours",
            table=snapshot.table,
        )
    return ms


@contextmanager
def _gc_paused(pause: bool) -> Iterator[None]:
    """The cyclic GC paused (when `pause`) while a snapshot is replayed and planned in this process: millions
    of short-lived objects and no cycles, and full collections took a third of a 1M-file table's planning."""
    enabled = gc.isenabled()
    if pause:
        gc.disable()
    try:
        yield
    finally:
        if pause and enabled:
            gc.enable()


def _lite_tombstones(dlog: DeltaLog, snapshot: Snapshot) -> list[rules.LoggedFile]:
    """Every remove of the commits up to the snapshot's version, which LITE needs from version 0 on
    (checkpoints drop expired tombstones: Spark `deltaCannotVacuumLite`)."""
    from ..read.commits import read_commit

    commits = commit_files(dlog.store.list_from(dlog.log_dir))
    if not commits or commits[0].version != 0:
        raise OperationNotAllowedError(
            f"VACUUM LITE needs every commit from version 0, but the earliest is "
            f"{commits[0].version if commits else None} (log cleanup removed the rest): run FULL",
            table=dlog.table_uri,
        )
    out: dict[str, rules.LoggedFile] = {}
    for p in commits:
        if p.version > snapshot.version:
            break
        for a in read_commit(dlog.store, dlog.table_uri, p):
            if isinstance(a, RemoveFile):
                out[a.key] = rules.LoggedFile(a.path, a.deletion_vector, a.deletion_timestamp, a.size)
            elif isinstance(a, AddFile):
                out.pop(a.key, None)
    return list(out.values())


_READING = "VACUUM: reading the log's tombstones"
_STATTING = "VACUUM: reading the planned files' sizes and times"
_REVALIDATING = "VACUUM: re-validating the plan"
_DELETING = "VACUUM: deleting files"
_MOVING = "VACUUM: moving files to quarantine"


def make_plan(
    dlog: DeltaLog,
    snapshot: Snapshot,
    *,
    mode: str,
    retention_ms: int,
    now_ms: int,
    executor: VacuumExecutor,
    untracked_grace_ms: int,
) -> VacuumPlan:
    """List (FULL, through `executor`) or read the log (LITE) and plan at `now_ms - retention_ms`."""
    cutoff_ms, columns = now_ms - retention_ms, partition_columns(snapshot)
    if mode == rules.FULL:
        report_progress(rules.LISTING, 0)
        plan = executor.plan_full(
            dlog,
            snapshot,
            cutoff_ms=cutoff_ms,
            retention_ms=retention_ms,
            partition_columns=columns,
            now_ms=now_ms,
            untracked_grace_ms=untracked_grace_ms,
        )
        report_progress(rules.LISTING, 1, 1)
        return plan
    report_progress(_READING, 0)
    active, tombs = logged_files(snapshot)
    plan = rules.plan_vacuum(
        table=dlog.table_uri,
        version=snapshot.version,
        mode=mode,
        cutoff_ms=cutoff_ms,
        retention_ms=retention_ms,
        active=active,
        tombstones=_lite_tombstones(dlog, snapshot) + tombs,
        listing=None,
        partition_columns=columns,
        protocol=snapshot.protocol.to_json(),
        now_ms=now_ms,
        untracked_grace_ms=untracked_grace_ms,
        table_id=snapshot.metadata.id,
    )
    report_progress(_READING, 1, 1)
    report_progress(_STATTING, 0, plan.num_files)
    plan = rules.with_evidence(plan, stat_entries(dlog.store, dlog.table_uri, [f.path for f in plan.files]))
    report_progress(_STATTING, plan.num_files, plan.num_files)
    return plan


def _audit_default(dlog: DeltaLog) -> bool:
    """On where Spark writes the audit commits, and only through a store that can commit safely."""
    if (urlparse(dlog.table_uri).scheme or "file") not in AUDIT_SCHEMES:
        return False
    if not getattr(dlog.store, "atomic_put_if_absent", False):
        log.warning("VACUUM of %s: the store cannot commit atomically; no VACUUM START/END", dlog.table_uri)
        return False
    return True


def _commit(snapshot: Snapshot, operation: str, params: Mapping[str, Any], metrics: Mapping[str, Any]) -> int:
    return snapshot.transaction(operation, params).commit(operation_metrics=metrics)


@with_progress
def vacuum(
    table_or_log: DeltaLog | str | os.PathLike[str],
    *,
    retention_hours: float | None = None,
    enforce_retention_duration: bool = True,
    mode: str = rules.FULL,
    dry_run: bool = True,
    plan: VacuumPlan | Mapping[str, Any] | None = None,
    clock: Callable[[], int] | None = None,
    audit: bool | None = None,
    storage_options: Mapping[str, Any] | None = None,
    batch_size: int = 1000,
    executor: VacuumExecutor | None = None,
    untracked_grace_hours: float | None = None,
    plan_dir: str | None = None,
    lease_location: str | os.PathLike[str] | None = None,
    quarantine: bool = False,
    progress: Progress | None = None,
) -> VacuumResult:
    """Plan (dry run, the default) or delete the files no version within retention needs.

    :param table_or_log: a `DeltaLog`, or a table path/URI (with `storage_options`).
    :param retention_hours: overrides `delta.deletedFileRetentionDuration` (shorter only when not enforced).
    :param mode: `"full"` (list the table) or `"lite"` (tombstones from the log only).
    :param plan: apply this plan (a `VacuumPlan` or its dict) instead of making one; re-validated first.
    :param audit: write the `VACUUM START`/`END` commits (None: where Delta does, by scheme).
    :param executor: where the listing, re-validation and deletes run (default: the engine's).
    :param plan_dir: where an engine that keeps a big plan's file list apart (Spark) puts it.
    :param lease_location: the table's lease folder (default `<table>/_delta_leases`).
    :param quarantine: move the files to `<table>/_delta_quarantine/<id>/` instead (local engine only).
    :param untracked_grace_hours: never delete an untracked file younger than this (None: 1 hour; 0: off),
        whatever the retention; an apply uses its own value, not the plan's.
    :param progress: told each phase's progress (listing, re-validation, deletes; default: `PROGRESS`'s).
    :raises VacuumPlanRefusedError: a plan for another table, or naming an entry outside the table root
        or in `_delta_log`: nothing is deleted.
    :raises OperationNotAllowedError: a LITE vacuum whose commits were cleaned up, a protocol changed since
        the plan, a plan without its file list applied while a lease is live, `quarantine=True` on Spark.
    :raises LeaseError: a lease file that is not a valid lease (nothing is deleted).
    """
    check_bool(dry_run, "dry_run")
    check_bool(enforce_retention_duration, "enforce_retention_duration")
    if audit is not None:
        check_bool(audit, "audit")
    check_int(batch_size, "batch_size", minimum=1)
    check_bool(quarantine, "quarantine")
    if mode not in rules.MODES:
        raise InvalidArgumentError(f"mode must be one of {rules.MODES}, got {mode!r}", argument="mode")
    grace_ms = untracked_grace_ms(untracked_grace_hours)
    dlog = DeltaLog.of(table_or_log, storage_options)
    run = executor if executor is not None else dlog.engine.vacuum_executor(plan_dir=plan_dir)
    in_process = dlog.engine.in_process and getattr(run, "in_process", False)
    if quarantine and not getattr(run, "can_quarantine", False):
        raise OperationNotAllowedError(
            f"quarantine=True moves files in this process, which the {dlog.engine.name} engine's VACUUM "
            "executor does not do: nothing was planned or moved. Run it on the local engine (engine='local'), "
            "or without quarantine",
            table=dlog.table_uri,
        )
    leased_files: dict[int, set[str] | None] = {}  # a version's files never change: read once per call

    def pins(snapshot: Snapshot, now_ms: int) -> LeasePins:
        return lease_pins(
            dlog,
            now_ms=now_ms,
            table_id=snapshot.metadata.id,
            location=lease_location,
            storage_options=storage_options,
            cache=leased_files,
        )

    kept: list[PlannedFile] = []
    plan_pins = LeasePins()
    with _gc_paused(in_process):
        snapshot = dlog.update()
        check_can_write(
            snapshot.protocol, snapshot.metadata, ["vacuum"], table=dlog.table_uri, version=snapshot.version
        )
        now_ms = (clock or dlog.clock)()
        # a killed quarantining VACUUM's moves are finished before this one lists the table
        resumed = (
            resume_unfinished(dlog, now_ms=now_ms, lease_location=lease_location) if quarantine and not dry_run else []
        )
        if plan is None:
            retention_ms = _retention_ms(snapshot, retention_hours, enforce_retention_duration)
            the_plan = make_plan(
                dlog,
                snapshot,
                mode=mode,
                retention_ms=retention_ms,
                now_ms=now_ms,
                executor=run,
                untracked_grace_ms=grace_ms,
            )
            plan_pins = pins(snapshot, now_ms)
            if plan_pins.paths and not the_plan.files_inline:
                log.warning(
                    "VACUUM of %s: the plan does not carry its file list, so it cannot leave out the files of the "
                    "leased versions %s; applying it is refused while those leases are live",
                    the_plan.table,
                    plan_pins.versions,
                )
            the_plan, kept = _without_leased(the_plan, plan_pins)
        else:
            the_plan = plan if isinstance(plan, VacuumPlan) else VacuumPlan.from_dict(plan)
            _check_plan_table(the_plan, dlog.table_uri, snapshot)
    if dry_run:
        return VacuumResult(
            the_plan,
            dry_run=True,
            leases=plan_pins.to_dicts(now_ms),
            lease_kept_files=len(kept),
            lease_kept_bytes=sum(f.size for f in kept),
            quarantine=_planned_cost(dlog, the_plan) if quarantine else None,
        )
    # re-validate against the table as it is now: a writer may have committed while the table was listed
    with _gc_paused(in_process):
        latest = dlog.update()
    _check_plan_table(the_plan, dlog.table_uri, latest)
    if the_plan.protocol and the_plan.protocol != latest.protocol.to_json():
        raise OperationNotAllowedError(
            f"The table's protocol changed since the vacuum plan at version {the_plan.version} "
            f"({the_plan.protocol} -> {latest.protocol.to_json()}): plan again",
            table=dlog.table_uri,
            version=latest.version,
        )
    cutoff = the_plan.cutoff_ms
    table_ms = deleted_file_retention_ms(latest.metadata.configuration)
    if enforce_retention_duration and the_plan.retention_ms < table_ms:
        raise InvalidArgumentError(
            f"The plan's retention ({the_plan.retention_ms} ms) is shorter than the table's "
            f"{DELETED_FILE_RETENTION} ({table_ms} ms); pass enforce_retention_duration=False to apply it anyway",
            argument="plan",
            table=dlog.table_uri,
        )
    if enforce_retention_duration:  # a table retention raised since the plan protects more
        cutoff = min(cutoff, now_ms - table_ms)
    # re-validation starts with the lease read: a lease taken before this line is honoured
    apply_pins = pins(latest, now_ms)
    if apply_pins.leases and not the_plan.files_inline:
        raise OperationNotAllowedError(
            f"The vacuum plan does not carry its file list ({the_plan.num_files} files), so the files of the "
            f"leased versions {apply_pins.versions} cannot be left out of it: nothing was deleted. Apply it after "
            f"the leases ({', '.join(le.id for le in apply_pins.leases)}) end or are released, or plan with its "
            "file list",
            table=dlog.table_uri,
            version=latest.version,
        )
    the_plan, leased = _without_leased(the_plan, apply_pins)
    report_progress(_REVALIDATING, 0, the_plan.num_files)
    with _gc_paused(getattr(run, "in_process", False)):  # the executor's own flag: it alone re-validates
        checked = run.revalidate(
            dlog,
            latest,
            the_plan,
            cutoff_ms=cutoff,
            partition_columns=partition_columns(latest),
            now_ms=now_ms,
            untracked_grace_ms=grace_ms,
        )
    report_progress(_REVALIDATING, the_plan.num_files, the_plan.num_files)
    if leased:
        checked = checked._replace(
            dropped=[*leased, *checked.dropped],
            num_dropped=checked.num_dropped + len(leased),
            reasons=[rules.LEASED] * len(leased) + list(checked.reasons),
        )
    quarantine_at = now_ms if quarantine else None
    try:
        result = _delete_checked(
            dlog, latest, the_plan, checked, enforce_retention_duration, audit, batch_size, run, quarantine_at
        )
    finally:
        if checked.release is not None:
            checked.release()
    result.leases = apply_pins.to_dicts(now_ms)
    kept += leased  # left out when this call made the plan, and now
    result.lease_kept_files, result.lease_kept_bytes = len(kept), sum(f.size for f in kept)
    if quarantine:
        result.resumed = resumed
        if result.quarantine is None:  # nothing left to move: no quarantine made
            result.quarantine = _planned_cost(dlog, result.plan.with_files([]))
    return result


def _planned_cost(dlog: DeltaLog, plan: VacuumPlan) -> dict[str, Any]:
    """What moving `plan`'s files into a quarantine costs on the table's store (`move_cost`)."""
    method = getattr(dlog.store, "move_method", "copy+delete")
    if plan.files_inline:
        return move_cost([f.size for f in plan.files], method=method)
    cost = move_cost([], method=method)  # counts only (a Spark plan): per-file calls from the totals
    per_file = 2 if method == "rename" else 4
    cost.update(files=plan.num_files, bytes=plan.num_bytes, requests=cost["requests"] + per_file * plan.num_files)
    cost["bytes_copied"] = 0 if method == "rename" else plan.num_bytes
    return cost


def _without_leased(plan: VacuumPlan, pins: LeasePins) -> tuple[VacuumPlan, list[PlannedFile]]:
    """`plan` without the files the live leases need, and those files (a plan without its list: as it is)."""
    if not pins.paths or not plan.files_inline:
        return plan, []
    keep, leased = split_leased(plan.files, pins.paths)
    return (plan.with_files(keep) if leased else plan), leased


def untracked_grace_ms(hours: float | None) -> int:
    """`untracked_grace_hours` in ms: None is the default; else finite hours >= 0, or `InvalidArgumentError`."""
    if hours is None:
        return int(rules.DEFAULT_UNTRACKED_GRACE_HOURS * rules.HOUR_MS)
    if isinstance(hours, bool) or not isinstance(hours, Real) or not math.isfinite(hours) or hours < 0:
        raise InvalidArgumentError(
            f"untracked_grace_hours must be a finite number of hours >= 0, got {hours!r}",
            argument="untracked_grace_hours",
        )
    return math.ceil(float(hours) * rules.HOUR_MS)


def _check_plan_table(plan: VacuumPlan, table_uri: str, snapshot: Snapshot) -> None:
    """Refuse a plan for another location, another `metaData.id` (the table recreated here) or a version
    not reached yet, or naming an entry no planner writes (`VacuumPlanRefusedError`)."""
    why = None
    if plan.table != table_uri:
        why = f"The plan is for table {plan.table}, not {table_uri}"
    elif plan.table_id is not None and plan.table_id != snapshot.metadata.id:
        why = f"The plan is for table id {plan.table_id}, but the table at {table_uri} has id {snapshot.metadata.id}"
    elif plan.version > snapshot.version:
        why = f"The plan was made at version {plan.version}, newer than the table's latest ({snapshot.version})"
    if why is not None:
        raise rules.VacuumPlanRefusedError(f"{why}: nothing was deleted", argument="plan", table=table_uri)
    rules.check_entries(plan, table_uri)


def _delete_checked(
    dlog: DeltaLog,
    snapshot: Snapshot,
    plan: VacuumPlan,
    checked: Revalidation,
    enforce: bool,
    audit: bool | None,
    batch_size: int,
    executor: VacuumExecutor,
    quarantine_at: int | None,
) -> VacuumResult:
    """VACUUM START, the deletes, VACUUM END, for a re-validated plan; with `quarantine_at` (the apply's
    clock) the quarantine's manifest, moves and completion marker instead of the deletes."""
    reasons = list(checked.reasons)
    for i, f in enumerate(checked.dropped):
        why = reasons[i] if i < len(reasons) else "re-validation"
        log.warning("VACUUM of %s: %s dropped from the plan (%s): kept", plan.table, f.path, why)
    if checked.num_dropped > len(checked.dropped):
        log.warning("VACUUM of %s: %d planned files dropped in all", plan.table, checked.num_dropped)
    if checked.num_missing:
        log.warning("VACUUM of %s: %d planned files were gone already (not counted)", plan.table, checked.num_missing)
    result = VacuumResult(
        plan,
        dry_run=False,
        dropped=list(checked.dropped),
        reasons=reasons,
        missing=list(checked.missing),
        num_dropped=checked.num_dropped,
        num_missing=checked.num_missing,
    )
    keep = checked.plan
    if not keep.num_files:
        if checked.missing:  # a run killed after its deletes left their directories behind
            dirs = {rules.partition_of(f.path) for f in checked.missing}
            result.directories = remove_empty_dirs(dlog.store, dlog.table_uri, dirs)
        return result
    write_audit = _audit_default(dlog) if audit is None else audit
    conf = snapshot.metadata.configuration
    params: dict[str, Any] = {
        "retentionCheckEnabled": enforce,
        "defaultRetentionMillis": deleted_file_retention_ms(conf),
        "specifiedRetentionMillis": plan.retention_ms,
    }
    quarantine_id = None if quarantine_at is None else new_quarantine_id(quarantine_at, os.urandom(4).hex())
    if quarantine_id is not None:
        params["quarantineId"] = quarantine_id
    if write_audit:
        start_metrics = {"numFilesToDelete": keep.num_files, "sizeOfDataToDelete": keep.num_bytes}
        result.audit_versions.append(_commit(snapshot, "VACUUM START", params, start_metrics))
    status = "FAILED"
    moved = 0
    try:
        if quarantine_id is None or quarantine_at is None:
            report_progress(_DELETING, 0, keep.num_files)
            done = executor.delete(dlog, checked, batch_size=batch_size)
            result.deleted, result.deleted_bytes, result.directories = done
            report_progress(_DELETING, result.deleted, keep.num_files)
        else:
            start = result.audit_versions[0] if result.audit_versions else None
            manifest = start_quarantine(
                dlog, snapshot, keep, now_ms=quarantine_at, audit_version=start, quarantine_id=quarantine_id
            )
            report_progress(_MOVING, 0, keep.num_files)
            done = executor.move(dlog, checked, destination=files_dir(quarantine_id))
            moved, result.directories = done.files, done.directories
            report_progress(_MOVING, moved, keep.num_files)
            finish_quarantine(dlog, manifest, now_ms=quarantine_at, moved=done.files, moved_bytes=done.bytes)
            result.quarantine_id = quarantine_id
            result.quarantine = {"id": quarantine_id, "location": quarantine_location(dlog, quarantine_id)}
            result.quarantine.update(
                _planned_cost(dlog, keep), moved=moved, moved_bytes=done.bytes, state="quarantined"
            )
        status = "COMPLETED"
    finally:
        if write_audit:
            end_metrics = {"numDeletedFiles": result.deleted or moved, "numVacuumedDirectories": result.directories}
            end_params: dict[str, Any] = {"status": status}
            if quarantine_id is not None:
                end_metrics["numQuarantinedFiles"] = moved
                end_params["quarantineId"] = quarantine_id
            try:
                latest = dlog.update()
                result.audit_versions.append(_commit(latest, "VACUUM END", end_params, end_metrics))
            except DeltaError as exc:  # the files are gone either way: the END record is best effort
                log.warning("VACUUM of %s: could not commit VACUUM END (%s)", plan.table, exc)
    result.plan = keep
    if quarantine_id is not None:
        log.info("VACUUM of %s: moved %d files to quarantine %s", plan.table, moved, quarantine_id)
    else:
        log.info("VACUUM of %s: deleted %d files (%d bytes)", plan.table, result.deleted, result.deleted_bytes)
    return result
