"""The local engine: reads the log with pyarrow in this process.

Commits are parsed in bulk (one `json.loads` per commit file, not per line); checkpoints and
sidecars are read as Arrow columns and never turned into one Python object per file. The commits
after the checkpoint are replayed with `InMemoryLogReplay` and reconciled onto the checkpoint's
columnar state in bulk (`FileState.apply`).

The newest protocol is checked before any checkpoint file action is read, so a table this reader
cannot read is refused early.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from .. import arrow_compute as pc
from ..actions import (
    INVALID_ACTION_ERRORS,
    Action,
    AddFile,
    CheckpointMetadata,
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    SetTransaction,
    Sidecar,
    _stats_text,
    action_from_json,
)
from ..arrow_build import string_array
from ..errors import DeltaError, MalformedCheckpointError, MalformedCommitError, StorageError
from ..file_state import (
    ADD_SCHEMA,
    REMOVE_SCHEMA,
    FileState,
    adds_to_table,
    conform,
    conform_table,
    empty_table,
    fill_stats,
    iter_adds,
    iter_removes,
    key_column,
    removes_to_table,
)
from ..filenames import SIDECAR_DIR_NAME, LogFileKind, ParsedLogPath
from ..log_segment import CheckpointInstance, LogSegment
from ..replay import InMemoryLogReplay
from ..storage import LocalLogStore, LogStore, local_path
from ..table_features import check_can_read
from ..table_state import TableState

T = TypeVar("T")

_NON_FILE_COLUMNS = ("protocol", "metaData", "txn", "domainMetadata", "checkpointMetadata", "sidecar")


def parse_commit_bytes(data: bytes, *, table: str, version: int, file: str) -> list[dict[str, Any]]:
    """The JSON objects of a newline-delimited commit, in order; a bad line is a typed error."""
    body = data.strip()
    if not body:
        return []
    try:  # one parse for the whole file; a blank line or two objects on a line fall through
        objs = json.loads(b"[" + body.replace(b"\n", b",") + b"]")
    except ValueError:
        objs = None
    if objs is not None and len(objs) == body.count(b"\n") + 1 and all(type(o) is dict for o in objs):
        return objs
    lines = [line for line in data.split(b"\n") if line.strip()]
    if not lines:
        return []
    try:
        objs = json.loads(b"[" + b",".join(lines) + b"]")
    except ValueError:
        objs = None
    if objs is not None and all(isinstance(o, dict) for o in objs) and len(objs) == len(lines):
        return objs
    for number, line in enumerate(lines, start=1):  # slow path only to name the bad line
        try:
            obj = json.loads(line)
        except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
            reason = getattr(exc, "msg", None) or str(exc)
            raise MalformedCommitError(
                f"Commit line {number} is not valid JSON ({reason}); the commit may be truncated",
                table=table,
                version=version,
                file=file,
            ) from None
        if not isinstance(obj, dict):
            raise MalformedCommitError(
                f"Commit line {number} is not a JSON object", table=table, version=version, file=file
            )
    raise MalformedCommitError("Commit cannot be parsed", table=table, version=version, file=file)


def read_commit(store: LogStore, table: str, commit: ParsedLogPath) -> list[Action]:
    """The actions of one commit file, in log order."""
    try:
        data = store.read_bytes(commit.file.path)
    except FileNotFoundError:
        raise StorageError(
            "Commit file listed but no longer readable (was the log cleaned up concurrently?)",
            table=table,
            version=commit.version,
            file=commit.name,
        ) from None
    except OSError as exc:
        raise StorageError(
            f"Cannot read commit: {type(exc).__name__}: {exc}",
            table=table,
            version=commit.version,
            file=commit.name,
            transient=not isinstance(exc, PermissionError),
        ) from None
    objs = parse_commit_bytes(data, table=table, version=commit.version, file=commit.name)
    out = []
    for obj in objs:
        try:
            action = action_from_json(obj)
        except INVALID_ACTION_ERRORS as exc:
            raise MalformedCommitError(
                f"Invalid action {sorted(obj)}: {exc}", table=table, version=commit.version, file=commit.name
            ) from None
        if action is not None:
            out.append(action)
    return out


class _Background(Generic[T]):
    """Runs `fn` in a daemon thread; `result()` joins it and returns or re-raises."""

    def __init__(self, fn: Callable[[], T]) -> None:
        self._fn = fn
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="delta-checkpoint-read", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._fn()
        except BaseException as exc:  # handed to the caller in result()
            self._error = exc

    def result(self) -> T:
        self._thread.join()
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        assert self._value is not None
        return self._value

    def discard(self) -> None:
        """Wait for the thread and drop its outcome (the caller is already raising)."""
        self._thread.join()
        self._value = self._error = None


@dataclass
class CheckpointData:
    """A checkpoint's content: non-file actions as objects, file actions as Arrow tables."""

    actions: list[Action]
    adds: pa.Table
    removes: pa.Table
    stats_loader: Callable[[], pa.Table] | None = None

    @property
    def protocol(self) -> Protocol | None:
        return next((a for a in self.actions if isinstance(a, Protocol)), None)


