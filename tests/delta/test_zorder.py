"""OPTIMIZE ZORDER BY: the key and column rules over values, then the operation on tables delta-rs wrote,
read back by delta-rs.

What must hold: the same rows after (delta-rs reads them), every version before still readable, stats
on the new files, the files' [min, max] ranges on the columns far less overlapping and a 1 % range query on
either column keeping at most 45 % of 200+ files on values spanning 2^40 (delta-rs's own z_order on the same
table is measured beside it); bad columns, clustered tables and partitions whose keys exceed the memory limit refused
with nothing written, a partition over the memory limit sorted through spill files into the same files;
a racing append rebased, a racing delete of an input refused with nothing lost; kill -9 leaves the table.
"""

from __future__ import annotations

import datetime as dt
import decimal
import itertools
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

deltalake = pytest.importorskip("deltalake")
from conftest import copy_table  # noqa: E402
from deltalake import DeltaTable, write_deltalake  # noqa: E402

from airflow_delta_provider.delta.delta_log import DeltaLog  # noqa: E402
from airflow_delta_provider.delta.engines.local_zorder import local_zorder_rewriter  # noqa: E402
from airflow_delta_provider.delta.errors import (  # noqa: E402
    ConcurrentDeleteReadError,
    InvalidArgumentError,
    OperationNotAllowedError,
    ResourceLimitError,
)
from airflow_delta_provider.delta.maintenance.optimize import optimize  # noqa: E402
from airflow_delta_provider.delta.protocol.actions import DomainMetadata, decode_path  # noqa: E402
from airflow_delta_provider.delta.protocol.schema import StructType  # noqa: E402
from airflow_delta_provider.delta.protocol.zorder import (  # noqa: E402
    check_not_clustered,
    column_bits,
    file_ranges,
    interleave,
    output_count,
    overlap,
    range_ids,
    resolve_columns,
    row_slices,
    zorder_key,
)


# -- the rules over values ----------------------------------------------------------------------------------
def test_range_ids_keep_order_nulls_first_and_spread():
    rng = random.Random(3)
    values = [rng.choice([None, *range(-50, 50)]) for _ in range(500)]
    ids = range_ids(pa.array(values, pa.int64()), 8).to_pylist()
    pairs = sorted((v, i) for v, i in zip(values, ids, strict=True) if v is not None)
    assert all(a[1] <= b[1] for a, b in itertools.pairwise(pairs)), "order kept"
    assert all(i == 0 for v, i in zip(values, ids, strict=True) if v is None)
    assert {v: i for v, i in pairs}.__len__() == len(set(i for _, i in pairs)), "distinct values, distinct ids"
    assert max(ids) >= 250, "ids spread over the 8 bits"
    # strings order on their whole value, beyond any prefix
    long = ["x" * 40 + c for c in "dacb"]
    assert range_ids(pa.array(long), 4).to_pylist() == [12, 3, 9, 6]  # ranks 4 1 3 2 of 5 slots (0: null)


def test_interleave_is_msb_first_round_robin():
    # x=0b10, y=0b01 with 2 bits: x1 y1 x0 y0 = 1 0 0 1
    assert interleave([pa.array([2], pa.uint64()), pa.array([1], pa.uint64())], 2).to_pylist() == [0b1001]
    assert interleave([pa.array([3], pa.uint64()), pa.array([0], pa.uint64())], 2).to_pylist() == [0b1010]
    assert column_bits(2, 1_000_000) == 20 and column_bits(1, 10**12) == 32 and column_bits(5, 10**9) == 12


def test_interleave_equals_the_bit_by_bit_definition():
    rng = random.Random(5)
    for k in range(1, 6):
        bits = column_bits(k, 10**9)
        ids = [[rng.randrange(1 << bits) for _ in range(50)] for _ in range(k)]
        expected = [
            sum(((ids[c][r] >> j) & 1) << (j * k + k - 1 - c) for j in range(bits) for c in range(k)) for r in range(50)
        ]
        assert interleave([pa.array(col, pa.uint64()) for col in ids], bits).to_pylist() == expected


