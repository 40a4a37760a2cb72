"""The local engine's checkpoint writer: publishes with `put_if_absent` (sidecars first, then the top-level
file; PROTOCOL.md "V2 Spec") and proves the files before anything points at them (`_verify`)."""

from __future__ import annotations

import uuid
import zlib
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..errors import CheckpointMismatchError, DeltaError
from ..protocol.actions import Action
from ..protocol.checkpoints import CheckpointPlan, non_file_state, sidecar_name, sidecar_ranges, v2_checkpoint_name
from ..protocol.filenames import SIDECAR_DIR_NAME, FileInfo, LogFileKind, ParsedLogPath
from ..protocol.log_segment import CheckpointInstance
from ..read.checkpoint import CheckpointData, read_checkpoint
from ..storage import LogStore
from ..write.checkpoint_file import (
    ADD_FIELDS,
    REMOVE_FIELDS,
    CheckpointResult,
    checkpoint_parquet,
    existing_result,
    kept_tombstones,
    stored_digest,
)

if TYPE_CHECKING:  # pragma: no cover
    from ..snapshot import Snapshot


class LocalCheckpointWriter:
    """Writes the whole checkpoint from this process (it holds the file list)."""

    def write(self, snapshot: Snapshot, plan: CheckpointPlan, actions: list[Action]) -> CheckpointResult:
        store, log_dir, table = snapshot.store, snapshot.log_dir, snapshot.table
        top = store.join(log_dir, plan.name or v2_checkpoint_name(plan.version, str(uuid.uuid4())))
        existing = store.head(top) if plan.name else None
        if existing is not None:
            return existing_result(snapshot, plan, actions, existing.path, existing.size)
        content = _Content(actions, snapshot.add_files_table, kept_tombstones(snapshot.remove_files_table, plan))
        with ThreadPoolExecutor(max_workers=1) as pool:  # decodes what was produced while it is stored
            try:
                num_sidecars, size = _publish(store, log_dir, top, plan, content, pool=pool, table=table)
                _verify(snapshot, store, top, plan, content)
            except BaseException as exc:  # nothing this call created stays behind (unreferenced sidecars included)
                store.delete_many(content.written[::-1])
                if isinstance(exc, FileExistsError) and top not in content.written:  # a racing writer was first
                    info = store.head(top)
                    return existing_result(snapshot, plan, actions, top, info.size if info else 0)
                raise
        return CheckpointResult(
            version=plan.version,
            kind=plan.kind,
            path=top,
            sidecars=tuple(content.written[:num_sidecars]),
            num_actions=content.num_actions + (1 + num_sidecars if plan.kind == "v2" else 0),
            num_add_files=content.adds.num_rows,
            num_tombstones=content.removes.num_rows,
            size_in_bytes=size,
            last_checkpoint_updated=False,
        )


@dataclass
class _Content:
    """The rows of one checkpoint: non-file actions as objects, file actions as Arrow tables."""

    actions: list[Action]
    adds: pa.Table
    removes: pa.Table
    written: list[str] = field(default_factory=list)  # paths this write created, in order
    digests: dict[str, tuple[int, int]] = field(default_factory=dict)  # path -> (length, CRC-32) written
    produced: dict[str, bytes] = field(default_factory=dict)  # path -> the bytes put there
    read_back: Future[CheckpointData] | None = None  # this library reading `produced` (started early)

    @property
    def num_actions(self) -> int:
        return len(self.actions) + self.adds.num_rows + self.removes.num_rows


def _publish(
    store: LogStore,
    log_dir: str,
    top: str,
    plan: CheckpointPlan,
    content: _Content,
    *,
    pool: Executor,
    table: str,
) -> tuple[int, int]:
    """Write sidecars then the top-level file; (number of sidecars, total bytes). The reader starts on the
    produced bytes (on `pool`) while the top-level file is stored (`_verify` proves they are stored)."""
    files = content.adds.num_rows + content.removes.num_rows
    parts = plan.num_sidecars(files)
    sidecars: list[dict[str, Any]] = []
    size = 0
    if parts:
        stamp = str(uuid.uuid4())
        for part, (start, stop) in enumerate(sidecar_ranges(files, parts), start=1):
            name = sidecar_name(plan.version, part, parts, stamp)
            path = store.join(log_dir, SIDECAR_DIR_NAME, name)
            adds, removes = _file_slice(content, start, stop)
            data = checkpoint_parquet(plan, adds, removes, sidecar_file=True)
            content.produced[path] = data
            _put(store, path, data, content)
            info = store.head(path)
            mtime = info.modification_time if info is not None else 0
            sidecars.append({"path": name, "sizeInBytes": len(data), "modificationTime": mtime})
            size += len(data)
    adds, removes = _file_slice(content, 0, 0 if parts else files)
    data = checkpoint_parquet(plan, adds, removes, actions=content.actions, sidecars=sidecars)
    content.produced[top] = data
    content.read_back = pool.submit(_read_back, table, log_dir, store, top, plan, content.produced)
    _put(store, top, data, content)
    return len(sidecars), size + len(data)


