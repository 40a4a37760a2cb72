"""The reconciled state of one table version: protocol, metadata, txns, domains and files."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from typing import Protocol as TypingProtocol

from ..protocol.actions import Action, CommitInfo, DomainMetadata, Metadata, Protocol, SetTransaction
from ..protocol.replay import InMemoryLogReplay

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

    from .aggregates import FileSummary, TombstoneSummary
    from .file_state import FileState


class FileSet(TypingProtocol):
    """Active files and tombstones (expired included) of one version: `FileState` in this process, the
    Spark engine's `DistributedFileState` on the cluster."""

    @property
    def adds(self) -> pa.Table: ...

    @property
    def adds_with_stats(self) -> pa.Table: ...

    @property
    def removes(self) -> pa.Table: ...

    @property
    def num_files(self) -> int: ...

    @property
    def size_in_bytes(self) -> int: ...

    def num_distinct_paths(self) -> int: ...

    def count_tombstones_after(self, cutoff_ms: int) -> int: ...

    def file_summary(self, small_file_bytes: int) -> FileSummary: ...

    def tombstone_summary(self, cutoff_ms: int, partition_columns: tuple[str, ...]) -> TombstoneSummary: ...

    def uncache(self) -> None: ...


@dataclass(frozen=True)
class TableState:
    """Everything replay resolves for a version (retention not yet applied)."""

    version: int
    protocol: Protocol | None
    metadata: Metadata | None
    transactions: Mapping[str, SetTransaction]
    domain_metadata: Mapping[str, DomainMetadata]
    files: FileSet
    last_commit_info: CommitInfo | None = None
    commit_infos: Mapping[int, CommitInfo] = field(default_factory=dict)

    @classmethod
    def empty(cls) -> TableState:
        from .file_state import FileState

        return cls(-1, None, None, {}, {}, FileState.empty())

    def apply(
        self,
        replay: InMemoryLogReplay,
        commit_infos: Mapping[int, CommitInfo],
        *,
        file_tables: tuple[pa.Table, pa.Table] | None = None,
    ) -> TableState:
        """This state with the replay of later commits on top (`file_tables`: the replay's adds and removes,
        when built already). Only an in-process `FileState` is extended this way."""
        files: FileState = self.files  # type: ignore[assignment]
        txns = {**self.transactions, **replay.transactions}
        domains = {**self.domain_metadata, **replay.domain_metadata}
        domains = {k: v for k, v in domains.items() if not v.removed}
        version = replay.current_version if replay.current_version >= 0 else self.version
        last = commit_infos.get(version, self.last_commit_info if version == self.version else None)
        return TableState(
            version=version,
            protocol=replay.current_protocol or self.protocol,
            metadata=replay.current_metadata or self.metadata,
            transactions=txns,
            domain_metadata=domains,
            files=files.apply(replay, tables=file_tables),
            last_commit_info=last,
            commit_infos={**self.commit_infos, **commit_infos},
        )


def table_state_from_actions(version: int, actions: Iterable[Action], files: FileSet) -> TableState:
    """The state a checkpoint holds: its non-file actions (latest wins) and its file state."""
    protocol: Protocol | None = None
    metadata: Metadata | None = None
    txns: dict[str, SetTransaction] = {}
    domains: dict[str, DomainMetadata] = {}
    for a in actions:
        if isinstance(a, Protocol):
            protocol = a
        elif isinstance(a, Metadata):
            metadata = a
        elif isinstance(a, SetTransaction):
            txns[a.app_id] = a
        elif isinstance(a, DomainMetadata) and not a.removed:
            domains[a.domain] = a
    return TableState(version, protocol, metadata, txns, domains, files)
