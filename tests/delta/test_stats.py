"""Per-file statistics (`delta/protocol/stats.py`, `delta/write/stats.py`) against three oracles.

* Delta Spark itself: every `add` a Spark writer put in the reference corpus (no deletion vector, data
  file present) is recomputed from its Parquet file with the table's schema and configuration at that
  version and must equal Spark's stats (nested structs, column mapping, `tightBounds`,
  `dataSkippingNumIndexedCols` changes, all primitive types).
* delta-rs (`write_deltalake`): randomized tables of every primitive type, nulls, NaN/inf, long and
  non-ASCII strings, nested structs, a list and a map, partitioned or not. Where delta-rs and Delta
  Spark differ, the test follows Spark and asserts the difference explicitly, citing the Spark code.
* The rules written out by hand: string truncation cases, column selection, JSON conventions.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import random
import struct
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import CORPUS, copy_table
from support.encodings import utf16_length

from airflow_delta_provider.delta.errors import InvalidArgumentError
from airflow_delta_provider.delta.protocol.actions import Metadata, Protocol
from airflow_delta_provider.delta.protocol.schema import StructType
from airflow_delta_provider.delta.protocol.stats import (
    StatsColumn,
    num_indexed_cols,
    parse_column_list,
    stats_columns,
    stats_to_json,
    string_prefix_length,
    tight_bounds_for,
    truncate_max_string,
    truncate_min_string,
)
from airflow_delta_provider.delta.write.stats import collect_stats, stats_json

deltalake = pytest.importorskip("deltalake")
from deltalake import write_deltalake  # noqa: E402

MISSING = object()
TOP = "\U0010ffff"


# -- helpers ------------------------------------------------------------------------------------------------
def _get(tree: Any, path: tuple[str, ...]) -> Any:
    for name in path:
        if not isinstance(tree, dict) or name not in tree:
            return MISSING
        tree = tree[name]
    return tree


def _log_actions(table: Path) -> list[tuple[int, list[dict[str, Any]]]]:
    out = []
    for f in sorted((table / "_delta_log").glob("*.json")):
        if f.name[:20].isdigit():
            out.append((int(f.name[:20]), [json.loads(line) for line in f.read_text().splitlines() if line.strip()]))
    return out


def _table_state(table: Path) -> tuple[Metadata, Protocol, list[dict[str, Any]]]:
    """Latest metaData and protocol of a (single-writer, checkpoint-free) table and all its adds."""
    meta = proto = None
    adds = []
    for _, actions in _log_actions(table):
        for a in actions:
            meta = Metadata.from_json(a["metaData"]) if "metaData" in a else meta
            proto = Protocol.from_json(a["protocol"]) if "protocol" in a else proto
            if "add" in a:
                adds.append(a["add"])
    assert meta is not None and proto is not None
    return meta, proto, adds


def _schema(meta: Metadata) -> StructType:
    return StructType.from_json(json.loads(meta.schema_string or "{}"))


def _leaf_values(data: pa.Table, path: tuple[str, ...]) -> list[Any]:
    """A leaf's Python values; a null parent struct makes the leaf null (independent of pyarrow.compute)."""
    values = data.column(path[0]).to_pylist()
    for name in path[1:]:
        values = [None if v is None else v[name] for v in values]
    return values


def _f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def _ms_text(t: dt.datetime, *, utc: bool) -> str:
    return f"{t:%Y-%m-%dT%H:%M:%S}.{t.microsecond // 1000:03d}" + ("Z" if utc else "")


def _parse_ts(text: str) -> dt.datetime:
    t = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace(" ", "T"))
    return t.astimezone(dt.UTC) if t.tzinfo else t


def _utf8_min(values: list[str]) -> str:
    return min(values, key=lambda s: s.encode())


def _utf8_max(values: list[str]) -> str:
    return max(values, key=lambda s: s.encode())


