"""Delta actions (PROTOCOL.md "Actions") as small immutable values.

Each action parses from the JSON object a commit line holds (`from_json`) and renders back to it
(`to_json`), keeping only the fields the protocol names; unknown fields and unknown actions are
ignored, as the protocol requires. File actions know their identity (`key`): the canonical path plus
the deletion vector's unique id (PROTOCOL.md "Action Reconciliation").
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, ClassVar
from urllib.parse import unquote

JsonDict = dict[str, Any]


def canonical_path(path: str) -> str:
    """Key form of a file action path (Spark `DeltaLog.CanonicalPathFunction`).

    An absolute path without a scheme and a `file:` URI name the same file, so `/a/b`,
    `file:/a/b` and `file:///a/b` all key as `file:/a/b`. Relative paths stay as logged.
    """
    if path.startswith("/"):
        return "file:" + path
    if path.startswith("file:///"):
        return "file:/" + path[len("file:///") :]
    if path.startswith("file://localhost/"):
        return "file:/" + path[len("file://localhost/") :]
    return path


def decode_path(path: str) -> str:
    """Decode a logged path exactly once (`%20` -> space; `+` stays literal)."""
    return unquote(path)


def _str_map(value: Any) -> dict[str, str | None]:
    if not value:
        return {}
    if type(value) is dict or isinstance(value, Mapping):  # `type` first: ABC checks are slow
        return {str(k): (None if v is None else str(v)) for k, v in value.items()}
    # Arrow map columns arrive as lists of (key, value) pairs.
    return {str(k): (None if v is None else str(v)) for k, v in value}


_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


def _i64(value: Any, name: str, default: int | None = None) -> int | None:
    """An int64 field: None stays `default`; anything else must be an integer in range."""
    if type(value) is int and _I64_MIN <= value <= _I64_MAX:
        return value
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"{name} must be an integer, got {type(value).__name__}")
    number = int(value)
    if not _I64_MIN <= number <= _I64_MAX:
        raise ValueError(f"{name}={value} does not fit in a 64-bit integer")
    return number


def _obj(value: Any, name: str) -> Mapping[str, Any]:
    if type(value) is dict:
        return value
    if not isinstance(value, Mapping):
        raise ValueError(f"{name} must be a JSON object, got {type(value).__name__}")
    return value


def _features(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    return tuple(str(v) for v in value)


@dataclass(frozen=True, slots=True)
class DeletionVectorDescriptor:
    """Where a file's deletion vector lives (PROTOCOL.md "Deletion Vector Descriptor Schema")."""

    storage_type: str
    path_or_inline_dv: str
    size_in_bytes: int
    cardinality: int
    offset: int | None = None
    max_row_index: int | None = None

    @property
    def unique_id(self) -> str:
        """`storageType + pathOrInlineDv`, plus `@offset` when an offset is given."""
        base = f"{self.storage_type}{self.path_or_inline_dv}"
        return base if self.offset is None else f"{base}@{self.offset}"

    @classmethod
    def from_json(cls, d: Any) -> DeletionVectorDescriptor | None:
        if d is None:
            return None
        d = _obj(d, "deletionVector")
        if d.get("storageType") is None:
            return None
        return cls(
            storage_type=str(d["storageType"]),
            path_or_inline_dv=str(d.get("pathOrInlineDv") or ""),
            size_in_bytes=_i64(d.get("sizeInBytes"), "deletionVector.sizeInBytes", 0) or 0,
            cardinality=_i64(d.get("cardinality"), "deletionVector.cardinality", 0) or 0,
            offset=_i64(d.get("offset"), "deletionVector.offset"),
            max_row_index=_i64(d.get("maxRowIndex"), "deletionVector.maxRowIndex"),
        )

    def to_json(self) -> JsonDict:
        out: JsonDict = {
            "storageType": self.storage_type,
            "pathOrInlineDv": self.path_or_inline_dv,
            "sizeInBytes": self.size_in_bytes,
            "cardinality": self.cardinality,
        }
        if self.offset is not None:
            out["offset"] = self.offset
        if self.max_row_index is not None:
            out["maxRowIndex"] = self.max_row_index
        return out


FileKey = str
"""File identity: the canonical path, plus NUL and the deletion vector's unique id when it has one."""

KEY_SEPARATOR = "\x00"


def file_key(path: str, dv: DeletionVectorDescriptor | None) -> FileKey:
    """Identity of a file action (PROTOCOL.md "Action Reconciliation": path + DV unique id)."""
    base = canonical_path(path)
    return base if dv is None else f"{base}{KEY_SEPARATOR}{dv.unique_id}"


