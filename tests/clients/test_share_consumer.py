"""Share groups (KIP-932) with confluent-kafka's ShareConsumer against a real broker process.

Every record is handed to one member at a time under a lock; accepted ones
never come back, released ones do (with a higher delivery count), rejected
ones never do, and a record released at every delivery is archived at
`share.delivery.count.limit`. Locks of a killed member expire; a killed
broker forgets nothing it acknowledged.
"""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from confluent_kafka import Consumer, Producer

from share_helpers import (
    TIMEOUT,
    AcknowledgeType,
    commit,
    consume_until,
    create_topic,
    finish,
    produce_values,
    set_group_configs,
    share_consumer,
    start_offsets,
)

HERE = Path(__file__).parent
# Fast locks for the tests that wait for one to expire (Kafka's floor for the minimum is 1 s).
FAST_LOCKS = ("group.share.min.record.lock.duration.ms=1000", "group.share.record.lock.duration.ms=2000")


def hold_and_die(bootstrap: str, group: str, topic: str) -> list[int]:
    """The offsets a member in its own process acquired and held when it was SIGKILLed."""
    member = subprocess.Popen([sys.executable, str(HERE / "share_member.py"), bootstrap, group, topic],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        return json.loads(member.stdout.readline())
    finally:
        member.kill()
        member.wait()


def test_four_consumers_share_one_partition(broker, topic):
    """20,000 records, 4 implicit-mode consumers on one partition: each record accepted exactly once."""
    create_topic(broker.bootstrap, topic)
    set_group_configs(broker.bootstrap, "four", share_auto_offset_reset="earliest")
    total = 20_000
    produce_values(broker.bootstrap, topic, (b"%d" % i for i in range(total)))
    seen: list[list[int]] = [[] for _ in range(4)]
    lock = threading.Lock()
    count = [0]
    errors: list[BaseException] = []

    def member(index: int) -> None:
        consumer = share_consumer(broker.bootstrap, "four", topic)
        try:
            def take(message):
                seen[index].append(message.offset())
                with lock:
                    count[0] += 1
            consume_until(consumer, lambda: count[0] >= total, take)
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)
        finally:
            finish(consumer)

    threads = [threading.Thread(target=member, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    everything = Counter(offset for offsets in seen for offset in offsets)
    assert set(everything) == set(range(total))
    # How the records spread over the four depends on which fetch comes first (one fast member may take
    # them all); that each went to exactly one member does not.
    assert [o for o, n in everything.items() if n > 1] == []


def test_release_reject_and_delivery_limit(start_broker, topic):
    """Released records come back with a higher count; rejected never; always-released archived at the limit."""
    broker = start_broker("group.share.delivery.count.limit=3", "group.share.min.delivery.count.limit=2")
    create_topic(broker.bootstrap, topic)
    set_group_configs(broker.bootstrap, "explicit", share_auto_offset_reset="earliest")
    kinds = ["accept", "again", "reject", "poison"] * 10
    produce_values(broker.bootstrap, topic, (f"{kind}-{i}".encode() for i, kind in enumerate(kinds)))
    deliveries: dict[int, list[int]] = {}
    consumer = share_consumer(broker.bootstrap, "explicit", topic, explicit=True)

    def handle(message):
        kind = message.value().decode().split("-")[0]
        deliveries.setdefault(message.offset(), []).append(message.delivery_count())
        if kind in ("accept", "sentinel") or (kind == "again" and message.delivery_count() > 1):
            consumer.acknowledge(message, AcknowledgeType.ACCEPT)
        elif kind == "reject":
            consumer.acknowledge(message, AcknowledgeType.REJECT)
        else:
            consumer.acknowledge(message, AcknowledgeType.RELEASE)

    def settled() -> bool:
        wanted = {"accept": 1, "again": 2, "reject": 1, "poison": 3}
        return commit(consumer) and all(len(deliveries.get(o, ())) == wanted[kind] for o, kind in enumerate(kinds))

    try:
        consume_until(consumer, settled, handle)
        # A sentinel after them all: anything still deliverable would come back before it.
        produce_values(broker.bootstrap, topic, [b"sentinel-0"])
        sentinel = len(kinds)
        consume_until(consumer, lambda: commit(consumer) and sentinel in deliveries, handle)
    finally:
        finish(consumer)
    for offset, kind in enumerate(kinds):
        want = {"accept": [1], "again": [1, 2], "reject": [1], "poison": [1, 2, 3]}[kind]
        assert deliveries[offset] == want, (offset, kind, deliveries[offset])


def test_killed_member_locks_expire(start_broker, topic):
    """A member SIGKILLed while it holds records: they go to another member after the lock, none lost."""
    broker = start_broker(*FAST_LOCKS)
    create_topic(broker.bootstrap, topic)
    set_group_configs(broker.bootstrap, "killed", share_auto_offset_reset="earliest")
    total = 500
    produce_values(broker.bootstrap, topic, (b"%d" % i for i in range(total)))
    held = hold_and_die(broker.bootstrap, "killed", topic)
    assert held
    delivered: dict[int, int] = {}
    consumer = share_consumer(broker.bootstrap, "killed", topic)
    try:
        consume_until(consumer, lambda: len(delivered) >= total,
                      lambda m: delivered.setdefault(m.offset(), m.delivery_count()))
    finally:
        finish(consumer)
    assert set(delivered) == set(range(total))
    assert all(delivered[o] >= 2 for o in held), {o: delivered[o] for o in held if delivered[o] < 2}


def test_expired_member_releases_what_it_holds(start_broker, topic):
    """A member SIGKILLed and expired by its session: what it held goes to another member at once, long
    before the locks would run out (locks here outlast the test)."""
    broker = start_broker("group.share.min.session.timeout.ms=2000", "group.share.session.timeout.ms=2000",
                          "group.share.min.heartbeat.interval.ms=500", "group.share.heartbeat.interval.ms=500",
                          "group.share.max.record.lock.duration.ms=3600000",
                          "group.share.record.lock.duration.ms=3600000")
    create_topic(broker.bootstrap, topic)
    set_group_configs(broker.bootstrap, "expired", share_auto_offset_reset="earliest")
    total = 200
    produce_values(broker.bootstrap, topic, (b"%d" % i for i in range(total)))
    held = hold_and_die(broker.bootstrap, "expired", topic)
    delivered: dict[int, int] = {}
    consumer = share_consumer(broker.bootstrap, "expired", topic)
    try:
        consume_until(consumer, lambda: len(delivered) >= total,
                      lambda m: delivered.setdefault(m.offset(), m.delivery_count()))
    finally:
        finish(consumer)
    assert set(delivered) == set(range(total))
    # Released because its holder left, not because a lock ran out: Kafka lowers the count back (the
    # application never acknowledged having seen them).
    assert {delivered[o] for o in held} == {1}


def test_broker_killed_mid_stream(start_broker, topic):
    """SIGKILL the broker: accepted records never return, held ones do, the start offset never goes back."""
    broker = start_broker()
    create_topic(broker.bootstrap, topic)
    set_group_configs(broker.bootstrap, "crash", share_auto_offset_reset="earliest")
    total = 2_000
    # The first 300 are all accepted before the rest exist, so some are left to hold when the broker dies.
    produce_values(broker.bootstrap, topic, (b"%d" % i for i in range(300)))
    accepted: set[int] = set()
    held: set[int] = set()
    consumer = share_consumer(broker.bootstrap, "crash", topic, explicit=True)

    def accept(message):
        consumer.acknowledge(message, AcknowledgeType.ACCEPT)
        accepted.add(message.offset())

    consume_until(consumer, lambda: commit(consumer) and len(accepted) >= 300, accept)
    produce_values(broker.bootstrap, topic, (b"%d" % i for i in range(300, total)))
    consume_until(consumer, lambda: bool(held), lambda m: held.add(m.offset()))
    (before,) = start_offsets(broker.bootstrap, "crash").values()
    assert before[0] >= 300
    broker.kill()
    broker.start()
    (after,) = start_offsets(broker.bootstrap, "crash").values()
    assert after[0] >= before[0]
    consumer.close()
    delivered: dict[int, int] = {}
    again = share_consumer(broker.bootstrap, "crash", topic)
    try:
        consume_until(again, lambda: len(delivered) >= total - len(accepted),
                      lambda m: delivered.setdefault(m.offset(), m.delivery_count()))
    finally:
        finish(again)
    assert accepted.isdisjoint(delivered), sorted(accepted & set(delivered))[:10]
    assert set(delivered) | accepted == set(range(total))
    assert held <= set(delivered)
    assert start_offsets(broker.bootstrap, "crash") == {(topic, 0): (total, 0)}


def test_read_committed_share_group(broker, topic):
    """A read_committed share group sees committed records only, and none past the last stable offset."""
    create_topic(broker.bootstrap, topic)
    set_group_configs(broker.bootstrap, "committed", share_auto_offset_reset="earliest",
                      share_isolation_level="read_committed")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"{topic}-txn"})
    producer.init_transactions(TIMEOUT)
    for outcome in ("commit", "abort", "open"):
        producer.begin_transaction()
        for i in range(50):
            producer.produce(topic, value=f"{outcome}-{i}".encode())
        producer.flush(TIMEOUT)
        if outcome == "commit":
            producer.commit_transaction(TIMEOUT)
        elif outcome == "abort":
            producer.abort_transaction(TIMEOUT)
    values: list[str] = []
    consumer = share_consumer(broker.bootstrap, "committed", topic)
    try:
        consume_until(consumer, lambda: len(values) >= 50, lambda m: values.append(m.value().decode()))
        producer.commit_transaction(TIMEOUT)
        consume_until(consumer, lambda: len(values) >= 100, lambda m: values.append(m.value().decode()))
    finally:
        finish(consumer)
    assert values == [f"commit-{i}" for i in range(50)] + [f"open-{i}" for i in range(50)]


