"""The physical schema of a data file, and the check of a written file's footer against the table schema.

`check_file_schema` runs before a rewritten file is stored, so a writer fault is a `SchemaMismatchError`
naming the field path, not a version other readers cannot read. Through nested structs, arrays, maps and
variants it checks presence (partition columns may be left out), physical names and field ids under column
mapping, primitive types, and nullability: optional where the schema says NOT NULL is allowed (Spark's
`asNullable`), required where nulls are allowed is not. A variant is a struct of a required `value` and
`metadata` binary (PROTOCOL.md "Variant Data Type"); a shredded one (`typed_value`, PROTOCOL.md "Variant
Shredding") only where the table enables shredding.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import pyarrow as pa

from ..errors import SchemaMismatchError
from ..protocol.schema import COLUMN_ID_KEY, StructField, StructType

#: Delta's primitive types as delta-rs and the kernels' Arrow conversion write them: `timestamp` is INT64
#: microseconds adjusted to UTC, `timestamp_ntz` INT64 microseconds not adjusted (never INT96).
PRIMITIVE_TYPES: Mapping[str, pa.DataType] = {
    "byte": pa.int8(),
    "short": pa.int16(),
    "integer": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "binary": pa.binary(),
    "boolean": pa.bool_(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
}
#: An unshredded `variant` as Spark writes it: a struct of its encoded value and metadata, both required
#: (the variant column itself is as nullable as any other field); a shredded one is kept as the file has it.
VARIANT_TYPE = pa.struct([pa.field("value", pa.binary(), False), pa.field("metadata", pa.binary(), False)])
#: The Arrow field metadata key pyarrow reads and writes Parquet field ids under.
FIELD_ID_KEY = b"PARQUET:field_id"
#: The table property that lets writers shred variants (PROTOCOL.md "Writer Requirements for Variant Shredding").
ENABLE_VARIANT_SHREDDING = "delta.enableVariantShredding"
_DECIMAL = re.compile(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)")
#: How many mismatches an error lists (the first is its `field_path`).
_LISTED = 5

DeltaType = str | Mapping[str, Any]


def primitive_arrow_type(delta_type: str) -> pa.DataType | None:
    """The Arrow type of a primitive Delta type, decimals included (None for any other name)."""
    m = _DECIMAL.fullmatch(delta_type)
    return pa.decimal128(int(m[1]), int(m[2])) if m else PRIMITIVE_TYPES.get(delta_type)


def variant_fields(type_: pa.DataType) -> dict[str, pa.Field] | None:
    """A variant struct's fields by name but `_`-prefixed ones (PROTOCOL.md "Variant data in Parquet"); None
    when `type_` is not a struct."""
    if not pa.types.is_struct(type_):
        return None
    return {f.name: f for f in type_ if not f.name.startswith("_")}


def shredding_allowed(configuration: Mapping[str, str | None]) -> bool:
    """Whether the table lets writers write shredded variants (`delta.enableVariantShredding=true`)."""
    return str(configuration.get(ENABLE_VARIANT_SHREDDING) or "").strip().lower() == "true"


def _field_id(field: pa.Field) -> str | None:
    return None if not field.metadata else (v.decode() if (v := field.metadata.get(FIELD_ID_KEY)) else None)


def _expected_id(field: StructField, mode: str) -> str | None:
    column_id = (field.metadata or {}).get(COLUMN_ID_KEY) if mode != "none" else None
    return None if column_id is None else str(column_id)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


class _Checker:
    """Walks the table schema and the file schema together, collecting (field path, reason) pairs."""

    def __init__(self, mode: str, allow_shredded_variants: bool) -> None:
        self.mode = mode
        self.allow_shredded = allow_shredded_variants
        self.found: list[tuple[str, str]] = []

    def fail(self, path: str, reason: str) -> None:
        self.found.append((path, reason))

    def struct(
        self, file_fields: Sequence[pa.Field], fields: Sequence[StructField], path: str, optional: Collection[str] = ()
    ) -> None:
        """A struct's (or the file's top-level) fields; `optional` names fields the file may leave out."""
        by_name = {f.name: f for f in file_fields}
        claimed: set[str] = set()
        for field in fields:
            at = _join(path, field.name)
            name = field.name if self.mode == "none" else field.physical_name
            expected_id = _expected_id(field, self.mode)
            got = by_name.get(name)
            if got is None:
                if field.name in optional:
                    continue
                other = next(  # the field under another name: its logical one, or its field id
                    (
                        f
                        for f in file_fields
                        if f.name not in claimed
                        and f.name != name
                        and (f.name == field.name or (expected_id is not None and _field_id(f) == expected_id))
                    ),
                    None,
                )
                if other is None:
                    self.fail(at, f"is missing from the file (expected a field named {name!r})")
                else:
                    claimed.add(other.name)
                    self.fail(at, f"is named {other.name!r} in the file, not its physical name {name!r}")
                continue
            claimed.add(name)
            actual_id = _field_id(got)
            if actual_id != expected_id:
                want = "no Parquet field id" if expected_id is None else f"Parquet field id {expected_id}"
                has = "no field id" if actual_id is None else f"field id {actual_id}"
                self.fail(at, f"has {has} in the file where the table's column mapping needs {want}")
            if not got.nullable and field.nullable:
                self.fail(at, "is required in the file but nullable in the table")
            self.type(got.type, field.type, at)
        for f in file_fields:
            if f.name not in claimed:
                self.fail(_join(path, f.name), "is in the file but not in the table schema")

    def type(self, got: pa.DataType, delta_type: DeltaType, path: str) -> None:
        if delta_type == "variant":
            self.variant(got, path)
            return
        if isinstance(delta_type, str):
            expected = primitive_arrow_type(delta_type)
            if expected is not None and got != expected:  # a type this writer does not know is kept as read
                self.fail(path, f"is {got} in the file, not {expected} (Delta type {delta_type})")
            return
        kind = delta_type.get("type")
        if kind == "struct":
            if not pa.types.is_struct(got):
                self.fail(path, f"is {got} in the file, not a struct")
                return
            self.struct(list(got), StructType.from_json(delta_type).fields, path)
        elif kind == "array":
            if not (pa.types.is_list(got) or pa.types.is_large_list(got)):
                self.fail(path, f"is {got} in the file, not a list")
                return
            contains_null = delta_type.get("containsNull", True)
            self.element(got.value_field, delta_type["elementType"], contains_null, f"{path}.element")
        elif kind == "map":
            if not pa.types.is_map(got):
                self.fail(path, f"is {got} in the file, not a map")
                return
            if got.key_field.nullable:
                self.fail(f"{path}.key", "is nullable in the file, but a map's keys are required")
            self.type(got.key_field.type, delta_type["keyType"], f"{path}.key")
            contains_null = delta_type.get("valueContainsNull", True)
            self.element(got.item_field, delta_type["valueType"], contains_null, f"{path}.value")

    def element(self, got: pa.Field, delta_type: DeltaType, contains_null: bool, path: str) -> None:
        """An array's element or a map's value (found by position: Delta gives it no name, id or metadata)."""
        if not got.nullable and contains_null:
            self.fail(path, "is required in the file but may be null in the table")
        self.type(got.type, delta_type, path)

    def variant(self, got: pa.DataType, path: str) -> None:
        fields = variant_fields(got)
        if fields is None:
            self.fail(path, f"is {got} in the file, not a variant's struct of value and metadata")
            return
        if "typed_value" in fields:
            if not self.allow_shredded:
                self.fail(path, f"is a shredded variant, which the table does not allow ({ENABLE_VARIANT_SHREDDING})")
            required, allowed = ("metadata",), {"metadata", "value", "typed_value"}
        else:
            required, allowed = ("value", "metadata"), {"value", "metadata"}
        for name in required:
            f = fields.get(name)
            if f is None:
                self.fail(f"{path}.{name}", "is missing from the variant's struct in the file")
            elif f.nullable:
                self.fail(f"{path}.{name}", "is nullable in the file, but a variant's value and metadata are required")
        for name, f in fields.items():
            if name not in allowed:
                self.fail(f"{path}.{name}", "is in the variant's struct in the file but not a variant field")
            elif name != "typed_value" and not (pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type)):
                self.fail(f"{path}.{name}", f"is {f.type} in the file, not binary")


def schema_mismatches(
    file_schema: pa.Schema,
    schema: StructType,
    *,
    column_mapping_mode: str = "none",
    partition_columns: Collection[str] = (),
    allow_shredded_variants: bool = False,
) -> list[tuple[str, str]]:
    """Each way `file_schema` differs from the table's `schema`, as (logical field path, reason)."""
    checker = _Checker(column_mapping_mode, allow_shredded_variants)
    checker.struct(list(file_schema), schema.fields, "", optional=set(partition_columns))
    return checker.found


def check_file_schema(
    file_schema: pa.Schema,
    schema: StructType,
    *,
    table: str | None = None,
    version: int | None = None,
    file: str | None = None,
    note: str = "",
    **options: Any,
) -> None:
    """Raise `SchemaMismatchError` (first field path at fault, plus `note`) unless `file_schema` holds `schema`
    (`options`: those of `schema_mismatches`)."""
    found = schema_mismatches(file_schema, schema, **options)
    if not found:
        return
    listed = "; ".join(f"field {p} {r}" for p, r in found[:_LISTED])
    more = f" (and {len(found) - _LISTED} more)" if len(found) > _LISTED else ""
    raise SchemaMismatchError(
        f"The data file does not match the table schema: {listed}{more}{note}",
        field_path=found[0][0],
        table=table,
        version=version,
        file=file,
    )
