"""Table properties that change how the log is read (`DeltaConfig.scala`).

Interval strings are parsed, never compared as text: `interval 1 week`, `interval 7 days`,
`7 days`, `interval 168 hours` are all the same retention.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ..errors import InvalidArgumentError

#: Files smaller than this count as small (Delta's OPTIMIZE bin-packs files under 1 GiB towards a
#: 1 GiB target; 32 MiB is the usual "too small to scan efficiently" line). Overridable per check.
DEFAULT_SMALL_FILE_BYTES = 32 * 1024 * 1024

DELETED_FILE_RETENTION = "delta.deletedFileRetentionDuration"
LOG_RETENTION = "delta.logRetentionDuration"
SET_TRANSACTION_RETENTION = "delta.setTransactionRetentionDuration"
CHECKPOINT_INTERVAL = "delta.checkpointInterval"
ENABLE_IN_COMMIT_TIMESTAMPS = "delta.enableInCommitTimestamps"
ICT_ENABLEMENT_VERSION = "delta.inCommitTimestampEnablementVersion"
ICT_ENABLEMENT_TIMESTAMP = "delta.inCommitTimestampEnablementTimestamp"
COLUMN_MAPPING_MODE = "delta.columnMapping.mode"
APPEND_ONLY = "delta.appendOnly"

DEFAULT_DELETED_FILE_RETENTION = "interval 1 week"
DEFAULT_LOG_RETENTION = "interval 30 days"

_UNIT_MS = {
    "nanosecond": 1e-6,
    "microsecond": 1e-3,
    "millisecond": 1,
    "second": 1000,
    "minute": 60_000,
    "hour": 3_600_000,
    "day": 86_400_000,
    "week": 7 * 86_400_000,
}
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
    value = configuration.get(DELETED_FILE_RETENTION) or DEFAULT_DELETED_FILE_RETENTION
    return parse_interval_ms(value)


def log_retention_ms(configuration: Mapping[str, str | None]) -> int:
    value = configuration.get(LOG_RETENTION) or DEFAULT_LOG_RETENTION
    return parse_interval_ms(value)


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
