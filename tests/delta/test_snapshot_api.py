"""Snapshot API details: typed partition values, writer checks, fsspec URIs, caching."""

from __future__ import annotations

import datetime as dt
import shutil
from decimal import Decimal

import fsspec
import pytest
from conftest import CORPUS

from airflow_delta_provider.delta import (
    DeltaLog,
    Metadata,
    OperationNotAllowedError,
    Protocol,
    UnsupportedFeatureError,
    check_can_write,
)


def test_partition_values_are_typed_by_schema():
    snap = DeltaLog(str(CORPUS / "delta-golden" / "data-reader-partition-values")).update()
    rows = [snap.partition_values(a) for a in snap.all_files()]
    typed = next(r for r in rows if r["as_int"] is not None)
    assert isinstance(typed["as_int"], int) and isinstance(typed["as_long"], int)
    assert isinstance(typed["as_boolean"], bool)
    assert isinstance(typed["as_date"], dt.date) and isinstance(typed["as_timestamp"], dt.datetime)
    assert isinstance(typed["as_big_decimal"], Decimal) and isinstance(typed["as_double"], float)
    assert typed["as_string_lit_null"] == "null"  # the string 'null' is a value, not a null
    assert typed["as_timestamp"] == dt.datetime(2021, 9, 8, 11, 11, 11, tzinfo=dt.UTC)
    nulls = [r for r in rows if r["as_int"] is None]
    assert nulls and all(v is None for v in nulls[0].values())


def test_partition_values_under_column_mapping_use_logical_names():
    snap = DeltaLog(str(CORPUS / "delta-kernel-java" / "data-reader-partition-values-column-mapping-name")).update()
    assert snap.column_mapping_mode == "name"
    values = [snap.partition_values(a) for a in snap.all_files()]
    assert all(set(v) == set(snap.partition_columns) for v in values)
    assert any(v["as_int"] is not None for v in values)  # found through the physical name


META = Metadata(id="t", schema_string='{"type":"struct","fields":[]}')


def test_check_can_write():
    check_can_write(Protocol(1, 2), META, ["vacuum", "checkpoint"])
    append_only = Metadata(id="t", schema_string=META.schema_string, configuration={"delta.appendOnly": "true"})
    check_can_write(Protocol(1, 2), append_only, ["checkpoint"])
    with pytest.raises(OperationNotAllowedError, match="appends"):
        check_can_write(Protocol(1, 2), append_only, ["remove"])
    vacuum_check = Protocol(3, 7, ("vacuumProtocolCheck",), ("vacuumProtocolCheck",))
    check_can_write(vacuum_check, META, ["vacuum"])
    with pytest.raises(UnsupportedFeatureError, match="someFutureFeature"):
        check_can_write(Protocol(3, 7, (), ("someFutureFeature",)), META, ["vacuum"])
    check_can_write(Protocol(3, 7, (), ("someFutureFeature",)), META, ["report"])  # reading is fine
    with pytest.raises(UnsupportedFeatureError):  # catalog-managed: not even readable from files
        check_can_write(Protocol(3, 7, ("catalogManaged",), ("catalogManaged",)), META, ["vacuum"])
    with pytest.raises(OperationNotAllowedError, match="catalog-managed"):
        check_can_write(Protocol(1, 7, None, ("catalogOwned-preview",)), META, ["cleanup"])
    with pytest.raises(ValueError):
        check_can_write(Protocol(1, 2), META, ["drop everything"])


def test_fsspec_memory_uri_matches_local():
    src = CORPUS / "delta-golden" / "dv-partitioned-with-checkpoint"
    fs = fsspec.filesystem("memory")
    for path in src.rglob("*"):
        if path.is_file():
            fs.pipe(f"/dvtable/{path.relative_to(src).as_posix()}", path.read_bytes())
    remote = DeltaLog.for_table("memory://dvtable").update()
    local = DeltaLog.for_table(str(src)).update()
    assert remote.version == local.version == 15
    assert sorted(a.path for a in remote.all_files()) == sorted(a.path for a in local.all_files())
    assert DeltaLog.for_table("memory://dvtable").latest_version() == 15
    assert [h["version"] for h in DeltaLog.for_table("memory://dvtable").history(2)] == [15, 14]


def test_for_table_caches_per_qualified_path(tmp_path):
    shutil.copytree(CORPUS / "delta-rs" / "simple_table", tmp_path / "t")
    a = DeltaLog.for_table(str(tmp_path / "t"))
    assert DeltaLog.for_table(f"file://{tmp_path}/t/") is a
    assert DeltaLog.for_table(str(tmp_path / "t"), storage_options={"x": "1"}) is not a
    DeltaLog.invalidate_cache(str(tmp_path / "t"))
    assert DeltaLog.for_table(str(tmp_path / "t")) is not a
