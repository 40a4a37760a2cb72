"""Object stores through fsspec (S3 via s3fs, GCS, ABFS, memory): listing, ranged reads, writes, the one
retry layer, typed errors.

Writes (the `LogStore` write verbs; delta-writes.md §1.1):

* `put_if_absent` is one create-only request: S3 `PUT` with `If-None-Match: *` (s3fs
  `pipe_file(mode="create")`; 412 PreconditionFailed = exists, 409 ConditionalRequestConflict = another
  conditional write was in flight, retried), GCS upload with `ifGenerationMatch=0` (gcsfs
  `pipe_file(mode="create")` on its JSON-API filesystem; 412 = exists), Azure Put Blob with
  `If-None-Match: *` (adlfs `pipe_file(overwrite=False)`, i.e. `upload_blob(overwrite=False)`; 409
  BlobAlreadyExists or 412 = exists); fsspec's in-process memory filesystem under a process lock. A GCS or
  Azure client too old to send the precondition leaves `atomic_put_if_absent` False. Any other fsspec
  filesystem only has check-then-write, so `put_if_absent` refuses with `UnsupportedStoreError` unless the
  store was built with `unsafe_put_if_absent=True` (one writer process only, as delta-rs's
  `AWS_S3_ALLOW_UNSAFE_RENAME`). A server answering NotImplemented to the conditional request (some
  S3-compatible stores) is refused the same way, or with the opt-in gets check-then-write from then on.
  Servers that ignore the precondition silently cannot be detected (gcp-storage-emulator does: use
  fake-gcs-server to test against an emulator).
* An "exists" answer may be to a resend of our own write whose first answer was lost: our retry layer
  resends after a dropped connection or a 5xx, and aiohttp (under s3fs and adlfs) resends an idempotent
  PUT once when a kept-alive connection drops, below any layer we control. So every "exists" is checked
  by reading the object back: our bytes mean our write landed (success), other bytes are another writer's
  (`FileExistsError`). Commit content must therefore be unique to the writer (a commitInfo `txnId` makes
  it so). fsspec's memory filesystem needs no check.
* Retries: on S3, GCS and Azure the store's `RetryPolicy` is the one retry layer. botocore's and s3fs's
  loops are off (see `s3fs_options`); gcsfs's request loop is bypassed (`_single_attempt_gcsfs`) and the
  Azure SDK's retry policy is set to no retries (`_single_attempt_adlfs`), so a logical request makes at
  most `max_attempts` attempts (plus aiohttp's one resend above).
* GCS goes through `gcsfs.core.GCSFileSystem`, not the class `gcsfs.GCSFileSystem` names in recent gcsfs
  (`ExtendedGcsFileSystem`, its experimental zonal/HNS support): that class writes to zonal buckets over
  gRPC, ignoring `mode="create"` (it would overwrite a commit), and asks the storage-control API for each
  bucket's layout, which emulators and private endpoints do not serve (minutes of timeouts). A zonal
  bucket that refuses JSON-API writes is then a `StorageError`, never a silent overwrite.
* `put` is one overwriting request (atomic visibility on object stores). `delete_many` sends S3
  DeleteObjects with up to 1,000 keys per request (missing keys count as deleted; a per-key error raises
  `StorageError` naming the first failing key, after retrying the failed keys if the error is
  transient); other filesystems delete file by file. `list_recursive` pages S3 ListObjectsV2 without a
  delimiter (one request per 1,000 keys), elsewhere fsspec `find`; `list_level` pages it with a "/" delimiter
  (directories are the common prefixes), elsewhere fsspec `ls`. Every S3 listing goes through one paging
  loop (`FsspecLogStore._s3_pages`).
* A read-only store (`read_only=True`, or anonymous access: `anon=True`, GCS `token="anon"`) refuses
  every write verb with `UnsupportedStoreError` before sending anything; a 403 on a write is a
  `StorageError(transient=False)`.
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
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, BinaryIO, TypeVar, cast
from urllib.parse import urlparse, urlsplit

from ..errors import BucketNotFoundError, DeltaError, InvalidArgumentError, StorageError, UnsupportedStoreError
from ..protocol.filenames import FileInfo
from .base import LevelEntry
from .retry import (
    NO_RETRY,
    NOT_FOUND_CODES,
    RetryPolicy,
    StorageFailure,
    classify_error,
    is_exists_answer,
    is_not_implemented,
    scrub,
    secret_values,
)

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
_GCS_SCHEMES = ("gs", "gcs")
_AZURE_SCHEMES = ("abfs", "abfss", "az")
# Object stores (no directories to make), and fsspec's memory filesystem, whose create-only write is atomic.
_OBJECT_STORE_SCHEMES = frozenset({*_S3_SCHEMES, *_GCS_SCHEMES, *_AZURE_SCHEMES, "memory"})
#: fsspec's memory filesystem is one store per process: a create under this lock is atomic.
_MEMORY_CREATE_LOCK = threading.Lock()


def _anonymous(options: Mapping[str, Any] | None) -> bool:
    """Whether the storage options ask for anonymous (unsigned, hence read-only) access."""
    opts = options or {}
    anon = opts.get("anon")
    return anon is True or str(anon).lower() == "true" or opts.get("token") == "anon"


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


#: Where botocore finds an S3 endpoint when the storage options give none, in its order.
S3_ENDPOINT_ENV = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")


def endpoint_problem(endpoint: Any) -> str | None:
    """Why `endpoint` is not an http(s) URL with a host, or None when it is one."""
    if not isinstance(endpoint, str) or not endpoint.strip():
        return "it is empty" if isinstance(endpoint, str) else f"it is a {type(endpoint).__name__}, not a URL"
    if re.search(r"\s", endpoint):
        return "it contains whitespace"
    try:
        parts = urlsplit(endpoint)
        port = parts.port  # raises on a non-numeric or out-of-range port
    except ValueError as exc:
        return f"it does not parse ({exc})"
    if parts.scheme not in ("http", "https"):
        return "it needs an http:// or https:// scheme"
    if not parts.hostname:
        return "it has no host"
    if port == 0:
        return "port 0 is not a port"
    return None


def check_endpoint(endpoint: Any, argument: str, *, where: str = "storage option", table: str | None = None) -> None:
    """Refuse a malformed S3 endpoint with one `InvalidArgumentError` naming `argument` (where it came from),
    before any request: botocore would raise a bare `ValueError` deep in its first request instead."""
    problem = endpoint_problem(endpoint)
    if problem:
        shown = re.sub(r"//[^/@\s]*@", "//***@", str(endpoint))  # credentials in the userinfo dropped
        raise InvalidArgumentError(
            f"malformed S3 endpoint {shown!r} ({where} {argument}): {problem}; expected e.g. https://host:9000",
            argument=argument,
            table=table,
        )


def check_s3_endpoint(uri: str, options: Mapping[str, Any] | None, environ: Mapping[str, str] | None = None) -> None:
    """`check_endpoint` on the endpoint an S3 table `uri` would use: the storage options' `endpoint_url`
    (or `client_kwargs.endpoint_url`), else botocore's environment variables (`S3_ENDPOINT_ENV`)."""
    if urlparse(uri).scheme not in _S3_SCHEMES:
        return
    opts = s3fs_options(options)
    given = [
        (name, value)
        for name, value in (
            ("endpoint_url", opts.get("endpoint_url")),
            ("client_kwargs.endpoint_url", (opts.get("client_kwargs") or {}).get("endpoint_url")),
        )
        if value is not None
    ]
    for name, value in given:
        check_endpoint(value, name, table=uri)
    if not given:
        env = os.environ if environ is None else environ
        name = next((n for n in S3_ENDPOINT_ENV if n in env), None)
        if name is not None:
            check_endpoint(env[name], name, where="environment variable", table=uri)


