"""Log cleanup: delete expired commits, checkpoints, `.crc`, compacted and sidecar files of a table.

`protocol.log_cleanup.plan_log_cleanup` decides over a listing (pure; PROTOCOL.md "Metadata Cleanup");
`cleanup_log` lists, reads and deletes (a dry run unless `apply`).
`delta.enableExpiredLogCleanup=false` is honoured unless `allow_when_disabled` (Spark only consults it for
the automatic cleanup). The checkpoint to keep must read (footers or JSON, sidecars present): no older one
could replace it after the cleanup. Deletes go oldest first, sidecars last, in `delete_many` batches, so a
crash leaves every version from `earliest_readable_version` readable.

`write_checkpoint_first` writes a checkpoint at the newest suitable commit when none can be kept (never
below checkpointProtection's version, Spark's exception b); a dry run plans as if it were there. Spark's
classic-named compatibility copy of a V2 checkpoint is not written. A cleanup on the table's
`delta.logRetentionDuration` refuses one shorter than `delta.deletedFileRetentionDuration`
(`RetentionConflictError`: Delta >= 4.1 refuses such properties, `enforceDeletedFileAndLogRetentionDuration
Compatibility`, as time travel VACUUM promises would break); an explicit `retention_hours` is the caller's decision.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..delta_log import DeltaLog
from ..errors import DeltaError, InvalidArgumentError, check_bool, check_int, check_number
from ..protocol.filenames import SIDECAR_DIR_NAME, FileInfo, ParsedLogPath, checkpoint_name
from ..protocol.log_cleanup import (
    ENABLE_EXPIRED_LOG_CLEANUP,
    MAX_UNREADABLE_CHECKPOINTS,
    CleanupPlan,
    check_retention_compatibility,
    checkpoint_protection_version,
    cleanup_cutoff_ms,
    expired_log_cleanup_enabled,
    plan_log_cleanup,
)
from ..protocol.log_segment import CheckpointInstance, earliest_recreatable_version
from ..protocol.table_features import check_can_write, table_features
from ..protocol.table_properties import (
    LOG_RETENTION,
    log_retention_ms,
)
from .leases import lease_pins

log = logging.getLogger(__name__)


@dataclass
class LogCleanupResult:
    """What a cleanup deleted (in a dry run, would delete); `files` relative to `_delta_log`, in deletion
    order; `checkpoint_version_written`: what `write_checkpoint_first` wrote (or would)."""

    table: str
    dry_run: bool
    cutoff_ms: int
    retention_ms: int
    files: list[str]
    num_bytes: int
    deleted: int
    earliest_readable_version: int | None
    kept_checkpoint_version: int | None
    cutoff_commit_version: int | None
    reason: str | None
    checkpoint_version_written: int | None = None
    #: the live version leases honoured (`Lease.to_dict`)
    leases: list[dict[str, Any]] = field(default_factory=list)

    @property
    def num_files(self) -> int:
        return len(self.files)

    @property
    def cutoff(self) -> str:
        return dt.datetime.fromtimestamp(self.cutoff_ms / 1000, tz=dt.UTC).isoformat()

    def to_dict(self) -> dict[str, Any]:
        """Primitive form (JSON, XCom)."""
        return {
            "table": self.table,
            "dry_run": self.dry_run,
            "cutoff": self.cutoff,
            "cutoff_ms": self.cutoff_ms,
            "retention_ms": self.retention_ms,
            "files": list(self.files),
            "num_files": self.num_files,
            "bytes": self.num_bytes,
            "deleted": self.deleted,
            "earliest_readable_version": self.earliest_readable_version,
            "kept_checkpoint_version": self.kept_checkpoint_version,
            "cutoff_commit_version": self.cutoff_commit_version,
            "checkpoint_version_written": self.checkpoint_version_written,
            "reason": self.reason,
            "leases": list(self.leases),
        }


class _Planner:
    """One table's cleanup inputs (listings, hint, sidecar references), read once and planned over."""

    def __init__(
        self, dlog: DeltaLog, *, now_ms: int, retention_ms: int, protect: int, v2: bool, keep: int | None = None
    ) -> None:
        self.dlog, self.store = dlog, dlog.store
        self.now_ms, self.retention_ms, self.protect, self.keep = now_ms, retention_ms, protect, keep
        self.sidecar_dir = self.store.join(dlog.log_dir, SIDECAR_DIR_NAME)
        self.listing = dlog.list_log(0)
        hint = dlog.read_last_checkpoint()
        self.last_checkpoint = None if hint is None else hint.version
        self.sidecars = self.store.list_from(self.sidecar_dir) if v2 else []
        self.refs: dict[str, list[str] | None] = {}

    def sidecar_refs(self, top: ParsedLogPath) -> list[str] | None:
        """Sidecar names a top-level checkpoint file references; None when it cannot be read."""
        if top.name not in self.refs:
            try:
                self.refs[top.name] = _read_sidecar_refs(self.dlog, top)
            except (DeltaError, OSError, ValueError) as exc:
                log.warning("Cannot read the sidecars of checkpoint %s (%s): keeping every sidecar", top.name, exc)
                self.refs[top.name] = None
        return self.refs[top.name]

    def unreadable(self, checkpoint: CheckpointInstance) -> str | None:
        """Why `checkpoint` cannot be kept (a file does not read, a sidecar is missing), or None."""
        present = None
        for part in checkpoint.files:
            try:
                names = _read_sidecar_refs(self.dlog, part)
            except Exception as exc:  # any failure to read makes it unfit to keep
                return f"{part.name}: {type(exc).__name__}: {exc}"
            self.refs[part.name] = names
            if names and present is None:
                present = {f.name for f in self.sidecars or self.store.list_from(self.sidecar_dir)}
            for name in names:
                if "://" in name or name.startswith("/"):
                    found = self.store.head(name) is not None
                else:
                    found = name.rsplit("/", 1)[-1] in (present or ())
                if not found:
                    return f"{part.name}: sidecar {name} is missing"
        return None

    def plan(self, *, assume_checkpoint_at: int | None = None) -> tuple[CleanupPlan, str | None]:
        """The plan, keeping only a readable checkpoint; (plan, why no readable one was found)."""
        listing, last = self.listing, self.last_checkpoint
        if assume_checkpoint_at is not None:  # a dry run of write_checkpoint_first
            name = checkpoint_name(assume_checkpoint_at)
            listing = [*listing, FileInfo(self.store.join(self.dlog.log_dir, name), 1, self.now_ms)]
            last = max(last if last is not None else -1, assume_checkpoint_at)
            self.refs[name] = []  # a new checkpoint's sidecars are new files, never older than the cutoff
        excluded: list[tuple[str, ...]] = []
        while True:
            plan = plan_log_cleanup(
                listing,
                now_ms=self.now_ms,
                retention_ms=self.retention_ms,
                last_checkpoint_version=last,
                sidecars=self.sidecars,
                sidecar_refs=self.sidecar_refs,
                protected_before=self.protect,
                exclude_checkpoints=excluded,
                table=self.dlog.table_uri,
                keep_version=self.keep,
            )
            kept = plan.kept_checkpoint
            if kept is None or kept.version == assume_checkpoint_at:
                return plan, None
            problem = self.unreadable(kept)
            if problem is None:
                return plan, None
            log.warning("Log cleanup will not keep unreadable checkpoint %s: %s", kept.version, problem)
            excluded.append(kept.names)
            if len(excluded) >= MAX_UNREADABLE_CHECKPOINTS:
                return plan, f"checkpoint {kept.version} is unreadable ({problem}); nothing is deleted"


