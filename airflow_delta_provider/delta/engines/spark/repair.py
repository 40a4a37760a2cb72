"""Repair's HEAD checks on Spark executors; each task runs the local engine's bounded-concurrency loop
(`engines.missing_files`) on its files, and only the missing files come back to the driver.

`missing_active` checks a snapshot replayed on Spark where its files are: a `mapInArrow` over the state's
reconciled file actions (`DistributedFileState.json_frame`), so a table's active files are never collected
to the driver. `missing` checks a list of files the driver holds, dealt to tasks in chunks.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...protocol.actions import AddFile
from .. import DEFAULT_HEAD_WORKERS, LocalFileChecker
from .tasks import batch_rows
from .zorder import TaskFactory, run_items

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from ...snapshot import Snapshot
    from ...storage import LogStore

#: Files one task checks when the driver holds them (its HEAD requests `max_workers` at a time).
FILES_PER_TASK = 2000
CHECKED_SCHEMA = "checked long, add string, error string"


def check_table_visible(store: LogStore, table_root: str, table: str | None) -> None:
    """`StorageError` unless this executor sees the table's `_delta_log` (e.g. a local path the workers do
    not mount): checked before any file is called missing, so RESTORE's `allow_partial` cannot leave out
    files that exist."""
    from ...errors import StorageError

    if not store.is_dir(store.join(table_root, "_delta_log")):
        raise StorageError(
            f"a Spark executor cannot see the table's _delta_log at {table_root}: the executors must reach "
            "the table's storage (a local path must be mounted on every worker)",
            table=table or table_root,
        )


def _chunk_task(
    table_root: str, storage_options: Mapping[str, Any], deletion_vectors: bool, workers: int, table: str | None
) -> TaskFactory:
    options = dict(storage_options)

    def make() -> Callable[[str], str]:
        from ...storage import store_for
        from .. import missing_files

        store = store_for(table_root, options)
        seen: list[bool] = []

        def one(item: str) -> str:
            if not seen:  # an executor that cannot see the table would call every file missing
                check_table_visible(store, table_root, table)
                seen.append(True)
            files = [AddFile.from_json(a) for a in json.loads(item)]
            gone = missing_files(
                store, table_root, files, deletion_vectors=deletion_vectors, max_workers=workers, table=table
            )
            lost = {id(f) for f in gone}
            return json.dumps([i for i, f in enumerate(files) if id(f) in lost])

        return one

    return make


def _frame_task(
    table_root: str, storage_options: Mapping[str, Any], workers: int
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The `mapInArrow` function over `json` rows of file actions: per batch, how many adds were checked and
    the missing ones' JSON (a `DeltaError` as one `error` row)."""
    options = dict(storage_options)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        from ...errors import DeltaError
        from ...storage import store_for
        from .. import missing_files

        schema = pa.schema([("checked", pa.int64()), ("add", pa.string()), ("error", pa.string())])

        def batch(checked: int, added: list[str | None], error: DeltaError | None) -> pa.RecordBatch:
            """`checked` on the first row (0 on the others), a missing add on each, the error on the first."""
            more = len(added) - 1
            text = None if error is None else json.dumps(error.to_dict(), default=str)
            columns = {"checked": [checked] + [0] * more, "add": added, "error": [text] + [None] * more}
            return pa.RecordBatch.from_pydict(columns, schema=schema)

        store = store_for(table_root, options)
        try:
            check_table_visible(store, table_root, table_root)
        except DeltaError as exc:
            yield batch(0, [None], exc)
            return
        for b in batches:
            actions = (json.loads(text) for (text,) in batch_rows(b, ("json",)))
            adds = [AddFile.from_json(a["add"]) for a in actions if "add" in a]
            try:
                gone = missing_files(store, table_root, adds, max_workers=workers, table=table_root)
            except DeltaError as exc:
                yield batch(len(adds), [None], exc)
            else:
                yield batch(len(adds), [json.dumps(f.to_json()) for f in gone] or [None], None)

    return run


class SparkFileChecker:
    """The Spark engine's `FileChecker`: `max_workers` HEAD requests in flight per task; files the driver
    holds go in chunks of `files_per_task`, one task each."""

    def __init__(
        self,
        spark: SparkSession,
        storage_options: Mapping[str, Any],
        *,
        max_workers: int | None = None,
        files_per_task: int = FILES_PER_TASK,
    ) -> None:
        self.spark = spark
        self.storage_options = dict(storage_options)
        self.workers = max_workers or DEFAULT_HEAD_WORKERS
        self.files_per_task = max(1, files_per_task)

    def missing(
        self,
        store: LogStore,
        table_root: str,
        files: Sequence[AddFile],
        *,
        deletion_vectors: bool = False,
        table: str | None = None,
    ) -> list[AddFile]:
        step = self.files_per_task
        chunks = [files[i : i + step] for i in range(0, len(files), step)]
        items = [json.dumps([f.to_json() for f in c]) for c in chunks]
        make = _chunk_task(table_root, self.storage_options, deletion_vectors, self.workers, table)
        out = run_items(self.spark, items, make)
        return [c[i] for c, text in zip(chunks, out, strict=True) for i in json.loads(text)]

    def missing_active(self, snapshot: Snapshot) -> tuple[int, list[AddFile]]:
        from ...errors import error_from_dict
        from .session import run_spark
        from .state import DistributedFileState

        files = snapshot.state.files
        if not isinstance(files, DistributedFileState):  # a state loaded in this process
            return LocalFileChecker(self.workers).missing_active(snapshot)
        task = _frame_task(snapshot.table, self.storage_options, self.workers)
        frame = files.json_frame().mapInArrow(task, CHECKED_SCHEMA)
        rows = run_spark(frame.collect, table=snapshot.table, version=snapshot.version)
        errors = [r["error"] for r in rows if r["error"] is not None]
        if errors:
            raise error_from_dict(json.loads(errors[0]))
        missing = [AddFile.from_json(json.loads(r["add"])) for r in rows if r["add"] is not None]
        return sum(r["checked"] for r in rows), sorted(missing, key=lambda f: f.path)
