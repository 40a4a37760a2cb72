"""The local engine's ZORDER executor: each partition's rows sorted by their z-order key and cut into
files of about the target size (rules: `protocol.zorder`; file checks and encoding: `write.data_files`).

A partition is held to the memory limit twice: before anything is read, on its files' bytes (decoded rows
are never smaller than their Parquet); while its files are read, on the decoded rows (which a
dictionary-encoded column can make 100x the file). Over it, the partition is sorted through spill files
instead (`_zorder_spilled`), which holds only its z-columns' keys, one input and one output file; when even
the keys would not fit, a `ResourceLimitError` names the Spark engine before any file is written, never
leaving the worker to run out of memory. Partitions run concurrently only as far as the limit allows;
the cores that leaves idle help each partition (`zorder_bin`'s `threads`: its files read ahead within its
share, its key and its output files computed on them), the files written being the same.
"""

from __future__ import annotations

import itertools
import os
import tempfile
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import LogCorruptedError, ResourceLimitError
from ..protocol.actions import AddFile
from ..protocol.zorder import ZOrderColumn, output_count, row_slices, u64_scalar, zorder_key
from ..write.data_file_writer import REWRITE_POOL
from ..write.data_files import has_partition_columns, iter_file_rows, output_dir, physical_table, write_data_file
from . import map_in_order, pool_workers, run_pooled

if TYPE_CHECKING:  # pragma: no cover
    from ..protocol.optimize import Bin
    from ..storage import LogStore
    from ..write.data_files import TableLayout
    from . import ZOrderRewriter

#: A partition's rows are read file by file into pyarrow's default pool (`ParquetFile` takes no other) and
#: copied, this many decoded bytes at a time, into `REWRITE_POOL` (the system allocator, which returns what
#: is freed): the reader's pool then reuses the same pages for the next files, and a sort's copies are
#: freed back to the OS. On `bench/zorder_bench.py`'s 2M rows (this with `_one_chunk` and gathering each
#: output file's rows as it is written): peak RSS 432-440 -> 324-340 MiB; 4 MiB blocks 358-391, 64 MiB 352-355.
BLOCK_BYTES = 16 * 1024 * 1024

#: Copies of a partition's decoded rows its sort is allowed: it holds them once (plus one column twice, as
#: columns are sorted one at a time) and one output file's encoding, bounded by the target size.
MEMORY_FACTOR = 2


def memory_needed(bin_: Bin) -> int:
    """The least memory sorting `bin_` needs: its rows decoded twice, decoded rows no smaller than the files."""
    return MEMORY_FACTOR * bin_.num_bytes


def _over_limit(layout: TableLayout, bin_: Bin, needed: int, limit: int, what: str) -> ResourceLimitError:
    mib = 1024 * 1024
    return ResourceLimitError(
        f"ZORDER of partition {bin_.partition or '(unpartitioned)'} ({bin_.num_bytes / mib:,.1f} MiB in "
        f"{len(bin_.files)} files) needs {what} {needed / mib:,.1f} MiB in this process, "
        f"over the {limit / mib:,.1f} MiB the local engine's memory limit leaves it. Use the Spark engine "
        "(engine='spark', --engine spark), select fewer partitions with where, or raise "
        "LocalEngine(memory_limit_bytes=...); no file was written for it",
        table=layout.table_uri,
        version=layout.version,
        file=bin_.files[0].path,
    )


def _values(data: pa.Table, path: Sequence[str]) -> pa.Array:
    """The column at `path` (physical names; nested through structs)."""
    array = data.column(path[0]).combine_chunks()
    for name in path[1:]:
        array = pc.struct_field(array, name)  # a null parent gives a null child
    return array


