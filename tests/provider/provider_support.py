"""Helpers shared by the provider tests: small real tables and a task state store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from airflow_delta_provider.testing import DeltaLogBuilder

NOW = 1_700_000_000_000


def small_table(tmp_path: Path, commits: int = 2) -> DeltaLogBuilder:
    b = DeltaLogBuilder(tmp_path / "t", schema={"id": "long", "date": "string"}, partition_columns=["date"])
    b.create()
    for i in range(commits):
        b.append([f"part-{i}.parquet"], size=100 + i, partition={"date": f"2024-01-0{i + 1}"})
    return b


class TaskStateStore:
    """Stand-in for Airflow 3.3's `context["task_state_store"]` (the real one talks to the task
    supervisor, which only exists inside a running task). Same get/set contract."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)

    def set(self, key: str, value: Any, **_: Any) -> None:
        self.data[key] = value


def task_context(tmp_path: Path) -> dict[str, Any]:
    """The bits of a task context the operators read (`ti.dag_id`, `ti.task_id`, `run_id`)."""

    class TI:
        dag_id, task_id = "d", "t"

    return {"ti": TI(), "run_id": "manual__1"}
