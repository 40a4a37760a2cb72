"""The lake autopilot's maintenance history: a Delta table, partitioned by date, one row per (run, table,
operation), written through our own commit path so that delta-rs, Spark and DuckDB read it.

The table is created on first use (a version 0 of protocol and metaData, put-if-absent: of two first recorders
one creates it and both append). Each `record_runs` is a blind append (a WRITE commit that read nothing, so two
recorders never conflict: PROTOCOL.md "Delta Log Entries"; the loser of a version retries at the next one).

Besides what each step did, a run records each scanned table's health at plan time (`health_row`: operation
"health", status "measured"), so a table's health is charted across runs from the history alone. Those columns
came later: a history created before them gains them as nullable columns (PROTOCOL.md "Schema Evolution": an
ADD COLUMNS commit of a new `metaData`), and its older files read them as null.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..delta_log import DeltaLog, system_clock
from ..errors import InvalidArgumentError, MetadataChangedError, SchemaMismatchError, StorageError
from ..maintenance.optimize import table_layout
from ..protocol.actions import action_from_json
from ..protocol.commit_info import build_commit_info, commit_bytes
from ..protocol.filenames import commit_name
from ..protocol.lake_health import TableHealth
from ..protocol.optimize import Bin
from ..txn.transaction import Transaction, engine_info
from ..write.data_files import physical_table, write_data_file

if TYPE_CHECKING:  # pragma: no cover
    from ..snapshot import Snapshot

PARTITION = "date"
#: (name, Delta type): the history's columns, `date` (the run's start, UTC) the partition column.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("date", "date"),
    ("run_id", "string"),
    ("dag_id", "string"),
    ("started", "timestamp"),
    ("ended", "timestamp"),
    ("table", "string"),
    ("operation", "string"),
    ("status", "string"),
    ("version", "long"),
    ("files_removed", "long"),
    ("files_added", "long"),
    ("bytes_removed", "long"),
    ("bytes_added", "long"),
    ("rows_before", "long"),
    ("rows_after", "long"),
    ("proof", "string"),
    ("est_bytes", "long"),
    ("est_requests", "long"),
    ("est_seconds", "double"),
    ("est_files_removed", "long"),
    ("est_bytes_reclaimed", "long"),
    ("est_value", "double"),
    ("actual_seconds", "double"),
    ("actual_files_removed", "long"),
    ("actual_bytes_reclaimed", "long"),
    ("error_class", "string"),
    ("error_message", "string"),
    ("engine", "string"),  # where the step ran: the plan's engine ("local", "spark")
)
#: The health columns of a "health" row (`health_row`): the table's health from its log at plan time (the
#: row's `version` is the version scanned, `started` the scan's time). Nullable; other rows leave them null.
HEALTH_COLUMNS: tuple[tuple[str, str], ...] = (
    ("files", "long"),
    ("bytes", "long"),
    ("small_files", "long"),
    ("small_file_bytes", "long"),
    ("small_file_share", "double"),
    ("rows", "long"),
    ("dv_rows", "long"),
    ("files_without_stats", "long"),
    ("partitions", "long"),
    ("tombstones", "long"),
    ("tombstone_bytes", "long"),
    ("reclaimable_bytes", "long"),
    ("commits_since_checkpoint", "long"),
    ("checkpoint_version", "long"),
    ("log_files", "long"),
    ("log_files_past_retention", "long"),
    ("write_rate_per_day", "double"),
)
COLUMNS = COLUMNS + HEALTH_COLUMNS
#: The operation and status of a health row.
HEALTH_OPERATION, MEASURED = "health", "measured"
_NAMES = {name for name, _ in COLUMNS}
_ARROW = {
    "date": pa.date32(),
    "string": pa.string(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "long": pa.int64(),
    "double": pa.float64(),
}


def _field(name: str, type_: str) -> dict[str, Any]:
    return {"name": name, "type": type_, "nullable": name != "run_id", "metadata": {}}


def schema_json() -> dict[str, Any]:
    return {"type": "struct", "fields": [_field(n, t) for n, t in COLUMNS]}


def _iso_ms(ms: int | None) -> str | None:
    return None if ms is None else dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat()


def health_row(health: TableHealth) -> dict[str, Any]:
    """A table's health (`delta.lake.scan`) as a history row (no `run_id`: the recorder adds it), plain JSON
    (an XCom value): files, bytes and small files as the scan counted them with the table's policy,
    tombstones not yet deleted (those past the deleted-file retention apart), the log since its checkpoint."""
    t = health.to_dict()["totals"]
    at = _iso_ms(health.scanned_at)
    return {
        "table": health.table,
        "operation": HEALTH_OPERATION,
        "status": MEASURED,
        "version": health.version,
        "started": at,
        "ended": at,
        "files": t["num_files"],
        "bytes": t["bytes"],
        "small_files": t["small_files"],
        "small_file_bytes": sum(p.small_bytes for p in health.partitions.values()),
        "small_file_share": t["small_file_share"],
        "rows": t["rows"],
        "dv_rows": t["dv_rows"],
        "files_without_stats": t["files_without_stats"],
        "partitions": sum(1 for p in health.partitions.values() if p.num_files),
        "tombstones": t["tombstone_files_now"] + t["tombstone_files_later"],
        "tombstone_bytes": t["tombstone_bytes_now"] + t["tombstone_bytes_later"],
        "reclaimable_bytes": t["tombstone_bytes_now"],
        "commits_since_checkpoint": health.commits_since_checkpoint,
        "checkpoint_version": health.checkpoint_version,
        "log_files": health.log_files,
        "log_files_past_retention": health.log_files_past_retention,
        "write_rate_per_day": health.write_rate_per_day,
    }


def _timestamp(value: Any, name: str) -> dt.datetime | None:
    if value is None or isinstance(value, dt.datetime):
        out = value
    elif isinstance(value, str):
        out = dt.datetime.fromisoformat(value)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        out = dt.datetime.fromtimestamp(value / 1000, tz=dt.UTC)  # epoch milliseconds
    else:
        raise InvalidArgumentError(f"history {name} must be a datetime, ISO text or epoch ms", argument=name)
    return out if out is None or out.tzinfo else out.replace(tzinfo=dt.UTC)


def _normalized(row: Mapping[str, Any], index: int) -> dict[str, Any]:
    unknown = sorted(set(row) - _NAMES)
    if unknown:
        raise InvalidArgumentError(f"history row {index} has unknown column(s) {unknown}", argument=f"rows[{index}]")
    if not row.get("run_id"):
        raise InvalidArgumentError(f"history row {index} has no run_id", argument=f"rows[{index}].run_id")
    out = {name: row.get(name) for name, _ in COLUMNS}
    for name in ("started", "ended"):
        out[name] = _timestamp(out[name], name)
    if out["date"] is None:
        start = out["started"] or dt.datetime.now(dt.UTC)
        out["date"] = start.astimezone(dt.UTC).date()
    elif isinstance(out["date"], str):
        out["date"] = dt.date.fromisoformat(out["date"])
    return out


def _create(dlog: DeltaLog, clock: Callable[[], int]) -> None:
    """Version 0 (CREATE TABLE: protocol 1/2, metaData), unless another recorder made it first."""
    now = clock()
    metadata = {
        "id": str(uuid.uuid4()),
        "name": "delta_lake_autopilot_history",
        "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps(schema_json()),
        "partitionColumns": [PARTITION],
        "configuration": {"delta.appendOnly": "true"},
        "createdTime": now,
    }
    info = build_commit_info(
        timestamp=now,
        operation="CREATE TABLE",
        parameters={"isManaged": "false", "partitionBy": json.dumps([PARTITION]), "properties": "{}"},
        read_version=None,
        isolation_level="Serializable",
        is_blind_append=True,
        txn_id=str(uuid.uuid4()),
        engine_info=engine_info(),
    )
    actions = [info, action_from_json({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}})]
    actions.append(action_from_json({"metaData": metadata}))
    try:
        dlog.store.put_if_absent(dlog.store.join(dlog.log_dir, commit_name(0)), commit_bytes(actions))  # type: ignore[arg-type]
    except FileExistsError:
        pass
    except OSError as exc:
        raise StorageError(
            f"Cannot create the history table: {type(exc).__name__}: {exc}", table=dlog.table_uri, version=0
        ) from exc


def _evolved(dlog: DeltaLog, snapshot: Snapshot, clock: Callable[[], int]) -> Snapshot:
    """The history with every column of `COLUMNS`: the ones a history created by an older version lacks are
    added, nullable, at the end (an ADD COLUMNS commit of a new `metaData`: PROTOCOL.md "Schema Evolution").
    Of two recorders evolving at once one commits; the other finds the columns there. A column of another
    type is refused (`SchemaMismatchError` naming it): the history is not this provider's."""
    schema = snapshot.metadata.schema_json or {"type": "struct", "fields": []}
    have = {f["name"]: f.get("type") for f in schema.get("fields", [])}
    for name, type_ in COLUMNS:
        if name in have and have[name] != type_:
            raise SchemaMismatchError(
                f"The history's column {name!r} is {have[name]!r}, not {type_!r}: not a maintenance history",
                table=dlog.table_uri,
                version=snapshot.version,
                field_path=name,
            )
    missing = [_field(n, t) for n, t in COLUMNS if n not in have]
    if not missing:
        return snapshot
    evolved = {**schema, "fields": [*schema.get("fields", []), *missing]}
    txn = Transaction(snapshot, "ADD COLUMNS", {"columns": json.dumps([{"column": f} for f in missing])}, clock=clock)
    txn.add(replace(snapshot.metadata, schema_string=json.dumps(evolved)))
    try:
        txn.commit()
    except MetadataChangedError:  # another recorder evolved it first: read what it left
        return _evolved(dlog, dlog.update(), clock)
    return dlog.update()


