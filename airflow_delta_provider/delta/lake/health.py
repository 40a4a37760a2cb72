"""A table's health from its log alone: one listing of `_delta_log` (it names the checkpoints, so
`_last_checkpoint` is not read), the checkpoint and each commit after it read once (`CountingStore`), no data
file; a few older commits only to find the last OPTIMIZE
and VACUUM (`history_commits`). The counting rules are in `protocol.lake_health`. Untracked files need a listing
of the whole table, so they are counted only on request (`untracked=True`), priced in list requests.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

from ..delta_log import DeltaLog, commit_files
from ..engines.local import EAGER_STATS, LocalEngine
from ..errors import DeltaError, StorageError
from ..progress import PROGRESS
from ..protocol.actions import Action, AddFile, CommitInfo, RemoveFile
from ..protocol.filenames import LogFileKind, parse_log_path
from ..protocol.lake_health import LastOperation, TableHealth, summarize_columns
from ..protocol.lake_policy import LakePolicy
from ..protocol.log_cleanup import (
    check_retention_compatibility,
    checkpoint_protection_version,
    expired_log_cleanup_enabled,
    plan_log_cleanup,
)
from ..protocol.optimize import partition_key
from ..protocol.table_features import check_can_write
from ..protocol.vacuum import (
    deletable,
    normalize_relative,
    relative_to_root,
)
from ..read.commits import read_commit
from ..read.memory_budget import default_memory_limit
from ..read.protected_files import protected_set
from ..storage import is_local, store_for
from .discover import error_dict
from .health_columns import file_columns, removed_files
from .store import CountingStore

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

#: What each lake operation does, in `check_can_write`'s terms (as the maintenance drivers check it).
WRITE_CHECKS = {
    "optimize": ("optimize", "commit"),
    "vacuum": ("vacuum",),
    "checkpoint": ("checkpoint",),
    "log_cleanup": ("cleanup",),
}
WRITE_RATE_WINDOW_MS = 7 * 86_400_000
DEFAULT_HISTORY_COMMITS = 10
#: The local scan's progress phase (`delta.progress`): tables scanned of the tables given.
SCANNING = "LAKE SCAN: reading the tables' logs"


def _partitions_of(
    actions: Iterable[Action], columns: tuple[str, ...], physical: Mapping[str, str], *, data_change_only: bool
) -> set[str]:
    """Partitions a commit's adds and removes are in (only those that change data, when asked)."""
    return {
        partition_key(dict(a.partition_values or {}), columns, physical) if columns else ""
        for a in actions
        if isinstance(a, AddFile | RemoveFile) and (a.data_change or not data_change_only)
    }


def _is_whole_table(info: CommitInfo) -> bool:
    predicate = (info.raw.get("operationParameters") or {}).get("predicate")
    return predicate in (None, "", "[]", [])


@dataclass
class _Vacuumed:
    """What the last completed VACUUM deleted, from its START commit (PROTOCOL.md "Commit Provenance
    Information": Delta's VACUUM START / END commitInfo): the tombstones of the version it read (`readVersion`)
    older than its timestamp less `specifiedRetentionMillis` (its retention; `defaultRetentionMillis` when none
    was given)."""

    cutoff_ms: int
    #: Paths removed by commits after the version the VACUUM read: their tombstones were not in its plan,
    #: whatever their timestamps (a writer's clock may lag the VACUUM's).
    removed_after: frozenset[str]

    def deleted(self, rel: str, deletion_timestamp: int) -> bool:
        return deletion_timestamp <= self.cutoff_ms and rel not in self.removed_after


def _vacuum_cutoff(info: CommitInfo) -> int | None:
    params = info.raw.get("operationParameters") or {}
    retention = params.get("specifiedRetentionMillis")
    if retention is None:
        retention = params.get("defaultRetentionMillis")
    ts = info.in_commit_timestamp or info.timestamp
    try:
        return None if retention is None or ts is None else int(ts) - int(retention)
    except (TypeError, ValueError):
        return None


@dataclass
class _History:
    last_optimize: LastOperation | None = None
    last_vacuum: LastOperation | None = None
    #: Partitions with data changed after the last OPTIMIZE (None: unknown, every partition counts as changed).
    changed: set[str] | None = None
    #: Partitions the last OPTIMIZE covered (None: the whole table).
    covered: set[str] | None = None
    touched: set[str] = field(default_factory=set)
    #: What the last completed VACUUM deleted (None: no completed VACUUM among the commits read).
    vacuumed: _Vacuumed | None = None


