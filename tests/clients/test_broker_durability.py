"""acks=all survives SIGKILL: what an idempotent librdkafka producer saw acknowledged is there after a
restart on the same directory and port, exactly once and in order.

The quick round kills the broker right after flush() returned; the soak
round (`-m soak`) kills and restarts it several times while a producer keeps
sending, as the broker issue's crash check asks.
"""
from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from broker_process import CLEAN_SHUTDOWN_MARKER

TIMEOUT = 30.0  # s


def read_partition(broker, topic: str, partition: int = 0, timeout: float = TIMEOUT) -> list[tuple[int, bytes]]:
    """(offset, value) of every message in the partition, up to its end."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused-no-coordinator",
                  "enable.auto.commit": False, "enable.partition.eof": True, "fetch.wait.max.ms": 50})
    c.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
    got = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            assert time.monotonic() < deadline, f"no end of partition after {timeout} s ({len(got)} read)"
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                return got
            got.append((msg.offset(), msg.value()))
    finally:
        c.close()


def test_acknowledged_messages_survive_sigkill_right_after_flush(start_broker):
    broker = start_broker()
    topic = "durable"
    acked: list[tuple[int, bytes]] = []
    failed = []

    def on_delivery(err, msg):
        if err is not None:
            failed.append(err)
        else:
            acked.append((msg.offset(), msg.value()))

    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "acks": "all",
                  "compression.type": "lz4", "linger.ms": 2})
    values = [b"durable %06d" % i for i in range(20_000)]
    for v in values:
        while True:
            try:
                p.produce(topic, value=v, partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(TIMEOUT) == 0 and not failed, failed[:3]
    broker.kill()  # the moment flush() returned: no clean shutdown, no chance to sync later
    assert not (broker.data_dir / CLEAN_SHUTDOWN_MARKER).exists()
    del p  # its connections died with the broker; nothing more will be sent

    assert acked == list(enumerate(values))
    broker.start()  # same directory, same port: recovery
    assert read_partition(broker, topic) == acked

    # The restarted broker takes new writes after the recovered ones.
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "acks": "all"})
    delivered = []
    p.produce(topic, value=b"after restart", partition=0, on_delivery=lambda e, m: delivered.append((e, m.offset())))
    assert p.flush(TIMEOUT) == 0
    assert delivered == [(None, len(values))]


@pytest.mark.soak
def test_idempotent_producer_through_repeated_sigkills(start_broker):
    """100k messages from one idempotent producer while the broker is SIGKILLed and restarted 5 times."""
    broker = start_broker()
    topic = "soak"
    total, kills = 100_000, 5
    acked: list[tuple[int, bytes]] = []
    failed = []
    lock = threading.Lock()

    def on_delivery(err, msg):
        with lock:
            if err is not None:
                failed.append(err)
            else:
                acked.append((msg.offset(), msg.value()))

    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "acks": "all",
                  "compression.type": "lz4", "linger.ms": 5, "message.timeout.ms": 120_000,
                  "reconnect.backoff.ms": 10, "reconnect.backoff.max.ms": 200})
    sent = 0
    for round_ in range(kills + 1):
        # Send a share, then kill in the middle of traffic (some of it unacknowledged).
        target = total * (round_ + 1) // (kills + 1)
        while sent < target:
            try:
                p.produce(topic, value=b"soak %07d" % sent, partition=0, on_delivery=on_delivery)
                sent += 1
            except BufferError:
                p.poll(0.05)
        p.poll(0)
        if round_ < kills:
            with lock:
                seen = len(acked)
            deadline = time.monotonic() + TIMEOUT
            while len(acked) == seen and time.monotonic() < deadline:  # some of this share acknowledged
                p.poll(0.05)
            broker.kill()
            broker.start()
    assert p.flush(120) == 0
    assert not failed, failed[:3]

    on_disk = read_partition(broker, topic, timeout=120)
    values = [v for _, v in on_disk]
    assert len(set(values)) == len(values), "a message was written twice"
    assert [o for o, _ in on_disk] == list(range(len(on_disk)))
    assert sorted(values) == values, "messages out of send order"
    assert set(v for _, v in acked) <= set(values), "an acknowledged message was lost"
    assert dict(acked) == dict(on_disk[o] for o, _ in acked), "an acknowledgement names the wrong offset"
    assert len(values) == total  # the producer retried every unacknowledged one to success