def test_zorder_key_on_a_grid_is_the_z_curve():
    xs, ys = zip(*itertools.product(range(4), range(4)), strict=True)
    key = zorder_key([pa.array(xs), pa.array(ys)]).to_pylist()
    order = [p for _, p in sorted(zip(key, zip(xs, ys, strict=True), strict=True))]
    assert order[:4] == [(0, 0), (0, 1), (1, 0), (1, 1)]  # the first quadrant first
    assert order[-1] == (3, 3)


def test_row_slices_and_output_count():
    assert row_slices(10, 3) == [(0, 4), (4, 3), (7, 3)]
    assert row_slices(2, 5) == [(0, 1), (1, 1)]
    assert output_count(0, 100) == 1 and output_count(250, 100) == 3 and output_count(100, 100) == 1


def test_overlap_equals_the_pairwise_count():
    rng = random.Random(7)
    for _ in range(50):
        ranges: list[Any] = []
        for _ in range(rng.randrange(1, 30)):
            a, b = sorted(rng.randrange(100) for _ in range(2))
            ranges.append(None if rng.random() < 0.1 else (a, b))
        brute = sum(
            1
            for i, j in itertools.permutations(range(len(ranges)), 2)
            if ranges[i] is None or ranges[j] is None or (ranges[i][0] <= ranges[j][1] and ranges[j][0] <= ranges[i][1])
        )
        assert overlap(ranges) == brute


SCHEMA = StructType.from_json(
    {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "Part", "type": "string", "nullable": True, "metadata": {}},
            {"name": "s", "type": {"type": "struct", "fields": [{"name": "a", "type": "integer"}]}, "metadata": {}},
            {"name": "arr", "type": {"type": "array", "elementType": "long", "containsNull": True}, "metadata": {}},
            {"name": "late", "type": "string", "nullable": True, "metadata": {}},
        ],
    }
)


def test_resolve_columns_refuses_naming_the_column():
    cols, no_stats = resolve_columns("ID, s.a", SCHEMA, ["Part"], {})
    assert [(c.name, c.physical_path, c.type_name) for c in cols] == [
        ("id", ("id",), "long"),
        ("s.a", ("s", "a"), "integer"),
    ]
    assert no_stats == []
    for bad, named in (("part", "partition column"), ("nope", "does not exist"), ("arr", "array"), ("s", "struct")):
        with pytest.raises(InvalidArgumentError, match=named) as info:
            resolve_columns([bad], SCHEMA, ["Part"], {})
        assert info.value.argument == "zorder_by" and repr(bad) in str(info.value)
    with pytest.raises(InvalidArgumentError, match="twice"):
        resolve_columns(["id", "ID"], SCHEMA, ["Part"], {})
    with pytest.raises(InvalidArgumentError, match="at least one"):
        resolve_columns([], SCHEMA, ["Part"], {})
    # only the first indexed column gets stats: `late` is reported, as Spark warns on it
    assert resolve_columns(["id", "late"], SCHEMA, ["Part"], {"delta.dataSkippingNumIndexedCols": "1"})[1] == ["late"]


def test_clustered_tables_are_refused_by_domain():
    check_not_clustered({})
    check_not_clustered({"delta.clustering": DomainMetadata("delta.clustering", "{}", removed=True)})
    with pytest.raises(OperationNotAllowedError, match=r"delta\.clustering"):
        check_not_clustered({"delta.clustering": DomainMetadata("delta.clustering", '{"clusteringColumns":[]}')})


