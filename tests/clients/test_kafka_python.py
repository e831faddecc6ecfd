"""kafka-python 3.0.12 against a real broker: codecs, idempotence, offsets by time, admin, auto-create.

No group coordinator yet: consumers are `group_id=None` with assign().
"""
from __future__ import annotations

import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import (
    MessageSizeTooLargeError,
    RecordListTooLargeError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

CODECS = [None, "gzip", "snappy", "lz4", "zstd"]
TIMEOUT = 15.0  # s: a bound on any single wait; tests finish far below it


def producer(broker, **config) -> KafkaProducer:
    config.setdefault("acks", "all")
    config.setdefault("enable_idempotence", True)
    return KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5, **config)


def consumer(broker, *partitions: TopicPartition, reset: str = "earliest") -> KafkaConsumer:
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
                      auto_offset_reset=reset)
    c.assign(list(partitions))
    return c


def consume(c: KafkaConsumer, count: int, timeout: float = TIMEOUT) -> list:
    """Exactly `count` records (polled until they are there), then one more poll must bring nothing."""
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < count:
        assert time.monotonic() < deadline, f"{len(got)} of {count} records after {timeout} s"
        for records in c.poll(timeout_ms=200).values():
            got.extend(records)
    assert not c.poll(timeout_ms=100), "more records than were produced"
    return got


def send_all(p: KafkaProducer, topic: str, pairs, **kw) -> list:
    """Send each (key, value); the RecordMetadata of every one, in order."""
    futures = [p.send(topic, key=k, value=v, **kw) for k, v in pairs]
    p.flush(timeout=TIMEOUT)
    return [f.get(timeout=TIMEOUT) for f in futures]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c or "none")
def test_idempotent_produce_then_consume_from_earliest(broker, topic, codec):
    pairs = [(f"k{i}".encode(), f"value {i} ".encode() * (i % 7 + 1)) for i in range(500)]
    p = producer(broker, compression_type=codec)
    try:
        metas = send_all(p, topic, pairs)
    finally:
        p.close(timeout=TIMEOUT)
    assert [m.offset for m in metas] == list(range(500))
    assert {m.partition for m in metas} == {0}

    c = consumer(broker, TopicPartition(topic, 0))
    try:
        got = consume(c, 500)
    finally:
        c.close()
    assert [(r.offset, r.key, r.value) for r in got] == [(i, k, v) for i, (k, v) in enumerate(pairs)]


def test_consume_from_latest_sees_only_new_messages(broker, topic):
    tp = TopicPartition(topic, 0)
    p = producer(broker)
    try:
        send_all(p, topic, [(None, f"old {i}".encode()) for i in range(50)])
        c = consumer(broker, tp, reset="latest")
        try:
            assert c.position(tp, timeout_ms=TIMEOUT * 1000) == 50  # the reset went to the end
            metas = send_all(p, topic, [(None, f"new {i}".encode()) for i in range(20)])
            assert [m.offset for m in metas] == list(range(50, 70))
            got = consume(c, 20)
        finally:
            c.close()
    finally:
        p.close(timeout=TIMEOUT)
    assert [(r.offset, r.value) for r in got] == [(50 + i, f"new {i}".encode()) for i in range(20)]


def test_offsets_for_times_and_seek_by_timestamp(broker, topic):
    tp = TopicPartition(topic, 0)
    base = 1_700_000_000_000
    p = producer(broker)
    try:
        # Producer timestamps (CreateTime) one second apart, in batches of ten.
        for first in range(0, 100, 10):
            futures = [p.send(topic, value=f"m{i}".encode(), timestamp_ms=base + 1000 * i)
                       for i in range(first, first + 10)]
            p.flush(timeout=TIMEOUT)
            assert [f.get(timeout=TIMEOUT).offset for f in futures] == list(range(first, first + 10))
    finally:
        p.close(timeout=TIMEOUT)

    c = consumer(broker, tp)
    try:
        found = c.offsets_for_times({tp: base + 42_000})[tp]
        assert (found.offset, found.timestamp) == (42, base + 42_000)
        between = c.offsets_for_times({tp: base + 42_500})[tp]
        assert (between.offset, between.timestamp) == (43, base + 43_000)  # the first at or after
        assert c.offsets_for_times({tp: 0})[tp].offset == 0
        assert c.offsets_for_times({tp: base + 100_000})[tp] is None  # after the last one
        assert c.beginning_offsets([tp]) == {tp: 0}
        assert c.end_offsets([tp]) == {tp: 100}

        c.seek(tp, found.offset)
        got = consume(c, 58)
    finally:
        c.close()
    assert [(r.offset, r.value, r.timestamp) for r in got] == \
        [(i, f"m{i}".encode(), base + 1000 * i) for i in range(42, 100)]


