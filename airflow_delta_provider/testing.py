"""Write Delta transaction logs for unit tests: no JVM, no Spark, no deltalake.

`DeltaLogBuilder` writes a table's `_delta_log` directly: JSON commits with add, remove, metaData,
protocol, txn and domainMetadata actions, and classic single-file parquet checkpoints with
`_last_checkpoint`. Only the log is written; data files are not (unless `write_data_files=True`,
which writes placeholder files of the logged size), so the table can be inspected, listed and time
travelled (and, with placeholders, vacuumed), but not scanned. Delta readers (this provider's
`airflow_delta_provider.delta`, deltalake / delta-rs, Spark) read the result like any other table.

Every commit is written atomically and never overwrites an existing one. Commit ``v`` is stamped
``start_time_ms + v * step_ms`` (its commitInfo ``timestamp``, every add's ``modificationTime``, the
default ``deletionTimestamp`` of its removes, and the commit file's mtime, so time travel by
timestamp works). Pass ``timestamp_ms=`` to any commit method to choose one commit's time.
The default start is fixed (2023-11-14), so tests are reproducible; tombstones are then long past
any retention by the wall clock. Give the reader a clock (``DeltaLog.for_table(path, clock=...)``,
``now_ms=``) or pass ``start_time_ms`` near now when a test needs tombstones inside retention.

Example::

    from airflow_delta_provider.testing import DeltaLogBuilder

    def test_my_sensor(tmp_path):
        b = DeltaLogBuilder(tmp_path / "events", schema={"id": "long", "date": "string"},
                            partition_columns=["date"])
        b.create()                                                    # version 0
        b.append(["part-0.parquet"], partition={"date": "2024-01-01"},
                 stats={"numRecords": 10})                            # version 1
        b.remove(["part-0.parquet"])                                  # version 2: a tombstone
        b.checkpoint()                                                # 2.checkpoint.parquet
        b.txn("my-app", 7)                                            # version 3
        assert b.version == 3
        assert b.files == {}
        ...  # point the DAG / operator under test at b.path or b.uri

File names: a name without ``/`` is placed under the partition directory built from ``partition``
(``date=2024-01-01/part-0.parquet``) and URI-encoded as Delta writers log it (partition values are
Hive-escaped, then the whole path is URI-encoded, as Spark does: ``ts=2024-01-01 10:00`` becomes
``ts=2024-01-01%2010%253A00``). A name containing ``/`` (or an absolute URI) is logged verbatim.

This module imports only the standard library and the provider's pure `delta.protocol` modules;
pyarrow is imported when a checkpoint is written. It never imports Airflow, pyspark or deltalake.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from airflow_delta_provider.delta.protocol.actions import DeletionVectorDescriptor, file_key
from airflow_delta_provider.delta.protocol.schema import HIVE_DEFAULT_PARTITION

__all__ = ["ENGINE_INFO", "DeltaLogBuilder", "FileSpec", "partition_path"]

ENGINE_INFO = "airflow-delta-provider-testing"
"""`engineInfo` of every commitInfo the builder writes."""

DEFAULT_START_TIME_MS = 1_700_000_000_000
"""Commit 0's timestamp unless `start_time_ms` is given (2023-11-14T22:13:20Z)."""

JsonDict = dict[str, Any]
SchemaSpec = Mapping[str, Any]
"""`{"column": type}` (a Delta primitive name such as ``"long"``, or a nested type dict), or a full
Delta struct type ``{"type": "struct", "fields": [...]}``."""
FileSpec = str | Mapping[str, Any]
"""A file name, or a dict with ``path`` and optional ``size``, ``partition_values``, ``stats``,
``modification_time``, ``tags``, ``deletion_vector`` (any missing field takes the call's default)."""

# Characters Hive escapes in partition directory names (Spark `ExternalCatalogUtils.escapePathName`).
_HIVE_ESCAPED = frozenset("\"#%'*/:=?\\\x7f{[]^") | frozenset(chr(c) for c in range(1, 0x20))
# Characters a Java URI keeps in a path (besides alphanumerics and `_.-~`, which `quote` keeps).
_URI_SAFE = "/=!'()*,;:$&+@"


