"""A table's health from its log alone: one listing of `_delta_log` (it names the checkpoints, so
`_last_checkpoint` is not read), the checkpoint and each commit after it read once (`CountingStore`), no data
file; a few older commits only to find the last OPTIMIZE
and VACUUM (`history_commits`). The counting rules are in `protocol.lake_health`. Untracked files need a listing
of the whole table, so they are counted only on request (`untracked=True`), priced in list requests.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

from ..delta_log import DeltaLog
from ..engines.local import EAGER_STATS, LocalEngine
from ..errors import DeltaError, StorageError
from ..progress import PROGRESS
from ..protocol.actions import Action, AddFile, CommitInfo, RemoveFile
from ..protocol.filenames import LogFileKind, parse_log_path
from ..protocol.lake_health import LastOperation, TableHealth, Tombstone, summarize_columns
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
    SIMPLE_PATH_PATTERN,
    deletable,
    normalize_relative,
    protected_from_logged,
    relative_to_root,
)
from ..read.commits import read_commit
from ..read.memory_budget import default_memory_limit
from ..read.protected_files import active_set, protected_set
from ..storage import is_local, store_for
from .discover import error_dict
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


def _records(stats: str | None) -> int | None:
    if not stats:
        return None
    try:
        value = json.loads(stats).get("numRecords")
    except (ValueError, AttributeError):
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not -(2**63) <= value < 2**63:
        return None  # not a count an int64 column holds (a bigger one raised OverflowError before)
    return value


#: `numRecords` as the first key of a stats JSON (as Spark and delta-rs write it); other layouts are parsed.
_NUM_RECORDS_FIRST = r'^\{\s*"numRecords"\s*:\s*(?P<n>[0-9]{1,18})\s*[,}]'
#: The compact spelling of that layout (no blanks), read from the string bytes without a regex.
_COMPACT_PREFIX = '{"numRecords":'
_MAX_DIGITS = 18


def _compact_counts(stats: Any) -> tuple[Any, Any]:
    """(rows, counts) of the strings of `stats` (string or large_string) that begin with `{"numRecords":`,
    then 1-18 digits, then `,` or `}` (`_NUM_RECORDS_FIRST` without blanks), read as bytes: the 19 bytes after
    that prefix, one row each of a uint8 matrix, give the digit count and the number a digit column at a time
    (10k rows: ~0.6 ms against ~2.4 ms for the regex). Shorter strings are left to the caller."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    width = _MAX_DIGITS + 1
    start = len(_COMPACT_PREFIX)
    raw = stats.view(pa.large_binary() if pa.types.is_large_string(stats.type) else pa.binary())
    candidate = pc.and_(pc.starts_with(stats, _COMPACT_PREFIX), pc.greater_equal(pc.binary_length(raw), start + width))
    rows = np.flatnonzero(candidate.fill_null(False).to_numpy(zero_copy_only=False))
    if len(rows) == 0:
        return rows, np.zeros(0, dtype=np.int64)
    window = pc.binary_slice(raw, start, start + width)  # `width` bytes for each candidate row
    data = np.frombuffer(window.buffers()[2], dtype=np.uint8)
    if len(rows) == len(stats) and window.offset == 0 and len(data) >= width * len(rows):
        bytes_ = data[: width * len(rows)].reshape(len(rows), width)  # contiguous: no copy
    else:
        offsets = np.frombuffer(window.buffers()[1], dtype=np.int64 if raw.type == pa.large_binary() else np.int32)
        bytes_ = data[offsets[window.offset + rows][:, None] + np.arange(width)]
    digits = bytes_ - np.uint8(48)  # bytes below "0" wrap past 9
    is_digit = digits < 10
    count = np.argmin(is_digit, axis=1)  # the first non-digit (0 also when all `width` are digits: too long)
    end = bytes_[np.arange(len(rows)), count]
    ok = (count >= 1) & ((end == ord(",")) | (end == ord("}")))
    value = np.zeros(len(rows), dtype=np.int64)
    for j in range(int(count[ok].max()) if ok.any() else 0):
        value = np.where(j < count, value * 10 + digits[:, j], value)
    return rows[ok], value[ok]


