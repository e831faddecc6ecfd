"""The KIP-932 share group state machine under random joins, heartbeats, leaves, expiries and changing topics,
and the group coordinator's share groups: persistence, sessions, the share listener, one kind per id.

Simulated members behave as librdkafka's share consumer: a member reads what
the last answer gave it, and an answer without an assignment leaves it as it
was. After every step: epochs never run ahead of the group's, targets name only
subscribed partitions that exist, and a member's assignment is its target once
it has the target's epoch; every change's records, replayed as a restart replays
them, give back the group. Once members only heartbeat, every member holds its
target, every subscribed partition is read by someone, no partition is shared
by more members than the simple assignor's ceil(S / P), and equal subscriptions
of no more members than partitions are balanced within one partition.
"""
from __future__ import annotations

import itertools

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from logstore.broker.coordinator.share_group import ShareGroup, ShareGroupConfig, simple_assign
from logstore.broker.coordinator.share_group_log import ShareGroupLoader, decode_key, records_between
from logstore.errors import (
    FencedMemberEpochError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    InconsistentGroupProtocolError,
    InvalidConfigError,
    InvalidRequestError,
    NonEmptyGroupError,
    UnknownMemberIdError,
)
from test_consumer_group_state import Clock
from test_consumer_group_state import Node as StateNode

CONFIG = ShareGroupConfig(session_timeout_ms=45_000, heartbeat_interval_ms=100, max_size=1_000)
TOPICS = ("a", "b", "c")
TOPIC_IDS = {t: bytes([i + 1]) * 16 for i, t in enumerate(TOPICS)}
TOPIC_NAMES = {topic_id: t for t, topic_id in TOPIC_IDS.items()}


