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
  most `max_attempts` HTTP requests. gcsfs and adlfs keep their own retry policies; by default no
  second layer is stacked on them (pass `retry=` to add one).
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

import errno
import functools
import inspect
import io
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Protocol, TypeVar, cast
from urllib.parse import unquote, urlparse

from ..errors import DeltaError, StorageError
from ..protocol.filenames import FileInfo

log = logging.getLogger(__name__)

_T = TypeVar("_T")


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


# -- retries ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RetryPolicy:
    """At most `max_attempts` attempts; before retry n sleep `uniform(0, min(max_delay, base_delay * 2**(n-1)))`."""

    max_attempts: int = 5
    base_delay: float = 0.2
    max_delay: float = 5.0
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")

    def delay(self, retry: int) -> float:
        """Seconds to wait before retry number `retry` (1 for the first retry): full jitter."""
        import random

        return random.uniform(0.0, min(self.max_delay, self.base_delay * 2 ** (retry - 1)))


#: One attempt, no retry.
NO_RETRY = RetryPolicy(max_attempts=1)

_AUTH_CODES = frozenset(
    {
        "AccessDenied",
        "AccountProblem",
        "AllAccessDisabled",
        "AuthenticationFailed",
        "AuthorizationFailure",
        "AuthorizationHeaderMalformed",
        "AuthFailure",
        "ExpiredToken",
        "ExpiredTokenException",
        "InvalidAccessKeyId",
        "InvalidClientTokenId",
        "InvalidSecurity",
        "InvalidToken",
        "NotSignedUp",
        "RequestTimeTooSkewed",
        "SignatureDoesNotMatch",
        "TokenRefreshRequired",
        "UnrecognizedClientException",
    }
)
_THROTTLE_CODES = frozenset(
    {
        "BandwidthLimitExceeded",
        "RequestLimitExceeded",
        "RequestThrottled",
        "RequestThrottledException",
        "ServerBusy",
        "ServiceUnavailable",
        "SlowDown",
        "ThrottledException",
        "Throttling",
        "ThrottlingException",
        "TooManyRequests",
        "TooManyRequestsException",
        "rateLimitExceeded",
        "userRateLimitExceeded",
    }
)
_SERVER_CODES = frozenset(
    {"InternalError", "InternalServerError", "OperationTimedOut", "RequestTimeout", "RequestTimeoutException"}
)
_NOT_FOUND_CODES = frozenset({"NoSuchKey", "NoSuchBucket", "NotFound", "BlobNotFound", "ContainerNotFound"})
# Exception class names (anywhere in the MRO or the cause chain) that mean the connection, not the request, failed.
_CONNECTION_ERRORS = frozenset(
    {
        "ChunkedEncodingError",
        "ClientConnectionError",
        "ClientOSError",
        "ClientPayloadError",
        "ConnectTimeoutError",
        "ConnectionClosedError",
        "EndpointConnectionError",
        "FSTimeoutError",
        "HTTPClientError",
        "IncompleteRead",
        "ProtocolError",
        "ReadTimeoutError",
        "ResponseParserError",  # throttling answers can carry invalid XML (s3fs #484)
        "ResponseStreamingError",
        "ServerDisconnectedError",
        "ServerTimeoutError",
        "ServiceRequestError",
        "ServiceResponseError",
    }
)
_CREDENTIAL_ERRORS = frozenset(
    {
        "ClientAuthenticationError",
        "CredentialRetrievalError",
        "DefaultCredentialsError",
        "NoAuthTokenError",
        "NoCredentialsError",
        "PartialCredentialsError",
        "RefreshError",
    }
)
_CLIENT_MODULES = (
    "botocore",
    "aiobotocore",
    "aiohttp",
    "s3fs",
    "gcsfs",
    "adlfs",
    "azure",
    "google",
    "urllib3",
    "fsspec",
)
_SECRET_OPTION_PARTS = (
    "secret",
    "token",
    "password",
    "credential",
    "account_key",
    "sas",
    "connection_string",
    "private",
)
_SECRET_QUERY = re.compile(
    r"(?i)\b(sig|signature|x-amz-signature|x-amz-security-token|x-amz-credential|access_token|token|secret|password)"
    r"=([^&\s\"'<>]+)"
)


