"""The lake report: each table's health across the lake autopilot's runs and what maintenance spent and saved,
read from the maintenance history table (`delta.lake.history`, a Delta table) as JSON, Markdown and one
self-contained HTML page (inline SVG charts, no script).

The history holds what each (run, table, operation) did, not the table's health, so each health point is read
from the table's own log: the snapshot at the run's start and at its end (time travel by commit timestamp:
PROTOCOL.md "In-Commit Timestamps", else the commit file's modification time), plus the table as it is now.
Only the log is read (no data file): files and small files (the lake policy's default threshold, half the
target file size), tombstoned bytes and those past the deleted-file retention, rows hidden by deletion vectors
(PROTOCOL.md "Deletion Vectors"), commits since the last checkpoint. A version no longer reconstructible (its
log cleaned up) is a point with its error and no numbers.

Each run also records every scanned table's health at plan time (`delta.lake.history.health_row`): those
rows are each table's `recorded_health` (one point per run, from the history alone), `since_previous` (what
changed between its last two recorded points) and the lake's `lake_recorded` series; a table whose log is not
read (`health=False`, or beyond `MAX_HEALTH_TABLES`) is charted from them.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..delta.delta_log import DeltaLog
from ..delta.errors import DeltaError, InvalidArgumentError, TableNotFoundError
from ..delta.lake.history import HEALTH_COLUMNS, HEALTH_OPERATION
from ..delta.protocol.lake_policy import LakePolicy
from ..delta.read.deletion_vectors import read_data_file
from .charts import human_bytes, lake_health_chart, lake_tables_chart, maintenance_chart, signed
from .request import REPORT_MAX_RUNS

#: Most runs (the latest) a report shows; the JSON holds the same ones.
MAX_RUNS = REPORT_MAX_RUNS
#: Most tables whose health across runs the lake report reads (the ones run most recently); the others show
#: their history rows only.
MAX_HEALTH_TABLES = 50
#: History columns summed as what a row spent and saved.
SPENT = ("bytes_read", "bytes_written", "requests_planned", "seconds")
SAVED = ("files_removed", "bytes_reclaimed")


def _ms(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        stamp = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
        return int(stamp.timestamp() * 1000)
    return int(value)


def _iso(ms: int | None) -> str | None:
    return None if ms is None else dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat()


def read_history(history_uri: str, storage_options: Mapping[str, Any] | None = None) -> tuple[int, list[dict]]:
    """(version, rows) of the history table, read through our own reader (timestamps as epoch ms). A missing
    table raises `TableNotFoundError`."""
    dlog = DeltaLog.of(history_uri, storage_options)
    snapshot = dlog.update()
    rows: list[dict[str, Any]] = []
    for add in snapshot.all_files(with_stats=False):
        data = read_data_file(dlog.store, dlog.table_uri, add, table=dlog.table_uri)
        partition = snapshot.partition_values(add)
        for row in data.to_pylist():
            row = {**partition, **row}
            for key in ("started", "ended"):
                row[key] = _ms(row.get(key))
            if isinstance(row.get("date"), dt.date):
                row["date"] = row["date"].isoformat()
            rows.append(row)
    return snapshot.version, rows


def _spent_saved(row: Mapping[str, Any]) -> dict[str, Any]:
    """What one history row spent and saved: a rewrite reads the files it removes (OPTIMIZE's `bytes_removed`),
    VACUUM's and log cleanup's removals are reclaimed, not read; requests are the plan's estimate (the history
    records no measured count). A failed step spent its seconds and saved nothing it did not record."""
    op = row.get("operation")
    rewrite = op == "optimize"
    return {
        "bytes_read": (row.get("bytes_removed") or 0) if rewrite else 0,
        "bytes_written": row.get("bytes_added") or 0,
        "requests_planned": row.get("est_requests") or 0,
        "seconds": row.get("actual_seconds") or 0.0,
        "files_removed": row.get("actual_files_removed") or 0,
        "bytes_reclaimed": row.get("actual_bytes_reclaimed") or 0,
    }


def _sum(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = dict.fromkeys((*SPENT, *SAVED), 0)
    for row in rows:
        for key, value in _spent_saved(row).items():
            out[key] += value
    return out


def _label(ms: int | None) -> str:
    return "-" if ms is None else dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).strftime("%m-%d %H:%M")


def _runs(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One entry per run_id, oldest first: when, which tables and operations, failures, spent and saved."""
    by_run: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        by_run.setdefault(row["run_id"], []).append(row)
    runs = []
    for run_id, run_rows in by_run.items():
        starts = [r["started"] for r in run_rows if r.get("started") is not None]
        ends = [r["ended"] for r in run_rows if r.get("ended") is not None]
        started = min(starts, default=None)
        runs.append(
            {
                "run_id": run_id,
                "dag_id": next((r.get("dag_id") for r in run_rows if r.get("dag_id")), None),
                "started_ms": started,
                "ended_ms": max(ends, default=started),
                "label": _label(started),
                "tables": len({r.get("table") for r in run_rows if r.get("table")}),
                "operations": sum(r.get("status") == "done" for r in run_rows),
                "failed": sum(r.get("status") == "failed" for r in run_rows),
                **_sum(run_rows),
            }
        )
    runs.sort(key=lambda r: (r["started_ms"] is None, r["started_ms"] or 0, r["run_id"]))
    return runs


