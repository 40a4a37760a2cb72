"""Reversible VACUUM (issue 28): `vacuum(quarantine=True)`, `undo_quarantine`, `purge_quarantines`.

* VACUUM with retention 0 (and the override) and no grace period moves the files into
  `_delta_quarantine/<id>/files/`; old versions stop reading in delta-rs; the undo puts every file back
  and every version reads in delta-rs exactly as before.
* The quarantine folder is hidden: VACUUM's rules never plan it (pure rules), and later VACUUMs (FULL,
  LITE, with quarantine or not) never list, plan or delete it.
* Purge by age, with a clock; unfinished quarantines are left.
* Crashes: VACUUM and undo run in a subprocess whose store SIGKILLs it at the k-th move, after the
  copy of a copy+delete move, after a move, or before the completion marker (`support.faults`); every
  file is then at exactly one of its paths (or, for copy+delete, at both with the same bytes), and a
  rerun (VACUUM again, which resumes, or the same undo) finishes; delta-rs reads every version after.
* S3 (moto on loopback): copy+delete moves, the cost stated, and the undo restores.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

deltalake = pytest.importorskip("deltalake")
from deltalake import DeltaTable, write_deltalake  # noqa: E402
from support.faults import CopyDeleteLocalStore  # noqa: E402

from airflow_delta_provider.delta.delta_log import DeltaLog  # noqa: E402
from airflow_delta_provider.delta.errors import (  # noqa: E402
    InvalidArgumentError,
    OperationNotAllowedError,
    QuarantineError,
)
from airflow_delta_provider.delta.maintenance.quarantine import (  # noqa: E402
    list_quarantines,
    purge_quarantines,
    read_quarantine,
    resume_quarantine,
    undo_quarantine,
)
from airflow_delta_provider.delta.maintenance.vacuum import vacuum  # noqa: E402
from airflow_delta_provider.delta.protocol import quarantine as rules  # noqa: E402
from airflow_delta_provider.delta.protocol.vacuum import (  # noqa: E402
    FILE,
    HIDDEN,
    ListedFile,
    PlannedFile,
    StoredEntry,
    VacuumPlan,
    is_hidden,
    plan_vacuum,
    revalidate,
)
from airflow_delta_provider.delta.storage import FsspecLogStore, LocalLogStore  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
HOUR_MS = 3_600_000
#: VACUUM of every file no current version needs, now: retention 0 with the override, no grace period.
NOW = {"retention_hours": 0, "enforce_retention_duration": False, "untracked_grace_hours": 0}
QDIR = "_delta_quarantine"


def _rows(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": pa.array(ids, pa.int64()), "p": ["a" if i % 2 else "b" for i in ids]})


def _make_table(path: Path) -> Path:
    """Five versions, five files removed: two appends, an overwrite, a delete (a rewrite), an append."""
    write_deltalake(str(path), _rows(0, 4), partition_by=["p"])
    write_deltalake(str(path), _rows(4, 4), partition_by=["p"], mode="append")
    write_deltalake(str(path), _rows(8, 4), partition_by=["p"], mode="overwrite")
    DeltaTable(str(path)).delete("id = 9")
    write_deltalake(str(path), _rows(12, 2), partition_by=["p"], mode="append")
    return path


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _make_table(tmp_path_factory.mktemp("quarantine") / "t")


@pytest.fixture
def table(base: Path, tmp_path: Path) -> Path:
    path = tmp_path / "t"
    shutil.copytree(base, path, copy_function=shutil.copy2)
    return path


def _versions(path: Path | str, storage_options: dict[str, str] | None = None) -> dict[int, pa.Table]:
    """Every version as delta-rs reads it, sorted by id."""
    latest = DeltaTable(str(path), storage_options=storage_options).version()
    return {
        v: DeltaTable(str(path), version=v, storage_options=storage_options).to_pyarrow_table().sort_by("id")
        for v in range(latest + 1)
    }


def _data_files(root: Path) -> set[str]:
    """The table's files outside `_delta_log` and the quarantine folder, relative to the root."""
    out = set()
    for p in root.rglob("*"):
        rel = p.relative_to(root).as_posix()
        if p.is_file() and not rel.startswith(("_delta_log/", f"{QDIR}/")):
            out.add(rel)
    return out


def _quarantine_ids(root: Path) -> list[str]:
    folder = root / QDIR
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def _manifest(root: Path, qid: str) -> dict[str, Any]:
    return json.loads((root / QDIR / qid / "manifest.json").read_text())


