"""`DeltaLog`: the entry point for one table (Spark `DeltaLog` + `SnapshotManagement`).

It lists `_delta_log` (from the `_last_checkpoint` hint), builds a validated `LogSegment` and has an engine
replay it into a `Snapshot`; `update()` replays only new commits onto the current state. A snapshot's segment
is pinned to one listing, so a commit landing meanwhile is simply not part of it.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from itertools import pairwise
from typing import TYPE_CHECKING, Any, ClassVar

from .errors import (
    DeltaError,
    InvalidArgumentError,
    LogGapError,
    MalformedCheckpointError,
    StorageError,
    TableNotFoundError,
    TruncatedLogError,
    UnsupportedFeatureError,
    VersionNotFoundError,
    check_bool,
    check_int,
    check_number,
)
from .protocol.actions import Action, CommitInfo
from .protocol.filenames import (
    LAST_CHECKPOINT_NAME,
    LOG_DIR_NAME,
    FileInfo,
    LogFileKind,
    ParsedLogPath,
    commit_name,
    version_prefix,
)
from .protocol.history import active_commit_at, commit_times, to_epoch_ms
from .protocol.last_checkpoint import LastCheckpointHint, parse_last_checkpoint
from .protocol.log_segment import (
    LogSegment,
    build_log_segment,
    earliest_recreatable_version,
    latest_version_in,
    parse_listing,
)
from .protocol.table_properties import ict_enablement_version, in_commit_timestamps_enabled
from .storage import LocalLogStore, LogStore, normalize_table_uri, store_for

if TYPE_CHECKING:  # pragma: no cover - pyarrow-backed modules load on first replay, not on import
    from .engines import Engine
    from .snapshot import Snapshot

log = logging.getLogger(__name__)

Clock = Callable[[], int]
#: How many times a snapshot load falls back to an older checkpoint when one is unreadable (Spark: 2).
MAX_CHECKPOINT_RETRIES = 2


def system_clock() -> int:
    return time.time_ns() // 1_000_000


def _table_uri(path: Any) -> str:
    if not isinstance(path, str | os.PathLike) or not str(path):
        raise InvalidArgumentError(f"table_uri must be a path or URI string, got {path!r}", argument="table_uri")
    return normalize_table_uri(str(path))


def _store_for(uri: str, storage_options: Mapping[str, Any] | None) -> LogStore:
    """`store_for`, with an unknown URI scheme, a missing filesystem package or bad options as typed errors."""
    if storage_options is not None and not isinstance(storage_options, Mapping):
        raise InvalidArgumentError(
            f"storage_options must be a mapping, got {storage_options!r}", argument="storage_options"
        )
    try:
        return store_for(uri, storage_options)
    except ImportError as exc:
        raise UnsupportedFeatureError(
            f"No filesystem for this URI: {exc}", feature=uri.split(":")[0], table=uri
        ) from None
    except (ValueError, TypeError) as exc:  # fsspec: "Protocol not known: foo"; a client refusing an option
        raise InvalidArgumentError(
            f"table_uri: cannot open the table: {exc}", argument="table_uri", table=uri
        ) from None


def commit_files(listing: Iterable[FileInfo], start: int = 0) -> list[ParsedLogPath]:
    """The commit files of a listing from version `start` on, oldest first."""
    found = (p for p in parse_listing(listing) if p.kind is LogFileKind.COMMIT and p.version >= start)
    return sorted(found, key=lambda p: p.version)


def _options_digest(options: Mapping[str, Any] | None) -> str:
    if not options:
        return ""
    import hashlib  # here, not at module level: OpenSSL's loading is a few ms of every sensor's import

    text = json.dumps({str(k): str(v) for k, v in options.items()}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class DeltaLog:
    """The transaction log of one Delta table."""

    _cache: ClassVar[dict[tuple[str, str, int, int], DeltaLog]] = {}
    _cache_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(
        self,
        table_uri: str,
        *,
        storage_options: Mapping[str, Any] | None = None,
        clock: Clock | None = None,
        engine: Engine | None = None,
        store: LogStore | None = None,
    ) -> None:
        self.table_uri = _table_uri(table_uri)
        self.store: LogStore = store or _store_for(self.table_uri, storage_options)
        self.log_dir = self.store.join(self.table_uri, LOG_DIR_NAME)
        self.clock: Clock = clock or system_clock
        self._engine: Engine | None = engine
        self._current: Snapshot | None = None
        self._lock = threading.RLock()
        self.last_update_timestamp: int = -1

    def __repr__(self) -> str:
        return f"DeltaLog({self.table_uri!r})"

    @property
    def engine(self) -> Engine:
        """The engine that replays segments: the local one unless one was given, made on first replay so that
        probes like `latest_version()` never import pyarrow."""
        if self._engine is None:
            from .engines.local import LocalEngine

            self._engine = LocalEngine()
        return self._engine

    @classmethod
    def of(
        cls,
        table_or_log: DeltaLog | str | Any,
        storage_options: Mapping[str, Any] | None = None,
        clock: Clock | None = None,
    ) -> DeltaLog:
        """`table_or_log` itself when it is a `DeltaLog`, else a new one for that path or URI."""
        if isinstance(table_or_log, DeltaLog):
            return table_or_log
        return cls(str(table_or_log), storage_options=storage_options, clock=clock)

    @classmethod
    def for_table(
        cls,
        path: str | Any,
        storage_options: Mapping[str, Any] | None = None,
        clock: Clock | None = None,
        engine: Engine | None = None,
    ) -> DeltaLog:
        """The cached `DeltaLog` of the table at `path` (a local path or an fsspec URI)."""
        uri = _table_uri(path)
        key = (uri, _options_digest(storage_options), id(clock) if clock else 0, id(engine) if engine else 0)
        with cls._cache_lock:
            found = cls._cache.get(key)
            if found is None:
                found = cls(uri, storage_options=storage_options, clock=clock, engine=engine)
                cls._cache[key] = found
            return found

    @classmethod
    def invalidate_cache(cls, path: str | Any) -> None:
        """Forget every cached `DeltaLog` of the table at `path`."""
        uri = normalize_table_uri(str(path))
        with cls._cache_lock:
            for key in [k for k in cls._cache if k[0] == uri]:
                del cls._cache[key]

    @classmethod
    def clear_cache(cls) -> None:
        with cls._cache_lock:
            cls._cache.clear()

    def _storage_error(self, exc: Exception, file: str | None = None) -> StorageError:
        message = f"Storage error: {type(exc).__name__}: {exc}"
        return StorageError(message, table=self.table_uri, file=file, transient=not isinstance(exc, PermissionError))

    def _no_table(self, why: str = "_delta_log holds no commit or checkpoint") -> TableNotFoundError:
        return TableNotFoundError(f"No Delta table: {why}", table=self.table_uri)

    def read_last_checkpoint(self) -> LastCheckpointHint | None:
        """The `_last_checkpoint` hint, or None when it is missing or unusable."""
        try:
            data = self.store.read_bytes(self.store.join(self.log_dir, LAST_CHECKPOINT_NAME))
        except (FileNotFoundError, IsADirectoryError):
            return None
        except OSError as exc:
            raise self._storage_error(exc, LAST_CHECKPOINT_NAME) from exc
        return parse_last_checkpoint(data, origin=f"{self.table_uri}/_delta_log/_last_checkpoint")

    def list_log(self, start_version: int = 0) -> list[FileInfo]:
        """`_delta_log` files named from `start_version` on, sorted."""
        start = version_prefix(start_version) if start_version > 0 else ""
        try:
            return self.store.list_from(self.log_dir, start)
        except OSError as exc:
            raise self._storage_error(exc) from exc

    def _listing(self, start_version: int = 0) -> list[FileInfo]:
        listing = self.list_log(start_version)
        if not listing and not self.store.is_dir(self.log_dir):
            raise self._no_table("_delta_log does not exist")
        return listing

    def _segment_for(self, version: int | None) -> tuple[LogSegment, list[FileInfo], bool]:
        """Segment for `version`, trying a listing from the hint first; (segment, listing, is_full)."""
        hint = self.read_last_checkpoint()
        if hint is not None and hint.version > 0 and (version is None or hint.version <= version):
            listing = self.list_log(hint.version)
            try:
                segment = build_log_segment(self.table_uri, listing, version)
            except DeltaError:
                segment = None  # dangling or stale hint: fall back to the whole listing
            if segment is not None and segment.checkpoint is not None:
                return segment, listing, False
            log.info("_last_checkpoint (version %s) gave no usable checkpoint; listing the whole log", hint.version)
        listing = self._listing()
        if not parse_listing(listing):
            raise self._no_table()
        return build_log_segment(self.table_uri, listing, version), listing, True

    def log_segment(self, version: int | None = None) -> LogSegment:
        """The segment a load of `version` (default: the latest) would replay, from the listing alone."""
        if version is not None:
            check_int(version, "version", minimum=0, table=self.table_uri)
        return self._segment_for(version)[0]

    def load_segment(self, segment: LogSegment) -> Snapshot:
        """The snapshot of a segment `log_segment()` returned, without listing again (a caller sized it first,
        e.g. to choose an engine); a malformed checkpoint falls back to a fresh load at its version."""
        try:
            state = self.engine.load_state(self.table_uri, self.log_dir, self.store, segment)
        except MalformedCheckpointError as exc:
            log.warning("%s; reloading version %d from a fresh listing", exc, segment.version)
            return self._load(segment.version)
        return self._snapshot(segment, state)

    def _snapshot(self, segment: LogSegment, state: Any) -> Snapshot:
        from .snapshot import Snapshot

        return Snapshot(
            table=self.table_uri,
            log_dir=self.log_dir,
            segment=segment,
            state=state,
            store=self.store,
            clock=self.clock,
            engine=self.engine,
        )

    def _load(self, version: int | None = None) -> Snapshot:
        segment, listing, full = self._segment_for(version)
        excluded: list[tuple[str, ...]] = []
        while True:
            try:
                state = self.engine.load_state(self.table_uri, self.log_dir, self.store, segment)
                return self._snapshot(segment, state)
            except MalformedCheckpointError as exc:
                # Spark retries with an older checkpoint (`createSnapshotFromGivenOrEquivalentLogSegment`).
                if segment.checkpoint is None or len(excluded) >= MAX_CHECKPOINT_RETRIES:
                    raise
                excluded.append(segment.checkpoint.names)
                log.warning("%s; retrying with an older checkpoint", exc)
                if not full:
                    listing, full = self._listing(), True
                try:
                    segment = build_log_segment(self.table_uri, listing, version, exclude_checkpoints=excluded)
                except DeltaError:
                    raise exc from None

    @property
    def snapshot(self) -> Snapshot:
        """The current snapshot (loaded on first use; call `update()` to refresh)."""
        with self._lock:
            return self._current if self._current is not None else self.update()

    def update(self, staleness_acceptable: bool = False, *, staleness_limit_ms: int | None = None) -> Snapshot:
        """The latest snapshot, replaying only new commits when the current state can be extended. With
        `staleness_acceptable=True` a loaded snapshot updated less than `staleness_limit_ms` ago (Delta's
        `stalenessLimit`; None: no limit) is returned without listing."""
        check_bool(staleness_acceptable, "staleness_acceptable", table=self.table_uri)
        if staleness_limit_ms is not None:
            check_number(staleness_limit_ms, "staleness_limit_ms", table=self.table_uri)
        with self._lock:
            current = self._current
            if current is not None and staleness_acceptable:
                age = self.clock() - self.last_update_timestamp
                if staleness_limit_ms is None or age < staleness_limit_ms:
                    return current
            if current is None:
                snapshot = self._load()
            else:
                snapshot = self._update_from(current)
                if snapshot is not current:
                    current.uncache()  # its cluster memory (Spark engine); it stays usable
            self._current = snapshot
            self.last_update_timestamp = self.clock()
            return snapshot

    def _update_from(self, current: Snapshot) -> Snapshot:
        new = commit_files(self.list_log(current.version + 1), current.version + 1)
        if not new:
            return current
        if new[0].version != current.version + 1 or any(b.version != a.version + 1 for a, b in pairwise(new)):
            return self._load()  # a gap: let a full segment (maybe a newer checkpoint) decide
        segment = current.log_segment.extend(new)
        state = self.engine.extend_state(self.table_uri, self.log_dir, self.store, current.state, segment)
        return self._snapshot(segment, state)

    def snapshot_at(
        self,
        version: int | None = None,
        *,
        timestamp: int | str | dt.datetime | None = None,
        can_return_last_commit: bool = False,
    ) -> Snapshot:
        """The snapshot at `version`, or at the latest commit at or before `timestamp` (Spark semantics, as
        `commit_timestamps`): before the first commit or after the last one (unless `can_return_last_commit`)
        is a `TimestampOutOfRangeError`."""
        if (version is None) == (timestamp is None):
            raise InvalidArgumentError(
                "give exactly one of version or timestamp", argument="version", table=self.table_uri
            )
        check_bool(can_return_last_commit, "can_return_last_commit", table=self.table_uri)
        if timestamp is None:
            version = check_int(version, "version", minimum=0, table=self.table_uri)
        else:
            ms = to_epoch_ms(timestamp, argument="timestamp")
            version = active_commit_at(
                self.table_uri, self.commit_timestamps(), ms, can_return_last_commit=can_return_last_commit
            )
        current = self._current
        if current is not None and current.version == version:
            return current
        try:
            return self._load(version)
        except (VersionNotFoundError, TruncatedLogError) as exc:
            listing = self._listing()
            earliest = earliest_recreatable_version(self.table_uri, listing)
            latest = latest_version_in(listing)
            beyond = isinstance(exc, VersionNotFoundError) and latest is not None and version > latest
            if beyond:
                message = f"Trying to load a non-existent version {version}; the latest version is {latest}"
            elif earliest is not None:
                message = f"Cannot time travel to version {version}: available versions are [{earliest}, {latest}]"
            else:
                message = (
                    f"Cannot time travel to version {version}: no retained checkpoint or commit history "
                    f"reconstructs any version ({exc.message})"
                )
            raise VersionNotFoundError(
                message,
                table=self.table_uri,
                version=version,
                earliest=earliest,
                latest=latest,
                file=None if beyond else exc.file,
            ) from None

    def latest_version(self) -> int:
        """The newest committed version from `_last_checkpoint` and the listing alone (no replay): locally by
        probing `N.json` names forward from the hint (cost independent of the log's length), elsewhere by one
        listing from the hint's version."""
        hint = self.read_last_checkpoint()
        if hint is not None and isinstance(self.store, LocalLogStore):
            found = self._probe_forward(hint.version)
            if found is not None:
                return found
        listing = self.list_log(hint.version) if hint is not None else []
        found = latest_version_in(listing)
        if found is None:
            found = latest_version_in(self._listing())
        if found is None:
            raise self._no_table()
        return found

    def _commit_exists(self, version: int) -> bool:
        return self.store.head(self.store.join(self.log_dir, commit_name(version))) is not None

    def _probe_forward(self, start: int) -> int | None:
        """Highest version with a commit file, probing from `start` (commits are contiguous)."""
        if not self._commit_exists(start):
            return None
        lo, step = start, 1
        while self._commit_exists(lo + step):
            lo += step
            step *= 2
        hi = lo + step  # lo exists, hi does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._commit_exists(mid):
                lo = mid
            else:
                hi = mid
        return lo

    def table_exists(self) -> bool:
        try:
            self.latest_version()
        except TableNotFoundError:
            return False
        return True

    def _commit_info(self, commit: ParsedLogPath) -> CommitInfo | None:
        from .read.commits import read_commit

        return next((a for a in read_commit(self.store, self.table_uri, commit) if isinstance(a, CommitInfo)), None)

    def _timed(self, infos: Mapping[int, CommitInfo | None]) -> list[tuple[ParsedLogPath, int]]:
        """Every listed commit, oldest first, with its commit time (`protocol.history`): the in-commit
        timestamps of `infos` (commits not in it count by their file time) and adjusted file times."""
        commits = commit_files(self._listing())
        icts = {v: i.in_commit_timestamp for v, i in infos.items() if i is not None}
        times = commit_times([(c.version, c.file.modification_time, icts.get(c.version)) for c in commits])
        return [(c, t) for c, (_, t) in zip(commits, times, strict=True)]

    def commit_summary(self, version: int) -> dict[str, Any]:
        """`version`, `timestamp` (commit time, ms: the rule in `protocol.history`), `file_modification_time`
        and `operation` of one commit: what a sensor reports (reads that commit file and the listing)."""
        check_int(version, "version", minimum=0, table=self.table_uri)
        try:
            found = self.store.head(self.store.join(self.log_dir, commit_name(version)))
        except OSError as exc:
            raise self._storage_error(exc, commit_name(version)) from None
        if found is None:
            raise VersionNotFoundError(
                "No commit file for this version", table=self.table_uri, version=version, file=commit_name(version)
            )
        info = self._commit_info(ParsedLogPath(found, version, LogFileKind.COMMIT))
        ts = next((t for c, t in self._timed({version: info}) if c.version == version), found.modification_time)
        return {
            "version": version,
            "timestamp": ts,
            "file_modification_time": found.modification_time,
            "operation": None if info is None else info.operation,
        }

    def commit_timestamps(self) -> list[tuple[int, int]]:
        """(version, commit time ms) for every retained, recreatable commit, oldest first: strictly
        increasing, the times timestamp time travel (`snapshot_at(timestamp=...)`) uses."""
        listing = self._listing()
        earliest = earliest_recreatable_version(self.table_uri, listing) or 0
        conf = self.update().metadata.configuration
        ict_from = ict_enablement_version(conf) if in_commit_timestamps_enabled(conf) else None
        infos = {}
        if ict_from is not None:
            infos = {c.version: self._commit_info(c) for c in commit_files(listing, ict_from)}
        return [(c.version, t) for c, t in self._timed(infos) if c.version >= earliest]

    def history(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Commit infos, newest first: the commitInfo fields, `version`, `timestamp` (commit time, ms) and
        `file_modification_time` (the commit file's own time, ms)."""
        if limit is not None:
            check_int(limit, "limit", minimum=0, table=self.table_uri)
        listing = self._listing()
        commits = commit_files(listing)
        if not commits and not parse_listing(listing):
            raise self._no_table()
        shown = commits[::-1][:limit]
        infos = {c.version: self._commit_info(c) for c in shown}
        times = {c.version: t for c, t in self._timed(infos)}
        return [
            {
                **(dict(info.raw) if (info := infos[c.version]) is not None else {}),
                "version": c.version,
                "timestamp": times[c.version],
                "file_modification_time": c.file.modification_time,
            }
            for c in shown
        ]

    def get_changes(self, start_version: int, fail_on_data_loss: bool = False) -> Iterator[tuple[int, list[Action]]]:
        """(version, actions) of every commit from `start_version` on, in order; a missing commit (cleaned up,
        or a gap) raises `LogGapError` with `fail_on_data_loss`, else is skipped. Arguments are checked on the
        call, before iteration."""
        check_int(start_version, "start_version", minimum=0, table=self.table_uri)
        check_bool(fail_on_data_loss, "fail_on_data_loss", table=self.table_uri)
        commits = commit_files(self._listing(start_version), start_version)
        return self._changes(commits, start_version, fail_on_data_loss)

    def _changes(
        self, commits: list[ParsedLogPath], start_version: int, fail_on_data_loss: bool
    ) -> Iterator[tuple[int, list[Action]]]:
        from .read.commits import read_commit

        expected = start_version
        for c in commits:
            if c.version != expected and fail_on_data_loss:
                raise LogGapError(
                    f"Commits {expected}..{c.version - 1} are missing; changes since {start_version} are lost",
                    table=self.table_uri,
                    version=expected,
                )
            yield c.version, read_commit(self.store, self.table_uri, c)
            expected = c.version + 1