def _history(dlog: DeltaLog, snapshot: Any, listing: list[Any], limit: int, physical: Mapping[str, str]) -> _History:
    """Walk commits newest first: the tail after the checkpoint (already read), then up to `limit` older ones,
    until the last OPTIMIZE and VACUUM are found."""
    commits = commit_files(listing)[::-1]
    tail = {c.version for c in snapshot.log_segment.commits}
    out = _History()
    older = 0
    columns = snapshot.partition_columns
    root = snapshot.table
    removed: dict[int, set[str]] = {}  # remove paths by version, while the last VACUUM is unresolved
    completed = False  # a VACUUM END with status COMPLETED seen
    start: tuple[int, int] | None = None  # its START's (cutoff, readVersion)
    vacuum_done = False  # the last completed VACUUM resolved (its read version reached, or not findable)
    cut = False  # the walk stopped at its limit (older commits unread)
    for c in commits:
        if c.version > snapshot.version:
            continue
        if c.version not in tail:
            older += 1
            if older > limit:
                cut = True
                break
        actions = read_commit(dlog.store, dlog.table_uri, c)
        info = next((a for a in actions if isinstance(a, CommitInfo)), None)
        op = (info.operation or "") if info else ""
        ts = (info.in_commit_timestamp or info.timestamp) if info else None
        when = ts or c.file.modification_time
        if out.last_vacuum is None and op.startswith("VACUUM"):
            out.last_vacuum = LastOperation(c.version, when, op)
        if not vacuum_done:
            if start is not None and c.version <= start[1]:
                newer = (p for v, paths in removed.items() if v > start[1] for p in paths)
                out.vacuumed, vacuum_done = _Vacuumed(start[0], frozenset(newer)), True
            elif info is not None:
                params = info.raw.get("operationParameters") or {}
                if op == "VACUUM END" and str(params.get("status", "")).upper() == "COMPLETED":
                    completed = True
                elif op == "VACUUM START" and completed and start is None:
                    cutoff, read = _vacuum_cutoff(info), info.raw.get("readVersion")
                    if cutoff is None or not isinstance(read, int):
                        vacuum_done = True
                    else:
                        start = (cutoff, read)
            if not vacuum_done:
                removed[c.version] = {
                    rel
                    for a in actions
                    if isinstance(a, RemoveFile) and (rel := relative_to_root(a.path, root)) is not None
                }
        if op == "OPTIMIZE" and info is not None and out.last_optimize is None:
            out.last_optimize = LastOperation(c.version, when, op)
            out.changed = set(out.touched)
            whole = _is_whole_table(info)
            out.covered = None if whole else _partitions_of(actions, columns, physical, data_change_only=False)
        if out.last_optimize is not None and out.last_vacuum is not None and (vacuum_done or not completed):
            break
        if out.last_optimize is None:
            out.touched |= _partitions_of(actions, columns, physical, data_change_only=True)
    if start is not None and not vacuum_done and not cut:  # the log starts after its read version: all read
        out.vacuumed = _Vacuumed(start[0], frozenset(p for paths in removed.values() for p in paths))
    return out


def _untracked(dlog: DeltaLog, snapshot: Any, store: CountingStore, cutoff_ms: int) -> dict[str, int]:
    """Files in the table folder the log does not name (VACUUM's FULL-mode rules, PROTOCOL.md "Vacuum"): every
    tombstone counts as tracked; the reclaimable ones are older than the retention cutoff."""
    tracked = protected_set(snapshot, cutoff_ms=-(2**62), table_root=dlog.table_uri)
    columns = list(snapshot.physical_partition_columns.values())
    root = store.join(dlog.table_uri).rstrip("/")
    prefix = root + "/"
    out = dict.fromkeys(("files", "bytes", "reclaimable_files", "reclaimable_bytes"), 0)
    listed = 0
    for info in store.inner.list_recursive(root):
        listed += 1
        rel = normalize_relative(info.path[len(prefix) :]) if info.path.startswith(prefix) else None
        if rel is None or not deletable(rel, tracked, columns):
            continue
        out["files"] += 1
        out["bytes"] += info.size
        if info.modification_time < cutoff_ms:
            out["reclaimable_files"] += 1
            out["reclaimable_bytes"] += info.size
    store.requests["list"] += max(1, math.ceil(listed / 1000))  # a page per 1000 objects on an object store
    return out


#: The file-action fields a health reads from a checkpoint (with the identity and size the reader always
#: reads; `add.stats` as `row_counts` says): the rest of the file actions are left undecoded.
HEALTH_FILE_FIELDS = ("partitionValues", "deletionTimestamp")


