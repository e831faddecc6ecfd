"""The KIP-848 consumer group state machine under random joins, heartbeats, leaves, expiries and growing topics.

Simulated members behave as librdkafka's: a member holds what the last answer
gave it once it has processed it (its revoke callback may take a while, and
heartbeats go on meanwhile, still naming the old partitions), and says what it
holds (TopicPartitions) at each heartbeat, which is how a revocation is
acknowledged. After every step: no partition is held by two
members, on the broker's side or the members' own; epochs never run ahead of
the group's. Once members only heartbeat, every one reaches its target, the
targets cover every subscribed partition, and equal subscriptions are balanced.
"""
from __future__ import annotations

import itertools

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from logstore.broker.coordinator.consumer_group import ConsumerGroup, ConsumerGroupConfig, ConsumerMember, MemberState
from logstore.broker.coordinator.consumer_group_log import (
    ConsumerGroupLoader,
    ConsumerKey,
    decode_key,
    encode_key,
    records_between,
)
from logstore.broker.coordinator.group import GroupConfig, GroupCoordinator
from logstore.broker.coordinator.transaction import TransactionCoordinator, TxnConfig
from logstore.errors import (
    FencedInstanceIdError,
    FencedMemberEpochError,
    GroupIdNotFoundError,
    InvalidRegularExpressionError,
    InvalidRequestError,
    NonEmptyGroupError,
    StaleMemberEpochError,
    UnknownMemberIdError,
    UnreleasedInstanceIdError,
    UnsupportedAssignorError,
    UnsupportedVersionError,
)
from logstore.manager import LogManager

# One kind of group per id, as these tests were written for; migration has tests/broker/test_group_migration_state.py.
CONFIG = ConsumerGroupConfig(session_timeout_ms=45_000, heartbeat_interval_ms=100, migration_policy="disabled")
TOPICS = ("a", "b", "c")


class _Client:
    def __init__(self, member_id: str, topics: frozenset[str], instance_id: str | None = None):
        self.member_id = member_id
        self.topics = topics
        self.instance_id = instance_id
        self.epoch = 0
        self.owned: frozenset = frozenset()
        self.unprocessed: frozenset | None = None  # an answer the member has not acted on yet


