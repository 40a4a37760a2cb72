"""`add.stats` of a data file about to be added: one Arrow `min_max` and null count per stats column
(which columns, and how values are written, is `protocol.stats`: Spark's `StatisticsCollection`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..protocol.schema import StructType
from ..protocol.stats import (
    ColumnStats,
    build_stats,
    json_value,
    stats_columns,
    stats_to_json,
    string_prefix_length,
)

__all__ = ["StatsCollector", "collect_stats", "stats_json"]

_MICROS_PER_UNIT = {"s": 1_000_000, "ms": 1_000, "us": 1}
_NUMBER = (pa.types.is_floating, pa.types.is_decimal, pa.types.is_integer)
#: The Arrow types a stats column of each Delta type may have (others get no min/max).
_HOLDS: dict[str, Callable[[pa.DataType], bool]] = {
    "string": lambda a: pa.types.is_string(a) or pa.types.is_large_string(a),
    "date": pa.types.is_date,
    "timestamp": pa.types.is_timestamp,
    "timestamp_ntz": pa.types.is_timestamp,
    **dict.fromkeys(("float", "double", "decimal"), lambda a: any(f(a) for f in _NUMBER)),
    **dict.fromkeys(("byte", "short", "integer", "long"), pa.types.is_integer),
}


def _field_index(type_: pa.StructType, name: str) -> int:
    index = type_.get_field_index(name)
    if index >= 0:
        return index
    lowered = [i for i in range(type_.num_fields) if type_.field(i).name.lower() == name.lower()]
    return lowered[0] if len(lowered) == 1 else -1


def _leaf(
    data: pa.Table, path: tuple[str, ...], children: dict[tuple[str, ...], list[pa.ChunkedArray]]
) -> pa.ChunkedArray | None:
    """The column at `path` (physical names; None when missing), with its parents' nulls as Spark's
    `getItem` has them; `children` caches each struct's flattened fields."""
    index = _field_index(pa.struct(list(data.schema)), path[0])
    if index < 0:
        return None
    column = data.column(index)
    for depth, name in enumerate(path[1:], start=1):
        if not pa.types.is_struct(column.type):
            return None
        index = _field_index(column.type, name)
        if index < 0:
            return None
        if path[:depth] not in children:
            # ChunkedArray.flatten ANDs the parent's validity into each child.
            children[path[:depth]] = column.flatten()
        column = children[path[:depth]][index]
    if pa.types.is_dictionary(column.type):
        column = pa.chunked_array([c.dictionary_decode() for c in column.chunks], type=column.type.value_type)
    return column


def _epoch_micros(scalar: pa.Scalar) -> int | None:
    value = scalar.value
    if value is None:
        return None
    unit = scalar.type.unit
    return int(value) // 1000 if unit == "ns" else int(value) * _MICROS_PER_UNIT[unit]


def _raw_min_max(column: pa.ChunkedArray, type_name: str) -> tuple[Any, Any]:
    """Min and max as plain values (epoch days, epoch microseconds), NaN above every float as in Spark;
    (None, None) for an all-null column or an unexpected Arrow type."""
    t = "decimal" if type_name.lower().startswith("decimal") else type_name.lower()
    arrow = column.type
    if pa.types.is_string_view(arrow):
        column, arrow = column.cast(pa.large_string()), pa.large_string()
    if t in _HOLDS and not _HOLDS[t](arrow):
        return None, None
    mm = pc.min_max(column)
    lo, hi = mm["min"], mm["max"]
    if not lo.is_valid:
        return None, None
    if pa.types.is_timestamp(arrow):
        return _epoch_micros(lo), _epoch_micros(hi)
    if pa.types.is_date32(arrow):
        return lo.value, hi.value
    if pa.types.is_date64(arrow):
        return lo.value // 86_400_000, hi.value // 86_400_000
    lo_v, hi_v = lo.as_py(), hi.as_py()
    if pa.types.is_floating(arrow) and pc.any(pc.is_nan(column)).as_py():
        # Arrow's min_max skips NaN; Spark orders NaN above everything, so the max is NaN.
        hi_v = float("nan")
    return lo_v, hi_v