def _qfile(root: Path, qid: str, rel: str) -> Path:
    return root / QDIR / qid / "files" / rel


def _assert_each_in_one_place(root: Path, qid: str, copy_delete: bool) -> tuple[int, int]:
    """Every file of the manifest at exactly one of its two paths (copy+delete: or at both, same bytes);
    returns (files at their path, files in the quarantine)."""
    here_n = there_n = 0
    for f in _manifest(root, qid)["files"]:
        here, there = (root / f["path"]).is_file(), _qfile(root, qid, f["path"]).is_file()
        if copy_delete:
            assert here or there, f["path"]
            if here and there:
                assert (root / f["path"]).read_bytes() == _qfile(root, qid, f["path"]).read_bytes()
        else:
            assert here != there, (f["path"], here, there)
        here_n += here
        there_n += there
    return here_n, there_n


# -- the rules, pure -------------------------------------------------------------------------------------


def test_quarantine_folder_is_hidden_from_vacuum_rules() -> None:
    """The folder starts with `_`: `is_hidden` says so (even with partition columns), a FULL plan over a
    listing that holds quarantined files plans none of them, and a hand-edited plan naming one drops it."""
    qfile = f"{QDIR}/20250101T000000Z-0a1b2c3d/files/p=a/part-0.parquet"
    assert is_hidden(qfile) and is_hidden(qfile, ["p"])
    assert is_hidden(f"{QDIR}/x/manifest.json", ["p", "_delta_quarantine"])
    listing = [
        ListedFile(qfile, 10, 1),
        ListedFile(f"{QDIR}/x/manifest.json", 10, 1),
        ListedFile("p=a/old.parquet", 10, 1),
    ]
    plan = plan_vacuum(
        table="file:///t",
        version=1,
        mode="full",
        cutoff_ms=1000,
        retention_ms=0,
        active=[],
        tombstones=[],
        listing=listing,
        partition_columns=["p"],
        untracked_grace_ms=0,
    )
    assert [f.path for f in plan.files] == ["p=a/old.parquet"]
    edited = VacuumPlan("file:///t", 1, 1000, 0, "full", [PlannedFile(qfile, 10, 1)])
    checked = revalidate(
        edited, stored=lambda ps: [StoredEntry(FILE, 10, 1)] * len(ps), cutoff_ms=1000, now_ms=1000, grace_ms=0
    )
    assert checked.keep == [] and checked.reasons == [HIDDEN]


def test_ids_manifest_and_states() -> None:
    qid = rules.new_quarantine_id(1_700_000_000_123, "0A1B2C3D")
    assert qid == "20231114T221320Z-0a1b2c3d" and rules.check_quarantine_id(f" {qid} ") == qid
    for bad in ("", "../x", "20231114T221320Z-0a1b2c3", f"{qid}/..", None, 5):
        with pytest.raises(InvalidArgumentError):
            rules.check_quarantine_id(bad)
    m = rules.Manifest(qid, "file:///t", "tid", 4, 1_700_000_000_123, "rename", (rules.QuarantinedFile("p=a/x", 3, 9),))
    assert rules.parse_manifest(m.to_bytes(), quarantine_id=qid) == m
    for broken in (b"{", b"[]", m.to_bytes().replace(b"rename", b"teleport"), m.to_bytes().replace(b"p=a/x", b"../x")):
        with pytest.raises(QuarantineError):
            rules.parse_manifest(broken, quarantine_id=qid)
    with pytest.raises(QuarantineError, match="differs"):
        rules.parse_manifest(m.to_bytes(), quarantine_id="20231114T221320Z-ffffffff")
    assert rules.state_of([]) == rules.MOVING
    assert rules.state_of([rules.QUARANTINED_MARKER]) == rules.QUARANTINED
    assert rules.state_of([rules.QUARANTINED_MARKER, rules.UNDO_MARKER]) == rules.RESTORING
    assert rules.state_of([rules.UNDO_MARKER, rules.RESTORED_MARKER]) == rules.RESTORED
    assert rules.state_of([rules.RESTORED_MARKER, rules.PURGE_MARKER]) == rules.PURGING


