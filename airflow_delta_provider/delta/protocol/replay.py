"""`InMemoryLogReplay`: reconcile actions into a table state (PROTOCOL.md "Action Reconciliation").

Pure, as Delta's `InMemoryLogReplay.scala`. Retention is applied to the resolved state, never during
replay (an expired newest `txn` must not resurrect an older one).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from .actions import Action, AddFile, DomainMetadata, FileKey, Metadata, Protocol, RemoveFile, SetTransaction


class InMemoryLogReplay:
    """Replay of actions into active files, tombstones, protocol, metadata, txns and domains."""

    def __init__(
        self, min_file_retention_timestamp: int = 0, min_set_transaction_retention_timestamp: int | None = None
    ) -> None:
        self.min_file_retention_timestamp = min_file_retention_timestamp
        self.min_set_transaction_retention_timestamp = min_set_transaction_retention_timestamp
        self.current_version = -1
        self.current_protocol: Protocol | None = None
        self.current_metadata: Metadata | None = None
        self.transactions: dict[str, SetTransaction] = {}
        self.domain_metadata: dict[str, DomainMetadata] = {}
        self.active_files: dict[FileKey, AddFile] = {}
        self.tombstones: dict[FileKey, RemoveFile] = {}

    def append(self, version: int, actions: Iterable[Action]) -> None:
        """Apply the actions of `version` (the next version after the current one)."""
        if not (self.current_version == -1 or version == self.current_version + 1):
            raise AssertionError(f"Attempted to replay version {version}, but state is at {self.current_version}")
        self.current_version = version
        active, tombstones = self.active_files, self.tombstones
        for action in actions:
            if isinstance(action, AddFile):
                key = action.key
                active[key] = action.with_data_change(False)
                tombstones.pop(key, None)
            elif isinstance(action, RemoveFile):
                key = action.key
                active.pop(key, None)
                tombstones[key] = action.with_data_change(False)
            elif isinstance(action, Metadata):
                self.current_metadata = action
            elif isinstance(action, Protocol):
                self.current_protocol = action
            elif isinstance(action, SetTransaction):
                self.transactions[action.app_id] = action
            elif isinstance(action, DomainMetadata):
                self.domain_metadata[action.domain] = action
            # commitInfo, cdc, checkpointMetadata, sidecar: not part of the state

    def get_tombstones(self) -> Iterator[RemoveFile]:
        """Tombstones still inside retention (`deletionTimestamp > min_file_retention_timestamp`)."""
        cutoff = self.min_file_retention_timestamp
        return (t for t in self.tombstones.values() if t.del_timestamp > cutoff)

    def get_transactions(self) -> list[SetTransaction]:
        """Txns after retention (only when `delta.setTransactionRetentionDuration` is set)."""
        cutoff = self.min_set_transaction_retention_timestamp
        txns = list(self.transactions.values())
        if cutoff is None:
            return txns
        return [t for t in txns if t.last_updated is not None and t.last_updated > cutoff]

    def get_domain_metadata(self) -> list[DomainMetadata]:
        return [d for d in self.domain_metadata.values() if not d.removed]

    def checkpoint(self) -> Iterator[Action]:
        """The state as checkpoint actions: protocol, metadata, domains, txns, then files by path."""
        if self.current_protocol is not None:
            yield self.current_protocol
        if self.current_metadata is not None:
            yield self.current_metadata
        yield from self.get_domain_metadata()
        yield from self.get_transactions()
        files: list[AddFile | RemoveFile] = [*self.active_files.values(), *self.get_tombstones()]
        files.sort(key=lambda f: f.path)
        yield from files