# -- string truncation (Spark `StatisticsCollection.truncateMaxStringAgg`, `statsCollector`) -------------
class TestStringTruncation:
    def test_short_and_exactly_prefix_length_are_kept(self):
        for value in ["", "abc", "a" * 32, "é" * 32, "😀" * 16]:
            assert utf16_length(value) <= 32
            assert truncate_min_string(value, 32) == value
            assert truncate_max_string(value, 32) == value

    def test_33_ascii_chars(self):
        value = "a" * 32 + "b"
        assert truncate_min_string(value, 32) == "a" * 32
        # The dropped char 'b' sorts below U+007F, so DEL is a safe tie-breaker.
        assert truncate_max_string(value, 32) == "a" * 32 + "\x7f"

    def test_next_char_at_or_above_del_gets_the_max_code_point(self):
        assert truncate_max_string("a" * 32 + "\x7f", 32) == "a" * 32 + TOP
        assert truncate_max_string("a" * 32 + "é", 32) == "a" * 32 + TOP

    def test_surrogate_pair_at_the_boundary_is_kept_whole(self):
        value = "a" * 31 + "😀" + "b"  # 😀 occupies UTF-16 units 31 and 32
        assert utf16_length(value) == 34
        assert truncate_max_string(value, 32) == "a" * 31 + "😀" + "\x7f"
        # min is Spark SQL `substring(min(c), 0, 32)`: 32 characters (code points), not UTF-16 units.
        assert truncate_min_string(value, 32) == "a" * 31 + "😀"
        emoji = "😀" * 40
        assert truncate_min_string(emoji, 32) == "😀" * 32
        assert truncate_max_string(emoji, 32) == "😀" * 16 + TOP

    def test_run_of_max_code_points_extends_the_prefix(self):
        assert truncate_max_string("a" * 32 + TOP * 3 + "b", 32) == "a" * 32 + TOP * 3 + "\x7f"
        assert truncate_max_string("a" * 32 + TOP * 3 + "é", 32) == "a" * 32 + TOP * 3 + TOP
        # The run reaches the end of the string inside the limit: the value itself is the max.
        assert truncate_max_string("a" * 32 + TOP * 16, 32) == "a" * 32 + TOP * 16
        # The run goes past twice the prefix length: no max at all.
        assert truncate_max_string("a" * 32 + TOP * 17, 32) is None
        assert truncate_max_string("a" * 32 + TOP * 17 + "b", 32) is None

    def test_longer_than_64_chars(self):
        value = "x" * 100
        assert truncate_min_string(value, 32) == "x" * 32
        assert truncate_max_string(value, 32) == "x" * 32 + "\x7f"
        assert truncate_max_string("ü" * 100, 32) == "ü" * 32 + TOP

    def test_other_prefix_lengths(self):
        assert truncate_max_string("abcdef", 3) == "abc\x7f"
        assert truncate_min_string("abcdef", 0) == ""
        assert truncate_max_string("abcdef", 0) is None
        assert truncate_max_string("", 0) == ""

    def test_random_strings_give_bounds(self):
        rng = random.Random(5)
        alphabet = ["a", "z", "\x7f", "é", "中", "😀", TOP, "\x00"]
        for _ in range(2000):
            value = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
            lo, hi = truncate_min_string(value, 32), truncate_max_string(value, 32)
            assert value.startswith(lo) and lo.encode() <= value.encode()
            if hi is not None:
                assert hi.encode() >= value.encode()
                assert utf16_length(hi) <= 2 * 32 + 2


# -- column selection ---------------------------------------------------------------------------------------
def _field(name: str, type_: Any, physical: str | None = None) -> dict[str, Any]:
    md = {"delta.columnMapping.physicalName": physical, "delta.columnMapping.id": 1} if physical else {}
    return {"name": name, "type": type_, "nullable": True, "metadata": md}


def _struct(*fields: dict[str, Any]) -> dict[str, Any]:
    return {"type": "struct", "fields": list(fields)}


NESTED = StructType.from_json(
    _struct(
        _field("p", "string"),
        _field("a", "integer"),
        _field("s", _struct(_field("x", "long"), _field("y", "string"), _field("z", _struct(_field("w", "double"))))),
        _field("l", {"type": "array", "elementType": "integer", "containsNull": True}),
        _field("m", {"type": "map", "keyType": "string", "valueType": "integer", "valueContainsNull": True}),
        _field("weird.name", "date"),
        _field("b", "boolean"),
    )
)


def _paths(config: dict[str, str], partitions: tuple[str, ...] = ("p",), schema: StructType = NESTED) -> list[str]:
    return [".".join(c.logical_path) for c in stats_columns(schema, config, partitions)]


