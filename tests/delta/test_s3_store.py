"""Tables on S3: a real S3-compatible server (moto's standalone server in its own process on 127.0.0.1).

Tables are written by delta-rs straight to the server; the library reads them through `S3Proxy`, which
counts requests and injects throttling, server errors and dropped connections. delta-rs is the oracle
for file sets and sizes; the raw log objects are the oracle for tombstones.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
import uuid

import pytest

pytest.importorskip("moto.server")
pytest.importorskip("s3fs")
pytest.importorskip("deltalake")

import pyarrow as pa
from deltalake import DeltaTable
from support.s3_server import (
    ACCESS_DENIED,
    DROP,
    INTERNAL_ERROR,
    SLOW_DOWN,
    S3Proxy,
    S3Server,
    always,
    boto3_client,
    create_bucket,
    deltalake_storage_options,
    first,
    first_tries,
    s3_storage_options,
    write_sample_table,
)

from airflow_delta_provider.cli import main as cli_main
from airflow_delta_provider.delta import DeltaLog
from airflow_delta_provider.delta.engines.local import LocalEngine
from airflow_delta_provider.delta.errors import (
    DeltaError,
    StorageError,
    TableNotFoundError,
    TimestampOutOfRangeError,
)
from airflow_delta_provider.delta.protocol.filenames import version_prefix
from airflow_delta_provider.delta.storage import (
    FsspecLogStore,
    LocalLogStore,
    RetryPolicy,
    classify_error,
    scrub,
    secret_values,
    store_for,
)

BUCKET = "delta-tests"
FAST = RetryPolicy(max_attempts=5, base_delay=0.005, max_delay=0.02)


@pytest.fixture(scope="session")
def s3_endpoint(moto_s3):
    """The session's moto server (authentication on), with the bucket `BUCKET`."""
    create_bucket(moto_s3, BUCKET)
    return moto_s3


@pytest.fixture
def proxy(s3_endpoint: S3Server):
    with S3Proxy(s3_endpoint.endpoint) as p:
        yield p


@pytest.fixture
def table_uri() -> str:
    return f"s3://{BUCKET}/t-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def dl_opts(s3_endpoint: S3Server) -> dict[str, str]:
    return deltalake_storage_options(s3_endpoint)


@pytest.fixture
def opts(s3_endpoint: S3Server, proxy: S3Proxy) -> dict:
    """Storage options for the library, through the proxy."""
    return s3_storage_options(s3_endpoint, proxy.endpoint)


def fast_log(uri: str, options: dict, retry: RetryPolicy = FAST, engine: LocalEngine | None = None) -> DeltaLog:
    return DeltaLog(uri, store=FsspecLogStore(uri, options, retry=retry), engine=engine)


#: The local engine reads checkpoints with pyarrow through ranged GETs (footer, then column chunks),
#: with stats read at load or later.
ENGINES = {"eager-stats": LocalEngine(), "lazy-stats": LocalEngine(lazy_stats_bytes=0)}


def oracle_adds(uri: str, dl_opts: dict, version: int | None = None) -> pa.Table:
    return pa.table(DeltaTable(uri, version=version, storage_options=dl_opts).get_add_actions())


def log_objects(server: S3Server, uri: str) -> dict[str, bytes]:
    """Every object in the table's `_delta_log`, read with boto3 (name -> bytes)."""
    s3 = boto3_client(server)
    prefix = uri.removeprefix(f"s3://{BUCKET}/") + "/_delta_log/"
    out = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        for obj in page.get("Contents", []):
            out[obj["Key"][len(prefix) :]] = s3.get_object(Bucket=BUCKET, Key=obj["Key"])["Body"].read()
    return out


# -- reading tables ----------------------------------------------------------------------------------


def test_version_and_snapshot_match_delta_rs(table_uri, dl_opts, opts):
    write_sample_table(table_uri, dl_opts, commits=3)
    log = DeltaLog.for_table(table_uri, opts)
    assert log.latest_version() == DeltaTable(table_uri, storage_options=dl_opts).version() == 2
    snap = log.update()
    adds = oracle_adds(table_uri, dl_opts)
    assert snap.version == 2
    assert snap.num_files == adds.num_rows == 6
    assert snap.size_in_bytes == sum(adds.column("size_bytes").to_pylist())
    assert {f.path for f in snap.files()} == set(adds.column("path").to_pylist())
    assert snap.partition_columns == ("part",)
    assert {f.path for f in snap.files(partition_filters=[("part", "=", "a")])} == {
        p for p in adds.column("path").to_pylist() if p.startswith("part=a/")
    }


