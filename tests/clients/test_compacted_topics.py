"""Compacted topics on a real broker: its cleaner runs, librdkafka reads the offset gaps it leaves.

A topic with cleanup.policy=compact and small segments takes many values per
key and some tombstones from confluent-kafka; the broker's cleaner (backoff
lowered) compacts it. A consumer from the beginning then sees strictly
increasing offsets with gaps, every record exactly as produced, and the latest
value of every key; a group whose committed offset falls inside a gap resumes
at the next record that is left. A record without a key is refused
(INVALID_RECORD), as Kafka refuses it for a compacted topic.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker_process import BrokerProcess, free_port
from logstore.checkpoints import OffsetCheckpoint

TIMEOUT = 30.0
TOPIC = "compacted"
KEYS = 40
MESSAGES = 3_000
TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.01",
                "delete.retention.ms": "60000"}


def _produce(bootstrap: str) -> dict[int, tuple[bytes, bytes | None]]:
    """Produce the workload; offset -> (key, value) of every record, from the delivery reports."""
    written: dict[int, tuple[bytes, bytes | None]] = {}

    def delivered(err, msg):
        assert err is None, err
        written[msg.offset()] = (msg.key(), msg.value())

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 2,
                         "batch.num.messages": 50})
    for i in range(MESSAGES):
        key = b"key-%d" % (i % KEYS)
        value = None if i % 97 == 13 else b"value-%d" % i
        producer.produce(TOPIC, key=key, value=value, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(TIMEOUT) == 0
    return written


def _await_cleaned(data_dir, past: int) -> int:
    """Wait until the broker's cleaner checkpoint for the topic passes `past`; the checkpoint."""
    deadline = time.monotonic() + TIMEOUT
    path = data_dir / "cleaner-offset-checkpoint"
    while time.monotonic() < deadline:
        if path.exists():
            offset = OffsetCheckpoint(path).read().get((TOPIC, 0), -1)
            if offset > past:
                return offset
        time.sleep(0.05)   # the cleaner writes a file; there is no event to wait on across processes
    raise AssertionError(f"the cleaner did not pass offset {past} within {TIMEOUT} s")


def _consume(bootstrap: str, group: str, start: int | None = None) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    if start is not None:
        consumer.assign([TopicPartition(TOPIC, 0, start)])
    else:
        consumer.subscribe([TOPIC])
    _, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=TIMEOUT)
    got, deadline = [], time.monotonic() + TIMEOUT
    while (not got or got[-1].offset() < high - 1) and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        got.append(msg)
    consumer.close()
    return got


@pytest.fixture(scope="module")
def compacted(tmp_path_factory):
    """A broker whose cleaner has compacted the topic: (broker, what was produced, the cleaner checkpoint)."""
    data_dir = tmp_path_factory.mktemp("compacted") / "data"
    data_dir.mkdir()
    broker = BrokerProcess("127.0.0.1", free_port(), data_dir,
                           ("log.cleaner.backoff.ms=50", "group.initial.rebalance.delay.ms=0")).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        futures = admin.create_topics([NewTopic(TOPIC, 1, 1, config=TOPIC_CONFIG)], operation_timeout=TIMEOUT)
        futures[TOPIC].result(TIMEOUT)
        written = _produce(broker.bootstrap)
        checkpoint = _await_cleaned(data_dir, MESSAGES // 2)
        yield broker, written, checkpoint
    finally:
        broker.stop()


def test_a_consumer_from_the_beginning_reads_the_gaps(compacted):
    broker, written, checkpoint = compacted
    got = _consume(broker.bootstrap, "from-start")
    offsets = [m.offset() for m in got]
    assert offsets == sorted(set(offsets))
    assert len(offsets) < len(written) - (checkpoint // 2), "compaction left too much behind"
    for m in got:
        assert written[m.offset()] == (m.key(), m.value())
    latest = {}
    for offset in sorted(written):
        key, value = written[offset]
        latest[key] = value
    seen = {}
    for m in got:
        seen[m.key()] = m.value()
    assert {k: v for k, v in seen.items() if v is not None} == {k: v for k, v in latest.items() if v is not None}
    # Below the checkpoint every key is left once at most.
    cleaned_keys = [m.key() for m in got if m.offset() < checkpoint]
    assert len(cleaned_keys) == len(set(cleaned_keys))


def test_a_group_resumes_from_a_committed_offset_inside_a_gap(compacted):
    broker, written, checkpoint = compacted
    kept = [m.offset() for m in _consume(broker.bootstrap, "survey")]
    # Below the checkpoint most offsets are gone; commit one in the middle of them.
    gap = next(o for o in range(checkpoint // 2, checkpoint) if o not in kept)
    committer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "in-gap"})
    committer.commit(offsets=[TopicPartition(TOPIC, 0, gap)], asynchronous=False)
    committer.close()
    resumed = _consume(broker.bootstrap, "in-gap")
    assert resumed[0].offset() == min(o for o in kept if o >= gap)
    assert [m.offset() for m in resumed] == [o for o in kept if o >= gap]
    # An explicit position inside a gap reads from the next record too.
    assigned = _consume(broker.bootstrap, "assigned", start=gap)
    assert assigned[0].offset() == resumed[0].offset()


def test_a_record_without_a_key_is_refused(compacted):
    broker, _, _ = compacted
    errors = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.send.max.retries": 0})
    producer.produce(TOPIC, value=b"no key", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(TIMEOUT)
    assert len(errors) == 1 and errors[0] is not None
    assert errors[0].code() == KafkaError.INVALID_RECORD, errors[0]


@pytest.mark.parametrize("crash_at", ["cleaner-swap-renamed", "cleaner-old-renamed:2"])
def test_a_broker_killed_mid_swap_restarts_with_the_clean_finished(tmp_path, crash_at):
    from broker_process import BrokerProcess, free_port
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    # Written with the cleaner off, then a start with it on and the power cut armed: the first swap kills it.
    broker = BrokerProcess("127.0.0.1", free_port(), data_dir, ("log.cleaner.enable=false",)).start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1, config=TOPIC_CONFIG)], operation_timeout=TIMEOUT)[TOPIC].result(TIMEOUT)
    written = _produce(broker.bootstrap)
    broker.stop()
    broker.overrides = ("log.cleaner.backoff.ms=50",)
    broker.launcher = (str(Path(__file__).with_name("crashing_broker.py")), crash_at)
    broker.start()
    broker.wait_killed(TIMEOUT)
    broker.launcher = ()
    # The cleaner off again: what is checked is recovery's work. A cleaner that ran a pass of its own after
    # the restart would leave its own `.deleted` files waiting out file.delete.delay.ms (a loaded CI machine
    # caught one).
    broker.overrides = ("log.cleaner.enable=false",)
    broker.start()
    try:
        partition = data_dir / f"{TOPIC}-0"
        assert not [n for n in partition.iterdir() if n.suffix in (".cleaned", ".swap", ".deleted")]
        got = _consume(broker.bootstrap, "after-crash")
        offsets = [m.offset() for m in got]
        assert offsets == sorted(set(offsets)) and offsets[-1] == max(written)
        for m in got:
            assert written[m.offset()] == (m.key(), m.value())
        # The crash came after the swap was decided: recovery finished it.
        assert len(got) < len(written)
        latest = {}
        for offset in sorted(written):
            latest[written[offset][0]] = written[offset][1]
        seen = {}
        for m in got:
            seen[m.key()] = m.value()
        assert seen == latest
    finally:
        broker.stop()
