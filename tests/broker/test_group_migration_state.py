"""Online migration between the classic and consumer protocols (KIP-848), on the coordinator with a real store.

Classic members here behave as a cooperative classic consumer does: they say
what they own in their JoinGroup subscription, keep only what SyncGroup gives
them, and rejoin when a Heartbeat answers REBALANCE_IN_PROGRESS. Consumer
members heartbeat with what they own. After every settling round no partition
is held by two members, and once quiet every partition is held exactly once.
"""
from __future__ import annotations

import pytest

from logstore.broker.coordinator.consumer_group import (
    ClassicMetadata,
    ConsumerGroup,
    ConsumerGroupConfig,
    ConsumerMember,
)
from logstore.broker.coordinator.consumer_group_log import ConsumerGroupLoader, decode_key, records_between
from logstore.broker.coordinator.consumer_protocol import (
    Assignment,
    Subscription,
    decode_assignment,
    encode_assignment,
    encode_subscription,
)
from logstore.broker.coordinator.group import GroupConfig
from logstore.broker.coordinator.group_log import GroupKey
from logstore.broker.coordinator.group_log import decode_key as decode_classic_key
from logstore.broker.coordinator.transaction import OFFSETS_TOPIC
from logstore.errors import (
    FencedInstanceIdError,
    GroupIdNotFoundError,
    IllegalGenerationError,
    InvalidConfigError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    UnsupportedVersionError,
)
from test_consumer_group_state import Clock
from test_consumer_group_state import Node as StateNode

ALL = frozenset(("t", p) for p in range(4))
SESSION_MS = 2_000      # consumer-protocol members
CLASSIC_SESSION_MS = 6_000
REBALANCE_MS = 5_000


class Node(StateNode):
    """A store and both coordinators as the broker wires them, under one migration policy."""

    def __init__(self, path, clock: Clock, policy: str, ids=None):
        super().__init__(path, clock, ids, min_session_timeout_ms=1_000, consumer=ConsumerGroupConfig(
            session_timeout_ms=SESSION_MS, heartbeat_interval_ms=200, migration_policy=policy))
        self.policy = policy

    def reopen(self) -> Node:
        self.store.close()
        node = Node(self.path, self.clock, self.policy, self.ids)
        node.txn.load()
        node.groups.load()
        return node

    def kind(self, group: str = "g") -> tuple[str, str]:
        return next((g.group_type, g.state) for g in self.groups.listed_groups() if g.group_id == group)

    def records(self, group: str = "g") -> list[tuple[str, bool]]:
        """The group's records in `__consumer_offsets`, in log order: (record kind, is a tombstone)."""
        partition = self.groups.partition_of(group)
        found = []
        for _, batch in self.store.log(OFFSETS_TOPIC, partition).iter_batches():
            for record in batch:
                key = decode_classic_key(record.key)
                if isinstance(key, GroupKey) and key.group == group:
                    found.append(("GroupMetadata", record.value is None))
                elif key is None:
                    consumer_key = decode_key(record.key)
                    if consumer_key is not None and consumer_key.group == group:
                        found.append((f"consumer{consumer_key.record_type}", record.value is None))
        return found


@pytest.fixture
def clock():
    return Clock()


def subscription(owned=frozenset(), version: int = 3) -> bytes:
    grouped: dict[str, list[int]] = {}
    for topic, p in sorted(owned):
        grouped.setdefault(topic, []).append(p)
    return encode_subscription(Subscription(("t",), None, tuple((t, tuple(ps)) for t, ps in grouped.items()),
                                            version=version))


def partitions(assignment: bytes) -> frozenset:
    return frozenset((topic, p) for topic, ps in decode_assignment(assignment).partitions for p in ps)


class Classic:
    """A cooperative classic consumer: rejoins naming what it owns, keeps what SyncGroup gives."""

    def __init__(self, node: Node, name: str, instance: str | None = None):
        self.node, self.name, self.instance = node, name, instance
        self.member_id, self.generation, self.owned = "", -1, frozenset()

    def join(self):
        return self.node.groups.join_group("g", self.member_id, self.instance, self.name, "/h", CLASSIC_SESSION_MS,
                                           REBALANCE_MS, "consumer",
                                           [("cooperative-sticky", subscription(self.owned))], False)

    def joined(self, result) -> None:
        self.member_id, self.generation = result.member_id, result.generation_id

    def sync(self, assignments=None) -> None:
        result = self.node.groups.sync_group("g", self.generation, self.member_id, self.instance, assignments or {},
                                             "consumer", None).result(1)
        self.owned = partitions(result.assignment)

    def rejoin(self) -> None:
        self.joined(self.join().result(1))
        self.sync()

    def heartbeat(self, rejoin: bool = True) -> bool:
        """A heartbeat; True when the member must rejoin (it does at once when `rejoin`, as in a consumer group
        where its JoinGroup is answered alone)."""
        try:
            self.node.groups.heartbeat("g", self.generation, self.member_id, self.instance)
            return False
        except (RebalanceInProgressError, IllegalGenerationError):
            if rejoin:
                self.rejoin()
            return True