@dataclass(frozen=True)
class StorageFailure:
    """A classified storage exception. `kind`: auth, throttled, server, connection, client, not_found, other."""

    kind: str
    code: str | None = None
    status: int | None = None
    message: str = ""

    @property
    def retryable(self) -> bool:
        return self.kind in ("throttled", "server", "connection")

    @property
    def transient(self) -> bool:
        return self.kind in ("throttled", "server", "connection", "other")


def _exception_chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _http_status(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599 else None


def classify_error(exc: BaseException) -> StorageFailure | None:
    """What a storage client's exception means; None when it is not a storage failure at all.

    Reads the service answer (botocore's `response`, or a `status_code`/`status`/`code` attribute as
    azure, aiohttp and gcsfs errors carry) anywhere in the cause chain, then the exception classes.
    """
    chain = list(_exception_chain(exc))
    code: str | None = None
    status: int | None = None
    message: str | None = None
    for e in chain:
        response = getattr(e, "response", None)
        if isinstance(response, Mapping) and isinstance(response.get("Error"), Mapping):
            error = response["Error"]
            code = str(error.get("Code") or "") or None
            message = str(error.get("Message") or "") or None
            status = _http_status((response.get("ResponseMetadata") or {}).get("HTTPStatusCode"))
            break
        found = next(
            (s for s in (_http_status(getattr(e, a, None)) for a in ("status_code", "status", "code")) if s), None
        )
        if found is not None:
            status = found
            code = str(getattr(e, "error_code", None) or getattr(e, "reason", None) or "") or None
            break
    if status is None and code is not None and code.isdigit():
        status = _http_status(int(code))
    if code is not None and code.isdigit():
        code = None  # a body-less answer (HEAD): the status says it all
    names = {cls.__name__ for e in chain for cls in type(e).__mro__}
    text = message or str(exc) or type(exc).__name__

    def failure(kind: str) -> StorageFailure:
        return StorageFailure(kind, code, status, text)

    if code in _AUTH_CODES or status in (401, 403) or names & _CREDENTIAL_ERRORS:
        return failure("auth")
    if any(isinstance(e, PermissionError) for e in chain):
        return failure("auth")
    if code in _NOT_FOUND_CODES or status == 404:
        return failure("not_found")
    if code in _THROTTLE_CODES or status in (429, 503):
        return failure("throttled")
    if code in _SERVER_CODES or status in (500, 502, 504):
        return failure("server")
    if names & _CONNECTION_ERRORS or any(isinstance(e, ConnectionError | TimeoutError) for e in chain):
        return failure("connection")
    if status is not None and 400 <= status < 500:
        return failure("client")
    if isinstance(exc, OSError) or any(type(e).__module__.split(".")[0] in _CLIENT_MODULES for e in chain):
        return failure("other")
    return None


def secret_values(options: Mapping[str, Any] | None) -> tuple[str, ...]:
    """String values of storage options whose names look secret (secret, token, password, ...), longest first."""
    found: set[str] = set()

    def walk(value: Any, secret: bool) -> None:
        if isinstance(value, Mapping):
            for k, v in value.items():
                walk(v, secret or any(part in str(k).lower() for part in _SECRET_OPTION_PARTS))
        elif isinstance(value, list | tuple):
            for v in value:
                walk(v, secret)
        elif secret and isinstance(value, str) and len(value) >= 4:
            found.add(value)

    walk(options or {}, False)
    return tuple(sorted(found, key=len, reverse=True))


def scrub(text: str, secrets: tuple[str, ...] = ()) -> str:
    """`text` without the given secret values and without signature/token query parameters."""
    for secret in secrets:
        text = text.replace(secret, "***")
    return _SECRET_QUERY.sub(r"\1=***", text)


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


def store_for(uri: str, storage_options: Mapping[str, Any] | None = None) -> LogStore:
    """The store for a table URI: `LocalLogStore` for local paths, fsspec for the rest."""
    if is_local(uri):
        return LocalLogStore()
    return FsspecLogStore(uri, storage_options)
