"""`check_commits`: checks at every version of a range, per-commit checks, missing commits.

Tables are written by `DeltaLogBuilder` (exact control over each commit) and by delta-rs (a real
writer); the incremental per-version summaries are compared with a fresh `snapshot_at(v)` at every
version (the O(table) path they replace).
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import copy_table

from airflow_delta_provider.commands.checks import evaluate_checks
from airflow_delta_provider.commands.commit_checks import (
    MISSING_COMMITS,
    CommitCheckReport,
    check_commits,
    validate_commit_checks,
    xcom_fields,
)
from airflow_delta_provider.delta import DeltaLog
from airflow_delta_provider.delta.errors import InvalidArgumentError, VersionNotFoundError
from airflow_delta_provider.testing import DeltaLogBuilder

SMALL_MB = 0.001  # 1048 bytes: the builder's sizes below fall on both sides


def _log(path: str | Path) -> DeltaLog:
    return DeltaLog(str(path))


def _failures(report: CommitCheckReport) -> list[tuple[int, str]]:
    return [(f.version, f.check) for f in report.failures]


def _dv(card: int, tag: str) -> dict[str, Any]:
    return {"storageType": "u", "pathOrInlineDv": f"dv-{tag}-{card:04d}", "offset": 1, "sizeInBytes": 40,
            "cardinality": card}  # fmt: skip


def _table(tmp_path: Path, **kwargs: Any) -> DeltaLogBuilder:
    b = DeltaLogBuilder(tmp_path / "t", schema={"id": "long", "date": "string"}, **kwargs)
    b.create()
    return b


# -- the example: a check that fails in the middle of the range ---------------------------------------
def test_a_check_failing_at_a_middle_version_fails_naming_it(tmp_path: Path) -> None:
    b = _table(tmp_path)
    b.append(["a.parquet", "b.parquet"])  # 1: 2 files
    b.append(["c.parquet", "d.parquet"])  # 2: 4 files, above the maximum
    b.remove(["c.parquet", "d.parquet"])  # 3: 2 files again
    spec = {"max_files": 3}
    log = _log(b.path)
    latest_only = evaluate_checks(spec, log.snapshot_at(version=3))
    assert all(r.passed for r in latest_only)  # what a check of the latest version alone sees

    report = check_commits(log, 1, None, spec)
    assert report.checked_versions == [2, 3]
    assert _failures(report) == [(2, "max_files")]
    assert report.first_failing_version == 2
    assert "4 active files, more than the maximum 3" in report.failures[0].message
    assert report.failed_message() == f"version 2: max_files: {report.failures[0].message}"
    fields = xcom_fields(report)
    assert fields["checked_versions"] == [2, 3] and fields["first_failing_version"] == 2
    assert [p["num_files"] for p in report.per_version] == [4, 2]
    assert report.seed_versions == [1]  # one snapshot load, at since_version


def test_delta_rs_table_failing_before_an_optimize(tmp_path: Path) -> None:
    """A real writer: the fifth append exceeds max_files, OPTIMIZE brings the table back under it."""
    from deltalake import DeltaTable, write_deltalake

    path = str(tmp_path / "rs")
    for i in range(5):  # versions 0..4: 5 files
        write_deltalake(path, pa.table({"id": pa.array([i], pa.int64())}), mode="append")
    DeltaTable(path).optimize.compact()  # version 5: 1 file
    write_deltalake(path, pa.table({"id": pa.array([9], pa.int64())}), mode="append")  # version 6: 2 files
    spec = {"max_files": 4, "allowed_operations": ["WRITE", "OPTIMIZE"], "include_maintenance": True}
    report = check_commits(_log(path), 1, None, spec)
    assert report.checked_versions == [2, 3, 4, 5, 6] and report.maintenance_versions == []
    assert _failures(report) == [(4, "max_files")]
    assert [p["operation"] for p in report.per_version] == ["WRITE", "WRITE", "WRITE", "OPTIMIZE", "WRITE"]
    assert [p["num_files"] for p in report.per_version] == [3, 4, 5, 1, 2]
    assert report.first_failing_version == 4


def test_every_state_check_is_evaluated_per_version(tmp_path: Path) -> None:
    b = _table(tmp_path)
    b.append([{"path": "a.parquet", "size": 10}, {"path": "b.parquet", "size": 5000}])  # 1
    b.append([{"path": "c.parquet", "size": 10}])  # 2: 2 of 3 small
    b.commit([{"add": {"path": "a.parquet", "partitionValues": {}, "size": 10, "modificationTime": 1,
                       "dataChange": True, "deletionVector": _dv(1, "a")}}])  # 3: a.parquet active twice  # fmt: skip
    b.commit([{"remove": {"path": "a.parquet", "size": 10}}, {"remove": {"path": "c.parquet", "size": 10}}])  # 4
    b.set_protocol(1, 7, writer_features=["appendOnly", "invariants", "changeDataFeed"])  # 5
    spec = {
        "max_small_file_ratio": 0.6,
        "small_file_mb": SMALL_MB,
        "no_duplicate_paths": True,
        "protocol": {"min_writer_version": 2},
        "allowed_features": ["appendOnly", "invariants"],
        "schema_since": {"version": 0, "allow": "unchanged"},
        "partition_columns": [],
        "min_files": 1,
    }
    report = check_commits(_log(b.path), 1, None, spec)
    assert _failures(report) == [
        (2, "max_small_file_ratio"),
        (3, "max_small_file_ratio"),
        (3, "no_duplicate_paths"),
        (5, "protocol"),
        (5, "allowed_features"),
    ]


# -- per-commit checks: one commit that trips each, one that does not -------------------------------------------
def test_append_only(tmp_path: Path) -> None:
    b = _table(tmp_path)
    b.append(["a.parquet", "b.parquet", "c.parquet"])  # 1
    b.remove(["a.parquet"], data_change=False, operation="OPTIMIZE")  # 2: no data change
    b.remove(["b.parquet"])  # 3: a delete, allowed: the table is not append-only yet
    b.set_properties({"delta.appendOnly": "true"})  # 4
    b.append(["d.parquet"])  # 5
    b.remove(["c.parquet"])  # 6: a delete on an append-only table
    log = _log(b.path)
    assert _failures(check_commits(log, 1, None, {"append_only": "table"})) == [(6, "append_only")]
    assert _failures(check_commits(log, 1, None, {"append_only": True})) == [(3, "append_only"), (6, "append_only")]
    assert _failures(check_commits(log, 1, None, {"append_only": False})) == []
    message = check_commits(log, 1, None, {"append_only": "table"}).failures[0].message
    assert message == "1 data-changing removes on an append-only table (delta.appendOnly=true)"


def test_protocol_changes(tmp_path: Path) -> None:
    b = _table(tmp_path)
    b.set_protocol(1, 4)  # 1: an upgrade
    b.set_protocol(1, 4)  # 2: the same protocol again: no change
    b.set_protocol(1, 3)  # 3: a downgrade, drops changeDataFeed and generatedColumns
    log = _log(b.path)
    assert _failures(check_commits(log, 0, None, {"protocol_changes": "none"})) == [
        (1, "protocol_changes"),
        (3, "protocol_changes"),
    ]
    report = check_commits(log, 0, None, {"protocol_changes": "upgrades"})
    assert _failures(report) == [(3, "protocol_changes")]
    assert "drops ['changeDataFeed', 'generatedColumns']" in report.failures[0].message


def test_schema_changes(tmp_path: Path) -> None:
    b = _table(tmp_path)
    b.add_column("note")  # 1: a column added
    b.set_properties({"delta.checkpointInterval": "5"})  # 2: metadata, not schema
    b.change_schema({"id": "long", "note": "string"})  # 3: `date` dropped
    b.change_schema({"id": "long", "note": "string"}, partition_columns=["note"])  # 4: repartitioned
    log = _log(b.path)
    report = check_commits(log, 0, None, {"schema_changes": "added_columns"})
    assert _failures(report) == [(3, "schema_changes"), (4, "schema_changes")]
    assert "dropped ['date']" in report.failures[0].message
    assert "partition columns [] -> ['note']" in report.failures[1].message
    assert _failures(check_commits(log, 0, 2, {"schema_changes": "none"})) == [(1, "schema_changes")]


def test_no_unknown_removes(tmp_path: Path) -> None:
    b = _table(tmp_path)
    b.append(["a.parquet", "b.parquet"])  # 1
    b.remove(["a.parquet"])  # 2: active
    b.remove([{"path": "ghost.parquet", "size": 3}])  # 3: never added
    b.remove([{"path": "a.parquet", "size": 1024}])  # 4: removed already at 2
    report = check_commits(_log(b.path), 0, None, {"no_unknown_removes": True})
    assert _failures(report) == [(3, "no_unknown_removes"), (4, "no_unknown_removes")]
    assert report.failures[0].actual == ["ghost.parquet"]


def test_no_unknown_removes_knows_the_start_snapshot(tmp_path: Path) -> None:
    """A file added before since_version and removed in the range is known (from the one Arrow lookup),
    whatever spelling of an absolute path the remove uses."""
    b = _table(tmp_path)
    absolute = f"{b.path}/abs.parquet"
    b.append(["a.parquet", absolute])  # 1
    b.checkpoint()
    b.remove(["a.parquet"])  # 2
    b.remove([{"path": "file://" + absolute, "size": 1024}])  # 3: the same file, spelled as a URI
    report = check_commits(_log(b.path), 1, None, {"no_unknown_removes": True})
    assert report.failures == []
    assert [p["num_files"] for p in report.per_version] == [1, 0]


def test_max_dv_growth_on_a_spark_written_table(tmp_path: Path) -> None:
    """delta-golden/log-replay-dv-key-cases: three DELETEs, each replacing the file's deletion vector
    with one that marks one more row (cardinality 1, 2, 3)."""
    table = copy_table("delta-golden/log-replay-dv-key-cases", tmp_path)
    log = _log(table)
    report = check_commits(log, 0, None, {"max_dv_growth": 0})
    assert _failures(report) == [(1, "max_dv_growth"), (2, "max_dv_growth"), (3, "max_dv_growth")]
    assert report.failures[0].message == "deletion vectors mark 1 more rows deleted (maximum 0)"
    assert check_commits(log, 0, None, {"max_dv_growth": 1, "no_unknown_removes": True}).failures == []


def test_max_dv_growth_counts_the_replaced_vector(tmp_path: Path) -> None:
    b = _table(tmp_path)
    b.append(["a.parquet", "b.parquet"])  # 1
    plain = {"path": "a.parquet", "partitionValues": {}, "size": 1024, "modificationTime": 1, "dataChange": True}
    b.commit([{"remove": {**plain}}, {"add": {**plain, "deletionVector": _dv(4, "a")}}], operation="DELETE")  # 2: +4
    b.commit(
        [
            {"remove": {**plain, "deletionVector": _dv(4, "a")}},
            {"add": {**plain, "deletionVector": _dv(30, "a")}},
        ],
        operation="DELETE",
    )  # 3: +26
    b.remove(["b.parquet"])  # 4: a whole file removed: no vector grows
    report = check_commits(_log(b.path), 1, None, {"max_dv_growth": 10})
    assert _failures(report) == [(3, "max_dv_growth")]
    assert report.failures[0].actual == 26


def test_allowed_operations(tmp_path: Path) -> None:
    b = _table(tmp_path)
    b.append(["a.parquet"])  # 1: WRITE
    b.remove(["a.parquet"], data_change=False, operation="OPTIMIZE")  # 2
    b.txn("app", 1)  # 3: STREAMING UPDATE
    with open(b.commit_path(4), "w") as fh:  # 4: a commit with no commitInfo, as some writers leave it
        fh.write('{"txn":{"appId":"app","version":2}}\n')
    spec = {"allowed_operations": ["WRITE", "STREAMING UPDATE"], "include_maintenance": True}
    report = check_commits(_log(b.path), 0, None, spec)
    assert _failures(report) == [(2, "allowed_operations"), (4, "allowed_operations")]
    expected = "operation 'OPTIMIZE' is not an allowed operation ['WRITE', 'STREAMING UPDATE']"
    assert report.failures[0].message == expected
    assert report.failures[1].message.startswith("the commit has no commitInfo")


# -- maintenance commits are not data ---------------------------------------------------------------------------
def _maintained_rs_table(root: Path) -> str:
    """delta-rs, partitioned: three appends (0..2), a real OPTIMIZE (3), a real VACUUM (START 4, END 5),
    one more append (6)."""
    from deltalake import write_deltalake

    from airflow_delta_provider.delta.maintenance.optimize import optimize
    from airflow_delta_provider.delta.maintenance.vacuum import vacuum

    path = str(root)
    for i in range(3):
        write_deltalake(path, pa.table({"id": [i, 10 + i], "p": ["a", "b"]}), partition_by=["p"], mode="append")
    assert optimize(path).version == 3
    assert vacuum(path, dry_run=False, retention_hours=0, enforce_retention_duration=False).audit_versions == [4, 5]
    write_deltalake(path, pa.table({"id": [99], "p": ["a"]}), partition_by=["p"], mode="append")
    return path


def test_per_commit_checks_skip_optimize_and_vacuum_by_default(tmp_path: Path) -> None:
    path = _maintained_rs_table(tmp_path / "rs")
    spec = {"allowed_operations": ["WRITE"], "no_unknown_removes": True, "append_only": True}
    report = check_commits(_log(path), 1, None, spec)
    assert report.checked_versions == [2, 6] and report.maintenance_versions == [3, 4, 5]
    assert report.failures == []  # OPTIMIZE and VACUUM are not "WRITE", and not checked
    assert [(r["version"], r["operation"], r["num_files"]) for r in report.per_version] == [
        (2, "WRITE", 6),
        (6, "WRITE", 3),
    ]
    assert xcom_fields(report)["maintenance_versions"] == [3, 4, 5]
    assert report.to_dict()["maintenance_versions"] == [3, 4, 5]

    every = check_commits(_log(path), 1, None, {**spec, "include_maintenance": True})
    assert every.checked_versions == [2, 3, 4, 5, 6] and every.maintenance_versions == []
    assert _failures(every) == [
        (3, "allowed_operations"),
        (4, "allowed_operations"),
        (5, "allowed_operations"),
    ]
    assert validate_commit_checks({"include_maintenance": "yes"}) == {"include_maintenance": True}
    with pytest.raises(InvalidArgumentError, match="include_maintenance"):
        validate_commit_checks({"include_maintenance": "sometimes"})


def test_a_maintenance_commit_is_one_that_changes_no_data(tmp_path: Path) -> None:
    b = _table(tmp_path)  # 0: metaData and protocol: not maintenance
    b.append(["a.parquet", "b.parquet"])  # 1
    b.remove(["a.parquet"], data_change=False, operation="OPTIMIZE")  # 2: dataChange=false only
    b.commit([{"commitInfo": {"operation": "VACUUM START"}}])  # 3: commitInfo only
    b.txn("app", 1)  # 4: txn only
    b.set_properties({"delta.appendOnly": "true"})  # 5: metaData: the definition changed
    b.commit([{"add": {"path": "b.parquet", "partitionValues": {}, "size": 1, "modificationTime": 1,
                       "dataChange": False, "stats": '{"numRecords": 1}'}}])  # 6: statistics backfill  # fmt: skip
    b.remove(["b.parquet"])  # 7: data-changing remove
    report = check_commits(_log(b.path), 0, None, {"append_only": "table"})
    assert report.maintenance_versions == [2, 3, 4, 6]
    assert report.checked_versions == [1, 5, 7]
    assert _failures(report) == [(7, "append_only")]  # the appendOnly table from version 5 on


# -- missing commits ----------------------------------------------------------------------------------------
def _gapped(tmp_path: Path) -> DeltaLogBuilder:
    """Versions 0..10, a checkpoint at 7; commits 4 and 5 are then deleted (as log cleanup would)."""
    b = _table(tmp_path)
    for i in range(1, 11):
        b.append([f"f{i}.parquet"])
        if i == 7:
            b.checkpoint()
    os.remove(b.commit_path(4))
    os.remove(b.commit_path(5))
    return b


def test_missing_commits_fail_naming_the_first_missing_version(tmp_path: Path) -> None:
    b = _gapped(tmp_path)
    report = check_commits(_log(b.path), 2, None, {"max_files": 100})
    assert _failures(report) == [(4, MISSING_COMMITS)]
    assert report.failures[0].message == (
        "2 commits missing from the log (log cleanup?): versions 4..5; checks resume at 7"
    )
    assert report.missing_versions == [4, 5]
    assert report.unchecked_versions == [6]  # its commit is there, the state before it is not
    assert report.checked_versions == [3, 7, 8, 9, 10]
    assert report.seed_versions == [2, 7]
    assert [p["num_files"] for p in report.per_version] == [3, 7, 8, 9, 10]


def test_missing_commits_without_fail_on_data_loss(tmp_path: Path) -> None:
    b = _gapped(tmp_path)
    report = check_commits(_log(b.path), 2, None, {"max_files": 100}, fail_on_data_loss=False)
    assert report.failures == []
    assert report.missing_versions == [4, 5] and report.checked_versions == [3, 7, 8, 9, 10]


def test_a_checkpoint_whose_own_commit_is_gone(tmp_path: Path) -> None:
    """Version 7 is rebuilt from its checkpoint and its state checked; its commit cannot be checked."""
    b = _gapped(tmp_path)
    os.remove(b.commit_path(7))
    report = check_commits(_log(b.path), 2, None, {"allowed_operations": ["WRITE"], "max_files": 8})
    assert _failures(report) == [(4, MISSING_COMMITS), (9, "max_files"), (10, "max_files")]
    assert "versions 4..5, 7; checks resume at 7" in report.failures[0].message
    assert report.missing_versions == [4, 5, 7] and report.checked_versions == [3, 7, 8, 9, 10]


def test_a_start_removed_by_cleanup(tmp_path: Path) -> None:
    """since_version's own state is gone (commits 0..6 deleted, checkpoint at 7 kept)."""
    b = _gapped(tmp_path)
    for v in (0, 1, 2, 3, 6):
        os.remove(b.commit_path(v))
    report = check_commits(_log(b.path), 2, None, {"allowed_operations": ["WRITE"], "no_unknown_removes": True})
    assert _failures(report) == [(3, MISSING_COMMITS)]
    assert report.missing_versions == [3, 4, 5, 6]
    assert report.checked_versions == [7, 8, 9, 10] and report.seed_versions == [7]


