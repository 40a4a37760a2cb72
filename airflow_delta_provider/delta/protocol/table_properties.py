"""Table properties that change how the log is read (`DeltaConfig.scala`).

Interval strings are parsed, never compared as text: `interval 1 week`, `interval 7 days`,
`7 days`, `interval 168 hours` are all the same retention.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Mapping
from numbers import Real
from typing import Any

from ..errors import InvalidArgumentError

#: Files smaller than this count as small (Delta's OPTIMIZE bin-packs files under 1 GiB towards a
#: 1 GiB target; 32 MiB is the usual "too small to scan efficiently" line). Overridable per check.
DEFAULT_SMALL_FILE_BYTES = 32 * 1024 * 1024

DELETED_FILE_RETENTION = "delta.deletedFileRetentionDuration"
LOG_RETENTION = "delta.logRetentionDuration"
SET_TRANSACTION_RETENTION = "delta.setTransactionRetentionDuration"
ENABLE_IN_COMMIT_TIMESTAMPS = "delta.enableInCommitTimestamps"
ICT_ENABLEMENT_VERSION = "delta.inCommitTimestampEnablementVersion"
ICT_ENABLEMENT_TIMESTAMP = "delta.inCommitTimestampEnablementTimestamp"
COLUMN_MAPPING_MODE = "delta.columnMapping.mode"
APPEND_ONLY = "delta.appendOnly"

DEFAULT_DELETED_FILE_RETENTION = "interval 1 week"
DEFAULT_LOG_RETENTION = "interval 30 days"

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 7 * 86_400_000}
_UNIT_MS = dict(zip(("millisecond", "second", "minute", "hour", "day", "week"), _UNITS_MS.values(), strict=True))
_UNIT_MS |= {"nanosecond": 1e-6, "microsecond": 1e-3}
_PART_RE = re.compile(r"(-?\d+(?:\.\d+)?)\s*([a-z]+)")


def parse_interval_ms(text: str) -> int:
    """Milliseconds in a CalendarInterval-style string (months and years are refused: not fixed)."""
    s = text.strip().lower()
    if s.startswith("interval"):
        s = s[len("interval") :].strip()
    if not s:
        raise InvalidArgumentError(f"empty interval {text!r}")
    total = 0.0
    pos = 0
    for m in _PART_RE.finditer(s):
        if s[pos : m.start()].strip():
            raise InvalidArgumentError(f"cannot parse interval {text!r}")
        unit = m[2].rstrip("s") if m[2] not in ("ms",) else "millisecond"
        unit = {"sec": "second", "min": "minute", "hr": "hour", "msec": "millisecond"}.get(unit, unit)
        if unit not in _UNIT_MS:
            raise InvalidArgumentError(f"unsupported unit {m[2]!r} in interval {text!r}")
        total += float(m[1]) * _UNIT_MS[unit]
        pos = m.end()
    if pos == 0 or s[pos:].strip():
        raise InvalidArgumentError(f"cannot parse interval {text!r}")
    return int(total)


def deleted_file_retention_ms(configuration: Mapping[str, str | None]) -> int:
    """`delta.deletedFileRetentionDuration`, default one week."""
    return parse_interval_ms(configuration.get(DELETED_FILE_RETENTION) or DEFAULT_DELETED_FILE_RETENTION)


def log_retention_ms(configuration: Mapping[str, str | None]) -> int:
    return parse_interval_ms(configuration.get(LOG_RETENTION) or DEFAULT_LOG_RETENTION)


def set_transaction_retention_ms(configuration: Mapping[str, str | None]) -> int | None:
    """`delta.setTransactionRetentionDuration`; None when unset (txns never expire)."""
    value = configuration.get(SET_TRANSACTION_RETENTION)
    return None if not value else parse_interval_ms(value)


def in_commit_timestamps_enabled(configuration: Mapping[str, str | None]) -> bool:
    return str(configuration.get(ENABLE_IN_COMMIT_TIMESTAMPS, "false")).lower() == "true"


def ict_enablement_version(configuration: Mapping[str, str | None]) -> int:
    """First version whose commit time is its in-commit timestamp (0 when enabled at creation)."""
    value = configuration.get(ICT_ENABLEMENT_VERSION)
    return 0 if value is None else int(value)


def column_mapping_mode(configuration: Mapping[str, str | None]) -> str:
    return str(configuration.get(COLUMN_MAPPING_MODE) or "none").lower()


_SHORT = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")


def parse_duration_ms(
    value: Any, argument: str, *, minimum_ms: float = 0, allow_minimum: bool = True, maximum_ms: float | None = None
) -> int:
    """A duration in ms (rounded up) from a `datetime.timedelta`, a number of seconds, or a text: `6h`, `90m`,
    `7d`, `1h30m`, `45s`, `1w`, `0`, or an interval as table properties write them (`6 hours`, `interval 1
    day`). It must be at least `minimum_ms` (more than it unless `allow_minimum`) and at most `maximum_ms`;
    anything else is an `InvalidArgumentError` naming `argument`. One parser for every duration argument
    (lease TTLs, quarantine ages)."""
    if isinstance(value, dt.timedelta):
        ms = value.total_seconds() * 1000
    elif isinstance(value, Real) and not isinstance(value, bool):
        ms = float(value) * 1000
    elif isinstance(value, str):
        compact = re.sub(r"\s+", "", value.lower())
        parts = list(_SHORT.finditer(compact))
        if compact in ("0", "0.0"):
            ms = 0.0
        elif parts and "".join(p[0] for p in parts) == compact:
            ms = sum(float(p[1]) * _UNITS_MS[p[2]] for p in parts)
        else:
            try:
                ms = parse_interval_ms(value)
            except InvalidArgumentError:
                raise InvalidArgumentError(
                    f"{argument} must be a duration such as 6h, 90m, 7d or 1h30m, got {value!r}", argument=argument
                ) from None
    else:
        raise InvalidArgumentError(
            f"{argument} must be a duration (text such as 6h, a timedelta, or seconds), got {value!r}",
            argument=argument,
        )
    low = ms >= minimum_ms if allow_minimum else ms > minimum_ms
    if not math.isfinite(ms) or not low or (maximum_ms is not None and ms > maximum_ms):
        bound = f"at least {minimum_ms / 1000:g} s" if allow_minimum else f"more than {minimum_ms / 1000:g} s"
        if maximum_ms is not None:
            bound += f" and at most {maximum_ms / 86_400_000:g} days"
        raise InvalidArgumentError(f"{argument} must be a duration of {bound}, got {value!r}", argument=argument)
    return math.ceil(ms)
