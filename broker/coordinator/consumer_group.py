"""One KIP-848 consumer group: the broker assigns, members reconcile by heartbeat, nobody stops the world.

The group has an epoch, bumped whenever what the assignment depends on
changes: a member joins or leaves, a subscription or the chosen server-side
assignor changes, a subscribed topic gains partitions (or a regular
expression comes to match another topic). When the group epoch passes the
target assignment's, the assignor (`logstore.assignors`, sticky towards the
previous target) computes a new target for every member.

Each member then moves towards its target at its own pace, as Kafka's
CurrentAssignmentBuilder moves it:
- it first revokes what the target takes away, keeping its epoch
  (UNREVOKED_PARTITIONS) until a heartbeat shows it no longer owns those;
- then it takes the target's epoch and every target partition no other
  member still holds (owned or being revoked); one still held elsewhere
  waits (UNRELEASED_PARTITIONS) and comes with a later heartbeat.
So no partition is ever held by two members, and a member keeps reading
every partition that stays with it.

A member may also speak the classic protocol (JoinGroup, SyncGroup,
Heartbeat) inside a consumer group, as Kafka's online migration has it
(group_migration.py): it carries its `ClassicMetadata`, reports what it
owns only when it rejoins, and is not timed for its revocations: the
coordinator times its join and sync instead (`classic_deadline`).

A static member (instance id) that leaves with epoch -2 keeps its
partitions, held for it, until a member with its instance id joins and
takes them over, or its session expires.

Nothing here locks, waits or writes; the caller does (and persists).
Errors are Kafka's: UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH, ...
"""
from __future__ import annotations

import enum
import re
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from logstore.assignors import SERVER_ASSIGNORS, MemberSubscription
from logstore.broker.coordinator.consumer_protocol import Subscription
from logstore.errors import (
    FencedInstanceIdError,
    FencedMemberEpochError,
    GroupMaxSizeReachedError,
    InvalidConfigError,
    InvalidRegularExpressionError,
    InvalidRequestError,
    UnknownMemberIdError,
    UnreleasedInstanceIdError,
    UnsupportedAssignorError,
)

TopicPartition = tuple[str, int]
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
# Kafka's assignor class names, as group.consumer.assignors may list them.
_ASSIGNOR_CLASSES = {"org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
                     "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range"}
MIGRATION_POLICIES = ("disabled", "upgrade", "downgrade", "bidirectional")


class MemberState(enum.Enum):
    """Where a member is on its way to its target (the value is the name ConsumerGroupDescribe shows)."""

    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


@dataclass(frozen=True)
class ConsumerGroupConfig:
    """The consumer protocol's broker settings (ms), under Kafka's names in `from_settings`."""

    session_timeout_ms: int = 45_000         # group.consumer.session.timeout.ms
    heartbeat_interval_ms: int = 5_000       # group.consumer.heartbeat.interval.ms
    max_size: int = 2**31 - 1                # group.consumer.max.size
    assignors: tuple[str, ...] = ("uniform", "range")  # group.consumer.assignors; the first is the default
    migration_policy: str = "bidirectional"  # group.consumer.migration.policy

    @property
    def upgrade_enabled(self) -> bool:
        """Whether a classic group with members may become a consumer group (and classic members join one)."""
        return self.migration_policy in ("upgrade", "bidirectional")

    @property
    def downgrade_enabled(self) -> bool:
        """Whether a consumer group left with classic members only goes back to being a classic group."""
        return self.migration_policy in ("downgrade", "bidirectional")

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> ConsumerGroupConfig:
        """From broker settings, checked as Kafka's GroupCoordinatorConfig checks them."""
        # Broker settings are whatever the config file or the caller gave: checked below, not typed.
        def get(name: str, default: int | str) -> Any:
            return settings.get(name, default)

        session = get("group.consumer.session.timeout.ms", 45_000)
        heartbeat = get("group.consumer.heartbeat.interval.ms", 5_000)
        for name, value, low, high in (
                ("group.consumer.session.timeout.ms", session, get("group.consumer.min.session.timeout.ms", 45_000),
                 get("group.consumer.max.session.timeout.ms", 60_000)),
                ("group.consumer.heartbeat.interval.ms", heartbeat,
                 get("group.consumer.min.heartbeat.interval.ms", 5_000),
                 get("group.consumer.max.heartbeat.interval.ms", 15_000))):
            if not low <= value <= high:
                raise InvalidConfigError(f"{name} is {value}, outside its min/max {low}..{high}")
        if heartbeat >= session:
            raise InvalidConfigError("group.consumer.heartbeat.interval.ms must be less than "
                                     "group.consumer.session.timeout.ms")
        raw = get("group.consumer.assignors", "uniform,range")
        names = tuple(_ASSIGNOR_CLASSES.get(n.strip(), n.strip()) for n in str(raw).split(",") if n.strip())
        unknown = [n for n in names if n not in SERVER_ASSIGNORS]
        if not names or unknown:
            raise InvalidConfigError(
                f"group.consumer.assignors: {unknown or raw!r} not among {sorted(SERVER_ASSIGNORS)}")
        policy = str(get("group.consumer.migration.policy", "bidirectional")).strip().lower()
        if policy not in MIGRATION_POLICIES:
            raise InvalidConfigError(f"group.consumer.migration.policy={policy}: not one of "
                                     f"{', '.join(MIGRATION_POLICIES)}")
        return cls(session, heartbeat, get("group.consumer.max.size", 2**31 - 1), names, policy)