def test_a_gap_with_no_checkpoint_after_it(tmp_path: Path) -> None:
    b = _gapped(tmp_path)
    report = check_commits(_log(b.path), 7, None, {})
    assert report.failures == [] and report.checked_versions == [8, 9, 10]
    os.remove(b.commit_path(9))
    report = check_commits(_log(b.path), 7, None, {})
    assert _failures(report) == [(9, MISSING_COMMITS)]
    assert "no checkpoint after them in the range" in report.failures[0].message
    assert report.checked_versions == [8] and report.unchecked_versions == [10]


# -- the incremental summaries against a fresh snapshot at every version -----------------------------------------
def _random_table(tmp_path: Path, seed: int, versions: int = 36) -> DeltaLogBuilder:
    """Appends, deletes, overwrites, deletion-vector updates, re-adds of an active key (stats), a
    path active twice, absolute paths in several spellings, property and schema commits, checkpoints."""
    rng = random.Random(seed)
    b = _table(tmp_path, partition_columns=["date"])
    active: dict[str, dict[str, Any]] = {}  # key -> add body
    n = 0

    def body(path: str, **extra: Any) -> dict[str, Any]:
        return {"path": path, "partitionValues": {"date": rng.choice(["d1", "d2"])}, "size": rng.randint(100, 3000),
                "modificationTime": 1, "dataChange": True, **extra}  # fmt: skip

    def key(add: dict[str, Any]) -> str:
        dv = add.get("deletionVector")
        return add["path"].replace("file://", "") + ("" if dv is None else "#" + dv["pathOrInlineDv"])

    while b.version < versions:
        op = rng.choices(["append", "delete", "overwrite", "dv", "readd", "twice", "other"], [5, 3, 1, 2, 1, 1, 1])[0]
        actions: list[dict[str, Any]] = []
        if op == "append" or not active:
            for _ in range(rng.randint(1, 4)):
                n += 1
                path = f"{b.path}/abs-{n}.parquet" if rng.random() < 0.2 else f"date=d1/f-{n}.parquet"
                actions.append({"add": body(path)})
        elif op == "delete":
            for k in rng.sample(sorted(active), rng.randint(1, min(3, len(active)))):
                gone = active[k]
                spelled = "file://" + gone["path"] if gone["path"].startswith("/") and rng.random() < 0.5 else None
                actions.append({"remove": {**gone, "path": spelled or gone["path"], "dataChange": True}})
        elif op == "overwrite":
            actions = [{"remove": {**a}} for a in active.values()]
            n += 1
            actions.append({"add": body(f"date=d2/o-{n}.parquet")})
        elif op == "dv":
            old = active[rng.choice(sorted(active))]
            card = (old.get("deletionVector") or {}).get("cardinality", 0) + rng.randint(1, 5)
            actions = [{"remove": {**old}}, {"add": {**old, "deletionVector": _dv(card, str(n))}}]
        elif op == "readd":  # the same key again (a stats update): replaces, never doubles
            old = active[rng.choice(sorted(active))]
            actions = [{"add": {**old, "size": rng.randint(100, 3000)}}]
        elif op == "twice":  # a second entry for an active path, under a new DV key
            old = active[rng.choice(sorted(active))]
            n += 1
            actions = [{"add": {**old, "deletionVector": _dv(1, f"x{n}")}}]
        elif rng.random() < 0.5:
            b.set_properties({"p": str(n)})
        else:
            b.add_column(f"c{b.version}")
        if actions:
            b.commit(actions)
            for a in actions:
                if "remove" in a:
                    active.pop(key(a["remove"]), None)
                else:
                    active[key(a["add"])] = a["add"]
        if rng.random() < 0.15:
            b.checkpoint()
    return b


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_per_version_summaries_equal_a_fresh_snapshot_at_every_version(tmp_path: Path, seed: int) -> None:
    b = _random_table(tmp_path, seed)
    log = _log(b.path)
    since = {1: 3, 2: 12, 3: 20}[seed]
    spec = {"small_file_mb": SMALL_MB, "no_duplicate_paths": True, "min_files": 0}
    report = check_commits(log, since, None, spec)
    assert report.checked_versions == list(range(since + 1, b.version + 1))
    threshold = int(SMALL_MB * 1024 * 1024)
    for row in report.per_version:
        snap = _log(b.path).snapshot_at(version=row["version"])
        expected = snap.file_summary(threshold).to_dict()
        assert {k: row[k] for k in expected} == expected, row["version"]
        assert row["distinct_paths"] == snap.num_distinct_paths(), row["version"]
    dupes = [f.version for f in report.failures if f.check == "no_duplicate_paths"]
    assert dupes == [
        v for v in report.checked_versions if (s := log.snapshot_at(version=v)).num_files != s.num_distinct_paths()
    ]


