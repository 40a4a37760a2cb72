"""The operators: one command-layer action on a Delta table each, run by `hooks.job.DeltaJobHook`.

This is their public module: the base (`DeltaJobOperator`, in `base`), the read-only operators (here), the
maintenance operators (`maintenance`) and the lake's (`lake`). They subclass `SparkSubmitOperator` (as
`SparkJDBCOperator` does), so connection handling, driver tracking, `on_kill` and every spark-submit option
are the Spark provider's own. Arguments, XCom keys and semantics: docs/airflow.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

try:
    from airflow.providers.common.compat.sdk import AirflowFailException
except ImportError:  # pragma: no cover
    from airflow.exceptions import AirflowFailException

from ..commands.checks import KNOWN_CHECKS, failed_checks_message, validate_checks
from ..commands.commit_checks import validate_commit_checks, version_ranges
from ..hooks.job import SUBMIT_CONF_DEFAULTS, DeltaJobError, spark_target  # noqa: F401 (re-exported)
from ..version_watch import last_version
from .base import REPORT_PAGES, DeltaJobOperator, DeltaResultLink, report_page, result_link  # noqa: F401
from .lake import DeltaLakePlanOperator, DeltaLakeScanOperator  # noqa: F401 (public here)
from .leases import DeltaReleaseLeaseOperator as DeltaReleaseLeaseOperator  # re-exported with the operators
from .leases import take_lease
from .maintenance import (  # noqa: F401 (public here)
    DeltaLogCleanupOperator,
    DeltaOptimizeOperator,
    DeltaPurgeOperator,
    DeltaRepairOperator,
    DeltaRestoreOperator,
    DeltaStatsBackfillOperator,
    DeltaVacuumOperator,
    DeltaVacuumPurgeOperator,
    DeltaVacuumUndoOperator,
)

if TYPE_CHECKING:  # pragma: no cover
    from airflow.providers.common.compat.sdk import Context


class DeltaCheckFailed(AirflowFailException):
    """A declarative check of the table state failed (not retried: the state will not change by retrying)."""


#: `since_version` default: the version the previous successful run of this task checked (its XCom).
PREVIOUS_RUN = "previous"


class SnapshotReplayOperator(DeltaJobOperator):
    """Replay a table's log at a version (latest, `version` or `timestamp`), report its state, check it.

    `checks` hold at the replayed version and, with `since_version` (default: the version the previous run
    checked, from its XCom), at every version after it; a failure raises `DeltaCheckFailed` naming the
    first failing version. `lease_ttl` leases the replayed version (see `DeltaVersionSensor`)."""

    action = "snapshot"
    summary_keys = (
        *("version", "timestamp", "timestamp_ms", "operation", "num_files", "size_bytes", "num_tombstones"),
        *("protocol", "partition_columns", "set_transactions", "checkpoint_version", "spark_app_id"),
        "first_failing_version",
    )
    template_fields: Sequence[str] = (
        *DeltaJobOperator.template_fields,
        *("checks", "since_version", "fail_on_data_loss", "lease_ttl", "lease_location"),
    )

    def __init__(
        self,
        *,
        checks: Mapping[str, Any] | None = None,
        since_version: int | str | None = PREVIOUS_RUN,
        fail_on_data_loss: bool = True,
        lease_ttl: Any = None,
        lease_location: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.set_arguments(lease_ttl=lease_ttl, lease_location=lease_location)
        self.since_version = since_version
        if since_version != PREVIOUS_RUN:
            self.set_arguments(since_version=since_version)
        self.set_arguments(fail_on_data_loss=fail_on_data_loss)
        self.checks = dict(checks) if checks else None
        self._since: int | None = None
        if self.checks:  # fail at parse time on typos
            (validate_checks if since_version is None else validate_commit_checks)(self.checks, allow_templates=True)

    def _resolve_since(self, context: Context) -> int | None:
        if self.since_version != PREVIOUS_RUN:
            return self.argument("since_version")
        pull = getattr(context.get("ti"), "xcom_pull", None)
        if pull is None:
            return None
        return last_version(pull(task_ids=self.task_id, include_prior_dates=True), self.table_uri)

    def execute(self, context: Context) -> Any:
        self._since = self._resolve_since(context)
        if self._since is None and self.since_version == PREVIOUS_RUN:
            self.log.info("no earlier run of %s checked this table: checking the replayed version only", self.task_id)
        ttl, location = self.argument("lease_ttl"), self.argument("lease_location")  # refused before the job
        summary = super().execute(context)
        return {**summary, **take_lease(self, context, summary["version"], ttl, location)}

    def extra_request_fields(self) -> dict[str, Any]:
        if self._since is None:
            known = {k: v for k, v in (self.checks or {}).items() if k in KNOWN_CHECKS}
            return {"checks": validate_checks(known)} if self.checks else {}
        fields = {"since_version": self._since, "fail_on_data_loss": self.argument("fail_on_data_loss")}
        return {**fields, "checks": validate_commit_checks(self.checks)} if self.checks else fields

    def summarize(self, result: dict[str, Any], context: Context, result_uri: str | None) -> dict[str, Any]:
        summary = super().summarize(result, context, result_uri)
        summary.update(
            small_file_ratio=result.get("file_summary", {}).get("small_file_ratio"),
            checks={r["name"]: r["passed"] for r in result.get("checks", [])},
            checked_versions=result.get("checked_versions", [result["version"]]),
        )
        failed = failed_checks_message(result.get("checks", []))
        if failed and summary["first_failing_version"] is None:
            summary["first_failing_version"] = result["version"]
        in_range = result.get("commit_checks_failed")
        if failed or in_range:
            first = summary["first_failing_version"]
            parts = [f"at version {result['version']}: {failed}" if failed else None, in_range]
            raise DeltaCheckFailed(
                f"Delta table checks failed for {result['table']} (first failing version {first}): "
                + "; ".join(p for p in parts if p)
            )
        return summary

    def describe(self, result: dict[str, Any]) -> str:
        checked = version_ranges(result.get("checked_versions", [result["version"]]))
        files = f"{result['num_files']} files, {result['size_bytes']} bytes"
        return f"{result['table']} at version {result['version']}: {files}; checked versions {checked}"


class TombstoneReportOperator(DeltaJobOperator):
    """Report tombstones (read-only): retained vs past retention (safe for VACUUM), bytes reclaimable, per
    partition. `retention_hours` overrides `delta.deletedFileRetentionDuration`."""

    action = "tombstones"
    summary_keys = (
        *("version", "num_tombstones", "retained", "expired", "retained_bytes", "reclaimable_bytes"),
        *("removed_without_size", "oldest_deletion_ms", "newest_deletion_ms", "retention"),
    )
    summary_counts = (("num_partitions", "partitions"),)

    def describe(self, result: dict[str, Any]) -> str:
        found = f"{result['num_tombstones']} tombstones, {result['expired']} past retention"
        found += f" ({result['reclaimable_bytes']} bytes reclaimable)"
        return f"{result['table']} at version {result['version']}: {found}; nothing deleted"


class DeltaCheckpointOperator(DeltaJobOperator):
    """Write a checkpoint at the latest version (or `version`), as Delta Spark writes it (classic, or V2 on
    a `v2Checkpoint` table); `_last_checkpoint` moves only once it is read back and matches the replay.
    Idempotent: an existing checkpoint is not rewritten."""

    action = "checkpoint"
    summary_keys = (
        *("version", "kind", "path", "num_actions", "num_add_files", "num_tombstones", "size_in_bytes"),
        *("last_checkpoint_updated", "written"),
    )

    def describe(self, result: dict[str, Any]) -> str:
        done = "written" if result["written"] else "already there"
        return f"{result['table']}: checkpoint at version {result['version']} {done} ({result['num_add_files']} files)"
