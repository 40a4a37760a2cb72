"""Deletion vectors: locating (`protocol.deletion_vectors`), decoding and applying them (`read.deletion_vectors`).

Every corpus table whose log holds deletion vectors is read file by file through `read_data_file` and
compared, as a multiset of rows, with what delta-rs reads (its DataFusion `QueryBuilder`: its
`to_pyarrow_table` refuses DV tables) and with the upstream suites' expectations where they publish
them. Not read here: `delta-rs/table-with-domain-metadata` and `delta-spark/variant-stats-*` (the
`deletionVectors` feature but no DV in the log, and no data files in the corpus), `delta-spark/
table-with-dv-gigantic` (absent from the corpus).

Spark's DeletionVectorsSuite names its DV files with a test-only prefix (`testOnly.dvFileNamePrefix`,
`test%dv%prefix-`) that a `u` descriptor cannot express: no reader outside that suite finds them (delta-rs
neither), so the copies of those tables get the protocol's file names; `table-with-dv-special-char` is a
template whose `p` path the suite fills in, as done here.
"""

from __future__ import annotations

import json
import random
import struct
import uuid
import zlib
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import CORPUS, copy_table
from pyroaring import BitMap64

deltalake = pytest.importorskip("deltalake")

from support.dv_masks import rows_kept_mask  # noqa: E402
from support.encodings import z85_encode  # noqa: E402

from airflow_delta_provider.delta import DeltaLog  # noqa: E402
from airflow_delta_provider.delta.errors import (  # noqa: E402
    InvalidArgumentError,
    LogCorruptedError,
    UnsupportedFeatureError,
)
from airflow_delta_provider.delta.protocol.actions import AddFile, DeletionVectorDescriptor  # noqa: E402
from airflow_delta_provider.delta.protocol.deletion_vectors import (  # noqa: E402
    decode_absolute_path,
    dv_location,
    dv_relative_path,
    z85_decode,
)
from airflow_delta_provider.delta.protocol.vacuum import dv_relative_path as vacuum_dv_relative_path  # noqa: E402
from airflow_delta_provider.delta.read.deletion_vectors import (  # noqa: E402
    NATIVE_MAGIC,
    PORTABLE_MAGIC,
    read_data_file,
    read_deletion_vector,
)
from airflow_delta_provider.delta.snapshot import Snapshot  # noqa: E402

DV_TABLES = [
    "delta-golden/dv-partitioned-with-checkpoint",
    "delta-golden/dv-with-columnmapping",
    "delta-golden/log-replay-dv-key-cases",
    "delta-kernel-java/basic-dv-no-checkpoint",
    "delta-kernel-java/basic-dv-with-checkpoint",
    "delta-rs/cdf-table-with-cdc-and-dvs",
    "delta-rs/table-with-dv-small",
    "delta-rs/table_with_deletion_logs",
    "delta-spark/partitioned-table-with-dv-large",
    "delta-spark/table-with-dv-large",
    "delta-spark/table-with-dv-small",
    "delta-spark/table-with-dv-special-char",
]
#: The `deletionVectors` feature on, no DV in the log: the same read path without one (column mapping,
#: a renamed partition column).
DV_FEATURE_ONLY = ["delta-rs/table_with_liquid_clustering", "delta-rs/table_with_partitioning_mapping"]
SPARK_TEST_DV_PREFIX = "test%dv%prefix-"


def _spark_suite_expected() -> dict[str, list[int]]:
    """Rows of the latest versions, as DeletionVectorsSuite (`object DeletionVectorsSuite`) defines them."""
    large = [i for i in range(2000) if i not in {0, 180, 300, 700, 1800}] + [300, 700]
    large = [i for i in large if i not in {300, 250, 350, 900, 1353, 1567, 1800}] + [900, 1567]
    part = [i for i in range(2000) if i not in {0, 180, 308, 225, 756, 1007, 1503}] + [308, 756]
    part = [i for i in part if i not in {300, 257, 399, 786, 1353, 1567, 1800}] + [1353, 1567]
    return {
        "delta-spark/table-with-dv-large": large,
        "delta-spark/partitioned-table-with-dv-large": part,
        "delta-spark/table-with-dv-small": list(range(1, 9)),
        "delta-spark/table-with-dv-special-char": [i for i in range(10) if i % 2],
    }


