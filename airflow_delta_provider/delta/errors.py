"""One error tree for everything the Delta log library can refuse.

Call sites never format messages: they build the error with fields (table, version, file and the class's
`extra_fields`) and the class renders them, so a message in a task log or a CLI line locates the problem.
"""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any, ClassVar

#: Every error class by name: how a job's error result (`error_class`) becomes the typed error again.
ERROR_CLASSES: dict[str, type[DeltaError]] = {}


class DeltaError(Exception):
    """Base class of every error the library raises on purpose."""

    error_class: str = "DELTA_ERROR"
    #: Keyword fields beyond table/version/file (default: the class attribute of that name), kept by
    #: `to_dict` and `error_from_dict`.
    extra_fields: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        ERROR_CLASSES[cls.__name__] = cls

    def __init__(
        self,
        message: str,
        *,
        table: str | None = None,
        version: int | None = None,
        file: str | None = None,
        **fields: Any,
    ) -> None:
        unknown = sorted(set(fields) - set(self.extra_fields))
        if unknown:
            raise TypeError(f"{type(self).__name__}() got unexpected keyword arguments {unknown}")
        for name, value in fields.items():
            setattr(self, name, value)
        self.message = message
        self.table = table
        self.version = version
        self.file = file
        super().__init__(self._render())

    def _location(self) -> tuple[tuple[str, object], ...]:
        return (("table", self.table), ("version", self.version), ("file", self.file))

    def _render(self) -> str:
        where = ", ".join(f"{k}={v}" for k, v in self._location() if v is not None)
        return f"{self.message} [{where}]" if where else self.message

    def to_dict(self) -> dict[str, object]:
        """Primitive form for JSON results and XCom (no secrets: only what the message already says)."""
        out: dict[str, object] = {"error_class": type(self).__name__, "message": str(self)}
        out.update(self._location())
        out.update((name, getattr(self, name, None)) for name in self.extra_fields)
        return out


ERROR_CLASSES[DeltaError.__name__] = DeltaError


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


class CheckpointMismatchError(LogCorruptedError):
    """A written checkpoint differs from its read-back or its state (`checkpointMismatchWithSnapshot`); removed."""

    error_class = "DELTA_CHECKPOINT_SNAPSHOT_MISMATCH"


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
    extra_fields = ("earliest", "latest")
    earliest: int | None = None
    latest: int | None = None


class TimestampOutOfRangeError(DeltaError):
    """A timestamp before the first commit or after the last one."""

    error_class = "DELTA_TIMESTAMP_OUT_OF_RANGE"
    extra_fields = ("timestamp_ms", "nearest_ms")
    timestamp_ms: int | None = None
    nearest_ms: int | None = None


class UnsupportedFeatureError(DeltaError):
    """The table needs a reader (or, for writes, writer) capability this library does not have."""

    error_class = "DELTA_UNSUPPORTED_FEATURE"
    extra_fields = ("feature",)
    feature: str | None = None


class OperationNotAllowedError(DeltaError):
    """A maintenance operation the table's protocol or properties forbid (appendOnly, catalogManaged)."""

    error_class = "DELTA_OPERATION_NOT_ALLOWED"


class StorageError(DeltaError):
    """Storage failed in a way that is not about the log's content (auth, network, throttling)."""

    error_class = "DELTA_STORAGE_ERROR"
    extra_fields = ("transient",)
    transient: bool = False


class BucketNotFoundError(StorageError):
    """The table's bucket (container) does not exist: a configuration error, not a table to wait for."""

    error_class = "DELTA_BUCKET_NOT_FOUND"


class TableRecreatedError(DeltaError):
    """The latest version fell below the one waited past: the table was recreated (see `allow_recreation`)."""

    error_class = "DELTA_TABLE_RECREATED"


class ResourceLimitError(DeltaError):
    """The local engine would exceed a configured memory limit: use the Spark engine."""

    error_class = "DELTA_RESOURCE_LIMIT"


class InvalidArgumentError(DeltaError, ValueError):
    """A caller passed something the API cannot take (`argument` names it); a `ValueError` too."""

    error_class = "DELTA_INVALID_ARGUMENT"
    extra_fields = ("argument",)
    argument: str | None = None


class PredicateSyntaxError(InvalidArgumentError):
    """A predicate the grammar refuses or that does not fit the columns; `position` is 1-based, when known."""

    error_class = "PARSE_SYNTAX_ERROR"
    extra_fields = ("argument", "position")
    position: int | None = None


class EngineError(DeltaError):
    """The execution engine (Spark) failed for a reason that is not about the log's content."""

    error_class = "DELTA_ENGINE_ERROR"


class SchemaMismatchError(DeltaError):
    """A file OPTIMIZE wrote does not hold the table's schema; `field_path` names the first field at fault (by
    logical names). Nothing naming the file is committed."""

    error_class = "DELTA_DATA_FILE_SCHEMA_MISMATCH"
    extra_fields = ("field_path",)
    field_path: str | None = None


class ConcurrentModificationError(DeltaError):
    """A commit lost a race the transaction cannot rebase over (Delta's `ConcurrentModificationException`)."""

    error_class = "DELTA_CONCURRENT_MODIFICATION"


class ConcurrentWriteError(ConcurrentModificationError):
    """A concurrent commit added files this transaction read (`ConcurrentWriteException`)."""

    error_class = "DELTA_CONCURRENT_WRITE"