def _open_native(store: LogStore, path: str) -> Any:
    """A local file memory-mapped by Arrow: reads release the GIL (the checkpoint read overlaps the
    commit replay) and allocate no read buffers (copying a 161 MB checkpoint into fresh memory cost
    0.1-0.7 s of kernel time in page faults in one load out of three on this project's VM;
    `bench/RESULTS.md`). Other stores, and subclasses that may wrap reads, go through `store.open`.
    Checkpoints are immutable once written: a file truncated in place while mapped (which no Delta
    writer does) would fault the process."""
    if type(store) is LocalLogStore:
        return pa.memory_map(local_path(path))
    return store.open(path)


def _read_parquet(store: LogStore, path: str, columns: Sequence[str] | None = None) -> pa.Table:
    """Read `columns` (top-level names or `parent.child` leaves) that exist in the file."""
    with _open_native(store, path) as fh:
        pf = pq.ParquetFile(fh)
        schema = pf.schema_arrow
        if columns is None:
            return pf.read()
        wanted = []
        for c in columns:
            parent, _, child = c.partition(".")
            idx = schema.get_field_index(parent)
            if idx < 0:
                continue
            ptype = schema.field(idx).type
            if child and not pa.types.is_struct(ptype):
                # not a struct: read it whole so the caller sees (and refuses) the wrong type
                if parent not in wanted:
                    wanted.append(parent)
                continue
            if child and ptype.get_field_index(child) < 0:
                continue
            wanted.append(c)
        if not wanted:
            return pa.table({})
        return pf.read(columns=wanted)


#: Checkpoint `add` fields read with the file set; `stats` is read later, only when asked for.
_ADD_FIELDS = [f.name for f in ADD_SCHEMA if f.name != "stats"]
_REMOVE_FIELDS = [f.name for f in REMOVE_SCHEMA]
_ACTION_COLUMNS = [
    *_NON_FILE_COLUMNS,
    *(f"add.{f}" for f in _ADD_FIELDS),
    *(f"remove.{f}" for f in _REMOVE_FIELDS),
]


def read_checkpoint_stats(store: LogStore, paths: Sequence[str]) -> pa.Table:
    """(key, stats) of every add row in the given checkpoint/sidecar parquet files."""
    parts = []
    for path in paths:
        data = _read_parquet(store, path, ["add.path", "add.deletionVector", "add.stats", "add.stats_parsed"])
        if "add" not in data.column_names:
            continue
        col = data.column("add")
        col = pc.filter(col, pc.is_valid(pc.struct_field(col, "path")))
        names = {col.type.field(i).name for i in range(col.type.num_fields)}
        if "stats" in names:
            stats = pc.struct_field(col, "stats")
        elif "stats_parsed" in names:
            stats = string_array(
                [
                    None if r is None else _stats_text({"stats_parsed": r})
                    for r in pc.struct_field(col, "stats_parsed").to_pylist()
                ]
            )
        else:
            continue
        keyed = conform_table(col, pa.schema([ADD_SCHEMA.field("path"), ADD_SCHEMA.field("deletionVector")]))
        parts.append(pa.table({"key": key_column(keyed), "stats": stats}))
    if not parts:
        return pa.table({"key": string_array([]), "stats": string_array([])})
    return pa.concat_tables(parts)


