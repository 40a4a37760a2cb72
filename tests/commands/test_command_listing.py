"""`engine="auto"` sizes the log segment from one listing and loads that same segment: it lists the log no
more often than `engine="local"` (a real local store, its `list_from` counted)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import copy_table

from airflow_delta_provider.commands.command import Request, run
from airflow_delta_provider.delta.storage.local import LocalLogStore


@pytest.mark.parametrize("name", ["delta-golden/checkpoint", "delta-rs/delta-0.8.0-partitioned"])
def test_auto_lists_the_log_as_often_as_local(tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    table = copy_table(name, tmp_path)
    calls: list[str] = []
    real = LocalLogStore.list_from

    def counted(self: LocalLogStore, directory: str, start: str = "") -> list:
        calls.append(directory)
        return real(self, directory, start)

    monkeypatch.setattr(LocalLogStore, "list_from", counted)
    counts, bodies = {}, {}
    for engine in ("local", "auto"):
        calls.clear()
        outcome = run(Request(table=str(table), action="snapshot", engine=engine))
        counts[engine] = len(calls)
        bodies[engine] = outcome.body
        assert outcome.engine == "local"
    assert counts["auto"] == counts["local"] >= 1
    assert bodies["auto"] == bodies["local"]


@pytest.mark.airflow
def test_the_operators_auto_path_lists_the_log_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The operator sizes the segment (`plan_engine`) and runs in process on that same segment: one listing
    for `engine="auto"`, as for `engine="local"`."""
    pytest.importorskip("airflow")
    from airflow_delta_provider.operators.delta import SnapshotReplayOperator

    table = copy_table("delta-golden/checkpoint", tmp_path)
    calls: list[str] = []
    real = LocalLogStore.list_from

    def counted(self: LocalLogStore, directory: str, start: str = "") -> list:
        calls.append(directory)
        return real(self, directory, start)

    monkeypatch.setattr(LocalLogStore, "list_from", counted)
    counts = {}
    for engine in ("local", "auto"):
        calls.clear()
        op = SnapshotReplayOperator(task_id="r", table_uri=str(table), engine=engine, since_version=None)
        result = op.execute({"ti": None, "run_id": "manual__1"})
        assert result["engine"] == "local"
        counts[engine] = len(calls)
    assert counts["auto"] == counts["local"] >= 1