class TestStatsColumns:
    def test_num_indexed_cols_counts_leaves_depth_first_without_partition_columns(self):
        # Spark `truncateSchema`: struct leaves count one each, an array or a map counts one.
        assert _paths({}) == ["a", "s.x", "s.y", "s.z.w", "l", "m", "weird.name", "b"]
        assert _paths({"delta.dataSkippingNumIndexedCols": "3"}) == ["a", "s.x", "s.y"]
        assert _paths({"delta.dataSkippingNumIndexedCols": "0"}) == []
        assert _paths({"delta.dataSkippingNumIndexedCols": "-1"}) == _paths({})
        assert _paths({"delta.dataSkippingNumIndexedCols": "5"}, partitions=()) == ["p", "a", "s.x", "s.y", "s.z.w"]

    def test_default_is_32_leaves(self):
        schema = StructType.from_json(_struct(*(_field(f"c{i}", "long") for i in range(40))))
        assert _paths({}, (), schema) == [f"c{i}" for i in range(32)]
        assert len(_paths({"delta.dataSkippingNumIndexedCols": "-1"}, (), schema)) == 40

    def test_stats_columns_win_and_keep_schema_order(self):
        config = {"delta.dataSkippingStatsColumns": "b, S.Y, a", "delta.dataSkippingNumIndexedCols": "1"}
        assert _paths(config) == ["a", "s.y", "b"]
        assert _paths({"delta.dataSkippingStatsColumns": "s"}) == ["s.x", "s.y", "s.z.w"]
        assert _paths({"delta.dataSkippingStatsColumns": "s.z, `weird.name`"}) == ["s.z.w", "weird.name"]
        assert _paths({"delta.dataSkippingStatsColumns": "l,m"}) == ["l", "m"]

    def test_stats_columns_ignore_unknown_and_partition_columns(self):
        # Spark refuses a partition column in the property (DELTA_COLUMN_DATA_SKIPPING_NOT_SUPPORTED_
        # PARTITIONED_COLUMN); partition values are not in data files, so it never gets stats.
        assert _paths({"delta.dataSkippingStatsColumns": "p,nope,s.nope,a.x,weird"}) == []
        assert _paths({"delta.dataSkippingStatsColumns": ""}) == []

    def test_column_list_syntax(self):
        assert parse_column_list(" a , b.c ,`x.y`.z, `q``r` ") == [("a",), ("b", "c"), ("x.y", "z"), ("q`r",)]
        for bad in ["a,,b", "a.", ",a", "`a", "a b", "`a`b"]:
            with pytest.raises(InvalidArgumentError):
                parse_column_list(bad)

    def test_bad_properties_are_typed_errors(self):
        for config in (
            {"delta.dataSkippingNumIndexedCols": "-2"},
            {"delta.dataSkippingNumIndexedCols": "many"},
            {"delta.dataSkippingStringPrefixLength": "-1"},
        ):
            with pytest.raises(InvalidArgumentError):
                collect_stats(pa.table({"a": [1]}), NESTED, config, ["p"])

    def test_int_properties_defaults_minimums_and_errors(self):
        # Both properties share one parser: default when unset, surrounding blanks allowed, the minimum
        # accepted, anything below it or not an integer refused naming the property.
        for read, key, default, minimum in (
            (num_indexed_cols, "delta.dataSkippingNumIndexedCols", 32, -1),
            (string_prefix_length, "delta.dataSkippingStringPrefixLength", 32, 0),
        ):
            assert read({}) == read({key: None}) == default
            assert read({key: f" {minimum} "}) == minimum
            assert read({key: "7"}) == 7
            for bad in (str(minimum - 1), "many", "1.5", ""):
                with pytest.raises(InvalidArgumentError, match=f">= {minimum}") as err:
                    read({key: bad})
                assert err.value.argument == key

    def test_column_mapping_gives_physical_paths(self):
        schema = StructType.from_json(
            _struct(_field("a", "integer", "col-a"), _field("s", _struct(_field("x", "long", "col-x")), "col-s"))
        )
        cols = stats_columns(schema, {"delta.columnMapping.mode": "name"}, ())
        assert cols == (
            StatsColumn(("a",), ("col-a",), "integer"),
            StatsColumn(("s", "x"), ("col-s", "col-x"), "long"),
        )
        # Stats columns are named logically, keyed physically.
        named = {"delta.columnMapping.mode": "id", "delta.dataSkippingStatsColumns": "s.x"}
        assert [c.physical_path for c in stats_columns(schema, named, ())] == [("col-s", "col-x")]
        assert [c.physical_path for c in stats_columns(schema, {}, ())] == [("a",), ("s", "x")]


