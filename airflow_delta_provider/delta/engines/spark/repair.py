"""Repair's HEAD checks on Spark executors: the active files are dealt to `mapInArrow` tasks in chunks, and
each task runs the local engine's bounded-concurrency loop (`engines.missing_files`) on its chunk; only the
positions of the missing files come back to the driver."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...protocol.actions import AddFile
from .. import DEFAULT_HEAD_WORKERS
from .zorder import TaskFactory, run_items

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

    from ...storage import LogStore
    from .. import FileChecker

#: Files one task checks (its HEAD requests `max_workers` at a time).
FILES_PER_TASK = 2000


def _head_task(
    table_root: str, storage_options: Mapping[str, Any], deletion_vectors: bool, workers: int, table: str | None
) -> TaskFactory:
    options = dict(storage_options)

    def make() -> Callable[[str], str]:
        from ...storage import store_for
        from .. import missing_files

        store = store_for(table_root, options)

        def one(item: str) -> str:
            files = [AddFile.from_json(a) for a in json.loads(item)]
            gone = missing_files(
                store, table_root, files, deletion_vectors=deletion_vectors, max_workers=workers, table=table
            )
            lost = {id(f) for f in gone}
            return json.dumps([i for i, f in enumerate(files) if id(f) in lost])

        return one

    return make


def spark_file_checker(
    spark: SparkSession,
    storage_options: Mapping[str, Any],
    *,
    max_workers: int | None = None,
    files_per_task: int = FILES_PER_TASK,
) -> FileChecker:
    """The Spark engine's `FileChecker`: chunks of `files_per_task` files, one task each, `max_workers` HEAD
    requests in flight per task."""
    workers = max_workers or DEFAULT_HEAD_WORKERS
    step = max(1, files_per_task)

    def run(
        store: LogStore,
        table_root: str,
        files: Sequence[AddFile],
        *,
        deletion_vectors: bool = False,
        table: str | None = None,
    ) -> list[AddFile]:
        chunks = [files[i : i + step] for i in range(0, len(files), step)]
        items = [json.dumps([f.to_json() for f in c]) for c in chunks]
        make = _head_task(table_root, storage_options, deletion_vectors, workers, table)
        out = run_items(spark, items, make)
        return [c[i] for c, text in zip(chunks, out, strict=True) for i in json.loads(text)]

    return run
