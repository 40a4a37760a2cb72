"""Discovering a lake's tables: `_delta_log` folders to a bounded depth, never inside a table, explicit lists
merged, listings counted, and a prefix that cannot be listed reported without stopping the others."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from airflow_delta_provider.delta.errors import InvalidArgumentError
from airflow_delta_provider.delta.lake import discover


def _table(path: Path, partitioned: bool = False) -> str:
    data = pa.table({"p": ["a", "b"], "x": [1, 2]})
    write_deltalake(str(path), data, partition_by=["p"] if partitioned else None)
    return "file://" + str(path)


@pytest.fixture
def lake(tmp_path):
    root = tmp_path / "lake"
    tables = [
        _table(root / "top"),
        _table(root / "raw" / "events", partitioned=True),
        _table(root / "a" / "b" / "c" / "d"),  # four folders below the prefix
    ]
    (root / "a" / "b" / "c" / "x" / "y" / "deep").mkdir(parents=True)
    _table(root / "a" / "b" / "c" / "x" / "y" / "deep" / "t")  # seven below: beyond the default depth
    # a `_delta_log` inside a table's partition folder is data, not a table
    (root / "raw" / "events" / "p=a" / "_delta_log").mkdir()
    (root / "_hidden" / "t" / "_delta_log").mkdir(parents=True)
    (root / "empty").mkdir()
    return root, sorted(tables)


def test_finds_tables_to_the_depth_and_not_inside_tables(lake):
    root, tables = lake
    found = discover([str(root)])
    assert found.tables == tables and found.errors == []
    assert found.truncated == [str(root / "a" / "b" / "c" / "x")]
    # one listing per folder walked: lake, top, raw, a, empty, raw/events, a/b, a/b/c, a/b/c/d, a/b/c/x
    assert found.requests == 10
    deeper = discover([str(root)], max_depth=7)
    assert deeper.tables == sorted([*tables, "file://" + str(root / "a/b/c/x/y/deep/t")])
    assert deeper.truncated == []


def test_a_prefix_may_be_a_table_and_explicit_tables_merge(lake):
    root, tables = lake
    found = discover([str(root / "top"), str(root / "empty")], tables=[str(root / "raw/events/"), *tables[:2]])
    assert found.tables == tables  # a/b/c/d given explicitly, raw/events twice (once with a trailing slash)
    assert discover([], tables=["/x/y/"]).tables == ["file:///x/y"]


def test_an_unlistable_prefix_is_reported_and_the_others_still_found(lake):
    root, tables = lake
    found = discover(["nosuchscheme://bucket/lake", str(root)])
    assert found.tables == tables
    assert [e["prefix"] for e in found.errors] == ["nosuchscheme://bucket/lake"]
    assert found.errors[0]["error_class"] and found.errors[0]["message"]


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [({"prefixes": "/one/string"}, "prefixes"), ({"max_depth": -1}, "max_depth"), ({"concurrency": 0}, "concurrency")],
)
def test_bad_arguments(kwargs, argument):
    with pytest.raises(InvalidArgumentError) as info:
        discover(**{"prefixes": [], **kwargs})
    assert info.value.argument == argument
