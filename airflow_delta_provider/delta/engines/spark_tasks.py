"""Functions the Spark engine runs on executors. Pure Python: they import only `actions` and
`replay`, so a worker with nothing but pyspark (and this package shipped via `--py-files`) runs them."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from ..actions import AddFile, RemoveFile, action_from_json
from ..errors import MalformedCommitError
from ..replay import InMemoryLogReplay

FILE_ACTIONS = ("add", "remove")
STATE_ACTIONS = ("protocol", "metaData", "txn", "domainMetadata", "commitInfo")
_KNOWN = (*FILE_ACTIONS, *STATE_ACTIONS, "sidecar", "checkpointMetadata")

Parsed = tuple[str, int, int, dict[str, Any]]


def tagger(version: int) -> Any:
    """`mapPartitionsWithIndex` function tagging each line with (version, position)."""

    def tag(index: int, rows: Iterator[tuple[str, ...]]) -> Iterator[tuple[int, int, str]]:
        for pos, row in enumerate(rows):
            line = row[0]
            if line and line.strip():
                # position = partition index, then row index: keeps log order within one file
                yield (version, (index << 40) + pos, line)

    return tag


def parse_line(record: tuple[int, int, str]) -> Parsed:
    """(action name, version, position, body) of one log line; unknown actions give ("", ...)."""
    version, pos, line = record
    try:
        obj = json.loads(line)
    except ValueError as exc:
        raise MalformedCommitError(f"Line is not valid JSON ({exc})", version=version) from None
    for name, body in obj.items():
        if body is not None and name in _KNOWN:
            return name, version, pos, body
    return "", version, pos, {}


def is_file_action(p: Parsed) -> bool:
    return p[0] in FILE_ACTIONS


def is_state_action(p: Parsed) -> bool:
    return p[0] in STATE_ACTIONS


def key_by_file(p: Parsed) -> tuple[str, tuple[int, int, str, dict[str, Any]]]:
    name, version, pos, body = p
    action = action_from_json({name: body})
    assert isinstance(action, AddFile | RemoveFile)
    return action.key, (version, pos, name, body)


def reconcile_partition(items: Iterable[tuple[str, tuple[int, int, str, dict[str, Any]]]]) -> Iterator[dict[str, Any]]:
    """Replay one partition's file actions in (version, position) order with `InMemoryLogReplay`."""
    ordered = sorted((v for _, v in items), key=lambda t: (t[0], t[1]))
    replay = InMemoryLogReplay()
    replay.append(0, (a for a in (action_from_json({n: b}) for _, _, n, b in ordered) if a is not None))
    for add in replay.active_files.values():
        yield {"add": add.to_json()}
    for remove in replay.tombstones.values():
        yield {"remove": remove.to_json()}
