"""The maintenance operators in process: `DeltaCheckpointOperator` and `DeltaLogCleanupOperator` (and
the same actions through `deltalog` and the job's argv). The spark-submit path is the same command
layer (tests/jobs)."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest

pytest.importorskip("airflow")

from deltalake import DeltaTable
from provider_support import task_context

from airflow_delta_provider.cli import main as cli_main
from airflow_delta_provider.commands.request import Request
from airflow_delta_provider.delta import DeltaLog, VersionNotFoundError
from airflow_delta_provider.jobs.runner import build_parser, job_argv
from airflow_delta_provider.operators.delta import DeltaCheckpointOperator, DeltaLogCleanupOperator
from airflow_delta_provider.testing import DeltaLogBuilder

pytestmark = pytest.mark.airflow


def _old_table(tmp_path: Path) -> DeltaLogBuilder:
    """Versions 0..7 stamped in 2023 (long past any log retention), a checkpoint at 5."""
    b = DeltaLogBuilder(tmp_path / "t", schema={"id": "long"})
    b.create()
    for i in range(5):
        b.append([f"f{i}.parquet"], size=100 + i)
    b.checkpoint()
    for i in range(5, 7):
        b.append([f"f{i}.parquet"], size=100 + i)
    return b


def _log_listing(b: DeltaLogBuilder) -> dict[str, int]:
    log = Path(b.path) / "_delta_log"
    return {p.name: p.stat().st_mtime_ns for p in log.iterdir()}


def test_log_cleanup_is_a_dry_run_unless_applied(tmp_path: Path) -> None:
    b = _old_table(tmp_path)
    before = _log_listing(b)
    dry = DeltaLogCleanupOperator(task_id="c", table_uri=b.path, submit=False).execute(task_context(tmp_path))
    assert dry["dry_run"] and dry["num_files"] == 5 and dry["deleted"] == 0  # commits 0..4
    assert dry["earliest_readable_version"] == 5 and dry["kept_checkpoint_version"] == 5
    assert _log_listing(b) == before  # nothing deleted, nothing touched

    done = DeltaLogCleanupOperator(task_id="c", table_uri=b.path, submit=False, apply=True).execute(
        task_context(tmp_path)
    )
    assert not done["dry_run"] and done["deleted"] == 5
    assert sorted(set(before) - set(_log_listing(b))) == [f"{v:020d}.json" for v in range(5)]
    DeltaLog.clear_cache()
    log = DeltaLog(b.path)
    for v in range(5, 8):  # every version from the earliest readable one, here and in delta-rs
        assert log.snapshot_at(version=v).num_files == v
        assert len(DeltaTable(b.path, version=v).file_uris()) == v
    with pytest.raises(VersionNotFoundError):
        log.snapshot_at(version=4)


def test_checkpoint_operator_writes_a_checkpoint_others_read(tmp_path: Path) -> None:
    b = _old_table(tmp_path)
    out = DeltaCheckpointOperator(task_id="cp", table_uri=b.path, submit=False).execute(task_context(tmp_path))
    assert out["version"] == 7 and out["written"] and out["kind"] == "classic" and out["num_add_files"] == 7
    assert out["last_checkpoint_updated"]
    hint = json.loads((Path(b.path) / "_delta_log" / "_last_checkpoint").read_text())
    assert hint["version"] == 7
    DeltaLog.clear_cache()
    snap = DeltaLog(b.path).update()
    assert snap.log_segment.checkpoint_version == 7 and snap.num_files == 7
    assert sorted(DeltaTable(b.path).file_uris()) == sorted(str(Path(b.path) / f"f{i}.parquet") for i in range(7))
    again = DeltaCheckpointOperator(task_id="cp", table_uri=b.path, submit=False).execute(task_context(tmp_path))
    assert not again["written"]  # an Airflow retry rewrites nothing


def test_the_cli_and_the_job_take_the_same_maintenance_requests(tmp_path: Path) -> None:
    b = _old_table(tmp_path)
    out, err = io.StringIO(), io.StringIO()
    assert cli_main(["cleanup-log", b.path, "--json"], out=out, err=err) == 0, err.getvalue()
    dry = json.loads(out.getvalue())
    assert dry["dry_run"] and dry["num_files"] == 5 and os.path.exists(b.commit_path(0))
    out = io.StringIO()
    assert cli_main(["cleanup-log", b.path, "--apply"], out=out, err=err) == 0, err.getvalue()
    assert "deleted 5 files" in out.getvalue() and not os.path.exists(b.commit_path(0))
    out = io.StringIO()
    assert cli_main(["checkpoint", b.path], out=out, err=err) == 0, err.getvalue()
    assert "checkpoint at version 7" in out.getvalue()
    op = DeltaLogCleanupOperator(task_id="c", table_uri=b.path, apply=True, retention_hours=48)
    request = op.build_request({})
    argv = job_argv(request, "/tmp/result.json")
    assert request.options.apply and request.options.retention_hours == 48.0
    assert Request.from_json(build_parser().parse_args(argv).request, {}) == request
