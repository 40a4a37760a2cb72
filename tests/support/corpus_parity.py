"""What a corpus table looks like to an engine, as JSON-comparable data (issue 27's corpus parity).

`fingerprint(root, engine)` is the snapshot a reader sees — version, protocol, metadata, txns, domains,
every active file (path, size, stats, deletion vector) and every tombstone (path, deletion time, size) —
or the typed error's class name. With `summaries=True` it also holds the reports the Spark engine
aggregates on its executors (file summary, tombstone summary and count at a fixed clock, distinct paths).

The result is canonical JSON data (dataclasses as `{"<Class>": {field: ...}}`, mappings with sorted keys,
sequences as lists), so a fingerprint computed in another process (the standalone cluster's spark-submit
driver, `spark_corpus_job.py`) compares with `==` exactly as the objects would.
Imports nothing from the test suite: the spark-submit driver imports it from this directory.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from airflow_delta_provider.delta import DeltaError, DeltaLog

#: A fixed clock: tombstones split the same way in every engine and process.
NOW_MS = 1_700_000_000_000
#: VACUUM's fixed clock: after every file's mtime (the corpus copies keep theirs), so with retention 0
#: every tombstoned and every untracked file is planned.
VACUUM_NOW_MS = 4_102_444_800_000  # 2100-01-01
#: The checkpoint writer's clock (as `test_checkpoint_writer`): at 0 every tombstone is kept.
CHECKPOINT_NOW_MS = 0
#: The write actions `act` runs on a copy of a table.
ACTIONS = ("checkpoint", "vacuum", "optimize")
ORACLE_FILE = "ORACLE-deltalake-1.6.6.json"


def corpus_roots(corpus: Path) -> list[str]:
    """Every table root of the corpus (the oracle's 292), sorted."""
    return sorted(json.loads((corpus / ORACLE_FILE).read_text())["tables"])


def canonical(value: Any) -> Any:
    """`value` as JSON data that compares equal exactly when the values do (up to list/tuple)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: canonical(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {type(value).__name__: fields}
    if isinstance(value, Mapping):
        return {str(k): canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list | tuple | set | frozenset):
        items = [canonical(v) for v in value]
        return sorted(items, key=json.dumps) if isinstance(value, set | frozenset) else items
    if isinstance(value, bytes):
        return {"bytes": value.hex()}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return {type(value).__name__: repr(value)}


def untyped(exc: BaseException) -> str:
    """An error that is not a `DeltaError`: its class, and the typed error it carries (one an executor
    raised), else the first line of its message."""
    text = str(exc)
    carried = re.search(r"airflow_delta_provider\.delta\.errors\.(\w+)", text)
    line = next((x.strip() for x in text.splitlines() if x.strip()), "")
    return f"untyped {type(exc).__name__}: " + (f"carries {carried[1]}" if carried else line[:200])


def _sorted(rows: Any) -> list[Any]:
    return sorted((canonical(r) for r in rows), key=lambda r: json.dumps(r, sort_keys=True))


def fingerprint(table: str, engine: Any, *, summaries: bool = True) -> Any:
    """What `engine` (None: the local engine) reads at `table`'s latest version, or the error class."""
    try:
        snap = DeltaLog(table, engine=engine).update()
    except DeltaError as exc:
        return type(exc).__name__
    except Exception as exc:  # not a typed error: a difference to report, not a reason to stop the pass
        return untyped(exc)
    reports = None
    if summaries:  # first: with the Spark engine they aggregate on the executors, before any collect
        reports = (
            snap.file_summary().to_dict(),
            snap.tombstone_summary(now_ms=NOW_MS).to_dict(),
            snap.num_tombstones(now_ms=NOW_MS),
            snap.num_distinct_paths(),
        )
    return canonical(
        {
            "summaries": reports,
            "version": snap.version,
            "protocol": snap.protocol,
            "metadata": snap.metadata,
            "txns": snap.set_transactions,
            "domains": snap.domain_metadata,
            "files": _sorted((a.path, a.size, a.stats, a.deletion_vector) for a in snap.all_files()),
            "tombstones": _sorted(
                (r.path, r.deletion_timestamp, r.size) for r in snap.tombstones(include_expired=True)
            ),
        }
    )


def differences(expected: Mapping[str, Any], got: Mapping[str, Any], *, summaries: bool = True) -> dict[str, Any]:
    """Roots whose fingerprints differ (or are missing), with both sides shortened for the report.
    `summaries=False` compares `got` (computed without them) with the rest of `expected`."""
    found = {}
    for root, want in expected.items():
        have = got.get(root, "<missing>")
        if not summaries and isinstance(want, dict):
            want = {**want, "summaries": None}
        if have != want:
            found[root] = (json.dumps(want)[:400], json.dumps(have)[:400])
    return found


def _plain(value: Any, table: str) -> Any:
    """A result as JSON data with the copy's own location replaced by `<table>` (copies differ by place)."""
    text = json.dumps(canonical(value), sort_keys=True)
    for form in (f"file://{table}", table):
        text = text.replace(form, "<table>")
    return json.loads(text)


def act(action: str, table: str, engine: Any) -> Any:
    """Run the write `action` on the table copy at `table` with `engine` (None: the local engine) and
    return its result as JSON data, or the typed error's class name (a refused protocol: nothing written).

    * checkpoint: `write_checkpoint` of the latest version at `CHECKPOINT_NOW_MS`.
    * vacuum: a FULL plan (retention 0, the check off, no untracked grace, `VACUUM_NOW_MS`), then that
      plan applied with the same `DeltaLog` (its snapshot updated, not replayed again: the log has not
      moved; the apply still re-lists and re-validates every planned file); both results.
    * optimize: bin-packing compaction with the defaults.
    """
    from airflow_delta_provider.delta.maintenance.checkpoint import write_checkpoint
    from airflow_delta_provider.delta.maintenance.optimize import optimize
    from airflow_delta_provider.delta.maintenance.vacuum import vacuum

    try:
        if action == "checkpoint":
            log = DeltaLog(table, clock=lambda: CHECKPOINT_NOW_MS, engine=engine)
            return _plain(write_checkpoint(log), table)
        if action == "vacuum":
            kw: dict[str, Any] = dict(
                retention_hours=0,
                enforce_retention_duration=False,
                untracked_grace_hours=0,
                clock=lambda: VACUUM_NOW_MS,
            )
            log = DeltaLog(table, engine=engine)  # one log: the apply re-validates on its updated snapshot
            planned = vacuum(log, **kw).to_dict()
            plan = {k: v for k, v in planned.items() if k not in SPARK_ONLY_PLAN_KEYS}
            done = vacuum(log, plan=planned, dry_run=False, **kw).to_dict()
            done = {k: v for k, v in done.items() if k not in SPARK_ONLY_PLAN_KEYS}
            return {"plan": _plain(plan, table), "apply": _plain(done, table)}
        if action == "optimize":
            result = optimize(DeltaLog(table, engine=engine), clock=lambda: VACUUM_NOW_MS).to_dict()
            return _plain({k: v for k, v in result.items() if k not in OPTIMIZE_OUTPUT_KEYS}, table)
    except DeltaError as exc:
        return type(exc).__name__
    except Exception as exc:  # not a typed error: a difference to report, not a reason to stop the pass
        return untyped(exc)
    raise ValueError(f"unknown action {action!r}")


#: Plan keys only the Spark executor adds (where it keeps the file list).
SPARK_ONLY_PLAN_KEYS = frozenset({"files_uri", "files_inline"})
#: OPTIMIZE result keys naming the new files' bytes: each engine's parquet writer sizes them its own way;
#: the rows are compared instead (delta-rs reads both tables).
OPTIMIZE_OUTPUT_KEYS = frozenset({"bytes_added"})


def run_tasks(
    tasks: list[dict[str, str]], engine: Any, *, summaries: bool = False, cost: dict[str, list[float]] | None = None
) -> dict[str, Any]:
    """`{"kind": "snapshot" | an action, "table": path, "key": name}` tasks run in order with `engine`:
    result (fingerprint or `act`'s) by key; a snapshot task's own `"summaries"` overrides `summaries`.
    `cost` gets `kind -> [tasks, wall seconds]`."""
    out: dict[str, Any] = {}
    for task in tasks:
        started = time.monotonic()
        if task["kind"] == "snapshot":
            out[task["key"]] = fingerprint(task["table"], engine, summaries=bool(task.get("summaries", summaries)))
        else:
            out[task["key"]] = act(task["kind"], task["table"], engine)
        if cost is not None:
            count = cost.setdefault(task["kind"], [0, 0.0])
            count[0] += 1
            count[1] = round(count[1] + time.monotonic() - started, 2)
    return out
