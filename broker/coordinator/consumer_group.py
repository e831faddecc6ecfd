"""One KIP-848 consumer group: the broker assigns, members reconcile by heartbeat, nobody stops the world.

The group has an epoch, bumped whenever what the assignment depends on
changes: a member joins or leaves, a subscription or the chosen server-side
assignor changes, a subscribed topic gains partitions. When the group epoch
passes the target assignment's, the assignor (`logstore.assignors`, sticky
towards the previous target) computes a new target for every member.

Each member then moves towards its target at its own pace, as Kafka's
CurrentAssignmentBuilder moves it:
- it first revokes what the target takes away, keeping its epoch
  (UNREVOKED_PARTITIONS) until a heartbeat shows it no longer owns those;
- then it takes the target's epoch and every target partition no other
  member still holds (owned or being revoked); one still held elsewhere
  waits (UNRELEASED_PARTITIONS) and comes with a later heartbeat.
So no partition is ever held by two members, and a member keeps reading
every partition that stays with it.

Nothing here locks, waits or writes; the caller does (and persists).
Errors are Kafka's: UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH, ...
"""
from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field
from typing import Callable, Mapping

from logstore.assignors import SERVER_ASSIGNORS, MemberSubscription
from logstore.errors import (FencedMemberEpochError, GroupMaxSizeReachedError, InvalidRequestError,
                             UnknownMemberIdError, UnreleasedInstanceIdError, UnsupportedAssignorError)

TopicPartition = tuple[str, int]
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


class MemberState(enum.Enum):
    """Where a member is on its way to its target (the value is the name ConsumerGroupDescribe shows)."""

    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


@dataclass(frozen=True)
class ConsumerGroupConfig:
    """The consumer protocol's broker settings, under Kafka's names in `broker/config.py`."""

    session_timeout_ms: int = 45_000         # group.consumer.session.timeout.ms
    heartbeat_interval_ms: int = 5_000       # group.consumer.heartbeat.interval.ms
    max_size: int = 2**31 - 1                # group.consumer.max.size
    assignors: tuple[str, ...] = ("uniform", "range")  # group.consumer.assignors; the first is the default


@dataclass(eq=False)
class ConsumerMember:
    """One member of a consumer group."""

    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topics: frozenset[str]
    server_assignor: str | None
    rebalance_timeout_ms: int
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: frozenset[TopicPartition] = frozenset()
    pending_revocation: frozenset[TopicPartition] = frozenset()
    session_deadline: int = 0
    revocation_deadline: int | None = None

    def holds(self) -> frozenset[TopicPartition]:
        """Every partition the member may still be reading: assigned, or assigned and not yet revoked."""
        return self.assigned | self.pending_revocation


@dataclass(frozen=True)
class HeartbeatAnswer:
    """What a ConsumerGroupHeartbeat answers: the member's id and epoch, and its assignment (None: unchanged)."""

    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: frozenset[TopicPartition] | None


