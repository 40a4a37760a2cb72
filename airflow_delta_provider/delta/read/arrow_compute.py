"""The Arrow compute kernels the local engine uses, each allocating from the library's pool.

`pyarrow.compute.call_function` runs a kernel with an explicit memory pool (`arrow_memory.POOL`);
the wrappers `pyarrow.compute` generates take no pool. Semantics are those of the `pyarrow.compute`
function of the same name with its default options.

Arguments must already be Arrow values: a plain Python value would be converted with `pa.scalar`,
which imports pandas (see `arrow_build`).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as _c

from .arrow_memory import POOL

Datum = Any

_TRUE = pa.Array.from_buffers(pa.bool_(), 1, [None, pa.py_buffer(b"\x01")])[0]  # `pa.scalar` imports pandas


def _call(name: str, args: list[Datum], options: Any = None) -> Any:
    return _c.call_function(name, args, options, memory_pool=POOL)


def take(data: Datum, indices: Datum) -> Any:
    return _call("take", [data, indices], _c.TakeOptions(boundscheck=True))


def filter(data: Datum, mask: Datum) -> Any:
    return _call("filter", [data, mask], _c.FilterOptions())


def cast(data: Datum, target: pa.DataType) -> Any:
    return _call("cast", [data], _c.CastOptions.safe(target))


def is_in(values: Datum, value_set: pa.Array) -> Any:
    return _call("is_in", [values], _c.SetLookupOptions(value_set))


def index_in(values: Datum, value_set: pa.Array) -> Any:
    return _call("index_in", [values], _c.SetLookupOptions(value_set))


def struct_field(values: Datum, name: str) -> Any:
    return _call("struct_field", [values], _c.StructFieldOptions([name]))


def starts_with(strings: Datum, pattern: str) -> Any:
    return _call("starts_with", [strings], _c.MatchSubstringOptions(pattern))


def utf8_slice_codeunits(strings: Datum, start: int) -> Any:
    return _call("utf8_slice_codeunits", [strings], _c.SliceOptions(start))


def binary_join_element_wise(*strings: Datum) -> Any:
    """Join all but the last argument with the last as separator (nulls make the row null)."""
    return _call("binary_join_element_wise", list(strings), _c.JoinOptions())


def fill_null(values: Datum, fill_value: pa.Scalar) -> Any:
    return _call("coalesce", [values, fill_value])


def first_true(mask: Datum) -> int:
    """The position of the first true value of a boolean array (-1 if none)."""
    return _call("index", [mask], _c.IndexOptions(_TRUE)).as_py()


def search_sorted(values: Datum, needles: Datum, side: str = "left") -> Any:
    return _call("search_sorted", [values, needles], _c.SearchSortedOptions(side=side))


def _unary(name: str) -> Any:
    def kernel(data: Datum) -> Any:
        return _call(name, [data])

    kernel.__name__ = kernel.__qualname__ = name
    kernel.__doc__ = f"The `{name}` kernel with its default options."
    return kernel


def _binary(name: str) -> Any:
    def kernel(left: Datum, right: Datum) -> Any:
        return _call(name, [left, right])

    kernel.__name__ = kernel.__qualname__ = name
    kernel.__doc__ = f"The `{name}` kernel."
    return kernel


is_valid = _unary("is_valid")
is_null = _unary("is_null")
indices_nonzero = _unary("indices_nonzero")
sort_indices = _unary("sort_indices")
any = _unary("any")
all = _unary("all")
sum = _unary("sum")
min_max = _unary("min_max")
count_distinct = _unary("count_distinct")
greater = _binary("greater")
less = _binary("less")


def if_else(cond: Datum, left: Datum, right: Datum) -> Any:
    return _call("if_else", [cond, left, right])
