"""Online migration of a group with members between the classic and the consumer protocols (KIP-848).

Kafka 4's group coordinator lets a group change protocol while it runs,
as `group.consumer.migration.policy` allows (upgrade, downgrade,
bidirectional; disabled refuses both, and only empty groups convert):

- Upgrade. A ConsumerGroupHeartbeat joining a Stable classic group of the
  "consumer" protocol type turns it into a consumer group. Its members stay
  in, still speaking the classic protocol: each keeps what the last
  SyncGroup gave it (its target and its assignment, epoch = the
  generation), its subscription is read from its JoinGroup metadata. The
  classic GroupMetadata record is tombstoned and the consumer-group records
  of the new group written, before the heartbeat's own.
- Classic members inside a consumer group. A JoinGroup is taken as a
  heartbeat: the subscription and owned partitions come from its
  ConsumerProtocol metadata, the server-side assignor sets the target, and
  the answer's generation is the member's epoch (nobody leads; SyncGroup
  answers each member its own assignment, encoded at the version of its
  metadata). A Heartbeat answers REBALANCE_IN_PROGRESS when the member must
  rejoin (the group epoch moved past it, it has partitions to give up, or
  partitions it waited for are free). LeaveGroup and session expiry remove
  it. Instead of a revocation timeout it has a deadline for its SyncGroup
  after a join, and for its JoinGroup once told to rejoin.
- Downgrade. When the last member speaking the consumer protocol leaves
  (epoch -1) or is removed, and the classic members left fit in
  `group.max.size`, the group becomes a classic group again: the consumer
  records are tombstoned, a GroupMetadata record (generation = the group
  epoch, each member's target as its assignment) written, and a rebalance
  starts, so the members rejoin the classic way. A last consumer-protocol
  member that is static and comes back (new member id, same instance) with
  a JoinGroup downgrades the group too, without a rebalance: the new
  instance takes the old one's place and target.

The conversions here are pure; `GroupMigration` is the part of the
coordinator that calls them under its lock, appends, then swaps the state.
It starts a classic rebalance through `ClassicRebalancer` and keeps the
members' timers through `ConsumerTimers`; the calls reach it from the
coordinator's routing and from `ConsumerGroupManager`.
"""
from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable

