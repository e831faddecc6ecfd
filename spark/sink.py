"""`df.write.format("logstore")` and `writeStream.format("logstore")`: Spark's Kafka sink, exactly once.

    (df.selectExpr("CAST(id AS STRING) AS key", "payload AS value")
       .write.format("logstore").option("topic", "orders").mode("append").save("/var/lib/logstore"))

Each task's rows arrive as Arrow batches and stay Arrow: routed to their
partition with Kafka's default partitioner (murmur2 of the key, natively; a
row without a key or partition sticks to one partition per input batch, then
moves on, as KIP-480's sticky partitioner fills a batch) and encoded natively.
Every task attempt writes one transaction that stays open; the driver's
commit makes all of a job's transactions visible at once, its abort leaves
nothing visible (see sink_dir.py for the targets, logstore.dir_transactions
for the mechanism; sink_broker.py for a running broker, named by
`kafka.bootstrap.servers`, through KIP-939's two-phase commit).
read_committed readers see a job whole or not at all;
read_uncommitted ones may see its rows before the commit, as in Kafka.

Save modes: append. Spark's Kafka sink takes its default errorifexists as
append too, but Spark refuses errorifexists and ignore for every Python data
source before a writer is asked (UNSUPPORTED_DATA_SOURCE_SAVE_MODE), so
`.mode("append")` must be said; overwrite makes no sense for a log and is
refused here. A streaming micro-batch is a job named by the query's id (which
Spark keeps in the checkpoint, so it survives restarts) and the batch id:
both reach the tasks as Spark's local properties `sql.streaming.queryId` and
`streaming.sql.batchId`, and the driver from the tasks' messages, so a batch
replayed after a driver restart commits nothing a second time.
"""
from __future__ import annotations

import random
import uuid
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from logstore.formats.kafka_arrow import binary_column, headers_column, partitions_for_keys
from logstore.spark.options import OptionError
from logstore.spark.sink_broker import BrokerTarget
from logstore.spark.sink_dir import DirTarget, JobRef, LogstoreCommitMessage, SinkTarget
from logstore.spark.sink_options import SinkOptions, parse_sink_options

QUERY_ID = "sql.streaming.queryId"
BATCH_ID = "streaming.sql.batchId"


def check_mode(overwrite: bool) -> None:
    """Spark tells a Python data source only whether the mode is overwrite: refused, as Kafka's sink does."""
    if overwrite:
        raise OptionError("save mode overwrite is not allowed for logstore: a log is only appended to "
                          "(use mode('append'))")


def make_target(options: SinkOptions) -> SinkTarget:
    """The broker named by kafka.bootstrap.servers, else the log dir at path."""
    if options.bootstrap:
        return BrokerTarget(options.bootstrap, options.prefix, options.timeout_ms, options.buffer_bytes,
                            dict(options.security))
    return DirTarget(options.path, options.timeout_ms, options.buffer_bytes)


class Router:
    """Sends each row of an Arrow batch to its topic and partition, a column at a time."""

    def __init__(self, options: SinkOptions, counts: dict[str, int]):
        self.options = options
        self.counts = counts
        self.sticky: dict[str, int] = {}

    def route(self, batch: pa.RecordBatch) -> Iterator[tuple[str, int, pa.Array | None, pa.Array, pa.Array | None]]:
        """(topic, partition, keys, values, headers) for every partition the batch has rows for."""
        names = {name.lower(): i for i, name in enumerate(batch.schema.names)}
        if not batch.num_rows:
            return
        if not self.options.topic_column:
            yield from self._route_topic(self.options.topic or "", batch, names)
            return
        topics = batch.column(names["topic"])
        if self.options.topic is not None:
            topics = pc.fill_null(topics, pa.scalar(self.options.topic, topics.type))
        if topics.null_count:
            row = pc.index(pc.is_null(topics), pa.scalar(True, pa.bool_())).as_py()
            raise ValueError(f"row {row} of the batch has a null topic and no 'topic' option is set")
        distinct = pc.unique(topics)
        for topic in distinct:
            part = batch if len(distinct) == 1 else batch.filter(pc.equal(topics, topic))
            yield from self._route_topic(topic.as_py(), part, names)

    def _route_topic(self, topic: str, batch: pa.RecordBatch, names: dict[str, int]
                     ) -> Iterator[tuple[str, int, pa.Array | None, pa.Array, pa.Array | None]]:
        count = self.counts.get(topic)
        if count is None:
            raise ValueError(f"topic {topic!r} does not exist in {self.options.where} "
                             "(create it first: the sink does not create topics)")
        n = batch.num_rows
        keys = binary_column(batch.column(names["key"])) if self.options.key else None
        given = batch.column(names["partition"]) if self.options.partition_column else None
        if given is not None and given.null_count < n:
            bad = pc.or_(pc.less(given, pa.scalar(0, given.type)),
                         pc.greater_equal(given, pa.scalar(count, given.type)))
            if pc.any(bad).as_py():
                row = pc.index(bad, pa.scalar(True, pa.bool_())).as_py()
                raise ValueError(f"row {row}: partition {given[row].as_py()} does not exist: topic {topic!r} "
                                 f"has {count} partitions")
        parts = given if given is not None and given.null_count == 0 else None
        if parts is None:
            hashed = partitions_for_keys(keys, count, n)
            parts = hashed if given is None else pc.coalesce(given.cast(pa.int32()), hashed)
            if parts.null_count:
                parts = pc.fill_null(parts, pa.scalar(self._sticky(topic, count), parts.type))
        parts = parts.cast(pa.int32())
        values = binary_column(batch.column(names["value"]))
        assert values is not None   # a column was given
        headers = headers_column(batch.column(names["headers"])) if self.options.headers else None
        # Arguments to pyarrow.compute stay Arrow values: a Python number is converted by type inference,
        # which tries to import numpy (absent here) on every call.
        lowest, highest = pc.min_max(parts).values()
        if lowest == highest:
            yield topic, lowest.as_py(), keys, values, headers
            return
        order = pc.sort_indices(parts)
        keys = keys.take(order) if keys is not None else None
        values = values.take(order)
        headers = headers.take(order) if headers is not None else None
        # The sorted partitions as runs: each partition's rows are [start, run end).
        runs = pc.run_end_encode(parts.take(order))
        start = 0
        for partition, end in zip(runs.values.to_pylist(), runs.run_ends.to_pylist()):
            yield (topic, partition, keys.slice(start, end - start) if keys is not None else None,
                   values.slice(start, end - start), headers.slice(start, end - start) if headers is not None
                   else None)
            start = end

    def _sticky(self, topic: str, count: int) -> int:
        # One partition for all of a batch's unkeyed rows, the next batch on another (KIP-480's stickiness).
        current = self.sticky.get(topic)
        chosen = random.randrange(count) if current is None or count == 1 else \
            (current + 1 + random.randrange(count - 1)) % count
        self.sticky[topic] = chosen
        return chosen


