"""Which files make version N: a validated `LogSegment` from a listing (pure; Spark
`SnapshotManagement.getLogSegmentForVersion`, delta-kernel-rs `LogSegment::for_snapshot`).

Compactions are ignored (optional; plain replay is the reference). The newest complete checkpoint wins by
(version, classic < multi-part < V2, parts, name); the commits after it must be contiguous and reach the
target. A checkpoint with no commit file at its own version loads (delta-rs does; Spark refuses): the
state it describes is complete.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise

from ..errors import IncompleteCheckpointError, LogGapError, TableNotFoundError, TruncatedLogError, VersionNotFoundError
from .filenames import FileInfo, LogFileKind, ParsedLogPath, parse_log_path

_FORMAT_RANK = {LogFileKind.CHECKPOINT_CLASSIC: 0, LogFileKind.CHECKPOINT_MULTIPART: 1, LogFileKind.CHECKPOINT_UUID: 2}


@dataclass(frozen=True, slots=True)
class CheckpointInstance:
    """One complete checkpoint: a classic file, a V2 top-level file, or all parts of a multi-part one."""

    version: int
    kind: LogFileKind
    files: tuple[ParsedLogPath, ...]

    @property
    def num_parts(self) -> int:
        return len(self.files)

    @property
    def order_key(self) -> tuple[int, int, int, str]:
        return (self.version, _FORMAT_RANK[self.kind], self.num_parts, self.files[0].name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.files)


@dataclass(frozen=True, slots=True)
class LogSegment:
    """The checkpoint and commits whose replay gives `version` of a table."""

    table: str
    version: int
    checkpoint: CheckpointInstance | None
    commits: tuple[ParsedLogPath, ...]

    @property
    def checkpoint_version(self) -> int | None:
        return None if self.checkpoint is None else self.checkpoint.version

    @property
    def last_modification_time(self) -> int:
        """Modification time of the newest file of the segment (the commit at `version`, if any)."""
        if self.commits:
            return self.commits[-1].file.modification_time
        assert self.checkpoint is not None
        return max(f.file.modification_time for f in self.checkpoint.files)

    @property
    def files(self) -> tuple[ParsedLogPath, ...]:
        cp = () if self.checkpoint is None else self.checkpoint.files
        return (*cp, *self.commits)

    @property
    def size_in_bytes(self) -> int:
        """Bytes of log to read for this segment (V2 sidecars not included: they are found on reading)."""
        return sum(f.file.size for f in self.files)

    def extend(self, new_commits: Sequence[ParsedLogPath]) -> LogSegment:
        """This segment with later contiguous commits appended (an incremental update)."""
        if not new_commits:
            return self
        validate_contiguous(self.table, [self.version, *(c.version for c in new_commits)])
        return LogSegment(self.table, new_commits[-1].version, self.checkpoint, (*self.commits, *new_commits))


def parse_listing(listing: Iterable[FileInfo]) -> list[ParsedLogPath]:
    """Log files of a listing, by name; zero-length checkpoint files are dropped (Spark `getLen > 0`)."""
    parsed = (parse_log_path(info) for info in listing)
    return [p for p in parsed if p is not None and not (p.kind.is_checkpoint and p.file.size == 0)]


def complete_checkpoints(files: Iterable[ParsedLogPath]) -> list[CheckpointInstance]:
    """Every complete checkpoint instance among `files`, oldest first by `order_key`."""
    out: list[CheckpointInstance] = []
    multipart: dict[tuple[int, int], dict[int, ParsedLogPath]] = defaultdict(dict)
    for f in files:
        if f.kind in (LogFileKind.CHECKPOINT_CLASSIC, LogFileKind.CHECKPOINT_UUID):
            out.append(CheckpointInstance(f.version, f.kind, (f,)))
        elif f.kind is LogFileKind.CHECKPOINT_MULTIPART:
            assert f.part is not None and f.num_parts is not None
            multipart[(f.version, f.num_parts)][f.part] = f
    for (version, n), parts in multipart.items():
        if len(parts) == n:
            out.append(
                CheckpointInstance(version, LogFileKind.CHECKPOINT_MULTIPART, tuple(parts[i] for i in range(1, n + 1)))
            )
    out.sort(key=lambda c: c.order_key)
    return out


def validate_contiguous(table: str, versions: Sequence[int]) -> None:
    """Raise `LogGapError` naming the first gap in `versions` ("versions are not contiguous")."""
    for prev, nxt in pairwise(versions):
        if nxt != prev + 1:
            raise LogGapError(
                f"Versions are not contiguous: ([{prev}, {nxt}]); version {prev + 1} is missing",
                table=table,
                version=prev + 1,
            )


def build_log_segment(
    table: str,
    listing: Iterable[FileInfo],
    version: int | None = None,
    *,
    exclude_checkpoints: Iterable[tuple[str, ...]] = (),
) -> LogSegment:
    """The segment for `version` (latest when None); `exclude_checkpoints` names unreadable instances."""
    files = parse_listing(listing)
    excluded = set(exclude_checkpoints)
    if version is not None:
        if version < 0:
            raise VersionNotFoundError(f"Cannot load negative version {version}", table=table, version=version)
        files = [f for f in files if f.version <= version]
    commits = sorted((f for f in files if f.kind is LogFileKind.COMMIT), key=lambda f: f.version)
    checkpoints = [c for c in complete_checkpoints(files) if c.names not in excluded]
    incomplete = any(f.kind is LogFileKind.CHECKPOINT_MULTIPART for f in files) and not checkpoints

    if not commits and not checkpoints:
        if version is None:
            if incomplete:
                raise IncompleteCheckpointError(
                    "The log holds only an incomplete multi-part checkpoint and no commits", table=table
                )
            raise TableNotFoundError("No Delta table: no commit or checkpoint in _delta_log", table=table)
        raise VersionNotFoundError(
            f"Cannot time travel to version {version}: no commit or checkpoint at or before it is retained",
            table=table,
            version=version,
        )

    checkpoint = checkpoints[-1] if checkpoints else None
    start = 0 if checkpoint is None else checkpoint.version + 1
    tail = [c for c in commits if c.version >= start]
    if tail and tail[0].version != start:
        if checkpoint is None:
            raise TruncatedLogError(
                f"The log is truncated: the earliest commit is {tail[0].version} and no checkpoint covers "
                f"versions before it",
                table=table,
                version=0,
                file=tail[0].name,
            )
        raise TruncatedLogError(
            f"The log is truncated: checkpoint {checkpoint.version} is followed by commit {tail[0].version}; "
            f"commit {start} is missing",
            table=table,
            version=start,
            file=checkpoint.files[0].name,
        )
    validate_contiguous(table, [c.version for c in tail])
    end = tail[-1].version if tail else (checkpoint.version if checkpoint else -1)
    if version is not None and end != version:
        raise VersionNotFoundError(
            f"Trying to load a non-existent version {version}; the latest version is {end}",
            table=table,
            version=version,
            latest=end,
        )
    return LogSegment(table, end, checkpoint, tuple(tail))


def latest_version_in(listing: Iterable[FileInfo]) -> int | None:
    """Highest commit or complete-checkpoint version in a listing (the sensor's cheap probe)."""
    files = parse_listing(listing)
    checkpoints = [c.version for c in complete_checkpoints(files)]
    return max([f.version for f in files if f.kind is LogFileKind.COMMIT] + checkpoints, default=None)


def earliest_recreatable_version(table: str, listing: Sequence[FileInfo]) -> int | None:
    """The smallest version a segment can be built for (0, or a retained checkpoint's version)."""
    files = parse_listing(listing)
    has_zero = any(f.kind is LogFileKind.COMMIT and f.version == 0 for f in files)
    candidates = sorted(({0} if has_zero else set()) | {c.version for c in complete_checkpoints(files)})
    for v in candidates:
        try:
            build_log_segment(table, listing, v)
        except (LogGapError, TruncatedLogError, VersionNotFoundError):
            continue
        return v
    return None
