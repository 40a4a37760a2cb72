"""A Delta Lake transaction log reader: `DeltaLog`, `Snapshot`, `InMemoryLogReplay`.

Never imports Airflow or pyspark. Names are loaded on first use (PEP 562), so importing a pure
submodule (`protocol.actions`, `protocol.replay`, used on Spark executors) does not import pyarrow.

Layout: `protocol/` (pure protocol decisions), `storage/` (stores only move bytes), `read/` (commit
and checkpoint reading into file sets), `engines/` (where a replay runs: local or Spark), `txn/` and
`maintenance/` (writes); `DeltaLog` and `Snapshot` are the entry points.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, str] = {
    **dict.fromkeys(
        [
            "AddCDCFile",
            "AddFile",
            "CommitInfo",
            "DeletionVectorDescriptor",
            "DomainMetadata",
            "Metadata",
            "Protocol",
            "RemoveFile",
            "SetTransaction",
        ],
        "protocol.actions",
    ),
    **dict.fromkeys(
        [
            "CommitRetriesExceededError",
            "ConcurrentAppendError",
            "ConcurrentDeleteDeleteError",
            "ConcurrentDeleteReadError",
            "ConcurrentModificationError",
            "ConcurrentTransactionError",
            "ConcurrentWriteError",
            "DeltaError",
            "EngineError",
            "IncompleteCheckpointError",
            "InvalidArgumentError",
            "LogCorruptedError",
            "LogGapError",
            "MalformedCheckpointError",
            "MalformedCommitError",
            "MetadataChangedError",
            "MissingMetadataError",
            "MissingProtocolError",
            "OperationNotAllowedError",
            "PredicateSyntaxError",
            "ProtocolChangedError",
            "ResourceLimitError",
            "StorageError",
            "TableNotFoundError",
            "TimestampOutOfRangeError",
            "TruncatedLogError",
            "UnsupportedFeatureError",
            "UnsupportedStoreError",
            "VersionNotFoundError",
        ],
        "errors",
    ),
    "DeltaLog": "delta_log",
    "LogSegment": "protocol.log_segment",
    "InMemoryLogReplay": "protocol.replay",
    "Snapshot": "snapshot",
    "check_can_read": "protocol.table_features",
    "check_can_write": "protocol.table_features",
    "Transaction": "txn.transaction",
    "start_transaction": "txn.transaction",
}

if TYPE_CHECKING:  # pragma: no cover
    from .delta_log import DeltaLog
    from .errors import (
        CommitRetriesExceededError,
        ConcurrentAppendError,
        ConcurrentDeleteDeleteError,
        ConcurrentDeleteReadError,
        ConcurrentModificationError,
        ConcurrentTransactionError,
        ConcurrentWriteError,
        DeltaError,
        EngineError,
        IncompleteCheckpointError,
        InvalidArgumentError,
        LogCorruptedError,
        LogGapError,
        MalformedCheckpointError,
        MalformedCommitError,
        MetadataChangedError,
        MissingMetadataError,
        MissingProtocolError,
        OperationNotAllowedError,
        PredicateSyntaxError,
        ProtocolChangedError,
        ResourceLimitError,
        StorageError,
        TableNotFoundError,
        TimestampOutOfRangeError,
        TruncatedLogError,
        UnsupportedFeatureError,
        UnsupportedStoreError,
        VersionNotFoundError,
    )
    from .protocol.actions import (
        AddCDCFile,
        AddFile,
        CommitInfo,
        DeletionVectorDescriptor,
        DomainMetadata,
        Metadata,
        Protocol,
        RemoveFile,
        SetTransaction,
    )
    from .protocol.log_segment import LogSegment
    from .protocol.replay import InMemoryLogReplay
    from .protocol.table_features import check_can_read, check_can_write
    from .snapshot import Snapshot
    from .txn.transaction import Transaction, start_transaction


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def latest_version(table_uri: str, storage_options: dict[str, str] | None = None) -> int:
    """The newest version of a table from the log listing alone (no replay)."""
    from .delta_log import DeltaLog

    return DeltaLog.for_table(table_uri, storage_options).latest_version()


__all__ = [
    "AddCDCFile",
    "AddFile",
    "CommitInfo",
    "CommitRetriesExceededError",
    "ConcurrentAppendError",
    "ConcurrentDeleteDeleteError",
    "ConcurrentDeleteReadError",
    "ConcurrentModificationError",
    "ConcurrentTransactionError",
    "ConcurrentWriteError",
    "DeletionVectorDescriptor",
    "DeltaError",
    "DeltaLog",
    "DomainMetadata",
    "EngineError",
    "InMemoryLogReplay",
    "IncompleteCheckpointError",
    "InvalidArgumentError",
    "LogCorruptedError",
    "LogGapError",
    "LogSegment",
    "MalformedCheckpointError",
    "MalformedCommitError",
    "Metadata",
    "MetadataChangedError",
    "MissingMetadataError",
    "MissingProtocolError",
    "OperationNotAllowedError",
    "PredicateSyntaxError",
    "Protocol",
    "ProtocolChangedError",
    "RemoveFile",
    "ResourceLimitError",
    "SetTransaction",
    "Snapshot",
    "StorageError",
    "TableNotFoundError",
    "TimestampOutOfRangeError",
    "Transaction",
    "TruncatedLogError",
    "UnsupportedFeatureError",
    "UnsupportedStoreError",
    "VersionNotFoundError",
    "check_can_read",
    "check_can_write",
    "latest_version",
    "start_transaction",
]
