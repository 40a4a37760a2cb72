"""Arrow arrays and scalars from Python values without importing pandas.

pyarrow imports pandas (~0.23 s and 40 MiB next to Airflow) on its first conversion of Python objects
(`pa.array`, `pa.scalar`, `Table.from_pylist`, a compute call given a plain value); these builders
assemble the buffers themselves. Types: strings, int32/int64, booleans, `map<string, string>`, lists and
structs of those.
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence
from itertools import accumulate
from typing import Any

import pyarrow as pa

from .arrow_compute import cast

_INT32_MAX = 2**31 - 1


def bools_from_bytes(raw: bytearray, validity: pa.Buffer | None = None) -> pa.BooleanArray:
    """A boolean array from one byte per value (non-zero = true), with an optional validity bitmap."""
    return cast(pa.Array.from_buffers(pa.uint8(), len(raw), [validity, pa.py_buffer(raw)]), pa.bool_())


def _validity(values: Sequence[Any]) -> pa.Buffer | None:
    """The validity bitmap of `values` (None is null), or None when every value is valid."""
    valid = bytearray(v is not None for v in values)
    return None if valid.count(1) == len(values) else bools_from_bytes(valid).buffers()[1]


def string_array(values: Sequence[str | None]) -> pa.Array:
    """A `string` array (nulls allowed)."""
    n = len(values)
    validity = _validity(values)
    texts = values if validity is None else ["" if v is None else v for v in values]
    joined = "".join(texts)
    data = joined.encode("utf-8")
    if len(data) == len(joined):  # ASCII: byte offsets are character offsets
        offsets = array("q", accumulate(map(len, texts), initial=0))
    else:
        offsets = array("q", accumulate((len(t.encode("utf-8")) for t in texts), initial=0))
    if len(data) <= _INT32_MAX:
        buffers = [validity, pa.py_buffer(array("i", offsets)), pa.py_buffer(data)]
        return pa.Array.from_buffers(pa.string(), n, buffers)
    buffers = [validity, pa.py_buffer(offsets), pa.py_buffer(data)]
    return cast(pa.Array.from_buffers(pa.large_string(), n, buffers), pa.string())


def int_array(values: Sequence[int | None], type: pa.DataType | None = None) -> pa.Array:
    """An int64 (default) or int32 array (nulls allowed)."""
    type = pa.int64() if type is None else type
    data = array("q" if type == pa.int64() else "i", [0 if v is None else int(v) for v in values])
    return pa.Array.from_buffers(type, len(values), [_validity(values), pa.py_buffer(data)])


def bool_array(values: Sequence[bool | None]) -> pa.Array:
    """A boolean array (nulls allowed)."""
    return bools_from_bytes(bytearray(1 if v else 0 for v in values), _validity(values))


def _pairs(value: Any) -> Any:
    return value.items() if isinstance(value, Mapping) else value


def str_map_array(values: Sequence[Any], type: pa.DataType) -> pa.Array:
    """A `map<string, string>` array from mappings or lists of (key, value) pairs (None = null)."""
    keys: list[str | None] = []
    items: list[str | None] = []
    offsets = array("i", [0])
    for v in values:
        if v is not None:
            for k, item in _pairs(v):
                keys.append(k)
                items.append(item)
        offsets.append(len(keys))
    # from buffers, not `MapArray.from_arrays(mask=...)`: a mask goes through `pyarrow.compute`
    entries = pa.StructArray.from_arrays(
        [string_array(keys), string_array(items)], fields=[type.key_field, type.item_field]
    )
    return pa.Array.from_buffers(type, len(values), [_validity(values), pa.py_buffer(offsets)], children=[entries])


def column(values: Sequence[Any], type: pa.DataType) -> pa.Array:
    """An array of `type` from Python values, as `pa.array(values, type)` would build it."""
    if pa.types.is_string(type):
        return string_array(values)
    if pa.types.is_int64(type) or pa.types.is_int32(type):
        return int_array(values, type)
    if pa.types.is_boolean(type):
        return bool_array(values)
    if pa.types.is_map(type) and pa.types.is_string(type.key_type) and pa.types.is_string(type.item_type):
        return str_map_array(values, type)
    n = len(values)
    if all(v is None for v in values):  # any type, even one without a builder (a `stats_parsed` timestamp)
        return pa.nulls(n, type)
    validity = _validity(values)
    if pa.types.is_list(type):
        offsets = array("i", accumulate((len(v or ()) for v in values), initial=0))
        child = column([x for v in values for x in (v or ())], type.value_type)
        return pa.Array.from_buffers(type, n, [validity, pa.py_buffer(offsets)], children=[child])
    if pa.types.is_struct(type):
        children = [column([None if v is None else v.get(f.name) for v in values], f.type) for f in type]
        return pa.Array.from_buffers(type, n, [validity], children=children)
    raise TypeError(f"no pandas-free builder for {type}")


def int64_scalar(value: int) -> pa.Scalar:
    """A non-null int64 scalar (compute functions convert plain ints with `pa.scalar`)."""
    return int_array([value])[0]


def string_scalar(value: str) -> pa.Scalar:
    return string_array([value])[0]
