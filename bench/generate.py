"""Deterministic Delta transaction logs for the benchmarks (only `_delta_log` is written).

Scales (see `SCALES` / `LOG_SCALES`):

* ``S``, ``M``, ``L``: a partitioned table (``date`` string partition column, a few hundred
  partitions) with one classic checkpoint (``N.checkpoint.parquet``, written with pyarrow in the
  Delta checkpoint schema) holding the active files, recent tombstones, txns, protocol and metaData,
  then 50 / 500 / 1,000 commits after it: appends, deletes, merges, OPTIMIZE, streaming writes with
  ``txn``, a ``SET TBLPROPERTIES`` metaData change half-way, and RESTOREs that re-add tombstoned
  paths. Every commit starts with a ``commitInfo`` (timestamp, operation).
* ``log1k``, ``log10k``, ``log100k``: long logs of small streaming commits (1,000 / 10,000 / 100,000
  versions) with a classic checkpoint every 10 versions and ``_last_checkpoint`` at the newest one,
  as a Spark-written table looks; used by the latest-version benchmark.

The generator also replays its own actions in a plain dict model and writes the expected answers
to ``<out>/_bench_manifest.json`` (a ``_``-prefixed file, which Delta readers ignore). That file is
the completion marker: a second run with the same generator version skips the work.

    .venv/bin/python bench/generate.py --scale S --out bench/.data/S [--verify]

``--verify`` loads the table with delta-rs and with ``airflow_delta_provider.delta`` and checks
version, file count, total bytes and tombstone counts against each other and the manifest.
delta-rs has no tombstone API, so its tombstones are counted with a VACUUM dry run (lite mode),
for which the generator creates zero-byte data files for the tombstoned paths (``--no-touch``
skips that; data files are otherwise not needed).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

GENERATOR_VERSION = 3
MANIFEST = "_bench_manifest.json"
BENCH_DIR = Path(__file__).resolve().parent
DEFAULT_DATA = BENCH_DIR / ".data"

#: 2025-06-01T00:00:00Z: the checkpoint's commit time of S/M/L (all timestamps are fixed, not "now").
T_BASE = 1_748_736_000_000
HOUR = 3_600_000
DAY = 24 * HOUR
MINUTE = 60_000

ENGINE_INFO = "Apache-Spark/3.5.3 Delta-Lake/3.2.1"
SCHEMA_STRING = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "amount", "type": "double", "nullable": True, "metadata": {}},
            {"name": "name", "type": "string", "nullable": True, "metadata": {}},
            {"name": "ts", "type": "timestamp", "nullable": True, "metadata": {}},
            {"name": "date", "type": "string", "nullable": True, "metadata": {}},
        ],
    },
    separators=(",", ":"),
)


@dataclass(frozen=True)
class Scale:
    name: str
    seed: int
    checkpoint_version: int
    checkpoint_adds: int
    checkpoint_removes: int
    commits: int
    partitions: int
    append_files: int  # mean files per append commit


SCALES = {
    "S": Scale("S", 11, 120, 9_800, 400, 50, 120, 6),
    "M": Scale("M", 22, 2_400, 104_800, 5_000, 500, 365, 8),
    "L": Scale("L", 33, 9_000, 1_020_000, 10_000, 1_000, 730, 14),
}


@dataclass(frozen=True)
class LogScale:
    name: str
    seed: int
    versions: int  # commits 0..versions-1
    window: int = 20  # active files kept (each commit adds one, removes the oldest)
    checkpoint_interval: int = 10
    commit_spacing_ms: int = 5 * MINUTE
    tombstone_retention: str = "interval 1 day"


LOG_SCALES = {
    "log1k": LogScale("log1k", 101, 1_000),
    "log10k": LogScale("log10k", 102, 10_000),
    "log100k": LogScale("log100k", 103, 100_000),
}

# ---------------------------------------------------------------------------------------------------
# Actions


def dumps(obj: object) -> str:
    return json.dumps(obj, separators=(",", ":"))


def iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


# A data file: (path, date, size, modificationTime, stats)
FileRec = tuple[str, str, int, int, str]


class Files:
    """Makes data files (path, partition, size, stats) from a seeded RNG."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.counter = 0

    def new(self, date: str, mtime: int) -> FileRec:
        rng = self.rng
        self.counter += 1
        uid = uuid.UUID(int=rng.getrandbits(128), version=4)
        path = f"date={date}/part-{self.counter % 100_000:05d}-{uid}.c000.snappy.parquet"
        n = rng.randint(20_000, 2_000_000)
        size = int(n * rng.uniform(18.0, 42.0))
        id_min = rng.randrange(10**12)
        id_max = id_min + n + rng.randrange(10_000)
        a_min = rng.uniform(-5_000.0, 0.0)
        a_max = rng.uniform(100.0, 250_000.0)
        c1 = rng.randrange(100_000)
        c2 = c1 + rng.randrange(1, 900_000)
        h1 = rng.randrange(12)
        h2 = h1 + rng.randrange(1, 12)
        m1, m2, s1, s2 = rng.randrange(60), rng.randrange(60), rng.randrange(60), rng.randrange(60)
        na, nn = rng.randrange(0, 200), rng.randrange(0, 20)
        stats = (
            f'{{"numRecords":{n},'
            f'"minValues":{{"id":{id_min},"amount":{a_min:.2f},"name":"customer_{c1:06d}",'
            f'"ts":"{date}T{h1:02d}:{m1:02d}:{s1:02d}.000Z"}},'
            f'"maxValues":{{"id":{id_max},"amount":{a_max:.2f},"name":"customer_{c2:06d}",'
            f'"ts":"{date}T{h2:02d}:{m2:02d}:{s2:02d}.999Z"}},'
            f'"nullCount":{{"id":0,"amount":{na},"name":{nn},"ts":0}}}}'
        )
        return (path, date, size, mtime, stats)


