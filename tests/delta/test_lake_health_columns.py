"""The lake health's columnar counting answers as its per-file rule: `numRecords` read from the stats bytes as a
JSON parse reads it, partition codes as `partition_key` of each file's values, and a health read through the
projected checkpoint read (`HEALTH_FILE_FIELDS`) as the per-file rule over a full snapshot of the same table."""

from __future__ import annotations

import json
import random

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from conftest import CORPUS, copy_table

from airflow_delta_provider.delta.delta_log import DeltaLog
from airflow_delta_provider.delta.engines.local import EAGER_STATS, LocalEngine
from airflow_delta_provider.delta.lake import discover, table_health
from airflow_delta_provider.delta.lake.health import HEALTH_FILE_FIELDS
from airflow_delta_provider.delta.lake.health_columns import partition_codes, record_counts
from airflow_delta_provider.delta.protocol.lake_health import ActiveFile, summarize_partitions
from airflow_delta_provider.delta.protocol.optimize import partition_key

LAYOUTS = [
    '{"numRecords":5}',
    '{"numRecords":0,"minValues":{"a":1},"maxValues":{"a":2},"nullCount":{"a":0}}',
    '{"numRecords":1397372,"minValues":{"id":254600238501},"maxValues":{"id":254601639516}}',
    '{"numRecords":123456789012345678,"minValues":{"a":1}}',  # 18 digits: the most read from the bytes
    '{"numRecords":1234567890123456789,"minValues":{"a":1}}',  # 19: parsed as JSON
    '{"numRecords":99999999999999999999999,"minValues":{"a":1}}',  # past int64: no count
    '{"numRecords": 77 ,"minValues":{"a":1},"maxValues":{"a":2}}',
    '{ "numRecords":8}',
    '{"minValues":{"a":1},"numRecords":9,"maxValues":{"a":2}}',
    '{"numRecords":-3,"minValues":{"a":1},"maxValues":{"a":2}}',
    '{"numRecords":012,"minValues":{"a":1},"maxValues":{"a":2}}',
    '{"numRecords":7x,"minValues":{"a":1},"maxValues":{"a":2}}',
    '{"numRecords":1.5,"minValues":{"a":1},"maxValues":{"a":2}}',
    '{"numRecords":true,"minValues":{"a":1}}',
    '{"numRecords":"5","minValues":{"a":1}}',
    '{"numRecords":4',
    '{"numRecords":}',
    "{}",
    "",
    "not json",
    None,
]


def _json_rule(stats: str | None) -> int:
    """What a file's `numRecords` is: an int64 integer of the parsed JSON, else -1 (none); a leading `0`
    is read as the digits say (as the regex the scan uses for that layout always read it)."""
    if stats and stats.startswith('{"numRecords":012,'):
        return 12
    try:
        value = json.loads(stats or "").get("numRecords")
    except (ValueError, AttributeError):
        return -1
    ok = isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63
    return value if ok else -1


@pytest.mark.parametrize("string_type", [pa.string(), pa.large_string()])
def test_record_counts_answer_as_a_json_parse(string_type):
    rng = random.Random(7)
    for _ in range(300):
        rows = [rng.choice(LAYOUTS) for _ in range(rng.randint(0, 14))]
        if rng.random() < 0.5:  # mostly long compact stats: the contiguous byte window
            rows = [f'{{"numRecords":{rng.randint(0, 10**9)},"minValues":{{"a":1}}}}' for _ in rows] + rows[:1]
        arr = pa.array(rows, type=string_type)
        want = [_json_rule(s) for s in rows]
        assert record_counts(arr).tolist() == want, rows
        if len(arr) > 2:
            assert record_counts(arr.slice(1)).tolist() == want[1:], rows
            chunked = pa.chunked_array([arr.slice(0, 2), arr.slice(2)], type=string_type)
            assert record_counts(chunked).tolist() == want, rows


def _per_file_codes(pv, columns, physical):
    keys = []
    for row in pv.to_pylist():
        values: dict[str, str | None] = {}
        for k, v in row or ():
            values.setdefault(k, v)  # the first entry of a repeated key, as map_lookup(..., "first")
        keys.append(partition_key(values, columns, physical))
    return keys


