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

from logstore.broker.coordinator.consumer_group import (ConsumerGroup, ConsumerGroupConfig, MemberState)
from logstore.errors import FencedMemberEpochError, InvalidRequestError, UnknownMemberIdError, UnsupportedAssignorError

CONFIG = ConsumerGroupConfig(session_timeout_ms=45_000, heartbeat_interval_ms=100)
TOPICS = ("a", "b", "c")


class _Client:
    def __init__(self, member_id: str, topics: frozenset[str]):
        self.member_id = member_id
        self.topics = topics
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

    @rule(topics=st.sets(st.sampled_from(TOPICS), min_size=1))
    def join(self, topics):
        topics = frozenset(TOPICS) if self.equal else frozenset(topics)
        client = _Client(f"m{next(self.ids)}", topics)
        self.clients[client.member_id] = client
        self._beat(client, rebalance_timeout_ms=30_000, subscribed_topics=sorted(topics),
                   server_assignor=self.assignor)

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
        self._beat(client)

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
