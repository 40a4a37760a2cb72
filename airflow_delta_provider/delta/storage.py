"""Storage access for the log: list a directory from a name on, read a file, open parquet.

Contracts (as in delta-kernel-rs's `StorageHandler`): `list_from` returns the files of one directory,
non-recursively, whose names sort at or after `start`, sorted by name, with size and modification
time; `read_bytes` raises `FileNotFoundError` for a missing file. The library decides which files to
read; the store only moves bytes.

Local paths go through `os.scandir` (no fsspec overhead on the sensor's hot path); any other URI goes
through fsspec, with the caller's storage options.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, BinaryIO, Protocol
from urllib.parse import unquote, urlparse

from .filenames import FileInfo


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


class LocalLogStore:
    """The local filesystem, through `os` calls."""

    def list_from(self, directory: str, start: str = "") -> list[FileInfo]:
        base = local_path(directory)
        out: list[FileInfo] = []
        try:
            entries = os.scandir(base)
        except (FileNotFoundError, NotADirectoryError):
            return []
        with entries:
            for entry in entries:
                if entry.name < start:
                    continue
                try:
                    if not entry.is_file():
                        continue
                    st = entry.stat()
                except FileNotFoundError:  # removed between listing and stat
                    continue
                out.append(FileInfo(os.path.join(base, entry.name), st.st_size, st.st_mtime_ns // 1_000_000))
        out.sort(key=lambda f: f.name)
        return out

    def read_bytes(self, path: str) -> bytes:
        with open(local_path(path), "rb") as fh:
            return fh.read()

    def open(self, path: str) -> BinaryIO:
        return open(local_path(path), "rb")

    def head(self, path: str) -> FileInfo | None:
        p = local_path(path)
        try:
            st = os.stat(p)
        except FileNotFoundError:
            return None
        return FileInfo(p, st.st_size, st.st_mtime_ns // 1_000_000)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(local_path(path))

    def join(self, base: str, *parts: str) -> str:
        return os.path.join(local_path(base), *parts)


def _mtime_ms(info: Mapping[str, Any]) -> int:
    for key in ("mtime", "LastModified", "last_modified", "updated", "modified", "created"):
        value = info.get(key)
        if value is None:
            continue
        if hasattr(value, "timestamp"):
            return int(value.timestamp() * 1000)
        if isinstance(value, int | float):
            return int(value * 1000) if value < 1e11 else int(value)
        if isinstance(value, str):
            from datetime import datetime

            return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)
    return 0


class FsspecLogStore:
    """Any fsspec filesystem (s3, gs, abfs, memory, ...)."""

    def __init__(self, uri: str, storage_options: Mapping[str, Any] | None = None) -> None:
        import fsspec

        self.fs, _ = fsspec.core.url_to_fs(uri, **dict(storage_options or {}))
        self._protocol = urlparse(uri).scheme

    def _strip(self, path: str) -> str:
        return self.fs._strip_protocol(path)

    def _unstrip(self, path: str) -> str:
        return f"{self._protocol}://{path}" if self._protocol and "://" not in path else path

    def list_from(self, directory: str, start: str = "") -> list[FileInfo]:
        try:
            entries = self.fs.ls(self._strip(directory), detail=True, refresh=True)
        except FileNotFoundError:
            return []
        out = []
        for e in entries:
            if e.get("type") not in ("file", None):
                continue
            name = e["name"].rstrip("/").rsplit("/", 1)[-1]
            if name < start:
                continue
            out.append(FileInfo(self._unstrip(e["name"]), int(e.get("size") or 0), _mtime_ms(e)))
        out.sort(key=lambda f: f.name)
        return out

    def read_bytes(self, path: str) -> bytes:
        return self.fs.cat_file(self._strip(path))

    def open(self, path: str) -> BinaryIO:
        return self.fs.open(self._strip(path), "rb")

    def head(self, path: str) -> FileInfo | None:
        try:
            info = self.fs.info(self._strip(path))
        except FileNotFoundError:
            return None
        return FileInfo(path, int(info.get("size") or 0), _mtime_ms(info))

    def is_dir(self, path: str) -> bool:
        try:
            return bool(self.fs.isdir(self._strip(path)))
        except FileNotFoundError:
            return False

    def join(self, base: str, *parts: str) -> str:
        return "/".join([base.rstrip("/"), *parts])


def store_for(uri: str, storage_options: Mapping[str, Any] | None = None) -> LogStore:
    """The store for a table URI: `LocalLogStore` for local paths, fsspec for the rest."""
    if is_local(uri):
        return LocalLogStore()
    return FsspecLogStore(uri, storage_options)
