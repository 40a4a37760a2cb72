"""`airflow_delta_provider.testing`: what `DeltaLogBuilder` writes is read identically by our
library and by the independent oracle deltalake (delta-rs); its pytest fixtures (`delta_table`,
`delta_clock`, `delta_s3_table`) as a user's test gets them."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from airflow_delta_provider.delta import DeltaLog, check_can_read
from airflow_delta_provider.testing import (
    DEFAULT_SCHEMA,
    DEFAULT_START_TIME_MS,
    ENGINE_INFO,
    DeltaLogBuilder,
    FakeClock,
)

pytest_plugins = ["pytester"]

T0 = 1_700_000_000_000
STEP = 60_000
DAY = "2024-01-01"


def builder(tmp_path, **kwargs) -> DeltaLogBuilder:
    kwargs.setdefault("schema", {"id": "long", "date": "string"})
    kwargs.setdefault("partition_columns", ["date"])
    kwargs.setdefault("configuration", {"delta.deletedFileRetentionDuration": "interval 1 days"})
    kwargs.setdefault("start_time_ms", T0)
    return DeltaLogBuilder(tmp_path / "table", **kwargs)


def ours(b: DeltaLogBuilder, version: int | None = None):
    log = DeltaLog(b.path)  # not the cached instance: every call reads the log afresh
    return log.snapshot if version is None else log.snapshot_at(version)


def our_files(snap) -> dict[str, tuple[int, dict]]:
    return {a.path: (a.size, dict(a.partition_values)) for a in snap.all_files()}


def rs_files(table: DeltaTable) -> dict[str, tuple[int, dict]]:
    """Logged path -> (size, partition values) as deltalake reports the active files."""
    cols = pa.table(table.get_add_actions(flatten=True)).to_pydict()
    parts = [k for k in cols if k.startswith("partition.")]
    return {
        path: (size, {k.removeprefix("partition."): cols[k][i] for k in parts})
        for i, (path, size) in enumerate(zip(cols["path"], cols["size_bytes"], strict=True))
    }


def read_commit(b: DeltaLogBuilder, version: int) -> list[dict]:
    with open(b.commit_path(version), encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def test_create_append_remove_overwrite(tmp_path):
    b = builder(tmp_path)
    assert b.version == -1
    assert b.uri == (tmp_path / "table").as_uri()
    assert b.create() == 0
    v1 = b.append(["part-0.parquet", "part-1.parquet"], size=1024, partition={"date": DAY}, stats={"numRecords": 10})
    assert v1 == 1
    assert b.remove(["part-0.parquet"]) == 2
    assert b.overwrite(["part-2.parquet"], size=2048, partition={"date": "2024-01-02"}) == 3
    assert b.version == 3
    assert set(b.files) == {"date=2024-01-02/part-2.parquet"}
    assert set(b.tombstones) == {f"date={DAY}/part-0.parquet", f"date={DAY}/part-1.parquet"}

    # The commits themselves.
    v0 = read_commit(b, 0)
    assert [next(iter(a)) for a in v0] == ["commitInfo", "protocol", "metaData"]
    assert v0[0]["commitInfo"]["operation"] == "CREATE TABLE"
    assert v0[0]["commitInfo"]["engineInfo"] == ENGINE_INFO
    assert v0[1]["protocol"] == {"minReaderVersion": 1, "minWriterVersion": 2}
    assert json.loads(v0[2]["metaData"]["schemaString"])["fields"][0] == {
        "name": "id",
        "type": "long",
        "nullable": True,
        "metadata": {},
    }
    v1 = read_commit(b, 1)
    assert v1[0]["commitInfo"]["timestamp"] == T0 + STEP
    assert v1[0]["commitInfo"]["operationParameters"]["mode"] == "Append"
    assert v1[1]["add"] == {
        "path": f"date={DAY}/part-0.parquet",
        "partitionValues": {"date": DAY},
        "size": 1024,
        "modificationTime": T0 + STEP,
        "dataChange": True,
        "stats": '{"numRecords":10}',
    }
    assert read_commit(b, 2)[1]["remove"] == {
        "path": f"date={DAY}/part-0.parquet",
        "deletionTimestamp": T0 + 2 * STEP,
        "dataChange": True,
        "extendedFileMetadata": True,
        "partitionValues": {"date": DAY},
        "size": 1024,
    }
    v3 = read_commit(b, 3)
    assert v3[0]["commitInfo"]["operationParameters"]["mode"] == "Overwrite"
    assert [next(iter(a)) for a in v3[1:]] == ["remove", "add"]
    for v in range(4):  # commit file mtimes are the commit timestamps
        assert os.stat(b.commit_path(v)).st_mtime_ns == (T0 + v * STEP) * 1_000_000
        assert b.timestamp(v) == T0 + v * STEP

    # Our library.
    snap = ours(b)
    assert snap.version == 3
    assert snap.partition_columns == ("date",)
    assert our_files(snap) == {"date=2024-01-02/part-2.parquet": (2048, {"date": "2024-01-02"})}
    tombstones = {r.path: (r.deletion_timestamp, r.size) for r in snap.tombstones(now_ms=T0 + 3 * STEP)}
    assert tombstones == {
        f"date={DAY}/part-0.parquet": (T0 + 2 * STEP, 1024),
        f"date={DAY}/part-1.parquet": (T0 + 3 * STEP, 1024),
    }
    assert snap.num_tombstones(now_ms=T0 + 2 * STEP + 86_400_000) == 1  # the 1-day retention applies
    assert our_files(ours(b, 1)) == {
        f"date={DAY}/part-0.parquet": (1024, {"date": DAY}),
        f"date={DAY}/part-1.parquet": (1024, {"date": DAY}),
    }
    assert [a.parsed_stats() for a in ours(b, 1).all_files()] == [{"numRecords": 10}] * 2

    # deltalake.
    table = DeltaTable(b.path)
    assert table.version() == 3
    assert rs_files(table) == our_files(snap)
    assert table.file_uris() == [os.path.join(b.path, "date=2024-01-02", "part-2.parquet")]
    for v in range(4):
        assert rs_files(DeltaTable(b.path, version=v)) == our_files(ours(b, v))
    assert [h["operation"] for h in table.history()] == ["WRITE", "DELETE", "WRITE", "CREATE TABLE"]


def test_checkpoint_then_more_commits_loads_identically(tmp_path):
    b = builder(tmp_path)
    b.create()
    b.append(["a.parquet", "b.parquet"], partition={"date": DAY}, stats={"numRecords": 3})
    b.txn("app", 1)
    b.remove(["a.parquet"])
    assert b.checkpoint() == 3
    b.append(["c.parquet"], partition={"date": "2024-01-02"}, size=10)
    b.remove(["b.parquet"])
    b.set_properties({"delta.logRetentionDuration": "interval 30 days"})

    with open(os.path.join(b.log_dir, "_last_checkpoint"), encoding="utf-8") as fh:
        hint = json.load(fh)
    # protocol, metaData, txn, one add, one tombstone
    assert (hint["version"], hint["size"], hint["numOfAddFiles"]) == (3, 5, 1)
    cp = pq.read_table(b.checkpoint_path(3))
    assert cp.column_names == ["txn", "add", "remove", "metaData", "protocol", "domainMetadata"]
    assert cp.schema.field("add").type.field("stats").type == pa.string()
    assert cp.schema.field("add").type.field("partitionValues").type == pa.map_(pa.string(), pa.string())
    assert cp.num_rows == 5
    add_rows = [r for r in cp.column("add").to_pylist() if r is not None]
    assert [(r["path"], r["stats"], r["partitionValues"]) for r in add_rows] == [
        (f"date={DAY}/b.parquet", '{"numRecords":3}', [("date", DAY)])
    ]

    expected = {
        "date=2024-01-02/c.parquet": (10, {"date": "2024-01-02"}),
    }
    snap = ours(b)
    assert snap.log_segment.checkpoint is not None and snap.log_segment.checkpoint.version == 3
    assert our_files(snap) == expected
    assert rs_files(DeltaTable(b.path)) == expected
    assert (
        rs_files(DeltaTable(b.path, version=3))
        == our_files(ours(b, 3))
        == {f"date={DAY}/b.parquet": (1024, {"date": DAY})}
    )
    assert {r.path for r in snap.tombstones(include_expired=True)} == {f"date={DAY}/a.parquet", f"date={DAY}/b.parquet"}

    # Without the commits before it, both readers must take the state from the checkpoint.
    for v in range(4):
        os.remove(b.commit_path(v))
    snap = ours(b)
    assert our_files(snap) == expected
    assert snap.transaction_version("app") == 1
    assert snap.configuration["delta.logRetentionDuration"] == "interval 30 days"
    table = DeltaTable(b.path)
    assert table.version() == 6
    assert rs_files(table) == expected
    assert table.transaction_version("app") == 1
    assert rs_files(DeltaTable(b.path, version=3)) == {f"date={DAY}/b.parquet": (1024, {"date": DAY})}


def test_checkpoint_of_an_older_version(tmp_path):
    b = builder(tmp_path, partition_columns=[], schema={"id": "long"})
    b.create()
    b.append(["a.parquet"])
    b.append(["b.parquet"])
    assert b.checkpoint(1) == 1
    assert pq.read_table(b.checkpoint_path(1)).num_rows == 3  # protocol, metaData, a.parquet
    for v in range(2):
        os.remove(b.commit_path(v))
    assert set(our_files(ours(b))) == set(rs_files(DeltaTable(b.path))) == {"a.parquet", "b.parquet"}
    with pytest.raises(ValueError, match="no version 5"):
        b.checkpoint(5)


def test_time_travel_by_version_and_timestamp(tmp_path):
    b = builder(tmp_path, partition_columns=[], schema={"id": "long"}, step_ms=3_600_000)
    b.create()
    for i in range(3):
        b.append([f"f{i}.parquet"])
    hour = 3_600_000
    assert [b.timestamp(v) for v in range(4)] == [T0, T0 + hour, T0 + 2 * hour, T0 + 3 * hour]

    log = DeltaLog(b.path)
    assert log.commit_timestamps() == [(v, T0 + v * hour) for v in range(4)]
    for v in range(4):
        names = {f"f{i}.parquet" for i in range(v)}
        assert set(our_files(log.snapshot_at(v))) == names
        assert set(rs_files(DeltaTable(b.path, version=v))) == names

    between = T0 + 2 * hour + 1_000  # one second after version 2
    assert log.snapshot_at(timestamp=between).version == 2
    assert log.snapshot_at(timestamp=T0 + hour).version == 1
    assert ours(b).timestamp == T0 + 3 * hour
    table = DeltaTable(b.path)
    table.load_as_version(dt.datetime.fromtimestamp(between / 1000, dt.UTC))
    assert table.version() == 2
    assert set(rs_files(table)) == {"f0.parquet", "f1.parquet"}


def test_explicit_commit_timestamp(tmp_path):
    b = builder(tmp_path)
    b.create()
    b.append(["a.parquet"], partition={"date": DAY}, timestamp_ms=T0 + 5_000)
    assert b.timestamp(1) == T0 + 5_000
    assert os.stat(b.commit_path(1)).st_mtime_ns == (T0 + 5_000) * 1_000_000
    assert b.files[f"date={DAY}/a.parquet"]["modificationTime"] == T0 + 5_000
    assert b.append(["b.parquet"], partition={"date": DAY}) == 2
    assert b.timestamp(2) == T0 + 2 * STEP  # back on the default schedule
    assert b.remove(["a.parquet"], deletion_timestamp_ms=T0 - 1) == 3
    assert b.tombstones[f"date={DAY}/a.parquet"]["deletionTimestamp"] == T0 - 1


def test_properties_and_schema_changes(tmp_path):
    b = builder(tmp_path)
    b.create()
    b.set_properties({"delta.logRetentionDuration": "interval 30 days", "custom": "1"})
    b.add_column("extra", "string")
    b.set_properties({"custom": None})  # unset

    snap = ours(b)
    expected_conf = {
        "delta.deletedFileRetentionDuration": "interval 1 days",
        "delta.logRetentionDuration": "interval 30 days",
    }
    assert snap.configuration == expected_conf
    assert [f.name for f in snap.schema.fields] == ["id", "date", "extra"]
    table = DeltaTable(b.path)
    assert table.metadata().configuration == expected_conf
    assert table.metadata().id == snap.metadata.id == b.metadata["id"]
    assert [(f.name, f.type.type) for f in table.schema().fields] == [
        ("id", "long"),
        ("date", "string"),
        ("extra", "string"),
    ]
    assert ours(b, 1).configuration["custom"] == "1"
    assert [f.name for f in DeltaTable(b.path, version=1).schema().fields] == ["id", "date"]
    with pytest.raises(ValueError, match="already exists"):
        b.add_column("extra", "long")

    b.change_schema({"id": "long", "date": "string", "amount": "decimal(10,2)"})
    assert [(f.name, f.type.type) for f in DeltaTable(b.path).schema().fields] == [
        ("id", "long"),
        ("date", "string"),
        ("amount", "decimal(10,2)"),
    ]
    assert ours(b).schema.get("amount").type_name == "decimal(10,2)"
    assert read_commit(b, b.version)[0]["commitInfo"]["operation"] == "REPLACE COLUMNS"
    assert DeltaTable(b.path).metadata().partition_columns == ["date"]


def test_set_transactions(tmp_path):
    b = builder(tmp_path)
    b.create()
    b.txn("app-id", 5)
    b.append(["a.parquet"], partition={"date": DAY}, txn=("writer", 2))
    b.txn("app-id", 6)
    txns = ours(b).set_transactions
    assert {k: (t.version, t.last_updated) for k, t in txns.items()} == {
        "app-id": (6, T0 + 3 * STEP),
        "writer": (2, T0 + 2 * STEP),
    }
    assert read_commit(b, 1)[1] == {"txn": {"appId": "app-id", "version": 5, "lastUpdated": T0 + STEP}}
    table = DeltaTable(b.path)
    assert table.transaction_version("app-id") == 6
    assert table.transaction_version("writer") == 2
    assert table.transaction_version("nobody") is None
    assert ours(b, 1).transaction_version("app-id") == 5


def test_protocol_features_and_domains(tmp_path):
    b = builder(
        tmp_path,
        protocol=(3, 7),
        reader_features=["deletionVectors"],
        writer_features=["deletionVectors", "domainMetadata"],
    )
    b.create()
    b.append(["a.parquet"], partition={"date": DAY})
    b.domain("my.domain", {"k": "v"})
    b.domain("gone", "x")
    b.domain("gone", "", removed=True)
    b.checkpoint()
    b.set_protocol(
        3,
        7,
        reader_features=["deletionVectors", "timestampNtz"],
        writer_features=["deletionVectors", "domainMetadata", "timestampNtz"],
    )

    assert read_commit(b, 0)[1]["protocol"] == {
        "minReaderVersion": 3,
        "minWriterVersion": 7,
        "readerFeatures": ["deletionVectors"],
        "writerFeatures": ["deletionVectors", "domainMetadata"],
    }
    cp_domains = [d for d in pq.read_table(b.checkpoint_path(4)).column("domainMetadata").to_pylist() if d]
    assert cp_domains == [{"domain": "my.domain", "configuration": '{"k":"v"}', "removed": False}]

    snap = ours(b)
    assert snap.protocol.min_reader_version == 3 and snap.protocol.min_writer_version == 7
    assert snap.protocol.reader_features == ("deletionVectors", "timestampNtz")
    assert snap.protocol.writer_features == ("deletionVectors", "domainMetadata", "timestampNtz")
    check_can_read(snap.protocol)
    assert {k: d.configuration for k, d in snap.domain_metadata.items()} == {"my.domain": '{"k":"v"}'}
    assert ours(b, 4).protocol.reader_features == ("deletionVectors",)

    for v in range(5):  # the domain comes from the checkpoint alone
        os.remove(b.commit_path(v))
    assert {k: d.configuration for k, d in ours(b).domain_metadata.items()} == {"my.domain": '{"k":"v"}'}
    rs_protocol = DeltaTable(b.path).protocol()
    assert (rs_protocol.min_reader_version, rs_protocol.min_writer_version) == (3, 7)
    assert rs_protocol.reader_features == ["deletionVectors", "timestampNtz"]
    assert rs_protocol.writer_features == ["deletionVectors", "domainMetadata", "timestampNtz"]
    assert set(rs_files(DeltaTable(b.path))) == {f"date={DAY}/a.parquet"}


def test_paths_are_encoded_like_delta_writers(tmp_path):
    b = builder(tmp_path, schema={"id": "long", "ts": "string"}, partition_columns=["ts"])
    b.create()
    b.append(["p 1.parquet"], partition={"ts": "2024-01-01 10:00"})
    b.append(["n.parquet"], partition={"ts": None})
    b.append(["x=1/verbatim.parquet"], partition={"ts": "a"})
    logged = set(b.files)
    assert logged == {
        "ts=2024-01-01%2010%253A00/p%201.parquet",
        "ts=__HIVE_DEFAULT_PARTITION__/n.parquet",
        "x=1/verbatim.parquet",
    }
    snap = ours(b)
    assert {a.path: dict(a.partition_values) for a in snap.all_files()} == {
        "ts=2024-01-01%2010%253A00/p%201.parquet": {"ts": "2024-01-01 10:00"},
        "ts=__HIVE_DEFAULT_PARTITION__/n.parquet": {"ts": None},
        "x=1/verbatim.parquet": {"ts": "a"},
    }
    table = DeltaTable(b.path)
    assert set(rs_files(table)) == logged
    assert sorted(table.file_uris()) == sorted(
        os.path.join(b.path, p)
        for p in (
            "ts=2024-01-01 10%3A00/p 1.parquet",
            "ts=__HIVE_DEFAULT_PARTITION__/n.parquet",
            "x=1/verbatim.parquet",
        )
    )
    # Remove by the name a file was added under, by logged path, or by a dict for an unknown file.
    b.remove(["p 1.parquet", "ts=__HIVE_DEFAULT_PARTITION__/n.parquet", {"path": "never/added.parquet", "size": 7}])
    assert set(b.files) == {"x=1/verbatim.parquet"}
    assert b.tombstones["never/added.parquet"]["size"] == 7
    assert set(our_files(ours(b))) == set(rs_files(DeltaTable(b.path))) == {"x=1/verbatim.parquet"}


def test_raw_commit(tmp_path):
    b = builder(tmp_path)
    b.create()
    add = {
        "path": "date=2024-01-01/raw.parquet",
        "partitionValues": {"date": DAY},
        "size": 99,
        "modificationTime": T0,
        "dataChange": True,
        "stats": {"numRecords": 4},
    }
    assert b.commit([{"add": add}], operation="MERGE", operation_parameters={"predicate": "x"}) == 1
    lines = read_commit(b, 1)
    assert lines[0]["commitInfo"]["operation"] == "MERGE"
    assert lines[0]["commitInfo"]["operationParameters"] == {"predicate": "x"}
    assert lines[1]["add"]["stats"] == '{"numRecords":4}'
    assert b.files["date=2024-01-01/raw.parquet"]["size"] == 99
    # A caller's commitInfo is kept as the only one.
    info = {"commitInfo": {"timestamp": 1, "operation": "OPTIMIZE"}}
    raw = [info, {"remove": {"path": add["path"], "dataChange": False}}]
    b.commit(raw)
    assert read_commit(b, 2) == raw
    assert b.files == {}
    assert our_files(ours(b)) == rs_files(DeltaTable(b.path)) == {}
    assert [h["operation"] for h in DeltaTable(b.path).history(2)] == ["OPTIMIZE", "MERGE"]


def test_misuse_and_concurrent_writers(tmp_path):
    b = builder(tmp_path)
    with pytest.raises(RuntimeError, match="create"):
        b.append(["a.parquet"])
    b.create()
    with pytest.raises(RuntimeError, match="already exists"):
        b.create()
    with pytest.raises(KeyError, match="not an active file"):
        b.remove(["missing.parquet"])
    # Another writer takes version 1: the builder fails and leaves its state alone.
    with open(b.commit_path(1), "w", encoding="utf-8") as fh:
        fh.write('{"commitInfo":{}}\n')
    with pytest.raises(FileExistsError):
        b.append(["a.parquet"], partition={"date": DAY})
    assert b.version == 0 and b.files == {}
    assert sorted(os.listdir(b.log_dir)) == ["00000000000000000000.json", "00000000000000000001.json"]
    # A second builder on the same table cannot overwrite version 0.
    with pytest.raises(FileExistsError):
        builder(tmp_path).create()


def test_write_data_files(tmp_path):
    b = builder(tmp_path, write_data_files=True)
    b.create()
    b.append(["a b.parquet"], size=300, partition={"date": "2024-01-01 10:00"})
    target = tmp_path / "table" / "date=2024-01-01 10%3A00" / "a b.parquet"
    assert target.stat().st_size == 300
    assert target.stat().st_mtime_ns == (T0 + STEP) * 1_000_000


def test_importing_the_module_pulls_in_no_airflow_pyspark_deltalake_or_pyarrow():
    code = (
        "import sys, airflow_delta_provider.testing\n"
        "bad = ('airflow', 'pyspark', 'deltalake', 'pyarrow')\n"
        "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in bad)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_every_version_reads_the_same_in_delta_rs_with_checkpoints(tmp_path):
    b = builder(tmp_path, schema={"id": "long", "ts": "string"}, partition_columns=["ts"])
    expected: dict[int, dict] = {}

    def track(version: int) -> None:
        expected[version] = {p: (a["size"], a["partitionValues"]) for p, a in b.files.items()}

    track(b.create())
    track(b.append(["a.parquet", "b.parquet"], partition={"ts": "2024-01-01 10:00"}, stats={"numRecords": 2}))
    track(b.append(["n.parquet"], partition={"ts": None}, size=7))
    track(b.remove(["a.parquet"]))
    assert b.checkpoint() == 3
    track(b.txn("app", 1))
    track(b.overwrite(["o.parquet"], partition={"ts": "x"}, size=99))
    assert b.checkpoint() == 5
    track(b.append(["p.parquet"], partition={"ts": "x"}))
    track(b.remove(["p.parquet"]))
    assert b.checkpoint(6) == 6  # an older version than the latest
    assert b.version == 7 and len(expected) == 8
    for v, files in expected.items():
        assert rs_files(DeltaTable(b.path, version=v)) == files, v
        assert our_files(ours(b, v)) == files, v
    assert expected[7] == {"ts=x/o.parquet": (99, {"ts": "x"})}


def test_checkpoints_are_the_library_writers(tmp_path):
    """Written by `write_checkpoint` as of the version's commit time: tombstones already past the
    table's retention then are dropped (the builder's `tombstones` keeps every remove in the log)."""
    b = builder(tmp_path)  # delta.deletedFileRetentionDuration: 1 day
    b.create()
    b.append(["old.parquet", "new.parquet"], partition={"date": DAY})
    b.remove(["old.parquet"], deletion_timestamp_ms=T0 - 2 * 86_400_000)
    b.remove(["new.parquet"])
    assert b.checkpoint() == 3
    removes = [r for r in pq.read_table(b.checkpoint_path(3)).column("remove").to_pylist() if r]
    assert [(r["path"], r["deletionTimestamp"], r["dataChange"]) for r in removes] == [
        (f"date={DAY}/new.parquet", T0 + 3 * STEP, False)
    ]
    assert set(b.tombstones) == {f"date={DAY}/old.parquet", f"date={DAY}/new.parquet"}
    with open(os.path.join(b.log_dir, "_last_checkpoint"), encoding="utf-8") as fh:
        assert json.load(fh)["version"] == 3


def test_the_checkpoint_hint(tmp_path):
    b = builder(tmp_path)
    hint = os.path.join(b.log_dir, "_last_checkpoint")
    b.create()
    b.append(["a.parquet"], partition={"date": DAY})
    assert b.checkpoint(write_last_checkpoint=False) == 1
    assert not os.path.exists(hint)  # there was none: there is none
    assert ours(b).log_segment.checkpoint.version == 1  # found by listing
    b.append(["b.parquet"], partition={"date": DAY})
    b.checkpoint()
    with open(hint, "rb") as fh:
        at_2 = fh.read()
    assert json.loads(at_2)["version"] == 2
    b.checkpoint(1)  # exists already: kept, and the hint never moves back
    b.append(["c.parquet"], partition={"date": DAY})
    b.checkpoint(write_last_checkpoint=False)
    with open(hint, "rb") as fh:
        assert fh.read() == at_2  # restored
    assert os.path.exists(b.checkpoint_path(3))
    assert ours(b).log_segment.checkpoint.version == 3


def test_a_table_with_an_unknown_writer_feature_is_refused_by_the_real_writer(tmp_path):
    """The kit writes checkpoints only through the library's writer, which refuses a writer feature it does not
    know; such a table is made by upgrading the protocol after the checkpoint."""
    from airflow_delta_provider.delta.errors import UnsupportedFeatureError

    b = builder(tmp_path, protocol=(1, 7), writer_features=["futureFeature"])
    b.create()
    b.append(["a.parquet"], partition={"date": DAY})
    names = sorted(os.listdir(b.log_dir))
    with pytest.raises(UnsupportedFeatureError):
        b.checkpoint()
    assert sorted(os.listdir(b.log_dir)) == names
    ok = builder(tmp_path / "ok", protocol=(1, 7), writer_features=["appendOnly"])
    ok.create()
    ok.append(["a.parquet"], partition={"date": DAY})
    assert ok.checkpoint() == 1
    ok.set_protocol(1, 7, writer_features=["appendOnly", "futureFeature"])
    assert ours(ok).protocol.writer_features == ("appendOnly", "futureFeature")


def test_a_raw_commit_the_library_cannot_parse_is_written_not_tracked(tmp_path):
    b = builder(tmp_path)
    b.create()
    b.append(["a.parquet"], partition={"date": DAY})
    broken = [{"add": {"path": "no-size.parquet"}}, {"remove": {"path": f"date={DAY}/a.parquet"}}]
    assert b.commit(broken) == 2
    assert read_commit(b, 2)[1:] == broken
    assert b.files == {} and set(b.tombstones) == {f"date={DAY}/a.parquet"}


def test_fake_clock():
    clock = FakeClock()
    assert clock() == DEFAULT_START_TIME_MS
    assert clock.advance(5) == clock() == DEFAULT_START_TIME_MS + 5
    assert clock.set(42) == clock() == 42
    assert repr(clock) == "FakeClock(42)"


def test_the_fixtures_example(delta_table, delta_clock):
    """The example of the kit's docstring."""
    day_ms = 86_400_000
    delta_table.create()
    delta_table.append(["a.parquet", "b.parquet"])
    delta_table.remove(["a.parquet"])
    delta_table.checkpoint()
    assert set(delta_table.files) == {"b.parquet"}
    log = DeltaLog(delta_table.path, clock=delta_clock)
    delta_clock.set(delta_table.timestamp(2) + day_ms)
    assert log.update().num_tombstones() == 1
    delta_clock.advance(7 * day_ms)
    assert log.update().num_tombstones() == 0


