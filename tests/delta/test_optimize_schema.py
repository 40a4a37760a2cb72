"""OPTIMIZE on variant tables, and the check of every rewritten file's schema against the table's (issue 28).

A variant is written as Spark writes it: a struct of a required `value` and a required `metadata` binary
(PROTOCOL.md "Variant Data Type"; delta-rs's Delta -> Arrow conversion says the same). Before the fix the
rewrite made both children nullable, and delta-rs could no longer read the latest version ("field
'metadata' of type binary has nulls"). The oracle is delta-rs reading the table before and after, and time
travel to the version before; for the tables delta-rs refuses (`variantShredding-preview`), our reader,
file by file through the deletion vectors.

The schema check (`write.file_schema`) is tested over values, then end to end by fault injection: once the
writer is fixed it produces no mismatch, so the tests break the writer's Arrow mapping on purpose and
check that the error names the file and the field path and that nothing is committed.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

deltalake = pytest.importorskip("deltalake")
from conftest import CORPUS, copy_table  # noqa: E402
from deltalake import DeltaTable  # noqa: E402
from test_optimize import listing  # noqa: E402

from airflow_delta_provider.delta.delta_log import DeltaLog  # noqa: E402
from airflow_delta_provider.delta.errors import (  # noqa: E402
    DeltaError,
    LogCorruptedError,
    SchemaMismatchError,
    error_from_dict,
)
from airflow_delta_provider.delta.maintenance.optimize import optimize  # noqa: E402
from airflow_delta_provider.delta.protocol.actions import AddFile, decode_path  # noqa: E402
from airflow_delta_provider.delta.protocol.schema import COLUMN_ID_KEY, PHYSICAL_NAME_KEY, StructType  # noqa: E402
from airflow_delta_provider.delta.read.deletion_vectors import read_data_file  # noqa: E402
from airflow_delta_provider.delta.write import data_files  # noqa: E402
from airflow_delta_provider.delta.write.file_schema import (  # noqa: E402
    FIELD_ID_KEY,
    VARIANT_TYPE,
    check_file_schema,
    schema_mismatches,
)

#: variantType(-preview) tables delta-rs reads: OPTIMIZE, then delta-rs reads the same rows.
DELTARS_READABLE = ["delta-golden/spark-variant-checkpoint", "delta-rs/spark-variant-checkpoint"]
#: variantShredding-preview tables (delta-rs refuses them): our reader is the oracle. The first holds
#: unshredded files, the others shredded variants (top level, in a struct) and deletion vectors.
SHREDDING_TABLES = [
    "delta-rs/spark-shredded-variant-preview-delta",
    "delta-spark/variant-stats-nested-no-checkpoint",
    "delta-spark/variant-stats-with-struct-no-checkpoint",
]


def log_files(path: Path) -> set[str]:
    return {p.name for p in (path / "_delta_log").iterdir()}


def deltars_rows(path: Path, version: int | None = None) -> Counter[str]:
    table = DeltaTable(str(path), version=version).to_pyarrow_table()
    return Counter(json.dumps(r, default=repr, sort_keys=True) for r in table.to_pylist())


def our_rows(path: Path, version: int | None = None) -> Counter[str]:
    """The rows as our reader gives them, file by file through the deletion vectors."""
    DeltaLog.clear_cache()
    log = DeltaLog(str(path))
    snap = log.update() if version is None else log.snapshot_at(version)
    out: Counter[str] = Counter()
    for add in snap.all_files():
        for row in read_data_file(log.store, log.table_uri, add).to_pylist():
            out[json.dumps(row, default=repr, sort_keys=True)] += 1
    return out


def variant_leaves(t: pa.DataType, path: str = "") -> dict[str, pa.DataType]:
    """Each variant-shaped struct (holding `metadata`) under `t`, by path."""
    out: dict[str, pa.DataType] = {}
    if pa.types.is_struct(t):
        if {f.name for f in t} >= {"metadata", "value"}:
            return {path: t}
        for f in t:
            out |= variant_leaves(f.type, f"{path}.{f.name}" if path else f.name)
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        out |= variant_leaves(t.value_type, f"{path}.element")
    elif pa.types.is_map(t):
        out |= variant_leaves(t.item_type, f"{path}.value")
    return out


# -- (a) the variant corpus tables --------------------------------------------------------------------------
@pytest.mark.parametrize("name", DELTARS_READABLE)
def test_optimize_variant_table_is_read_by_deltars(tmp_path: Path, name: str) -> None:
    """Failed before the fix: delta-rs could not read the version OPTIMIZE committed."""
    path = copy_table(name, tmp_path)
    before_version = DeltaTable(str(path)).version()
    before = deltars_rows(path)
    result = optimize(str(path), target_size=1024**3)
    assert result.version == before_version + 1 == DeltaTable(str(path)).version()
    assert len(result.added) == 1 and len(result.removed) > 1
    assert deltars_rows(path) == before
    assert deltars_rows(path, before_version) == before  # time travel to the replaced files
    assert our_rows(path) == our_rows(path, before_version)
    written = pq.read_schema(path / decode_path(result.added[0].path))
    leaves = {p: t for f in written for p, t in variant_leaves(f.type, f.name).items()}
    assert len(leaves) == 6  # v, in an array, a struct, a map, an array of structs, a struct of arrays
    for p, t in leaves.items():
        assert [(f.name, f.type, f.nullable) for f in t] == [
            ("value", pa.binary(), False),
            ("metadata", pa.binary(), False),
        ], p


@pytest.mark.parametrize("name", SHREDDING_TABLES)
def test_optimize_variant_shredding_tables_keep_rows_and_layout(tmp_path: Path, name: str) -> None:
    """The table enables shredding (`delta.enableVariantShredding=true`): a shredded variant is rewritten as
    the file has it (its `typed_value` kept), an unshredded one as Spark's required (value, metadata)."""
    path = copy_table(name, tmp_path)
    snap = DeltaLog(str(path)).update()
    assert snap.metadata.configuration.get("delta.enableVariantShredding") == "true"
    inputs = {
        p: t
        for add in snap.all_files()
        for f in pq.read_schema(path / decode_path(add.path))
        for p, t in variant_leaves(f.type, f.name).items()
    }
    before = our_rows(path)
    result = optimize(str(path), target_size=1024**3)
    assert result.version == snap.version + 1
    assert our_rows(path) == before
    assert our_rows(path, snap.version) == before
    for add in result.added:
        leaves = {
            p: t
            for f in pq.read_schema(path / decode_path(add.path))
            for p, t in variant_leaves(f.type, f.name).items()
        }
        assert set(leaves) == set(inputs)
        for p, t in leaves.items():
            assert not t.field("metadata").nullable, p
            assert ("typed_value" in t.names) == ("typed_value" in inputs[p].names), p


