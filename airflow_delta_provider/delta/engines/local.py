"""The local engine: replays the log in this process.

Commits are parsed in bulk (one `json.loads` per commit file, not per line) and replayed with
`InMemoryLogReplay`. Two ways to hold the checkpoint's files, with the same answers:
* small tables (checkpoint under `row_state_max_bytes`, or none): the checkpoint is decoded in pure
  Python (`checkpoint_parquet`) and the state is Python actions (`RowFileState`), so a load never
  imports pyarrow and numpy (0.1-0.2 s on their own);
* larger ones: checkpoints and sidecars are read with pyarrow as Arrow columns, never one Python
  object per file (`arrow_checkpoint`), and the commits are reconciled onto them in bulk
  (`FileState.apply`). A small checkpoint the pure reader cannot decode is read this way too.

The newest protocol is checked before any checkpoint file action is read, so a table this reader
cannot read is refused early; a state over `memory_limit_bytes` (`memory_budget`) is refused before
anything but Parquet footers is read.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from ..actions import INVALID_ACTION_ERRORS, Action, CommitInfo, Protocol, Sidecar, action_from_json
from ..checkpoint_parquet import UnsupportedParquet, footer_length, uncompressed_sizes
from ..errors import DeltaError, MalformedCheckpointError, MalformedCommitError, StorageError
from ..file_rows import CheckpointTooLarge, DuplicateFileKey, RowFileState
from ..filenames import SIDECAR_DIR_NAME, LogFileKind, ParsedLogPath
from ..log_segment import CheckpointInstance, LogSegment
from ..memory_budget import decoded_bytes, default_memory_limit, estimate, over_limit, upper_bound
from ..replay import InMemoryLogReplay
from ..storage import LogStore
from ..table_features import check_can_read
from ..table_state import TableState, table_state_from_actions

if TYPE_CHECKING:  # pragma: no cover
    from .arrow_checkpoint import CheckpointData

T = TypeVar("T")

NON_FILE_COLUMNS = ("protocol", "metaData", "txn", "domainMetadata", "checkpointMetadata", "sidecar")


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
    except (OSError, ValueError, KeyError, TypeError, AttributeError, OverflowError) as exc:
        raise MalformedCheckpointError(
            f"Cannot read checkpoint: {exc}", table=table, version=version, file=file
        ) from None
    except Exception as exc:
        if not _is_arrow_error(exc):
            raise
        raise MalformedCheckpointError(
            f"Cannot read checkpoint: {exc}", table=table, version=version, file=file
        ) from None


@contextmanager
def sidecar_read_errors(table: str, version: int, sidecar: str) -> Iterator[None]:
    """Reading a V2 checkpoint's sidecar: a missing or unreadable one is a malformed checkpoint."""
    try:
        yield
    except FileNotFoundError:
        raise MalformedCheckpointError(
            "Sidecar named by the V2 checkpoint is missing",
            table=table,
            version=version,
            file=f"{SIDECAR_DIR_NAME}/{sidecar}",
        ) from None
    except Exception as exc:
        if not isinstance(exc, OSError | ValueError) and not _is_arrow_error(exc):
            raise
        raise MalformedCheckpointError(
            f"Cannot read sidecar: {exc}", table=table, version=version, file=sidecar
        ) from None


def _is_arrow_error(exc: BaseException) -> bool:
    """An `ArrowException` (checked without importing pyarrow: only pyarrow can have raised one)."""
    return any(c.__name__ == "ArrowException" and c.__module__.startswith("pyarrow") for c in type(exc).__mro__)


#: A V2 checkpoint's sidecar to read: (path, size in bytes or None when unknown, name in the log).
SidecarRef = tuple[str, int | None, str]
#: Called with a V2 checkpoint's sidecars before they are read (the memory limit's check).
SidecarCheck = Callable[[list[SidecarRef]], None]


def checkpoint_sidecars(store: LogStore, log_dir: str, actions: Sequence[Action]) -> list[SidecarRef]:
    """The sidecars a V2 checkpoint's actions name, with their sizes: as logged (`sizeInBytes`), else
    from the store, else None. A sidecar the store cannot stat is left to the read, which reports it."""
    out: list[SidecarRef] = []
    for action in actions:
        if not isinstance(action, Sidecar):
            continue
        path = sidecar_path(store, log_dir, action.path)
        size: int | None = action.size_in_bytes
        if size <= 0:
            try:
                info = store.head(path)
            except (OSError, ValueError):
                info = None
            size = info.size if info is not None and info.size > 0 else None
        out.append((path, size, action.path))
    return out


