"""VACUUM: delete files under a table root that no version within retention needs (PROTOCOL.md "Delta Log Entries").

`vacuum(table)` runs the writer check for `vacuum` (unknown features, catalog-managed tables refused;
`vacuumProtocolCheck` tables get the full writer check), lists the table (FULL) or reads the tombstones
(LITE), and lets `protocol.vacuum.plan_vacuum` decide. It is a dry run unless `dry_run=False`.

Apply (`dry_run=False`, with a `plan` from an earlier dry run or a fresh one): a plan for another table
(another location, another `metaData.id` at the same location, a version the table never reached) or
naming an entry outside the table root or in `_delta_log` is refused whole (`VacuumPlanRefusedError`,
nothing deleted); a protocol change refuses too. Every entry is then re-validated against the table's
latest snapshot and against storage (`protocol.vacuum.revalidate`: each file's size and mtime now must be
those the plan's listing recorded, a regular file, older than the cutoff, untracked files older than the
grace period; hidden names, duplicates, files active again or tombstoned within retention are dropped and
reported with their reason; files no longer there are reported as `missing` and not counted). Then
`VACUUM START` is committed, the kept files are deleted in batches (each batch retried), empty
directories left behind are removed on local stores, and `VACUUM END` is committed with status
`COMPLETED` (or `FAILED`, then the error is raised). `deleted` counts the files re-validation found and
deleted (a file removed by someone else between that check and the delete request is counted too: no
store reports which of a batch existed). The audit commits go through the transaction (`delta.txn`); by
default they are written on the schemes where Spark writes them (`file`, `hdfs`, `abfs[s]`, `wasb[s]`,
`adl`, `gs`; not `s3`), `audit=` forces either way. A failed `VACUUM END` commit is logged, not raised
(the files are gone either way).

Where the FULL listing, the re-validation and the deletes run is the engine's `VacuumExecutor`
(`engine.vacuum_executor()`): this process on the local engine (`engines.local_vacuum`), Spark
executors on the Spark engine (`engines.spark.vacuum`: the listing split by directory, the file list
never on the driver); checks, retention and audit commits stay here either way, and the rules are
`protocol.vacuum`'s. The cyclic garbage collector is paused while a snapshot is replayed and a plan
made in this process (`_gc_paused`).

LITE reads every remove from the commit files (checkpoints drop expired tombstones), so it needs the
log from version 0 and otherwise refuses with "run FULL"; `_delta_log/_last_vacuum_info` (Spark's
incremental LITE start) is neither read nor written. A LITE plan looks each of its files up once
(`stat_entries`) so that it carries the same evidence as a FULL one. With `audit=None` the audit commits
are skipped, with a warning, on a store without atomic put-if-absent.

Grace period (`untracked_grace_hours`, default 1 hour; 0 only when passed): an untracked file younger than
it is never deleted, whatever the retention and `enforce_retention_duration` (a writer's data file staged
before its commit: delta-rs writes its files, then commits). The plan reports how many files and bytes it
kept (`grace_kept_files`, `grace_kept_bytes`); apply re-applies it with the apply's own value and clock.

Retention: `retention_hours` (else `delta.deletedFileRetentionDuration`, 7 days). A value shorter than
the table's is refused unless `enforce_retention_duration=False`; negative or non-finite values are
`InvalidArgumentError`s. Delta >= 4.1 makes the table property the source of truth: Spark's
`VACUUM t RETAIN n HOURS` ignores `n` unless it is 0 (with a warning; Spark `DeltaSQLConf`
`spark.databricks.delta.vacuum.retentionWindowIgnore.enabled`, true), and `RETAIN 0 HOURS` still needs
`spark.databricks.delta.retentionDurationCheck.enabled=false`. Here the property is the default and the
floor: a longer `retention_hours` is honoured (it deletes less), a shorter one only with the explicit
override (`enforce_retention_duration=False`, which is how `RETAIN 0 HOURS` is asked for). Log cleanup
refuses a table whose `delta.logRetentionDuration` is shorter (`maintenance.log_cleanup`).

Version leases (`maintenance.leases`): the live leases are read when a plan is made and again when an
apply starts its re-validation; each leased version's active and DV files are taken out of the plan
before the engine re-validates and deletes, so both engines keep them. The result names the leases
(`leases`) and counts what they kept (`lease_kept_files`, `lease_kept_bytes`; at apply, entries dropped
with reason `leased`). `lease_location=` names a lease folder other than `<table>/_delta_leases`.

Quarantine (`quarantine=True`, `maintenance.quarantine`): the apply moves the kept files to
`<table>/_delta_quarantine/<id>/files/` instead of deleting them (manifest first, then the moves, then
the completion marker; between `VACUUM START` and `VACUUM END`, whose parameters name the quarantine), so
`undo_quarantine` can put them back. It first resumes the table's quarantines a killed VACUUM left
unfinished. The dry run and the result state the cost of the moves (`quarantine`: method, files, bytes,
bytes copied, storage calls); the result names `quarantine_id`; `deleted` stays 0. Local engine only.
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

from ..delta_log import DeltaLog
from ..errors import DeltaError, InvalidArgumentError, OperationNotAllowedError, check_bool, check_int
from ..protocol.actions import AddFile, RemoveFile
from ..protocol.filenames import LogFileKind, parse_log_path
from ..protocol.leases import split_leased
from ..protocol.quarantine import files_dir, move_cost, new_quarantine_id
from ..protocol.table_features import check_can_write
from ..protocol.table_properties import DELETED_FILE_RETENTION, deleted_file_retention_ms
from ..protocol.vacuum import (
    DEFAULT_UNTRACKED_GRACE_HOURS,
    FULL,
    HOUR_MS,
    LEASED,
    LITE,
    MODES,
    LoggedFile,
    PlannedFile,
    VacuumPlan,
    VacuumPlanRefusedError,
    partition_of,
    plan_vacuum,
    refused_entry,
    with_evidence,
)
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
    """A vacuum's plan and, when applied, what was deleted. `dropped` are plan entries re-validation kept
    (`reasons[i]` says why `dropped[i]`: `protocol.vacuum.DROP_REASONS`), `missing` entries whose file was
    gone (neither deleted nor counted); the Spark executor lists at most its collect bound of either,
    `num_dropped` and `num_missing` count all."""

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
    #: `quarantine=True`: the moves' cost (`protocol.quarantine.move_cost`; applied: with the id, location
    #: and files moved), the quarantine's id, and the unfinished quarantines this call resumed first
    quarantine: dict[str, Any] | None = None
    quarantine_id: str | None = None
    resumed: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Primitive form (JSON, XCom); a dry run's dict is a plan `vacuum(plan=...)` accepts. Each dropped
        entry carries its `reason`."""
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
def _gc_paused(pause: bool = True) -> Iterator[None]:
    """The cyclic garbage collector paused (when `pause`) while a snapshot is replayed and a plan made in
    this process: that makes millions of short-lived objects and no cycles, and each full collection would
    rescan every live container (a third of the planning time of a 1M-file table). Restored as it was."""
    enabled = gc.isenabled()
    if pause:
        gc.disable()
    try:
        yield
    finally:
        if pause and enabled:
            gc.enable()


