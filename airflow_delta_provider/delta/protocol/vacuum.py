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
decoding), NFC-normalized, without leading/trailing slashes.
"""

from __future__ import annotations

import datetime as dt
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from ..errors import InvalidArgumentError
from .actions import DeletionVectorDescriptor
from .deletion_vectors import DV_FILE_CORE, dv_relative_path
from .deletion_vectors import z85_decode as z85_decode  # re-exported (it lived here before `deletion_vectors`)

FULL, LITE = "full", "lite"
MODES = (FULL, LITE)
PLAN_FORMAT = "delta-vacuum-plan/1"
_VISIBLE_PREFIXES = ("_change_data", "_delta_index")


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


def deletable_name(relative: str, partition_columns: Sequence[str] = ()) -> bool:
    """The never-rules that need only the normalized relative path: not empty, no `..` part, not under
    `_delta_log`, not hidden (one row's check: the Spark engine runs it where the listing happens)."""
    if not relative or any(p == ".." for p in relative.split("/")):
        return False
    if relative == "_delta_log" or relative.startswith("_delta_log/"):
        return False
    return not is_hidden(relative, partition_columns)


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


def deletable(relative: str, protected: set[str], partition_columns: Sequence[str]) -> bool:
    """The never-rules on one normalized relative path (apart from mtime and retention of the listing)."""
    if not deletable_name(relative, partition_columns) or relative in protected:
        return False
    alias = dv_alias_key(relative)
    return alias is None or alias not in protected


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
            rel = listed_candidate(item, cutoff_ms, partition_columns)
            if rel is None or rel in chosen:
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
        rel = plan_entry_relative(f.path, partition_columns)
        ok = rel is not None and deletable(rel, protected, partition_columns)
        (keep if ok else dropped).append(f)
    return keep, dropped
