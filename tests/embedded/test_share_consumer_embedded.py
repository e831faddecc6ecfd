"""The embedded ShareConsumer: issue 28's share-group scenarios in-process, over the node's own coordinators.

Several members share one partition and each record is accepted once;
released records come back with a higher delivery count, rejected ones never,
and one released at every delivery is archived at the delivery limit; a member
closed without acknowledging gives its records back at once, one that vanishes
gives them back when their locks expire; read_committed groups never see
aborted records or records past the last stable offset.
"""
from __future__ import annotations

import time
from collections import Counter

import pytest

from logstore.broker import embedded
from logstore.broker.embedded import AckType, IllegalStateError, ShareConsumer

DEADLINE_S = 30
TOPIC = "jobs"


@pytest.fixture
def open_node(tmp_path):
    """`open_node(**settings)`: an embedded node with those broker settings (dots as underscores)."""
    opened = []

    def open_(**settings):
        node = embedded.open(str(tmp_path / "data"), {"group.initial.rebalance.delay.ms": 0,
                                                      **{k.replace("_", "."): v for k, v in settings.items()}})
        opened.append(node)
        return node
    yield open_
    for node in opened:
        node.close()


def members(node, group: str, count: int, *, explicit: bool = False) -> list[ShareConsumer]:
    """`count` subscribed members whose share state of TOPIC-0 exists (at the log end, where the group starts
    by default: the tests write their records after this)."""
    consumers = [ShareConsumer(node, {"group.id": group,
                                      "share.acknowledgement.mode": "explicit" if explicit else "implicit"})
                 for _ in range(count)]
    for consumer in consumers:
        consumer.subscribe([TOPIC])
    deadline = time.monotonic() + DEADLINE_S
    while node.share.partitions.state(group, TOPIC, 0) is None or not all(c.assignment() for c in consumers):
        assert time.monotonic() < deadline, "the members never joined"
        for consumer in consumers:
            assert consumer.poll(0.01) == []
    return consumers


def produce(node, values, **config) -> None:
    producer = embedded.Producer(node, config)
    for value in values:
        producer.send(TOPIC, value, partition=0)
    producer.flush()


def start_offset(node, group: str) -> int:
    state = node.share.partitions.state(group, TOPIC, 0)
    assert state is not None
    return state.start_offset


def test_members_share_a_partition_and_each_record_is_accepted_once(open_node):
    """Three implicit-mode members, one partition, 3,000 records: every offset handed out exactly once."""
    node = open_node()
    node.store.create_topic(TOPIC, 1)
    consumers = members(node, "queue", 3)
    total = 3_000
    produce(node, (b"%d" % i for i in range(total)))
    seen: list[Counter[int]] = [Counter() for _ in consumers]
    deadline = time.monotonic() + DEADLINE_S
    while sum(sum(c.values()) for c in seen) < total:
        assert time.monotonic() < deadline, "the records were not all delivered"
        for consumer, offsets in zip(consumers, seen, strict=True):
            for record in consumer.poll(0.01):
                assert record.delivery_count == 1 and record.value == b"%d" % record.offset
                offsets[record.offset] += 1
    everything = sum(seen, Counter())
    assert set(everything) == set(range(total)) and max(everything.values()) == 1
    for consumer in consumers:
        assert all(error is None for error in consumer.commit_sync().values())
        consumer.close()
    assert start_offset(node, "queue") == total


