"""The assignors against Kafka's documented examples and the properties each promises (hypothesis)."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from logstore.assignors import (CLIENT_ASSIGNORS, SERVER_ASSIGNORS, MemberSubscription, cooperative_sticky_assign,
                                range_assign, round_robin_assign, sticky_assign, uniform_assign)

S = MemberSubscription
ALL = {**CLIENT_ASSIGNORS, **{f"server-{n}": f for n, f in SERVER_ASSIGNORS.items()}}


def _names(assignment):
    return {m: sorted(f"{t}p{p}" for t, p in parts) for m, parts in assignment.items()}


# -- Kafka's worked examples ----------------------------------------------------------------------

def test_range_two_consumers_two_topics_of_three_partitions():
    members = {"C0": S(frozenset({"t0", "t1"})), "C1": S(frozenset({"t0", "t1"}))}
    assert _names(range_assign(members, {"t0": 3, "t1": 3})) == {
        "C0": ["t0p0", "t0p1", "t1p0", "t1p1"], "C1": ["t0p2", "t1p2"]}


def test_round_robin_two_consumers_two_topics_of_three_partitions():
    members = {"C0": S(frozenset({"t0", "t1"})), "C1": S(frozenset({"t0", "t1"}))}
    assert _names(round_robin_assign(members, {"t0": 3, "t1": 3})) == {
        "C0": ["t0p0", "t0p2", "t1p1"], "C1": ["t0p1", "t1p0", "t1p2"]}


def test_round_robin_unequal_subscriptions_example():
    # RoundRobinAssignor's javadoc: C0 on t0; C1 on t0, t1; C2 on t0, t1, t2; with 1, 2 and 3 partitions.
    members = {"C0": S(frozenset({"t0"})), "C1": S(frozenset({"t0", "t1"})), "C2": S(frozenset({"t0", "t1", "t2"}))}
    assert _names(round_robin_assign(members, {"t0": 1, "t1": 2, "t2": 3})) == {
        "C0": ["t0p0"], "C1": ["t1p0"], "C2": ["t1p1", "t2p0", "t2p1", "t2p2"]}


def test_sticky_example_one_consumer_leaves():
    # StickyAssignor's javadoc: 3 consumers, 4 topics of 2 partitions; C1 leaves and only its 3 move.
    topics = frozenset({"t0", "t1", "t2", "t3"})
    counts = {t: 2 for t in topics}
    first = sticky_assign({c: S(topics) for c in ("C0", "C1", "C2")}, counts)
    assert sorted(len(p) for p in first.values()) == [2, 3, 3]
    after = sticky_assign({c: S(topics, first[c], 1) for c in ("C0", "C2")}, counts)
    assert first["C0"] <= after["C0"] and first["C2"] <= after["C2"]
    assert sorted(len(p) for p in after.values()) == [4, 4]


def test_the_newer_generation_keeps_a_partition_claimed_twice():
    topics = frozenset({"t"})
    members = {"a": S(topics, frozenset({("t", 0)}), 3), "b": S(topics, frozenset({("t", 0)}), 4)}
    assert sticky_assign(members, {"t": 2}) == {"a": frozenset({("t", 1)}), "b": frozenset({("t", 0)})}


def test_cooperative_gives_a_moving_partition_only_after_its_owner_revoked_it():
    topics = frozenset({"t"})
    owner = S(topics, frozenset({("t", 0), ("t", 1)}), 1)
    first = cooperative_sticky_assign({"a": owner, "b": S(topics)}, {"t": 2})
    # One partition must move to b: a gives it up now, b gets it in the next round.
    assert first == {"a": frozenset({("t", 0)}), "b": frozenset()}
    second = cooperative_sticky_assign({"a": S(topics, first["a"], 2), "b": S(topics, frozenset(), 2)}, {"t": 2})
    assert second == {"a": frozenset({("t", 0)}), "b": frozenset({("t", 1)})}


# -- properties -----------------------------------------------------------------------------------

TOPICS = ["a", "b", "c", "d"]


@st.composite
def groups(draw, equal: bool | None = None):
    """(members, counts): random topics and counts, subscriptions equal or not, disjoint owned partitions."""
    counts = {t: draw(st.integers(0, 12)) for t in draw(st.lists(st.sampled_from(TOPICS), min_size=1, unique=True))}
    names = draw(st.lists(st.text("abcdefgh", min_size=1, max_size=4), min_size=1, max_size=8, unique=True))
    same = draw(st.booleans()) if equal is None else equal
    shared = frozenset(draw(st.lists(st.sampled_from(TOPICS), min_size=1, unique=True)))
    subscriptions = {m: shared if same else frozenset(draw(st.lists(st.sampled_from(TOPICS), min_size=1,
                                                                    unique=True))) for m in names}
    # Owned partitions: a random earlier owner per partition (or none), possibly stale (vanished or unsubscribed).
    owned = {m: set() for m in names}
    for t in TOPICS:
        for p in range(draw(st.integers(0, 12))):
            holder = draw(st.sampled_from(names + [None]))
            if holder is not None:
                owned[holder].add((t, p))
    members = {m: S(subscriptions[m], frozenset(owned[m]), 1) for m in names}
    return members, counts


def _wanted(members, counts):
    return {(t, p) for s in members.values() for t in s.topics for p in range(counts.get(t, 0))}


def _valid_owned(members, counts):
    return {m: {tp for tp in s.owned if tp[0] in s.topics and tp[1] < counts.get(tp[0], 0)}
            for m, s in members.items()}


@settings(max_examples=300, deadline=None)
@given(groups(), st.sampled_from(sorted(ALL)))
def test_every_partition_goes_to_exactly_one_subscriber(group, name):
    members, counts = group
    result = ALL[name](members, counts)
    assert set(result) == set(members)
    given_out = [tp for parts in result.values() for tp in parts]
    assert len(given_out) == len(set(given_out))
    for member, parts in result.items():
        assert all(t in members[member].topics for t, _ in parts)
    if name != "cooperative-sticky":
        assert set(given_out) == _wanted(members, counts)
    assert ALL[name](members, counts) == result  # deterministic


@settings(max_examples=300, deadline=None)
@given(groups(equal=True), st.sampled_from(["roundrobin", "sticky", "server-uniform"]))
def test_equal_subscriptions_are_balanced(group, name):
    members, counts = group
    sizes = [len(p) for p in ALL[name](members, counts).values()]
    assert max(sizes) - min(sizes) <= 1


@settings(max_examples=300, deadline=None)
@given(groups(), st.sampled_from(["range", "server-range"]))
def test_range_is_balanced_per_topic(group, name):
    members, counts = group
    result = ALL[name](members, counts)
    for topic in {t for s in members.values() for t in s.topics}:
        sizes = [sum(1 for t, _ in result[m] if t == topic) for m, s in members.items() if topic in s.topics]
        assert max(sizes) - min(sizes) <= 1


@settings(max_examples=300, deadline=None)
@given(groups())
def test_heterogeneous_sticky_cannot_be_evened_by_one_move(group):
    members, counts = group
    for assign in (sticky_assign, uniform_assign):
        result = assign(members, counts)
        size = {m: len(p) for m, p in result.items()}
        for member, parts in result.items():
            for topic, _ in parts:
                for other, s in members.items():
                    assert not (topic in s.topics and size[member] - size[other] >= 2), (member, other, topic)


@settings(max_examples=300, deadline=None)
@given(groups(equal=True))
def test_sticky_keeps_every_partition_that_can_stay(group):
    members, counts = group
    owned = _valid_owned(members, counts)
    total = len(_wanted(members, counts))
    low, extra = divmod(total, len(members))
    # The most any balanced assignment can keep: the ceil shares go to the members owning most.
    ranked = sorted((len(o) for o in owned.values()), reverse=True)
    bound = sum(min(n, low + (1 if i < extra else 0)) for i, n in enumerate(ranked))
    for assign in (sticky_assign, uniform_assign):
        result = assign(members, counts)
        assert sum(len(result[m] & owned[m]) for m in members) == bound


@settings(max_examples=200, deadline=None)
@given(groups(equal=True), st.data())
def test_after_a_member_leaves_only_its_partitions_move(group, data):
    members, counts = group
    first = sticky_assign({m: S(s.topics) for m, s in members.items()}, counts)
    if len(members) < 2:
        return
    leaver = data.draw(st.sampled_from(sorted(members)))
    stay = {m: S(s.topics, first[m], 2) for m, s in members.items() if m != leaver}
    after = sticky_assign(stay, counts)
    assert all(first[m] <= after[m] for m in stay)


def _cooperative_rounds(members, counts, rounds: int):
    """Run cooperative-sticky `rounds` times, each member then owning what the last round left it."""
    result = None
    for generation in range(rounds):
        owned = _valid_owned(members, counts)
        holder = {tp: m for m, parts in owned.items() for tp in parts}
        result = cooperative_sticky_assign(members, counts)
        for member, parts in result.items():
            assert all(holder.get(tp, member) == member for tp in parts), "handed over while still owned"
        members = {m: S(s.topics, result[m], generation + 2) for m, s in members.items()}
    return members, result


@settings(max_examples=300, deadline=None)
@given(groups(equal=True))
def test_cooperative_settles_in_two_rounds_with_equal_subscriptions(group):
    members, counts = group
    second_members, second = _cooperative_rounds(members, counts, 2)
    assert second == sticky_assign(second_members, counts)
    assert set().union(*second.values()) == _wanted(members, counts)


@settings(max_examples=300, deadline=None)
@given(groups())
def test_cooperative_never_hands_over_an_owned_partition_and_settles(group):
    # Unequal subscriptions may need a third round: the second can still even out what the first placed.
    members, counts = group
    last_members, last = _cooperative_rounds(members, counts, 4)
    assert last == sticky_assign(last_members, counts)
    assert set().union(*last.values()) == _wanted(members, counts)
