"""Partition assignors: who in a consumer group reads which partition, as pure functions.

Each takes the members' subscriptions and the partition count of every topic
and returns every member's partitions. Nothing here does I/O or keeps state;
the same input always gives the same output. The rules are Kafka's (the
clients' RangeAssignor, RoundRobinAssignor, StickyAssignor and
CooperativeStickyAssignor; the group coordinator's UniformAssignor and
RangeAssignor):

- `range`: per topic, the topic's subscribers sorted by member id each take a
  consecutive range, the first `count % subscribers` one extra.
- `roundrobin`: all subscribed partitions sorted by (topic, partition) are
  dealt to the members sorted by id in turn, skipping a member not subscribed
  to the partition's topic.
- `sticky`: balanced first (with equal subscriptions the counts differ by at
  most one; otherwise until no single move evens two members out), then as
  few moves as possible: each member keeps what it owns up to its share. A
  partition several members claim goes to the newest generation; claims tied
  at the newest generation are all void.
- `cooperative-sticky`: the sticky result, minus every partition some other
  member still claims: that member revokes it first, and a second rebalance
  hands it over, so no partition is ever read by two members at once.
- `uniform` (KIP-848, the broker's default): the sticky computation, with
  `owned` meaning the member's previous target assignment.
- server `range` (KIP-848): plain ranges by sorted member id, recomputed every
  time; Kafka gave up its stickiness because it broke co-partitioning
  (KAFKA-16944).

Racks are not used: Kafka's rack awareness needs the racks of each
partition's replicas, and a logstore broker is one node.
"""
from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

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
Assignor = Callable[[Members, Counts], Assignment]


def _frozen(chosen: Mapping[str, list[TopicPartition]]) -> Assignment:
    return {member: frozenset(parts) for member, parts in chosen.items()}


def _live_topics(members: Members, partitions: Counts) -> list[str]:
    """The topics somebody subscribes to that have partitions, sorted."""
    wanted = set().union(*(s.topics for s in members.values())) if members else set()
    return sorted(t for t in wanted if partitions.get(t, 0) > 0)


def _ranges(members: Members, partitions: Counts) -> dict[str, list[TopicPartition]]:
    chosen: dict[str, list[TopicPartition]] = {m: [] for m in members}
    for topic in _live_topics(members, partitions):
        subscribers = sorted(m for m, s in members.items() if topic in s.topics)
        share, extra = divmod(partitions[topic], len(subscribers))
        start = 0
        for i, member in enumerate(subscribers):
            take = share + (1 if i < extra else 0)
            chosen[member].extend((topic, p) for p in range(start, start + take))
            start += take
    return chosen


def range_assign(members: Members, partitions: Counts) -> Assignment:
    """Kafka's RangeAssignor: per topic, consecutive ranges over the subscribers sorted by id."""
    return _frozen(_ranges(members, partitions))


def round_robin_assign(members: Members, partitions: Counts) -> Assignment:
    """Kafka's RoundRobinAssignor: every partition in order, to the next member (by id) subscribed to it."""
    chosen: dict[str, list[TopicPartition]] = {m: [] for m in members}
    order = sorted(members)
    turn = 0
    for topic in _live_topics(members, partitions):
        for p in range(partitions[topic]):
            # Ends: the topic is live, so somebody subscribes to it.
            while topic not in members[order[turn % len(order)]].topics:
                turn += 1
            chosen[order[turn % len(order)]].append((topic, p))
            turn += 1
    return _frozen(chosen)


def _valid_owned(members: Members, partitions: Counts, by_generation: bool) -> dict[str, set[TopicPartition]]:
    """What each member may keep: partitions that still exist, of topics it still wants, and that no
    other member claims from the same or a newer generation (Kafka voids claims tied at the newest)."""
    claims: dict[TopicPartition, list[tuple[int, str]]] = {}
    for member, sub in members.items():
        generation = sub.generation if by_generation else 0
        for tp in sub.owned:
            if tp[0] in sub.topics and 0 <= tp[1] < partitions.get(tp[0], 0):
                claims.setdefault(tp, []).append((generation, member))
    kept: dict[str, set[TopicPartition]] = {m: set() for m in members}
    for tp, claimants in claims.items():
        if len(claimants) > 1:
            claimants.sort(reverse=True)
            if claimants[0][0] == claimants[1][0]:
                continue
        kept[claimants[0][1]].add(tp)
    return kept


