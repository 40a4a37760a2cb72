"""The Spark engine reads a long run of commits as the log directory, pruned by file name (real Spark, local[2]).

More than `state.LISTING_JOB_PATHS` commit paths given by name make Spark list them with a job of one task per
path (1,000 tasks for bench/generate.py's L tail); a run of consecutive `<version>.json` commits is read as the
directory instead. These tests check that the directory read holds exactly the segment's commits (later
commits, checksums and other JSON names in `_delta_log` left out) and that the replayed state equals the
local engine's.
"""

from __future__ import annotations

import pytest

from airflow_delta_provider.delta import DeltaLog

pyspark = pytest.importorskip("pyspark")

pytestmark = pytest.mark.spark

COMMITS = 45  # versions 0..44: more than LISTING_JOB_PATHS after version 0


@pytest.fixture(scope="module")
def engine():
    from support.spark_cluster import local_session

    from airflow_delta_provider.delta.engines.spark import SparkEngine

    spark = local_session("delta-engine-tests")  # the suite's shared local[2] session: left running
    return SparkEngine(spark, snapshot_partitions=4)


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """45 commits, no checkpoint, adds and removes; beside them a checksum and JSON names that are not commits."""
    from airflow_delta_provider.testing import DeltaLogBuilder

    b = DeltaLogBuilder(tmp_path_factory.mktemp("commits") / "t", schema={"id": "long"})
    b.create()
    for i in range(1, COMMITS):
        if i % 5 == 0:
            b.remove([f"f{i - 3}.parquet"])
        else:
            b.append([f"f{i}.parquet"], size=i)
    return b


def _state(snap) -> tuple:
    return (
        snap.version,
        snap.num_files,
        snap.size_in_bytes,
        sorted((a.path, a.size) for a in snap.all_files()),
        sorted((r.path, r.deletion_timestamp) for r in snap.tombstones(include_expired=True)),
    )


@pytest.mark.parametrize("version", [None, 36])
def test_long_commit_runs_replay_as_the_local_engine(engine, table, version) -> None:
    """The latest state and one whose later commits are in the directory: equal to the local engine's."""
    local = DeltaLog(table.uri)
    spark = DeltaLog(table.uri, engine=engine)
    if version is None:
        assert _state(spark.update()) == _state(local.update())
    else:
        assert _state(spark.snapshot_at(version=version)) == _state(local.snapshot_at(version=version))


def test_directory_read_holds_exactly_the_segment_commits(engine, table) -> None:
    """One root path (the directory), the segment's commit files and nothing else: not later commits, not
    `.crc` files, not other `.json` names."""
    import shutil
    from pathlib import Path

    log_dir = Path(table.log_dir)
    (log_dir / "00000000000000000003.crc").write_text("{}")
    (log_dir / "notes.json").write_text('{"commitInfo": {}}\n')
    segment = DeltaLog(table.uri).log_segment(version=40)
    shutil.copy(log_dir / "00000000000000000040.json", log_dir / "00000000000000000041.json.tmp")
    try:
        frame = engine._commit_files(segment.commits)
        names = sorted(r.path.rsplit("/", 1)[-1] for r in frame.selectExpr("_metadata.file_path AS path").collect())
        plan = frame._jdf.queryExecution().executedPlan().toString()
    finally:
        for name in ("00000000000000000003.crc", "notes.json", "00000000000000000041.json.tmp"):
            (log_dir / name).unlink()
    assert names == [f"{v:020d}.json" for v in range(41)]
    assert "InMemoryFileIndex(1 paths)" in plan
