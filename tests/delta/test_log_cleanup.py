"""Log cleanup (issue 16): `protocol.log_cleanup` (the pure plan) and `maintenance.log_cleanup` (list,
dry run, apply).

Tables are written by delta-rs (`write_deltalake`, `create_checkpoint`) or `DeltaLogBuilder`, or copied
from the corpus; their log files get modification times with `os.utime` (commit v: `T0 + v` days,
its checkpoint a second later, its `.crc` half a second later), and the cleanup runs with a fixed
clock. After an apply, every version at or after the reported earliest readable version must read in
delta-rs and here exactly as before the cleanup.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

deltalake = pytest.importorskip("deltalake")
from deltalake import DeltaTable, write_deltalake  # noqa: E402

from airflow_delta_provider.delta import (  # noqa: E402
    DeltaLog,
    InvalidArgumentError,
    UnsupportedFeatureError,
    VersionNotFoundError,
)
from airflow_delta_provider.delta.maintenance.log_cleanup import cleanup_log  # noqa: E402
from airflow_delta_provider.delta.protocol.actions import Metadata, Protocol  # noqa: E402
from airflow_delta_provider.delta.protocol.filenames import FileInfo  # noqa: E402
from airflow_delta_provider.delta.protocol.log_cleanup import (  # noqa: E402
    REQUIRE_CHECKPOINT_PROTECTION,
    checkpoint_protection_version,
    cleanup_cutoff_ms,
    expired_log_cleanup_enabled,
    plan_log_cleanup,
)
from airflow_delta_provider.testing import DeltaLogBuilder  # noqa: E402

try:
    from conftest import copy_table
    from support.deltars_oracle import deltars_files
except ImportError:  # tests/ imported as a package
    from conftest import copy_table
    from support.deltars_oracle import deltars_files

REPO = Path(__file__).resolve().parents[2]
DAY = 86_400_000
T0 = 1_700_006_400_000  # 2023-11-15T00:00:00Z: commit v is at T0 + v days


def clock_at(days_after_t0: float, retention_days: float = 30):
    """A clock whose default (30-day) cutoff falls `days_after_t0 - retention_days` days after T0."""
    now = T0 + int((days_after_t0 + retention_days) * DAY) + 12 * 3_600_000
    return lambda: now


def name(v: int, suffix: str = "json") -> str:
    return f"{v:020d}.{suffix}"


def log_names(table: Path) -> dict[str, tuple[int, int]]:
    """Every file under `_delta_log` (sidecars included): relative name -> (size, mtime ns)."""
    root = table / "_delta_log"
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


def age(table: Path, *, first_day: int = 0) -> None:
    """Commit v (and its checkpoint, crc, compactions starting at v) at `T0 + (first_day + v)` days."""
    offsets = {"json": 0, "crc": 500, "checkpoint": 1000, "compacted": 1500}
    for p in (table / "_delta_log").iterdir():
        if p.is_file() and p.name[:20].isdigit():
            kind = "compacted" if p.name.endswith("compacted.json") else p.name.split(".")[1]
            ms = T0 + (first_day + int(p.name[:20])) * DAY + offsets.get(kind, 1000)
            os.utime(p, ns=(ms * 1_000_000, ms * 1_000_000))


def ours(table: Path, version: int) -> dict[str, int]:
    return {a.path: a.size for a in DeltaLog(str(table)).snapshot_at(version).all_files(with_stats=False)}


def states(table: Path, versions: range) -> dict[int, dict[str, int]]:
    return {v: deltars_files(table, v) for v in versions}


def assert_reads_as_before(table: Path, before: dict[int, dict[str, int]], earliest: int) -> None:
    """Every version from `earliest` on reads, in delta-rs and here, as it did before the cleanup."""
    DeltaLog.clear_cache()
    for v in range(earliest, max(before) + 1):
        assert deltars_files(table, v) == before[v], v
        assert ours(table, v) == before[v], v


def deltars_table(table: Path, versions: int, checkpoints: tuple[int, ...] = (), *, crc: bool = False) -> Path:
    """`versions` appends of one row by delta-rs (checkpoints after the given versions), optionally a `.crc`
    per version (written here: delta-rs writes none)."""
    for v in range(versions):
        write_deltalake(str(table), pa.table({"x": [v]}), mode="append")
        if v in checkpoints:
            DeltaTable(str(table)).create_checkpoint()
    if crc:
        first = [json.loads(line) for line in (table / "_delta_log" / name(0)).read_text().splitlines()]
        pm = {k: a[k] for a in first for k in ("protocol", "metaData") if k in a}
        for v in range(versions):
            body = {"tableSizeBytes": 0, "numFiles": v + 1, "numMetadata": 1, "numProtocol": 1}
            body |= {"protocol": pm["protocol"], "metadata": pm["metaData"]}
            (table / "_delta_log" / name(v, "crc")).write_text(json.dumps(body))
    return table


def write_compaction(table: Path, lo: int, hi: int) -> str:
    """`lo.hi.compacted.json`: the reconciled actions of append-only commits lo..hi (their adds)."""
    lines = []
    for v in range(lo, hi + 1):
        for line in (table / "_delta_log" / name(v)).read_text().splitlines():
            if "commitInfo" not in json.loads(line):
                lines.append(line)
    target = f"{lo:020d}.{hi:020d}.compacted.json"
    (table / "_delta_log" / target).write_text("\n".join(lines) + "\n")
    return target


def split_checkpoint(table: Path, version: int, parts: int, *, keep: int | None = None) -> list[str]:
    """Replace the classic checkpoint at `version` by a `parts`-part one (rows split in order); with
    `keep`, only the first `keep` parts are written (an incomplete checkpoint)."""
    log_dir = table / "_delta_log"
    classic = log_dir / name(version, "checkpoint.parquet")
    rows = pq.read_table(classic)
    size = math.ceil(rows.num_rows / parts)
    names = [name(version, f"checkpoint.{i + 1:010d}.{parts:010d}.parquet") for i in range(parts)]
    for i, part in enumerate(names[:keep]):
        pq.write_table(rows.slice(i * size, size), log_dir / part)
    classic.unlink()
    hint = log_dir / "_last_checkpoint"
    if json.loads(hint.read_text())["version"] == version:
        hint.write_text(json.dumps({"version": version, "size": rows.num_rows, "parts": parts}))
    return names[:keep]


# -- the plan (pure) ----------------------------------------------------------------------------------


def listing(*entries: tuple[str, int], size: int = 10) -> list[FileInfo]:
    """FileInfos from (name, mtime ms) pairs."""
    return [FileInfo(f"/t/_delta_log/{n}", size, ms) for n, ms in entries]


def commits(n: int) -> list[tuple[str, int]]:
    return [(name(v), T0 + v * DAY) for v in range(n)]


def test_cutoff_is_truncated_to_utc_midnight_like_spark():
    now = 1_710_084_600_000  # 2024-03-10T15:30:00Z
    assert cleanup_cutoff_ms(now, 30 * DAY) == 1_707_436_800_000  # 2024-02-09T00:00:00Z
    assert cleanup_cutoff_ms(now, 0, "hour") == 1_710_082_800_000  # 15:00
    assert cleanup_cutoff_ms(now, 0, "minute") == now
    for bad in (-1, math.nan, math.inf):
        with pytest.raises(InvalidArgumentError):
            cleanup_cutoff_ms(now, bad)


def test_plan_keeps_the_newest_checkpoint_at_or_before_the_cutoff_commit():
    files = listing(
        *commits(10),
        (name(3, "checkpoint.parquet"), T0 + 3 * DAY + 1),
        (name(6, "checkpoint.parquet"), T0 + 6 * DAY + 1),
        (name(8, "checkpoint.parquet"), T0 + 8 * DAY + 1),
    )
    # the cutoff falls on day 7: commit 7 is the cutoff commit, checkpoint 6 the newest at or before it
    plan = plan_log_cleanup(files, now_ms=T0 + 7 * DAY + 5, retention_ms=0, last_checkpoint_version=8)
    assert (plan.cutoff_commit, plan.kept_checkpoint_version, plan.earliest_readable_version) == (7, 6, 6)
    assert [f.name for f in plan.delete] == [
        *(name(v) for v in range(3)),
        name(3, "checkpoint.parquet"),
        *(name(v) for v in range(3, 6)),
    ]
    # `_last_checkpoint` bounds the kept checkpoint; without it nothing is deleted (as in Spark)
    plan = plan_log_cleanup(files, now_ms=T0 + 20 * DAY, retention_ms=0, last_checkpoint_version=3)
    assert plan.kept_checkpoint_version == 3
    plan = plan_log_cleanup(files, now_ms=T0 + 20 * DAY, retention_ms=0, last_checkpoint_version=None)
    assert plan.delete == () and "_last_checkpoint" in plan.reason and plan.earliest_readable_version == 0
    # no checkpoint at or before the cutoff commit: nothing, and where one would help
    plan = plan_log_cleanup(files, now_ms=T0 + 2 * DAY + 5, retention_ms=0, last_checkpoint_version=8)
    assert plan.delete == () and plan.checkpoint_wanted == 2 and "no complete checkpoint" in plan.reason


def test_plan_keeps_the_anchor_of_adjusted_commit_times():
    """Commit 5's file time is not after commit 4's, so time travel gives it 4's time + 1 ms; deleting
    commit 4 would move it. Checkpoint 5 is therefore not kept: checkpoint 3 is (Spark's iterator)."""
    entries = commits(8)
    entries[5] = (name(5), entries[4][1])
    files = listing(
        *entries,
        (name(3, "checkpoint.parquet"), T0 + 3 * DAY + 1),
        (name(5, "checkpoint.parquet"), T0 + 5 * DAY + 1),
    )
    plan = plan_log_cleanup(files, now_ms=T0 + 30 * DAY, retention_ms=0, last_checkpoint_version=5)
    assert plan.kept_checkpoint_version == 3 and plan.earliest_readable_version == 3


def test_plan_multipart_compactions_crc_and_hadoop_checksums():
    files = listing(
        *commits(9),
        *((name(v, "crc"), T0 + v * DAY + 1) for v in range(9)),
        (f".{name(0)}.crc", T0),  # Hadoop's checksum of 0.json
        (name(2, "checkpoint.0000000001.0000000002.parquet"), T0 + 2 * DAY + 1),
        (name(2, "checkpoint.0000000002.0000000002.parquet"), T0 + 2 * DAY + 1),
        (name(4, "checkpoint.0000000001.0000000003.parquet"), T0 + 4 * DAY + 1),  # incomplete: not a checkpoint
        (name(6, "checkpoint.0000000001.0000000002.parquet"), T0 + 6 * DAY + 1),
        (name(6, "checkpoint.0000000002.0000000002.parquet"), T0 + 6 * DAY + 1),
        (f"{1:020d}.{3:020d}.compacted.json", T0 + 3 * DAY + 2),
        (f"{6:020d}.{7:020d}.compacted.json", T0 + 7 * DAY + 2),
        (f"{7:020d}.{8:020d}.compacted.json", T0 + 8 * DAY + 2),
    )
    plan = plan_log_cleanup(files, now_ms=T0 + 30 * DAY, retention_ms=0, last_checkpoint_version=6)
    assert plan.kept_checkpoint_version == 6 and len(plan.kept_checkpoint.files) == 2
    deleted = {f.name for f in plan.delete}
    assert deleted == {
        *(name(v) for v in range(6)),
        *(name(v, "crc") for v in range(6)),
        f".{name(0)}.crc",
        name(2, "checkpoint.0000000001.0000000002.parquet"),
        name(2, "checkpoint.0000000002.0000000002.parquet"),
        name(4, "checkpoint.0000000001.0000000003.parquet"),
        f"{1:020d}.{3:020d}.compacted.json",
        f"{6:020d}.{7:020d}.compacted.json",  # spec: compactions starting at or before the kept checkpoint
    }
    versions = [int(f.name.lstrip(".")[:20]) for f in plan.delete]
    assert versions == sorted(versions), "deletes go oldest version first"


def test_plan_checkpoint_protection():
    files = listing(*commits(10), (name(4, "checkpoint.parquet"), T0 + 4 * DAY + 1))
    kwargs = {"now_ms": T0 + 30 * DAY, "retention_ms": 0, "last_checkpoint_version": 4}
    # commits 0..3 go and a checkpoint sits at the boundary 4: allowed (Spark's exception)
    assert plan_log_cleanup(files, protected_before=8, **kwargs).kept_checkpoint_version == 4
    # commit 3 is missing: the last removed commit is 2 and no checkpoint is at 3: refused
    gap = [f for f in files if f.name != name(3)]
    plan = plan_log_cleanup(gap, protected_before=8, **kwargs)
    assert plan.delete == () and "checkpointProtection" in plan.reason
    assert plan_log_cleanup(gap, protected_before=3, **kwargs).kept_checkpoint_version == 4
    # the property counts only with the feature
    md = Metadata(id="t", schema_string=None, configuration={REQUIRE_CHECKPOINT_PROTECTION: "8"})
    assert checkpoint_protection_version(Protocol(1, 7, None, ("checkpointProtection",)), md) == 8
    assert checkpoint_protection_version(Protocol(1, 7, None, ("appendOnly",)), md) == 0


def test_table_properties_of_log_cleanup():
    assert expired_log_cleanup_enabled({}) and expired_log_cleanup_enabled({"delta.enableExpiredLogCleanup": "TRUE"})
    assert not expired_log_cleanup_enabled({"delta.enableExpiredLogCleanup": "false"})
    with pytest.raises(InvalidArgumentError):  # a deletion is not decided on a value that means neither
        expired_log_cleanup_enabled({"delta.enableExpiredLogCleanup": "nope"})
    md = Metadata(id="t", schema_string=None, configuration={REQUIRE_CHECKPOINT_PROTECTION: "x"})
    with pytest.raises(InvalidArgumentError):
        checkpoint_protection_version(Protocol(1, 7, None, ("checkpointProtection",)), md)


def test_plan_sidecars_only_when_unreferenced_and_older_than_the_cutoff():
    top = name(4, "checkpoint.3b2f0e3c-0000-0000-0000-000000000000.json")
    files = listing(*commits(6), (top, T0 + 4 * DAY + 1), (name(2, "checkpoint.parquet"), T0 + 2 * DAY + 1))
    sidecars = [
        FileInfo("/t/_delta_log/_sidecars/used.parquet", 5, T0),
        FileInfo("/t/_delta_log/_sidecars/old-orphan.parquet", 5, T0),
        FileInfo("/t/_delta_log/_sidecars/.old-orphan.parquet.crc", 5, T0),
        FileInfo("/t/_delta_log/_sidecars/young.parquet", 5, T0 + 60 * DAY),
    ]
    kwargs = {"now_ms": T0 + 30 * DAY, "retention_ms": 0, "last_checkpoint_version": 4, "sidecars": sidecars}
    plan = plan_log_cleanup(files, sidecar_refs={top: ["used.parquet"]}, **kwargs)
    assert [f.name for f in plan.delete_sidecars] == ["old-orphan.parquet", ".old-orphan.parquet.crc"]
    assert plan.files[-2:] == plan.delete_sidecars, "sidecars go last"
    # a retained checkpoint whose references are unknown protects every sidecar
    assert plan_log_cleanup(files, sidecar_refs=lambda p: None, **kwargs).delete_sidecars == ()


# -- cleanup_log on real tables ----------------------------------------------------------------------


@pytest.fixture
def table(tmp_path: Path) -> Path:
    """delta-rs: versions 0..11, classic checkpoints at 4 and 8, a `.crc` per version, compactions 1..3
    and 5..7, aged one day per version."""
    t = deltars_table(tmp_path / "t", 12, (4, 8), crc=True)
    write_compaction(t, 1, 3)
    write_compaction(t, 5, 7)
    age(t)
    return t


def test_dry_run_deletes_nothing_and_apply_keeps_every_version_from_the_earliest(table):
    before = states(table, range(12))
    names = log_names(table)
    stamps = DeltaLog(str(table)).commit_timestamps()

    # Given: a cutoff on day 9 (commit 9 is the cutoff commit, checkpoint 8 the one to keep)
    dry = cleanup_log(table, clock=clock_at(9))
    assert log_names(table) == names, "a dry run deletes nothing"
    assert (dry.dry_run, dry.deleted, dry.kept_checkpoint_version, dry.earliest_readable_version) == (True, 0, 8, 8)
    expected = [name(v, ext) for v in range(8) for ext in ("crc", "json")] + [name(4, "checkpoint.parquet")]
    expected += [f"{1:020d}.{3:020d}.compacted.json", f"{5:020d}.{7:020d}.compacted.json"]
    assert sorted(dry.files) == sorted(expected)

    # When
    done = cleanup_log(table, clock=clock_at(9), apply=True)

    # Then: exactly the planned files are gone, the kept checkpoint, `_last_checkpoint` and its target stay
    assert done.files == dry.files and done.deleted == len(dry.files) and not done.dry_run
    assert set(log_names(table)) == set(names) - set(dry.files)
    assert {name(8, "checkpoint.parquet"), name(8), name(8, "crc"), "_last_checkpoint"} <= set(log_names(table))
    assert json.loads((table / "_delta_log" / "_last_checkpoint").read_text())["version"] == 8
    assert_reads_as_before(table, before, done.earliest_readable_version)
    with pytest.raises(VersionNotFoundError):
        DeltaLog(str(table)).snapshot_at(7)
    # timestamp time travel gives every retained version the time it had
    assert DeltaLog(str(table)).commit_timestamps() == [(v, t) for v, t in stamps if v >= 8]
    # a second run finds nothing more to do
    again = cleanup_log(table, clock=clock_at(9), apply=True)
    assert again.files == [] and "nothing is older" in again.reason and again.kept_checkpoint_version == 8


def test_retention_from_the_table_property_and_the_override(tmp_path):
    conf = {"delta.logRetentionDuration": "interval 2 days", "delta.deletedFileRetentionDuration": "interval 1 day"}
    b = DeltaLogBuilder(tmp_path / "t", schema={"id": "long"}, configuration=conf)
    b.start_time_ms, b.step_ms = T0, DAY
    b.create()
    for i in range(9):
        b.append([f"f{i}.parquet"])
        if b.version in (3, 6):
            b.checkpoint()
    now = T0 + 9 * DAY + 3_600_000  # day 9, 01:00
    # the property: cutoff = midnight of day 7 -> cutoff commit 7, checkpoint 6 kept
    r = cleanup_log(tmp_path / "t", clock=lambda: now)
    assert (r.cutoff_ms, r.retention_ms, r.kept_checkpoint_version) == (T0 + 7 * DAY, 2 * DAY, 6)
    # the override: 5 days -> cutoff on day 4, checkpoint 3 kept
    r = cleanup_log(tmp_path / "t", clock=lambda: now, retention_hours=5 * 24)
    assert (r.cutoff_ms, r.kept_checkpoint_version) == (T0 + 4 * DAY, 3)
    assert r.cutoff == "2023-11-19T00:00:00+00:00"


@pytest.mark.parametrize("bad", [-1, -0.5, math.nan, math.inf, "24", True])
def test_bad_retention_is_refused(table, bad):
    names = log_names(table)
    with pytest.raises(InvalidArgumentError) as err:
        cleanup_log(table, retention_hours=bad, apply=True)
    assert err.value.argument == "retention_hours"
    assert log_names(table) == names


def test_negative_retention_property_is_refused(tmp_path):
    b = DeltaLogBuilder(tmp_path / "t", schema={"id": "long"}, configuration={"delta.logRetentionDuration": "-1 days"})
    b.create()
    with pytest.raises(InvalidArgumentError, match="logRetentionDuration"):
        cleanup_log(tmp_path / "t")


def test_no_checkpoint_at_the_cutoff_loses_nothing(tmp_path):
    """Every commit is old but the only checkpoint is newer than the cutoff: nothing goes."""
    t = deltars_table(tmp_path / "t", 10, (8,))
    age(t)
    names = log_names(t)
    r = cleanup_log(t, clock=clock_at(6), apply=True)
    assert log_names(t) == names and r.files == [] and r.deleted == 0
    assert r.kept_checkpoint_version is None and r.earliest_readable_version == 0
    assert "no complete checkpoint at or before the cutoff commit 6" in r.reason


def test_latest_checkpoint_and_last_checkpoint_target_are_never_deleted(tmp_path):
    t = deltars_table(tmp_path / "t", 10, (3, 6, 8))
    age(t)
    before = states(t, range(10))
    # a stale `_last_checkpoint` (6, while 8 exists): it bounds what is kept, even with zero retention
    (t / "_delta_log" / "_last_checkpoint").write_text(json.dumps({"version": 6, "size": 9}))
    r = cleanup_log(t, retention_hours=0, clock=clock_at(60, 0), apply=True)
    assert r.kept_checkpoint_version == 6
    assert {name(6, "checkpoint.parquet"), name(8, "checkpoint.parquet"), name(6)} <= set(log_names(t))
    assert_reads_as_before(t, before, 6)
    # with the hint at the newest checkpoint, everything before it goes, the newest stays
    (t / "_delta_log" / "_last_checkpoint").write_text(json.dumps({"version": 8, "size": 9}))
    r = cleanup_log(t, retention_hours=0, clock=clock_at(60, 0), apply=True)
    assert r.kept_checkpoint_version == 8
    assert set(log_names(t)) == {"_last_checkpoint", name(8, "checkpoint.parquet"), name(8), name(9)}
    assert_reads_as_before(t, before, 8)


def test_multipart_checkpoints(tmp_path):
    t = deltars_table(tmp_path / "t", 12, (4, 6, 8))
    split_checkpoint(t, 4, 2)
    split_checkpoint(t, 6, 3, keep=2)  # an incomplete multi-part checkpoint is never kept
    split_checkpoint(t, 8, 2)
    age(t)
    before = states(t, range(12))
    # cutoff on day 7: the newest complete checkpoint at or before it is 4 (both parts kept)
    r = cleanup_log(t, clock=clock_at(7), apply=True)
    assert r.kept_checkpoint_version == 4
    assert r.files == [name(v) for v in range(4)]
    assert_reads_as_before(t, before, 4)
    # cutoff on day 10: checkpoint 8 kept; every part of 4 and the partial 6 go
    r = cleanup_log(t, clock=clock_at(10), apply=True)
    assert r.kept_checkpoint_version == 8
    parts = [
        name(v, f"checkpoint.{i:010d}.{n:010d}.parquet") for v, i, n in ((4, 1, 2), (4, 2, 2), (6, 1, 3), (6, 2, 3))
    ]
    assert [f for f in r.files if "checkpoint" in f] == parts
    assert_reads_as_before(t, before, 8)


def add_v2_checkpoint(table: Path, version: int) -> tuple[str, list[str]]:
    """Commit `version` (commitInfo only) and a UUID-named JSON V2 checkpoint at it, whose sidecars are
    fresh copies of the existing checkpoint's (so the old sidecars are referenced by the old one only)."""
    log_dir = table / "_delta_log"
    old = next(p for p in log_dir.glob("*.checkpoint.*.json"))
    lines, sidecars = [], []
    for obj in map(json.loads, old.read_text().splitlines()):
        if "checkpointMetadata" in obj:
            obj = {"checkpointMetadata": {"version": version}}
        if "sidecar" in obj:
            copy = name(version, f"checkpoint.{uuid.uuid4()}.parquet")
            shutil.copy(log_dir / "_sidecars" / obj["sidecar"]["path"], log_dir / "_sidecars" / copy)
            obj = {"sidecar": {**obj["sidecar"], "path": copy}}
            sidecars.append(copy)
        lines.append(json.dumps(obj))
    info = {"commitInfo": {"timestamp": T0 + version * DAY, "operation": "SET TBLPROPERTIES"}}
    (log_dir / name(version)).write_text(json.dumps(info) + "\n")
    top = name(version, f"checkpoint.{uuid.uuid4()}.json")
    (log_dir / top).write_text("\n".join(lines) + "\n")
    (log_dir / "_last_checkpoint").write_text(json.dumps({"version": version, "size": len(lines)}))
    return top, sidecars


def age_sidecars(table: Path, day: int) -> None:
    ms = T0 + day * DAY
    for p in (table / "_delta_log" / "_sidecars").iterdir():
        os.utime(p, ns=(ms * 1_000_000, ms * 1_000_000))


def test_v2_checkpoint_sidecars_go_only_when_no_kept_checkpoint_references_them(tmp_path):
    t = copy_table("delta-golden/v2-checkpoint-json", tmp_path)
    old_sidecars = sorted(p.name for p in (t / "_delta_log" / "_sidecars").iterdir())
    old_top = next(p.name for p in (t / "_delta_log").glob("*.checkpoint.*.json"))
    top, new_sidecars = add_v2_checkpoint(t, 3)
    age(t)
    age_sidecars(t, 0)
    sc = t / "_delta_log" / "_sidecars"
    (sc / "orphan-old.parquet").write_bytes(b"x")
    (sc / "orphan-young.parquet").write_bytes(b"y")  # mtime now: maybe an in-progress checkpoint
    os.utime(sc / "orphan-old.parquet", ns=(T0 * 1_000_000, T0 * 1_000_000))
    before = states(t, range(4))

    r = cleanup_log(t, clock=clock_at(5), apply=True)

    assert r.kept_checkpoint_version == 3 and r.earliest_readable_version == 3
    gone = set(r.files)
    assert {name(0), name(1), name(2), old_top, f".{name(0)}.crc", f".{old_top}.crc"} <= gone
    assert {f"_sidecars/{n}" for n in old_sidecars} | {"_sidecars/orphan-old.parquet"} <= gone
    left = set(log_names(t))
    assert {top, name(3), "_sidecars/orphan-young.parquet", *(f"_sidecars/{n}" for n in new_sidecars)} <= left
    assert_reads_as_before(t, before, 3)


def test_v2_parquet_checkpoint_kept_with_its_sidecars(tmp_path):
    t = copy_table("delta-golden/v2-checkpoint-parquet", tmp_path)
    age(t)
    age_sidecars(t, 0)
    orphan = t / "_delta_log" / "_sidecars" / "orphan.parquet"
    orphan.write_bytes(b"x")
    os.utime(orphan, ns=(T0 * 1_000_000, T0 * 1_000_000))
    sidecars = {n for n in log_names(t) if n.startswith("_sidecars/") and n != "_sidecars/orphan.parquet"}
    before = states(t, range(3))
    r = cleanup_log(t, clock=clock_at(5), apply=True)
    assert r.kept_checkpoint_version == 2
    assert {name(0), name(1), "_sidecars/orphan.parquet"} <= set(r.files)
    assert sidecars <= set(log_names(t)), "the sidecars the kept checkpoint references stay"
    assert_reads_as_before(t, before, 2)


def test_expired_log_cleanup_disabled_is_honoured_unless_overridden(tmp_path):
    b = DeltaLogBuilder(tmp_path / "t", schema={"id": "long"}, configuration={"delta.enableExpiredLogCleanup": "false"})
    b.create()
    for i in range(6):
        b.append([f"f{i}.parquet"])
    b.checkpoint()
    names = log_names(tmp_path / "t")
    r = cleanup_log(tmp_path / "t", apply=True)  # the builder's commits are from 2023: long expired
    assert r.files == [] and "enableExpiredLogCleanup=false" in r.reason and log_names(tmp_path / "t") == names
    r = cleanup_log(tmp_path / "t", apply=True, allow_when_disabled=True)
    assert r.kept_checkpoint_version == 6 and r.deleted == 6


def test_checkpoint_protection_on_a_table(tmp_path):
    b = DeltaLogBuilder(
        tmp_path / "t",
        schema={"id": "long"},
        protocol=(1, 7),
        writer_features=["checkpointProtection"],
        configuration={REQUIRE_CHECKPOINT_PROTECTION: "8"},
    )
    b.start_time_ms, b.step_ms = T0, DAY
    b.create()
    for i in range(9):
        b.append([f"f{i}.parquet"])
    # no checkpoint yet: writing one below version 8 during a cleanup is refused
    r = cleanup_log(tmp_path / "t", clock=clock_at(5), write_checkpoint_first=True, apply=True)
    assert r.files == [] and r.checkpoint_version_written is None and "checkpointProtection" in r.reason
    # with a checkpoint at 4, removing commits 0..3 leaves a checkpoint at the boundary: allowed
    b.checkpoint(4)
    r = cleanup_log(tmp_path / "t", clock=clock_at(5), apply=True)
    assert r.kept_checkpoint_version == 4 and r.files == [name(v) for v in range(4)]


def test_write_checkpoint_first_writes_one_at_the_cutoff_commit_then_cleans(tmp_path):
    t = deltars_table(tmp_path / "t", 10)
    age(t)
    before = states(t, range(10))
    r = cleanup_log(t, clock=clock_at(5), write_checkpoint_first=True, apply=True)
    assert (r.checkpoint_version_written, r.kept_checkpoint_version, r.earliest_readable_version) == (5, 5, 5)
    assert r.files == [name(v) for v in range(5)] and r.deleted == 5
    assert json.loads((t / "_delta_log" / "_last_checkpoint").read_text())["version"] == 5
    assert_reads_as_before(t, before, 5)


def test_a_table_with_an_unknown_writer_feature_is_refused(tmp_path):
    b = DeltaLogBuilder(tmp_path / "t", schema={"id": "long"}, protocol=(1, 7), writer_features=["appendOnly"])
    b.create()
    b.append(["a.parquet"])
    b.checkpoint()
    b.set_protocol(1, 7, writer_features=["appendOnly", "futureFeature"])  # a newer writer's upgrade
    names = log_names(tmp_path / "t")
    with pytest.raises(UnsupportedFeatureError) as err:
        cleanup_log(tmp_path / "t", apply=True)
    assert err.value.feature == "futureFeature" and log_names(tmp_path / "t") == names


def test_write_checkpoint_first_dry_run_plans_on_the_checkpoint_it_would_write(tmp_path):
    b = DeltaLogBuilder(tmp_path / "t", schema={"id": "long"})
    b.start_time_ms, b.step_ms = T0, DAY
    b.create()
    for i in range(9):
        b.append([f"f{i}.parquet"])
    names = log_names(tmp_path / "t")
    plain = cleanup_log(tmp_path / "t", clock=clock_at(5))
    assert plain.files == [] and "_last_checkpoint" in plain.reason
    r = cleanup_log(tmp_path / "t", clock=clock_at(5), write_checkpoint_first=True)
    assert (r.checkpoint_version_written, r.kept_checkpoint_version, r.earliest_readable_version) == (5, 5, 5)
    assert r.files == [name(v) for v in range(5)] and log_names(tmp_path / "t") == names


def test_an_unreadable_checkpoint_is_never_kept(tmp_path):
    t = deltars_table(tmp_path / "t", 10, (3, 6))
    age(t)
    (t / "_delta_log" / name(6, "checkpoint.parquet")).write_bytes(b"not parquet at all")
    r = cleanup_log(t, clock=clock_at(8))
    assert r.kept_checkpoint_version == 3 and r.files == [name(v) for v in range(3)]


# -- crashes -------------------------------------------------------------------------------------------

_CHILD = """
import os, signal, sys
from airflow_delta_provider.delta.maintenance.log_cleanup import cleanup_log
table, k, now = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def progress(n):
    if n >= k:
        os.kill(os.getpid(), signal.SIGKILL)
cleanup_log(table, apply=True, clock=lambda: now, batch_size=1, progress=progress)
"""


def test_kill_9_between_deletes_leaves_a_readable_table(tmp_path):
    """A process killed (SIGKILL, through the `progress` hook, one file per batch) after k deletes has
    removed exactly the k oldest planned files; every version from the earliest readable one reads as
    before in delta-rs and here; a rerun finishes the job."""
    src = deltars_table(tmp_path / "src", 12, (4, 8), crc=True)
    split_checkpoint(src, 4, 2)
    age(src)
    clock = clock_at(10)
    before = states(src, range(12))
    planned = cleanup_log(src, clock=clock).files
    assert len(planned) == 18  # commits and crcs 0..7, both parts of checkpoint 4
    for k in (1, 9, 17):
        t = tmp_path / f"k{k}"
        shutil.copytree(src, t, copy_function=shutil.copy2)
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        proc = subprocess.run([sys.executable, "-c", _CHILD, str(t), str(k), str(clock())], env=env, cwd=REPO)
        assert proc.returncode == -signal.SIGKILL
        assert set(log_names(t)) == set(log_names(src)) - set(planned[:k])
        assert_reads_as_before(t, before, 8)
        assert DeltaLog(str(t)).update().version == 11
        rerun = cleanup_log(t, clock=clock, apply=True)
        assert rerun.files == planned[k:]
        assert_reads_as_before(t, before, rerun.earliest_readable_version)