class ConsumerGroupMachine(RuleBasedStateMachine):
    """Random member lives against one group."""

    @initialize(counts=st.fixed_dictionaries({t: st.integers(0, 8) for t in TOPICS}),
                equal=st.booleans(), assignor=st.sampled_from(["uniform", "range"]))
    def start(self, counts, equal, assignor):
        self.counts = dict(counts)
        self.equal = equal
        self.assignor = assignor
        self.group = ConsumerGroup("g")
        self.clients: dict[str, _Client] = {}
        self.ids = itertools.count()
        self.now = 0

    def _beat(self, client: _Client, slow: bool = False, **fields) -> None:
        answer = self.group.heartbeat(CONFIG, self.counts, self.now, member_id=client.member_id,
                                      member_epoch=client.epoch, owned=client.owned, **fields)
        client.epoch = answer.member_epoch
        if answer.assignment is not None:
            client.unprocessed = answer.assignment
        if not slow:
            self._process(client)

    def _process(self, client: _Client) -> None:
        if client.unprocessed is not None:
            # Partitions given up are dropped, new ones taken: what the member reads from now on.
            client.owned, client.unprocessed = client.unprocessed, None

    @rule(topics=st.sets(st.sampled_from(TOPICS), min_size=1), static=st.booleans())
    def join(self, topics, static):
        topics = frozenset(TOPICS) if self.equal else frozenset(topics)
        n = next(self.ids)
        client = _Client(f"m{n}", topics, f"i{n}" if static else None)
        self.clients[client.member_id] = client
        self._beat(client, rebalance_timeout_ms=30_000, subscribed_topics=sorted(topics),
                   server_assignor=self.assignor, instance_id=client.instance_id)

    @precondition(lambda self: any(c.instance_id for c in self.clients.values()))
    @rule(data=st.data())
    def static_member_restarts(self, data):
        # Leaves with -2 (its partitions are held for it), and its next instance joins under a new id.
        old = self.clients.pop(data.draw(st.sampled_from(sorted(m for m, c in self.clients.items() if c.instance_id))))
        self.group.heartbeat(CONFIG, self.counts, self.now, member_id=old.member_id, member_epoch=-2,
                             instance_id=old.instance_id)
        client = _Client(f"m{next(self.ids)}", old.topics, old.instance_id)
        self.clients[client.member_id] = client
        self._beat(client, rebalance_timeout_ms=30_000, subscribed_topics=sorted(client.topics),
                   server_assignor=self.assignor, instance_id=client.instance_id)

    @precondition(lambda self: self.clients)
    @rule(data=st.data(), slow=st.booleans())
    def heartbeat(self, data, slow):
        self.now += 10
        self._beat(self.clients[data.draw(st.sampled_from(sorted(self.clients)))], slow=slow)

    @precondition(lambda self: any(c.unprocessed is not None for c in self.clients.values()))
    @rule(data=st.data())
    def member_catches_up(self, data):
        waiting = sorted(m for m, c in self.clients.items() if c.unprocessed is not None)
        self._process(self.clients[data.draw(st.sampled_from(waiting))])

    @precondition(lambda self: self.clients)
    @rule(data=st.data())
    def leave(self, data):
        client = self.clients.pop(data.draw(st.sampled_from(sorted(self.clients))))
        client.epoch = -1
        self._beat(client, instance_id=client.instance_id)

    @precondition(lambda self: self.clients)
    @rule(data=st.data())
    def session_expires(self, data):
        # Its session ran out: the broker drops it; the (dead) client's partitions go to the others.
        member_id = data.draw(st.sampled_from(sorted(self.clients)))
        del self.clients[member_id]
        self.group.remove(member_id)

    @rule(topic=st.sampled_from(TOPICS), more=st.integers(1, 4))
    def partitions_added(self, topic, more):
        self.counts[topic] += more

    @invariant()
    def nothing_is_held_twice(self):
        if not hasattr(self, "group"):
            return
        seen: dict = {}
        for member in self.group.members.values():
            for tp in member.holds():
                assert tp not in seen, f"{tp} held by {seen[tp]} and {member.member_id}"
                seen[tp] = member.member_id
        owned: dict = {}
        for client in self.clients.values():
            # A member still working through an answer may read both what it had and what it got.
            for tp in client.owned | (client.unprocessed or frozenset()):
                assert tp not in owned, f"{tp} owned by clients {owned[tp]} and {client.member_id}"
                owned[tp] = client.member_id
        group = self.group
        assert group.assignment_epoch <= group.group_epoch
        assert all(m.member_epoch <= group.assignment_epoch for m in group.members.values())

    def teardown(self):
        if not getattr(self, "clients", None):
            return
        # Quiet: only heartbeats from now on. Three rounds reach every target (revoke, then take).
        for client in self.clients.values():
            self._process(client)
        for _ in range(3):
            for client in list(self.clients.values()):
                self.now += 10
                self._beat(client)
        group = self.group
        for member in group.members.values():
            assert member.state is MemberState.STABLE and member.member_epoch == group.assignment_epoch
            assert member.assigned == group.target[member.member_id] == self.clients[member.member_id].owned
        wanted = {(t, p) for c in self.clients.values() for t in c.topics for p in range(self.counts[t])}
        assert set().union(*group.target.values()) == wanted
        if self.equal and self.assignor == "uniform":
            sizes = [len(p) for p in group.target.values()]
            assert max(sizes) - min(sizes) <= 1
        assert group.state == "Stable"


ConsumerGroupMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
test_consumer_group_state_machine = ConsumerGroupMachine.TestCase


