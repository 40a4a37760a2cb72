"""The commit path: `start_transaction(...).commit()` on real tables and real stores.

* What a commit writes (commitInfo first, staged actions round-tripping exactly) and that delta-rs reads
  it (version, files, history).
* Refusals before anything is written: unknown writer feature, catalog-managed table, read-only store,
  store without atomic put-if-absent, features whose obligations we do not meet.
* Races, made deterministic by a store that lets a real competing transaction commit first (a real
  interleaving, not a fake): rebase, typed conflict, retry bound, ICT against the winner.
* Races between real processes (local filesystem, and the loopback S3 server with conditional PUT): two
  writers meet at a barrier each round, so every round both commit the same version and exactly one
  wins; the loser rebases (appends) or raises the typed conflict (removes of the same file).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from conftest import CORPUS, REPO, copy_table

from airflow_delta_provider.delta import DeltaLog
from airflow_delta_provider.delta.errors import (
    CommitRetriesExceededError,
    ConcurrentDeleteReadError,
    ConcurrentTransactionError,
    InvalidArgumentError,
    OperationNotAllowedError,
    UnsupportedFeatureError,
    UnsupportedStoreError,
)
from airflow_delta_provider.delta.protocol.actions import (
    AddCDCFile,
    AddFile,
    CommitInfo,
    DeletionVectorDescriptor,
    DomainMetadata,
    Protocol,
    RemoveFile,
    SetTransaction,
    action_from_json,
)
from airflow_delta_provider.delta.storage import FsspecLogStore, LocalLogStore
from airflow_delta_provider.delta.txn import start_transaction
from airflow_delta_provider.testing import DeltaLogBuilder

ICT = {"delta.enableInCommitTimestamps": "true"}


def builder(tmp_path: Path, name: str = "t", **kw) -> DeltaLogBuilder:
    b = DeltaLogBuilder(tmp_path / name, schema={"id": "long", "p": "string"}, **kw)
    b.create()
    b.append(["a.parquet", "b.parquet"], size=10)
    return b


def snapshot(path: str | Path, store=None):
    return DeltaLog(str(path), store=store).update()


def commit_lines(table: str | Path, version: int) -> list[dict]:
    text = (Path(table) / "_delta_log" / f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def tree(path: str | Path) -> dict[str, bytes]:
    """Every file under `path` with its content: "nothing was written" means this did not change."""
    root = Path(path)
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def new_add(path: str, **kw) -> AddFile:
    return AddFile(path, {}, kw.pop("size", 10), kw.pop("modification_time", 1), **kw)


# -- what a commit writes -------------------------------------------------------------------------------


def test_commit_writes_commit_info_first_and_delta_rs_reads_it(tmp_path):
    from deltalake import DeltaTable

    b = builder(tmp_path)
    txn = start_transaction(snapshot(b.path), "WRITE", {"mode": "Append", "partitionBy": []})
    txn.add(new_add("c.parquet", stats='{"numRecords":3}'), new_add("d.parquet"))
    assert txn.commit(operation_metrics={"numFiles": 2}) == 2
    assert txn.committed_version == 2 and txn.attempts == 1

    first, *rest = commit_lines(b.path, 2)
    info = first["commitInfo"]
    assert info["operation"] == "WRITE"
    assert info["operationParameters"] == {"mode": "Append", "partitionBy": "[]"}
    assert info["readVersion"] == 1 and info["isolationLevel"] == "Serializable" and info["isBlindAppend"] is True
    assert info["operationMetrics"] == {"numFiles": "2"}
    assert info["engineInfo"].startswith("airflow-delta-provider/") and info["txnId"] == txn.txn_id
    assert "inCommitTimestamp" not in info  # not enabled on this table
    assert [next(iter(line)) for line in rest] == ["add", "add"]

    dt = DeltaTable(b.path)
    assert dt.version() == 2
    assert sorted(dt.get_add_actions(flatten=True).column("path").to_pylist()) == [
        "a.parquet",
        "b.parquet",
        "c.parquet",
        "d.parquet",
    ]
    latest = dt.history(1)[0]
    assert latest["operation"] == "WRITE" and latest["engineInfo"] == info["engineInfo"]
    assert snapshot(b.path).num_files == 4
    with pytest.raises(OperationNotAllowedError, match="already committed"):
        txn.commit()


def test_staged_actions_round_trip_exactly(tmp_path):
    b = builder(
        tmp_path,
        protocol=(3, 7),
        reader_features=["deletionVectors"],
        writer_features=["deletionVectors", "domainMetadata", "changeDataFeed"],
    )
    dv = DeletionVectorDescriptor("u", "ab^-aqEH.-t@S}K{vb[*k^", 36, 2, offset=1, max_row_index=9)
    staged = [
        AddFile(
            "p=x%20y/e.parquet",
            {"p": "x y", "q": None},
            123,
            456,
            stats='{"numRecords":5,"minValues":{"id":1}}',
            tags={"INSERTION_TIME": "1"},
            deletion_vector=dv,
            base_row_id=7,
            default_row_commit_version=2,
            clustering_provider="liquid",
        ),
        RemoveFile("a.parquet", 999, True, True, {}, 10, None, {"t": "v"}, None, 3, 1),
        AddCDCFile("_change_data/c.parquet", {"p": "x"}, 5, False, {"k": "v"}),
        DomainMetadata("user.domain", '{"k":1}'),
        SetTransaction("app", 4, 1000),
    ]
    txn = start_transaction(snapshot(b.path), "DELETE", {"predicate": ["id > 1"]})
    version = txn.add(*staged).commit()
    written = [action_from_json(line) for line in commit_lines(b.path, version)]
    assert isinstance(written[0], CommitInfo)
    assert written[1:] == staged
    assert written[0].raw["isBlindAppend"] is False  # a remove and a cdc file
    snap = snapshot(b.path)
    (e,) = [f for f in snap.all_files() if f.path.startswith("p=")]
    assert e == staged[0].with_data_change(False)  # replay reports active files with dataChange=false
    assert snap.domain_metadata["user.domain"].configuration == '{"k":1}' and snap.transaction_version("app") == 4


def test_commit_info_only_commit(tmp_path):
    from deltalake import DeltaTable

    b = builder(tmp_path)
    params = {"retentionCheckEnabled": True, "defaultRetentionMillis": 604800000, "specifiedRetentionMillis": 0}
    v1 = start_transaction(snapshot(b.path), "VACUUM START", params).commit(operation_metrics={"numFilesToDelete": 0})
    v2 = start_transaction(snapshot(b.path), "VACUUM END", {"status": "COMPLETED"}).commit()
    assert (v1, v2) == (2, 3)
    (line,) = commit_lines(b.path, 3)
    assert line["commitInfo"]["isolationLevel"] == "SnapshotIsolation"
    assert line["commitInfo"]["operationParameters"] == {"status": "COMPLETED"}
    dt = DeltaTable(b.path)
    assert [h["operation"] for h in dt.history(2)] == ["VACUUM END", "VACUUM START"]
    assert len(dt.file_uris()) == 2


def test_enabling_ict_records_the_enablement_in_the_same_commit(tmp_path):
    from deltalake import DeltaTable

    b = builder(tmp_path)  # protocol (1, 2), commits stamped in 2023
    snap = snapshot(b.path)
    protocol = Protocol(1, 7, None, ("appendOnly", "invariants", "inCommitTimestamp"))
    metadata = dataclasses.replace(snap.metadata, configuration={**snap.metadata.configuration, **ICT})
    version = start_transaction(snap, "SET TBLPROPERTIES", {"properties": ICT}).add(metadata, protocol).commit()
    info, written_protocol, written_metadata = (action_from_json(line) for line in commit_lines(b.path, version))
    ict = info.in_commit_timestamp
    assert ict is not None and ict > snap.timestamp
    assert written_protocol == protocol  # protocol first, then metaData, whatever the staging order
    conf = written_metadata.configuration
    assert conf["delta.inCommitTimestampEnablementVersion"] == str(version)
    assert conf["delta.inCommitTimestampEnablementTimestamp"] == str(ict)
    assert written_metadata == dataclasses.replace(metadata, configuration=conf)
    assert snapshot(b.path).timestamp == ict
    assert DeltaTable(b.path).version() == version


def test_invalid_staging_is_refused(tmp_path):
    b = builder(tmp_path)
    txn = start_transaction(snapshot(b.path), "WRITE", {})
    with pytest.raises(InvalidArgumentError, match="commitInfo"):
        txn.add(CommitInfo({"operation": "X"}))
    txn.add(new_add("x.parquet"), new_add("x.parquet"))
    before = tree(b.path)
    with pytest.raises(InvalidArgumentError, match="twice"):
        txn.commit()
    txn2 = start_transaction(snapshot(b.path), "WRITE", {}).add(DomainMetadata("d", "{}"))
    with pytest.raises(UnsupportedFeatureError) as exc:  # a domainMetadata action needs the feature
        txn2.commit()
    assert exc.value.feature == "domainMetadata" and tree(b.path) == before
    for bad in (Protocol(3, 7, None, ("deletionVectors",)), Protocol(3, 7, ("deletionVectors",), ())):
        with pytest.raises(InvalidArgumentError, match="not a valid protocol"):
            start_transaction(snapshot(b.path), "UPGRADE PROTOCOL", {}).add(bad).commit()
    assert tree(b.path) == before


# -- application transactions: idempotent Airflow retries --------------------------------------------------


def test_same_app_id_and_version_commits_once(tmp_path):
    b = builder(tmp_path)
    first = start_transaction(snapshot(b.path), "WRITE", {}).set_app_transaction("dag.task", 7)
    assert first.add(new_add("run-7.parquet")).commit() == 2
    before = tree(b.path)
    retry = start_transaction(snapshot(b.path), "WRITE", {}).set_app_transaction("dag.task", 7)
    assert retry.already_applied
    assert retry.add(new_add("run-7-again.parquet")).commit() == 2  # the version holding it; nothing written
    assert tree(b.path) == before
    assert start_transaction(snapshot(b.path), "WRITE", {}).set_app_transaction("dag.task", 8).commit() == 3
    assert snapshot(b.path).transaction_version("dag.task") == 8


def test_concurrent_commits_of_one_app_id_conflict(tmp_path):
    b = builder(tmp_path)
    snap = snapshot(b.path)
    one = start_transaction(snap, "WRITE", {}).set_app_transaction("dag.task", 1).add(new_add("one.parquet"))
    two = start_transaction(snap, "WRITE", {}).set_app_transaction("dag.task", 1).add(new_add("two.parquet"))
    assert one.commit() == 2
    with pytest.raises(ConcurrentTransactionError, match=r"dag\.task"):
        two.commit()
    assert sorted(tree(Path(b.path) / "_delta_log")) == [f"{v:020d}.json" for v in range(3)]
    # the Airflow retry starts over from the table as it is: already applied, nothing written
    assert start_transaction(snapshot(b.path), "WRITE", {}).set_app_transaction("dag.task", 1).commit() == 2


# -- refusals before anything is written -----------------------------------------------------------------


def test_unknown_writer_feature_is_refused(tmp_path):
    b = builder(tmp_path, protocol=(1, 7), writer_features=["someFutureFeature"])
    before = tree(b.path)
    with pytest.raises(UnsupportedFeatureError) as exc:
        start_transaction(snapshot(b.path), "VACUUM START", {})
    assert exc.value.feature == "someFutureFeature"
    assert tree(b.path) == before


def test_catalog_managed_tables_are_refused(tmp_path):
    b = builder(tmp_path, protocol=(1, 7), writer_features=["catalogOwned-preview"])
    before = tree(b.path)
    with pytest.raises(OperationNotAllowedError, match="catalog-managed"):
        start_transaction(snapshot(b.path), "WRITE", {})
    assert tree(b.path) == before
    corpus = copy_table("delta-kernel-java/catalog-owned-preview", tmp_path)  # a reader feature too:
    before = tree(corpus)
    with pytest.raises(UnsupportedFeatureError, match="catalog"):  # not even a snapshot to start from
        snapshot(corpus)
    assert tree(corpus) == before and CORPUS not in corpus.parents


def test_features_whose_obligations_we_do_not_meet_refuse_what_needs_them(tmp_path):
    b = builder(tmp_path, protocol=(1, 7), writer_features=["domainMetadata", "rowTracking"])
    before = tree(b.path)
    txn = start_transaction(snapshot(b.path), "WRITE", {}).add(new_add("new.parquet"))
    with pytest.raises(UnsupportedFeatureError) as exc:
        txn.commit()
    assert exc.value.feature == "rowTracking" and tree(b.path) == before
    staged_protocol = start_transaction(snapshot(b.path), "UPGRADE PROTOCOL", {})
    staged_protocol.add(Protocol(1, 7, None, ("domainMetadata", "rowTracking", "someFutureFeature")))
    with pytest.raises(UnsupportedFeatureError, match="someFutureFeature"):
        staged_protocol.commit()
    assert tree(b.path) == before
    assert start_transaction(snapshot(b.path), "VACUUM END", {"status": "COMPLETED"}).commit() == 2


class ReadOnlyStore:
    """Only the read verbs of a real `LocalLogStore` (a store with no write verbs, as third-party stores
    written before the write contract are): a stand-in, since no such store ships with the library."""

    def __init__(self) -> None:
        self._store = LocalLogStore()

    def __getattr__(self, name: str):
        if name in ("list_from", "read_bytes", "open", "head", "is_dir", "join"):
            return getattr(self._store, name)
        raise AttributeError(name)


class NonAtomicStore(LocalLogStore):
    """A real local store declaring no atomic put-if-absent (as an S3-compatible server without
    conditional PUT would): commits must refuse it."""

    atomic_put_if_absent = False


@pytest.mark.parametrize("store", [ReadOnlyStore(), NonAtomicStore()], ids=["read-only", "non-atomic"])
def test_stores_that_cannot_commit_safely_are_refused(tmp_path, store):
    b = builder(tmp_path)
    before = tree(b.path)
    txn = start_transaction(snapshot(b.path, store), "WRITE", {}).add(new_add("x.parquet"))
    with pytest.raises(UnsupportedStoreError):
        txn.commit()
    assert tree(b.path) == before


def test_read_only_object_store_is_refused(tmp_path):
    import fsspec

    b = builder(tmp_path)
    root = f"memory://ro-{uuid.uuid4().hex[:8]}"
    fs = fsspec.filesystem("memory")
    for name, data in tree(b.path).items():
        fs.pipe(f"{root}/{name}", data)
    store = FsspecLogStore(root, read_only=True)
    txn = start_transaction(snapshot(root, store), "WRITE", {}).add(new_add("x.parquet"))
    with pytest.raises(UnsupportedStoreError, match="read-only"):
        txn.commit()
    assert sorted(fs.ls(f"{root}/_delta_log", detail=False)) == sorted(
        fs._strip_protocol(f"{root}/_delta_log/{v:020d}.json") for v in range(2)
    )


# -- races, interleaved deterministically -----------------------------------------------------------------


class CompetingStore(LocalLogStore):
    """A real local store; before each commit put it lets `compete(version)` commit first through another
    writer (a real transaction on the same table), so a race plays out the same way every run."""

    def __init__(self, compete) -> None:
        self.compete = compete
        self.puts: list[str] = []

    def put_if_absent(self, path: str, data: bytes) -> None:
        self.puts.append(os.path.basename(path))
        if path.endswith(".json") and self.compete is not None:
            self.compete(int(os.path.basename(path)[:20]))
        super().put_if_absent(path, data)


def competitor(table: str, *, times: int = 1, action=None):
    """`compete` for `CompetingStore`: the first `times` puts lose to a blind append (or `action()`)."""
    done: list[int] = []

    def compete(version: int) -> None:
        if len(done) < times:
            txn = start_transaction(snapshot(table), "WRITE", {"mode": "Append"})
            txn.add(action() if action else new_add(f"rival-{len(done)}.parquet"))
            done.append(txn.commit())

    compete.done = done
    return compete


def test_loser_rebases_over_a_blind_append_and_its_ict_follows_the_winner(tmp_path):
    b = builder(tmp_path, protocol=(1, 7), writer_features=["inCommitTimestamp"], configuration=ICT)
    compete = competitor(b.path, times=2)
    frozen = snapshot(b.path).timestamp  # our clock is stuck before the winners' commits
    txn = start_transaction(snapshot(b.path, CompetingStore(compete)), "WRITE", {}, clock=lambda: frozen)
    assert txn.add(new_add("mine.parquet")).commit() == 4
    assert compete.done == [2, 3] and txn.attempts == 3
    icts = [commit_lines(b.path, v)[0]["commitInfo"]["inCommitTimestamp"] for v in range(2, 5)]
    assert icts[0] < icts[1] < icts[2]  # after each winner, though our clock said otherwise
    assert {f.path for f in snapshot(b.path).all_files()} >= {"mine.parquet", "rival-0.parquet", "rival-1.parquet"}


def test_loser_that_read_a_removed_file_raises_and_writes_nothing(tmp_path):
    b = builder(tmp_path)

    def rival_removes_a() -> RemoveFile:
        return RemoveFile("a.parquet", 1, True)

    snap = snapshot(b.path, CompetingStore(competitor(b.path, action=rival_removes_a)))
    (a,) = [f for f in snap.all_files() if f.path == "a.parquet"]
    txn = start_transaction(snap, "DELETE", {"predicate": []}).read_files([a]).remove(a)
    with pytest.raises(ConcurrentDeleteReadError) as exc:
        txn.commit()
    assert exc.value.version == 2 and exc.value.file == "a.parquet"
    assert sorted(tree(Path(b.path) / "_delta_log")) == [f"{v:020d}.json" for v in range(3)]
    assert commit_lines(b.path, 2)[0]["commitInfo"]["txnId"] != txn.txn_id


def test_retries_are_bounded(tmp_path):
    b = builder(tmp_path)
    compete = competitor(b.path, times=100)
    txn = start_transaction(snapshot(b.path, CompetingStore(compete)), "WRITE", {}, max_retries=2)
    with pytest.raises(CommitRetriesExceededError):
        txn.add(new_add("mine.parquet")).commit()
    assert txn.attempts == 3 and compete.done == [2, 3, 4]
    assert all(commit_lines(b.path, v)[0]["commitInfo"]["txnId"] != txn.txn_id for v in range(5))


class LostAnswerStore(LocalLogStore):
    """Fault injection: the first commit put lands, then reports "exists" (the answer to a resend of a
    write whose first answer was lost, as on S3). The transaction must see its own txnId and stop."""

    def __init__(self) -> None:
        self.tripped = False

    def put_if_absent(self, path: str, data: bytes) -> None:
        super().put_if_absent(path, data)
        if not self.tripped:
            self.tripped = True
            raise FileExistsError(path)


def test_a_landed_commit_reported_as_lost_is_recognised_by_its_txn_id(tmp_path):
    b = builder(tmp_path)
    txn = start_transaction(snapshot(b.path, LostAnswerStore()), "WRITE", {})
    assert txn.add(new_add("mine.parquet")).commit() == 2
    assert sorted(tree(Path(b.path) / "_delta_log")) == [f"{v:020d}.json" for v in range(3)]  # no duplicate


# -- races between processes ------------------------------------------------------------------------------

WORKER = r"""
import json, os, sys, time
from airflow_delta_provider.delta import DeltaLog
from airflow_delta_provider.delta.errors import ConcurrentModificationError
from airflow_delta_provider.delta.protocol.actions import AddFile
from airflow_delta_provider.delta.txn import start_transaction

