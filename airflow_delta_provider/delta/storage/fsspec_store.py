"""`FsspecLogStore`: any fsspec filesystem (S3, GCS, Azure, memory, ...) as a `LogStore`, with the one retry
layer and typed errors. What is particular to a backend (its single-attempt client, create-only write and
"exists" answers) is in `s3`, `gcs` and `azure`.

Of two writers of one version exactly one may create its file (PROTOCOL.md "Delta Log Entries";
https://docs.delta.io/latest/delta-storage.html): `put_if_absent` is one create-only request on S3, GCS and
Azure, a create under a process lock in fsspec's memory filesystem. Any other filesystem (or a server answering
NotImplemented to the conditional request) only has check-then-write, refused with `UnsupportedStoreError`
unless `unsafe_put_if_absent=True` (one writer process only, as delta-rs's `AWS_S3_ALLOW_UNSAFE_RENAME`).

An "exists" answer may be to a resend of our own write whose answer was lost (our retries, or aiohttp's one
resend of an idempotent PUT under s3fs and adlfs, below any layer we control), so it is checked by reading
the object back: our bytes mean our write landed. Commit content is unique per writer (a commitInfo `txnId`).

A read-only store (`read_only=True`, or anonymous access: `anon=True`, GCS `token="anon"`) refuses every
write verb before sending anything.
"""

from __future__ import annotations

import errno
import functools
import io
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import ModuleType
from typing import Any, BinaryIO, TypeVar, cast
from urllib.parse import urlparse

