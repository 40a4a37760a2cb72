"""VACUUM planning: which files under a table root are safe to delete (delta-writes.md section 6, P§12).

Pure: the snapshot's active files and tombstones, a listing, the cutoff and the mode come in, a
`VacuumPlan` comes out; `maintenance.vacuum` lists, plans, re-validates and deletes. The Spark engine
(`engines.spark.vacuum`) applies the same rules without a plan in memory: the per-row ones
(`listed_candidate`, `plan_entry_relative`, `dv_alias_key`) where the rows are, the protected set
(`protected_paths`) as a join.

Never in a plan:

* an active file or its deletion-vector file (`u`: `<prefix>/deletion_vector_<uuid>.bin` under the root;
  `p`: an absolute path, protected when it lies under the root; `i`: inline, no file);
* a tombstone still within retention (`deletionTimestamp > cutoff`) or its DV file, whatever the mtime;
* anything under `_delta_log`, or with a hidden path component (a name starting with `_` or `.`), except
  names starting with `_change_data`, `_delta_index` or `<partition column>=` (Spark `isHiddenDirectory`);
* anything outside the table root (absolute paths of shallow clones) or with `..` components;
* in FULL mode, a listed file whose modification time is not older than the cutoff (in-flight writers);
* an untracked file (neither active nor a tombstone of the snapshot, nor the DV file of one) younger than
  the untracked grace period (`within_grace`; one hour by default, whatever the retention): a writer's
  data file written but not committed yet is untracked, and a retention of 0 hours (with the override)
  would otherwise delete it before its commit lands. Tombstones are tracked: retention alone decides.

Apply re-checks a plan against the table as it is then (P§12: a file a version within retention needs is
never deleted; the plan is only a proposal made earlier). A plan carries the evidence of its listing:
each entry's size and modification time as listed (`PlannedFile`). `refused_entry` names the entries no
planner writes (absolute paths, other buckets, `..`, `_delta_log`): one of them, or a plan for another
table, refuses the whole plan (`VacuumPlanRefusedError`) before anything is deleted. Every other entry is
kept only when `recheck` finds the file as it is now unchanged (same size and modification time), still
a regular file, older than the cutoff and, when untracked, than the grace period; `revalidate` adds the
name rules, the protected set of the latest snapshot and duplicates. What is dropped is reported with its
reason (`DROP_REASONS`); a file no longer there is reported as missing, never counted as deleted.

Paths are compared decoded (percent-encoding decoded once; `+` stays literal, as in Delta's URI
decoding), NFC-normalized, without leading/trailing slashes. Most paths need none of that: a logged path
matching `SIMPLE_PATH_PATTERN` (printable ASCII, no `%`, no `:`, clean slashes) is its own comparable
form, and a listed ASCII name needs no normalization.

A FULL plan is made in two steps over a listing (`plan_vacuum` runs both): the rules on names first
(`subdirectory_key` prunes directories, `unprotected_names` / `listed_key` drop hidden and protected
files), so that only the remaining files need a size and a modification time; then `plan_candidates`
applies the cutoff to those. `protected_from_logged` builds the protected set from logged paths and DV
descriptors as plain lists (`maintenance.vacuum` reads them from the snapshot's Arrow columns).
"""

from __future__ import annotations

import datetime as dt
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, NamedTuple
from urllib.parse import unquote

from ..errors import ERROR_CLASSES, InvalidArgumentError
from .actions import DeletionVectorDescriptor
from .deletion_vectors import DV_FILE_CORE, dv_relative_path
from .deletion_vectors import z85_decode as z85_decode  # re-exported (it lived here before `deletion_vectors`)

FULL, LITE = "full", "lite"
MODES = (FULL, LITE)
PLAN_FORMAT = "delta-vacuum-plan/1"
HOUR_MS = 3_600_000
#: Untracked files younger than this are never deleted (`vacuum(untracked_grace_hours=...)`).
DEFAULT_UNTRACKED_GRACE_HOURS = 1.0

