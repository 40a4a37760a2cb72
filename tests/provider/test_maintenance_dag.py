"""The example DAG `delta_table_maintenance` run through real Airflow (`dag.test()` on the session's SQLite
DB), jobs in the worker process (`DELTA_SPARK_CONN_ID=none`): no JVM.

A log built without data files (`DeltaLogBuilder`), OPTIMIZE only planning: run 1, thirteen versions past
any checkpoint, writes the checkpoint at the latest version, the log cleanup is a dry run, nothing is
deleted; run 2, one commit later, skips the checkpoint, checks only the new version, and its
`apply_log_cleanup` deletes the expired commits, leaving a table delta-rs still reads. Each run leases the
version replay_and_check checked and its report releases the lease.

A delta-rs table with real data (small appends, an overwrite, a stray file, a 0-hour retention), three
runs: a person chooses which of OPTIMIZE's planned partitions to compact (p=a: compacted; p=b keeps its
small files) and VACUUM only plans (the run's lease keeps the files of the version it checked out of the
plan); `apply_vacuum` with the approval rejected moves nothing; `apply_vacuum` approved with the retention
raised to 3 hours re-plans and moves only the plan's files still expired at 3 hours into a quarantine
(nothing deleted), and undoing it makes every version read in delta-rs as before. Another run leaves the
partition choice to time out (the scheduler's own timeout sweep) and approves a retention shorter than the
plan's: nothing compacted, the approval refused, nothing moved. The questions are answered as the UI answers
them: `PATCH /api/v2/.../taskInstances/<task>/-1/hitlDetails` on Airflow's own REST API app (in process,
`TestClient`, the simple auth manager's all-admins mode), while `dag.test()` waits for the task parked
in `awaiting_input`.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import REPO, metadata_db, task_states, xcom_return

pytest.importorskip("airflow")

from deltalake import DeltaTable, write_deltalake

from airflow_delta_provider.delta.maintenance.leases import list_leases
from airflow_delta_provider.operators.delta import DeltaVacuumUndoOperator, report_page
from airflow_delta_provider.testing import DeltaLogBuilder

pytestmark = pytest.mark.airflow

DAG_ID = "delta_table_maintenance"


@pytest.fixture
def maintenance_dag(airflow_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("DELTA_SPARK_CONN_ID", "none")  # the jobs run in the worker process
    # no DeadlineAlert: Airflow 3.3.1's dag.test() fails a successful run of a DAG with one (see
    # maintenance_deadline in the DAG; tests/provider/test_policies.py shows the alert firing)
    monkeypatch.setenv("DELTA_MAINTENANCE_DEADLINE_HOURS", "none")
    monkeypatch.setenv("DELTA_RESULT_DIR", str(tmp_path / "results"))
    monkeypatch.delenv("DELTA_STORAGE_CONN_ID", raising=False)
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags" / "delta_table_maintenance.py"))
    assert bag.import_errors == {}
    dag = bag.dags[DAG_ID]
    assert {t.submit for t in dag.tasks if hasattr(t, "submit")} == {False}
    return dag


def _conf(table: str, **overrides: Any) -> dict[str, Any]:
    """A run's conf with every run-dependent param given (`dag.test()` keeps an earlier run's conf)."""
    conf = {
        "table_uri": table,
        "checkpoint_interval": 10,
        "optimize": True,
        "apply_vacuum": False,
        "apply_log_cleanup": False,
    }
    return {**conf, **overrides}


def _log(b: DeltaLogBuilder) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in (Path(b.path) / "_delta_log").iterdir()}


def _link(run_id: str, task_id: str) -> str | None:
    """The "Delta report" extra link the task runner stored for a task (Airflow 3 keeps links in XCom)."""
    with metadata_db() as db:
        row = db.execute(
            "SELECT value FROM xcom WHERE run_id = ? AND task_id = ? AND key = '_link_DeltaResultLink'",
            (run_id, task_id),
        ).fetchone()
    if row is None:
        return None
    value = json.loads(row[0]) if isinstance(row[0], str | bytes) else row[0]
    return json.loads(value) if isinstance(value, str) and value.startswith('"') else value


@pytest.mark.airflow
def test_maintenance_dag_checkpoints_when_behind_and_deletes_nothing_by_default(
    maintenance_dag, tmp_path: Path
) -> None:
    b = DeltaLogBuilder(tmp_path / "table", schema={"id": "long", "region": "string"}, partition_columns=["region"])
    b.create()
    for i in range(11):  # versions 0..11, stamped in 2023: past any log retention, no checkpoint
        b.append([f"f{i}.parquet"], size=1000 + i, partition={"region": "eu" if i % 2 else "us"})
    b.remove(["f0.parquet"])  # one tombstone, long expired
    assert b.version == 12
    before = _log(b)

    # this log's data files were never written: OPTIMIZE only plans (a dry run), the VACUUM plan lists nothing
    dr = maintenance_dag.test(run_conf=_conf(b.path, optimize=False))
    states = task_states(dr.run_id)
    assert states == {
        "replay_and_check": "success",
        "optimize_conditions": "success",
        "choose_partitions": "success",  # asks nothing: params.optimize_ask_partitions is false
        "optimize": "success",
        "vacuum_plan": "success",
        "vacuum_approval_needed": "success",
        "approve_vacuum": "skipped",
        "vacuum_apply": "skipped",
        "vacuum_not_applied": "success",
        "vacuum_purge": "success",
        "checkpoint_needed": "success",
        "checkpoint": "success",
        "checkpoint_not_needed": "skipped",
        "log_cleanup": "success",
        "report": "success",
    }, states
    written = xcom_return(dr.run_id, "checkpoint")
    assert written["version"] == 12 and written["written"] and written["kind"] == "classic"
    after = _log(b)
    assert set(after) - set(before) == {f"{12:020d}.checkpoint.parquet", "_last_checkpoint"}
    assert all(after[name] == mtime for name, mtime in before.items())  # nothing deleted or rewritten
    cleanup = xcom_return(dr.run_id, "log_cleanup")
    assert cleanup["dry_run"] and cleanup["deleted"] == 0 and cleanup["num_files"] > 0
    optimized = xcom_return(dr.run_id, "optimize")
    assert optimized["dry_run"] and optimized["version"] is None and optimized["num_files_removed"] == 10
    plan = xcom_return(dr.run_id, "vacuum_plan")
    assert plan["dry_run"] and plan["version"] == 12 and plan["num_files"] == 0  # f0.parquet is not on disk
    summary = xcom_return(dr.run_id, "report")
    assert summary["optimize"]["dry_run"] and summary["vacuum"] is None and summary["vacuum_approval"] is None
    assert summary["checkpoint"] == {"version": 12, "kind": "classic", "written": True}
    assert summary["log_cleanup"]["dry_run"] and summary["log_cleanup"]["deleted"] == 0
    assert summary["vacuum_purge"] == {
        "dry_run": True, "num_purged": 0, "deleted_files": 0, "deleted_bytes": 0, "quarantine_ids": []
    }  # fmt: skip
    # replay_and_check leased the version it checked; the report released it
    replayed = xcom_return(dr.run_id, "replay_and_check")
    assert replayed["lease_owner"] == f"{DAG_ID}.replay_and_check.{dr.run_id}" and replayed["lease_expires_at"]
    assert summary["lease"] == {"id": replayed["lease_id"], "version": 12, "released": True}
    assert list_leases(b.path, include_expired=True) == []
    # extra links: the plugin's pages for the replay's and the VACUUM plan's HTML reports (served by the
    # API server: tests/provider/test_report_plugin.py opens them)
    assert _link(dr.run_id, "replay_and_check") == report_page(DAG_ID, dr.run_id, "replay_and_check")
    assert summary["reports"]["replay"].endswith(".html") and Path(summary["reports"]["replay"]).exists()
    assert _link(dr.run_id, "vacuum_plan") == report_page(DAG_ID, dr.run_id, "vacuum_plan")
    assert Path(summary["reports"]["vacuum_plan"]).exists()

    b.append(["late.parquet"], size=5, partition={"region": "eu"})  # version 13: one past the checkpoint
    dr = maintenance_dag.test(run_conf=_conf(b.path, optimize=False, apply_log_cleanup=True))
    states = task_states(dr.run_id)
    assert states["checkpoint"] == "skipped" and states["checkpoint_not_needed"] == "success", states
    assert {states[t] for t in ("replay_and_check", "optimize", "vacuum_plan", "log_cleanup", "report")} == {"success"}
    assert xcom_return(dr.run_id, "replay_and_check")["checked_versions"] == [13]
    cleanup = xcom_return(dr.run_id, "log_cleanup")
    assert not cleanup["dry_run"] and cleanup["deleted"] == cleanup["num_files"] > 0
    assert cleanup["earliest_readable_version"] == 12
    assert not Path(b.commit_path(0)).exists()
    assert DeltaTable(b.path).version() == 13 and len(DeltaTable(b.path).file_uris()) == 11


# -- a real table: OPTIMIZE, then VACUUM planned, rejected, approved ------------------------------------------


def _small_file_table(root: Path) -> None:
    """delta-rs, partitioned by `p`: an overwrite (2 tombstones), four small appends (5 files per
    partition), a stray file nothing references; `delta.deletedFileRetentionDuration` 0 hours, so VACUUM
    may delete what the latest version does not need (the DAG never turns the retention check off)."""
    retention = {"delta.deletedFileRetentionDuration": "interval 0 hours"}
    write_deltalake(str(root), pa.table({"id": [0, 1], "p": ["a", "b"]}), partition_by=["p"], configuration=retention)
    write_deltalake(str(root), pa.table({"id": [2, 3], "p": ["a", "b"]}), partition_by=["p"], mode="overwrite")
    for i in range(4):
        write_deltalake(str(root), pa.table({"id": [10 + i, 20 + i], "p": ["a", "b"]}), mode="append")
    stray = root / "p=a" / "stray-from-a-failed-job.parquet"
    stray.write_bytes(b"never committed")
    old = time.time() - 3600
    os.utime(stray, (old, old))


def _data_files(root: Path) -> dict[str, int]:
    """Every file under the table root but the log, leases and quarantines: relative path -> mtime."""
    hidden = {"_delta_log", "_delta_leases", "_delta_quarantine"}
    return {
        p.relative_to(root).as_posix(): p.stat().st_mtime_ns
        for p in root.rglob("*")
        if p.is_file() and not hidden & set(p.relative_to(root).parts)
    }


def _quarantined(root: Path, quarantine_id: str) -> set[str]:
    """The table paths of the files in a VACUUM quarantine (`_delta_quarantine/<id>/files/<path>`)."""
    files = root / "_delta_quarantine" / quarantine_id / "files"
    return {p.relative_to(files).as_posix() for p in files.rglob("*") if p.is_file()}


def _versions(root: Path, last: int) -> dict[int, list[tuple[int, str]]]:
    """The rows of every version up to `last`, as delta-rs reads them."""
    out = {}
    for version in range(last + 1):
        t = DeltaTable(str(root), version=version).to_pyarrow_table()
        out[version] = sorted(zip(t.column("id").to_pylist(), t.column("p").to_pylist(), strict=True))
    return out


def _rows(root: Path) -> list[tuple[int, str]]:
    t = DeltaTable(str(root)).to_pyarrow_table()
    return sorted(zip(t.column("id").to_pylist(), t.column("p").to_pylist(), strict=True))


def _active(root: Path) -> set[str]:
    """The latest version's data files, as delta-rs reads them (relative paths)."""
    prefix = root.resolve().as_uri().removeprefix("file://")
    return {uri.removeprefix("file://").removeprefix(prefix).lstrip("/") for uri in DeltaTable(str(root)).file_uris()}