def test_file_steps() -> None:
    f = rules.QuarantinedFile("x", 10, 5000)
    same, other = StoredEntry(FILE, 10, 5000), StoredEntry(FILE, 11, 5000)
    copy = StoredEntry(FILE, 10, 99_000)  # a copy: new mtime
    fwd = rules.forward_step
    assert fwd(f, same, None, method="rename") == rules.MOVE
    assert fwd(f, other, None, method="rename") == rules.CHANGED
    assert fwd(f, None, same, method="rename") == rules.DONE
    assert fwd(f, None, None, method="rename") == rules.MISSING
    assert fwd(f, same, copy, method="copy+delete") == rules.FINISH
    assert fwd(f, same, copy, method="rename") == rules.CONFLICT
    assert fwd(f, same, other, method="copy+delete") == rules.CONFLICT
    back = rules.undo_step
    assert back(f, None, same, method="rename", interrupted=False) == rules.MOVE
    assert back(f, same, None, method="rename", interrupted=False) == rules.DONE
    assert back(f, None, None, method="rename", interrupted=False) == rules.MISSING
    assert back(f, copy, same, method="copy+delete", interrupted=True) == rules.FINISH
    assert back(f, copy, same, method="copy+delete", interrupted=False) == rules.CONFLICT  # finished: not ours
    assert back(f, other, same, method="copy+delete", interrupted=True) == rules.CONFLICT
    assert back(f, same, same, method="rename", interrupted=True) == rules.CONFLICT


def test_move_cost_and_ages() -> None:
    assert rules.move_cost([10, 20], method="rename") == {
        "method": "rename",
        "files": 2,
        "bytes": 30,
        "bytes_copied": 0,
        "requests": 7,
    }
    big = 6 * 2**30
    cost = rules.move_cost([10, big], method="copy+delete")
    assert cost["bytes_copied"] == 10 + big and cost["requests"] == 3 * 2 + 1 + (2 + 123) + 3
    assert rules.parse_age_ms("7d") == 7 * 86_400_000 and rules.parse_age_ms("1d12h") == 36 * HOUR_MS
    assert (
        rules.parse_age_ms("0") == 0
        and rules.parse_age_ms(90) == 90_000
        and rules.parse_age_ms("2 hours") == 2 * HOUR_MS
    )
    for bad in ("-1h", "soon", True, None, float("inf")):
        with pytest.raises(InvalidArgumentError):
            rules.parse_age_ms(bad)


def test_stores_move_without_replacing(tmp_path: Path) -> None:
    store = LocalLogStore()
    (tmp_path / "a").write_bytes(b"a")
    (tmp_path / "b").write_bytes(b"b")
    os.utime(tmp_path / "a", ns=(1_000_000_000_000, 1_000_000_000_000))
    with pytest.raises(FileExistsError):
        store.move(str(tmp_path / "a"), str(tmp_path / "b"))
    assert (tmp_path / "b").read_bytes() == b"b"
    store.move(str(tmp_path / "a"), str(tmp_path / "d" / "e" / "a"))
    assert not (tmp_path / "a").exists() and (tmp_path / "d" / "e" / "a").stat().st_mtime_ns == 10**12
    with pytest.raises(FileNotFoundError):
        store.move(str(tmp_path / "a"), str(tmp_path / "z"))
    mem = FsspecLogStore(f"memory://q-{uuid.uuid4().hex[:8]}")
    assert store.move_method == "rename" and mem.move_method == "copy+delete"
    mem.put(f"{mem.root}/x", b"x")
    mem.put(f"{mem.root}/y", b"y")
    with pytest.raises(FileExistsError):
        mem.move(f"{mem.root}/x", f"{mem.root}/y")
    mem.move(f"{mem.root}/x", f"{mem.root}/q/x")
    assert mem.head(f"{mem.root}/x") is None and mem.read_bytes(f"{mem.root}/q/x") == b"x"


# -- VACUUM, undo, time travel in delta-rs ---------------------------------------------------------------


