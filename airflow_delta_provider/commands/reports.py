"""Markdown and HTML renderings of the command layer's result dicts (`REPORT_KINDS`).

The HTML page (Jinja templates in `templates/`) is self-contained: its charts are inline SVG drawn by
matplotlib and a Content-Security-Policy forbids fetching anything, so it opens offline or in a mail
client. jinja2 and matplotlib are imported only for HTML; Markdown needs neither.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..delta.protocol.history import format_ms
from ..delta.protocol.optimize import num_records, partition_key
from .charts import (
    age_chart,
    checks_chart,
    health_chart,
    human_bytes,
    human_hours,
    partition_chart,
    runs_chart,
    short,
    size_chart,
    tombstone_partitions,
    vacuum_chart,
    vacuum_partitions,
    versions_chart,
    zorder_chart,
)

if TYPE_CHECKING:  # pragma: no cover
    import jinja2
    import pyarrow as pa

    from ..delta.protocol.actions import AddFile
    from ..delta.snapshot import Snapshot

#: The result kinds these renderings know.
REPORT_KINDS = (
    *("tombstones", "snapshot", "vacuum", "optimize", "purge", "checkpoint", "cleanup_log", "restore", "repair"),
)
#: Rewrites (and RESTORE): the table's health is read before (at `read_version`) and after (at `version`).
REWRITE_KINDS = ("optimize", "purge", "restore", "repair")
#: Kinds whose report shows the table's health, what changed since the previous run and the runs' chart.
HEALTH_KINDS = (*REWRITE_KINDS, "checkpoint", "cleanup_log")
#: Most earlier runs the charts across runs show.
MAX_RUNS = 30
#: Most rows an HTML table shows (largest first where there is an order); the JSON has them all.
MAX_TABLE_ROWS = 500

_HOUR_MS = 3_600_000
#: Upper edges (hours) of the deletion-age buckets; the retention window is added as one more edge.
AGE_EDGES_HOURS = (1, 6, 24, 48, 72, 168, 336, 720, 2160, 4320, 8760)
#: Upper edges (bytes) of the file-size buckets; the small-file threshold is added as one more edge.
SIZE_EDGES_BYTES = (
    *(4**k * 1024 for k in range(6)),  # 1 KiB, 4 KiB, ... 1 MiB
    *(2**k * 1024**2 for k in range(1, 13)),  # 2 MiB ... 4 GiB
)


# -- numbers ---------------------------------------------------------------------------------------------
def _ms(value: int | None) -> str:
    return "-" if value is None else format_ms(value)


def _when(ms: int | None) -> str:
    """Epoch ms as `2024-05-01 12:00:05 UTC` (the JSON keeps the exact value)."""
    if ms is None:
        return "-"
    text = format_ms(ms)  # ISO-8601 UTC, or a plain number outside datetime's range
    if not text.endswith("+00:00"):
        return text
    return text[:19].replace("T", " ") + " UTC"


def _percent(ratio: float | None) -> str:
    return "-" if ratio is None else f"{100 * ratio:.1f} %"


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
    edges_ms = sorted({*(h * _HOUR_MS for h in AGE_EDGES_HOURS), retention_ms} - {0})
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
            "min_hours": lo / _HOUR_MS,
            "max_hours": edges_ms[i] / _HOUR_MS if i < len(edges_ms) else None,
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
        "retention_hours": retention_ms / _HOUR_MS,
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


# -- Markdown ------------------------------------------------------------------------------------------
_Section = tuple[str, Sequence[str], Sequence[Sequence[Any]]]  # heading, column headers, rows


def _retention_text(r: Mapping[str, Any], *, short: bool = False) -> str:
    prop = f", table property {r['table_property']!r}" if r.get("table_property") else ""
    cutoff = _when(r["cutoff_ms"]) if short else r["cutoff"]
    return f"{human_hours(r['hours'])} ({r['source']}{prop}); cutoff {cutoff}"


def _tombstone_markdown(report: Mapping[str, Any]) -> tuple[str, list[str], list[_Section]]:
    lines = [
        f"Table: {report['table']}",
        f"Version: {report['version']}",
        f"Retention: {_retention_text(report['retention'])}",
        f"Tombstones: {report['num_tombstones']}",
        f"Retained: {report['retained']} ({human_bytes(report['retained_bytes'])})",
        f"Past retention, safe for VACUUM: {report['expired']} ({human_bytes(report['reclaimable_bytes'])})",
        f"Removed without size: {report['removed_without_size']}",
        f"Oldest deletion: {_ms(report.get('oldest_deletion_ms'))}; newest: {_ms(report.get('newest_deletion_ms'))}",
        "Read-only report: nothing was deleted.",
    ]
    headers = ["partition", "retained", "retained bytes", "past retention", "reclaimable", "oldest", "newest"]
    rows = [
        [
            key or "(unpartitioned)",
            p["retained"],
            human_bytes(p["retained_bytes"]),
            p["expired"],
            human_bytes(p["reclaimable_bytes"]),
            _ms(p.get("oldest_deletion_ms")),
            _ms(p.get("newest_deletion_ms")),
        ]
        for key, p in report.get("partitions", {}).items()
    ]
    return f"Tombstone report: {report['table']}", lines, [("Per partition", headers, rows)]


def _version_rows(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per checked version (`commit_checks.per_version`), else the result's own version,
    with the names of the checks that failed there."""
    commit = result.get("commit_checks") or {}
    failed: dict[int, list[str]] = {}
    for f in commit.get("failures") or ():
        names = failed.setdefault(f["version"], [])
        if f["check"] not in names:
            names.append(f["check"])
    per_version = commit.get("per_version") or []
    if not per_version:
        summary = result.get("file_summary") or {}
        per_version = [
            {
                "version": result.get("version"),
                "operation": result.get("operation"),
                "num_files": summary.get("num_files", result.get("num_files")),
                "size_bytes": summary.get("size_bytes", result.get("size_bytes")),
                "small_files": summary.get("small_files"),
                "small_file_ratio": summary.get("small_file_ratio"),
            }
        ]
        failed = {result.get("version"): [c["name"] for c in result.get("checks") or () if not c["passed"]]}
    return [{**row, "failed_checks": failed.get(row["version"], [])} for row in per_version]


