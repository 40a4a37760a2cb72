"""`evaluate_row`: a predicate's SQL truth value on one row, the oracle the pruning tests compare against."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_delta_provider.delta.errors import InvalidArgumentError
from airflow_delta_provider.delta.protocol.predicate import _MISSING, And, Expr, Not, Or, _kleene, _leaf_truth, _lookup


def evaluate_row(expr: Expr, row: Mapping[str, Any]) -> bool | None:
    """SQL truth value of `expr` on one row of typed values (`None` is unknown); columns match case-insensitively."""
    if isinstance(expr, And | Or):
        is_and = isinstance(expr, And)
        result: bool | None = is_and
        for child in expr.children:
            result = _kleene(is_and, result, evaluate_row(child, row))
            if result is not None and result != is_and:  # False decides an AND, True an OR
                break
        return result
    if isinstance(expr, Not):
        value = evaluate_row(expr.child, row)
        return None if value is None else not value
    actual = _lookup(row, expr.column)
    if actual is _MISSING:
        raise InvalidArgumentError(f"Unknown column {expr.column!r} (row columns: {', '.join(map(str, row))})")
    return _leaf_truth(expr, actual)
