"""Markdown and HTML renderings of the command layer's result dicts (`REPORT_KINDS`).

The HTML page (Jinja templates in `templates/`) is self-contained: its charts are inline SVG drawn by
matplotlib and a Content-Security-Policy forbids fetching anything, so it opens offline or in a mail
client. jinja2 and matplotlib are imported only for HTML; Markdown needs neither.
"""

from __future__ import annotations

import io
import itertools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..delta.protocol.history import format_ms

if TYPE_CHECKING:  # pragma: no cover
    import jinja2
    import pyarrow as pa
    from markupsafe import Markup
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from ..delta.snapshot import Snapshot

#: The result kinds these renderings know.
REPORT_KINDS = ("tombstones", "snapshot", "vacuum")
#: Most rows an HTML table shows (largest first where there is an order); the JSON has them all.
MAX_TABLE_ROWS = 500
#: Most partitions the per-partition chart shows.
MAX_CHART_PARTITIONS = 20

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
_HOUR_MS = 3_600_000
#: Upper edges (hours) of the deletion-age buckets; the retention window is added as one more edge.
AGE_EDGES_HOURS = (1, 6, 24, 48, 72, 168, 336, 720, 2160, 4320, 8760)
#: Upper edges (bytes) of the file-size buckets; the small-file threshold is added as one more edge.
SIZE_EDGES_BYTES = (
    *(4**k * 1024 for k in range(6)),  # 1 KiB, 4 KiB, ... 1 MiB
    *(2**k * 1024**2 for k in range(1, 13)),  # 2 MiB ... 4 GiB
)
# Paul Tol's colour-blind safe palette.
_BLUE, _RED, _GREEN, _GREY = "#4477AA", "#EE6677", "#228833", "#BBBBBB"


# -- numbers ---------------------------------------------------------------------------------------------
def human_bytes(n: int | float | None) -> str:
    """`33554432` -> `32 MiB`, `1536` -> `1.5 KiB`, `12` -> `12 B` (binary units, one decimal at most)."""
    if n is None:
        return "-"
    size = abs(float(n))
    divisor, unit = _byte_unit(size)
    text = f"{size:.0f}" if unit == "B" else f"{size / divisor:.1f}".removesuffix(".0")
    return f"{'-' if n < 0 else ''}{text} {unit}"


def human_hours(hours: float | None) -> str:
    """`1` -> `1 h`, `168` -> `7 d`, `0.5` -> `30 min`."""
    if hours is None:
        return "-"
    if hours < 1:
        return f"{hours * 60:.3g} min"
    if hours < 48:
        return f"{hours:.3g} h"
    return f"{hours / 24:.3g} d"


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


def _byte_unit(largest: float) -> tuple[float, str]:
    """(divisor, unit) that shows `largest` bytes as a number below 1024."""
    divisor, unit = 1.0, "B"
    for candidate in _UNITS[1:]:
        if largest < divisor * 1024:
            break
        divisor, unit = divisor * 1024, candidate
    return divisor, unit


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


def _vacuum_partitions(result: Mapping[str, Any]) -> list[tuple[str, Mapping[str, int]]]:
    parts = (result.get("partitions") or {}).items()
    return sorted(parts, key=lambda kv: (-kv[1]["bytes"], kv[0]))


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
    rows = [[k or "(table root)", p["files"], human_bytes(p["bytes"])] for k, p in _vacuum_partitions(result)]
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


# -- charts ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Chart:
    """One inline SVG chart: `id` (unique in the page), title, a sentence saying what it shows."""

    id: str
    title: str
    description: str
    svg: Markup


def _figure(height: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(10, height), layout="constrained")


def _axes(height: float) -> tuple[Figure, Axes]:
    fig = _figure(height)
    ax = fig.add_subplot()
    _style(ax)
    return fig, ax


_SVG_START = re.compile(r"<svg\b")


