"""Partition assignors: who in a consumer group reads which partition, as pure functions.

Each takes the members' subscriptions and the partition count of every topic
and returns every member's partitions. Nothing here does I/O or keeps state;
the same input always gives the same output. The rules are the ones Kafka
documents for its assignors:

- `range`: per topic, the topic's subscribers sorted by member id each take a
  consecutive range, the first `count % subscribers` one extra.
- `roundrobin`: all subscribed partitions sorted by (topic, partition) are
  dealt to the members sorted by id in turn, skipping a member not subscribed
  to the partition's topic.
- `sticky`: balanced first (with equal subscriptions the counts differ by at
  most one), then as few moves as possible: each member keeps what it owns up
  to its share. A partition two members claim goes to the newer generation.
- `cooperative-sticky`: the sticky result, minus every partition another
  member still owns: that member revokes it first, and a second rebalance
  hands it over, so no partition is ever read by two members at once.
- `uniform` and server-side `range` (KIP-848, run by the group coordinator):
  sticky towards each member's previous target assignment (`owned`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

TopicPartition = tuple[str, int]
Assignment = dict[str, frozenset[TopicPartition]]


@dataclass(frozen=True)
class MemberSubscription:
    """What a member asks for and holds: its topics, its partitions now and the generation they are from."""

    topics: frozenset[str]
    owned: frozenset[TopicPartition] = frozenset()
    generation: int = -1
    rack: str | None = None


Members = Mapping[str, MemberSubscription]
Counts = Mapping[str, int]


def _frozen(chosen: Mapping[str, list | set]) -> Assignment:
    return {member: frozenset(parts) for member, parts in chosen.items()}


def _subscribed_topics(members: Members, partitions: Counts) -> list[str]:
    wanted = set().union(*(s.topics for s in members.values())) if members else set()
    return sorted(t for t in wanted if partitions.get(t, 0) > 0)


def range_assign(members: Members, partitions: Counts) -> Assignment:
    """Kafka's RangeAssignor: per topic, consecutive ranges over the subscribers sorted by id."""
    chosen: dict[str, list] = {m: [] for m in members}
    for topic in _subscribed_topics(members, partitions):
        subscribers = sorted(m for m, s in members.items() if topic in s.topics)
        share, extra = divmod(partitions[topic], len(subscribers))
        start = 0
        for i, member in enumerate(subscribers):
            take = share + (1 if i < extra else 0)
            chosen[member].extend((topic, p) for p in range(start, start + take))
            start += take
    return _frozen(chosen)


def round_robin_assign(members: Members, partitions: Counts) -> Assignment:
    """Kafka's RoundRobinAssignor: every partition in order, to the next member (by id) subscribed to it."""
    chosen: dict[str, list] = {m: [] for m in members}
    order = sorted(members)
    turn = 0
    for topic in _subscribed_topics(members, partitions):
        for p in range(partitions[topic]):
            while topic not in members[order[turn % len(order)]].topics:
                turn += 1
            chosen[order[turn % len(order)]].append((topic, p))
            turn += 1
    return _frozen(chosen)


def _valid_owned(members: Members, partitions: Counts, by_generation: bool) -> dict[str, set[TopicPartition]]:
    """What each member may keep: partitions that still exist, of topics it still wants, claimed by no
    newer generation (two claims of one generation cancel, as Kafka invalidates them)."""
    claims: dict[TopicPartition, list[tuple[int, str]]] = {}
    for member, sub in members.items():
        for tp in sub.owned:
            if tp[0] in sub.topics and 0 <= tp[1] < partitions.get(tp[0], 0):
                claims.setdefault(tp, []).append((sub.generation if by_generation else 0, member))
    kept: dict[str, set[TopicPartition]] = {m: set() for m in members}
    for tp, claimants in claims.items():
        if len(claimants) == 1:
            kept[claimants[0][1]].add(tp)
            continue
        claimants.sort(reverse=True)
        if claimants[0][0] > claimants[1][0]:
            kept[claimants[0][1]].add(tp)
    return kept


def _sticky(members: Members, partitions: Counts, by_generation: bool) -> Assignment:
    if not members:
        return {}
    owned = _valid_owned(members, partitions, by_generation)
    topic_sets = {s.topics & set(partitions) for s in members.values()}
    if len(topic_sets) == 1:
        return _frozen(_balanced_equal(members, partitions, owned))
    return _frozen(_balanced_general(members, partitions, owned))