#: How a test answers one human-in-the-loop task: the PATCH body made from the request (`GET`), or TIMEOUT.
Answer = Callable[[dict[str, Any]], dict[str, Any]]
TIMEOUT = "timeout"


def choose(*options: str, **params: Any) -> Answer:
    """Answer with these options (an option ending in `:` picks the one it starts: a partition's label)."""

    def body(request: dict[str, Any]) -> dict[str, Any]:
        chosen = [next(o for o in request["options"] if o.startswith(x)) if x.endswith(":") else x for x in options]
        return {"chosen_options": chosen, "params_input": params}

    return body


def _time_out(ti_id: str) -> None:
    """What the scheduler does once a task's response timeout has passed: its timeout sweep
    (`SchedulerJobRunner.check_awaiting_input_timeouts`, Airflow 3.3's own code, run here as the scheduler runs
    it) applies the request's defaults and resumes the task with `timedout`. Only the deadline is moved
    into the past (`trigger_timeout`), as if the response timeout had gone by."""
    from airflow.jobs.job import Job
    from airflow.jobs.scheduler_job_runner import SchedulerJobRunner

    with metadata_db() as db:
        db.execute("UPDATE task_instance SET trigger_timeout = '2000-01-01 00:00:00.000000' WHERE id = ?", (ti_id,))
    SchedulerJobRunner(job=Job()).check_awaiting_input_timeouts()