def test_a_moving_partition_is_revoked_before_it_is_given():
    group = ConsumerGroup("g")
    counts = {"t": 2}
    first = group.heartbeat(CONFIG, counts, 0, member_id="a", member_epoch=0, rebalance_timeout_ms=1000,
                            subscribed_topics=["t"], owned=[])
    assert (first.member_epoch, first.assignment) == (1, {("t", 0), ("t", 1)})
    joined = group.heartbeat(CONFIG, counts, 1, member_id="b", member_epoch=0, rebalance_timeout_ms=1000,
                             subscribed_topics=["t"], owned=[])
    assert (joined.member_epoch, joined.assignment) == (2, frozenset())  # the epoch, but t-1 is still a's
    revoking = group.heartbeat(CONFIG, counts, 2, member_id="a", member_epoch=1, owned=first.assignment)
    assert revoking.member_epoch == 1 and len(revoking.assignment) == 1  # a keeps its epoch until it revokes
    assert group.members["a"].state is MemberState.UNREVOKED_PARTITIONS
    still = group.heartbeat(CONFIG, counts, 3, member_id="b", member_epoch=2, owned=[])
    assert still.assignment is None and group.members["b"].state is MemberState.UNRELEASED_PARTITIONS
    acked = group.heartbeat(CONFIG, counts, 4, member_id="a", member_epoch=1, owned=revoking.assignment)
    assert acked.member_epoch == 2
    given = group.heartbeat(CONFIG, counts, 5, member_id="b", member_epoch=2, owned=[])
    assert given.assignment == {("t", 0), ("t", 1)} - revoking.assignment
    assert group.state == "Stable"
    # A revocation not acknowledged within the rebalance timeout expires the member.
    assert group.expired(4 + 1000) == [] and group.expired(5 + 45_000) == ["a", "b"]


def test_kafkas_errors():
    group = ConsumerGroup("g")
    counts = {"t": 1}
    with pytest.raises(InvalidRequestError):
        group.heartbeat(CONFIG, counts, 0, member_id="a", member_epoch=0, subscribed_topics=["t"], owned=[])
    with pytest.raises(UnsupportedAssignorError):
        group.heartbeat(CONFIG, counts, 0, member_id="a", member_epoch=0, rebalance_timeout_ms=1, owned=[],
                        subscribed_topics=["t"], server_assignor="sticky")
    answer = group.heartbeat(CONFIG, counts, 0, member_id="", member_epoch=0, rebalance_timeout_ms=1, owned=[],
                             subscribed_topics=["t"])
    assert answer.member_id and answer.member_epoch == 1  # v0: the broker made the id
    with pytest.raises(UnknownMemberIdError):
        group.heartbeat(CONFIG, counts, 0, member_id="nobody", member_epoch=1)
    with pytest.raises(FencedMemberEpochError):
        group.heartbeat(CONFIG, counts, 0, member_id=answer.member_id, member_epoch=5)
    group.heartbeat(CONFIG, {"t": 2}, 0, member_id=answer.member_id, member_epoch=1, owned=[("t", 0)])
    assert group.members[answer.member_id].member_epoch == 2
    # The previous epoch is accepted only while the member holds nothing it was not given.
    group.heartbeat(CONFIG, {"t": 2}, 0, member_id=answer.member_id, member_epoch=1, owned=[("t", 0)])
    with pytest.raises(FencedMemberEpochError):
        group.heartbeat(CONFIG, {"t": 2}, 0, member_id=answer.member_id, member_epoch=1, owned=[("t", 5)])