def test_classic_and_share_groups_read_independently(broker, topic):
    """A classic consumer group and a share group on the same topic each read every record."""
    create_topic(broker.bootstrap, topic, partitions=2)
    set_group_configs(broker.bootstrap, "side-share", share_auto_offset_reset="earliest")
    produce_values(broker.bootstrap, topic, (b"%d" % i for i in range(400)))
    by_classic: set[bytes] = set()
    by_share: set[bytes] = set()
    errors: list[BaseException] = []

    def classic_reader() -> None:
        classic = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "side-classic",
                            "auto.offset.reset": "earliest"})
        classic.subscribe([topic])
        try:
            deadline = time.monotonic() + TIMEOUT
            while len(by_classic) < 400:
                assert time.monotonic() < deadline, len(by_classic)
                by_classic.update(m.value() for m in classic.consume(500, 0.5) if m.error() is None)
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)
        finally:
            classic.close()

    reader = threading.Thread(target=classic_reader)
    reader.start()
    share = share_consumer(broker.bootstrap, "side-share", topic)
    try:
        consume_until(share, lambda: len(by_share) >= 400, lambda m: by_share.add(m.value()))
    finally:
        finish(share)
        reader.join()
    assert not errors, errors
    assert by_classic == by_share == {b"%d" % i for i in range(400)}
