"""Producers, consumer groups and transactions across a CreatePartitions, with confluent-kafka against a real
broker process: the new partitions receive data, get assigned and are consumed.

A classic group learns the new count from Metadata (its leader's client notices and the group rebalances);
a KIP-848 group (`group.protocol=consumer`) learns it from the broker, which recomputes the target assignment
when a subscribed topic's partition count changes. The clients refresh metadata every 500 ms here (Kafka's
default is 5 minutes), so the change is seen within a heartbeat or two.
"""
from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

TIMEOUT = 30.0   # s: a bound on any one wait; each is met far sooner
REFRESH = {"topic.metadata.refresh.interval.ms": 500}
# KIP-848 heartbeats every 200 ms, sessions of 2 s (the group.consumer.* minimums lowered for that).
FAST = ("group.consumer.min.heartbeat.interval.ms=100", "group.consumer.heartbeat.interval.ms=200",
        "group.consumer.min.session.timeout.ms=1000", "group.consumer.session.timeout.ms=2000")
BEFORE, AFTER = 2, 4


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _produce(producer: Producer, topic: str, keys: range, tag: str) -> dict[int, set[bytes]]:
    """One record per key (the client's partitioner picks the partition); the values each partition took."""
    placed: dict[int, set[bytes]] = {}

    def delivered(err, msg):
        assert err is None, err
        placed.setdefault(msg.partition(), set()).add(msg.value())
    for k in keys:
        producer.produce(topic, key=b"key-%d" % k, value=f"{tag}-{k}".encode(), on_delivery=delivered)
    assert producer.flush(TIMEOUT) == 0
    return placed


def _wait_partitions(client, topic: str, count: int) -> None:
    """Until `client`'s own metadata shows `count` partitions of `topic`."""
    deadline = time.monotonic() + TIMEOUT
    while len(client.list_topics(topic, timeout=TIMEOUT).topics[topic].partitions) != count:
        assert time.monotonic() < deadline, f"{client} never saw {count} partitions of {topic}"


def _consume_until(consumers: list[Consumer], wanted: set[bytes], partitions: set[int]) -> dict[int, set[bytes]]:
    """Poll every consumer until they consumed `wanted` and together own `partitions`; what each partition gave."""
    got: dict[int, set[bytes]] = {}
    deadline = time.monotonic() + TIMEOUT
    while True:
        owned = {tp.partition for c in consumers for tp in c.assignment()}
        seen = set().union(*got.values()) if got else set()
        if wanted <= seen and owned == partitions:
            return got
        assert time.monotonic() < deadline, f"own {owned}, missing {sorted(wanted - seen)[:10]}"
        for consumer in consumers:
            msg = consumer.poll(0.1)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got.setdefault(msg.partition(), set()).add(msg.value())


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_group_and_a_producer_keep_working_across_create_partitions(start_broker, protocol):
    broker = start_broker(*FAST)
    topic, group = f"grow-{protocol}", f"grow-group-{protocol}"
    admin = _admin(broker.bootstrap)   # kept: the futures die with their client
    for future in admin.create_topics([NewTopic(topic, BEFORE, 1)]).values():
        future.result(TIMEOUT)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, **REFRESH})
    settings = {"bootstrap.servers": broker.bootstrap, "group.id": group, "group.protocol": protocol,
                "auto.offset.reset": "earliest", "fetch.wait.max.ms": 50, **REFRESH}
    if protocol == "classic":
        settings["session.timeout.ms"] = 6000
    consumers = [Consumer(settings), Consumer(settings)]
    try:
        for consumer in consumers:
            consumer.subscribe([topic])
        first = _produce(producer, topic, range(100), "before")
        assert set(first) == set(range(BEFORE))
        _consume_until(consumers, set().union(*first.values()), set(range(BEFORE)))

        admin.create_partitions([NewPartitions(topic, AFTER)])[topic].result(TIMEOUT)
        _wait_partitions(producer, topic, AFTER)
        second = _produce(producer, topic, range(100, 300), "after")
        # The same keyed partitioner now spreads over every partition, the new ones included.
        assert set(second) == set(range(AFTER)), second.keys()
        got = _consume_until(consumers, set().union(*second.values()), set(range(AFTER)))
        for p in range(BEFORE, AFTER):
            assert got.get(p) == second[p], f"partition {p}: consumed {len(got.get(p, ()))} of {len(second[p])}"
        # Both members took part: the new partitions were spread, not all left with one.
        assert all(c.assignment() for c in consumers), [c.assignment() for c in consumers]
    finally:
        for consumer in consumers:
            consumer.close()


def test_a_transaction_writes_to_a_new_partition(start_broker):
    broker = start_broker()
    topic = "grow-txn"
    admin = _admin(broker.bootstrap)
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(TIMEOUT)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"grow-{uuid.uuid4()}",
                         **REFRESH})
    producer.init_transactions(TIMEOUT)
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(TIMEOUT)
    _wait_partitions(producer, topic, 3)
    producer.begin_transaction()
    for p in range(3):
        producer.produce(topic, value=b"in-txn-%d" % p, partition=p)
    producer.commit_transaction(TIMEOUT)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "grow-txn-reader",
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 2, 0)])
        deadline = time.monotonic() + TIMEOUT
        msg = None
        while msg is None:
            assert time.monotonic() < deadline, "the committed record of the new partition was not read"
            msg = consumer.poll(0.1)
        assert msg.error() is None and msg.value() == b"in-txn-2", msg.error() or msg.value()
    finally:
        consumer.close()
