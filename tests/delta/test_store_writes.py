"""The store write verbs (`put_if_absent`, `put`, `delete_many`, `list_recursive`) on real stores.

Stores: the local filesystem (`LocalLogStore`), fsspec's in-process memory filesystem, and S3 — moto's
standalone server in its own process on 127.0.0.1, reached through `S3Proxy` (tests/support/s3_server.py), which
counts requests and injects faults. Moto honours `If-None-Match: *` on PutObject (412 PreconditionFailed)
but checks for the key and then stores it with no lock held in between (a narrow window; we never saw
two winners without the proxy, but nothing closes it), so the proxy makes each key's conditional creates
one at a time (`S3Proxy.atomic_conditional_puts`), which is what S3 guarantees. That is the one thing
not done by the server itself. Moto never reports per-key DeleteObjects errors without object lock, so
those tests have the proxy forward the request and then answer with S3's DeleteResult error document.

Races run in separate processes (a spawned pool of `WORKERS`, meeting at a barrier before every round).
Lost answers are real dropped connections (`DROP`, `DROP_AFTER_FORWARD`): note that aiohttp, under s3fs,
resends an idempotent PUT once when its connection drops, below our retry layer (see `TestRetriedCreate`).
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("moto.server")
pytest.importorskip("s3fs")

from support.s3_server import (
    ACCESS_DENIED,
    DROP,
    DROP_AFTER_FORWARD,
    Fault,
    S3Proxy,
    S3Server,
    always,
    boto3_client,
    create_bucket,
    delete_errors,
    s3_storage_options,
    start_moto_server,
)

from airflow_delta_provider.delta.errors import StorageError, UnsupportedStoreError
from airflow_delta_provider.delta.storage import FsspecLogStore, LocalLogStore, LogStore, RetryPolicy

BUCKET = "store-writes"
FAST = RetryPolicy(max_attempts=4, base_delay=0.005, max_delay=0.02)
WORKERS = 4
ROUNDS = 25
CONFLICT = Fault(409, "ConditionalRequestConflict", "A conflicting operation occurred. Please retry.")
NOT_IMPLEMENTED = Fault(501, "NotImplemented", "A header you provided implies functionality that is not implemented")


# -- fixtures -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def s3_server() -> Iterator[S3Server]:
    with start_moto_server() as server:
        create_bucket(server, BUCKET)
        yield server


@pytest.fixture(scope="module")
def module_proxy(s3_server: S3Server) -> Iterator[S3Proxy]:
    with S3Proxy(s3_server.endpoint) as proxy:
        yield proxy


@pytest.fixture
def proxy(module_proxy: S3Proxy) -> S3Proxy:
    module_proxy.reset()
    return module_proxy


@pytest.fixture
def opts(s3_server: S3Server, proxy: S3Proxy) -> dict[str, Any]:
    return s3_storage_options(s3_server, proxy.endpoint)


def s3_root() -> str:
    return f"s3://{BUCKET}/w-{uuid.uuid4().hex[:10]}"


@dataclass
class Target:
    """A store and a fresh root directory in it."""

    store: LogStore
    root: str

    def path(self, *parts: str) -> str:
        return self.store.join(self.root, *parts)

    def rel(self, path: str) -> str:
        root = self.root.rstrip("/").rstrip(os.sep)
        return path[len(root) + 1 :].replace(os.sep, "/")


@pytest.fixture(params=["local", "memory", "s3"])
def target(request: pytest.FixtureRequest, tmp_path: Any) -> Target:
    if request.param == "local":
        return Target(LocalLogStore(), str(tmp_path / "table"))
    if request.param == "memory":
        root = f"memory:///w-{uuid.uuid4().hex[:10]}"
        return Target(FsspecLogStore(root), root)
    root = s3_root()
    return Target(FsspecLogStore(root, request.getfixturevalue("opts"), retry=FAST), root)


def s3_store(opts: dict[str, Any], **kwargs: Any) -> tuple[FsspecLogStore, str]:
    root = s3_root()
    return FsspecLogStore(root, opts, retry=FAST, **kwargs), root


def raw_get(server: S3Server, uri: str) -> bytes | None:
    """The object's bytes read straight from the server (no proxy), or None."""
    key = uri.removeprefix(f"s3://{BUCKET}/")
    try:
        return boto3_client(server).get_object(Bucket=BUCKET, Key=key)["Body"].read()
    except Exception as exc:
        if "NoSuchKey" in str(exc):
            return None
        raise


