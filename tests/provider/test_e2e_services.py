"""The event-driven example DAG against real Airflow services: api-server, scheduler, dag-processor and
triggerer on 127.0.0.1, SQLite, LocalExecutor, each its own process, as `airflow standalone` runs them.

`delta_table_commits` (copied alone into a fresh DAGs folder) watches a delta-rs table with
`DeltaVersionTrigger` (poll every 2 s). Twenty appends land at random intervals, some two within one
poll; then a real OPTIMIZE and a real VACUUM (START and END commits), then one more append. Asserted:
every data version reaches the consumer DAG exactly once and in order (the asset events, the runs they
triggered and the task's own XCom agree), the maintenance versions trigger nothing and are never delivered,
and the watcher's stored cursor passes them. Timings (commit -> asset event -> run created -> task start)
are printed and written to `latency.json` in the test's directory, never asserted.

Slow (about 2 minutes on the 2-core machine): `-m slow`.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO

pytest.importorskip("airflow")

import pyarrow as pa
from deltalake import write_deltalake

from airflow_delta_provider.triggers.delta import cursor_key

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

DAG_ID = "delta_table_commits"
ASSET_NAME = "delta_example_table_commits"
POLL_INTERVAL = 2.0  # the DAG's default is 5 s; shorter here keeps the test's pauses short
COMMITS = 20
SERVICES = ("api-server", "scheduler", "dag-processor", "triggerer")
TIMEOUT = 240.0  # a safety net for a hung wait, never a measured duration


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Services:
    """The four Airflow services, each started in its own session (process group) and stopped by its id."""

    def __init__(self, home: Path, table: Path) -> None:
        self.home, self.table = home, table
        self.db_path = home / "airflow.db"
        self.port = _free_port()
        dags = home / "dags"
        dags.mkdir(parents=True)
        shutil.copy(REPO / "dags" / "delta_table_commits.py", dags / "delta_table_commits.py")
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
        env.update(
            AIRFLOW_HOME=str(home),
            AIRFLOW__CORE__DAGS_FOLDER=str(dags),
            AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{self.db_path}",
            AIRFLOW__CORE__EXECUTOR="LocalExecutor",
            AIRFLOW__CORE__PARALLELISM="2",
            AIRFLOW__CORE__LOAD_EXAMPLES="False",
            AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="False",
            AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"http://127.0.0.1:{self.port}/execution/",
            AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="True",
            AIRFLOW__API__HOST="127.0.0.1",
            AIRFLOW__API__PORT=str(self.port),
            AIRFLOW__API__WORKERS="1",
            AIRFLOW__API_AUTH__JWT_SECRET="an-e2e-test-only-secret-" + "x" * 48,
            AIRFLOW__TRIGGERER__DEFAULT_CAPACITY="50",
            DELTA_EXAMPLE_TABLE_URI=str(table),
            DELTA_WATCH_POLL_INTERVAL=str(POLL_INTERVAL),
            SPARK_LOCAL_IP="127.0.0.1",
        )
        env.pop("DELTA_STORAGE_CONN_ID", None)
        self.env = env
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self) -> None:
        airflow = [sys.executable, "-m", "airflow"]
        subprocess.run([*airflow, "db", "migrate"], env=self.env, check=True, capture_output=True)
        logs = self.home / "service-logs"
        logs.mkdir()
        for name in SERVICES:
            out = open(logs / f"{name}.log", "wb")  # the child's; ours is closed when Popen returns
            self.procs[name] = subprocess.Popen(
                [*airflow, name], env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
            out.close()

    def check_alive(self) -> None:
        dead = {n: p.returncode for n, p in self.procs.items() if p.poll() is not None}
        if dead:
            pytest.fail(f"services exited: {dead}; logs in {self.home / 'service-logs'}")

    def stop(self) -> None:
        """SIGTERM to each service's group, 10 s for all of them to exit, then SIGKILL to what is left (the
        test is over: nothing asserts a graceful shutdown)."""
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)  # the group of the process this test started
        deadline = time.monotonic() + 10
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)

    def query(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        with sqlite3.connect(self.db_path, timeout=30) as db:
            return db.execute(sql, args).fetchall()

    def wait(self, condition: Callable[[], Any], what: str, timeout: float = TIMEOUT) -> Any:
        """Poll `condition` (every 0.2 s) until it returns a truthy value, failing after `timeout`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                found = condition()
            except sqlite3.OperationalError:  # a table not migrated yet, or a locked database
                found = None
            if found:
                return found
            time.sleep(0.2)
        pytest.fail(f"not within {timeout:.0f} s: {what}; logs in {self.home / 'service-logs'}")

    # -- what the services did ---------------------------------------------------------------------
    def cursor(self) -> int | None:
        rows = self.query(
            "SELECT s.value FROM asset_state_store s JOIN asset a ON a.id = s.asset_id WHERE a.name = ? AND s.key = ?",
            ASSET_NAME,
            cursor_key(str(self.table)),
        )
        return json.loads(rows[0][0]) if rows else None

    def events(self) -> list[dict[str, Any]]:
        """The watcher's asset events, oldest first: id, time and payload."""
        rows = self.query(
            "SELECT e.id, e.timestamp, e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id "
            "WHERE a.name = ? ORDER BY e.id",
            ASSET_NAME,
        )
        return [{"id": i, "at": _utc(ts), "payload": json.loads(extra)["payload"]} for i, ts, extra in rows]

    def runs(self) -> list[dict[str, Any]]:
        """The consumer DAG's runs, oldest first: the events that triggered each, and its task."""
        rows = self.query(
            "SELECT r.id, r.run_id, r.queued_at, r.state, ti.state, ti.start_date FROM dag_run r "
            "LEFT JOIN task_instance ti ON ti.dag_id = r.dag_id AND ti.run_id = r.run_id "
            "AND ti.task_id = 'new_versions' "
            "WHERE r.dag_id = ? ORDER BY r.id",
            DAG_ID,
        )
        out = []
        for rid, run_id, queued_at, state, ti_state, started in rows:
            events = [e for (e,) in self.query("SELECT event_id FROM dagrun_asset_event WHERE dag_run_id = ?", rid)]
            xcom = self.query(
                "SELECT value FROM xcom WHERE dag_id = ? AND run_id = ? AND task_id = 'new_versions' "
                "AND key = 'return_value'",
                DAG_ID,
                run_id,
            )
            value = json.loads(xcom[0][0]) if xcom else None
            out.append(
                {
                    "run_id": run_id,
                    "queued_at": _utc(queued_at),
                    "state": state,
                    "task_state": ti_state,
                    "task_start": _utc(started),
                    "events": sorted(events),
                    "versions": json.loads(value) if isinstance(value, str) else value,
                }
            )
        return out