def test_a_static_member_leaving_with_epoch_minus_2_keeps_its_partitions_for_its_next_instance():
    group = ConsumerGroup("g")
    counts = {"t": 4}
    a = group.heartbeat(CONFIG, counts, 0, member_id="a", member_epoch=0, instance_id="i-a", rebalance_timeout_ms=1,
                        subscribed_topics=["t"], owned=[])
    b = group.heartbeat(CONFIG, counts, 0, member_id="b", member_epoch=0, rebalance_timeout_ms=1,
                        subscribed_topics=["t"], owned=[])
    a = group.heartbeat(CONFIG, counts, 1, member_id="a", member_epoch=a.member_epoch, owned=a.assignment)
    a = group.heartbeat(CONFIG, counts, 1, member_id="a", member_epoch=a.member_epoch, owned=a.assignment)
    b = group.heartbeat(CONFIG, counts, 1, member_id="b", member_epoch=b.member_epoch, owned=[])
    assert group.state == "Stable" and len(a.assignment) == len(b.assignment) == 2
    epoch = group.group_epoch
    group.heartbeat(CONFIG, counts, 2, member_id="a", member_epoch=-2, instance_id="i-a")
    assert group.group_epoch == epoch and group.members["a"].holds() == a.assignment  # held, not handed out
    group.heartbeat(CONFIG, counts, 3, member_id="c", member_epoch=0, instance_id="i-c", rebalance_timeout_ms=1,
                    subscribed_topics=["t"], owned=[])
    with pytest.raises(UnreleasedInstanceIdError):   # i-c's member did not leave: its id is not free
        group.heartbeat(CONFIG, counts, 3, member_id="c2", member_epoch=0, instance_id="i-c", rebalance_timeout_ms=1,
                        subscribed_topics=["t"], owned=[])
    back = group.heartbeat(CONFIG, counts, 3, member_id="a-restarted", member_epoch=0, instance_id="i-a",
                           rebalance_timeout_ms=1, subscribed_topics=["t"], owned=[])
    assert back.assignment == a.assignment and "a" not in group.members
    with pytest.raises(FencedInstanceIdError):
        group.heartbeat(CONFIG, counts, 4, member_id="a", member_epoch=back.member_epoch, instance_id="i-a")


def test_a_regular_expression_subscription_follows_the_topics_that_match():
    group = ConsumerGroup("g")
    joined = group.heartbeat(CONFIG, {"orders-1": 2, "other": 2}, 0, member_id="a", member_epoch=0,
                             rebalance_timeout_ms=1, subscribed_topics=[], subscribed_regex="orders-.*", owned=[])
    assert joined.assignment == {("orders-1", 0), ("orders-1", 1)}
    grown = group.heartbeat(CONFIG, {"orders-1": 2, "orders-2": 1, "other": 2}, 1, member_id="a",
                            member_epoch=joined.member_epoch, owned=joined.assignment)
    assert grown.member_epoch == joined.member_epoch + 1 and ("orders-2", 0) in grown.assignment
    with pytest.raises(InvalidRegularExpressionError):
        group.heartbeat(CONFIG, {}, 2, member_id="b", member_epoch=0, rebalance_timeout_ms=1, subscribed_topics=[],
                        subscribed_regex="(", owned=[])


# -- the coordinator: persistence, timers, offsets, and classic groups beside consumer groups ----------------

FAST = ConsumerGroupConfig(session_timeout_ms=2_000, heartbeat_interval_ms=200, migration_policy="disabled")


class Clock:
    """Milliseconds that move only when a test says so."""

    def __init__(self):
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


