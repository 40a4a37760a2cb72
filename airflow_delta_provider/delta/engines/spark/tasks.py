"""What the Spark engine's executors run (`mapInArrow` functions). The module imports only the standard
library, `actions` and `replay`; pyarrow is imported inside the tasks, which `mapInArrow` needs anyway."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from ...protocol.actions import INVALID_ACTION_ERRORS, AddFile, RemoveFile, action_from_json
from ...protocol.replay import InMemoryLogReplay

FILE_ACTIONS = ("add", "remove")
STATE_ACTIONS = ("protocol", "metaData", "txn", "domainMetadata", "commitInfo")
#: The tag of a line that did not parse: collected with the state actions, raised on the driver.
BAD_LINE = "!malformed"
_KNOWN = (*FILE_ACTIONS, *STATE_ACTIONS, "sidecar", "checkpointMetadata")

#: (action name, version, position, body, file key: "" unless a file action)
Parsed = tuple[str, int, int, dict[str, Any], str]
#: `parse_task`'s output: one row per log line (`body` as JSON text).
PARSED_SCHEMA = "name string, version long, pos long, body string, key string"
_PARSED = ("name", "version", "pos", "body", "key")
_SQL_TYPES = {"string": "string", "int64": "long", "bool": "boolean"}
#: `reconcile_task`'s output: one row per reconciled file action, the summary columns beside its JSON.
FILES_SCHEMA = (
    "is_add boolean, path string, size long, partition_values map<string,string>, deletion_ts long, json string"
)


def ddl(fields: Iterable[tuple[str, Any]]) -> str:
    """The Spark DDL schema of (name, Arrow type) pairs (strings, int64s and booleans)."""
    return ", ".join(f"{name} {_SQL_TYPES[str(t)]}" for name, t in fields)


def batch_rows(batch: Any, names: Iterable[str]) -> Iterator[tuple[Any, ...]]:
    """The rows of an Arrow batch's columns `names`, as tuples."""
    return zip(*(batch.column(n).to_pylist() for n in names), strict=True)


def log_version(path: str) -> int:
    """The version a log file's name starts with (`<version>.json`, `<version>.checkpoint...`)."""
    return int(path.rstrip("/").rsplit("/", 1)[-1].split(".", 1)[0])


def commit_file_lines(item: tuple[str, str]) -> Iterator[tuple[int, int, str]]:
    """(version, position, line) of each line of one whole commit file.

    Lines end at `\n` only (a trailing `\r` is blank space to JSON): `str.splitlines` would also
    split inside a JSON string holding U+2028 or another Unicode line boundary.
    """
    path, text = item
    version = log_version(path)
    for pos, line in enumerate(text.split("\n")):
        if line.strip():
            yield (version, pos, line)


def commit_file_keys(path: str, text: str) -> Iterator[str]:
    """The keys of one commit file's file actions, exactly as the executors key them (`parse_line`);
    `ValueError` at a line that is not a valid action (the executors then report it)."""
    for record in commit_file_lines((path, text)):
        parsed = parse_line(record)
        if parsed[0] == BAD_LINE:
            raise ValueError(f"{path}: {parsed[3]['message']}")
        if parsed[0] in FILE_ACTIONS:
            yield parsed[4]


def parse_line(record: tuple[int, int, str]) -> Parsed:
    """(action name, version, position, body, file key) of one log line; unknown actions give ("", ...).

    Known actions are validated (`action_from_json`). A line that is not a JSON object or not a valid
    action gives (BAD_LINE, ..., {"message": ...}, ""): executors do not raise, the driver collects
    these with the state actions and raises the typed error naming the version, as the local engine does.
    """
    version, pos, line = record
    try:
        obj = json.loads(line)
    except ValueError as exc:
        return BAD_LINE, version, pos, {"message": f"Line is not valid JSON ({exc})"}, ""
    if not isinstance(obj, dict):
        return BAD_LINE, version, pos, {"message": "Line is not a JSON object"}, ""
    for name, body in obj.items():
        if body is not None and name in _KNOWN:
            try:
                action = action_from_json({name: body})
            except INVALID_ACTION_ERRORS as exc:
                return BAD_LINE, version, pos, {"message": f"Invalid action {sorted(obj)}: {exc}"}, ""
            key = action.key if isinstance(action, AddFile | RemoveFile) else ""
            return name, version, pos, body, key
    return "", version, pos, {}, ""


def parse_task(batches: Iterator[Any]) -> Iterator[Any]:
    """`mapInArrow` over (path, pos, value) rows: a whole commit file (pos 0) or one line of a JSON
    checkpoint (pos: its row id), as `PARSED_SCHEMA` rows, the version taken from the file name."""
    import pyarrow as pa

    for batch in batches:
        rows = []
        for path, start, text in batch_rows(batch, ("path", "pos", "value")):
            for version, pos, line in commit_file_lines((path, text or "")):
                name, _, _, body, key = parse_line((version, start + pos, line))
                rows.append(dict(zip(_PARSED, (name, version, start + pos, json.dumps(body), key), strict=True)))
        schema = pa.schema([(n, pa.string() if n in ("name", "body", "key") else pa.int64()) for n in _PARSED])
        yield pa.RecordBatch.from_pylist(rows, schema=schema)


def reconcile_task(batches: Iterator[Any]) -> Iterator[Any]:
    """`mapInArrow` over one partition of file actions (hash-partitioned by file key): replayed in
    (version, position) order with `InMemoryLogReplay`, the local engine's replay; `FILES_SCHEMA` rows."""
    import pyarrow as pa

    rows = [r for b in batches for r in batch_rows(b, _PARSED)]
    rows.sort(key=lambda r: (r[1], r[2]))
    replay = InMemoryLogReplay()
    replay.append(0, (a for a in (action_from_json({r[0]: json.loads(r[3])}) for r in rows) if a is not None))
    out = [file_row(a) for a in (*replay.active_files.values(), *replay.tombstones.values())]
    pv = pa.map_(pa.string(), pa.string())
    types = {"is_add": pa.bool_(), "path": pa.string(), "size": pa.int64(), "partition_values": pv}
    schema = pa.schema([*types.items(), ("deletion_ts", pa.int64()), ("json", pa.string())])
    yield pa.RecordBatch.from_pylist(out, schema=schema)


def file_row(action: AddFile | RemoveFile) -> dict[str, Any]:
    """A `FILES_SCHEMA` row of a reconciled file action."""
    is_add = isinstance(action, AddFile)
    return {
        "is_add": is_add,
        "path": action.path,
        "size": action.size,
        "partition_values": None if action.partition_values is None else dict(action.partition_values),
        "deletion_ts": None if is_add else action.deletion_timestamp,  # type: ignore[union-attr]
        "json": json.dumps({action.action_name: action.to_json()}, separators=(",", ":")),
    }