def raw_put(server: S3Server, uri: str, data: bytes) -> None:
    boto3_client(server).put_object(Bucket=BUCKET, Key=uri.removeprefix(f"s3://{BUCKET}/"), Body=data)


# -- the contract on every store -------------------------------------------------------------------------


class TestPutIfAbsent:
    def test_creates_once_and_keeps_the_first_content(self, target: Target) -> None:
        path = target.path("_delta_log", "00000000000000000000.json")
        target.store.put_if_absent(path, b"first")
        with pytest.raises(FileExistsError):
            target.store.put_if_absent(path, b"second")
        assert target.store.read_bytes(path) == b"first"
        assert target.store.atomic_put_if_absent is True

    def test_put_overwrites_and_put_if_absent_still_refuses(self, target: Target) -> None:
        path = target.path("_last_checkpoint")
        target.store.put(path, b"v1")
        target.store.put(path, b"version two")
        assert target.store.read_bytes(path) == b"version two"
        with pytest.raises(FileExistsError):
            target.store.put_if_absent(path, b"v3")
        assert target.store.read_bytes(path) == b"version two"

    def test_leaves_only_the_file(self, target: Target) -> None:
        # no temp files left beside it (local: temp + link; object stores: one request)
        path = target.path("_delta_log", "00000000000000000001.json")
        target.store.put_if_absent(path, b"x")
        with pytest.raises(FileExistsError):
            target.store.put_if_absent(path, b"y")
        target.store.put(target.path("_delta_log", "_last_checkpoint"), b"{}")
        names = sorted(target.rel(f.path) for f in target.store.list_recursive(target.root))
        assert names == ["_delta_log/00000000000000000001.json", "_delta_log/_last_checkpoint"]


class TestDeleteAndList:
    def test_delete_many_counts_missing_keys_as_deleted(self, target: Target) -> None:
        paths = [target.path("a.parquet"), target.path("p=1", "b.parquet"), target.path("p=1", "q=2", "c.parquet")]
        for p in paths:
            target.store.put(p, b"data")
        keep = target.path("keep.parquet")
        target.store.put(keep, b"keep")
        missing = [target.path("never-written.parquet"), target.path("nodir", "x.parquet")]
        assert target.store.delete_many([paths[0], missing[0], paths[1], missing[1], paths[2]]) == 5
        assert [target.rel(f.path) for f in target.store.list_recursive(target.root)] == ["keep.parquet"]
        assert target.store.delete_many(paths) == 3  # all gone already: still done
        assert target.store.delete_many([]) == 0

    def test_list_recursive_reports_every_depth_with_size_and_mtime(self, target: Target) -> None:
        files = {
            "_delta_log/00000000000000000000.json": b"x" * 10,
            "part=a/f1.parquet": b"y" * 2048,
            "part=a/sub=1/f2.parquet": b"",
            "f0.parquet": b"z" * 3,
        }
        before = int(time.time() * 1000)
        for name, data in files.items():
            target.store.put(target.path(*name.split("/")), data)
        after = int(time.time() * 1000)
        listed = {target.rel(f.path): f for f in target.store.list_recursive(target.root)}
        assert {name: f.size for name, f in listed.items()} == {name: len(d) for name, d in files.items()}
        for name, f in listed.items():
            head = target.store.head(f.path)
            assert head is not None and head.modification_time == f.modification_time, name
            # S3 and moto give seconds; allow for that and for the clock granularity of the filesystem
            assert before - 2000 <= f.modification_time <= after + 2000, name
        assert list(target.store.list_recursive(target.path("no-such-dir"))) == []

    def test_local_list_recursive_mtimes_are_the_files(self, tmp_path: Any) -> None:
        store = LocalLogStore()
        for i, name in enumerate(["a.parquet", "d/b.parquet", "d/e/c.parquet"]):
            store.put(str(tmp_path / name), b"1" * i)
            os.utime(tmp_path / name, ns=(1_700_000_000_000_000_000 + i * 1_000_000, 1_700_000_000_000_000_000 + i))
        got = {
            os.path.relpath(f.path, tmp_path): (f.size, f.modification_time)
            for f in store.list_recursive(str(tmp_path))
        }
        assert got == {
            "a.parquet": (0, 1_700_000_000_000),
            os.path.join("d", "b.parquet"): (1, 1_700_000_000_000),
            os.path.join("d", "e", "c.parquet"): (2, 1_700_000_000_000),
        }


