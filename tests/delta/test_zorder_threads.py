"""Z-ORDER of a partition on helper threads (`zorder_bin(threads=2)`: input files read ahead within the
memory share, the columns' ranks and key chunks at once, output files written two at a time) writes the
same files as on one thread: the same rows in the same order, the same stats, the same number of files,
with and without a memory limit. A failed output write fails the ZORDER with nothing committed. Real local
stores and tables written by delta-rs; only `_read` and the store's `write_new` are wrapped, to see which
thread reads and to fail a write.
"""

from __future__ import annotations

import os
import random
import shutil
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

deltalake = pytest.importorskip("deltalake")
from deltalake import DeltaTable, write_deltalake  # noqa: E402

import airflow_delta_provider.delta.engines.local_zorder as local_zorder  # noqa: E402
from airflow_delta_provider.delta.delta_log import DeltaLog  # noqa: E402
from airflow_delta_provider.delta.engines.local_zorder import local_zorder_rewriter  # noqa: E402
from airflow_delta_provider.delta.errors import StorageError  # noqa: E402
from airflow_delta_provider.delta.maintenance.optimize import optimize  # noqa: E402
from airflow_delta_provider.delta.protocol.actions import decode_path  # noqa: E402
from airflow_delta_provider.delta.storage.local import LocalLogStore  # noqa: E402

TARGET = 12_000


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One partition of 24 small files (random rows, a few nulls): one bin, several output files."""
    path = tmp_path_factory.mktemp("zt") / "t"
    rng = random.Random(8)
    for _ in range(24):
        n = 150
        write_deltalake(
            str(path),
            pa.table(
                {
                    "x": pa.array(
                        [None if rng.random() < 0.05 else rng.randrange(2**40) for _ in range(n)], pa.int64()
                    ),
                    "y": pa.array([rng.randrange(2**40) for _ in range(n)], pa.int64()),
                    "name": pa.array([f"n{rng.randrange(10**6):06d}" for _ in range(n)]),
                }
            ),
            mode="append",
        )
    return path


def _zorder(base: Path, dest: Path, **executor: int | None) -> tuple[Path, list]:
    shutil.copytree(base, dest)
    result = optimize(str(dest), zorder_by=["x", "y"], target_size=TARGET, executor=local_zorder_rewriter(**executor))
    return dest, result.added


def test_helper_threads_write_the_same_files(base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    readers: list[str] = []
    decoded: list[int] = []
    read = local_zorder._read

    def observed(*args: object) -> tuple[pa.Table, bool]:
        readers.append(threading.current_thread().name)
        data, carries = read(*args)
        decoded.append(data.nbytes)
        return data, carries

    monkeypatch.setattr(local_zorder, "_read", observed)
    one_path, one = _zorder(base, tmp_path / "one", max_workers=1)
    assert not any(r.startswith("zorder-part") for r in readers)
    readers.clear()
    # the least share that passes both checks (twice the files' bytes, twice the decoded rows): the files
    # read ahead must fit in it beside the rows already read
    file_bytes = sum(f.size for f in DeltaLog(str(base)).update().all_files())
    share = local_zorder.MEMORY_FACTOR * max(sum(decoded), file_bytes) + 1
    monkeypatch.setattr(local_zorder, "_zorder_spilled", None)  # neither run may spill
    runs = {
        "two threads": _zorder(base, tmp_path / "two", max_workers=2),
        "two threads, at the least share": _zorder(base, tmp_path / "limited", max_workers=2, memory_limit_bytes=share),
    }
    assert sum(r.startswith("zorder-part") for r in readers) > len(readers) // 2, "most reads on helper threads"
    assert len(one) > 4
    for name, (path, added) in runs.items():
        assert len(added) == len(one), name
        for a, b in zip(one, added, strict=True):
            assert a.stats == b.stats, name
            assert pq.read_table(one_path / decode_path(a.path)).equals(pq.read_table(path / decode_path(b.path)))


class _FailingStore(LocalLogStore):
    """The real local store; its 3rd data file write fails as a full disk would."""

    def __init__(self) -> None:
        super().__init__()
        self.calls, self.lock = 0, threading.Lock()

    def write_new(self, path: str, data: bytes) -> None:
        with self.lock:
            self.calls += 1
            n = self.calls
        if n == 3 and "_delta_log" not in path:
            raise OSError(28, "No space left on device")
        super().write_new(path, data)


def test_a_failed_output_write_commits_nothing(base: Path, tmp_path: Path) -> None:
    path = tmp_path / "t"
    shutil.copytree(base, path)
    version, logs = DeltaTable(str(path)).version(), sorted(os.listdir(path / "_delta_log"))
    store = _FailingStore()
    with pytest.raises(StorageError, match="No space left"):
        optimize(
            DeltaLog(str(path), store=store),
            zorder_by=["x", "y"],
            target_size=TARGET,
            executor=local_zorder_rewriter(2),
        )
    assert DeltaTable(str(path)).version() == version and sorted(os.listdir(path / "_delta_log")) == logs
    assert store.calls < 3 + 2 + 1, "no more than the writes already running when the 3rd failed started after it"
