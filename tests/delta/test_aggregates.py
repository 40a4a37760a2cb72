"""`FileDigest` answers every cutoff exactly as the row-by-row summaries do (pure Python)."""

from __future__ import annotations

import random

import pytest
from support.reference_state import summarize_file_rows, summarize_tombstone_rows

from airflow_delta_provider.delta.read.aggregates import (
    FileDigest,
    FileSummary,
    digest_file_rows,
)

COLUMNS = ("date", "region")


def _rows(seed: int, n: int = 400) -> list[dict]:
    rng = random.Random(seed)
    rows: list[dict] = []
    for i in range(n):
        values = {"date": rng.choice(["2024-01-01", "2024-01-02", None]), "region": rng.choice(["eu", "us"])}
        if rng.random() < 0.2:
            values.pop("region")  # a missing partition value groups as the null partition
        size = None if rng.random() < 0.1 else rng.randrange(0, 64 << 20)
        if rng.random() < 0.5:
            rows.append({"add": {"path": f"a{i}", "size": size, "partitionValues": values}})
        else:
            deleted = None if rng.random() < 0.1 else rng.choice([1_000, 2_000, 3_000, 3_000 + i])
            rows.append(
                {"remove": {"path": f"r{i}", "size": size, "partitionValues": values, "deletionTimestamp": deleted}}
            )
    return rows


CUTOFFS = [-1, 0, 999, 1_000, 2_500, 3_000, 3_200, 10_000]


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("columns", [(), ("date",), COLUMNS])
def test_digest_answers_every_cutoff_like_the_rows(seed: int, columns: tuple[str, ...]) -> None:
    rows = _rows(seed)
    digest = digest_file_rows(rows, 16 << 20, columns)
    assert digest.complete
    assert digest.files == summarize_file_rows(rows, 16 << 20)
    for cutoff in CUTOFFS:
        want = summarize_tombstone_rows(rows, cutoff, columns)
        assert digest.tombstone_summary(cutoff) == want
        assert digest.count_tombstones_after(cutoff) == sum(b.retained for b in want.partitions.values())


@pytest.mark.parametrize("seed", range(3))
def test_merged_digests_equal_the_whole(seed: int) -> None:
    rows = _rows(seed)
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(rows)), 3))
    parts = [rows[a:b] for a, b in zip([0, *cuts], [*cuts, len(rows)], strict=True)]
    merged = FileDigest(FileSummary(1 << 20), COLUMNS)
    for part in parts:
        merged = merged.merge(digest_file_rows(part, 1 << 20, COLUMNS))
    whole = digest_file_rows(rows, 1 << 20, COLUMNS)
    assert merged.files == whole.files
    for cutoff in CUTOFFS:
        assert merged.tombstone_summary(cutoff) == whole.tombstone_summary(cutoff)


def test_too_many_groups_make_the_digest_incomplete() -> None:
    rows = [{"remove": {"path": f"r{i}", "size": 1, "deletionTimestamp": i}} for i in range(10)]
    assert digest_file_rows(rows, 1, (), max_groups=10).complete
    small = digest_file_rows(rows, 1, (), max_groups=9)
    assert not small.complete and small.groups == {}
    with pytest.raises(ValueError):
        small.count_tombstones_after(0)
    with pytest.raises(ValueError):
        small.tombstone_summary(0)
    # incompleteness survives merging, in either order
    full = digest_file_rows(rows[:2], 1, (), max_groups=9)
    assert not full.merge(small).complete and not small.merge(full).complete
    with pytest.raises(ValueError):
        full.merge(digest_file_rows([], 1, ("x",)))


def test_reports_and_writers_share_one_partition_key_and_null_partition_name() -> None:
    """One `partition_key` (the protocol layer's, which also reads physical names) and one name for a
    null partition value, in reports, summaries, OPTIMIZE's output directories and the test log builder."""
    from airflow_delta_provider.delta.protocol.optimize import partition_key
    from airflow_delta_provider.delta.protocol.schema import HIVE_DEFAULT_PARTITION
    from airflow_delta_provider.delta.read import aggregates
    from airflow_delta_provider.delta.write.data_files import hive_partition_dir
    from airflow_delta_provider.testing import partition_path

    assert aggregates.partition_key is partition_key
    null = f"date={HIVE_DEFAULT_PARTITION}/region=eu"
    summary = aggregates.TombstoneSummary(cutoff_ms=0, partition_columns=COLUMNS)
    summary.add({"region": "eu"}, 1, 1)
    summary.add({"date": None, "region": "eu"}, 1, 1)
    assert list(summary.partitions) == [null]
    assert partition_key({"col-1": None, "col-2": "eu"}, COLUMNS, {"date": "col-1", "region": "col-2"}) == null
    assert partition_key(None, ()) == ""
    assert hive_partition_dir({"date": None, "region": "eu"}, COLUMNS) == null
    assert partition_path({"date": None, "region": "eu"}, COLUMNS) == null
