"""The embedded clients against the broker path.

    .venv/bin/python -m pytest -q bench/test_embedded.py --benchmark-only \\
        --benchmark-json=.benchmarks/embedded.json
    .venv/bin/python bench/embedded_report.py .benchmarks/embedded.json

produce / consume: the same 200,000 values of 100 B (bench/test_broker.py's
word texts, lz4 about 2x) through `logstore.broker.embedded` in this process
("ours") and through confluent-kafka against a `logstore broker` subprocess on
loopback ("peer", once its producer id is acquired), with the same client settings: idempotent, acks=all
(answered after the group-commit fsync on both paths), lz4, linger.ms=10,
batch.size=1 MiB; consumers read one partition from offset 0 in batches of
10,000 (`max.poll.records` / `consume(num_messages=)`) with 16 MiB partition
fetches. Timed: produce from the first send to the end of flush(); consume
from assign() to the 200,000th record. Checked untimed: the offsets and the
count. The broker path's time includes its process's work on the other core.

The assignors at scale are in bench/test_assignors.py.

Speed is reported, not asserted; correctness is asserted.
"""
from __future__ import annotations

import shutil
import tempfile
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

import test_broker as base
from logstore.broker import embedded

MESSAGES = 200_000
ROUNDS = 3
BATCH = 10_000
TIMEOUT = 120.0
CLIENT_SETTINGS = {"enable.idempotence": True, "acks": "all", "compression.type": "lz4", "linger.ms": 10,
                   "batch.size": 1 << 20}
PEER_PRODUCER = {**CLIENT_SETTINGS, "batch.num.messages": 100_000, "queue.buffering.max.messages": 2_000_000}
CONSUMER_SETTINGS = {"max.partition.fetch.bytes": 16 << 20, "fetch.max.bytes": 64 << 20}


def _tag(benchmark, op: str, side: str, **info) -> None:
    benchmark.group = op
    benchmark.extra_info.update({"op": op, "side": side, **info})


@pytest.fixture(scope="module")
def values():
    """The message values (test_broker's pool, produced in turn)."""
    return base.message_values()


@pytest.fixture(scope="module")
def broker():
    """A `logstore broker` with default settings, stopped cleanly at the end."""
    yield from base.running_broker("logstore-bench-embedded-")


@pytest.fixture(scope="module")
def node():
    """An embedded node on a fresh directory with default settings (acks=all waits for the fsync)."""
    root = tempfile.mkdtemp(prefix="logstore-bench-embedded-node-")
    opened = embedded.open(root)
    yield opened
    opened.close()
    shutil.rmtree(root, ignore_errors=True)


_topics = iter(range(1_000_000))


def _fresh_topic(create) -> str:
    name = f"bench-{next(_topics)}"
    create(name)
    return name


def test_produce_embedded(benchmark, node, values):
    """Embedded Producer: send + flush of MESSAGES values."""
    _tag(benchmark, "produce", "ours", messages=MESSAGES)
    count = len(values)
    made = []

    def setup():
        topic = _fresh_topic(lambda name: node.store.create_topic(name, 1))
        made.append((topic, embedded.Producer(node, CLIENT_SETTINGS)))
        return made[-1], {}

    def run(topic, producer):
        send = producer.send
        for i in range(MESSAGES):
            send(topic, values[i % count])
        producer.flush(TIMEOUT)

    benchmark.pedantic(run, setup=setup, rounds=ROUNDS)
    for topic, producer in made:
        producer.close()
        assert node.store.log(topic, 0).log_end_offset == MESSAGES


def test_produce_broker(benchmark, broker, values):
    """confluent-kafka Producer against the broker, same settings."""
    _tag(benchmark, "produce", "peer", messages=MESSAGES)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    count = len(values)
    delivered = []

    def setup():
        topic = _fresh_topic(lambda name: base.create_topic(admin, name, 1))
        producer = Producer({"bootstrap.servers": broker.bootstrap, **PEER_PRODUCER,
                             "on_delivery": lambda err, msg: delivered.append(err)})
        producer.list_topics(topic, timeout=TIMEOUT)
        # librdkafka gets its producer id in the background, on a timer that fires every 500 ms until it has a
        # connection to the broker by its id: one delivered record proves it has it (the embedded producer
        # gets its id in its constructor, also untimed).
        producer.produce(_fresh_topic(lambda name: base.create_topic(admin, name, 1)), b"warm-up")
        assert producer.flush(TIMEOUT) == 0
        delivered.clear()
        return (topic, producer), {}

    def run(topic, producer):
        produce = producer.produce
        for i in range(MESSAGES):
            while True:
                try:
                    produce(topic, values[i % count])
                    break
                except BufferError:
                    producer.poll(0.01)
        assert producer.flush(TIMEOUT) == 0

    benchmark.pedantic(run, setup=setup, rounds=ROUNDS)
    assert len(delivered) == MESSAGES and not any(delivered)


@pytest.fixture(scope="module")
def filled_node(node, values):
    """A topic of the embedded node holding MESSAGES values at offsets 0.."""
    producer = embedded.Producer(node, CLIENT_SETTINGS)
    node.store.create_topic("consume-src", 1)
    for i in range(MESSAGES):
        producer.send("consume-src", values[i % len(values)])
    producer.close()
    return "consume-src"


@pytest.fixture(scope="module")
def filled_broker(broker, values):
    """A topic of the broker holding MESSAGES values at offsets 0.."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    base.create_topic(admin, "consume-src", 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, **PEER_PRODUCER})
    for i in range(MESSAGES):
        while True:
            try:
                producer.produce("consume-src", values[i % len(values)])
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(TIMEOUT) == 0
    return "consume-src"


def test_consume_embedded(benchmark, node, filled_node):
    """Embedded Consumer: assign() and poll() every record from offset 0."""
    _tag(benchmark, "consume", "ours", messages=MESSAGES)
    tp = (filled_node, 0)

    def run():
        consumer = embedded.Consumer(node, {**CONSUMER_SETTINGS, "max.poll.records": BATCH,
                                            "auto.offset.reset": "earliest"})
        consumer.assign([tp])
        got, last = 0, -1
        deadline = time.monotonic() + TIMEOUT
        while got < MESSAGES:
            assert time.monotonic() < deadline
            for records in consumer.poll(1.0).values():
                got += len(records)
                last = records[-1].offset
        consumer.close()
        return got, last

    got, last = benchmark.pedantic(run, rounds=ROUNDS)
    assert (got, last) == (MESSAGES, MESSAGES - 1)


def test_consume_broker(benchmark, broker, filled_broker):
    """confluent-kafka Consumer against the broker: assign() and consume() every record from offset 0."""
    _tag(benchmark, "consume", "peer", messages=MESSAGES)

    def run():
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "bench-embedded-peer",
                             "enable.auto.commit": False, **CONSUMER_SETTINGS,
                             "queued.min.messages": 1_000_000})
        consumer.assign([TopicPartition(filled_broker, 0, 0)])
        got, last = 0, -1
        deadline = time.monotonic() + TIMEOUT
        while got < MESSAGES:
            assert time.monotonic() < deadline
            for message in consumer.consume(num_messages=BATCH, timeout=1.0):
                assert message.error() is None
                got += 1
                last = message.offset()
        consumer.close()
        return got, last

    got, last = benchmark.pedantic(run, rounds=ROUNDS)
    assert (got, last) == (MESSAGES, MESSAGES - 1)

