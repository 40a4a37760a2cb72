"""Storage access for the log: list a directory from a name on, read a file, open parquet.

Contracts (as in delta-kernel-rs's `StorageHandler`): `list_from` returns the files of one directory,
non-recursively, whose names sort at or after `start`, sorted by name, with size and modification
time; `read_bytes` raises `FileNotFoundError` for a missing file. The library decides which files to
read; the store only moves bytes.

Local paths go through `os.scandir` (no fsspec overhead on the sensor's hot path, and fsspec is not
imported); any other URI goes through fsspec, with the caller's storage options.

Modules: `base` (the contract), `local`, `fsspec_store` (`FsspecLogStore`: any fsspec filesystem; its
writes, reads and the one retry layer), `s3`, `gcs` and `azure` (what each object store guarantees: its
single-attempt client, its create-only write; S3's listing, deletes, options and endpoint checks), `retry`
(classifying failures, the policy), `batch` (bulk verbs over one table's files).

* **Retries** (`RetryPolicy`): throttling (503 SlowDown, 429, Throttling...), server errors
  (500/502/504, InternalError, RequestTimeout) and connection errors or timeouts are retried with
  exponential backoff and full jitter, at most `max_attempts` attempts in all (default 5: sleeps
  capped at 0.2, 0.4, 0.8, 1.6 s). 4xx answers (403 AccessDenied, InvalidAccessKeyId,
  SignatureDoesNotMatch, 400 ...) are never retried. On S3, GCS and Azure this is the only retry layer
  (each client's own is switched off): a logical request makes at most `max_attempts` attempts (plus the one
  resend aiohttp may make, see `fsspec_store`).
* **Errors**: what remains after retries becomes a `StorageError` naming the table and the file
  (relative to the table root), with `transient=True` for throttling, server and connection errors
  and `False` for auth and other client errors. Messages carry the service's error code, HTTP status
  and message; secrets from the storage options are never in them (they are scrubbed besides).
  A missing file stays `FileNotFoundError` (the `LogStore` contract).
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

#: Names loaded on first use (PEP 562): a local table (a sensor poll) never imports the object-store
#: code and what it imports (`inspect`, `ssl`, fsspec): ~30 ms of every fresh process.
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
