"""VACUUM planning: which files under a table root are safe to delete (PROTOCOL.md "Delta Log Entries").

Pure: the snapshot's files and tombstones, a listing, the cutoff and the mode in, a `VacuumPlan` out;
`maintenance.vacuum` does the I/O. The Spark engine applies the per-row rules (`listed_candidate`,
`plan_entry_relative`, `dv_alias_key`) where the rows are and the protected set as a join. One unit
(over 600 lines on purpose): every rule below rests on one comparable-path form (`normalize_relative`,
`relative_to_root`), one set of name rules (`is_hidden`, `deletable_name`) and one plan type, and the local
walk, an object-store listing and the Spark tasks all apply them from here, so each is written once.

Never in a plan: an active file or its deletion-vector file (PROTOCOL.md "Deletion Vectors"); a tombstone
deleted after the cutoff or its DV file; anything under `_delta_log` or with a hidden component (`_` or `.`,
except `_change_data`, `_delta_index`, `<partition column>=`: Spark `isHiddenDirectory`); anything outside
the root; in FULL mode a file not older than the cutoff; an untracked file younger than the grace period
(`within_grace`), so a writer's staged file survives a retention of 0 before its commit lands.

An apply re-checks a plan against the table as it is then: an entry no planner writes (`refused_entry`)
refuses the whole plan (`VacuumPlanRefusedError`); any other is kept only when the file is unchanged since
its listing (`recheck`) and nothing protects it now (`revalidate`); what is dropped says why (`DROP_REASONS`).

Paths compare decoded once (`+` stays literal, as Delta decodes URIs), NFC, without edge slashes; a logged
path matching `SIMPLE_PATH_PATTERN` is already in that form.
"""

from __future__ import annotations

import datetime as dt
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from functools import lru_cache
from itertools import pairwise
from operator import itemgetter
from typing import Any, NamedTuple
from urllib.parse import unquote

from ..errors import ERROR_CLASSES, InvalidArgumentError
from .actions import DeletionVectorDescriptor
from .deletion_vectors import DV_FILE_CORE, dv_relative_path

FULL, LITE = "full", "lite"
MODES = (FULL, LITE)
PLAN_FORMAT = "delta-vacuum-plan/1"
HOUR_MS = 3_600_000
#: Untracked files younger than this are never deleted (`vacuum(untracked_grace_hours=...)`).
DEFAULT_UNTRACKED_GRACE_HOURS = 1.0

# Why re-validation drops a plan entry (`revalidate`, `recheck`); `MISSING` entries are reported apart.
HIDDEN = "hidden"
PROTECTED = "protected"  # active, tombstoned within retention, or the DV file of one, in the latest snapshot
DUPLICATE = "duplicate"
NO_EVIDENCE = "no-evidence"  # no listed modification time
DIRECTORY = "directory"
NOT_A_FILE = "not-a-file"  # a symbolic link or another special file
CHANGED = "changed"  # size or modification time differs from the plan's listing
NOT_OLD_ENOUGH = "not-older-than-cutoff"
UNTRACKED_GRACE = "untracked-grace"
MISSING = "missing"  # nothing there any more: not deleted, not counted
LEASED = "leased"  # a file a live version lease needs (`protocol.leases`): dropped before re-validation
DROP_REASONS = (HIDDEN, PROTECTED, DUPLICATE, NO_EVIDENCE, DIRECTORY, NOT_A_FILE, CHANGED, NOT_OLD_ENOUGH)
DROP_REASONS += (UNTRACKED_GRACE, LEASED)

#: The progress phase of the listing: the local walk reports directories listed, `maintenance.vacuum` the
#: start and the end around any engine's.
LISTING = "VACUUM: listing the table"

# What `StoredEntry.kind` says a path is now.
FILE, DIR, OTHER = "file", "directory", "other"


class VacuumPlanRefusedError(InvalidArgumentError):
    """A VACUUM plan refused whole, before anything is deleted: made for another table (location, id or a
    version never reached), or naming an entry no planner writes. `file` is the entry at fault."""

    error_class = "DELTA_VACUUM_PLAN_REFUSED"


ERROR_CLASSES[VacuumPlanRefusedError.__name__] = VacuumPlanRefusedError  # `error_from_dict` restores it
_VISIBLE_PREFIXES = ("_change_data", "_delta_index")

