"""`_delta_log/_last_checkpoint`: a hint to where listing may start, never a reason to fail.

Unreadable content, or a `checksum` that does not match it (a torn read can still parse), gives `None`,
as in delta-kernel-rs `LastCheckpointHint::try_read` and Spark `LastCheckpointInfo.deserializeFromJson`.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

CHECKSUM_KEY = "checksum"
_UNRESERVED = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~")


@dataclass(frozen=True, slots=True)
class LastCheckpointHint:
    """The fields of `_last_checkpoint` this library uses; unknown fields are ignored."""

    version: int
    size: int | None = None
    parts: int | None = None
    size_in_bytes: int | None = None
    num_of_add_files: int | None = None
    v2_checkpoint_path: str | None = None


def _encode(text: str) -> str:
    """A quoted string with every octet but `a-zA-Z0-9-._~` percent-encoded in upper case."""
    return '"' + "".join(chr(b) if b in _UNRESERVED else f"%{b:02X}" for b in text.encode("utf-8")) + '"'


def _leaves(value: Any, path: list[str], out: list[str]) -> None:
    if isinstance(value, Mapping):
        for key, item in value.items():
            _leaves(item, [*path, _encode(str(key))], out)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _leaves(item, [*path, str(i)], out)
    else:
        rendered = _encode(value) if isinstance(value, str) else json.dumps(value)
        out.append(f"{'+'.join(path)}={rendered}")


def json_checksum(obj: Mapping[str, Any]) -> str:
    """MD5 of the canonical form of `obj` (PROTOCOL.md "JSON checksum"; the top-level `checksum` left out)."""
    pairs: list[str] = []
    _leaves({k: v for k, v in obj.items() if k != CHECKSUM_KEY}, [], pairs)
    return hashlib.md5(",".join(sorted(pairs)).encode("utf-8")).hexdigest()


def render_last_checkpoint(
    version: int,
    *,
    size: int,
    size_in_bytes: int,
    num_of_add_files: int,
    v2_checkpoint: Mapping[str, Any] | None = None,
    parts: int | None = None,
) -> bytes:
    """The `_last_checkpoint` content Spark writes (`LastCheckpointInfo`), checksum last."""
    obj: dict[str, Any] = {"version": version, "size": size}
    if parts is not None:
        obj["parts"] = parts
    obj["sizeInBytes"] = size_in_bytes
    obj["numOfAddFiles"] = num_of_add_files
    if v2_checkpoint is not None:
        obj["v2Checkpoint"] = dict(v2_checkpoint)
    obj[CHECKSUM_KEY] = json_checksum(obj)
    return json.dumps(obj, separators=(",", ":")).encode("utf-8")


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
        stored = obj.get(CHECKSUM_KEY)
        if stored is not None and stored != json_checksum(obj):
            raise ValueError(f"checksum {stored} does not match the content")
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
