"""The Spark engine: the table's state replayed on a cluster and the operations' heavy work on its executors.

- `state.py`: state reconstruction (`SparkReplay`, `DistributedFileState`), with `frames.py` (the
  checkpoint's rows as DataFrames) and `tasks.py` (what runs in each partition);
- `checkpoint.py`, `vacuum.py`, `optimize.py`: the executors `SparkEngine` hands to the operations
  (`maintenance/<op>.py` decides, plans and commits on the driver).

`engine.py` holds `SparkEngine`. Names are imported on first use: a Spark worker that imports
`tasks` (the standard library only) does not load pyarrow through this package.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

#: Exported name -> the submodule that defines it.
_EXPORTS = {
    "SparkEngine": "engine",
    "SparkReplay": "state",
    "DistributedFileState": "state",
    "SPARK_CONF": "state",
    "DEFAULT_DRIVER_KEYS_MAX_BYTES": "state",
    "DEFAULT_SNAPSHOT_PARTITIONS": "state",
    "hadoop_s3a_conf": "state",
    "run_spark": "state",
    "spark_path": "state",
}


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)


__all__ = sorted(_EXPORTS)
