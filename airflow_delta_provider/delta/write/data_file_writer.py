"""New data files: rows in the table's physical schema encoded as Parquet a row group at a time
(`DataFileWriter`), each file's footer checked against the table schema before it is written once under a
fresh name (`write_new`: a crash leaves at most an untracked file for VACUUM), its `add` carrying Delta's
statistics (PROTOCOL.md "Add File and Remove File", "Per-file Statistics"). What OPTIMIZE's compaction
(`data_files.compact_bin_files`) and Z-ORDER write through; reading and casting the inputs is
`data_files`'s.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import StorageError
from ..protocol.actions import AddFile, decode_path
from .file_schema import check_file_schema, shredding_allowed
from .stats import StatsCollector

if TYPE_CHECKING:  # pragma: no cover
    from ..protocol.optimize import Bin
    from ..storage import LogStore
    from .data_files import TableLayout

#: Delta Spark's and delta-rs's default codec for data files.
COMPRESSION = "snappy"


def new_file_name() -> str:
    """A fresh data file name as Delta Spark spells it (unique: never written over)."""
    return f"part-00000-{uuid.uuid4()}-c000.{COMPRESSION}.parquet"


#: A new file's rows are encoded a row group at a time: at most this many rows (pyarrow's default) ...
ROW_GROUP_ROWS = 1024 * 1024
#: ... and about this many decoded bytes, so a rewrite holds one row group, never a whole bin.
ROW_GROUP_BYTES = 64 * 1024 * 1024
#: Buffered batches are copied into one contiguous table (in `REWRITE_POOL`) every this many: a bin of many
#: small files otherwise keeps a row group as thousands of small buffers scattered over the reader's pool
#: pages, which the reader cannot reuse for the next files. A copy of the decoded rows, once (~1 ms per 10
#: MiB); the 2,000-file OPTIMIZE benchmark's peak RSS 215-222 -> 195-199 MiB (system pool), same CPU.
PACK_BATCHES = 8

#: A primitive column is dictionary-encoded unless more than this share of the first `DICTIONARY_SAMPLE_ROWS`
#: rows of its first row group are distinct: a near-unique column's dictionary is built and then dropped
#: (Parquet falls back to plain at 1 MiB), which took a third of the encoding's time and most of its memory.
DICTIONARY_MAX_DISTINCT = 0.9
DICTIONARY_SAMPLE_ROWS = 16 * 1024


#: Parquet as Delta readers expect it: int64 microsecond timestamps (never INT96 or ns).
_PARQUET_OPTIONS: dict[str, Any] = {
    "compression": COMPRESSION,
    "coerce_timestamps": "us",
    "allow_truncated_timestamps": True,
    "use_deprecated_int96_timestamps": False,
}


def leaf_paths(name: str, type_: pa.DataType) -> list[str]:
    """The Parquet leaf paths of an Arrow column as pyarrow writes it (`st.x`, `arr.list.element`,
    `m.key_value.key`): what `use_dictionary` and `write_statistics` name."""
    if pa.types.is_struct(type_):
        return [p for f in type_ for p in leaf_paths(f"{name}.{f.name}", f.type)]
    if pa.types.is_map(type_):
        return [
            *leaf_paths(f"{name}.key_value.key", type_.key_type),
            *leaf_paths(f"{name}.key_value.value", type_.item_type),
        ]
    if pa.types.is_list(type_) or pa.types.is_large_list(type_) or pa.types.is_fixed_size_list(type_):
        # "element" whatever the Arrow field is called: pyarrow writes Parquet's compliant nested type
        return leaf_paths(f"{name}.list.element", type_.value_type)
    return [name]


def dictionary_columns(rows: pa.Table) -> list[str]:
    """The Parquet leaf paths worth dictionary-encoding, judged on `rows` (a first row group): every leaf
    of a nested column, and a primitive column unless its sample is nearly all distinct values
    (`DICTIONARY_MAX_DISTINCT`)."""
    wanted: list[str] = []
    for field, column in zip(rows.schema, rows.columns, strict=True):
        leaves = leaf_paths(field.name, field.type)
        if pa.types.is_nested(field.type) or pa.types.is_dictionary(field.type):
            wanted.extend(leaves)
            continue
        sample = column.slice(0, DICTIONARY_SAMPLE_ROWS)
        try:  # the distinct non-null values (as `count_distinct`, which takes ~1.5x as long)
            distinct = len(pc.unique(sample)) - (1 if sample.null_count else 0)
        except pa.ArrowNotImplementedError:  # a type without a hash kernel: Parquet's default
            distinct = 0
        if distinct <= DICTIONARY_MAX_DISTINCT * len(sample):
            wanted.extend(leaves)
    return wanted


class DataFileWriter:
    """New data files of `bin_`'s partition, their rows given as they are read (`write`) and encoded a row
    group at a time (`ROW_GROUP_ROWS`, `ROW_GROUP_BYTES`) into memory, each file's stats folded per row group.
    With `target_size`, a file whose encoded bytes reach it is finished and the next rows go to a new one, as
    Delta's and delta-rs's writers roll files (the size estimated from the encoded/decoded ratio of the row
    groups written so far). Each file's footer is checked against the table schema, then it is written once
    under a fresh name (`write_new`); `close` returns their `add`s (none: no row). Rows must be in the
    physical schema (`physical_table`). With `stores`, a finished file (its footer checked here) is written
    by that `BackgroundStores` while the next rows are read and encoded (`close_deferred`)."""

    def __init__(
        self,
        store: LogStore,
        layout: TableLayout,
        bin_: Bin,
        prefix: str,
        now_ms: Callable[[], int],
        what: str,
        *,
        target_size: int | None = None,
        stores: BackgroundStores | None = None,
    ) -> None:
        self.store = store
        self.layout = layout
        self.bin = bin_
        self.prefix = prefix
        self.now_ms = now_ms
        self.what = what
        self.target_size = target_size
        self.stores = stores
        #: the files finished so far (written, or being written by `stores`)
        self.files: list[Future[AddFile]] = []
        self._pending: list[pa.Table] = []
        self._pending_rows = self._pending_bytes = 0
        self._packed = 0  # how many of `_pending` are already packed
        self.schema: pa.Schema | None = None
        self._encoded = self._decoded = 0  # over the row groups written: what the size estimate scales by
        self._start_file()

    def _start_file(self) -> None:
        self.stats = StatsCollector(
            self.layout.schema,
            self.layout.configuration,
            self.layout.partition_columns,
            tight_bounds=self.layout.tight_bounds,
        )
        self._sink = pa.BufferOutputStream(REWRITE_POOL)
        self._writer: pq.ParquetWriter | None = None

    def _estimated_size(self) -> int:
        """The current file's size once the pending rows are encoded (ratio 1 before any row group)."""
        ratio = self._encoded / self._decoded if self._decoded else 1.0
        return self._sink.tell() + int(self._pending_bytes * ratio)

    def write(self, rows: pa.Table) -> None:
        """Buffer `rows`; a full row group is encoded, and a file at the target size finished."""
        if self.schema is None:
            self.schema = rows.schema
        elif not rows.schema.equals(self.schema, check_metadata=False):  # as concatenating them would
            raise pa.ArrowInvalid(f"rows of schema {rows.schema} do not match the file's {self.schema}")
        if not rows.num_rows:
            return
        self._pending.append(rows)
        self._pending_rows += rows.num_rows
        self._pending_bytes += rows.nbytes
        if len(self._pending) - self._packed >= PACK_BATCHES:
            self._pack()
        if self.target_size is not None and self._estimated_size() >= self.target_size:
            guessed = not self._decoded  # no row group yet: the estimate took encoded = decoded
            self._flush()
            if not guessed or self._sink.tell() >= self.target_size:
                self._finish_file()
        elif self._pending_rows >= ROW_GROUP_ROWS or self._pending_bytes >= ROW_GROUP_BYTES:
            self._flush()
            if self.target_size is not None and self._sink.tell() >= self.target_size:
                self._finish_file()

    def _pack(self) -> None:
        """The batches buffered since the last pack as one contiguous table in `REWRITE_POOL`."""
        loose = self._pending[self._packed :]
        packed = pa.concat_tables(loose).combine_chunks(memory_pool=REWRITE_POOL)
        self._pending[self._packed :] = [packed]
        self._packed += 1

    def _flush(self) -> None:
        self._packed = 0
        if not self._pending:
            return
        group = pa.concat_tables(self._pending) if len(self._pending) > 1 else self._pending[0]
        self._pending, self._pending_rows, self._pending_bytes = [], 0, 0
        if self._writer is None:
            self._writer = pq.ParquetWriter(
                self._sink,
                group.schema,
                use_dictionary=dictionary_columns(group),
                memory_pool=REWRITE_POOL,
                **_PARQUET_OPTIONS,
            )
        self.stats.add(group)
        before = self._sink.tell()
        self._writer.write_table(group, row_group_size=ROW_GROUP_ROWS)
        self._encoded += self._sink.tell() - before
        self._decoded += group.nbytes
        del group

    def _finish_file(self) -> None:
        """Write the current file (its footer checked first) and start the next."""
        if self._writer is None:
            return
        self._writer.close()
        payload = self._sink.getvalue()
        self._sink = pa.BufferOutputStream()
        rel = _checked_name(self.layout, payload, self.prefix)
        write = _FileWrite(self.store, self.layout, self.bin, payload, self.stats.json(), rel, self.now_ms, self.what)
        del payload
        if self.stores is None:
            done: Future[AddFile] = Future()
            done.set_result(write())
            self.files.append(done)
        else:
            self.files.append(self.stores.submit(write))
        del write
        self._start_file()

    def close_deferred(self) -> list[Future[AddFile]]:
        """The pending rows written; every file's `add`, in order, once it is written (none: no row was)."""
        self._flush()
        self._finish_file()
        return self.files

    def close(self) -> list[AddFile]:
        """The pending rows written; the `add` of every file written, in order (empty when no row was)."""
        return [f.result() for f in self.close_deferred()]


