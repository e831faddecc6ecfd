"""The timers of KIP-848 consumer group members on the group coordinator's deadline heap.

A member has several deadlines (session, revocation, a classic member's
JoinGroup or SyncGroup); one timer is queued for the earliest of them, and
a later one is found when that timer fires. Which timer is the live one is
remembered per member, so a superseded timer that fires does nothing.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from logstore.broker.coordinator.consumer_group import ConsumerGroupConfig
from logstore.broker.coordinator.group_context import GroupContext
from logstore.broker.coordinator.group_state import Group


class ConsumerTimers:
    """The live timer (deadline, ms) of each consumer-group member, by (group id, member id).

    Every method runs under the context's lock.
    """

    def __init__(self, context: GroupContext, config: ConsumerGroupConfig, *,
                 group_setting: Callable[[str, str], Any] | None = None) -> None:
        """`group_setting(group_id, name)`: a group config's value for a group (its own `consumer.*`, else the
        broker's); None: every group runs with `config`."""
        self._context = context
        self._config = config
        self._group_setting = group_setting
        self._queued: dict[tuple[str, str], int] = {}

    def session_timeout_ms(self, group_id: str) -> int:
        """The session timeout of the group's consumer-protocol members (its consumer.session.timeout.ms)."""
        if self._group_setting is None:
            return self._config.session_timeout_ms
        timeout: int = self._group_setting(group_id, "consumer.session.timeout.ms")
        return timeout

    def watch(self, group: Group, member_id: str) -> None:
        """Queue the member's next deadline unless an earlier one is queued (a later one is found then)."""
        consumer = group.consumer_group()
        deadline = min(consumer.members[member_id].deadlines())
        key = (group.group_id, member_id)
        queued = self._queued.get(key)
        if queued is None or deadline < queued:
            self._queued[key] = deadline
            self._context.schedule(deadline, group.group_id, member_id)

    def claim(self, group_id: str, member_id: str, deadline: int) -> bool:
        """Whether a timer that fired is the member's live one (then it is no longer queued)."""
        key = (group_id, member_id)
        if self._queued.get(key) != deadline:
            return False
        del self._queued[key]
        return True

    def retry(self, group_id: str, member_id: str, at: int) -> None:
        """Fire the member's timer again at `at` (an expiry that could not be written)."""
        self._queued[(group_id, member_id)] = at
        self._context.schedule(at, group_id, member_id)

    def forget(self, group_id: str, member_ids: Iterable[str]) -> None:
        """The members are gone: their queued timers do nothing when they fire."""
        for member_id in member_ids:
            self._queued.pop((group_id, member_id), None)

    def start_sessions(self, group: Group, now: int) -> None:
        """After loading: every member's session starts now, and its members heartbeat on."""
        consumer = group.consumer_group()
        session_ms = self.session_timeout_ms(group.group_id)
        for member in consumer.members.values():
            member.session_deadline = now + (session_ms if member.classic is None
                                             else member.classic.session_timeout_ms)
            member.revocation_deadline = member.classic_deadline = None
            self.watch(group, member.member_id)

    def clear(self) -> None:
        """Forget every timer (the groups are being reloaded)."""
        self._queued = {}
