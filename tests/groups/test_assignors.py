"""The assignors against Kafka's documented examples and the properties each promises (hypothesis)."""
from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from logstore.assignors import (
    CLIENT_ASSIGNORS,
    COOPERATIVE,
    SERVER_ASSIGNORS,
    MemberSubscription,
    cooperative_sticky_assign,
    range_assign,
    round_robin_assign,
    server_range_assign,
    sticky_assign,
    uniform_assign,
)

S = MemberSubscription
ALL = {**CLIENT_ASSIGNORS, **{f"server-{n}": f for n, f in SERVER_ASSIGNORS.items()}}
STICKY = {"sticky": sticky_assign, "uniform": uniform_assign}


def _names(assignment):
    return {m: sorted(f"{t}p{p}" for t, p in parts) for m, parts in assignment.items()}


def _tps(*names):
    """("t0p1", ...) -> frozenset({("t0", 1), ...})."""
    return frozenset((n[:n.rindex("p")], int(n[n.rindex("p") + 1:])) for n in names)


def test_the_registries_use_kafkas_protocol_names():
    assert set(CLIENT_ASSIGNORS) == {"range", "roundrobin", "sticky", "cooperative-sticky"}
    assert COOPERATIVE == {"cooperative-sticky"}
    assert list(SERVER_ASSIGNORS) == ["uniform", "range"]


# -- Kafka's worked examples ----------------------------------------------------------------------

def test_range_two_consumers_two_topics_of_three_partitions():
    members = {"C0": S(frozenset({"t0", "t1"})), "C1": S(frozenset({"t0", "t1"}))}
    assert _names(range_assign(members, {"t0": 3, "t1": 3})) == {
        "C0": ["t0p0", "t0p1", "t1p0", "t1p1"], "C1": ["t0p2", "t1p2"]}


def test_server_range_co_partitions_and_ignores_the_previous_target():
    # The group coordinator's RangeAssignor javadoc: M0, M1 on T1, T2 of 3 partitions each.
    topics = frozenset({"T1", "T2"})
    expected = {"M0": ["T1p0", "T1p1", "T2p0", "T2p1"], "M1": ["T1p2", "T2p2"]}
    assert _names(server_range_assign({"M0": S(topics), "M1": S(topics)}, {"T1": 3, "T2": 3})) == expected
    swapped = {"M0": S(topics, _tps("T1p2", "T2p2")), "M1": S(topics, _tps("T1p0", "T1p1", "T2p0", "T2p1"))}
    assert _names(server_range_assign(swapped, {"T1": 3, "T2": 3})) == expected


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
    # StickyAssignor's javadoc: C0, C1, C2 on t0..t3 of 2 partitions; C1 leaves and only its 3 move.
    topics = frozenset({"t0", "t1", "t2", "t3"})
    counts = {t: 2 for t in topics}
    before = {"C0": _tps("t0p0", "t1p1", "t3p0"), "C1": _tps("t0p1", "t2p0", "t3p1"), "C2": _tps("t1p0", "t2p1")}
    assert sorted(len(p) for p in sticky_assign({c: S(topics) for c in before}, counts).values()) == [2, 3, 3]
    after = sticky_assign({c: S(topics, before[c], 1) for c in ("C0", "C2")}, counts)
    assert before["C0"] < after["C0"] and before["C2"] < after["C2"]
    assert (len(after["C0"]), len(after["C2"])) == (4, 4)


def test_sticky_example_unequal_subscriptions():
    # StickyAssignor's javadoc: C0 on t0; C1 on t0, t1; C2 on t0, t1, t2; with 1, 2 and 3 partitions.
    subs = {"C0": frozenset({"t0"}), "C1": frozenset({"t0", "t1"}), "C2": frozenset({"t0", "t1", "t2"})}
    counts = {"t0": 1, "t1": 2, "t2": 3}
    first = sticky_assign({c: S(t) for c, t in subs.items()}, counts)
    assert _names(first) == {"C0": ["t0p0"], "C1": ["t1p0", "t1p1"], "C2": ["t2p0", "t2p1", "t2p2"]}
    # C0 leaves: round-robin would move 3 partitions, sticky moves only C0's.
    after = sticky_assign({c: S(subs[c], first[c], 1) for c in ("C1", "C2")}, counts)
    assert _names(after) == {"C1": ["t0p0", "t1p0", "t1p1"], "C2": ["t2p0", "t2p1", "t2p2"]}


def test_the_newer_generation_keeps_a_partition_claimed_twice():
    topics = frozenset({"t"})
    members = {"a": S(topics, _tps("tp0"), 3), "b": S(topics, _tps("tp0"), 4)}
    assert sticky_assign(members, {"t": 2}) == {"a": _tps("tp1"), "b": _tps("tp0")}


