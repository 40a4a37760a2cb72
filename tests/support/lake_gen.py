"""A generated lake for the lake autopilot's tests: hundreds of tables of known kinds, built cheaply.

Each kind is written once as a template (delta-rs writes, or a copy of a Spark-written corpus table where
delta-rs cannot write the feature: deletion vectors, clustering, a refused reader feature), then copied with
`cp -rp` (contents and mtimes kept) to as many table folders as the kind needs. A copy is an honest table of its
kind: its log and data are exactly what the writer made, only its folder differs. Each table carries the work the
plan must pick for it (`expected`: a set of (operation, partitions)), or the error class its scan must report.

    lake = build_lake(tmp_path / "lake", counts={"healthy": 120, ...})
    lake.expected_tasks()  # {(table URI, operation, partitions)}
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

CORPUS = Path("/work/shared/delta-tables")
DAY_PROPS = {"delta.logRetentionDuration": "interval 1 day", "delta.deletedFileRetentionDuration": "interval 1 day"}

#: The policy the lake is planned with (`min_small_files` 3: a few tiny appends make a small-file partition).
POLICY = {
    "defaults": {"min_small_files": 3},
    "never_unattended": ["vacuum"],
    "tables": [{"match": "*/longlog_only_*", "disabled": ["optimize"]}],
    "never_touch": ["*/untouchable_*"],
}


def _append(path: Path, p: str | None = None, n: int = 3, start: int = 0, **kwargs) -> None:
    data = pa.table({"p": [p or "x"] * n, "x": list(range(start, start + n))})
    write_deltalake(str(path), data, partition_by=["p"] if p else None, mode="append", **kwargs)


def _healthy(path: Path) -> None:
    _append(path, n=5)


def _healthy_partitioned(path: Path) -> None:
    _append(path, "a")
    _append(path, "b")


def _small_one_partition(path: Path) -> None:
    """Small files in p=a only: p=b has one file."""
    for i in range(6):
        _append(path, "a", start=3 * i)
    _append(path, "b")


def _small_two_partitions(path: Path) -> None:
    """Small files in p=a (4) and p=c (3); p=b has two files, under the policy's three; nine commits, under
    the checkpoint interval."""
    for i in range(4):
        _append(path, "a", start=3 * i)
    for i in range(2):
        _append(path, "b", start=3 * i)
    for i in range(3):
        _append(path, "c", start=3 * i)


def _tombstones(path: Path) -> None:
    """One file rewritten by a DELETE: its predecessor is a tombstone (past retention when planned)."""
    _append(path, n=6)
    DeltaTable(str(path)).delete("x < 2")


def _tombstones_many(path: Path) -> None:
    """Three overwrites: three tombstones, one active file."""
    for i in range(4):
        write_deltalake(str(path), pa.table({"x": list(range(i, i + 4))}), mode="overwrite")


def _longlog(path: Path) -> None:
    """Twelve commits, no checkpoint (delta-rs checkpoints only when asked)."""
    for i in range(12):
        _append(path, start=3 * i)


def _expired_log(path: Path) -> None:
    """Log retention of a day, two appends and a checkpoint at version 1: version 0's commit expires."""
    _append(path, configuration=DAY_PROPS)
    _append(path, start=3)
    DeltaTable(str(path)).create_checkpoint()


def _corrupt(path: Path) -> None:
    _append(path)
    _append(path, start=3)
    (path / "_delta_log" / "00000000000000000001.json").write_text("{not json")


def _corpus(name: str) -> Callable[[Path], None]:
    def build(path: Path) -> None:
        shutil.copytree(CORPUS / name, path, copy_function=shutil.copy2)
        for p in [path, *path.rglob("*")]:
            p.chmod(p.stat().st_mode | 0o200)

    build.__doc__ = f"A copy of the corpus table {name} (written by Spark or delta-rs upstream)."
    return build


@dataclass(frozen=True)
class Kind:
    """A kind of table: how its template is built, where its copies go, what the plan must do with each."""

    name: str
    build: Callable[[Path], None]
    #: (operation, partitions) the plan must pick for a table of this kind.
    expected: frozenset[tuple[str, tuple[str, ...]]] = frozenset()
    #: The error class a scan reports instead of a health (None: the table reads).
    error: str | None = None
    #: (operation or None, error class or None) the plan reports as skipped.
    skipped: frozenset[tuple[str | None, str | None]] = frozenset()
    #: The folder under the lake root its copies go in (depth varies, at most 4 folders below the root).
    folder: str = ""


KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind("healthy", _healthy, folder="raw"),
        Kind("healthy_partitioned", _healthy_partitioned, folder="raw/eu/sales"),
        Kind("small_one", _small_one_partition, frozenset({("optimize", ("p=a",))}), folder="curated"),
        Kind("small_two", _small_two_partitions, frozenset({("optimize", ("p=a", "p=c"))}), folder="curated/eu"),
        Kind("tombstones", _tombstones, frozenset({("vacuum", ())}), folder="raw/us"),
        Kind("tombstones_many", _tombstones_many, frozenset({("vacuum", ())}), folder="raw/us/west"),
        Kind("longlog_only", _longlog, frozenset({("checkpoint", ())}), skipped=frozenset({("optimize", None)})),
        Kind("longlog_small", _longlog, frozenset({("optimize", ("",)), ("checkpoint", ())}), folder="a/b/c"),
        Kind("expired_log", _expired_log, frozenset({("log_cleanup", ())}), folder="old"),
        Kind("untouchable", _small_one_partition, skipped=frozenset({(None, None)}), folder="curated"),
        Kind("corrupt", _corrupt, error="MalformedCommitError", folder="broken"),
        Kind(
            "dv_heavy",
            _corpus("delta-spark/table-with-dv-large"),
            frozenset({("optimize", ("",))}),
            folder="spark",
        ),
        Kind(
            "dv_heavy_partitioned",
            _corpus("delta-spark/partitioned-table-with-dv-large"),
            frozenset(),
            folder="spark/p",
        ),
        Kind(
            "clustered",
            _corpus("delta-rs/table_with_liquid_clustering"),
            skipped=frozenset({("optimize", "UnsupportedFeatureError")}),
            folder="refused",
        ),
        Kind(
            "catalog_owned",
            _corpus("delta-rs/data_err_logs/table_d"),
            error="UnsupportedFeatureError",
            folder="refused",
        ),
    )
}

