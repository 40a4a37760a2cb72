"""VACUUM: delete files under a table root that no version within retention needs (P§12; delta-writes.md §6).

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

Where the FULL listing, the re-validation and the deletes run is a `VacuumExecutor`: this process by
default (`LocalVacuumExecutor`), Spark executors with `engines.spark_vacuum.SparkVacuumExecutor` (the
listing split by directory, the file list never on the driver); checks, retention and audit commits
stay here either way, and the rules are `protocol.vacuum`'s.

`LocalVacuumExecutor` reads the protected paths from the snapshot's Arrow file tables (`protected_set`:
no action objects; only paths that are not already their own comparable form are decoded in Python) and
walks a table on the local store itself (`walk_candidates`): directory names first, then one `lstat` only
for the names no rule keeps (a table's active files are never stat-ed); other stores are listed through
`store.list_recursive`. The cyclic garbage collector is paused while a snapshot is replayed and a plan
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
`InvalidArgumentError`s.
"""

from __future__ import annotations

import gc
import logging
import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from contextlib import contextmanager
from dataclasses import dataclass, field
from numbers import Real
from stat import S_ISDIR, S_ISREG
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol
from urllib.parse import urlparse

from ..delta_log import DeltaLog
from ..errors import DeltaError, InvalidArgumentError, OperationNotAllowedError, StorageError, check_bool, check_int
from ..protocol.actions import AddFile, DeletionVectorDescriptor, RemoveFile
from ..protocol.filenames import LogFileKind, parse_log_path
from ..protocol.table_features import check_can_write
from ..protocol.table_properties import DELETED_FILE_RETENTION, deleted_file_retention_ms
from ..protocol.vacuum import (
    DEFAULT_UNTRACKED_GRACE_HOURS,
    DIR,
    FILE,
    FULL,
    HOUR_MS,
    LITE,
    MODES,
    OTHER,
    SIMPLE_PATH_PATTERN,
    Candidates,
    ListedFile,
    LoggedFile,
    PlannedFile,
    StoredEntry,
    VacuumPlan,
    VacuumPlanRefusedError,
    candidates_of,
    grace_matters,
    partition_of,
    plan_candidates,
    plan_vacuum,
    protected_from_logged,
    refused_entry,
    revalidate,
    subdirectory_key,
    unprotected_names,
    with_evidence,
)
from ..snapshot import Snapshot
from ..storage.base import is_local
from ..storage.local import LocalLogStore

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

    from ..storage import LogStore

log = logging.getLogger(__name__)

#: Schemes on which Spark writes the VACUUM START/END commits by default (delta-writes.md §6.4).
AUDIT_SCHEMES = frozenset({"wasbs", "wasbss", "abfs", "abfss", "adl", "gs", "file", "hdfs"})
DELETE_ATTEMPTS = 3
#: A directory holding at least this many entries to look up is listed once (`LogStore.list_level`)
#: instead of one HEAD per entry (`stat_entries`, object stores).
LIST_DIRECTORY_AT = 64


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
        )
        return out


def _dv_descriptors(dvs: pa.ChunkedArray) -> list[DeletionVectorDescriptor | None]:
    from ..read import arrow_compute as pc

    if not pc.any(pc.is_valid(pc.struct_field(dvs, "storageType"))).as_py():
        return [None] * len(dvs)
    return [DeletionVectorDescriptor.from_json(d) for d in dvs.to_pylist()]


def logged_files(snapshot: Snapshot) -> tuple[list[LoggedFile], list[LoggedFile]]:
    """The snapshot's active files and every tombstone it holds, as the plan's rules read them (from the
    snapshot's file tables' columns; `protected_set` is the faster way to the protected paths)."""
    files = snapshot.state.files
    adds, removes = files.adds, files.removes
    active = [
        LoggedFile(path, dv)
        for path, dv in zip(
            adds.column("path").to_pylist(), _dv_descriptors(adds.column("deletionVector")), strict=True
        )
    ]
    tombs = [
        LoggedFile(path, dv, ts, size)
        for path, dv, ts, size in zip(
            removes.column("path").to_pylist(),
            _dv_descriptors(removes.column("deletionVector")),
            removes.column("deletionTimestamp").to_pylist(),
            removes.column("size").to_pylist(),
            strict=True,
        )
    ]
    return active, tombs


