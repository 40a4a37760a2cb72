"""Conflict detection: may a transaction that lost a commit race rebase over the winning commit? (pure)

Delta Spark `ConflictChecker.checkConflicts`, in its order: protocol, metadata, domain metadata, app
transactions, added files, removed files (row tracking and type widening fix-ups are not implemented:
such tables are refused before writing). Anything else rebases unchanged; files compare by canonical path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import NoReturn, TypeVar

from ..errors import (
    ConcurrentAppendError,
    ConcurrentDeleteDeleteError,
    ConcurrentDeleteReadError,
    ConcurrentModificationError,
    ConcurrentTransactionError,
    MetadataChangedError,
    ProtocolChangedError,
)
from .actions import (
    Action,
    AddCDCFile,
    AddFile,
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    SetTransaction,
    canonical_path,
)
from .commit_info import SERIALIZABLE, SNAPSHOT_ISOLATION, WRITE_SERIALIZABLE, commit_timestamp
from .table_features import check_can_write, table_features

ISOLATION_LEVEL = "delta.isolationLevel"
ROW_TRACKING_DOMAIN = "delta.rowTracking"

#: Features a concurrent commit may add without failing this one: they bind no writer that does not use
#: them (Spark: `failConcurrentTransactionsAtUpgrade = false`). Others are a `ProtocolChangedError`.
CONCURRENT_UPGRADE_SAFE: frozenset[str] = frozenset(
    """appendOnly changeDataFeed columnMapping timestampNtz deletionVectors rowTracking domainMetadata v2Checkpoint
    inCommitTimestamp vacuumProtocolCheck""".split()
)

ReadPredicate = Callable[[AddFile], bool]
A = TypeVar("A", bound=Action)


@dataclass(frozen=True, slots=True)
class WinningCommitSummary:
    """A commit that won the race: its actions and its file's modification time (Spark's class)."""

    version: int
    actions: tuple[Action, ...]
    file_modification_time: int = 0

    def of(self, kind: type[A]) -> list[A]:
        return [a for a in self.actions if isinstance(a, kind)]

    @property
    def commit_info(self) -> CommitInfo | None:
        return next(iter(self.of(CommitInfo)), None)

    @property
    def protocol(self) -> Protocol | None:
        return next(iter(self.of(Protocol)), None)

    @property
    def metadata(self) -> Metadata | None:
        return next(iter(self.of(Metadata)), None)

    @property
    def is_blind_append(self) -> bool:
        info = self.commit_info
        return info is not None and info.raw.get("isBlindAppend") is True

    @property
    def operation(self) -> str:
        info = self.commit_info
        return (info.operation if info is not None else None) or "unknown operation"

    @property
    def txn_id(self) -> str | None:
        info = self.commit_info
        value = None if info is None else info.raw.get("txnId")
        return None if value is None else str(value)

    @property
    def timestamp(self) -> int:
        """Its in-commit timestamp, else its file's mtime: what the next commit's timestamp must exceed."""
        return commit_timestamp(self.commit_info, self.file_modification_time)


@dataclass(frozen=True, slots=True)
class CurrentTransactionInfo:
    """What the losing transaction read and wants to commit (Spark `CurrentTransactionInfo`); `actions`
    exclude commitInfo, `metadata` is the table's after this transaction, `read_paths` are canonical."""

    table: str | None
    read_version: int
    read_protocol: Protocol
    metadata: Metadata
    actions: tuple[Action, ...]
    operations: frozenset[str]
    isolation_level: str = SERIALIZABLE
    read_whole_table: bool = False
    read_paths: frozenset[str] = frozenset()
    read_predicates: tuple[ReadPredicate, ...] = ()
    read_app_ids: frozenset[str] = frozenset()

    @property
    def metadata_changed(self) -> bool:
        return any(isinstance(a, Metadata) for a in self.actions)


def commit_operations(actions: Iterable[Action]) -> frozenset[str]:
    """The `check_can_write` operations a commit of `actions` performs."""
    ops = {"commit"}
    for a in actions:
        if isinstance(a, AddCDCFile) or (isinstance(a, AddFile) and a.data_change):
            ops.add("write")
        elif isinstance(a, RemoveFile) and a.data_change:
            ops.add("remove")
        elif isinstance(a, AddFile | RemoveFile):
            ops.add("optimize")
    return frozenset(ops)


