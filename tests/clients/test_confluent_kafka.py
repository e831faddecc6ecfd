"""confluent-kafka (librdkafka) against a real broker: an idempotent lz4 producer, assign() consumers, admin.

librdkafka needs a group.id to build a Consumer, but with assign() it never
joins the group, so the missing group coordinator does not matter.
"""
from __future__ import annotations

import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from segment_files import COMPRESSION, batches, segment_paths

TIMEOUT = 15.0  # s: a bound on any single wait


def idempotent_producer(broker, **config) -> Producer:
    return Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "acks": "all",
                     "compression.type": "lz4", "linger.ms": 5, **config})


def produce_all(p: Producer, topic: str, values, partition: int = 0) -> list[tuple[int, bytes]]:
    """Produce every value, flush, and return (offset, value) of each delivery, in delivery order."""
    delivered, failed = [], []

    def on_delivery(err, msg):
        if err is not None:
            failed.append(err)
        else:
            delivered.append((msg.offset(), msg.value()))

    for v in values:
        while True:
            try:
                p.produce(topic, value=v, partition=partition, on_delivery=on_delivery)
                break
            except BufferError:  # the local queue is full: serve delivery reports, then retry
                p.poll(0.1)
        p.poll(0)
    assert p.flush(TIMEOUT) == 0, "messages still undelivered after flush"
    assert not failed, failed[:5]
    return delivered


def assign_consumer(broker, *partitions: TopicPartition, **config) -> Consumer:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused-no-coordinator",
                  "enable.auto.commit": False, "enable.partition.eof": True, "fetch.wait.max.ms": 50, **config})
    c.assign(list(partitions))
    return c


def read_to_eof(c: Consumer, partitions: int = 1, timeout: float = TIMEOUT) -> list:
    """Every message until each of `partitions` partitions reported its end; errors fail."""
    got, at_eof = [], set()
    deadline = time.monotonic() + timeout
    while len(at_eof) < partitions:
        assert time.monotonic() < deadline, f"{len(got)} messages and no end of partition after {timeout} s"
        for msg in c.consume(num_messages=10_000, timeout=0.5):
            err = msg.error()
            if err is not None:
                assert err.code() == KafkaError._PARTITION_EOF, err
                at_eof.add(msg.partition())
            else:
                got.append(msg)
    return got


def test_idempotent_lz4_producer_then_assigned_consumer_reads_all_once_in_order(broker, topic):
    values = [b"%06d " % i + b"x" * (i % 50) for i in range(20_000)]
    p = idempotent_producer(broker)
    delivered = produce_all(p, topic, values)
    assert delivered == list(enumerate(values))  # offsets 0.. in send order, each once

    c = assign_consumer(broker, TopicPartition(topic, 0, OFFSET_BEGINNING))
    try:
        got = read_to_eof(c)
    finally:
        c.close()
    assert [(m.offset(), m.value()) for m in got] == list(enumerate(values))

    # librdkafka really compressed, as one idempotent producer: the batches on disk say so.
    on_disk = [b for path in segment_paths(broker.data_dir, topic, 0) for b in batches(path, whole=False)]
    assert {COMPRESSION[b.compression_type] for b in on_disk} == {"lz4"}
    assert len({b.producer_id for b in on_disk}) == 1 and on_disk[0].producer_id >= 0
    assert [b.base_sequence for b in on_disk] == [b.base_offset for b in on_disk]  # one producer from 0
    assert sum(b.records_count for b in on_disk) == 20_000


def test_admin_create_list_delete_topics(broker, topic):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=3)],
                                  operation_timeout=TIMEOUT)
    assert futures[topic].result(TIMEOUT) is None
    metadata = admin.list_topics(timeout=TIMEOUT)
    assert sorted(metadata.topics[topic].partitions) == [0, 1, 2]
    assert all(p.leader == 1 and p.replicas == [1] for p in metadata.topics[topic].partitions.values())
    assert metadata.cluster_id and list(metadata.brokers) == [1]

    again = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    with pytest.raises(KafkaException) as raised:
        again[topic].result(TIMEOUT)
    assert raised.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS

    bad = admin.create_topics([NewTopic(topic + "-rf4", num_partitions=1, replication_factor=4)])
    with pytest.raises(KafkaException) as raised:
        bad[topic + "-rf4"].result(TIMEOUT)
    assert raised.value.args[0].code() == KafkaError.INVALID_REPLICATION_FACTOR

    assert admin.delete_topics([topic], operation_timeout=TIMEOUT)[topic].result(TIMEOUT) is None
    assert topic not in admin.list_topics(timeout=TIMEOUT).topics
    assert not [d for d in broker.data_dir.iterdir() if d.name.startswith(topic + "-")]
    with pytest.raises(KafkaException) as raised:
        admin.delete_topics([topic])[topic].result(TIMEOUT)
    assert raised.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_list_offsets_watermarks_and_delete_records(broker, topic):
    base = 1_700_000_000_000
    p = idempotent_producer(broker)
    delivered = []
    p_errors = []

    def on_delivery(err, msg):
        (p_errors if err else delivered).append(err or msg.offset())

    for i in range(100):
        p.produce(topic, value=b"v%d" % i, partition=0, timestamp=base + 10 * i, on_delivery=on_delivery)
    assert p.flush(TIMEOUT) == 0 and not p_errors
    assert delivered == list(range(100))

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    tp = TopicPartition(topic, 0)
    asked = {"earliest": OffsetSpec.earliest(), "latest": OffsetSpec.latest(),
             "max": OffsetSpec.max_timestamp(), "at": OffsetSpec.for_timestamp(base + 555)}
    found = {}
    for name, spec in asked.items():
        result = admin.list_offsets({tp: spec}, request_timeout=TIMEOUT)[tp].result(TIMEOUT)
        found[name] = (result.offset, result.timestamp)
    assert found["earliest"][0] == 0
    assert found["latest"][0] == 100
    assert found["max"] == (99, base + 990)
    assert found["at"] == (56, base + 560)  # the first record at or after the timestamp

    c = assign_consumer(broker, TopicPartition(topic, 0, OFFSET_BEGINNING))
    try:
        assert c.get_watermark_offsets(tp, timeout=TIMEOUT) == (0, 100)
        (by_time,) = c.offsets_for_times([TopicPartition(topic, 0, base + 200)], timeout=TIMEOUT)
        assert by_time.offset == 20

        (deleted,) = admin.delete_records([TopicPartition(topic, 0, 30)],
                                          operation_timeout=TIMEOUT).values()
        assert deleted.result(TIMEOUT).low_watermark == 30
        assert c.get_watermark_offsets(tp, timeout=TIMEOUT) == (30, 100)
        got = read_to_eof(c)  # from the beginning, which is now 30
    finally:
        c.close()
    assert [(m.offset(), m.value()) for m in got] == [(i, b"v%d" % i) for i in range(30, 100)]
