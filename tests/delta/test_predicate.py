"""The `--where` predicate grammar, its three-valued evaluation and conservative file pruning."""

from __future__ import annotations

import datetime as dt
import json
import random
from decimal import Decimal
from functools import reduce
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from support.predicate_eval import evaluate_row

from airflow_delta_provider.delta.errors import DeltaError, InvalidArgumentError, error_from_dict
from airflow_delta_provider.delta.protocol.predicate import (
    And,
    Comparison,
    InList,
    IsNull,
    Not,
    Or,
    PredicateSyntaxError,
    might_match_file,
    parse_predicate,
    validate,
)

UTC = dt.UTC

# -- grammar -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "tree"),
    [
        ("a = 1", Comparison("a", "=", 1)),
        ("a == 1", Comparison("a", "=", 1)),
        ("a <> -2", Comparison("a", "!=", -2)),
        ("a != +2", Comparison("a", "!=", 2)),
        ("a<1.5", Comparison("a", "<", Decimal("1.5"))),
        ("a <= .5", Comparison("a", "<=", Decimal("0.5"))),
        ("a > 1.5e3", Comparison("a", ">", 1500.0)),
        ("a >= 2E-1", Comparison("a", ">=", 0.2)),
        ("a = 'x'", Comparison("a", "=", "x")),
        ('a = "x"', Comparison("a", "=", "x")),
        ("a = TRUE", Comparison("a", "=", True)),
        ("a = false", Comparison("a", "=", False)),
        ("a = DATE '2024-01-31'", Comparison("a", "=", dt.date(2024, 1, 31))),
        ("a < timestamp '2024-01-31 10:20:30.5'", Comparison("a", "<", dt.datetime(2024, 1, 31, 10, 20, 30, 500000))),
        ("a < TIMESTAMP '2024-01-31T10:20Z'", Comparison("a", "<", dt.datetime(2024, 1, 31, 10, 20, tzinfo=UTC))),
        ("a IN (1, 'x', 2.5)", InList("a", (1, "x", Decimal("2.5")))),
        ("a not in ('x')", InList("a", ("x",), negated=True)),
        ("a IS NULL", IsNull("a")),
        ("a is not null", IsNull("a", negated=True)),
        ("n.x.y = 1", Comparison("n.x.y", "=", 1)),
        ("`weird col` = 1", Comparison("weird col", "=", 1)),
        ("`a``b`.c = 1", Comparison("a`b.c", "=", 1)),
        ("`and` = 1", Comparison("and", "=", 1)),
        ("date = '2024-01-01'", Comparison("date", "=", "2024-01-01")),
        ("é_1 = 1", Comparison("é_1", "=", 1)),
        ("NOT a = 1", Not(Comparison("a", "=", 1))),
        ("not not (a = 1)", Not(Not(Comparison("a", "=", 1)))),
        ("(a = 1)", Comparison("a", "=", 1)),
        ("a = 1 AND b = 2 and c = 3", And((Comparison("a", "=", 1), Comparison("b", "=", 2), Comparison("c", "=", 3)))),
        ("a = 1 or b = 2 OR c = 3", Or((Comparison("a", "=", 1), Comparison("b", "=", 2), Comparison("c", "=", 3)))),
    ],
)
def test_each_construct_parses_to_its_tree(text: str, tree: Any) -> None:
    assert parse_predicate(text) == tree


def test_precedence_is_not_then_and_then_or() -> None:
    a, b, c, d = (Comparison(x, "=", 1) for x in "abcd")
    assert parse_predicate("a = 1 OR b = 1 AND NOT c = 1 OR d = 1") == Or((a, And((b, Not(c))), d))
    assert parse_predicate("NOT a = 1 AND b = 1") == And((Not(a), b))
    assert parse_predicate("(a = 1 OR b = 1) AND c = 1") == And((Or((a, b)), c))
    assert parse_predicate("NOT (a = 1 OR b = 1)") == Not(Or((a, b)))