class MetadataChangedError(ConcurrentModificationError):
    """A concurrent commit changed the table's metadata (`MetadataChangedException`)."""

    error_class = "DELTA_METADATA_CHANGED"


class ProtocolChangedError(ConcurrentModificationError):
    """A concurrent commit changed the table's protocol (`ProtocolChangedException`)."""

    error_class = "DELTA_PROTOCOL_CHANGED"


class ConcurrentAppendError(ConcurrentModificationError):
    """A concurrent commit added files in the data this transaction read (`ConcurrentAppendException`)."""

    error_class = "DELTA_CONCURRENT_APPEND"


class ConcurrentDeleteReadError(ConcurrentModificationError):
    """A concurrent commit removed a file this transaction read (`ConcurrentDeleteReadException`)."""

    error_class = "DELTA_CONCURRENT_DELETE_READ"


class ConcurrentDeleteDeleteError(ConcurrentModificationError):
    """A concurrent commit removed a file this transaction also removes (`ConcurrentDeleteDeleteException`)."""

    error_class = "DELTA_CONCURRENT_DELETE_DELETE"


class ConcurrentTransactionError(ConcurrentModificationError):
    """A concurrent commit wrote the same application transaction id (`ConcurrentTransactionException`)."""

    error_class = "DELTA_CONCURRENT_TRANSACTION"


class CommitRetriesExceededError(ConcurrentModificationError):
    """The commit lost the race more times than its retry limit allows."""

    error_class = "DELTA_MAX_COMMIT_RETRIES_EXCEEDED"


class RetentionConflictError(OperationNotAllowedError):
    """`delta.logRetentionDuration` is below `delta.deletedFileRetentionDuration`, as Delta >= 4.1 refuses."""

    error_class = "DELTA_RETENTION_CONFLICT"
    extra_fields = ("log_retention_ms", "deleted_file_retention_ms")
    log_retention_ms: int | None = None
    deleted_file_retention_ms: int | None = None


class LeaseError(DeltaError):
    """A version lease that cannot be read (maintenance refuses to run past a malformed one) or released."""

    error_class = "DELTA_LEASE_ERROR"
    extra_fields = ("lease_id",)
    lease_id: str | None = None


class QuarantineError(DeltaError):
    """A VACUUM quarantine that cannot be undone, resumed or purged as asked; `paths` are those in the way."""

    error_class = "DELTA_VACUUM_QUARANTINE"
    extra_fields = ("quarantine_id", "paths")
    quarantine_id: str | None = None

    def __init__(self, message: str, *, paths: list[str] | None = None, **fields: Any) -> None:
        super().__init__(message, paths=list(paths or []), **fields)


class UnsupportedStoreError(OperationNotAllowedError):
    """The store cannot do what a write needs (an atomic put-if-absent, or any write if read-only)."""

    error_class = "DELTA_UNSUPPORTED_STORE"


def error_from_dict(data: dict[str, object]) -> DeltaError:
    """The typed error a `to_dict()` (a job's error result) describes, message as rendered; unknown classes
    give `DeltaError`."""
    cls = ERROR_CLASSES.get(str(data.get("error_class")), DeltaError)
    message = str(data.get("message") or cls.__name__)
    err = cls.__new__(cls)
    Exception.__init__(err, message)  # not DeltaError.__init__: that would render the location again
    version = data.get("version")
    err.message = message
    err.table = None if data.get("table") is None else str(data.get("table"))
    err.version = version if isinstance(version, int) else None
    err.file = None if data.get("file") is None else str(data.get("file"))
    for extra in cls.extra_fields:
        setattr(err, extra, data.get(extra))
    if isinstance(err, StorageError):
        err.transient = bool(data.get("transient", False))
    return err


# -- argument checks: every public entry point refuses bad arguments with the same typed errors --------


def _refuse(argument: str, expected: str, value: Any, table: str | None) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"{argument} must be {expected}, got {type(value).__name__} {value!r}", argument=argument, table=table
    )


def check_int(value: Any, argument: str, *, minimum: int | None = None, table: str | None = None) -> int:
    """`value` as an `int` (>= `minimum`); booleans, strings and floats are refused."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise _refuse(argument, "an integer", value, table)
    number = int(value)
    if minimum is not None and number < minimum:
        raise InvalidArgumentError(f"{argument} must be >= {minimum}, got {number}", argument=argument, table=table)
    return number


def check_number(
    value: Any, argument: str, *, minimum: float = 0, maximum: float = math.inf, table: str | None = None
) -> float:
    """`value` as a finite `float` in [`minimum`, `maximum`]; booleans, strings, NaN and infinities are refused."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise _refuse(argument, "a number", value, table)
    number = float(value)
    if not math.isfinite(number) or not minimum <= number <= maximum:
        bounds = f">= {minimum:g}" if maximum == math.inf else f"in [{minimum:g}, {maximum:g}]"
        raise InvalidArgumentError(
            f"{argument} must be a finite number {bounds}, got {value!r}", argument=argument, table=table
        )
    return number


def check_bool(value: Any, argument: str, *, table: str | None = None) -> bool:
    """`value` if it is a `bool` (a flag given as 1 or "yes" is refused rather than guessed)."""
    if not isinstance(value, bool):
        raise _refuse(argument, "True or False", value, table)
    return value
