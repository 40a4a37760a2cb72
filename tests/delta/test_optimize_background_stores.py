"""OPTIMIZE's cheaper bin rewrite. Finished files are written on a background thread (`BackgroundStores`)
while the bin threads encode the next bins: the bytes it holds are bounded, a failed write fails the OPTIMIZE
with nothing committed and no write still running, and a kill -9 in the middle of a background write leaves
the table as it was. A batch of the schema last seen is only picked, never cast again; dictionary columns
are chosen on distinct values as before. Real local stores and tables (delta-rs reads the results); only
the store's `write_new` is wrapped to observe or fail writes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

deltalake = pytest.importorskip("deltalake")
from deltalake import DeltaTable, write_deltalake  # noqa: E402
from test_optimize import deltars_rows, listing, random_table  # noqa: E402

from airflow_delta_provider.delta.delta_log import DeltaLog  # noqa: E402
from airflow_delta_provider.delta.errors import StorageError  # noqa: E402
from airflow_delta_provider.delta.maintenance.optimize import optimize  # noqa: E402
from airflow_delta_provider.delta.protocol.actions import AddFile, decode_path  # noqa: E402
from airflow_delta_provider.delta.storage.local import LocalLogStore  # noqa: E402
from airflow_delta_provider.delta.write.data_file_writer import (  # noqa: E402
    DICTIONARY_MAX_DISTINCT,
    DICTIONARY_SAMPLE_ROWS,
    BackgroundStores,
    dictionary_columns,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three partitions of small files: several bins, so several background writes."""
    return random_table(tmp_path_factory.mktemp("bg") / "t", 7, partitioned=True, appends=8, rows=40)


class _Write:
    """A stand-in for a checked file's write: `size` bytes, blocking until `release` is set."""

    def __init__(self, size: int, *, fail: bool = False) -> None:
        self.size, self.fail = size, fail
        self.started, self.release, self.finished = threading.Event(), threading.Event(), threading.Event()
        self.thread = ""

    def __call__(self) -> AddFile:
        self.thread = threading.current_thread().name
        self.started.set()
        self.release.wait()
        self.finished.set()
        if self.fail:
            raise StorageError("Cannot write compacted file: OSError: disk full", table="t", file="f")
        return AddFile(path=f"f{self.size}", partition_values={}, size=self.size, modification_time=0)


def test_a_file_that_does_not_fit_waits_until_the_bytes_in_flight_are_written() -> None:
    with BackgroundStores(max_bytes=10) as stores:
        first, second = _Write(6), _Write(6)
        waiting = threading.Event()
        wait = stores._cond.wait

        def observed_wait(*args: float) -> bool:
            waiting.set()
            return wait(*args)

        stores._cond.wait = observed_wait  # type: ignore[method-assign]  # to see the submitter block
        done = stores.submit(first)  # fits: handed over at once
        first.started.wait()
        seen: list[bool] = []
        submitter = threading.Thread(target=lambda: (stores.submit(second), seen.append(first.finished.is_set())))
        submitter.start()
        waiting.wait()  # 6 + 6 > 10: the second submit waits while the first is written
        assert seen == [] and not second.started.is_set()
        first.release.set()
        second.release.set()
        submitter.join()
        assert seen == [True]  # it returned only once the first file was written
        assert done.result().size == 6
    assert second.finished.is_set()  # leaving waits for every write
    assert first.thread.startswith("delta-store") and second.thread.startswith("delta-store")


def test_a_file_larger_than_the_bound_is_written_by_its_caller_and_a_failure_stops_later_submits() -> None:
    with BackgroundStores(max_bytes=10) as stores:
        big = _Write(11)
        big.release.set()
        assert stores.submit(big).result().size == 11
        assert big.thread == threading.current_thread().name  # not held for another thread
        bad = _Write(4, fail=True)
        bad.release.set()
        failed = stores.submit(bad)
        with pytest.raises(StorageError, match="disk full"):
            failed.result()
        with pytest.raises(StorageError, match="disk full"):  # the caller stops at its next file
            stores.submit(_Write(1))


class _FailingStore(LocalLogStore):
    """The real local store; the k-th data file write fails as a full disk would. Records writes in flight."""

    def __init__(self, k: int) -> None:
        super().__init__()
        self.k, self.calls, self.running, self.threads = k, 0, 0, set()
        self.lock = threading.Lock()

    def write_new(self, path: str, data: bytes) -> None:
        with self.lock:
            self.calls += 1
            n = self.calls
            self.running += 1
            self.threads.add(threading.current_thread().name)
        try:
            if n == self.k:
                raise OSError(28, "No space left on device")
            super().write_new(path, data)
        finally:
            with self.lock:
                self.running -= 1


def test_optimize_writes_in_the_background_and_a_failed_write_commits_nothing(base: Path, tmp_path: Path) -> None:
    ok, bad = tmp_path / "ok", tmp_path / "bad"
    shutil.copytree(base, ok)
    shutil.copytree(base, bad)
    rows, v0 = deltars_rows(base), DeltaTable(str(base)).version()

    store = _FailingStore(k=0)
    result = optimize(DeltaLog(str(ok), store=store), max_workers=2)
    assert len(result.added) >= 3 and store.running == 0
    assert all(t.startswith("delta-store") for t in store.threads)  # the bin threads did not wait for them
    assert deltars_rows(ok) == rows and DeltaTable(str(ok)).version() == v0 + 1

    failing = _FailingStore(k=2)
    with pytest.raises(StorageError, match="No space left") as info:
        optimize(DeltaLog(str(bad), store=failing), max_workers=2)
    assert failing.running == 0  # every write handed over was done before the error was raised
    assert "any file this OPTIMIZE wrote" in str(info.value)  # the error says what was left behind
    assert DeltaTable(str(bad)).version() == v0 and deltars_rows(bad) == rows


