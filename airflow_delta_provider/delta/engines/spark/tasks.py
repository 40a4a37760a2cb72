"""Functions the Spark engine runs on executors. Pure Python: they import only `actions` and
`replay`, so a worker with nothing but pyspark (and this package shipped via `--py-files`) runs them."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from ...protocol.actions import INVALID_ACTION_ERRORS, AddFile, RemoveFile, action_from_json
from ...protocol.replay import InMemoryLogReplay
from ...read.aggregates import (
    FileDigest,
    FileSummary,
    TombstoneSummary,
    digest_file_rows,
    summarize_file_rows,
    summarize_tombstone_rows,
)

FILE_ACTIONS = ("add", "remove")
STATE_ACTIONS = ("protocol", "metaData", "txn", "domainMetadata", "commitInfo")
#: The tag of a line that did not parse: collected with the state actions, raised on the driver.
BAD_LINE = "!malformed"
_KNOWN = (*FILE_ACTIONS, *STATE_ACTIONS, "sidecar", "checkpointMetadata")

#: (action name, version, position, body, file key: "" unless a file action)
Parsed = tuple[str, int, int, dict[str, Any], str]


def tagger(version: int) -> Any:
    """`mapPartitionsWithIndex` function tagging each line with (version, position)."""

    def tag(index: int, rows: Iterator[tuple[str, ...]]) -> Iterator[tuple[int, int, str]]:
        for pos, row in enumerate(rows):
            line = row[0]
            if line and line.strip():
                # position = partition index, then row index: keeps log order within one file
                yield (version, (index << 40) + pos, line)

    return tag


def commit_file_lines(item: tuple[str, str]) -> Iterator[tuple[int, int, str]]:
    """(version, position, line) of each line of one whole commit file (`wholeTextFiles` record).

    Lines end at `\n` only (a trailing `\r` is blank space to JSON): `str.splitlines` would also
    split inside a JSON string holding U+2028 or another Unicode line boundary.
    """
    path, text = item
    version = int(path.rstrip("/").rsplit("/", 1)[-1].split(".", 1)[0])
    for pos, line in enumerate(text.split("\n")):
        if line.strip():
            yield (version, pos, line)


def commit_file_keys(path: str, text: str) -> Iterator[str]:
    """The keys of one commit file's file actions, exactly as the executors key them (`parse_line`);
    `ValueError` at a line that is not a valid action (the driver then leaves the keys to the
    executors, whose replay reports the line)."""
    for record in commit_file_lines((path, text)):
        parsed = parse_line(record)
        if parsed[0] == BAD_LINE:
            raise ValueError(f"{path}: {parsed[3]['message']}")
        if is_file_action(parsed):
            yield parsed[4]


def parse_line(record: tuple[int, int, str]) -> Parsed:
    """(action name, version, position, body, file key) of one log line; unknown actions give ("", ...).

    Every known action is validated here (`action_from_json`), and a file action's key (path + DV id,
    `actions.file_key`) kept. A line that is not a JSON object, or an action that is not valid (an
    add without a size, ...), gives (BAD_LINE, ..., {"message": ...}, ""): executors do not raise,
    the driver collects these with the state actions and raises the typed error naming the version,
    as the local engine does.
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


def is_file_action(p: Parsed) -> bool:
    return p[0] in FILE_ACTIONS


def is_state_action(p: Parsed) -> bool:
    """Actions the driver reconciles (and malformed lines, which it reports)."""
    return p[0] in STATE_ACTIONS or p[0] == BAD_LINE


def key_by_file(p: Parsed) -> tuple[str, tuple[int, int, str, dict[str, Any]]]:
    name, version, pos, body, key = p
    return key, (version, pos, name, body)


def reconcile_partition(items: Iterable[tuple[str, tuple[int, int, str, dict[str, Any]]]]) -> Iterator[dict[str, Any]]:
    """Replay one partition's file actions in (version, position) order with `InMemoryLogReplay`."""
    ordered = sorted((v for _, v in items), key=lambda t: (t[0], t[1]))
    replay = InMemoryLogReplay()
    replay.append(0, (a for a in (action_from_json({n: b}) for _, _, n, b in ordered) if a is not None))
    for add in replay.active_files.values():
        yield {"add": add.to_json()}
    for remove in replay.tombstones.values():
        yield {"remove": remove.to_json()}


def file_summary_task(small_file_bytes: int) -> Any:
    """`mapPartitions` function: one `FileSummary` per partition of reconciled file actions."""

    def run(rows: Iterator[dict[str, Any]]) -> Iterator[FileSummary]:
        yield summarize_file_rows(rows, small_file_bytes)

    return run


def digest_task(small_file_bytes: int, partition_columns: tuple[str, ...], max_groups: int) -> Any:
    """`mapPartitions` function: one `FileDigest` per partition of reconciled file actions."""

    def run(rows: Iterator[dict[str, Any]]) -> Iterator[FileDigest]:
        yield digest_file_rows(rows, small_file_bytes, partition_columns, max_groups)

    return run


def tombstone_summary_task(cutoff_ms: int, partition_columns: tuple[str, ...]) -> Any:
    """`mapPartitions` function: one `TombstoneSummary` per partition of reconciled file actions."""

    def run(rows: Iterator[dict[str, Any]]) -> Iterator[TombstoneSummary]:
        yield summarize_tombstone_rows(rows, cutoff_ms, partition_columns)

    return run


def is_add(row: dict[str, Any]) -> bool:
    return "add" in row


def is_remove(row: dict[str, Any]) -> bool:
    return "remove" in row


def add_path(row: dict[str, Any]) -> str:
    return row["add"]["path"]


def add_path_row(row: dict[str, Any]) -> tuple[str]:
    return (row["add"]["path"],)


def key_row(item: tuple[str, Any]) -> tuple[str]:
    """The file key of a `key_by_file` pair, as a one-column row."""
    return (item[0],)


def first_json(row: Any) -> dict[str, Any]:
    """The JSON text in a row's first column, parsed."""
    return json.loads(row[0])


def removed_after(cutoff_ms: int) -> Any:
    """Filter: tombstones deleted after `cutoff_ms` (missing timestamps count as 0)."""

    def keep(row: dict[str, Any]) -> bool:
        rm = row.get("remove")
        return rm is not None and (rm.get("deletionTimestamp") or 0) > cutoff_ms

    return keep
