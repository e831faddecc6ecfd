"""Online migration of a running group between the classic and consumer protocols (KIP-848) with real clients.

Classic consumers (confluent-kafka and kafka-python, each a subprocess driven
through group_helpers) form a group; a confluent-kafka consumer with
`group.protocol=consumer` (a thread of the test) then joins it. The broker
upgrades the group in place: one consumer group whose classic members go on
speaking the classic protocol, every partition held exactly once, the
committed offsets kept. When the new-protocol member leaves, the group is a
classic group again and the classic members share every partition. With
`group.consumer.migration.policy=disabled` the join is refused as before.
Every wait is for an event the members report, under a deadline.
"""
from __future__ import annotations

import threading

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, ConsumerGroupType, TopicPartition
from confluent_kafka.admin import AdminClient
from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest

from group_helpers import CHANGED, TIMEOUT, MemberConfig, Members, end_offsets, produce, wait_for, wait_for_split
from logstore.broker.admin_client import AdminClient as WireClient
from txn_helpers import create_topic

PARTITIONS = 6
BROKER = ("group.initial.rebalance.delay.ms=0", "group.min.session.timeout.ms=500",
          "group.consumer.min.heartbeat.interval.ms=100", "group.consumer.heartbeat.interval.ms=200",
          "group.consumer.min.session.timeout.ms=1000", "group.consumer.session.timeout.ms=2000")


class ModernConsumer:
    """A `group.protocol=consumer` confluent-kafka consumer polled by a thread of its own; it commits what it
    consumed after every poll and reports (under CHANGED) what it owns, consumed and committed."""

    def __init__(self, bootstrap: str, group: str, topic: str):
        self.name, self.topic = "modern", topic
        self.owned: set[int] = set()
        self.records: list[tuple[int, int]] = []          # (partition, offset)
        self.committed: dict[int, int] = {}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                                   "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                   "fetch.wait.max.ms": 50, "error_cb": self._error})
        self._consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked,
                                 on_lost=self._revoked)
        self._thread = threading.Thread(target=self._run, name="modern-consumer", daemon=True)
        self._thread.start()

    def _error(self, err) -> None:
        with CHANGED:
            self.errors.append(str(err))
            CHANGED.notify_all()

    def _assigned(self, consumer, partitions) -> None:
        with CHANGED:
            self.owned |= {tp.partition for tp in partitions}
            CHANGED.notify_all()

    def _revoked(self, consumer, partitions) -> None:
        with CHANGED:
            self.owned -= {tp.partition for tp in partitions}
            CHANGED.notify_all()

    def _run(self) -> None:
        while not self._stop.is_set():
            batch = []
            for m in self._consumer.consume(500, 0.05):
                if m.error() is None:
                    batch.append((m.partition(), m.offset()))
                else:
                    self._error(m.error())
            if not batch:
                continue
            positions: dict[int, int] = {}
            for p, o in batch:
                positions[p] = o + 1
            done = self._consumer.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in positions.items()],
                                         asynchronous=False)
            with CHANGED:
                self.records.extend(batch)
                self.committed.update({tp.partition: tp.offset for tp in done if tp.error is None})
                CHANGED.notify_all()
        self._consumer.close()   # a leave with epoch -1

    def close(self) -> None:
        """Stop polling and close the consumer (it leaves the group)."""
        self._stop.set()
        self._thread.join(TIMEOUT)
        assert not self._thread.is_alive(), "the modern consumer did not close"

    def describe(self) -> str:
        return (f"modern: owns {sorted(self.owned)}, {len(self.records)} records, committed {self.committed}, "
                f"errors {self.errors[-3:]}")


@pytest.fixture
def members(tmp_path):
    started = Members(tmp_path)
    yield started
    started.stop_all()


def group_type(admin: AdminClient, group: str) -> ConsumerGroupType:
    listed = {g.group_id: g for g in admin.list_consumer_groups().result(TIMEOUT).valid}
    return listed[group].type


def described_classic(bootstrap: str, group: str):
    """DescribeGroups (the classic API) as the broker answers it."""
    with WireClient(bootstrap) as wire:
        return wire.request(DescribeGroupsRequest(groups=(group,), include_authorized_operations=False)).groups[0]


