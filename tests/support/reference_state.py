"""Row-by-row references the tests compare the library's bulk paths with: summaries of plain action rows,
a file state built from a whole replay, a table built from row dicts."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from airflow_delta_provider.delta.protocol.replay import InMemoryLogReplay
from airflow_delta_provider.delta.read.aggregates import FileSummary, TombstoneSummary
from airflow_delta_provider.delta.read.arrow_build import column
from airflow_delta_provider.delta.read.file_state import FileState, adds_to_table, removes_to_table


def summarize_file_rows(rows: Iterable[dict[str, Any]], small_file_bytes: int) -> FileSummary:
    """A `FileSummary` of `{"add": {...}}` rows (others are ignored)."""
    out = FileSummary(small_file_bytes)
    for row in rows:
        add = row.get("add")
        if add is not None:
            out.add(int(add.get("size") or 0))
    return out


def summarize_tombstone_rows(
    rows: Iterable[dict[str, Any]], cutoff_ms: int, partition_columns: tuple[str, ...]
) -> TombstoneSummary:
    """A `TombstoneSummary` of `{"remove": {...}}` rows (others are ignored)."""
    out = TombstoneSummary(cutoff_ms, partition_columns)
    for row in rows:
        rm = row.get("remove")
        if rm is not None:
            out.add(rm.get("partitionValues"), rm.get("size"), rm.get("deletionTimestamp"))
    return out


def state_from_replay(replay: InMemoryLogReplay) -> FileState:
    """The full state held by a replay (all tombstones, expired ones included)."""
    return FileState(adds_to_table(replay.active_files.values()), removes_to_table(replay.tombstones.values()))


def table_from_rows(rows: Sequence[Mapping[str, Any]], schema: pa.Schema) -> pa.Table:
    """`pa.Table.from_pylist(rows, schema=schema)` for the types `arrow_build` builds, without pandas."""
    return pa.Table.from_arrays([column([r.get(f.name) for r in rows], f.type) for f in schema], schema=schema)
