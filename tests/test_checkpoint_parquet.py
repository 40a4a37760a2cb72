"""The pure-Python checkpoint reader against pyarrow: the corpus's checkpoints and sidecars as written,
and checkpoints rewritten with every codec, page version and encoding choice pyarrow offers.

A file the reader cannot decode must raise `UnsupportedParquet` (the engine then uses pyarrow); it must
never return values that differ from pyarrow's.
"""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from conftest import CORPUS, copy_table

from airflow_delta_provider.delta import checkpoint_parquet as cpq
from airflow_delta_provider.delta.engines.row_checkpoint import _FIELDS
from airflow_delta_provider.testing import _checkpoint_schema

CHECKPOINTS = sorted(CORPUS.glob("**/_delta_log/**/*.parquet")) if CORPUS.exists() else []


def _as_python(table: pa.Table, path: tuple[str, ...]) -> list:
    col = table.column(path[0])
    for name in path[1:]:
        col = pc.struct_field(col, name)
    return col.to_pylist()


def _assert_same(data: bytes, fields=_FIELDS) -> int:
    """Every flat leaf, map and non-file struct the engine reads equals pyarrow's; returns the leaves compared."""
    cols = cpq.read_columns(data, fields)
    table = pq.read_table(io.BytesIO(data))
    compared = 0
    for path, col in cols.columns.items():
        if col.reps is None:
            assert cpq.flat_values(col) == _as_python(table, path), path
            compared += 1
    for top in ("add", "remove"):
        for name in ("partitionValues", "tags"):
            if cols.node(top, name) is not None:
                expected = [None if v is None else dict(v) for v in _as_python(table, (top, name))]
                assert cpq.map_values(cols, (top, name)) == expected, (top, name)
                compared += 1
    for top in ("metaData", "protocol", "txn", "domainMetadata", "checkpointMetadata", "sidecar"):
        if cols.node(top) is None:
            continue
        rows = [r[top] for r in table.select([top]).to_pylist(maps_as_pydicts="strict")]
        present = [i for i, r in enumerate(rows) if r is not None]
        assert cpq.struct_values(cols, (top,), present) == [rows[i] for i in present], top
        compared += 1
    return compared


@pytest.mark.skipif(not CHECKPOINTS, reason="reference corpus not found")
@pytest.mark.parametrize("path", CHECKPOINTS, ids=lambda p: str(p.relative_to(CORPUS)))
def test_corpus_checkpoints_decode_as_pyarrow_does(path: Path):
    assert _assert_same(path.read_bytes()) > 0


def _checkpoint_table() -> pa.Table:
    """A checkpoint-shaped table: adds with maps, nulls, a DV, removes, metaData with lists and maps."""
    adds = [
        {
            "path": f"p={i % 3}/part-{i:05d}.parquet",
            "partitionValues": [("p", str(i % 3))] if i % 7 else [("p", None)],
            "size": 1000 + i,
            "modificationTime": 1_700_000_000_000 + i,
            "dataChange": bool(i % 2),
            "stats": None if i % 5 == 0 else f'{{"numRecords":{i}}}',
            "tags": [("a", "1"), ("b", None)] if i % 11 == 0 else None,
            "deletionVector": {
                "storageType": "u",
                "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^",
                "offset": 1,
                "sizeInBytes": 36,
                "cardinality": 2,
            }
            if i == 3
            else None,
        }
        for i in range(300)
    ]
    removes = [
        {
            "path": f"old-{i}.parquet",
            "deletionTimestamp": 1_600_000_000_000 + i,
            "dataChange": True,
            "extendedFileMetadata": i % 2 == 0,
            "partitionValues": [],
            "size": i or None,
        }
        for i in range(40)
    ]
    metadata = {
        "id": "abc",
        "format": {"provider": "parquet", "options": []},
        "schemaString": '{"type":"struct","fields":[]}',
        "partitionColumns": ["p"],
        "configuration": [("delta.appendOnly", "false"), ("x", None)],
        "createdTime": 1,
    }
    protocol = {
        "minReaderVersion": 3,
        "minWriterVersion": 7,
        "readerFeatures": ["deletionVectors"],
        "writerFeatures": ["deletionVectors", "v2Checkpoint"],
    }
    txn = {"appId": "app", "version": 4, "lastUpdated": None}
    rows = [{"protocol": protocol}, {"metaData": metadata}, {"txn": txn}]
    rows += [{"add": a} for a in adds] + [{"remove": r} for r in removes]
    schema = _checkpoint_schema(pa)  # the full Delta checkpoint schema, as the test table builder writes it
    return pa.Table.from_pylist(rows, schema=schema)


