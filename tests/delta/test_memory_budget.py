"""The local engine's memory limit: a load whose estimate exceeds `memory_limit_bytes` fails with a
`ResourceLimitError` naming the Spark engine before any state is read; loads under it are unchanged.

Reads are observed with spies on the engine's own readers (not mocks: the real readers run when the
limit allows). The estimate's parts are checked against pyarrow's view of the same footers.
"""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from conftest import CORPUS, copy_table

from airflow_delta_provider.commands.command import Request, execute
from airflow_delta_provider.delta import DeltaLog, ResourceLimitError
from airflow_delta_provider.delta.engines import local
from airflow_delta_provider.delta.engines.local import LocalEngine
from airflow_delta_provider.delta.protocol.checkpoints import NON_FILE_COLUMNS
from airflow_delta_provider.delta.read import checkpoint
from airflow_delta_provider.delta.read import memory_budget as mb
from airflow_delta_provider.delta.storage import LocalLogStore

pytestmark = pytest.mark.skipif(not CORPUS.exists(), reason="reference corpus not found")

CHECKPOINTS = sorted(CORPUS.glob("**/_delta_log/**/*.parquet")) if CORPUS.exists() else []
V2 = "delta-golden/v2-checkpoint-parquet"
CLASSIC = "delta-golden/checkpoint"


def _pyarrow_sizes(path) -> tuple[int, dict[tuple[str, ...], int]]:
    """(rows, uncompressed bytes per leaf path) as pyarrow's metadata reports them."""
    meta = pq.ParquetFile(path).metadata
    sizes: dict[tuple[str, ...], int] = {}
    for g in range(meta.num_row_groups):
        for c in range(meta.row_group(g).num_columns):
            col = meta.row_group(g).column(c)
            key = tuple(col.path_in_schema.split("."))
            sizes[key] = sizes.get(key, 0) + col.total_uncompressed_size
    return meta.num_rows, sizes


def test_footer_sizes_are_pyarrows_on_the_corpus():
    for path in CHECKPOINTS:
        with open(path, "rb") as fh:
            assert mb.footer_column_sizes(fh) == _pyarrow_sizes(path)[1], path


def test_a_damaged_footer_is_left_out_of_the_estimate(tmp_path):
    """An unreadable footer counts nothing (the read itself then reports the file)."""
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1" + b"\x00" * 64 + b"\x10\x00\x00\x00PAR1")
    budget = mb.MemoryBudget(1, "t", 0, LocalLogStore(), NON_FILE_COLUMNS)
    budget.add([(str(bad), None)])
    assert budget.decoded == {}


def test_decoded_bytes_counts_only_what_a_load_decodes():
    sizes = {
        ("add", "path"): 10,
        ("add", "stats"): 1000,
        ("add", "stats_parsed", "numRecords"): 500,
        ("add", "partitionValues", "key_value", "key"): 3,
        ("remove", "path"): 5,
        ("metaData", "id"): 7,
        ("unknownAction", "x"): 10_000,
    }
    assert mb.decoded_bytes(sizes, NON_FILE_COLUMNS) == 10 + 3 + 5 + 7
    assert mb.decoded_bytes(sizes, NON_FILE_COLUMNS, with_stats=True) == 10 + 1000 + 500 + 3 + 5 + 7


def test_default_limit_is_half_the_available_memory(tmp_path, monkeypatch):
    v2 = tmp_path / "memory.max"
    v2.write_text("max\n")
    v1 = tmp_path / "memory.limit_in_bytes"
    v1.write_text("2147483648\n")
    assert mb.cgroup_limit([str(v2)]) is None
    assert mb.cgroup_limit([str(tmp_path / "missing"), str(v1)]) == 2 << 30
    monkeypatch.setattr(mb, "cgroup_limit", lambda: 2 << 30)
    assert mb.available_memory() == 2 << 30  # the cgroup's limit is below this machine's memory
    assert mb.default_memory_limit() == 1 << 30
    assert LocalEngine().memory_limit_bytes == 1 << 30
    assert LocalEngine(memory_limit_bytes=None).memory_limit_bytes is None