# -- building the stats object ------------------------------------------------------------------------------
class TestCollect:
    def test_json_conventions(self):
        schema = StructType.from_json(
            _struct(
                _field("f", "float"),
                _field("d", "double"),
                _field("n", "decimal(38,18)"),
                _field("s", _struct(_field("x", "integer"), _field("flag", "boolean"))),
                _field("t", "timestamp"),
                _field("u", "timestamp_ntz"),
                _field("bin", "binary"),
            )
        )
        data = pa.table(
            {
                "f": pa.array([0.1, -float("inf"), None], pa.float32()),
                "d": pa.array([float("nan"), 1.5, 2.5]),
                "n": pa.array(
                    [Decimal("1.5"), Decimal("12345678901234567890.123456789012345678"), None], pa.decimal128(38, 18)
                ),
                "s": pa.array(
                    [{"x": None, "flag": True}, None, {"x": None, "flag": None}],
                    pa.struct([("x", pa.int32()), ("flag", pa.bool_())]),
                ),
                "t": pa.array(
                    [
                        dt.datetime(2021, 1, 1, 1, 2, 3, 999999, tzinfo=dt.UTC),
                        None,
                        dt.datetime(1960, 6, 1, tzinfo=dt.UTC),
                    ],
                    pa.timestamp("us", "UTC"),
                ),
                "u": pa.array([dt.datetime(2021, 1, 1), None, None], pa.timestamp("ns")),
                "bin": pa.array([b"a", None, None]),
            }
        )
        text = stats_json(data, schema, {}, [], tight_bounds=True)
        assert text == (
            '{"numRecords":3,'
            '"minValues":{"f":"-Infinity","d":1.5,"n":1.500000000000000000,"s":{},"t":"1960-06-01T00:00:00.000Z","u":"2021-01-01T00:00:00.000"},'
            '"maxValues":{"f":0.1,"d":"NaN","n":12345678901234567890.123456789012345678,"s":{},"t":"2021-01-01T01:02:03.999Z","u":"2021-01-01T00:00:00.000"},'
            '"nullCount":{"f":1,"d":0,"n":1,"s":{"x":3,"flag":2},"t":1,"u":2,"bin":2},'
            '"tightBounds":true}'
        )  # fmt: skip
        assert json.loads(text)["maxValues"]["n"] == pytest.approx(1.2345678901234567e19)

    def test_json_dumps_works_except_for_decimals(self):
        schema = StructType.from_json(
            _struct(_field("d", "double"), _field("s", "string"), _field("n", "decimal(5,1)"))
        )
        data = pa.table(
            {"d": [math.nan, 1.0], "s": ["é", None], "n": pa.array([Decimal("1.5"), None], pa.decimal128(5, 1))}
        )
        no_decimal = {"delta.dataSkippingNumIndexedCols": "2"}
        stats = collect_stats(data, schema, no_decimal, [])
        assert json.dumps(stats, separators=(",", ":"), ensure_ascii=False) == stats_json(data, schema, no_decimal, [])
        with pytest.raises(TypeError):  # json.dumps cannot write a Decimal exactly: use stats_to_json
            json.dumps(collect_stats(data, schema, {}, []))

    def test_no_columns_and_no_eligible_columns(self):
        schema = StructType.from_json(_struct(_field("flag", "boolean"), _field("a", "long")))
        data = pa.table({"flag": [True, None], "a": [1, 2]})
        assert collect_stats(data, schema, {"delta.dataSkippingNumIndexedCols": "0"}, []) == {"numRecords": 2}
        # Spark `collectStats`: no eligible column -> lit(null) -> left out of the JSON.
        assert collect_stats(data, schema, {"delta.dataSkippingNumIndexedCols": "1"}, []) == {
            "numRecords": 2,
            "nullCount": {"flag": 1},
        }

    def test_missing_column_and_empty_file(self):
        schema = StructType.from_json(_struct(_field("a", "long"), _field("gone", "string")))
        # A stats column absent from the data is all null (Spark: nullCount = count(*), no min/max).
        assert collect_stats(pa.table({"a": [3, 1]}), schema, {}, []) == {
            "numRecords": 2,
            "minValues": {"a": 1},
            "maxValues": {"a": 3},
            "nullCount": {"a": 0, "gone": 2},
        }
        # No rows: Spark's sum of zero rows is null, so the counts are left out.
        empty = pa.table({"a": pa.array([], pa.int64()), "gone": pa.array([], pa.string())})
        assert collect_stats(empty, schema, {}, []) == {
            "numRecords": 0,
            "minValues": {},
            "maxValues": {},
            "nullCount": {},
        }

    def test_tight_bounds_follow_the_deletion_vector_feature(self):
        assert tight_bounds_for(Protocol(3, 7, ("deletionVectors",), ("deletionVectors",))) is True
        assert tight_bounds_for(Protocol(1, 2)) is None
        assert tight_bounds_for(Protocol(3, 7, (), ("appendOnly",))) is None

    def test_string_prefix_property_and_chunked_dictionary_data(self):
        schema = StructType.from_json(_struct(_field("s", "string")))
        chunks = pa.chunked_array(
            [pa.array(["kiwi", "apple"]).dictionary_encode(), pa.array(["pear"]).dictionary_encode()]
        )
        stats = collect_stats(pa.table({"s": chunks}), schema, {"delta.dataSkippingStringPrefixLength": "3"}, [])
        assert stats["minValues"] == {"s": "app"} and stats["maxValues"] == {"s": "pea\x7f"}


# -- delta-rs differential -----------------------------------------------------------------------------------
STRINGS = [
    *("", "a", "ü", "Zürich", "b" * 32, "c" * 33, "zz" * 40, "é" * 20, "é" * 40, "中文" * 10),
    *("😀" * 10, "😀" * 20, "a" * 31 + "😀x", "q" * 32 + TOP * 2 + "r", "\x7f" * 35, "m" * 32 + "\x7f"),
]
STRUCT_T = pa.struct([("x", pa.int32()), ("y", pa.string()), ("z", pa.struct([("w", pa.float64())]))])


