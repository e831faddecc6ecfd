"""compression.type and min.insync.replicas have Kafka's effect on a real broker, with real clients.

compression.type: a topic that names a codec holds every batch in it
whatever the producer sent (Kafka's LogValidator recompresses), read back
exactly by kafka-python's consumer and by kafka-python's decoder straight
from the segment files; a transactional batch keeps its producer fields.
min.insync.replicas above 1 makes acks=all NOT_ENOUGH_REPLICAS on this one
node, as on a one-broker Kafka, while acks=1 and 0 still append. Both take
effect at create time and after an IncrementalAlterConfigs, without a restart.
"""
from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import NotEnoughReplicasError

from segment_files import COMPRESSION, batches, segment_paths

TIMEOUT = 15.0  # s: a bound on any single wait
TS = 1_700_000_000_000


def create_topic(broker, topic: str, config: dict[str, str]) -> None:
    client = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = client.create_topics([NewTopic(topic, 1, 1, config=config)], operation_timeout=TIMEOUT)
    assert futures[topic].result(TIMEOUT) is None


def alter_topic(broker, topic: str, **changes: str) -> None:
    """One IncrementalAlterConfigs SET per change (names with `_` for `.`)."""
    entries = [ConfigEntry(n.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
               for n, v in changes.items()]
    client = AdminClient({"bootstrap.servers": broker.bootstrap})
    (future,) = client.incremental_alter_configs([ConfigResource(ResourceType.TOPIC, topic,
                                                                 incremental_configs=entries)],
                                                 request_timeout=TIMEOUT).values()
    future.result(TIMEOUT)


def produce(broker, topic: str, messages: list[tuple[bytes | None, bytes, list, int]], **config) -> list:
    """Produce (key, value, headers, timestamp) messages in one go; each delivery's (error, offset)."""
    # A long linger keeps each call's messages in one batch on a loaded machine (flush sends at once).
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1000, **config})
    # Known partitions first: messages produced before the metadata wait unassigned and, once it
    # arrives during flush, move to the partition one by one while its sender takes each as a batch.
    assert topic in p.list_topics(topic, timeout=TIMEOUT).topics
    reports: list = []
    for key, value, headers, ts in messages:
        p.produce(topic, value=value, key=key, headers=headers, timestamp=ts, partition=0,
                  on_delivery=lambda err, msg: reports.append((err, msg.offset())))
    assert p.flush(TIMEOUT) == 0, "messages still undelivered after flush"
    return reports


def consume_all(broker, topic: str, count: int, **config) -> list:
    """Exactly `count` records of partition 0 from the start, read by kafka-python; one more poll brings none."""
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
                      auto_offset_reset="earliest", **config)
    try:
        c.assign([TopicPartition(topic, 0)])
        got: list = []
        deadline = time.monotonic() + TIMEOUT
        while len(got) < count:
            assert time.monotonic() < deadline, f"{len(got)} of {count} records after {TIMEOUT} s"
            for records in c.poll(timeout_ms=200).values():
                got.extend(records)
        assert not c.poll(timeout_ms=100), "more records than were produced"
        return got
    finally:
        c.close()


def stored_batches(broker, topic: str) -> list:
    """Every batch of the topic's partition 0 as kafka-python decodes it from the segment files."""
    return [b for path in segment_paths(broker.data_dir, topic, 0) for b in batches(path, whole=False)]


def messages(count: int) -> list[tuple[bytes | None, bytes, list, int]]:
    """Keys (some null), values that compress, headers and distinct CreateTimes."""
    return [(None if i % 5 == 0 else b"key-%d" % i, b"value %d " % i * (i % 9 + 1),
             [("h", b"%d" % i)] if i % 2 else [], TS + 7 * i) for i in range(count)]


def as_sent(record) -> tuple:
    return (record.key, record.value, [(k, bytes(v)) for k, v in record.headers], record.timestamp)


@pytest.mark.parametrize("topic_codec, producer_codec", [("gzip", "lz4"), ("zstd", "none"), ("uncompressed", "gzip"),
                                                         ("snappy", "zstd"), ("lz4", "snappy")])
def test_a_topic_codec_holds_every_batch_in_it_and_kafka_python_reads_them_back(broker, topic, topic_codec,
                                                                                producer_codec):
    create_topic(broker, topic, {"compression.type": topic_codec})
    sent = messages(300)
    reports = produce(broker, topic, sent, **{"compression.type": producer_codec})
    assert [e for e, _ in reports] == [None] * len(sent)
    assert sorted(o for _, o in reports) == list(range(len(sent)))
    got = consume_all(broker, topic, len(sent))
    assert [r.offset for r in got] == list(range(len(sent)))
    assert [as_sent(r) for r in got] == [(k, v, h, ts) for k, v, h, ts in sent]
    stored = stored_batches(broker, topic)
    expected = "none" if topic_codec == "uncompressed" else topic_codec
    assert {COMPRESSION[b.compression_type] for b in stored} == {expected}
    assert [as_sent(r) for b in stored for r in b] == [as_sent(r) for r in got]


