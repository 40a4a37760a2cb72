"""`Transaction`: stage actions on a snapshot, then commit them as the next version (Spark
`OptimisticTransaction`; PROTOCOL.md "Delta Log Entries" and "Commit Provenance Information").

A commit is one `put_if_absent` of `_delta_log/<version>.json`, never check-then-write. When another
writer took the version, every winning commit is checked against Delta's conflict rules
(`protocol.conflicts`): the typed conflict is raised, or the commit retries at the next free version.
An app transaction (`set_app_transaction`) already in the snapshot makes the commit a no-op (an
idempotent task retry).
"""

from __future__ import annotations

import functools
import random
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import (
    CommitRetriesExceededError,
    InvalidArgumentError,
    OperationNotAllowedError,
    StorageError,
    UnsupportedFeatureError,
    UnsupportedStoreError,
    check_int,
)
from ..protocol.actions import (
    Action,
    AddCDCFile,
    AddFile,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    SetTransaction,
    canonical_path,
)
from ..protocol.commit_info import (
    build_commit_info,
    commit_bytes,
    in_commit_timestamps_active,
    next_in_commit_timestamp,
    with_ict_enablement,
)
from ..protocol.conflicts import (
    CurrentTransactionInfo,
    ReadPredicate,
    WinningCommitSummary,
    check_conflicts,
    commit_operations,
    is_blind_append,
    isolation_level,
)
from ..protocol.filenames import FileInfo, LogFileKind, ParsedLogPath, commit_name, parse_log_path, version_prefix
from ..protocol.table_features import check_can_write, table_features
from ..read.commits import read_commit

if TYPE_CHECKING:  # pragma: no cover
    from ..snapshot import Snapshot
    from ..storage import LogStore

#: Commit attempts after the first that a transaction makes before giving up (delta-rs's default).
DEFAULT_MAX_RETRIES = 15
_STAGEABLE = (AddFile, RemoveFile, AddCDCFile, Metadata, Protocol, DomainMetadata, SetTransaction)
#: What a tombstone copies from the `add` it removes.
_REMOVE_KEEPS = ("path", "partition_values", "size", "tags", "deletion_vector", "base_row_id")
_REMOVE_KEEPS += ("default_row_commit_version",)


@functools.cache
def engine_info() -> str:
    """`airflow-delta-provider/<version>`: the `engineInfo` of every commit written here."""
    from importlib import metadata

    try:
        version = metadata.version("airflow-delta-provider")
    except metadata.PackageNotFoundError:  # shipped as a zip (spark-submit --py-files): the package's own value
        version = getattr(sys.modules.get(__name__.partition(".")[0]), "__version__", "unknown")
    return f"airflow-delta-provider/{version}"


