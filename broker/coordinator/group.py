"""The group coordinator: classic and KIP-848 consumer groups and their committed offsets, and KIP-932
share groups, over `__consumer_offsets`.

As Kafka 4's GroupCoordinatorShard, it is a façade over parts that each
receive what they use in their constructor:

- `GroupContext` (group_context.py): the lock, the clock, the deadline heap
  and the appends to `__consumer_offsets`, with replies held until durable;
- `GroupStore` (group_store.py): the groups by id, and reading them back;
- `GroupLoader` and `PartitionLoads` (group_loading.py): loading them partition
  by partition, and which partitions serve meanwhile;
- `ClassicGroupManager` and `ClassicRebalancer` (classic_groups.py,
  classic_rebalance.py): the classic protocol;
- `ConsumerGroupManager` and `ConsumerTimers` (consumer_groups.py,
  consumer_timers.py): KIP-848 consumer groups;
- `GroupMigration` (group_migration.py): conversions between the two, and
  classic members inside a consumer group;
- `OffsetManager` (group_offsets.py): committed offsets, deletion, expiry;
- `ShareGroupManager` (share_groups.py): share groups, their sessions, and
  what the share-fetch path is told of them (its `ShareListener`).

The façade routes each call by the kind of group its id names. Kafka's
refusals of the other kinds' calls on a share group's id are here:
JoinGroup INCONSISTENT_GROUP_PROTOCOL; ConsumerGroupHeartbeat, offset
commits, fetches and deletes GROUP_ID_NOT_FOUND ("... is not a consumer
group."); SyncGroup, Heartbeat and LeaveGroup UNKNOWN_MEMBER_ID. A JoinGroup
to an empty consumer group converts it (Kafka's offline downgrade); other
classic calls to a consumer group go to its members speaking the classic
protocol, which the migration policy lets in.

Held replies are `concurrent.futures.Future`s, so the coordinator never
touches a socket: the broker awaits them, an embedding application can
block on them. Deadlines (sessions, join phases) are kept in a heap that
`poll()` runs; the owner calls it when `on_timer` says an earlier deadline
was set.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, TypeVar

from logstore.broker.coordinator.classic_groups import NEW_MEMBER_JOIN_TIMEOUT_MS, ClassicGroupManager
from logstore.broker.coordinator.classic_rebalance import ClassicRebalancer
from logstore.broker.coordinator.consumer_groups import (
    ConsumerGroupDescription,
    ConsumerGroupManager,
    ConsumerHeartbeatResult,
)
from logstore.broker.coordinator.consumer_timers import ConsumerTimers
from logstore.broker.coordinator.group_config import GroupConfig
from logstore.broker.coordinator.group_context import Effects, GroupContext
from logstore.broker.coordinator.group_loading import GroupLoader, PartitionLoads, collection_paused
from logstore.broker.coordinator.group_migration import GroupMigration
from logstore.broker.coordinator.group_offsets import OffsetCommit, OffsetManager, TopicPartition
from logstore.broker.coordinator.group_results import (
    GroupDescription,
    JoinResult,
    ListedGroup,
    MemberDescription,
    SyncResult,
)
from logstore.broker.coordinator.group_state import CONSUMER_PROTOCOL, CommittedOffset
from logstore.broker.coordinator.group_store import GroupStore
from logstore.broker.coordinator.internal_topics import OFFSETS_TOPIC
from logstore.broker.coordinator.share_group import ShareGroupConfig
from logstore.broker.coordinator.share_groups import (
    ShareGroupDescription,
    ShareGroupManager,
    ShareHeartbeatResult,
    ShareListener,
    share_ids,
)
from logstore.errors import (
    CoordinatorNotAvailableError,
    GroupIdNotFoundError,
    InconsistentGroupProtocolError,
    InvalidGroupIdError,
    InvalidSessionTimeoutError,
    LogStoreError,
    UnknownMemberIdError,
)

if TYPE_CHECKING:
    import threading

    from logstore.broker.coordinator.transaction import TransactionCoordinator
    from logstore.log import Log
    from logstore.manager import LogManager

__all__ = ["GroupConfig", "GroupCoordinator", "GroupDescription", "JoinResult", "ListedGroup", "MemberDescription",
           "NEW_MEMBER_JOIN_TIMEOUT_MS", "SyncResult"]

T = TypeVar("T")


def _now_ms() -> int:
    return int(time.time() * 1000)


def _not_consumer(group_id: str) -> GroupIdNotFoundError:
    return GroupIdNotFoundError(f"Group {group_id} is not a consumer group.")


def _answered(value: T | BaseException) -> Future[T]:
    future: Future[T] = Future()
    if isinstance(value, BaseException):
        future.set_exception(value)
    else:
        future.set_result(value)
    return future


class GroupCoordinator:
    """Classic and KIP-848 consumer groups and committed offsets, and KIP-932 share groups, persisted in
    `__consumer_offsets`.

    Task-safe: every call may come from any thread (the broker's coordinator pool, the upkeep thread,
    in-process clients); the context's lock serialises their decisions, and fsyncs are waited for
    outside it. Times are ms. `share_listener` hears of share groups' partitions, leaving members and
    deletions (outside the lock); `group_setting(group_id, name)` is a group's config (a group config or
    the broker's default; None: the broker's `share_config` and `config`).
    """

    def __init__(self, store: LogManager, transactions: TransactionCoordinator, config: GroupConfig = GroupConfig(),
                 *, clock: Callable[[], int] = _now_ms, on_timer: Callable[[], None] | None = None,
                 share_config: ShareGroupConfig | None = None, share_listener: ShareListener | None = None,
                 group_setting: Callable[[str, str], Any] | None = None) -> None:
        self.store = store
        self.transactions = transactions
        self.config = config
        self._context = GroupContext(store, clock, on_timer or (lambda: None), config.fsync)
        self._group_store = GroupStore(store)
        self._rebalancer = ClassicRebalancer(self._context, config)
        self._classic = ClassicGroupManager(self._context, self._group_store, config, self._rebalancer)
        self._consumer_timers = ConsumerTimers(self._context, config.consumer, group_setting=group_setting)
        self._migration = GroupMigration(self._context, self._group_store, config, self._rebalancer,
                                         self._consumer_timers)
        self._consumers = ConsumerGroupManager(self._context, self._group_store, config, self.partition_of,
                                               self._consumer_timers, self._migration, group_setting=group_setting)
        self._offsets = OffsetManager(self._context, self._group_store, config, self.partition_of,
                                      transactions.verified_write, self._consumers)
        self._shares = ShareGroupManager(self._context, self._group_store, share_config or ShareGroupConfig(),
                                         self.partition_of, share_listener, group_setting)
        self._loads = PartitionLoads(self._context.lock)
        self._loader = GroupLoader(self._context, self._group_store, self._loads, self._rebalancer,
                                   self._consumer_timers, self._shares, self._offsets)

    def _is_share(self, group_id: str) -> bool:
        with self._context.lock:
            return group_id in self._group_store.shares

    def ensure_offsets_topic(self) -> None:
        """Create `__consumer_offsets` if it is missing (Kafka does so at the first FindCoordinator)."""
        self.transactions.ensure_offsets_topic()

    def partition_of(self, group_id: str) -> int:
        """The `__consumer_offsets` partition of a group (the topic is created if missing)."""
        return self.transactions.offsets_partition(group_id)[1]

    # -- loading ---------------------------------------------------------------------------

    def load(self) -> int:
        """Rebuild every group and its offsets from `__consumer_offsets`; how many groups there are."""
        with collection_paused():
            for partition in self.begin_load():
                self.load_partition(partition)
        return self.group_count()

    def begin_load(self) -> range:
        """Forget every group; until `load_partition` (or `fail_partition`) has run for a partition, calls
        for its groups answer COORDINATOR_LOAD_IN_PROGRESS. The partitions to load."""
        return self._loader.begin(range(self.store.topics().get(OFFSETS_TOPIC, 0)))

    def load_partition(self, partition: int) -> int:
        """Read one partition's groups, then serve them; how many it holds."""
        return self._loader.load(partition)

    def fail_partition(self, partition: int, error: BaseException | str) -> None:
        """A partition could not be loaded: its groups answer COORDINATOR_NOT_AVAILABLE from now on."""
        self._loader.fail(partition, error)

    def abandon_load(self, why: str) -> None:
        """The partitions still loading will not be (the node is closing): they answer
        COORDINATOR_NOT_AVAILABLE, and nothing waits for them."""
        self._loader.abandon(why)

    @property
    def loading(self) -> bool:
        """Whether some `__consumer_offsets` partition is still loading."""
        return self._loads.loading

    def wait_loaded(self, timeout: float | None = None) -> bool:
        """Wait until every partition is loaded (or failed to); False if `timeout` s passed first."""
        return self._loads.wait(timeout)

    def group_count(self) -> int:
        """How many groups of every kind the coordinator holds."""
        with self._context.lock:
            return len(self._group_store) + len(self._group_store.shares)

    def _refusal(self, group_id: str) -> LogStoreError | None:
        """COORDINATOR_LOAD_IN_PROGRESS while the group's partition loads (COORDINATOR_NOT_AVAILABLE when
        its load failed); None when it serves."""
        return self._loads.refusal(self.partition_of(group_id)) if self._loads.unavailable else None

    def _check(self, group_id: str) -> None:
        if (refused := self._refusal(group_id)) is not None:
            raise refused

    def restart_sessions(self) -> None:
        """Give every loaded member a whole session from now, when the broker starts serving: the time the
        rest of the start took must not count against members that cannot reach it yet (Kafka's coordinator
        loads its partitions once the broker is up)."""
        now = self._context.clock()
        with self._context.lock:
            self._shares.start_sessions(now)
            for group in self._group_store.all():
                for member in group.members.values():
                    member.heartbeat_deadline = now + member.session_timeout_ms
                    self._rebalancer.schedule_member(group, member, member.heartbeat_deadline)
                if group.consumer is not None:
                    self._consumer_timers.start_sessions(group, now)

    def poll(self, now: int | None = None) -> int | None:
        """Act on every deadline passed (sessions, join phases); the next deadline, or None."""
        now = self._context.clock() if now is None else now
        fx = Effects()
        expired: list[tuple[str, str]] = []
        with self._context.lock:
            for deadline, group_id, member_id in self._context.due(now):
                if member_id is not None and group_id in self._group_store.shares:
                    if self._shares.on_member_deadline(group_id, member_id, deadline, now, fx):
                        expired.append((group_id, member_id))
                    continue
                group = self._group_store.get(group_id)
                if group is None:
                    continue
                if member_id is None:
                    if group.consumer is None:
                        self._rebalancer.on_group_deadline(group, now, fx)
                elif group.consumer is not None:
                    self._consumers.on_member_deadline(group, member_id, deadline, now, fx)
                else:
                    self._rebalancer.on_member_deadline(group, member_id, deadline, now, fx)
            wake_at = self._context.rearm()
        self._context.finish(fx, strict=False)
        for group_id, member_id in expired:
            self._shares.member_expired(group_id, member_id)
        return wake_at

    # -- the classic protocol ------------------------------------------------------------------

    def join_group(self, group_id: str, member_id: str, group_instance_id: str | None, client_id: str,
                   client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
                   protocols: list[tuple[str, bytes]], require_known_member_id: bool = True) -> Future[JoinResult]:
        """JoinGroup: a future of the `JoinResult`, answered when the rebalance completes (or an error)."""
        if not group_id:
            return _answered(InvalidGroupIdError("the group id is empty"))
        if (refused := self._refusal(group_id)) is not None:
            return _answered(refused)
        if self._is_share(group_id):
            return _answered(InconsistentGroupProtocolError(f"Group {group_id} is a share group."))
        cfg = self.config
        if not cfg.min_session_timeout_ms <= session_timeout_ms <= cfg.max_session_timeout_ms:
            return _answered(InvalidSessionTimeoutError(
                f"session timeout {session_timeout_ms} ms is outside {cfg.min_session_timeout_ms}.."
                f"{cfg.max_session_timeout_ms} (group.min/max.session.timeout.ms)"))
        protocols = [(name, bytes(metadata)) for name, metadata in protocols]
        partition = self.partition_of(group_id)
        now = self._context.clock()
        fx = Effects()
        waiter: Future[JoinResult] = Future()
        with self._context.lock:
            group = self._group_store.get(group_id)
            try:
                if group is not None and group.consumer is not None and not group.is_empty:
                    if self.config.consumer.migration_policy == "disabled":
                        raise GroupIdNotFoundError(f"Group {group_id} is not a classic group.")
                    member = self._migration.classic_join(
                        group, member_id, group_instance_id, client_id, client_host, session_timeout_ms,
                        rebalance_timeout_ms, protocol_type, protocols, require_known_member_id, now, fx)
                    fx.answer(waiter, JoinResult(member.member_id, member.member_epoch, CONSUMER_PROTOCOL,
                                                 member.classic_metadata().protocol_name, "", ()))
                else:
                    if group is not None and group.consumer is not None:
                        self._consumers.to_classic(fx, group)
                    self._classic.join(group_id, group, partition, waiter, member_id, group_instance_id,
                                       client_id, client_host, session_timeout_ms, rebalance_timeout_ms,
                                       protocol_type, protocols, require_known_member_id, now, fx)
            except LogStoreError as exc:
                fx.answer(waiter, exc)
        self._context.finish(fx, strict=False)
        return waiter

    def sync_group(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                   assignments: Mapping[str, bytes], protocol_type: str | None = None,
                   protocol_name: str | None = None) -> Future[SyncResult]:
        """SyncGroup: a future of the member's `SyncResult`, answered once the leader's assignment is stored."""
        if (refused := self._refusal(group_id)) is not None:
            return _answered(refused)
        if self._is_share(group_id):
            return _answered(UnknownMemberIdError(f"Group {group_id} is a share group: it has no classic members."))
        now = self._context.clock()
        fx = Effects()
        waiter: Future[SyncResult] = Future()
        stored = None
        with self._context.lock:
            try:
                group = self._group_store.get(group_id)
                if group is not None and group.consumer is not None:
                    name, assignment = self._migration.classic_sync(group, generation_id, member_id,
                                                                    group_instance_id, protocol_type,
                                                                    protocol_name, now)
                    fx.answer(waiter, SyncResult(CONSUMER_PROTOCOL, name, assignment))
                else:
                    stored = self._classic.sync(group_id, generation_id, member_id, group_instance_id, assignments,
                                                protocol_type, protocol_name, waiter, now, fx)
            except LogStoreError as exc:
                fx.answer(waiter, exc)
        try:
            self._context.finish(fx)
        except CoordinatorNotAvailableError as exc:
            if stored is not None:
                self._classic.assignment_stored(*stored, exc)
            raise
        if stored is not None:
            self._classic.assignment_stored(*stored, None)
        return waiter

    def heartbeat(self, group_id: str, generation_id: int, member_id: str,
                  group_instance_id: str | None = None) -> None:
        """Heartbeat: the member is alive; raises RebalanceInProgressError when it must rejoin."""
        self._check(group_id)
        now = self._context.clock()
        with self._context.lock:
            if group_id in self._group_store.shares:
                raise UnknownMemberIdError(f"Group {group_id} is a share group: it has no classic members.")
            group = self._group_store.get(group_id)
            if group is not None and group.consumer is not None:
                self._migration.classic_heartbeat(group, generation_id, member_id, group_instance_id, now)
            else:
                self._classic.heartbeat(group_id, generation_id, member_id, group_instance_id, now)

    def leave_group(self, group_id: str, members: Iterable[tuple[str, str | None]]) -> list[LogStoreError | None]:
        """LeaveGroup: remove members (id, instance id); an error or None for each."""
        self._check(group_id)
        now = self._context.clock()
        fx = Effects()
        with self._context.lock:
            if group_id in self._group_store.shares:
                return [UnknownMemberIdError(f"Group {group_id} is a share group: it has no classic members.")
                        for _ in members]
            group = self._group_store.get(group_id)
            if group is not None and self._migration.takes_classic_members(group):
                results = self._migration.classic_leave(group, members, fx)
            else:
                results = self._classic.leave(group_id, members, now, fx)
        self._context.finish(fx, strict=False)
        return results

    # -- KIP-848 consumer groups --------------------------------------------------------------------

    def consumer_group_heartbeat(self, group_id: str, member_id: str, member_epoch: int, *,
                                 instance_id: str | None = None, rack_id: str | None = None,
                                 rebalance_timeout_ms: int = -1, subscribed_topic_names: Iterable[str] | None = None,
                                 subscribed_topic_regex: str | None = None, server_assignor: str | None = None,
                                 owned: Iterable[tuple[bytes, Iterable[int]]] | None = None, client_id: str = "",
                                 client_host: str = "", member_id_required: bool = True) -> ConsumerHeartbeatResult:
        """ConsumerGroupHeartbeat (`owned` by topic id; `member_id_required` from v1, where the client makes
        its id); Kafka's errors are raised."""
        self._check(group_id)
        if self._is_share(group_id):
            raise _not_consumer(group_id)
        return self._consumers.heartbeat(
            group_id, member_id, member_epoch, instance_id=instance_id, rack_id=rack_id,
            rebalance_timeout_ms=rebalance_timeout_ms, subscribed_topic_names=subscribed_topic_names,
            subscribed_topic_regex=subscribed_topic_regex, server_assignor=server_assignor, owned=owned,
            client_id=client_id, client_host=client_host, member_id_required=member_id_required)

    def consumer_group_describe(self, group_ids: Iterable[str]) -> list[ConsumerGroupDescription]:
        """ConsumerGroupDescribe: each group, or GROUP_ID_NOT_FOUND for an unknown, classic or share one."""
        group_ids = list(group_ids)
        refusals = {g: refused for g in group_ids if (refused := self._refusal(g)) is not None}
        found = {d.group_id: d for d in self._consumers.describe([g for g in group_ids if g not in refusals])}
        return [ConsumerGroupDescription(g, error=refusals[g]) if g in refusals
                else ConsumerGroupDescription(g, error=_not_consumer(g))
                if found[g].error is not None and self._is_share(g) else found[g] for g in group_ids]

    # -- offsets ---------------------------------------------------------------------------------

    def commit_offsets(self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int,
                       offsets: Mapping[TopicPartition, OffsetCommit], expire_timestamp: int = -1,
                       api_version: int | None = None) -> dict[TopicPartition, LogStoreError | None]:
        """OffsetCommit: persist (offset, leader epoch, metadata) per partition; an error or None for each."""
        self._check(group_id)
        if self._is_share(group_id):
            raise _not_consumer(group_id)
        return self._offsets.commit_offsets(group_id, member_id, group_instance_id, generation_id, offsets,
                                            expire_timestamp, api_version)

    @property
    def lock(self) -> threading.RLock:
        """The lock every group decision takes; never held across an fsync, so a caller that gets it at once
        may run a short call (`commit_offsets_unsynced`) in its own thread."""
        return self._context.lock

    def commit_offsets_unsynced(self, group_id: str, member_id: str, group_instance_id: str | None,
                                generation_id: int, offsets: Mapping[TopicPartition, OffsetCommit],
                                expire_timestamp: int = -1, api_version: int | None = None
                                ) -> tuple[dict[TopicPartition, LogStoreError | None], list[tuple[Log, int]]]:
        """`commit_offsets` without waiting for the fsync: the errors and the appends to wait for."""
        self._check(group_id)
        if self._is_share(group_id):
            raise _not_consumer(group_id)
        return self._offsets.commit_offsets_unsynced(group_id, member_id, group_instance_id, generation_id,
                                                     offsets, expire_timestamp, api_version)

    def commit_txn_offsets(self, transactional_id: str, group_id: str, producer_id: int, producer_epoch: int,
                           member_id: str, group_instance_id: str | None, generation_id: int,
                           offsets: Mapping[TopicPartition, OffsetCommit]
                           ) -> dict[TopicPartition, LogStoreError | None]:
        """TxnOffsetCommit: offsets written in the producer's transaction, pending until its marker."""
        self._check(group_id)
        if self._is_share(group_id):
            raise _not_consumer(group_id)
        return self._offsets.commit_txn_offsets(transactional_id, group_id, producer_id, producer_epoch, member_id,
                                                group_instance_id, generation_id, offsets)

    def complete_txn_offsets(self, partition: int, producer_id: int, commit: bool) -> None:
        """A marker of `producer_id` is in this `__consumer_offsets` partition: apply or drop its offsets (once
        the partition is loaded, if it is loading)."""
        with self._context.lock:
            if not self._loads.defer_marker(partition, producer_id, commit):
                self._offsets.complete_txn_offsets(partition, producer_id, commit)

    def fetch_offsets(self, group_id: str, partitions: Iterable[TopicPartition] | None,
                      require_stable: bool = False, member_id: str | None = None, member_epoch: int = -1
                      ) -> dict[TopicPartition, CommittedOffset | LogStoreError | None]:
        """OffsetFetch: the committed offset of each partition (None if none; all of the group's for None)."""
        self._check(group_id)
        if self._is_share(group_id):
            raise _not_consumer(group_id)
        return self._offsets.fetch_offsets(group_id, partitions, require_stable, member_id, member_epoch)

    def delete_offsets(self, group_id: str, partitions: Iterable[TopicPartition]
                       ) -> dict[TopicPartition, LogStoreError | None]:
        """OffsetDelete: forget offsets of topics the group does not consume."""
        self._check(group_id)
        if self._is_share(group_id):
            raise _not_consumer(group_id)
        return self._offsets.delete_offsets(group_id, partitions)

    def delete_topic_offsets(self, topic: str) -> int:
        """A topic is being deleted: every group forgets its offsets of it; how many offsets went. Waits for
        the load: a group still loading would keep them."""
        self.wait_loaded()
        return self._offsets.delete_topic_offsets(topic)

    def delete_groups(self, group_ids: Iterable[str]) -> dict[str, LogStoreError | None]:
        """DeleteGroups: remove empty groups and their offsets (share groups and their records); an error or
        None for each."""
        group_ids = list(group_ids)
        refusals: dict[str, LogStoreError | None] = {
            g: refused for g in group_ids if (refused := self._refusal(g)) is not None}
        with self._context.lock:
            shares, others = share_ids(self._group_store, [g for g in group_ids if g not in refusals])
        errors = refusals | (self._offsets.delete_groups(others) if others else {})
        if shares:
            errors.update(self._shares.delete(shares))
        return errors

    def expire_offsets(self, now: int | None = None) -> int:
        """Drop offsets older than offsets.retention.minutes, and the empty groups left with none; how many
        offsets went."""
        return self._offsets.expire_offsets(now)

    # -- what operators see ------------------------------------------------------------------

    def describe(self, group_id: str) -> GroupDescription:
        """DescribeGroups for one classic group (Dead with no members when unknown, as Kafka answers)."""
        self._check(group_id)
        with self._context.lock:
            return self._classic.describe(group_id)

    def list_groups(self, states: Iterable[str] = ()) -> list[tuple[str, str, str]]:
        """ListGroups: (group id, protocol type, state) of every group, or of those in `states`."""
        return [(g.group_id, g.protocol_type, g.state) for g in self.listed_groups(states)]

    def listed_groups(self, states: Iterable[str] = (), types: Iterable[str] = ()) -> list[ListedGroup]:
        """ListGroups v5: every group of every kind, or those in `states` and of `types` (case-insensitive,
        as Kafka compares them)."""
        wanted = {s.strip().lower() for s in states}
        kinds = {t.strip().lower() for t in types}
        with self._context.lock:
            listed = [ListedGroup(g.group_id, CONSUMER_PROTOCOL if g.consumer is not None else g.protocol_type or "",
                                  g.state_name, g.group_type) for g in self._group_store]
            listed += self._shares.listed()
        return [g for g in listed if (not wanted or g.state.lower() in wanted)
                and (not kinds or g.group_type in kinds)]

    # -- KIP-932 share groups ---------------------------------------------------------------------

    def share_group_heartbeat(self, group_id: str, member_id: str, member_epoch: int, *, rack_id: str | None = None,
                              subscribed_topic_names: Iterable[str] | None = None, client_id: str = "",
                              client_host: str = "") -> ShareHeartbeatResult:
        """ShareGroupHeartbeat; Kafka's errors are raised."""
        self._check(group_id)
        return self._shares.heartbeat(group_id, member_id, member_epoch, rack_id=rack_id,
                                      subscribed_topic_names=subscribed_topic_names, client_id=client_id,
                                      client_host=client_host)

    def share_group_describe(self, group_ids: Iterable[str]) -> list[ShareGroupDescription]:
        """ShareGroupDescribe: each group, or GROUP_ID_NOT_FOUND for an unknown or other kind of group."""
        group_ids = list(group_ids)
        refusals = {g: refused for g in group_ids if (refused := self._refusal(g)) is not None}
        found = {d.group_id: d for d in self._shares.describe([g for g in group_ids if g not in refusals])}
        return [ShareGroupDescription(g, error=refusals[g]) if g in refusals else found[g] for g in group_ids]

    def group_configs_changed(self, group_id: str) -> None:
        """A group's configs changed (durably): its consumer-protocol members run with them from now; share
        groups read theirs at each heartbeat."""
        self._consumers.settings_changed(group_id)

    def is_share_member(self, group_id: str, member_id: str) -> bool:
        """Whether `member_id` is a member of the share group `group_id` now."""
        return self._shares.is_member(group_id, member_id)

    def share_group_partitions(self, group_id: str) -> list[tuple[str, int]]:
        """The share group's partitions whose share state is initialized."""
        return self._shares.partitions(group_id)