def _require_lite_log(dlog: DeltaLog) -> None:
    """LITE reads every tombstone from the log: it needs the commits from version 0 (no `_last_vacuum_info`
    is kept here), because checkpoints drop expired tombstones (Spark `deltaCannotVacuumLite`)."""
    versions = [
        p.version
        for p in (parse_log_path(i) for i in dlog.store.list_from(dlog.log_dir))
        if p is not None and p.kind is LogFileKind.COMMIT
    ]
    if not versions or min(versions) != 0:
        raise OperationNotAllowedError(
            f"VACUUM LITE needs every commit from version 0, but the earliest is "
            f"{min(versions) if versions else None} (log cleanup removed the rest): run FULL",
            table=dlog.table_uri,
        )


def _lite_tombstones(dlog: DeltaLog, snapshot: Snapshot) -> list[LoggedFile]:
    """Every remove in the commits up to the snapshot's version (commit files read in order)."""
    from ..read.commits import read_commit

    out: dict[str, LoggedFile] = {}
    parsed = sorted(
        (p for p in (parse_log_path(i) for i in dlog.store.list_from(dlog.log_dir)) if p is not None),
        key=lambda p: p.version,
    )
    for p in parsed:
        if p.kind is not LogFileKind.COMMIT or p.version > snapshot.version:
            continue
        for a in read_commit(dlog.store, dlog.table_uri, p):
            if isinstance(a, RemoveFile):
                out[a.key] = LoggedFile(a.path, a.deletion_vector, a.deletion_timestamp, a.size)
            elif isinstance(a, AddFile):
                out.pop(a.key, None)
    return list(out.values())


