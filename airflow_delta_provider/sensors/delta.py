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
from ..operators.leases import parse_lease_ttl, parse_location, take_lease
from ..triggers.delta import DeltaVersionTrigger
from ..version_watch import as_version, is_transient, probe_table, storage_options, wait_event

if TYPE_CHECKING:  # pragma: no cover
    from airflow.providers.common.compat.sdk import Context

BASELINE_KEY = "delta_version_baseline"
#: Task state store key of the count of transient errors in a row (reschedule mode, Airflow 3.3+).
TRANSIENT_ERRORS_KEY = "delta_transient_errors"


class DeltaVersionSensor(BaseSensorOperator):
    """Wait until the Delta table at `table_uri` reaches a version (docs/airflow.md "DeltaVersionSensor").

    `target_version=N`: the latest version is `>= N`; `newer_than=N`: a version `> N` that changes data
    (maintenance commits do not count unless `include_maintenance=True`: PROTOCOL.md "Add File and Remove
    File"); neither: the same past the version seen at the first poke (kept across reschedules in the task
    state store on Airflow 3.3+, and across deferral in the trigger). A missing bucket or malformed endpoint
    fails; transient storage errors are retried up to `max_transient_errors` in a row. A table recreated
    below the reference fails with `TableRecreatedError` unless `allow_recreation=True`. `lease_ttl` leases
    the version handed to the DAG. XCom, and `extra` of the `outlets`' events: `{version, table_uri,
    timestamp, operation}` (plus the lease's fields).
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
        self._first_seen: int | None = None

    def _targets(self) -> tuple[int | None, int | None]:
        return as_version(self.target_version, "target_version"), as_version(self.newer_than, "newer_than")

    @staticmethod
    def _state(context: Context, key: str) -> tuple[Any | None, Any]:
        """(task state store, its value of `key`); (None, None) without a working store (Airflow < 3.3, or
        a bare unit-test context with no supervisor)."""
        store = context.get("task_state_store") if hasattr(context, "get") else None
        try:
            return store, None if store is None else store.get(key)
        except Exception:
            return None, None

    def _baseline(self, context: Context, version: int | None) -> int:
        """The version seen at the first poke of this task try (persisted across reschedules)."""
        store, saved = self._state(context, BASELINE_KEY)
        if saved is not None:
            return int(saved)
        baseline = -1 if version is None else version
        if store is not None:
            store.set(BASELINE_KEY, baseline)
            return baseline
        if self._first_seen is None:
            self._first_seen = baseline
        return self._first_seen

    def _transient_error_count(self, context: Context, *, reset: bool = False) -> int:
        """One more transient error in a row (`reset`: none); the count, kept across reschedules when possible."""
        if reset:
            self._transient_errors = 0
        store, stored = self._state(context, TRANSIENT_ERRORS_KEY)
        if store is None:
            self._transient_errors = 0 if reset else self._transient_errors + 1
            return self._transient_errors
        count = 0 if reset else int(stored or 0) + 1
        if count or stored:
            store.set(TRANSIENT_ERRORS_KEY, count)
        return count

    def _publish(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """Attach the event to the outlets' asset events; return the XCom value (with the lease, if any)."""
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
        location = parse_location(self.lease_location, "lease_location")
        return {**payload, **take_lease(self, context, payload["version"], parse_lease_ttl(self.lease_ttl), location)}

    def _check(self, context: Context) -> tuple[dict[str, Any] | None, int | None]:
        """(event if done, baseline) after one poll."""
        target, newer = self._targets()
        parse_lease_ttl(self.lease_ttl), parse_location(self.lease_location, "lease_location")  # refused first
        options = storage_options(self.table_uri, self.storage_conn_id)
        version = probe_table(self.table_uri, options, wait_for_table=self.wait_for_table)
        baseline = None if target is not None or newer is not None else self._baseline(context, version)
        self.log.info("%s: latest version %s", self.table_uri, "none yet" if version is None else version)
        if version is None:
            return None, baseline
        scanned = self._scanned
        event, self._scanned = wait_event(
            self.table_uri,
            options,
            version,
            target_version=target,
            newer_than=newer,
            baseline=baseline,
            scanned=scanned,
            allow_recreation=self.allow_recreation,
            include_maintenance=self.include_maintenance,
        )
        if event is not None and event.get("recreated"):
            self.log.warning("%s was recreated: firing on its version %s", self.table_uri, version)
        elif self._scanned != scanned:
            self.log.info("%s: the versions up to %s change no data (maintenance)", self.table_uri, version)
        return event, baseline

    def poke(self, context: Context) -> PokeReturnValue | bool:
        try:
            event, _ = self._check(context)
        except Exception as exc:
            if not is_transient(exc):
                raise
            failures, most = self._transient_error_count(context), self.max_transient_errors
            if failures > most:
                self._transient_error_count(context, reset=True)  # a retry of the task starts counting afresh
                self.log.error(
                    "%s: %d transient errors in a row (max_transient_errors=%d): giving up",
                    self.table_uri,
                    failures,
                    most,
                )
                raise
            self.log.warning(
                "transient error polling %s (%d/%d), will poll again: %s", self.table_uri, failures, most, exc
            )
            return False
        self._transient_error_count(context, reset=True)
        return False if event is None else PokeReturnValue(is_done=True, xcom_value=self._publish(context, event))

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
