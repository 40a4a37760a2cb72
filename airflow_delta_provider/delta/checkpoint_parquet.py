"""Small checkpoints decoded in pure Python, without importing pyarrow or numpy.

`import pyarrow` costs 0.1-0.2 s (numpy is most of it) before a single byte is read: more than
decoding a checkpoint of ten thousand files takes. Checkpoints below the local engine's
`row_state_max_bytes` are decoded here instead, into one Python list per leaf column.

The reader covers what checkpoint writers produce (Delta Spark, delta-rs, pyarrow, DuckDB): data
pages v1 and v2, dictionary pages, PLAIN / RLE_DICTIONARY / PLAIN_DICTIONARY / RLE-boolean
encodings, BOOLEAN / INT32 / INT64 / BYTE_ARRAY leaves, at most one repeated level (maps and lists
of primitives), and UNCOMPRESSED / SNAPPY / GZIP / ZSTD / LZ4_RAW / BROTLI pages. Anything else
raises `UnsupportedParquet`, and the caller reads the file with pyarrow instead, so an unusual file
costs time, never an answer. Pure: bytes in, columns out.
"""

from __future__ import annotations

import struct
import sys
import zlib
from array import array
from collections.abc import Callable, Iterable, Sequence
from functools import cache
from itertools import accumulate, chain, compress
from typing import Any

MAGIC = b"PAR1"
_I32 = struct.Struct("<i")

# parquet.thrift enums
_BOOLEAN, _INT32, _INT64, _BYTE_ARRAY = 0, 1, 2, 6
_REQUIRED, _OPTIONAL, _REPEATED = 0, 1, 2
_PLAIN, _PLAIN_DICTIONARY, _RLE, _RLE_DICTIONARY = 0, 2, 3, 8
_DATA_PAGE, _DICTIONARY_PAGE, _DATA_PAGE_V2 = 0, 2, 3
_CONVERTED_MAP, _CONVERTED_MAP_KEY_VALUE, _CONVERTED_LIST = 1, 2, 3


class UnsupportedParquet(Exception):
    """The file uses something this reader does not decode (or is not valid Parquet): use pyarrow."""


# ---------------------------------------------------------------------------------------------------
# Thrift compact protocol: structs decode to {field id: value}.


class _Thrift:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes | memoryview, pos: int = 0) -> None:
        self.buf = buf
        self.pos = pos

    def varint(self) -> int:
        buf, pos, out, shift = self.buf, self.pos, 0, 0
        while True:
            b = buf[pos]
            pos += 1
            out |= (b & 0x7F) << shift
            if b < 0x80:
                self.pos = pos
                return out
            shift += 7

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def value(self, kind: int) -> Any:
        if kind == 1:
            return True
        if kind == 2:
            return False
        if kind == 3:
            self.pos += 1
            return self.buf[self.pos - 1]
        if kind in (4, 5, 6):
            return self.zigzag()
        if kind == 7:
            self.pos += 8
            return struct.unpack_from("<d", self.buf, self.pos - 8)[0]
        if kind == 8:
            n = self.varint()
            self.pos += n
            return bytes(self.buf[self.pos - n : self.pos])
        if kind in (9, 10):
            head = self.buf[self.pos]
            self.pos += 1
            size, elem = head >> 4, head & 0x0F
            if size == 15:
                size = self.varint()
            if size > len(self.buf) - self.pos:  # every element takes at least a byte
                raise UnsupportedParquet("thrift list longer than its bytes")
            if elem in (1, 2):  # booleans in collections are one byte each
                out = [self.buf[self.pos + i] == 1 for i in range(size)]
                self.pos += size
                return out
            return [self.value(elem) for _ in range(size)]
        if kind == 11:
            size = self.varint()
            if not size:
                return {}
            kinds = self.buf[self.pos]
            self.pos += 1
            if 2 * size > len(self.buf) - self.pos:  # every key and value takes at least a byte
                raise UnsupportedParquet("thrift map longer than its bytes")
            return {self._element(kinds >> 4): self._element(kinds & 0x0F) for _ in range(size)}
        if kind == 12:
            return self.struct()
        raise UnsupportedParquet(f"unknown thrift type {kind}")

    def _element(self, kind: int) -> Any:
        """A map key or value: booleans in collections are one byte each."""
        if kind in (1, 2):
            self.pos += 1
            return self.buf[self.pos - 1] == 1
        return self.value(kind)

    def struct(self) -> dict[int, Any]:
        out: dict[int, Any] = {}
        last = 0
        while True:
            head = self.buf[self.pos]
            self.pos += 1
            if head == 0:
                return out
            kind, delta = head & 0x0F, head >> 4
            fid = last + delta if delta else self.zigzag()
            out[fid] = self.value(kind)
            last = fid