@dataclass(eq=False)
class ConsumerGroup:
    """A consumer group's members, epochs and target assignment."""

    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, frozenset[TopicPartition]] = field(default_factory=dict)
    # The partition counts of the subscribed topics at the last epoch: a change bumps the epoch.
    subscribed_counts: dict[str, int] = field(default_factory=dict)

    @property
    def state(self) -> str:
        """Kafka's group state name: Empty, Assigning (target behind the epoch), Reconciling or Stable."""
        if not self.members:
            return "Empty"
        if self.assignment_epoch < self.group_epoch:
            return "Assigning"
        if any(m.member_epoch != self.assignment_epoch or m.state is not MemberState.STABLE
               for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    def preferred_assignor(self, config: ConsumerGroupConfig) -> str:
        """The assignor the members ask for most (ties: the configured order), else the default."""
        asked: dict[str, int] = {}
        for member in self.members.values():
            if member.server_assignor is not None:
                asked[member.server_assignor] = asked.get(member.server_assignor, 0) + 1
        if not asked:
            return config.assignors[0]
        return max(config.assignors, key=lambda name: (asked.get(name, 0), -config.assignors.index(name)))

    # -- the heartbeat -------------------------------------------------------------------------

    def heartbeat(self, config: ConsumerGroupConfig, counts: Mapping[str, int], now: int, *, member_id: str,
                  member_epoch: int, instance_id: str | None = None, rack_id: str | None = None,
                  rebalance_timeout_ms: int = -1, subscribed_topics=None, server_assignor: str | None = None,
                  owned=None, client_id: str = "", client_host: str = "",
                  new_member_id: Callable[[], str] = lambda: str(uuid.uuid4())) -> HeartbeatAnswer:
        """ConsumerGroupHeartbeat: join (epoch 0), stay (the member's epoch), leave (-1, or -2 for a static
        member); `None` fields are unchanged since the last heartbeat, as the protocol sends them."""
        if server_assignor is not None and server_assignor not in config.assignors:
            raise UnsupportedAssignorError(f"server assignor {server_assignor!r} is not one of {config.assignors}")
        if member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(config, member_id, member_epoch, instance_id)
        owned = None if owned is None else frozenset(owned)
        if member_epoch == 0:
            member = self._join(config, member_id or new_member_id(), instance_id, rack_id, rebalance_timeout_ms,
                                subscribed_topics, server_assignor, owned, client_id, client_host)
        else:
            member = self._known(member_id, member_epoch, owned)
        changed = member_epoch == 0 and member.member_epoch == 0
        if subscribed_topics is not None and frozenset(subscribed_topics) != member.subscribed_topics:
            member.subscribed_topics = frozenset(subscribed_topics)
            changed = True
        if server_assignor is not None and server_assignor != member.server_assignor:
            member.server_assignor = server_assignor
            changed = True
        if rebalance_timeout_ms >= 0:
            member.rebalance_timeout_ms = rebalance_timeout_ms
        if rack_id is not None:
            member.rack_id = rack_id
        member.session_deadline = now + config.session_timeout_ms
        if changed or self._metadata_changed(counts):
            self.group_epoch += 1
        if self.assignment_epoch < self.group_epoch:
            self._compute_target(config, counts)
        before = (member.member_epoch, member.assigned)
        self._reconcile(member, owned, now)
        sent = member.assigned if (member_epoch == 0 or (member.member_epoch, member.assigned) != before
                                   or (owned is not None and owned != member.assigned)) else None
        return HeartbeatAnswer(member.member_id, member.member_epoch, config.heartbeat_interval_ms, sent)

    def _join(self, config, member_id, instance_id, rack_id, rebalance_timeout_ms, subscribed_topics,
              server_assignor, owned, client_id, client_host) -> ConsumerMember:
        if rebalance_timeout_ms < 0 or subscribed_topics is None or owned is None or owned:
            raise InvalidRequestError("joining (epoch 0) needs RebalanceTimeoutMs, SubscribedTopicNames and an "
                                      "empty TopicPartitions")
        if instance_id is not None:
            holder = next((m for m in self.members.values() if m.instance_id == instance_id), None)
            if holder is not None and holder.member_id != member_id:
                raise UnreleasedInstanceIdError(f"instance {instance_id!r} is still held by {holder.member_id}")
        member = self.members.get(member_id)
        if member is not None:
            # A member rejoining (it lost its state): it starts again from nothing it holds.
            member.assigned, member.pending_revocation = frozenset(), frozenset()
            member.member_epoch, member.previous_member_epoch = 0, -1
            member.state = MemberState.STABLE
            return member
        if len(self.members) >= config.max_size:
            raise GroupMaxSizeReachedError(f"group {self.group_id!r} has {config.max_size} members "
                                           "(group.consumer.max.size)")
        member = ConsumerMember(member_id, instance_id, rack_id, client_id, client_host, frozenset(),
                                server_assignor, rebalance_timeout_ms)
        self.members[member_id] = member
        return member

    def _known(self, member_id: str, member_epoch: int, owned) -> ConsumerMember:
        member = self.members.get(member_id)
        if member is None:
            raise UnknownMemberIdError(f"group {self.group_id!r} has no member {member_id!r}")
        if member_epoch > member.member_epoch:
            raise FencedMemberEpochError(f"epoch {member_epoch} is ahead of the member's {member.member_epoch}")
        if member_epoch < member.member_epoch and not (
                member_epoch == member.previous_member_epoch and owned is not None and owned <= member.assigned):
            # Kafka's one leniency: a member that missed the answer bumping its epoch may still say the
            # previous one, as long as it holds nothing it was not given.
            raise FencedMemberEpochError(f"epoch {member_epoch} is behind the member's {member.member_epoch}")
        return member

    def _leave(self, config, member_id: str, member_epoch: int, instance_id: str | None) -> HeartbeatAnswer:
        if member_id not in self.members:
            raise UnknownMemberIdError(f"group {self.group_id!r} has no member {member_id!r}")
        self.remove(member_id)
        return HeartbeatAnswer(member_id, member_epoch, config.heartbeat_interval_ms, None)

    def remove(self, member_id: str) -> ConsumerMember:
        """Drop a member (left, session expired, or revocation timed out): the others get its partitions."""
        member = self.members.pop(member_id)
        self.target.pop(member_id, None)
        self.group_epoch += 1
        return member

    def expired(self, now: int) -> list[str]:
        """Members whose session ran out, or who did not revoke within their rebalance timeout."""
        return [m.member_id for m in self.members.values()
                if m.session_deadline <= now or (m.revocation_deadline is not None and m.revocation_deadline <= now)]

    # -- assignment --------------------------------------------------------------------------

    def _metadata_changed(self, counts: Mapping[str, int]) -> bool:
        wanted = set().union(*(m.subscribed_topics for m in self.members.values())) if self.members else set()
        now = {t: counts[t] for t in wanted if t in counts}
        if now == self.subscribed_counts:
            return False
        self.subscribed_counts = now
        return True

    def _compute_target(self, config: ConsumerGroupConfig, counts: Mapping[str, int]) -> None:
        assign = SERVER_ASSIGNORS[self.preferred_assignor(config)]
        subscriptions = {m.member_id: MemberSubscription(m.subscribed_topics, self.target.get(m.member_id, frozenset()))
                         for m in self.members.values()}
        self.subscribed_counts = {t: counts[t] for s in subscriptions.values() for t in s.topics if t in counts}
        self.target = dict(assign(subscriptions, self.subscribed_counts))
        self.assignment_epoch = self.group_epoch

    def _reconcile(self, member: ConsumerMember, owned, now: int) -> None:
        """Move the member towards its target as far as the others allow (see the module doc)."""
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            if owned is None or owned & member.pending_revocation:
                return  # still revoking
            member.pending_revocation = frozenset()
            member.revocation_deadline = None
        target = self.target.get(member.member_id, frozenset())
        if member.member_epoch == self.assignment_epoch and member.state is MemberState.STABLE:
            return
        revoke = member.assigned - target
        if revoke:
            member.assigned -= revoke
            member.pending_revocation = revoke
            member.state = MemberState.UNREVOKED_PARTITIONS
            member.revocation_deadline = now + member.rebalance_timeout_ms
            return
        if member.member_epoch != self.assignment_epoch:
            member.previous_member_epoch, member.member_epoch = member.member_epoch, self.assignment_epoch
        held = set()
        for other in self.members.values():
            if other is not member:
                held |= other.holds()
        member.assigned = member.assigned | frozenset(tp for tp in target if tp not in held)
        member.state = MemberState.STABLE if member.assigned == target else MemberState.UNRELEASED_PARTITIONS
