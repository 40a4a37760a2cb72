"""Row predicates (`--where`): a small SQL grammar, three-valued evaluation and file pruning.

One unit (over 600 lines on purpose): the parser, the evaluation and the pruning share the literal and
column-type coercions, and a change to one must be read with the others.

Grammar (keywords are case-insensitive; whitespace separates tokens and is otherwise ignored)::

    predicate  := or_expr
    or_expr    := and_expr ( OR and_expr )*
    and_expr   := not_expr ( AND not_expr )*
    not_expr   := NOT not_expr | '(' predicate ')' | condition
    condition  := column op literal
                | column [NOT] IN '(' literal ( ',' literal )* ')'
                | column IS [NOT] NULL
    op         := '=' | '==' | '!=' | '<>' | '<' | '<=' | '>' | '>='
    column     := name ( '.' name )*           -- a dotted name is a nested field
    name       := identifier | '`' text '`'    -- '``' inside backquotes is one backquote
    literal    := string | number | TRUE | FALSE | DATE string | TIMESTAMP string

- An identifier is a letter or `_`, then letters, digits or `_`; `AND OR NOT IN IS NULL TRUE FALSE` are
  reserved (backquote such a column; `date` and `timestamp` are ordinary names). A string is quoted with `'`
  or `"`, the quote doubled inside (`'it''s'`), no backslash escapes. A number, optionally signed, is an
  `int`, with a decimal point a `Decimal`, with an exponent a `float` (as in Spark SQL).
- `DATE 'YYYY-MM-DD'` is a `datetime.date`; `TIMESTAMP 'YYYY-MM-DD[(' '|T)HH:MM[:SS[.ffffff]]][Z|±HH:MM]'`
  a `datetime.datetime` (naive without an offset; `validate` reads a naive `timestamp` literal as UTC).
- `NULL` is only valid in `IS [NOT] NULL`; NOT binds tighter than AND, AND tighter than OR; a literal on
  the left, or two columns, is an error.

Anything else, including empty input, raises `PredicateSyntaxError` naming the 1-based character position
(`.position`) and what was expected. Evaluation follows SQL: a comparison with NULL is unknown (`None`),
NOT/AND/OR are Kleene's, and a filter keeps a row only when the predicate is `True`.
"""

from __future__ import annotations

import datetime as dt
import operator
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any, NamedTuple

from ..errors import InvalidArgumentError, PredicateSyntaxError
from .schema import parse_timestamp, same_zone

#: Writers cut string stats to this many characters: a longer-or-equal maximum is not an upper bound.
STRING_PREFIX_LENGTH = 32
MAX_DEPTH = 100  # nested parentheses and NOTs


# -- expression tree ---------------------------------------------------------------------------------------


class _Leaf:
    __slots__ = ()

    def columns(self) -> tuple[str, ...]:
        return (self.column,)  # type: ignore[attr-defined]


class _Junction:
    __slots__ = ()

    def columns(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c for child in self.children for c in child.columns()))  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class Comparison(_Leaf):
    """`column op value`; `op` is one of `= != < <= > >=` (`==` and `<>` are normalised)."""

    column: str
    op: str
    value: Any
    pos: int | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class InList(_Leaf):
    """`column [NOT] IN (values)`."""

    column: str
    values: tuple[Any, ...]
    negated: bool = False
    pos: int | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class IsNull(_Leaf):
    """`column IS [NOT] NULL`."""

    column: str
    negated: bool = False
    pos: int | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Not:
    child: Expr

    def columns(self) -> tuple[str, ...]:
        return self.child.columns()


@dataclass(frozen=True, slots=True)
class And(_Junction):
    children: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class Or(_Junction):
    children: tuple[Expr, ...]


Expr = And | Or | Not | Comparison | InList | IsNull
Leaf = Comparison | InList | IsNull


# -- tokenizer and parser ----------------------------------------------------------------------------------

