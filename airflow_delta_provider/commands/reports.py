"""Markdown and HTML renderings of the command layer's result dicts (`REPORT_KINDS`).

One function per report kind (`_REPORTS`) reads a result once into a `_Report`: its title, the Markdown's
list and tables, and what the HTML page's template (`templates/<kind>.html.j2`) adds. The HTML page is
self-contained: its charts are inline SVG drawn by matplotlib and a Content-Security-Policy forbids fetching
anything, so it opens offline or in a mail client. jinja2 and matplotlib are imported only for HTML (the
charts are drawn only then); Markdown needs neither. What the reports show beyond the result's own values
(histograms, table health, runs) is computed in `report_data`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from ..delta.protocol.history import format_ms
from .charts import (
    Chart,
    age_chart,
    checks_chart,
    health_chart,
    human_bytes,
    human_hours,
    largest_partitions,
    partition_chart,
    runs_chart,
    short,
    size_chart,
    tombstone_partitions,
    vacuum_chart,
    versions_chart,
    zorder_chart,
)
from .report_data import HOUR_MS, changes_since, run_point

if TYPE_CHECKING:  # pragma: no cover
    import jinja2

#: Rewrites (and RESTORE): the table's health is read before (at `read_version`) and after (at `version`).
REWRITE_KINDS = ("optimize", "purge", "restore", "repair")
#: Kinds whose report shows the table's health, what changed since the previous run and the runs' chart.
HEALTH_KINDS = (*REWRITE_KINDS, "checkpoint", "cleanup_log")
#: Most earlier runs the charts across runs show.
MAX_RUNS = 30
#: Most rows an HTML table shows (largest first where there is an order); the JSON has them all.
MAX_TABLE_ROWS = 500

_Section = tuple[str, Sequence[str], Sequence[Sequence[Any]]]  # heading, column headers, rows


@dataclass(frozen=True)
class _Report:
    """One result's report in both formats: the title, the Markdown's list and its tables (one per section
    with rows), and what the HTML template reads beside the result (`page`; `charts` drawn only for it)."""

    title: str
    lines: list[str]
    sections: list[_Section] = field(default_factory=list)
    page: dict[str, Any] = field(default_factory=dict)
    charts: Sequence[Callable[[], Chart | None]] = ()


# -- words for numbers ----------------------------------------------------------------------------------------
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


def _count(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


def _signed(n: int | None, fmt: Callable[[int], str] = "{:,}".format) -> str:
    if n is None:
        return "-"
    return ("+" if n > 0 else "-" if n < 0 else "±") + fmt(abs(n))


def _capped(name: str, rows: Sequence[Any], *, last: bool = False) -> dict[str, Any]:
    """`rows` (the last ones with `last`) cut to `MAX_TABLE_ROWS` as `name`, and how many were left out."""
    kept = rows[-MAX_TABLE_ROWS:] if last else rows[:MAX_TABLE_ROWS]
    return {name: kept, f"{name}_left_out": len(rows) - len(kept)}


def _paths(heading: str, paths: Sequence[str] | None) -> _Section:
    return (heading, ["path"], [[p] for p in (paths or ())[:MAX_TABLE_ROWS]])


def _plan_or_report(name: str, result: Mapping[str, Any]) -> str:
    return f"{name} {'plan' if result.get('dry_run', True) else 'report'}: {result['table']}"


# -- tombstones ---------------------------------------------------------------------------------------------
def _retention_text(r: Mapping[str, Any], *, short: bool = False) -> str:
    prop = f", table property {r['table_property']!r}" if r.get("table_property") else ""
    cutoff = _when(r["cutoff_ms"]) if short else r["cutoff"]
    return f"{human_hours(r['hours'])} ({r['source']}{prop}); cutoff {cutoff}"


def _tombstones(report: Mapping[str, Any]) -> _Report:
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
        [key or "(unpartitioned)", p["retained"], human_bytes(p["retained_bytes"]), p["expired"],
         human_bytes(p["reclaimable_bytes"]), _ms(p.get("oldest_deletion_ms")), _ms(p.get("newest_deletion_ms"))]
        for key, p in report.get("partitions", {}).items()
    ]  # fmt: skip
    page = {
        "retention": _retention_text(report["retention"], short=True),
        **_capped("partitions", tombstone_partitions(report)),
    }
    charts = (partial(partition_chart, report), partial(age_chart, report))
    return _Report(f"Tombstone report: {report['table']}", lines, [("Per partition", headers, rows)], page, charts)


# -- snapshot and its checks -----------------------------------------------------------------------------------
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


def _snapshot(result: Mapping[str, Any]) -> _Report:
    s = result.get("file_summary") or {}
    proto = result.get("protocol") or {}
    commit = result.get("commit_checks") or {}
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
    if commit:
        first = commit.get("first_failing_version")
        lines.append(
            f"Versions checked: {len(commit.get('checked_versions') or ())} in ({commit['since_version']}, "
            f"{commit['until_version']}]" + (f"; first failing version {first}" if first else "")
        )
    failed = [m for m in (result.get("checks_failed"), result.get("commit_checks_failed")) if m]
    lines.append("Checks: " + ("; ".join(failed) if failed else "all passed" if _has_checks(result) else "none"))
    rows = _version_rows(result)
    checks = [[c["name"], "passed" if c["passed"] else "FAILED", c["message"]] for c in result.get("checks") or ()]
    versions = [
        [r["version"], r.get("operation") or "-", r["num_files"], human_bytes(r["size_bytes"]),
         r.get("small_files", "-"), ", ".join(r["failed_checks"]) or "passed"]
        for r in (rows if commit.get("per_version") else ())
    ]  # fmt: skip
    failures = [[f["version"], f["check"], f["message"]] for f in commit.get("failures") or ()]
    sections: list[_Section] = [
        (f"Checks at version {result['version']}", ["check", "result", "message"], checks),
        ("Per version", ["version", "operation", "files", "size", "small files", "checks"], versions),
        ("Failures", ["version", "check", "message"], failures),
    ]
    page = {
        "summary": s,
        "commit": commit,
        **_capped("versions", rows, last=True),
        **_capped("failures", list(commit.get("failures") or ())),
        "failed_items": _failed_items(result),
        "has_checks": _has_checks(result),
        "changes": _changes_text(result) if "runs" in result else None,
    }
    # one checked version makes a one-point line: the runs of this task say more (when they were read)
    over = partial(runs_chart, _runs(result)) if len(rows) == 1 and "runs" in result else partial(versions_chart, rows)
    charts = (over, partial(size_chart, result), partial(checks_chart, result, rows))
    return _Report(f"Snapshot report: {result['table']}", lines, sections, page, charts)


# -- VACUUM --------------------------------------------------------------------------------------------------
def _vacuum(result: Mapping[str, Any]) -> _Report:
    dry_run = result.get("dry_run", True)
    lines = [
        f"Table: {result['table']}",
        f"Version: {result['version']}",
        f"Mode: {result['mode']}",
        f"Retention: {human_hours(result['retention_ms'] / HOUR_MS)}; "
        f"cutoff {result.get('cutoff') or _ms(result.get('cutoff_ms'))}",
    ]
    if dry_run:
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
    partitions = largest_partitions(result)
    rows = [[k or "(table root)", p["files"], human_bytes(p["bytes"])] for k, p in partitions]
    files = sorted(result.get("files") or (), key=lambda f: (-int(f.get("size") or 0), f["path"]))
    page = {
        "dry_run": dry_run,
        "retention_hours": result["retention_ms"] / HOUR_MS,
        **_capped("partitions", partitions),
        **_capped("files", files),
    }
    sections: list[_Section] = [("Per directory", ["directory", "files", "bytes"], rows)]
    return _Report(_plan_or_report("VACUUM", result), lines, sections, page, (partial(vacuum_chart, result),))


# -- the table's health, before and after a run, and across runs -----------------------------------------------
def _runs(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The earlier runs of this task (`runs`, oldest first) and this one, as chart points."""
    current = run_point(result, name="this run")
    return [*(result.get("runs") or ())][-MAX_RUNS:] + ([current] if current else [])


