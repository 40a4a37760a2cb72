"""InMemoryLogReplay rules (PROTOCOL.md "Action Reconciliation"; seeds: InMemoryLogReplay)."""

from __future__ import annotations

import pytest
from support.reference_state import state_from_replay

from airflow_delta_provider.delta.protocol.actions import (
    AddFile,
    CommitInfo,
    DeletionVectorDescriptor,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    SetTransaction,
    canonical_path,
)
from airflow_delta_provider.delta.protocol.replay import InMemoryLogReplay


def add(path: str, dv: DeletionVectorDescriptor | None = None, mtime: int = 1) -> AddFile:
    return AddFile(path=path, partition_values={}, size=10, modification_time=mtime, deletion_vector=dv)


def remove(path: str, ts: int | None = 100, dv: DeletionVectorDescriptor | None = None) -> RemoveFile:
    return RemoveFile(path=path, deletion_timestamp=ts, deletion_vector=dv)


P = Protocol(1, 2)
M = Metadata(id="t", schema_string='{"type":"struct","fields":[]}')


def test_versions_must_be_contiguous_with_seed_message():
    r = InMemoryLogReplay()
    r.append(0, [P, M])
    with pytest.raises(AssertionError, match=r"Attempted to replay version 2, but state is at 0"):
        r.append(2, [])


def test_add_remove_readd():
    r = InMemoryLogReplay()
    r.append(0, [P, M, add("foo"), CommitInfo({"operation": "WRITE"})])
    r.append(1, [remove("foo")])
    assert not r.active_files and set(r.tombstones) == {"foo"}
    r.append(2, [add("foo", mtime=1700000000000), add("bar")])
    assert set(r.active_files) == {"foo", "bar"} and not r.tombstones
    assert r.active_files["foo"].modification_time == 1700000000000
    assert all(not a.data_change for a in r.active_files.values())


def test_dv_is_part_of_file_identity():
    dv1 = DeletionVectorDescriptor("u", "abc", 10, 1, offset=1)
    dv2 = DeletionVectorDescriptor("u", "def", 10, 2, offset=1)
    r = InMemoryLogReplay()
    r.append(0, [P, M, add("f", dv1)])
    r.append(1, [remove("f", dv=dv1), add("f", dv2)])
    assert len(r.active_files) == 1 and len(r.tombstones) == 1
    (active,) = r.active_files.values()
    assert active.deletion_vector == dv2
    assert dv1.unique_id == "uabc@1"


def test_absolute_paths_are_canonicalized():
    assert canonical_path("/a/b") == canonical_path("file:/a/b") == canonical_path("file:///a/b") == "file:/a/b"
    r = InMemoryLogReplay()
    r.append(0, [P, M, add("/some/abs/path")])
    r.append(1, [remove("file:///some/abs/path")])
    assert not r.active_files


def test_latest_protocol_metadata_txn_and_domains():
    r = InMemoryLogReplay()
    r.append(0, [P, M, SetTransaction("app", 5, 10), DomainMetadata("d1", "x"), DomainMetadata("d2", "y")])
    m2 = Metadata(id="t", schema_string=M.schema_string, configuration={"k": "v"})
    r.append(1, [Protocol(3, 7, (), ()), m2, SetTransaction("app", 3, 20), DomainMetadata("d1", "", removed=True)])
    assert r.current_protocol == Protocol(3, 7, (), ())
    assert r.current_metadata == m2
    assert r.transactions["app"].version == 3  # versions may decrease: the latest wins
    assert [d.domain for d in r.get_domain_metadata()] == ["d2"]


def test_txn_retention_applies_after_resolution():
    r = InMemoryLogReplay(min_set_transaction_retention_timestamp=50)
    r.append(0, [P, M, SetTransaction("app", 1, 100)])
    r.append(1, [SetTransaction("app", 2, 10)])  # newest is expired: the older one must not come back
    assert r.get_transactions() == []


def test_checkpoint_order_and_tombstone_retention():
    r = InMemoryLogReplay(min_file_retention_timestamp=50)
    r.append(0, [P, M, SetTransaction("a", 1), add("c"), add("a"), add("x"), add("y")])
    r.append(1, [remove("x", ts=100), remove("y", ts=10)])
    out = list(r.checkpoint())
    assert out[:3] == [P, M, SetTransaction("a", 1)]
    assert [(type(a).__name__, a.path) for a in out[3:]] == [("AddFile", "a"), ("AddFile", "c"), ("RemoveFile", "x")]


def test_file_state_apply_equals_full_replay():
    base = InMemoryLogReplay()
    base.append(0, [P, M, add("a"), add("b"), add("c"), remove("old")])
    tail = InMemoryLogReplay()
    tail.append(1, [remove("b"), add("old"), add("d")])
    tail.append(2, [remove("d"), add("b", mtime=7)])
    merged = state_from_replay(base).apply(tail)
    full = InMemoryLogReplay()
    full.append(0, [P, M, add("a"), add("b"), add("c"), remove("old")])
    full.append(1, [remove("b"), add("old"), add("d")])
    full.append(2, [remove("d"), add("b", mtime=7)])
    expected = state_from_replay(full)
    assert sorted(merged.adds.column("path").to_pylist()) == sorted(expected.adds.column("path").to_pylist())
    assert sorted(merged.removes.column("path").to_pylist()) == sorted(expected.removes.column("path").to_pylist())
    mt = dict(
        zip(merged.adds.column("path").to_pylist(), merged.adds.column("modificationTime").to_pylist(), strict=True)
    )
    assert mt["b"] == 7


def test_chained_lazy_updates_fold_instead_of_nesting():
    base = InMemoryLogReplay()
    base.append(0, [P, M, add("a"), add("b")])
    state = state_from_replay(base)
    live = {"a", "b"}
    for v in range(1, 3000):  # deeper than the recursion limit if states nested
        step = InMemoryLogReplay()
        step.append(v, [add(f"f{v}"), remove(f"f{v - 1}") if v > 1 else remove("b")])
        state = state.apply(step)
        live.discard("b" if v == 1 else f"f{v - 1}")
        live.add(f"f{v}")
    assert set(state.adds.column("path").to_pylist()) == live
    assert len(state.removes) == 2999


def test_executor_commit_lines_split_on_newline_only():
    """A JSON string may hold U+2028 (or another Unicode line boundary) unescaped: the executors'
    line splitter and the driver's key reader split at `\\n` only, as the local engine does."""
    import json

    from airflow_delta_provider.delta.engines.spark.tasks import commit_file_keys, commit_file_lines, parse_line

    odd = "date=2024\u2028x/part\u0085-0.parquet"
    text = (
        json.dumps({"commitInfo": {}})
        + "\r\n"
        + json.dumps({"add": {"path": odd, "size": 1, "partitionValues": {}}}, ensure_ascii=False)
        + "\n\n"
        + json.dumps({"remove": {"path": "/abs/b.parquet"}})
    )
    lines = list(commit_file_lines(("file:/t/_delta_log/00000000000000000007.json", text)))
    assert [(v, p) for v, p, _ in lines] == [(7, 0), (7, 1), (7, 3)]
    assert parse_line(lines[1])[3]["path"] == odd
    keys = list(commit_file_keys("s3://b/t/_delta_log/00000000000000000007.json", text))
    assert keys == [canonical_path(odd), canonical_path("/abs/b.parquet")] == [odd, "file:/abs/b.parquet"]
    with pytest.raises(ValueError, match="Invalid action"):  # the driver leaves such a commit to the executors
        list(commit_file_keys("t/_delta_log/00000000000000000008.json", '{"add": {"path": "no-size"}}'))
