"""The Arrow memory pool and Parquet reader the library's own Arrow work uses.

Arrow's default pool is mimalloc. On a Linux host with transparent huge pages in `madvise` mode
(the common default) mimalloc backs its segments with 2 MiB pages, and the kernel clears a whole
huge page on the first touch of each: on this project's 2-core VM a third of a 110k-file snapshot
load was `clear_page_erms` under mimalloc, and a 1M-file load took 0.75-0.97 s with it against
0.54-0.56 s with jemalloc and 0.62 s with the system allocator (`bench/RESULTS.md`, session 7).

So the library allocates its own buffers (Parquet decoding, compute kernels, concatenation) from
jemalloc when pyarrow was built with it, else from the system allocator, and leaves the process's
default pool alone: other code in the process keeps whatever it had. A host that chose a pool with
`ARROW_DEFAULT_MEMORY_POOL` gets that pool here too.

Checkpoints are read through `pyarrow._parquet.ParquetReader`, the reader `pyarrow.parquet.ParquetFile`
wraps: it takes a memory pool (`ParquetFile` does not), and `import pyarrow.parquet` costs 12-14 ms
(it imports `pyarrow.fs`, which imports `ssl` and the S3 bindings) that the reader alone does not.
If a pyarrow release changes that private class, reads go through `ParquetFile` instead. Pages are
still decompressed into buffers of pyarrow's default pool: the reader's properties offer no pool.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import pyarrow as pa


def _library_pool() -> pa.MemoryPool:
    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return pa.default_memory_pool()
    try:
        return pa.jemalloc_memory_pool()
    except NotImplementedError:  # pyarrow built without jemalloc (macOS and Windows wheels)
        return pa.system_memory_pool()


#: The pool every Arrow buffer the library allocates comes from.
POOL: pa.MemoryPool = _library_pool()


class ParquetSource:
    """One Parquet file opened for reading, its columns selectable by top-level or dotted leaf name."""

    def __init__(self, source: Any) -> None:
        try:
            from pyarrow._parquet import ParquetReader

            reader = ParquetReader(memory_pool=POOL)
            reader.open(source)
            self._reader: Any = reader
            self._file: Any = None
        except (ImportError, TypeError, AttributeError):  # a pyarrow whose private reader differs
            import pyarrow.parquet as pq

            try:  # as the private reader opens files: Parquet JSON/UUID columns as plain Arrow types
                self._file = pq.ParquetFile(source, arrow_extensions_enabled=False)
            except TypeError:  # a pyarrow older than that option
                self._file = pq.ParquetFile(source)
            self._reader = self._file.reader

    @property
    def schema_arrow(self) -> pa.Schema:
        return self._reader.schema_arrow

    def read(self, columns: Sequence[str] | None = None) -> pa.Table:
        """The named columns (`parent` or `parent.child`, as `ParquetFile.read` takes them), or all."""
        if self._file is not None:
            return self._file.read(columns=columns)
        if columns is None:
            return self._reader.read_all(use_threads=True)
        by_prefix: defaultdict[str, list[int]] = defaultdict(list)
        for index, path in enumerate(self._reader.column_paths):
            for depth in range(1, len(path) + 1):
                by_prefix[".".join(path[:depth])].append(index)
        indices = [i for name in columns for i in by_prefix.get(name, ())]
        return self._reader.read_all(column_indices=indices, use_threads=True)