class Transaction:
    """Actions staged against `snapshot` for `operation` (Delta's name: `WRITE`, `OPTIMIZE`...), committed
    once with `commit()`. What the result depends on (`read_files`, `read_where`, `read_whole_table`, app
    ids) is what the conflict rules check when another writer commits first.

    :param parameters: `operationParameters` of the commitInfo (lists and maps are JSON-encoded).
    :param app_id: an application id this transaction depends on: a concurrent `txn` for it conflicts.
    :param clock: epoch milliseconds (default: the snapshot's clock).
    :param max_retries: commit attempts after the first before `CommitRetriesExceededError`.
    """

    def __init__(
        self,
        snapshot: Snapshot,
        operation: str,
        parameters: Mapping[str, Any] | None = None,
        *,
        app_id: str | None = None,
        clock: Callable[[], int] | None = None,
        max_retries: int = DEFAULT_MAX_RETRIES,
    ) -> None:
        if not isinstance(operation, str) or not operation:
            raise InvalidArgumentError("operation must be a non-empty string", argument="operation")
        self.snapshot = snapshot
        self.table = snapshot.table
        check_can_write(snapshot.protocol, snapshot.metadata, ["commit"], table=self.table, version=snapshot.version)
        self.operation = operation
        self.parameters: dict[str, Any] = dict(parameters or {})
        self.max_retries = check_int(max_retries, "max_retries", minimum=0, table=snapshot.table)
        self.txn_id = str(uuid.uuid4())
        self.attempts = 0
        self._clock = clock or snapshot.now_ms
        self._actions: list[Action] = []
        self._read_paths: set[str] = set()
        self._read_predicates: list[ReadPredicate] = []
        self._read_whole_table = False
        self._read_app_ids: set[str] = set() if app_id is None else {app_id}
        self._already_applied: tuple[str, int] | None = None
        self._committed: int | None = None

    def __repr__(self) -> str:
        return f"Transaction({self.table!r}, {self.operation!r}, read_version={self.read_version})"

    @property
    def read_version(self) -> int:
        return self.snapshot.version

    @property
    def actions(self) -> tuple[Action, ...]:
        return tuple(self._actions)

    @property
    def committed_version(self) -> int | None:
        """The version `commit()` returned, None before."""
        return self._committed

    def add(self, *actions: Action) -> Transaction:
        """Stage actions (add, remove, cdc, metaData, protocol, domainMetadata, txn), never commitInfo."""
        for action in actions:
            if not isinstance(action, _STAGEABLE):
                raise InvalidArgumentError(
                    f"cannot stage {type(action).__name__}: the transaction writes commitInfo itself",
                    argument="actions",
                    table=self.table,
                )
        self._actions.extend(actions)
        return self

    def remove(self, *files: AddFile | RemoveFile, data_change: bool = True) -> Transaction:
        """Stage removes of active files (an `AddFile` becomes its tombstone, stamped now)."""
        now = self._clock()
        for f in files:
            if isinstance(f, AddFile):
                kept = {k: getattr(f, k) for k in _REMOVE_KEEPS}
                f = RemoveFile(deletion_timestamp=now, data_change=data_change, extended_file_metadata=True, **kept)
            self.add(f)
        return self

    def read_files(self, files: Iterable[AddFile | str]) -> Transaction:
        """Record files this transaction's result depends on (a concurrent delete of one is a conflict)."""
        for f in files:
            self._read_paths.add(canonical_path(f.path if isinstance(f, AddFile) else f))
        return self

    def read_where(self, predicate: ReadPredicate) -> Transaction:
        """Record a read of the files `predicate` accepts (a concurrent add it accepts is a conflict)."""
        self._read_predicates.append(predicate)
        return self

    def read_whole_table(self) -> Transaction:
        """Record a read of the whole table (any concurrent add or delete is a conflict)."""
        self._read_whole_table = True
        return self

    def set_app_transaction(self, app_id: str, version: int) -> Transaction:
        """Stage `txn{app_id, version}`: a no-op commit when the snapshot holds `app_id` at `version` or later."""
        if not isinstance(app_id, str) or not app_id:
            raise InvalidArgumentError("app_id must be a non-empty string", argument="app_id", table=self.table)
        if isinstance(version, bool) or not isinstance(version, int):
            raise InvalidArgumentError(f"version must be an integer, got {version!r}", argument="version")
        self._read_app_ids.add(app_id)
        current = self.snapshot.transaction_version(app_id)
        if current is not None and current >= version:
            self._already_applied = (app_id, current)
        return self.add(SetTransaction(app_id, version, last_updated=self._clock()))

    @property
    def already_applied(self) -> bool:
        """True when an app transaction of this commit is already in the table: `commit()` writes nothing."""
        return self._already_applied is not None

    def commit(
        self,
        *,
        operation_metrics: Mapping[str, Any] | None = None,
        user_metadata: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> int:
        """Write the staged actions as the next version and return it (see the module doc for retries)."""
        if self._committed is not None:
            raise OperationNotAllowedError(
                f"This transaction already committed version {self._committed}", table=self.table
            )
        snap = self.snapshot
        if self._already_applied is not None:
            return self._done(snap.version)
        actions = self._ordered_actions()
        current = self._checked(actions)
        store = self._writable_store()
        read_anything = current.read_whole_table or bool(current.read_paths or current.read_predicates)
        now = self._clock()
        protocol = next((a for a in actions if isinstance(a, Protocol)), snap.protocol)
        active = in_commit_timestamps_active(protocol, current.metadata)
        ict = next_in_commit_timestamp(now, snap.timestamp) if active else None
        info_args: dict[str, Any] = {
            "timestamp": now,
            "operation": self.operation,
            "parameters": self.parameters,
            "read_version": snap.version,
            "isolation_level": current.isolation_level,
            "is_blind_append": is_blind_append(actions, read_anything=read_anything),
            "txn_id": self.txn_id,
            "engine_info": engine_info(),
            "operation_metrics": operation_metrics,
            "user_metadata": user_metadata,
            "tags": tags,
        }
        attempt = snap.version + 1
        for retries in range(self.max_retries + 1):
            lines: list[Action] = [build_commit_info(**info_args, in_commit_timestamp=ict)]
            for a in actions:
                if isinstance(a, Metadata) and ict is not None:
                    a = with_ict_enablement(a, snap.metadata, version=attempt, in_commit_timestamp=ict)
                lines.append(a)
            self.attempts += 1
            if self._put(store, attempt, commit_bytes(lines)):
                return self._done(attempt)
            if retries > 0:  # a hot table: back off, then read the winners (never put at a version read before)
                time.sleep(random.uniform(0, min(0.5, 0.005 * 2 ** (retries + 1))))
            for winner in (winners := self._winners(store, attempt)):
                if winner.txn_id == self.txn_id:  # our own put landed although the store reported a failure
                    return self._done(winner.version)
                check_conflicts(current, winner)
                if ict is not None:
                    ict = max(ict, winner.timestamp + 1)
            attempt = winners[-1].version + 1
        raise CommitRetriesExceededError(
            f"Gave up after {self.attempts} commit attempts lost to concurrent writers",
            table=self.table,
            version=attempt,
        )

    def _checked(self, actions: list[Action]) -> CurrentTransactionInfo:
        """Refuse a commit this library cannot write (the table as read and as left); else the conflict input."""
        snap = self.snapshot
        protocol = next((a for a in actions if isinstance(a, Protocol)), snap.protocol)
        metadata = next((a for a in actions if isinstance(a, Metadata)), snap.metadata)
        ops = commit_operations(actions)
        check_can_write(snap.protocol, snap.metadata, ops, table=self.table, version=snap.version)
        if protocol is not snap.protocol or metadata is not snap.metadata:
            check_can_write(protocol, metadata, ops, table=self.table, version=snap.version)
        if protocol is not snap.protocol and not _well_formed(protocol):
            self._refuse(
                f"{protocol} is not a valid protocol: reader 3 and writer 7 list their features, and every "
                "reader feature is a writer feature too"
            )
        features = table_features(protocol)
        for a in actions:
            needs = _feature_needed(a)
            if needs is not None and needs not in features:
                raise UnsupportedFeatureError(
                    f"A {a.action_name} action needs the table feature '{needs}', which the table does not support",
                    feature=needs,
                    table=self.table,
                    version=snap.version,
                )
        return CurrentTransactionInfo(
            table=self.table,
            read_version=snap.version,
            read_protocol=snap.protocol,
            metadata=metadata,
            actions=tuple(actions),
            operations=ops,
            isolation_level=isolation_level(actions, snap.metadata.configuration),
            read_whole_table=self._read_whole_table,
            read_paths=frozenset(self._read_paths),
            read_predicates=tuple(self._read_predicates),
            read_app_ids=frozenset(self._read_app_ids),
        )

    def _done(self, version: int) -> int:
        self._committed = version
        return version

    def _ordered_actions(self) -> list[Action]:
        """Protocol and metaData first, then the rest as staged; duplicates refused (PROTOCOL.md: one
        protocol, one metaData, one action per file, per txn app id and per domain in a commit)."""
        seen: set[tuple[str, str]] = set()
        for a in self._actions:
            ident = _identity(a)
            if ident is not None and ident in seen:
                what = f"{ident[0]} {ident[1]!r}" if ident[1] else ident[0]
                self._refuse(f"{what} appears twice in one commit")
            if ident is not None:
                seen.add(ident)
        head = [a for kind in (Protocol, Metadata) for a in self._actions if isinstance(a, kind)]
        return head + [a for a in self._actions if not isinstance(a, Protocol | Metadata)]

    def _refuse(self, message: str) -> None:
        raise InvalidArgumentError(message, argument="actions", table=self.table)

    def _writable_store(self) -> LogStore:
        store: LogStore = self.snapshot.store
        if not callable(getattr(store, "put_if_absent", None)):
            raise UnsupportedStoreError(
                f"The store {type(store).__name__} is read-only (no write verbs): it cannot write commits",
                table=self.table,
            )
        if getattr(store, "read_only", False):
            raise UnsupportedStoreError(f"The store {store!r} is read-only: it cannot write commits", table=self.table)
        # `unsafe_put_if_absent`: FsspecLogStore's explicit opt-in for a single writer process (check-then-write)
        if not getattr(store, "atomic_put_if_absent", False) and not getattr(store, "unsafe_put_if_absent", False):
            raise UnsupportedStoreError(
                f"The store {type(store).__name__} has no atomic put-if-absent: concurrent commits could "
                "overwrite each other, so this library does not commit through it",
                table=self.table,
            )
        return store

    def _put(self, store: LogStore, version: int, data: bytes) -> bool:
        """Create the commit file; False when another writer has that version."""
        name = commit_name(version)
        path = store.join(self.snapshot.log_dir, name)
        try:
            store.put_if_absent(path, data)
        except FileExistsError:
            return False
        except StorageError as exc:
            # A lost answer (timeout, dropped connection) leaves the outcome unknown: if the file is there
            # now, the winners' check tells whether it is ours (txnId) or another writer's.
            if exc.transient and store.head(path) is not None:
                return False
            raise
        except OSError as exc:
            raise StorageError(
                f"Cannot write commit: {type(exc).__name__}: {exc}",
                table=self.table,
                version=version,
                file=name,
                transient=not isinstance(exc, PermissionError),
            ) from exc
        return True

    def _winners(self, store: LogStore, first: int) -> list[WinningCommitSummary]:
        """The commits from `first` on, contiguous (Spark `getConflictingVersions`), read whole."""
        log_dir = self.snapshot.log_dir
        found: dict[int, ParsedLogPath] = {}
        for info in store.list_from(log_dir, version_prefix(first)):
            parsed = parse_log_path(info)
            if parsed is not None and parsed.kind is LogFileKind.COMMIT and parsed.version >= first:
                found[parsed.version] = parsed
        if first not in found:  # a listing that lags the put: ask for the file itself
            path = store.join(log_dir, commit_name(first))
            head = store.head(path)
            if head is None:
                raise StorageError(
                    "The store reported the commit as existing, but it cannot be found",
                    table=self.table,
                    version=first,
                    file=commit_name(first),
                )
            found[first] = ParsedLogPath(FileInfo(path, head.size, head.modification_time), first, LogFileKind.COMMIT)
        winners: list[WinningCommitSummary] = []
        while (parsed := found.get(first + len(winners))) is not None:
            actions = tuple(read_commit(store, self.table, parsed))
            winners.append(WinningCommitSummary(parsed.version, actions, parsed.file.modification_time))
        return winners


def _identity(a: Action) -> tuple[str, str] | None:
    """What may appear once per commit: the action kind and its key."""
    if isinstance(a, AddFile | RemoveFile):
        return ("file", a.key)
    if isinstance(a, SetTransaction):
        return ("txn", a.app_id)
    if isinstance(a, DomainMetadata):
        return ("domain", a.domain)
    if isinstance(a, Protocol | Metadata):
        return (a.action_name, "")
    return None


def _well_formed(p: Protocol) -> bool:
    """PROTOCOL.md "Table Features": feature lists present exactly when the versions use them."""
    if (p.min_reader_version == 3) != (p.reader_features is not None):
        return False
    if (p.min_writer_version == 7) != (p.writer_features is not None):
        return False
    return p.reader_features is None or set(p.reader_features) <= set(p.writer_features or ())


def _feature_needed(a: Action) -> str | None:
    """The table feature without which the protocol forbids `a`."""
    if isinstance(a, DomainMetadata):
        return "domainMetadata"
    if isinstance(a, AddFile) and a.deletion_vector is not None:
        return "deletionVectors"
    return None


#: A transaction on a snapshot (the `Transaction` constructor, under the name the API documents).
start_transaction = Transaction
