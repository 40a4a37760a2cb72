"""The log's Arrow columns a table's health counts (`lake.health`), each read in one pass over its column:
the active files' partition codes, sizes, `numRecords` and rows deleted by deletion vectors, and the
tombstones VACUUM may delete. Numpy and pyarrow are imported where they are used (a scan that fails early
never pays for them)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ..protocol.lake_health import Tombstone
from ..protocol.optimize import partition_key
from ..protocol.vacuum import SIMPLE_PATH_PATTERN, protected_from_logged, relative_to_root
from ..read.protected_files import active_set


class Vacuumed(Protocol):
    """What the last completed VACUUM deleted (`lake.health`)."""

    def deleted(self, rel: str, deletion_timestamp: int) -> bool: ...


def _records(stats: str | None) -> int | None:
    if not stats:
        return None
    try:
        value = json.loads(stats).get("numRecords")
    except (ValueError, AttributeError):
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not -(2**63) <= value < 2**63:
        return None  # not a count an int64 column holds (a bigger one raised OverflowError before)
    return value


#: `numRecords` as the first key of a stats JSON (as Spark and delta-rs write it); other layouts are parsed.
_NUM_RECORDS_FIRST = r'^\{\s*"numRecords"\s*:\s*(?P<n>[0-9]{1,18})\s*[,}]'
#: The compact spelling of that layout (no blanks), read from the string bytes without a regex.
_COMPACT_PREFIX = '{"numRecords":'
_MAX_DIGITS = 18


def _compact_counts(stats: Any) -> tuple[Any, Any]:
    """(rows, counts) of the strings of `stats` (string or large_string) that begin with `{"numRecords":`,
    then 1-18 digits, then `,` or `}` (`_NUM_RECORDS_FIRST` without blanks), read as bytes: the 19 bytes after
    that prefix, one row each of a uint8 matrix, give the digit count and the number a digit column at a time
    (10k rows: ~0.6 ms against ~2.4 ms for the regex). Shorter strings are left to the caller."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    width = _MAX_DIGITS + 1
    start = len(_COMPACT_PREFIX)
    raw = stats.view(pa.large_binary() if pa.types.is_large_string(stats.type) else pa.binary())
    candidate = pc.and_(pc.starts_with(stats, _COMPACT_PREFIX), pc.greater_equal(pc.binary_length(raw), start + width))
    rows = np.flatnonzero(candidate.fill_null(False).to_numpy(zero_copy_only=False))
    if len(rows) == 0:
        return rows, np.zeros(0, dtype=np.int64)
    window = pc.binary_slice(raw, start, start + width)  # `width` bytes for each candidate row
    data = np.frombuffer(window.buffers()[2], dtype=np.uint8)
    if len(rows) == len(stats) and window.offset == 0 and len(data) >= width * len(rows):
        bytes_ = data[: width * len(rows)].reshape(len(rows), width)  # contiguous: no copy
    else:
        offsets = np.frombuffer(window.buffers()[1], dtype=np.int64 if raw.type == pa.large_binary() else np.int32)
        bytes_ = data[offsets[window.offset + rows][:, None] + np.arange(width)]
    digits = bytes_ - np.uint8(48)  # bytes below "0" wrap past 9
    is_digit = digits < 10
    count = np.argmin(is_digit, axis=1)  # the first non-digit (0 also when all `width` are digits: too long)
    end = bytes_[np.arange(len(rows)), count]
    ok = (count >= 1) & ((end == ord(",")) | (end == ord("}")))
    value = np.zeros(len(rows), dtype=np.int64)
    for j in range(int(count[ok].max()) if ok.any() else 0):
        value = np.where(j < count, value * 10 + digits[:, j], value)
    return rows[ok], value[ok]