class Modern:
    """A consumer-protocol member: heartbeats with what it owns, takes what the answer gives."""

    def __init__(self, node: Node, name: str):
        self.node, self.name, self.epoch, self.owned = node, name, 0, frozenset()

    def beat(self, epoch: int | None = None) -> None:
        epoch = self.epoch if epoch is None else epoch
        names = {self.node.store.topic_id(t): t for t in self.node.store.topics()}
        if epoch == 0:
            answer = self.node.groups.consumer_group_heartbeat(
                "g", self.name, 0, rebalance_timeout_ms=REBALANCE_MS, subscribed_topic_names=["t"], owned=())
        else:
            answer = self.node.groups.consumer_group_heartbeat(
                "g", self.name, epoch, owned=[(self.node.store.topic_id("t"), [p for _, p in sorted(self.owned)])])
        self.epoch = answer.member_epoch
        if answer.assignment is not None:
            self.owned = frozenset((names[topic_id], p) for topic_id, ps in answer.assignment for p in ps)


def form_classic_group(node: Node, names) -> list[Classic]:
    """Classic members in one generation, the leader assigning round robin; the group Stable."""
    members = [Classic(node, n) for n in names]
    first = members[0]
    first.joined(first.join().result(1))
    waiting = [(m, m.join()) for m in members[1:]]
    first.joined(first.join().result(1))
    for m, future in waiting:
        m.joined(future.result(1))
    ids = [m.member_id for m in members]
    plan = {m: encode_assignment(Assignment((("t", tuple(p for p in range(4) if p % len(ids) == i)),)))
            for i, m in enumerate(ids)}
    for m in members:   # the leader (the first) syncs first: the others are answered at once
        m.sync(plan)
    assert node.kind() == ("classic", "Stable")
    return members


def classic_rebalance(node: Node, members: list[Classic]) -> None:
    """Every member of a classic group rejoins, the leader assigns two partitions each, all sync."""
    futures = [(c, c.join()) for c in members]
    results = {}
    for c, future in futures:
        results[c.name] = future.result(1)
        c.joined(results[c.name])
    assert len({r.generation_id for r in results.values()}) == 1
    leader = next(c for c in members if results[c.name].members)
    plan = {c.member_id: encode_assignment(Assignment((("t", tuple(p for p in range(4) if p % len(members) == i)),)))
            for i, c in enumerate(members)}
    for c in sorted(members, key=lambda c: c is not leader):
        c.sync(plan)
    assert node.kind() == ("classic", "Stable")


def settle(classics, moderns, rounds: int = 6) -> None:
    """Everyone heartbeats and acts until quiet; no partition is ever held twice."""
    for _ in range(rounds):
        for m in moderns:
            m.beat()
            held_once(classics, moderns, complete=False)
        for c in classics:
            c.heartbeat()
            held_once(classics, moderns, complete=False)


def held_once(classics, moderns, complete: bool = True) -> None:
    owners = [p for m in [*classics, *moderns] for p in m.owned]
    assert len(owners) == len(set(owners)), {m.name: sorted(m.owned) for m in [*classics, *moderns]}
    if complete:
        assert set(owners) == ALL, {m.name: sorted(m.owned) for m in [*classics, *moderns]}


# -- upgrade ----------------------------------------------------------------------------------------------------

