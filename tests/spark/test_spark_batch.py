"""Batch reads through `spark.read.format("logstore")`, checked against what logstore and Kafka clients read.

The oracles: the library's own `iter_records` at the same isolation level
(directories the library wrote), a read_committed confluent-kafka consumer
(a directory a running broker wrote), and the spec's `segment_txn` vector.
Planned ranges are checked by calling the reader Spark calls, with the
Filter objects Spark would push; each filter is then run as a Spark query too,
whose rows and task count must match.
"""
from __future__ import annotations

import datetime as dt
import json
import random
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import functions as F
from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual

import logstore
from logstore.config import LogConfig
from logstore.formats.kafka import CODEC_NAMES
from logstore.log import Log
from logstore.read_committed import READ_COMMITTED, READ_UNCOMMITTED
from logstore.spark.options import parse_options
from logstore.spark.source import LogstoreBatchReader
from spark_logs import TS0, TS_STEP, KafkaRow, PartitionWriter, library_rows
from spec_vectors import VECTORS_DIR

VECTOR_DIR = VECTORS_DIR / "segment_txn"
TIMEOUT = 15.0  # s: a bound on any single wait on the broker


ORDERS_PARTITIONS = 3
PRODUCERS = (1000, 1001, 1002)
SCHEMA = ("struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
          "timestampType:int>")


# -- reading through Spark ---------------------------------------------------------------------------------

def load(spark, path, **options):
    """`spark.read.format("logstore")` of a log dir with options (dotted names passed as `**{...}`)."""
    reader = spark.read.format("logstore")
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load(str(path))


def spark_rows(df, *, headers: bool = False) -> list[KafkaRow]:
    """The rows of a logstore DataFrame as KafkaRows (timestamps in ms), sorted by topic, partition, offset."""
    return rows_and_tasks(df, headers=headers)[0]


def rows_and_tasks(df, *, headers: bool = False) -> tuple[list[KafkaRow], int]:
    """`spark_rows` and the number of tasks the scan was planned as, from one planning of the query."""
    columns = ["topic", "partition", "offset", "key", "value", F.unix_millis("timestamp").alias("ms"),
               "timestampType"] + (["headers"] if headers else [])
    rdd = df.select(*columns).rdd
    rows = [KafkaRow(r.topic, r.partition, r.offset, _bytes(r.key), _bytes(r.value), r.ms, r.timestampType,
                     tuple((h.key, _bytes(h.value)) for h in r.headers) if headers else ())
            for r in rdd.collect()]
    return sorted(rows, key=lambda r: (r.topic, r.partition, r.offset)), rdd.getNumPartitions()


def _bytes(value):
    return None if value is None else bytes(value)


def plan(path, filters=(), **options):
    """(ranges as (topic, partition, start, end), filters left for Spark) as Spark's planning gets them."""
    reader = LogstoreBatchReader(parse_options({"path": str(path), **options}, streaming=False))
    remaining = list(reader.pushFilters(list(filters)))
    return [(p.task.topic, p.task.partition, p.task.scan.start, p.task.scan.end) for p in reader.partitions()], \
        remaining


def spark_error(df) -> str:
    """The message of the error a query fails with (Spark wraps the source's exception)."""
    with pytest.raises((PySparkException, Py4JJavaError)) as failure:
        df.collect()
    return str(failure.value)


# -- a directory the library wrote -----------------------------------------------------------------------

