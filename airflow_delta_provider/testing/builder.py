"""`DeltaLogBuilder` and `FakeClock`: the testing kit's writer (the guide is `airflow_delta_provider.testing`).

The builder composes actions; the store's put-if-absent commits them, `InMemoryLogReplay` tracks the
state and `delta.maintenance.checkpoint.write_checkpoint` writes checkpoints.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from airflow_delta_provider.delta.protocol.actions import INVALID_ACTION_ERRORS, Action, action_from_json
from airflow_delta_provider.delta.protocol.replay import InMemoryLogReplay
from airflow_delta_provider.delta.protocol.schema import HIVE_DEFAULT_PARTITION
from airflow_delta_provider.delta.storage import is_local, local_path, store_for

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


class FakeClock:
    """A clock for `DeltaLog(..., clock=clock)`: "now" in epoch ms, changed only by `set()` and `advance()`."""

    def __init__(self, now_ms: int = DEFAULT_START_TIME_MS) -> None:
        self.now_ms = int(now_ms)

    def __call__(self) -> int:
        return self.now_ms

    def set(self, now_ms: int) -> int:
        self.now_ms = int(now_ms)
        return self.now_ms

    def advance(self, ms: int) -> int:
        return self.set(self.now_ms + int(ms))

    def __repr__(self) -> str:
        return f"FakeClock({self.now_ms})"


def _hive_escape(value: str) -> str:
    return "".join(f"%{ord(c):02X}" if c in _HIVE_ESCAPED else c for c in value)


def _partition_str(value: Any) -> str | None:
    """A partition value as the log serializes it (None and "" are null)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value) or None


def partition_path(partition_values: Mapping[str, str | None], columns: Sequence[str] = ()) -> str:
    """The (not yet URI-encoded) partition directory, e.g. ``date=2024-01-01/region=eu``: `columns` (the
    table's partition columns) first, then the other keys; null is ``__HIVE_DEFAULT_PARTITION__``."""
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
    return stats if stats is None or isinstance(stats, str) else _dumps(stats)


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _struct_type(schema: SchemaSpec) -> JsonDict:
    """The Delta struct type of a `SchemaSpec`."""
    if schema.get("type") == "struct" and isinstance(schema.get("fields"), list):
        return {"type": "struct", "fields": [dict(f) for f in schema["fields"]]}
    return {"type": "struct", "fields": [_field(name, type_) for name, type_ in schema.items()]}


def _field(name: str, type_: Any, nullable: bool = True, metadata: Mapping[str, Any] | None = None) -> JsonDict:
    return {"name": name, "type": type_, "nullable": nullable, "metadata": dict(metadata or {})}


def _parsed(actions: Iterable[Mapping[str, Any]]) -> list[Action]:
    """The library's actions for log lines; one it cannot parse (a broken one from `commit()`) is not tracked."""
    out = []
    for line in actions:
        try:
            action = action_from_json(line)
        except INVALID_ACTION_ERRORS:
            continue
        if action is not None:
            out.append(action)
    return out