def test_a_consumer_heartbeat_upgrades_a_stable_classic_group_and_the_classic_members_stay(tmp_path, clock):
    node = Node(tmp_path, clock, "bidirectional")
    a, b = form_classic_group(node, ["a", "b"])
    generation = a.generation
    assert node.groups.commit_offsets("g", a.member_id, None, generation, {("t", 0): (5, -1, "")}) == {
        ("t", 0): None}
    m = Modern(node, "m")
    m.beat(0)
    assert node.kind()[0] == "consumer"
    described = node.groups.consumer_group_describe(["g"])[0]
    assert {d.member_id: d.classic for d in described.members} == {a.member_id: True, b.member_id: True, "m": False}
    assert described.group_epoch == generation + 1, "the join bumped the epoch taken from the generation"
    # Kafka's records: the classic record goes, the consumer group's come, then the heartbeat's.
    kinds = node.records()
    upgrade = kinds[kinds.index(("GroupMetadata", True)):]
    assert upgrade[:3] == [("GroupMetadata", True), ("consumer5", False), ("consumer5", False)]
    assert ("consumer3", False) in upgrade and ("consumer8", False) in upgrade
    # The classic members keep their partitions until they rejoin; the heartbeat tells them to.
    assert a.owned | b.owned == ALL and m.owned == frozenset()
    with pytest.raises(RebalanceInProgressError):
        node.groups.heartbeat("g", generation, a.member_id)
    settle([a, b], [m])
    held_once([a, b], [m])
    assert sorted(len(x.owned) for x in (a, b, m)) == [1, 1, 2]
    assert node.groups.consumer_group_describe(["g"])[0].state == "Stable"
    # Offsets committed before stay; a classic member commits with its generation (= its epoch), at any version.
    assert node.groups.fetch_offsets("g", [("t", 0)])[("t", 0)].offset == 5
    assert node.groups.commit_offsets("g", a.member_id, None, a.generation, {("t", 1): (9, -1, "")},
                                      api_version=8) == {("t", 1): None}
    with pytest.raises(IllegalGenerationError):
        node.groups.commit_offsets("g", a.member_id, None, a.generation - 1, {("t", 1): (9, -1, "")})
    with pytest.raises(UnsupportedVersionError):
        node.groups.commit_offsets("g", "m", None, m.epoch, {("t", 1): (9, -1, "")}, api_version=8)
    node.store.close()


