"""PURGE (REORG TABLE ... APPLY (PURGE)) and OPTIMIZE's lone-file case (delta-io/delta #5781).

The rules over values (protocol.purge), then the operation on corpus tables with deletion vectors and on
tables delta-rs writes, their vectors added by `delete_rows` (delta-rs 1.6.6 deletes by rewriting files, so
it never writes one): a `u` vector file and a DELETE commit shaped as Spark writes them, put-if-absent. Every
result is read back by delta-rs at the new version and at every older one.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import uuid
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyroaring import BitMap64

deltalake = pytest.importorskip("deltalake")
from conftest import copy_table  # noqa: E402
from deltalake import DeltaTable, write_deltalake  # noqa: E402
from test_optimize import _with_protocol, canonical_rows, deltars_rows, listing  # noqa: E402

from airflow_delta_provider.delta.delta_log import DeltaLog  # noqa: E402
from airflow_delta_provider.delta.engines.local import local_bin_rewriter  # noqa: E402
from airflow_delta_provider.delta.errors import (  # noqa: E402
    ConcurrentDeleteReadError,
    ConcurrentModificationError,
    InvalidArgumentError,
    LogCorruptedError,
    UnsupportedFeatureError,
)
from airflow_delta_provider.delta.maintenance.optimize import optimize  # noqa: E402
from airflow_delta_provider.delta.maintenance.purge import purge  # noqa: E402
from airflow_delta_provider.delta.protocol.actions import AddFile, DeletionVectorDescriptor  # noqa: E402
from airflow_delta_provider.delta.protocol.optimize import Bin, expected_rows  # noqa: E402
from airflow_delta_provider.delta.protocol.purge import (  # noqa: E402
    PurgePlan,
    deleted_ratio,
    needs_purge,
    operation_parameters,
    plan_purge,
    revalidate,
)
from airflow_delta_provider.delta.read.deletion_vectors import PORTABLE_MAGIC, read_deletion_vector  # noqa: E402


# -- the rules ----------------------------------------------------------------------------------------------
def add(
    path: str, size: int = 10, part: str | None = "a", *, records: int | None = 100, dv: int | None = None
) -> AddFile:
    stats = None if records is None else json.dumps({"numRecords": records})
    vector = None if dv is None else DeletionVectorDescriptor("u", f"ab^-aqEH.-t@S}}K{{vb[*k{path}", 40, dv, offset=1)
    return AddFile(path, {"p": part}, size, 0, True, stats, None, vector)


def test_which_files_need_a_purge() -> None:
    assert not needs_purge(add("plain"))
    assert needs_purge(add("one", dv=1))  # ratio 0: every vector that hides rows (Spark's DeltaPurgeOperation)
    assert not needs_purge(add("empty", dv=0))  # an empty vector hides nothing
    assert needs_purge(add("unknown", records=None, dv=0))  # no numRecords: rewritten so the new file has stats
    assert needs_purge(add("half", dv=50), 0.5) and not needs_purge(add("less", dv=49), 0.5)
    assert deleted_ratio(add("q", dv=25)) == 0.25 and deleted_ratio(add("plain")) == 0.0
    assert deleted_ratio(add("u", records=None, dv=3)) is None
    assert expected_rows([add("x", dv=25), add("y")]) == 175 and expected_rows([add("z", records=None)]) is None


def test_plan_packs_per_partition_and_keeps_lone_files() -> None:
    files = [
        add("a1", 60, dv=5),
        add("a2", 30, dv=1),
        add("a3", 30),
        add("b1", 500, "b", dv=90),
        add("c1", 5, None, dv=2),
    ]
    plan = plan_purge(files, ["p"], table="t", version=7, target_size=100)
    assert [(b.partition, [f.path for f in b.files]) for b in plan.bins] == [
        ("p=__HIVE_DEFAULT_PARTITION__", ["c1"]),
        ("p=a", ["a2", "a1"]),
        ("p=b", ["b1"]),  # larger than the target and alone: rewritten all the same (Spark keeps REORG's lone bins)
    ]
    summary = plan.summary()
    assert summary["num_files"] == 4 and summary["num_deleted_rows"] == 98 and summary["dv_bytes"] == 160
    assert summary["files"][-1] == {
        "path": "b1",
        "partition": "p=b",
        "size": 500,
        "num_records": 100,
        "dv_cardinality": 90,
        "dv_size_bytes": 40,
        "deleted_ratio": 0.9,
    }
    over_5_percent = plan_purge(files, ["p"], table="t", version=7, target_size=100, min_deleted_ratio=0.05)
    assert [f.path for f in over_5_percent.files] == ["a1", "b1"]
    again = PurgePlan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert again.bins == plan.bins and again.version == 7
    with pytest.raises(InvalidArgumentError, match="min_deleted_ratio"):
        plan_purge(files, ["p"], table="t", version=7, target_size=100, min_deleted_ratio=1.5)
    with pytest.raises(InvalidArgumentError, match="plan"):
        PurgePlan.from_dict({"version": 1})


def test_revalidate_drops_files_removed_or_whose_vector_changed() -> None:
    a1, a2, b1 = add("a1", dv=5), add("a2", dv=1), add("b1", part="b", dv=9)
    plan = PurgePlan("t", 3, 0.0, 100, None, [Bin("p=a", {"p": "a"}, (a1, a2)), Bin("p=b", {"p": "b"}, (b1,))])
    changed = add("a2", dv=2)  # a DELETE since the plan: same path, a new vector
    checked = revalidate(plan, {"a1": a1, "a2": changed}, 5)
    assert checked.version == 5 and [[f.path for f in b.files] for b in checked.bins] == [["a1"]]
    assert checked.dropped == [
        {"path": "a2", "reason": "its deletion vector changed after version 3 (1 -> 2 rows)"},
        {"path": "b1", "reason": "removed after version 3"},
    ]


def test_a_budget_takes_the_bins_with_most_dead_bytes_first() -> None:
    files = [add("few", 100, dv=1), add("many", 100, dv=80), add("some", 100, dv=30), add("b", 100, "b", dv=50)]
    plan = plan_purge(files, ["p"], table="t", version=1, target_size=100, max_files=2)
    assert [f.path for f in plan.files] == ["many", "b"]
    assert [f.path for b in plan.over_budget for f in b.files] == ["some", "few"]
    assert plan.summary()["num_files_over_budget"] == 2 and plan.summary()["bytes_over_budget"] == 200
    big_first = plan_purge(files, ["p"], table="t", version=1, target_size=1000, max_bytes=50)
    assert len(big_first.files) == 3  # the first bin (partition a, most dead bytes) is taken whatever its size
    assert [f.path for b in big_first.over_budget for f in b.files] == ["b"]
    with pytest.raises(InvalidArgumentError, match="max_files"):
        plan_purge(files, ["p"], table="t", version=1, target_size=100, max_files=0)


def test_commit_parameters_are_sparks_reorg() -> None:
    assert operation_parameters([]) == {"predicate": "[]", "applyPurge": True}
    assert operation_parameters(["p = 'a'"]) == {"predicate": "[\"p = 'a'\"]", "applyPurge": True}


# -- deletion vectors on delta-rs tables ---------------------------------------------------------------------
REPO = Path(__file__).resolve().parents[2]
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def z85(data: bytes) -> str:
    out = []
    for i in range(0, len(data), 4):
        value = int.from_bytes(data[i : i + 4], "big")
        out.append("".join(_Z85[value // 85**k % 85] for k in range(4, -1, -1)))
    return "".join(out)


def commit_actions(path: Path, version: int) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (path / "_delta_log" / f"{version:020d}.json").read_text().splitlines() if x]


def delete_rows(path: Path, file: str, rows: list[int]) -> int:
    """A DELETE of `rows` (indexes) of data file `file` as Spark commits it: the union with its current vector
    written as a new `u` vector file, then remove(path, old dv) + add(path, new dv), put-if-absent."""
    DeltaLog.clear_cache()
    log = DeltaLog(str(path))
    snap = log.update()
    old = next(f for f in snap.all_files() if f.path == file)
    deleted = BitMap64(rows)
    if old.deletion_vector is not None:
        deleted |= BitMap64(read_deletion_vector(log.store, log.table_uri, old.deletion_vector).to_pylist())
    data = struct.pack("<i", PORTABLE_MAGIC) + deleted.serialize()
    dv_id = uuid.uuid4()
    (path / f"deletion_vector_{dv_id}.bin").write_bytes(
        b"\x01" + struct.pack(">i", len(data)) + data + struct.pack(">I", zlib.crc32(data))
    )
    dv = {"storageType": "u", "pathOrInlineDv": z85(dv_id.bytes), "offset": 1, "sizeInBytes": len(data)}
    dv |= {"cardinality": len(deleted), "maxRowIndex": deleted.max()}
    base = {"path": old.path, "partitionValues": dict(old.partition_values), "size": old.size, "dataChange": True}
    remove = base | {"deletionTimestamp": snap.now_ms(), "extendedFileMetadata": True}
    if old.deletion_vector is not None:
        remove["deletionVector"] = old.deletion_vector.to_json()
    info = {"timestamp": snap.now_ms(), "operation": "DELETE", "operationParameters": {"predicate": "[]"}}
    lines = [{"commitInfo": info}, {"remove": remove}]
    lines.append({"add": base | {"modificationTime": old.modification_time, "stats": old.stats, "deletionVector": dv}})
    version = snap.version + 1
    with open(path / "_delta_log" / f"{version:020d}.json", "x") as fh:  # put-if-absent
        fh.write("\n".join(json.dumps(x) for x in lines) + "\n")
    return version


def dv_table(path: Path, seed: int, *, partitioned: bool = True, files: int = 6, rows: int = 50) -> Path:
    """A delta-rs table with deletion vectors enabled, then a few rows of most files deleted through vectors."""
    rng = random.Random(seed)
    for i in range(files):
        batch = pa.table(
            {
                "id": pa.array(range(i * rows, (i + 1) * rows), pa.int64()),
                "v": pa.array([rng.random() for _ in range(rows)]),
                "s": pa.array([rng.choice(["x", "y", None]) for _ in range(rows)]),
                "part": pa.array([rng.choice("ab") if partitioned else "a"] * rows),
            }
        )
        write_deltalake(
            str(path),
            batch,
            mode="append",
            partition_by=["part"] if partitioned else None,
            configuration={"delta.enableDeletionVectors": "true"},
        )
    names = sorted(f.path for f in DeltaLog(str(path)).update().all_files())
    for k, name in enumerate(names):
        if k % 3 != 2:  # every third file keeps no vector
            delete_rows(path, name, rng.sample(range(rows), rng.choice([1, 3, 10, 25])))
    return path


def active_dvs(path: Path) -> dict[str, int]:
    DeltaLog.clear_cache()
    return {
        f.path: f.deletion_vector.cardinality for f in DeltaLog(str(path)).update().all_files() if f.deletion_vector
    }


def versions_rows(path: Path) -> dict[int, Counter[str]]:
    return {v: deltars_rows(path, v) for v in range(DeltaTable(str(path)).version() + 1)}


@pytest.mark.parametrize(("seed", "partitioned"), [(1, True), (2, False)])
def test_purge_removes_every_vector_and_keeps_every_row(tmp_path: Path, seed: int, partitioned: bool) -> None:
    path = dv_table(tmp_path / "t", seed, partitioned=partitioned)
    history = versions_rows(path)
    files_before, dvs = listing(path), active_dvs(path)
    assert dvs and all(sum(history[v].values()) for v in history)
    dry = purge(str(path))
    assert listing(path) == files_before and dry.version is None  # a dry run by default writes nothing
    assert sorted(f["path"] for f in dry.to_dict()["plan"]["files"]) == sorted(dvs)
    assert {f["path"]: f["dv_cardinality"] for f in dry.plan.summary()["files"]} == dvs
    result = purge(str(path), dry_run=False)
    assert result.version == max(history) + 1
    assert deltars_rows(path) == history[max(history)]
    assert all(deltars_rows(path, v) == rows for v, rows in history.items())  # time travel unchanged
    assert active_dvs(path) == {} and all(a.deletion_vector is None for a in result.added)
    info, *actions = commit_actions(path, result.version)
    assert info["commitInfo"]["operation"] == "REORG"
    assert info["commitInfo"]["operationParameters"] == {"predicate": "[]", "applyPurge": True}
    metrics = info["commitInfo"]["operationMetrics"]
    assert int(metrics["numDeletionVectorsRemoved"]) == len(dvs)
    assert int(metrics["numDeletionVectorRowsRemoved"]) == sum(dvs.values())
    assert all(not next(iter(a.values()))["dataChange"] for a in actions)
    removes = [a["remove"] for a in actions if "remove" in a]
    assert {r["path"] for r in removes} == set(dvs) and all(r["deletionVector"] for r in removes)
    week = 7 * 86_400_000  # delta.deletedFileRetentionDuration's default: the old bytes stay until VACUUM after it
    assert result.erasable_after_ms == max(r["deletionTimestamp"] for r in removes) + week
    assert DeltaTable(str(path)).history(1)[0]["operation"] == "REORG"
    again = purge(str(path), dry_run=False)  # idempotent: nothing left to purge
    assert again.version is None and not again.plan.bins


def test_min_deleted_ratio_rewrites_only_files_over_it(tmp_path: Path) -> None:
    path = dv_table(tmp_path / "t", 3)
    rows, dvs = deltars_rows(path), active_dvs(path)
    result = purge(str(path), min_deleted_ratio=0.2, dry_run=False)  # 10 of 50 rows and more
    assert {f.path for f in result.removed} == {p for p, n in dvs.items() if n >= 10}
    assert active_dvs(path) == {p: n for p, n in dvs.items() if n < 10}
    assert deltars_rows(path) == rows


def test_a_file_whose_vector_hides_every_row_is_only_removed(tmp_path: Path) -> None:
    path = dv_table(tmp_path / "t", 4, files=2)
    victim = sorted(active_dvs(path))[0]
    delete_rows(path, victim, list(range(50)))
    rows = deltars_rows(path)
    result = purge(str(path), dry_run=False)
    assert deltars_rows(path) == rows
    assert victim in {f.path for f in result.removed} and active_dvs(path) == {}


def test_where_limits_the_purge_to_partitions(tmp_path: Path) -> None:
    path = dv_table(tmp_path / "t", 5, files=8)
    dvs = active_dvs(path)
    result = purge(str(path), where="part = 'a'", dry_run=False)
    assert {f.path for f in result.removed} == {p for p in dvs if p.startswith("part=a/")}
    assert set(active_dvs(path)) == {p for p in dvs if p.startswith("part=b/")}
    assert (
        commit_actions(path, result.version)[0]["commitInfo"]["operationParameters"]["predicate"] == "[\"part = 'a'\"]"
    )
    with pytest.raises(InvalidArgumentError, match="partition columns"):
        purge(str(path), where="id > 3")


def test_a_budget_of_half_the_work_commits_half_and_reports_the_rest(tmp_path: Path) -> None:
    path = dv_table(tmp_path / "t", 14, files=8)
    rows, dvs = deltars_rows(path), active_dvs(path)
    half = len(dvs) // 2
    first = purge(str(path), dry_run=False, target_size=1, max_files=half)  # one file per bin
    out = first.to_dict()
    assert out["num_files_removed"] == half and out["plan"]["num_files_over_budget"] == len(dvs) - half
    assert len(active_dvs(path)) == len(dvs) - half and deltars_rows(path) == rows
    rest = purge(str(path), dry_run=False, target_size=1)
    assert len(rest.removed) == len(dvs) - half and active_dvs(path) == {} and deltars_rows(path) == rows


def test_batches_commit_one_by_one_and_a_later_batch_drops_a_file_changed_meanwhile(tmp_path: Path) -> None:
    path = dv_table(tmp_path / "t", 15, partitioned=False, files=6)
    dvs = active_dvs(path)
    plan = purge(str(path), target_size=1).plan
    last = plan.bins[-1].files[0].path
    calls: list[int] = []
    inner = local_bin_rewriter(1)

    def run(layout: Any, bins: Any, *, store: Any, clock: Any) -> Any:
        out = inner(layout, bins, store=store, clock=clock)
        if not calls:  # a DELETE on the last batch's file while the first batch commits
            delete_rows(path, last, [0])
        calls.append(len(bins))
        return out

    result = purge(str(path), dry_run=False, target_size=1, max_commit_bytes=1, executor=run)
    assert len(result.versions) == len(dvs) - 1 and calls == [1] * (len(dvs) - 1)
    assert [d["path"] for d in result.dropped] == [last] and "changed" in result.dropped[0]["reason"]
    assert set(active_dvs(path)) == {last}
    history = versions_rows(path)
    for v in result.versions:  # every batch keeps the rows of the version before it
        assert history[v] == history[v - 1]


# -- corpus tables with deletion vectors ---------------------------------------------------------------------
CORPUS_TABLES = [
    "delta-golden/dv-partitioned-with-checkpoint",
    "delta-golden/dv-with-columnmapping",
    "delta-golden/log-replay-dv-key-cases",
    "delta-kernel-java/basic-dv-no-checkpoint",
    "delta-kernel-java/basic-dv-with-checkpoint",
    "delta-rs/table-with-dv-small",
    "delta-rs/table_with_deletion_logs",
    "delta-rs/cdf-table-with-cdc-and-dvs",
]


@pytest.mark.parametrize("name", CORPUS_TABLES)
def test_corpus_tables(tmp_path: Path, name: str) -> None:
    path = copy_table(name, tmp_path)
    latest = DeltaTable(str(path)).version()
    history = {v: deltars_rows(path, v) for v in range(max(0, latest - 4), latest + 1)}
    dvs = active_dvs(path)
    assert dvs, "a corpus table with deletion vectors in use"
    result = purge(str(path), dry_run=False)
    assert result.version == latest + 1 and {f.path for f in result.removed} == set(dvs)
    assert all(deltars_rows(path, v) == rows for v, rows in history.items())
    assert deltars_rows(path) == history[latest]
    assert active_dvs(path) == {}


# -- re-validation and racing writers ------------------------------------------------------------------------
def test_a_plan_applied_later_drops_a_file_whose_vector_changed(tmp_path: Path) -> None:
    path = dv_table(tmp_path / "t", 6)
    dry = purge(str(path)).to_dict()
    changed = sorted(active_dvs(path))[0]
    delete_rows(path, changed, [49])  # another DELETE on a planned file before the apply
    rows = deltars_rows(path)
    result = purge(str(path), plan=dry["plan"], dry_run=False)
    out = result.to_dict()
    assert [d["path"] for d in out["dropped"]] == [changed] and "deletion vector changed" in out["dropped"][0]["reason"]
    assert changed not in {f.path for f in result.removed}
    assert active_dvs(path) == {changed: active_dvs(path)[changed]}
    assert deltars_rows(path) == rows  # the later delete stays deleted


def _racing(action: Any) -> Any:
    """The local rewriter, then `action` (another writer) before the commit."""
    inner = local_bin_rewriter(1)

    def run(layout: Any, bins: Any, *, store: Any, clock: Any) -> Any:
        out = inner(layout, bins, store=store, clock=clock)
        action()
        return out

    return run


def test_a_racing_delete_on_a_purged_file_conflicts_and_nothing_is_lost(tmp_path: Path) -> None:
    path = dv_table(tmp_path / "t", 7)
    victim = sorted(active_dvs(path))[0]
    before = DeltaTable(str(path)).version()
    log = DeltaLog(str(path))
    old = next(f for f in log.update().all_files() if f.path == victim).deletion_vector
    assert old is not None
    newly = {0, 1, 2} - set(read_deletion_vector(log.store, log.table_uri, old).to_pylist())
    with pytest.raises(ConcurrentModificationError, match="left for VACUUM") as info:
        purge(str(path), dry_run=False, executor=_racing(lambda: delete_rows(path, victim, [0, 1, 2])))
    assert isinstance(info.value, ConcurrentDeleteReadError) and info.value.file == victim
    assert DeltaTable(str(path)).version() == before + 1  # only the delete committed
    assert DeltaTable(str(path)).history(1)[0]["operation"] == "DELETE"
    rows = deltars_rows(path)
    assert sum(rows.values()) == sum(deltars_rows(path, before).values()) - len(newly)  # the delete holds
    result = purge(str(path), dry_run=False)  # a rerun purges what the delete left
    assert deltars_rows(path) == rows and active_dvs(path) == {} and result.version == before + 2


def test_a_racing_append_rebases(tmp_path: Path) -> None:
    path = dv_table(tmp_path / "t", 8)
    extra = pa.table({"id": pa.array([10_000], pa.int64()), "v": [0.5], "s": ["z"], "part": ["a"]})
    rows = deltars_rows(path)
    purge(str(path), dry_run=False, executor=_racing(lambda: write_deltalake(str(path), extra, mode="append")))
    assert deltars_rows(path) == rows + canonical_rows(extra) and active_dvs(path) == {}


KILLED_PURGE = """
import os, signal, sys
from airflow_delta_provider.delta.delta_log import DeltaLog
from airflow_delta_provider.delta.maintenance.purge import purge
from airflow_delta_provider.delta.storage.local import LocalLogStore

