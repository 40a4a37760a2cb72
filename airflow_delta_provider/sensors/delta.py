"""`DeltaVersionSensor`: wait until a Delta table reaches a new version."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowException, AirflowSkipException, BaseSensorOperator, conf

try:
    from airflow.providers.common.compat.sdk import PokeReturnValue
except ImportError:  # pragma: no cover
    from airflow.sensors.base import PokeReturnValue

from ..commands.arguments import is_template, parse_flag
from ..operators.leases import lease_owner, parse_lease_ttl, parse_location, take_lease
from ..triggers.delta import DeltaVersionTrigger, probe_table, recreated, recreation_error, storage_options
from ..version_watch import as_version, condition_met, is_transient, last_data_version, version_event

if TYPE_CHECKING:  # pragma: no cover
    from airflow.providers.common.compat.sdk import Context

BASELINE_KEY = "delta_version_baseline"
#: Task state store key of the count of transient errors in a row (reschedule mode, Airflow 3.3+).
TRANSIENT_ERRORS_KEY = "delta_transient_errors"


class DeltaVersionSensor(BaseSensorOperator):
    """Wait until the Delta table at `table_uri` reaches a version.

    - `target_version=N`: done when the latest version is `>= N`;
    - `newer_than=N` (templated, e.g. the version a previous run handled): done when it is `> N`;
    - neither: done when a version newer than the one seen at the first poke appears. The baseline
      survives reschedules (kept in the task state store, Airflow 3.3+) and deferral (serialized
      into the trigger). Before 3.3 there is no task state store: in reschedule mode give
      `target_version` or `newer_than`, or each reschedule captures a new baseline.

    **Maintenance commits are not data** (`include_maintenance=False`, the default): with `newer_than`
    or a baseline, only a newer version that changes data counts, and the sensor reports the newest
    such one. OPTIMIZE, statistics backfills (every file action `dataChange=false`) and commitInfo-only
    commits such as VACUUM START/END do not end the wait (PROTOCOL.md: `dataChange` false "only
    rearranges existing data or adds new statistics"). A poke that finds new versions reads their commit
    files, newest first, until it meets a data commit; in poke and deferrable modes maintenance versions
    already read are not read again. `include_maintenance=True` counts every version, as the latest.
    `target_version` waits for the version number, whatever its commit.

    A poll reads only `_last_checkpoint` and the `_delta_log` listing. A table that does not exist
    yet is waited for unless `wait_for_table=False`; a missing bucket (`BucketNotFoundError`) or a
    malformed endpoint (`InvalidArgumentError`) is an error, not a table to wait for. Transient
    storage errors (throttling, timeouts) are retried on the next poll, up to `max_transient_errors`
    in a row in every mode (the count survives reschedules in the task state store, Airflow 3.3+);
    one more fails the task with the last error. Permanent errors (a corrupt log, denied access)
    fail it at once.

    **Recreation**: a latest version below `newer_than` (or the baseline) means the table was deleted
    and created again. `allow_recreation=True` fires on it (the new table's latest version, with
    `"recreated": true` in the XCom), as Databricks' Delta version sensor does; otherwise the task
    fails with `TableRecreatedError` rather than wait for a version the new table may never reach.
    (A `target_version` wait cannot tell a recreated table from one not there yet.)

    **Lease** (`lease_ttl`: None, the default, takes none; `"6h"`, `"1d"`, a `timedelta` or seconds):
    once the sensor has the version it hands to the DAG, it pins it with a version lease
    (`delta.maintenance.leases.add_lease`, owner `<dag_id>.<task_id>.<run_id>`) and puts its `lease_id`
    (and `lease_expires_at`, `lease_owner`) in the XCom. The lease keeps that version's data files and log
    from the VACUUM and log cleanup this provider runs (`DeltaVacuumOperator`, `DeltaLogCleanupOperator`,
    `deltalog`, the library), not from Spark's or delta-rs's own maintenance, which do not read leases.
    The DAG's last reader releases it (`DeltaReleaseLeaseOperator`); otherwise it expires.
    `lease_location` names the lease folder when it is not `<table>/_delta_leases`.

    Returns `{version, table_uri, timestamp, operation}` as XCom (plus the lease's fields with
    `lease_ttl`) and attaches `{version, table_uri, timestamp, operation}` as `extra` to the events of
    its `outlets`. `table_uri`, the versions, `storage_conn_id`, `lease_ttl` and `lease_location` are
    templated.
    """

    template_fields: Sequence[str] = (
        *("table_uri", "target_version", "newer_than", "storage_conn_id", "lease_ttl", "lease_location"),
    )
    ui_color = "#00add4"

    def __init__(
        self,
        *,
        table_uri: str,
        target_version: int | str | None = None,
        newer_than: int | str | None = None,
        storage_conn_id: str | None = None,
        wait_for_table: bool = True,
        max_transient_errors: int = 5,
        allow_recreation: bool = False,
        include_maintenance: bool = False,
        lease_ttl: Any = None,
        lease_location: str | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table_uri = table_uri
        self.target_version = target_version
        self.newer_than = newer_than
        self.storage_conn_id = storage_conn_id
        self.wait_for_table = wait_for_table
        self.max_transient_errors = max_transient_errors
        self.allow_recreation = allow_recreation
        self.include_maintenance = parse_flag(include_maintenance, "include_maintenance")
        self.lease_ttl, self.lease_location = lease_ttl, lease_location  # read once rendered (`_check`)
        if not is_template(lease_ttl):  # a bad literal fails the DAG at parse time
            parse_lease_ttl(lease_ttl)
        if not is_template(lease_location):
            parse_location(lease_location, "lease_location")
        self.deferrable = deferrable
        self._transient_errors = 0  # poke mode: the same instance polls again
        self._scanned: int | None = None  # poke mode: versions up to this one hold no data change

    # -- helpers --------------------------------------------------------------------------------------
    def _options(self) -> dict[str, Any]:
        return storage_options(self.table_uri, self.storage_conn_id)

    def _targets(self) -> tuple[int | None, int | None]:
        return as_version(self.target_version, "target_version"), as_version(self.newer_than, "newer_than")

    def _baseline(self, context: Context, version: int | None) -> int | None:
        """The version seen at the first poke of this task try (persisted across reschedules)."""
        store = context.get("task_state_store") if hasattr(context, "get") else None
        if store is not None:
            try:
                saved = store.get(BASELINE_KEY)
            except Exception:  # no supervisor (a bare unit-test context): keep the baseline in memory
                store = None
            else:
                if saved is not None:
                    return int(saved)
                baseline = -1 if version is None else version
                store.set(BASELINE_KEY, baseline)
                return baseline
        if getattr(self, "_first_seen", None) is None:
            self._first_seen = -1 if version is None else version
        return self._first_seen

    def _publish(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """Attach the event to the outlets' asset events; return the XCom value."""
        payload = {k: event[k] for k in ("version", "table_uri", "timestamp", "operation")}
        if event.get("recreated"):
            payload["recreated"] = True
        outlet_events = context.get("outlet_events") if hasattr(context, "get") else None
        if outlet_events is not None:
            for outlet in self.outlets or ():
                try:
                    outlet_events[outlet].extra = payload
                except (KeyError, TypeError, AttributeError):
                    self.log.warning("cannot attach the version to outlet %r", outlet)
        self.log.info("%s reached version %s (%s)", payload["table_uri"], payload["version"], payload["operation"])
        return {**payload, **self._take_lease(context, payload["version"])}

    def _take_lease(self, context: Context, version: int) -> dict[str, Any]:
        """With `lease_ttl`: pin `version` (`add_lease`) and return the lease's XCom fields; else nothing."""
        ttl = parse_lease_ttl(self.lease_ttl)
        if ttl is None:
            return {}
        owner = lease_owner(context, self.task_id, self.dag_id)
        location = parse_location(self.lease_location, "lease_location")
        lease = take_lease(
            self.table_uri, version, ttl, owner=owner, location=location, storage_options=self._options()
        )
        self.log.info(
            "leased version %s to %s until %s: lease %s", version, owner, lease["lease_expires_at"], lease["lease_id"]
        )
        return lease

    def _check(self, context: Context) -> tuple[dict[str, Any] | None, int | None]:
        """(event if done, baseline) after one poll."""
        target, newer = self._targets()
        parse_lease_ttl(self.lease_ttl), parse_location(self.lease_location, "lease_location")  # refused first
        options = self._options()
        version = probe_table(self.table_uri, options, wait_for_table=self.wait_for_table)
        baseline = None if target is not None or newer is not None else self._baseline(context, version)
        self.log.info("%s: latest version %s", self.table_uri, "none yet" if version is None else version)
        if version is None:
            return None, baseline
        if recreated(version, target, newer, baseline):
            if not self.allow_recreation:
                raise recreation_error(self.table_uri, version, newer, baseline)
            self.log.warning("%s was recreated: firing on its version %s", self.table_uri, version)
            return {**version_event(self.table_uri, options, version), "recreated": True}, baseline
        if not condition_met(version, target, newer, baseline):
            return None, baseline
        if target is None and not self.include_maintenance:
            reference = newer if newer is not None else baseline
            assert reference is not None  # condition_met holds without a target
            scanned = self._scanned
            after = scanned if scanned is not None and reference <= scanned < version else reference
            found = last_data_version(self.table_uri, options, after, version)
            if found is None:
                self.log.info("%s: versions %s..%s change no data (maintenance)", self.table_uri, after + 1, version)
                self._scanned = version
                return None, baseline
            version = found
        return version_event(self.table_uri, options, version), baseline

    def _stored_error_count(self, context: Context) -> tuple[Any | None, int]:
        """(task state store, transient errors in a row it holds); (None, 0) without a working store
        (Airflow < 3.3, or a bare unit-test context with no supervisor)."""
        store = context.get("task_state_store") if hasattr(context, "get") else None
        if store is None:
            return None, 0
        try:
            return store, int(store.get(TRANSIENT_ERRORS_KEY) or 0)
        except Exception:
            return None, 0

    def _count_transient_error(self, context: Context) -> int:
        """One more transient error in a row; the count so far (persisted across reschedules when possible)."""
        store, stored = self._stored_error_count(context)
        if store is None:
            self._transient_errors += 1
            return self._transient_errors
        store.set(TRANSIENT_ERRORS_KEY, stored + 1)
        return stored + 1

    def _reset_transient_errors(self, context: Context) -> None:
        self._transient_errors = 0
        store, stored = self._stored_error_count(context)
        if store is not None and stored:
            store.set(TRANSIENT_ERRORS_KEY, 0)

    # -- sensor ---------------------------------------------------------------------------------------
    def poke(self, context: Context) -> PokeReturnValue | bool:
        try:
            event, _ = self._check(context)
        except Exception as exc:
            if not is_transient(exc):
                raise
            failures = self._count_transient_error(context)
            if failures > self.max_transient_errors:
                self._reset_transient_errors(context)  # a retry of the task starts counting afresh
                self.log.error(
                    "%s: %d transient errors in a row (max_transient_errors=%d): giving up",
                    self.table_uri,
                    failures,
                    self.max_transient_errors,
                )
                raise
            self.log.warning(
                "transient error polling %s (%d/%d), will poll again: %s",
                self.table_uri,
                failures,
                self.max_transient_errors,
                exc,
            )
            return False
        self._reset_transient_errors(context)
        if event is None:
            return False
        return PokeReturnValue(is_done=True, xcom_value=self._publish(context, event))

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        target, newer = self._targets()
        try:
            event, baseline = self._check(context)
        except Exception as exc:
            # With an explicit version the trigger can take over the retries; a baseline needs one good poll.
            if not is_transient(exc) or (target is None and newer is None):
                raise
            self.log.warning("transient error polling %s, deferring to the trigger: %s", self.table_uri, exc)
            event, baseline = None, None
        if event is not None:
            return self._publish(context, event)
        self.defer(
            trigger=DeltaVersionTrigger(
                self.table_uri,
                target_version=target,
                newer_than=newer,
                baseline=baseline,
                storage_conn_id=self.storage_conn_id,
                poll_interval=float(self.poke_interval),
                wait_for_table=self.wait_for_table,
                max_transient_errors=self.max_transient_errors,
                allow_recreation=self.allow_recreation,
                include_maintenance=self.include_maintenance,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout) if self.timeout is not None else None,
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """Resume after the trigger fired: fail on its error, else publish the version."""
        if event.get("status") != "success":
            message = f"{event.get('error_class', 'DeltaError')}: {event.get('message')}"
            if self.soft_fail:
                raise AirflowSkipException(message)
            raise AirflowException(message)
        return self._publish(context, event)
