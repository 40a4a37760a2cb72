"""Declarative checks of a table's state at a version, for `SnapshotReplayOperator(checks=...)`.

A check spec is a plain dict (JSON-able, so it travels to the Spark job as an argument):

    {
        "protocol": {"min_reader_version": 1, "min_writer_version": 2},    # exact values expected
        "allowed_features": ["deletionVectors", "columnMapping"],         # reader+writer features allowed
        "schema_since": {"version": 3, "allow": "added_columns"},          # or "unchanged"
        "min_files": 1, "max_files": 100_000,
        "max_small_file_ratio": 0.5, "small_file_mb": 32,
        "partition_columns": ["date"],
        "no_duplicate_paths": True,
    }

Unknown keys are refused (`InvalidArgumentError`), so a typo never silently skips a check.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from ..delta.errors import InvalidArgumentError
from ..delta.protocol.schema import StructType
from ..delta.read.aggregates import DEFAULT_SMALL_FILE_BYTES
from ..delta.snapshot import Snapshot
from .charts import human_bytes
from .results import protocol_dict

KNOWN_CHECKS = (
    "protocol",
    "allowed_features",
    "schema_since",
    "min_files",
    "max_files",
    "max_small_file_ratio",
    "small_file_mb",
    "partition_columns",
    "no_duplicate_paths",
)
_PROTOCOL_KEYS = ("min_reader_version", "min_writer_version", "reader_features", "writer_features")


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check."""

    name: str
    passed: bool
    message: str
    expected: Any = None
    actual: Any = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def coerce_value(value: Any, kind: type, key: str) -> Any:
    """Rendered templates are strings: `"5"` -> 5, `"0.5"` -> 0.5, `"true"` -> True."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    try:
        if kind is bool:
            if text.lower() not in ("true", "false"):
                raise ValueError(text)
            return text.lower() == "true"
        return kind(text)
    except ValueError:
        raise InvalidArgumentError(f"{key} must be a {kind.__name__}, got {value!r}") from None


_TYPES: dict[str, type] = {
    "min_files": int,
    "max_files": int,
    "max_small_file_ratio": float,
    "small_file_mb": float,
    "no_duplicate_paths": bool,
}


def spec_mapping(spec: Mapping[str, Any] | str | None, *, null_json: bool = False) -> Mapping[str, Any]:
    """A check spec given as a mapping or its JSON; `{}` for None (and, with `null_json`, for JSON `null`)."""
    if spec is None:
        return {}
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except ValueError as exc:
            raise InvalidArgumentError(f"checks are not valid JSON: {exc}") from None
    if spec is None and null_json:
        return {}
    if not isinstance(spec, Mapping):
        raise InvalidArgumentError(f"checks must be a mapping, got {type(spec).__name__}")
    return spec


def validate_checks(spec: Mapping[str, Any] | str | None, *, allow_templates: bool = False) -> dict[str, Any]:
    """`spec` (a dict or its JSON) checked for unknown keys and value types; `{}` for None. Rendered strings
    are converted; with `allow_templates`, values still holding `{{ ... }}` are left for after rendering."""
    spec = spec_mapping(spec)
    unknown = sorted(set(spec) - set(KNOWN_CHECKS))
    if unknown:
        raise InvalidArgumentError(f"unknown checks {unknown}; known: {list(KNOWN_CHECKS)}")
    out = {}
    for key, value in spec.items():
        if allow_templates and isinstance(value, str) and "{{" in value:
            continue
        out[key] = coerce_value(value, _TYPES[key], key) if key in _TYPES else value
    for key in ("min_files", "max_files"):
        if key in out and (not isinstance(out[key], int) or isinstance(out[key], bool) or out[key] < 0):
            raise InvalidArgumentError(f"{key} must be a non-negative integer, got {out[key]!r}")
    if "max_small_file_ratio" in out and not (0 <= float(out["max_small_file_ratio"]) <= 1):
        raise InvalidArgumentError("max_small_file_ratio must be between 0 and 1")
    if "small_file_mb" in out and float(out["small_file_mb"]) <= 0:
        raise InvalidArgumentError("small_file_mb must be positive")
    if "protocol" in out:
        bad = sorted(set(out["protocol"]) - set(_PROTOCOL_KEYS))
        if bad:
            raise InvalidArgumentError(f"protocol check has unknown keys {bad}; known: {list(_PROTOCOL_KEYS)}")
    if "schema_since" in out:
        since = out["schema_since"]
        if not isinstance(since, Mapping) or not isinstance(since.get("version"), int):
            raise InvalidArgumentError('schema_since needs {"version": N, "allow": "unchanged"|"added_columns"}')
        if since.get("allow", "added_columns") not in ("unchanged", "added_columns"):
            raise InvalidArgumentError('schema_since.allow must be "unchanged" or "added_columns"')
    if "partition_columns" in out and not isinstance(out["partition_columns"], list | tuple):
        raise InvalidArgumentError("partition_columns must be a list of column names")
    return out


def small_file_bytes(spec: Mapping[str, Any]) -> int:
    """The small-file threshold a check spec uses (`small_file_mb`, default 32 MiB)."""
    mb = spec.get("small_file_mb")
    return DEFAULT_SMALL_FILE_BYTES if mb is None else int(float(mb) * 1024 * 1024)


def schema_change(old: StructType, new: StructType) -> tuple[list[str], list[str], list[str]]:
    """(added, dropped, changed) top-level columns from `old` to `new` (type or nullability narrowed)."""
    old_fields = {f.name: f for f in old.fields}
    new_fields = {f.name: f for f in new.fields}
    added = [n for n in new_fields if n not in old_fields]
    dropped = [n for n in old_fields if n not in new_fields]
    changed = [
        n
        for n, f in old_fields.items()
        if n in new_fields
        and (
            json.dumps(f.type, sort_keys=True) != json.dumps(new_fields[n].type, sort_keys=True)
            or (f.nullable and not new_fields[n].nullable)
        )
    ]
    return added, dropped, changed


def evaluate_checks(
    spec: Mapping[str, Any], snap: Snapshot, schema_at: Callable[[int], StructType] | None = None
) -> list[CheckResult]:
    """Every check of `spec` against `snap`. `schema_at(version)` gives an older schema (`schema_since`)."""
    spec = validate_checks(spec)
    out: list[CheckResult] = []

    def check(name: str, ok: bool, message: str, expected: Any, actual: Any) -> None:
        out.append(CheckResult(name, ok, message, expected, actual))

    summary = None
    if {"min_files", "max_files", "max_small_file_ratio"} & set(spec):
        summary = snap.file_summary(small_file_bytes(spec))
    p = snap.protocol
    if "protocol" in spec:
        actual = {k: sorted(v) if isinstance(v, list) else v for k, v in protocol_dict(p).items()}
        expected = {k: (sorted(v) if isinstance(v, list | tuple) else v) for k, v in spec["protocol"].items()}
        wrong = {k: actual[k] for k in expected if actual[k] != expected[k]}
        message = f"protocol differs: expected {expected}, found {wrong}" if wrong else "protocol as expected"
        check("protocol", not wrong, message, expected, {k: actual[k] for k in expected})
    if "allowed_features" in spec:
        used = sorted(set(p.reader_features or ()) | set(p.writer_features or ()))
        extra = [f for f in used if f not in set(spec["allowed_features"])]
        message = f"table uses features not allowed: {extra}" if extra else "only allowed table features"
        check("allowed_features", not extra, message, sorted(spec["allowed_features"]), used)
    if "schema_since" in spec:
        since = spec["schema_since"]
        allow = since.get("allow", "added_columns")
        if schema_at is None:
            raise InvalidArgumentError("schema_since needs access to older versions of the log")
        added, dropped, changed = schema_change(schema_at(since["version"]), snap.schema)
        bad = bool(dropped or changed or (allow == "unchanged" and added))
        message = f"schema since version {since['version']}: added {added}, dropped {dropped}, changed {changed}"
        message += f" (allowed: {allow.replace('_', ' ')})" if bad else ""
        actual = {"added": added, "dropped": dropped, "changed": changed}
        check("schema_since", not bad, message, {"version": since["version"], "allow": allow}, actual)
    for name, within, breach in (
        ("min_files", lambda n, bound: n >= bound, "fewer than the minimum"),
        ("max_files", lambda n, bound: n <= bound, "more than the maximum"),
    ):
        if summary is not None and name in spec:
            ok = within(summary.num_files, spec[name])
            message = f"{summary.num_files} active files" + ("" if ok else f", {breach} {spec[name]}")
            check(name, ok, message, spec[name], summary.num_files)
    if summary is not None and "max_small_file_ratio" in spec:
        limit = float(spec["max_small_file_ratio"])
        ratio = summary.small_file_ratio
        ok = ratio <= limit
        message = (
            f"{summary.small_files} of {summary.num_files} files are under {human_bytes(summary.small_file_bytes)} "
            f"(ratio {ratio:.3f}" + (")" if ok else f", above the maximum {limit:g}; consider OPTIMIZE)")
        )
        check("max_small_file_ratio", ok, message, limit, round(ratio, 6))
    if "partition_columns" in spec:
        expected_cols, actual_cols = list(spec["partition_columns"]), list(snap.partition_columns)
        ok = expected_cols == actual_cols
        message = f"partitioned by {actual_cols}" + ("" if ok else f", expected {expected_cols}")
        check("partition_columns", ok, message, expected_cols, actual_cols)
    if spec.get("no_duplicate_paths"):
        dupes = snap.num_files - snap.num_distinct_paths()
        message = "every active path is unique" if dupes == 0 else f"{dupes} active file entries repeat a path"
        check("no_duplicate_paths", dupes == 0, message, 0, dupes)
    return out


def failed_checks_message(results: list[dict[str, Any]]) -> str | None:
    """One message naming every failed check (results as dicts), or None when all passed."""
    return "; ".join(f"{r['name']}: {r['message']}" for r in results if not r["passed"]) or None