def _error_text(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc.message if isinstance(exc, DeltaError) else exc}"[:500]


def health_point(dlog: DeltaLog, *, at_ms: int | None = None) -> dict[str, Any]:
    """The table's health from its log at `at_ms` (the last commit at or before it; None: now)."""
    from ..delta.read import arrow_compute as pc

    try:
        if at_ms is None:
            snapshot = dlog.update()
        else:
            snapshot = dlog.snapshot_at(timestamp=at_ms, can_return_last_commit=True)
        policy = LakePolicy().for_table(dlog.table_uri, snapshot.metadata.configuration)
        files = snapshot.file_summary(policy.small_file_bytes)
        now = dlog.clock() if at_ms is None else at_ms
        cutoff = now - policy.deleted_file_retention_ms
        tombstones = snapshot.state.files.tombstone_summary(cutoff, snapshot.partition_columns).to_dict()
        adds = snapshot.add_files_table
        dv_rows = 0
        if "deletionVector" in adds.column_names and adds.num_rows:
            dv_rows = pc.sum(pc.struct_field(adds.column("deletionVector"), "cardinality")).as_py() or 0
    except (DeltaError, OSError) as exc:  # a table that cannot be read is a point with its error, not a failed page
        return {"at_ms": at_ms, "version": None, "files": None, "error": _error_text(exc)}
    return {
        "at_ms": at_ms,
        "version": snapshot.version,
        "files": files.num_files,
        "bytes": files.size_bytes,
        "small_files": files.small_files,
        "small_file_bytes": files.small_file_bytes,
        "small_file_share": files.small_files / files.num_files if files.num_files else None,
        "tombstones": tombstones["num_tombstones"],
        "tombstone_bytes": tombstones["retained_bytes"] + tombstones["reclaimable_bytes"],
        "reclaimable_bytes": tombstones["reclaimable_bytes"],
        "dv_rows": int(dv_rows),
        "commits_since_checkpoint": len(snapshot.log_segment.commits),
        "checkpoint_version": snapshot.log_segment.checkpoint_version,
        "error": None,
    }


#: Health points of past moments, by (table, ms): a version a later commit follows never changes.
_PAST: OrderedDict[tuple[str, int], dict[str, Any]] = OrderedDict()
_PAST_LOCK = threading.Lock()
MAX_CACHED_POINTS = 20_000


def _past_point(dlog: DeltaLog, at_ms: int, latest: int | None) -> dict[str, Any]:
    """`health_point` at `at_ms`, kept once a later commit than the one it read exists (the page's next
    views read it from memory; the table's current point is always read)."""
    key = (dlog.table_uri, at_ms)
    with _PAST_LOCK:
        if key in _PAST:
            _PAST.move_to_end(key)
            return _PAST[key]
    point = health_point(dlog, at_ms=at_ms)
    if point["version"] is not None and latest is not None and point["version"] < latest:
        with _PAST_LOCK:
            _PAST[key] = point
            while len(_PAST) > MAX_CACHED_POINTS:
                _PAST.popitem(last=False)
    return point