def _random_table(rng: random.Random, n: int, partitioned: bool) -> pa.Table:
    def maybe(value: Any, p_null: float = 0.2) -> Any:
        return None if rng.random() < p_null else value

    def ts(tz: bool) -> dt.datetime:
        t = dt.datetime(1900, 1, 1) + dt.timedelta(microseconds=rng.randrange(0, 200 * 365 * 86400 * 10**6))
        return t.replace(tzinfo=dt.UTC) if tz else t

    def floats() -> float:
        r = rng.random()
        special = [float("nan"), float("inf"), -float("inf")]
        return special[rng.randrange(3)] if r < 0.08 else rng.uniform(-1e6, 1e6)

    def nested() -> dict[str, Any] | None:
        return maybe(
            {
                "x": maybe(rng.randint(-100, 100)),
                "y": maybe(rng.choice(STRINGS)),
                "z": maybe({"w": maybe(rng.uniform(-1, 1))}),
            }
        )

    def column(make: Any, type_: pa.DataType) -> pa.Array:
        return pa.array([make() for _ in range(n)], type_)

    cols: dict[str, pa.Array] = {
        "i8": column(lambda: maybe(rng.randint(-128, 127)), pa.int8()),
        "i16": column(lambda: maybe(rng.randint(-(2**15), 2**15 - 1)), pa.int16()),
        "i32": column(lambda: maybe(rng.randint(-(2**31), 2**31 - 1)), pa.int32()),
        "i64": column(lambda: maybe(rng.randint(-(2**63), 2**63 - 1)), pa.int64()),
        "f32": column(lambda: maybe(floats()), pa.float32()),
        "f64": column(lambda: maybe(floats()), pa.float64()),
        "dec": column(lambda: maybe(Decimal(rng.randint(-(10**9), 10**9)).scaleb(-2)), pa.decimal128(10, 2)),
        "s": column(lambda: maybe(rng.choice(STRINGS)), pa.string()),
        "bin": column(lambda: maybe(rng.randbytes(rng.randint(0, 5))), pa.binary()),
        "flag": column(lambda: maybe(rng.random() < 0.5), pa.bool_()),
        "d": column(lambda: maybe(dt.date(1900, 1, 1) + dt.timedelta(days=rng.randint(0, 73000))), pa.date32()),
        "ts": column(lambda: maybe(ts(True)), pa.timestamp("us", "UTC")),
        "ntz": column(lambda: maybe(ts(False)), pa.timestamp("us")),
        "all_null": column(lambda: None, pa.int64()),
        "st": column(nested, STRUCT_T),
        "l": column(lambda: maybe([rng.randint(0, 9) for _ in range(rng.randint(0, 3))]), pa.list_(pa.int32())),
        "m": column(lambda: maybe([("k", rng.randint(0, 9))]), pa.map_(pa.string(), pa.int32())),
    }
    if partitioned:
        cols = {"part": pa.array([rng.choice(["x", "y"]) for _ in range(n)]), **cols}
    return pa.table(cols)


def _check_against_deltars(ours: dict[str, Any], theirs: dict[str, Any], data: pa.Table, columns: tuple) -> set[str]:
    """Compare one file's stats; returns the kinds of documented differences met."""
    met: set[str] = set()
    assert ours["numRecords"] == theirs["numRecords"] == data.num_rows
    for col in columns:
        path, t = col.physical_path, col.type_name
        values = _leaf_values(data, path)
        present = [v for v in values if v is not None]
        ours_nc, theirs_nc = _get(ours["nullCount"], path), _get(theirs["nullCount"], path)
        assert ours_nc == len(values) - len(present), path
        lo, hi = _get(ours.get("minValues", {}), path), _get(ours.get("maxValues", {}), path)
        d_lo, d_hi = _get(theirs.get("minValues", {}), path), _get(theirs.get("maxValues", {}), path)
        if t in ("binary", "array", "map"):
            # Spark collects nullCount for every stats column (`statsCollector`: NULL_COUNT over the
            # whole stats schema); delta-rs skips binary and repeated (list/map) leaves entirely.
            assert theirs_nc is MISSING and lo is hi is d_lo is d_hi is MISSING, path
            met.add(f"no-{t}-null-count")
            continue
        assert ours_nc == theirs_nc, path
        if t == "boolean":
            # `SkippingEligibleDataType` (DataSkippingReader.scala) has no BooleanType: Spark writes no
            # min/max for booleans; delta-rs writes them from the Parquet footer.
            assert lo is hi is MISSING, path
            if present:
                assert (d_lo, d_hi) == (min(present), max(present)), path
                met.add("boolean-min-max")
            continue
        if not present:
            assert lo is hi is d_lo is d_hi is MISSING, path
            continue
        if t in ("byte", "short", "integer", "long"):
            assert lo == d_lo == min(present) and hi == d_hi == max(present), path
        elif t == "date":
            assert lo == d_lo == min(present).isoformat() and hi == d_hi == max(present).isoformat(), path
        elif t.startswith("decimal"):
            assert lo == min(present) and hi == max(present), path  # exact, as Spark's to_json writes them
            assert float(lo) == pytest.approx(d_lo, rel=1e-15) and float(hi) == pytest.approx(d_hi, rel=1e-15)
        elif t in ("float", "double"):
            # NaN and infinities are the strings Spark's JSON holds ("NaN", "Infinity", "-Infinity").
            assert all(isinstance(v, float) or v in ("NaN", "Infinity", "-Infinity") for v in (lo, hi)), path
            met |= _check_floats(t, float(lo), float(hi), d_lo, d_hi, present, path)
        elif t in ("timestamp", "timestamp_ntz"):
            utc = t == "timestamp"
            # Spark's JSON writes milliseconds (`yyyy-MM-dd'T'HH:mm:ss.SSS` + zone); delta-rs writes a
            # space in timestamp_ntz and drops a zero fraction: compare the instants it names.
            assert lo == _ms_text(min(present), utc=utc) and hi == _ms_text(max(present), utc=utc), path
            assert _parse_ts(lo) == _parse_ts(d_lo) and _parse_ts(hi) == _parse_ts(d_hi), path
            met.add(f"{t}-format")
        elif t == "string":
            met |= _check_strings(lo, hi, d_lo, d_hi, present, path)
        else:
            raise AssertionError(f"unexpected type {t}")
    return met


