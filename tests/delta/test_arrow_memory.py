"""The library's Arrow memory pool and its Parquet reader.

`ParquetSource` must return what `pyarrow.parquet.ParquetFile` returns; the compute kernels the
library runs allocate from its own pool.
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

from airflow_delta_provider.delta.read import arrow_memory
from airflow_delta_provider.delta.read.arrow_memory import ParquetSource
from airflow_delta_provider.delta.read.checkpoint import _ACTION_COLUMNS

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


ARROW_LOAD = """
import json, sys
import pyarrow as pa
from airflow_delta_provider.delta import DeltaLog
from airflow_delta_provider.delta.read.arrow_memory import POOL
from airflow_delta_provider.delta.engines.local import LocalEngine
default_before = pa.default_memory_pool().total_bytes_allocated()
snap = DeltaLog.for_table(sys.argv[1], engine=LocalEngine()).snapshot
answer = [snap.num_files, snap.size_in_bytes, snap.num_tombstones(now_ms=0), type(snap.state.files).__name__]
print(json.dumps({
    "answer": answer,
    "pool": POOL.backend_name,
    "default": pa.default_memory_pool().backend_name,
    "pool_total": POOL.total_bytes_allocated(),
    "default_total": pa.default_memory_pool().total_bytes_allocated() - default_before,
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


@pytest.mark.skipif(not CORPUS.exists(), reason="reference corpus not found")
def test_arrow_load_computes_in_the_library_pool(tmp_path):
    """The load's compute kernels allocate from the library's pool, not pyarrow's default (mimalloc);
    Parquet decoding uses the default pool (`pyarrow.parquet` takes none)."""
    table = copy_table("delta-golden/dv-partitioned-with-checkpoint", tmp_path)
    result = _arrow_load(table)
    assert result["answer"][3] == "FileState"
    assert result["pool"] in ("jemalloc", "system")
    assert result["pool_total"] > 0
    assert result["pool"] != result["default"]


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
