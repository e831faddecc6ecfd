"""KIP-932 share groups in the group coordinator: ShareGroupHeartbeat, ShareGroupDescribe, session expiry,
listing and deletion, and what the share-fetch path needs to know of them.

A share group is a `ShareGroup` (share_group.py) kept in the `GroupStore`
beside the classic and consumer groups (`GroupStore.shares`); one id is one
kind of group, as in Kafka: a share heartbeat to a classic or consumer group
answers GROUP_ID_NOT_FOUND ("Group ... is not a share group."), and the
façade refuses the other kinds' calls on a share group's id.

Each heartbeat runs on a copy of the group; the records between the copy and
the group (share_group_log.py) are appended, and only then does the copy
replace the group (prepare, then commit). A member's session is a timer on
the coordinator's heap; one that runs out removes the member, which bumps the
group epoch; the others learn of it at their next heartbeat.

The share-fetch path learns of share groups through a `ShareListener`, called
outside the coordinator's lock and after the records are durable:
`partitions_assigned` with the assigned partitions whose share state is not
initialized yet (the heartbeat is answered after it returns, and the
partitions are then recorded in ShareGroupStatePartitionMetadata; one that
raises leaves them uninitialized, to be offered again at the next heartbeat),
`member_left` when a member leaves or expires, and `group_deleted` with the
group's initialized partitions when DeleteGroups removes it.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from logstore.broker.coordinator.group_context import Effects, GroupContext
from logstore.broker.coordinator.group_results import ListedGroup
from logstore.broker.coordinator.group_store import GroupStore
from logstore.broker.coordinator.share_group import (
    LEAVE_EPOCH,
    SIMPLE_ASSIGNOR,
    ShareGroup,
    ShareGroupConfig,
    check_heartbeat,
)
from logstore.broker.coordinator.share_group_log import records_between
from logstore.errors import (
    CoordinatorNotAvailableError,
    GroupIdNotFoundError,
    LogStoreError,
    NonEmptyGroupError,
    StorageError,
)

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
SHARE_PROTOCOL = "share"
# How long an expiry whose records could not be written waits before it is tried again (ms).
RETRY_EXPIRY_MS = 1_000
# A group's own configs (group configs, config resource GROUP) that override the broker's.
SESSION_TIMEOUT = "share.session.timeout.ms"
HEARTBEAT_INTERVAL = "share.heartbeat.interval.ms"

GroupSetting = Callable[[str, str], Any]


class ShareListener(Protocol):
    """What the share-fetch path is told of share groups; every call comes outside the coordinator's lock."""

    def partitions_assigned(self, group_id: str, partitions: list[tuple[str, int]]) -> None:
        """Assigned partitions whose share state is not initialized: initialize it (idempotently) before
        returning; they are recorded as initialized once this returns."""

    def member_left(self, group_id: str, member_id: str) -> None:
        """A member left its group or its session expired."""

    def group_deleted(self, group_id: str, partitions: list[tuple[str, int]]) -> None:
        """DeleteGroups removed the group; `partitions` had initialized share state."""


class NoShareListener:
    """The listener of a coordinator nothing reads share partitions through."""

    def partitions_assigned(self, group_id: str, partitions: list[tuple[str, int]]) -> None:
        """Nothing to initialize."""

    def member_left(self, group_id: str, member_id: str) -> None:
        """Nothing to release."""

    def group_deleted(self, group_id: str, partitions: list[tuple[str, int]]) -> None:
        """Nothing to delete."""


@dataclass(frozen=True)
class ShareHeartbeatResult:
    """A ShareGroupHeartbeat answer; `assignment` is (topic id, partitions) per topic, None if unchanged."""

    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: tuple[tuple[bytes, tuple[int, ...]], ...] | None


@dataclass(frozen=True)
class ShareMemberDescription:
    """One member as ShareGroupDescribe shows it; its assignment as (topic id, name, partitions)."""

    member_id: str
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    assignment: tuple[tuple[bytes, str, tuple[int, ...]], ...]


@dataclass(frozen=True)
class ShareGroupDescription:
    """A share group as ShareGroupDescribe shows it, or the error it answers instead."""

    group_id: str
    state: str = "Dead"
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: tuple[ShareMemberDescription, ...] = ()
    error: LogStoreError | None = None