# Why re-validation drops a plan entry (`revalidate`, `recheck`); `MISSING` entries are reported apart.
HIDDEN = "hidden"  # a name VACUUM never deletes (a hidden component)
PROTECTED = "protected"  # active, tombstoned within retention, or the DV file of one, in the latest snapshot
DUPLICATE = "duplicate"  # the same path earlier in the plan
NO_EVIDENCE = "no-evidence"  # the entry carries no listed modification time
DIRECTORY = "directory"  # a directory now: never deleted as a file
NOT_A_FILE = "not-a-file"  # a symbolic link or another special file
CHANGED = "changed"  # size or modification time differs from the plan's listing
NOT_OLD_ENOUGH = "not-older-than-cutoff"
UNTRACKED_GRACE = "untracked-grace"  # untracked and younger than the grace period
MISSING = "missing"  # nothing there any more: not deleted, not counted
DROP_REASONS = (HIDDEN, PROTECTED, DUPLICATE, NO_EVIDENCE, DIRECTORY, NOT_A_FILE, CHANGED, NOT_OLD_ENOUGH)
DROP_REASONS += (UNTRACKED_GRACE,)
LEASED = "leased"  # a file a live version lease needs (`protocol.leases`): dropped before re-validation
DROP_REASONS += (LEASED,)

# What `StoredEntry.kind` says a path is now.
FILE, DIR, OTHER = "file", "directory", "other"


class VacuumPlanRefusedError(InvalidArgumentError):
    """A VACUUM plan that is not applied at all, before anything is deleted: made for another table (or
    another table at the same location, or at a version the table never reached), or naming an entry
    no planner writes (outside the table root, in another bucket, under `_delta_log`). `table` is the
    table being vacuumed, `file` the entry at fault."""

    error_class = "DELTA_VACUUM_PLAN_REFUSED"


ERROR_CLASSES[VacuumPlanRefusedError.__name__] = VacuumPlanRefusedError  # `error_from_dict` restores it
_VISIBLE_PREFIXES = ("_change_data", "_delta_index")

_FIRST = r"\x20-\x24\x26-\x2d\x30-\x39\x3b-\x7e"  # printable ASCII but `%`, `.`, `/`, `:`
_NEXT = r"\x20-\x24\x26-\x2e\x30-\x39\x3b-\x7e"  # printable ASCII but `%`, `/`, `:`
#: A logged path that is its own comparable relative form (`relative_to_root(p, root) == p`): printable
#: ASCII (NFC as it is) without `%` (nothing to decode) or `:` (not a URI), components neither empty nor
#: starting with `.` (no slashes to trim, no `.` or `..` parts). RE2 reads it as Python's `re` does, so a
#: whole Arrow column can be tested with it (anchored: `^(?:...)$`).
SIMPLE_PATH_PATTERN = rf"[{_FIRST}][{_NEXT}]*(?:/[{_FIRST}][{_NEXT}]*)*"
_SIMPLE_PATH = re.compile(SIMPLE_PATH_PATTERN)
_CLEAN_ASCII = re.compile(r"[^/.][^/]*(?:/[^/.][^/]*)*")  # with `isascii()`: `normalize_relative` keeps it


def is_simple_path(path: str) -> bool:
    """True when `path` matches `SIMPLE_PATH_PATTERN` (then `relative_to_root` returns it unchanged)."""
    return _SIMPLE_PATH.fullmatch(path) is not None


def normalize_relative(path: str) -> str:
    """Comparable form of a relative path: NFC, no leading/trailing or doubled slashes, no `.` parts."""
    if path.isascii() and _CLEAN_ASCII.fullmatch(path) is not None:
        return path  # ASCII is NFC; no empty or `.` part to drop
    parts = [p for p in unicodedata.normalize("NFC", path).split("/") if p not in ("", ".")]
    return "/".join(parts)


def _nfc(name: str) -> str:
    return name if name.isascii() else unicodedata.normalize("NFC", name)


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
    if _SIMPLE_PATH.fullmatch(path) is not None:
        return path
    if "://" in path or path.startswith("/") or path.startswith("file:"):
        root = normalize_relative(_comparable_root(table_root))
        absolute = normalize_relative(_comparable_root(path))
        if not absolute.startswith(root + "/"):
            return None
        rel = absolute[len(root) + 1 :]
    else:
        rel = normalize_relative(unquote(path))
    if not rel or (".." in rel and ".." in rel.split("/")):
        return None
    return rel


