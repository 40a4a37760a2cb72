"""The store contract (`LogStore`) and table-URI helpers."""

from __future__ import annotations

import os
from typing import BinaryIO, Protocol
from urllib.parse import unquote, urlparse

from ..protocol.filenames import FileInfo


class LogStore(Protocol):
    """What the library needs from storage."""

    def list_from(self, directory: str, start: str = "") -> list[FileInfo]:
        """Files directly in `directory` named `>= start`, sorted by name; [] if it does not exist."""
        ...

    def read_bytes(self, path: str) -> bytes:
        """Whole file content; `FileNotFoundError` when missing."""
        ...

    def open(self, path: str) -> BinaryIO:
        """A seekable binary file (parquet footers are read with ranged reads)."""
        ...

    def head(self, path: str) -> FileInfo | None:
        """Size and mtime of one file, or None when it does not exist."""
        ...

    def is_dir(self, path: str) -> bool: ...

    def join(self, base: str, *parts: str) -> str: ...


def is_local(uri: str) -> bool:
    scheme = urlparse(uri).scheme
    return scheme in ("", "file", "local") or (len(scheme) == 1 and os.name == "nt")


def local_path(uri: str) -> str:
    """`file:///a/b`, `file:/a/b` or `/a/b` as an absolute local path."""
    if uri.startswith("file:") or uri.startswith("local:"):
        parsed = urlparse(uri)
        return os.path.abspath(unquote(parsed.path))
    return os.path.abspath(os.path.expanduser(uri))


def normalize_table_uri(uri: str) -> str:
    """Fully qualified table root: `file:///abs/path` locally, the URI without a trailing slash elsewhere."""
    if is_local(uri):
        return "file://" + local_path(uri)
    return uri.rstrip("/")
