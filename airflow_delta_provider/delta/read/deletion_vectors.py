"""Reading deletion vectors and data files through them (PROTOCOL.md "Deletion Vector Format").

A DV file is a version byte (`1`), then for each DV, at its descriptor's `offset`: a big-endian int32
`dataSize` (= `sizeInBytes`), the serialized `RoaringBitmapArray`, a big-endian CRC-32 of it. The
`RoaringBitmapArray` (inline DVs hold only this part) is a little-endian int32 magic `1681511377` followed
by a 64-bit roaring bitmap in the "portable" format, decoded by `pyroaring.BitMap64`. Only the bytes of the
one DV (and the version byte) are read. Every check failing is a `LogCorruptedError` naming the DV file and,
in its message, the data file; a missing DV or data file too (the log names a file that is not there).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq
from pyroaring import BitMap64

from ..errors import DeltaError, InvalidArgumentError, LogCorruptedError, StorageError, UnsupportedFeatureError
from ..protocol.actions import AddFile, DeletionVectorDescriptor, decode_path
from ..protocol.deletion_vectors import DvLocation, decode_absolute_path, dv_location, is_absolute_path
from . import arrow_compute as pc
from .arrow_build import int64_scalar, int_array

if TYPE_CHECKING:  # pragma: no cover
    from ..storage import LogStore

DV_FILE_FORMAT_VERSION = 1
#: `RoaringBitmapArray` magic numbers: the portable 64-bit format Delta writers use, and Delta Spark's
#: older "native" format (readable by Spark only; refused here as unsupported).
PORTABLE_MAGIC = 1681511377
NATIVE_MAGIC = 1681511376
#: Row indexes must keep the sign bit clear (PROTOCOL.md: every bitmap key has a 0 most significant bit).
_MAX_ROW_INDEX = 2**63 - 1
# Not `pa.array([])`: converting a Python object makes pyarrow import pandas (~0.5 s in every process).
_EMPTY = pa.nulls(0, pa.uint64())


def store_path(store: LogStore, table_root: str, logged_path: str) -> str:
    """The path `store` opens for a file the log names (`add.path` as logged: relative and percent-encoded,
    or absolute), decoded exactly once."""
    if is_absolute_path(logged_path):
        return decode_absolute_path(logged_path)
    return store.join(table_root, *decode_path(logged_path).split("/"))


def read_deletion_vector(
    store: LogStore, table_root: str, dv: DeletionVectorDescriptor, *, table: str | None = None, file: str | None = None
) -> pa.UInt64Array:
    """The row indexes `dv` deletes from data file `file` (as logged), ascending, as a uint64 array.

    Raises `LogCorruptedError` for a bad descriptor or DV file (missing, truncated, wrong version byte,
    size, checksum, magic or cardinality), `UnsupportedFeatureError` for the native bitmap format or an
    unknown storage type, `StorageError` when storage fails.
    """
    table = table if table is not None else table_root
    if dv.cardinality == 0:  # Spark's `isEmpty`: nothing to read (`DeletionVectorDescriptor.EMPTY` is inline "")
        return _EMPTY
    loc = dv_location(dv, table_root, table=table, file=file)
    where = _describe(loc, file)
    if loc.kind == "inline":
        blob, name = loc.data or b"", file
    else:
        name = loc.relative_path or loc.path
        blob = _read_stored(store, table_root, loc, table=table, name=name, where=where)
    bitmap = _decode(blob, table=table, name=name, where=where)
    if len(bitmap) != dv.cardinality:
        raise LogCorruptedError(
            f"Deletion vector {where} holds {len(bitmap)} rows, its descriptor says cardinality {dv.cardinality}",
            table=table,
            file=name,
        )
    if bitmap.max() > _MAX_ROW_INDEX:
        raise LogCorruptedError(f"Deletion vector {where} holds a row index >= 2^63", table=table, file=name)
    return _as_array(bitmap)


def _describe(loc: DvLocation, file: str | None) -> str:
    of = f" of data file {file}" if file else ""
    return f"(inline){of}" if loc.kind == "inline" else f"{loc.relative_path or loc.path}{of}"


def _read_stored(
    store: LogStore, table_root: str, loc: DvLocation, *, table: str, name: str | None, where: str
) -> bytes:
    """The `RoaringBitmapArray` bytes of a file DV, after the version, size and checksum checks."""
    path = store.join(table_root, *loc.relative_path.split("/")) if loc.relative_path else loc.path or ""

    def corrupt(reason: str) -> LogCorruptedError:
        return LogCorruptedError(f"Deletion vector file {where}: {reason}", table=table, file=name)

    with _open(store, path, table=table, name=name, what=f"Deletion vector file {where}") as fh:
        try:
            version = fh.read(1)
            fh.seek(loc.offset)
            framed = _read_at_most(fh, 4 + loc.size_in_bytes + 4)
        except DeltaError:
            raise
        except OSError as exc:
            raise StorageError(
                f"Cannot read deletion vector file {where}: {type(exc).__name__}: {exc}", table=table, file=name
            ) from None
    if version != bytes([DV_FILE_FORMAT_VERSION]):
        raise corrupt(f"format version {version.hex() or 'missing'}, expected {DV_FILE_FORMAT_VERSION:02x}")
    if len(framed) < 4:
        raise corrupt(f"truncated: no size field at offset {loc.offset}")
    (data_size,) = struct.unpack(">i", framed[:4])
    if data_size != loc.size_in_bytes:
        raise corrupt(f"size field says {data_size} bytes at offset {loc.offset}, the log says {loc.size_in_bytes}")
    if len(framed) < 4 + data_size + 4:
        raise corrupt(f"truncated: {len(framed)} of {4 + data_size + 4} bytes at offset {loc.offset}")
    data = framed[4 : 4 + data_size]
    (expected,) = struct.unpack(">I", framed[4 + data_size :])
    actual = zlib.crc32(data)
    if actual != expected:
        raise corrupt(f"CRC-32 checksum mismatch (stored {expected:08x}, computed {actual:08x})")
    return data


def _open(store: LogStore, path: str, *, table: str, name: str | None, what: str) -> BinaryIO:
    """`store.open(path)`: a missing file is a `LogCorruptedError` (the log names it), other failures `StorageError`."""
    try:
        return store.open(path)
    except FileNotFoundError:
        raise LogCorruptedError(
            f"{what} is missing (the log names a file that is not on storage)", table=table, file=name
        ) from None
    except DeltaError:
        raise
    except OSError as exc:
        raise StorageError(
            f"Cannot open {what}: {type(exc).__name__}: {exc}",
            table=table,
            file=name,
            transient=not isinstance(exc, PermissionError | IsADirectoryError | NotADirectoryError),
        ) from None


def _read_at_most(fh: BinaryIO, n: int, chunk: int = 1 << 20) -> bytes:
    """Up to `n` bytes (fewer only at the end of the file), in bounded reads: a corrupt `sizeInBytes`
    must not allocate what the file does not hold."""
    chunks = []
    while n > 0:
        data = fh.read(min(n, chunk))
        if not data:
            break
        chunks.append(data)
        n -= len(data)
    return b"".join(chunks)


def _decode(blob: bytes, *, table: str, name: str | None, where: str) -> BitMap64:
    """A serialized `RoaringBitmapArray` (magic + portable 64-bit bitmap) as a bitmap."""
    if len(blob) < 4:
        raise LogCorruptedError(
            f"Deletion vector {where}: {len(blob)} bytes, too short for a bitmap", table=table, file=name
        )
    (magic,) = struct.unpack("<i", blob[:4])
    if magic == NATIVE_MAGIC:
        raise UnsupportedFeatureError(
            f"Deletion vector {where} uses the native RoaringBitmapArray format (magic {NATIVE_MAGIC}); "
            f"only the portable format (magic {PORTABLE_MAGIC}) is supported",
            feature="deletionVectors",
            table=table,
            file=name,
        )
    if magic != PORTABLE_MAGIC:
        raise LogCorruptedError(
            f"Deletion vector {where}: magic number {magic}, expected {PORTABLE_MAGIC}", table=table, file=name
        )
    try:
        return BitMap64.deserialize(blob[4:])
    except (ValueError, IndexError) as exc:  # what pyroaring raises for malformed input
        raise LogCorruptedError(
            f"Deletion vector {where}: not a portable 64-bit roaring bitmap ({type(exc).__name__}: {exc})",
            table=table,
            file=name,
        ) from None


def _as_array(bitmap: BitMap64) -> pa.UInt64Array:
    values = bitmap.to_array()
    return pa.Array.from_buffers(pa.uint64(), len(values), [None, pa.py_buffer(values)])


def _kept_mask(num_rows: int, deleted: pa.UInt64Array) -> pa.BooleanArray:
    """The keep mask of `num_rows` rows for `deleted` (ascending row indexes below `num_rows`, unchecked).

    Without numpy or `scatter` (pyarrow 20): `num_rows + 1` slots (slot `i + 1` is row `i`) are cut into lists
    at `[0, d0 + 1, d1 + 1, ..., num_rows + 1]`, so a row is kept exactly when its list index
    (`list_parent_indices`) equals the previous slot's.
    """
    starts = pc.add(deleted.view(pa.int64()), int64_scalar(1))  # row indexes are < 2^63 (checked on decode)
    offsets = pa.concat_arrays([int_array([0]), starts, int_array([num_rows + 1])])
    parents = pc.list_parent_indices(pa.LargeListArray.from_arrays(offsets, pa.nulls(num_rows + 1)))
    return pc.equal(parents[1:], parents[:-1])


@contextmanager
def open_data_file(
    store: LogStore, table_root: str, add: AddFile, *, table: str
) -> Iterator[tuple[BinaryIO, pa.UInt64Array]]:
    """`add`'s data file opened, with the row indexes its deletion vector deletes (ascending; none without
    one). A missing file is a `LogCorruptedError`, as is a Parquet or read failure inside the block;
    storage failures stay typed."""
    deleted = (
        read_deletion_vector(store, table_root, add.deletion_vector, table=table, file=add.path)
        if add.deletion_vector is not None
        else _EMPTY
    )
    with _open(store, store_path(store, table_root, add.path), table=table, name=add.path, what="Data file") as fh:
        try:
            yield fh, deleted
        except DeltaError:  # storage failures mid-read come typed from the store
            raise
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise LogCorruptedError(
                f"Cannot read data file as Parquet: {type(exc).__name__}: {exc}", table=table, file=add.path
            ) from None


def check_deleted_rows(deleted: pa.UInt64Array, num_rows: int, *, table: str, file: str) -> None:
    """`LogCorruptedError` when the deletion vector marks a row past the file's `num_rows`."""
    if len(deleted) and (last := deleted[-1].as_py()) >= num_rows:
        raise LogCorruptedError(
            f"Deletion vector of data file {file} deletes row {last}, the file has {num_rows} rows",
            table=table,
            file=file,
        )


def read_data_file(
    store: LogStore, table_root: str, add: AddFile, *, columns: Sequence[str] | None = None, table: str | None = None
) -> pa.Table:
    """The rows of `add`'s Parquet file its deletion vector keeps, as the file has them (physical names, field
    ids, no partition values); `columns` selects top-level columns.

    Raises `LogCorruptedError` when the file is missing or not Parquet, or its DV is bad or marks a row past
    the file's end; `InvalidArgumentError` for a column the file lacks; `StorageError` when storage fails.
    """
    table = table if table is not None else table_root
    with open_data_file(store, table_root, add, table=table) as (fh, deleted):
        parquet = pq.ParquetFile(fh, coerce_int96_timestamp_unit="us")  # INT96 past 2262 stays exact
        if columns is not None:
            missing = sorted(set(columns) - set(parquet.schema_arrow.names))
            if missing:
                raise InvalidArgumentError(
                    f"Data file has no column(s) {missing}", argument="columns", table=table, file=add.path
                )
        data = parquet.read(columns=list(columns) if columns is not None else None)
    if len(deleted) == 0:
        return data
    check_deleted_rows(deleted, data.num_rows, table=table, file=add.path)
    return data.filter(_kept_mask(data.num_rows, deleted))