def _prepare(name: str, tmp_path: Path) -> Path:
    """A copy of corpus table `name` that readers outside Spark's test suite can read (module doc)."""
    path = copy_table(name, tmp_path)
    if name == "delta-spark/table-with-dv-special-char":
        commit = path / "_delta_log" / "00000000000000000000.json"
        folder = quote(str(path / "folder&with%special char"))
        commit.write_text(commit.read_text().replace("{{FOLDER_WITH_SPECIAL_CHAR}}", folder))
    elif name.startswith("delta-spark/"):
        for f in path.glob(f"{SPARK_TEST_DV_PREFIX}deletion_vector_*.bin"):
            f.rename(f.with_name(f.name.removeprefix(SPARK_TEST_DV_PREFIX)))
    return path


def _snapshot(path: Path) -> tuple[DeltaLog, Snapshot]:
    log = DeltaLog(str(path))
    return log, log.update()


def _columns(snap: Snapshot) -> list[str]:
    return [f.name for f in snap.schema.fields]


def _our_rows(log: DeltaLog, snap: Snapshot) -> Counter[tuple[Any, ...]]:
    """Every active file read through its DV, physical names mapped to logical, partition values added."""
    logical = {f.physical_name: f.name for f in snap.schema.fields}
    rows: Counter[tuple[Any, ...]] = Counter()
    for add in snap.all_files():
        data = read_data_file(log.store, log.table_uri, add)
        data = data.rename_columns([logical[n] for n in data.column_names])
        parts = snap.partition_values(add)
        for row in data.to_pylist():
            row.update(parts)
            rows[tuple(row[c] for c in _columns(snap))] += 1
    return rows


def _delta_rs_rows(path: Path, columns: list[str]) -> Counter[tuple[Any, ...]]:
    reader = deltalake.QueryBuilder().register("t", deltalake.DeltaTable(str(path))).execute("SELECT * FROM t")
    return Counter(tuple(r[c] for c in columns) for r in pa.table(reader.read_all()).to_pylist())


# -- every corpus table with deletion vectors ----------------------------------------------------------


@pytest.mark.parametrize("name", DV_TABLES + DV_FEATURE_ONLY)
def test_corpus_table_read_through_its_dvs_matches_delta_rs(name: str, tmp_path: Path) -> None:
    path = _prepare(name, tmp_path)
    log, snap = _snapshot(path)
    adds = list(snap.all_files())
    with_dv = [a for a in adds if a.deletion_vector is not None]
    assert bool(with_dv) == (name in DV_TABLES)
    for add in with_dv:
        dv = add.deletion_vector
        assert dv is not None
        deleted = read_deletion_vector(log.store, log.table_uri, dv, file=add.path)
        assert len(deleted) == dv.cardinality
        assert deleted.to_pylist() == sorted(set(deleted.to_pylist()))
        num_records = json.loads(add.stats or "{}").get("numRecords")
        if num_records is not None:  # the writer requirement: numRecords counts the file, not the logical file
            kept = read_data_file(log.store, log.table_uri, add)
            assert kept.num_rows == num_records - dv.cardinality
    ours = _our_rows(log, snap)
    assert ours == _delta_rs_rows(path, _columns(snap))
    expected = _spark_suite_expected().get(name)
    if expected is not None:
        assert Counter(row[0] for row in ours.elements()) == Counter(expected)


@pytest.mark.parametrize("name", ["dv-partitioned-with-checkpoint", "dv-with-columnmapping", "log-replay-dv-key-cases"])
def test_golden_tables_match_delta_kernel_rs_expected_rows(name: str, tmp_path: Path) -> None:
    log, snap = _snapshot(copy_table(f"delta-golden/{name}", tmp_path))
    expected = pa.concat_tables(
        [pq.read_table(f) for f in sorted((CORPUS / "kernel-rs-golden" / name / "expected").glob("*.parquet"))]
    )
    columns = _columns(snap)
    assert Counter(tuple(r[c] for c in columns) for r in expected.to_pylist()) == _our_rows(log, snap)


