"""A Delta Lake transaction log reader and writer: `DeltaLog`, `Snapshot`, `Transaction`.

Never imports Airflow or pyspark. The typed errors load eagerly (they need only the standard library); the
other names on first use (PEP 562), so a pure submodule used on Spark executors does not import pyarrow.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:  # pragma: no cover
    from .delta_log import DeltaLog
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

#: Names loaded on first use -> the submodule defining them.
_LAZY: dict[str, str] = {
    **dict.fromkeys(
        ("AddCDCFile", "AddFile", "CommitInfo", "DeletionVectorDescriptor", "DomainMetadata", "Metadata"),
        "protocol.actions",
    ),
    **dict.fromkeys(("Protocol", "RemoveFile", "SetTransaction"), "protocol.actions"),
    **dict.fromkeys(("check_can_read", "check_can_write"), "protocol.table_features"),
    **dict.fromkeys(("Transaction", "start_transaction"), "txn.transaction"),
    "DeltaLog": "delta_log",
    "LogSegment": "protocol.log_segment",
    "InMemoryLogReplay": "protocol.replay",
    "Snapshot": "snapshot",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
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
