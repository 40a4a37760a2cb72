"""Delta actions (PROTOCOL.md "Actions") as small immutable values.

Each action parses from the JSON object a commit line holds (`from_json`) and renders back to it (`to_json`),
keeping only the fields the protocol names; unknown fields and unknown actions are ignored, as the protocol
requires. A field's JSON key and parser are its dataclass metadata (`_json`); an absent key reads as the
field's default. File actions know their identity (`key`, PROTOCOL.md "Action Reconciliation").
"""

from __future__ import annotations

import datetime as dt
import json
import operator
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from decimal import Decimal
from typing import Any, ClassVar
from urllib.parse import unquote

JsonDict = dict[str, Any]
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


def canonical_path(path: str) -> str:
    """Key form of a file action path (Spark `DeltaLog.CanonicalPathFunction`).

    `/a/b`, `file:/a/b` and `file:///a/b` name the same file and all key as `file:/a/b`; relative paths stay.
    """
    if path.startswith("/"):
        return "file:" + path
    for prefix in ("file:///", "file://localhost/"):
        if path.startswith(prefix):
            return "file:/" + path[len(prefix) :]
    return path


def decode_path(path: str) -> str:
    """Decode a logged path exactly once (`%20` -> space; `+` stays literal)."""
    return unquote(path)


# -- field parsers: (JSON value, "action.key" for messages) -> field value -----------------------------------


def _map(value: Any, name: str = "") -> dict[str, str | None]:
    if not value:
        return {}
    pairs = value.items() if type(value) is dict or isinstance(value, Mapping) else value  # Arrow maps: pairs
    return {str(k): (None if v is None else str(v)) for k, v in pairs}


def _opt_map(value: Any, name: str) -> dict[str, str | None] | None:
    return None if value is None else _map(value)


def _i64(value: Any, name: str) -> int | None:
    """An int64 field: None stays None; anything else must be an integer in range."""
    if type(value) is int and _I64_MIN <= value <= _I64_MAX:
        return value
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"{name} must be an integer, got {type(value).__name__}")
    number = int(value)
    if not _I64_MIN <= number <= _I64_MAX:
        raise ValueError(f"{name}={value} does not fit in a 64-bit integer")
    return number


def _i64_or_0(value: Any, name: str) -> int:
    return _i64(value, name) or 0


def _required_i64(value: Any, name: str) -> int:
    if value is None:
        raise ValueError(f"{name} is required")
    return _i64_or_0(value, name)


def _required_str(value: Any, name: str) -> str:
    if value is None:
        raise ValueError(f"{name} is required")
    return str(value)


def _str(value: Any, name: str) -> str:
    return str(value or "")


def _bool(value: Any, name: str) -> bool:
    return bool(value)


def _features(value: Any, name: str) -> tuple[str, ...] | None:
    return None if value is None else tuple(str(v) for v in value)


def _obj(value: Any, name: str) -> Mapping[str, Any]:
    if type(value) is dict:
        return value
    if not isinstance(value, Mapping):
        raise ValueError(f"{name} must be a JSON object, got {type(value).__name__}")
    return value