def _checked_name(layout: TableLayout, payload: pa.Buffer, prefix: str) -> str:
    """A fresh name under `prefix` for `payload`, once its footer holds the table schema (else raises)."""
    rel = f"{prefix}/{new_file_name()}" if prefix else new_file_name()
    check_file_schema(
        pq.read_schema(pa.BufferReader(payload)),  # the footer: what readers will see
        layout.schema,
        column_mapping_mode=layout.column_mapping_mode,
        partition_columns=layout.partition_columns,
        allow_shredded_variants=shredding_allowed(layout.configuration),
        table=layout.table_uri,
        version=layout.version,
        file=rel,
        note="; the file was not written",
    )
    return rel


@dataclass
class _FileWrite:
    """A checked file's one write under `rel` (`write_new`), returning its `add`; its bytes are dropped once
    it ran."""

    store: LogStore
    layout: TableLayout
    bin: Bin
    payload: pa.Buffer | None
    stats: str
    rel: str
    now_ms: Callable[[], int]
    what: str

    @property
    def size(self) -> int:
        return self.payload.size if self.payload is not None else 0

    def __call__(self) -> AddFile:
        payload, self.payload = self.payload, None
        assert payload is not None, "a file is written once"
        store, table = self.store, self.layout.table_uri
        try:
            store.write_new(store.join(table, *decode_path(self.rel).split("/")), memoryview(payload))  # type: ignore[arg-type]  # bytes-like, no copy
        except OSError as exc:
            raise StorageError(
                f"Cannot write {self.what} file: {type(exc).__name__}: {exc}",
                table=table,
                file=self.rel,
                transient=not isinstance(exc, PermissionError | FileExistsError),
            ) from exc
        return AddFile(
            path=self.rel,
            partition_values=dict(self.bin.partition_values),
            size=payload.size,
            modification_time=self.now_ms(),
            data_change=False,
            stats=self.stats,
        )