def test_per_version_summaries_on_a_delta_rs_table(tmp_path: Path) -> None:
    from deltalake import DeltaTable, write_deltalake

    rng = random.Random(7)
    path = str(tmp_path / "rs")

    def rows(k: int) -> pa.Table:
        ids = [rng.randrange(1000) for _ in range(k)]
        return pa.table({"id": pa.array(ids, pa.int64()), "part": pa.array([rng.choice("ab") for _ in ids])})

    write_deltalake(path, rows(5), partition_by=["part"])
    for step in range(14):
        op = step % 7
        if op in (0, 1, 4):
            write_deltalake(path, rows(rng.randint(1, 6)), partition_by=["part"], mode="append")
        elif op == 2:
            DeltaTable(path).delete(f"id < {rng.randrange(1000)}")
        elif op == 3:
            DeltaTable(path).create_checkpoint()
            DeltaTable(path).update(updates={"id": "id + 1"}, predicate="part = 'a'")
        elif op == 5:
            DeltaTable(path).optimize.compact()
        else:
            write_deltalake(path, rows(3), partition_by=["part"], mode="overwrite")
    log = _log(path)
    report = check_commits(log, 2, None, {"no_unknown_removes": True, "small_file_mb": SMALL_MB})
    assert report.failures == []
    optimized = [h["version"] for h in log.history() if h["operation"] == "OPTIMIZE" and h["version"] > 2]
    assert optimized and report.maintenance_versions == sorted(optimized)  # skipped, yet applied to the walk
    assert sorted(report.checked_versions + optimized) == list(range(3, log.latest_version() + 1))
    for row in report.per_version:
        expected = log.snapshot_at(version=row["version"]).file_summary(int(SMALL_MB * 1024 * 1024)).to_dict()
        assert {k: row[k] for k in expected} == expected, row["version"]


