"""`deltalog` progress: drawn on stderr when it is a terminal (a real pty here), nothing but the result into
pipes; the library's progress callback sees VACUUM's phases without changing the plan; `--json` is the
compact, streamed `json.dumps` text. Real processes and tables, no mocks."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from airflow_delta_provider.cli import main
from airflow_delta_provider.cli.progress import progress_display
from airflow_delta_provider.cli.text import JSON_BATCH, print_json
from airflow_delta_provider.delta.maintenance.quarantine import purge_quarantines
from airflow_delta_provider.delta.maintenance.repair import repair
from airflow_delta_provider.delta.maintenance.vacuum import vacuum
from airflow_delta_provider.delta.progress import PROGRESS, progress_to

ACTIVE, STRAYS = 50, 400
OLD_S = 40 * 86_400  # strays and the commit 40 days old: past the 7-day retention and the 1-hour grace


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> Path:
    """A table of `ACTIVE` zero-byte data files in its one commit, and `STRAYS` untracked 40-day-old files
    beside them (what VACUUM plans to delete), in 5 partitions."""
    root = tmp_path_factory.mktemp("progress") / "table"
    (root / "_delta_log").mkdir(parents=True)
    old_ms = int((time.time() - OLD_S) * 1000)
    schema = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]}
    schema["fields"].append({"name": "part", "type": "string", "nullable": True, "metadata": {}})
    lines = [
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {
            "metaData": {
                "id": "00000000-0000-4000-8000-000000000001",
                "format": {"provider": "parquet", "options": {}},
                "schemaString": json.dumps(schema),
                "partitionColumns": ["part"],
                "configuration": {},
                "createdTime": old_ms,
            }
        },
    ]
    for i in range(ACTIVE + STRAYS):
        path = f"part={i % 5}/part-{i:05d}.parquet"
        (root / path).parent.mkdir(exist_ok=True)
        (root / path).touch()
        if i < ACTIVE:
            add = {"path": path, "partitionValues": {"part": str(i % 5)}, "size": 0}
            lines.append({"add": {**add, "modificationTime": old_ms, "dataChange": True}})
        else:
            os.utime(root / path, (time.time() - OLD_S, time.time() - OLD_S))
    lines.append({"commitInfo": {"timestamp": old_ms, "operation": "WRITE"}})
    commit = root / "_delta_log" / f"{0:020d}.json"
    commit.write_text("".join(json.dumps(line) + "\n" for line in lines))
    os.utime(commit, (time.time() - OLD_S, time.time() - OLD_S))
    return root


def _deltalog(table: Path, *extra: str, stderr_tty: bool) -> tuple[int, str, bytes]:
    """`python -m airflow_delta_provider.cli vacuum TABLE ...` with stdout a pipe and stderr a pty (or a pipe):
    the exit code, stdout, and every byte written to stderr."""
    env = {k: v for k, v in os.environ.items() if k != "DELTALOG_NO_PROGRESS"}
    env.update(TERM="xterm-256color", COLUMNS="160", LINES="40")
    argv = [sys.executable, "-m", "airflow_delta_provider.cli", "vacuum", str(table), *extra]
    if not stderr_tty:
        proc = subprocess.run(argv, capture_output=True, env=env, timeout=120)
        return proc.returncode, proc.stdout.decode(), proc.stderr
    leader, follower = os.openpty()
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=follower, env=env)
        os.close(follower)
        follower = -1
        seen = bytearray()
        while True:  # read the terminal until the child is gone (EIO once no process holds it open)
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
        out = proc.stdout.read().decode()
        proc.wait(timeout=120)
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)
    return proc.returncode, out, bytes(seen)


def test_progress_on_a_terminal_and_nothing_into_a_pipe(table):
    code, out, err = _deltalog(table, "--json", stderr_tty=True)
    assert code == 0, err.decode(errors="replace")
    assert b"VACUUM: listing the table" in err  # the library's phase, drawn by rich on the terminal
    assert b"vacuum" in err and b"\x1b[" in err  # the command's own spinner line, with terminal controls
    on_tty = json.loads(out)  # stdout is the result alone, one compact line
    assert out.count("\n") == 1 and ": " not in out[:200]
    code, piped_out, piped_err = _deltalog(table, "--json", stderr_tty=False)
    assert (code, piped_err) == (0, b"")  # into a pipe: no progress, nothing on stderr
    piped = json.loads(piped_out)
    assert sorted(f["path"] for f in piped["files"]) == sorted(f["path"] for f in on_tty["files"])
    assert piped["num_files"] == STRAYS
    out_text, err_text = io.StringIO(), io.StringIO()  # human text, in this process: the result only
    assert main(["vacuum", str(table)], out_text, err_text) == 0 and err_text.getvalue() == ""
    text = out_text.getvalue()
    assert text.startswith("vacuum dry run (full)") and f"would delete {STRAYS} files" in text
    assert text.count("\n") == STRAYS + 1


def test_library_reports_phases_without_changing_the_plan(table):
    seen: list[tuple[str, int, int | None]] = []
    quiet = vacuum(str(table))
    told = vacuum(str(table), progress=lambda *event: seen.append(event))
    assert [f.path for f in told.plan.files] == [f.path for f in quiet.plan.files]
    listing = "VACUUM: listing the table"
    dirs = 1 + 5  # the walk's directories: the root and the 5 partitions (`_delta_log` is hidden)
    walked = [(listing, n, None) for n in range(1, dirs)] + [(listing, dirs, dirs)]
    assert seen == [(listing, 0, None), *walked, (listing, 1, 1)]  # the walk's, inside vacuum's own
    assert PROGRESS.get() is None  # the call's callback is gone with the call
    context: list[tuple[str, int, int | None]] = []
    token = PROGRESS.set(lambda *event: context.append(event))  # what deltalog sets at a terminal
    try:
        vacuum(str(table), mode="lite")
    finally:
        PROGRESS.reset(token)
    assert [phase for phase, _, _ in context][:2] == ["VACUUM: reading the log's tombstones"] * 2


def test_apply_reports_revalidation_and_deletes(table, tmp_path):
    copy = tmp_path / "table"
    shutil.copytree(table, copy)  # copy2: the strays keep their old mtimes
    seen: list[tuple[str, int, int | None]] = []
    done = vacuum(str(copy), dry_run=False, progress=lambda *event: seen.append(event))
    assert done.deleted == STRAYS
    assert [event for event in seen if event[0] != "VACUUM: listing the table"] == [
        ("VACUUM: re-validating the plan", 0, STRAYS),
        ("VACUUM: re-validating the plan", STRAYS, STRAYS),
        ("VACUUM: deleting files", 0, STRAYS),
        ("VACUUM: deleting files", STRAYS, STRAYS),  # delete_relative's one batch (1,000 a batch)
        ("VACUUM: deleting files", STRAYS, STRAYS),  # vacuum's own end of the phase
    ]


def test_lake_scan_and_checkpoint_report_phases(table, tmp_path):
    """`deltalog lake scan` and `deltalog checkpoint` run in this process (stderr not a terminal, so deltalog
    sets no callback of its own) under a collecting context callback, as `deltalog` sets one at a terminal."""
    events: list[tuple[str, int, int | None]] = []
    token = PROGRESS.set(lambda *event: events.append(event))
    try:
        out, err = io.StringIO(), io.StringIO()
        assert main(["lake", "scan", str(table.parent), "--json"], out, err) == 0, err.getvalue()
        scan_events = list(events)
        events.clear()
        small = tmp_path / "small"
        (small / "_delta_log").mkdir(parents=True)
        commit = [
            {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
            {"metaData": {"id": "m", "format": {"provider": "parquet", "options": {}}, "partitionColumns": []}},
            {"add": {"path": "a.parquet", "partitionValues": {}, "size": 1, "modificationTime": 1, "dataChange": True}},
        ]
        commit[1]["metaData"]["schemaString"] = json.dumps({"type": "struct", "fields": []})
        (small / "_delta_log" / f"{0:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in commit))
        assert main(["checkpoint", str(small), "--json"], io.StringIO(), err) == 0, err.getvalue()
    finally:
        PROGRESS.reset(token)
    assert [t["table"].rstrip("/").endswith("/table") for t in json.loads(out.getvalue())["tables"]] == [True]
    # discovery: the parent and the table listed (the table is not walked into), then the scan's one table
    assert scan_events == [
        ("LAKE DISCOVER: listing folders", 1, None),
        ("LAKE DISCOVER: listing folders", 2, None),
        ("LAKE DISCOVER: listing folders", 2, 2),
        ("LAKE SCAN: reading the tables' logs", 1, 1),
    ]
    assert events == [
        ("CHECKPOINT: writing the checkpoint", 0, None),
        ("CHECKPOINT: writing the checkpoint", 1, 1),
        ("CHECKPOINT: updating _last_checkpoint", 0, 1),
        ("CHECKPOINT: updating _last_checkpoint", 1, 1),
    ]
    assert (small / "_delta_log" / f"{0:020d}.checkpoint.parquet").exists()


def test_repair_and_quarantine_purge_report_without_changing_their_answers(table, tmp_path):
    copy = tmp_path / "table"
    shutil.copytree(table, copy)
    (copy / "part=0" / "part-00000.parquet").unlink()  # an active file gone: what repair finds
    quiet = repair(str(copy))
    events: list[tuple[str, int, int | None]] = []
    with progress_to(lambda *event: events.append(event)):
        told = repair(str(copy))
    assert told.to_dict() == quiet.to_dict() and told.files_removed == ["part=0/part-00000.parquet"]
    assert events == [
        ("REPAIR: checking the active files", 0, ACTIVE),
        ("REPAIR: checking the active files", ACTIVE, ACTIVE),
    ]
    assert vacuum(str(copy), quarantine=True, dry_run=False).quarantine_id is not None
    events.clear()
    with progress_to(lambda *event: events.append(event)):
        purged = purge_quarantines(str(copy), older_than="0")
    assert len(purged.purged) == 1 and purged.purged[0]["files"] == STRAYS
    assert events == [
        ("PURGE QUARANTINES: deleting quarantines", 0, 1),
        ("PURGE QUARANTINES: deleting quarantines", 1, 1),
    ]


def test_json_is_compact_and_equal_to_json_dumps():
    big = {
        "files": [{"path": f"p={i % 3}/f{i}", "size": i, "dv": None} for i in range(3 * JSON_BATCH + 7)],
        "partitions": {str(i): {"files": i} for i in range(2 * JSON_BATCH + 1)},
        "nested": {"a": [1.5, True, None], 7: "seven", "when": time.gmtime(0)},
        "empty": [{}, []],
    }
    out = io.StringIO()
    print_json(big, out)
    assert out.getvalue() == json.dumps(big, separators=(",", ":"), default=str) + "\n"


def test_display_in_this_process_on_a_pty(monkeypatch):
    """`progress_display` on a real terminal: the last counts of a phase reported per file are drawn, and the
    callback is gone afterwards; on a StringIO (not a terminal) nothing is set or drawn."""
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("COLUMNS", "160")
    monkeypatch.delenv("DELTALOG_NO_PROGRESS", raising=False)
    leader, follower = os.openpty()
    seen = bytearray()

    def drain() -> None:
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                return
            if not chunk:
                return
            seen.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        with open(follower, "w", closefd=True) as tty, progress_display(tty, "work"):
            report = PROGRESS.get()
            assert report is not None
            for i in range(1, 20_001):  # one call per file: throttled, the last one drawn
                report("VACUUM: deleting files", i, 20_000)
    finally:
        time.sleep(0.2)  # let the reader take what the terminal holds
        os.close(leader)
        reader.join(timeout=5)
    assert PROGRESS.get() is None
    assert b"VACUUM: deleting files 20,000/20,000" in seen and b"work" in seen
    with progress_display(io.StringIO(), "work"):
        assert PROGRESS.get() is None
