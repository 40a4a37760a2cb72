"""A table's health from its log alone, checked against delta-rs reading the same tables: files, bytes, rows
(live rows = numRecords - rows hidden by deletion vectors), tombstones now and later, commits since the
checkpoint, log files past retention, the last OPTIMIZE and which partitions changed since, what the protocol
allows, and the requests a scan makes."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest
from conftest import copy_table
from deltalake import DeltaTable, QueryBuilder, write_deltalake

from airflow_delta_provider.delta.lake import parse_policy, plan, scan, table_health
from airflow_delta_provider.delta.maintenance.log_cleanup import cleanup_log

DAY = 86_400_000
POLICY = parse_policy({"defaults": {"min_small_files": 3}})


def _append(path, p: str, n: int = 3, start: int = 0) -> None:
    data = pa.table({"p": [p] * n, "x": list(range(start, start + n))})
    write_deltalake(str(path), data, partition_by=["p"], mode="append")


@pytest.fixture
def events(tmp_path):
    """p=a: six small files, p=b: one."""
    path = tmp_path / "events"
    _append(path, "b")
    for i in range(6):
        _append(path, "a", start=10 * i)
    return path


def test_counts_match_delta_rs(events):
    h = table_health(str(events), policy=POLICY)
    dt = DeltaTable(str(events))
    adds = pa.table(dt.get_add_actions(flatten=True)).to_pydict()
    totals = h.to_dict()["totals"]
    assert totals["num_files"] == len(dt.file_uris()) == 7
    assert totals["bytes"] == sum(adds["size_bytes"])
    assert totals["rows"] == dt.to_pyarrow_table().num_rows == 21
    assert {k: p.num_files for k, p in h.partitions.items()} == {"p=a": 6, "p=b": 1}
    assert h.partitions["p=a"].small_files == 6 and h.small_file_share == 1.0
    assert sum(h.histogram.values()) == 7 and set(h.histogram) == {"<1MiB"}
    assert h.stats_missing_share == 0.0 and totals["dv_rows"] == 0
    assert (h.version, h.checkpoint_version, h.commits_since_checkpoint) == (6, None, 7)
    assert h.write_rate_per_day == pytest.approx(7 / 7)
    assert all(v is None for v in h.refused.values())
    assert h.last_optimize is None and all(p.changed_since_optimize for p in h.partitions.values())


def test_tombstones_now_and_later(events):
    DeltaTable(str(events)).delete("p = 'a' AND x < 5")  # rewrites the first p=a file: one tombstone
    h = table_health(str(events), policy=POLICY)
    a = h.partitions["p=a"]
    assert (a.tombstone_files_now, a.tombstone_files_later) == (0, 1) and a.tombstone_bytes_later > 0
    removed_at = h.tombstones_all_reclaimable_at - 7 * DAY
    later = table_health(str(events), policy=POLICY, now_ms=removed_at + 7 * DAY)
    assert (later.partitions["p=a"].tombstone_files_now, later.partitions["p=a"].tombstone_bytes_now) == (
        1,
        a.tombstone_bytes_later,
    )


def test_checkpoint_tail_and_requests(events):
    dt = DeltaTable(str(events))
    dt.create_checkpoint()
    _append(events, "b")
    _append(events, "b")
    h = table_health(str(events), policy=POLICY, history_commits=0)
    assert (h.checkpoint_version, h.commits_since_checkpoint) == (6, 2)
    # one listing of _delta_log; the checkpoint and each commit after it read once (the listing names the
    # checkpoint: `_last_checkpoint` is not read)
    assert h.requests == {"get": 3, "list": 1}
    assert h.last_checkpoint_timestamp is not None


def test_log_files_past_retention(tmp_path):
    path = tmp_path / "t"
    retention = {"delta.logRetentionDuration": "interval 1 day", "delta.deletedFileRetentionDuration": "interval 1 day"}
    write_deltalake(str(path), pa.table({"x": [1]}), configuration=retention)
    for i in range(4):
        write_deltalake(str(path), pa.table({"x": [i]}), mode="append")
    DeltaTable(str(path)).create_checkpoint()  # at version 4
    assert table_health(str(path)).log_files_past_retention == 0
    now = int(time.time() * 1000) + 3 * DAY
    h = table_health(str(path), now_ms=now)
    assert h.log_files_past_retention == 4 and h.log_bytes_past_retention > 0  # commits 0..3
    dry = cleanup_log(str(path), clock=lambda: now)  # what our log cleanup would delete
    assert (dry.num_files, dry.num_bytes) == (h.log_files_past_retention, h.log_bytes_past_retention)
    (task,) = plan([h]).tasks
    assert task.operation == "log_cleanup" and task.options == {"retention_hours": 24.0}
    assert cleanup_log(str(path), clock=lambda: now, **task.options).num_files == task.cost.files_deleted
    # a log retention shorter than the file retention: our log cleanup refuses it, so the plan skips it
    DeltaTable(str(path)).alter.set_table_properties({"delta.deletedFileRetentionDuration": "interval 7 days"})
    h = table_health(str(path), now_ms=now)
    assert h.refused["log_cleanup"]["error_class"] == "RetentionConflictError"
    lake_plan = plan([h])
    assert lake_plan.tasks == [] and [s["operation"] for s in lake_plan.skipped] == ["log_cleanup"]


def test_last_optimize_and_what_changed_since(events):
    DeltaTable(str(events)).optimize.compact()
    h = table_health(str(events), policy=POLICY)
    assert h.last_optimize is not None and h.last_optimize.version == 7
    assert not any(p.changed_since_optimize for p in h.partitions.values())
    _append(events, "b")
    h = table_health(str(events), policy=POLICY)
    assert {k for k, p in h.partitions.items() if p.changed_since_optimize} == {"p=b"}
    # an OPTIMIZE with a partition filter covers only the partitions it names
    _append(events, "a")
    _append(events, "c")
    DeltaTable(str(events)).optimize.compact(partition_filters=[("p", "=", "a")])
    h = table_health(str(events), policy=POLICY)
    assert {k for k, p in h.partitions.items() if p.changed_since_optimize} == {"p=b", "p=c"}


def test_deletion_vector_rows_on_the_corpus(tmp_path):
    names = ("delta-golden/dv-partitioned-with-checkpoint", "delta-kernel-java/basic-dv-with-checkpoint")
    for name in (*names, "delta-rs/table-with-dv-small"):
        path = copy_table(name, tmp_path)
        totals = table_health(str(path)).to_dict()["totals"]
        assert totals["dv_rows"] > 0
        live = QueryBuilder().register("t", DeltaTable(str(path))).execute("select count(*) as n from t").read_all()
        assert totals["rows"] - totals["dv_rows"] == pa.table(live).column("n")[0].as_py()


def test_protocol_refusals_and_unreadable_tables_are_reported(tmp_path, events):
    liquid = copy_table("delta-rs/table_with_liquid_clustering", tmp_path)
    catalog = copy_table("delta-rs/data_err_logs/table_d", tmp_path)
    corrupt = tmp_path / "corrupt"
    write_deltalake(str(corrupt), pa.table({"x": [1]}))
    write_deltalake(str(corrupt), pa.table({"x": [2]}), mode="append")
    (corrupt / "_delta_log" / "00000000000000000001.json").write_text('{"add": {"path": ')
    missing = tmp_path / "missing"
    result = scan([str(p) for p in (liquid, catalog, corrupt, missing, events)])
    assert [h.table for h in result.healths] == ["file://" + str(liquid), "file://" + str(events)]
    refused = result.healths[0].refused
    assert set(refused) == {"optimize", "vacuum", "checkpoint", "log_cleanup"}
    assert all(r["error_class"] == "UnsupportedFeatureError" and r["feature"] == "liquid" for r in refused.values())
    errors = {e["table"].rsplit("/", 1)[-1]: e for e in result.errors}
    assert (
        errors["table_d"]["error_class"] == "UnsupportedFeatureError" and errors["table_d"]["feature"] == "catalogOwned"
    )
    assert errors["corrupt"]["error_class"] == "MalformedCommitError" and errors["corrupt"]["version"] == 1
    assert errors["missing"]["error_class"] == "TableNotFoundError"


def test_every_corpus_table_is_a_health_or_a_typed_error():
    """The whole read-only corpus (scans only read): nothing escapes as an untyped exception."""
    from conftest import CORPUS

    from airflow_delta_provider.delta.errors import ERROR_CLASSES
    from airflow_delta_provider.delta.lake import discover

    found = discover([str(CORPUS)])
    assert len(found.tables) > 250 and found.errors == []
    result = scan(found.tables)
    assert len(result.healths) + len(result.errors) == len(found.tables)
    assert {e["error_class"] for e in result.errors} <= set(ERROR_CLASSES)
    assert len(result.healths) > 200


def test_untracked_files_on_request(events):
    import os

    DeltaTable(str(events)).delete("p = 'a' AND x < 5")  # a tombstoned file stays on disk: tracked
    old = events / "p=a" / "orphan.parquet"
    old.write_bytes(b"x" * 100)
    os.utime(old, (time.time() - 10 * 86_400,) * 2)
    (events / "p=b" / "young.parquet").write_bytes(b"y" * 10)
    (events / "_hidden").mkdir()
    (events / "_hidden" / "kept").write_bytes(b"z")
    assert table_health(str(events)).untracked is None
    h = table_health(str(events), untracked=True)
    assert h.untracked == {"files": 2, "bytes": 110, "reclaimable_files": 1, "reclaimable_bytes": 100}
    assert h.requests["list"] == 2  # the log's listing and one page of the table's
    vacuum = [t for t in plan([h]).tasks if t.operation == "vacuum"]
    assert [(t.cost.files_deleted, t.gain.bytes_reclaimed) for t in vacuum] == [(1, 100)]


def test_vacuum_cost_matches_our_vacuum_dry_run(tmp_path):
    """Tombstones past retention plus old untracked files: exactly the files and bytes VACUUM's dry run plans."""
    import os

    from airflow_delta_provider.delta.maintenance.vacuum import vacuum

    path = copy_table("delta-golden/dv-partitioned-with-checkpoint", tmp_path)
    orphan = path / "part=0" / "orphan.parquet"
    orphan.write_bytes(b"o" * 42)
    old = time.time() - 30 * 86_400
    for f in path.rglob("*"):
        if "_delta_log" not in f.parts:
            os.utime(f, (old, old))
    h = table_health(str(path), untracked=True)
    (task,) = [t for t in plan([h]).tasks if t.operation == "vacuum"]
    assert task.options == {"retention_hours": 168.0}
    dry = vacuum(str(path), dry_run=True, **task.options).plan
    assert task.cost.files_deleted == len(dry.files) > h.untracked["reclaimable_files"] >= 1
    assert task.gain.bytes_reclaimed == sum(f.size for f in dry.files)