def make_plan(
    dlog: DeltaLog,
    snapshot: Snapshot,
    *,
    mode: str,
    retention_ms: int,
    now_ms: int,
    executor: VacuumExecutor,
    untracked_grace_ms: int = int(DEFAULT_UNTRACKED_GRACE_HOURS * HOUR_MS),
) -> VacuumPlan:
    """List (FULL, through `executor`) or read the log (LITE, here) and plan at `now_ms - retention_ms`.
    A LITE plan's files are looked up once (`stat_entries`): each carries its size and mtime as stored."""
    if mode == FULL:
        return executor.plan_full(
            dlog,
            snapshot,
            cutoff_ms=now_ms - retention_ms,
            retention_ms=retention_ms,
            partition_columns=partition_columns(snapshot),
            now_ms=now_ms,
            untracked_grace_ms=untracked_grace_ms,
        )
    active, tombs = logged_files(snapshot)
    _require_lite_log(dlog)
    plan = plan_vacuum(
        table=dlog.table_uri,
        version=snapshot.version,
        mode=mode,
        cutoff_ms=now_ms - retention_ms,
        retention_ms=retention_ms,
        active=active,
        tombstones=_lite_tombstones(dlog, snapshot) + tombs,
        listing=None,
        partition_columns=partition_columns(snapshot),
        protocol=snapshot.protocol.to_json(),
        now_ms=now_ms,
        untracked_grace_ms=untracked_grace_ms,
        table_id=snapshot.metadata.id,
    )
    return with_evidence(plan, stat_entries(dlog.store, dlog.table_uri, [f.path for f in plan.files]))


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


def vacuum(
    table_or_log: DeltaLog | str | os.PathLike[str],
    *,
    retention_hours: float | None = None,
    enforce_retention_duration: bool = True,
    mode: str = FULL,
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
) -> VacuumResult:
    """Plan (dry run, the default) or delete the files no version within retention needs.

    :param table_or_log: a `DeltaLog`, or a table path/URI (with `storage_options`).
    :param retention_hours: overrides `delta.deletedFileRetentionDuration`.
    :param enforce_retention_duration: refuse a retention shorter than the table's (default).
    :param mode: `"full"` (list the table) or `"lite"` (tombstones from the log only).
    :param dry_run: plan only; nothing is written or deleted.
    :param plan: apply this plan (a `VacuumPlan` or its dict) instead of making one; re-validated first.
    :param clock: epoch-ms clock (default: the `DeltaLog`'s).
    :param audit: write the `VACUUM START`/`END` commits (None: where Delta does, by scheme).
    :param batch_size: files per delete request.
    :param executor: where the FULL listing, re-validation and deletes run (default: the log's engine's
        `vacuum_executor()`: this process on the local engine, the executors on Spark).
    :param plan_dir: on an engine that keeps a big plan's file list apart (Spark), where it goes.
    :param lease_location: the table's lease folder (`maintenance.leases`; default `<table>/_delta_leases`).
    :param quarantine: move the files to `<table>/_delta_quarantine/<id>/` instead of deleting them
        (`maintenance.quarantine`: `undo_quarantine` puts them back, `purge_quarantines` deletes them);
        the local engine only.
    :param untracked_grace_hours: an untracked file (no add or remove of the snapshot names it) whose
        modification time is younger than this many hours is never deleted, neither planned nor applied
        (None: `DEFAULT_UNTRACKED_GRACE_HOURS`, 1 hour; 0 turns it off). Independent of the retention:
        `enforce_retention_duration=False` does not shorten it. An apply uses its own value, not the plan's.
    :raises InvalidArgumentError: bad arguments, a retention refused.
    :raises VacuumPlanRefusedError: (an `InvalidArgumentError`) a plan for another table, or with an entry
        outside the table root or in `_delta_log`: nothing is deleted.
    :raises UnsupportedFeatureError, OperationNotAllowedError: a table this library must not vacuum, a
        LITE vacuum whose commits were cleaned up, a protocol changed since the plan, a plan without its
        file list applied while a version lease is live, `quarantine=True` on an engine whose executor
        cannot move files (Spark's: refused before anything is planned).
    :raises LeaseError: a lease file that is not a valid lease (nothing is deleted).
    """
    check_bool(dry_run, "dry_run")
    check_bool(enforce_retention_duration, "enforce_retention_duration")
    if audit is not None:
        check_bool(audit, "audit")
    check_int(batch_size, "batch_size", minimum=1)
    check_bool(quarantine, "quarantine")
    if mode not in MODES:
        raise InvalidArgumentError(f"mode must be one of {MODES}, got {mode!r}", argument="mode")
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

    kept = (0, 0)
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
            the_plan, kept = _without_leased(the_plan, plan_pins)
        else:
            the_plan = plan if isinstance(plan, VacuumPlan) else VacuumPlan.from_dict(plan)
            _check_plan_table(the_plan, dlog.table_uri, snapshot)
    if dry_run:
        return VacuumResult(
            the_plan,
            dry_run=True,
            leases=plan_pins.to_dicts(now_ms),
            lease_kept_files=kept[0],
            lease_kept_bytes=kept[1],
            quarantine=_planned_cost(dlog, the_plan) if quarantine else None,
        )
    # re-validate against the table as it is now: a writer may have committed while the table was listed
    with _gc_paused(in_process):
        latest = dlog.update()
    _check_plan_table(the_plan, dlog.table_uri, latest)
    result = _apply(
        dlog,
        latest,
        the_plan,
        enforce_retention_duration,
        now_ms,
        audit,
        batch_size,
        run,
        grace_ms,
        lambda: pins(latest, now_ms),
        quarantine,
    )
    if quarantine:
        result.resumed = resumed
        if result.quarantine is None:  # nothing left to move: no quarantine made
            result.quarantine = _planned_cost(dlog, result.plan.with_files([]))
    result.lease_kept_files += kept[0]  # left out when this call made the plan
    result.lease_kept_bytes += kept[1]
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