def test_time_travel_by_version_and_timestamp(s3_endpoint, table_uri, dl_opts, opts):
    s3 = boto3_client(s3_endpoint)
    key = table_uri.removeprefix(f"s3://{BUCKET}/") + "/_delta_log/"
    mtimes = []
    for v in range(3):
        if v:
            time.sleep(1.05)  # S3 LastModified has whole seconds: keep commit times apart
        write_sample_table(table_uri, dl_opts, commits=1, start_id=10 * v)
        head = s3.head_object(Bucket=BUCKET, Key=f"{key}{v:020d}.json")
        mtimes.append(int(head["LastModified"].timestamp() * 1000))
    log = DeltaLog.for_table(table_uri, opts)
    for v in range(3):
        snap = log.snapshot_at(version=v)
        assert snap.version == v
        assert {f.path for f in snap.files()} == set(oracle_adds(table_uri, dl_opts, v).column("path").to_pylist())
    assert [t for _, t in log.commit_timestamps()] == mtimes
    assert log.snapshot_at(timestamp=mtimes[1]).version == 1
    assert log.snapshot_at(timestamp=mtimes[1] + 999).version == 1
    assert log.snapshot_at(timestamp=mtimes[2]).version == 2
    with pytest.raises(TimestampOutOfRangeError):
        log.snapshot_at(timestamp=mtimes[0] - 1)


def test_tombstones_are_what_the_log_holds(s3_endpoint, table_uri, dl_opts, opts):
    write_sample_table(table_uri, dl_opts, commits=2)
    write_sample_table(table_uri, dl_opts, commits=1, mode="overwrite", start_id=100)
    DeltaTable(table_uri, storage_options=dl_opts).delete("id = 101")
    removed, added = set(), set()
    for name, data in sorted(log_objects(s3_endpoint, table_uri).items()):
        if not name.endswith(".json"):
            continue
        for line in data.decode().splitlines():
            action = json.loads(line)
            if "remove" in action:
                removed.add(action["remove"]["path"])
                added.discard(action["remove"]["path"])
            if "add" in action:
                added.add(action["add"]["path"])
                removed.discard(action["add"]["path"])
    assert len(removed) >= 5
    snap = DeltaLog.for_table(table_uri, opts).update()
    assert {t.path for t in snap.tombstones(include_expired=True)} == removed
    assert {t.path for t in snap.tombstones()} == removed  # just written: all inside the default week
    assert {f.path for f in snap.files()} == added == set(oracle_adds(table_uri, dl_opts).column("path").to_pylist())


def test_hint_listing_uses_start_after_and_ranged_checkpoint_reads(table_uri, dl_opts, opts, proxy):
    write_sample_table(table_uri, dl_opts, commits=4)
    DeltaTable(table_uri, storage_options=dl_opts).create_checkpoint()  # at version 3
    write_sample_table(table_uri, dl_opts, commits=2, start_id=100)
    prefix = table_uri.removeprefix(f"s3://{BUCKET}/") + "/_delta_log/"

    proxy.reset()
    assert DeltaLog(table_uri, storage_options=opts).latest_version() == 5
    seen = proxy.snapshot()
    assert [(r.method, r.key) for r in seen] == [("GET", prefix + "_last_checkpoint"), ("GET", "")]
    listing = seen[1]
    assert listing.is_list and listing.query["prefix"] == prefix and listing.query["delimiter"] == "/"
    assert prefix + "00000000000000000002.json" < listing.query["start-after"] < prefix + version_prefix(3)

    for _kind, engine in ENGINES.items():
        proxy.reset()
        snap = DeltaLog(table_uri, storage_options=opts, engine=engine).update()
        assert (snap.version, snap.num_files) == (5, oracle_adds(table_uri, dl_opts).num_rows)
        seen = proxy.snapshot()
        lists = [r for r in seen if r.is_list]
        assert len(lists) == 1 and "start-after" in lists[0].query  # no full listing
        checkpoint = [r for r in seen if r.key.endswith(".checkpoint.parquet")]
        assert checkpoint and all(r.method == "GET" for r in checkpoint)
        assert all(r.headers["range"].startswith("bytes=") for r in checkpoint)
        assert not [r for r in seen if r.method == "HEAD"]  # sizes come from the listing
        commits = sorted(r.key.rsplit("/", 1)[-1] for r in seen if r.key.endswith(".json"))
        assert commits == ["00000000000000000004.json", "00000000000000000005.json"]

    proxy.reset()  # cached log, nothing new: one listing from the current version on
    log = DeltaLog.for_table(table_uri, opts)
    log.update()
    proxy.reset()
    assert log.update().version == 5
    assert [r.is_list for r in proxy.snapshot()] == [True]
    write_sample_table(table_uri, dl_opts, commits=1, start_id=200)
    proxy.reset()
    assert log.update().version == 6
    assert [(r.is_list, r.key.rsplit("/", 1)[-1]) for r in proxy.snapshot()] == [
        (True, ""),
        (False, "00000000000000000006.json"),
    ]