def test_variant_table_without_its_data_files_is_a_typed_error_and_commits_nothing(tmp_path: Path) -> None:
    """`delta-rs/spark-variant-stable-feature-checkpoint` ships its log only (its data files are not in the
    corpus): OPTIMIZE cannot be run on it, only refused."""
    name = "delta-rs/spark-variant-stable-feature-checkpoint"
    assert not list((CORPUS / name).glob("*.parquet"))
    path = copy_table(name, tmp_path)
    before = log_files(path)
    with pytest.raises(LogCorruptedError, match="missing"):
        optimize(str(path))
    assert log_files(path) == before


def test_null_and_missing_variants_are_written_with_required_children(tmp_path: Path) -> None:
    """A file (as Spark writes one) whose top-level variant and struct of variants are null in some rows,
    and which lacks the other variant columns (as after schema evolution): the rewrite writes the nulls
    under a null parent, never in the required children, and delta-rs reads the rows back."""
    path = copy_table("delta-golden/spark-variant-checkpoint", tmp_path)
    variant = pa.struct([pa.field("value", pa.binary(), False), pa.field("metadata", pa.binary(), False)])
    value, metadata = b"\x0c\x05", b"\x01\x00\x00"  # the variant int8 5, empty dictionary
    v = pa.StructArray.from_arrays(
        [pa.array([value, b"", value]), pa.array([metadata, b"", metadata])],
        fields=list(variant),
        mask=pa.array([False, True, False]),
    )
    s = pa.StructArray.from_arrays([v], fields=[pa.field("v", variant)], mask=pa.array([True, False, False]))
    data = pa.table({"id": pa.array([1000, 1001, 1002], pa.int64()), "v": v, "struct_of_variants": s})
    pq.write_table(data, path / "foreign.parquet")
    add = AddFile("foreign.parquet", {}, (path / "foreign.parquet").stat().st_size, 0, True, '{"numRecords":3}')
    DeltaLog(str(path)).update().transaction("WRITE").add(add).commit()
    before = deltars_rows(path)
    result = optimize(str(path), target_size=1024**3)
    assert result.version is not None
    assert deltars_rows(path) == before
    got = {r["id"]: r for r in DeltaTable(str(path)).to_pyarrow_table().to_pylist() if r["id"] >= 1000}
    assert got[1001]["v"] is None and got[1000]["struct_of_variants"] is None
    assert got[1000]["v"] == {"value": value, "metadata": metadata} and got[1000]["array_of_variants"] is None