def _check_floats(t: str, lo: Any, hi: Any, d_lo: Any, d_hi: Any, present: list[float], path: Any) -> set[str]:
    met = set()
    finite = [v for v in present if not math.isnan(v)]
    # Spark orders NaN above every value (`SQLOrderingUtil.compareDoubles`): max is NaN if any is NaN.
    want_hi = math.nan if len(finite) < len(present) else max(finite)
    want_lo = min(finite) if finite else math.nan
    same = (lambda a, b: _f32(a) == _f32(b)) if t == "float" else (lambda a, b: a == b)
    for got, want in ((lo, want_lo), (hi, want_hi)):
        assert (math.isnan(got) and math.isnan(want)) or same(got, want), path

    # delta-rs takes Parquet footer stats, which leave NaN out, and serde_json writes +-inf as null.
    def deltars_view(v: float) -> Any:
        return None if math.isinf(v) else v

    if finite:
        for d, want in ((d_lo, min(finite)), (d_hi, max(finite))):
            exp = deltars_view(want)
            assert d == exp if exp is None or d is None else same(d, exp), path
        if len(finite) < len(present):
            met.add("nan-max")
        if any(math.isinf(v) for v in (min(finite), max(finite))):
            met.add("inf-null")
    if t == "float":
        # Jackson writes a float with Java's shortest digits (`0.1`, not 0.10000000149011612); numpy's
        # float32 repr is the same shortest round-trip form.
        for got in (lo, hi):
            assert math.isnan(got) or got == float(str(np.float32(got))), path
        met.add("float32-digits")
    return met


def _check_strings(lo: str, hi: str | None, d_lo: str, d_hi: str, present: list[str], path: Any) -> set[str]:
    true_lo, true_hi = _utf8_min(present), _utf8_max(present)
    # min: Spark `substring(min(c), 0, 32)`; max: `truncateMaxStringAgg(32)` (tested case by case above).
    assert lo == true_lo[:32] and hi == truncate_max_string(true_hi, 32), path
    assert hi is None or hi.encode() >= true_hi.encode()
    met = set()
    for ours, true, theirs in ((lo, true_lo, d_lo), (hi, true_hi, d_hi)):
        if utf16_length(true) <= 32 and len(true.encode()) <= 64:
            assert ours == theirs == true, path
        else:
            # delta-rs copies the Parquet footer value, which arrow-rs truncates to 64 UTF-8 bytes
            # (bumping the last character of a max); Spark truncates to 32 characters as above.
            assert theirs == true or len(theirs.encode()) <= 64, path
            met.add("string-truncation")
    return met


@pytest.mark.parametrize("seed,partitioned", [(1, False), (2, True), (3, False), (4, True)])
def test_random_tables_match_deltars(tmp_path: Path, seed: int, partitioned: bool):
    rng = random.Random(seed)
    table = tmp_path / "t"
    for _ in range(2):
        data = _random_table(rng, rng.randint(20, 60), partitioned)
        write_deltalake(str(table), data, mode="append", partition_by=["part"] if partitioned else None)
    meta, proto, adds = _table_state(table)
    schema = _schema(meta)
    columns = stats_columns(schema, meta.configuration, meta.partition_columns)
    assert len(columns) == 19  # every leaf of the 17 data columns (st has three: x, y, z.w)
    met: set[str] = set()
    for add in adds:
        data = pq.read_table(table / unquote(add["path"]))
        ours = collect_stats(
            data, schema, meta.configuration, meta.partition_columns, tight_bounds=tight_bounds_for(proto)
        )
        theirs = json.loads(add["stats"])
        assert "tightBounds" not in ours and "tightBounds" not in theirs  # no deletion vectors here
        met |= _check_against_deltars(ours, theirs, data, columns)
        assert stats_json(data, schema, meta.configuration, meta.partition_columns) == stats_to_json(ours)
    assert {"no-binary-null-count", "no-array-null-count", "no-map-null-count", "boolean-min-max"} <= met
    assert {"timestamp-format", "timestamp_ntz-format", "string-truncation", "float32-digits"} <= met


