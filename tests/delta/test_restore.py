"""RESTORE against delta-rs: delta-rs writes the tables (appends, deletes, overwrites, a schema change;
partitioned and not), then restores a copy with `DeltaTable.restore` while we restore the other; both must
hold the same active files and rows, those of the version restored, and delta-rs must read our commit and
time travel across it. Files gone from storage refuse the restore (naming them) unless a partial restore is
asked; a dry run's plan applied later must still match; the protocol is never downgraded; a concurrent
commit is a typed conflict.
"""

from __future__ import annotations

import io
import json
import random
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

deltalake = pytest.importorskip("deltalake")
from conftest import copy_table  # noqa: E402
from deltalake import DeltaTable, write_deltalake  # noqa: E402
from support.faults import RacingStore  # noqa: E402

from airflow_delta_provider.cli import main  # noqa: E402
from airflow_delta_provider.commands.command import execute, run  # noqa: E402
from airflow_delta_provider.commands.request import Request  # noqa: E402
from airflow_delta_provider.delta.delta_log import DeltaLog  # noqa: E402
from airflow_delta_provider.delta.errors import (  # noqa: E402
    ConcurrentAppendError,
    InvalidArgumentError,
    OperationNotAllowedError,
    UnsupportedFeatureError,
    error_from_dict,
)
from airflow_delta_provider.delta.maintenance.restore import restore  # noqa: E402
from airflow_delta_provider.delta.protocol.actions import Metadata, Protocol  # noqa: E402
from airflow_delta_provider.delta.protocol.history import format_ms  # noqa: E402
from airflow_delta_provider.delta.protocol.restore import (  # noqa: E402
    RestoreMissingFilesError,
    RestorePlanRefusedError,
    merge_protocols,
)
from airflow_delta_provider.delta.protocol.table_features import check_can_write  # noqa: E402


# -- tables and oracles ---------------------------------------------------------------------------------
def batch(rng: random.Random, n: int, *, extra: bool = False) -> pa.Table:
    cols: dict[str, Any] = {
        "id": [rng.randrange(10**6) for _ in range(n)],
        "part": [rng.choice(["a", "b", "c d", None]) for _ in range(n)],
        "n": [None if rng.random() < 0.1 else rng.randrange(100) for _ in range(n)],
        "s": [rng.choice(["x", "y", "zz", None]) for _ in range(n)],
    }
    fields = [("id", pa.int64()), ("part", pa.string()), ("n", pa.int64()), ("s", pa.string())]
    if extra:
        cols["extra"] = [rng.random() for _ in range(n)]
        fields.append(("extra", pa.float64()))
    return pa.table(cols, schema=pa.schema(fields))


def random_table(path: Path, seed: int, *, partitioned: bool) -> int:
    """A delta-rs table of random appends, deletes and overwrites (one with a new column in some seeds);
    the latest version."""
    rng = random.Random(seed)
    by = ["part"] if partitioned else None
    extra = False
    write_deltalake(str(path), batch(rng, 20), mode="append", partition_by=by)
    for _ in range(rng.randint(5, 8)):
        op = rng.choice(["append", "append", "delete", "overwrite", "schema"])
        if op == "append":
            write_deltalake(str(path), batch(rng, rng.randint(1, 15), extra=extra), mode="append", partition_by=by)
        elif op == "delete":
            DeltaTable(str(path)).delete(f"n < {rng.randrange(40)}")
        elif op == "overwrite":
            write_deltalake(str(path), batch(rng, 12, extra=extra), mode="overwrite", partition_by=by)
        else:
            extra = not extra
            write_deltalake(
                str(path), batch(rng, 8, extra=extra), mode="overwrite", partition_by=by, schema_mode="overwrite"
            )
    return DeltaTable(str(path)).version()


def rows(path: Path, version: int | None = None) -> list[dict[str, Any]]:
    """What delta-rs reads, columns and rows in a canonical order."""
    t = DeltaTable(str(path), version=version).to_pyarrow_table()
    t = t.select(sorted(t.column_names))
    return sorted(t.to_pylist(), key=lambda r: json.dumps(r, sort_keys=True, default=str))


def active(path: Path, version: int | None = None) -> set[str]:
    return set(pa.table(DeltaTable(str(path), version=version).get_add_actions(flatten=True))["path"].to_pylist())


def log_listing(path: Path) -> list[str]:
    return sorted(p.name for p in (path / "_delta_log").iterdir())


def last_commit(path: Path) -> list[dict[str, Any]]:
    name = max(p.name for p in (path / "_delta_log").glob("*.json"))
    return [json.loads(line) for line in (path / "_delta_log" / name).read_text().splitlines()]


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()