class Node:
    """A store, a transaction coordinator and a group coordinator wired as the broker wires them."""

    def __init__(self, path, clock: Clock, ids=None, *, consumer: ConsumerGroupConfig = FAST,
                 min_session_timeout_ms: int = GroupConfig.min_session_timeout_ms, **coordinator):
        """`coordinator`: more of GroupCoordinator's keyword arguments (a share config and listener...)."""
        self.path, self.clock = path, clock
        self._options = {"consumer": consumer, "min_session_timeout_ms": min_session_timeout_ms}
        self.ids = ids if ids is not None else itertools.count(1000)
        self.store = LogManager([str(path)])
        if "t" not in self.store.topics():
            self.store.create_topic("t", 4)
        self.txn = TransactionCoordinator(self.store, lambda: next(self.ids),
                                          TxnConfig(state_partitions=3, offsets_partitions=3, fsync=False), clock=clock)
        self.groups = GroupCoordinator(self.store, self.txn, GroupConfig(
            fsync=False, initial_rebalance_delay_ms=0, consumer=consumer,
            min_session_timeout_ms=min_session_timeout_ms), clock=clock, **coordinator)
        self.txn.on_offsets_marker = self.groups.complete_txn_offsets

    def again(self) -> Node:
        """A node like this one over the same directory, clock and ids (`reopen` loads it)."""
        return Node(self.path, self.clock, self.ids, **self._options)

    def reopen(self) -> Node:
        self.store.close()
        node = self.again()
        node.txn.load()
        node.groups.load()
        return node

    def advance(self, ms: int) -> None:
        """Move the clock, running every deadline on the way at its time."""
        target = self.clock.now + ms
        wake = self.groups.poll(self.clock.now)
        while wake is not None and wake <= target:
            self.clock.now = wake
            wake = self.groups.poll(wake)
        self.clock.now = target
        self.groups.poll(target)

    def beat(self, member: str, epoch: int, owned=None, group: str = "g", **fields):
        """A heartbeat by topic names; the answer's assignment back in names (None: unchanged)."""
        by_topic: dict = {}
        for topic, p in owned or ():
            by_topic.setdefault(self.store.topic_id(topic), []).append(p)
        if epoch == 0:
            fields = {"rebalance_timeout_ms": 5_000, "subscribed_topic_names": ["t"], **fields}
            owned = ()
        answer = self.groups.consumer_group_heartbeat(group, member, epoch, owned=None if owned is None else
                                                      list(by_topic.items()), **fields)
        names = {self.store.topic_id(t): t for t in self.store.topics()}
        assigned = None if answer.assignment is None else frozenset(
            (names[topic_id], p) for topic_id, ps in answer.assignment for p in ps)
        return answer.member_epoch, assigned


@pytest.fixture
def node(tmp_path):
    node = Node(tmp_path, Clock())
    yield node
    node.store.close()


def settle(node: Node, epochs: dict, owned: dict, rounds: int = 3) -> None:
    """Members heartbeat (and act on what they get) until quiet."""
    for _ in range(rounds):
        for member in epochs:
            epoch, got = node.beat(member, epochs[member], owned[member])
            epochs[member] = epoch
            if got is not None:
                owned[member] = got


def test_the_group_its_epochs_assignments_and_offsets_survive_a_restart(node):
    epochs, owned = {}, {}
    for member in ("a", "b"):
        epochs[member], owned[member] = node.beat(member, 0)
    settle(node, epochs, owned)
    assert owned["a"] | owned["b"] == {("t", p) for p in range(4)} and len(owned["a"]) == 2
    assert node.groups.commit_offsets("g", "a", None, epochs["a"], {("t", 0): (7, -1, "m")}, api_version=9) == {
        ("t", 0): None}
    before = node.groups.consumer_group_describe(["g"])[0]

    node = node.reopen()
    after = node.groups.consumer_group_describe(["g"])[0]
    assert after == before and after.state == "Stable"
    assert node.groups.fetch_offsets("g", [("t", 0)])[("t", 0)].offset == 7
    # The members heartbeat on in their epochs: nothing moves.
    assert node.beat("a", epochs["a"]) == (epochs["a"], None)
    assert node.beat("b", epochs["b"], owned["b"])[0] == epochs["b"]
    # The classic loader passed over every consumer record; those made the group again.
    assert [(g.group_id, g.group_type, g.state) for g in node.groups.listed_groups()] == [("g", "consumer", "Stable")]
    node.store.close()