def _changes_text(result: Mapping[str, Any]) -> str:
    """What changed in the table since the previous run of this task, or that this is the first."""
    current = run_point(result)
    if current is None:
        return "unknown (no table health in this result)"
    c = changes_since((result.get("runs") or [None])[-1], current)
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


def _health_section(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> _Section:
    """Per partition, largest first: the table after the run, beside the file counts before it when both
    were read."""
    both = bool(before and after)
    headers = ["partition", *(["files before"] if both else []), "files", "bytes", "small files", "state", "rows"]
    shown, prior = after or before, ((before or {}).get("partitions") or {}) if both else None
    rows = []
    for key, p in largest_partitions(shown)[:MAX_TABLE_ROWS]:
        was = [(prior.get(key) or {"files": 0})["files"]] if prior is not None else []
        rows.append([key or "(unpartitioned)", *was, p["files"], human_bytes(p["bytes"]), p["small_files"],
                     _health_status(p), "-" if p["rows"] is None else p["rows"]])  # fmt: skip
    return ("Per partition", headers, rows)


def _with_health(
    result: Mapping[str, Any],
    title: str,
    lines: list[str],
    sections: list[_Section],
    charts: Sequence[Callable[[], Chart | None]] = (),
    **page: Any,
) -> _Report:
    """A report of a kind that reads the table's health (`HEALTH_KINDS`): `lines` end with the change since
    the previous run, and the page shows the partitions (largest first), the rows before and after when both
    were read and, after `charts`, the charts of the partitions and of the runs."""
    before, after = _before_after(result)
    shown = after or before or {}
    parts = largest_partitions(shown)
    both = bool(before and after)
    page = {
        "before": before if after else None,
        "after": shown or None,
        "rows_before": _rows(before) if both else None,
        "rows_after": _rows(after) if both else None,
        **_capped("partitions", [(k, p, _health_status(p)) for k, p in parts]),
        "changes": _changes_text(result),
        "runs": _runs(result),
        "dry_run": result.get("dry_run", True),
        **page,
    }
    charts = (*charts, partial(health_chart, shown, page["before"]), partial(runs_chart, page["runs"]))
    return _Report(title, [*lines, f"Since the previous run: {page['changes']}"], sections, page, charts)


def _before_after(result: Mapping[str, Any]) -> tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]:
    health = result.get("health") or {}
    return health.get("before"), health.get("after")


