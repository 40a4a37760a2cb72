"""OPTIMIZE end to end: delta-rs writes the tables (an independent writer), we compact them, and delta-rs
and pyarrow read the result.

What must hold after every OPTIMIZE: the latest version has exactly the same rows (a multiset) as
before, in fewer files; delta-rs reads our commit (`history` shows OPTIMIZE) and time travel to the
version before returns the old files' rows; the new files' stats are what delta-rs computes for the
same data; a concurrent removal of an input file is a typed conflict, a concurrent append is not;
tables whose features a rewrite cannot preserve are refused before any file is written.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
import random
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
from airflow_delta_provider.delta.engines.local import local_bin_rewriter as local_executor  # noqa: E402
from airflow_delta_provider.delta.errors import (  # noqa: E402
    ConcurrentDeleteReadError,
    ConcurrentModificationError,
    InvalidArgumentError,
    MetadataChangedError,
    OperationNotAllowedError,
    ProtocolChangedError,
    UnsupportedFeatureError,
)
from airflow_delta_provider.delta.maintenance.optimize import optimize  # noqa: E402
from airflow_delta_provider.delta.protocol.actions import decode_path  # noqa: E402
from airflow_delta_provider.delta.protocol.schema import StructType  # noqa: E402
from airflow_delta_provider.delta.protocol.table_features import UNMET_WRITE_OBLIGATIONS  # noqa: E402
from airflow_delta_provider.delta.read.deletion_vectors import read_data_file  # noqa: E402
from airflow_delta_provider.delta.storage.local import LocalLogStore  # noqa: E402


# -- tables -----------------------------------------------------------------------------------------------
def random_batch(rng: random.Random, n: int, *, parts: tuple[str | None, ...] = ("a", "b", None)) -> pa.Table:
    """All primitive types, nulls everywhere, a nested struct and a list."""

    def maybe(v: Any) -> Any:
        return None if rng.random() < 0.15 else v

    base = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    rows = {
        "id": [rng.randrange(10**9) for _ in range(n)],
        "part": [rng.choice(parts) for _ in range(n)],
        "i8": [maybe(rng.randrange(-128, 128)) for _ in range(n)],
        "i16": [maybe(rng.randrange(-(2**15), 2**15)) for _ in range(n)],
        "i32": [maybe(rng.randrange(-(2**31), 2**31)) for _ in range(n)],
        "f32": [maybe(rng.uniform(-1e3, 1e3)) for _ in range(n)],
        "f64": [maybe(rng.uniform(-1e9, 1e9)) for _ in range(n)],
        "dec": [maybe(decimal.Decimal(rng.randrange(-(10**8), 10**8)) / 100) for _ in range(n)],
        "s": [maybe("".join(rng.choice("abcxyzé😀") for _ in range(rng.randrange(0, 40)))) for _ in range(n)],
        "b": [maybe(bytes(rng.randrange(256) for _ in range(rng.randrange(0, 8)))) for _ in range(n)],
        "flag": [maybe(rng.random() < 0.5) for _ in range(n)],
        "d": [maybe(dt.date(2020, 1, 1) + dt.timedelta(days=rng.randrange(2000))) for _ in range(n)],
        "ts": [maybe(base + dt.timedelta(microseconds=rng.randrange(10**12))) for _ in range(n)],
        "ntz": [maybe(dt.datetime(2024, 1, 1) + dt.timedelta(microseconds=rng.randrange(10**12))) for _ in range(n)],
        "st": [maybe({"x": maybe(rng.randrange(100)), "y": maybe(str(rng.random()))}) for _ in range(n)],
        "arr": [maybe([rng.randrange(10) for _ in range(rng.randrange(3))]) for _ in range(n)],
    }
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("part", pa.string()),
            ("i8", pa.int8()),
            ("i16", pa.int16()),
            ("i32", pa.int32()),
            ("f32", pa.float32()),
            ("f64", pa.float64()),
            ("dec", pa.decimal128(12, 2)),
            ("s", pa.string()),
            ("b", pa.binary()),
            ("flag", pa.bool_()),
            ("d", pa.date32()),
            ("ts", pa.timestamp("us", tz="UTC")),
            ("ntz", pa.timestamp("us")),
            ("st", pa.struct([("x", pa.int64()), ("y", pa.string())])),
            ("arr", pa.list_(pa.int64())),
        ]
    )
    return pa.table(rows, schema=schema)


def random_table(path: Path, seed: int, *, partitioned: bool, appends: int = 8, rows: int = 40) -> Path:
    rng = random.Random(seed)
    by = ["part"] if partitioned else None
    for i in range(appends):
        write_deltalake(str(path), random_batch(rng, rows), mode="append", partition_by=by)
        if i == 3:  # a rewrite: tombstones and a file whose rows moved
            DeltaTable(str(path)).delete("i8 > 100")
    return path


def canonical_rows(table: pa.Table) -> Counter[str]:
    """A multiset of rows, column order and float formatting normalized."""
    names = sorted(table.column_names)
    return Counter(json.dumps({k: r[k] for k in names}, default=str, sort_keys=True) for r in table.to_pylist())


def deltars_rows(path: Path, version: int | None = None) -> Counter[str]:
    """What delta-rs reads (through DataFusion: its `to_pyarrow_table` refuses deletion vectors)."""
    reader = deltalake.QueryBuilder().register("t", DeltaTable(str(path), version=version)).execute("SELECT * FROM t")
    return canonical_rows(pa.table(reader.read_all()))


def pyarrow_rows(path: Path) -> Counter[str]:
    """The latest version read file by file with pyarrow (partition values added from the log)."""
    log = DeltaLog(str(path))
    snap = log.update()
    schema = snap.schema
    tables = []
    for add in snap.all_files():
        t = read_data_file(log.store, log.table_uri, add)
        for c in snap.partition_columns:
            typ = pa.string() if schema.field(c).type_name == "string" else None
            t = t.append_column(c, pa.array([add.partition_values.get(c)] * t.num_rows, typ))
        tables.append(t)
    return canonical_rows(pa.concat_tables(tables, promote_options="permissive"))


def listing(path: Path) -> dict[str, float]:
    return {str(p.relative_to(path)): p.stat().st_mtime for p in path.rglob("*") if p.is_file()}


# -- the main property --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("seed", "partitioned"), [(1, True), (2, False), (3, True)])
def test_optimize_keeps_every_row_in_fewer_files(tmp_path: Path, seed: int, partitioned: bool) -> None:
    path = random_table(tmp_path / "t", seed, partitioned=partitioned)
    before_version = DeltaTable(str(path)).version()
    before_rows = deltars_rows(path)
    before_files = len(DeltaTable(str(path)).file_uris())

    result = optimize(str(path))

    dt_ = DeltaTable(str(path))
    assert result.version == before_version + 1 == dt_.version()
    assert deltars_rows(path) == before_rows
    assert pyarrow_rows(path) == before_rows
    after_files = len(dt_.file_uris())
    assert after_files < before_files
    assert after_files == before_files - result.to_dict()["num_files_removed"] + result.to_dict()["num_files_added"]
    last = dt_.history(1)[0]
    assert last["operation"] == "OPTIMIZE"
    assert last["operationMetrics"]["numRemovedFiles"] == str(len(result.removed)) or last["operationMetrics"][
        "numRemovedFiles"
    ] == len(result.removed)
    assert deltars_rows(path, before_version) == before_rows  # time travel to the old files
    # every commit action is dataChange=false: change-data readers see no change
    lines = [json.loads(x) for x in (path / "_delta_log" / f"{result.version:020d}.json").read_text().splitlines()]
    file_actions = [next(iter(a.values())) for a in lines if "add" in a or "remove" in a]
    assert file_actions and all(a["dataChange"] is False for a in file_actions)
    removes = [a["remove"] for a in lines if "remove" in a]
    assert all(r["extendedFileMetadata"] and "size" in r and "partitionValues" in r for r in removes)


def test_new_files_stats_equal_deltars_for_the_same_data(tmp_path: Path) -> None:
    path = random_table(tmp_path / "t", 7, partitioned=True)
    result = optimize(str(path))
    assert result.added
    log = DeltaLog(str(path))
    for i, add in enumerate(result.added):
        data = pq.read_table(path / decode_path(add.path))
        oracle = tmp_path / f"oracle{i}"
        write_deltalake(str(oracle), data)
        log_lines = (oracle / "_delta_log" / f"{0:020d}.json").read_text().splitlines()
        expected = json.loads(next(json.loads(x)["add"]["stats"] for x in log_lines if '"add"' in x))
        ours = json.loads(add.stats or "{}")
        assert ours["numRecords"] == expected["numRecords"] == data.num_rows
        # Spark counts nulls of binary and array columns too; delta-rs leaves them out (tests/delta/test_stats.py)
        assert set(ours["nullCount"]) - set(expected["nullCount"]) <= {"b", "arr"}
        assert {k: ours["nullCount"][k] for k in expected["nullCount"]} == expected["nullCount"]
        for bound in ("minValues", "maxValues"):
            assert _comparable(ours[bound]) == _comparable(expected[bound]), bound
    assert log.update().version == result.version


def _comparable(values: dict[str, Any], reference: dict[str, Any] | None = None) -> dict[str, Any]:
    """Stats as values, minus the differences tests/delta/test_stats.py pins against Delta Spark's code:
    delta-rs writes booleans' min/max (Spark does not), cuts strings at 64 UTF-8 bytes (Spark: 32
    characters), spells timestamps its own way; floats compare at a few digits."""
    out: dict[str, Any] = {}
    for k, v in values.items():
        if isinstance(v, dict):
            out[k] = _comparable(v)
        elif isinstance(v, bool):
            continue
        elif isinstance(v, float):
            out[k] = round(v, 3)
        elif isinstance(v, str) and len(v) >= 19 and v[4] == "-" and v[10] in "T ":
            out[k] = dt.datetime.fromisoformat(v.replace("Z", "+00:00")).replace(tzinfo=None).isoformat()[:23]
        elif isinstance(v, str) and len(v) > 16:
            out[k] = v[:16]  # under both writers' truncation
        else:
            out[k] = v
    return out


def test_dry_run_writes_nothing_and_reports_the_plan(tmp_path: Path) -> None:
    path = random_table(tmp_path / "t", 4, partitioned=True)
    before = listing(path)
    result = optimize(str(path), dry_run=True)
    assert listing(path) == before
    d = result.to_dict()
    assert d["dry_run"] is True and d["version"] is None
    assert d["num_files_removed"] == sum(p["files"] for p in d["partitions"].values()) > 0
    assert d["num_files_added"] == sum(p["expected_output_files"] for p in d["partitions"].values())


def test_second_run_finds_nothing_and_where_limits_partitions(tmp_path: Path) -> None:
    path = random_table(tmp_path / "t", 5, partitioned=True)
    first = optimize(str(path), where="part = 'a'")
    assert first.removed and {f.partition_values["part"] for f in first.removed} == {"a"}
    second = optimize(str(path), where="part = 'a'")
    assert second.version is None and not second.added
    with pytest.raises(InvalidArgumentError, match="partition columns"):
        optimize(str(path), where="id > 3")


def test_batches_commit_progressively(tmp_path: Path) -> None:
    path = random_table(tmp_path / "t", 6, partitioned=True)
    rows = deltars_rows(path)
    v0 = DeltaTable(str(path)).version()
    result = optimize(str(path), max_commit_bytes=1)  # every bin its own commit
    assert len(result.versions) == len({b.partition for b in result.plan.bins}) == len(result.plan.bins)
    assert result.versions == list(range(v0 + 1, v0 + 1 + len(result.versions)))
    for v in result.versions:
        assert deltars_rows(path, v) == rows


def test_target_size_splits_bins(tmp_path: Path) -> None:
    path = random_table(tmp_path / "t", 8, partitioned=False, appends=10)
    sizes = [f.size for f in DeltaLog(str(path)).update().all_files()]
    result = optimize(str(path), target_size=3 * max(sizes))
    assert len(result.added) > 1
    assert deltars_rows(path) == deltars_rows(path, result.plan.version)


def test_thread_pool_and_single_thread_give_the_same_rows(tmp_path: Path) -> None:
    a = random_table(tmp_path / "a", 9, partitioned=True)
    b = random_table(tmp_path / "b", 9, partitioned=True)
    optimize(str(a), executor=local_executor(1))
    optimize(str(b), executor=local_executor(2))
    assert deltars_rows(a) == deltars_rows(b)


# -- corpus: column mapping and deletion vectors ------------------------------------------------------------
CORPUS_TABLES = [
    "delta-golden/dv-partitioned-with-checkpoint",
    "delta-golden/dv-with-columnmapping",
    "delta-rs/table_with_partitioning_mapping",
    "delta-kernel-java/basic-dv-no-checkpoint",
    "delta-kernel-java/basic-dv-with-checkpoint",
]


@pytest.mark.parametrize("name", CORPUS_TABLES)
def test_corpus_tables_with_dvs_and_column_mapping(tmp_path: Path, name: str) -> None:
    path = copy_table(name, tmp_path)
    before = deltars_rows(path)
    snap = DeltaLog(str(path)).update()
    n_before = len(list(snap.all_files()))
    result = optimize(str(path), target_size=1024**3)
    if result.version is None:
        assert n_before < 2 or not result.plan.bins
        return
    after = DeltaLog(str(path)).update()
    assert deltars_rows(path) == before
    assert len(list(after.all_files())) < n_before
    assert all(a.deletion_vector is None for a in result.added)
    # the removes carry the source DVs (the tombstone key matches the add's, trino#31253)
    log_lines = (path / "_delta_log" / f"{result.version:020d}.json").read_text().splitlines()
    removes = [json.loads(x)["remove"] for x in log_lines if '"remove"' in x]
    with_dv = [f for f in result.removed if f.deletion_vector is not None]
    assert sum(1 for r in removes if r.get("deletionVector")) == len(with_dv)
    if snap.column_mapping_mode != "none":
        physical = {f.physical_name for f in StructType.from_json(snap.metadata.schema_json).fields}
        for add in result.added:
            names = set(pq.read_schema(path / decode_path(add.path)).names)
            assert names <= physical, "new files use the physical column names"
            assert set(json.loads(add.stats)["nullCount"]) <= physical


# -- conflicts --------------------------------------------------------------------------------------------
def _racing(action: Any) -> Any:
    """An executor that runs `action` (another writer) after compacting, before the commit."""
    inner = local_executor(1)

    def run(layout: Any, bins: Any, *, store: Any, clock: Any) -> Any:
        out = inner(layout, bins, store=store, clock=clock)
        action()
        return out

    return run


def test_concurrent_append_rebases(tmp_path: Path) -> None:
    path = random_table(tmp_path / "t", 10, partitioned=True)
    rows = deltars_rows(path)
    extra = random_batch(random.Random(99), 25)
    result = optimize(
        str(path), executor=_racing(lambda: write_deltalake(str(path), extra, mode="append", partition_by=["part"]))
    )
    assert result.version == DeltaTable(str(path)).version()
    assert deltars_rows(path) == rows + canonical_rows(extra)


def test_concurrent_delete_of_an_input_is_a_typed_conflict_and_leaves_the_table_intact(tmp_path: Path) -> None:
    path = random_table(tmp_path / "t", 11, partitioned=False)
    dt_ = DeltaTable(str(path))
    written: list[str] = []

    def delete() -> None:
        DeltaTable(str(path)).delete("id >= 0")  # removes every file, inputs included
        written.extend(listing(path))

    with pytest.raises(ConcurrentModificationError, match="left for VACUUM") as info:
        optimize(str(path), executor=_racing(delete))
    assert isinstance(info.value, ConcurrentDeleteReadError | ConcurrentModificationError)
    assert info.value.file is not None and info.value.table is not None
    after = DeltaTable(str(path))
    assert after.version() == dt_.version() + 1  # only the delete committed
    assert after.history(1)[0]["operation"] == "DELETE"
    assert deltars_rows(path) == Counter()


# -- refusals -----------------------------------------------------------------------------------------------
def _with_protocol(path: Path, writer_features: list[str], configuration: dict[str, str] | None = None) -> None:
    """Commit a protocol (and metadata) that turns a feature on, as another engine would."""
    snap = DeltaLog(str(path)).update()
    reader = [f for f in writer_features if f in ("columnMapping", "deletionVectors", "v2Checkpoint")]
    actions: list[dict[str, Any]] = [
        {"commitInfo": {"operation": "SET TBLPROPERTIES", "timestamp": 1}},
        {
            "protocol": {
                "minReaderVersion": 3,
                "minWriterVersion": 7,
                "readerFeatures": reader,
                "writerFeatures": writer_features,
            }
        },
    ]
    if configuration:
        meta = snap.metadata.to_json()
        meta["configuration"] = {**meta.get("configuration", {}), **configuration}
        actions.append({"metaData": meta})
    (path / "_delta_log" / f"{snap.version + 1:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")


_REFUSED = [
    # every feature whose obligations a rewrite here cannot meet (table_features.UNMET_WRITE_OBLIGATIONS)
    *(
        ([f, "domainMetadata"] if f in ("rowTracking", "clustering") else [f], None, UnsupportedFeatureError)
        for f in sorted(UNMET_WRITE_OBLIGATIONS["optimize"])
    ),
    (["catalogManaged"], None, OperationNotAllowedError),
    (["someFutureFeature"], None, UnsupportedFeatureError),
]


@pytest.mark.parametrize(("features", "configuration", "error"), _REFUSED)
def test_refused_before_any_file_is_written(
    tmp_path: Path, features: list[str], configuration: dict[str, str] | None, error: type[Exception]
) -> None:
    path = random_table(tmp_path / "t", 12, partitioned=False, appends=3)
    _with_protocol(path, features, configuration)
    before = listing(path)
    with pytest.raises(error) as info:
        optimize(str(path))
    assert listing(path) == before
    assert features[0] in str(info.value)  # the error names the feature
    if error is UnsupportedFeatureError:
        assert info.value.feature == features[0]


def test_append_only_table_may_be_compacted(tmp_path: Path) -> None:
    path = tmp_path / "t"
    rng = random.Random(13)
    write_deltalake(str(path), random_batch(rng, 20), configuration={"delta.appendOnly": "true"})
    for _ in range(3):
        write_deltalake(str(path), random_batch(rng, 20), mode="append")
    rows = deltars_rows(path)
    assert optimize(str(path)).version is not None
    assert deltars_rows(path) == rows


def test_bad_arguments_are_typed(tmp_path: Path) -> None:
    path = random_table(tmp_path / "t", 14, partitioned=False, appends=2)
    for kwargs in ({"target_size": 0}, {"min_num_files": 0}, {"max_commit_bytes": -1}, {"dry_run": "yes"}):
        with pytest.raises(InvalidArgumentError):
            optimize(str(path), **kwargs)


def test_nothing_to_compact_commits_nothing(tmp_path: Path) -> None:
    path = tmp_path / "t"
    write_deltalake(str(path), random_batch(random.Random(15), 10))
    before = listing(path)
    result = optimize(str(path))
    assert result.version is None and listing(path) == before
    assert os.path.exists(path / "_delta_log" / f"{0:020d}.json")


def test_a_bin_with_no_rows_left_only_removes(tmp_path: Path) -> None:
    """Files whose rows are all gone (empty files here; all rows deleted by DVs alike) leave no new file."""
    from airflow_delta_provider.delta.protocol.actions import AddFile

    path = tmp_path / "t"
    write_deltalake(str(path), pa.table({"id": [1], "p": ["a"]}), partition_by=["p"])
    empty = pa.table({"id": pa.array([], pa.int64())})
    (path / "p=b").mkdir()
    adds = []
    for i in range(2):
        pq.write_table(empty, path / "p=b" / f"empty-{i}.parquet")
        size = (path / "p=b" / f"empty-{i}.parquet").stat().st_size
        adds.append(AddFile(f"p=b/empty-{i}.parquet", {"p": "b"}, size, 0, True, '{"numRecords":0}'))
    DeltaLog(str(path)).update().transaction("WRITE").add(*adds).commit()
    rows = deltars_rows(path)
    result = optimize(str(path))
    assert result.version is not None and result.added == []
    assert sorted(f.path for f in result.removed) == ["p=b/empty-0.parquet", "p=b/empty-1.parquet"]
    assert deltars_rows(path) == rows and len(DeltaTable(str(path)).file_uris()) == 1


# -- later batches after a metadata or protocol change ------------------------------------------------------
class _AfterFirstCommit(LocalLogStore):
    """The real local store; right after OPTIMIZE's first commit lands, `action` (another writer) runs:
    between the first batch's commit and the second batch's start."""

    def __init__(self, action: Any) -> None:
        super().__init__()
        self.action = action
        self.commits = 0

    def put_if_absent(self, path: str, data: bytes) -> None:
        super().put_if_absent(path, data)
        if os.path.basename(os.path.dirname(path)) == "_delta_log" and path.endswith(".json"):
            self.commits += 1
            if self.commits == 1:
                self.action()


_CHANGES = {
    "metadata": (
        lambda p: DeltaTable(p).alter.add_columns([deltalake.Field("extra", "string")]),
        MetadataChangedError,
    ),
    "protocol": (
        lambda p: DeltaTable(p).alter.add_feature(
            deltalake.TableFeatures.DeletionVectors, allow_protocol_versions_increase=True
        ),
        ProtocolChangedError,
    ),
}


@pytest.mark.parametrize("change", sorted(_CHANGES))
def test_a_later_batch_does_not_rebase_over_a_metadata_or_protocol_change(tmp_path: Path, change: str) -> None:
    """Batch 0 commits, another writer changes the table's metadata (a new column) or protocol, batch 1
    must not commit files written with the plan's layout: the same typed conflict as batch 0 would get,
    nothing written for it, batch 0's version kept."""
    path = random_table(tmp_path / "t", 16, partitioned=True, appends=4)
    rows = deltars_rows(path)
    v0 = DeltaTable(str(path)).version()
    action, error = _CHANGES[change]
    before = set(listing(path))
    with pytest.raises(error) as info:
        optimize(DeltaLog(str(path), store=_AfterFirstCommit(lambda: action(str(path)))), max_commit_bytes=1)
    assert f"versions [{v0 + 1}] were committed before" in info.value.message
    assert "wrote no file for the batch" in info.value.message and info.value.table is not None
    dt_ = DeltaTable(str(path))
    assert dt_.version() == v0 + 2  # batch 0's OPTIMIZE, then the other writer's change
    assert [h["operation"] for h in dt_.history(2)] == [
        "ADD COLUMN" if change == "metadata" else "ADD FEATURE",
        "OPTIMIZE",
    ]
    new = {p for p in set(listing(path)) - before if p.endswith(".parquet")}
    tracked = {decode_path(a.path) for a in DeltaLog(str(path)).update().all_files()}
    assert len(new) == 1 and new <= tracked  # batch 0's file only; batch 1 wrote none
    assert deltars_rows(path, v0 + 1) == rows


