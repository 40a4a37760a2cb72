"""The report charts (matplotlib, drawn to inline SVG) and the byte and hour formatting they share with the
text reports. matplotlib is imported only when a chart is drawn."""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from markupsafe import Markup
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

#: Most partitions the per-partition chart shows.
MAX_CHART_PARTITIONS = 20
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
# Paul Tol's colour-blind safe palette.
_BLUE, _RED, _GREEN, _GREY = "#4477AA", "#EE6677", "#228833", "#BBBBBB"


def human_bytes(n: int | float | None) -> str:
    """`33554432` -> `32 MiB`, `1536` -> `1.5 KiB`, `12` -> `12 B` (binary units, one decimal at most)."""
    if n is None:
        return "-"
    size = abs(float(n))
    divisor, unit = byte_unit(size)
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


def signed(value: int | None, fmt: Callable[[int], str] | None = None) -> str:
    """A change with its sign (`+3`, `-1.2 MiB`), `0` for none, `-` when unknown."""
    if value is None:
        return "-"
    if not value:
        return "0"
    text = fmt(abs(value)) if fmt else f"{abs(value):,}"
    return ("+" if value > 0 else "-") + text


def byte_unit(largest: float) -> tuple[float, str]:
    """(divisor, unit) that shows `largest` bytes as a number below 1024."""
    divisor, unit = 1.0, "B"
    for candidate in _UNITS[1:]:
        if largest < divisor * 1024:
            break
        divisor, unit = divisor * 1024, candidate
    return divisor, unit


def largest_partitions(holder: Mapping[str, Any] | None) -> list[tuple[str, Mapping[str, Any]]]:
    """The `partitions` of a VACUUM result (its directories) or of a table health, by bytes, largest first."""
    return sorted(((holder or {}).get("partitions") or {}).items(), key=lambda kv: (-kv[1]["bytes"], kv[0]))


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


def _stacked(fig: Figure, rows: int) -> list[Axes]:
    """`rows` styled, gridded axes stacked on one shared x axis."""
    axes = list(fig.subplots(rows, 1, sharex=True)) if rows > 1 else [fig.add_subplot()]
    for ax in axes:
        _style(ax)
        ax.grid(color="#eeeeee")
    return axes


def _integer(*axes: Any) -> None:
    """Whole-number ticks on each of `axes` (an `ax.xaxis` or `ax.yaxis`)."""
    from matplotlib.ticker import MaxNLocator

    for axis in axes:
        axis.set_major_locator(MaxNLocator(integer=True))


def _legend_beside(ax: Axes) -> None:
    ax.legend(frameon=False, fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))  # beside, not on bars


def short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _ranked_bars(
    ranked: Sequence[tuple[str, Mapping[str, Any]]], root: str, segments: Sequence[tuple[str, str, str | None]]
) -> tuple[Figure, Axes, Any, int]:
    """Horizontal stacked bars of the `MAX_CHART_PARTITIONS` largest of `ranked` ((key, stats), largest
    first), one segment per (stats key, colour, legend label); the figure, axes, last bars and shown count."""
    shown = ranked[:MAX_CHART_PARTITIONS]
    divisor, unit = byte_unit(max(sum(p[key] for key, _, _ in segments) for _, p in shown))
    fig, ax = _axes(1.2 + 0.32 * len(shown))
    labels = [short(k or root) for k, _ in shown][::-1]
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