class MemoryBudget:
    """One load's check against the local engine's memory limit (`memory_budget`): the segment's
    commits and checkpoint parts first, then a V2 checkpoint's sidecars as they are found. Footers
    are read unless file sizes rule the limit out by far; a footer that cannot be read is left out
    of the estimate (the read itself then reports the file)."""

    def __init__(self, limit: int, table: str, version: int, store: LogStore, non_file: Sequence[str]) -> None:
        self.limit = limit
        self.table = table
        self.version = version
        self.store = store
        self.non_file = non_file
        self.json_bytes = 0
        self.parquet: dict[str, int | None] = {}  # path -> file size (None: unknown)
        self.decoded: dict[str, int] = {}  # path -> decoded column bytes, once its footer was read

    def add(self, parquet: Sequence[tuple[str, int | None]], json_bytes: int = 0, *, file: str | None = None) -> None:
        """Count more files; raises `ResourceLimitError` when the load would exceed the limit."""
        self.json_bytes += json_bytes
        for path, size in parquet:
            self.parquet[path] = size
        sizes = list(self.parquet.values())
        if None not in sizes and upper_bound(sum(s or 0 for s in sizes), self.json_bytes) <= self.limit:
            return
        for path in self.parquet:
            if path not in self.decoded:
                got = self._footer_bytes(path)
                if got is not None:
                    self.decoded[path] = got
        needed = estimate(sum(self.decoded.values()), self.json_bytes)
        if needed > self.limit:
            raise over_limit(self.table, self.version, needed, self.limit, file=file)

    def sidecars(self, sidecars: list[SidecarRef]) -> None:
        self.add([(path, size) for path, size, _ in sidecars], file=sidecars[0][2] if len(sidecars) == 1 else None)

    def _footer_bytes(self, path: str) -> int | None:
        """Decoded column bytes from the file's footer (read from its end: a wrong logged size
        does not matter); None when the footer cannot be read."""
        try:
            with self.store.open(path) as fh:
                end = fh.seek(0, os.SEEK_END)
                fh.seek(end - 8)
                length = footer_length(fh.read(8))
                fh.seek(end - 8 - length)
                _, sizes = uncompressed_sizes(fh.read(length))
        except (OSError, ValueError, UnsupportedParquet):
            return None
        return decoded_bytes(sizes, self.non_file)


#: Checkpoints (all parts) under this many bytes are decoded in pure Python and held as actions.
ROW_STATE_MAX_BYTES = 4 * 1024 * 1024
#: The Arrow reader's default (`arrow_checkpoint.LAZY_STATS_BYTES`), repeated to keep pyarrow unimported.
_LAZY_STATS_BYTES = 4 * 1024 * 1024