def test_release_reject_and_the_delivery_limit(open_node):
    """Released records come back with a higher count, rejected never; one released at every delivery is
    archived after `group.share.delivery.count.limit` deliveries, and the start offset passes all of them."""
    node = open_node(group_share_delivery_count_limit=3, group_share_min_delivery_count_limit=2)
    node.store.create_topic(TOPIC, 1)
    (consumer,) = members(node, "explicit", 1, explicit=True)
    kinds = ["accept", "again", "reject", "poison"] * 10
    produce(node, (f"{kind}-{i}".encode() for i, kind in enumerate(kinds)))
    deliveries: dict[int, list[int]] = {}
    deadline = time.monotonic() + DEADLINE_S
    while start_offset(node, "explicit") < len(kinds):
        assert time.monotonic() < deadline, "the records were not all settled"
        for record in consumer.poll(0.05):
            deliveries.setdefault(record.offset, []).append(record.delivery_count)
            kind = kinds[record.offset]
            if kind == "accept" or (kind == "again" and record.delivery_count > 1):
                consumer.acknowledge(record, AckType.ACCEPT)
            elif kind == "reject":
                consumer.acknowledge(record, AckType.REJECT)
            else:
                consumer.acknowledge(record, AckType.RELEASE)
        assert all(error is None for error in consumer.commit_sync().values())
    expected = {"accept": [1], "again": [1, 2], "reject": [1], "poison": [1, 2, 3]}
    assert deliveries == {offset: expected[kind] for offset, kind in enumerate(kinds)}
    consumer.close()


def test_a_member_closed_without_acknowledging_gives_its_records_back(open_node):
    """Explicit mode, nothing acknowledged: close releases the records at once, to another member, with their
    delivery count taken back (the application never processed them, as Kafka assumes of a leaving member)."""
    node = open_node()
    node.store.create_topic(TOPIC, 1)
    first, second = members(node, "handover", 2, explicit=True)
    produce(node, (b"%d" % i for i in range(20)))
    taken: list[int] = []
    deadline = time.monotonic() + DEADLINE_S
    while not taken:
        assert time.monotonic() < deadline, "the first member got nothing"
        taken = [r.offset for r in first.poll(0.05)]
    first.close()
    again: dict[int, int] = {}
    while len(again) < 20:
        assert time.monotonic() < deadline, "the released records did not come back"
        for record in second.poll(0.05):
            again[record.offset] = record.delivery_count
            second.acknowledge(record)
    assert set(taken) <= set(again) and set(again.values()) == {1}
    assert all(error is None for error in second.commit_sync().values())
    second.close()


def test_a_vanished_member_gives_its_records_back_when_the_locks_expire(open_node):
    """A member that stops (never closed, as if its process died) holds its records until their locks expire."""
    node = open_node(group_share_record_lock_duration_ms=1000, group_share_min_record_lock_duration_ms=1000)
    node.store.create_topic(TOPIC, 1)
    gone, survivor = members(node, "vanishing", 2, explicit=True)
    produce(node, (b"%d" % i for i in range(10)))
    deadline = time.monotonic() + DEADLINE_S
    held: list[int] = []
    while not held:
        assert time.monotonic() < deadline, "the member got nothing"
        held = [r.offset for r in gone.poll(0.05)]
    locked_until = time.monotonic() + 1.0
    redelivered: dict[int, int] = {}
    while not set(held) <= set(redelivered):
        assert time.monotonic() < deadline, "the locked records never came back"
        for record in survivor.poll(0.1):
            redelivered[record.offset] = record.delivery_count
            survivor.acknowledge(record)
        survivor.commit_sync()
    assert time.monotonic() >= locked_until - 0.1, "records came back before their locks expired"
    assert {o: redelivered[o] for o in held} == dict.fromkeys(held, 2)
    survivor.close()


def test_a_member_that_stops_polling_leaves_and_its_records_go_to_the_others(open_node):
    """Past max.poll.interval.ms without a poll the member leaves the group (Kafka's consumer does): what it
    held is released at once, its delivery counts taken back, long before the 30 s locks would expire."""
    node = open_node()
    node.store.create_topic(TOPIC, 1)
    (survivor,) = members(node, "stalled", 1, explicit=True)
    stalled = ShareConsumer(node, {"group.id": "stalled", "share.acknowledgement.mode": "explicit",
                                   "max.poll.interval.ms": 300})
    stalled.subscribe([TOPIC])
    produce(node, (b"%d" % i for i in range(10)))
    deadline = time.monotonic() + DEADLINE_S
    held: list[int] = []
    while not held:
        assert time.monotonic() < deadline, "the stalling member got nothing"
        held = [r.offset for r in stalled.poll(0.05)]
    redelivered: dict[int, int] = {}
    while not set(held) <= set(redelivered):
        assert time.monotonic() < deadline, "the stalled member's records never came back"
        for record in survivor.poll(0.1):
            redelivered[record.offset] = record.delivery_count
            survivor.acknowledge(record)
        survivor.commit_sync()
    assert {redelivered[o] for o in held} == {1}
    assert stalled.assignment() == []
    survivor.close()
    stalled.close()


