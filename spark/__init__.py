"""Spark reads of logstore (and Kafka) log dirs: `spark.read.format("logstore")`, no broker in the path.

    df = spark.read.format("logstore").option("subscribe", "orders").load("/var/lib/logstore")

Spark finds the format by itself, through the `pyspark_logstore` module
(spark/discovery), in the Python it starts for its workers: PYSPARK_PYTHON,
else `python3` on PATH, which must be a Python with logstore installed.
`register(spark)` registers it by hand, for a session whose lookup ran before
logstore was installed. The options and the schema are those of Spark's Kafka
source (see README); `isolation.level` defaults to read_committed.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from logstore.spark.source import LogstoreDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: SparkSession) -> None:
    """Make `format("logstore")` known to a SparkSession by hand (Spark normally finds it by itself)."""
    spark.dataSource.register(LogstoreDataSource)


__all__ = ["LogstoreDataSource", "register"]
