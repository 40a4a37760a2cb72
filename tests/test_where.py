"""`--where` / `Snapshot.files(where)`: the predicate grammar wired into file listing.

The differential tests write randomized tables with delta-rs (and read column-mapped tables of the
corpus), draw random predicates, and compare the files we return with the rows pyarrow keeps when it
filters each file's rows with the same predicate: every file with a matching row is returned, and a
predicate on partition columns only returns exactly those files. `deltalog files --where` must return
what `Snapshot.files` does.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from conftest import CORPUS

from airflow_delta_provider.cli import main
from airflow_delta_provider.delta import DeltaLog, Snapshot
from airflow_delta_provider.delta.protocol.predicate import And, Comparison, InList

deltalake = pytest.importorskip("deltalake")
from deltalake import DeltaTable, write_deltalake  # noqa: E402

DEMO_SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "sample_table.py"


def cli_files(table: str, where: str) -> tuple[int, list[str], str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["files", table, "--where", where, "--json"], out=out, err=err)
    paths = [f["path"] for f in json.loads(out.getvalue())["files"]] if code == 0 else []
    return code, paths, err.getvalue()


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> str:
    """delta-rs table: partitions region=eu (2 files), us (1), apac (1, the only one with ids >= 400)."""
    path = tmp_path_factory.mktemp("where") / "sample"
    subprocess.run([sys.executable, str(DEMO_SCRIPT), str(path)], check=True, capture_output=True)
    return str(path)


def _regions(table: str, where: str) -> list[str]:
    code, paths, err = cli_files(table, where)
    assert code == 0, err
    return sorted(p.split("/")[0].removeprefix("region=") for p in paths)


# -- the grammar in the CLI ---------------------------------------------------------------------------


def test_or_not_parentheses_and_in(sample):
    assert _regions(sample, "region = 'eu' OR region = 'us'") == ["eu", "eu", "us"]
    assert _regions(sample, "region = 'eu' or region = 'us'") == _regions(sample, "region IN ('eu', 'us')")
    assert _regions(sample, "NOT region IN ('eu', 'us')") == ["apac"]
    assert _regions(sample, "region != 'eu' AND (id >= 400 OR region = 'us')") == ["apac", "us"]
    assert _regions(sample, "region IS NULL") == []
    assert _regions(sample, "region IS NOT NULL AND id IS NOT NULL") == ["apac", "eu", "eu", "us"]
    assert _regions(sample, "id >= 400") == ["apac"]  # data skipping on stats
    assert _regions(sample, "id < 0 OR region = 'apac'") == ["apac"]


def test_a_quoted_value_may_hold_keywords(tmp_path):
    table = str(tmp_path / "t")
    regions = ["north AND south", "east", "it's (OR) x"]
    write_deltalake(table, pa.table({"region": regions, "id": [1, 2, 3]}), partition_by=["region"])
    for i, region in enumerate(regions):
        literal = "'" + region.replace("'", "''") + "'"
        code, paths, err = cli_files(table, f"region = {literal}")
        assert code == 0 and len(paths) == 1, err
        assert DeltaLog(table).update().files(f"id = {i + 1}") == DeltaLog(table).update().files(f"region = {literal}")


def test_tuple_filters_and_a_predicate_share_one_evaluation(sample):
    snap = DeltaLog(sample).update()
    by_tuple = snap.files(partition_filters=[("region", "in", ["eu", "us"])], data_filters=[("id", ">=", 100)])
    assert by_tuple == snap.files("region IN ('eu', 'us') AND id >= 100")
    assert snap.files([("region", "=", "apac")]) == snap.files("region = 'apac'")  # the old positional form
    assert snap.files(And((InList("region", ("eu",)), Comparison("id", "<", 5)))) == snap.files(
        "region = 'eu' AND id < 5"
    )


# -- differential against pyarrow -------------------------------------------------------------------------

PART_STRINGS = ["a", "b", "a b", "x AND y", "ü", "it's", None]
LONG = "L" * 40
STRINGS = ["", "a", "ab", "b", "it's", "x OR y", "zz", LONG, LONG + "a", LONG + "z"]
BASE_TS = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
ARROW = {
    "string": pa.string(),
    "long": pa.int64(),
    "integer": pa.int32(),
    "short": pa.int16(),
    "byte": pa.int8(),
    "double": pa.float64(),
    "float": pa.float32(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "boolean": pa.bool_(),
}


def _null(rng: random.Random, value: Any) -> Any:
    return None if rng.random() < 0.12 else value


def _batch(rng: random.Random, n: int) -> pa.Table:
    """Rows of one append, drawn from narrow ranges so that stats can prune."""
    i0, f0, d0 = rng.randint(0, 300), rng.uniform(-50, 50), rng.randint(0, 60)
    s0 = rng.randrange(len(STRINGS) - 2)
    cols = {
        "p_s": [rng.choice(PART_STRINGS)] * n,
        "p_i": [_null(rng, rng.randint(0, 3))] * n,
        "i": [_null(rng, i0 + rng.randint(0, 20)) for _ in range(n)],
        "f": [_null(rng, round(f0 + rng.uniform(0, 5), 3)) for _ in range(n)],
        "s": [_null(rng, STRINGS[s0 + rng.randint(0, 2)]) for _ in range(n)],
        "d": [_null(rng, dt.date(2024, 1, 1) + dt.timedelta(days=d0 + rng.randint(0, 5))) for _ in range(n)],
        "ts": [_null(rng, BASE_TS + dt.timedelta(seconds=d0 * 3600 + rng.randint(0, 7200))) for _ in range(n)],
        "b": [_null(rng, rng.random() < 0.5) for _ in range(n)],
    }
    types = {"p_s": "string", "p_i": "long", "i": "long", "f": "double", "s": "string", "d": "date"}
    types |= {"ts": "timestamp", "b": "boolean"}
    return pa.table({c: pa.array(v, ARROW[types[c]]) for c, v in cols.items()})


def _write_random_table(path: str, seed: int, partition_by: list[str]) -> None:
    rng = random.Random(seed)
    for _ in range(8):
        write_deltalake(path, _batch(rng, rng.randint(1, 25)), partition_by=partition_by or None, mode="append")
    DeltaTable(path).delete(f"i < {rng.randint(20, 120)}")  # rewrites some files


def _typed_partition(raw: str | None, type_name: str) -> Any:
    if raw is None or raw == "":
        return None
    return int(raw) if type_name in ("long", "integer", "short", "byte") else raw


def _rows_by_file(table: str, snap: Snapshot) -> dict[str, pa.Table]:
    """Each active file's rows, with logical column names and typed partition columns (the oracle's view)."""
    fields = {f.name: f for f in snap.schema.fields}
    mapped = snap.column_mapping_mode != "none"
    out = {}
    for add in snap.all_files():
        data = pq.read_table(Path(table) / unquote(add.path))
        names = {f.physical_name if mapped else f.name: f.name for f in fields.values()}
        data = data.rename_columns([names.get(n, n) for n in data.column_names])
        for column in (c for c in snap.partition_columns if fields[c].type_name in ARROW):
            value = snap.partition_values(add)[column] if mapped else None
            if not mapped:
                value = _typed_partition(add.partition_values.get(column), fields[column].type_name)
            data = data.append_column(column, pa.array([value] * data.num_rows, ARROW[fields[column].type_name]))
        cols = {}
        for name in data.column_names:
            col = data.column(name)
            if pa.types.is_string_view(col.type) or pa.types.is_large_string(col.type):
                col = col.cast(pa.string())
            if pa.types.is_timestamp(col.type) and col.type.tz is None:  # INT96: UTC instants
                col = col.cast(pa.timestamp("us")).combine_chunks().view(pa.timestamp("us", tz="UTC"))
            cols[name] = col
        out[add.path] = pa.table(cols)
    return out


def _literal(rng: random.Random, type_name: str, values: list[Any]) -> tuple[str, Any]:
    """A literal near the column's values: (predicate text, pyarrow scalar)."""
    present = [v for v in values if v is not None]
    v = rng.choice(present) if present and rng.random() < 0.7 else None
    if type_name == "string":
        v = v if v is not None else rng.choice(STRINGS + PART_STRINGS[:-1])
        return "'" + v.replace("'", "''") + "'", pa.scalar(v)
    if type_name in ("long", "integer", "short", "byte"):
        v = (v if v is not None else rng.randint(-5, 320)) + rng.choice([0, 0, -1, 1])
        return str(v), pa.scalar(v, pa.int64())
    if type_name in ("double", "float"):
        v = round((v if v is not None else rng.uniform(-60, 60)) * 2) / 2 + rng.choice([0, 0.5])
        return repr(float(v)), pa.scalar(float(v), pa.float64())
    if type_name == "date":
        v = (v if v is not None else dt.date(2024, 1, 1)) + dt.timedelta(days=rng.choice([0, -1, 1]))
        return f"DATE '{v.isoformat()}'", pa.scalar(v, pa.date32())
    if type_name == "timestamp":
        v = (v if v is not None else BASE_TS) + dt.timedelta(seconds=rng.choice([0, 0, -1, 1, 3600]))
        return f"TIMESTAMP '{v.isoformat()}'", pa.scalar(v, ARROW["timestamp"])
    v = v if v is not None else rng.random() < 0.5
    return ("TRUE" if v else "FALSE"), pa.scalar(v)