@lru_cache(maxsize=64)
def _allowed_prefixes(partition_columns: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(f"{c}=" for c in partition_columns) + _VISIBLE_PREFIXES


def _hidden_part(part: str, allowed: tuple[str, ...]) -> bool:
    return part.startswith(".") or (part.startswith("_") and not part.startswith(allowed))


def is_hidden(relative: str, partition_columns: Iterable[str] = ()) -> bool:
    """True when a component of `relative` is hidden from VACUUM (Spark `DeltaTableUtils.isHiddenDirectory`)."""
    if relative[:1] not in ("_", ".") and "/_" not in relative and "/." not in relative:
        return False  # no component starts with `_` or `.`
    allowed = _allowed_prefixes(tuple(partition_columns))
    return any(_hidden_part(part, allowed) for part in relative.split("/"))


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


class PlannedFile(NamedTuple):
    """A file a plan deletes: path relative to the table root (as stored), size in bytes, and the
    modification time (ms) it was listed with (None for an entry without that evidence: never deleted)."""

    path: str
    size: int
    modification_time: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "size": self.size}
        if self.modification_time is not None:
            out["modification_time"] = self.modification_time
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PlannedFile:
        mtime = d.get("modification_time")
        if isinstance(mtime, bool):
            raise ValueError(f"modification_time {mtime!r}")
        return cls(str(d["path"]), int(d.get("size") or 0), None if mtime is None else int(mtime))


class StoredEntry(NamedTuple):
    """What storage holds at a plan entry's path now: `kind` (`FILE`, `DIR`, `OTHER`), size, mtime in ms."""

    kind: str
    size: int
    modification_time: int


@dataclass(frozen=True, slots=True)
class PlanTotals:
    """Counts of a plan whose file list is not carried in it (`VacuumPlan.files_inline` is False)."""

    num_files: int
    num_bytes: int
    #: files and bytes per directory, as `VacuumPlan.partitions()`
    partitions: dict[str, dict[str, int]]


