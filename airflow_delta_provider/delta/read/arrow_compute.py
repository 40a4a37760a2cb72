"""The Arrow compute kernels the library uses, each allocating from its pool (`arrow_memory.POOL`).

Semantics are those of the `pyarrow.compute` function of the same name. Arguments must already be Arrow
values: a plain Python value would be converted with `pa.scalar`, which imports pandas (see `arrow_build`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as _c

from .arrow_memory import POOL

Datum = Any

_TRUE = pa.Array.from_buffers(pa.bool_(), 1, [None, pa.py_buffer(b"\x01")])[0]  # `pa.scalar` imports pandas


def _kernel(name: str, arity: int | None = None, options: Callable[..., Any] | None = None) -> Callable[..., Any]:
    """Kernel `name` on its first `arity` arguments (all when None); the rest, and keywords, build `options`."""

    def kernel(*args: Datum, **kwargs: Any) -> Any:
        data, rest = (args, ()) if arity is None else (args[:arity], args[arity:])
        return _c.call_function(name, list(data), options and options(*rest, **kwargs), memory_pool=POOL)

    kernel.__name__ = kernel.__qualname__ = name
    return kernel


take = _kernel("take", 2, lambda: _c.TakeOptions(boundscheck=True))
filter = _kernel("filter", 2, _c.FilterOptions)
cast = _kernel("cast", 1, _c.CastOptions.safe)
is_in = _kernel("is_in", 1, _c.SetLookupOptions)
index_in = _kernel("index_in", 1, _c.SetLookupOptions)
struct_field = _kernel("struct_field", 1, lambda name: _c.StructFieldOptions([name]))
starts_with = _kernel("starts_with", 1, _c.MatchSubstringOptions)
utf8_slice_codeunits = _kernel("utf8_slice_codeunits", 1, _c.SliceOptions)
#: Join all but the last argument with the last as separator (nulls make the row null).
binary_join_element_wise = _kernel("binary_join_element_wise", None, _c.JoinOptions)
fill_null = _kernel("coalesce", 2)
search_sorted = _kernel("search_sorted", 2, _c.SearchSortedOptions)
is_valid = _kernel("is_valid", 1)
is_null = _kernel("is_null", 1)
indices_nonzero = _kernel("indices_nonzero", 1)
sort_indices = _kernel("sort_indices", 1)
any = _kernel("any", 1)
all = _kernel("all", 1)
sum = _kernel("sum", 1)
min_max = _kernel("min_max", 1)
count_distinct = _kernel("count_distinct", 1)
greater = _kernel("greater", 2)
less = _kernel("less", 2)
if_else = _kernel("if_else", 3)
add = _kernel("add", 2)
equal = _kernel("equal", 2)
invert = _kernel("invert", 1)
match_substring_regex = _kernel("match_substring_regex", 1, _c.MatchSubstringOptions)
split_pattern = _kernel("split_pattern", 1, _c.SplitPatternOptions)
list_element = _kernel("list_element", 2)
list_value_length = _kernel("list_value_length", 1)
list_parent_indices = _kernel("list_parent_indices", 1)


def first_true(mask: Datum) -> int:
    """The position of the first true value of a boolean array (-1 if none)."""
    return _c.call_function("index", [mask], _c.IndexOptions(_TRUE), memory_pool=POOL).as_py()