_FIRST = r"\x20-\x24\x26-\x2d\x30-\x39\x3b-\x7e"  # printable ASCII but `%`, `.`, `/`, `:`
_NEXT = r"\x20-\x24\x26-\x2e\x30-\x39\x3b-\x7e"  # printable ASCII but `%`, `/`, `:`
#: A logged path that is its own comparable relative form: printable ASCII (NFC as it is) without `%` or
#: `:`, components neither empty nor starting with `.`. RE2 reads it as `re` does (Arrow column tests).
SIMPLE_PATH_PATTERN = rf"[{_FIRST}][{_NEXT}]*(?:/[{_FIRST}][{_NEXT}]*)*"
_SIMPLE_PATH = re.compile(SIMPLE_PATH_PATTERN)
_CLEAN_ASCII = re.compile(r"[^/.][^/]*(?:/[^/.][^/]*)*")  # with `isascii()`: `normalize_relative` keeps it


def is_simple_path(path: str) -> bool:
    return _SIMPLE_PATH.fullmatch(path) is not None


def normalize_relative(path: str) -> str:
    """Comparable form of a relative path: NFC, no leading/trailing or doubled slashes, no `.` parts."""
    if path.isascii() and _CLEAN_ASCII.fullmatch(path) is not None:
        return path
    return "/".join(p for p in unicodedata.normalize("NFC", path).split("/") if p not in ("", "."))


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
    """A logged path (URL-encoded relative, or absolute URI) normalized relative to the table root; None
    outside the root or climbing out of it (`..`)."""
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
        return False
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
    """A file a plan deletes: path relative to the root (as stored), size, and the mtime (ms) it was listed
    with (None: no evidence, never deleted)."""

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
    """Counts of a plan that does not carry its file list (a Spark plan)."""

    num_files: int
    num_bytes: int
    partitions: dict[str, dict[str, int]]


