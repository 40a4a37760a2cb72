"""What a commit says about itself: `commitInfo` and in-commit timestamps (pure).

`commitInfo` is optional (PROTOCOL.md "Commit Provenance Information") but history and in-commit timestamps
(PROTOCOL.md "In-Commit Timestamps") depend on it, so every commit written here carries one, first.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from .actions import Action, CommitInfo, Metadata, Protocol, action_to_json
from .table_features import table_features
from .table_properties import ICT_ENABLEMENT_TIMESTAMP, ICT_ENABLEMENT_VERSION, in_commit_timestamps_enabled

SERIALIZABLE = "Serializable"
WRITE_SERIALIZABLE = "WriteSerializable"
SNAPSHOT_ISOLATION = "SnapshotIsolation"


def encode_operation_parameters(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """`operationParameters` as Spark writes them: strings, booleans, numbers and null as they are,
    lists and maps JSON-encoded into strings (`"partitionBy": "[]"`, `"predicate": "[\\"id > 1\\"]"`)."""
    out: dict[str, Any] = {}
    for key, value in parameters.items():
        if isinstance(value, list | tuple | Mapping):
            value = json.dumps(value if not isinstance(value, tuple) else list(value), separators=(",", ":"))
        elif value is not None and not isinstance(value, str | bool | int | float):
            value = str(value)
        out[str(key)] = value
    return out


def in_commit_timestamps_active(protocol: Protocol, metadata: Metadata) -> bool:
    """True when commits must carry `inCommitTimestamp` (feature supported and property on)."""
    return "inCommitTimestamp" in table_features(protocol) and in_commit_timestamps_enabled(metadata.configuration)


def next_in_commit_timestamp(now_ms: int, previous_commit_ms: int) -> int:
    """The in-commit timestamp of a commit after one stamped `previous_commit_ms` (strictly later)."""
    return max(int(now_ms), int(previous_commit_ms) + 1)


def commit_timestamp(commit_info: CommitInfo | None, file_modification_time: int) -> int:
    """A commit's time for ordering the next one: its in-commit timestamp, else its file's mtime
    (Spark `resolveTimestampOrderingConflicts` for a winner that predates in-commit timestamps)."""
    ict = None if commit_info is None else commit_info.in_commit_timestamp
    return file_modification_time if ict is None else ict


def with_ict_enablement(new: Metadata, read: Metadata, *, version: int, in_commit_timestamp: int) -> Metadata:
    """`new` with the enablement properties set when this commit turns in-commit timestamps on for a
    table that had them off (Spark `InCommitTimestampUtils.getUpdatedMetadataWithICTEnablementInfo`)."""
    if in_commit_timestamps_enabled(read.configuration) or not in_commit_timestamps_enabled(new.configuration):
        return new
    conf = dict(new.configuration)
    conf[ICT_ENABLEMENT_VERSION] = str(version)
    conf[ICT_ENABLEMENT_TIMESTAMP] = str(in_commit_timestamp)
    return replace(new, configuration=conf)


def build_commit_info(
    *,
    timestamp: int,
    operation: str,
    parameters: Mapping[str, Any],
    read_version: int | None,
    isolation_level: str,
    is_blind_append: bool,
    txn_id: str,
    engine_info: str,
    in_commit_timestamp: int | None = None,
    operation_metrics: Mapping[str, Any] | None = None,
    user_metadata: str | None = None,
    tags: Mapping[str, str] | None = None,
) -> CommitInfo:
    """The `commitInfo` of one commit attempt, fields in Spark's order (`readVersion` omitted at creation)."""
    raw = {
        "inCommitTimestamp": None if in_commit_timestamp is None else int(in_commit_timestamp),
        "timestamp": int(timestamp),
        "operation": operation,
        "operationParameters": encode_operation_parameters(parameters),
        "readVersion": read_version,
        "isolationLevel": isolation_level,
        "isBlindAppend": is_blind_append,
        "operationMetrics": None
        if operation_metrics is None
        else {str(k): str(v) for k, v in operation_metrics.items()},
        "userMetadata": user_metadata,
        "tags": None if tags is None else {str(k): str(v) for k, v in tags.items()},
        "engineInfo": engine_info,
        "txnId": txn_id,
    }
    return CommitInfo({k: v for k, v in raw.items() if v is not None})


def commit_bytes(actions: Iterable[Action]) -> bytes:
    """A commit file's content: one compact JSON object per line, in the order given."""
    lines = [json.dumps(action_to_json(a), separators=(",", ":"), ensure_ascii=False) for a in actions]
    return ("\n".join(lines) + "\n").encode("utf-8")