# ---------------------------------------------------------------------------------------------------
# Schema


class SchemaNode:
    """One schema element, with the definition/repetition level at which it is present.
    (Plain classes here, not dataclasses: each dataclass costs ~1.5 ms of import.)"""

    __slots__ = ("children", "converted", "def_level", "name", "physical", "rep_level", "repetition")

    def __init__(
        self, name: str, repetition: int, physical: int | None, converted: int | None, def_level: int, rep_level: int
    ) -> None:
        self.name = name
        self.repetition = repetition
        self.physical = physical  # None for groups
        self.converted = converted
        self.children: list[SchemaNode] = []
        self.def_level = def_level  # definition level at which this node is non-null
        self.rep_level = rep_level  # repetition levels of this node and its ancestors

    def child(self, name: str) -> SchemaNode | None:
        return next((c for c in self.children if c.name == name), None)


def _schema_tree(elements: list[dict[int, Any]]) -> SchemaNode:
    pos = 0

    def build(def_level: int, rep_level: int) -> SchemaNode:
        nonlocal pos
        el = elements[pos]
        pos += 1
        repetition = el.get(3, _REQUIRED) if pos > 1 else _REQUIRED
        if repetition != _REQUIRED:
            def_level += 1
        if repetition == _REPEATED:
            rep_level += 1
        node = SchemaNode(
            el[4].decode("utf-8"), repetition, el.get(1), el.get(6), def_level=def_level, rep_level=rep_level
        )
        for _ in range(el.get(5, 0) or 0):
            node.children.append(build(def_level, rep_level))
        if node.physical is None and not node.children and pos > 1:
            raise UnsupportedParquet(f"empty group {node.name}")
        return node

    root = build(0, 0)
    if pos != len(elements):
        raise UnsupportedParquet("schema has trailing elements")
    return root


# ---------------------------------------------------------------------------------------------------
# Decoding


def _decompress(codec: int, data: bytes | memoryview, size: int) -> bytes | memoryview:
    if codec == 0:
        return data
    if codec == 2:
        return zlib.decompress(data, 47)
    try:
        import cramjam
    except ImportError:  # an optional speed-up: without it, pyarrow reads the file
        raise UnsupportedParquet("cramjam is not installed") from None
    if codec == 1:
        return bytes(cramjam.snappy.decompress_raw(data))
    if codec == 6:
        return bytes(cramjam.zstd.decompress(data))
    if codec == 7:
        return bytes(cramjam.lz4.decompress_block(data, output_len=size))
    if codec == 4:
        return bytes(cramjam.brotli.decompress(data))
    raise UnsupportedParquet(f"compression codec {codec}")


@cache
def _lut(width: int) -> list[tuple[int, ...]]:
    """Byte -> the `8 // width` values it packs, LSB first (widths 1, 2 and 4)."""
    return [tuple((b >> s) & ((1 << width) - 1) for s in range(0, 8, width)) for b in range(256)]


