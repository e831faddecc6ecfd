"""Committed offsets of every group, their deletion and expiry, and the groups' removal (Kafka's
OffsetMetadataManager).

OffsetCommit records are appended to the group's partition and answered once
durable. Transactional offsets (TxnOffsetCommit) are appended in the
producer's transaction and stay pending until the transaction coordinator
writes the COMMIT marker to that partition (`complete_txn_offsets`); an ABORT
drops them. When two records commit the same partition, the one later in the
log wins, whatever order they completed in, as in Kafka. Records are
appended under the coordinator's lock, so the log holds changes in the
order they were made, and waited for outside it.

A KIP-848 consumer group keeps its offsets here too; its members commit
with their member epoch, checked as Kafka's ConsumerGroup checks it
(consumer_groups.py). Loading is `GroupStore`'s (group_store.py).
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from logstore.broker.coordinator.classic_groups import current_member
from logstore.broker.coordinator.consumer_groups import ConsumerGroupManager
from logstore.broker.coordinator.group_config import GroupConfig
from logstore.broker.coordinator.group_context import Effects, GroupContext
from logstore.broker.coordinator.group_log import encode_group_key, encode_offset_fields, encode_offset_key
from logstore.broker.coordinator.group_state import CONSUMER_PROTOCOL, CommittedOffset, Group, GroupState
from logstore.broker.coordinator.group_store import GroupStore, keep_newer
from logstore.broker.coordinator.internal_topics import OFFSETS_TOPIC
from logstore.errors import (
    CoordinatorNotAvailableError,
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    IllegalGenerationError,
    LogStoreError,
    NonEmptyGroupError,
    OffsetMetadataTooLargeError,
    RebalanceInProgressError,
    StorageError,
    UnknownMemberIdError,
    UnstableOffsetCommitError,
)

if TYPE_CHECKING:
    from logstore.log import Log

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
# (offset, leader epoch, metadata) committed for one partition
OffsetCommit = tuple[int, int, str | None]
# The records of a commit: the offsets accepted, their keys and values, and an error or None per partition.
_CommitRecords = tuple[list[tuple[TopicPartition, CommittedOffset]], list[bytes], list[bytes | None],
                       dict[TopicPartition, LogStoreError | None]]
# verified_write(transactional id, producer id, producer epoch, topic, partition) of TransactionCoordinator
VerifiedWrite = Callable[[str, int, int, str, int], AbstractContextManager[None]]


class OffsetManager:
    """Committed and pending transactional offsets of every group, in memory and in `__consumer_offsets`,
    and the removal of offsets and groups (Kafka's OffsetMetadataManager).

    Public calls take the context's lock themselves and wait for their appends after it. Task-safe;
    times are ms.
    """

    def __init__(self, context: GroupContext, groups: GroupStore, config: GroupConfig,
                 partition_of: Callable[[str], int], verified_write: VerifiedWrite,
                 consumers: ConsumerGroupManager) -> None:
        self._context = context
        self._groups = groups
        self._config = config
        self._partition_of = partition_of
        self._verified_write = verified_write
        self._consumers = consumers

    def _offsets_group(self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int,
                       transactional: bool, api_version: int | None = None) -> Group:
        """The group an offset commit goes to, after Kafka's checks (a simple group is made if needed)."""
        # The empty group id is a group like any other here: Kafka keeps accepting it for commits.
        group = self._groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                raise IllegalGenerationError(f"group {group_id!r} does not exist (generation {generation_id})")
            group = self._groups.put(Group(group_id, self._partition_of(group_id),
                                           state_timestamp=self._context.clock()))
        if group.is_in(GroupState.DEAD):
            raise CoordinatorNotAvailableError(f"group {group_id!r} is being removed")
        if group.consumer is not None:
            self._consumers.check_commit(group, member_id, group_instance_id, generation_id, transactional,
                                        api_version)
            return group
        if generation_id < 0 and group.is_in(GroupState.EMPTY):
            return group
        if generation_id >= 0 or member_id or group_instance_id is not None:
            current_member(group, member_id, group_instance_id)
            if generation_id != group.generation_id:
                raise IllegalGenerationError(
                    f"generation {generation_id} is not group {group_id!r}'s {group.generation_id}")
        elif not transactional:
            raise UnknownMemberIdError(f"group {group_id!r} has members: commit with a member id and generation")
        if not transactional and group.is_in(GroupState.COMPLETING_REBALANCE):
            raise RebalanceInProgressError(f"group {group_id!r} is rebalancing")
        return group

    def _offset_records(self, group_id: str, offsets: Mapping[TopicPartition, OffsetCommit],
                        now: int, expire_timestamp: int) -> _CommitRecords:
        """The records of a commit, and an error for each partition refused."""
        errors: dict[TopicPartition, LogStoreError | None] = {}
        accepted: list[tuple[TopicPartition, CommittedOffset]] = []
        keys: list[bytes] = []
        values: list[bytes | None] = []
        limit = self._config.offset_metadata_max_bytes
        for tp, (offset, leader_epoch, metadata) in offsets.items():
            metadata = metadata or ""
            # At most 4 UTF-8 bytes a character: short metadata is within the limit without encoding it here.
            if len(metadata) * 4 > limit and len(metadata.encode("utf-8")) > limit:
                errors[tp] = OffsetMetadataTooLargeError(
                    f"{tp[0]}-{tp[1]}: metadata longer than {limit} bytes (offset.metadata.max.bytes)")
                continue
            errors[tp] = None
            accepted.append((tp, CommittedOffset(offset, leader_epoch, metadata, now, expire_timestamp)))
            keys.append(encode_offset_key(group_id, tp[0], tp[1]))
            values.append(encode_offset_fields(offset, leader_epoch, metadata, now, expire_timestamp))
        return accepted, keys, values, errors

    def commit_offsets(self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int,
                       offsets: Mapping[TopicPartition, OffsetCommit],
                       expire_timestamp: int = -1, api_version: int | None = None
                       ) -> dict[TopicPartition, LogStoreError | None]:
        """OffsetCommit: persist (offset, leader epoch, metadata) per partition; an error or None for each.

        `generation_id` is a consumer group member's epoch; `api_version` the request's, when there is
        one (a KIP-848 member must commit with v9+). A group-level refusal (unknown member, wrong
        generation, ...) is raised.
        """
        errors, fx = self._commit(group_id, member_id, group_instance_id, generation_id, offsets, expire_timestamp,
                                  api_version)
        self._context.finish(fx)
        return errors

    def commit_offsets_unsynced(self, group_id: str, member_id: str, group_instance_id: str | None,
                                generation_id: int, offsets: Mapping[TopicPartition, OffsetCommit],
                                expire_timestamp: int = -1, api_version: int | None = None
                                ) -> tuple[dict[TopicPartition, LogStoreError | None], list[tuple[Log, int]]]:
        """`commit_offsets` without waiting for the fsync: the errors, and the (log, end offset) appends the
        caller waits for before it answers (none when the coordinator does not fsync)."""
        errors, fx = self._commit(group_id, member_id, group_instance_id, generation_id, offsets, expire_timestamp,
                                  api_version)
        return errors, self._context.unsynced(fx)

    def _commit(self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int,
                offsets: Mapping[TopicPartition, OffsetCommit], expire_timestamp: int, api_version: int | None
                ) -> tuple[dict[TopicPartition, LogStoreError | None], Effects]:
        now = self._context.clock()
        fx = Effects()
        with self._context.lock:
            group = self._offsets_group(group_id, member_id, group_instance_id, generation_id, False, api_version)
            accepted, keys, values, errors = self._offset_records(group_id, offsets, now, expire_timestamp)
            if accepted:
                try:
                    result = self._context.append(fx, group.partition, keys, values)
                except LogStoreError as exc:
                    raise CoordinatorNotAvailableError(f"{OFFSETS_TOPIC} not written: {exc}") from exc
                for i, (tp, committed) in enumerate(accepted):
                    keep_newer(group.offsets, tp, committed._replace(log_offset=result.first_offset + i))
        return errors, fx

    def commit_txn_offsets(self, transactional_id: str, group_id: str, producer_id: int, producer_epoch: int,
                           member_id: str, group_instance_id: str | None, generation_id: int,
                           offsets: Mapping[TopicPartition, OffsetCommit]
                           ) -> dict[TopicPartition, LogStoreError | None]:
        """TxnOffsetCommit: offsets written in the producer's transaction, pending until its marker."""
        now = self._context.clock()
        fx = Effects()
        partition = self._partition_of(group_id)
        with self._verified_write(transactional_id, producer_id, producer_epoch, OFFSETS_TOPIC, partition):
            with self._context.lock:
                group = self._offsets_group(group_id, member_id, group_instance_id, generation_id, True)
                accepted, keys, values, errors = self._offset_records(group_id, offsets, now, -1)
                if accepted:
                    result = self._context.append(fx, group.partition, keys, values, producer_id=producer_id,
                                          producer_epoch=producer_epoch)
                    pending = group.pending_txn_offsets.setdefault(producer_id, {})
                    for i, (tp, committed) in enumerate(accepted):
                        pending[tp] = committed._replace(log_offset=result.first_offset + i)
                    self._groups.txn_groups.setdefault((group.partition, producer_id), set()).add(group_id)
        self._context.finish(fx)
        return errors

    def complete_txn_offsets(self, partition: int, producer_id: int, commit: bool) -> None:
        """A marker of `producer_id` is in this `__consumer_offsets` partition: apply or drop its offsets."""
        with self._context.lock:
            for group_id in self._groups.txn_groups.pop((partition, producer_id), ()):
                group = self._groups.get(group_id)
                if group is None:
                    continue
                pending = group.pending_txn_offsets.pop(producer_id, {})
                if commit:
                    for tp, committed in pending.items():
                        keep_newer(group.offsets, tp, committed)

    def fetch_offsets(self, group_id: str, partitions: Iterable[TopicPartition] | None,
                      require_stable: bool = False, member_id: str | None = None, member_epoch: int = -1
                      ) -> dict[TopicPartition, CommittedOffset | LogStoreError | None]:
        """OffsetFetch: the committed offset of each partition (None if none; all of the group's for None).

        A consumer group's member (v9) is checked as Kafka checks it; its refusal is raised.
        """
        with self._context.lock:
            group = self._groups.get(group_id)
            if group is None:
                return {} if partitions is None else dict.fromkeys(partitions)
            if group.consumer is not None:
                self._consumers.check_fetch(group, member_id, member_epoch)
            found: dict[TopicPartition, CommittedOffset | LogStoreError | None] = {}
            for tp in (group.offsets if partitions is None else partitions):
                if require_stable and any(
                        tp in pending for pending in group.pending_txn_offsets.values()):
                    found[tp] = UnstableOffsetCommitError(f"{tp[0]}-{tp[1]}: a transactional commit is pending")
                else:
                    found[tp] = group.offsets.get(tp)
            return found

    def _delete_offsets(self, fx: Effects, group: Group, partitions: Iterable[TopicPartition]) -> None:
        """Tombstones for some of the group's offsets (under the lock)."""
        partitions = [tp for tp in partitions if tp in group.offsets]
        if partitions:
            self._context.append(fx, group.partition, [encode_offset_key(group.group_id, t, p) for t, p in partitions],
                         [None] * len(partitions))
            for tp in partitions:
                del group.offsets[tp]

    def _remove_group(self, fx: Effects, group: Group) -> None:
        """Tombstones for the group and all its offsets; it is gone (under the lock)."""
        keys = [encode_offset_key(group.group_id, t, p) for t, p in group.offsets]
        if group.consumer is not None:
            self._consumers.remove_records(fx, group)
        else:
            keys.append(encode_group_key(group.group_id))
        if keys:
            self._context.append(fx, group.partition, keys, [None] * len(keys))
        group.transition(GroupState.DEAD, self._context.clock())
        self._groups.remove(group.group_id)

    def delete_offsets(self, group_id: str, partitions: Iterable[TopicPartition]
                       ) -> dict[TopicPartition, LogStoreError | None]:
        """OffsetDelete: forget offsets of topics the group does not consume."""
        fx = Effects()
        with self._context.lock:
            group = self._groups.get(group_id)
            if group is None or group.is_in(GroupState.DEAD):
                raise GroupIdNotFoundError(f"no group {group_id!r}")
            if group.consumer is not None:
                subscribed = group.consumer.subscribed_topics() if group.consumer.members else set()
            elif not group.is_in(GroupState.EMPTY) and group.protocol_type != CONSUMER_PROTOCOL:
                raise NonEmptyGroupError(f"group {group_id!r} has members")
            else:
                subscribed = set() if group.is_in(GroupState.EMPTY) else (group.subscribed_topics() or set())
            errors: dict[TopicPartition, LogStoreError | None] = {}
            for tp in partitions:
                errors[tp] = (GroupSubscribedToTopicError(f"group {group_id!r} consumes {tp[0]}")
                              if tp[0] in subscribed else None)
            try:
                self._delete_offsets(fx, group, [tp for tp, e in errors.items() if e is None])
            except LogStoreError as exc:
                raise CoordinatorNotAvailableError(f"{OFFSETS_TOPIC} not written: {exc}") from exc
        self._context.finish(fx)
        return errors

    def delete_topic_offsets(self, topic: str) -> int:
        """A topic is being deleted: every group forgets its offsets of it, pending transactional ones too,
        and an empty group left with nothing goes (Kafka's onPartitionsDeleted); how many offsets went."""
        fx = Effects()
        removed = 0
        with self._context.lock:
            for group in self._groups.all():
                for pending in group.pending_txn_offsets.values():
                    for tp in [tp for tp in pending if tp[0] == topic]:
                        del pending[tp]
                gone = [tp for tp in group.offsets if tp[0] == topic]
                try:
                    self._delete_offsets(fx, group, gone)
                    if gone and group.is_in(GroupState.EMPTY) and group.is_empty and not group.offsets \
                            and not any(group.pending_txn_offsets.values()):
                        self._remove_group(fx, group)
                except LogStoreError as exc:
                    raise CoordinatorNotAvailableError(f"{OFFSETS_TOPIC} not written: {exc}") from exc
                removed += len(gone)
        self._context.finish(fx)
        return removed

    def delete_groups(self, group_ids: Iterable[str]) -> dict[str, LogStoreError | None]:
        """DeleteGroups: remove empty groups and their offsets; an error or None for each."""
        fx = Effects()
        errors: dict[str, LogStoreError | None] = {}
        with self._context.lock:
            for group_id in group_ids:
                group = self._groups.get(group_id)
                try:
                    if group is None or group.is_in(GroupState.DEAD):
                        raise GroupIdNotFoundError(f"no group {group_id!r}")
                    if not group.is_in(GroupState.EMPTY) or (group.consumer is not None and not group.is_empty):
                        raise NonEmptyGroupError(f"group {group_id!r} has members")
                    self._remove_group(fx, group)
                    errors[group_id] = None
                except StorageError as exc:
                    errors[group_id] = CoordinatorNotAvailableError(f"{OFFSETS_TOPIC} not written: {exc}")
                except LogStoreError as exc:
                    errors[group_id] = exc
        self._context.finish(fx)
        return errors

    def expire_offsets(self, now: int | None = None) -> int:
        """Drop offsets older than offsets.retention.minutes (Kafka's KIP-211 rules), and the empty
        groups left with none; how many offsets went."""
        now = self._context.clock() if now is None else now
        retention = self._config.offsets_retention_ms
        fx = Effects()
        expired = 0
        with self._context.lock:
            for group in self._groups.all():
                subscribed: set[str] | None
                if group.consumer is not None:
                    # Kafka's ConsumerGroup: each offset lasts a retention from its commit, unless subscribed.
                    subscribed = group.consumer.subscribed_topics() if group.consumer.members else set()
                    base = -1
                elif group.protocol_type is None:
                    # A simple group (offsets only): each offset lasts a retention from its last commit.
                    subscribed = set()
                    base = -1
                elif group.is_in(GroupState.EMPTY):
                    subscribed = set()
                    base = group.state_timestamp
                elif group.is_in(GroupState.STABLE) and group.protocol_type == CONSUMER_PROTOCOL:
                    subscribed = group.subscribed_topics()
                    if subscribed is None:
                        continue
                    base = -1
                else:
                    continue
                pending = {tp for offsets in group.pending_txn_offsets.values() for tp in offsets}
                old = [tp for tp, c in group.offsets.items()
                       if tp[0] not in subscribed and tp not in pending
                       and (now >= c.expire_timestamp if c.expire_timestamp >= 0
                            else now - (base if base >= 0 else c.commit_timestamp) >= retention)]
                try:
                    self._delete_offsets(fx, group, old)
                    expired += len(old)
                    # An empty group (of either kind: `is_empty` asks the consumer group) left without
                    # offsets goes, as Kafka's maybeDeleteGroup.
                    if group.is_in(GroupState.EMPTY) and group.is_empty and not group.offsets \
                            and not group.pending_txn_offsets:
                        self._remove_group(fx, group)
                except LogStoreError as exc:
                    log.warning("group %r: expired offsets not removed yet: %s", group.group_id, exc)
        self._context.finish(fx, strict=False)
        return expired