@dataclass
class LibraryDir:
    """A log dir the library wrote, with what the library reads from each partition."""

    path: Path
    rows: dict          # isolation → (topic, partition) → [KafkaRow] (headers included)
    stamps: dict        # (topic, partition) → [(offset, timestamp)] of every record, control ones too
    bases: dict         # (topic, partition) → segment base offsets
    lso: dict
    hw: dict
    log_start: dict
    codecs: dict        # (topic, partition) → the compression codecs of its data batches
    append_times: list

    def expected(self, isolation=READ_COMMITTED, *, topics=None, partitions=None, ranges=None,
                 headers: bool = False) -> list[KafkaRow]:
        """Library rows of the chosen topics/partitions, each inside `ranges[(t, p)] = (start, end)`."""
        found = []
        for (topic, partition), rows in sorted(self.rows[isolation].items()):
            if topics is not None and topic not in topics:
                continue
            if partitions is not None and (topic, partition) not in partitions:
                continue
            lo, hi = (ranges or {}).get((topic, partition), (0, None))
            found.extend(r if headers else r._replace(headers=())
                         for r in rows if r.offset >= lo and (hi is None or r.offset < hi))
        return found

    def first_offset_at(self, key, timestamp: int) -> int | None:
        """ListOffsets by timestamp: the first offset whose record (control records too) is that late."""
        return next((o for o, ts in self.stamps[key] if ts >= timestamp), None)


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> LibraryDir:
    """orders: 3 partitions of small segments, three producers' transactions interleaved with plain and
    idempotent batches, one transaction left open in partition 2; codecs: one partition per codec; appended:
    LogAppendTime; trimmed: a log start offset past its first segments; __consumer_offsets: internal."""
    path = tmp_path_factory.mktemp("library") / "logs"
    data = LibraryDir(path, {READ_COMMITTED: {}, READ_UNCOMMITTED: {}}, {}, {}, {}, {}, {}, {}, [])
    with logstore.open(str(path), {"segment.bytes": 1024}) as store:
        store.create_topic("orders", partitions=ORDERS_PARTITIONS)
        for p in range(ORDERS_PARTITIONS):
            rng = random.Random(p)
            # A step of its own per partition: one timestamp falls at a different offset in each.
            writer = PartitionWriter(store.log("orders", p), f"orders-{p}", step=TS_STEP * (p + 1))
            writer.interleave(rng, PRODUCERS, 60)
            writer.end_all(rng)
            if p == 2:
                # An open transaction, then a committed one and a plain batch: all past the LSO.
                writer.produce(1002, 2, transactional=True)
                writer.produce(1000, 2, transactional=True)
                writer.plain(2)
                writer.end(1000, commit=True)
        store.create_topic("codecs", partitions=len(CODEC_NAMES))
        for codec in range(len(CODEC_NAMES)):
            writer = PartitionWriter(store.log("codecs", codec), f"codec-{CODEC_NAMES[codec]}", compression=codec)
            writer.plain(5)
            writer.produce(2000, 6, transactional=True)
            writer.produce(2001, 4, transactional=True)
            writer.end(2001, commit=False)
            writer.produce(2000, 3, transactional=True)
            writer.end(2000, commit=True)
            writer.plain(1)
        store.create_topic("appended", partitions=1, config={"message.timestamp.type": "LogAppendTime"})
        writer = PartitionWriter(store.log("appended", 0), "appended")
        for n in (3, 1, 2):
            data.append_times.append(writer.plain(n).log_append_time)
        store.create_topic("trimmed", partitions=1, config={"segment.bytes": 200})
        writer = PartitionWriter(store.log("trimmed", 0), "trimmed")
        for _ in range(12):
            writer.plain(2)
        assert store.log("trimmed", 0).delete_records(9) == 9
        store.create_topic("__consumer_offsets", partitions=1)
        # Keyed: Kafka's internal topics are compacted, which refuses records without a key.
        store.log("__consumer_offsets", 0).append_records([b"internal|0", b"internal|1"], keys=[b"g0", b"g1"])

        for (topic, partition), log in store.logs().items():
            key = (topic, partition)
            for isolation in (READ_COMMITTED, READ_UNCOMMITTED):
                data.rows[isolation][key] = library_rows(log, topic, partition, isolation)
            data.stamps[key] = [(r.offset, r.timestamp) for r in log.iter_records(include_control=True)]
            data.bases[key] = [s.base_offset for s in log.segments]
            data.lso[key], data.hw[key] = log.last_stable_offset, log.high_watermark
            data.log_start[key] = log.log_start_offset
            data.codecs[key] = {entry.compression for entry, _ in log.iter_batches() if not entry.is_control}
    return data


