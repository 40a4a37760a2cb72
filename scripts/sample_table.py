"""Write a small sample Delta table with delta-rs (the independent writer): appends, a partitioned
layout, a delete, an overwrite of one partition, a checkpoint. Recreates the table on every run."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake


def batch(start: int, n: int, region: str) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "region": pa.array([region] * n),
            "amount": pa.array([float(i) * 1.5 for i in range(start, start + n)]),
        }
    )


def main(path: str) -> None:
    target = Path(path)
    if target.exists():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    uri = str(target)
    write_deltalake(uri, batch(0, 100, "eu"), partition_by=["region"])  # v0
    write_deltalake(uri, batch(100, 100, "us"), partition_by=["region"], mode="append")  # v1
    write_deltalake(uri, batch(200, 50, "eu"), partition_by=["region"], mode="append")  # v2
    DeltaTable(uri).delete("id < 20")  # v3: rewrites a file, leaves a tombstone
    write_deltalake(  # v4: replace the 'us' partition
        uri, batch(300, 80, "us"), partition_by=["region"], mode="overwrite", predicate="region = 'us'"
    )
    DeltaTable(uri).create_checkpoint()
    write_deltalake(uri, batch(400, 10, "apac"), partition_by=["region"], mode="append")  # v5
    print(f"sample table written: {uri} (version {DeltaTable(uri).version()})")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "demo/sample_table")
