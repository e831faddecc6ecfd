"""One KIP-932 share group: members heartbeat, the broker assigns, and partitions are shared, never revoked.

A share group has an epoch, bumped whenever what the assignment depends on
changes: a member joins or leaves, a subscription changes, or a subscribed
topic is created, deleted or grows (the group keeps a hash of its subscribed
topics' partition counts, as Kafka 4.1+ keeps its MetadataHash). When the
group epoch passes the target assignment's, Kafka's simple share assignor
computes a new target for every member (`simple_assign`).

Unlike a consumer group, a partition may be read by several members at once
(the share-partition hands each record to one of them), so there is no
revocation phase: at its next heartbeat a member takes the target's epoch and
exactly its target partitions.

The simple assignor (Kafka 4.2's SimpleHomogeneous/HeterogeneousAssignmentBuilder)
works topic by topic. With S members subscribed to a topic of P partitions,
each partition is shared by ceil(S / P) members, and the S members split the
ceil(S / P) * P places so that no two differ by more than one: with S <= P every
partition has one member and each member about P / S partitions; with S > P
every partition has several members and each member one partition. It keeps
as much of the previous target as that balance allows (balance first, then
stickiness).

Nothing here locks, waits or writes; the caller does (and persists).
Errors are Kafka's: UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH,
GROUP_MAX_SIZE_REACHED, INVALID_REQUEST.
"""
from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from logstore.errors import (
    FencedMemberEpochError,
    GroupMaxSizeReachedError,
    InvalidConfigError,
    InvalidRequestError,
    UnknownMemberIdError,
)

TopicPartition = tuple[str, int]
JOIN_EPOCH = 0
LEAVE_EPOCH = -1
SIMPLE_ASSIGNOR = "simple"
# Kafka's class name for it, as group.share.assignors may name it.
_ASSIGNOR_CLASSES = {"org.apache.kafka.coordinator.group.assignor.SimpleAssignor": SIMPLE_ASSIGNOR}


@dataclass(frozen=True)
class ShareGroupConfig:
    """The share groups' broker settings (ms), under Kafka's names in `from_settings`; a group's own
    `share.session.timeout.ms` and `share.heartbeat.interval.ms` (group configs) override the first two."""

    session_timeout_ms: int = 45_000         # group.share.session.timeout.ms
    heartbeat_interval_ms: int = 5_000       # group.share.heartbeat.interval.ms
    max_size: int = 200                      # group.share.max.size
    assignors: tuple[str, ...] = (SIMPLE_ASSIGNOR,)  # group.share.assignors

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> ShareGroupConfig:
        """From broker settings, checked as Kafka's GroupCoordinatorConfig and ShareGroupConfig check them."""
        # Broker settings are whatever the config file or the caller gave: checked below, not typed.
        def get(name: str, default: int | str) -> Any:
            return settings.get(name, default)

        session = get("group.share.session.timeout.ms", 45_000)
        heartbeat = get("group.share.heartbeat.interval.ms", 5_000)
        for name, value, low_name, low, high_name, high in (
                ("group.share.session.timeout.ms", session,
                 "group.share.min.session.timeout.ms", get("group.share.min.session.timeout.ms", 45_000),
                 "group.share.max.session.timeout.ms", get("group.share.max.session.timeout.ms", 60_000)),
                ("group.share.heartbeat.interval.ms", heartbeat,
                 "group.share.min.heartbeat.interval.ms", get("group.share.min.heartbeat.interval.ms", 5_000),
                 "group.share.max.heartbeat.interval.ms", get("group.share.max.heartbeat.interval.ms", 15_000))):
            if high < low:
                raise InvalidConfigError(f"{high_name} must be greater than or equal to {low_name}")
            if value < low:
                raise InvalidConfigError(f"{name} must be greater than or equal to {low_name}")
            if value > high:
                raise InvalidConfigError(f"{name} must be less than or equal to {high_name}")
        if heartbeat >= session:
            raise InvalidConfigError("group.share.heartbeat.interval.ms must be less than "
                                     "group.share.session.timeout.ms")
        max_size = get("group.share.max.size", 200)
        if not 1 <= max_size <= 1_000:
            raise InvalidConfigError(f"group.share.max.size is {max_size}, outside 1..1000")
        raw = get("group.share.assignors", SIMPLE_ASSIGNOR)
        names = tuple(_ASSIGNOR_CLASSES.get(n.strip(), n.strip()) for n in str(raw).split(",") if n.strip())
        if names != (SIMPLE_ASSIGNOR,):
            raise InvalidConfigError(f"group.share.assignors: {raw!r}; the one share assignor is "
                                     f"{SIMPLE_ASSIGNOR!r} (Kafka accepts exactly one)")
        return cls(session, heartbeat, max_size, names)