def test_the_library_directory_has_what_the_reads_below_rely_on(library):
    for p in range(ORDERS_PARTITIONS):
        key = ("orders", p)
        assert len(library.bases[key]) >= 4, library.bases[key]
        aborted = set(library.rows[READ_UNCOMMITTED][key]) - set(library.rows[READ_COMMITTED][key])
        assert any(b"|txn|" in r.value and r.offset < library.lso[key] for r in aborted)
        assert any(r.key is None for r in library.rows[READ_COMMITTED][key])
    assert [library.lso[("orders", p)] < library.hw[("orders", p)] for p in range(3)] == [False, False, True]
    assert [library.codecs[("codecs", codec)] for codec in range(len(CODEC_NAMES))] == [{0}, {1}, {2}, {3}, {4}]
    assert library.log_start[("trimmed", 0)] == 9 and 0 < library.bases[("trimmed", 0)][0] <= 9


# -- 1. read_committed and read_uncommitted equal the library's reads -----------------------------------------

def test_read_committed_rows_equal_the_library_read_committed(spark, library):
    df = load(spark, library.path, subscribe="orders")
    assert df.schema.simpleString() == SCHEMA
    rows = spark_rows(df)
    assert rows == library.expected(READ_COMMITTED, topics={"orders"})
    for p in range(ORDERS_PARTITIONS):
        offsets = [r.offset for r in rows if r.partition == p]
        assert offsets and max(offsets) < library.lso[("orders", p)]


def test_read_uncommitted_rows_are_every_non_control_record(spark, library):
    rows = spark_rows(load(spark, library.path, subscribe="orders", **{"isolation.level": "read_uncommitted"}))
    assert rows == library.expected(READ_UNCOMMITTED, topics={"orders"})
    # The open transaction and what follows it are there, up to the high watermark.
    assert max(r.offset for r in rows if r.partition == 2) == library.hw[("orders", 2)] - 2


# -- 2. every codec, and LogAppendTime --------------------------------------------------------------------

def test_every_codec_and_log_append_time(spark, library):
    rows = spark_rows(load(spark, library.path, subscribe="codecs,appended", includeHeaders="true"), headers=True)
    assert rows == library.expected(topics={"codecs", "appended"}, headers=True)
    for codec, name in enumerate(CODEC_NAMES):
        # 5 plain, 6 + 3 committed, the 4 aborted left out, 1 plain.
        values = [r.value for r in rows if r.topic == "codecs" and r.partition == codec]
        assert len(values) == 15 and all(v.startswith(b"codec-%s|" % name.encode()) for v in values)
    appended = [r for r in rows if r.topic == "appended"]
    assert [r.timestamp_type for r in appended] == [1] * 6
    assert [r.timestamp for r in appended] == [t for t, n in zip(library.append_times, (3, 1, 2)) for _ in range(n)]
    assert {r.timestamp_type for r in rows if r.topic == "codecs"} == {0}


# -- 3. headers -------------------------------------------------------------------------------------------

def test_include_headers_gives_the_library_headers(spark, library):
    rows = spark_rows(load(spark, library.path, subscribe="orders", includeHeaders="true"), headers=True)
    assert rows == library.expected(topics={"orders"}, headers=True)
    counts = {len(r.headers) for r in rows}
    assert {0, 1, 2, 3} <= counts
    assert any(value is None for r in rows for _, value in r.headers)
    assert any(name == "ключ" for r in rows for name, _ in r.headers)


# -- 4. a directory a real broker wrote -------------------------------------------------------------------

