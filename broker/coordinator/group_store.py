"""The groups by id, and reading them back from `__consumer_offsets` on start.

Loading replays each partition in log order, as Kafka's
GroupCoordinatorShard replays its records: the last GroupMetadata record of
a group is its metadata (a tombstone ends it, not its offsets), each offset
record replaces the earlier one of its partition, transactional offsets wait
for their producer's marker (COMMIT applies them, ABORT drops them), and the
consumer-group records (types 3-8) rebuild KIP-848 groups, and the
share-group records (types 9-15) KIP-932 share groups.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from logstore.broker.coordinator import consumer_group_log, share_group_log
from logstore.broker.coordinator.group_log import (
    GroupKey,
    GroupValue,
    OffsetKey,
    decode_group_value,
    decode_key,
    decode_offset_value,
    read_offset_commit,
)
from logstore.broker.coordinator.group_state import CommittedOffset, Group
from logstore.broker.coordinator.internal_topics import OFFSETS_TOPIC
from logstore.broker.coordinator.share_group import ShareGroup
from logstore.errors import CorruptRecordError, StorageError
from logstore.formats.kafka import read_control_record

if TYPE_CHECKING:
    from logstore.log import Log
    from logstore.manager import LogManager

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
# producer id -> [(group id, partition, offset)] of a transaction not yet ended
PendingOffsets = dict[int, list[tuple[str, TopicPartition, CommittedOffset]]]
# What `read` finds: the classic and consumer groups, the pending-offset index, the share groups.
Loaded = tuple[dict[str, Group], dict[tuple[int, int], set[str]], dict[str, ShareGroup]]


class GroupStore:
    """Every group the coordinator knows (classic and consumer, by id), and which groups hold a producer's
    pending transactional offsets in which `__consumer_offsets` partition; share groups apart, in `shares`
    (they have no offsets here, and the classic and consumer calls never see them: the façade refuses
    those calls on a share group's id).

    Not locked itself: the coordinator's lock guards it (`read` alone runs outside it).
    """

    def __init__(self, store: LogManager) -> None:
        self.store = store
        self.by_id: dict[str, Group] = {}
        # (partition, producer id) -> groups holding that producer's pending offsets there
        self.txn_groups: dict[tuple[int, int], set[str]] = {}
        self.shares: dict[str, ShareGroup] = {}

    def get(self, group_id: str) -> Group | None:
        """The group, or None."""
        return self.by_id.get(group_id)

    def put(self, group: Group) -> Group:
        """Add or replace the group of its id; returns it."""
        self.by_id[group.group_id] = group
        return group

    def remove(self, group_id: str) -> None:
        """Forget the group."""
        del self.by_id[group_id]

    def all(self) -> list[Group]:
        """Every group (a list: callers may remove groups while they go through it)."""
        return list(self.by_id.values())

    def __iter__(self) -> Iterator[Group]:
        return iter(self.by_id.values())

    def __len__(self) -> int:
        return len(self.by_id)

    def read(self, now: int, topic_names: Callable[[bytes], str | None]) -> Loaded:
        """The groups, pending-offset index and share groups `__consumer_offsets` holds (nothing is changed
        here); `topic_names` maps the topic ids of consumer- and share-group records to names."""
        partitions = self.store.topics().get(OFFSETS_TOPIC, 0)
        groups: dict[str, Group] = {}
        txn_groups: dict[tuple[int, int], set[str]] = {}
        shares: dict[str, ShareGroup] = {}
        for p in range(partitions):
            loaded, pending, shared = load_partition(self.store.log(OFFSETS_TOPIC, p), p, now, topic_names)
            groups.update(loaded)
            shares.update(shared)
            for producer_id, entries in pending.items():
                for group_id, tp, offset in entries:
                    group = groups.setdefault(group_id, Group(group_id, p))
                    group.pending_txn_offsets.setdefault(producer_id, {})[tp] = offset
                    txn_groups.setdefault((p, producer_id), set()).add(group_id)
        return groups, txn_groups, shares

    def replace(self, groups: dict[str, Group], txn_groups: dict[tuple[int, int], set[str]],
                shares: dict[str, ShareGroup] | None = None) -> None:
        """Take what `read` returned as the current state (under the lock)."""
        self.by_id = groups
        self.txn_groups = txn_groups
        self.shares = shares or {}


def keep_newer(offsets: dict[TopicPartition, CommittedOffset], tp: TopicPartition,
               committed: CommittedOffset) -> None:
    """The record later in the log wins, whatever order the commits completed in (Kafka's rule)."""
    current = offsets.get(tp)
    if current is None or current.log_offset < committed.log_offset:
        offsets[tp] = committed


def load_partition(partition_log: Log, partition: int, now: int,
                   topic_names: Callable[[bytes], str | None] = lambda topic_id: None
                   ) -> tuple[dict[str, Group], PendingOffsets, dict[str, ShareGroup]]:
    """Groups and offsets of one `__consumer_offsets` partition, the transactional offsets
    still pending there (producer id -> [(group, partition, offset)]), and its share groups.
    `topic_names` maps the topic ids of consumer- and share-group records to names."""
    metadata: dict[str, GroupValue | None] = {}
    consumer_groups = consumer_group_log.ConsumerGroupLoader(topic_names)
    share_groups = share_group_log.ShareGroupLoader(topic_names)
    offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
    pending: PendingOffsets = {}
    for header, records in partition_log.iter_batches():
        producer_id = getattr(header, "producer_id", -1)
        if getattr(header, "is_control", False):
            entries = pending.pop(producer_id, [])
            if records and read_control_record(records[0]).type_name == "COMMIT":
                for group_id, tp, committed in entries:
                    keep_newer(offsets.setdefault(group_id, {}), tp, committed)
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
                        keep_newer(offsets.setdefault(key.group, {}), tp, committed)
                elif isinstance(key, GroupKey):
                    # A tombstone ends the group's metadata, not its offsets (those have their own).
                    metadata[key.group] = None if record.value is None else decode_group_value(record.value)
                elif key is None and record.key is not None:
                    consumer_key = consumer_group_log.decode_key(record.key)
                    if consumer_key is not None:
                        consumer_groups.replay(consumer_key, record.value)
                    elif (share_key := share_group_log.decode_key(record.key)) is not None:
                        share_groups.replay(share_key, record.value)
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
    shares = share_groups.groups()
    for group_id in shares.keys() & groups.keys():
        log.warning("group %r has live share and other records; loaded as a share group", group_id)
        del groups[group_id]
    return groups, pending, shares
