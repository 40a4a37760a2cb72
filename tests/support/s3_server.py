"""A real S3-compatible server for tests and benchmarks, and a counting, fault-injecting proxy for it.

* `start_moto_server()` runs moto's standalone server (`python -m moto.server`) as a separate process
  on 127.0.0.1 and a free port. With `auth=True` (the default) it creates an IAM user with full S3
  access and then turns moto's request authentication on, so wrong credentials get real 403 answers
  (InvalidAccessKeyId, SignatureDoesNotMatch). Yields an `S3Server` (endpoint and credentials).
* `S3Proxy(upstream)` is a small threaded HTTP proxy on 127.0.0.1 that forwards every request
  unchanged (the Host header too, so SigV4 signatures stay valid), records what it saw, and can
  answer some requests itself (503 SlowDown, 500 InternalError, 403, or a dropped connection), before
  forwarding or after (`Fault(after_forward=True)`: the server acted, its answer is lost or replaced).
  It also makes conditional creates (`PUT` with `If-None-Match: *`) atomic per key, as S3 is: moto's
  server checks for the key and then stores it with nothing held in between (a window too narrow to
  hit in practice, 0 double winners in 60 racing rounds, but nothing closes it).
* `s3_storage_options()` (s3fs names, for `airflow_delta_provider`), `deltalake_storage_options()`
  (object_store names, for delta-rs), `create_bucket()` and `write_sample_table()`.

Plain functions and context managers, so any test module can wrap them in its own fixtures:

    from support.s3_server import S3Proxy, start_moto_server, s3_storage_options

    @pytest.fixture(scope="session")
    def s3_endpoint():
        with start_moto_server() as server:
            yield server
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

REGION = "us-east-1"
#: Credentials the server process and the setup calls use before authentication is on.
BOOTSTRAP_KEY = "testing"
BOOTSTRAP_SECRET = "testing"


@dataclass(frozen=True)
class S3Server:
    """A running S3-compatible server: where it listens and the credentials it accepts."""

    endpoint: str
    access_key: str
    secret_key: str
    region: str = REGION
    auth: bool = True

    def __str__(self) -> str:
        return self.endpoint


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy") and not k.startswith("AWS_")}
    env.update(AWS_ACCESS_KEY_ID=BOOTSTRAP_KEY, AWS_SECRET_ACCESS_KEY=BOOTSTRAP_SECRET, AWS_DEFAULT_REGION=REGION)
    return env


def _wait_ready(endpoint: str, proc: subprocess.Popen, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(endpoint + "/moto-api/", timeout=2):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def _boto_client(service: str, endpoint: str, key: str, secret: str) -> Any:
    import boto3

    return boto3.client(
        service, endpoint_url=endpoint, region_name=REGION, aws_access_key_id=key, aws_secret_access_key=secret
    )


def _enable_auth(endpoint: str) -> tuple[str, str]:
    """Create an IAM user allowed everything, then make moto authenticate every request."""
    iam = _boto_client("iam", endpoint, BOOTSTRAP_KEY, BOOTSTRAP_SECRET)
    iam.create_user(UserName="delta-tests")
    policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
    iam.put_user_policy(UserName="delta-tests", PolicyName="all", PolicyDocument=json.dumps(policy))
    key = iam.create_access_key(UserName="delta-tests")["AccessKey"]
    request = urllib.request.Request(
        endpoint + "/moto-api/reset-auth", data=b"0", method="POST", headers={"Content-Type": "text/plain"}
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        resp.read()
    return key["AccessKeyId"], key["SecretAccessKey"]


@contextmanager
def start_moto_server(*, auth: bool = True, timeout: float = 30.0) -> Iterator[S3Server]:
    """Run `python -m moto.server` on 127.0.0.1 (a free port) until the block ends."""
    last_log = ""
    for _ in range(3):  # the free port can be taken between choosing and binding it
        port = free_port()
        endpoint = f"http://127.0.0.1:{port}"
        with tempfile.TemporaryFile() as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=_server_env(),
            )
            try:
                if not _wait_ready(endpoint, proc, timeout):
                    log.seek(0)
                    last_log = log.read().decode(errors="replace")[-2000:]
                    continue
                if auth:
                    key, secret = _enable_auth(endpoint)
                else:
                    key, secret = BOOTSTRAP_KEY, BOOTSTRAP_SECRET
                yield S3Server(endpoint, key, secret, auth=auth)
                return
            finally:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    raise RuntimeError(f"moto server did not start:\n{last_log}")


def s3_storage_options(server: S3Server, endpoint: str | None = None, **extra: Any) -> dict[str, Any]:
    """Storage options for `airflow_delta_provider` (s3fs names); `endpoint` overrides (e.g. a proxy)."""
    return {
        "key": server.access_key,
        "secret": server.secret_key,
        "endpoint_url": endpoint or server.endpoint,
        "client_kwargs": {"region_name": server.region},
        **extra,
    }


def deltalake_storage_options(server: S3Server, endpoint: str | None = None) -> dict[str, str]:
    """Storage options for delta-rs (object_store names); conditional put makes commits safe on S3."""
    return {
        "AWS_ENDPOINT_URL": endpoint or server.endpoint,
        "AWS_ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": server.access_key,
        "AWS_SECRET_ACCESS_KEY": server.secret_key,
        "AWS_REGION": server.region,
        "aws_conditional_put": "etag",
    }


def boto3_client(server: S3Server) -> Any:
    """A boto3 S3 client with the server's credentials (for setup and for reading raw objects)."""
    return _boto_client("s3", server.endpoint, server.access_key, server.secret_key)


