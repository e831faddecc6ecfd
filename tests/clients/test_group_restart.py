"""A broker restarted under a stable group: the group comes back as it was, members and generation.

Kafka loads a group with its members from `__consumer_offsets` and starts
their sessions afresh, so consumers that keep heartbeating go on in the same
generation without a rebalance, and one that died meanwhile is removed after
its session timeout. Both are checked with confluent-kafka consumers across
a SIGKILL and a clean stop of the broker.
"""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

TOPIC = "restart"
PARTITIONS = 4
SESSION_MS = 3_000
DEADLINE = 60.0  # s: a bound on any wait


class Member:
    """A consumer polled by the test, counting the assignments it got."""

    def __init__(self, bootstrap: str, group: str):
        self.assigns = 0
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 200,
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        self.consumer.subscribe([TOPIC], on_assign=self._assigned)

    def _assigned(self, consumer, partitions):
        self.assigns += 1

    def partitions(self) -> set[int]:
        """The partitions the consumer holds now."""
        return {tp.partition for tp in self.consumer.assignment()}


def create_topic(broker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # held while its future is pending
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result()


def poll_until(members: list[Member], condition, what: str) -> None:
    """Poll every member until `condition()` holds."""
    deadline = time.monotonic() + DEADLINE
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {DEADLINE} s: {what}; "
                                 f"held {[sorted(m.partitions()) for m in members]}")
        for m in members:
            m.consumer.poll(0.05)


def split(members: list[Member]) -> bool:
    held = [m.partitions() for m in members]
    return all(held) and sum(map(len, held)) == PARTITIONS and set().union(*held) == set(range(PARTITIONS))


def commit(member: Member, offset: int) -> None:
    """A synchronous commit of `offset` on every partition the member holds (checks its generation)."""
    deadline = time.monotonic() + DEADLINE
    offsets = [TopicPartition(TOPIC, p, offset) for p in sorted(member.partitions())]
    while True:
        try:
            member.consumer.commit(offsets=offsets, asynchronous=False)
            return
        except KafkaException as exc:
            # The coordinator restarting: the client looks it up again and the commit is retried
            # (librdkafka answers _WAIT_COORD, not flagged retriable, while that lookup is under way).
            error = exc.args[0]
            if not (error.retriable() or error.code() == KafkaError._WAIT_COORD) or time.monotonic() > deadline:
                raise


@pytest.mark.parametrize("stop", ["kill", "stop"])
def test_a_stable_group_goes_on_in_its_generation_after_a_restart(start_broker, stop):
    broker = start_broker("group.initial.rebalance.delay.ms=0", "group.min.session.timeout.ms=1000")
    create_topic(broker)
    members = [Member(broker.bootstrap, f"restart-{stop}") for _ in range(2)]
    try:
        poll_until(members, lambda: split(members), "two members share the partitions")
        before = [m.partitions() for m in members]
        assigns = [m.assigns for m in members]
        getattr(broker, stop)()
        broker.start()
        for offset, member in enumerate(members, start=1):
            commit(member, offset * 10)
        # Heartbeats over several session timeouts: no member was dropped, nothing was reassigned.
        settle = time.monotonic() + 3 * SESSION_MS / 1000
        poll_until(members, lambda: time.monotonic() > settle, "sessions pass")
        assert [m.partitions() for m in members] == before
        assert [m.assigns for m in members] == assigns
        committed = members[0].consumer.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)],
                                                  timeout=DEADLINE)
        assert {tp.partition: tp.offset for tp in committed} == {
            p: 10 * (1 + i) for i, m in enumerate(before) for p in m}
    finally:
        for m in members:
            m.consumer.close()
    assert "removed: no heartbeat" not in broker.log_text()


def test_a_member_that_died_while_the_broker_was_down_is_removed_after_its_session(start_broker):
    broker = start_broker("group.initial.rebalance.delay.ms=0", "group.min.session.timeout.ms=1000")
    create_topic(broker)
    survivor, lost = Member(broker.bootstrap, "restart-died"), Member(broker.bootstrap, "restart-died")
    try:
        poll_until([survivor, lost], lambda: split([survivor, lost]), "two members share the partitions")
        broker.kill()
        # The lost member's process ends without leaving (its LeaveGroup cannot reach a dead broker).
        lost.consumer.close()
        broker.start()
        poll_until([survivor], lambda: survivor.partitions() == set(range(PARTITIONS)),
                   "the survivor takes every partition once the lost member's session expires")
    finally:
        survivor.consumer.close()
    assert "removed: no heartbeat" in broker.log_text()
