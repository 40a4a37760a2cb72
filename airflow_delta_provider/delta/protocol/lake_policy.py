"""The lake autopilot's policy: per-table maintenance thresholds, from Delta's table properties overridden by a
policy document (the parsed YAML or JSON of a policy file), validated with errors that name the offending key.

Defaults follow Delta's own properties (PROTOCOL.md "Table Properties" and Delta Spark's `DeltaConfigs`):
`delta.targetFileSize`, `delta.deletedFileRetentionDuration`, `delta.logRetentionDuration`,
`delta.checkpointInterval`, and auto compaction's conventions (`delta.autoOptimize.autoCompact`: files under half
the 128 MiB target are small, a partition is compacted from 50 of them, Delta Spark's `autoCompact.minNumFiles`).
A document applies its `defaults`, then every matching `tables` rule in order (later wins); a rule matches a
table URI by glob (`*`, `?`) or as a folder prefix.
"""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from ..errors import InvalidArgumentError
from .optimize import DEFAULT_MAX_DELETED_ROWS_RATIO, DEFAULT_TARGET_SIZE, TARGET_FILE_SIZE, parse_size
from .table_properties import deleted_file_retention_ms, log_retention_ms, parse_duration_ms

#: The operations the autopilot plans, in the order a table's tasks run.
LAKE_OPERATIONS = ("optimize", "vacuum", "checkpoint", "log_cleanup")
AUTO_COMPACT = "delta.autoOptimize.autoCompact"
CHECKPOINT_INTERVAL = "delta.checkpointInterval"
#: Delta Spark's `DeltaConfigs.CHECKPOINT_INTERVAL` default.
DEFAULT_CHECKPOINT_INTERVAL = 10
#: How many folders below a prefix lake discovery looks for `_delta_log` (`lake.discover`); here, not there,
#: so a command line reads it without loading the `lake` package.
DEFAULT_MAX_DEPTH = 4
#: Delta Spark's auto compaction: `autoCompact.maxFileSize` (128 MiB) and `autoCompact.minNumFiles` (50).
AUTO_COMPACT_TARGET = 128 * 1024 * 1024
AUTO_COMPACT_MIN_FILES = 50


@dataclass(frozen=True)
class TablePolicy:
    """What the autopilot may do to one table and from which thresholds; sizes in bytes, durations in ms."""

    target_file_size: int = DEFAULT_TARGET_SIZE
    small_file_bytes: int = DEFAULT_TARGET_SIZE // 2
    min_small_files: int = AUTO_COMPACT_MIN_FILES
    max_deleted_rows_ratio: float = DEFAULT_MAX_DELETED_ROWS_RATIO
    deleted_file_retention_ms: int = 7 * 86_400_000
    log_retention_ms: int = 30 * 86_400_000
    checkpoint_interval: int = DEFAULT_CHECKPOINT_INTERVAL
    min_vacuum_bytes: int = 1
    min_log_files: int = 1
    #: Never touch this table (it is still scanned and reported).
    skip: bool = False
    #: Operations never planned for this table.
    disabled: frozenset[str] = frozenset()
    #: Operations planned but only run after a person approves.
    never_unattended: frozenset[str] = frozenset()
    #: Tables with at least this many active files (the state a driver replays, VACUUM lists, a checkpoint
    #: writes) run their maintenance on Spark; None: every table on the local engine.
    spark_min_files: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["disabled"], out["never_unattended"] = sorted(self.disabled), sorted(self.never_unattended)
        return out


_SIZES = ("target_file_size", "small_file_bytes", "min_vacuum_bytes")
_DURATIONS = ("deleted_file_retention", "log_retention")
_COUNTS = ("min_small_files", "checkpoint_interval", "min_log_files", "spark_min_files")
_OP_SETS = ("disabled", "never_unattended")
_RULE_KEYS = frozenset((*_SIZES, *_DURATIONS, *_COUNTS, *_OP_SETS, "max_deleted_rows_ratio", "skip"))
_TOP_KEYS = frozenset(("version", "defaults", "tables", "never_touch", "never_unattended"))


@dataclass(frozen=True)
class PolicyRule:
    """Overrides for the tables `match` selects (None: every table)."""

    match: str | None
    values: Mapping[str, Any]

    def matches(self, table: str) -> bool:
        if self.match is None:
            return True
        pattern = self.match.rstrip("/")
        if any(c in pattern for c in "*?["):
            return fnmatch.fnmatchcase(table, pattern)
        return table == pattern or table.startswith(pattern + "/")


@dataclass(frozen=True)
class LakePolicy:
    """A validated policy document: its rules in the order they apply."""

    rules: tuple[PolicyRule, ...] = ()

    def for_table(self, table: str, configuration: Mapping[str, str | None]) -> TablePolicy:
        """The table's policy: Delta's properties, then each matching rule (later wins)."""
        policy = defaults_from_properties(configuration)
        for rule in self.rules:
            if rule.matches(table):
                policy = _apply(policy, rule.values, table)
        return policy