def _without_leased(plan: VacuumPlan, pins: LeasePins) -> tuple[VacuumPlan, tuple[int, int]]:
    """`plan` without the files the live leases need, and (files, bytes) left out. A plan that does not
    carry its file list (Spark, `files_inline` false) is returned as it is: its apply refuses while a
    lease is live."""
    if not pins.paths:
        return plan, (0, 0)
    if not plan.files_inline:
        log.warning(
            "VACUUM of %s: the plan does not carry its file list, so it cannot leave out the files of the "
            "leased versions %s; applying it is refused while those leases are live",
            plan.table,
            pins.versions,
        )
        return plan, (0, 0)
    keep, vetoed = split_leased(plan.files, pins.paths)
    if not vetoed:
        return plan, (0, 0)
    return plan.with_files(keep), (len(vetoed), sum(f.size for f in vetoed))


def untracked_grace_ms(hours: float | None) -> int:
    """`vacuum(untracked_grace_hours=...)` in ms: None is the default (`DEFAULT_UNTRACKED_GRACE_HOURS`);
    otherwise a finite number of hours >= 0 (0 only when passed), else `InvalidArgumentError`."""
    if hours is None:
        return int(DEFAULT_UNTRACKED_GRACE_HOURS * HOUR_MS)
    if isinstance(hours, bool) or not isinstance(hours, Real) or not math.isfinite(hours) or hours < 0:
        raise InvalidArgumentError(
            f"untracked_grace_hours must be a finite number of hours >= 0, got {hours!r}",
            argument="untracked_grace_hours",
        )
    return math.ceil(float(hours) * HOUR_MS)


def _check_plan_table(plan: VacuumPlan, table_uri: str, snapshot: Snapshot) -> None:
    """Refuse (`VacuumPlanRefusedError`) a plan made for another table: another location, another
    `metaData.id` (the table recreated at this location), or a version this table has not reached; and a
    plan carrying its file list inline with an entry no planner writes (`protocol.vacuum.refused_entry`)."""
    why = None
    if plan.table != table_uri:
        why = f"The plan is for table {plan.table}, not {table_uri}"
    elif plan.table_id is not None and plan.table_id != snapshot.metadata.id:
        why = f"The plan is for table id {plan.table_id}, but the table at {table_uri} has id {snapshot.metadata.id}"
    elif plan.version > snapshot.version:
        why = f"The plan was made at version {plan.version}, newer than the table's latest ({snapshot.version})"
    if why is not None:
        raise VacuumPlanRefusedError(f"{why}: nothing was deleted", argument="plan", table=table_uri)
    for f in plan.files:
        entry = refused_entry(f.path)
        if entry is not None:
            raise VacuumPlanRefusedError(
                f"The vacuum plan names {f.path!r}: {entry}. No planner writes such an entry; nothing was deleted",
                argument="plan",
                table=table_uri,
                file=f.path,
            )