def _has_checks(result: Mapping[str, Any]) -> bool:
    return bool(result.get("checks") or result.get("commit_checks"))


def _snapshot_markdown(result: Mapping[str, Any]) -> tuple[str, list[str], list[_Section]]:
    s = result.get("file_summary") or {}
    proto = result.get("protocol") or {}
    lines = [
        f"Table: {result['table']}",
        f"Version: {result['version']} ({result.get('operation') or 'no commitInfo'}, {result.get('timestamp')})",
        f"Protocol: reader {proto.get('min_reader_version')}, writer {proto.get('min_writer_version')}",
        f"Active files: {result.get('num_files')} ({human_bytes(result.get('size_bytes'))})",
        f"Tombstones inside retention: {result.get('num_tombstones')}",
    ]
    if s:
        lines.append(
            f"Small files (under {human_bytes(s.get('small_file_bytes'))}): {s.get('small_files')} "
            f"({_percent(s.get('small_file_ratio'))}); sizes {human_bytes(s.get('min_size'))} "
            f"to {human_bytes(s.get('max_size'))}"
        )
    commit = result.get("commit_checks") or {}
    if commit:
        lines.append(
            f"Versions checked: {len(commit.get('checked_versions') or ())} in ({commit['since_version']}, "
            f"{commit['until_version']}]"
            + (
                f"; first failing version {commit['first_failing_version']}"
                if commit.get("first_failing_version")
                else ""
            )
        )
    failed = [m for m in (result.get("checks_failed"), result.get("commit_checks_failed")) if m]
    lines.append("Checks: " + ("; ".join(failed) if failed else "all passed" if _has_checks(result) else "none"))
    checks = [[c["name"], "passed" if c["passed"] else "FAILED", c["message"]] for c in result.get("checks") or ()]
    versions = [
        [r["version"], r.get("operation") or "-", r["num_files"], human_bytes(r["size_bytes"]),
         r.get("small_files", "-"), ", ".join(r["failed_checks"]) or "passed"]
        for r in (_version_rows(result) if commit.get("per_version") else ())
    ]  # fmt: skip
    sections: list[_Section] = [
        (f"Checks at version {result['version']}", ["check", "result", "message"], checks),
        ("Per version", ["version", "operation", "files", "size", "small files", "checks"], versions),
        (
            "Failures",
            ["version", "check", "message"],
            [[f["version"], f["check"], f["message"]] for f in commit.get("failures") or ()],
        ),
    ]
    return f"Snapshot report: {result['table']}", lines, sections