# -- one pass over the file state; one logical -> physical partition mapping ---------------------------------
def test_where_plans_from_one_pass_and_later_batches_check_inputs_without_stats(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spy wraps (never replaces) `Snapshot.all_files` and records `with_stats`: planning with `where`
    reads the file state once, with stats (the plan needs `numRecords`); the second batch's check that
    its inputs are still active reads it once more, without decoding stats."""
    from airflow_delta_provider.delta.snapshot import Snapshot

    path = tmp_path / "t"
    for i in range(3):
        batch = pa.table({"id": [i, i + 10, i + 20], "part": ["a", "b", "c"]})
        write_deltalake(str(path), batch, mode="append", partition_by=["part"])
    calls: list[bool] = []
    real = Snapshot.all_files

    def spy(self: Snapshot, *, with_stats: bool = True) -> Any:
        calls.append(with_stats)
        return real(self, with_stats=with_stats)

    monkeypatch.setattr(Snapshot, "all_files", spy)
    result = optimize(str(path), where="part = 'a' OR part = 'b'", max_commit_bytes=1)
    assert len(result.versions) == 2 and {b.partition for b in result.plan.bins} == {"part=a", "part=b"}
    assert calls == [True, False]


def test_physical_partition_columns_is_one_mapping_for_every_user(tmp_path: Path) -> None:
    """Column mapping `name` (delta-rs corpus table): `partitionValues` and directories use the physical
    name; the snapshot's mapping is what OPTIMIZE's layout and reports and VACUUM's hidden-path rule use."""
    from airflow_delta_provider.delta.maintenance.optimize import table_layout
    from airflow_delta_provider.delta.read.protected_files import partition_columns

    path = copy_table("delta-rs/table_with_partitioning_mapping", tmp_path)
    snap = DeltaLog(str(path)).update()
    mapping = snap.physical_partition_columns
    assert list(mapping) == list(snap.partition_columns)
    assert all(k != v for k, v in mapping.items())  # this table's physical names differ from the logical ones
    assert all(set(a.partition_values) == set(mapping.values()) for a in snap.all_files(with_stats=False))
    assert table_layout(snap, snap.table).physical_partition_columns == tuple(mapping.values())
    assert partition_columns(snap) == [*mapping, *mapping.values()]
    result = optimize(str(path), dry_run=True)
    assert result.physical_names == mapping
    plain = DeltaLog(str(random_table(tmp_path / "plain", 18, partitioned=True, appends=1))).update()
    assert plain.physical_partition_columns == {"part": "part"} and partition_columns(plain) == ["part"]


def test_a_budget_of_half_the_work_commits_half_and_reports_the_rest(tmp_path: Path) -> None:
    """Four partitions of four small files each; a budget of eight files compacts two partitions, in batched
    commits, reports the other two (files, bytes, partitions) and a second run with the same budget does them."""
    path = tmp_path / "t"
    for i in range(4):
        data = pa.table({"id": list(range(i * 40, i * 40 + 40)), "p": [f"p{k % 4}" for k in range(40)]})
        write_deltalake(str(path), data, mode="append", partition_by=["p"])
    rows, v0 = deltars_rows(path), DeltaTable(str(path)).version()
    sizes = sum(f.size for f in DeltaLog(str(path)).update().all_files())
    planned = optimize(str(path), max_files=8, dry_run=True).to_dict()
    assert (planned["num_files_removed"], planned["num_files_over_budget"]) == (8, 8)
    assert planned["plan"]["num_bins_over_budget"] == 2 and len(planned["plan"]["partitions_over_budget"]) == 2
    assert planned["bytes_removed"] + planned["bytes_over_budget"] == sizes
    first = optimize(str(path), max_files=8, max_commit_bytes=1)  # each bin its own commit: progress kept
    done = first.to_dict()
    assert first.versions == [v0 + 1, v0 + 2] and (done["num_files_removed"], done["num_files_added"]) == (8, 2)
    assert done["num_files_over_budget"] == 8 and set(done["plan"]["partitions_over_budget"]).isdisjoint(
        done["partitions"]
    )
    assert deltars_rows(path) == rows and len(DeltaTable(str(path)).file_uris()) == 2 + 8
    second = optimize(str(path), max_bytes=1)  # the first bin always: one more partition
    assert len(second.removed) == 4 and second.to_dict()["num_files_over_budget"] == 4
    third = optimize(str(path), max_files=8).to_dict()
    assert third["num_files_removed"] == 4 and third["num_files_over_budget"] == 0
    assert deltars_rows(path) == rows and len(DeltaTable(str(path)).file_uris()) == 4
    with pytest.raises(InvalidArgumentError, match="max_bytes"):
        optimize(str(path), max_bytes=0)


@pytest.mark.parametrize("batch_rows", [1, 3, 64 * 1024])
def test_streamed_reads_apply_deletion_vectors_batch_by_batch(
    tmp_path: Path, batch_rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`iter_file_rows` (the compaction's reader) keeps exactly the rows `read_data_file` keeps, whatever
    batches a file is read in (a vector's rows fall in several batches, or in none of some)."""
    from airflow_delta_provider.delta.write import data_files

    monkeypatch.setattr(data_files, "READ_BATCH_ROWS", batch_rows)
    monkeypatch.setattr(data_files, "_ARANGE", [])
    for name in CORPUS_TABLES[-2:]:
        path = copy_table(name, tmp_path / str(batch_rows))
        log = DeltaLog(str(path))
        files = [f for f in log.update().all_files() if f.deletion_vector is not None]
        assert files, name
        for f in files:
            batches = list(data_files.iter_file_rows(log.store, log.table_uri, f))
            assert all(b.num_rows <= batch_rows for b in batches)
            assert pa.concat_tables(batches).equals(read_data_file(log.store, log.table_uri, f))