def _file_slice(content: _Content, start: int, stop: int) -> tuple[pa.Table, pa.Table]:
    """Rows `start:stop` of (adds, then tombstones), as the two tables."""
    n_adds = content.adds.num_rows
    adds = content.adds.slice(min(start, n_adds), max(min(stop, n_adds) - start, 0))
    lo, hi = max(start - n_adds, 0), max(stop - n_adds, 0)
    return adds, content.removes.slice(lo, max(hi - lo, 0))


def _put(store: LogStore, path: str, data: bytes, content: _Content) -> None:
    """Create `path` (never replacing a file) and remember what was written, for verification."""
    store.put_if_absent(path, data)
    content.written.append(path)
    content.digests[path] = (len(data), zlib.crc32(data))


def _diff(name: str, got: pa.Table, want: pa.Table, columns: Sequence[str]) -> list[str]:
    if got.num_rows != want.num_rows:
        return [f"{name}: {got.num_rows} rows, expected {want.num_rows}"]
    return [f"{name}.{c}" for c in columns if not got.column(c).equals(want.column(c))]


class _Produced:
    """A read-only view of storage in which the files this call produced read from memory."""

    def __init__(self, store: LogStore, produced: Mapping[str, bytes]) -> None:
        self.store, self.produced = store, produced

    def open(self, path: str) -> Any:
        data = self.produced.get(path)
        return self.store.open(path) if data is None else pa.BufferReader(data)

    def read_bytes(self, path: str) -> bytes:
        data = self.produced.get(path)
        return self.store.read_bytes(path) if data is None else data

    def head(self, path: str) -> FileInfo | None:
        data = self.produced.get(path)
        return self.store.head(path) if data is None else FileInfo(path, len(data), 0)

    def join(self, base: str, *parts: str) -> str:
        return self.store.join(base, *parts)


def _read_back(
    table: str, log_dir: str, store: LogStore, top: str, plan: CheckpointPlan, produced: Mapping[str, bytes]
) -> CheckpointData:
    """This library's reader on the checkpoint at `top` (sidecars followed), its produced files from memory."""
    view = _Produced(store, produced)
    info = view.head(top)
    if info is None:
        raise CheckpointMismatchError("The published checkpoint is missing", table=table, file=top.rsplit("/", 1)[-1])
    kind = LogFileKind.CHECKPOINT_CLASSIC if plan.name else LogFileKind.CHECKPOINT_UUID
    uid = None if plan.name else info.name.split(".")[2]
    instance = CheckpointInstance(
        plan.version, kind, (ParsedLogPath(info, plan.version, kind, uid, extension="parquet"),)
    )
    return read_checkpoint(table, log_dir, view, instance, lazy_stats_bytes=0)  # type: ignore[arg-type]


def _verify(snapshot: Snapshot, store: LogStore, top: str, plan: CheckpointPlan, content: _Content) -> None:
    """Check the published checkpoint before anything points at it: every file written reads back with
    the length and CRC-32 produced (a torn upload, delta-rs #4433, fails here), and this library's reader
    on those bytes gives, row by row, the state it was written from (the stats string aside: its bytes
    were just checked)."""
    name = top.rstrip("/").rsplit("/", 1)[-1]
    if store.head(top) is None:
        raise CheckpointMismatchError("The published checkpoint is missing", table=snapshot.table, file=name)
    problems = [
        f"bytes of {p.rsplit('/', 1)[-1]}" for p in content.digests if content.digests[p] != stored_digest(store, p)
    ]
    error: DeltaError | None = None
    try:
        if content.read_back is not None:
            data = content.read_back.result()
        else:
            data = _read_back(snapshot.table, snapshot.log_dir, store, top, plan, content.produced)
    except DeltaError as exc:
        error = exc
    if problems or error is not None:
        what = f"stored differs from the one written ({', '.join(problems)})" if problems else "cannot be read back"
        detail = f" ({error.message})" if error is not None else ""
        raise CheckpointMismatchError(
            f"The checkpoint {what}{detail}; it was deleted", table=snapshot.table, version=plan.version, file=name
        ) from error
    got, want = non_file_state(data.actions), non_file_state(content.actions)
    problems = [key for key in want if got[key] != want[key]]
    problems += _diff("add", data.adds, content.adds, [c for c in ADD_FIELDS if c != "dataChange"])
    problems += _diff("remove", data.removes, content.removes, [c for c in REMOVE_FIELDS if c != "dataChange"])
    if problems:
        raise CheckpointMismatchError(
            f"The checkpoint read back differs from the replayed state in {', '.join(problems)}; it was deleted",
            table=snapshot.table,
            version=plan.version,
            file=name,
        )
