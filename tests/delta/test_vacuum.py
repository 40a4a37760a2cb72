"""VACUUM: the pure plan's never-rules, dry run, apply with re-validation, audit commits, and a
differential test against delta-rs.

Tables are written by delta-rs (an independent writer). Time is moved forward through the `clock`
argument instead of sleeping: "8 days later" makes today's tombstones and files older than the default
7-day retention.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import random
import time
import unicodedata
import uuid
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pytest

deltalake = pytest.importorskip("deltalake")
from deltalake import DeltaTable, write_deltalake  # noqa: E402
from support.encodings import z85_encode  # noqa: E402

from airflow_delta_provider.delta.delta_log import DeltaLog  # noqa: E402
from airflow_delta_provider.delta.errors import InvalidArgumentError, OperationNotAllowedError  # noqa: E402
from airflow_delta_provider.delta.maintenance.vacuum import vacuum  # noqa: E402
from airflow_delta_provider.delta.protocol.actions import AddFile, DeletionVectorDescriptor  # noqa: E402
from airflow_delta_provider.delta.protocol.vacuum import (  # noqa: E402
    ListedFile,
    LoggedFile,
    VacuumPlan,
    dv_relative_path,
    plan_vacuum,
    relative_to_root,
)
from airflow_delta_provider.delta.storage import LocalLogStore  # noqa: E402

DAY_MS = 86_400_000
ROOT = "file:///t"


def later(days: float) -> int:
    return int(time.time() * 1000 + days * DAY_MS)


def clock_at(ms: int) -> Callable[[], int]:
    return lambda: ms


# -- pure plan: one test per never-rule ----------------------------------------------------------------
def _plan(listing: list[tuple[str, int]], **kw: object) -> list[str]:
    """Plan FULL at cutoff 1000 over `listing` (path, mtime), sizes 1."""
    args: dict = dict(
        table=ROOT, version=1, mode="full", cutoff_ms=1000, retention_ms=0, active=[], tombstones=[], listing=None
    )
    args.update(kw)
    args["listing"] = [ListedFile(p, 1, m) for p, m in listing]
    return [f.path for f in plan_vacuum(**args).files]


def test_untracked_old_file_is_planned_as_control() -> None:
    assert _plan([("stray.parquet", 10)]) == ["stray.parquet"]


def test_never_active_files_nor_their_dv_files() -> None:
    dv_uuid = uuid.uuid4()
    u = DeletionVectorDescriptor("u", "ab" + z85_encode(dv_uuid.bytes), 10, 1)
    p = DeletionVectorDescriptor("p", "file:///t/dv/abs_dv.bin", 10, 1)
    i = DeletionVectorDescriptor("i", "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L", 10, 1)
    dv_file = f"ab/deletion_vector_{dv_uuid}.bin"
    assert dv_relative_path(u) == dv_file
    listing = [("a.parquet", 1), ("b.parquet", 1), ("c.parquet", 1), (dv_file, 1), ("dv/abs_dv.bin", 1)]
    active = [LoggedFile("a.parquet", u), LoggedFile("b.parquet", p), LoggedFile("c.parquet", i)]
    assert _plan(listing, active=active) == []
    assert sorted(_plan(listing)) == sorted(p for p, _ in listing)  # without the rule: all deleted


def test_never_tombstones_within_retention_whatever_the_mtime() -> None:
    dv = DeletionVectorDescriptor("u", z85_encode(uuid.uuid4().bytes), 10, 1)
    recent = [LoggedFile("old.parquet", dv, deletion_timestamp=5000, size=1)]
    listing = [("old.parquet", 1), (dv_relative_path(dv) or "", 1)]
    assert _plan(listing, tombstones=recent) == []
    expired = [LoggedFile("old.parquet", dv, deletion_timestamp=999, size=1)]
    assert len(_plan(listing, tombstones=expired)) == 2


def test_never_delta_log() -> None:
    assert _plan([("_delta_log/00000000000000000000.json", 1), ("_delta_log/_sidecars/x.parquet", 1)]) == []


def test_hidden_paths_except_change_data_and_underscore_partitions() -> None:
    listing = [
        ("_tmp/x.parquet", 1),
        (".hidden.parquet", 1),
        ("p=1/.part-0.parquet.crc", 1),
        ("_SUCCESS", 1),
        ("_change_data/cdc-0.parquet", 1),
        ("_p=1/x.parquet", 1),
        ("_q=1/x.parquet", 1),
    ]
    assert sorted(_plan(listing, partition_columns=["_p"])) == ["_change_data/cdc-0.parquet", "_p=1/x.parquet"]


def test_never_outside_the_root() -> None:
    # a shallow clone's tombstone names an absolute path in another table: LITE must not plan it
    outside = LoggedFile("file:///source/part-0.parquet", deletion_timestamp=1, size=1)
    inside = LoggedFile("file:///t/p=1/part-1.parquet", deletion_timestamp=1, size=1)
    climbing = LoggedFile("../escape.parquet", deletion_timestamp=1, size=1)
    plan = plan_vacuum(
        table=ROOT,
        version=1,
        mode="lite",
        cutoff_ms=1000,
        retention_ms=0,
        active=[],
        tombstones=[outside, inside, climbing],
        listing=None,
    )
    assert [f.path for f in plan.files] == ["p=1/part-1.parquet"]
    assert relative_to_root("file:///source/part-0.parquet", ROOT) is None


def test_full_never_files_newer_than_cutoff() -> None:
    assert _plan([("inflight.parquet", 1000), ("newer.parquet", 5000), ("old.parquet", 999)]) == ["old.parquet"]


def test_paths_compare_decoded_and_normalized() -> None:
    active = [
        LoggedFile("p%3Da%20b/x%2By.parquet"),  # percent-encoded; a literal + in the name
        LoggedFile("file:///t/caf%C3%A9/n.parquet"),  # absolute, inside the root
        LoggedFile("q=e\u0301/z.parquet"),  # NFD in the log
    ]
    listing = [("p=a b/x+y.parquet", 1), ("café/n.parquet", 1), ("q=\u00e9/z.parquet", 1), ("p=a b/x y.parquet", 1)]
    assert _plan(listing, active=active) == ["p=a b/x y.parquet"]


def test_plan_round_trips_through_json() -> None:
    plan = plan_vacuum(
        table=ROOT,
        version=3,
        mode="full",
        cutoff_ms=1000,
        retention_ms=7,
        active=[],
        tombstones=[],
        listing=[ListedFile("p=1/a.parquet", 5, 1), ListedFile("b.parquet", 7, 1)],
    )
    d = json.loads(json.dumps(plan.to_dict()))
    assert d["partitions"] == {"": {"files": 1, "bytes": 7}, "p=1": {"files": 1, "bytes": 5}}
    assert VacuumPlan.from_dict(d).to_dict() == plan.to_dict()
    with pytest.raises(InvalidArgumentError):
        VacuumPlan.from_dict({"files": []})


# -- end to end on delta-rs tables ------------------------------------------------------------------
def _data(n: int, part: str = "a") -> pa.Table:
    return pa.table({"id": list(range(n)), "p": [part] * n})


def _table(tmp_path: Path) -> Path:
    path = tmp_path / "t"
    write_deltalake(str(path), _data(3), partition_by=["p"])
    write_deltalake(str(path), _data(4, "b"), partition_by=["p"], mode="append")
    write_deltalake(str(path), _data(5), partition_by=["p"], mode="overwrite")
    return path


def _files(path: Path) -> set[str]:
    return {
        str(p.relative_to(path))
        for p in path.rglob("*")
        if p.is_file() and not str(p.relative_to(path)).startswith("_")
    }


def test_dry_run_deletes_nothing_and_apply_deletes_exactly_the_plan(tmp_path: Path) -> None:
    path = _table(tmp_path)
    before = _files(path)
    expected_rows = DeltaTable(str(path)).to_pyarrow_table().sort_by("id")
    dry = vacuum(str(path), clock=clock_at(later(8)))
    d = dry.to_dict()
    assert d["dry_run"] and d["num_files"] == 2 and d["deleted"] == 0 and _files(path) == before
    active = set(DeltaTable(str(path)).file_uris())
    planned = {str(path / f["path"]) for f in d["files"]}
    assert not planned & active
    assert d["bytes"] == sum((path / f["path"]).stat().st_size for f in d["files"])

    applied = vacuum(str(path), plan=json.loads(json.dumps(d)), dry_run=False, clock=clock_at(later(8)))
    r = applied.to_dict()
    assert r["deleted"] == 2 and r["dropped"] == [] and r["deleted_bytes"] == d["bytes"]
    assert _files(path) == before - {f["path"] for f in d["files"]}
    assert r["directories"] == 1  # p=b held only tombstoned files
    # delta-rs and our reader read the latest version unchanged
    assert DeltaTable(str(path)).to_pyarrow_table().sort_by("id") == expected_rows
    snap = DeltaLog(str(path)).update()
    assert all((path / a.path).exists() for a in snap.all_files(with_stats=False))
    ops = [h["operation"] for h in DeltaTable(str(path)).history()]
    assert ops[:2] == ["VACUUM END", "VACUUM START"]
    end = DeltaTable(str(path)).history(1)[0]
    assert end["operationParameters"]["status"] == "COMPLETED"
    assert int(end["operationMetrics"]["numDeletedFiles"]) == 2


def test_audit_switch_off(tmp_path: Path) -> None:
    path = _table(tmp_path)
    version = DeltaTable(str(path)).version()
    result = vacuum(str(path), dry_run=False, audit=False, clock=clock_at(later(8)))
    assert result.deleted == 2 and DeltaTable(str(path)).version() == version


def test_revalidation_drops_a_file_active_again(tmp_path: Path) -> None:
    path = _table(tmp_path)
    plan = vacuum(str(path), clock=clock_at(later(8))).to_dict()
    readded = plan["files"][0]["path"]
    snap = DeltaLog(str(path)).update()
    p = readded.split("/")[0].split("=")[1]
    add = AddFile(path=readded, partition_values={"p": p}, size=plan["files"][0]["size"], modification_time=1)
    snap.transaction("WRITE").add(add).commit()
    result = vacuum(str(path), plan=plan, dry_run=False, clock=clock_at(later(8)))
    assert [f.path for f in result.dropped] == [readded]
    assert (path / readded).exists() and result.deleted == 1


def test_revalidation_refuses_a_protocol_change(tmp_path: Path) -> None:
    path = _table(tmp_path)
    plan = vacuum(str(path), clock=clock_at(later(8))).to_dict()
    plan["protocol"] = {"minReaderVersion": 1, "minWriterVersion": 1}
    with pytest.raises(OperationNotAllowedError, match="protocol changed"):
        vacuum(str(path), plan=plan, dry_run=False, clock=clock_at(later(8)))


def test_writer_file_newer_than_cutoff_survives(tmp_path: Path) -> None:
    path = _table(tmp_path)
    stray_old = path / "p=a" / "stray-old.parquet"
    stray_new = path / "p=a" / "inflight.parquet"
    for f in (stray_old, stray_new):
        f.write_bytes(b"x")
    old = time.time() - 30 * 86_400
    os.utime(stray_old, (old, old))
    result = vacuum(str(path), dry_run=False, audit=False)  # now: today's tombstones are within retention
    assert [f.path for f in result.plan.files] == ["p=a/stray-old.parquet"]
    assert stray_new.exists() and not stray_old.exists()


def test_retention_shorter_than_table_refused_unless_not_enforced(tmp_path: Path) -> None:
    path = _table(tmp_path)
    with pytest.raises(InvalidArgumentError, match="enforce_retention_duration=False"):
        vacuum(str(path), retention_hours=1)
    result = vacuum(str(path), retention_hours=0, enforce_retention_duration=False, clock=clock_at(later(0.01)))
    assert result.plan.retention_ms == 0 and result.plan.files


@pytest.mark.parametrize("bad", [-1, math.nan, math.inf, "7"])
def test_bad_retention_is_a_typed_error(tmp_path: Path, bad: object) -> None:
    path = _table(tmp_path)
    with pytest.raises(InvalidArgumentError):
        vacuum(str(path), retention_hours=bad, enforce_retention_duration=False)  # type: ignore[arg-type]


def test_lite_mode_from_the_log(tmp_path: Path) -> None:
    path = _table(tmp_path)
    stray = path / "p=a" / "stray.parquet"
    stray.write_bytes(b"x")
    os.utime(stray, (0, 0))
    lite = vacuum(str(path), mode="lite", clock=clock_at(later(8)))
    full = vacuum(str(path), mode="full", clock=clock_at(later(8)))
    assert {f.path for f in full.plan.files} - {f.path for f in lite.plan.files} == {"p=a/stray.parquet"}
    DeltaTable(str(path)).create_checkpoint()  # then log cleanup removes commit 0
    (path / "_delta_log" / "00000000000000000000.json").unlink()
    DeltaLog.clear_cache()
    with pytest.raises(OperationNotAllowedError, match="run FULL"):
        vacuum(str(path), mode="lite", clock=clock_at(later(8)))


# -- differential against delta-rs ---------------------------------------------------------------------
@pytest.mark.parametrize("seed", [17, 18, 19])
def test_differential_against_deltars(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    path = tmp_path / "rnd"
    write_deltalake(str(path), _data(5), partition_by=["p"])
    for step in range(8):
        op = rng.choice(["append", "append", "overwrite", "delete", "optimize"])
        dt = DeltaTable(str(path))
        if op == "append":
            write_deltalake(str(path), _data(rng.randint(1, 5), rng.choice("abc")), partition_by=["p"], mode="append")
        elif op == "overwrite":
            write_deltalake(str(path), _data(rng.randint(1, 5), rng.choice("ab")), partition_by=["p"], mode="overwrite")
        elif op == "delete":
            dt.delete(f"id = {rng.randint(0, 4)}")
        else:
            dt.optimize.compact()
        del step
    old = time.time() - 30 * 86_400
    for rel in ["stray.parquet", "p=a/stray2.parquet", "zz/stray3.bin", "_hidden/x.parquet", ".dot.parquet"]:
        f = path / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"x")
        os.utime(f, (old, old))
    ours = vacuum(
        str(path), retention_hours=0, enforce_retention_duration=False, clock=clock_at(int(time.time() * 1000) + 1000)
    )
    theirs = DeltaTable(str(path)).vacuum(retention_hours=0, dry_run=True, enforce_retention_duration=False, full=True)
    ours_set = {f.path for f in ours.plan.files}
    theirs_set = {relative_to_root(p, "file://" + str(path)) or p for p in theirs}
    # delta-rs skips every `_`/`.` name too, and deletes untracked and expired files: no documented
    # difference applies to a table without deletion vectors, change data or `_`-named partitions.
    assert ours_set == theirs_set
    assert {"stray.parquet", "p=a/stray2.parquet", "zz/stray3.bin"} <= ours_set
    assert len(ours_set) > 3  # tombstoned files too, not only the strays
    expected = DeltaTable(str(path)).to_pyarrow_table().sort_by([("id", "ascending"), ("p", "ascending")])
    result = vacuum(
        str(path),
        plan=ours.to_dict(),
        dry_run=False,
        enforce_retention_duration=False,
        clock=clock_at(int(time.time() * 1000) + 1000),
    )
    assert result.deleted == len(ours_set) and not result.dropped
    assert DeltaTable(str(path)).to_pyarrow_table().sort_by([("id", "ascending"), ("p", "ascending")]) == expected


# -- deletion-vector tables of the corpus ----------------------------------------------------------------
DV_TABLES = [
    "delta-golden/dv-partitioned-with-checkpoint",
    "delta-rs/table_with_deletion_logs",
    "delta-kernel-java/basic-dv-no-checkpoint",
    "delta-spark/table-with-dv-large",
]


@pytest.mark.parametrize("name", DV_TABLES)
def test_dv_tables_keep_live_dv_files_where_deltars_would_delete_them(tmp_path: Path, name: str) -> None:
    from conftest import copy_table

    path = copy_table(name, tmp_path)
    now = int(time.time() * 1000) + 1000
    snap = DeltaLog(str(path)).update()
    live_dvs = {
        a.deletion_vector.path_or_inline_dv[-20:]
        for a in snap.all_files(with_stats=False)
        if a.deletion_vector is not None and a.deletion_vector.storage_type == "u"
    }
    # delta-rs has no grace period for untracked files (the copied corpus files are fresh): compared without
    kw: dict = dict(retention_hours=0, enforce_retention_duration=False, clock=clock_at(now), untracked_grace_hours=0)
    ours = {f.path for f in vacuum(str(path), **kw).plan.files}
    theirs_raw = DeltaTable(str(path)).vacuum(
        retention_hours=0, dry_run=True, enforce_retention_duration=False, full=True
    )
    theirs = {relative_to_root(p, "file://" + str(path)) or p for p in theirs_raw}
    assert ours <= theirs
    for rel in theirs - ours:
        name_ = rel.rsplit("/", 1)[-1]
        if name_.startswith("."):  # Spark's rule: hidden names (Hadoop `.crc` companions) are never vacuumed
            continue
        # delta-rs builds its valid set from add paths only (delta-writes.md 6.2, delta-rs #3454)
        # (delta-spark/table-with-dv-large names them `test%dv%prefix-deletion_vector_<uuid>.bin`: Spark's
        # test-only file-name prefix)
        assert "deletion_vector_" in name_, rel
        file_uuid = uuid.UUID(name_.split("deletion_vector_")[1][: -len(".bin")])
        assert z85_encode(file_uuid.bytes) in live_dvs, rel

    vacuum(str(path), dry_run=False, **kw)
    latest = DeltaLog(str(path)).update()
    assert {a.key for a in latest.all_files(with_stats=False)} == {a.key for a in snap.all_files(with_stats=False)}
    for a in latest.all_files(with_stats=False):
        assert (path / relative_to_root(a.path, "file://" + str(path))).exists()
        if a.deletion_vector is not None and a.deletion_vector.storage_type == "u":
            dv_name = dv_relative_path(a.deletion_vector) or ""
            assert any(f.name.endswith(dv_name) for f in path.iterdir()) or (path / dv_name).exists(), dv_name
    ops = [h["operation"] for h in DeltaTable(str(path)).history(2)] if ours else []
    assert ops == (["VACUUM END", "VACUUM START"] if ours else [])


# -- S3 (a real S3-compatible server on loopback, through the fault-injecting proxy) -----------------------
@pytest.fixture(scope="module")
def s3_server(moto_s3):
    pytest.importorskip("s3fs")
    from support.s3_server import create_bucket

    create_bucket(moto_s3, "vacuum")  # the session's moto server, this module's bucket
    return moto_s3


def test_s3_apply_deletes_through_the_store_without_audit_by_default(s3_server) -> None:
    from support.s3_server import S3Proxy, boto3_client, deltalake_storage_options, first, s3_storage_options

    from airflow_delta_provider.delta.storage import FsspecLogStore, RetryPolicy

    uri = f"s3://vacuum/t-{uuid.uuid4().hex[:8]}"
    dl_opts = deltalake_storage_options(s3_server)
    write_deltalake(uri, _data(3), partition_by=["p"], storage_options=dl_opts)
    write_deltalake(uri, _data(4), partition_by=["p"], mode="overwrite", storage_options=dl_opts)
    client = boto3_client(s3_server)
    key = uri.split("/", 3)[3]
    client.put_object(Bucket="vacuum", Key=f"{key}/p=a/stray.parquet", Body=b"x")
    client.put_object(Bucket="vacuum", Key=f"{key}/_delta_log/_stray", Body=b"x")
    version = DeltaTable(uri, storage_options=dl_opts).version()
    expected = DeltaTable(uri, storage_options=dl_opts).to_pyarrow_table().sort_by("id")
    with S3Proxy(s3_server.endpoint) as proxy:
        opts = s3_storage_options(s3_server, proxy.endpoint)
        retry = RetryPolicy(max_attempts=5, base_delay=0.005, max_delay=0.02)
        dlog = DeltaLog(uri, store=FsspecLogStore(uri, opts, retry=retry))
        plan = vacuum(dlog, clock=clock_at(later(8)))
        assert {f.path for f in plan.plan.files} >= {"p=a/stray.parquet"} and plan.plan.num_bytes > 0
        proxy.inject(first(1))  # the first request of the apply is throttled: the store's retry layer answers
        result = vacuum(dlog, plan=plan.to_dict(), dry_run=False, clock=clock_at(later(8)))
        assert any(s.injected for s in proxy.requests)
    assert result.deleted == plan.to_dict()["num_files"] == 2 and result.directories == 0
    keys = {o["Key"][len(key) + 1 :] for o in client.list_objects_v2(Bucket="vacuum", Prefix=key + "/")["Contents"]}
    assert not keys & {f.path for f in plan.plan.files}
    assert "_delta_log/_stray" in keys
    dt = DeltaTable(uri, storage_options=dl_opts)
    assert dt.version() == version  # s3: no VACUUM START/END unless audit=True (delta-writes.md 6.4)
    assert dt.to_pyarrow_table().sort_by("id") == expected


def test_s3_failed_deletes_commit_vacuum_end_failed_and_raise(s3_server) -> None:
    from support.s3_server import ACCESS_DENIED, S3Proxy, deltalake_storage_options, s3_storage_options

    from airflow_delta_provider.delta.errors import StorageError
    from airflow_delta_provider.delta.storage import FsspecLogStore, RetryPolicy

    uri = f"s3://vacuum/t-{uuid.uuid4().hex[:8]}"
    dl_opts = deltalake_storage_options(s3_server)
    write_deltalake(uri, _data(3), partition_by=["p"], storage_options=dl_opts)
    write_deltalake(uri, _data(4), partition_by=["p"], mode="overwrite", storage_options=dl_opts)
    with S3Proxy(s3_server.endpoint) as proxy:
        opts = s3_storage_options(s3_server, proxy.endpoint)
        retry = RetryPolicy(max_attempts=2, base_delay=0.005, max_delay=0.02)
        dlog = DeltaLog(uri, store=FsspecLogStore(uri, opts, retry=retry))
        proxy.inject(lambda _i, seen: ACCESS_DENIED if seen.is_delete_objects else None)
        with pytest.raises(StorageError):
            vacuum(dlog, dry_run=False, audit=True, clock=clock_at(later(8)))
    history = DeltaTable(uri, storage_options=dl_opts).history(2)
    assert [h["operation"] for h in history] == ["VACUUM END", "VACUUM START"]
    assert history[0]["operationParameters"]["status"] == "FAILED"
    assert int(history[1]["operationMetrics"]["numFilesToDelete"]) == 1
    assert DeltaTable(uri, storage_options=dl_opts).to_pyarrow_table().num_rows == 4


# -- refusals and hand-edited plans ---------------------------------------------------------------------
def test_dv_file_with_a_name_prefix_is_kept() -> None:
    dv_uuid = uuid.uuid4()
    dv = DeletionVectorDescriptor("u", z85_encode(dv_uuid.bytes), 10, 1)
    name = f"test%dv%prefix-deletion_vector_{dv_uuid}.bin"  # Spark's test-only DV file-name prefix
    assert _plan([(name, 1)], active=[LoggedFile("a.parquet", dv)]) == []
    assert _plan([(name, 1)]) == [name]


def test_unknown_writer_feature_refused(tmp_path: Path) -> None:
    from airflow_delta_provider.delta.errors import UnsupportedFeatureError

    path = _table(tmp_path)
    protocol = {"protocol": {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["fancyNewFeature"]}}
    (path / "_delta_log" / f"{3:020d}.json").write_text(json.dumps(protocol) + "\n")
    with pytest.raises(UnsupportedFeatureError, match="fancyNewFeature"):
        vacuum(str(path), clock=clock_at(later(8)))


def test_hand_edited_plan_is_revalidated(tmp_path: Path) -> None:
    """Entries no planner writes (the log, outside the root) refuse the whole plan, nothing deleted (issue
    28); a hidden name and an active file are dropped from the deletes (more: test_vacuum_plan_apply.py)."""
    path = _table(tmp_path)
    plan = vacuum(str(path), clock=clock_at(later(8))).to_dict()
    active = relative_to_root(DeltaTable(str(path)).file_uris()[0], "file://" + str(path))
    refused = ["_delta_log/00000000000000000000.json", "/etc/hostname", "../outside"]
    evil = [".hidden", active]
    (tmp_path / "outside").write_bytes(b"x")
    (path / ".hidden").write_bytes(b"x")
    for entry in refused:
        edited = dict(plan, files=[*plan["files"], {"path": entry, "size": 1}])
        with pytest.raises(InvalidArgumentError, match="nothing was deleted"):
            vacuum(str(path), plan=edited, dry_run=False, audit=False, clock=clock_at(later(8)))
        assert all((path / f["path"]).exists() for f in plan["files"])
    plan["files"] += [{"path": p, "size": 1} for p in evil]
    result = vacuum(str(path), plan=plan, dry_run=False, audit=False, clock=clock_at(later(8)))
    assert sorted(f.path for f in result.dropped) == sorted(evil) and result.deleted == 2
    assert (path / "_delta_log" / "00000000000000000000.json").exists() and (path / ".hidden").exists()
    assert (tmp_path / "outside").exists() and (path / str(active)).exists()
    other = dict(plan, table="file:///elsewhere")
    with pytest.raises(InvalidArgumentError, match="not"):
        vacuum(str(path), plan=other, dry_run=False)


def test_plan_with_short_retention_applied_only_when_not_enforced(tmp_path: Path) -> None:
    path = _table(tmp_path)
    kw: dict = dict(retention_hours=0, enforce_retention_duration=False, clock=clock_at(later(0.01)))
    plan = vacuum(str(path), **kw).to_dict()
    with pytest.raises(InvalidArgumentError, match="enforce_retention_duration=False"):
        vacuum(str(path), plan=plan, dry_run=False, clock=clock_at(later(0.01)))
    assert vacuum(str(path), plan=plan, dry_run=False, **kw).deleted == plan["num_files"] > 0


# -- fast paths: the same answers as the rules written out in full ---------------------------------------
def _normalize_reference(path: str) -> str:
    """`normalize_relative` as the module doc states it, with no shortcut."""
    return "/".join(p for p in unicodedata.normalize("NFC", path).split("/") if p not in ("", "."))


def _relative_reference(path: str, root: str) -> str | None:
    """`relative_to_root` with no shortcut: absolute paths decoded and compared with the decoded root,
    relative ones decoded once; None outside the root or climbing out of it."""
    if "://" in path or path.startswith("/") or path.startswith("file:"):

        def local(uri: str) -> str:
            text = unquote(uri)
            for prefix in ("file://localhost/", "file:///"):
                if text.startswith(prefix):
                    return "/" + text[len(prefix) :]
            if text.startswith("file:/"):
                return "/" + text[len("file:/") :].lstrip("/")
            return text

        base, absolute = _normalize_reference(local(root)), _normalize_reference(local(path))
        if not absolute.startswith(base + "/"):
            return None
        rel = absolute[len(base) + 1 :]
    else:
        rel = _normalize_reference(unquote(path))
    return None if not rel or ".." in rel.split("/") else rel


_PIECES = ["a", "B9", "p=1", "x y", "%20", "%2B", "%C3%A9", "%", "+", ":", "//", "/", "./", "..", ".", "_", "é"]
_PIECES += ["e\u0301", "\u00e9", "-", "~", "\t", "file:", "://", "deletion_vector_"]


def _random_paths(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    out = ["", "/", "a/", "/a", "a//b", "a/./b", "a/../b", ".a", "a/.b", "a.b/c", "%", "a%2Fb", "file:///t/a"]
    for _ in range(n):
        out.append("".join(rng.choice(_PIECES) for _ in range(rng.randint(1, 6))))
    return out


def test_simple_paths_are_their_own_relative_form_and_arrow_agrees() -> None:
    import pyarrow.compute as pc

    from airflow_delta_provider.delta.protocol.vacuum import SIMPLE_PATH_PATTERN, is_simple_path

    paths = _random_paths(1, 3000)
    simple = [p for p in paths if is_simple_path(p)]
    assert 100 < len(simple) < len(paths) - 100  # both kinds are exercised
    for p in simple:
        assert _relative_reference(p, ROOT) == p, p
    # the whole-column test `protected_set` runs (RE2) marks exactly the same paths
    arrow = pc.match_substring_regex(pa.array(paths, pa.string()), f"^(?:{SIMPLE_PATH_PATTERN})$").to_pylist()
    assert arrow == [is_simple_path(p) for p in paths]


@pytest.mark.parametrize("root", [ROOT, "file:///t/caf%C3%A9", "s3://bucket/t"])
def test_relative_to_root_and_normalize_equal_the_rules_written_out(root: str) -> None:
    from airflow_delta_provider.delta.protocol.vacuum import normalize_relative

    paths = _random_paths(2, 3000)
    paths += [f"{root}/{p}" for p in paths[:500]]
    for p in paths:
        assert relative_to_root(p, root) == _relative_reference(p, root), p
        assert normalize_relative(p) == _normalize_reference(p), p


def test_name_rules_per_directory_equal_the_rules_per_path() -> None:
    """`unprotected_names` (one directory at a time, set difference first) decides as `listed_key` (one
    path at a time) on random names, with a protected set holding NFC spellings, DV files and aliases."""
    from airflow_delta_provider.delta.protocol.vacuum import listed_key, subdirectory_key, unprotected_names

    rng = random.Random(3)
    dv = f"deletion_vector_{uuid.uuid4()}.bin"
    names = sorted({p.replace("/", "") for p in _random_paths(4, 2000)} - {"", ".", ".."})  # as listings name files
    names += ["_delta_log", "_change_data", "_p=1", "_q=1", dv, f"pre-{dv}", "x-" + dv[:-4]]
    for directory in ["", "p=1", "p=caf\u00e9", "_p=2"]:
        listed = [f"{directory}/{n}" if directory else n for n in names]
        protected = {_normalize_reference(p) for p in rng.sample(listed, 300)}
        protected.add(f"{directory}/{dv}" if directory else dv)
        for prot in (protected, set()):
            keys = [listed_key(p, prot, ["_p"]) for p in listed]
            expected = [(i, k) for i, k in enumerate(keys) if k is not None]
            assert unprotected_names(directory, names, prot, ["_p"]) == expected
    assert subdirectory_key("", "_delta_log") is None and subdirectory_key("a", "_delta_log") is None
    assert subdirectory_key("", "_p=1", ["_p"]) == "_p=1" and subdirectory_key("", ".git") is None
    assert subdirectory_key("p=1", "q=e\u0301") == "p=1/q=\u00e9"


def _plan_files_reference(c, cutoff_ms: int, now_ms: int, grace_ms: int, tracked: set[str]) -> tuple[list, int, int]:
    """`plan_candidates`' files and grace counts written out: old enough, the young untracked ones counted
    apart, then the first listed of each comparable path, sorted by stored path (stable)."""
    from airflow_delta_provider.delta.protocol.vacuum import PlannedFile

    keep = [i for i in range(len(c)) if c.mtimes[i] < cutoff_ms]
    young = [i for i in keep if c.mtimes[i] > now_ms - grace_ms and c.keys[i] not in tracked]
    keep = [i for i in keep if i not in young]
    first: dict[str, int] = {}
    for i in keep:
        first.setdefault(c.keys[i], i)
    chosen = sorted(first.values(), key=lambda i: (c.paths[i], i))
    files = [PlannedFile(c.paths[i], c.sizes[i], c.mtimes[i]) for i in chosen]
    return files, len(young), sum(c.sizes[i] for i in young)


def test_plan_candidates_keeps_the_first_listed_of_each_path() -> None:
    """`plan_candidates` (one pass, no per-candidate set) against the rule written out, on random listings
    with NFC/NFD twins, `a//b`-style spellings, the same stored path listed twice, young and tracked files."""
    from airflow_delta_provider.delta.protocol.vacuum import Candidates, normalize_relative, plan_candidates

    rng = random.Random(7)
    names = ["a", "b", "caf\u00e9", "cafe\u0301", "x y", "p=1/a", "p=1//a", "p=1/./a", "p=2/caf\u00e9", "p=2/z"]
    for _ in range(200):
        c = Candidates()
        for _ in range(rng.randint(0, 12)):
            path = rng.choice(names)
            c.append(path, normalize_relative(path), rng.randint(0, 9), rng.choice([10, 50, 90, 99, 100, 120]))
        tracked = set(rng.sample([normalize_relative(n) for n in names], 3))
        plan = plan_candidates(
            c, table="t", version=1, cutoff_ms=100, retention_ms=10, now_ms=110, untracked_grace_ms=20, tracked=tracked
        )
        files, young, young_bytes = _plan_files_reference(c, 100, 110, 20, tracked)
        assert (plan.files, plan.grace_kept_files, plan.grace_kept_bytes) == (files, young, young_bytes)


def test_path_index_holds_the_paths_of_its_arrays_by_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    """`PathIndex` over several arrays, grouped in slices smaller than an array: each directory's subset,
    membership and the whole set equal a Python set of the same paths (repeats included)."""
    from airflow_delta_provider.delta.protocol.vacuum import normalize_relative, unprotected_names
    from airflow_delta_provider.delta.read.arrow_build import string_array
    from airflow_delta_provider.delta.read.protected_files import PathIndex

    monkeypatch.setattr(PathIndex, "SLICE", 7)
    paths = [normalize_relative(p) for p in _random_paths(5, 400)]
    paths = [p for p in paths if p] + paths[:50]
    index = PathIndex([string_array(paths[:150]), string_array([]), string_array(paths[150:])])
    expected = set(paths)
    assert index == expected and len(index) == len(expected) and set(index) == expected
    directories = {p.rpartition("/")[0] for p in expected}
    for directory in sorted(directories) * 2:  # again: from the cache or rebuilt
        under = {p for p in expected if p.rpartition("/")[0] == directory}
        assert index.directory(directory) == under
        names = [p.rpartition("/")[2] for p in under] + ["not-there"]
        assert unprotected_names(directory, names, index) == unprotected_names(directory, names, expected)
    assert all(p in index for p in expected) and "not-there" not in index and 3 not in index


def test_protected_set_from_columns_equals_the_rules_on_logged_files(tmp_path: Path) -> None:
    """`protected_set` (Arrow columns, fast path for simple paths) against `protected_paths` over the same
    snapshot's `LoggedFile`s, on deletion-vector tables of the corpus and a table with encoded paths."""
    from conftest import copy_table

    from airflow_delta_provider.delta.protocol.vacuum import protected_paths
    from airflow_delta_provider.delta.read.protected_files import (
        expired_index,
        expired_set,
        logged_files,
        protected_index,
        protected_set,
    )

    path = tmp_path / "enc"
    write_deltalake(str(path), pa.table({"id": [1, 2, 3], "p": ["a b", "café", "x+y%z"]}), partition_by=["p"])
    DeltaTable(str(path)).delete("id = 2")
    tables = [path] + [copy_table(name, tmp_path / str(i)) for i, name in enumerate(DV_TABLES)]
    for table in tables:
        dlog = DeltaLog(str(table))
        snap = dlog.update()
        active, tombs = logged_files(snap)
        assert [f.path for f in active] == [a.path for a in snap.all_files(with_stats=False)]
        assert [f.deletion_vector for f in active] == [a.deletion_vector for a in snap.all_files(with_stats=False)]
        for cutoff in (0, later(1)):
            expected = protected_paths(active, tombs, cutoff_ms=cutoff, table_root=dlog.table_uri)
            assert protected_set(snap, cutoff_ms=cutoff, table_root=dlog.table_uri) == expected
            # the same paths kept in Arrow by directory: equal as a set, and directory by directory
            index = protected_index(snap, cutoff_ms=cutoff, table_root=dlog.table_uri)
            assert index == expected and len(index) == len(expected)
            for directory in {p.rpartition("/")[0] for p in expected} | {"", "nowhere"}:
                assert index.directory(directory) == {p for p in expected if p.rpartition("/")[0] == directory}
            assert all(p in index for p in expected) and "nowhere/x" not in index
            expired = expired_set(snap, cutoff_ms=cutoff, table_root=dlog.table_uri)
            assert expired_index(snap, cutoff_ms=cutoff, table_root=dlog.table_uri) == expired
        assert any("deletion_vector_" in p for p in expected) or table == path


