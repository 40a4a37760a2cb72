"""Statistics backfill (`COMPUTE STATS`): the rules over values, then the operation on delta-rs and corpus tables.

Tables are written by delta-rs; their stats are stripped by a commit through our own transaction (each file
re-added without `stats`). After the backfill delta-rs reads the same rows, sees min/max again and, like our
file index, prunes files it could not prune before; the recomputed stats equal the ones the writers wrote.
With a deletion vector the stats are tight over the valid rows and `numRecords` stays physical. A file
removed after the plan is dropped; a remove racing the commit is a typed conflict with nothing committed.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

deltalake = pytest.importorskip("deltalake")
from conftest import CORPUS, copy_table  # noqa: E402
from deltalake import DeltaTable, QueryBuilder, write_deltalake  # noqa: E402
from support.faults import RacingStore  # noqa: E402
from support.predicate_eval import evaluate_row  # noqa: E402

from airflow_delta_provider.delta.delta_log import DeltaLog  # noqa: E402
from airflow_delta_provider.delta.errors import (  # noqa: E402
    ConcurrentDeleteReadError,
    InvalidArgumentError,
    LogCorruptedError,
    MetadataChangedError,
    UnsupportedFeatureError,
)
from airflow_delta_provider.delta.maintenance.checkpoint import write_checkpoint  # noqa: E402
from airflow_delta_provider.delta.maintenance.stats_backfill import backfill_stats  # noqa: E402
from airflow_delta_provider.delta.protocol.actions import AddFile, decode_path  # noqa: E402
from airflow_delta_provider.delta.protocol.predicate import parse_predicate  # noqa: E402
from airflow_delta_provider.delta.protocol.stats import StatsColumn  # noqa: E402
from airflow_delta_provider.delta.protocol.stats_backfill import (  # noqa: E402
    MISSING,
    STALE,
    WIDE,
    operation_parameters,
    plan_stats_backfill,
    stats_reason,
)
from airflow_delta_provider.delta.storage import LocalLogStore  # noqa: E402

# -- the rules --------------------------------------------------------------------------------------------

ID = StatsColumn(("id",), ("id",), "long")
NESTED = StatsColumn(("s", "x"), ("s", "x"), "integer")
BLOB = StatsColumn(("b",), ("b",), "binary")


@pytest.mark.parametrize(
    ("stats", "reason"),
    [
        (None, MISSING),
        ({}, MISSING),
        ({"minValues": {"id": 1}}, MISSING),
        ({"numRecords": True}, MISSING),
        ({"numRecords": 3, "nullCount": {"id": 0, "s": {"x": 0}}}, None),
        ({"numRecords": 3, "minValues": {"ID": 1, "S": {"X": 2}}}, None),  # names compared casefolded
        ({"numRecords": 3, "nullCount": {"id": 0}}, STALE),  # s.x has nothing
        ({"numRecords": 3, "nullCount": {"id": 0, "s": {}}}, STALE),
        ({"numRecords": 3, "nullCount": {"id": 0, "s": 0}}, STALE),  # a leaf where a struct is named
        ({"numRecords": 0}, None),  # no rows: no per-column stats to judge
        ({"numRecords": 3, "nullCount": {"id": 0, "s": {"x": 0}, "other": 1}}, None),  # extra columns are harmless
        ({"numRecords": 3, "nullCount": {"id": 0, "s": {"x": 0}}, "tightBounds": False}, None),
    ],
)
def test_stats_reason(stats: dict[str, Any] | None, reason: str | None) -> None:
    assert stats_reason(stats, [ID, NESTED, BLOB]) == reason


def test_only_min_max_columns_make_stats_stale() -> None:
    """delta-rs writes no null count for binary, array or map columns: such files are not stale."""
    assert stats_reason({"numRecords": 2, "nullCount": {"id": 0}}, [ID, BLOB]) is None


def test_wide_stats_only_with_tighten() -> None:
    stats = {"numRecords": 3, "minValues": {"id": 0}, "tightBounds": False}
    assert stats_reason(stats, [ID]) is None
    assert stats_reason(stats, [ID], tighten=True) == WIDE


def _add(path: str, size: int, stats: str | None) -> AddFile:
    return AddFile(path=path, partition_values={}, size=size, modification_time=0, stats=stats)


def test_plan_budget_takes_the_first_files_and_counts_the_rest() -> None:
    good = json.dumps({"numRecords": 1, "nullCount": {"id": 0}})
    files = [_add("a", 10, None), _add("b", 10, good), _add("c", 30, "{bad"), _add("d", 10, None), _add("e", 5, "{}")]
    plan = plan_stats_backfill(files, [ID], table="t", version=3, max_files=2)
    assert [f.add.path for f in plan.files] == ["a", "c"]  # unparsable stats count as none
    assert (plan.num_files_checked, plan.num_over_budget, plan.bytes_over_budget) == (5, 2, 15)
    plan = plan_stats_backfill(files, [ID], table="t", version=3, max_bytes=15)
    assert [f.add.path for f in plan.files] == ["a", "e"]
    plan = plan_stats_backfill(files[2:], [ID], table="t", version=3, max_bytes=1)
    assert [f.add.path for f in plan.files] == ["c"]  # the first file always: a run progresses
    assert plan.summary()["by_reason"] == {MISSING: 1, STALE: 0, WIDE: 0}
    plan = plan_stats_backfill(files, [ID], table="t", version=3)
    summary = plan.summary(listed=2)
    assert (summary["num_files"], summary["files_listed"], [f["path"] for f in summary["files"]]) == (4, 2, ["a", "c"])


def test_operation_parameters_are_sparks() -> None:
    assert operation_parameters([]) == {"predicate": '["true"]'}
    assert operation_parameters(["p = 'a'"]) == {"predicate": "[\"p = 'a'\"]"}


# -- helpers ------------------------------------------------------------------------------------------------


def strip_stats(path: Path) -> int:
    """Re-add every active file without stats (`dataChange=false`) through our transaction; the version."""
    snapshot = DeltaLog(str(path)).update()
    txn = snapshot.transaction("WRITE", {"mode": "Append"})
    txn.add(*[dataclasses.replace(f, stats=None, data_change=False) for f in snapshot.all_files()])
    return txn.commit()


def stats_by_path(path: Path) -> dict[str, dict[str, Any] | None]:
    return {f.path: f.parsed_stats() for f in DeltaLog(str(path)).update().all_files()}


def rows(path: Path) -> list[dict[str, Any]]:
    """The table's rows as delta-rs reads them (its query engine applies deletion vectors)."""
    table = QueryBuilder().register("t", DeltaTable(str(path))).execute("select * from t").read_all()
    return sorted(pa.table(table).to_pylist(), key=lambda r: json.dumps(r, sort_keys=True, default=str))