@dataclass(eq=False)
class ShareMember:
    """One member of a share group; `session_deadline` is ms since the epoch (not persisted)."""

    member_id: str
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topics: frozenset[str]
    member_epoch: int = 0
    previous_member_epoch: int = -1
    assigned: frozenset[TopicPartition] = frozenset()
    session_deadline: int = 0

    def metadata_key(self) -> tuple[object, ...]:
        """What ShareGroupMemberMetadata persists: a change of it is a record to write."""
        return (self.rack_id, self.client_id, self.client_host, self.subscribed_topics)

    def assignment_key(self) -> tuple[int, int, frozenset[TopicPartition]]:
        """What ShareGroupCurrentMemberAssignment persists."""
        return (self.member_epoch, self.previous_member_epoch, self.assigned)


@dataclass(frozen=True)
class ShareHeartbeatAnswer:
    """What a ShareGroupHeartbeat answers: the member's epoch, and its assignment (None: unchanged)."""

    member_id: str
    member_epoch: int
    assignment: frozenset[TopicPartition] | None


def metadata_hash(counts: Mapping[str, int]) -> int:
    """A signed 64-bit digest of the subscribed topics and their partition counts (0 for none): the group's
    MetadataHash. Only this broker compares it, against what it wrote, so its exact function is ours."""
    if not counts:
        return 0
    digest = hashlib.blake2b(repr(sorted(counts.items())).encode(), digest_size=8).digest()
    value: int = struct.unpack(">q", digest)[0]
    return value


@dataclass(eq=False)
class ShareGroup:
    """A share group's members, epochs, target assignment, and the partitions whose share state exists."""

    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    target: dict[str, frozenset[TopicPartition]] = field(default_factory=dict)
    metadata_hash: int = 0
    # The partitions whose share state was initialized (ShareGroupStatePartitionMetadata's InitializedTopics).
    initialized: frozenset[TopicPartition] = frozenset()

    @property
    def state(self) -> str:
        """Kafka's share-group state name: Empty or Stable (Dead is a deleted group's)."""
        return "Stable" if self.members else "Empty"

    def copy(self) -> ShareGroup:
        """A copy to change, so that the group itself changes only once the change is persisted."""
        return ShareGroup(self.group_id, self.group_epoch, self.assignment_epoch,
                          {m: replace(member) for m, member in self.members.items()}, dict(self.target),
                          self.metadata_hash, self.initialized)

    def subscribed_topics(self) -> set[str]:
        """Every topic a member subscribes to."""
        return set().union(*(m.subscribed_topics for m in self.members.values()))

    def assigned_partitions(self) -> set[TopicPartition]:
        """Every partition some member's current assignment names."""
        return set().union(*(m.assigned for m in self.members.values()))

    # -- the heartbeat -------------------------------------------------------------------------

    def heartbeat(self, config: ShareGroupConfig, counts: Mapping[str, int], now: int, *, member_id: str,
                  member_epoch: int, rack_id: str | None = None, subscribed_topics: Iterable[str] | None = None,
                  client_id: str = "", client_host: str = "", session_timeout_ms: int | None = None
                  ) -> ShareHeartbeatAnswer:
        """ShareGroupHeartbeat: join (epoch 0), stay (the member's epoch), leave (-1); `None` fields are
        unchanged since the last heartbeat, as the protocol sends them. `counts`: partitions per topic."""
        check_heartbeat(self.group_id, member_id, member_epoch, rack_id, subscribed_topics)
        if member_epoch == LEAVE_EPOCH:
            if member_id not in self.members:
                raise UnknownMemberIdError(f"Member {member_id} is not a member of group {self.group_id}.")
            self.remove(member_id)
            return ShareHeartbeatAnswer(member_id, LEAVE_EPOCH, None)
        changed = False
        member = self.members.get(member_id)
        if member_epoch == JOIN_EPOCH:
            if member is None:
                if len(self.members) >= config.max_size:
                    raise GroupMaxSizeReachedError(f"The share group has reached its maximum capacity of "
                                                   f"{config.max_size} members.")
                member = ShareMember(member_id, rack_id, client_id, client_host, frozenset())
                self.members[member_id] = member
                changed = True
            else:
                # A member rejoining (it lost its state) starts again from its group's current target.
                member.member_epoch, member.previous_member_epoch = 0, -1
        else:
            if member is None:
                raise UnknownMemberIdError(f"Member {member_id} is not a member of group {self.group_id}.")
            _check_member_epoch(member_epoch, member)
        if subscribed_topics is not None and frozenset(subscribed_topics) != member.subscribed_topics:
            member.subscribed_topics = frozenset(subscribed_topics)
            changed = True
        if rack_id is not None:
            member.rack_id = rack_id
        member.client_id, member.client_host = client_id, client_host
        member.session_deadline = now + (config.session_timeout_ms if session_timeout_ms is None
                                         else session_timeout_ms)
        wanted = {t: counts[t] for t in self.subscribed_topics() if t in counts}
        digest = metadata_hash(wanted)
        if digest != self.metadata_hash:
            self.metadata_hash = digest
            changed = True
        if changed:
            self.group_epoch += 1
        if self.assignment_epoch < self.group_epoch:
            self._compute_target(counts)
        before = member.assigned
        if member.member_epoch != self.assignment_epoch:
            member.previous_member_epoch, member.member_epoch = member.member_epoch, self.assignment_epoch
            member.assigned = self.target.get(member_id, frozenset())
        sent = member.assigned if member_epoch == JOIN_EPOCH or member.assigned != before else None
        return ShareHeartbeatAnswer(member_id, member.member_epoch, sent)

    def remove(self, member_id: str) -> ShareMember:
        """Drop a member (left or session expired): the group epoch moves, the others' targets follow."""
        member = self.members.pop(member_id)
        self.target.pop(member_id, None)
        self.group_epoch += 1
        return member

    def expired(self, now: int) -> list[str]:
        """Members whose session ran out at `now`."""
        return [m.member_id for m in self.members.values() if m.session_deadline <= now]

    def _compute_target(self, counts: Mapping[str, int]) -> None:
        subscriptions = {m.member_id: m.subscribed_topics for m in self.members.values()}
        self.target = simple_assign(subscriptions, counts, self.target)
        self.assignment_epoch = self.group_epoch