def _file_actions(table: pa.Table, name: str, schema: pa.Schema) -> pa.Table:
    """The rows of action column `name` that hold a file action, as a table of `schema`.

    Zero-copy where it can be: a chunk whose file-action rows are one contiguous run (checkpoint
    writers group adds and removes) is sliced, not filtered, and children already of the target
    type are used as they are.
    """
    if name not in table.column_names:
        return empty_table(schema)
    col = table.column(name)
    if pa.types.is_null(col.type) or col.null_count == len(col):
        return empty_table(schema)
    if not pa.types.is_struct(col.type):
        raise ValueError(f"column {name!r} has type {col.type}, expected a struct")
    if col.type.get_field_index("path") < 0:
        raise ValueError(f"column {name!r} has no 'path' field")
    batches = []
    for chunk in col.chunks:
        rows = _file_rows(chunk)
        if rows is not None and len(rows):
            batches.append(_conform_batch(rows, schema))
    if not batches:
        return empty_table(schema)
    return pa.Table.from_batches(batches, schema=schema)


def _file_rows(chunk: pa.StructArray) -> pa.StructArray | None:
    """The rows of `chunk` with a non-null `path` (a slice when they are contiguous)."""
    valid = pc.is_valid(pc.struct_field(chunk, "path"))
    count = valid.true_count
    if count == 0:
        return None
    if count == len(chunk):
        return chunk
    idx = pc.indices_nonzero(valid)
    first, last = idx[0].as_py(), idx[len(idx) - 1].as_py()
    if last - first + 1 == count:
        return chunk.slice(first, count)
    return pc.take(chunk, idx)


def _conform_batch(rows: pa.StructArray, schema: pa.Schema) -> pa.RecordBatch:
    """A batch of `schema` from struct rows whose `path` is never null (so no parent row is null)."""
    return pa.RecordBatch.from_struct_array(conform(rows, pa.struct(list(schema))))


def sidecar_path(store: LogStore, log_dir: str, path: str) -> str:
    """Where a V2 checkpoint's `sidecar.path` lives: absolute as given, else under `_delta_log/_sidecars`."""
    if "://" in path or path.startswith("/"):
        return path
    return store.join(log_dir, SIDECAR_DIR_NAME, path)


@contextmanager
def checkpoint_read_errors(table: str, version: int, file: str) -> Iterator[None]:
    """Reading one checkpoint file: failures become typed errors naming table, version and file.

    A listed file that is gone is a malformed checkpoint; permission and connection failures are
    storage errors (transient unless permission); anything unreadable is a malformed checkpoint.
    """
    try:
        yield
    except DeltaError:
        raise
    except FileNotFoundError:
        raise MalformedCheckpointError(
            "Checkpoint file listed but missing", table=table, version=version, file=file
        ) from None
    except (PermissionError, ConnectionError, TimeoutError) as exc:
        raise StorageError(
            f"Cannot read checkpoint: {type(exc).__name__}: {exc}",
            table=table,
            version=version,
            file=file,
            transient=not isinstance(exc, PermissionError),
        ) from None
    except (OSError, pa.ArrowException, ValueError, KeyError, TypeError, AttributeError, OverflowError) as exc:
        raise MalformedCheckpointError(
            f"Cannot read checkpoint: {exc}", table=table, version=version, file=file
        ) from None


def _non_file_actions(table: pa.Table) -> list[Action]:
    out: list[Action] = []
    for name in _NON_FILE_COLUMNS:
        if name not in table.column_names:
            continue
        col = table.column(name)
        if pa.types.is_null(col.type) or col.null_count == len(col):
            continue
        if not pa.types.is_struct(col.type):
            raise ValueError(f"column {name!r} has type {col.type}, expected a struct")
        valid = pc.filter(col, pc.is_valid(col))
        for row in valid.to_pylist():
            if row is None:
                continue
            action = action_from_json({name: row})
            if action is not None:
                out.append(action)
    return out


#: Checkpoints at least this large (parquet bytes) have their `add.stats` read only when asked for;
#: smaller ones are read whole. Stats are most of a checkpoint's bytes and few reports need them:
#: a 17 MB checkpoint of 110k files parses in 0.04 s without them and 0.18 s with them.
LAZY_STATS_BYTES = 4 * 1024 * 1024