def add_action(f: FileRec, data_change: bool = True) -> dict:
    path, date, size, mtime, stats = f
    return {
        "add": {
            "path": path,
            "partitionValues": {"date": date},
            "size": size,
            "modificationTime": mtime,
            "dataChange": data_change,
            "stats": stats,
        }
    }


def remove_action(f: FileRec, ts: int, data_change: bool = True) -> dict:
    path, date, size, _, _ = f
    return {
        "remove": {
            "path": path,
            "deletionTimestamp": ts,
            "dataChange": data_change,
            "extendedFileMetadata": True,
            "partitionValues": {"date": date},
            "size": size,
        }
    }


def commit_info(
    ts: int, operation: str, read_version: int | None, params: dict, metrics: dict, **extra: object
) -> dict:
    info: dict = {
        "timestamp": ts,
        "operation": operation,
        "operationParameters": params,
    }
    if read_version is not None:
        info["readVersion"] = read_version
    info.update(
        isolationLevel="Serializable" if operation != "STREAMING UPDATE" else "WriteSerializable",
        isBlindAppend=operation in ("WRITE", "STREAMING UPDATE"),
        operationMetrics={k: str(v) for k, v in metrics.items()},
        engineInfo=ENGINE_INFO,
        txnId=str(uuid.UUID(int=random.Random(ts).getrandbits(128), version=4)),
    )
    info.update(extra)
    return {"commitInfo": info}


def protocol_action() -> dict:
    return {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}


def metadata_action(table_id: str, configuration: dict[str, str], created: int) -> dict:
    return {
        "metaData": {
            "id": table_id,
            "format": {"provider": "parquet", "options": {}},
            "schemaString": SCHEMA_STRING,
            "partitionColumns": ["date"],
            "configuration": configuration,
            "createdTime": created,
        }
    }


def write_commit(log_dir: Path, version: int, actions: list[dict]) -> None:
    (log_dir / f"{version:020d}.json").write_text("\n".join(dumps(a) for a in actions) + "\n")


