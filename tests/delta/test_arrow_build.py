"""Pandas-free Arrow builders: same arrays as pyarrow's own conversion, and loads that never import pandas.

A load and its counts allocate nothing through pandas (the builders assemble Arrow buffers).

pyarrow imports pandas (~0.23 s) on its first conversion of Python objects; the local engine builds
its arrays from buffers instead (`arrow_build`). These tests pin both halves: the builders give
exactly `pa.array`'s result, and a load plus every count a sensor or the CLI reads leaves pandas
unimported.
"""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
import pytest
from conftest import CORPUS
from support.reference_state import table_from_rows

from airflow_delta_provider.delta.read.arrow_build import (
    column,
    int64_scalar,
    string_array,
    string_scalar,
)
from airflow_delta_provider.delta.read.file_state import ADD_SCHEMA, DV_TYPE, REMOVE_SCHEMA

STR_MAP = pa.map_(pa.string(), pa.string())


@pytest.mark.parametrize(
    "values",
    [[], ["a"], ["a", None, "é€", ""], [None, None], ["x" * 1000, "naïve", None, "p\x00q"]],
    ids=["empty", "one", "mixed", "all-null", "long-and-nul"],
)
def test_string_array_equals_pa_array(values):
    built = string_array(values)
    built.validate(full=True)
    assert built.equals(pa.array(values, type=pa.string()))


@pytest.mark.parametrize(
    ("values", "type_"),
    [
        ([1, None, -(2**63), 2**63 - 1], pa.int64()),
        ([7, None, -(2**31)], pa.int32()),
        ([True, None, False], pa.bool_()),
        ([None, {}, {"a": "1", "b": None}, [("k", "v")]], STR_MAP),
        ([None, {"storageType": "u", "pathOrInlineDv": "ab", "offset": 1, "cardinality": 3}], DV_TYPE),
        ([], DV_TYPE),
        ([], STR_MAP),
    ],
    ids=["int64", "int32", "bool", "map", "struct", "empty-struct", "empty-map"],
)
def test_column_equals_pa_array(values, type_):
    expected = pa.array([list(v.items()) if isinstance(v, dict) and type_ == STR_MAP else v for v in values], type_)
    built = column(values, type_)
    built.validate(full=True)
    assert built.equals(expected)


@pytest.mark.parametrize("schema", [ADD_SCHEMA, REMOVE_SCHEMA], ids=["add", "remove"])
def test_table_from_rows_equals_from_pylist(schema):
    rows = [
        {"path": "a", "partitionValues": [("d", "1"), ("e", None)], "size": 5, "dataChange": False},
        {"path": "b", "partitionValues": {}, "size": 7, "deletionVector": {"storageType": "u", "sizeInBytes": 3}},
        {"path": "c", "tags": {"t": "v"}, "stats": "{}"},
    ]
    built = table_from_rows(rows, schema)
    built.validate(full=True)
    assert built.equals(pa.Table.from_pylist(rows, schema=schema))


def test_scalars():
    assert int64_scalar(-5).equals(pa.scalar(-5, pa.int64()))
    assert string_scalar("é").equals(pa.scalar("é", pa.string()))


NO_PANDAS = """
import sys
from airflow_delta_provider.delta import DeltaLog
log = DeltaLog(sys.argv[1])
snap = log.update()
snap.num_files, snap.size_in_bytes, snap.num_tombstones(now_ms=0), snap.file_summary(), snap.tombstone_summary(now_ms=0)
list(snap.all_files()), snap.tombstones(include_expired=True), snap.num_distinct_paths()
assert "pandas" not in sys.modules, "pandas was imported"
print("ok")
"""


@pytest.mark.skipif(not CORPUS.exists(), reason="reference corpus not found")
@pytest.mark.parametrize(
    "root",
    ["delta-golden/checkpoint", "delta-golden/dv-partitioned-with-checkpoint", "delta-golden/log-replay-dv-key-cases"],
)
def test_load_and_counts_do_not_import_pandas(root):
    out = subprocess.run(
        [sys.executable, "-c", NO_PANDAS, str(CORPUS / root)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "ok"