def test_vacuum_quarantine_then_undo_restores_every_version(table: Path) -> None:
    before = _versions(table)
    files_before = _data_files(table)
    dry = vacuum(str(table), quarantine=True, **NOW)
    planned = {f.path for f in dry.plan.files}
    assert len(planned) == 5 and dry.to_dict()["quarantine"] == {
        "method": "rename",
        "files": 5,
        "bytes": dry.plan.num_bytes,
        "bytes_copied": 0,
        "requests": 13,
    }
    assert _quarantine_ids(table) == []  # a dry run moves nothing
    done = vacuum(str(table), quarantine=True, dry_run=False, **NOW)
    out = done.to_dict()
    qid = out["quarantine_id"]
    assert (
        qid and out["deleted"] == 0 and out["quarantine"]["moved"] == 5 and out["quarantine"]["state"] == "quarantined"
    )
    assert out["quarantine"]["location"] == f"file://{table}/{QDIR}/{qid}"
    assert _data_files(table) == files_before - planned
    assert {
        p.relative_to(table / QDIR / qid / "files").as_posix()
        for p in (table / QDIR / qid / "files").rglob("*.parquet")
    } == planned
    manifest = _manifest(table, qid)
    assert manifest["format"] == "delta-quarantine/1" and manifest["table"] == f"file://{table}"
    assert manifest["table_id"] == DeltaLog(str(table)).update().metadata.id and manifest["version"] == 4
    assert {f["path"] for f in manifest["files"]} == planned and all(f["size"] > 0 for f in manifest["files"])
    assert all(f["modification_time"] > 0 for f in manifest["files"]) and manifest["created"] > 0
    history = DeltaTable(str(table)).history(2)
    assert [h["operation"] for h in history] == ["VACUUM END", "VACUUM START"]
    assert history[0]["operationParameters"]["quarantineId"] == qid
    with pytest.raises(Exception):  # noqa: B017 - delta-rs: the version's files are gone
        DeltaTable(str(table), version=0).to_pyarrow_table()
    assert DeltaTable(str(table)).to_pyarrow_table().sort_by("id") == before[4]

    undone = undo_quarantine(str(table), qid)
    assert undone.state == "restored" and len(undone.settled.moved) == 5 and undone.settled.missing == []
    assert _data_files(table) == files_before
    after = _versions(table)
    assert {v: after[v] for v in before} == before  # every version reads as before (+ the two audit commits)
    assert not list((table / QDIR / qid / "files").rglob("*.parquet"))
    # undo again: nothing to do; list
    assert undo_quarantine(str(table), qid).settled.moved == []
    assert [(q.id, q.state) for q in list_quarantines(str(table))] == [(qid, "restored")]


def test_quarantine_folder_is_ignored_by_later_vacuums(table: Path) -> None:
    before = _versions(table)
    qid = vacuum(str(table), quarantine=True, dry_run=False, **NOW).quarantine_id
    assert qid is not None
    held = sorted(p.relative_to(table).as_posix() for p in (table / QDIR).rglob("*") if p.is_file())
    later = lambda: int(time.time() * 1000) + 30 * 86_400_000  # noqa: E731 - everything old, no grace
    for mode in ("full", "lite"):
        plan = vacuum(str(table), mode=mode, clock=later, **NOW)
        assert not any(f.path.startswith(QDIR) for f in plan.plan.files), mode
        assert vacuum(str(table), mode=mode, dry_run=False, clock=later, **NOW).deleted == 0
    again = vacuum(str(table), quarantine=True, dry_run=False, clock=later, **NOW)
    assert again.quarantine_id is None and again.to_dict()["quarantine"]["files"] == 0
    assert sorted(p.relative_to(table).as_posix() for p in (table / QDIR).rglob("*") if p.is_file()) == held
    assert undo_quarantine(str(table), qid).state == "restored"
    after = _versions(table)
    assert {v: after[v] for v in before} == before


def test_undo_refuses_when_something_sits_at_a_path(table: Path) -> None:
    qid = vacuum(str(table), quarantine=True, dry_run=False, **NOW).quarantine_id
    files = [f["path"] for f in _manifest(table, qid)["files"]]
    (table / files[2]).parent.mkdir(parents=True, exist_ok=True)
    (table / files[2]).write_bytes(b"someone else's file")
    with pytest.raises(QuarantineError) as err:
        undo_quarantine(str(table), qid)
    assert err.value.paths == [files[2]] and files[2] in str(err.value) and err.value.quarantine_id == qid
    assert all(_qfile(table, qid, p).is_file() for p in files)  # nothing moved
    assert read_quarantine(DeltaLog(str(table)), qid).state == "quarantined"
    (table / files[2]).unlink()
    assert len(undo_quarantine(str(table), qid).settled.moved) == 5