_RESERVED = frozenset({"and", "or", "not", "in", "is", "null", "true", "false"})
_OPS = {"=": "=", "==": "=", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_TOKEN_RE = re.compile(  # possessive quantifiers: an unterminated quote fails where it opens
    r"""\s*+(?:(?P<string>'(?:[^']|'')*+'|"(?:[^"]|"")*+")|(?P<qident>`(?:[^`]|``)*+`)"""
    r"|(?P<number>[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)"
    r"|(?P<ident>[^\W\d]\w*)|(?P<op><=|>=|<>|!=|==|=|<|>)|(?P<punct>[(),.])|(?P<end>\Z))"
)
_DATE_RE = re.compile(r"\d{4}-\d{2}-\d{2}")
_TIMESTAMP_RE = re.compile(r"\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?)?(?:Z|[+-]\d{2}:\d{2})?")


def _error(label: str, message: str, pos: int | None) -> PredicateSyntaxError:
    return PredicateSyntaxError(f"{label}: {message}", position=pos, argument=label)


class _Token(NamedTuple):
    kind: str  # string qident number ident op end, or the punctuation itself: ( ) , .
    text: str  # as written
    value: Any
    pos: int  # 1-based

    @property
    def keyword(self) -> str | None:
        return self.text.lower() if self.kind == "ident" else None

    def shown(self) -> str:
        if self.kind == "end":
            return "end of input"
        return self.text if self.kind in ("string", "qident") else f"'{self.text}'"


def _tokenize(text: str, label: str) -> list[_Token]:
    tokens: list[_Token] = []
    i = 0
    while not tokens or tokens[-1].kind != "end":
        m = _TOKEN_RE.match(text, i)
        if m is None:
            i = len(text) - len(text[i:].lstrip())
            what = {"`": "unterminated backquoted name", "'": "unterminated string", '"': "unterminated string"}
            message = what.get(text[i], f"unexpected character {text[i]!r}")
            raise _error(label, f"{message} at position {i + 1}", i + 1)
        kind, word, pos = m.lastgroup or "", m[m.lastgroup or 0], m.start(m.lastgroup) + 1
        value: Any = word
        if kind in ("string", "qident"):
            value = word[1:-1].replace(word[0] * 2, word[0])
            if kind == "qident" and not value:
                raise _error(label, f"empty backquoted name at position {pos}", pos)
        elif kind == "number":
            if m.end() < len(text) and (text[m.end()].isalnum() or text[m.end()] in "_.'\"`"):
                raise _error(label, f"malformed number at position {pos}", pos)
            value = float(word) if "e" in word.lower() else Decimal(word) if "." in word else int(word)
        tokens.append(_Token(word if kind == "punct" else kind, word, value, pos))
        i = m.end()
    return tokens


class _Parser:
    def __init__(self, text: str, label: str) -> None:
        self.label = label
        self.tokens = _tokenize(text, label)
        self.i = 0
        self.depth = 0

    @property
    def tok(self) -> _Token:
        return self.tokens[self.i]

    def advance(self) -> _Token:
        self.i += 1
        return self.tokens[self.i - 1]

    def fail(self, expected: str, *, hint: str = "") -> PredicateSyntaxError:
        tok = self.tok
        after = f" after {self.tokens[self.i - 1].shown()}" if self.i else ""
        if tok.keyword in _RESERVED and "column" in expected:
            hint = hint or f" (backquote a column named like a keyword: `{tok.text}`)"
        return _error(
            self.label, f"expected {expected}{after} at position {tok.pos}, found {tok.shown()}{hint}", tok.pos
        )

    def nest(self, pos: int) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _error(self.label, f"more than {MAX_DEPTH} nested NOTs or parentheses at position {pos}", pos)

    def parse(self) -> Expr:
        expr = self.junction("or")
        if self.tok.kind != "end":
            raise self.fail("AND, OR or end of input")
        return expr

    def junction(self, word: str) -> Expr:
        """`or_expr` and `and_expr` of the grammar: operands joined by `word`."""
        items = self.repeated((lambda: self.junction("and")) if word == "or" else self.not_expr, word)
        return items[0] if len(items) == 1 else (Or if word == "or" else And)(tuple(items))

    def not_expr(self) -> Expr:
        depth, nots = self.depth, 0
        while self.tok.keyword == "not":
            self.nest(self.advance().pos)
            nots += 1
        if self.tok.kind == "(":
            opening = self.advance()
            self.nest(opening.pos)
            expr = self.junction("or")
            if self.tok.kind != ")":
                raise self.fail("')'", hint=f"; the '(' at position {opening.pos} is not closed")
            self.advance()
        else:
            expr = self.condition()
        for _ in range(nots):
            expr = Not(expr)
        self.depth = depth
        return expr

    def repeated(self, item: Callable[[], Any], separator: str) -> list[Any]:
        """`item ( separator item )*`; `separator` is a token kind or a keyword."""
        items = [item()]
        while self.tok.kind == separator or self.tok.keyword == separator:
            self.advance()
            items.append(item())
        return items

    def expect(self, kind: str, expected: str) -> None:
        if self.tok.kind != kind and self.tok.keyword != kind:
            raise self.fail(expected)
        self.advance()

    def condition(self) -> Leaf:
        pos = self.tok.pos
        column = self.column()
        tok = self.advance()
        if tok.kind == "op":
            return Comparison(column, _OPS[tok.text], self.literal(), pos)
        if tok.keyword == "is":
            negated = self.tok.keyword == "not"
            if negated:
                self.advance()
            self.expect("null", "NULL" if negated else "NULL or NOT NULL")
            return IsNull(column, negated, pos)
        negated = tok.keyword == "not"
        if negated:
            self.expect("in", "IN")
        elif tok.keyword != "in":
            self.i -= 1
            raise self.fail("a comparison operator, IN, NOT IN or IS")
        self.expect("(", "'(' and a list of values")
        values = self.repeated(self.literal, ",")
        self.expect(")", "',' or ')'")
        return InList(column, tuple(values), negated, pos)

    def column(self) -> str:
        parts = [self.name("a column name, NOT or '('")]
        while self.tok.kind == ".":
            self.advance()
            parts.append(self.name("a field name"))
        return ".".join(parts)

    def name(self, expected: str) -> str:
        tok = self.tok
        if tok.kind == "qident" or (tok.kind == "ident" and tok.keyword not in _RESERVED):
            self.advance()
            return str(tok.value)
        raise self.fail(expected)

    def literal(self) -> Any:
        tok = self.tok
        keyword = tok.keyword
        if tok.kind in ("string", "number") or keyword in ("true", "false"):
            self.advance()
            return tok.value if keyword is None else keyword == "true"
        if keyword in ("date", "timestamp") and self.tokens[self.i + 1].kind == "string":
            self.advance()
            string = self.advance()
            pattern, parse = (
                (_DATE_RE, dt.date.fromisoformat) if keyword == "date" else (_TIMESTAMP_RE, parse_timestamp)
            )
            try:
                if not pattern.fullmatch(string.value):
                    raise ValueError(string.value)
                return parse(string.value)
            except ValueError:
                shape = "'YYYY-MM-DD'" if keyword == "date" else "'YYYY-MM-DD HH:MM:SS[.ffffff][Z|+HH:MM]'"
                message = f"invalid {keyword.upper()} literal {string.text} at position {string.pos} (expected {shape})"
                raise _error(self.label, message, string.pos) from None
        if keyword == "null":
            raise self.fail("a value", hint=" (NULL is only valid in IS NULL / IS NOT NULL)")
        raise self.fail("a value", hint=" (quote strings: 'text')" if tok.kind in ("ident", "qident") else "")


def parse_predicate(text: str, *, label: str = "--where") -> Expr:
    """The expression tree of `text` (see the module docstring); `label` prefixes error messages."""
    return _Parser(text, label).parse()


# -- values ------------------------------------------------------------------------------------------------

_MISSING = object()
_COMPARE = {
    op: getattr(operator, name)
    for op, name in {"=": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}.items()
}


def _harmonize(actual: Any, lit: Any) -> tuple[Any, Any]:
    """`actual` (a typed column value) and `lit` in comparable form; TypeError/ValueError when they are not."""
    if isinstance(actual, str):
        return actual, ("true" if lit else "false") if isinstance(lit, bool) else str(lit)
    if isinstance(actual, bool) or isinstance(lit, bool):
        if isinstance(lit, str) and lit.lower() in ("true", "false"):
            lit = lit.lower() == "true"
        if isinstance(actual, bool) and isinstance(lit, bool):
            return actual, lit
        raise TypeError("boolean")
    if isinstance(actual, int | float | Decimal):
        if isinstance(lit, str):
            lit = Decimal(lit.strip())
        if isinstance(actual, float) and isinstance(lit, Decimal):
            return actual, float(lit)
        if isinstance(actual, Decimal) and isinstance(lit, float):
            return actual, Decimal(repr(lit))
        if isinstance(lit, int | float | Decimal):
            return actual, lit
        raise TypeError("number")
    if isinstance(actual, dt.datetime):
        if isinstance(lit, str):
            lit = parse_timestamp(lit)
        elif isinstance(lit, dt.date) and not isinstance(lit, dt.datetime):
            lit = dt.datetime.combine(lit, dt.time())
        if isinstance(lit, dt.datetime):
            return actual, same_zone(lit, actual)
        raise TypeError("timestamp")
    if isinstance(actual, dt.date):
        if isinstance(lit, str):
            lit = dt.date.fromisoformat(lit.strip())
        if isinstance(lit, dt.datetime):
            return same_zone(dt.datetime.combine(actual, dt.time()), lit), lit
        if isinstance(lit, dt.date):
            return actual, lit
        raise TypeError("date")
    if isinstance(actual, bytes) and isinstance(lit, str):
        return actual, lit.encode()
    if type(actual) is not type(lit):
        raise TypeError(type(actual).__name__)
    return actual, lit


def _compare(column: str, actual: Any, op: str, lit: Any) -> bool | None:
    if actual is None or lit is None:
        return None
    try:
        a, b = _harmonize(actual, lit)
        return bool(_COMPARE[op](a, b))
    except (TypeError, ValueError, ArithmeticError):
        raise InvalidArgumentError(
            f"Cannot compare column {column!r} (value {actual!r} of type {type(actual).__name__}) with {lit!r}"
        ) from None


def _lookup(mapping: Any, name: str) -> Any:
    """`mapping[name]`, case-insensitively, then as a dotted path through nested mappings; else `_MISSING`."""
    if not isinstance(mapping, Mapping):
        return _MISSING
    if name in mapping:
        return mapping[name]
    folded = name.casefold()
    for key, value in mapping.items():
        if isinstance(key, str) and key.casefold() == folded:
            return value
    if "." not in name:
        return _MISSING
    current: Any = mapping
    for part in name.split("."):
        if current is None:
            return None  # a null struct has null fields
        current = _lookup(current, part)
        if current is _MISSING:
            return _MISSING
    return current


# -- truth values ------------------------------------------------------------------------------------------


def _kleene(is_and: bool, a: bool | None, b: bool | None) -> bool | None:
    """SQL's AND (`is_and`) or OR: False decides an AND and True an OR; otherwise unknown (None) wins."""
    return (not is_and) if a is (not is_and) or b is (not is_and) else None if a is None or b is None else is_and


def _leaf_truth(leaf: Leaf, actual: Any) -> bool | None:
    if isinstance(leaf, IsNull):
        return (actual is None) != leaf.negated
    if actual is None:
        return None
    if isinstance(leaf, Comparison):
        return _compare(leaf.column, actual, leaf.op, leaf.value)
    hit: bool | None = False
    for value in leaf.values:
        hit = _kleene(False, hit, _compare(leaf.column, actual, "=", value))
    return None if hit is None else hit != leaf.negated


# -- file pruning ------------------------------------------------------------------------------------------

Outcomes = frozenset[bool | None]
_ALL: Outcomes = frozenset({True, False, None})


def _bound(raw: Any, lit: Any, *, upper: bool) -> Any:
    """A stats bound comparable with `lit`, widened where writers truncate; None when unusable."""
    if raw is None or isinstance(raw, Mapping | list):
        return None
    if isinstance(lit, bool):
        return raw if isinstance(raw, bool) else None
    if isinstance(lit, str):  # a maximum cut to the prefix length is not an upper bound
        return raw if isinstance(raw, str) and not (upper and len(raw) >= STRING_PREFIX_LENGTH) else None
    try:
        if isinstance(lit, int | float | Decimal):
            if isinstance(raw, str):
                raw = Decimal(raw)
            if isinstance(raw, bool) or not isinstance(raw, int | float | Decimal) or raw != raw:  # NaN
                return None
            return Decimal(repr(raw)) if isinstance(lit, Decimal) and isinstance(raw, float) else raw
        if isinstance(lit, dt.datetime) and isinstance(raw, str):
            value = same_zone(parse_timestamp(raw), lit)
            return value + dt.timedelta(milliseconds=1) if upper else value  # stats are cut to milliseconds
        if isinstance(lit, dt.date) and isinstance(raw, str) and _DATE_RE.fullmatch(raw):
            return dt.date.fromisoformat(raw)
    except (ValueError, ArithmeticError):
        return None
    return None


def _range(op: str, lit: Any, lo_raw: Any, hi_raw: Any) -> tuple[bool, bool]:
    """Whether some non-null value within the stats' [min, max] can make `column op lit` true, and false."""
    lo, hi = _bound(lo_raw, lit, upper=False), _bound(hi_raw, lit, upper=True)
    try:
        if op in ("=", "!="):
            can_true = (lo is None or lo <= lit) and (hi is None or lit <= hi)
            can_false = not (lo is not None and hi is not None and lo == hi == lit)
        elif op in ("<", "<="):
            can_true = lo is None or _COMPARE[op](lo, lit)
            can_false = hi is None or not _COMPARE[op](hi, lit)
        else:
            can_true = hi is None or _COMPARE[op](hi, lit)
            can_false = lo is None or not _COMPARE[op](lo, lit)
    except (TypeError, ArithmeticError):
        return True, True
    if any(isinstance(v, float) for v in (lo, hi, lit)):
        can_false = True  # NaN is outside any min/max and compares false (so `!=` is true)
    return (can_false, can_true) if op == "!=" else (can_true, can_false)


def _stats_outcomes(leaf: Leaf, stats: Mapping[str, Any]) -> Outcomes:
    counts = (stats.get("numRecords"), _lookup(stats.get("nullCount"), leaf.column))
    num, nulls = (n if isinstance(n, int) and not isinstance(n, bool) else None for n in counts)
    may_be_null = nulls is None or nulls > 0
    may_be_value = nulls is None or num is None or nulls < num
    if isinstance(leaf, IsNull):
        return frozenset(
            v for v, possible in ((not leaf.negated, may_be_null), (leaf.negated, may_be_value)) if possible
        )
    out: set[bool | None] = {None} if may_be_null else set()
    if may_be_value:
        bounds = (_lookup(stats.get(key), leaf.column) for key in ("minValues", "maxValues"))
        lo, hi = (None if v is _MISSING else v for v in bounds)
        if isinstance(leaf, Comparison):
            can_true, can_false = _range(leaf.op, leaf.value, lo, hi)
        else:
            ranges = [_range("=", v, lo, hi) for v in leaf.values]
            can_true, can_false = any(t for t, _ in ranges), all(f for _, f in ranges)
            if leaf.negated:
                can_true, can_false = can_false, can_true
        out.update(v for v, possible in ((True, can_true), (False, can_false)) if possible)
    return frozenset(out)


def _outcomes(expr: Expr, partition_values: Mapping[str, Any], stats: Mapping[str, Any], parts: set[str]) -> Outcomes:
    """Every truth value `expr` may take on some row of the file."""
    if isinstance(expr, And | Or):
        is_and = isinstance(expr, And)
        result: Outcomes = frozenset({is_and})
        for child in expr.children:
            child_outcomes = _outcomes(child, partition_values, stats, parts)
            result = frozenset(_kleene(is_and, a, b) for a in result for b in child_outcomes)
        return result
    if isinstance(expr, Not):
        return frozenset(None if v is None else not v for v in _outcomes(expr.child, partition_values, stats, parts))
    if expr.column.casefold() in parts:
        value = _lookup(partition_values, expr.column)
        return frozenset({_leaf_truth(expr, None if value is _MISSING else value)})
    return _stats_outcomes(expr, stats) if stats else _ALL


def might_match_file(
    expr: Expr, partition_values: Mapping[str, Any], stats: Mapping[str, Any] | None, partition_columns: Iterable[str]
) -> bool:
    """False only when the file cannot hold a row for which `expr` is true (a conservative prune).

    Partition columns are evaluated exactly on the typed `partition_values` (a missing key is null); other
    columns on the parsed `stats`, where missing or unusable stats keep the file. Give `expr` through
    `validate` first so that literals have the columns' types.
    """
    if stats and stats.get("numRecords") == 0:
        return False
    parts = {c.casefold() for c in partition_columns}
    return True in _outcomes(expr, partition_values, stats or {}, parts)


# -- validation against a schema ---------------------------------------------------------------------------

_INTEGERS = frozenset({"long", "integer", "int", "short", "byte", "bigint", "smallint", "tinyint"})


def _coerce(value: Any, type_name: str) -> Any:
    """`value` as a value of the Delta type `type_name`; ValueError/TypeError when it cannot be."""
    t = type_name
    if t == "string":
        return ("true" if value else "false") if isinstance(value, bool) else str(value)
    if isinstance(value, bool) != (t == "boolean") and not isinstance(value, str):
        raise TypeError(t)
    if t == "boolean":
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        if isinstance(value, bool):
            return value
        raise TypeError(t)
    if t in _INTEGERS or t in ("float", "double") or t.startswith("decimal"):
        if isinstance(value, str):
            text = value.strip()
            value = int(text) if re.fullmatch(r"[-+]?\d+", text) else Decimal(text)
        if not isinstance(value, int | float | Decimal):
            raise TypeError(t)
        if t in ("float", "double"):
            return float(value)
        if t.startswith("decimal"):
            value = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
        if isinstance(value, Decimal) and not value.is_finite():
            raise ValueError(value)
        return value  # an integer column keeps a fractional literal: `id < 2.5` stays exact
    if t == "date":
        if isinstance(value, str) and _DATE_RE.fullmatch(value.strip()):
            return dt.date.fromisoformat(value.strip())
        if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
            return value
        raise TypeError(t)
    if t in ("timestamp", "timestamp_ntz"):
        if isinstance(value, str):
            if not _TIMESTAMP_RE.fullmatch(value.strip()):
                raise ValueError(value)
            value = parse_timestamp(value)
        elif isinstance(value, dt.date) and not isinstance(value, dt.datetime):
            value = dt.datetime.combine(value, dt.time())
        if not isinstance(value, dt.datetime):
            raise TypeError(t)
        return same_zone(value, dt.datetime(1970, 1, 1, tzinfo=dt.UTC if t == "timestamp" else None))
    if t == "binary" and isinstance(value, str | bytes):
        return value.encode() if isinstance(value, str) else value
    raise TypeError(t)


def _resolve(column: str, schema_fields: Mapping[str, str], pos: int | None, label: str) -> str:
    if column in schema_fields:
        return column
    matches = [name for name in schema_fields if name.casefold() == column.casefold()]
    if len(matches) == 1:
        return matches[0]
    at = f" at position {pos}" if pos is not None else ""
    if matches:
        raise _error(label, f"column {column!r}{at} is ambiguous: {matches}", pos)
    raise _error(label, f"unknown column {column!r}{at} (columns: {', '.join(schema_fields)})", pos)


def validate(expr: Expr, schema_fields: Mapping[str, str], *, label: str = "--where") -> Expr:
    """`expr` with columns spelled as in `schema_fields` (name -> Delta type name) and literals of their types.

    Nested fields are looked up by their dotted name (`"a.b"`), so list them that way to filter on them.
    """
    if isinstance(expr, And | Or):
        return type(expr)(tuple(validate(child, schema_fields, label=label) for child in expr.children))
    if isinstance(expr, Not):
        return Not(validate(expr.child, schema_fields, label=label))
    column = _resolve(expr.column, schema_fields, expr.pos, label)
    if isinstance(expr, IsNull):
        return replace(expr, column=column)
    type_name = schema_fields[column].strip().lower().replace(" ", "")

    def typed(value: Any) -> Any:
        try:
            return _coerce(value, type_name)
        except (TypeError, ValueError, ArithmeticError):
            at = f" at position {expr.pos}" if expr.pos is not None else ""
            raise _error(
                label, f"{value!r} is not a valid {type_name} value for column {column!r}{at}", expr.pos
            ) from None

    if isinstance(expr, Comparison):
        return replace(expr, column=column, value=typed(expr.value))
    return replace(expr, column=column, values=tuple(typed(v) for v in expr.values))