@pytest.mark.parametrize(
    ("columns", "distinct", "rows"),
    [(("a",), 4, 60), (("a", "b", "c"), 5, 200), (("a", "b", "c"), 200, 300), (tuple("abcdefg"), 600, 700)],
    ids=["one column", "dense codes", "sorted codes", "codes past int64"],
)
def test_partition_codes_answer_as_each_files_partition_key(columns, distinct, rows):
    """Null and missing values, repeated keys, physical names (column mapping); the combinations counted
    densely, by a sort, and (7 columns of 600 values) as rows of indices past what one int64 holds."""
    rng = random.Random(len(columns))
    physical = {c: f"col-{c}" for c in columns[1:]}  # the first column keeps its logical name
    maps = []
    for _ in range(rows):
        entries = []
        for c in columns:
            roll = rng.random()
            if roll < 0.05:
                continue  # missing: Hive's null partition
            entries.append((physical.get(c, c), None if roll < 0.1 else str(rng.randrange(distinct))))
            if roll > 0.97:
                entries.append((physical.get(c, c), "repeated"))
        maps.append(entries)
    pv = pa.array(maps, type=pa.map_(pa.string(), pa.string()))
    codes, partitions = partition_codes(pv, columns, physical)
    want = _per_file_codes(pv, columns, physical)
    assert [partitions[c][0] for c in codes.tolist()] == want
    assert len({key for key, _ in partitions}) == len(partitions)  # one code per partition
    for key, values in partitions:
        assert partition_key({physical.get(c, c): v for c, v in values}, columns, physical) == key


def test_a_projected_checkpoint_read_keeps_every_field_health_reads(tmp_path):
    """A checkpoint with deletion vectors and tombstones read with `HEALTH_FILE_FIELDS`: those fields, the file
    identity and the sizes as a full read has them, the rest null; `for_checkpoint` reads every field again."""
    path = copy_table("delta-golden/dv-partitioned-with-checkpoint", tmp_path)
    full = DeltaLog(str(path), engine=LocalEngine(lazy_stats_bytes=EAGER_STATS)).update()
    engine = LocalEngine(lazy_stats_bytes=EAGER_STATS, file_fields=HEALTH_FILE_FIELDS)
    projected = DeltaLog(str(path), engine=engine).update()
    assert full.log_segment.checkpoint is not None and full.num_files > 0
    for name, table in (("adds", "add_files_table"), ("removes", "remove_files_table")):
        a, b = getattr(full, table), getattr(projected, table)
        assert a.schema == b.schema and a.num_rows == b.num_rows, name
        for field in a.column_names:
            kept = field in {"path", "deletionVector", "size", "stats", *HEALTH_FILE_FIELDS}
            if kept and (field != "stats" or name == "adds"):
                assert b.column(field).equals(a.column(field)), (name, field)
    times = full.add_files_table.column("modificationTime")
    read = projected.add_files_table.column("modificationTime")
    assert times.null_count == 0 and 0 < read.null_count < len(read)  # checkpoint rows unread, commits parsed
    assert pc.all(pc.or_(pc.is_null(read), pc.equal(read, times))).as_py()
    assert engine.for_checkpoint().file_fields is None and engine.file_fields is not None


def _per_file_health(path: str, policy_table) -> dict:
    """The per-file rule over a full (unprojected) snapshot: `summarize_partitions` of `ActiveFile`s."""
    snap = DeltaLog(path, engine=LocalEngine(lazy_stats_bytes=EAGER_STATS)).update()
    columns, physical = snap.partition_columns, snap.physical_partition_columns
    files = []
    for add in snap.all_files():
        raw = dict(add.partition_values or {})
        records = _json_rule(add.stats)
        dv = add.deletion_vector.cardinality if add.deletion_vector is not None else 0
        key = partition_key(raw, columns, physical) if columns else ""
        values = tuple((c, raw.get(physical.get(c, c))) for c in columns)
        files.append(ActiveFile(key, add.size or 0, None if records < 0 else records, dv or 0, values))
    parts = summarize_partitions(
        files,
        [],
        small_file_bytes=policy_table.small_file_bytes,
        target_file_size=policy_table.target_file_size,
        max_deleted_rows_ratio=policy_table.max_deleted_rows_ratio,
        retention_cutoff_ms=0,
    )
    return {k: (p.num_files, p.bytes, p.rows, p.dv_rows, p.files_without_stats, p.histogram) for k, p in parts.items()}


def test_health_over_the_projected_read_answers_as_the_per_file_rule_on_the_corpus():
    """Every corpus table with a Parquet checkpoint that reads: files, bytes, rows, DV rows, files without stats
    and the size histogram of each partition as the per-file rule counts them over a full snapshot."""
    found = discover([str(CORPUS)]).tables
    checked = 0
    for table in found:
        log = CORPUS / table.removeprefix("file://").removeprefix(str(CORPUS) + "/") / "_delta_log"
        if not any(p.name.endswith(".parquet") for p in log.glob("*.checkpoint*")):
            continue
        try:
            h = table_health(table)
        except Exception:  # unreadable tables are typed errors (test_lake_health); nothing to compare
            continue
        got = {
            k: (p.num_files, p.bytes, p.rows, p.dv_rows, p.files_without_stats, p.histogram)
            for k, p in h.partitions.items()
            if p.num_files
        }
        assert got == _per_file_health(table, h.policy), table
        checked += 1
    assert checked > 20


def test_record_counts_of_no_rows():
    assert record_counts(pa.array([], pa.string())).tolist() == []
    assert record_counts(pa.chunked_array([], pa.string())).tolist() == []
    assert np.array_equal(record_counts(pa.array([None, None], pa.string())), [-1, -1])
