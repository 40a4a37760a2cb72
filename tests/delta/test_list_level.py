"""`LogStore.list_level`: one directory level (files with size and mtime, subdirectories) from every store.

The same tree is built on the local filesystem, in fsspec's memory filesystem and on a real S3-compatible
server (moto's, on 127.0.0.1, behind `S3Proxy`, which counts requests and injects throttling); each store
must list it alike. On S3 the level is ListObjectsV2 pages with a "/" delimiter, one request per
`list_page_size` entries (the same paging loop as `list_from` and `list_recursive`).
"""

from __future__ import annotations

import math
import os
import uuid
from pathlib import Path

import pytest

from airflow_delta_provider.delta.storage import FsspecLogStore, LocalLogStore, RetryPolicy
from airflow_delta_provider.delta.storage.base import LevelEntry

#: relative path -> content; directories are implied.
TREE = {
    "a.parquet": b"abc",
    "b.bin": b"",
    ".hidden": b"h",
    "p=1/x.parquet": b"xx",
    "deep/d/e.bin": b"eeee",
}
#: what listing the root one level must give: (name, size, is directory)
LEVEL = {("a.parquet", 3, False), ("b.bin", 0, False), (".hidden", 1, False), ("p=1", 0, True), ("deep", 0, True)}
FAST = RetryPolicy(max_attempts=5, base_delay=0.005, max_delay=0.02)


def _shape(entries: list[LevelEntry]) -> set[tuple[str, int, bool]]:
    return {(e.name, e.size, e.is_dir) for e in entries}


def _write_local(root: Path) -> None:
    for rel, data in TREE.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)


def test_local_level_lists_files_and_directories_not_links(tmp_path: Path) -> None:
    root = tmp_path / "t"
    _write_local(root)
    (root / "empty").mkdir()
    os.symlink(root / "a.parquet", root / "file-link")
    os.symlink(root / "p=1", root / "dir-link")
    os.utime(root / "a.parquet", ns=(1_600_000_000_123_456_789, 1_600_000_000_123_456_789))
    store = LocalLogStore()
    got = list(store.list_level(str(root)))
    assert _shape(got) == LEVEL | {("empty", 0, True)}  # symbolic links are neither files nor directories
    by_name = {e.name: e for e in got}
    assert by_name["a.parquet"].modification_time == 1_600_000_000_123  # ms, as list_from and list_recursive
    assert by_name["p=1"].modification_time == 0
    # a file URI names the same directory; a missing directory or a file lists nothing
    assert _shape(list(store.list_level(root.as_uri()))) == _shape(got)
    assert list(store.list_level(str(root / "missing"))) == []
    assert list(store.list_level(str(root / "a.parquet"))) == []
    # the recursive listing shares the scan: every file at any depth, links not followed
    rel = {os.path.relpath(f.path, root): f.size for f in store.list_recursive(str(root))}
    assert rel == {k: len(v) for k, v in TREE.items()}


def test_memory_store_level_equals_the_local_one(tmp_path: Path) -> None:
    """Non-S3 fsspec filesystems list a level with `ls`."""
    uri = f"memory://lvl-{uuid.uuid4().hex[:8]}/t"
    store = FsspecLogStore(uri)
    for rel, data in TREE.items():
        store.put(f"{uri}/{rel}", data)
    got = list(store.list_level(uri))
    assert _shape(got) == LEVEL
    assert all(e.modification_time > 0 for e in got if not e.is_dir)
    assert _shape(list(store.list_level(uri + "/p=1"))) == {("x.parquet", 2, False)}
    assert list(store.list_level(uri + "/missing")) == []


# -- S3 ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def s3(moto_s3):
    pytest.importorskip("s3fs")
    from support.s3_server import create_bucket

    create_bucket(moto_s3, "level")  # the session's moto server, this module's bucket
    return moto_s3


@pytest.fixture
def proxy(s3):
    from support.s3_server import S3Proxy

    with S3Proxy(s3.endpoint) as p:
        yield p


def _s3_tree(s3, key: str) -> None:
    from support.s3_server import boto3_client

    client = boto3_client(s3)
    for rel, data in TREE.items():
        client.put_object(Bucket="level", Key=f"{key}/{rel}", Body=data)
    client.put_object(Bucket="level", Key=f"{key}/", Body=b"")  # a console "folder" marker: not an entry


def test_s3_level_pages_with_a_delimiter_and_equals_the_local_one(s3, proxy, tmp_path: Path) -> None:
    from support.s3_server import s3_storage_options

    key = f"lvl-{uuid.uuid4().hex[:8]}"
    _s3_tree(s3, key)
    uri = f"s3://level/{key}"
    store = FsspecLogStore(uri, s3_storage_options(s3, proxy.endpoint), retry=FAST)
    store.list_page_size = 2
    proxy.reset()
    got = list(store.list_level(uri))
    assert _shape(got) == LEVEL
    assert all(e.modification_time > 0 for e in got if not e.is_dir)
    local = tmp_path / "t"
    _write_local(local)
    assert _shape(got) == _shape(list(LocalLogStore().list_level(str(local))))
    lists = [r for r in proxy.snapshot() if r.is_list]
    # 3 files, 2 common prefixes and the marker: 6 entries, 2 a page; every page one level ("/" delimiter)
    assert len(lists) == math.ceil(6 / 2) and all(r.query.get("delimiter") == "/" for r in lists)
    assert all(r.query.get("max-keys") == "2" for r in lists)

    # the recursive listing pages the same loop: 6 keys under the prefix, no delimiter
    proxy.reset()
    files = {f.path.removeprefix(uri + "/"): f.size for f in store.list_recursive(uri)}
    assert files == {k: len(v) for k, v in TREE.items()}
    lists = [r for r in proxy.snapshot() if r.is_list]
    assert len(lists) == 3 and not any("delimiter" in r.query for r in lists)

    assert list(store.list_level(uri + "/missing")) == []
    assert _shape(list(store.list_level(uri + "/p=1"))) == {("x.parquet", 2, False)}
    no_bucket = f"s3://no-such-bucket-{uuid.uuid4().hex[:6]}/t"
    assert list(FsspecLogStore(no_bucket, s3_storage_options(s3, proxy.endpoint)).list_level(no_bucket)) == []


def test_s3_level_is_retried_when_throttled(s3, proxy) -> None:
    from support.s3_server import SLOW_DOWN, s3_storage_options

    key = f"lvl-{uuid.uuid4().hex[:8]}"
    _s3_tree(s3, key)
    uri = f"s3://level/{key}"
    store = FsspecLogStore(uri, s3_storage_options(s3, proxy.endpoint), retry=FAST)
    store.list_page_size = 2
    pages = iter(range(1, 100))
    proxy.inject(lambda _i, seen: SLOW_DOWN if seen.is_list and next(pages) == 2 else None)  # the second page
    assert _shape(list(store.list_level(uri))) == LEVEL
    assert store.retry_count == 1
    lists = [r for r in proxy.snapshot() if r.is_list]
    assert len(lists) == 3 + 1 and [r.injected for r in lists] == [False, True, False, False]
