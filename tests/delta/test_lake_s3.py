"""The lake library on the loopback S3 server: discovery through delimited listings at two depths, a missing
bucket reported as `BucketNotFoundError` beside the tables found, and the same health and plan as on disk."""

from __future__ import annotations

import uuid

import pytest

from airflow_delta_provider.delta.lake import discover, parse_policy, plan, scan

BUCKET = f"lake-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def s3(moto_s3):
    """The session's moto server, with this module's bucket."""
    pytest.importorskip("s3fs")
    from support.s3_server import create_bucket

    create_bucket(moto_s3, BUCKET)
    return moto_s3


def test_scan_and_plan_on_s3(s3):
    from support.s3_server import deltalake_storage_options, s3_storage_options, write_sample_table

    key = f"l-{uuid.uuid4().hex[:8]}"
    rs = deltalake_storage_options(s3)
    write_sample_table(f"s3://{BUCKET}/{key}/one", rs, commits=4)
    write_sample_table(f"s3://{BUCKET}/{key}/a/b/two", rs, commits=1, partition_by=None)
    options = s3_storage_options(s3)
    missing = f"s3://no-such-bucket-{uuid.uuid4().hex[:6]}/lake"
    found = discover([missing, f"s3://{BUCKET}/{key}"], storage_options=options)
    assert found.tables == [f"s3://{BUCKET}/{key}/a/b/two", f"s3://{BUCKET}/{key}/one"]
    assert [(e["prefix"], e["error_class"]) for e in found.errors] == [(missing, "BucketNotFoundError")]

    result = scan(found.tables, policy=parse_policy({"defaults": {"min_small_files": 3}}), storage_options=options)
    assert result.errors == []
    one = next(h for h in result.healths if h.table.endswith("/one"))
    assert {k: p.num_files for k, p in one.partitions.items()} == {"part=a": 4, "part=b": 4}
    assert one.requests["list"] == 1 and one.commits_since_checkpoint == 4
    tasks = plan(result.healths).tasks
    assert {(t.table.rsplit("/", 1)[-1], t.operation, t.partitions) for t in tasks} == {
        ("one", "optimize", ("part=a", "part=b"))
    }


def test_a_scan_makes_exactly_the_requests_health_needs(s3):
    """Through the counting proxy: one LIST of `_delta_log`, the checkpoint's one ranged read, one GET per commit
    after it (fetched at once: `CountingStore.prefetch`), nothing else (no HEAD, no `_last_checkpoint`; with
    `history_commits=0` no older commit is read for the last OPTIMIZE/VACUUM), with and without row counts."""
    from deltalake import DeltaTable
    from support.s3_server import S3Proxy, deltalake_storage_options, s3_storage_options, write_sample_table

    uri = f"s3://{BUCKET}/r-{uuid.uuid4().hex[:8]}/t"
    rs = deltalake_storage_options(s3)
    write_sample_table(uri, rs, commits=2)
    DeltaTable(uri, storage_options=rs).create_checkpoint()
    write_sample_table(uri, rs, commits=3, start_id=100)
    for row_counts in (True, False):
        with S3Proxy(s3.endpoint) as proxy:
            options = s3_storage_options(s3, proxy.endpoint)
            result = scan([uri], storage_options=options, row_counts=row_counts, history_commits=0)
            seen = proxy.snapshot()
        assert result.errors == []
        (h,) = result.healths
        assert (h.checkpoint_version, h.commits_since_checkpoint, h.requests) == (1, 3, {"get": 4, "list": 1})
        kinds = sorted(
            "LIST" if r.is_list else f"{r.method} {r.path.rsplit('.', 1)[-1]}{' range' if 'range' in r.headers else ''}"
            for r in seen
        )
        assert kinds == ["GET json", "GET json", "GET json", "GET parquet range", "LIST"]
        assert (h.to_dict()["totals"]["rows"] is None) is not row_counts