def _sticky(members: Members, partitions: Counts, by_generation: bool) -> Assignment:
    if not members:
        return {}
    owned = _valid_owned(members, partitions, by_generation)
    live = {t for t, n in partitions.items() if n > 0}
    if len({s.topics & live for s in members.values()}) == 1:
        return _frozen(_balanced_equal(members, partitions, owned))
    return _frozen(_balanced_general(members, partitions, owned))


def _balanced_equal(members: Members, partitions: Counts,
                    owned: dict[str, set[TopicPartition]]) -> dict[str, list[TopicPartition]]:
    """Equal subscriptions (Kafka's constrained builder): each member ends with the floor or the
    ceiling of an even share, keeps what it owns up to that, and the rest is dealt round-robin."""
    topics = _live_topics(members, partitions)
    low, ceil_slots = divmod(sum(partitions[t] for t in topics), len(members))
    chosen: dict[str, list[TopicPartition]] = {}
    # A ceiling share keeps one more owned partition only for a member owning more than the floor;
    # giving the ceilings to those owning most keeps as much as any balanced assignment can.
    for member in sorted(members, key=lambda m: (-len(owned[m]), m)):
        share = low
        if ceil_slots and len(owned[member]) > low:
            share += 1
            ceil_slots -= 1
        # Kafka keeps the lowest partition numbers when a member owns more than its share.
        chosen[member] = sorted(owned[member], key=lambda tp: (tp[1], tp[0]))[:share]
    taken = {tp for parts in chosen.values() for tp in parts}
    free = [(t, p) for t in topics for p in range(partitions[t]) if (t, p) not in taken]
    # Dealing in turn (not filling one member at a time) spreads each topic over the members.
    under = sorted(m for m, parts in chosen.items() if len(parts) < low)
    at_floor = deque(sorted(m for m, parts in chosen.items() if len(parts) == low) if ceil_slots else ())
    turn = 0
    for tp in free:
        if not under:
            chosen[at_floor.popleft()].append(tp)
            continue
        member = under[turn]
        chosen[member].append(tp)
        if len(chosen[member]) == low:
            del under[turn]
            at_floor.append(member)
        else:
            turn += 1
        if turn >= len(under):
            turn = 0
    return chosen


def _balanced_general(members: Members, partitions: Counts,
                      owned: dict[str, set[TopicPartition]]) -> dict[str, list[TopicPartition]]:
    """Different subscriptions (Kafka's uniform heterogeneous builder): keep everything owned, put each
    free partition on its topic's least loaded subscriber, then, topic by topic, move partitions from the
    most to the least loaded subscriber until no topic has two subscribers two or more apart."""
    subscribers: dict[str, list[str]] = {}
    for member in sorted(members):
        for topic in members[member].topics:
            if partitions.get(topic, 0) > 0:
                subscribers.setdefault(topic, []).append(member)
    count = {m: len(parts) for m, parts in owned.items()}
    # Per topic and member: partitions it kept, and those it got this round (cheaper to move again).
    kept: dict[str, dict[str, list[int]]] = {t: {} for t in subscribers}
    fresh: dict[str, dict[str, list[int]]] = {t: {} for t in subscribers}
    for member in sorted(owned):
        for t, p in sorted(owned[member]):
            kept[t].setdefault(member, []).append(p)
    # Kafka's order: most partitions per subscriber first, then fewest subscribers, then by name.
    order = sorted(subscribers, key=lambda t: (-partitions[t] / len(subscribers[t]), len(subscribers[t]), t))
    for topic in order:
        held = {p for parts in kept[topic].values() for p in parts}
        # Only this topic's placements change counts meanwhile, so the heap stays exact.
        heap = [(count[m], m) for m in subscribers[topic]]
        heapq.heapify(heap)
        for p in range(partitions[topic]):
            if p not in held:
                n, member = heapq.heappop(heap)
                fresh[topic].setdefault(member, []).append(p)
                count[member] = n + 1
                heapq.heappush(heap, (n + 1, member))
    movable = [t for t in order if len(subscribers[t]) > 1]
    # Every move lowers the sum of squared counts, so this ends.
    while any([_even_out(subscribers[t], count, kept[t], fresh[t]) for t in movable]):
        pass
    chosen: dict[str, list[TopicPartition]] = {m: [] for m in members}
    for topic in subscribers:
        for side in (kept[topic], fresh[topic]):
            for member, parts in side.items():
                chosen[member].extend((topic, p) for p in parts)
    return chosen


