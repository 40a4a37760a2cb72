"""VACUUM planning: which files under a table root are safe to delete (delta-writes.md section 6, P§12).

Pure: the snapshot's active files and tombstones, a listing, the cutoff and the mode come in, a
`VacuumPlan` comes out; `maintenance.vacuum` lists, plans, re-validates and deletes.

Never in a plan:

* an active file or its deletion-vector file (`u`: `<prefix>/deletion_vector_<uuid>.bin` under the root;
  `p`: an absolute path, protected when it lies under the root; `i`: inline, no file);
* a tombstone still within retention (`deletionTimestamp > cutoff`) or its DV file, whatever the mtime;
* anything under `_delta_log`, or with a hidden path component (a name starting with `_` or `.`), except
  names starting with `_change_data`, `_delta_index` or `<partition column>=` (Spark `isHiddenDirectory`);
* anything outside the table root (absolute paths of shallow clones) or with `..` components;
* in FULL mode, a listed file whose modification time is not older than the cutoff (in-flight writers).

Paths are compared decoded (percent-encoding decoded once; `+` stays literal, as in Delta's URI
decoding), NFC-normalized, without leading/trailing slashes.
"""

from __future__ import annotations

import datetime as dt
import unicodedata
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from ..errors import InvalidArgumentError
from .actions import DeletionVectorDescriptor

FULL, LITE = "full", "lite"
MODES = (FULL, LITE)
PLAN_FORMAT = "delta-vacuum-plan/1"
DV_FILE_CORE = "deletion_vector_"
_VISIBLE_PREFIXES = ("_change_data", "_delta_index")
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_INDEX = {c: i for i, c in enumerate(_Z85)}


def z85_decode(text: str) -> bytes:
    """Z85 (ZeroMQ RFC 32) decoding, as Delta encodes DV UUIDs (5 characters -> 4 bytes, big-endian)."""
    if len(text) % 5:
        raise InvalidArgumentError(f"Z85 text length must be a multiple of 5, got {len(text)}", argument="z85")
    out = bytearray()
    for i in range(0, len(text), 5):
        value = 0
        for ch in text[i : i + 5]:
            if ch not in _Z85_INDEX:
                raise InvalidArgumentError(f"Invalid Z85 character {ch!r}", argument="z85")
            value = value * 85 + _Z85_INDEX[ch]
        if value > 0xFFFFFFFF:
            raise InvalidArgumentError(f"Z85 block {text[i : i + 5]!r} overflows", argument="z85")
        out += value.to_bytes(4, "big")
    return bytes(out)


def dv_relative_path(dv: DeletionVectorDescriptor) -> str | None:
    """The table-relative file of a `u` deletion vector (`<prefix>/deletion_vector_<uuid>.bin`); None
    for other storage types (P§"Deletion Vector Descriptor Schema")."""
    if dv.storage_type != "u":
        return None
    encoded = dv.path_or_inline_dv
    if len(encoded) < 20:
        raise InvalidArgumentError(f"Deletion vector path {encoded!r} is shorter than a Z85 UUID", argument="dv")
    prefix, z85 = encoded[:-20], encoded[-20:]
    name = f"{DV_FILE_CORE}{uuid.UUID(bytes=z85_decode(z85))}.bin"
    return f"{prefix}/{name}" if prefix else name


def normalize_relative(path: str) -> str:
    """Comparable form of a relative path: NFC, no leading/trailing or doubled slashes, no `.` parts."""
    parts = [p for p in unicodedata.normalize("NFC", path).split("/") if p not in ("", ".")]
    return "/".join(parts)


def _comparable_root(uri: str) -> str:
    """A table root or absolute file URI in one form: `/abs` locally, `scheme://...` elsewhere, decoded."""
    text = unquote(uri)
    for prefix in ("file://localhost/", "file:///"):
        if text.startswith(prefix):
            return "/" + text[len(prefix) :]
    if text.startswith("file:/"):
        return "/" + text[len("file:/") :].lstrip("/")
    for alias in ("s3a://", "s3n://"):
        if text.startswith(alias):
            return "s3://" + text[len(alias) :]
    return text