# ---------------------------------------------------------------------------------------------------
# Checkpoint (classic, single parquet file, Delta checkpoint schema)

STR_MAP = pa.map_(pa.string(), pa.string())
ADD_TYPE = pa.struct(
    [
        ("path", pa.string()),
        ("partitionValues", STR_MAP),
        ("size", pa.int64()),
        ("modificationTime", pa.int64()),
        ("dataChange", pa.bool_()),
        ("tags", STR_MAP),
        ("stats", pa.string()),
    ]
)
REMOVE_TYPE = pa.struct(
    [
        ("path", pa.string()),
        ("deletionTimestamp", pa.int64()),
        ("dataChange", pa.bool_()),
        ("extendedFileMetadata", pa.bool_()),
        ("partitionValues", STR_MAP),
        ("size", pa.int64()),
        ("tags", STR_MAP),
    ]
)
TXN_TYPE = pa.struct([("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())])
METADATA_TYPE = pa.struct(
    [
        ("id", pa.string()),
        ("name", pa.string()),
        ("description", pa.string()),
        ("format", pa.struct([("provider", pa.string()), ("options", STR_MAP)])),
        ("schemaString", pa.string()),
        ("partitionColumns", pa.list_(pa.string())),
        ("configuration", STR_MAP),
        ("createdTime", pa.int64()),
    ]
)
PROTOCOL_TYPE = pa.struct([("minReaderVersion", pa.int32()), ("minWriterVersion", pa.int32())])
CHECKPOINT_SCHEMA = pa.schema(
    [
        ("txn", TXN_TYPE),
        ("add", ADD_TYPE),
        ("remove", REMOVE_TYPE),
        ("metaData", METADATA_TYPE),
        ("protocol", PROTOCOL_TYPE),
    ]
)


def _date_map(dates: list[str]) -> pa.MapArray:
    n = len(dates)
    offsets = pa.array(range(n + 1), type=pa.int32())
    return pa.MapArray.from_arrays(offsets, pa.array(["date"] * n, pa.string()), pa.array(dates, pa.string()))


def _placed(array: pa.Array, before: int, after: int) -> pa.Array:
    parts = [pa.nulls(before, array.type), array, pa.nulls(after, array.type)]
    return pa.concat_arrays([p for p in parts if len(p)])


def write_checkpoint(
    log_dir: Path,
    version: int,
    *,
    metadata: dict,
    txns: dict[str, tuple[int, int]],
    adds: list[FileRec],
    removes: list[tuple[FileRec, int]],
) -> int:
    """Write `version.checkpoint.parquet` and `_last_checkpoint`; returns the number of rows."""
    n_add, n_rem, n_txn = len(adds), len(removes), len(txns)
    total = 2 + n_txn + n_add + n_rem
    md = metadata["metaData"]
    protocol = pa.array([{"minReaderVersion": 1, "minWriterVersion": 2}], PROTOCOL_TYPE)
    meta = pa.array(
        [
            {
                "id": md["id"],
                "name": None,
                "description": None,
                "format": {"provider": "parquet", "options": []},
                "schemaString": md["schemaString"],
                "partitionColumns": md["partitionColumns"],
                "configuration": list(md["configuration"].items()),
                "createdTime": md["createdTime"],
            }
        ],
        METADATA_TYPE,
    )
    txn = pa.array([{"appId": k, "version": v, "lastUpdated": ts} for k, (v, ts) in txns.items()], TXN_TYPE)
    add = pa.StructArray.from_arrays(
        [
            pa.array([f[0] for f in adds], pa.string()),
            _date_map([f[1] for f in adds]),
            pa.array([f[2] for f in adds], pa.int64()),
            pa.array([f[3] for f in adds], pa.int64()),
            pa.repeat(pa.scalar(False), n_add) if n_add else pa.array([], pa.bool_()),
            pa.nulls(n_add, STR_MAP),
            pa.array([f[4] for f in adds], pa.string()),
        ],
        fields=list(ADD_TYPE),
    )
    rem = pa.StructArray.from_arrays(
        [
            pa.array([f[0] for f, _ in removes], pa.string()),
            pa.array([ts for _, ts in removes], pa.int64()),
            pa.repeat(pa.scalar(False), n_rem) if n_rem else pa.array([], pa.bool_()),
            pa.repeat(pa.scalar(True), n_rem) if n_rem else pa.array([], pa.bool_()),
            _date_map([f[1] for f, _ in removes]),
            pa.array([f[2] for f, _ in removes], pa.int64()),
            pa.nulls(n_rem, STR_MAP),
        ],
        fields=list(REMOVE_TYPE),
    )
    # Row order: protocol, metaData, txns, adds, removes (one action per row, other columns null).
    columns = [
        _placed(txn, 2, n_add + n_rem),
        _placed(add, 2 + n_txn, n_rem),
        _placed(rem, 2 + n_txn + n_add, 0),
        _placed(meta, 1, total - 2),
        _placed(protocol, 0, total - 1),
    ]
    table = pa.Table.from_arrays(columns, schema=CHECKPOINT_SCHEMA)
    name = f"{version:020d}.checkpoint.parquet"
    tmp = log_dir / f".{name}.tmp"
    pq.write_table(table, tmp, compression="snappy")
    tmp.rename(log_dir / name)
    (log_dir / "_last_checkpoint").write_text(dumps({"version": version, "size": total}))
    return total


# ---------------------------------------------------------------------------------------------------
# S / M / L


class KeyedSet:
    """Insertion-ordered path -> FileRec with O(1) random choice and removal (deterministic)."""

    def __init__(self) -> None:
        self.items: dict[str, FileRec] = {}
        self.keys: list[str] = []
        self.pos: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.keys)

    def add(self, f: FileRec) -> None:
        if f[0] in self.items:
            raise AssertionError(f"duplicate path {f[0]}")
        self.items[f[0]] = f
        self.pos[f[0]] = len(self.keys)
        self.keys.append(f[0])

    def pop(self, path: str) -> FileRec:
        f = self.items.pop(path)
        i = self.pos.pop(path)
        last = self.keys.pop()
        if last != path:
            self.keys[i] = last
            self.pos[last] = i
        return f

    def choice(self, rng: random.Random) -> str:
        return self.keys[rng.randrange(len(self.keys))]


def generate_table(scale: Scale, out: Path) -> dict:
    rng = random.Random(scale.seed)
    files = Files(rng)
    log_dir = out / "_delta_log"
    log_dir.mkdir(parents=True)
    first_day = dt.date(2023, 6, 1)
    dates = [(first_day + dt.timedelta(days=k)).isoformat() for k in range(scale.partitions)]
    t_cp = T_BASE
    table_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
    created = t_cp - 400 * DAY
    config = {"delta.dataSkippingNumIndexedCols": "4"}
    metadata = metadata_action(table_id, dict(config), created)

    # -- state at the checkpoint
    active = KeyedSet()
    for _ in range(scale.checkpoint_adds):
        date = dates[min(int(rng.triangular(0, scale.partitions, scale.partitions)), scale.partitions - 1)]
        active.add(files.new(date, t_cp - rng.randrange(1, 380) * DAY))
    tombstones: dict[str, tuple[FileRec, int]] = {}
    for i in range(scale.checkpoint_removes):
        f = files.new(dates[rng.randrange(scale.partitions)], t_cp - 30 * DAY)
        # Two clusters around the benchmark's retention cutoff (t_cp - 2 days), leaving a gap.
        if i % 2:
            ts = t_cp - rng.randrange(3 * DAY, 6 * DAY + 12 * HOUR)
        else:
            ts = t_cp - rng.randrange(10 * MINUTE, DAY)
        tombstones[f[0]] = (f, ts)
    app_ids = [f"streaming-ingest-{k}" for k in range(3)]
    txns = {a: (1_000 * (k + 1) + scale.checkpoint_version, t_cp - (k + 1) * HOUR) for k, a in enumerate(app_ids)}

    # The commit at the checkpoint's own version: an append of files that the checkpoint holds.
    last_adds = [active.items[k] for k in active.keys[-5:]]
    write_commit(
        log_dir,
        scale.checkpoint_version,
        [
            commit_info(
                t_cp,
                "WRITE",
                scale.checkpoint_version - 1,
                {"mode": "Append", "partitionBy": '["date"]'},
                {"numFiles": 5, "numOutputBytes": sum(f[2] for f in last_adds), "numOutputRows": 1},
            ),
            *[add_action(f) for f in last_adds],
        ],
    )
    rows = write_checkpoint(
        log_dir,
        scale.checkpoint_version,
        metadata=metadata,
        txns=txns,
        adds=list(active.items.values()),
        removes=list(tombstones.values()),
    )

    # -- commits after the checkpoint
    k_total = scale.commits
    meta_change_at = scale.checkpoint_version + k_total // 2
    restore_at = {scale.checkpoint_version + k_total // 3, scale.checkpoint_version + (2 * k_total) // 3}
    readds = 0
    recent: list[str] = []
    ops = ["WRITE", "DELETE", "MERGE", "OPTIMIZE", "STREAMING UPDATE"]
    weights = [50, 10, 20, 5, 15]
    version = scale.checkpoint_version
    ts = t_cp
    for j in range(1, k_total + 1):
        version = scale.checkpoint_version + j
        ts = t_cp + j * MINUTE
        today = dates[-1 - rng.randrange(2)]
        actions: list[dict] = []
        if version == meta_change_at:
            config = {
                **config,
                "delta.logRetentionDuration": "interval 60 days",
                "delta.deletedFileRetentionDuration": "interval 7 days",
            }
            metadata = metadata_action(table_id, dict(config), created)
            actions = [
                commit_info(ts, "SET TBLPROPERTIES", version - 1, {"properties": dumps(config)}, {}),
                metadata,
            ]
        elif version in restore_at:
            candidates = sorted(tombstones)
            chosen = rng.sample(candidates, min(len(candidates), 10 + k_total // 10))
            actions = [
                commit_info(ts, "RESTORE", version - 1, {"version": version - 7}, {"numRestoredFiles": len(chosen)})
            ]
            for path in chosen:
                f, _ = tombstones.pop(path)
                active.add(f)
                actions.append(add_action(f))
            readds += len(chosen)
        else:
            op = rng.choices(ops, weights)[0]
            adds: list[tuple[FileRec, bool]] = []
            removes: list[tuple[FileRec, bool]] = []
            params: dict = {}
            extra: dict = {}
            if op == "WRITE":
                n = rng.randint(1, 2 * scale.append_files - 1)
                adds = [(files.new(today, ts - rng.randrange(1, 50_000)), True) for _ in range(n)]
                recent.extend(f[0] for f, _ in adds)
                params = {"mode": "Append", "partitionBy": '["date"]'}
            elif op == "DELETE":
                for _ in range(rng.randint(1, 8)):
                    removes.append((active.items[active.choice(rng)], True))
                    active.pop(removes[-1][0][0])
                params = {"predicate": '["(id#1 < 1000)"]'}
            elif op == "MERGE":
                for _ in range(rng.randint(1, 6)):
                    f = active.items[active.choice(rng)]
                    active.pop(f[0])
                    removes.append((f, True))
                    adds.append((files.new(f[1], ts - rng.randrange(1, 50_000)), True))
                params = {"predicate": '["(id#1 = id#2)"]', "matchedPredicates": '[{"actionType":"update"}]'}
            elif op == "OPTIMIZE":
                small = [p for p in recent if p in active.items][:10]
                if len(small) < 2:
                    small = [active.choice(rng)]
                    small = list(dict.fromkeys(small))
                for p in small:
                    removes.append((active.pop(p), False))
                recent = [p for p in recent if p in active.items]
                adds.append((files.new(removes[0][0][1], ts - rng.randrange(1, 50_000)), False))
                params = {"predicate": "[]", "zOrderBy": "[]"}
            else:  # STREAMING UPDATE with a txn
                app = app_ids[rng.randrange(len(app_ids))]
                v, _ = txns[app]
                txns[app] = (v + 1, ts)
                extra = {"txn": {"appId": app, "version": v + 1, "lastUpdated": ts}}
                adds = [(files.new(today, ts - rng.randrange(1, 50_000)), True) for _ in range(rng.randint(1, 3))]
                params = {"outputMode": "Append", "queryId": app, "epochId": str(v + 1)}
            metrics = {
                "numFiles": len(adds),
                "numRemovedFiles": len(removes),
                "numOutputBytes": sum(f[2] for f, _ in adds),
            }
            actions = [commit_info(ts, op, version - 1, params, metrics)]
            if extra:
                actions.append(extra)
            for f, change in removes:
                tombstones.pop(f[0], None)
                tombstones[f[0]] = (f, ts)
                actions.append(remove_action(f, ts, change))
            for f, change in adds:
                active.add(f)
                actions.append(add_action(f, change))
        write_commit(log_dir, version, actions)

    cutoff = t_cp - 2 * DAY
    now_ms = ts + HOUR - (ts % HOUR)  # the hour after the last commit
    retention_hours = (now_ms - cutoff) // HOUR
    return {
        "kind": "table",
        "version": version,
        "checkpoint_version": scale.checkpoint_version,
        "checkpoint_rows": rows,
        "checkpoint_bytes": (log_dir / f"{scale.checkpoint_version:020d}.checkpoint.parquet").stat().st_size,
        "commits_after_checkpoint": k_total,
        "num_files": len(active),
        "size_in_bytes": sum(f[2] for f in active.items.values()),
        "tombstones_total": len(tombstones),
        "tombstones_unexpired": sum(1 for _, t in tombstones.values() if t > now_ms - retention_hours * HOUR),
        "retention_hours": retention_hours,
        "now_ms": now_ms,
        "readds": readds,
        "metadata_change_version": meta_change_at,
        "partitions": scale.partitions,
        "txns": {a: v for a, (v, _) in txns.items()},
        "configuration": config,
        "tombstone_paths": sorted(tombstones),
    }


# ---------------------------------------------------------------------------------------------------
# Long logs


def generate_long_log(scale: LogScale, out: Path) -> dict:
    rng = random.Random(scale.seed)
    files = Files(rng)
    log_dir = out / "_delta_log"
    log_dir.mkdir(parents=True)
    t0 = T_BASE - scale.versions * scale.commit_spacing_ms
    table_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
    config = {"delta.deletedFileRetentionDuration": scale.tombstone_retention, "delta.checkpointInterval": "10"}
    metadata = metadata_action(table_id, config, t0)
    retention_ms = DAY
    app = "events-stream"
    active: list[FileRec] = []
    tombstones: list[tuple[FileRec, int]] = []
    txn_version = -1
    last_cp = None
    rows = 0
    ts = t0
    for v in range(scale.versions):
        ts = t0 + v * scale.commit_spacing_ms
        date = dt.datetime.fromtimestamp(ts / 1000, tz=dt.UTC).date().isoformat()
        if v == 0:
            actions = [
                commit_info(ts, "CREATE TABLE", None, {"partitionBy": '["date"]'}, {}),
                protocol_action(),
                metadata,
            ]
        else:
            txn_version += 1
            f = files.new(date, ts - 1_000)
            actions = [
                commit_info(ts, "STREAMING UPDATE", v - 1, {"outputMode": "Append", "queryId": app}, {"numFiles": 1}),
                {"txn": {"appId": app, "version": txn_version, "lastUpdated": ts}},
                add_action(f),
            ]
            active.append(f)
            if len(active) > scale.window:
                old = active.pop(0)
                tombstones.append((old, ts))
                actions.append(remove_action(old, ts))
        write_commit(log_dir, v, actions)
        if v > 0 and v % scale.checkpoint_interval == 0:
            tombstones = [(f, t) for f, t in tombstones if t > ts - retention_ms]
            rows = write_checkpoint(
                log_dir,
                v,
                metadata=metadata,
                txns={app: (txn_version, ts)},
                adds=active,
                removes=tombstones,
            )
            last_cp = v
    return {
        "kind": "log",
        "version": scale.versions - 1,
        "checkpoint_version": last_cp,
        "checkpoint_rows": rows,
        "commits": scale.versions,
        "checkpoints": (scale.versions - 1) // scale.checkpoint_interval,
        "num_files": len(active),
        "size_in_bytes": sum(f[2] for f in active),
        "txns": {app: txn_version},
        "configuration": config,
    }


# ---------------------------------------------------------------------------------------------------
# Driver


def read_manifest(out: Path) -> dict | None:
    try:
        manifest = json.loads((out / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if manifest.get("generator_version") != GENERATOR_VERSION:
        return None
    return manifest


def touch_tombstones(out: Path, paths: list[str]) -> None:
    for p in paths:
        target = out / p
        target.parent.mkdir(parents=True, exist_ok=True)
        target.touch()


def generate(scale_name: str, out: Path, *, force: bool = False, touch: bool = True) -> dict:
    """Generate `scale_name` into `out` unless a complete one is there already; returns the manifest."""
    out = out.resolve()
    found = read_manifest(out)
    if found is not None and found.get("scale") == scale_name and not force:
        print(f"{scale_name}: {out} is complete (marker {MANIFEST}); skipping", file=sys.stderr)
        return found
    if out.exists():
        if not (out / "_delta_log").is_dir() and any(out.iterdir()):
            raise SystemExit(f"{out} exists and is not a generated table; refusing to overwrite")
        shutil.rmtree(out)
    tmp = out.parent / f".{out.name}.partial-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    t0 = time.perf_counter()
    if scale_name in SCALES:
        manifest = generate_table(SCALES[scale_name], tmp)
        params = asdict(SCALES[scale_name])
        if touch:
            touch_tombstones(tmp, manifest["tombstone_paths"])
        manifest["tombstone_files_touched"] = touch
    elif scale_name in LOG_SCALES:
        manifest = generate_long_log(LOG_SCALES[scale_name], tmp)
        params = asdict(LOG_SCALES[scale_name])
    else:
        raise SystemExit(f"unknown scale {scale_name!r}; one of {', '.join([*SCALES, *LOG_SCALES])}")
    manifest = {"scale": scale_name, "generator_version": GENERATOR_VERSION, "params": params, **manifest}
    log_dir = tmp / "_delta_log"
    manifest["log_files"] = sum(1 for _ in log_dir.iterdir())
    manifest["log_bytes"] = sum(p.stat().st_size for p in log_dir.iterdir())
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    tmp.rename(out)
    print(
        f"{scale_name}: wrote {out} in {time.perf_counter() - t0:.1f}s "
        f"(version {manifest['version']}, {manifest['num_files']} files, {manifest['log_files']} log files, "
        f"{manifest['log_bytes'] / 2**20:.1f} MiB of log)",
        file=sys.stderr,
    )
    return manifest


def verify(out: Path, manifest: dict) -> bool:
    """Load with delta-rs and with this library; compare with each other and the manifest."""
    from deltalake import DeltaTable

    from airflow_delta_provider.delta import DeltaLog

    path = str(out.resolve())
    t0 = time.perf_counter()
    table = DeltaTable(path)
    adds = table.get_add_actions()
    sizes = adds.column("size_bytes").to_pylist()
    theirs = {"version": table.version(), "num_files": adds.num_rows, "size_in_bytes": sum(sizes)}
    t1 = time.perf_counter()
    snap = DeltaLog.for_table(path).snapshot
    ours = {"version": snap.version, "num_files": snap.num_files, "size_in_bytes": snap.size_in_bytes}
    t2 = time.perf_counter()
    expected = {k: manifest[k] for k in ("version", "num_files", "size_in_bytes")}
    ok = ours == theirs == expected
    print(f"delta-rs ({t1 - t0:.2f}s): {theirs}\nours     ({t2 - t1:.2f}s): {ours}\nexpected: {expected}")
    # File sets, not only counts.
    their_paths = set(adds.column("path").to_pylist())
    our_paths = set(snap.add_files_table.column("path").to_pylist())
    if their_paths != our_paths:
        print(f"MISMATCH: active paths differ ({len(their_paths ^ our_paths)} in the symmetric difference)")
        ok = False
    conf = {"ours": dict(snap.configuration), "delta-rs": dict(table.metadata().configuration)}
    txns = {
        "ours": {a: snap.transaction_version(a) for a in manifest["txns"]},
        "delta-rs": {a: table.transaction_version(a) for a in manifest["txns"]},
    }
    print(f"configuration: {conf}\ntxn versions: {txns}, expected {manifest['txns']}")
    if not conf["ours"] == conf["delta-rs"] == manifest["configuration"]:
        print("MISMATCH: configuration")
        ok = False
    if not txns["ours"] == txns["delta-rs"] == manifest["txns"]:
        print("MISMATCH: txn versions")
        ok = False
    if manifest.get("kind") == "table":
        hours, now = manifest["retention_hours"], manifest["now_ms"]
        ours_t = {
            "total": len(snap.tombstones(include_expired=True)),
            "unexpired": snap.num_tombstones(retention_hours=hours, now_ms=now),
        }
        exp_t = {"total": manifest["tombstones_total"], "unexpired": manifest["tombstones_unexpired"]}
        line = f"tombstones: ours {ours_t}, expected {exp_t}"
        ok = ok and ours_t == exp_t
        our_tomb_paths = {t.path for t in snap.tombstones(include_expired=True)}
        if our_tomb_paths != set(manifest["tombstone_paths"]):
            print("MISMATCH: tombstone paths differ from the manifest")
            ok = False
        if manifest.get("tombstone_files_touched"):
            # delta-rs: VACUUM dry run (lite) lists tombstoned files older than the retention that exist.
            # The cutoff is a fixed instant, so convert it into hours before the real clock.
            cutoff = now - hours * 3_600_000
            real_hours = round((time.time() * 1000 - cutoff) / 3_600_000)
            expired = table.vacuum(retention_hours=real_hours, dry_run=True, enforce_retention_duration=False)
            all_old = table.vacuum(retention_hours=0, dry_run=True, enforce_retention_duration=False)
            theirs_t = {"total": len(all_old), "unexpired": len(all_old) - len(expired)}
            line += f", delta-rs (vacuum dry run) {theirs_t}"
            ok = ok and theirs_t == exp_t
        print(line)
    print("OK" if ok else "MISMATCH")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", required=True, choices=[*SCALES, *LOG_SCALES])
    parser.add_argument("--out", type=Path, help="table directory (default bench/.data/<scale>)")
    parser.add_argument("--force", action="store_true", help="regenerate even when the marker is present")
    parser.add_argument("--no-touch", action="store_true", help="do not create zero-byte tombstoned data files")
    parser.add_argument("--verify", action="store_true", help="check delta-rs and this library agree")
    args = parser.parse_args(argv)
    out = args.out or DEFAULT_DATA / args.scale
    manifest = generate(args.scale, out, force=args.force, touch=not args.no_touch)
    if args.verify:
        return 0 if verify(out, manifest) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
