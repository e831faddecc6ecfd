"""The `logstore` data source: Spark's Kafka source schema over segment files read in place.

    spark.dataSource.register(LogstoreDataSource)     # or logstore.spark.register(spark)
    df = (spark.read.format("logstore").option("subscribe", "orders")
          .load("/var/lib/logstore"))

Each task reads one offset range through `logstore.reader` and yields Arrow
batches; nothing goes through a broker.
"""
from __future__ import annotations

from typing import Iterator

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from logstore.spark.options import SourceOptions, parse_options
from logstore.spark.planning import Pushdown, TaskRange, plan_batch, push_filters

BASE_SCHEMA = ("key binary, value binary, topic string, partition int, offset long, "
               "timestamp timestamp, timestampType int")
HEADERS_FIELD = "headers array<struct<key: string, value: binary>>"


class RangePartition(InputPartition):
    """One Spark task: a range of offsets of one partition, and how to read it."""

    def __init__(self, task: TaskRange, include_headers: bool):
        super().__init__((task.topic, task.partition, task.scan.start, task.scan.end))
        self.task = task
        self.include_headers = include_headers


class LogstoreDataSource(DataSource):
    """`spark.read.format("logstore")` (and readStream): Kafka's columns, read from a log dir."""

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return "logstore"

    def schema(self) -> str:
        """Spark's Kafka source schema; `headers` too with includeHeaders=true."""
        headers = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        return BASE_SCHEMA + (", " + HEADERS_FIELD if headers else "")

    def reader(self, schema) -> "LogstoreBatchReader":
        """A batch scan."""
        return LogstoreBatchReader(parse_options(self.options, streaming=False))

    def streamReader(self, schema):
        """A micro-batch stream (see logstore.spark.stream)."""
        from logstore.spark.stream import LogstoreStreamReader
        return LogstoreStreamReader(parse_options(self.options, streaming=True))


class LogstoreBatchReader(DataSourceReader):
    """Plans offset ranges on the driver; each task reads its range."""

    def __init__(self, options: SourceOptions):
        self.options = options
        self.pushdown = Pushdown()

    def pushFilters(self, filters):
        """Use partition, topic, offset and timestamp predicates to skip what cannot match."""
        self.pushdown, remaining = push_filters(filters, self.pushdown)
        return remaining

    def partitions(self) -> list[RangePartition]:
        """One partition per planned offset range."""
        return [RangePartition(t, self.options.include_headers) for t in plan_batch(self.options, self.pushdown)]

    def read(self, partition: RangePartition) -> Iterator:
        """The range's rows as Arrow batches."""
        return read_range(partition.task, partition.include_headers, self.options.fail_on_data_loss)


def read_range(task: TaskRange, include_headers: bool, fail_on_data_loss: bool) -> Iterator:
    """Arrow batches in Spark's schema for one task range (shared by batch and streaming reads)."""
    from logstore.spark.arrow import to_spark_batch
    for batch in task.scan.read_arrow(headers=include_headers, timestamp_types=True,
                                      skip_deleted=not fail_on_data_loss):
        yield to_spark_batch(batch, task.topic, task.partition, include_headers)
