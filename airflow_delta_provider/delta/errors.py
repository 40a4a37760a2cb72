"""One error tree for everything the Delta log library can refuse.

Every error names the table and, where they are known, the version and the file involved, so a
message read in an Airflow task log or a CLI line is enough to find the problem. Call sites never
format messages: they build the error with fields and the class writes the text.
"""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any, ClassVar


class DeltaError(Exception):
    """Base class of every error the library raises on purpose."""

    error_class: str = "DELTA_ERROR"
    #: Fields beyond table/version/file that `to_dict` writes and `error_from_dict` restores.
    extra_fields: ClassVar[tuple[str, ...]] = ()

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
        for name in self.extra_fields:
            out[name] = getattr(self, name, None)
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


class CheckpointMismatchError(LogCorruptedError):
    """The checkpoint stored or read back differs from what was written, or from the replayed state it
    was written from (Spark `checkpointMismatchWithSnapshot`); the files this write created are gone."""

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
    extra_fields = ("timestamp_ms", "nearest_ms")

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
    extra_fields = ("feature",)

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
    extra_fields = ("transient",)

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


class BucketNotFoundError(StorageError):
    """The bucket (container) holding the table does not exist: a configuration error, not a table to
    wait for. Permanent (`transient=False`)."""

    error_class = "DELTA_BUCKET_NOT_FOUND"


class TableRecreatedError(DeltaError):
    """The table's latest version fell below the version waited past: it was deleted and created again
    (or the reference version belongs to another table). Permanent: pass `allow_recreation=True` to fire
    on the new table's versions instead."""

    error_class = "DELTA_TABLE_RECREATED"


class ResourceLimitError(DeltaError):
    """The local engine would exceed a configured memory limit: use the Spark engine."""

    error_class = "DELTA_RESOURCE_LIMIT"


class InvalidArgumentError(DeltaError, ValueError):
    """A caller passed something the API cannot take (bad filter, negative retention, ...).

    A `ValueError` too, so `except ValueError` keeps working; `argument` names the parameter (or CLI
    option) at fault when there is one.
    """

    error_class = "DELTA_INVALID_ARGUMENT"
    extra_fields = ("argument",)

    def __init__(
        self,
        message: str,
        *,
        argument: str | None = None,
        table: str | None = None,
        version: int | None = None,
        file: str | None = None,
    ) -> None:
        self.argument = argument
        super().__init__(message, table=table, version=version, file=file)


class PredicateSyntaxError(InvalidArgumentError):
    """A predicate (`--where`) the grammar does not accept, or that does not fit the table's columns.

    `position` is the 1-based character position in the predicate text, when one is at fault.
    """

    error_class = "PARSE_SYNTAX_ERROR"
    extra_fields = ("argument", "position")

    def __init__(
        self,
        message: str,
        *,
        position: int | None = None,
        argument: str | None = None,
        table: str | None = None,
    ) -> None:
        self.position = position
        super().__init__(message, argument=argument, table=table)


class EngineError(DeltaError):
    """The execution engine (Spark) failed for a reason that is not about the log's content."""

    error_class = "DELTA_ENGINE_ERROR"


class SchemaMismatchError(DeltaError):
    """A data file this library wrote (an OPTIMIZE rewrite) does not hold the table's schema: a field
    missing, extra or of another type, a nullability the schema does not allow (a variant's `value` and
    `metadata` are required), a Parquet field id or name that is not the column mapping's. `field_path`
    names the first field at fault (logical names, `s.v.metadata`). Nothing naming the file is committed."""

    error_class = "DELTA_DATA_FILE_SCHEMA_MISMATCH"
    extra_fields = ("field_path",)

    def __init__(
        self,
        message: str,
        *,
        field_path: str | None = None,
        table: str | None = None,
        version: int | None = None,
        file: str | None = None,
    ) -> None:
        self.field_path = field_path
        super().__init__(message, table=table, version=version, file=file)