# -- tables ------------------------------------------------------------------------------------------------
def batch(rng: random.Random, n: int, span: int = 2**40) -> pa.Table:
    def maybe(v: Any) -> Any:
        return None if rng.random() < 0.05 else v

    return pa.table(
        {
            "x": pa.array([maybe(rng.randrange(span)) for _ in range(n)], pa.int64()),
            "y": pa.array([maybe(rng.randrange(span)) for _ in range(n)], pa.int64()),
            "name": pa.array([maybe(f"user_{rng.randrange(10**7):08d}") for _ in range(n)]),
            "f": pa.array([rng.random() for _ in range(n)]),
            "part": pa.array([rng.choice(["a", "b"]) for _ in range(n)]),
        }
    )


def make_table(path: Path, *, files: int = 12, rows: int = 400, seed: int = 1) -> Path:
    rng = random.Random(seed)
    for _ in range(files):
        write_deltalake(str(path), batch(rng, rows), mode="append", partition_by=["part"])
    return path


def rows(path: Path, version: int | None = None) -> Counter:
    """What delta-rs reads (through DataFusion: its `to_pyarrow_table` refuses deletion vectors)."""
    query = deltalake.QueryBuilder().register("t", DeltaTable(str(path), version=version))
    data = pa.table(query.execute("SELECT * FROM t").read_all())
    return Counter(json.dumps(r, sort_keys=True, default=str) for r in data.to_pylist())


def log_files(path: Path) -> list[str]:
    return sorted(p.name for p in (path / "_delta_log").iterdir())


