"""VACUUM under faults: writers adding files during a vacuum, kill -9 mid-delete, S3 request counts and
throttling (issue 17).

Tables are written by delta-rs (an independent writer); the concurrent writer and the killed vacuum
are real processes. Where a test needs an event at an exact point (a commit landing while the table is
listed, a crash after the k-th delete) a `LocalLogStore` subclass runs it from inside the store call: the
store is real, only the timing is chosen. No timing is asserted anywhere.

What must hold when a writer appends while VACUUM runs with `retention_hours=0` (the case Delta's
retention check exists for): no file committed at or before the version an apply re-validated against
(its `VACUUM START`'s `readVersion`) is ever deleted; a file the latest version lacks can only be one
whose write was in flight across the whole plan-to-apply window (written before the listing, committed
after the re-validation). With a retention longer than a write takes, nothing is lost at all.

`Transaction.commit` backs off after a lost put and before it reads the winners (it once slept after
reading them, so a writer committing during each backoff starved VACUUM START): pinned below.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

deltalake = pytest.importorskip("deltalake")
from deltalake import DeltaTable, write_deltalake  # noqa: E402

from airflow_delta_provider.delta.delta_log import DeltaLog  # noqa: E402
from airflow_delta_provider.delta.errors import CommitRetriesExceededError, StorageError  # noqa: E402
from airflow_delta_provider.delta.maintenance.vacuum import VacuumResult, vacuum  # noqa: E402
from airflow_delta_provider.delta.protocol.actions import AddFile  # noqa: E402
from airflow_delta_provider.delta.protocol.filenames import FileInfo  # noqa: E402
from airflow_delta_provider.delta.read.deletion_vectors import read_data_file  # noqa: E402
from airflow_delta_provider.delta.storage import LocalLogStore  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DAY_MS = 86_400_000
OLD = time.time() - 30 * 86_400  # an mtime older than any retention used here


def later(days: float) -> int:
    return int(time.time() * 1000 + days * DAY_MS)


def clock_at(ms: int) -> Callable[[], int]:
    return lambda: ms


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def _data(ids: list[int], part: str) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "p": [part] * len(ids)})


def _table(path: Path) -> Path:
    """v0: p=a ids 0-2; v1: p=b ids 3-6; v2: overwrite with p=a ids 10-14 (v0's and v1's files tombstoned)."""
    write_deltalake(str(path), _data([0, 1, 2], "a"), partition_by=["p"])
    write_deltalake(str(path), _data([3, 4, 5, 6], "b"), partition_by=["p"], mode="append")
    write_deltalake(str(path), _data(list(range(10, 15)), "a"), partition_by=["p"], mode="overwrite")
    return path


def _plant(path: Path, rel: str, *, mtime: float | None = OLD, data: bytes = b"x") -> Path:
    """An untracked file (what a crashed or in-flight writer leaves); `mtime=None` keeps it fresh."""
    f = path / rel
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_bytes(data)
    if mtime is not None:
        os.utime(f, (mtime, mtime))
    return f


def deltars_rows(path: Path) -> list[tuple[int, str]]:
    t = DeltaTable(str(path)).to_pyarrow_table()
    return sorted(zip(t.column("id").to_pylist(), t.column("p").to_pylist(), strict=True))


def our_rows(path: Path) -> list[tuple[int, str]]:
    """The latest version read by this library: our snapshot's files, each read with `read_data_file`."""
    log = DeltaLog(str(path))
    rows: list[tuple[int, str]] = []
    for add in log.update().all_files(with_stats=False):
        ids = read_data_file(log.store, log.table_uri, add, columns=["id"]).column("id").to_pylist()
        rows += [(i, str(add.partition_values["p"])) for i in ids]
    return sorted(rows)


def missing_active(path: Path) -> list[str]:
    """Files of the latest version (our snapshot) that are not on disk."""
    snap = DeltaLog(str(path)).update()
    return sorted(a.path for a in snap.all_files(with_stats=False) if not (path / unquote(a.path)).exists())