from ..errors import BucketNotFoundError, DeltaError, StorageError, UnsupportedStoreError
from ..protocol.filenames import FileInfo
from . import azure, gcs, s3
from .base import LevelEntry, accepts, mtime_ms
from .retry import (
    NO_RETRY,
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

#: The object stores by URI scheme: each module gives `filesystem`, `CREATE_KWARGS` and `EXISTS_CODES`.
_BACKENDS: dict[str, ModuleType] = {scheme: b for b in (s3, gcs, azure) for scheme in b.SCHEMES}
#: Filesystems whose `mv` of a file is one atomic rename (`FsspecLogStore.move_method`).
_RENAME_PROTOCOLS = frozenset({"hdfs", "viewfs", "file", "local"})
#: fsspec's memory filesystem is one store per process: a create under this lock is atomic.
_MEMORY_CREATE_LOCK = threading.Lock()


def _anonymous(options: Mapping[str, Any] | None) -> bool:
    """Whether the storage options ask for anonymous (unsigned, hence read-only) access."""
    opts = options or {}
    anon = opts.get("anon")
    return anon is True or str(anon).lower() == "true" or opts.get("token") == "anon"


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


class FsspecLogStore(s3.S3Requests):
    """Any fsspec filesystem (s3, gs, abfs, memory, ...).

    `retry` defaults to `RetryPolicy()` on S3, GCS and Azure (whose clients' own retries are off), else
    `NO_RETRY`; `block_size` is the ranged-read block for parquet (a block cache on S3, so a checkpoint's
    footer and projected columns fetch only the blocks touched). `attempt_count` and `retry_count` count
    storage calls and retries (for tests and metrics).
    """

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
        #: The backend module (`s3`, `gcs`, `azure`), or None for any other filesystem.
        self._backend = _BACKENDS.get(self._protocol)
        self.is_s3 = self._backend is s3
        self.read_only = read_only or _anonymous(storage_options)
        self._read_only_reason = "read_only=True" if read_only else "anonymous access"
        self.unsafe_put_if_absent = unsafe_put_if_absent
        self._secrets = secret_values(storage_options)
        if self._backend is not None:
            self.fs = self._backend.filesystem(uri, storage_options)
        else:
            import fsspec

            self.fs, _ = fsspec.core.url_to_fs(uri, **dict(storage_options or {}))
        #: True when `put_if_absent` is an atomic create (False for read-only stores and under the opt-in).
        self.atomic_put_if_absent = self._has_atomic_create() and not self.read_only
        self.retry = retry if retry is not None else (RetryPolicy() if self._backend is not None else NO_RETRY)
        self._cat_kwargs: dict[str, Any] = s3.cat_kwargs(self.fs) if self.is_s3 else {}
        self.block_size = block_size
        self.attempt_count = 0
        self.retry_count = 0
        self._sizes: dict[str, int] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"FsspecLogStore({self.root!r})"

    def _has_atomic_create(self) -> bool:
        """Whether the client can send the create-only precondition: S3's is assumed (a server without it
        answers NotImplemented); GCS and Azure clients too old for it do not take the keyword."""
        if self._backend is None:
            return self._protocol == "memory"
        return self.is_s3 or all(accepts(self.fs._pipe_file, k) for k in self._backend.CREATE_KWARGS)

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

    # -- LogStore ------------------------------------------------------------------------------------
    def list_from(self, directory: str, start: str = "") -> list[FileInfo]:
        try:
            if self.is_s3:
                out = self._s3_list_from(directory, start)
            else:
                out = [
                    FileInfo(self._unstrip(e["name"]), int(e.get("size") or 0), mtime_ms(e))
                    for name, e in self._ls(directory)
                    if e.get("type") in ("file", None) and name >= start
                ]
        except FileNotFoundError:  # no bucket / no directory
            return []
        out.sort(key=lambda f: f.name)
        with self._lock:
            if len(self._sizes) > self._MAX_KNOWN_SIZES:
                self._sizes.clear()
            self._sizes.update((f.path, f.size) for f in out if ".checkpoint." in f.name)
        return out

    def _ls(self, directory: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
        """(name, fsspec entry) for each entry directly in `directory`, freshly listed; nothing if it is missing."""
        stripped = self._strip(directory).rstrip("/")
        self.fs.invalidate_cache(stripped)
        try:
            entries = self.retrying("LIST", directory, lambda: self.fs.ls(stripped, detail=True, refresh=True))
        except FileNotFoundError:
            return
        for e in entries:
            yield e["name"].rstrip("/").rsplit("/", 1)[-1], e

    def read_bytes(self, path: str) -> bytes:
        stripped = self._strip(path)
        return self.retrying("GET", path, lambda: self.fs.cat_file(stripped, **self._cat_kwargs))

    def open(self, path: str) -> BinaryIO:
        if self.is_s3:
            raw = self._s3_open(path)
        else:
            stripped = self._strip(path)
            raw = self.retrying("HEAD", path, lambda: self.fs.open(stripped, "rb"))
        return cast(BinaryIO, _RetryingFile(raw, self, path))

    def head(self, path: str) -> FileInfo | None:
        try:
            if self.is_s3:
                return self._s3_head(path)
            info = self.retrying("HEAD", path, lambda: self.fs.info(self._strip(path)))
        except FileNotFoundError:
            return None
        return FileInfo(path, int(info.get("size") or 0), mtime_ms(info))

    def is_dir(self, path: str) -> bool:
        try:
            if self.is_s3:
                return self._s3_is_dir(path)
            return bool(self.retrying("HEAD", path, lambda: self.fs.isdir(self._strip(path))))
        except FileNotFoundError:
            return False

    def join(self, base: str, *parts: str) -> str:
        return "/".join([base.rstrip("/"), *parts])

    def check_bucket(self) -> None:
        """`BucketNotFoundError` when the root's bucket (container) does not exist, which a listing cannot tell
        (it answers an empty directory); denied access stays a `StorageError`."""
        if self._backend is None:
            return
        bucket = self._strip(self.root).split("/", 1)[0]
        try:
            if self.is_s3:
                self._s3_head_bucket(bucket)
            else:
                self.retrying("HEAD", f"{self._protocol}://{bucket}", lambda: self.fs.info(bucket))
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
        file is there. An "exists" answer holding our bytes (read back, except in memory) was to a resend of
        our own landed write: success."""
        self._require_writable("PUT", path)
        if not self.atomic_put_if_absent and not self.unsafe_put_if_absent:
            raise self._refuse_put_if_absent(path, f"fsspec protocol {self._protocol or 'file'!r}")
        stripped = self._strip(path)
        data = bytes(data)
        exists_codes = self._backend.EXISTS_CODES if self._backend is not None else frozenset()
        uncertain = False

        def attempt() -> bool:
            nonlocal uncertain
            try:
                self._create(stripped, data)
            except Exception as exc:
                if is_exists_answer(exc, exists_codes):
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
        if self._protocol != "memory" and self._holds(path, data):
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
        elif self._backend is not None:  # S3 If-None-Match: *; GCS ifGenerationMatch=0; Azure If-None-Match: *
            self.fs.pipe_file(stripped, data, **self._backend.CREATE_KWARGS)
        else:  # memory
            with _MEMORY_CREATE_LOCK:
                self.fs.pipe_file(stripped, data, mode="create")

    def _make_parent(self, stripped: str) -> None:
        """Directories exist on plain filesystems (fsspec's `file`), not on object stores or in memory."""
        if self._backend is None and self._protocol != "memory":
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
        if not paths:
            return 0
        self._require_writable("DELETE", paths[0])
        if self.is_s3:
            self._s3_delete_many(paths)
            return len(paths)
        for path in paths:
            stripped = self._strip(path)
            try:
                self.retrying("DELETE", path, functools.partial(self.fs.rm_file, stripped))
            except FileNotFoundError:
                pass
        return len(paths)

    @property
    def move_method(self) -> str:
        """`"rename"` where the filesystem renames atomically (HDFS, fsspec's local files); S3 and GCS have no
        rename, and adlfs copies and deletes even on an ADLS gen2 account."""
        return "rename" if self._protocol in _RENAME_PROTOCOLS else "copy+delete"

    def move(self, src: str, dst: str) -> None:
        """A HEAD of `dst`, then one rename or a server-side copy and a delete of `src`. A file created at `dst`
        between the HEAD and the copy would be replaced (destinations are fresh quarantine paths, or the paths
        the files had)."""
        self._require_writable("MOVE", src)
        if self.head(dst) is not None:
            raise FileExistsError(errno.EEXIST, "File exists", dst)
        source, target = self._strip(src), self._strip(dst)
        if self.move_method == "rename":

            def rename() -> None:
                try:
                    self._make_parent(target)
                    self.fs.mv(source, target)
                except FileNotFoundError:
                    if self.head(src) is None and self.head(dst) is not None:
                        return  # an earlier attempt renamed it; its answer was lost
                    raise

            self.retrying("MOVE", src, rename)
            return
        self.retrying("COPY", src, lambda: self.fs.cp_file(source, target))
        self.delete_many([src])

    def list_recursive(self, directory: str) -> Iterator[FileInfo]:
        if self.is_s3:
            yield from self._s3_list_recursive(directory)
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
            yield FileInfo(self._unstrip(name), int(info.get("size") or 0), mtime_ms(info))

    def list_level(self, directory: str) -> Iterator[LevelEntry]:
        if self.is_s3:  # ListObjectsV2 with a "/" delimiter: the common prefixes are the subdirectories
            entries = self._s3_level(directory)
        else:
            entries = ((name, None if e.get("type") == "directory" else e) for name, e in self._ls(directory))
        try:
            for name, obj in entries:
                if obj is None:
                    yield LevelEntry(name, 0, 0, True)
                else:
                    yield LevelEntry(name, int(obj.get("Size") or obj.get("size") or 0), mtime_ms(obj), False)
        except FileNotFoundError:  # no bucket
            return
