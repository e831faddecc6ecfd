"""A broker whose power goes part-way through a CreatePartitions (growth_crash_broker.py): it starts again
on the same directory, every record acknowledged before is there, the topic has a whole prefix of the
partitions asked, and the client's retry of the same CreatePartitions finishes the growth.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from broker_process import BrokerProcess, finish_brokers, free_port

TIMEOUT = 30.0   # s: a bound on any one wait
LAUNCHER = str(Path(__file__).with_name("growth_crash_broker.py"))
TOPIC, BEFORE, AFTER = "grown", 2, 6


def _produce(bootstrap: str, partitions: range, tag: bytes) -> dict[int, list[bytes]]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    acked: dict[int, list[bytes]] = {}

    def delivered(err, msg):
        assert err is None, err
        acked.setdefault(msg.partition(), []).append(msg.value())
    for p in partitions:
        for i in range(5):
            producer.produce(TOPIC, value=b"%s-%d-%d" % (tag, p, i), partition=p, on_delivery=delivered)
    assert producer.flush(TIMEOUT) == 0
    return acked


def _read(bootstrap: str, partition: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "crash-reader", "enable.auto.commit": False})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, partition), TIMEOUT)
        consumer.assign([TopicPartition(TOPIC, partition, low)])
        got = []
        while len(got) < high - low:
            msg = consumer.poll(TIMEOUT)
            assert msg is not None and msg.error() is None, msg and msg.error()
            got.append(msg.value())
        return got
    finally:
        consumer.close()


def test_a_power_cut_mid_growth_loses_nothing_and_the_retry_finishes_it(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    broker = BrokerProcess("127.0.0.1", free_port(), data, launcher=(LAUNCHER,))
    try:
        broker.start()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, BEFORE, 1)])[TOPIC].result(TIMEOUT)
        acked = _produce(broker.bootstrap, range(BEFORE), b"before")
        growth = admin.create_partitions([NewPartitions(TOPIC, AFTER)], request_timeout=5.0)[TOPIC]
        broker.wait_killed(TIMEOUT)
        with pytest.raises(KafkaException) as died:
            growth.result(TIMEOUT)   # never answered: the broker died in it
        assert died.value.args[0].code() in (KafkaError._TRANSPORT, KafkaError._TIMED_OUT), died.value
        del admin

        broker.launcher = ()
        broker.start()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        grown = len(admin.list_topics(TOPIC, timeout=TIMEOUT).topics[TOPIC].partitions)
        # Names made since the last directory sync are gone with the power: the topic is as it was, or a prefix.
        assert BEFORE <= grown < AFTER, grown
        assert sorted(p.name for p in data.iterdir() if p.name.startswith(f"{TOPIC}-")) == \
            sorted(f"{TOPIC}-{p}" for p in range(grown))
        for p in range(BEFORE):
            assert _read(broker.bootstrap, p) == acked[p], p
        admin.create_partitions([NewPartitions(TOPIC, AFTER)])[TOPIC].result(TIMEOUT)
        assert len(admin.list_topics(TOPIC, timeout=TIMEOUT).topics[TOPIC].partitions) == AFTER
        later = _produce(broker.bootstrap, range(AFTER), b"after")
        for p in range(AFTER):
            assert _read(broker.bootstrap, p) == acked.get(p, []) + later[p], p
        ids = {(data / f"{TOPIC}-{p}" / "partition.metadata").read_text() for p in range(AFTER)}
        assert len(ids) == 1, ids
    finally:
        finish_brokers([broker])
