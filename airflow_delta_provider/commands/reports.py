"""Markdown and HTML renderings of the command layer's result dicts (`REPORT_KINDS`).

The HTML page (Jinja templates in `templates/`) is self-contained: its charts are inline SVG drawn by
matplotlib and a Content-Security-Policy forbids fetching anything, so it opens offline or in a mail
client. jinja2 and matplotlib are imported only for HTML; Markdown needs neither.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..delta.protocol.history import format_ms
from .charts import (
    age_chart,
    checks_chart,
    human_bytes,
    human_hours,
    partition_chart,
    short,
    size_chart,
    tombstone_partitions,
    vacuum_chart,
    vacuum_partitions,
    versions_chart,
)

if TYPE_CHECKING:  # pragma: no cover
    import jinja2
    import pyarrow as pa

    from ..delta.snapshot import Snapshot

#: The result kinds these renderings know.
REPORT_KINDS = ("tombstones", "snapshot", "vacuum")
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


def render_markdown(kind: str, result: Mapping[str, Any]) -> str:
    """`result` (of the action `kind`, one of `REPORT_KINDS`) as Markdown: a title, a list, then a table per
    section that has rows."""
    parts = {"tombstones": _tombstone_markdown, "snapshot": _snapshot_markdown, "vacuum": _vacuum_markdown}
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
    env.filters.update(bytes=human_bytes, hours=human_hours, when=_when, percent=_percent, short=short)
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
    charts = [c for c in (versions_chart(rows), size_chart(result), checks_chart(result, rows)) if c is not None]
    return {
        "title": f"Snapshot report: {result['table']}",
        "r": result,
        "summary": result.get("file_summary") or {},
        "commit": commit,
        **_capped("versions", rows, last=True),
        **_capped("failures", list(commit.get("failures") or ())),
        "failed_items": _failed_items(result),
        "has_checks": _has_checks(result),
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


def render_html(kind: str, result: Mapping[str, Any]) -> str:
    """`result` (of the action `kind`, one of `REPORT_KINDS`) as one self-contained HTML page."""
    from .. import __version__

    contexts = {"tombstones": _tombstone_context, "snapshot": _snapshot_context, "vacuum": _vacuum_context}
    context = contexts[_check_kind(kind)](result)
    page = _environment().get_template(f"{kind}.html.j2").render(**context, kind=kind, provider_version=__version__)
    return page if page.endswith("\n") else page + "\n"


#: Which renderer makes each report format (`--report-formats`).
RENDERERS: dict[str, Callable[[str, Mapping[str, Any]], str]] = {"md": render_markdown, "html": render_html}
