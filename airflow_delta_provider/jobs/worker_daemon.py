"""PySpark's Python worker daemon, importing PySpark from its byte-compiled installation.

The operators set it as `spark.python.daemon.module` for `local[*]` masters (`quick_start_workers`):
each executor starts it once, and every Python worker it forks then imports `pyspark.worker` (and
PySpark's SQL modules) without compiling them from `pyspark.zip` (`pyspark_path`). Otherwise this is
`python -m pyspark.daemon`. Spark starts the daemon before any `--py-files` reach the worker, so it
must run where this package is installed (a local master's Python is the driver's), and its workers
then use that installed package rather than the `--py-files` zip (the operators build the zip from
the same installation).
"""

from airflow_delta_provider.jobs.pyspark_path import prefer_installed_pyspark

if __name__ == "__main__":
    prefer_installed_pyspark()
    from pyspark.daemon import manager

    manager()