def data_files(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*") if p.is_file() and "_delta_log" not in p.parts}


def add_versions(path: Path) -> dict[str, int]:
    """Relative path -> version of the commit that first added it, from the raw commit files."""
    out: dict[str, int] = {}
    for f in sorted((path / "_delta_log").glob("*.json")):
        for line in f.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                out.setdefault(unquote(action["add"]["path"]), int(f.name[:20]))
    return out


def commit_info(path: Path, version: int) -> dict[str, Any]:
    for line in (path / "_delta_log" / f"{version:020d}.json").read_text().splitlines():
        action = json.loads(line)
        if "commitInfo" in action:
            return action["commitInfo"]
    raise AssertionError(f"commit {version} has no commitInfo")


class HookedStore(LocalLogStore):
    """The local store, running `before_listing` once when the table is listed (a commit that lands
    while VACUUM lists the table, at a chosen point instead of by luck)."""

    def __init__(self, before_listing: Callable[[], None]) -> None:
        super().__init__()
        self.before_listing: Callable[[], None] | None = before_listing

    def list_recursive(self, directory: str) -> Iterator[FileInfo]:
        if self.before_listing is not None:
            hook, self.before_listing = self.before_listing, None
            hook()
        return super().list_recursive(directory)


class RacedStore(LocalLogStore):
    """The local store; before each of the first `times` commit puts, `competitor` commits first."""

    def __init__(self, competitor: Callable[[], None], times: int) -> None:
        super().__init__()
        self.competitor, self.times = competitor, times

    def put_if_absent(self, path: str, data: bytes) -> None:
        if self.times > 0 and path.endswith(".json"):
            self.times -= 1
            self.competitor()
        super().put_if_absent(path, data)


# -- 1. writers adding files during a vacuum -----------------------------------------------------------
def test_files_written_after_the_plan_or_with_a_fresh_mtime_survive(tmp_path: Path) -> None:
    path = _table(tmp_path / "t")
    _plant(path, "p=a/stray-old.parquet")
    inflight = _plant(path, "p=a/part-00000-inflight-fresh.parquet", mtime=None)
    rows = deltars_rows(path)

    # an untracked file with a fresh mtime is never planned (today's tombstones are within retention too)
    today = vacuum(str(path), dry_run=False, audit=False)
    assert [f.path for f in today.plan.files] == ["p=a/stray-old.parquet"] and inflight.exists()

    # a plan "8 days later" covers everything untracked that existed when it was made ...
    plan = vacuum(str(path), clock=clock_at(later(8))).to_dict()
    planned = {f["path"] for f in plan["files"]}
    assert "p=a/part-00000-inflight-fresh.parquet" in planned and len(planned) == 3
    # ... but files a writer creates after it are not in it, whatever their age by the plan's clock
    after = [
        _plant(path, "p=a/part-00001-written-after-plan.parquet", mtime=None),
        _plant(path, "p=c/part-00000-new-partition.parquet", mtime=None),
        _plant(path, "p=b/part-00002-old-mtime-after-plan.parquet"),  # e.g. copied in with its mtime kept
    ]
    result = vacuum(str(path), plan=plan, dry_run=False, clock=clock_at(later(8)))
    assert result.deleted == 3 and not result.dropped
    assert all(f.exists() for f in after)
    assert not any((path / p).exists() for p in planned)
    assert deltars_rows(path) == our_rows(path) == rows and missing_active(path) == []


def test_files_committed_between_plan_and_apply_are_dropped_on_revalidation(tmp_path: Path) -> None:
    """Another writer commits after the plan: delta-rs `restore` re-adds two planned (tombstoned) files,
    delta-rs appends a new file, and our transaction commits a file the plan took for a stray."""
    path = _table(tmp_path / "t")
    _plant(path, "p=a/stray-uncommitted.parquet")
    late_commit = "p=a/part-00000-committed-late.parquet"
    buf = pa.BufferOutputStream()
    pq.write_table(pa.table({"id": pa.array([100, 101], pa.int64())}), buf)
    _plant(path, late_commit, data=buf.getvalue().to_pybytes())  # written long ago, committed only now

    plan = vacuum(str(path), clock=clock_at(later(8))).to_dict()
    planned = {f["path"] for f in plan["files"]}
    tombstoned = {p for p in planned if "stray" not in p and p != late_commit}
    assert len(tombstoned) == 2 and len(planned) == 4

    dt = DeltaTable(str(path))
    dt.restore(1)  # v0's and v1's files are active again
    write_deltalake(str(path), _data([20, 21], "b"), partition_by=["p"], mode="append")
    snap = DeltaLog(str(path)).update()
    size = (path / late_commit).stat().st_size
    add = AddFile(path=late_commit, partition_values={"p": "a"}, size=size, modification_time=int(OLD * 1000))
    snap.transaction("WRITE").add(add).commit()
    rows = deltars_rows(path)
    assert (100, "a") in rows and (20, "b") in rows and (0, "a") in rows

    result = vacuum(str(path), plan=plan, dry_run=False, clock=clock_at(later(8)))
    assert {f.path for f in result.dropped} == tombstoned | {late_commit}
    assert [f.path for f in result.plan.files] == ["p=a/stray-uncommitted.parquet"] and result.deleted == 1
    assert deltars_rows(path) == our_rows(path) == rows and missing_active(path) == []
    assert DeltaTable(str(path), version=1).to_pyarrow_table().num_rows == 7  # restored files still travel


def test_one_shot_apply_revalidates_against_the_table_after_listing(tmp_path: Path) -> None:
    """`vacuum(dry_run=False)` without a plan: a delta-rs append commits while the table is listed (after
    the snapshot the plan starts from). Its file looks untracked to the plan; re-validation must see the
    commit and keep it. (With the default grace period the fresh file would not even be planned: 0 hours
    of grace, passed explicitly, leaves it to re-validation.)"""
    path = _table(tmp_path / "t")
    _plant(path, "p=a/stray.parquet")

    def append() -> None:
        write_deltalake(str(path), _data([42], "a"), partition_by=["p"], mode="append")

    dlog = DeltaLog(str(path), store=HookedStore(append))
    result = vacuum(
        dlog,
        retention_hours=0,
        enforce_retention_duration=False,
        dry_run=False,
        clock=clock_at(later(0.01)),
        untracked_grace_hours=0,
    )
    active = [unquote(p) for p in pa.table(DeltaTable(str(path)).get_add_actions()).column("path").to_pylist()]
    assert len(result.dropped) == 1 and result.dropped[0].path in active  # the appended file, kept
    assert (path / result.dropped[0].path).exists()
    assert missing_active(path) == [] and (42, "a") in deltars_rows(path)
    assert not (path / "p=a" / "stray.parquet").exists()
    start = commit_info(path, result.audit_versions[0])
    assert start["operation"] == "VACUUM START" and start["readVersion"] == 3  # re-validated after the append


_APPENDER = """
import json, os, sys
import pyarrow as pa
from deltalake import write_deltalake
path, stop = sys.argv[1], sys.argv[2]
appended, failures, i = [], [], 0
while not os.path.exists(stop):
    i += 1
    try:
        write_deltalake(path, pa.table({"id": pa.array([i], pa.int64()), "p": [str(i % 3)]}),
                        partition_by=["p"], mode="append")
        appended.append(i)
    except Exception as exc:  # retention 0 may vacuum a staged file away before its rename
        failures.append(f"{type(exc).__name__}: {exc}"[:300])
print(json.dumps({"appended": appended, "failures": failures}))
"""


def _vacuum_while_appending(
    path: Path, retention_hours: float, rounds: int, appends: int
) -> tuple[list[VacuumResult], dict[str, list]]:
    """Run plan+apply rounds (alternately a dry-run plan applied later and a one-shot apply) while a
    delta-rs process appends, until both `rounds` and `appends` are reached; then stop the appender."""
    stop = path.parent / "stop"
    proc = subprocess.Popen(
        [sys.executable, "-c", _APPENDER, str(path), str(stop)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=child_env(),
        text=True,
    )
    kw: dict[str, Any] = dict(retention_hours=retention_hours, enforce_retention_duration=False)
    done: list[VacuumResult] = []
    lost_start_commits = 0
    deadline = time.monotonic() + 300  # a guard against a stalled appender, not a timing assertion
    stalled = False
    try:
        dlog = DeltaLog(str(path))
        while len(done) < rounds or dlog.update().num_files < appends:
            if proc.poll() is not None or time.monotonic() > deadline:
                stalled = True
                break
            try:
                if len(done) % 2:
                    done.append(vacuum(dlog, dry_run=False, **kw))
                else:
                    plan = vacuum(dlog, **kw).to_dict()
                    done.append(vacuum(dlog, plan=plan, dry_run=False, **kw))
            except CommitRetriesExceededError:  # VACUUM START lost every attempt: nothing was deleted
                lost_start_commits += 1  # (see test_audit_commit_is_not_starved_by_a_steady_writer)
    finally:
        stop.touch()
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and not stalled, f"appender exited {proc.returncode}: {err[-3000:]}"
    return done, {**json.loads(out.strip().splitlines()[-1]), "lost_start_commits": lost_start_commits}


@pytest.mark.parametrize("retention_hours", [1, 0], ids=["retention-1h", "retention-0"])
def test_vacuum_rounds_while_a_process_appends(tmp_path: Path, retention_hours: float) -> None:
    """A delta-rs process appends in a loop while this one runs VACUUM rounds (`enforce_retention_duration
    =False`). Always: nothing committed by the version an apply re-validated against is deleted, and the
    log stays whole. Retention 1 h: nothing is lost and every appended row reads. Retention 0: a lost file
    was in flight across a whole round (see the module doc); how many is printed."""
    path = tmp_path / "t"
    write_deltalake(str(path), _data([0], "0"), partition_by=["p"])
    strays = {f"p={i % 3}/part-00000-stray-{i}.parquet" for i in range(6)} | {"p=9/old.parquet"}
    for rel in strays:
        _plant(path, rel)
    done, appender = _vacuum_while_appending(path, retention_hours, rounds=12, appends=20)
    deleted = {f.path: r for r in done for f in (r.plan.files if r.audit_versions else [])}
    versions = add_versions(path)

    # no apply deletes a file committed at or before the version it re-validated against
    for r in done:
        if r.audit_versions:
            read = commit_info(path, r.audit_versions[0])["readVersion"]
            wrong = [f.path for f in r.plan.files if versions.get(f.path, read + 1) <= read]
            assert wrong == [], f"apply re-validated at {read} but deleted files committed by then: {wrong}"
    # the log stays whole: both readers open the same latest version with the same files
    snap = DeltaLog(str(path)).update()
    dt = DeltaTable(str(path))
    assert dt.version() == snap.version
    assert {unquote(p) for p in pa.table(dt.get_add_actions()).column("path").to_pylist()} == {
        unquote(a.path) for a in snap.all_files(with_stats=False)
    }
    assert strays <= set(deleted) and not any((path / s).exists() for s in strays)
    missing = missing_active(path)
    print(
        f"\nretention {retention_hours}h: {len(done)} vacuum rounds, {len(appender['appended'])} appends "
        f"({len(appender['failures'])} failed), {len(deleted)} files deleted, {len(missing)} committed files lost, "
        f"{appender['lost_start_commits']} rounds failed on VACUUM START (commit retries exhausted)"
    )
    if retention_hours:
        # nothing an appender writes is young enough to be planned: nothing is lost, every row reads
        assert missing == [] and appender["failures"] == []
        assert not set(deleted) - strays
        expected = sorted([(0, "0")] + [(i, str(i % 3)) for i in appender["appended"]])
        assert deltars_rows(path) == our_rows(path) == expected
    else:
        # retention 0: a lost file was written before a listing and committed after that round's
        # re-validation (in flight across the whole window): exactly what retention protects
        for rel in map(unquote, missing):
            assert rel in deleted, f"{rel} is missing but no vacuum round deleted it"
            assert versions[rel] > commit_info(path, deleted[rel].audit_versions[0])["readVersion"]


def test_audit_commit_is_not_starved_by_a_steady_writer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A delta-rs writer commits before each of VACUUM START's first two puts and again while the commit
    loop backs off (the sleep is replaced by that commit: a writer committing every backoff period, made
    deterministic). VACUUM START must still land at the version after the latest winner."""
    from airflow_delta_provider.delta.txn import transaction

    path = _table(tmp_path / "t")
    _plant(path, "p=a/stray.parquet")
    plan = vacuum(str(path), clock=clock_at(later(8))).to_dict()
    competing: list[int] = []

    def competitor() -> None:
        competing.append(len(competing))
        write_deltalake(str(path), _data([1000 + len(competing)], "b"), partition_by=["p"], mode="append")

    # only the transaction's backoff: `transaction.time` is the process-wide `time` module, whose `sleep`
    # other threads left by earlier tests (servers, JVM gateways) may call while this test runs
    monkeypatch.setattr(transaction, "time", SimpleNamespace(sleep=lambda _seconds: competitor()))
    dlog = DeltaLog(str(path), store=RacedStore(competitor, times=2))
    result = vacuum(dlog, plan=plan, dry_run=False, clock=clock_at(later(8)))
    assert result.deleted == 3 and len(result.audit_versions) == 2
    assert commit_info(path, result.audit_versions[0])["operation"] == "VACUUM START"
    assert len(competing) > 2  # the two raced puts, then at least one backoff of the commit loop
    assert missing_active(path) == [] and len(deltars_rows(path)) == 5 + len(competing)


# -- 2. kill -9 mid-delete -----------------------------------------------------------------------------
_KILLED_VACUUM = """
import json, os, signal, sys
from airflow_delta_provider.delta.delta_log import DeltaLog
from airflow_delta_provider.delta.maintenance.vacuum import vacuum
from airflow_delta_provider.delta.storage import LocalLogStore

table, plan_file, k, now = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

class KillAfter(LocalLogStore):
    # the local store, deleting one file at a time; the process SIGKILLs itself once k files are gone
    deleted = 0
    def delete_many(self, paths):
        for p in paths:
            if KillAfter.deleted >= k:
                os.kill(os.getpid(), signal.SIGKILL)
            super().delete_many([p])
            KillAfter.deleted += 1
        return len(paths)

plan = json.load(open(plan_file))
vacuum(DeltaLog(table, store=KillAfter()), plan=plan, dry_run=False, batch_size=3, clock=lambda: now)
sys.exit("not killed")
"""


@pytest.fixture(scope="module")
def killable_table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = _table(tmp_path_factory.mktemp("kill") / "t")
    for rel in ["p=a/stray-1.parquet", "p=b/stray-2.parquet", "p=c/stray-3.parquet", "p=c/stray-4.parquet"]:
        _plant(path, rel)
    _plant(path, "stray-at-root.bin")
    _plant(path, "p=a/.hidden-stray")  # never planned
    return path


@pytest.mark.parametrize("k", [0, 1, 3, 6])
def test_kill_9_after_k_deletes_leaves_a_readable_table_and_the_same_plan_finishes(
    killable_table: Path, tmp_path: Path, k: int
) -> None:
    path = tmp_path / "t"
    shutil.copytree(killable_table, path, copy_function=shutil.copy2)  # mtimes kept
    now = later(8)
    plan = vacuum(str(path), clock=clock_at(now)).to_dict()
    files = [f["path"] for f in plan["files"]]
    assert len(files) == 7 and "p=a/.hidden-stray" not in files
    rows, before = deltars_rows(path), data_files(path)
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(plan))

    proc = subprocess.run(
        [sys.executable, "-c", _KILLED_VACUUM, str(path), str(plan_file), str(k), str(now)],
        env=child_env(),
        cwd=REPO,
        capture_output=True,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-3000:]
    assert data_files(path) == before - set(files[:k])  # deletes run in plan order
    DeltaLog.clear_cache()
    assert deltars_rows(path) == our_rows(path) == rows and missing_active(path) == []
    history = [h["operation"] for h in DeltaTable(str(path)).history(2)]
    assert history == ["VACUUM START", "WRITE"]  # the killed run never wrote VACUUM END

    again = vacuum(str(path), plan=json.loads(plan_file.read_text()), dry_run=False, clock=clock_at(now))
    # the k files the killed run deleted are reported missing, not counted again (issue 28)
    gone_bytes = sum(f["size"] for f in plan["files"][:k])
    assert again.deleted == len(files) - k and again.deleted_bytes == plan["bytes"] - gone_bytes
    assert [f.path for f in again.missing] == files[:k] and not again.dropped
    assert data_files(path) == before - set(files)
    assert again.directories == 2 and not (path / "p=b").exists() and not (path / "p=c").exists()
    assert deltars_rows(path) == our_rows(path) == rows
    end = DeltaTable(str(path)).history(1)[0]
    assert end["operation"] == "VACUUM END" and end["operationParameters"]["status"] == "COMPLETED"
    assert int(end["operationMetrics"]["numDeletedFiles"]) == len(files) - k


# -- 3. S3: request counts and throttling --------------------------------------------------------------
S3_BUCKET = "vacuum-faults"
N_STRAYS = 1_050  # with the table's tombstoned file: 1,051 deletable files, 2 DeleteObjects requests


@pytest.fixture(scope="module")
def s3_server(moto_s3: Any) -> Any:
    pytest.importorskip("s3fs")
    from support.s3_server import create_bucket

    create_bucket(moto_s3, S3_BUCKET)  # the session's moto server, this module's bucket
    return moto_s3


def _s3_table_with_strays(server: Any) -> tuple[str, str, int]:
    """A delta-rs table on S3 with one tombstoned file and `N_STRAYS` zero-byte strays: (uri, key
    prefix, objects under the prefix)."""
    from support.s3_server import boto3_client, deltalake_storage_options

    key = f"t-{uuid.uuid4().hex[:8]}"
    uri = f"s3://{S3_BUCKET}/{key}"
    opts = deltalake_storage_options(server)
    write_deltalake(uri, _data([0, 1], "a"), partition_by=["p"], storage_options=opts)
    write_deltalake(uri, _data([2, 3], "a"), partition_by=["p"], mode="overwrite", storage_options=opts)
    client = boto3_client(server)

    def put(i: int) -> None:
        client.put_object(Bucket=S3_BUCKET, Key=f"{key}/p={'ab'[i % 2]}/stray-{i:05d}.parquet", Body=b"")

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, range(N_STRAYS)))
    objects = sum(
        page["KeyCount"]
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=S3_BUCKET, Prefix=key + "/")
    )
    return uri, key, objects


def _counts(seen: list[Any], key: str) -> dict[str, int]:
    table_listing = [r for r in seen if r.is_list and r.query.get("prefix") == key + "/" and "delimiter" not in r.query]
    return {
        "table LIST pages": sum(1 for r in table_listing if not r.injected),
        "other LIST": sum(1 for r in seen if r.is_list and r not in table_listing),
        "DeleteObjects": sum(1 for r in seen if r.is_delete_objects and not r.injected),
        "throttled": sum(1 for r in seen if r.injected),
        "requests": len(seen),
    }


@pytest.mark.slow
def test_s3_request_counts_and_throttling(s3_server: Any) -> None:
    """> 1,000 deletable files on the loopback S3 server: the listing takes ceil(objects/1000) pages and
    the deletes exactly ceil(n/1000) DeleteObjects requests; throttled requests are retried to the same
    plan and result; persistent throttling fails with a typed, transient `StorageError`."""
    from support.s3_server import SLOW_DOWN, S3Proxy, boto3_client, deltalake_storage_options, every, s3_storage_options

    from airflow_delta_provider.delta.storage import FsspecLogStore, RetryPolicy

    uri, key, objects = _s3_table_with_strays(s3_server)
    retry = RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.005)
    now = clock_at(later(8))  # S3 mtimes are upload times: plan "8 days later"
    with S3Proxy(s3_server.endpoint) as proxy:
        dlog = DeltaLog(uri, store=FsspecLogStore(uri, s3_storage_options(s3_server, proxy.endpoint), retry=retry))
        proxy.reset()
        plan = vacuum(dlog, clock=now)
        n = len(plan.plan.files)
        dry = _counts(proxy.snapshot(), key)
        assert n == N_STRAYS + 1 and objects > 1_000
        assert dry["table LIST pages"] == math.ceil(objects / 1000) and dry["DeleteObjects"] == 0
        assert dry["other LIST"] <= 3  # the log listing

        proxy.reset()
        proxy.inject(every(2))  # every other request answers 503 SlowDown
        throttled_plan = vacuum(dlog, clock=now)
        assert throttled_plan.plan.files == plan.plan.files
        throttled = _counts(proxy.snapshot(), key)
        assert throttled["throttled"] > 0 and throttled["table LIST pages"] == math.ceil(objects / 1000)

        proxy.reset()
        proxy.inject(lambda _i, seen: SLOW_DOWN if seen.is_delete_objects else None)
        with pytest.raises(StorageError) as info:
            vacuum(dlog, plan=plan.to_dict(), dry_run=False, clock=now)
        err = info.value
        assert err.transient and "SlowDown" in str(err) and err.table == uri
        failed = _counts(proxy.snapshot(), key)
        assert failed["throttled"] == retry.max_attempts  # the store's one retry layer, bounded, then typed

        proxy.reset()
        throttled_once = set()

        def first_delete_throttled(_i: int, seen: Any) -> Any:
            if seen.is_delete_objects and not throttled_once:
                throttled_once.add(seen.path)
                return SLOW_DOWN
            return None

        proxy.inject(first_delete_throttled)
        result = vacuum(dlog, plan=plan.to_dict(), dry_run=False, clock=now)
        applied = _counts(proxy.snapshot(), key)
    assert result.deleted == n and not result.dropped
    # one DeleteObjects per 1,000 files reaches the server, plus the throttled attempt that was retried
    assert applied["DeleteObjects"] == math.ceil(n / 1000) and applied["throttled"] == 1
    assert applied["table LIST pages"] == 0  # apply never lists the table again
    print(
        f"\nS3 vacuum of {n} files ({objects} objects under the table): dry run {dry}; dry run, every 2nd "
        f"request throttled {throttled}; apply, deletes always throttled {failed}; apply, first delete "
        f"throttled {applied}"
    )
    opts = deltalake_storage_options(s3_server)
    assert sorted(DeltaTable(uri, storage_options=opts).to_pyarrow_table().column("id").to_pylist()) == [2, 3]
    left = boto3_client(s3_server).list_objects_v2(Bucket=S3_BUCKET, Prefix=key + "/p=")["KeyCount"]
    assert left == 1  # the active file