def isolation_level(actions: Iterable[Action], configuration: Mapping[str, str | None]) -> str:
    """`delta.isolationLevel` (default Serializable), SnapshotIsolation when no action changes data
    (Spark `canDowngradeToSnapshotIsolation`: compaction and commitInfo-only commits)."""
    level = configuration.get(ISOLATION_LEVEL) or SERIALIZABLE
    if level not in (SERIALIZABLE, WRITE_SERIALIZABLE):
        level = SERIALIZABLE
    for a in actions:
        if isinstance(a, AddFile | RemoveFile | AddCDCFile):
            if a.data_change:
                return level
        elif not (isinstance(a, DomainMetadata) and a.domain == ROW_TRACKING_DOMAIN):
            return level
    return SNAPSHOT_ISOLATION


def is_blind_append(actions: Iterable[Action], *, read_anything: bool) -> bool:
    """Only adds among the file actions, and nothing read (Spark's `isBlindAppend`)."""
    return not read_anything and not any(isinstance(a, RemoveFile | AddCDCFile) for a in actions)


def check_conflicts(current: CurrentTransactionInfo, winner: WinningCommitSummary) -> None:
    """Raise the typed conflict if `winner` invalidates `current`; return when it may rebase over it."""

    def fail(error: type[ConcurrentModificationError], message: str, file: str | None = None) -> NoReturn:
        raise error(message, table=current.table, version=winner.version, file=file)

    by = f"a concurrent update ({winner.operation})"
    protocol = winner.protocol
    if protocol is not None:
        metadata = winner.metadata or current.metadata
        check_can_write(protocol, metadata, current.operations, table=current.table, version=winner.version)
        message = f"The protocol version of the table was changed by {by}"
        if any(isinstance(a, Protocol) for a in current.actions):
            fail(ProtocolChangedError, message)
        read, new = table_features(current.read_protocol), table_features(protocol)
        if read - new:
            fail(ProtocolChangedError, f"{message}: it removed {sorted(read - new)}")
        if new - read - CONCURRENT_UPGRADE_SAFE:
            fail(ProtocolChangedError, f"{message}: it added {sorted(new - read - CONCURRENT_UPGRADE_SAFE)}")
    if winner.metadata is not None:
        fail(MetadataChangedError, f"The metadata of the table was changed by {by}")
    ours = {a.domain for a in current.actions if isinstance(a, DomainMetadata)}
    for domain in sorted(ours & {a.domain for a in winner.of(DomainMetadata)}):
        fail(ConcurrentTransactionError, f"A conflicting metadata domain '{domain}' was set by {by}")
    for app_id in sorted(current.read_app_ids & {a.app_id for a in winner.of(SetTransaction)}):
        fail(
            ConcurrentTransactionError,
            f"Application transaction '{app_id}' was committed by {by}: the same application is writing concurrently",
        )
    # Spark `checkForAddedFilesThatShouldHaveBeenReadByCurrentTxn`: a non-blind winner's adds always count; a
    # blind append's only at Serializable (or WriteSerializable with a metadata change)
    level = current.isolation_level
    reads = current.read_whole_table or current.read_predicates
    blind_ok = winner.is_blind_append and level == WRITE_SERIALIZABLE and not current.metadata_changed
    if level != SNAPSHOT_ISOLATION and reads and not blind_ok:
        for add in winner.of(AddFile):
            if current.read_whole_table or any(p(add) for p in current.read_predicates):
                fail(ConcurrentAppendError, f"Files were added to the data this transaction read by {by}", add.path)
    removed = winner.of(RemoveFile)
    for remove in removed:
        if canonical_path(remove.path) in current.read_paths:
            fail(ConcurrentDeleteReadError, f"A file this transaction read was deleted by {by}", remove.path)
    if removed and current.read_whole_table:
        fail(
            ConcurrentDeleteReadError, f"This transaction read the whole table and {by} deleted files", removed[0].path
        )
    ours = {canonical_path(a.path) for a in current.actions if isinstance(a, RemoveFile)}
    for remove in removed:
        if canonical_path(remove.path) in ours:
            fail(ConcurrentDeleteDeleteError, f"A file this transaction deletes was deleted by {by}", remove.path)