def test_quoted_values_keep_keywords_parentheses_and_escapes() -> None:
    assert parse_predicate("s = 'x AND y'") == Comparison("s", "=", "x AND y")
    assert parse_predicate("s IN ('a OR b', ')', ',')") == InList("s", ("a OR b", ")", ","))
    assert parse_predicate("s = 'it''s'") == Comparison("s", "=", "it's")
    assert parse_predicate('s = "say ""hi"""') == Comparison("s", "=", 'say "hi"')
    assert parse_predicate("s = ''") == Comparison("s", "=", "")
    assert parse_predicate("s = 'a\\b'") == Comparison("s", "=", "a\\b")  # no backslash escapes


def test_the_issue_inputs() -> None:
    assert parse_predicate("region = 'eu' OR region = 'us'") == Or(
        (Comparison("region", "=", "eu"), Comparison("region", "=", "us"))
    )
    with pytest.raises(PredicateSyntaxError, match=r"after 'AND' at position 18, found end of input") as err:
        parse_predicate("region = 'eu' AND")
    assert err.value.position == 18


@pytest.mark.parametrize(
    ("text", "position", "fragment"),
    [
        ("", 1, "expected a column name"),
        ("   ", 4, "found end of input"),
        ("a = ", 5, "expected a value after '='"),
        ("a = NULL", 5, "IS NULL"),
        ("a = b", 5, "quote strings"),
        ("1 = a", 1, "expected a column name"),
        ("and = 1", 1, "backquote"),
        ("a IN ()", 7, "expected a value after '('"),
        ("a IN 1", 6, "expected '('"),
        ("a IN (1 2)", 9, "expected ',' or ')'"),
        ("a NOT = 1", 7, "expected IN after 'NOT'"),
        ("a IS 1", 6, "expected NULL or NOT NULL"),
        ("a IS NOT 1", 10, "expected NULL after 'NOT'"),
        ("(a = 1", 7, "'(' at position 1 is not closed"),
        ("a = 1)", 6, "expected AND, OR or end of input"),
        ("a = 1 b = 2", 7, "found 'b'"),
        ("a", 2, "expected a comparison operator, IN, NOT IN or IS"),
        ("a = 'x", 5, "unterminated string"),
        ("`a = 1", 1, "unterminated backquoted name"),
        ("`` = 1", 1, "empty backquoted name"),
        ("a = 1.2.3", 5, "malformed number"),
        ("a = 12abc", 5, "malformed number"),
        ("a ! 1", 3, "unexpected character '!'"),
        ("a = - 1", 5, "unexpected character '-'"),
        ("a. = 1", 4, "expected a field name after '.'"),
        ("a = DATE '2024-13-01'", 10, "invalid DATE literal"),
        ("a = TIMESTAMP '2024-01-01 1:00'", 15, "invalid TIMESTAMP literal"),
        ("a = 1 AND OR b = 1", 11, "found 'OR'"),
        ("a = 1 AND AND", 11, "backquote a column"),
        ("(" * 101 + "a = 1" + ")" * 101, 101, "nested"),
    ],
)
def test_bad_input_raises_a_positioned_syntax_error(text: str, position: int, fragment: str) -> None:
    with pytest.raises(PredicateSyntaxError) as err:
        parse_predicate(text)
    assert isinstance(err.value, DeltaError) and isinstance(err.value, InvalidArgumentError)
    assert err.value.position == position
    message = str(err.value)
    assert message.startswith("--where: ") and f"at position {position}" in message and fragment in message


def test_error_label_and_round_trip_through_to_dict() -> None:
    with pytest.raises(PredicateSyntaxError, match=r"^where: expected a value") as err:
        parse_predicate("a =", label="where")
    back = error_from_dict(err.value.to_dict())
    assert type(back) is PredicateSyntaxError and str(back) == str(err.value)


def test_columns_are_listed_once_in_order() -> None:
    expr = parse_predicate("b = 1 AND (a IS NULL OR NOT b IN (1)) OR `c d`.e > 2")
    assert expr.columns() == ("b", "a", "c d.e")


