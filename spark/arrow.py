"""logstore's Arrow columns in the exact Arrow types Spark expects for the Kafka schema.

A task's batches come from the reader already in Spark's types (timestamps in
µs, see `PartitionScan.read_arrow(timestamp_micros=True)`); what is left here
is the column order and the two constant columns, topic and partition, cut
from one array per task that grows to the largest batch, so no batch pays
for building them.
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

# Spark checks a returned batch against the declared schema field by field: its
# TimestampType is microseconds with a zone, its binary is never large_binary.
TIMESTAMP = pa.timestamp("us", tz="UTC")
HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
NAMES = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]


class _Constants:
    """The topic and partition columns of one (topic, partition), sliced to each batch's length."""

    def __init__(self) -> None:
        # Replaced whole, never field by field: a reader on another thread sees one consistent entry.
        self.entry: tuple[str, int, pa.Array, pa.Array] = ("", -1, pa.array([], pa.string()),
                                                           pa.array([], pa.int32()))

    def columns(self, topic: str, partition: int, n: int) -> tuple[pa.Array, pa.Array]:
        """(topic, partition) columns of `n` rows."""
        cached_topic, cached_partition, topics, partitions = self.entry
        if cached_topic != topic or cached_partition != partition or len(topics) < n:
            topics = pa.repeat(pa.scalar(topic, pa.string()), n)
            partitions = pa.repeat(pa.scalar(partition, pa.int32()), n)
            self.entry = (topic, partition, topics, partitions)
        if len(topics) == n:
            return topics, partitions
        return topics.slice(0, n), partitions.slice(0, n)


# A Spark worker runs one task at a time: one cache serves the process.
_CONSTANTS = _Constants()


def to_spark_batch(batch: pa.RecordBatch, topic: str, partition: int, include_headers: bool) -> pa.RecordBatch:
    """A reader batch (offset, timestamp in µs or ms, key, value, timestampType[, headers]) as Spark's Kafka row."""
    n = batch.num_rows
    timestamp = batch.column("timestamp")
    if timestamp.type != TIMESTAMP:  # ms as int64: a reader not asked for µs
        timestamp = pc.multiply(timestamp, pa.scalar(1000, pa.int64())).cast(TIMESTAMP)
    topics, partitions = _CONSTANTS.columns(topic, partition, n)
    columns = [batch.column("key"), batch.column("value"), topics, partitions, batch.column("offset"), timestamp,
               batch.column("timestampType")]
    names = NAMES
    if include_headers:
        columns.append(batch.column("headers"))
        names = NAMES + ["headers"]
    return pa.RecordBatch.from_arrays(columns, names=names)