def test_undo_refuses_another_table_and_an_unknown_id(table: Path, tmp_path: Path) -> None:
    qid = vacuum(str(table), quarantine=True, dry_run=False, **NOW).quarantine_id
    with pytest.raises(QuarantineError, match="No quarantine"):
        undo_quarantine(str(table), "20200101T000000Z-00000000")
    other = _make_table(tmp_path / "other")
    shutil.copytree(table / QDIR, other / QDIR)
    with pytest.raises(QuarantineError, match="made for table id"):
        undo_quarantine(str(other), qid)


def test_purge_by_age(table: Path) -> None:
    t0 = int(time.time() * 1000) + HOUR_MS
    at = lambda ms: lambda: ms  # noqa: E731
    first = vacuum(str(table), quarantine=True, dry_run=False, clock=at(t0), **NOW)
    qid = first.quarantine_id
    bytes_held = _manifest(table, qid)["bytes"]
    write_deltalake(str(table), _rows(20, 2), partition_by=["p"], mode="overwrite")
    second = vacuum(str(table), quarantine=True, dry_run=False, clock=at(t0 + 2 * HOUR_MS), **NOW)
    qid2 = second.quarantine_id
    (table / QDIR / qid2 / rules.QUARANTINED_MARKER).unlink()  # as a VACUUM killed before its marker
    young = purge_quarantines(str(table), older_than="2h", clock=at(t0 + HOUR_MS))
    assert young.purged == [] and {s["quarantine_id"] for s in young.skipped} == {qid, qid2}
    dry = purge_quarantines(str(table), older_than="2h", clock=at(t0 + 5 * HOUR_MS), dry_run=True)
    assert [p["quarantine_id"] for p in dry.purged] == [qid] and (table / QDIR / qid).exists()
    done = purge_quarantines(str(table), older_than="2h", clock=at(t0 + 5 * HOUR_MS))
    out = done.to_dict()
    assert [p["quarantine_id"] for p in out["purged"]] == [qid]
    assert out["deleted_files"] == 5 and out["deleted_bytes"] == bytes_held
    assert [s["quarantine_id"] for s in out["skipped"]] == [qid2] and "unfinished" in out["skipped"][0]["reason"]
    assert not (table / QDIR / qid).exists() and (table / QDIR / qid2 / "manifest.json").exists()
    with pytest.raises(QuarantineError, match="No quarantine"):
        undo_quarantine(str(table), qid)
    # the unfinished one: resumed (nothing left to move), undone, then purged with its folder
    assert resume_quarantine(str(table), qid2).state == "quarantined"
    assert undo_quarantine(str(table), qid2).state == "restored"
    assert purge_quarantines(str(table), older_than=0, clock=at(t0 + 5 * HOUR_MS)).to_dict()["num_purged"] == 1
    assert not (table / QDIR).exists()


def test_spark_style_executor_without_moves_is_refused(table: Path) -> None:
    """An executor without `move` (the Spark engine's) is refused `quarantine=True` before anything runs."""
    from airflow_delta_provider.delta.engines.spark.vacuum import SparkVacuumExecutor

    assert not getattr(SparkVacuumExecutor, "can_quarantine", False)

    class NoMoves:
        in_process = True

        def plan_full(self, *a: Any, **k: Any) -> Any:
            raise AssertionError("planned")

    files = _data_files(table)
    with pytest.raises(OperationNotAllowedError, match="quarantine=True"):
        vacuum(str(table), quarantine=True, dry_run=False, executor=NoMoves(), **NOW)  # type: ignore[arg-type]
    assert _quarantine_ids(table) == [] and _data_files(table) == files


