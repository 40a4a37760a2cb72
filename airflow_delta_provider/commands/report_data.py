"""What the reports show, computed: histograms of file sizes and deletion ages, a table's health per
partition, and a run's point on the charts across runs (pure: Arrow columns, file actions and result
dicts in, JSON-able dicts out; the command layer adds them to results, `reports` renders them)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..delta.protocol.optimize import num_records, partition_key

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

    from ..delta.protocol.actions import AddFile
    from ..delta.snapshot import Snapshot

HOUR_MS = 3_600_000
#: Upper edges (hours) of the deletion-age buckets; the retention window is added as one more edge.
AGE_EDGES_HOURS = (1, 6, 24, 48, 72, 168, 336, 720, 2160, 4320, 8760)
#: Upper edges (bytes) of the file-size buckets; the small-file threshold is added as one more edge.
SIZE_EDGES_BYTES = (
    *(4**k * 1024 for k in range(6)),  # 1 KiB, 4 KiB, ... 1 MiB
    *(2**k * 1024**2 for k in range(1, 13)),  # 2 MiB ... 4 GiB
)


# -- histograms (pure: Arrow columns in, JSON-able dicts out) --------------------------------------------
def _bucket_totals(values: pa.Array, weights: pa.Array, edges: Sequence[int]) -> list[tuple[int, int]]:
    """(count, sum of weights) of `values` in `[-inf, e0), [e0, e1), ... [e_last, inf)`: one sort and
    one binary search per edge. `values` and `weights` have no nulls."""
    import pyarrow as pa

    from ..delta.read import arrow_compute as pc
    from ..delta.read.arrow_build import int_array

    if not len(values):
        return [(0, 0)] * (len(edges) + 1)
    order = pc.sort_indices(values)
    ordered = pc.take(values, order)
    ordered_weights = pc.take(weights, order)
    if isinstance(ordered, pa.ChunkedArray):
        ordered, ordered_weights = ordered.combine_chunks(), ordered_weights.combine_chunks()
    cuts = [0, *pc.search_sorted(ordered, int_array(list(edges)), side="left").to_pylist(), len(values)]
    out = []
    for lo, hi in itertools.pairwise(cuts):
        total = pc.sum(ordered_weights.slice(lo, hi - lo)).as_py() if hi > lo else 0
        out.append((hi - lo, int(total or 0)))
    return out


def _trim(buckets: list[dict[str, Any]], keep: int) -> list[dict[str, Any]]:
    """`buckets` without the empty ones before the first and after the last non-empty bucket, but
    always with bucket `keep` (the one that starts at the threshold or cutoff) and its neighbour."""
    filled = [i for i, b in enumerate(buckets) if b["count"]]
    first = min([*filled[:1], max(keep - 1, 0)])
    last = max([*filled[-1:], min(keep, len(buckets) - 1)])
    return buckets[first : last + 1]


def size_histogram(sizes: pa.Array | pa.ChunkedArray, small_file_bytes: int) -> dict[str, Any]:
    """Active files by size: buckets `[min_bytes, max_bytes)` (None: open) with `count`, `bytes` and `small`
    (`small_file_bytes` is always an edge); empty buckets at either end are dropped, a null size is 0."""
    from ..delta.read import arrow_compute as pc
    from ..delta.read.arrow_build import int64_scalar

    threshold = int(small_file_bytes)
    edges = sorted({*SIZE_EDGES_BYTES, threshold} - {0})
    values = pc.fill_null(sizes, int64_scalar(0))
    totals = _bucket_totals(values, values, edges)
    bounds = [0, *edges]
    buckets = [
        {
            "min_bytes": lo,
            "max_bytes": edges[i] if i < len(edges) else None,
            "count": count,
            "bytes": nbytes,
            "small": i < len(edges) and edges[i] <= threshold,
        }
        for i, (lo, (count, nbytes)) in enumerate(zip(bounds, totals, strict=True))
    ]
    keep = bounds.index(threshold) if threshold in bounds else 0
    return {"small_file_bytes": threshold, "num_files": len(values), "buckets": _trim(buckets, keep)}


def file_size_histogram(snap: Snapshot, small_file_bytes: int) -> dict[str, Any]:
    """`size_histogram` of a snapshot's active files (reads no stats; with the Spark engine this
    collects the file list to the driver, as `Snapshot.all_files` does)."""
    return size_histogram(snap.state.files.adds.column("size"), small_file_bytes)


def deletion_age_histogram(
    deletion_timestamps: pa.Array | pa.ChunkedArray,
    sizes: pa.Array | pa.ChunkedArray,
    *,
    now_ms: int,
    cutoff_ms: int,
) -> dict[str, Any]:
    """Tombstones by age at `now_ms`: buckets `[min_hours, max_hours)` with `count`, `bytes` and `expired`
    (deleted at or before `cutoff_ms`: the retention window is always an edge). `without_timestamp` counts
    those VACUUM treats as expired for lack of a `deletionTimestamp`; a future one counts as age 0."""
    from ..delta.read import arrow_compute as pc
    from ..delta.read.arrow_build import int64_scalar

    retention_ms = int(now_ms) - int(cutoff_ms)
    edges_ms = sorted({*(h * HOUR_MS for h in AGE_EDGES_HOURS), retention_ms} - {0})
    valid = pc.is_valid(deletion_timestamps)
    stamped = pc.filter(deletion_timestamps, valid)
    stamped_sizes = pc.fill_null(pc.filter(sizes, valid), int64_scalar(0))
    missing = pc.fill_null(pc.filter(sizes, pc.is_null(deletion_timestamps)), int64_scalar(0))
    # age >= e  <=>  deleted at or before now - e: bucket the timestamps on those edges, newest last
    ts_edges = [int(now_ms) - e for e in reversed(edges_ms)]
    by_ts = _bucket_totals(stamped, stamped_sizes, [t + 1 for t in ts_edges])  # (.., t] is "at or before"
    totals = list(reversed(by_ts))  # youngest first
    bounds = [0, *edges_ms]
    buckets = [
        {
            "min_hours": lo / HOUR_MS,
            "max_hours": edges_ms[i] / HOUR_MS if i < len(edges_ms) else None,
            "count": count,
            "bytes": nbytes,
            "expired": lo >= retention_ms,
        }
        for i, (lo, (count, nbytes)) in enumerate(zip(bounds, totals, strict=True))
    ]
    keep = bounds.index(retention_ms) if retention_ms in bounds else 0
    missing_bytes = pc.sum(missing).as_py() if len(missing) else 0
    return {
        "now_ms": int(now_ms),
        "cutoff_ms": int(cutoff_ms),
        "retention_hours": retention_ms / HOUR_MS,
        "buckets": _trim(buckets, keep) if len(stamped) else [],
        "without_timestamp": {"count": len(missing), "bytes": int(missing_bytes or 0)},
        "num_tombstones": len(stamped) + len(missing),
    }


def tombstone_age_histogram(snap: Snapshot, *, now_ms: int, cutoff_ms: int) -> dict[str, Any]:
    """`deletion_age_histogram` of every tombstone a snapshot holds (with the Spark engine this
    collects the tombstones to the driver)."""
    removes = snap.state.files.removes
    return deletion_age_histogram(
        removes.column("deletionTimestamp"), removes.column("size"), now_ms=now_ms, cutoff_ms=cutoff_ms
    )


# -- table health and runs (pure: file actions and result dicts in, JSON-able dicts out) --------------------
def table_health(
    files: Iterable[AddFile],
    partition_columns: Sequence[str],
    *,
    small_file_bytes: int,
    target_bytes: int,
    physical_names: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Per partition and in total: `files`, `bytes`, `small_files` (under `small_file_bytes`), `rows` (stats'
    `numRecords` less deletion vectors; None when a file has no stats) and `compacted`: at most one file under
    `target_bytes` is left, so OPTIMIZE has no bin to make there (a bin needs two files), however small they are."""
    parts: dict[str, dict[str, Any]] = {}
    for f in files:
        key = partition_key(f.partition_values, partition_columns, physical_names)
        p = parts.setdefault(key, {"files": 0, "bytes": 0, "small_files": 0, "rows": 0, "_under_target": 0})
        p["files"] += 1
        p["bytes"] += f.size
        p["small_files"] += f.size < small_file_bytes
        p["_under_target"] += f.size < target_bytes
        n = num_records(f)
        if p["rows"] is not None:
            deleted = f.deletion_vector.cardinality if f.deletion_vector else 0
            p["rows"] = None if n is None else p["rows"] + n - deleted
    for p in parts.values():
        p["small_file_ratio"] = p["small_files"] / p["files"] if p["files"] else None
        p["compacted"] = p.pop("_under_target") <= 1
    rows = [p["rows"] for p in parts.values()]
    total = {k: sum(p[k] for p in parts.values()) for k in ("files", "bytes", "small_files")}
    total["rows"] = None if None in rows else sum(rows)  # type: ignore[arg-type]
    total["small_file_ratio"] = total["small_files"] / total["files"] if total["files"] else None
    return {
        "small_file_bytes": int(small_file_bytes),
        "target_bytes": int(target_bytes),
        "num_partitions": len(parts),
        "totals": total,
        "partitions": dict(sorted(parts.items())),
    }


