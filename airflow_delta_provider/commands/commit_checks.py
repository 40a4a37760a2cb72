"""Checks at every version since the last run, and checks of each commit: `check_commits`.

A spec holds the state checks of `checks.py` (evaluated at each version of `(since, until]`) and these
per-commit checks:

    {
        "append_only": True,             # no data-changing remove; "table": only where delta.appendOnly=true
        "protocol_changes": "none",      # or "upgrades": versions never lowered, no table feature dropped
        "schema_changes": "added_columns",   # or "none"; a partitioning change always fails
        "no_unknown_removes": True,      # a remove of a file (path + DV) not active just before it
        "max_dv_growth": 1000,           # rows newly marked deleted by deletion vectors in one commit
        "allowed_operations": ["WRITE", "STREAMING UPDATE"],   # commitInfo.operation (none: fails)
        "include_maintenance": False,    # the default: commits that change no data are not checked
    }

A commit that changes no data (`changes_data`) is applied but not checked, and listed in
`maintenance_versions`: PROTOCOL.md "Add File and Remove File" says `dataChange` false "only rearranges
existing data or adds new statistics". A version whose commit file is gone is, with `fail_on_data_loss`, a
`missing_commits` failure; the walk resumes at the next checkpoint in the range (versions in between are
`unchecked_versions`), where the checks comparing a commit with the state before it are skipped.

Cost: one snapshot load at `since_version`, then only the range's commits: the paths the range touches
are looked up once in the start snapshot (one Arrow pass), so a version costs its own actions, not the
table's size (`bench/commit_checks_bench.py`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, cast

from ..delta.errors import InvalidArgumentError, LogCorruptedError, VersionNotFoundError, check_int
from ..delta.protocol.actions import (
    Action,
    AddCDCFile,
    AddFile,
    CommitInfo,
    Metadata,
    Protocol,
    RemoveFile,
    canonical_path,
)
from ..delta.protocol.filenames import LogFileKind
from ..delta.protocol.log_segment import complete_checkpoints, parse_listing
from ..delta.protocol.schema import StructType
from ..delta.protocol.table_features import table_features
from ..delta.protocol.table_properties import APPEND_ONLY
from ..delta.read.aggregates import FileSummary
from .active_files import ActiveFiles, lookup_base
from .arguments import is_template, parse_flag
from .checks import (
    KNOWN_CHECKS,
    coerce_value,
    evaluate_checks,
    schema_change,
    small_file_bytes,
    spec_mapping,
    validate_checks,
)

if TYPE_CHECKING:  # pragma: no cover
    from ..delta.delta_log import DeltaLog
    from ..delta.snapshot import Snapshot

COMMIT_CHECKS = (
    "append_only",
    "protocol_changes",
    "schema_changes",
    "no_unknown_removes",
    "max_dv_growth",
    "allowed_operations",
)
#: The switch that checks maintenance commits too (default false: they are skipped).
INCLUDE_MAINTENANCE = "include_maintenance"
#: The check name of a missing commit file (`fail_on_data_loss`).
MISSING_COMMITS = "missing_commits"
_SWITCHES = {"append_only": 'true, false or "table"', "no_unknown_removes": "a boolean"}
_CHOICES = {"protocol_changes": ("none", "upgrades"), "schema_changes": ("none", "added_columns")}


# -- the spec -------------------------------------------------------------------------------------------
def validate_commit_checks(spec: Mapping[str, Any] | str | None, *, allow_templates: bool = False) -> dict[str, Any]:
    """A spec of state checks (`checks.KNOWN_CHECKS`) and per-commit checks (`COMMIT_CHECKS`), validated."""
    spec = spec_mapping(spec, null_json=True)
    known = [*KNOWN_CHECKS, *COMMIT_CHECKS, INCLUDE_MAINTENANCE]
    unknown = sorted(set(spec) - set(known))
    if unknown:
        raise InvalidArgumentError(f"unknown checks {unknown}; known: {known}")
    out = validate_checks({k: v for k, v in spec.items() if k in KNOWN_CHECKS}, allow_templates=allow_templates)
    if INCLUDE_MAINTENANCE in spec:
        value = spec[INCLUDE_MAINTENANCE]
        if not (allow_templates and is_template(value)):
            value = parse_flag(value, INCLUDE_MAINTENANCE)
        out[INCLUDE_MAINTENANCE] = value
    for key in COMMIT_CHECKS:
        if key not in spec:
            continue
        value = spec[key]
        if allow_templates and isinstance(value, str) and "{{" in value:
            continue
        if key == "append_only" and isinstance(value, str) and value.strip().lower() == "table":
            value = "table"
        elif key in _SWITCHES:
            if not isinstance(value := coerce_value(value, bool, key), bool):
                raise InvalidArgumentError(f"{key} must be {_SWITCHES[key]}, got {value!r}")
        elif key == "max_dv_growth":
            value = coerce_value(value, int, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise InvalidArgumentError(f"max_dv_growth must be a non-negative integer, got {value!r}")
        elif key == "allowed_operations":
            if isinstance(value, str) or not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
                raise InvalidArgumentError("allowed_operations must be a list of operation names")
            value = list(value)
        elif value not in _CHOICES[key]:
            raise InvalidArgumentError(f"{key} must be one of {list(_CHOICES[key])}, got {value!r}")
        out[key] = value
    return out


# -- the report -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CommitCheckFailure:
    """One failed check at one version."""

    version: int
    check: str
    message: str
    expected: Any = None
    actual: Any = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class CommitCheckReport:
    """What `check_commits` found in `(since_version, until_version]`; `seed_versions` are where a snapshot
    was loaded, `per_version` each checked version's `FileSummary`, operation (and `distinct_paths`)."""

    table: str
    since_version: int
    until_version: int
    checked_versions: list[int] = field(default_factory=list)
    failures: list[CommitCheckFailure] = field(default_factory=list)
    missing_versions: list[int] = field(default_factory=list)
    unchecked_versions: list[int] = field(default_factory=list)
    maintenance_versions: list[int] = field(default_factory=list)
    seed_versions: list[int] = field(default_factory=list)
    per_version: list[dict[str, Any]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def first_failing_version(self) -> int | None:
        return min((f.version for f in self.failures), default=None)

    def failed_message(self, limit: int = 10) -> str | None:
        """One message naming the failing versions and checks (the first `limit`), or None."""
        if not self.failures:
            return None
        shown = "; ".join(f"version {f.version}: {f.check}: {f.message}" for f in self.failures[:limit])
        more = len(self.failures) - limit
        return shown + (f"; and {more} more" if more > 0 else "")

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        head = {k: out.pop(k) for k in ("table", "since_version", "until_version", "checked_versions")}
        return {**head, "first_failing_version": self.first_failing_version, **out}


# -- one commit -------------------------------------------------------------------------------------------
@dataclass
class _CommitFacts:
    """What the per-commit checks need to know about one commit."""

    version: int
    operation: str | None = None
    has_commit_info: bool = False
    data_change_removes: int = 0
    dv_growth: int = 0
    append_only_table: bool = False
    has_commit: bool = True  # False at a checkpoint whose own commit file is gone: state checks only
    maintenance: bool = False  # the commit changes no data (`changes_data` is false)
    prior_known: bool = True  # False at a checkpoint after a gap: no state before this commit
    unknown_removes: list[str] = field(default_factory=list)
    protocol_change: tuple[Protocol, Protocol] | None = None
    metadata_change: tuple[Metadata, Metadata] | None = None


def changes_data(actions: Iterable[Action]) -> bool:
    """Whether a commit changes the table's data or definition: a `metaData`, `protocol` or `cdc` action, or
    an `add` or `remove` with `dataChange` true (not OPTIMIZE, a stats backfill, a commitInfo/txn-only commit)."""
    for a in actions:
        if isinstance(a, Metadata | Protocol | AddCDCFile):
            return True
        if isinstance(a, AddFile | RemoveFile) and a.data_change:
            return True
    return False


def _local_facts(version: int, actions: Sequence[Action]) -> _CommitFacts:
    """The facts one commit's own actions tell (no earlier state needed)."""
    facts = _CommitFacts(version, maintenance=not changes_data(actions))
    added: Counter[str] = Counter()
    removed: Counter[str] = Counter()
    for a in actions:
        if isinstance(a, CommitInfo):
            facts.has_commit_info, facts.operation = True, a.operation
        elif isinstance(a, RemoveFile):
            facts.data_change_removes += a.data_change
            removed[canonical_path(a.path)] += a.deletion_vector.cardinality if a.deletion_vector else 0
        elif isinstance(a, AddFile) and a.deletion_vector is not None:
            added[canonical_path(a.path)] += a.deletion_vector.cardinality
    facts.dv_growth = sum(max(0, n - removed[p]) for p, n in added.items() if p in removed)
    return facts


def _append_only(metadata: Metadata | None) -> bool:
    return metadata is not None and str(metadata.configuration.get(APPEND_ONLY) or "").lower() == "true"


class _Walk:
    """The table state from a seed snapshot on, one commit at a time."""

    def __init__(self, snap: Snapshot, files: ActiveFiles) -> None:
        self.version = snap.version
        self.protocol: Protocol = snap.protocol
        self.metadata: Metadata = snap.metadata
        self.files = files

    def apply(self, version: int, actions: Sequence[Action]) -> _CommitFacts:
        facts = _local_facts(version, actions)
        protocol, metadata = self.protocol, self.metadata
        facts.append_only_table = _append_only(metadata)
        files = self.files
        for a in actions:
            if isinstance(a, AddFile):
                files.add(a.key, a.path, a.size)
            elif isinstance(a, RemoveFile):
                if not files.remove(a.key):
                    facts.unknown_removes.append(a.path)
            elif isinstance(a, Protocol):
                self.protocol = a
            elif isinstance(a, Metadata):
                self.metadata = a
        if _protocol_key(self.protocol) != _protocol_key(protocol):
            facts.protocol_change = (protocol, self.protocol)
        if self.metadata != metadata:
            facts.metadata_change = (metadata, self.metadata)
            facts.append_only_table = facts.append_only_table or _append_only(self.metadata)
        self.version = version
        return facts

    @property
    def schema(self) -> StructType:
        return _schema(self.metadata)

    # the part of `Snapshot` that `checks.evaluate_checks` reads
    @property
    def partition_columns(self) -> tuple[str, ...]:
        return self.metadata.partition_columns

    @property
    def num_files(self) -> int:
        return self.files.num_files

    def file_summary(self, small_file_bytes: int) -> FileSummary:
        if small_file_bytes != self.files.threshold:
            raise InvalidArgumentError("the walk tracks small files for one threshold only")  # a bug if reached
        return self.files.summary()

    def num_distinct_paths(self) -> int:
        assert self.files.distinct_paths is not None, "distinct paths are tracked for no_duplicate_paths only"
        return self.files.distinct_paths


def _protocol_key(p: Protocol) -> tuple[Any, ...]:
    """A protocol's identity: feature lists compare as sets."""
    features = [None if f is None else frozenset(f) for f in (p.reader_features, p.writer_features)]
    return (p.min_reader_version, p.min_writer_version, *features)


def _schema(metadata: Metadata) -> StructType:
    return _parse_schema(metadata.schema_string)


@functools.lru_cache(maxsize=64)
def _parse_schema(schema_string: str | None) -> StructType:
    return StructType.from_json(json.loads(schema_string) if schema_string else None)


# -- per-commit checks ------------------------------------------------------------------------------------
def _protocol_text(p: Protocol) -> str:
    feats = sorted(set(p.reader_features or ()) | set(p.writer_features or ()))
    return f"({p.min_reader_version}, {p.min_writer_version})" + (f" features {feats}" if feats else "")


def _commit_results(spec: Mapping[str, Any], f: _CommitFacts) -> list[CommitCheckFailure]:
    """The failed per-commit checks of one commit."""
    out: list[CommitCheckFailure] = []
    v = f.version
    if not f.has_commit:
        return out

    def fail(check: str, message: str, expected: Any = None, actual: Any = None) -> None:
        out.append(CommitCheckFailure(v, check, message, expected, actual))

    allowed = spec.get("allowed_operations")
    if allowed is not None and (not f.has_commit_info or f.operation not in allowed):
        shown = "the commit has no commitInfo" if not f.has_commit_info else f"operation {f.operation!r}"
        fail("allowed_operations", f"{shown} is not an allowed operation {allowed}", allowed, f.operation)
    mode = spec.get("append_only")
    if f.data_change_removes and (mode is True or (mode == "table" and f.append_only_table)):
        why = f"{APPEND_ONLY}=true" if mode == "table" else "append_only check"
        message = f"{f.data_change_removes} data-changing removes on an append-only table ({why})"
        fail("append_only", message, 0, f.data_change_removes)
    limit = spec.get("max_dv_growth")
    if limit is not None and f.dv_growth > limit:
        message = f"deletion vectors mark {f.dv_growth} more rows deleted (maximum {limit})"
        fail("max_dv_growth", message, limit, f.dv_growth)
    if not f.prior_known:
        return out
    if spec.get("no_unknown_removes") and f.unknown_removes:
        message = f"{len(f.unknown_removes)} removes of files not active before: {f.unknown_removes[:5]}"
        fail("no_unknown_removes", message, [], f.unknown_removes)
    allow = spec.get("protocol_changes")
    if allow is not None and f.protocol_change is not None:
        old, new = f.protocol_change
        lowered = (new.min_reader_version < old.min_reader_version) or (new.min_writer_version < old.min_writer_version)
        dropped = sorted(table_features(old) - table_features(new))
        if allow == "none" or lowered or dropped:
            detail = f"protocol {_protocol_text(old)} -> {_protocol_text(new)}"
            why = "" if allow == "none" else f" (a downgrade{': drops ' + str(dropped) if dropped else ''})"
            fail("protocol_changes", detail + why, allow, new.to_json())
    allow = spec.get("schema_changes")
    if allow is not None and f.metadata_change is not None:
        old_md, new_md = f.metadata_change
        added, dropped, changed = schema_change(_schema(old_md), _schema(new_md))
        parts_changed = old_md.partition_columns != new_md.partition_columns
        if dropped or changed or parts_changed or (allow == "none" and added):
            detail = f"schema change: added {added}, dropped {dropped}, changed {changed}"
            if parts_changed:
                detail += f"; partition columns {list(old_md.partition_columns)} -> {list(new_md.partition_columns)}"
            actual = {"added": added, "dropped": dropped, "changed": changed}
            fail("schema_changes", f"{detail} (allowed: {allow.replace('_', ' ')})", allow, actual)
    return out


# -- the range --------------------------------------------------------------------------------------------
def _load(log: DeltaLog, version: int, *, since: int) -> Snapshot | None:
    """The snapshot at `version`, or None when the log can no longer rebuild it (cleaned up)."""
    try:
        return log.snapshot_at(version=version)
    except VersionNotFoundError as exc:
        if exc.latest is not None and version > exc.latest:
            raise
        return None
    except LogCorruptedError:
        if version == since:  # the start must be readable; a checkpoint after a gap may be skipped
            raise
        return None


@contextlib.contextmanager
def _timed(timings: Counter[str], key: str) -> Iterator[None]:
    t = time.perf_counter()
    try:
        yield
    finally:
        timings[key] += time.perf_counter() - t


def _walk_from(snap: Snapshot, paths: set[str], state_spec: Mapping[str, Any], timings: Counter[str]) -> _Walk:
    """The walk's start: `snap`'s summary and those of its files that the coming commits name."""
    with _timed(timings, "summary_s"):
        summary = snap.file_summary(small_file_bytes(state_spec))
        distinct = snap.num_distinct_paths() if state_spec.get("no_duplicate_paths") else None  # O(table), once
    with _timed(timings, "lookup_s"):
        files = getattr(snap.state.files, "adds", None)  # the local engine's table, without checkpoint stats
        base = lookup_base(files if files is not None else snap.add_files_table, paths)
    return _Walk(snap, ActiveFiles(summary, base, distinct))


def check_commits(
    log: DeltaLog,
    since_version: int,
    until_version: int | None = None,
    spec: Mapping[str, Any] | None = None,
    *,
    fail_on_data_loss: bool = True,
) -> CommitCheckReport:
    """Check the state at every version in `(since_version, until_version]` (default: the latest) and each
    commit of it. `VersionNotFoundError` when either bound is above the latest version."""
    from ..delta.read.commits import read_commit

    table = log.table_uri
    since = check_int(since_version, "since_version", minimum=0, table=table)
    spec = validate_commit_checks(spec)
    include_maintenance = bool(spec.get(INCLUDE_MAINTENANCE, False))
    state_spec = {k: v for k, v in spec.items() if k in KNOWN_CHECKS}
    commit_spec = {k: v for k, v in spec.items() if k in COMMIT_CHECKS}
    timings: Counter[str] = Counter()
    with _timed(timings, "list_s"):
        parsed = parse_listing(log.list_log(since + 1))
        commits = {p.version: p for p in parsed if p.kind is LogFileKind.COMMIT and p.version > since}
        latest = max(commits) if commits else log.latest_version()
    if latest < since:
        raise VersionNotFoundError(
            f"since_version {since} is above the latest version {latest}", table=table, version=since, latest=latest
        )
    until = latest if until_version is None else check_int(until_version, "until_version", minimum=since, table=table)
    if until > latest:
        raise VersionNotFoundError(
            f"until_version {until} is above the latest version {latest}", table=table, version=until, latest=latest
        )
    checkpoints = sorted({c.version for c in complete_checkpoints(parsed) if since < c.version <= until})
    report = CommitCheckReport(table, since, until)
    schemas: dict[int, StructType] = {}

    def schema_at(version: int) -> StructType:
        if version not in schemas:
            schemas[version] = log.snapshot_at(version=version).schema
        return schemas[version]

    def read(version: int) -> list[Action]:
        with _timed(timings, "read_s"):
            return read_commit(log.store, table, commits[version])

    def record(walk: _Walk, facts: _CommitFacts) -> None:
        v = facts.version
        if facts.maintenance and facts.has_commit and not include_maintenance:
            report.maintenance_versions.append(v)  # applied to the walk, not checked
            return
        with _timed(timings, "checks_s"):
            report.failures.extend(_commit_results(commit_spec, facts))
            schemas.setdefault(v, walk.schema)
            for r in evaluate_checks(state_spec, cast("Snapshot", walk), schema_at) if state_spec else ():
                if not r.passed:
                    report.failures.append(CommitCheckFailure(v, r.name, r.message, r.expected, r.actual))
            report.checked_versions.append(v)
            row = {"version": v, "operation": facts.operation, **walk.files.summary().to_dict()}
            if walk.files.distinct_paths is not None:
                row["distinct_paths"] = walk.files.distinct_paths
            report.per_version.append(row)

    seed, todo = since, since + 1  # versions below `todo` are accounted for
    while todo <= until:
        run = []
        while todo + len(run) <= until and todo + len(run) in commits:
            run.append(todo + len(run))
        with _timed(timings, "load_s"):
            snap = None if seed == since and not run else _load(log, seed, since=since)  # no use for a lone start
        if snap is not None:
            report.seed_versions.append(seed)
            schemas.setdefault(seed, snap.schema)
            actions = {n: read(n) for n in run}  # the whole run first: the seed's files are looked up once
            paths = {a.path for n in run for a in actions[n] if isinstance(a, AddFile | RemoveFile)}
            walk = _walk_from(snap, paths, state_spec, timings)
            if seed != since:  # a checkpoint after a gap: its state, and its own commit without the one before
                facts = _local_facts(seed, read(seed)) if seed in commits else _CommitFacts(seed, has_commit=False)
                facts.prior_known, facts.append_only_table = False, _append_only(walk.metadata)
                record(walk, facts)
            for n in run:
                with _timed(timings, "walk_s"):
                    facts = walk.apply(n, actions[n])
                record(walk, facts)
            todo += len(run)
            if todo > until:
                break
        elif seed != since:
            todo = seed  # a checkpoint after a gap that cannot be loaded: its version is unchecked too
        # a gap at `todo` (or a start that cannot be rebuilt): on to the next checkpoint after it
        resume = next((c for c in checkpoints if c >= todo and c > seed), None)
        stop = until + 1 if resume is None else resume
        gap = [n for n in range(todo, stop) if n not in commits]
        if resume is not None and resume not in commits:  # checked from its checkpoint, but its commit is gone
            gap.append(resume)
        report.missing_versions.extend(gap)
        report.unchecked_versions.extend(n for n in range(todo, stop) if n in commits)
        if gap and fail_on_data_loss:
            where = "no checkpoint after them in the range" if resume is None else f"checks resume at {resume}"
            message = f"{len(gap)} commits missing from the log (log cleanup?): versions {version_ranges(gap)}; {where}"
            report.failures.append(CommitCheckFailure(gap[0], MISSING_COMMITS, message, [], gap))
        if resume is None:
            break
        seed, todo = resume, resume + 1
    report.failures.sort(key=lambda f: f.version)
    report.timings = {k: round(s, 4) for k, s in sorted(timings.items())}
    return report


def version_ranges(versions: Sequence[int]) -> str:
    """`[3, 4, 5, 9]` -> `3..5, 9` (`none` for no version)."""
    if not versions:
        return "none"
    out: list[str] = []
    start = prev = versions[0]
    for n in [*versions[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        out.append(str(start) if start == prev else f"{start}..{prev}")
        if n is not None:
            start = prev = n
    return ", ".join(out)


def xcom_fields(report: CommitCheckReport) -> dict[str, Any]:
    """The XCom fields of a report: `checked_versions`, `maintenance_versions`, `first_failing_version`,
    `failures`."""
    return {
        "checked_versions": list(report.checked_versions),
        "maintenance_versions": list(report.maintenance_versions),
        "first_failing_version": report.first_failing_version,
        "failures": [f.to_dict() for f in report.failures],
    }