def _table_health(
    table: str, runs: Sequence[Mapping[str, Any]], storage_options: Mapping[str, Any] | None
) -> list[dict[str, Any]]:
    """The table before and after each of `runs` (the last commit at or before its start and its end), then
    now; a point at the version of the one before it is left out (nothing was committed in between)."""
    try:
        dlog = DeltaLog.of(table, storage_options)
    except (DeltaError, OSError) as exc:
        return [{"at_ms": None, "version": None, "files": None, "error": _error_text(exc)}]
    wanted = []
    for run in runs:
        if run.get("started_ms") is not None:
            wanted.append((run["started_ms"], run["run_id"], "before", f"{run['label']}\nbefore"))
        if run.get("ended_ms") is not None:
            wanted.append((run["ended_ms"], run["run_id"], "after", "after"))
    now = {**health_point(dlog), "at_ms": dlog.clock(), "run_id": None, "phase": "now", "label": "now"}
    points: list[dict[str, Any]] = []
    for at_ms, run_id, phase, label in [*wanted, (None, None, "now", "now")]:
        point = now if at_ms is None else {**_past_point(dlog, at_ms, now["version"]), "run_id": run_id,
                                           "phase": phase, "label": label}  # fmt: skip
        previous = points[-1] if points else None
        if previous is not None and point["version"] is not None and point["version"] == previous["version"]:
            continue
        points.append(point)
    return points


#: Health numbers a lake point sums over its tables.
_HEALTH_SUMS = ("files", "bytes", "small_files", "tombstone_bytes", "reclaimable_bytes", "dv_rows",
                "commits_since_checkpoint")  # fmt: skip


