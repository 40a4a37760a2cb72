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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..actions import (
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
    action_from_json,
)
from ..errors import DeltaError, MalformedCheckpointError, MalformedCommitError, StorageError
from ..file_state import (
    ADD_SCHEMA,
    REMOVE_SCHEMA,
    FileState,
    adds_to_table,
    conform_table,
    iter_adds,
    iter_removes,
    removes_to_table,
)
from ..filenames import SIDECAR_DIR_NAME, LogFileKind, ParsedLogPath
from ..log_segment import CheckpointInstance, LogSegment
from ..replay import InMemoryLogReplay
from ..storage import LogStore
from ..table_features import check_can_read
from ..table_state import TableState

_NON_FILE_COLUMNS = ("protocol", "metaData", "txn", "domainMetadata", "checkpointMetadata", "sidecar")


def parse_commit_bytes(data: bytes, *, table: str, version: int, file: str) -> list[dict[str, Any]]:
    """The JSON objects of a newline-delimited commit, in order; a bad line is a typed error."""
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
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            raise MalformedCommitError(
                f"Invalid action {sorted(obj)}: {exc}", table=table, version=commit.version, file=commit.name
            ) from None
        if action is not None:
            out.append(action)
    return out


@dataclass
class CheckpointData:
    """A checkpoint's content: non-file actions as objects, file actions as Arrow tables."""

    actions: list[Action]
    adds: pa.Table
    removes: pa.Table

    @property
    def protocol(self) -> Protocol | None:
        return next((a for a in self.actions if isinstance(a, Protocol)), None)


def _read_parquet(store: LogStore, path: str, columns: Sequence[str] | None = None) -> pa.Table:
    with store.open(path) as fh:
        pf = pq.ParquetFile(fh)
        present = set(pf.schema_arrow.names)
        wanted = [c for c in (columns or pf.schema_arrow.names) if c in present]
        if not wanted:
            return pa.table({})
        return pf.read(columns=wanted)


def _file_actions(table: pa.Table, name: str, schema: pa.Schema) -> pa.Table:
    if name not in table.column_names:
        return schema.empty_table()
    col = table.column(name)
    if pa.types.is_null(col.type) or col.null_count == len(col):
        return schema.empty_table()
    if not pa.types.is_struct(col.type):
        raise ValueError(f"column {name!r} has type {col.type}, expected a struct")
    if col.type.get_field_index("path") < 0:
        raise ValueError(f"column {name!r} has no 'path' field")
    path = pc.struct_field(col, "path")
    col = col.filter(pc.is_valid(path))
    child_names = {col.type.field(i).name for i in range(col.type.num_fields)}
    if "stats" not in child_names and "stats_parsed" in child_names and len(col):
        # Old writers may keep only struct stats; render them as the JSON the protocol defines.
        rows = col.to_pylist()
        return pa.Table.from_pylist(
            [action_from_json({name: r}).to_json() for r in rows],  # type: ignore[union-attr]
            schema=schema,
        )
    return conform_table(col, schema)


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
        valid = col.filter(pc.is_valid(col))
        for row in valid.to_pylist():
            if row is None:
                continue
            action = action_from_json({name: row})
            if action is not None:
                out.append(action)
    return out


class LocalEngine:
    """Replays the log in this process with pyarrow.

    `plain=True` replays every action, checkpoint rows included, through `InMemoryLogReplay`: the
    reference path the columnar fast path is tested against (slow on large tables).
    """

    name = "local"

    def __init__(self, *, plain: bool = False) -> None:
        self.plain = plain

    def read_checkpoint(
        self, table: str, log_dir: str, store: LogStore, checkpoint: CheckpointInstance
    ) -> CheckpointData:
        """Read every file of a complete checkpoint, following V2 sidecars."""
        actions: list[Action] = []
        adds: list[pa.Table] = []
        removes: list[pa.Table] = []
        for part in checkpoint.files:
            name = part.name
            try:
                if part.extension == "json":
                    objs = parse_commit_bytes(
                        store.read_bytes(part.file.path), table=table, version=checkpoint.version, file=name
                    )
                    parsed = [a for a in (action_from_json(o) for o in objs) if a is not None]
                    actions.extend(a for a in parsed if not isinstance(a, AddFile | RemoveFile))
                    adds.append(adds_to_table(a for a in parsed if isinstance(a, AddFile)))
                    removes.append(removes_to_table(a for a in parsed if isinstance(a, RemoveFile)))
                else:
                    data = _read_parquet(store, part.file.path)
                    actions.extend(_non_file_actions(data))
                    adds.append(_file_actions(data, "add", ADD_SCHEMA))
                    removes.append(_file_actions(data, "remove", REMOVE_SCHEMA))
            except DeltaError:
                raise
            except FileNotFoundError:
                raise MalformedCheckpointError(
                    "Checkpoint file listed but missing", table=table, version=checkpoint.version, file=name
                ) from None
            except (PermissionError, ConnectionError, TimeoutError) as exc:
                raise StorageError(
                    f"Cannot read checkpoint: {type(exc).__name__}: {exc}",
                    table=table,
                    version=checkpoint.version,
                    file=name,
                    transient=not isinstance(exc, PermissionError),
                ) from None
            except (OSError, pa.ArrowException, ValueError, KeyError, TypeError, AttributeError, OverflowError) as exc:
                raise MalformedCheckpointError(
                    f"Cannot read checkpoint: {exc}", table=table, version=checkpoint.version, file=name
                ) from None
        for sidecar in [a for a in actions if isinstance(a, Sidecar)]:
            path = self._sidecar_path(store, log_dir, sidecar.path)
            try:
                data = _read_parquet(store, path, ["add", "remove"])
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
        return CheckpointData(actions, pa.concat_tables(adds), pa.concat_tables(removes))

    @staticmethod
    def _sidecar_path(store: LogStore, log_dir: str, path: str) -> str:
        if "://" in path or path.startswith("/"):
            return path
        return store.join(log_dir, SIDECAR_DIR_NAME, path)

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
        replay, infos = self.replay_commits(table, store, segment.commits)
        if replay.current_protocol is not None:
            check_can_read(replay.current_protocol, table=table, version=segment.version)
        base = TableState.empty()
        if segment.checkpoint is not None:
            cp = self.read_checkpoint(table, log_dir, store, segment.checkpoint)
            if replay.current_protocol is None and cp.protocol is not None:
                check_can_read(cp.protocol, table=table, version=segment.version)
            base = _state_from_checkpoint(segment.checkpoint.version, cp)
        return base.apply(replay, infos)

    def _load_plain(self, table: str, log_dir: str, store: LogStore, segment: LogSegment) -> TableState:
        replay = InMemoryLogReplay()
        infos: dict[int, CommitInfo] = {}
        if segment.checkpoint is not None:
            cp = self.read_checkpoint(table, log_dir, store, segment.checkpoint)
            actions: list[Action] = [*cp.actions, *iter_adds(cp.adds), *iter_removes(cp.removes)]
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
    return TableState(version, protocol, metadata, txns, domains, FileState(cp.adds, cp.removes))
