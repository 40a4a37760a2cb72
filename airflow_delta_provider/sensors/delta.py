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

from ..triggers.delta import DeltaVersionTrigger
from ..version_watch import as_version, condition_met, is_transient, probe_version, version_event

if TYPE_CHECKING:  # pragma: no cover
    from airflow.providers.common.compat.sdk import Context

BASELINE_KEY = "delta_version_baseline"


class DeltaVersionSensor(BaseSensorOperator):
    """Wait until the Delta table at `table_uri` reaches a version.

    - `target_version=N`: done when the latest version is `>= N`;
    - `newer_than=N` (templated, e.g. the version a previous run handled): done when it is `> N`;
    - neither: done when a version newer than the one seen at the first poke appears. The baseline
      survives reschedules (kept in the task state store, Airflow 3.3+) and deferral (serialized
      into the trigger). Before 3.3 there is no task state store: in reschedule mode give
      `target_version` or `newer_than`, or each reschedule captures a new baseline.

    A poll reads only `_last_checkpoint` and the `_delta_log` listing. A table that does not exist
    yet is waited for unless `wait_for_table=False`. Transient storage errors (throttling,
    timeouts) are retried on the next poll; permanent ones (a corrupt log, denied access) fail the
    task. Returns `{version, table_uri, timestamp, operation}` as XCom and attaches the same dict
    as `extra` to the events of its `outlets`.
    """

    template_fields: Sequence[str] = ("table_uri", "target_version", "newer_than")
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
        self.deferrable = deferrable

    # -- helpers --------------------------------------------------------------------------------------
    def _options(self) -> dict[str, Any]:
        if not self.storage_conn_id:
            return {}
        from ..hooks.delta import DeltaTableHook

        return DeltaTableHook(self.table_uri, self.storage_conn_id).storage_options()

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
        outlet_events = context.get("outlet_events") if hasattr(context, "get") else None
        if outlet_events is not None:
            for outlet in self.outlets or ():
                try:
                    outlet_events[outlet].extra = payload
                except (KeyError, TypeError, AttributeError):
                    self.log.warning("cannot attach the version to outlet %r", outlet)
        self.log.info("%s reached version %s (%s)", payload["table_uri"], payload["version"], payload["operation"])
        return payload

    def _check(self, context: Context) -> tuple[dict[str, Any] | None, int | None]:
        """(event if done, baseline) after one poll."""
        target, newer = self._targets()
        options = self._options()
        version = probe_version(self.table_uri, options, wait_for_table=self.wait_for_table)
        baseline = None if target is not None or newer is not None else self._baseline(context, version)
        self.log.info("%s: latest version %s", self.table_uri, "none yet" if version is None else version)
        if version is not None and condition_met(version, target, newer, baseline):
            return version_event(self.table_uri, options, version), baseline
        return None, baseline

    # -- sensor ---------------------------------------------------------------------------------------
    def poke(self, context: Context) -> PokeReturnValue | bool:
        try:
            event, _ = self._check(context)
        except Exception as exc:
            if is_transient(exc):
                self.log.warning("transient error polling %s, will poll again: %s", self.table_uri, exc)
                return False
            raise
        if event is None:
            return False
        return PokeReturnValue(is_done=True, xcom_value=self._publish(context, event))

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        event, baseline = self._check(context)
        if event is not None:
            return self._publish(context, event)
        target, newer = self._targets()
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