def record_counts(stats: Any) -> Any:
    """Each file's `numRecords` as int64 (-1: no stats or no count): read from the bytes where it is the
    first key written compactly (`_compact_counts`), one vectorized regex where it is first with blanks, a
    JSON parse for the rest."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(stats, pa.ChunkedArray):  # chunk by chunk: the strings are not copied together
        parts = [record_counts(c) for c in stats.chunks]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    if len(stats) == 0:
        return np.zeros(0, dtype=np.int64)
    if not (pa.types.is_string(stats.type) or pa.types.is_large_string(stats.type)):
        stats = stats.cast(pa.large_string())
    counts = np.full(len(stats), -1, dtype=np.int64)
    rows, values = _compact_counts(stats)
    counts[rows] = values
    rest = stats.is_valid().to_numpy(zero_copy_only=False)
    rest[rows] = False
    rest_rows = np.flatnonzero(rest)
    if len(rest_rows) == 0:
        return counts
    others = stats.take(pa.array(rest_rows))
    found = pc.struct_field(pc.extract_regex(others, _NUM_RECORDS_FIRST), [0])
    counts[rest_rows] = pc.cast(found, pa.int64()).fill_null(-1).to_numpy(zero_copy_only=False)
    for i in pc.indices_nonzero(pc.is_null(found)).to_pylist():
        n = _records(others[i].as_py())
        counts[rest_rows[i]] = -1 if n is None else n
    return counts


def _map_values(maps: Any, key: str) -> Any:
    """Each row's value for `key` in a map array (null when absent; the first when repeated), as
    `pyarrow.compute.map_lookup(maps, key, "first")` answers it, from the flattened entries: one comparison
    over every entry instead of a lookup per row (10k rows: ~0.3 ms against ~5 ms)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(maps)
    offsets = maps.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    start, end = int(offsets[0]), int(offsets[-1])
    if end - start == n and not maps.null_count and n:  # one entry per row: the values, when it is `key`
        keys = maps.keys.slice(start, n)
        if not keys.null_count and pc.all(pc.equal(keys, key)).as_py() and bool(np.all(np.diff(offsets) == 1)):
            return maps.items.slice(start, n)
    parents = np.repeat(np.arange(n), np.diff(offsets))
    hit = pc.equal(maps.keys.slice(start, end - start), key).fill_null(False).to_numpy(zero_copy_only=False)
    if maps.null_count:  # a null map's entries (if any) are not its values
        hit &= maps.is_valid().to_numpy(zero_copy_only=False)[parents]
    at = np.flatnonzero(hit)
    rows = parents[at]
    values = maps.items.slice(start, end - start)
    if len(rows) == n and (n == 0 or (rows[0] == 0 and bool(np.all(np.diff(rows) == 1)))):
        return pc.take(values, pa.array(at))  # the common case: every row holds the key once
    first_rows, first_at = np.unique(rows, return_index=True)
    take = np.full(n, -1, dtype=np.int64)
    take[first_rows] = at[first_at]
    return pc.take(values, pa.array(take, mask=take < 0))


def partition_codes(
    pv: Any, columns: Sequence[str], physical: Mapping[str, str]
) -> tuple[Any, list[tuple[str, tuple[tuple[str, str | None], ...]]]]:
    """Each file's partition code and (key, values) per code, from the `partitionValues` maps: each column's
    values looked up and dictionary-encoded (null last), the codes combined, then numbered densely over the
    combinations present (a bincount when their product is small, else a sort); keys are built once per
    partition, never per file."""
    import numpy as np

    n = len(pv)
    indices, dictionaries = [], []
    for c in columns:
        encoded = _map_values(pv, physical.get(c, c)).dictionary_encode()
        dictionary = encoded.dictionary.to_pylist()
        indices.append(encoded.indices.fill_null(len(dictionary)).to_numpy(zero_copy_only=False).astype(np.int64))
        dictionaries.append([*dictionary, None])
    space = math.prod(len(d) for d in dictionaries)
    if space < 2**62:
        combined = np.zeros(n, dtype=np.int64)
        for idx, d in zip(indices, dictionaries, strict=True):
            combined = combined * len(d) + idx
        if space <= 4 * n + 1024:  # dense: present combinations by counting, not sorting
            present = np.bincount(combined, minlength=space) > 0
            unique, codes = np.flatnonzero(present), (np.cumsum(present) - 1)[combined]
        else:
            unique, codes = np.unique(combined, return_inverse=True)
        rows = []
        for code in unique.tolist():
            at = []
            for d in reversed(dictionaries):
                code, i = divmod(code, len(d))
                at.append(i)
            rows.append(at[::-1])
    else:  # too many combinations for one int64: unique rows of the per-column indices
        stacked, codes = np.unique(np.stack(indices, axis=1), axis=0, return_inverse=True)
        rows = stacked.tolist()
    partitions = []
    for at in rows:
        values = [d[i] for d, i in zip(dictionaries, at, strict=True)]
        raw = {physical.get(c, c): v for c, v in zip(columns, values, strict=True)}
        key = partition_key(raw, columns, physical)
        partitions.append((key, tuple((c, raw.get(physical.get(c, c))) for c in columns)))
    return np.asarray(codes, dtype=np.int64).reshape(n), partitions