# -- (b) the check over values -----------------------------------------------------------------------------
def _schema(*fields: dict[str, Any]) -> StructType:
    return StructType.from_json({"type": "struct", "fields": list(fields)})


def _f(name: str, type_: Any, nullable: bool = True, **metadata: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, "nullable": nullable, "metadata": metadata}


def _mapped(name: str, type_: Any, column_id: int, nullable: bool = True) -> dict[str, Any]:
    return _f(name, type_, nullable, **{COLUMN_ID_KEY: column_id, PHYSICAL_NAME_KEY: f"col-{name}"})


def _id(field_id: int) -> dict[bytes, bytes]:
    return {FIELD_ID_KEY: str(field_id).encode()}


NULLABLE_VARIANT = pa.struct([("value", pa.binary()), ("metadata", pa.binary())])  # the writer before the fix
VARIANTS = _schema(
    _f("id", "long"),
    _f("v", "variant"),
    _f("s", {"type": "struct", "fields": [_f("v", "variant")]}),
    _f("a", {"type": "array", "elementType": "variant", "containsNull": True}),
    _f("m", {"type": "map", "keyType": "string", "valueType": "variant", "valueContainsNull": True}),
)


def _variant_file(variant: pa.DataType) -> pa.Schema:
    return pa.schema(
        [
            ("id", pa.int64()),
            ("v", variant),
            ("s", pa.struct([("v", variant)])),
            ("a", pa.list_(pa.field("element", variant))),
            ("m", pa.map_(pa.field("key", pa.string(), False), pa.field("value", variant))),
        ]
    )


def test_the_fixed_variant_mapping_holds_the_schema() -> None:
    assert VARIANT_TYPE == pa.struct([pa.field("value", pa.binary(), False), pa.field("metadata", pa.binary(), False)])
    assert schema_mismatches(_variant_file(VARIANT_TYPE), VARIANTS) == []
    arrow = pa.schema(deltalake.Schema.from_json(json.dumps(VARIANTS.to_json())).to_arrow())
    assert [(f.name, f.type, f.nullable) for f in arrow.field("v").type] == [
        ("metadata", pa.binary(), False),  # delta-rs's own mapping: the same fields, required (order aside)
        ("value", pa.binary(), False),
    ]


def test_nullable_variant_children_are_a_typed_error_naming_each_path() -> None:
    with pytest.raises(SchemaMismatchError) as info:
        check_file_schema(_variant_file(NULLABLE_VARIANT), VARIANTS, table="t", version=3, file="part-0.parquet")
    err = info.value
    assert err.field_path == "v.value"
    assert (err.table, err.version, err.file) == ("t", 3, "part-0.parquet")
    assert "table=t, version=3, file=part-0.parquet" in str(err)
    paths = [p for p, _ in schema_mismatches(_variant_file(NULLABLE_VARIANT), VARIANTS)]
    assert paths == [f"{p}.{c}" for p in ("v", "s.v", "a.element", "m.value") for c in ("value", "metadata")]
    assert "and 3 more" in str(err)
    restored = error_from_dict(err.to_dict())  # the job's JSON result and the Spark executor path
    assert isinstance(restored, SchemaMismatchError) and isinstance(restored, DeltaError)
    assert restored.field_path == "v.value"