cfg = json.loads(sys.argv[1])
me, other, sync = cfg["id"], cfg["other"], cfg["sync"]

def barrier(name):
    open(os.path.join(sync, f"{name}-{me}"), "w").close()
    deadline = time.monotonic() + 300  # only so that a broken run ends
    while not os.path.exists(os.path.join(sync, f"{name}-{other}")):
        if time.monotonic() > deadline:
            raise SystemExit(f"barrier {name} timed out")
        time.sleep(0.002)

log = DeltaLog(cfg["table"], storage_options=cfg.get("storage_options"))
out = []
for i in range(cfg["rounds"]):
    snap = log.update()
    txn = start_transaction(snap, "WRITE", {"mode": "Append"})
    if cfg["mode"] == "append":
        path = f"w{me}-{i:03d}.parquet"
        txn.add(AddFile(path, {}, 100 + i, snap.now_ms()))
    else:
        path = f"shared-{i:03d}.parquet"
        (f,) = [f for f in snap.all_files() if f.path == path]
        txn.read_files([f]).remove(f)
    barrier(f"start-{i}")
    row = {"round": i, "path": path, "read_version": snap.version, "txn_id": txn.txn_id}
    try:
        row["version"] = txn.commit()
    except ConcurrentModificationError as exc:
        row["error"] = type(exc).__name__
    row["attempts"] = txn.attempts
    out.append(row)
    barrier(f"end-{i}")
