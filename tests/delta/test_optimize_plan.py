"""OPTIMIZE's pure plan: candidates, bins per partition, batches, metrics (protocol.optimize)."""

from __future__ import annotations

import json

import pytest

from airflow_delta_provider.delta.errors import InvalidArgumentError
from airflow_delta_provider.delta.protocol.actions import AddFile, DeletionVectorDescriptor
from airflow_delta_provider.delta.protocol.optimize import (
    DEFAULT_TARGET_SIZE,
    Bin,
    commit_batches,
    is_candidate,
    operation_metrics,
    operation_parameters,
    pack,
    parse_size,
    partition_key,
    plan_optimize,
    target_file_size,
)

MiB = 1024 * 1024


def add(path: str, size: int, part: str | None = None, *, records: int | None = None, dv: int | None = None) -> AddFile:
    stats = None if records is None else json.dumps({"numRecords": records})
    vector = None
    if dv is not None:
        vector = DeletionVectorDescriptor("u", "ab^-aqEH.-t@S}K{vb[*k^", 40, dv, offset=1)
    return AddFile(path, {"p": part}, size, 0, True, stats, None, vector)


def plan(files: list[AddFile], **kw: object) -> object:
    kw.setdefault("target_size", 100)
    return plan_optimize(files, ["p"], table="t", version=3, **kw)  # type: ignore[arg-type]


def test_bins_per_partition_sorted_by_size_and_bounded_by_target() -> None:
    files = [add(f"a{i}", s, "a") for i, s in enumerate([60, 10, 30, 50, 20])] + [add("b0", 10, "b")]
    p = plan(files)
    # partition b has one candidate (< min_num_files): skipped; a: sorted 10,20,30 | 50 | 60 -> single-file bins dropped
    assert [[f.size for f in b.files] for b in p.bins] == [[10, 20, 30]]
    assert p.bins[0].partition == "p=a"
    assert p.partitions() == {"p=a": {"files": 3, "bytes": 60, "expected_output_files": 1}}
    assert p.num_files == 3 and p.num_bytes == 60


def test_files_at_or_over_target_are_left_alone() -> None:
    p = plan([add("a", 100, "x"), add("b", 100, "x"), add("c", 99, "x"), add("d", 1, "x")])
    assert [sorted(f.path for f in b.files) for b in p.bins] == [["c", "d"]]


def test_min_num_files() -> None:
    files = [add(f"f{i}", 10, "x") for i in range(3)]
    assert plan(files, min_num_files=4).bins == []
    assert len(plan(files, min_num_files=3).bins) == 1
    with pytest.raises(InvalidArgumentError, match="min_num_files"):
        plan(files, min_num_files=0)


def test_large_file_with_many_deleted_rows_is_a_candidate() -> None:
    # Spark filterCandidateFileList: small, or over maxDeletedRowsRatio, or a DV without numRecords
    assert is_candidate(add("big", 500, "x", records=100, dv=10), 100, 0.05)
    assert is_candidate(add("unknown", 500, "x", dv=1), 100, 0.05)
    assert not is_candidate(add("few", 500, "x", records=100, dv=1), 100, 0.05)
    assert not is_candidate(add("plain", 500, "x", records=100), 100, 0.05)
    # a file at the target size fills a bin alone: Spark drops that bin (delta-io/delta #5781), we rewrite it
    bins = plan([add("big", 500, "x", records=100, dv=10), add("small", 10, "x")]).bins
    assert [[f.path for f in b.files] for b in bins] == [["big"]]


def test_small_file_ratio_threshold_skips_healthy_partitions() -> None:
    files = [add("a1", 10, "a"), add("a2", 10, "a"), add("a3", 90, "a"), add("a4", 95, "a")]
    files += [add("b1", 10, "b"), add("b2", 10, "b")]
    p = plan(files, min_small_file_ratio=0.75, small_file_bytes=50)
    assert {b.partition for b in p.bins} == {"p=b"}
    assert p.skipped_partitions == {"p=a": 0.5}
    with pytest.raises(InvalidArgumentError):
        plan(files, min_small_file_ratio=1.5)


def test_null_partition_and_unpartitioned_keys() -> None:
    assert partition_key({"a": None, "b": "x"}, ["a", "b"]) == "a=__HIVE_DEFAULT_PARTITION__/b=x"
    assert partition_key({}, []) == ""


def test_plan_is_stable_and_round_trips() -> None:
    files = [add(f"f{i}", 10 + i % 3, "x") for i in range(9)]
    a, b = plan(files), plan(list(reversed(files)))
    assert [x.to_dict() for x in a.bins] == [x.to_dict() for x in b.bins]
    assert [Bin.from_dict(x.to_dict()) for x in a.bins] == a.bins
    assert json.loads(json.dumps(a.summary()))["num_files"] == a.num_files


def test_pack_and_batches() -> None:
    files = [add(f"f{i}", 40, "x") for i in range(5)]
    assert [len(b) for b in pack(files, 100)] == [2, 2, 1]
    bins = [Bin("x", {}, tuple(files[i : i + 2])) for i in range(0, 4, 2)]
    assert commit_batches(bins, None) == [bins]
    assert commit_batches(bins, 80) == [[bins[0]], [bins[1]]]
    assert commit_batches(bins, 1) == [[bins[0]], [bins[1]]]  # a bin larger than the bound is its own batch
    assert commit_batches([], None) == []


