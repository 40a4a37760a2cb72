"""Issue 20, "Bad input": every defect it lists has a test here (the `--where` grammar's are in test_where.py).

Bad arguments give a typed error (`InvalidArgumentError`, a `DeltaError` and a `ValueError`) naming the
argument, in the Python API and in the CLI (one line, exit code 2, never a traceback); a metadata action
with a broken `schemaString` is refused at load; commit times follow one rule everywhere; `update()` has a
time-based staleness limit.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import CORPUS, copy_table

from airflow_delta_provider.cli import EXIT_ERROR, EXIT_NOT_FOUND, EXIT_USAGE, main
from airflow_delta_provider.commands.request import Request
from airflow_delta_provider.delta import DeltaError, DeltaLog, InvalidArgumentError, MalformedCommitError
from airflow_delta_provider.delta.errors import PredicateSyntaxError, TableNotFoundError
from airflow_delta_provider.delta.protocol.actions import Metadata
from airflow_delta_provider.testing import DeltaLogBuilder

DEMO_SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "sample_table.py"
SIMPLE = CORPUS / "delta-rs" / "simple_table"


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> str:
    """A delta-rs table partitioned by `region` (string) with data columns `id` (long) and `amount`."""
    path = tmp_path_factory.mktemp("bad-input") / "sample"
    subprocess.run([sys.executable, str(DEMO_SCRIPT), str(path)], check=True, capture_output=True)
    return str(path)


# -- the CLI: one typed line, exit code 2, naming the option ----------------------------------------------


@pytest.mark.parametrize(
    ("argv", "error", "named"),
    [
        (["tombstones", "{T}", "--retention-hours", "inf"], "InvalidArgumentError", "--retention-hours"),
        (["tombstones", "{T}", "--retention-hours", "nan"], "InvalidArgumentError", "--retention-hours"),
        (["tombstones", "{T}", "--retention-hours", "-1"], "InvalidArgumentError", "--retention-hours"),
        (["tombstones", "{T}", "--retention-hours", "1e300"], "InvalidArgumentError", "--retention-hours"),
        (["changes", "{T}", "--from", "-1"], "InvalidArgumentError", "--from"),
        (["history", "{T}", "--limit", "-1"], "InvalidArgumentError", "--limit"),
        (["snapshot", "{T}", "--version", "-3"], "InvalidArgumentError", "--version"),
        (["snapshot", "{T}", "--version", "1.5"], "InvalidArgumentError", "--version"),
        (["snapshot", "{T}", "--timestamp", "nan"], "InvalidArgumentError", "--timestamp"),
        (["version", "foo://bucket/table"], "InvalidArgumentError", "Protocol not known: foo"),
        (["files", "{T}", "--where", "region = 'eu' AND"], "PredicateSyntaxError", "position 18"),
        (["files", "{T}", "--where", "region = 'eu' OR"], "PredicateSyntaxError", "position 17"),
        (["files", "{T}", "--where", "region ~ 'eu'"], "PredicateSyntaxError", "position 8"),
        (["files", "{T}", "--where", "id = 'abc'"], "PredicateSyntaxError", "column 'id' at position 1"),
        (["files", "{T}", "--where", "nope = 1"], "PredicateSyntaxError", "unknown column 'nope'"),
        (["files", "{T}", "--where", ""], None, None),  # an empty predicate filters nothing
        (["optimize", "{T}", "--target-size-mb", "0"], "InvalidArgumentError", "--target-size-mb"),  # issue 28
        (["vacuum", "{T}", "--mode", "bogus"], "InvalidArgumentError", "--mode: must be one of full, lite"),
    ],
)
def test_bad_cli_input_is_one_typed_line_with_exit_code_2(sample, argv, error, named):
    code, out, err = run(*(a.replace("{T}", sample) for a in argv))
    if error is None:
        assert code == 0 and err == ""
        return
    assert (code, out) == (EXIT_USAGE, ""), err
    assert err.count("\n") == 1 and err.startswith(f"deltalog: error: {error}: ") and named in err


def test_no_traceback_from_a_real_process(sample):
    proc = subprocess.run(
        [sys.executable, "-m", "airflow_delta_provider", "tombstones", sample, "--retention-hours", "inf"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == EXIT_USAGE and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("deltalog: error: InvalidArgumentError: argument --retention-hours")


def test_history_on_an_empty_log_is_table_not_found_like_snapshot(tmp_path):
    (tmp_path / "_delta_log").mkdir()
    for command in ("history", "snapshot", "version", "files"):
        code, out, err = run(command, str(tmp_path))
        assert (code, out) == (EXIT_NOT_FOUND, ""), command
        assert err.startswith("deltalog: error: TableNotFoundError: No Delta table"), command
    with pytest.raises(TableNotFoundError):
        DeltaLog(str(tmp_path)).history()


def test_a_data_column_filter_never_talks_about_partition_values(sample):
    snap = DeltaLog(sample).update()
    for call in (lambda: snap.files("id = 'abc'"), lambda: snap.files(data_filters=[("id", "=", "abc")])):
        with pytest.raises(PredicateSyntaxError) as err:
            call()
        assert "partition" not in str(err.value).lower() and "'abc' is not a valid long value for column 'id'" in str(
            err.value
        )


# -- the Python API: every bad argument is an InvalidArgumentError naming it -------------------------------

Call = Callable[[DeltaLog, Any], Any]
BAD_CALLS: list[tuple[str, str, Call]] = [
    ("version as text", "version", lambda log, s: log.snapshot_at(version="2")),
    ("version True", "version", lambda log, s: log.snapshot_at(version=True)),
    ("version False", "version", lambda log, s: log.snapshot_at(version=False)),
    ("version float", "version", lambda log, s: log.snapshot_at(version=1.0)),
    ("version negative", "version", lambda log, s: log.snapshot_at(version=-1)),
    ("neither version nor timestamp", "version", lambda log, s: log.snapshot_at()),
    ("version and timestamp", "version", lambda log, s: log.snapshot_at(version=1, timestamp=0)),
    ("timestamp inf", "timestamp", lambda log, s: log.snapshot_at(timestamp=float("inf"))),
    ("timestamp -inf", "timestamp", lambda log, s: log.snapshot_at(timestamp=float("-inf"))),
    ("timestamp nan", "timestamp", lambda log, s: log.snapshot_at(timestamp=float("nan"))),
    ("timestamp huge", "timestamp", lambda log, s: log.snapshot_at(timestamp=10**30)),
    ("timestamp True", "timestamp", lambda log, s: log.snapshot_at(timestamp=True)),
    ("timestamp list", "timestamp", lambda log, s: log.snapshot_at(timestamp=[1])),
    ("timestamp text", "timestamp", lambda log, s: log.snapshot_at(timestamp="yesterday")),
    ("can_return_last_commit", "can_return_last_commit", lambda log, s: log.snapshot_at(0, can_return_last_commit=1)),
    ("get_changes text", "start_version", lambda log, s: log.get_changes("a")),
    ("get_changes negative", "start_version", lambda log, s: log.get_changes(-1)),
    ("get_changes True", "start_version", lambda log, s: log.get_changes(True)),
    ("fail_on_data_loss", "fail_on_data_loss", lambda log, s: log.get_changes(0, fail_on_data_loss="no")),
    ("history negative", "limit", lambda log, s: log.history(limit=-1)),
    ("history text", "limit", lambda log, s: log.history(limit="3")),
    ("history True", "limit", lambda log, s: log.history(limit=True)),
    ("log_segment text", "version", lambda log, s: log.log_segment("1")),
    ("commit_summary negative", "version", lambda log, s: log.commit_summary(-1)),
    ("commit_summary text", "version", lambda log, s: log.commit_summary("0")),
    ("staleness flag", "staleness_acceptable", lambda log, s: log.update(staleness_acceptable="yes")),
    ("staleness negative", "staleness_limit_ms", lambda log, s: log.update(True, staleness_limit_ms=-1)),
    ("staleness nan", "staleness_limit_ms", lambda log, s: log.update(True, staleness_limit_ms=float("nan"))),
    ("table_uri int", "table_uri", lambda log, s: DeltaLog(123)),  # type: ignore[arg-type]
    ("table_uri None", "table_uri", lambda log, s: DeltaLog.for_table(None)),
    ("unknown scheme", "table_uri", lambda log, s: DeltaLog("foo://bucket/table")),
    ("storage_options list", "storage_options", lambda log, s: DeltaLog(str(SIMPLE), storage_options=[("a", 1)])),
    ("retention inf", "retention_hours", lambda log, s: s.tombstones(retention_hours=float("inf"))),
    ("retention nan", "retention_hours", lambda log, s: s.tombstones(retention_hours=float("nan"))),
    ("retention negative", "retention_hours", lambda log, s: s.tombstones(retention_hours=-1)),
    ("retention text", "retention_hours", lambda log, s: s.num_tombstones(retention_hours="24")),
    ("retention huge", "retention_hours", lambda log, s: s.tombstone_summary(retention_hours=1e300)),
    ("now_ms text", "now_ms", lambda log, s: s.tombstones(now_ms="now")),
    ("small_file_bytes", "small_file_bytes", lambda log, s: s.file_summary(-1)),
    ("where syntax", "where", lambda log, s: s.files("value >")),
    ("where type", "where", lambda log, s: s.files(where=42)),
    ("where column", "where", lambda log, s: s.files("nope = 1")),
    ("filter op", "data_filters", lambda log, s: s.files(data_filters=[("value", "~", 1)])),
    ("filter shape", "data_filters", lambda log, s: s.files(data_filters=["value = 1"])),
    ("filter in", "data_filters", lambda log, s: s.files(data_filters=[("value", "in", 5)])),
    ("not a partition", "partition_filters", lambda log, s: s.files(partition_filters=[("value", "=", 1)])),
    ("request version", "version", lambda log, s: Request(table="t", action="files", version="2")),  # type: ignore[arg-type]
    ("request limit", "limit", lambda log, s: Request.make(table="t", action="history", limit=-1)),
    ("request retention", "retention_hours",
     lambda log, s: Request.make(table="t", action="tombstones", retention_hours=float("inf"))),
    ("request timestamp", "timestamp", lambda log, s: Request(table="t", action="files", timestamp="soon")),
    ("request where", "--where", lambda log, s: Request.make(table="t", action="files", where="a = ")),
]


@pytest.mark.parametrize(("argument", "call"), [(a, c) for _, a, c in BAD_CALLS], ids=[i for i, _, _ in BAD_CALLS])
def test_every_bad_argument_is_a_typed_error_naming_it(argument, call):
    log = DeltaLog(str(SIMPLE))
    with pytest.raises(InvalidArgumentError) as err:
        call(log, log.snapshot_at(version=4))
    assert isinstance(err.value, DeltaError) and isinstance(err.value, ValueError)
    assert err.value.argument == argument and argument in str(err.value)


def test_booleans_are_not_versions():
    """`snapshot_at(version=True)` loaded version 1; now it is refused like any non-integer."""
    log = DeltaLog(str(SIMPLE))
    assert log.snapshot_at(version=1).version == 1
    with pytest.raises(InvalidArgumentError, match="version must be an integer, got bool True"):
        log.snapshot_at(version=True)


def test_there_are_at_least_32_bad_arguments():
    assert len(BAD_CALLS) >= 32


# -- a metadata action whose schemaString is not JSON is refused at load ----------------------------------


@pytest.mark.parametrize("schema", ['{"type": "struct", "fields": [', '"just a string"', "[]", 42])
def test_a_broken_schema_string_is_refused_at_load(tmp_path, schema):
    table = copy_table("delta-rs/simple_table", tmp_path)
    commit = table / "_delta_log" / "00000000000000000000.json"
    lines = [json.loads(line) for line in commit.read_text().splitlines()]
    for line in lines:
        if "metaData" in line:
            line["metaData"]["schemaString"] = schema
    commit.write_text("".join(json.dumps(line) + "\n" for line in lines))

    with pytest.raises(MalformedCommitError) as err:
        DeltaLog(str(table)).update()
    assert (err.value.version, err.value.file) == (0, "00000000000000000000.json")
    assert err.value.table.endswith("simple_table") and "schemaString" in str(err.value)
    code, out, err_text = run("snapshot", str(table))
    assert (code, out) == (EXIT_ERROR, "") and err_text.startswith("deltalog: error: MalformedCommitError: ")
    assert "JSONDecodeError" not in err_text
    deltalake = pytest.importorskip("deltalake")
    with pytest.raises(Exception):  # noqa: B017 - delta-rs refuses the table too (its own error type)
        deltalake.DeltaTable(str(table)).schema()


def test_metadata_from_json_checks_the_schema_string():
    assert Metadata.from_json({"id": "t", "schemaString": '{"type":"struct","fields":[]}'}).schema_json == {
        "type": "struct",
        "fields": [],
    }
    with pytest.raises(ValueError, match="schemaString is not valid JSON"):
        Metadata.from_json({"id": "t", "schemaString": "{"})


# -- one rule for commit times ---------------------------------------------------------------------------

T0 = 1_700_000_000_000


def _pin(path: str, ms: int) -> None:
    os.utime(path, ns=(ms * 1_000_000, ms * 1_000_000))


def test_commit_times_follow_one_rule_everywhere(tmp_path):
    """File times 5, 1, 1, 9, 2 (seconds after T0) become 5, 5.001, 5.002, 9, 9.001 in every API."""
    b = DeltaLogBuilder(tmp_path / "t", schema={"id": "long"})
    b.create()
    for i in range(4):
        b.append([f"f{i}.parquet"])
    raw = [T0 + 5000, T0 + 1000, T0 + 1000, T0 + 9000, T0 + 2000]
    expected = [T0 + 5000, T0 + 5001, T0 + 5002, T0 + 9000, T0 + 9001]
    for v, ms in enumerate(raw):
        _pin(b.commit_path(v), ms)
    log = DeltaLog(b.path)

    assert log.commit_timestamps() == list(enumerate(expected))
    for v, ms in enumerate(expected):
        assert log.snapshot_at(timestamp=ms).version == v
        assert log.snapshot_at(version=v).timestamp == ms and log.snapshot_at(version=v).file_timestamp == raw[v]
        summary = log.commit_summary(v)
        assert (summary["timestamp"], summary["file_modification_time"]) == (ms, raw[v])
    history = log.history()
    assert [h["timestamp"] for h in history] == expected[::-1]
    assert [h["file_modification_time"] for h in history] == raw[::-1]
    assert [h["timestamp"] for h in log.history(limit=2)] == expected[:2:-1][:2]
    doc = json.loads(run("history", b.path, "--json")[1])
    assert [h["timestamp"] for h in doc] == expected[::-1]


def test_commit_times_after_a_checkpoint_and_with_in_commit_timestamps(tmp_path):
    b = DeltaLogBuilder(tmp_path / "t", schema={"id": "long"})
    b.create()
    b.append(["a.parquet"])
    b.checkpoint()
    b.append(["b.parquet"])
    for v, ms in enumerate([T0 + 3000, T0 + 3000, T0 + 1000]):
        _pin(b.commit_path(v), ms)
    log = DeltaLog(b.path)
    assert log.commit_timestamps() == [(0, T0 + 3000), (1, T0 + 3001), (2, T0 + 3002)]
    assert log.update().timestamp == T0 + 3002  # the snapshot lists the commits before its checkpoint

    ict = DeltaLogBuilder(
        tmp_path / "ict", schema={"id": "long"}, configuration={"delta.enableInCommitTimestamps": "true"}
    )
    ict.create()
    ict.append(["a.parquet"])
    _pin(ict.commit_path(1), T0)  # a file time before the in-commit timestamp: ignored
    log = DeltaLog(ict.path)
    times = [ict.timestamp(0), ict.timestamp(1)]
    assert [t for _, t in log.commit_timestamps()] == times
    assert [h["timestamp"] for h in log.history()] == times[::-1]
    assert log.update().timestamp == log.commit_summary(1)["timestamp"] == times[1]


# -- update(staleness_acceptable=True) has a time limit ----------------------------------------------------


def test_staleness_limit(tmp_path):
    b = DeltaLogBuilder(tmp_path / "t", schema={"id": "long"})
    b.create()
    now = [T0]
    log = DeltaLog(b.path, clock=lambda: now[0])
    first = log.update()
    b.append(["a.parquet"])
    assert log.update(staleness_acceptable=True) is first  # no limit: never refreshed
    assert log.update(staleness_acceptable=True, staleness_limit_ms=1_000) is first  # updated 0 ms ago
    now[0] += 1_000
    fresh = log.update(staleness_acceptable=True, staleness_limit_ms=1_000)  # 1 s old: too stale
    assert fresh.version == 1 and log.last_update_timestamp == now[0]
    b.append(["b.parquet"])
    now[0] += 999
    assert log.update(staleness_acceptable=True, staleness_limit_ms=1_000) is fresh
    assert log.update().version == 2


# -- issue 28, defect 4: a misconfigured location is one typed line naming what is wrong; nothing changes --

BUCKET_28 = "issue-28"
#: The write commands, each asked to change the table as much as it can.
WRITE_COMMANDS = [
    ["vacuum", "--apply", "--retention-hours", "0", "--no-enforce-retention"],
    ["optimize", "--min-num-files", "1"],
    ["checkpoint"],
    ["cleanup-log", "--apply", "--retention-hours", "0"],
]


@pytest.fixture(scope="module")
def s3(moto_s3):
    """The session's moto S3 server on loopback (tests/support/s3_server.py) with the bucket `BUCKET_28`."""
    pytest.importorskip("s3fs")
    from support.s3_server import create_bucket

    create_bucket(moto_s3, BUCKET_28)
    return moto_s3