def _utc(text: str | None) -> float | None:
    if text is None:
        return None
    stamp = datetime.fromisoformat(str(text))
    return (stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)).timestamp()


def _append(table: Path, i: int) -> float:
    """One delta-rs append; the commit time (its commit file's mtime)."""
    write_deltalake(str(table), pa.table({"id": [i], "p": ["a" if i % 2 else "b"]}), partition_by=["p"], mode="append")
    latest = max((table / "_delta_log").glob("*.json"))
    return latest.stat().st_mtime


def _intervals(rng: random.Random) -> list[float]:
    """Pauses before each of the 20 appends: mostly 0.3-1.2 poll intervals, five of them under 0.1 of one
    (two commits in one poll, wherever the poll falls)."""
    quick = set(rng.sample(range(1, COMMITS), 5))
    return [
        rng.uniform(0.02, 0.1) * POLL_INTERVAL if i in quick else rng.uniform(0.3, 1.2) * POLL_INTERVAL
        for i in range(COMMITS)
    ]


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    root = tmp_path_factory.mktemp("e2e-services")
    table = root / "table"
    write_deltalake(str(table), pa.table({"id": [0], "p": ["a"]}), partition_by=["p"])  # version 0
    svc = Services(root / "airflow", table)
    svc.start()
    try:
        yield svc
    finally:
        svc.stop()


