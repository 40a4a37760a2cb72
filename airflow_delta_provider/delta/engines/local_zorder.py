"""The local engine's ZORDER executor: each partition read whole, sorted by its z-order key and cut into
files of about the target size (rules: `protocol.zorder`; file checks and encoding: `write.data_files`).

A partition is sorted in memory, so every bin is checked against the memory limit before any file is read
or written: one whose estimate is over it is refused with a `ResourceLimitError` naming the Spark engine,
never left to run the worker out of memory. Partitions run concurrently only as far as the limit allows.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import LogCorruptedError, ResourceLimitError, StorageError
from ..protocol.actions import AddFile, decode_path
from ..protocol.zorder import ZOrderColumn, output_count, row_slices, zorder_key
from ..read.deletion_vectors import read_data_file
from ..write.data_files import encode_parquet, new_file_name, output_dir, physical_table
from ..write.file_schema import check_file_schema, shredding_allowed
from ..write.stats import stats_json

if TYPE_CHECKING:  # pragma: no cover
    from ..protocol.optimize import Bin
    from ..storage import LogStore
    from ..write.data_files import TableLayout
    from . import ZOrderRewriter

#: Bytes of memory a partition's sort is assumed to need per byte of its Parquet files: the decoded rows
#: twice (read, then sorted) at up to ~3x Parquet's compression, plus one output file's encoding. Measured
#: peaks (`tests/delta/test_zorder.py`, pyarrow's pool) stay under it.
MEMORY_FACTOR = 8


def memory_needed(bin_: Bin) -> int:
    """The bytes sorting `bin_` in this process is assumed to need."""
    return MEMORY_FACTOR * bin_.num_bytes


def _materialized(data: pa.Table, layout: TableLayout) -> bool:
    """Whether a file carries a partition column (a writer materializing them)."""
    keys = {k.casefold() for k in (*layout.partition_columns, *layout.partition_keys)}
    return any(name.casefold() in keys for name in data.schema.names)


def _values(data: pa.Table, path: Sequence[str]) -> pa.Array:
    """The column at `path` (physical names; nested through structs)."""
    array = data.column(path[0]).combine_chunks()
    for name in path[1:]:
        array = pc.struct_field(array, name)  # a null parent gives a null child
    return array


def zorder_bin(
    store: LogStore,
    layout: TableLayout,
    bin_: Bin,
    columns: Sequence[ZOrderColumn],
    *,
    target_size: int,
    now_ms: Callable[[], int],
) -> list[AddFile]:
    """Rewrite every file of `bin_` (one partition) sorted by the z-order key of `columns`, as files of about
    `target_size` (`dataChange=false`; none when deletion vectors deleted every row).

    :raises LogCorruptedError: an input unreadable, or not holding the table's schema (named).
    :raises SchemaMismatchError: a new file's footer does not hold the table schema (that file not written).
    :raises StorageError: a new file could not be written.
    """
    table = layout.table_uri
    read = [(f, read_data_file(store, table, f)) for f in bin_.files]
    in_files = bool(layout.partition_columns) and any(_materialized(data, layout) for _, data in read)
    tables = [
        physical_table(
            data, layout, partition_values=bin_.partition_values, partition_columns_in_files=in_files, file=f.path
        )
        for f, data in read
    ]
    del read
    try:
        data = pa.concat_tables(tables)
        del tables
        if data.num_rows == 0:
            return []
        order = pc.sort_indices(zorder_key([_values(data, c.physical_path) for c in columns]))
        data = data.take(order)  # the only copy of the rows from here on
        del order
    except pa.ArrowException as exc:
        raise LogCorruptedError(
            f"Cannot sort the {len(bin_.files)} files of partition {bin_.partition or '(unpartitioned)'} by "
            f"their z-order: {type(exc).__name__}: {exc}",
            table=table,
            file=bin_.files[0].path,
        ) from None
    prefix = output_dir(bin_, layout.partition_keys)
    added = []
    for offset, length in row_slices(data.num_rows, output_count(bin_.num_bytes, target_size)):
        rows = data.slice(offset, length)
        stats = stats_json(
            rows, layout.schema, layout.configuration, layout.partition_columns, tight_bounds=layout.tight_bounds
        )
        payload = encode_parquet(rows)
        rel = f"{prefix}/{new_file_name()}" if prefix else new_file_name()
        check_file_schema(
            pq.read_schema(pa.BufferReader(payload)),
            layout.schema,
            column_mapping_mode=layout.column_mapping_mode,
            partition_columns=layout.partition_columns,
            allow_shredded_variants=shredding_allowed(layout.configuration),
            table=table,
            version=layout.version,
            file=rel,
            note="; the file was not written",
        )
        try:
            store.write_new(store.join(table, *decode_path(rel).split("/")), payload)
        except OSError as exc:
            raise StorageError(
                f"Cannot write z-ordered file: {type(exc).__name__}: {exc}",
                table=table,
                file=rel,
                transient=not isinstance(exc, PermissionError | FileExistsError),
            ) from exc
        added.append(
            AddFile(
                path=rel,
                partition_values=dict(bin_.partition_values),
                size=len(payload),
                modification_time=now_ms(),
                data_change=False,
                stats=stats,
            )
        )
    return added


def local_zorder_rewriter(max_workers: int | None = None, memory_limit_bytes: int | None = None) -> ZOrderRewriter:
    """Partitions on a thread pool of at most `max_workers`, and no more at once than the memory limit holds
    for the largest; a partition over the limit alone is refused before anything is read."""

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
        largest = max(bins, key=memory_needed)
        workers = max_workers or min(len(bins), os.cpu_count() or 1)
        if memory_limit_bytes is not None:
            needed = memory_needed(largest)
            if needed > memory_limit_bytes:
                mib = 1024 * 1024
                raise ResourceLimitError(
                    f"ZORDER sorts a partition in memory: partition {largest.partition or '(unpartitioned)'} "
                    f"({largest.num_bytes / mib:,.0f} MiB in {len(largest.files)} files) needs about "
                    f"{needed / mib:,.0f} MiB, over the local engine's memory limit of "
                    f"{memory_limit_bytes / mib:,.0f} MiB. Use the Spark engine (engine='spark', --engine "
                    "spark), select fewer partitions with where, or raise LocalEngine(memory_limit_bytes=...)",
                    table=layout.table_uri,
                    version=layout.version,
                    file=largest.files[0].path,
                )
            workers = max(1, min(workers, memory_limit_bytes // max(1, needed)))

        def one(b: Bin) -> list[AddFile]:
            return zorder_bin(store, layout, b, columns, target_size=target_size, now_ms=clock)

        if workers <= 1 or len(bins) == 1:
            return [one(b) for b in bins]
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="zorder") as pool:
            futures = [pool.submit(one, b) for b in bins]
            try:
                return [f.result() for f in futures]
            finally:
                for f in futures:
                    f.cancel()

    return run
