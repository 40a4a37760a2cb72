"""LogSegment decisions on literal listings (no I/O), as kernel-rs `log_segment/tests.rs`."""

from __future__ import annotations

import pytest

from airflow_delta_provider.delta.errors import (
    IncompleteCheckpointError,
    LogGapError,
    TableNotFoundError,
    TruncatedLogError,
    VersionNotFoundError,
)
from airflow_delta_provider.delta.protocol.filenames import FileInfo, LogFileKind, parse_log_path
from airflow_delta_provider.delta.protocol.log_segment import (
    build_log_segment,
    earliest_recreatable_version,
    latest_version_in,
)


def f(name: str, size: int = 10, mtime: int = 0) -> FileInfo:
    return FileInfo(f"/t/_delta_log/{name}", size, mtime)


def c(v: int) -> FileInfo:
    return f(f"{v:020d}.json")


def cp(v: int, size: int = 10) -> FileInfo:
    return f(f"{v:020d}.checkpoint.parquet", size)


def mp(v: int, part: int, n: int) -> FileInfo:
    return f(f"{v:020d}.checkpoint.{part:010d}.{n:010d}.parquet")


def uuid_cp(v: int, ext: str = "json") -> FileInfo:
    return f(f"{v:020d}.checkpoint.3a0d65cd-4056-49b8-937b-95f9e3ee90e5.{ext}")


@pytest.mark.parametrize(
    ("name", "kind", "version"),
    [
        ("00000000000000000000.json", LogFileKind.COMMIT, 0),
        ("00000000000000000010.checkpoint.parquet", LogFileKind.CHECKPOINT_CLASSIC, 10),
        ("00000000000000000010.checkpoint.0000000001.0000000002.parquet", LogFileKind.CHECKPOINT_MULTIPART, 10),
        ("00000000000000000010.checkpoint.0000000001.0000000001.parquet", LogFileKind.CHECKPOINT_CLASSIC, 10),
        ("00000000000000000002.checkpoint.6374b053-df23-479b-b2cf-c9c550132b49.json", LogFileKind.CHECKPOINT_UUID, 2),
        (
            "00000000000000000002.checkpoint.6374b053-df23-479b-b2cf-c9c550132b49.parquet",
            LogFileKind.CHECKPOINT_UUID,
            2,
        ),
        ("00000000000000000001.00000000000000000004.compacted.json", LogFileKind.COMPACTION, 1),
        ("00000000000000000004.crc", LogFileKind.CHECKSUM, 4),
    ],
)
def test_parse_log_names(name, kind, version):
    parsed = parse_log_path(f(name))
    assert parsed is not None
    assert (parsed.kind, parsed.version) == (kind, version)


@pytest.mark.parametrize(
    "name",
    [
        "123ajson",
        "a123.json",
        "0000000000000000000.json",  # 19 digits
        ".00000000000000000000.json.crc",
        "00000000000000000003.checkpoint.parquet.tmp123",
        "_last_checkpoint",
        ".DS_Store",
        "00000000000000000004.00000000000000000001.compacted.json",  # start >= end
        "00000000000000000010.checkpoint.0000000003.0000000002.parquet",  # part > parts
    ],
)
def test_non_log_names_are_ignored(name):
    assert parse_log_path(f(name)) is None


def test_commits_only():
    seg = build_log_segment("t", [c(0), c(1), c(2)])
    assert seg.version == 2 and seg.checkpoint is None
    assert [x.version for x in seg.commits] == [0, 1, 2]


def test_newest_checkpoint_and_following_commits():
    seg = build_log_segment("t", [c(v) for v in range(13)] + [cp(5), cp(10)])
    assert seg.checkpoint_version == 10
    assert [x.version for x in seg.commits] == [11, 12]


def test_time_travel_uses_checkpoint_at_or_below_target():
    listing = [c(v) for v in range(13)] + [cp(5), cp(10)]
    seg = build_log_segment("t", listing, 7)
    assert seg.checkpoint_version == 5 and [x.version for x in seg.commits] == [6, 7]
    seg = build_log_segment("t", listing, 10)
    assert seg.checkpoint_version == 10 and seg.commits == ()


def test_zero_byte_checkpoint_is_dropped_older_one_used():
    seg = build_log_segment("t", [c(v) for v in range(13)] + [cp(5), cp(10, size=0)])
    assert seg.checkpoint_version == 5
    assert [x.version for x in seg.commits] == list(range(6, 13))


def test_incomplete_multipart_checkpoint_is_ignored():
    seg = build_log_segment("t", [c(v) for v in range(4)] + [mp(2, 1, 3), mp(2, 3, 3), cp(1)])
    assert seg.checkpoint_version == 1


def test_complete_multipart_beats_classic_at_same_version_and_v2_beats_both():
    listing = [c(v) for v in range(4)] + [cp(2), mp(2, 1, 2), mp(2, 2, 2)]
    seg = build_log_segment("t", listing)
    assert seg.checkpoint is not None and seg.checkpoint.kind is LogFileKind.CHECKPOINT_MULTIPART
    assert seg.checkpoint.num_parts == 2
    seg = build_log_segment("t", [*listing, uuid_cp(2)])
    assert seg.checkpoint is not None and seg.checkpoint.kind is LogFileKind.CHECKPOINT_UUID


def test_only_torn_multipart_and_no_commits_is_incomplete():
    with pytest.raises(IncompleteCheckpointError):
        build_log_segment("t", [mp(2, 1, 2)])


def test_gap_after_checkpoint_is_fatal():
    with pytest.raises(LogGapError, match=r"\[11, 13\]") as err:
        build_log_segment("t", [c(v) for v in range(14) if v != 12] + [cp(10)])
    assert err.value.version == 12


def test_gap_before_checkpoint_is_harmless():
    seg = build_log_segment("t", [c(v) for v in range(14) if v != 7] + [cp(10)])
    assert seg.version == 13 and seg.checkpoint_version == 10


def test_first_commit_after_checkpoint_missing_is_truncated():
    with pytest.raises(TruncatedLogError) as err:
        build_log_segment("t", [cp(10), c(12), c(13)])
    assert err.value.version == 11


def test_log_starting_after_zero_without_checkpoint_is_truncated():
    with pytest.raises(TruncatedLogError):
        build_log_segment("t", [c(5), c(6)])


def test_checkpoint_without_any_commit_loads():  # policy: delta-rs/table-with-domain-metadata
    seg = build_log_segment("t", [cp(108)])
    assert seg.version == 108 and seg.commits == ()


def test_version_beyond_latest():
    with pytest.raises(VersionNotFoundError, match="non-existent version 9"):
        build_log_segment("t", [c(0), c(1)], 9)


def test_version_before_retained_log():
    listing = [cp(5), c(5), c(6), c(7)]
    with pytest.raises(VersionNotFoundError):
        build_log_segment("t", listing, 3)
    assert earliest_recreatable_version("t", listing) == 5


def test_empty_listing_is_not_a_table():
    with pytest.raises(TableNotFoundError):
        build_log_segment("t", [f(".DS_Store"), f("_last_checkpoint")])


def test_latest_version_in_listing():
    assert latest_version_in([c(0), c(1), cp(1), f("00000000000000000002.crc")]) == 1
    assert latest_version_in([cp(9999), c(13)]) == 9999
    assert latest_version_in([]) is None


def test_segment_extend_checks_contiguity():
    seg = build_log_segment("t", [c(0), c(1)])
    assert seg.extend([parse_log_path(c(2))]).version == 2  # type: ignore[list-item]
    with pytest.raises(LogGapError):
        seg.extend([parse_log_path(c(3))])  # type: ignore[list-item]