def _engine(table: str, row_counts: bool, memory_limit_bytes: int | Literal["auto"] | None) -> LocalEngine:
    """The local engine reading a checkpoint's stats with the rest when the counts need them (one read, not a
    second pass), else not at all, and of the file actions only `HEALTH_FILE_FIELDS`; the checkpoint read
    overlaps the commits' only on a remote store (locally the scan's own threads overlap tables)."""
    return LocalEngine(
        lazy_stats_bytes=EAGER_STATS if row_counts else 0,
        threaded=not is_local(table),
        memory_limit_bytes=memory_limit_bytes,
        file_fields=HEALTH_FILE_FIELDS,
    )


def table_health(
    table: str,
    *,
    policy: LakePolicy | None = None,
    storage_options: Mapping[str, Any] | None = None,
    now_ms: int | None = None,
    history_commits: int = DEFAULT_HISTORY_COMMITS,
    untracked: bool = False,
    row_counts: bool = True,
    memory_limit_bytes: int | Literal["auto"] | None = "auto",
) -> TableHealth:
    """The health of one table, counted with its policy's thresholds; a table that cannot be read raises its
    typed `DeltaError`.

    `row_counts=False` leaves the files' statistics (a checkpoint's `add.stats`, most of its bytes, PROTOCOL.md
    "Per-file Statistics") unread unless a file has a deletion vector: `rows`, `rewrite_rows` and
    `files_without_stats` are then None; everything the plan needs is still counted. `memory_limit_bytes`: the
    local engine's (`LocalEngine`; "auto" looks the machine's memory up, as a scan does once for its tables)."""
    store = CountingStore(store_for(table, storage_options))
    engine = _engine(table, row_counts, memory_limit_bytes)
    dlog = DeltaLog(table, store=store, engine=engine)  # type: ignore[arg-type]
    try:
        listing = dlog.list_log(0)  # the one full listing: later listings are answered from it
        segment = dlog.log_segment()
        if not is_local(dlog.table_uri):  # the commits after the checkpoint in one round of concurrent GETs
            store.prefetch([c.file.path for c in segment.commits])
        snapshot = dlog.load_segment(segment)
    except OSError as exc:
        raise StorageError(f"Cannot read the log: {type(exc).__name__}: {exc}", table=dlog.table_uri) from None
    now = snapshot.now_ms() if now_ms is None else now_ms
    conf = snapshot.metadata.configuration
    tp = (policy or LakePolicy()).for_table(dlog.table_uri, conf)
    physical = snapshot.physical_partition_columns
    cutoff = now - tp.deleted_file_retention_ms
    hist = _history(dlog, snapshot, listing, history_commits, physical)
    tombstones = removed_files(snapshot, physical, hist.vacuumed)
    codes, keys, sizes, records, dv_rows = file_columns(snapshot, physical, row_counts)
    partitions = summarize_columns(
        codes,
        keys,
        sizes,
        records,
        dv_rows,
        tombstones,
        small_file_bytes=tp.small_file_bytes,
        target_file_size=tp.target_file_size,
        max_deleted_rows_ratio=tp.max_deleted_rows_ratio,
        retention_cutoff_ms=cutoff,
    )
    all_at = max((t.deletion_timestamp for t in tombstones if t.deletion_timestamp > cutoff), default=None)
    if hist.last_optimize is not None and hist.changed is not None:
        for key, p in partitions.items():
            covered = hist.covered is None or key in hist.covered
            p.changed_since_optimize = not covered or key in hist.changed
    refused = _refusals(snapshot, dlog.table_uri, conf)
    segment = snapshot.log_segment
    checkpoint_version = segment.checkpoint_version
    cleanup_files, cleanup_bytes = 0, 0
    if expired_log_cleanup_enabled(conf):
        cleanup = plan_log_cleanup(
            listing,
            now_ms=now,
            retention_ms=tp.log_retention_ms,
            last_checkpoint_version=checkpoint_version,
            protected_before=checkpoint_protection_version(snapshot.protocol, snapshot.metadata),
            table=dlog.table_uri,
        )
        cleanup_files, cleanup_bytes = len(cleanup.files), sum(f.size for f in cleanup.files)
    parsed = [p for f in listing if (p := parse_log_path(f)) is not None]
    recent = [
        p for p in parsed if p.kind is LogFileKind.COMMIT and p.file.modification_time >= now - WRITE_RATE_WINDOW_MS
    ]
    checkpoint_time = (
        None if segment.checkpoint is None else max(f.file.modification_time for f in segment.checkpoint.files)
    )
    untracked_files = _untracked(dlog, snapshot, store, cutoff) if untracked else None
    p = snapshot.protocol
    return TableHealth(
        table=dlog.table_uri,
        version=snapshot.version,
        partition_columns=tuple(snapshot.partition_columns),
        configuration=dict(conf),
        protocol={
            "minReaderVersion": p.min_reader_version,
            "minWriterVersion": p.min_writer_version,
            "readerFeatures": sorted(p.reader_features or ()),
            "writerFeatures": sorted(p.writer_features or ()),
        },
        refused=refused,
        partitions=dict(sorted(partitions.items())),
        tombstones_all_reclaimable_at=None if all_at is None else all_at + tp.deleted_file_retention_ms,
        checkpoint_version=checkpoint_version,
        commits_since_checkpoint=len(segment.commits),
        segment_bytes=segment.size_in_bytes,
        log_files=len(parsed),
        log_files_past_retention=cleanup_files,
        log_bytes_past_retention=cleanup_bytes,
        write_rate_per_day=len(recent) * 86_400_000 / WRITE_RATE_WINDOW_MS,
        last_optimize=hist.last_optimize,
        last_vacuum=hist.last_vacuum,
        last_checkpoint_timestamp=checkpoint_time,
        scanned_at=now,
        policy=tp,
        untracked=untracked_files,
        requests=dict(sorted(store.requests.items())),
    )


