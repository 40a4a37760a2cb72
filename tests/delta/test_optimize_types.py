"""OPTIMIZE writes every column in the Arrow type the Delta schema declares, whatever its input files used.

The oracle for "the type the schema declares" is delta-rs's own Delta -> Arrow conversion
(`deltalake.Schema.to_arrow`: `timestamp` is microseconds in UTC, `timestamp_ntz` microseconds without a
zone); the oracle for the rows is delta-rs reading the table before and after. Inputs come from the
corpus (Spark's INT96 and millisecond timestamps, type widening, column mapping), from delta-rs, and, for
a file that cannot hold the schema, from pyarrow added with our transaction (as a foreign writer would).
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

deltalake = pytest.importorskip("deltalake")
from conftest import copy_table  # noqa: E402
from deltalake import DeltaTable, write_deltalake  # noqa: E402
from test_optimize import canonical_rows, listing  # noqa: E402

from airflow_delta_provider.delta.delta_log import DeltaLog  # noqa: E402
from airflow_delta_provider.delta.engines.local import local_bin_rewriter as local_executor  # noqa: E402
from airflow_delta_provider.delta.errors import LogCorruptedError  # noqa: E402
from airflow_delta_provider.delta.maintenance.optimize import optimize  # noqa: E402
from airflow_delta_provider.delta.protocol.actions import AddFile, decode_path  # noqa: E402
from airflow_delta_provider.delta.protocol.schema import COLUMN_ID_KEY, StructType  # noqa: E402

INT96 = "delta-golden/kernel-timestamp-INT96"


def deltars_table(path: Path) -> tuple[pa.Schema, Counter[str]]:
    """What delta-rs reads: the schema it gives the table and the rows (a multiset)."""
    reader = deltalake.QueryBuilder().register("t", DeltaTable(str(path))).execute("SELECT * FROM t")
    table = pa.table(reader.read_all())
    return table.schema, canonical_rows(table)


def declared_schema(path: Path) -> pa.Schema:
    """The latest Delta schema as delta-rs converts it to Arrow."""
    schema_string = DeltaLog(str(path)).update().metadata.schema_string
    return pa.schema(deltalake.Schema.from_json(schema_string).to_arrow())


def shape(t: pa.DataType) -> Any:
    """A type without nullability or the names Arrow gives list and map children."""
    if pa.types.is_struct(t):
        return ("struct", [(f.name, shape(f.type)) for f in t])
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return ("list", shape(t.value_type))
    if pa.types.is_map(t):
        return ("map", shape(t.key_type), shape(t.item_type))
    return str(t)


def parquet_timestamp(path: Path, column: str) -> tuple[str, bool, str]:
    """The Parquet physical type, isAdjustedToUTC and unit of a timestamp column."""
    schema = pq.ParquetFile(path).schema
    col = schema.column(schema.names.index(column))
    logical = json.loads(col.logical_type.to_json())
    assert logical["Type"] == "Timestamp"
    return col.physical_type, logical["isAdjustedToUTC"], logical["timeUnit"]


def new_files(path: Path, result: Any) -> list[Path]:
    assert result.added, "OPTIMIZE compacted something"
    return [path / decode_path(a.path) for a in result.added]


# -- timestamps -----------------------------------------------------------------------------------------------
def test_int96_timestamps_are_rewritten_as_utc_microseconds(tmp_path: Path) -> None:
    path = copy_table(INT96, tmp_path)
    before = deltars_table(path)
    result = optimize(str(path))
    for f in new_files(path, result):
        assert parquet_timestamp(f, "time") == ("INT64", True, "microseconds")
        assert pq.read_schema(f).field("time").type == declared_schema(path).field("time").type
    assert deltars_table(path) == before  # same values, same types


@pytest.mark.parametrize(
    "name", ["delta-golden/kernel-timestamp-TIMESTAMP_MILLIS", "delta-golden/kernel-timestamp-PST"]
)
def test_other_spark_timestamp_encodings_are_rewritten_as_utc_microseconds(tmp_path: Path, name: str) -> None:
    path = copy_table(name, tmp_path)
    before = deltars_table(path)
    for f in new_files(path, optimize(str(path))):
        assert parquet_timestamp(f, "time") == ("INT64", True, "microseconds")
        assert pq.read_schema(f).field("time").type == pa.timestamp("us", tz="UTC")
    assert deltars_table(path) == before


def test_a_bin_mixing_int96_and_delta_rs_timestamps(tmp_path: Path) -> None:
    """The corpus's null partition holds one INT96 file; delta-rs adds one with microseconds in UTC."""
    path = copy_table(INT96, tmp_path)
    row = {
        "id": pa.array([7], pa.int32()),
        "part": pa.array([None], pa.timestamp("us", tz="UTC")),
        "time": pa.array([dt.datetime(2001, 1, 1, 1, 2, 3, 456789, tzinfo=dt.UTC)], pa.timestamp("us", tz="UTC")),
    }
    write_deltalake(str(path), pa.table(row), mode="append")
    before = deltars_table(path)
    result = optimize(str(path))
    null_bins = [b for b in result.plan.bins if b.partition_values == {"part": None}]
    assert len(null_bins) == 1 and len(null_bins[0].files) == 2
    for f in new_files(path, result):
        assert pq.read_schema(f).field("time").type == pa.timestamp("us", tz="UTC")
    assert deltars_table(path) == before