def deltars_fragments(path: Path, expr: ds.Expression) -> int:
    """How many files delta-rs keeps for `expr` (its dataset prunes by partition values and stats)."""
    return len(list(DeltaTable(str(path)).to_pyarrow_dataset().get_fragments(filter=expr)))


def our_files(path: Path, where: str) -> int:
    return len(DeltaLog(str(path)).update().files(where))


def log_versions(path: Path) -> list[str]:
    return sorted(p.name for p in (path / "_delta_log").glob("*.json"))


def ten_files(path: Path) -> None:
    for i in range(10):
        data = {
            "id": pa.array(range(i * 100, i * 100 + 100), pa.int64()),
            "name": pa.array([f"n{i:02d}-{j}" for j in range(100)]),
            "part": pa.array(["a" if i % 2 else "b"] * 100),
        }
        write_deltalake(str(path), pa.table(data), mode="append", partition_by=["part"])


# -- the operation --------------------------------------------------------------------------------------------


def test_backfill_restores_stats_and_data_skipping(tmp_path: Path) -> None:
    path = tmp_path / "t"
    ten_files(path)
    written = stats_by_path(path)
    expected_rows = rows(path)
    strip_stats(path)
    assert our_files(path, "id = 250") == 10 and deltars_fragments(path, ds.field("id") == 250) == 10

    dry = backfill_stats(str(path))
    before = log_versions(path)
    assert dry.dry_run and dry.version is None and len(dry.plan.files) == 10
    assert dry.to_dict()["plan"]["by_reason"][MISSING] == 10
    assert log_versions(path) == before  # a dry run writes nothing

    result = backfill_stats(str(path), dry_run=False)
    assert result.versions == [len(before)] and len(result.committed) == 10
    assert rows(path) == expected_rows
    # the writer's stats again (our timestamps and ordering aside: the same values)
    assert stats_by_path(path) == written
    actions = pa.table(DeltaTable(str(path)).get_add_actions(flatten=True))
    assert None not in actions["min.id"].to_pylist() and None not in actions["max.name"].to_pylist()
    assert our_files(path, "id = 250") == 1 and deltars_fragments(path, ds.field("id") == 250) == 1

    history = DeltaTable(str(path)).history(1)[0]
    assert history["operation"] == "COMPUTE STATS"
    assert history["operationParameters"]["predicate"] == '["true"]'
    assert history["operationMetrics"]["numFilesRecomputed"] == "10"  # strings, as Spark writes metrics
    commit = [
        json.loads(line) for line in (path / "_delta_log" / f"{result.version:020d}.json").read_text().splitlines()
    ]
    adds = [a["add"] for a in commit if "add" in a]
    assert len(adds) == 10 and not any(a["dataChange"] for a in adds) and not any("remove" in a for a in commit)
    assert backfill_stats(str(path)).plan.files == []  # nothing left to do


