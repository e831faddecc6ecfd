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
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from logstore.broker.coordinator import consumer_group_log, share_group_log
from logstore.broker.coordinator.group_log import (
    GroupFields,
    GroupKey,
    OffsetKey,
    OffsetReplay,
    decode_group_fields,
    decode_key,
    decode_offset_value,
    plain_run,
)
from logstore.broker.coordinator.group_state import CommittedOffset, Group
from logstore.broker.coordinator.internal_topics import OFFSETS_TOPIC
from logstore.broker.coordinator.share_group import ShareGroup
from logstore.errors import CorruptRecordError, StorageError
from logstore.formats.kafka import (
    Columns,
    Entry,
    Record,
    add_entries,
    column_builder,
    decode_entry,
    entry_end,
    iter_entries,
    read_control_record,
)

if TYPE_CHECKING:
    from logstore.log import Log
    from logstore.manager import LogManager

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
# producer id -> [(group id, partition, offset)] of a transaction not yet ended
PendingOffsets = dict[int, list[tuple[str, TopicPartition, CommittedOffset]]]
# What `read` finds: the classic and consumer groups, the pending-offset index, the share groups.
Loaded = tuple[dict[str, Group], dict[tuple[int, int], set[str]], dict[str, ShareGroup]]
# topic -> its (topic, partition) keys by partition (None where none is made yet)
TopicKeys = dict[str, list[TopicPartition | None]]
# Bytes read from a partition at a time while loading, and rows replayed natively in one call: a call
# holds the GIL (a few ms), and a broker serves requests while it loads.
CHUNK_BYTES = 4 << 20
ROWS_A_CALL = 16_384
MAX_OFFSET = (1 << 63) - 1


class GroupStore:
    """Every group the coordinator knows (classic and consumer, by id), and which groups hold a producer's
    pending transactional offsets in which `__consumer_offsets` partition; share groups apart, in `shares`
    (they have no offsets here, and the classic and consumer calls never see them: the façade refuses
    those calls on a share group's id).

    Not locked itself: the coordinator's lock guards it (`read` alone runs outside it: the coordinator
    refuses calls for a partition's groups until it has installed what `read` found there).
    """

    def __init__(self, store: LogManager) -> None:
        self.store = store
        self.by_id: dict[str, Group] = {}
        # (partition, producer id) -> groups holding that producer's pending offsets there
        self.txn_groups: dict[tuple[int, int], set[str]] = {}
        self.shares: dict[str, ShareGroup] = {}
        # The keys every group's offsets of a topic share, across the partitions of one load: 10,000 groups of
        # 100 topics then hold 10,000 keys, not one per partition and group (a tuple each, 64 bytes).
        self._topic_keys: TopicKeys = {}

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

    def read(self, partition: int, now: int, topic_names: Callable[[bytes], str | None]) -> Loaded:
        """The groups, pending-offset index and share groups one `__consumer_offsets` partition holds
        (nothing is changed here); `topic_names` maps the topic ids of consumer- and share-group records
        to names."""
        groups, pending, shares = load_partition(self.store.log(OFFSETS_TOPIC, partition), partition, now,
                                                 topic_names, self._topic_keys)
        txn_groups: dict[tuple[int, int], set[str]] = {}
        for producer_id, entries in pending.items():
            for group_id, tp, offset in entries:
                group = groups.get(group_id) or groups.setdefault(group_id, Group(group_id, partition))
                group.pending_txn_offsets.setdefault(producer_id, {})[tp] = offset
                txn_groups.setdefault((partition, producer_id), set()).add(group_id)
        return groups, txn_groups, shares

    def clear(self) -> None:
        """Forget every group (under the lock), before they are read again."""
        self.by_id, self.txn_groups, self.shares = {}, {}, {}
        self._topic_keys = {}

    def loaded(self) -> None:
        """Every partition is read: the keys kept for sharing go (those in use stay with their offsets)."""
        self._topic_keys = {}

    def install(self, loaded: Loaded) -> None:
        """Add what `read` returned for a partition to the current state (under the lock)."""
        groups, txn_groups, shares = loaded
        self.by_id.update(groups)
        self.txn_groups.update(txn_groups)
        self.shares.update(shares)


def keep_newer(offsets: dict[TopicPartition, CommittedOffset], tp: TopicPartition,
               committed: CommittedOffset) -> None:
    """The record later in the log wins, whatever order the commits completed in (Kafka's rule)."""
    current = offsets.get(tp)
    if current is None or current.log_offset < committed.log_offset:
        offsets[tp] = committed


def load_partition(partition_log: Log, partition: int, now: int,
                   topic_names: Callable[[bytes], str | None] = lambda topic_id: None,
                   topic_keys: TopicKeys | None = None
                   ) -> tuple[dict[str, Group], PendingOffsets, dict[str, ShareGroup]]:
    """Groups and offsets of one `__consumer_offsets` partition, the transactional offsets
    still pending there (producer id -> [(group, partition, offset)]), and its share groups.
    `topic_names` maps the topic ids of consumer- and share-group records to names; `topic_keys`, shared by
    the partitions of a load, the (topic, partition) keys their offsets share."""
    replay = _PartitionReplay(partition, topic_names, topic_keys)
    offset = partition_log.log_start_offset
    while offset < partition_log.log_end_offset:
        data = partition_log.read(offset, CHUNK_BYTES)
        if data.records is None:
            break
        buf = data.read()
        pos, next_offset = 0, offset
        while True:
            # Runs of plain batches go to columns in one native call (each CRC checked there) and their
            # records to the native replay; control batches, transactional offsets (pending until their
            # marker) and legacy entries are replayed record by record, in log order between the runs.
            end, run_next = plain_run(buf, pos)
            if end > pos:
                builder = column_builder()
                added, _ = add_entries(builder, memoryview(buf)[:end], pos, 0, MAX_OFFSET, sys.maxsize)
                if added != end:
                    raise StorageError(f"{partition_log.directory}: batches at byte {pos} read as far as {added} "
                                       f"of {end}")
                replay.columns(builder.finish())
                pos, next_offset = end, run_next
            entry = next(iter_entries(buf, pos), None)  # its CRC checked; None: no whole entry left
            if entry is None:
                break
            replay.batch(entry, decode_entry(buf, entry))
            pos, next_offset = entry_end(entry), entry.last_offset + 1
        if next_offset <= offset:
            raise StorageError(f"{partition_log.directory}: no whole batch at offset {offset}")
        offset = next_offset
    return replay.result(now)


