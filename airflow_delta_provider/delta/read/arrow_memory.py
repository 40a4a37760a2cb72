"""The Arrow memory pool and Parquet reader the library's own Arrow work uses.

Arrow's default mimalloc backs segments with 2 MiB transparent huge pages, each cleared on first touch:
a 1M-file load took 0.75-0.97 s with it, 0.54-0.56 s with jemalloc (`bench/RESULTS.md`, session 7). So
the library allocates from jemalloc (else the system allocator) and leaves the default pool alone; an
`ARROW_DEFAULT_MEMORY_POOL` choice is honoured. `ParquetFile` decodes into the default pool (no API for one).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
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

    def read_row_groups(self, columns: Sequence[str] | None = None) -> Iterator[pa.Table]:
        """`read`, one row group at a time."""
        for i in range(self._file.metadata.num_row_groups):
            yield self._file.read_row_group(i, columns=columns, use_threads=True)