def test_stale_stats_after_the_stats_columns_change(tmp_path: Path) -> None:
    """Files written when only `id` was indexed get `name` too once the table indexes two columns."""
    path = tmp_path / "t"
    config = {"delta.dataSkippingNumIndexedCols": "1"}
    for i in range(3):
        data = {"id": pa.array([i], pa.int64()), "name": pa.array([f"n{i}"])}
        write_deltalake(str(path), pa.table(data), mode="append", configuration=config)
    assert our_files(path, "name = 'n1'") == 3
    DeltaTable(str(path)).alter.set_table_properties({"delta.dataSkippingNumIndexedCols": "2"})
    plan = backfill_stats(str(path)).plan
    assert [f.reason for f in plan.files] == [STALE] * 3
    backfill_stats(str(path), dry_run=False)
    assert our_files(path, "name = 'n1'") == 1 and deltars_fragments(path, ds.field("name") == "n1") == 1
    assert all(s is not None and set(s["minValues"]) == {"id", "name"} for s in stats_by_path(path).values())


def test_where_selects_partitions_and_refuses_data_columns(tmp_path: Path) -> None:
    path = tmp_path / "t"
    ten_files(path)
    strip_stats(path)
    before = log_versions(path)
    with pytest.raises(InvalidArgumentError, match="partition columns"):
        backfill_stats(str(path), where="id > 3", dry_run=False)
    assert log_versions(path) == before
    result = backfill_stats(str(path), where="part = 'a'", dry_run=False)
    assert len(result.committed) == 5
    assert DeltaTable(str(path)).history(1)[0]["operationParameters"]["predicate"] == "[\"part = 'a'\"]"
    assert sum(s is None for s in stats_by_path(path).values()) == 5


def test_budget_and_batches_keep_partial_progress(tmp_path: Path) -> None:
    path = tmp_path / "t"
    ten_files(path)
    strip_stats(path)
    first = backfill_stats(str(path), dry_run=False, max_files=4, files_per_commit=3)
    assert len(first.versions) == 2 and len(first.committed) == 4
    assert first.to_dict()["metrics"]["numFilesOverBudget"] == 6
    assert sum(s is None for s in stats_by_path(path).values()) == 6
    rest = backfill_stats(str(path), dry_run=False)
    assert len(rest.committed) == 6 and rest.plan.num_over_budget == 0
    assert all(s is not None for s in stats_by_path(path).values())