class _PartitionReplay:
    """What one partition's records leave, applied in log order (Kafka's GroupCoordinatorShard replay)."""

    def __init__(self, partition: int, topic_names: Callable[[bytes], str | None],
                 topic_keys: TopicKeys | None = None) -> None:
        self.partition = partition
        self.topic_keys: TopicKeys = {} if topic_keys is None else topic_keys
        self.offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        # group id -> (log offset, GroupMetadataValue bytes or None): the last record wins, decoded once
        self.metadata: dict[str, tuple[int, bytes | None]] = {}
        self.pending: PendingOffsets = {}
        self.consumer_groups = consumer_group_log.ConsumerGroupLoader(topic_names)
        self.share_groups = share_group_log.ShareGroupLoader(topic_names)

    def columns(self, columns: Columns) -> None:
        """The records of plain batches: offsets and metadata natively, other rows here, in log order."""
        replay = OffsetReplay(columns, self.offsets, self.metadata, self.topic_keys)
        row, count = 0, replay.count
        while row < count:
            stop = min(row + ROWS_A_CALL, count)
            row = replay.replay(row, stop)
            if row < stop:
                self.record(replay.key(row), replay.value(row), replay.offset(row), None)
                row += 1

    def batch(self, header: Entry, records: list[Record]) -> None:
        """A control batch (a marker ends its producer's pending offsets), a transactional or legacy one."""
        producer_id = getattr(header, "producer_id", -1)
        if getattr(header, "is_control", False):
            entries = self.pending.pop(producer_id, [])
            if records and read_control_record(records[0]).type_name == "COMMIT":
                for group_id, tp, committed in entries:
                    keep_newer(self.offsets.setdefault(group_id, {}), tp, committed)
            return
        transactional = getattr(header, "is_transactional", False)
        for record in records:
            self.record(record.key, record.value, record.offset, producer_id if transactional else None)

    def record(self, key: bytes | None, value: bytes | None, offset: int, producer_id: int | None) -> None:
        """One record (`producer_id`: of a transactional batch, None otherwise)."""
        if key is None:
            return
        try:
            decoded = decode_key(key)
            if isinstance(decoded, OffsetKey):
                tp = (decoded.topic, decoded.partition)
                if value is None:
                    self.offsets.get(decoded.group, {}).pop(tp, None)
                    return
                v = decode_offset_value(value)
                committed = CommittedOffset(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp,
                                            v.expire_timestamp, offset)
                if producer_id is not None:
                    self.pending.setdefault(producer_id, []).append((decoded.group, tp, committed))
                else:
                    keep_newer(self.offsets.setdefault(decoded.group, {}), tp, committed)
            elif isinstance(decoded, GroupKey):
                # A tombstone ends the group's metadata, not its offsets (those have their own).
                self.metadata[decoded.group] = (offset, value)
            elif (consumer_key := consumer_group_log.decode_key(key)) is not None:
                self.consumer_groups.replay(consumer_key, value)
            elif (share_key := share_group_log.decode_key(key)) is not None:
                self.share_groups.replay(share_key, value)
        except CorruptRecordError as exc:
            raise StorageError(f"{OFFSETS_TOPIC}-{self.partition} offset {offset}: {exc}") from exc

    def _metadata(self, group_id: str) -> GroupFields | None:
        offset, value = self.metadata.get(group_id, (-1, None))
        try:
            return None if value is None else decode_group_fields(value)
        except CorruptRecordError as exc:
            raise StorageError(f"{OFFSETS_TOPIC}-{self.partition} offset {offset}: {exc}") from exc

    def result(self, now: int) -> tuple[dict[str, Group], PendingOffsets, dict[str, ShareGroup]]:
        """The groups (members' sessions from `now`), the pending offsets and the share groups."""
        groups: dict[str, Group] = {}
        consumers = self.consumer_groups.groups()
        partition = self.partition
        for group_id in self.metadata.keys() | self.offsets.keys() | consumers.keys():
            value = self._metadata(group_id)
            group_offsets = self.offsets.get(group_id, {})
            consumer = consumers.get(group_id)
            if value is None and not group_offsets and consumer is None:
                continue
            if consumer is not None:
                if value is not None:
                    log.warning("group %r has live classic and consumer records; loaded as a consumer group",
                                group_id)
                group = Group(group_id, partition)
                group.consumer = consumer
            elif value is not None:
                group = Group.from_fields(group_id, partition, value, now)
            else:
                group = Group(group_id, partition)
            group.offsets = group_offsets
            groups[group_id] = group
        shares = self.share_groups.groups()
        for group_id in shares.keys() & groups.keys():
            log.warning("group %r has live share and other records; loaded as a share group", group_id)
            del groups[group_id]
        return groups, self.pending, shares