def test_list_from_pages_and_matches_the_local_store(s3_endpoint, proxy, opts, tmp_path):
    names = [
        "00000000000000000009.json",
        "00000000000000000010.checkpoint.parquet",
        "00000000000000000010.json",
        "00000000000000000011.json",
        "00000000000000000012.crc",
        "_last_checkpoint",
    ]
    s3 = boto3_client(s3_endpoint)
    base = f"ls-{uuid.uuid4().hex[:8]}/_delta_log"
    local = tmp_path / "_delta_log"
    local.mkdir()
    for i, name in enumerate(names):
        s3.put_object(Bucket=BUCKET, Key=f"{base}/{name}", Body=b"x" * i)
        (local / name).write_bytes(b"x" * i)
    s3.put_object(Bucket=BUCKET, Key=f"{base}/_sidecars/a.parquet", Body=b"y")  # a sub-directory: not listed
    store = FsspecLogStore(f"s3://{BUCKET}/{base}", opts)
    store.list_page_size = 2
    proxy.reset()
    for start in ("", version_prefix(10), "00000000000000000011.json", "_last_checkpoint", "zzz"):
        got = store.list_from(f"s3://{BUCKET}/{base}", start)
        want = LocalLogStore().list_from(str(local), start)
        assert [(f.name, f.size) for f in got] == [(f.name, f.size) for f in want], start
        assert all(f.path == f"s3://{BUCKET}/{base}/{f.name}" and f.modification_time > 0 for f in got)
    pages = [r for r in proxy.snapshot() if r.is_list]
    # 2 entries a page; the `_sidecars/` sub-directory counts as one; StartAfter skips what sorts before
    assert len(pages) == 4 + 3 + 2 + 1 + 1
    assert all("start-after" in r.query for r in pages[4:])
    assert store.list_from(f"s3://{BUCKET}/{base}/missing", "") == []
    assert store.list_from(f"s3://no-such-bucket-{uuid.uuid4().hex[:6]}/_delta_log", "") == []
    assert store.head(f"s3://{BUCKET}/{base}/{names[2]}").size == 2
    assert store.head(f"s3://{BUCKET}/{base}/nope.json") is None
    assert store.is_dir(f"s3://{BUCKET}/{base}") and not store.is_dir(f"s3://{BUCKET}/{base}/nope")
    with pytest.raises(FileNotFoundError):
        store.read_bytes(f"s3://{BUCKET}/{base}/nope.json")


def test_missing_table_and_bucket(opts, table_uri):
    with pytest.raises(TableNotFoundError) as info:
        DeltaLog(table_uri, storage_options=opts).latest_version()
    assert table_uri in str(info.value)
    with pytest.raises(TableNotFoundError):
        DeltaLog(f"s3://no-such-bucket-{uuid.uuid4().hex[:6]}/t", storage_options=opts).update()
    assert not DeltaLog(table_uri, storage_options=opts).table_exists()


