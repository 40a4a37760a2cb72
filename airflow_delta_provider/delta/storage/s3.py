"""S3 (`s3://`, `s3a://`) through s3fs: options and endpoint checks, the single-attempt filesystem, and the
requests behind `FsspecLogStore`'s verbs (`S3Requests`).

* Create-only PUT (https://docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-writes.html):
  `If-None-Match: *`; 412 = it exists, 409 ConditionalRequestConflict = another conditional write was in flight
  (nothing written; retried).
* ListObjectsV2 lists keys in binary order from `StartAfter`, so a listing from the `_last_checkpoint` hint
  costs one request per 1,000 keys after it (PROTOCOL.md "Last Checkpoint File").
* DeleteObjects takes 1,000 keys a request; a missing key counts as deleted, a per-key error names the first
  failing key after the failed keys are retried.
* Retries: botocore's (`retries={"total_max_attempts": 1}` unless the caller sets `retries`) and s3fs's loop
  are off; aiohttp's one resend of a PUT on a dropped kept-alive connection cannot be.
* Credentials: s3fs's option names, or delta-rs/object_store's (`AWS_ACCESS_KEY_ID`, `AWS_REGION`,
  `AWS_ENDPOINT_URL`, ..., any case), else the environment as botocore finds it.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import urlparse, urlsplit

from ..errors import InvalidArgumentError, StorageError
from ..protocol.filenames import FileInfo
from .base import accepts, mtime_ms
from .retry import NOT_FOUND_CODES

SCHEMES = ("s3", "s3a")
CREATE_KWARGS: Mapping[str, Any] = {"mode": "create"}
EXISTS_CODES = frozenset({"PreconditionFailed"})

# -- options -------------------------------------------------------------------------------------------

# delta-rs / object_store names (any case) -> s3fs names; s3fs's own names win when both are given.
_ALIASES = {
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
_REGION_OPTIONS = frozenset({"aws_region", "aws_default_region", "region", "region_name"})
# Writer-side object_store options that mean nothing to a reader.
_WRITER_OPTIONS = frozenset(
    {"aws_allow_http", "allow_http", "aws_conditional_put", "conditional_put", "aws_s3_allow_unsafe_rename"}
)


def s3fs_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """s3fs keyword arguments from storage options, with botocore's own retries off unless configured."""
    aliased: dict[str, Any] = {}
    native: dict[str, Any] = {}
    region = None
    for key, value in (options or {}).items():
        low = str(key).lower()
        if low in _ALIASES:
            aliased[_ALIASES[low]] = value
        elif low in _REGION_OPTIONS:
            region = value
        elif low in _WRITER_OPTIONS:
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


# -- endpoints -----------------------------------------------------------------------------------------

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
    """Refuse a malformed S3 endpoint with an `InvalidArgumentError` naming `argument`, before any request
    (botocore would raise a bare `ValueError` deep in its first request)."""
    problem = endpoint_problem(endpoint)
    if problem:
        shown = re.sub(r"//[^/@\s]*@", "//***@", str(endpoint))  # credentials in the userinfo dropped
        raise InvalidArgumentError(
            f"malformed S3 endpoint {shown!r} ({where} {argument}): {problem}; expected e.g. https://host:9000",
            argument=argument,
            table=table,
        )


def check_s3_endpoint(uri: str, options: Mapping[str, Any] | None, environ: Mapping[str, str] | None = None) -> None:
    """`check_endpoint` on the endpoint an S3 table `uri` would use: the storage options', else botocore's
    environment variables (`S3_ENDPOINT_ENV`)."""
    if urlparse(uri).scheme not in SCHEMES:
        return
    opts = s3fs_options(options)
    endpoints = (("endpoint_url", opts.get("endpoint_url")),)
    endpoints += (("client_kwargs.endpoint_url", (opts.get("client_kwargs") or {}).get("endpoint_url")),)
    given = {name: value for name, value in endpoints if value is not None}
    for name, value in given.items():
        check_endpoint(value, name, table=uri)
    if not given:
        env = os.environ if environ is None else environ
        name = next((n for n in S3_ENDPOINT_ENV if n in env), None)
        if name is not None:
            check_endpoint(env[name], name, where="environment variable", table=uri)


# -- the filesystem ------------------------------------------------------------------------------------


@functools.cache
def _single_attempt_s3fs() -> type:
    """`s3fs.S3FileSystem` with its own retry loop off (one attempt per call; the store retries)."""
    import s3fs

    class SingleAttemptS3FileSystem(s3fs.S3FileSystem):  # type: ignore[misc]
        retries = 1

    return SingleAttemptS3FileSystem


def filesystem(uri: str, options: Mapping[str, Any] | None) -> Any:
    """The single-attempt s3fs filesystem for the storage options (`s3fs_options`)."""
    return _single_attempt_s3fs()(**s3fs_options(options))


def cat_kwargs(fs: Any) -> dict[str, Any]:
    """`cat_file` keywords for one GET per object (recent s3fs HEADs first to split big objects unless told)."""
    return {"max_concurrency": 1} if accepts(fs._cat_file, "max_concurrency") else {}


# -- the requests behind the store's verbs ------------------------------------------------------------