def _read(store: LogStore, layout: TableLayout, bin_: Bin, f: AddFile, in_files: bool) -> tuple[pa.Table, bool]:
    """A file's rows through its deletion vector, in the table's physical schema (read and cast a batch at a
    time, in this thread: partitions run on the pool); and whether the file carries a partition column (a
    writer materializing them: the output keeps them, as compaction's does)."""
    values, table = bin_.partition_values, layout.table_uri
    batches, carries = [], False
    for rows in iter_file_rows(store, table, f):
        if not batches:  # once per file: its batches share its schema
            carries = has_partition_columns(rows.schema, layout)
        batches.append(
            physical_table(rows, layout, partition_values=values, partition_columns_in_files=in_files, file=f.path)
        )
    return (batches[0] if len(batches) == 1 else pa.concat_tables(batches)), carries


def _sort_failed(layout: TableLayout, bin_: Bin, exc: Exception) -> LogCorruptedError:
    return LogCorruptedError(
        f"Cannot sort the {len(bin_.files)} files of partition {bin_.partition or '(unpartitioned)'} by "
        f"their z-order: {type(exc).__name__}: {exc}",
        table=layout.table_uri,
        file=bin_.files[0].path,
    )


def _write(store: LogStore, layout: TableLayout, bin_: Bin, rows: pa.Table, now_ms: Callable[[], int]) -> AddFile:
    """`rows` as one new file of the partition (`write_data_file`: its footer checked first)."""
    return write_data_file(store, layout, bin_, rows, output_dir(bin_, layout.partition_keys), now_ms, "z-ordered")


def _by_column(held: list[pa.Table], convert: Callable[[pa.ChunkedArray], pa.ChunkedArray]) -> pa.Table:
    """The one table in `held` with `convert` applied to each column, a column at a time: taken out of `held`
    (the caller keeps no other reference), so one column is held twice, never all the rows."""
    data = held.pop()
    schema, columns = data.schema, data.columns
    del data
    for i, column in enumerate(columns):
        columns[i] = convert(column)
        del column
    return pa.Table.from_arrays(columns, schema=schema)


