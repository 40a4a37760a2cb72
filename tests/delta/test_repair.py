"""Repair (FSCK) against delta-rs: on delta-rs tables whose data files were deleted by hand, our dry run names
exactly the files `DeltaTable.repair(dry_run=True)` names and writes nothing; applied, one `FSCK` commit
removes them (`dataChange=true`, with their partition values, size and deletion vector), delta-rs reads the
table again and finds nothing left to repair, and the result is the table delta-rs's own repair makes. A
table with nothing missing commits nothing; a concurrent removal of a file being repaired is a typed
conflict.
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
from airflow_delta_provider.commands.command import run  # noqa: E402
from airflow_delta_provider.commands.request import Request  # noqa: E402
from airflow_delta_provider.delta.delta_log import DeltaLog  # noqa: E402
from airflow_delta_provider.delta.errors import ConcurrentDeleteReadError, OperationNotAllowedError  # noqa: E402
from airflow_delta_provider.delta.maintenance.repair import missing_files, repair  # noqa: E402
from airflow_delta_provider.delta.protocol.actions import decode_path  # noqa: E402


def batch(rng: random.Random, n: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array([rng.randrange(10**6) for _ in range(n)], pa.int64()),
            "part": pa.array([rng.choice(["a", "b c", "d%e", None]) for _ in range(n)], pa.string()),
            "n": pa.array([rng.randrange(100) for _ in range(n)], pa.int64()),
        }
    )


def random_table(path: Path, seed: int, *, partitioned: bool) -> None:
    rng = random.Random(seed)
    by = ["part"] if partitioned else None
    for _ in range(rng.randint(4, 8)):
        write_deltalake(str(path), batch(rng, rng.randint(1, 12)), mode="append", partition_by=by)
        if rng.random() < 0.3:
            DeltaTable(str(path)).delete(f"n < {rng.randrange(30)}")


def active(path: Path) -> dict[str, int]:
    actions = pa.table(DeltaTable(str(path)).get_add_actions(flatten=True))
    return dict(zip(actions["path"].to_pylist(), actions["num_records"].to_pylist(), strict=True))


def delete_some(path: Path, rng: random.Random) -> list[str]:
    files = sorted(active(path))
    gone = rng.sample(files, rng.randint(1, max(1, len(files) // 2)))
    for f in gone:
        (path / decode_path(f)).unlink()
    return sorted(gone)


def log_listing(path: Path) -> list[str]:
    return sorted(p.name for p in (path / "_delta_log").iterdir())


def last_commit(path: Path) -> list[dict[str, Any]]:
    name = max(p.name for p in (path / "_delta_log").glob("*.json"))
    return [json.loads(line) for line in (path / "_delta_log" / name).read_text().splitlines()]


@pytest.mark.parametrize(("seed", "partitioned"), [(1, True), (2, False), (3, True), (4, False), (5, True), (6, True)])
def test_repair_equals_delta_rs(tmp_path: Path, seed: int, partitioned: bool) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    random_table(ours, seed, partitioned=partitioned)
    rows_before = sum(active(ours).values())
    gone = delete_some(ours, random.Random(seed))
    shutil.copytree(ours, theirs, copy_function=shutil.copy2)
    listing = log_listing(ours)
    version = DeltaTable(str(ours)).version()

    dry = repair(str(ours))
    # delta-rs names a file by its object-store location (the logged path decoded once): `b%20c` for `b%2520c`
    expected = sorted(DeltaTable(str(ours)).repair(dry_run=True)["files_removed"])
    assert sorted(decode_path(p) for p in dry.files_removed) == expected
    assert sorted(dry.files_removed) == gone
    assert log_listing(ours) == listing and dry.version is None  # nothing written

    done = repair(str(ours), dry_run=False)
    DeltaTable(str(theirs)).repair(dry_run=False)
    assert done.version == version + 1 == DeltaTable(str(ours)).version()
    assert active(ours) == active(theirs)
    assert DeltaTable(str(ours)).to_pyarrow_table().num_rows == rows_before - done.to_dict()["rows_lost"]
    assert DeltaTable(str(ours)).repair(dry_run=True)["files_removed"] == []
    info = DeltaTable(str(ours)).history(1)[0]
    assert info["operation"] == "FSCK" and info["operationParameters"] == {}
    assert int(info["operationMetrics"]["numFilesRemoved"]) == len(gone)
    assert sorted(json.loads(info["operationMetrics"]["files_removed"])) == gone  # as logged
    removes = [a["remove"] for a in last_commit(ours) if "remove" in a]
    assert sorted(r["path"] for r in removes) == gone
    assert all(r["dataChange"] is True and "partitionValues" in r and "size" in r for r in removes)
    assert repair(str(ours), dry_run=False).version is None  # nothing left: no commit


def test_nothing_missing_commits_nothing(tmp_path: Path) -> None:
    path = tmp_path / "t"
    random_table(path, 7, partitioned=True)
    listing = log_listing(path)
    result = repair(str(path), dry_run=False)
    assert result.version is None and result.files_removed == [] and log_listing(path) == listing
    assert DeltaTable(str(path)).repair(dry_run=True)["files_removed"] == []
    assert result.to_dict()["num_files_checked"] == len(active(path))


def test_deletion_vector_is_carried_by_the_remove(tmp_path: Path) -> None:
    path = copy_table("delta-rs/table-with-dv-small", tmp_path)
    data = next(path.glob("part-*.parquet"))
    data.unlink()
    assert repair(str(path)).files_removed == DeltaTable(str(path)).repair(dry_run=True)["files_removed"]
    assert repair(str(path), dry_run=False).version == 2
    (remove,) = [a["remove"] for a in last_commit(path) if "remove" in a]
    assert remove["deletionVector"]["cardinality"] == 2  # the add's key: path and deletion vector
    assert DeltaLog(str(path)).update().num_files == 0
    assert DeltaTable(str(path)).version() == 2 and DeltaTable(str(path)).get_add_actions().num_rows == 0


def test_missing_files_is_bounded_and_ordered(tmp_path: Path) -> None:
    path = tmp_path / "t"
    random_table(path, 8, partitioned=True)
    gone = delete_some(path, random.Random(3))
    snap = DeltaLog(str(path)).update()
    files = sorted(snap.all_files(), key=lambda f: f.path)
    for workers in (1, 3, 64):
        found = missing_files(snap.store, snap.table, files, max_workers=workers)
        assert [f.path for f in found] == gone
    assert missing_files(snap.store, snap.table, []) == []


def test_cli_and_command_layer(tmp_path: Path) -> None:
    path = tmp_path / "t"
    random_table(path, 9, partitioned=False)
    gone = delete_some(path, random.Random(4))
    out, err = io.StringIO(), io.StringIO()
    assert main(["repair", str(path), "--json"], out=out, err=err) == 0, err.getvalue()
    doc = json.loads(out.getvalue())
    assert doc["dry_run"] is True and doc["version"] is None and sorted(doc["files_removed"]) == gone
    assert doc["metrics"]["numFilesRemoved"] == len(gone)
    out = io.StringIO()
    assert main(["repair", str(path)], out=out, err=err) == 0
    assert f"{len(gone)} of" in out.getvalue() and "--apply" in out.getvalue()
    body = run(Request.make(table=str(path), action="repair", apply=True)).body
    assert body["version"] == DeltaTable(str(path)).version() and sorted(body["files_removed"]) == gone


def test_append_only_table_refuses_apply(tmp_path: Path) -> None:
    path = tmp_path / "t"
    write_deltalake(str(path), batch(random.Random(1), 5), mode="append", configuration={"delta.appendOnly": "true"})
    gone = delete_some(path, random.Random(1))
    assert repair(str(path)).files_removed == gone  # the dry run reports
    listing = log_listing(path)
    with pytest.raises(OperationNotAllowedError, match="appendOnly"):
        repair(str(path), dry_run=False)
    assert log_listing(path) == listing


def test_a_concurrent_repair_is_a_conflict(tmp_path: Path) -> None:
    path = tmp_path / "t"
    random_table(path, 10, partitioned=True)
    delete_some(path, random.Random(5))
    dlog = DeltaLog(str(path), store=RacingStore(lambda: DeltaTable(str(path)).repair(dry_run=False)))
    with pytest.raises(ConcurrentDeleteReadError):
        repair(dlog, dry_run=False)
    assert DeltaTable(str(path)).history(1)[0]["operation"] == "FSCK"  # delta-rs's, the winner
    assert DeltaTable(str(path)).repair(dry_run=True)["files_removed"] == []