def test_admin_create_describe_delete_topics(broker, topic):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        # One node stores one replica; a factor up to 3 is accepted, as librdkafka's tests need.
        result = admin.create_topics({topic: {"num_partitions": 4, "replication_factor": 3}})
        assert [(t["name"], t["error_code"]) for t in result["topics"]] == [(topic, 0)]
        assert topic in admin.list_topics()
        (described,) = admin.describe_topics([topic])
        assert described["error_code"] == 0
        assert sorted(p["partition_index"] for p in described["partitions"]) == [0, 1, 2, 3]
        assert all(p["leader_id"] == 1 and p["replica_nodes"] == [1] for p in described["partitions"])
        assert sorted(d.name for d in broker.data_dir.iterdir() if d.name.startswith(topic + "-")) == \
            [f"{topic}-{i}" for i in range(4)]

        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}})
        result = admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}},
                                     raise_errors=False)
        assert [t["error_code"] for t in result["topics"]] == [TopicAlreadyExistsError.errno]

        result = admin.delete_topics([topic])
        assert [(t["name"], t["error_code"]) for t in result["topics"]] == [(topic, 0)]
        assert topic not in admin.list_topics()
        assert not [d for d in broker.data_dir.iterdir() if d.name.startswith(topic + "-")]
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.delete_topics([topic])
    finally:
        admin.close()

    # The name is free again: a client can use it as a new, empty topic.
    p = producer(broker)
    try:
        assert send_all(p, topic, [(None, b"again")])[0].offset == 0
    finally:
        p.close(timeout=TIMEOUT)


def test_auto_create_on_produce_uses_num_partitions(start_broker):
    broker = start_broker("num.partitions=3")
    topic = "never-created"
    p = producer(broker)
    try:
        assert p.partitions_for(topic) == {0, 1, 2}
        futures = [p.send(topic, value=f"p{n}-{i}".encode(), partition=n) for n in range(3) for i in range(10)]
        p.flush(timeout=TIMEOUT)
        metas = [f.get(timeout=TIMEOUT) for f in futures]
    finally:
        p.close(timeout=TIMEOUT)
    assert [(m.partition, m.offset) for m in metas] == [(n, i) for n in range(3) for i in range(10)]
    assert sorted(d.name for d in broker.data_dir.iterdir() if d.is_dir()) == [f"{topic}-{n}" for n in range(3)]

    partitions = [TopicPartition(topic, n) for n in range(3)]
    c = consumer(broker, *partitions)
    try:
        got = consume(c, 30)
    finally:
        c.close()
    by_partition = {n: [r.value for r in got if r.partition == n] for n in range(3)}
    assert by_partition == {n: [f"p{n}-{i}".encode() for i in range(10)] for n in range(3)}


def test_a_batch_over_segment_bytes_is_record_list_too_large_and_over_max_message_bytes_message_too_large(
        broker, topic):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"segment.bytes": "1024",
                                                                    "max.message.bytes": "4096"})])
    finally:
        admin.close()
    p = producer(broker, enable_idempotence=False, retries=0)
    try:
        # Kafka's two limits and their two codes: no segment could hold the first, the topic refuses the second.
        with pytest.raises(RecordListTooLargeError):
            p.send(topic, value=b"x" * 2000).get(timeout=TIMEOUT)
        with pytest.raises(MessageSizeTooLargeError):
            p.send(topic, value=b"x" * 5000).get(timeout=TIMEOUT)
        assert p.send(topic, value=b"fits").get(timeout=TIMEOUT).offset == 0
    finally:
        p.close(timeout=TIMEOUT)
