"""Human-readable renderings (Markdown, HTML) of the job's JSON results."""

from __future__ import annotations

import html
from typing import Any

from ..delta.protocol.history import format_ms


def human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def _ms(value: int | None) -> str:
    return "-" if value is None else format_ms(value)


def _tombstone_rows(report: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    headers = ["partition", "retained", "retained bytes", "past retention", "reclaimable", "oldest", "newest"]
    rows = [
        [
            key or "(unpartitioned)",
            str(p["retained"]),
            human_bytes(p["retained_bytes"]),
            str(p["expired"]),
            human_bytes(p["reclaimable_bytes"]),
            _ms(p.get("oldest_deletion_ms")),
            _ms(p.get("newest_deletion_ms")),
        ]
        for key, p in report.get("partitions", {}).items()
    ]
    return headers, rows


def _tombstone_lines(report: dict[str, Any]) -> list[str]:
    r = report["retention"]
    return [
        f"Table: {report['table']}",
        f"Version: {report['version']}",
        f"Retention: {r['hours']:g} hours ({r['source']}"
        + (f", table property {r['table_property']!r}" if r.get("table_property") else "")
        + f"); cutoff {r['cutoff']}",
        f"Tombstones: {report['num_tombstones']}",
        f"Retained: {report['retained']} ({human_bytes(report['retained_bytes'])})",
        f"Past retention, safe for VACUUM: {report['expired']} ({human_bytes(report['reclaimable_bytes'])})",
        f"Removed without size: {report['removed_without_size']}",
        f"Oldest deletion: {_ms(report.get('oldest_deletion_ms'))}; newest: {_ms(report.get('newest_deletion_ms'))}",
        "Read-only report: nothing was deleted.",
    ]


def tombstone_markdown(report: dict[str, Any]) -> str:
    """A tombstone report as Markdown."""
    out = [f"# Tombstone report: {report['table']}", ""]
    out += [f"- {line}" for line in _tombstone_lines(report)]
    headers, rows = _tombstone_rows(report)
    if rows:
        out += ["", "## Per partition", "", "| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
        out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(out) + "\n"


def tombstone_html(report: dict[str, Any]) -> str:
    """A tombstone report as a standalone HTML page (every value escaped)."""
    e = html.escape
    items = "".join(f"<li>{e(line)}</li>" for line in _tombstone_lines(report))
    headers, rows = _tombstone_rows(report)
    table = ""
    if rows:
        head = "".join(f"<th>{e(h)}</th>" for h in headers)
        body = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in rows)
        table = f"<h2>Per partition</h2><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    title = e(f"Tombstone report: {report['table']}")
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><title>{title}</title>'
        "<style>body{font-family:sans-serif}td,th{padding:2px 8px;text-align:left}</style></head>"
        f"<body><h1>{title}</h1><ul>{items}</ul>{table}</body></html>\n"
    )