# -- row evaluation ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("n = 1", None),
        ("n != 1", None),
        ("NOT n = 1", None),
        ("n IN (1, 2)", None),
        ("n NOT IN (1, 2)", None),
        ("n IS NULL", True),
        ("n IS NOT NULL", False),
        ("n = 1 AND t = 1", None),
        ("n = 1 AND f = 1", False),
        ("n = 1 OR t = 1", True),
        ("n = 1 OR f = 1", None),
        ("NOT (n = 1 OR f = 1)", None),
        ("t = 1 AND NOT f = 1", True),
        ("T = 1", True),  # case-insensitive lookup
        ("nested.X = 5", True),
        ("nested.y IS NULL", True),
        ("gone.x IS NULL", True),  # fields of a null struct are null
    ],
)
def test_evaluate_row_is_three_valued(text: str, expected: bool | None) -> None:
    row = {"n": None, "t": 1, "f": 2, "nested": {"x": 5, "y": None}, "gone": None}
    assert evaluate_row(parse_predicate(text), row) is expected


def test_evaluate_row_coerces_literals_to_the_values_type() -> None:
    row = {
        "i": 5,
        "x": 0.1,
        "m": Decimal("1.23"),
        "s": "10",
        "d": dt.date(2024, 1, 2),
        "ts": dt.datetime(2024, 1, 2, 3, tzinfo=UTC),
        "ntz": dt.datetime(2024, 1, 2, 3),
        "b": True,
    }
    true = [
        "i = 5.0",
        "i < 5.5",
        "i = '5'",
        "x = 0.1",
        "x = 1e-1",
        "m = 1.23",
        "m = 123e-2",
        "s = 10",
        "s > '0'",
        "d = '2024-01-02'",
        "d = DATE '2024-01-02'",
        "ts = TIMESTAMP '2024-01-02 03:00:00'",
        "ts = TIMESTAMP '2024-01-02T04:00:00+01:00'",
        "ntz = TIMESTAMP '2024-01-02 03:00:00'",
        "ts > DATE '2024-01-02'",
        "b = true",
        "b = 'TRUE'",
    ]
    for text in true:
        assert evaluate_row(parse_predicate(text), row) is True, text
    for text in ["i = true", "b = 1", "d = 5"]:
        with pytest.raises(InvalidArgumentError, match="Cannot compare column"):
            evaluate_row(parse_predicate(text), row)
    with pytest.raises(InvalidArgumentError, match="Unknown column 'zz'"):
        evaluate_row(parse_predicate("zz = 1"), row)


# -- validation --------------------------------------------------------------------------------------------

FIELDS = {
    "Id": "long",
    "x": "double",
    "price": "decimal(10,2)",
    "s": "string",
    "d": "date",
    "ts": "timestamp",
    "ntz": "timestamp_ntz",
    "flag": "boolean",
    "bin": "binary",
    "st": "struct",
    "st.f": "integer",
}


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("id = '7'", 7),
        ("id < 2.5", Decimal("2.5")),
        ("x = 1", 1.0),
        ("x = 2.5", 2.5),
        ("price = 0.1", Decimal("0.1")),
        ("price = 1e-1", Decimal("0.1")),
        ("price = '3.10'", Decimal("3.10")),
        ("s = 5", "5"),
        ("s = true", "true"),
        ("d = '2024-01-02'", dt.date(2024, 1, 2)),
        ("ts = '2024-01-02 03:04:05'", dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("ts = TIMESTAMP '2024-01-02 03:04:05+02:00'", dt.datetime(2024, 1, 2, 1, 4, 5, tzinfo=UTC)),
        ("ts = DATE '2024-01-02'", dt.datetime(2024, 1, 2, tzinfo=UTC)),
        ("ntz = TIMESTAMP '2024-01-02 03:04:05Z'", dt.datetime(2024, 1, 2, 3, 4, 5)),
        ("flag = 'false'", False),
        ("bin = 'ab'", b"ab"),
        ("st.f = '3'", 3),
    ],
)
def test_validate_coerces_literals_to_the_column_type(text: str, value: Any) -> None:
    out = validate(parse_predicate(text), FIELDS)
    assert isinstance(out, Comparison)
    assert out.value == value and type(out.value) is type(value)


