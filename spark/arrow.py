"""logstore's Arrow columns in the exact Arrow types Spark expects for the Kafka schema."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

# Spark checks a returned batch against the declared schema field by field: its
# TimestampType is microseconds with a zone, its binary is never large_binary.
TIMESTAMP = pa.timestamp("us", tz="UTC")
HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
NAMES = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]


def to_spark_batch(batch: pa.RecordBatch, topic: str, partition: int, include_headers: bool) -> pa.RecordBatch:
    """A reader batch (offset, timestamp ms, key, value, timestampType[, headers]) as Spark's Kafka row."""
    n = batch.num_rows
    columns = [
        batch.column("key"),
        batch.column("value"),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        batch.column("offset"),
        pc.multiply(batch.column("timestamp"), 1000).cast(TIMESTAMP),
        batch.column("timestampType"),
    ]
    names = NAMES
    if include_headers:
        columns.append(batch.column("headers"))
        names = NAMES + ["headers"]
    return pa.RecordBatch.from_arrays(columns, names=names)