def test_nan_and_infinity_differences_are_met(tmp_path: Path):
    """The randomized tables may miss them; pin NaN and infinities once."""
    data = pa.table(
        {"f": pa.array([1.0, math.nan, None, -2.0], pa.float32()), "d": pa.array([math.inf, 0.5, -math.inf, math.nan])}
    )
    write_deltalake(str(tmp_path / "t"), data)
    meta, _, adds = _table_state(tmp_path / "t")
    schema = _schema(meta)
    (add,) = adds
    file_data = pq.read_table(tmp_path / "t" / add["path"])
    ours = collect_stats(file_data, schema, meta.configuration, [])
    met = _check_against_deltars(ours, json.loads(add["stats"]), file_data, stats_columns(schema, {}, ()))
    assert met >= {"nan-max", "inf-null"}
    assert stats_to_json(ours) == (
        '{"numRecords":4,"minValues":{"f":-2.0,"d":"-Infinity"},"maxValues":{"f":"NaN","d":"NaN"},'
        '"nullCount":{"f":1,"d":0}}'
    )


FLAT = pa.table({"p": ["x", "y", "x"], "a": [1, 2, 3], "b": ["u", "v", "w"], "c": [1.5, None, 2.5]})
XY = pa.struct([("x", pa.int32()), ("y", pa.string())])
NEST = pa.table(
    {
        "p": ["x", "x", "y"],
        "st": pa.array([{"x": 1, "y": "a"}, None, {"x": None, "y": "b"}], XY),
        "a": [1, 2, 3],
        "b": [4, 5, 6],
    }
)


def _leaf_keys(tree: Any, prefix: tuple[str, ...] = ()) -> set[str]:
    out: set[str] = set()
    for k, v in (tree or {}).items():
        out |= _leaf_keys(v, (*prefix, k)) if isinstance(v, dict) else {".".join((*prefix, k))}
    return out


def _write_and_collect(tmp_path: Path, data: pa.Table, config: dict[str, str]) -> list[tuple[dict, dict]]:
    table = tmp_path / "t"
    write_deltalake(str(table), data, partition_by=["p"], configuration=config)
    meta, _, adds = _table_state(table)
    assert dict(meta.configuration) == config
    out = []
    for add in adds:
        file_data = pq.read_table(table / unquote(add["path"]))
        out.append(
            (
                collect_stats(file_data, _schema(meta), meta.configuration, meta.partition_columns),
                json.loads(add["stats"]),
            )
        )
    return out


@pytest.mark.parametrize(
    "config",
    [
        {"delta.dataSkippingNumIndexedCols": "2"},
        {"delta.dataSkippingNumIndexedCols": "-1"},
        {"delta.dataSkippingStatsColumns": "c,p,a"},
    ],
)
def test_flat_stats_column_properties_match_deltars(tmp_path: Path, config: dict[str, str]):
    for ours, theirs in _write_and_collect(tmp_path, FLAT, config):
        assert ours == theirs  # the partition column p is never counted nor given stats


def test_zero_indexed_columns(tmp_path: Path):
    for ours, theirs in _write_and_collect(tmp_path, FLAT, {"delta.dataSkippingNumIndexedCols": "0"}):
        # Spark leaves the three stats out (`collectStats` returns lit(null) without columns; the corpus
        # table data-skipping-change-stats-collected-across-versions has `{"numRecords":1}`); delta-rs
        # writes them empty. Both say: no column stats.
        assert ours == {"numRecords": theirs["numRecords"]}
        assert theirs["minValues"] == theirs["maxValues"] == theirs["nullCount"] == {}


def test_nested_num_indexed_cols_counts_leaves(tmp_path: Path):
    for ours, theirs in _write_and_collect(tmp_path, NEST, {"delta.dataSkippingNumIndexedCols": "2"}):
        # Spark `truncateSchema` counts leaf columns: st.x and st.y use up the two slots. delta-rs counts
        # top-level fields (crates/core/src/writer/stats.rs) and also indexes `a`.
        assert _leaf_keys(ours["nullCount"]) == {"st.x", "st.y"}
        assert _leaf_keys(theirs["nullCount"]) == {"st.x", "st.y", "a"}
        assert ours["nullCount"]["st"] == theirs["nullCount"]["st"]
        assert ours["minValues"]["st"] == theirs["minValues"]["st"]
        assert ours["maxValues"]["st"] == theirs["maxValues"]["st"]


def test_nested_stats_columns(tmp_path: Path):
    for ours, theirs in _write_and_collect(tmp_path, NEST, {"delta.dataSkippingStatsColumns": "st.x,b"}):
        # Spark `filterSchema` follows the path st -> x; delta-rs compares the whole name "st.x" with
        # the Parquet leaf name "x" and gives st.x no stats.
        assert _leaf_keys(ours["nullCount"]) == {"st.x", "b"}
        assert _leaf_keys(theirs["nullCount"]) == {"b"}
        assert ours["nullCount"]["b"] == theirs["nullCount"]["b"]
    for ours, _ in _write_and_collect(tmp_path / "2", NEST, {"delta.dataSkippingStatsColumns": "ST"}):
        rows = ours["numRecords"]
        assert _leaf_keys(ours["nullCount"]) == {"st.x", "st.y"} and ours["nullCount"]["st"]["x"] <= rows


