"""Object stores through fsspec (S3 via s3fs, GCS, ABFS, memory): listing, ranged reads, the one
retry layer, typed errors."""

from __future__ import annotations

import errno
import functools
import inspect
import io
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, BinaryIO, TypeVar, cast
from urllib.parse import urlparse

from ..errors import DeltaError, StorageError
from ..protocol.filenames import FileInfo
from .retry import NO_RETRY, RetryPolicy, StorageFailure, classify_error, scrub, secret_values

log = logging.getLogger(__name__)

_T = TypeVar("_T")


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


# -- S3 options ---------------------------------------------------------------------------------------

# delta-rs / object_store names (any case) -> s3fs names; s3fs's own names win when both are given.
_S3_ALIASES = {
    "aws_access_key_id": "key",
    "access_key_id": "key",
    "aws_secret_access_key": "secret",
    "secret_access_key": "secret",
    "aws_session_token": "token",
    "session_token": "token",
    "aws_token": "token",
    "aws_endpoint_url": "endpoint_url",
    "aws_endpoint": "endpoint_url",
}
_S3_REGION_OPTIONS = frozenset({"aws_region", "aws_default_region", "region", "region_name"})
# Writer-side object_store options that mean nothing to a reader.
_S3_WRITER_OPTIONS = frozenset(
    {"aws_allow_http", "allow_http", "aws_conditional_put", "conditional_put", "aws_s3_allow_unsafe_rename"}
)
_S3_SCHEMES = ("s3", "s3a")


def s3fs_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """s3fs keyword arguments from storage options, with botocore's own retries off unless configured."""
    aliased: dict[str, Any] = {}
    native: dict[str, Any] = {}
    region = None
    for key, value in (options or {}).items():
        low = str(key).lower()
        if low in _S3_ALIASES:
            aliased[_S3_ALIASES[low]] = value
        elif low in _S3_REGION_OPTIONS:
            region = value
        elif low in _S3_WRITER_OPTIONS:
            continue
        else:
            native[key] = value
    out = {**aliased, **native}
    if region:
        out["client_kwargs"] = {"region_name": region, **dict(out.get("client_kwargs") or {})}
    config = dict(out.get("config_kwargs") or {})
    config.setdefault("retries", {"total_max_attempts": 1})
    out["config_kwargs"] = config
    return out


@functools.cache
def _single_attempt_s3fs() -> type:
    """`s3fs.S3FileSystem` with its own retry loop off (one attempt per call; the store retries)."""
    import s3fs

    class SingleAttemptS3FileSystem(s3fs.S3FileSystem):  # type: ignore[misc]
        retries = 1

    return SingleAttemptS3FileSystem


# -- the fsspec store ----------------------------------------------------------------------------------


class _RetryingFile(io.RawIOBase):
    """A read-only file whose reads go through the store's retry policy (positional, so repeatable)."""

    def __init__(self, raw: Any, store: FsspecLogStore, path: str) -> None:
        super().__init__()
        self._raw = raw
        self._store = store
        self._path = path

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._raw.seek(offset, whence)

    def tell(self) -> int:
        return self._raw.tell()

    def read(self, size: int | None = -1) -> bytes:
        pos = self._raw.tell()
        length = -1 if size is None else size

        def attempt() -> bytes:
            self._raw.seek(pos)
            return self._raw.read(length)

        return self._store.retrying("GET", self._path, attempt)

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
        super().close()


