"""Spark reads of logstore (and Kafka) log dirs: `spark.read.format("logstore")`, no broker in the path.

    import logstore.spark
    logstore.spark.register(spark)
    df = spark.read.format("logstore").option("subscribe", "orders").load("/var/lib/logstore")

The options and the schema are those of Spark's Kafka source (see README);
`isolation.level` defaults to read_committed.
"""
from logstore.spark.source import LogstoreDataSource


def register(spark) -> None:
    """Make `format("logstore")` known to a SparkSession."""
    spark.dataSource.register(LogstoreDataSource)


__all__ = ["LogstoreDataSource", "register"]
