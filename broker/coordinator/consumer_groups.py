"""KIP-848 consumer groups in the group coordinator: ConsumerGroupHeartbeat, ConsumerGroupDescribe, and
what offsets, listing and deletion need of them.

A consumer group is a `Group` (group_state.py) whose `consumer` holds its
`ConsumerGroup` state machine (consumer_group.py); its committed offsets
live on the `Group` as a classic group's do. One id is one kind of group at
a time, as in Kafka: a heartbeat to an empty classic group converts it (its
offsets stay). What happens to a classic group with members is
`group.consumer.migration.policy`'s (Kafka's default, bidirectional, is the
broker's): upgrade or bidirectional convert a Stable one online, its members
staying in and speaking the classic protocol, and the last consumer-protocol
member leaving such a group turns it back into a classic group under
downgrade or bidirectional (group_migration.py); disabled answers
GROUP_ID_NOT_FOUND ("not a consumer group") and keeps classic calls out.

A group's own configs (`consumer.session.timeout.ms`,
`consumer.heartbeat.interval.ms`: group configs, `broker/group_configs.py`)
replace the broker's for its members: each heartbeat reads them, and a
change re-arms the sessions of the members at once (`settings_changed`).

Each heartbeat runs on a copy of the group; the records between the copy
and the group (consumer_group_log.py) are appended, and only then does the
copy replace the group (prepare, then commit). Sessions and revocation
timeouts are timers on the coordinator's heap (consumer_timers.py): a member
that misses one is removed, which bumps the group epoch; the others learn of
it at their next heartbeat. Conversions between the protocols are
`GroupMigration`'s, which this manager calls when a heartbeat or an expiry
asks for one.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, replace
from typing import Any

from logstore.broker.coordinator.consumer_group import (
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ConsumerGroup,
    ConsumerGroupConfig,
    HeartbeatAnswer,
    check_join_fields,
)
from logstore.broker.coordinator.consumer_group_log import records_between
from logstore.broker.coordinator.consumer_timers import ConsumerTimers
from logstore.broker.coordinator.group_config import GroupConfig
from logstore.broker.coordinator.group_context import Effects, GroupContext
from logstore.broker.coordinator.group_log import encode_group_key
from logstore.broker.coordinator.group_migration import GroupMigration, consumer_group_from_classic
from logstore.broker.coordinator.group_state import Group, GroupState
from logstore.broker.coordinator.group_store import GroupStore
from logstore.errors import (
    CoordinatorNotAvailableError,
    CorruptRecordError,
    GroupIdNotFoundError,
    IllegalGenerationError,
    InvalidRequestError,
    LogStoreError,
    StaleMemberEpochError,
    UnknownMemberIdError,
    UnsupportedAssignorError,
    UnsupportedVersionError,
)

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
# How long an expiry whose records could not be written waits before it is tried again (ms).
RETRY_EXPIRY_MS = 1_000


@dataclass(frozen=True)
class ConsumerHeartbeatResult:
    """A ConsumerGroupHeartbeat answer; `assignment` is (topic id, partitions) per topic, None if unchanged."""

    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: tuple[tuple[bytes, tuple[int, ...]], ...] | None


@dataclass(frozen=True)
class ConsumerMemberDescription:
    """One member as ConsumerGroupDescribe shows it; partitions as (topic id, name, partitions)."""

    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: tuple[tuple[bytes, str, tuple[int, ...]], ...]
    target_assignment: tuple[tuple[bytes, str, tuple[int, ...]], ...]
    classic: bool = False   # it speaks the classic protocol (online migration)


@dataclass(frozen=True)
class ConsumerGroupDescription:
    """A consumer group as ConsumerGroupDescribe shows it, or the error it answers instead."""

    group_id: str
    state: str = "Dead"
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: tuple[ConsumerMemberDescription, ...] = ()
    error: LogStoreError | None = None


class ConsumerGroupManager:
    """The group coordinator's KIP-848 calls, and what offsets and deletion need of consumer groups.

    Public calls take the context's lock themselves; the others run under it. Task-safe; times are ms.
    """

    def __init__(self, context: GroupContext, groups: GroupStore, config: GroupConfig,
                 partition_of: Callable[[str], int], timers: ConsumerTimers, migration: GroupMigration, *,
                 group_setting: Callable[[str, str], Any] | None = None) -> None:
        """`group_setting(group_id, name)`: a group config's value for a group (its own `consumer.*`, else the
        broker's); None: every group runs with the broker's `config.consumer`."""
        self._context = context
        self._groups = groups
        self._config = config
        self._partition_of = partition_of
        self._timers = timers
        self._migration = migration
        self._group_setting = group_setting

    def group_config(self, group_id: str) -> ConsumerGroupConfig:
        """The consumer protocol's settings of one group: the broker's, with the group's own session timeout and
        heartbeat interval (its group configs)."""
        if self._group_setting is None:
            return self._config.consumer
        return replace(self._config.consumer,
                       session_timeout_ms=self._group_setting(group_id, "consumer.session.timeout.ms"),
                       heartbeat_interval_ms=self._group_setting(group_id, "consumer.heartbeat.interval.ms"))

    def settings_changed(self, group_id: str) -> None:
        """The group's configs changed: its consumer-protocol members' sessions run with its session timeout from
        now, so a shorter one expires a silent member without waiting for the old deadline (a classic member
        keeps the timeout it joined with)."""
        if self._group_setting is None:
            return
        session_ms = self._timers.session_timeout_ms(group_id)
        now = self._context.clock()
        with self._context.lock:
            group = self._groups.get(group_id)
            if group is None or group.consumer is None:
                return
            for member in group.consumer.members.values():
                if member.classic is None:
                    member.session_deadline = now + session_ms
                    self._timers.watch(group, member.member_id)

    # -- topics ------------------------------------------------------------------------------

    def _by_topic_id(self, partitions: Iterable[TopicPartition]) -> tuple[tuple[bytes, tuple[int, ...]], ...]:
        grouped: dict[str, list[int]] = {}
        for topic, p in sorted(partitions):
            grouped.setdefault(topic, []).append(p)
        rows = []
        for topic, ps in grouped.items():
            topic_id = self._context.topic_id(topic)
            if topic_id is not None:
                rows.append((topic_id, tuple(ps)))
        return tuple(rows)

    # -- ConsumerGroupHeartbeat ------------------------------------------------------------------

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, *, instance_id: str | None = None,
                  rack_id: str | None = None, rebalance_timeout_ms: int = -1,
                  subscribed_topic_names: Iterable[str] | None = None, subscribed_topic_regex: str | None = None,
                  server_assignor: str | None = None, owned: Iterable[tuple[bytes, Iterable[int]]] | None = None,
                  client_id: str = "", client_host: str = "", member_id_required: bool = True
                  ) -> ConsumerHeartbeatResult:
        """ConsumerGroupHeartbeat (`owned` by topic id; `member_id_required` from v1, where the client makes
        its id); Kafka's errors are raised."""
        owned = None if owned is None else [(topic_id, tuple(ps)) for topic_id, ps in owned]
        _check_heartbeat(group_id, member_id, member_epoch, instance_id, rack_id, rebalance_timeout_ms,
                         subscribed_topic_names, subscribed_topic_regex, owned, member_id_required)
        cfg = self.group_config(group_id)
        if server_assignor is not None and server_assignor not in cfg.assignors:
            # Checked before the group, as Kafka's service does.
            raise UnsupportedAssignorError(f"ServerAssignor {server_assignor} is not supported. Supported "
                                           f"assignors: {', '.join(cfg.assignors)}.")
        partition = self._partition_of(group_id)
        counts = self._context.store.topics()
        now = self._context.clock()
        fx = Effects()
        with self._context.lock:
            names = self._context.topic_names() if owned is not None else {}
            owned_tps = None if owned is None else frozenset(
                (names[topic_id], p) for topic_id, ps in owned if topic_id in names for p in ps)
            group = self._groups.get(group_id)
            converting = upgraded = None
            if group is None:
                if member_epoch != 0:
                    raise GroupIdNotFoundError(f"Consumer group {group_id} not found.")
                before = None
            elif group.consumer is None:
                if member_epoch != 0:
                    raise GroupIdNotFoundError(f"Group {group_id} is not a consumer group.")
                if not (group.is_in(GroupState.EMPTY) and group.is_empty):
                    if not self._migration.may_upgrade(group):
                        raise GroupIdNotFoundError(f"Group {group_id} is not a consumer group.")
                    try:
                        upgraded = consumer_group_from_classic(group, now)
                    except CorruptRecordError as exc:
                        raise GroupIdNotFoundError(f"Cannot upgrade the classic group {group_id} to consumer group "
                                                   f"because the embedded consumer protocol is malformed.") from exc
                converting = group
                before = upgraded
            else:
                before = group.consumer
            downgrade = (member_epoch == LEAVE_EPOCH and before is not None
                         and self._migration.may_downgrade(before, member_id))
            working = before.copy() if before is not None else ConsumerGroup(group_id)
            answer: HeartbeatAnswer = working.heartbeat(
                cfg, counts, now, member_id=member_id, member_epoch=member_epoch, instance_id=instance_id,
                rack_id=rack_id, rebalance_timeout_ms=rebalance_timeout_ms, subscribed_topics=subscribed_topic_names,
                subscribed_regex=subscribed_topic_regex, server_assignor=server_assignor, owned=owned_tps,
                client_id=client_id, client_host=client_host)
            try:
                if downgrade:
                    # The last member speaking the consumer protocol left: the classic members carry on alone.
                    assert group is not None  # `before`, a consumer group, is its state
                    self._migration.downgrade(group, member_id, now, fx)
                    records = []
                elif upgraded is not None:
                    assert group is not None  # the classic group being upgraded
                    records = self._migration.upgrade_records(group, upgraded) + records_between(
                        upgraded, working, self._context.topic_id)
                else:
                    records = records_between(before, working, self._context.topic_id)
                    if converting is not None:
                        # Kafka's offline upgrade: the empty classic group goes (its offsets stay).
                        records.insert(0, (encode_group_key(group_id), None))
                if records:
                    self._context.append(fx, partition, [k for k, _ in records], [v for _, v in records])
            except LogStoreError as exc:
                raise CoordinatorNotAvailableError(f"__consumer_offsets not written: {exc}") from exc
            if group is None:
                group = self._groups.put(Group(group_id, partition, state_timestamp=now))
            if not downgrade:
                group.consumer = working
                if upgraded is not None:
                    self._migration.upgraded(group, fx)
                elif converting is not None:
                    log.info("group %r: empty classic group converted to a consumer group", group_id)
                if answer.member_id in working.members:
                    self._timers.watch(group, answer.member_id)
        self._context.finish(fx)
        return ConsumerHeartbeatResult(answer.member_id, answer.member_epoch, answer.heartbeat_interval_ms,
                                       None if answer.assignment is None else self._by_topic_id(answer.assignment))

    # -- timers ------------------------------------------------------------------------------

    def on_member_deadline(self, group: Group, member_id: str, deadline: int, now: int, fx: Effects) -> None:
        """A consumer member's timer: remove it if its session or revocation time ran out, else look later."""
        if not self._timers.claim(group.group_id, member_id, deadline):
            return  # superseded by an earlier timer
        current = group.consumer_group()
        if member_id not in current.members:
            return
        if member_id not in current.expired(now):
            self._timers.watch(group, member_id)
            return
        member = current.members[member_id]
        if member.revocation_deadline is not None and member.revocation_deadline <= now:
            why = "did not revoke its partitions within its rebalance timeout"
        elif member.classic_deadline is not None and member.classic_deadline <= now:
            why = "did not send its JoinGroup or SyncGroup within its rebalance timeout"
        else:
            why = "no heartbeat within its session timeout"
        working = current.copy()
        working.remove(member_id)
        try:
            if self._migration.may_downgrade(current, member_id):
                log.info("group %r: member %s removed: %s", group.group_id, member_id, why)
                self._migration.downgrade(group, member_id, now, fx)
                return
            records = records_between(current, working, self._context.topic_id)
            self._context.append(fx, group.partition, [k for k, _ in records], [v for _, v in records])
        except LogStoreError as exc:
            log.warning("group %r: member %s not removed yet (%s): %s", group.group_id, member_id, why, exc)
            self._timers.retry(group.group_id, member_id, now + RETRY_EXPIRY_MS)
            return
        group.consumer = working
        log.info("group %r: member %s removed: %s (group epoch %d)", group.group_id, member_id, why,
                 working.group_epoch)

    # -- what other calls need of consumer groups ----------------------------------------------

    def remove_records(self, fx: Effects, group: Group) -> None:
        """Tombstones for the consumer group's records (under the lock); its offsets are the caller's."""
        consumer = group.consumer_group()
        records = records_between(consumer, None, self._context.topic_id)
        self._context.append(fx, group.partition, [k for k, _ in records], [v for _, v in records])
        self._timers.forget(group.group_id, consumer.members)

    def to_classic(self, fx: Effects, group: Group) -> None:
        """Kafka's offline downgrade, at a JoinGroup: the empty consumer group goes (its offsets stay)."""
        self.remove_records(fx, group)
        group.consumer = None
        log.info("group %r: empty consumer group converted to a classic group", group.group_id)

    @staticmethod
    def check_commit(group: Group, member_id: str, instance_id: str | None, member_epoch: int,
                     transactional: bool, api_version: int | None) -> None:
        """Kafka's ConsumerGroup.validateOffsetCommit."""
        consumer = group.consumer_group()
        if member_epoch < 0 and not consumer.members:
            return
        if transactional and member_epoch == -1 and not member_id and instance_id is None:
            return
        member = consumer.members.get(member_id)
        if member is None:
            raise UnknownMemberIdError(f"Member {member_id} is not a member of group {group.group_id}.")
        if member.classic is not None:
            # A classic member commits with its generation, which is its member epoch.
            if member_epoch != member.member_epoch:
                raise IllegalGenerationError(f"The received generation id {member_epoch} does not match the "
                                             f"expected member epoch {member.member_epoch}.")
            return
        if not transactional and api_version is not None and api_version < 9:
            raise UnsupportedVersionError("OffsetCommit version 9 or above must be used by members using the "
                                          "modern group protocol")
        _check_member_epoch(member_epoch, member.member_epoch)

    @staticmethod
    def check_fetch(group: Group, member_id: str | None, member_epoch: int) -> None:
        """Kafka's ConsumerGroup.validateOffsetFetch (an admin fetch names no member)."""
        if member_id is None and member_epoch < 0:
            return
        member = group.consumer_group().members.get(member_id or "")
        if member is None:
            raise UnknownMemberIdError(f"Member {member_id} is not a member of group {group.group_id}.")
        _check_member_epoch(member_epoch, member.member_epoch)

    # -- ConsumerGroupDescribe ---------------------------------------------------------------

    def describe(self, group_ids: Iterable[str]) -> list[ConsumerGroupDescription]:
        """ConsumerGroupDescribe: each group, or GROUP_ID_NOT_FOUND for an unknown or classic one."""
        found = []
        with self._context.lock:
            names = None
            for group_id in group_ids:
                group = self._groups.get(group_id)
                if group is None or group.is_in(GroupState.DEAD):
                    found.append(ConsumerGroupDescription(
                        group_id, error=GroupIdNotFoundError(f"Group {group_id} not found.")))
                    continue
                if group.consumer is None:
                    found.append(ConsumerGroupDescription(
                        group_id, error=GroupIdNotFoundError(f"Group {group_id} is not a consumer group.")))
                    continue
                if names is None:
                    names = {t: self._context.topic_id(t) for t in self._context.store.topics()}
                found.append(_described(group.consumer, self._config.consumer, names))
        return found


