"""Version leases (issue 28): a reader pins a version; this library's VACUUM and log cleanup keep it readable.

What is shown:

* the lease file (`<table>/_delta_leases/<id>.json`, written with `put_if_absent`), `list_leases`,
  `release_lease`, `purge_expired_leases`, argument checks and the pure rules (`protocol.leases`);
* VACUUM's hidden-path rule never lists or deletes the lease folder;
* a leased version stays readable in delta-rs (`DeltaTable(path, version=v).to_pyarrow_table()`) after
  VACUUM with retention 0 and the override, and after log cleanup; the plan and the result name the
  leases; after release or expiry the next VACUUM deletes its files (the version then fails to read);
* a lease taken between a plan and its apply is honoured (dropped entries with reason `leased`);
* the deletion-vector files of a leased version are kept;
* the race: lease adds racing VACUUM applies, many rounds; every lease whose `add_lease` returned before
  the apply's re-validation started (its lease read) is honoured;
* the CLI: `deltalog lease add|list|release`.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import random
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

deltalake = pytest.importorskip("deltalake")
from deltalake import DeltaTable, write_deltalake  # noqa: E402

from airflow_delta_provider.cli import EXIT_ERROR, EXIT_USAGE, main  # noqa: E402
from airflow_delta_provider.delta.delta_log import DeltaLog  # noqa: E402
from airflow_delta_provider.delta.errors import (  # noqa: E402
    InvalidArgumentError,
    LeaseError,
    OperationNotAllowedError,
    VersionNotFoundError,
)
from airflow_delta_provider.delta.maintenance import vacuum as vacuum_module  # noqa: E402
from airflow_delta_provider.delta.maintenance.leases import (  # noqa: E402
    add_lease,
    list_leases,
    purge_expired_leases,
    release_lease,
)
from airflow_delta_provider.delta.maintenance.log_cleanup import cleanup_log  # noqa: E402
from airflow_delta_provider.delta.maintenance.vacuum import vacuum  # noqa: E402
from airflow_delta_provider.delta.protocol.leases import (  # noqa: E402
    LEASE_DIR_NAME,
    MAX_TTL_MS,
    Lease,
    check_lease_id,
    earliest_pinned_version,
    live_leases,
    location_problem,
    parse_lease,
    parse_ttl_ms,
    pinned_versions,
    split_leased,
)
from airflow_delta_provider.delta.protocol.vacuum import (  # noqa: E402
    LEASED,
    PlannedFile,
    is_hidden,
    subdirectory_key,
    unprotected_names,
)
from airflow_delta_provider.delta.storage.local import LocalLogStore  # noqa: E402

HOUR = 3_600_000
DAY = 24 * HOUR
#: VACUUM with retention 0 and the override, no grace period: deletes everything no snapshot rule keeps
ZERO = {"retention_hours": 0, "enforce_retention_duration": False, "untracked_grace_hours": 0}


def now_ms() -> int:
    return int(time.time() * 1000)


def _rows(k: int) -> pa.Table:
    return pa.table({"id": pa.array(range(k * 10, k * 10 + 3), pa.int64())})


def _overwrites(path: Path, n: int, *, checkpoints: tuple[int, ...] = ()) -> dict[int, pa.Table]:
    """Versions 0..n-1, each an overwrite with its own rows (an older version's files are all tombstoned);
    a checkpoint after each version in `checkpoints`. The rows each version holds."""
    out = {}
    for v in range(n):
        write_deltalake(str(path), _rows(v), mode="append" if v == 0 else "overwrite")
        out[v] = _rows(v)
        if v in checkpoints:
            DeltaTable(str(path)).create_checkpoint()
    return out


def read_error(path: Path, version: int) -> str | None:
    """None when delta-rs reads `version` whole, else the error."""
    try:
        DeltaTable(str(path), version=version).to_pyarrow_table()
    except Exception as exc:  # delta-rs raises several kinds (missing file, missing log)
        return f"{type(exc).__name__}: {exc}"[:300]
    return None


def _ids(path: Path, version: int) -> list[int]:
    return sorted(DeltaTable(str(path), version=version).to_pyarrow_table().column("id").to_pylist())


def _age_log(path: Path, start_ms: int) -> None:
    """Commit v at `start_ms + v` minutes, its checkpoint a second later (log cleanup reads file times)."""
    for p in (path / "_delta_log").iterdir():
        if p.is_file() and p.name[:20].isdigit():
            ms = start_ms + int(p.name[:20]) * 60_000 + (1000 if ".checkpoint" in p.name else 0)
            os.utime(p, ns=(ms * 1_000_000, ms * 1_000_000))


# -- pure rules ---------------------------------------------------------------------------------------------


def test_ttl_parsing():
    assert parse_ttl_ms("6h") == 6 * HOUR
    assert parse_ttl_ms("90m") == parse_ttl_ms("1h30m") == parse_ttl_ms("1h 30m") == 90 * 60_000
    assert parse_ttl_ms("2d") == 2 * DAY and parse_ttl_ms("1w") == 7 * DAY and parse_ttl_ms("45s") == 45_000
    assert parse_ttl_ms("6 hours") == parse_ttl_ms("interval 6 hours") == 6 * HOUR
    assert parse_ttl_ms(dt.timedelta(minutes=5)) == 300_000 and parse_ttl_ms(30) == 30_000
    for bad in ("0h", "-1h", "", "soon", "6x", None, True, 0, -5, float("nan"), MAX_TTL_MS, "400d"):
        with pytest.raises(InvalidArgumentError) as err:
            parse_ttl_ms(bad)
        assert err.value.argument == "ttl"


def _lease(version: int, expires: int, *, lease_id: str | None = None, table_id: str | None = "T") -> Lease:
    return Lease(lease_id or f"{version:032x}", version, "o", 0, expires, "file:///t", table_id)


def test_lease_file_parsing_refuses_anything_damaged():
    good = _lease(3, 100)
    assert parse_lease(good.to_bytes(), name=good.file_name) == good
    doc = good.to_json()
    damaged = [
        b"{not json",
        b"[1]",
        json.dumps({**doc, "format": "other"}).encode(),
        json.dumps({**doc, "version": -1}).encode(),
        json.dumps({**doc, "version": True}).encode(),
        json.dumps({**doc, "expires": "soon"}).encode(),
        json.dumps({**doc, "expires": 0}).encode(),  # ends before it starts
        json.dumps({**doc, "owner": ""}).encode(),
        json.dumps({**doc, "id": "../x"}).encode(),
        json.dumps({k: v for k, v in doc.items() if k != "version"}).encode(),
    ]
    for data in damaged:
        with pytest.raises(LeaseError) as err:
            parse_lease(data, name=good.file_name)
        assert err.value.file == good.file_name and err.value.lease_id == good.id
    with pytest.raises(LeaseError, match="differs from the file name"):
        parse_lease(good.to_bytes(), name=f"{'f' * 32}.json")


def test_live_leases_and_the_versions_they_pin():
    leases = [
        _lease(5, 100),
        _lease(2, 50),
        _lease(7, 10),
        _lease(1, 100, table_id="other"),
        _lease(4, 100, table_id=None),
    ]
    assert [le.version for le in live_leases(leases, 20, "T")] == [2, 4, 5]  # 7 expired, 1 another table's
    assert pinned_versions(leases, 60, "T") == [4, 5]
    assert earliest_pinned_version(leases, 60, "T") == 4
    assert earliest_pinned_version(leases, 100, "T") is None  # expires is exclusive
    assert pinned_versions(leases, 20, "other") == [1, 4]  # its own, and the one without a table id


def test_lease_ids_and_locations():
    assert check_lease_id(" " + "A" * 32 + " ") == "a" * 32
    for bad in ("../x", "a" * 31, "g" * 32, None, "a" * 32 + ".json"):
        with pytest.raises(InvalidArgumentError):
            check_lease_id(bad)
    assert location_problem(None) is None  # outside the table
    assert location_problem("_delta_leases") is None and location_problem("_ops/leases") is None
    assert "table root" in location_problem("")
    assert "_delta_log" in location_problem("_delta_log/leases")
    assert "VACUUM" in location_problem("leases")
    assert "VACUUM" in location_problem("_p=1/leases", ["_p"])  # a partition directory is listed


def test_split_leased_vetoes_files_and_dv_aliases():
    files = [PlannedFile(p, 1, 0) for p in ("a.parquet", "p=1/b.parquet", "./c.parquet", "x/pre-deletion_vector_u.bin")]
    keep, vetoed = split_leased(files, {"p=1/b.parquet", "c.parquet", "x/deletion_vector_u.bin"})
    assert [f.path for f in keep] == ["a.parquet"]
    assert [f.path for f in vetoed] == ["p=1/b.parquet", "./c.parquet", "x/pre-deletion_vector_u.bin"]
    assert split_leased(files, set()) == (files, [])


def test_vacuum_hidden_rule_never_lists_the_lease_folder():
    assert is_hidden(f"{LEASE_DIR_NAME}/{'a' * 32}.json") and is_hidden(LEASE_DIR_NAME)
    assert subdirectory_key("", LEASE_DIR_NAME) is None  # FULL never walks into it
    assert unprotected_names("", [LEASE_DIR_NAME, "a.parquet"], set()) == [(1, "a.parquet")]
    assert not is_hidden("_delta_index/x") and not is_hidden("_change_data/x")  # Delta's visible exceptions


# -- the lease files ----------------------------------------------------------------------------------------


def test_add_list_release_and_the_lease_file(tmp_path, monkeypatch):
    path = tmp_path / "t"
    _overwrites(path, 3)
    puts: list[str] = []
    original = LocalLogStore.put_if_absent

    def spy(self, p, data):
        puts.append(p)
        return original(self, p, data)

    monkeypatch.setattr(LocalLogStore, "put_if_absent", spy)
    lease = add_lease(path, 1, "6h", "etl.load", clock=lambda: 1_000)
    file = path / LEASE_DIR_NAME / f"{lease.id}.json"
    assert puts == [str(file)]
    doc = json.loads(file.read_text())
    assert doc == {
        "format": "delta-lease/1",
        "id": lease.id,
        "table": f"file://{path}",
        "table_id": DeltaLog(str(path)).update().metadata.id,
        "version": 1,
        "owner": "etl.load",
        "created": 1_000,
        "expires": 1_000 + 6 * HOUR,
    }
    assert list_leases(path, clock=lambda: 2_000) == [lease]
    assert list_leases(path, clock=lambda: 1_000 + 6 * HOUR) == []  # expired: not listed
    assert list_leases(path, include_expired=True, clock=lambda: 1_000 + 6 * HOUR) == [lease]
    assert release_lease(path, lease.id) == lease and not file.exists()
    with pytest.raises(LeaseError, match="No lease"):
        release_lease(path, lease.id)
    assert release_lease(path, lease.id, missing_ok=True) is None


def test_add_lease_refuses_bad_arguments_and_writes_nothing(tmp_path):
    path = tmp_path / "t"
    _overwrites(path, 2)
    with pytest.raises(VersionNotFoundError):
        add_lease(path, 5, "1h", "me")
    for kwargs, argument in (
        ({"version": -1}, "version"),
        ({"version": True}, "version"),
        ({"ttl": "0h"}, "ttl"),
        ({"ttl": "forever"}, "ttl"),
        ({"owner": " "}, "owner"),
        ({"owner": "a\nb"}, "owner"),
        ({"location": path / "leases"}, "location"),  # VACUUM would delete its files
        ({"location": path / "_delta_log" / "_leases"}, "location"),
        ({"location": path}, "location"),
    ):
        args = {"version": 1, "ttl": "1h", "owner": "me", **kwargs}
        with pytest.raises(InvalidArgumentError) as err:
            add_lease(path, args.pop("version"), args.pop("ttl"), args.pop("owner"), **args)
        assert err.value.argument == argument
    assert not (path / LEASE_DIR_NAME).exists() and not (path / "leases").exists()
    with pytest.raises(InvalidArgumentError):
        release_lease(path, "../_delta_log/00000000000000000000")


def test_expired_leases_are_purged_and_other_tables_leases_ignored(tmp_path):
    path = tmp_path / "t"
    _overwrites(path, 3)
    old = add_lease(path, 0, "1h", "a", clock=lambda: 0)
    live = add_lease(path, 1, "1h", "b", clock=lambda: 10 * HOUR)
    stranger = Lease("e" * 32, 2, "c", 0, 100 * HOUR, "file:///elsewhere", "another-table-id")
    (path / LEASE_DIR_NAME / stranger.file_name).write_bytes(stranger.to_bytes())
    (path / LEASE_DIR_NAME / f".{stranger.file_name}.tmp").write_text("a store's temporary file: skipped")
    assert list_leases(path, clock=lambda: 10 * HOUR) == [live]
    assert purge_expired_leases(path, clock=lambda: 10 * HOUR) == [old]
    assert sorted(p.name for p in (path / LEASE_DIR_NAME).iterdir() if not p.name.startswith(".")) == sorted(
        [live.file_name, stranger.file_name]
    )


# -- VACUUM and log cleanup keep a leased version -------------------------------------------------------------


def test_leased_version_survives_vacuum_and_log_cleanup_until_released(tmp_path):
    path = tmp_path / "t"
    rows = _overwrites(path, 10, checkpoints=(3, 6, 9))
    lease = add_lease(path, 4, "6h", "reader-4")
    now = now_ms() + 1000

    done = vacuum(str(path), dry_run=False, clock=lambda: now, **ZERO)
    assert done.deleted > 0 and done.lease_kept_files == 1
    assert [(le["id"], le["version"], le["owner"]) for le in done.leases] == [(lease.id, 4, "reader-4")]
    assert _ids(path, 4) == rows[4].column("id").to_pylist()
    assert read_error(path, 5) is not None  # not leased: its files are gone (the test has teeth)
    assert (path / LEASE_DIR_NAME / lease.file_name).exists()  # VACUUM left the lease folder alone

    # log cleanup, everything past its retention: without the lease it would keep only checkpoint 9
    _age_log(path, now - 3 * DAY)
    cleaned = cleanup_log(str(path), retention_hours=0, apply=True, clock=lambda: now)
    assert cleaned.kept_checkpoint_version == 3 and cleaned.earliest_readable_version == 3
    assert [le["id"] for le in cleaned.leases] == [lease.id]
    assert _ids(path, 4) == rows[4].column("id").to_pylist()
    assert _ids(path, 9) == rows[9].column("id").to_pylist()

    release_lease(path, lease.id)
    assert cleanup_log(str(path), retention_hours=0, clock=lambda: now).kept_checkpoint_version == 9
    again = vacuum(str(path), dry_run=False, clock=lambda: now, **ZERO)
    assert again.deleted == 1 and again.leases == [] and again.lease_kept_files == 0
    assert read_error(path, 4) is not None


def test_log_cleanup_keeps_everything_when_no_checkpoint_precedes_the_leased_version(tmp_path):
    path = tmp_path / "t"
    _overwrites(path, 8, checkpoints=(3, 6))
    add_lease(path, 2, "6h", "early")
    now = now_ms()
    _age_log(path, now - 3 * DAY)
    before = sorted(p.name for p in (path / "_delta_log").iterdir())
    r = cleanup_log(str(path), retention_hours=0, apply=True, clock=lambda: now)
    assert r.deleted == 0 and "version 2, which a live lease pins" in r.reason
    assert sorted(p.name for p in (path / "_delta_log").iterdir()) == before
    assert read_error(path, 2) is None


def test_a_lease_taken_between_plan_and_apply_is_honoured(tmp_path):
    path = tmp_path / "t"
    rows = _overwrites(path, 4)
    now = now_ms() + 1000
    plan = vacuum(str(path), clock=lambda: now, **ZERO)
    assert plan.num_dropped == 0 and plan.leases == [] and plan.plan.num_files == 3
    lease = add_lease(path, 1, "1h", "late-reader")
    done = vacuum(str(path), plan=plan.to_dict(), dry_run=False, clock=lambda: now, **ZERO)
    assert done.deleted == 2 and done.lease_kept_files == 1
    assert [(f.path, why) for f, why in zip(done.dropped, done.reasons, strict=True)] == [
        (next(iter(DeltaTable(str(path), version=1).file_uris())).rsplit("/", 1)[-1], LEASED)
    ]
    assert [le["id"] for le in done.to_dict()["leases"]] == [lease.id]
    assert _ids(path, 1) == rows[1].column("id").to_pylist()


def test_an_expired_lease_protects_nothing(tmp_path):
    path = tmp_path / "t"
    _overwrites(path, 3)
    start = now_ms()
    lease = add_lease(path, 1, "1h", "short", clock=lambda: start)
    # inside the hour: kept
    assert vacuum(str(path), clock=lambda: start + 1000, **ZERO).lease_kept_files == 1
    # an hour later (the clock of `vacuum` and of `DeltaLog` decides): ignored, its files deleted
    later = start + HOUR + 1000
    assert list_leases(DeltaLog(str(path), clock=lambda: later)) == []
    done = vacuum(DeltaLog(str(path), clock=lambda: later), dry_run=False, **ZERO)
    assert done.leases == [] and done.deleted == 2
    assert read_error(path, 1) is not None
    assert purge_expired_leases(path, clock=lambda: later) == [lease]


def test_deletion_vector_files_of_a_leased_version_are_kept(tmp_path):
    from conftest import copy_table

    path = copy_table("delta-kernel-java/basic-dv-no-checkpoint", tmp_path)
    dlog = DeltaLog(str(path))
    snap = dlog.update()
    files = list(snap.all_files(with_stats=False))
    dv_files = {p.name for p in path.glob("deletion_vector_*.bin")}
    assert any(f.deletion_vector is not None for f in files) and dv_files
    snap.transaction("DELETE").remove(*files).commit()  # version 2: nothing active, v1's files tombstoned
    lease = add_lease(path, snap.version, "1h", "dv-reader")
    now = now_ms() + 1000
    kept = vacuum(str(path), dry_run=False, clock=lambda: now, **ZERO)
    assert kept.lease_kept_files == len(files) + len(dv_files)
    assert all((path / f.path).exists() for f in files) and all((path / d).exists() for d in dv_files)
    release_lease(path, lease.id)
    gone = vacuum(str(path), dry_run=False, clock=lambda: now, **ZERO)
    assert {f.path for f in gone.plan.files} >= dv_files
    assert not any((path / d).exists() for d in dv_files)


def test_a_damaged_lease_file_stops_maintenance_until_released(tmp_path):
    path = tmp_path / "t"
    _overwrites(path, 3)
    bad = path / LEASE_DIR_NAME / f"{'c' * 32}.json"
    bad.parent.mkdir()
    bad.write_text('{"format": "delta-lease/1", "version": "two"}')
    before = sorted(p.name for p in path.iterdir())
    with pytest.raises(LeaseError, match="c" * 32):
        vacuum(str(path), dry_run=False, clock=lambda: now_ms() + 1000, **ZERO)
    with pytest.raises(LeaseError):
        cleanup_log(str(path), retention_hours=0, apply=True)
    assert sorted(p.name for p in path.iterdir()) == before
    assert release_lease(path, "c" * 32) is None and not bad.exists()
    assert vacuum(str(path), dry_run=False, clock=lambda: now_ms() + 1000, **ZERO).deleted == 2


def test_a_configured_lease_location(tmp_path):
    path = tmp_path / "t"
    rows = _overwrites(path, 3)
    elsewhere = tmp_path / "control" / "leases"
    lease = add_lease(path, 1, "1h", "remote", location=elsewhere)
    assert (elsewhere / lease.file_name).exists() and not (path / LEASE_DIR_NAME).exists()
    assert list_leases(path) == [] and list_leases(path, location=elsewhere) == [lease]
    now = now_ms() + 1000
    assert vacuum(str(path), clock=lambda: now, **ZERO).lease_kept_files == 0  # not told where: not seen
    vacuum(str(path), dry_run=False, clock=lambda: now, lease_location=str(elsewhere), **ZERO)
    assert _ids(path, 1) == rows[1].column("id").to_pylist()
    inside = add_lease(path, 1, "1h", "hidden-inside", location=path / "_ops" / "leases")
    assert (path / "_ops" / "leases" / inside.file_name).exists()


def test_a_plan_without_its_file_list_is_not_applied_while_a_lease_is_live(tmp_path):
    path = tmp_path / "t"
    _overwrites(path, 3)
    now = now_ms() + 1000
    plan = vacuum(str(path), clock=lambda: now, **ZERO).to_dict()
    counts_only = {**plan, "files": [], "files_inline": False, "files_uri": None}  # as a big Spark plan
    add_lease(path, 1, "1h", "reader")
    before = sorted(p.name for p in path.iterdir())
    with pytest.raises(OperationNotAllowedError, match="leased versions \\[1\\]"):
        vacuum(str(path), plan=counts_only, dry_run=False, clock=lambda: now, **ZERO)
    assert sorted(p.name for p in path.iterdir()) == before


# -- the race: lease adds against VACUUM applies --------------------------------------------------------------

ROUNDS = 40


def test_race_lease_add_against_vacuum_apply(tmp_path, monkeypatch):
    """Each round: two overwrites make version `v` (its file is tombstoned by the next one); a thread runs
    VACUUM with retention 0 and the override (alternately a one-shot apply and the apply of a plan made
    before the round) while another thread, after a random delay spread over the VACUUM's duration, leases
    `v`. The apply's lease read (its re-validation start) is timed by a spy on `lease_pins`; `add_lease`'s
    return is timed when it returns. Every lease that returned before that read must be honoured: version
    `v` reads in delta-rs with its rows, and the result names the lease. Leases that came later are
    counted (their version is expected to break: the boundary is where the docstring says)."""
    path = tmp_path / "t"
    write_deltalake(str(path), _rows(0))
    reads: list[float] = []
    real_pins = vacuum_module.lease_pins

    def timed_pins(*args, **kwargs):
        reads.append(time.monotonic())
        return real_pins(*args, **kwargs)

    monkeypatch.setattr(vacuum_module, "lease_pins", timed_pins)
    rng = random.Random(28)
    # how long an `add_lease` takes, and how long after its start a VACUUM reads the leases at apply:
    # measured each round (moving averages), so that the lease start is spread over both sides of the read
    start = time.monotonic()
    vacuum(str(path), dry_run=False, clock=lambda: now_ms() + 1000, **ZERO)
    read_after = reads[-1] - start
    start = time.monotonic()
    release_lease(path, add_lease(path, 0, "1h", "warm-up").id)
    lease_took = time.monotonic() - start
    honoured = late = late_broken = 0
    for r in range(ROUNDS):
        write_deltalake(str(path), _rows(r + 1), mode="overwrite")
        version = DeltaTable(str(path)).version()
        write_deltalake(str(path), _rows(r + 1000), mode="overwrite")
        now = now_ms() + 1000
        plan = vacuum(str(path), clock=lambda now=now: now, **ZERO).to_dict() if r % 2 else None
        box: dict = {}
        gate = threading.Barrier(2)

        offset = rng.uniform(-1.5 * lease_took, 1.5 * read_after)  # lease start - VACUUM start

        def run_vacuum(plan=plan, now=now, box=box, gate=gate, offset=offset):
            gate.wait()
            time.sleep(max(0.0, -offset))
            reads.clear()
            box["vacuum_began"] = time.monotonic()
            box["result"] = vacuum(str(path), plan=plan, dry_run=False, clock=lambda: now, **ZERO)
            box["read"] = reads[-1]  # the apply's lease read (a one-shot run reads at plan time too)

        def take_lease(version=version, box=box, gate=gate, offset=offset, owner=f"round-{r}"):
            gate.wait()
            time.sleep(max(0.0, offset))
            box["lease_began"] = time.monotonic()
            box["lease"] = add_lease(path, version, "1h", owner)
            box["returned"] = time.monotonic()

        threads = [threading.Thread(target=run_vacuum), threading.Thread(target=take_lease)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        lease = box["lease"]
        lease_took = 0.7 * lease_took + 0.3 * (box["returned"] - box["lease_began"])
        read_after = 0.7 * read_after + 0.3 * (box["read"] - box["vacuum_began"])
        if box["returned"] < box["read"]:
            honoured += 1
            assert read_error(path, version) is None, f"round {r}: leased version {version} broken"
            assert _ids(path, version) == _rows(r + 1).column("id").to_pylist()
            assert lease.id in {le["id"] for le in box["result"].leases}
        else:
            late += 1
            late_broken += read_error(path, version) is not None
        release_lease(path, lease.id)
    print(
        f"\nlease race: {ROUNDS} rounds, {honoured} leases before the apply's lease read (all honoured), "
        f"{late} after ({late_broken} of those versions broken)"
    )
    assert honoured >= ROUNDS // 5 and late >= 1, (honoured, late)  # both sides of the boundary were exercised


# -- the CLI ----------------------------------------------------------------------------------------------------


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_cli_lease_add_list_release(tmp_path):
    path = tmp_path / "t"
    _overwrites(path, 3)
    code, out, err = _cli("lease", "add", str(path), "--version", "1", "--ttl", "6h", "--owner", "alice", "--json")
    assert code == 0, err
    added = json.loads(out)
    assert (added["version"], added["owner"], added["live"]) == (1, "alice", True)
    assert added["expires"] - added["created"] == 6 * HOUR
    code, out, _ = _cli("lease", "list", str(path), "--json")
    listed = json.loads(out)
    assert listed["table"] == f"file://{path}" and [le["id"] for le in listed["leases"]] == [added["id"]]
    code, out, _ = _cli("lease", "list", str(path))
    assert code == 0 and added["id"] in out and "alice" in out and "live" in out
    code, out, _ = _cli("vacuum", str(path), "--retention-hours", "0", "--no-enforce-retention")
    assert code == 0 and f"kept for lease {added['id']}: version 1, alice" in out
    code, out, _ = _cli("lease", "release", str(path), added["id"])
    assert code == 0 and out == f"released lease {added['id']} (version 1, owner alice)\n"
    assert _cli("lease", "list", str(path))[1] == "no live leases\n"
    code, _, err = _cli("lease", "release", str(path), added["id"])
    assert code == EXIT_ERROR and "LeaseError" in err
    code, _, err = _cli("lease", "add", str(path), "--version", "1", "--ttl", "soon", "--owner", "x")
    assert code == EXIT_USAGE and "--ttl" in err
    code, _, err = _cli("lease", "add", str(path), "--version", "1", "--ttl", "1h")
    assert code == EXIT_USAGE and "--owner" in err