def _hive_escape(value: str) -> str:
    return "".join(f"%{ord(c):02X}" if c in _HIVE_ESCAPED else c for c in value)


def _partition_str(value: Any) -> str | None:
    """A partition value as the log serializes it (None and "" are null)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    return text or None


def partition_path(partition_values: Mapping[str, str | None], columns: Sequence[str] = ()) -> str:
    """The (not yet URI-encoded) partition directory, e.g. ``date=2024-01-01/region=eu``.

    Columns follow `columns` (the table's partition columns), then any other keys in given order;
    null values use ``__HIVE_DEFAULT_PARTITION__``.
    """
    order = [c for c in columns if c in partition_values] + [k for k in partition_values if k not in columns]
    parts = []
    for name in order:
        value = partition_values[name]
        shown = HIVE_DEFAULT_PARTITION if value is None else _hive_escape(value)
        parts.append(f"{_hive_escape(name)}={shown}")
    return "/".join(parts)


def _is_verbatim(name: str) -> bool:
    return "/" in name or "://" in name or name.startswith("file:")


def _stats_json(stats: Any) -> str | None:
    if stats is None or isinstance(stats, str):
        return stats
    return json.dumps(stats, separators=(",", ":"))


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _struct_type(schema: SchemaSpec) -> JsonDict:
    """The Delta struct type of a `SchemaSpec`."""
    if schema.get("type") == "struct" and isinstance(schema.get("fields"), list):
        return {"type": "struct", "fields": [dict(f) for f in schema["fields"]]}
    return {"type": "struct", "fields": [_field(name, type_) for name, type_ in schema.items()]}


def _field(name: str, type_: Any, nullable: bool = True, metadata: Mapping[str, Any] | None = None) -> JsonDict:
    return {"name": name, "type": type_, "nullable": nullable, "metadata": dict(metadata or {})}


def _key(body: Mapping[str, Any]) -> str:
    return file_key(str(body["path"]), DeletionVectorDescriptor.from_json(body.get("deletionVector")))


@dataclass
class _State:
    """The reconciled table state after one version (action bodies are never mutated once logged)."""

    protocol: JsonDict | None = None
    metadata: JsonDict | None = None
    adds: dict[str, JsonDict] = field(default_factory=dict)
    removes: dict[str, JsonDict] = field(default_factory=dict)
    txns: dict[str, JsonDict] = field(default_factory=dict)
    domains: dict[str, JsonDict] = field(default_factory=dict)

    def copy(self) -> _State:
        return _State(
            self.protocol,
            self.metadata,
            dict(self.adds),
            dict(self.removes),
            dict(self.txns),
            dict(self.domains),
        )

    def apply(self, actions: Iterable[Mapping[str, Any]]) -> None:
        for action in actions:
            for name, body in action.items():
                if body is None:
                    continue
                if name == "add":
                    key = _key(body)
                    self.adds[key] = dict(body)
                    self.removes.pop(key, None)
                elif name == "remove":
                    key = _key(body)
                    self.adds.pop(key, None)
                    self.removes[key] = dict(body)
                elif name == "metaData":
                    self.metadata = dict(body)
                elif name == "protocol":
                    self.protocol = dict(body)
                elif name == "txn":
                    self.txns[str(body["appId"])] = dict(body)
                elif name == "domainMetadata":
                    if body.get("removed"):
                        self.domains.pop(str(body["domain"]), None)
                    else:
                        self.domains[str(body["domain"])] = dict(body)


class DeltaLogBuilder:
    """Writes the `_delta_log` of a Delta table, one commit per call.

    Args:
        path: table root (a local directory; created on the first commit).
        schema: the table schema (see `SchemaSpec`), used by `create()`.
        partition_columns: partition columns, used by `create()` and to lay out partition directories.
        configuration: table properties (`metaData.configuration`) set by `create()`.
        protocol: ``(min_reader_version, min_writer_version)`` set by `create()`.
        reader_features, writer_features: table features for protocol (3, 7); default ``[]`` there.
        start_time_ms: commit 0's timestamp (epoch ms).
        step_ms: the time between two consecutive commits.
        table_id: ``metaData.id`` (a random UUID by default).
        name, description: ``metaData.name`` / ``metaData.description``.
        write_data_files: also write a placeholder data file (``size`` zero bytes, mtime
            ``modificationTime``) for every added relative path, e.g. for VACUUM tests.

    Every commit method returns the version it wrote. Commit methods other than `create()` and
    `commit()` need the table to exist (`create()` first).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        schema: SchemaSpec | None = None,
        partition_columns: Sequence[str] = (),
        configuration: Mapping[str, str] | None = None,
        protocol: tuple[int, int] = (1, 2),
        *,
        reader_features: Sequence[str] | None = None,
        writer_features: Sequence[str] | None = None,
        start_time_ms: int = DEFAULT_START_TIME_MS,
        step_ms: int = 60_000,
        table_id: str | None = None,
        name: str | None = None,
        description: str | None = None,
        write_data_files: bool = False,
    ) -> None:
        self.path: str = os.path.abspath(os.fspath(path))
        self.log_dir: str = os.path.join(self.path, "_delta_log")
        self.start_time_ms = int(start_time_ms)
        self.step_ms = int(step_ms)
        self.write_data_files = write_data_files
        self._initial_schema: JsonDict = _struct_type(schema or {})
        self._initial_partition_columns: list[str] = list(partition_columns)
        self._initial_configuration: dict[str, str] = dict(configuration or {})
        self._initial_protocol = self._protocol_action(protocol[0], protocol[1], reader_features, writer_features)
        self._table_id = table_id or str(uuid.uuid4())
        self._name = name
        self._description = description
        self._state = _State()
        self._states: list[_State] = []  # the state after each version, by version
        self._timestamps: list[int] = []  # the commit timestamp of each version

    # -- properties ---------------------------------------------------------------------------------
    @property
    def uri(self) -> str:
        """The table root as a ``file://`` URI."""
        return Path(self.path).as_uri()

    @property
    def version(self) -> int:
        """The latest version written (-1 before the first commit)."""
        return len(self._states) - 1

    @property
    def files(self) -> dict[str, JsonDict]:
        """The active files as the builder tracks them: logged path -> add action body."""
        return {a["path"]: dict(a) for a in self._state.adds.values()}

    @property
    def tombstones(self) -> dict[str, JsonDict]:
        """Every remove the log holds (retention is not applied): logged path -> remove action body."""
        return {r["path"]: dict(r) for r in self._state.removes.values()}

    @property
    def metadata(self) -> JsonDict | None:
        """The current ``metaData`` action body."""
        return None if self._state.metadata is None else dict(self._state.metadata)

    @property
    def protocol(self) -> JsonDict | None:
        """The current ``protocol`` action body."""
        return None if self._state.protocol is None else dict(self._state.protocol)

    @property
    def schema(self) -> JsonDict:
        """The current schema as a Delta struct type dict (the one `create()` will write before it)."""
        md = self._state.metadata
        if md is None or not md.get("schemaString"):
            return json.loads(json.dumps(self._initial_schema))
        return json.loads(md["schemaString"])

    @property
    def partition_columns(self) -> list[str]:
        md = self._state.metadata
        return list(self._initial_partition_columns if md is None else md.get("partitionColumns") or [])

    @property
    def configuration(self) -> dict[str, str]:
        md = self._state.metadata
        return dict(self._initial_configuration if md is None else md.get("configuration") or {})

    def commit_path(self, version: int) -> str:
        """The commit file of `version`."""
        return os.path.join(self.log_dir, f"{version:020d}.json")

    def checkpoint_path(self, version: int) -> str:
        """The classic checkpoint file of `version`."""
        return os.path.join(self.log_dir, f"{version:020d}.checkpoint.parquet")

    def timestamp(self, version: int) -> int:
        """The commit timestamp (ms) of a written version."""
        return self._timestamps[version]

    def default_timestamp(self, version: int) -> int:
        """``start_time_ms + version * step_ms``."""
        return self.start_time_ms + version * self.step_ms

    # -- commits ------------------------------------------------------------------------------------
    def create(self, *, timestamp_ms: int | None = None) -> int:
        """Version 0: commitInfo (CREATE TABLE), protocol, metaData."""
        if self.version >= 0:
            raise RuntimeError(f"the table already exists (version {self.version})")
        ts = self._next_timestamp(timestamp_ms)
        metadata: JsonDict = {
            "id": self._table_id,
            "format": {"provider": "parquet", "options": {}},
            "schemaString": _dumps(self._initial_schema),
            "partitionColumns": list(self._initial_partition_columns),
            "configuration": dict(self._initial_configuration),
            "createdTime": ts,
        }
        if self._name is not None:
            metadata["name"] = self._name
        if self._description is not None:
            metadata["description"] = self._description
        params = {
            "isManaged": "false",
            "description": self._description,
            "partitionBy": _dumps(self._initial_partition_columns),
            "properties": _dumps(self._initial_configuration),
        }
        actions = [{"protocol": dict(self._initial_protocol)}, {"metaData": metadata}]
        return self._write(actions, "CREATE TABLE", params, ts)

    def append(
        self,
        files: Iterable[FileSpec],
        *,
        size: int = 1024,
        partition: Mapping[str, Any] | None = None,
        stats: Mapping[str, Any] | str | None = None,
        data_change: bool = True,
        txn: tuple[str, int] | None = None,
        timestamp_ms: int | None = None,
    ) -> int:
        """A WRITE (mode Append) commit adding `files`; `txn=(app_id, version)` also logs a txn action."""
        self._require_table()
        ts = self._next_timestamp(timestamp_ms)
        adds = [self._add(f, size, partition, stats, data_change, ts) for f in files]
        actions: list[JsonDict] = [{"add": a} for a in adds]
        if txn is not None:
            actions.append({"txn": {"appId": txn[0], "version": int(txn[1]), "lastUpdated": ts}})
        params = {"mode": "Append", "partitionBy": _dumps(self.partition_columns)}
        return self._write(actions, "WRITE", params, ts, is_blind_append=True)

    def remove(
        self,
        files: Iterable[FileSpec],
        *,
        deletion_timestamp_ms: int | None = None,
        data_change: bool = True,
        operation: str = "DELETE",
        timestamp_ms: int | None = None,
    ) -> int:
        """A DELETE commit removing active `files` (size, partition values, tags and deletion
        vector come from the active add). A file is matched by its logged path, by the name it
        was added under, or by a unique base name; an unknown file is a `KeyError` (a dict with
        ``path`` and optional ``size``/``partition_values`` removes a file the builder never added).
        `deletion_timestamp_ms` defaults to this commit's timestamp.
        """
        self._require_table()
        ts = self._next_timestamp(timestamp_ms)
        deleted_at = ts if deletion_timestamp_ms is None else int(deletion_timestamp_ms)
        removes = [self._remove_body(self._resolve(f), deleted_at, data_change) for f in files]
        return self._write([{"remove": r} for r in removes], operation, {"predicate": "[]"}, ts)

    def overwrite(
        self,
        files: Iterable[FileSpec],
        *,
        size: int = 1024,
        partition: Mapping[str, Any] | None = None,
        stats: Mapping[str, Any] | str | None = None,
        txn: tuple[str, int] | None = None,
        timestamp_ms: int | None = None,
    ) -> int:
        """A WRITE (mode Overwrite) commit: removes every active file, then adds `files`."""
        self._require_table()
        ts = self._next_timestamp(timestamp_ms)
        actions: list[JsonDict] = [{"remove": self._remove_body(add, ts, True)} for add in self._state.adds.values()]
        actions += [{"add": self._add(f, size, partition, stats, True, ts)} for f in files]
        if txn is not None:
            actions.append({"txn": {"appId": txn[0], "version": int(txn[1]), "lastUpdated": ts}})
        params = {"mode": "Overwrite", "partitionBy": _dumps(self.partition_columns)}
        return self._write(actions, "WRITE", params, ts)

    def set_properties(self, properties: Mapping[str, str | None], *, timestamp_ms: int | None = None) -> int:
        """A SET TBLPROPERTIES commit: a metaData with `properties` merged in (a None value unsets a key)."""
        metadata = self._require_table()
        ts = self._next_timestamp(timestamp_ms)
        conf = dict(metadata.get("configuration") or {})
        for key, value in properties.items():
            if value is None:
                conf.pop(key, None)
            else:
                conf[key] = str(value)
        shown = {k: v for k, v in properties.items() if v is not None}
        new = {**metadata, "configuration": conf}
        return self._write([{"metaData": new}], "SET TBLPROPERTIES", {"properties": _dumps(shown)}, ts)

    def add_column(
        self,
        name: str,
        data_type: Any = "string",
        *,
        nullable: bool = True,
        metadata: Mapping[str, Any] | None = None,
        timestamp_ms: int | None = None,
    ) -> int:
        """An ADD COLUMNS commit: a metaData whose schema has the new top-level column appended."""
        current = self._require_table()
        ts = self._next_timestamp(timestamp_ms)
        schema = self.schema
        if any(f["name"] == name for f in schema["fields"]):
            raise ValueError(f"column {name!r} already exists")
        new_field = _field(name, data_type, nullable, metadata)
        schema["fields"].append(new_field)
        new = {**current, "schemaString": _dumps(schema)}
        params = {"columns": _dumps([{"column": new_field}])}
        return self._write([{"metaData": new}], "ADD COLUMNS", params, ts)

    def change_schema(
        self,
        schema: SchemaSpec,
        *,
        partition_columns: Sequence[str] | None = None,
        operation: str = "REPLACE COLUMNS",
        timestamp_ms: int | None = None,
    ) -> int:
        """A commit whose metaData replaces the schema (and, if given, the partition columns)."""
        current = self._require_table()
        ts = self._next_timestamp(timestamp_ms)
        struct = _struct_type(schema)
        new = {**current, "schemaString": _dumps(struct)}
        if partition_columns is not None:
            new["partitionColumns"] = list(partition_columns)
        return self._write([{"metaData": new}], operation, {"columns": _dumps(struct["fields"])}, ts)

    def set_protocol(
        self,
        min_reader_version: int,
        min_writer_version: int,
        *,
        reader_features: Sequence[str] | None = None,
        writer_features: Sequence[str] | None = None,
        timestamp_ms: int | None = None,
    ) -> int:
        """An UPGRADE PROTOCOL commit (features apply from reader 3 / writer 7; no validation)."""
        self._require_table()
        ts = self._next_timestamp(timestamp_ms)
        protocol = self._protocol_action(min_reader_version, min_writer_version, reader_features, writer_features)
        return self._write([{"protocol": protocol}], "UPGRADE PROTOCOL", {"newProtocol": _dumps(protocol)}, ts)

    def txn(
        self,
        app_id: str,
        version: int,
        *,
        last_updated: int | None = None,
        timestamp_ms: int | None = None,
    ) -> int:
        """A STREAMING UPDATE commit holding one SetTransaction (``lastUpdated`` defaults to the commit time)."""
        self._require_table()
        ts = self._next_timestamp(timestamp_ms)
        body = {"appId": app_id, "version": int(version), "lastUpdated": ts if last_updated is None else last_updated}
        params = {"outputMode": "Append", "queryId": app_id, "epochId": str(version)}
        return self._write([{"txn": body}], "STREAMING UPDATE", params, ts)

    def domain(
        self,
        domain: str,
        configuration: Mapping[str, Any] | str,
        *,
        removed: bool = False,
        timestamp_ms: int | None = None,
    ) -> int:
        """A commit holding one domainMetadata action (a dict configuration is stored as JSON).

        Delta requires the writer feature ``domainMetadata``; the builder does not check it.
        """
        self._require_table()
        ts = self._next_timestamp(timestamp_ms)
        text = configuration if isinstance(configuration, str) else _dumps(configuration)
        body = {"domain": domain, "configuration": text, "removed": removed}
        return self._write([{"domainMetadata": body}], "DOMAIN METADATA", {"domain": domain}, ts)

    def commit(
        self,
        actions: Iterable[Mapping[str, Any]],
        *,
        operation: str = "WRITE",
        operation_parameters: Mapping[str, Any] | None = None,
        timestamp_ms: int | None = None,
    ) -> int:
        """The escape hatch: a commit of raw action dicts (``{"add": {...}}``, ...), written as given.

        A commitInfo is prepended unless `actions` hold one. Non-string ``stats`` are JSON-encoded.
        The builder's tracked state (files, metadata, txns, ...) follows the actions.
        """
        ts = self._next_timestamp(timestamp_ms)
        out: list[JsonDict] = []
        for action in actions:
            action = dict(action)
            for kind in ("add", "remove"):
                body = action.get(kind)
                if isinstance(body, Mapping) and "stats" in body and not isinstance(body["stats"], str | None):
                    action[kind] = {**body, "stats": _stats_json(body["stats"])}
            out.append(action)
        has_info = any(a.get("commitInfo") is not None for a in out)
        return self._write(out, operation, dict(operation_parameters or {}), ts, commit_info=not has_info)

    # -- checkpoints --------------------------------------------------------------------------------
    def checkpoint(self, version: int | None = None, *, write_last_checkpoint: bool = True) -> int:
        """A classic single-file parquet checkpoint of `version` (default: the latest) and
        ``_last_checkpoint`` (``{"version", "size", "sizeInBytes", "numOfAddFiles"}``).

        Rows: protocol, metaData, txns, domains, active adds, then every tombstone (readers apply
        the retention). Returns the checkpoint's version.
        """
        import pyarrow as pa
        import pyarrow.parquet as pq

        v = self.version if version is None else int(version)
        if not 0 <= v <= self.version:
            raise ValueError(f"no version {v} to checkpoint (latest is {self.version})")
        state = self._states[v]
        if state.protocol is None or state.metadata is None:
            raise ValueError(f"version {v} has no protocol or metaData to checkpoint")

        rows: list[JsonDict] = [{"protocol": state.protocol}, {"metaData": state.metadata}]
        rows += [{"txn": t} for t in state.txns.values()]
        rows += [{"domainMetadata": d} for d in state.domains.values()]
        adds = sorted(state.adds.values(), key=lambda a: a["path"])
        rows += [{"add": {**a, "dataChange": False}} for a in adds]
        rows += [
            {"remove": {**r, "dataChange": False}} for r in sorted(state.removes.values(), key=lambda r: r["path"])
        ]

        schema = _checkpoint_schema(pa)
        table = pa.Table.from_pylist(rows, schema=schema)
        os.makedirs(self.log_dir, exist_ok=True)
        target = self.checkpoint_path(v)
        tmp = os.path.join(self.log_dir, f".{os.path.basename(target)}.{uuid.uuid4().hex}.tmp")
        pq.write_table(table, tmp, compression="snappy")
        os.replace(tmp, target)
        if write_last_checkpoint:
            hint = {
                "version": v,
                "size": len(rows),
                "sizeInBytes": os.path.getsize(target),
                "numOfAddFiles": len(adds),
            }
            self._atomic_write(os.path.join(self.log_dir, "_last_checkpoint"), _dumps(hint) + "\n", overwrite=True)
        return v

    # -- internals ----------------------------------------------------------------------------------
    @staticmethod
    def _protocol_action(
        reader: int, writer: int, reader_features: Sequence[str] | None, writer_features: Sequence[str] | None
    ) -> JsonDict:
        body: JsonDict = {"minReaderVersion": int(reader), "minWriterVersion": int(writer)}
        if reader_features is not None or reader >= 3:
            body["readerFeatures"] = list(reader_features or [])
        if writer_features is not None or writer >= 7:
            body["writerFeatures"] = list(writer_features or [])
        return body

    def _require_table(self) -> JsonDict:
        if self._state.metadata is None:
            raise RuntimeError("the table has no metaData yet: call create() first")
        return self._state.metadata

    def _next_timestamp(self, timestamp_ms: int | None) -> int:
        return self.default_timestamp(self.version + 1) if timestamp_ms is None else int(timestamp_ms)

    def _add(
        self,
        spec: FileSpec,
        size: int,
        partition: Mapping[str, Any] | None,
        stats: Mapping[str, Any] | str | None,
        data_change: bool,
        ts: int,
    ) -> JsonDict:
        given: Mapping[str, Any] = {"path": spec} if isinstance(spec, str) else spec
        raw_values = given.get("partition_values", given.get("partition", partition)) or {}
        values = {str(k): _partition_str(v) for k, v in raw_values.items()}
        body: JsonDict = {
            "path": self._logged_path(str(given["path"]), values),
            "partitionValues": values,
            "size": int(given.get("size", size)),
            "modificationTime": int(given.get("modification_time", ts)),
            "dataChange": bool(given.get("data_change", data_change)),
        }
        file_stats = _stats_json(given.get("stats", stats))
        if file_stats is not None:
            body["stats"] = file_stats
        if given.get("tags") is not None:
            body["tags"] = dict(given["tags"])
        if given.get("deletion_vector") is not None:
            body["deletionVector"] = dict(given["deletion_vector"])
        return body

    def _logged_path(self, name: str, values: Mapping[str, str | None]) -> str:
        if _is_verbatim(name):
            return name
        rel = f"{partition_path(values, self.partition_columns)}/{name}" if values else name
        return quote(rel, safe=_URI_SAFE)

    def _resolve(self, spec: FileSpec) -> JsonDict:
        """The active add `spec` names, or the file `spec` describes when it is a dict."""
        name = spec if isinstance(spec, str) else str(spec["path"])
        active = list(self._state.adds.values())
        matches = [a for a in active if a["path"] == name]
        if not matches and not _is_verbatim(name):
            encoded = quote(name, safe=_URI_SAFE)
            matches = [a for a in active if a["path"] == encoded or a["path"].endswith("/" + encoded)]
        if len(matches) == 1:
            found = dict(matches[0])
            if not isinstance(spec, str):
                if spec.get("size") is not None:
                    found["size"] = int(spec["size"])
                if spec.get("partition_values") is not None:
                    found["partitionValues"] = {str(k): _partition_str(v) for k, v in spec["partition_values"].items()}
            return found
        if len(matches) > 1:
            raise KeyError(f"{name!r} matches several active files: {sorted(a['path'] for a in matches)}")
        if isinstance(spec, str):
            raise KeyError(f"{name!r} is not an active file; active files: {sorted(a['path'] for a in active)}")
        body = self._add(spec, 0, None, None, True, 0)
        if "size" not in spec:
            del body["size"]
        return body

    @staticmethod
    def _remove_body(add: Mapping[str, Any], deleted_at: int, data_change: bool) -> JsonDict:
        body: JsonDict = {
            "path": add["path"],
            "deletionTimestamp": deleted_at,
            "dataChange": data_change,
            "extendedFileMetadata": True,
            "partitionValues": dict(add.get("partitionValues") or {}),
        }
        if add.get("size") is not None:
            body["size"] = add["size"]
        for key in ("tags", "deletionVector", "baseRowId", "defaultRowCommitVersion"):
            if add.get(key) is not None:
                body[key] = add[key]
        return body

    def _write(
        self,
        actions: list[JsonDict],
        operation: str,
        parameters: Mapping[str, Any],
        ts: int,
        *,
        is_blind_append: bool | None = None,
        commit_info: bool = True,
    ) -> int:
        version = self.version + 1
        state = self._state.copy()
        state.apply(actions)
        lines = list(actions)
        if commit_info:
            info: JsonDict = {"timestamp": ts}
            conf = (state.metadata or {}).get("configuration") or {}
            if str(conf.get("delta.enableInCommitTimestamps", "")).lower() == "true":
                info["inCommitTimestamp"] = ts
            info["operation"] = operation
            info["operationParameters"] = dict(parameters)
            if version > 0:
                info["readVersion"] = version - 1
            info["isolationLevel"] = "Serializable"
            if is_blind_append is not None:
                info["isBlindAppend"] = is_blind_append
            info["engineInfo"] = ENGINE_INFO
            info["txnId"] = str(uuid.uuid4())
            lines.insert(0, {"commitInfo": info})
        os.makedirs(self.log_dir, exist_ok=True)
        text = "".join(_dumps(a) + "\n" for a in lines)
        self._atomic_write(self.commit_path(version), text, overwrite=False, mtime_ms=ts)
        self._state = state
        self._states.append(state)
        self._timestamps.append(ts)
        if self.write_data_files:
            for action in actions:
                add = action.get("add")
                if add is not None:
                    self._write_data_file(add)
        return version

    def _write_data_file(self, add: Mapping[str, Any]) -> None:
        path = str(add["path"])
        if _is_verbatim(path) and ("://" in path or path.startswith(("/", "file:"))):
            return
        target = os.path.join(self.path, *unquote(path).split("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as fh:
            fh.truncate(int(add.get("size") or 0))
        mtime_ns = int(add.get("modificationTime") or 0) * 1_000_000
        os.utime(target, ns=(mtime_ns, mtime_ns))

    def _atomic_write(self, target: str, text: str, *, overwrite: bool, mtime_ms: int | None = None) -> None:
        """Write `text` to a temp file, then move it to `target` (put-if-absent unless `overwrite`)."""
        tmp = os.path.join(os.path.dirname(target), f".{os.path.basename(target)}.{uuid.uuid4().hex}.tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
        try:
            if mtime_ms is not None:
                ns = int(mtime_ms) * 1_000_000
                os.utime(tmp, ns=(ns, ns))
            if overwrite:
                os.replace(tmp, target)
                return
            try:
                os.link(tmp, target)  # atomic, fails if `target` exists
            except FileExistsError:
                raise FileExistsError(f"{target} already exists: another writer committed that version") from None
            except OSError:  # no hard links on this filesystem
                if os.path.exists(target):
                    raise FileExistsError(f"{target} already exists") from None
                os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)


def _checkpoint_schema(pa: Any) -> Any:
    """The classic checkpoint schema (PROTOCOL.md "Checkpoint Schema"): one nullable struct column per
    action type; `stats` as a JSON string, `partitionValues` as ``map<string, string>``. The file
    actions' fields are the library's own (`delta.read.file_state`), which the checkpoint writer uses
    too; `remove` keeps `stats` and `tags`, as older writers wrote them."""
    from airflow_delta_provider.delta.read.file_state import ADD_SCHEMA, REMOVE_SCHEMA

    str_map = ADD_SCHEMA.field("partitionValues").type
    add = pa.struct(list(ADD_SCHEMA))
    remove = pa.struct(list(REMOVE_SCHEMA))
    return pa.schema(
        [
            ("txn", pa.struct([("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())])),
            ("add", add),
            ("remove", remove),
            (
                "metaData",
                pa.struct(
                    [
                        ("id", pa.string()),
                        ("name", pa.string()),
                        ("description", pa.string()),
                        ("format", pa.struct([("provider", pa.string()), ("options", str_map)])),
                        ("schemaString", pa.string()),
                        ("partitionColumns", pa.list_(pa.string())),
                        ("configuration", str_map),
                        ("createdTime", pa.int64()),
                    ]
                ),
            ),
            (
                "protocol",
                pa.struct(
                    [
                        ("minReaderVersion", pa.int32()),
                        ("minWriterVersion", pa.int32()),
                        ("readerFeatures", pa.list_(pa.string())),
                        ("writerFeatures", pa.list_(pa.string())),
                    ]
                ),
            ),
            (
                "domainMetadata",
                pa.struct([("domain", pa.string()), ("configuration", pa.string()), ("removed", pa.bool_())]),
            ),
        ]
    )
