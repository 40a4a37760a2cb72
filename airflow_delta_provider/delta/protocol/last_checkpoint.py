"""`_delta_log/_last_checkpoint`: a hint to where listing may start, never a reason to fail.

Missing, empty, unparseable or partial content gives `None` (the caller then lists from 0), as in
delta-kernel-rs `LastCheckpointHint::try_read`. A stale or dangling hint is handled by the caller,
which checks the listing against it.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LastCheckpointHint:
    """The fields of `_last_checkpoint` this library uses; unknown fields are ignored."""

    version: int
    size: int | None = None
    parts: int | None = None
    size_in_bytes: int | None = None
    num_of_add_files: int | None = None
    v2_checkpoint_path: str | None = None


def parse_last_checkpoint(data: bytes, *, origin: str = "_last_checkpoint") -> LastCheckpointHint | None:
    """The hint in `data`, or None (with a warning) when it cannot be used."""
    if not data.strip():
        log.warning("Ignoring empty %s; listing the log instead", origin)
        return None
    try:
        obj: Any = json.loads(data)
        version = int(obj["version"])
        if version < 0:
            raise ValueError("negative version")
        v2 = obj.get("v2Checkpoint") or {}

        def opt_int(key: str) -> int | None:
            value = obj.get(key)
            return None if value is None else int(value)

        return LastCheckpointHint(
            version=version,
            size=opt_int("size"),
            parts=opt_int("parts"),
            size_in_bytes=opt_int("sizeInBytes"),
            num_of_add_files=opt_int("numOfAddFiles"),
            v2_checkpoint_path=v2.get("path") if isinstance(v2, dict) else None,
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        log.warning("Ignoring unreadable %s (%s); listing the log instead", origin, exc)
        return None