def _described(consumer: ConsumerGroup, cfg: ConsumerGroupConfig, ids: dict[str, bytes | None]
               ) -> ConsumerGroupDescription:
    def rows(partitions: Iterable[TopicPartition]) -> tuple[tuple[bytes, str, tuple[int, ...]], ...]:
        grouped: dict[str, list[int]] = {}
        for topic, p in sorted(partitions):
            grouped.setdefault(topic, []).append(p)
        return tuple((topic_id, t, tuple(ps)) for t, ps in grouped.items() if (topic_id := ids.get(t)) is not None)

    members = tuple(ConsumerMemberDescription(
        m.member_id, m.instance_id, m.rack_id, m.member_epoch, m.client_id, m.client_host,
        tuple(sorted(m.subscribed_topics)), m.subscribed_regex, rows(m.assigned),
        rows(consumer.target.get(m.member_id, ())), m.classic is not None) for m in consumer.members.values())
    return ConsumerGroupDescription(consumer.group_id, consumer.state, consumer.group_epoch,
                                    consumer.assignment_epoch, consumer.preferred_assignor(cfg), members)


def _check_member_epoch(received: int, expected: int) -> None:
    if received != expected:
        raise StaleMemberEpochError(f"The received member epoch {received} does not match the expected member "
                                    f"epoch {expected}.")


