"""What the Spark engine's executors run for a replay: plain Python UDFs (no Arrow), so a worker with nothing
but pyspark (and this package via `--py-files`) runs them; this module imports only the standard library,
`actions` and `replay`. Helpers for the operations' `mapInArrow` tasks sit here too."""

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
#: `parse_text`'s result: the parsed lines of one text (`body` as JSON text).
PARSED_TYPE = "array<struct<name:string,version:bigint,pos:bigint,body:string,key:string>>"
#: `reconcile_key`'s result: the reconciled file actions, the summary columns beside their JSON.
FILES_TYPE = (
    "array<struct<is_add:boolean,path:string,size:bigint,partition_values:map<string,string>,"
    "deletion_ts:bigint,json:string>>"
)


def ddl(fields: Iterable[tuple[str, Any]]) -> Any:
    """The Spark schema (`StructType`) of (name, Arrow type) pairs (strings, int64s and booleans): a
    schema object, not DDL text, which classic PySpark parses with a call to the JVM each time."""
    from pyspark.sql import types as T

    kinds = {"string": T.StringType(), "int64": T.LongType(), "bool": T.BooleanType()}
    return T.StructType([T.StructField(name, kinds[str(t)]) for name, t in fields])


def batch_rows(batch: Any, names: Iterable[str]) -> Iterator[tuple[Any, ...]]:
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


def parse_text(path: str, start: int, text: str | None) -> list[tuple[Any, ...]]:
    """A plain Python UDF: a whole commit file (`start` 0) or one line of a JSON checkpoint (`start`: its
    row id) as `PARSED_TYPE` lines, the version taken from the file name."""
    out = []
    for version, pos, line in commit_file_lines((path, text or "")):
        name, _, _, body, key = parse_line((version, start + pos, line))
        out.append((name, version, start + pos, json.dumps(body), key))
    return out


def reconcile_key(actions: list[Any]) -> list[tuple[Any, ...]]:
    """A plain Python UDF over one file key's (version, pos, name, body) actions: replayed in (version,
    position) order with `InMemoryLogReplay`, the local engine's replay; the result as `FILES_TYPE`."""
    ordered = sorted(actions, key=lambda a: (a[0], a[1]))
    replay = InMemoryLogReplay()
    replay.append(0, (x for x in (action_from_json({a[2]: json.loads(a[3])}) for a in ordered) if x is not None))
    return [file_row(a) for a in (*replay.active_files.values(), *replay.tombstones.values())]


def file_row(action: AddFile | RemoveFile) -> tuple[Any, ...]:
    """A `FILES_TYPE` row of a reconciled file action."""
    is_add = isinstance(action, AddFile)
    return (
        is_add,
        action.path,
        action.size,
        None if action.partition_values is None else dict(action.partition_values),
        None if is_add else action.deletion_timestamp,  # type: ignore[union-attr]
        json.dumps({action.action_name: action.to_json()}, separators=(",", ":")),
    )