class HITLResponder:
    """Answers human-in-the-loop tasks through Airflow's REST API while `dag.test()` runs (it waits, polling,
    for a response recorded from outside). Watches the metadata DB for a task of `answers` parked in
    `awaiting_input`, reads its request (`GET .../hitlDetails`), then answers (`PATCH`): the API records the
    response and resumes the task; or lets it time out (`TIMEOUT`). If no answer can be sent the task is
    failed, so `dag.test()` ends instead of waiting forever."""

    def __init__(self, client: Any, answers: dict[str, Answer | str]) -> None:
        self.client, self.answers = client, answers
        self.requests: dict[str, dict[str, Any]] = {}
        self.responses: dict[str, Any] = {}
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hitl-responder", daemon=True)

    def __enter__(self) -> HITLResponder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def _parked(self) -> tuple[str, str, str] | None:
        with metadata_db() as db:
            rows = db.execute(
                "SELECT ti.task_id, ti.run_id, ti.id FROM hitl_detail h JOIN task_instance ti ON ti.id = h.ti_id "
                "WHERE ti.dag_id = ? AND ti.state = 'awaiting_input' AND h.responded_at IS NULL",
                (DAG_ID,),
            ).fetchall()
        return next((r for r in rows if r[0] in self.answers and r[0] not in self.requests), None)

    def _run(self) -> None:
        while not self._stop.wait(0.5) and self.error is None:
            parked = self._parked()
            if parked is None:
                continue
            task_id, run_id, ti_id = parked
            url = f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{task_id}/-1/hitlDetails"
            try:
                self.requests[task_id] = self.client.get(url).json()
                answer = self.answers[task_id]
                if answer == TIMEOUT:
                    _time_out(ti_id)
                    continue
                sent = self.client.patch(url, json=answer(self.requests[task_id]))
                self.responses[task_id] = sent.json()
                if sent.status_code != 200:
                    self.error = f"PATCH {url}: {sent.status_code} {sent.text}"
            except Exception as exc:  # the test reports it; the run must not wait forever
                self.error = f"{type(exc).__name__}: {exc}"
            if self.error:
                with metadata_db() as db:
                    db.execute("UPDATE task_instance SET state = 'failed' WHERE id = ?", (ti_id,))


