"""The "Delta report" link opens in a browser through Airflow's own API server (the provider plugin).

Real components: `airflow db migrate`, `airflow dags test` of a DAG with eight operators that write HTML
reports (snapshot, tombstones, VACUUM plan, OPTIMIZE, checkpoint, log cleanup, RESTORE and repair plans;
jobs in the worker process), then a real `airflow api-server` on 127.0.0.1 with the simple auth manager
(passwords from a file) and a headless Chromium carrying the UI's token cookie. Each report kind answers 200
to a logged-in user, renders (its charts are inline SVG, no image missing, no console error) and is
screenshotted; without a token the answer is 401, with a forged one 403; the link Airflow stored for the task
is the plugin's page. The lake health pages (`/delta/health`, `/delta/health/table`) read a maintenance
history written by the real autopilot path (`delta.lake` scan, plan, run_table, record_runs; two runs over
a delta-rs table), configured as `[delta] history_uri`, and are listed as the UI's external view.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from urllib.parse import quote

import pyarrow as pa
import pytest
from support.browser import find_chromium

pytest.importorskip("airflow")
from deltalake import DeltaTable, write_deltalake

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

DAG_ID = "delta_report_plugin_test"
REPORT_TASKS = (
    "replay",
    "tombstones",
    "vacuum_plan",
    "optimize",
    "checkpoint",
    "log_cleanup",
    "restore_plan",
    "repair_plan",
)
DAG_FILE = """
import pendulum
from airflow.sdk import dag

from airflow_delta_provider.operators.delta import (
    DeltaCheckpointOperator, DeltaLogCleanupOperator, DeltaOptimizeOperator, DeltaRepairOperator,
    DeltaRestoreOperator, DeltaVacuumOperator, SnapshotReplayOperator, TombstoneReportOperator,
)

COMMON = dict(table_uri={table!r}, submit=False, result_uri={results!r})


