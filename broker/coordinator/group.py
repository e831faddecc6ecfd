"""The group coordinator: classic consumer groups and their committed offsets, over `__consumer_offsets`.

Membership follows Kafka's classic protocol. A join moves the group to
PreparingRebalance; the JoinGroup replies are held until every member has
rejoined or the rebalance timeout passes (after
`group.initial.rebalance.delay.ms` for a group that was empty), then all
are answered at once with the next generation, the leader alone getting the
members' metadata. The leader's SyncGroup assignment is persisted, then
relayed to every member (Stable). Members that stop heartbeating are
removed after their session timeout, which starts a rebalance.

Held replies are `concurrent.futures.Future`s, so the coordinator never
touches a socket: the broker awaits them, an embedding application can
block on them. Deadlines (sessions, join phases) are kept in a heap that
`poll()` runs; the owner calls it when `on_timer` says an earlier deadline
was set.

Offsets, persistence and loading are `GroupOffsets` (group_offsets.py);
KIP-848 consumer groups, which share the group ids, offsets and timers, are
`ConsumerGroups` (consumer_groups.py). A JoinGroup to an empty consumer
group converts it (Kafka's offline downgrade); other classic calls to a
consumer group go to its members speaking the classic protocol, which the
migration policy lets in (group_migration.py).
"""
from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Mapping

from logstore.broker.coordinator.consumer_group import ConsumerGroupConfig
from logstore.broker.coordinator.consumer_groups import ConsumerGroups
from logstore.broker.coordinator.group_log import encode_group_key, encode_group_value
from logstore.broker.coordinator.group_migration import GroupMigration
from logstore.broker.coordinator.group_offsets import Effects, GroupOffsets
from logstore.broker.coordinator.group_state import CONSUMER_PROTOCOL, Group, GroupState, Member
from logstore.errors import (CoordinatorNotAvailableError, FencedInstanceIdError, GroupIdNotFoundError,
                             GroupMaxSizeReachedError, IllegalGenerationError, InconsistentGroupProtocolError,
                             InvalidGroupIdError, InvalidSessionTimeoutError, LogStoreError, MemberIdRequiredError,
                             RebalanceInProgressError, UnknownMemberIdError)

log = logging.getLogger(__name__)

# How long a member that joined during a rebalance may take to finish joining (Kafka's NewMemberJoinTimeoutMs).
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000


@dataclass(frozen=True)
class GroupConfig:
    """The group coordinator's settings, under Kafka's broker config names in `from_settings`."""

    min_session_timeout_ms: int = 6_000          # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000      # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3_000      # group.initial.rebalance.delay.ms
    max_size: int = 2**31 - 1                    # group.max.size
    offset_metadata_max_bytes: int = 4_096       # offset.metadata.max.bytes
    offsets_retention_ms: int = 7 * 24 * 3_600_000  # offsets.retention.minutes
    fsync: bool = True                           # logstore.acks.all.fsync
    consumer: ConsumerGroupConfig = ConsumerGroupConfig()  # group.consumer.* (KIP-848 groups)

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> "GroupConfig":
        """From broker settings (missing names keep Kafka's defaults)."""
        names = {"group.min.session.timeout.ms": "min_session_timeout_ms",
                 "group.max.session.timeout.ms": "max_session_timeout_ms",
                 "group.initial.rebalance.delay.ms": "initial_rebalance_delay_ms",
                 "group.max.size": "max_size",
                 "offset.metadata.max.bytes": "offset_metadata_max_bytes",
                 "logstore.acks.all.fsync": "fsync"}
        values = {field: settings[name] for name, field in names.items() if name in settings}
        if "offsets.retention.minutes" in settings:
            values["offsets_retention_ms"] = settings["offsets.retention.minutes"] * 60_000
        return cls(**values, consumer=ConsumerGroupConfig.from_settings(settings))


@dataclass(frozen=True)
class JoinResult:
    """A JoinGroup answer; `members` (id, instance id, metadata) only for the leader."""

    member_id: str
    generation_id: int
    protocol_type: str | None
    protocol_name: str | None
    leader_id: str
    members: tuple[tuple[str, str | None, bytes], ...] = ()