@dataclass
class VacuumPlan:
    """Files to delete, relative to `table` (decoded storage names), and what the plan was made from.

    A plan made on Spark may be too big to carry its files (`engines.spark.vacuum`): `totals` then holds
    the counts, `files` is empty, and the list is at `files_uri` (JSON lines `{"path", "size"}`, written
    by the executors), or nowhere for a summary-only dry run. Such a plan is applied on Spark only.
    """

    table: str
    version: int
    cutoff_ms: int
    retention_ms: int
    mode: str
    files: list[PlannedFile]
    protocol: dict[str, Any] = field(default_factory=dict)
    #: where the executors wrote the whole file list (also set when `files` carries it)
    files_uri: str | None = None
    #: the counts when `files` does not carry the list
    totals: PlanTotals | None = None
    #: the untracked grace period the plan was made with (None: a plan from before it existed)
    untracked_grace_ms: int | None = None
    #: untracked files older than the cutoff that the grace period kept out of the plan, and their bytes
    grace_kept_files: int = 0
    grace_kept_bytes: int = 0
    #: the table's `metaData.id` when planned (a plan is refused by a table recreated at its location)
    table_id: str | None = None

    @property
    def files_inline(self) -> bool:
        """True when `files` is the whole plan."""
        return self.totals is None

    @property
    def num_files(self) -> int:
        return len(self.files) if self.totals is None else self.totals.num_files

    @property
    def num_bytes(self) -> int:
        return sum(f.size for f in self.files) if self.totals is None else self.totals.num_bytes

    @property
    def cutoff(self) -> str:
        return dt.datetime.fromtimestamp(self.cutoff_ms / 1000, tz=dt.UTC).isoformat()

    def partitions(self) -> dict[str, dict[str, int]]:
        """Files and bytes per directory (partition), `""` for the root."""
        if self.totals is not None:
            return dict(sorted(self.totals.partitions.items()))
        out: dict[str, dict[str, int]] = {}
        for f in self.files:
            entry = out.setdefault(partition_of(f.path), {"files": 0, "bytes": 0})
            entry["files"] += 1
            entry["bytes"] += f.size
        return dict(sorted(out.items()))

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable form; `from_dict` reads it back (plan now, apply later). `files_uri` and
        `files_inline` appear only for a plan whose list was written by Spark executors."""
        out = {
            "format": PLAN_FORMAT,
            "table": self.table,
            "version": self.version,
            "cutoff": self.cutoff,
            "cutoff_ms": self.cutoff_ms,
            "retention_ms": self.retention_ms,
            "mode": self.mode,
            "protocol": dict(self.protocol),
            "files": [f.to_dict() for f in self.files],
            "num_files": self.num_files,
            "bytes": self.num_bytes,
            "partitions": self.partitions(),
        }
        if self.files_uri is not None or not self.files_inline:
            out.update(files_uri=self.files_uri, files_inline=self.files_inline)
        if self.table_id is not None:
            out["table_id"] = self.table_id
        if self.untracked_grace_ms is not None:
            out.update(
                untracked_grace_ms=self.untracked_grace_ms,
                grace_kept_files=self.grace_kept_files,
                grace_kept_bytes=self.grace_kept_bytes,
            )
        return out

    def with_files(self, files: list[PlannedFile]) -> VacuumPlan:
        """This plan (same table, version, cutoff, grace...) holding `files` inline."""
        return replace(self, files=files, files_uri=None, totals=None)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> VacuumPlan:
        """A plan from `to_dict` output (or a `VacuumResult.to_dict()` of a dry run).

        `files` is the plan unless the dict says `"files_inline": false` (then its counts are read and
        the list is at `files_uri`): a hand-edited list is what gets re-validated and applied.
        """
        if not isinstance(d, Mapping):
            raise InvalidArgumentError(f"A vacuum plan must be a mapping, got {type(d).__name__}", argument="plan")
        try:
            files = [PlannedFile.from_dict(f) for f in d["files"]]
            mode = str(d["mode"])
            if mode not in MODES:
                raise ValueError(f"mode {mode!r}")
            totals = None
            if d.get("files_inline", True) is False:
                partitions = d["partitions"]
                parts = {str(k): {"files": int(v["files"]), "bytes": int(v["bytes"])} for k, v in partitions.items()}
                totals = PlanTotals(int(d["num_files"]), int(d["bytes"]), parts)
                files = []
            uri = d.get("files_uri")
            grace = d.get("untracked_grace_ms")
            table_id = d.get("table_id")
            return cls(
                table=str(d["table"]),
                version=int(d["version"]),
                cutoff_ms=int(d["cutoff_ms"]),
                retention_ms=int(d["retention_ms"]),
                mode=mode,
                files=files,
                protocol=dict(d.get("protocol") or {}),
                files_uri=None if uri is None else str(uri),
                totals=totals,
                untracked_grace_ms=None if grace is None else int(grace),
                grace_kept_files=int(d.get("grace_kept_files") or 0),
                grace_kept_bytes=int(d.get("grace_kept_bytes") or 0),
                table_id=None if table_id is None else str(table_id),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InvalidArgumentError(f"Not a vacuum plan: {type(exc).__name__}: {exc}", argument="plan") from exc


def dv_file_relative(storage_type: str, path_or_inline_dv: str, table_root: str) -> str | None:
    """The normalized relative path of a deletion vector's file: `u` under the root, `p` when its absolute
    path lies under the root; None for inline (`i`) vectors and files outside the root."""
    if storage_type == "u":
        return normalize_relative(dv_relative_path(DeletionVectorDescriptor("u", path_or_inline_dv, 0, 0)) or "")
    if storage_type == "p":
        return relative_to_root(path_or_inline_dv, table_root)
    return None


def protected_from_logged(
    paths: Iterable[str], deletion_vectors: Iterable[tuple[str, str]], *, table_root: str
) -> set[str]:
    """Normalized relative paths of logged files (`paths` as logged) and of the files of their deletion
    vectors (`(storageType, pathOrInlineDv)` pairs; repeats cost nothing), those outside the root left out."""
    out = {rel for rel in (relative_to_root(p, table_root) for p in paths) if rel is not None}
    for storage_type, where in set(deletion_vectors):
        rel = dv_file_relative(storage_type, where, table_root)
        if rel is not None:
            out.add(rel)
    return out


def _dv_pairs(files: Iterable[LoggedFile]) -> Iterable[tuple[str, str]]:
    for f in files:
        if f.deletion_vector is not None:
            yield f.deletion_vector.storage_type, f.deletion_vector.path_or_inline_dv


def _with_dvs(files: Iterable[LoggedFile], table_root: str) -> set[str]:
    files = list(files)
    return protected_from_logged([f.path for f in files], _dv_pairs(files), table_root=table_root)


def protected_paths(
    active: Iterable[LoggedFile], tombstones: Iterable[LoggedFile], *, cutoff_ms: int, table_root: str
) -> set[str]:
    """Normalized relative paths VACUUM must keep: active files, tombstones deleted after `cutoff_ms`,
    and the DV files of both."""
    recent = [t for t in tombstones if (t.deletion_timestamp or 0) > cutoff_ms]
    return _with_dvs([*active, *recent], table_root)


def deletable_name(relative: str, partition_columns: Sequence[str] = ()) -> bool:
    """The never-rules that need only the normalized relative path: not empty, no `..` part, not under
    `_delta_log`, not hidden (one row's check: the Spark engine runs it where the listing happens)."""
    if not relative or (".." in relative and ".." in relative.split("/")):
        return False
    if relative == "_delta_log" or relative.startswith("_delta_log/"):
        return False
    return not is_hidden(relative, partition_columns)


def subdirectory_key(directory: str, name: str, partition_columns: Sequence[str] = ()) -> str | None:
    """The comparable relative path of the subdirectory `name` of a listed `directory` (a comparable path,
    `""` for the root) when FULL mode lists it; None when nothing under it may be deleted (a hidden name,
    the root's `_delta_log`)."""
    name = _nfc(name)
    if not name or name in (".", "..") or (not directory and name == "_delta_log"):
        return None
    if _hidden_part(name, _allowed_prefixes(tuple(partition_columns))):
        return None
    return f"{directory}/{name}" if directory else name


def unprotected_names(
    directory: str, names: Sequence[str], protected: AbstractSet[str], partition_columns: Sequence[str] = ()
) -> list[tuple[int, str]]:
    """The files of one listed directory that FULL mode deletes if they are older than the cutoff:
    `(index, comparable path)` for each of `names` (file names in `directory`, a comparable path from
    `subdirectory_key`, `""` for the root) that is not hidden and is neither protected nor the DV alias
    of a protected file, in listing order. Only these need a size and a modification time
    (`plan_candidates`). `names` are single path components, as a directory listing gives them."""
    allowed = _allowed_prefixes(tuple(partition_columns))
    prefix = f"{directory}/" if directory else ""
    out: list[tuple[int, str]] = []
    for i, name in enumerate(names):
        key = prefix + name
        if key in protected:  # most names: spelled as logged (then NFC already)
            continue
        if not name.isascii():
            name = unicodedata.normalize("NFC", name)
            key = prefix + name
            if key in protected:
                continue
        if not name or (name[0] in "_." and _hidden_part(name, allowed)):
            continue
        if DV_FILE_CORE in name:
            alias = dv_alias_key(key)
            if alias is not None and alias in protected:
                continue
        out.append((i, key))
    return out


def listed_key(path: str, protected: AbstractSet[str], partition_columns: Sequence[str] = ()) -> str | None:
    """The comparable path of a listed file (`path` relative to the root as stored) that FULL mode deletes
    if it is older than the cutoff (`deletable` by name, not protected); None otherwise."""
    rel = normalize_relative(path)
    return rel if deletable(rel, protected, partition_columns) else None


def dv_alias_key(relative: str) -> str | None:
    """`<dir>/deletion_vector_<uuid>.bin` for `<dir>/<anything>deletion_vector_<uuid>.bin` (a non-empty
    prefix), else None. Such a file is kept when its key is protected: Delta's test-only file-name prefix
    (`test%dv%prefix-` in Spark's DeletionVectorsSuite) names live DV files that way; keeping them costs
    nothing."""
    directory, _, name = relative.rpartition("/")
    at = name.find(DV_FILE_CORE)
    if at <= 0:
        return None
    core = name[at:]
    return f"{directory}/{core}" if directory else core


def _unprotected(relative: str, protected: AbstractSet[str]) -> bool:
    """Neither `relative` nor its DV alias (`dv_alias_key`) is protected."""
    if relative in protected:
        return False
    alias = dv_alias_key(relative) if DV_FILE_CORE in relative else None
    return alias is None or alias not in protected


def deletable(relative: str, protected: AbstractSet[str], partition_columns: Sequence[str]) -> bool:
    """The never-rules on one normalized relative path (apart from mtime and retention of the listing)."""
    return deletable_name(relative, partition_columns) and _unprotected(relative, protected)


def listed_candidate(item: ListedFile, cutoff_ms: int, partition_columns: Sequence[str] = ()) -> str | None:
    """The normalized relative path of a listed file FULL mode may delete if nothing protects it: older
    than the cutoff and allowed by `deletable_name`; None otherwise."""
    if item.modification_time >= cutoff_ms:
        return None
    rel = normalize_relative(item.path)
    return rel if deletable_name(rel, partition_columns) else None


def plan_entry_relative(path: str, partition_columns: Sequence[str] = ()) -> str | None:
    """The normalized relative path of a plan entry that re-validation may keep if nothing protects it:
    relative (a hand-edited absolute path is dropped) and allowed by `deletable_name`; None otherwise."""
    if path.startswith("/") or "://" in path:
        return None
    rel = normalize_relative(path)
    return rel if deletable_name(rel, partition_columns) else None


@dataclass(slots=True)
class Candidates:
    """Listed files the name rules leave to the cutoff, as parallel lists: path relative to the root as
    stored, comparable path (`listed_key`, `unprotected_names`), size, modification time in ms."""

    paths: list[str] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    mtimes: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.paths)

    def append(self, path: str, key: str, size: int, mtime: int) -> None:
        self.paths.append(path)
        self.keys.append(key)
        self.sizes.append(size)
        self.mtimes.append(mtime)


