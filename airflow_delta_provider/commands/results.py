"""Stable JSON shapes of snapshots, files and tombstones, shared by every face (README "JSON output":
change them only additively). Paths are exactly as stored in the log."""

from __future__ import annotations

from typing import Any

from ..delta.protocol.actions import AddFile, Metadata, Protocol, RemoveFile
from ..delta.protocol.history import format_ms
from ..delta.protocol.table_properties import DELETED_FILE_RETENTION
from ..delta.snapshot import Snapshot


def protocol_dict(p: Protocol) -> dict[str, Any]:
    return {
        "min_reader_version": p.min_reader_version,
        "min_writer_version": p.min_writer_version,
        "reader_features": None if p.reader_features is None else list(p.reader_features),
        "writer_features": None if p.writer_features is None else list(p.writer_features),
    }


def metadata_dict(m: Metadata) -> dict[str, Any]:
    return {
        "id": m.id,
        "name": m.name,
        "description": m.description,
        "partition_columns": list(m.partition_columns),
        "configuration": dict(m.configuration),
        "schema": m.schema_json,
        "created_time": m.created_time,
    }


def file_dict(a: AddFile) -> dict[str, Any]:
    return {
        "path": a.path,
        "size": a.size,
        "partition_values": dict(a.partition_values),
        "modification_time": a.modification_time,
        "deletion_vector": None if a.deletion_vector is None else a.deletion_vector.to_json(),
    }


def tombstone_dict(r: RemoveFile, cutoff_ms: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"path": r.path, "deletion_timestamp": r.deletion_timestamp, "size": r.size}
    if cutoff_ms is not None:
        out["expired"] = r.del_timestamp <= cutoff_ms
    return out


def snapshot_dict(snap: Snapshot, *, include_files: bool = True) -> dict[str, Any]:
    """The `snapshot --json` object: summary, metadata, and (by default) files and tombstones."""
    info = snap.commit_info
    out: dict[str, Any] = {
        "table": snap.table,
        "version": snap.version,
        "timestamp_ms": snap.timestamp,
        "timestamp": format_ms(snap.timestamp),
        "operation": None if info is None else info.operation,
        "protocol": protocol_dict(snap.protocol),
        "partition_columns": list(snap.partition_columns),
        "num_files": snap.num_files,
        "size_bytes": snap.size_in_bytes,
        "num_tombstones": snap.num_tombstones(),
        "set_transactions": {k: t.version for k, t in sorted(snap.set_transactions.items())},
        "checkpoint_version": snap.log_segment.checkpoint_version,
        "metadata": metadata_dict(snap.metadata),
        "domain_metadata": {k: d.configuration for k, d in sorted(snap.domain_metadata.items())},
    }
    if include_files:
        out["files"] = [file_dict(a) for a in sorted(snap.all_files(with_stats=False), key=lambda a: a.path)]
        out["tombstones"] = [tombstone_dict(r) for r in sorted(snap.tombstones(), key=lambda r: r.path)]
    return out


def tombstone_report(
    snap: Snapshot,
    retention_hours: float | None = None,
    *,
    now_ms: int | None = None,
    include_files: bool = True,
) -> dict[str, Any]:
    """Tombstones split at the retention cutoff: retained vs past retention (safe for VACUUM); read-only."""
    retention_ms = snap.retention_window_ms(retention_hours)
    now = snap.now_ms() if now_ms is None else now_ms
    cutoff = now - retention_ms
    table_prop = snap.metadata.configuration.get(DELETED_FILE_RETENTION)
    source = "override" if retention_hours is not None else ("table_property" if table_prop else "default")
    out: dict[str, Any] = {
        "table": snap.table,
        "version": snap.version,
        "now_ms": now,
        "retention": {
            "hours": retention_ms / 3_600_000,
            "source": source,
            "table_property": table_prop,
            "cutoff_ms": cutoff,
            "cutoff": format_ms(cutoff),
        },
        **snap.tombstone_summary(retention_hours, now_ms=now).to_dict(),
    }
    if include_files:
        all_ts = sorted(snap.tombstones(include_expired=True), key=lambda r: r.path)
        out["tombstones"] = [tombstone_dict(r, cutoff) for r in all_ts]
    return out
