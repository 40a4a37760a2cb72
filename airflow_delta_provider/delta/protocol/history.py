"""Commit timestamps and timestamp time travel (Spark `DeltaHistoryManager`).

Pure functions over `(version, timestamp)` pairs the caller gathered (in-commit timestamps when
enabled, else commit-file mtimes).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from ..errors import InvalidArgumentError, TimestampOutOfRangeError


def to_epoch_ms(value: int | float | str | dt.datetime | dt.date) -> int:
    """Milliseconds since the epoch; naive datetimes and date-only strings are UTC."""
    if isinstance(value, bool):
        raise InvalidArgumentError(f"Not a timestamp: {value!r}")
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str):
        s = value.strip()
        if s.lstrip("-").isdigit():
            return int(s)
        try:
            value = dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
        except ValueError:
            raise InvalidArgumentError(f"Cannot parse timestamp {s!r}; use ISO-8601 or epoch milliseconds") from None
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return int(value.timestamp() * 1000)
    if isinstance(value, dt.date):
        return int(dt.datetime(value.year, value.month, value.day, tzinfo=dt.UTC).timestamp() * 1000)
    raise InvalidArgumentError(f"Not a timestamp: {value!r}")


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


def format_ms(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat(timespec="milliseconds")


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
