"""The library's Arrow memory pool and its direct Parquet reader.

`ParquetSource` reads through pyarrow's private `ParquetReader` (to pass a memory pool and to skip
`import pyarrow.parquet`); it must return what `pyarrow.parquet.ParquetFile` returns, and fall back to
`ParquetFile` when that private class does not take the arguments it expects.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import CORPUS, copy_table

from airflow_delta_provider.delta import arrow_memory
from airflow_delta_provider.delta.arrow_memory import ParquetSource
from airflow_delta_provider.delta.engines.arrow_checkpoint import _ACTION_COLUMNS

CHECKPOINTS = sorted(CORPUS.glob("**/_delta_log/**/*.parquet")) if CORPUS.exists() else []
SELECTIONS = {
    "all": None,
    "engine": [*_ACTION_COLUMNS, "add.stats"],
    "leaves": ["add.path", "add.deletionVector", "add.stats", "add.stats_parsed", "nope", "nope.child"],
    "none": ["nope"],
}


def _both(path, columns):
    with pa.memory_map(str(path)) as fh:
        ours = ParquetSource(fh).read(columns)
    with pa.memory_map(str(path)) as fh:
        theirs = pq.ParquetFile(fh).read(columns=columns)
    return ours, theirs


@pytest.mark.skipif(not CHECKPOINTS, reason="reference corpus not found")
@pytest.mark.parametrize("selection", sorted(SELECTIONS))
def test_parquet_source_reads_what_parquet_file_reads(selection):
    for path in CHECKPOINTS:
        ours, theirs = _both(path, SELECTIONS[selection])
        assert ours.schema == theirs.schema, path
        assert ours.equals(theirs), path


@pytest.mark.skipif(not CHECKPOINTS, reason="reference corpus not found")
def test_parquet_source_uses_the_private_reader_with_the_library_pool():
    """With the pyarrow installed here the fast route is taken (not silently the fallback)."""
    with pa.memory_map(str(CHECKPOINTS[0])) as fh:
        source = ParquetSource(fh)
        assert source._file is None
        assert type(source._reader).__module__ == "pyarrow._parquet"


@pytest.mark.skipif(not CHECKPOINTS, reason="reference corpus not found")
def test_parquet_source_falls_back_when_the_private_reader_changes(monkeypatch):
    """A pyarrow release whose `ParquetReader` takes other arguments cannot be installed beside this
    one, so its constructor is replaced by one that refuses `memory_pool`, as such a release would."""
    import pyarrow._parquet

    class ChangedReader:
        def __init__(self, **kwargs):
            raise TypeError("__cinit__() got an unexpected keyword argument 'memory_pool'")

    monkeypatch.setattr(pyarrow._parquet, "ParquetReader", ChangedReader)
    for path in CHECKPOINTS[:20]:
        with pa.memory_map(str(path)) as fh:
            source = ParquetSource(fh)
            assert source._file is not None
            ours = source.read(SELECTIONS["engine"])
        with pa.memory_map(str(path)) as fh:
            assert ours.equals(pq.ParquetFile(fh).read(columns=SELECTIONS["engine"]))


ARROW_LOAD = """
import json, sys
import pyarrow as pa
from airflow_delta_provider.delta import DeltaLog
from airflow_delta_provider.delta.arrow_memory import POOL
from airflow_delta_provider.delta.engines.local import LocalEngine
default_before = pa.default_memory_pool().total_bytes_allocated()
snap = DeltaLog.for_table(sys.argv[1], engine=LocalEngine(row_state_max_bytes=0)).snapshot
answer = [snap.num_files, snap.size_in_bytes, snap.num_tombstones(now_ms=0), type(snap.state.files).__name__]
print(json.dumps({
    "answer": answer,
    "pool": POOL.backend_name,
    "default": pa.default_memory_pool().backend_name,
    "pool_total": POOL.total_bytes_allocated(),
    "default_total": pa.default_memory_pool().total_bytes_allocated() - default_before,
    "modules": sorted(m for m in ("pyarrow.parquet", "pyarrow.fs", "ssl") if m in sys.modules),
}))
"""


def _arrow_load(table, pool: str | None = None) -> dict:
    """Load `table` on the Arrow path in a fresh process, with `ARROW_DEFAULT_MEMORY_POOL=pool` or unset."""
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    if pool is not None:
        env["ARROW_DEFAULT_MEMORY_POOL"] = pool
    out = subprocess.run(
        [sys.executable, "-c", ARROW_LOAD, str(table)], capture_output=True, text=True, check=True, env=env
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _uncompressed_checkpoints(table) -> None:
    """Rewrite the table's checkpoints without compression (pages then need no decompression
    buffers, which pyarrow takes from its default pool whatever the reader's pool)."""
    for path in (table / "_delta_log").glob("*.checkpoint*.parquet"):
        data = pq.read_table(path)
        pq.write_table(data, path, compression="none")


@pytest.mark.skipif(not CORPUS.exists(), reason="reference corpus not found")
def test_arrow_load_allocates_from_the_library_pool_only(tmp_path):
    """The load's buffers come from the library's pool, and `pyarrow.parquet` (with `ssl`) is never
    imported. Counted in total, not just what is still held, the process's default pool takes under
    1% of what the load allocates: a few small internal buffers of the Parquet reader and the
    `indices_nonzero` kernel, which ignore the pool they are given (on bench M, decompression
    buffers included: 3.4 of 62 MB; on L 11.6 of 492 MB)."""
    table = copy_table("delta-golden/dv-partitioned-with-checkpoint", tmp_path)
    _uncompressed_checkpoints(table)
    result = _arrow_load(table)
    assert result["answer"][3] == "FileState"
    assert result["pool"] in ("jemalloc", "system")
    assert result["pool_total"] > 0
    assert result["pool"] != result["default"]  # mimalloc, pyarrow's default, is not the library's pool
    assert result["default_total"] <= result["pool_total"] // 100
    assert result["modules"] == []


@pytest.mark.skipif(not CORPUS.exists(), reason="reference corpus not found")
def test_a_pool_chosen_by_the_host_is_used(tmp_path):
    table = copy_table("delta-golden/dv-partitioned-with-checkpoint", tmp_path)
    chosen = _arrow_load(table, "system")
    assert chosen["pool"] == chosen["default"] == "system"
    assert chosen["pool_total"] > 0
    assert chosen["answer"] == _arrow_load(table)["answer"]


def test_library_pool_prefers_jemalloc_then_system(monkeypatch):
    monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL", raising=False)
    expected = "jemalloc" if "jemalloc" in pa.supported_memory_backends() else "system"
    assert arrow_memory._library_pool().backend_name == expected

    def no_jemalloc():
        raise NotImplementedError("built without jemalloc")

    monkeypatch.setattr(pa, "jemalloc_memory_pool", no_jemalloc)
    assert arrow_memory._library_pool().backend_name == "system"