def _record_counts(stats: Any) -> Any:
    """Each file's `numRecords` as int64 (-1: no stats or no count): read from the bytes where it is the
    first key written compactly (`_compact_counts`), one vectorized regex where it is first with blanks, a
    JSON parse for the rest."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(stats, pa.ChunkedArray):  # chunk by chunk: the strings are not copied together
        parts = [_record_counts(c) for c in stats.chunks]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    if len(stats) == 0:
        return np.zeros(0, dtype=np.int64)
    if not (pa.types.is_string(stats.type) or pa.types.is_large_string(stats.type)):
        stats = stats.cast(pa.large_string())
    counts = np.full(len(stats), -1, dtype=np.int64)
    rows, values = _compact_counts(stats)
    counts[rows] = values
    rest = stats.is_valid().to_numpy(zero_copy_only=False)
    rest[rows] = False
    rest_rows = np.flatnonzero(rest)
    if len(rest_rows) == 0:
        return counts
    others = stats.take(pa.array(rest_rows))
    found = pc.struct_field(pc.extract_regex(others, _NUM_RECORDS_FIRST), [0])
    counts[rest_rows] = pc.cast(found, pa.int64()).fill_null(-1).to_numpy(zero_copy_only=False)
    for i in pc.indices_nonzero(pc.is_null(found)).to_pylist():
        n = _records(others[i].as_py())
        counts[rest_rows[i]] = -1 if n is None else n
    return counts


def _map_values(maps: Any, key: str) -> Any:
    """Each row's value for `key` in a map array (null when absent; the first when repeated), as
    `pyarrow.compute.map_lookup(maps, key, "first")` answers it, from the flattened entries: one comparison
    over every entry instead of a lookup per row (10k rows: ~0.3 ms against ~5 ms)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(maps)
    offsets = maps.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    start, end = int(offsets[0]), int(offsets[-1])
    if end - start == n and not maps.null_count and n:  # one entry per row: the values, when it is `key`
        keys = maps.keys.slice(start, n)
        if not keys.null_count and pc.all(pc.equal(keys, key)).as_py() and bool(np.all(np.diff(offsets) == 1)):
            return maps.items.slice(start, n)
    parents = np.repeat(np.arange(n), np.diff(offsets))
    hit = pc.equal(maps.keys.slice(start, end - start), key).fill_null(False).to_numpy(zero_copy_only=False)
    if maps.null_count:  # a null map's entries (if any) are not its values
        hit &= maps.is_valid().to_numpy(zero_copy_only=False)[parents]
    at = np.flatnonzero(hit)
    rows = parents[at]
    values = maps.items.slice(start, end - start)
    if len(rows) == n and (n == 0 or (rows[0] == 0 and bool(np.all(np.diff(rows) == 1)))):
        return pc.take(values, pa.array(at))  # the common case: every row holds the key once
    first_rows, first_at = np.unique(rows, return_index=True)
    take = np.full(n, -1, dtype=np.int64)
    take[first_rows] = at[first_at]
    return pc.take(values, pa.array(take, mask=take < 0))


def _partition_codes(
    pv: Any, columns: Sequence[str], physical: Mapping[str, str]
) -> tuple[Any, list[tuple[str, tuple[tuple[str, str | None], ...]]]]:
    """Each file's partition code and (key, values) per code, from the `partitionValues` maps: each column's
    values looked up and dictionary-encoded (null last), the codes combined, then numbered densely over the
    combinations present (a bincount when their product is small, else a sort); keys are built once per
    partition, never per file."""
    import numpy as np

    n = len(pv)
    indices, dictionaries = [], []
    for c in columns:
        encoded = _map_values(pv, physical.get(c, c)).dictionary_encode()
        dictionary = encoded.dictionary.to_pylist()
        indices.append(encoded.indices.fill_null(len(dictionary)).to_numpy(zero_copy_only=False).astype(np.int64))
        dictionaries.append([*dictionary, None])
    space = math.prod(len(d) for d in dictionaries)
    if space < 2**62:
        combined = np.zeros(n, dtype=np.int64)
        for idx, d in zip(indices, dictionaries, strict=True):
            combined = combined * len(d) + idx
        if space <= 4 * n + 1024:  # dense: present combinations by counting, not sorting
            present = np.bincount(combined, minlength=space) > 0
            unique, codes = np.flatnonzero(present), (np.cumsum(present) - 1)[combined]
        else:
            unique, codes = np.unique(combined, return_inverse=True)
        rows = []
        for code in unique.tolist():
            at = []
            for d in reversed(dictionaries):
                code, i = divmod(code, len(d))
                at.append(i)
            rows.append(at[::-1])
    else:  # too many combinations for one int64: unique rows of the per-column indices
        stacked, codes = np.unique(np.stack(indices, axis=1), axis=0, return_inverse=True)
        rows = stacked.tolist()
    partitions = []
    for at in rows:
        values = [d[i] for d, i in zip(dictionaries, at, strict=True)]
        raw = {physical.get(c, c): v for c, v in zip(columns, values, strict=True)}
        key = partition_key(raw, columns, physical)
        partitions.append((key, tuple((c, raw.get(physical.get(c, c))) for c in columns)))
    return np.asarray(codes, dtype=np.int64).reshape(n), partitions