def snapshot_health(snap: Snapshot, small_file_bytes: int, target_bytes: int | None = None) -> dict[str, Any]:
    """`table_health` of a snapshot's active files with their stats (the table's target file size unless given)."""
    from ..delta.protocol.optimize import target_file_size

    target = target_bytes or target_file_size(snap.metadata.configuration)
    names = snap.physical_partition_columns
    return {
        "version": snap.version,
        **table_health(
            snap.all_files(with_stats=True),
            snap.partition_columns,
            small_file_bytes=small_file_bytes,
            target_bytes=target,
            physical_names=names,
        ),
    }


def run_point(result: Mapping[str, Any], *, name: str = "", finished_ms: int | None = None) -> dict[str, Any] | None:
    """One run's point on the charts across runs: the table after the run (a plan's: as it stands, not the
    state a RESTORE plan shows), or None."""
    health = result.get("health") or {}
    planned = result.get("dry_run") and health.get("before")
    after = health["before"] if planned else health.get("after") or health.get("before")
    summary = result.get("file_summary")
    if not after and summary and result.get("num_files") is not None:  # a snapshot result: no row counts
        totals = {"files": result["num_files"], "bytes": result.get("size_bytes"), "rows": None}
        after = {"version": result.get("version"), "totals": {**totals, "small_files": summary.get("small_files")}}
    if not after:
        return None
    t = after["totals"]
    return {
        "name": name,
        "finished_ms": finished_ms,
        "version": after.get("version"),
        "dry_run": result.get("dry_run"),
        **{k: t.get(k) for k in ("files", "bytes", "small_files", "rows")},
    }


def changes_since(previous: Mapping[str, Any] | None, current: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What changed in the table between the previous run and this one (None: first run, or no health)."""
    if previous is None or current is None:
        return None
    delta = {
        k: None if previous.get(k) is None or current.get(k) is None else current[k] - previous[k]
        for k in ("files", "bytes", "small_files", "rows")
    }
    return {"previous": dict(previous), "from_version": previous.get("version"), "to_version": current.get("version"),
            **delta}  # fmt: skip