def write_task(target: SinkTarget, options: SinkOptions, counts: dict[str, int], job: JobRef,
               batches: Iterator[pa.RecordBatch]) -> LogstoreCommitMessage:
    """A task's rows into one open transaction of `target`; the commit message for the driver."""
    context = TaskContext.get()
    # Spark's task attempt id, not the attempt number: a retried stage numbers its attempts from 0 again, and two
    # attempts of one task must never share a transactional id (the second would abort the first's transaction).
    task = target.begin(job, context.partitionId() if context else 0, context.taskAttemptId() if context else 0)
    router = Router(options, counts)
    for batch in batches:
        for topic, partition, keys, values, headers in router.route(batch):
            task.write(topic, partition, keys, values, headers)
    return task.prepare()


def _messages(messages: list[WriterCommitMessage | None]) -> list[LogstoreCommitMessage]:
    return [m for m in messages if isinstance(m, LogstoreCommitMessage)]


def open_sink(options: dict[str, str], schema: StructType, overwrite: bool
              ) -> tuple[SinkOptions, SinkTarget, dict[str, int]]:
    """On the driver, before a job: the options checked, the target, and its topics' partition counts."""
    check_mode(overwrite)
    parsed = parse_sink_options(options, schema)
    target = make_target(parsed)
    counts = target.prepare_job()
    if not parsed.topic_column and parsed.topic not in counts:
        raise OptionError(f"topic {parsed.topic!r} does not exist in {parsed.where} "
                          "(create it first: the sink does not create topics)")
    return parsed, target, counts


class LogstoreBatchWriter(DataSourceArrowWriter):
    """A batch write job: one id, made on the driver and carried to the tasks in this (pickled) object."""

    def __init__(self, options: dict[str, str], schema: StructType, overwrite: bool):
        self.options, self.target, self.counts = open_sink(options, schema, overwrite)
        self.job = JobRef(uuid.uuid4().hex)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> LogstoreCommitMessage:
        """One task: its rows in one open transaction."""
        return write_task(self.target, self.options, self.counts, self.job, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Every task's transaction committed at once (and any other attempt's aborted)."""
        self.target.commit(self.job, _messages(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Every transaction of the job aborted."""
        self.target.abort(self.job, _messages(messages))


class LogstoreStreamWriter(DataSourceStreamArrowWriter):
    """A streaming sink: each micro-batch one job, named by the query's id and the batch id."""

    def __init__(self, options: dict[str, str], schema: StructType, overwrite: bool):
        self.options, self.target, self.counts = open_sink(options, schema, overwrite)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> LogstoreCommitMessage:
        """One task of a micro-batch."""
        context = TaskContext.get()
        query = context.getLocalProperty(QUERY_ID) if context else None
        batch = context.getLocalProperty(BATCH_ID) if context else None
        if query is None or batch is None:
            raise RuntimeError("a streaming write task without Spark's query and batch ids "
                               f"(local properties {QUERY_ID}, {BATCH_ID})")
        job = JobRef(f"{query}-{batch}", query, int(batch))
        return write_task(self.target, self.options, self.counts, job, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """The micro-batch's transactions committed at once, unless the batch was committed before."""
        found = _messages(messages)
        if found:
            self.target.commit(found[0].job, found)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """The micro-batch's transactions aborted."""
        found = _messages(messages)
        if found:
            self.target.abort(found[0].job, found)
