"""Which active files a query must read (`TahoeLogFileIndex.matchingFiles`).

Filters are `(column, op, value)` tuples, combined with AND; ops are `=`, `!=`, `<`, `<=`, `>`, `>=`,
`in`, `not in`, `is null`, `is not null`. Partition filters are evaluated exactly on typed partition
values. Data filters use stats (`minValues`, `maxValues`, `nullCount`, `numRecords`) and are
conservative: a file is dropped only when its stats prove no row can match. Missing stats keep the
file; string maxima that may be truncated and millisecond-cut timestamp maxima are widened.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..errors import InvalidArgumentError
from ..protocol.actions import AddFile
from ..protocol.schema import StructField, StructType, parse_partition_value

Filter = tuple[str, str, Any]
OPS = frozenset({"=", "==", "!=", "<", "<=", ">", ">=", "in", "not in", "is null", "is not null"})
#: Spark truncates string stats to this many characters (`dataSkippingStringPrefixLength`).
STRING_PREFIX_LENGTH = 32


def _typed(value: Any, field: StructField) -> Any:
    """A filter value coerced to the column's type (`day > 4` on a string column compares '4')."""
    if value is None:
        return None
    t = field.type_name.lower()
    if t == "string":
        return str(value).lower() if isinstance(value, bool) else str(value)
    if isinstance(value, str):
        return parse_partition_value(value, field.type_name)
    if t in ("float", "double") and isinstance(value, int):
        return float(value)
    return value


def validate_filters(filters: Iterable[Sequence[Any]], schema: StructType) -> list[tuple[StructField, str, Any]]:
    """Resolve columns against the schema and type the filter values."""
    out = []
    for f in filters:
        if len(f) == 2 and str(f[1]).lower() in ("is null", "is not null"):
            column, op, value = f[0], str(f[1]).lower(), None
        elif len(f) == 3:
            column, op, value = f[0], str(f[1]).lower(), f[2]
        else:
            raise InvalidArgumentError(f"A filter is (column, op, value); got {f!r}")
        if op not in OPS:
            raise InvalidArgumentError(f"Unsupported filter operator {op!r}; use one of {sorted(OPS)}")
        field = schema.field(str(column))
        if op in ("in", "not in"):
            if isinstance(value, str | bytes) or not isinstance(value, Iterable):
                raise InvalidArgumentError(f"Operator {op!r} needs a list of values; got {value!r}")
            value = [_typed(v, field) for v in value]
        elif op not in ("is null", "is not null"):
            value = _typed(value, field)
        out.append((field, "=" if op == "==" else op, value))
    return out


def _eval_exact(actual: Any, op: str, value: Any) -> bool:
    if op == "is null":
        return actual is None
    if op == "is not null":
        return actual is not None
    if actual is None:
        return False  # SQL: comparisons with null are not true
    if op == "=":
        return bool(actual == value)
    if op == "!=":
        return bool(actual != value)
    if op == "in":
        return actual in value
    if op == "not in":
        return actual not in value
    return bool({"<": actual < value, "<=": actual <= value, ">": actual > value, ">=": actual >= value}[op])


def partition_matches(add: AddFile, filters: Sequence[tuple[StructField, str, Any]], physical: bool) -> bool:
    for field, op, value in filters:
        key = field.physical_name if physical else field.name
        raw = add.partition_values.get(key)
        if raw is None and physical:
            raw = add.partition_values.get(field.name)
        try:
            if not _eval_exact(parse_partition_value(raw, field.type_name), op, value):
                return False
        except TypeError:
            raise InvalidArgumentError(
                f"Cannot compare column {field.name!r} of type {field.type_name} with {value!r}"
            ) from None
    return True


def _stat(stats: Mapping[str, Any], section: str, key: str) -> Any:
    sec = stats.get(section)
    if not isinstance(sec, Mapping):
        return None
    return sec.get(key)


def _bound(raw: Any, field: StructField, *, upper: bool) -> Any:
    """A stats bound as a comparable value, widened where writers truncate; None if unusable."""
    if raw is None:
        return None
    t = field.type_name.lower()
    try:
        if t == "string":
            if upper and isinstance(raw, str) and len(raw) >= STRING_PREFIX_LENGTH:
                return None  # may be a truncated prefix: not an upper bound
            return str(raw)
        if t in ("timestamp", "timestamp_ntz"):
            value = parse_partition_value(str(raw), t)
            return value + dt.timedelta(milliseconds=1) if upper else value
        if t.startswith("decimal") or t in ("long", "integer", "short", "byte", "float", "double", "date"):
            return parse_partition_value(str(raw), t)
    except InvalidArgumentError:
        return None
    return None  # booleans, binary, nested: no skipping


def stats_may_match(add: AddFile, filters: Sequence[tuple[StructField, str, Any]], physical: bool) -> bool:
    """False only when the file's stats prove no row satisfies every filter."""
    if not add.stats:
        return True
    try:
        stats = json.loads(add.stats)
    except ValueError:
        return True
    num_records = stats.get("numRecords")
    for field, op, value in filters:
        key = field.physical_name if physical else field.name
        nulls = _stat(stats, "nullCount", key)
        all_null = nulls is not None and num_records is not None and nulls == num_records and num_records > 0
        if op == "is null":
            if nulls == 0:
                return False
            continue
        if op == "is not null":
            if all_null:
                return False
            continue
        if all_null:
            return False  # every comparison with null is not true
        lo = _bound(_stat(stats, "minValues", key), field, upper=False)
        hi = _bound(_stat(stats, "maxValues", key), field, upper=True)
        try:
            if op == "=" and ((lo is not None and value < lo) or (hi is not None and value > hi)):
                return False
            if op == "in" and all(
                (lo is not None and v < lo) or (hi is not None and v > hi) for v in value if v is not None
            ):
                return False
            if op == "<" and lo is not None and lo >= value:
                return False
            if op == "<=" and lo is not None and lo > value:
                return False
            if op == ">" and hi is not None and hi <= value:
                return False
            if op == ">=" and hi is not None and hi < value:
                return False
        except TypeError:
            continue  # incomparable types: keep the file
    return True


def matching_files(
    adds: Iterable[AddFile],
    schema: StructType,
    partition_columns: Sequence[str],
    *,
    partition_filters: Iterable[Sequence[Any]] | None = None,
    data_filters: Iterable[Sequence[Any]] | None = None,
    column_mapping: bool = False,
) -> list[AddFile]:
    """Active files that may hold rows matching both filter lists."""
    pfilters = validate_filters(partition_filters or (), schema)
    dfilters = validate_filters(data_filters or (), schema)
    parts = {c.lower() for c in partition_columns}
    for field, _, _ in pfilters:
        if field.name.lower() not in parts:
            raise InvalidArgumentError(
                f"{field.name!r} is not a partition column (partition columns: {list(partition_columns)})"
            )
    # A data filter on a partition column is exact too.
    exact = pfilters + [f for f in dfilters if f[0].name.lower() in parts]
    by_stats = [f for f in dfilters if f[0].name.lower() not in parts]
    return [
        a for a in adds if partition_matches(a, exact, column_mapping) and stats_may_match(a, by_stats, column_mapping)
    ]