VARIANTS = {
    "snappy": {"compression": "snappy"},
    "zstd": {"compression": "zstd"},
    "gzip": {"compression": "gzip"},
    "lz4-raw": {"compression": "lz4"},
    "brotli": {"compression": "brotli"},
    "uncompressed": {"compression": "none"},
    "page-v2": {"data_page_version": "2.0"},
    "page-v2-uncompressed": {"data_page_version": "2.0", "compression": "none"},
    "no-dictionary": {"use_dictionary": False},
    "small-pages": {"data_page_size": 256, "write_batch_size": 16},
    "row-groups": {"row_group_size": 50},
    "small-pages-v2-row-groups": {
        "data_page_size": 128,
        "write_batch_size": 8,
        "data_page_version": "2.0",
        "row_group_size": 64,
    },
}


@pytest.mark.parametrize("options", VARIANTS.values(), ids=VARIANTS.keys())
def test_writer_options_decode_as_pyarrow_does(options):
    sink = io.BytesIO()
    pq.write_table(_checkpoint_table(), sink, **options)
    assert _assert_same(sink.getvalue()) >= 15


@pytest.mark.parametrize(
    ("options", "why"),
    [
        ({"column_encoding": {"add.size": "DELTA_BINARY_PACKED"}, "use_dictionary": False}, "encoding 5"),
        ({"column_encoding": {"add.path": "DELTA_BYTE_ARRAY"}, "use_dictionary": False}, "encoding 7"),
    ],
)
def test_unsupported_encodings_are_refused_not_misread(options, why):
    sink = io.BytesIO()
    pq.write_table(_checkpoint_table(), sink, **options)
    with pytest.raises(cpq.UnsupportedParquet, match=why):
        cpq.read_columns(sink.getvalue(), _FIELDS)


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[:-1],  # no trailing magic
        lambda b: b[: len(b) // 2] + b[-8:],  # pages cut out, footer intact
        lambda b: b[:4] + bytes(len(b) - 12) + b[-8:],  # zeroed body and footer
        lambda b: b"",
    ],
    ids=["no-magic", "truncated-body", "zeroed", "empty"],
)
def test_damaged_files_raise_unsupported(damage):
    sink = io.BytesIO()
    pq.write_table(_checkpoint_table(), sink)
    with pytest.raises(cpq.UnsupportedParquet):
        cpq.read_columns(damage(sink.getvalue()), _FIELDS)


def test_small_table_load_imports_neither_pyarrow_nor_numpy(tmp_path):
    """A fresh process loads a checkpointed table and answers without importing pyarrow or numpy."""
    table = copy_table("delta-golden/checkpoint", tmp_path)
    code = (
        "import sys\n"
        "from airflow_delta_provider.delta import DeltaLog\n"
        f"s = DeltaLog.for_table({str(table)!r}).snapshot\n"
        "print(s.version, s.num_files, s.size_in_bytes, s.num_tombstones(), type(s.state.files).__name__)\n"
        "print(sorted(m for m in ('pyarrow', 'numpy') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0].endswith("RowFileState")
    assert out[1] == "[]"


def test_row_path_reads_stats_only_when_asked_and_falls_back_for_them(tmp_path):
    """Checkpoint stats stay unread at load; asked for, they are decoded from the bytes read at load,
    or read by pyarrow when the pure reader cannot decode their encoding."""
    from airflow_delta_provider.delta import DeltaLog
    from airflow_delta_provider.delta.engines.local import LocalEngine

    table = copy_table("delta-golden/dv-partitioned-with-checkpoint", tmp_path)  # stats and deletion vectors
    checkpoint = table / "_delta_log" / "00000000000000000010.checkpoint.parquet"
    plain = DeltaLog(str(table), engine=LocalEngine(plain=True)).update()
    expected = sorted((a.path, a.stats) for a in plain.all_files())
    assert any(stats for _, stats in expected)

    snap = DeltaLog(str(table)).update()
    files = snap.state.files
    assert type(files).__name__ == "RowFileState"
    checkpoint_paths = {a.path for a in plain.all_files()} - {
        a.path for a in snap.state.files.active.values() if not isinstance(a, tuple)
    }
    assert checkpoint_paths and all(
        a.stats is None for a in snap.all_files(with_stats=False) if a.path in checkpoint_paths
    )
    assert sorted((a.path, a.stats) for a in snap.all_files()) == expected
    assert files.adds_with_stats.column("stats").to_pylist() == [a.stats for a in snap.all_files()]

    # the same checkpoint with its stats in an encoding only pyarrow decodes
    data = pq.read_table(checkpoint)
    pq.write_table(data, checkpoint, use_dictionary=False, column_encoding={"add.stats": "DELTA_LENGTH_BYTE_ARRAY"})
    with pytest.raises(cpq.UnsupportedParquet, match="encoding 6"):
        cpq.read_columns(checkpoint.read_bytes(), [("add", "stats")])
    snap = DeltaLog(str(table)).update()
    assert type(snap.state.files).__name__ == "RowFileState"  # the load itself never decodes stats
    assert sorted((a.path, a.stats) for a in snap.all_files()) == expected