def test_validate_resolves_names_and_rebuilds_the_tree() -> None:
    out = validate(parse_predicate("NOT ID IN ('1', 2) OR (S IS NULL AND flag = true)"), FIELDS)
    assert out == Or((Not(InList("Id", (1, 2))), And((IsNull("s"), Comparison("flag", "=", True)))))


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("nope = 1", "unknown column 'nope' at position 1 (columns: Id, x,"),
        ("s = 1 AND zz.y IS NULL", "unknown column 'zz.y' at position 11"),
        ("id = 'abc'", "'abc' is not a valid long value for column 'Id' at position 1"),
        ("id = true", "not a valid long value"),
        ("x = DATE '2024-01-01'", "not a valid double value for column 'x'"),
        ("flag = 1", "not a valid boolean value"),
        ("d = '2024-1-2'", "not a valid date value"),
        ("d = TIMESTAMP '2024-01-02 00:00:00'", "not a valid date value"),
        ("ts = 'yesterday'", "not a valid timestamp value"),
        ("price IN (1, 'x')", "'x' is not a valid decimal(10,2) value"),
        ("st = 1", "not a valid struct value"),
    ],
)
def test_validate_errors_name_the_column(text: str, fragment: str) -> None:
    with pytest.raises(PredicateSyntaxError) as err:
        validate(parse_predicate(text), FIELDS)
    assert fragment in str(err.value) and "partition" not in str(err.value)


def test_validate_refuses_ambiguous_names_but_prefers_an_exact_one() -> None:
    assert validate(parse_predicate("ab = 1"), {"AB": "long", "ab": "long"}) == Comparison("ab", "=", 1)
    with pytest.raises(PredicateSyntaxError, match="column 'Ab' at position 1 is ambiguous"):
        validate(parse_predicate("Ab = 1"), {"AB": "long", "ab": "long"})


# -- file pruning: cases -----------------------------------------------------------------------------------

STATS = {
    "numRecords": 10,
    "minValues": {"x": 1, "s": "b", "long": "p" * 32, "n": {"y": 5}, "d": "2024-01-01", "f": 2.0, "m": 1.23},
    "maxValues": {"x": 10, "s": "d", "long": "q" * 32, "n": {"y": 5}, "d": "2024-01-31", "f": 2.0, "m": 4.56},
    "nullCount": {"x": 0, "s": 3, "long": 0, "n": {"y": 0}, "d": 0, "f": 0, "m": 0},
}


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("x = 5", True),
        ("x = 11", False),
        ("x < 1", False),
        ("x <= 1", True),
        ("x > 10", False),
        ("x >= 10", True),
        ("x IN (0, 11)", False),
        ("x IN (0, 10)", True),
        ("NOT x > 0", False),  # NOT over stats: every row has x > 0
        ("NOT x > 5", True),
        ("NOT (x >= 1 AND x <= 10)", False),
        ("NOT x IN (0, 11)", True),
        ("x IS NULL", False),
        ("x IS NOT NULL", True),
        ("NOT s IS NULL", True),
        ("s IS NULL", True),
        ("NOT s < 'z'", False),  # null s gives unknown, never true
        ("s = 'e' OR x = 0", False),
        ("s = 'e' OR x = 1", True),
        ("long = 'qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqzzz'", True),  # a 32-char max may be a truncated prefix
        ("long > 'qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqzzz'", True),
        ("long < 'p'", False),  # the (truncated) minimum still bounds from below
        ("n.y = 5", True),
        ("n.y != 5", False),
        ("NOT n.y = 5", False),
        ("d >= DATE '2024-02-01'", False),
        ("d = '2024-01-15'", True),
        ("f != 2", True),  # a NaN (outside min/max) is != 2
        ("NOT f = 2", True),
        ("f > 2", False),
        ("m >= 4.56", True),  # decimal stats read from JSON floats compare exactly
        ("m > 4.56", False),
        ("nostats = 1", True),
        ("NOT nostats = 1", True),
        ("x = 'abc'", True),  # incomparable with the stats: keep
    ],
)
def test_might_match_file_on_data_column_stats(text: str, kept: bool) -> None:
    fields = {"x": "long", "s": "string", "long": "string", "n.y": "integer", "d": "date", "f": "double"}
    fields |= {"m": "decimal(5,2)", "nostats": "long"}
    expr = parse_predicate(text)
    if "'abc'" not in text:
        expr = validate(expr, fields)
    assert might_match_file(expr, {}, STATS, []) is kept


