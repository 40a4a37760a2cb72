"""`rows_kept_mask`: the deletion-vector keep mask of `read.deletion_vectors`, with its inputs checked
(only the tests build masks from arbitrary row indexes; the reader's come from a decoded bitmap)."""

from __future__ import annotations

from array import array
from collections.abc import Sequence

import pyarrow as pa
from pyroaring import BitMap64

from airflow_delta_provider.delta.errors import InvalidArgumentError
from airflow_delta_provider.delta.read.arrow_compute import cast
from airflow_delta_provider.delta.read.deletion_vectors import _as_array, _kept_mask


def rows_kept_mask(num_rows: int, deleted: pa.Array | Sequence[int]) -> pa.BooleanArray:
    """A mask of `num_rows` rows, False at the `deleted` row indexes (any order, repeats allowed;
    `InvalidArgumentError` when one is negative, null or not below `num_rows`)."""
    try:
        if isinstance(deleted, pa.Array):
            if deleted.null_count:
                raise InvalidArgumentError("Deleted row indexes hold nulls", argument="deleted")
            values = array("Q")
            if len(deleted):
                as_uint64 = cast(deleted, pa.uint64())
                start = as_uint64.offset * 8
                values.frombytes(as_uint64.buffers()[1][start : start + len(as_uint64) * 8])
            bitmap = BitMap64(values)
        else:
            bitmap = BitMap64(deleted)
    except (OverflowError, TypeError, pa.ArrowInvalid) as exc:
        raise InvalidArgumentError(f"Deleted row indexes must be integers >= 0: {exc}", argument="deleted") from None
    if bitmap and bitmap.max() >= num_rows:
        raise InvalidArgumentError(f"Row index {bitmap.max()} is outside a file of {num_rows} rows", argument="deleted")
    return _kept_mask(num_rows, _as_array(bitmap))