def test_cli_on_s3(s3_endpoint, table_uri, dl_opts, monkeypatch):
    write_sample_table(table_uri, dl_opts, commits=2)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_endpoint.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_endpoint.secret_key)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint.endpoint)
    monkeypatch.setenv("AWS_REGION", s3_endpoint.region)
    out, err = io.StringIO(), io.StringIO()
    assert cli_main(["version", table_uri], out=out, err=err) == 0
    assert out.getvalue() == "1\n"
    out = io.StringIO()
    assert cli_main(["snapshot", table_uri, "--json"], out=out, err=err) == 0
    doc = json.loads(out.getvalue())
    adds = oracle_adds(table_uri, dl_opts)
    assert (doc["version"], doc["num_files"], doc["size_bytes"]) == (
        1,
        adds.num_rows,
        sum(adds.column("size_bytes").to_pylist()),
    )
    assert {f["path"] for f in doc["files"]} == set(adds.column("path").to_pylist())

    DeltaLog.clear_cache()
    secret = "WRONG" + s3_endpoint.secret_key[::-1]
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    out, err = io.StringIO(), io.StringIO()
    assert cli_main(["version", table_uri], out=out, err=err) == 5  # storage error (cli exit codes)
    line = err.getvalue()
    assert line.count("\n") == 1 and line.startswith("deltalog: error: StorageError: ")
    assert "SignatureDoesNotMatch" in line and f"table={table_uri}" in line and secret not in line


# -- retries ---------------------------------------------------------------------------------------------


def test_throttling_is_retried_with_the_default_policy(table_uri, dl_opts, opts, proxy):
    write_sample_table(table_uri, dl_opts, commits=2)
    proxy.reset()
    proxy.inject(first(2))
    log = DeltaLog.for_table(table_uri, opts)
    snap = log.update()
    assert (snap.version, snap.num_files) == (1, oracle_adds(table_uri, dl_opts).num_rows)
    seen = proxy.snapshot()
    assert [(r.status, r.injected) for r in seen[:3]] == [(503, True), (503, True), (404, False)]
    assert seen[0].key == seen[1].key == seen[2].key  # the same request (no _last_checkpoint yet), repeated
    assert log.store.retry_count == 2


@pytest.mark.parametrize("kind", ENGINES)
@pytest.mark.parametrize(
    ("fault", "tries"), [(SLOW_DOWN, 1), (INTERNAL_ERROR, 2), (DROP, 2)], ids=["503-slowdown", "500", "dropped"]
)
def test_transient_failures_everywhere_are_survived(table_uri, dl_opts, opts, proxy, fault, tries, kind):
    write_sample_table(table_uri, dl_opts, commits=3)
    DeltaTable(table_uri, storage_options=dl_opts).create_checkpoint()
    write_sample_table(table_uri, dl_opts, commits=2, start_id=50)
    adds = oracle_adds(table_uri, dl_opts)
    proxy.reset()
    proxy.inject(first_tries(tries, fault))  # every request fails first, reads of the checkpoint parquet too
    log = fast_log(table_uri, opts, engine=ENGINES[kind])
    snap = log.update()
    assert (snap.version, snap.num_files) == (4, adds.num_rows)
    assert snap.size_in_bytes == sum(adds.column("size_bytes").to_pylist())
    assert log.latest_version() == 4
    seen = proxy.snapshot()
    distinct = {(r.method, r.path, json.dumps(r.query, sort_keys=True), r.headers.get("range")) for r in seen}
    assert len([r for r in seen if r.injected]) == tries * len(distinct)
    assert any(r.key.endswith(".checkpoint.parquet") and "range" in r.headers for r in seen if r.injected)
    if fault is DROP:  # aiohttp itself resends once when a reused keep-alive connection was dropped
        assert len(distinct) <= log.store.retry_count <= tries * len(distinct)
    else:
        assert log.store.retry_count == tries * len(distinct)


def test_persistent_throttling_gives_up_after_max_attempts(table_uri, dl_opts, opts, proxy):
    write_sample_table(table_uri, dl_opts, commits=1)
    slept: list[float] = []
    policy = RetryPolicy(max_attempts=4, base_delay=0.01, max_delay=0.02, sleep=slept.append)
    proxy.reset()
    proxy.inject(always(SLOW_DOWN))
    with pytest.raises(StorageError) as info:
        fast_log(table_uri, opts, policy).latest_version()
    err = info.value
    assert err.transient and err.table == table_uri and err.file == "_delta_log/_last_checkpoint"
    assert "SlowDown" in str(err) and "HTTP 503" in str(err) and "after 4 attempts" in str(err)
    assert len(proxy.snapshot()) == 4  # no hidden retry layer below the store (botocore, s3fs)
    assert len(slept) == 3 and all(0 <= d <= min(0.02, 0.01 * 2**i) for i, d in enumerate(slept))


