"""Version leases from the Airflow side, in process on real tables: `DeltaVersionSensor` and
`SnapshotReplayOperator` with `lease_ttl` pin the version they hand to the DAG (a lease file naming it,
its id in the XCom), the provider's VACUUM and log cleanup keep what it reads (`lease_location` passed
through), and `DeltaReleaseLeaseOperator` releases it. (The leases themselves: tests/delta/.)"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

pytest.importorskip("airflow")

from airflow.providers.common.compat.sdk import TaskDeferred
from deltalake import DeltaTable, write_deltalake
from provider_support import small_table, task_context

from airflow_delta_provider.delta.errors import InvalidArgumentError
from airflow_delta_provider.delta.maintenance.leases import add_lease, list_leases
from airflow_delta_provider.operators.delta import (
    DeltaLogCleanupOperator,
    DeltaReleaseLeaseOperator,
    DeltaVacuumOperator,
    SnapshotReplayOperator,
)
from airflow_delta_provider.sensors.delta import DeltaVersionSensor

pytestmark = pytest.mark.airflow

OLD = time.time() - 30 * 24 * 3600


def _context(run_id: str = "manual__1", task_id: str = "wait") -> dict[str, Any]:
    class TI:
        dag_id = "etl"

    ti = TI()
    ti.task_id = task_id  # type: ignore[attr-defined]
    return {"ti": ti, "run_id": run_id}


def _lease_file(table: str | Path, lease_id: str, folder: str | Path | None = None) -> dict[str, Any]:
    path = Path(folder or Path(table) / "_delta_leases") / f"{lease_id}.json"
    return json.loads(path.read_text())


def _overwritten(tmp_path: Path) -> Path:
    """delta-rs: version 0 (ids 1, 2) overwritten by version 1 (id 3); every data file a month old."""
    root = tmp_path / "rs"
    write_deltalake(str(root), pa.table({"id": [1, 2]}))
    write_deltalake(str(root), pa.table({"id": [3]}), mode="overwrite")
    for p in root.glob("*.parquet"):
        os.utime(p, (OLD, OLD))
    return root


def _ids(root: Path, version: int) -> list[int]:
    return sorted(DeltaTable(str(root), version=version).to_pyarrow_table().column("id").to_pylist())


VACUUM = dict(submit=False, retention_hours=0, enforce_retention_duration=False)


# -- the sensor -----------------------------------------------------------------------------------------------
def test_the_sensor_leases_the_version_it_fires_on(tmp_path: Path) -> None:
    b = small_table(tmp_path)
    done = DeltaVersionSensor(task_id="wait", table_uri=b.path, newer_than=1, lease_ttl="6h").poke(_context())
    out = done.xcom_value
    assert done.is_done and out["version"] == 2 and len(out["lease_id"]) == 32
    assert out["lease_owner"] == "etl.wait.manual__1" and out["lease_expires_at"]
    lease = _lease_file(b.path, out["lease_id"])  # the lease file exists and names the version
    assert lease["version"] == 2 and lease["owner"] == "etl.wait.manual__1"
    assert lease["expires"] - lease["created"] == 6 * 3_600_000
    assert [(le.id, le.version) for le in list_leases(b.path)] == [(out["lease_id"], 2)]


def test_without_lease_ttl_the_sensor_takes_none(tmp_path: Path) -> None:
    b = small_table(tmp_path)
    out = DeltaVersionSensor(task_id="wait", table_uri=b.path, newer_than=1).poke(_context()).xcom_value
    assert "lease_id" not in out and list_leases(b.path, include_expired=True) == []
    templated = DeltaVersionSensor(task_id="wait", table_uri=b.path, newer_than=1, lease_ttl="{{ params.ttl }}")
    templated.render_template_fields({"params": {"ttl": None}})  # renders "None": no lease
    assert "lease_id" not in templated.poke(_context()).xcom_value
    assert list_leases(b.path, include_expired=True) == []


@pytest.mark.parametrize("ttl", ["abc", 0, -1, "0s", "400d", True])
def test_a_bad_lease_ttl_fails_at_parse_time(tmp_path: Path, ttl: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="lease_ttl"):
        DeltaVersionSensor(task_id="wait", table_uri=str(tmp_path), lease_ttl=ttl)
    with pytest.raises(InvalidArgumentError, match="lease_ttl"):
        SnapshotReplayOperator(task_id="r", table_uri=str(tmp_path), lease_ttl=ttl)


def test_a_templated_bad_lease_ttl_fails_before_any_lease(tmp_path: Path) -> None:
    b = small_table(tmp_path)
    sensor = DeltaVersionSensor(task_id="wait", table_uri=b.path, newer_than=1, lease_ttl="{{ params.ttl }}")
    sensor.render_template_fields({"params": {"ttl": "soon"}})
    with pytest.raises(InvalidArgumentError, match="lease_ttl"):
        sensor.poke(_context())
    assert list_leases(b.path, include_expired=True) == []


def test_the_deferred_sensor_leases_when_it_resumes(tmp_path: Path) -> None:
    b = small_table(tmp_path)
    sensor = DeltaVersionSensor(task_id="wait", table_uri=b.path, deferrable=True, lease_ttl=3600)
    with pytest.raises(TaskDeferred):
        sensor.execute(_context())
    assert list_leases(b.path, include_expired=True) == []  # no version yet, no lease
    b.append(["new.parquet"], size=1, partition={"date": "2024-03-01"})
    event = {"status": "success", "version": 3, "table_uri": b.uri, "timestamp": 1, "operation": "WRITE"}
    out = sensor.execute_complete(_context(), event)
    assert out["version"] == 3 and _lease_file(b.path, out["lease_id"])["version"] == 3


def test_the_outlet_event_does_not_carry_the_lease(tmp_path: Path) -> None:
    from airflow.sdk import Asset

    b = small_table(tmp_path)
    asset = Asset(name="t", uri="file:///t")

    class Event:
        extra: dict[str, Any] | None = None

    events = {asset: Event()}
    sensor = DeltaVersionSensor(task_id="wait", table_uri=b.path, newer_than=1, lease_ttl="1h", outlets=[asset])
    out = sensor.poke({**_context(), "outlet_events": events}).xcom_value
    assert "lease_id" in out and set(events[asset].extra) == {"version", "table_uri", "timestamp", "operation"}


# -- the replay, VACUUM, log cleanup and the release -----------------------------------------------------------
def test_replay_lease_keeps_the_version_from_vacuum_until_released(tmp_path: Path) -> None:
    root = _overwritten(tmp_path)
    replay = SnapshotReplayOperator(
        task_id="replay", table_uri=str(root), submit=False, version=0, since_version=None, lease_ttl="1h"
    ).execute(_context(task_id="replay"))
    assert replay["version"] == 0 and replay["lease_owner"] == "etl.replay.manual__1"
    assert _lease_file(root, replay["lease_id"])["version"] == 0

    kept = DeltaVacuumOperator(task_id="v", table_uri=str(root), dry_run=False, **VACUUM).execute(
        task_context(tmp_path)
    )
    assert kept["deleted"] == 0 and kept["num_leases"] == 1 and kept["lease_kept_files"] == 1
    assert _ids(root, 0) == [1, 2]  # the leased version still reads

    release = DeltaReleaseLeaseOperator(
        task_id="release", table_uri=str(root), lease_id="{{ ti.xcom_pull(task_ids='replay')['lease_id'] }}"
    )

    class TI:
        @staticmethod
        def xcom_pull(task_ids: str) -> dict:
            return replay

    release.render_template_fields({"ti": TI()})
    out = release.execute(_context(task_id="release"))
    assert out == {
        "table_uri": str(root), "lease_id": replay["lease_id"], "released": True, "version": 0,
        "owner": "etl.replay.manual__1",
    }  # fmt: skip
    assert list_leases(str(root), include_expired=True) == []
    again = release.execute(_context(task_id="release"))  # missing_ok=True: already gone is not an error
    assert again["released"] is False

    gone = DeltaVacuumOperator(task_id="v", table_uri=str(root), dry_run=False, **VACUUM).execute(
        task_context(tmp_path)
    )
    assert gone["deleted"] == 1 and gone["num_leases"] == 0 and _ids(root, 1) == [3]


def test_release_with_nothing_to_release_and_missing_ok(tmp_path: Path) -> None:
    from airflow_delta_provider.delta.errors import LeaseError

    root = _overwritten(tmp_path)
    # the reader took no lease (no lease_ttl): its XCom has no lease_id and the template renders nothing
    for nothing in (None, "", "None", {"version": 1}):
        out = DeltaReleaseLeaseOperator(task_id="r", table_uri=str(root), lease_id=nothing).execute(_context())
        assert out["released"] is False and out["lease_id"] is None
    with pytest.raises(InvalidArgumentError, match="lease_id"):
        DeltaReleaseLeaseOperator(task_id="r", table_uri=str(root), lease_id="../../etc")
    strict = DeltaReleaseLeaseOperator(task_id="r", table_uri=str(root), lease_id="0" * 32, missing_ok=False)
    with pytest.raises(LeaseError, match="No lease"):
        strict.execute(_context())


def test_lease_location_reaches_vacuum_and_log_cleanup(tmp_path: Path) -> None:
    root = _overwritten(tmp_path)
    folder = tmp_path / "leases"
    replay = SnapshotReplayOperator(
        task_id="replay", table_uri=str(root), submit=False, version=0, since_version=None,
        lease_ttl="{{ params.ttl }}", lease_location="{{ params.leases }}",
    )  # fmt: skip
    replay.render_template_fields({"params": {"ttl": "3600", "leases": str(folder)}})  # seconds, as a template renders
    out = replay.execute(_context(task_id="replay"))
    lease = _lease_file(root, out["lease_id"], folder)
    assert lease["version"] == 0 and lease["expires"] - lease["created"] == 3_600_000
    assert not (root / "_delta_leases").exists()

    blind = DeltaVacuumOperator(task_id="v", table_uri=str(root), **VACUUM).execute(task_context(tmp_path))
    assert blind["num_files"] == 1 and blind["num_leases"] == 0  # the default folder holds no lease
    op = DeltaVacuumOperator(task_id="v", table_uri=str(root), lease_location="{{ params.leases }}", **VACUUM)
    op.render_template_fields({"params": {"leases": str(folder)}})
    assert op.build_request({}).options.lease_location == str(folder)
    seen = op.execute(task_context(tmp_path))
    assert seen["num_files"] == 0 and seen["num_leases"] == 1 and seen["lease_kept_files"] == 1

    cleanup = DeltaLogCleanupOperator(task_id="c", table_uri=str(root), submit=False, lease_location=str(folder))
    assert cleanup.build_request({}).options.lease_location == str(folder)
    assert DeltaLogCleanupOperator(task_id="c", table_uri=str(root)).build_request({}).options.lease_location is None
    cleanup.execute(task_context(tmp_path))  # a dry run that reads the leases there


def test_log_cleanup_operator_keeps_what_a_leased_version_needs(tmp_path: Path) -> None:
    b = small_table(tmp_path, commits=6)  # versions 0..6, commits stamped long ago
    b.checkpoint()  # at version 6
    lease = add_lease(b.path, 2, "1h", "reader")
    out = DeltaLogCleanupOperator(task_id="c", table_uri=b.path, submit=False, apply=True).execute(
        task_context(tmp_path)
    )
    assert out["deleted"] == 0 and out["earliest_readable_version"] == 0  # no checkpoint at or before version 2
    assert Path(b.commit_path(2)).exists()
    DeltaReleaseLeaseOperator(task_id="r", table_uri=b.path, lease_id=lease.id).execute(_context())
    out = DeltaLogCleanupOperator(task_id="c", table_uri=b.path, submit=False, apply=True).execute(
        task_context(tmp_path)
    )
    assert out["deleted"] > 0 and out["earliest_readable_version"] == 6 and not Path(b.commit_path(2)).exists()
