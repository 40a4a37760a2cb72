"""VACUUM planning: which files under a table root are safe to delete (delta-writes.md section 6, P§12).

Pure: the snapshot's active files and tombstones, a listing, the cutoff and the mode come in, a
`VacuumPlan` comes out; `maintenance.vacuum` lists, plans, re-validates and deletes. The Spark engine
(`engines.spark_vacuum`) applies the same rules without a plan in memory: the per-row ones
(`listed_candidate`, `plan_entry_relative`, `dv_alias_key`) where the rows are, the protected set
(`protected_paths`) as a join.

Never in a plan:

* an active file or its deletion-vector file (`u`: `<prefix>/deletion_vector_<uuid>.bin` under the root;
  `p`: an absolute path, protected when it lies under the root; `i`: inline, no file);
* a tombstone still within retention (`deletionTimestamp > cutoff`) or its DV file, whatever the mtime;
* anything under `_delta_log`, or with a hidden path component (a name starting with `_` or `.`), except
  names starting with `_change_data`, `_delta_index` or `<partition column>=` (Spark `isHiddenDirectory`);
* anything outside the table root (absolute paths of shallow clones) or with `..` components;
* in FULL mode, a listed file whose modification time is not older than the cutoff (in-flight writers).

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
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, NamedTuple
from urllib.parse import unquote

from ..errors import InvalidArgumentError
from .actions import DeletionVectorDescriptor
from .deletion_vectors import DV_FILE_CORE, dv_relative_path
from .deletion_vectors import z85_decode as z85_decode  # re-exported (it lived here before `deletion_vectors`)

FULL, LITE = "full", "lite"
MODES = (FULL, LITE)
PLAN_FORMAT = "delta-vacuum-plan/1"
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
    """A file a plan deletes: path relative to the table root (as stored), size in bytes."""

    path: str
    size: int

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size}


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

    A plan made on Spark may be too big to carry its files (`engines.spark_vacuum`): `totals` then holds
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
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> VacuumPlan:
        """A plan from `to_dict` output (or a `VacuumResult.to_dict()` of a dry run).

        `files` is the plan unless the dict says `"files_inline": false` (then its counts are read and
        the list is at `files_uri`): a hand-edited list is what gets re-validated and applied.
        """
        if not isinstance(d, Mapping):
            raise InvalidArgumentError(f"A vacuum plan must be a mapping, got {type(d).__name__}", argument="plan")
        try:
            files = [PlannedFile(str(f["path"]), int(f.get("size") or 0)) for f in d["files"]]
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


def plan_candidates(
    candidates: Candidates,
    *,
    table: str,
    version: int,
    cutoff_ms: int,
    retention_ms: int,
    protocol: Mapping[str, Any] | None = None,
) -> VacuumPlan:
    """The FULL plan: the `candidates` modified before `cutoff_ms`, one per comparable path (the first
    listed), sorted by path."""
    keep = [i for i, mtime in enumerate(candidates.mtimes) if mtime < cutoff_ms]
    keys = [candidates.keys[i] for i in keep]
    if len(set(keys)) != len(keys):  # two stored spellings of one path (NFC and NFD): the first listed
        seen: set[str] = set()
        keep = [i for i, key in zip(keep, keys, strict=True) if not (key in seen or seen.add(key))]
    paths, sizes = candidates.paths, candidates.sizes
    keep.sort(key=paths.__getitem__)
    files = [PlannedFile(paths[i], sizes[i]) for i in keep]
    return VacuumPlan(table, version, cutoff_ms, retention_ms, FULL, files, dict(protocol or {}))


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
    if mode == FULL:
        if listing is None:
            raise InvalidArgumentError("FULL mode needs a listing", argument="listing", table=table)
        return plan_candidates(
            candidates_of(listing, protected, partition_columns),
            table=table,
            version=version,
            cutoff_ms=cutoff_ms,
            retention_ms=retention_ms,
            protocol=protocol,
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
    return VacuumPlan(table, version, cutoff_ms, retention_ms, mode, files, dict(protocol or {}))


def revalidate(
    plan: VacuumPlan,
    *,
    active: Iterable[LoggedFile] = (),
    tombstones: Iterable[LoggedFile] = (),
    cutoff_ms: int,
    partition_columns: Sequence[str] = (),
    protected: AbstractSet[str] | None = None,
) -> tuple[list[PlannedFile], list[PlannedFile]]:
    """Split `plan.files` into (still deletable, dropped) against a newer snapshot: a file active again,
    tombstoned after `cutoff_ms`, or breaking a never-rule (a hand-edited plan) is dropped. `protected`,
    when given, is the snapshot's protected set already made (`protected_paths`; `active` and
    `tombstones` are then unused)."""
    if protected is None:
        protected = protected_paths(active, tombstones, cutoff_ms=cutoff_ms, table_root=plan.table)
    keep: list[PlannedFile] = []
    dropped: list[PlannedFile] = []
    for f in plan.files:
        rel = plan_entry_relative(f.path, partition_columns)  # the name rules
        ok = rel is not None and _unprotected(rel, protected)
        (keep if ok else dropped).append(f)
    return keep, dropped
