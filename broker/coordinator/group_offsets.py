"""Committed offsets of classic groups, and everything the group coordinator keeps in `__consumer_offsets`.

OffsetCommit records are appended to the group's partition and answered once
durable. Transactional offsets (TxnOffsetCommit) are appended in the
producer's transaction and stay pending until the transaction coordinator
writes the COMMIT marker to that partition (`complete_txn_offsets`); an ABORT
drops them. When two records commit the same partition, the one later in the
log wins, whatever order they completed in, as in Kafka. `load()` rebuilds
groups and offsets on start by replaying the partitions, markers included.
Records are appended under the coordinator's lock, so the log holds changes
in the order they were made, and waited for outside it.

A KIP-848 consumer group keeps its offsets here too; its members commit
with their member epoch, checked as Kafka's ConsumerGroup checks it
(consumer_groups.py), and its own records load beside the classic ones.
"""
from __future__ import annotations

import logging
from concurrent.futures import Future
from typing import Any, Iterable, Mapping

from logstore.broker.coordinator import consumer_group_log
from logstore.broker.coordinator.group_log import (GroupKey, GroupValue, OffsetKey, OffsetValue, decode_group_value,
                                                   decode_key, decode_offset_value, encode_group_key,
                                                   encode_group_value, encode_offset_key, encode_offset_value,
                                                   read_offset_commit)
from logstore.broker.coordinator.group_state import CONSUMER_PROTOCOL, CommittedOffset, Group, GroupState
from logstore.broker.coordinator.transaction import OFFSETS_TOPIC
from logstore.errors import (CoordinatorNotAvailableError, CorruptRecordError, GroupIdNotFoundError,
                             GroupSubscribedToTopicError, IllegalGenerationError, LogStoreError,
                             NonEmptyGroupError, OffsetMetadataTooLargeError, RebalanceInProgressError, StorageError,
                             UnknownMemberIdError, UnstableOffsetCommitError)
from logstore.formats.kafka import read_control_record

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class Effects:
    """What a call decided under the lock and does after it: replies to release, appends to wait for."""

    def __init__(self):
        self.replies: list[tuple[Future, Any]] = []
        self.appended: list[tuple[Any, int]] = []

    def answer(self, waiter: Future | None, value: Any) -> None:
        """Release `waiter` with `value` (a result or an error) once the call's appends are durable."""
        if waiter is not None:
            self.replies.append((waiter, value))