@dataclass
class VacuumPlan:
    """Files to delete, relative to `table` (decoded storage names), and what the plan was made from.

    A Spark plan too big to carry its files has `totals` and an empty `files`; its list is at `files_uri`
    (JSON lines, or nowhere for a summary-only dry run), and it is applied on Spark only.
    """

    table: str
    version: int
    cutoff_ms: int
    retention_ms: int
    mode: str
    files: list[PlannedFile]
    protocol: dict[str, Any] = field(default_factory=dict)
    files_uri: str | None = None
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
        directories = [path.rpartition("/")[0] for path, _, _ in self.files]  # partition_of, inlined
        counts = Counter(directories)  # counted in C
        sizes = dict.fromkeys(counts, 0)
        for directory, file in zip(directories, self.files, strict=True):
            sizes[directory] += file.size
        return {d: {"files": counts[d], "bytes": sizes[d]} for d in sorted(counts)}

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable form `from_dict` reads back (plan now, apply later)."""
        out = {
            "format": PLAN_FORMAT,
            "table": self.table,
            "version": self.version,
            "cutoff": self.cutoff,
            "cutoff_ms": self.cutoff_ms,
            "retention_ms": self.retention_ms,
            "mode": self.mode,
            "protocol": dict(self.protocol),
            # PlannedFile.to_dict inlined (one dict a file, same keys in the same order): ~333k on a big plan
            "files": [
                {"path": path, "size": size}
                if mtime is None
                else {"path": path, "size": size, "modification_time": mtime}
                for path, size, mtime in self.files
            ],
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
        """A plan from `to_dict` output (or a dry run's `VacuumResult.to_dict()`); a hand-edited list is what
        gets re-validated and applied. `"files_inline": false` reads the counts (the list is at `files_uri`)."""
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


def protected_from_logged(
    paths: Iterable[str], deletion_vectors: Iterable[tuple[str, str]], *, table_root: str
) -> set[str]:
    """Normalized relative paths of logged files and of their DV files (`(storageType, pathOrInlineDv)`
    pairs: `u` under the root, `p` when under the root, `i` inline has none); those outside the root left out."""
    out = {rel for rel in (relative_to_root(p, table_root) for p in paths) if rel is not None}
    for storage_type, where in set(deletion_vectors):
        if storage_type == "u":
            out.add(normalize_relative(dv_relative_path(DeletionVectorDescriptor("u", where, 0, 0)) or ""))
        elif storage_type == "p" and (rel := relative_to_root(where, table_root)) is not None:
            out.add(rel)
    return out


def _with_dvs(files: Iterable[LoggedFile], table_root: str) -> set[str]:
    files = list(files)
    dvs = [(d.storage_type, d.path_or_inline_dv) for d in (f.deletion_vector for f in files) if d is not None]
    return protected_from_logged([f.path for f in files], dvs, table_root=table_root)


def protected_paths(
    active: Iterable[LoggedFile], tombstones: Iterable[LoggedFile], *, cutoff_ms: int, table_root: str
) -> set[str]:
    """What VACUUM must keep: active files, tombstones deleted after `cutoff_ms`, and the DV files of both."""
    recent = [t for t in tombstones if (t.deletion_timestamp or 0) > cutoff_ms]
    return _with_dvs([*active, *recent], table_root)


def expired_tombstone_paths(tombstones: Iterable[LoggedFile], *, cutoff_ms: int, table_root: str) -> set[str]:
    """Tombstones deleted at or before `cutoff_ms` and their DV files: tracked, so the grace period spares
    them nothing."""
    return _with_dvs([t for t in tombstones if (t.deletion_timestamp or 0) <= cutoff_ms], table_root)


def deletable_name(relative: str, partition_columns: Sequence[str] = ()) -> bool:
    """The never-rules on the normalized relative path alone: not empty, no `..`, not `_delta_log`, not hidden."""
    if not relative or (".." in relative and ".." in relative.split("/")):
        return False
    if relative == "_delta_log" or relative.startswith("_delta_log/"):
        return False
    return not is_hidden(relative, partition_columns)


def subdirectory_key(directory: str, name: str, partition_columns: Sequence[str] = ()) -> str | None:
    """The comparable path of subdirectory `name` of a listed `directory` (`""`: the root) when FULL mode
    lists it; None when nothing under it may be deleted (hidden, or the root's `_delta_log`)."""
    name = name if name.isascii() else unicodedata.normalize("NFC", name)
    if not name or name in (".", "..") or (not directory and name == "_delta_log"):
        return None
    if _hidden_part(name, _allowed_prefixes(tuple(partition_columns))):
        return None
    return f"{directory}/{name}" if directory else name


def in_directory(protected: AbstractSet[str], directory: str) -> AbstractSet[str]:
    """What of `protected` a path directly under `directory` can be: `protected.directory(directory)` when
    the set is kept by directory (`read.protected_files.PathIndex`), else the whole set."""
    by_directory = getattr(protected, "directory", None)
    return protected if by_directory is None else by_directory(directory)


def unprotected_names(
    directory: str, names: Sequence[str], protected: AbstractSet[str], partition_columns: Sequence[str] = ()
) -> list[tuple[int, str]]:
    """`(index, comparable path)` of the `names` (single components) listed in `directory` that FULL mode
    deletes if old enough: neither hidden, protected, nor a protected file's DV alias. Only these need a stat."""
    protected = in_directory(protected, directory)  # a name's DV alias is in its directory too
    allowed = _allowed_prefixes(tuple(partition_columns))
    prefix = f"{directory}/" if directory else ""
    out: list[tuple[int, str]] = []
    for i, name in enumerate(names):
        if not name.isascii():
            name = unicodedata.normalize("NFC", name)
        key = prefix + name
        if key in protected or not name or (name[0] in "_." and _hidden_part(name, allowed)):
            continue
        if DV_FILE_CORE not in name or unprotected(key, protected):
            out.append((i, key))
    return out


def dv_alias_key(relative: str) -> str | None:
    """`<dir>/deletion_vector_<uuid>.bin` for `<dir>/<prefix>deletion_vector_<uuid>.bin` (non-empty prefix),
    else None: Delta's test-only DV file-name prefix names live DV files so; such a file is kept with its key."""
    directory, _, name = relative.rpartition("/")
    at = name.find(DV_FILE_CORE)
    if at <= 0:
        return None
    core = name[at:]
    return f"{directory}/{core}" if directory else core


def unprotected(relative: str, protected: AbstractSet[str]) -> bool:
    """Neither `relative` nor its DV alias (`dv_alias_key`) is protected."""
    if relative in protected:
        return False
    alias = dv_alias_key(relative) if DV_FILE_CORE in relative else None
    return alias is None or alias not in protected


def deletable(relative: str, protected: AbstractSet[str], partition_columns: Sequence[str]) -> bool:
    """The never-rules on one normalized relative path (apart from mtime and retention of the listing)."""
    return deletable_name(relative, partition_columns) and unprotected(relative, protected)


def listed_key(path: str, protected: AbstractSet[str], partition_columns: Sequence[str] = ()) -> str | None:
    """The comparable path of a listed file FULL mode deletes if old enough (`deletable`), else None."""
    rel = normalize_relative(path)
    return rel if deletable(rel, protected, partition_columns) else None


def listed_candidate(item: ListedFile, cutoff_ms: int, partition_columns: Sequence[str] = ()) -> str | None:
    """The comparable path of a listed file older than the cutoff with a `deletable_name`, else None."""
    if item.modification_time >= cutoff_ms:
        return None
    rel = normalize_relative(item.path)
    return rel if deletable_name(rel, partition_columns) else None


def plan_entry_relative(path: str, partition_columns: Sequence[str] = ()) -> str | None:
    """The comparable path of a relative plan entry with a `deletable_name`, else None (absolute: dropped)."""
    if path.startswith("/") or "://" in path:
        return None
    rel = normalize_relative(path)
    return rel if deletable_name(rel, partition_columns) else None


@dataclass(slots=True)
class Candidates:
    """Listed files the name rules leave to the cutoff, as parallel lists: path as stored, comparable path,
    size, modification time in ms."""

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

    def extend(self, other: Candidates) -> None:
        self.paths += other.paths
        self.keys += other.keys
        self.sizes += other.sizes
        self.mtimes += other.mtimes


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
    """True when an untracked file is younger than the grace period at `now_ms` (a writer may not have
    committed it yet). Tracked files (active, tombstones, their DV files): retention alone decides."""
    return modification_time > now_ms - grace_ms


def grace_matters(*, cutoff_ms: int, now_ms: int, grace_ms: int) -> bool:
    """False when the cutoff alone keeps every file `within_grace`: nothing needs to know what is tracked."""
    return now_ms - grace_ms < cutoff_ms


def refused_entry(path: str) -> str | None:
    """Why a plan entry refuses the whole plan, or None: no planner writes an empty, absolute (another
    bucket, `file:`), `..` or `_delta_log` entry; one is an edit or a corruption."""
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


def check_entries(plan: VacuumPlan, table: str) -> None:
    """Refuse (`VacuumPlanRefusedError`) a plan with an entry `refused_entry` names."""
    for f in plan.files:
        why = refused_entry(f.path)
        if why is not None:
            raise VacuumPlanRefusedError(
                f"The vacuum plan names {f.path!r}: {why}. No planner writes such an entry; nothing was deleted",
                argument="plan",
                table=table,
                file=f.path,
            )


def same_mtime(listed_ms: int, now_ms: int) -> bool:
    """Equal mtimes, or the same second when one has no milliseconds (S3 HEAD answers in seconds, LIST in ms)."""
    if listed_ms == now_ms:
        return True
    return listed_ms // 1000 == now_ms // 1000 and (listed_ms % 1000 == 0 or now_ms % 1000 == 0)


def recheck(
    entry: PlannedFile, stored: StoredEntry | None, *, cutoff_ms: int, now_ms: int, grace_ms: int, tracked: bool
) -> str | None:
    """Why the file at a plan entry may not be deleted as it is now (`stored`, None: missing), or None."""
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
    listed), sorted by path. With `untracked_grace_ms`, a candidate not in `tracked` and `within_grace` at
    `now_ms` (default `cutoff_ms + retention_ms`) is left out and counted in `grace_kept_*`.

    One pass in listing order, no per-candidate index or set (a 1M-file table lists 333k candidates): two
    stored spellings of one comparable path (NFC and NFD, `a//b` and `a/b`) need a key that differs from its
    stored path (`twins`), and the same stored path listed twice meets its twin in the (stable) sort."""
    young_after: int | None = None  # `within_grace`: modified after this
    if untracked_grace_ms is not None:
        now = cutoff_ms + retention_ms if now_ms is None else now_ms
        if grace_matters(cutoff_ms=cutoff_ms, now_ms=now, grace_ms=untracked_grace_ms):
            young_after = now - untracked_grace_ms
    twins = {key for path, key in zip(candidates.paths, candidates.keys, strict=True) if key != path}
    seen: set[str] = set()
    files: list[PlannedFile] = []
    grace_files = grace_bytes = 0
    columns = (candidates.paths, candidates.keys, candidates.sizes, candidates.mtimes)
    for path, key, size, mtime in zip(*columns, strict=True):
        if mtime >= cutoff_ms:
            continue
        if young_after is not None and mtime > young_after and key not in tracked:
            grace_files += 1
            grace_bytes += size
            continue
        if twins and key in twins:
            if key in seen:
                continue
            seen.add(key)
        files.append(PlannedFile(path, size, mtime))
    files.sort(key=itemgetter(0))
    if any(a.path == b.path for a, b in pairwise(files)):  # the same stored path listed twice: the first
        files = [f for i, f in enumerate(files) if not i or f.path != files[i - 1].path]
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
    """The plan for `table` at `version`. FULL: from the `listing` (`plan_candidates`). LITE: the tombstones
    deleted at or before `cutoff_ms` and their DV files, from the log alone, sized by the removes and
    without mtimes (`with_evidence` adds them)."""
    if mode not in MODES:
        raise InvalidArgumentError(f"mode must be one of {MODES}, got {mode!r}", argument="mode", table=table)
    tombstones = list(tombstones)
    protected = protected_paths(active, tombstones, cutoff_ms=cutoff_ms, table_root=table)
    if mode == FULL:
        if listing is None:
            raise InvalidArgumentError("FULL mode needs a listing", argument="listing", table=table)
        tracked = expired_tombstone_paths(tombstones, cutoff_ms=cutoff_ms, table_root=table)
        return plan_candidates(
            candidates_of(listing, protected, partition_columns),
            table=table,
            version=version,
            cutoff_ms=cutoff_ms,
            retention_ms=retention_ms,
            protocol=protocol,
            now_ms=now_ms,
            untracked_grace_ms=untracked_grace_ms,
            tracked=tracked,
            table_id=table_id,
        )
    chosen: dict[str, PlannedFile] = {}
    for t in tombstones:
        if (t.deletion_timestamp or 0) > cutoff_ms:
            continue
        path_rel = relative_to_root(t.path, table)
        for rel in _with_dvs([t], table):
            if rel not in chosen and deletable(rel, protected, partition_columns):
                chosen[rel] = PlannedFile(rel, (t.size or 0) if rel == path_rel else 0)
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
    """A LITE plan with what storage holds (`stored[i]` for `plan.files[i]`): each regular file older than
    the cutoff with its size and mtime now; missing files, directories and newer files left out."""
    files = [
        PlannedFile(f.path, s.size, s.modification_time)
        for f, s in zip(plan.files, stored, strict=True)
        if s is not None and s.kind == FILE and s.modification_time < plan.cutoff_ms
    ]
    return plan.with_files(files)


@dataclass(slots=True)
class Rechecked:
    """A plan re-validated: `keep` (plan order), `dropped[i]` for `reasons[i]`, and the `missing` entries."""

    keep: list[PlannedFile] = field(default_factory=list)
    dropped: list[PlannedFile] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    missing: list[PlannedFile] = field(default_factory=list)


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
    """`plan.files` against the table now: `protected` and `tracked` are the latest snapshot's
    (`protected_paths`, `expired_tombstone_paths`), `stored(paths)` what storage holds at the entries the
    name rules and the protected set leave (one call). Refuses the plan on a `refused_entry`; keeps an
    entry whose name is deletable, first of its path, unprotected (with its DV alias) and `recheck`-clean."""
    check_entries(plan, plan.table)
    seen: set[str] = set()
    drops: list[tuple[int, str]] = []  # (index in the plan, reason): reported in plan order
    pending: list[tuple[int, str]] = []
    where: str | None = None  # `in_directory` asked once per run of one directory (plans are sorted)
    here = protected
    for i, f in enumerate(plan.files):
        rel = plan_entry_relative(f.path, partition_columns)
        if rel is None:
            drops.append((i, HIDDEN))
        elif f.path in seen:
            drops.append((i, DUPLICATE))
        else:
            seen.add(f.path)
            if (directory := rel.rpartition("/")[0]) != where:
                where, here = directory, in_directory(protected, directory)
            if unprotected(rel, here):
                pending.append((i, rel))
            else:
                drops.append((i, PROTECTED))
    now = stored([plan.files[i].path for i, _ in pending]) if pending else []
    out = Rechecked()
    where, here = None, tracked
    for (i, rel), s in zip(pending, now, strict=True):
        if (directory := rel.rpartition("/")[0]) != where:
            where, here = directory, in_directory(tracked, directory)
        why = recheck(plan.files[i], s, cutoff_ms=cutoff_ms, now_ms=now_ms, grace_ms=grace_ms, tracked=rel in here)
        if why is None:
            out.keep.append(plan.files[i])
        else:
            drops.append((i, why))
    for i, why in sorted(drops):
        if why == MISSING:
            out.missing.append(plan.files[i])
        else:
            out.dropped.append(plan.files[i])
            out.reasons.append(why)
    return out
