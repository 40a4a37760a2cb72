"""Version leases taken by the tasks that hand a version to the DAG (`DeltaVersionSensor`,
`SnapshotReplayOperator`, with `lease_ttl=`) and released by `DeltaReleaseLeaseOperator`.

A lease pins the version against this provider's VACUUM and log cleanup (not Spark's or delta-rs's,
which do not read lease files) until it is released or expires. No Airflow import: the sensor stays light.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from ..commands.arguments import is_absent, parse_duration, parse_location
from ..delta.protocol.leases import MAX_OWNER_CHARS, MAX_TTL_MS, check_lease_id
from ..version_watch import storage_options


def parse_lease_ttl(value: Any, argument: str = "lease_ttl") -> dt.timedelta | None:
    """A lease's time to live (more than 0, at most `MAX_TTL_MS`); None (or a template rendering nothing)
    takes no lease."""
    return None if is_absent(value) else parse_duration(value, argument, positive=True, maximum_ms=MAX_TTL_MS)


def parse_lease_id(value: Any, argument: str = "lease_id") -> str | None:
    """A lease id (32 hex digits), or the XCom of the task that took it; None when it took none."""
    if isinstance(value, Mapping):
        value = value.get("lease_id")
    return None if is_absent(value) else check_lease_id(value)


def take_lease(task: Any, context: Any, version: int, ttl: dt.timedelta | None, location: str | None) -> dict[str, Any]:
    """With `ttl`, pin `version` of `task.table_uri` for the task, owned by `<dag_id>.<task_id>.<run_id>`
    (cut to the owner's limit), and return the XCom fields `lease_id`, `lease_expires_at` (UTC, ISO) and
    `lease_owner`; without, {}."""
    if ttl is None:
        return {}
    from ..delta.maintenance.leases import add_lease

    get = getattr(context, "get", None)
    ti = get("ti") if get else None
    run_id = (get("run_id") if get else None) or getattr(ti, "run_id", None) or "run"
    dag = getattr(ti, "dag_id", None) or task.dag_id or "dag"
    owner = f"{dag}.{getattr(ti, 'task_id', None) or task.task_id}.{run_id}"[:MAX_OWNER_CHARS]
    options = storage_options(task.table_uri, task.storage_conn_id) or None
    lease = add_lease(task.table_uri, version, ttl, owner, location=location, storage_options=options)
    expires = lease.to_dict()["expires_at"]
    task.log.info("leased version %s to %s until %s: lease %s", version, owner, expires, lease.id)
    return {"lease_id": lease.id, "lease_expires_at": expires, "lease_owner": lease.owner}


__all__ = ["parse_lease_id", "parse_lease_ttl", "parse_location", "take_lease"]
