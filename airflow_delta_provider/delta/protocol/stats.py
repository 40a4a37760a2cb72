"""Per-file statistics as Delta Spark writes them (PROTOCOL.md "Per-file Statistics").

Pure rules, no Arrow (the aggregates are computed in `delta/write/stats.py`), after Spark
`StatisticsCollection.scala` and `DataSkippingReader.scala` (`SkippingEligibleDataType`):

* Columns: `delta.dataSkippingStatsColumns` (case-insensitive, possibly nested and backquoted names; a
  struct means all its leaves) wins; otherwise the first `delta.dataSkippingNumIndexedCols` leaves (default
  32, -1 = all) of the schema without the partition columns, depth-first (an array or map is one leaf).
  Partition columns never get stats (Spark refuses them in `dataSkippingStatsColumns`).
* `nullCount` for every stats column (nested leaves count rows whose parent struct is null); min/max only
  for numeric, date, timestamp(_ntz) and string columns. Keys are physical names under column mapping.
* JSON as Spark's `to_json` writes it: nulls left out, an all-null struct is `{}`, a stat with no eligible
  column is left out; timestamps in UTC to the millisecond (`2021-01-01T00:00:00.000Z`, no zone for
  timestamp_ntz), decimals exact, NaN/Infinity as the strings Jackson writes.
* Strings: min is the first `delta.dataSkippingStringPrefixLength` (default 32) code points; max follows
  `truncateMaxStringAgg` (UTF-16 units, tie-breaker U+007F or U+10FFFF, none beyond twice the prefix).
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import math
import re
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, NamedTuple

from ..errors import InvalidArgumentError
from .actions import Protocol
from .schema import StructField, StructType
from .table_features import table_features
from .table_properties import column_mapping_mode

NUM_INDEXED_COLS = "delta.dataSkippingNumIndexedCols"
STATS_COLUMNS = "delta.dataSkippingStatsColumns"
STRING_PREFIX_LENGTH = "delta.dataSkippingStringPrefixLength"
DEFAULT_NUM_INDEXED_COLS = 32
#: Spark conf `spark.databricks.io.skipping.stringPrefixLength`, used when the table property is unset.
DEFAULT_STRING_PREFIX_LENGTH = 32

ASCII_MAX_CHARACTER = "\u007f"
UTF8_MAX_CHARACTER = "\U0010ffff"

_INTEGRAL = frozenset({"byte", "short", "integer", "long"})
_MIN_MAX_TYPES = _INTEGRAL | {"float", "double", "date", "timestamp", "timestamp_ntz", "string"}
_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH = dt.datetime(1970, 1, 1)


@dataclass(frozen=True, slots=True)
class StatsColumn:
    """One leaf column that gets statistics: its names in the schema and in files/stats, outermost first."""

    logical_path: tuple[str, ...]
    physical_path: tuple[str, ...]
    type_name: str  # the leaf's Delta type (`long`, `decimal(10,2)`, `array`, ...)

    @property
    def min_max(self) -> bool:
        """Whether Spark collects min/max for this type (`SkippingEligibleDataType`)."""
        t = self.type_name.lower()
        return t in _MIN_MAX_TYPES or t.startswith("decimal")


class ColumnStats(NamedTuple):
    """The aggregates of one column, values already as they go in the JSON (None: not written)."""

    null_count: int | None
    min: Any = None
    max: Any = None


# -- which columns --------------------------------------------------------------------------------------
def _int_property(configuration: Mapping[str, str | None], key: str, default: int, minimum: int) -> int:
    """Table property `key` as an integer `>= minimum`, `default` when unset (`InvalidArgumentError` otherwise)."""
    raw = configuration.get(key)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise InvalidArgumentError(f"{key} must be an integer >= {minimum}, got {raw!r}", argument=key)
    return value


def num_indexed_cols(configuration: Mapping[str, str | None]) -> int:
    """`delta.dataSkippingNumIndexedCols` (default 32; -1 means every column)."""
    return _int_property(configuration, NUM_INDEXED_COLS, DEFAULT_NUM_INDEXED_COLS, -1)


def string_prefix_length(configuration: Mapping[str, str | None]) -> int:
    """`delta.dataSkippingStringPrefixLength` (default 32, Spark's session conf default)."""
    return _int_property(configuration, STRING_PREFIX_LENGTH, DEFAULT_STRING_PREFIX_LENGTH, 0)


_NAME_RE = re.compile(r"\s*(?:`((?:[^`]|``)*)`|([^\s.,`]+))\s*([.,]|$)")


def parse_column_list(text: str) -> list[tuple[str, ...]]:
    """A comma-separated list of multi-part column names (``a, b.c, `x.y`.z``), as Spark's
    `parseMultipartColumnList`: backquotes quote a name (a doubled backquote is one); blank is no column.
    Unquoted names run up to a space, `.` or `,` (Spark's lexer is stricter)."""
    columns: list[tuple[str, ...]] = []
    if not text.strip():
        return columns
    parts: list[str] = []
    pos = 0
    while True:
        m = _NAME_RE.match(text, pos)
        if m is None:
            raise InvalidArgumentError(
                f"Cannot parse {STATS_COLUMNS}={text!r} at position {pos + 1}", argument=STATS_COLUMNS
            )
        parts.append(m[1].replace("``", "`") if m[1] is not None else m[2])
        pos = m.end()
        if m[3] != ".":
            columns.append(tuple(parts))
            parts = []
        if not m[3]:
            return columns


def _leaves(
    fields: Sequence[StructField],
    paths: list[tuple[str, ...]] | None,
    mapped: bool,
    logical: tuple[str, ...] = (),
    physical: tuple[str, ...] = (),
) -> Iterator[StatsColumn]:
    """The leaves under `fields` (arrays and maps are leaves), depth-first in schema order; with `paths`, only
    those named (Spark `filterSchema`: a listed name takes the whole field, otherwise a struct is entered with
    the remainders; unknown names are ignored)."""
    by_head: dict[str, list[tuple[str, ...]]] = {}
    for p in paths or ():
        by_head.setdefault(p[0].lower(), []).append(p[1:])
    for f in fields:
        rests = None if paths is None else by_head.get(f.name.lower())
        if paths is not None and rests is None:
            continue
        lp, pp = (*logical, f.name), (*physical, f.physical_name if mapped else f.name)
        rests = None if rests is None or all(not r for r in rests) else [r for r in rests if r]
        if isinstance(f.type, Mapping) and f.type.get("type") == "struct":
            yield from _leaves(StructType.from_json(f.type).fields, rests, mapped, lp, pp)
        elif rests is None:
            yield StatsColumn(lp, pp, f.type_name)


def stats_columns(
    schema: StructType, configuration: Mapping[str, str | None], partition_columns: Sequence[str]
) -> tuple[StatsColumn, ...]:
    """The leaf columns whose statistics a new data file records, in schema order (`InvalidArgumentError` for
    a stats property that cannot be parsed)."""
    mapped = column_mapping_mode(configuration) in ("id", "name")
    partitions = {c.lower() for c in partition_columns}
    fields = [f for f in schema.fields if f.name.lower() not in partitions]
    named = configuration.get(STATS_COLUMNS)
    if named is not None:
        return tuple(_leaves(fields, parse_column_list(named), mapped))
    limit = num_indexed_cols(configuration)
    leaves = _leaves(fields, None, mapped)
    return tuple(leaves if limit < 0 else itertools.islice(leaves, limit))


def tight_bounds_for(protocol: Protocol) -> bool | None:
    """`tightBounds` for a freshly written file: True when the table supports deletion vectors, else
    left out (Spark `statsCollector`: written only when the protocol supports the feature)."""
    return True if "deletionVectors" in table_features(protocol) else None


# -- values -----------------------------------------------------------------------------------------------
def _unit(units: bytes, i: int) -> int:
    return int.from_bytes(units[2 * i : 2 * i + 2], "big")


def truncate_min_string(value: str | None, prefix_length: int) -> str | None:
    """The string min Spark writes: `substring(min(c), 0, prefix)`, i.e. the first `prefix_length`
    characters (code points: Spark's UTF8String counts characters, not UTF-16 units)."""
    return None if value is None else value[: max(prefix_length, 0)]


def truncate_max_string(value: str | None, prefix_length: int) -> str | None:
    """The string max Spark writes (`truncateMaxStringAgg`): the value when it fits in `prefix_length`
    UTF-16 units, else a prefix followed by U+007F (when the next unit sorts below it) or U+10FFFF,
    extending the prefix over U+10FFFF characters up to twice the length; None (no max) beyond that."""
    if value is None:
        return None
    units = value.encode("utf-16-be", "surrogatepass")
    n = len(units) // 2
    if n <= prefix_length:
        return value
    if prefix_length <= 0:
        return None
    limit, cur = 2 * prefix_length, prefix_length  # Spark `truncateMinStringAgg`: keep a surrogate pair whole
    if 0xD800 <= _unit(units, cur - 1) <= 0xDBFF and 0xDC00 <= _unit(units, cur) <= 0xDFFF:
        cur += 1
    while cur <= limit:
        if cur >= n:
            return value
        if cur + 1 < n and _unit(units, cur) == 0xDBFF and _unit(units, cur + 1) == 0xDFFF:
            cur += 2
            continue
        head = units[: 2 * cur].decode("utf-16-be")
        return head + (ASCII_MAX_CHARACTER if _unit(units, cur) < 0x7F else UTF8_MAX_CHARACTER)
    return None


def float32_value(value: float) -> float:
    """A float32 as the shortest decimal that reads back as the same float32 (Java `Float.toString`
    digits, so `0.1f` is written 0.1, not 0.10000000149011612)."""
    if not math.isfinite(value):
        return value
    packed = struct.pack("<f", value)
    for digits in range(1, 10):
        shorter = float(f"{value:.{digits}g}")
        if struct.pack("<f", shorter) == packed:
            return shorter
    return value


def format_date(epoch_days: int) -> str | None:
    """`yyyy-MM-dd`; None for a date outside years 1..9999 (left out of the stats: unknown)."""
    try:
        return (_EPOCH_DATE + dt.timedelta(days=epoch_days)).isoformat()
    except OverflowError:
        return None


def format_timestamp(epoch_micros: int, *, utc: bool) -> str | None:
    """Milliseconds, truncated, as Spark's JSON writes them: `2021-01-01T00:00:00.000Z` for timestamp
    (UTC session zone), no zone for timestamp_ntz. None outside years 1..9999."""
    try:
        text = (_EPOCH + dt.timedelta(milliseconds=epoch_micros // 1000)).isoformat(timespec="milliseconds")
    except OverflowError:
        return None
    return text + "Z" if utc else text


def _non_finite(value: float) -> str:
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def json_value(type_name: str, value: Any, *, is_max: bool, prefix_length: int) -> Any:
    """A min or max as it goes in the stats (None: not written). `value` is an int (integral types; epoch days
    for date; epoch microseconds for timestamps), float, Decimal or str; decimals stay `Decimal` (exact)."""
    if value is None:
        return None
    t = type_name.lower()
    if t == "string":
        return truncate_max_string(value, prefix_length) if is_max else truncate_min_string(value, prefix_length)
    if t == "date":
        return format_date(int(value))
    if t in ("timestamp", "timestamp_ntz"):
        return format_timestamp(int(value), utc=t == "timestamp")
    if t in ("float", "double"):
        number = float(value)
        if not math.isfinite(number):
            return _non_finite(number)
        return float32_value(number) if t == "float" else number
    if t.startswith("decimal"):
        return value if isinstance(value, Decimal) else Decimal(value)
    if t in _INTEGRAL:
        return int(value)
    return None


# -- the stats object and its JSON ----------------------------------------------------------------------
def _place(tree: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    """Create the struct dicts along `path` (Spark writes `{}` for an all-null struct) and set the leaf
    unless `value` is None (Spark leaves null stats out)."""
    node = tree
    for name in path[:-1]:
        child = node.setdefault(name, {})
        if not isinstance(child, dict):  # a leaf and a struct with one physical name: a schema bug
            raise InvalidArgumentError(f"Column {'.'.join(path)!r} clashes with a leaf column of the same name")
        node = child
    if value is not None:
        node[path[-1]] = value


def build_stats(
    num_records: int, columns: Sequence[tuple[StatsColumn, ColumnStats]], *, tight_bounds: bool | None = None
) -> dict[str, Any]:
    """The `add.stats` object, keys in Spark's order: numRecords, minValues, maxValues, nullCount,
    tightBounds. A stat with no eligible column is left out (Spark: `lit(null)`)."""
    stats: dict[str, Any] = {"numRecords": num_records}
    eligible = [(c, s) for c, s in columns if c.min_max]
    if eligible:
        stats["minValues"], stats["maxValues"] = mins, maxs = {}, {}
        for column, values in eligible:
            _place(mins, column.physical_path, values.min)
            _place(maxs, column.physical_path, values.max)
    if columns:
        stats["nullCount"] = nulls = {}
        for column, values in columns:
            _place(nulls, column.physical_path, values.null_count)
    if tight_bounds is not None:
        stats["tightBounds"] = tight_bounds
    return stats


def stats_to_json(value: Any) -> str:
    """The stats object as compact JSON, the way Spark's `to_json` writes it: decimals exact (Java's
    `BigDecimal.toString` and Python's `str(Decimal)` agree: `1.50`, `0E-18`; `json.dumps` cannot write
    them), non-finite floats as `"NaN"`/`"Infinity"`/`"-Infinity"`, non-ASCII characters unescaped."""
    if isinstance(value, Mapping):
        items = value.items()
        return "{" + ",".join(f"{json.dumps(str(k), ensure_ascii=False)}:{stats_to_json(v)}" for k, v in items) + "}"
    if isinstance(value, float) and not math.isfinite(value):
        return f'"{_non_finite(value)}"'
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise InvalidArgumentError(f"A decimal statistic must be finite, got {value}")
        return str(value)
    if value is None or isinstance(value, bool | int | float | str):
        return json.dumps(value, ensure_ascii=False)
    raise InvalidArgumentError(f"Cannot write {type(value).__name__} {value!r} in statistics")
