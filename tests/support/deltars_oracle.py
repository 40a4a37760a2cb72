"""Independent oracles for the randomized and fault-injection tests.

Two oracles, neither of which uses `airflow_delta_provider.delta`:

* `deltars_*`: what deltalake (delta-rs python, 1.6.6) says about a version of a table.
* `raw_log_state`: a deliberately naive reconciliation straight from the files in `_delta_log`
  (newest classic checkpoint <= version read with pyarrow, then the JSON commits after it, one
  `json.loads` per line). Used for tombstones and app transactions, which delta-rs does not expose.

Also small helpers to copy read-only corpus tables and to damage files.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

#: The read-only reference corpus (`DELTA_TABLES_DIR` overrides it, as in conftest.py).
CORPUS = Path(os.environ.get("DELTA_TABLES_DIR") or "/work/shared/delta-tables")

_COMMIT_RE = re.compile(r"^(\d{20})\.json$")
_CLASSIC_CP_RE = re.compile(r"^(\d{20})\.checkpoint\.parquet$")


def log_dir(table: str | os.PathLike[str]) -> Path:
    return Path(table) / "_delta_log"


def commit_path(table: str | os.PathLike[str], version: int) -> Path:
    return log_dir(table) / f"{version:020d}.json"


def checkpoint_path(table: str | os.PathLike[str], version: int) -> Path:
    return log_dir(table) / f"{version:020d}.checkpoint.parquet"


# -- delta-rs -----------------------------------------------------------------------------------------
def deltars_table(table: str | os.PathLike[str], version: int | None = None) -> Any:
    from deltalake import DeltaTable

    return DeltaTable(str(table), version=version)


def deltars_files(table: str | os.PathLike[str], version: int | None = None) -> dict[str, int]:
    """Active paths (raw log strings) -> size_bytes, as delta-rs sees `version`."""
    dt = deltars_table(table, version)
    actions = pa.table(dt.get_add_actions(flatten=True))
    paths = actions.column("path").to_pylist()
    sizes = actions.column("size_bytes").to_pylist()
    assert len(paths) == len(set(paths)), "delta-rs returned a path twice"
    return dict(zip(paths, sizes, strict=True))


@dataclass
class DeltaRsView:
    version: int
    files: dict[str, int]
    min_reader_version: int
    min_writer_version: int
    reader_features: tuple[str, ...] | None
    writer_features: tuple[str, ...] | None
    metadata_id: str
    partition_columns: tuple[str, ...]
    configuration: dict[str, str | None]


def deltars_view(table: str | os.PathLike[str], version: int | None = None) -> DeltaRsView:
    dt = deltars_table(table, version)
    actions = pa.table(dt.get_add_actions(flatten=True))
    files = dict(zip(actions.column("path").to_pylist(), actions.column("size_bytes").to_pylist(), strict=True))
    proto = dt.protocol()
    meta = dt.metadata()

    def feats(value: Any) -> tuple[str, ...] | None:
        return None if value is None else tuple(sorted(str(v) for v in value))

    return DeltaRsView(
        version=dt.version(),
        files=files,
        min_reader_version=proto.min_reader_version,
        min_writer_version=proto.min_writer_version,
        reader_features=feats(proto.reader_features),
        writer_features=feats(proto.writer_features),
        metadata_id=meta.id,
        partition_columns=tuple(meta.partition_columns),
        configuration=dict(meta.configuration),
    )


# -- raw log replay -----------------------------------------------------------------------------------
@dataclass
class RawLogState:
    """What the raw files of the log say about one version."""

    version: int
    checkpoint_version: int | None
    active: dict[str, int] = field(default_factory=dict)  # path -> size
    tombstones: dict[str, dict[str, Any]] = field(default_factory=dict)  # path -> remove action
    txns: dict[str, dict[str, Any]] = field(default_factory=dict)  # appId -> txn action
    protocol: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None

    def apply(self, action: dict[str, Any]) -> None:
        if "add" in action and action["add"] is not None:
            add = action["add"]
            self.active[add["path"]] = int(add["size"])
            self.tombstones.pop(add["path"], None)
        elif "remove" in action and action["remove"] is not None:
            rm = action["remove"]
            self.active.pop(rm["path"], None)
            self.tombstones[rm["path"]] = rm
        elif "txn" in action and action["txn"] is not None:
            self.txns[action["txn"]["appId"]] = action["txn"]
        elif "protocol" in action and action["protocol"] is not None:
            self.protocol = action["protocol"]
        elif "metaData" in action and action["metaData"] is not None:
            self.metadata = action["metaData"]


def list_versions(table: str | os.PathLike[str]) -> tuple[list[int], list[int]]:
    """(commit versions, non-empty classic checkpoint versions) present in `_delta_log`, sorted."""
    commits, checkpoints = [], []
    for name in os.listdir(log_dir(table)):
        if m := _COMMIT_RE.match(name):
            commits.append(int(m[1]))
        elif (m := _CLASSIC_CP_RE.match(name)) and (log_dir(table) / name).stat().st_size > 0:
            checkpoints.append(int(m[1]))
    return sorted(commits), sorted(checkpoints)


def recreatable(table: str | os.PathLike[str], version: int, *, use_checkpoint: bool = True) -> bool:
    """Whether the files on disk can make `version`: a checkpoint <= version (or version 0) followed by
    every commit up to `version`."""
    commits, checkpoints = list_versions(table)
    present = set(commits)
    starts = [c + 1 for c in checkpoints if c <= version] if use_checkpoint else []
    starts.append(0)
    return any(all(v in present for v in range(start, version + 1)) for start in starts)


def _checkpoint_rows(path: Path) -> list[dict[str, Any]]:
    pf = pq.ParquetFile(path)
    names = [n for n in ("protocol", "metaData", "txn", "add", "remove") if n in pf.schema_arrow.names]
    data = pf.read(columns=names)
    rows: list[dict[str, Any]] = []
    for name in names:
        for value in data.column(name).to_pylist():
            if value is not None:
                rows.append({name: value})
    return rows


def raw_log_state(table: str | os.PathLike[str], version: int, *, use_checkpoint: bool = True) -> RawLogState:
    """Reconcile `version` from the newest classic checkpoint <= version (if any) and JSON commits."""
    commits, checkpoints = list_versions(table)
    cps = [c for c in checkpoints if c <= version] if use_checkpoint else []
    cp = cps[-1] if cps else None
    state = RawLogState(version=version, checkpoint_version=cp)
    if cp is not None:
        for row in _checkpoint_rows(checkpoint_path(table, cp)):
            state.apply(row)
    start = 0 if cp is None else cp + 1
    needed = list(range(start, version + 1))
    assert [c for c in commits if start <= c <= version] == needed, f"oracle: commits {needed} not all present"
    for v in needed:
        for line in commit_path(table, v).read_text().splitlines():
            if line.strip():
                state.apply(json.loads(line))
    return state


# -- helpers for fault injection ----------------------------------------------------------------------
def make_writable(root: str | os.PathLike[str]) -> None:
    """The corpus is read-only and `copytree` keeps modes: open the copy up for writes and deletes."""
    for dirpath, dirnames, filenames in os.walk(root):
        os.chmod(dirpath, os.stat(dirpath).st_mode | stat.S_IWUSR | stat.S_IRUSR | stat.S_IXUSR)
        for name in filenames:
            p = os.path.join(dirpath, name)
            os.chmod(p, os.stat(p).st_mode | stat.S_IWUSR | stat.S_IRUSR)
        for name in dirnames:
            p = os.path.join(dirpath, name)
            os.chmod(p, os.stat(p).st_mode | stat.S_IWUSR | stat.S_IRUSR | stat.S_IXUSR)


def copy_corpus_table(name: str, dest: str | os.PathLike[str]) -> Path:
    """A writable copy of `/work/shared/delta-tables/<name>` at `dest`."""
    src = CORPUS / name
    dest = Path(dest)
    shutil.copytree(src, dest)
    make_writable(dest)
    return dest