@dataclass(frozen=True)
class ClassicMetadata:
    """What a member speaking the classic protocol joined with: its session timeout (ms) and its
    protocols (name, ConsumerProtocol subscription) in preference order."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]

    @property
    def protocol_name(self) -> str:
        """The protocol its JoinGroup and SyncGroup answers name: its first choice, as in Kafka."""
        return self.protocols[0][0]


@dataclass(eq=False)
class ConsumerMember:
    """One member of a consumer group; deadlines are ms since the epoch."""

    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topics: frozenset[str]
    server_assignor: str | None
    rebalance_timeout_ms: int
    subscribed_regex: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: frozenset[TopicPartition] = frozenset()
    pending_revocation: frozenset[TopicPartition] = frozenset()
    session_deadline: int = 0
    revocation_deadline: int | None = None
    classic: ClassicMetadata | None = None   # set while the member speaks the classic protocol
    classic_deadline: int | None = None      # a classic member's JoinGroup or SyncGroup is due by then

    def classic_metadata(self) -> ClassicMetadata:
        """The classic metadata of a member the caller knows to speak the classic protocol."""
        if self.classic is None:
            raise ValueError(f"member {self.member_id} speaks the consumer protocol, not the classic one")
        return self.classic

    def holds(self) -> frozenset[TopicPartition]:
        """Every partition the member may still be reading: assigned, or assigned and not yet revoked."""
        return self.assigned | self.pending_revocation

    def deadlines(self) -> list[int]:
        """When the member is removed unless it acts: its session, and a revocation, join or sync due (ms)."""
        return [d for d in (self.session_deadline, self.revocation_deadline, self.classic_deadline) if d is not None]

    def topics(self, counts: Mapping[str, int]) -> frozenset[str]:
        """The topics the member consumes: its names, and the existing topics its regex matches."""
        if not self.subscribed_regex:
            return self.subscribed_topics
        pattern = _compiled(self.subscribed_regex)
        return self.subscribed_topics | frozenset(
            t for t in counts if not t.startswith("__") and pattern.fullmatch(t))

    def metadata_key(self) -> tuple[object, ...]:
        """What ConsumerGroupMemberMetadata persists: a change of it is a record to write."""
        return (self.instance_id, self.rack_id, self.client_id, self.client_host, self.subscribed_topics,
                self.subscribed_regex, self.rebalance_timeout_ms, self.server_assignor, self.classic)

    def assignment_key(self) -> tuple[int, int, MemberState, frozenset[TopicPartition], frozenset[TopicPartition]]:
        """What ConsumerGroupCurrentMemberAssignment persists."""
        return (self.member_epoch, self.previous_member_epoch, self.state, self.assigned, self.pending_revocation)


def _compiled(regex: str) -> re.Pattern[str]:
    try:
        return re.compile(regex)
    except re.error as exc:
        raise InvalidRegularExpressionError(f"SubscribedTopicRegex {regex!r} is not valid: {exc}") from None


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

    def copy(self) -> ConsumerGroup:
        """A copy to change, so that the group itself changes only once the change is persisted."""
        return ConsumerGroup(self.group_id, self.group_epoch, self.assignment_epoch,
                             {m: replace(member) for m, member in self.members.items()}, dict(self.target),
                             dict(self.subscribed_counts))

    def preferred_assignor(self, config: ConsumerGroupConfig) -> str:
        """The assignor the members ask for most (ties: the configured order), else the default."""
        asked: dict[str, int] = {}
        for member in self.members.values():
            if member.server_assignor is not None:
                asked[member.server_assignor] = asked.get(member.server_assignor, 0) + 1
        if not asked:
            return config.assignors[0]
        return max(config.assignors, key=lambda name: (asked.get(name, 0), -config.assignors.index(name)))

    def static_member(self, instance_id: str | None) -> ConsumerMember | None:
        """The member holding a static instance id, if any."""
        if instance_id is None:
            return None
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)

    def subscribed_topics(self) -> set[str]:
        """Every topic a member consumes (regular expressions resolved at the last epoch)."""
        return set(self.subscribed_counts) | set().union(*(m.subscribed_topics for m in self.members.values()))

    # -- the heartbeat -------------------------------------------------------------------------

    def heartbeat(self, config: ConsumerGroupConfig, counts: Mapping[str, int], now: int, *, member_id: str,
                  member_epoch: int, instance_id: str | None = None, rack_id: str | None = None,
                  rebalance_timeout_ms: int = -1, subscribed_topics: Iterable[str] | None = None,
                  subscribed_regex: str | None = None, server_assignor: str | None = None,
                  owned: Iterable[TopicPartition] | None = None, client_id: str = "", client_host: str = "",
                  new_member_id: Callable[[], str] = lambda: str(uuid.uuid4())) -> HeartbeatAnswer:
        """ConsumerGroupHeartbeat: join (epoch 0), stay (the member's epoch), leave (-1, or -2 for a static
        member); `None` fields are unchanged since the last heartbeat, as the protocol sends them."""
        if server_assignor is not None and server_assignor not in config.assignors:
            raise UnsupportedAssignorError(f"ServerAssignor {server_assignor} is not supported. Supported "
                                           f"assignors: {', '.join(config.assignors)}.")
        if subscribed_regex:
            _compiled(subscribed_regex)
        if member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(config, member_id, member_epoch, instance_id)
        owned = None if owned is None else frozenset(owned)
        if member_epoch == 0:
            member = self._join(config, member_id or new_member_id(), instance_id, rack_id, rebalance_timeout_ms,
                                subscribed_topics, subscribed_regex, server_assignor, owned, client_id, client_host)
        else:
            member = self._known(member_id, member_epoch, instance_id, owned)
        changed = member_epoch == 0 and member.member_epoch == 0
        if subscribed_topics is not None and frozenset(subscribed_topics) != member.subscribed_topics:
            member.subscribed_topics = frozenset(subscribed_topics)
            changed = True
        if subscribed_regex is not None and (subscribed_regex or None) != member.subscribed_regex:
            member.subscribed_regex = subscribed_regex or None
            changed = True
        if server_assignor is not None and server_assignor != member.server_assignor:
            member.server_assignor = server_assignor
            changed = True
        if rebalance_timeout_ms >= 0:
            member.rebalance_timeout_ms = rebalance_timeout_ms
        if rack_id is not None:
            member.rack_id = rack_id
        if client_id:
            member.client_id, member.client_host = client_id, client_host
        member.session_deadline = now + config.session_timeout_ms
        if self._metadata_changed(counts) or changed:
            self.group_epoch += 1
        if self.assignment_epoch < self.group_epoch:
            self._compute_target(config, counts)
        before = (member.member_epoch, member.assigned)
        self._reconcile(member, owned, now)
        full = rebalance_timeout_ms >= 0 and owned is not None and (
            subscribed_topics is not None or subscribed_regex is not None)
        sent = member.assigned if (member_epoch == 0 or full or (member.member_epoch, member.assigned) != before
                                   or (owned is not None and owned != member.assigned)) else None
        return HeartbeatAnswer(member.member_id, member.member_epoch, config.heartbeat_interval_ms, sent)

    def _join(self, config: ConsumerGroupConfig, member_id: str, instance_id: str | None, rack_id: str | None,
              rebalance_timeout_ms: int, subscribed_topics: Iterable[str] | None, subscribed_regex: str | None,
              server_assignor: str | None, owned: frozenset[TopicPartition] | None, client_id: str,
              client_host: str) -> ConsumerMember:
        check_join_fields(rebalance_timeout_ms, owned, subscribed_topics, subscribed_regex)
        member: ConsumerMember | None
        holder = self.static_member(instance_id)
        if holder is not None and holder.member_id != member_id:
            if holder.member_epoch != STATIC_LEAVE_EPOCH and holder.classic is None:
                raise UnreleasedInstanceIdError(
                    f"Static member {member_id} with instance id {instance_id} cannot join the group because the "
                    f"instance id is owned by {holder.member_id} member.")
            member = self._replace_static(holder, member_id)
            if member.classic is not None:
                # A classic instance restarted with the consumer protocol (Kafka takes its place at once).
                member.classic = member.classic_deadline = None
                member.member_epoch = member.previous_member_epoch = 0
            return member
        member = self.members.get(member_id)
        if member is not None:
            # A member rejoining (it lost its state): it starts again from nothing it holds.
            member.assigned, member.pending_revocation = frozenset(), frozenset()
            member.member_epoch, member.previous_member_epoch = 0, -1
            member.state = MemberState.STABLE
            member.revocation_deadline = None
            return member
        if len(self.members) >= config.max_size:
            raise GroupMaxSizeReachedError(f"The consumer group has reached its maximum capacity of "
                                           f"{config.max_size} members.")
        member = ConsumerMember(member_id, instance_id, rack_id, client_id, client_host, frozenset(),
                                server_assignor, rebalance_timeout_ms)
        self.members[member_id] = member
        return member

    def _replace_static(self, old: ConsumerMember, member_id: str) -> ConsumerMember:
        """A restarted static member takes over the place, partitions and target its instance left."""
        del self.members[old.member_id]
        member = replace(old, member_id=member_id, member_epoch=old.previous_member_epoch
                         if old.member_epoch == STATIC_LEAVE_EPOCH else old.member_epoch)
        self.members[member_id] = member
        if old.member_id in self.target:
            self.target[member_id] = self.target.pop(old.member_id)
        return member

    def _check_instance(self, member_id: str, instance_id: str | None) -> None:
        """A static member's request must come from the member holding its instance id now."""
        if instance_id is not None:
            holder = self.static_member(instance_id)
            if holder is None:
                raise UnknownMemberIdError(f"Instance id {instance_id} is unknown.")
            if holder.member_id != member_id:
                raise FencedInstanceIdError(f"Static member {member_id} with instance id {instance_id} was fenced "
                                            f"by member {holder.member_id}.")

    def _known(self, member_id: str, member_epoch: int, instance_id: str | None,
               owned: frozenset[TopicPartition] | None) -> ConsumerMember:
        self._check_instance(member_id, instance_id)
        member = self.members.get(member_id)
        if member is None:
            raise UnknownMemberIdError(f"Member {member_id} is not a member of group {self.group_id}.")
        if member_epoch > member.member_epoch:
            raise FencedMemberEpochError(
                f"The consumer group member has a greater member epoch ({member_epoch}) than the one known by the "
                f"group coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.")
        if member_epoch < member.member_epoch and not (
                member_epoch == member.previous_member_epoch and owned is not None and owned <= member.assigned):
            # Kafka's one leniency: a member that missed the answer bumping its epoch may still say the
            # previous one, as long as it holds nothing it was not given.
            raise FencedMemberEpochError(
                f"The consumer group member has a smaller member epoch ({member_epoch}) than the one known by the "
                f"group coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.")
        return member

    def _leave(self, config: ConsumerGroupConfig, member_id: str, member_epoch: int,
               instance_id: str | None) -> HeartbeatAnswer:
        self._check_instance(member_id, instance_id)
        member = self.members.get(member_id)
        if member is None:
            raise UnknownMemberIdError(f"Member {member_id} is not a member of group {self.group_id}.")
        if member_epoch == STATIC_LEAVE_EPOCH:
            # It means to come back: its partitions wait for it (held, no one else gets them).
            if member.member_epoch != STATIC_LEAVE_EPOCH:
                member.previous_member_epoch = member.member_epoch
            member.member_epoch = STATIC_LEAVE_EPOCH
        else:
            self.remove(member_id)
        return HeartbeatAnswer(member_id, member_epoch, config.heartbeat_interval_ms, None)

    def remove(self, member_id: str) -> ConsumerMember:
        """Drop a member (left, session expired, or revocation timed out): the others get its partitions."""
        member = self.members.pop(member_id)
        self.target.pop(member_id, None)
        self.group_epoch += 1
        return member

    def expired(self, now: int) -> list[str]:
        """Members whose session ran out, or who did not revoke (or, classic, join or sync) in time."""
        return [m.member_id for m in self.members.values() if min(m.deadlines()) <= now]

    def next_deadline(self) -> int | None:
        """The earliest deadline of the members (sessions, revocations, classic joins and syncs)."""
        return min((min(m.deadlines()) for m in self.members.values()), default=None)

    # -- assignment --------------------------------------------------------------------------

    def _wanted(self, counts: Mapping[str, int]) -> dict[str, frozenset[str]]:
        return {m.member_id: m.topics(counts) for m in self.members.values()}

    def _metadata_changed(self, counts: Mapping[str, int]) -> bool:
        wanted = set().union(*self._wanted(counts).values()) if self.members else set()
        now = {t: counts[t] for t in wanted if t in counts}
        if now == self.subscribed_counts:
            return False
        self.subscribed_counts = now
        return True

    def _compute_target(self, config: ConsumerGroupConfig, counts: Mapping[str, int]) -> None:
        assign = SERVER_ASSIGNORS[self.preferred_assignor(config)]
        wanted = self._wanted(counts)
        subscriptions = {m: MemberSubscription(topics, self.target.get(m, frozenset())) for m, topics in wanted.items()}
        self.subscribed_counts = {t: counts[t] for s in subscriptions.values() for t in s.topics if t in counts}
        self.target = dict(assign(subscriptions, self.subscribed_counts))
        self.assignment_epoch = self.group_epoch

    def _reconcile(self, member: ConsumerMember, owned: frozenset[TopicPartition] | None, now: int) -> None:
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
        # A classic member reports what it owns only when it rejoins; what it no longer owns then
        # needs no revocation (Kafka's CurrentAssignmentBuilder rule).
        if revoke and (member.classic is None or owned is None or owned & revoke):
            member.assigned -= revoke
            member.pending_revocation = revoke
            member.state = MemberState.UNREVOKED_PARTITIONS
            if member.classic is None:   # a classic member's rejoin is timed instead
                member.revocation_deadline = now + member.rebalance_timeout_ms
            return
        member.assigned -= revoke
        if member.member_epoch != self.assignment_epoch:
            member.previous_member_epoch, member.member_epoch = member.member_epoch, self.assignment_epoch
        held: set[tuple[str, int]] = set()
        for other in self.members.values():
            if other is not member:
                held |= other.holds()
        member.assigned = member.assigned | frozenset(tp for tp in target if tp not in held)
        member.state = MemberState.STABLE if member.assigned == target else MemberState.UNRELEASED_PARTITIONS

    # -- members speaking the classic protocol ---------------------------------------------------

    def classic_join(self, config: ConsumerGroupConfig, counts: Mapping[str, int], now: int, *, member_id: str,
                     instance_id: str | None, rebalance_timeout_ms: int, classic: ClassicMetadata,
                     subscription: Subscription, client_id: str = "", client_host: str = "", new_id: bool = False
                     ) -> ConsumerMember:
        """A JoinGroup inside the consumer group (Kafka's classicGroupJoinToConsumerGroup): the member's
        subscription (a decoded ConsumerProtocol one) is taken as a heartbeat's, and its owned partitions
        acknowledge revocations; `new_id` when the coordinator just made its id. The member's epoch is the
        generation it is answered."""
        member: ConsumerMember | None
        holder = self.static_member(instance_id)
        if holder is not None and holder.member_id != member_id:
            if not new_id:
                raise FencedInstanceIdError(f"Static member {member_id} with instance id {instance_id} was fenced "
                                            f"by member {holder.member_id}.")
            # A static member restarted under a new id takes over its instance's place; the old id is fenced.
            member = self._replace_static(holder, member_id)
            member.member_epoch = member.previous_member_epoch = 0
        else:
            member = self.members.get(member_id)
        if member is None:
            if len(self.members) >= config.max_size:
                raise GroupMaxSizeReachedError(f"The consumer group has reached its maximum capacity of "
                                               f"{config.max_size} members.")
            member = ConsumerMember(member_id, instance_id, None, client_id, client_host, frozenset(), None,
                                    rebalance_timeout_ms)
            self.members[member_id] = member
            changed = True
        else:
            changed = False
        topics = frozenset(subscription.topics)
        if topics != member.subscribed_topics:
            member.subscribed_topics = topics
            changed = True
        if instance_id is not None:
            member.instance_id = instance_id
        if subscription.rack_id is not None:
            member.rack_id = subscription.rack_id
        if rebalance_timeout_ms >= 0:
            member.rebalance_timeout_ms = rebalance_timeout_ms
        member.client_id, member.client_host, member.classic = client_id, client_host, classic
        member.session_deadline = now + classic.session_timeout_ms
        if self._metadata_changed(counts) or changed:
            self.group_epoch += 1
        if self.assignment_epoch < self.group_epoch:
            self._compute_target(config, counts)
        owned = frozenset((topic, p) for topic, ps in subscription.owned_partitions for p in ps)
        self._reconcile(member, owned, now)
        return member

    def waiting_on_unreleased(self, member: ConsumerMember) -> bool:
        """Whether a partition of the member's target is still held by another member."""
        if member.state is not MemberState.UNRELEASED_PARTITIONS:
            return False
        missing = self.target.get(member.member_id, frozenset()) - member.assigned
        return any(missing & other.holds() for other in self.members.values() if other is not member)

    def must_rejoin(self, member: ConsumerMember) -> bool:
        """Kafka's rule for a classic member's Heartbeat: rejoin when the group moved on, when it has
        partitions to give up, or when partitions it waits for are free now."""
        return (member.member_epoch < self.group_epoch or member.state is MemberState.UNREVOKED_PARTITIONS
                or (member.state is MemberState.UNRELEASED_PARTITIONS and not self.waiting_on_unreleased(member)))

    def only_classic_besides(self, member_id: str) -> bool:
        """Whether `member_id` is the one member speaking the consumer protocol (Kafka's
        allMembersUseClassicProtocolExcept)."""
        member = self.members.get(member_id)
        return member is not None and member.classic is None and all(
            m.classic is not None for m in self.members.values() if m is not member)


def check_join_fields(rebalance_timeout_ms: int, owned: Collection[object] | None,
                      subscribed_topics: Iterable[str] | None, subscribed_regex: str | None) -> None:
    """What a (re)join (epoch 0) must carry, with Kafka's messages."""
    if rebalance_timeout_ms < 0:
        raise InvalidRequestError("RebalanceTimeoutMs must be provided in first request.")
    if owned is None or owned:
        raise InvalidRequestError("TopicPartitions must be empty when (re-)joining.")
    if subscribed_topics is None and subscribed_regex is None:
        raise InvalidRequestError("Either SubscribedTopicNames or SubscribedTopicRegex must be non-null "
                                  "when (re-)joining.")