def test_required_and_missing_fields() -> None:
    schema = _schema(
        _f("s", {"type": "struct", "fields": [_f("x", "long"), _f("y", "string", nullable=False)]}),
        _f("m", {"type": "map", "keyType": "string", "valueType": "long", "valueContainsNull": True}),
        _f("n", "integer", nullable=False),
    )
    good = pa.schema(
        [
            ("s", pa.struct([("x", pa.int64()), ("y", pa.string())])),  # optional where NOT NULL: as Spark writes
            ("m", pa.map_(pa.field("key", pa.string(), False), pa.field("value", pa.int64()))),
            ("n", pa.int32()),
        ]
    )
    assert schema_mismatches(good, schema) == []
    missing = good.set(0, pa.field("s", pa.struct([("x", pa.int64())])))
    assert schema_mismatches(missing, schema) == [("s.y", "is missing from the file (expected a field named 'y')")]
    required = good.set(0, pa.field("s", pa.struct([pa.field("x", pa.int64(), False), ("y", pa.string())])))
    assert schema_mismatches(required, schema) == [("s.x", "is required in the file but nullable in the table")]
    not_null_values = good.set(
        1, pa.field("m", pa.map_(pa.field("key", pa.string(), False), pa.field("value", pa.int64(), False)))
    )
    assert [p for p, _ in schema_mismatches(not_null_values, schema)] == ["m.value"]
    extra = good.append(pa.field("z", pa.int8()))
    assert schema_mismatches(extra, schema) == [("z", "is in the file but not in the table schema")]
    wrong_type = good.set(2, pa.field("n", pa.int64()))
    assert [p for p, _ in schema_mismatches(wrong_type, schema)] == ["n"]
    with pytest.raises(SchemaMismatchError, match=r"field s\.y is missing") as info:
        check_file_schema(missing, schema, table="t", version=0, file="f.parquet")
    assert info.value.field_path == "s.y"


def test_partition_columns_may_be_left_out() -> None:
    schema = _schema(_f("p", "string"), _f("x", "long"))
    assert schema_mismatches(pa.schema([("x", pa.int64())]), schema, partition_columns=["p"]) == []
    assert [p for p, _ in schema_mismatches(pa.schema([("x", pa.int64())]), schema)] == ["p"]


def test_field_ids_and_physical_names_under_column_mapping() -> None:
    schema = _schema(
        _mapped("c", "long", 1),
        _mapped("s", {"type": "struct", "fields": [_mapped("x", "string", 3)]}, 2),
        _mapped(
            "a",
            {
                "type": "array",
                "elementType": {"type": "struct", "fields": [_mapped("y", "long", 5)]},
                "containsNull": True,
            },
            4,
        ),
    )
    element = pa.struct([pa.field("col-y", pa.int64(), metadata=_id(5))])

    def file(c: pa.Field, x: pa.Field, y: pa.Field | None = None) -> pa.Schema:
        return pa.schema(
            [
                c,
                pa.field("col-s", pa.struct([x]), metadata=_id(2)),
                pa.field("col-a", pa.list_(pa.field("element", pa.struct([y]) if y else element)), metadata=_id(4)),
            ]
        )

    c, x = pa.field("col-c", pa.int64(), metadata=_id(1)), pa.field("col-x", pa.string(), metadata=_id(3))
    for mode in ("id", "name"):
        assert schema_mismatches(file(c, x), schema, column_mapping_mode=mode) == []
    wrong_id = schema_mismatches(file(c, x.with_metadata(_id(7))), schema, column_mapping_mode="id")
    assert wrong_id == [("s.x", "has field id 7 in the file where the table's column mapping needs Parquet field id 3")]
    nested_id = schema_mismatches(
        file(c, x, pa.field("col-y", pa.int64(), metadata=_id(9))), schema, column_mapping_mode="name"
    )
    assert [p for p, _ in nested_id] == ["a.element.y"]
    no_id = schema_mismatches(file(c.remove_metadata(), x), schema, column_mapping_mode="id")
    assert no_id == [("c", "has no field id in the file where the table's column mapping needs Parquet field id 1")]
    logical = schema_mismatches(file(c.with_name("c"), x), schema, column_mapping_mode="name")
    assert logical == [("c", "is named 'c' in the file, not its physical name 'col-c'")]
    renamed = schema_mismatches(file(c, x.with_name("other")), schema, column_mapping_mode="id")
    assert renamed == [("s.x", "is named 'other' in the file, not its physical name 'col-x'")]
    # without column mapping: logical names and no field ids
    plain = _schema(_f("c", "long"))
    assert schema_mismatches(pa.schema([pa.field("c", pa.int64())]), plain) == []
    assert [p for p, _ in schema_mismatches(pa.schema([pa.field("c", pa.int64(), metadata=_id(1))]), plain)] == ["c"]


