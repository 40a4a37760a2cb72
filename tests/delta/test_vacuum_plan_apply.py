"""Applying a saved VACUUM plan that was edited by hand (issue 28, defect 3), and the grace period for
untracked files (in-flight writes).

A plan carries the evidence of its listing (each entry's size and modification time as listed); apply
deletes an entry only when the file as it is now still matches it, is still untracked (or an expired
tombstone), older than the cutoff and, when untracked, older than the grace period. An entry no planner
could have written (outside the table root, another bucket, `_delta_log`) or a plan for another table
refuses the whole plan, before anything is deleted.

Tables are written by delta-rs; time moves through the `clock` argument.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

deltalake = pytest.importorskip("deltalake")
from deltalake import DeltaTable, write_deltalake  # noqa: E402

from airflow_delta_provider.delta.delta_log import DeltaLog  # noqa: E402
from airflow_delta_provider.delta.errors import DeltaError, InvalidArgumentError  # noqa: E402
from airflow_delta_provider.delta.maintenance.vacuum import vacuum  # noqa: E402
from airflow_delta_provider.delta.protocol.actions import AddFile  # noqa: E402

DAY_MS = 86_400_000
HOUR_MS = 3_600_000
OLD = time.time() - 30 * 86_400


def now_ms() -> int:
    return int(time.time() * 1000)


def clock_at(ms: int) -> Callable[[], int]:
    return lambda: ms


def _data(ids: list[int], part: str) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "p": [part] * len(ids)})


def _table(tmp_path: Path) -> Path:
    """v0: p=a; v1: p=b; v2: overwrite p=a (v0's and v1's files tombstoned now); an old stray."""
    path = tmp_path / "t"
    write_deltalake(str(path), _data([0, 1, 2], "a"), partition_by=["p"])
    write_deltalake(str(path), _data([3, 4, 5, 6], "b"), partition_by=["p"], mode="append")
    write_deltalake(str(path), _data([10, 11], "a"), partition_by=["p"], mode="overwrite")
    _plant(path, "p=a/stray-old.parquet")
    return path


def _plant(path: Path, rel: str, *, mtime: float | None = OLD, data: bytes = b"stray") -> Path:
    f = path / rel
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_bytes(data)
    if mtime is not None:
        os.utime(f, (mtime, mtime))
    return f


def _files(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*") if p.is_file() and "_delta_log" not in p.parts}


def _rows(path: Path) -> list[int]:
    return sorted(DeltaTable(str(path)).to_pyarrow_table().column("id").to_pylist())


def _entry(path: Path, rel: str) -> dict:
    """A plan entry for `rel` with the evidence a listing would have given (its size and mtime now)."""
    st = (path / rel).lstat()
    return {"path": rel, "size": st.st_size, "modification_time": st.st_mtime_ns // 1_000_000}


# -- defect 3, point 1: an edited-in fresh untracked file -------------------------------------------------
def test_an_edited_in_fresh_untracked_file_is_not_deleted(tmp_path: Path) -> None:
    """A plan made today (default 7-day retention: only the old stray), then a file a writer just wrote is
    added to it by hand, once as a bare path and once with its true size and mtime: both are dropped and
    reported, the planned stray is deleted."""
    path = _table(tmp_path)
    plan = vacuum(str(path)).to_dict()
    assert [f["path"] for f in plan["files"]] == ["p=a/stray-old.parquet"]
    bare = _plant(path, "p=a/part-00000-in-flight-1.parquet", mtime=None)
    forged = _plant(path, "p=b/part-00000-in-flight-2.parquet", mtime=None)
    plan["files"] += [
        {"path": "p=a/part-00000-in-flight-1.parquet", "size": 5},
        _entry(path, str(forged.relative_to(path))),
    ]
    result = vacuum(str(path), plan=plan, dry_run=False, audit=False)
    assert bare.exists() and forged.exists()
    assert sorted(f.path for f in result.dropped) == sorted(
        ["p=a/part-00000-in-flight-1.parquet", "p=b/part-00000-in-flight-2.parquet"]
    )
    assert result.deleted == 1 and not (path / "p=a/stray-old.parquet").exists()
    reasons = result.to_dict()["dropped"]
    assert {d["path"]: d["reason"] for d in reasons} == {
        "p=a/part-00000-in-flight-1.parquet": "no-evidence",
        "p=b/part-00000-in-flight-2.parquet": "not-older-than-cutoff",
    }


def test_an_entry_whose_file_changed_since_the_listing_is_dropped(tmp_path: Path) -> None:
    """The plan's evidence no longer matches the file: a different size, a different mtime, or an entry
    whose evidence was edited. None is deleted; the untouched entries are."""
    path = _table(tmp_path)
    for rel in ("p=a/stray-1.parquet", "p=a/stray-2.parquet", "p=a/stray-3.parquet"):
        _plant(path, rel)
    plan = vacuum(str(path)).to_dict()
    assert len(plan["files"]) == 4 and all("modification_time" in f for f in plan["files"])
    _plant(path, "p=a/stray-1.parquet", data=b"rewritten, longer")  # size changed (mtime kept old)
    os.utime(path / "p=a/stray-2.parquet", (OLD - 60, OLD - 60))  # mtime changed (size kept)
    entry = next(f for f in plan["files"] if f["path"] == "p=a/stray-3.parquet")
    entry["size"] += 1  # the evidence edited
    result = vacuum(str(path), plan=plan, dry_run=False, audit=False)
    assert {f.path for f in result.dropped} == {"p=a/stray-1.parquet", "p=a/stray-2.parquet", "p=a/stray-3.parquet"}
    assert {d["reason"] for d in result.to_dict()["dropped"]} == {"changed"}
    assert all((path / p).exists() for p in ("p=a/stray-1.parquet", "p=a/stray-2.parquet", "p=a/stray-3.parquet"))
    assert result.deleted == 1 and not (path / "p=a/stray-old.parquet").exists()


# -- defect 3, point 2: a directory entry ---------------------------------------------------------------
@pytest.mark.parametrize("entry", ["p=b", "p=b/", "keep"])
def test_a_directory_entry_is_dropped_not_deleted_and_the_rest_goes_on(tmp_path: Path, entry: str) -> None:
    path = _table(tmp_path)
    _plant(path, "deep/er/x.bin")
    _plant(path, "keep/.marker")  # hidden: never planned, so `keep` is never left empty
    plan = vacuum(str(path)).to_dict()
    plan["files"].insert(0, {"path": entry, "size": 4096, "modification_time": int(OLD * 1000)})
    before = _files(path)
    result = vacuum(str(path), plan=plan, dry_run=False, audit=False)  # no IsADirectoryError
    assert [f.path for f in result.dropped] == [entry]
    assert result.to_dict()["dropped"][0]["reason"] == "directory"
    assert (path / entry.rstrip("/")).is_dir()
    assert result.deleted == 2 and _files(path) == before - {"p=a/stray-old.parquet", "deep/er/x.bin"}


# -- defect 3, point 3: `deleted` counts only what was deleted ----------------------------------------------
def test_deleted_counts_only_files_that_existed(tmp_path: Path) -> None:
    path = _table(tmp_path)
    _plant(path, "p=b/stray-gone.parquet")
    plan = vacuum(str(path), clock=clock_at(now_ms() + 8 * DAY_MS)).to_dict()
    assert len(plan["files"]) == 4  # two tombstoned files and two strays
    (path / "p=b/stray-gone.parquet").unlink()  # removed by someone else before the apply
    result = vacuum(str(path), plan=plan, dry_run=False, clock=clock_at(now_ms() + 8 * DAY_MS))
    assert result.deleted == 3 and [f.path for f in result.missing] == ["p=b/stray-gone.parquet"]
    gone = next(f for f in plan["files"] if f["path"] == "p=b/stray-gone.parquet")
    assert result.deleted_bytes == plan["bytes"] - gone["size"] and not result.dropped
    d = result.to_dict()
    assert d["num_missing"] == 1 and d["missing"] == [gone]
    end = DeltaTable(str(path)).history(1)[0]
    assert end["operation"] == "VACUUM END" and int(end["operationMetrics"]["numDeletedFiles"]) == 3


# -- refusals: nothing is deleted -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "entry",
    [
        "../outside",
        "p=a/../../outside",
        "/etc/hostname",
        "file:///etc/hostname",
        "s3://other-bucket/t/part-0.parquet",
        "_delta_log/00000000000000000000.json",
        "./_delta_log/_last_checkpoint",
        "_delta_log",
        "",
    ],
)
def test_an_entry_outside_the_table_or_in_the_log_refuses_the_plan(tmp_path: Path, entry: str) -> None:
    path = _table(tmp_path)
    (tmp_path / "outside").write_bytes(b"x")
    plan = vacuum(str(path)).to_dict()
    plan["files"].append({"path": entry, "size": 1, "modification_time": int(OLD * 1000)})
    before, log_before = _files(path), sorted(os.listdir(path / "_delta_log"))
    with pytest.raises(InvalidArgumentError) as info:
        vacuum(str(path), plan=plan, dry_run=False)
    err = info.value
    assert type(err).__name__ == "VacuumPlanRefusedError" and isinstance(err, DeltaError)
    assert err.table == DeltaLog(str(path)).table_uri and err.file == entry
    assert _files(path) == before and (tmp_path / "outside").exists()  # nothing deleted, not even the stray
    assert sorted(os.listdir(path / "_delta_log")) == log_before  # no VACUUM START either


def test_a_plan_for_another_table_or_a_recreated_table_is_refused(tmp_path: Path) -> None:
    path = _table(tmp_path)
    plan = vacuum(str(path)).to_dict()
    before = _files(path)
    with pytest.raises(InvalidArgumentError, match="not") as info:
        vacuum(str(path), plan=dict(plan, table="file:///elsewhere"), dry_run=False)
    assert type(info.value).__name__ == "VacuumPlanRefusedError"
    # the same location, recreated: another table id
    other = tmp_path / "other"
    write_deltalake(str(other), _data([1], "a"), partition_by=["p"])
    with pytest.raises(InvalidArgumentError, match="table id") as info:
        vacuum(str(path), plan=dict(plan, table_id=DeltaLog(str(other)).update().metadata.id), dry_run=False)
    assert type(info.value).__name__ == "VacuumPlanRefusedError"
    with pytest.raises(InvalidArgumentError, match="newer"):  # a plan made at a version the table never had
        vacuum(str(path), plan=dict(plan, version=plan["version"] + 5), dry_run=False)
    assert _files(path) == before


def test_hidden_and_duplicate_entries_are_dropped(tmp_path: Path) -> None:
    path = _table(tmp_path)
    _plant(path, ".hidden")
    _plant(path, "_tmp/x.parquet")
    plan = vacuum(str(path)).to_dict()
    stray = dict(plan["files"][0])
    plan["files"] += [_entry(path, ".hidden"), _entry(path, "_tmp/x.parquet"), stray]
    result = vacuum(str(path), plan=plan, dry_run=False, audit=False)
    assert [(d["path"], d["reason"]) for d in result.to_dict()["dropped"]] == [
        (".hidden", "hidden"),
        ("_tmp/x.parquet", "hidden"),
        ("p=a/stray-old.parquet", "duplicate"),
    ]
    assert result.deleted == 1 and (path / ".hidden").exists() and (path / "_tmp/x.parquet").exists()


def test_a_plan_without_listing_evidence_deletes_nothing(tmp_path: Path) -> None:
    """A plan saved before plans carried evidence (or stripped of it): every entry is dropped, reported."""
    path = _table(tmp_path)
    plan = vacuum(str(path), clock=clock_at(now_ms() + 8 * DAY_MS)).to_dict()
    plan["files"] = [{"path": f["path"], "size": f["size"]} for f in plan["files"]]
    before = _files(path)
    result = vacuum(str(path), plan=plan, dry_run=False, clock=clock_at(now_ms() + 8 * DAY_MS))
    assert result.deleted == 0 and len(result.dropped) == 3 and _files(path) == before
    assert {d["reason"] for d in result.to_dict()["dropped"]} == {"no-evidence"}
    assert result.audit_versions == []  # nothing to delete: no VACUUM START


def test_lite_plans_carry_evidence_too(tmp_path: Path) -> None:
    path = _table(tmp_path)
    later = clock_at(now_ms() + 8 * DAY_MS)
    plan = vacuum(str(path), mode="lite", clock=later).to_dict()
    assert len(plan["files"]) == 2 and all(f == _entry(path, f["path"]) for f in plan["files"])
    (path / plan["files"][0]["path"]).unlink()
    result = vacuum(str(path), mode="lite", plan=plan, dry_run=False, audit=False, clock=later)
    assert result.deleted == 1 and [f.path for f in result.missing] == [plan["files"][0]["path"]]


# -- task B: the grace period for untracked files -------------------------------------------------------
def test_grace_rule_pure() -> None:
    from airflow_delta_provider.delta.protocol.vacuum import (
        DEFAULT_UNTRACKED_GRACE_HOURS,
        ListedFile,
        LoggedFile,
        plan_vacuum,
        within_grace,
    )

    assert DEFAULT_UNTRACKED_GRACE_HOURS == 1
    now, hour = 10 * HOUR_MS, HOUR_MS
    assert within_grace(now - hour + 1, now_ms=now, grace_ms=hour)
    assert not within_grace(now - hour, now_ms=now, grace_ms=hour)  # exactly as old as the grace: may go
    assert not within_grace(now - 1, now_ms=now, grace_ms=0)
    listing = [
        ListedFile("young-untracked.parquet", 7, now - 10),
        ListedFile("old-untracked.parquet", 5, now - 2 * hour),
        ListedFile("young-tombstoned.parquet", 3, now - 10),  # tracked: retention alone decides
    ]
    tomb = [LoggedFile("young-tombstoned.parquet", deletion_timestamp=now - 5, size=3)]
    kw: dict = dict(table="file:///t", version=1, mode="full", cutoff_ms=now, retention_ms=0, active=[])
    plan = plan_vacuum(**kw, tombstones=tomb, listing=listing, now_ms=now, untracked_grace_ms=hour)
    assert [f.path for f in plan.files] == ["old-untracked.parquet", "young-tombstoned.parquet"]
    assert (plan.grace_kept_files, plan.grace_kept_bytes) == (1, 7)
    d = plan.to_dict()
    assert (d["untracked_grace_ms"], d["grace_kept_files"], d["grace_kept_bytes"]) == (hour, 1, 7)
    assert type(plan).from_dict(json.loads(json.dumps(d))).to_dict() == d
    none = plan_vacuum(**kw, tombstones=tomb, listing=listing, now_ms=now, untracked_grace_ms=0)
    assert len(none.files) == 3 and none.grace_kept_files == 0
    # a retention longer than the grace: the cutoff alone decides, nothing counted as kept by the grace
    longer = plan_vacuum(
        **dict(kw, cutoff_ms=now - 3 * hour), tombstones=[], listing=listing, now_ms=now, untracked_grace_ms=hour
    )
    assert longer.files == [] and longer.grace_kept_files == 0


def test_grace_is_not_shortened_by_the_retention_override(tmp_path: Path) -> None:
    """Retention 0 with the override: an untracked file written a minute ago is kept (and counted), the
    tombstoned files (tracked) and the old stray go; 0 hours of grace, passed explicitly, plans it."""
    path = _table(tmp_path)
    young = _plant(path, "p=a/part-00001-in-flight.parquet", mtime=time.time() - 60, data=b"12345678")
    kw: dict = dict(retention_hours=0, enforce_retention_duration=False, clock=clock_at(now_ms() + 1000))
    plan = vacuum(str(path), **kw).to_dict()
    assert "p=a/part-00001-in-flight.parquet" not in {f["path"] for f in plan["files"]}
    assert len(plan["files"]) == 3  # two tombstoned files (written seconds ago) and the old stray
    assert (plan["grace_kept_files"], plan["grace_kept_bytes"], plan["untracked_grace_ms"]) == (1, 8, HOUR_MS)
    assert vacuum(str(path), untracked_grace_hours=0.5, **kw).plan.grace_kept_files == 1
    assert vacuum(str(path), untracked_grace_hours=0.01, **kw).plan.grace_kept_files == 0  # 36 s of grace
    explicit = vacuum(str(path), untracked_grace_hours=0, **kw).to_dict()
    assert "p=a/part-00001-in-flight.parquet" in {f["path"] for f in explicit["files"]}
    # applied with the default grace, the entry a 0-hour plan holds is dropped again
    result = vacuum(str(path), plan=explicit, dry_run=False, audit=False, **kw)
    assert young.exists() and result.deleted == 3
    assert [(d["path"], d["reason"]) for d in result.to_dict()["dropped"]] == [
        ("p=a/part-00001-in-flight.parquet", "untracked-grace")
    ]


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), "1", True, None])
def test_bad_grace_is_a_typed_error(tmp_path: Path, bad: object) -> None:
    path = _table(tmp_path)
    if bad is None:  # None is the default (1 hour), not a bad value
        assert vacuum(str(path), untracked_grace_hours=None).plan.untracked_grace_ms == HOUR_MS
        return
    with pytest.raises(InvalidArgumentError, match="untracked_grace_hours"):
        vacuum(str(path), untracked_grace_hours=bad)  # type: ignore[arg-type]


def test_an_in_flight_write_committed_after_the_vacuum_still_reads(tmp_path: Path) -> None:
    """The data-loss case, made deterministic: a writer has written its data file but not committed when
    VACUUM (retention 0, override) runs; it commits afterwards. With the default grace the file survives
    and the new version reads; with 0 hours of grace passed explicitly it is deleted (the rule is what
    protects it)."""
    for grace, survives in ((None, True), (0, False)):
        path = _table(tmp_path / f"g{grace}")
        rel = "p=a/part-00009-in-flight.parquet"
        buf = pa.BufferOutputStream()
        pq.write_table(pa.table({"id": pa.array([100, 101], pa.int64())}), buf)
        f = _plant(path, rel, mtime=time.time() - 5, data=buf.getvalue().to_pybytes())  # written 5 s ago
        extra = {} if grace is None else {"untracked_grace_hours": grace}
        vacuum(str(path), retention_hours=0, enforce_retention_duration=False, dry_run=False, **extra)
        assert f.exists() == survives
        snap = DeltaLog(str(path)).update()
        add = AddFile(path=rel, partition_values={"p": "a"}, size=len(buf.getvalue()), modification_time=now_ms())
        snap.transaction("WRITE").add(add).commit()
        if survives:
            assert _rows(path) == [10, 11, 100, 101]
        else:
            with pytest.raises(Exception):  # noqa: B017 - delta-rs: the committed file is gone
                DeltaTable(str(path)).to_pyarrow_table()


# -- the Spark executor's per-row task runs the same rules (no JVM: the task is a plain Arrow function) -----
def test_spark_entry_task_gives_the_local_reasons(tmp_path: Path) -> None:
    """`engines.spark.vacuum_tasks.entry_task` over one Arrow batch of edited plan entries: the reasons it finds
    per row (the protected paths and the grace period's tracked set are joins on the driver, not here) are
    those the local re-validation reports, and an entry refusing the plan is flagged."""
    from airflow_delta_provider.delta.engines.spark.vacuum_tasks import _ENTRY, REFUSED, entry_task

    path = _table(tmp_path)
    _plant(path, "p=a/stray-gone.parquet")
    _plant(path, "p=a/stray-changed.parquet")
    _plant(path, "keep/.marker")
    fresh = _plant(path, "p=b/part-00000-fresh.parquet", mtime=time.time() - 60)
    now = now_ms() + 1000
    plan = vacuum(str(path), clock=clock_at(now)).to_dict()
    plan["files"] += [
        {"path": "p=a/stray-old.parquet", "size": 5, "modification_time": int(OLD * 1000)},  # a repeat
        {"path": "keep", "size": 0, "modification_time": int(OLD * 1000)},
        {"path": ".hidden", "size": 1, "modification_time": int(OLD * 1000)},
        {"path": "p=b/part-00000-fresh.parquet", "size": 5},
        _entry(path, str(fresh.relative_to(path))),
    ]
    (path / "p=a/stray-gone.parquet").unlink()
    _plant(path, "p=a/stray-changed.parquet", data=b"longer than it was")
    entries = plan["files"]
    batch = pa.RecordBatch.from_pylist(
        [{"path": f["path"], "size": f["size"], "modification_time": f.get("modification_time")} for f in entries],
        schema=pa.schema([("path", pa.string()), ("size", pa.int64()), ("modification_time", pa.int64())]),
    )
    table_uri = DeltaLog(str(path)).table_uri
    task = entry_task(table_uri, {}, ["p"], cutoff_ms=now - 7 * DAY_MS, now_ms=now, grace_ms=HOUR_MS)
    rows = pa.Table.from_batches(list(task(iter([batch])))).to_pylist()
    assert [r["path"] for r in rows] == [f["path"] for f in entries] and [n for n, _ in _ENTRY] == list(rows[0])
    by_row = [(r["path"], r["reason"]) for r in rows if r["reason"] is not None]

    local = vacuum(str(path), plan=plan, dry_run=False, audit=False, clock=clock_at(now)).to_dict()
    expected = [(d["path"], d["reason"]) for d in local["dropped"]] + [(m["path"], "missing") for m in local["missing"]]
    assert sorted(by_row) == sorted(expected) and len(by_row) == 7
    kept = {r["path"] for r in rows if r["reason"] is None}
    assert kept == {"p=a/stray-old.parquet"} and local["deleted"] == 1  # the first of the repeated entries

    batch = pa.RecordBatch.from_pylist([{"path": "../x", "size": 1, "modification_time": 1}], schema=batch.schema)
    (row,) = pa.Table.from_batches(list(task(iter([batch])))).to_pylist()
    assert row["reason"].startswith(REFUSED) and row["rel"] is None