# -- type widening and column mapping -------------------------------------------------------------------------
def _value(v: Any) -> Any:
    """A row value as a hashable Python value, a date as the timestamp_ntz it widens to (midnight). Equal
    numbers hash alike across int, float and Decimal, so 1 (int8) counts as 1 (int64) and as 1.0."""
    if isinstance(v, dict):
        return tuple(sorted((k, _value(x)) for k, x in v.items()))
    if isinstance(v, list | tuple):
        return tuple(_value(x) for x in v)
    if isinstance(v, dt.date) and not isinstance(v, dt.datetime):
        return dt.datetime.combine(v, dt.time())
    return v


@pytest.mark.parametrize("name", ["delta-golden/type-widening", "delta-golden/type-widening-nested"])
def test_type_widened_columns_are_written_in_the_widened_types(tmp_path: Path, name: str) -> None:
    """delta-rs does not read `typeWidening-preview` tables: the inputs' rows, read with pyarrow, are the
    oracle (compared as Python values, so 1 == 1 across int8 and int64 and a float32 is the same double)."""
    path = copy_table(name, tmp_path)
    inputs = [path / decode_path(a.path) for a in DeltaLog(str(path)).update().all_files()]
    expected = Counter(_value(r) for f in inputs for r in pq.read_table(f).to_pylist())
    result = optimize(str(path))
    (out,) = new_files(path, result)
    written = pq.read_schema(out)
    declared = declared_schema(path)
    assert [(f.name, shape(f.type)) for f in written] == [(f.name, shape(f.type)) for f in declared]
    assert Counter(_value(r) for r in pq.read_table(out).to_pylist()) == expected


def test_column_mapping_id_mode_keeps_physical_names_and_field_ids(tmp_path: Path) -> None:
    path = copy_table("delta-golden/table-with-columnmapping-mode-id", tmp_path)
    before = deltars_table(path)
    schema = StructType.from_json(DeltaLog(str(path)).update().metadata.schema_json)
    for f in new_files(path, optimize(str(path))):
        written = pq.read_schema(f)
        assert written.names == [c.physical_name for c in schema.fields]
        ids = [int(field.metadata[b"PARQUET:field_id"]) for field in written]
        assert ids == [int((c.metadata or {})[COLUMN_ID_KEY]) for c in schema.fields]
    assert deltars_table(path) == before


# -- a file that does not hold the schema ---------------------------------------------------------------------
def _two_partitions(path: Path) -> None:
    for i in range(2):
        write_deltalake(str(path), pa.table({"id": [i, i + 10], "p": ["a", "b"]}), mode="append", partition_by=["p"])


def _add_foreign_file(path: Path, rel: str, data: pa.Table, partition: dict[str, str | None]) -> None:
    """A Parquet file written by pyarrow and added with our transaction (as another writer would)."""
    target = path / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(data, target)
    add = AddFile(rel, partition, target.stat().st_size, 0, True, json.dumps({"numRecords": data.num_rows}))
    DeltaLog(str(path)).update().transaction("WRITE").add(add).commit()