def _even_out(subscribers: list[str], count: dict[str, int], kept: dict[str, list[int]],
              fresh: dict[str, list[int]]) -> bool:
    """Move one topic's partitions from its most to its least loaded subscriber while they are two or
    more apart; True if any moved. Both heaps are lazy: an entry that no longer matches is skipped."""
    def top(member: str) -> tuple[int, int, str]:
        # The most loaded first; among those, one with a partition it got this round: moving that keeps more.
        return (-count[member], 0 if fresh.get(member) else 1, member)

    high = [top(m) for m in subscribers if kept.get(m) or fresh.get(m)]
    low = [(count[m], m) for m in subscribers]
    heapq.heapify(high)
    heapq.heapify(low)
    moved = False
    while high:
        giver = high[0][2]
        if high[0] != top(giver) or not (kept.get(giver) or fresh.get(giver)):
            heapq.heappop(high)
            continue
        if low[0][0] != count[low[0][1]]:
            heapq.heappop(low)
            continue
        taker = low[0][1]
        if count[giver] - count[taker] < 2:
            break
        source = fresh if fresh.get(giver) else kept
        fresh.setdefault(taker, []).append(source[giver].pop())
        count[giver] -= 1
        count[taker] += 1
        heapq.heappop(high)
        heapq.heappop(low)
        for member in (giver, taker):
            heapq.heappush(low, (count[member], member))
            if kept.get(member) or fresh.get(member):
                heapq.heappush(high, top(member))
        moved = True
    return moved


def sticky_assign(members: Members, partitions: Counts) -> Assignment:
    """Kafka's StickyAssignor: balanced, then as few moves as possible (conflicting claims: newest generation)."""
    return _sticky(members, partitions, by_generation=True)


def cooperative_sticky_assign(members: Members, partitions: Counts) -> Assignment:
    """Kafka's CooperativeStickyAssignor: sticky, minus partitions another member must revoke first."""
    chosen = sticky_assign(members, partitions)
    winner = {tp: m for m, parts in _valid_owned(members, partitions, True).items() for tp in parts}
    claimants: dict[TopicPartition, set[str]] = {}
    for member, sub in members.items():
        for tp in sub.owned:
            claimants.setdefault(tp, set()).add(member)

    def settled(member: str, tp: TopicPartition) -> bool:
        # Any other claim, even a stale or void one, means a member that may still be reading it.
        return winner.get(tp) == member or claimants.get(tp, set()) <= {member}

    return {m: frozenset(tp for tp in parts if settled(m, tp)) for m, parts in chosen.items()}


def uniform_assign(members: Members, partitions: Counts) -> Assignment:
    """KIP-848's server-side `uniform`: balanced and sticky towards each member's previous target."""
    return _sticky(members, partitions, by_generation=False)


def server_range_assign(members: Members, partitions: Counts) -> Assignment:
    """KIP-848's server-side `range`: per topic, consecutive ranges by sorted member id; `owned` is unused."""
    return _frozen(_ranges(members, partitions))


CLIENT_ASSIGNORS: dict[str, Assignor] = {"range": range_assign, "roundrobin": round_robin_assign,
                                         "sticky": sticky_assign, "cooperative-sticky": cooperative_sticky_assign}
COOPERATIVE = frozenset({"cooperative-sticky"})
SERVER_ASSIGNORS: dict[str, Assignor] = {"uniform": uniform_assign, "range": server_range_assign}