def protected_set(snapshot: Snapshot, *, cutoff_ms: int, table_root: str) -> set[str]:
    """`protocol.vacuum.protected_paths` of `snapshot` (active files, tombstones deleted after `cutoff_ms`,
    their DV files), read from the snapshot's Arrow file tables: logged paths matching `SIMPLE_PATH_PATTERN`
    (tested on the whole column) are their own relative form; only the others and the DV descriptors go
    through `protocol.vacuum.protected_from_logged`."""
    import pyarrow as pa

    from ..read import arrow_compute as pc
    from ..read.arrow_build import int64_scalar

    files = snapshot.state.files
    adds, removes = files.adds, files.removes
    recent = pc.greater(pc.fill_null(removes.column("deletionTimestamp"), int64_scalar(0)), int64_scalar(cutoff_ms))
    paths = pa.chunked_array(
        [*adds.column("path").chunks, *pc.filter(removes.column("path"), recent).chunks], type=pa.string()
    )
    dvs = pa.chunked_array(
        [*adds.column("deletionVector").chunks, *pc.filter(removes.column("deletionVector"), recent).chunks],
        type=adds.schema.field("deletionVector").type,
    )
    return _logged_set(paths, dvs, table_root)


def expired_set(snapshot: Snapshot, *, cutoff_ms: int, table_root: str) -> set[str]:
    """`protocol.vacuum.expired_tombstone_paths` of `snapshot`: its tombstones deleted at or before
    `cutoff_ms` and their DV files (tracked: the untracked grace period does not apply to them), read as
    `protected_set` reads its paths."""
    import pyarrow.compute as _c

    from ..read import arrow_compute as pc
    from ..read.arrow_build import int64_scalar
    from ..read.arrow_memory import POOL

    removes = snapshot.state.files.removes
    recent = pc.greater(pc.fill_null(removes.column("deletionTimestamp"), int64_scalar(0)), int64_scalar(cutoff_ms))
    expired = _c.call_function("invert", [recent], memory_pool=POOL)
    paths = pc.filter(removes.column("path"), expired)
    return _logged_set(paths, pc.filter(removes.column("deletionVector"), expired), table_root)


def _logged_set(paths: pa.ChunkedArray, dvs: pa.ChunkedArray, table_root: str) -> set[str]:
    """`protocol.vacuum.protected_from_logged` of Arrow columns of logged paths and their DV descriptors."""
    import pyarrow.compute as _c

    from ..read import arrow_compute as pc
    from ..read.arrow_memory import POOL

    if not len(paths):
        return set()
    options = _c.MatchSubstringOptions(f"^(?:{SIMPLE_PATH_PATTERN})$")
    simple = _c.call_function("match_substring_regex", [paths], options, memory_pool=POOL)
    out = set(pc.filter(paths, simple).to_pylist())
    others = pc.filter(paths, _c.call_function("invert", [simple], memory_pool=POOL)).to_pylist()
    storage = pc.struct_field(dvs, "storageType")
    has_dv = pc.is_valid(storage)
    pairs: list[tuple[str, str]] = []
    if pc.any(has_dv).as_py():
        where = pc.filter(pc.struct_field(dvs, "pathOrInlineDv"), has_dv).to_pylist()
        pairs = list(zip(pc.filter(storage, has_dv).to_pylist(), (w or "" for w in where), strict=True))
    if others or pairs:
        out |= protected_from_logged(others, pairs, table_root=table_root)
    return out


def partition_columns(snapshot: Snapshot) -> list[str]:
    """Partition column names the hidden-path rule allows, physical names included."""
    cols = list(snapshot.partition_columns)  # column mapping: directories use physical names
    return cols + [p for p in snapshot.physical_partition_columns.values() if p not in cols]


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


