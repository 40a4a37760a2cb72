"""Which active files a query must read (`TahoeLogFileIndex.matchingFiles`).

A predicate (`protocol.predicate`, or tuple filters `(column, op, value)` ANDed) is validated against the
schema and renamed to physical names (how partition values and stats are keyed under column mapping);
`might_match_file` keeps a file unless its typed partition values or its stats prove no row can match.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..errors import InvalidArgumentError, LogCorruptedError
from ..protocol.actions import AddFile
from ..protocol.predicate import And, Comparison, Expr, InList, IsNull, Not, Or, might_match_file, validate
from ..protocol.schema import StructField, StructType, parse_partition_value

OPS = frozenset({"=", "==", "!=", "<", "<=", ">", ">=", "in", "not in", "is null", "is not null"})


def filter_leaf(f: Sequence[Any], argument: str) -> Expr:
    """One `(column, op, value)` tuple (`(column, "is null")` too) as a predicate leaf."""
    if isinstance(f, str | bytes) or not isinstance(f, Sequence) or len(f) not in (2, 3):
        raise InvalidArgumentError(f"{argument}: a filter is (column, op, value); got {f!r}", argument=argument)
    column, op = str(f[0]), str(f[1]).lower()
    if op not in OPS or (len(f) == 2) != (op in ("is null", "is not null")):
        raise InvalidArgumentError(f"{argument}: unsupported filter {f!r}; ops are {sorted(OPS)}", argument=argument)
    if op in ("is null", "is not null"):
        return IsNull(column, negated=op == "is not null")
    if op in ("in", "not in"):
        if isinstance(f[2], str | bytes) or not isinstance(f[2], Iterable):
            raise InvalidArgumentError(f"{argument}: {op!r} needs a list of values; got {f[2]!r}", argument=argument)
        return InList(column, tuple(f[2]), negated=op == "not in")
    return Comparison(column, "=" if op == "==" else op, f[2])


def _fields(schema: StructType) -> dict[str, tuple[StructField, str]]:
    """Every column by dotted logical name (nested struct fields too): its field and dotted physical name."""
    out: dict[str, tuple[StructField, str]] = {}

    def walk(fields: Iterable[StructField], prefix: str, physical: str) -> None:
        for f in fields:
            out[prefix + f.name] = (f, physical + f.physical_name)
            if isinstance(f.type, Mapping) and f.type.get("type") == "struct":
                walk(StructType.from_json(f.type).fields, f"{prefix}{f.name}.", f"{physical}{f.physical_name}.")

    walk(schema.fields, "", "")
    return out


def file_predicate(
    schema: StructType,
    partition_columns: Sequence[str],
    where: Expr | None = None,
    partition_filters: Iterable[Sequence[Any]] | None = None,
    data_filters: Iterable[Sequence[Any]] | None = None,
    *,
    label: str = "where",
) -> Expr | None:
    """`where` AND every tuple filter, validated against `schema` (None when there is nothing to filter)."""
    fields = {name: field.type_name for name, (field, _) in _fields(schema).items()}
    parts = {c.casefold() for c in partition_columns}
    children = [] if where is None else [validate(where, fields, label=label)]
    for argument, filters in (("partition_filters", partition_filters), ("data_filters", data_filters)):
        for f in filters or ():
            leaf = validate(filter_leaf(f, argument), fields, label=argument)
            if argument == "partition_filters" and leaf.columns()[0].casefold() not in parts:
                raise InvalidArgumentError(
                    f"{argument}: {leaf.columns()[0]!r} is not a partition column (partition columns: "
                    f"{list(partition_columns)})",
                    argument=argument,
                )
            children.append(leaf)
    if not children:
        return None
    return children[0] if len(children) == 1 else And(tuple(children))


def _physical(expr: Expr, names: Mapping[str, str]) -> Expr:
    if isinstance(expr, And | Or):
        return type(expr)(tuple(_physical(c, names) for c in expr.children))
    if isinstance(expr, Not):
        return Not(_physical(expr.child, names))
    return dataclasses.replace(expr, column=names[expr.column])


def matching_files(
    adds: Iterable[AddFile],
    expr: Expr,
    schema: StructType,
    partition_columns: Sequence[str],
    *,
    column_mapping: bool = False,
    table: str | None = None,
) -> list[AddFile]:
    """Active files that may hold a row for which `expr` (from `file_predicate`) is true."""
    fields = _fields(schema)
    physical = _physical(expr, {name: p if column_mapping else name for name, (_, p) in fields.items()})
    used = {c.casefold(): c for c in expr.columns()}
    parts = [
        (fields[used[c.casefold()]][0], fields[used[c.casefold()]][1] if column_mapping else c, c)
        for c in partition_columns
        if c.casefold() in used
    ]
    keys = [key for _, key, _ in parts]
    needs_stats = len(parts) < len(used)
    out = []
    for add in adds:
        values = {}
        for field, key, logical in parts:
            raw = add.partition_values.get(key, add.partition_values.get(logical))
            try:
                values[key] = parse_partition_value(raw, field.type_name)
            except InvalidArgumentError:
                raise LogCorruptedError(
                    f"Partition value {raw!r} of column {logical!r} is not a valid {field.type_name}",
                    table=table,
                    file=add.path,
                ) from None
        stats = None
        if needs_stats and add.stats:
            try:
                stats = json.loads(add.stats)
            except ValueError:
                stats = None  # unreadable stats prove nothing: keep the file
        if might_match_file(physical, values, stats if isinstance(stats, dict) else None, keys):
            out.append(add)
    return out