#: How many tables of each kind the 200-table lake has (most are healthy and tiny, as in a real lake).
COUNTS = {
    "healthy": 110,
    "healthy_partitioned": 20,
    "small_one": 12,
    "small_two": 6,
    "tombstones": 10,
    "tombstones_many": 6,
    "longlog_only": 6,
    "longlog_small": 4,
    "expired_log": 8,
    "untouchable": 3,
    "corrupt": 3,
    "dv_heavy": 4,
    "dv_heavy_partitioned": 4,
    "clustered": 2,
    "catalog_owned": 2,
}


@dataclass
class Lake:
    root: Path
    #: Table URI (file://...) -> its kind.
    tables: dict[str, Kind] = field(default_factory=dict)
    #: Kind name -> its template folder (outside the lake).
    templates: dict[str, Path] = field(default_factory=dict)

    def uri(self, path: Path) -> str:
        return "file://" + str(path)

    def expected_tasks(self) -> set[tuple[str, str, tuple[str, ...]]]:
        return {(t, op, parts) for t, k in self.tables.items() for op, parts in k.expected}

    def expected_errors(self) -> set[tuple[str, str]]:
        return {(t, k.error) for t, k in self.tables.items() if k.error}

    def expected_skipped(self) -> set[tuple[str, str | None, str | None]]:
        return {(t, op, err) for t, k in self.tables.items() for op, err in k.skipped}

    def of_kind(self, name: str) -> list[str]:
        return sorted(t for t, k in self.tables.items() if k.name == name)


def build_templates(where: Path, kinds: Mapping[str, Kind] = KINDS) -> dict[str, Path]:
    """Each kind's template table, built once."""
    out = {}
    for name, kind in kinds.items():
        path = where / name
        kind.build(path)
        out[name] = path
    return out


def copy_tree(src: Path, dst: Path) -> None:
    """`cp -rp`: the table's files with their contents and mtimes."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-rp", str(src), str(dst)], check=True)


def build_lake(root: Path, counts: Mapping[str, int] = COUNTS, *, templates: Mapping[str, Path] | None = None) -> Lake:
    """`counts[kind]` copies of each kind's template under `root` (templates built beside `root` unless given)."""
    if templates is None:
        templates = build_templates(root.parent / f"{root.name}_templates", {k: KINDS[k] for k in counts})
    lake = Lake(root, templates=dict(templates))
    root.mkdir(parents=True, exist_ok=True)
    for name, n in counts.items():
        kind = KINDS[name]
        for i in range(n):
            dst = root / kind.folder / f"{name}_{i:03d}" if kind.folder else root / f"{name}_{i:03d}"
            copy_tree(templates[name], dst)
            lake.tables[lake.uri(dst)] = kind
    return lake


class RacingWriters:
    """delta-rs writers racing the autopilot DAG in `dag.test()`: writes fired at set points of its tasks, and a
    free-running appender.

    The DAG's `clock` is `RACE.clock`: a step's first call comes once its driver has read its snapshot (the
    `DeltaLog` notes the load time) and before it commits, so a write registered with `on(task_id, table)` lands
    inside that window: a real delta-rs commit, only its moment chosen. `clock` returns the system time plus
    `offset_ms`."""

    def __init__(self) -> None:
        self.events: dict[tuple[str, str | None], Callable[[], None]] = {}
        self.fired: list[tuple[str, str | None]] = []
        self.offset_ms = 0
        self._lock = threading.Lock()

    def on(self, task_id: str, table: str | None, write: Callable[[], None]) -> None:
        """Run `write` once, the first time `task_id` (for `table`'s mapped group, or any) reads the clock."""
        self.events[(task_id, table)] = write

    def clock(self) -> int:
        key: tuple[str, str | None] | None = None
        try:
            from airflow.sdk import get_current_context

            context = get_current_context()
            key = (context["ti"].task_id, context.get("table_label"))  # type: ignore[attr-defined]
        except Exception:  # no task context (a plain library call)
            key = None
        write = None
        if key is not None:
            with self._lock:
                write = self.events.pop(key, None) or self.events.pop((key[0], None), None)
        if write is not None:
            self.fired.append(key)  # type: ignore[arg-type]
            write()
        return int(time.time() * 1000) + self.offset_ms


class Appender(threading.Thread):
    """Appends 3 rows (`x` = 1000 + 3i ...) to an unpartitioned `_append` table until stopped; `appended` holds
    the rows of each append delta-rs committed."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.appended: list[list[tuple[str, int]]] = []
        self.failures: list[BaseException] = []
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            start = 1000 + 3 * len(self.appended)
            try:
                _append(self.path, start=start)
                self.appended.append([("x", start + i) for i in range(3)])
            except Exception as exc:  # recorded, asserted empty by the test
                self.failures.append(exc)
            self._stop_event.wait(0.2)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


#: The racing writers of the DAG in `dag.test()` (one per process; the test sets its events).
RACE = RacingWriters()