class Action:
    """Marker base class for all actions."""

    __slots__ = ()
    action_name: ClassVar[str] = ""


@dataclass(frozen=True, slots=True)
class Protocol(Action):
    """Reader and writer versions and, from reader 3 / writer 7, the named table features."""

    action_name: ClassVar[str] = "protocol"
    min_reader_version: int
    min_writer_version: int
    reader_features: tuple[str, ...] | None = None
    writer_features: tuple[str, ...] | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Protocol:
        return cls(
            min_reader_version=int(d.get("minReaderVersion") or 0),
            min_writer_version=int(d.get("minWriterVersion") or 0),
            reader_features=_features(d.get("readerFeatures")),
            writer_features=_features(d.get("writerFeatures")),
        )

    def to_json(self) -> JsonDict:
        out: JsonDict = {"minReaderVersion": self.min_reader_version, "minWriterVersion": self.min_writer_version}
        if self.reader_features is not None:
            out["readerFeatures"] = list(self.reader_features)
        if self.writer_features is not None:
            out["writerFeatures"] = list(self.writer_features)
        return out


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
            configuration=_str_map(d.get("configuration")),
            name=d.get("name"),
            description=d.get("description"),
            format_provider=str(fmt.get("provider") or "parquet"),
            format_options=_str_map(fmt.get("options")),
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
        if self.name is not None:
            out["name"] = self.name
        if self.description is not None:
            out["description"] = self.description
        if self.created_time is not None:
            out["createdTime"] = self.created_time
        return out

    @property
    def schema_json(self) -> JsonDict | None:
        """The parsed schema (a Delta struct type as a dict), or None when the log has none."""
        if not self.schema_string:
            return None
        return json.loads(self.schema_string)


@dataclass(frozen=True, slots=True)
class AddFile(Action):
    """A data file that becomes part of the table."""

    action_name: ClassVar[str] = "add"
    path: str
    partition_values: Mapping[str, str | None]
    size: int
    modification_time: int
    data_change: bool = True
    stats: str | None = None
    tags: Mapping[str, str | None] | None = None
    deletion_vector: DeletionVectorDescriptor | None = None
    base_row_id: int | None = None
    default_row_commit_version: int | None = None
    clustering_provider: str | None = None

    @property
    def key(self) -> FileKey:
        return file_key(self.path, self.deletion_vector)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> AddFile:
        if d.get("path") is None:
            raise ValueError("add.path is required")
        if d.get("size") is None:
            raise ValueError("add.size is required")
        return cls(
            path=str(d["path"]),
            partition_values=_str_map(d.get("partitionValues")),
            size=_i64(d["size"], "add.size", 0) or 0,
            modification_time=_i64(d.get("modificationTime"), "add.modificationTime", 0) or 0,
            data_change=bool(d.get("dataChange", True)),
            stats=_stats_text(d),
            tags=None if d.get("tags") is None else _str_map(d.get("tags")),
            deletion_vector=DeletionVectorDescriptor.from_json(d.get("deletionVector")),
            base_row_id=_i64(d.get("baseRowId"), "add.baseRowId"),
            default_row_commit_version=_i64(d.get("defaultRowCommitVersion"), "add.defaultRowCommitVersion"),
            clustering_provider=d.get("clusteringProvider"),
        )

    def to_json(self) -> JsonDict:
        out: JsonDict = {
            "path": self.path,
            "partitionValues": dict(self.partition_values),
            "size": self.size,
            "modificationTime": self.modification_time,
            "dataChange": self.data_change,
        }
        if self.stats is not None:
            out["stats"] = self.stats
        if self.tags is not None:
            out["tags"] = dict(self.tags)
        if self.deletion_vector is not None:
            out["deletionVector"] = self.deletion_vector.to_json()
        if self.base_row_id is not None:
            out["baseRowId"] = self.base_row_id
        if self.default_row_commit_version is not None:
            out["defaultRowCommitVersion"] = self.default_row_commit_version
        if self.clustering_provider is not None:
            out["clusteringProvider"] = self.clustering_provider
        return out

    def parsed_stats(self) -> JsonDict | None:
        """Stats JSON parsed on demand (min/max are bounds, not values)."""
        return None if not self.stats else json.loads(self.stats)

    def with_data_change(self, value: bool) -> AddFile:
        if self.data_change == value:
            return self
        # positional on purpose: `dataclasses.replace` costs ~10 us per call, and replay calls this per add
        return AddFile(
            self.path,
            self.partition_values,
            self.size,
            self.modification_time,
            value,
            self.stats,
            self.tags,
            self.deletion_vector,
            self.base_row_id,
            self.default_row_commit_version,
            self.clustering_provider,
        )


