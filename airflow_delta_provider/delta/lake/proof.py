"""Prove that a rewrite commit changed no row (rules in `protocol.lake_proof`): counts from the commit's actions
and the state it read; with `verify="content"`, a digest of the removed files' live rows (read through their
deletion vectors) against the added files' rows, both conformed to the table's physical schema so that a
rewrite that only re-encodes (INT96 to int64 timestamps, a widened type) proves equal."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from ..delta_log import DeltaLog
from ..errors import InvalidArgumentError, VersionNotFoundError
from ..maintenance.optimize import table_layout
from ..protocol.actions import AddFile, RemoveFile
from ..protocol.lake_proof import PROVEN, Digest, RowProof, digest_rows, live_rows, prove_content, prove_counts
from ..read.deletion_vectors import read_data_file
from ..write.data_files import TableLayout, physical_table

VERIFY = ("counts", "content")


def _commit(dlog: DeltaLog, version: int) -> list[Any]:
    for v, actions in dlog.get_changes(version):
        if v == version:
            return actions
        break
    raise VersionNotFoundError(f"No commit at version {version}", table=dlog.table_uri, version=version)


def _digest(dlog: DeltaLog, layout: TableLayout, files: Sequence[AddFile]) -> Digest:
    total = Digest()
    for f in files:
        data = read_data_file(dlog.store, dlog.table_uri, f, table=dlog.table_uri)
        rows = physical_table(data, layout, partition_values=f.partition_values, file=f.path)
        parts = tuple(sorted((k, v) for k, v in f.partition_values.items()))
        for batch in rows.to_batches(max_chunksize=65_536):
            columns = [c.to_pylist() for c in batch.columns]
            total = total + digest_rows((parts, *values) for values in zip(*columns, strict=True))
    return total


def prove_rewrite(
    table: str | os.PathLike[str] | DeltaLog,
    version: int,
    *,
    verify: str = "counts",
    storage_options: Mapping[str, Any] | None = None,
) -> RowProof:
    """The row proof of the commit at `version`: `proven`, `unproven` (a file without `numRecords`, counts
    only), or `not_a_rewrite` (a commit that changes data proves nothing here).

    :raises RowProofError: the rows differ (naming table, version and files).
    :raises InvalidArgumentError: `verify` is not "counts" or "content".
    """
    if verify not in VERIFY:
        raise InvalidArgumentError(f"verify must be one of {list(VERIFY)}, got {verify!r}", argument="verify")
    dlog = DeltaLog.of(table, storage_options)
    uri = dlog.table_uri
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise InvalidArgumentError(f"version must be an integer >= 1, got {version!r}", argument="version", table=uri)
    actions = _commit(dlog, version)
    before = dlog.snapshot_at(version - 1)
    read = {f.path: f for f in before.all_files(with_stats=True)}
    removes = [a for a in actions if isinstance(a, RemoveFile)]
    proof = prove_counts(uri, version, actions, {r.path: live_rows(read[r.path]) for r in removes if r.path in read})
    if verify == "counts" or proof.status not in (PROVEN, "unproven"):
        return proof
    missing = [r.path for r in removes if r.path not in read]
    if missing:
        raise InvalidArgumentError(
            f"Removed file(s) {missing} were not active at version {version - 1}", table=uri, version=version
        )
    layout = table_layout(before, uri)
    adds = [a for a in actions if isinstance(a, AddFile)]
    return prove_content(proof, _digest(dlog, layout, [read[r.path] for r in removes]), _digest(dlog, layout, adds))