# -- readers never see partial content --------------------------------------------------------------------


def _watch(store: LogStore, path: str, allowed: set[bytes], stop: threading.Event, seen: list[str]) -> None:
    """Read `path` until `stop`, noting each read as "missing", "whole" (one of `allowed`) or what it was."""
    while not stop.is_set():
        try:
            data = store.read_bytes(path)
        except FileNotFoundError:
            seen.append("missing")
            continue
        seen.append("whole" if data in allowed else f"{len(data)} bytes: {data[:4]!r}...{data[-4:]!r}")


@pytest.mark.parametrize(("kind", "size", "writes"), [("local", 4 << 20, 40), ("s3", 1 << 20, 8)])
def test_readers_see_old_or_new_content_never_a_part(
    kind: str, size: int, writes: int, tmp_path: Any, request: pytest.FixtureRequest
) -> None:
    """A reader polling while `put_if_absent` then repeated `put`s run sees nothing, A or B, whole."""
    if kind == "local":
        store: LogStore = LocalLogStore()
        path = str(tmp_path / "_delta_log" / "00000000000000000000.checkpoint.parquet")
    else:
        store, root = s3_store(request.getfixturevalue("opts"))
        path = f"{root}/_delta_log/00000000000000000000.checkpoint.parquet"
    a, b = b"a" * size, b"b" * size
    stop = threading.Event()
    seen: list[str] = []
    reader = threading.Thread(target=_watch, args=(store, path, {a, b}, stop, seen))
    reader.start()
    try:
        store.put_if_absent(path, a)
        for i in range(writes):
            store.put(path, b if i % 2 == 0 else a)
    finally:
        stop.set()
        reader.join(60)
    assert set(seen) <= {"missing", "whole"}, [s for s in seen if s not in ("missing", "whole")][:3]
    assert "whole" in seen


# -- racing writers ------------------------------------------------------------------------------------------

_BARRIER: Any = None


def _init_worker(barrier: Any) -> None:
    global _BARRIER
    _BARRIER = barrier


def _race(args: tuple[str, str, dict[str, Any] | None, int, int]) -> list[bool]:
    """One writer: for each round, meet the others at the barrier, then try to create that round's commit."""
    kind, root, options, worker, rounds = args
    store: LogStore = LocalLogStore() if kind == "local" else FsspecLogStore(root, options, retry=FAST)
    won = []
    for r in range(rounds):
        path = store.join(root, "_delta_log", f"{r:020d}.json")
        _BARRIER.wait(timeout=120)
        try:
            store.put_if_absent(path, _commit_bytes(worker, r))
            won.append(True)
        except FileExistsError:
            won.append(False)
    return won


def _commit_bytes(worker: int, round_: int) -> bytes:
    return (f'{{"commitInfo":{{"worker":{worker},"round":{round_}}}}}\n' * 2000).encode()