# -- Delta Spark oracle: the corpus ----------------------------------------------------------------------------
def _normalized(value: Any) -> Any:
    """Spark writes timestamps in the writer's session time zone (`...000-08:00`), we write UTC (`Z`):
    compare the instants. Jackson writes `1.0E10` where Python writes `10000000000.0`: compare numbers."""
    if isinstance(value, dict):
        return {k: _normalized(v) for k, v in value.items()}
    if isinstance(value, str) and len(value) > 10 and value[4] == "-" and value[10] == "T":
        return ("instant", _parse_ts(value))
    if isinstance(value, float | int) and not isinstance(value, bool):
        return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    return value


def _spark_written_adds() -> list[tuple[str, Path, Metadata, Protocol, dict[str, Any]]]:
    """Every add with stats, no deletion vector and its file present, from a commit by Apache Spark."""
    out = []
    for log in sorted(CORPUS.rglob("_delta_log")):
        table = log.parent
        meta = proto = None
        for _, actions in _log_actions(table):
            engine = next((str(a["commitInfo"].get("engineInfo")) for a in actions if "commitInfo" in a), "")
            for a in actions:
                meta = Metadata.from_json(a["metaData"]) if "metaData" in a else meta
                proto = Protocol.from_json(a["protocol"]) if "protocol" in a else proto
            if "Apache-Spark" not in engine or meta is None or proto is None:
                continue
            for a in actions:
                add = a.get("add")
                if (
                    add
                    and add.get("stats")
                    and not add.get("deletionVector")
                    and (table / unquote(add["path"])).exists()
                ):
                    out.append((str(table.relative_to(CORPUS)), table / unquote(add["path"]), meta, proto, add))
    return out


def _features(meta: Metadata, stats: dict[str, Any]) -> set[str]:
    schema = meta.schema_string or ""
    checks = {
        "nested": any(isinstance(v, dict) for v in stats.get("nullCount", {}).values()),
        "column-mapping": meta.configuration.get("delta.columnMapping.mode") in ("id", "name"),
        "tightBounds": "tightBounds" in stats,
        "timestamp": '"timestamp"' in schema or '"timestamp_ntz"' in schema,
        "decimal": "decimal(" in schema,
        "num-indexed-cols": "delta.dataSkippingNumIndexedCols" in meta.configuration,
        "partitioned": bool(meta.partition_columns),
    }
    return {name for name, hit in checks.items() if hit}


def test_spark_written_corpus_stats_are_reproduced():
    """Delta Spark is the reference: recompute every stats object it wrote and compare."""
    cases = _spark_written_adds()
    seen: set[str] = set()
    for name, path, meta, proto, add in cases:
        theirs = json.loads(add["stats"])
        tight = tight_bounds_for(proto)
        ours = json.loads(
            stats_json(
                pq.read_table(path), _schema(meta), meta.configuration, meta.partition_columns, tight_bounds=tight
            )
        )
        assert _normalized(ours) == _normalized(theirs), (name, add["path"])
        seen |= _features(meta, theirs)
    assert seen == {
        "nested",
        "column-mapping",
        "tightBounds",
        "timestamp",
        "decimal",
        "num-indexed-cols",
        "partitioned",
    }
    assert len({c[0] for c in cases}) >= 20


def test_column_mapping_table_stats_are_physical_and_equal_the_log(tmp_path: Path):
    table = copy_table("delta-golden/dv-with-columnmapping", tmp_path)
    meta, proto, adds = _table_state(table)
    schema = _schema(meta)
    logical_to_physical = {f.name: f.physical_name for f in schema.fields}
    assert meta.configuration["delta.columnMapping.mode"] == "name"
    checked = {"tight": 0, "wide": 0}
    for add in adds:
        if not (table / unquote(add["path"])).exists():
            continue
        data = pq.read_table(table / unquote(add["path"]))
        assert set(data.column_names) == {logical_to_physical["col1"], logical_to_physical["col2"]}
        ours = stats_json(
            data, schema, meta.configuration, meta.partition_columns, tight_bounds=tight_bounds_for(proto)
        )
        if not add.get("deletionVector"):
            assert ours == add["stats"]  # byte for byte, physical keys and Spark's key order
            checked["tight"] += 1
        else:
            # A DELETE that adds a deletion vector keeps the physical file's stats and marks them wide
            # (`StatisticsCollection.updateStatsToWideBounds`): the same stats, tightBounds false.
            theirs = json.loads(add["stats"])
            assert theirs.pop("tightBounds") is False
            mine = json.loads(ours)
            assert mine.pop("tightBounds") is True
            assert mine == theirs
            checked["wide"] += 1
    assert checked["tight"] > 0 and checked["wide"] > 0