def test_a_batch_already_in_the_topic_codec_is_stored_as_it_came(broker, topic):
    create_topic(broker, topic, {"compression.type": "gzip"})
    sent = messages(50)
    produce(broker, topic, sent, **{"compression.type": "gzip"})
    (batch,) = stored_batches(broker, topic)
    assert COMPRESSION[batch.compression_type] == "gzip"
    assert [as_sent(r) for r in batch] == [(k, v, h, ts) for k, v, h, ts in sent]


def test_batches_too_costly_to_recompress_on_the_event_loop_are_recompressed_in_a_worker(broker, topic):
    # ~1 MB lz4 batches: recompressing one to gzip costs far more than a request may take on the loop.
    create_topic(broker, topic, {"compression.type": "gzip"})
    sent = [(b"k%d" % i, b"%08d " % i * 12, [], TS + i) for i in range(20_000)]
    reports = produce(broker, topic, sent, **{"compression.type": "lz4", "batch.size": 1_000_000,
                                              "linger.ms": 500})
    assert [e for e, _ in reports] == [None] * len(sent)
    stored = stored_batches(broker, topic)
    assert {COMPRESSION[b.compression_type] for b in stored} == {"gzip"}
    assert max(len(list(b)) for b in stored) > 5000
    assert [as_sent(r) for r in consume_all(broker, topic, len(sent), max_partition_fetch_bytes=4 << 20)] == \
        [(k, v, h, ts) for k, v, h, ts in sent]


def test_transactional_batches_recompressed_keep_producer_id_epoch_sequence_and_flags(broker, topic):
    create_topic(broker, topic, {"compression.type": "zstd"})
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"{topic}-txn", "linger.ms": 50,
                  "compression.type": "lz4"})
    p.init_transactions(TIMEOUT)
    for round_ in range(2):
        p.begin_transaction()
        for i in range(20):
            p.produce(topic, value=b"txn %d %d " % (round_, i) * 20, key=b"k%d" % i, partition=0)
        p.flush(TIMEOUT)
        p.commit_transaction(TIMEOUT)
    data = [b for b in stored_batches(broker, topic) if not b.is_control_batch]
    assert {COMPRESSION[b.compression_type] for b in data} == {"zstd"}
    assert all(b.is_transactional and b.producer_id >= 0 for b in data)
    assert len({(b.producer_id, b.producer_epoch) for b in data}) == 1
    # The sequences run on across the batches, as the producer numbered them.
    sequences = [(b.base_sequence, len(list(b))) for b in data]
    assert sequences[0][0] == 0
    assert all(seq == prev + n for (prev, n), (seq, _) in zip(sequences, sequences[1:]))
    got = consume_all(broker, topic, 40, isolation_level="read_committed")
    assert [r.value for r in got] == [b"txn %d %d " % (r, i) * 20 for r in range(2) for i in range(20)]


def test_an_idempotent_producer_keeps_its_sequence_across_recompressed_batches(broker, topic):
    create_topic(broker, topic, {"compression.type": "gzip"})
    reports = produce(broker, topic, messages(500), **{"compression.type": "snappy", "enable.idempotence": True,
                                                       "acks": "all", "batch.num.messages": 50})
    assert [e for e, _ in reports] == [None] * 500
    stored = stored_batches(broker, topic)
    assert len(stored) >= 2 and {COMPRESSION[b.compression_type] for b in stored} == {"gzip"}
    assert [b.base_sequence for b in stored] == [b.base_offset for b in stored]   # one producer, from 0


def test_compression_type_altered_on_a_live_topic_applies_to_the_next_batch(broker, topic):
    create_topic(broker, topic, {})
    produce(broker, topic, messages(10), **{"compression.type": "lz4"})
    alter_topic(broker, topic, compression_type="gzip", compression_gzip_level="9")
    produce(broker, topic, messages(10), **{"compression.type": "lz4"})
    alter_topic(broker, topic, compression_type="producer")
    produce(broker, topic, messages(10), **{"compression.type": "lz4"})
    assert [COMPRESSION[b.compression_type] for b in stored_batches(broker, topic)] == ["lz4", "gzip", "lz4"]
    assert len(consume_all(broker, topic, 30)) == 30


def test_a_batch_larger_than_max_message_bytes_once_recompressed_is_message_too_large(broker, topic):
    # 40 KB of one repeated byte: a few hundred bytes in gzip, all of it uncompressed.
    create_topic(broker, topic, {"compression.type": "uncompressed", "max.message.bytes": "20000"})
    reports = produce(broker, topic, [(None, b"x" * 40_000, [], TS)], **{"compression.type": "gzip",
                                                                        "retries": 0})
    assert [e.code() for e, _ in reports] == [KafkaError.MSG_SIZE_TOO_LARGE]
    assert stored_batches(broker, topic) == []