def _one_chunk(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """`column` in one chunk (fast to gather from), in `REWRITE_POOL`."""
    if column.num_chunks == 1:
        return column
    return pa.chunked_array([pa.concat_arrays(column.chunks, memory_pool=REWRITE_POOL)], column.type)


#: Input files a partition reads ahead of the one it is adding, on its helper threads (in order): the next
#: files' reads and Parquet decoding (which release the GIL) overlap this one's. Only as far as the share
#: holds them beside the rows read so far: a file read ahead counts as its bytes times the decoded/file ratio
#: seen so far (at least 1), and none is read ahead when that would pass the share.
READ_AHEAD_FILES = 4


@contextmanager
def _helper_pool(threads: int) -> Iterator[ThreadPoolExecutor | None]:
    """A partition's helper threads (None for one: everything runs in the caller), the caller taking their
    results in order (`map_in_order`). Leaving cancels what has not started and waits for the rest."""
    if threads <= 1:
        yield None
        return
    pool = ThreadPoolExecutor(threads, "zorder-part")
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _read_rows(
    store: LogStore,
    layout: TableLayout,
    bin_: Bin,
    helpers: ThreadPoolExecutor | None,
    memory_limit: int | None,
) -> Iterator[tuple[pa.Table, bool]]:
    """Each input file's rows (`_read`, without partition columns) and whether it carries them, in order.
    With helper threads, the next files are read ahead on them while `MEMORY_FACTOR` times the decoded
    bytes handed out so far (what the caller holds) and those in flight still fits `memory_limit`; when
    even the next would not, it is read here, as without helpers (the caller's check on what it holds then
    decides, as always)."""
    files = bin_.files
    if helpers is None:  # nothing read ahead, nor held here once handed out
        for f in files:
            yield _read(store, layout, bin_, f, False)
        return
    ahead: deque[tuple[Future[tuple[pa.Table, bool]], AddFile, int]] = deque()
    read_bytes = decoded = 0  # of the files handed out: the ratio the next files' estimates scale by
    nxt = 0
    while nxt < len(files) or ahead:
        while nxt < len(files) and len(ahead) < READ_AHEAD_FILES:
            f = files[nxt]
            estimate = int(f.size * max(1.0, decoded / read_bytes if read_bytes else 1.0))
            if memory_limit is not None:
                in_flight = sum(e for _, _, e in ahead)
                if MEMORY_FACTOR * (decoded + in_flight + estimate) > memory_limit:
                    break
            ahead.append((helpers.submit(_read, store, layout, bin_, f, False), f, estimate))
            nxt += 1
        if ahead:
            future, f, _ = ahead.popleft()
            data, carries = future.result()
        else:  # nothing more fits beside what is held: the next file is read here, as without helpers
            f, nxt = files[nxt], nxt + 1
            data, carries = _read(store, layout, bin_, f, False)
        read_bytes, decoded = read_bytes + f.size, decoded + data.nbytes
        yield data, carries
        del data


def zorder_bin(
    store: LogStore,
    layout: TableLayout,
    bin_: Bin,
    columns: Sequence[ZOrderColumn],
    *,
    target_size: int,
    now_ms: Callable[[], int],
    memory_limit: int | None = None,
    threads: int = 1,
) -> list[AddFile]:
    """Rewrite every file of `bin_` (one partition) sorted by the z-order key of `columns`, as files of about
    `target_size` (`dataChange=false`; none when deletion vectors deleted every row). Rows that would not
    fit in `memory_limit` are sorted through spill files instead (`_zorder_spilled`).

    With `threads` > 1 the partition's work runs on that many threads, the same files coming out: its input
    files read ahead (`READ_AHEAD_FILES`, counted against `memory_limit`), its columns' ranks and key chunks
    at once (`zorder_key`), and its output files gathered, encoded and written `threads` at a time (each at
    most a `1/parts` slice of the rows, so two in flight never hold more than the rows' second copy
    `MEMORY_FACTOR` already counts; a lone output file is written alone).

    :raises LogCorruptedError: an input unreadable, or not holding the table's schema (named).
    :raises SchemaMismatchError: a new file's footer does not hold the table schema (that file not written).
    :raises StorageError: a new file could not be written.
    :raises ResourceLimitError: even the z-order keys would not fit in `memory_limit` (nothing written).
    """
    if memory_limit is None or memory_needed(bin_) <= memory_limit:
        with _helper_pool(threads) as helpers:
            sorted_ = _sort_in_memory(store, layout, bin_, columns, helpers, memory_limit)
            if sorted_ is not None:
                return _write_sorted(
                    store, layout, bin_, *sorted_, target_size=target_size, now_ms=now_ms, helpers=helpers
                )
    # over the share on the files' bytes, or once decoded (the helpers' reads stopped and waited for on leaving)
    assert memory_limit is not None
    return _zorder_spilled(store, layout, bin_, columns, target_size=target_size, now_ms=now_ms, limit=memory_limit)


def _sort_in_memory(
    store: LogStore,
    layout: TableLayout,
    bin_: Bin,
    columns: Sequence[ZOrderColumn],
    helpers: ThreadPoolExecutor | None,
    memory_limit: int | None,
) -> tuple[pa.Table, pa.Array] | None:
    """The partition's rows (one chunk per column) and their order by the z-order key; None when the
    decoded rows passed `memory_limit` (nothing written)."""
    in_files = False
    tables: list[pa.Table] = []  # blocks of rows copied into REWRITE_POOL, then the files read since
    blocks = pending = decoded = 0
    try:
        for data, carries in _read_rows(store, layout, bin_, helpers, memory_limit):
            if in_files:  # read without them: filled from the partition values, as the earlier files were
                values = bin_.partition_values
                data = physical_table(data, layout, partition_values=values, partition_columns_in_files=True)
            elif carries:
                in_files = True  # then every file's rows carry them (filled from partition values where absent)
                values = bin_.partition_values  # a partition's value is the same in every row
                tables = [
                    physical_table(t, layout, partition_values=values, partition_columns_in_files=True)
                    for t in [*tables, data]
                ]
            else:
                tables.append(data)
            del data
            decoded += tables[-1].nbytes
            pending += tables[-1].nbytes
            if memory_limit is not None and MEMORY_FACTOR * decoded > memory_limit:
                del tables
                return None
            if pending >= BLOCK_BYTES:  # the decoded files' buffers go back to the reader's pool to be reused
                tables[blocks:] = [pa.concat_tables(tables[blocks:]).combine_chunks(memory_pool=REWRITE_POOL)]
                blocks, pending = blocks + 1, 0
        data = pa.concat_tables(tables)
        del tables
        if data.num_rows == 0:
            return data, pa.nulls(0, pa.uint64())
        held = [data]
        del data
        data = _by_column(held, _one_chunk)  # before the key: its columns are then read without a copy
        key = zorder_key([_values(data, c.physical_path) for c in columns], partial(map_in_order, helpers))
        order = pc.sort_indices(key)
        del key
        pa.default_memory_pool().release_unused()  # the key's temporaries, before the files are written
    except pa.ArrowException as exc:
        raise _sort_failed(layout, bin_, exc) from None
    return data, order


def _write_sorted(
    store: LogStore,
    layout: TableLayout,
    bin_: Bin,
    data: pa.Table,
    order: pa.Array,
    *,
    target_size: int,
    now_ms: Callable[[], int],
    helpers: ThreadPoolExecutor | None,
) -> list[AddFile]:
    """`data` in `order`, cut into `row_slices` written as files in that order (`threads` at once); once one
    failed no later one starts, and the first failure in order is raised."""
    if data.num_rows == 0:
        return []
    slices = row_slices(data.num_rows, output_count(bin_.num_bytes, target_size))
    first_failed = [len(slices)]
    lock = threading.Lock()

    def one(i: int) -> AddFile:
        if first_failed[0] < i:
            raise _Skipped
        o, n = slices[i]
        try:
            try:  # each file's rows gathered as it is written: no sorted copy
                rows = data.take(order.slice(o, n))
            except pa.ArrowException as exc:
                raise _sort_failed(layout, bin_, exc) from None
            return _write(store, layout, bin_, rows, now_ms)
        except BaseException:
            with lock:
                first_failed[0] = min(first_failed[0], i)
            raise

    return map_in_order(helpers, one, range(len(slices)))


class _Skipped(Exception):
    """An output file not started because an earlier one failed (never raised to the caller: the earlier
    one's error is, in order)."""


#: Spill files a pass over a partition's files writes at once (one open stream per output file).
SPILL_STREAMS = 128
_KEY = "__zorder_key"


def _zorder_spilled(
    store: LogStore,
    layout: TableLayout,
    bin_: Bin,
    columns: Sequence[ZOrderColumn],
    *,
    target_size: int,
    now_ms: Callable[[], int],
    limit: int,
) -> list[AddFile]:
    """The same rewrite in bounded memory: a first pass over the files keeps only the z-columns and computes
    every row's key and output file (`row_slices` of the sorted order); later passes bucket each file's rows
    into one Arrow IPC spill stream per output file (at most `SPILL_STREAMS` at once, in a temporary
    directory); then each bucket, about one output file of rows, is sorted and written. Memory holds the
    z-columns, one input file and one output file; the files are read once per pass."""
    in_files = False
    values: list[list[pa.Array]] = [[] for _ in columns]
    counts: list[int] = []
    held = 0
    for f in bin_.files:
        data, carries = _read(store, layout, bin_, f, False)
        in_files = in_files or carries
        counts.append(data.num_rows)
        for i, c in enumerate(columns):
            values[i].append(_values(data, c.physical_path))
            held += values[i][-1].nbytes
        del data
        needed = MEMORY_FACTOR * (held + 32 * sum(counts))  # the keys, their order and each row's output file
        if needed > limit:
            raise _over_limit(layout, bin_, needed, limit, "for its z-order keys alone")
    total = sum(counts)
    if total == 0:
        return []
    parts = min(output_count(bin_.num_bytes, target_size), total)
    try:
        key = zorder_key([pa.chunked_array(v) for v in values])
        del values
        # each row's position in the sorted order (the inverse permutation), then its output file
        position = pc.sort_indices(pc.sort_indices(key)).cast(pa.uint64())
        target = pc.divide(pc.multiply(position, u64_scalar(parts)), u64_scalar(total))
        del position
    except pa.ArrowException as exc:
        raise _sort_failed(layout, bin_, exc) from None
    offsets = [0, *itertools.accumulate(counts)]
    added: list[AddFile] = []
    with tempfile.TemporaryDirectory(prefix="zorder-") as spill:
        for first in range(0, parts, SPILL_STREAMS):
            last = min(parts, first + SPILL_STREAMS)
            writers: dict[int, pa.ipc.RecordBatchStreamWriter] = {}
            sinks: list[pa.NativeFile] = []
            try:
                for j, f in enumerate(bin_.files):
                    lo, n = offsets[j], counts[j]
                    if not n:
                        continue
                    ids, keys = target.slice(lo, n), key.slice(lo, n)
                    wanted = pc.and_(pc.greater_equal(ids, u64_scalar(first)), pc.less(ids, u64_scalar(last)))
                    data = _read(store, layout, bin_, f, in_files)[0].append_column(_KEY, keys).filter(wanted)
                    ids = ids.filter(wanted)
                    order = pc.sort_indices(ids)
                    data, ids = data.take(order), ids.take(order)
                    start = 0
                    for run in pc.value_counts(ids):
                        s, count = run["values"].as_py(), run["counts"].as_py()
                        if s not in writers:
                            sinks.append(pa.OSFile(os.path.join(spill, f"{s}.arrows"), "wb"))
                            writers[s] = pa.ipc.new_stream(sinks[-1], data.schema)
                        writers[s].write_table(data.slice(start, count))
                        start += count
                    del data, ids
            except pa.ArrowException as exc:
                raise _sort_failed(layout, bin_, exc) from None
            finally:
                for w in writers.values():
                    w.close()
                for sink in sinks:
                    sink.close()
            for s in range(first, last):
                with pa.OSFile(os.path.join(spill, f"{s}.arrows"), "rb") as source:
                    rows = pa.ipc.open_stream(source).read_all()
                order = pc.sort_indices(rows.column(_KEY))
                held = [rows]
                del rows
                rows = _by_column(held, partial(pc.take, indices=order, memory_pool=REWRITE_POOL)).drop_columns([_KEY])
                added.append(_write(store, layout, bin_, rows, now_ms))
                os.remove(os.path.join(spill, f"{s}.arrows"))
    return added


def local_zorder_rewriter(max_workers: int | None = None, memory_limit_bytes: int | None = None) -> ZOrderRewriter:
    """Partitions on a thread pool of at most `max_workers` (default: one a core), no more at once than the
    memory limit holds for the largest, each within its share of the limit (sorted through spill files when
    over it). Threads the pool leaves unused help its partitions (`zorder_bin`'s `threads`): a partition
    alone on two cores reads, ranks and writes on both."""

    def run(
        layout: TableLayout,
        bins: Sequence[Bin],
        columns: Sequence[ZOrderColumn],
        *,
        target_size: int,
        store: LogStore,
        clock: Callable[[], int],
    ) -> list[list[AddFile]]:
        if not bins:
            return []
        cores = pool_workers(max_workers, 1 << 30)
        workers = pool_workers(max_workers, len(bins))
        share = None
        if memory_limit_bytes is not None:
            largest = memory_needed(max(bins, key=memory_needed))
            workers = max(1, min(workers, memory_limit_bytes // max(1, largest)))
            share = memory_limit_bytes // workers
        threads = max(1, cores // workers)

        def one(b: Bin) -> list[AddFile]:
            return zorder_bin(
                store,
                layout,
                b,
                columns,
                target_size=target_size,
                now_ms=clock,
                memory_limit=share,
                threads=threads,
            )

        return run_pooled(one, bins, workers, "zorder")

    return run