def _refusals(snapshot: Any, table: str, conf: Mapping[str, Any]) -> dict[str, dict[str, Any] | None]:
    """Each lake operation's refusal (`WRITE_CHECKS`; None: allowed). Every check refuses a set of operations
    whenever it refuses a part of it, so one check of them all clears every operation at once; only a
    refused table is checked operation by operation."""
    version = snapshot.version
    everything = sorted({c for checks in WRITE_CHECKS.values() for c in checks})
    try:
        check_can_write(snapshot.protocol, snapshot.metadata, everything, table=table, version=version)
        cleared = True
    except DeltaError:
        cleared = False
    refused: dict[str, dict[str, Any] | None] = {}
    for op, checks in WRITE_CHECKS.items():
        try:
            if not cleared:
                check_can_write(snapshot.protocol, snapshot.metadata, checks, table=table, version=version)
            if op == "log_cleanup":  # what our log cleanup refuses on a table's own retention settings
                check_retention_compatibility(conf, table=table)
            refused[op] = None
        except DeltaError as exc:
            refused[op] = error_dict(exc)
    return refused


@dataclass
class Scan:
    """Healths of the tables read, and the typed error of each one that could not be."""

    healths: list[TableHealth] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"tables": [h.to_dict() for h in self.healths], "errors": self.errors}


def scan_entry(table: str, **health: Any) -> TableHealth | dict[str, Any]:
    """`table_health(table, **health)`, or the table's error entry: a corrupt log or a refused reader must not
    stop the lake."""
    try:
        return table_health(table, **health)
    except Exception as exc:  # reported per table
        return error_dict(exc, table=table) if not isinstance(exc, DeltaError) else {"table": table, **exc.to_dict()}


def scan(
    tables: Iterable[str],
    *,
    policy: LakePolicy | None = None,
    storage_options: Mapping[str, Any] | None = None,
    now_ms: int | None = None,
    history_commits: int = DEFAULT_HISTORY_COMMITS,
    untracked: bool = False,
    concurrency: int = 4,
    spark: SparkSession | None = None,
    row_counts: bool = True,
) -> Scan:
    """`scan_entry` of each table on a bounded pool, or with `spark` as one Spark job (a task per table, for
    lakes beyond one machine); one table's failure is its error entry, never the scan's. `row_counts`: as
    `table_health`'s (False: the files' statistics are not read, so rows are not counted)."""
    one = partial(
        scan_entry,
        policy=policy,
        storage_options=storage_options,
        now_ms=now_ms,
        history_commits=history_commits,
        untracked=untracked,
        row_counts=row_counts,
    )
    tables = list(tables)
    if spark is not None:
        from ..engines.spark.lake import scan_tables

        results = scan_tables(spark, tables, one)
    else:
        progress = PROGRESS.get()  # read here: the pool's threads do not see the context's callback
        one = partial(one, memory_limit_bytes=default_memory_limit())  # this machine's, looked up once
        results = []
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            for result in pool.map(one, tables):  # in table order, as each finishes
                results.append(result)
                if progress is not None:
                    progress(SCANNING, len(results), len(tables))
    out = Scan()
    for result in results:
        (out.healths if isinstance(result, TableHealth) else out.errors).append(result)  # type: ignore[arg-type]
    return out
