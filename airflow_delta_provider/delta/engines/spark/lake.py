"""The lake scan as one Spark job: one `mapInArrow` task per table runs the per-table scan the caller passes
(the lake layer's `table_health`, wrapped to return its error entry, never raise: the engines layer does not
import the lake layer), and each result comes back pickled. Storage options travel inside `scan_one`'s
closure, never in a DataFrame."""

from __future__ import annotations

import base64
import json
import pickle
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .zorder import run_items

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession


def scan_tables(spark: SparkSession, tables: Sequence[str], scan_one: Callable[[str], Any]) -> list[Any]:
    """`scan_one(table)` of each table URI, one Spark task per table, results in order. `scan_one` must be
    picklable (a module-level function, or a `functools.partial` of one) and return a picklable value; a
    `DeltaError` it raises is raised here (the lake scan returns a table's error as its entry instead)."""

    def make() -> Callable[[str], str]:
        return lambda item: base64.b64encode(pickle.dumps(scan_one(json.loads(item)))).decode("ascii")

    out = run_items(spark, [json.dumps(t) for t in tables], make)
    return [pickle.loads(base64.b64decode(r)) for r in out]  # our own tasks' results