def _chart(fig: Figure, chart_id: str, title: str, description: str) -> Chart:
    """`fig` as inline SVG: text kept as text (selectable, scalable), ids salted per chart so several
    charts share a page, no XML prolog or creation date."""
    import matplotlib
    from markupsafe import Markup, escape

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": chart_id}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    start = _SVG_START.search(text)
    assert start is not None, "matplotlib wrote no <svg> element"
    svg = text[start.start() :]
    open_end = svg.index(">") + 1
    head = svg[:open_end].replace("<svg", f'<svg role="img" aria-labelledby="{chart_id}-title"', 1)
    svg = f'{head}<title id="{chart_id}-title">{escape(title)}</title>{svg[open_end:]}'
    return Chart(chart_id, title, description, Markup(svg))


def _style(ax: Axes) -> None:
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.set_axisbelow(True)


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _ranked_bars(
    ranked: Sequence[tuple[str, Mapping[str, Any]]], root: str, segments: Sequence[tuple[str, str, str | None]]
) -> tuple[Figure, Axes, Any, int]:
    """Horizontal stacked bars of the `MAX_CHART_PARTITIONS` largest of `ranked` ((key, stats), largest
    first), one segment per (stats key, colour, legend label); the figure, axes, last bars and shown count."""
    shown = ranked[:MAX_CHART_PARTITIONS]
    divisor, unit = _byte_unit(max(sum(p[key] for key, _, _ in segments) for _, p in shown))
    fig, ax = _axes(1.2 + 0.32 * len(shown))
    labels = [_short(k or root) for k, _ in shown][::-1]
    left = [0.0] * len(shown)
    for key, color, label in segments:
        values = [p[key] / divisor for _, p in shown][::-1]
        bars = ax.barh(labels, values, left=left, color=color, label=label)
        left = [a + b for a, b in zip(left, values, strict=True)]
    ax.set_xlabel(f"{'bytes of tombstones' if len(segments) > 1 else 'bytes'} ({unit})")
    ax.grid(axis="x", color="#dddddd")
    return fig, ax, bars, len(shown)


def _of_largest(shown: int, total: int, what: str) -> str:
    return f" (the {shown} largest of {total} {what})." if total > shown else "."


def _tombstone_partitions(report: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """Partitions by reclaimable bytes, then retained bytes, largest first."""
    parts = (report.get("partitions") or {}).items()
    return sorted(parts, key=lambda kv: (-kv[1]["reclaimable_bytes"], -kv[1]["retained_bytes"], kv[0]))


def _partition_chart(report: Mapping[str, Any]) -> Chart | None:
    ranked = _tombstone_partitions(report)
    if not ranked or not report.get("num_tombstones"):
        return None
    segments = [
        ("reclaimable_bytes", _RED, "past retention (reclaimable by VACUUM)"),
        ("retained_bytes", _BLUE, "retained"),
    ]
    fig, ax, _, shown = _ranked_bars(ranked, "(unpartitioned)", segments)
    ax.legend(loc="lower right", frameon=False, fontsize="small")
    description = "Bytes of removed files per partition, largest reclaimable first"
    description += _of_largest(shown, len(ranked), "partitions")
    return _chart(fig, "chart-partitions", "Reclaimable bytes per partition", description)


def _vacuum_chart(result: Mapping[str, Any]) -> Chart | None:
    ranked = [(k, p) for k, p in _vacuum_partitions(result) if p["files"]]
    if not ranked:
        return None
    fig, ax, bars, shown = _ranked_bars(ranked, "(table root)", [("bytes", _RED, None)])
    ax.bar_label(bars, labels=[f"{p['files']:,} files" for _, p in ranked[:shown]][::-1], fontsize="x-small", padding=3)
    ax.margins(x=0.12)
    dry_run = result.get("dry_run", True)
    description = f"Bytes VACUUM {'would delete' if dry_run else 'deleted'} per directory, largest first"
    description += _of_largest(shown, len(ranked), "directories")
    title = "Files to delete per directory" if dry_run else "Files deleted per directory"
    return _chart(fig, "chart-vacuum", title, description)


def _range_label(lo: float, hi: float | None, fmt: Callable[[float], str]) -> str:
    if hi is None:
        return f"≥ {fmt(lo)}"
    if lo == 0:
        return f"< {fmt(hi)}"
    return f"{fmt(lo)}\N{EN DASH}{fmt(hi)}"


def _bar_chart(
    labels: Sequence[str],
    heights: Sequence[float],
    colors: Sequence[str],
    bar_labels: Sequence[str],
    ylabel: str,
    xlabel: str,
) -> tuple[Figure, Axes]:
    """Vertical bars with a label each, and their x labels slanted."""
    fig, ax = _axes(3.6)
    bars = ax.bar(range(len(labels)), heights, color=colors)
    ax.bar_label(bars, labels=bar_labels, fontsize="x-small", padding=2)
    ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize="small")
    ax.set_ylabel(ylabel)
    ax.set_xlabel(xlabel)
    ax.grid(axis="y", color="#dddddd")
    ax.margins(y=0.15)
    return fig, ax