def test_commands_and_cli(table: Path) -> None:
    from airflow_delta_provider.cli import main
    from airflow_delta_provider.commands import Request, run

    body = run(Request.make(table=str(table), action="vacuum", apply=True, quarantine=True, **NOW)).body
    qid = body["quarantine_id"]
    assert body["quarantine"]["moved"] == 5 and body["deleted"] == 0
    out, err = io.StringIO(), io.StringIO()
    assert main(["vacuum", "list", str(table), "--json"], out=out, err=err) == 0, err.getvalue()
    assert [q["id"] for q in json.loads(out.getvalue())["quarantines"]] == [qid]
    out = io.StringIO()
    assert main(["vacuum", "undo", str(table), qid, "--json"], out=out, err=err) == 0, err.getvalue()
    assert json.loads(out.getvalue())["moved"] == 5
    dry = run(Request.make(table=str(table), action="vacuum_purge", older_than_hours=0)).body
    assert dry["dry_run"] and dry["num_purged"] == 1 and (table / QDIR / qid).exists()
    out = io.StringIO()
    assert main(["vacuum", "purge", str(table), "--older-than", "0"], out=out, err=err) == 0, err.getvalue()
    assert "would purge (dry run: --apply deletes) 1 quarantines" in out.getvalue() and (table / QDIR / qid).exists()
    out = io.StringIO()
    assert main(["vacuum", "purge", str(table), "--older-than", "0", "--apply"], out=out, err=err) == 0
    assert "purged 1 quarantines" in out.getvalue() and not (table / QDIR).exists()
    out = io.StringIO()
    assert main(["vacuum", str(table), "--apply", "--quarantine", "--retention-hours", "0", "--no-enforce-retention",
                 "--untracked-grace-hours", "0"], out=out, err=err) == 0, err.getvalue()  # fmt: skip
    assert "to quarantine" in out.getvalue() and "vacuum undo" in out.getvalue()
    err = io.StringIO()
    assert main(["vacuum", "undo", str(table), "../x"], out=io.StringIO(), err=err) == 2
    assert "quarantine_id" in err.getvalue()
    with pytest.raises(InvalidArgumentError):
        Request.make(table=str(table), action="vacuum_undo", quarantine_id="nope")


# -- kill -9 at each step --------------------------------------------------------------------------------

CRASH = """
import sys
from airflow_delta_provider.delta import DeltaLog
from airflow_delta_provider.delta.maintenance.quarantine import undo_quarantine
from airflow_delta_provider.delta.maintenance.vacuum import vacuum
from airflow_delta_provider.delta.storage import LocalLogStore
from support.faults import CopyDeleteLocalStore, KillingStore
table, op, kind, step, at, qid = sys.argv[1:7]
inner = LocalLogStore() if kind == "rename" else CopyDeleteLocalStore()
dlog = DeltaLog(table, store=KillingStore(inner, step, at=int(at)))
if op == "vacuum":
    vacuum(dlog, retention_hours=0, enforce_retention_duration=False, untracked_grace_hours=0, dry_run=False,
           quarantine=True)
else:
    undo_quarantine(dlog, qid)
"""


def _killed(table: Path, op: str, kind: str, step: str, at: int, qid: str = "-") -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])}
    proc = subprocess.run(
        [sys.executable, "-c", CRASH, str(table), op, kind, step, str(at), qid], env=env, capture_output=True
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]


def _store(kind: str) -> LocalLogStore:
    return LocalLogStore() if kind == "rename" else CopyDeleteLocalStore()


@pytest.mark.parametrize(
    ("kind", "step", "at", "then"),
    [
        ("rename", "move", 1, "resume"),  # the manifest only
        ("rename", "move", 3, "resume"),
        ("rename", "after_move", 2, "resume"),
        ("rename", "before_marker", 1, "resume"),
        ("rename", "move", 4, "undo"),  # an unfinished quarantine rolled back
        ("copy+delete", "move_copied", 1, "resume"),  # both copies of the first file
        ("copy+delete", "move_copied", 3, "undo"),
        ("copy+delete", "before_marker", 1, "resume"),
    ],
)
def test_vacuum_killed_during_moves_leaves_each_file_in_one_place(
    kind: str, step: str, at: int, then: str, table: Path
) -> None:
    before = _versions(table)
    files_before = _data_files(table)
    _killed(table, "vacuum", kind, step, at)
    [qid] = _quarantine_ids(table)
    manifest = _manifest(table, qid)
    assert len(manifest["files"]) == 5 and manifest["method"] == kind
    assert not (table / QDIR / qid / rules.QUARANTINED_MARKER).exists()
    here, there = _assert_each_in_one_place(table, qid, kind == "copy+delete")
    moved_before_kill = {"move": at - 1, "after_move": at, "before_marker": 5, "move_copied": at}[step]
    if kind == "rename":
        assert there == moved_before_kill and here == 5 - there
    else:  # copy+delete moves run on a thread pool: which others finished before the kill is not ordered
        assert there >= 1
    quarantined = {
        f.relative_to(table / QDIR / qid / "files").as_posix()
        for f in (table / QDIR / qid / "files").rglob("*")
        if f.is_file() and not f.name.startswith(".")  # a temp file of a local copy killed midway: hidden
    }
    assert _data_files(table) | quarantined == files_before  # nothing lost, nothing else touched
    assert read_quarantine(DeltaLog(str(table)), qid).state == "moving"
    dlog = DeltaLog(str(table), store=_store(kind))
    if then == "resume":  # the rerun of VACUUM resumes the unfinished quarantine first
        again = vacuum(dlog, quarantine=True, dry_run=False, **NOW)
        assert [r["quarantine_id"] for r in again.resumed] == [qid] and again.resumed[0]["state"] == "quarantined"
        assert again.quarantine_id is None  # nothing else to quarantine
        assert _assert_each_in_one_place(table, qid, copy_delete=False) == (0, 5)
        assert (table / QDIR / qid / rules.QUARANTINED_MARKER).exists()
        assert len(undo_quarantine(dlog, qid).settled.moved) == 5
    else:  # undo of the killed quarantine: what was moved goes back
        undone = undo_quarantine(dlog, qid)
        assert undone.state == "restored" and len(undone.settled.moved) + len(undone.settled.finished) <= 5
    assert _assert_each_in_one_place(table, qid, copy_delete=False) == (5, 0)
    assert _data_files(table) == files_before
    after = _versions(table)
    assert {v: after[v] for v in before} == before