def test_a_member_silent_past_its_session_is_removed_and_its_partitions_move(node):
    epochs, owned = {}, {}
    for member in ("a", "b"):
        epochs[member], owned[member] = node.beat(member, 0)
    settle(node, epochs, owned)
    node.advance(1_500)
    epochs["a"], _ = node.beat("a", epochs["a"], owned["a"])
    node.advance(600)   # b has been silent 2.1 s: its session (2 s) is over
    with pytest.raises(UnknownMemberIdError):
        node.beat("b", epochs["b"])
    epoch, got = node.beat("a", epochs["a"], owned["a"])
    assert epoch > epochs["a"] and got == {("t", p) for p in range(4)}


def test_a_member_that_does_not_revoke_within_its_rebalance_timeout_is_removed(node):
    a_epoch, a_owned = node.beat("a", 0)
    b_epoch, _ = node.beat("b", 0)
    a_epoch, revoking = node.beat("a", a_epoch, a_owned)   # told to give two up; it never says it did
    assert len(revoking) == 2
    for _ in range(4):   # both heartbeat within their sessions; a keeps its partitions and its epoch
        node.advance(1_000)
        assert node.beat("a", a_epoch) == (a_epoch, None)
        b_epoch, _ = node.beat("b", b_epoch, ())
    node.advance(1_000)   # 5 s since a was told to revoke: its rebalance timeout
    with pytest.raises(UnknownMemberIdError):
        node.beat("a", a_epoch)
    b_epoch, got = node.beat("b", b_epoch, ())
    assert got == {("t", p) for p in range(4)}


def test_commits_and_fetches_of_members_are_checked_by_member_epoch(node):
    assert node.groups.commit_offsets("g", "", None, -1, {("t", 0): (1, -1, "")}) == {("t", 0): None}, \
        "a simple commit makes a classic group, as Kafka does"
    epoch, owned = node.beat("a", 0)   # ... which, empty, a heartbeat converts (its offsets stay)
    assert node.groups.fetch_offsets("g", [("t", 0)])[("t", 0)].offset == 1
    commit = {("t", 0): (5, -1, "")}
    with pytest.raises(StaleMemberEpochError):
        node.groups.commit_offsets("g", "a", None, epoch - 1, commit, api_version=9)
    with pytest.raises(UnknownMemberIdError):
        node.groups.commit_offsets("g", "nobody", None, epoch, commit, api_version=9)
    with pytest.raises(UnknownMemberIdError):
        node.groups.commit_offsets("g", "", None, -1, commit)   # the group has members now
    with pytest.raises(UnsupportedVersionError):
        node.groups.commit_offsets("g", "a", None, epoch, commit, api_version=8)
    with pytest.raises(StaleMemberEpochError):
        node.groups.fetch_offsets("g", [("t", 0)], member_id="a", member_epoch=epoch + 1)
    assert node.groups.fetch_offsets("g", [("t", 0)], member_id="a", member_epoch=epoch)[("t", 0)].offset == 1
    # A transactional copier commits with the consumer's group metadata (member id, epoch as generation).
    pid, producer_epoch = node.txn.init_producer_id("copier", 60_000)
    node.txn.add_offsets("copier", pid, producer_epoch, "g")
    with pytest.raises(StaleMemberEpochError):
        node.groups.commit_txn_offsets("copier", "g", pid, producer_epoch, "a", None, epoch + 1, commit)
    assert node.groups.commit_txn_offsets("copier", "g", pid, producer_epoch, "a", None, epoch, commit) == {
        ("t", 0): None}
    node.txn.end_transaction("copier", pid, producer_epoch, True)
    assert node.groups.fetch_offsets("g", [("t", 0)])[("t", 0)].offset == 5