def _edge_line(ax: Axes, flags: Sequence[bool], text: str) -> None:
    """A dashed line between the last bar with a false flag and the first with a true one."""
    index = next((i for i, f in enumerate(flags) if f), len(flags))
    x = index - 0.5
    ax.axvline(x, color="#333333", linestyle="--", linewidth=1)
    ax.annotate(text, (x, 1), xycoords=("data", "axes fraction"), xytext=(4, -2), textcoords="offset points",
                va="top", fontsize="small")  # fmt: skip


def _age_chart(report: Mapping[str, Any]) -> Chart | None:
    hist = report.get("deletion_age_histogram")
    if not hist or not (hist["buckets"] or hist["without_timestamp"]["count"]):
        return None
    buckets = [
        (
            _range_label(b["min_hours"], b["max_hours"], human_hours),
            b["bytes"],
            b["count"],
            _RED if b["expired"] else _BLUE,
        )
        for b in hist["buckets"]
    ]
    if hist["without_timestamp"]["count"]:
        buckets.append(("no timestamp", hist["without_timestamp"]["bytes"], hist["without_timestamp"]["count"], _GREY))
    labels, values, counts, colors = zip(*buckets, strict=True)
    divisor, unit = _byte_unit(max([*values, 1]))
    xlabel = "age of the tombstone (time since the file was removed); bar labels: files"
    bar_labels = [f"{c:,}" if c else "" for c in counts]
    fig, ax = _bar_chart(labels, [v / divisor for v in values], colors, bar_labels, f"bytes ({unit})", xlabel)
    if hist["buckets"]:
        _edge_line(ax, [b["expired"] for b in hist["buckets"]], f"retention {human_hours(hist['retention_hours'])}")
    description = (
        "Bytes of removed files by how long ago they were removed. Right of the dashed line they are past "
        "the retention window: VACUUM may delete them."
    )
    return _chart(fig, "chart-deletion-ages", "Deletion age against the retention cutoff", description)