def create_bucket(server: S3Server, bucket: str) -> None:
    boto3_client(server).create_bucket(Bucket=bucket)


def write_sample_table(
    uri: str,
    storage_options: dict[str, str],
    *,
    commits: int = 3,
    rows: int = 4,
    partition_by: Sequence[str] | None = ("part",),
    mode: str = "append",
    start_id: int = 0,
) -> None:
    """`commits` delta-rs writes of `rows` rows each (`id`, `value`, `part` in {a, b}) to `uri`."""
    import pyarrow as pa
    from deltalake import write_deltalake

    for c in range(commits):
        ids = list(range(start_id + c * rows, start_id + (c + 1) * rows))
        data = pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "value": pa.array([i * 1.5 for i in ids], pa.float64()),
                "part": pa.array(["a" if i % 2 else "b" for i in ids], pa.string()),
            }
        )
        write_deltalake(
            uri,
            data,
            partition_by=list(partition_by) if partition_by else None,
            mode=mode if c == 0 else "append",
            storage_options=storage_options,
        )


# -- the proxy -----------------------------------------------------------------------------------------

_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "content-length",
    }
)


@dataclass
class Seen:
    """One request the proxy received, and what it answered."""

    method: str
    path: str  # URL path, decoded: /bucket/key
    query: dict[str, str]
    headers: dict[str, str]  # lower-case names
    status: int = 0
    injected: bool = False
    #: For a fault injected after forwarding: what the server answered (the client never saw it).
    upstream_status: int = 0
    body: bytes = field(default=b"", repr=False)

    @property
    def is_list(self) -> bool:
        return self.method == "GET" and self.query.get("list-type") == "2"

    @property
    def is_delete_objects(self) -> bool:
        """A DeleteObjects request (`POST /bucket?delete`)."""
        return self.method == "POST" and "delete" in self.query

    @property
    def is_conditional_put(self) -> bool:
        """A create-only PUT (`If-None-Match: *`)."""
        return self.method == "PUT" and self.headers.get("if-none-match") == "*"

    @property
    def key(self) -> str:
        """The object key (path without the bucket)."""
        return self.path.lstrip("/").partition("/")[2]


@dataclass(frozen=True)
class Fault:
    """An answer the proxy gives instead of forwarding: an S3 error document, or a dropped connection."""

    status: int = 503
    code: str = "SlowDown"
    message: str = "Please reduce your request rate."
    drop: bool = False
    #: Forward the request first (the server acts on it), then drop or answer with this fault instead.
    after_forward: bool = False
    #: A whole response document to send instead of the error document (e.g. a DeleteObjects result).
    document: str | None = None

    def body(self) -> bytes:
        if self.document is not None:
            return self.document.encode()
        return (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{self.code}</Code><Message>{self.message}</Message>"
            "<RequestId>proxy-injected</RequestId></Error>"
        ).encode()


SLOW_DOWN = Fault()
INTERNAL_ERROR = Fault(500, "InternalError", "We encountered an internal error. Please try again.")
ACCESS_DENIED = Fault(403, "AccessDenied", "Access Denied")
DROP = Fault(drop=True)
#: The server stores the object, the client never hears back.
DROP_AFTER_FORWARD = Fault(drop=True, after_forward=True)


def delete_errors(errors: Sequence[tuple[str, str, str]]) -> str:
    """A DeleteObjects result document reporting `(key, code, message)` per-key errors."""
    items = "".join(f"<Error><Key>{k}</Key><Code>{c}</Code><Message>{m}</Message></Error>" for k, c, m in errors)
    return f'<?xml version="1.0" encoding="UTF-8"?>\n<DeleteResult>{items}</DeleteResult>'


#: Decides per request: the request's 1-based number since `inject()`, what was asked -> a fault or None.
FaultRule = Callable[[int, Seen], Fault | None]


def first(n: int, fault: Fault = SLOW_DOWN) -> FaultRule:
    """The first `n` requests get `fault`."""
    return lambda i, _seen: fault if i <= n else None