class S3Requests:
    """The S3 requests of `FsspecLogStore` (mixed into it; used when it `is_s3`), each under its retry policy.
    Uses the store's fs, root, block_size, _protocol, _sizes, retrying, _relative and _strip."""

    #: Keys per ListObjectsV2 page (S3's maximum).
    list_page_size: int = 1000
    #: Keys per DeleteObjects request (S3's maximum).
    delete_batch_size: int = 1000

    def _bucket_key(self, path: str) -> tuple[str, str]:
        bucket, key, _ = self.fs.split_path(self._strip(path))
        return bucket, key

    def _s3_location(self, directory: str) -> tuple[str, str]:
        """(bucket, key prefix) of the keys under `directory` (the prefix ends in "/", or is "" at the root)."""
        bucket, key = self._bucket_key(directory)
        return bucket, (key.strip("/") + "/" if key.strip("/") else "")

    def _s3_pages(self, directory: str, bucket: str, prefix: str, **params: Any) -> Iterator[Mapping[str, Any]]:
        """The ListObjectsV2 pages under `prefix` (`params` in every request): the one S3 listing loop. A
        missing bucket is `FileNotFoundError`."""
        request: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": self.list_page_size, **params}
        while True:
            page = self.retrying("LIST", directory, functools.partial(self.fs.call_s3, "list_objects_v2", **request))
            yield page
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return
            request["ContinuationToken"] = token

    def _s3_level(self, directory: str, **params: Any) -> Iterator[tuple[str, Mapping[str, Any] | None]]:
        """(name, object) for each entry directly in `directory`, object None for a subdirectory (a common
        prefix); the directory's own marker object is skipped."""
        bucket, prefix = self._s3_location(directory)
        for page in self._s3_pages(directory, bucket, prefix, Delimiter="/", **params):
            for common in page.get("CommonPrefixes") or ():
                yield common["Prefix"][len(prefix) :].rstrip("/"), None
            for obj in page.get("Contents") or ():
                name = obj["Key"][len(prefix) :]
                if name and "/" not in name:
                    yield name, obj

    def _s3_list_from(self, directory: str, start: str) -> list[FileInfo]:
        """The files from `start` on (StartAfter is exclusive: it gets the name just before)."""
        bucket, prefix = self._s3_location(directory)
        params: dict[str, Any] = {}
        if start:
            last = start[-1]
            params["StartAfter"] = prefix + start[:-1] + (chr(ord(last) - 1) if ord(last) > 0 else "")
        return [
            FileInfo(f"{self._protocol}://{bucket}/{obj['Key']}", int(obj.get("Size") or 0), mtime_ms(obj))
            for name, obj in self._s3_level(directory, **params)
            if obj is not None and name >= start
        ]

    def _s3_list_recursive(self, directory: str) -> Iterator[FileInfo]:
        bucket, prefix = self._s3_location(directory)
        try:
            for page in self._s3_pages(directory, bucket, prefix):
                for obj in page.get("Contents") or ():
                    if obj["Key"].endswith("/"):  # a "directory" marker object
                        continue
                    path = f"{self._protocol}://{bucket}/{obj['Key']}"
                    yield FileInfo(path, int(obj.get("Size") or 0), mtime_ms(obj))
        except FileNotFoundError:  # no bucket
            return

    def _s3_is_dir(self, path: str) -> bool:
        bucket, prefix = self._s3_location(path)
        resp = next(self._s3_pages(path, bucket, prefix, MaxKeys=1))  # one request: any key under it
        return bool(resp.get("KeyCount") or resp.get("Contents"))

    def _s3_head(self, path: str) -> FileInfo:
        bucket, key = self._bucket_key(path)
        resp = self.retrying("HEAD", path, lambda: self.fs.call_s3("head_object", Bucket=bucket, Key=key))
        return FileInfo(path, int(resp.get("ContentLength") or 0), mtime_ms(resp))

    def _s3_head_bucket(self, bucket: str) -> None:
        self.retrying("HEAD", f"{self._protocol}://{bucket}", lambda: self.fs.call_s3("head_bucket", Bucket=bucket))

    def _s3_open(self, path: str) -> Any:
        """The object opened for block-cached ranged reads; no HEAD when the listing gave its size."""
        stripped = self._strip(path)
        size = self._sizes.get(path)
        raw = self.retrying(
            "HEAD",
            path,
            lambda: self.fs.open(stripped, "rb", block_size=self.block_size, cache_type="blockcache", size=size),
        )
        if size is not None:  # s3fs would HEAD the object for its details on the first read
            raw.details = {"name": stripped, "size": size, "type": "file"}
        return raw

    def _s3_delete_many(self, paths: Sequence[str]) -> None:
        by_bucket: dict[str, list[str]] = {}
        for path in paths:
            bucket, key = self._bucket_key(path)
            by_bucket.setdefault(bucket, []).append(key)
        for bucket, keys in by_bucket.items():
            unique = list(dict.fromkeys(keys))
            for i in range(0, len(unique), self.delete_batch_size):
                self._delete_batch(bucket, unique[i : i + self.delete_batch_size])

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


class _DeleteErrors(OSError):
    """Per-key errors of a DeleteObjects answer, shaped like botocore's `ClientError` for `classify_error`."""

    def __init__(self, errors: list[Mapping[str, Any]]) -> None:
        first = errors[0]
        super().__init__(f"{len(errors)} keys not deleted; first {first.get('Key')!r}: {first.get('Message')}")
        self.response = {"Error": {"Code": first.get("Code"), "Message": first.get("Message")}, "ResponseMetadata": {}}