def _versions_chart(rows: Sequence[Mapping[str, Any]]) -> Chart | None:
    rows = [r for r in rows if r.get("num_files") is not None]
    if not rows:
        return None
    from matplotlib.ticker import MaxNLocator

    versions = [r["version"] for r in rows]
    divisor, unit = _byte_unit(max(r["size_bytes"] or 0 for r in rows))
    marker = "o" if len(rows) <= 60 else None
    fig = _figure(4.2)
    files_ax, bytes_ax = fig.subplots(2, 1, sharex=True)
    for ax in (files_ax, bytes_ax):
        _style(ax)
        ax.grid(color="#eeeeee")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    files_ax.plot(versions, [r["num_files"] for r in rows], color=_BLUE, marker=marker, label="active files")
    if all(r.get("small_files") is not None for r in rows):
        small = [r["small_files"] for r in rows]
        files_ax.plot(versions, small, color=_RED, marker=marker, linestyle="--", label="small files")
    files_ax.set_ylabel("files")
    files_ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    files_ax.legend(frameon=False, fontsize="small")
    bytes_ax.plot(versions, [(r["size_bytes"] or 0) / divisor for r in rows], color=_GREEN, marker=marker)
    bytes_ax.set_ylabel(f"size ({unit})")
    files_top = max(max(r["num_files"] for r in rows), 1)
    bytes_top = max(max((r["size_bytes"] or 0) for r in rows) / divisor, 1)
    files_ax.set_ylim(0, files_top * 1.1)  # from zero: a few more files should look like a few more
    bytes_ax.set_ylim(0, bytes_top * 1.1)
    bytes_ax.set_xlabel("table version")
    if len(versions) == 1:
        files_ax.set_xlim(versions[0] - 1, versions[0] + 1)
    description = f"Active files and their total size at {'each checked version' if len(rows) > 1 else 'this version'}."
    return _chart(fig, "chart-versions", "Files and bytes over versions", description)


def _size_chart(result: Mapping[str, Any]) -> Chart | None:
    hist = result.get("file_size_histogram")
    if not hist or not hist["num_files"]:
        return None
    from matplotlib.ticker import MaxNLocator

    buckets = hist["buckets"]
    fig, ax = _bar_chart(
        [_range_label(b["min_bytes"], b["max_bytes"], human_bytes) for b in buckets],
        [b["count"] for b in buckets],
        [_RED if b["small"] else _BLUE for b in buckets],
        [human_bytes(b["bytes"]) if b["count"] else "" for b in buckets],
        "files",
        "file size; bar labels: bytes in the bucket",
    )
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    _edge_line(ax, [not b["small"] for b in buckets], f"small-file threshold {human_bytes(hist['small_file_bytes'])}")
    description = "Active files by size. Left of the dashed line they count as small files (OPTIMIZE compacts them)."
    return _chart(fig, "chart-file-sizes", "File sizes", description)


def _checks_chart(result: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> Chart | None:
    commit = result.get("commit_checks")
    if not commit or not rows:
        return None
    from matplotlib.ticker import MaxNLocator

    versions = [r["version"] for r in rows]
    failed = [len(r["failed_checks"]) for r in rows]
    fig, ax = _axes(2.6)
    ax.bar(versions, failed, color=_RED, width=0.8, label="failed checks")
    passed = [v for v, n in zip(versions, failed, strict=True) if not n]
    ax.plot(passed, [0] * len(passed), linestyle="none", marker="o", color=_GREEN, label="all checks passed")
    missing = list(commit.get("missing_versions") or ()) + list(commit.get("unchecked_versions") or ())
    if missing:
        ax.plot(missing, [0] * len(missing), linestyle="none", marker="x", color=_GREY, label="not checked")
    ax.set_ylim(bottom=-0.3, top=max([*failed, 1]) + 0.5)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("failed checks")
    ax.set_xlabel("table version")
    ax.grid(axis="y", color="#eeeeee")
    ax.legend(frameon=False, fontsize="small", loc="upper left")
    description = "How many checks failed at each version of the range (state checks and commit checks)."
    return _chart(fig, "chart-checks", "Check results per version", description)


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
    env.filters.update(bytes=human_bytes, hours=human_hours, when=_when, percent=_percent, short=_short)
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
        **_capped("partitions", _tombstone_partitions(report)),
        "charts": [c for c in (_partition_chart(report), _age_chart(report)) if c is not None],
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
    charts = [c for c in (_versions_chart(rows), _size_chart(result), _checks_chart(result, rows)) if c is not None]
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
        **_capped("partitions", _vacuum_partitions(result)),
        **_capped("files", files),
        "charts": [c for c in (_vacuum_chart(result),) if c is not None],
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