def test_deletion_vectors_give_tight_stats_and_physical_num_records(tmp_path: Path) -> None:
    """Corpus DV tables: numRecords counts the data file's rows; bounds and null counts the valid rows."""
    for name in ("delta-rs/table-with-dv-small", "delta-golden/dv-partitioned-with-checkpoint"):
        path = copy_table(name, tmp_path)
        written = stats_by_path(path)
        expected_rows = rows(path)
        strip_stats(path)
        result = backfill_stats(str(path), dry_run=False)
        assert rows(path) == expected_rows
        snapshot = DeltaLog(str(path)).update()
        with_dv = [f for f in snapshot.all_files() if f.deletion_vector is not None]
        assert with_dv and result.to_dict()["metrics"]["numDeletionVectorFiles"] == len(with_dv)
        for f in snapshot.all_files():
            stats, old = f.parsed_stats(), written[f.path]
            assert stats is not None and old is not None
            assert stats["numRecords"] == old["numRecords"]  # physical, as the writer counted it
            assert stats["tightBounds"] is True
            if f.deletion_vector is None and old.get("tightBounds") is not False:
                assert stats == old


def test_tight_bounds_on_the_valid_rows(tmp_path: Path) -> None:
    path = copy_table("delta-rs/table-with-dv-small", tmp_path)
    valid = [r["value"] for r in rows(path)]
    assert backfill_stats(str(path)).plan.files == []  # wide stats are left alone by default
    backfill_stats(str(path), dry_run=False, tighten=True)
    (stats,) = stats_by_path(path).values()
    assert stats is not None
    assert (stats["minValues"]["value"], stats["maxValues"]["value"]) == (min(valid), max(valid))
    assert stats["numRecords"] == 10 and stats["tightBounds"] is True


def test_corpus_table_without_stats(tmp_path: Path) -> None:
    """A Databricks table whose second file was written without stats gets Spark's stats for it."""
    path = copy_table("delta-rs/delta-stats-optional", tmp_path)
    (missing,) = backfill_stats(str(path)).plan.files
    assert missing.reason == MISSING
    spark = next(s for s in stats_by_path(path).values() if s is not None)
    backfill_stats(str(path), dry_run=False)
    recomputed = stats_by_path(path)[missing.add.path]
    assert recomputed is not None and recomputed["nullCount"] == spark["nullCount"]
    assert set(recomputed["minValues"]) == set(spark["minValues"]) and recomputed["numRecords"] == 1
    assert len(rows(path)) == 2


def test_a_file_removed_after_the_plan_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "t"
    ten_files(path)
    strip_stats(path)
    dlog = DeltaLog(str(path))

    def run_then_delete(layout: Any, files: Any, *, store: Any) -> list[str]:
        out = dlog.engine.stats_recomputer()(layout, files, store=store)
        DeltaTable(str(path)).delete("id < 100")  # rewrites nothing: removes the first file whole
        return out

    result = backfill_stats(dlog, dry_run=False, executor=run_then_delete)
    assert len(result.dropped) == 1 and len(result.committed) == 9
    assert DeltaTable(str(path)).history(1)[0]["operationMetrics"]["numFilesDropped"] == "1"
    assert len(rows(path)) == 900


def test_a_racing_remove_is_a_conflict_and_nothing_is_committed(tmp_path: Path) -> None:
    path = tmp_path / "t"
    ten_files(path)
    strip_stats(path)
    dlog = DeltaLog(str(path), store=RacingStore(lambda: DeltaTable(str(path)).delete("id < 100")))
    with pytest.raises(ConcurrentDeleteReadError):
        backfill_stats(dlog, dry_run=False)
    assert DeltaTable(str(path)).history(1)[0]["operation"] == "DELETE"  # delta-rs's, the winner
    assert all(s is None for s in stats_by_path(path).values())
    assert len(rows(path)) == 900


