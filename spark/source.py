"""The `logstore` data source: Spark's Kafka source schema over segment files read in place.

    df = (spark.read.format("logstore").option("subscribe", "orders")
          .load("/var/lib/logstore"))

Spark finds the format by itself through `pyspark_logstore` (spark/discovery);
`logstore.spark.register(spark)` registers it by hand. Each task reads one
offset range through `logstore.reader` and yields Arrow batches; nothing goes
through a broker.
"""
from __future__ import annotations

import gc
import inspect
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceReader, Filter, InputPartition
from pyspark.sql.types import StructType

from logstore.spark.options import SourceOptions, parse_options
from logstore.spark.planning import Pushdown, TaskRange, plan_batch, push_filters

if TYPE_CHECKING:
    import pyarrow as pa

    from logstore.spark.sink import LogstoreBatchWriter, LogstoreStreamWriter
    from logstore.spark.stream import LogstoreStreamReader

BASE_SCHEMA = ("key binary, value binary, topic string, partition int, offset long, "
               "timestamp timestamp, timestampType int")
HEADERS_FIELD = "headers array<struct<key: string, value: binary>>"

# Spark asks for a batch reader in one of two Python worker modules. Its filter-pushdown worker
# (`pyspark.sql.worker.data_source_pushdown_filters`, run only when
# spark.sql.python.filterPushdown.enabled is true) calls pushFilters. Its plain planning worker, below,
# never does, and refuses a reader whose class overrides pushFilters while that setting is false
# (DATA_SOURCE_PUSHDOWN_DISABLED): a reader asked for from there offers no pushFilters. Spark tells
# a data source neither the setting nor the step, so `reader` looks at who called it.
PLAIN_PLANNING_WORKER = "pyspark.sql.worker.plan_data_source_read"
# What Spark's Python workers are forked from (spark.python.use.daemon, on by default on Linux).
DAEMON = "pyspark.daemon"


class RangePartition(InputPartition):
    """One Spark task: a range of offsets of one partition, and how to read it."""

    def __init__(self, task: TaskRange, include_headers: bool) -> None:
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

    def reader(self, schema: StructType) -> LogstoreScanReader:
        """A batch scan: one that takes pushed filters wherever Spark may push them."""
        options = parse_options(self.options, streaming=False)
        if _planning_without_pushdown():
            return LogstoreScanReader(options)
        return LogstoreBatchReader(options)

    def streamReader(self, schema: StructType) -> LogstoreStreamReader:
        """A micro-batch stream (see logstore.spark.stream)."""
        from logstore.spark.stream import LogstoreStreamReader
        return LogstoreStreamReader(parse_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> LogstoreBatchWriter:
        """`df.write.format("logstore")`: Spark's Kafka sink, each job committed at once (see logstore.spark.sink)."""
        from logstore.spark.sink import LogstoreBatchWriter
        return LogstoreBatchWriter(dict(self.options), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> LogstoreStreamWriter:
        """`writeStream.format("logstore")`: each micro-batch committed once, across restarts."""
        from logstore.spark.sink import LogstoreStreamWriter
        return LogstoreStreamWriter(dict(self.options), schema, overwrite)


def _planning_without_pushdown() -> bool:
    """Whether Spark's plain planning worker is asking (run as `python -m` or by pyspark.daemon)."""
    frame = inspect.currentframe()
    while frame is not None:
        spec = frame.f_globals.get("__spec__")
        if (spec.name if spec is not None else frame.f_globals.get("__name__")) == PLAIN_PLANNING_WORKER:
            return True
        frame = frame.f_back
    return False


class LogstoreScanReader(DataSourceReader):
    """Plans offset ranges on the driver; each task reads its range. Spark applies every filter."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.pushdown = Pushdown()

    def partitions(self) -> list[RangePartition]:
        """One partition per planned offset range."""
        return [RangePartition(t, self.options.include_headers) for t in plan_batch(self.options, self.pushdown)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The range's rows as Arrow batches."""
        return read_partition(partition, self.options.fail_on_data_loss)


class LogstoreBatchReader(LogstoreScanReader):
    """A scan narrowed by the filters Spark pushes (spark.sql.python.filterPushdown.enabled=true)."""

    def pushFilters(self, filters: list[Filter]) -> list[Filter]:
        """Use partition, topic, offset and timestamp predicates to skip what cannot match."""
        self.pushdown, remaining = push_filters(filters, self.pushdown)
        return remaining


def read_partition(partition: InputPartition, fail_on_data_loss: bool) -> Iterator[pa.RecordBatch]:
    """A planned partition's rows; none for the `InputPartition(None)` Spark reads when a batch plan is
    empty (a topic that does not exist or holds nothing, a filter past the end), as Kafka's source
    reads no rows then."""
    if not isinstance(partition, RangePartition):
        return iter(())
    return read_range(partition.task, partition.include_headers, fail_on_data_loss)


def read_range(task: TaskRange, include_headers: bool, fail_on_data_loss: bool) -> Iterator[pa.RecordBatch]:
    """Arrow batches in Spark's schema for one task range (shared by batch and streaming reads)."""
    from logstore.spark.arrow import to_spark_batch
    _freeze_worker_heap()
    for batch in task.scan.read_arrow(headers=include_headers, timestamp_types=True, timestamp_micros=True,
                                      skip_deleted=not fail_on_data_loss):
        yield to_spark_batch(batch, task.topic, task.partition, include_headers)


_frozen_in: int | None = None   # the pid of the worker whose heap `_freeze_worker_heap` froze


def _freeze_worker_heap() -> None:
    """Once per reused Python worker, before its first read: take what it holds (pyspark, pyarrow, this
    module: ~60k objects) out of the cyclic collector's sight.

    pyspark.daemon runs gc.collect() after every task of a reused worker, and over that heap a collection
    cost ~40 ms here: a fifth of a scan task's CPU. Frozen objects are still freed when no longer referenced;
    only a cycle among them would never be, and they are the worker's modules, not a task's data. Nothing
    is done outside a daemon-forked worker (a driver or a program reading in its own process keeps its
    collector as it was)."""
    global _frozen_in
    if _frozen_in == os.getpid() or not _in_daemon_worker():
        return
    _frozen_in = os.getpid()
    gc.collect()
    gc.freeze()


def _in_daemon_worker() -> bool:
    """Whether this process is a worker forked by pyspark.daemon (which runs as `python -m pyspark.daemon`)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    return spec is not None and spec.name == DAEMON