def _in_process(dlog: DeltaLog, executor: VacuumExecutor | None) -> bool:
    """True when the replay and the plan's work run in this process (local engine, local executor)."""
    from ..engines.local import LocalEngine

    return (executor is None or isinstance(executor, LocalVacuumExecutor)) and isinstance(dlog.engine, LocalEngine)


def _root_dir(dlog: DeltaLog) -> str:
    return dlog.store.join(dlog.table_uri).rstrip("/")


def _walks_locally(store: LogStore) -> bool:
    """True for the stock local store: the table is walked here, with a `stat` only for the files the
    name rules leave (`walk_candidates`). Any other store (a subclass changing `list_recursive` too) is
    listed through its `list_recursive`."""
    return getattr(type(store), "list_recursive", None) is LocalLogStore.list_recursive


_Directory = tuple[str, str, str]  # (local path, stored relative prefix "a/b/" or "", comparable path)
_AT_FD = os.listdir in os.supports_fd and os.stat in os.supports_dir_fd


def _walk_directory(
    directory: _Directory, protected: AbstractSet[str], partition_columns: Sequence[str]
) -> tuple[list[_Directory], Candidates]:
    """One directory of `walk_candidates`: its subdirectories to walk and its files' candidates. Names the
    rules drop are never stat-ed; the `lstat` of the others tells files from directories."""
    path, stored, key = directory
    found = Candidates()
    subdirs: list[_Directory] = []
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)) if _AT_FD else None
    except (FileNotFoundError, NotADirectoryError):  # removed while listing
        return subdirs, found
    try:
        try:
            names = os.listdir(path if fd is None else fd)
        except (FileNotFoundError, NotADirectoryError):
            return subdirs, found
        add_path, add_key, add_size, add_mtime = (
            found.paths.append,
            found.keys.append,
            found.sizes.append,
            found.mtimes.append,
        )
        same = stored == (f"{key}/" if key else "")  # stored spelling is the comparable one
        for i, name_key in unprotected_names(key, names, protected, partition_columns):
            name = names[i]
            try:
                if fd is None:
                    st = os.lstat(os.path.join(path, name))
                else:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:  # removed while listing
                continue
            if S_ISREG(st.st_mode):
                add_path(name_key if same and name.isascii() else stored + name)
                add_key(name_key)
                add_size(st.st_size)
                add_mtime(st.st_mtime_ns // 1_000_000)
            elif S_ISDIR(st.st_mode) and subdirectory_key(key, name, partition_columns) is not None:
                subdirs.append((os.path.join(path, name), f"{stored}{name}/", name_key))
    finally:
        if fd is not None:
            os.close(fd)
    return subdirs, found


def walk_candidates(root: str, protected: AbstractSet[str], partition_columns: Sequence[str] = ()) -> Candidates:
    """A local table directory's FULL candidates (`protocol.vacuum.Candidates`): each directory's names
    through `unprotected_names` (hidden, protected and DV-alias names dropped: a protected file needs no
    `stat`), then one `lstat` per remaining name: regular files are candidates, directories are walked
    (`subdirectory_key`), anything else (symlinks: as in `LocalLogStore.list_recursive`) is skipped. A
    directory named as a protected file (a corrupt table) is not walked: VACUUM deletes less, never more.
    The walk is single-threaded: on a local disk, handing listings and `stat` calls to threads costs more
    than it gains (measured on a 2-core VM: up to 1.7x the CPU, no faster). The candidates come out
    ordered by directory, each directory's in listing order. A file or directory removed while listing
    is skipped."""
    columns = list(partition_columns)
    parts: list[tuple[str, Candidates]] = []
    pending = [(root, "", "")]
    while pending:
        directory = pending.pop()
        subdirs, found = _walk_directory(directory, protected, columns)
        parts.append((directory[1], found))
        pending.extend(subdirs)
    parts.sort(key=lambda part: part[0])
    out = Candidates()
    for _, found in parts:
        out.paths += found.paths
        out.keys += found.keys
        out.sizes += found.sizes
        out.mtimes += found.mtimes
    return out


def listed_candidates(dlog: DeltaLog, protected: AbstractSet[str], partition_columns: Sequence[str]) -> Candidates:
    """The table's FULL candidates: walked here on the local store, else from `store.list_recursive`."""
    root = _root_dir(dlog)
    if _walks_locally(dlog.store):
        return walk_candidates(root, protected, partition_columns)
    prefix = root + "/"
    listing = (
        ListedFile(info.path[len(prefix) :], info.size, info.modification_time)
        for info in dlog.store.list_recursive(root)
        if info.path.startswith(prefix)
    )
    return candidates_of(listing, protected, partition_columns)


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


class Revalidation(NamedTuple):
    """A plan re-validated against the latest snapshot and storage: `plan` keeps what may still be deleted,
    `dropped` lists what was dropped (at most the executor's collect bound of them; `num_dropped` counts
    all) and `reasons` why (aligned with `dropped`), `missing` the entries whose file was gone (bounded the
    same way; `num_missing` counts all), `handle` is the executor's own (Spark: the kept rows), `release`
    frees what it holds."""

    plan: VacuumPlan
    dropped: list[PlannedFile]
    num_dropped: int
    handle: Any = None
    release: Callable[[], None] | None = None
    reasons: Sequence[str] = ()
    missing: Sequence[PlannedFile] = ()
    num_missing: int = 0


class Deleted(NamedTuple):
    files: int
    bytes: int
    directories: int


class VacuumExecutor(Protocol):
    """Where a FULL plan's listing, a plan's re-validation and its deletes run. The default
    (`LocalVacuumExecutor`) runs them in this process; `engines.spark_vacuum.SparkVacuumExecutor` on
    Spark executors. The rules are `protocol.vacuum`'s either way; the audit commits stay here."""

    def plan_full(
        self,
        dlog: DeltaLog,
        snapshot: Snapshot,
        *,
        cutoff_ms: int,
        retention_ms: int,
        partition_columns: list[str],
        now_ms: int,
        untracked_grace_ms: int,
    ) -> VacuumPlan:
        """The FULL plan at `cutoff_ms` (the table listed, the snapshot's files protected, untracked files
        younger than the grace period at `now_ms` left out and counted)."""
        ...

    def revalidate(
        self,
        dlog: DeltaLog,
        snapshot: Snapshot,
        plan: VacuumPlan,
        *,
        cutoff_ms: int,
        partition_columns: list[str],
        now_ms: int,
        untracked_grace_ms: int,
    ) -> Revalidation:
        """`plan` against `snapshot` and storage now (`protocol.vacuum.revalidate`'s rules)."""
        ...

    def delete(self, dlog: DeltaLog, checked: Revalidation, *, batch_size: int) -> Deleted:
        """Delete what `checked` keeps, in batches of `batch_size`; empty directories left on local stores too."""
        ...


class LocalVacuumExecutor:
    """Lists, re-validates and deletes in this process (`store.list_recursive`, `store.delete_many`)."""

    def plan_full(
        self,
        dlog: DeltaLog,
        snapshot: Snapshot,
        *,
        cutoff_ms: int,
        retention_ms: int,
        partition_columns: list[str],
        now_ms: int,
        untracked_grace_ms: int,
    ) -> VacuumPlan:
        protected = protected_set(snapshot, cutoff_ms=cutoff_ms, table_root=dlog.table_uri)
        candidates = listed_candidates(dlog, protected, partition_columns)
        del protected  # freed before the plan's objects are made (peak memory)
        tracked: set[str] = set()
        if grace_matters(cutoff_ms=cutoff_ms, now_ms=now_ms, grace_ms=untracked_grace_ms):
            tracked = expired_set(snapshot, cutoff_ms=cutoff_ms, table_root=dlog.table_uri)
        return plan_candidates(
            candidates,
            table=dlog.table_uri,
            version=snapshot.version,
            cutoff_ms=cutoff_ms,
            retention_ms=retention_ms,
            protocol=snapshot.protocol.to_json(),
            now_ms=now_ms,
            untracked_grace_ms=untracked_grace_ms,
            tracked=tracked,
            table_id=snapshot.metadata.id,
        )

    def revalidate(
        self,
        dlog: DeltaLog,
        snapshot: Snapshot,
        plan: VacuumPlan,
        *,
        cutoff_ms: int,
        partition_columns: list[str],
        now_ms: int,
        untracked_grace_ms: int,
    ) -> Revalidation:
        if not plan.files_inline:
            raise InvalidArgumentError(
                f"The plan carries counts only ({plan.num_files} files"
                + (f", listed at {plan.files_uri}" if plan.files_uri else "")
                + "): it was made on Spark and is applied there (engine='spark')",
                argument="plan",
                table=dlog.table_uri,
            )
        protected = protected_set(snapshot, cutoff_ms=cutoff_ms, table_root=plan.table)
        tracked: set[str] = set()
        if grace_matters(cutoff_ms=cutoff_ms, now_ms=now_ms, grace_ms=untracked_grace_ms):
            tracked = expired_set(snapshot, cutoff_ms=cutoff_ms, table_root=plan.table)
        checked = revalidate(
            plan,
            stored=lambda paths: stat_entries(dlog.store, dlog.table_uri, paths),
            cutoff_ms=cutoff_ms,
            now_ms=now_ms,
            grace_ms=untracked_grace_ms,
            partition_columns=partition_columns,
            protected=protected,
            tracked=tracked,
        )
        return Revalidation(
            plan.with_files(checked.keep),
            checked.dropped,
            len(checked.dropped),
            reasons=checked.reasons,
            missing=checked.missing,
            num_missing=len(checked.missing),
        )

    def delete(self, dlog: DeltaLog, checked: Revalidation, *, batch_size: int) -> Deleted:
        files = checked.plan.files
        done = delete_files(dlog.store, dlog.table_uri, [f.path for f in files], batch_size)
        # the directories of missing entries too: a run killed after its deletes left them behind
        directories = remove_empty_dirs(dlog, {partition_of(f.path) for f in [*files, *checked.missing]})
        return Deleted(done, sum(f.size for f in files), directories)


def make_plan(
    dlog: DeltaLog,
    snapshot: Snapshot,
    *,
    mode: str,
    retention_ms: int,
    now_ms: int,
    executor: VacuumExecutor | None = None,
    untracked_grace_ms: int = int(DEFAULT_UNTRACKED_GRACE_HOURS * HOUR_MS),
) -> VacuumPlan:
    """List (FULL, through `executor`) or read the log (LITE, here) and plan at `now_ms - retention_ms`.
    A LITE plan's files are looked up once (`stat_entries`): each carries its size and mtime as stored."""
    if mode == FULL:
        return (executor or LocalVacuumExecutor()).plan_full(
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


def stat_entries(store: LogStore, table_uri: str, paths: Sequence[str]) -> list[StoredEntry | None]:
    """What storage holds now at each of `paths` (relative to the table root): a `StoredEntry` (a regular
    file, a directory, or something else) or None when nothing is there. The local store is asked with
    `lstat` (symbolic links are not followed); other stores with one HEAD per path, or one `list_level`
    for a directory holding `LIST_DIRECTORY_AT` of the paths or more (an object store has no directories:
    a HEAD of a prefix finds nothing). Runs on Spark executors too."""
    root = store.join(table_uri).rstrip("/")
    if isinstance(store, LocalLogStore) and is_local(table_uri):
        out: list[StoredEntry | None] = []
        for p in paths:
            try:
                st = os.lstat(os.path.join(root, *p.split("/")))
            except (FileNotFoundError, NotADirectoryError):
                out.append(None)
                continue
            kind = FILE if S_ISREG(st.st_mode) else DIR if S_ISDIR(st.st_mode) else OTHER
            out.append(StoredEntry(kind, st.st_size, st.st_mtime_ns // 1_000_000))
        return out
    found: list[StoredEntry | None] = [None] * len(paths)
    by_directory: dict[str, list[int]] = {}
    for i, p in enumerate(paths):
        by_directory.setdefault(partition_of(p.strip("/")), []).append(i)
    for directory, indices in by_directory.items():
        if len(indices) >= LIST_DIRECTORY_AT:
            where = store.join(root, *directory.split("/")) if directory else root
            level = {e.name: e for e in store.list_level(where)}
            for i in indices:
                e = level.get(paths[i].strip("/").rpartition("/")[2])
                if e is not None:
                    found[i] = StoredEntry(DIR if e.is_dir else FILE, e.size, e.modification_time)
            continue
        for i in indices:
            info = store.head(store.join(root, *paths[i].split("/")))
            if info is not None:
                found[i] = StoredEntry(FILE, info.size, info.modification_time)
    return found


def delete_files(store: LogStore, table_uri: str, paths: Sequence[str], batch_size: int) -> int:
    """Delete `paths` (relative to the table root) in batches, each retried on transient storage
    errors; returns files handled (a missing file counts). Runs on Spark executors too."""
    done = 0
    root = store.join(table_uri)
    prefix = store.join(root, "")
    if store.join(root, "a", "b") != f"{prefix}a/b":  # a store whose join is not a plain concatenation
        prefix = None
    for i in range(0, len(paths), batch_size):
        chunk = paths[i : i + batch_size]
        batch = [prefix + p for p in chunk] if prefix is not None else [store.join(root, *p.split("/")) for p in chunk]
        for attempt in range(DELETE_ATTEMPTS):
            try:
                done += store.delete_many(batch)
                break
            except (StorageError, OSError) as exc:
                transient = isinstance(exc, StorageError) and exc.transient
                if not transient or attempt == DELETE_ATTEMPTS - 1:
                    raise
                log.warning("VACUUM of %s: retrying a delete batch after %s", table_uri, exc)
    return done


def remove_empty_dirs(dlog: DeltaLog, dirs: Iterable[str]) -> int:
    """Local stores: remove the directories `dirs` (relative, with their parents) that deletes left
    empty (never the root, never `_delta_log`)."""
    if urlparse(dlog.table_uri).scheme not in ("", "file"):
        return 0  # object stores have no directories
    root = _root_dir(dlog)
    candidates: set[str] = set()
    for d in set(dirs) - {""}:
        parts = d.split("/")
        candidates.update("/".join(parts[:n]) for n in range(1, len(parts) + 1))
    removed = 0
    for d in sorted(candidates, key=lambda x: -x.count("/")):  # deepest first
        if d.split("/")[0] == "_delta_log":
            continue
        try:
            os.rmdir(os.path.join(root, *d.split("/")))
            removed += 1
        except OSError:  # not empty, or gone
            continue
    return removed


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
    :param executor: where the FULL listing, re-validation and deletes run (default: this process;
        `engines.spark_vacuum.SparkVacuumExecutor` on Spark executors).
    :param untracked_grace_hours: an untracked file (no add or remove of the snapshot names it) whose
        modification time is younger than this many hours is never deleted, neither planned nor applied
        (None: `DEFAULT_UNTRACKED_GRACE_HOURS`, 1 hour; 0 turns it off). Independent of the retention:
        `enforce_retention_duration=False` does not shorten it. An apply uses its own value, not the plan's.
    :raises InvalidArgumentError: bad arguments, a retention refused.
    :raises VacuumPlanRefusedError: (an `InvalidArgumentError`) a plan for another table, or with an entry
        outside the table root or in `_delta_log`: nothing is deleted.
    :raises UnsupportedFeatureError, OperationNotAllowedError: a table this library must not vacuum, a
        LITE vacuum whose commits were cleaned up, a protocol changed since the plan.
    """
    check_bool(dry_run, "dry_run")
    check_bool(enforce_retention_duration, "enforce_retention_duration")
    if audit is not None:
        check_bool(audit, "audit")
    check_int(batch_size, "batch_size", minimum=1)
    if mode not in MODES:
        raise InvalidArgumentError(f"mode must be one of {MODES}, got {mode!r}", argument="mode")
    grace_ms = untracked_grace_ms(untracked_grace_hours)
    dlog = (
        table_or_log
        if isinstance(table_or_log, DeltaLog)
        else DeltaLog(str(table_or_log), storage_options=storage_options)
    )
    in_process = _in_process(dlog, executor)
    with _gc_paused(in_process):
        snapshot = dlog.update()
        check_can_write(
            snapshot.protocol, snapshot.metadata, ["vacuum"], table=dlog.table_uri, version=snapshot.version
        )
        now_ms = (clock or dlog.clock)()
        if plan is None:
            retention_ms = _retention_ms(snapshot, retention_hours, enforce_retention_duration)
            the_plan = make_plan(
                dlog,
                snapshot,
                mode=mode,
                retention_ms=retention_ms,
                now_ms=now_ms,
                executor=executor,
                untracked_grace_ms=grace_ms,
            )
        else:
            the_plan = plan if isinstance(plan, VacuumPlan) else VacuumPlan.from_dict(plan)
            _check_plan_table(the_plan, dlog.table_uri, snapshot)
    if dry_run:
        return VacuumResult(the_plan, dry_run=True)
    run = executor or LocalVacuumExecutor()
    # re-validate against the table as it is now: a writer may have committed while the table was listed
    with _gc_paused(in_process):
        latest = dlog.update()
    _check_plan_table(the_plan, dlog.table_uri, latest)
    return _apply(dlog, latest, the_plan, enforce_retention_duration, now_ms, audit, batch_size, run, grace_ms)


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
    with _gc_paused(isinstance(executor, LocalVacuumExecutor)):
        checked = executor.revalidate(
            dlog,
            snapshot,
            plan,
            cutoff_ms=cutoff,
            partition_columns=partition_columns(snapshot),
            now_ms=now_ms,
            untracked_grace_ms=grace_ms,
        )
    try:
        return _delete_checked(dlog, snapshot, plan, checked, enforce, audit, batch_size, executor)
    finally:
        if checked.release is not None:
            checked.release()


def _delete_checked(
    dlog: DeltaLog,
    snapshot: Snapshot,
    plan: VacuumPlan,
    checked: Revalidation,
    enforce: bool,
    audit: bool | None,
    batch_size: int,
    executor: VacuumExecutor,
) -> VacuumResult:
    """VACUUM START, the deletes, VACUUM END, for a re-validated plan."""
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
            result.directories = remove_empty_dirs(dlog, {partition_of(f.path) for f in checked.missing})
        return result
    write_audit = _audit_default(dlog) if audit is None else audit
    conf = snapshot.metadata.configuration
    params: dict[str, Any] = {
        "retentionCheckEnabled": enforce,
        "defaultRetentionMillis": deleted_file_retention_ms(conf),
        "specifiedRetentionMillis": plan.retention_ms,
    }
    if write_audit:
        start_metrics = {"numFilesToDelete": keep.num_files, "sizeOfDataToDelete": keep.num_bytes}
        result.audit_versions.append(_commit(snapshot, "VACUUM START", params, start_metrics))
    status = "FAILED"
    try:
        done = executor.delete(dlog, checked, batch_size=batch_size)
        result.deleted, result.deleted_bytes, result.directories = done
        status = "COMPLETED"
    finally:
        if write_audit:
            end_metrics = {"numDeletedFiles": result.deleted, "numVacuumedDirectories": result.directories}
            try:
                latest = dlog.update()
                result.audit_versions.append(_commit(latest, "VACUUM END", {"status": status}, end_metrics))
            except DeltaError as exc:  # the files are gone either way: the END record is best effort
                log.warning("VACUUM of %s: could not commit VACUUM END (%s)", plan.table, exc)
    result.plan = keep
    log.info("VACUUM of %s: deleted %d files (%d bytes)", plan.table, result.deleted, result.deleted_bytes)
    return result


__all__ = [
    "DEFAULT_UNTRACKED_GRACE_HOURS",
    "FULL",
    "LITE",
    "Deleted",
    "LocalVacuumExecutor",
    "Revalidation",
    "VacuumExecutor",
    "VacuumPlanRefusedError",
    "VacuumResult",
    "delete_files",
    "expired_set",
    "listed_candidates",
    "logged_files",
    "make_plan",
    "partition_columns",
    "protected_set",
    "remove_empty_dirs",
    "stat_entries",
    "untracked_grace_ms",
    "vacuum",
    "walk_candidates",
]