def _file_columns(
    snapshot: Any, physical: Mapping[str, str], row_counts: bool = True
) -> tuple[Any, list[Any], Any, Any | None, Any]:
    """The active files as columns for `summarize_columns`: partition codes, (key, values) per code, sizes,
    `numRecords` (-1: none; None: not read) and rows deleted by deletion vectors, each from its Arrow column
    in one pass (`_partition_codes`, `_record_counts`). Without `row_counts` the checkpoint's stats are read
    only when a file has a deletion vector (its deleted-rows ratio needs `numRecords`)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    table = snapshot.state.files.adds  # checkpoint rows' stats may be unread (`LocalEngine.lazy_stats_bytes`)
    n = table.num_rows
    columns = snapshot.partition_columns
    sizes = table.column("size").fill_null(0).to_numpy()
    dv = table.column("deletionVector")
    if pa.types.is_struct(dv.type) and dv.type.get_field_index("cardinality") >= 0:
        dv_rows = pc.struct_field(dv, "cardinality").fill_null(0).to_numpy()
    else:
        dv_rows = np.zeros(n, dtype=np.int64)
    records = None
    if row_counts or bool(np.any(dv_rows > 0)):
        records = _record_counts(snapshot.add_files_table.column("stats"))  # same rows, stats read
    if not columns or n == 0:
        return np.zeros(n, dtype=np.int64), [("", ())], sizes, records, dv_rows
    codes, partitions = _partition_codes(table.column("partitionValues").combine_chunks(), columns, physical)
    return codes, partitions, sizes, records, dv_rows


def _dv_file_size(dv: Mapping[str, Any]) -> int:
    """A DV file's size from its descriptor: the version byte up to `offset`, then the DV's 4-byte length, its
    `sizeInBytes` and a 4-byte checksum (PROTOCOL.md "Deletion Vector Format"); a file holding more DVs is larger."""
    return (dv.get("offset") or 0) + 4 + (dv.get("sizeInBytes") or 0) + 4


def _tombstones(snapshot: Any, physical: Mapping[str, str], vacuumed: _Vacuumed | None = None) -> list[Tombstone]:
    """One entry per file VACUUM may delete once its tombstones expire: a removed path still active (a deletion
    vector update removes and re-adds it) is none; a path removed twice counts once, at its latest removal;
    the DV files of removed files count too, when no active file uses them. A tombstone the last completed
    VACUUM already deleted (`vacuumed`) is none: tombstones stay in the log after their file is gone. From the
    Arrow columns: the live paths by `active_set`, the removes' partition keys coded once per partition
    (`_partition_codes`), paths matching `SIMPLE_PATH_PATTERN` taken as their own relative form; only the
    others and the DV descriptors are normalized one by one."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    root = snapshot.table
    table = snapshot.remove_files_table
    n = table.num_rows
    if n == 0:
        return []  # nothing removed: no set of live paths to build
    live = active_set(snapshot, table_root=root)  # paths and deletion vectors: the stats are not needed
    columns = snapshot.partition_columns
    if columns:
        codes, partitions = _partition_codes(table.column("partitionValues").combine_chunks(), columns, physical)
        names = [key for key, _ in partitions]
        keys = [names[c] for c in codes.tolist()]
    else:
        keys = [""] * n
    paths = table.column("path")
    rels: list[str | None] = paths.to_pylist()
    simple = pc.match_substring_regex(paths, f"^(?:{SIMPLE_PATH_PATTERN})$").fill_null(False)
    for i in np.flatnonzero(~simple.to_numpy(zero_copy_only=False)).tolist():
        path = rels[i]
        rels[i] = None if path is None else relative_to_root(path, root)
    sizes = table.column("size").fill_null(0).to_numpy().tolist()
    stamps = table.column("deletionTimestamp").fill_null(0).to_numpy().tolist()
    deleted = None if vacuumed is None else vacuumed.deleted
    found: dict[str, tuple[str, int, int]] = {}

    def keep(rel: str | None, key: str, size: int, ts: int) -> None:
        if rel is None or rel in live or (deleted is not None and deleted(rel, ts)):
            return
        seen = found.get(rel)
        found[rel] = (key, size, ts) if seen is None else (key, max(size, seen[1]), max(ts, seen[2]))

    for rel, key, size, ts in zip(rels, keys, sizes, stamps, strict=True):
        keep(rel, key, size, ts)
    dv = table.column("deletionVector")
    with_file = pc.is_in(pc.struct_field(dv, "storageType"), value_set=pa.array(["u", "p"])).fill_null(False)
    rows = np.flatnonzero(with_file.to_numpy(zero_copy_only=False)).tolist()
    if rows:  # the DV files of removed files, in row order (no DV file is also a data file)
        for i, d in zip(rows, pc.take(dv, rows).to_pylist(), strict=True):
            for dv_rel in protected_from_logged([], [(d["storageType"], d["pathOrInlineDv"])], table_root=root):
                keep(dv_rel, keys[i], _dv_file_size(d), stamps[i])
    return [Tombstone(key, size, ts) for key, size, ts in found.values()]


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
    commits = sorted(
        (p for f in listing if (p := parse_log_path(f)) is not None and p.kind is LogFileKind.COMMIT),
        key=lambda p: -p.version,
    )
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


def _engine(table: str, row_counts: bool, memory_limit_bytes: int | Literal["auto"] | None = "auto") -> LocalEngine:
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
    tombstones = _tombstones(snapshot, physical, hist.vacuumed)
    codes, keys, sizes, records, dv_rows = _file_columns(snapshot, physical, row_counts)
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
