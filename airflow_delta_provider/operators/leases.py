"""Version leases taken by the tasks that hand a version to the DAG (`DeltaVersionSensor`,
`SnapshotReplayOperator`, with `lease_ttl=`) and released by `DeltaReleaseLeaseOperator`.

A lease (`delta.maintenance.leases`) pins the version against the VACUUM and log cleanup this provider
and its library run (either engine): they keep what the version needs until the lease is released or
expires. Spark's and delta-rs's own maintenance do not read lease files. Only the library is imported
here (no Airflow), so the sensor's module stays light.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from ..commands.arguments import is_absent, parse_duration, parse_location
from ..delta.protocol.leases import MAX_OWNER_CHARS, MAX_TTL_MS, check_lease_id


def parse_lease_ttl(value: Any, argument: str = "lease_ttl") -> dt.timedelta | None:
    """A lease's time to live (`commands.arguments.parse_duration`, more than 0, at most `MAX_TTL_MS`); None (or
    what a template renders for nothing) takes no lease."""
    return None if is_absent(value) else parse_duration(value, argument, positive=True, maximum_ms=MAX_TTL_MS)


def parse_lease_id(value: Any, argument: str = "lease_id") -> str | None:
    """A lease id (32 hex digits), or the XCom of the task that took it (its `lease_id`); None when the
    task took none (no `lease_ttl`: the template renders nothing)."""
    if isinstance(value, Mapping):
        value = value.get("lease_id")
    if is_absent(value):
        return None
    return check_lease_id(value)


def lease_owner(context: Any, task_id: str, dag_id: str | None = None) -> str:
    """Who holds a task's lease: `<dag_id>.<task_id>.<run_id>` (cut to the owner's 200 characters)."""
    get = getattr(context, "get", None)
    ti = get("ti") if get else None
    run_id = (get("run_id") if get else None) or getattr(ti, "run_id", None) or "run"
    dag = getattr(ti, "dag_id", None) or dag_id or "dag"
    return f"{dag}.{getattr(ti, 'task_id', None) or task_id}.{run_id}"[:MAX_OWNER_CHARS]


def take_lease(
    table_uri: str,
    version: int,
    ttl: dt.timedelta,
    *,
    owner: str,
    location: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Pin `version` for `ttl` (`add_lease`); what the task adds to its XCom: `lease_id`,
    `lease_expires_at` (UTC, ISO) and `lease_owner`."""
    from ..delta.maintenance.leases import add_lease

    lease = add_lease(table_uri, version, ttl, owner, location=location, storage_options=storage_options or None)
    return {"lease_id": lease.id, "lease_expires_at": lease.to_dict()["expires_at"], "lease_owner": lease.owner}


__all__ = ["lease_owner", "parse_lease_id", "parse_lease_ttl", "parse_location", "take_lease"]
