"""The row proof of a rewrite (`protocol.lake_proof` rules over values; `delta.lake.proof.prove_rewrite` on delta-rs
tables compacted by our OPTIMIZE, deletion vectors included) catches a planted rewrite that drops a row."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import copy_table
from deltalake import write_deltalake
from test_purge import dv_table

from airflow_delta_provider.delta import DeltaLog
from airflow_delta_provider.delta.errors import InvalidArgumentError
from airflow_delta_provider.delta.lake.proof import prove_rewrite
from airflow_delta_provider.delta.maintenance.optimize import optimize
from airflow_delta_provider.delta.protocol.actions import action_from_json
from airflow_delta_provider.delta.protocol.lake_proof import (
    MISMATCH,
    NOT_A_REWRITE,
    PROVEN,
    UNPROVEN,
    RowProofError,
    digest_rows,
    prove_content,
    prove_counts,
)


def _add(path: str, rows: int | None, *, change: bool = False, dv: int | None = None) -> object:
    add = {"path": path, "partitionValues": {}, "size": 10, "modificationTime": 1, "dataChange": change}
    if rows is not None:
        add["stats"] = json.dumps({"numRecords": rows})
    if dv is not None:
        add["deletionVector"] = {"storageType": "u", "pathOrInlineDv": "ab", "sizeInBytes": 4, "cardinality": dv}
    return action_from_json({"add": add})


def _remove(path: str, change: bool = False) -> object:
    return action_from_json({"remove": {"path": path, "deletionTimestamp": 1, "dataChange": change}})


def _info(operation: str = "OPTIMIZE") -> object:
    return action_from_json({"commitInfo": {"operation": operation, "timestamp": 1}})


def test_counts_are_live_rows_before_and_after() -> None:
    actions = [_info(), _remove("a"), _remove("b"), _add("c", 12)]
    # a has 10 records of which a deletion vector hides 3: 7 live; b 5
    before = {"a": 10 - 3, "b": 5}
    proof = prove_counts("t", 4, actions, before)
    assert (proof.status, proof.rows_before, proof.rows_after) == (PROVEN, 12, 12)
    assert proof.removed == ("a", "b") and proof.added == ("c",) and proof.operation == "OPTIMIZE"
    # the added file's own deletion vector counts too (a rewrite keeping a vector)
    assert prove_counts("t", 4, [_remove("a"), _add("c", 9, dv=2)], {"a": 7}).status == PROVEN


def test_a_planted_row_drop_is_a_typed_error_naming_table_version_and_files() -> None:
    with pytest.raises(RowProofError) as info:
        prove_counts("s3://lake/t", 7, [_info(), _remove("a"), _remove("b"), _add("c", 11)], {"a": 7, "b": 5})
    err = info.value
    assert (err.table, err.version, err.files) == ("s3://lake/t", 7, ("a", "b", "c"))
    assert "12 live rows into 11" in str(err) and err.error_class == "DELTA_ROW_PROOF_FAILED"


def test_what_the_counts_cannot_prove() -> None:
    # a data change is not a rewrite; a file without numRecords leaves it unproven
    assert prove_counts("t", 1, [_add("a", 3, change=True)], {}).status == NOT_A_REWRITE
    assert prove_counts("t", 1, [_info("WRITE")], {}).status == NOT_A_REWRITE
    assert prove_counts("t", 1, [_remove("a"), _add("b", None)], {"a": 3}).status == UNPROVEN
    assert prove_counts("t", 1, [_remove("a"), _add("b", 3)], {}).status == UNPROVEN  # the remove has no stats


def test_the_digest_ignores_order_and_sees_every_row() -> None:
    rows = [(1, "x", None), (2, "y", 1.5), (2, "y", 1.5), (3, None, 0.0)]
    assert digest_rows(rows) == digest_rows(reversed(rows))
    assert digest_rows(rows[:3]) != digest_rows(rows)  # a dropped duplicate
    assert digest_rows([(1, "x", None), (2, "y", 1.5)]) != digest_rows([(1, "y", None), (2, "x", 1.5)])
    assert digest_rows([(None,)]) != digest_rows([("None",)]) != digest_rows([(0,)])
    counted = prove_counts("t", 2, [_remove("a"), _add("b", 4)], {"a": 4})
    assert prove_content(counted, digest_rows(rows), digest_rows(rows[::-1])).status == PROVEN
    changed = [*rows[:3], (3, None, 0.5)]
    with pytest.raises(RowProofError) as info:
        prove_content(counted, digest_rows(rows), digest_rows(changed))
    assert info.value.version == 2 and info.value.files == ("a", "b")


def _small_files(path: Path, n: int = 5) -> None:
    for i in range(n):
        data = pa.table({"p": ["a"] * 4, "x": [i, i + 1, None, 7], "s": ["u", None, "w", "u"]})
        write_deltalake(str(path), data, partition_by=["p"], mode="append")


@pytest.mark.parametrize("verify", ["counts", "content"])
def test_our_optimize_proves_on_deletion_vector_tables(tmp_path: Path, verify: str) -> None:
    root = dv_table(tmp_path / "t", 5)
    result = optimize(str(root))
    assert result.version is not None
    proof = prove_rewrite(str(root), result.version, verify=verify)
    assert proof.status == PROVEN and proof.rows_before == proof.rows_after > 0
    assert (proof.digest_before is not None) == (verify == "content")
    assert prove_rewrite(str(root), 1).status == NOT_A_REWRITE  # an append


def test_a_planted_rewrite_that_drops_a_row_is_caught(tmp_path: Path) -> None:
    root = tmp_path / "t"
    _small_files(root)
    result = optimize(str(root))
    (added,) = result.added
    assert prove_rewrite(str(root), result.version, verify="content").status == PROVEN
    # the rewritten file loses a row, its logged numRecords unchanged: the counts cannot see it, the content can
    path = root / added.path
    pq.write_table(pq.read_table(path).slice(1), path)
    assert prove_rewrite(str(root), result.version).status == PROVEN
    with pytest.raises(RowProofError) as info:
        prove_rewrite(str(root), result.version, verify="content")
    assert info.value.version == result.version and added.path in info.value.files
    assert "19 after" in str(info.value)
    # and a commit logging one row fewer is caught from the log alone
    commit = root / "_delta_log" / f"{result.version:020d}.json"
    text = commit.read_text()
    assert text.count('numRecords\\":20') == 1  # inside the add's stats (JSON text in JSON)
    commit.write_text(text.replace('numRecords\\":20', 'numRecords\\":19'))
    DeltaLog.clear_cache()
    with pytest.raises(RowProofError):
        prove_rewrite(str(root), result.version)


def test_bad_arguments(tmp_path: Path) -> None:
    root = tmp_path / "t"
    _small_files(root, 1)
    with pytest.raises(InvalidArgumentError) as info:
        prove_rewrite(str(root), 0, verify="bytes")
    assert info.value.argument == "verify"
    with pytest.raises(InvalidArgumentError) as info:
        prove_rewrite(str(root), 0)
    assert info.value.argument == "version"
    assert MISMATCH == "mismatch"


@pytest.mark.parametrize(
    "name",
    [
        "delta-golden/dv-partitioned-with-checkpoint",
        "delta-golden/dv-with-columnmapping",
        "delta-kernel-java/basic-dv-no-checkpoint",
        "delta-kernel-java/basic-dv-with-checkpoint",
    ],
)
def test_rewrites_of_corpus_tables_prove_on_content(tmp_path: Path, name: str) -> None:
    """Deletion vectors, column mapping and checkpoints: our OPTIMIZE's commit proves on counts and content."""
    path = copy_table(name, tmp_path)
    result = optimize(str(path), target_size=1024**3)
    assert result.version is not None and result.removed
    proof = prove_rewrite(str(path), result.version, verify="content")
    assert proof.status == PROVEN and proof.rows_before == proof.rows_after == proof.digest_after.rows
