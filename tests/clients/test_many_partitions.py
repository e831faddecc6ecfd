"""Stores of more partitions than the broker may open files: segment files are opened on demand and closed
least-recently-used first (logstore/open_files.py), so creating, writing, restarting on and reading them all
works within the open-files limit: 2,000 partitions under a limit of 256, and 20,000 under this machine's
default limit (issue 25)."""
from __future__ import annotations

import resource
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker_process import BrokerProcess, free_port

TIMEOUT = 120.0
# librdkafka spends time per partition on every request (it sends one Produce a partition here): at 20,000
# partitions the client, not the broker, takes ~90 s a round of one record each.
LARGE_TIMEOUT = 900.0
LIMIT = "LOGSTORE_TEST_NOFILE"   # what fd_limited_broker.py reads
MAX_PARTITIONS_PER_REQUEST = 10_000   # KRaft's limit on one CreateTopics


def _partitions(topics: int, partitions: int) -> list[TopicPartition]:
    return [TopicPartition(f"t{t}", p) for t in range(topics) for p in range(partitions)]


def _produce_one_each(broker: BrokerProcess, where: list[TopicPartition], round_: int, acks: str,
                      timeout: float) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": acks, "enable.idempotence": acks == "all",
                         "linger.ms": 5, "queue.buffering.max.messages": 2 * len(where)})
    failed: list[str] = []
    for tp in where:
        producer.produce(tp.topic, value=f"{round_}:{tp.topic}:{tp.partition}".encode(), partition=tp.partition,
                         on_delivery=lambda err, msg: err and failed.append(str(err)))
    assert producer.flush(timeout) == 0 and not failed, failed[:5]


def _read_all(broker: BrokerProcess, where: list[TopicPartition], per_partition: int,
              timeout: float) -> dict[tuple[str, int], list]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "reader", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 100})
    consumer.assign([TopicPartition(tp.topic, tp.partition, 0) for tp in where])
    seen: dict[tuple[str, int], list[bytes]] = {}
    want = len(where) * per_partition
    count = 0
    deadline = time.monotonic() + timeout
    try:
        while count < want:
            assert time.monotonic() < deadline, f"read {count} of {want} records"
            for msg in consumer.consume(1000, timeout=1.0):
                assert msg.error() is None, msg.error()
                seen.setdefault((msg.topic(), msg.partition()), []).append(msg.value())
                count += 1
    finally:
        consumer.close()
    return seen


def _written_restarted_and_read(broker: BrokerProcess, topics: int, partitions: int, acks: str,
                                timeout: float = TIMEOUT) -> None:
    """Create the topics, write a record to every partition, stop cleanly, write again, crash, and read all."""
    where = _partitions(topics, partitions)
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for t in range(topics):
            admin.create_topics([NewTopic(f"t{t}", partitions)], request_timeout=timeout)[f"t{t}"].result(timeout)
        _produce_one_each(broker, where, 0, acks, timeout)
        broker.stop()           # a clean stop closes every segment, open or not
        broker.start()
        _produce_one_each(broker, where, 1, acks, timeout)
        broker.kill()           # an unclean start recovers every partition's tail, each file opened in turn
        broker.start()
        seen = _read_all(broker, where, 2, timeout)
    finally:
        if broker.running:
            broker.stop()
    expected = {(tp.topic, tp.partition): [f"{r}:{tp.topic}:{tp.partition}".encode() for r in range(2)]
                for tp in where}
    assert seen == expected
    assert "Too many open files" not in broker.log_text(), broker.log_text()[-4000:]


def test_2000_partitions_under_a_limit_of_256_open_files(tmp_path):
    data_dir = tmp_path / "broker"
    data_dir.mkdir()
    launcher = (str(Path(__file__).with_name("fd_limited_broker.py")),)
    broker = BrokerProcess("127.0.0.1", free_port(), data_dir, ("log.segment.bytes=1048576",),
                           env={LIMIT: "256"}, launcher=launcher)
    broker.start()
    _written_restarted_and_read(broker, topics=4, partitions=500, acks="all")


# Minutes: 20,000 partitions are created, written twice by a client slow at this scale, recovered after a
# crash (about 2 ms each, on two threads) and read.
@pytest.mark.soak
def test_20000_partitions_under_the_default_open_files_limit(tmp_path):
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft > 20_000:
        pytest.fail(f"this machine's open-files limit is {soft}: 20,000 partitions would fit without the cache;"
                    " run under `ulimit -n 20000`")
    data_dir = tmp_path / "broker"
    data_dir.mkdir()
    broker = BrokerProcess("127.0.0.1", free_port(), data_dir, (), start_timeout=300.0)
    broker.start()
    # acks=1: acks=all would make it a test of 20,000 fsyncs (one a partition) on this disk.
    _written_restarted_and_read(broker, topics=2, partitions=MAX_PARTITIONS_PER_REQUEST, acks="1",
                                timeout=LARGE_TIMEOUT)
