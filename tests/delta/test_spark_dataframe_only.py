"""The Spark engine uses the DataFrame API only (issue 27): no SparkContext, no RDD, so it runs over Spark
Connect. A static check of the names the code uses (comments and docstrings do not count)."""

from __future__ import annotations

import ast
from pathlib import Path

import airflow_delta_provider

SPARK_ENGINE = Path(airflow_delta_provider.__file__).parent / "delta" / "engines" / "spark"
FORBIDDEN = {"sparkContext", "SparkContext", "rdd", "RDD", "parallelize"}


def rdd_uses(source: str) -> list[tuple[int, str]]:
    """(line, name) of every attribute, name or imported name in `source` that is SparkContext or RDD API."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            name = node.attr
        elif isinstance(node, ast.Name):
            name = node.id
        elif isinstance(node, ast.alias):
            name = node.name.rsplit(".", 1)[-1]
        else:
            continue
        if name in FORBIDDEN:
            found.append((node.lineno, name))
    return found


def test_the_check_finds_a_planted_use() -> None:
    planted = "from pyspark import RDD\n# sparkContext in a comment\nrows = spark.sparkContext.parallelize([1]).rdd\n"
    assert sorted(rdd_uses(planted)) == [(1, "RDD"), (3, "parallelize"), (3, "rdd"), (3, "sparkContext")]


def test_spark_engine_uses_the_dataframe_api_only() -> None:
    modules = sorted(SPARK_ENGINE.glob("*.py"))
    assert len(modules) >= 5
    uses = {p.name: found for p in modules if (found := rdd_uses(p.read_text()))}
    assert uses == {}
