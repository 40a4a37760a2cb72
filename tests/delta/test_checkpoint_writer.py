"""The checkpoint writer (issue 16): `maintenance.checkpoint.write_checkpoint`.

* Pure rules: the `_last_checkpoint` JSON checksum (PROTOCOL.md's test vector and every checksum in
  the corpus), rendering, and `plan_checkpoint` (kind, stats columns, retention cutoffs).
* We write, others read: every corpus table this reader loads is copied, checkpointed at its latest
  version, then loaded by delta-rs (same version, files, protocol, metadata and txns as delta-rs saw
  before) and by us from the new checkpoint (same state as before, tombstones and domains included).
  The same on randomized delta-rs tables. V2 tables get V2 checkpoints.
* Table properties: struct stats and typed partition values (physical names under column mapping),
  tombstone and txn retention, `_last_checkpoint` never moved backwards, existing checkpoints kept.
* Crashes: the writer runs in a subprocess whose store SIGKILLs it at a named step (`support.faults`,
  a wrapping store); the table stays readable by delta-rs and by us, unchanged.
* Refusals before anything is written: an unknown writer feature, a catalog-managed table, a
  read-only store. Verification: a store that keeps other bytes than it was given (a fake faulty
  store: no real one misbehaves on cue) is caught and nothing stays behind.

Corpus tables use a clock at 0 ms, so every tombstone is inside retention and gets written.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import CORPUS, REPO, copy_table

deltalake = pytest.importorskip("deltalake")
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake  # noqa: E402

from airflow_delta_provider.delta import (  # noqa: E402
    DeltaError,
    DeltaLog,
    OperationNotAllowedError,
    Snapshot,
    UnsupportedFeatureError,
)
from airflow_delta_provider.delta.engines import local_checkpoint as local_cp  # noqa: E402
from airflow_delta_provider.delta.errors import CheckpointMismatchError, UnsupportedStoreError  # noqa: E402
from airflow_delta_provider.delta.maintenance import checkpoint as cp  # noqa: E402
from airflow_delta_provider.delta.maintenance.checkpoint import write_checkpoint  # noqa: E402
from airflow_delta_provider.delta.protocol.actions import Metadata, Protocol  # noqa: E402
from airflow_delta_provider.delta.protocol.checkpoints import StatsField, plan_checkpoint  # noqa: E402
from airflow_delta_provider.delta.protocol.last_checkpoint import (  # noqa: E402
    json_checksum,
    parse_last_checkpoint,
    render_last_checkpoint,
)
from airflow_delta_provider.delta.protocol.schema import parse_partition_value  # noqa: E402
from airflow_delta_provider.delta.storage import LocalLogStore  # noqa: E402
from airflow_delta_provider.delta.write import checkpoint_file  # noqa: E402
from airflow_delta_provider.delta.write.checkpoint_file import CheckpointResult, kept_tombstones  # noqa: E402

if not (CORPUS / "ORACLE-deltalake-1.6.6.json").is_file():
    pytest.skip(f"reference corpus not found at {CORPUS}", allow_module_level=True)

from test_conformance import LOADABLE, OVERRIDES  # noqa: E402
from test_randomized import RandomTable, Scenario  # noqa: E402

NOW = 0  # ms: every tombstone of the corpus is inside retention


def clock() -> int:
    return NOW


# -- state as each reader sees it ------------------------------------------------------------------------


def fresh(table: Path, store: Any = None) -> Snapshot:
    return DeltaLog(str(table), clock=clock, store=store).update()


def state(snap: Snapshot, *, stats: bool = True) -> dict[str, Any]:
    """Everything a checkpoint must keep: version, protocol, metadata, txns, domains, files, tombstones."""
    files = {}
    for a in snap.all_files():
        parsed = json.loads(a.stats) if stats and a.stats else None
        dv = a.deletion_vector.unique_id if a.deletion_vector else None
        pv = dict(a.partition_values)
        files[a.key] = (
            a.path,
            a.size,
            a.modification_time,
            pv,
            dv,
            a.base_row_id,
            a.default_row_commit_version,
            parsed,
        )
    tombstones = {t.key: (t.deletion_timestamp, t.size) for t in snap.tombstones(now_ms=NOW)}
    return {
        "version": snap.version,
        "protocol": snap.protocol,
        "metadata": snap.metadata,
        "txns": snap.set_transactions,
        "domains": snap.domain_metadata,
        "files": files,
        "tombstones": tombstones,
    }


def deltars(table: Path, app_ids: list[str]) -> dict[str, Any]:
    """What delta-rs sees at the latest version (one `DeltaTable` load)."""
    dt = DeltaTable(str(table))
    actions = pa.table(dt.get_add_actions(flatten=True))
    proto, meta = dt.protocol(), dt.metadata()
    return {
        "version": dt.version(),
        "files": dict(zip(actions.column("path").to_pylist(), actions.column("size_bytes").to_pylist(), strict=True)),
        "protocol": (proto.min_reader_version, proto.min_writer_version),
        "features": (sorted(proto.reader_features or ()), sorted(proto.writer_features or ())),
        "metadata": (meta.id, list(meta.partition_columns), dict(meta.configuration)),
        "txns": {app: dt.transaction_version(app) for app in app_ids},
    }


def checkpoint_files(table: Path, version: int) -> list[Path]:
    return sorted(p for p in (table / "_delta_log").glob(f"{version:020d}.checkpoint.*"))


def listing(table: Path) -> list[str]:
    return sorted(str(p.relative_to(table)) for p in (table / "_delta_log").rglob("*"))


def set_aside_checkpoint(table: Path, before: Snapshot) -> bool:
    """Move the checkpoint at the latest version out of `_delta_log` when the log rebuilds that version
    without it (so the new checkpoint is the one readers pick); put it back otherwise."""
    found = checkpoint_files(table, before.version)
    if not found:
        return True
    aside = table.parent / "aside"
    aside.mkdir()
    for p in found:
        p.rename(aside / p.name)
    try:
        if state(fresh(table), stats=False) == state(before, stats=False):
            return True
    except DeltaError:
        pass
    for p in aside.iterdir():
        p.rename(table / "_delta_log" / p.name)
    return False


# -- 1. pure rules ---------------------------------------------------------------------------------------


def test_json_checksum_matches_the_protocol_test_vector():
    sample = (
        '{"k0":"\'v 0\'", "checksum": "adsaskfljadfkjadfkj", '
        '"k1":{"k2": 2, "k3": ["v3", [1, 2], {"k4": "v4", "k5": ["v5", "v6", "v7"]}]}}'
    )
    assert json_checksum(json.loads(sample)) == "6a92d155a59bf2eecbd4b4ec7fd1f875"


def test_json_checksum_matches_every_checksum_spark_wrote_in_the_corpus():
    checked = 0
    for path in CORPUS.rglob("_last_checkpoint"):
        try:
            obj = json.loads(path.read_bytes())
        except ValueError:
            continue
        if "checksum" in obj:
            assert json_checksum(obj) == obj["checksum"], path
            checked += 1
    assert checked >= 30


def test_last_checkpoint_renders_with_checksum_and_parses_back():
    data = render_last_checkpoint(7, size=12, size_in_bytes=3456, num_of_add_files=9, v2_checkpoint={"path": "x"})
    obj = json.loads(data)
    assert list(obj) == ["version", "size", "sizeInBytes", "numOfAddFiles", "v2Checkpoint", "checksum"]
    hint = parse_last_checkpoint(data)
    assert hint is not None and (hint.version, hint.size, hint.num_of_add_files, hint.v2_checkpoint_path) == (
        7,
        12,
        9,
        "x",
    )
    assert parse_last_checkpoint(data.replace(b'"size":12', b'"size":13')) is None  # checksum no longer matches


def test_last_checkpoint_of_a_multi_part_checkpoint_has_parts_after_size():
    data = render_last_checkpoint(7, size=12, size_in_bytes=3456, num_of_add_files=9, parts=3)
    obj = json.loads(data)
    assert list(obj) == ["version", "size", "parts", "sizeInBytes", "numOfAddFiles", "checksum"]  # Spark's order
    assert obj["parts"] == 3 and json_checksum(obj) == obj["checksum"]
    hint = parse_last_checkpoint(data)
    assert hint is not None and hint.parts == 3


def _metadata(fields: list[dict[str, Any]], partitions: tuple[str, ...] = (), **conf: str) -> Metadata:
    schema = json.dumps({"type": "struct", "fields": fields})
    return Metadata(id="m", schema_string=schema, partition_columns=partitions, configuration=conf)


def _field(name: str, type_: Any, physical: str | None = None) -> dict[str, Any]:
    md = {"delta.columnMapping.physicalName": physical} if physical else {}
    return {"name": name, "type": type_, "nullable": True, "metadata": md}


V1 = Protocol(1, 2)
V2 = Protocol(3, 7, ("v2Checkpoint",), ("v2Checkpoint", "deletionVectors"))


def test_plan_kind_naming_and_retention_cutoffs():
    meta = _metadata([_field("a", "long")], **{"delta.setTransactionRetentionDuration": "interval 1 hour"})
    classic = plan_checkpoint(V1, meta, version=5, now_ms=10_000_000_000)
    assert (classic.kind, classic.name, classic.stats_as_json, classic.stats_as_struct) == (
        "classic",
        "00000000000000000005.checkpoint.parquet",
        True,
        False,
    )
    assert classic.min_file_retention_timestamp == 10_000_000_000 - 7 * 86_400_000
    assert classic.min_txn_retention_timestamp == 10_000_000_000 - 3_600_000
    assert classic.keeps_tombstone(10_000_000_000) and not classic.keeps_tombstone(None)
    assert not classic.keeps_txn(None) and classic.keeps_txn(10_000_000_000)
    v2 = plan_checkpoint(V2, meta, version=5, now_ms=0, actions_per_sidecar=10)
    assert (v2.kind, v2.name, v2.tight_bounds) == ("v2", None, True)
    assert (v2.num_sidecars(10), v2.num_sidecars(11), v2.num_sidecars(35)) == (0, 2, 4)
    compat = plan_checkpoint(V2, meta, version=5, now_ms=0, classic_name=True, actions_per_sidecar=10)
    assert compat.name == "00000000000000000005.checkpoint.parquet" and compat.num_sidecars(35) == 0


def test_plan_stats_columns_follow_the_table_properties():
    fields = [
        _field("p", "date", "col-p"),
        _field("a", "long", "col-a"),
        _field("s", {"type": "struct", "fields": [_field("x", "string", "col-x"), _field("y", "boolean", "col-y")]}),
        _field("m", {"type": "map", "keyType": "string", "valueType": "string", "valueContainsNull": True}),
        _field("b", "binary"),
    ]
    mapped = {"delta.columnMapping.mode": "name"}
    plan = plan_checkpoint(V1, _metadata(fields, ("p",), **mapped), version=1, now_ms=0)
    assert plan.partition_fields == (("col-p", "date"),)
    s = StatsField("s", "struct", (StatsField("col-x", "string"), StatsField("col-y", "boolean")))
    assert plan.stats_fields == (StatsField("col-a", "long"), s, StatsField("m", "map"), StatsField("b", "binary"))
    assert [f.min_max for f in plan.stats_fields] == [True, True, False, False]
    two = plan_checkpoint(
        V1, _metadata(fields, ("p",), **{"delta.dataSkippingNumIndexedCols": "2"}), version=1, now_ms=0
    )
    assert [f.name for f in two.stats_fields] == ["a", "s"] and len(two.stats_fields[1].children) == 1
    named = _metadata(fields, ("p",), **{"delta.dataSkippingStatsColumns": "b, `s`.y"})
    assert plan_checkpoint(V1, named, version=1, now_ms=0).stats_fields == (
        StatsField("s", "struct", (StatsField("y", "boolean"),)),
        StatsField("b", "binary"),
    )


def test_stats_that_do_not_parse_become_null_struct_stats():
    target = pa.struct([("numRecords", pa.int64()), ("minValues", pa.struct([("d", pa.date32()), ("x", pa.int32())]))])
    stats = pa.array(
        [
            '{"numRecords":1,"minValues":{"d":"2020-01-02","x":1}}',
            None,
            '{"numRecords":"many"}',
            '{"numRecords":3,\n "minValues":{"x":99999999999}}',  # pretty-printed, out of int32 range
            "not json",
            '{"numRecords":5,\n "minValues":{"x":7}}',
        ]
    )
    import datetime as dt

    parsed = checkpoint_file._stats_parsed(stats, target).to_pylist()
    assert parsed == [
        {"numRecords": 1, "minValues": {"d": dt.date(2020, 1, 2), "x": 1}},
        None,
        None,
        None,
        None,
        {"numRecords": 5, "minValues": {"d": None, "x": 7}},
    ]


# -- 2. we write, others read: the corpus ----------------------------------------------------------------

#: Tables the writer must refuse, and why (before anything is written).
REFUSED: dict[str, type[DeltaError]] = {
    # writerFeatures holds 'liquid', a Databricks-internal name this library does not know
    "delta-rs/table_with_liquid_clustering": UnsupportedFeatureError,
}
#: delta-rs's own view of these logs differs from Spark's before our checkpoint (conformance OVERRIDES:
#: it keeps an add that a remove of the canonically equal path cancels); from our checkpoint it reads
#: the Spark state. Compared with our state instead of with delta-rs's earlier view.
DELTARS_DISAGREES_BEFORE = {r for r in OVERRIDES if r.startswith("kernel-rs-golden/canonicalized-paths")}


def check_write_then_read(table: Path, *, name: str, **kwargs: Any) -> CheckpointResult:
    """Checkpoint the latest version of `table` and check both readers against their view before."""
    before_snap = fresh(table)
    before = state(before_snap)
    app_ids = sorted(before["txns"])
    try:
        rs_before: dict[str, Any] | None = deltars(table, app_ids)
        rs_error = None
    except Exception as exc:  # delta-rs refuses some corpus logs (null schemaString, ...): nothing to compare
        rs_before, rs_error = None, exc
    replaced = set_aside_checkpoint(table, before_snap)
    result = write_checkpoint(DeltaLog(str(table), clock=clock), **kwargs)
    assert result.written == replaced, name
    assert result.version == before["version"] and result.num_add_files == len(before["files"])
    assert result.kind == ("v2" if "v2Checkpoint" in (before["protocol"].writer_features or ()) else "classic")
    after_snap = fresh(table)
    if result.written:
        assert after_snap.log_segment.checkpoint is not None
        assert Path(result.path).name in after_snap.log_segment.checkpoint.names, name
        assert result.num_tombstones == len(before["tombstones"])
    json_stats = cp.plan_checkpoint(before["protocol"], before["metadata"], version=0, now_ms=0).stats_as_json
    after = state(after_snap, stats=json_stats)
    assert after == state(before_snap, stats=json_stats), name
    if rs_before is not None:
        rs_after = deltars(table, app_ids)
        if name in DELTARS_DISAGREES_BEFORE:
            assert set(rs_after["files"]) == {p for p, *_ in after["files"].values()}, name
        else:
            assert rs_after == rs_before, name
    else:
        assert rs_error is not None
    return result


@pytest.mark.parametrize("root", [r for r in LOADABLE if r not in REFUSED])
def test_corpus_table_checkpointed_then_read_by_deltars_and_by_us(root: str, tmp_path: Path) -> None:
    table = copy_table(root, tmp_path)
    check_write_then_read(table, name=root)


@pytest.mark.parametrize("root", sorted(REFUSED))
def test_corpus_table_with_unknown_writer_feature_is_refused_before_writing(root: str, tmp_path: Path) -> None:
    table = copy_table(root, tmp_path)
    files = listing(table)
    with pytest.raises(REFUSED[root]) as info:
        write_checkpoint(DeltaLog(str(table)))
    assert info.value.feature == "liquid" and str(table) in str(info.value)
    assert listing(table) == files


@pytest.mark.parametrize("seed", [Scenario(3), Scenario(101, zero_retention=True, checkpoint_interval=4)])
def test_randomized_deltars_table_checkpointed_then_read_back(seed: Scenario, tmp_path: Path) -> None:
    table = RandomTable(tmp_path / "table", seed)
    table.build()
    check_write_then_read(table.path, name=table.describe())
    # an older version too: written, but `_last_checkpoint` stays on the newer checkpoint
    latest = DeltaTable(str(table.path)).version()
    hint = (table.path / "_delta_log" / "_last_checkpoint").read_bytes()
    older = write_checkpoint(DeltaLog(str(table.path)), version=latest - 1)
    assert older.version == latest - 1 and not older.last_checkpoint_updated
    assert (table.path / "_delta_log" / "_last_checkpoint").read_bytes() == hint
    assert state(fresh(table.path)) == state(DeltaLog(str(table.path), clock=clock).snapshot_at(version=latest))


# -- 3. V2 checkpoints -----------------------------------------------------------------------------------


def test_v2_table_gets_uuid_named_v2_checkpoint_with_sidecars(tmp_path: Path) -> None:
    table = copy_table("delta-rs/checkpoint-v2-table", tmp_path)
    result = check_write_then_read(table, name="v2", actions_per_sidecar=3)
    name = Path(result.path).name
    assert result.kind == "v2" and name.startswith("00000000000000000009.checkpoint.") and name.endswith(".parquet")
    assert len(name.split(".")) == 4 and len(result.sidecars) == 3  # 8 files in sidecars of at most 3
    top = pq.read_table(result.path)
    rows = top.column("checkpointMetadata").to_pylist()
    assert rows[0] == {"version": 9, "tags": None} and rows[1:] == [None] * (top.num_rows - 1)
    assert top.column("add").null_count == top.num_rows  # file actions live in the sidecars only
    sidecars = [r for r in top.column("sidecar").to_pylist() if r]
    assert [s["path"] for s in sidecars] == [Path(p).name for p in result.sidecars]
    for path, row in zip(result.sidecars, sidecars, strict=True):
        assert Path(path).parent.name == "_sidecars" and row["sizeInBytes"] == os.path.getsize(path)
        assert pq.read_schema(path).names == ["add", "remove"]
    hint = json.loads((table / "_delta_log" / "_last_checkpoint").read_bytes())
    assert hint["version"] == 9 and hint["v2Checkpoint"]["path"] == name
    assert (
        hint["size"] == result.num_actions == top.num_rows + sum(pq.read_metadata(p).num_rows for p in result.sidecars)
    )


def test_v2_compat_checkpoint_under_the_classic_name(tmp_path: Path) -> None:
    table = copy_table("kernel-rs-golden/v2-checkpoint-json/delta", tmp_path)
    before = state(fresh(table))
    result = write_checkpoint(DeltaLog(str(table), clock=clock), classic_name=True, actions_per_sidecar=1)
    assert Path(result.path).name == "00000000000000000002.checkpoint.parquet" and result.sidecars == ()
    top = pq.read_table(result.path)
    assert top.column("checkpointMetadata").to_pylist()[0] == {"version": 2, "tags": None}
    assert top.column("add").null_count == top.num_rows - len(before["files"])  # files inline
    (table / "_delta_log" / "00000000000000000002.checkpoint.6374b053-df23-479b-b2cf-c9c550132b49.json").unlink()
    assert state(fresh(table)) == before  # readers that only see classic names get the same state
    assert sorted(DeltaTable(str(table)).file_uris()) == sorted(str(table / p) for p, *_ in before["files"].values())


# -- 4. table properties ---------------------------------------------------------------------------------


def _append_metadata(table: Path, snap: Snapshot, **conf: str) -> None:
    """Commit a new `metaData` with `conf` added (a hand-written commit, as any writer would make)."""
    meta = snap.metadata.to_json()
    meta["configuration"] = {**meta["configuration"], **conf}
    lines = [{"commitInfo": {"timestamp": 1, "operation": "SET TBLPROPERTIES"}}, {"metaData": meta}]
    path = table / "_delta_log" / f"{snap.version + 1:020d}.json"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")


def test_struct_stats_and_typed_partition_values_by_physical_name(tmp_path: Path) -> None:
    table = copy_table("delta-kernel-java/data-reader-partition-values-column-mapping-name", tmp_path)
    snap = fresh(table)
    _append_metadata(table, snap, **{"delta.checkpoint.writeStatsAsStruct": "true"})
    result = check_write_then_read(table, name="struct stats")
    add = pq.read_table(result.path).column("add")
    fields = {f["name"]: f for f in json.loads(snap.metadata.schema_string)["fields"]}
    physical = {n: f["metadata"]["delta.columnMapping.physicalName"] for n, f in fields.items()}
    parsed_type = add.type.field("partitionValues_parsed").type
    assert [f.name for f in parsed_type] == [physical[c] for c in snap.partition_columns]
    assert pa.types.is_date32(parsed_type.field(physical["as_date"]).type)
    assert parsed_type.field(physical["as_big_decimal"]).type == pa.decimal128(1, 0)
    for row in add.to_pylist():
        if row is None:
            continue
        for column in snap.partition_columns:
            raw = row["partitionValues"]
            raw = dict(raw).get(physical[column])
            want = parse_partition_value(raw, fields[column]["type"])
            assert row["partitionValues_parsed"][physical[column]] == want, (column, raw)
        stats = json.loads(row["stats"])
        assert row["stats_parsed"]["numRecords"] == stats["numRecords"]
        assert row["stats_parsed"]["nullCount"] == stats["nullCount"]  # keyed by physical names


def test_struct_stats_of_every_stats_type(tmp_path: Path) -> None:
    import datetime as dt
    from decimal import Decimal

    path = tmp_path / "t"
    data = pa.table(
        {
            "i": pa.array([1, 5], pa.int32()),
            "s": ["b", "a"],
            "ts": pa.array([dt.datetime(2021, 1, 1, 12), dt.datetime(2022, 2, 2)], pa.timestamp("us", tz="UTC")),
            "d": pa.array([dt.date(2020, 1, 1), dt.date(2020, 3, 1)]),
            "dec": pa.array([Decimal("1.50"), Decimal("-2.25")], pa.decimal128(10, 2)),
            "flag": [True, None],
            "nested": pa.array([{"x": 1.5}, {"x": None}]),
            "part": ["p", "p"],
        }
    )
    conf = {"delta.checkpoint.writeStatsAsStruct": "true", "delta.checkpoint.writeStatsAsJson": "false"}
    write_deltalake(str(path), data, partition_by=["part"], configuration=conf)
    write_deltalake(str(path), data.slice(0, 1), partition_by=["part"], mode="append")
    result = check_write_then_read(path, name="stats types")
    add = pq.read_table(result.path).column("add")
    assert "stats" not in [f.name for f in add.type]  # writeStatsAsJson=false
    parsed = [r["stats_parsed"] for r in add.to_pylist() if r is not None]
    first = next(p for p in parsed if p["numRecords"] == 2)
    assert first["minValues"] == {
        "i": 1,
        "s": "a",
        "ts": dt.datetime(2021, 1, 1, 12, tzinfo=dt.UTC),
        "d": dt.date(2020, 1, 1),
        "dec": Decimal("-2.25"),
        "nested": {"x": 1.5},
    }
    assert first["nullCount"] == {"i": 0, "s": 0, "ts": 0, "d": 0, "dec": 0, "flag": 1, "nested": {"x": 1}}
    assert "flag" not in add.type.field("stats_parsed").type.field("minValues").type.names  # no min/max for booleans


def test_retention_drops_expired_tombstones_and_txns(tmp_path: Path) -> None:
    path = tmp_path / "t"
    rows = pa.table({"id": [1, 2, 3], "part": ["a", "b", "c"]})
    conf = {"delta.setTransactionRetentionDuration": "interval 1 days"}
    write_deltalake(str(path), rows, partition_by=["part"], configuration=conf)
    props = CommitProperties(app_transactions=[Transaction("app", 7, 1_000), Transaction("fresh", 1, 10**13)])
    write_deltalake(str(path), rows, partition_by=["part"], mode="append", commit_properties=props)
    DeltaTable(str(path)).delete("part = 'a'")
    log = DeltaLog(str(path))
    removed = [t.deletion_timestamp for t in log.update().tombstones(include_expired=True)]
    assert len(removed) == 2 and all(removed)
    kept = write_checkpoint(log, clock=lambda: max(removed))
    assert (kept.num_tombstones, kept.num_actions) == (2, 2 + 4 + 2 + 1)  # P, M, 4 files, 2 tombstones, 1 txn
    txns = [r["appId"] for r in pq.read_table(kept.path).column("txn").to_pylist() if r]
    assert txns == ["fresh"]  # lastUpdated 1000 is more than a day before the clock
    shutil.rmtree(path / "_delta_log" / "_sidecars", ignore_errors=True)
    Path(kept.path).unlink()
    expired = write_checkpoint(DeltaLog(str(path)), clock=lambda: max(removed) + 8 * 86_400_000)
    assert (
        expired.num_tombstones == 0 and pq.read_table(expired.path).column("remove").null_count == expired.num_actions
    )


def _small_table(path: Path, commits: int = 4) -> Path:
    for i in range(commits):
        write_deltalake(str(path), pa.table({"id": [i], "part": [f"p{i % 2}"]}), partition_by=["part"], mode="append")
    return path


def test_last_checkpoint_never_moves_back_and_replaces_a_bad_hint(tmp_path: Path) -> None:
    table = _small_table(tmp_path / "t")
    hint_path = table / "_delta_log" / "_last_checkpoint"
    hint_path.write_bytes(b"{not json")
    latest = write_checkpoint(DeltaLog(str(table)))
    assert latest.last_checkpoint_updated and parse_last_checkpoint(hint_path.read_bytes()).version == 3
    older = write_checkpoint(DeltaLog(str(table)), version=1)
    assert older.written and not older.last_checkpoint_updated
    hint = parse_last_checkpoint(hint_path.read_bytes())
    assert (hint.version, hint.num_of_add_files, hint.size_in_bytes) == (3, 4, latest.size_in_bytes)


def test_existing_classic_checkpoint_is_kept_not_rewritten(tmp_path: Path) -> None:
    table = _small_table(tmp_path / "t")
    DeltaTable(str(table)).create_checkpoint()
    [existing] = checkpoint_files(table, 3)
    before = (existing.read_bytes(), existing.stat().st_mtime_ns)
    result = write_checkpoint(DeltaLog(str(table)))
    assert not result.written and not result.last_checkpoint_updated and result.path == str(existing)
    assert (existing.read_bytes(), existing.stat().st_mtime_ns) == before


# -- 5. crashes ------------------------------------------------------------------------------------------

CRASH_WRITER = """
import sys
from airflow_delta_provider.delta import DeltaLog
from airflow_delta_provider.delta.maintenance.checkpoint import write_checkpoint
from airflow_delta_provider.delta.storage import LocalLogStore
from support.faults import KillingStore
store = KillingStore(LocalLogStore(), sys.argv[3])
write_checkpoint(DeltaLog(sys.argv[1], store=store), actions_per_sidecar=int(sys.argv[2]))
"""


@pytest.fixture(scope="module")
def v1_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Partitioned, with tombstones and an app transaction."""
    path = _small_table(tmp_path_factory.mktemp("crash") / "t", commits=3)
    props = CommitProperties(app_transactions=[Transaction("stream", 5, 10**13)])
    write_deltalake(
        str(path), pa.table({"id": [9], "part": ["p9"]}), partition_by=["part"], mode="append", commit_properties=props
    )
    DeltaTable(str(path)).delete("id = 0")
    return path


