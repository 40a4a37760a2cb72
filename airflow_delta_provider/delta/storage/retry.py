"""Classifying storage failures, the retry policy for the transient ones, and scrubbing secrets from messages."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any


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
        """Seconds to wait before retry number `retry` (1 for the first): full jitter."""
        import random

        return random.uniform(0.0, min(self.max_delay, self.base_delay * 2 ** (retry - 1)))


NO_RETRY = RetryPolicy(max_attempts=1)

_AUTH_CODES = frozenset(
    "AccessDenied AccountProblem AllAccessDisabled AuthenticationFailed AuthorizationFailure "
    "AuthorizationHeaderMalformed AuthFailure ExpiredToken ExpiredTokenException InvalidAccessKeyId "
    "InvalidClientTokenId InvalidSecurity InvalidToken NotSignedUp RequestTimeTooSkewed "
    "SignatureDoesNotMatch TokenRefreshRequired UnrecognizedClientException".split()
)
_THROTTLE_CODES = frozenset(
    "BandwidthLimitExceeded RequestLimitExceeded RequestThrottled RequestThrottledException ServerBusy "
    "ServiceUnavailable SlowDown ThrottledException Throttling ThrottlingException TooManyRequests "
    "TooManyRequestsException rateLimitExceeded userRateLimitExceeded".split()
)
_SERVER_CODES = frozenset(
    {"InternalError", "InternalServerError", "OperationTimedOut", "RequestTimeout", "RequestTimeoutException"}
)
#: Error codes that mean the object (or its bucket) is not there: a delete of it is already done.
NOT_FOUND_CODES = frozenset({"NoSuchKey", "NoSuchBucket", "NotFound", "BlobNotFound", "ContainerNotFound"})
# 409 answers that mean "another conditional request on this object was in flight; send yours again" (S3's
# ConditionalRequestConflict, and OperationAborted, its older name for the same race). Nothing was written.
_CONFLICT_CODES = frozenset({"ConditionalRequestConflict", "OperationAborted"})
# Exception class names (anywhere in the MRO or the cause chain) that mean the connection, not the request, failed.
# ResponseParserError: throttling answers can carry invalid XML (s3fs #484).
_CONNECTION_ERRORS = frozenset(
    "ChunkedEncodingError ClientConnectionError ClientOSError ClientPayloadError ConnectTimeoutError "
    "ConnectionClosedError EndpointConnectionError FSTimeoutError HTTPClientError IncompleteRead "
    "ProtocolError ReadTimeoutError ResponseParserError ResponseStreamingError ServerDisconnectedError "
    "ServerTimeoutError ServiceRequestError ServiceResponseError".split()
)
#: A response cut short while its body was read: a connection failure. aiohttp's parser errors carry
#: `code = 400` as a class attribute, which is not the server's answer and must not be reported as one.
_TRUNCATED_BODY_ERRORS = frozenset(
    {"ClientPayloadError", "ContentLengthError", "IncompleteRead", "ResponseStreamingError", "TransferEncodingError"}
)
_CREDENTIAL_ERRORS = frozenset(
    "ClientAuthenticationError CredentialRetrievalError DefaultCredentialsError NoAuthTokenError "
    "NoCredentialsError PartialCredentialsError RefreshError".split()
)
_CLIENT_MODULES = tuple("botocore aiobotocore aiohttp s3fs gcsfs adlfs azure google urllib3 fsspec".split())
_SECRET_OPTION_PARTS = tuple("secret token password credential account_key sas connection_string private".split())
_SECRET_QUERY = re.compile(
    r"(?i)\b(sig|signature|x-amz-signature|x-amz-security-token|x-amz-credential|access_token|token|secret|password)"
    r"=([^&\s\"'<>]+)"
)


@dataclass(frozen=True)
class StorageFailure:
    """A classified storage exception; `kind` is auth, throttled, server, connection, conflict (a concurrent
    conditional request on the object), client, not_found or other."""

    kind: str
    code: str | None = None
    status: int | None = None
    message: str = ""

    @property
    def retryable(self) -> bool:
        return self.kind in ("throttled", "server", "connection", "conflict")

    @property
    def transient(self) -> bool:
        return self.kind in ("throttled", "server", "connection", "conflict", "other")


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
    """What a storage client's exception means (None: not a storage failure): the service's answer anywhere
    in the cause chain (botocore's `response`, or the `status_code`/`status`/`code` of azure, aiohttp and
    gcsfs errors), then the exception classes."""
    chain = list(_exception_chain(exc))
    if any(cls.__name__ in _TRUNCATED_BODY_ERRORS for e in chain for cls in type(e).__mro__):
        return StorageFailure("connection", None, None, f"the response body was cut short: {exc}")
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
    if code in NOT_FOUND_CODES or status == 404:
        return failure("not_found")
    if code in _THROTTLE_CODES or status in (429, 503):
        return failure("throttled")
    if code in _SERVER_CODES or status in (500, 502, 504, 408):  # 408 Request Timeout: GCS asks for a retry
        return failure("server")
    if code in _CONFLICT_CODES:
        return failure("conflict")
    if names & _CONNECTION_ERRORS or any(isinstance(e, ConnectionError | TimeoutError) for e in chain):
        return failure("connection")
    if status is not None and 400 <= status < 500:
        return failure("client")
    if isinstance(exc, OSError) or any(type(e).__module__.split(".")[0] in _CLIENT_MODULES for e in chain):
        return failure("other")
    return None


def is_exists_answer(exc: BaseException, codes: frozenset[str] = frozenset()) -> bool:
    """Whether a failed create-only write means "the object exists": a `FileExistsError` (some clients raise
    one), HTTP 412, or one of the backend's `codes`."""
    if any(isinstance(e, FileExistsError) for e in _exception_chain(exc)):
        return True
    failure = classify_error(exc)
    return failure is not None and (failure.status == 412 or failure.code in codes)


def is_not_implemented(exc: BaseException) -> bool:
    """Whether the store answered that it does not implement the request (e.g. a conditional write)."""
    if any(isinstance(e, NotImplementedError) for e in _exception_chain(exc)):
        return True
    failure = classify_error(exc)
    return failure is not None and (failure.status == 501 or failure.code == "NotImplemented")


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
