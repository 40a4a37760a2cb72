"""Delta 4.1 retention rules (issue 28).

* VACUUM: `delta.deletedFileRetentionDuration` is the source of truth. Without `retention_hours` it is the
  retention; a longer `retention_hours` is honoured (it deletes less); a shorter one is refused unless
  `enforce_retention_duration=False`, at plan time and when a plan is applied.
* Log cleanup: a table whose `delta.logRetentionDuration` is shorter than its
  `delta.deletedFileRetentionDuration` is refused with a `RetentionConflictError` naming both properties
  and their values (defaults included), dry run or not, and nothing is deleted. An explicit
  `retention_hours` is the caller's decision.

Tables are written by delta-rs (`write_deltalake(..., configuration=...)`) or `DeltaLogBuilder`.
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pyarrow as pa
import pytest

deltalake = pytest.importorskip("deltalake")
from deltalake import DeltaTable, write_deltalake  # noqa: E402

from airflow_delta_provider.cli import EXIT_UNSUPPORTED, main  # noqa: E402
from airflow_delta_provider.delta.errors import (  # noqa: E402
    InvalidArgumentError,
    OperationNotAllowedError,
    RetentionConflictError,
    error_from_dict,
)
from airflow_delta_provider.delta.maintenance.log_cleanup import cleanup_log  # noqa: E402
from airflow_delta_provider.delta.maintenance.vacuum import vacuum  # noqa: E402
from airflow_delta_provider.delta.protocol.log_cleanup import check_retention_compatibility  # noqa: E402
from airflow_delta_provider.testing import DeltaLogBuilder  # noqa: E402

HOUR = 3_600_000
DAY = 24 * HOUR


def _files(root: Path) -> dict[str, int]:
    """Every file under the table (log included): relative path -> mtime ns."""
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


def _table(tmp_path: Path, configuration: dict[str, str]) -> Path:
    """v0 (ids 0-2), v1 overwrite (ids 10-11): v0's file is tombstoned now."""
    path = tmp_path / "t"
    write_deltalake(str(path), pa.table({"id": pa.array([0, 1, 2], pa.int64())}), configuration=configuration)
    write_deltalake(str(path), pa.table({"id": pa.array([10, 11], pa.int64())}), mode="overwrite")
    return path


# -- VACUUM: the table property is the source of truth -----------------------------------------------------


def test_vacuum_uses_the_table_property_and_refuses_a_shorter_retention(tmp_path):
    path = _table(tmp_path, {"delta.deletedFileRetentionDuration": "interval 2 days"})
    now = int(time.time() * 1000)
    before = _files(path)
    # the property: at now + 49 h the tombstone (deleted now) is past 2 days
    plan = vacuum(str(path), clock=lambda: now + 49 * HOUR)
    assert plan.plan.retention_ms == 2 * DAY and plan.plan.num_files == 1
    # at now + 47 h it is not
    assert vacuum(str(path), clock=lambda: now + 47 * HOUR).plan.num_files == 0
    # a longer retention_hours is honoured: it deletes less
    assert vacuum(str(path), retention_hours=72, clock=lambda: now + 49 * HOUR).plan.num_files == 0
    # a shorter one is refused, naming the property and its value, plan and apply alike
    for dry_run in (True, False):
        with pytest.raises(InvalidArgumentError, match="deletedFileRetentionDuration") as err:
            vacuum(str(path), retention_hours=1, dry_run=dry_run, clock=lambda: now + 2 * HOUR)
        assert err.value.argument == "retention_hours" and "48 hours" in str(err.value)
    assert _files(path) == before
    # ...unless explicitly overridden (Delta's RETAIN 0 HOURS with the check disabled)
    done = vacuum(
        str(path),
        retention_hours=0,
        enforce_retention_duration=False,
        dry_run=False,
        untracked_grace_hours=0,
        clock=lambda: now + 1000,
    )
    assert done.deleted == 1
    assert DeltaTable(str(path)).to_pyarrow_table().column("id").to_pylist() == [10, 11]


def test_a_plan_with_a_shorter_retention_is_refused_at_apply(tmp_path):
    path = _table(tmp_path, {"delta.deletedFileRetentionDuration": "interval 2 days"})
    now = int(time.time() * 1000) + 1000
    plan = vacuum(str(path), retention_hours=0, enforce_retention_duration=False, clock=lambda: now).to_dict()
    assert plan["num_files"] == 1
    before = _files(path)
    with pytest.raises(InvalidArgumentError, match="deletedFileRetentionDuration"):
        vacuum(str(path), plan=plan, dry_run=False, clock=lambda: now)
    assert _files(path) == before


# -- log cleanup: log retention shorter than file retention ---------------------------------------------------


@pytest.mark.parametrize(
    ("conf", "shown"),
    [
        ({"delta.logRetentionDuration": "interval 1 day"}, ("interval 1 day", "interval 1 week (default)")),
        (
            {"delta.deletedFileRetentionDuration": "interval 60 days"},
            ("interval 30 days (default)", "interval 60 days"),
        ),
        (
            {"delta.logRetentionDuration": "12 hours", "delta.deletedFileRetentionDuration": "1 day"},
            ("12 hours", "1 day"),
        ),
    ],
)
def test_log_cleanup_refuses_a_log_retention_shorter_than_the_file_retention(tmp_path, conf, shown):
    path = _table(tmp_path, conf)
    DeltaTable(str(path)).create_checkpoint()
    before = _files(path)
    far = int(time.time() * 1000) + 400 * DAY  # everything is past any retention
    for apply in (False, True):
        with pytest.raises(RetentionConflictError) as err:
            cleanup_log(str(path), apply=apply, clock=lambda: far)
        message = str(err.value)
        assert "delta.logRetentionDuration=" + shown[0] in message
        assert "delta.deletedFileRetentionDuration=" + shown[1] in message
        assert err.value.log_retention_ms < err.value.deleted_file_retention_ms
        assert isinstance(err.value, OperationNotAllowedError)
    assert _files(path) == before
    # the typed error survives a job's JSON result
    back = error_from_dict(json.loads(json.dumps(err.value.to_dict())))
    assert isinstance(back, RetentionConflictError)
    assert back.deleted_file_retention_ms == err.value.deleted_file_retention_ms
    # an explicit retention is the caller's decision: not refused
    assert cleanup_log(str(path), retention_hours=0, clock=lambda: far).kept_checkpoint_version == 1


def test_log_cleanup_accepts_equal_or_longer_log_retention(tmp_path):
    for i, conf in enumerate(
        (
            {},  # 30 days vs 1 week
            {"delta.logRetentionDuration": "7 days", "delta.deletedFileRetentionDuration": "interval 1 week"},
            {"delta.logRetentionDuration": "interval 2 days", "delta.deletedFileRetentionDuration": "1 day"},
        )
    ):
        check_retention_compatibility(conf)
        b = DeltaLogBuilder(tmp_path / f"t{i}", schema={"id": "long"}, configuration=conf)
        b.create()
        assert cleanup_log(b.uri).reason is not None  # planned (nothing old), not refused


def test_cli_cleanup_log_reports_the_conflict_as_unsupported(tmp_path):
    path = _table(tmp_path, {"delta.logRetentionDuration": "interval 1 day"})
    out, err = io.StringIO(), io.StringIO()
    code = main(["cleanup-log", str(path), "--json"], out=out, err=err)
    assert code == EXIT_UNSUPPORTED
    body = json.loads(err.getvalue())
    assert body["error_class"] == "RetentionConflictError"
    assert body["log_retention_ms"] == DAY and body["deleted_file_retention_ms"] == 7 * DAY