def test_claims_tied_at_the_newest_generation_are_void_and_withheld_by_cooperative():
    topics = frozenset({"t"})
    members = {"a": S(topics, _tps("tp0", "tp1"), 5), "b": S(topics, _tps("tp1"), 5), "c": S(topics, _tps("tp1"), 4)}
    # Neither a nor b may keep t-1, so sticky balances as if nobody owned it (a keeps t-0 only).
    assert sticky_assign(members, {"t": 3}) == {"a": _tps("tp0"), "b": _tps("tp1"), "c": _tps("tp2")}
    # Cooperative hands t-1 to nobody until every claimant has let it go.
    assert cooperative_sticky_assign(members, {"t": 3}) == {"a": _tps("tp0"), "b": frozenset(), "c": _tps("tp2")}


def test_cooperative_withholds_a_partition_from_a_stale_claimant_while_the_newer_owner_revokes_it():
    topics = frozenset({"t"})
    members = {"a": S(topics, _tps("tp0", "tp1"), 7), "b": S(topics, _tps("tp1"), 6)}
    assert sticky_assign(members, {"t": 2}) == {"a": _tps("tp0"), "b": _tps("tp1")}
    assert cooperative_sticky_assign(members, {"t": 2}) == {"a": _tps("tp0"), "b": frozenset()}


def test_cooperative_waits_for_a_member_that_unsubscribed_to_release_its_partition():
    members = {"a": S(frozenset({"u"}), _tps("tp0"), 2), "b": S(frozenset({"t"}), frozenset(), 2)}
    assert sticky_assign(members, {"t": 1, "u": 1}) == {"a": _tps("up0"), "b": _tps("tp0")}
    assert cooperative_sticky_assign(members, {"t": 1, "u": 1}) == {"a": _tps("up0"), "b": frozenset()}


def test_cooperative_gives_a_moving_partition_only_after_its_owner_revoked_it():
    topics = frozenset({"t"})
    owner = S(topics, _tps("tp0", "tp1"), 1)
    first = cooperative_sticky_assign({"a": owner, "b": S(topics)}, {"t": 2})
    # One partition must move to b: a gives it up now, b gets it in the next round.
    assert first == {"a": _tps("tp0"), "b": frozenset()}
    second = cooperative_sticky_assign({"a": S(topics, first["a"], 2), "b": S(topics, frozenset(), 2)}, {"t": 2})
    assert second == {"a": _tps("tp0"), "b": _tps("tp1")}


def test_uniform_keeps_the_previous_target_and_drops_unsubscribed_topics():
    members = {"a": S(frozenset({"t"}), _tps("tp0", "tp1", "up0")), "b": S(frozenset({"t"}), _tps("tp2"))}
    assert uniform_assign(members, {"t": 4, "u": 1}) == {"a": _tps("tp0", "tp1"), "b": _tps("tp2", "tp3")}


def test_equal_subscriptions_spread_each_topic_over_the_members():
    # From scratch the free partitions are dealt in turn, as Kafka's constrained builder does.
    members = {m: S(frozenset({"x", "y"})) for m in ("a", "b")}
    assert _names(sticky_assign(members, {"x": 2, "y": 2})) == {"a": ["xp0", "yp0"], "b": ["xp1", "yp1"]}


def test_no_members_and_no_partitions():
    for assign in ALL.values():
        assert assign({}, {"t": 3}) == {}
        assert assign({"a": S(frozenset({"t"}))}, {"t": 0}) == {"a": frozenset()}
        assert assign({"a": S(frozenset({"gone"}), _tps("gonep0"))}, {}) == {"a": frozenset()}


# -- properties -----------------------------------------------------------------------------------

TOPICS = ["a", "b", "c", "d"]


@st.composite
def groups(draw, equal: bool | None = None):
    """(members, counts): random topics and counts, subscriptions equal or not, and owned partitions that may
    be stale (vanished, unsubscribed) or claimed by two members, with generations from -1 (unknown) to 3."""
    counts = {t: draw(st.integers(0, 12)) for t in draw(st.lists(st.sampled_from(TOPICS), min_size=1, unique=True))}
    names = draw(st.lists(st.text("abcdefgh", min_size=1, max_size=4), min_size=1, max_size=8, unique=True))
    same = draw(st.booleans()) if equal is None else equal
    shared = frozenset(draw(st.lists(st.sampled_from(TOPICS), min_size=1, unique=True)))
    subscriptions = {m: shared if same else frozenset(draw(st.lists(st.sampled_from(TOPICS), min_size=1,
                                                                    unique=True))) for m in names}
    owned = {m: set() for m in names}
    for t in TOPICS:
        for p in range(draw(st.integers(0, 12))):
            for holder in draw(st.lists(st.sampled_from(names), max_size=2, unique=True)):
                owned[holder].add((t, p))
    members = {m: S(subscriptions[m], frozenset(owned[m]), draw(st.integers(-1, 3))) for m in names}
    return members, counts


