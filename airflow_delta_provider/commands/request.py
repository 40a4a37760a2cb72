"""One request: the fields every action shares, plus one options dataclass per action, serialized once.

Every face builds a `Request` the same way (`Request.make(table=..., action=..., **fields)`: each field
goes to the common part or to the action's options, and a field the action does not take is an
`InvalidArgumentError` naming it); the spark-submit job receives `Request.to_json()` and reads it
back with `Request.from_json` (storage options never travel in it: they come from the environment).
Values are checked here, before any I/O; faces parse text first with `commands.arguments`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from ..delta.errors import InvalidArgumentError, check_bool, check_int, check_number
from ..delta.protocol.history import to_epoch_ms
from ..delta.protocol.optimize import DEFAULT_MIN_NUM_FILES, DEFAULT_SMALL_FILE_MB
from ..delta.protocol.predicate import parse_predicate
from ..delta.protocol.quarantine import check_quarantine_id

ENGINES = ("auto", "local", "spark")
#: VACUUM's modes: list the table (`full`) or the files removed in the log only (`lite`).
VACUUM_MODES = ("full", "lite")
#: `engine="auto"` distributes when the log segment to replay (checkpoint + commits) is at least this
#: big: below it the local engine replays faster than any cluster round trip (bench/RESULTS.md).
DEFAULT_AUTO_THRESHOLD_MB = float(os.environ.get("DELTA_AUTO_THRESHOLD_MB", 1024.0))


def _flags(options: Any, *names: str) -> None:
    for name in names:
        check_bool(getattr(options, name), name)


def _counts(options: Any, *names: str, minimum: int = 0) -> None:
    for name in names:
        if getattr(options, name) is not None:
            check_int(getattr(options, name), name, minimum=minimum)


def _hours(options: Any, *names: str) -> None:
    for name in names:
        if getattr(options, name) is not None:
            check_number(getattr(options, name), name, minimum=0, maximum=1e12)


def _location(options: Any, *names: str) -> None:
    for name in names:
        value = getattr(options, name)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise InvalidArgumentError(f"{name} must be a path or URI, got {value!r}", argument=name)


def _where(where: str | None) -> None:
    if where:
        parse_predicate(where, label="--where")  # syntax errors before any I/O


@dataclass(frozen=True)
class NoOptions:
    """`version` and `checkpoint` take nothing beyond the common fields."""


@dataclass(frozen=True)
class SnapshotOptions:
    include_files: bool = False
    #: checks evaluated at the version (`commands.checks`; with `since_version`, `commands.commit_checks`)
    checks: Mapping[str, Any] | None = None
    #: also check every version and commit in (since_version, version]
    since_version: int | None = None
    fail_on_data_loss: bool = False

    def __post_init__(self) -> None:
        _flags(self, "include_files", "fail_on_data_loss")
        _counts(self, "since_version")


@dataclass(frozen=True)
class TombstonesOptions:
    retention_hours: float | None = None
    include_files: bool = False

    def __post_init__(self) -> None:
        _flags(self, "include_files")
        _hours(self, "retention_hours")


@dataclass(frozen=True)
class FilesOptions:
    #: a predicate in the `delta.protocol.predicate` grammar
    where: str | None = None

    def __post_init__(self) -> None:
        _where(self.where)


@dataclass(frozen=True)
class HistoryOptions:
    limit: int | None = None

    def __post_init__(self) -> None:
        _counts(self, "limit")


@dataclass(frozen=True)
class ChangesOptions:
    fail_on_data_loss: bool = False

    def __post_init__(self) -> None:
        _flags(self, "fail_on_data_loss")


@dataclass(frozen=True)
class CleanupLogOptions:
    retention_hours: float | None = None
    #: delete (the default is a dry run that deletes nothing)
    apply: bool = False
    #: write a checkpoint at the cutoff first when none can be kept
    write_checkpoint_first: bool = False
    #: the table's version lease folder (`maintenance.leases`; None: `<table>/_delta_leases`)
    lease_location: str | None = None

    def __post_init__(self) -> None:
        _flags(self, "apply", "write_checkpoint_first")
        _hours(self, "retention_hours")
        _location(self, "lease_location")


@dataclass(frozen=True)
class VacuumOptions:
    retention_hours: float | None = None
    apply: bool = False
    #: "full" (list the table) or "lite" (files removed in the log only)
    mode: str = "full"
    #: refuse a retention shorter than the table's (delta-rs's name)
    enforce_retention_duration: bool = True
    #: an untracked file younger than this many hours is never deleted (None: the default, 1 hour)
    untracked_grace_hours: float | None = None
    #: apply this plan (a dry run's result) instead of making one ...
    plan: Mapping[str, Any] | None = None
    #: ... or the plan kept at this path/URI (a dry run's `result_uri`), read when the action runs
    plan_uri: str | None = None
    #: on Spark: where the executors write a plan's file list (the job: `<result-uri>.plan/`)
    plan_dir: str | None = None
    #: move the files to `<table>/_delta_quarantine/<id>/` instead of deleting them (local engine only;
    #: `vacuum_undo` puts them back, `vacuum_purge` deletes old quarantines)
    quarantine: bool = False
    #: the table's version lease folder (`maintenance.leases`; None: `<table>/_delta_leases`)
    lease_location: str | None = None

    def __post_init__(self) -> None:
        _flags(self, "apply", "enforce_retention_duration", "quarantine")
        _hours(self, "retention_hours", "untracked_grace_hours")
        _location(self, "lease_location")
        if self.mode not in VACUUM_MODES:
            raise InvalidArgumentError(
                f"mode must be one of {', '.join(VACUUM_MODES)}, got {self.mode!r}", argument="mode"
            )


@dataclass(frozen=True)
class VacuumUndoOptions:
    #: the quarantine to put back (a `vacuum` result's `quarantine_id`)
    quarantine_id: str = ""

    def __post_init__(self) -> None:
        check_quarantine_id(self.quarantine_id)


@dataclass(frozen=True)
class VacuumPurgeOptions:
    #: delete the quarantines made at least this many hours ago (0: every finished one)
    older_than_hours: float = 168.0
    #: delete (the default is a dry run that deletes nothing)
    apply: bool = False

    def __post_init__(self) -> None:
        _flags(self, "apply")
        check_number(self.older_than_hours, "older_than_hours", minimum=0, maximum=1e12)


@dataclass(frozen=True)
class OptimizeOptions:
    #: commit (the default plans only)
    apply: bool = False
    where: str | None = None
    #: bytes per output file (default: delta.targetFileSize, else 256 MiB)
    target_size: int | None = None
    #: a partition needs this many candidate files
    min_num_files: int = DEFAULT_MIN_NUM_FILES
    #: commit after each batch of bins of about this many input bytes
    max_commit_bytes: int | None = None
    #: compact only partitions where at least this share of files is under `small_file_mb`
    min_small_file_ratio: float | None = None
    small_file_mb: float = DEFAULT_SMALL_FILE_MB

    def __post_init__(self) -> None:
        _flags(self, "apply")
        _counts(self, "target_size", "max_commit_bytes", minimum=1)
        check_int(self.min_num_files, "min_num_files", minimum=1)
        check_number(self.small_file_mb, "small_file_mb", minimum=1e-6)
        if self.min_small_file_ratio is not None:
            check_number(self.min_small_file_ratio, "min_small_file_ratio", minimum=0, maximum=1)
        _where(self.where)


@dataclass(frozen=True)
class RestoreOptions:
    """The version to restore is the request's `version` or `timestamp` (or the plan's)."""

    #: commit (the default plans only)
    apply: bool = False
    #: leave out (and report) files of the version to restore that storage no longer holds, instead of refusing
    allow_partial: bool = False
    #: apply this plan (a dry run's `plan`) once a fresh plan matches it ...
    plan: Mapping[str, Any] | None = None
    #: ... or the plan in the dry run's result kept at this path/URI, read when the action runs
    plan_uri: str | None = None

    def __post_init__(self) -> None:
        _flags(self, "apply", "allow_partial")
        if self.plan is not None and not isinstance(self.plan, Mapping):
            raise InvalidArgumentError(f"plan must be a JSON object, got {type(self.plan).__name__}", argument="plan")


@dataclass(frozen=True)
class RepairOptions:
    #: remove the missing files in an FSCK commit (the default reports them only)
    apply: bool = False

    def __post_init__(self) -> None:
        _flags(self, "apply")


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
}
#: Actions that write to the table (`cleanup_log`, `vacuum` and `vacuum_purge` delete only with `apply`;
#: `optimize` rewrites only with `apply` and deletes nothing; `restore` and `repair` commit only with
#: `apply`; `vacuum_undo` moves a quarantine's files back).
WRITE_ACTIONS = ("checkpoint", "cleanup_log", "vacuum", "vacuum_undo", "vacuum_purge", "optimize", "restore", "repair")


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
            raise replace_table(exc, table) from None
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


def replace_table(exc: InvalidArgumentError, table: str) -> InvalidArgumentError:
    """`exc`, naming `table` when it named none."""
    if not exc.table:
        exc.table = table
    return exc