def _check_heartbeat(group_id: str, member_id: str, member_epoch: int, instance_id: str | None,
                     rack_id: str | None, rebalance_timeout_ms: int, subscribed_topic_names: Iterable[str] | None,
                     subscribed_topic_regex: str | None, owned: Collection[object] | None,
                     member_id_required: bool) -> None:
    """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid (INVALID_REQUEST, Kafka's messages)."""
    def blank(value: str | None) -> bool:
        return value is not None and not value.strip()

    if (member_id_required or member_epoch > 0 or member_epoch == -1) and blank(member_id or ""):
        raise InvalidRequestError("MemberId can't be empty.")
    if blank(group_id or ""):
        raise InvalidRequestError("GroupId can't be empty.")
    if blank(instance_id):
        raise InvalidRequestError("InstanceId can't be empty.")
    if blank(rack_id):
        raise InvalidRequestError("RackId can't be empty.")
    if member_epoch == 0:
        check_join_fields(rebalance_timeout_ms, owned, subscribed_topic_names, subscribed_topic_regex)
    elif member_epoch == STATIC_LEAVE_EPOCH:
        if instance_id is None:
            raise InvalidRequestError("InstanceId can't be null.")
    elif member_epoch < STATIC_LEAVE_EPOCH:
        raise InvalidRequestError("MemberEpoch is invalid.")