def test_a_racing_append_does_not_conflict(tmp_path: Path) -> None:
    path = tmp_path / "t"
    ten_files(path)
    strip_stats(path)
    extra = pa.table({"id": pa.array([5000], pa.int64()), "name": ["x"], "part": ["a"]})
    dlog = DeltaLog(str(path), store=RacingStore(lambda: write_deltalake(str(path), extra, mode="append")))
    result = backfill_stats(dlog, dry_run=False)
    assert len(result.committed) == 10
    assert len(rows(path)) == 1001


def test_a_metadata_change_after_the_plan_refuses(tmp_path: Path) -> None:
    path = tmp_path / "t"
    ten_files(path)
    strip_stats(path)

    def run_then_alter(layout: Any, files: Any, *, store: Any) -> list[str]:
        DeltaTable(str(path)).alter.set_table_properties({"delta.dataSkippingNumIndexedCols": "1"})
        return ["{}"] * len(files)

    before = log_versions(path)
    with pytest.raises(MetadataChangedError):
        backfill_stats(str(path), dry_run=False, executor=run_then_alter)
    assert len(log_versions(path)) == len(before) + 1  # the ALTER only


def test_an_unreadable_file_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "t"
    ten_files(path)
    strip_stats(path)
    victim = next(iter(stats_by_path(path)))
    (path / victim).unlink()
    before = log_versions(path)
    with pytest.raises(LogCorruptedError):
        backfill_stats(str(path), dry_run=False)
    assert log_versions(path) == before


#: Corpus tables (Spark, Databricks, delta-rs and kernel writers: column mapping id/name, deletion vectors,
#: nested and all primitive types, INT96 and millisecond timestamps, partitions, checkpoints) whose written
#: stats we recompute exactly from the data once they are stripped.
SAME_STATS = (
    "delta-golden/basic-decimal-table-legacy",
    "delta-golden/data-reader-nested-struct",
    "delta-golden/data-reader-timestamp_ntz-id-mode",
    "delta-golden/decimal-various-scale-precision",
    "delta-golden/dv-with-columnmapping",
    "delta-golden/kernel-timestamp-INT96",
    "delta-golden/kernel-timestamp-TIMESTAMP_MILLIS",
    "delta-golden/parquet-all-types",
    "delta-golden/table-with-columnmapping-mode-name",
    "delta-golden/type-widening-nested",
    "delta-kernel-java/basic-dv-with-checkpoint",
    "delta-rs/partition-type-primitives",
    "delta-rs/table_with_edge_timestamps",
    "delta-rs/table_with_null_stats_in_notnull_struct",
    "delta-spark/identity_test_written_by_version_5",
)


@pytest.mark.parametrize("name", SAME_STATS)
def test_corpus_stats_recomputed_as_written(name: str, tmp_path: Path) -> None:
    path = copy_table(name, tmp_path)
    written = stats_by_path(path)
    strip_stats(path)
    backfill_stats(str(path), dry_run=False)
    recomputed = stats_by_path(path)
    for file, stats in written.items():
        if stats is not None and stats.get("tightBounds") is not False:
            assert recomputed[file] == stats, file
    assert backfill_stats(str(path)).plan.files == []


def test_int96_dates_past_2262_keep_their_bounds(tmp_path: Path) -> None:
    """Read at nanoseconds, 9999-12-31 wraps to 1816: such a max would let readers skip matching files."""
    path = copy_table("delta-rs/table_with_edge_timestamps", tmp_path)
    strip_stats(path)
    backfill_stats(str(path), dry_run=False)
    bounds = [s["maxValues"]["BIG_DATE"] for s in stats_by_path(path).values() if s is not None]
    assert len(bounds) == 2 and all(b.startswith("9999-12-") for b in bounds)