@dataclass(frozen=True)
class SyncResult:
    """A SyncGroup answer: the member's assignment."""

    protocol_type: str | None
    protocol_name: str | None
    assignment: bytes


@dataclass(frozen=True)
class MemberDescription:
    """One member as DescribeGroups shows it."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupDescription:
    """A group as DescribeGroups shows it (metadata and assignments only when Stable, as Kafka)."""

    group_id: str
    state: str
    protocol_type: str
    protocol_name: str
    members: tuple[MemberDescription, ...]


@dataclass(frozen=True)
class ListedGroup:
    """A group as ListGroups shows it; `group_type` is "classic" or "consumer" (v5)."""

    group_id: str
    protocol_type: str
    state: str
    group_type: str


def _now_ms() -> int:
    return int(time.time() * 1000)


def _answered(value: Any) -> Future:
    future: Future = Future()
    if isinstance(value, BaseException):
        future.set_exception(value)
    else:
        future.set_result(value)
    return future


class GroupCoordinator(GroupOffsets, ConsumerGroups, GroupMigration):
    """Classic and KIP-848 consumer groups and committed offsets, persisted in `__consumer_offsets`."""

    def __init__(self, store, transactions, config: GroupConfig = GroupConfig(), *,
                 clock: Callable[[], int] = _now_ms, on_timer: Callable[[], None] | None = None):
        self.store = store
        self.transactions = transactions
        self.config = config
        self._clock = clock
        self._on_timer = on_timer or (lambda: None)
        self._lock = threading.RLock()
        self._groups: dict[str, Group] = {}
        # (deadline, seq, group id, member id or None for the group's join phase)
        self._timers: list[tuple[int, int, str, str | None]] = []
        self._seq = itertools.count()
        self._wake_at: int | None = None
        # (partition, producer id) -> groups holding that producer's pending offsets there
        self._txn_groups: dict[tuple[int, int], set[str]] = {}
        # (group id, member id) -> the deadline of a KIP-848 member's queued timer
        self._consumer_timers: dict[tuple[str, str], int] = {}

    def ensure_offsets_topic(self) -> None:
        """Create `__consumer_offsets` if it is missing (Kafka does so at the first FindCoordinator)."""
        self.transactions.ensure_offsets_topic()

    def partition_of(self, group_id: str) -> int:
        """The `__consumer_offsets` partition of a group (the topic is created if missing)."""
        return self.transactions.offsets_partition(group_id)[1]

    # -- timers ----------------------------------------------------------------------------

    def _schedule(self, deadline: int, group_id: str, member_id: str | None = None) -> None:
        heapq.heappush(self._timers, (deadline, next(self._seq), group_id, member_id))
        if self._wake_at is None or deadline < self._wake_at:
            self._wake_at = deadline
            self._on_timer()

    def poll(self, now: int | None = None) -> int | None:
        """Act on every deadline passed (sessions, join phases); the next deadline, or None."""
        now = self._clock() if now is None else now
        fx = Effects()
        with self._lock:
            while self._timers and self._timers[0][0] <= now:
                deadline, _, group_id, member_id = heapq.heappop(self._timers)
                group = self._groups.get(group_id)
                if group is None:
                    continue
                if member_id is None:
                    if group.consumer is None:
                        self._on_group_deadline(group, now, fx)
                else:
                    self._on_member_deadline(group, member_id, deadline, now, fx)
            self._wake_at = self._timers[0][0] if self._timers else None
            wake_at = self._wake_at
        self._finish(fx, strict=False)
        return wake_at

    def _on_member_deadline(self, group: Group, member_id: str, deadline: int, now: int, fx: Effects) -> None:
        if group.consumer is not None:
            self._on_consumer_deadline(group, member_id, deadline, now, fx)
            return
        pending = group.pending_members.get(member_id)
        if pending is not None:
            if pending <= now:
                del group.pending_members[member_id]
                log.info("group %r: member id %s was never used to join; forgotten", group.group_id, member_id)
                self._try_complete_join(group, now, fx)
            return
        member = group.members.get(member_id)
        if member is None or member.timer_at != deadline:
            return  # gone, or this timer was superseded by an earlier one
        member.timer_at = None
        if member.heartbeat_satisfied(now):
            # Waiting in a rebalance counts as alive: look again a session from now.
            later = member.heartbeat_deadline if member.heartbeat_deadline > now else now + member.session_timeout_ms
            self._schedule_member(group, member, later)
            return
        log.info("group %r: member %s removed: no heartbeat within its session timeout of %d ms",
                 group.group_id, member_id, member.session_timeout_ms)
        self._remove_member(group, member, now, fx)

    def _heartbeat(self, group: Group, member: Member, now: int, timeout_ms: int | None = None) -> None:
        """The member is alive: its session restarts."""
        member.heartbeat_deadline = now + (member.session_timeout_ms if timeout_ms is None else timeout_ms)
        # A later deadline is found by the queued timer when it fires; only an earlier one needs its own.
        if member.timer_at is None or member.heartbeat_deadline < member.timer_at:
            self._schedule_member(group, member, member.heartbeat_deadline)

    def _schedule_member(self, group: Group, member: Member, deadline: int) -> None:
        member.timer_at = deadline
        self._schedule(deadline, group.group_id, member.member_id)

    # -- JoinGroup ---------------------------------------------------------------------------

    def join_group(self, group_id: str, member_id: str, group_instance_id: str | None, client_id: str,
                   client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
                   protocols: list[tuple[str, bytes]], require_known_member_id: bool = True) -> Future:
        """JoinGroup: a future of the `JoinResult`, answered when the rebalance completes (or an error)."""
        if not group_id:
            return _answered(InvalidGroupIdError("the group id is empty"))
        cfg = self.config
        if not cfg.min_session_timeout_ms <= session_timeout_ms <= cfg.max_session_timeout_ms:
            return _answered(InvalidSessionTimeoutError(
                f"session timeout {session_timeout_ms} ms is outside {cfg.min_session_timeout_ms}.."
                f"{cfg.max_session_timeout_ms} (group.min/max.session.timeout.ms)"))
        protocols = [(name, bytes(metadata)) for name, metadata in protocols]
        partition = self.partition_of(group_id)
        now = self._clock()
        fx = Effects()
        waiter: Future = Future()
        with self._lock:
            group = self._groups.get(group_id)
            try:
                if group is not None and group.consumer is not None and not group.is_empty:
                    if self.config.consumer.migration_policy == "disabled":
                        raise GroupIdNotFoundError(f"Group {group_id} is not a classic group.")
                    member = self._classic_join_to_consumer(
                        group, member_id, group_instance_id, client_id, client_host, session_timeout_ms,
                        rebalance_timeout_ms, protocol_type, protocols, require_known_member_id, now, fx)
                    fx.answer(waiter, JoinResult(member.member_id, member.member_epoch, CONSUMER_PROTOCOL,
                                                 member.classic.protocol_name, "", ()))
                else:
                    self._join_classic(group_id, group, partition, waiter, member_id, group_instance_id,
                                       client_id, client_host, session_timeout_ms, rebalance_timeout_ms,
                                       protocol_type, protocols, require_known_member_id, now, fx)
            except LogStoreError as exc:
                fx.answer(waiter, exc)
        self._finish(fx, strict=False)
        return waiter

    def _join_classic(self, group_id: str, group: Group | None, partition: int, waiter: Future, member_id: str,
                      group_instance_id: str | None, client_id: str, client_host: str, session_timeout_ms: int,
                      rebalance_timeout_ms: int, protocol_type: str, protocols: list[tuple[str, bytes]],
                      require_known_member_id: bool, now: int, fx: Effects) -> None:
        """JoinGroup to a classic group, a new one, or an empty consumer group (which becomes classic)."""
        if group is not None and group.consumer is not None:
            # Kafka's offline downgrade: the empty consumer group goes (its offsets stay).
            self._remove_consumer_records(fx, group)
            group.consumer = None
            log.info("group %r: empty consumer group converted to a classic group", group_id)
        if group is None:
            if member_id:
                raise UnknownMemberIdError(f"group {group_id!r} does not exist")
            group = self._groups[group_id] = Group(group_id, partition, state_timestamp=now)
        if group.is_in(GroupState.DEAD):
            raise CoordinatorNotAvailableError(f"group {group_id!r} is being removed")
        if not group.supports(protocol_type, protocols):
            raise InconsistentGroupProtocolError(
                f"group {group_id!r} ({group.protocol_type}) supports none of {[n for n, _ in protocols]} "
                f"of type {protocol_type!r}")
        joining = Member(member_id, group_instance_id, client_id, client_host, rebalance_timeout_ms,
                         session_timeout_ms, protocol_type, protocols, join_waiter=waiter)
        if not member_id:
            self._join_unknown(group, joining, require_known_member_id, now, fx)
        else:
            self._join_known(group, joining, now, fx)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group, now, fx)

    def _join_unknown(self, group: Group, joining: Member, require_known_member_id: bool, now: int,
                      fx: Effects) -> None:
        prefix = joining.group_instance_id if joining.group_instance_id is not None else joining.client_id
        joining.member_id = f"{prefix}-{uuid.uuid4()}"
        if len(group.members) + len(group.pending_members) >= self.config.max_size:
            raise GroupMaxSizeReachedError(f"group {group.group_id!r} has {self.config.max_size} members (group.max.size)")
        if joining.group_instance_id is not None:
            if group.static_member_id(joining.group_instance_id) is not None:
                self._replace_static_member(group, joining, now, fx)
            else:
                self._add_member(group, joining, now, fx)
        elif require_known_member_id:
            # KIP-394: the id is remembered for a session, and the client rejoins with it.
            group.pending_members[joining.member_id] = now + joining.session_timeout_ms
            self._schedule(now + joining.session_timeout_ms, group.group_id, joining.member_id)
            raise MemberIdRequiredError(joining.member_id)
        else:
            self._add_member(group, joining, now, fx)

    def _join_known(self, group: Group, joining: Member, now: int, fx: Effects) -> None:
        member_id = joining.member_id
        if member_id in group.pending_members:
            if joining.group_instance_id is not None:
                raise UnknownMemberIdError(f"static member {joining.group_instance_id!r} joined with a pending id")
            self._add_member(group, joining, now, fx)
            return
        member = self._current_member(group, member_id, joining.group_instance_id)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            self._update_member(group, member, joining, now, fx)
        elif group.is_in(GroupState.COMPLETING_REBALANCE):
            if member.same_protocols(joining.protocols):
                # A retried join of this generation (its answer was lost): answer it again.
                fx.answer(joining.join_waiter, self._join_result(group, member))
            else:
                self._update_member(group, member, joining, now, fx)
        elif group.is_in(GroupState.STABLE):
            if member_id == group.leader_id or not member.same_protocols(joining.protocols):
                self._update_member(group, member, joining, now, fx)
            else:
                fx.answer(joining.join_waiter, self._join_result(group, member, with_members=False))
        else:
            raise UnknownMemberIdError(f"group {group.group_id!r} has no member {member_id!r}")

    def _current_member(self, group: Group, member_id: str, group_instance_id: str | None) -> Member:
        """The member a request speaks for (Kafka's validateCurrentMember)."""
        if group_instance_id is not None:
            holder = group.static_member_id(group_instance_id)
            if holder is None:
                raise UnknownMemberIdError(f"group {group.group_id!r} has no instance {group_instance_id!r}")
            if holder != member_id:
                raise FencedInstanceIdError(
                    f"group {group.group_id!r}: instance {group_instance_id!r} is now member {holder!r}")
        member = group.members.get(member_id)
        if member is None:
            raise UnknownMemberIdError(f"group {group.group_id!r} has no member {member_id!r}")
        return member

    def _add_member(self, group: Group, member: Member, now: int, fx: Effects) -> None:
        member.is_new = True
        if group.is_in(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        group.add(member)
        # A new member that never completes its join is dropped after this long, not after the rebalance timeout.
        self._heartbeat(group, member, now, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(group, now, fx, f"member {member.member_id} joined")

    def _update_member(self, group: Group, member: Member, joining: Member, now: int, fx: Effects) -> None:
        fx.answer(member.join_waiter, RebalanceInProgressError("a newer JoinGroup from this member replaced this one"))
        member.protocols = joining.protocols
        member.rebalance_timeout_ms = joining.rebalance_timeout_ms
        member.session_timeout_ms = joining.session_timeout_ms
        member.join_waiter = joining.join_waiter
        self._maybe_prepare_rebalance(group, now, fx, f"member {member.member_id} rejoined")

    def _replace_static_member(self, group: Group, joining: Member, now: int, fx: Effects) -> None:
        """A static member restarted: the new instance takes the old one's place (the old one is fenced)."""
        old_id = group.static_member_id(joining.group_instance_id)
        old = group.members[old_id]
        fenced = FencedInstanceIdError(f"instance {joining.group_instance_id!r} rejoined as another member")
        fx.answer(old.join_waiter, fenced)
        fx.answer(old.sync_waiter, fenced)
        old.join_waiter = old.sync_waiter = None
        member = group.replace_static_member(joining.group_instance_id, joining.member_id)
        protocol_before = group.protocol_name
        member.protocols = joining.protocols
        member.rebalance_timeout_ms = joining.rebalance_timeout_ms
        member.session_timeout_ms = joining.session_timeout_ms
        member.client_id, member.client_host = joining.client_id, joining.client_host
        member.join_waiter = joining.join_waiter
        member.timer_at = None  # the old id's timer finds no member: the new id needs its own
        self._heartbeat(group, member, now)
        if group.is_in(GroupState.STABLE) and group.select_protocol() == protocol_before:
            # Kafka's rule: a static member's restart in a stable group needs no rebalance; the
            # new member id is persisted so the old instance stays fenced after a restart.
            self._store_group(fx, group)
            fx.answer(member.join_waiter, self._join_result(group, member))
            member.join_waiter = None
        elif group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, now, fx, f"static member {joining.group_instance_id} restarted")

    def _join_result(self, group: Group, member: Member, with_members: bool = True) -> JoinResult:
        members = ()
        if with_members and member.member_id == group.leader_id:
            members = tuple((m.member_id, m.group_instance_id, m.metadata(group.protocol_name))
                            for m in group.members.values())
        return JoinResult(member.member_id, group.generation_id, group.protocol_type, group.protocol_name,
                          group.leader_id or "", members)

    # -- rebalancing -----------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: Group, now: int, fx: Effects, reason: str) -> None:
        if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            self._prepare_rebalance(group, now, fx, reason)

    def _prepare_rebalance(self, group: Group, now: int, fx: Effects, reason: str) -> None:
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            self._fail_syncs(group, fx, RebalanceInProgressError(f"group {group.group_id!r} is rebalancing again"))
        delay = self.config.initial_rebalance_delay_ms
        if group.is_in(GroupState.EMPTY) and delay > 0:
            group.initial_delay_left = max(group.rebalance_timeout_ms() - delay, 0)
            group.join_deadline = now + delay
        else:
            group.initial_delay_left = None
            group.join_deadline = now + group.rebalance_timeout_ms()
        group.pending_sync.clear()
        group.sync_deadline = None
        group.transition(GroupState.PREPARING_REBALANCE, now)
        self._schedule(group.join_deadline, group.group_id)
        log.info("group %r: rebalancing from generation %d (%s)", group.group_id, group.generation_id, reason)

    def _fail_syncs(self, group: Group, fx: Effects, error: LogStoreError) -> None:
        for member in group.members.values():
            fx.answer(member.sync_waiter, error)
            member.sync_waiter = None

    def _try_complete_join(self, group: Group, now: int, fx: Effects) -> None:
        if (group.is_in(GroupState.PREPARING_REBALANCE) and group.initial_delay_left is None
                and group.all_joined()):
            self._complete_join(group, now, fx)

    def _on_group_deadline(self, group: Group, now: int, fx: Effects) -> None:
        if group.sync_deadline is not None and group.sync_deadline <= now:
            self._expire_pending_syncs(group, now, fx)
        if not group.is_in(GroupState.PREPARING_REBALANCE) or group.join_deadline is None \
                or group.join_deadline > now:
            return
        if group.initial_delay_left is not None:
            if group.new_member_added and group.initial_delay_left > 0:
                # Members are still arriving: wait another delay, within the rebalance timeout.
                group.new_member_added = False
                delay = min(self.config.initial_rebalance_delay_ms, group.initial_delay_left)
                group.initial_delay_left -= delay
                group.join_deadline = now + delay
                self._schedule(group.join_deadline, group.group_id)
                return
            group.initial_delay_left = None
        self._complete_join(group, now, fx)

    def _expire_pending_syncs(self, group: Group, now: int, fx: Effects) -> None:
        """Kafka's rule: members that joined a generation but sent no SyncGroup within the rebalance
        timeout are removed, even if they heartbeat, so the others are not left without their partitions."""
        group.sync_deadline = None
        late = [group.members[m] for m in sorted(group.pending_sync) if m in group.members]
        group.pending_sync.clear()
        if not late or not group.is_in(GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        for member in late:
            log.info("group %r: member %s removed: no SyncGroup within the rebalance timeout", group.group_id,
                     member.member_id)
            fx.answer(member.join_waiter, UnknownMemberIdError("removed: no SyncGroup in time"))
            group.remove(member.member_id)
        self._prepare_rebalance(group, now, fx, f"{len(late)} members did not sync in time")

    def _complete_join(self, group: Group, now: int, fx: Effects) -> None:
        """End the join phase: drop members that did not rejoin, start the next generation, answer the joins."""
        for member in group.not_yet_rejoined():
            # Kafka keeps a static member that did not rejoin: it may be restarting.
            if member.group_instance_id is None:
                log.info("group %r: member %s removed: it did not rejoin in time", group.group_id, member.member_id)
                fx.answer(member.sync_waiter, UnknownMemberIdError("removed: it did not rejoin in time"))
                group.remove(member.member_id)
        if not group.maybe_elect_joined_leader() and group.members:
            # No one rejoined: wait for the session timeouts to remove the silent members.
            group.join_deadline = now + group.rebalance_timeout_ms()
            self._schedule(group.join_deadline, group.group_id)
            return
        group.join_deadline = None
        group.new_member_added = False
        group.init_next_generation(now)
        if group.is_in(GroupState.EMPTY):
            self._store_group(fx, group)
            log.info("group %r is empty at generation %d", group.group_id, group.generation_id)
            return
        log.info("group %r: generation %d with %d members, protocol %s, leader %s", group.group_id,
                 group.generation_id, len(group.members), group.protocol_name, group.leader_id)
        for member in group.members.values():
            if member.join_waiter is not None:
                fx.answer(member.join_waiter, self._join_result(group, member))
                member.join_waiter = None
            member.is_new = False
            self._heartbeat(group, member, now)
        group.pending_sync = set(group.members)
        group.sync_deadline = now + group.rebalance_timeout_ms()
        self._schedule(group.sync_deadline, group.group_id)

    def _remove_member(self, group: Group, member: Member, now: int, fx: Effects) -> None:
        gone = UnknownMemberIdError(f"member {member.member_id} left group {group.group_id!r}")
        fx.answer(member.join_waiter, gone)
        fx.answer(member.sync_waiter, gone)
        member.join_waiter = member.sync_waiter = None
        group.remove(member.member_id)
        if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, now, fx, f"member {member.member_id} left")
        # The last member gone, nobody is left to wait for: the group is Empty at once.
        self._try_complete_join(group, now, fx)

    # -- SyncGroup, Heartbeat, LeaveGroup -------------------------------------------------------

    def _live_group(self, group_id: str) -> Group:
        group = self._groups.get(group_id)
        if group is None:
            raise UnknownMemberIdError(f"group {group_id!r} does not exist")
        if group.consumer is not None:
            raise UnknownMemberIdError(f"group {group_id!r} is a consumer group: it has no classic members")
        if group.is_in(GroupState.DEAD):
            raise CoordinatorNotAvailableError(f"group {group_id!r} is being removed")
        return group

    def sync_group(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                   assignments: Mapping[str, bytes], protocol_type: str | None = None,
                   protocol_name: str | None = None) -> Future:
        """SyncGroup: a future of the member's `SyncResult`, answered once the leader's assignment is stored."""
        now = self._clock()
        fx = Effects()
        waiter: Future = Future()
        stored = None
        with self._lock:
            try:
                group = self._groups.get(group_id)
                if group is not None and group.consumer is not None:
                    name, assignment = self._classic_sync_to_consumer(group, generation_id, member_id,
                                                                      group_instance_id, protocol_type,
                                                                      protocol_name, now)
                    fx.answer(waiter, SyncResult(CONSUMER_PROTOCOL, name, assignment))
                else:
                    stored = self._sync_classic(group_id, generation_id, member_id, group_instance_id, assignments,
                                                protocol_type, protocol_name, waiter, now, fx)
            except LogStoreError as exc:
                fx.answer(waiter, exc)
        try:
            self._finish(fx)
        except CoordinatorNotAvailableError as exc:
            if stored is not None:
                self._assignment_stored(*stored, exc)
            raise
        if stored is not None:
            self._assignment_stored(*stored, None)
        return waiter

    def _sync_classic(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                      assignments: Mapping[str, bytes], protocol_type: str | None, protocol_name: str | None,
                      waiter: Future, now: int, fx: Effects):
        """SyncGroup in a classic group; (group, generation, assignments) when the leader's are being stored."""
        group = self._live_group(group_id)
        member = self._current_member(group, member_id, group_instance_id)
        if generation_id != group.generation_id:
            raise IllegalGenerationError(
                f"generation {generation_id} is not group {group_id!r}'s {group.generation_id}")
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
                protocol_name is not None and protocol_name != group.protocol_name):
            raise InconsistentGroupProtocolError(
                f"group {group_id!r} uses {group.protocol_type}/{group.protocol_name}")
        if group.is_in(GroupState.EMPTY):
            raise UnknownMemberIdError(f"group {group_id!r} is empty")
        if group.is_in(GroupState.PREPARING_REBALANCE):
            raise RebalanceInProgressError(f"group {group_id!r} is rebalancing")
        self._heartbeat(group, member, now)
        group.pending_sync.discard(member_id)
        if group.is_in(GroupState.STABLE):
            fx.answer(waiter, SyncResult(group.protocol_type, group.protocol_name, member.assignment))
        else:
            fx.answer(member.sync_waiter, RebalanceInProgressError("a newer SyncGroup replaced this one"))
            member.sync_waiter = waiter
            if member_id == group.leader_id:
                chosen = {m: bytes(assignments.get(m) or b"") for m in group.members}
                value = group.to_value()
                value = replace(value, members=tuple(replace(m, assignment=chosen[m.member_id])
                                                     for m in value.members))
                self._append(fx, group.partition, [encode_group_key(group_id)], [encode_group_value(value)])
                return group, group.generation_id, chosen
        return None

    def _assignment_stored(self, group: Group, generation_id: int, assignments: dict[str, bytes],
                           error: LogStoreError | None) -> None:
        fx = Effects()
        with self._lock:
            if not group.is_in(GroupState.COMPLETING_REBALANCE) or group.generation_id != generation_id:
                return  # a rebalance started meanwhile and answered the waiting members
            if error is not None:
                self._fail_syncs(group, fx, error)
                self._prepare_rebalance(group, self._clock(), fx, "the assignment could not be stored")
            else:
                for member_id, member in group.members.items():
                    member.assignment = assignments.get(member_id, b"")
                    fx.answer(member.sync_waiter, SyncResult(group.protocol_type, group.protocol_name,
                                                             member.assignment))
                    member.sync_waiter = None
                group.transition(GroupState.STABLE, self._clock())
                log.info("group %r: generation %d is stable", group.group_id, generation_id)
        self._finish(fx, strict=False)

    def heartbeat(self, group_id: str, generation_id: int, member_id: str,
                  group_instance_id: str | None = None) -> None:
        """Heartbeat: the member is alive; raises RebalanceInProgressError when it must rejoin."""
        now = self._clock()
        with self._lock:
            group = self._groups.get(group_id)
            if group is not None and group.consumer is not None:
                self._classic_heartbeat_to_consumer(group, generation_id, member_id, group_instance_id, now)
                return
            group = self._live_group(group_id)
            member = self._current_member(group, member_id, group_instance_id)
            if generation_id != group.generation_id:
                raise IllegalGenerationError(
                    f"generation {generation_id} is not group {group_id!r}'s {group.generation_id}")
            if group.is_in(GroupState.EMPTY):
                raise UnknownMemberIdError(f"group {group_id!r} is empty")
            self._heartbeat(group, member, now)
            if group.is_in(GroupState.PREPARING_REBALANCE):
                raise RebalanceInProgressError(f"group {group_id!r} is rebalancing: rejoin")

    def leave_group(self, group_id: str, members: Iterable[tuple[str, str | None]]) -> list[LogStoreError | None]:
        """LeaveGroup: remove members (id, instance id); an error or None for each."""
        now = self._clock()
        fx = Effects()
        with self._lock:
            group = self._groups.get(group_id)
            if group is not None and self._takes_classic_members(group):
                results = self._classic_leave_to_consumer(group, members, fx)
            else:
                results = self._leave_classic(group_id, members, now, fx)
        self._finish(fx, strict=False)
        return results

    def _leave_classic(self, group_id: str, members: Iterable[tuple[str, str | None]], now: int,
                       fx: Effects) -> list[LogStoreError | None]:
        """LeaveGroup in a classic group."""
        results: list[LogStoreError | None] = []
        group = self._live_group(group_id)
        for member_id, instance_id in members:
            try:
                if instance_id is not None:
                    holder = group.static_member_id(instance_id)
                    if holder is None:
                        raise UnknownMemberIdError(f"group {group_id!r} has no instance {instance_id!r}")
                    if member_id and member_id != holder:
                        raise FencedInstanceIdError(f"instance {instance_id!r} is now member {holder!r}")
                    member_id = holder
                if member_id in group.pending_members:
                    del group.pending_members[member_id]
                    self._try_complete_join(group, now, fx)
                elif member_id in group.members:
                    log.info("group %r: member %s left", group_id, member_id)
                    self._remove_member(group, group.members[member_id], now, fx)
                else:
                    raise UnknownMemberIdError(f"group {group_id!r} has no member {member_id!r}")
                results.append(None)
            except LogStoreError as exc:
                results.append(exc)
        return results

    # -- what operators see ------------------------------------------------------------------

    def describe(self, group_id: str) -> GroupDescription:
        """DescribeGroups for one classic group (Dead with no members when unknown, as Kafka answers)."""
        with self._lock:
            group = self._groups.get(group_id)
            if group is None or group.consumer is not None:
                # A consumer group is no classic group: Dead, as Kafka answers DescribeGroups up to v5.
                return GroupDescription(group_id, GroupState.DEAD.value, "", "", ())
            stable = group.is_in(GroupState.STABLE)
            members = tuple(MemberDescription(
                m.member_id, m.group_instance_id, m.client_id, m.client_host,
                m.metadata(group.protocol_name) if stable and group.protocol_name else b"",
                m.assignment if stable else b"") for m in group.members.values())
            return GroupDescription(group_id, group.state.value, group.protocol_type or "",
                                    (group.protocol_name or "") if stable else "", members)

    def list_groups(self, states: Iterable[str] = ()) -> list[tuple[str, str, str]]:
        """ListGroups: (group id, protocol type, state) of every group, or of those in `states`."""
        return [(g.group_id, g.protocol_type, g.state) for g in self.listed_groups(states)]

    def listed_groups(self, states: Iterable[str] = (), types: Iterable[str] = ()) -> list[ListedGroup]:
        """ListGroups v5: every group of both kinds, or those in `states` and of `types` (case-insensitive,
        as Kafka compares them)."""
        wanted = {s.strip().lower() for s in states}
        kinds = {t.strip().lower() for t in types}
        with self._lock:
            listed = [ListedGroup(g.group_id, CONSUMER_PROTOCOL if g.consumer is not None else g.protocol_type or "",
                                  g.state_name, g.group_type) for g in self._groups.values()]
        return [g for g in listed if (not wanted or g.state.lower() in wanted)
                and (not kinds or g.group_type in kinds)]

