"""Log cleanup rules, pure: what may go from `_delta_log` given a listing (PROTOCOL.md "Metadata Cleanup",
Spark `MetadataCleanup`); `maintenance.log_cleanup` lists, reads and deletes.

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
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..errors import InvalidArgumentError, RetentionConflictError, check_int, check_number
from .actions import Metadata, Protocol
from .filenames import FileInfo, LogFileKind, ParsedLogPath, parse_log_path
from .history import monotonize
from .log_segment import CheckpointInstance, complete_checkpoints, earliest_recreatable_version
from .table_features import table_features
from .table_properties import (
    DEFAULT_DELETED_FILE_RETENTION,
    DEFAULT_LOG_RETENTION,
    DELETED_FILE_RETENTION,
    LOG_RETENTION,
    deleted_file_retention_ms,
    log_retention_ms,
)

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