def _bitpacked(buf: bytes | memoryview, pos: int, groups: int, width: int) -> list[int]:
    """`groups * 8` values of `width` bits, LSB first."""
    end = pos + groups * width
    if width == 0:
        return [0] * (groups * 8)
    if width == 8:
        return list(buf[pos:end])
    if width in (1, 2, 4):
        return list(chain.from_iterable(map(_lut(width).__getitem__, buf[pos:end])))
    mask = (1 << width) - 1
    shifts = range(0, 8 * width, width)
    frm = int.from_bytes
    return [
        (v >> s) & mask for v in (frm(buf[p : p + width], "little") for p in range(pos, end, width)) for s in shifts
    ]


def _hybrid(buf: bytes | memoryview, pos: int, end: int, width: int, count: int) -> list[int]:
    """`count` values of the RLE / bit-packing hybrid encoding in `buf[pos:end]`."""
    out: list[int] = []
    nbytes = (width + 7) // 8
    reader = _Thrift(buf, pos)
    while len(out) < count:
        if reader.pos >= end:
            raise UnsupportedParquet("RLE run past the end of its data")
        header = reader.varint()
        p = reader.pos
        if header & 1:
            groups = header >> 1
            out += _bitpacked(buf, p, groups, width)
            reader.pos = p + groups * width
        else:
            value = int.from_bytes(buf[p : p + nbytes], "little")
            out += [value] * (header >> 1)
            reader.pos = p + nbytes
    del out[count:]
    return out