# Every topic config of Kafka 4.2 at a value other than its default, and the two Kafka 4.0 removed.
EVERY_CONFIG = {
    "cleanup.policy": "compact,delete", "compression.type": "zstd", "compression.gzip.level": "5",
    "compression.lz4.level": "3", "compression.zstd.level": "7", "delete.retention.ms": "1000",
    "file.delete.delay.ms": "1000", "flush.messages": "1000", "flush.ms": "1000",
    "follower.replication.throttled.replicas": "0:1", "leader.replication.throttled.replicas": "*",
    "index.interval.bytes": "1000", "local.retention.bytes": "1000", "local.retention.ms": "1000",
    "max.compaction.lag.ms": "100000", "max.message.bytes": "100000", "message.timestamp.after.max.ms": "60000",
    "message.timestamp.before.max.ms": "60000", "message.timestamp.type": "LogAppendTime",
    "min.cleanable.dirty.ratio": "0.1", "min.compaction.lag.ms": "10", "min.insync.replicas": "1",
    "preallocate": "true", "remote.log.copy.disable": "true", "remote.log.delete.on.disable": "true",
    "remote.storage.enable": "false", "retention.bytes": "100000", "retention.ms": "100000",
    "segment.bytes": "1048576", "segment.index.bytes": "4096", "segment.jitter.ms": "10", "segment.ms": "100000",
    "unclean.leader.election.enable": "true",
}
REMOVED = {"message.format.version": "3.0-IV1", "message.downconversion.enable": "false"}


def test_every_kafka_topic_config_is_accepted_at_create_and_the_removed_ones_dropped(broker, topic):
    create_topic(broker, topic, {**EVERY_CONFIG, **REMOVED})
    stored = json.loads((broker.data_dir / "topic-configs").read_text())["topics"][topic]
    assert set(stored) == set(EVERY_CONFIG)
    now = int(time.time() * 1000)
    reports = produce(broker, topic, [(b"k", b"v" * 100, [], now)], **{"compression.type": "lz4", "acks": "all"})
    assert [e for e, _ in reports] == [None]
    (record,) = consume_all(broker, topic, 1)
    assert (record.key, record.value, record.timestamp_type) == (b"k", b"v" * 100, 1)
    assert [COMPRESSION[b.compression_type] for b in stored_batches(broker, topic)] == ["zstd"]


def test_remote_storage_is_refused_as_by_a_kafka_broker_without_tiered_storage(broker, topic):
    client = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = client.create_topics([NewTopic(topic, 1, 1, config={"remote.storage.enable": "true"})],
                                   operation_timeout=TIMEOUT)
    with pytest.raises(KafkaException) as refused:
        futures[topic].result(TIMEOUT)
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert "Tiered Storage functionality is disabled in the broker" in refused.value.args[0].str()


# -- min.insync.replicas -------------------------------------------------------------------------------------------

def test_acks_all_is_not_enough_replicas_when_min_insync_replicas_is_above_one(broker, topic):
    create_topic(broker, topic, {"min.insync.replicas": "2"})
    # librdkafka retries a retriable error until message.timeout.ms: no retries, to see the broker's answer.
    refused = produce(broker, topic, messages(3), acks="all", retries=0)
    assert [e.code() for e, _ in refused] == [KafkaError.NOT_ENOUGH_REPLICAS] * 3
    assert stored_batches(broker, topic) == []
    assert [e for e, _ in produce(broker, topic, messages(2), acks="1")] == [None, None]
    assert [e for e, _ in produce(broker, topic, messages(2), acks="0")] == [None, None]
    assert [r.value for r in consume_all(broker, topic, 4)] == [m[1] for m in messages(2)] * 2


def test_kafka_python_acks_all_gets_not_enough_replicas(broker, topic):
    create_topic(broker, topic, {"min.insync.replicas": "3"})
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", retries=0)
    try:
        future = p.send(topic, b"refused", partition=0)
        with pytest.raises(NotEnoughReplicasError):
            future.get(timeout=TIMEOUT)
    finally:
        p.close(timeout=TIMEOUT)


def test_min_insync_replicas_altered_without_a_restart_takes_effect_at_the_next_produce(broker, topic):
    create_topic(broker, topic, {})
    assert [e for e, _ in produce(broker, topic, messages(1), acks="all", retries=0)] == [None]
    alter_topic(broker, topic, min_insync_replicas="2")
    assert [e.code() for e, _ in produce(broker, topic, messages(1), acks="all", retries=0)] == \
        [KafkaError.NOT_ENOUGH_REPLICAS]
    alter_topic(broker, topic, min_insync_replicas="1")
    assert [e for e, _ in produce(broker, topic, messages(1), acks="all", retries=0)] == [None]
    assert len(consume_all(broker, topic, 2)) == 2