class GroupOffsets:
    """The group coordinator's records and offsets: what it appends to `__consumer_offsets`, how it
    reads them back on start, and the offset APIs. `GroupCoordinator` supplies the state it uses:
    `store`, `transactions`, `config`, `_clock`, `_lock`, `_groups`, `_txn_groups`, the
    membership check `_current_member` and `_schedule_member`, and (`ConsumerGroups`) the
    consumer-group checks, tombstones and sessions."""

    # -- the log ---------------------------------------------------------------------------

    def _append(self, fx: Effects, partition: int, keys: list[bytes], values: list[bytes | None], **producer):
        """Append records (under the lock); `fx` waits for them to be durable."""
        target = self.store.log(OFFSETS_TOPIC, partition)
        if producer:
            producer = dict(producer, base_sequence=0, transactional=True)
        batch = target.format.encode_batch(keys, values, **producer)
        result = target.append(bytearray(batch), client=False)
        fx.appended.append((target, result.last_offset + 1))
        return result

    def _store_group(self, fx: Effects, group: Group, value: GroupValue | None = None) -> None:
        """Persist the group's metadata; a failure is logged (the group lives on in memory)."""
        try:
            self._append(fx, group.partition, [encode_group_key(group.group_id)],
                         [encode_group_value(value or group.to_value())])
        except LogStoreError as exc:
            log.warning("group %r: metadata not written: %s", group.group_id, exc)

    def _finish(self, fx: Effects, strict: bool = True) -> None:
        """After the lock: wait for the appends to be durable, then release the held replies.

        `strict`: an append that did not reach the disk raises CoordinatorNotAvailableError
        (else it is logged: group metadata is rewritten at the next change anyway).
        """
        error = None
        if self.config.fsync:
            for target, end in fx.appended:
                try:
                    target.durable(end).result()
                except Exception as exc:  # noqa: BLE001 - reported to whoever waits on this call
                    error = exc
        for waiter, value in fx.replies:
            if isinstance(value, BaseException):
                waiter.set_exception(value)
            else:
                waiter.set_result(value)
        if error is not None:
            if strict:
                raise CoordinatorNotAvailableError(f"{OFFSETS_TOPIC} not written: {error}") from error
            log.warning("%s not flushed: %s", OFFSETS_TOPIC, error)

    # -- loading -----------------------------------------------------------------------------

    def load(self) -> int:
        """Rebuild every group and its offsets from `__consumer_offsets`; how many groups there are."""
        partitions = self.store.topics().get(OFFSETS_TOPIC, 0)
        now = self._clock()
        groups: dict[str, Group] = {}
        txn_groups: dict[tuple[int, int], set[str]] = {}
        topic_names = self._topic_names()
        for p in range(partitions):
            loaded, pending = _load_partition(self.store.log(OFFSETS_TOPIC, p), p, now, topic_names.get)
            groups.update(loaded)
            for producer_id, entries in pending.items():
                for group_id, tp, offset in entries:
                    group = groups.setdefault(group_id, Group(group_id, p))
                    group.pending_txn_offsets.setdefault(producer_id, {})[tp] = offset
                    txn_groups.setdefault((p, producer_id), set()).add(group_id)
        with self._lock:
            self._groups = groups
            self._txn_groups = txn_groups
            self._consumer_timers = {}
            for group in groups.values():
                for member in group.members.values():
                    self._schedule_member(group, member, member.heartbeat_deadline)
                if group.consumer is not None:
                    self._start_consumer_sessions(group, now)
        return len(groups)
    # -- offsets ---------------------------------------------------------------------------

    def _offsets_group(self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int,
                       transactional: bool, api_version: int | None = None) -> Group:
        """The group an offset commit goes to, after Kafka's checks (a simple group is made if needed)."""
        # The empty group id is a group like any other here: Kafka keeps accepting it for commits.
        group = self._groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                raise IllegalGenerationError(f"group {group_id!r} does not exist (generation {generation_id})")
            group = self._groups[group_id] = Group(group_id, self.partition_of(group_id), state_timestamp=self._clock())
        if group.is_in(GroupState.DEAD):
            raise CoordinatorNotAvailableError(f"group {group_id!r} is being removed")
        if group.consumer is not None:
            self._check_consumer_commit(group, member_id, group_instance_id, generation_id, transactional,
                                        api_version)
            return group
        if generation_id < 0 and group.is_in(GroupState.EMPTY):
            return group
        if generation_id >= 0 or member_id or group_instance_id is not None:
            self._current_member(group, member_id, group_instance_id)
            if generation_id != group.generation_id:
                raise IllegalGenerationError(
                    f"generation {generation_id} is not group {group_id!r}'s {group.generation_id}")
        elif not transactional:
            raise UnknownMemberIdError(f"group {group_id!r} has members: commit with a member id and generation")
        if not transactional and group.is_in(GroupState.COMPLETING_REBALANCE):
            raise RebalanceInProgressError(f"group {group_id!r} is rebalancing")
        return group

    def _offset_records(self, group_id: str, offsets: Mapping[TopicPartition, tuple[int, int, str | None]],
                        now: int, expire_timestamp: int):
        """The records of a commit, and an error for each partition refused."""
        errors: dict[TopicPartition, LogStoreError | None] = {}
        accepted: list[tuple[TopicPartition, CommittedOffset]] = []
        limit = self.config.offset_metadata_max_bytes
        for tp, (offset, leader_epoch, metadata) in offsets.items():
            metadata = metadata or ""
            if len(metadata.encode("utf-8")) > limit:
                errors[tp] = OffsetMetadataTooLargeError(
                    f"{tp[0]}-{tp[1]}: metadata longer than {limit} bytes (offset.metadata.max.bytes)")
                continue
            errors[tp] = None
            accepted.append((tp, CommittedOffset(offset, leader_epoch, metadata, now, expire_timestamp)))
        keys = [encode_offset_key(group_id, tp[0], tp[1]) for tp, _ in accepted]
        values = [encode_offset_value(OffsetValue(c.offset, c.leader_epoch, c.metadata, c.commit_timestamp,
                                                  c.expire_timestamp)) for _, c in accepted]
        return accepted, keys, values, errors

    def commit_offsets(self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int,
                       offsets: Mapping[TopicPartition, tuple[int, int, str | None]],
                       expire_timestamp: int = -1, api_version: int | None = None
                       ) -> dict[TopicPartition, LogStoreError | None]:
        """OffsetCommit: persist (offset, leader epoch, metadata) per partition; an error or None for each.

        `generation_id` is a consumer group member's epoch; `api_version` the request's, when there is
        one (a KIP-848 member must commit with v9+). A group-level refusal (unknown member, wrong
        generation, ...) is raised.
        """
        now = self._clock()
        fx = Effects()
        with self._lock:
            group = self._offsets_group(group_id, member_id, group_instance_id, generation_id, False, api_version)
            accepted, keys, values, errors = self._offset_records(group_id, offsets, now, expire_timestamp)
            if accepted:
                try:
                    result = self._append(fx, group.partition, keys, values)
                except LogStoreError as exc:
                    raise CoordinatorNotAvailableError(f"{OFFSETS_TOPIC} not written: {exc}") from exc
                for i, (tp, committed) in enumerate(accepted):
                    _keep_newer(group.offsets, tp, committed._replace(log_offset=result.first_offset + i))
        self._finish(fx)
        return errors

    def commit_txn_offsets(self, transactional_id: str, group_id: str, producer_id: int, producer_epoch: int,
                           member_id: str, group_instance_id: str | None, generation_id: int,
                           offsets: Mapping[TopicPartition, tuple[int, int, str | None]]
                           ) -> dict[TopicPartition, LogStoreError | None]:
        """TxnOffsetCommit: offsets written in the producer's transaction, pending until its marker."""
        now = self._clock()
        fx = Effects()
        partition = self.partition_of(group_id)
        with self.transactions.verified_write(transactional_id, producer_id, producer_epoch, OFFSETS_TOPIC,
                                              partition):
            with self._lock:
                group = self._offsets_group(group_id, member_id, group_instance_id, generation_id, True)
                accepted, keys, values, errors = self._offset_records(group_id, offsets, now, -1)
                if accepted:
                    result = self._append(fx, group.partition, keys, values, producer_id=producer_id,
                                          producer_epoch=producer_epoch)
                    pending = group.pending_txn_offsets.setdefault(producer_id, {})
                    for i, (tp, committed) in enumerate(accepted):
                        pending[tp] = committed._replace(log_offset=result.first_offset + i)
                    self._txn_groups.setdefault((group.partition, producer_id), set()).add(group_id)
        self._finish(fx)
        return errors

    def complete_txn_offsets(self, partition: int, producer_id: int, commit: bool) -> None:
        """A marker of `producer_id` is in this `__consumer_offsets` partition: apply or drop its offsets."""
        with self._lock:
            for group_id in self._txn_groups.pop((partition, producer_id), ()):
                group = self._groups.get(group_id)
                pending = group.pending_txn_offsets.pop(producer_id, {}) if group is not None else {}
                if commit:
                    for tp, committed in pending.items():
                        _keep_newer(group.offsets, tp, committed)

    def fetch_offsets(self, group_id: str, partitions: Iterable[TopicPartition] | None,
                      require_stable: bool = False, member_id: str | None = None, member_epoch: int = -1
                      ) -> dict[TopicPartition, CommittedOffset | LogStoreError | None]:
        """OffsetFetch: the committed offset of each partition (None if none; all of the group's for None).

        A consumer group's member (v9) is checked as Kafka checks it; its refusal is raised.
        """
        with self._lock:
            group = self._groups.get(group_id)
            if group is None:
                return {} if partitions is None else dict.fromkeys(partitions)
            if group.consumer is not None:
                self._check_consumer_fetch(group, member_id, member_epoch)
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
            self._append(fx, group.partition, [encode_offset_key(group.group_id, t, p) for t, p in partitions],
                         [None] * len(partitions))
            for tp in partitions:
                del group.offsets[tp]

    def _remove_group(self, fx: Effects, group: Group) -> None:
        """Tombstones for the group and all its offsets; it is gone (under the lock)."""
        keys = [encode_offset_key(group.group_id, t, p) for t, p in group.offsets]
        if group.consumer is not None:
            self._remove_consumer_records(fx, group)
        else:
            keys.append(encode_group_key(group.group_id))
        if keys:
            self._append(fx, group.partition, keys, [None] * len(keys))
        group.transition(GroupState.DEAD, self._clock())
        del self._groups[group.group_id]

    def delete_offsets(self, group_id: str, partitions: Iterable[TopicPartition]
                       ) -> dict[TopicPartition, LogStoreError | None]:
        """OffsetDelete: forget offsets of topics the group does not consume."""
        fx = Effects()
        with self._lock:
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
        self._finish(fx)
        return errors

    def delete_topic_offsets(self, topic: str) -> int:
        """A topic is being deleted: every group forgets its offsets of it, pending transactional ones too,
        and an empty group left with nothing goes (Kafka's onPartitionsDeleted); how many offsets went."""
        fx = Effects()
        removed = 0
        with self._lock:
            for group in list(self._groups.values()):
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
        self._finish(fx)
        return removed

    def delete_groups(self, group_ids: Iterable[str]) -> dict[str, LogStoreError | None]:
        """DeleteGroups: remove empty groups and their offsets; an error or None for each."""
        fx = Effects()
        errors: dict[str, LogStoreError | None] = {}
        with self._lock:
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
        self._finish(fx)
        return errors

    def expire_offsets(self, now: int | None = None) -> int:
        """Drop offsets older than offsets.retention.minutes (Kafka's KIP-211 rules), and the empty
        groups left with none; how many offsets went."""
        now = self._clock() if now is None else now
        retention = self.config.offsets_retention_ms
        fx = Effects()
        expired = 0
        with self._lock:
            for group in list(self._groups.values()):
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
        self._finish(fx, strict=False)
        return expired