class _Spy:
    """Records the engine's reads: `read_commit`, `read <file>` (whole-file reads: commits and JSON
    checkpoint parts), `parquet <file>` (Arrow reads) and `open <file>` (footer reads)."""

    def __init__(self, monkeypatch):
        self.calls: list[str] = []
        original_commit = local.read_commit
        original_parquet = checkpoint.read_parquet
        original_read, original_open = LocalLogStore.read_bytes, LocalLogStore.open

        def read_commit(*args, **kwargs):
            self.calls.append("read_commit")
            return original_commit(*args, **kwargs)

        def read_parquet(store, path, *args, **kwargs):
            self.calls.append(f"parquet {_name(path)}")
            return original_parquet(store, path, *args, **kwargs)

        def read_bytes(store, path):
            self.calls.append(f"read {_name(path)}")
            return original_read(store, path)

        def open_(store, path):
            self.calls.append(f"open {_name(path)}")
            return original_open(store, path)

        monkeypatch.setattr(local, "read_commit", read_commit)
        monkeypatch.setattr(checkpoint, "read_parquet", read_parquet)
        monkeypatch.setattr(LocalLogStore, "read_bytes", read_bytes)
        monkeypatch.setattr(LocalLogStore, "open", open_)

    def state_reads(self) -> list[str]:
        """Reads of commits and checkpoint data (not footers, not `_last_checkpoint`, read to list)."""
        return [c for c in self.calls if not c.startswith("open ") and c != "read _last_checkpoint"]


def _name(path: str) -> str:
    """The file's name, with `_sidecars/` for a sidecar."""
    parent, _, name = path.rstrip("/").rpartition("/")
    return f"_sidecars/{name}" if parent.endswith("_sidecars") else name


def _estimate(table, *, sidecars: bool) -> int:
    """The estimate `memory_budget` should reach, from pyarrow's footers and the file sizes."""
    log = table / "_delta_log"
    every = [p for p in log.glob("0*.checkpoint*") if p.suffix in (".parquet", ".json")]
    checkpoint_version = max(int(p.name[:20]) for p in every)
    parts = [p for p in every if int(p.name[:20]) == checkpoint_version]
    parquet = [p for p in parts if p.suffix == ".parquet"]
    if sidecars:
        parquet += list((log / "_sidecars").glob("0*.parquet"))
    decoded = sum(mb.decoded_bytes(_pyarrow_sizes(path)[1], NON_FILE_COLUMNS) for path in parquet)
    json_bytes = sum(p.stat().st_size for p in log.glob("*.json") if int(p.name[:20]) > checkpoint_version)
    json_bytes += sum(p.stat().st_size for p in parts if p.suffix == ".json")
    return mb.estimate(decoded, json_bytes)


def test_over_the_limit_fails_before_any_state_is_read(tmp_path, monkeypatch):
    table = copy_table(CLASSIC, tmp_path)
    needed = _estimate(table, sidecars=False)
    spy = _Spy(monkeypatch)
    engine = LocalEngine(memory_limit_bytes=needed - 1)
    with pytest.raises(ResourceLimitError) as err:
        DeltaLog(str(table), engine=engine).update()
    assert spy.state_reads() == []
    assert any(c.startswith("open ") and ".checkpoint." in c for c in spy.calls)  # the footer
    message = str(err.value)
    assert "Spark engine" in message and "engine='spark'" in message and "--engine spark" in message
    assert "memory_limit_bytes" in message
    assert err.value.table == str(table) or err.value.table.endswith(str(table))
    assert err.value.version == DeltaLog(str(table)).latest_version()
    assert err.value.to_dict()["error_class"] == "ResourceLimitError"


def test_at_the_limit_the_load_is_unchanged(tmp_path, monkeypatch):
    table = copy_table(CLASSIC, tmp_path)
    needed = _estimate(table, sidecars=False)
    spy = _Spy(monkeypatch)
    limited = DeltaLog(str(table), engine=LocalEngine(memory_limit_bytes=needed)).update()
    assert spy.state_reads()  # loaded for real
    plain = DeltaLog(str(table), engine=LocalEngine(plain=True, memory_limit_bytes=None)).update()
    assert (limited.version, limited.num_files, limited.size_in_bytes, limited.num_tombstones(now_ms=0)) == (
        plain.version,
        plain.num_files,
        plain.size_in_bytes,
        plain.num_tombstones(now_ms=0),
    )


def test_footers_are_read_only_when_file_sizes_cannot_rule_the_limit_out(tmp_path, monkeypatch):
    table = copy_table(CLASSIC, tmp_path)
    spy = _Spy(monkeypatch)
    DeltaLog(str(table), engine=LocalEngine(memory_limit_bytes=1 << 40)).update()
    # the Arrow reader memory-maps local files (no store.open): any open here would be a footer read
    assert not [c for c in spy.calls if c.startswith("open ")]


