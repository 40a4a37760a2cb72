"""The Spark engine's state reconstruction against the local engine (real Spark, local[2]): the JVM fast
path over checkpoint rows, driver and executor keys, the report digest, caching, the CLI.

The whole-corpus comparison (every root, on local[2], the standalone cluster and Spark Connect, with the
write actions) is `test_spark_corpus.py`. `_fingerprint` here compares per table: version, protocol,
metadata, txns, domains, active files (path, size, stats) and every tombstone — or the same typed error.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import CORPUS

from airflow_delta_provider.delta import DeltaError, DeltaLog

pyspark = pytest.importorskip("pyspark")

pytestmark = pytest.mark.spark

NOW_MS = 1_700_000_000_000  # a fixed clock splits tombstones the same way in both engines
ORACLE = json.loads((CORPUS / "ORACLE-deltalake-1.6.6.json").read_text())["tables"] if CORPUS.exists() else {}


@pytest.fixture(scope="module")
def engine():
    from support.spark_cluster import local_session

    from airflow_delta_provider.delta.engines.spark import SparkEngine

    spark = local_session("delta-engine-tests")  # the suite's shared local[2] session: left running
    return SparkEngine(spark, snapshot_partitions=4)


def _fingerprint(root: str, engine) -> object:
    try:
        snap = DeltaLog(str(CORPUS / root), engine=engine).update()
    except DeltaError as exc:
        return type(exc).__name__
    # summaries first: with the Spark engine they aggregate on executors, before anything is collected
    summaries = (
        snap.file_summary().to_dict(),
        snap.tombstone_summary(now_ms=NOW_MS).to_dict(),
        snap.num_tombstones(now_ms=NOW_MS),
        snap.num_distinct_paths(),
    )
    return (
        summaries,
        snap.version,
        snap.protocol,
        snap.metadata,
        snap.set_transactions,
        snap.domain_metadata,
        sorted((a.path, a.size, a.stats, a.deletion_vector) for a in snap.all_files()),
        sorted((r.path, r.deletion_timestamp, r.size) for r in snap.tombstones(include_expired=True)),
    )


#: Tables whose checkpoints exercise the JVM fast path's corners: DVs in the key, partitions, V2
#: checkpoints (parquet and JSON top level) with sidecars, a checkpoint-only table, tombstones.
CHECKPOINT_TABLES = [
    "delta-golden/checkpoint",
    "delta-golden/dv-partitioned-with-checkpoint",
    "delta-golden/v2-checkpoint-json",
    "delta-golden/v2-checkpoint-parquet",
    "delta-rs/checkpoint-v2-table",
    "delta-rs/table-with-domain-metadata",
    "delta-rs/table_with_deletion_logs",
    "delta-kernel-java/basic-dv-with-checkpoint",
]


@pytest.mark.skipif(not ORACLE, reason="reference corpus not found")
@pytest.mark.parametrize("root", CHECKPOINT_TABLES)
def test_checkpoint_rows_in_the_jvm_equal_the_local_engine(engine, root: str) -> None:
    """The local engine is the reference for the JVM path over checkpoint rows, whose touched keys come
    from the driver (default) or from the executors (`driver_keys_max_bytes=0`)."""
    from airflow_delta_provider.delta.engines.spark import SparkEngine

    assert root in ORACLE
    executor_keys = SparkEngine(engine.spark, snapshot_partitions=4, driver_keys_max_bytes=0)
    assert _fingerprint(root, engine) == _fingerprint(root, None)
    assert _fingerprint(root, executor_keys) == _fingerprint(root, None)


@pytest.mark.skipif(not ORACLE, reason="reference corpus not found")
def test_driver_keys_equal_the_executors_keys_on_corpus(engine) -> None:
    """The keys the driver reads from the commits after the checkpoint are exactly the ones the
    executors' replay keys (same multiset), on every corpus table with a checkpoint and commits."""
    from pyspark.sql import functions as F

    compared = 0
    for root in sorted(ORACLE):
        log = DeltaLog(str(CORPUS / root), engine=engine)
        try:
            segment = log.log_segment()
        except DeltaError:
            continue
        if segment.checkpoint is None or not segment.commits:
            continue
        driver = engine._driver_keys(log.store, segment)
        executors = engine._parsed(segment).where(F.col("name").isin("add", "remove")).select("key")
        assert driver is not None, root
        assert sorted(driver) == sorted(r[0] for r in executors.collect()), root
        compared += 1
    assert compared >= 20