@pytest.fixture
def s3_table(s3, monkeypatch):
    """A two-commit delta-rs table on the server; the environment points `deltalog` at it."""
    import uuid

    from support.s3_server import deltalake_storage_options, write_sample_table

    uri = f"s3://{BUCKET_28}/t-{uuid.uuid4().hex[:8]}"
    write_sample_table(uri, deltalake_storage_options(s3), commits=2)
    env = {
        "AWS_ACCESS_KEY_ID": s3.access_key,
        "AWS_SECRET_ACCESS_KEY": s3.secret_key,
        "AWS_REGION": s3.region,
        "AWS_ENDPOINT_URL": s3.endpoint,
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    return uri


def _objects(server) -> dict[str, Any]:
    """Every bucket on the server, and each key's ETag in `BUCKET_28`."""
    from support.s3_server import boto3_client

    client = boto3_client(server)
    keys = {
        o["Key"]: o["ETag"]
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET_28)
        for o in page.get("Contents", [])
    }
    return {"buckets": sorted(b["Name"] for b in client.list_buckets()["Buckets"]), "keys": keys}


@pytest.mark.parametrize("endpoint", ["not a url", "http://[::1", "ftp://host:9000", "http://"])
@pytest.mark.parametrize("command", WRITE_COMMANDS, ids=lambda c: c[0])
def test_a_malformed_endpoint_is_one_line_naming_aws_endpoint_url(s3, s3_table, monkeypatch, endpoint, command):
    before = _objects(s3)
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    code, out, err = run(command[0], s3_table, *command[1:])
    assert (code, out) == (EXIT_USAGE, ""), err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("deltalog: error: InvalidArgumentError: malformed S3 endpoint") and "AWS_ENDPOINT_URL" in err
    assert _objects(s3) == before