# -- arguments ------------------------------------------------------------------------------------------
def test_the_spec_is_validated() -> None:
    assert validate_commit_checks(
        '{"append_only": "TABLE", "max_dv_growth": "5", "no_unknown_removes": "true", "min_files": "2"}'
    ) == {"append_only": "table", "max_dv_growth": 5, "no_unknown_removes": True, "min_files": 2}
    assert validate_commit_checks({"max_dv_growth": "{{ params.n }}"}, allow_templates=True) == {}
    for bad in (
        {"append_only": "sometimes"},
        {"protocol_changes": "downgrades"},
        {"schema_changes": "anything"},
        {"max_dv_growth": -1},
        {"allowed_operations": "WRITE"},
        {"max_files": -1},
        {"max_file": 1},
    ):
        with pytest.raises(InvalidArgumentError):
            validate_commit_checks(bad)


def test_range_arguments(tmp_path: Path) -> None:
    b = _table(tmp_path)
    b.append(["a.parquet"])
    log = _log(b.path)
    empty = check_commits(log, 1, None, {"max_files": 0})
    assert empty.checked_versions == [] and empty.failures == [] and empty.seed_versions == []
    assert check_commits(log, 0, 0, {"max_files": 0}).checked_versions == []
    with pytest.raises(VersionNotFoundError):
        check_commits(log, 5)
    with pytest.raises(VersionNotFoundError):
        check_commits(log, 0, 3)
    with pytest.raises(InvalidArgumentError):
        check_commits(log, 1, 0)
    with pytest.raises(InvalidArgumentError):
        check_commits(log, -1)


def test_the_range_is_read_not_the_table(tmp_path: Path) -> None:
    """Only the start is loaded; later versions come from their commit files alone: removing the
    checkpoint files after the start changes nothing."""
    b = _table(tmp_path)
    for i in range(1, 8):
        b.append([f"f{i}.parquet"])
        b.checkpoint()
    copy = tmp_path / "copy"
    shutil.copytree(b.path, copy)
    for v in range(3, 8):
        os.remove(copy / "_delta_log" / f"{v:020d}.checkpoint.parquet")
    report = check_commits(_log(copy), 2, None, {"min_files": 1})
    assert report.seed_versions == [2] and report.checked_versions == [3, 4, 5, 6, 7]
    assert report.to_dict()["per_version"][-1]["num_files"] == 7