table, point, k = sys.argv[1], sys.argv[2], int(sys.argv[3])

class KillingStore(LocalLogStore):
    # the real local store; the process dies at the k-th commit put, before it starts or once it landed
    commits = 0

    def put_if_absent(self, path, data):
        commit = path.endswith(".json") and "_delta_log" in path
        if commit and point == "before_commit" and self.commits + 1 == k:
            os.kill(os.getpid(), signal.SIGKILL)
        super().put_if_absent(path, data)
        self.commits += commit
        if commit and point == "after_commit" and self.commits == k:
            os.kill(os.getpid(), signal.SIGKILL)

purge(DeltaLog(table, store=KillingStore()), dry_run=False, target_size=1, max_commit_bytes=1)
sys.exit(3)  # not killed
"""


@pytest.mark.parametrize(("point", "k"), [("before_commit", 1), ("after_commit", 1), ("before_commit", 3)])
def test_kill_9_mid_purge_leaves_a_readable_table_and_a_rerun_finishes(tmp_path: Path, point: str, k: int) -> None:
    path = dv_table(tmp_path / "t", 16, partitioned=False, files=6)
    v0, rows, dvs, files_before = DeltaTable(str(path)).version(), deltars_rows(path), active_dvs(path), listing(path)
    argv = [sys.executable, "-c", KILLED_PURGE, str(path), point, str(k)]
    proc = subprocess.run(
        argv, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    committed = k if point == "after_commit" else k - 1
    assert DeltaTable(str(path)).version() == v0 + committed
    assert deltars_rows(path) == rows and len(active_dvs(path)) == len(dvs) - committed
    after = listing(path)
    assert {p: after.get(p) for p in files_before} == files_before  # nothing changed or deleted
    rerun = purge(str(path), dry_run=False)
    assert rerun.version == v0 + committed + 1 and deltars_rows(path) == rows and active_dvs(path) == {}


# -- refusals: nothing written ------------------------------------------------------------------------------
def test_a_rewrite_that_loses_or_revives_rows_is_not_committed(tmp_path: Path) -> None:
    path = dv_table(tmp_path / "t", 9, files=3)
    version, rows = DeltaTable(str(path)).version(), deltars_rows(path)
    inner = local_bin_rewriter(1)

    def ignoring_vectors(layout: Any, bins: Any, *, store: Any, clock: Any) -> Any:
        bare = [Bin(b.partition, b.partition_values, tuple(_without_dv(f) for f in b.files)) for b in bins]
        return inner(layout, bare, store=store, clock=clock)

    with pytest.raises(LogCorruptedError, match="rows"):
        purge(str(path), dry_run=False, executor=ignoring_vectors)
    assert DeltaTable(str(path)).version() == version and deltars_rows(path) == rows


def _without_dv(f: AddFile) -> AddFile:
    return dataclasses.replace(f, deletion_vector=None)


def test_row_tracking_is_refused_naming_the_feature(tmp_path: Path) -> None:
    path = dv_table(tmp_path / "t", 10, files=2)
    _with_protocol(path, ["deletionVectors", "rowTracking", "domainMetadata"], {"delta.enableRowTracking": "true"})
    files = listing(path)
    with pytest.raises(UnsupportedFeatureError, match="rowTracking"):
        purge(str(path), dry_run=False)
    assert listing(path) == files


def test_a_table_whose_features_a_rewrite_cannot_keep_is_refused(tmp_path: Path) -> None:
    path = copy_table("delta-rs/table_with_liquid_clustering", tmp_path)
    files = listing(path)
    with pytest.raises(UnsupportedFeatureError, match="liquid"):
        purge(str(path), dry_run=False)
    assert listing(path) == files


def test_bad_arguments_are_typed(tmp_path: Path) -> None:
    path = dv_table(tmp_path / "t", 11, files=1)
    elsewhere = purge(str(dv_table(tmp_path / "u", 12, files=1))).to_dict()["plan"]
    for kwargs in (
        {"dry_run": "no"},
        {"min_deleted_ratio": -0.1},
        {"max_commit_bytes": 0},
        {"max_files": 0},
        {"plan": ["x"]},
        {"plan": {"version": 0}},
        {"plan": elsewhere},  # another table's plan
    ):
        with pytest.raises(InvalidArgumentError):
            purge(str(path), **kwargs)  # type: ignore[arg-type]


# -- OPTIMIZE's lone file over maxDeletedRowsRatio (delta-io/delta #5781) ------------------------------------
def test_optimize_rewrites_a_lone_file_over_the_deleted_rows_ratio(tmp_path: Path) -> None:
    path = dv_table(tmp_path / "t", 12, partitioned=False, files=1, rows=200)
    (name,) = active_dvs(path)
    delete_rows(path, name, list(range(100)))  # half its rows: far over 0.05
    rows = deltars_rows(path)
    result = optimize(str(path), target_size=1)  # the file is over the target: alone in its bin, as in #5781
    assert [f.path for f in result.removed] == [name] and active_dvs(path) == {}
    assert deltars_rows(path) == rows
    assert commit_actions(path, result.version)[0]["commitInfo"]["operation"] == "OPTIMIZE"
    below = dv_table(tmp_path / "u", 13, partitioned=False, files=1, rows=200)  # at most 25 of 200 rows deleted
    assert optimize(str(below), target_size=1, max_deleted_rows_ratio=0.2).version is None


# -- Spark ------------------------------------------------------------------------------------------------------
@pytest.mark.spark
def test_spark_engine_purges_as_the_local_one(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    from support.spark_cluster import local_session

    from airflow_delta_provider.delta.engines.spark import SparkEngine

    local = dv_table(tmp_path / "a", 17)
    remote = Path(shutil.copytree(local, tmp_path / "b"))
    rows = deltars_rows(local)
    purge(str(local), dry_run=False)
    spark = local_session("purge-tests")  # the suite's shared local[2] session: left running
    result = purge(DeltaLog(str(remote), engine=SparkEngine(spark)), dry_run=False)
    assert result.version is not None and active_dvs(remote) == {} == active_dvs(local)
    assert deltars_rows(remote) == rows == deltars_rows(local)