def data_files(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*.parquet") if "_delta_log" not in p.parts}


def overlap_of(adds: Any, column: str) -> tuple[int, float]:
    """The overlap summed over partitions, and as a share of the ordered file pairs in each partition."""
    by_part: dict[Any, list] = {}
    for a in adds:
        by_part.setdefault(tuple(sorted(a.partition_values.items())), []).append(a)
    total = sum(overlap(file_ranges(files, [column])) for files in by_part.values())
    return total, total / sum(len(f) * (len(f) - 1) for f in by_part.values())


def test_zorder_same_rows_old_versions_readable_stats_and_overlap_drop(tmp_path: Path):
    path = make_table(tmp_path / "t")
    versions = {v: rows(path, v) for v in range(DeltaTable(str(path)).version() + 1)}
    before_files = list(DeltaLog(str(path)).update().all_files())
    logs = log_files(path)

    planned = optimize(str(path), zorder_by=["x", "y"], target_size=3_000, dry_run=True)
    assert log_files(path) == logs, "a dry run commits nothing"
    summary = planned.to_dict()
    assert summary["zorder_by"] == ["x", "y"] and summary["num_files_removed"] == len(before_files)
    assert summary["zorder_overlap"]["x"]["after"] is None

    result = optimize(str(path), zorder_by="x,y", target_size=3_000)
    assert result.version is not None
    assert rows(path) == versions[max(versions)], "delta-rs reads the same rows"
    for v, expected in versions.items():
        assert rows(path, v) == expected, f"version {v} still readable in delta-rs"
    # every file of every partition rewritten, files of about the target size
    assert {f.path for f in result.removed} == {f.path for f in before_files}
    assert len(result.added) > 2 and all(a.size < 2 * 3_000 for a in result.added)
    for a in result.added:
        stats = json.loads(a.stats)
        assert stats["numRecords"] > 0 and {"x", "y", "name"} <= set(stats["minValues"]) & set(stats["maxValues"])
    # the commit Delta Spark writes
    commit = [json.loads(x) for x in (path / "_delta_log" / f"{result.version:020d}.json").read_text().splitlines()]
    info = next(a["commitInfo"] for a in commit if "commitInfo" in a)
    assert info["operation"] == "OPTIMIZE" and info["operationParameters"]["zOrderBy"] == '["x", "y"]'
    assert all(a[k]["dataChange"] is False for a in commit for k in ("add", "remove") if k in a)
    assert DeltaTable(str(path)).history(1)[0]["operation"] == "OPTIMIZE"
    # the ranges on both columns stop overlapping
    after_files = list(DeltaLog(str(path)).update().all_files())
    for column in ("x", "y"):
        (before, before_share), (after, after_share) = overlap_of(before_files, column), overlap_of(after_files, column)
        assert before_share > 0.9 and after_share < before_share / 2, (column, before_share, after_share)
        assert result.to_dict()["zorder_overlap"][column] == {"before": before, "after": after}


def files_kept(adds: list, column: str, lo: int, hi: int) -> float:
    """The share of files whose [min, max] on `column` meets [lo, hi] (unknown stats: kept)."""
    ranges = file_ranges(adds, [column])
    return sum(1 for r in ranges if r is None or (r[0] <= hi and lo <= r[1])) / len(ranges)


def test_a_one_percent_range_reads_under_45_percent_of_200_files(tmp_path: Path):
    """Values spanning 2^40 (where delta-rs's byte key barely prunes); our file index and the stats agree."""
    rng = random.Random(11)
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    for _ in range(4):
        data = batch(rng, 60_000).drop_columns(["part"])
        for p in (ours, theirs):
            write_deltalake(str(p), data, mode="append")
    # delta-rs cuts files at its write batches (1024 rows) at the least: ours get the same number of files
    DeltaTable(str(theirs)).optimize.z_order(["x", "y"], target_size=1)
    their_adds = list(DeltaLog(str(theirs)).update().all_files())
    in_bytes = sum(f.size for f in DeltaLog(str(ours)).update().all_files())
    optimize(str(ours), zorder_by=["x", "y"], target_size=in_bytes // len(their_adds))
    snap = DeltaLog(str(ours)).update()
    adds = list(snap.all_files())
    assert len(adds) >= 200 and abs(len(adds) - len(their_adds)) <= 2
    share: dict[str, list[float]] = {"x": [], "y": [], "index": [], "delta-rs": []}
    for _ in range(20):
        for column in ("x", "y"):
            lo = rng.randrange(2**40 - 2**40 // 100)
            hi = lo + 2**40 // 100
            share[column].append(files_kept(adds, column, lo, hi))
            share["delta-rs"].append(files_kept(their_adds, column, lo, hi))
            kept = snap.files(f"{column} >= {lo} AND {column} <= {hi}")
            share["index"].append(len(kept) / len(adds))
    mean = {k: sum(v) / len(v) for k, v in share.items()}
    logging.getLogger(__name__).warning(
        "1%% range, share of files kept: %s (files: ours %d, delta-rs %d)", mean, len(adds), len(their_adds)
    )
    assert mean["x"] <= 0.45 and mean["y"] <= 0.45, mean
    assert abs(mean["index"] - (mean["x"] + mean["y"]) / 2) < 0.02, "the file index prunes as the stats say"
    assert mean["x"] < mean["delta-rs"] and mean["y"] < mean["delta-rs"]
    assert rows(ours) == rows(theirs)


def test_refusals_leave_the_table_untouched(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    path = make_table(tmp_path / "t", files=3, rows=50)
    logs, files = log_files(path), data_files(path)
    for bad in (["part"], ["nope"], ["x", "x"]):
        with pytest.raises(InvalidArgumentError) as info:
            optimize(str(path), zorder_by=bad)
        assert info.value.argument == "zorder_by"
    # over the memory limit: refused before anything is read or written, naming the Spark engine
    with pytest.raises(ResourceLimitError, match="Spark engine") as info:
        optimize(str(path), zorder_by=["x"], executor=local_zorder_rewriter(memory_limit_bytes=1000))
    assert "part=" in str(info.value)
    assert log_files(path) == logs and data_files(path) == files
    # a column without statistics is a warning, not a refusal
    one = tmp_path / "one"
    write_deltalake(str(one), batch(random.Random(2), 10), configuration={"delta.dataSkippingNumIndexedCols": "1"})
    with caplog.at_level(logging.WARNING):
        optimize(str(one), zorder_by=["x", "f"], dry_run=True)
    assert "no statistics" in caplog.text and "'f'" in caplog.text


def test_rows_decoding_over_the_limit_spill_and_keys_over_it_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """A dictionary-encoded column makes tiny files decode large: the check on decoded rows sends the
    partition to the spilling sort although its files' bytes fit; a limit under even its keys refuses it,
    before any file is written."""
    import airflow_delta_provider.delta.engines.local_zorder as local_zorder

    path = tmp_path / "t"
    wide = pa.table({"x": pa.array(range(20_000), pa.int64()), "s": pa.array(["w" * 200] * 20_000)})
    write_deltalake(str(path), wide)
    write_deltalake(str(path), wide, mode="append")
    file_bytes = sum(f.size for f in DeltaLog(str(path)).update().all_files())
    logs, files = log_files(path), data_files(path)
    keys = 2 * (8 + 32) * 40_000  # the z-column and the key, order and output file of each row, twice
    with pytest.raises(ResourceLimitError, match="Spark engine"):
        optimize(str(path), zorder_by=["x"], executor=local_zorder_rewriter(memory_limit_bytes=keys // 2))
    assert log_files(path) == logs and data_files(path) == files
    limit = 2 * keys  # the up-front check (2x the files) passes, 2x the decoded rows (~8.5 MB) does not
    assert 2 * file_bytes < limit < 2 * wide.nbytes
    spills: list[str] = []
    spill = local_zorder._zorder_spilled
    monkeypatch.setattr(
        local_zorder,
        "_zorder_spilled",
        lambda s, la, b, *a, **k: spills.append(b.partition) or spill(s, la, b, *a, **k),
    )
    optimize(str(path), zorder_by=["x"], executor=local_zorder_rewriter(memory_limit_bytes=limit))
    assert spills == [""]
    assert rows(path) == Counter(json.dumps(r, sort_keys=True, default=str) for r in wide.to_pylist() * 2)


def test_a_partition_over_the_limit_is_sorted_through_spill_files_to_the_same_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Spilled (keys in memory, rows bucketed per output file on disk, several passes of at most
    SPILL_STREAMS buckets) and in memory, the same rows land in the same files in the same order."""
    import airflow_delta_provider.delta.engines.local_zorder as local_zorder

    rng, base = random.Random(4), tmp_path / "base"
    for _ in range(6):  # wide rows: the keys of the z-columns fit where the rows do not
        data = batch(rng, 300).append_column("pad", pa.array([rng.randbytes(150).hex() for _ in range(300)]))
        write_deltalake(str(base), data, mode="append", partition_by=["part"])
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(base, a)
    shutil.copytree(base, b)
    in_memory = optimize(str(a), zorder_by=["x", "name"], target_size=20_000, executor=local_zorder_rewriter(1))
    limit = 2 * max(sum(f.size for f in bin_.files) for bin_ in in_memory.plan.bins) - 1
    monkeypatch.setattr(local_zorder, "SPILL_STREAMS", 3)
    spills: list[str] = []
    spill = local_zorder._zorder_spilled
    monkeypatch.setattr(
        local_zorder,
        "_zorder_spilled",
        lambda s, la, b, *a, **k: spills.append(b.partition) or spill(s, la, b, *a, **k),
    )
    spilled = optimize(
        str(b), zorder_by=["x", "name"], target_size=20_000, executor=local_zorder_rewriter(1, memory_limit_bytes=limit)
    )
    assert spills == [max(in_memory.plan.bins, key=lambda b: b.num_bytes).partition], "the largest partition spilled"
    assert len(spilled.added) == len(in_memory.added) > 2 * 3
    for x, y in zip(in_memory.added, spilled.added, strict=True):
        assert x.partition_values == y.partition_values and x.stats == y.stats
        assert pq.read_table(a / decode_path(x.path)).equals(pq.read_table(b / decode_path(y.path)))
    assert rows(b) == rows(base)


def test_clustered_table_refused(tmp_path: Path):
    path = make_table(tmp_path / "t", files=2, rows=20)
    version = DeltaTable(str(path)).version() + 1
    domain = {
        "domainMetadata": {
            "domain": "delta.clustering",
            "configuration": '{"clusteringColumns":[["x"]]}',
            "removed": False,
        }
    }
    info = {"commitInfo": {"timestamp": 1, "operation": "CLUSTER BY"}}
    (path / "_delta_log" / f"{version:020d}.json").write_text(json.dumps(domain) + "\n" + json.dumps(info) + "\n")
    logs = log_files(path)
    with pytest.raises(OperationNotAllowedError, match=r"delta\.clustering"):
        optimize(str(path), zorder_by=["x"])
    assert log_files(path) == logs


def _racing(action: Any) -> Any:
    """A ZORDER executor that runs `action` (another writer) after rewriting, before the commit."""
    inner = local_zorder_rewriter(1)

    def run(layout, bins, columns, **kw):
        out = inner(layout, bins, columns, **kw)
        action()
        return out

    return run


def test_racing_append_is_rebased_and_kept(tmp_path: Path):
    path = make_table(tmp_path / "t", files=4, rows=100)
    extra = batch(random.Random(5), 30)
    expected = rows(path) + Counter(json.dumps(r, sort_keys=True, default=str) for r in extra.to_pylist())
    race = _racing(lambda: write_deltalake(str(path), extra, mode="append", partition_by=["part"]))
    result = optimize(str(path), zorder_by=["x", "y"], executor=race, target_size=10_000)
    assert result.version == DeltaTable(str(path)).version()
    assert rows(path) == expected, "the racing append's rows are all there, once"


def test_racing_delete_of_an_input_is_refused_with_nothing_lost(tmp_path: Path):
    path = make_table(tmp_path / "t", files=4, rows=100)
    logs_before = len(log_files(path))
    race = _racing(lambda: DeltaTable(str(path)).delete("part = 'a' AND x > 1000"))
    with pytest.raises(ConcurrentDeleteReadError, match="left for VACUUM"):
        optimize(str(path), zorder_by=["x", "y"], executor=race)
    assert len(log_files(path)) == logs_before + 1, "only the delete committed"
    assert DeltaTable(str(path)).history(1)[0]["operation"] == "DELETE"
    remaining = DeltaTable(str(path)).to_pyarrow_table()
    assert remaining.num_rows > 0 and all(
        r["x"] is None or r["x"] <= 1000 for r in remaining.to_pylist() if r["part"] == "a"
    )


@pytest.mark.parametrize("name", ["delta-golden/dv-partitioned-with-checkpoint", "delta-golden/dv-with-columnmapping"])
def test_corpus_tables_with_dvs_and_column_mapping(tmp_path: Path, name: str):
    path = copy_table(name, tmp_path)
    before = rows(path)
    snap = DeltaLog(str(path)).update()
    parts = {c.casefold() for c in snap.partition_columns}
    column = next(f.name for f in snap.schema.fields if isinstance(f.type, str) and f.name.casefold() not in parts)
    result = optimize(str(path), zorder_by=[column], target_size=1024)
    assert result.version is not None
    assert rows(path) == before
    assert all(a.deletion_vector is None for a in result.added)


KILLED_ZORDER = r"""
import os, signal, sys
from airflow_delta_provider.delta.delta_log import DeltaLog
from airflow_delta_provider.delta.maintenance.optimize import optimize
from airflow_delta_provider.delta.storage.local import LocalLogStore

table, point = sys.argv[1], sys.argv[2]

class KillingStore(LocalLogStore):
    # the second new data file half written under its own name, or every file written and the commit not
    puts = 0

    def write_new(self, path, data):
        self.puts += 1
        if point == "mid_put" and self.puts == 2:
            super().write_new(path, data[: len(data) // 2])
            os.kill(os.getpid(), signal.SIGKILL)
        super().write_new(path, data)

    def put_if_absent(self, path, data):
        if point == "before_commit" and path.endswith(".json") and "_delta_log" in path:
            os.kill(os.getpid(), signal.SIGKILL)
        super().put_if_absent(path, data)

optimize(DeltaLog(table, store=KillingStore()), zorder_by=["x", "y"], target_size=3000)
sys.exit(3)  # not killed
"""


@pytest.mark.parametrize("point", ["mid_put", "before_commit"])
def test_kill_9_mid_zorder_leaves_the_table_readable_as_before(tmp_path: Path, point: str):
    path = make_table(tmp_path / "t", files=4, rows=200)
    version, before, files = DeltaTable(str(path)).version(), rows(path), data_files(path)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.run(
        [sys.executable, "-c", KILLED_ZORDER, str(path), point], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    assert DeltaTable(str(path)).version() == DeltaLog(str(path)).update().version == version
    assert rows(path) == before
    active = {f.path for f in DeltaLog(str(path)).update().all_files()}
    leftovers = data_files(path) - files
    assert leftovers and not leftovers & active, "what the killed run wrote is unreferenced (VACUUM's)"


def test_every_orderable_type_and_where(tmp_path: Path):
    """Timestamps, dates, decimals, strings, booleans, floats and a nested field as z-columns; `where` keeps
    the other partition's files as they were."""
    rng = random.Random(9)
    path = tmp_path / "t"
    for _ in range(4):
        n = 200
        data = pa.table(
            {
                "ts": pa.array(
                    [
                        dt.datetime(2024, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=rng.randrange(10**13))
                        for _ in range(n)
                    ],
                    pa.timestamp("us", tz="UTC"),
                ),
                "d": [dt.date(2000, 1, 1) + dt.timedelta(days=rng.randrange(9000)) for _ in range(n)],
                "dec": pa.array(
                    [decimal.Decimal(rng.randrange(-(10**9), 10**9)) / 100 for _ in range(n)], pa.decimal128(12, 2)
                ),
                "s": [rng.choice([None, "é", "😀", "abc" * rng.randrange(20)]) for _ in range(n)],
                "flag": [rng.random() < 0.5 for _ in range(n)],
                "f": [rng.choice([float("nan"), rng.uniform(-1, 1)]) for _ in range(n)],
                "st": [{"a": rng.randrange(1000)} for _ in range(n)],
                "part": [rng.choice("ab") for _ in range(n)],
            }
        )
        write_deltalake(str(path), data, mode="append", partition_by=["part"])
    before = rows(path)
    untouched = {f.path for f in DeltaLog(str(path)).update().all_files() if f.partition_values["part"] == "b"}
    result = optimize(
        str(path), zorder_by=["ts", "d", "dec", "s", "flag", "f", "st.a"], where="part = 'a'", target_size=4000
    )
    assert result.version is not None and rows(path) == before
    assert {f.partition_values["part"] for f in result.removed} == {"a"}
    assert untouched <= {f.path for f in DeltaLog(str(path)).update().all_files()}
    params = DeltaTable(str(path)).history(1)[0]["operationParameters"]
    assert json.loads(params["zOrderBy"]) == ["ts", "d", "dec", "s", "flag", "f", "st.a"]
    assert json.loads(params["predicate"]) == ["part = 'a'"]


def test_a_budget_zorders_whole_partitions_until_it_is_spent_and_reports_the_rest(tmp_path: Path):
    path = make_table(tmp_path / "t", files=4, rows=60)
    before, expected = list(DeltaLog(str(path)).update().all_files()), rows(path)
    per_part = Counter(f.partition_values["part"] for f in before)
    result = optimize(str(path), zorder_by="x,y", target_size=10**6, max_files=max(per_part.values()))
    done = result.to_dict()
    (taken,) = {f.partition_values["part"] for f in result.removed}
    assert len(result.removed) == per_part[taken] and done["num_files_added"] == 1
    assert done["num_files_over_budget"] == sum(per_part.values()) - per_part[taken]
    assert done["plan"]["partitions_over_budget"] == [f"part={'b' if taken == 'a' else 'a'}"]
    assert rows(path) == expected