def candidates_of(
    listing: Iterable[ListedFile], protected: AbstractSet[str], partition_columns: Sequence[str] = ()
) -> Candidates:
    """`Candidates` from a listing with sizes and mtimes already known (`listed_key` on each file)."""
    out = Candidates()
    for item in listing:
        key = listed_key(item.path, protected, partition_columns)
        if key is not None:
            out.append(item.path.strip("/"), key, item.size, item.modification_time)
    return out


def within_grace(modification_time: int, *, now_ms: int, grace_ms: int) -> bool:
    """True when an untracked file modified at `modification_time` is younger than the grace period at
    `now_ms` (never deleted: a writer may not have committed it yet). Tracked files (active files,
    tombstones, their DV files) are not subject to it: retention alone decides for them."""
    return modification_time > now_ms - grace_ms


def grace_matters(*, cutoff_ms: int, now_ms: int, grace_ms: int) -> bool:
    """False when the cutoff alone already keeps every file `within_grace` (a retention at least as long
    as the grace period): then nothing needs to know which files are tracked."""
    return now_ms - grace_ms < cutoff_ms


def expired_tombstone_paths(tombstones: Iterable[LoggedFile], *, cutoff_ms: int, table_root: str) -> set[str]:
    """Normalized relative paths of the tombstones deleted at or before `cutoff_ms` and of their DV files:
    tracked files that retention no longer protects (the grace period does not apply to them)."""
    return _with_dvs([t for t in tombstones if (t.deletion_timestamp or 0) <= cutoff_ms], table_root)