def test_backoff_is_exponential_with_full_jitter():
    policy = RetryPolicy(max_attempts=8, base_delay=0.1, max_delay=1.0)
    for retry in range(1, 8):
        cap = min(1.0, 0.1 * 2 ** (retry - 1))
        delays = [policy.delay(retry) for _ in range(200)]
        assert all(0 <= d <= cap for d in delays)
        assert max(delays) > cap / 2  # jitter spans the window
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)


# -- auth errors: never retried, no secret in the message ------------------------------------------------


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"secret": "WRONG-secret-value-0123456789"}, "SignatureDoesNotMatch"),
        ({"key": "AKIAIOSFODNN7EXAMPLE", "secret": "WRONG-secret-value-0123456789"}, "InvalidAccessKeyId"),
        ({"token": "SESSION-token-value-0123456789"}, "InvalidToken"),
    ],
    ids=["wrong-secret", "unknown-key", "bad-session-token"],
)
def test_wrong_credentials_fail_once_with_a_clean_message(table_uri, dl_opts, opts, proxy, change, code):
    write_sample_table(table_uri, dl_opts, commits=1)
    bad = {**opts, **change}
    proxy.reset()
    with pytest.raises(DeltaError) as info:
        DeltaLog(table_uri, storage_options=bad).latest_version()
    err = info.value
    assert isinstance(err, StorageError) and not err.transient
    assert len(proxy.snapshot()) == 1 and 400 <= proxy.snapshot()[0].status < 500
    text = str(err)
    assert code in text and f"table={table_uri}" in text and "file=_delta_log/_last_checkpoint" in text
    assert "Check the credentials" in text
    for secret in [v for k, v in bad.items() if k in ("secret", "token")]:
        assert secret not in text and secret not in repr(err.to_dict())


def test_injected_403_is_not_retried(table_uri, dl_opts, opts, proxy):
    write_sample_table(table_uri, dl_opts, commits=1)
    proxy.reset()
    proxy.inject(always(ACCESS_DENIED))
    with pytest.raises(StorageError) as info:
        fast_log(table_uri, opts).update()
    assert not info.value.transient and "AccessDenied" in str(info.value)
    assert len(proxy.snapshot()) == 1


def test_secrets_are_scrubbed_and_errors_classified():
    options = {"key": "AKIA1", "secret": "s3cr3t-value", "client_kwargs": {"aws_session_token": "tok-value-1"}}
    secrets = secret_values(options)
    assert set(secrets) == {"s3cr3t-value", "tok-value-1"}
    text = scrub("bad s3cr3t-value at https://h/k?X-Amz-Signature=abc123&sig=zz&x=1 tok-value-1", secrets)
    assert "s3cr3t" not in text and "abc123" not in text and "zz" not in text and "tok-value" not in text
    assert "x=1" in text
    assert classify_error(PermissionError("denied")).kind == "auth"
    assert classify_error(ConnectionResetError("reset")).retryable
    assert classify_error(KeyError("bug")) is None


# -- boundaries ------------------------------------------------------------------------------------------


def test_local_tables_never_import_fsspec_or_s3fs(tmp_path):
    log_dir = tmp_path / "_delta_log"
    log_dir.mkdir()
    (log_dir / "00000000000000000000.json").write_text('{"protocol":{"minReaderVersion":1,"minWriterVersion":2}}\n')
    code = (
        "import sys\n"
        "from airflow_delta_provider.delta import DeltaLog\n"
        f"v = DeltaLog.for_table({str(tmp_path)!r}).latest_version()\n"
        "bad = ('fsspec', 's3fs', 'botocore', 'aiobotocore', 'aiohttp')\n"
        "print(v, ','.join(sorted(m for m in sys.modules if m.split('.')[0] in bad)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["0"]
    assert isinstance(store_for(str(tmp_path)), LocalLogStore)