def _balanced_equal(members: Members, partitions: Counts, owned: dict[str, set]) -> dict[str, list]:
    """Equal subscriptions: shares of floor or ceil, the ceil shares to the members owning most."""
    topics = _subscribed_topics(members, partitions)
    total = sum(partitions[t] for t in topics)
    low, extra = divmod(total, len(members))
    ceil_slots = extra
    chosen: dict[str, list] = {}
    # Members owning most keep most: they get the ceil shares while there are any.
    for member in sorted(members, key=lambda m: (-len(owned[m]), m)):
        mine = sorted(owned[member])
        share = low
        if ceil_slots and len(mine) > low:
            share = low + 1
            ceil_slots -= 1
        chosen[member] = mine[:share]
    taken = {tp for parts in chosen.values() for tp in parts}
    free = [(t, p) for t in topics for p in range(partitions[t]) if (t, p) not in taken]
    # Fill to the floor first, then hand out the ceil shares left, fewest-first by member id.
    queue = sorted((len(parts), member) for member, parts in chosen.items())
    free.reverse()
    below = [(n, m) for n, m in queue if n < low]
    at_floor = [m for n, m in queue if n == low]
    for n, member in below:
        while n < low:
            chosen[member].append(free.pop())
            n += 1
        at_floor.append(member)
    for member in sorted(at_floor):
        if not free or not ceil_slots:
            break
        chosen[member].append(free.pop())
        ceil_slots -= 1
    assert not free, "every partition has a member"
    return chosen


def _balanced_general(members: Members, partitions: Counts, owned: dict[str, set]) -> dict[str, list]:
    """Different subscriptions: keep what is owned, place the rest where fewest are, then move partitions
    from fuller to emptier eligible members until no move evens things out (Kafka's general approach)."""
    eligible: dict[str, list[str]] = {}
    for member in sorted(members):
        for topic in members[member].topics:
            if partitions.get(topic, 0) > 0:
                eligible.setdefault(topic, []).append(member)
    holder: dict[TopicPartition, str] = {tp: m for m, parts in owned.items() for tp in parts}
    counts = {m: len(owned[m]) for m in members}
    # Most constrained partitions first: those with the fewest members that may take them.
    free = sorted(((t, p) for t in eligible for p in range(partitions[t]) if (t, p) not in holder),
                  key=lambda tp: (len(eligible[tp[0]]), tp))
    for tp in free:
        member = min(eligible[tp[0]], key=lambda m: (counts[m], m))
        holder[tp] = member
        counts[member] += 1
    kept = set().union(*owned.values())
    moved = True
    while moved:
        moved = False
        # Partitions placed this round move first: moving one of those costs no stickiness.
        for tp in sorted(holder, key=lambda tp: (tp in kept, -counts[holder[tp]], tp)):
            current = holder[tp]
            target = min(eligible[tp[0]], key=lambda m: (counts[m], m))
            if counts[current] - counts[target] >= 2:
                holder[tp] = target
                counts[current] -= 1
                counts[target] += 1
                moved = True
    chosen: dict[str, list] = {m: [] for m in members}
    for tp, member in holder.items():
        chosen[member].append(tp)
    return chosen


def sticky_assign(members: Members, partitions: Counts) -> Assignment:
    """Kafka's StickyAssignor: balanced, then as few moves as possible (conflicting claims: newer generation)."""
    return _sticky(members, partitions, by_generation=True)


def cooperative_sticky_assign(members: Members, partitions: Counts) -> Assignment:
    """Kafka's CooperativeStickyAssignor: sticky, minus partitions another member must revoke first."""
    chosen = sticky_assign(members, partitions)
    owner = {tp: m for m, parts in _valid_owned(members, partitions, True).items() for tp in parts}
    return {m: frozenset(tp for tp in parts if owner.get(tp, m) == m) for m, parts in chosen.items()}


def uniform_assign(members: Members, partitions: Counts) -> Assignment:
    """KIP-848's server-side `uniform`: balanced and sticky towards each member's previous target."""
    return _sticky(members, partitions, by_generation=False)


def server_range_assign(members: Members, partitions: Counts) -> Assignment:
    """KIP-848's server-side `range`: per topic, range-sized shares by sorted member id, each member
    keeping what it had of the topic within its share."""
    chosen: dict[str, list] = {m: [] for m in members}
    for topic in _subscribed_topics(members, partitions):
        subscribers = sorted(m for m, s in members.items() if topic in s.topics)
        share, extra = divmod(partitions[topic], len(subscribers))
        quota = {m: share + (1 if i < extra else 0) for i, m in enumerate(subscribers)}
        taken: set[int] = set()
        for member in subscribers:
            had = sorted(p for t, p in members[member].owned if t == topic and p < partitions[topic] and p not in taken)
            keep = had[:quota[member]]
            taken.update(keep)
            chosen[member].extend((topic, p) for p in keep)
        free = iter(p for p in range(partitions[topic]) if p not in taken)
        for member in subscribers:
            have = sum(1 for t, _ in chosen[member] if t == topic)
            chosen[member].extend((topic, next(free)) for _ in range(quota[member] - have))
    return _frozen(chosen)


Assignor = Callable[[Members, Counts], Assignment]

CLIENT_ASSIGNORS: dict[str, Assignor] = {"range": range_assign, "roundrobin": round_robin_assign,
                                         "sticky": sticky_assign, "cooperative-sticky": cooperative_sticky_assign}
COOPERATIVE = frozenset({"cooperative-sticky"})
SERVER_ASSIGNORS: dict[str, Assignor] = {"uniform": uniform_assign, "range": server_range_assign}