@functools.cache
def _single_attempt_s3fs() -> type:
    """`s3fs.S3FileSystem` with its own retry loop off (one attempt per call; the store retries)."""
    import s3fs

    class SingleAttemptS3FileSystem(s3fs.S3FileSystem):  # type: ignore[misc]
        retries = 1

    return SingleAttemptS3FileSystem


# -- GCS and Azure: single-attempt clients -------------------------------------------------------------


def _fs_options(fs_class: type, uri: str, options: Mapping[str, Any] | None) -> dict[str, Any]:
    """Constructor keywords: what the URI implies (an Azure account in `container@account.host`, a GCS
    generation), then the caller's options; no listings cache (a log store must see other writers' files)."""
    out = {**fs_class._get_kwargs_from_urls(uri), **dict(options or {})}
    out.setdefault("use_listings_cache", False)
    return out


@functools.cache
def _single_attempt_gcsfs() -> type:
    """gcsfs's JSON-API filesystem with its own request retry loop off and its errors made classifiable.

    `gcsfs.core.GCSFileSystem._request` retries up to 6 times (sleeps of up to 32 s); its undecorated
    function (`__wrapped__`) makes one attempt. gcsfs turns a 403 into a bare `OSError("Forbidden...")`, a
    502 into `requests.exceptions.ProxyError` and a 400 mentioning "invalid" into `ValueError`: they become
    `PermissionError` and gcsfs `HttpError`s with the status, which `classify_error` reads.
    """
    import gcsfs.core
    import requests.exceptions
    from gcsfs.retry import HttpError

    base = gcsfs.core.GCSFileSystem
    request_once = getattr(base._request, "__wrapped__", None)

    class SingleAttemptGCSFileSystem(base):  # type: ignore[misc,valid-type]
        async def _request(self, method: str, path: str, *args: Any, **kwargs: Any) -> Any:
            try:
                if request_once is None:  # a gcsfs without the decorator: its own retries stay
                    return await super()._request(method, path, *args, **kwargs)
                return await request_once(self, method, path, *args, **kwargs)
            except (FileExistsError, FileNotFoundError):
                raise
            except requests.exceptions.ProxyError:  # gcsfs's rendering of a 502 answer
                raise HttpError({"code": 502, "message": "Bad Gateway"}) from None
            except ValueError as exc:
                if str(exc).startswith("Bad Request"):
                    raise HttpError({"code": 400, "message": str(exc)}) from None
                raise
            except OSError as exc:
                if type(exc) is OSError and str(exc).startswith("Forbidden"):
                    raise PermissionError(errno.EACCES, str(exc)) from None
                raise

    return SingleAttemptGCSFileSystem