def _read_sidecar_refs(dlog: DeltaLog, part: ParsedLogPath) -> list[str]:
    """Sidecar paths named in one checkpoint file."""
    from ..protocol.commits import parse_commit_bytes
    from ..read.checkpoint import read_parquet

    if part.extension == "json":
        data = dlog.store.read_bytes(part.file.path)
        objs = parse_commit_bytes(data, table=dlog.table_uri, version=part.version, file=part.name)
        return [str(o["sidecar"]["path"]) for o in objs if isinstance(o.get("sidecar"), dict)]
    table = read_parquet(dlog.store, part.file.path, ["sidecar.path"])
    if "sidecar" not in table.column_names:
        return []
    rows = table.column("sidecar").to_pylist()
    return [str(r["path"]) for r in rows if isinstance(r, dict) and r.get("path")]


def _relative(dlog: DeltaLog, path: str) -> str:
    prefix = dlog.log_dir.rstrip("/") + "/"
    return path[len(prefix) :] if path.startswith(prefix) else path.rsplit("/", 1)[-1]


def cleanup_log(
    table: DeltaLog | str | os.PathLike[str],
    *,
    retention_hours: float | None = None,
    apply: bool = False,
    clock: Callable[[], int] | None = None,
    write_checkpoint_first: bool = False,
    allow_when_disabled: bool = False,
    storage_options: Mapping[str, Any] | None = None,
    batch_size: int = 1000,
    progress: Callable[[int], None] | None = None,
    lease_location: str | os.PathLike[str] | None = None,
) -> LogCleanupResult:
    """Delete (with `apply=True`; else report) the log files older than the log retention.

    :param retention_hours: overrides `delta.logRetentionDuration`.
    :param progress: called after each `delete_many` batch with the number of files deleted so far.
    :param lease_location: the table's lease folder (default `<table>/_delta_leases`).
    :raises RetentionConflictError: the log retention is shorter than the deleted-file retention.
    :raises LeaseError: a lease file that is not a valid lease (nothing is deleted).
    """
    check_bool(apply, "apply")
    check_bool(write_checkpoint_first, "write_checkpoint_first")
    check_bool(allow_when_disabled, "allow_when_disabled")
    check_int(batch_size, "batch_size", minimum=1)
    dlog = DeltaLog.of(table, storage_options)
    snapshot = dlog.update()
    check_can_write(snapshot.protocol, snapshot.metadata, ["cleanup"], table=dlog.table_uri, version=snapshot.version)
    conf = snapshot.metadata.configuration
    if retention_hours is not None:
        retention_ms = int(check_number(retention_hours, "retention_hours", table=dlog.table_uri) * 3_600_000)
    else:
        retention_ms = log_retention_ms(conf)
        if retention_ms < 0:
            raise InvalidArgumentError(
                f"Table property {LOG_RETENTION}={conf.get(LOG_RETENTION)!r} is negative",
                argument=LOG_RETENTION,
                table=dlog.table_uri,
            )
        check_retention_compatibility(conf, table=dlog.table_uri)
    now_ms = (clock or dlog.clock)()
    if not expired_log_cleanup_enabled(conf) and not allow_when_disabled:
        listing = dlog.list_log(0)
        return _result(
            dlog,
            apply,
            retention_ms,
            plan=None,
            cutoff_ms=cleanup_cutoff_ms(now_ms, retention_ms),
            earliest=earliest_recreatable_version(dlog.table_uri, listing),
            reason=f"{ENABLE_EXPIRED_LOG_CLEANUP}=false on this table (allow_when_disabled=True overrides it)",
        )
    protect = checkpoint_protection_version(snapshot.protocol, snapshot.metadata)
    v2 = "v2Checkpoint" in table_features(snapshot.protocol)
    pins = lease_pins(
        dlog,
        now_ms=now_ms,
        table_id=snapshot.metadata.id,
        location=lease_location,
        storage_options=storage_options,
        with_paths=False,
    )
    keep = min(pins.versions, default=None)  # its checkpoint and commits stay
    planner = _Planner(dlog, now_ms=now_ms, retention_ms=retention_ms, protect=protect, v2=v2, keep=keep)
    plan, problem = planner.plan()
    written: int | None = None
    wanted = plan.checkpoint_wanted
    if write_checkpoint_first and plan.kept_checkpoint is None and wanted is not None and problem is None:
        if 0 < protect and wanted < protect:
            problem = (
                f"{plan.reason}; no checkpoint is written at {wanted}: checkpointProtection forbids writing one "
                f"below version {protect} during a cleanup"
            )
        elif not apply:
            plan, problem = planner.plan(assume_checkpoint_at=wanted)
            written = wanted
        else:
            from .checkpoint import write_checkpoint  # here: the writer loads pyarrow and the engine

            path = write_checkpoint(dlog, version=wanted, clock=lambda: now_ms).path
            log.info("Log cleanup of %s: wrote checkpoint %s first (%s)", dlog.table_uri, wanted, path)
            written = wanted
            planner = _Planner(dlog, now_ms=now_ms, retention_ms=retention_ms, protect=protect, v2=v2, keep=keep)
            plan, problem = planner.plan()
    deleted = 0
    if apply and problem is None and plan.files:
        paths = [f.path for f in plan.files]
        log.info(
            "Log cleanup of %s: deleting %d files before checkpoint %s",
            dlog.table_uri,
            len(paths),
            plan.kept_checkpoint_version,
        )
        for i in range(0, len(paths), batch_size):
            deleted += dlog.store.delete_many(paths[i : i + batch_size])
            if progress is not None:
                progress(deleted)
    earliest = (
        plan.earliest_readable_version
        if problem is None
        else earliest_recreatable_version(dlog.table_uri, planner.listing)
    )
    result = _result(dlog, apply, retention_ms, plan=plan, cutoff_ms=plan.cutoff_ms, earliest=earliest, reason=problem)
    result.deleted, result.checkpoint_version_written = deleted, written
    result.leases = pins.to_dicts(now_ms)
    return result


def _result(
    dlog: DeltaLog,
    apply: bool,
    retention_ms: int,
    *,
    plan: CleanupPlan | None,
    cutoff_ms: int,
    earliest: int | None,
    reason: str | None,
) -> LogCleanupResult:
    """The result of `plan`; with a `reason` (or no plan) nothing is deleted and no checkpoint is kept."""
    doomed = plan.files if plan is not None and reason is None else ()
    return LogCleanupResult(
        table=dlog.table_uri,
        dry_run=not apply,
        cutoff_ms=cutoff_ms,
        retention_ms=retention_ms,
        files=[_relative(dlog, f.path) for f in doomed],
        num_bytes=sum(f.size for f in doomed),
        deleted=0,
        earliest_readable_version=earliest,
        kept_checkpoint_version=plan.kept_checkpoint_version if plan is not None and reason is None else None,
        cutoff_commit_version=None if plan is None else plan.cutoff_commit,
        reason=reason or (None if plan is None else plan.reason),
    )