@pytest.mark.parametrize(
    ("kind", "step", "at"),
    [
        ("rename", "move", 1),  # undo.json written, nothing moved back
        ("rename", "move", 3),
        ("rename", "after_move", 5),
        ("rename", "before_marker", 1),
        ("copy+delete", "move_copied", 1),
        ("copy+delete", "move_copied", 4),
        ("copy+delete", "before_marker", 1),
    ],
)
def test_undo_killed_during_moves_leaves_each_file_in_one_place(kind: str, step: str, at: int, table: Path) -> None:
    before = _versions(table)
    files_before = _data_files(table)
    dlog = DeltaLog(str(table), store=_store(kind))
    qid = vacuum(dlog, quarantine=True, dry_run=False, **NOW).quarantine_id
    assert qid is not None
    _killed(table, "undo", kind, step, at, qid)
    assert read_quarantine(DeltaLog(str(table)), qid).state == "restoring"  # the direction: back
    here, _ = _assert_each_in_one_place(table, qid, kind == "copy+delete")
    if kind == "rename":
        assert here == {"move": at - 1, "after_move": at, "before_marker": 5}[step]
    again = undo_quarantine(DeltaLog(str(table), store=_store(kind)), qid)  # the same undo, rerun, finishes it
    assert again.state == "restored"
    assert len(again.settled.moved) + len(again.settled.finished) + len(again.settled.done) == 5
    assert _assert_each_in_one_place(table, qid, copy_delete=False) == (5, 0)
    assert _data_files(table) == files_before
    after = _versions(table)
    assert {v: after[v] for v in before} == before


# -- S3 (moto on loopback): copy+delete -------------------------------------------------------------------


@pytest.fixture(scope="module")
def s3_server(moto_s3):
    pytest.importorskip("s3fs")
    from support.s3_server import create_bucket

    create_bucket(moto_s3, "quarantine")  # the session's moto server, this module's bucket
    return moto_s3


def _s3_table(server: Any) -> tuple[str, dict[str, str]]:
    from support.s3_server import deltalake_storage_options

    uri = f"s3://quarantine/t-{uuid.uuid4().hex[:8]}"
    opts = deltalake_storage_options(server)
    write_deltalake(uri, _rows(0, 4), partition_by=["p"], storage_options=opts)
    write_deltalake(uri, _rows(4, 4), partition_by=["p"], mode="overwrite", storage_options=opts)
    DeltaTable(uri, storage_options=opts).delete("id = 5")
    return uri, opts


def _keys(server: Any, uri: str) -> set[str]:
    from support.s3_server import boto3_client

    prefix = uri.split("/", 3)[3] + "/"
    pages = boto3_client(server).get_paginator("list_objects_v2").paginate(Bucket="quarantine", Prefix=prefix)
    return {o["Key"][len(prefix) :] for page in pages for o in page.get("Contents", [])}