def refused_entry(path: str) -> str | None:
    """Why a plan entry refuses the whole plan, or None. A planner writes paths relative to the table root
    as storage names them, never under `_delta_log`: an empty path, an absolute one (`/x`, `file:...`, a
    URI of another bucket), one with a `..` component, or one under `_delta_log` is an edit or a corruption,
    and the plan is not applied at all (`VacuumPlanRefusedError`)."""
    if not path.strip("/"):
        return "an empty path"
    if path.startswith("/") or "://" in path or path.startswith("file:"):
        return "an absolute path, outside the table root"
    parts = normalize_relative(path).split("/")
    if ".." in parts:
        return "a path climbing out of the table root"
    if parts[0] == "_delta_log":
        return "a path in the table's _delta_log"
    return None


def same_mtime(listed_ms: int, now_ms: int) -> bool:
    """The modification time of a plan entry (as listed) and of the file now are the same: equal, or the
    same second when one of them has no milliseconds (an S3 HEAD answers in seconds, its listing in ms)."""
    if listed_ms == now_ms:
        return True
    return listed_ms // 1000 == now_ms // 1000 and (listed_ms % 1000 == 0 or now_ms % 1000 == 0)


def recheck(
    entry: PlannedFile, stored: StoredEntry | None, *, cutoff_ms: int, now_ms: int, grace_ms: int, tracked: bool
) -> str | None:
    """Why the file at a plan entry may not be deleted as it is now (`stored`, None when missing), or None:
    `MISSING`, a `DIRECTORY` or `NOT_A_FILE`, `NO_EVIDENCE` (the entry has no listed mtime), `CHANGED` (size
    or mtime not as listed), `NOT_OLD_ENOUGH` (mtime not before `cutoff_ms`), `UNTRACKED_GRACE` (not
    `tracked` and `within_grace`). One row's check: both executors run it where the file is looked at."""
    if stored is None:
        return MISSING
    if stored.kind == DIR:
        return DIRECTORY
    if stored.kind != FILE:
        return NOT_A_FILE
    if entry.modification_time is None:
        return NO_EVIDENCE
    if stored.size != entry.size or not same_mtime(entry.modification_time, stored.modification_time):
        return CHANGED
    mtime = max(entry.modification_time, stored.modification_time)
    if mtime >= cutoff_ms:
        return NOT_OLD_ENOUGH
    if not tracked and within_grace(mtime, now_ms=now_ms, grace_ms=grace_ms):
        return UNTRACKED_GRACE
    return None