def _merge(a: Any, b: Any, pick: Callable[[Any, Any], Any]) -> Any:
    """`pick` of two raw bounds of one column from two row groups (None: that group had no value); a NaN
    max wins, as one NaN makes Spark's max NaN, and a NaN min loses to any number."""
    if a is None or b is None:
        return b if a is None else a
    if isinstance(a, float) and isinstance(b, float) and (a != a or b != b):
        nan, other = (a, b) if a != a else (b, a)
        return nan if pick is max or other != other else other
    return pick(a, b)


class StatsCollector:
    """The `add.stats` of a file written in row groups: each group's raw min/max and null counts merged
    as they come (`add`), so the file's stats equal `collect_stats` of all its rows at once."""

    def __init__(
        self,
        schema: StructType,
        configuration: Mapping[str, str | None],
        partition_columns: Sequence[str],
        *,
        tight_bounds: bool | None = None,
    ) -> None:
        self.columns = stats_columns(schema, configuration, partition_columns)
        self.prefix_length = string_prefix_length(configuration)
        self.tight_bounds = tight_bounds
        self.num_records = 0
        self._nulls: list[int | None] = [0] * len(self.columns)
        self._bounds: list[tuple[Any, Any]] = [(None, None)] * len(self.columns)

    def add(self, data: pa.Table) -> None:
        """Fold one row group (physical column names, no partition columns) into the stats."""
        self.num_records += data.num_rows
        children: dict[tuple[str, ...], list[pa.ChunkedArray]] = {}
        for i, column in enumerate(self.columns):
            array = _leaf(data, column.physical_path, children)
            if array is None:  # Spark: a stats column missing from the data is all null, with no min/max
                self._nulls[i] = None
                continue
            if self._nulls[i] is not None:
                self._nulls[i] = (self._nulls[i] or 0) + array.null_count
            if column.min_max and len(array):
                lo, hi = _raw_min_max(array, column.type_name)
                old_lo, old_hi = self._bounds[i]
                self._bounds[i] = (_merge(old_lo, lo, min), _merge(old_hi, hi, max))

    def stats(self) -> dict[str, Any]:
        """The `add.stats` object of every row added; decimals as `Decimal` (serialize with `stats_to_json`)."""
        n = self.num_records
        collected = []
        for column, nulls, (lo, hi) in zip(self.columns, self._nulls, self._bounds, strict=True):
            if nulls is None:
                collected.append((column, ColumnStats(n)))
                continue
            null_count = nulls if n else None  # Spark sums 1/0 per row: over no rows the sum is null
            if not column.min_max:
                collected.append((column, ColumnStats(null_count)))
                continue
            p = self.prefix_length
            low = json_value(column.type_name, lo, is_max=False, prefix_length=p)
            high = json_value(column.type_name, hi, is_max=True, prefix_length=p)
            collected.append((column, ColumnStats(null_count, low, high)))
        return build_stats(n, collected, tight_bounds=self.tight_bounds)

    def json(self) -> str:
        """`stats()` as the JSON text of `add.stats`."""
        return stats_to_json(self.stats())


def collect_stats(
    data: pa.Table,
    schema: StructType,
    configuration: Mapping[str, str | None],
    partition_columns: Sequence[str],
    *,
    tight_bounds: bool | None = None,
) -> dict[str, Any]:
    """The `add.stats` object of a file holding `data` (physical column names, no partition columns), as
    Delta Spark computes it; decimals as `Decimal`, so serialize with `stats_to_json`. `tight_bounds` is
    written as `tightBounds` when not None. Raises `InvalidArgumentError` for an unparsable stats property.
    """
    collector = StatsCollector(schema, configuration, partition_columns, tight_bounds=tight_bounds)
    collector.add(data)
    return collector.stats()


def stats_json(
    data: pa.Table,
    schema: StructType,
    configuration: Mapping[str, str | None],
    partition_columns: Sequence[str],
    *,
    tight_bounds: bool | None = None,
) -> str:
    """`collect_stats` as the JSON text of `add.stats`."""
    return stats_to_json(collect_stats(data, schema, configuration, partition_columns, tight_bounds=tight_bounds))