def test_a_racing_writer_never_breaks_a_scan(events):
    """Health read while delta-rs appends: every health is one consistent version, as delta-rs reads it."""
    import threading

    done = threading.Event()

    def writer() -> None:
        for i in range(15):
            _append(events, "c" if i % 2 else "a", start=100 + i)
        done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    seen = []
    while not done.is_set() or not seen:
        seen.append(table_health(str(events), policy=POLICY, history_commits=0))
    thread.join()
    seen.append(table_health(str(events), policy=POLICY, history_commits=0))
    for h in seen:
        dt = DeltaTable(str(events), version=h.version)
        assert h.num_files == len(dt.file_uris())
        assert h.to_dict()["totals"]["rows"] == dt.to_pyarrow_table().num_rows
    assert seen[-1].version == 21


def test_partition_values_lookup_answers_as_map_lookup():
    """The flattened-entry lookup the health uses gives `map_lookup(..., "first")`'s answer: a null map, an empty
    one, a missing key, a null value and a repeated key (first wins), on whole and sliced arrays."""
    import pyarrow.compute as pc

    from airflow_delta_provider.delta.lake.health_columns import _map_values

    maps = pa.array(
        [[("a", "1"), ("b", "2")], None, [("b", "3")], [], [("a", None), ("a", "9")], [("b", "4"), ("a", "5")]],
        type=pa.map_(pa.string(), pa.string()),
    )
    for arr in (maps, maps.slice(1), maps.slice(1, 3), maps.slice(4), maps.slice(0, 0)):
        for key in ("a", "b", "c"):
            assert _map_values(arr, key).equals(pc.map_lookup(arr, key, "first")), (arr, key)