def file_columns(
    snapshot: Any, physical: Mapping[str, str], row_counts: bool = True
) -> tuple[Any, list[Any], Any, Any | None, Any]:
    """The active files as columns for `summarize_columns`: partition codes, (key, values) per code, sizes,
    `numRecords` (-1: none; None: not read) and rows deleted by deletion vectors, each from its Arrow column
    in one pass (`partition_codes`, `record_counts`). Without `row_counts` the checkpoint's stats are read
    only when a file has a deletion vector (its deleted-rows ratio needs `numRecords`)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    table = snapshot.state.files.adds  # checkpoint rows' stats may be unread (`LocalEngine.lazy_stats_bytes`)
    n = table.num_rows
    columns = snapshot.partition_columns
    sizes = table.column("size").fill_null(0).to_numpy()
    dv = table.column("deletionVector")
    if pa.types.is_struct(dv.type) and dv.type.get_field_index("cardinality") >= 0:
        dv_rows = pc.struct_field(dv, "cardinality").fill_null(0).to_numpy()
    else:
        dv_rows = np.zeros(n, dtype=np.int64)
    records = None
    if row_counts or bool(np.any(dv_rows > 0)):
        records = record_counts(snapshot.add_files_table.column("stats"))  # same rows, stats read
    if not columns or n == 0:
        return np.zeros(n, dtype=np.int64), [("", ())], sizes, records, dv_rows
    codes, partitions = partition_codes(table.column("partitionValues").combine_chunks(), columns, physical)
    return codes, partitions, sizes, records, dv_rows


def dv_file_size(dv: Mapping[str, Any]) -> int:
    """A DV file's size from its descriptor: the version byte up to `offset`, then the DV's 4-byte length, its
    `sizeInBytes` and a 4-byte checksum (PROTOCOL.md "Deletion Vector Format"); a file holding more DVs is larger."""
    return (dv.get("offset") or 0) + 4 + (dv.get("sizeInBytes") or 0) + 4


def removed_files(snapshot: Any, physical: Mapping[str, str], vacuumed: Vacuumed | None = None) -> list[Tombstone]:
    """One entry per file VACUUM may delete once its tombstones expire: a removed path still active (a deletion
    vector update removes and re-adds it) is none; a path removed twice counts once, at its latest removal;
    the DV files of removed files count too, when no active file uses them. A tombstone the last completed
    VACUUM already deleted (`vacuumed`) is none: tombstones stay in the log after their file is gone. From the
    Arrow columns: the live paths by `active_set`, the removes' partition keys coded once per partition
    (`partition_codes`), paths matching `SIMPLE_PATH_PATTERN` taken as their own relative form; only the
    others and the DV descriptors are normalized one by one."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    root = snapshot.table
    table = snapshot.remove_files_table
    n = table.num_rows
    if n == 0:
        return []  # nothing removed: no set of live paths to build
    live = active_set(snapshot, table_root=root)  # paths and deletion vectors: the stats are not needed
    columns = snapshot.partition_columns
    if columns:
        codes, partitions = partition_codes(table.column("partitionValues").combine_chunks(), columns, physical)
        names = [key for key, _ in partitions]
        keys = [names[c] for c in codes.tolist()]
    else:
        keys = [""] * n
    paths = table.column("path")
    rels: list[str | None] = paths.to_pylist()
    simple = pc.match_substring_regex(paths, f"^(?:{SIMPLE_PATH_PATTERN})$").fill_null(False)
    for i in np.flatnonzero(~simple.to_numpy(zero_copy_only=False)).tolist():
        path = rels[i]
        rels[i] = None if path is None else relative_to_root(path, root)
    sizes = table.column("size").fill_null(0).to_numpy().tolist()
    stamps = table.column("deletionTimestamp").fill_null(0).to_numpy().tolist()
    deleted = None if vacuumed is None else vacuumed.deleted
    found: dict[str, tuple[str, int, int]] = {}

    def keep(rel: str | None, key: str, size: int, ts: int) -> None:
        if rel is None or rel in live or (deleted is not None and deleted(rel, ts)):
            return
        seen = found.get(rel)
        found[rel] = (key, size, ts) if seen is None else (key, max(size, seen[1]), max(ts, seen[2]))

    for rel, key, size, ts in zip(rels, keys, sizes, stamps, strict=True):
        keep(rel, key, size, ts)
    dv = table.column("deletionVector")
    with_file = pc.is_in(pc.struct_field(dv, "storageType"), value_set=pa.array(["u", "p"])).fill_null(False)
    rows = np.flatnonzero(with_file.to_numpy(zero_copy_only=False)).tolist()
    if rows:  # the DV files of removed files, in row order (no DV file is also a data file)
        for i, d in zip(rows, pc.take(dv, rows).to_pylist(), strict=True):
            for dv_rel in protected_from_logged([], [(d["storageType"], d["pathOrInlineDv"])], table_root=root):
                keep(dv_rel, keys[i], dv_file_size(d), stamps[i])
    return [Tombstone(key, size, ts) for key, size, ts in found.values()]