def _consume_committed(bootstrap: str, topic: str, partitions: int, until: dict[int, int] | None = None):
    """KafkaRows a read_committed confluent consumer reads from the start, up to `until` (offsets per
    partition), or up to the end offsets it looks up itself (the last stable offsets)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused-no-coordinator",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "fetch.wait.max.ms": 50})
    try:
        tps = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)]
        consumer.assign(tps)
        ends = until or {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT,
                                                           cached=False)[1] for p in range(partitions)}
        rows, deadline = [], time.monotonic() + TIMEOUT
        while any(tp.offset < ends[tp.partition] for tp in consumer.position(tps)):
            assert time.monotonic() < deadline, f"consumer still behind {ends} after {TIMEOUT} s: {rows}"
            msg = consumer.poll(0.05)
            if msg is None:
                continue
            if msg.error() is not None:
                raise KafkaException(msg.error())
            kind, stamp = msg.timestamp()
            rows.append(KafkaRow(topic, msg.partition(), msg.offset(), msg.key(), msg.value(), stamp,
                                 1 if kind == 2 else 0, tuple(msg.headers() or ())))
        return sorted(rows, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()


def _create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    # The admin client is gone when this returns: no client of it retries against a stopped broker.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(TIMEOUT) is None


class _Transactions:
    """A confluent-kafka transactional producer writing keyed records with headers over 2 partitions."""

    def __init__(self, bootstrap: str, transactional_id: str, topic: str):
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                                  "linger.ms": 5})
        self.producer.init_transactions(TIMEOUT)
        self.delivered: dict[int, int] = {}

    def send(self, label: str, n: int) -> None:
        """Begin a transaction and write `n` records to it, delivered when this returns."""
        self.producer.begin_transaction()
        failed = []

        def on_delivery(err, msg):
            if err is not None:
                failed.append(err)
            else:
                self.delivered[msg.partition()] = max(self.delivered.get(msg.partition(), 0), msg.offset() + 1)
        for i in range(n):
            self.producer.produce(self.topic, value=b"%s-%d" % (label.encode(), i),
                                  key=None if i % 4 == 0 else b"k%d" % i, partition=i % 2,
                                  headers=[("n", b"%d" % i), ("null", None)][: i % 3],
                                  on_delivery=on_delivery)
        assert self.producer.flush(TIMEOUT) == 0 and not failed, failed

    def transaction(self, label: str, n: int, *, commit: bool) -> None:
        """A whole transaction, committed or aborted."""
        self.send(label, n)
        (self.producer.commit_transaction if commit else self.producer.abort_transaction)(TIMEOUT)


def test_broker_directory_read_while_running_and_after_stop(spark, start_broker):
    broker = start_broker("log.segment.bytes=400")
    topic = "payments"
    _create_topic(broker.bootstrap, topic, 2)
    a = _Transactions(broker.bootstrap, "spark-a", topic)
    a.transaction("a1", 12, commit=True)
    a.transaction("a2", 9, commit=False)
    a.transaction("a3", 14, commit=True)
    a.send("a4", 6)  # left open while Spark reads
    b = _Transactions(broker.bootstrap, "spark-b", topic)
    b.transaction("b1", 5, commit=True)

    def read():
        return spark_rows(load(spark, broker.data_dir, subscribe=topic, includeHeaders="true"), headers=True)

    segments = [len(list((broker.data_dir / f"{topic}-{p}").glob("*.log"))) for p in (0, 1)]
    assert min(segments) >= 2, segments
    running = _consume_committed(broker.bootstrap, topic, 2)
    assert {r.value[:2] for r in running} == {b"a1", b"a3"}
    assert read() == running

    a.producer.commit_transaction(TIMEOUT)
    ends = {p: max(a.delivered[p], b.delivered[p]) for p in (0, 1)}
    everything = _consume_committed(broker.bootstrap, topic, 2, until=ends)
    assert {r.value[:2] for r in everything} == {b"a1", b"a3", b"a4", b"b1"}
    for producer in (a, b):
        producer.producer.close()
    broker.stop()
    assert read() == everything


# -- 5. the spec's segment_txn vector directory ---------------------------------------------------------

def _materialise_vector(target: Path) -> Path:
    """The segment_txn partition directory under `target/<topic>-0`; returns `target`."""
    partition_dir = target / "orders-0"
    partition_dir.mkdir(parents=True)
    for source in VECTOR_DIR.iterdir():
        if source.name.endswith(".json"):
            continue
        if source.name.endswith(".hex"):
            (partition_dir / source.name[:-4]).write_bytes(bytes.fromhex("".join(source.read_text().split())))
        else:
            (partition_dir / source.name).write_bytes(source.read_bytes())
    return target


def test_segment_txn_vector_directory(spark, tmp_path):
    doc = json.loads((VECTOR_DIR / "segment_txn.json").read_text())["expected"]
    logs = _materialise_vector(tmp_path / "spark")
    committed = spark_rows(load(spark, logs, subscribe="orders", includeHeaders="true"), headers=True)
    uncommitted = spark_rows(load(spark, logs, subscribe="orders", **{"isolation.level": "read_uncommitted"}))

    aborted = {o for t in doc["abortedTxns"] for o in range(t["firstOffset"], t["lastOffset"] + 1)}
    data = [o for b in doc["batches"] if not b["isControl"] for o in range(b["baseOffset"], b["lastOffset"] + 1)]
    assert [r.offset for r in committed] == [o for o in data if o not in aborted] == [0, 1, 2, 3, 4, 5, 6, 11]
    assert [r.offset for r in uncommitted] == data
    last_of_batch = {b["lastOffset"]: b["maxTimestamp"] for b in doc["batches"]}
    assert all(r.timestamp == last_of_batch[r.offset] for r in committed if r.offset in last_of_batch)

    config = LogConfig.from_properties({"index.interval.bytes": doc["indexIntervalBytes"]})
    with Log.open(str(_materialise_vector(tmp_path / "library") / "orders-0"), config, clean_shutdown=True) as log:
        assert committed == library_rows(log, "orders", 0, READ_COMMITTED)
        assert uncommitted == [r._replace(headers=()) for r in library_rows(log, "orders", 0, READ_UNCOMMITTED)]


# -- 6. pushdown --------------------------------------------------------------------------------------------

def _segment_ranges(library, key, start: int, end: int) -> list[tuple]:
    """(topic, partition, lo, hi) of every segment of `key` overlapping [start, end), clipped to it."""
    bases = library.bases[key]
    ends = bases[1:] + [library.hw[key]]
    return [(*key, max(b, start), min(e, end)) for b, e in zip(bases, ends) if max(b, start) < min(e, end)]


def test_unfiltered_plan_is_one_range_per_segment_up_to_the_lso(library):
    ranges, _ = plan(library.path, subscribe="orders")
    assert ranges == [r for p in range(ORDERS_PARTITIONS)
                      for r in _segment_ranges(library, ("orders", p), 0, library.lso[("orders", p)])]


def test_offset_filter_plans_only_the_segments_from_that_offset(spark, library):
    n = 40
    ranges, remaining = plan(library.path, [GreaterThan(("offset",), n)], subscribe="orders")
    assert remaining == []
    assert ranges == [r for p in range(ORDERS_PARTITIONS)
                      for r in _segment_ranges(library, ("orders", p), n + 1, library.lso[("orders", p)])]
    assert len(ranges) < len(plan(library.path, subscribe="orders")[0])
    rows, tasks = rows_and_tasks(load(spark, library.path, subscribe="orders").where(F.col("offset") > n))
    assert rows == [r for r in library.expected(topics={"orders"}) if r.offset > n]
    # Spark planned the same tasks: the filter reached the source.
    assert tasks == len(ranges)


def test_partition_filter_plans_only_that_partition(spark, library):
    ranges, remaining = plan(library.path, [EqualTo(("partition",), 1)], subscribe="orders")
    assert remaining == []
    assert ranges == _segment_ranges(library, ("orders", 1), 0, library.lso[("orders", 1)])
    rows, tasks = rows_and_tasks(load(spark, library.path, subscribe="orders").where("partition = 1"))
    assert rows == library.expected(partitions={("orders", 1)})
    assert tasks == len(ranges)


def test_timestamp_lower_bound_starts_at_the_offset_for_that_timestamp(spark, library):
    # A committed record's timestamp in partition 0; records' timestamps only grow within a partition.
    pivot = library.rows[READ_COMMITTED][("orders", 0)][30]
    since = dt.datetime.fromtimestamp(pivot.timestamp / 1000, dt.UTC)
    ranges, remaining = plan(library.path, [GreaterThanOrEqual(("timestamp",), since)], subscribe="orders")
    assert len(remaining) == 1  # Spark still applies it: the bound only skips ahead
    starts = {}
    for _topic, partition, lo, _ in ranges:
        starts[partition] = min(lo, starts.get(partition, lo))
    expected = {p: library.first_offset_at(("orders", p), pivot.timestamp) for p in range(ORDERS_PARTITIONS)}
    assert starts[0] == pivot.offset == expected[0]
    assert starts == {p: o for p, o in expected.items() if o is not None and o < library.lso[("orders", p)]}
    assert ranges == [r for p in sorted(starts)
                      for r in _segment_ranges(library, ("orders", p), starts[p], library.lso[("orders", p)])]
    rows, tasks = rows_and_tasks(load(spark, library.path, subscribe="orders")
                                 .where(F.col("timestamp") >= F.lit(since)))
    assert rows == [r for r in library.expected(topics={"orders"}) if r.timestamp >= pivot.timestamp]
    assert tasks == len(ranges)


# -- 7. options ---------------------------------------------------------------------------------------------

def test_subscribe_pattern_leaves_internal_topics_out(spark, library):
    rows = spark_rows(load(spark, library.path, subscribePattern=".*", startingOffsets="earliest",
                           endingOffsets="latest"))
    assert {r.topic for r in rows} == {"orders", "codecs", "appended", "trimmed"}
    assert rows == library.expected(topics={"orders", "codecs", "appended", "trimmed"})


def test_assign_reads_only_the_assigned_partitions(spark, library):
    chosen = {("orders", 0), ("orders", 2), ("codecs", 3)}
    rows = spark_rows(load(spark, library.path, assign=json.dumps({"orders": [0, 2], "codecs": [3]})))
    assert rows == library.expected(partitions=chosen)


def test_starting_and_ending_offsets_json(spark, library):
    starting = {"orders": {"0": 17, "1": -2, "2": 5}}
    ending = {"orders": {"0": 60, "1": 33, "2": -1}}
    rows = spark_rows(load(spark, library.path, subscribe="orders", startingOffsets=json.dumps(starting),
                           endingOffsets=json.dumps(ending)))
    ranges = {("orders", 0): (17, 60), ("orders", 1): (0, 33), ("orders", 2): (5, None)}
    assert rows == library.expected(topics={"orders"}, ranges=ranges)


def test_starting_and_ending_timestamps(spark, library):
    start, end = TS0 + 25 * TS_STEP, TS0 + 70 * TS_STEP
    rows = spark_rows(load(spark, library.path, subscribe="orders", startingTimestamp=str(start),
                           endingTimestamp=str(end)))
    ranges = {("orders", p): (library.first_offset_at(("orders", p), start),
                              library.first_offset_at(("orders", p), end)) for p in range(ORDERS_PARTITIONS)}
    assert all(lo is not None and hi is not None and lo < hi for lo, hi in ranges.values()), ranges
    assert rows == library.expected(topics={"orders"}, ranges=ranges)


def test_min_partitions_splits_ranges_into_more_tasks(spark, library):
    segments = sum(len(_segment_ranges(library, ("orders", p), 0, library.lso[("orders", p)]))
                   for p in range(ORDERS_PARTITIONS))
    wanted = 3 * segments
    rows, tasks = rows_and_tasks(load(spark, library.path, subscribe="orders", minPartitions=str(wanted)))
    # Spark's Kafka source rounds each range's share of minPartitions: off by at most ½ per range.
    assert abs(tasks - wanted) <= segments / 2, (tasks, wanted)
    assert rows == library.expected(topics={"orders"})


def test_starting_below_the_log_start_fails_unless_fail_on_data_loss_is_false(spark, library):
    options = {"subscribe": "trimmed", "startingOffsets": json.dumps({"trimmed": {"0": 2}})}
    message = spark_error(load(spark, library.path, **options))
    assert "offset 2 was deleted" in message and "starts at 9" in message
    rows = spark_rows(load(spark, library.path, failOnDataLoss="false", **options))
    assert [r.offset for r in rows] == list(range(9, 24))
    assert rows == library.expected(topics={"trimmed"})


@pytest.mark.parametrize("options, message", [
    ({}, "exactly one of subscribe, subscribePattern, assign must be given"),
    ({"subscribe": "orders", "startingOffsets": "latest"}, "startingOffsets cannot be 'latest'"),
    ({"assign": '{"orders": [7]}'}, "assigned partitions have no directory"),
    ({"subscribe": "orders", "minPartitions": "many"}, "minPartitions must be an integer, got 'many'"),
], ids=["no-subscription", "latest-start", "missing-partition", "bad-min-partitions"])
def test_bad_options_fail_with_a_message_naming_the_problem(spark, library, options, message):
    error = spark_error(load(spark, library.path, **options))
    assert "OptionError" in error and message in error
