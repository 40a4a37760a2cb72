"""A Delta Lake transaction log reader: `DeltaLog`, `Snapshot`, `InMemoryLogReplay`.

Never imports Airflow or pyspark. See `DeltaLog.for_table`.
"""

from .actions import (
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
from .delta_log import DeltaLog
from .errors import (
    DeltaError,
    IncompleteCheckpointError,
    InvalidArgumentError,
    LogCorruptedError,
    LogGapError,
    MalformedCheckpointError,
    MalformedCommitError,
    MissingMetadataError,
    MissingProtocolError,
    OperationNotAllowedError,
    ResourceLimitError,
    StorageError,
    TableNotFoundError,
    TimestampOutOfRangeError,
    TruncatedLogError,
    UnsupportedFeatureError,
    VersionNotFoundError,
)
from .log_segment import LogSegment
from .replay import InMemoryLogReplay
from .snapshot import Snapshot
from .table_features import check_can_read, check_can_write


def latest_version(table_uri: str, storage_options: dict[str, str] | None = None) -> int:
    """The newest version of a table from the log listing alone (no replay)."""
    return DeltaLog.for_table(table_uri, storage_options).latest_version()


__all__ = [
    "AddCDCFile",
    "AddFile",
    "CommitInfo",
    "DeletionVectorDescriptor",
    "DeltaError",
    "DeltaLog",
    "DomainMetadata",
    "InMemoryLogReplay",
    "IncompleteCheckpointError",
    "InvalidArgumentError",
    "LogCorruptedError",
    "LogGapError",
    "LogSegment",
    "MalformedCheckpointError",
    "MalformedCommitError",
    "Metadata",
    "MissingMetadataError",
    "MissingProtocolError",
    "OperationNotAllowedError",
    "Protocol",
    "RemoveFile",
    "ResourceLimitError",
    "SetTransaction",
    "Snapshot",
    "StorageError",
    "TableNotFoundError",
    "TimestampOutOfRangeError",
    "TruncatedLogError",
    "UnsupportedFeatureError",
    "VersionNotFoundError",
    "check_can_read",
    "check_can_write",
    "latest_version",
]