def test_v2_sidecars_are_checked_before_they_are_read(tmp_path, monkeypatch):
    table = copy_table(V2, tmp_path)
    top, everything = _estimate(table, sidecars=False), _estimate(table, sidecars=True)
    assert top < everything
    spy = _Spy(monkeypatch)
    engine = LocalEngine(memory_limit_bytes=(top + everything) // 2)
    with pytest.raises(ResourceLimitError, match="Spark engine"):
        DeltaLog(str(table), engine=engine).update()
    sidecar_calls = [c for c in spy.calls if "_sidecars/" in c]
    assert sidecar_calls and all(c.startswith("open ") for c in sidecar_calls)  # their footers, no data
    fits = LocalEngine(memory_limit_bytes=everything)
    plain = LocalEngine(plain=True, memory_limit_bytes=None)
    assert DeltaLog(str(table), engine=fits).update().num_files == DeltaLog(str(table), engine=plain).update().num_files


class _SparkChosen(Exception):
    pass


def _spark_stops_here(calls):
    def spark_factory(options):
        calls.append(options)
        raise _SparkChosen

    return spark_factory


def test_auto_engine_distributes_a_log_the_local_limit_cannot_hold(tmp_path, monkeypatch):
    """The command layer's `engine="auto"`: local below the size threshold while the state fits the
    local engine's default limit, Spark when it does not. The Spark session factory is a spy that
    stops the run there (the Spark run itself is tests/jobs' job tests')."""
    from airflow_delta_provider.commands.command import choose_engine

    table = copy_table(CLASSIC, tmp_path)
    needed = _estimate(table, sidecars=False)
    calls = []
    factory = _spark_stops_here(calls)
    monkeypatch.setattr(local, "default_memory_limit", lambda: needed)
    _, fits = execute(Request(str(table), "snapshot", engine="auto"), spark_factory=factory)
    assert fits["num_files"] == DeltaLog(str(table)).update().num_files
    assert fits["engine"] == "local" and not calls
    monkeypatch.setattr(local, "default_memory_limit", lambda: needed - 1)
    _, over = execute(Request(str(table), "snapshot", engine="auto"), spark_factory=factory)
    assert over["error_class"] == "_SparkChosen" and over["engine"] == "spark" and len(calls) == 1
    _, asked_local = execute(Request(str(table), "snapshot", engine="local"), spark_factory=factory)
    assert asked_local["error_class"] == "ResourceLimitError"  # asked for local: the limit's error, no Spark
    assert len(calls) == 1
    assert choose_engine("auto", 2 << 30, 1024.0) == "spark"


def test_auto_run_switches_to_spark_when_sidecars_do_not_fit(tmp_path, monkeypatch):
    """The listing of a V2 table shows only its small top-level checkpoint, so `auto` starts locally;
    the sidecars, checked before they are read, do not fit, and the run turns to Spark."""
    table = copy_table(V2, tmp_path)
    top, everything = _estimate(table, sidecars=False), _estimate(table, sidecars=True)
    monkeypatch.setattr(local, "default_memory_limit", lambda: (top + everything) // 2)
    calls = []
    factory = _spark_stops_here(calls)
    _, result = execute(Request(str(table), "snapshot", engine="auto"), spark_factory=factory)
    assert calls and result["engine"] == "spark" and result["error_class"] == "_SparkChosen"
    _, asked_local = execute(Request(str(table), "snapshot", engine="local"), spark_factory=factory)
    assert asked_local["error_class"] == "ResourceLimitError"
    assert len(calls) == 1


def _rewrite_sidecar_sizes(table, size: int) -> None:
    """Set every sidecar action's sizeInBytes in the table's JSON V2 checkpoint to `size`."""
    import json

    for path in (table / "_delta_log").glob("*.checkpoint.*.json"):
        lines = []
        for line in path.read_text().splitlines():
            obj = json.loads(line)
            if "sidecar" in obj:
                obj["sidecar"]["sizeInBytes"] = size
            lines.append(json.dumps(obj))
        path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("logged", [0, 1, 10**9], ids=["zero", "too-small", "too-large"])
def test_a_wrong_logged_sidecar_size_does_not_lift_the_limit(tmp_path, logged):
    """Footers are found from the file's end, and unknown sizes are asked of the store."""
    table = copy_table("delta-golden/v2-checkpoint-json", tmp_path)
    _rewrite_sidecar_sizes(table, logged)
    top, everything = _estimate(table, sidecars=False), _estimate(table, sidecars=True)
    assert top < everything
    with pytest.raises(ResourceLimitError):
        DeltaLog(str(table), engine=LocalEngine(memory_limit_bytes=(top + everything) // 2)).update()
    fits = DeltaLog(str(table), engine=LocalEngine(memory_limit_bytes=everything)).update()
    assert (
        fits.num_files
        == DeltaLog(str(table), engine=LocalEngine(plain=True, memory_limit_bytes=None)).update().num_files
    )