def defaults_from_properties(configuration: Mapping[str, str | None]) -> TablePolicy:
    """The thresholds Delta's own table properties imply."""
    auto = str(configuration.get(AUTO_COMPACT) or "").lower() in ("true", "auto", "legacy")
    configured = configuration.get(TARGET_FILE_SIZE)
    target = parse_size(str(configured)) if configured not in (None, "") else None
    target = target or (AUTO_COMPACT_TARGET if auto else DEFAULT_TARGET_SIZE)
    interval_text = configuration.get(CHECKPOINT_INTERVAL)
    interval = DEFAULT_CHECKPOINT_INTERVAL
    if interval_text not in (None, ""):
        interval = _count(interval_text, CHECKPOINT_INTERVAL, minimum=1)
    return TablePolicy(
        target_file_size=target,
        small_file_bytes=target // 2,
        deleted_file_retention_ms=deleted_file_retention_ms(configuration),
        log_retention_ms=log_retention_ms(configuration),
        checkpoint_interval=interval,
    )


def _apply(policy: TablePolicy, values: Mapping[str, Any], table: str) -> TablePolicy:
    """`policy` with `values` (already validated) applied; retentions may only grow: a policy never makes
    VACUUM or log cleanup delete what the table's own retention still protects."""
    changes = dict(values)
    if "target_file_size" in changes and "small_file_bytes" not in changes:
        changes["small_file_bytes"] = changes["target_file_size"] // 2
    for key in _DURATIONS:
        if key in changes:
            changes[f"{key}_ms"] = max(changes.pop(key), getattr(policy, f"{key}_ms"))
    for key in _OP_SETS:
        if key in changes:
            changes[key] = getattr(policy, key) | changes[key]
    return replace(policy, **changes)


def parse_policy(document: Any, *, origin: str = "policy") -> LakePolicy:
    """A `LakePolicy` from a parsed document; anything malformed is an `InvalidArgumentError` whose `argument`
    is the path of the bad key (`policy.tables[2].target_file_size`)."""
    if document is None:
        return LakePolicy()
    doc = _mapping(document, origin, _TOP_KEYS)
    version = doc.get("version", 1)
    if version != 1:
        raise _bad(f"{origin}.version", f"must be 1, got {version!r}")
    rules = [PolicyRule(None, _rule(doc.get("defaults") or {}, f"{origin}.defaults", with_match=False))]
    if "never_unattended" in doc:
        rules.append(
            PolicyRule(None, {"never_unattended": _ops(doc["never_unattended"], f"{origin}.never_unattended")})
        )
    tables = doc.get("tables") or []
    if not isinstance(tables, list):
        raise _bad(f"{origin}.tables", f"must be a list of rules, got {type(tables).__name__}")
    for i, raw in enumerate(tables):
        where = f"{origin}.tables[{i}]"
        values = _rule(raw, where, with_match=True)
        rules.append(PolicyRule(_match(raw.get("match"), f"{where}.match"), values))
    never = doc.get("never_touch") or []
    if not isinstance(never, list):
        raise _bad(f"{origin}.never_touch", "must be a list of table URIs or globs")
    rules.extend(PolicyRule(_match(m, f"{origin}.never_touch[{i}]"), {"skip": True}) for i, m in enumerate(never))
    return LakePolicy(tuple(r for r in rules if r.values))


def _rule(raw: Any, where: str, *, with_match: bool) -> dict[str, Any]:
    keys = _RULE_KEYS | ({"match"} if with_match else set())
    rule = _mapping(raw, where, keys)
    if with_match and "match" not in rule:
        raise _bad(f"{where}.match", "is required: a table URI, folder prefix or glob")
    out: dict[str, Any] = {}
    for key, value in rule.items():
        arg = f"{where}.{key}"
        if key in _SIZES:
            out[key] = _size(value, arg)
        elif key in _DURATIONS:
            out[key] = parse_duration_ms(value, arg)
        elif key in _COUNTS:
            out[key] = _count(value, arg, minimum=1)
        elif key in _OP_SETS:
            out[key] = _ops(value, arg)
        elif key == "max_deleted_rows_ratio":
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
                raise _bad(arg, f"must be a number between 0 and 1, got {value!r}")
            out[key] = float(value)
        elif key == "skip":
            if not isinstance(value, bool):
                raise _bad(arg, f"must be true or false, got {value!r}")
            out[key] = value
    return out


def _mapping(raw: Any, where: str, allowed: frozenset[str] | set[str]) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        raise _bad(where, f"must be a mapping, got {type(raw).__name__}")
    for key in raw:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), sorted(allowed), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; expected one of {sorted(allowed)}"
            raise _bad(f"{where}.{key}", f"is not a policy key{hint}")
    return dict(raw)


def _match(value: Any, arg: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _bad(arg, f"must be a table URI, folder prefix or glob, got {value!r}")
    return value.strip()


def _size(value: Any, arg: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    if isinstance(value, str):
        return parse_size(value, argument=arg)
    raise _bad(arg, f"must be a positive byte size such as 268435456 or 256mb, got {value!r}")


def _count(value: Any, arg: str, *, minimum: int) -> int:
    try:
        number = int(str(value).strip()) if not isinstance(value, bool) else None
    except ValueError:
        number = None
    if number is None or number < minimum:
        raise _bad(arg, f"must be an integer of at least {minimum}, got {value!r}")
    return number


def _ops(value: Any, arg: str) -> frozenset[str]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, Sequence) or not all(isinstance(v, str) for v in items):
        raise _bad(arg, f"must be a list of operations from {list(LAKE_OPERATIONS)}, got {value!r}")
    unknown = sorted(set(items) - set(LAKE_OPERATIONS))
    if unknown:
        raise _bad(arg, f"names unknown operations {unknown}; expected some of {list(LAKE_OPERATIONS)}")
    return frozenset(items)


def _bad(argument: str, why: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"Invalid lake policy: {argument} {why}", argument=argument)
