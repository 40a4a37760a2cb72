"""One error tree for everything the Delta log library can refuse.

Every error names the table and, where they are known, the version and the file involved, so a
message read in an Airflow task log or a CLI line is enough to find the problem. Call sites never
format messages: they build the error with fields and the class writes the text.
"""

from __future__ import annotations


class DeltaError(Exception):
    """Base class of every error the library raises on purpose."""

    error_class: str = "DELTA_ERROR"

    def __init__(
        self,
        message: str,
        *,
        table: str | None = None,
        version: int | None = None,
        file: str | None = None,
    ) -> None:
        self.message = message
        self.table = table
        self.version = version
        self.file = file
        super().__init__(self._render())

    def _render(self) -> str:
        parts = [self.message]
        where = []
        if self.table is not None:
            where.append(f"table={self.table}")
        if self.version is not None:
            where.append(f"version={self.version}")
        if self.file is not None:
            where.append(f"file={self.file}")
        if where:
            parts.append(f"[{', '.join(where)}]")
        return " ".join(parts)

    def to_dict(self) -> dict[str, object]:
        """Primitive form for JSON results and XCom (no secrets: only what the message already says)."""
        out: dict[str, object] = {
            "error_class": type(self).__name__,
            "message": str(self),
            "table": self.table,
            "version": self.version,
            "file": self.file,
        }
        transient = getattr(self, "transient", None)
        if transient is not None:
            out["transient"] = transient
        return out


class TableNotFoundError(DeltaError):
    """No `_delta_log`, or a `_delta_log` with no commit and no checkpoint in it."""

    error_class = "DELTA_TABLE_NOT_FOUND"


class LogCorruptedError(DeltaError):
    """The log cannot be replayed as it is on storage."""

    error_class = "DELTA_LOG_CORRUPTED"


class LogGapError(LogCorruptedError):
    """Commit versions after the checkpoint are not contiguous ("versions are not contiguous")."""

    error_class = "DELTA_VERSIONS_NOT_CONTIGUOUS"


class TruncatedLogError(LogCorruptedError):
    """The first commit after the chosen checkpoint is missing (`truncatedTransactionLogException`)."""

    error_class = "DELTA_TRUNCATED_TRANSACTION_LOG"


class MalformedCommitError(LogCorruptedError):
    """A commit file holds a line that is not a JSON object (for example a torn last line)."""

    error_class = "DELTA_MALFORMED_COMMIT"


class MalformedCheckpointError(LogCorruptedError):
    """A checkpoint file cannot be read (corrupt parquet, wrong schema, missing sidecar)."""

    error_class = "DELTA_MALFORMED_CHECKPOINT"


class IncompleteCheckpointError(LogCorruptedError):
    """The only checkpoint that could make a version is missing parts, and no commit can replace it."""

    error_class = "DELTA_MISSING_PART_FILES"


class MissingProtocolError(LogCorruptedError):
    """Replay ended with no `protocol` action ("No protocol found")."""

    error_class = "DELTA_STATE_RECOVER_ERROR"


class MissingMetadataError(LogCorruptedError):
    """Replay ended with no `metaData` action ("No metadata found")."""

    error_class = "DELTA_STATE_RECOVER_ERROR"


class VersionNotFoundError(DeltaError):
    """The version asked for is above the latest or below the earliest recreatable version."""

    error_class = "DELTA_VERSION_NOT_FOUND"

    def __init__(
        self,
        message: str,
        *,
        table: str | None = None,
        version: int | None = None,
        earliest: int | None = None,
        latest: int | None = None,
        file: str | None = None,
    ) -> None:
        self.earliest = earliest
        self.latest = latest
        super().__init__(message, table=table, version=version, file=file)


class TimestampOutOfRangeError(DeltaError):
    """A timestamp before the first commit or after the last one."""

    error_class = "DELTA_TIMESTAMP_OUT_OF_RANGE"

    def __init__(
        self,
        message: str,
        *,
        table: str | None = None,
        timestamp_ms: int | None = None,
        nearest_ms: int | None = None,
    ) -> None:
        self.timestamp_ms = timestamp_ms
        self.nearest_ms = nearest_ms
        super().__init__(message, table=table)


class UnsupportedFeatureError(DeltaError):
    """The table needs a reader (or, for writes, writer) capability this library does not have."""

    error_class = "DELTA_UNSUPPORTED_FEATURE"

    def __init__(
        self,
        message: str,
        *,
        feature: str | None = None,
        table: str | None = None,
        version: int | None = None,
        file: str | None = None,
    ) -> None:
        self.feature = feature
        super().__init__(message, table=table, version=version, file=file)


class OperationNotAllowedError(DeltaError):
    """A maintenance operation the table's protocol or properties forbid (appendOnly, catalogManaged)."""

    error_class = "DELTA_OPERATION_NOT_ALLOWED"


class StorageError(DeltaError):
    """Storage failed in a way that is not about the log's content (auth, network, throttling)."""

    error_class = "DELTA_STORAGE_ERROR"

    def __init__(
        self,
        message: str,
        *,
        table: str | None = None,
        version: int | None = None,
        file: str | None = None,
        transient: bool = False,
    ) -> None:
        self.transient = transient
        super().__init__(message, table=table, version=version, file=file)


class ResourceLimitError(DeltaError):
    """The local engine would exceed a configured memory limit: use the Spark engine."""

    error_class = "DELTA_RESOURCE_LIMIT"


class InvalidArgumentError(DeltaError, ValueError):
    """A caller passed something the API cannot take (bad filter, negative retention, ...)."""

    error_class = "DELTA_INVALID_ARGUMENT"


class EngineError(DeltaError):
    """The execution engine (Spark) failed for a reason that is not about the log's content."""

    error_class = "DELTA_ENGINE_ERROR"


#: Every concrete error class by name: how a job's error result (`error_class`) is turned back into
#: the typed error on the Airflow side.
ERROR_CLASSES: dict[str, type[DeltaError]] = {}


def _register(cls: type[DeltaError]) -> None:
    ERROR_CLASSES[cls.__name__] = cls
    for sub in cls.__subclasses__():
        _register(sub)


_register(DeltaError)


def error_from_dict(data: dict[str, object]) -> DeltaError:
    """The typed error a `to_dict()` (a job's error result) describes; unknown classes give `DeltaError`.

    The message is kept as written (it is already rendered with its location); `table`, `version`,
    `file` and `transient` are restored as fields.
    """
    cls = ERROR_CLASSES.get(str(data.get("error_class")), DeltaError)
    message = str(data.get("message") or cls.__name__)
    err = cls.__new__(cls)
    Exception.__init__(err, message)  # not DeltaError.__init__: that would render the location again
    version = data.get("version")
    err.message = message
    err.table = None if data.get("table") is None else str(data.get("table"))
    err.version = version if isinstance(version, int) else None
    err.file = None if data.get("file") is None else str(data.get("file"))
    for extra in ("earliest", "latest", "timestamp_ms", "nearest_ms", "feature"):  # subclass fields
        setattr(err, extra, data.get(extra))
    if isinstance(err, StorageError):
        err.transient = bool(data.get("transient", False))
    return err
