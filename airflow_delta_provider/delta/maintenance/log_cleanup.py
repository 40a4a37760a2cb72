"""Log cleanup: delete expired commits, checkpoints, `.crc`, compacted and sidecar files of a table.

`plan_log_cleanup` decides over a listing (pure; PROTOCOL.md "Metadata Cleanup", Spark `MetadataCleanup`);
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

Rules of `plan_log_cleanup`:

1. Cutoff: `now - retention` truncated to the UTC day (`hour`, `minute` for tests, as in Spark).
2. Commit times are file times made strictly increasing (`history.monotonize`), as Spark's cleanup uses
   (no ICT read: a GET per commit); the cutoff commit is the newest at or before the cutoff, and it stays.
3. Kept checkpoint: the newest complete one at or before the cutoff commit and `_last_checkpoint` (none:
   nothing goes, as in Spark) whose first retained commit keeps its time, so timestamp queries answer alike.
4. Deleted: commits, checkpoint parts and `N.crc` below it, compactions up to it, each `.<name>.crc`.
5. checkpointProtection (version P): remove every commit below P, or leave a checkpoint right after the
   last removed one (Spark `metadataCleanupAllowed`), else nothing goes.
6. Sidecars older than the cutoff that no retained checkpoint names (any unknown: none go); deleted last.
7. `keep_version` (a live lease's) bounds the kept checkpoint too.
"""

from __future__ import annotations

import bisect
import datetime as dt
import logging
import os
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..delta_log import DeltaLog
from ..errors import DeltaError, InvalidArgumentError, RetentionConflictError, check_bool, check_int, check_number
from ..protocol.actions import Metadata, Protocol
from ..protocol.filenames import SIDECAR_DIR_NAME, FileInfo, LogFileKind, ParsedLogPath, checkpoint_name, parse_log_path
from ..protocol.history import monotonize
from ..protocol.log_segment import CheckpointInstance, complete_checkpoints, earliest_recreatable_version
from ..protocol.table_features import check_can_write, table_features
from ..protocol.table_properties import (
    DEFAULT_DELETED_FILE_RETENTION,
    DEFAULT_LOG_RETENTION,
    DELETED_FILE_RETENTION,
    LOG_RETENTION,
    deleted_file_retention_ms,
    log_retention_ms,
)
from .leases import lease_pins

log = logging.getLogger(__name__)

#: Unreadable checkpoints skipped before giving up on finding one to keep.
MAX_UNREADABLE_CHECKPOINTS = 3
#: Table property: `false` turns log cleanup off (Spark `ENABLE_EXPIRED_LOG_CLEANUP`, default true).
ENABLE_EXPIRED_LOG_CLEANUP = "delta.enableExpiredLogCleanup"
#: Table property set by DROP FEATURE ... TRUNCATE HISTORY (Spark `REQUIRE_CHECKPOINT_PROTECTION_BEFORE_VERSION`).
REQUIRE_CHECKPOINT_PROTECTION = "delta.requireCheckpointProtectionBeforeVersion"
CHECKPOINT_PROTECTION_FEATURE = "checkpointProtection"

_GRANULARITY_MS = {"day": 86_400_000, "hour": 3_600_000, "minute": 60_000}
_TOP_LEVEL = (LogFileKind.CHECKPOINT_CLASSIC, LogFileKind.CHECKPOINT_UUID)

#: Sidecar names each retained top-level checkpoint references, by file name or a function (None: unknown).
SidecarRefs = Mapping[str, Collection[str]] | Callable[[ParsedLogPath], Collection[str] | None]


def expired_log_cleanup_enabled(configuration: Mapping[str, str | None]) -> bool:
    """`delta.enableExpiredLogCleanup` (default true); a value that is not a boolean is refused."""
    value = configuration.get(ENABLE_EXPIRED_LOG_CLEANUP)
    text = "true" if value is None else str(value).strip().lower()
    if text not in ("true", "false"):
        raise InvalidArgumentError(
            f"Table property {ENABLE_EXPIRED_LOG_CLEANUP}={value!r} is not true or false",
            argument=ENABLE_EXPIRED_LOG_CLEANUP,
        )
    return text == "true"


def checkpoint_protection_version(protocol: Protocol, metadata: Metadata) -> int:
    """`delta.requireCheckpointProtectionBeforeVersion` when the `checkpointProtection` feature is on, else 0."""
    if CHECKPOINT_PROTECTION_FEATURE not in table_features(protocol):
        return 0
    value = metadata.configuration.get(REQUIRE_CHECKPOINT_PROTECTION)
    try:
        return 0 if value is None else int(value)
    except ValueError:
        raise InvalidArgumentError(
            f"Table property {REQUIRE_CHECKPOINT_PROTECTION}={value!r} is not a version",
            argument=REQUIRE_CHECKPOINT_PROTECTION,
        ) from None