def _leaf(rng: random.Random, columns: dict[str, str], values: dict[str, list[Any]]) -> tuple[str, Any, set[str]]:
    column = rng.choice(sorted(columns))
    t, field, name = columns[column], pc.field(column), "`" + column.replace("`", "``") + "`"
    kind = rng.random()
    if kind < 0.15:
        negated = rng.random() < 0.5
        return (
            f"{name} IS {'NOT ' if negated else ''}NULL",
            (field.is_valid() if negated else field.is_null()),
            {column},
        )
    if kind < 0.35:
        lits = [_literal(rng, t, values[column]) for _ in range(rng.randint(1, 3))]
        hit = field == lits[0][1]
        for _, scalar in lits[1:]:
            hit = hit | (field == scalar)
        negated = rng.random() < 0.3
        text = f"{name} {'NOT ' if negated else ''}IN ({', '.join(x for x, _ in lits)})"
        return text, (~hit if negated else hit), {column}
    ops = ["=", "!="] if t == "boolean" else ["=", "!=", "<", "<=", ">", ">="]
    op = rng.choice(ops)
    text, scalar = _literal(rng, t, values[column])
    expr = {
        "=": field == scalar,
        "!=": field != scalar,
        "<": field < scalar,
        "<=": field <= scalar,
        ">": field > scalar,
        ">=": field >= scalar,
    }[op]
    return f"{name} {op} {text}", expr, {column}


