"""Commit timestamps and timestamp time travel (Spark `DeltaHistoryManager`).

One rule for commit times everywhere: the in-commit timestamp when enabled at that version, else the
commit file's time made strictly increasing over the retained commits, oldest first (`commit_times`).
"""

from __future__ import annotations

import bisect
import datetime as dt
import math
from collections.abc import Sequence

from ..errors import InvalidArgumentError, TimestampOutOfRangeError

#: Timestamps must fall in the years 1..9999, as `datetime` can represent them.
_MIN_MS, _MAX_MS = -62_135_596_800_000, 253_402_300_799_999


def to_epoch_ms(value: int | float | str | dt.datetime | dt.date, *, argument: str = "timestamp") -> int:
    """Milliseconds since the epoch; naive datetimes and date-only strings are UTC; booleans, NaN,
    infinities and times outside the years 1..9999 raise `InvalidArgumentError` naming `argument`."""
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
    return commit_times([(version, ts, None) for version, ts in commits])


def commit_times(commits: Sequence[tuple[int, int, int | None]]) -> list[tuple[int, int]]:
    """(version, commit time) from (version, file time, in-commit timestamp or None), oldest first; a file
    time not above the previous commit's time becomes one more than it (ICTs are increasing already)."""
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
    """The latest version whose (monotonized) commit time is <= `timestamp_ms`; a time before the first
    commit, or after the last unless `can_return_last_commit`, is a `TimestampOutOfRangeError`."""
    if not commits:
        raise TimestampOutOfRangeError("The table has no commits to travel to", table=table, timestamp_ms=timestamp_ms)
    times = monotonize(commits)
    (first_v, first_ts), (last_v, last_ts) = times[0], times[-1]

    def out_of_range(where: str, version: int, ts: int) -> TimestampOutOfRangeError:
        message = f"The provided timestamp {format_ms(timestamp_ms)} is {where} available version {version}"
        return TimestampOutOfRangeError(
            f"{message} ({format_ms(ts)})", table=table, timestamp_ms=timestamp_ms, nearest_ms=ts
        )

    if timestamp_ms < first_ts:
        if can_return_earliest_commit:
            return first_v
        raise out_of_range("before the earliest", first_v, first_ts)
    if timestamp_ms > last_ts and not can_return_last_commit:
        raise out_of_range("after the latest", last_v, last_ts)
    return times[bisect.bisect_right([ts for _, ts in times], timestamp_ms) - 1][0]