def test_driver_keys_fall_back_and_broken_commits_stay_typed_errors(engine, tmp_path) -> None:
    """Past `driver_keys_max_bytes`, or at a line the driver cannot parse as a valid action, the
    executors supply the keys; their parse reports the line as the typed error naming its version
    when the snapshot is loaded, as the local engine does."""
    import shutil

    from airflow_delta_provider.delta import MalformedCommitError
    from airflow_delta_provider.delta.engines.spark import SparkEngine

    table = tmp_path / "t"
    shutil.copytree(CORPUS / "delta-golden" / "checkpoint", table)
    log = DeltaLog(str(table), engine=engine)
    segment = log.log_segment()
    assert segment.checkpoint is not None and segment.commits
    small = SparkEngine(engine.spark, 4, driver_keys_max_bytes=sum(c.file.size for c in segment.commits) - 1)
    assert small._driver_keys(log.store, segment) is None
    assert engine._driver_keys(log.store, segment)
    last = segment.commits[-1]
    intact = Path(last.file.path).read_bytes()
    for broken, message in [
        (b'{"add": {"path": "truncated\n', r"not valid JSON"),
        (b'{"add": {"path": "no-size.parquet"}}\n', r"add\.size is required"),
    ]:
        Path(last.file.path).write_bytes(intact + broken)
        assert engine._driver_keys(log.store, segment) is None
        for spark in (engine, small):
            with pytest.raises(MalformedCommitError, match=message) as info:
                DeltaLog(str(table), engine=spark).update()
            assert info.value.version == last.version
        with pytest.raises(MalformedCommitError):
            DeltaLog(str(table)).update()


@pytest.mark.skipif(not ORACLE, reason="reference corpus not found")
@pytest.mark.parametrize("root", ["delta-golden/checkpoint", "delta-golden/dv-partitioned-with-checkpoint"])
def test_reports_without_the_digest_equal_the_digest(engine, root: str, monkeypatch) -> None:
    """Past `max_digest_groups` tombstone groups, each report runs its own query: same answers."""
    from airflow_delta_provider.delta.engines.spark import DistributedFileState

    with_digest = _fingerprint(root, engine)
    monkeypatch.setattr(DistributedFileState, "max_digest_groups", 0)
    snap = DeltaLog(str(CORPUS / root), engine=engine).update()
    assert snap.num_tombstones(now_ms=NOW_MS) >= 0 and not snap.state.files.digest().complete
    assert _fingerprint(root, engine) == with_digest == _fingerprint(root, None)


def test_one_digest_answers_every_report(engine) -> None:
    """File summary, tombstone count and tombstone summary at any cutoff come from one digest:
    once it is computed, the distributed rows are not read again."""
    table = CORPUS / "delta-golden" / "dv-partitioned-with-checkpoint"
    snap = DeltaLog(str(table), engine=engine).update()
    local = DeltaLog(str(table)).update()
    files = snap.state.files
    assert files.partition_columns == tuple(local.partition_columns) != ()
    files.digest()
    files.replayed = files.checkpoint = None  # any further Spark job would fail
    assert snap.file_summary() == local.file_summary()
    for hours in (0.0, 24.0, 1e6):
        assert snap.num_tombstones(hours, now_ms=NOW_MS) == local.num_tombstones(hours, now_ms=NOW_MS)
        assert snap.tombstone_summary(hours, now_ms=NOW_MS) == local.tombstone_summary(hours, now_ms=NOW_MS)


def test_prefetched_digest_is_used_only_for_its_partition_columns(engine) -> None:
    """The checkpoint half of the digest starts during reconstruction with the checkpoint's partition
    columns; a digest for other columns (a commit changed them) does not use it."""
    from concurrent.futures import Future

    from airflow_delta_provider.delta.engines.spark import SparkEngine
    from airflow_delta_provider.delta.read.aggregates import FileDigest, FileSummary

    table = CORPUS / "delta-golden" / "dv-partitioned-with-checkpoint"
    local = DeltaLog(str(table)).update()
    snap = DeltaLog(str(table), engine=engine).update()
    files = snap.state.files
    assert files._prefetched is not None and files._prefetched[0] == files.partition_columns
    assert snap.file_summary() == local.file_summary()
    assert snap.tombstone_summary(now_ms=NOW_MS) == local.tombstone_summary(now_ms=NOW_MS)

    wrong: Future = Future()
    wrong.set_result(FileDigest(FileSummary(num_files=10**9)))  # would be merged in if it were used
    files._digest, files._prefetched = None, (("not", "these"), files.max_digest_groups, wrong)
    assert snap.file_summary() == local.file_summary()

    off = DeltaLog(str(table), engine=SparkEngine(engine.spark, 4, prefetch_digest=False)).update()
    assert off.state.files._prefetched is None
    assert off.tombstone_summary(now_ms=NOW_MS) == local.tombstone_summary(now_ms=NOW_MS)