def _check_member_epoch(received: int, member: ShareMember) -> None:
    # A member that missed the answer bumping its epoch may still say the previous one.
    if received > member.member_epoch:
        raise FencedMemberEpochError(
            f"The share group member has a greater member epoch ({received}) than the one known by the group "
            f"coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.")
    if received < member.member_epoch and received != member.previous_member_epoch:
        raise FencedMemberEpochError(
            f"The share group member has a smaller member epoch ({received}) than the one known by the group "
            f"coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.")


def check_heartbeat(group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                    subscribed_topics: Iterable[str] | None) -> None:
    """Kafka's throwIfShareGroupHeartbeatRequestIsInvalid (INVALID_REQUEST, Kafka's messages)."""
    if not (group_id or "").strip():
        raise InvalidRequestError("GroupId can't be empty.")
    if not (member_id or "").strip():
        raise InvalidRequestError("MemberId can't be empty.")
    if rack_id is not None and not rack_id.strip():
        raise InvalidRequestError("RackId can't be empty.")
    if member_epoch == JOIN_EPOCH:
        if subscribed_topics is None or not list(subscribed_topics):
            raise InvalidRequestError("SubscribedTopicNames must be set in first request.")
    elif member_epoch < LEAVE_EPOCH:
        raise InvalidRequestError("MemberEpoch is invalid.")


# -- the simple assignor ----------------------------------------------------------------------

def simple_assign(subscriptions: Mapping[str, frozenset[str]], counts: Mapping[str, int],
                  previous: Mapping[str, frozenset[TopicPartition]]) -> dict[str, frozenset[TopicPartition]]:
    """Kafka's simple share assignor: member -> partitions, balanced per topic, sticky towards `previous`
    (see the module doc). Topics that do not exist (not in `counts`) give nothing."""
    assigned: dict[str, set[TopicPartition]] = {m: set() for m in subscriptions}
    topics = sorted({t for topics in subscriptions.values() for t in topics if counts.get(t, 0) > 0})
    for topic in topics:
        members = sorted(m for m, wanted in subscriptions.items() if topic in wanted)
        partitions = counts[topic]
        sharing = -(-len(members) // partitions)
        places = sharing * partitions
        # Member i's share of the places: ceil(places*(i+1)/S) - ceil(places*i/S), which differ by at most one.
        desired = {m: -(-places * (i + 1) // len(members)) - -(-places * i // len(members))
                   for i, m in enumerate(members)}
        holders: dict[int, list[str]] = {p: [] for p in range(partitions)}
        held: dict[str, list[int]] = {m: [] for m in members}
        for m in members:
            kept = sorted(p for t, p in previous.get(m, frozenset()) if t == topic and p < partitions)
            for p in kept:
                if len(held[m]) < desired[m] and len(holders[p]) < sharing:
                    held[m].append(p)
                    holders[p].append(m)
        for p in range(partitions):
            while len(holders[p]) < sharing:
                takers = [m for m in members if len(held[m]) < desired[m] and m not in holders[p]]
                if not takers:
                    break  # Kafka tolerates this slight imbalance too
                taker = min(takers, key=lambda m: (len(held[m]) - desired[m], m))
                held[taker].append(p)
                holders[p].append(taker)
        for m in members:
            assigned[m].update((topic, p) for p in held[m])
    return {m: frozenset(tps) for m, tps in assigned.items()}