@pytest.fixture(scope="module")
def writers() -> Iterator[tuple[Any, Any]]:
    """A pool of `WORKERS` spawned processes sharing a barrier (made once: spawning costs seconds here)."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(WORKERS)
    pool = ctx.Pool(WORKERS, initializer=_init_worker, initargs=(barrier,))
    try:
        yield pool, barrier
    finally:
        pool.terminate()
        pool.join()


@pytest.mark.parametrize("kind", ["local", "s3"])
def test_racing_writers_exactly_one_wins_each_version(
    kind: str, writers: tuple[Any, Any], tmp_path: Any, request: pytest.FixtureRequest
) -> None:
    pool, barrier = writers
    barrier.reset()
    if kind == "local":
        root, options = str(tmp_path / "table"), None
        store: LogStore = LocalLogStore()
    else:
        options = request.getfixturevalue("opts")
        store, root = s3_store(options)
    results = pool.map(_race, [(kind, root, options, w, ROUNDS) for w in range(WORKERS)], chunksize=1)
    for r in range(ROUNDS):
        winners = [w for w in range(WORKERS) if results[w][r]]
        assert len(winners) == 1, (r, winners)
        assert store.read_bytes(store.join(root, "_delta_log", f"{r:020d}.json")) == _commit_bytes(winners[0], r)
    if kind == "s3":
        creates = [s for s in request.getfixturevalue("proxy").snapshot() if s.is_conditional_put]
        assert len(creates) == WORKERS * ROUNDS
        assert sum(s.status == 412 for s in creates) == (WORKERS - 1) * ROUNDS


# -- S3: retried conditional PUTs -------------------------------------------------------------------------------


def _creates(*faults: Fault | None, before: Any = None) -> Any:
    """A fault rule: the n-th conditional PUT gets `faults[n-1]` (the first runs `before` first); later ones pass."""
    count = [0]
    lock = threading.Lock()

    def rule(_i: int, seen: Any) -> Fault | None:
        if not seen.is_conditional_put:
            return None
        with lock:
            count[0] += 1
            n = count[0]
        if n == 1 and before is not None:
            before()
        return faults[n - 1] if n <= len(faults) else None

    return rule


class TestRetriedCreate:
    """A create whose answer is lost is sent again, and the resend hears 412: the store reads the object back.

    Two layers resend: ours (`retry_count`), and aiohttp under s3fs, which sends an idempotent PUT once more
    when the connection drops, invisibly to us. Both end in the same read-back.
    """

    def test_landed_answer_lost_resent_below_us_is_success(
        self, opts: dict, proxy: S3Proxy, s3_server: S3Server
    ) -> None:
        store, root = s3_store(opts)
        path = f"{root}/_delta_log/00000000000000000000.json"
        proxy.inject(_creates(DROP_AFTER_FORWARD))
        store.put_if_absent(path, b"ours")
        assert raw_get(s3_server, path) == b"ours"
        creates = [s for s in proxy.snapshot() if s.is_conditional_put]
        assert [(s.injected, s.upstream_status, s.status) for s in creates] == [(True, 200, 0), (False, 0, 412)]
        assert [s.method for s in proxy.snapshot()] == ["PUT", "PUT", "GET"]  # the GET: the read-back
        assert store.retry_count == 0  # aiohttp resent it, not us

    def test_landed_answer_lost_retried_by_us_is_success(self, opts: dict, proxy: S3Proxy, s3_server: S3Server) -> None:
        store, root = s3_store(opts)
        path = f"{root}/_delta_log/00000000000000000000.json"
        proxy.inject(_creates(DROP_AFTER_FORWARD, DROP))  # the first lands, aiohttp's resend is lost too
        store.put_if_absent(path, b"ours")
        assert raw_get(s3_server, path) == b"ours"
        assert [s.status for s in proxy.snapshot() if s.is_conditional_put] == [0, 0, 412]
        assert store.retry_count == 1

    def test_another_writer_in_between_is_file_exists(self, opts: dict, proxy: S3Proxy, s3_server: S3Server) -> None:
        store, root = s3_store(opts)
        path = f"{root}/_delta_log/00000000000000000000.json"
        # our first attempt is lost on the way; meanwhile another writer creates the commit
        proxy.inject(_creates(DROP, DROP, before=lambda: raw_put(s3_server, path, b"theirs")))
        with pytest.raises(FileExistsError):
            store.put_if_absent(path, b"ours")
        assert raw_get(s3_server, path) == b"theirs"
        assert [s.status for s in proxy.snapshot() if s.is_conditional_put] == [0, 0, 412]
        assert store.retry_count == 1

    def test_exists_with_other_bytes_is_file_exists(self, opts: dict, proxy: S3Proxy, s3_server: S3Server) -> None:
        store, root = s3_store(opts)
        path = f"{root}/_delta_log/00000000000000000000.json"
        raw_put(s3_server, path, b"theirs")
        with pytest.raises(FileExistsError):
            store.put_if_absent(path, b"ours")
        assert [(s.method, s.status) for s in proxy.snapshot()] == [("PUT", 412), ("GET", 200)]
        assert raw_get(s3_server, path) == b"theirs"

    def test_exists_with_our_exact_bytes_counts_as_ours(self, opts: dict, proxy: S3Proxy, s3_server: S3Server) -> None:
        # the documented limit of the read-back: identical bytes cannot be told from our own landed write
        store, root = s3_store(opts)
        path = f"{root}/_delta_log/00000000000000000000.json"
        raw_put(s3_server, path, b"same")
        store.put_if_absent(path, b"same")
        assert [(s.method, s.status) for s in proxy.snapshot()] == [("PUT", 412), ("GET", 200)]

    def test_conditional_request_conflict_is_retried(self, opts: dict, proxy: S3Proxy, s3_server: S3Server) -> None:
        store, root = s3_store(opts)
        path = f"{root}/_delta_log/00000000000000000000.json"
        proxy.inject(_creates(CONFLICT))
        store.put_if_absent(path, b"ours")
        assert raw_get(s3_server, path) == b"ours"
        assert [s.status for s in proxy.snapshot() if s.is_conditional_put] == [409, 200]
        assert store.retry_count == 1

    def test_conflict_then_another_writer_is_file_exists(self, opts: dict, proxy: S3Proxy, s3_server: S3Server) -> None:
        store, root = s3_store(opts)
        path = f"{root}/_delta_log/00000000000000000000.json"
        proxy.inject(_creates(CONFLICT, before=lambda: raw_put(s3_server, path, b"theirs")))
        with pytest.raises(FileExistsError):
            store.put_if_absent(path, b"ours")
        assert [s.status for s in proxy.snapshot() if s.is_conditional_put] == [409, 412]

    def test_retries_exhausted_after_an_uncertain_attempt_say_so(
        self, opts: dict, proxy: S3Proxy, s3_server: S3Server
    ) -> None:
        store, root = s3_store(opts)
        path = f"{root}/_delta_log/00000000000000000000.json"
        proxy.inject(always(DROP_AFTER_FORWARD))
        with pytest.raises(StorageError, match="may have been written") as info:
            store.put_if_absent(path, b"ours")
        assert info.value.transient is True
        assert store.attempt_count == FAST.max_attempts
        assert all(s.injected for s in proxy.snapshot())
        assert raw_get(s3_server, path) == b"ours"  # it had been written: the caller must read to know


# -- S3: request counts and per-key errors ------------------------------------------------------------------


def _put_many(server: S3Server, root: str, names: list[str]) -> None:
    """Objects written straight to the server (threads: moto takes ~10-40 ms a PUT on this machine)."""
    client = boto3_client(server)
    prefix = root.removeprefix(f"s3://{BUCKET}/")
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: client.put_object(Bucket=BUCKET, Key=f"{prefix}/{n}", Body=n.encode()), names))


def test_delete_many_sends_1000_keys_a_request(opts: dict, proxy: S3Proxy, s3_server: S3Server) -> None:
    """2,500 keys, 250 of them written (missing keys count as deleted): 3 DeleteObjects requests, nothing else."""
    store, root = s3_store(opts)
    written = [f"part={i % 3}/f{i:05d}.parquet" for i in range(0, 2500, 10)]
    _put_many(s3_server, root, written)
    paths = [f"{root}/part={i % 3}/f{i:05d}.parquet" for i in range(2500)]
    assert store.delete_many(paths) == 2500
    deletes = [s for s in proxy.snapshot() if s.is_delete_objects]
    assert len(deletes) == 3 and len(proxy.snapshot()) == 3
    assert [s.body.count(b"<Key>") for s in deletes] == [1000, 1000, 500]
    assert list(FsspecLogStore(root, opts).list_recursive(root)) == []


def test_list_recursive_pages_without_delimiter(opts: dict, proxy: S3Proxy, s3_server: S3Server) -> None:
    """One ListObjectsV2 request per page, every depth. Pages of 100 here (S3's and our default is 1,000):
    2,500 objects would take this server ~30 s to write, 250 show the same paging."""
    assert FsspecLogStore.list_page_size == 1000
    store, root = s3_store(opts)
    store.list_page_size = 100
    names = [f"part={i % 3}/sub={i % 2}/f{i:05d}.parquet" if i % 4 else f"f{i:05d}.parquet" for i in range(250)]
    _put_many(s3_server, root, names)
    proxy.reset()
    listed = list(store.list_recursive(root))
    assert {f.path: f.size for f in listed} == {f"{root}/{n}": len(n) for n in names}
    lists = [s for s in proxy.snapshot() if s.is_list]
    assert len(lists) == 3 and len(proxy.snapshot()) == 3
    assert all("delimiter" not in s.query and s.query["max-keys"] == "100" for s in lists)


def test_delete_many_per_key_error_names_the_first_failing_key(opts: dict, proxy: S3Proxy) -> None:
    store, root = s3_store(opts)
    paths = [f"{root}/f{i}.parquet" for i in range(5)]
    for p in paths:
        store.put(p, b"1")
    proxy.reset()
    key = f"{root}/f3.parquet".removeprefix(f"s3://{BUCKET}/")
    doc = delete_errors([(key, "AccessDenied", "Access Denied")])
    proxy.inject(lambda _i, seen: Fault(200, document=doc, after_forward=True) if seen.is_delete_objects else None)
    with pytest.raises(StorageError) as info:
        store.delete_many(paths)
    assert info.value.file == "f3.parquet" and info.value.transient is False
    assert "AccessDenied" in str(info.value) and "1 of 5 keys" in str(info.value)
    assert sum(s.is_delete_objects for s in proxy.snapshot()) == 1  # access denied is not retried


def test_delete_many_retries_only_keys_with_transient_errors(opts: dict, proxy: S3Proxy) -> None:
    store, root = s3_store(opts)
    paths = [f"{root}/f{i}.parquet" for i in range(5)]
    for p in paths:
        store.put(p, b"1")
    proxy.reset()
    key = f"{root}/f2.parquet".removeprefix(f"s3://{BUCKET}/")
    doc = delete_errors([(key, "InternalError", "We encountered an internal error. Please try again.")])
    fault = Fault(200, document=doc, after_forward=True)
    proxy.inject(lambda i, seen: fault if seen.is_delete_objects and i == 1 else None)
    assert store.delete_many(paths) == 5
    deletes = [s for s in proxy.snapshot() if s.is_delete_objects]
    assert [s.body.count(b"<Key>") for s in deletes] == [5, 1]
    assert key.encode() in deletes[1].body
    assert list(store.list_recursive(root)) == []


# -- refusals ----------------------------------------------------------------------------------------------


class TestRefusals:
    def test_filesystem_without_atomic_create_refuses_before_writing(self, tmp_path: Any) -> None:
        root = f"file://{tmp_path}/table"
        store = FsspecLogStore(root)
        assert store.atomic_put_if_absent is False
        with pytest.raises(UnsupportedStoreError, match="unsafe_put_if_absent=True") as info:
            store.put_if_absent(f"{root}/_delta_log/00000000000000000000.json", b"x")
        assert info.value.file == "_delta_log/00000000000000000000.json"
        assert not (tmp_path / "table").exists()

    def test_single_writer_opt_in_checks_then_writes(self, tmp_path: Any) -> None:
        root = f"file://{tmp_path}/table"
        store = FsspecLogStore(root, unsafe_put_if_absent=True)
        path = f"{root}/_delta_log/00000000000000000000.json"
        store.put_if_absent(path, b"first")
        with pytest.raises(FileExistsError):
            store.put_if_absent(path, b"second")
        assert (tmp_path / "table" / "_delta_log" / "00000000000000000000.json").read_bytes() == b"first"
        assert store.atomic_put_if_absent is False  # still honest about it

    @pytest.mark.parametrize("how", ["read_only", "anon"])
    def test_read_only_store_refuses_every_write_before_any_request(
        self, how: str, s3_server: S3Server, proxy: S3Proxy
    ) -> None:
        if how == "read_only":
            store, root = s3_store(s3_storage_options(s3_server, proxy.endpoint), read_only=True)
        else:
            root = s3_root()
            anon = {"anon": True, "endpoint_url": proxy.endpoint, "client_kwargs": {"region_name": s3_server.region}}
            store = FsspecLogStore(root, anon, retry=FAST)
        path = f"{root}/_delta_log/00000000000000000000.json"
        assert store.atomic_put_if_absent is False
        for write in (
            lambda: store.put_if_absent(path, b"x"),
            lambda: store.put(path, b"x"),
            lambda: store.delete_many([path]),
        ):
            with pytest.raises(UnsupportedStoreError, match="read-only"):
                write()
        assert proxy.snapshot() == []

    def test_access_denied_on_write_is_a_permanent_storage_error(self, opts: dict, proxy: S3Proxy) -> None:
        store, root = s3_store(opts)
        proxy.inject(lambda _i, seen: ACCESS_DENIED if seen.method in ("PUT", "POST") else None)
        for write in (
            lambda: store.put_if_absent(f"{root}/_delta_log/00000000000000000000.json", b"x"),
            lambda: store.put(f"{root}/_last_checkpoint", b"x"),
            lambda: store.delete_many([f"{root}/a.parquet"]),
        ):
            with pytest.raises(StorageError, match="AccessDenied") as info:
                write()
            assert info.value.transient is False
        assert len(proxy.snapshot()) == 3  # none retried

    def test_server_without_conditional_writes_is_refused_unless_opted_in(
        self, s3_server: S3Server, proxy: S3Proxy
    ) -> None:
        proxy.inject(lambda _i, seen: NOT_IMPLEMENTED if seen.is_conditional_put else None)
        store, root = s3_store(s3_storage_options(s3_server, proxy.endpoint))
        path = f"{root}/_delta_log/00000000000000000000.json"
        with pytest.raises(UnsupportedStoreError, match="does not implement conditional writes"):
            store.put_if_absent(path, b"x")
        assert raw_get(s3_server, path) is None

        opted = FsspecLogStore(
            root, s3_storage_options(s3_server, proxy.endpoint), retry=FAST, unsafe_put_if_absent=True
        )
        opted.put_if_absent(path, b"first")
        with pytest.raises(FileExistsError):
            opted.put_if_absent(path, b"second")
        assert raw_get(s3_server, path) == b"first"
        assert opted.atomic_put_if_absent is False


def test_a_truncated_body_is_a_connection_failure_not_http_400():
    """aiohttp reports a body shorter than its Content-Length as ClientPayloadError caused by
    ContentLengthError, whose class attribute `code = 400` is the parser's, not the server's answer."""
    import aiohttp
    from aiohttp.http_exceptions import ContentLengthError

    from airflow_delta_provider.delta.storage.retry import classify_error

    cause = ContentLengthError("Not enough data to satisfy content length header.")
    try:
        raise aiohttp.ClientPayloadError(f"Response payload is not completed: {cause!r}") from cause
    except aiohttp.ClientPayloadError as exc:
        failure = classify_error(exc)
    assert failure is not None and failure.kind == "connection" and failure.transient
    assert failure.status is None and "cut short" in failure.message


def test_request_timeout_408_is_retried_as_a_server_error() -> None:
    """GCS answers 408 when a request timed out on its side and asks clients to retry it."""
    from airflow_delta_provider.delta.storage.retry import classify_error

    class GcsError(OSError):
        def __init__(self, code: int) -> None:
            super().__init__(f"HTTP {code}")
            self.code = code

    timeout, denied = classify_error(GcsError(408)), classify_error(GcsError(409))
    assert timeout is not None and timeout.kind == "server" and timeout.transient
    assert denied is not None and not denied.transient