class FsspecLogStore:
    """Any fsspec filesystem (s3, gs, abfs, memory, ...): see the module doc for listing, reads and retries.

    `retry` defaults to `RetryPolicy()` on S3 and to `NO_RETRY` elsewhere (gcsfs and adlfs retry
    themselves); `block_size` is the ranged-read block for parquet. `attempt_count` and `retry_count`
    count storage calls and retries made (for tests and metrics).
    """

    #: Keys per ListObjectsV2 page (S3's maximum).
    list_page_size: int = 1000
    #: Remembered listing sizes (checkpoint files only), so opening them needs no HEAD.
    _MAX_KNOWN_SIZES = 4096

    def __init__(
        self,
        uri: str,
        storage_options: Mapping[str, Any] | None = None,
        *,
        retry: RetryPolicy | None = None,
        block_size: int = 4 * 2**20,
    ) -> None:
        self.root = uri.rstrip("/")
        self._protocol = urlparse(uri).scheme
        self.is_s3 = self._protocol in _S3_SCHEMES
        self._secrets = secret_values(storage_options)
        if self.is_s3:
            self.fs = _single_attempt_s3fs()(**s3fs_options(storage_options))
        else:
            import fsspec

            self.fs, _ = fsspec.core.url_to_fs(uri, **dict(storage_options or {}))
        self.retry = retry if retry is not None else (RetryPolicy() if self.is_s3 else NO_RETRY)
        # recent s3fs HEADs before a whole-object GET (to split big objects into concurrent ranges) unless told not to
        cat_params = inspect.signature(self.fs._cat_file).parameters if self.is_s3 else {}
        self._cat_kwargs: dict[str, Any] = {"max_concurrency": 1} if "max_concurrency" in cat_params else {}
        self.block_size = block_size
        self.attempt_count = 0
        self.retry_count = 0
        self._sizes: dict[str, int] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"FsspecLogStore({self.root!r})"

    # -- retries and errors --------------------------------------------------------------------------
    def _relative(self, path: str) -> str:
        prefix = self.root + "/"
        return path[len(prefix) :] if path.startswith(prefix) else path

    def storage_error(self, failure: StorageFailure, op: str, path: str, attempts: int) -> StorageError:
        """The typed error for a failure that will not be retried (any more)."""
        what = {
            "auth": "access denied",
            "throttled": "throttled",
            "server": "server error",
            "connection": "connection failed",
            "client": "request refused",
        }.get(failure.kind, "failed")
        detail = ", ".join(x for x in (failure.code, f"HTTP {failure.status}" if failure.status else None) if x)
        text = f"Storage error: {op} {what}" + (f" ({detail})" if detail else "")
        if attempts > 1:
            text += f" after {attempts} attempts"
        message = " ".join(failure.message.split())
        if message:
            text += ": " + (message if len(message) <= 300 else message[:297] + "...")
        if failure.kind == "auth":
            text = text.rstrip(".") + ". Check the credentials in the storage options."
        return StorageError(
            scrub(text, self._secrets), table=self.root, file=self._relative(path), transient=failure.transient
        )

    def retrying(self, op: str, path: str, fn: Callable[[], _T]) -> _T:
        """`fn()` under the retry policy; a missing file stays `FileNotFoundError`, failures become `StorageError`."""
        attempt = 0
        while True:
            attempt += 1
            with self._lock:
                self.attempt_count += 1
            try:
                return fn()
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError, DeltaError):
                raise
            except Exception as exc:
                failure = classify_error(exc)
                if failure is None:
                    raise
                if failure.kind == "not_found":
                    raise FileNotFoundError(errno.ENOENT, "No such file", self._relative(path)) from None
                if not failure.retryable or attempt >= self.retry.max_attempts:
                    raise self.storage_error(failure, op, path, attempt) from None
                delay = self.retry.delay(attempt)
                with self._lock:
                    self.retry_count += 1
                log.warning(
                    "%s %s: %s (%s); retry %d of %d in %.2fs",
                    op,
                    scrub(f"{self.root}/{self._relative(path)}", self._secrets),
                    failure.kind,
                    failure.code or failure.status or type(exc).__name__,
                    attempt,
                    self.retry.max_attempts - 1,
                    delay,
                )
                self.retry.sleep(delay)

    # -- paths ---------------------------------------------------------------------------------------
    def _strip(self, path: str) -> str:
        return self.fs._strip_protocol(path)

    def _unstrip(self, path: str) -> str:
        return f"{self._protocol}://{path}" if self._protocol and "://" not in path else path

    def _bucket_key(self, path: str) -> tuple[str, str]:
        bucket, key, _ = self.fs.split_path(self._strip(path))
        return bucket, key

    # -- LogStore ------------------------------------------------------------------------------------
    def list_from(self, directory: str, start: str = "") -> list[FileInfo]:
        try:
            if self.is_s3:
                out = self._list_s3(directory, start)
            else:
                out = self._list_fsspec(directory, start)
        except FileNotFoundError:  # no bucket / no directory
            return []
        out.sort(key=lambda f: f.name)
        with self._lock:
            if len(self._sizes) > self._MAX_KNOWN_SIZES:
                self._sizes.clear()
            self._sizes.update((f.path, f.size) for f in out if ".checkpoint." in f.name)
        return out

    def _list_s3(self, directory: str, start: str) -> list[FileInfo]:
        """ListObjectsV2 pages from `start` on (StartAfter is exclusive: it gets the name just before)."""
        bucket, key = self._bucket_key(directory)
        prefix = key.strip("/") + "/" if key.strip("/") else ""
        params: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "Delimiter": "/", "MaxKeys": self.list_page_size}
        if start:
            last = start[-1]
            params["StartAfter"] = prefix + start[:-1] + (chr(ord(last) - 1) if ord(last) > 0 else "")
        out: list[FileInfo] = []
        while True:
            page = self.retrying("LIST", directory, functools.partial(self.fs.call_s3, "list_objects_v2", **params))
            for obj in page.get("Contents") or ():
                name = obj["Key"][len(prefix) :]
                if not name or "/" in name or name < start:
                    continue
                path = f"{self._protocol}://{bucket}/{obj['Key']}"
                out.append(FileInfo(path, int(obj.get("Size") or 0), _mtime_ms(obj)))
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return out
            params["ContinuationToken"] = token

    def _list_fsspec(self, directory: str, start: str) -> list[FileInfo]:
        entries = self.retrying(
            "LIST", directory, lambda: self.fs.ls(self._strip(directory), detail=True, refresh=True)
        )
        out = []
        for e in entries:
            if e.get("type") not in ("file", None):
                continue
            name = e["name"].rstrip("/").rsplit("/", 1)[-1]
            if name < start:
                continue
            out.append(FileInfo(self._unstrip(e["name"]), int(e.get("size") or 0), _mtime_ms(e)))
        return out

    def read_bytes(self, path: str) -> bytes:
        stripped = self._strip(path)
        return self.retrying("GET", path, lambda: self.fs.cat_file(stripped, **self._cat_kwargs))

    def open(self, path: str) -> BinaryIO:
        stripped = self._strip(path)
        if self.is_s3:
            size = self._sizes.get(path)
            raw = self.retrying(
                "HEAD",
                path,
                lambda: self.fs.open(stripped, "rb", block_size=self.block_size, cache_type="blockcache", size=size),
            )
            if size is not None:  # s3fs would HEAD the object for its details on the first read
                raw.details = {"name": stripped, "size": size, "type": "file"}
        else:
            raw = self.retrying("HEAD", path, lambda: self.fs.open(stripped, "rb"))
        return cast(BinaryIO, _RetryingFile(raw, self, path))

    def head(self, path: str) -> FileInfo | None:
        try:
            if self.is_s3:
                bucket, key = self._bucket_key(path)
                resp = self.retrying("HEAD", path, lambda: self.fs.call_s3("head_object", Bucket=bucket, Key=key))
                return FileInfo(path, int(resp.get("ContentLength") or 0), _mtime_ms(resp))
            info = self.retrying("HEAD", path, lambda: self.fs.info(self._strip(path)))
        except FileNotFoundError:
            return None
        return FileInfo(path, int(info.get("size") or 0), _mtime_ms(info))

    def is_dir(self, path: str) -> bool:
        try:
            if self.is_s3:
                bucket, key = self._bucket_key(path)
                prefix = key.strip("/") + "/" if key.strip("/") else ""
                resp = self.retrying(
                    "LIST",
                    path,
                    lambda: self.fs.call_s3("list_objects_v2", Bucket=bucket, Prefix=prefix, MaxKeys=1),
                )
                return bool(resp.get("KeyCount") or resp.get("Contents"))
            return bool(self.retrying("HEAD", path, lambda: self.fs.isdir(self._strip(path))))
        except FileNotFoundError:
            return False

    def join(self, base: str, *parts: str) -> str:
        return "/".join([base.rstrip("/"), *parts])