def every(k: int, fault: Fault = SLOW_DOWN) -> FaultRule:
    """Every `k`-th request gets `fault`."""
    return lambda i, _seen: fault if i % k == 0 else None


def always(fault: Fault = SLOW_DOWN) -> FaultRule:
    return lambda _i, _seen: fault


def first_tries(n: int, fault: Fault = SLOW_DOWN) -> FaultRule:
    """Each distinct request (method, path, query, Range) gets `fault` the first `n` times it is sent."""
    counts: dict[tuple[str, ...], int] = {}
    lock = threading.Lock()

    def rule(_i: int, seen: Seen) -> Fault | None:
        key = (seen.method, seen.path, json.dumps(seen.query, sort_keys=True), seen.headers.get("range", ""))
        with lock:
            counts[key] = counts.get(key, 0) + 1
            return fault if counts[key] <= n else None

    return rule


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _ProxyHTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline().strip():
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _handle(self) -> None:
        proxy = self.server.proxy
        body = self._read_body()
        url = urlsplit(self.path)
        seen = Seen(
            self.command,
            unquote(url.path),
            dict(parse_qsl(url.query, keep_blank_values=True)),
            {k.lower(): v for k, v in self.headers.items()},
            body=body,
        )
        fault = proxy._decide(seen)
        if fault is not None and not fault.after_forward:
            seen.injected = True
            proxy._record(seen)
            self._send_fault(fault, seen)
            return
        with proxy._create_lock(seen):
            conn = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port, timeout=60)
            try:
                conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                for name, value in self.headers.items():
                    if name.lower() not in _HOP_BY_HOP:
                        conn.putheader(name, value)
                if body or self.command in ("PUT", "POST"):
                    conn.putheader("Content-Length", str(len(body)))
                conn.endheaders(body or None)
                resp = conn.getresponse()
                data = resp.read()
            finally:
                conn.close()
        if fault is not None:  # after forwarding: the server acted, the client gets the fault
            seen.injected = True
            seen.upstream_status = resp.status
            proxy._record(seen)
            self._send_fault(fault, seen)
            return
        seen.status = resp.status
        proxy._record(seen)
        self.send_response_only(resp.status, resp.reason)
        for name, value in resp.getheaders():
            if name.lower() not in _HOP_BY_HOP:
                self.send_header(name, value)
        if self.command == "HEAD":
            self.send_header("Content-Length", resp.getheader("Content-Length") or "0")
        else:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _send_fault(self, fault: Fault, seen: Seen) -> None:
        if fault.drop:
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        payload = fault.body()
        seen.status = fault.status
        self.send_response_only(fault.status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle


class _ProxyHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    proxy: S3Proxy


@dataclass
class S3Proxy:
    """A forwarding proxy on 127.0.0.1 that records requests and injects faults (a context manager)."""

    upstream: str
    requests: list[Seen] = field(default_factory=list)
    #: Make each key's conditional creates (`If-None-Match: *`) one at a time, as S3 does (see the module doc).
    atomic_conditional_puts: bool = True
    _rule: FaultRule | None = None
    _since_inject: int = 0

    def __post_init__(self) -> None:
        up = urlsplit(self.upstream)
        self.upstream_host = up.hostname or "127.0.0.1"
        self.upstream_port = up.port or 80
        self._lock = threading.Lock()
        self._key_locks: dict[str, threading.Lock] = {}
        self._server: _ProxyHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        assert self._server is not None, "proxy not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> S3Proxy:
        self._server = _ProxyHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.proxy = self
        self._thread = threading.Thread(target=self._server.serve_forever, name="s3-proxy", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(10)

    def inject(self, rule: FaultRule | None) -> None:
        """Answer requests by `rule` from now on (None: forward everything); request numbers restart at 1."""
        with self._lock:
            self._rule = rule
            self._since_inject = 0

    def reset(self) -> None:
        """Forget recorded requests and stop injecting."""
        with self._lock:
            self.requests.clear()
            self._rule = None
            self._since_inject = 0

    def _decide(self, seen: Seen) -> Fault | None:
        with self._lock:
            self._since_inject += 1
            return self._rule(self._since_inject, seen) if self._rule is not None else None

    def _create_lock(self, seen: Seen) -> AbstractContextManager[object]:
        """The key's lock for a conditional create (held while the server checks and stores), else nothing."""
        if not (self.atomic_conditional_puts and seen.is_conditional_put):
            return nullcontext()
        with self._lock:
            return self._key_locks.setdefault(seen.path, threading.Lock())

    def _record(self, seen: Seen) -> None:
        with self._lock:
            self.requests.append(seen)

    def snapshot(self) -> list[Seen]:
        with self._lock:
            return list(self.requests)

    @property
    def injected(self) -> list[Seen]:
        return [r for r in self.snapshot() if r.injected]