def _wanted(members, counts):
    return {(t, p) for s in members.values() for t in s.topics for p in range(counts.get(t, 0))}


def _keepable(members, counts, generations=True):
    """Per member, the owned partitions it may keep: still existing and subscribed, and no other member's
    claim on it is from the same or a newer generation."""
    def valid(s, tp):
        return tp[0] in s.topics and tp[1] < counts.get(tp[0], 0)

    def gen(s):
        return s.generation if generations else 0

    return {m: {tp for tp in s.owned if valid(s, tp)
                and all(gen(o) < gen(s) for n, o in members.items() if n != m and tp in o.owned and valid(o, tp))}
            for m, s in members.items()}


@settings(max_examples=400, deadline=None)
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


@settings(max_examples=200, deadline=None)
@given(groups(), st.sampled_from(sorted(ALL)))
def test_the_same_input_gives_the_same_output_whatever_the_member_order(group, name):
    members, counts = group
    result = ALL[name](members, counts)
    assert ALL[name](members, counts) == result
    assert ALL[name](dict(reversed(list(members.items()))), dict(reversed(list(counts.items())))) == result


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
@given(groups(), st.sampled_from(sorted(STICKY)))
def test_unequal_subscriptions_cannot_be_evened_by_one_move(group, name):
    members, counts = group
    result = STICKY[name](members, counts)
    size = {m: len(p) for m, p in result.items()}
    for member, parts in result.items():
        for topic in {t for t, _ in parts}:
            for other, s in members.items():
                assert not (topic in s.topics and size[member] - size[other] >= 2), (member, other, topic)


@settings(max_examples=400, deadline=None)
@given(groups(equal=True), st.sampled_from(sorted(STICKY)))
def test_sticky_keeps_every_partition_that_can_stay(group, name):
    members, counts = group
    keepable = _keepable(members, counts, generations=name == "sticky")
    low, extra = divmod(len(_wanted(members, counts)), len(members))
    # The best any balanced assignment can do, by trying every choice of members for the larger shares.
    bound = max(sum(min(len(keepable[m]), low + (m in big)) for m in members)
                for big in map(set, itertools.combinations(members, extra)))
    result = STICKY[name](members, counts)
    assert sum(len(result[m] & keepable[m]) for m in members) == bound


@settings(max_examples=300, deadline=None)
@given(groups(equal=True), st.data(), st.sampled_from(sorted(STICKY)))
def test_after_a_member_leaves_only_its_partitions_move(group, data, name):
    # Only with equal subscriptions: with unequal ones, evening out what the leaver's topics gained can
    # take partitions of other topics from other members (balance comes first, as in Kafka).
    members, counts = group
    first = STICKY[name]({m: S(s.topics) for m, s in members.items()}, counts)
    leaver = data.draw(st.sampled_from(sorted(members)))
    stay = {m: S(s.topics, first[m], 2) for m, s in members.items() if m != leaver}
    after = STICKY[name](stay, counts)
    assert all(first[m] <= after[m] for m in stay)
    assert set().union(*after.values()) == _wanted(members, counts) if stay else after == {}


def _cooperative_rounds(members, counts, rounds: int):
    """Run cooperative-sticky `rounds` times, each member then owning what the last round left it; check
    every round that no member is given a partition another member still claims, nor loses one it keeps."""
    result = None
    for generation in range(rounds):
        result = cooperative_sticky_assign(members, counts)
        keepable = _keepable(members, counts)
        sticky = sticky_assign(members, counts)
        for member, parts in result.items():
            for tp in parts - members[member].owned:
                assert all(tp not in s.owned for o, s in members.items() if o != member), ("still owned", tp)
            assert keepable[member] & sticky[member] <= parts
        members = {m: S(s.topics, result[m], generation + 2) for m, s in members.items()}
    return members, result


@settings(max_examples=400, deadline=None)
@given(groups(equal=True))
def test_cooperative_settles_in_two_rounds_with_equal_subscriptions(group):
    members, counts = group
    second_members, second = _cooperative_rounds(members, counts, 2)
    assert second == sticky_assign(second_members, counts)
    assert set().union(*second.values()) == _wanted(members, counts)
    sizes = [len(p) for p in second.values()]
    assert max(sizes) - min(sizes) <= 1


@settings(max_examples=400, deadline=None)
@given(groups())
def test_cooperative_never_hands_over_an_owned_partition_and_settles(group):
    # Unequal subscriptions may need more rounds: each one can still even out what the last one placed.
    members, counts = group
    last_members, last = _cooperative_rounds(members, counts, 4)
    assert last == sticky_assign(last_members, counts)
    assert set().union(*last.values()) == _wanted(members, counts)