# -- the main property: the same table as delta-rs's restore, and the version restored --------------------
@pytest.mark.parametrize(("seed", "partitioned"), [(1, True), (2, False), (3, True), (4, False), (5, True), (6, False)])
def test_restore_equals_delta_rs(tmp_path: Path, seed: int, partitioned: bool) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    latest = random_table(ours, seed, partitioned=partitioned)
    shutil.copytree(ours, theirs, copy_function=shutil.copy2)
    rng = random.Random(seed * 7)
    for _ in range(2):  # a second round restores over the first one's commit
        target = rng.randrange(latest)
        before = rows(ours)
        result = restore(str(ours), version=target, dry_run=False)
        metrics = DeltaTable(str(theirs)).restore(target)
        assert result.version == latest + 1 == DeltaTable(str(ours)).version()
        assert active(ours) == active(theirs) == active(ours, target)
        assert rows(ours) == rows(theirs) == rows(ours, target)
        assert (
            DeltaTable(str(ours)).schema() == DeltaTable(str(theirs)).schema() == DeltaTable(str(ours), target).schema()
        )
        assert rows(ours, latest) == before  # time travel across our RESTORE
        d = result.to_dict()
        assert d["metrics"]["numRestoredFiles"] == metrics["numRestoredFile"]
        assert d["metrics"]["numRemovedFiles"] == metrics["numRemovedFile"]
        assert d["metrics"]["numOfFilesAfterRestore"] == len(active(ours, target))
        history = DeltaTable(str(ours)).history(1)[0]
        assert history["operation"] == "RESTORE"
        assert history["operationParameters"]["version"] == str(target)
        assert {k: int(v) for k, v in history["operationMetrics"].items()} == d["metrics"]
        lines = last_commit(ours)
        assert all(next(iter(a.values()))["dataChange"] is True for a in lines if "add" in a or "remove" in a)
        latest = result.version


