"""`deltalog`'s output: stable JSON, and for a person one text rendering per action's result."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, TextIO

from ..commands.charts import human_bytes, signed
from ..delta.protocol.history import format_ms

#: Elements (of a list, or items of a dict) encoded per write: one C-encoder call per batch.
JSON_BATCH = 2048
_COMPACT = json.JSONEncoder(separators=(",", ":"), default=str).encode


def print_json(obj: Any, out: TextIO) -> None:
    """`obj` as JSON: indented for a person at a terminal; otherwise one compact line, streamed (`write_json`)."""
    if getattr(out, "isatty", lambda: False)():
        json.dump(obj, out, indent=2, default=str)
    else:
        write_json(obj, out)
    out.write("\n")


def write_json(obj: Any, out: TextIO) -> None:
    """Compact JSON written as it is encoded: dicts key by key and long lists `JSON_BATCH` elements per
    write, each piece by the C encoder, so a 333k-file VACUUM plan is never one string (`json.dump` would
    take the pure-Python encoder and one write per token: 5x slower). The text equals `json.dumps(obj,
    separators=(",", ":"), default=str)`."""
    if isinstance(obj, dict) and 0 < len(obj) <= JSON_BATCH:
        out.write("{")
        for i, (key, value) in enumerate(obj.items()):
            out.write(("," if i else "") + _COMPACT({key: None})[1:-5])  # '"key":', json's own key conversion
            write_json(value, out)
        out.write("}")
    elif isinstance(obj, dict) and obj:
        items = list(obj.items())
        out.write("{")
        for i in range(0, len(items), JSON_BATCH):
            out.write(("," if i else "") + _COMPACT(dict(items[i : i + JSON_BATCH]))[1:-1])
        out.write("}")
    elif isinstance(obj, list | tuple) and len(obj) > JSON_BATCH:
        out.write("[")
        for i in range(0, len(obj), JSON_BATCH):
            out.write(("," if i else "") + _COMPACT(list(obj[i : i + JSON_BATCH]))[1:-1])
        out.write("]")
    else:
        out.write(_COMPACT(obj))


def write_lines(lines: Iterable[str], out: TextIO) -> None:
    """Each of `lines` (newline added) as it comes, `JSON_BATCH` lines per write."""
    batch: list[str] = []
    for line in lines:
        batch.append(line)
        if len(batch) == JSON_BATCH:
            out.write("\n".join(batch) + "\n")
            batch.clear()
    if batch:
        out.write("\n".join(batch) + "\n")


def write_table(rows: list[list[str]], headers: list[str], out: TextIO) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    write_lines(("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [headers, *rows]), out)


def show_snapshot(s: dict[str, Any], out: TextIO) -> None:
    p = s["protocol"]
    proto = f"reader {p['min_reader_version']}, writer {p['min_writer_version']}"
    features = sorted(set(p["reader_features"] or []) | set(p["writer_features"] or []))
    if features:
        proto += f" ({', '.join(features)})"
    lines = [
        ("table", s["table"]),
        ("version", str(s["version"])),
        ("commit time", f"{s['timestamp']} ({s['timestamp_ms']})"),
        ("operation", s["operation"] or "-"),
        ("protocol", proto),
        ("partition columns", ", ".join(s["partition_columns"]) or "-"),
        ("files", f"{s['num_files']}"),
        ("size", f"{human_bytes(s['size_bytes'])} ({s['size_bytes']} bytes)"),
        ("tombstones", f"{s['num_tombstones']} within retention"),
        ("checkpoint", "-" if s["checkpoint_version"] is None else str(s["checkpoint_version"])),
    ]
    if s["set_transactions"]:
        lines.append(("app transactions", ", ".join(f"{k}={v}" for k, v in s["set_transactions"].items())))
    lines += [(f"check {c['name']}", ("ok" if c["passed"] else "FAILED: ") + c["message"]) for c in s.get("checks", [])]
    width = max(len(k) for k, _ in lines)
    for k, v in lines:
        out.write(f"{k.ljust(width)}  {v}\n")


def show_files(body: dict[str, Any], out: TextIO) -> None:
    files = body["files"]
    rows = [
        [
            a["path"],
            str(a["size"]),
            ",".join(f"{k}={v}" for k, v in a["partition_values"].items()) or "-",
            format_ms(a["modification_time"]),
            "yes" if a["deletion_vector"] else "-",
        ]
        for a in files
    ]
    write_table(rows, ["path", "size", "partition", "file time", "dv"], out)
    out.write(f"{len(files)} of {body['num_files']} files at version {body['version']}\n")


def show_tombstones(report: dict[str, Any], out: TextIO) -> None:
    r = report["retention"]
    out.write(
        f"version {report['version']}: {report['num_tombstones']} tombstones; retention {r['hours']:g} h "
        f"({r['source']}), cutoff {r['cutoff']}\n"
        f"retained {report['retained']} ({human_bytes(report['retained_bytes'])}), "
        f"past retention (safe for VACUUM) {report['expired']} ({human_bytes(report['reclaimable_bytes'])})\n"
    )
    rows = [
        [
            t["path"],
            "-" if t["size"] is None else str(t["size"]),
            "-" if t["deletion_timestamp"] is None else format_ms(t["deletion_timestamp"]),
            "expired" if t["expired"] else "retained",
        ]
        for t in report["tombstones"]
    ]
    if rows:
        write_table(rows, ["path", "size", "deletion time", "state"], out)


def show_history(body: dict[str, Any], out: TextIO) -> None:
    rows = [
        [
            str(e["version"]),
            format_ms(e["timestamp"]),
            format_ms(e["file_modification_time"]),
            str(e.get("operation") or "-"),
            str(e.get("engineInfo") or "-"),
        ]
        for e in body["history"]
    ]
    write_table(rows, ["version", "commit time", "file time", "operation", "engine"], out)


def show_changes(body: dict[str, Any], out: TextIO) -> None:
    for c in body["changes"]:
        kinds = Counter(next(iter(a)) for a in c["actions"])
        out.write(f"{c['version']}: " + ", ".join(f"{n} {k}" for k, n in kinds.items()) + "\n")


def show_checkpoint(done: dict[str, Any], out: TextIO) -> None:
    if not done["written"]:
        out.write(f"a checkpoint at version {done['version']} already exists: nothing written\n")
        return
    out.write(
        f"wrote a {done['kind']} checkpoint at version {done['version']}: {done['num_add_files']} files, "
        f"{done['num_tombstones']} tombstones, {human_bytes(done['size_in_bytes'])}"
        + (f", {len(done['sidecars'])} sidecars" if done["sidecars"] else "")
        + ("; _last_checkpoint updated" if done["last_checkpoint_updated"] else "")
        + "\n"
    )


def show_cleanup_log(result: dict[str, Any], out: TextIO) -> None:
    verb = "deleted" if not result["dry_run"] else "would delete (dry run: --apply deletes)"
    out.write(
        f"log cleanup, cutoff {result['cutoff']}: {verb} {result['num_files']} files ({human_bytes(result['bytes'])}); "
        f"the log keeps versions from {result['earliest_readable_version']} (time travel to one also needs its "
        "data files, which VACUUM may have deleted)" + (f" ({result['reason']})" if result.get("reason") else "") + "\n"
    )
    write_lines((f"  {name}" for name in result["files"]), out)
    write_leases(result, out)


def show_vacuum(result: dict[str, Any], out: TextIO) -> None:
    q = result.get("quarantine")
    head = f"vacuum{' dry run' if result['dry_run'] else ''} ({result['mode']}), cutoff {result['cutoff']}:"
    cost = (
        "" if q is None else f"by {q['method']}: {q['requests']} storage calls, {human_bytes(q['bytes_copied'])} copied"
    )
    planned = f"{result['num_files']} files ({human_bytes(result['bytes'])})"
    if result["dry_run"] and q is not None:
        out.write(f"{head} would quarantine {planned} {cost}; --apply moves them\n")
    elif result["dry_run"]:
        out.write(f"{head} would delete {planned}; --apply deletes\n")
    elif q is not None:
        out.write(
            f"{head} moved {q.get('moved', 0)} files ({human_bytes(q.get('moved_bytes', 0))}) {cost} to quarantine "
            f"{result['quarantine_id']} (`deltalog vacuum undo {result['table']} {result['quarantine_id']}` puts "
            "them back)\n"
        )
    else:
        out.write(
            f"{head} deleted {result['deleted']} files ({human_bytes(result['deleted_bytes'])}), "
            f"{result['directories']} directories\n"
        )
    write_lines((f"  {f['path']}  {human_bytes(f['size'])}" for f in result["files"]), out)
    write_leases(result, out)


def show_vacuum_undo(result: dict[str, Any], out: TextIO) -> None:
    out.write(
        f"quarantine {result['quarantine_id']} {result['state']}: {result['moved']} files moved back, "
        f"{result['already_in_place']} already in place"
        + (f", {result['finished']} left-over copies deleted" if result["finished"] else "")
        + "\n"
    )
    for path in result["missing"]:
        out.write(f"  missing (at neither path): {path}\n")


def show_vacuum_purge(result: dict[str, Any], out: TextIO) -> None:
    verb = "would purge (dry run: --apply deletes)" if result["dry_run"] else "purged"
    out.write(
        f"{verb} {result['num_purged']} quarantines ({result['deleted_files']} files, "
        f"{human_bytes(result['deleted_bytes'])})\n"
    )
    for p in result["purged"]:
        out.write(f"  {p['quarantine_id']}  {p['state']}  {p['files']} files\n")
    for p in result["skipped"]:
        out.write(f"  kept {p['quarantine_id']}: {p['reason']}\n")


def write_leases(result: Mapping[str, Any], out: TextIO) -> None:
    """The version leases a maintenance result honoured (`deltalog lease`)."""
    for le in result.get("leases") or ():
        out.write(f"kept for lease {le['id']}: version {le['version']}, {le['owner']}, until {le['expires_at']}\n")


def show_optimize(result: dict[str, Any], out: TextIO) -> None:
    removed = f"{result['num_files_removed']} files ({human_bytes(result['bytes_removed'])})"
    verb = "z-order" if result.get("zorder_by") else "compact"
    if result["dry_run"]:
        out.write(
            f"optimize dry run at version {result['read_version']}: would {verb} {removed} into "
            f"{result['num_files_added']}; --apply {verb}s\n"
        )
    elif result["version"] is None:
        out.write(f"optimize: nothing to compact at version {result['read_version']}\n")
    else:
        out.write(
            f"optimize committed version {result['version']}: {removed} {verb}ed into {result['num_files_added']} "
            f"({human_bytes(result['bytes_added'])})\n"
        )
    for name, p in result["partitions"].items():
        out.write(f"  {name or '(unpartitioned)'}  {json.dumps(p)}\n")
    if result.get("num_files_over_budget"):
        left = f"{result['num_files_over_budget']} files ({human_bytes(result['bytes_over_budget'])})"
        out.write(f"{left} over the budget (--max-files/--max-bytes): left for a later run\n")


def show_restore(result: dict[str, Any], out: TextIO) -> None:
    m = result["metrics"]
    change = (
        f"add back {m['numRestoredFiles']} files ({human_bytes(m['restoredFilesSize'])}), "
        f"remove {m['numRemovedFiles']} ({human_bytes(m['removedFilesSize'])}); "
        f"{m['numOfFilesAfterRestore']} files ({human_bytes(m['tableSizeAfterRestore'])}) after"
    )
    if result["dry_run"]:
        out.write(
            f"restore dry run at version {result['read_version']} to version {result['target_version']}: would "
            f"{change}; --apply commits\n"
        )
    else:
        out.write(f"restore committed version {result['version']} (version {result['target_version']}): {change}\n")
    if result["missing_files"]:
        out.write(f"left out {len(result['missing_files'])} files gone from storage:\n")
        for path in result["missing_files"]:
            out.write(f"  {path}\n")
    if result["beyond_file_retention"]:
        out.write("note: the restored version is older than the table's deleted-file retention\n")


def show_repair(result: dict[str, Any], out: TextIO) -> None:
    missing = f"{result['num_missing']} of {result['num_files_checked']} active files missing from storage"
    if result["dry_run"]:
        verb = "; --apply removes them" if result["num_missing"] else ""
        out.write(f"repair dry run at version {result['read_version']}: {missing}{verb}\n")
    elif result["version"] is None:
        out.write(f"repair: nothing to remove at version {result['read_version']} ({missing})\n")
    else:
        out.write(f"repair committed version {result['version']}: removed {result['num_missing']} missing files\n")
    write_lines((f"  {path}" for path in result["files_removed"]), out)


def show_purge(result: dict[str, Any], out: TextIO) -> None:
    plan = result["plan"]
    removed = f"{result['num_files_removed']} files ({human_bytes(result['bytes_removed'])})"
    rows = f"{result['num_deleted_rows_purged']} deleted rows"
    over = f"; {plan['num_files_over_budget']} files over the budget" if plan["num_files_over_budget"] else ""
    if result["dry_run"]:
        verb = "; --apply rewrites them" if result["num_files_removed"] else ""
        out.write(
            f"purge dry run at version {result['read_version']}: would rewrite {removed} to drop {rows}{verb}{over}\n"
        )
    elif result["version"] is None:
        out.write(f"purge: nothing to rewrite at version {result['read_version']}{over}\n")
    else:
        erasable = result["erasable_after_ms"]
        after = "" if erasable is None else f"; VACUUM may delete the old files after {format_ms(erasable)}"
        out.write(
            f"purge committed version {result['version']}: {removed} rewritten into {result['num_files_added']} "
            f"({human_bytes(result['bytes_added'])}), {rows} gone{after}{over}\n"
        )
    for d in result["dropped"]:
        out.write(f"  dropped {d['path']}: {d['reason']}\n")


def show_stats_backfill(result: dict[str, Any], out: TextIO) -> None:
    plan, m = result["plan"], result["metrics"]
    reasons = ", ".join(f"{n} {reason}" for reason, n in plan["by_reason"].items() if n) or "none"
    found = f"{plan['num_files']} of {plan['num_files_checked']} files need stats ({reasons})"
    over = f"; {plan['num_files_over_budget']} over the budget" if plan["num_files_over_budget"] else ""
    if result["dry_run"]:
        verb = "; --apply recomputes them" if plan["num_files"] else ""
        out.write(f"stats backfill dry run at version {result['read_version']}: {found}{verb}{over}\n")
        for f in plan["files"]:
            out.write(f"  {f['path']}  {f['reason']}\n")
    elif result["version"] is None:
        out.write(f"stats backfill: nothing committed at version {result['read_version']} ({found}){over}\n")
    else:
        out.write(
            f"stats backfill committed version {result['version']}: recomputed {m['numFilesRecomputed']} files "
            f"({human_bytes(m['numBytesRead'])} read){over}\n"
        )
    for path in result["files_dropped"]:
        out.write(f"  dropped {path}\n")


def _lake_errors(result: dict[str, Any], out: TextIO) -> None:
    for e in [*result["discovery"]["errors"], *result["errors"]]:
        where = e.get("table") or e.get("prefix")
        out.write(f"error {where}: {e.get('error_class')}: {e.get('message')}\n")


def show_lake_scan(result: dict[str, Any], out: TextIO) -> None:
    rows = [
        [
            h["table"],
            str(h["version"]),
            str(h["totals"]["num_files"]),
            human_bytes(h["totals"]["bytes"]),
            f"{h['totals']['small_file_share']:.0%}",
            str(h["totals"]["tombstone_files_now"]),
            str(h["commits_since_checkpoint"]),
        ]
        for h in result["tables"]
    ]
    write_table(rows, ["table", "version", "files", "size", "small", "vacuumable", "since checkpoint"], out)
    found = result["discovery"]
    out.write(f"{len(result['tables'])} tables read in {found['requests']} listings\n")
    for folder in found["truncated"]:
        out.write(f"not walked below {folder} (--max-depth)\n")
    _lake_errors(result, out)


def show_lake_plan(result: dict[str, Any], out: TextIO) -> None:
    rows = [
        [
            t["table"],
            t["operation"],
            f"{t['gain']['value']:.3g}" if isinstance(t["gain"].get("value"), int | float) else "-",
            human_bytes(t["cost"]["bytes_read"] + t["cost"]["bytes_written"]),
            "approval" if t["needs_approval"] else "",
            t["reason"],
        ]
        for t in result["tasks"]
    ]
    write_table(rows, ["table", "operation", "value", "bytes", "", "why"], out)
    totals = result["totals"]
    out.write(
        f"{totals['tasks']} tasks: {human_bytes(totals['bytes'])}, {totals['requests']} requests, about "
        f"{totals['estimated_seconds']:g} s; {len(result['deferred'])} deferred by the budget, "
        f"{len(result['skipped'])} skipped\n"
    )
    _lake_errors(result, out)


def show_lake_run(result: dict[str, Any], out: TextIO) -> None:
    show_lake_plan(result, out)
    if not result["apply"]:
        out.write("plan only: --apply runs it (--apply-vacuum also deletes what the VACUUMs planned)\n")
        return
    keys = ("table", "operation", "status", "version", "proof", "error_class")
    rows = [["" if r.get(k) is None else str(r.get(k)) for k in keys] for r in result["runs"]]
    write_table(rows, list(keys), out)
    if result["history_version"] is not None:
        out.write(f"history: version {result['history_version']}\n")


def show_lake_report(result: dict[str, Any], out: TextIO) -> None:
    """The lake report: its runs and totals, then one line per table (its latest health, and what changed
    between the last two runs' plan-time health)."""
    t = result["totals"]
    what = f"table {result['table']}" if result.get("table") else f"{t['tables']} tables"
    out.write(
        f"history {result['history_uri']} (version {result['history_version']}): {t['runs']} runs, {what}; "
        f"{t['operations']} steps done, {t['failed']} failed\n"
    )
    out.write(
        f"spent: read {human_bytes(t['bytes_read'])}, wrote {human_bytes(t['bytes_written'])}, "
        f"{t['seconds']:.3g} s; saved: {t['files_removed']:,} files, {human_bytes(t['bytes_reclaimed'])}\n"
    )
    rows = []
    for tb in result["tables"]:
        p, c = tb.get("latest") or {}, tb.get("since_previous") or {}
        share = p.get("small_file_share")
        rows.append(
            [
                tb["table"],
                str(len(tb["runs"])),
                "-" if p.get("files") is None else f"{p['files']:,}",
                "-" if share is None else f"{share:.0%}",
                human_bytes(p.get("tombstone_bytes")),
                "-" if p.get("commits_since_checkpoint") is None else str(p["commits_since_checkpoint"]),
                signed(c.get("files")),
                signed(c.get("versions")),
                str(len(tb["failures"])),
            ]
        )
    if rows:
        head = ["table", "runs", "files", "small", "tombstoned", "since checkpoint"]
        write_table(rows, [*head, "files since last", "commits since last", "failed"], out)
    if not result["runs"]:
        out.write("no maintenance run is recorded in this history yet\n")
    if result.get("out"):
        out.write(f"report written to {result['out']}\n")
