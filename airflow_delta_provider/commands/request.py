"""One request: the fields every action shares, plus one options dataclass per action, serialized once.

Every face builds a `Request` the same way (`Request.make(table=..., action=..., **fields)`: each field
goes to the common part or to the action's options, and a field the action does not take is an
`InvalidArgumentError` naming it); the spark-submit job receives `Request.to_json()` and reads it
back with `Request.from_json` (storage options never travel in it: they come from the environment).
Values are checked here, before any I/O; faces parse text first with `commands.arguments`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from functools import partial
from typing import Any

from ..delta.errors import InvalidArgumentError, check_bool, check_int, check_number
from ..delta.protocol.history import to_epoch_ms
from ..delta.protocol.lake_policy import DEFAULT_MAX_DEPTH
from ..delta.protocol.optimize import DEFAULT_MIN_NUM_FILES, DEFAULT_SMALL_FILE_MB
from ..delta.protocol.predicate import parse_predicate
from ..delta.protocol.quarantine import check_quarantine_id
from .arguments import (
    as_version,
    parse_bytes,
    parse_choice,
    parse_count,
    parse_hours,
    parse_location,
    parse_number,
    parse_ratio,
    parse_size,
)

ENGINES = ("auto", "local", "spark")
#: VACUUM's modes: list the table (`full`) or the files removed in the log only (`lite`).
VACUUM_MODES = ("full", "lite")
#: `engine="auto"` distributes when the log segment to replay (checkpoint + commits) is at least this
#: big: below it the local engine replays faster than any cluster round trip (bench/RESULTS.md).
DEFAULT_AUTO_THRESHOLD_MB = float(os.environ.get("DELTA_AUTO_THRESHOLD_MB", 1024.0))


def _count(minimum: int = 0, optional: bool = True) -> Callable[[Any, str], Any]:
    return lambda value, name: (optional and value is None) or check_int(value, name, minimum=minimum)


def _number(minimum: float = 0, maximum: float = 1e12, optional: bool = True) -> Callable[[Any, str], Any]:
    return lambda v, name: (optional and v is None) or check_number(v, name, minimum=minimum, maximum=maximum)


def _text(expected: str) -> Callable[[Any, str], None]:
    """A check of optional non-blank text: "`name` must `expected`, got ..." otherwise."""

    def check(value: Any, name: str) -> None:
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise InvalidArgumentError(f"{name} must {expected}, got {value!r}", argument=name)

    return check


_location = _text("be a path or URI")


def _where(value: str | None, name: str) -> None:
    if value:
        parse_predicate(value, label="--where")  # syntax errors before any I/O


def _plan(value: Any, name: str) -> None:
    if value is not None and not isinstance(value, Mapping):
        raise InvalidArgumentError(f"plan must be a JSON object, got {type(value).__name__}", argument="plan")


def _mode(value: Any, name: str) -> None:
    if value not in VACUUM_MODES:
        raise InvalidArgumentError(f"mode must be one of {', '.join(VACUUM_MODES)}, got {value!r}", argument="mode")


def _uris(value: Any, name: str) -> None:
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) and v.strip() for v in value):
        raise InvalidArgumentError(f"{name} must be a list of paths or URIs, got {value!r}", argument=name)


def _opt(
    default: Any = None, check: Callable[[Any, str], Any] | None = None, doc: str | None = None, **cli: Any
) -> Any:
    """An option field: its default, the check every request runs on it, `parse` (from `commands.arguments`:
    how every face reads its text; `operators.parsers` too) and, with `doc` (its help), its `deltalog` flag
    (`cli`: `flag` when not `--<name>`, `choices`)."""
    return field(default=default, metadata={"check": check, "doc": doc, **cli})


def _switch(doc: str | None = None, *, default: bool = False, **cli: Any) -> Any:
    return _opt(default, check_bool, doc, **cli)


def _hours(doc: str | None = None) -> Any:
    return _opt(None, _number(), doc, parse=parse_hours)


def _uri(doc: str | None = None, **cli: Any) -> Any:
    return _opt(None, _location, doc, parse=parse_location, **cli)


_AT_LEAST_ONE = partial(parse_count, minimum=1)


def _positive(doc: str | None = None, parse: Callable[..., Any] = _AT_LEAST_ONE) -> Any:
    """An optional integer >= 1 (`parse_bytes` reads a size such as 10GiB)."""
    return _opt(None, _count(minimum=1), doc, parse=parse)


_DELETE = "delete (default: a dry run that deletes nothing)"
_FILE_RETENTION = "override delta.deletedFileRetentionDuration"


@dataclass(frozen=True)
class _Options:
    def __post_init__(self) -> None:
        for f in fields(self):
            if f.metadata["check"] is not None:
                f.metadata["check"](getattr(self, f.name), f.name)


@dataclass(frozen=True)
class NoOptions(_Options):
    """`version` and `checkpoint` take nothing beyond the common fields."""


@dataclass(frozen=True)
class SnapshotOptions(_Options):
    include_files: bool = _switch()
    #: checks at the version (`commands.checks`; with `since_version`, `commands.commit_checks`)
    checks: Mapping[str, Any] | None = _opt()
    #: also check every version and commit in (since_version, version]
    since_version: int | None = _opt(None, _count(), parse=as_version)
    fail_on_data_loss: bool = _switch()


@dataclass(frozen=True)
class TombstonesOptions(_Options):
    retention_hours: float | None = _hours(_FILE_RETENTION)
    include_files: bool = _switch()


@dataclass(frozen=True)
class FilesOptions(_Options):
    where: str | None = _opt(None, _where, "predicate, e.g. \"region = 'eu' OR (id > 10 AND d IS NOT NULL)\"")


@dataclass(frozen=True)
class HistoryOptions(_Options):
    limit: int | None = _opt(None, _count(), "at most this many commits", parse=parse_count)


@dataclass(frozen=True)
class ChangesOptions(_Options):
    fail_on_data_loss: bool = _switch("error when a commit in the range is missing")


@dataclass(frozen=True)
class CleanupLogOptions(_Options):
    retention_hours: float | None = _hours("override delta.logRetentionDuration")
    apply: bool = _switch(_DELETE)
    write_checkpoint_first: bool = _switch("write a checkpoint at the cutoff when none can be kept")
    #: the table's version lease folder (`maintenance.leases`; None: `<table>/_delta_leases`)
    lease_location: str | None = _uri()


@dataclass(frozen=True)
class VacuumOptions(_Options):
    retention_hours: float | None = _hours(_FILE_RETENTION)
    #: refuse a retention shorter than the table's (delta-rs's name)
    enforce_retention_duration: bool = _switch(
        "allow a retention shorter than the table's (dangerous)", default=True, flag="--no-enforce-retention"
    )
    untracked_grace_hours: float | None = _hours(
        "never delete an untracked file younger than this (default 1 hour; independent of the retention)"
    )
    mode: str = _opt(
        "full", _mode, "list the table (full) or the log (lite)", parse=partial(parse_choice, choices=VACUUM_MODES)
    )
    apply: bool = _switch(_DELETE)
    quarantine: bool = _switch(
        "move the files to <table>/_delta_quarantine/<id>/ instead of deleting them (`vacuum undo` puts them back; "
        "local engine)",
    )
    #: apply this plan (a dry run's result) instead of making one, or the plan kept at `plan_uri`
    plan: Mapping[str, Any] | None = _opt()
    plan_uri: str | None = _opt()
    #: on Spark: where the executors write a plan's file list (the job: `<result-uri>.plan/`)
    plan_dir: str | None = _opt()
    #: the table's version lease folder (`maintenance.leases`; None: `<table>/_delta_leases`)
    lease_location: str | None = _uri()


@dataclass(frozen=True)
class VacuumUndoOptions(_Options):
    quarantine_id: str = _opt(
        "",
        lambda value, name: check_quarantine_id(value),
        "the quarantine's id (from `vacuum --quarantine` or `vacuum list`)",
        positional=True,
    )


@dataclass(frozen=True)
class VacuumPurgeOptions(_Options):
    #: delete the quarantines made at least this many hours ago (0: every finished one)
    older_than_hours: float = _opt(168.0, _number(optional=False), parse=parse_hours)
    apply: bool = _switch(_DELETE)


@dataclass(frozen=True)
class OptimizeOptions(_Options):
    #: bytes per output file (default: delta.targetFileSize, else 100 MiB, delta-rs's default)
    target_size: int | None = _positive()
    min_num_files: int = _opt(
        DEFAULT_MIN_NUM_FILES,
        _count(minimum=1, optional=False),
        "compact a partition with at least N candidates",
        parse=_AT_LEAST_ONE,
    )
    where: str | None = _opt(None, _where, "partition predicate, e.g. \"date >= '2024-01-01'\"")
    #: compact only partitions where at least this share of files is under `small_file_mb`
    min_small_file_ratio: float | None = _opt(
        None,
        _number(maximum=1),
        "compact only partitions with at least this share of small files",
        parse=parse_ratio,
    )
    apply: bool = _switch("rewrite and commit (default: a dry run that writes nothing)")
    #: commit after each batch of bins of about this many input bytes
    max_commit_bytes: int | None = _positive()
    small_file_mb: float = _opt(
        DEFAULT_SMALL_FILE_MB,
        _number(minimum=1e-6, maximum=math.inf, optional=False),
        parse=partial(parse_size, unit="MiB"),
    )
    zorder_by: str | None = _opt(
        None,
        _text("name columns (comma-separated)"),
        "Z-order by these columns (comma-separated): every file of the selected partitions is rewritten",
        metavar="COL[,COL...]",
    )
    max_files: int | None = _positive("rewrite at most N files (the bins removing most files per byte first)")
    max_bytes: int | None = _positive("read at most this many bytes (e.g. 10GiB)", parse_bytes)


@dataclass(frozen=True)
class RestoreOptions(_Options):
    """The version to restore is the request's `version` or `timestamp` (or the plan's)."""

    allow_partial: bool = _switch("leave out files gone from storage instead of refusing")
    apply: bool = _switch("commit (default: a dry run that writes nothing)")
    #: apply this plan (a dry run's `plan`) once a fresh plan matches it, or the one kept at `plan_uri`
    plan: Mapping[str, Any] | None = _opt(None, _plan)
    plan_uri: str | None = _opt()


@dataclass(frozen=True)
class RepairOptions(_Options):
    apply: bool = _switch("commit the removes (default: a dry run that writes nothing)")


@dataclass(frozen=True)
class PurgeOptions(_Options):
    min_deleted_ratio: float = _opt(
        0.0,
        _number(maximum=1, optional=False),
        "rewrite only files whose deletion vector hides at least this share of rows (default 0: every one)",
        parse=parse_ratio,
    )
    where: str | None = _opt(None, _where, "partition predicate, e.g. \"date >= '2024-01-01'\"")
    max_files: int | None = _positive("rewrite at most N files (most dead bytes first)")
    max_bytes: int | None = _positive("read at most this many bytes (e.g. 10GiB)", parse_bytes)
    apply: bool = _switch("rewrite and commit (default: a dry run that writes nothing)")
    #: apply this plan (a dry run's `plan`), re-validated, or the one kept at `plan_uri`
    plan: Mapping[str, Any] | None = _opt(None, _plan)
    plan_uri: str | None = _opt()
    #: bytes per output file (default: delta.targetFileSize, else OPTIMIZE's default)
    target_size: int | None = _positive()
    #: commit after each batch of bins of about this many input bytes
    max_commit_bytes: int | None = _positive()


@dataclass(frozen=True)
class StatsBackfillOptions(_Options):
    where: str | None = _opt(None, _where, "partition predicate selecting the files")
    max_files: int | None = _positive("recompute at most N files")
    max_bytes: int | None = _positive("read at most about this many bytes (e.g. 10GiB)", parse_bytes)
    tighten: bool = _switch("also recompute wide stats (tightBounds=false, left by deletion vectors)")
    apply: bool = _switch("re-add the files with their stats (default: a dry run that writes nothing)")
    #: commit after each batch of this many files
    files_per_commit: int | None = _positive()


_PREFIXES = "prefixes to walk for tables (a prefix may itself be a table)"


@dataclass(frozen=True)
class LakeScanOptions(_Options):
    """The request's `table` labels the lake (its first prefix or table); `prefixes` and `tables` are scanned."""

    prefixes: tuple[str, ...] = _opt((), _uris, _PREFIXES, positional=True, nargs="*", metavar="PREFIX")
    tables: tuple[str, ...] = _opt(
        (), _uris, "a table to scan as well (repeatable)", flag="--table", action="append", metavar="URI"
    )
    policy: str | None = _uri("lake policy file (JSON or YAML)")
    max_depth: int = _opt(
        DEFAULT_MAX_DEPTH,
        _count(optional=False),
        f"look for tables at most N folders below a prefix (default {DEFAULT_MAX_DEPTH})",
        parse=parse_count,
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("prefixes", "tables"):  # JSON gives lists: one request reads back equal
            object.__setattr__(self, name, tuple(getattr(self, name)))


@dataclass(frozen=True)
class LakePlanOptions(LakeScanOptions):
    budget_bytes: int | None = _opt(
        None, _count(), "read and write at most this many bytes (e.g. 500GiB)", parse=parse_bytes
    )
    budget_requests: int | None = _opt(None, _count(), "make at most N storage requests", parse=parse_count)
    budget_seconds: float | None = _opt(None, _number(), "take at most about this many seconds", parse=parse_number)


PROOFS = ("counts", "content")


@dataclass(frozen=True)
class LakeRunOptions(LakePlanOptions):
    """The plan, run table by table (`delta.lake.run.run_table`), each rewrite proved, optionally recorded."""

    apply: bool = _switch("run the plan (default: plan only, as `lake plan`)")
    apply_vacuum: bool = _switch("also run the planned VACUUMs (they delete files)")
    verify: str = _opt(
        "counts",
        lambda value, name: parse_choice(value, name, choices=PROOFS),
        "prove rewrites by row counts or by content",
        parse=partial(parse_choice, choices=PROOFS),
    )
    history: str | None = _uri("append what ran to this Delta table")


#: The lake report's formats, by the extension of `--out` (anything else: HTML).
REPORT_FORMATS = {".json": "json", ".md": "md"}
#: Most runs a lake report shows by default (`commands.lake_report.MAX_RUNS`).
REPORT_MAX_RUNS = 30


@dataclass(frozen=True)
class LakeReportOptions(_Options):
    """The lake report (`commands.lake_report`) of the maintenance history that is the request's `table`."""

    table_uri: str | None = _uri("report this table only (as the history names it)", flag="--table", metavar="URI")
    max_runs: int = _opt(
        REPORT_MAX_RUNS,
        _count(minimum=1, optional=False),
        f"show the last N runs (default {REPORT_MAX_RUNS})",
        parse=_AT_LEAST_ONE,
    )
    out: str | None = _uri(
        "write the report to this file or URI: HTML, or Markdown/JSON for a .md/.json name", metavar="FILE"
    )
    health: bool = _switch(
        "read no table's log: health from what each run recorded at plan time only", default=True, flag="--no-health"
    )


#: Each action's options class (the command layer's `ACTIONS` maps the same names to their handlers).
OPTIONS: dict[str, type] = {
    "version": NoOptions,
    "snapshot": SnapshotOptions,
    "tombstones": TombstonesOptions,
    "files": FilesOptions,
    "history": HistoryOptions,
    "changes": ChangesOptions,
    "checkpoint": NoOptions,
    "cleanup_log": CleanupLogOptions,
    "vacuum": VacuumOptions,
    "vacuum_undo": VacuumUndoOptions,
    "vacuum_purge": VacuumPurgeOptions,
    "optimize": OptimizeOptions,
    "restore": RestoreOptions,
    "repair": RepairOptions,
    "purge": PurgeOptions,
    "stats_backfill": StatsBackfillOptions,
    "lake_scan": LakeScanOptions,
    "lake_plan": LakePlanOptions,
    "lake_run": LakeRunOptions,
    "lake_report": LakeReportOptions,
}


def option_names(action: str) -> tuple[str, ...]:
    """The option fields `action` takes."""
    return tuple(f.name for f in fields(OPTIONS[action]))


@dataclass(frozen=True)
class Request:
    """One action on one table. `storage_options` are fsspec options (never logged, serialized or returned)."""

    table: str
    action: str
    options: Any = None
    version: int | None = None
    timestamp: str | int | None = None
    engine: str = "auto"
    storage_options: Mapping[str, Any] = field(default_factory=dict, repr=False)
    now_ms: int | None = None
    snapshot_partitions: int = 50
    auto_threshold_mb: float = DEFAULT_AUTO_THRESHOLD_MB
    memory_limit_bytes: int | str | None = "auto"

    def __post_init__(self) -> None:
        if self.action not in OPTIONS:
            raise InvalidArgumentError(
                f"action must be one of {tuple(OPTIONS)}, got {self.action!r}", argument="action", table=self.table
            )
        if self.options is None:
            object.__setattr__(self, "options", OPTIONS[self.action]())
        elif not isinstance(self.options, OPTIONS[self.action]):
            raise InvalidArgumentError(
                f"{self.action} takes {OPTIONS[self.action].__name__}, got {type(self.options).__name__}",
                argument="options",
                table=self.table,
            )
        if self.engine not in ENGINES:
            raise InvalidArgumentError(
                f"engine must be one of {ENGINES}, got {self.engine!r}", argument="engine", table=self.table
            )
        if self.version is not None and self.timestamp is not None:
            raise InvalidArgumentError("give version or timestamp, not both", argument="version", table=self.table)
        for name in ("version", "now_ms"):
            if getattr(self, name) is not None:
                check_int(getattr(self, name), name, minimum=0, table=self.table)
        check_int(self.snapshot_partitions, "snapshot_partitions", minimum=1, table=self.table)
        check_number(self.auto_threshold_mb, "auto_threshold_mb", minimum=0, table=self.table)
        if self.timestamp is not None:
            to_epoch_ms(self.timestamp, argument="timestamp")

    @classmethod
    def make(cls, *, table: str, action: str, **values: Any) -> Request:
        """A request from flat fields: the common ones, then the action's options. A field that is neither
        is an `InvalidArgumentError` naming it (and the action)."""
        if action not in OPTIONS:
            raise InvalidArgumentError(f"action must be one of {tuple(OPTIONS)}, got {action!r}", argument="action")
        common = {f.name for f in fields(cls)} - {"table", "action", "options"}
        taken = set(option_names(action))
        unknown = sorted(set(values) - common - taken)
        if unknown:
            raise InvalidArgumentError(
                f"{unknown[0]} does not apply to {action} (it takes {', '.join(sorted(taken)) or 'no options'})",
                argument=unknown[0],
                table=table,
            )
        try:
            options = OPTIONS[action](**{k: v for k, v in values.items() if k in taken})
        except InvalidArgumentError as exc:
            exc.table = exc.table or table
            raise exc from None
        return cls(table=table, action=action, options=options, **{k: v for k, v in values.items() if k in common})

    def with_options(self, **values: Any) -> Request:
        """This request with some options replaced."""
        return replace(self, options=replace(self.options, **values))

    def to_json(self) -> str:
        """The request as JSON, without the storage options (the spark-submit job's one argument)."""
        body = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("storage_options", "options")}
        body["options"] = asdict(self.options)
        return json.dumps(body, sort_keys=True, default=dict)

    @classmethod
    def from_json(cls, text: str, storage_options: Mapping[str, Any] | None = None) -> Request:
        """`to_json`'s inverse; anything malformed is an `InvalidArgumentError` naming the field."""
        try:
            body = json.loads(text)
        except ValueError as exc:
            raise InvalidArgumentError(f"the request is not JSON: {exc}", argument="request") from None
        if not isinstance(body, dict) or not isinstance(body.get("options", {}), dict):
            raise InvalidArgumentError("the request must be a JSON object", argument="request")
        options = body.pop("options", {}) or {}
        table, action = body.pop("table", None), body.pop("action", None)
        if not isinstance(table, str) or not table:
            raise InvalidArgumentError("the request names no table", argument="table")
        return cls.make(table=table, action=action, storage_options=dict(storage_options or {}), **body, **options)
