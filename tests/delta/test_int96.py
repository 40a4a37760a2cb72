"""INT96 timestamps past 2262 survive a rewrite: data files are read at microseconds (Spark's precision), not
pyarrow's default nanoseconds, where 9999-12-31 wraps to 1816-03-29 and OPTIMIZE would write the wrong value."""

from __future__ import annotations

import pytest
from conftest import copy_table

deltalake = pytest.importorskip("deltalake")

from airflow_delta_provider.delta import DeltaLog  # noqa: E402
from airflow_delta_provider.delta.maintenance.optimize import optimize  # noqa: E402

TABLE = "delta-rs/table_with_edge_timestamps"


def _rows(path: str, version: int | None = None) -> list[dict]:
    """The rows of the active files at `version`, every file read at microseconds (delta-rs itself reads INT96
    at nanoseconds and cannot read this table: it is no oracle here)."""
    import pyarrow.parquet as pq

    dt = deltalake.DeltaTable(path, version=version)
    rows = []
    for name in dt.file_uris():
        rows += pq.read_table(name, coerce_int96_timestamp_unit="us").to_pylist()
    naive = [{k: v.replace(tzinfo=None) if hasattr(v, "tzinfo") else v for k, v in r.items()} for r in rows]
    return sorted(naive, key=repr)  # INT96 reads naive, the rewritten TIMESTAMP(us, UTC) aware: same instants


def test_optimize_keeps_int96_timestamps_past_2262(tmp_path):
    table = copy_table(TABLE, tmp_path)
    before = _rows(str(table))
    assert any(v.year == 9999 for row in before for v in row.values() if hasattr(v, "year")), "fixture changed?"
    version = DeltaLog.for_table(str(table)).update().version
    result = optimize(str(table), min_num_files=2)
    assert result.to_dict()["version"] == version + 1  # the two files were rewritten into one
    assert _rows(str(table)) == before
    assert _rows(str(table), version) == before