def test_restore_to_a_timestamp(tmp_path: Path) -> None:
    path = tmp_path / "t"
    latest = random_table(path, 11, partitioned=True)
    times = dict(DeltaLog(str(path)).commit_timestamps())
    target = latest - 2
    result = restore(str(path), timestamp=times[target] + (times[target + 1] - times[target]) // 2, dry_run=False)
    assert result.plan.target_version == target
    assert active(path) == active(path, target) and rows(path) == rows(path, target)
    params = DeltaTable(str(path)).history(1)[0]["operationParameters"]
    assert params["version"] is None and params["timestamp"]
    # the CLI takes ISO-8601 text, recorded as given
    iso = format_ms(times[target - 1])
    code, out, err = cli("restore", str(path), "--timestamp", iso, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert (doc["target_version"], doc["timestamp"], doc["version"]) == (target - 1, iso, None)
    # a time after the last commit resolves to the latest version, which is not older than itself
    with pytest.raises(InvalidArgumentError, match="must be older than the latest"):
        restore(str(path), timestamp=max(DeltaLog(str(path)).commit_timestamps())[1] + 10**6)


def test_dry_run_writes_nothing_and_refusals(tmp_path: Path) -> None:
    path = tmp_path / "t"
    latest = random_table(path, 12, partitioned=False)
    listing = log_listing(path)
    result = restore(str(path), version=0)
    assert result.dry_run and result.version is None and log_listing(path) == listing
    assert result.to_dict()["metrics"]["numOfFilesAfterRestore"] == len(active(path, 0))
    for bad in ({"version": latest}, {"version": latest + 5}, {}, {"version": 0, "timestamp": 0}, {"version": -1}):
        with pytest.raises(InvalidArgumentError):
            restore(str(path), dry_run=False, **bad)
    assert log_listing(path) == listing


# -- files gone from storage --------------------------------------------------------------------------------
def _three_versions(path: Path) -> tuple[str, str]:
    """v0 and v1 append one file each; v2 overwrites them. The two files v1 needs: v0's, then v1's own."""
    write_deltalake(str(path), pa.table({"a": [1, 2]}), mode="append")
    write_deltalake(str(path), pa.table({"a": [3]}), mode="append")
    write_deltalake(str(path), pa.table({"a": [9]}), mode="overwrite")
    (first,) = active(path, 0)
    (second,) = active(path, 1) - {first}
    return first, second


def test_a_file_deleted_by_hand_refuses_unless_partial(tmp_path: Path) -> None:
    path = tmp_path / "t"
    first, second = _three_versions(path)
    (path / first).unlink()
    theirs = tmp_path / "theirs"
    shutil.copytree(path, theirs, copy_function=shutil.copy2)
    listing = log_listing(path)
    with pytest.raises(RestoreMissingFilesError) as info:
        restore(str(path), version=1, dry_run=False)
    assert info.value.missing_files == [first] and info.value.num_missing == 1 and info.value.version == 1
    assert log_listing(path) == listing  # nothing committed
    with pytest.raises(Exception, match="missing"):  # delta-rs refuses too
        DeltaTable(str(theirs)).restore(1)
    # the refusal survives a job's JSON result
    back = error_from_dict(json.loads(json.dumps(info.value.to_dict())))
    assert isinstance(back, RestoreMissingFilesError) and back.missing_files == [first]

    result = restore(str(path), version=1, allow_partial=True, dry_run=False)
    d = result.to_dict()
    assert d["missing_files"] == [first] and d["files_restored"] == [second]
    assert d["metrics"]["numOfFilesAfterRestore"] == 1 and d["metrics"]["numRestoredFiles"] == 1
    assert active(path) == {second} and rows(path) == [{"a": 3}]


def test_vacuumed_files_refuse_and_the_cli_names_them(tmp_path: Path) -> None:
    path = tmp_path / "t"
    first, second = _three_versions(path)
    DeltaTable(str(path)).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    assert not (path / first).exists() and not (path / second).exists()
    code, out, err = cli("restore", str(path), "--version", "1", "--apply", "--json")
    doc = json.loads(err)
    assert code == 1 and out == "" and doc["error_class"] == "RestoreMissingFilesError"
    assert sorted(doc["missing_files"]) == sorted([first, second]) and doc["num_missing"] == 2
    code, out, err = cli("restore", str(path), "--version", "1", "--allow-partial", "--apply", "--json")
    doc = json.loads(err or out)
    assert code == 0, err
    assert doc["version"] == DeltaTable(str(path)).version() and sorted(doc["missing_files"]) == sorted([first, second])
    assert doc["metrics"]["numOfFilesAfterRestore"] == 0 and "plan" not in doc
    assert DeltaTable(str(path)).to_pyarrow_table().num_rows == 0


# -- deletion vectors ----------------------------------------------------------------------------------------
def test_deletion_vectors_restore_like_delta_rs(tmp_path: Path) -> None:
    ours = copy_table("delta-rs/table-with-dv-small", tmp_path / "a")
    theirs = copy_table("delta-rs/table-with-dv-small", tmp_path / "b")

    def query(path: Path, version: int | None = None) -> list[int]:
        qb = deltalake.QueryBuilder().register("t", DeltaTable(str(path), version=version))
        return sorted(r["value"] for r in pa.table(qb.execute("SELECT value FROM t").read_all()).to_pylist())

    result = restore(str(ours), version=0, dry_run=False)
    metrics = DeltaTable(str(theirs)).restore(0)
    assert (metrics["numRestoredFile"], metrics["numRemovedFile"]) == (1, 1)
    d = result.to_dict()["metrics"]
    assert (d["numRestoredFiles"], d["numRemovedFiles"]) == (1, 1)  # same path, another deletion vector
    assert query(ours) == query(theirs) == list(range(10))
    lines = last_commit(ours)
    assert [a["remove"].get("deletionVector") is not None for a in lines if "remove" in a] == [True]
    assert [a["add"].get("deletionVector") for a in lines if "add" in a] == [None]
    # back to version 1: its deletion vector file must be there
    dv = next(ours.glob("deletion_vector_*.bin"))
    dv.rename(tmp_path / dv.name)
    with pytest.raises(RestoreMissingFilesError):
        restore(str(ours), version=1, dry_run=False)
    (tmp_path / dv.name).rename(dv)
    restore(str(ours), version=1, dry_run=False)
    assert query(ours) == query(ours, 1) == list(range(1, 9))


# -- protocol and metadata ------------------------------------------------------------------------------------
def test_merge_protocols_never_downgrades() -> None:
    legacy, dv = Protocol(1, 2), Protocol(3, 7, ("deletionVectors",), ("deletionVectors",))
    assert merge_protocols(legacy, Protocol(1, 4)) == Protocol(1, 4)
    assert merge_protocols(Protocol(2, 5), legacy) == Protocol(2, 5)
    merged = merge_protocols(legacy, dv)
    assert merged == Protocol(3, 7, ("deletionVectors",), ("deletionVectors", "appendOnly", "invariants"))
    merged = merge_protocols(Protocol(2, 5), dv)
    assert merged.reader_features == ("deletionVectors", "columnMapping")
    assert set(merged.writer_features or ()) == {
        "deletionVectors",
        "appendOnly",
        "invariants",
        "checkConstraints",
        "changeDataFeed",
        "generatedColumns",
        "columnMapping",
    }
    merged = merge_protocols(Protocol(2, 5), Protocol(1, 7, None, ("appendOnly",)))
    assert (
        merged.min_reader_version == 2 and merged.reader_features is None and "columnMapping" in merged.writer_features
    )
    assert merge_protocols(dv, dv) == dv


def test_protocol_is_kept_and_metadata_restored(tmp_path: Path) -> None:
    path = tmp_path / "t"
    write_deltalake(str(path), pa.table({"a": [1]}), mode="append")
    write_deltalake(str(path), pa.table({"a": [2]}), mode="append")
    DeltaTable(str(path)).alter.add_feature(
        deltalake.TableFeatures.TimestampWithoutTimezone, allow_protocol_versions_increase=True
    )
    DeltaTable(str(path)).alter.set_table_properties({"delta.logRetentionDuration": "interval 40 days"})
    upgraded = DeltaTable(str(path)).protocol()
    result = restore(str(path), version=0, dry_run=False)
    # the latest protocol already lists every feature of version 0's (1, 2): nothing is downgraded or added
    assert result.plan.metadata_changed and not result.plan.protocol_changed
    dt_ = DeltaTable(str(path))
    assert dt_.protocol().min_reader_version == upgraded.min_reader_version == 3
    assert "timestampNtz" in (dt_.protocol().reader_features or [])
    assert "delta.logRetentionDuration" not in dt_.metadata().configuration
    assert rows(path) == [{"a": 1}]


def test_restore_obligations() -> None:
    meta = Metadata(id="x", schema_string='{"type":"struct","fields":[]}')
    clustered = Protocol(1, 7, None, ("clustering", "domainMetadata"))
    with pytest.raises(UnsupportedFeatureError, match="clustering"):
        check_can_write(clustered, meta, ["restore"])
    check_can_write(Protocol(3, 7, ("deletionVectors",), ("deletionVectors",)), meta, ["restore"])


def test_append_only_table_refuses_removes(tmp_path: Path) -> None:
    path = tmp_path / "t"
    write_deltalake(str(path), pa.table({"a": [1]}), mode="append", configuration={"delta.appendOnly": "true"})
    write_deltalake(str(path), pa.table({"a": [2]}), mode="append")
    listing = log_listing(path)
    with pytest.raises(OperationNotAllowedError, match="appendOnly"):
        restore(str(path), version=0, dry_run=False)
    assert log_listing(path) == listing


# -- a plan applied later, and races --------------------------------------------------------------------------
def test_a_dry_run_plan_applies_only_while_it_matches(tmp_path: Path) -> None:
    path = tmp_path / "t"
    latest = random_table(path, 13, partitioned=True)
    planned = restore(str(path), version=1).to_dict()
    # a commit that touches no file leaves the plan as it was
    DeltaTable(str(path)).alter.set_table_properties({"delta.logRetentionDuration": "interval 40 days"})
    moved = DeltaTable(str(path)).version()
    result = restore(str(path), plan=planned["plan"], dry_run=False)
    assert result.version == moved + 1 and result.plan.target_version == 1
    assert active(path) == active(path, 1)

    stale = restore(str(path), version=2).to_dict()["plan"]
    write_deltalake(str(path), batch(random.Random(1), 3), mode="append", partition_by=["part"])
    listing = log_listing(path)
    with pytest.raises(RestorePlanRefusedError, match="moved"):
        restore(str(path), plan=stale, dry_run=False)
    with pytest.raises(RestorePlanRefusedError):
        restore(str(path), plan={**stale, "table_id": "another"}, dry_run=False)
    with pytest.raises(RestorePlanRefusedError):
        restore(str(path), plan={**stale, "table": "file:///elsewhere"}, dry_run=False)
    assert log_listing(path) == listing and latest < moved


def test_the_command_layer_applies_a_kept_plan(tmp_path: Path) -> None:
    path = tmp_path / "t"
    random_table(path, 14, partitioned=False)
    uri = str(tmp_path / "plan.json")
    code, dry = execute(Request.make(table=str(path), action="restore", version=1), result_uri=uri)
    assert code == 0 and dry["status"] == "success" and dry["version"] is None
    code, done = execute(Request.make(table=str(path), action="restore", plan_uri=uri, apply=True))
    assert code == 0, done
    assert done["version"] == DeltaTable(str(path)).version() and done["target_version"] == 1
    assert active(path) == active(path, 1)
    with pytest.raises(InvalidArgumentError, match="version or a timestamp"):
        run(Request.make(table=str(path), action="restore", apply=True))


def test_a_concurrent_append_is_a_conflict(tmp_path: Path) -> None:
    path = tmp_path / "t"
    random_table(path, 15, partitioned=True)
    race = lambda: write_deltalake(str(path), batch(random.Random(2), 4), mode="append", partition_by=["part"])  # noqa: E731
    dlog = DeltaLog(str(path), store=RacingStore(race))
    with pytest.raises(ConcurrentAppendError):
        restore(dlog, version=1, dry_run=False)
    assert DeltaTable(str(path)).history(1)[0]["operation"] == "WRITE"  # the winner only
