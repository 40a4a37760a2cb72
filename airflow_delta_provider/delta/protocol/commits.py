"""Commit files: newline-delimited JSON, one action per line (PROTOCOL.md "Delta Log Entries").

Pure: bytes in, actions out. A line that is not a JSON object, or an action that is not valid (an
add without a size, ...), is a `MalformedCommitError` naming the table, version and file.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import MalformedCommitError
from .actions import INVALID_ACTION_ERRORS, Action, action_from_json


def parse_commit_bytes(data: bytes, *, table: str, version: int, file: str) -> list[dict[str, Any]]:
    """The JSON objects of a newline-delimited commit, in order; a bad line is a typed error."""
    body = data.strip()
    if not body:
        return []
    try:  # one parse for the whole file; a blank line or two objects on a line fall through
        objs = json.loads(b"[" + body.replace(b"\n", b",") + b"]")
    except ValueError:
        objs = None
    if objs is not None and len(objs) == body.count(b"\n") + 1 and all(type(o) is dict for o in objs):
        return objs
    out: list[dict[str, Any]] = []
    for number, line in enumerate((line for line in data.split(b"\n") if line.strip()), start=1):
        try:
            obj = json.loads(line)
        except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
            reason = getattr(exc, "msg", None) or str(exc)
            raise MalformedCommitError(
                f"Commit line {number} is not valid JSON ({reason}); the commit may be truncated",
                table=table,
                version=version,
                file=file,
            ) from None
        if not isinstance(obj, dict):
            raise MalformedCommitError(
                f"Commit line {number} is not a JSON object", table=table, version=version, file=file
            )
        out.append(obj)
    return out


def parse_commit(data: bytes, *, table: str, version: int, file: str) -> list[Action]:
    """The actions of one commit file's bytes, in log order (unknown action kinds are skipped)."""
    out: list[Action] = []
    for obj in parse_commit_bytes(data, table=table, version=version, file=file):
        try:
            action = action_from_json(obj)
        except INVALID_ACTION_ERRORS as exc:
            raise MalformedCommitError(
                f"Invalid action {sorted(obj)}: {exc}", table=table, version=version, file=file
            ) from None
        if action is not None:
            out.append(action)
    return out