def test_s3_quarantine_moves_by_copy_and_delete_and_undo_restores(s3_server) -> None:
    from support.s3_server import S3Proxy, s3_storage_options

    uri, dl_opts = _s3_table(s3_server)
    before = _versions(uri, dl_opts)
    keys_before = _keys(s3_server, uri)
    later = lambda: int(time.time() * 1000) + 86_400_000  # noqa: E731 - S3 mtimes are whole seconds
    with S3Proxy(s3_server.endpoint) as proxy:
        opts = s3_storage_options(s3_server, proxy.endpoint)
        dlog = DeltaLog(uri, store=FsspecLogStore(uri, opts))
        dry = vacuum(dlog, quarantine=True, clock=later, **NOW)
        n, size = dry.plan.num_files, dry.plan.num_bytes
        assert n == 3 and dry.to_dict()["quarantine"] == {
            "method": "copy+delete",
            "files": 3,
            "bytes": size,
            "bytes_copied": size,
            "requests": 4 * 3 + 3,
        }
        proxy.reset()
        done = vacuum(dlog, quarantine=True, dry_run=False, clock=later, **NOW).to_dict()
        copies = [s for s in proxy.requests if s.method == "PUT" and "x-amz-copy-source" in s.headers]
        assert len(copies) == n  # one server-side copy per file (no byte through this process)
    qid = done["quarantine_id"]
    q = done["quarantine"]
    assert q["method"] == "copy+delete" and q["moved"] == 3 and q["bytes_copied"] == q["moved_bytes"] == size
    assert done["audit_versions"] == []  # s3: no VACUUM START/END by default
    planned = {f["path"] for f in done["files"]}
    keys = _keys(s3_server, uri)
    assert not keys & planned
    assert {f"{QDIR}/{qid}/files/{p}" for p in planned} <= keys
    assert {f"{QDIR}/{qid}/manifest.json", f"{QDIR}/{qid}/quarantined.json"} <= keys
    with pytest.raises(Exception):  # noqa: B017 - delta-rs: version 0's files are in the quarantine
        DeltaTable(uri, version=0, storage_options=dl_opts).to_pyarrow_table()
    undone = undo_quarantine(uri, qid, storage_options=s3_storage_options(s3_server))
    assert undone.state == "restored" and len(undone.settled.moved) == 3
    assert _versions(uri, dl_opts) == before
    assert {k for k in _keys(s3_server, uri) if not k.startswith(QDIR)} == keys_before
    purged = purge_quarantines(uri, older_than="0", storage_options=s3_storage_options(s3_server), clock=later)
    assert purged.to_dict()["num_purged"] == 1 and not any(k.startswith(QDIR) for k in _keys(s3_server, uri))


S3_CRASH = """
import json, sys
from airflow_delta_provider.delta import DeltaLog
from airflow_delta_provider.delta.maintenance.vacuum import vacuum
from airflow_delta_provider.delta.storage import FsspecLogStore
from support.faults import KillingStore
uri, options, clock = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
store = KillingStore(FsspecLogStore(uri, options), "move_copied", at=2)
vacuum(DeltaLog(uri, store=store), retention_hours=0, enforce_retention_duration=False, untracked_grace_hours=0,
       dry_run=False, quarantine=True, clock=lambda: clock)
"""


def test_s3_vacuum_killed_between_copy_and_delete_is_resumed(s3_server) -> None:
    from support.s3_server import s3_storage_options

    uri, dl_opts = _s3_table(s3_server)
    before = _versions(uri, dl_opts)
    opts = s3_storage_options(s3_server)
    clock = int(time.time() * 1000) + 86_400_000
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])}
    proc = subprocess.run(
        [sys.executable, "-c", S3_CRASH, uri, json.dumps(opts), str(clock)], env=env, capture_output=True
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    keys = _keys(s3_server, uri)
    [qid] = {k.split("/")[1] for k in keys if k.startswith(QDIR)}
    dlog = DeltaLog(uri, store=FsspecLogStore(uri, opts))
    manifest = read_quarantine(dlog, qid).manifest
    for f in manifest.files:  # at its path, in the quarantine, or (copied, not yet deleted) both
        assert f.path in keys or f"{QDIR}/{qid}/files/{f.path}" in keys, f.path
    assert any(f.path in keys and f"{QDIR}/{qid}/files/{f.path}" in keys for f in manifest.files)
    again = vacuum(dlog, quarantine=True, dry_run=False, clock=lambda: clock, **NOW)
    assert [r["state"] for r in again.resumed] == ["quarantined"]
    keys = _keys(s3_server, uri)
    assert all(f.path not in keys and f"{QDIR}/{qid}/files/{f.path}" in keys for f in manifest.files)
    assert undo_quarantine(dlog, qid).state == "restored"
    assert _versions(uri, dl_opts) == before
