"""`last_version` picks the latest result, not the highest version: a recreated table restarts low."""

from __future__ import annotations

from airflow_delta_provider.version_watch import last_version


def test_a_recreated_table_is_not_held_to_the_old_tables_versions() -> None:
    old = {"table_uri": "/t", "version": 40, "timestamp_ms": 1_000}
    new = {"table_uri": "/t", "version": 3, "timestamp_ms": 5_000}
    assert last_version([old, new]) == 3
    assert last_version([new, old]) == 3


def test_same_table_latest_commit_wins_then_highest_version() -> None:
    runs = [{"version": v, "timestamp_ms": 1_000 + v} for v in (4, 9, 7)]
    assert last_version(runs) == 9
    assert last_version([{"version": 5, "timestamp_ms": 7}, {"version": 6, "timestamp_ms": 7}]) == 6
    assert last_version([{"version": 2}, {"version": 8}, 5]) == 8  # no commit times: the highest version
