"""The `deltalog` CLI: human output, stable JSON shapes, typed one-line (or JSON) errors, exit codes, completion."""

from __future__ import annotations

import io
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CORPUS

from airflow_delta_provider import __version__
from airflow_delta_provider.cli import (
    EXIT_CHECK_FAILED,
    EXIT_ERROR,
    EXIT_NOT_FOUND,
    EXIT_UNSUPPORTED,
    EXIT_USAGE,
    main,
)
from airflow_delta_provider.commands.command import storage_options_from_env

DEMO_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "sample_table.py"


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("cli") / "sample"
    subprocess.run([sys.executable, str(DEMO_SCRIPT), str(path)], check=True, capture_output=True)
    return str(path)


def test_snapshot_json_shape(sample):
    code, out, err = run("snapshot", sample, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["version"] == 5
    assert set(doc["protocol"]) == {"min_reader_version", "min_writer_version", "reader_features", "writer_features"}
    assert {"id", "partition_columns", "configuration", "schema"} <= set(doc["metadata"])
    assert doc["metadata"]["partition_columns"] == ["region"]
    assert doc["num_files"] == len(doc["files"]) == 4
    assert doc["size_bytes"] == sum(f["size"] for f in doc["files"])
    assert isinstance(doc["timestamp_ms"], int)
    for f in doc["files"]:
        assert set(f) >= {"path", "size", "partition_values", "modification_time", "deletion_vector"}
    assert len(doc["tombstones"]) == 2
    for t in doc["tombstones"]:
        assert set(t) >= {"path", "deletion_timestamp", "size"}


def test_snapshot_json_paths_equal_delta_rs(sample):
    import pyarrow as pa
    from deltalake import DeltaTable

    _, out, _ = run("snapshot", sample, "--json", "--version", "3")
    ours = sorted(f["path"] for f in json.loads(out)["files"])
    theirs = sorted(pa.table(DeltaTable(sample, version=3).get_add_actions(flatten=True))["path"].to_pylist())
    assert ours == theirs


def test_human_snapshot_summary(sample):
    code, out, _ = run("snapshot", sample)
    assert code == 0
    for label in ("version            5", "partition columns  region", "files              4", "tombstones"):
        assert label in out


def test_files_where_prunes_partitions_and_stats(sample):
    _, out, _ = run("files", sample, "--where", "region = 'eu'", "--json")
    files = json.loads(out)["files"]
    assert files and all(f["partition_values"]["region"] == "eu" for f in files)
    _, out, _ = run("files", sample, "--where", "id >= 400", "--json")  # only the apac append holds ids >= 400
    assert [f["partition_values"]["region"] for f in json.loads(out)["files"]] == ["apac"]


def test_tombstones_retention_split(sample):
    _, out, _ = run("tombstones", sample, "--json")
    doc = json.loads(out)
    assert doc["retention"]["source"] == "default" and doc["retention"]["hours"] == 168
    assert (doc["retained"], doc["expired"]) == (2, 0)
    _, out, _ = run("tombstones", sample, "--retention-hours", "0", "--json")
    doc = json.loads(out)
    assert (doc["retained"], doc["expired"]) == (0, 2)
    assert doc["reclaimable_bytes"] == sum(t["size"] for t in doc["tombstones"]) > 0
    assert set(doc["partitions"]) == {"region=eu", "region=us"}


def test_history_and_changes(sample):
    _, out, _ = run("history", sample, "--limit", "2", "--json")
    hist = json.loads(out)
    assert [h["version"] for h in hist] == [5, 4]
    _, out, _ = run("changes", sample, "--from", "4", "--json")
    changes = json.loads(out)
    assert [c["version"] for c in changes] == [4, 5]
    assert any("remove" in a for a in changes[0]["actions"])


def test_version_and_time_travel(sample):
    assert run("version", sample)[1].strip() == "5"
    _, out, _ = run("snapshot", sample, "--version", "0", "--json")
    assert json.loads(out)["version"] == 0


@pytest.mark.parametrize(
    ("table", "error", "code"),
    [
        ("delta-golden/versions-not-contiguous", "LogGapError", EXIT_ERROR),
        ("delta-golden/deltalog-invalid-protocol-version", "UnsupportedFeatureError", EXIT_UNSUPPORTED),
        ("delta-golden/no-delta-log-folder", "TableNotFoundError", EXIT_NOT_FOUND),
    ],
)
def test_errors_are_one_typed_line_with_their_exit_code(table, error, code):
    proc = subprocess.run(
        [sys.executable, "-m", "airflow_delta_provider", "snapshot", str(CORPUS / table)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == code
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"deltalog: error: {error}:")
    assert "Traceback" not in proc.stderr and table.split("/")[-1] in lines[0]


def test_with_json_errors_are_json_too(sample):
    code, out, err = run("snapshot", str(CORPUS / "delta-golden/no-delta-log-folder"), "--json")
    doc = json.loads(err)
    assert (code, out) == (EXIT_NOT_FOUND, "")
    assert doc["status"] == "error" and doc["error_class"] == "TableNotFoundError" and doc["exit_code"] == code
    assert doc["table"].endswith("no-delta-log-folder")
    code, _, err = run("files", sample, "--where", "id >", "--json")  # a usage error is JSON as well
    doc = json.loads(err)
    assert code == EXIT_USAGE and doc["error_class"] == "PredicateSyntaxError" and doc["position"] == 5
    code, _, err = run("history", sample, "--limit", "x", "--json")
    assert code == EXIT_USAGE and json.loads(err)["argument"] == "--limit"


def test_version_out_of_range_is_typed(sample):
    code, _, err = run("snapshot", sample, "--version", "99")
    assert code == EXIT_ERROR and "VersionNotFoundError" in err and "99" in err


def test_usage_errors_exit_2_and_name_the_option(sample):
    for argv, option in [
        (["snapshot", sample, "--version", "1", "--timestamp", "0"], "--timestamp"),
        (["snapshot", sample, "--engine", "gpu"], "--engine"),
        (["snapshot", sample, "--timestamp", "soon"], "--timestamp"),
        (["files", sample, "--storage-option", "novalue"], "--storage-option"),
        (["bogus"], "COMMAND"),
        (["snapshot"], "path"),
    ]:
        code, out, err = run(*argv)
        assert (code, out) == (EXIT_USAGE, ""), argv
        assert err.startswith("deltalog: error: InvalidArgumentError: ") and option in err and err.count("\n") == 1


def test_library_errors_name_the_flags_not_the_python_arguments(sample):
    code, out, err = run("vacuum", sample, "--retention-hours", "0")
    assert (code, out) == (EXIT_USAGE, "")
    assert "Pass --no-enforce-retention to vacuum" in err and "enforce_retention_duration" not in err
    code, _, err = run("vacuum", sample, "--retention-hours", "0", "--json")
    body = json.loads(err)
    assert (body["argument"], body["flag"]) == ("retention_hours", "--retention-hours")  # argument kept, flag added
    assert (
        "--no-enforce-retention" in body["message"] and "table's delta.deletedFileRetentionDuration" in body["message"]
    )


def test_version_flag_prints_the_package_version():
    code, out, _ = run("--version")
    assert (code, out.strip()) == (0, f"deltalog {__version__}")


def test_failed_checks_exit_6_after_the_report(sample):
    code, out, err = run("snapshot", sample, "--checks", '{"min_files": 1, "max_files": 3}')
    assert code == EXIT_CHECK_FAILED
    assert "check min_files    ok" in out and "check max_files    FAILED" in out
    assert err.startswith("deltalog: checks failed: max_files")
    code, out, _ = run("snapshot", sample, "--checks", '{"min_files": 1}', "--json")
    assert code == 0 and json.loads(out)["checks"][0]["passed"] is True
    assert run("snapshot", sample, "--checks", "[1]")[0] == EXIT_USAGE
    assert run("snapshot", sample, "--checks", '{"min_filez": 1}')[0] == EXIT_USAGE  # unknown check


def test_timestamps_are_labelled_commit_time_or_file_time(sample):
    _, out, _ = run("snapshot", sample)
    assert "commit time" in out and "timestamp" not in out
    _, out, _ = run("history", sample)
    assert out.split()[:5] == ["version", "commit", "time", "file", "time"]
    _, out, _ = run("files", sample)
    assert "file time" in out.splitlines()[0]
    entry = json.loads(run("history", sample, "--limit", "1", "--json")[1])[0]
    assert isinstance(entry["timestamp"], int) and isinstance(entry["file_modification_time"], int)


def test_console_script_installed(sample):
    exe = shutil.which("deltalog", path=str(Path(sys.executable).parent))
    assert exe, "the deltalog console script is installed with the package"
    proc = subprocess.run([exe, "version", sample], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "5"


def test_s3_options_from_standard_env(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIA")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000")
    opts = storage_options_from_env("s3://bucket/t", {"anon": "false"})
    assert opts["key"] == "AKIA" and opts["secret"] == "s3cr3t"
    assert opts["endpoint_url"] == "http://127.0.0.1:9000"
    assert opts["client_kwargs"] == {"region_name": "eu-west-1"} and opts["anon"] == "false"
    assert storage_options_from_env("/local/path") == {}


def test_memory_limit_refuses_a_state_it_cannot_hold(sample):
    """`--memory-limit-mb`: over it, one typed line naming the Spark engine; 0 lifts the limit."""
    code, out, err = run("snapshot", sample, "--memory-limit-mb", "0.001", "--json")
    assert code == EXIT_ERROR and out == ""
    doc = json.loads(err)
    assert doc["error_class"] == "ResourceLimitError" and "--engine spark" in doc["message"]
    code, _, err = run("snapshot", sample, "--memory-limit-mb", "0.001")
    assert err.startswith("deltalog: error: ResourceLimitError:") and "Spark engine" in err
    expected = json.loads(run("snapshot", sample, "--json")[1])["num_files"]
    for limit in ("0", "64"):
        code, out, _ = run("snapshot", sample, "--memory-limit-mb", limit, "--json")
        assert code == 0 and json.loads(out)["num_files"] == expected


@pytest.mark.parametrize("bad", ["inf", "nan", "-1", "lots", "1e30"])
def test_memory_limit_must_be_a_finite_size(sample, bad):
    code, _, err = run("snapshot", sample, "--memory-limit-mb", bad)
    assert code == EXIT_USAGE and "--memory-limit-mb: must be a number of MiB" in err


def test_memory_limit_is_refused_with_the_spark_engine(sample):
    code, _, err = run("snapshot", sample, "--engine", "spark", "--memory-limit-mb", "64")
    assert code == EXIT_USAGE and "InvalidArgumentError" in err and "--engine spark" in err


# -- shell completion ---------------------------------------------------------------------------------


def _complete_bash(script: str, *words: str) -> list[str]:
    """What the generated bash function offers for `words` (the last one being completed)."""
    call = " ".join(shlex.quote(w) for w in words)
    program = f"{script}\nCOMP_WORDS=({call}); COMP_CWORD={len(words) - 1}; _deltalog; "
    program += 'printf "%s\\n" "${COMPREPLY[@]}"'
    proc = subprocess.run(["bash", "-c", program], capture_output=True, text=True, check=True)
    return proc.stdout.split()


def test_bash_completion_parses_and_completes_from_the_parser(tmp_path):
    code, script, _ = run("completion", "bash")
    assert code == 0
    (tmp_path / "c.bash").write_text(script)
    subprocess.run(["bash", "-n", str(tmp_path / "c.bash")], check=True)
    assert set(_complete_bash(script, "deltalog", "")) >= {"snapshot", "files", "history", "completion", "--version"}
    assert _complete_bash(script, "deltalog", "fi") == ["files"]
    assert _complete_bash(script, "deltalog", "files", "t", "--wh") == ["--where"]
    assert _complete_bash(script, "deltalog", "snapshot", "t", "--engine", "") == ["local", "spark"]
    assert _complete_bash(script, "deltalog", "history", "t", "--limit", "") == []
    assert _complete_bash(script, "deltalog", "completion", "") == ["bash", "zsh"]
    (tmp_path / "table").mkdir()
    assert _complete_bash(script, "deltalog", "version", str(tmp_path / "tab")) == [str(tmp_path / "table")]


def test_zsh_completion_is_generated_from_the_parser(tmp_path):
    code, script, _ = run("completion", "zsh")
    assert code == 0 and script.startswith("#compdef deltalog")
    for fragment in ("--where[", "--engine[replay here or on Spark]:engine:(local spark)", "'1:argument:(bash zsh)'"):
        assert fragment in script
    if shutil.which("zsh") is None:
        pytest.skip("zsh is not installed")
    (tmp_path / "c.zsh").write_text(script)
    subprocess.run(["zsh", "-n", str(tmp_path / "c.zsh")], check=True)
    proc = subprocess.run(
        ["zsh", "-fc", f"autoload -U compinit; compinit -u -D; source {tmp_path / 'c.zsh'}; print $_comps[deltalog]"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert proc.stdout.strip() == "_deltalog"


def test_checkpoint_json_reports_the_resolved_table(sample, tmp_path, monkeypatch):
    """Issue 28: `deltalog checkpoint --json .` said `"table": "."`; it names the table as every action does."""
    root = tmp_path / "t"
    shutil.copytree(sample, root)
    monkeypatch.chdir(root)
    code, out, err = run("checkpoint", ".", "--json")
    assert code == 0, err
    resolved = json.loads(run("snapshot", ".", "--json")[1])["table"]
    assert json.loads(out)["table"] == resolved == f"file://{root.resolve()}"
    assert json.loads(run("vacuum", ".", "--json")[1])["table"] == resolved
