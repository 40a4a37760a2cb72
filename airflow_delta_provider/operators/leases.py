"""Version leases taken by the tasks that hand a version to the DAG (`DeltaVersionSensor`,
`SnapshotReplayOperator`, with `lease_ttl=`) and released by `DeltaReleaseLeaseOperator`.

A lease pins the version against this provider's VACUUM and log cleanup (not Spark's or delta-rs's,
which do not read lease files) until it is released or expires. Kept apart from `operators.delta` so the
sensor does not import the Spark provider.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import BaseOperator

from ..commands.arguments import is_absent, is_template, parse_duration, parse_flag, parse_location
from ..delta.protocol.leases import MAX_OWNER_CHARS, MAX_TTL_MS, check_lease_id
from ..version_watch import storage_options

if TYPE_CHECKING:  # pragma: no cover
    from airflow.providers.common.compat.sdk import Context


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


class DeltaReleaseLeaseOperator(BaseOperator):
    """Release the version lease a `DeltaVersionSensor` or `SnapshotReplayOperator` took with `lease_ttl`,
    once the last task reading its version is done.

    `lease_id` (templated) is the id or that task's XCom. Nothing to release (no lease was taken) is not an
    error, nor, with `missing_ok=True` (the default), is a lease already gone. XCom: `{table_uri, lease_id,
    released, version, owner}`.
    """

    template_fields: Sequence[str] = ("table_uri", "lease_id", "lease_location", "storage_conn_id")
    ui_color = "#00add4"

    def __init__(
        self,
        *,
        table_uri: str,
        lease_id: str | Mapping[str, Any] | None,
        lease_location: str | None = None,
        storage_conn_id: str | None = None,
        missing_ok: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table_uri = table_uri
        self.lease_id, self.lease_location = lease_id, lease_location  # read once rendered (`execute`)
        if not is_template(lease_id):  # a bad literal fails the DAG at parse time
            parse_lease_id(lease_id)
        if not is_template(lease_location):
            parse_location(lease_location, "lease_location")
        self.storage_conn_id = storage_conn_id
        self.missing_ok = parse_flag(missing_ok, "missing_ok")

    def execute(self, context: Context) -> dict[str, Any]:
        from ..delta.maintenance.leases import release_lease

        lease_id = parse_lease_id(self.lease_id)
        out: dict[str, Any] = {"table_uri": self.table_uri, "lease_id": lease_id, "released": False}
        if lease_id is None:
            self.log.info("no lease to release for %s (the task took none)", self.table_uri)
            return {**out, "version": None, "owner": None}
        lease = release_lease(
            self.table_uri,
            lease_id,
            missing_ok=self.missing_ok,
            location=parse_location(self.lease_location, "lease_location"),
            storage_options=storage_options(self.table_uri, self.storage_conn_id),
        )
        if lease is None:
            self.log.info("lease %s of %s: already gone (released, or purged once expired)", lease_id, self.table_uri)
            return {**out, "version": None, "owner": None}
        self.log.info("released lease %s on version %s of %s", lease_id, lease.version, self.table_uri)
        return {**out, "released": True, "version": lease.version, "owner": lease.owner}