def _rewrite_name(result: Mapping[str, Any]) -> str:
    if "num_deleted_rows_purged" in result:
        return "PURGE"
    return f"OPTIMIZE ZORDER BY ({', '.join(result['zorder_by'])})" if result.get("zorder_by") else "OPTIMIZE"


def _rewrite(result: Mapping[str, Any]) -> _Report:
    """OPTIMIZE (with Z-ORDER) and PURGE."""
    name = _rewrite_name(result)
    before, after = _before_after(result)
    lines = [f"Table: {result['table']}", f"Read version: {result['read_version']}"]
    removed = f"{result['num_files_removed']} files ({human_bytes(result['bytes_removed'])})"
    if result.get("dry_run", True):
        lines.append(f"Dry run: nothing was written. {removed} would be rewritten.")
    else:
        lines.append(
            f"Committed version {result['version']}: {removed} rewritten into {result['num_files_added']} "
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
    charts = (partial(zorder_chart, result.get("zorder_overlap")),)
    return _with_health(
        result, _plan_or_report(name, result), lines, [_health_section(before, after)], charts, name=name
    )


def _checkpoint(result: Mapping[str, Any]) -> _Report:
    after = _before_after(result)[1]
    written = "written" if result.get("written") else "not written (already there)"
    lines = [
        f"Table: {result['table']}",
        f"Version: {result['version']}",
        f"Checkpoint: {result['kind']}, {written}: {result['path']}",
        f"Actions: {result['num_actions']} ({result['num_add_files']} files, {result['num_tombstones']} tombstones); "
        f"{human_bytes(result.get('size_in_bytes'))}",
        f"Parts: {len(result.get('parts') or ()) or 1}; sidecars: {len(result.get('sidecars') or ())}",
        f"Rows (from stats): {_count(_rows(after))}",
    ]
    return _with_health(result, f"Checkpoint report: {result['table']}", lines, [_health_section(None, after)])


def _cleanup_log(result: Mapping[str, Any]) -> _Report:
    after = _before_after(result)[1]
    n, size = result["num_files"], human_bytes(result["bytes"])
    lines = [
        f"Table: {result['table']}",
        f"Retention: {human_hours(result['retention_ms'] / HOUR_MS)}; cutoff {_when(result.get('cutoff_ms'))}",
        f"Dry run: nothing was deleted. {n} log files ({size}) would be." if result.get("dry_run", True)
        else f"Deleted: {result.get('deleted', 0)} of {n} log files ({size})",
        f"Earliest version the log keeps: {result.get('earliest_readable_version')} (its data files may be vacuumed)",
        f"Reason: {result.get('reason') or '-'}",
        f"Rows (from stats): {_count(_rows(after))}",
    ]  # fmt: skip
    sections = [_paths("Log files", result.get("files")), _health_section(None, after)]
    files = list(result.get("files") or ())
    page = {"retention_hours": result["retention_ms"] / HOUR_MS, **_capped("files", files)}
    return _with_health(result, _plan_or_report("Log cleanup", result), lines, sections, **page)


def _restore(result: Mapping[str, Any]) -> _Report:
    before, after = _before_after(result)
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
    ]  # fmt: skip
    sections = [
        _health_section(before, after),
        _paths("Files restored", result.get("files_restored")),
        _paths("Files removed", result.get("files_removed")),
        _paths("Missing files", result.get("missing_files")),
    ]
    page = {
        "m": m,
        **_capped("restored", list(result.get("files_restored") or ())),
        **_capped("removed", list(result.get("files_removed") or ())),
    }
    return _with_health(result, _plan_or_report("RESTORE", result), lines, sections, **page)