def wait_until_committed(who: list, ends: dict[int, int]) -> None:
    """Until the members' latest commits, together, reach `ends` in every partition."""
    def done():
        committed: dict[int, int] = {}
        for m in who:
            for p, o in m.committed.items():
                committed[p] = max(committed.get(p, 0), o)
        return all(committed.get(p, 0) >= o for p, o in ends.items())
    wait_for(done, f"commits up to {ends}", who)


@pytest.mark.parametrize("client, assignor", [("confluent", "cooperative-sticky"), ("confluent", "range"),
                                              ("kafka-python", "range")])
def test_a_consumer_protocol_member_joins_a_classic_group_online_and_its_leaving_makes_it_classic_again(
        start_broker, members, client, assignor):
    broker = start_broker(*BROKER)
    topic = group = f"migrate-{client}-{assignor}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    first = end_offsets(produce(broker.bootstrap, topic, PARTITIONS, 60))
    classic = [members.start(MemberConfig(client, broker.bootstrap, group, topic, assignor=assignor,
                                          session_timeout_ms=3_000, heartbeat_interval_ms=200))
               for _ in range(2)]
    wait_for_split(classic, PARTITIONS)
    wait_until_committed(classic, first)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert group_type(admin, group) == ConsumerGroupType.CLASSIC

    modern = ModernConsumer(broker.bootstrap, group, topic)
    everyone = [*classic, modern]

    def held_once_each_two():
        held = [set(m.assignment or ()) for m in classic] + [modern.owned]
        return sorted(map(len, held)) == [2, 2, 2] and set().union(*held) == set(range(PARTITIONS))
    wait_for(held_once_each_two, "the three members to hold two partitions each", everyone)
    assert group_type(admin, group) == ConsumerGroupType.CONSUMER
    with WireClient(broker.bootstrap) as wire:
        described = wire.request(ConsumerGroupDescribeRequest(group_ids=(group,),
                                                              include_authorized_operations=False)).groups[0]
    assert sorted(m.member_type for m in described.members) == [0, 0, 1], "two classic members, one consumer"

    # Everything committed before the upgrade stays committed: the new member starts where the classic
    # members stopped, and all three consume and commit what comes next.
    second = end_offsets(produce(broker.bootstrap, topic, PARTITIONS, 60, first=60))
    wait_until_committed(everyone, second)
    with CHANGED:
        assert modern.records and all(o >= first[p] for p, o in modern.records), modern.describe()
        assert not modern.errors, modern.describe()

    modern.close()
    wait_for_split(classic, PARTITIONS)
    assert group_type(admin, group) == ConsumerGroupType.CLASSIC
    classic_view = described_classic(broker.bootstrap, group)
    assert (classic_view.group_state, classic_view.protocol_type, len(classic_view.members)) == (
        "Stable", "consumer", 2)
    third = end_offsets(produce(broker.bootstrap, topic, PARTITIONS, 60, first=120))
    wait_until_committed(classic, third)
    described = admin.describe_consumer_groups([group])[group].result(TIMEOUT)
    assert (described.type, described.state) == (ConsumerGroupType.CLASSIC, ConsumerGroupState.STABLE)
    for m in classic:
        m.close()


def test_with_migration_disabled_a_consumer_protocol_member_is_refused_by_a_classic_group(start_broker, members):
    broker = start_broker(*BROKER, "group.consumer.migration.policy=disabled")
    topic = group = "migrate-disabled"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    classic = [members.start(MemberConfig("confluent", broker.bootstrap, group, topic, assignor="range",
                                          session_timeout_ms=3_000, heartbeat_interval_ms=200))
               for _ in range(2)]
    wait_for_split(classic, PARTITIONS)
    modern = ModernConsumer(broker.bootstrap, group, topic)
    try:
        # GROUP_ID_NOT_FOUND, which librdkafka takes as fatal for the consumer protocol.
        wait_for(lambda: any("The group id does not exist" in e for e in modern.errors),
                 "the new-protocol member to be refused", [*classic, modern])
        with CHANGED:
            assert not modern.owned
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert group_type(admin, group) == ConsumerGroupType.CLASSIC
        assert sorted(len(m.assignment) for m in classic) == [3, 3]
    finally:
        modern.close()
