"""Reversible VACUUM: the pure rules of a quarantine (`maintenance.quarantine` does the I/O).

`vacuum(..., quarantine=True)` moves the files it would delete into a folder under the table root that
VACUUM never lists (a leading `_`: Spark `DeltaTableUtils.isHiddenDirectory`), instead of deleting them:

    _delta_quarantine/<id>/manifest.json       written first, never changed (put_if_absent)
    _delta_quarantine/<id>/files/<path>        each quarantined file, at its path relative to the root
    _delta_quarantine/<id>/quarantined.json    every move done (the forward completion marker)
    _delta_quarantine/<id>/undo.json           an undo started: from now on moves go back
    _delta_quarantine/<id>/restored.json       every file back (the undo's completion marker)
    _delta_quarantine/<id>/purge.json          a purge started: undo is refused from now on

`<id>` is `YYYYMMDDTHHMMSSZ-<8 hex digits>`, so ids sort by age. The manifest (`Manifest.to_json`) lists
each file with its size and listed mtime. The markers present give the state (`state_of`) and so the
direction an interrupted run finishes in: without `undo.json` forward, with it back.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidArgumentError, QuarantineError
from .leases import iso_seconds, json_record, non_negative
from .table_properties import parse_duration_ms
from .vacuum import FILE, PlannedFile, StoredEntry, same_mtime

#: The quarantine folder, directly under the table root (hidden from VACUUM: a leading `_`).
QUARANTINE_DIR_NAME = "_delta_quarantine"
QUARANTINE_FORMAT = "delta-quarantine/1"
MANIFEST_NAME = "manifest.json"
FILES_DIR = "files"
QUARANTINED_MARKER = "quarantined.json"
UNDO_MARKER = "undo.json"
RESTORED_MARKER = "restored.json"
PURGE_MARKER = "purge.json"
MARKERS = (QUARANTINED_MARKER, UNDO_MARKER, RESTORED_MARKER, PURGE_MARKER)

#: How a store moves a file (`LogStore.move_method`): one atomic rename, or a copy then a delete.
RENAME, COPY_DELETE = "rename", "copy+delete"
METHODS = (RENAME, COPY_DELETE)

#: The states of a quarantine (`state_of`).
MOVING, QUARANTINED, RESTORING, RESTORED, PURGING = "moving", "quarantined", "restoring", "restored", "purging"
#: States a run was interrupted in: resume (forward) or undo (back) settles them.
UNFINISHED = (MOVING, RESTORING)

#: What to do with one file (`forward_step`, `undo_step`).
MOVE = "move"  # move it (forward: into the quarantine; undo: back to its path)
FINISH = "finish"  # both copies are there (a copy+delete interrupted): delete the one left behind
DONE = "done"  # already where it goes
MISSING = "missing"  # at neither path
CONFLICT = "conflict"  # something else is at the path it goes to
CHANGED = "changed"  # forward only: the file at its path is not the one the manifest names (size, mtime)

_ID = re.compile(r"\d{8}T\d{6}Z-[0-9a-f]{8}")
#: S3 copies an object of up to 5 GiB in one request; s3fs copies a bigger one in parts of 50 MiB.
_SINGLE_COPY_MAX = 5 * 2**30
_COPY_PART = 50 * 2**20


def new_quarantine_id(now_ms: int, token: str) -> str:
    """A quarantine id: the time `now_ms` (UTC, to the second) and `token` (8 hex digits, random)."""
    when = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=now_ms)
    return check_quarantine_id(f"{when:%Y%m%dT%H%M%S}Z-{token.lower()}")


def check_quarantine_id(value: Any) -> str:
    """A quarantine id as `new_quarantine_id` makes them, else `InvalidArgumentError` (a folder name: no
    `/` nor `..` may reach the store)."""
    if not isinstance(value, str) or _ID.fullmatch(value.strip()) is None:
        raise InvalidArgumentError(
            f"quarantine_id must look like 20250101T120000Z-1a2b3c4d (from the VACUUM result), got {value!r}",
            argument="quarantine_id",
        )
    return value.strip()


def is_quarantine_id(name: str) -> bool:
    return _ID.fullmatch(name) is not None


def quarantine_dir(quarantine_id: str) -> str:
    """The quarantine's folder, relative to the table root."""
    return f"{QUARANTINE_DIR_NAME}/{quarantine_id}"


def files_dir(quarantine_id: str) -> str:
    """Where the quarantine's files are, relative to the table root."""
    return f"{QUARANTINE_DIR_NAME}/{quarantine_id}/{FILES_DIR}"


