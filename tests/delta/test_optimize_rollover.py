"""OPTIMIZE rolls its output over at the target size within a bin, as Delta's and delta-rs's writers do.

A bin is packed by its inputs' bytes, but its rows may encode larger than that (inputs compressed harder
than the snappy we write, or one large file whose deletion vector sends it alone to a bin): such a bin is
written as several files of about the target size, each with its own stats. delta-rs writes the inputs
(zstd at level 9) and reads the result; nothing is mocked.
"""

from __future__ import annotations

import dataclasses
import json
import random
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

deltalake = pytest.importorskip("deltalake")
from deltalake import DeltaTable, WriterProperties, write_deltalake  # noqa: E402

from airflow_delta_provider.delta.delta_log import DeltaLog  # noqa: E402
from airflow_delta_provider.delta.maintenance.optimize import optimize, table_layout  # noqa: E402
from airflow_delta_provider.delta.protocol.actions import decode_path  # noqa: E402
from airflow_delta_provider.delta.protocol.optimize import Bin  # noqa: E402
from airflow_delta_provider.delta.write.data_files import compact_bin, compact_bin_files  # noqa: E402

WORDS = "delta lake table file row group parquet commit version snapshot log stats column bin".split()
FILES, ROWS = 16, 1000


def _rows(rng: random.Random, start: int) -> pa.Table:
    """Word soup: zstd packs it ~1.7x as tight as snappy, and no dictionary helps (rows unique)."""
    return pa.table(
        {
            "id": pa.array(range(start, start + ROWS), pa.int64()),
            "part": pa.array(["p"] * ROWS),
            "text": pa.array([" ".join(rng.choice(WORDS) for _ in range(20)) + f" {start + i}" for i in range(ROWS)]),
        }
    )


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """A one-partition table of `FILES` zstd files; the sum of their sizes."""
    path = tmp_path_factory.mktemp("rollover") / "t"
    rng = random.Random(30)
    zstd = WriterProperties(compression="ZSTD", compression_level=9)
    for k in range(FILES):
        write_deltalake(str(path), _rows(rng, k * ROWS), mode="append", partition_by=["part"], writer_properties=zstd)
    return path, sum(f.size for f in DeltaLog(str(path)).update().all_files())


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _deltars(path: Path) -> list[tuple[int, str]]:
    reader = deltalake.QueryBuilder().register("t", DeltaTable(str(path))).execute("SELECT id, text FROM t")
    t = pa.table(reader.read_all())
    return sorted(zip(t["id"].to_pylist(), t["text"].to_pylist(), strict=True))


def test_a_bin_larger_than_the_target_once_encoded_is_written_as_files_of_about_the_target(
    tmp_path: Path, source: tuple[Path, int]
) -> None:
    src, input_bytes = source
    path = _copy(src, tmp_path / "t")
    before = _deltars(path)
    target = input_bytes  # every input fits one bin; its snappy encoding does not fit one file
    result = optimize(str(path), target_size=target)

    assert len(result.plan.bins) == 1 and len(result.removed) == FILES
    added = result.added
    assert len(added) >= 2, [a.size for a in added]
    for a in added[:-1]:  # each finished at about the target (the last holds what was left)
        assert 0.75 * target <= a.size <= 1.25 * target, ([a.size for a in added], target)
    assert added[-1].size <= 1.25 * target
    assert sum(a.size for a in added) > 1.25 * target  # the case: rows that do not fit one file

    # stats per file: the rows of that file, its own min/max
    seen = 0
    for a in added:
        data = pq.read_table(path / decode_path(a.path))
        stats = json.loads(a.stats)
        assert stats["numRecords"] == data.num_rows > 0
        assert stats["minValues"]["id"] == pc.min(data["id"]).as_py()
        assert stats["maxValues"]["id"] == pc.max(data["id"]).as_py()
        assert stats["nullCount"] == {"id": 0, "text": 0}
        seen += data.num_rows
    assert seen == FILES * ROWS

    # delta-rs reads the same rows from the new files, and agrees on each file's stats
    dt = DeltaTable(str(path))
    assert dt.history(1)[0]["operation"] == "OPTIMIZE"
    assert _deltars(path) == before and len(before) == FILES * ROWS
    adds = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
    ours = {a.path: json.loads(a.stats) for a in added}
    assert {r["path"] for r in adds} == set(ours)
    for r in adds:
        s = ours[r["path"]]
        want = (s["numRecords"], s["minValues"]["id"], s["maxValues"]["id"])
        assert (r["num_records"], r["min.id"], r["max.id"]) == want


def test_compact_bin_keeps_one_file_per_bin_whatever_the_target(tmp_path: Path, source: tuple[Path, int]) -> None:
    """The one-`add`-per-bin contract PURGE and the Spark executor rely on; `compact_bin_files` rolls over."""
    src, input_bytes = source
    path = _copy(src, tmp_path / "t")
    log = DeltaLog(str(path))
    snap = log.update()
    files = tuple(snap.all_files())
    bin_ = Bin("part=p", {"part": "p"}, files)
    layout = table_layout(snap, log.table_uri)
    layout = dataclasses.replace(layout, target_size=input_bytes // 3)
    one = compact_bin(log.store, layout, bin_, now_ms=lambda: 0)
    assert one is not None and json.loads(one.stats)["numRecords"] == FILES * ROWS
    many = compact_bin_files(log.store, layout, bin_, now_ms=lambda: 0)
    assert len(many) >= 4, [a.size for a in many]
    assert sum(json.loads(a.stats)["numRecords"] for a in many) == FILES * ROWS
    ids = pa.concat_tables([pq.read_table(path / decode_path(a.path), columns=["id"]) for a in many])["id"]
    assert sorted(ids.to_pylist()) == list(range(FILES * ROWS))


def test_small_batches_are_packed_and_rolled_over_without_losing_or_reordering_a_row(
    tmp_path: Path, source: tuple[Path, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read in 100-row batches, a row group is packed (`PACK_BATCHES`) many times over before it is encoded,
    and the files roll over between batches: the new files hold every row once, in the inputs' order."""
    from airflow_delta_provider.delta.write import data_files

    monkeypatch.setattr(data_files, "READ_BATCH_ROWS", 100)
    monkeypatch.setattr(data_files, "_ARANGE", [])
    packs: list[int] = []
    pack = data_files.DataFileWriter._pack
    monkeypatch.setattr(data_files.DataFileWriter, "_pack", lambda self: (packs.append(1), pack(self))[1])
    src, input_bytes = source
    path = _copy(src, tmp_path / "t")
    log = DeltaLog(str(path))
    snap = log.update()
    files = tuple(snap.all_files())
    layout = dataclasses.replace(table_layout(snap, log.table_uri), target_size=input_bytes // 3)
    many = compact_bin_files(log.store, layout, Bin("part=p", {"part": "p"}, files), now_ms=lambda: 0)
    assert len(packs) >= 10  # 160 batches
    assert len(many) >= 4
    got = pa.concat_tables([pq.read_table(path / decode_path(a.path)) for a in many])
    want = pa.concat_tables([pq.read_table(path / decode_path(f.path), columns=["id", "text"]) for f in files])
    assert got.column("id").to_pylist() == want.column("id").to_pylist()
    assert got.column("text").to_pylist() == want.column("text").to_pylist()