def test_the_mixed_group_loads_back_with_its_classic_members(tmp_path, clock):
    node = Node(tmp_path, clock, "bidirectional")
    a, b = form_classic_group(node, ["a", "b"])
    m = Modern(node, "m")
    m.beat(0)
    settle([a, b], [m])
    before = node.groups.consumer_group_describe(["g"])[0]
    node = node.reopen()
    for c in (a, b):
        c.node = node
    m.node = node
    assert node.groups.consumer_group_describe(["g"])[0] == before
    # Still classic members, with the session timeout and protocols they joined with: they heartbeat on.
    loaded = node.groups._group_store.by_id["g"].consumer.members
    assert [(loaded[c.member_id].classic.session_timeout_ms, loaded[c.member_id].classic.protocol_name)
            for c in (a, b)] == [(CLASSIC_SESSION_MS, "cooperative-sticky")] * 2
    assert loaded["m"].classic is None
    assert not a.heartbeat() and not b.heartbeat()
    for _ in range(CLASSIC_SESSION_MS // 1_000 - 1):   # their own 6 s session counts, not the 2 s of m's
        node.advance(1_000)
        m.beat()
    assert not a.heartbeat() and not b.heartbeat()
    held_once([a, b], [m])
    node.store.close()


def test_a_classic_group_that_is_not_stable_or_policy_disabled_is_not_upgraded(tmp_path, clock):
    node = Node(tmp_path, clock, "disabled")
    a, b = form_classic_group(node, ["a", "b"])
    with pytest.raises(GroupIdNotFoundError, match="is not a consumer group"):
        Modern(node, "m").beat(0)
    node.store.close()

    node = Node(tmp_path / "rebalancing", clock, "bidirectional")
    a, b = form_classic_group(node, ["a", "b"])
    c = Classic(node, "c")
    pending = c.join()   # a third member: PreparingRebalance until a and b rejoin
    assert node.kind() == ("classic", "PreparingRebalance")
    with pytest.raises(GroupIdNotFoundError, match="is not a consumer group"):
        Modern(node, "m").beat(0)
    assert not pending.done()
    node.store.close()


# -- downgrade --------------------------------------------------------------------------------------------------

def test_the_last_consumer_member_leaving_downgrades_the_group_and_a_rebalance_follows(tmp_path, clock):
    node = Node(tmp_path, clock, "bidirectional")
    a, b = form_classic_group(node, ["a", "b"])
    m = Modern(node, "m")
    m.beat(0)
    settle([a, b], [m])
    epoch = node.groups.consumer_group_describe(["g"])[0].group_epoch
    m.beat(-1)
    assert node.kind() == ("classic", "PreparingRebalance")
    kinds = node.records()
    assert kinds[-1] == ("GroupMetadata", False) and ("consumer3", True) in kinds[-10:]
    described = node.groups.describe("g")
    assert {x.member_id for x in described.members} == {a.member_id, b.member_id}
    assert node.groups._group_store.by_id["g"].generation_id == epoch
    # The classic members rejoin the classic way: one generation, the leader assigns.
    assert a.heartbeat(rejoin=False) and b.heartbeat(rejoin=False)
    classic_rebalance(node, [a, b])
    assert a.generation == b.generation == epoch + 1
    held_once([a, b], [])
    node = node.reopen()
    assert node.kind() == ("classic", "Stable")
    assert {x.member_id for x in node.groups.describe("g").members} == {a.member_id, b.member_id}
    node.store.close()


def test_a_consumer_member_whose_session_expires_downgrades_the_group(tmp_path, clock):
    node = Node(tmp_path, clock, "bidirectional")
    a, b = form_classic_group(node, ["a", "b"])
    m = Modern(node, "m")
    m.beat(0)
    settle([a, b], [m])
    for _ in range(3):   # the classic members heartbeat on; m is silent past its 2 s session
        node.advance(1_000)
        if node.kind()[0] == "consumer":
            assert not a.heartbeat() and not b.heartbeat()
    assert node.kind() == ("classic", "PreparingRebalance")
    assert a.heartbeat(rejoin=False) and b.heartbeat(rejoin=False)
    classic_rebalance(node, [a, b])
    held_once([a, b], [])
    node.store.close()


@pytest.mark.parametrize("policy", ["upgrade", "downgrade", "disabled"])
def test_each_policy_allows_its_direction_only(tmp_path, clock, policy):
    node = Node(tmp_path, clock, policy)
    if policy == "upgrade":
        a, b = form_classic_group(node, ["a", "b"])
        m = Modern(node, "m")
        m.beat(0)
        settle([a, b], [m])
        m.beat(-1)
        assert node.kind()[0] == "consumer", "no downgrade under upgrade"
        settle([a, b], [])
        held_once([a, b], [])
        return node.store.close()
    # A consumer group first; a classic member then joins it (allowed unless disabled).
    m = Modern(node, "m")
    m.beat(0)
    a = Classic(node, "a")
    if policy == "disabled":
        with pytest.raises(GroupIdNotFoundError, match="is not a classic group"):
            a.join().result(1)
        return node.store.close()
    a.rejoin()
    settle([a], [m])
    held_once([a], [m])
    assert node.kind()[0] == "consumer"
    m.beat(-1)
    assert node.kind() == ("classic", "PreparingRebalance")
    node.store.close()
    other = Node(tmp_path / "other", clock, "downgrade")
    form_classic_group(other, ["a", "b"])
    with pytest.raises(GroupIdNotFoundError, match="is not a consumer group"):
        Modern(other, "m").beat(0)
    other.store.close()


# -- classic members inside a consumer group ----------------------------------------------------------------------

def test_classic_members_leave_expire_and_must_sync_in_time(tmp_path, clock):
    node = Node(tmp_path, clock, "bidirectional")
    a, b, c = form_classic_group(node, ["a", "b", "c"])
    m = Modern(node, "m")
    m.beat(0)
    settle([a, b, c], [m])
    assert node.groups.leave_group("g", [(a.member_id, None), ("nobody", None), ("m", None)])[0] is None
    results = node.groups.leave_group("g", [("nobody", None), ("m", None)])
    assert all(isinstance(r, UnknownMemberIdError) for r in results), "m speaks the consumer protocol"
    settle([b, c], [m])
    held_once([b, c], [m])
    # c goes silent: its classic session (6 s) ends it, while m and b go on.
    for _ in range(7):
        node.advance(1_000)
        m.beat()
        b.heartbeat()
    with pytest.raises(UnknownMemberIdError):
        node.groups.heartbeat("g", c.generation, c.member_id)
    settle([b], [m])
    held_once([b], [m])
    # A member that joins and never syncs is removed after its rebalance timeout.
    d = Classic(node, "d")
    d.joined(d.join().result(1))
    for _ in range(6):
        node.advance(1_000)
        m.beat()
        b.heartbeat()
    assert d.member_id not in node.groups._group_store.by_id["g"].consumer.members
    node.store.close()


def test_classic_member_metadata_is_tag_0_of_the_member_record():
    classic = ClassicMetadata(45_000, (("range", b"\x00\x01"),))
    member = ConsumerMember("m", None, None, "c", "/h", frozenset({"t"}), None, 1_000, classic=classic)
    group = ConsumerGroup("g", 1, 1, {"m": member})
    key, value = next((k, v) for k, v in records_between(None, group, lambda t: None)
                      if decode_key(k).record_type == 5)
    struct_bytes = (b"\x00\x00\xaf\xc8"       # SessionTimeoutMs 45000
                    + b"\x02" + b"\x06range" + b"\x03\x00\x01" + b"\x00"   # [range, 0x0001], no tags
                    + b"\x00")               # no tags
    tagged = b"\x01" + struct_bytes          # Kafka's presence byte of a nullable struct
    assert value.endswith(b"\x01" + b"\x00" + bytes([len(tagged)]) + tagged)
    loader = ConsumerGroupLoader(lambda topic_id: None)
    for k, v in records_between(None, group, lambda t: None):
        loader.replay(decode_key(k), v)
    assert loader.groups()["g"].members["m"].classic == classic
    # Records written here before the presence byte was: the struct alone, read back the same.
    earlier = value[:-len(tagged) - 1] + bytes([len(struct_bytes)]) + struct_bytes
    loader = ConsumerGroupLoader(lambda topic_id: None)
    for k, v in records_between(None, group, lambda t: None):
        loader.replay(decode_key(k), earlier if v == value else v)
    assert loader.groups()["g"].members["m"].classic == classic


def test_the_broker_settings_default_to_bidirectional_and_refuse_unknown_policies():
    assert ConsumerGroupConfig.from_settings({}).migration_policy == "bidirectional"
    assert GroupConfig.from_settings({"group.consumer.migration.policy": "UPGRADE"}).consumer.upgrade_enabled
    with pytest.raises(InvalidConfigError):
        ConsumerGroupConfig.from_settings({"group.consumer.migration.policy": "sideways"})


def test_a_static_consumer_member_coming_back_as_classic_downgrades_without_a_rebalance(tmp_path, clock):
    node = Node(tmp_path, clock, "bidirectional")
    a, b = form_classic_group(node, ["a", "b"])
    node.groups.consumer_group_heartbeat("g", "m", 0, instance_id="i-m", rebalance_timeout_ms=REBALANCE_MS,
                                         subscribed_topic_names=["t"], owned=())
    m = Modern(node, "m")
    m.epoch = node.groups._group_store.by_id["g"].consumer.members["m"].member_epoch
    settle([a, b], [m])
    target = node.groups._group_store.by_id["g"].consumer.target["m"]
    back = node.groups.join_group("g", "", "i-m", "m", "/h", CLASSIC_SESSION_MS, REBALANCE_MS, "consumer",
                                  [("cooperative-sticky", subscription())], True).result(1)
    assert node.kind() == ("classic", "Stable"), "the replacement left only classic members: no rebalance"
    synced = node.groups.sync_group("g", back.generation_id, back.member_id, "i-m", {}).result(1)
    assert partitions(synced.assignment) == target, "the new instance takes what its old one was given"
    assert not a.heartbeat(rejoin=False) and not b.heartbeat(rejoin=False)
    node.store.close()


def test_a_static_classic_member_coming_back_with_the_consumer_protocol_takes_its_place(tmp_path, clock):
    node = Node(tmp_path, clock, "bidirectional")
    m = Modern(node, "m")
    m.beat(0)
    s = Classic(node, "s", instance="i-s")
    s.rejoin()
    settle([s], [m])
    held_once([s], [m])
    node.groups.consumer_group_heartbeat("g", "s2", 0, instance_id="i-s", rebalance_timeout_ms=REBALANCE_MS,
                                         subscribed_topic_names=["t"], owned=())
    members = node.groups._group_store.by_id["g"].consumer.members
    assert s.member_id not in members and members["s2"].classic is None
    with pytest.raises(FencedInstanceIdError):
        node.groups.heartbeat("g", s.generation, s.member_id, "i-s")
    node.store.close()


def test_an_upgraded_group_that_empties_converts_offline_to_a_fresh_classic_group(tmp_path, clock):
    node = Node(tmp_path, clock, "upgrade")
    a, b = form_classic_group(node, ["a", "b"])
    m = Modern(node, "m")
    m.beat(0)
    settle([a, b], [m])
    assert node.groups.leave_group("g", [(a.member_id, None), (b.member_id, None)]) == [None, None]
    m.beat(-1)
    assert node.kind() == ("consumer", "Empty")
    c = Classic(node, "c")
    c.rejoin()
    assert (c.generation, node.kind(), c.owned) == (1, ("classic", "Stable"), frozenset())
    node.store.close()