@dataclass(frozen=True, slots=True)
class RemoveFile(Action):
    """A data file that leaves the table; kept as a tombstone until retention expires."""

    action_name: ClassVar[str] = "remove"
    path: str
    deletion_timestamp: int | None = None
    data_change: bool = True
    extended_file_metadata: bool | None = None
    partition_values: Mapping[str, str | None] | None = None
    size: int | None = None
    stats: str | None = None
    tags: Mapping[str, str | None] | None = None
    deletion_vector: DeletionVectorDescriptor | None = None
    base_row_id: int | None = None
    default_row_commit_version: int | None = None

    @property
    def key(self) -> FileKey:
        return file_key(self.path, self.deletion_vector)

    @property
    def del_timestamp(self) -> int:
        """`deletionTimestamp`, with a missing one counting as 0 (already expired)."""
        return self.deletion_timestamp or 0

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RemoveFile:
        if d.get("path") is None:
            raise ValueError("remove.path is required")
        return cls(
            path=str(d["path"]),
            deletion_timestamp=_i64(d.get("deletionTimestamp"), "remove.deletionTimestamp"),
            data_change=bool(d.get("dataChange", True)),
            extended_file_metadata=d.get("extendedFileMetadata"),
            partition_values=None if d.get("partitionValues") is None else _str_map(d["partitionValues"]),
            size=_i64(d.get("size"), "remove.size"),
            stats=_stats_text(d),
            tags=None if d.get("tags") is None else _str_map(d.get("tags")),
            deletion_vector=DeletionVectorDescriptor.from_json(d.get("deletionVector")),
            base_row_id=_i64(d.get("baseRowId"), "remove.baseRowId"),
            default_row_commit_version=_i64(d.get("defaultRowCommitVersion"), "remove.defaultRowCommitVersion"),
        )

    def to_json(self) -> JsonDict:
        out: JsonDict = {"path": self.path, "dataChange": self.data_change}
        if self.deletion_timestamp is not None:
            out["deletionTimestamp"] = self.deletion_timestamp
        if self.extended_file_metadata is not None:
            out["extendedFileMetadata"] = self.extended_file_metadata
        if self.partition_values is not None:
            out["partitionValues"] = dict(self.partition_values)
        if self.size is not None:
            out["size"] = self.size
        if self.stats is not None:
            out["stats"] = self.stats
        if self.tags is not None:
            out["tags"] = dict(self.tags)
        if self.deletion_vector is not None:
            out["deletionVector"] = self.deletion_vector.to_json()
        if self.base_row_id is not None:
            out["baseRowId"] = self.base_row_id
        if self.default_row_commit_version is not None:
            out["defaultRowCommitVersion"] = self.default_row_commit_version
        return out

    def with_data_change(self, value: bool) -> RemoveFile:
        if self.data_change == value:
            return self
        return RemoveFile(
            self.path,
            self.deletion_timestamp,
            value,
            self.extended_file_metadata,
            self.partition_values,
            self.size,
            self.stats,
            self.tags,
            self.deletion_vector,
            self.base_row_id,
            self.default_row_commit_version,
        )


@dataclass(frozen=True, slots=True)
class AddCDCFile(Action):
    """A change-data file; never part of the active file set."""

    action_name: ClassVar[str] = "cdc"
    path: str
    partition_values: Mapping[str, str | None]
    size: int
    data_change: bool = False
    tags: Mapping[str, str | None] | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> AddCDCFile:
        return cls(
            path=str(d["path"]),
            partition_values=_str_map(d.get("partitionValues")),
            size=int(d.get("size") or 0),
            data_change=bool(d.get("dataChange", False)),
            tags=None if d.get("tags") is None else _str_map(d.get("tags")),
        )

    def to_json(self) -> JsonDict:
        out: JsonDict = {
            "path": self.path,
            "partitionValues": dict(self.partition_values),
            "size": self.size,
            "dataChange": self.data_change,
        }
        if self.tags is not None:
            out["tags"] = dict(self.tags)
        return out


