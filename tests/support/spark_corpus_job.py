"""Corpus parity tasks as ONE Spark application (spark-submit to a standalone master), for the tests.

A classic SparkContext is one per process and the test process already holds the shared `local[2]` one,
so the standalone cluster's pass runs as its own driver: `spark-submit ... spark_corpus_job.py TASKS OUT
[--partitions N] [--summaries]` runs the tasks of the JSON file TASKS (`corpus_parity.run_tasks`: corpus
snapshots, and write actions on copies the test made) with the Spark engine on the application's
executors and writes `{"app_id", "master", "jobs", "cost", "results": {key: ...}}` as JSON to OUT; the test
compares them with the local engine's and checks the written copies itself.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("tasks")
    parser.add_argument("out")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--summaries", action="store_true")
    parser.add_argument("--no-prefetch", action="store_true")
    args = parser.parse_args(argv)

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from corpus_parity import run_tasks
    from pyspark.sql import SparkSession

    from airflow_delta_provider.delta.engines.spark import SparkEngine

    spark = SparkSession.builder.appName("delta-corpus-parity").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        tasks = json.loads(Path(args.tasks).read_text())
        engine = SparkEngine(spark, snapshot_partitions=args.partitions, prefetch_digest=not args.no_prefetch)
        cost: dict[str, list[float]] = {}
        results = run_tasks(tasks, engine, summaries=args.summaries, cost=cost)
        tracker = spark.sparkContext.statusTracker()
        report = {
            "app_id": spark.sparkContext.applicationId,
            "master": spark.sparkContext.master,
            "jobs": max(tracker.getJobIdsForGroup(None) or [-1]) + 1,
            "results": results,
            "cost": cost,
        }
        Path(args.out).write_text(json.dumps(report))
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
