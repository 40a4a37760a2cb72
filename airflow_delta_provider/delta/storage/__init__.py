"""Storage access for the log: list a directory from a name on, read a file, open parquet.

Contracts (as in delta-kernel-rs's `StorageHandler`): `list_from` returns the files of one directory,
non-recursively, whose names sort at or after `start`, sorted by name, with size and modification
time; `read_bytes` raises `FileNotFoundError` for a missing file. The library decides which files to
read; the store only moves bytes.

Local paths go through `os.scandir` (no fsspec overhead on the sensor's hot path, and fsspec is not
imported); any other URI goes through fsspec, with the caller's storage options.

Object stores (`FsspecLogStore`):

* **S3** (`s3://`, `s3a://`, through s3fs) lists with `ListObjectsV2` and `StartAfter`, so a listing
  from the `_last_checkpoint` hint costs one request per 1,000 keys *after* the hint, not per key in
  the log. Other filesystems (gs, abfs, memory, ...) list the directory and filter.
* **Reads**: small files are one GET; parquet is opened for ranged reads (a block cache of
  `block_size`, 4 MiB by default) with the size taken from the listing when known, so reading a
  checkpoint's footer and projected columns fetches only the blocks touched and sends no HEAD.
* **Retries** (`RetryPolicy`): throttling (503 SlowDown, 429, Throttling...), server errors
  (500/502/504, InternalError, RequestTimeout) and connection errors or timeouts are retried with
  exponential backoff and full jitter, at most `max_attempts` attempts in all (default 5: sleeps
  capped at 0.2, 0.4, 0.8, 1.6 s). 4xx answers (403 AccessDenied, InvalidAccessKeyId,
  SignatureDoesNotMatch, 400 ...) are never retried. For S3 this is the only retry layer: botocore's
  (`retries={"total_max_attempts": 1}` in `config_kwargs`, unless the caller sets `retries` there)
  and s3fs's own loop (`S3FileSystem.retries`) are switched off, so one logical request makes at
  most `max_attempts` attempts (aiohttp, under s3fs, may resend a request once more when the
  connection drops; it cannot be switched off, which is why a conditional PUT answered "exists" is
  read back before it is believed). On GCS and Azure too the store's policy is the only layer:
  gcsfs's internal retry loop is bypassed and the Azure SDK's retry count is 0.
* **Writes** (`put_if_absent`, `put`, `delete_many`, `list_recursive`): conditional PUT with
  `If-None-Match: *` on S3 (GCS and Azure: their create-only preconditions), DeleteObjects of 1,000
  keys, recursive listing without delimiter. A store that cannot create atomically refuses commits
  (`UnsupportedStoreError`) unless `unsafe_put_if_absent=True` (one writer process only);
  `read_only=True` refuses every write before any request.
* **Errors**: what remains after retries becomes a `StorageError` naming the table and the file
  (relative to the table root), with `transient=True` for throttling, server and connection errors
  and `False` for auth and other client errors. Messages carry the service's error code, HTTP status
  and message; secrets from the storage options are never in them (they are scrubbed besides).
  A missing file stays `FileNotFoundError` (the `LogStore` contract).
* **Credentials** come from the storage options (s3fs names `key`, `secret`, `token`, `endpoint_url`,
  `client_kwargs={"region_name": ...}`; the delta-rs/object_store names `AWS_ACCESS_KEY_ID`,
  `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`, `AWS_ENDPOINT_URL` are accepted too),
  else from the environment as botocore finds them.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .base import LogStore, is_local, local_path, normalize_table_uri
from .local import LocalLogStore

if TYPE_CHECKING:  # pragma: no cover
    from .object_store import FsspecLogStore, s3fs_options
    from .retry import NO_RETRY, RetryPolicy, StorageFailure, classify_error, scrub, secret_values

#: Names loaded on first use (PEP 562): a local table (a sensor poll) never imports the object-store
#: code and what it imports (`inspect`, `ssl`, fsspec): ~30 ms of every fresh process.
_LAZY = {
    "FsspecLogStore": "object_store",
    "s3fs_options": "object_store",
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
    from .object_store import FsspecLogStore

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