def _two_files_across_a_checkpoint(tmp_path):
    """A table of two files: `a.parquet` in its checkpoint, `b.parquet` in the commit after it."""
    from airflow_delta_provider.testing import DeltaLogBuilder

    b = DeltaLogBuilder(tmp_path / "t", schema={"id": "long"})
    b.create()
    b.append(["a.parquet"], size=10)
    b.checkpoint()
    b.append(["b.parquet"], size=20)
    return b


def test_update_uncaches_the_snapshot_it_replaces(engine, tmp_path) -> None:
    """As Delta's SnapshotManagement: the replaced snapshot's persisted frames are released; it stays usable."""
    b = _two_files_across_a_checkpoint(tmp_path)
    log = DeltaLog(b.uri, engine=engine)
    first = log.update()
    persisted = first.state.files._persisted
    assert first.num_files == 2 and all(r.is_cached for r in persisted)
    b.remove(["a.parquet"])
    second = log.update()
    assert (second.version, second.num_files, second.size_in_bytes) == (first.version + 1, 1, 20)
    assert not any(r.is_cached for r in persisted) and all(r.is_cached for r in second.state.files._persisted)
    assert sorted(a.path for a in first.all_files()) == ["a.parquet", "b.parquet"]  # recomputed from the log


def test_commits_without_file_actions_keep_the_replayed_files(engine, tmp_path) -> None:
    """`extend_state`: commits with no add or remove (a txn, a property, a domain) are read on the driver and
    the replayed files carried over, their persisted frames and digest with them (no Spark job replays the
    log); the state equals a fresh replay. A commit with a file action replays the segment again."""
    b = _two_files_across_a_checkpoint(tmp_path)
    log = DeltaLog(b.uri, engine=engine)
    first = log.update()
    assert first.num_files == 2
    files, persisted = first.state.files, first.state.files._persisted
    tracker = engine.spark.sparkContext.statusTracker()
    jobs = max(tracker.getJobIdsForGroup(None) or [-1])
    b.txn("app", 7)
    b.set_properties({"delta.logRetentionDuration": "interval 2 days"})
    second = log.update()
    assert max(tracker.getJobIdsForGroup(None) or [-1]) == jobs  # nothing replayed on the cluster
    assert second.version == first.version + 2 and second.state.files is not files
    assert second.state.files.replayed is files.replayed and all(r.is_cached for r in persisted)
    assert files._persisted == () and second.state.files._persisted == persisted  # released with the new one
    fresh = DeltaLog(b.uri, engine=engine).update()
    for snap in (second, fresh):
        assert snap.set_transactions == {"app": fresh.set_transactions["app"]} and snap.metadata == fresh.metadata
    assert (second.num_files, second.size_in_bytes) == (2, 30) == (fresh.num_files, fresh.size_in_bytes)
    assert sorted(a.path for a in second.all_files()) == ["a.parquet", "b.parquet"]
    b.remove(["a.parquet"])
    third = log.update()
    assert max(tracker.getJobIdsForGroup(None) or [-1]) > jobs and third.state.files.replayed is not files.replayed
    assert (third.num_files, third.size_in_bytes) == (1, 20) and not any(r.is_cached for r in persisted)


def test_fast_path_keeps_checkpoint_rows_in_the_jvm(engine) -> None:
    """Checkpoint rows no commit touches are summarized as DataFrames; only commit actions are replayed."""
    table = CORPUS / "delta-golden" / "dv-partitioned-with-checkpoint"
    snap = DeltaLog(str(table), engine=engine).update()
    files = snap.state.files
    assert files.checkpoint is not None
    replayed = files.replayed.count()
    untouched = files.checkpoint.flat.count()
    local = DeltaLog(str(table)).update()
    assert local.log_segment.checkpoint_version is not None and local.log_segment.commits and untouched > 0
    # every reconciled action is either replayed (touched by a commit) or an untouched checkpoint row
    assert replayed + untouched == local.num_files + len(list(local.tombstones(include_expired=True)))


def test_key_column_equals_file_key(engine) -> None:
    """The JVM file identity (anti-join key) is `actions.file_key`, DV ids and path forms included."""
    from pyspark.sql import Row

    from airflow_delta_provider.delta.engines.spark.frames import key_column
    from airflow_delta_provider.delta.protocol.actions import AddFile

    dv = {"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb", "offset": 4, "sizeInBytes": 40, "cardinality": 6}
    rows = [
        {"path": "part-1.parquet", "deletionVector": None},
        {"path": "/abs/part-2.parquet", "deletionVector": None},
        {"path": "file:///abs/part-3.parquet", "deletionVector": dv},
        {"path": "file://localhost/abs/part-4.parquet", "deletionVector": {**dv, "offset": None}},
        {"path": "s3://b/t/part%205.parquet", "deletionVector": {**dv, "storageType": "i", "pathOrInlineDv": "x"}},
    ]
    schema = (
        "add struct<path:string, deletionVector:struct<storageType:string, pathOrInlineDv:string, offset:int,"
        " sizeInBytes:int, cardinality:bigint>>"
    )
    df = engine.spark.createDataFrame([Row(add=Row(**r)) for r in rows], schema)
    got = [r[0] for r in df.select(key_column("add", df.schema["add"].dataType)).collect()]
    base = {"size": 1, "partitionValues": {}, "modificationTime": 0, "dataChange": True}
    want = [AddFile.from_json({**r, **base}).key for r in rows]
    assert got == want