def quarantined_path(quarantine_id: str, path: str) -> str:
    """Where the file at `path` (relative to the table root) is while quarantined, relative to the root."""
    return f"{files_dir(quarantine_id)}/{path.strip('/')}"


#: One file of a quarantine: its path relative to the table root (as stored), size, mtime (ms) as listed.
QuarantinedFile = PlannedFile


@dataclass(frozen=True)
class Manifest:
    """What a quarantine holds and where it came from."""

    id: str
    table: str
    table_id: str | None
    version: int
    created_ms: int
    method: str
    files: tuple[QuarantinedFile, ...]
    mode: str = "full"
    cutoff_ms: int = 0
    retention_ms: int = 0
    audit_version: int | None = None

    @property
    def num_files(self) -> int:
        return len(self.files)

    @property
    def num_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": QUARANTINE_FORMAT,
            "id": self.id,
            "table": self.table,
            "table_id": self.table_id,
            "version": self.version,
            "created": self.created_ms,
            "created_at": iso_seconds(self.created_ms),
            "method": self.method,
            "mode": self.mode,
            "cutoff_ms": self.cutoff_ms,
            "retention_ms": self.retention_ms,
            "audit_version": self.audit_version,
            "num_files": self.num_files,
            "bytes": self.num_bytes,
            "files": [f._asdict() for f in self.files],
        }

    def to_bytes(self) -> bytes:
        return (json.dumps(self.to_json(), separators=(",", ":")) + "\n").encode()

    def summary(self) -> dict[str, Any]:
        """The manifest without its file list (results, `list_quarantines`)."""
        return {k: v for k, v in self.to_json().items() if k not in ("format", "files")}


def parse_manifest(data: bytes | str, *, quarantine_id: str, table: str | None = None) -> Manifest:
    """The manifest read from folder `quarantine_id`; anything else is a `QuarantineError` naming the file
    (no move is made from a guess)."""
    name = f"{quarantine_dir(quarantine_id)}/{MANIFEST_NAME}"
    try:
        obj = json_record(data, QUARANTINE_FORMAT)
        if obj.get("id") != quarantine_id:
            raise ValueError(f"id {obj.get('id')!r} differs from its folder")
        if obj.get("method") not in METHODS:
            raise ValueError(f"method {obj.get('method')!r}")
        table_id = obj.get("table_id")
        if table_id is not None and not isinstance(table_id, str):
            raise ValueError(f"table_id {table_id!r}")
        raw_files = obj.get("files")
        if not isinstance(raw_files, list):
            raise ValueError("files must be a list")
        files = []
        for f in raw_files:
            if not isinstance(f, Mapping) or not isinstance(f.get("path"), str) or not f["path"].strip("/"):
                raise ValueError(f"file entry {f!r}")
            path = f["path"]
            if path.startswith("/") or "://" in path or ".." in path.split("/"):
                raise ValueError(f"file path {path!r} is not relative to the table root")
            files.append(
                QuarantinedFile(path, non_negative(f, "size") or 0, non_negative(f, "modification_time", optional=True))
            )
        return Manifest(
            id=quarantine_id,
            table=str(obj.get("table") or ""),
            table_id=table_id,
            version=non_negative(obj, "version") or 0,
            created_ms=non_negative(obj, "created") or 0,
            method=obj["method"],
            files=tuple(files),
            mode=str(obj.get("mode") or "full"),
            cutoff_ms=non_negative(obj, "cutoff_ms", optional=True) or 0,
            retention_ms=non_negative(obj, "retention_ms", optional=True) or 0,
            audit_version=non_negative(obj, "audit_version", optional=True),
        )
    except ValueError as exc:
        raise QuarantineError(
            f"Quarantine file {name} is not valid ({exc}): nothing was moved; fix or remove the quarantine by hand",
            quarantine_id=quarantine_id,
            table=table,
            file=name,
        ) from None


def marker_bytes(kind: str, quarantine_id: str, now_ms: int, **counts: Any) -> bytes:
    """A marker file's content: which marker, the quarantine, when, and what the run counted."""
    if kind not in MARKERS:
        raise ValueError(kind)
    body = {
        "format": QUARANTINE_FORMAT,
        "marker": kind,
        "id": quarantine_id,
        "time": now_ms,
        "time_at": iso_seconds(now_ms),
    }
    return (json.dumps({**body, **counts}, separators=(",", ":"), default=list) + "\n").encode()