def record_runs(
    history_uri: str | os.PathLike[str],
    rows: Iterable[Mapping[str, Any]],
    *,
    storage_options: Mapping[str, Any] | None = None,
    clock: Callable[[], int] | None = None,
) -> int | None:
    """Append `rows` (columns of `COLUMNS`; missing ones null, `date` from `started`) in one commit, one
    Parquet file per date; returns the version committed (None: no rows). Creates the table on first use and
    adds the columns an older history lacks first (`_evolved`)."""
    normalized = [_normalized(r, i) for i, r in enumerate(rows)]
    if not normalized:
        return None
    clock = clock or system_clock
    dlog = DeltaLog.of(history_uri, storage_options)
    if not dlog.table_exists():
        _create(dlog, clock)
    for attempt in range(_APPEND_ATTEMPTS):
        snapshot = _evolved(dlog, dlog.update(), clock)
        try:
            return _append(dlog, snapshot, normalized, clock)
        except MetadataChangedError:  # a recorder evolved the schema under this append: write it again
            if attempt == _APPEND_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


#: Appends tried when each loses to a schema change (an older file written for the old schema stays
#: untracked: VACUUM removes it).
_APPEND_ATTEMPTS = 3


def _append(dlog: DeltaLog, snapshot: Snapshot, rows: list[dict[str, Any]], clock: Callable[[], int]) -> int:
    layout = table_layout(snapshot, dlog.table_uri)
    txn = Transaction(snapshot, "WRITE", {"mode": "Append", "partitionBy": json.dumps([PARTITION])}, clock=clock)
    by_date: dict[dt.date, list[dict[str, Any]]] = {}
    for row in rows:
        by_date.setdefault(row[PARTITION], []).append(row)
    files = 0
    for day, day_rows in sorted(by_date.items()):
        data = pa.table({n: pa.array([r[n] for r in day_rows], _ARROW[t]) for n, t in COLUMNS})
        values = {PARTITION: day.isoformat()}
        rows_ = physical_table(data, layout, partition_values=values)
        bin_ = Bin(partition=f"{PARTITION}={day.isoformat()}", partition_values=values, files=())
        add = write_data_file(dlog.store, layout, bin_, rows_, f"{PARTITION}={day.isoformat()}", clock, "history")
        txn.add(replace(add, data_change=True))  # new rows: a data change, unlike a rewrite's file
        files += 1
    return txn.commit(operation_metrics={"numFiles": files, "numOutputRows": len(rows)})
