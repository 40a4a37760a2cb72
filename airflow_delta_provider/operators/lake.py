"""The lake operators: discover a lake's tables and read their health (`DeltaLakeScanOperator`), and plan its
maintenance within a budget (`DeltaLakePlanOperator`). Also importable from `operators.delta`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..commands import arguments as arg
from ..commands.request import Request
from ..delta.errors import InvalidArgumentError
from ..delta.protocol.lake_policy import DEFAULT_MAX_DEPTH
from ..version_watch import storage_options
from .base import DeltaJobOperator

if TYPE_CHECKING:  # pragma: no cover
    from airflow.providers.common.compat.sdk import Context


class _LakeOperator(DeltaJobOperator):
    """A lake action over `prefixes` (walked for tables) and `tables`; the task's `table_uri` is the first of
    them (it labels the result). Runs in the worker process: a lake scan reads logs only."""

    def __init__(
        self,
        *,
        prefixes: Sequence[str] | str = (),
        tables: Sequence[str] | str = (),
        policy: str | None = None,
        max_depth: int | str = DEFAULT_MAX_DEPTH,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("table_uri", "")  # set from the rendered prefixes and tables (`lake_label`)
        super().__init__(**kwargs)
        self.set_arguments(prefixes=prefixes, tables=tables, policy=policy, max_depth=max_depth)
        if not any(arg.is_template(v) for v in (prefixes, tables)):
            self.lake_label()  # neither given: fail at parse time

    def lake_label(self) -> str:
        """The first prefix, else the first table: the lake's name in the result and its storage options."""
        found = self.argument("prefixes") or self.argument("tables")
        if not found:
            raise InvalidArgumentError("give at least one of prefixes or tables", argument="prefixes")
        return found[0]

    def _storage_options(self) -> dict[str, Any]:
        return storage_options(self.lake_label(), self.storage_conn_id)

    def build_request(self, storage_options: Mapping[str, Any]) -> Request:
        self.table_uri = self.lake_label()
        return super().build_request(storage_options)


class DeltaLakeScanOperator(_LakeOperator):
    """Discover the Delta tables under `prefixes` (plus `tables`) and read each one's health from its log
    (`delta.lake.scan`), with `policy`'s thresholds. The full scan is written to `result_uri`; the XCom is a
    summary: the tables read and the errors (a table that cannot be read never fails the task)."""

    action = "lake_scan"

    def summarize(self, result: dict[str, Any], context: Context, result_uri: str | None) -> dict[str, Any]:
        summary = super().summarize(result, context, result_uri)
        errors = [*result["discovery"]["errors"], *result["errors"]]
        summary.update(
            tables=[{"table": h["table"], "version": h["version"]} for h in result["tables"]],
            num_tables=len(result["tables"]),
            errors=[{"table": e.get("table") or e.get("prefix"), "error_class": e.get("error_class")} for e in errors],
            requests=result["discovery"]["requests"],
        )
        return summary

    def describe(self, result: dict[str, Any]) -> str:
        errors = len(result["discovery"]["errors"]) + len(result["errors"])
        return f"lake scan of {result['table']}: {len(result['tables'])} tables read, {errors} errors"


class DeltaLakePlanOperator(_LakeOperator):
    """Plan the lake's maintenance (`delta.lake.plan`): each table's candidate tasks ranked, cut to the budget
    (`budget_bytes`, `budget_requests`, `budget_seconds`; None: unlimited). The full plan is written to
    `result_uri`; the XCom is the tasks grouped per table, `[{"table_uri": ..., "tasks": [...]}]` in running
    order, ready for `.expand()` (a table with nothing to do is left out)."""

    action = "lake_plan"

    def summarize(self, result: dict[str, Any], context: Context, result_uri: str | None) -> list[dict[str, Any]]:  # type: ignore[override]
        return [{"table_uri": group["table"], "tasks": group["tasks"]} for group in result["by_table"]]

    def describe(self, result: dict[str, Any]) -> str:
        totals = result["totals"]
        left = f"{len(result['deferred'])} deferred by the budget, {len(result['errors'])} errors"
        return f"lake plan of {result['table']}: {totals['tasks']} tasks on {len(result['by_table'])} tables; {left}"