def state_of(markers: Iterable[str]) -> str:
    """The state of a quarantine whose folder holds the marker files `markers` (names)."""
    present = set(markers)
    latest_first = (
        (PURGE_MARKER, PURGING),
        (RESTORED_MARKER, RESTORED),
        (UNDO_MARKER, RESTORING),
        (QUARANTINED_MARKER, QUARANTINED),
    )
    return next((state for marker, state in latest_first if marker in present), MOVING)


def _is_file(entry: StoredEntry | None) -> bool:
    return entry is not None and entry.kind == FILE


def forward_step(
    entry: QuarantinedFile, original: StoredEntry | None, quarantined: StoredEntry | None, *, method: str
) -> str:
    """What resuming a `moving` quarantine does with `entry`, given what storage holds at its path and in
    the quarantine: at its path only, `MOVE` if unchanged (size, mtime) else `CHANGED`; quarantined only,
    `DONE`; neither, `MISSING`; both, `FINISH` on a copy+delete store when the copy has the manifest's size
    (an object store's copy is atomic: only the delete was cut off), else `CONFLICT`."""
    here, there = _is_file(original), _is_file(quarantined)
    if here and not there:
        if quarantined is not None:  # a directory or another non-file at the quarantine path
            return CONFLICT
        assert original is not None
        if original.size != entry.size or (
            entry.modification_time is not None and not same_mtime(entry.modification_time, original.modification_time)
        ):
            return CHANGED
        return MOVE
    if there and not here:
        return DONE
    if not here and not there:
        return MISSING
    assert quarantined is not None
    if method == COPY_DELETE and quarantined.size == entry.size:
        return FINISH
    return CONFLICT


def undo_step(
    entry: QuarantinedFile,
    original: StoredEntry | None,
    quarantined: StoredEntry | None,
    *,
    method: str,
    interrupted: bool,
) -> str:
    """What an undo does with `entry`: quarantined only, `MOVE` back; at its path only, `DONE`; neither,
    `MISSING`; both, `FINISH` (drop the quarantined copy) only on a copy+delete store after an `interrupted`
    run with both copies of the manifest's size, else `CONFLICT` (nothing is moved over it)."""
    here, there = _is_file(original), _is_file(quarantined)
    if there and original is None:
        return MOVE
    if here and not there:
        return DONE
    if original is None and quarantined is None:
        return MISSING
    if here and there and method == COPY_DELETE and interrupted:
        assert original is not None and quarantined is not None
        if original.size == quarantined.size == entry.size:
            return FINISH
    return CONFLICT


def move_cost(sizes: Sequence[int], *, method: str) -> dict[str, Any]:
    """The estimated storage calls and bytes copied to move files of `sizes`: `rename` costs an existence
    check and a rename a file; `copy+delete` a HEAD of each side, a server-side copy (over 5 GiB a multipart
    copy in 50 MiB parts, plus create and complete) and a delete. Plus the manifest, marker and listing."""
    if method not in METHODS:
        raise InvalidArgumentError(f"method must be one of {METHODS}, got {method!r}", argument="method")
    n, total = len(sizes), sum(sizes)
    if method == RENAME:
        requests, copied = 2 * n, 0
    else:
        copies = sum(1 if s <= _SINGLE_COPY_MAX else 2 + math.ceil(s / _COPY_PART) for s in sizes)
        requests, copied = 3 * n + copies, total
    return {"method": method, "files": n, "bytes": total, "bytes_copied": copied, "requests": requests + 3}


def parse_age_ms(value: Any, argument: str = "older_than") -> int:
    """An age in ms (`table_properties.parse_duration_ms`): 0 or more."""
    return parse_duration_ms(value, argument)


def purge_skip(manifest: Manifest, state: str, *, now_ms: int, older_than_ms: int) -> str | None:
    """Why a purge leaves a quarantine alone (too young, or unfinished: resume or undo it first), or None."""
    if manifest.created_ms > now_ms - older_than_ms:
        return "younger than the age given"
    if state in UNFINISHED:
        return f"unfinished ({state}): resume or undo it first"
    return None


@dataclass
class Settled:
    """What one run over a quarantine's files did, by outcome (paths)."""

    moved: list[str] = field(default_factory=list)
    moved_bytes: int = 0
    finished: list[str] = field(default_factory=list)
    done: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, Any]:
        return {
            "moved": len(self.moved),
            "moved_bytes": self.moved_bytes,
            "finished": len(self.finished),
            "already_in_place": len(self.done),
            "missing": list(self.missing),
            "kept": list(self.kept),
            "conflicts": list(self.conflicts),
        }