def test_without_row_counts_the_plan_is_the_same(tmp_path, events):
    """`row_counts=False` leaves the checkpoint's stats unread: rows and files without stats are unknown (None),
    every other count and the plan are the same; a table with deletion vectors still has its rows counted (the
    deleted-rows ratio needs `numRecords`)."""
    DeltaTable(str(events)).create_checkpoint()
    _append(events, "b")
    full = table_health(str(events), policy=POLICY, history_commits=0)
    lean = table_health(str(events), policy=POLICY, history_commits=0, row_counts=False)
    assert lean.requests == full.requests == {"get": 2, "list": 1}
    totals, lean_totals = full.to_dict()["totals"], lean.to_dict()["totals"]
    assert totals["rows"] == 24 and lean_totals["rows"] is None and lean_totals["files_without_stats"] is None
    assert lean.stats_missing_share is None and all(p.rewrite_rows is None for p in lean.partitions.values())
    unknown = {"rows", "files_without_stats", "stats_missing_share"}
    assert {k: v for k, v in lean_totals.items() if k not in unknown} == {
        k: v for k, v in totals.items() if k not in unknown
    }
    assert plan([lean]).to_dict()["tasks"] == plan([full]).to_dict()["tasks"] != []
    dv = copy_table("delta-golden/dv-partitioned-with-checkpoint", tmp_path)
    assert table_health(str(dv), row_counts=False).to_dict()["totals"] == table_health(str(dv)).to_dict()["totals"]


def test_prefetched_commits_are_read_once_and_a_failed_one_fails_later(events):
    """`CountingStore.prefetch` starts reading commits into its cache (one GET each; a read of one waits for
    it, none is sent again); one that cannot be read is not an error there: the caller's own read sends it
    again and raises, as without the prefetch."""
    from airflow_delta_provider.delta.lake.store import CountingStore
    from airflow_delta_provider.delta.storage import LocalLogStore

    store = CountingStore(LocalLogStore())
    log = events / "_delta_log"
    paths = [str(log / f"{v:020d}.json") for v in (0, 1)]
    missing = str(log / f"{99:020d}.json")
    store.prefetch([*paths, missing, paths[0]])
    assert [store.read_bytes(p) for p in (*paths, *paths)] == [
        (log / f"{v:020d}.json").read_bytes() for v in (0, 1)
    ] * 2
    with pytest.raises(FileNotFoundError):
        store.read_bytes(missing)
    assert store.requests["get"] == 4  # three prefetched, the failed one sent again by its reader