def _repair(result: Mapping[str, Any]) -> _Report:
    before, after = _before_after(result)
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
    ]  # fmt: skip
    sections = [_paths("Missing files", result.get("files_removed")), _health_section(before, after)]
    page = _capped("missing", list(result.get("files_removed") or ()))
    return _with_health(result, _plan_or_report("Repair (FSCK)", result), lines, sections, **page)


#: Each report kind's one reading of its result.
_REPORTS: dict[str, Callable[[Mapping[str, Any]], _Report]] = {
    "tombstones": _tombstones,
    "snapshot": _snapshot,
    "vacuum": _vacuum,
    "optimize": _rewrite,
    "purge": _rewrite,
    "checkpoint": _checkpoint,
    "cleanup_log": _cleanup_log,
    "restore": _restore,
    "repair": _repair,
}
#: The result kinds these renderings know.
REPORT_KINDS = tuple(_REPORTS)


def _report(kind: str, result: Mapping[str, Any]) -> _Report:
    if kind not in _REPORTS:
        raise ValueError(f"no report for {kind!r}; reports exist for {list(REPORT_KINDS)}")
    return _REPORTS[kind](result)


# -- the two formats -----------------------------------------------------------------------------------------
def render_markdown(kind: str, result: Mapping[str, Any]) -> str:
    """`result` (of the action `kind`, one of `REPORT_KINDS`) as Markdown: a title, a list, then a table per
    section that has rows."""
    report = _report(kind, result)
    out = [f"# {report.title}", "", *(f"- {line}" for line in report.lines)]
    for heading, headers, rows in report.sections:
        if rows:
            out += ["", f"## {heading}", "", "| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
            out += [
                "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in row) + " |" for row in rows
            ]
    return "\n".join(out) + "\n"


def environment() -> jinja2.Environment:
    """The Jinja environment of the report pages (`templates/`, autoescaped, strict) with their filters
    (`bytes`, `hours`, `when`, `percent`, `short`, `count`); the lake report's pages use it too."""
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


def render_page(template: str, **values: Any) -> str:
    """`templates/<template>` rendered with `values` and the provider's version, ending in a newline."""
    from .. import __version__

    page = environment().get_template(template).render(**values, provider_version=__version__)
    return page if page.endswith("\n") else page + "\n"


def render_html(kind: str, result: Mapping[str, Any]) -> str:
    """`result` (of the action `kind`, one of `REPORT_KINDS`) as one self-contained HTML page."""
    report = _report(kind, result)
    charts = [chart for draw in report.charts if (chart := draw()) is not None]
    return render_page(f"{kind}.html.j2", **report.page, title=report.title, r=result, charts=charts, kind=kind)


#: Which renderer makes each report format (`--report-formats`).
RENDERERS: dict[str, Callable[[str, Mapping[str, Any]], str]] = {"md": render_markdown, "html": render_html}
