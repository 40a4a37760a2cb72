"""Checkpoint file actions as Spark DataFrames, and the reports' aggregations, in the JVM.

A checkpoint is reconciled state (PROTOCOL.md "Checkpoints"): each file action in it is the last one for
its key (path + DV id) at that version, so a row no later commit touches is final and needs neither a
shuffle nor a replay. The expressions mirror the Python code: `key_column` is `actions.file_key`, the
summaries are `read.aggregates`' over the `state.FLAT_COLUMNS` of every reconciled file action.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, StructType

from ...protocol.actions import KEY_SEPARATOR
from ...protocol.schema import HIVE_DEFAULT_PARTITION
from ...read.aggregates import (
    MAX_DIGEST_GROUPS,
    FileDigest,
    FileSummary,
    PartitionTombstones,
    TombstoneSummary,
)
from .tasks import FILE_ACTIONS


def _struct(schema: StructType, name: str) -> StructType | None:
    if name not in schema.fieldNames():
        return None
    dtype: DataType = schema[name].dataType
    return dtype if isinstance(dtype, StructType) else None


def _field(action: str, struct: StructType, name: str, cast: str) -> Column:
    """`action.name` cast to `cast`, or a typed null when the checkpoint's struct has no such field."""
    if name in struct.fieldNames():
        return F.col(action).getField(name).cast(cast)
    return F.lit(None).cast(cast)


def canonical_path_column(path: Column) -> Column:
    """`actions.canonical_path` as a Column expression."""
    return (
        F.when(path.startswith("/"), F.concat(F.lit("file:"), path))
        .when(path.startswith("file:///"), F.concat(F.lit("file:/"), path.substr(len("file:///") + 1, 1 << 30)))
        .when(
            path.startswith("file://localhost/"),
            F.concat(F.lit("file:/"), path.substr(len("file://localhost/") + 1, 1 << 30)),
        )
        .otherwise(path)
    )


def key_column(action: str, struct: StructType) -> Column:
    """File identity of `action` rows, exactly as `actions.file_key` computes it (path + DV unique id)."""
    path = canonical_path_column(F.col(action).getField("path").cast("string"))
    dv_struct = _struct(struct, "deletionVector")
    if dv_struct is None or "storageType" not in dv_struct.fieldNames():
        return path
    dv = F.col(action).getField("deletionVector")
    storage = dv.getField("storageType").cast("string")
    has_inline = "pathOrInlineDv" in dv_struct.fieldNames()
    inline = dv.getField("pathOrInlineDv").cast("string") if has_inline else F.lit(None).cast("string")
    uid = F.concat(storage, F.coalesce(inline, F.lit("")))
    if "offset" in dv_struct.fieldNames():
        offset = dv.getField("offset")
        uid = F.when(offset.isNull(), uid).otherwise(F.concat(uid, F.lit("@"), offset.cast("string")))
    return F.when(storage.isNull(), path).otherwise(F.concat(path, F.lit(KEY_SEPARATOR), uid))


def _untouched(df: DataFrame, name: str, struct: StructType, touched: DataFrame | None) -> DataFrame:
    """`(key, <name>)` rows of one action type with a path, minus the keys in `touched`."""
    rows = df.where(F.col(name).getField("path").isNotNull()).select(key_column(name, struct).alias("key"), F.col(name))
    return rows if touched is None else rows.join(F.broadcast(touched), "key", "left_anti")


def _file_structs(df: DataFrame) -> Iterator[tuple[str, StructType]]:
    for name in FILE_ACTIONS:
        struct = _struct(df.schema, name)
        if struct is not None and "path" in struct.fieldNames():
            yield name, struct


@dataclass
class CheckpointFiles:
    """The checkpoint's file actions that no later commit touches: `flat`, the summary columns
    (`state.FLAT_COLUMNS`, one row per file action), and the whole actions as JSON (`json_frames`)."""

    flat: DataFrame
    sources: Sequence[DataFrame]
    touched: DataFrame | None

    def json_rows(self, kinds: Sequence[str] = FILE_ACTIONS) -> Iterator[str]:
        """Every row of the action types `kinds` as `{"add": {...}}` / `{"remove": {...}}` JSON text (nulls
        omitted), on the driver."""
        for frame in self.json_frames(kinds):
            for row in frame.toLocalIterator():
                yield row[0]

    def json_frames(self, kinds: Sequence[str] = FILE_ACTIONS) -> list[DataFrame]:
        """One-column (`json`) DataFrames of the rows of the action types `kinds` as JSON text."""
        return [
            _untouched(df, name, struct, self.touched).select(F.to_json(F.struct(F.col(name))).alias("json"))
            for df in self.sources
            for name, struct in _file_structs(df)
            if name in kinds
        ]


def checkpoint_files(sources: Sequence[DataFrame], touched: DataFrame | None) -> CheckpointFiles | None:
    """Untouched file actions of the checkpoint DataFrames `sources` (parts, sidecars). `touched` holds one
    `key` per file action in the commits after the checkpoint (duplicates allowed); it is broadcast, so
    the checkpoint's rows are filtered where they are read, without a shuffle."""
    flats = []
    for df in sources:
        for name, struct in _file_structs(df):
            pv = _field(name, struct, "partitionValues", "map<string,string>")
            deleted = _field(name, struct, "deletionTimestamp", "long") if name == "remove" else F.lit(None)
            flats.append(
                _untouched(df, name, struct, touched).select(
                    F.lit(name == "add").alias("is_add"),
                    F.col(name).getField("path").cast("string").alias("path"),
                    _field(name, struct, "size", "long").alias("size"),
                    pv.alias("partition_values"),
                    deleted.cast("long").alias("deletion_ts"),
                )
            )
    if not flats:
        return None
    return CheckpointFiles(reduce(DataFrame.unionByName, flats), sources, touched)


