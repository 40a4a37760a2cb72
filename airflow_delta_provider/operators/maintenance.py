"""The maintenance operators: log cleanup, VACUUM (with its quarantine's undo and purge), OPTIMIZE (Z-ORDER),
RESTORE, repair (FSCK), PURGE and the statistics backfill, each one command-layer action run by
`DeltaJobOperator`, its arguments from the action's options. Also importable from `operators.delta`."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .base import DeltaJobOperator

if TYPE_CHECKING:  # pragma: no cover
    from airflow.providers.common.compat.sdk import Context


class DeltaLogCleanupOperator(DeltaJobOperator):
    """Delta's metadata cleanup: commits, checkpoints and `.crc` files older than the log retention
    (`retention_hours`, default `delta.logRetentionDuration`), keeping the newest complete checkpoint at or
    before the cutoff and the checkpoint and commits live leases read. **Dry run by default**
    (`apply=False`); `write_checkpoint_first=True` writes a checkpoint at the cutoff first."""

    action = "cleanup_log"
    argument_defaults: Mapping[str, Any] = {"apply": False}
    summary_keys = (
        *("dry_run", "cutoff", "num_files", "bytes", "deleted", "earliest_readable_version"),
        *("kept_checkpoint_version", "reason"),
    )

    def describe(self, result: dict[str, Any]) -> str:
        dry = result["dry_run"]
        done = f"{'would delete' if dry else 'deleted'} {result['num_files']} files"
        kept = f"the log keeps versions from {result['earliest_readable_version']} (older data files may be vacuumed)"
        return f"{result['table']}: log cleanup {done}; {kept}{' (dry run: apply=True deletes)' if dry else ''}"


class DeltaVacuumOperator(DeltaJobOperator):
    """VACUUM: delete the files no version within retention (or under a live lease) needs.

    **Dry run by default**: the result is the plan. `dry_run=False` applies `plan` (a dry run's result, or
    its `result_uri`) or a fresh plan, re-validated against the latest snapshot first. `quarantine=True`
    (local engine only) moves the files aside instead, for `DeltaVacuumUndoOperator` to put back."""

    action = "vacuum"
    summary_keys = (
        *("dry_run", "version", "cutoff", "mode", "num_files", "bytes", "deleted", "deleted_bytes"),
        *("directories", "quarantine_id", "quarantine", "lease_kept_files", "lease_kept_bytes"),
    )
    summary_counts = (("num_dropped", "dropped"), ("num_leases", "leases"))

    def describe(self, result: dict[str, Any]) -> str:
        table, moves, qid = result["table"], result.get("quarantine"), result.get("quarantine_id")
        dry = result["dry_run"]
        if moves is not None and dry:
            return f"{table}: vacuum would move {moves.get('files')} files ({moves.get('bytes')} bytes) to a quarantine"
        if moves is not None:
            moved = f"{moves.get('moved')} files ({moves.get('moved_bytes')} bytes)"
            undo = f"DeltaVacuumUndoOperator(quarantine_id={qid!r}) puts them back"
            return f"{table}: vacuum moved {moved} to quarantine {qid} ({moves.get('location')}); {undo}"
        if dry:
            return f"{table}: vacuum would delete {result['num_files']} files ({result['bytes']} bytes) (dry run)"
        return f"{table}: vacuum deleted {result.get('deleted')} files ({result.get('deleted_bytes')} bytes)"


class DeltaVacuumUndoOperator(DeltaJobOperator):
    """Undo a quarantining VACUUM: every file of quarantine `quarantine_id` (templated; or the VACUUM task's
    XCom) goes back to its path. Refused, moving nothing, when something else sits at a path, or the
    quarantine is another table's or being purged; a rerun continues an interrupted undo."""

    action = "vacuum_undo"
    argument_defaults: Mapping[str, Any] = {"quarantine_id": inspect.Parameter.empty}
    summary_keys = (
        *("quarantine_id", "location", "state", "num_files", "moved", "moved_bytes", "finished"),
        "already_in_place",
    )
    summary_counts = (("num_missing", "missing"),)

    def summarize(self, result: dict[str, Any], context: Context, result_uri: str | None) -> dict[str, Any]:
        summary = super().summarize(result, context, result_uri)
        summary["version"] = (result.get("manifest") or {}).get("version")
        return summary

    def describe(self, result: dict[str, Any]) -> str:
        back = f"{result.get('moved')} files back ({result.get('moved_bytes')} bytes)"
        return f"{result['table']}: quarantine {result.get('quarantine_id')} {result.get('state')}: {back}"


class DeltaVacuumPurgeOperator(DeltaJobOperator):
    """Delete, for good, the table's VACUUM quarantines at least `older_than_hours` old (default a week);
    unfinished ones are left and reported. **Dry run by default** (`dry_run=True`)."""

    action = "vacuum_purge"
    summary_keys = ("dry_run", "older_than_ms", "num_purged", "deleted_files", "deleted_bytes")
    summary_counts = (("num_skipped", "skipped"),)

    def summarize(self, result: dict[str, Any], context: Context, result_uri: str | None) -> dict[str, Any]:
        summary = super().summarize(result, context, result_uri)
        summary["quarantine_ids"] = [p["quarantine_id"] for p in result.get("purged") or ()]
        return summary

    def describe(self, result: dict[str, Any]) -> str:
        done = "would purge" if result["dry_run"] else "purged"
        counts = (
            f"{result['num_purged']} quarantines ({result['deleted_files']} files, {result['deleted_bytes']} bytes)"
        )
        left = f"; {len(result['skipped'])} left" if result.get("skipped") else ""
        return f"{result['table']}: {done} {counts} at least {result['older_than_ms'] / 3_600_000:g} hours old{left}"


