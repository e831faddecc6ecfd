"""One classic consumer group in memory: its members, generation, state and committed offsets.

The rules here are Kafka's ClassicGroup ones: which state may follow which,
how the protocol is chosen (every member votes for its most preferred
protocol among those all members support), who leads, and what a group
looks like persisted as a GroupMetadataValue. Nothing here locks, waits or
writes; `GroupCoordinator` does that around it.
"""
from __future__ import annotations

import enum
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from logstore.broker.coordinator.consumer_protocol import decode_subscription
from logstore.broker.coordinator.group_log import CommittedOffset as CommittedOffset  # native; imported from here
from logstore.broker.coordinator.group_log import GroupFields, GroupValue, MemberValue
from logstore.broker.coordinator.group_results import JoinResult, SyncResult
from logstore.errors import CorruptRecordError

if TYPE_CHECKING:
    from logstore.broker.coordinator.consumer_group import ConsumerGroup

CONSUMER_PROTOCOL = "consumer"


class GroupState(enum.Enum):
    """Kafka's classic group states; the value is the name DescribeGroups and ListGroups report."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_FROM = {
    GroupState.PREPARING_REBALANCE: {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY},
    GroupState.COMPLETING_REBALANCE: {GroupState.PREPARING_REBALANCE},
    GroupState.STABLE: {GroupState.COMPLETING_REBALANCE},
    GroupState.EMPTY: {GroupState.PREPARING_REBALANCE},
    GroupState.DEAD: set(GroupState),
}


@dataclass(eq=False)
class Member:
    """One member of a group, with the replies it is waiting for."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_waiter: Future[JoinResult] | None = None
    sync_waiter: Future[SyncResult] | None = None
    # Joined during this rebalance: expires if it does not finish joining (Kafka's isNew).
    is_new: bool = False
    heartbeat_deadline: int = 0
    timer_at: int | None = None      # the deadline of the member's queued timer

    def metadata(self, protocol: str | None) -> bytes:
        """The member's metadata for `protocol` (its subscription, for consumers); KeyError when it has none
        (for None, the protocol of a group that chose none, it never has)."""
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise KeyError(protocol)

    def same_protocols(self, protocols: list[tuple[str, bytes]]) -> bool:
        """Whether a rejoin asks for exactly what the member has (no rebalance needed)."""
        return [(n, bytes(m)) for n, m in protocols] == [(n, bytes(m)) for n, m in self.protocols]

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among `candidates`."""
        return next(name for name, _ in self.protocols if name in candidates)

    @property
    def awaiting_join(self) -> bool:
        """Whether the member sent a JoinGroup that is not answered yet."""
        return self.join_waiter is not None

    def heartbeat_satisfied(self, now: int) -> bool:
        """Kafka's rule: a member waiting in a rebalance needs no heartbeat, unless it is new."""
        if not self.is_new and (self.join_waiter is not None or self.sync_waiter is not None):
            return True
        return now < self.heartbeat_deadline

    def to_value(self, protocol: str | None) -> MemberValue:
        """The member as GroupMetadataValue persists it."""
        subscription = self.metadata(protocol) if protocol is not None else b""
        return MemberValue(self.member_id, self.group_instance_id, self.client_id, self.client_host,
                           self.rebalance_timeout_ms, self.session_timeout_ms, subscription, self.assignment)


