"""`Snapshot`: the state of a table at one version, as replay resolved it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from .errors import (
    DeltaError,
    InvalidArgumentError,
    MissingMetadataError,
    MissingProtocolError,
    check_int,
    check_number,
)
from .protocol.actions import (
    Action,
    AddFile,
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    SetTransaction,
)
from .protocol.filenames import FileInfo, LogFileKind, ParsedLogPath, commit_name
from .protocol.history import commit_times
from .protocol.log_segment import LogSegment, parse_listing
from .protocol.table_features import check_can_read
from .protocol.table_properties import (
    DEFAULT_SMALL_FILE_BYTES,
    column_mapping_mode,
    deleted_file_retention_ms,
    ict_enablement_version,
    in_commit_timestamps_enabled,
    set_transaction_retention_ms,
)
from .read.table_state import TableState
from .storage import LogStore

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

    from .engines import Engine
    from .protocol.predicate import Expr
    from .protocol.schema import StructType
    from .read.aggregates import FileSummary, TombstoneSummary
    from .txn.transaction import Transaction

Clock = Callable[[], int]


class Snapshot:
    """A table version: protocol, metadata, txns, domains, active files and tombstones. Built by `DeltaLog`;
    refuses a state without protocol or metadata, or whose protocol this reader does not support."""

    def __init__(
        self,
        *,
        table: str,
        log_dir: str,
        segment: LogSegment,
        state: TableState,
        store: LogStore,
        clock: Clock,
        engine: Engine,
    ) -> None:
        if state.protocol is None:
            raise MissingProtocolError("No protocol found in the log", table=table, version=segment.version)
        if state.metadata is None:
            raise MissingMetadataError("No metadata found in the log", table=table, version=segment.version)
        check_can_read(state.protocol, table=table, version=segment.version)
        self.table = table
        self.log_dir = log_dir
        self.log_segment = segment
        self.state = state
        #: The engine that replayed this snapshot (it runs the heavy work of operations on it).
        self.engine: Engine = engine
        self._store = store
        self._clock = clock

    def __repr__(self) -> str:
        return f"Snapshot(table={self.table!r}, version={self.version}, num_files={self.num_files})"

    @property
    def version(self) -> int:
        return self.log_segment.version

    @property
    def protocol(self) -> Protocol:
        assert self.state.protocol is not None
        return self.state.protocol

    @property
    def metadata(self) -> Metadata:
        assert self.state.metadata is not None
        return self.state.metadata

    @cached_property
    def schema(self) -> StructType:
        from .protocol.schema import StructType

        return StructType.from_json(self.metadata.schema_json)

    @property
    def partition_columns(self) -> tuple[str, ...]:
        return self.metadata.partition_columns

    @property
    def configuration(self) -> dict[str, str | None]:
        return dict(self.metadata.configuration)

    @property
    def column_mapping_mode(self) -> str:
        return column_mapping_mode(self.metadata.configuration)

    @property
    def physical_partition_columns(self) -> dict[str, str]:
        """Logical partition column -> its key in `partitionValues` (the physical name under column mapping)."""
        from .protocol.schema import physical_partition_columns

        return physical_partition_columns(self.schema, self.partition_columns, self.column_mapping_mode)

    @cached_property
    def commit_info(self) -> CommitInfo | None:
        """The commitInfo at this version (read on demand when replay did not see it)."""
        if self.state.last_commit_info is not None:
            return self.state.last_commit_info
        from .read.commits import read_commit

        path = self._store.join(self.log_dir, commit_name(self.version))
        commit = ParsedLogPath(FileInfo(path, 0, 0), self.version, LogFileKind.COMMIT)
        try:
            actions = read_commit(self._store, self.table, commit)
        except DeltaError:  # no commit file at a checkpoint-only version, or an unreadable one
            return None
        return next((a for a in actions if isinstance(a, CommitInfo)), None)

    @cached_property
    def timestamp(self) -> int:
        """Commit time in ms (`protocol.history`): the in-commit timestamp when enabled, else the file times
        made strictly increasing over the retained commits, as timestamp time travel reads them."""
        conf = self.metadata.configuration
        if in_commit_timestamps_enabled(conf) and self.version >= ict_enablement_version(conf):
            info = self.commit_info
            if info is not None and info.in_commit_timestamp is not None:
                return info.in_commit_timestamp
        commits: Iterable[ParsedLogPath] = self.log_segment.commits  # from version 0 when there is no checkpoint
        if self.log_segment.checkpoint is not None:
            commits = (p for p in parse_listing(self._store.list_from(self.log_dir)) if p.kind is LogFileKind.COMMIT)
        timed = commit_times(
            sorted((c.version, c.file.modification_time, None) for c in commits if c.version <= self.version)
        )
        return dict(timed).get(self.version, self.file_timestamp)

    @property
    def file_timestamp(self) -> int:
        """Modification time (ms) of this version's commit file (its checkpoint's when no commit is retained)."""
        return self.log_segment.last_modification_time

    @property
    def min_set_transaction_retention_timestamp(self) -> int | None:
        ms = set_transaction_retention_ms(self.metadata.configuration)
        return None if ms is None else self._clock() - ms

    @cached_property
    def set_transactions(self) -> dict[str, SetTransaction]:
        """Latest txn per appId, after `delta.setTransactionRetentionDuration` when it is set."""
        cutoff = self.min_set_transaction_retention_timestamp
        txns = dict(self.state.transactions)
        if cutoff is None:
            return txns
        return {k: t for k, t in txns.items() if t.last_updated is not None and t.last_updated > cutoff}

    def transaction_version(self, app_id: str) -> int | None:
        txn = self.set_transactions.get(app_id)
        return None if txn is None else txn.version

    @property
    def domain_metadata(self) -> dict[str, DomainMetadata]:
        return dict(self.state.domain_metadata)

    @property
    def add_files_table(self) -> pa.Table:
        """Active files as an Arrow table (paths as logged, stats as raw JSON)."""
        return self.state.files.adds_with_stats

    @property
    def remove_files_table(self) -> pa.Table:
        """Every tombstone replay holds (expired ones included) as an Arrow table."""
        return self.state.files.removes

    @property
    def num_files(self) -> int:
        return self.state.files.num_files

    @property
    def size_in_bytes(self) -> int:
        return self.state.files.size_in_bytes

    def partition_values(self, add: AddFile) -> dict[str, Any]:
        """`add`'s partition values typed by the schema, by logical column name; `""` and missing are None."""
        from .protocol.schema import parse_partition_value

        out: dict[str, Any] = {}
        for name, key in self.physical_partition_columns.items():
            field = self.schema.get(name)
            raw = add.partition_values.get(key, add.partition_values.get(name))
            out[name] = raw if field is None else parse_partition_value(raw, field.type_name)
        return out

    def all_files(self, *, with_stats: bool = True) -> Iterator[AddFile]:
        """Every active file, made on demand (`with_stats=False` skips reading checkpoint stats)."""
        files = self.state.files
        from .read.file_state import iter_adds

        return iter_adds(files.adds_with_stats if with_stats else files.adds)

    def files(
        self,
        where: str | Expr | None = None,
        *,
        partition_filters: Iterable[Sequence[Any]] | None = None,
        data_filters: Iterable[Sequence[Any]] | None = None,
        with_stats: bool = False,
    ) -> list[AddFile]:
        """Active files that may hold rows matching `where` (a `protocol.predicate` text or expression) and the
        `(column, op, value)` filters, ANDed (partition pruning and data skipping). A list given as `where` is
        read as `partition_filters`. `with_stats`: the files carry their stats even when the predicate does
        not need them (without one they always do)."""
        from .protocol.predicate import Expr, parse_predicate
        from .read.file_index import file_predicate, matching_files

        if where is not None and not isinstance(where, str) and isinstance(where, Sequence):
            where, partition_filters = None, [*where, *(partition_filters or ())]  # files([(col, op, value)])
        if isinstance(where, str):
            where = parse_predicate(where, label="where")
        elif where is not None and not isinstance(where, Expr):
            raise InvalidArgumentError(f"where must be a predicate or its text, got {where!r}", argument="where")
        expr = file_predicate(self.schema, self.partition_columns, where, partition_filters, data_filters)
        parts = {c.casefold() for c in self.partition_columns}
        skipping = expr is not None and any(c.casefold() not in parts for c in expr.columns())
        adds = self.all_files(with_stats=with_stats or skipping or expr is None)
        if expr is None:
            return list(adds)
        mapped = self.column_mapping_mode != "none"
        return matching_files(adds, expr, self.schema, self.partition_columns, column_mapping=mapped, table=self.table)

    @property
    def tombstone_retention_ms(self) -> int:
        """`delta.deletedFileRetentionDuration` in ms (default one week)."""
        return deleted_file_retention_ms(self.metadata.configuration)

    @property
    def min_file_retention_timestamp(self) -> int:
        """Tombstones deleted at or before this time (ms) are past retention."""
        return self._clock() - self.tombstone_retention_ms

    @property
    def store(self) -> LogStore:
        """The store this snapshot was read through (writes to the table go through it too)."""
        return self._store

    def transaction(self, operation: str, parameters: Mapping[str, Any] | None = None, **options: Any) -> Transaction:
        """A transaction on this snapshot for `operation` (`WRITE`, `OPTIMIZE`, ...; see `start_transaction`)."""
        from .txn.transaction import start_transaction

        return start_transaction(self, operation, parameters, **options)

    def now_ms(self) -> int:
        """The current time by this snapshot's clock (injectable through `DeltaLog.for_table`)."""
        return self._clock()

    def retention_window_ms(self, retention_hours: float | None = None) -> int:
        """Tombstone retention in ms: `retention_hours` when given, else the table's setting."""
        if retention_hours is None:
            return self.tombstone_retention_ms
        return int(check_number(retention_hours, "retention_hours", maximum=1e12, table=self.table) * 3_600_000)

    def retention_cutoff(self, retention_hours: float | None = None, now_ms: int | None = None) -> int:
        """Tombstones deleted at or before this time (ms) are past retention."""
        now = self.now_ms() if now_ms is None else check_int(now_ms, "now_ms", table=self.table)
        return now - self.retention_window_ms(retention_hours)

    def tombstones(
        self,
        retention_hours: float | None = None,
        *,
        now_ms: int | None = None,
        include_expired: bool = False,
    ) -> list[RemoveFile]:
        """Removed files still inside retention (`deletionTimestamp > now - retention`); `retention_hours`
        overrides the table's, `include_expired=True` returns every tombstone the log holds."""
        files = self.state.files
        from .read import arrow_compute as pc
        from .read.arrow_build import int64_scalar
        from .read.file_state import iter_removes

        table = files.removes
        if not include_expired and table.num_rows:
            cutoff = self.retention_cutoff(retention_hours, now_ms)
            ts = pc.fill_null(table.column("deletionTimestamp"), int64_scalar(0))
            table = pc.filter(table, pc.greater(ts, int64_scalar(cutoff)))
        return list(iter_removes(table))

    def uncache(self) -> None:
        """Release the cluster memory this state holds (the Spark engine's persisted RDDs); the snapshot stays
        usable. `DeltaLog.update()` does this for the snapshot it replaces, as Delta's `SnapshotManagement`."""
        self.state.files.uncache()

    def num_tombstones(self, retention_hours: float | None = None, *, now_ms: int | None = None) -> int:
        """How many tombstones are still inside retention."""
        return self.state.files.count_tombstones_after(self.retention_cutoff(retention_hours, now_ms))

    def tombstone_summary(self, retention_hours: float | None = None, *, now_ms: int | None = None) -> TombstoneSummary:
        """Every tombstone split at the retention cutoff, per partition (on executors with Spark)."""
        cutoff = self.retention_cutoff(retention_hours, now_ms)
        return self.state.files.tombstone_summary(cutoff, self.partition_columns)

    def file_summary(self, small_file_bytes: int = DEFAULT_SMALL_FILE_BYTES) -> FileSummary:
        """Counts and sizes of the active files (on executors with Spark)."""
        return self.state.files.file_summary(
            check_int(small_file_bytes, "small_file_bytes", minimum=0, table=self.table)
        )

    def num_distinct_paths(self) -> int:
        """Distinct paths among active files; below `num_files` when a path is active twice."""
        return self.state.files.num_distinct_paths()

    def checkpoint(self) -> Iterator[Action]:
        """The state as checkpoint actions: protocol, metadata, domains, txns, then active files and unexpired
        tombstones sorted by path."""
        yield self.protocol
        yield self.metadata
        yield from self.domain_metadata.values()
        yield from self.set_transactions.values()
        files: list[AddFile | RemoveFile] = [*self.all_files(), *self.tombstones()]
        files.sort(key=lambda f: f.path)
        yield from files