class LocalEngine:
    """Replays the log in this process.

    Checkpoints under `row_state_max_bytes` (and tables without one) are read without pyarrow into
    a `RowFileState`; larger ones with pyarrow into a columnar `FileState` (`row_state_max_bytes=0`
    always takes the Arrow path). `plain=True` replays every action, checkpoint rows included,
    through `InMemoryLogReplay`: the reference path both are tested against (slow on large tables).
    `threaded=True` (the default) reads an Arrow checkpoint in a second thread while the commits
    after it are replayed; errors keep the sequential order (a commit's error, then the protocol
    check, then the checkpoint's).
    """

    name = "local"

    def __init__(
        self,
        *,
        plain: bool = False,
        lazy_stats_bytes: int = _LAZY_STATS_BYTES,
        threaded: bool = True,
        row_state_max_bytes: int = ROW_STATE_MAX_BYTES,
        memory_limit_bytes: int | Literal["auto"] | None = "auto",
    ) -> None:
        self.plain = plain
        self.lazy_stats_bytes = lazy_stats_bytes
        self.threaded = threaded
        self.row_state_max_bytes = row_state_max_bytes
        self.memory_limit_bytes = default_memory_limit() if memory_limit_bytes == "auto" else memory_limit_bytes

    def memory_budget(self, table: str, store: LogStore, segment: LogSegment) -> MemoryBudget | None:
        """The segment checked against `memory_limit_bytes` (None: no limit); raises
        `ResourceLimitError` before anything but footers is read when it would not fit."""
        if self.memory_limit_bytes is None:
            return None
        budget = MemoryBudget(self.memory_limit_bytes, table, segment.version, store, NON_FILE_COLUMNS)
        parts = segment.checkpoint.files if segment.checkpoint is not None else []
        json_bytes = sum(c.file.size for c in segment.commits)
        json_bytes += sum(p.file.size for p in parts if p.extension == "json")
        budget.add([(p.file.path, p.file.size) for p in parts if p.extension != "json"], json_bytes)
        return budget

    def read_checkpoint(
        self,
        table: str,
        log_dir: str,
        store: LogStore,
        checkpoint: CheckpointInstance,
        check_sidecars: SidecarCheck | None = None,
    ) -> CheckpointData:
        """Read every file of a complete checkpoint with pyarrow, following V2 sidecars."""
        from .arrow_checkpoint import read_checkpoint

        return read_checkpoint(table, log_dir, store, checkpoint, self.lazy_stats_bytes, check_sidecars)

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
        budget = self.memory_budget(table, store, segment)
        check = budget.sidecars if budget is not None else None
        if self.plain:
            return self._load_plain(table, log_dir, store, segment, check)
        checkpoint = segment.checkpoint
        if checkpoint is None or sum(f.file.size for f in checkpoint.files) < self.row_state_max_bytes:
            try:
                return self._load_rows(table, log_dir, store, segment, check)
            except (UnsupportedParquet, DuplicateFileKey, CheckpointTooLarge):
                pass  # a shape only pyarrow reads, a file named twice, large sidecars: the columnar path
        from ..file_state import adds_to_table, removes_to_table
        from .arrow_checkpoint import state_from_checkpoint

        pending: _Background[CheckpointData] | None = None
        if checkpoint is not None and segment.commits and self.threaded:
            # Parquet decoding releases the GIL: read the checkpoint while the commits are replayed.
            pending = _Background(lambda: self.read_checkpoint(table, log_dir, store, checkpoint, check))
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
            if pending is not None:
                cp = pending.result()
            else:
                cp = self.read_checkpoint(table, log_dir, store, checkpoint, check)
            if replay.current_protocol is None and cp.protocol is not None:
                check_can_read(cp.protocol, table=table, version=segment.version)
            base = state_from_checkpoint(checkpoint.version, cp)
        return base.apply(replay, infos, file_tables=tables)

    def _load_rows(
        self, table: str, log_dir: str, store: LogStore, segment: LogSegment, check: SidecarCheck | None
    ) -> TableState:
        """The load of a small table, without pyarrow: the checkpoint's files become actions."""
        from .row_checkpoint import read_checkpoint_rows

        replay, infos = self.replay_commits(table, store, segment.commits)
        if replay.current_protocol is not None:
            check_can_read(replay.current_protocol, table=table, version=segment.version)
        checkpoint = segment.checkpoint
        if checkpoint is None:
            base = TableState(-1, None, None, {}, {}, RowFileState.empty())
        else:
            cp = read_checkpoint_rows(table, log_dir, store, checkpoint, self.row_state_max_bytes, check)
            protocol = next((a for a in cp.actions if isinstance(a, Protocol)), None)
            if replay.current_protocol is None and protocol is not None:
                check_can_read(protocol, table=table, version=segment.version)
            files = RowFileState.from_checkpoint(cp.adds, cp.removes, cp.stats_loader)
            base = table_state_from_actions(checkpoint.version, cp.actions, files)
        return base.apply(replay, infos)

    def _load_plain(
        self, table: str, log_dir: str, store: LogStore, segment: LogSegment, check: SidecarCheck | None
    ) -> TableState:
        from ..file_state import FileState, iter_adds, iter_removes

        replay = InMemoryLogReplay()
        infos: dict[int, CommitInfo] = {}
        if segment.checkpoint is not None:
            cp = self.read_checkpoint(table, log_dir, store, segment.checkpoint, check)
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
        return TableState(-1, None, None, {}, {}, FileState.empty()).apply(replay, infos)

    def extend_state(
        self, table: str, log_dir: str, store: LogStore, state: TableState, segment: LogSegment
    ) -> TableState:
        new = [c for c in segment.commits if c.version > state.version]
        replay, infos = self.replay_commits(table, store, new)
        if replay.current_protocol is not None:
            check_can_read(replay.current_protocol, table=table, version=segment.version)
        return state.apply(replay, infos)