@dag(dag_id={dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False)
def reports():
    replay = SnapshotReplayOperator(task_id="replay", checks={{"min_files": 1}}, **COMMON)
    tombstones = TombstoneReportOperator(task_id="tombstones", retention_hours=0, **COMMON)
    plan = DeltaVacuumOperator(task_id="vacuum_plan", dry_run=True, retention_hours=0,
                               enforce_retention_duration=False, untracked_grace_hours=0, **COMMON)
    optimize = DeltaOptimizeOperator(task_id="optimize", **COMMON)
    checkpoint = DeltaCheckpointOperator(task_id="checkpoint", **COMMON)
    cleanup = DeltaLogCleanupOperator(task_id="log_cleanup", retention_hours=0, **COMMON)
    restore = DeltaRestoreOperator(task_id="restore_plan", version=1, **COMMON)
    repair = DeltaRepairOperator(task_id="repair_plan", **COMMON)
    replay >> tombstones >> plan >> optimize >> checkpoint >> cleanup >> restore >> repair


reports()
"""


def _write_lake_history(root) -> tuple[str, str]:
    """(history URI, table URI): two autopilot runs over a small delta-rs table, recorded by `record_runs`."""
    from airflow_delta_provider.delta.lake import parse_policy, plan, record_runs, run_table, scan

    table = root / "lake" / "events"
    history = f"file://{root / 'lake' / '_maintenance_history'}"
    policy = parse_policy({"defaults": {"min_small_files": 3, "checkpoint_interval": 4}})
    for run_id in ("r1", "r2"):
        for i in range(4):
            write_deltalake(str(table), pa.table({"p": ["a"] * 2, "x": [i, i]}), partition_by=["p"], mode="append")
        uri = f"file://{table}"
        rows = run_table(uri, [t.to_dict() for t in plan(scan([uri], policy=policy).healths).tasks])
        record_runs(history, [{**r, "run_id": run_id, "dag_id": "delta_lake_autopilot"} for r in rows])
    return history, f"file://{table}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _http(url: str, token: str | None = None, data: dict | None = None) -> tuple[int, bytes]:
    headers = {"Content-Type": "application/json"} if data is not None else {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    body = None if data is None else json.dumps(data).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, body, headers), timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()
    except (urllib.error.URLError, ConnectionError) as err:  # not listening yet
        return 0, str(err).encode()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("plugin")
    table = root / "table"
    for i in range(3):
        batch = pa.table({"id": list(range(i * 10, i * 10 + 10)), "part": [f"p{i % 2}"] * 10})
        write_deltalake(str(table), batch, partition_by=["part"], mode="append")
    DeltaTable(str(table)).delete("id < 5")  # a tombstone, and a file VACUUM may delete
    dags = root / "dags"
    dags.mkdir()
    (dags / "reports.py").write_text(DAG_FILE.format(table=str(table), results=f"{root / 'results'}/", dag_id=DAG_ID))
    history, _ = _write_lake_history(root)
    passwords = root / "passwords.json"
    passwords.write_text(json.dumps({"admin": "admin-pw", "viewer": "viewer-pw"}))
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(
        AIRFLOW_HOME=str(root / "home"),
        AIRFLOW__CORE__DAGS_FOLDER=str(dags),
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{root / 'airflow.db'}",
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="admin:admin,viewer:viewer",
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(passwords),
        AIRFLOW__API__HOST="127.0.0.1",
        AIRFLOW__API__PORT=str(port),
        AIRFLOW__API__WORKERS="1",
        AIRFLOW__API_AUTH__JWT_SECRET="a-report-plugin-test-only-secret-" + "x" * 40,
        AIRFLOW__DELTA__HISTORY_URI=history,
    )
    airflow = [sys.executable, "-m", "airflow"]
    subprocess.run([*airflow, "db", "migrate"], env=env, check=True, capture_output=True)
    ran = subprocess.run([*airflow, "dags", "test", DAG_ID], env=env, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stdout[-4000:] + ran.stderr[-4000:]
    log = open(root / "api-server.log", "wb")
    proc = subprocess.Popen(
        [*airflow, "api-server"], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    log.close()
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while _http(f"{base}/api/v2/monitor/health")[0] != 200:
            assert proc.poll() is None, (root / "api-server.log").read_text()[-4000:]
            assert time.monotonic() < deadline, "api-server did not answer within 120 s"
            time.sleep(0.5)
        status, body = _http(f"{base}/auth/token", data={"username": "viewer", "password": "viewer-pw"})
        assert status in (200, 201), body
        run_id = json.loads(_http(f"{base}/api/v2/dags/{DAG_ID}/dagRuns", json.loads(body)["access_token"])[1])[
            "dag_runs"
        ][0]["dag_run_id"]
        yield base, json.loads(body)["access_token"], run_id, root
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def test_the_stored_link_is_the_plugin_page(served):
    base, token, run_id, _ = served
    from urllib.parse import quote

    for task_id in REPORT_TASKS:
        status, body = _http(
            f"{base}/api/v2/dags/{DAG_ID}/dagRuns/{quote(run_id, safe='')}/taskInstances/{task_id}/links", token
        )
        assert status == 200, body
        links = json.loads(body)["extra_links"]
        link = links["Delta report"]
        assert link == f"/delta/reports/{DAG_ID}/{quote(run_id, safe='')}/{task_id}", link


def test_each_report_opens_for_a_logged_in_user_and_renders(served):
    base, token, run_id, root = served
    if find_chromium() is None:
        pytest.skip("no Chromium (apt-get install chromium-headless-shell; .ci/run installs it)")
    from urllib.parse import quote

    from support.browser import Browser

    images = "[...document.images].filter(i => !(i.complete && i.naturalWidth > 0)).length"
    inspect = f"({{missing: {images}, svgs: document.querySelectorAll('svg').length, title: document.title}})"
    with Browser() as browser:
        for task_id in REPORT_TASKS:
            url = f"{base}/delta/reports/{DAG_ID}/{quote(run_id, safe='')}/{task_id}"
            shot = root / "screenshots" / f"{task_id}.png"
            page = browser.load(
                url, inspect=inspect, screenshot=shot, cookies=[{"name": "_token", "value": token, "url": base}]
            )
            assert page.status == 200, (task_id, page.status)
            assert page.console_errors == [], (task_id, page.console_errors)
            assert page.dom["missing"] == 0 and page.dom["svgs"] >= 1, (task_id, page.dom)
            assert page.dom["title"], task_id
            assert shot.stat().st_size > 10_000, f"{task_id}: a blank screenshot?"
    with Browser() as fresh:  # a browser that never logged in: no token cookie
        anonymous = fresh.load(f"{base}/delta/reports/{DAG_ID}/{quote(run_id, safe='')}/replay")
        assert anonymous.status == 401


def test_no_report_without_a_valid_token_and_nothing_outside_the_result(served):
    base, token, run_id, _ = served
    from urllib.parse import quote

    page = f"{base}/delta/reports/{DAG_ID}/{quote(run_id, safe='')}/replay"
    assert _http(page)[0] == 401
    assert _http(page, token="not-a-token")[0] == 403
    assert _http(page, token)[0] == 200
    assert _http(page + "?kind=json", token)[0] == 200
    assert _http(page + "?kind=../../etc/passwd", token)[0] == 422  # only html, md, json
    assert _http(f"{base}/delta/reports/{DAG_ID}/{quote(run_id, safe='')}/nope", token)[0] == 404


def test_the_health_pages_open_for_a_logged_in_user_and_render(served):
    base, token, _, root = served
    if find_chromium() is None:
        pytest.skip("no Chromium (apt-get install chromium-headless-shell; .ci/run installs it)")
    from PIL import Image
    from support.browser import Browser

    images = "[...document.images].filter(i => !(i.complete && i.naturalWidth > 0)).length"
    link = "(document.querySelector('a[href^=\"health/table\"]') || {}).href"
    inspect = (
        f"({{missing: {images}, svgs: document.querySelectorAll('svg').length, title: document.title, link: {link}}})"
    )
    cookies = [{"name": "_token", "value": token, "url": base}]
    with Browser() as browser:
        lake = browser.load(
            f"{base}/delta/health", inspect=inspect, screenshot=root / "shots" / "lake.png", cookies=cookies
        )
        assert lake.status == 200 and lake.console_errors == [], (lake.status, lake.console_errors)
        assert lake.dom["missing"] == 0 and lake.dom["svgs"] == 3 and lake.dom["title"] == "Lake health", lake.dom
        assert lake.dom["link"] == f"{base}/delta/health/table?uri=" + quote(f"file://{root}/lake/events", safe="")
        table = browser.load(
            lake.dom["link"], inspect=inspect, screenshot=root / "shots" / "table.png", cookies=cookies
        )
        assert table.status == 200 and table.console_errors == [], (table.status, table.console_errors)
        assert table.dom["missing"] == 0 and table.dom["svgs"] == 2, table.dom
        assert table.dom["title"] == f"Table health: file://{root}/lake/events"
    for shot in ("lake", "table"):  # not blank: the charts' colours cover part of the page
        with Image.open(root / "shots" / f"{shot}.png") as img:
            colours = img.convert("RGB").getcolors(maxcolors=1 << 20) or []
        assert len(colours) > 50 and sum(n for n, c in colours if c != (255, 255, 255)) > 0.05 * img.width * img.height
    # 401 without a token: the next test (over HTTP; a second browser would only add its start-up)


def test_the_health_pages_need_a_token_and_name_only_tables_of_the_history(served):
    base, token, _, root = served
    events = quote(f"file://{root}/lake/events", safe="")
    for page in (f"{base}/delta/health", f"{base}/delta/health/table?uri={events}"):
        assert _http(page)[0] == 401
        assert _http(page, token="not-a-token")[0] == 403
    status, body = _http(f"{base}/delta/health?kind=json", token)
    assert status == 200
    report = json.loads(body)
    assert [r["run_id"] for r in report["runs"]] == ["r1", "r2"] and report["totals"]["tables"] == 1
    status, body = _http(f"{base}/delta/health/table?uri={events}&kind=md", token)
    assert status == 200 and body.startswith(b"# Table health: file://")
    elsewhere = quote(f"file://{root}/table", safe="")  # a Delta table, but not one the history names
    assert _http(f"{base}/delta/health/table?uri={elsewhere}", token)[0] == 404
    assert _http(f"{base}/delta/health?kind=svg", token)[0] == 422


def test_the_health_page_is_in_the_ui_menu(served):
    base, token, _, _ = served
    status, body = _http(f"{base}/api/v2/plugins", token)
    assert status == 200, body
    (plugin,) = [p for p in json.loads(body)["plugins"] if p["name"] == "delta_reports"]
    (view,) = plugin["external_views"]
    assert view["href"] == "/delta/health" and view["url_route"] == "delta-lake-health" and view["category"] == "browse"


def test_the_ui_shows_the_health_page_in_its_frame(served):
    base, token, _, root = served
    if find_chromium() is None:
        pytest.skip("no Chromium (apt-get install chromium-headless-shell; .ci/run installs it)")
    from support.browser import Browser

    frame = "document.querySelector('iframe')"
    ready = f"{frame} && {frame}.contentDocument && {frame}.contentDocument.querySelectorAll('svg').length >= 3"
    inspect = f"({{src: {frame}.src, title: {frame}.contentDocument.title, menu: document.body.innerText}})"
    with Browser() as browser:
        page = browser.load(
            f"{base}/plugin/delta-lake-health",
            wait_for=ready,
            inspect=inspect,
            screenshot=root / "shots" / "ui.png",
            cookies=[{"name": "_token", "value": token, "url": base}],
        )
    assert page.status == 200
    assert page.dom["src"] == f"{base}/delta/health" and page.dom["title"] == "Lake health", page.dom


def test_the_history_comes_from_airflow_config_else_the_autopilot_dags_variable(monkeypatch):
    from airflow_delta_provider.plugin import HISTORY_ENV, health_settings

    for name in (
        "AIRFLOW__DELTA__HISTORY_URI",
        "AIRFLOW__DELTA__HISTORY_STORAGE_CONN_ID",
        "AIRFLOW__DELTA__HISTORY_DAG_ID",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv(HISTORY_ENV, raising=False)
    assert health_settings() == (None, None, "delta_lake_autopilot")
    monkeypatch.setenv(HISTORY_ENV, "s3://lake/_maintenance_history")  # what dags/delta_lake_autopilot.py reads
    assert health_settings()[0] == "s3://lake/_maintenance_history"
    monkeypatch.setenv("AIRFLOW__DELTA__HISTORY_URI", "s3://ops/history")
    monkeypatch.setenv("AIRFLOW__DELTA__HISTORY_STORAGE_CONN_ID", "aws_ops")
    monkeypatch.setenv("AIRFLOW__DELTA__HISTORY_DAG_ID", "ops_autopilot")
    assert health_settings() == ("s3://ops/history", "aws_ops", "ops_autopilot")