class ShareGroupMachine(RuleBasedStateMachine):
    """Random member lives against one share group."""

    @initialize(counts=st.fixed_dictionaries({t: st.integers(0, 6) for t in TOPICS}), equal=st.booleans())
    def start(self, counts, equal):
        self.counts = {t: n for t, n in counts.items() if n}
        self.equal = equal
        self.group = ShareGroup("g")
        self.clients: dict[str, list] = {}   # member id -> [epoch, partitions read, topics]
        self.ids = itertools.count()
        self.now = 0
        # What `__consumer_offsets` would hold: each change's records, replayed as a restart would.
        self.log = ShareGroupLoader(TOPIC_NAMES.get)

    def _persist(self, before: ShareGroup) -> None:
        for key, value in records_between(before, self.group, TOPIC_IDS.get):
            self.log.replay(decode_key(key), value)

    def _beat(self, member_id: str, epoch: int | None = None, **fields) -> None:
        client = self.clients[member_id]
        before = self.group.copy()
        answer = self.group.heartbeat(CONFIG, self.counts, self.now, member_id=member_id,
                                      member_epoch=client[0] if epoch is None else epoch, **fields)
        self._persist(before)
        client[0] = answer.member_epoch
        if answer.assignment is not None:
            client[1] = answer.assignment

    @rule(topics=st.sets(st.sampled_from(TOPICS), min_size=1))
    def join(self, topics):
        topics = frozenset(TOPICS) if self.equal else frozenset(topics)
        member_id = f"m{next(self.ids)}"
        self.clients[member_id] = [0, frozenset(), topics]
        self._beat(member_id, subscribed_topics=sorted(topics))

    @precondition(lambda self: self.clients)
    @rule(data=st.data())
    def heartbeat(self, data):
        self.now += 10
        self._beat(data.draw(st.sampled_from(sorted(self.clients))))

    @precondition(lambda self: self.clients and not self.equal)
    @rule(data=st.data(), topics=st.sets(st.sampled_from(TOPICS), min_size=1))
    def resubscribe(self, data, topics):
        member_id = data.draw(st.sampled_from(sorted(self.clients)))
        self.clients[member_id][2] = frozenset(topics)
        self._beat(member_id, subscribed_topics=sorted(topics))

    @precondition(lambda self: self.clients)
    @rule(data=st.data())
    def leave(self, data):
        member_id = data.draw(st.sampled_from(sorted(self.clients)))
        self._beat(member_id, epoch=-1)
        del self.clients[member_id]

    @precondition(lambda self: self.clients)
    @rule(data=st.data())
    def session_expires(self, data):
        member_id = data.draw(st.sampled_from(sorted(self.clients)))
        del self.clients[member_id]
        before = self.group.copy()
        self.group.remove(member_id)
        self._persist(before)

    @rule(topic=st.sampled_from(TOPICS), more=st.integers(1, 3))
    def partitions_added_or_topic_created(self, topic, more):
        self.counts[topic] = self.counts.get(topic, 0) + more

    @precondition(lambda self: self.counts)
    @rule(data=st.data())
    def topic_deleted(self, data):
        del self.counts[data.draw(st.sampled_from(sorted(self.counts)))]

    @invariant()
    def epochs_and_targets_are_consistent(self):
        if not hasattr(self, "group"):
            return
        group = self.group
        assert group.assignment_epoch <= group.group_epoch
        for member in group.members.values():
            assert member.member_epoch <= group.assignment_epoch
            if member.member_epoch == group.assignment_epoch:
                assert member.assigned == group.target.get(member.member_id, frozenset())
        assert set(group.members) == set(self.clients)
        for member_id, client in self.clients.items():
            assert client[1] == group.members[member_id].assigned, "a member reads what it was last given"
        if self.log.groups():
            loaded = self.log.groups()["g"]
            assert (loaded.group_epoch, loaded.assignment_epoch, loaded.metadata_hash) == (
                group.group_epoch, group.assignment_epoch, group.metadata_hash), "the records say what the group is"
            assert {m: (x.metadata_key(), x.assignment_key()) for m, x in loaded.members.items()} == {
                m: (x.metadata_key(), x.assignment_key()) for m, x in group.members.items()}
            assert {m: p for m, p in loaded.target.items() if p} == {m: p for m, p in group.target.items() if p}

    def teardown(self):
        if not getattr(self, "clients", None):
            return
        for member_id in list(self.clients):
            self.now += 10
            self._beat(member_id)
        for member_id in list(self.clients):
            self._beat(member_id)
        group = self.group
        for member_id, client in self.clients.items():
            member = group.members[member_id]
            assert member.member_epoch == group.assignment_epoch == group.group_epoch
            assert client[1] == member.assigned == group.target[member_id]
            assert all(t in client[2] and p < self.counts[t] for t, p in member.assigned)
        for topic, n in self.counts.items():
            subscribers = [m for m, c in self.clients.items() if topic in c[2]]
            if not subscribers:
                continue
            sharing = -(-len(subscribers) // n)
            for p in range(n):
                readers = [m for m in subscribers if (topic, p) in group.members[m].assigned]
                assert 1 <= len(readers) <= sharing, f"{topic}-{p} read by {readers} (sharing {sharing})"
        if self.equal and self.clients:
            total = sum(self.counts.values())
            sizes = [len(m.assigned) for m in group.members.values()]
            if len(sizes) <= min(self.counts.values(), default=0):
                assert max(sizes) - min(sizes) <= len(self.counts), sizes
            assert sum(sizes) >= total


ShareGroupMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
test_share_group_state_machine = ShareGroupMachine.TestCase


def test_the_simple_assignor_shares_partitions_only_when_members_outnumber_them():
    members = {f"m{i}": frozenset({"t"}) for i in range(3)}
    target = simple_assign(members, {"t": 6}, {})
    assert sorted(len(p) for p in target.values()) == [2, 2, 2]
    assert set().union(*target.values()) == {("t", p) for p in range(6)}, "each partition to one member"
    crowd = {f"m{i}": frozenset({"t"}) for i in range(5)}
    target = simple_assign(crowd, {"t": 2}, {})
    # ceil(5/2) = 3 readers a partition, 6 places over 5 members: Kafka's desired counts 2, 1, 1, 1, 1.
    assert sorted(len(p) for p in target.values()) == [1, 1, 1, 1, 2]
    assert [sum(("t", p) in a for a in target.values()) for p in range(2)] == [3, 3]


def test_the_simple_assignor_keeps_what_balance_allows():
    members = {f"m{i}": frozenset({"t"}) for i in range(2)}
    before = simple_assign(members, {"t": 6}, {})
    after = simple_assign({**members, "m2": frozenset({"t"})}, {"t": 6}, before)
    for m in ("m0", "m1"):
        assert len(after[m]) == 2 and after[m] <= before[m], "the old members keep two of their three"
    assert len(after["m2"]) == 2


def test_kafkas_errors():
    group = ShareGroup("g")
    beat = group.heartbeat
    with pytest.raises(InvalidRequestError, match="MemberId can't be empty."):
        beat(CONFIG, {"a": 1}, 0, member_id="", member_epoch=0, subscribed_topics=["a"])
    with pytest.raises(InvalidRequestError, match="SubscribedTopicNames must be set in first request."):
        beat(CONFIG, {"a": 1}, 0, member_id="m", member_epoch=0)
    with pytest.raises(InvalidRequestError, match="MemberEpoch is invalid."):
        beat(CONFIG, {"a": 1}, 0, member_id="m", member_epoch=-2)
    with pytest.raises(InvalidRequestError, match="RackId can't be empty."):
        beat(CONFIG, {"a": 1}, 0, member_id="m", member_epoch=0, subscribed_topics=["a"], rack_id=" ")
    with pytest.raises(UnknownMemberIdError, match="Member x is not a member of group g."):
        beat(CONFIG, {"a": 1}, 0, member_id="x", member_epoch=1)
    assert beat(CONFIG, {"a": 1}, 0, member_id="m", member_epoch=0, subscribed_topics=["a"]).member_epoch == 1
    with pytest.raises(FencedMemberEpochError, match="greater member epoch"):
        beat(CONFIG, {"a": 1}, 0, member_id="m", member_epoch=2)
    beat(CONFIG, {"a": 1}, 0, member_id="n", member_epoch=0, subscribed_topics=["a"])
    assert beat(CONFIG, {"a": 1}, 0, member_id="m", member_epoch=1).member_epoch == 2
    assert beat(CONFIG, {"a": 1}, 0, member_id="m", member_epoch=1).member_epoch == 2, "the previous epoch is let in"
    beat(CONFIG, {"a": 1}, 0, member_id="o", member_epoch=0, subscribed_topics=["a"])
    beat(CONFIG, {"a": 1}, 0, member_id="m", member_epoch=2)
    with pytest.raises(FencedMemberEpochError, match="smaller member epoch"):
        beat(CONFIG, {"a": 1}, 0, member_id="m", member_epoch=1)
    small = ShareGroupConfig(max_size=1)
    capped = ShareGroup("h")
    capped.heartbeat(small, {}, 0, member_id="a", member_epoch=0, subscribed_topics=["a"])
    with pytest.raises(GroupMaxSizeReachedError, match="The share group has reached its maximum capacity of 1 member"):
        capped.heartbeat(small, {}, 0, member_id="z", member_epoch=0, subscribed_topics=["a"])


def test_broker_settings_are_checked_as_kafka_checks_them():
    assert ShareGroupConfig.from_settings({}) == ShareGroupConfig()
    fast = ShareGroupConfig.from_settings({"group.share.session.timeout.ms": 2_000,
                                           "group.share.min.session.timeout.ms": 1_000,
                                           "group.share.heartbeat.interval.ms": 500,
                                           "group.share.min.heartbeat.interval.ms": 100})
    assert (fast.session_timeout_ms, fast.heartbeat_interval_ms) == (2_000, 500)
    for bad, message in (({"group.share.session.timeout.ms": 30_000},
                          "group.share.session.timeout.ms must be greater than or equal to "
                          "group.share.min.session.timeout.ms"),
                         ({"group.share.heartbeat.interval.ms": 20_000},
                          "group.share.heartbeat.interval.ms must be less than or equal to "
                          "group.share.max.heartbeat.interval.ms"),
                         ({"group.share.max.size": 0}, "group.share.max.size"),
                         ({"group.share.assignors": "uniform"}, "group.share.assignors")):
        with pytest.raises(InvalidConfigError, match=message):
            ShareGroupConfig.from_settings(bad)


# -- the coordinator -----------------------------------------------------------------------------------

FAST = ShareGroupConfig(session_timeout_ms=2_000, heartbeat_interval_ms=200)


class Listener:
    """A share listener that remembers what it was told (and can fail its next initialization)."""

    def __init__(self):
        self.assigned: list[tuple[str, list]] = []
        self.left: list[tuple[str, str]] = []
        self.deleted: list[tuple[str, list]] = []
        self.fail_next = False

    def partitions_assigned(self, group_id, partitions):
        if self.fail_next:
            self.fail_next = False
            raise OSError("share state not written")
        self.assigned.append((group_id, partitions))

    def member_left(self, group_id, member_id):
        self.left.append((group_id, member_id))

    def group_deleted(self, group_id, partitions):
        self.deleted.append((group_id, partitions))


class Node(StateNode):
    """A store, a transaction coordinator and a group coordinator wired as the broker wires them, with a
    share listener and group configs."""

    def __init__(self, path, clock: Clock, ids=None, settings_by_group=None):
        self.settings_by_group = settings_by_group or {}
        self.listener = Listener()
        super().__init__(path, clock, ids, share_config=FAST, share_listener=self.listener,
                         group_setting=lambda g, name: self.settings_by_group.get((g, name)))

    def again(self) -> Node:
        return Node(self.path, self.clock, self.ids, self.settings_by_group)

    def beat(self, member: str, epoch: int, group: str = "g", **fields):
        """A heartbeat; (epoch, assignment by topic name or None, heartbeat interval)."""
        if epoch == 0:
            fields = {"subscribed_topic_names": ["t"], **fields}
        answer = self.groups.share_group_heartbeat(group, member, epoch, **fields)
        names = {self.store.topic_id(t): t for t in self.store.topics()}
        assigned = None if answer.assignment is None else frozenset(
            (names[topic_id], p) for topic_id, ps in answer.assignment for p in ps)
        return answer.member_epoch, assigned, answer.heartbeat_interval_ms


@pytest.fixture
def node(tmp_path):
    node = Node(tmp_path, Clock())
    yield node
    node.store.close()


ALL = frozenset(("t", p) for p in range(4))


def test_the_group_its_epochs_assignments_and_share_state_survive_a_restart(node):
    a_epoch, a_got, interval = node.beat("a", 0)
    assert (a_epoch, a_got, interval) == (1, ALL, 200)
    assert node.listener.assigned == [("g", sorted(ALL))]
    b_epoch, b_got, _ = node.beat("b", 0)
    a_epoch, a_got, _ = node.beat("a", a_epoch)
    assert (a_epoch, b_epoch) == (2, 2) and a_got | b_got == ALL and len(a_got) == len(b_got) == 2
    assert node.listener.assigned == [("g", sorted(ALL))], "the share state is initialized once"
    assert node.groups.share_group_partitions("g") == sorted(ALL)
    before = node.groups.share_group_describe(["g"])[0]
    node = node.reopen()
    after = node.groups.share_group_describe(["g"])[0]
    assert after == before and after.state == "Stable" and after.assignor_name == "simple"
    assert node.groups.share_group_partitions("g") == sorted(ALL)
    assert node.beat("a", a_epoch)[:2] == (2, None), "a member heartbeats on across the restart"
    assert node.groups.is_share_member("g", "b")
    assert node.listener.assigned == [], "initialized partitions stay initialized"
    node.store.close()


def test_a_member_silent_past_its_session_is_removed_and_the_others_take_its_partitions(node):
    a_epoch, _, _ = node.beat("a", 0)
    b_epoch, _, _ = node.beat("b", 0)
    a_epoch, a_got, _ = node.beat("a", a_epoch)
    node.advance(1_500)
    a_epoch, _, _ = node.beat("a", a_epoch)
    node.advance(1_000)
    assert node.listener.left == [("g", "b")] and not node.groups.is_share_member("g", "b")
    with pytest.raises(UnknownMemberIdError):
        node.beat("b", b_epoch)
    epoch, got, _ = node.beat("a", a_epoch)
    assert epoch == a_epoch + 1 and got == ALL
    node.advance(5_000)
    assert node.groups.share_group_describe(["g"])[0].state == "Empty"
    node = node.reopen()
    assert node.groups.share_group_describe(["g"])[0].members == ()
    node.store.close()


def test_a_group_config_sets_the_session_and_the_heartbeat_interval(node):
    node.settings_by_group[("g", "share.session.timeout.ms")] = 10_000
    node.settings_by_group[("g", "share.heartbeat.interval.ms")] = 3_000
    epoch, _, interval = node.beat("a", 0)
    assert interval == 3_000
    node.advance(5_000)
    assert node.groups.is_share_member("g", "a"), "the group's 10 s session, not the broker's 2 s"
    assert node.beat("a", epoch)[2] == 3_000
    node.advance(10_001)
    assert not node.groups.is_share_member("g", "a")


def test_share_state_that_failed_to_initialize_is_offered_again(node):
    node.listener.fail_next = True
    epoch, got, _ = node.beat("a", 0)
    assert got == ALL and node.groups.share_group_partitions("g") == []
    node.beat("a", epoch)
    assert node.listener.assigned == [("g", sorted(ALL))] and node.groups.share_group_partitions("g") == sorted(ALL)


def test_new_partitions_of_a_subscribed_topic_come_at_the_next_heartbeat(node):
    epoch, got, _ = node.beat("a", 0)
    node.store.create_partitions("t", 6)
    epoch2, got2, _ = node.beat("a", epoch)
    assert epoch2 == epoch + 1 and got2 == frozenset(("t", p) for p in range(6))
    assert node.listener.assigned[-1] == ("g", [("t", 4), ("t", 5)])
    epoch3, got3, _ = node.beat("a", epoch2, subscribed_topic_names=["t", "u"])
    assert (epoch3, got3) == (epoch2 + 1, None), "a new subscription; a topic that does not exist assigns nothing"
    node.store.create_topic("u", 1)
    epoch4, got4, _ = node.beat("a", epoch3)
    assert epoch4 == epoch3 + 1 and got4 == got2 | {("u", 0)}
    assert ("u", 0) in node.groups.share_group_partitions("g")
    node.store.delete_topic("u")
    assert node.beat("a", epoch4)[:2] == (epoch4 + 1, got2), "a deleted topic leaves the assignment"
    assert node.groups.share_group_partitions("g") == sorted(got2), "and its share state is forgotten"


def test_one_id_is_one_kind_of_group_as_kafka_has_it(node):
    joined = node.groups.join_group("classic", "", None, "c", "/h", 10_000, 10_000, "consumer", [("range", b"")],
                                    False).result(1)
    node.groups.sync_group("classic", joined.generation_id, joined.member_id, None, {joined.member_id: b""}).result(1)
    with pytest.raises(GroupIdNotFoundError, match="Group classic is not a share group."):
        node.beat("m", 0, group="classic")
    with pytest.raises(GroupIdNotFoundError, match="Share group nothing not found."):
        node.beat("m", 3, group="nothing")
    epoch, _, _ = node.beat("m", 0, group="share")
    refused = node.groups.join_group("share", "", None, "c", "/h", 10_000, 10_000, "consumer", [("range", b"")],
                                     False)
    with pytest.raises(InconsistentGroupProtocolError):
        refused.result(1)
    with pytest.raises(GroupIdNotFoundError, match="Group share is not a consumer group."):
        node.groups.consumer_group_heartbeat("share", "x", 0, rebalance_timeout_ms=1_000,
                                             subscribed_topic_names=["t"], owned=[])
    with pytest.raises(GroupIdNotFoundError, match="is not a consumer group"):
        node.groups.commit_offsets("share", "", None, -1, {("t", 0): (1, -1, "")})
    with pytest.raises(GroupIdNotFoundError, match="is not a consumer group"):
        node.groups.fetch_offsets("share", None)
    with pytest.raises(UnknownMemberIdError):
        node.groups.heartbeat("share", 1, "m")
    assert "not a consumer group" in str(node.groups.consumer_group_describe(["share"])[0].error)
    assert "not a share group" in str(node.groups.share_group_describe(["classic"])[0].error)
    assert node.groups.describe("share").state == "Dead", "DescribeGroups (v0-5) knows no share group"
    listed = {(g.group_id, g.group_type, g.protocol_type, g.state) for g in node.groups.listed_groups()}
    assert listed == {("classic", "classic", "consumer", "Stable"), ("share", "share", "share", "Stable")}
    assert [g.group_id for g in node.groups.listed_groups(types=["Share"])] == ["share"]
    assert [g.group_id for g in node.groups.listed_groups(states=["stable"], types=["share"])] == ["share"]

    assert isinstance(node.groups.delete_groups(["share"])["share"], NonEmptyGroupError)
    node.beat("m", -1, group="share")
    assert node.listener.left == [("share", "m")]
    deleted = node.groups.delete_groups(["share", "gone"])
    assert deleted["share"] is None and isinstance(deleted["gone"], GroupIdNotFoundError)
    assert node.listener.deleted == [("share", sorted(ALL))]
    node = node.reopen()
    assert [g.group_id for g in node.groups.listed_groups()] == ["classic"]
    epoch, got, _ = node.beat("m", 0, group="share")
    assert (epoch, got) == (1, ALL), "a deleted share group's id starts afresh"
    node.store.close()
