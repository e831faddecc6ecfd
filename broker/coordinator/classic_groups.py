"""Classic consumer groups: JoinGroup, SyncGroup, Heartbeat and LeaveGroup of Kafka's classic protocol.

Membership follows Kafka's ClassicGroup: a new member gets an id to rejoin
with (KIP-394), a static member (group.instance.id) that restarts takes its
old place and fences the old instance, the leader's SyncGroup assignment is
persisted before it is relayed to every member (Stable). The rebalance
phases and sessions are `ClassicRebalancer`'s (classic_rebalance.py).
Held replies are `concurrent.futures.Future`s answered through the caller's
`Effects`, so nothing here touches a socket or waits for an fsync.
"""
from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from dataclasses import replace

from logstore.broker.coordinator.classic_rebalance import ClassicRebalancer
from logstore.broker.coordinator.group_config import GroupConfig
from logstore.broker.coordinator.group_context import Effects, GroupContext
from logstore.broker.coordinator.group_log import encode_group_key, encode_group_value
from logstore.broker.coordinator.group_results import GroupDescription, JoinResult, MemberDescription, SyncResult
from logstore.broker.coordinator.group_state import Group, GroupState, Member
from logstore.broker.coordinator.group_store import GroupStore
from logstore.errors import (
    CoordinatorNotAvailableError,
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

# How long a member that joined during a rebalance may take to finish joining (Kafka's NewMemberJoinTimeoutMs).
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000

# A SyncGroup of the leader whose assignment is being stored: (group, generation, assignment per member).
StoredAssignment = tuple[Group, int, dict[str, bytes]]


def current_member(group: Group, member_id: str, group_instance_id: str | None) -> Member:
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


class ClassicGroupManager:
    """The classic protocol's calls on classic groups (a consumer group's classic members are
    `GroupMigration`'s). Every method but `assignment_stored` runs under the context's lock, which the
    caller holds; times are ms."""

    def __init__(self, context: GroupContext, groups: GroupStore, config: GroupConfig,
                 rebalancer: ClassicRebalancer) -> None:
        self._context = context
        self._groups = groups
        self._config = config
        self._rebalancer = rebalancer

    # -- JoinGroup ---------------------------------------------------------------------------

    def join(self, group_id: str, group: Group | None, partition: int, waiter: Future[JoinResult],
             member_id: str, group_instance_id: str | None, client_id: str, client_host: str,
             session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str, protocols: list[tuple[str, bytes]],
             require_known_member_id: bool, now: int, fx: Effects) -> None:
        """JoinGroup to a classic group or a new one; `waiter` is answered when the rebalance completes."""
        if group is None:
            if member_id:
                raise UnknownMemberIdError(f"group {group_id!r} does not exist")
            group = self._groups.put(Group(group_id, partition, state_timestamp=now))
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
            self._rebalancer.try_complete_join(group, now, fx)

    def _join_unknown(self, group: Group, joining: Member, require_known_member_id: bool, now: int,
                      fx: Effects) -> None:
        prefix = joining.group_instance_id if joining.group_instance_id is not None else joining.client_id
        joining.member_id = f"{prefix}-{uuid.uuid4()}"
        if len(group.members) + len(group.pending_members) >= self._config.max_size:
            raise GroupMaxSizeReachedError(
                f"group {group.group_id!r} has {self._config.max_size} members (group.max.size)")
        if joining.group_instance_id is not None:
            old_id = group.static_member_id(joining.group_instance_id)
            if old_id is not None:
                self._replace_static_member(group, group.members[old_id], joining.group_instance_id, joining, now,
                                            fx)
            else:
                self._add_member(group, joining, now, fx)
        elif require_known_member_id:
            # KIP-394: the id is remembered for a session, and the client rejoins with it.
            group.pending_members[joining.member_id] = now + joining.session_timeout_ms
            self._context.schedule(now + joining.session_timeout_ms, group.group_id, joining.member_id)
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
        member = current_member(group, member_id, joining.group_instance_id)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            self._update_member(group, member, joining, now, fx)
        elif group.is_in(GroupState.COMPLETING_REBALANCE):
            if member.same_protocols(joining.protocols):
                # A retried join of this generation (its answer was lost): answer it again.
                fx.answer(joining.join_waiter, self._rebalancer.join_result(group, member))
            else:
                self._update_member(group, member, joining, now, fx)
        elif group.is_in(GroupState.STABLE):
            if member_id == group.leader_id or not member.same_protocols(joining.protocols):
                self._update_member(group, member, joining, now, fx)
            else:
                fx.answer(joining.join_waiter, self._rebalancer.join_result(group, member, with_members=False))
        else:
            raise UnknownMemberIdError(f"group {group.group_id!r} has no member {member_id!r}")

    def _add_member(self, group: Group, member: Member, now: int, fx: Effects) -> None:
        member.is_new = True
        if group.is_in(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        group.add(member)
        # A new member that never completes its join is dropped after this long, not after the rebalance timeout.
        self._rebalancer.heartbeat(group, member, now, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._rebalancer.maybe_prepare(group, now, fx, f"member {member.member_id} joined")

    def _update_member(self, group: Group, member: Member, joining: Member, now: int, fx: Effects) -> None:
        fx.answer(member.join_waiter, RebalanceInProgressError("a newer JoinGroup from this member replaced this one"))
        member.protocols = joining.protocols
        member.rebalance_timeout_ms = joining.rebalance_timeout_ms
        member.session_timeout_ms = joining.session_timeout_ms
        member.join_waiter = joining.join_waiter
        self._rebalancer.maybe_prepare(group, now, fx, f"member {member.member_id} rejoined")

    def _replace_static_member(self, group: Group, old: Member, instance_id: str, joining: Member, now: int,
                               fx: Effects) -> None:
        """A static member restarted: the new instance takes the old one's place (the old one is fenced)."""
        fenced = FencedInstanceIdError(f"instance {instance_id!r} rejoined as another member")
        fx.answer(old.join_waiter, fenced)
        fx.answer(old.sync_waiter, fenced)
        old.join_waiter = old.sync_waiter = None
        member = group.replace_static_member(instance_id, joining.member_id)
        protocol_before = group.protocol_name
        member.protocols = joining.protocols
        member.rebalance_timeout_ms = joining.rebalance_timeout_ms
        member.session_timeout_ms = joining.session_timeout_ms
        member.client_id, member.client_host = joining.client_id, joining.client_host
        member.join_waiter = joining.join_waiter
        member.timer_at = None  # the old id's timer finds no member: the new id needs its own
        self._rebalancer.heartbeat(group, member, now)
        if group.is_in(GroupState.STABLE) and group.select_protocol() == protocol_before:
            # Kafka's rule: a static member's restart in a stable group needs no rebalance; the
            # new member id is persisted so the old instance stays fenced after a restart.
            self._rebalancer.store_group(fx, group)
            fx.answer(member.join_waiter, self._rebalancer.join_result(group, member))
            member.join_waiter = None
        elif group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._rebalancer.prepare(group, now, fx, f"static member {instance_id} restarted")

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

    def sync(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
             assignments: Mapping[str, bytes], protocol_type: str | None, protocol_name: str | None,
             waiter: Future[SyncResult], now: int, fx: Effects) -> StoredAssignment | None:
        """SyncGroup in a classic group; what `assignment_stored` needs when the leader's are being stored."""
        group = self._live_group(group_id)
        member = current_member(group, member_id, group_instance_id)
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
        self._rebalancer.heartbeat(group, member, now)
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
                self._context.append(fx, group.partition, [encode_group_key(group_id)], [encode_group_value(value)])
                return group, group.generation_id, chosen
        return None

    def assignment_stored(self, group: Group, generation_id: int, assignments: dict[str, bytes],
                          error: LogStoreError | None) -> None:
        """After the leader's assignment was appended (outside the lock): relay it, or rebalance on `error`."""
        fx = Effects()
        with self._context.lock:
            if not group.is_in(GroupState.COMPLETING_REBALANCE) or group.generation_id != generation_id:
                return  # a rebalance started meanwhile and answered the waiting members
            if error is not None:
                self._rebalancer.fail_syncs(group, fx, error)
                self._rebalancer.prepare(group, self._context.clock(), fx, "the assignment could not be stored")
            else:
                for member_id, member in group.members.items():
                    member.assignment = assignments.get(member_id, b"")
                    fx.answer(member.sync_waiter, SyncResult(group.protocol_type, group.protocol_name,
                                                             member.assignment))
                    member.sync_waiter = None
                group.transition(GroupState.STABLE, self._context.clock())
                log.info("group %r: generation %d is stable", group.group_id, generation_id)
        self._context.finish(fx, strict=False)

    def heartbeat(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                  now: int) -> None:
        """Heartbeat in a classic group; raises RebalanceInProgressError when the member must rejoin."""
        group = self._live_group(group_id)
        member = current_member(group, member_id, group_instance_id)
        if generation_id != group.generation_id:
            raise IllegalGenerationError(
                f"generation {generation_id} is not group {group_id!r}'s {group.generation_id}")
        if group.is_in(GroupState.EMPTY):
            raise UnknownMemberIdError(f"group {group_id!r} is empty")
        self._rebalancer.heartbeat(group, member, now)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            raise RebalanceInProgressError(f"group {group_id!r} is rebalancing: rejoin")

    def leave(self, group_id: str, members: Iterable[tuple[str, str | None]], now: int,
              fx: Effects) -> list[LogStoreError | None]:
        """LeaveGroup in a classic group: an error or None for each (member id, instance id)."""
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
                    self._rebalancer.try_complete_join(group, now, fx)
                elif member_id in group.members:
                    log.info("group %r: member %s left", group_id, member_id)
                    self._rebalancer.remove_member(group, group.members[member_id], now, fx)
                else:
                    raise UnknownMemberIdError(f"group {group_id!r} has no member {member_id!r}")
                results.append(None)
            except LogStoreError as exc:
                results.append(exc)
        return results

    # -- what operators see ------------------------------------------------------------------

    def describe(self, group_id: str) -> GroupDescription:
        """DescribeGroups for one classic group (Dead with no members when unknown, as Kafka answers)."""
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