from logstore.broker.coordinator.classic_rebalance import ClassicRebalancer
from logstore.broker.coordinator.consumer_group import ClassicMetadata, ConsumerGroup, ConsumerMember, MemberState
from logstore.broker.coordinator.consumer_group_log import records_between
from logstore.broker.coordinator.consumer_protocol import (
    Assignment,
    decode_assignment,
    decode_subscription,
    encode_assignment,
)
from logstore.broker.coordinator.consumer_timers import ConsumerTimers
from logstore.broker.coordinator.group_config import GroupConfig
from logstore.broker.coordinator.group_context import Effects, GroupContext
from logstore.broker.coordinator.group_log import encode_group_key, encode_group_value
from logstore.broker.coordinator.group_state import CONSUMER_PROTOCOL, Group, GroupState, Member
from logstore.broker.coordinator.group_store import GroupStore
from logstore.errors import (
    CoordinatorNotAvailableError,
    CorruptRecordError,
    FencedInstanceIdError,
    GroupMaxSizeReachedError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    LogStoreError,
    MemberIdRequiredError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
Records = list[tuple[bytes, bytes | None]]


# -- the conversions ---------------------------------------------------------------------------------

def consumer_group_from_classic(group: Group, now: int) -> ConsumerGroup:
    """The consumer group a Stable classic group becomes (Kafka's ConsumerGroup.fromClassicGroup).

    Raises CorruptRecordError when a member's ConsumerProtocol blobs do not decode."""
    epoch = group.generation_id
    consumer = ConsumerGroup(group.group_id, group_epoch=epoch, assignment_epoch=epoch)
    for m in group.members.values():
        subscription = decode_subscription(m.metadata(group.protocol_name))
        assigned = frozenset((topic, p) for topic, ps in decode_assignment(m.assignment).partitions for p in ps)
        classic = ClassicMetadata(m.session_timeout_ms, tuple((n, bytes(b)) for n, b in m.protocols))
        consumer.members[m.member_id] = ConsumerMember(
            m.member_id, m.group_instance_id, subscription.rack_id, m.client_id, m.client_host,
            frozenset(subscription.topics), None, m.rebalance_timeout_ms, member_epoch=epoch,
            previous_member_epoch=epoch, state=MemberState.STABLE, assigned=assigned,
            session_deadline=now + m.session_timeout_ms, classic=classic)
        consumer.target[m.member_id] = assigned
    return consumer


def classic_group_from_consumer(consumer: ConsumerGroup, leaving: str, partition: int, now: int) -> Group:
    """The Stable classic group a consumer group becomes without `leaving` (Kafka's
    ClassicGroup.fromConsumerGroup): generation = the group epoch, each member's target its assignment."""
    group = Group(consumer.group_id, partition, state=GroupState.STABLE, state_timestamp=now,
                  protocol_type=CONSUMER_PROTOCOL, generation_id=consumer.group_epoch)
    for m in consumer.members.values():
        if m.member_id != leaving:
            classic = m.classic_metadata()
            group.add(Member(m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                             classic.session_timeout_ms, CONSUMER_PROTOCOL, list(classic.protocols)))
    group.protocol_name = group.select_protocol()
    for member in group.members.values():
        member.assignment = assignment_bytes(consumer.target.get(member.member_id, frozenset()),
                                             member.metadata(group.protocol_name))
    return group


def assignment_bytes(partitions: Iterable[TopicPartition], metadata: bytes) -> bytes:
    """A ConsumerProtocolAssignment of `partitions`, at the version of the member's subscription `metadata`."""
    grouped: dict[str, list[int]] = {}
    for topic, p in sorted(partitions):
        grouped.setdefault(topic, []).append(p)
    version = decode_subscription(metadata).version
    return encode_assignment(Assignment(tuple((t, tuple(ps)) for t, ps in grouped.items()), version=version))


# -- the coordinator's part -------------------------------------------------------------------------

class GroupMigration:
    """Conversions between the protocols and the classic calls on consumer groups. Every method runs under
    the context's lock, which the caller holds; times are ms."""

    def __init__(self, context: GroupContext, groups: GroupStore, config: GroupConfig,
                 rebalancer: ClassicRebalancer, timers: ConsumerTimers) -> None:
        self._context = context
        self._groups = groups
        self._config = config
        self._rebalancer = rebalancer
        self._timers = timers

    # -- upgrade -------------------------------------------------------------------------------

    def may_upgrade(self, group: Group) -> bool:
        """Kafka's validateOnlineUpgrade, and the group must be Stable (its assignment known)."""
        why = None
        if not self._config.consumer.upgrade_enabled:
            why = f"group.consumer.migration.policy is {self._config.consumer.migration_policy}"
        elif group.protocol_type != CONSUMER_PROTOCOL:
            why = f"its protocol type is {group.protocol_type!r}, not {CONSUMER_PROTOCOL!r}"
        elif not group.is_in(GroupState.STABLE):
            why = f"it is {group.state.value}, not Stable"
        elif len(group.members) > self._config.consumer.max_size:
            why = "it has more members than group.consumer.max.size"
        if why is not None:
            log.info("group %r: not upgraded to a consumer group: %s", group.group_id, why)
        return why is None

    def upgrade_records(self, group: Group, upgraded: ConsumerGroup) -> Records:
        """The records of an upgrade: the classic record's tombstone, then the consumer group's records."""
        return [(encode_group_key(group.group_id), None)] + records_between(None, upgraded, self._context.topic_id)

    def upgraded(self, group: Group, fx: Effects) -> None:
        """After the upgrade's records: answer what classic calls wait, forget the classic state."""
        again = RebalanceInProgressError(f"group {group.group_id!r} became a consumer group: rejoin")
        for member in group.members.values():
            fx.answer(member.join_waiter, again)
            fx.answer(member.sync_waiter, again)
        # What is left of the classic group is what an empty group is, should the id become classic again.
        group.members, group.static_members, group.pending_members = {}, {}, {}
        group.pending_sync.clear()
        group.leader_id = group.protocol_name = group.protocol_type = None
        group.join_deadline = group.sync_deadline = group.initial_delay_left = None
        group.state, group.generation_id, group.new_member_added = GroupState.EMPTY, 0, False
        consumer = group.consumer_group()
        for member_id in consumer.members:
            self._timers.watch(group, member_id)
        log.info("group %r: classic group with members upgraded to a consumer group (epoch %d)", group.group_id,
                 consumer.group_epoch)

    # -- downgrade -----------------------------------------------------------------------------

    def may_downgrade(self, consumer: ConsumerGroup, leaving: str) -> bool:
        """Kafka's validateOnlineDowngradeWithFencedMember: `leaving` is the last consumer-protocol member."""
        if not consumer.only_classic_besides(leaving) or len(consumer.members) <= 1:
            return False
        if not self._config.consumer.downgrade_enabled:
            log.info("group %r: not downgraded to a classic group: group.consumer.migration.policy is %s",
                     consumer.group_id, self._config.consumer.migration_policy)
            return False
        if len(consumer.members) - 1 > self._config.max_size:
            log.info("group %r: not downgraded to a classic group: more members than group.max.size",
                     consumer.group_id)
            return False
        return True

    def downgrade(self, group: Group, leaving: str, now: int, fx: Effects, source: ConsumerGroup | None = None
                  ) -> None:
        """Write the downgrade's records, make the group classic and start a rebalance; raises LogStoreError
        (the group unchanged) when the records cannot be appended. `source`: the members to keep, when a
        join changed them (then no rebalance: Kafka's downgrade by a static member's replacement)."""
        consumer = group.consumer_group()
        classic = classic_group_from_consumer(source or consumer, leaving, group.partition, now)
        records = records_between(consumer, None, self._context.topic_id)
        records.append((encode_group_key(group.group_id), encode_group_value(classic.to_value())))
        self._context.append(fx, group.partition, [k for k, _ in records], [v for _, v in records])
        self._timers.forget(group.group_id, consumer.members)
        classic.offsets, classic.pending_txn_offsets = group.offsets, group.pending_txn_offsets
        self._groups.put(classic)
        for member in classic.members.values():
            self._rebalancer.heartbeat(classic, member, now)
        log.info("group %r: downgraded to a classic group at generation %d (%d members)", group.group_id,
                 classic.generation_id, len(classic.members))
        if source is None:
            self._rebalancer.prepare(classic, now, fx, "downgraded from a consumer group")

    # -- classic calls on a consumer group -----------------------------------------------------------

    def classic_join(self, group: Group, member_id: str, instance_id: str | None, client_id: str,
                     client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int,
                     protocol_type: str, protocols: list[tuple[str, bytes]],
                     require_known_member_id: bool, now: int, fx: Effects) -> ConsumerMember:
        """JoinGroup to a consumer group with members (Kafka's classicGroupJoinToConsumerGroup): the member,
        whose epoch is the generation to answer (nobody leads)."""
        cfg = self._config.consumer
        consumer = group.consumer_group()
        new_id = not member_id
        if new_id:
            member_id = str(uuid.uuid4())
        if len(consumer.members) >= cfg.max_size and member_id not in consumer.members:
            raise GroupMaxSizeReachedError(f"The consumer group has reached its maximum capacity of "
                                           f"{cfg.max_size} members.")
        if not _supports(consumer, protocol_type, [name for name, _ in protocols]):
            raise InconsistentGroupProtocolError(f"Member {member_id}'s protocols are not supported.")
        if new_id and require_known_member_id and instance_id is None:
            # Kafka hands the id out and forgets it: the rejoin with it creates the member.
            raise MemberIdRequiredError(member_id)
        try:
            subscription = decode_subscription(protocols[0][1])
        except CorruptRecordError as exc:
            raise InconsistentGroupProtocolError(f"Member {member_id}'s subscription does not decode: {exc}") from exc
        holder = consumer.static_member(instance_id)
        # Kafka's validateOnlineDowngradeWithReplacedMemberId: the last consumer-protocol member is a static
        # one whose instance comes back speaking the classic protocol.
        downgrade = (holder is not None and holder.member_id != member_id and consumer.only_classic_besides(
            holder.member_id) and cfg.downgrade_enabled and len(consumer.members) <= self._config.max_size)
        working = consumer.copy()
        member = working.classic_join(
            cfg, self._context.store.topics(), now, member_id=member_id, instance_id=instance_id,
            rebalance_timeout_ms=rebalance_timeout_ms, classic=ClassicMetadata(session_timeout_ms, tuple(protocols)),
            subscription=subscription, client_id=client_id, client_host=client_host, new_id=new_id)
        if downgrade:
            try:
                self.downgrade(group, "", now, fx, source=working)
            except LogStoreError as exc:
                raise CoordinatorNotAvailableError(f"__consumer_offsets not written: {exc}") from exc
            return member
        # Its SyncGroup is due within the rebalance timeout (Kafka's sync timeout).
        member.classic_deadline = now + member.rebalance_timeout_ms
        self._append_or_refuse(fx, group, records_between(consumer, working, self._context.topic_id))
        group.consumer = working
        self._timers.watch(group, member_id)
        log.info("group %r: classic member %s joined the consumer group at epoch %d (group epoch %d)",
                 group.group_id, member_id, member.member_epoch, working.group_epoch)
        return member

    def takes_classic_members(self, group: Group) -> bool:
        """Whether classic calls go to the members of this consumer group (with migration disabled, and no
        classic member in it, a LeaveGroup is refused for the whole group, as before migration existed)."""
        return group.consumer is not None and (self._config.consumer.migration_policy != "disabled" or any(
            m.classic is not None for m in group.consumer.members.values()))

    def _append_or_refuse(self, fx: Effects, group: Group, records: Records) -> None:
        """Append a change's records; the call fails with COORDINATOR_NOT_AVAILABLE when they cannot be."""
        if records:
            try:
                self._context.append(fx, group.partition, [k for k, _ in records], [v for _, v in records])
            except LogStoreError as exc:
                raise CoordinatorNotAvailableError(f"__consumer_offsets not written: {exc}") from exc

    def _classic_member(self, group: Group, member_id: str, instance_id: str | None
                        ) -> tuple[ConsumerMember, ClassicMetadata]:
        """The classic member a request speaks for (Kafka's validateConsumerGroupMember), and its metadata."""
        consumer = group.consumer_group()
        if instance_id is None:
            member = consumer.members.get(member_id)
            if member is None:
                raise UnknownMemberIdError(f"Member {member_id} is not a member of group {group.group_id}.")
        else:
            member = consumer.static_member(instance_id)
            if member is None:
                raise UnknownMemberIdError(f"Member with instance id {instance_id} is not a member of group "
                                           f"{group.group_id}.")
            if member_id and member.member_id != member_id:
                raise FencedInstanceIdError(f"Static member {member_id} with instance id {instance_id} was fenced "
                                            f"by member {member.member_id}.")
        if member.classic is None:
            raise UnknownMemberIdError(f"Member {member.member_id} does not use the classic protocol.")
        return member, member.classic

    def classic_sync(self, group: Group, generation_id: int, member_id: str, instance_id: str | None,
                     protocol_type: str | None, protocol_name: str | None, now: int) -> tuple[str, bytes]:
        """SyncGroup in a consumer group: the protocol name and the member's current assignment (Kafka's
        classicGroupSyncToConsumerGroup)."""
        consumer = group.consumer_group()
        member, classic = self._classic_member(group, member_id, instance_id)
        _check_generation(member, generation_id)
        if protocol_type is not None and protocol_type != CONSUMER_PROTOCOL:
            raise InconsistentGroupProtocolError(f"The protocol type {protocol_type} from member {member_id} request "
                                                 f"is not equal to the group protocol type {CONSUMER_PROTOCOL}.")
        if protocol_name is not None and protocol_name != classic.protocol_name:
            raise InconsistentGroupProtocolError(
                f"The protocol name {protocol_name} from member {member_id} request is not equal to the protocol "
                f"name {classic.protocol_name} returned in the join response.")
        if consumer.group_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
            self._expect_rejoin(group, member, now)
            raise RebalanceInProgressError(f"A new rebalance is triggered in group {group.group_id} and member "
                                           f"{member.member_id} should rejoin to catch up.")
        member.classic_deadline = None
        member.session_deadline = now + classic.session_timeout_ms
        self._timers.watch(group, member.member_id)
        return classic.protocol_name, assignment_bytes(member.assigned, classic.protocols[0][1])

    def classic_heartbeat(self, group: Group, generation_id: int, member_id: str, instance_id: str | None,
                          now: int) -> None:
        """Heartbeat in a consumer group (Kafka's classicGroupHeartbeatToConsumerGroup)."""
        member, classic = self._classic_member(group, member_id, instance_id)
        _check_generation(member, generation_id)
        member.session_deadline = now + classic.session_timeout_ms
        self._timers.watch(group, member.member_id)
        consumer = group.consumer_group()
        if consumer.must_rejoin(member):
            self._expect_rejoin(group, member, now)
            raise RebalanceInProgressError(f"group {group.group_id!r} moved to epoch {consumer.group_epoch}: "
                                           "rejoin")

    def _expect_rejoin(self, group: Group, member: ConsumerMember, now: int) -> None:
        """The member is told to rejoin: it must, within its rebalance timeout (unless a deadline runs)."""
        if member.classic_deadline is None:
            member.classic_deadline = now + member.rebalance_timeout_ms
            self._timers.watch(group, member.member_id)

    def classic_leave(self, group: Group, members: Iterable[tuple[str, str | None]], fx: Effects
                      ) -> list[LogStoreError | None]:
        """LeaveGroup in a consumer group: classic members only; one epoch bump for all who left."""
        consumer = group.consumer_group()
        working = consumer.copy()
        results: list[LogStoreError | None] = []
        for member_id, instance_id in members:
            try:
                member, _ = self._classic_member(group, member_id, instance_id)
                if member.member_id not in working.members:
                    raise UnknownMemberIdError(f"Member {member.member_id} is not a member of group "
                                               f"{group.group_id}.")
                working.remove(member.member_id)
                log.info("group %r: classic member %s left", group.group_id, member.member_id)
                results.append(None)
            except LogStoreError as exc:
                results.append(exc)
        if len(working.members) == len(consumer.members):
            return results
        working.group_epoch = consumer.group_epoch + 1
        self._append_or_refuse(fx, group, records_between(consumer, working, self._context.topic_id))
        self._timers.forget(group.group_id, consumer.members.keys() - working.members.keys())
        group.consumer = working
        return results


def _supports(consumer: ConsumerGroup, protocol_type: str, names: list[str]) -> bool:
    """Kafka's ConsumerGroup.supportsClassicProtocols: one of `names` every classic member supports."""
    if protocol_type != CONSUMER_PROTOCOL or not names:
        return False
    classic = [m.classic for m in consumer.members.values() if m.classic is not None]
    return any(all(name in {n for n, _ in c.protocols} for c in classic) for name in names)


def _check_generation(member: ConsumerMember, generation_id: int) -> None:
    if generation_id != member.member_epoch:
        raise IllegalGenerationError(f"The request generation id {generation_id} is not equal to the member epoch "
                                     f"{member.member_epoch} of member {member.member_id}.")