def test_shredded_variants_only_where_the_table_enables_shredding() -> None:
    shredded = pa.struct(
        [
            pa.field("metadata", pa.binary(), False),
            ("value", pa.binary()),
            (
                "typed_value",
                pa.struct([pa.field("a", pa.struct([("value", pa.binary()), ("typed_value", pa.int64())]), False)]),
            ),
        ]
    )
    schema, file = _schema(_f("v", "variant")), pa.schema([("v", shredded)])
    assert schema_mismatches(file, schema, allow_shredded_variants=True) == []
    assert [p for p, _ in schema_mismatches(file, schema)] == ["v"]
    loose = pa.schema(
        [("v", pa.struct([("metadata", pa.binary()), ("value", pa.binary()), ("typed_value", pa.int64())]))]
    )
    assert [p for p, _ in schema_mismatches(loose, schema, allow_shredded_variants=True)] == ["v.metadata"]
    not_a_variant = pa.schema([("v", pa.struct([pa.field("value", pa.binary(), False)]))])
    assert [p for p, _ in schema_mismatches(not_a_variant, schema)] == ["v.metadata"]
    assert [p for p, _ in schema_mismatches(pa.schema([("v", pa.binary())]), schema)] == ["v"]


# -- (c) end to end: the check trips, nothing is committed ------------------------------------------------
def test_a_rewrite_with_nullable_variant_children_is_refused_and_commits_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fault injection: the writer is given back its old variant mapping (nullable `value` and `metadata`),
    because the fixed writer can no longer produce a mismatch. The check reads the new file's footer before
    it is stored: a typed error naming the table, version, file and field path; no commit, no new file."""
    path = copy_table("delta-golden/spark-variant-checkpoint", tmp_path)
    monkeypatch.setattr(data_files, "VARIANT_TYPE", NULLABLE_VARIANT)
    version = DeltaLog(str(path)).update().version
    before = listing(path)
    with pytest.raises(SchemaMismatchError) as info:
        optimize(str(path), target_size=1024**3)
    err = info.value
    assert err.field_path == "v.value" and "a variant's value and metadata are required" in str(err)
    assert err.version == version and err.table == DeltaLog(str(path)).table_uri
    assert err.file and err.file.startswith("part-") and err.file.endswith(".parquet") and err.file in str(err)
    assert "the file was not written" in str(err) and "left for VACUUM" in str(err)
    assert listing(path) == before  # no commit in _delta_log, no data file
    assert DeltaTable(str(path)).version() == version


@pytest.mark.parametrize(
    "name", ["delta-golden/dv-with-columnmapping", "delta-golden/data-reader-timestamp_ntz-id-mode"]
)
def test_a_rewrite_without_field_ids_is_refused_under_column_mapping(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """Fault injection: the writer's Arrow fields lose their Parquet field ids (the physical names stay),
    on a `name` mode table (5 bins, deletion vectors) and an `id` mode one. Nothing is committed and no
    new file is stored; the error names the file and the first field at fault."""
    path = copy_table(name, tmp_path)
    snap = DeltaLog(str(path)).update()
    assert snap.column_mapping_mode in ("id", "name")
    real = data_files.arrow_field
    monkeypatch.setattr(data_files, "arrow_field", lambda f, t, mode: real(f, t, mode).remove_metadata())
    before = listing(path)
    with pytest.raises(SchemaMismatchError, match="field id") as info:
        optimize(str(path), target_size=1024**3)
    err = info.value
    first = next(f for f in snap.schema.fields if f.name not in snap.partition_columns)
    assert err.field_path == first.name and err.version == snap.version
    assert err.file and err.file.endswith(".parquet") and err.file in str(err) and "left for VACUUM" in str(err)
    assert listing(path) == before  # no commit in _delta_log, no data file
    assert DeltaTable(str(path)).version() == snap.version