def _jsonable(value: Any) -> Any:
    """Struct stats values as Delta's JSON stats write them (UTC timestamps to the millisecond)."""
    if isinstance(value, Mapping):  # Delta's JSON stats omit null bounds
        return {str(k): _jsonable(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dt.datetime):  # as Spark renders parquet timestamps (naive ones read as UTC)
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value.isoformat(timespec="milliseconds") + "Z"
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def _stats_text(d: Mapping[str, Any], name: str = "") -> str | None:
    """`stats` of the action `d` as a JSON string; struct-only stats (`stats_parsed`) rendered as JSON."""
    stats = d.get("stats")
    if stats is None:
        stats = d.get("stats_parsed")
    elif isinstance(stats, str):
        return stats
    return None if stats is None else json.dumps(_jsonable(stats), separators=(",", ":"), sort_keys=True)


def _raw(value: Any, name: str) -> Any:
    return value


def _json(key: str, parse: Callable[[Any, str], Any] = _raw, **default: Any) -> Any:
    """A field logged as `key`, read by `parse` (`_stats_text` is given the whole action)."""
    return field(metadata={"key": key, "parse": parse}, **default)


class _JsonValue:
    """`from_json`/`to_json` from the fields' `_json` metadata (set up by `_bind`)."""

    __slots__ = ()
    _spec: ClassVar[tuple[tuple[str, Any, Callable[[Any, str], Any], str], ...]] = ()
    #: `(key, render)` in to_json's order: the fields that are never None first, then the optional ones.
    _keys: ClassVar[tuple[tuple[str, Callable[[Any], Any] | None], ...]] = ()
    _sorted_values: ClassVar[Callable[[Any], tuple[Any, ...]]]
    _values: ClassVar[Callable[[Any], tuple[Any, ...]]]

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Any:
        spec = cls._spec
        return cls(
            *[parse(d, name) if parse is _stats_text else parse(d.get(k, v), name) for k, v, parse, name in spec]
        )

    def to_json(self) -> JsonDict:
        out: JsonDict = {}
        for (key, render), value in zip(self._keys, self._sorted_values(self), strict=True):
            if value is not None:
                out[key] = value if render is None else render(value)
        return out


def _bind(cls: Any, prefix: str) -> None:
    specs = [(f, f.metadata["key"]) for f in fields(cls)]
    cls._spec = tuple(
        (key, None if f.default is MISSING else f.default, f.metadata["parse"], f"{prefix}.{key}") for f, key in specs
    )
    ordered = sorted(specs, key=lambda s: s[0].default is None)
    cls._keys = tuple((key, _RENDER.get(f.metadata["parse"])) for f, key in ordered)
    cls._sorted_values = operator.attrgetter(*(f.name for f, _ in ordered))
    cls._values = operator.attrgetter(*(f.name for f, _ in specs))


@dataclass(frozen=True, slots=True)
class DeletionVectorDescriptor(_JsonValue):
    """Where a file's deletion vector lives (PROTOCOL.md "Deletion Vector Descriptor Schema")."""

    storage_type: str = _json("storageType", _required_str)
    path_or_inline_dv: str = _json("pathOrInlineDv", _str)
    size_in_bytes: int = _json("sizeInBytes", _i64_or_0)
    cardinality: int = _json("cardinality", _i64_or_0)
    offset: int | None = _json("offset", _i64, default=None)
    max_row_index: int | None = _json("maxRowIndex", _i64, default=None)

    @property
    def unique_id(self) -> str:
        """`storageType + pathOrInlineDv`, plus `@offset` when an offset is given."""
        base = f"{self.storage_type}{self.path_or_inline_dv}"
        return base if self.offset is None else f"{base}@{self.offset}"

    @classmethod
    def from_json(cls, d: Any) -> DeletionVectorDescriptor | None:
        if d is None or _obj(d, "deletionVector").get("storageType") is None:
            return None
        return super(DeletionVectorDescriptor, cls).from_json(d)


def _dv(value: Any, name: str) -> DeletionVectorDescriptor | None:
    return DeletionVectorDescriptor.from_json(value)


FileKey = str
"""File identity: the canonical path, plus NUL and the deletion vector's unique id when it has one."""

KEY_SEPARATOR = "\x00"


def file_key(path: str, dv: DeletionVectorDescriptor | None) -> FileKey:
    """Identity of a file action (PROTOCOL.md "Action Reconciliation": path + DV unique id)."""
    base = canonical_path(path)
    return base if dv is None else f"{base}{KEY_SEPARATOR}{dv.unique_id}"


class Action(_JsonValue):
    __slots__ = ()
    action_name: ClassVar[str] = ""


class _FileAction(Action):
    __slots__ = ()
    _DATA_CHANGE: ClassVar[int]

    @property
    def key(self) -> FileKey:
        return file_key(self.path, self.deletion_vector)  # type: ignore[attr-defined]

    def with_data_change(self, value: bool) -> Any:
        """This action with `dataChange=value` (positional: `dataclasses.replace` is twice as slow, per add)."""
        if self.data_change == value:  # type: ignore[attr-defined]
            return self
        args = list(self._values(self))
        args[self._DATA_CHANGE] = value
        return type(self)(*args)


@dataclass(frozen=True, slots=True)
class Protocol(Action):
    """Reader and writer versions and, from reader 3 / writer 7, the named table features."""

    action_name: ClassVar[str] = "protocol"
    min_reader_version: int = _json("minReaderVersion", _i64_or_0)
    min_writer_version: int = _json("minWriterVersion", _i64_or_0)
    reader_features: tuple[str, ...] | None = _json("readerFeatures", _features, default=None)
    writer_features: tuple[str, ...] | None = _json("writerFeatures", _features, default=None)


@dataclass(frozen=True, slots=True)
class Metadata(Action):
    """Table identity, schema, partitioning and properties; the latest one wins."""

    action_name: ClassVar[str] = "metaData"
    id: str
    schema_string: str | None
    partition_columns: tuple[str, ...] = ()
    configuration: Mapping[str, str | None] = field(default_factory=dict)
    name: str | None = None
    description: str | None = None
    format_provider: str = "parquet"
    format_options: Mapping[str, str | None] = field(default_factory=dict)
    created_time: int | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Metadata:
        """Refuses (ValueError) a `schemaString` that is not the JSON of a struct type, as delta-rs does."""
        fmt = d.get("format") or {}
        schema = d.get("schemaString")
        if schema is not None:
            try:
                parsed = json.loads(schema)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"metaData.schemaString is not valid JSON ({exc})") from None
            if not isinstance(parsed, dict) or parsed.get("type") != "struct":
                raise ValueError(f"metaData.schemaString is not a struct type: {schema[:100]!r}")
        return cls(
            id=str(d.get("id") or ""),
            schema_string=schema,
            partition_columns=tuple(d.get("partitionColumns") or ()),
            configuration=_map(d.get("configuration")),
            name=d.get("name"),
            description=d.get("description"),
            format_provider=str(fmt.get("provider") or "parquet"),
            format_options=_map(fmt.get("options")),
            created_time=None if d.get("createdTime") is None else int(d["createdTime"]),
        )

    def to_json(self) -> JsonDict:
        out: JsonDict = {
            "id": self.id,
            "format": {"provider": self.format_provider, "options": dict(self.format_options)},
            "schemaString": self.schema_string,
            "partitionColumns": list(self.partition_columns),
            "configuration": dict(self.configuration),
        }
        for key, value in (("name", self.name), ("description", self.description), ("createdTime", self.created_time)):
            if value is not None:
                out[key] = value
        return out

    @property
    def schema_json(self) -> JsonDict | None:
        """The parsed schema (a Delta struct type as a dict), or None when the log has none."""
        return json.loads(self.schema_string) if self.schema_string else None


