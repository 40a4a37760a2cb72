"""OPTIMIZE ZORDER BY: which columns, which files, how many outputs, and the sort key (pure).

Delta Spark (`ZOrderClustering`, `OptimizeTableCommand`) rewrites every file of each selected partition,
maps each column to a range id in [0, 1000) from sampled range boundaries (nulls to 0) and interleaves
the ids' bits MSB first. We rank exactly instead of sampling: each column's dense rank (nulls first),
range-scaled to `bits` bits, so strings order on their whole value (delta-rs keeps a 16-byte prefix of
raw bytes, which wastes the leading bits on wide ints, shared prefixes and timestamps: its z-order then
barely prunes). Rows are sorted by the key inside each partition and cut into files of about the target
size, so the files' [min, max] ranges on the columns stop overlapping and each file is sorted too.
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InvalidArgumentError, OperationNotAllowedError
from .actions import AddFile, DomainMetadata
from .optimize import Bin, OptimizePlan, by_partition, within_budget
from .optimize import operation_parameters as optimize_parameters
from .schema import StructField, StructType
from .stats import parse_column_list, stats_columns
from .table_properties import column_mapping_mode

#: The domain liquid clustering keeps its columns in (PROTOCOL.md "Clustered Table").
CLUSTERING_DOMAIN = "delta.clustering"
#: Bits of the interleaved key (one uint64 per row).
KEY_BITS = 64
#: At most this many bits per column: more would not separate rows any better below 2^32 rows.
MAX_COLUMN_BITS = 32
_ORDERED_KINDS = ("struct", "array", "map")


@dataclass(frozen=True)
class ZOrderColumn:
    """A ZORDER BY column resolved in the schema: its logical path, its path in files and stats, its type."""

    logical_path: tuple[str, ...]
    physical_path: tuple[str, ...]
    type_name: str

    @property
    def name(self) -> str:
        return ".".join(self.logical_path)


def _parse(columns: str | Sequence[str]) -> list[tuple[str, ...]]:
    """`a, b.c` or `["a", "b.c"]` as multi-part names (backquotes as in Spark)."""
    texts = [columns] if isinstance(columns, str) else list(columns)
    out: list[tuple[str, ...]] = []
    for text in texts:
        if not isinstance(text, str):
            raise InvalidArgumentError(f"zorder_by takes column names, got {text!r}", argument="zorder_by")
        try:
            out.extend(parse_column_list(text))
        except InvalidArgumentError:
            raise InvalidArgumentError(f"Cannot parse ZORDER BY column {text!r}", argument="zorder_by") from None
    return out


def _find(fields: Iterable[StructField], name: str) -> StructField | None:
    """A field by exact name, else the one matching ignoring case (Spark's default resolver)."""
    fields = list(fields)
    return next((f for f in fields if f.name == name), None) or next(
        (f for f in fields if f.name.casefold() == name.casefold()), None
    )


def resolve_columns(
    columns: str | Sequence[str],
    schema: StructType,
    partition_columns: Sequence[str],
    configuration: Mapping[str, str | None],
    *,
    table: str | None = None,
    version: int | None = None,
) -> tuple[list[ZOrderColumn], list[str]]:
    """The columns resolved, and the names of those new files record no statistics for (Spark warns on
    them: `DELTA_ZORDERING_ON_COLUMN_WITHOUT_STATS`). Refused with `InvalidArgumentError` naming the column:
    none given, a repeat, a partition column (`DELTA_ZORDERING_ON_PARTITION_COLUMN`: the rows of a file
    share it already), absent (`DELTA_ZORDERING_COLUMN_DOES_NOT_EXIST`), or not a primitive type."""

    def refuse(message: str, **at: Any) -> InvalidArgumentError:
        return InvalidArgumentError(message, argument="zorder_by", table=table, **at)

    mapped = column_mapping_mode(configuration) in ("id", "name")
    parsed = _parse(columns)
    if not parsed:
        raise refuse("ZORDER BY needs at least one column")
    if len(parsed) > KEY_BITS:
        raise refuse(f"ZORDER BY takes at most {KEY_BITS} columns, got {len(parsed)}")
    partitions = {c.casefold() for c in partition_columns}
    out: list[ZOrderColumn] = []
    for path in parsed:
        name = ".".join(path)
        if len(path) == 1 and path[0].casefold() in partitions:
            raise refuse(
                f"ZORDER BY column {name!r} is a partition column: a file's rows share it already "
                f"(partition columns: {list(partition_columns)})",
                version=version,
            )
        fields: Iterable[StructField] = schema.fields
        logical: list[str] = []
        physical: list[str] = []
        field: StructField | None = None
        for part in path:
            field = _find(fields, part)
            if field is None:
                message = f"ZORDER BY column {name!r} does not exist in the table schema (columns: {schema.names})"
                raise refuse(message, version=version)
            logical.append(field.name)
            physical.append(field.physical_name if mapped else field.name)
            nested = field.type if isinstance(field.type, Mapping) and field.type.get("type") == "struct" else None
            fields = StructType.from_json(nested).fields if nested else ()
        assert field is not None
        if field.type_name in _ORDERED_KINDS or field.type_name == "variant":
            message = f"ZORDER BY column {name!r} is of type {field.type_name}; only primitive columns can be ordered"
            raise refuse(message, version=version)
        column = ZOrderColumn(tuple(logical), tuple(physical), field.type_name)
        if any(c.logical_path == column.logical_path for c in out):
            raise refuse(f"ZORDER BY column {name!r} is named twice")
        out.append(column)
    with_stats = {c.logical_path for c in stats_columns(schema, configuration, partition_columns) if c.min_max}
    return out, [c.name for c in out if c.logical_path not in with_stats]


def check_not_clustered(
    domains: Mapping[str, DomainMetadata], *, table: str | None = None, version: int | None = None
) -> None:
    """Refuse a table with liquid clustering: its layout is the clustering's (Spark refuses ZORDER BY on
    clustered tables, `DELTA_CLUSTERING_WITH_ZORDER_BY`)."""
    domain = domains.get(CLUSTERING_DOMAIN)
    if domain is not None and not domain.removed:
        raise OperationNotAllowedError(
            f"The table uses liquid clustering (domain {CLUSTERING_DOMAIN}: {domain.configuration}); "
            "ZORDER BY would undo its layout: cluster it with Delta Spark's OPTIMIZE instead",
            table=table,
            version=version,
        )


def output_count(num_bytes: int, target_size: int) -> int:
    """Files a partition of `num_bytes` input bytes is cut into: enough that none is over the target
    (Spark takes the floor, so a partition under 2 GiB becomes one file and is not skipped at all)."""
    return max(1, math.ceil(num_bytes / target_size))


@dataclass
class ZOrderPlan(OptimizePlan):
    """One bin per selected partition, every file in it (Delta's ZORDER: not incremental)."""

    zorder_by: tuple[str, ...] = ()

    def partitions(self) -> dict[str, dict[str, int]]:
        out = super().partitions()
        for b in self.bins:
            out[b.partition]["expected_output_files"] += output_count(b.num_bytes, self.target_size) - 1
        return out

    @property
    def expected_output_files(self) -> int:
        return sum(output_count(b.num_bytes, self.target_size) for b in self.bins)

    def summary(self) -> dict[str, Any]:
        return super().summary() | {"zorder_by": list(self.zorder_by)}


def plan_zorder(
    files: Iterable[AddFile],
    partition_columns: Sequence[str],
    columns: Sequence[ZOrderColumn],
    *,
    table: str | None,
    version: int,
    target_size: int,
    predicate: str | None = None,
    physical_names: Mapping[str, str] | None = None,
    max_files: int | None = None,
    max_bytes: int | None = None,
) -> ZOrderPlan:
    """Every one of `files` (the active files of the selected partitions), one bin per partition. With a
    budget (`max_files` input files, `max_bytes` input bytes) the partitions whose files' ranges on the
    columns overlap most per byte come first (`zorder_value`), taken by `within_budget` (the first always,
    whole: a partition is sorted as one); the rest are `over_budget`."""
    plan = ZOrderPlan(table, version, target_size, 1, predicate, zorder_by=tuple(c.name for c in columns))
    for key, members in by_partition(files, partition_columns, physical_names):
        values = dict(sorted(members[0].partition_values.items()))
        plan.bins.append(Bin(key, values, tuple(sorted(members, key=lambda f: f.path))))
    if max_files is not None or max_bytes is not None:
        plan.bins, plan.over_budget = within_budget(
            plan.bins, lambda b: zorder_value(b, columns), max_files=max_files, max_bytes=max_bytes, table=table
        )
    return plan


def zorder_value(b: Bin, columns: Sequence[ZOrderColumn]) -> float:
    """What Z-ordering a partition is worth per byte read: its files' range overlap (`overlap`) summed over
    the columns, per input byte (a partition whose files are already disjoint gains nothing)."""
    return sum(overlap(file_ranges(b.files, c.physical_path)) for c in columns) / max(1, b.num_bytes)


def operation_parameters(predicates: Sequence[str], columns: Sequence[ZOrderColumn]) -> dict[str, Any]:
    """commitInfo.operationParameters of an OPTIMIZE ZORDER BY (Spark `DeltaOperations.Optimize`:
    `zOrderBy` is the JSON array of the column names)."""
    return optimize_parameters(predicates) | {"zOrderBy": json.dumps([c.name for c in columns])}


# -- the key ----------------------------------------------------------------------------------------------
def column_bits(num_columns: int, num_rows: int) -> int:
    """Bits per column: an equal share of the key, no more than separates `num_rows` distinct values."""
    return max(1, min(MAX_COLUMN_BITS, KEY_BITS // num_columns, max(1, num_rows - 1).bit_length()))


def u64_scalar(value: int) -> pa.Scalar:
    """A uint64 scalar built from its bytes (`pa.scalar` of a Python int imports pandas)."""
    return pa.Array.from_buffers(pa.uint64(), 1, [None, pa.py_buffer(struct.pack("<Q", value))])[0]


def _u64_array(values: Sequence[int]) -> pa.Array:
    return pa.Array.from_buffers(
        pa.uint64(), len(values), [None, pa.py_buffer(struct.pack(f"<{len(values)}Q", *values))]
    )


def _dense_ranks(values: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, int]:
    """Each value's 1-based dense rank, nulls (and NaN) 0, and the number of rank slots (distinct + 1)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    if len(values) == 0:
        return _u64_array([]), 1
    # 1-based dense ranks with nulls (and NaN) last, then nulls to 0 (RankOptions' null_placement is
    # deprecated in pyarrow 25 and its per-key replacement is not in pyarrow 17)
    rank = pc.rank(values, tiebreaker="dense").cast(pa.uint64())
    rank = pc.if_else(pc.is_null(values, nan_is_null=True), u64_scalar(0), rank)
    return rank, pc.max(rank).as_py() + 1


def _scale(rank: pa.Array, bits: int, slots: int) -> pa.Array:
    """Ranks of `slots` slots spread evenly over [0, 2^bits) (rank < 2^32 rows and bits <= 32: no overflow)."""
    return pc.divide(pc.shift_left(rank, u64_scalar(bits)), u64_scalar(slots))


def range_ids(values: pa.Array | pa.ChunkedArray, bits: int) -> pa.Array:
    """Each value's dense rank (nulls first, with the smallest values' range as Spark puts them in range 0)
    scaled to [0, 2^bits): equal values share an id, distinct ones spread evenly over the range."""
    rank, slots = _dense_ranks(values)
    return _scale(rank, bits, slots)


def _spread(k: int) -> pa.Array:
    """For each byte value, its bits `k` apart (bit i at i*k): one `take` spreads a byte of an id."""
    return _u64_array([sum(((v >> i) & 1) << (i * k) for i in range(8)) for v in range(256)])


def interleave(ids: Sequence[pa.Array], bits: int) -> pa.Array:
    """The z-value: bits MSB first, round robin over the columns (the first column's bit leads): bit j of
    column c lands at j*k + (k-1-c). Spread a byte at a time through a lookup table."""
    k = len(ids)
    n = len(ids[0]) if k else 0
    key = pa.Array.from_buffers(pa.uint64(), n, [None, pa.py_buffer(bytes(8 * n))])
    table, mask = _spread(k), u64_scalar(0xFF)
    for c, column in enumerate(ids):
        for m in range((bits + 7) // 8):
            byte = pc.bit_wise_and(pc.shift_right(column, u64_scalar(8 * m)), mask)
            spread = pc.shift_left(table.take(byte), u64_scalar(8 * m * k + k - 1 - c))
            key = pc.bit_wise_or(key, spread)
    return key


#: Rows a z-order key is built for at a time once the ranks are known: the interleave's temporaries (a
#: few uint64 arrays per byte of each id) stay this small however many rows a partition has.
KEY_CHUNK_ROWS = 64 * 1024


def zorder_key(
    columns: Sequence[pa.Array | pa.ChunkedArray],
    map_: Callable[[Callable[[Any], Any], Iterable[Any]], Iterable[Any]] = map,
) -> pa.Array:
    """The uint64 z-order key of rows whose ZORDER BY columns are `columns` (one array each): each column's
    dense ranks over all rows, then `KEY_CHUNK_ROWS` rows at a time scaled (`range_ids`) and interleaved.
    The columns' ranks and the chunks are computed through `map_` (a thread pool's `map` runs them at
    once: pyarrow's sort and arithmetic kernels release the GIL); the key is the same either way."""
    if not columns:
        raise ValueError("no column")
    num_rows = len(columns[0])
    bits = column_bits(len(columns), num_rows)
    ranked = list(map_(_dense_ranks, columns))

    def chunk(start: int) -> pa.Array:
        ids = [_scale(rank.slice(start, KEY_CHUNK_ROWS), bits, slots) for rank, slots in ranked]
        return ids[0] if len(ids) == 1 else interleave(ids, bits)

    chunks = list(map_(chunk, range(0, num_rows, KEY_CHUNK_ROWS)))
    if len(chunks) == 1:
        return chunks[0]
    return pa.concat_arrays(chunks) if chunks else _u64_array([])


def row_slices(num_rows: int, parts: int) -> list[tuple[int, int]]:
    """(offset, length) of `parts` near-equal consecutive slices (fewer when there are fewer rows): sorted
    position p goes to slice p * parts // num_rows, as the spilling sort assigns rows."""
    parts = max(1, min(parts, num_rows))
    offsets = [-(-s * num_rows // parts) for s in range(parts + 1)]
    return [(a, b - a) for a, b in itertools.pairwise(offsets)]


# -- how well it clusters ---------------------------------------------------------------------------------
def file_ranges(files: Iterable[AddFile], stats_path: Sequence[str]) -> list[tuple[Any, Any] | None]:
    """Each file's [min, max] on the column at `stats_path` (its path in stats), None where unknown."""
    out: list[tuple[Any, Any] | None] = []
    for f in files:
        try:
            stats = json.loads(f.stats) if f.stats else {}
        except ValueError:
            stats = {}
        lo, hi = stats.get("minValues"), stats.get("maxValues")
        for part in stats_path:
            lo = lo.get(part) if isinstance(lo, dict) else None
            hi = hi.get(part) if isinstance(hi, dict) else None
        out.append(None if lo is None or hi is None or isinstance(lo, dict) else (lo, hi))
    return out


def overlap(ranges: Sequence[tuple[Any, Any] | None]) -> int:
    """Sum over files of how many other files' [min, max] ranges intersect theirs (0: disjoint files; a
    file without a range intersects every other). Counted from sorted bounds, not pairwise."""
    known = [r for r in ranges if r is not None]
    unknown = len(ranges) - len(known)
    n = len(ranges)
    highs = sorted(hi for _, hi in known)
    # disjoint known pairs: for each file, the files that end before it starts
    disjoint = sum(bisect.bisect_left(highs, lo) for lo, _ in known)
    pairs = len(known) * (len(known) - 1) // 2 - disjoint
    pairs += unknown * (n - unknown) + unknown * (unknown - 1) // 2
    return 2 * pairs