def test_a_malformed_endpoint_in_a_real_process(s3, s3_table):
    env = {**os.environ, "AWS_ENDPOINT_URL": "not a url"}
    proc = subprocess.run(
        [sys.executable, "-m", "airflow_delta_provider", "vacuum", s3_table, "--apply"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == EXIT_USAGE and proc.stdout == "" and proc.stderr.count("\n") == 1, proc.stderr
    assert "AWS_ENDPOINT_URL" in proc.stderr and "Traceback" not in proc.stderr


def test_a_malformed_endpoint_option_or_variable_is_named_under_every_face(s3_table, monkeypatch):
    """The command layer (the operators' in-process runs and the job) refuses it before any request too."""
    from airflow_delta_provider.commands.command import execute
    from airflow_delta_provider.commands.command import run as run_request

    with pytest.raises(InvalidArgumentError) as info:
        run_request(Request(table=s3_table, action="vacuum", storage_options={"endpoint_url": "not a url"}))
    assert info.value.argument == "endpoint_url" and "endpoint_url" in str(info.value)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://[::1")  # botocore's own variable, read when no option is
    code, result = execute(Request(table=s3_table, action="checkpoint", storage_options={"key": "k", "secret": "s"}))
    assert code == 1 and result["error_class"] == "InvalidArgumentError" and result["argument"] == "AWS_ENDPOINT_URL_S3"


@pytest.mark.parametrize("command", [["version"], ["snapshot"], *WRITE_COMMANDS], ids=lambda c: c[0])
def test_a_missing_bucket_says_the_bucket_does_not_exist(s3, s3_table, command):
    import uuid

    from airflow_delta_provider.cli import EXIT_STORAGE

    bucket = f"no-such-bucket-{uuid.uuid4().hex[:8]}"
    before = _objects(s3)
    code, out, err = run(command[0], f"s3://{bucket}/t", *command[1:])
    assert (code, out) == (EXIT_STORAGE, ""), err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"deltalog: error: BucketNotFoundError: bucket '{bucket}' does not exist"), err
    assert _objects(s3) == before  # no bucket made, nothing written
    # a missing table in a bucket that exists is still "no Delta table"
    code, _, err = run(command[0], f"{s3_table}-absent", *command[1:])
    assert code == EXIT_NOT_FOUND and err.startswith("deltalog: error: TableNotFoundError: No Delta table"), err


def test_a_missing_bucket_in_a_job_result(s3, s3_table):
    from support.s3_server import s3_storage_options

    from airflow_delta_provider.commands.command import execute

    request = Request(table="s3://no-such-bucket-x1/t", action="vacuum", storage_options=s3_storage_options(s3))
    code, result = execute(request)
    assert code == 1 and result["error_class"] == "BucketNotFoundError" and "'no-such-bucket-x1'" in result["message"]