@dataclass(frozen=True, slots=True)
class AddFile(_FileAction):
    """A data file that becomes part of the table."""

    action_name: ClassVar[str] = "add"
    path: str = _json("path", _required_str)
    partition_values: Mapping[str, str | None] = _json("partitionValues", _map)
    size: int = _json("size", _required_i64)
    modification_time: int = _json("modificationTime", _i64_or_0)
    data_change: bool = _json("dataChange", _bool, default=True)
    stats: str | None = _json("stats", _stats_text, default=None)
    tags: Mapping[str, str | None] | None = _json("tags", _opt_map, default=None)
    deletion_vector: DeletionVectorDescriptor | None = _json("deletionVector", _dv, default=None)  # noqa: RUF009
    base_row_id: int | None = _json("baseRowId", _i64, default=None)
    default_row_commit_version: int | None = _json("defaultRowCommitVersion", _i64, default=None)
    clustering_provider: str | None = _json("clusteringProvider", default=None)

    def parsed_stats(self) -> JsonDict | None:
        """Stats JSON parsed on demand (min/max are bounds, not values)."""
        return None if not self.stats else json.loads(self.stats)


@dataclass(frozen=True, slots=True)
class RemoveFile(_FileAction):
    """A data file that leaves the table; kept as a tombstone until retention expires."""

    action_name: ClassVar[str] = "remove"
    path: str = _json("path", _required_str)
    deletion_timestamp: int | None = _json("deletionTimestamp", _i64, default=None)
    data_change: bool = _json("dataChange", _bool, default=True)
    extended_file_metadata: bool | None = _json("extendedFileMetadata", default=None)
    partition_values: Mapping[str, str | None] | None = _json("partitionValues", _opt_map, default=None)
    size: int | None = _json("size", _i64, default=None)
    stats: str | None = _json("stats", _stats_text, default=None)
    tags: Mapping[str, str | None] | None = _json("tags", _opt_map, default=None)
    deletion_vector: DeletionVectorDescriptor | None = _json("deletionVector", _dv, default=None)  # noqa: RUF009
    base_row_id: int | None = _json("baseRowId", _i64, default=None)
    default_row_commit_version: int | None = _json("defaultRowCommitVersion", _i64, default=None)

    @property
    def del_timestamp(self) -> int:
        """`deletionTimestamp`, with a missing one counting as 0 (already expired)."""
        return self.deletion_timestamp or 0


