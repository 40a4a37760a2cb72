"""The testing kit: real Delta tables for unit tests of DAGs and operators, no JVM, Spark or deltalake.

`DeltaLogBuilder` writes a table's `_delta_log`, one commit per call, with the library's put-if-absent,
replay and checkpoint writer, so any Delta reader reads it. Data files are not written (unless
``write_data_files=True``: placeholders of the logged size, e.g. for VACUUM), so the table can be listed,
inspected and time travelled, not scanned. Commit ``v`` is stamped ``start_time_ms + v * step_ms``
(commitInfo, adds' ``modificationTime``, removes' ``deletionTimestamp``, a local commit file's mtime);
``timestamp_ms=`` picks one commit's time. The default start is fixed (2023-11-14), so tombstones are
long past retention by the wall clock: give readers a `FakeClock` or ``now_ms=``. A file name without
``/`` goes under its ``partition`` directory, Hive-escaped then URI-encoded as Spark logs it; one with
``/`` is logged verbatim. `commit()` writes raw action dicts, also for deliberately broken logs.

pytest fixtures (the ``pytest11`` plugin; ``-p no:airflow_delta_provider`` turns it off), new per test:

* ``delta_table``: a `DeltaLogBuilder` at ``tmp_path / "table"`` with `DEFAULT_SCHEMA`, not yet created;
* ``delta_clock``: a `FakeClock` at `DEFAULT_START_TIME_MS` (the builder's version 0), with ``set(ms)``
  and ``advance(ms)``, for ``DeltaLog(path, clock=delta_clock)``;
* ``delta_s3_table``: the same table in a fresh bucket of a loopback S3 server (moto, one per session),
  read with ``DeltaLog(t.uri, storage_options=t.storage_options)``; skipped without ``moto[server]`` and s3fs.

Example::

    def test_a_tombstone_expires_after_a_week(delta_table, delta_clock):
        delta_table.create()                                  # version 0
        delta_table.append(["a.parquet", "b.parquet"])        # version 1
        delta_table.remove(["a.parquet"])                     # version 2: a tombstone
        log = DeltaLog(delta_table.path, clock=delta_clock)
        delta_clock.set(delta_table.timestamp(2) + 86_400_000)
        assert log.update().num_tombstones() == 1
        delta_clock.advance(7 * 86_400_000)                   # past the default 7-day retention
        assert log.update().num_tombstones() == 0

Importing it pulls in no Airflow, pyspark or deltalake (pyarrow only when a checkpoint is written).
"""

from __future__ import annotations

from .builder import (
    DEFAULT_START_TIME_MS,
    ENGINE_INFO,
    DeltaLogBuilder,
    FakeClock,
    FileSpec,
    SchemaSpec,
    partition_path,
)

DEFAULT_SCHEMA: dict[str, str] = {"id": "long", "name": "string"}
"""The schema of the ``delta_table`` and ``delta_s3_table`` fixtures' tables (unpartitioned)."""

__all__ = [
    "DEFAULT_SCHEMA",
    "DEFAULT_START_TIME_MS",
    "ENGINE_INFO",
    "DeltaLogBuilder",
    "FakeClock",
    "FileSpec",
    "SchemaSpec",
    "partition_path",
]