def _predicate(rng, columns, values, depth=0) -> tuple[str, Any, set[str]]:
    roll = rng.random()
    if depth >= 2 or roll < 0.4:
        return _leaf(rng, columns, values)
    if roll < 0.5:
        text, expr, used = _predicate(rng, columns, values, depth + 1)
        return f"NOT ({text})", ~expr, used
    left, right = _predicate(rng, columns, values, depth + 1), _predicate(rng, columns, values, depth + 1)
    word = rng.choice(["AND", "OR"])
    expr = left[1] & right[1] if word == "AND" else left[1] | right[1]
    return f"({left[0]}) {word} ({right[0]})", expr, left[2] | right[2]


def _check(table: str, seed: int, cases: int, columns: dict[str, str] | None = None, cli_every: int = 4) -> int:
    """Random predicates on `table`; returns how many files pruning dropped in all (to show it does)."""
    snap = DeltaLog(table).update()
    rows = _rows_by_file(table, snap)
    if columns is None:
        columns = {f.name: f.type_name for f in snap.schema.fields if f.type_name in ARROW}
    values = {c: [v for t in rows.values() for v in t.column(c).to_pylist()] for c in columns}
    parts = set(snap.partition_columns)
    rng = random.Random(seed)
    dropped = 0
    for case in range(cases):
        text, expr, used = _predicate(rng, columns, values)
        expected = {path for path, data in rows.items() if data.filter(expr).num_rows}
        got = {a.path for a in snap.files(text)}
        assert expected <= got, (text, sorted(expected - got))
        if used <= parts:
            assert got == expected, (text, sorted(got - expected))
        if case % cli_every == 0:
            code, paths, err = cli_files(table, text)
            assert code == 0 and set(paths) == got, (text, err)
        dropped += len(rows) - len(got)
    return dropped


@pytest.mark.parametrize(
    ("seed", "partition_by"), [(1, ["p_s", "p_i"]), (2, ["p_s"]), (3, [])], ids=["two-parts", "one-part", "none"]
)
def test_files_match_pyarrow_row_filtering_on_random_delta_rs_tables(tmp_path, seed, partition_by):
    table = str(tmp_path / "t")
    _write_random_table(table, seed, partition_by)
    assert _check(table, seed, cases=150) > 0  # pruning happened somewhere


CORPUS_MAPPED = [
    "delta-golden/table-with-columnmapping-mode-name",
    "delta-golden/table-with-columnmapping-mode-id",
    "delta-golden/data-skipping-basic-stats-all-types-columnmapping-name",
    "delta-golden/data-skipping-basic-stats-all-types-columnmapping-id",
    "delta-kernel-java/data-reader-partition-values-column-mapping-name",
    "delta-rs/table_with_column_mapping",
]


@pytest.mark.parametrize("name", CORPUS_MAPPED)
def test_column_mapping_reads_stats_and_partitions_by_physical_name(name):
    """Stats and partition values are keyed by physical names; predicates use logical names."""
    table = str(CORPUS / name)
    snap = DeltaLog(table).update()
    assert snap.column_mapping_mode in ("name", "id")
    _check(table, 7, cases=60, cli_every=10)


def test_column_mapping_prunes_on_stats_and_partitions():
    snap = DeltaLog(str(CORPUS / "delta-rs/table_with_column_mapping")).update()
    all_files = snap.files()
    assert len(all_files) == 2
    assert snap.files("`Super Name` < 'A'") == []  # minValues under the physical name
    assert len(snap.files("`super name` >= 'A'")) == 2  # case-insensitive column names
    companies = {snap.partition_values(a)["Company Very Short"] for a in all_files}
    one = sorted(c for c in companies if c is not None)[0]
    assert [snap.partition_values(a)["Company Very Short"] for a in snap.files(f"`Company Very Short` = '{one}'")] == [
        one
    ]