def test_read_committed_groups_see_only_committed_records(open_node):
    """Aborted records are never delivered, nor records past the last stable offset (an open transaction)."""
    node = open_node()
    node.store.create_topic(TOPIC, 1)
    node.group_configs.alter("committed", lambda configs: {**configs, "share.isolation.level": "read_committed"})
    (consumer,) = members(node, "committed", 1)
    producer = embedded.Producer(node, {"transactional.id": "writer"})
    producer.init_transactions()
    for values, commit in (([b"aborted-1", b"aborted-2"], False), ([b"kept-1", b"kept-2"], True)):
        producer.begin_transaction()
        for value in values:
            producer.send(TOPIC, value, partition=0)
        producer.commit_transaction() if commit else producer.abort_transaction()
    producer.begin_transaction()
    producer.send(TOPIC, b"open", partition=0)
    producer.flush()
    got: list[bytes] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(got) < 2:
        assert time.monotonic() < deadline, "the committed records never came"
        got += [r.value for r in consumer.poll(0.05)]
    assert got == [b"kept-1", b"kept-2"]
    assert consumer.poll(0.2) == []
    producer.commit_transaction()
    while len(got) < 3:
        assert time.monotonic() < deadline, "the record committed last never came"
        got += [r.value for r in consumer.poll(0.05)]
    assert got == [b"kept-1", b"kept-2", b"open"]
    consumer.close()


def test_a_share_session_the_broker_lost_is_opened_again(open_node):
    """The broker dropped the member's share session (as it does when the member is removed): the
    acknowledgements the member still may make go in a new session, and close still works."""
    node = open_node()
    node.store.create_topic(TOPIC, 1)
    (consumer,) = members(node, "lost", 1)
    produce(node, [b"a", b"b", b"c"])
    deadline = time.monotonic() + DEADLINE_S
    seen = 0
    while seen < 3:   # implicit mode: the last poll's records are still to be accepted
        assert time.monotonic() < deadline
        seen += len(consumer.poll(0.05))
    node.share.sessions.remove_group("lost")
    assert consumer.commit_sync() == {(TOPIC, 0): None}
    assert start_offset(node, "lost") == 3
    node.share.sessions.remove_group("lost")
    consumer.close()
    assert len(node.share.sessions) == 0


def test_acknowledgement_rules_are_confluents(open_node):
    """Explicit mode refuses a poll with records unacknowledged; implicit mode refuses acknowledge(); the
    callback hears what commit_async left to the next poll."""
    node = open_node()
    node.store.create_topic(TOPIC, 1)
    (explicit,) = members(node, "rules", 1, explicit=True)
    with pytest.raises(IllegalStateError):
        ShareConsumer(node, {"group.id": "rules"}).poll(0)
    produce(node, [b"a", b"b"])
    deadline = time.monotonic() + DEADLINE_S
    records = []
    while len(records) < 2:
        assert time.monotonic() < deadline
        records += explicit.poll(0.05)
    with pytest.raises(IllegalStateError):
        explicit.poll(0)
    heard: list[tuple[dict, object]] = []
    explicit.set_acknowledgement_commit_callback(lambda offsets, error: heard.append((offsets, error)))
    for record in records:
        explicit.acknowledge(record, AckType.ACCEPT)
    with pytest.raises(IllegalStateError):
        explicit.acknowledge(records[0], AckType.ACCEPT)
    explicit.commit_async()
    assert heard == []
    explicit.poll(0)
    assert heard == [({(TOPIC, 0): [0, 1]}, None)]
    assert start_offset(node, "rules") == 2
    explicit.close()
    implicit = ShareConsumer(node, {"group.id": "rules"})
    with pytest.raises(IllegalStateError):
        implicit.acknowledge_offset(TOPIC, 0, 0)
    implicit.close()
    with pytest.raises(IllegalStateError):
        implicit.poll(0)