def test_read_data_file_keeps_physical_names_field_ids_and_schema_metadata(tmp_path: Path) -> None:
    path = copy_table("delta-golden/dv-with-columnmapping", tmp_path)
    log, snap = _snapshot(path)
    add = next(a for a in snap.all_files() if a.deletion_vector is not None)
    on_disk = pq.read_schema(path / add.path)
    data = read_data_file(log.store, log.table_uri, add)
    assert data.schema.equals(on_disk, check_metadata=True)
    assert all(b"PARQUET:field_id" in (f.metadata or {}) for f in data.schema)
    physical = snap.schema.fields[1].physical_name
    only = read_data_file(log.store, log.table_uri, add, columns=[physical])
    assert only.column_names == [physical] and only.num_rows == data.num_rows
    assert only.schema.field(physical).metadata == on_disk.field(physical).metadata
    with pytest.raises(InvalidArgumentError, match="no column") as err:
        read_data_file(log.store, log.table_uri, add, columns=["col1"])  # the logical name is not in the file
    assert err.value.file == add.path


def test_absolute_data_file_path_is_decoded_once(tmp_path: Path) -> None:
    path = _prepare("delta-spark/table-with-dv-special-char", tmp_path)
    log, snap = _snapshot(path)
    (add,) = snap.all_files()
    moved = path / "dir with%20space" / add.path
    moved.parent.mkdir()
    (path / add.path).rename(moved)
    absolute = replace(add, path="file://" + quote(str(moved)))
    assert read_data_file(log.store, log.table_uri, absolute)["id"].to_pylist() == [1, 3, 5, 7, 9]


# -- inline and absolute-path DVs ----------------------------------------------------------------------


def _serialized(rows: list[int]) -> bytes:
    """A `RoaringBitmapArray` as Delta stores it: the portable magic, then the portable 64-bit bitmap."""
    return struct.pack("<i", PORTABLE_MAGIC) + BitMap64(rows).serialize()


def _inline(rows: list[int]) -> DeletionVectorDescriptor:
    blob = _serialized(rows)
    return DeletionVectorDescriptor("i", z85_encode(blob), len(blob), len(set(rows)))


def test_inline_dv_is_decoded_and_applied(tmp_path: Path) -> None:
    path = copy_table("delta-rs/table-with-dv-small", tmp_path)
    log, snap = _snapshot(path)
    (add,) = snap.all_files()
    everything = read_data_file(log.store, log.table_uri, replace(add, deletion_vector=None))["value"].to_pylist()
    deleted = [1, 4, 9]  # an odd count: a bitmap whose size is not a multiple of 4
    dv = _inline(deleted)
    assert len(dv.path_or_inline_dv) % 5 == 0 and dv.size_in_bytes % 4 != 0  # padded Z85, cut to sizeInBytes
    assert read_deletion_vector(log.store, log.table_uri, dv).to_pylist() == deleted
    kept = read_data_file(log.store, log.table_uri, replace(add, deletion_vector=dv))["value"].to_pylist()
    assert kept == [v for i, v in enumerate(everything) if i not in deleted]


def test_inline_dv_with_64_bit_row_indexes_round_trips() -> None:
    rows = [0, 7, 65_536, 2**32 - 1, 2**32, 2**40 + 3, 2**62]
    assert read_deletion_vector(None, "file:///t", _inline(rows)).to_pylist() == rows  # type: ignore[arg-type]


def test_absolute_path_dv_reads_like_the_uuid_relative_one(tmp_path: Path) -> None:
    path = copy_table("delta-rs/table-with-dv-small", tmp_path)
    log, snap = _snapshot(path)
    (add,) = snap.all_files()
    dv = add.deletion_vector
    assert dv is not None and dv.storage_type == "u"
    elsewhere = tmp_path / "dvs & more%" / "a b.bin"
    elsewhere.parent.mkdir()
    elsewhere.write_bytes((path / (dv_relative_path(dv) or "")).read_bytes())
    absolute = replace(dv, storage_type="p", path_or_inline_dv="file://" + quote(str(elsewhere)))
    assert dv_location(absolute, log.table_uri).path == str(elsewhere)
    from_u = read_deletion_vector(log.store, log.table_uri, dv)
    assert read_deletion_vector(log.store, log.table_uri, absolute).equals(from_u)
    assert read_data_file(log.store, log.table_uri, replace(add, deletion_vector=absolute)).equals(
        read_data_file(log.store, log.table_uri, add)
    )


def test_empty_dv_reads_nothing() -> None:
    empty = DeletionVectorDescriptor("i", "", 0, 0)  # Delta Spark's `DeletionVectorDescriptor.EMPTY`
    assert len(read_deletion_vector(None, "file:///t", empty)) == 0  # type: ignore[arg-type]


