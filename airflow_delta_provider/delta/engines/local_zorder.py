"""The local engine's ZORDER executor: each partition read whole, sorted by its z-order key and cut into
files of about the target size (rules: `protocol.zorder`; file checks and encoding: `write.data_files`).

A partition is sorted in memory, so it is held to the memory limit twice: before anything is read, on its
files' bytes (decoded rows are never smaller than their Parquet); while its files are read, on the decoded
rows (which a dictionary-encoded column can make 100x the file). Over it, a `ResourceLimitError` names the
Spark engine before any file is written, never leaving the worker to run out of memory. Partitions run
concurrently only as far as the limit allows, each within its share.
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

#: Copies of a partition's decoded rows its sort is allowed: it holds them once (plus one column twice, as
#: columns are sorted one at a time) and one output file's encoding, bounded by the target size.
MEMORY_FACTOR = 2


def memory_needed(bin_: Bin) -> int:
    """The least memory sorting `bin_` needs: its rows decoded twice, decoded rows no smaller than the files."""
    return MEMORY_FACTOR * bin_.num_bytes


def _over_limit(layout: TableLayout, bin_: Bin, needed: int, limit: int, what: str) -> ResourceLimitError:
    mib = 1024 * 1024
    return ResourceLimitError(
        f"ZORDER sorts a partition in memory: partition {bin_.partition or '(unpartitioned)'} "
        f"({bin_.num_bytes / mib:,.1f} MiB in {len(bin_.files)} files) needs {what} {needed / mib:,.1f} MiB, "
        f"over the {limit / mib:,.1f} MiB the local engine's memory limit leaves it. Use the Spark engine "
        "(engine='spark', --engine spark), select fewer partitions with where, or raise "
        "LocalEngine(memory_limit_bytes=...); no file was written for it",
        table=layout.table_uri,
        version=layout.version,
        file=bin_.files[0].path,
    )


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
    memory_limit: int | None = None,
) -> list[AddFile]:
    """Rewrite every file of `bin_` (one partition) sorted by the z-order key of `columns`, as files of about
    `target_size` (`dataChange=false`; none when deletion vectors deleted every row).

    :raises LogCorruptedError: an input unreadable, or not holding the table's schema (named).
    :raises SchemaMismatchError: a new file's footer does not hold the table schema (that file not written).
    :raises StorageError: a new file could not be written.
    :raises ResourceLimitError: the decoded rows, twice, would not fit in `memory_limit` (nothing written).
    """
    table = layout.table_uri
    in_files = False
    tables: list[pa.Table] = []
    decoded = 0
    for f in bin_.files:
        data = read_data_file(store, table, f)
        if layout.partition_columns and not in_files and _materialized(data, layout):
            in_files = True  # then every file's rows carry them (filled from partition values where absent)
            values = bin_.partition_values
            tables = [
                physical_table(t, layout, partition_values=values, partition_columns_in_files=True) for t in tables
            ]
        tables.append(
            physical_table(
                data, layout, partition_values=bin_.partition_values, partition_columns_in_files=in_files, file=f.path
            )
        )
        del data
        decoded += tables[-1].nbytes
        if memory_limit is not None and MEMORY_FACTOR * decoded > memory_limit:
            raise _over_limit(layout, bin_, MEMORY_FACTOR * decoded, memory_limit, "at least")
    try:
        data = pa.concat_tables(tables)
        del tables
        if data.num_rows == 0:
            return []
        order = pc.sort_indices(zorder_key([_values(data, c.physical_path) for c in columns]))
        schema, unsorted = data.schema, data.columns
        del data
        for i, column in enumerate(unsorted):  # a column at a time: one column held twice, never the rows
            unsorted[i] = column.take(order)
            del column
        data = pa.Table.from_arrays(unsorted, schema=schema)
        del order, unsorted
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
    """Partitions on a thread pool of at most `max_workers`, no more at once than the memory limit holds for
    the largest, each within its share of the limit; a partition over it alone is refused before any is read."""

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
        workers = min(len(bins), max_workers or os.cpu_count() or 1)
        share = None
        if memory_limit_bytes is not None:
            largest = max(bins, key=memory_needed)
            if memory_needed(largest) > memory_limit_bytes:
                raise _over_limit(layout, largest, memory_needed(largest), memory_limit_bytes, "at least")
            workers = max(1, min(workers, memory_limit_bytes // max(1, memory_needed(largest))))
            share = memory_limit_bytes // workers

        def one(b: Bin) -> list[AddFile]:
            return zorder_bin(store, layout, b, columns, target_size=target_size, now_ms=clock, memory_limit=share)

        if workers == 1:
            return [one(b) for b in bins]
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="zorder") as pool:
            futures = [pool.submit(one, b) for b in bins]
            try:
                return [f.result() for f in futures]
            finally:
                for f in futures:
                    f.cancel()

    return run