def test_one_id_is_one_kind_of_group_as_kafka_4_has_it(node):
    classic = node.groups.join_group("old", "", None, "c", "/h", 10_000, 10_000, "consumer",
                                     [("range", b"")], False).result(1)
    with pytest.raises(GroupIdNotFoundError, match="is not a consumer group"):
        node.beat("m", 0, group="old")
    epoch, _ = node.beat("m", 0, group="new")
    refused = node.groups.join_group("new", "", None, "c", "/h", 10_000, 10_000, "consumer", [("range", b"")], False)
    with pytest.raises(GroupIdNotFoundError, match="is not a classic group"):
        refused.result(1)
    with pytest.raises(UnknownMemberIdError):
        node.groups.heartbeat("new", 1, "m")
    listed = {(g.group_id, g.group_type, g.protocol_type) for g in node.groups.listed_groups()}
    assert listed == {("old", "classic", "consumer"), ("new", "consumer", "consumer")}
    assert [g.group_id for g in node.groups.listed_groups(types=["Consumer"])] == ["new"]
    assert node.groups.describe("new").state == "Dead", "DescribeGroups (v0-5) knows no consumer group"
    not_consumer = node.groups.consumer_group_describe(["old"])[0].error
    assert isinstance(not_consumer, GroupIdNotFoundError) and "not a consumer group" in str(not_consumer)
    assert isinstance(node.groups.delete_groups(["new"])["new"], NonEmptyGroupError)

    # Once empty, either kind becomes the other on a join (Kafka's offline upgrade and downgrade).
    node.beat("m", -1, group="new")
    node.groups.leave_group("old", [(classic.member_id, None)])
    converted = node.groups.join_group("new", "", None, "c", "/h", 10_000, 10_000, "consumer",
                                       [("range", b"")], False).result(1)
    assert converted.generation_id == 1
    node.groups.sync_group("new", 1, converted.member_id, None, {converted.member_id: b""}).result(1)
    node.beat("m2", 0, group="old")
    listed = {(g.group_id, g.group_type) for g in node.groups.listed_groups()}
    assert listed == {("old", "consumer"), ("new", "classic")}
    node.beat("m2", -1, group="old")
    assert node.groups.delete_groups(["old"]) == {"old": None}
    node = node.reopen()
    assert [(g.group_id, g.group_type) for g in node.groups.listed_groups()] == [("new", "classic")]
    node.store.close()


def test_record_layouts_are_kafkas():
    """ConsumerGroupMetadataKey v3 / Value v0 and CurrentMemberAssignment, byte for byte per Kafka's schemas."""
    key = encode_key(ConsumerKey(3, "g"))
    assert key == b"\x00\x03" + b"\x00\x01g"
    member_key = encode_key(ConsumerKey(8, "g", "m"))
    assert member_key == b"\x00\x08\x00\x01g\x00\x01m" and decode_key(member_key) == ConsumerKey(8, "g", "m")
    assert decode_key(b"\x00\x02\x00\x01g") is None, "type 2 is the classic GroupMetadata"
    before = ConsumerGroup("g")
    after = ConsumerGroup("g", group_epoch=5, assignment_epoch=5)
    records = dict(records_between(before, after, lambda topic: None))
    assert records[key] == b"\x00\x00" + b"\x00\x00\x00\x05" + b"\x00"   # version 0, Epoch, no tagged fields
    topic_id = bytes(range(16))
    member = ConsumerMember("m", None, None, "c", "/h", frozenset({"t"}), None, 1_000, member_epoch=5,
                            previous_member_epoch=4, assigned=frozenset({("t", 1)}))
    after.members["m"] = member
    value = dict(records_between(before, after, lambda topic: topic_id))[member_key]
    assert value == (b"\x00\x00" + b"\x00\x00\x00\x05" + b"\x00\x00\x00\x04" + b"\x00"   # epochs, STABLE
                     + b"\x02" + topic_id + b"\x02" + b"\x00\x00\x00\x01" + b"\x00"      # [t: [1]]
                     + b"\x01" + b"\x00")                                                # [], no tags
    loader = ConsumerGroupLoader({topic_id: "t"}.get)
    for k, v in records_between(before, after, lambda topic: topic_id):
        loader.replay(decode_key(k), v)
    loaded = loader.groups()["g"]
    assert (loaded.group_epoch, loaded.members["m"].assignment_key()) == (5, member.assignment_key())