def test_delta_table_fixture(delta_table, tmp_path):
    assert delta_table.path == str(tmp_path / "table") and delta_table.version == -1
    delta_table.create()
    assert json.loads(delta_table.metadata["schemaString"])["fields"] == [
        {"name": k, "type": v, "nullable": True, "metadata": {}} for k, v in DEFAULT_SCHEMA.items()
    ]
    assert DeltaTable(delta_table.path).schema().fields[0].name == "id"


def test_delta_s3_table_fixture(delta_s3_table):
    b = delta_s3_table
    assert b.uri.startswith("s3://") and b.uri.endswith("/table")
    b.create()
    b.append(["a.parquet", "b.parquet"], size=10)
    b.remove(["a.parquet"])
    assert b.checkpoint() == 2
    b.append(["c.parquet"], size=20)
    log = DeltaLog(b.uri, storage_options=b.storage_options)
    snap = log.update()
    assert snap.version == 3 and snap.log_segment.checkpoint.version == 2
    assert {a.path: a.size for a in snap.all_files()} == {p: a["size"] for p, a in b.files.items()}
    assert {a.path: a.size for a in snap.all_files()} == {"b.parquet": 10, "c.parquet": 20}
    assert [r.path for r in snap.tombstones(now_ms=b.timestamp(3))] == ["a.parquet"]
    assert log.read_last_checkpoint().version == 2
    info = json.loads(b.store.read_bytes(b.commit_path(1)).splitlines()[0])["commitInfo"]
    assert info["timestamp"] == b.timestamp(1)  # an object's mtime is its upload time: only local mtimes are set
    with pytest.raises(FileExistsError):  # the store's put-if-absent: version 0 is taken
        DeltaLogBuilder(b.uri, schema=DEFAULT_SCHEMA, storage_options=b.storage_options).create()


def test_the_plugin_comes_with_the_package(pytester):
    """A user's test gets the fixtures from the installed package's `pytest11` entry point."""
    pytester.makepyfile(
        test_user="""
        from airflow_delta_provider.delta import DeltaLog

        def test_it(delta_table, delta_clock):
            delta_table.create()
            delta_table.append(["a.parquet"])
            assert DeltaLog(delta_table.path, clock=delta_clock).update().num_files == 1
        """
    )
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)
    off = pytester.runpytest_subprocess("-p", "no:airflow_delta_provider")
    off.assert_outcomes(errors=1)
    off.stdout.fnmatch_lines(["*fixture 'delta_table' not found*"])
