"""What VACUUM's Spark executors run (`mapInArrow` tasks of `vacuum.SparkVacuumExecutor`): the listing,
the protected paths of a Spark-engine state, the per-row re-validation of plan entries, the deletes. Each
task builds its store from the table URI and the storage options (inside its closure)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import islice
from typing import Any

import pyarrow as pa

from ...protocol.actions import AddFile, RemoveFile, action_from_json
from ...protocol.vacuum import (
    DUPLICATE,
    HIDDEN,
    PROTECTED,
    UNTRACKED_GRACE,
    ListedFile,
    LoggedFile,
    PlannedFile,
    dv_alias_key,
    expired_tombstone_paths,
    is_hidden,
    listed_candidate,
    partition_of,
    plan_entry_relative,
    protected_paths,
    recheck,
    refused_entry,
    within_grace,
)
from ...storage import LogStore, store_for
from ...storage.batch import delete_relative, stat_entries
from .tasks import batch_rows, ddl

#: Rows per Arrow batch the executors yield.
_BATCH_ROWS = 8192

_S, _L, _B = pa.string(), pa.int64(), pa.bool_()
_LISTED = (("path", _S), ("size", _L), ("modification_time", _L), ("directory", _B))
_PLAN_FILE = (("path", _S), ("size", _L), ("modification_time", _L))
_CANDIDATE = (*_PLAN_FILE, ("rel", _S), ("alias", _S), ("partition", _S))
#: a plan entry after the per-row rules: `reason` (null: so far deletable; `REFUSED:<why>` refuses the
#: plan), `young` (within the grace period, if untracked)
_ENTRY = (*_CANDIDATE, ("reason", _S), ("young", _B))
#: a listed candidate nothing protects; `young`: untracked and within the grace period
_FLAGGED = (*_PLAN_FILE, ("young", _B))
_DELETED = (("partition", _S), ("files", _L), ("bytes", _L))
LISTED_SCHEMA, CANDIDATE_SCHEMA, PLAN_FILE_SCHEMA = ddl(_LISTED), ddl(_CANDIDATE), ddl(_PLAN_FILE)
ENTRY_SCHEMA, DELETED_SCHEMA, FLAGGED_SCHEMA = ddl(_ENTRY), ddl(_DELETED), ddl(_FLAGGED)
#: `ENTRY_SCHEMA.reason` of an entry that refuses the whole plan (`protocol.vacuum.refused_entry`)
REFUSED = "refused:"

Row = tuple[Any, ...]
ArrowTask = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


def _batches(rows: Iterable[Row], fields: Sequence[tuple[str, pa.DataType]]) -> Iterator[pa.RecordBatch]:
    """`rows` as Arrow batches of at most `_BATCH_ROWS` rows."""
    rows = iter(rows)
    while chunk := list(islice(rows, _BATCH_ROWS)):
        arrays = [pa.array(list(c), t) for c, (_, t) in zip(zip(*chunk, strict=True), fields, strict=True)]
        yield pa.RecordBatch.from_arrays(arrays, [n for n, _ in fields])


def _store_task(
    table_uri: str,
    options: Mapping[str, Any],
    fields: Sequence[tuple[str, pa.DataType]],
    rows: Callable[[LogStore, Iterator[pa.RecordBatch]], Iterable[Row]],
) -> ArrowTask:
    """`mapInArrow` function: `rows(store, batches)` as batches of `fields`, its store built in the task."""
    options = dict(options)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from _batches(rows(store_for(table_uri, options), batches), fields)

    return run


def _root(store: LogStore, table_uri: str) -> str:
    return store.join(table_uri).rstrip("/")


def _candidate(path: str, size: int, mtime: int, cutoff_ms: int, columns: Sequence[str]) -> Row | None:
    """A `CANDIDATE_SCHEMA` row for a listed file FULL mode may delete if nothing protects it."""
    rel = listed_candidate(ListedFile(path, size, mtime), cutoff_ms, columns)
    if rel is None:
        return None
    stored = path.strip("/")
    return stored, size, mtime, rel, dv_alias_key(rel), partition_of(stored)


def list_root_task(table_uri: str, options: Mapping[str, Any], cutoff_ms: int, columns: Sequence[str]) -> ArrowTask:
    """`mapInArrow` over one row: the table root's directories (hidden ones and `_delta_log` pruned) and
    its files that pass the per-file rules, as `LISTED_SCHEMA` rows."""
    options, columns = dict(options), list(columns)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        if any(b.num_rows for b in batches):  # the one task with the row builds a store; the empty ones none
            yield from _batches(root_rows(store_for(table_uri, options), table_uri, cutoff_ms, columns), _LISTED)

    return run


def root_rows(store: LogStore, table_uri: str, cutoff_ms: int, columns: Sequence[str]) -> Iterator[Row]:
    """`LISTED_SCHEMA` rows of the table root: its directories (hidden ones and `_delta_log` pruned) and its
    files that pass the per-file rules."""
    for entry in store.list_level(_root(store, table_uri)):
        if entry.is_dir:
            if not is_hidden(entry.name, columns):
                yield entry.name, 0, 0, True
        elif _candidate(entry.name, entry.size, entry.modification_time, cutoff_ms, columns) is not None:
            yield entry.name, entry.size, entry.modification_time, False


def listed_table(rows: Iterable[Row]) -> pa.Table:
    """`LISTED_SCHEMA` rows as an Arrow table (the driver's root listing handed to the executors)."""
    return pa.Table.from_batches(list(_batches(rows, _LISTED)), pa.schema(_LISTED))


def expand_task(table_uri: str, options: Mapping[str, Any], cutoff_ms: int, columns: Sequence[str]) -> ArrowTask:
    """`mapInArrow` over `LISTED_SCHEMA` rows: each directory listed recursively, its files and the root's
    passed through the per-file rules, as `CANDIDATE_SCHEMA` rows (paths relative to the root, as stored)."""
    return _store_task(table_uri, options, _CANDIDATE, lambda s, b: _expanded(s, table_uri, cutoff_ms, columns, b))


def _expanded(
    store: LogStore, table_uri: str, cutoff_ms: int, columns: Sequence[str], batches: Iterator[pa.RecordBatch]
) -> Iterator[Row]:
    """`expand_task`'s `CANDIDATE_SCHEMA` rows."""
    columns = list(columns)
    root = _root(store, table_uri)
    for batch in batches:
        for path, size, mtime, directory in batch_rows(batch, (n for n, _ in _LISTED)):
            if not directory:
                found = _candidate(path, size, mtime, cutoff_ms, columns)
                if found is not None:
                    yield found
                continue
            for info in store.list_recursive(store.join(table_uri, *path.split("/"))):
                if info.path.startswith(root + "/"):
                    found = _candidate(
                        info.path[len(root) + 1 :], info.size, info.modification_time, cutoff_ms, columns
                    )
                    if found is not None:
                        yield found


def plan_task(
    table_uri: str,
    options: Mapping[str, Any],
    cutoff_ms: int,
    columns: Sequence[str],
    *,
    protected: frozenset[str],
    tracked: frozenset[str] | None,
    young_after_ms: int,
    max_rows: int,
) -> ArrowTask:
    """`expand_task` with the plan's joins done in the task, for protected paths (and, when the grace
    period matters, `tracked` expired tombstones) few enough to travel in its closure: `FLAGGED_SCHEMA` rows
    of the candidates nothing protects, `young` for an untracked one within the grace period (counted, not
    planned). At most `max_rows` rows, then one row with a null path: too many to collect."""

    def rows(store: LogStore, batches: Iterator[pa.RecordBatch]) -> Iterator[Row]:
        n = 0
        for stored, size, mtime, rel, alias, _ in _expanded(store, table_uri, cutoff_ms, columns, batches):
            if rel in protected or alias in protected:
                continue
            if n == max_rows:
                yield None, 0, 0, False
                return
            n += 1
            yield stored, size, mtime, tracked is not None and mtime > young_after_ms and rel not in tracked

    return _store_task(table_uri, options, _FLAGGED, rows)


def flag_task(protected: frozenset[str], tracked: frozenset[str] | None) -> ArrowTask:
    """`mapInArrow` over `ENTRY_SCHEMA` rows (`entry_task`'s): the final `reason` of each, as
    `SparkVacuumExecutor._flag`'s joins give it, with the protected paths and the expired tombstones
    (`tracked`, when the grace period matters) in the closure."""

    def reason(row: dict[str, Any]) -> str | None:
        why = row["reason"]
        if why is not None and (why.startswith(REFUSED) or why in (HIDDEN, DUPLICATE)):
            return why
        if row["rel"] is not None and (row["rel"] in protected or row["alias"] in protected):
            return PROTECTED
        if why is not None:
            return why
        if row["young"] and (tracked is None or row["rel"] not in tracked):
            return UNTRACKED_GRACE
        return None

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            reasons = pa.array([reason(r) for r in batch.to_pylist()], pa.string())
            yield batch.set_column(batch.schema.get_field_index("reason"), "reason", reasons)

    return run


def paths_task(table_uri: str, cutoff_ms: int, *, expired: bool) -> ArrowTask:
    """`mapInArrow` over reconciled file actions (`json` column of the Spark engine's state): one `rel` row
    per protected relative path (`protocol.vacuum.protected_paths`) or, `expired`, per expired tombstone
    path and its DV file (`protocol.vacuum.expired_tombstone_paths`)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        active: list[LoggedFile] = []
        tombstones: list[LoggedFile] = []
        for batch in batches:
            for text in batch.column("json").to_pylist():
                action = action_from_json(json.loads(text))
                if isinstance(action, AddFile) and not expired:
                    active.append(LoggedFile(action.path, action.deletion_vector))
                elif isinstance(action, RemoveFile):
                    tombstones.append(
                        LoggedFile(action.path, action.deletion_vector, action.deletion_timestamp, action.size)
                    )
        if expired:
            paths = expired_tombstone_paths(tombstones, cutoff_ms=cutoff_ms, table_root=table_uri)
        else:
            paths = protected_paths(active, tombstones, cutoff_ms=cutoff_ms, table_root=table_uri)
        yield from _batches(((rel,) for rel in paths), (("rel", pa.string()),))

    return run


def entry_task(
    table_uri: str,
    options: Mapping[str, Any],
    columns: Sequence[str],
    *,
    cutoff_ms: int,
    now_ms: int,
    grace_ms: int,
) -> ArrowTask:
    """`mapInArrow` over plan entries (`PLAN_FILE_SCHEMA`, hash-partitioned by path so that repeats meet in
    one task): `ENTRY_SCHEMA` rows, `reason` set by the per-row rules in `protocol.vacuum.revalidate`'s
    order: `REFUSED:<why>` (the driver refuses the plan), `HIDDEN`, `DUPLICATE`, then what `recheck` finds
    in storage now. `young` (`within_grace`) drops an entry only when the driver's join finds it untracked."""
    columns = list(columns)

    def rows(store: LogStore, batches: Iterator[pa.RecordBatch]) -> Iterator[Row]:
        seen: set[str] = set()
        for batch in batches:
            entries = [PlannedFile(p, s or 0, m) for p, s, m in batch_rows(batch, (n for n, _ in _PLAN_FILE))]
            out: list[list[Any]] = []
            pending: list[int] = []
            for f in entries:
                why = refused_entry(f.path)
                rel = None if why is not None else plan_entry_relative(f.path, columns)
                row = [f.path, f.size, f.modification_time, rel, None if rel is None else dv_alias_key(rel)]
                row += [partition_of(f.path), None, False]
                if why is not None:
                    row[6] = REFUSED + why
                elif rel is None:
                    row[6] = HIDDEN
                elif f.path in seen:
                    row[6] = DUPLICATE
                else:
                    seen.add(f.path)
                    pending.append(len(out))
                out.append(row)
            found = stat_entries(store, table_uri, [out[i][0] for i in pending]) if pending else []
            for i, now in zip(pending, found, strict=True):
                f = entries[i]
                # tracked=True: every rule but the grace period, which the driver applies to untracked files
                why = recheck(f, now, cutoff_ms=cutoff_ms, now_ms=now_ms, grace_ms=grace_ms, tracked=True)
                out[i][6] = why
                if why is None and now is not None and f.modification_time is not None:
                    mtime = max(f.modification_time, now.modification_time)
                    out[i][7] = within_grace(mtime, now_ms=now_ms, grace_ms=grace_ms)
            yield from map(tuple, out)

    return _store_task(table_uri, options, _ENTRY, rows)


def delete_task(table_uri: str, options: Mapping[str, Any], batch_size: int) -> ArrowTask:
    """`mapInArrow` over (path, size, partition) rows: delete them in batches of `batch_size`
    (`storage.batch.delete_relative`); one `DELETED_SCHEMA` row per directory: files handled, bytes."""

    def rows(store: LogStore, batches: Iterator[pa.RecordBatch]) -> Iterator[Row]:
        done: dict[str, list[int]] = {}
        pending: list[tuple[str, int, str]] = []

        def flush() -> None:
            delete_relative(store, table_uri, [p for p, _, _ in pending], batch_size)
            for _, size, part in pending:
                entry = done.setdefault(part, [0, 0])
                entry[0] += 1
                entry[1] += size or 0
            pending.clear()

        for batch in batches:
            for row in batch_rows(batch, ("path", "size", "partition")):
                pending.append(row)
                if len(pending) >= batch_size:
                    flush()
        if pending:
            flush()
        yield from ((part, n, b) for part, (n, b) in done.items())

    return _store_task(table_uri, options, _DELETED, rows)