@dataclass(eq=False)
class Group:
    """A classic group and its offsets."""

    group_id: str
    partition: int                       # of __consumer_offsets
    state: GroupState = GroupState.EMPTY
    state_timestamp: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation_id: int = 0
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    # Ids handed out with MEMBER_ID_REQUIRED, not yet joined -> when they are forgotten.
    pending_members: dict[str, int] = field(default_factory=dict)
    new_member_added: bool = False
    # While PreparingRebalance: when the join phase ends at the latest, and what is left
    # of the rebalance timeout after group.initial.rebalance.delay.ms (None: no initial delay).
    join_deadline: int | None = None
    initial_delay_left: int | None = None
    # After a join phase: members yet to send SyncGroup, and when those left are removed.
    pending_sync: set[str] = field(default_factory=set)
    sync_deadline: int | None = None
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    pending_txn_offsets: dict[int, dict[tuple[str, int], CommittedOffset]] = field(default_factory=dict)
    # A KIP-848 consumer group's state; None for a classic group. The classic fields above are then
    # unused: the group's offsets are all it shares with the classic kind.
    consumer: ConsumerGroup | None = None

    # -- state ---------------------------------------------------------------------------

    def transition(self, state: GroupState, now: int) -> None:
        """Move to `state` (Kafka's allowed transitions only)."""
        if self.state not in _FROM[state]:
            raise AssertionError(f"group {self.group_id!r}: {self.state.value} cannot become {state.value}")
        self.state = state
        self.state_timestamp = now

    def is_in(self, *states: GroupState) -> bool:
        """Whether the group is in one of `states`."""
        return self.state in states

    @property
    def is_empty(self) -> bool:
        """No members (pending ones included)."""
        if self.consumer is not None:
            return not self.consumer.members
        return not self.members and not self.pending_members

    @property
    def group_type(self) -> str:
        """Kafka's group type name: "consumer" (KIP-848) or "classic"."""
        return "classic" if self.consumer is None else "consumer"

    @property
    def state_name(self) -> str:
        """The state ListGroups shows: the classic state, or the consumer group's."""
        return self.state.value if self.consumer is None else self.consumer.state

    def consumer_group(self) -> ConsumerGroup:
        """The KIP-848 state of a group the caller knows to be a consumer group."""
        if self.consumer is None:
            raise ValueError(f"group {self.group_id!r} is a classic group, not a consumer group")
        return self.consumer

    # -- membership ------------------------------------------------------------------------

    def add(self, member: Member) -> None:
        """Add a member; the first one leads."""
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.pending_members.pop(member.member_id, None)

    def remove(self, member_id: str) -> Member | None:
        """Remove a member; a new leader is picked if it led."""
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self.pending_sync.discard(member_id)
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def static_member_id(self, group_instance_id: str | None) -> str | None:
        """The member id a static member currently holds."""
        return None if group_instance_id is None else self.static_members.get(group_instance_id)

    def replace_static_member(self, group_instance_id: str, new_member_id: str) -> Member:
        """Give a static member's place, assignment and leadership to a new member id."""
        old = self.members.pop(self.static_members[group_instance_id])
        old_id, old.member_id = old.member_id, new_member_id
        self.members[new_member_id] = old
        self.static_members[group_instance_id] = new_member_id
        if self.leader_id == old_id:
            self.leader_id = new_member_id
        return old

    def all_joined(self) -> bool:
        """Every member has rejoined and no member id handed out is still to join."""
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def not_yet_rejoined(self) -> list[Member]:
        """Members that did not rejoin in this rebalance."""
        return [m for m in self.members.values() if not m.awaiting_join]

    def rebalance_timeout_ms(self) -> int:
        """The longest rebalance timeout of the members (how long a join phase may last)."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def maybe_elect_joined_leader(self) -> bool:
        """Make a member that rejoined the leader if the leader did not; False if none rejoined."""
        leader = self.members.get(self.leader_id) if self.leader_id is not None else None
        if leader is not None and leader.awaiting_join:
            return True
        joined = next((m for m in self.members.values() if m.awaiting_join), None)
        if joined is None:
            return False
        self.leader_id = joined.member_id
        return True

    # -- protocols -----------------------------------------------------------------------

    def candidate_protocols(self) -> set[str]:
        """The protocols every member supports."""
        members = list(self.members.values())
        if not members:
            return set()
        common = {name for name, _ in members[0].protocols}
        for member in members[1:]:
            common &= {name for name, _ in member.protocols}
        return common

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Whether a member with this protocol type and protocols can join."""
        names = {name for name, _ in protocols}
        if not self.members:
            return bool(protocol_type) and bool(names)
        return protocol_type == self.protocol_type and bool(names & self.candidate_protocols())

    def select_protocol(self) -> str:
        """The protocol with most first-choice votes; a tie goes to the leader's preference."""
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        leader = (self.members.get(self.leader_id) if self.leader_id is not None else None) or next(
            iter(self.members.values()))
        preference = [name for name, _ in leader.protocols if name in votes]
        return max(preference, key=lambda name: (votes[name], -preference.index(name)))

    def init_next_generation(self, now: int) -> None:
        """Start the next generation: CompletingRebalance with members, Empty without."""
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition(GroupState.COMPLETING_REBALANCE, now)
        else:
            self.protocol_name = None
            self.transition(GroupState.EMPTY, now)

    def subscribed_topics(self) -> set[str] | None:
        """The topics consumer members subscribe to; None when unknown (not the consumer protocol)."""
        if self.protocol_type != CONSUMER_PROTOCOL or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            try:
                topics.update(decode_subscription(member.metadata(self.protocol_name)).topics)
            except (CorruptRecordError, KeyError):
                return None
        return topics

    # -- persistence ---------------------------------------------------------------------

    def to_value(self) -> GroupValue:
        """The GroupMetadataValue that persists the group."""
        return GroupValue(self.protocol_type or "", self.generation_id, self.protocol_name, self.leader_id,
                          self.state_timestamp, tuple(m.to_value(self.protocol_name) for m in self.members.values()))

    @classmethod
    def from_fields(cls, group_id: str, partition: int, fields: GroupFields, now: int) -> Group:
        """A group as persisted (group_log's `decode_group_fields`): Stable with its members (their sessions
        start now), else Empty."""
        protocol_type, generation, protocol, leader, timestamp, members = fields
        group = cls(group_id, partition, generation_id=generation, protocol_type=protocol_type or None,
                    protocol_name=protocol, state_timestamp=timestamp)
        for member_id, instance_id, client_id, client_host, rebalance_timeout_ms, session_timeout_ms, subscription, \
                assignment in members:
            protocols = [(protocol, subscription)] if protocol is not None else []
            group.add(Member(member_id, instance_id, client_id, client_host, rebalance_timeout_ms, session_timeout_ms,
                             protocol_type, protocols, assignment, heartbeat_deadline=now + session_timeout_ms))
        group.leader_id = leader if leader in group.members else group.leader_id
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY
        return group
