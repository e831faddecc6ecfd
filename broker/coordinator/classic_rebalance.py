"""The rebalance of a classic group: its phases, its deadlines, and the members' sessions.

A join moves the group to PreparingRebalance; the JoinGroup replies are
held until every member has rejoined or the rebalance timeout passes (after
`group.initial.rebalance.delay.ms` for a group that was empty), then all are
answered at once with the next generation, the leader alone getting the
members' metadata. Members that stop heartbeating are removed after their
session timeout, which starts a rebalance. Members of a generation that send
no SyncGroup within the rebalance timeout are removed too (Kafka's rule).
"""
from __future__ import annotations

import logging

from logstore.broker.coordinator.group_config import GroupConfig
from logstore.broker.coordinator.group_context import Effects, GroupContext
from logstore.broker.coordinator.group_log import GroupValue, encode_group_key, encode_group_value
from logstore.broker.coordinator.group_results import JoinResult
from logstore.broker.coordinator.group_state import Group, GroupState, Member
from logstore.errors import LogStoreError, RebalanceInProgressError, UnknownMemberIdError

log = logging.getLogger(__name__)


class ClassicRebalancer:
    """The rebalance phases and member sessions of classic groups (Kafka's prepareRebalance,
    completeClassicGroupJoin and the session, join and sync timeouts).

    Every method runs under the context's lock; replies and appends go into the caller's `Effects`.
    Deadlines and timeouts are in ms.
    """

    def __init__(self, context: GroupContext, config: GroupConfig) -> None:
        self._context = context
        self._config = config

    # -- sessions ------------------------------------------------------------------------------

    def heartbeat(self, group: Group, member: Member, now: int, timeout_ms: int | None = None) -> None:
        """The member is alive: its session restarts (for `timeout_ms` instead of its session, if given)."""
        member.heartbeat_deadline = now + (member.session_timeout_ms if timeout_ms is None else timeout_ms)
        # A later deadline is found by the queued timer when it fires; only an earlier one needs its own.
        if member.timer_at is None or member.heartbeat_deadline < member.timer_at:
            self.schedule_member(group, member, member.heartbeat_deadline)

    def schedule_member(self, group: Group, member: Member, deadline: int) -> None:
        """Queue a timer for the member at `deadline`."""
        member.timer_at = deadline
        self._context.schedule(deadline, group.group_id, member.member_id)

    def on_member_deadline(self, group: Group, member_id: str, deadline: int, now: int, fx: Effects) -> None:
        """A member's timer fired: forget a pending id never used, remove a member whose session ran out."""
        pending = group.pending_members.get(member_id)
        if pending is not None:
            if pending <= now:
                del group.pending_members[member_id]
                log.info("group %r: member id %s was never used to join; forgotten", group.group_id, member_id)
                self.try_complete_join(group, now, fx)
            return
        member = group.members.get(member_id)
        if member is None or member.timer_at != deadline:
            return  # gone, or this timer was superseded by an earlier one
        member.timer_at = None
        if member.heartbeat_satisfied(now):
            # Waiting in a rebalance counts as alive: look again a session from now.
            later = member.heartbeat_deadline if member.heartbeat_deadline > now else now + member.session_timeout_ms
            self.schedule_member(group, member, later)
            return
        log.info("group %r: member %s removed: no heartbeat within its session timeout of %d ms",
                 group.group_id, member_id, member.session_timeout_ms)
        self.remove_member(group, member, now, fx)

    def remove_member(self, group: Group, member: Member, now: int, fx: Effects) -> None:
        """The member is gone (left, or its session ran out): its held calls fail, the others rebalance."""
        gone = UnknownMemberIdError(f"member {member.member_id} left group {group.group_id!r}")
        fx.answer(member.join_waiter, gone)
        fx.answer(member.sync_waiter, gone)
        member.join_waiter = member.sync_waiter = None
        group.remove(member.member_id)
        if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self.prepare(group, now, fx, f"member {member.member_id} left")
        # The last member gone, nobody is left to wait for: the group is Empty at once.
        self.try_complete_join(group, now, fx)

    # -- what is written and answered ------------------------------------------------------------

    def store_group(self, fx: Effects, group: Group, value: GroupValue | None = None) -> None:
        """Persist the group's metadata; a failure is logged (the group lives on in memory)."""
        try:
            self._context.append(fx, group.partition, [encode_group_key(group.group_id)],
                                 [encode_group_value(value or group.to_value())])
        except LogStoreError as exc:
            log.warning("group %r: metadata not written: %s", group.group_id, exc)

    @staticmethod
    def join_result(group: Group, member: Member, with_members: bool = True) -> JoinResult:
        """The JoinGroup answer of a member of the current generation (the leader gets the members)."""
        members: tuple[tuple[str, str | None, bytes], ...] = ()
        if with_members and member.member_id == group.leader_id:
            protocol = group.protocol_name  # a group with a leader has chosen its protocol
            members = tuple((m.member_id, m.group_instance_id, m.metadata(protocol))
                            for m in group.members.values())
        return JoinResult(member.member_id, group.generation_id, group.protocol_type, group.protocol_name,
                          group.leader_id or "", members)

    # -- the phases ----------------------------------------------------------------------------

    def maybe_prepare(self, group: Group, now: int, fx: Effects, reason: str) -> None:
        """Start a rebalance unless one is being prepared."""
        if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            self.prepare(group, now, fx, reason)

    def prepare(self, group: Group, now: int, fx: Effects, reason: str) -> None:
        """Move the group to PreparingRebalance and set its join deadline."""
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            self.fail_syncs(group, fx, RebalanceInProgressError(f"group {group.group_id!r} is rebalancing again"))
        delay = self._config.initial_rebalance_delay_ms
        if group.is_in(GroupState.EMPTY) and delay > 0:
            group.initial_delay_left = max(group.rebalance_timeout_ms() - delay, 0)
            group.join_deadline = now + delay
        else:
            group.initial_delay_left = None
            group.join_deadline = now + group.rebalance_timeout_ms()
        group.pending_sync.clear()
        group.sync_deadline = None
        group.transition(GroupState.PREPARING_REBALANCE, now)
        self._context.schedule(group.join_deadline, group.group_id)
        log.info("group %r: rebalancing from generation %d (%s)", group.group_id, group.generation_id, reason)

    @staticmethod
    def fail_syncs(group: Group, fx: Effects, error: LogStoreError) -> None:
        """Answer every held SyncGroup with `error`."""
        for member in group.members.values():
            fx.answer(member.sync_waiter, error)
            member.sync_waiter = None

    def try_complete_join(self, group: Group, now: int, fx: Effects) -> None:
        """End the join phase if every member has joined and no initial delay runs."""
        if (group.is_in(GroupState.PREPARING_REBALANCE) and group.initial_delay_left is None
                and group.all_joined()):
            self._complete_join(group, now, fx)

    def on_group_deadline(self, group: Group, now: int, fx: Effects) -> None:
        """The group's timer fired: expire late SyncGroups, end a join phase whose time is up."""
        if group.sync_deadline is not None and group.sync_deadline <= now:
            self._expire_pending_syncs(group, now, fx)
        if not group.is_in(GroupState.PREPARING_REBALANCE) or group.join_deadline is None \
                or group.join_deadline > now:
            return
        if group.initial_delay_left is not None:
            if group.new_member_added and group.initial_delay_left > 0:
                # Members are still arriving: wait another delay, within the rebalance timeout.
                group.new_member_added = False
                delay = min(self._config.initial_rebalance_delay_ms, group.initial_delay_left)
                group.initial_delay_left -= delay
                group.join_deadline = now + delay
                self._context.schedule(group.join_deadline, group.group_id)
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
        self.prepare(group, now, fx, f"{len(late)} members did not sync in time")

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
            self._context.schedule(group.join_deadline, group.group_id)
            return
        group.join_deadline = None
        group.new_member_added = False
        group.init_next_generation(now)
        if group.is_in(GroupState.EMPTY):
            self.store_group(fx, group)
            log.info("group %r is empty at generation %d", group.group_id, group.generation_id)
            return
        log.info("group %r: generation %d with %d members, protocol %s, leader %s", group.group_id,
                 group.generation_id, len(group.members), group.protocol_name, group.leader_id)
        for member in group.members.values():
            if member.join_waiter is not None:
                fx.answer(member.join_waiter, self.join_result(group, member))
                member.join_waiter = None
            member.is_new = False
            self.heartbeat(group, member, now)
        group.pending_sync = set(group.members)
        group.sync_deadline = now + group.rebalance_timeout_ms()
        self._context.schedule(group.sync_deadline, group.group_id)