@pytest.mark.parametrize("workers", [1, 2])
def test_a_file_that_cannot_hold_the_schema_is_a_typed_error_naming_it(tmp_path: Path, workers: int) -> None:
    """Bin `p=a` is fine, bin `p=b` holds a file whose `id` is text: the error is typed and names that file,
    nothing is committed, and the file bin `p=a` wrote is reported as left for VACUUM (and is untracked)."""
    path = tmp_path / "t"
    _two_partitions(path)
    _add_foreign_file(path, "p=b/text-id.parquet", pa.table({"id": ["x"]}), {"p": "b"})
    version = DeltaTable(str(path)).version()
    before = set(listing(path))
    with pytest.raises(LogCorruptedError) as info:
        optimize(str(path), executor=local_executor(workers))
    err = info.value
    assert err.file == "p=b/text-id.parquet" and err.table is not None
    assert "id" in err.message and "string" in err.message and "left for VACUUM" in err.message
    assert DeltaTable(str(path)).version() == version
    orphans = [p for p in set(listing(path)) - before if p.endswith(".parquet")]
    assert len(orphans) == 1 and orphans[0].startswith("p=a/")
    tracked = {decode_path(a.path) for a in DeltaLog(str(path)).update().all_files()}
    assert orphans[0] not in tracked


def test_partition_columns_in_the_inputs_stay_in_the_output(tmp_path: Path) -> None:
    """A writer that materializes partition columns in its files: the compacted file keeps the column, and
    the rows of an input without it get the partition's value."""
    path = tmp_path / "t"
    _two_partitions(path)
    _add_foreign_file(path, "p=a/with-p.parquet", pa.table({"id": [99], "p": ["a"]}), {"p": "a"})
    result = optimize(str(path), where="p = 'a'")
    (out,) = new_files(path, result)
    data = pq.read_table(out)
    assert sorted(data.column("id").to_pylist()) == [0, 1, 99]
    assert data.column("p").to_pylist() == ["a", "a", "a"]


@pytest.mark.parametrize("spilled", [False, True])
def test_partition_columns_in_the_inputs_stay_in_the_zordered_output(tmp_path: Path, spilled: bool) -> None:
    """As compaction: Z-ORDER keeps a materialized partition column (an input file carries it), in memory
    and through spill files; the rows of inputs without it get the partition's value. (The check used to
    look at rows already cast without partition columns, so the output lost them.)"""
    from airflow_delta_provider.delta.engines.local_zorder import local_zorder_rewriter

    path = tmp_path / "t"
    _two_partitions(path)
    _add_foreign_file(path, "p=a/with-p.parquet", pa.table({"id": [99], "p": ["a"]}), {"p": "a"})
    executor = local_zorder_rewriter(memory_limit_bytes=400) if spilled else None
    result = optimize(str(path), where="p = 'a'", zorder_by=["id"], executor=executor)
    (out,) = new_files(path, result)
    data = pq.read_table(out)
    assert data.column("id").to_pylist() == [0, 1, 99]
    assert data.column("p").to_pylist() == ["a", "a", "a"]


def test_compact_bin_takes_the_table_from_its_layout(tmp_path: Path) -> None:
    """`compact_bin` has no `table=` of its own: a bin whose input file is gone is a typed error naming the
    layout's table and the file."""
    import inspect

    from airflow_delta_provider.delta.maintenance.optimize import table_layout
    from airflow_delta_provider.delta.write.data_files import compact_bin

    assert "table" not in inspect.signature(compact_bin).parameters
    path = tmp_path / "t"
    _two_partitions(path)
    snap = DeltaLog(str(path)).update()
    bin_ = optimize(str(path), dry_run=True).plan.bins[0]
    (path / decode_path(bin_.files[0].path)).unlink()
    layout = table_layout(snap, snap.table)
    with pytest.raises(LogCorruptedError) as info:
        compact_bin(snap.store, layout, bin_, now_ms=lambda: 0)
    assert info.value.table == layout.table_uri and info.value.file == bin_.files[0].path