def test_target_size_from_table_property() -> None:
    assert target_file_size({}) == DEFAULT_TARGET_SIZE
    assert target_file_size({"delta.targetFileSize": "134217728"}) == 128 * MiB
    assert target_file_size({"delta.targetFileSize": "64mb"}) == 64 * MiB
    assert target_file_size({"delta.targetFileSize": "64mb"}, 5) == 5
    assert parse_size("1g") == 1024 * MiB
    for bad in ("lots", "-1", "0"):
        with pytest.raises(InvalidArgumentError):
            target_file_size({"delta.targetFileSize": bad})
    with pytest.raises(InvalidArgumentError):
        target_file_size({}, 0)


def test_commit_parameters_and_metrics_as_spark_names_them() -> None:
    assert operation_parameters(["p = 'a'"]) == {
        "predicate": "[\"p = 'a'\"]",
        "zOrderBy": "[]",
        "clusterBy": "[]",
        "auto": False,
    }
    removed = [add("a", 10, "x", dv=2), add("b", 20, "x")]
    added = [AddFile(f"n{i}", {}, s, 0, False) for i, s in enumerate([5, 1, 9, 3])]
    m = operation_metrics(removed, added)
    assert (m["numRemovedFiles"], m["numAddedFiles"], m["numRemovedBytes"], m["numAddedBytes"]) == (2, 4, 30, 18)
    assert (m["minFileSize"], m["maxFileSize"]) == (1, 9)
    assert m["p25FileSize"] <= m["p50FileSize"] <= m["p75FileSize"]
    assert (m["numDeletionVectorsRemoved"], m["numDeletionVectorRowsRemoved"]) == (1, 2)
    assert "minFileSize" not in operation_metrics(removed, [])


def test_column_mapped_partition_values_are_keyed_by_physical_name() -> None:
    # partitionValues use physical names under column mapping: grouping must never merge two partitions
    files = [AddFile(f"f{i}", {"col-5f1a": v}, 10, 0) for i, v in enumerate(["1", "1", "2", "2", None, None])]
    p = plan_optimize(files, ["part"], table="t", version=0, target_size=100, physical_names={"part": "col-5f1a"})
    assert [b.partition for b in p.bins] == ["part=1", "part=2", "part=__HIVE_DEFAULT_PARTITION__"]
    assert all(len({f.partition_values["col-5f1a"] for f in b.files}) == 1 for b in p.bins)


def test_a_budget_takes_the_bins_removing_most_files_per_byte_first() -> None:
    files = [add(f"a{i}", 10, "a") for i in range(6)]  # one bin of 6 files, 60 bytes: 5 files removed
    files += [add(f"b{i}", 40, "b") for i in range(2)]  # one bin of 2 files, 80 bytes: 1 removed
    files += [add(f"c{i}", 5, "c") for i in range(3)]  # one bin of 3 files, 15 bytes: 2 removed
    full = plan(files)
    assert [b.partition for b in full.bins] == ["p=a", "p=b", "p=c"] and not full.over_budget
    by_files = plan(files, max_files=9)  # c (2/15 per byte) first, then a (5/60); b would be the 11th file
    assert [b.partition for b in by_files.bins] == ["p=c", "p=a"]
    assert [b.partition for b in by_files.over_budget] == ["p=b"]
    summary = by_files.summary()
    assert (summary["num_files_over_budget"], summary["bytes_over_budget"]) == (2, 80)
    assert summary["partitions_over_budget"] == ["p=b"] and summary["num_files"] == 9
    by_bytes = plan(files, max_bytes=90)  # c (15), a (75): b no longer fits; a later smaller bin still would
    assert [b.partition for b in by_bytes.bins] == ["p=c", "p=a"]
    first_always = plan(files, max_bytes=1)
    assert [b.partition for b in first_always.bins] == ["p=c"] and len(first_always.over_budget) == 2
    for bad in (0, -1, True, "3"):
        with pytest.raises(InvalidArgumentError, match="max_files"):
            plan(files, max_files=bad)


def test_a_null_partition_beside_a_literal_hive_null_string_is_planned_as_two_partitions() -> None:
    """Null and the literal string `__HIVE_DEFAULT_PARTITION__` name the same directory key but are two
    partitions (exact `partitionValues`): each is binned on its own, in a stable order (this raised a bare
    TypeError comparing None with a string)."""
    from airflow_delta_provider.delta.protocol.purge import plan_purge
    from airflow_delta_provider.delta.protocol.zorder import ZOrderColumn, plan_zorder

    files = [add("n1", 10, None, records=10, dv=5), add("n2", 10, None, records=10, dv=5)]
    files += [add("s1", 10, "__HIVE_DEFAULT_PARTITION__", records=10, dv=5)]
    files += [add("s2", 10, "__HIVE_DEFAULT_PARTITION__", records=10, dv=5)]
    optimized = plan(files)
    purged = plan_purge(files, ["p"], table="t", version=3, target_size=100)
    zordered = plan_zorder(files, ["p"], [ZOrderColumn(("x",), ("x",), "long")], table="t", version=3, target_size=100)
    for p in (optimized, purged, zordered):
        assert [(b.partition_values["p"], [f.path for f in b.files]) for b in p.bins] == [  # type: ignore[attr-defined]
            (None, ["n1", "n2"]),
            ("__HIVE_DEFAULT_PARTITION__", ["s1", "s2"]),
        ]
