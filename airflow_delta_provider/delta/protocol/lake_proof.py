"""The row proof of a rewrite: a commit that only moves rows between files (`dataChange=false`: OPTIMIZE, ZORDER,
REORG PURGE, COMPUTE STATS) must leave exactly the rows it read (PROTOCOL.md "Add File and Remove File": a
`dataChange=false` action "only rearranges existing data"). Counts come from the actions' `numRecords` minus each
deletion vector's `cardinality` (PROTOCOL.md "Deletion Vectors"); a content digest is an order-independent sum of
row hashes, so a rewrite that sorts or rebins rows proves equal while a dropped, duplicated or changed row does not.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from ..errors import DeltaError
from .actions import Action, AddFile, CommitInfo, RemoveFile

PROVEN, UNPROVEN, MISMATCH, NOT_A_REWRITE = "proven", "unproven", "mismatch", "not_a_rewrite"
_MASK = (1 << 64) - 1


class RowProofError(DeltaError):
    """A rewrite whose rows differ from the rows it read: `files` names the removed and added files."""

    error_class = "DELTA_ROW_PROOF_FAILED"
    extra_fields = ("files",)
    files: tuple[str, ...] = ()


@dataclass(frozen=True)
class Digest:
    """An order-independent digest of a multiset of rows: its count, and the sums of the rows' 64-bit hashes and
    of their squares (mod 2^64; two sums, so that no one compensating change keeps both)."""

    rows: int = 0
    sum: int = 0
    sum2: int = 0

    def __add__(self, other: Digest) -> Digest:
        return Digest(self.rows + other.rows, (self.sum + other.sum) & _MASK, (self.sum2 + other.sum2) & _MASK)

    def to_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "sum": f"{self.sum:016x}", "sum2": f"{self.sum2:016x}"}


@dataclass(frozen=True)
class RowProof:
    table: str
    version: int
    operation: str | None
    status: str
    removed: tuple[str, ...] = ()
    added: tuple[str, ...] = ()
    rows_before: int | None = None
    rows_after: int | None = None
    #: `verify="content"`: the digests of the removed files' live rows and of the added files' rows.
    digest_before: Digest | None = None
    digest_after: Digest | None = None
    why: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "removed": list(self.removed),
            "added": list(self.added),
            "digest_before": self.digest_before.to_dict() if self.digest_before else None,
            "digest_after": self.digest_after.to_dict() if self.digest_after else None,
        }


def live_rows(file: AddFile | RemoveFile) -> int | None:
    """Rows a file action keeps visible: `numRecords` minus its deletion vector's cardinality (None: no stats)."""
    stats = getattr(file, "stats", None)
    if not stats:
        return None
    records = json.loads(stats).get("numRecords")
    if records is None:
        return None
    dv = file.deletion_vector
    return int(records) - (dv.cardinality if dv is not None else 0)


def rewrite_actions(actions: Iterable[Action]) -> tuple[str | None, list[RemoveFile], list[AddFile], bool]:
    """The commit's operation, removes, adds, and whether every file action has `dataChange=false`."""
    operation, removes, adds = None, [], []
    for a in actions:
        if isinstance(a, CommitInfo):
            operation = a.operation
        elif isinstance(a, RemoveFile):
            removes.append(a)
        elif isinstance(a, AddFile):
            adds.append(a)
    quiet = bool(removes or adds) and not any(f.data_change for f in (*removes, *adds))
    return operation, removes, adds, quiet


def _mismatch(message: str, table: str, version: int, removed: Sequence[str], added: Sequence[str]) -> RowProofError:
    return RowProofError(
        f"{message}; removed {list(removed)}, added {list(added)}",
        table=table,
        version=version,
        files=(*removed, *added),
    )


def prove_counts(
    table: str, version: int, actions: Iterable[Action], removed_rows: Mapping[str, int | None]
) -> RowProof:
    """The count proof of one commit. `removed_rows` holds each removed path's live rows as the table had it
    before (a remove need not carry stats); a path it lacks falls back to the remove's own stats.

    Raises `RowProofError` naming the table, version and files when the counts differ."""
    operation, removes, adds, quiet = rewrite_actions(actions)
    removed, added = tuple(r.path for r in removes), tuple(a.path for a in adds)
    if not quiet:
        why = "no file action" if not (removes or adds) else "a file action changes data (dataChange=true)"
        return RowProof(table, version, operation, NOT_A_REWRITE, removed, added, why=why)
    before = [removed_rows[r.path] if r.path in removed_rows else live_rows(r) for r in removes]
    after = [live_rows(a) for a in adds]
    if None in before or None in after:
        return RowProof(table, version, operation, UNPROVEN, removed, added, why="a file without numRecords")
    rows_before, rows_after = sum(before), sum(after)  # type: ignore[arg-type]
    if rows_before != rows_after:
        raise _mismatch(
            f"{operation} rewrote {rows_before} live rows into {rows_after}", table, version, removed, added
        )
    return RowProof(table, version, operation, PROVEN, removed, added, rows_before, rows_after)


def digest_rows(rows: Iterable[Sequence[Any]]) -> Digest:
    n = s = s2 = 0
    for row in rows:
        # a 64-bit hash of the row's values' `repr`: types and values, None distinct from any value
        h = int.from_bytes(hashlib.blake2b(repr(tuple(row)).encode(), digest_size=8).digest(), "little")
        n, s, s2 = n + 1, (s + h) & _MASK, (s2 + h * h) & _MASK
    return Digest(n, s, s2)


def prove_content(proof: RowProof, before: Digest, after: Digest) -> RowProof:
    """The count proof with the content digests added; raises `RowProofError` when they differ."""
    if before != after:
        raise _mismatch(
            f"{proof.operation} changed row content: {before.rows} rows before (digest {before.to_dict()['sum']}), "
            f"{after.rows} after (digest {after.to_dict()['sum']})",
            proof.table,
            proof.version,
            proof.removed,
            proof.added,
        )
    return replace(
        proof,
        status=PROVEN,
        rows_before=before.rows if proof.rows_before is None else proof.rows_before,
        rows_after=after.rows if proof.rows_after is None else proof.rows_after,
        digest_before=before,
        digest_after=after,
        why="",
    )