def test_reconstruct_aggregates_without_collecting(engine):
    from airflow_delta_provider.delta.protocol.log_segment import build_log_segment

    log = DeltaLog(str(CORPUS / "delta-golden" / "checkpoint"))
    segment = build_log_segment(log.table_uri, log.list_log(0))
    state = engine.reconstruct(log.table_uri, log.log_dir, log.store, segment)
    assert state.version == 14 and state.protocol is not None and state.metadata is not None
    counts = state.files.flat.groupBy("is_add").count().collect()
    assert {("add" if r["is_add"] else "remove"): r["count"] for r in counts} == {"add": 1, "remove": 14}
    # counts aggregate on the executors: nothing was collected to the driver
    assert state.files.num_files == 1 and state.files.count_tombstones_after(0) == 14
    assert state.files._adds is None and state.files._removes is None


@pytest.mark.skipif(not ORACLE, reason="reference corpus not found")
@pytest.mark.parametrize("command", [["snapshot"], ["files", "--where", "year = '2021'"], ["tombstones"]])
def test_cli_engines_print_the_same_json(engine, command: list[str]) -> None:
    """`deltalog ... --engine spark` equals `--engine local` apart from the `engine` field."""
    import io

    from airflow_delta_provider.cli import main

    table = str(CORPUS / "delta-rs" / "delta-0.8.0-partitioned")
    outputs = {}
    for name in ("local", "spark"):
        out, err = io.StringIO(), io.StringIO()
        argv = [command[0], table, *command[1:], "--engine", name, "--master", "local[2]", "--json"]
        if command[0] == "tombstones":
            argv += ["--retention-hours", "1000000"]  # a fixed split, whatever the clock says
        assert main(argv, out, err) == 0, err.getvalue()
        outputs[name] = json.loads(out.getvalue())
    assert outputs["local"].pop("engine") == "local" and outputs["spark"].pop("engine") == "spark"
    for out in outputs.values():  # the clock reading differs between the two runs
        out.pop("now_ms", None)
        for key in ("cutoff_ms", "cutoff"):
            out.get("retention", {}).pop(key, None)
    assert outputs["local"] == outputs["spark"]


def test_s3a_without_hadoop_aws_says_so(engine) -> None:
    """pyspark ships no hadoop-aws: reading an s3:// table on Spark must say that, as a typed error."""
    from airflow_delta_provider.delta import EngineError
    from airflow_delta_provider.delta.protocol.filenames import FileInfo
    from airflow_delta_provider.delta.protocol.log_segment import build_log_segment
    from airflow_delta_provider.delta.storage import LocalLogStore

    table = "s3://bucket/table"
    segment = build_log_segment(table, [FileInfo(f"{table}/_delta_log/00000000000000000000.json", 10, 0)])
    with pytest.raises(EngineError, match="hadoop-aws") as err:
        engine.reconstruct(table, f"{table}/_delta_log", LocalLogStore(), segment)
    assert err.value.table == table


@pytest.mark.skipif(not ORACLE, reason="reference corpus not found")
def test_optimize_of_a_missing_data_file_is_a_typed_error(engine, tmp_path) -> None:
    """A data file the log names is missing: the local engine's OPTIMIZE raises LogCorruptedError naming
    the table and the file, and so does the Spark engine's (its executor raises it; the bins' job runs
    through `run_spark`). Found by the corpus parity (`test_spark_corpus.py`): before that fix, on the 15
    roots whose OPTIMIZE reads a missing file, it was PySpark's untyped PythonException."""
    from conftest import copy_table

    from airflow_delta_provider.delta import LogCorruptedError
    from airflow_delta_provider.delta.maintenance.optimize import optimize

    root = "delta-rs/data_err_logs/table_g"
    local, spark = copy_table(root, tmp_path / "local"), copy_table(root, tmp_path / "spark")
    with pytest.raises(LogCorruptedError, match="Data file is missing") as expected:
        optimize(DeltaLog(str(local)))
    assert expected.value.file
    with pytest.raises(LogCorruptedError, match="Data file is missing") as info:
        optimize(DeltaLog(str(spark), engine=engine))
    assert info.value.file == expected.value.file and str(spark) in str(info.value.table)