def test_every_commit_reaches_the_consumer_once_and_maintenance_triggers_nothing(services: Services) -> None:
    from airflow_delta_provider.delta.maintenance.optimize import optimize
    from airflow_delta_provider.delta.maintenance.vacuum import vacuum

    svc, table = services, services.table
    started = time.monotonic()
    # the DAG is parsed and unpaused, its watcher's trigger runs, and its first poll's baseline is stored
    svc.wait(lambda: svc.cursor() == 0, "the watcher stores its baseline (version 0)")
    ready = time.monotonic() - started

    rng = random.Random(29)
    committed: dict[int, float] = {}
    for i, pause in enumerate(_intervals(rng), start=1):
        time.sleep(pause)
        committed[i] = _append(table, i)
    svc.wait(
        lambda: sum(len(r["versions"] or []) for r in svc.runs() if r["task_state"] == "success") >= COMMITS,
        "every version's run succeeded",
    )

    # maintenance: a real OPTIMIZE and a real VACUUM (START, END): three versions that change no data
    maintenance = [optimize(str(table)).version]
    maintenance += vacuum(str(table), dry_run=False, retention_hours=0, enforce_retention_duration=False).audit_versions
    assert maintenance == [COMMITS + 1, COMMITS + 2, COMMITS + 3]
    events_before = len(svc.events())
    svc.wait(lambda: svc.cursor() == COMMITS + 3, "the cursor passes the maintenance versions")
    time.sleep(2 * POLL_INTERVAL)  # two more polls: still nothing
    assert len(svc.events()) == events_before  # no event for OPTIMIZE or VACUUM

    last = COMMITS + 4
    committed[last] = _append(table, last)  # a data commit after them is delivered, alone
    svc.wait(
        lambda: (
            (runs := svc.runs())
            and any(last in (r["versions"] or []) for r in runs)
            and all(r["state"] in ("success", "failed") for r in runs)
        ),
        "the last version's run, and every run, finished",
    )

    events, runs = svc.events(), svc.runs()
    delivered = [v for e in events for v in e["payload"]["versions"]]
    assert delivered == sorted(committed)  # each data version in exactly one event, in order; none of 21..23
    assert events[-1]["payload"]["versions"] == [last] and events[-1]["payload"]["skipped_versions"] == []
    assert all(r["state"] == "success" and r["task_state"] == "success" for r in runs), runs
    consumed = [e for r in runs for e in r["events"]]
    assert sorted(consumed) == [e["id"] for e in events]  # each event triggered exactly one run
    assert [v for r in runs for v in r["versions"]] == sorted(committed)  # what the task saw: once, in order
    batched = [e["payload"]["versions"] for e in events if len(e["payload"]["versions"]) > 1]

    # commit -> asset event, -> run created (queued), -> the task started
    event_of = {v: e for e in events for v in e["payload"]["versions"]}
    run_of = {e: r for r in runs for e in r["events"]}
    lat: dict[str, list[float]] = {"event": [], "run_queued": [], "task_start": []}
    for v, t in committed.items():
        e = event_of[v]
        r = run_of[e["id"]]
        lat["event"].append(e["at"] - t)
        lat["run_queued"].append(r["queued_at"] - t)
        lat["task_start"].append(r["task_start"] - t)
    summary = {
        k: {
            "p50": round(statistics.median(v), 2),
            "p95": round(_pct(v, 0.95), 2),
            "max": round(max(v), 2),
            "min": round(min(v), 2),
        }
        for k, v in lat.items()
    }
    report = {
        "poll_interval_s": POLL_INTERVAL,
        "data_commits": len(committed),
        "events": len(events),
        "runs": len(runs),
        "events_with_several_versions": batched,
        "maintenance_versions": maintenance,
        "services_ready_s": round(ready, 1),
        "test_s": round(time.monotonic() - started, 1),
        "latency_s": summary,
        "per_version": {v: {k: round(lat[k][i], 2) for k in lat} for i, v in enumerate(committed)},
    }
    (svc.home.parent / "latency.json").write_text(json.dumps(report, indent=2))
    print("\n" + json.dumps({k: v for k, v in report.items() if k != "per_version"}, indent=2))