@dataclass(frozen=True, slots=True)
class SetTransaction(Action):
    """The last version an application committed (`txn`); latest per `appId` wins."""

    action_name: ClassVar[str] = "txn"
    app_id: str
    version: int
    last_updated: int | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> SetTransaction:
        return cls(
            app_id=str(d["appId"]),
            version=int(d["version"]),
            last_updated=None if d.get("lastUpdated") is None else int(d["lastUpdated"]),
        )

    def to_json(self) -> JsonDict:
        out: JsonDict = {"appId": self.app_id, "version": self.version}
        if self.last_updated is not None:
            out["lastUpdated"] = self.last_updated
        return out


@dataclass(frozen=True, slots=True)
class DomainMetadata(Action):
    """Named configuration owned by a feature or a user; `removed=True` deletes the domain."""

    action_name: ClassVar[str] = "domainMetadata"
    domain: str
    configuration: str
    removed: bool = False

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> DomainMetadata:
        return cls(
            domain=str(d["domain"]),
            configuration=str(d.get("configuration") or ""),
            removed=bool(d.get("removed", False)),
        )

    def to_json(self) -> JsonDict:
        return {"domain": self.domain, "configuration": self.configuration, "removed": self.removed}


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
        ts = self.raw.get("timestamp")
        return None if ts is None else int(ts)

    @property
    def in_commit_timestamp(self) -> int | None:
        ts = self.raw.get("inCommitTimestamp")
        return None if ts is None else int(ts)

    @property
    def operation(self) -> str | None:
        op = self.raw.get("operation")
        return None if op is None else str(op)


@dataclass(frozen=True, slots=True)
class CheckpointMetadata(Action):
    """First row of a V2 checkpoint."""

    action_name: ClassVar[str] = "checkpointMetadata"
    version: int
    tags: Mapping[str, str | None] | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CheckpointMetadata:
        return cls(version=int(d["version"]), tags=None if d.get("tags") is None else _str_map(d["tags"]))

    def to_json(self) -> JsonDict:
        out: JsonDict = {"version": self.version}
        if self.tags is not None:
            out["tags"] = dict(self.tags)
        return out


@dataclass(frozen=True, slots=True)
class Sidecar(Action):
    """A V2 checkpoint's pointer to a parquet file of add/remove rows."""

    action_name: ClassVar[str] = "sidecar"
    path: str
    size_in_bytes: int
    modification_time: int
    tags: Mapping[str, str | None] | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Sidecar:
        return cls(
            path=str(d["path"]),
            size_in_bytes=int(d.get("sizeInBytes") or 0),
            modification_time=int(d.get("modificationTime") or 0),
            tags=None if d.get("tags") is None else _str_map(d["tags"]),
        )

    def to_json(self) -> JsonDict:
        out: JsonDict = {
            "path": self.path,
            "sizeInBytes": self.size_in_bytes,
            "modificationTime": self.modification_time,
        }
        if self.tags is not None:
            out["tags"] = dict(self.tags)
        return out


_ACTION_TYPES: dict[str, Any] = {
    t.action_name: t
    for t in (
        AddFile,
        RemoveFile,
        Metadata,
        Protocol,
        SetTransaction,
        DomainMetadata,
        CommitInfo,
        AddCDCFile,
        CheckpointMetadata,
        Sidecar,
    )
}


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


def actions_from_json(objs: Iterable[Mapping[str, Any]]) -> list[Action]:
    out = []
    for obj in objs:
        action = action_from_json(obj)
        if action is not None:
            out.append(action)
    return out


def action_to_json(action: Action) -> JsonDict:
    """`{name: body}`, the form of one commit line."""
    return {action.action_name: action.to_json()}  # type: ignore[attr-defined]


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


def _stats_text(d: Mapping[str, Any]) -> str | None:
    """`stats` as a JSON string; struct-only stats (`stats_parsed`) rendered as JSON."""
    stats = d.get("stats")
    if stats is None and d.get("stats_parsed") is not None:
        return json.dumps(_jsonable(d["stats_parsed"]), separators=(",", ":"), sort_keys=True)
    if stats is not None and not isinstance(stats, str):
        return json.dumps(_jsonable(stats), separators=(",", ":"), sort_keys=True)
    return stats


@dataclass(frozen=True, slots=True)
class CommitActions:
    """The actions of one commit, in log order, with the commit's version."""

    version: int
    actions: tuple[Action, ...]

    @property
    def commit_info(self) -> CommitInfo | None:
        return next((a for a in self.actions if isinstance(a, CommitInfo)), None)