@pytest.mark.parametrize(
    ("kind", "step", "left_behind"),
    [
        ("v1", "before_write", None),
        ("v1", "temp_file_half_written", ".tmp"),
        ("v1", "after_checkpoint_file", "00000000000000000004.checkpoint.parquet"),
        ("v1", "after_last_checkpoint", "00000000000000000004.checkpoint.parquet"),
        ("v2", "sidecars_written", "_sidecars"),
        ("v2", "temp_file_half_written", ".tmp"),
        ("v2", "after_checkpoint_file", ".parquet"),
    ],
)
def test_writer_killed_at_each_step_leaves_a_readable_table(
    kind: str, step: str, left_behind: str | None, v1_base: Path, tmp_path: Path
) -> None:
    if kind == "v1":
        table = tmp_path / "t"
        shutil.copytree(v1_base, table)
    else:
        table = copy_table("delta-rs/checkpoint-v2-table", tmp_path)
    before = state(fresh(table))
    rs_before = deltars(table, sorted(before["txns"]))
    files = listing(table)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])}
    proc = subprocess.run([sys.executable, "-c", CRASH_WRITER, str(table), "3", step], env=env, capture_output=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    new = sorted(set(listing(table)) - set(files))
    if left_behind is None:
        assert new == []
    else:
        assert any(left_behind in n for n in new), new
    assert state(fresh(table)) == before
    assert deltars(table, sorted(before["txns"])) == rs_before
    # and the next attempt finishes the job (a classic file already published is kept as it is)
    again = write_checkpoint(DeltaLog(str(table), clock=clock))
    assert again.written == (kind == "v2" or step in ("before_write", "temp_file_half_written"))
    assert state(fresh(table)) == before and deltars(table, sorted(before["txns"])) == rs_before


# -- 6. refusals and verification ------------------------------------------------------------------------


class ReadOnlyStore:
    """A store with the read verbs only (what a read-only deployment or credential gives)."""

    def __init__(self) -> None:
        self._local = LocalLogStore()

    def __getattr__(self, name: str) -> Any:
        if name in ("put", "put_if_absent", "delete_many", "atomic_put_if_absent"):
            raise AttributeError(name)
        return getattr(self._local, name)


def test_read_only_store_is_refused_before_writing(tmp_path: Path) -> None:
    table = _small_table(tmp_path / "t", commits=2)
    files = listing(table)
    with pytest.raises(UnsupportedStoreError, match="read-only") as info:
        write_checkpoint(DeltaLog(str(table), store=ReadOnlyStore()))
    assert str(table) in str(info.value)
    assert listing(table) == files


def _commit_protocol(table: Path, version: int, protocol: dict[str, Any]) -> None:
    line = json.dumps({"protocol": protocol})
    (table / "_delta_log" / f"{version:020d}.json").write_text(line + "\n")


def test_unknown_writer_feature_is_refused_before_writing(tmp_path: Path) -> None:
    table = _small_table(tmp_path / "t", commits=2)
    _commit_protocol(table, 2, {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": [],
                                "writerFeatures": ["appendOnly", "someFutureFeature"]})  # fmt: skip
    files = listing(table)
    with pytest.raises(UnsupportedFeatureError) as info:
        write_checkpoint(DeltaLog(str(table)))
    assert info.value.feature == "someFutureFeature" and info.value.version == 2
    assert listing(table) == files


def test_catalog_managed_table_is_refused_before_writing(tmp_path: Path) -> None:
    table = copy_table("delta-kernel-java/catalog-owned-preview", tmp_path)
    files = listing(table)
    with pytest.raises(UnsupportedFeatureError) as info:  # refused while loading: it cannot even be read here
        write_checkpoint(DeltaLog(str(table)))
    assert info.value.feature in {"catalogManaged", "catalogOwned", "catalogOwned-preview"}
    assert listing(table) == files
    # a protocol naming the feature for writers only is refused by the writer check itself
    other = _small_table(tmp_path / "t", commits=2)
    _commit_protocol(other, 2, {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": [],
                                "writerFeatures": ["catalogManaged"]})  # fmt: skip
    files = listing(other)
    with pytest.raises(OperationNotAllowedError, match="catalog-managed"):
        write_checkpoint(DeltaLog(str(other)))
    assert listing(other) == files


class BitRotStore(LocalLogStore):
    """Fault injection (no real store misbehaves on cue): checkpoint files are stored with one byte
    changed, as a torn or mixed upload would leave them (delta-rs #4433)."""

    def put_if_absent(self, path: str, data: bytes) -> None:
        if ".checkpoint." in os.path.basename(path):
            data = data[:100] + bytes([data[100] ^ 0xFF]) + data[101:]
        super().put_if_absent(path, data)


def test_checkpoint_stored_wrong_is_caught_and_removed(tmp_path: Path) -> None:
    table = copy_table("delta-rs/checkpoint-v2-table", tmp_path)
    files, hint = listing(table), (table / "_delta_log" / "_last_checkpoint").read_bytes()
    with pytest.raises(CheckpointMismatchError, match="bytes of") as info:
        write_checkpoint(DeltaLog(str(table), store=BitRotStore()), actions_per_sidecar=3)
    assert info.value.version == 9 and str(table) in str(info.value)
    assert listing(table) == files  # sidecars and top-level file deleted again
    assert (table / "_delta_log" / "_last_checkpoint").read_bytes() == hint


def test_verification_compares_every_action_with_the_replay(tmp_path: Path) -> None:
    table = _small_table(tmp_path / "t")
    snap = fresh(table)
    result = write_checkpoint(snap)
    plan = cp.plan_checkpoint(snap.protocol, snap.metadata, version=snap.version, now_ms=NOW)
    kept = kept_tombstones(snap.remove_files_table, plan)
    content = local_cp._Content(cp._non_file_actions(snap, plan), snap.add_files_table, kept)
    local_cp._verify(snap, LocalLogStore(), result.path, plan, content)  # what was written matches
    sizes = pa.array([s + 1 for s in content.adds.column("size").to_pylist()], pa.int64())
    content.adds = content.adds.set_column(content.adds.schema.get_field_index("size"), "size", sizes)
    with pytest.raises(CheckpointMismatchError, match=r"add\.size"):
        local_cp._verify(snap, LocalLogStore(), result.path, plan, content)
