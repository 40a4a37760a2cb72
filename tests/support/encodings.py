"""Encoders the tests build fixtures with (the package only ever decodes these)."""

from __future__ import annotations

from airflow_delta_provider.delta.protocol.deletion_vectors import _Z85


def z85_encode(data: bytes) -> str:
    """Z85 encoding; `data` is zero-padded to a multiple of 4 bytes (Delta's `Base85Codec.encodeBytes`)."""
    padded = bytes(data) + b"\x00" * (-len(data) % 4)
    values = (int.from_bytes(padded[i : i + 4], "big") for i in range(0, len(padded), 4))
    return "".join(_Z85[value // 85**k % 85] for value in values for k in range(4, -1, -1))


def utf16_length(value: str) -> int:
    """Length in UTF-16 code units (Java's `String.length`)."""
    return len(value) + sum(1 for ch in value if ord(ch) > 0xFFFF)