def test_columns_added_by_schema_evolution_make_files_stale(tmp_path: Path) -> None:
    """Files written before a column was added have no stats for it; recomputed, its null count is the rows'."""
    path = copy_table("delta-golden/log-replay-latest-metadata-protocol", tmp_path)
    plan = backfill_stats(str(path)).plan
    assert plan.counts()[STALE] == 2
    backfill_stats(str(path), dry_run=False)
    stats = stats_by_path(path)
    assert all(s["nullCount"]["col2"] == s["numRecords"] for s in (stats[f.add.path] for f in plan.files) if s)
    assert our_files(path, "col2 is not null") == 2  # the old files are pruned now


def test_extra_stats_are_not_stale(tmp_path: Path) -> None:
    """A table now indexing no column: files with stats for columns it no longer names are left alone."""
    plan = backfill_stats(str(CORPUS / "delta-golden/data-skipping-change-stats-collected-across-versions")).plan
    assert plan.num_files_checked == 3 and plan.files == []


def test_a_checkpoint_after_the_backfill_carries_the_stats(tmp_path: Path) -> None:
    """delta-rs reading from our checkpoint (not the commits) sees the recomputed stats and prunes with them."""
    path = tmp_path / "t"
    ten_files(path)
    strip_stats(path)
    backfill_stats(str(path), dry_run=False)
    write_checkpoint(DeltaLog(str(path)))
    for commit in (path / "_delta_log").glob("*.json"):
        commit.unlink()  # only the checkpoint is left to read
    actions = pa.table(DeltaTable(str(path)).get_add_actions(flatten=True))
    assert actions.num_rows == 10 and None not in actions["min.id"].to_pylist()
    assert deltars_fragments(path, ds.field("id") == 250) == 1


def test_tables_compaction_may_not_touch_are_refused_before_anything_is_read(tmp_path: Path) -> None:
    path = copy_table("delta-rs/table-with-domain-metadata", tmp_path)
    before = sorted(p.name for p in (path / "_delta_log").iterdir())
    with pytest.raises(UnsupportedFeatureError, match="clustering") as info:
        backfill_stats(str(path), dry_run=False)
    assert info.value.feature == "clustering"
    assert sorted(p.name for p in (path / "_delta_log").iterdir()) == before


def test_an_append_only_table_is_backfilled(tmp_path: Path) -> None:
    """Re-adding files with `dataChange=false` removes nothing, so `delta.appendOnly` allows it."""
    path = tmp_path / "t"
    for i in range(2):
        data = pa.table({"id": pa.array([i], pa.int64())})
        write_deltalake(str(path), data, mode="append", configuration={"delta.appendOnly": "true"})
    strip_stats(path)
    assert len(backfill_stats(str(path), dry_run=False).committed) == 2
    assert our_files(path, "id = 1") == 1


class RaceBeforeCommit:
    """The local store, but before its `n`-th commit put another writer commits (`race` runs once)."""

    def __init__(self, n: int, race: Any) -> None:
        self._inner, self._n, self._race = LocalLogStore(), n, race

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def put_if_absent(self, path: str, data: bytes) -> None:
        if "_delta_log" in path and path.endswith(".json"):
            self._n -= 1
            if self._n == 0:
                self._race()
        self._inner.put_if_absent(path, data)


def test_a_conflict_in_a_later_batch_keeps_the_earlier_ones_and_says_so(tmp_path: Path) -> None:
    path = tmp_path / "t"
    ten_files(path)
    strip_stats(path)
    dlog = DeltaLog(str(path), store=RaceBeforeCommit(2, lambda: DeltaTable(str(path)).delete()))
    first = len(log_versions(path))
    with pytest.raises(ConcurrentDeleteReadError, match=rf"versions \[{first}\] were committed before"):
        backfill_stats(dlog, dry_run=False, files_per_commit=5)
    history = DeltaTable(str(path)).history(2)
    assert [h["operation"] for h in history] == ["DELETE", "COMPUTE STATS"]
    assert rows(path) == []