@functools.cache
def _single_attempt_adlfs() -> type:
    """adlfs's filesystem with the Azure SDK's retry policy (10 retries by default) set to none.

    The SDK's `StorageRetryPolicy` instance sits in the service client's pipeline (`_config.retry_policy`),
    shared by every blob and container client made from it.
    """
    import adlfs

    class SingleAttemptAzureBlobFileSystem(adlfs.AzureBlobFileSystem):  # type: ignore[misc]
        def do_connect(self) -> None:
            super().do_connect()
            policy = getattr(getattr(self.service_client, "_config", None), "retry_policy", None)
            if policy is not None and hasattr(policy, "total_retries"):
                policy.total_retries = 0
            else:  # an SDK laid out differently: its retries stay, stacked under ours
                log.debug("adlfs: no retry policy found on the service client; the SDK's retries stay on")

    return SingleAttemptAzureBlobFileSystem


def _accepts(method: Any, name: str) -> bool:
    try:
        return name in inspect.signature(method).parameters
    except (TypeError, ValueError):
        return False


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

    `retry` defaults to `RetryPolicy()` on S3, GCS and Azure (whose clients' own retries are off) and to
    `NO_RETRY` elsewhere; `block_size` is the ranged-read block for parquet. `attempt_count` and `retry_count`
    count storage calls and retries made (for tests and metrics).

    `read_only=True` (implied by anonymous access) makes every write verb raise `UnsupportedStoreError`
    before any request. `unsafe_put_if_absent=True` lets `put_if_absent` fall back to check-then-write
    on a filesystem without an atomic create: safe only when a single process ever writes the table.
    """

    #: Keys per ListObjectsV2 page (S3's maximum).
    list_page_size: int = 1000
    #: Keys per DeleteObjects request (S3's maximum).
    delete_batch_size: int = 1000
    #: Remembered listing sizes (checkpoint files only), so opening them needs no HEAD.
    _MAX_KNOWN_SIZES = 4096

    def __init__(
        self,
        uri: str,
        storage_options: Mapping[str, Any] | None = None,
        *,
        retry: RetryPolicy | None = None,
        block_size: int = 4 * 2**20,
        read_only: bool = False,
        unsafe_put_if_absent: bool = False,
    ) -> None:
        self.root = uri.rstrip("/")
        self._protocol = urlparse(uri).scheme
        self.is_s3 = self._protocol in _S3_SCHEMES
        self.is_gcs = self._protocol in _GCS_SCHEMES
        self.is_azure = self._protocol in _AZURE_SCHEMES
        anonymous = _anonymous(storage_options)
        self.read_only = read_only or anonymous
        self._read_only_reason = "read_only=True" if read_only else "anonymous access"
        self.unsafe_put_if_absent = unsafe_put_if_absent
        self._secrets = secret_values(storage_options)
        if self.is_s3:
            self.fs = _single_attempt_s3fs()(**s3fs_options(storage_options))
        elif self.is_gcs:
            cls = _single_attempt_gcsfs()
            self.fs = cls(**_fs_options(cls, uri, storage_options))
        elif self.is_azure:
            cls = _single_attempt_adlfs()
            self.fs = cls(**_fs_options(cls, uri, storage_options))
        else:
            import fsspec

            self.fs, _ = fsspec.core.url_to_fs(uri, **dict(storage_options or {}))
        #: True when `put_if_absent` is an atomic create (False for read-only stores and under the opt-in).
        self.atomic_put_if_absent = self._has_atomic_create() and not self.read_only
        cloud = self.is_s3 or self.is_gcs or self.is_azure
        self.retry = retry if retry is not None else (RetryPolicy() if cloud else NO_RETRY)
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

    def _has_atomic_create(self) -> bool:
        """Whether this filesystem's client can send the create-only precondition (see the module doc)."""
        if self.is_s3 or self._protocol == "memory":
            return True
        if self.is_gcs:  # `mode="create"` adds ifGenerationMatch=0 to the upload
            return _accepts(self.fs._pipe_file, "mode")
        if self.is_azure:  # `overwrite=False` makes upload_blob send If-None-Match: *
            return _accepts(self.fs._pipe_file, "overwrite")
        return False

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
        """A listed name as a URI, spelled as the root was (`abfs://c@account.host/t/...` stays so)."""
        root = self._strip(self.root).rstrip("/")
        if root and path.startswith(root + "/"):
            return self.root + path[len(root) :]
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

    def _s3_location(self, directory: str) -> tuple[str, str]:
        """(bucket, key prefix) of the keys under `directory` (the prefix ends in "/", or is "" at the root)."""
        bucket, key = self._bucket_key(directory)
        return bucket, (key.strip("/") + "/" if key.strip("/") else "")

    def _s3_pages(self, directory: str, bucket: str, prefix: str, **params: Any) -> Iterator[Mapping[str, Any]]:
        """The ListObjectsV2 answers for the keys under `prefix`, one request per `list_page_size` keys
        (each under the retry policy), following continuation tokens; `params` (`Delimiter`, `StartAfter`,
        `MaxKeys`) go in every request. The one S3 listing loop: `list_from`, `list_recursive`,
        `list_level` and `is_dir` all page through it. A missing bucket is `FileNotFoundError`."""
        request: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": self.list_page_size, **params}
        while True:
            page = self.retrying("LIST", directory, functools.partial(self.fs.call_s3, "list_objects_v2", **request))
            yield page
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return
            request["ContinuationToken"] = token

    def _list_s3(self, directory: str, start: str) -> list[FileInfo]:
        """ListObjectsV2 pages from `start` on (StartAfter is exclusive: it gets the name just before)."""
        bucket, prefix = self._s3_location(directory)
        params: dict[str, Any] = {"Delimiter": "/"}
        if start:
            last = start[-1]
            params["StartAfter"] = prefix + start[:-1] + (chr(ord(last) - 1) if ord(last) > 0 else "")
        out: list[FileInfo] = []
        for page in self._s3_pages(directory, bucket, prefix, **params):
            for obj in page.get("Contents") or ():
                name = obj["Key"][len(prefix) :]
                if not name or "/" in name or name < start:
                    continue
                path = f"{self._protocol}://{bucket}/{obj['Key']}"
                out.append(FileInfo(path, int(obj.get("Size") or 0), _mtime_ms(obj)))
        return out

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
                bucket, prefix = self._s3_location(path)
                resp = next(self._s3_pages(path, bucket, prefix, MaxKeys=1))  # one request: any key under it
                return bool(resp.get("KeyCount") or resp.get("Contents"))
            return bool(self.retrying("HEAD", path, lambda: self.fs.isdir(self._strip(path))))
        except FileNotFoundError:
            return False

    def join(self, base: str, *parts: str) -> str:
        return "/".join([base.rstrip("/"), *parts])

    def check_bucket(self) -> None:
        """Raise `BucketNotFoundError` when the bucket (container) of the root does not exist: one S3
        HeadBucket, or `info` of the container elsewhere, under the retry policy (denied access stays a
        `StorageError`). A listing cannot tell: it answers a missing bucket as an empty directory."""
        if not (self.is_s3 or self.is_gcs or self.is_azure):
            return
        bucket = self._strip(self.root).split("/", 1)[0]
        root = f"{self._protocol}://{bucket}"
        try:
            if self.is_s3:
                self.retrying("HEAD", root, lambda: self.fs.call_s3("head_bucket", Bucket=bucket))
            else:
                self.retrying("HEAD", root, lambda: self.fs.info(bucket))
        except FileNotFoundError:
            raise BucketNotFoundError(
                f"bucket {bucket!r} does not exist (check the table URI and the storage endpoint/account)",
                table=self.root,
            ) from None

    # -- writes --------------------------------------------------------------------------------------
    def _require_writable(self, op: str, path: str) -> None:
        if self.read_only:
            raise UnsupportedStoreError(
                f"{op} refused: {self!r} is read-only ({self._read_only_reason}); nothing was written",
                table=self.root,
                file=self._relative(path),
            )

    def _refuse_put_if_absent(self, path: str, why: str) -> UnsupportedStoreError:
        return UnsupportedStoreError(
            f"{self!r} cannot create a file only if it is absent atomically ({why}), which commits need: two "
            "writers could both write the same version. Use a store with conditional writes (s3, gs, abfs, or "
            "a local path), or pass unsafe_put_if_absent=True to FsspecLogStore if a single process is the "
            "only writer of this table; nothing was written",
            table=self.root,
            file=self._relative(path),
        )

    def put_if_absent(self, path: str, data: bytes) -> None:
        """Create `path` only if absent (one conditional request); `FileExistsError` when another writer's
        file is there.

        An "exists" answer is checked by reading the object back (except in memory): equal bytes mean our own
        write had landed and the answer was to a resend of it, so the call succeeds. `UnsupportedStoreError`
        (nothing written) on a read-only store, or one without an atomic create unless opted in. A transient
        `StorageError` after a failed attempt leaves the outcome unknown: the file may have been written.
        """
        self._require_writable("PUT", path)
        if not self.atomic_put_if_absent and not self.unsafe_put_if_absent:
            raise self._refuse_put_if_absent(path, f"fsspec protocol {self._protocol or 'file'!r}")
        stripped = self._strip(path)
        data = bytes(data)
        # An "exists" may answer a resend of our own landed write: ours (below a failed attempt), aiohttp's
        # (it resends an idempotent PUT once when the connection drops, inside s3fs), gcsfs's or adlfs's.
        verify = self._protocol != "memory"
        uncertain = False

        def attempt() -> bool:
            nonlocal uncertain
            try:
                self._create(stripped, data)
            except Exception as exc:
                if is_exists_answer(exc):
                    return False
                if is_not_implemented(exc):
                    if not self.unsafe_put_if_absent:
                        why = "the server does not implement conditional writes"
                        raise self._refuse_put_if_absent(path, why) from None
                    self.atomic_put_if_absent = False  # from now on: check, then write
                    return attempt()
                failure = classify_error(exc)
                if failure is not None and failure.retryable and failure.kind != "conflict":
                    uncertain = True  # the request may have been applied before its answer was lost
                raise
            return True

        try:
            created = self.retrying("PUT", path, attempt)
        except StorageError as exc:
            if uncertain and exc.transient:
                raise StorageError(
                    exc.message + " (the file may have been written: read it back to know)",
                    table=exc.table,
                    file=exc.file,
                    transient=True,
                ) from None
            raise
        if created:
            return
        if verify and self._holds(path, data):
            log.info("PUT %s: exists with our bytes: an earlier send had created it", self._relative(path))
            return
        raise FileExistsError(errno.EEXIST, "File exists", path)

    def _create(self, stripped: str, data: bytes) -> None:
        """One create-only write (raises the client's "exists" answer)."""
        if not self.atomic_put_if_absent:  # unsafe opt-in: check, then write
            if self.fs.exists(stripped):
                raise FileExistsError(errno.EEXIST, "File exists", stripped)
            self._make_parent(stripped)
            self.fs.pipe_file(stripped, data)
        elif self._protocol == "memory":
            with _MEMORY_CREATE_LOCK:
                self.fs.pipe_file(stripped, data, mode="create")
        elif self.is_azure:
            self.fs.pipe_file(stripped, data, overwrite=False)  # Put Blob, If-None-Match: *
        else:
            self.fs.pipe_file(stripped, data, mode="create")  # S3 If-None-Match: *; GCS ifGenerationMatch=0

    def _make_parent(self, stripped: str) -> None:
        """Directories exist on plain filesystems (fsspec's `file`), not on object stores."""
        if self._protocol not in _OBJECT_STORE_SCHEMES:
            self.fs.makedirs(self.fs._parent(stripped), exist_ok=True)

    def _holds(self, path: str, data: bytes) -> bool:
        try:
            return self.read_bytes(path) == data
        except FileNotFoundError:
            return False

    def put(self, path: str, data: bytes) -> None:
        """Write `path` whole, replacing what is there (one PUT: readers see the old or the new object)."""
        self._require_writable("PUT", path)
        stripped = self._strip(path)
        payload = bytes(data)

        def attempt() -> None:
            self._make_parent(stripped)
            self.fs.pipe_file(stripped, payload)

        self.retrying("PUT", path, attempt)

    def write_new(self, path: str, data: bytes) -> None:
        """One PUT (an object appears whole or not at all; the name is fresh, so nothing is replaced)."""
        self.put(path, data)

    def delete_many(self, paths: Sequence[str]) -> int:
        """Delete `paths` (S3: DeleteObjects, 1,000 keys a request); missing files count as deleted."""
        if not paths:
            return 0
        self._require_writable("DELETE", paths[0])
        if not self.is_s3:
            for path in paths:
                stripped = self._strip(path)
                try:
                    self.retrying("DELETE", path, functools.partial(self.fs.rm_file, stripped))
                except FileNotFoundError:
                    pass
            return len(paths)
        by_bucket: dict[str, list[str]] = {}
        for path in paths:
            bucket, key = self._bucket_key(path)
            by_bucket.setdefault(bucket, []).append(key)
        for bucket, keys in by_bucket.items():
            unique = list(dict.fromkeys(keys))
            for i in range(0, len(unique), self.delete_batch_size):
                self._delete_batch(bucket, unique[i : i + self.delete_batch_size])
        return len(paths)

    def _delete_batch(self, bucket: str, keys: list[str]) -> None:
        pending = keys
        first_failed: str | None = None

        def attempt() -> None:
            nonlocal pending, first_failed
            delete = {"Objects": [{"Key": k} for k in pending], "Quiet": True}
            resp = self.fs.call_s3("delete_objects", Bucket=bucket, Delete=delete)
            errors = [e for e in resp.get("Errors") or () if e.get("Code") not in NOT_FOUND_CODES]
            if errors:
                failed = {e.get("Key") for e in errors}
                pending = [k for k in pending if k in failed]
                first_failed = str(errors[0].get("Key"))
                raise _DeleteErrors(errors)
            pending, first_failed = [], None

        try:
            self.retrying("DELETE", f"{self._protocol}://{bucket}/{keys[0]}", attempt)
        except FileNotFoundError:  # no such bucket: nothing left to delete
            return
        except StorageError as exc:
            if first_failed is None:
                raise
            raise StorageError(
                f"{exc.message} ({len(pending)} of {len(keys)} keys in the request not deleted; "
                "the file named is the first)",
                table=self.root,
                file=self._relative(f"{self._protocol}://{bucket}/{first_failed}"),
                transient=exc.transient,
            ) from None

    def list_recursive(self, directory: str) -> Iterator[FileInfo]:
        """Every file under `directory` at any depth, with size and mtime (S3: key order)."""
        if self.is_s3:
            yield from self._list_s3_recursive(directory)
            return
        stripped = self._strip(directory)
        self.fs.invalidate_cache(stripped)
        try:
            found = self.retrying("LIST", directory, lambda: self.fs.find(stripped, withdirs=False, detail=True))
        except FileNotFoundError:
            return
        for name, info in found.items():
            if info.get("type") == "directory":
                continue
            yield FileInfo(self._unstrip(name), int(info.get("size") or 0), _mtime_ms(info))

    def _list_s3_recursive(self, directory: str) -> Iterator[FileInfo]:
        bucket, prefix = self._s3_location(directory)
        try:
            for page in self._s3_pages(directory, bucket, prefix):
                for obj in page.get("Contents") or ():
                    if obj["Key"].endswith("/"):  # a "directory" marker object
                        continue
                    path = f"{self._protocol}://{bucket}/{obj['Key']}"
                    yield FileInfo(path, int(obj.get("Size") or 0), _mtime_ms(obj))
        except FileNotFoundError:  # no bucket
            return

    def list_level(self, directory: str) -> Iterator[LevelEntry]:
        """Files and subdirectories directly in `directory`: S3 ListObjectsV2 with a "/" delimiter (one
        request per 1,000 entries; common prefixes are the subdirectories), elsewhere fsspec `ls`."""
        if self.is_s3:
            yield from self._list_level_s3(directory)
            return
        stripped = self._strip(directory).rstrip("/")
        self.fs.invalidate_cache(stripped)
        try:
            entries = self.retrying("LIST", directory, lambda: self.fs.ls(stripped, detail=True))
        except FileNotFoundError:
            return
        for e in entries:
            name = e["name"].rstrip("/").rsplit("/", 1)[-1]
            if e.get("type") == "directory":
                yield LevelEntry(name, 0, 0, True)
            else:
                yield LevelEntry(name, int(e.get("size") or 0), _mtime_ms(e), False)

    def _list_level_s3(self, directory: str) -> Iterator[LevelEntry]:
        bucket, prefix = self._s3_location(directory)
        try:
            for page in self._s3_pages(directory, bucket, prefix, Delimiter="/"):
                for common in page.get("CommonPrefixes") or ():
                    yield LevelEntry(common["Prefix"][len(prefix) :].rstrip("/"), 0, 0, True)
                for obj in page.get("Contents") or ():
                    name = obj["Key"][len(prefix) :]
                    if name and "/" not in name:  # not the directory's own marker object
                        yield LevelEntry(name, int(obj.get("Size") or 0), _mtime_ms(obj), False)
        except FileNotFoundError:  # no bucket
            return


class _DeleteErrors(OSError):
    """Per-key errors of a DeleteObjects answer, shaped like botocore's `ClientError` for `classify_error`."""

    def __init__(self, errors: list[Mapping[str, Any]]) -> None:
        first = errors[0]
        super().__init__(f"{len(errors)} keys not deleted; first {first.get('Key')!r}: {first.get('Message')}")
        self.response = {"Error": {"Code": first.get("Code"), "Message": first.get("Message")}, "ResponseMetadata": {}}
