"""Storage for the log: stores only move bytes; the library decides which files to read.

`list_from` returns the files directly in one directory named at or after `start`, sorted, with size and
mtime; a missing file is `FileNotFoundError` (delta-kernel-rs's `StorageHandler` contract). Local paths go
through `os` (fsspec is never imported for them), any other URI through fsspec with the storage options.

On S3, GCS and Azure the store's `RetryPolicy` is the only retry layer (each client's own is off):
throttling, 5xx and connection failures are retried with full-jitter backoff, 4xx never. What remains is a
`StorageError` naming the table and file, `transient` for throttling, server and connection failures, with
the service's code, status and message but never a secret from the storage options.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .base import LogStore, is_local, local_path, normalize_table_uri
from .local import LocalLogStore

if TYPE_CHECKING:  # pragma: no cover
    from .fsspec_store import FsspecLogStore
    from .retry import NO_RETRY, RetryPolicy, StorageFailure, classify_error, scrub, secret_values
    from .s3 import s3fs_options

#: Loaded on first use (PEP 562): a local table (a sensor poll) never imports fsspec, `ssl` or `inspect`.
_LAZY = {
    "FsspecLogStore": "fsspec_store",
    "s3fs_options": "s3",
    **dict.fromkeys(("NO_RETRY", "RetryPolicy", "StorageFailure", "classify_error", "scrub", "secret_values"), "retry"),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def store_for(uri: str, storage_options: Mapping[str, Any] | None = None) -> LogStore:
    """The store for a table URI: `LocalLogStore` for local paths, fsspec for the rest."""
    if is_local(uri):
        return LocalLogStore()
    from .fsspec_store import FsspecLogStore

    return FsspecLogStore(uri, storage_options)


__all__ = [
    "NO_RETRY",
    "FsspecLogStore",
    "LocalLogStore",
    "LogStore",
    "RetryPolicy",
    "StorageFailure",
    "classify_error",
    "is_local",
    "local_path",
    "normalize_table_uri",
    "s3fs_options",
    "scrub",
    "secret_values",
    "store_for",
]