def relative_to_root(path: str, table_root: str) -> str | None:
    """`path` as logged (URL-encoded relative, or absolute URI) as a normalized path relative to the
    table root; None when it lies outside the root or climbs out of it (`..`)."""
    if "://" in path or path.startswith("/") or path.startswith("file:"):
        root = normalize_relative(_comparable_root(table_root))
        absolute = normalize_relative(_comparable_root(path))
        if not absolute.startswith(root + "/"):
            return None
        rel = absolute[len(root) + 1 :]
    else:
        rel = normalize_relative(unquote(path))
    if not rel or any(p == ".." for p in rel.split("/")):
        return None
    return rel


def is_hidden(relative: str, partition_columns: Iterable[str] = ()) -> bool:
    """True when a component of `relative` is hidden from VACUUM (Spark `DeltaTableUtils.isHiddenDirectory`)."""
    allowed = tuple(f"{c}=" for c in partition_columns) + _VISIBLE_PREFIXES
    for part in relative.split("/"):
        if part.startswith(".") or (part.startswith("_") and not part.startswith(allowed)):
            return True
    return False


def partition_of(relative: str) -> str:
    """The directory holding a file (its partition for a `col=value` layout); `""` at the root."""
    return relative.rpartition("/")[0]


@dataclass(frozen=True, slots=True)
class LoggedFile:
    """A file the log names: path as logged, its DV, and for a tombstone its deletion time and size."""

    path: str
    deletion_vector: DeletionVectorDescriptor | None = None
    deletion_timestamp: int | None = None
    size: int | None = None


@dataclass(frozen=True, slots=True)
class ListedFile:
    """A file found in the table directory: path relative to the root (as stored), size, mtime in ms."""

    path: str
    size: int
    modification_time: int


@dataclass(frozen=True, slots=True)
class PlannedFile:
    path: str
    size: int

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size}


