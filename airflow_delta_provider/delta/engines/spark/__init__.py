"""The Spark engine: the table's state replayed on a cluster and the operations' heavy work on its executors,
with the DataFrame API only (`mapInArrow`, joins, aggregations), so it also runs over Spark Connect.

`session.py` holds the session plumbing (settings, API mode, `run_spark`'s typed errors); `state.py`
reconstructs the state (`frames.py`: the JVM side, `tasks.py`: what executors run);
`checkpoint.py`, `vacuum.py` (its tasks in `vacuum_tasks.py`) and `optimize.py` are the executors
`engine.SparkEngine` hands to the operations. Names are imported on first use: a Spark worker
importing `tasks` does not load pyarrow.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

#: Exported name -> the submodule that defines it.
_EXPORTS = {
    "SparkEngine": "engine",
    "SparkReplay": "state",
    "DistributedFileState": "state",
    "SPARK_CONF": "session",
    "DEFAULT_DRIVER_KEYS_MAX_BYTES": "state",
    "DEFAULT_SNAPSHOT_PARTITIONS": "state",
    "hadoop_s3a_conf": "session",
    "run_spark": "session",
    "spark_path": "session",
}


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)


__all__ = sorted(_EXPORTS)