def random_rows(rng: random.Random, n: int) -> pa.Table:
    def maybe(value: Any) -> Any:
        return None if rng.random() < 0.15 else value

    base = rng.randrange(-50, 50)
    t0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    return pa.table(
        {
            "i": pa.array([maybe(base + rng.randrange(20)) for _ in range(n)], pa.int64()),
            "f": pa.array([maybe(round(rng.uniform(-5, 5) + base, 2)) for _ in range(n)], pa.float64()),
            "s": pa.array([maybe(rng.choice(WORDS) + "x" * rng.choice([0, 0, 40])) for _ in range(n)]),
            "d": pa.array([maybe(dt.date(2024, 1, 1) + dt.timedelta(days=base + rng.randrange(9))) for _ in range(n)]),
            "ts": pa.array(
                [
                    maybe(t0 + dt.timedelta(seconds=base * 10 + rng.randrange(60), microseconds=rng.randrange(10**6)))
                    for _ in range(n)
                ],
                pa.timestamp("us", tz="UTC"),
            ),
            "n": pa.array([{"x": maybe(rng.randrange(10))} for _ in range(n)], pa.struct([("x", pa.int32())])),
            "part": pa.array([rng.choice(["a", "b"]) for _ in range(n)]),
        }
    )


WORDS = ["apple", "Apple", "banana", "cherry", "date", "é-clair", "zeta", ""]


def random_predicate(rng: random.Random, data: list[dict[str, Any]]) -> str:
    def leaf() -> str:
        column = rng.choice(["i", "f", "s", "d", "ts", "n.x", "part"])
        values = [v for r in data if (v := (r["n"] or {}).get("x") if column == "n.x" else r[column]) is not None]
        if rng.random() < 0.15 or not values:
            return f"{column} is {rng.choice(['', 'not '])}null"
        value, op = rng.choice(values), rng.choice(["=", "!=", "<", "<=", ">", ">="])
        if column in ("s", "part"):
            text = f"'{value}'"
        elif column == "d":
            text = f"'{value + dt.timedelta(days=rng.choice([0, 0, 1, -1]))}'"
        elif column == "ts":
            text = f"TIMESTAMP '{(value + dt.timedelta(milliseconds=rng.choice([0, 1, -1]))).isoformat()}'"
        else:
            text = str(value + rng.choice([0, 0, 1, -1]))
        return f"{column} {op} {text}"

    shape = rng.random()
    if shape < 0.5:
        return leaf()
    if shape < 0.8:
        return f"{leaf()} {rng.choice(['AND', 'OR'])} {leaf()}"
    return f"NOT ({leaf()})"


@pytest.mark.parametrize("seed", range(4))
def test_pruning_with_recomputed_stats_never_drops_a_matching_file(seed: int, tmp_path: Path) -> None:
    """Randomized: after the backfill our file index keeps every file holding a row a predicate matches, and
    prunes some files it kept without stats."""
    rng = random.Random(seed)
    path = tmp_path / "t"
    for _ in range(rng.randint(5, 8)):
        write_deltalake(str(path), random_rows(rng, rng.randint(3, 30)), mode="append", partition_by=["part"])
    DeltaTable(str(path)).delete(f"i < {rng.randrange(-40, 0)}")
    strip_stats(path)
    backfill_stats(str(path), dry_run=False)
    snapshot = DeltaLog(str(path)).update()
    files = {
        f.path: [
            {**r, "part": f.partition_values["part"]} for r in pq.read_table(path / decode_path(f.path)).to_pylist()
        ]
        for f in snapshot.all_files()
    }
    everything = [r for rows_ in files.values() for r in rows_]
    pruned = 0
    for _ in range(40):
        text = random_predicate(rng, everything)
        kept = {f.path for f in snapshot.files(text)}
        expr = parse_predicate(text)
        for file, rows_ in files.items():
            if any(evaluate_row(expr, r) is True for r in rows_):
                assert file in kept, (text, file)
        pruned += len(files) - len(kept)
    assert pruned > 0
