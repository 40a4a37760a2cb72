"""Write a small sample Delta table with delta-rs (the independent writer): appends, a partitioned
layout, a delete, an overwrite of one partition, a checkpoint. Recreates the table on every run.

`--keep-writing SECONDS` then appends a small batch every SECONDS (now and then two in quick succession,
or a delete), until interrupted: the table `./scripts/serve` shows live."""

from __future__ import annotations

import argparse
import random
import shutil
import time
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


def keep_writing(uri: str, every: float) -> None:
    regions = ("eu", "us", "apac")
    next_id = 1000
    while True:
        time.sleep(every)
        burst = 2 if random.random() < 0.2 else 1  # two commits within one poll now and then
        for _ in range(burst):
            write_deltalake(uri, batch(next_id, 20, random.choice(regions)), partition_by=["region"], mode="append")
            next_id += 20
        if random.random() < 0.1:
            DeltaTable(uri).delete(f"id < {next_id - 500}")
        print(f"{time.strftime('%H:%M:%S')} {uri}: version {DeltaTable(uri).version()}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", default="demo/sample_table")
    parser.add_argument("--keep-writing", type=float, metavar="SECONDS", help="then append every SECONDS")
    args = parser.parse_args()
    main(args.path)
    if args.keep_writing:
        try:
            keep_writing(args.path, args.keep_writing)
        except KeyboardInterrupt:
            pass
