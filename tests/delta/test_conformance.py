"""Conformance of the Delta log reader against the reference corpus (`shared/delta-tables`).

Sources of truth, in order:

1. Upstream `EXPECT` notes in `MANIFEST.md` (taken from the Delta, delta-rs, kernel and DAT test suites).
2. The deltalake 1.6.6 oracle (`ORACLE-deltalake-1.6.6.json`): latest version, protocol, features,
   partition columns and active paths per table root, per-version file lists for short logs. It is an
   oracle, not ground truth: where it and an `EXPECT` note differ, the note wins (`OVERRIDES`,
   `VERSION_OVERRIDES`, and `../notes/delta-protocol.md` section 14).

Every table root of the oracle and of MANIFEST.md is classified exactly once: loadable (compared with
the oracle or an override), refused with a typed error (`NEGATIVE`) or not a table (`SKIPPED`).
The corpus is read-only: tests that change mtimes or files work on a copy (`conftest.copy_table`).
Section numbers below follow the points of the conformance issue.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

import pyarrow.parquet as pq
import pytest
from conftest import CORPUS, copy_table

from airflow_delta_provider.delta import (
    AddCDCFile,
    AddFile,
    CommitInfo,
    DeltaError,
    DeltaLog,
    LogGapError,
    Metadata,
    MissingMetadataError,
    MissingProtocolError,
    Protocol,
    RemoveFile,
    SetTransaction,
    Snapshot,
    TableNotFoundError,
    TimestampOutOfRangeError,
    UnsupportedFeatureError,
    VersionNotFoundError,
    latest_version,
)

if not (CORPUS / "ORACLE-deltalake-1.6.6.json").is_file():
    pytest.skip(f"reference corpus not found at {CORPUS} (set DELTA_TABLES_DIR)", allow_module_level=True)

# ------------------------------------------------------------------------------------------------------
# Classification of every table root
# ------------------------------------------------------------------------------------------------------

#: MANIFEST roots that are not tables themselves: listed, never loaded.
SKIPPED: dict[str, str] = {
    "delta-golden/hive": "not a table: groups the Hive-connector tables delta-golden/hive/deltatbl-*, "
    "each of which is tested as its own root",
    "delta-golden/log-store-listFrom": "not a table: raw files '1','2','3' for LogStore.listFrom tests",
    "delta-golden/log-store-read": "not a table: raw files '0','1' for LogStore.read tests",
    "dat-2022/basic_append": "DAT case directory; its table root dat-2022/basic_append/delta is tested",
    "dat-2022/basic_partitioned": "DAT case directory; its table root dat-2022/basic_partitioned/delta is tested",
    "dat-2022/multi_partitioned": "DAT case directory; its table root dat-2022/multi_partitioned/delta is tested",
    "dat-2022/with_schema_change": "DAT case directory; its table root dat-2022/with_schema_change/delta is tested",
}

#: Tables a correct reader must refuse, with the typed error (upstream EXPECT notes; protocol notes 8, 13).
NEGATIVE: dict[str, type[DeltaError]] = {
    # Commit gap after the chosen checkpoint: "versions are not contiguous".
    "delta-golden/versions-not-contiguous": LogGapError,
    "kernel-rs-golden/versions-not-contiguous/delta": LogGapError,
    "delta-rs/data_err_logs/table_c": LogGapError,
    # Reader version 99 / reader version 5 with an unknown feature / catalog-owned tables.
    "delta-golden/deltalog-invalid-protocol-version": UnsupportedFeatureError,
    "kernel-rs-golden/deltalog-invalid-protocol-version/delta": UnsupportedFeatureError,
    "delta-rs/simple_table_features": UnsupportedFeatureError,
    "delta-rs/data_err_logs/table_d": UnsupportedFeatureError,
    "delta-rs/data_err_logs/table_e": UnsupportedFeatureError,
    "delta-rs/data_err_logs/table_f": UnsupportedFeatureError,
    "delta-rs/data_err_logs/table_h": UnsupportedFeatureError,
    "delta-rs/data_err_logs/table_i": UnsupportedFeatureError,
    "delta-kernel-java/catalog-owned-preview": UnsupportedFeatureError,
    # "No metadata found".
    "delta-golden/deltalog-state-reconstruction-from-checkpoint-missing-metadata": MissingMetadataError,
    "kernel-rs-golden/deltalog-state-reconstruction-from-checkpoint-missing-metadata/delta": MissingMetadataError,
    "delta-golden/deltalog-state-reconstruction-without-metadata": MissingMetadataError,
    "kernel-rs-golden/deltalog-state-reconstruction-without-metadata/delta": MissingMetadataError,
    "delta-golden/data-reader-absolute-paths-escaped-chars": MissingMetadataError,
    "kernel-rs-golden/data-reader-absolute-paths-escaped-chars/delta": MissingMetadataError,
    # "No protocol found".
    "delta-golden/deltalog-state-reconstruction-from-checkpoint-missing-protocol": MissingProtocolError,
    "kernel-rs-golden/deltalog-state-reconstruction-from-checkpoint-missing-protocol/delta": MissingProtocolError,
    "delta-golden/deltalog-state-reconstruction-without-protocol": MissingProtocolError,
    "kernel-rs-golden/deltalog-state-reconstruction-without-protocol/delta": MissingProtocolError,
    # Plain parquet directory, no _delta_log (the kernel-rs copy is not in MANIFEST; same EXPECT).
    "delta-golden/no-delta-log-folder": TableNotFoundError,
    "kernel-rs-golden/no-delta-log-folder/delta": TableNotFoundError,
}

#: Catalog-managed feature names: the refusal must name one of them.
CATALOG_FEATURES = {"catalogOwned", "catalogOwned-preview", "catalogManaged"}


@dataclass(frozen=True)
class Expected:
    """Expected state of a version; `paths=None` means "the oracle's active paths"."""

    version: int
    paths: tuple[str, ...] | None


_ONE_TO_TEN = tuple(str(i) for i in range(1, 11))

#: Latest-snapshot expectations where an upstream EXPECT note (or our documented policy) beats the oracle.
OVERRIDES: dict[str, Expected] = {
    # Spark canonicalizes absolute scheme-less paths before keying (DeltaLog.CanonicalPathFunction): the add
    # of '/some/...' and the remove of 'file:/some/...' / 'file:///some/...' cancel. EXPECT v1, 0 files.
    # delta-rs rejects these delta-golden copies (null schemaString).
    "delta-golden/canonicalized-paths-normal-a": Expected(1, ()),
    "delta-golden/canonicalized-paths-normal-b": Expected(1, ()),
    "delta-golden/canonicalized-paths-special-a": Expected(1, ()),
    "delta-golden/canonicalized-paths-special-b": Expected(1, ()),
    # Regenerated kernel-rs copies (with a schemaString): delta-rs keeps 1 file (known kernel bug; kernel-rs
    # skips these tables). Spark semantics, EXPECT v1, 0 files.
    "kernel-rs-golden/canonicalized-paths-normal-a/delta": Expected(1, ()),
    "kernel-rs-golden/canonicalized-paths-normal-b/delta": Expected(1, ()),
    "kernel-rs-golden/canonicalized-paths-special-a/delta": Expected(1, ()),
    "kernel-rs-golden/canonicalized-paths-special-b/delta": Expected(1, ()),
    # Metadata with a null schemaString: Spark tolerates it, delta-rs refuses the table. We load these;
    # version and files are read from the log: 11 manual commits adding '0'..'10', checkpoint @10.
    "delta-golden/corrupted-last-checkpoint": Expected(10, tuple(str(i) for i in range(11))),
    # Null schemaString; one commit with every commitInfo field and one add 'abc'.
    "delta-golden/deltalog-commit-info": Expected(0, ("abc",)),
    "kernel-rs-golden/deltalog-commit-info/delta": Expected(0, ("abc",)),
    # Null schemaString; 10 manual adds '1'..'10' + checkpoint @0.
    "delta-golden/update-deleted-directory": Expected(0, _ONE_TO_TEN),
    "kernel-rs-golden/update-deleted-directory/delta": Expected(0, _ONE_TO_TEN),
    # Only 00000000000000000108.checkpoint.parquet, no JSON at all. Spark / the Java kernel refuse it;
    # delta-rs loads v108. Our documented policy (log_segment.py rule 4): a complete checkpoint loads.
    "delta-rs/table-with-domain-metadata": Expected(108, None),
}

#: Per-version expectations where the oracle records an error or EXPECT differs: an `Expected`, or the
#: typed error `snapshot_at(version=v)` must raise (with (earliest, latest) for VersionNotFoundError).
VERSION_OVERRIDES: dict[tuple[str, int], Expected | tuple[type[DeltaError], tuple[int, int] | None]] = {
    # Log starts at 5 (checkpoint + 5.json): versions 0-4 are gone (delta-rs time_travel.rs,
    # lib.rs test_read_vacuumed_log); Spark VersionNotFoundException(v, earliest=5, latest=12).
    **{("delta-rs/checkpoints_vacuumed", v): (VersionNotFoundError, (5, 12)) for v in range(5)},
    # Log starts at 3 with a checkpoint: 0-2 are not recreatable.
    **{("delta-rs/checkpoint-cdf-table", v): (VersionNotFoundError, (3, 5)) for v in range(3)},
    # Log is 1.json, 2.json + checkpoint @2 (no 0.json): only version 2 is recreatable.
    **{("delta-rs/checkpoint_with_partitions", v): (VersionNotFoundError, (2, 2)) for v in range(2)},
    # 7.json is missing (covered by the checkpoint @10 for the latest): version 7 does not exist,
    # versions 8 and 9 would replay across the gap ("versions are not contiguous").
    ("delta-rs/data_err_logs/table_b", 7): (VersionNotFoundError, (0, 13)),
    ("delta-rs/data_err_logs/table_b", 8): (LogGapError, None),
    ("delta-rs/data_err_logs/table_b", 9): (LogGapError, None),
    # v0 metaData has a null schemaString (DLT REFRESH): Spark tolerates it, delta-rs refuses. 0 files.
    ("delta-rs/delta-live-table", 0): Expected(0, ()),
}

TRUNCATED = "...truncated"


def _load_oracle() -> dict[str, dict]:
    with open(CORPUS / "ORACLE-deltalake-1.6.6.json") as fh:
        return json.load(fh)["tables"]


def _manifest_roots() -> list[str]:
    text = (CORPUS / "MANIFEST.md").read_text()
    return re.findall(r"^\| `([^`]+)` \|", text, flags=re.MULTILINE)


ORACLE = _load_oracle()
MANIFEST_ROOTS = _manifest_roots()
ALL_ROOTS = sorted(set(ORACLE) | set(MANIFEST_ROOTS) | set(NEGATIVE) | set(OVERRIDES))
LOADABLE = [r for r in ALL_ROOTS if r not in NEGATIVE and r not in SKIPPED]
ORACLE_LOADABLE = [r for r in LOADABLE if "latest" in ORACLE.get(r, {})]
WITH_VERSIONS = [r for r in ORACLE_LOADABLE if ORACLE[r].get("versions")]


def _root_params(roots: list[str]) -> list:
    """Roots as pytest params (id = root); SKIPPED roots carry their skip reason."""
    return [
        pytest.param(r, id=r, marks=pytest.mark.skip(reason=SKIPPED[r])) if r in SKIPPED else pytest.param(r, id=r)
        for r in roots
    ]


def _log(root: str | Path, **kwargs) -> DeltaLog:
    path = root if isinstance(root, Path) else CORPUS / root
    return DeltaLog.for_table(str(path), **kwargs)


def _paths(snap: Snapshot) -> list[str]:
    return sorted(a.path for a in snap.all_files())


def assert_file_set(actual: list[str], expected: list[str], num_files: int, where: str) -> None:
    """Compare active paths (raw log strings) with an oracle list, which may end in '...truncated'."""
    if expected and expected[-1] == TRUNCATED:
        prefix = expected[:-1]
        assert len(actual) == num_files, f"{where}: {len(actual)} files, expected {num_files}"
        missing = sorted(set(prefix) - set(actual))
        assert not missing, f"{where}: oracle paths missing from the snapshot: {missing[:5]}"
    else:
        assert actual == sorted(expected), f"{where}: file set differs"
        assert len(actual) == num_files


def _features(value) -> list[str]:
    # delta-rs reports an empty feature list as None (e.g. readerFeatures: [] in
    # log-replay-latest-metadata-protocol); the library keeps what the log says. Same meaning.
    return sorted(value or ())


def _ms(iso: str) -> int:
    return int(dt.datetime.fromisoformat(iso).timestamp() * 1000)


def pin_mtimes(log_dir: Path, mtimes: dict[str, int]) -> None:
    """Set the mtime (ms) of files in `log_dir` of a *copied* table."""
    assert CORPUS not in log_dir.parents, "never touch the read-only corpus"
    for name, ms in mtimes.items():
        ns = ms * 1_000_000
        os.utime(log_dir / name, ns=(ns, ns))


# ------------------------------------------------------------------------------------------------------
# 0. The classification itself
# ------------------------------------------------------------------------------------------------------


def test_every_root_is_classified():
    for root in ALL_ROOTS:
        kinds = [root in NEGATIVE, root in SKIPPED, root in LOADABLE]
        assert sum(kinds) == 1, root
        if root not in SKIPPED:
            assert (CORPUS / root).is_dir(), f"{root} missing from the corpus"
    # Every root the oracle could not load is either a negative or an explicit override.
    for root, entry in ORACLE.items():
        if "error" in entry:
            assert root in NEGATIVE or root in OVERRIDES, f"oracle error for {root} is unclassified"
    # Every per-version oracle error has an explicit expectation.
    for root in WITH_VERSIONS:
        for v, entry in ORACLE[root]["versions"].items():
            if "error" in entry:
                assert (root, int(v)) in VERSION_OVERRIDES, f"oracle error for {root}@v{v} is unclassified"
    # MANIFEST roots missing from the oracle are handled explicitly.
    for root in set(MANIFEST_ROOTS) - set(ORACLE):
        assert root in SKIPPED or root in NEGATIVE or root in OVERRIDES, root


# ------------------------------------------------------------------------------------------------------
# 1. Latest version and active file set
# ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("root", _root_params([r for r in ALL_ROOTS if r not in NEGATIVE]))
def test_latest_snapshot(root):
    snap = _log(root).snapshot
    if root in OVERRIDES:
        exp = OVERRIDES[root]
        assert snap.version == exp.version
        if exp.paths is not None:
            assert _paths(snap) == sorted(exp.paths)
            assert snap.num_files == len(exp.paths)
            return
    latest = ORACLE[root]["latest"]
    assert snap.version == latest["version"]
    assert_file_set(_paths(snap), latest["paths"], latest["numFiles"], f"{root}@latest")
    assert snap.num_files == latest["numFiles"]


# ------------------------------------------------------------------------------------------------------
# 2. Protocol, features and partition columns
# ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("root", _root_params(ORACLE_LOADABLE))
def test_protocol_features_and_partition_columns(root):
    snap = _log(root).snapshot
    latest = ORACLE[root]["latest"]
    proto = snap.protocol
    assert (proto.min_reader_version, proto.min_writer_version) == (
        latest["minReaderVersion"],
        latest["minWriterVersion"],
    )
    assert _features(proto.reader_features) == _features(latest["readerFeatures"])
    assert _features(proto.writer_features) == _features(latest["writerFeatures"])
    assert list(snap.partition_columns) == latest["partitionColumns"]


# ------------------------------------------------------------------------------------------------------
# 3. Time travel by version
# ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("root", _root_params(WITH_VERSIONS))
def test_snapshot_at_every_oracle_version(root):
    log = _log(root)
    for key, entry in sorted(ORACLE[root]["versions"].items(), key=lambda kv: int(kv[0])):
        v = int(key)
        override = VERSION_OVERRIDES.get((root, v))
        if isinstance(override, tuple):
            error, bounds = override
            with pytest.raises(error) as info:
                log.snapshot_at(version=v)
            assert root in str(info.value), f"{root}@v{v}: the error must name the table"
            if bounds is not None:
                assert (info.value.earliest, info.value.latest) == bounds, f"{root}@v{v}"
            continue
        snap = log.snapshot_at(version=v)
        assert snap.version == v
        if isinstance(override, Expected):
            assert _paths(snap) == sorted(override.paths or ()), f"{root}@v{v}"
            continue
        assert_file_set(_paths(snap), entry["paths"], entry["numFiles"], f"{root}@v{v}")
        proto = snap.protocol
        assert (proto.min_reader_version, proto.min_writer_version) == (
            entry["minReaderVersion"],
            entry["minWriterVersion"],
        ), f"{root}@v{v}"
        assert list(snap.partition_columns) == entry["partitionColumns"], f"{root}@v{v}"


@pytest.mark.parametrize("root", _root_params(LOADABLE))
def test_version_beyond_latest_is_refused(root):
    log = _log(root)
    latest = log.snapshot.version
    with pytest.raises(VersionNotFoundError) as info:
        log.snapshot_at(version=latest + 1)
    assert info.value.latest == latest
    assert root in str(info.value)
    assert log.snapshot_at(version=latest).version == latest


# ------------------------------------------------------------------------------------------------------
# 5. Negative tables
# ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("root", _root_params(sorted(NEGATIVE)))
def test_negative_table_is_refused(root):
    expected = NEGATIVE[root]
    with pytest.raises(expected) as info:
        _log(root).update()
    err = info.value
    assert root in str(err), f"the error must name the table: {err}"
    assert err.table is not None
    if isinstance(err, UnsupportedFeatureError):
        assert err.feature
        if "catalog" in root or root.startswith("delta-rs/data_err_logs/"):
            assert err.feature in CATALOG_FEATURES


# ------------------------------------------------------------------------------------------------------
# 7. Cheap probe and update()
# ------------------------------------------------------------------------------------------------------


#: `latest_version()` probes `N.json` names forward from `_last_checkpoint` (cost independent of the
#: log length), relying on the protocol's contiguous versions. table_g breaks that on purpose: commits
#: 0..13, then a checkpoint and commit at 9999 under a stale hint at 10. The probe answers 13; the
#: snapshot (full listing) loads 9999. Documented in the README ("latest_version()").
PROBE_DIVERGES = {"delta-rs/data_err_logs/table_g": 13}


@pytest.mark.parametrize("root", _root_params(LOADABLE))
def test_latest_version_probe_matches_snapshot(root):
    log = _log(root)
    probed = log.latest_version()
    assert probed == PROBE_DIVERGES.get(root, log.snapshot.version)
    assert latest_version(str(CORPUS / root)) == probed


@pytest.mark.parametrize("root", _root_params(LOADABLE))
def test_update_twice_returns_same_snapshot(root):
    log = _log(root)
    first = log.update()
    assert log.update() is first
    assert log.snapshot is first


def test_simple_table_ignores_uncommitted_tmp_dir():
    root = "delta-rs/simple_table"
    assert (CORPUS / root / "_delta_log" / ".tmp" / "00000000000000000005.json").is_file()
    log = _log(root)
    snap = log.snapshot
    assert (snap.version, snap.num_files) == (4, 5)
    assert log.latest_version() == 4
    assert [v for v, _ in log.get_changes(0)] == [0, 1, 2, 3, 4]
    assert all(".tmp" not in f.path for f in log.list_log(0))
    with pytest.raises(VersionNotFoundError):
        log.snapshot_at(version=5)


def test_update_extends_incrementally_when_a_commit_lands(tmp_path):
    table = copy_table("delta-rs/simple_table", tmp_path)
    log = _log(table)
    before = log.update()
    assert before.version == 4
    # Publish the uncommitted .tmp/5.json as commit 5 (a plain add).
    shutil.move(table / "_delta_log" / ".tmp" / "00000000000000000005.json", table / "_delta_log")
    after = log.update()
    assert after is not before
    assert (after.version, after.num_files) == (5, 6)
    assert log.update() is after
    assert log.latest_version() == 5
    assert _paths(log.snapshot_at(version=4)) == _paths(before)


# ------------------------------------------------------------------------------------------------------
# 4. Table-specific upstream expectations
# ------------------------------------------------------------------------------------------------------

CHECKPOINT_ROOTS = ["delta-golden/checkpoint", "kernel-rs-golden/checkpoint/delta"]
#: deletionTimestamp of the removes of '1' (v1) and '14' (v14) in delta-golden/checkpoint.
FIRST_DELETION_MS = 1697495759382
LAST_DELETION_MS = 1697495786456
WEEK_MS = 7 * 24 * 3600 * 1000


@pytest.mark.parametrize("root", _root_params(CHECKPOINT_ROOTS))
def test_checkpoint_tombstones(root):
    # v_i adds file i and removes i-1; checkpoint @10. EXPECT v14, one file '15', 14 tombstones.
    snap = _log(root).snapshot
    assert snap.version == 14
    assert _paths(snap) == ["15"]
    tombstones = snap.tombstones(include_expired=True)
    assert sorted(t.path for t in tombstones) == sorted(str(i) for i in range(1, 15))
    assert all(isinstance(t, RemoveFile) for t in tombstones)
    stamps = sorted(t.deletion_timestamp for t in tombstones)
    assert (stamps[0], stamps[-1]) == (FIRST_DELETION_MS, LAST_DELETION_MS)


@pytest.mark.parametrize(
    ("now_ms", "expected"),
    [
        (FIRST_DELETION_MS + WEEK_MS - 1, 14),  # cutoff just below the oldest: all kept
        (FIRST_DELETION_MS + WEEK_MS, 13),  # kept only while deletionTimestamp > now - retention
        (LAST_DELETION_MS + WEEK_MS - 1, 1),
        (LAST_DELETION_MS + WEEK_MS, 0),
    ],
)
@pytest.mark.parametrize("root", _root_params(CHECKPOINT_ROOTS))
def test_checkpoint_tombstone_retention_with_injected_clock(root, now_ms, expected):
    snap = DeltaLog.for_table(str(CORPUS / root), clock=lambda: now_ms).snapshot
    assert snap.min_file_retention_timestamp == now_ms - WEEK_MS  # default: interval 1 week
    assert len(snap.tombstones()) == expected
    assert snap.num_tombstones() == expected
    assert len(snap.tombstones(include_expired=True)) == 14
    # An explicit `now_ms` / `retention_hours` beats the clock.
    assert len(snap.tombstones(now_ms=FIRST_DELETION_MS + WEEK_MS - 1)) == 14
    assert len(snap.tombstones(retention_hours=0, now_ms=LAST_DELETION_MS - 1)) == 1
    assert snap.num_tombstones(retention_hours=0, now_ms=LAST_DELETION_MS) == 0


@pytest.mark.parametrize(
    "root",
    _root_params(
        [
            "delta-golden/delete-re-add-same-file-different-transactions",
            "kernel-rs-golden/delete-re-add-same-file-different-transactions/delta",
        ]
    ),
)
def test_delete_then_re_add_same_file(root):
    # add foo; remove foo; re-add foo (modTime 1700000000000); add bar. EXPECT files {foo, bar}.
    snap = _log(root).snapshot
    assert snap.version == 3
    files = {a.path: a for a in snap.all_files()}
    assert set(files) == {"foo", "bar"}
    assert files["foo"].modification_time == 1700000000000
    assert snap.tombstones(include_expired=True) == []  # the re-add clears the tombstone


@pytest.mark.parametrize(
    "root", _root_params(["delta-golden/log-replay-dv-key-cases", "kernel-rs-golden/log-replay-dv-key-cases/delta"])
)
def test_dv_key_cases(root):
    # Each DELETE removes (path, dv) and adds (path, dv'): EXPECT 1 file, DV cardinality 3.
    files = list(_log(root).snapshot.all_files())
    assert len(files) == 1
    assert files[0].deletion_vector is not None
    assert files[0].deletion_vector.cardinality == 3


@pytest.mark.parametrize(
    "root",
    _root_params(
        ["delta-golden/log-replay-special-characters-b", "kernel-rs-golden/log-replay-special-characters-b/delta"]
    ),
)
def test_special_characters_path_decodes_once(root):
    files = list(_log(root).snapshot.all_files())
    assert [f.path for f in files] == ["special%20p@%23h"]  # raw log string
    assert unquote(files[0].path) == "special p@#h"


@pytest.mark.parametrize(
    "root", _root_params(["delta-golden/data-reader-escaped-chars", "kernel-rs-golden/data-reader-escaped-chars/delta"])
)
def test_escaped_partition_values_come_from_the_log(root):
    files = sorted(_log(root).snapshot.all_files(), key=lambda a: a.partition_values["_2"])
    assert [f.partition_values["_2"] for f in files] == ["bar+%21", "bar+%22", "bar+%23"]
    # Decoded once, the path names the directory Spark wrote: '_2=bar+%2521/...'.
    assert [unquote(f.path).split("/")[0] for f in files] == ["_2=bar+%2521", "_2=bar+%2522", "_2=bar+%2523"]


GET_CHANGES_ROOTS = ["delta-golden/deltalog-getChanges", "kernel-rs-golden/deltalog-getChanges/delta"]


@pytest.mark.parametrize("root", _root_params(GET_CHANGES_ROOTS))
def test_get_changes(root):
    # EXPECT: v0 metaData+add; v1 cdc(partition_foo)+remove(fake/path/1); v2 protocol(1,2)+txn(fakeAppId, 3).
    changes = list(_log(root).get_changes(0))
    assert [v for v, _ in changes] == [0, 1, 2]
    by_version = {v: [a for a in actions if not isinstance(a, CommitInfo)] for v, actions in changes}
    assert all(any(isinstance(a, CommitInfo) for a in actions) for _, actions in changes)

    v0 = by_version[0]
    assert [type(a) for a in v0] == [Protocol, Metadata, AddFile]
    assert v0[2].path == "fake/path/1"

    v1 = by_version[1]
    assert [type(a) for a in v1] == [AddCDCFile, RemoveFile]
    assert v1[0].path == "fake/path/2"
    assert dict(v1[0].partition_values) == {"partition_foo": "partition_bar"}
    assert v1[0].data_change is False
    assert (v1[1].path, v1[1].deletion_timestamp) == ("fake/path/1", 100)

    v2 = by_version[2]
    assert v2 == [Protocol(1, 2), SetTransaction("fakeAppId", 3, 200)]

    assert [v for v, _ in _log(root).get_changes(1)] == [1, 2]
    assert list(_log(root).get_changes(3)) == []  # a start past the end yields nothing


@pytest.mark.parametrize("root", _root_params(GET_CHANGES_ROOTS))
def test_set_transactions(root):
    snap = _log(root).snapshot
    assert snap.version == 2
    assert snap.transaction_version("fakeAppId") == 3
    assert snap.transaction_version("unknown") is None
    assert snap.set_transactions["fakeAppId"].last_updated == 200
    assert snap.num_files == 0  # the only add was removed; cdc files are never active


@pytest.mark.parametrize(
    "root",
    _root_params(
        [
            "delta-golden/log-replay-latest-metadata-protocol",
            "kernel-rs-golden/log-replay-latest-metadata-protocol/delta",
        ]
    ),
)
def test_latest_metadata_and_protocol_win(root):
    snap = _log(root).snapshot
    assert set(snap.schema.names) == {"col1", "col2"}
    assert (snap.protocol.min_reader_version, snap.protocol.min_writer_version) == (3, 7)


@pytest.mark.parametrize(
    "root",
    _root_params(["delta-golden/time-travel-schema-changes-b", "kernel-rs-golden/time-travel-schema-changes-b/delta"]),
)
def test_time_travel_keeps_old_schema(root):
    log = _log(root)
    assert log.snapshot_at(version=0).schema.names == ["id"]
    assert log.snapshot.schema.names == ["id", "part"]


@pytest.mark.parametrize(
    "root",
    _root_params(
        ["delta-golden/time-travel-partition-changes-b", "kernel-rs-golden/time-travel-partition-changes-b/delta"]
    ),
)
def test_time_travel_keeps_old_partitioning(root):
    log = _log(root)
    assert log.snapshot_at(version=0).partition_columns == ("part5",)
    assert log.snapshot.partition_columns == ("part2",)


@pytest.mark.parametrize(
    "root", _root_params(["delta-golden/snapshot-vacuumed", "kernel-rs-golden/snapshot-vacuumed/delta"])
)
def test_vacuum_adds_no_commit(root):
    # VACUUM 0h after the repartition: still v5, and the data files on disk are exactly the active ones.
    snap = _log(root).snapshot
    assert snap.version == 5
    table = CORPUS / root
    on_disk = {
        p.relative_to(table).as_posix()
        for p in table.rglob("*.parquet")
        if "_delta_log" not in p.parts and not p.name.startswith(".")
    }
    assert {unquote(a.path) for a in snap.all_files()} == on_disk


def test_checkpoints_vacuumed_versions_below_earliest():
    root = "delta-rs/checkpoints_vacuumed"
    log = _log(root)
    assert log.snapshot.version == 12
    for v in range(5):
        with pytest.raises(VersionNotFoundError) as info:
            log.snapshot_at(version=v)
        assert (info.value.earliest, info.value.latest) == (5, 12), v
    assert log.snapshot_at(version=5).version == 5
    with pytest.raises(VersionNotFoundError) as info:
        log.snapshot_at(version=13)
    assert info.value.latest == 12


def test_gap_before_checkpoint_is_harmless():
    # data_err_logs/table_b: 7.json missing, checkpoint @10 -> EXPECT load OK v13 (exotic_tables.rs).
    log = _log("delta-rs/data_err_logs/table_b")
    snap = log.snapshot
    assert (snap.version, snap.num_files) == (13, 130)
    assert snap.log_segment.checkpoint_version == 10
    assert log.snapshot_at(version=6).version == 6
    assert log.snapshot_at(version=10).version == 10


def test_checkpoint_only_table_loads_by_policy():
    # Documented policy: a lone complete checkpoint (v108, no JSON) loads, like delta-rs.
    snap = _log("delta-rs/table-with-domain-metadata").snapshot
    assert snap.version == 108
    assert snap.log_segment.commits == ()
    assert snap.log_segment.checkpoint_version == 108
    assert {"delta.clustering", "delta.rowTracking"} <= set(snap.domain_metadata)


def _dat_expectations() -> list:
    params = []
    for meta in sorted((CORPUS / "dat-2022").glob("*/expected/*/table_version_metadata.json")):
        case, label = meta.parents[2].name, meta.parent.name
        params.append(pytest.param(case, label, id=f"dat-2022/{case}/delta@{label}"))
    return params


@pytest.mark.parametrize(("case", "label"), _dat_expectations())
def test_dat_expected_version_metadata(case, label):
    expected_dir = CORPUS / "dat-2022" / case / "expected" / label
    meta = json.loads((expected_dir / "table_version_metadata.json").read_text())
    log = _log(f"dat-2022/{case}/delta")
    snap = log.snapshot if label == "latest" else log.snapshot_at(version=int(label.removeprefix("v")))
    assert snap.version == meta["version"]
    assert snap.protocol.min_reader_version == meta["min_reader_version"]
    assert snap.protocol.min_writer_version == meta["min_writer_version"]
    assert snap.configuration == meta["properties"]
    # Every add has stats: the active files hold exactly the expected rows.
    rows = pq.read_metadata(expected_dir / "table_content.parquet").num_rows
    assert sum(a.parsed_stats()["numRecords"] for a in snap.all_files()) == rows


# ------------------------------------------------------------------------------------------------------
# 6. Timestamp time travel (on copies with pinned mtimes)
# ------------------------------------------------------------------------------------------------------

START_MS = 1540415658000  # 2018-10-24T21:14:18Z, the intended mtime of commit 0
MIN20 = 20 * 60 * 1000


@pytest.mark.parametrize(
    "root",
    _root_params(
        [
            "delta-golden/time-travel-start-start20-start40",
            "kernel-rs-golden/time-travel-start-start20-start40/delta",
        ]
    ),
)
def test_timestamp_travel_start_start20_start40(root, tmp_path):
    table = copy_table(root, tmp_path)
    commits = {0: START_MS, 1: START_MS + MIN20, 2: START_MS + 2 * MIN20}
    pin_mtimes(table / "_delta_log", {f"{v:020d}.json": ms for v, ms in commits.items()})
    log = _log(table)

    for ts, version in [
        (START_MS, 0),
        (START_MS + 1, 0),
        (START_MS + MIN20 - 1, 0),
        (START_MS + MIN20, 1),
        (START_MS + 2 * MIN20 - 1, 1),
        (START_MS + 2 * MIN20, 2),
    ]:
        assert log.snapshot_at(timestamp=ts).version == version, ts
    # Other timestamp forms: ISO-8601 text and aware datetimes.
    assert log.snapshot_at(timestamp="2018-10-24T21:34:18Z").version == 1
    assert log.snapshot_at(timestamp=dt.datetime(2018, 10, 24, 21, 14, 18, tzinfo=dt.UTC)).version == 0

    with pytest.raises(TimestampOutOfRangeError, match="before the earliest"):
        log.snapshot_at(timestamp=START_MS - 1)
    with pytest.raises(TimestampOutOfRangeError, match="after the latest"):
        log.snapshot_at(timestamp=START_MS + 2 * MIN20 + 1)
    assert log.snapshot_at(timestamp=START_MS + 2 * MIN20 + 1, can_return_last_commit=True).version == 2

    assert log.commit_timestamps() == sorted(commits.items())
    assert log.snapshot.timestamp == commits[2]
    for v, ms in commits.items():
        assert log.snapshot_at(version=v).timestamp == ms


#: delta-rs crates/core/tests/time_travel.rs `time_travel_by_ds` (incl. the uncommitted .tmp/5.json).
SIMPLE_TABLE_MTIMES = {
    "00000000000000000000.json": "2020-05-01T22:47:31-07:00",
    "00000000000000000001.json": "2020-05-02T22:47:31-07:00",
    "00000000000000000002.json": "2020-05-03T22:47:31-07:00",
    "00000000000000000003.json": "2020-05-04T22:47:31-07:00",
    "00000000000000000004.json": "2020-05-05T22:47:31-07:00",
    ".tmp/00000000000000000005.json": "2020-05-06T22:47:31-07:00",
}


def test_timestamp_travel_simple_table_pinned_mtimes(tmp_path):
    table = copy_table("delta-rs/simple_table", tmp_path)
    pin_mtimes(table / "_delta_log", {name: _ms(iso) for name, iso in SIMPLE_TABLE_MTIMES.items()})
    log = _log(table)
    for ts, version in [
        ("2020-05-01T22:47:31-07:00", 0),
        ("2020-05-02T22:47:31-07:00", 1),
        ("2020-05-02T23:47:31-07:00", 1),
        ("2020-05-03T22:47:31-07:00", 2),
        ("2020-05-04T22:47:31-07:00", 3),
        ("2020-05-05T21:47:31-07:00", 3),
        ("2020-05-05T22:47:31-07:00", 4),
    ]:
        assert log.snapshot_at(timestamp=ts).version == version, ts
        assert log.snapshot_at(timestamp=_ms(ts)).version == version, ts
    # delta-rs clamps both ends (v0 / v4); Spark semantics refuse them.
    with pytest.raises(TimestampOutOfRangeError, match="before the earliest"):
        log.snapshot_at(timestamp="2020-05-01T00:47:31-07:00")
    with pytest.raises(TimestampOutOfRangeError, match="after the latest"):
        log.snapshot_at(timestamp="2020-05-25T22:47:31-07:00")
    # The uncommitted .tmp/5.json (mtime 2020-05-06) is not a commit.
    assert log.snapshot_at(timestamp="2020-05-25T22:47:31-07:00", can_return_last_commit=True).version == 4
    assert log.snapshot_at(timestamp="2020-05-06T23:00:00-07:00", can_return_last_commit=True).version == 4
    assert log.snapshot.timestamp == _ms("2020-05-05T22:47:31-07:00")


def test_timestamp_travel_equal_mtimes_are_monotonized(tmp_path):
    table = copy_table("delta-rs/simple_table", tmp_path)
    same = _ms("2020-05-01T22:47:31-07:00")
    pin_mtimes(table / "_delta_log", dict.fromkeys(SIMPLE_TABLE_MTIMES, same))
    log = _log(table)
    # Equal commit times become strictly increasing: commit i is at same + i ms.
    for v in range(5):
        assert log.snapshot_at(timestamp=same + v).version == v
    with pytest.raises(TimestampOutOfRangeError, match="before the earliest"):
        log.snapshot_at(timestamp=same - 1)
    with pytest.raises(TimestampOutOfRangeError, match="after the latest"):
        log.snapshot_at(timestamp=same + 5)
    assert log.snapshot_at(timestamp=same + 5, can_return_last_commit=True).version == 4


def test_timestamp_travel_checkpoints_vacuumed(tmp_path):
    # delta-rs time_travel.rs `time_travel_by_ds_checkpoint_vacuumed`; the log starts at 5.
    table = copy_table("delta-rs/checkpoints_vacuumed", tmp_path)
    mtimes = {
        "00000000000000000005.checkpoint.parquet": "2020-05-01T22:47:31-07:00",
        "00000000000000000005.json": "2020-05-02T22:47:31-07:00",
        "00000000000000000006.json": "2020-05-03T22:47:31-07:00",
        "00000000000000000007.json": "2020-05-04T22:47:31-07:00",
        "00000000000000000008.json": "2020-05-05T22:47:31-07:00",
        "00000000000000000009.json": "2020-05-06T22:47:31-07:00",
        "00000000000000000010.checkpoint.parquet": "2020-05-06T22:47:31-07:00",
        "00000000000000000010.json": "2020-05-08T22:47:31-07:00",
        "00000000000000000011.json": "2020-05-09T22:47:31-07:00",
        "00000000000000000012.json": "2020-05-10T22:47:31-07:00",
    }
    pin_mtimes(table / "_delta_log", {name: _ms(iso) for name, iso in mtimes.items()})
    log = _log(table)
    assert log.snapshot_at(timestamp="2020-05-09T00:47:31-07:00").version == 10
    assert log.snapshot_at(timestamp="2020-05-02T22:47:31-07:00").version == 5
    # Before the earliest retained commit (5.json): delta-rs returns v5, Spark semantics refuse.
    with pytest.raises(TimestampOutOfRangeError, match="before the earliest"):
        log.snapshot_at(timestamp="2020-05-02T00:47:31-07:00")
    assert log.latest_version() == 12
