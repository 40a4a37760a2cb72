"""Fault injection on `_delta_log`: damaged, missing, racing and stray files.

Tables are written with deltalake (delta-rs) in a temporary directory, or copied from the read-only
corpus. The expected state of every version is taken from delta-rs (and a naive raw-log replay)
BEFORE the damage, so the oracle never has to read a broken log.

Every refusal must be a `DeltaError` subclass (never a raw pyarrow/json/OS error) whose `str()`
names the table and, where relevant, the version and the file.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

deltalake = pytest.importorskip("deltalake")
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake  # noqa: E402

from airflow_delta_provider.delta import (  # noqa: E402
    DeltaError,
    DeltaLog,
    IncompleteCheckpointError,
    LogGapError,
    MalformedCheckpointError,
    MalformedCommitError,
    Snapshot,
    StorageError,
    TruncatedLogError,
    VersionNotFoundError,
)
from airflow_delta_provider.delta.storage import LocalLogStore  # noqa: E402

try:
    from support.deltars_oracle import (
        checkpoint_path,
        commit_path,
        copy_corpus_table,
        deltars_files,
        log_dir,
        raw_log_state,
    )
except ImportError:  # tests/ imported as a package
    from support.deltars_oracle import (
        checkpoint_path,
        commit_path,
        copy_corpus_table,
        deltars_files,
        log_dir,
        raw_log_state,
    )

LATEST = 10
CHECKPOINTS = (3, 6)


# -- the base table -----------------------------------------------------------------------------------
@dataclass
class Expected:
    """What every version of the undamaged base table holds (from delta-rs and the raw log)."""

    files: dict[int, dict[str, int]]
    tombstones: dict[int, dict[str, int | None]]
    txns: dict[int, dict[str, int]]


def _rows(ids: list[int], part: str) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "part": pa.array([part] * len(ids), pa.string()),
            "v": pa.array([float(i) for i in ids], pa.float64()),
        }
    )


def _write_base(path: Path) -> Expected:
    """Versions 0..10: appends (one file each, partition values with non-ASCII and escapes), deletes at
    4 and 7, app transactions at 5 and 9; checkpoints at 3 and 6 (`_last_checkpoint` -> 6)."""
    p = str(path)
    parts = ["a", "ü", "x y", "a", "-", "b%c", "-", "-", "a", "c", "ü"]
    for v in range(LATEST + 1):
        if v == 4:
            DeltaTable(p).delete("id = 10")
        elif v == 7:
            DeltaTable(p).delete("id = 50")
        else:
            txns = [Transaction("app", v, 1_700_000_000_000 + v)] if v in (5, 9) else []
            if v == 9:
                txns.append(Transaction("other", 1))
            props = CommitProperties(app_transactions=txns) if txns else None
            write_deltalake(
                p,
                _rows([v * 10, v * 10 + 1], parts[v]),
                partition_by=["part"],
                mode="append",
                commit_properties=props,
            )
        assert DeltaTable(p).version() == v
        if v in CHECKPOINTS:
            DeltaTable(p).create_checkpoint()
    files, tombs, txns = {}, {}, {}
    for v in range(LATEST + 1):
        files[v] = deltars_files(path, v)
        raw = raw_log_state(path, v, use_checkpoint=False)
        assert raw.active == files[v]
        tombs[v] = {k: r.get("deletionTimestamp") for k, r in raw.tombstones.items()}
        txns[v] = {k: t["version"] for k, t in raw.txns.items()}
    assert tombs[LATEST], "the base table must have tombstones"
    return Expected(files, tombs, txns)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Expected]:
    path = tmp_path_factory.mktemp("faults-base") / "table"
    return path, _write_base(path)


@pytest.fixture
def table(base: tuple[Path, Expected], tmp_path: Path) -> Path:
    """A private copy of the base table."""
    dest = tmp_path / "table"
    shutil.copytree(base[0], dest)
    return dest


@pytest.fixture
def expected(base: tuple[Path, Expected]) -> Expected:
    return base[1]


# -- helpers ------------------------------------------------------------------------------------------
def load(path: Path, version: int | None = None, store: LocalLogStore | None = None) -> Snapshot:
    log = DeltaLog(str(path), store=store) if store is not None else DeltaLog(str(path))
    return log.update() if version is None else log.snapshot_at(version=version)


def assert_state(snap: Snapshot, expected: Expected, version: int) -> None:
    assert snap.version == version
    assert {f.path: f.size for f in snap.all_files()} == expected.files[version]
    assert snap.num_files == len(expected.files[version])
    assert snap.size_in_bytes == sum(expected.files[version].values())
    got_tombs = {t.path: t.deletion_timestamp for t in snap.tombstones(include_expired=True)}
    assert got_tombs == expected.tombstones[version]
    assert {k: t.version for k, t in snap.set_transactions.items()} == expected.txns[version]


def assert_names(err: BaseException, table: Path, *, version: int | None = None, file: str | None = None) -> None:
    """A typed error whose text is enough to find the problem."""
    assert isinstance(err, DeltaError), f"{type(err).__name__}: {err}"
    assert not isinstance(err, pa.ArrowException)
    text = str(err)
    assert str(table) in text, f"table not named in: {text}"
    if version is not None:
        assert err.version == version, f"version {err.version} != {version}: {text}"
        assert f"version={version}" in text, text
    if file is not None:
        assert err.file is not None and err.file.endswith(file), f"file {err.file!r} != {file!r}: {text}"
        assert file in text, text


def delete_commits(path: Path, versions: range | list[int]) -> None:
    for v in versions:
        commit_path(path, v).unlink()


def _stash_commits(table: Path, versions: list[int]) -> dict[int, bytes]:
    saved = {v: commit_path(table, v).read_bytes() for v in versions}
    delete_commits(table, versions)
    return saved


def write_last_checkpoint(path: Path, data: bytes) -> None:
    (log_dir(path) / "_last_checkpoint").write_bytes(data)


# -- (1) truncated last commit ------------------------------------------------------------------------
def _cut_last_line(data: bytes, where: str) -> bytes:
    body = data.rstrip(b"\n")
    start = body.rfind(b"\n") + 1
    last = body[start:]
    if where == "middle":
        return body[: start + len(last) // 2]
    if where == "first_byte":
        return body[: start + 1]
    if where == "closing_brace":
        return body[:-1]
    if where == "utf8":  # inside a two-byte UTF-8 sequence
        idx = body.rfind("ü".encode())
        assert idx > start, "the last line must hold a non-ASCII character"
        return body[: idx + 1]
    raise AssertionError(where)


@pytest.mark.parametrize("where", ["middle", "first_byte", "closing_brace"])
def test_truncated_last_commit_is_malformed_commit(table: Path, expected: Expected, where: str) -> None:
    path = commit_path(table, LATEST)
    path.write_bytes(_cut_last_line(path.read_bytes(), where))
    with pytest.raises(MalformedCommitError) as info:
        load(table)
    assert_names(info.value, table, version=LATEST, file=path.name)
    with pytest.raises(MalformedCommitError):
        load(table, LATEST)
    # the versions before it are intact
    assert_state(load(table, LATEST - 1), expected, LATEST - 1)
    assert_state(load(table, 2), expected, 2)


def test_truncated_commit_inside_utf8_sequence(tmp_path: Path) -> None:
    p = tmp_path / "table"
    write_deltalake(str(p), _rows([1], "a"), partition_by=["part"], mode="append")
    write_deltalake(str(p), _rows([2], "ü"), partition_by=["part"], mode="append")
    path = commit_path(p, 1)
    lines = path.read_bytes().rstrip(b"\n").split(b"\n")
    # put the add (whose path holds the escaped value and partitionValues the raw "ü") last
    lines.sort(key=lambda line: "ü".encode() in line)
    path.write_bytes(_cut_last_line(b"\n".join(lines), "utf8"))
    with pytest.raises(MalformedCommitError) as info:
        load(p)
    assert_names(info.value, p, version=1, file=path.name)
    assert load(p, 0).num_files == 1


def test_truncated_commit_before_checkpoint_only_breaks_its_versions(table: Path, expected: Expected) -> None:
    """Commit 2 is torn, but checkpoint 3 covers it: versions >= 3 load, version 2 names the damage."""
    path = commit_path(table, 2)
    path.write_bytes(_cut_last_line(path.read_bytes(), "middle"))
    assert_state(load(table), expected, LATEST)
    assert_state(load(table, 3), expected, 3)
    assert_state(load(table, 1), expected, 1)
    with pytest.raises(MalformedCommitError) as info:
        load(table, 2)
    assert_names(info.value, table, version=2, file=path.name)


def test_torn_commit_then_completed_commit_on_update(table: Path, expected: Expected) -> None:
    """A long-lived DeltaLog sees a torn commit (error), then the completed file (loads)."""
    full = commit_path(table, LATEST).read_bytes()
    commit_path(table, LATEST).unlink()
    log = DeltaLog(str(table))
    assert_state(log.update(), expected, LATEST - 1)
    commit_path(table, LATEST).write_bytes(_cut_last_line(full, "middle"))
    with pytest.raises(MalformedCommitError) as info:
        log.update()
    assert_names(info.value, table, version=LATEST, file=commit_path(table, LATEST).name)
    assert log.snapshot.version == LATEST - 1  # the failed update left the current snapshot alone
    commit_path(table, LATEST).write_bytes(full)
    assert_state(log.update(), expected, LATEST)


# -- (2) corrupt or empty _last_checkpoint ------------------------------------------------------------
BAD_HINTS = {
    "garbage": b"\x00\xff\xfe garbage \x89PNG",
    "empty": b"",
    "whitespace": b"  \n",
    "partial": b'{"version":6,"size":1',
    "array": b"[6]",
    "string-version": b'{"version":"six","size":10}',
    "null-version": b'{"version":null}',
    "negative": b'{"version":-3}',
    "no-version": b'{"size":10}',
    "bad-size": b'{"version":6,"size":"ten"}',
    "bad-parts": b'{"version":6,"size":10,"parts":"two"}',
    "float-version": b'{"version":6.0,"size":10}',
    "beyond": b'{"version":400,"size":10}',
    "stale": b'{"version":3,"size":10}',
    "not-a-checkpoint": b'{"version":5,"size":10}',
    "wrong-parts": b'{"version":6,"size":10,"parts":3}',
    "bad-v2": b'{"version":6,"size":10,"v2Checkpoint":"nonsense"}',
}


@pytest.mark.parametrize("content", list(BAD_HINTS.values()), ids=list(BAD_HINTS))
def test_bad_last_checkpoint_loads_latest_by_listing(table: Path, expected: Expected, content: bytes) -> None:
    write_last_checkpoint(table, content)
    log = DeltaLog(str(table))
    assert log.latest_version() == LATEST
    snap = log.update()
    assert_state(snap, expected, LATEST)
    assert snap.log_segment.checkpoint_version == 6  # the newest complete checkpoint is still found
    assert_state(load(table, 7), expected, 7)
    assert_state(load(table, 4), expected, 4)


def test_last_checkpoint_is_a_directory(table: Path, expected: Expected) -> None:
    hint = log_dir(table) / "_last_checkpoint"
    hint.unlink()
    hint.mkdir()
    assert_state(load(table), expected, LATEST)


def test_corpus_zero_byte_last_checkpoint(tmp_path: Path) -> None:
    """`delta-golden/corrupted-last-checkpoint-kernel`: 0-byte hint, EXPECT v11."""
    p = copy_corpus_table("delta-golden/corrupted-last-checkpoint-kernel", tmp_path / "c")
    assert (log_dir(p) / "_last_checkpoint").stat().st_size == 0
    assert DeltaLog(str(p)).latest_version() == 11
    snap = load(p)
    assert snap.version == 11
    assert {f.path for f in snap.all_files()} == set(raw_log_state(p, 11).active)


def test_missing_last_checkpoint(table: Path, expected: Expected) -> None:
    (log_dir(table) / "_last_checkpoint").unlink()
    snap = load(table)
    assert_state(snap, expected, LATEST)
    assert snap.log_segment.checkpoint_version == 6


# -- (3) _last_checkpoint pointing at a deleted checkpoint --------------------------------------------
def test_hint_to_deleted_checkpoint_falls_back_to_older_checkpoint(table: Path, expected: Expected) -> None:
    checkpoint_path(table, 6).unlink()
    log = DeltaLog(str(table))
    assert log.latest_version() == LATEST
    snap = log.update()
    assert_state(snap, expected, LATEST)
    assert snap.log_segment.checkpoint_version == 3
    assert_state(load(table, 7), expected, 7)
    assert_state(load(table, 6), expected, 6)


def test_hint_to_deleted_checkpoint_older_commits_gone(table: Path, expected: Expected) -> None:
    """Checkpoint 6 deleted, commits 0..2 cleaned up: checkpoint 3 + commits 4..10 still make v10."""
    checkpoint_path(table, 6).unlink()
    delete_commits(table, range(3))
    snap = load(table)
    assert_state(snap, expected, LATEST)
    assert snap.log_segment.checkpoint_version == 3
    with pytest.raises(VersionNotFoundError) as info:
        load(table, 2)
    assert_names(info.value, table, version=2)


def test_hint_to_deleted_checkpoint_replays_from_zero(table: Path, expected: Expected) -> None:
    checkpoint_path(table, 6).unlink()
    checkpoint_path(table, 3).unlink()
    snap = load(table)
    assert_state(snap, expected, LATEST)
    assert snap.log_segment.checkpoint_version is None
    assert_state(load(table, 5), expected, 5)


def test_hint_to_deleted_checkpoint_and_no_way_back(table: Path) -> None:
    """Checkpoint 6 deleted and commits 0..5 gone: checkpoint 3 is not followed by commit 4."""
    checkpoint_path(table, 6).unlink()
    delete_commits(table, range(6))
    with pytest.raises(DeltaError) as info:
        load(table)
    assert isinstance(info.value, TruncatedLogError | VersionNotFoundError), repr(info.value)
    assert_names(info.value, table)


# -- (4) torn multi-part checkpoint -------------------------------------------------------------------
MULTIPART = "delta-golden/multi-part-checkpoint"
PART = "00000000000000000001.checkpoint.{:010d}.0000000002.parquet"


@pytest.fixture
def multipart(tmp_path: Path) -> Path:
    return copy_corpus_table(MULTIPART, tmp_path / "mp")


def _multipart_expected(path: Path) -> dict[str, int]:
    state = raw_log_state(path, 1, use_checkpoint=False)
    assert len(state.active) == 10
    return state.active


def test_multipart_intact_uses_checkpoint(multipart: Path) -> None:
    snap = load(multipart)
    assert snap.version == 1 and snap.num_files == 10
    assert snap.log_segment.checkpoint_version == 1
    assert {f.path: f.size for f in snap.all_files()} == _multipart_expected(multipart)


@pytest.mark.parametrize("part", [1, 2])
@pytest.mark.parametrize("damage", ["delete", "zero-bytes"])
def test_torn_multipart_checkpoint_replays_json(multipart: Path, part: int, damage: str) -> None:
    expected = _multipart_expected(multipart)
    target = log_dir(multipart) / PART.format(part)
    if damage == "delete":
        target.unlink()
    else:
        target.write_bytes(b"")
    log = DeltaLog(str(multipart))
    assert log.latest_version() == 1
    snap = log.update()
    assert snap.version == 1
    assert snap.log_segment.checkpoint_version is None
    assert {f.path: f.size for f in snap.all_files()} == expected
    assert load(multipart, 0).version == 0


def test_corrupt_multipart_part_replays_json(multipart: Path) -> None:
    expected = _multipart_expected(multipart)
    target = log_dir(multipart) / PART.format(2)
    target.write_bytes(b"PAR1" + os.urandom(200))
    snap = load(multipart)
    assert snap.version == 1 and {f.path: f.size for f in snap.all_files()} == expected


def test_torn_multipart_loses_to_classic_checkpoint_at_same_version(multipart: Path) -> None:
    """kernel-rs `torn_multipart_checkpoint_loses_to_classic_checkpoint`: a classic checkpoint at the
    same version is used when a part of the multi-part one is missing."""
    expected = _multipart_expected(multipart)
    parts = [pq.read_table(log_dir(multipart) / PART.format(i)) for i in (1, 2)]
    classic = pa.concat_tables(parts, promote_options="permissive")
    pq.write_table(classic, checkpoint_path(multipart, 1))  # the same rows as one classic file
    (log_dir(multipart) / PART.format(1)).unlink()
    snap = load(multipart)
    assert snap.version == 1
    assert snap.log_segment.checkpoint_version == 1
    assert [f.name for f in snap.log_segment.checkpoint.files] == [checkpoint_path(multipart, 1).name]
    assert {f.path: f.size for f in snap.all_files()} == expected


def test_stray_part_of_other_multipart_attempt_is_ignored(multipart: Path) -> None:
    """An incomplete 3-part attempt next to the complete 2-part checkpoint of the same version."""
    expected = _multipart_expected(multipart)
    stray = log_dir(multipart) / "00000000000000000001.checkpoint.0000000001.0000000003.parquet"
    shutil.copy2(log_dir(multipart) / PART.format(1), stray)
    snap = load(multipart)
    assert snap.log_segment.checkpoint_version == 1
    assert stray.name not in [f.name for f in snap.log_segment.checkpoint.files]
    assert snap.log_segment.checkpoint.num_parts == 2
    assert {f.path: f.size for f in snap.all_files()} == expected


@pytest.mark.parametrize("missing_commits", [[0], [0, 1]], ids=["no-commit-0", "no-commits"])
def test_torn_multipart_checkpoint_without_commits_is_typed_error(multipart: Path, missing_commits: list[int]) -> None:
    (log_dir(multipart) / PART.format(2)).unlink()
    delete_commits(multipart, missing_commits)
    for version in (None, 1):
        with pytest.raises(DeltaError) as info:
            load(multipart, version)
        assert isinstance(info.value, IncompleteCheckpointError | TruncatedLogError | VersionNotFoundError), repr(
            info.value
        )
        assert_names(info.value, multipart)


def test_torn_multipart_checkpoint_without_commits_names_the_checkpoint(multipart: Path) -> None:
    """Only an incomplete checkpoint could make v1: the error says so (not 'no table')."""
    (log_dir(multipart) / PART.format(2)).unlink()
    delete_commits(multipart, [0, 1])
    with pytest.raises(IncompleteCheckpointError) as info:
        load(multipart)
    assert_names(info.value, multipart)


# -- (5) gaps -----------------------------------------------------------------------------------------
def test_gap_after_checkpoint_is_log_gap_error(table: Path, expected: Expected) -> None:
    """Checkpoint 6, commits 7, 9, 10: version 8 is missing."""
    commit_path(table, 8).unlink()
    for version in (None, LATEST, 9):
        with pytest.raises(LogGapError) as info:
            load(table, version)
        assert_names(info.value, table, version=8)
        assert "contiguous" in str(info.value)
    assert_state(load(table, 7), expected, 7)
    assert_state(load(table, 6), expected, 6)  # the checkpoint alone makes v6


def test_gap_right_after_checkpoint_names_missing_version(table: Path, expected: Expected) -> None:
    """Checkpoint 6, commits 8..10: commit 7 is missing. Spark calls this a truncated log
    (`logFileNotFoundException`), delta-rs a gap; either way a log-corruption error naming 7."""
    commit_path(table, 7).unlink()
    with pytest.raises((LogGapError, TruncatedLogError)) as info:
        load(table)
    assert_names(info.value, table, version=7)
    assert_state(load(table, 6), expected, 6)


def test_gap_without_any_checkpoint(table: Path, expected: Expected) -> None:
    checkpoint_path(table, 3).unlink()
    checkpoint_path(table, 6).unlink()
    commit_path(table, 5).unlink()
    with pytest.raises(LogGapError) as info:
        load(table)
    assert_names(info.value, table, version=5)
    assert_state(load(table, 4), expected, 4)


def test_gap_before_checkpoint_loads(table: Path, expected: Expected) -> None:
    commit_path(table, 1).unlink()
    assert_state(load(table), expected, LATEST)
    assert_state(load(table, 4), expected, 4)  # checkpoint 3 + commit 4
    assert_state(load(table, 3), expected, 3)
    assert_state(load(table, 0), expected, 0)
    # inside the gap: no checkpoint at or before 2, and commit 1 is missing
    with pytest.raises((LogGapError, VersionNotFoundError)) as info:
        load(table, 2)
    assert_names(info.value, table)
    if isinstance(info.value, LogGapError):
        assert info.value.version == 1


def test_gap_appearing_on_incremental_update(table: Path, expected: Expected) -> None:
    """A live DeltaLog at v8 sees commit 10 but not 9: update() must refuse, naming version 9."""
    saved = _stash_commits(table, [9, 10])
    log = DeltaLog(str(table))
    assert_state(log.update(), expected, 8)
    commit_path(table, 10).write_bytes(saved[10])
    with pytest.raises(LogGapError) as info:
        log.update()
    assert_names(info.value, table, version=9)
    assert log.snapshot.version == 8
    commit_path(table, 9).write_bytes(saved[9])
    assert_state(log.update(), expected, LATEST)


# -- (6) a commit lands while a snapshot is being built ----------------------------------------------
class RacingStore(LocalLogStore):
    """Local storage that runs `hook` once, right after the first listing of `_delta_log` returns."""

    def __init__(self, hook: Callable[[], None] | None = None) -> None:
        self.hook = hook
        self.listings = 0

    def list_from(self, directory: str, start: str = ""):
        out = super().list_from(directory, start)
        self.listings += 1
        if self.hook is not None and directory.rstrip("/").endswith("_delta_log"):
            hook, self.hook = self.hook, None
            hook()
        return out


@pytest.mark.parametrize("with_hint", [True, False], ids=["hint", "no-hint"])
def test_commit_landing_during_snapshot_build(table: Path, expected: Expected, with_hint: bool) -> None:
    if not with_hint:
        (log_dir(table) / "_last_checkpoint").unlink()
    saved = _stash_commits(table, [LATEST])
    store = RacingStore(lambda: commit_path(table, LATEST).write_bytes(saved[LATEST]))
    log = DeltaLog(str(table), store=store)
    snap = log.update()
    assert store.listings >= 1 and store.hook is None, "the hook ran"
    assert commit_path(table, LATEST).exists()
    assert_state(snap, expected, LATEST - 1)  # exactly the version that was listed
    assert_state(log.update(), expected, LATEST)  # a later update sees the new commit


def test_commit_landing_during_incremental_update(table: Path, expected: Expected) -> None:
    a, b = LATEST - 1, LATEST
    saved = _stash_commits(table, [a, b])
    store = RacingStore()
    log = DeltaLog(str(table), store=store)
    assert_state(log.update(), expected, a - 1)
    commit_path(table, a).write_bytes(saved[a])
    store.hook = lambda: commit_path(table, b).write_bytes(saved[b])
    assert_state(log.update(), expected, a)
    assert_state(log.update(), expected, b)


def test_checkpoint_and_commit_landing_during_snapshot_build(table: Path, expected: Expected) -> None:
    """A writer adds the last commit, a checkpoint at it and a new hint right after our listing."""
    cp_dir = table.parent / "later"
    shutil.copytree(table, cp_dir)
    DeltaTable(str(cp_dir)).create_checkpoint()
    saved = _stash_commits(table, [LATEST])

    def writer() -> None:
        commit_path(table, LATEST).write_bytes(saved[LATEST])
        shutil.copy2(checkpoint_path(cp_dir, LATEST), checkpoint_path(table, LATEST))
        shutil.copy2(log_dir(cp_dir) / "_last_checkpoint", log_dir(table) / "_last_checkpoint")

    log = DeltaLog(str(table), store=RacingStore(writer))
    assert_state(log.update(), expected, LATEST - 1)
    snap = log.update()
    assert_state(snap, expected, LATEST)
    fresh = load(table)
    assert fresh.log_segment.checkpoint_version == LATEST
    assert_state(fresh, expected, LATEST)


def test_checkpoint_deleted_between_listing_and_read_falls_back(table: Path, expected: Expected) -> None:
    """Log cleanup racing a reader: the listed checkpoint 6 vanishes before it is read."""
    store = RacingStore(lambda: checkpoint_path(table, 6).unlink())
    snap = DeltaLog(str(table), store=store).update()
    assert_state(snap, expected, LATEST)
    assert snap.log_segment.checkpoint_version == 3


def test_commit_deleted_between_listing_and_read_is_typed(table: Path) -> None:
    """A listed commit vanishes before it is read (manual deletion racing a reader)."""
    store = RacingStore(lambda: commit_path(table, 8).unlink())
    with pytest.raises(DeltaError) as info:
        DeltaLog(str(table), store=store).update()
    assert isinstance(info.value, StorageError), repr(info.value)
    assert_names(info.value, table, version=8, file=commit_path(table, 8).name)


# -- (7) corrupt checkpoint parquet -------------------------------------------------------------------
def _corrupt(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "garbage":
        path.write_bytes(os.urandom(len(data)))
    elif how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "footer":
        path.write_bytes(data[:-12] + b"\xff" * 8 + b"PAR1")
    elif how == "not-parquet":
        path.write_bytes(b'{"this is": "json, not parquet"}\n')
    else:
        raise AssertionError(how)


CORRUPTIONS = ["garbage", "truncated", "footer", "not-parquet"]


@pytest.mark.parametrize("how", CORRUPTIONS)
def test_corrupt_checkpoint_falls_back_to_older_checkpoint(table: Path, expected: Expected, how: str) -> None:
    _corrupt(checkpoint_path(table, 6), how)
    snap = load(table)
    assert_state(snap, expected, LATEST)
    assert snap.log_segment.checkpoint_version == 3
    assert_state(load(table, 6), expected, 6)
    assert_state(load(table, 7), expected, 7)


def test_two_corrupt_checkpoints_fall_back_to_json(table: Path, expected: Expected) -> None:
    _corrupt(checkpoint_path(table, 6), "garbage")
    _corrupt(checkpoint_path(table, 3), "truncated")
    snap = load(table)
    assert_state(snap, expected, LATEST)
    assert snap.log_segment.checkpoint_version is None


@pytest.mark.parametrize("how", CORRUPTIONS)
def test_corrupt_checkpoint_without_fallback_is_malformed_checkpoint(table: Path, how: str) -> None:
    delete_commits(table, range(6))
    checkpoint_path(table, 3).unlink()
    _corrupt(checkpoint_path(table, 6), how)
    for version in (None, 7):
        with pytest.raises(MalformedCheckpointError) as info:
            load(table, version)
        assert_names(info.value, table, version=6, file=checkpoint_path(table, 6).name)


def test_corrupt_checkpoint_without_fallback_never_leaks_raw_errors(table: Path) -> None:
    """Same as above, through every public entry point that reads the checkpoint."""
    delete_commits(table, range(6))
    checkpoint_path(table, 3).unlink()
    _corrupt(checkpoint_path(table, 6), "garbage")
    log = DeltaLog(str(table))
    assert log.latest_version() == LATEST  # listing only: no checkpoint read
    for call in (log.update, lambda: log.snapshot_at(version=6), lambda: log.snapshot):
        with pytest.raises(DeltaError) as info:
            call()
        assert_names(info.value, table)


# -- (8) zero-byte checkpoint -------------------------------------------------------------------------
def test_zero_byte_checkpoint_is_ignored(table: Path, expected: Expected) -> None:
    checkpoint_path(table, 6).write_bytes(b"")
    snap = load(table)
    assert_state(snap, expected, LATEST)
    assert snap.log_segment.checkpoint_version == 3
    assert_state(load(table, 6), expected, 6)


def test_zero_byte_checkpoints_only_replays_json(table: Path, expected: Expected) -> None:
    checkpoint_path(table, 6).write_bytes(b"")
    checkpoint_path(table, 3).write_bytes(b"")
    snap = load(table)
    assert_state(snap, expected, LATEST)
    assert snap.log_segment.checkpoint_version is None


def test_zero_byte_checkpoint_newer_than_commits_is_ignored(table: Path, expected: Expected) -> None:
    """A zero-byte checkpoint at version 9 (a crashed writer) must not become the latest version."""
    checkpoint_path(table, 9).write_bytes(b"")
    write_last_checkpoint(table, b'{"version":9,"size":10}')
    log = DeltaLog(str(table))
    assert log.latest_version() == LATEST
    assert_state(log.update(), expected, LATEST)


# -- (9) hidden and temporary files -------------------------------------------------------------------
def test_hidden_and_temp_files_are_ignored(table: Path, expected: Expected) -> None:
    ld = log_dir(table)
    later = table.parent / "later"
    shutil.copytree(table, later)
    write_deltalake(str(later), _rows([99], "z"), partition_by=["part"], mode="append")
    next_commit = commit_path(later, LATEST + 1).read_bytes()  # a valid commit 9, placed where it must not count
    (ld / ".00000000000000000005.json.crc").write_bytes(b'{"crc": 1}')
    (ld / f".{LATEST + 1:020d}.json").write_bytes(next_commit)
    (ld / f"{LATEST + 1:020d}.json.tmp").write_bytes(next_commit)
    (ld / f"{LATEST + 1:020d}.json.crc").write_bytes(b"junk")
    (ld / ".tmp").mkdir()
    (ld / ".tmp" / f"{LATEST + 1:020d}.json").write_bytes(next_commit)
    (ld / "_commits").mkdir()
    (ld / "_commits" / f"{LATEST + 1:020d}.json").write_bytes(next_commit)
    (ld / "_staged_commits").mkdir()
    (ld / "_staged_commits" / f"{LATEST + 1:020d}.3f2a.json").write_bytes(next_commit)
    (ld / "00000000000000000003.checkpoint.parquet.tmp123").write_bytes(os.urandom(100))
    (ld / f"{LATEST + 1:020d}.checkpoint.parquet.tmp").write_bytes(os.urandom(100))
    (ld / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")
    (ld / "_last_checkpoint.tmp").write_bytes(b'{"version": 9}')
    (ld / "README").write_text("not a log file")
    (ld / "0000000000000000009.json").write_bytes(next_commit)  # 19 digits
    (ld / f"{LATEST + 1:021d}.json").write_bytes(next_commit)  # 21 digits
    (ld / f"{LATEST + 1:020d}.JSON").write_bytes(next_commit)
    (ld / f"{LATEST + 1:020d}.json.bak").write_bytes(next_commit)
    log = DeltaLog(str(table))
    assert log.latest_version() == LATEST
    snap = log.update()
    assert_state(snap, expected, LATEST)
    assert snap.log_segment.checkpoint_version == 6
    assert [c.version for c in snap.log_segment.commits] == list(range(7, LATEST + 1))
    assert [h["version"] for h in log.history()] == list(range(LATEST, -1, -1))
    assert [v for v, _ in log.get_changes(7)] == list(range(7, LATEST + 1))
    assert_state(load(table, 2), expected, 2)
    with pytest.raises(VersionNotFoundError) as info:
        log.snapshot_at(version=LATEST + 1)
    assert_names(info.value, table, version=LATEST + 1)


def test_corpus_tmp_commit_is_ignored(tmp_path: Path) -> None:
    """delta-rs/simple_table ships an uncommitted `_delta_log/.tmp/00000000000000000005.json`."""
    p = copy_corpus_table("delta-rs/simple_table", tmp_path / "simple")
    assert (log_dir(p) / ".tmp").is_dir()
    snap = load(p)
    latest = max(int(n[:20]) for n in os.listdir(log_dir(p)) if n.endswith(".json") and n[:20].isdigit())
    assert snap.version == latest
    assert {f.path for f in snap.all_files()} == set(raw_log_state(p, latest).active)


# -- (10) V2 checkpoint with a missing sidecar --------------------------------------------------------
V2 = "delta-golden/v2-checkpoint-parquet"


@pytest.fixture
def v2(tmp_path: Path) -> Path:
    return copy_corpus_table(V2, tmp_path / "v2")


def _sidecars(path: Path) -> list[Path]:
    return sorted(p for p in (log_dir(path) / "_sidecars").iterdir() if p.name.endswith(".parquet"))


def test_v2_checkpoint_intact(v2: Path) -> None:
    snap = load(v2)
    assert snap.version == 2 and snap.num_files == 4
    assert snap.log_segment.checkpoint_version == 2
    assert {f.path: f.size for f in snap.all_files()} == raw_log_state(v2, 2, use_checkpoint=False).active


def test_v2_missing_sidecar_without_commits_is_malformed_checkpoint(v2: Path) -> None:
    sidecar = _sidecars(v2)[0]
    sidecar.unlink()
    delete_commits(v2, [0, 1])
    with pytest.raises(MalformedCheckpointError) as info:
        load(v2)
    assert_names(info.value, v2, version=2, file=sidecar.name)


def test_v2_corrupt_sidecar_without_commits_is_malformed_checkpoint(v2: Path) -> None:
    sidecar = _sidecars(v2)[1]
    sidecar.write_bytes(os.urandom(sidecar.stat().st_size))
    delete_commits(v2, [0, 1])
    with pytest.raises(MalformedCheckpointError) as info:
        load(v2)
    assert_names(info.value, v2, version=2, file=sidecar.name)


def test_v2_missing_sidecar_with_commits_replays_json(v2: Path) -> None:
    """With every commit still there, an unreadable V2 checkpoint is skipped like a corrupt classic one."""
    expected = raw_log_state(v2, 2, use_checkpoint=False).active
    _sidecars(v2)[0].unlink()
    snap = load(v2)
    assert snap.version == 2
    assert snap.log_segment.checkpoint_version is None
    assert {f.path: f.size for f in snap.all_files()} == expected


# -- storage failures: typed, never raw OSErrors ----------------------------------------------------
class FailingStore(LocalLogStore):
    """Local storage whose reads of one file name fail with `exc`."""

    def __init__(self, name: str, exc: BaseException) -> None:
        self.name = name
        self.exc = exc

    def read_bytes(self, path: str) -> bytes:
        if Path(path).name == self.name:
            raise self.exc
        return super().read_bytes(path)

    def open(self, path: str):
        if Path(path).name == self.name:
            raise self.exc
        return super().open(path)


STORAGE_FAULTS = {
    "permission": lambda: PermissionError(13, "Permission denied"),
    "eio": lambda: OSError(5, "Input/output error"),
    "timeout": lambda: TimeoutError("read timed out"),
    "connection": lambda: ConnectionResetError(104, "Connection reset by peer"),
}


@pytest.mark.parametrize("fault", list(STORAGE_FAULTS), ids=list(STORAGE_FAULTS))
def test_unreadable_commit_is_storage_error(table: Path, fault: str) -> None:
    name = commit_path(table, LATEST).name
    store = FailingStore(name, STORAGE_FAULTS[fault]())
    with pytest.raises(DeltaError) as info:
        DeltaLog(str(table), store=store).update()
    assert isinstance(info.value, StorageError), repr(info.value)
    assert_names(info.value, table, version=LATEST, file=name)
    assert info.value.transient is (fault != "permission")


@pytest.mark.parametrize("fault", list(STORAGE_FAULTS), ids=list(STORAGE_FAULTS))
def test_unreadable_commit_on_incremental_update_is_storage_error(table: Path, expected: Expected, fault: str) -> None:
    saved = _stash_commits(table, [LATEST])
    store = FailingStore(commit_path(table, LATEST).name, STORAGE_FAULTS[fault]())
    log = DeltaLog(str(table), store=store)
    assert_state(log.update(), expected, LATEST - 1)
    commit_path(table, LATEST).write_bytes(saved[LATEST])
    with pytest.raises(StorageError) as info:
        log.update()
    assert_names(info.value, table, version=LATEST, file=commit_path(table, LATEST).name)
    assert log.snapshot.version == LATEST - 1
    store.name = ""  # storage recovers
    assert_state(log.update(), expected, LATEST)


@pytest.mark.parametrize("fault", list(STORAGE_FAULTS), ids=list(STORAGE_FAULTS))
def test_unreadable_checkpoint_without_fallback_is_typed(table: Path, fault: str) -> None:
    delete_commits(table, range(6))
    checkpoint_path(table, 3).unlink()
    name = checkpoint_path(table, 6).name
    with pytest.raises(DeltaError) as info:
        DeltaLog(str(table), store=FailingStore(name, STORAGE_FAULTS[fault]())).update()
    assert_names(info.value, table, file=name)


@pytest.mark.parametrize("fault", list(STORAGE_FAULTS), ids=list(STORAGE_FAULTS))
def test_unreadable_last_checkpoint_is_typed_or_ignored(table: Path, expected: Expected, fault: str) -> None:
    store = FailingStore("_last_checkpoint", STORAGE_FAULTS[fault]())
    try:
        snap = DeltaLog(str(table), store=store).update()
    except DeltaError as exc:
        assert isinstance(exc, StorageError), repr(exc)
        assert_names(exc, table, file="_last_checkpoint")
    else:
        assert_state(snap, expected, LATEST)


def test_listing_failure_is_storage_error(table: Path) -> None:
    class ListFails(LocalLogStore):
        def list_from(self, directory: str, start: str = ""):
            raise OSError(5, "Input/output error")

    with pytest.raises(StorageError) as info:
        DeltaLog(str(table), store=ListFails()).update()
    assert_names(info.value, table)


# -- malformed actions in a commit and a checkpoint ---------------------------------------------------
_ADD = {"path": "x.parquet", "partitionValues": {}, "size": 1, "modificationTime": 1, "dataChange": True}
MALFORMED_ACTIONS = {
    "add-not-object": {"add": "x.parquet"},
    "add-no-path": {"add": {k: v for k, v in _ADD.items() if k != "path"}},
    "add-size-text": {"add": {**_ADD, "size": "big"}},
    "add-size-overflow": {"add": {**_ADD, "size": 10**23}},
    "add-partition-values-list": {"add": {**_ADD, "partitionValues": [1, 2]}},
    "add-dv-not-object": {"add": {**_ADD, "deletionVector": "u"}},
    "add-dv-bad-size": {
        "add": {
            **_ADD,
            "deletionVector": {"storageType": "u", "pathOrInlineDv": "ab", "sizeInBytes": "z", "cardinality": 1},
        }
    },
    "remove-no-path": {"remove": {"deletionTimestamp": 1}},
    "remove-timestamp-text": {"remove": {"path": "x.parquet", "deletionTimestamp": "yesterday"}},
    "protocol-versions-text": {"protocol": {"minReaderVersion": "one", "minWriterVersion": 2}},
    "metadata-list": {"metaData": []},
    "txn-no-version": {"txn": {"appId": "a"}},
    "commitinfo-list": {"commitInfo": [1, 2]},
    "json-number": 42,
}


def _append_line(table: Path, version: int, obj: object) -> None:
    path = commit_path(table, version)
    path.write_bytes(path.read_bytes().rstrip(b"\n") + b"\n" + json.dumps(obj).encode() + b"\n")


@pytest.mark.parametrize("obj", list(MALFORMED_ACTIONS.values()), ids=list(MALFORMED_ACTIONS))
def test_malformed_action_is_malformed_commit(table: Path, expected: Expected, obj: object) -> None:
    _append_line(table, LATEST, obj)
    with pytest.raises(DeltaError) as info:
        load(table)
    assert isinstance(info.value, MalformedCommitError), repr(info.value)
    assert_names(info.value, table, version=LATEST, file=commit_path(table, LATEST).name)
    assert_state(load(table, LATEST - 1), expected, LATEST - 1)


def test_stats_as_json_object_is_tolerated_or_typed(table: Path) -> None:
    """`stats` must be a JSON *string*; an object there is either accepted or a typed refusal."""
    _append_line(table, LATEST, {"add": {**_ADD, "stats": {"numRecords": 1}}})
    try:
        snap = load(table)
    except DeltaError as exc:
        assert_names(exc, table, version=LATEST)
    else:
        assert "x.parquet" in {f.path for f in snap.all_files()}


def _rewrite_checkpoint_column(table: Path, version: int, column: str, as_text: bool) -> None:
    path = checkpoint_path(table, version)
    data = pq.read_table(path)
    values = data.column(column).to_pylist()
    if as_text:
        replacement = pa.array([None if v is None else json.dumps(v, default=str) for v in values], pa.string())
    else:
        replacement = pa.array([None if v is None else len(json.dumps(v, default=str)) for v in values], pa.int64())
    pq.write_table(data.set_column(data.column_names.index(column), column, replacement), path)


@pytest.mark.parametrize(
    ("column", "as_text"),
    [("add", True), ("add", False), ("remove", True), ("protocol", True), ("metaData", False), ("txn", True)],
    ids=["add-text", "add-int", "remove-text", "protocol-text", "metaData-int", "txn-text"],
)
def test_checkpoint_column_of_wrong_type_never_gives_a_wrong_state(
    table: Path, expected: Expected, column: str, as_text: bool
) -> None:
    """Checkpoint 6 holds a column of the wrong type. Commits 0..10 are all there, so the result must
    be the right state (after falling back) or a typed error, never a silently different state."""
    _rewrite_checkpoint_column(table, 6, column, as_text)
    try:
        snap = load(table)
    except DeltaError as exc:
        assert_names(exc, table)
    else:
        assert_state(snap, expected, LATEST)


@pytest.mark.parametrize("column", ["add", "protocol", "metaData"])
def test_checkpoint_column_of_wrong_type_without_fallback_is_typed(table: Path, column: str) -> None:
    delete_commits(table, range(6))
    checkpoint_path(table, 3).unlink()
    _rewrite_checkpoint_column(table, 6, column, True)
    with pytest.raises(DeltaError) as info:
        load(table)
    assert_names(info.value, table)


# -- sanity: the expected states are what delta-rs reads from the undamaged copy ----------------------
def test_undamaged_copy_matches_expectations(table: Path, expected: Expected) -> None:
    for v in range(LATEST + 1):
        assert_state(load(table, v), expected, v)
    hint = json.loads((log_dir(table) / "_last_checkpoint").read_text())
    assert hint["version"] == 6
    assert pq.ParquetFile(checkpoint_path(table, 3)).metadata.num_rows > 0
