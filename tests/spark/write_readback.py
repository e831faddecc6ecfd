"""What a sink's job left for its readers, as row numbers: the write tests' oracles at any size.

Every job here writes `spark_write_driver.rows_frame`'s rows (key and value the row's number as text), so a
reader's view of a topic comes down to the row numbers it sees in each partition. Three readers, none of them
the sink: `logstore.reader` on a log dir (Arrow columns, no Python object per row), a confluent-kafka
consumer through a broker (librdkafka's read_committed, in batches of `consume`), and our Spark source
(aggregated inside Spark, so nothing of a million rows is collected). The checks compare sets and counts, and
kafka-python's murmur2 places a sample of the keys.
"""
from __future__ import annotations

import time

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaError, TopicPartition
from kafka.partitioner.default import murmur2 as kafka_murmur2

from logstore.read_committed import READ_COMMITTED
from logstore.reader import StoreView

READ_TIMEOUT = 120.0  # s: a bound on reading one topic to its end
SAMPLE_EVERY = 97     # every 97th row of each partition has its place checked against kafka-python's murmur2


def _numbers(keys: pa.Array, values: pa.Array) -> pa.Array:
    """The row numbers a batch's values spell; each key must spell the same."""
    assert pc.all(pc.equal(keys, values)).as_py(), "a key differs from its value"
    return pc.cast(pc.cast(values, pa.string()), pa.int64())


def dir_rows(path: str, topic: str, isolation: str = READ_COMMITTED) -> dict[int, list[int]]:
    """Each partition's row numbers through `logstore.reader`, at `isolation`, to the partition's end there."""
    view = StoreView(path)
    found = {}
    for p in range(view.topics()[topic]):
        with view.view(topic, p) as part:
            scan = part.scan(part.log_start_offset, part.end_offset(isolation), isolation)
            found[p] = [n for batch in scan.read_arrow()
                        for n in _numbers(batch.column("key"), batch.column("value")).to_pylist()]
    return found


def dir_stable(path: str, topic: str) -> bool:
    """Whether every partition's last stable offset reached its high watermark (no transaction open)."""
    view = StoreView(path)
    for p in range(view.topics()[topic]):
        with view.view(topic, p) as part:
            if part.last_stable_offset != part.high_watermark:
                return False
    return True


def broker_rows(bootstrap: str, topic: str, partitions: int, isolation: str = "read_committed"
                ) -> dict[int, list[int]]:
    """Each partition's row numbers through a confluent-kafka consumer at `isolation`, from offset 0 to the end
    librdkafka reports (EOF), read in batches."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "sink-readback", "isolation.level": isolation,
                  "enable.auto.commit": False, "enable.partition.eof": True,
                  "fetch.max.bytes": 16 << 20, "max.partition.fetch.bytes": 4 << 20})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        found: dict[int, list[int]] = {p: [] for p in range(partitions)}
        waiting = set(range(partitions))
        deadline = time.monotonic() + READ_TIMEOUT
        while waiting:
            assert time.monotonic() < deadline, f"partitions {sorted(waiting)} of {topic} never reached their end"
            for m in c.consume(num_messages=10_000, timeout=1.0):
                if m.error() is not None:
                    assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                    waiting.discard(m.partition())
                    continue
                value = m.value()
                p = m.partition()
                rows = found[p]
                if len(rows) % SAMPLE_EVERY == 0:
                    assert m.key() == value, (m.key(), value)
                    assert (kafka_murmur2(value) & 0x7FFFFFFF) % partitions == p, (value, p)
                rows.append(int(value))
        return found
    finally:
        c.close()


def spark_summary(spark, path: str, topic: str) -> dict:
    """Our Spark source's read_committed view of `topic` in the log dir `path`, aggregated inside Spark: rows,
    distinct row numbers, their least and greatest, keys that differ from their value, rows per partition."""
    from pyspark.sql import functions as F

    df = spark.read.format("logstore").option("subscribe", topic).load(path) \
        .select("partition", F.col("key").cast("string").alias("k"), F.col("value").cast("string").alias("v")) \
        .select("partition", "k", F.col("v").cast("long").alias("n"), "v")
    whole = df.agg(F.count("*").alias("rows"), F.count_distinct("n").alias("distinct"), F.min("n").alias("least"),
                   F.max("n").alias("greatest"), F.sum(F.when(F.col("k") != F.col("v"), 1).otherwise(0))
                   .alias("odd_keys")).first().asDict()
    whole["per_partition"] = {r["partition"]: r["count"] for r in df.groupBy("partition").count().collect()}
    return whole


def assert_each_row_once(found: dict[int, list[int]], rows: int) -> None:
    """Rows 0..rows-1 each exactly once across the partitions of `found`."""
    total = sum(len(numbers) for numbers in found.values())
    seen = set().union(*found.values()) if found else set()
    assert total == len(seen), f"{total - len(seen)} rows were read more than once"
    assert seen == set(range(rows)), (f"{len(set(range(rows)) - seen)} rows missing, "
                                      f"{len(seen - set(range(rows)))} rows not written by the job")


def assert_placed_by_murmur2(found: dict[int, list[int]]) -> None:
    """A sample of each partition's rows is where murmur2 of its key (the row number as text) puts it."""
    partitions = len(found)
    for p, numbers in found.items():
        for n in numbers[::SAMPLE_EVERY]:
            assert (kafka_murmur2(str(n).encode()) & 0x7FFFFFFF) % partitions == p, (n, p)


def assert_spark_sees_each_row_once(summary: dict, rows: int, found: dict[int, list[int]]) -> None:
    """The Spark source's summary says rows 0..rows-1 once each, partitioned as `found` (another reader's)."""
    assert summary["rows"] == rows and summary["distinct"] == rows, summary
    assert (summary["least"], summary["greatest"], summary["odd_keys"]) == (0, rows - 1, 0), summary
    assert summary["per_partition"] == {p: len(numbers) for p, numbers in found.items() if numbers}, summary