#: Encoded bytes a `BackgroundStores` holds at most (waiting or being written); a larger file is written by
#: the thread that encoded it, as without one, so a rewrite never holds two such files.
STORE_AHEAD_BYTES = 32 * 1024 * 1024


class BackgroundStores:
    """Finished data files written (`write_new`) on one background thread while the threads that encoded them
    read and encode the next: storage latency (a local fsync, an object store's PUT) overlaps CPU work
    instead of idling a core. At most `max_bytes` of encoded files are held for it (the caller waits for
    room); a file larger than that is written by its caller once nothing is in flight. Once a write failed,
    `submit` raises its error. Exiting the context waits for every write.

    Measured on an object store (`bench/optimize_bench.py --s3-stores`: the 2,000-file, 202 MiB compaction,
    20 files of ~10 MiB PUT to moto's S3 server on loopback, interleaved whole-process runs), quiet (load1
    1.0-1.5), 4 runs each: wall 25.1, 26.4, 26.9, 27.0 s with it vs 33.7, 29.0, 28.3, 25.8 s with each file
    written by its bin thread (medians 26.6 vs 28.7 s, 0.93x; noisy: one run without it was the fastest);
    at load 8-18, 3 runs each: 50.0-50.6 vs 50.7-62.1 s. CPU within the same noise (19-20 vs 19-24 s).
    On local disk no wall benefit was measured (`engines.local.local_bin_rewriter`).
    """

    def __init__(self, max_bytes: int = STORE_AHEAD_BYTES) -> None:
        self.max_bytes = max_bytes
        self._held = 0
        self._failed: BaseException | None = None
        self._cond = threading.Condition()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="delta-store")

    def __enter__(self) -> BackgroundStores:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(wait=True)

    def submit(self, write: _FileWrite) -> Future[AddFile]:
        """`write` run in the background once its bytes fit (in this thread when they never would)."""
        size = write.size
        alone = size > self.max_bytes
        with self._cond:
            while self._failed is None and self._held and (alone or self._held + size > self.max_bytes):
                self._cond.wait()
            if self._failed is not None:
                raise self._failed
            if not alone:
                self._held += size
        if alone:
            done: Future[AddFile] = Future()
            done.set_result(write())
            return done
        return self._pool.submit(self._run, write, size)

    def _run(self, write: _FileWrite, size: int) -> AddFile:
        try:
            return write()
        except BaseException as exc:
            with self._cond:
                self._failed = self._failed or exc
            raise
        finally:
            with self._cond:
                self._held -= size
                self._cond.notify_all()


#: The pool a rewrite's packed rows, encoding and output buffer allocate from: the system allocator (reads
#: decode into pyarrow's default pool: `ParquetFile` takes none). Measured on the 2,000-file OPTIMIZE
#: benchmark (peak RSS, 4 runs each): system 197-203 MiB; jemalloc 198-207; jemalloc after each row group
#: `release_unused()` 191-206; jemalloc with `jemalloc_set_decay_ms(0)` 185-187, but that setting is
#: process-wide for jemalloc, which the library's own pool uses too (`read.arrow_memory.POOL`): it made a
#: 1M-file load's CPU ~15% higher (medians 1.08 vs 0.91 s of 6 runs), so it is not set here.
REWRITE_POOL = pa.system_memory_pool()
