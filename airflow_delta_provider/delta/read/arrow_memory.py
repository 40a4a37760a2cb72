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

Parquet pages are decoded by `pyarrow.parquet.ParquetFile` into buffers of pyarrow's default pool:
its public API takes no pool (the private reader that does was given up for the public API; the cost
is in `bench/RESULTS.md`, session 8).
"""

from __future__ import annotations

import os
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
    """One Parquet file opened for reading, its columns selectable by top-level or dotted leaf name.

    Parquet JSON/UUID columns are read as plain Arrow types (`arrow_extensions_enabled=False`)."""

    def __init__(self, source: Any) -> None:
        import pyarrow.parquet as pq

        self._file = pq.ParquetFile(source, arrow_extensions_enabled=False)

    @property
    def schema_arrow(self) -> pa.Schema:
        return self._file.schema_arrow

    def read(self, columns: Sequence[str] | None = None) -> pa.Table:
        """The named columns (`parent` or `parent.child`, as `ParquetFile.read` takes them), or all."""
        return self._file.read(columns=columns, use_threads=True)