def plan_candidates(
    candidates: Candidates,
    *,
    table: str,
    version: int,
    cutoff_ms: int,
    retention_ms: int,
    protocol: Mapping[str, Any] | None = None,
    now_ms: int | None = None,
    untracked_grace_ms: int | None = None,
    tracked: AbstractSet[str] = frozenset(),
    table_id: str | None = None,
) -> VacuumPlan:
    """The FULL plan: the `candidates` modified before `cutoff_ms`, one per comparable path (the first
    listed), sorted by path, each with its listed size and mtime. With `untracked_grace_ms`, a candidate
    whose key is not in `tracked` (expired tombstones, `expired_tombstone_paths`) and that is `within_grace`
    at `now_ms` (default: `cutoff_ms + retention_ms`) is left out and counted in `grace_kept_*`."""
    mtimes = candidates.mtimes
    keep = [i for i, mtime in enumerate(mtimes) if mtime < cutoff_ms]
    grace_files = grace_bytes = 0
    if untracked_grace_ms is not None:
        now = cutoff_ms + retention_ms if now_ms is None else now_ms
        if grace_matters(cutoff_ms=cutoff_ms, now_ms=now, grace_ms=untracked_grace_ms):
            keys, sizes = candidates.keys, candidates.sizes
            young = {
                i
                for i in keep
                if within_grace(mtimes[i], now_ms=now, grace_ms=untracked_grace_ms) and keys[i] not in tracked
            }
            grace_files, grace_bytes = len(young), sum(sizes[i] for i in young)
            keep = [i for i in keep if i not in young]
    keys = [candidates.keys[i] for i in keep]
    if len(set(keys)) != len(keys):  # two stored spellings of one path (NFC and NFD): the first listed
        seen: set[str] = set()
        keep = [i for i, key in zip(keep, keys, strict=True) if not (key in seen or seen.add(key))]
    paths, sizes = candidates.paths, candidates.sizes
    keep.sort(key=paths.__getitem__)
    files = [PlannedFile(paths[i], sizes[i], mtimes[i]) for i in keep]
    return VacuumPlan(
        table,
        version,
        cutoff_ms,
        retention_ms,
        FULL,
        files,
        dict(protocol or {}),
        untracked_grace_ms=untracked_grace_ms,
        grace_kept_files=grace_files,
        grace_kept_bytes=grace_bytes,
        table_id=table_id,
    )


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
    now_ms: int | None = None,
    untracked_grace_ms: int | None = None,
    table_id: str | None = None,
) -> VacuumPlan:
    """The plan for `table` at `version` (see the module doc for the rules).

    FULL: candidates are the `listing` (paths relative to the root as stored), older than `cutoff_ms`,
    untracked ones also older than the grace period when `untracked_grace_ms` is given (`plan_candidates`).
    LITE: candidates are the tombstones deleted at or before `cutoff_ms` and their DV files, from the
    log alone (`listing` unused); sizes come from the remove actions and no entry has a modification time
    yet: `with_evidence` adds what storage says (`maintenance.vacuum` does).
    """
    if mode not in MODES:
        raise InvalidArgumentError(f"mode must be one of {MODES}, got {mode!r}", argument="mode", table=table)
    tombstones = list(tombstones)
    protected = protected_paths(active, tombstones, cutoff_ms=cutoff_ms, table_root=table)
    if mode == FULL:
        if listing is None:
            raise InvalidArgumentError("FULL mode needs a listing", argument="listing", table=table)
        now = cutoff_ms + retention_ms if now_ms is None else now_ms
        tracked: set[str] = set()
        grace = untracked_grace_ms
        if grace is not None and grace_matters(cutoff_ms=cutoff_ms, now_ms=now, grace_ms=grace):
            tracked = expired_tombstone_paths(tombstones, cutoff_ms=cutoff_ms, table_root=table)
        return plan_candidates(
            candidates_of(listing, protected, partition_columns),
            table=table,
            version=version,
            cutoff_ms=cutoff_ms,
            retention_ms=retention_ms,
            protocol=protocol,
            now_ms=now,
            untracked_grace_ms=untracked_grace_ms,
            tracked=tracked,
            table_id=table_id,
        )
    chosen: dict[str, PlannedFile] = {}
    for t in tombstones:
        if (t.deletion_timestamp or 0) > cutoff_ms:
            continue
        path_rel = relative_to_root(t.path, table)
        for rel in _with_dvs([LoggedFile(t.path, t.deletion_vector)], table):
            if rel not in chosen and deletable(rel, protected, partition_columns):
                size = t.size if rel == path_rel else None
                chosen[rel] = PlannedFile(rel, size or 0)
    files = sorted(chosen.values(), key=lambda f: f.path)
    return VacuumPlan(
        table,
        version,
        cutoff_ms,
        retention_ms,
        mode,
        files,
        dict(protocol or {}),
        untracked_grace_ms=untracked_grace_ms,
        table_id=table_id,
    )