def test_rows_kept_mask() -> None:
    assert rows_kept_mask(10, pa.array([0, 9], pa.uint64())).to_pylist() == [False] + [True] * 8 + [False]
    assert rows_kept_mask(3, []).to_pylist() == [True] * 3
    assert rows_kept_mask(0, []).to_pylist() == []
    with pytest.raises(InvalidArgumentError):
        rows_kept_mask(3, [3])


@pytest.mark.parametrize("seed", range(4))
def test_rows_kept_mask_matches_the_rule_row_by_row(seed: int) -> None:
    """The vectorised mask against the rule itself, on random sizes and deletions (runs, both ends, repeats,
    any order) given as a list, an Arrow uint64 or int64 array, and a slice of one."""
    rng = random.Random(seed)
    for _ in range(50):
        num_rows = rng.choice([0, 1, 2, 7, 8, 9, 64, 1000, 70_000])
        deleted = [rng.randrange(num_rows) for _ in range(rng.randrange(num_rows + 1))] if num_rows else []
        if num_rows and rng.random() < 0.3:
            start = rng.randrange(num_rows)
            deleted += list(range(start, min(num_rows, start + rng.randrange(1, 200))))  # a run
        gone = set(deleted)
        expected = [i not in gone for i in range(num_rows)]
        assert rows_kept_mask(num_rows, deleted).to_pylist() == expected
        assert rows_kept_mask(num_rows, pa.array(sorted(deleted), pa.uint64())).to_pylist() == expected
        assert rows_kept_mask(num_rows, pa.array(deleted, pa.int64())).to_pylist() == expected
        padded = pa.array([0, *deleted, 0], pa.uint64()).slice(1, len(deleted))
        assert rows_kept_mask(num_rows, padded).to_pylist() == expected


def test_rows_kept_mask_refuses_bad_indexes() -> None:
    for num_rows, deleted in (
        (3, [-1]),
        (3, pa.array([-1], pa.int64())),
        (3, pa.array([1, None], pa.uint64())),
        (3, pa.array([5], pa.uint64())),
        (0, [0]),
        (3, [2**64]),
    ):
        with pytest.raises(InvalidArgumentError) as err:
            rows_kept_mask(num_rows, deleted)
        assert err.value.argument == "deleted"


# -- descriptors (pure) --------------------------------------------------------------------------------


def test_z85_matches_the_rfc_and_round_trips() -> None:
    hello = bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])
    assert z85_encode(hello) == "HelloWorld" and z85_decode("HelloWorld") == hello  # ZeroMQ RFC 32
    data = uuid.uuid4().bytes + b"\x00\xff\x10"
    assert z85_decode(z85_encode(data))[: len(data)] == data


def test_locations_of_the_protocol_examples() -> None:
    """PROTOCOL.md "Deletion Vector Descriptor Schema", JSON examples 1 and 2."""
    u = DeletionVectorDescriptor("u", "ab^-aqEH.-t@S}K{vb[*k^", 40, 6, offset=4)
    loc = dv_location(u, "s3://mytable/")
    assert loc.kind == "file" and loc.offset == 4 and loc.size_in_bytes == 40
    assert loc.relative_path == "ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"
    assert loc.path == "s3://mytable/ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"
    assert vacuum_dv_relative_path(u) == loc.relative_path  # still importable from vacuum
    p = DeletionVectorDescriptor("p", "s3://mytable/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin", 40, 6, 4)
    loc = dv_location(p, "s3://other")
    assert loc.path == p.path_or_inline_dv and loc.relative_path is None
    assert dv_location(replace(p, offset=None), "s3://other").offset == 0  # "Interpret as 0 if absent"


def test_absolute_paths_are_decoded_once() -> None:
    assert decode_absolute_path("file:///a/b%20c/d%2520e") == "/a/b c/d%20e"
    assert decode_absolute_path("file:/a/b") == decode_absolute_path("file://localhost/a/b") == "/a/b"
    assert decode_absolute_path("/a/%C3%A9") == "/a/é"
    assert decode_absolute_path("s3://bucket/k%3Dv/x%20y.bin") == "s3://bucket/k=v/x y.bin"
    for bad in ("relative/x.bin", "file://otherhost/x.bin", "s3:///nobucket"):
        with pytest.raises(InvalidArgumentError):
            decode_absolute_path(bad)