@pytest.fixture
def api_client(airflow_db: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Airflow's REST API app (core API only), every caller an admin (the simple auth manager's dev mode)."""
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "True")
    monkeypatch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", "a-test-only-secret-" + "x" * 64)
    from airflow.api_fastapi.app import create_app, purge_cached_app
    from fastapi.testclient import TestClient

    with TestClient(create_app(apps="core")) as client:
        yield client
    purge_cached_app()


def _run_answering(dag: Any, client: Any, conf: dict[str, Any], **answers: Answer | str) -> tuple[Any, HITLResponder]:
    with HITLResponder(client, answers) as responder:
        dr = dag.test(run_conf=conf)
    assert responder.error is None, responder.error
    return dr, responder


@pytest.mark.airflow
@pytest.mark.slow
def test_maintenance_dag_compacts_the_chosen_partitions_then_vacuums_what_a_human_approved(
    maintenance_dag, api_client, tmp_path: Path
) -> None:
    root = tmp_path / "table"
    _small_file_table(root)
    rows, v = _rows(root), DeltaTable(str(root)).version()
    files_before = _data_files(root)
    assert len(_active(root)) == 10 and v == 5

    # run 1: OPTIMIZE's conditions hold and it plans two partitions: a person is asked which to compact and
    # chooses p=a; p=a is compacted (a new version, the same rows), p=b keeps its five small files; VACUUM
    # only plans; the checkpoint is written at the version OPTIMIZE committed, not the one replay_and_check read
    conf = _conf(str(root), checkpoint_interval=5, optimize_ask_partitions=True)
    dr, responder = _run_answering(maintenance_dag, api_client, conf, choose_partitions=choose("p=a:"))
    states = task_states(dr.run_id)
    assert states["vacuum_not_applied"] == "success" and states["checkpoint"] == "success", states
    assert {states["approve_vacuum"], states["vacuum_apply"]} == {"skipped"}, states
    asked = responder.requests["choose_partitions"]
    assert asked["multiple"] and len(asked["options"]) == 3 and asked["options"][-1].startswith("none")
    assert asked["defaults"] == asked["options"][:2]  # every planned partition preselected
    assert asked["options"][0].startswith("p=a: 5 small files, ") and asked["options"][1].startswith("p=b: 5 small")
    assert "| `p=a` | 5 |" in asked["body"] and "| `p=b` | 5 |" in asked["body"]
    chosen = xcom_return(dr.run_id, "choose_partitions")
    assert chosen["compact"] and chosen["partitions"] == ["p=a"] and chosen["where"] == "(`p` = 'a')"
    assert chosen["by"] == responder.responses["choose_partitions"]["responded_by"]["name"]
    optimized = xcom_return(dr.run_id, "optimize")
    assert not optimized["dry_run"] and optimized["read_version"] == v and optimized["version"] == v + 1
    assert (optimized["num_files_removed"], optimized["num_files_added"], optimized["num_partitions"]) == (5, 1, 1)
    active = _active(root)
    assert DeltaTable(str(root)).version() == v + 1 and _rows(root) == rows and len(active) == 6
    assert sum(f.startswith("p=b/") for f in active) == 5  # the partition not chosen keeps its small files
    assert xcom_return(dr.run_id, "checkpoint")["version"] == v + 1
    after_optimize = _data_files(root)
    assert files_before.items() <= after_optimize.items()  # nothing deleted or rewritten
    garbage = set(after_optimize) - active  # replaced by OPTIMIZE or the overwrite, and the stray
    assert len(garbage) == 2 + 5 + 1
    stray = "p=a/stray-from-a-failed-job.parquet"
    # replay_and_check leased version v, which reads the 5 files OPTIMIZE replaced: the plan leaves them out
    plan = xcom_return(dr.run_id, "vacuum_plan")
    assert plan["dry_run"] and plan["num_files"] == 2 + 1 and plan["deleted"] == 0
    assert (plan["num_leases"], plan["lease_kept_files"]) == (1, 5)
    assert plan["quarantine"]["method"] == "rename" and plan["quarantine"]["files"] == 3  # the moves' cost
    summary = xcom_return(dr.run_id, "report")
    assert summary["optimize"]["num_files_added"] == 1 and summary["vacuum"] is None
    assert summary["optimize_partitions"]["partitions"] == ["p=a"]
    assert summary["vacuum_approval"] is None and summary["checkpoint"]["version"] == v + 1
    assert (summary["version"], summary["latest_version"]) == (v, v + 1)
    assert summary["lease"]["version"] == v and summary["lease"]["released"]
    assert list_leases(str(root), include_expired=True) == []
    versions = _versions(root, v + 1)  # every version delta-rs reads, before VACUUM
    # time passes before the next runs: the checkpoint (at retention 0) no longer holds the replaced files'
    # tombstones, so they are untracked files, which VACUUM deletes only once older than its grace period
    # (1 h): they are now 2 hours old, the stray 5 hours
    for path in after_optimize:
        old = time.time() - (5 if path == stray else 2) * 3600
        os.utime(root / path, (old, old))
    after_optimize = _data_files(root)

    # run 2: apply_vacuum, the approval rejected: vacuum_apply skipped, nothing deleted, the run goes on
    conf = _conf(str(root), apply_vacuum=True)
    dr, responder = _run_answering(maintenance_dag, api_client, conf, approve_vacuum=choose("Reject"))
    states = task_states(dr.run_id)
    assert states["approve_vacuum"] == "success" and states["vacuum_apply"] == "skipped", states
    assert states["vacuum_not_applied"] == "skipped" and states["report"] == "success", states
    answered = responder.responses["approve_vacuum"]
    assert answered["chosen_options"] == ["Reject"] and answered["responded_by"]["name"]
    asked = responder.requests["approve_vacuum"]
    assert asked["options"] == ["Approve", "Reject"] and asked["defaults"] == ["Reject"]
    assert asked["params"]["retention_hours"]["value"] == 0  # the plan's retention, to confirm or raise
    plan = xcom_return(dr.run_id, "vacuum_plan")
    assert plan["num_files"] == len(garbage) and plan["lease_kept_files"] == 0  # the lease on v + 1 keeps nothing
    assert f"quarantine {plan['num_files']} files" in asked["subject"] and str(root) in asked["subject"]
    assert f"**{plan['num_files']}** ({plan['bytes']:,} bytes)" in asked["body"]
    assert plan["cutoff"] in asked["body"] and plan["result_uri"] in asked["body"]
    report = plan["result_uri"].removesuffix(".json") + ".html"  # the plan's HTML report, linked in the body
    page = report_page(DAG_ID, dr.run_id, "vacuum_plan")  # through the plugin, on the UI's origin
    assert f"[open the plan's report]({page})" in asked["body"] and Path(report).exists()
    assert _data_files(root) == after_optimize and DeltaTable(str(root)).version() == v + 1
    summary = xcom_return(dr.run_id, "report")
    assert summary["vacuum_approval"] == {
        "approved": False,
        "by": answered["responded_by"]["name"],
        "at": summary["vacuum_approval"]["at"],
        "timed_out": False,
    }
    assert (
        summary["vacuum"] is None
        and not summary["vacuum_purge"]["dry_run"]
        and summary["vacuum_purge"]["num_purged"] == 0
    )

    # run 3: approved with the retention raised from the plan's 0 to 3 hours: VACUUM plans again with 3 hours
    # and applies only the files of the plan shown still expired under it: every version of the last 3 hours
    # (all of them: written minutes ago) keeps its files, so only the stray (5 hours old) is moved into a
    # quarantine (nothing deleted); delta-rs reads the same rows at every version
    answer = choose("Approve", retention_hours=3)
    dr, responder = _run_answering(
        maintenance_dag, api_client, _conf(str(root), apply_vacuum=True), approve_vacuum=answer
    )
    states = task_states(dr.run_id)
    assert states["approve_vacuum"] == "success" and states["vacuum_apply"] == "success", states
    assert states["vacuum_purge"] == "success" and states["report"] == "success", states
    plan = xcom_return(dr.run_id, "vacuum_plan")
    shown = {f["path"] for f in json.loads(Path(plan["result_uri"]).read_text())["files"]}
    assert shown == garbage
    approval = xcom_return(dr.run_id, "approve_vacuum")
    assert approval["approved"] and approval["replanned"] and approval["retention_hours"] == 3
    assert approval["planned_retention_hours"] == 0 and approval["plan"] != plan["result_uri"]
    confirmed = json.loads(Path(approval["plan"]).read_text())
    assert confirmed["retention_ms"] == 3 * 3_600_000  # the retention VACUUM applied
    planned = {f["path"] for f in confirmed["files"]}
    assert planned == {stray} and approval["num_files"] == len(planned)
    applied = xcom_return(dr.run_id, "vacuum_apply")
    assert not applied["dry_run"] and applied["deleted"] == 0 and applied["num_dropped"] == 0
    moved = applied["quarantine"]
    assert moved["files"] == moved["moved"] == len(planned) and moved["state"] == "quarantined"
    assert moved["id"] == applied["quarantine_id"] and moved["bytes_copied"] == 0  # renames: nothing copied
    assert set(after_optimize) - set(_data_files(root)) == planned
    assert _quarantined(root, applied["quarantine_id"]) == planned  # moved, not deleted
    assert set(_data_files(root)) == set(after_optimize) - {stray}
    assert _rows(root) == rows and _versions(root, v + 1) == versions  # the 3 hours' versions all read
    history = [h["operation"] for h in DeltaTable(str(root)).history(2)]
    assert history == ["VACUUM END", "VACUUM START"]  # the audit commits, read by delta-rs
    summary = xcom_return(dr.run_id, "report")
    assert summary["latest_version"] == v + 3  # VACUUM START and END
    assert summary["vacuum_approval"]["approved"] and summary["vacuum"]["deleted"] == 0
    assert summary["vacuum_approval"]["retention_hours"] == 3
    assert summary["vacuum"]["quarantine"]["files"] == len(planned)
    assert summary["vacuum"]["quarantine_id"] == applied["quarantine_id"]
    assert summary["vacuum_approval"]["by"] == responder.responses["approve_vacuum"]["responded_by"]["name"]
    # vacuum_purge (apply_vacuum: not a dry run) leaves a quarantine younger than quarantine_retention_hours
    assert summary["vacuum_purge"] == {
        "dry_run": False, "num_purged": 0, "deleted_files": 0, "deleted_bytes": 0, "quarantine_ids": []
    }  # fmt: skip
    # a human undoes it: every file back at its path, every version reads in delta-rs as before
    undone = DeltaVacuumUndoOperator(
        task_id="vacuum_undo", table_uri=str(root), submit=False, quarantine_id=applied
    ).execute({"ti": None, "run_id": "manual__undo"})
    assert undone["state"] == "restored" and undone["moved"] == len(planned) and undone["num_missing"] == 0
    assert set(_data_files(root)) == set(after_optimize)
    after_undo = _versions(root, v + 3)  # and the two VACUUM versions read as the latest did
    assert after_undo == {**versions, v + 2: versions[v + 1], v + 3: versions[v + 1]}


@pytest.mark.airflow
def test_without_human_in_the_loop_operators_vacuum_is_never_applied(monkeypatch: pytest.MonkeyPatch) -> None:
    """Airflow before 3.1 has no `airflow.providers.standard.operators.hitl` (simulated: the import made to
    fail): the DAG still parses, `approve_vacuum` skips itself, so `vacuum_apply` never runs, and
    `choose_partitions`, asked to, compacts nothing (its task instance is a stand-in with the one XCom it reads)."""
    import sys

    from airflow.dag_processing.dagbag import DagBag

    try:
        from airflow.sdk.exceptions import AirflowSkipException
    except ImportError:  # Airflow 3.0
        from airflow.exceptions import AirflowSkipException

    monkeypatch.setitem(sys.modules, "airflow.providers.standard.operators.hitl", None)
    bag = DagBag(dag_folder=str(REPO / "dags" / "delta_table_maintenance.py"))
    assert bag.import_errors == {}
    dag = bag.dags[DAG_ID]
    approve = dag.get_task("approve_vacuum")
    assert type(approve).__name__ != "ApprovalOperator" and approve.downstream_task_ids == {"vacuum_apply"}
    assert dag.get_task("vacuum_apply").trigger_rule == "all_success"  # skipped with its only upstream
    with pytest.raises(AirflowSkipException, match=r"approval needs Airflow 3\.1"):
        approve.python_callable()
    choose = dag.get_task("choose_partitions")  # asked to choose, OPTIMIZE only plans
    assert type(choose).__name__ != "PartitionChoiceOperator" and choose.downstream_task_ids == {"optimize"}
    ti = type("TI", (), {"xcom_pull": lambda self, task_ids: {"apply": True}})()
    asked = choose.python_callable(ti=ti, params={"optimize_ask_partitions": True})
    assert asked == {"asked": False, "compact": False, "where": None, "partitions": None}
    assert choose.python_callable(ti=ti, params={"optimize_ask_partitions": False})["compact"] is True


@pytest.mark.airflow
@pytest.mark.slow
def test_an_unanswered_partition_choice_and_a_shorter_retention_change_nothing(
    maintenance_dag, api_client, tmp_path: Path
) -> None:
    """The partition choice not answered within its 4 hours (the scheduler's timeout sweep applies the
    preselection): that compacts nothing, the preselected partitions are not an answer. The VACUUM plan,
    made at a 2 hour retention, approved with 1 hour: refused (it would delete files that were not shown),
    vacuum_apply skipped, nothing moved, the reason in the report. (A person's Reject is in the test above;
    the approval's timeout answers Reject, its default.)"""
    root = tmp_path / "table"
    _small_file_table(root)
    stray = root / "p=a" / "stray-from-a-failed-job.parquet"
    os.utime(stray, (time.time() - 5 * 3600,) * 2)  # expired at 2 hours: the plan has a file to approve
    version, files = DeltaTable(str(root)).version(), _data_files(root)
    conf = _conf(str(root), optimize_ask_partitions=True, apply_vacuum=True, retention_hours=2)
    answers = {"choose_partitions": TIMEOUT, "approve_vacuum": choose("Approve", retention_hours=1)}
    dr, responder = _run_answering(maintenance_dag, api_client, conf, **answers)
    states = task_states(dr.run_id)
    assert states["choose_partitions"] == states["approve_vacuum"] == states["report"] == "success", states
    assert states["vacuum_apply"] == "skipped", states
    assert set(responder.requests) == {"choose_partitions", "approve_vacuum"}
    assert set(responder.responses) == {"approve_vacuum"}  # the partition choice was left to time out
    chosen = xcom_return(dr.run_id, "choose_partitions")
    assert chosen["asked"] and chosen["timed_out"] and not chosen["compact"] and chosen["by"] is None
    assert chosen["where"] is None and chosen["partitions"] == []
    optimized = xcom_return(dr.run_id, "optimize")
    assert optimized["dry_run"] and optimized["version"] is None and optimized["num_files_removed"] == 10
    assert responder.requests["approve_vacuum"]["params"]["retention_hours"]["value"] == 2
    assert xcom_return(dr.run_id, "vacuum_plan")["num_files"] == 1  # the stray
    assert DeltaTable(str(root)).version() == version and _data_files(root) == files  # nothing changed
    summary = xcom_return(dr.run_id, "report")
    refused = summary["vacuum_approval"]  # approve_vacuum's XCom `answer`
    assert refused["approved"] is False and refused["retention_hours"] == 1 and "plan" not in refused
    assert "shorter than the plan's 2 h" in refused["refused"] and not refused["timed_out"]
    assert summary["vacuum"] is None
    assert summary["optimize_partitions"]["timed_out"] and summary["optimize"]["dry_run"]