def _plain(physical: int, buf: bytes | memoryview, pos: int, count: int) -> list[Any]:
    if physical == _BYTE_ARRAY:  # decoded as UTF-8 here: checkpoints hold strings only
        data = bytes(buf[pos:]) if pos or not isinstance(buf, bytes) else buf
        out: list[Any] = []
        append, unpack, p = out.append, _I32.unpack_from, 0
        try:
            for _ in range(count):
                (n,) = unpack(data, p)
                p += 4
                append(data[p : p + n].decode())
                p += n
        except UnicodeDecodeError:
            raise UnsupportedParquet("a byte array that is not UTF-8") from None
        if p > len(data):
            raise UnsupportedParquet("PLAIN byte arrays past the end of the page")
        return out
    if physical in (_INT32, _INT64):
        width = 4 if physical == _INT32 else 8
        values = array("i" if width == 4 else "q")
        if values.itemsize != width or sys.byteorder != "little":
            raise UnsupportedParquet("platform integer layout")
        values.frombytes(buf[pos : pos + count * width])
        if len(values) != count:
            raise UnsupportedParquet("PLAIN integers past the end of the page")
        return values.tolist()
    if physical == _BOOLEAN:
        return [bool(v) for v in _bitpacked(buf, pos, (count + 7) // 8, 1)[:count]]
    raise UnsupportedParquet(f"physical type {physical}")


def _values(
    encoding: int, physical: int, buf: bytes | memoryview, pos: int, end: int, count: int, dictionary: list[Any] | None
) -> list[Any]:
    if encoding == _PLAIN:
        return _plain(physical, buf, pos, count)
    if encoding in (_RLE_DICTIONARY, _PLAIN_DICTIONARY):
        if dictionary is None:
            raise UnsupportedParquet("dictionary-encoded page without a dictionary")
        if not count:
            return []
        indices = _hybrid(buf, pos + 1, end, buf[pos], count)
        try:
            return [dictionary[i] for i in indices]
        except IndexError:
            raise UnsupportedParquet("dictionary index out of range") from None
    if encoding == _RLE and physical == _BOOLEAN:
        (n,) = struct.unpack_from("<i", buf, pos)
        return [bool(v) for v in _hybrid(buf, pos + 4, pos + 4 + n, 1, count)]
    raise UnsupportedParquet(f"encoding {encoding}")


class Column:
    """One leaf column: levels per entry and the non-null values in order (strings decoded)."""

    __slots__ = ("defs", "node", "reps", "values")

    def __init__(self, node: SchemaNode, defs: bytes, reps: bytes | None, values: list[Any]) -> None:
        self.node = node
        self.defs = defs  # one level per entry (levels are small ints); max_def everywhere when required
        self.reps = reps  # None when no ancestor repeats (one entry per row)
        self.values = values

    def value_at(self, row: int) -> Any:
        """The value of a flat leaf in one row (None where it or a parent is null). Meant for the few
        rows of non-file actions: each call counts the values before `row`."""
        max_def = self.node.def_level
        if self.defs[row] != max_def:
            return None
        return self.values[self.defs[:row].count(max_def) if len(self.values) < len(self.defs) else row]


def _read_chunk(data: bytes | memoryview, node: SchemaNode, meta: dict[int, Any], num_rows: int) -> Column:
    physical, codec = meta[1], meta[4]
    if physical != node.physical:
        raise UnsupportedParquet("column chunk type differs from the schema")
    max_def, max_rep = node.def_level, node.rep_level
    def_width, rep_width = max_def.bit_length(), max_rep.bit_length()
    num_values = meta[5]
    pos = meta.get(11) or meta[9]
    if meta.get(11) is not None and meta.get(9) is not None:
        pos = min(meta[11], meta[9])
    end = pos + meta[7]
    if end > len(data):
        raise UnsupportedParquet("column chunk past the end of the file")
    dictionary: list[Any] | None = None
    defs = bytearray()
    reps = bytearray()
    values: list[Any] = []
    while len(defs) < num_values and pos < end:
        reader = _Thrift(data, pos)
        header = reader.struct()
        pos = reader.pos
        kind, size, csize = header[1], header[2], header[3]
        page = data[pos : pos + csize]
        pos += csize
        if kind == _DICTIONARY_PAGE:
            dh = header[7]
            body = _decompress(codec, page, size)
            if dh.get(2, _PLAIN) not in (_PLAIN, _PLAIN_DICTIONARY):
                raise UnsupportedParquet("dictionary page encoding")
            dictionary = _plain(physical, body, 0, dh[1])
        elif kind == _DATA_PAGE:
            dh = header[5]
            count = dh[1]
            body = _decompress(codec, page, size)
            p = 0
            if max_rep:
                if dh.get(4, _RLE) != _RLE:
                    raise UnsupportedParquet("repetition level encoding")
                (n,) = struct.unpack_from("<i", body, p)
                reps.extend(_hybrid(body, p + 4, p + 4 + n, rep_width, count))
                p += 4 + n
            if max_def:
                if dh.get(3, _RLE) != _RLE:
                    raise UnsupportedParquet("definition level encoding")
                (n,) = struct.unpack_from("<i", body, p)
                page_defs = _hybrid(body, p + 4, p + 4 + n, def_width, count)
                p += 4 + n
            else:
                page_defs = [0] * count
            defs.extend(page_defs)
            present = page_defs.count(max_def)
            values += _values(dh[2], physical, body, p, len(body), present, dictionary)
        elif kind == _DATA_PAGE_V2:
            dh = header[8]
            count, encoding = dh[1], dh[4]
            dlen, rlen = dh[5], dh[6]
            if max_rep:
                reps.extend(_hybrid(page, 0, rlen, rep_width, count))
            page_defs = _hybrid(page, rlen, rlen + dlen, def_width, count) if max_def else [0] * count
            defs.extend(page_defs)
            rest = page[rlen + dlen :]
            if dh.get(7, True):
                rest = _decompress(codec, rest, size - rlen - dlen)
            present = page_defs.count(max_def)
            values += _values(encoding, physical, rest, 0, len(rest), present, dictionary)
        else:  # index pages carry nothing we need
            continue
    if len(defs) != num_values:
        raise UnsupportedParquet("column chunk holds fewer values than its metadata says")
    if not max_rep and num_values != num_rows:
        raise UnsupportedParquet("flat column with a value count other than its row count")
    return Column(node, bytes(defs), bytes(reps) if max_rep else None, values)


class ParquetColumns:
    """Some leaf columns of a Parquet file, every row group concatenated."""

    __slots__ = ("_assembled", "columns", "num_rows", "schema")

    def __init__(self, schema: SchemaNode, num_rows: int, columns: dict[tuple[str, ...], Column]) -> None:
        self.schema = schema
        self.num_rows = num_rows
        self.columns = columns
        self._assembled: dict[tuple[str, ...], list[Any]] = {}

    def assembled(self, path: tuple[str, ...], build: Callable[[ParquetColumns, tuple[str, ...]], Any]) -> list[Any]:
        """`build(self, path)`, computed once per path (a map or list column, one value per row)."""
        if path not in self._assembled:
            self._assembled[path] = build(self, path)
        return self._assembled[path]

    def node(self, *path: str) -> SchemaNode | None:
        node: SchemaNode | None = self.schema
        for name in path:
            node = None if node is None else node.child(name)
        return node


def _leaves(node: SchemaNode, prefix: tuple[str, ...]) -> Iterable[tuple[tuple[str, ...], SchemaNode]]:
    for child in node.children:
        path = (*prefix, child.name)
        if child.physical is not None:
            yield path, child
        else:
            yield from _leaves(child, path)


def footer_length(tail: bytes) -> int:
    """The footer's length from a file's last 8 bytes (the footer itself precedes them)."""
    if len(tail) != 8 or tail[4:] != MAGIC:
        raise UnsupportedParquet("not a Parquet file")
    return int.from_bytes(tail[:4], "little")


def uncompressed_sizes(footer: bytes | memoryview) -> tuple[int, dict[tuple[str, ...], int]]:
    """(rows, uncompressed bytes per leaf column path) from a footer's FileMetaData, all row groups."""
    try:
        meta = _Thrift(memoryview(footer), 0).struct()
        sizes: dict[tuple[str, ...], int] = {}
        for group in meta.get(4, []):
            for chunk in group[1]:
                cmeta = chunk[3]
                path = tuple(p.decode("utf-8") for p in cmeta[3])
                sizes[path] = sizes.get(path, 0) + cmeta[6]
        return meta[3], sizes
    except UnsupportedParquet:
        raise
    except Exception as exc:  # IndexError, KeyError, struct.error, RecursionError, ... on a damaged footer
        raise UnsupportedParquet(f"cannot decode the footer: {type(exc).__name__}: {exc}") from None


def read_columns(data: bytes | memoryview, fields: Iterable[tuple[str, ...]]) -> ParquetColumns:
    """Every leaf under the named fields (paths from the root; missing ones are skipped)."""
    try:
        return _read_columns(memoryview(data), list(fields))
    except UnsupportedParquet:
        raise
    except (IndexError, KeyError, ValueError, TypeError, struct.error, zlib.error, OverflowError) as exc:
        raise UnsupportedParquet(f"cannot decode: {type(exc).__name__}: {exc}") from None
    except Exception as exc:  # cramjam raises its own DecompressionError
        raise UnsupportedParquet(f"cannot decode: {type(exc).__name__}: {exc}") from None


def _read_columns(data: memoryview, fields: list[tuple[str, ...]]) -> ParquetColumns:
    if len(data) < 12 or data[:4] != MAGIC:
        raise UnsupportedParquet("not a Parquet file")
    start = len(data) - 8 - footer_length(bytes(data[-8:]))
    if start < 4:
        raise UnsupportedParquet("footer length out of range")
    meta = _Thrift(data, start).struct()
    root = _schema_tree(meta[2])
    num_rows = meta[3]
    wanted: dict[tuple[str, ...], SchemaNode] = {}
    for path in fields:
        node: SchemaNode | None = root
        for name in path:
            node = None if node is None else node.child(name)
        if node is None:
            continue
        if node.physical is not None:
            wanted[path] = node
        else:
            wanted.update(_leaves(node, path))
    for path, node in wanted.items():
        if node.rep_level > 1:
            raise UnsupportedParquet(f"{'.'.join(path)} is nested in more than one repeated field")
    parts: dict[tuple[str, ...], list[Column]] = {p: [] for p in wanted}
    for group in meta.get(4, []):
        rows = group[3]
        for chunk in group[1]:
            if chunk.get(1):
                raise UnsupportedParquet("column chunk in another file")
            cmeta = chunk[3]
            path = tuple(p.decode("utf-8") for p in cmeta[3])
            if path in wanted:
                parts[path].append(_read_chunk(data, wanted[path], cmeta, rows))
    columns = {}
    for path, chunks in parts.items():
        if len(chunks) != len(meta.get(4, [])):
            raise UnsupportedParquet(f"{'.'.join(path)} is missing from a row group")
        if len(chunks) == 1:
            columns[path] = chunks[0]
            continue
        first = chunks[0]
        columns[path] = Column(
            first.node,
            b"".join(c.defs for c in chunks),
            None if first.reps is None else b"".join(c.reps or b"" for c in chunks),
            [v for c in chunks for v in c.values],
        )
    return ParquetColumns(root, num_rows, columns)


# ---------------------------------------------------------------------------------------------------
# From levels to Python values


@cache
def _at_least(floor: int) -> bytes:
    """A `bytes.translate` table: level -> 1 if level >= floor else 0."""
    return bytes(floor - 1 < level for level in range(256))


_FLIP = bytes([1, 0] + [0] * 254)


def positions(levels: bytes, at_least: int) -> list[int]:
    """Indices of the levels >= `at_least` (no Python call per level)."""
    if at_least <= 0:
        return list(range(len(levels)))
    return list(compress(range(len(levels)), levels.translate(_at_least(min(at_least, 255)))))


def flat_values(column: Column) -> list[Any]:
    """One value per row of a leaf with no repeated ancestor: None where it (or a parent) is null."""
    if column.reps is not None:
        raise UnsupportedParquet("flat_values on a repeated column")
    values, n = column.values, len(column.defs)
    if not values:
        return [None] * n
    if len(values) == n:
        return list(values)
    out: list[Any] = [None] * n
    for i, v in zip(positions(column.defs, column.node.def_level), values, strict=True):
        out[i] = v
    return out


def _rows_of(defs: bytes, reps: bytes, present: int, make: Callable[[], Any]) -> tuple[list[Any], list[int] | None]:
    """For a repeated leaf: one container per row (`make()` where defined at `present`, else None),
    and each level's row number (None when every row has one level)."""
    first = reps.translate(_at_least(1)).translate(_FLIP)  # 1 where a row starts
    if first.count(0) == 0:
        row_defs, rank = defs, None
    else:
        row_defs = bytes(compress(defs, first))
        rank = list(accumulate(first, initial=-1))[1:]
    if not any(row_defs.translate(_at_least(min(present, 255)))):
        return [None] * len(row_defs), rank
    return [make() if d >= present else None for d in row_defs], rank


def map_values(parquet: ParquetColumns, path: tuple[str, ...]) -> list[dict[str, Any] | None] | None:
    """One dict (or None) per row for the map at `path` (a MAP group of key_value(key, value))."""
    node = parquet.node(*path)
    if node is None:
        return None
    if node.physical is not None or len(node.children) != 1:
        raise UnsupportedParquet(f"{'.'.join(path)} is not a map")
    kv = node.children[0]
    if kv.repetition != _REPEATED or len(kv.children) != 2 or kv.children[0].physical is None:
        raise UnsupportedParquet(f"{'.'.join(path)} is not a map of primitives")
    key_node, value_node = kv.children
    kcol = parquet.columns[(*path, kv.name, key_node.name)]
    vcol = parquet.columns[(*path, kv.name, value_node.name)]
    if kcol.reps is None or vcol.reps is None or len(kcol.defs) != len(vcol.defs):
        raise UnsupportedParquet(f"{'.'.join(path)}: key and value levels differ")
    out, rank = _rows_of(kcol.defs, kcol.reps, node.def_level, dict)
    entries = positions(kcol.defs, kv.def_level)
    if len(kcol.values) != len(entries):
        raise UnsupportedParquet(f"{'.'.join(path)}: null map key")
    rows = entries if rank is None else [rank[i] for i in entries]
    if len(vcol.values) == len(entries):
        for row, k, v in zip(rows, kcol.values, vcol.values, strict=True):
            out[row][k] = v
    else:
        vit, vdefs, vmax = iter(vcol.values), vcol.defs, value_node.def_level
        for i, row, k in zip(entries, rows, kcol.values, strict=True):
            out[row][k] = next(vit) if vdefs[i] == vmax else None
    return out


def list_values(parquet: ParquetColumns, path: tuple[str, ...]) -> list[list[Any] | None] | None:
    """One list (or None) per row for the 3-level (or legacy 2-level) LIST of primitives at `path`."""
    node = parquet.node(*path)
    if node is None:
        return None
    if node.physical is not None or len(node.children) != 1:
        raise UnsupportedParquet(f"{'.'.join(path)} is not a list")
    rep = node.children[0]
    if rep.repetition != _REPEATED:
        raise UnsupportedParquet(f"{'.'.join(path)} is not a list")
    if rep.physical is not None:  # 2-level legacy list: the repeated field is the element
        element, leaf_path = rep, (*path, rep.name)
    elif len(rep.children) == 1 and rep.children[0].physical is not None:
        element, leaf_path = rep.children[0], (*path, rep.name, rep.children[0].name)
    else:
        raise UnsupportedParquet(f"{'.'.join(path)} is not a list of primitives")
    col = parquet.columns[leaf_path]
    assert col.reps is not None
    out, rank = _rows_of(col.defs, col.reps, node.def_level, list)
    entries = positions(col.defs, rep.def_level)
    rows = entries if rank is None else [rank[i] for i in entries]
    if len(col.values) == len(entries):
        for row, v in zip(rows, col.values, strict=True):
            out[row].append(v)
    else:
        it, defs, emax = iter(col.values), col.defs, element.def_level
        for i, row in zip(entries, rows, strict=True):
            out[row].append(next(it) if defs[i] == emax else None)
    return out


def struct_values(parquet: ParquetColumns, path: tuple[str, ...], rows: Sequence[int]) -> list[dict[str, Any] | None]:
    """The struct at `path` as JSON-like dicts (maps as dicts, lists as lists) for the given rows."""
    node = parquet.node(*path)
    if node is None or node.physical is not None:
        raise UnsupportedParquet(f"{'.'.join(path)} is not a struct")
    return [_assemble(parquet, node, path, row) for row in rows]


def first_leaf(parquet: ParquetColumns, path: tuple[str, ...]) -> Column:
    """The first leaf column under `path` (its definition levels say where each ancestor is null)."""
    node = parquet.node(*path)
    assert node is not None
    while node.physical is None:
        node = node.children[0]
        path = (*path, node.name)
    return parquet.columns[path]


def _assemble(parquet: ParquetColumns, node: SchemaNode, path: tuple[str, ...], row: int) -> Any:
    """The value of `node` in `row` (only for nodes with no repeated ancestor)."""
    if node.physical is not None:
        return parquet.columns[path].value_at(row)
    if node.converted in (_CONVERTED_MAP, _CONVERTED_MAP_KEY_VALUE) or _is_map(node):
        return parquet.assembled(path, map_values)[row]
    if node.converted == _CONVERTED_LIST:
        return parquet.assembled(path, list_values)[row]
    if any(c.repetition == _REPEATED for c in node.children):
        raise UnsupportedParquet(f"{'.'.join(path)}: repeated field in a struct")
    probe = first_leaf(parquet, path)
    if probe.reps is not None:
        raise UnsupportedParquet(f"{'.'.join(path)}: struct under a repeated field")
    if probe.defs[row] < node.def_level:
        return None
    return {c.name: _assemble(parquet, c, (*path, c.name), row) for c in node.children}


def _is_map(node: SchemaNode) -> bool:
    if len(node.children) != 1:
        return False
    kv = node.children[0]
    return kv.repetition == _REPEATED and [c.name for c in kv.children] == ["key", "value"]