def tombstone_partitions(report: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """Partitions by reclaimable bytes, then retained bytes, largest first."""
    parts = (report.get("partitions") or {}).items()
    return sorted(parts, key=lambda kv: (-kv[1]["reclaimable_bytes"], -kv[1]["retained_bytes"], kv[0]))


def partition_chart(report: Mapping[str, Any]) -> Chart | None:
    ranked = tombstone_partitions(report)
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


def vacuum_chart(result: Mapping[str, Any]) -> Chart | None:
    ranked = [(k, p) for k, p in largest_partitions(result) if p["files"]]
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


def age_chart(report: Mapping[str, Any]) -> Chart | None:
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
    divisor, unit = byte_unit(max([*values, 1]))
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


def _files_and_bytes(
    xs: Sequence[int], points: Sequence[Mapping[str, Any]], files: str, size: str, marker: str | None
) -> tuple[Figure, Axes]:
    """Two axes sharing `xs`: each point's active files (key `files`; and its small files when every point has
    them) above, their bytes (key `size`) below, both from zero. Returns the figure and the lower axes."""
    divisor, unit = byte_unit(max(p[size] or 0 for p in points))
    fig = _figure(4.2)
    files_ax, bytes_ax = _stacked(fig, 2)
    files_ax.plot(xs, [p[files] for p in points], color=_BLUE, marker=marker, label="active files")
    if all(p.get("small_files") is not None for p in points):
        small = [p["small_files"] for p in points]
        files_ax.plot(xs, small, color=_RED, marker=marker, linestyle="--", label="small files")
    files_ax.set_ylabel("files")
    _integer(files_ax.yaxis)
    files_ax.legend(frameon=False, fontsize="small")
    bytes_ax.plot(xs, [(p[size] or 0) / divisor for p in points], color=_GREEN, marker=marker)
    bytes_ax.set_ylabel(f"size ({unit})")
    files_ax.set_ylim(0, max(max(p[files] for p in points), 1) * 1.1)  # a few more files look like a few more
    bytes_ax.set_ylim(0, max(max((p[size] or 0) for p in points) / divisor, 1) * 1.1)
    if len(xs) == 1:
        bytes_ax.set_xlim(xs[0] - 1, xs[0] + 1)
    return fig, bytes_ax


def versions_chart(rows: Sequence[Mapping[str, Any]]) -> Chart | None:
    rows = [r for r in rows if r.get("num_files") is not None]
    if not rows:
        return None
    marker = "o" if len(rows) <= 60 else None
    fig, bytes_ax = _files_and_bytes([r["version"] for r in rows], rows, "num_files", "size_bytes", marker)
    _integer(bytes_ax.xaxis)
    bytes_ax.set_xlabel("table version")
    description = f"Active files and their total size at {'each checked version' if len(rows) > 1 else 'this version'}."
    return _chart(fig, "chart-versions", "Files and bytes over versions", description)


def size_chart(result: Mapping[str, Any]) -> Chart | None:
    hist = result.get("file_size_histogram")
    if not hist or not hist["num_files"]:
        return None
    buckets = hist["buckets"]
    fig, ax = _bar_chart(
        [_range_label(b["min_bytes"], b["max_bytes"], human_bytes) for b in buckets],
        [b["count"] for b in buckets],
        [_RED if b["small"] else _BLUE for b in buckets],
        [human_bytes(b["bytes"]) if b["count"] else "" for b in buckets],
        "files",
        "file size; bar labels: bytes in the bucket",
    )
    _integer(ax.yaxis)
    _edge_line(ax, [not b["small"] for b in buckets], f"small-file threshold {human_bytes(hist['small_file_bytes'])}")
    description = "Active files by size. Left of the dashed line they count as small files (OPTIMIZE compacts them)."
    return _chart(fig, "chart-file-sizes", "File sizes", description)


def checks_chart(result: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> Chart | None:
    commit = result.get("commit_checks")
    if not commit or not rows:
        return None
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
    _integer(ax.yaxis, ax.xaxis)
    ax.set_ylabel("failed checks")
    ax.set_xlabel("table version")
    ax.grid(axis="y", color="#eeeeee")
    ax.legend(frameon=False, fontsize="small", loc="upper left")
    description = "How many checks failed at each version of the range (state checks and commit checks)."
    return _chart(fig, "chart-checks", "Check results per version", description)


def health_chart(health: Mapping[str, Any], before: Mapping[str, Any] | None = None) -> Chart | None:
    """Files per partition (small ones in red), with the count before a rewrite as a grey bar beside."""
    ranked = sorted((health.get("partitions") or {}).items(), key=lambda kv: (-kv[1]["files"], kv[0]))
    if not ranked:
        return None
    shown = ranked[:MAX_CHART_PARTITIONS]
    prior = (before or {}).get("partitions") or {}
    fig, ax = _axes(1.2 + (0.5 if prior else 0.32) * len(shown))
    labels = [short(k or "(unpartitioned)") for k, _ in shown][::-1]
    y = list(range(len(shown)))
    height = 0.4 if prior else 0.8
    small = [p["small_files"] for _, p in shown][::-1]
    other = [p["files"] - p["small_files"] for _, p in shown][::-1]
    after_y = [i - height / 2 for i in y] if prior else y
    ax.barh(after_y, small, height=height, color=_RED, label="small files (after)" if prior else "small files")
    ax.barh(after_y, other, height=height, left=small, color=_BLUE, label="other files (after)" if prior else "other")
    if prior:
        ax.barh([i + height / 2 for i in y], [prior.get(k, {}).get("files", 0) for k, _ in shown][::-1],
                height=height, color=_GREY, label="files before")  # fmt: skip
    ax.set_yticks(y, labels)
    _integer(ax.xaxis)
    ax.set_xlabel("files")
    ax.grid(axis="x", color="#dddddd")
    _legend_beside(ax)
    description = "Active files per partition, small ones in red"
    description += ", beside the count at the version the run read" if prior else ""
    description += _of_largest(len(shown), len(ranked), "partitions")
    return _chart(fig, "chart-health", "Files per partition", description)


def runs_chart(points: Sequence[Mapping[str, Any]]) -> Chart | None:
    """Files and bytes of the table after each of the last runs of this task (oldest first)."""
    points = [p for p in points if p.get("files") is not None]
    if not points:
        return None
    xs = list(range(1, len(points) + 1))
    fig, bytes_ax = _files_and_bytes(xs, points, "files", "bytes", "o")
    labels = [f"v{p['version']}" + ("\n(this run)" if i == len(points) - 1 else "") for i, p in enumerate(points)]
    bytes_ax.set_xticks(xs, labels, fontsize="small")
    bytes_ax.set_xlabel("run (table version after it)")
    n = len(points)
    description = (
        f"Active files and bytes after each of the last {n} runs of this task, oldest first."
        if n > 1
        else "First run: one point; the next runs of this task add theirs."
    )
    return _chart(fig, "chart-runs", "Files and bytes across runs", description)


def zorder_chart(overlap: Mapping[str, Mapping[str, int | None]] | None) -> Chart | None:
    """Per Z-ORDER column, how many pairs of files' [min, max] ranges overlap before and after."""
    if not overlap:
        return None
    columns = list(overlap)
    xs = range(len(columns))
    fig, ax = _axes(3.0)
    before = [overlap[c]["before"] or 0 for c in columns]
    bars = ax.bar([x - 0.2 for x in xs], before, width=0.4, color=_GREY, label="before")
    ax.bar_label(bars, fontsize="x-small", padding=2)
    if all(overlap[c]["after"] is not None for c in columns):
        bars = ax.bar([x + 0.2 for x in xs], [overlap[c]["after"] for c in columns], width=0.4, color=_GREEN,
                      label="after")  # fmt: skip
        ax.bar_label(bars, fontsize="x-small", padding=2)
    ax.set_xticks(list(xs), [short(c) for c in columns])
    top = max([*before, *(overlap[c]["after"] or 0 for c in columns), 1])
    ax.set_ylim(0, top * 1.15)
    _integer(ax.yaxis)
    ax.set_ylabel("overlapping file ranges")
    ax.grid(axis="y", color="#dddddd")
    ax.legend(frameon=False, fontsize="small")
    description = (
        "Per Z-ORDER column, the sum over the rewritten files of how many other files' [min, max] ranges "
        "intersect theirs: fewer means queries filtering on the column skip more files."
    )
    return _chart(fig, "chart-zorder", "Z-ORDER: overlapping ranges before and after", description)


# -- the lake report (commands/lake_report.py) ------------------------------------------------------------
#: Most x labels a chart across runs writes out; past it, every k-th run is named.
MAX_RUN_LABELS = 12


def _run_labels(labels: Sequence[str]) -> list[str]:
    """`labels` as written under the axis: all of them when few; else only the runs' names (the first line,
    not a point's "after"), every k-th, so that at most `MAX_RUN_LABELS` are written."""
    if len(labels) <= MAX_RUN_LABELS:
        return list(labels)
    named = [i for i, label in enumerate(labels) if label != "after"]
    step = -(-len(named) // MAX_RUN_LABELS)
    keep = set(named[::step])
    return [label.split("\n")[0] if i in keep else "" for i, label in enumerate(labels)]


def _run_axes(fig: Figure, rows: int, labels: Sequence[str]) -> list[Axes]:
    """`rows` stacked axes sharing one x axis of runs (oldest first), the last labelled with `labels`."""
    axes = _stacked(fig, rows)
    xs = list(range(1, len(labels) + 1))
    slanted = len(labels) > 6
    axes[-1].set_xticks(
        xs, _run_labels(labels), fontsize="small", rotation=30 if slanted else 0, ha="right" if slanted else "center"
    )
    if len(xs) == 1:
        axes[-1].set_xlim(0, 2)
    return axes


def lake_health_chart(points: Sequence[Mapping[str, Any]], *, title: str = "Health across runs") -> Chart | None:
    """A table's (or the lake's) health before and after each run, or at each run's plan time when `points`
    are the runs' records (phase `plan`), oldest first: files and small files, tombstone bytes (those past
    retention apart), rows hidden by deletion vectors, commits since the last checkpoint (the lake's: summed
    over its tables)."""
    points = [p for p in points if p.get("files") is not None]
    if not points:
        return None
    xs = list(range(1, len(points) + 1))
    marker = "o" if len(points) <= 60 else None
    fig = _figure(6.4)
    files_ax, tomb_ax, dv_ax, commits_ax = _run_axes(fig, 4, [p["label"] for p in points])
    files_ax.plot(xs, [p["files"] for p in points], color=_BLUE, marker=marker, label="active files")
    files_ax.plot(
        xs, [p["small_files"] for p in points], color=_RED, marker=marker, linestyle="--", label="small files"
    )
    files_ax.set_ylabel("files")
    files_ax.set_ylim(0, max(max(p["files"] for p in points), 1) * 1.15)
    _legend_beside(files_ax)
    divisor, unit = byte_unit(max(max(p["tombstone_bytes"] or 0 for p in points), 1))
    tomb_ax.plot(xs, [(p["tombstone_bytes"] or 0) / divisor for p in points], color=_GREY, marker=marker,
                 label="tombstoned")  # fmt: skip
    tomb_ax.plot(xs, [(p["reclaimable_bytes"] or 0) / divisor for p in points], color=_RED, marker=marker,
                 linestyle="--", label="past retention")  # fmt: skip
    tomb_ax.set_ylabel(f"tombstones ({unit})")
    tomb_ax.set_ylim(0, max(max(p["tombstone_bytes"] or 0 for p in points) / divisor, 1) * 1.15)
    _legend_beside(tomb_ax)
    dv_ax.plot(xs, [p["dv_rows"] or 0 for p in points], color=_GREEN, marker=marker)
    dv_ax.set_ylabel("DV rows")
    dv_ax.set_ylim(0, max(max(p["dv_rows"] or 0 for p in points), 1) * 1.15)
    commits_ax.plot(xs, [p["commits_since_checkpoint"] or 0 for p in points], color=_BLUE, marker=marker)
    commits_ax.set_ylabel("commits since\ncheckpoint")
    commits_ax.set_ylim(0, max(max(p["commits_since_checkpoint"] or 0 for p in points), 1) * 1.15)
    _integer(files_ax.yaxis, dv_ax.yaxis, commits_ax.yaxis)
    lake = any("tables_counted" in p for p in points)
    recorded = all(p.get("phase") == "plan" for p in points)  # the runs' plan-time records, no log read
    when = "at each run's plan time, as the run recorded it" if recorded else "before and after each run"
    commits_ax.set_xlabel(f"{when} (oldest first)")
    what = "The lake (its tables summed, each at its last reading)" if lake else "The table"
    now = "" if lake or recorded else ", and now"
    description = (
        f"{what} {when}, oldest first{now}: active and small files, tombstoned bytes, rows hidden by "
        "deletion vectors, commits since the last checkpoint."
        if len(points) > 1
        else "One point so far; the next runs add theirs."
    )
    if lake and any(p.get("tables_recorded") for p in points):
        description += " A table whose log was not read counts at its last plan-time record."
    return _chart(fig, "chart-lake-health" if lake else "chart-health-runs", title, description)


def maintenance_chart(runs: Sequence[Mapping[str, Any]], chart_id: str = "chart-maintenance") -> Chart | None:
    """What each run spent (bytes read and written, seconds) and saved (files removed, bytes reclaimed)."""
    if not runs:
        return None
    xs = list(range(1, len(runs) + 1))
    fig = _figure(4.6)
    bytes_ax, files_ax = _run_axes(fig, 2, [r["label"] for r in runs])
    series = [
        ("bytes_read", "read (rewritten)", _GREY, -0.27),
        ("bytes_written", "written", _BLUE, 0.0),
        ("bytes_reclaimed", "reclaimed", _GREEN, 0.27),
    ]
    divisor, unit = byte_unit(max([max(r[k] or 0 for r in runs) for k, *_ in series] + [1]))
    for key, label, color, offset in series:
        bytes_ax.bar([x + offset for x in xs], [(r[key] or 0) / divisor for r in runs], width=0.26, color=color,
                     label=label)  # fmt: skip
    bytes_ax.set_ylabel(f"bytes ({unit})")
    _legend_beside(bytes_ax)
    bars = files_ax.bar(xs, [r["files_removed"] or 0 for r in runs], width=0.5, color=_GREEN, label="files removed")
    if len(runs) <= 2 * MAX_RUN_LABELS:  # beyond, the labels would overlap: the table below has the seconds
        files_ax.bar_label(bars, labels=[f"{(r['seconds'] or 0):.3g} s" for r in runs], fontsize="x-small", padding=2)
    files_ax.set_ylabel("files removed")
    files_ax.set_ylim(0, max(max(r["files_removed"] or 0 for r in runs), 1) * 1.25)
    _integer(files_ax.yaxis)
    seconds = "; bar labels: seconds the run's steps took" if len(runs) <= 2 * MAX_RUN_LABELS else ""
    files_ax.set_xlabel(f"run (oldest first){seconds}")
    description = (
        "Per run: bytes the rewrites read and wrote and the bytes VACUUM reclaimed; files removed "
        "(compaction's net, VACUUM's and log cleanup's deletions) with the seconds the steps took."
    )
    return _chart(fig, chart_id, "What maintenance spent and saved", description)


def lake_tables_chart(tables: Sequence[Mapping[str, Any]]) -> Chart | None:
    """Each table's active files now (small ones in red), the most files first."""
    ranked = [(t["table"], t["latest"]) for t in tables if (t.get("latest") or {}).get("files") is not None]
    ranked.sort(key=lambda kv: (-kv[1]["files"], kv[0]))
    if not ranked:
        return None
    shown = ranked[:MAX_CHART_PARTITIONS]
    fig, ax = _axes(1.2 + 0.32 * len(shown))
    labels = [short(k, 60) for k, _ in shown][::-1]
    small = [p["small_files"] for _, p in shown][::-1]
    ax.barh(labels, small, color=_RED, label="small files")
    ax.barh(labels, [p["files"] - p["small_files"] for _, p in shown][::-1], left=small, color=_BLUE, label="other")
    _integer(ax.xaxis)
    ax.set_xlabel("active files")
    ax.grid(axis="x", color="#dddddd")
    _legend_beside(ax)
    description = "Active files of each table at its latest point, small ones in red"
    description += _of_largest(len(shown), len(ranked), "tables")
    return _chart(fig, "chart-lake-tables", "Files per table", description)