def test_might_match_file_widens_millisecond_timestamp_maxima() -> None:
    stats = {
        "numRecords": 2,
        "minValues": {"ts": "2024-01-01T00:00:00.000Z"},
        "maxValues": {"ts": "2024-01-01T00:00:01.500Z"},
        "nullCount": {"ts": 0},
    }
    fields = {"ts": "timestamp", "ntz": "timestamp_ntz"}

    def kept(text: str) -> bool:
        return might_match_file(validate(parse_predicate(text), fields), {}, stats, [])

    assert kept("ts = TIMESTAMP '2024-01-01 00:00:01.500999'")  # the row may hold .500999 (stats cut to ms)
    assert kept("ts > TIMESTAMP '2024-01-01 00:00:01.500'")
    assert not kept("ts > TIMESTAMP '2024-01-01 00:00:01.501'")
    assert not kept("ts >= TIMESTAMP '2024-01-01 00:00:01.501001'")
    assert not kept("ts < TIMESTAMP '2024-01-01 00:00:00'")
    assert not kept("ts < TIMESTAMP '2024-01-01 01:00:00+01:00'")
    ntz = {
        "numRecords": 1,
        "minValues": {"ntz": "2024-01-01T00:00:00.000"},
        "maxValues": {"ntz": "2024-01-01T00:00:00.000"},
    }
    assert not might_match_file(validate(parse_predicate("ntz > '2024-01-01 00:00:00.001'"), fields), {}, ntz, [])
    assert might_match_file(validate(parse_predicate("ntz > '2024-01-01 00:00:00.000999'"), fields), {}, ntz, [])


def test_might_match_file_partitions_empty_files_and_missing_stats() -> None:
    region = ["Region"]  # matched case-insensitively
    expr = parse_predicate("region = 'eu' AND x > 100")
    assert might_match_file(expr, {"region": "eu"}, None, region)  # no stats: keep
    assert not might_match_file(expr, {"region": "us"}, None, region)
    assert not might_match_file(expr, {"region": "eu"}, STATS, region)
    assert might_match_file(expr, {"region": "eu"}, {"numRecords": 10}, region)
    assert not might_match_file(parse_predicate("x IS NULL"), {}, {"numRecords": 0}, [])
    assert not might_match_file(parse_predicate("region = 'eu'"), {}, None, region)  # missing: null
    assert might_match_file(parse_predicate("REGION IS NULL"), {"REGION": None}, None, region)
    assert might_match_file(parse_predicate("NOT region = 'us'"), {"region": "eu"}, None, region)
    with pytest.raises(InvalidArgumentError, match="Cannot compare column 'region'"):
        might_match_file(parse_predicate("region = 1"), {"region": dt.date(2024, 1, 1)}, None, region)


# -- differential: random tables and predicates against pyarrow.compute -------------------------------------

PARTS = ("p_s", "p_i")
FIELD_TYPES = {
    "p_s": "string",
    "p_i": "long",
    "i": "long",
    "f": "double",
    "s": "string",
    "d": "date",
    "b": "boolean",
    "ts": "timestamp",
    "n.x": "integer",
}
ARROW_TYPES = {
    "p_s": pa.string(),
    "p_i": pa.int64(),
    "i": pa.int64(),
    "f": pa.float64(),
    "s": pa.string(),
    "d": pa.date32(),
    "b": pa.bool_(),
    "ts": pa.timestamp("us", tz="UTC"),
    "n.x": pa.int32(),
}
LONG = "L" * 32
STRINGS = ["", "a", "ab", "b", "it's", 'say "hi"', "x AND y", "zz", LONG, LONG + "a", LONG + "m", LONG + "z" * 8]
T0 = dt.datetime(2024, 1, 1, tzinfo=UTC)


def _maybe(rng: random.Random, value: Any, null_rate: float = 0.15) -> Any:
    return None if rng.random() < null_rate else value


def _rows(rng: random.Random, n: int) -> list[dict[str, Any]]:
    rows = []
    for _ in range(n):
        ts = T0 + dt.timedelta(milliseconds=rng.randrange(3000), microseconds=rng.randrange(1000))
        rows.append(
            {
                "p_s": rng.choice(["eu", "us", "apac", None]),
                "p_i": rng.choice([1, 2, 3]),
                "i": _maybe(rng, rng.randint(-20, 20)),
                "f": _maybe(rng, round(rng.uniform(-10, 10), 2)),
                "s": _maybe(rng, rng.choice(STRINGS)),
                "d": _maybe(rng, dt.date(2024, 1, 1) + dt.timedelta(days=rng.randrange(60))),
                "b": _maybe(rng, rng.random() < 0.5),
                "ts": _maybe(rng, ts),
                "n": {"x": _maybe(rng, rng.randint(0, 9))},
            }
        )
    return rows