@dataclass(frozen=True, slots=True)
class AddCDCFile(Action):
    """A change-data file; never part of the active file set."""

    action_name: ClassVar[str] = "cdc"
    path: str = _json("path", _required_str)
    partition_values: Mapping[str, str | None] = _json("partitionValues", _map)
    size: int = _json("size", _i64_or_0)
    data_change: bool = _json("dataChange", _bool, default=False)
    tags: Mapping[str, str | None] | None = _json("tags", _opt_map, default=None)


@dataclass(frozen=True, slots=True)
class SetTransaction(Action):
    """The last version an application committed (`txn`); latest per `appId` wins."""

    action_name: ClassVar[str] = "txn"
    app_id: str = _json("appId", _required_str)
    version: int = _json("version", _required_i64)
    last_updated: int | None = _json("lastUpdated", _i64, default=None)


@dataclass(frozen=True, slots=True)
class DomainMetadata(Action):
    """Named configuration owned by a feature or a user; `removed=True` deletes the domain."""

    action_name: ClassVar[str] = "domainMetadata"
    domain: str = _json("domain", _required_str)
    configuration: str = _json("configuration", _str)
    removed: bool = _json("removed", _bool, default=False)


@dataclass(frozen=True, slots=True)
class CommitInfo(Action):
    """Free-form provenance of a commit; values may be of any JSON type."""

    action_name: ClassVar[str] = "commitInfo"
    raw: Mapping[str, Any]

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CommitInfo:
        return cls(raw=dict(d))

    def to_json(self) -> JsonDict:
        return dict(self.raw)

    @property
    def timestamp(self) -> int | None:
        return None if self.raw.get("timestamp") is None else int(self.raw["timestamp"])

    @property
    def in_commit_timestamp(self) -> int | None:
        return None if self.raw.get("inCommitTimestamp") is None else int(self.raw["inCommitTimestamp"])

    @property
    def operation(self) -> str | None:
        return None if self.raw.get("operation") is None else str(self.raw["operation"])


@dataclass(frozen=True, slots=True)
class CheckpointMetadata(Action):
    """First row of a V2 checkpoint."""

    action_name: ClassVar[str] = "checkpointMetadata"
    version: int = _json("version", _required_i64)
    tags: Mapping[str, str | None] | None = _json("tags", _opt_map, default=None)


@dataclass(frozen=True, slots=True)
class Sidecar(Action):
    """A V2 checkpoint's pointer to a parquet file of add/remove rows."""

    action_name: ClassVar[str] = "sidecar"
    path: str = _json("path", _required_str)
    size_in_bytes: int = _json("sizeInBytes", _i64_or_0)
    modification_time: int = _json("modificationTime", _i64_or_0)
    tags: Mapping[str, str | None] | None = _json("tags", _opt_map, default=None)


_GENERIC = (AddFile, RemoveFile, AddCDCFile, Protocol, SetTransaction, DomainMetadata, CheckpointMetadata, Sidecar)
_ACTION_TYPES: dict[str, Any] = {t.action_name: t for t in (*_GENERIC, Metadata, CommitInfo)}
_RENDER: dict[Any, Callable[[Any], Any]] = {_map: dict, _opt_map: dict, _features: list, _dv: _JsonValue.to_json}
_bind(DeletionVectorDescriptor, "deletionVector")
for _type in _GENERIC:
    _bind(_type, _type.action_name)
AddFile._DATA_CHANGE, RemoveFile._DATA_CHANGE = (t.__slots__.index("data_change") for t in (AddFile, RemoveFile))

#: What `action_from_json` raises for a JSON object that is not a valid action.
INVALID_ACTION_ERRORS = (KeyError, TypeError, ValueError, AttributeError, OverflowError)


def action_from_json(obj: Mapping[str, Any]) -> Action | None:
    """The action one log line (or checkpoint row) holds; `None` for unknown or empty actions."""
    for name, value in obj.items():
        if value is None:
            continue
        kind = _ACTION_TYPES.get(name)
        if kind is not None:
            return kind.from_json(_obj(value, name))
    return None


def action_to_json(action: Action) -> JsonDict:
    """`{name: body}`, the form of one commit line."""
    return {action.action_name: action.to_json()}
