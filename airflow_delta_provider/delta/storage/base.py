"""The store contract (`LogStore`), table-URI helpers, and what the fsspec store modules share."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, BinaryIO, NamedTuple, Protocol
from urllib.parse import unquote, urlparse

from ..protocol.filenames import FileInfo


class LevelEntry(NamedTuple):
    """An entry directly in a listed directory: a file (size, mtime ms) or a subdirectory (`is_dir`, 0, 0)."""

    name: str
    size: int
    modification_time: int
    is_dir: bool


class LogStore(Protocol):
    """What the library needs from storage. Each write verb raises `UnsupportedStoreError` before any request
    on a read-only store."""

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

    #: True when `put_if_absent` is atomic. Informational: `put_if_absent` itself refuses where it cannot be
    #: (unless an unsafe single-writer mode was opted into, where this stays False).
    atomic_put_if_absent: bool

    def put_if_absent(self, path: str, data: bytes) -> None:
        """Create `path` only if nothing is there, atomically and never visibly partial; `FileExistsError`
        when something is (PROTOCOL.md "Delta Log Entries": of two writers of a version, one wins).

        A store may succeed when `path` already holds exactly `data`: that tells a resent request whose answer
        was lost from another writer, so callers make content unique per writer (a commitInfo `txnId`).
        `UnsupportedStoreError` before writing on a store that cannot (or is read-only); a transient
        `StorageError` leaves the outcome unknown.
        """
        ...

    def put(self, path: str, data: bytes) -> None:
        """Write `path` whole, replacing it; readers see the old or the new content."""
        ...

    def write_new(self, path: str, data: bytes) -> None:
        """Write a data file under a fresh name no version references (OPTIMIZE's output). A crash may leave a
        partial file under its visible name, which VACUUM removes as untracked (never a hidden temp file,
        which VACUUM would never delete)."""
        ...

    def delete_many(self, paths: Sequence[str]) -> int:
        """Delete files (batched where the store can); a missing file counts as deleted. Returns how many were
        handled; a refused delete is a `StorageError` naming the (first) file."""
        ...

    #: `"rename"` (one atomic rename: the file is at exactly one path at any time) or `"copy+delete"` (a crash
    #: in between leaves both copies); `protocol.quarantine.move_cost` states what each costs.
    move_method: str

    def move(self, src: str, dst: str) -> None:
        """Move `src` to `dst` (parents made as needed), never over another file: `FileExistsError` when `dst`
        is taken (nothing moved), `FileNotFoundError` when `src` is missing. VACUUM's quarantine uses it."""
        ...

    def list_recursive(self, directory: str) -> Iterator[FileInfo]:
        """Every file under `directory`, at any depth, with size and mtime (no order promised)."""
        ...

    def list_level(self, directory: str) -> Iterator[LevelEntry]:
        """Files and subdirectories directly in `directory`, streamed (never held whole; no order promised);
        nothing when it does not exist. Symbolic links are neither; on object stores a subdirectory is a
        common key prefix."""
        ...


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


# -- shared by the fsspec store modules ----------------------------------------------------------------


def mtime_ms(info: Mapping[str, Any]) -> int:
    """The modification time (ms) in a listing entry or HEAD answer of any fsspec filesystem; 0 if none."""
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


def new_filesystem(fs_class: type, uri: str, options: Mapping[str, Any] | None) -> Any:
    """A `fs_class` for what the URI implies (an Azure account, a GCS generation), then the options; no
    listings cache (a log store must see other writers' files)."""
    kwargs = {**fs_class._get_kwargs_from_urls(uri), **dict(options or {})}  # type: ignore[attr-defined]
    kwargs.setdefault("use_listings_cache", False)
    return fs_class(**kwargs)


def accepts(method: Any, name: str) -> bool:
    """Whether `method` takes a parameter `name` (a client too old for a keyword does not)."""
    import inspect  # not on a local table's path

    try:
        return name in inspect.signature(method).parameters
    except (TypeError, ValueError):
        return False
