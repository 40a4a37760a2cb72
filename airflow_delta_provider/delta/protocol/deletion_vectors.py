"""Where a deletion vector's bytes are (PROTOCOL.md "Deletion Vector Descriptor Schema"); `read.deletion_vectors`
reads and decodes them. Storage types: `u` is `<random prefix, optional><20 Z85 characters of a UUID>`, the file
`<table root>/<prefix>/deletion_vector_<uuid>.bin`; `p` an absolute path in the format of `add.path` (a
percent-encoded URI), decoded once; `i` the serialized bitmap itself, Z85-encoded (padded to 4 bytes).

File DVs start at `offset` (PROTOCOL.md: "Interpret as `0` if absent", as Spark does; delta-kernel-rs reads
an absent offset as 1, right after the version byte: every corpus writer logs it).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Literal
from urllib.parse import unquote, urlsplit

from ..errors import InvalidArgumentError, LogCorruptedError, UnsupportedFeatureError
from .actions import DeletionVectorDescriptor

#: `storageType` values (PROTOCOL.md "Deletion Vector Descriptor Schema").
UUID_RELATIVE, ABSOLUTE_PATH, INLINE = "u", "p", "i"
DV_FILE_CORE = "deletion_vector_"
#: Characters of a Z85-encoded UUID (16 bytes) at the end of a `u` DV's `pathOrInlineDv`.
Z85_UUID_LENGTH = 20
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_INDEX = {c: i for i, c in enumerate(_Z85)}


def z85_decode(text: str) -> bytes:
    """Z85 (ZeroMQ RFC 32) decoding, as Delta encodes DV UUIDs (5 characters -> 4 bytes, big-endian)."""
    if len(text) % 5:
        raise InvalidArgumentError(f"Z85 text length must be a multiple of 5, got {len(text)}", argument="z85")
    out = bytearray()
    for i in range(0, len(text), 5):
        value = 0
        for ch in text[i : i + 5]:
            if ch not in _Z85_INDEX:
                raise InvalidArgumentError(f"Invalid Z85 character {ch!r}", argument="z85")
            value = value * 85 + _Z85_INDEX[ch]
        if value > 0xFFFFFFFF:
            raise InvalidArgumentError(f"Z85 block {text[i : i + 5]!r} overflows", argument="z85")
        out += value.to_bytes(4, "big")
    return bytes(out)


def dv_relative_path(dv: DeletionVectorDescriptor) -> str | None:
    """The table-relative file of a `u` deletion vector (`<prefix>/deletion_vector_<uuid>.bin`); None
    for other storage types."""
    if dv.storage_type != UUID_RELATIVE:
        return None
    encoded = dv.path_or_inline_dv
    if len(encoded) < Z85_UUID_LENGTH:
        raise InvalidArgumentError(f"Deletion vector path {encoded!r} is shorter than a Z85 UUID", argument="dv")
    prefix, z85 = encoded[:-Z85_UUID_LENGTH], encoded[-Z85_UUID_LENGTH:]
    name = f"{DV_FILE_CORE}{uuid.UUID(bytes=z85_decode(z85))}.bin"
    return f"{prefix}/{name}" if prefix else name


def decode_absolute_path(path: str) -> str:
    """An absolute logged path (`add.path`, a `p` DV: a percent-encoded URI, or `/abs`) decoded once, in
    the form stores open: a local file as a plain path (`file:///a%20b` -> `/a b`), others as
    `scheme://authority/key`. `InvalidArgumentError` for a relative path or a `file:` URI naming a host."""
    parts = urlsplit(path)
    if not parts.scheme:
        if not path.startswith("/"):
            raise InvalidArgumentError(f"Not an absolute path: {path!r}", argument="path")
        return unquote(path)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise InvalidArgumentError(f"file: URI on another host: {path!r}", argument="path")
        return unquote(parts.path)
    if not parts.netloc:
        raise InvalidArgumentError(f"URI without an authority (bucket): {path!r}", argument="path")
    return f"{parts.scheme}://{parts.netloc}{unquote(parts.path)}"


def is_absolute_path(path: str) -> bool:
    """True for a logged path that names its file absolutely (a URI or `/abs`), not relative to the root."""
    return "://" in path or path.startswith(("/", "file:"))


@dataclass(frozen=True, slots=True)
class DvLocation:
    """Where a deletion vector's serialized bitmap is: in the file `path` (decoded; for `u`, the root joined with
    `relative_path`), its `dataSize` field at byte `offset`, or inline, `data` holding the bitmap itself."""

    kind: Literal["file", "inline"]
    size_in_bytes: int
    offset: int = 0
    path: str | None = None
    relative_path: str | None = None
    data: bytes | None = None


def dv_location(
    dv: DeletionVectorDescriptor, table_root: str, *, table: str | None = None, file: str | None = None
) -> DvLocation:
    """Where `dv` (of data file `file` in `table`, rooted at `table_root`) is: `LogCorruptedError` for a
    descriptor the protocol does not allow, `UnsupportedFeatureError` for a storage type not `u`, `p` or `i`."""
    table = table if table is not None else table_root

    def corrupt(reason: str) -> LogCorruptedError:
        return LogCorruptedError(
            f"Invalid deletion vector descriptor ({reason}): {dv.to_json()}", table=table, file=file
        )

    if dv.size_in_bytes < 0 or dv.cardinality < 0 or (dv.offset is not None and dv.offset < 0):
        raise corrupt("negative sizeInBytes, cardinality or offset")
    kind = dv.storage_type
    if kind == INLINE:
        if dv.offset is not None:
            raise corrupt("an inline DV has no offset")
        try:
            decoded = z85_decode(dv.path_or_inline_dv)
        except InvalidArgumentError as exc:
            raise corrupt(f"inline data is not Z85: {exc.message}") from None
        if not dv.size_in_bytes <= len(decoded) < dv.size_in_bytes + 4:
            raise corrupt(f"inline data decodes to {len(decoded)} bytes for sizeInBytes {dv.size_in_bytes}")
        return DvLocation("inline", dv.size_in_bytes, data=decoded[: dv.size_in_bytes])
    offset = dv.offset or 0
    if kind == UUID_RELATIVE:
        try:
            relative = dv_relative_path(dv) or ""
        except ValueError as exc:  # InvalidArgumentError included
            raise corrupt(f"no Z85 UUID at the end of pathOrInlineDv: {exc}") from None
        if any(part in ("", ".", "..") for part in relative.split("/")):
            raise corrupt("the random prefix is not a plain directory name under the table root")
        path = f"{table_root.rstrip('/')}/{relative}"
        return DvLocation("file", dv.size_in_bytes, offset, path=path, relative_path=relative)
    if kind == ABSOLUTE_PATH:
        try:
            path = decode_absolute_path(dv.path_or_inline_dv)
        except InvalidArgumentError as exc:
            raise corrupt(exc.message) from None
        return DvLocation("file", dv.size_in_bytes, offset, path=path)
    message = f"Deletion vector storage type {kind!r} is not one of 'u', 'p', 'i'"
    raise UnsupportedFeatureError(message, feature="deletionVectors", table=table, file=file)
