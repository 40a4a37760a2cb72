"""Commit timestamps and timestamp time travel (Spark `DeltaHistoryManager`).

Pure functions over values the caller gathered. One rule for commit times, used by time travel,
`DeltaLog.commit_timestamps()`, `history()`, `commit_summary()` and `Snapshot.timestamp`: a commit's
time is its in-commit timestamp when in-commit timestamps are enabled at that version, else its commit
file's modification time made strictly increasing over the retained commits, oldest first (`commit_times`).
The raw modification time is the *file time*, reported separately.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence

from ..errors import InvalidArgumentError, TimestampOutOfRangeError

#: Timestamps must fall in the years 1..9999, as `datetime` can represent them.
_MIN_MS, _MAX_MS = -62_135_596_800_000, 253_402_300_799_999


def to_epoch_ms(value: int | float | str | dt.datetime | dt.date, *, argument: str = "timestamp") -> int:
    """Milliseconds since the epoch; naive datetimes and date-only strings are UTC.

    Booleans, NaN, infinities and times outside the years 1..9999 raise `InvalidArgumentError` naming `argument`.
    """
    ms: float | int | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        ms = value if math.isfinite(value) else None
    elif isinstance(value, str):
        s = value.strip()
        if s.lstrip("-").isdigit():
            ms = int(s)
        else:
            try:
                value = dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
            except ValueError:
                raise InvalidArgumentError(
                    f"{argument}: cannot parse {s!r}; use ISO-8601 or epoch milliseconds", argument=argument
                ) from None
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        value = dt.datetime(value.year, value.month, value.day)
    if isinstance(value, dt.datetime):
        try:
            ms = (value if value.tzinfo else value.replace(tzinfo=dt.UTC)).timestamp() * 1000
        except (OverflowError, ValueError):  # an offset that moves it out of the years 1..9999
            ms = None
    if ms is None or not _MIN_MS <= ms <= _MAX_MS:
        raise InvalidArgumentError(
            f"{argument} must be a finite time in the years 1..9999 (ISO-8601, datetime or epoch ms), got {value!r}",
            argument=argument,
        )
    return int(ms)


def monotonize(commits: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Make commit times strictly increasing: if ts[i] >= ts[i+1], ts[i+1] becomes ts[i] + 1."""
    out: list[tuple[int, int]] = []
    prev: int | None = None
    for version, ts in commits:
        if prev is not None and ts <= prev:
            ts = prev + 1
        out.append((version, ts))
        prev = ts
    return out


def commit_times(commits: Sequence[tuple[int, int, int | None]]) -> list[tuple[int, int]]:
    """(version, commit time) from (version, file time, in-commit timestamp or None), oldest first.

    In-commit timestamps are taken as they are (the protocol makes them increasing); file times are
    raised to one more than the previous commit's time when they are not above it.
    """
    out: list[tuple[int, int]] = []
    prev: int | None = None
    for version, file_ms, ict in commits:
        ts = ict if ict is not None else file_ms if prev is None or file_ms > prev else prev + 1
        out.append((version, ts))
        prev = ts
    return out


def format_ms(ms: int) -> str:
    """`ms` as ISO-8601 UTC text (epoch ms outside `datetime`'s range are shown as numbers)."""
    if not _MIN_MS <= ms <= _MAX_MS:
        return f"{ms} ms since the epoch"
    return (dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=ms)).isoformat(timespec="milliseconds")


def active_commit_at(
    table: str,
    commits: Sequence[tuple[int, int]],
    timestamp_ms: int,
    *,
    can_return_last_commit: bool = False,
    can_return_earliest_commit: bool = False,
) -> int:
    """The latest version whose (monotonized) commit time is <= `timestamp_ms`.

    Before the first commit: `TimestampOutOfRangeError` ("before the earliest available version").
    After the last commit: the same error ("after the latest available version") unless
    `can_return_last_commit`.
    """
    if not commits:
        raise TimestampOutOfRangeError("The table has no commits to travel to", table=table, timestamp_ms=timestamp_ms)
    times = monotonize(commits)
    first_v, first_ts = times[0]
    last_v, last_ts = times[-1]
    if timestamp_ms < first_ts:
        if can_return_earliest_commit:
            return first_v
        raise TimestampOutOfRangeError(
            f"The provided timestamp {format_ms(timestamp_ms)} is before the earliest available version "
            f"{first_v} ({format_ms(first_ts)})",
            table=table,
            timestamp_ms=timestamp_ms,
            nearest_ms=first_ts,
        )
    if timestamp_ms > last_ts and not can_return_last_commit:
        raise TimestampOutOfRangeError(
            f"The provided timestamp {format_ms(timestamp_ms)} is after the latest available version "
            f"{last_v} ({format_ms(last_ts)})",
            table=table,
            timestamp_ms=timestamp_ms,
            nearest_ms=last_ts,
        )
    lo, hi = 0, len(times) - 1
    while lo < hi:  # last index with ts <= timestamp_ms
        mid = (lo + hi + 1) // 2
        if times[mid][1] <= timestamp_ms:
            lo = mid
        else:
            hi = mid - 1
    return times[lo][0]