def _vacuum_markdown(result: Mapping[str, Any]) -> tuple[str, list[str], list[_Section]]:
    retention_h = result["retention_ms"] / _HOUR_MS
    lines = [
        f"Table: {result['table']}",
        f"Version: {result['version']}",
        f"Mode: {result['mode']}",
        f"Retention: {human_hours(retention_h)}; cutoff {result.get('cutoff') or _ms(result.get('cutoff_ms'))}",
    ]
    if result.get("dry_run", True):
        lines.append(
            f"Dry run: nothing was deleted. {result['num_files']} files ({human_bytes(result['bytes'])}) would be."
        )
    else:
        lines.append(
            f"Deleted: {result.get('deleted', 0)} files ({human_bytes(result.get('deleted_bytes'))}), "
            f"{result.get('directories', 0)} empty directories"
        )
        if result.get("dropped"):
            lines.append(f"Kept after re-validation: {len(result['dropped'])} planned files")
        if result.get("audit_versions"):
            lines.append(f"Audit commits: versions {', '.join(map(str, result['audit_versions']))}")
    rows = [[k or "(table root)", p["files"], human_bytes(p["bytes"])] for k, p in vacuum_partitions(result)]
    return f"VACUUM report: {result['table']}", lines, [("Per directory", ["directory", "files", "bytes"], rows)]