def with_evidence(plan: VacuumPlan, stored: Sequence[StoredEntry | None]) -> VacuumPlan:
    """A plan made from the log (LITE) with the evidence storage gives (`stored[i]` for `plan.files[i]`):
    each regular file older than the cutoff with its size and mtime as they are; missing files, directories
    and newer files are left out (nothing to delete, or not deletable)."""
    files = [
        PlannedFile(f.path, s.size, s.modification_time)
        for f, s in zip(plan.files, stored, strict=True)
        if s is not None and s.kind == FILE and s.modification_time < plan.cutoff_ms
    ]
    return plan.with_files(files)


@dataclass(slots=True)
class Rechecked:
    """A plan re-validated: `keep` may be deleted (plan order), `dropped[i]` was dropped for `reasons[i]`
    (`DROP_REASONS`), `missing` are entries with nothing there any more (neither deleted nor counted)."""

    keep: list[PlannedFile] = field(default_factory=list)
    dropped: list[PlannedFile] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    missing: list[PlannedFile] = field(default_factory=list)

    def drop(self, entry: PlannedFile, reason: str) -> None:
        if reason == MISSING:
            self.missing.append(entry)
        else:
            self.dropped.append(entry)
            self.reasons.append(reason)


def revalidate(
    plan: VacuumPlan,
    *,
    stored: Callable[[Sequence[str]], Sequence[StoredEntry | None]],
    cutoff_ms: int,
    now_ms: int,
    grace_ms: int,
    partition_columns: Sequence[str] = (),
    protected: AbstractSet[str] = frozenset(),
    tracked: AbstractSet[str] = frozenset(),
) -> Rechecked:
    """`plan.files` against the table as it is now: `protected` is the latest snapshot's protected set
    (`protected_paths`), `tracked` its expired tombstones (`expired_tombstone_paths`; only needed when
    `grace_matters`), `stored(paths)` what storage holds at each path now (one call, for the entries the
    name rules and the protected set leave). Refuses the whole plan when an entry is `refused_entry`
    (raise before anything is deleted); otherwise an entry is kept when its name is deletable, it is the
    first of its path, nothing protects it (nor its DV alias) and `recheck` finds nothing wrong."""
    out = Rechecked()
    for f in plan.files:
        why = refused_entry(f.path)
        if why is not None:
            raise VacuumPlanRefusedError(
                f"The vacuum plan names {f.path!r}: {why}. No planner writes such an entry; nothing was deleted",
                argument="plan",
                table=plan.table,
                file=f.path,
            )
    seen: set[str] = set()
    drops: list[tuple[int, str]] = []  # (index in the plan, reason): reported in plan order
    pending: list[tuple[int, str]] = []
    for i, f in enumerate(plan.files):
        rel = plan_entry_relative(f.path, partition_columns)  # the name rules
        if rel is None:
            drops.append((i, HIDDEN))
        elif f.path in seen:
            drops.append((i, DUPLICATE))
        else:
            seen.add(f.path)
            if _unprotected(rel, protected):
                pending.append((i, rel))
            else:
                drops.append((i, PROTECTED))
    now = stored([plan.files[i].path for i, _ in pending]) if pending else []
    kept: list[int] = []
    for (i, rel), s in zip(pending, now, strict=True):
        why = recheck(plan.files[i], s, cutoff_ms=cutoff_ms, now_ms=now_ms, grace_ms=grace_ms, tracked=rel in tracked)
        if why is None:
            kept.append(i)
        else:
            drops.append((i, why))
    out.keep = [plan.files[i] for i in kept]
    for i, why in sorted(drops):
        out.drop(plan.files[i], why)
    return out