def check_retention_compatibility(configuration: Mapping[str, str | None], *, table: str | None = None) -> None:
    """Refuse (`RetentionConflictError`) a log retention shorter than the deleted-file retention."""
    log_ms, file_ms = log_retention_ms(configuration), deleted_file_retention_ms(configuration)
    if log_ms >= file_ms:
        return
    log_text = configuration.get(LOG_RETENTION) or f"{DEFAULT_LOG_RETENTION} (default)"
    file_text = configuration.get(DELETED_FILE_RETENTION) or f"{DEFAULT_DELETED_FILE_RETENTION} (default)"
    raise RetentionConflictError(
        f"{LOG_RETENTION}={log_text} ({log_ms / 3_600_000:g} hours) is shorter than "
        f"{DELETED_FILE_RETENTION}={file_text} ({file_ms / 3_600_000:g} hours): log cleanup would remove "
        "commits of versions whose data files VACUUM keeps for time travel (Delta >= 4.1 refuses these "
        f"properties). Raise {LOG_RETENTION} to at least {DELETED_FILE_RETENTION}, or pass an explicit "
        "retention to the cleanup; nothing was deleted",
        log_retention_ms=log_ms,
        deleted_file_retention_ms=file_ms,
        table=table,
    )


def cleanup_cutoff_ms(now_ms: int, retention_ms: float, granularity: str = "day") -> int:
    """`now - retention` truncated down to the UTC day (or hour, minute): files at or before it expire."""
    check_int(now_ms, "now_ms")
    check_number(retention_ms, "retention")
    unit = _GRANULARITY_MS.get(granularity)
    if unit is None:
        raise InvalidArgumentError(
            f"granularity must be one of {sorted(_GRANULARITY_MS)}, got {granularity!r}", argument="granularity"
        )
    return (int(now_ms - retention_ms) // unit) * unit


@dataclass(frozen=True, slots=True)
class CleanupPlan:
    """What a log cleanup deletes, oldest first; `reason`: why nothing is; `checkpoint_wanted`: where a new
    checkpoint would let it proceed."""

    cutoff_ms: int
    cutoff_commit: int | None
    kept_checkpoint: CheckpointInstance | None
    delete: tuple[FileInfo, ...]
    delete_sidecars: tuple[FileInfo, ...]
    earliest_readable_version: int | None
    reason: str | None = None
    checkpoint_wanted: int | None = None

    @property
    def kept_checkpoint_version(self) -> int | None:
        return None if self.kept_checkpoint is None else self.kept_checkpoint.version

    @property
    def files(self) -> tuple[FileInfo, ...]:
        """Everything to delete, in deletion order (log files by version, then sidecars)."""
        return (*self.delete, *self.delete_sidecars)


def _with_companions(doomed: Iterable[FileInfo], listing: Iterable[FileInfo]) -> tuple[FileInfo, ...]:
    """`doomed`, each followed by its Hadoop checksum `.<name>.crc` when the listing has one."""
    hidden = {f.name: f for f in listing if f.path.endswith(".crc") and f.name.startswith(".")}
    return tuple(x for f in doomed for x in (f, hidden.get(f".{f.name}.crc")) if x is not None)


def _doomed_sidecars(
    sidecars: Sequence[FileInfo], retained: Sequence[ParsedLogPath], refs: SidecarRefs | None, cutoff_ms: int
) -> tuple[FileInfo, ...]:
    old = [s for s in sidecars if not s.name.startswith(".") and s.modification_time < cutoff_ms]
    if not old:
        return ()
    named: set[str] = set()
    for top in retained:
        found = None if refs is None else refs.get(top.name) if isinstance(refs, Mapping) else refs(top)
        if found is None:
            return ()
        named.update(p.rstrip("/").rsplit("/", 1)[-1] for p in found)
    return _with_companions((s for s in old if s.name not in named), sidecars)


def plan_log_cleanup(
    listing: Sequence[FileInfo],
    *,
    now_ms: int,
    retention_ms: float,
    last_checkpoint_version: int | None,
    sidecars: Sequence[FileInfo] = (),
    sidecar_refs: SidecarRefs | None = None,
    protected_before: int = 0,
    granularity: str = "day",
    exclude_checkpoints: Iterable[tuple[str, ...]] = (),
    table: str = "",
    keep_version: int | None = None,
) -> CleanupPlan:
    """The cleanup of a `_delta_log` listing; `exclude_checkpoints` names unreadable checkpoint instances."""
    cutoff = cleanup_cutoff_ms(now_ms, retention_ms, granularity)
    # one directory: path order is name order, which is version order (names start with the version)
    parsed = sorted((p for f in listing if (p := parse_log_path(f)) is not None), key=lambda p: p.file.path)
    commits = [p for p in parsed if p.kind is LogFileKind.COMMIT]
    times = monotonize([(c.version, c.file.modification_time) for c in commits])
    versions = [v for v, _ in times]
    anchored = {v for (v, t), c in zip(times, commits, strict=True) if t == c.file.modification_time}
    cutoff_commit = max((v for v, t in times if t <= cutoff), default=None)

    def first_retained_keeps_time(version: int) -> bool:
        i = bisect.bisect_left(versions, version)
        return i == len(versions) or versions[i] in anchored

    def nothing(reason: str, wanted: int | None = None) -> CleanupPlan:
        earliest = earliest_recreatable_version(table, listing)
        return CleanupPlan(cutoff, cutoff_commit, None, (), (), earliest, reason, wanted)

    if cutoff_commit is None:
        return nothing("no commit is older than the cutoff")
    oldest = parsed[0].version
    limit = cutoff_commit if keep_version is None else min(cutoff_commit, keep_version)
    wanted = max((v for v in anchored if oldest < v <= limit), default=None)
    if last_checkpoint_version is None:
        return nothing("no _last_checkpoint: the log has no checkpoint to keep", wanted)
    bound = min(limit, last_checkpoint_version)
    excluded = set(exclude_checkpoints)
    complete = [
        c
        for c in complete_checkpoints(p for p in parsed if not (p.kind.is_checkpoint and p.file.size == 0))
        if c.names not in excluded
    ]
    usable = [c for c in complete if c.version <= bound and first_retained_keeps_time(c.version)]
    if not usable:
        why = f"no complete checkpoint at or before the cutoff commit {cutoff_commit}"
        if last_checkpoint_version < cutoff_commit:
            why += f" and _last_checkpoint version {last_checkpoint_version}"
        if keep_version is not None and keep_version < cutoff_commit:
            why += f" and version {keep_version}, which a live lease pins"
        if any(c.version <= bound for c in complete):
            why += " that keeps the commit times after it (a retained commit's time was adjusted)"
        return nothing(why, wanted)
    kept = usable[-1]

    def doomed(p: ParsedLogPath) -> bool:
        return p.version < kept.version or (p.kind is LogFileKind.COMPACTION and p.version <= kept.version)

    dead = [p for p in parsed if doomed(p)]
    dead_commits = [p.version for p in dead if p.kind is LogFileKind.COMMIT]
    protect = protected_before
    if protect > 0 and dead_commits and dead_commits[-1] < protect - 1:
        boundary = dead_commits[-1] + 1
        if not any(c.version == boundary for c in complete):
            return nothing(
                f"checkpointProtection: {REQUIRE_CHECKPOINT_PROTECTION}={protect} requires removing every "
                f"commit below it, or a checkpoint at the boundary version {boundary}"
            )
    delete = _with_companions((p.file for p in dead), listing)
    retained_tops = [p for p in parsed if p.kind in _TOP_LEVEL and p.version >= kept.version and p.file.size > 0]
    doomed_sidecars = _doomed_sidecars(sidecars, retained_tops, sidecar_refs, cutoff)

    gone = {f.path for f in delete}
    earliest = earliest_recreatable_version(table, [f for f in listing if f.path not in gone])
    if any(p.version >= kept.version and p.kind is not LogFileKind.COMPACTION for p in dead):
        raise AssertionError(f"log cleanup would delete files at the kept checkpoint {kept.version}: a bug")
    reason = None if delete or doomed_sidecars else f"nothing is older than the kept checkpoint {kept.version}"
    return CleanupPlan(cutoff, cutoff_commit, kept, delete, doomed_sidecars, earliest, reason)


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
    for name, flag in (
        ("apply", apply),
        ("write_checkpoint_first", write_checkpoint_first),
        ("allow_when_disabled", allow_when_disabled),
    ):
        check_bool(flag, name)
    check_int(batch_size, "batch_size", minimum=1)
    dlog = table if isinstance(table, DeltaLog) else DeltaLog(str(table), storage_options=storage_options)
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
    keep = pins.earliest_version
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