KILLED = r"""
import os, signal, sys
from airflow_delta_provider.delta.delta_log import DeltaLog
from airflow_delta_provider.delta.maintenance.optimize import optimize
from airflow_delta_provider.delta.storage.local import LocalLogStore

class KillingStore(LocalLogStore):
    # the second data file's background write puts half its bytes under its own name, then the process dies
    puts = 0

    def write_new(self, path, data):
        self.puts += 1
        if self.puts == 2:
            super().write_new(path, data[: len(data) // 2])
            os.kill(os.getpid(), signal.SIGKILL)
        super().write_new(path, data)

optimize(DeltaLog(sys.argv[1], store=KillingStore()), max_workers=2)
sys.exit(3)  # not killed
"""


def test_kill_9_during_a_background_write_leaves_the_table_as_before(base: Path, tmp_path: Path) -> None:
    path = tmp_path / "t"
    shutil.copytree(base, path)
    v0, rows, before = DeltaTable(str(path)).version(), deltars_rows(path), listing(path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-c", KILLED, str(path)], env=env, cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    assert DeltaTable(str(path)).version() == v0 and deltars_rows(path) == rows
    after = listing(path)
    assert {k: v for k, v in after.items() if k in before} == before  # nothing existing touched
    new = set(after) - set(before)
    assert new and all(p.endswith(".parquet") and "_delta_log" not in p for p in new)  # only unreferenced files
    referenced = {f.path for f in DeltaLog(str(path)).update().all_files()}
    assert not new & referenced


# -- the cheaper per-batch work: columns picked when a schema repeats, dictionary columns on distinct values --


def _add_foreign_file(path: Path, rel: str, data: pa.Table) -> None:
    """A Parquet file written by pyarrow and added with our transaction (as another writer would)."""
    pq.write_table(data, path / rel)
    add = AddFile(rel, {}, (path / rel).stat().st_size, 0, True, json.dumps({"numRecords": data.num_rows}))
    DeltaLog(str(path)).update().transaction("WRITE").add(add).commit()


def test_a_bin_alternating_input_schemas_keeps_every_row_in_input_order(tmp_path: Path) -> None:
    """delta-rs files (the declared types) alternate with a foreign writer's (`id` as int32, columns reversed,
    an extra column): every batch is cast or picked as its own file's schema needs, in the bin's order."""
    path = tmp_path / "t"
    for k in range(3):
        for j in range(2):  # two of the same schema: the second batch is picked, not cast
            rows = pa.table({"id": pa.array([10 * k + 2 * j, 10 * k + 2 * j + 1]), "v": ["a", None]})
            write_deltalake(str(path), rows, mode="append")
        foreign = pa.table({"extra": [1.5], "v": ["c"], "id": pa.array([100 + k], pa.int32())})
        _add_foreign_file(path, f"foreign-{k}.parquet", foreign)
    result = optimize(str(path))
    (bin_,) = result.plan.bins
    (added,) = result.added
    out = pq.read_table(path / decode_path(added.path))
    assert out.schema == pa.schema([("id", pa.int64()), ("v", pa.string())])
    expected = [
        r for f in bin_.files for r in pq.read_table(path / decode_path(f.path)).select(["id", "v"]).to_pylist()
    ]
    assert out.to_pylist() == expected and len(expected) == 15


def test_dictionary_columns_are_judged_on_distinct_non_null_values() -> None:
    n = DICTIONARY_SAMPLE_ROWS
    rows = pa.table(
        {
            "unique": pa.array(range(n)),
            "few_with_nulls": pa.array([None if i % 3 else f"x{i % 7}" for i in range(n)]),
            "nan_and_nulls": pa.array([float("nan") if i % 2 else None for i in range(n)], pa.float64()),
            "all_null": pa.nulls(n, pa.int32()),
            "nested": pa.array([[i] for i in range(n)]),
        }
    )
    expected = [
        name
        for name in ("unique", "few_with_nulls", "nan_and_nulls", "all_null")
        if pc.count_distinct(rows.column(name).slice(0, n)).as_py() <= DICTIONARY_MAX_DISTINCT * n
    ]
    assert dictionary_columns(rows) == [*expected, "nested.list.element"]  # the leaf Parquet names
    assert expected == ["few_with_nulls", "nan_and_nulls", "all_null"]


def test_the_chosen_leaves_are_the_ones_pyarrow_dictionary_encodes() -> None:
    """The names `dictionary_columns` picks are the file's own leaf paths: a list column's leaf is
    `.list.element` even when the Arrow field is `item` (a name pyarrow ignored silently before)."""
    rows = pa.table({"tags": pa.array([["a", "b"], ["a"]] * 500), "few": pa.array(["x", "y"] * 500)})
    sink = pa.BufferOutputStream()
    pq.write_table(rows, sink, use_dictionary=dictionary_columns(rows))
    meta = pq.ParquetFile(pa.BufferReader(sink.getvalue())).metadata.row_group(0)
    chunks = {meta.column(i).path_in_schema: meta.column(i).encodings for i in range(meta.num_columns)}
    assert set(chunks) == set(dictionary_columns(rows)) == {"tags.list.element", "few"}
    assert all("RLE_DICTIONARY" in encodings for encodings in chunks.values()), chunks