@pytest.mark.parametrize(
    ("dv", "match"),
    [
        (DeletionVectorDescriptor("u", "tooShort", 40, 6, 1), "Z85 UUID"),
        (DeletionVectorDescriptor("u", "ab~-aqEH.-t@S}K{vb[*k^", 40, 6, 1), "Z85 UUID"),
        (DeletionVectorDescriptor("u", "ab^-aqEH.-t@S}K{vb[*k^", -1, 6, 1), "negative"),
        (DeletionVectorDescriptor("i", z85_encode(b"abcdefgh"), 8, 1, offset=1), "no offset"),
        (DeletionVectorDescriptor("i", z85_encode(b"abcdefgh"), 12, 1), "decodes to 8 bytes"),
        (DeletionVectorDescriptor("i", "abc", 2, 1), "not Z85"),
        (DeletionVectorDescriptor("p", "relative/dv.bin", 40, 6, 1), "Not an absolute path"),
        (DeletionVectorDescriptor("u", "..^-aqEH.-t@S}K{vb[*k^", 40, 6, 1), "plain directory"),
    ],
)
def test_bad_descriptors_are_corrupt_log_errors(dv: DeletionVectorDescriptor, match: str) -> None:
    with pytest.raises(LogCorruptedError, match=match) as err:
        dv_location(dv, "file:///t", file="part-0.parquet")
    assert err.value.table == "file:///t" and err.value.file == "part-0.parquet"


def test_unknown_storage_type_is_unsupported() -> None:
    with pytest.raises(UnsupportedFeatureError) as err:
        dv_location(DeletionVectorDescriptor("r", "dv.bin", 40, 6, 1), "file:///t")
    assert err.value.feature == "deletionVectors"


def test_protocol_inline_example_lacks_the_portable_magic() -> None:
    """PROTOCOL.md JSON example 3 starts with Delta Spark's native-format magic written big-endian: Spark
    reads the magic little-endian and refuses it, and so does this reader (as corrupt)."""
    example = DeletionVectorDescriptor("i", "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L", 40, 6)
    assert struct.unpack(">i", z85_decode(example.path_or_inline_dv)[:4]) == (NATIVE_MAGIC,)
    with pytest.raises(LogCorruptedError, match="magic number") as err:
        read_deletion_vector(None, "file:///t", example, file="part-0.parquet")  # type: ignore[arg-type]
    assert err.value.file == "part-0.parquet"


def test_native_format_is_unsupported() -> None:
    blob = struct.pack("<i", NATIVE_MAGIC) + BitMap64([1]).serialize()
    native = DeletionVectorDescriptor("i", z85_encode(blob), len(blob), 1)
    with pytest.raises(UnsupportedFeatureError, match="native") as err:
        read_deletion_vector(None, "file:///t", native)  # type: ignore[arg-type]
    assert err.value.feature == "deletionVectors"


# -- corrupt DV files ----------------------------------------------------------------------------------


@pytest.fixture
def dv_table(tmp_path: Path) -> tuple[DeltaLog, AddFile, Path]:
    """A table whose DV file holds several DVs (offsets past the first), and one of its DV'd files."""
    path = _prepare("delta-spark/table-with-dv-large", tmp_path)
    log, snap = _snapshot(path)
    add = max((a for a in snap.all_files() if a.deletion_vector), key=lambda a: a.deletion_vector.offset or 0)  # type: ignore[union-attr]
    assert add.deletion_vector is not None and (add.deletion_vector.offset or 0) > 1
    return log, add, path / (dv_relative_path(add.deletion_vector) or "")


def _expect_corrupt(log: DeltaLog, add: AddFile, dv_file: Path, match: str) -> None:
    for read in (
        lambda: read_deletion_vector(log.store, log.table_uri, add.deletion_vector, file=add.path),  # type: ignore[arg-type]
        lambda: read_data_file(log.store, log.table_uri, add),
    ):
        with pytest.raises(LogCorruptedError, match=match) as err:
            read()
        assert err.value.file == dv_file.name and add.path in str(err.value)
        assert err.value.table == log.table_uri


def _rewrite(dv_file: Path, at: int, data: bytes) -> None:
    raw = bytearray(dv_file.read_bytes())
    raw[at : at + len(data)] = data
    dv_file.write_bytes(bytes(raw))


def test_missing_dv_file(dv_table: tuple[DeltaLog, AddFile, Path]) -> None:
    log, add, dv_file = dv_table
    dv_file.unlink()
    _expect_corrupt(log, add, dv_file, "missing")