def _runs(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The earlier runs of this task (`runs`, oldest first) and this one, as chart points."""
    current = run_point(result, name="this run")
    return [*(result.get("runs") or ())][-MAX_RUNS:] + ([current] if current else [])


def _changes(result: Mapping[str, Any]) -> dict[str, Any] | None:
    previous = (result.get("runs") or [None])[-1]
    return changes_since(previous, run_point(result))


def _signed(n: int | None, fmt: Callable[[int], str] = "{:,}".format) -> str:
    if n is None:
        return "-"
    return ("+" if n > 0 else "-" if n < 0 else "±") + fmt(abs(n))


def _changes_text(result: Mapping[str, Any]) -> str:
    """What changed in the table since the previous run of this task, or that this is the first."""
    if run_point(result) is None:
        return "unknown (no table health in this result)"
    c = _changes(result)
    if c is None:
        return "first run (no earlier result of this task beside this one)"
    return (
        f"version {c['from_version']} -> {c['to_version']}: files {_signed(c['files'])}, "
        f"bytes {_signed(c['bytes'], human_bytes)}, small files {_signed(c['small_files'])}, rows {_signed(c['rows'])}"
    )


def _rows(health: Mapping[str, Any] | None) -> int | None:
    return None if not health else health["totals"]["rows"]


def _health_status(p: Mapping[str, Any]) -> str:
    """A partition's small-file state in words; one left with only small files it cannot compact is not "100 %"."""
    if not p["small_files"]:
        return "no small files"
    if p["compacted"]:
        return "compacted as far as the target allows"
    return f"{_percent(p['small_file_ratio'])} small"


def _health_rows(health: Mapping[str, Any] | None, before: Mapping[str, Any] | None = None) -> list[list[Any]]:
    if not health:
        return []
    prior = (before or {}).get("partitions") or {}
    rows = []
    for key, p in sorted(health["partitions"].items(), key=lambda kv: (-kv[1]["bytes"], kv[0]))[:MAX_TABLE_ROWS]:
        was = prior.get(key)
        rows.append([
            key or "(unpartitioned)",
            *([was["files"] if was else 0] if before else []),
            p["files"], human_bytes(p["bytes"]), p["small_files"], _health_status(p),
            "-" if p["rows"] is None else p["rows"],
        ])  # fmt: skip
    return rows


def _health_section(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> _Section:
    """Per partition: the table after the run, beside the file counts before it when both were read."""
    both = bool(before and after)
    return ("Per partition", _health_headers(both), _health_rows(after or before, before if both else None))


def _health_headers(before: bool) -> list[str]:
    return ["partition", *(["files before"] if before else []), "files", "bytes", "small files", "state", "rows"]


def _rewrite_name(result: Mapping[str, Any]) -> str:
    if "num_deleted_rows_purged" in result:
        return "PURGE"
    return f"OPTIMIZE ZORDER BY ({', '.join(result['zorder_by'])})" if result.get("zorder_by") else "OPTIMIZE"


def _rewrite_markdown(result: Mapping[str, Any]) -> tuple[str, list[str], list[_Section]]:
    name = _rewrite_name(result)
    health = result.get("health") or {}
    before, after = health.get("before"), health.get("after")
    dry_run = result.get("dry_run", True)
    lines = [f"Table: {result['table']}", f"Read version: {result['read_version']}"]
    if dry_run:
        lines.append(f"Dry run: nothing was written. {result['num_files_removed']} files "
                     f"({human_bytes(result['bytes_removed'])}) would be rewritten.")  # fmt: skip
    else:
        lines.append(
            f"Committed version {result['version']}: {result['num_files_removed']} files "
            f"({human_bytes(result['bytes_removed'])}) rewritten into {result['num_files_added']} "
            f"({human_bytes(result['bytes_added'])})"
        )
    if before and after:
        note = " (equal: a rewrite changes no data)" if _rows(before) == _rows(after) else ""
        lines.append(f"Rows before: {_count(_rows(before))}; after: {_count(_rows(after))}{note}")
    elif before:
        lines.append(f"Rows (from stats): {_count(_rows(before))}")
    for col, o in (result.get("zorder_overlap") or {}).items():
        lines.append(f"Z-ORDER overlap on {col}: {_count(o['before'])} before, {_count(o['after'])} after")
    if "num_deleted_rows_purged" in result:
        lines.append(f"Deleted rows purged: {result['num_deleted_rows_purged']}")
    lines.append(f"Since the previous run: {_changes_text(result)}")
    sections: list[_Section] = [
        _health_section(before, after),
    ]
    return f"{name} report: {result['table']}", lines, sections


def _count(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


def _checkpoint_markdown(result: Mapping[str, Any]) -> tuple[str, list[str], list[_Section]]:
    after = (result.get("health") or {}).get("after")
    lines = [
        f"Table: {result['table']}",
        f"Version: {result['version']}",
        f"Checkpoint: {result['kind']}, {'written' if result.get('written') else 'not written (already there)'}: "
        f"{result['path']}",
        f"Actions: {result['num_actions']} ({result['num_add_files']} files, {result['num_tombstones']} tombstones); "
        f"{human_bytes(result.get('size_in_bytes'))}",
        f"Parts: {len(result.get('parts') or ()) or 1}; sidecars: {len(result.get('sidecars') or ())}",
        f"Rows (from stats): {_count(_rows(after))}",
        f"Since the previous run: {_changes_text(result)}",
    ]
    sections: list[_Section] = [("Per partition", _health_headers(False), _health_rows(after))]
    return f"Checkpoint report: {result['table']}", lines, sections


def _cleanup_markdown(result: Mapping[str, Any]) -> tuple[str, list[str], list[_Section]]:
    after = (result.get("health") or {}).get("after")
    dry_run = result.get("dry_run", True)
    n, size = result["num_files"], human_bytes(result["bytes"])
    lines = [
        f"Table: {result['table']}",
        f"Retention: {human_hours(result['retention_ms'] / _HOUR_MS)}; cutoff {_when(result.get('cutoff_ms'))}",
        f"Dry run: nothing was deleted. {n} log files ({size}) would be." if dry_run
        else f"Deleted: {result.get('deleted', 0)} of {n} log files ({size})",
        f"Earliest version the log keeps: {result.get('earliest_readable_version')} (its data files may be vacuumed)",
        f"Reason: {result.get('reason') or '-'}",
        f"Rows (from stats): {_count(_rows(after))}",
        f"Since the previous run: {_changes_text(result)}",
    ]  # fmt: skip
    files = [[f] for f in (result.get("files") or ())[:MAX_TABLE_ROWS]]
    sections: list[_Section] = [
        ("Log files", ["path"], files),
        ("Per partition", _health_headers(False), _health_rows(after)),
    ]
    return f"Log cleanup report: {result['table']}", lines, sections


def _restore_markdown(result: Mapping[str, Any]) -> tuple[str, list[str], list[_Section]]:
    health = result.get("health") or {}
    before, after = health.get("before"), health.get("after")
    m, dry_run = result.get("metrics") or {}, result.get("dry_run", True)
    restored = f"{m.get('numRestoredFiles', 0)} files ({human_bytes(m.get('restoredFilesSize'))})"
    removed = f"{m.get('numRemovedFiles', 0)} files ({human_bytes(m.get('removedFilesSize'))})"
    lines = [
        f"Table: {result['table']}",
        f"Read version: {result['read_version']}; restore to version {result['target_version']}"
        + (f" (timestamp {result['timestamp']})" if result.get("timestamp") else ""),
        f"Dry run: nothing was written. It would restore {restored} and remove {removed}." if dry_run
        else f"Committed version {result['version']}: restored {restored}, removed {removed}",
        f"Rows (from stats): {_count(_rows(before))} at version {result['read_version']}, "
        f"{_count(_rows(after))} {'after' if not dry_run else 'at version ' + str(result['target_version'])}",
        f"Missing files: {len(result.get('missing_files') or ())}"
        + (" (restored without them: allow_partial)" if result.get("allow_partial") else ""),
        f"Metadata changed: {'yes' if result.get('metadata_changed') else 'no'}; "
        f"protocol changed: {'yes' if result.get('protocol_changed') else 'no'}",
        f"Since the previous run: {_changes_text(result)}",
    ]  # fmt: skip
    sections: list[_Section] = [
        _health_section(before, after),
        ("Files restored", ["path"], [[f] for f in (result.get("files_restored") or ())[:MAX_TABLE_ROWS]]),
        ("Files removed", ["path"], [[f] for f in (result.get("files_removed") or ())[:MAX_TABLE_ROWS]]),
        ("Missing files", ["path"], [[f] for f in (result.get("missing_files") or ())[:MAX_TABLE_ROWS]]),
    ]
    return f"RESTORE report: {result['table']}", lines, sections


def _repair_markdown(result: Mapping[str, Any]) -> tuple[str, list[str], list[_Section]]:
    health = result.get("health") or {}
    before, after = health.get("before"), health.get("after")
    missing = f"{result['num_missing']} of {result['num_files_checked']} files ({human_bytes(result['missing_bytes'])})"
    lines = [
        f"Table: {result['table']}",
        f"Read version: {result['read_version']}",
        f"Missing from storage: {missing}; rows lost: {_count(result.get('rows_lost'))}",
        f"Dry run: nothing was written. A repair would remove the {result['num_missing']} missing files from the log."
        if result.get("dry_run", True)
        else f"Committed version {result['version']}: the missing files removed from the log"
        if result.get("version") is not None
        else "Nothing to repair: no commit",
        f"Rows (from stats): {_count(_rows(before))} before, {_count(_rows(after))} after" if after
        else f"Rows (from stats): {_count(_rows(before))}",
        f"Since the previous run: {_changes_text(result)}",
    ]  # fmt: skip
    sections: list[_Section] = [
        ("Missing files", ["path"], [[f] for f in (result.get("files_removed") or ())[:MAX_TABLE_ROWS]]),
        _health_section(before, after),
    ]
    return f"Repair (FSCK) report: {result['table']}", lines, sections


def render_markdown(kind: str, result: Mapping[str, Any]) -> str:
    """`result` (of the action `kind`, one of `REPORT_KINDS`) as Markdown: a title, a list, then a table per
    section that has rows."""
    parts = {
        "tombstones": _tombstone_markdown,
        "snapshot": _snapshot_markdown,
        "vacuum": _vacuum_markdown,
        "optimize": _rewrite_markdown,
        "purge": _rewrite_markdown,
        "checkpoint": _checkpoint_markdown,
        "cleanup_log": _cleanup_markdown,
        "restore": _restore_markdown,
        "repair": _repair_markdown,
    }
    title, lines, sections = parts[_check_kind(kind)](result)
    out = [f"# {title}", "", *(f"- {line}" for line in lines)]
    for heading, headers, rows in sections:
        if rows:
            out += ["", f"## {heading}", "", "| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
            out += [
                "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in row) + " |" for row in rows
            ]
    return "\n".join(out) + "\n"


def _check_kind(kind: str) -> str:
    if kind not in REPORT_KINDS:
        raise ValueError(f"no report for {kind!r}; reports exist for {list(REPORT_KINDS)}")
    return kind


# -- HTML ------------------------------------------------------------------------------------------------
def _environment() -> jinja2.Environment:
    try:
        import jinja2
        import matplotlib  # noqa: F401 - fail here, naming both, rather than halfway through a page
    except ImportError as exc:  # pragma: no cover - both come with the provider's dependencies
        raise ImportError(f"HTML reports need jinja2 and matplotlib ({exc}); Markdown reports need neither") from exc
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("airflow_delta_provider.commands", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(bytes=human_bytes, hours=human_hours, when=_when, percent=_percent, short=short, count=_count)
    return env


def _capped(name: str, rows: Sequence[Any], *, last: bool = False) -> dict[str, Any]:
    """`rows` (the last ones with `last`) cut to `MAX_TABLE_ROWS` as `name`, and how many were left out."""
    kept = rows[-MAX_TABLE_ROWS:] if last else rows[:MAX_TABLE_ROWS]
    return {name: kept, f"{name}_left_out": len(rows) - len(kept)}


def _tombstone_context(report: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "title": f"Tombstone report: {report['table']}",
        "r": report,
        "retention": _retention_text(report["retention"], short=True),
        **_capped("partitions", tombstone_partitions(report)),
        "charts": [c for c in (partition_chart(report), age_chart(report)) if c is not None],
    }


def _failed_items(result: Mapping[str, Any]) -> list[str]:
    """One line per failed check at the result's version, and one for the range's failures."""
    items = [f"{c['name']}: {c['message']}" for c in result.get("checks") or () if not c["passed"]]
    commit = result.get("commit_checks") or {}
    failures = commit.get("failures") or []
    if failures:
        versions = sorted({f["version"] for f in failures})
        checks = sorted({f["check"] for f in failures})
        items.append(
            f"{len(failures)} failed check{'s' * (len(failures) != 1)} at {len(versions)} of "
            f"{len(commit.get('checked_versions') or ())} checked versions, first at version {versions[0]} "
            f"({', '.join(checks)}): see Failures below"
        )
    return items


def _snapshot_context(result: Mapping[str, Any]) -> dict[str, Any]:
    rows = _version_rows(result)
    commit = result.get("commit_checks") or {}
    # one checked version makes a one-point line: the runs of this task say more (when they were read)
    over = runs_chart(_runs(result)) if len(rows) == 1 and "runs" in result else versions_chart(rows)
    charts = [c for c in (over, size_chart(result), checks_chart(result, rows)) if c is not None]
    return {
        "title": f"Snapshot report: {result['table']}",
        "r": result,
        "summary": result.get("file_summary") or {},
        "commit": commit,
        **_capped("versions", rows, last=True),
        **_capped("failures", list(commit.get("failures") or ())),
        "failed_items": _failed_items(result),
        "has_checks": _has_checks(result),
        "changes": _changes_text(result) if "runs" in result else None,
        "charts": charts,
    }


def _vacuum_context(result: Mapping[str, Any]) -> dict[str, Any]:
    dry_run = result.get("dry_run", True)
    files = sorted(result.get("files") or (), key=lambda f: (-int(f.get("size") or 0), f["path"]))
    return {
        "title": f"VACUUM {'plan' if dry_run else 'report'}: {result['table']}",
        "r": result,
        "dry_run": dry_run,
        "retention_hours": result["retention_ms"] / _HOUR_MS,
        **_capped("partitions", vacuum_partitions(result)),
        **_capped("files", files),
        "charts": [c for c in (vacuum_chart(result),) if c is not None],
    }


def _health_context(result: Mapping[str, Any]) -> dict[str, Any]:
    """What every report with a table health shows: partitions (largest first), the change since the
    previous run, and the charts of the partitions and across runs."""
    health = result.get("health") or {}
    before, after = health.get("before"), health.get("after")
    shown = after or before or {}
    parts = sorted((shown.get("partitions") or {}).items(), key=lambda kv: (-kv[1]["bytes"], kv[0]))
    return {
        "before": before if after else None,
        "after": shown or None,
        **_capped("partitions", [(k, p, _health_status(p)) for k, p in parts]),
        "changes": _changes_text(result),
        "runs": _runs(result),
        "charts": [c for c in (health_chart(shown, before if after else None), runs_chart(_runs(result))) if c],
    }


def _rewrite_context(result: Mapping[str, Any]) -> dict[str, Any]:
    dry_run = result.get("dry_run", True)
    context = _health_context(result)
    zorder = zorder_chart(result.get("zorder_overlap"))
    return {
        **context,
        "title": f"{_rewrite_name(result)} {'plan' if dry_run else 'report'}: {result['table']}",
        "r": result,
        "dry_run": dry_run,
        "name": _rewrite_name(result),
        "rows_before": _rows(context["before"]) if context["before"] else _rows(context["after"]),
        "rows_after": _rows(context["after"]) if context["before"] else None,
        "charts": ([zorder] if zorder else []) + context["charts"],
    }


def _checkpoint_context(result: Mapping[str, Any]) -> dict[str, Any]:
    return {**_health_context(result), "title": f"Checkpoint report: {result['table']}", "r": result}


def _cleanup_context(result: Mapping[str, Any]) -> dict[str, Any]:
    dry_run = result.get("dry_run", True)
    return {
        **_health_context(result),
        "title": f"Log cleanup {'plan' if dry_run else 'report'}: {result['table']}",
        "r": result,
        "dry_run": dry_run,
        "retention_hours": result["retention_ms"] / _HOUR_MS,
        **_capped("files", list(result.get("files") or ())),
    }


def _restore_context(result: Mapping[str, Any]) -> dict[str, Any]:
    dry_run = result.get("dry_run", True)
    context = _health_context(result)
    return {
        **context,
        "title": f"RESTORE {'plan' if dry_run else 'report'}: {result['table']}",
        "r": result,
        "m": result.get("metrics") or {},
        "dry_run": dry_run,
        "rows_before": _rows(context["before"]),
        "rows_after": _rows(context["after"]) if context["before"] else None,
        **_capped("restored", list(result.get("files_restored") or ())),
        **_capped("removed", list(result.get("files_removed") or ())),
    }


def _repair_context(result: Mapping[str, Any]) -> dict[str, Any]:
    dry_run = result.get("dry_run", True)
    return {
        **_health_context(result),
        "title": f"Repair (FSCK) {'plan' if dry_run else 'report'}: {result['table']}",
        "r": result,
        "dry_run": dry_run,
        **_capped("missing", list(result.get("files_removed") or ())),
    }


def render_html(kind: str, result: Mapping[str, Any]) -> str:
    """`result` (of the action `kind`, one of `REPORT_KINDS`) as one self-contained HTML page."""
    from .. import __version__

    contexts = {
        "tombstones": _tombstone_context,
        "snapshot": _snapshot_context,
        "vacuum": _vacuum_context,
        "optimize": _rewrite_context,
        "purge": _rewrite_context,
        "checkpoint": _checkpoint_context,
        "cleanup_log": _cleanup_context,
        "restore": _restore_context,
        "repair": _repair_context,
    }
    context = contexts[_check_kind(kind)](result)
    page = _environment().get_template(f"{kind}.html.j2").render(**context, kind=kind, provider_version=__version__)
    return page if page.endswith("\n") else page + "\n"


#: Which renderer makes each report format (`--report-formats`).
RENDERERS: dict[str, Callable[[str, Mapping[str, Any]], str]] = {"md": render_markdown, "html": render_html}
