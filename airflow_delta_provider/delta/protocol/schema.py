"""The table schema (PROTOCOL.md "Schema Serialization Format") and typed partition values.

Partition values are strings in the log; they are typed here, lazily, by the partition column's type
(PROTOCOL.md "Partition Value Serialization"). With column mapping, `partitionValues` and stats are
keyed by the column's *physical* name.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from ..errors import InvalidArgumentError

PHYSICAL_NAME_KEY = "delta.columnMapping.physicalName"
COLUMN_ID_KEY = "delta.columnMapping.id"
#: A null partition value in a partition directory name, and in the partition keys reports print (Hive's
#: name; Spark `ExternalCatalogUtils.DEFAULT_PARTITION_NAME`).
HIVE_DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"


@dataclass(frozen=True, slots=True)
class StructField:
    """One top-level or nested field; `type` is a primitive name or a nested type dict."""

    name: str
    type: str | Mapping[str, Any]
    nullable: bool = True
    metadata: Mapping[str, Any] | None = None

    @property
    def physical_name(self) -> str:
        return str((self.metadata or {}).get(PHYSICAL_NAME_KEY) or self.name)

    @property
    def type_name(self) -> str:
        """`long`, `decimal(10,2)`, `struct`, `array`, `map`, ..."""
        return self.type if isinstance(self.type, str) else str(self.type.get("type"))

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "nullable": self.nullable, "metadata": dict(self.metadata or {})}


@dataclass(frozen=True, slots=True)
class StructType:
    fields: tuple[StructField, ...]

    @classmethod
    def from_json(cls, obj: Mapping[str, Any] | None) -> StructType:
        fields = [
            (str(f["name"]), f["type"], bool(f.get("nullable", True)), f.get("metadata") or {})
            for f in (obj or {}).get("fields") or ()
        ]
        return cls(tuple(StructField(*f) for f in fields))

    def to_json(self) -> dict[str, Any]:
        return {"type": "struct", "fields": [f.to_json() for f in self.fields]}

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    def field(self, name: str) -> StructField:
        """A top-level field by name (case-insensitive fallback, as Spark resolves columns)."""
        found = [f for f in self.fields if f.name == name] or [f for f in self.fields if f.name.lower() == name.lower()]
        if found:
            return found[0]
        raise InvalidArgumentError(f"No column {name!r} in the table schema (columns: {self.names})")

    def get(self, name: str) -> StructField | None:
        try:
            return self.field(name)
        except InvalidArgumentError:
            return None


def physical_partition_columns(
    schema: StructType, partition_columns: Sequence[str], column_mapping_mode: str
) -> dict[str, str]:
    """Logical partition column -> its key in `partitionValues` and its directory name: the column's
    physical name under column mapping (`column_mapping_mode` "id" or "name"), else the column itself."""
    fields = {c: None if column_mapping_mode == "none" else schema.get(c) for c in partition_columns}
    return {c: c if f is None else f.physical_name for c, f in fields.items()}


def parse_timestamp(text: str) -> dt.datetime:
    """ISO-8601 text (`Z` for UTC, `T` or a space before the time) as a datetime, naive without an offset."""
    s = text.strip()
    return dt.datetime.fromisoformat(s[:-1] + "+00:00" if s.endswith("Z") else s)


def same_zone(value: dt.datetime, like: dt.datetime) -> dt.datetime:
    """`value` made comparable with `like` (a naive value is read as UTC)."""
    if (value.tzinfo is None) == (like.tzinfo is None):
        return value
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC).replace(tzinfo=None)


_UTC_EPOCH, _EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC), dt.datetime(1970, 1, 1)


def parse_partition_value(value: str | None, type_name: str) -> Any:
    """A partition value string as a Python value of the column's type; `""`/None is null."""
    if value is None or value == "":
        return None
    t = type_name.lower()
    try:
        if t in ("long", "integer", "int", "short", "byte"):
            return int(value)
        if t in ("float", "double"):
            return float(value)
        if t == "boolean":
            if value.lower() not in ("true", "false"):
                raise ValueError(value)
            return value.lower() == "true"
        if t == "date":
            return dt.date.fromisoformat(value[:10])
        if t in ("timestamp", "timestamp_ntz"):  # legacy zone-less timestamps were written in UTC
            return same_zone(parse_timestamp(value), _UTC_EPOCH if t == "timestamp" else _EPOCH)
        if t.startswith("decimal"):
            return Decimal(value)
        if t == "binary":
            return value.encode("utf-8")
    except (ValueError, InvalidOperation) as exc:
        raise InvalidArgumentError(f"Partition value {value!r} is not a valid {type_name}") from exc
    return value