def _keep_newer(offsets: dict[TopicPartition, CommittedOffset], tp: TopicPartition,
                committed: CommittedOffset) -> None:
    """The record later in the log wins, whatever order the commits completed in (Kafka's rule)."""
    current = offsets.get(tp)
    if current is None or current.log_offset < committed.log_offset:
        offsets[tp] = committed


def _load_partition(partition_log, partition: int, now: int, topic_names=lambda topic_id: None):
    """Groups and offsets of one `__consumer_offsets` partition, and the transactional offsets
    still pending there (producer id -> [(group, partition, offset)]). `topic_names` maps the
    topic ids of consumer-group records to names."""
    metadata: dict[str, GroupValue | None] = {}
    consumer_groups = consumer_group_log.ConsumerGroupLoader(topic_names)
    offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
    pending: dict[int, list[tuple[str, TopicPartition, CommittedOffset]]] = {}
    for header, records in partition_log.iter_batches():
        producer_id = getattr(header, "producer_id", -1)
        if getattr(header, "is_control", False):
            entries = pending.pop(producer_id, [])
            if records and read_control_record(records[0]).type_name == "COMMIT":
                for group_id, tp, committed in entries:
                    _keep_newer(offsets.setdefault(group_id, {}), tp, committed)
            continue
        transactional = getattr(header, "is_transactional", False)
        for record in records:
            fields = read_offset_commit(record.key, record.value)
            if fields is not None:
                group_id, topic, p, offset, leader_epoch, text, timestamp = fields
                committed = CommittedOffset(offset, leader_epoch, text, timestamp, -1, record.offset)
                if transactional:
                    pending.setdefault(producer_id, []).append((group_id, (topic, p), committed))
                else:
                    # Later in the log than anything applied so far, committed transactions included.
                    (offsets.get(group_id) or offsets.setdefault(group_id, {}))[(topic, p)] = committed
                continue
            try:
                key = decode_key(record.key) if record.key is not None else None
                if isinstance(key, OffsetKey):
                    tp = (key.topic, key.partition)
                    if record.value is None:
                        offsets.get(key.group, {}).pop(tp, None)
                        continue
                    v = decode_offset_value(record.value)
                    committed = CommittedOffset(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp,
                                                v.expire_timestamp, record.offset)
                    if transactional:
                        pending.setdefault(producer_id, []).append((key.group, tp, committed))
                    else:
                        _keep_newer(offsets.setdefault(key.group, {}), tp, committed)
                elif isinstance(key, GroupKey):
                    # A tombstone ends the group's metadata, not its offsets (those have their own).
                    metadata[key.group] = None if record.value is None else decode_group_value(record.value)
                elif key is None and record.key is not None:
                    consumer_key = consumer_group_log.decode_key(record.key)
                    if consumer_key is not None:
                        consumer_groups.replay(consumer_key, record.value)
            except CorruptRecordError as exc:
                raise StorageError(f"{OFFSETS_TOPIC}-{partition} offset {record.offset}: {exc}") from exc
    groups: dict[str, Group] = {}
    consumers = consumer_groups.groups()
    for group_id in set(metadata) | set(offsets) | set(consumers):
        value = metadata.get(group_id)
        group_offsets = offsets.get(group_id, {})
        consumer = consumers.get(group_id)
        if value is None and not group_offsets and consumer is None:
            continue
        if consumer is not None:
            if value is not None:
                log.warning("group %r has live classic and consumer records; loaded as a consumer group", group_id)
            group = Group(group_id, partition)
            group.consumer = consumer
        elif value is not None:
            group = Group.from_value(group_id, partition, value, now)
        else:
            group = Group(group_id, partition)
        group.offsets = group_offsets
        groups[group_id] = group
    return groups, pending