class _ListingStore(LocalLogStore):
    """The local store listed through `list_recursive` (a subclass: VACUUM does not walk it itself)."""

    def list_recursive(self, directory: str):
        return super().list_recursive(directory)


def test_local_walk_plans_what_the_store_listing_plans(tmp_path: Path) -> None:
    """The walk (pruned directories, a `stat` only for unprotected names) against the plain listing: the
    same plan on a table with strays, hidden files and directories, NFC/NFD twins, DV-alias names and a
    symlink, at several cutoffs; and the walk stats no protected file."""
    from airflow_delta_provider.delta.engines.local_vacuum import walk_candidates
    from airflow_delta_provider.delta.read.protected_files import protected_set

    assert "threads" not in inspect.signature(walk_candidates).parameters  # one thread: see its docstring
    path = _table(tmp_path)
    old = time.time() - 30 * 86_400
    strays = [
        "stray.parquet",
        "p=a/stray 2+%.parquet",
        "p=a/caf\u00e9.parquet",
        "p=a/cafe\u0301.parquet",
        "_tmp/x.parquet",
        "p=a/.hidden.parquet",
        "p=b/_SUCCESS",
        "_change_data/cdc.parquet",
        "deep/er/dir/x.bin",
        "_delta_log/_stray",
        f"p=a/pre-deletion_vector_{uuid.uuid4()}.bin",
    ]
    for rel in strays:
        f = path / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"xy")
        os.utime(f, (old, old))
    (path / "p=a" / "link.parquet").symlink_to(path / "stray.parquet")
    for days in (8, 0, -1):
        kw: dict = dict(retention_hours=0, enforce_retention_duration=False, clock=clock_at(later(days)))
        DeltaLog.clear_cache()
        walked = vacuum(str(path), **kw).plan
        listed = vacuum(DeltaLog(str(path), store=_ListingStore()), **kw).plan
        assert walked.to_dict() == listed.to_dict()
        snap = DeltaLog(str(path)).update()
        protected = protected_set(snap, cutoff_ms=walked.cutoff_ms, table_root=snap.table)
        found = walk_candidates(str(path), protected, ["p"])
        assert not set(found.keys) & protected  # protected files are never stat-ed
        old_enough = [
            (p, k) for p, k, m in zip(found.paths, found.keys, found.mtimes, strict=True) if m < walked.cutoff_ms
        ]
        assert {f.path for f in walked.files} <= {p for p, _ in old_enough}
        assert len(walked.files) == len({k for _, k in old_enough})
    planned = {f.path for f in vacuum(str(path), retention_hours=0, enforce_retention_duration=False).plan.files}
    assert "p=a/link.parquet" not in planned and "_change_data/cdc.parquet" in planned
    assert len(planned & {"p=a/caf\u00e9.parquet", "p=a/cafe\u0301.parquet"}) == 1  # one comparable path


def test_gc_state_is_restored_after_a_plan_and_after_an_error(tmp_path: Path) -> None:
    import gc

    path = _table(tmp_path)
    assert gc.isenabled()
    vacuum(str(path), clock=clock_at(later(8)))
    assert gc.isenabled()
    with pytest.raises(InvalidArgumentError):
        vacuum(str(path), plan={"files": []})
    assert gc.isenabled()
    gc.disable()
    try:
        vacuum(str(path), clock=clock_at(later(8)))
        assert not gc.isenabled()  # a caller's choice is kept
    finally:
        gc.enable()