def test_truncated_dv_file(dv_table: tuple[DeltaLog, AddFile, Path]) -> None:
    log, add, dv_file = dv_table
    dv = add.deletion_vector
    assert dv is not None and dv.offset is not None
    dv_file.write_bytes(dv_file.read_bytes()[: dv.offset + 4 + dv.size_in_bytes])  # the checksum cut off
    _expect_corrupt(log, add, dv_file, "truncated")
    dv_file.write_bytes(dv_file.read_bytes()[: dv.offset + 2])
    _expect_corrupt(log, add, dv_file, "truncated")


def test_wrong_checksum(dv_table: tuple[DeltaLog, AddFile, Path]) -> None:
    log, add, dv_file = dv_table
    dv = add.deletion_vector
    assert dv is not None and dv.offset is not None
    crc_at = dv.offset + 4 + dv.size_in_bytes
    _rewrite(dv_file, crc_at, bytes(b ^ 0xFF for b in dv_file.read_bytes()[crc_at : crc_at + 4]))
    _expect_corrupt(log, add, dv_file, "checksum")


def test_flipped_bitmap_byte_fails_the_checksum(dv_table: tuple[DeltaLog, AddFile, Path]) -> None:
    log, add, dv_file = dv_table
    at = (add.deletion_vector.offset or 0) + 4 + 8  # type: ignore[union-attr]
    _rewrite(dv_file, at, bytes([dv_file.read_bytes()[at] ^ 0x01]))
    _expect_corrupt(log, add, dv_file, "checksum")


def _replace_bitmap(dv_file: Path, dv: DeletionVectorDescriptor, data: bytes) -> None:
    """Overwrite `dv`'s bytes with `data` (same length) and a checksum that matches it."""
    assert dv.offset is not None and len(data) == dv.size_in_bytes
    _rewrite(dv_file, dv.offset + 4, data + struct.pack(">I", zlib.crc32(data)))


def test_wrong_magic(dv_table: tuple[DeltaLog, AddFile, Path]) -> None:
    log, add, dv_file = dv_table
    dv = add.deletion_vector
    assert dv is not None and dv.offset is not None
    start = dv.offset + 4
    original = dv_file.read_bytes()[start : start + dv.size_in_bytes]
    _replace_bitmap(dv_file, dv, struct.pack("<i", PORTABLE_MAGIC + 7) + original[4:])
    _expect_corrupt(log, add, dv_file, "magic number")


def test_undecodable_bitmap(dv_table: tuple[DeltaLog, AddFile, Path]) -> None:
    log, add, dv_file = dv_table
    dv = add.deletion_vector
    assert dv is not None
    _replace_bitmap(dv_file, dv, struct.pack("<i", PORTABLE_MAGIC) + b"\xff" * (dv.size_in_bytes - 4))
    _expect_corrupt(log, add, dv_file, "not a portable")


def test_wrong_version_byte(dv_table: tuple[DeltaLog, AddFile, Path]) -> None:
    log, add, dv_file = dv_table
    _rewrite(dv_file, 0, b"\x02")
    _expect_corrupt(log, add, dv_file, "format version 02")


def test_size_and_cardinality_must_match_the_descriptor(dv_table: tuple[DeltaLog, AddFile, Path]) -> None:
    log, add, dv_file = dv_table
    dv = add.deletion_vector
    assert dv is not None
    _expect_corrupt(log, replace(add, deletion_vector=replace(dv, size_in_bytes=dv.size_in_bytes + 1)), dv_file, "size")
    _expect_corrupt(
        log, replace(add, deletion_vector=replace(dv, cardinality=dv.cardinality + 1)), dv_file, "cardinality"
    )
    _expect_corrupt(log, replace(add, deletion_vector=replace(dv, offset=0)), dv_file, "size field")


def test_dv_past_the_end_of_its_file_and_missing_data_file(dv_table: tuple[DeltaLog, AddFile, Path]) -> None:
    log, add, _ = dv_table
    num_rows = pq.read_metadata(Path(log.store.join(log.table_uri, add.path))).num_rows
    beyond = replace(add, deletion_vector=_inline([0, num_rows]))
    with pytest.raises(LogCorruptedError, match=f"deletes row {num_rows}") as err:
        read_data_file(log.store, log.table_uri, beyond)
    assert err.value.file == add.path
    missing = replace(add, path="part-missing.snappy.parquet")
    with pytest.raises(LogCorruptedError, match="missing") as err:
        read_data_file(log.store, log.table_uri, missing)
    assert err.value.file == "part-missing.snappy.parquet"