def lake_points(runs: Sequence[Mapping[str, Any]], tables: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The lake before and after each run: each table's health summed, every table counted at its last point
    at or before that moment (`tables_counted` says how many had one, `tables_recorded` how many of those
    points are a run's plan-time record, the table's log not read)."""
    points = []
    for run in runs:
        for phase, at in (("before", run.get("started_ms")), ("after", run.get("ended_ms"))):
            if at is None:
                continue
            seen = (
                [p for p in t.get("health") or () if p.get("files") is not None and (p["at_ms"] or 0) <= at]
                for t in tables
            )
            known = [found[-1] for found in seen if found]
            if not known:
                continue
            label = f"{run['label']}\nbefore" if phase == "before" else "after"
            point = {k: sum(p[k] or 0 for p in known) for k in _HEALTH_SUMS}
            recorded = sum(p.get("phase") == "plan" for p in known)
            points.append({"run_id": run["run_id"], "phase": phase, "label": label, "at_ms": at,
                           "tables_counted": len(known), "tables_recorded": recorded, **point})  # fmt: skip
    return points


#: What `since_previous` compares between a table's last two recorded health points.
CHANGE_KEYS = ("files", "bytes", "small_files", "rows", "dv_rows", "tombstone_bytes", "reclaimable_bytes",
               "commits_since_checkpoint", "log_files")  # fmt: skip
_HEALTH_NAMES = tuple(name for name, _ in HEALTH_COLUMNS)


def recorded_points(rows: Iterable[Mapping[str, Any]], runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A table's health rows as chart points, one per run (its last row in a run), oldest run first."""
    order = {r["run_id"]: (i, r) for i, r in enumerate(runs)}
    latest: dict[str, Mapping[str, Any]] = {}
    for row in rows:
        if row.get("operation") == HEALTH_OPERATION and row["run_id"] in order:
            seen = latest.get(row["run_id"])
            if seen is None or (row.get("started") or 0) >= (seen.get("started") or 0):
                latest[row["run_id"]] = row
    points = []
    for run_id, row in sorted(latest.items(), key=lambda kv: order[kv[0]][0]):
        run = order[run_id][1]
        points.append({"at_ms": row.get("started"), "run_id": run_id, "phase": "plan",
                       "label": f"{run['label']}\nplan", "version": row.get("version"), "error": None,
                       **{k: row.get(k) for k in _HEALTH_NAMES}})  # fmt: skip
    return points


def since_previous(points: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """What changed between the last two recorded points: each of `CHANGE_KEYS` as (now - then), None where
    either side is unknown, and the commits between them (`versions`); None with fewer than two points."""
    known = [p for p in points if p.get("files") is not None]
    if len(known) < 2:
        return None
    then, now = known[-2], known[-1]

    def delta(key: str) -> Any:
        a, b = then.get(key), now.get(key)
        return None if a is None or b is None else b - a

    return {"from_run": then["run_id"], "to_run": now["run_id"], "versions": delta("version"),
            **{k: delta(k) for k in CHANGE_KEYS}}  # fmt: skip


def recorded_lake_points(runs: Sequence[Mapping[str, Any]], tables: Sequence[Mapping[str, Any]]) -> list[dict]:
    """The lake at each run's plan time, from the history alone: each table's recorded health summed, every
    table counted at its last recorded point at or before that run (`tables_counted` says how many had one)."""
    index = {r["run_id"]: i for i, r in enumerate(runs)}
    points = []
    for i, run in enumerate(runs):
        seen = ([p for p in t["recorded_health"] if index.get(p["run_id"], len(runs)) <= i] for t in tables)
        known = [found[-1] for found in seen if found]
        if known:
            sums = {k: sum(p.get(k) or 0 for p in known) for k in _HEALTH_SUMS}
            points.append({"run_id": run["run_id"], "phase": "plan", "label": f"{run['label']}\nplan",
                           "at_ms": run.get("started_ms"), "tables_counted": len(known), **sums})  # fmt: skip
    return points


def lake_report(
    history_uri: str,
    *,
    table: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    max_runs: int = MAX_RUNS,
    health: bool = True,
    concurrency: int = 4,
) -> dict[str, Any]:
    """The lake report of the history at `history_uri` (one `table` only, when given): the last `max_runs`
    runs, lake totals, and per table its rows' spent and saved and (with `health`) its health after each run.
    The tables share `storage_options` with the history."""
    if not isinstance(max_runs, int) or isinstance(max_runs, bool) or max_runs < 1:
        raise InvalidArgumentError(f"max_runs must be a positive integer, got {max_runs!r}", argument="max_runs")
    try:
        version, rows = read_history(history_uri, storage_options)
    except TableNotFoundError:
        version, rows = None, []
    if table is not None:
        wanted = table.rstrip("/")
        rows = [r for r in rows if (r.get("table") or "").rstrip("/") == wanted]
    runs = _runs(rows)[-max_runs:]
    kept = {r["run_id"] for r in runs}
    rows = [r for r in rows if r["run_id"] in kept]
    by_table: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        if row.get("table"):
            by_table.setdefault(row["table"], []).append(row)
    run_of = {r["run_id"]: r for r in runs}
    tables = []
    for name, table_rows in by_table.items():
        table_runs = [run_of[i] for i in dict.fromkeys(r["run_id"] for r in table_rows)]
        table_runs.sort(key=lambda r: (r["started_ms"] or 0, r["run_id"]))
        failures = [
            {"run_id": r["run_id"], "operation": r.get("operation"), "error_class": r.get("error_class"),
             "error_message": r.get("error_message")}
            for r in table_rows if r.get("status") == "failed"
        ]  # fmt: skip
        operations = Counter(r.get("operation") or "?" for r in table_rows if r.get("status") == "done")
        recorded = recorded_points(table_rows, table_runs)
        tables.append(
            {
                "table": name,
                "runs": [r["run_id"] for r in table_runs],
                "last_run_ms": table_runs[-1]["started_ms"],
                "operations": dict(sorted(operations.items())),
                "maintained": any(r.get("operation") != HEALTH_OPERATION for r in table_rows),
                "failures": failures,
                "proofs": sorted({r["proof"] for r in table_rows if r.get("proof")}),
                **_sum(table_rows),
                "per_run": [
                    {
                        "run_id": run["run_id"],
                        "label": run["label"],
                        **_sum(r for r in table_rows if r["run_id"] == run["run_id"]),
                    }
                    for run in table_runs
                ],
                "_runs": table_runs,
                "recorded_health": recorded,
                "since_previous": since_previous(recorded),
            }
        )
    tables.sort(key=lambda t: (-(t["last_run_ms"] or 0), t["table"]))
    if health:
        chosen = tables[:MAX_HEALTH_TABLES]
        with ThreadPoolExecutor(max(1, min(concurrency, len(chosen) or 1))) as pool:
            healths = list(pool.map(lambda t: _table_health(t["table"], t["_runs"], storage_options), chosen))
        for t, points in zip(chosen, healths, strict=True):
            t["health"] = points
    for t in tables:
        t.pop("_runs")
        if t.get("health") is None:  # its log not read: its recorded health, if any
            t["health"] = t["recorded_health"] or None
        readable = [p for p in t["health"] or () if p.get("files") is not None]
        t["latest"] = readable[-1] if readable else None
    totals = {
        "tables": len(tables),
        "tables_maintained": sum(t["maintained"] for t in tables),
        "runs": len(runs),
        "operations": sum(r["operations"] for r in runs),
        "failed": sum(r["failed"] for r in runs),
        **{k: sum(r[k] for r in runs) for k in (*SPENT, *SAVED)},
    }
    latest = [t["latest"] for t in tables if t["latest"]]
    if latest:
        totals.update(
            files_now=sum(p["files"] for p in latest),
            small_files_now=sum(p["small_files"] for p in latest),
            tombstone_bytes_now=sum(p["tombstone_bytes"] for p in latest),
        )
    return {
        "lake_health": lake_points(runs, tables) if table is None else [],
        "lake_recorded": recorded_lake_points(runs, tables) if table is None else [],
        "history_uri": history_uri,
        "history_version": version,
        "table": table,
        "max_runs": max_runs,
        "runs": runs,
        "totals": totals,
        "tables": tables,
    }


# -- renderings ------------------------------------------------------------------------------------------
def _title(report: Mapping[str, Any]) -> str:
    return f"Table health: {report['table']}" if report.get("table") else "Lake health"


def render_lake_json(report: Mapping[str, Any]) -> str:
    return json.dumps(report, indent=2, sort_keys=True) + "\n"


def _share(point: Mapping[str, Any] | None) -> str:
    share = (point or {}).get("small_file_share")
    return "-" if share is None else f"{100 * share:.0f} %"


def render_lake_markdown(report: Mapping[str, Any]) -> str:
    """The report as Markdown: totals, then one row per run and one per table."""
    t = report["totals"]
    out = [
        f"# {_title(report)}",
        "",
        f"- History: {report['history_uri']} (version {report['history_version']})",
        f"- Runs: {t['runs']} (the last {report['max_runs']} at most); tables: {t['tables']} "
        f"({t['tables_maintained']} maintained); "
        f"steps done: {t['operations']}; failed: {t['failed']}",
        f"- Spent: read {human_bytes(t['bytes_read'])}, wrote {human_bytes(t['bytes_written'])}, "
        f"{t['requests_planned']:,} requests (planned), {t['seconds']:.3g} s",
        f"- Saved: {t['files_removed']:,} files removed, {human_bytes(t['bytes_reclaimed'])} reclaimed",
    ]
    if not report["runs"]:
        out += ["", "No maintenance run is recorded in this history yet."]
    health = report["tables"][0]["health"] if report.get("table") and report["tables"] else report["lake_health"]
    if health and (not report.get("table") or _health_read(report["tables"][0])):  # else: the plan-time table
        out += ["", "## Health before and after each run", "", "| point | run | version | files | small | "
                "tombstoned | past retention | DV rows | commits since checkpoint |", "|" + "---|" * 9]  # fmt: skip
        for p in health:
            if p.get("files") is None:
                out.append(f"| {p.get('label', '-')} | {p.get('run_id') or '-'} | - | {p.get('error')} |||||| ")
                continue
            out.append(
                f"| {p['label'].replace(chr(10), ' ')} | {p.get('run_id') or '-'} | {p.get('version', '-')} | "
                f"{p['files']:,} | {p['small_files']:,} | {human_bytes(p['tombstone_bytes'])} | "
                f"{human_bytes(p['reclaimable_bytes'])} | {p['dv_rows']:,} | {p['commits_since_checkpoint']:,} |"
            )
    one = report.get("table") and report["tables"]
    recorded = report["tables"][0]["recorded_health"] if one else report.get("lake_recorded") or []
    if recorded:
        head = "| run | version | files | small | bytes | tombstoned | past retention | DV rows | commits since "
        head += "checkpoint |"
        out += ["", "## Health at plan time (recorded by each run)", "", head, "|" + "---|" * 9]
        for p in recorded:
            version = "-" if p.get("version") is None else p["version"]
            out.append(
                f"| {p['run_id']} | {version} | {p['files']:,} | "
                f"{p['small_files']:,} | {human_bytes(p['bytes'])} | {human_bytes(p['tombstone_bytes'])} | "
                f"{human_bytes(p['reclaimable_bytes'])} | {p['dv_rows']:,} | {p['commits_since_checkpoint']:,} |"
            )
    changed = [tb for tb in report["tables"] if tb.get("since_previous")]
    if changed:
        out += ["", "## Changed since the previous run", "", "| table | runs | commits | files | small | bytes | "
                "tombstoned | DV rows | commits since checkpoint |", "|" + "---|" * 9]  # fmt: skip
        for tb in changed:
            c = tb["since_previous"]
            out.append(
                f"| {tb['table']} | {c['from_run']} -> {c['to_run']} | {signed(c['versions'])} | "
                f"{signed(c['files'])} | {signed(c['small_files'])} | {signed(c['bytes'], human_bytes)} | "
                f"{signed(c['tombstone_bytes'], human_bytes)} | {signed(c['dv_rows'])} | "
                f"{signed(c['commits_since_checkpoint'])} |"
            )
    if report["runs"]:
        out += ["", "## Runs", "", "| run | started | tables | done | failed | read | written | files removed "
                "| reclaimed | seconds |", "|" + "---|" * 10]  # fmt: skip
        for r in report["runs"]:
            out.append(
                f"| {r['run_id']} | {_iso(r['started_ms']) or '-'} | {r['tables']} | {r['operations']} | "
                f"{r['failed']} | {human_bytes(r['bytes_read'])} | {human_bytes(r['bytes_written'])} | "
                f"{r['files_removed']:,} | {human_bytes(r['bytes_reclaimed'])} | {r['seconds']:.3g} |"
            )
    if report["tables"]:
        out += ["", "## Tables", "", "| table | runs | files | small | tombstones | DV rows | commits since "
                "checkpoint | files removed | reclaimed | failures |", "|" + "---|" * 10]  # fmt: skip
        for tb in report["tables"]:
            p = tb["latest"] or {}
            out.append(
                f"| {tb['table']} | {len(tb['runs'])} | {p.get('files', '-')} | {_share(p)} | "
                f"{human_bytes(p.get('tombstone_bytes'))} | {p.get('dv_rows', '-')} | "
                f"{p.get('commits_since_checkpoint', '-')} | {tb['files_removed']:,} | "
                f"{human_bytes(tb['bytes_reclaimed'])} | {len(tb['failures'])} |"
            )
    return "\n".join(out) + "\n"


def _health_read(table: Mapping[str, Any]) -> bool:
    """Whether `table`'s health points were read from its log (not its runs' plan-time records)."""
    return any(p.get("phase") != "plan" for p in table.get("health") or ())


def render_lake_html(report: Mapping[str, Any], *, table_link: str | None = None) -> str:
    """The report as one self-contained HTML page. `table_link` (e.g. `health/table?uri=`) links each table
    to its own page (the URI appended, URL-encoded); None: no links (a page read offline)."""
    from urllib.parse import quote

    from .reports import render_page

    one = report.get("table") is not None
    if one and report["tables"]:
        tb = report["tables"][0]
        charts = [lake_health_chart(tb["health"] or []), maintenance_chart(tb["per_run"])]
    else:
        charts = [
            lake_health_chart(report["lake_health"], title="Lake health across runs"),
            maintenance_chart(report["runs"]),
            lake_tables_chart(report["tables"]),
        ]
    links = {}
    if table_link is not None:
        links = {tb["table"]: table_link + quote(tb["table"], safe="") for tb in report["tables"]}
    return render_page(
        "lake.html.j2",
        title=_title(report),
        r=report,
        t=report["totals"],
        one=one,
        links=links,
        health_read=one and bool(report["tables"]) and _health_read(report["tables"][0]),
        charts=[c for c in charts if c is not None],
        share=_share,
    )


#: The lake report's formats, as `--report-formats` names them.
LAKE_RENDERERS = {"json": render_lake_json, "md": render_lake_markdown, "html": render_lake_html}