print(json.dumps(out))
"""


def race(tmp_path: Path, table: str, mode: str, rounds: int, storage_options=None) -> list[dict]:
    """Two worker processes, `rounds` rounds each; every round both commit from the same snapshot."""
    sync = tmp_path / f"sync-{uuid.uuid4().hex[:6]}"
    sync.mkdir()
    procs = []
    for me, other in (("A", "B"), ("B", "A")):
        cfg = {"id": me, "other": other, "sync": str(sync), "table": table, "mode": mode, "rounds": rounds}
        if storage_options:
            cfg["storage_options"] = storage_options
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", WORKER, json.dumps(cfg)],
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    rows = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        rows += json.loads(out.strip().splitlines()[-1])
    return rows


def check_append_race(rows: list[dict], first_version: int, rounds: int, read_commit) -> None:
    """Each round: both committed, one at v and the other (rebased once) at v+1; every commit file holds
    the add its writer reported (no commit lost or overwritten)."""
    assert all("error" not in r for r in rows)
    versions = sorted(r["version"] for r in rows)
    assert versions == list(range(first_version, first_version + 2 * rounds))  # contiguous, none twice
    for i in range(rounds):
        a, b = sorted((r for r in rows if r["round"] == i), key=lambda r: r["version"])
        assert a["read_version"] == b["read_version"] == a["version"] - 1
        assert (a["attempts"], b["attempts"]) == (1, 2) and b["version"] == a["version"] + 1
    for r in rows:
        info, add = read_commit(r["version"])
        assert info["txnId"] == r["txn_id"] and add["path"] == r["path"]


def test_two_processes_racing_appends_on_an_ict_table(tmp_path):
    from deltalake import DeltaTable

    b = builder(tmp_path, protocol=(1, 7), writer_features=["inCommitTimestamp"], configuration=ICT)
    rounds = 30
    rows = race(tmp_path, b.path, "append", rounds)

    def read_commit(v):
        info, add = commit_lines(b.path, v)
        return info["commitInfo"], add["add"]

    check_append_race(rows, 2, rounds, read_commit)
    last = 1 + 2 * rounds
    icts = [commit_lines(b.path, v)[0]["commitInfo"]["inCommitTimestamp"] for v in range(2, last + 1)]
    assert all(x < y for x, y in itertools.pairwise(icts))  # monotonic across both writers
    expected = {"a.parquet", "b.parquet"} | {r["path"] for r in rows}
    assert {f.path for f in snapshot(b.path).all_files()} == expected
    dt = DeltaTable(b.path)
    assert dt.version() == last
    assert set(dt.get_add_actions(flatten=True).column("path").to_pylist()) == expected


def test_two_processes_removing_the_same_files_one_wins_the_other_conflicts(tmp_path):
    rounds = 20
    b = builder(tmp_path)
    b.append([f"shared-{i:03d}.parquet" for i in range(rounds)], size=5)  # version 2
    rows = race(tmp_path, b.path, "remove", rounds)
    for i in range(rounds):
        won, lost = sorted((r for r in rows if r["round"] == i), key=lambda r: "error" in r)
        assert "version" in won and lost["error"] == "ConcurrentDeleteReadError" and lost["attempts"] == 1
    assert sorted(r["version"] for r in rows if "version" in r) == list(range(3, 3 + rounds))
    removes = [
        line["remove"]["path"] for v in range(3, 3 + rounds) for line in commit_lines(b.path, v) if "remove" in line
    ]
    assert sorted(removes) == [f"shared-{i:03d}.parquet" for i in range(rounds)]  # each removed exactly once
    assert {f.path for f in snapshot(b.path).all_files()} == {"a.parquet", "b.parquet"}


# -- the same race on S3 (conditional PUT on the loopback server) ---------------------------------------------


@pytest.fixture(scope="module")
def s3():
    pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    from support.s3_server import create_bucket, start_moto_server

    with start_moto_server() as server:
        create_bucket(server, "txn-tests")
        yield server


def test_two_processes_racing_appends_on_s3(tmp_path, s3):
    from deltalake import DeltaTable
    from support.s3_server import boto3_client, deltalake_storage_options, s3_storage_options, write_sample_table

    uri = f"s3://txn-tests/race-{uuid.uuid4().hex[:8]}"
    rs_options = deltalake_storage_options(s3)
    write_sample_table(uri, rs_options, commits=1, partition_by=None)  # version 0, written by delta-rs
    rounds = 10
    rows = race(tmp_path, uri, "append", rounds, storage_options=s3_storage_options(s3))
    client = boto3_client(s3)
    key = uri.removeprefix("s3://txn-tests/")

    def read_commit(v):
        body = client.get_object(Bucket="txn-tests", Key=f"{key}/_delta_log/{v:020d}.json")["Body"].read()
        info, add = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
        return info["commitInfo"], add["add"]

    check_append_race(rows, 1, rounds, read_commit)
    dt = DeltaTable(uri, storage_options=rs_options)
    assert dt.version() == 2 * rounds
    paths = set(dt.get_add_actions(flatten=True).column("path").to_pylist())
    assert {r["path"] for r in rows} <= paths and len(paths) == 2 * rounds + 1
