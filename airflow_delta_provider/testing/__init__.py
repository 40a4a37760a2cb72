"""The testing kit: real Delta tables for unit tests of DAGs and operators, no JVM, Spark or deltalake.

`DeltaLogBuilder` writes a table's `_delta_log`, one commit per call: JSON commits with add, remove,
metaData, protocol, txn and domainMetadata actions, and checkpoints. Only the log is written; data
files are not (unless ``write_data_files=True``, which writes placeholder files of the logged size),
so the table can be inspected, listed and time travelled (and, with placeholders, vacuumed), but not
scanned. Delta readers (this provider's `airflow_delta_provider.delta`, deltalake / delta-rs, Spark)
read the result like any other table.

The builder only composes actions; the rest is the library's own code, so a test table is written
the way the provider writes tables: each commit is created with the store's put-if-absent (never
overwriting a version; a local directory or an object store), the tracked state (`files`,
`tombstones`, `metadata`, ...) is the library's `InMemoryLogReplay` of what was written, and
`checkpoint()` is the library's checkpoint writer, run as of that version's commit time.

Commit ``v`` is stamped ``start_time_ms + v * step_ms`` (its commitInfo ``timestamp``, every add's
``modificationTime``, the default ``deletionTimestamp`` of its removes, and, on a local table, the
commit file's mtime, so time travel by timestamp works). Pass ``timestamp_ms=`` to any commit method
to choose one commit's time. The default start is fixed (2023-11-14), so tests are reproducible;
tombstones are then long past any retention by the wall clock: give the reader a `FakeClock`
(``DeltaLog(path, clock=clock)``) or ``now_ms=``, or pass ``start_time_ms`` near now.

File names: a name without ``/`` is placed under the partition directory built from ``partition``
(``date=2024-01-01/part-0.parquet``) and URI-encoded as Delta writers log it (partition values are
Hive-escaped, then the whole path is URI-encoded, as Spark does: ``ts=2024-01-01 10:00`` becomes
``ts=2024-01-01%2010%253A00``). A name containing ``/`` (or an absolute URI) is logged verbatim.
`commit()` writes raw action dicts as given: the escape hatch, also for deliberately broken logs.

pytest fixtures (a ``pytest11`` plugin, active once the package is installed; ``-p
no:airflow_delta_provider`` turns it off), each new per test:

* ``delta_table``: a `DeltaLogBuilder` at ``tmp_path / "table"`` with `DEFAULT_SCHEMA`, not yet
  created (call ``create()``);
* ``delta_clock``: a `FakeClock` at `DEFAULT_START_TIME_MS` (the builder's version 0), with
  ``set(ms)`` and ``advance(ms)``; pass it as ``DeltaLog(path, clock=delta_clock)``;
* ``delta_s3_table``: the same table in a fresh bucket of an S3-compatible server on 127.0.0.1 (moto's
  ``ThreadedMotoServer``, one per session); ``DeltaLog(t.uri, storage_options=t.storage_options)``
  reads it. Skipped when moto (``moto[server]``) or s3fs is not installed.

Example::

    from airflow_delta_provider.delta import DeltaLog

    DAY_MS = 86_400_000

    def test_a_tombstone_expires_after_a_week(delta_table, delta_clock):
        delta_table.create()                                  # version 0
        delta_table.append(["a.parquet", "b.parquet"])        # version 1
        delta_table.remove(["a.parquet"])                     # version 2: a tombstone
        delta_table.checkpoint()                              # 00000000000000000002.checkpoint.parquet
        assert set(delta_table.files) == {"b.parquet"}
        log = DeltaLog(delta_table.path, clock=delta_clock)
        delta_clock.set(delta_table.timestamp(2) + DAY_MS)
        assert log.update().num_tombstones() == 1
        delta_clock.advance(7 * DAY_MS)                       # past the default 7-day retention
        assert log.update().num_tombstones() == 0

Point the DAG, operator or sensor under test at ``delta_table.path`` (or ``.uri``); with
``submit=False`` the provider's operators run their job in the test process with the local engine.

Importing this package pulls in only the standard library and the provider's pure `delta.protocol`
and `delta.storage` modules; pyarrow is imported when a checkpoint is written. It never imports
Airflow, pyspark or deltalake.
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