def _get(row: dict[str, Any], column: str) -> Any:
    return row["n"]["x"] if column == "n.x" else row[column]


def _stat(column: str, value: Any, *, upper: bool, truncate: bool) -> Any:
    if column == "s" and (truncate or not upper):
        return value[:32]  # Delta cuts string stats to 32 characters (some writers also cut the maximum)
    if column == "d":
        return value.isoformat()
    if column == "ts":
        return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"  # cut to ms
    return value


def _file_stats(rng: random.Random, rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    if rng.random() < 0.1:
        return None
    truncate = rng.random() < 0.5
    stats: dict[str, Any] = {"numRecords": len(rows), "minValues": {}, "maxValues": {}, "nullCount": {}}
    for column in ("i", "f", "s", "d", "b", "ts", "n.x"):
        values = [v for v in (_get(r, column) for r in rows) if v is not None]
        key, nested = ("n", True) if column == "n.x" else (column, False)
        bounds = [("nullCount", len(rows) - len(values))]
        if values and column != "b" and rng.random() < 0.9:  # Delta keeps no min/max for booleans
            bounds += [
                ("minValues", _stat(column, min(values), upper=False, truncate=truncate)),
                ("maxValues", _stat(column, max(values), upper=True, truncate=truncate)),
            ]
        for section, value in bounds:
            stats[section][key] = {"x": value} if nested else value
    return json.loads(json.dumps(stats))  # as parsed from the log


def _files(rng: random.Random, rows: list[dict[str, Any]]) -> list[list[int]]:
    """Row indexes per file: one group per partition, sorted on a random column, cut into chunks."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    for index, row in enumerate(rows):
        groups.setdefault((row["p_s"], row["p_i"]), []).append(index)
    files = []
    for indexes in groups.values():
        column = rng.choice(["i", "f", "s", "d", "ts", "n.x"])
        indexes.sort(key=lambda k: (_get(rows[k], column) is None, _get(rows[k], column)))
        while indexes:
            size = rng.randint(1, 12)
            files.append(indexes[:size])
            indexes = indexes[size:]
    return files


def _literal(rng: random.Random, column: str, rows: list[dict[str, Any]]) -> tuple[str, Any]:
    """A literal's text and its value for pyarrow (near the column's data, sometimes outside it)."""
    values = [v for v in (_get(r, column) for r in rows) if v is not None]
    value = rng.choice(values)
    kind = FIELD_TYPES[column]
    if kind == "long" or kind == "integer":
        value += rng.choice([0, 0, 0, -30, 30])
        if rng.random() < 0.2:
            return str(value + 0.5), value + 0.5
        return str(value), value
    if kind == "double":
        value = round(value + rng.choice([0, 0, 0.01, -25]), 2)
        return rng.choice([repr(value), f"{round(value * 100)}e-2"]), value
    if kind == "string":
        value = rng.choice([value, value, rng.choice([*STRINGS, "eu", "us", "zzz", "0"])])
        quote = rng.choice("'\"")
        return quote + value.replace(quote, quote * 2) + quote, value
    if kind == "date":
        value += dt.timedelta(days=rng.choice([0, 0, 1, -1, 100]))
        return rng.choice(["DATE ", ""]) + f"'{value.isoformat()}'", value
    if kind == "boolean":
        return rng.choice(["true", "TRUE", "false", "False"]), None
    value += dt.timedelta(microseconds=rng.choice([0, 0, 1, -1, 999, 10**6]))
    text = value.strftime("%Y-%m-%d %H:%M:%S.%f")
    return rng.choice([f"TIMESTAMP '{text}'", f"'{text}Z'"]), value


def _leaf(rng: random.Random, columns: list[str], rows: list[dict[str, Any]]) -> tuple[str, pc.Expression]:
    column = rng.choice(columns)
    field = pc.field(*column.split("."))
    shown = "`n`.x" if column == "n.x" and rng.random() < 0.5 else column
    roll = rng.random()
    if roll < 0.15:
        negated = rng.random() < 0.5
        return f"{shown} IS {'NOT ' if negated else ''}NULL", ~field.is_null() if negated else field.is_null()

    def scalar() -> tuple[str, pc.Expression]:
        text, value = _literal(rng, column, rows)
        if value is None:
            value = text.lower() == "true"
        arrow_type = pa.float64() if isinstance(value, float) and column != "f" else ARROW_TYPES[column]
        return text, pc.scalar(pa.scalar(value, type=arrow_type))

    if roll < 0.4:
        negated = rng.random() < 0.5
        items = [scalar() for _ in range(rng.randint(1, 4))]
        matched = reduce(lambda a, b: a | b, [field == value for _, value in items])  # SQL IN: OR of =
        text = f"{shown} {'NOT ' if negated else ''}IN ({', '.join(t for t, _ in items)})"
        return text, ~matched if negated else matched
    ops = ["=", "==", "!=", "<>"] + ([] if column == "b" else ["<", "<=", ">", ">="])
    op = rng.choice(ops)
    text, value = scalar()
    arrow = {
        "=": field == value,
        "==": field == value,
        "!=": field != value,
        "<>": field != value,
        "<": field < value,
        "<=": field <= value,
        ">": field > value,
        ">=": field >= value,
    }[op]
    return f"{shown} {op} {text}", arrow


def _predicate(rng: random.Random, columns: list[str], rows: list[dict[str, Any]], depth: int = 0) -> tuple[str, Any]:
    roll = rng.random()
    if depth >= 3 or roll < 0.35:
        return _leaf(rng, columns, rows)
    if roll < 0.5:
        text, arrow = _predicate(rng, columns, rows, depth + 1)
        return f"{rng.choice(['NOT', 'not'])} ({text})", ~arrow
    children = [_predicate(rng, columns, rows, depth + 1) for _ in range(rng.randint(2, 3))]
    if roll < 0.75:
        word, arrow = rng.choice(["AND", "and"]), reduce(lambda a, b: a & b, [a for _, a in children])
    else:
        word, arrow = rng.choice(["OR", "Or"]), reduce(lambda a, b: a | b, [a for _, a in children])
    return f" {word} ".join(f"({t})" for t, _ in children), arrow


@pytest.mark.parametrize("seed", [1, 2])
def test_differential_against_pyarrow_compute(seed: int) -> None:
    rng = random.Random(seed)
    rows = _rows(rng, 200)
    table = pa.Table.from_pylist(
        [{**r, "_row": k} for k, r in enumerate(rows)],
        schema=pa.schema(
            [(c, t) for c, t in ARROW_TYPES.items() if c != "n.x"]
            + [("n", pa.struct([("x", pa.int32())])), ("_row", pa.int64())]
        ),
    )
    files = _files(rng, rows)
    stats = [_file_stats(rng, [rows[k] for k in f]) for f in files]
    partitions = [{c: rows[f[0]][c] for c in PARTS if rows[f[0]][c] is not None} for f in files]
    data_columns = [c for c in FIELD_TYPES if c not in PARTS]
    pruned = exact_checks = 0
    for round_ in range(150):
        columns = list(PARTS) if round_ % 3 == 0 else [*PARTS, *data_columns]
        text, arrow = _predicate(rng, columns, rows)
        parsed = parse_predicate(text)
        expr = validate(parsed, FIELD_TYPES)
        # (a) row evaluation agrees with pyarrow's SQL-style filter (validated or not)
        expected = set(table.filter(arrow).column("_row").to_pylist())
        assert {k for k, r in enumerate(rows) if evaluate_row(expr, r) is True} == expected, text
        assert {k for k, r in enumerate(rows) if evaluate_row(parsed, r) is True} == expected, text
        for file, file_stats, values in zip(files, stats, partitions, strict=True):
            kept = might_match_file(expr, values, file_stats, PARTS)
            has_match = any(k in expected for k in file)
            # (b) never drop a file holding a matching row
            assert kept or not has_match, (text, file_stats, [rows[k] for k in file])
            pruned += not kept
            # (c) on partition columns only, pruning is exact
            if round_ % 3 == 0:
                assert kept == has_match, (text, values)
                exact_checks += 1
    assert pruned > 1000 and exact_checks > 1000