def _int(value: Any) -> int:
    return int(value) if value is not None else 0


def _file_aggregates(small_file_bytes: int) -> list[Column]:
    """`FileSummary`'s aggregates (`n`, `bytes`, `lo`, `hi`, `small`); a missing size counts as 0, as
    in `summarize_file_rows`."""
    size = F.coalesce(F.col("size"), F.lit(0))
    return [
        F.count(F.lit(1)).alias("n"),
        F.sum(size).alias("bytes"),
        F.min(size).alias("lo"),
        F.max(size).alias("hi"),
        F.sum(F.when(size < small_file_bytes, 1).otherwise(0)).alias("small"),
    ]


def _file_summary_row(row: Any, small_file_bytes: int) -> FileSummary:
    n = _int(row["n"])
    if n == 0:
        return FileSummary(small_file_bytes)
    return FileSummary(small_file_bytes, n, _int(row["bytes"]), _int(row["lo"]), _int(row["hi"]), _int(row["small"]))


def file_summary(flat: DataFrame, small_file_bytes: int) -> FileSummary:
    """`FileSummary` of the flat rows' adds."""
    row = flat.where(F.col("is_add")).agg(*_file_aggregates(small_file_bytes)).first()
    assert row is not None
    return _file_summary_row(row, small_file_bytes)


def _deleted() -> Column:
    """`deletionTimestamp`, a missing one counting as 0 (always past retention), as in `TombstoneSummary`."""
    return F.coalesce(F.col("deletion_ts"), F.lit(0))


def count_tombstones_after(flat: DataFrame, cutoff_ms: int) -> int:
    return int(flat.where(~F.col("is_add") & (_deleted() > cutoff_ms)).count())


def partition_key_column(columns: Sequence[str]) -> Column:
    """`aggregates.partition_key` as a Column expression."""
    if not columns:
        return F.lit("")
    pv = F.col("partition_values")
    return F.concat_ws(
        "/",
        *(
            F.concat(F.lit(f"{c}="), F.coalesce(F.try_element_at(pv, F.lit(c)), F.lit(HIVE_DEFAULT_PARTITION)))
            for c in columns
        ),
    )


def tombstone_summary(flat: DataFrame, cutoff_ms: int, partition_columns: tuple[str, ...]) -> TombstoneSummary:
    """`TombstoneSummary` of the flat rows' removes, grouped by partition in the JVM."""
    expired = _deleted() <= cutoff_ms
    size = F.coalesce(F.col("size"), F.lit(0))
    rows = (
        flat.where(~F.col("is_add"))
        .groupBy(partition_key_column(partition_columns).alias("partition"))
        .agg(
            F.sum(F.when(expired, 0).otherwise(1)).alias("retained"),
            F.sum(F.when(expired, 1).otherwise(0)).alias("expired"),
            F.sum(F.when(expired, 0).otherwise(size)).alias("retained_bytes"),
            F.sum(F.when(expired, size).otherwise(0)).alias("reclaimable_bytes"),
            F.min("deletion_ts").alias("oldest"),
            F.max("deletion_ts").alias("newest"),
            F.sum(F.when(F.col("size").isNull(), 1).otherwise(0)).alias("no_size"),
        )
        .collect()
    )
    out = TombstoneSummary(cutoff_ms, partition_columns)
    for row in rows:
        out.removed_without_size += _int(row["no_size"])
        out.partitions[row["partition"]] = PartitionTombstones(
            _int(row["retained"]),
            _int(row["expired"]),
            _int(row["retained_bytes"]),
            _int(row["reclaimable_bytes"]),
            None if row["oldest"] is None else int(row["oldest"]),
            None if row["newest"] is None else int(row["newest"]),
        )
    return out


def file_digest(
    flat: DataFrame, small_file_bytes: int, partition_columns: tuple[str, ...], max_groups: int = MAX_DIGEST_GROUPS
) -> FileDigest:
    """`FileDigest` of the flat rows in one query: the adds' `FileSummary` (one group) and the removes
    grouped by (partition, deletionTimestamp). More than `max_groups` groups give an incomplete digest."""
    is_add = F.col("is_add")
    none = F.lit(None)
    rows = (
        flat.groupBy(
            is_add,
            F.when(is_add, none.cast("string")).otherwise(partition_key_column(partition_columns)).alias("partition"),
            F.when(is_add, none.cast("long")).otherwise(F.col("deletion_ts")).alias("deleted"),
        )
        .agg(
            *_file_aggregates(small_file_bytes),
            F.sum(F.when(F.col("size").isNull(), 1).otherwise(0)).alias("no_size"),
        )
        .orderBy(F.desc("is_add"))  # the adds' group first: the limit never drops it
        .limit(max_groups + 2)  # one group of adds, up to max_groups of removes, one more to see overflow
        .collect()
    )
    out = FileDigest(FileSummary(small_file_bytes), partition_columns, max_groups=max_groups)
    for row in rows:
        if row["is_add"]:
            out.files = _file_summary_row(row, small_file_bytes)
        else:
            deleted = None if row["deleted"] is None else int(row["deleted"])
            out.add_group(row["partition"], deleted, _int(row["n"]), _int(row["bytes"]), _int(row["no_size"]))
    return out