class LocalEngine:
    """Replays the log in this process with pyarrow.

    `plain=True` replays every action, checkpoint rows included, through `InMemoryLogReplay`: the
    reference path the columnar fast path is tested against (slow on large tables).
    `threaded=True` (the default) reads the checkpoint in a second thread while the commits after it
    are replayed; errors keep the sequential order (a commit's error, then the protocol check, then
    the checkpoint's).
    """

    name = "local"

    def __init__(self, *, plain: bool = False, lazy_stats_bytes: int = LAZY_STATS_BYTES, threaded: bool = True) -> None:
        self.plain = plain
        self.lazy_stats_bytes = lazy_stats_bytes
        self.threaded = threaded

    def read_checkpoint(
        self, table: str, log_dir: str, store: LogStore, checkpoint: CheckpointInstance
    ) -> CheckpointData:
        """Read every file of a complete checkpoint, following V2 sidecars."""
        actions: list[Action] = []
        adds: list[pa.Table] = []
        removes: list[pa.Table] = []
        parquet_paths: list[str] = []
        eager_stats = sum(f.file.size for f in checkpoint.files) < self.lazy_stats_bytes
        columns = [*_ACTION_COLUMNS, "add.stats"] if eager_stats else _ACTION_COLUMNS
        for part in checkpoint.files:
            name = part.name
            with checkpoint_read_errors(table, checkpoint.version, name):
                if part.extension == "json":
                    objs = parse_commit_bytes(
                        store.read_bytes(part.file.path), table=table, version=checkpoint.version, file=name
                    )
                    parsed = [a for a in (action_from_json(o) for o in objs) if a is not None]
                    actions.extend(a for a in parsed if not isinstance(a, AddFile | RemoveFile))
                    adds.append(adds_to_table(a for a in parsed if isinstance(a, AddFile)))
                    removes.append(removes_to_table(a for a in parsed if isinstance(a, RemoveFile)))
                else:
                    data = _read_parquet(store, part.file.path, columns)
                    actions.extend(_non_file_actions(data))
                    adds.append(_file_actions(data, "add", ADD_SCHEMA))
                    removes.append(_file_actions(data, "remove", REMOVE_SCHEMA))
                    parquet_paths.append(part.file.path)
        for sidecar in [a for a in actions if isinstance(a, Sidecar)]:
            path = sidecar_path(store, log_dir, sidecar.path)
            try:
                data = _read_parquet(
                    store,
                    path,
                    [c for c in columns if c.startswith(("add.", "remove."))],
                )
                parquet_paths.append(path)
            except FileNotFoundError:
                raise MalformedCheckpointError(
                    "Sidecar named by the V2 checkpoint is missing",
                    table=table,
                    version=checkpoint.version,
                    file=f"{SIDECAR_DIR_NAME}/{sidecar.path}",
                ) from None
            except (OSError, pa.ArrowException, ValueError) as exc:
                raise MalformedCheckpointError(
                    f"Cannot read sidecar: {exc}", table=table, version=checkpoint.version, file=sidecar.path
                ) from None
            adds.append(_file_actions(data, "add", ADD_SCHEMA))
            removes.append(_file_actions(data, "remove", REMOVE_SCHEMA))
        actions = [a for a in actions if not isinstance(a, Sidecar | CheckpointMetadata)]
        add_table = pa.concat_tables(adds)
        loader = self._stats_loader(table, checkpoint, store, parquet_paths)
        if eager_stats and loader is not None:
            # stats came with the first read; only struct-only stats (`stats_parsed`) still need the loader
            if add_table.num_rows and pc.all(pc.is_null(add_table.column("stats"))).as_py():
                add_table = fill_stats(add_table, loader())
            loader = None
        return CheckpointData(actions, add_table, pa.concat_tables(removes), loader)

    @staticmethod
    def _stats_loader(
        table: str, checkpoint: CheckpointInstance, store: LogStore, paths: list[str]
    ) -> Callable[[], pa.Table] | None:
        if not paths:
            return None

        def load() -> pa.Table:
            try:
                return read_checkpoint_stats(store, paths)
            except FileNotFoundError as exc:
                raise StorageError(
                    f"Checkpoint {checkpoint.version} was removed after this snapshot was loaded, so its file "
                    f"stats can no longer be read; load the snapshot again ({exc})",
                    table=table,
                    version=checkpoint.version,
                    file=checkpoint.files[0].name,
                ) from None
            except (OSError, pa.ArrowException, ValueError, TypeError) as exc:
                raise MalformedCheckpointError(
                    f"Cannot read checkpoint stats: {exc}", table=table, version=checkpoint.version
                ) from None

        return load

    def replay_commits(
        self, table: str, store: LogStore, commits: Sequence[ParsedLogPath]
    ) -> tuple[InMemoryLogReplay, dict[int, CommitInfo]]:
        """Replay commit files in order; returns the replay and each commit's commitInfo."""
        replay = InMemoryLogReplay()
        infos: dict[int, CommitInfo] = {}
        for commit in commits:
            assert commit.kind is LogFileKind.COMMIT
            actions = read_commit(store, table, commit)
            replay.append(commit.version, actions)
            info = next((a for a in actions if isinstance(a, CommitInfo)), None)
            if info is not None:
                infos[commit.version] = info
        return replay, infos

    def load_state(self, table: str, log_dir: str, store: LogStore, segment: LogSegment) -> TableState:
        if self.plain:
            return self._load_plain(table, log_dir, store, segment)
        checkpoint = segment.checkpoint
        pending: _Background[CheckpointData] | None = None
        if checkpoint is not None and segment.commits and self.threaded:
            # Parquet decoding releases the GIL: read the checkpoint while the commits are replayed.
            pending = _Background(lambda: self.read_checkpoint(table, log_dir, store, checkpoint))
        try:
            replay, infos = self.replay_commits(table, store, segment.commits)
            if replay.current_protocol is not None:
                check_can_read(replay.current_protocol, table=table, version=segment.version)
        except BaseException:
            if pending is not None:
                pending.discard()
            raise
        base = TableState.empty()
        tables = None
        if checkpoint is not None:
            if pending is not None:  # build the commits' rows while the checkpoint thread still reads
                try:
                    tables = (adds_to_table(replay.active_files.values()), removes_to_table(replay.tombstones.values()))
                except BaseException:
                    pending.discard()
                    raise
            cp = pending.result() if pending is not None else self.read_checkpoint(table, log_dir, store, checkpoint)
            if replay.current_protocol is None and cp.protocol is not None:
                check_can_read(cp.protocol, table=table, version=segment.version)
            base = _state_from_checkpoint(checkpoint.version, cp)
        return base.apply(replay, infos, file_tables=tables)

    def _load_plain(self, table: str, log_dir: str, store: LogStore, segment: LogSegment) -> TableState:
        replay = InMemoryLogReplay()
        infos: dict[int, CommitInfo] = {}
        if segment.checkpoint is not None:
            cp = self.read_checkpoint(table, log_dir, store, segment.checkpoint)
            state = FileState(cp.adds, cp.removes, stats_loader=cp.stats_loader)
            actions: list[Action] = [*cp.actions, *iter_adds(state.adds_with_stats), *iter_removes(cp.removes)]
            replay.append(segment.checkpoint.version, actions)
        for commit in segment.commits:
            commit_actions = read_commit(store, table, commit)
            replay.append(commit.version, commit_actions)
            info = next((a for a in commit_actions if isinstance(a, CommitInfo)), None)
            if info is not None:
                infos[commit.version] = info
        if replay.current_protocol is not None:
            check_can_read(replay.current_protocol, table=table, version=segment.version)
        return TableState.empty().apply(replay, infos)

    def extend_state(
        self, table: str, log_dir: str, store: LogStore, state: TableState, segment: LogSegment
    ) -> TableState:
        new = [c for c in segment.commits if c.version > state.version]
        replay, infos = self.replay_commits(table, store, new)
        if replay.current_protocol is not None:
            check_can_read(replay.current_protocol, table=table, version=segment.version)
        return state.apply(replay, infos)


def _state_from_checkpoint(version: int, cp: CheckpointData) -> TableState:
    protocol: Protocol | None = None
    metadata: Metadata | None = None
    txns: dict[str, SetTransaction] = {}
    domains: dict[str, DomainMetadata] = {}
    for a in cp.actions:
        if isinstance(a, Protocol):
            protocol = a
        elif isinstance(a, Metadata):
            metadata = a
        elif isinstance(a, SetTransaction):
            txns[a.app_id] = a
        elif isinstance(a, DomainMetadata) and not a.removed:
            domains[a.domain] = a
    return TableState(
        version, protocol, metadata, txns, domains, FileState(cp.adds, cp.removes, stats_loader=cp.stats_loader)
    )