class DeltaOptimizeOperator(DeltaJobOperator):
    """OPTIMIZE: compact small files into files of about `target_size` bytes, in `dataChange=false` commits.

    Applies by default, as Delta and delta-rs do (it deletes nothing; `dry_run=True` only plans). A
    concurrent commit that removed an input file fails it with a typed conflict; appends do not.
    `max_files`/`max_bytes` bound one run (most valuable bins first); the rest is reported over budget."""

    action = "optimize"
    argument_defaults: Mapping[str, Any] = {"dry_run": False}
    summary_keys = (
        *("dry_run", "read_version", "version", "versions", "num_files_removed", "num_files_added"),
        *("bytes_removed", "bytes_added", "zorder_by", "zorder_overlap"),
        *("num_files_over_budget", "bytes_over_budget"),
    )
    summary_counts = (("num_partitions", "partitions"),)

    def describe(self, result: dict[str, Any]) -> str:
        verb = ("would z-order" if result["dry_run"] else "z-ordered") if result.get("zorder_by") else None
        verb = verb or ("would compact" if result["dry_run"] else "compacted")
        done = f"{verb} {result.get('num_files_removed')} files"
        into = f"({result.get('bytes_removed')} bytes) into {result.get('num_files_added')}"
        at = f" at version {result['version']}" if result.get("version") is not None else ""
        return f"{result['table']}: optimize {done} {into}{at}"


class DeltaRestoreOperator(DeltaJobOperator):
    """RESTORE: make the latest version hold what `version` (or `timestamp`) held, in one `RESTORE` commit.
    A vacuumed file to add back refuses it unless `allow_partial=True`. **Dry run by default**:
    `dry_run=False` with `plan` (that dry run's result or `result_uri`) applies it only if a fresh plan matches."""

    action = "restore"
    summary_keys = ("dry_run", "version", "read_version", "target_version", "metrics")
    summary_counts = (
        ("num_restored", "files_restored"),
        ("num_removed", "files_removed"),
        ("num_missing", "missing_files"),
    )

    def describe(self, result: dict[str, Any]) -> str:
        m = result.get("metrics") or {}
        done = "would restore" if result["dry_run"] else f"restored (version {result['version']})"
        counts = f"{m.get('numRestoredFiles')} files back, {m.get('numRemovedFiles')} removed"
        return f"{result['table']}: {done} version {result['target_version']}: {counts}"


class DeltaRepairOperator(DeltaJobOperator):
    """Repair (Delta's `FSCK REPAIR TABLE`): the active files storage no longer holds (one HEAD each),
    removed in an `FSCK` commit so readers stop failing on them. **Dry run by default** (`dry_run=True`)."""

    action = "repair"
    summary_keys = ("dry_run", "version", "read_version", "num_files_checked", "num_missing", "missing_bytes")

    def describe(self, result: dict[str, Any]) -> str:
        done = "would remove" if result["dry_run"] else f"removed (version {result['version']})"
        return f"{result['table']}: repair {done} {result.get('num_missing')} missing files"


class DeltaPurgeOperator(DeltaJobOperator):
    """PURGE (Delta's `REORG TABLE ... APPLY (PURGE)`): rewrite the files whose deletion vector hides at least
    `min_deleted_ratio` of their rows so those rows are physically gone (a `REORG` commit, `dataChange=false`).
    **Dry run by default**: `dry_run=False` applies `plan` (a dry run's result, its `plan`, or its `result_uri`),
    re-validated, or a fresh plan. The old files stay until VACUUM deletes them after the table's retention."""

    action = "purge"
    summary_keys = (
        *("dry_run", "read_version", "version", "versions", "num_files_removed", "num_files_added"),
        *("bytes_removed", "bytes_added", "num_deleted_rows_purged", "erasable_after_ms"),
    )
    summary_counts = (("num_dropped", "dropped"),)

    def describe(self, result: dict[str, Any]) -> str:
        done = "would rewrite" if result["dry_run"] else f"rewrote (version {result['version']})"
        files = f"{result.get('num_files_removed')} files ({result.get('bytes_removed')} bytes)"
        return f"{result['table']}: purge {done} {files}, {result.get('num_deleted_rows_purged')} deleted rows"


class DeltaStatsBackfillOperator(DeltaJobOperator):
    """Statistics backfill (Delta's `COMPUTE STATS`): recompute `add.stats` of the files that lack them, or whose
    stats miss columns the table now names (`tighten=True`: also wide ones), re-added with `dataChange=false`.
    **Dry run by default**. Runs in the worker process: the Spark engine has no stats recomputer yet, so
    `engine="spark"` is refused before anything runs."""

    action = "stats_backfill"
    summary_keys = ("dry_run", "read_version", "version", "versions", "metrics")
    summary_counts = (("num_dropped", "files_dropped"),)

    def summarize(self, result: dict[str, Any], context: Context, result_uri: str | None) -> dict[str, Any]:
        summary = super().summarize(result, context, result_uri)
        plan = result.get("plan") or {}
        summary.update({k: plan.get(k) for k in ("num_files_checked", "num_files", "num_files_over_budget")})
        return summary

    def describe(self, result: dict[str, Any]) -> str:
        plan = result.get("plan") or {}
        found = f"{plan.get('num_files')} of {plan.get('num_files_checked')} files need stats"
        done = "dry run" if result["dry_run"] else f"committed version {result['version']}"
        return f"{result['table']}: stats backfill {done}: {found}"