def _apply(
    dlog: DeltaLog,
    snapshot: Snapshot,
    plan: VacuumPlan,
    enforce: bool,
    now_ms: int,
    audit: bool | None,
    batch_size: int,
    executor: VacuumExecutor,
    grace_ms: int,
    read_pins: Callable[[], LeasePins],
    quarantine: bool = False,
) -> VacuumResult:
    if plan.protocol and plan.protocol != snapshot.protocol.to_json():
        raise OperationNotAllowedError(
            f"The table's protocol changed since the vacuum plan at version {plan.version} "
            f"({plan.protocol} -> {snapshot.protocol.to_json()}): plan again",
            table=dlog.table_uri,
            version=snapshot.version,
        )
    cutoff = plan.cutoff_ms
    table_ms = deleted_file_retention_ms(snapshot.metadata.configuration)
    if enforce and plan.retention_ms < table_ms:
        raise InvalidArgumentError(
            f"The plan's retention ({plan.retention_ms} ms) is shorter than the table's {DELETED_FILE_RETENTION} "
            f"({table_ms} ms); pass enforce_retention_duration=False to apply it anyway",
            argument="plan",
            table=dlog.table_uri,
        )
    if enforce:  # a table retention raised since the plan protects more
        cutoff = min(cutoff, now_ms - table_ms)
    # re-validation starts with the lease read: a lease taken before this line is honoured
    pins = read_pins()
    if pins.leases and not plan.files_inline:
        raise OperationNotAllowedError(
            f"The vacuum plan does not carry its file list ({plan.num_files} files), so the files of the leased "
            f"versions {pins.versions} cannot be left out of it: nothing was deleted. Apply it after the leases "
            f"({', '.join(le.id for le in pins.leases)}) end or are released, or plan with its file list",
            table=dlog.table_uri,
            version=snapshot.version,
        )
    leased: list[PlannedFile] = []
    if pins.paths:
        keep, leased = split_leased(plan.files, pins.paths)
        if leased:
            plan = plan.with_files(keep)
    with _gc_paused(getattr(executor, "in_process", False)):
        checked = executor.revalidate(
            dlog,
            snapshot,
            plan,
            cutoff_ms=cutoff,
            partition_columns=partition_columns(snapshot),
            now_ms=now_ms,
            untracked_grace_ms=grace_ms,
        )
    if leased:
        checked = checked._replace(
            dropped=[*leased, *checked.dropped],
            num_dropped=checked.num_dropped + len(leased),
            reasons=[LEASED] * len(leased) + list(checked.reasons),
        )
    try:
        result = _delete_checked(
            dlog, snapshot, plan, checked, enforce, audit, batch_size, executor, now_ms if quarantine else None
        )
    finally:
        if checked.release is not None:
            checked.release()
    result.leases = pins.to_dicts(now_ms)
    result.lease_kept_files, result.lease_kept_bytes = len(leased), sum(f.size for f in leased)
    return result


def _delete_checked(
    dlog: DeltaLog,
    snapshot: Snapshot,
    plan: VacuumPlan,
    checked: Revalidation,
    enforce: bool,
    audit: bool | None,
    batch_size: int,
    executor: VacuumExecutor,
    quarantine_at: int | None = None,
) -> VacuumResult:
    """VACUUM START, the deletes, VACUUM END, for a re-validated plan. With `quarantine_at` (the apply's
    clock), the kept files are moved into a new quarantine instead (`maintenance.quarantine`): its
    manifest, the moves (`executor.move`), its completion marker, between START and END."""
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
            dirs = {partition_of(f.path) for f in checked.missing}
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
            done = executor.delete(dlog, checked, batch_size=batch_size)
            result.deleted, result.deleted_bytes, result.directories = done
        else:
            start = result.audit_versions[0] if result.audit_versions else None
            manifest = start_quarantine(
                dlog, snapshot, keep, now_ms=quarantine_at, audit_version=start, quarantine_id=quarantine_id
            )
            result.quarantine_id = quarantine_id
            result.quarantine = {
                "id": quarantine_id,
                "location": quarantine_location(dlog, quarantine_id),
                **_planned_cost(dlog, keep),
                "moved": 0,
                "moved_bytes": 0,
                "state": "moving",
            }
            done = executor.move(dlog, checked, destination=files_dir(quarantine_id))
            moved, result.directories = done.files, done.directories
            result.quarantine.update(moved=done.files, moved_bytes=done.bytes)
            finish_quarantine(dlog, manifest, now_ms=quarantine_at, moved=done.files, moved_bytes=done.bytes)
            result.quarantine["state"] = "quarantined"
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
        return result
    log.info("VACUUM of %s: deleted %d files (%d bytes)", plan.table, result.deleted, result.deleted_bytes)
    return result


__all__ = [
    "DEFAULT_UNTRACKED_GRACE_HOURS",
    "FULL",
    "LITE",
    "VacuumPlanRefusedError",
    "VacuumResult",
    "make_plan",
    "untracked_grace_ms",
    "vacuum",
]