class ShareGroupManager:
    """The group coordinator's share-group calls, over the groups in `GroupStore.shares`.

    Public calls take the context's lock themselves (and call the listener after releasing it); the
    `on_*`, `start_sessions` and `forget_timers` methods run under it. Task-safe; times are ms.
    """

    def __init__(self, context: GroupContext, groups: GroupStore, config: ShareGroupConfig,
                 partition_of: Callable[[str], int], listener: ShareListener | None = None,
                 group_setting: GroupSetting | None = None) -> None:
        self._context = context
        self._groups = groups
        self._config = config
        self._partition_of = partition_of
        self._listener: ShareListener = listener or NoShareListener()
        self._group_setting = group_setting
        # (group id, member id) -> the deadline of the member's live timer
        self._queued: dict[tuple[str, str], int] = {}

    def _setting(self, group_id: str, name: str, default: int) -> int:
        if self._group_setting is None:
            return default
        value = self._group_setting(group_id, name)
        return default if value is None else int(value)

    def _rows(self, partitions: Iterable[TopicPartition]) -> list[tuple[bytes, str, tuple[int, ...]]]:
        grouped: dict[str, list[int]] = {}
        for topic, p in sorted(partitions):
            grouped.setdefault(topic, []).append(p)
        return [(topic_id, t, tuple(ps)) for t, ps in grouped.items()
                if (topic_id := self._context.topic_id(t)) is not None]

    # -- ShareGroupHeartbeat -------------------------------------------------------------------

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, *, rack_id: str | None = None,
                  subscribed_topic_names: Iterable[str] | None = None, client_id: str = "",
                  client_host: str = "") -> ShareHeartbeatResult:
        """ShareGroupHeartbeat; Kafka's errors are raised."""
        topics = None if subscribed_topic_names is None else list(subscribed_topic_names)
        check_heartbeat(group_id, member_id, member_epoch, rack_id, topics)
        session_ms = self._setting(group_id, SESSION_TIMEOUT, self._config.session_timeout_ms)
        interval_ms = self._setting(group_id, HEARTBEAT_INTERVAL, self._config.heartbeat_interval_ms)
        partition = self._partition_of(group_id)
        counts = self._context.store.topics()
        now = self._context.clock()
        fx = Effects()
        with self._context.lock:
            if self._groups.get(group_id) is not None:
                raise GroupIdNotFoundError(f"Group {group_id} is not a share group.")
            before = self._groups.shares.get(group_id)
            if before is None and member_epoch != 0:
                raise GroupIdNotFoundError(f"Share group {group_id} not found.")
            working = before.copy() if before is not None else ShareGroup(group_id)
            answer = working.heartbeat(self._config, counts, now, member_id=member_id, member_epoch=member_epoch,
                                       rack_id=rack_id, subscribed_topics=topics, client_id=client_id,
                                       client_host=client_host, session_timeout_ms=session_ms)
            # A deleted topic's share state went with it (a recreated one starts afresh).
            working.initialized = frozenset(tp for tp in working.initialized if tp[1] < counts.get(tp[0], 0))
            records = records_between(before, working, self._context.topic_id, now)
            try:
                if records:
                    self._context.append(fx, partition, [k for k, _ in records], [v for _, v in records])
            except LogStoreError as exc:
                raise CoordinatorNotAvailableError(f"__consumer_offsets not written: {exc}") from exc
            self._groups.shares[group_id] = working
            if member_id in working.members:
                self._watch(working, member_id)
            else:
                self._queued.pop((group_id, member_id), None)
            uninitialized = sorted(working.assigned_partitions() - working.initialized)
            rows = None if answer.assignment is None else tuple(
                (topic_id, ps) for topic_id, _, ps in self._rows(answer.assignment))
        self._context.finish(fx)
        if member_epoch == LEAVE_EPOCH:
            self._listener.member_left(group_id, member_id)
        elif uninitialized:
            self._initialize(group_id, uninitialized)
        return ShareHeartbeatResult(member_id, answer.member_epoch, interval_ms, rows)

    def _initialize(self, group_id: str, partitions: list[TopicPartition]) -> None:
        """Have the listener initialize the partitions' share state, then record them as initialized."""
        try:
            self._listener.partitions_assigned(group_id, partitions)
        except Exception:  # noqa: BLE001 - the next heartbeat offers them again
            log.exception("share group %r: share state of %d partitions not initialized", group_id, len(partitions))
            return
        fx = Effects()
        with self._context.lock:
            current = self._groups.shares.get(group_id)
            if current is None or current.initialized.issuperset(partitions):
                return
            working = current.copy()
            working.initialized = current.initialized | frozenset(partitions)
            records = records_between(current, working, self._context.topic_id, self._context.clock())
            try:
                self._context.append(fx, self._partition_of(group_id), [k for k, _ in records],
                                     [v for _, v in records])
            except LogStoreError as exc:
                raise CoordinatorNotAvailableError(f"__consumer_offsets not written: {exc}") from exc
            self._groups.shares[group_id] = working
        self._context.finish(fx)

    # -- sessions ----------------------------------------------------------------------------

    def _watch(self, group: ShareGroup, member_id: str) -> None:
        """Queue the member's session deadline unless an earlier timer is queued (it looks again then)."""
        deadline = group.members[member_id].session_deadline
        key = (group.group_id, member_id)
        queued = self._queued.get(key)
        if queued is None or deadline < queued:
            self._queued[key] = deadline
            self._context.schedule(deadline, group.group_id, member_id)

    def on_member_deadline(self, group_id: str, member_id: str, deadline: int, now: int, fx: Effects) -> bool:
        """A share member's timer (under the lock): True when its session ran out and it was removed."""
        key = (group_id, member_id)
        if self._queued.get(key) != deadline:
            return False   # superseded by another timer
        del self._queued[key]
        current = self._groups.shares.get(group_id)
        if current is None or member_id not in current.members:
            return False
        if current.members[member_id].session_deadline > now:
            self._watch(current, member_id)
            return False
        working = current.copy()
        working.remove(member_id)
        records = records_between(current, working, self._context.topic_id, now)
        try:
            self._context.append(fx, self._partition_of(group_id), [k for k, _ in records], [v for _, v in records])
        except LogStoreError as exc:
            log.warning("share group %r: member %s not removed yet: %s", group_id, member_id, exc)
            self._queued[key] = now + RETRY_EXPIRY_MS
            self._context.schedule(now + RETRY_EXPIRY_MS, group_id, member_id)
            return False
        self._groups.shares[group_id] = working
        log.info("share group %r: member %s removed: no heartbeat within its session timeout (group epoch %d)",
                 group_id, member_id, working.group_epoch)
        return True

    def member_expired(self, group_id: str, member_id: str) -> None:
        """Tell the listener of a member `on_member_deadline` removed (after the lock)."""
        self._listener.member_left(group_id, member_id)

    def start_sessions(self, now: int) -> None:
        """After loading (under the lock): every member's session starts now."""
        self._queued = {}
        for group in self._groups.shares.values():
            session_ms = self._setting(group.group_id, SESSION_TIMEOUT, self._config.session_timeout_ms)
            for member in group.members.values():
                member.session_deadline = now + session_ms
                self._watch(group, member.member_id)

    # -- ShareGroupDescribe, ListGroups, DeleteGroups ------------------------------------------

    def describe(self, group_ids: Iterable[str]) -> list[ShareGroupDescription]:
        """ShareGroupDescribe: each group, or GROUP_ID_NOT_FOUND for an unknown or other kind of group."""
        found = []
        with self._context.lock:
            for group_id in group_ids:
                group = self._groups.shares.get(group_id)
                if group is None:
                    message = (f"Group {group_id} is not a share group." if self._groups.get(group_id) is not None
                               else f"Group {group_id} not found.")
                    found.append(ShareGroupDescription(group_id, error=GroupIdNotFoundError(message)))
                    continue
                members = tuple(ShareMemberDescription(
                    m.member_id, m.rack_id, m.member_epoch, m.client_id, m.client_host,
                    tuple(sorted(m.subscribed_topics)), tuple(self._rows(m.assigned)))
                    for m in group.members.values())
                found.append(ShareGroupDescription(group_id, group.state, group.group_epoch, group.assignment_epoch,
                                                   SIMPLE_ASSIGNOR, members))
        return found

    def listed(self) -> list[ListedGroup]:
        """Every share group as ListGroups shows it (under the lock)."""
        return [ListedGroup(g.group_id, SHARE_PROTOCOL, g.state, SHARE_PROTOCOL)
                for g in self._groups.shares.values()]

    def delete(self, group_ids: Iterable[str]) -> dict[str, LogStoreError | None]:
        """DeleteGroups of share groups: an empty one goes with tombstones for all its records (NON_EMPTY_GROUP
        with members); the listener hears of each deleted group."""
        fx = Effects()
        errors: dict[str, LogStoreError | None] = {}
        deleted: list[tuple[str, list[TopicPartition]]] = []
        with self._context.lock:
            for group_id in group_ids:
                group = self._groups.shares.get(group_id)
                if group is None:
                    errors[group_id] = GroupIdNotFoundError(f"Group {group_id} not found.")
                    continue
                if group.members:
                    errors[group_id] = NonEmptyGroupError("The group is not empty.")
                    continue
                records = records_between(group, None, self._context.topic_id)
                try:
                    self._context.append(fx, self._partition_of(group_id), [k for k, _ in records],
                                         [v for _, v in records])
                except StorageError as exc:
                    errors[group_id] = CoordinatorNotAvailableError(f"__consumer_offsets not written: {exc}")
                    continue
                del self._groups.shares[group_id]
                errors[group_id] = None
                deleted.append((group_id, sorted(group.initialized)))
        self._context.finish(fx)
        for group_id, partitions in deleted:
            self._listener.group_deleted(group_id, partitions)
        return errors

    # -- what the share-fetch path asks ----------------------------------------------------------

    def is_member(self, group_id: str, member_id: str) -> bool:
        """Whether `member_id` is a member of the share group `group_id` now."""
        with self._context.lock:
            group = self._groups.shares.get(group_id)
            return group is not None and member_id in group.members

    def partitions(self, group_id: str) -> list[TopicPartition]:
        """The share group's partitions whose share state is initialized (none for an unknown group)."""
        with self._context.lock:
            group = self._groups.shares.get(group_id)
            return [] if group is None else sorted(group.initialized)


def share_ids(groups: GroupStore, group_ids: Iterable[str]) -> tuple[list[str], list[str]]:
    """Split ids into those of share groups and the others (under the lock)."""
    shares: list[str] = []
    others: list[str] = []
    for group_id in group_ids:
        (shares if group_id in groups.shares else others).append(group_id)
    return shares, others