class DeltaLogBuilder:
    """Writes the `_delta_log` of a Delta table, one commit per call.

    Args:
        path: table root: a local directory (created on the first commit) or an object-store URI
            (``s3://bucket/table``) with `storage_options` (the library's names, see `delta.storage`).
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
            ``modificationTime`` on a local table) for every added relative path, e.g. for VACUUM tests.

    Every commit method returns the version it wrote; all but `create()` and `commit()` need the table.
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
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        raw = os.fspath(path)
        self.local = is_local(raw)
        self.path: str = local_path(raw) if self.local else raw.rstrip("/")
        self.storage_options: dict[str, Any] = dict(storage_options or {})
        self.store = store_for(self.path, self.storage_options)
        self.log_dir: str = self.store.join(self.path, "_delta_log")
        self.start_time_ms, self.step_ms = int(start_time_ms), int(step_ms)
        self.write_data_files = write_data_files
        self._schema, self._partition_columns = _struct_type(schema or {}), list(partition_columns)
        self._configuration = dict(configuration or {})
        self._protocol = _protocol_action(protocol[0], protocol[1], reader_features, writer_features)
        self._table_id, self._name, self._description = table_id or str(uuid.uuid4()), name, description
        self._replay = InMemoryLogReplay()  # the library's reconciliation of every action written
        self._timestamps: list[int] = []  # the commit timestamp of each version

    # -- state (the library's replay of what was written) -------------------------------------------
    @property
    def uri(self) -> str:
        """The table root as a URI (``file://`` for a local table)."""
        return Path(self.path).as_uri() if self.local else self.path

    @property
    def version(self) -> int:
        """The latest version written (-1 before the first commit)."""
        return len(self._timestamps) - 1

    @property
    def files(self) -> dict[str, JsonDict]:
        """The active files as replay reports them (``dataChange`` false): logged path -> add body."""
        return {a.path: a.to_json() for a in self._replay.active_files.values()}

    @property
    def tombstones(self) -> dict[str, JsonDict]:
        """Every remove the log holds (retention is not applied): logged path -> remove action body."""
        return {r.path: r.to_json() for r in self._replay.tombstones.values()}

    @property
    def metadata(self) -> JsonDict | None:
        """The current ``metaData`` action body."""
        md = self._replay.current_metadata
        return None if md is None else md.to_json()

    @property
    def protocol(self) -> JsonDict | None:
        """The current ``protocol`` action body."""
        p = self._replay.current_protocol
        return None if p is None else p.to_json()

    @property
    def schema(self) -> JsonDict:
        """The current schema as a Delta struct type dict (the one `create()` will write before it)."""
        md = self._replay.current_metadata
        return json.loads(md.schema_string if md is not None and md.schema_string else _dumps(self._schema))

    @property
    def partition_columns(self) -> list[str]:
        md = self._replay.current_metadata
        return list(self._partition_columns if md is None else md.partition_columns)

    @property
    def configuration(self) -> dict[str, str]:
        md = self._replay.current_metadata
        return dict(self._configuration if md is None else md.configuration)

    def commit_path(self, version: int) -> str:
        """The commit file of `version`."""
        return self.store.join(self.log_dir, f"{version:020d}.json")

    def checkpoint_path(self, version: int) -> str:
        """The classic checkpoint file of `version`."""
        return self.store.join(self.log_dir, f"{version:020d}.checkpoint.parquet")

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
        ts = self._begin(timestamp_ms, table=False)
        metadata: JsonDict = {
            "id": self._table_id,
            "format": {"provider": "parquet", "options": {}},
            "schemaString": _dumps(self._schema),
            "partitionColumns": list(self._partition_columns),
            "configuration": dict(self._configuration),
            "createdTime": ts,
            "name": self._name,
            "description": self._description,
        }
        params = {
            "isManaged": "false",
            "description": self._description,
            "partitionBy": _dumps(self._partition_columns),
            "properties": _dumps(self._configuration),
        }
        metadata = {k: v for k, v in metadata.items() if v is not None}
        return self._write([{"protocol": dict(self._protocol)}, {"metaData": metadata}], "CREATE TABLE", params, ts)

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
        ts = self._begin(timestamp_ms)
        actions = [{"add": self._add(f, size, partition, stats, data_change, ts)} for f in files]
        params = {"mode": "Append", "partitionBy": _dumps(self.partition_columns)}
        return self._write(actions + _txn(txn, ts), "WRITE", params, ts, is_blind_append=True)

    def remove(
        self,
        files: Iterable[FileSpec],
        *,
        deletion_timestamp_ms: int | None = None,
        data_change: bool = True,
        operation: str = "DELETE",
        timestamp_ms: int | None = None,
    ) -> int:
        """A DELETE commit removing active `files`, matched by logged path, added name or unique base name
        (else `KeyError`; a dict with ``path`` removes a file never added). The tombstone copies the add."""
        ts = self._begin(timestamp_ms)
        deleted_at = ts if deletion_timestamp_ms is None else int(deletion_timestamp_ms)
        removes = [{"remove": _remove_body(self._resolve(f), deleted_at, data_change)} for f in files]
        return self._write(removes, operation, {"predicate": "[]"}, ts)

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
        ts = self._begin(timestamp_ms)
        actions = [{"remove": _remove_body(add, ts, True)} for add in self.files.values()]
        actions += [{"add": self._add(f, size, partition, stats, True, ts)} for f in files]
        params = {"mode": "Overwrite", "partitionBy": _dumps(self.partition_columns)}
        return self._write(actions + _txn(txn, ts), "WRITE", params, ts)

    def set_properties(self, properties: Mapping[str, str | None], *, timestamp_ms: int | None = None) -> int:
        """A SET TBLPROPERTIES commit: a metaData with `properties` merged in (a None value unsets a key)."""
        ts = self._begin(timestamp_ms)
        conf = {**self.configuration, **{k: str(v) for k, v in properties.items() if v is not None}}
        conf = {k: v for k, v in conf.items() if k not in properties or properties[k] is not None}
        shown = {k: v for k, v in properties.items() if v is not None}
        return self._metadata({"configuration": conf}, "SET TBLPROPERTIES", {"properties": _dumps(shown)}, ts)

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
        ts = self._begin(timestamp_ms)
        schema = self.schema
        if any(f["name"] == name for f in schema["fields"]):
            raise ValueError(f"column {name!r} already exists")
        schema["fields"].append(new_field := _field(name, data_type, nullable, metadata))
        params = {"columns": _dumps([{"column": new_field}])}
        return self._metadata({"schemaString": _dumps(schema)}, "ADD COLUMNS", params, ts)

    def change_schema(
        self,
        schema: SchemaSpec,
        *,
        partition_columns: Sequence[str] | None = None,
        operation: str = "REPLACE COLUMNS",
        timestamp_ms: int | None = None,
    ) -> int:
        """A commit whose metaData replaces the schema (and, if given, the partition columns)."""
        ts = self._begin(timestamp_ms)
        struct = _struct_type(schema)
        changes: JsonDict = {"schemaString": _dumps(struct)}
        if partition_columns is not None:
            changes["partitionColumns"] = list(partition_columns)
        return self._metadata(changes, operation, {"columns": _dumps(struct["fields"])}, ts)

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
        ts = self._begin(timestamp_ms)
        protocol = _protocol_action(min_reader_version, min_writer_version, reader_features, writer_features)
        return self._write([{"protocol": protocol}], "UPGRADE PROTOCOL", {"newProtocol": _dumps(protocol)}, ts)

    def txn(
        self, app_id: str, version: int, *, last_updated: int | None = None, timestamp_ms: int | None = None
    ) -> int:
        """A STREAMING UPDATE commit holding one SetTransaction (``lastUpdated`` defaults to the commit time)."""
        ts = self._begin(timestamp_ms)
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
        """A commit holding one domainMetadata action (a dict configuration as JSON; the writer feature
        ``domainMetadata`` is not checked)."""
        ts = self._begin(timestamp_ms)
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
        """The escape hatch: raw action dicts (``{"add": {...}}``, ...) written as given, broken ones too.
        A commitInfo is prepended unless they hold one; non-string ``stats`` are JSON-encoded."""
        ts = self._begin(timestamp_ms, table=False)
        out: list[JsonDict] = []
        for action in map(dict, actions):
            for kind in ("add", "remove"):
                body = action.get(kind)
                if isinstance(body, Mapping) and not isinstance(body.get("stats"), str | None):
                    action[kind] = {**body, "stats": _stats_json(body["stats"])}
            out.append(action)
        has_info = any(a.get("commitInfo") is not None for a in out)
        return self._write(out, operation, dict(operation_parameters or {}), ts, commit_info=not has_info)

    def checkpoint(self, version: int | None = None, *, write_last_checkpoint: bool = True) -> int:
        """The library's checkpoint of `version` (default: the latest), written with the clock at that
        version's commit time, so it keeps what a writer would have kept then; returns the version.

        ``write_last_checkpoint=False`` leaves ``_last_checkpoint`` as it was (for readers that must find a
        checkpoint without the hint). An unknown writer feature is refused (`UnsupportedFeatureError`):
        checkpoint first, then `set_protocol` to add it.
        """
        from airflow_delta_provider.delta import DeltaLog
        from airflow_delta_provider.delta.maintenance import checkpoint as writer

        v = self.version if version is None else int(version)
        if not 0 <= v <= self.version:
            raise ValueError(f"no version {v} to checkpoint (latest is {self.version})")
        hint = self.store.join(self.log_dir, "_last_checkpoint")
        previous = None if write_last_checkpoint or self.store.head(hint) is None else self.store.read_bytes(hint)
        at = self._timestamps[v]
        log = DeltaLog(self.path, storage_options=self.storage_options, clock=lambda: at)
        writer.write_checkpoint(log, version=v)
        if not write_last_checkpoint and previous is None:
            self.store.delete_many([hint])
        elif not write_last_checkpoint:
            self.store.put(hint, previous)
        return v

    # -- internals ----------------------------------------------------------------------------------
    def _begin(self, timestamp_ms: int | None, *, table: bool = True) -> int:
        """The next commit's timestamp; the table must exist unless `table` is False."""
        if table and self._replay.current_metadata is None:
            raise RuntimeError("the table has no metaData yet: call create() first")
        return self.default_timestamp(self.version + 1) if timestamp_ms is None else int(timestamp_ms)

    def _metadata(self, changes: JsonDict, operation: str, params: JsonDict, ts: int) -> int:
        return self._write([{"metaData": {**(self.metadata or {}), **changes}}], operation, params, ts)

    def _add(self, spec: FileSpec, size: int, partition: Any, stats: Any, data_change: bool, ts: int) -> JsonDict:
        given: Mapping[str, Any] = {"path": spec} if isinstance(spec, str) else spec
        raw_values = given.get("partition_values", given.get("partition", partition)) or {}
        values = {str(k): _partition_str(v) for k, v in raw_values.items()}
        body: JsonDict = {
            "path": self._logged_path(str(given["path"]), values),
            "partitionValues": values,
            "size": int(given.get("size", size)),
            "modificationTime": int(given.get("modification_time", ts)),
            "dataChange": bool(given.get("data_change", data_change)),
            "stats": _stats_json(given.get("stats", stats)),
            "tags": None if given.get("tags") is None else dict(given["tags"]),
            "deletionVector": None if given.get("deletion_vector") is None else dict(given["deletion_vector"]),
        }
        return {k: v for k, v in body.items() if v is not None}

    def _logged_path(self, name: str, values: Mapping[str, str | None]) -> str:
        if _is_verbatim(name):
            return name
        rel = f"{partition_path(values, self.partition_columns)}/{name}" if values else name
        return quote(rel, safe=_URI_SAFE)

    def _resolve(self, spec: FileSpec) -> JsonDict:
        """The active add `spec` names, or the file `spec` describes when it is a dict."""
        name = spec if isinstance(spec, str) else str(spec["path"])
        active = list(self.files.values())
        matches = [a for a in active if a["path"] == name]
        if not matches and not _is_verbatim(name):
            encoded = quote(name, safe=_URI_SAFE)
            matches = [a for a in active if a["path"] == encoded or a["path"].endswith("/" + encoded)]
        if len(matches) > 1:
            raise KeyError(f"{name!r} matches several active files: {sorted(a['path'] for a in matches)}")
        if not matches and isinstance(spec, str):
            raise KeyError(f"{name!r} is not an active file; active files: {sorted(a['path'] for a in active)}")
        if not matches:
            body = self._add(spec, 0, None, None, True, 0)
            return body if "size" in spec else {k: v for k, v in body.items() if k != "size"}
        found = dict(matches[0])
        if not isinstance(spec, str) and spec.get("size") is not None:
            found["size"] = int(spec["size"])
        if not isinstance(spec, str) and spec.get("partition_values") is not None:
            found["partitionValues"] = {str(k): _partition_str(v) for k, v in spec["partition_values"].items()}
        return found

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
        """Create the next commit file with the store's put-if-absent, then replay what it holds."""
        version = self.version + 1
        lines = list(actions)
        if commit_info:
            metadata = [a["metaData"] for a in actions if isinstance(a.get("metaData"), Mapping)]
            conf = (metadata[-1] if metadata else self.metadata or {}).get("configuration") or {}
            ict = str(conf.get("delta.enableInCommitTimestamps", "")).lower() == "true"
            info: JsonDict = {
                "timestamp": ts,
                "inCommitTimestamp": ts if ict else None,
                "operation": operation,
                "operationParameters": dict(parameters),
                "readVersion": version - 1 if version > 0 else None,
                "isolationLevel": "Serializable",
                "isBlindAppend": is_blind_append,
                "engineInfo": ENGINE_INFO,
                "txnId": str(uuid.uuid4()),
            }
            lines.insert(0, {"commitInfo": {k: v for k, v in info.items() if v is not None}})
        parsed = _parsed(actions)
        target = self.commit_path(version)
        try:
            self.store.put_if_absent(target, "".join(_dumps(a) + "\n" for a in lines).encode())
        except FileExistsError:
            raise FileExistsError(f"{target} already exists: another writer committed that version") from None
        if self.local:  # the commit file's mtime is the commit time (time travel by timestamp without ICT)
            os.utime(target, ns=(ts * 1_000_000, ts * 1_000_000))
        self._replay.append(version, parsed)
        self._timestamps.append(ts)
        for add in (a["add"] for a in actions if self.write_data_files and a.get("add") is not None):
            self._write_data_file(add)
        return version

    def _write_data_file(self, add: Mapping[str, Any]) -> None:
        path, size = str(add["path"]), int(add.get("size") or 0)
        if "://" in path or path.startswith(("/", "file:")):
            return
        if not self.local:
            self.store.put(self.store.join(self.path, unquote(path)), bytes(size))
            return
        target = os.path.join(self.path, *unquote(path).split("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as fh:
            fh.truncate(size)
        mtime_ns = int(add.get("modificationTime") or 0) * 1_000_000
        os.utime(target, ns=(mtime_ns, mtime_ns))


def _protocol_action(
    reader: int, writer: int, reader_features: Sequence[str] | None, writer_features: Sequence[str] | None
) -> JsonDict:
    body: JsonDict = {"minReaderVersion": int(reader), "minWriterVersion": int(writer)}
    if reader_features is not None or reader >= 3:
        body["readerFeatures"] = list(reader_features or [])
    if writer_features is not None or writer >= 7:
        body["writerFeatures"] = list(writer_features or [])
    return body


def _txn(txn: tuple[str, int] | None, ts: int) -> list[JsonDict]:
    return [] if txn is None else [{"txn": {"appId": txn[0], "version": int(txn[1]), "lastUpdated": ts}}]


def _remove_body(add: Mapping[str, Any], deleted_at: int, data_change: bool) -> JsonDict:
    """The tombstone of an add (Delta writers' `AddFile.removeWithTimestamp`)."""
    body: JsonDict = {
        "path": add["path"],
        "deletionTimestamp": deleted_at,
        "dataChange": data_change,
        "extendedFileMetadata": True,
        "partitionValues": dict(add.get("partitionValues") or {}),
    }
    keep = ("size", "tags", "deletionVector", "baseRowId", "defaultRowCommitVersion")
    return body | {k: add[k] for k in keep if add.get(k) is not None}