@dataclass
class VacuumPlan:
    """Files to delete, relative to `table` (decoded storage names), and what the plan was made from."""

    table: str
    version: int
    cutoff_ms: int
    retention_ms: int
    mode: str
    files: list[PlannedFile]
    protocol: dict[str, Any] = field(default_factory=dict)

    @property
    def num_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def cutoff(self) -> str:
        return dt.datetime.fromtimestamp(self.cutoff_ms / 1000, tz=dt.UTC).isoformat()

    def partitions(self) -> dict[str, dict[str, int]]:
        """Files and bytes per directory (partition), `""` for the root."""
        out: dict[str, dict[str, int]] = {}
        for f in self.files:
            entry = out.setdefault(partition_of(f.path), {"files": 0, "bytes": 0})
            entry["files"] += 1
            entry["bytes"] += f.size
        return dict(sorted(out.items()))

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable form; `from_dict` reads it back (plan now, apply later)."""
        return {
            "format": PLAN_FORMAT,
            "table": self.table,
            "version": self.version,
            "cutoff": self.cutoff,
            "cutoff_ms": self.cutoff_ms,
            "retention_ms": self.retention_ms,
            "mode": self.mode,
            "protocol": dict(self.protocol),
            "files": [f.to_dict() for f in self.files],
            "num_files": len(self.files),
            "bytes": self.num_bytes,
            "partitions": self.partitions(),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> VacuumPlan:
        """A plan from `to_dict` output (or a `VacuumResult.to_dict()` of a dry run)."""
        if not isinstance(d, Mapping):
            raise InvalidArgumentError(f"A vacuum plan must be a mapping, got {type(d).__name__}", argument="plan")
        try:
            files = [PlannedFile(str(f["path"]), int(f.get("size") or 0)) for f in d["files"]]
            mode = str(d["mode"])
            if mode not in MODES:
                raise ValueError(f"mode {mode!r}")
            return cls(
                table=str(d["table"]),
                version=int(d["version"]),
                cutoff_ms=int(d["cutoff_ms"]),
                retention_ms=int(d["retention_ms"]),
                mode=mode,
                files=files,
                protocol=dict(d.get("protocol") or {}),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidArgumentError(f"Not a vacuum plan: {type(exc).__name__}: {exc}", argument="plan") from exc


def _with_dvs(files: Iterable[LoggedFile], table_root: str) -> Iterable[str]:
    for f in files:
        rel = relative_to_root(f.path, table_root)
        if rel is not None:
            yield rel
        dv = f.deletion_vector
        if dv is None:
            continue
        if dv.storage_type == "u":
            yield normalize_relative(dv_relative_path(dv) or "")
        elif dv.storage_type == "p":
            dv_rel = relative_to_root(dv.path_or_inline_dv, table_root)
            if dv_rel is not None:
                yield dv_rel


def protected_paths(
    active: Iterable[LoggedFile], tombstones: Iterable[LoggedFile], *, cutoff_ms: int, table_root: str
) -> set[str]:
    """Normalized relative paths VACUUM must keep: active files, tombstones deleted after `cutoff_ms`,
    and the DV files of both."""
    recent = (t for t in tombstones if (t.deletion_timestamp or 0) > cutoff_ms)
    return set(_with_dvs(active, table_root)) | set(_with_dvs(recent, table_root))


def deletable(relative: str, protected: set[str], partition_columns: Sequence[str]) -> bool:
    """The never-rules on one normalized relative path (apart from mtime and retention of the listing)."""
    if not relative or any(p == ".." for p in relative.split("/")):
        return False
    if relative == "_delta_log" or relative.startswith("_delta_log/"):
        return False
    return (
        relative not in protected and not _dv_alias(relative, protected) and not is_hidden(relative, partition_columns)
    )


def _dv_alias(relative: str, protected: set[str]) -> bool:
    """True for `<dir>/<anything>deletion_vector_<uuid>.bin` when `<dir>/deletion_vector_<uuid>.bin` is
    protected: Delta's test-only file-name prefix (`test%dv%prefix-` in Spark's DeletionVectorsSuite)
    names live DV files that way; keeping them costs nothing."""
    directory, _, name = relative.rpartition("/")
    at = name.find(DV_FILE_CORE)
    if at <= 0:
        return False
    core = name[at:]
    return (f"{directory}/{core}" if directory else core) in protected


def plan_vacuum(
    *,
    table: str,
    version: int,
    mode: str,
    cutoff_ms: int,
    retention_ms: int,
    active: Iterable[LoggedFile],
    tombstones: Iterable[LoggedFile],
    listing: Iterable[ListedFile] | None,
    partition_columns: Sequence[str] = (),
    protocol: Mapping[str, Any] | None = None,
) -> VacuumPlan:
    """The plan for `table` at `version` (see the module doc for the rules).

    FULL: candidates are the `listing` (paths relative to the root as stored), older than `cutoff_ms`.
    LITE: candidates are the tombstones deleted at or before `cutoff_ms` and their DV files, from the
    log alone (`listing` unused); sizes come from the remove actions.
    """
    if mode not in MODES:
        raise InvalidArgumentError(f"mode must be one of {MODES}, got {mode!r}", argument="mode", table=table)
    tombstones = list(tombstones)
    protected = protected_paths(active, tombstones, cutoff_ms=cutoff_ms, table_root=table)
    chosen: dict[str, PlannedFile] = {}
    if mode == FULL:
        if listing is None:
            raise InvalidArgumentError("FULL mode needs a listing", argument="listing", table=table)
        for item in listing:
            rel = normalize_relative(item.path)
            if item.modification_time >= cutoff_ms or rel in chosen:
                continue
            if deletable(rel, protected, partition_columns):
                chosen[rel] = PlannedFile(item.path.strip("/"), item.size)
    else:
        for t in tombstones:
            if (t.deletion_timestamp or 0) > cutoff_ms:
                continue
            for rel in _with_dvs([LoggedFile(t.path, t.deletion_vector)], table):
                if rel not in chosen and deletable(rel, protected, partition_columns):
                    size = t.size if rel == relative_to_root(t.path, table) else None
                    chosen[rel] = PlannedFile(rel, size or 0)
    files = sorted(chosen.values(), key=lambda f: f.path)
    return VacuumPlan(table, version, cutoff_ms, retention_ms, mode, files, dict(protocol or {}))


def revalidate(
    plan: VacuumPlan,
    *,
    active: Iterable[LoggedFile],
    tombstones: Iterable[LoggedFile],
    cutoff_ms: int,
    partition_columns: Sequence[str] = (),
) -> tuple[list[PlannedFile], list[PlannedFile]]:
    """Split `plan.files` into (still deletable, dropped) against a newer snapshot: a file active again,
    tombstoned after `cutoff_ms`, or breaking a never-rule (a hand-edited plan) is dropped."""
    protected = protected_paths(active, tombstones, cutoff_ms=cutoff_ms, table_root=plan.table)
    keep: list[PlannedFile] = []
    dropped: list[PlannedFile] = []
    for f in plan.files:
        rel = normalize_relative(f.path)
        ok = not f.path.startswith("/") and "://" not in f.path and deletable(rel, protected, partition_columns)
        (keep if ok else dropped).append(f)
    return keep, dropped