class ConcurrentModificationError(DeltaError):
    """A commit lost a race to another writer in a way the transaction cannot rebase over
    (`ConcurrentModificationException` and its subclasses in Delta)."""

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
    """The table's retention properties contradict each other: `delta.logRetentionDuration` shorter than
    `delta.deletedFileRetentionDuration` (Delta >= 4.1 refuses to set such properties, Spark
    `vacuum.enforceDeletedFileAndLogRetentionDurationCompatibility`); nothing was deleted."""

    error_class = "DELTA_RETENTION_CONFLICT"
    extra_fields = ("log_retention_ms", "deleted_file_retention_ms")

    def __init__(
        self,
        message: str,
        *,
        log_retention_ms: int | None = None,
        deleted_file_retention_ms: int | None = None,
        table: str | None = None,
        version: int | None = None,
    ) -> None:
        self.log_retention_ms = log_retention_ms
        self.deleted_file_retention_ms = deleted_file_retention_ms
        super().__init__(message, table=table, version=version)


class LeaseError(DeltaError):
    """A version lease that cannot be read (a malformed lease file: maintenance refuses to run past it) or
    released (no such lease). `lease_id` names it."""

    error_class = "DELTA_LEASE_ERROR"
    extra_fields = ("lease_id",)

    def __init__(
        self, message: str, *, lease_id: str | None = None, table: str | None = None, file: str | None = None
    ) -> None:
        self.lease_id = lease_id
        super().__init__(message, table=table, file=file)


class QuarantineError(DeltaError):
    """A VACUUM quarantine (`maintenance.quarantine`) that cannot be undone, resumed or purged as asked: no
    such quarantine, a damaged manifest, another table's (its `metaData.id`), a purge under way, or
    something else now at a path a file must go back to (`paths` names them; nothing was moved).
    `quarantine_id` names the quarantine."""

    error_class = "DELTA_VACUUM_QUARANTINE"
    extra_fields = ("quarantine_id", "paths")

    def __init__(
        self,
        message: str,
        *,
        quarantine_id: str | None = None,
        paths: list[str] | None = None,
        table: str | None = None,
        file: str | None = None,
    ) -> None:
        self.quarantine_id = quarantine_id
        self.paths = list(paths or [])
        super().__init__(message, table=table, file=file)


class UnsupportedStoreError(OperationNotAllowedError):
    """The store cannot do what a write needs (an atomic put-if-absent for commits, or any write at
    all for a read-only store); nothing was written."""

    error_class = "DELTA_UNSUPPORTED_STORE"


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
    `file` and the class's `extra_fields` are restored as fields.
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
    for extra in cls.extra_fields:
        setattr(err, extra, data.get(extra))
    if isinstance(err, StorageError):
        err.transient = bool(data.get("transient", False))
    return err


# -- argument checks: every public entry point refuses bad arguments with the same typed errors --------


def check_int(value: Any, argument: str, *, minimum: int | None = None, table: str | None = None) -> int:
    """`value` as an `int` (>= `minimum`); booleans, strings and floats are refused."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise InvalidArgumentError(
            f"{argument} must be an integer, got {type(value).__name__} {value!r}", argument=argument, table=table
        )
    number = int(value)
    if minimum is not None and number < minimum:
        raise InvalidArgumentError(f"{argument} must be >= {minimum}, got {number}", argument=argument, table=table)
    return number


def check_number(
    value: Any, argument: str, *, minimum: float = 0, maximum: float = math.inf, table: str | None = None
) -> float:
    """`value` as a finite `float` in [`minimum`, `maximum`]; booleans, strings, NaN and infinities are refused."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise InvalidArgumentError(
            f"{argument} must be a number, got {type(value).__name__} {value!r}", argument=argument, table=table
        )
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
        raise InvalidArgumentError(
            f"{argument} must be True or False, got {type(value).__name__} {value!r}", argument=argument, table=table
        )
    return value
