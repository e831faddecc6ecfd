"""`__consumer_offsets` records of KIP-932 share groups, as Kafka 4.2's group coordinator writes them.

The key's leading int16 is the record type; keys are never flexible; every
value here is version 0, flexible (compact lengths, a tagged-field section
closing each struct; unknown tags are skipped, so a later Kafka's tagged
additions load). Partitions are named by topic id (16 bytes), as in Kafka.

  10 ShareGroupMemberMetadata         key (group, member) value RackId string?, ClientId string,
                                                                ClientHost string, SubscribedTopicNames [string]
  11 ShareGroupMetadata               key (group)         value Epoch int32, MetadataHash int64
  12 ShareGroupTargetAssignmentMetadata key (group)       value AssignmentEpoch int32
  13 ShareGroupTargetAssignmentMember key (group, member) value TopicPartitions [TopicId uuid,
                                                                Partitions [int32]]
  14 ShareGroupCurrentMemberAssignment key (group, member) value MemberEpoch int32, PreviousMemberEpoch
                                                                int32, State int8 (always 0: stable),
                                                                AssignedPartitions [TopicId, Partitions]
  15 ShareGroupStatePartitionMetadata key (group)         value InitializingTopics [TopicId, TopicName,
                                                                Partitions [int32], CreateTimestamp int64],
                                                                InitializedTopics [same], DeletingTopics
                                                                [TopicId, TopicName]

Type 9 (ShareGroupPartitionMetadata, Kafka 4.0's preview) is no longer
written since Kafka 4.1 (the MetadataHash replaced it); one found on loading
is skipped. A 4.0 ShareGroupMetadata value without the MetadataHash loads with
hash 0 (the next heartbeat recomputes it and bumps the epoch once). A null
value is a tombstone. `records_between` turns a change of a group into the
records Kafka writes for it, in Kafka's order; `ShareGroupLoader` replays them,
in log order, back into groups (members' sessions start when loading ends).
"""
from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from logstore.broker.coordinator.records import Reader, Writer
from logstore.broker.coordinator.share_group import ShareGroup, ShareMember
from logstore.errors import CorruptRecordError

(LEGACY_PARTITION_METADATA, MEMBER_METADATA, GROUP_EPOCH, TARGET_EPOCH, TARGET_MEMBER, CURRENT_ASSIGNMENT,
 STATE_PARTITION_METADATA) = range(9, 16)
VALUE_VERSION = 0
_MEMBER_RECORDS = (MEMBER_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT)
STABLE_STATE = 0

TopicPartition = tuple[str, int]
TopicIds = Callable[[str], bytes | None]   # topic name -> its 16-byte id (None: the topic is gone)
TopicNames = Callable[[bytes], str | None]  # id -> name


@dataclass(frozen=True)
class ShareKey:
    """The key of a share-group record: its type, group and (for member records) member."""

    record_type: int
    group: str
    member: str | None = None

    @property
    def member_id(self) -> str:
        """The member of a member record (types 10, 13 and 14, whose keys `decode_key` always gives one)."""
        if self.member is None:
            raise ValueError(f"a record of type {self.record_type} for group {self.group!r} names no member")
        return self.member


def encode_key(key: ShareKey) -> bytes:
    """The key bytes (its version is the record type)."""
    w = Writer().int(2, key.record_type).string(False, key.group)
    if key.record_type in _MEMBER_RECORDS:
        w.string(False, key.member)
    return w.getvalue()


def decode_key(data: bytes) -> ShareKey | None:
    """A share-group key, or None for another record type."""
    reader = Reader(data, "__consumer_offsets key")
    record_type = reader.int(2)
    if not LEGACY_PARTITION_METADATA <= record_type <= STATE_PARTITION_METADATA:
        return None
    group = reader.string(False)
    member = reader.string(False) if record_type in _MEMBER_RECORDS else None
    reader.end()
    return ShareKey(record_type, group, member)


# -- values ------------------------------------------------------------------------------------------

_UUID = struct.Struct(">qq")


def _put_uuid(w: Writer, topic_id: bytes) -> Writer:
    high, low = _UUID.unpack(topic_id)
    return w.int(8, high).int(8, low)


def _uuid(reader: Reader) -> bytes:
    return _UUID.pack(reader.int(8), reader.int(8))


def _value() -> Writer:
    return Writer().int(2, VALUE_VERSION)


def _by_topic(partitions: Iterable[TopicPartition], topic_ids: TopicIds) -> list[tuple[bytes, str, list[int]]]:
    grouped: dict[str, list[int]] = {}
    for topic, p in sorted(partitions):
        grouped.setdefault(topic, []).append(p)
    return [(topic_id, t, ps) for t, ps in grouped.items() if (topic_id := topic_ids(t)) is not None]


def _partitions(w: Writer, partitions: Iterable[TopicPartition], topic_ids: TopicIds) -> None:
    rows = _by_topic(partitions, topic_ids)
    w.array_header(True, len(rows))
    for topic_id, _, ps in rows:
        _put_uuid(w, topic_id).array_header(True, len(ps))
        for p in ps:
            w.int(4, p)
        w.tagged_fields()


def _read_partitions(reader: Reader, topic_names: TopicNames) -> frozenset[TopicPartition]:
    def entry() -> tuple[bytes, list[int]]:
        topic_id = _uuid(reader)
        ps = reader.array(True, lambda: reader.int(4))
        reader.tagged_fields()
        return topic_id, ps
    found: set[TopicPartition] = set()
    for topic_id, ps in reader.array(True, entry):
        name = topic_names(topic_id)
        if name is not None:   # a topic deleted since: its partitions are gone
            found.update((name, p) for p in ps)
    return frozenset(found)


def member_value(m: ShareMember) -> bytes:
    """ShareGroupMemberMetadataValue."""
    w = _value().string(True, m.rack_id).string(True, m.client_id).string(True, m.client_host)
    w.array_header(True, len(m.subscribed_topics))
    for topic in sorted(m.subscribed_topics):
        w.string(True, topic)
    return w.tagged_fields().getvalue()


def group_epoch_value(epoch: int, hash_: int) -> bytes:
    """ShareGroupMetadataValue."""
    return _value().int(4, epoch).int(8, hash_).tagged_fields().getvalue()


def target_epoch_value(epoch: int) -> bytes:
    """ShareGroupTargetAssignmentMetadataValue."""
    return _value().int(4, epoch).tagged_fields().getvalue()


def target_value(partitions: Iterable[TopicPartition], topic_ids: TopicIds) -> bytes:
    """ShareGroupTargetAssignmentMemberValue."""
    w = _value()
    _partitions(w, partitions, topic_ids)
    return w.tagged_fields().getvalue()


def assignment_value(m: ShareMember, topic_ids: TopicIds) -> bytes:
    """ShareGroupCurrentMemberAssignmentValue."""
    w = _value().int(4, m.member_epoch).int(4, m.previous_member_epoch).int(1, STABLE_STATE)
    _partitions(w, m.assigned, topic_ids)
    return w.tagged_fields().getvalue()


def state_partitions_value(initialized: Iterable[TopicPartition], topic_ids: TopicIds, timestamp: int) -> bytes:
    """ShareGroupStatePartitionMetadataValue: nothing initializing or deleting (the share state of an
    assigned partition is initialized before its member is answered), `initialized` as InitializedTopics."""
    w = _value().array_header(True, 0)
    rows = _by_topic(initialized, topic_ids)
    w.array_header(True, len(rows))
    for topic_id, name, ps in rows:
        _put_uuid(w, topic_id).string(True, name).array_header(True, len(ps))
        for p in ps:
            w.int(4, p)
        w.int(8, timestamp).tagged_fields()
    return w.array_header(True, 0).tagged_fields().getvalue()


def _reader(data: bytes, what: str) -> Reader:
    reader = Reader(data, what)
    version = reader.int(2)
    if version != VALUE_VERSION:
        raise CorruptRecordError(f"{what} version {version} is not 0")
    return reader


# -- what a change writes ------------------------------------------------------------------------------

Records = list[tuple[bytes, bytes | None]]


def records_between(before: ShareGroup | None, after: ShareGroup | None, topic_ids: TopicIds,
                    now: int = 0) -> Records:
    """The (key, value) records that turn `before` into `after` (None: no group), in Kafka's order:
    members' metadata, group epoch, target assignment, current assignments, initialized partitions.
    `now` (ms) stamps newly initialized topics."""
    either = after or before
    if either is None:
        raise ValueError("records_between needs a group before or after the change")
    group_id = either.group_id
    old = before or ShareGroup(group_id, group_epoch=-1, assignment_epoch=-1, metadata_hash=-1)
    records: Records = []

    def put(record_type: int, value: bytes | None, member: str | None = None) -> None:
        records.append((encode_key(ShareKey(record_type, group_id, member)), value))

    if after is None:
        # Tombstones, as Kafka's ShareGroup.createGroupTombstoneRecords orders them, then the share state's.
        for record_type in (CURRENT_ASSIGNMENT, TARGET_MEMBER, MEMBER_METADATA):
            for member_id in old.members:
                put(record_type, None, member_id)
        put(TARGET_EPOCH, None)
        put(GROUP_EPOCH, None)
        put(STATE_PARTITION_METADATA, None)
        return records
    for member_id in old.members.keys() - after.members.keys():
        for record_type in (CURRENT_ASSIGNMENT, TARGET_MEMBER, MEMBER_METADATA):
            put(record_type, None, member_id)
    for member_id, m in after.members.items():
        was = old.members.get(member_id)
        if was is None or was.metadata_key() != m.metadata_key():
            put(MEMBER_METADATA, member_value(m), member_id)
    if (after.group_epoch, after.metadata_hash) != (old.group_epoch, old.metadata_hash):
        put(GROUP_EPOCH, group_epoch_value(after.group_epoch, after.metadata_hash))
    for member_id, partitions in after.target.items():
        if old.target.get(member_id) != partitions or member_id not in old.members:
            put(TARGET_MEMBER, target_value(partitions, topic_ids), member_id)
    if after.assignment_epoch != old.assignment_epoch:
        put(TARGET_EPOCH, target_epoch_value(after.assignment_epoch))
    for member_id, m in after.members.items():
        was = old.members.get(member_id)
        if was is None or was.assignment_key() != m.assignment_key():
            put(CURRENT_ASSIGNMENT, assignment_value(m, topic_ids), member_id)
    if after.initialized != old.initialized and (before is not None or after.initialized):
        put(STATE_PARTITION_METADATA, state_partitions_value(after.initialized, topic_ids, now))
    return records


# -- loading ----------------------------------------------------------------------------------------

@dataclass
class _Loading:
    epoch: int | None = None
    metadata_hash: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    target: dict[str, frozenset[TopicPartition]] = field(default_factory=dict)
    initialized: frozenset[TopicPartition] = frozenset()


class ShareGroupLoader:
    """Replays share-group records in log order; `groups()` is what they leave."""

    def __init__(self, topic_names: TopicNames):
        self._names = topic_names
        self._groups: dict[str, _Loading] = {}

    def replay(self, key: ShareKey, value: bytes | None) -> None:
        """Apply one record (value None: a tombstone)."""
        what = f"share group {key.group!r} record type {key.record_type}"
        t = key.record_type
        if t == LEGACY_PARTITION_METADATA:
            return  # Kafka 4.0's subscription metadata: the MetadataHash replaced it
        g = self._groups.setdefault(key.group, _Loading())
        if t == GROUP_EPOCH:
            if value is None:
                self._groups.pop(key.group, None)
                return
            reader = _reader(value, what)
            g.epoch = reader.int(4)
            # Kafka 4.0's value ends here (its tagged-field section is one byte).
            g.metadata_hash = reader.int(8) if len(reader.data) - reader.pos > 1 else 0
            reader.tagged_fields()
            reader.end()
        elif t == MEMBER_METADATA:
            if value is None:
                g.members.pop(key.member_id, None)
            else:
                self._member(g, key.member_id, value, what)
        elif t == TARGET_EPOCH:
            if value is not None:
                reader = _reader(value, what)
                g.assignment_epoch = reader.int(4)
                reader.tagged_fields()
                reader.end()
        elif t == TARGET_MEMBER:
            if value is None:
                g.target.pop(key.member_id, None)
            else:
                reader = _reader(value, what)
                g.target[key.member_id] = _read_partitions(reader, self._names)
                reader.tagged_fields()
                reader.end()
        elif t == CURRENT_ASSIGNMENT and value is not None:
            reader = _reader(value, what)
            epoch, previous = reader.int(4), reader.int(4)
            reader.int(1)
            assigned = _read_partitions(reader, self._names)
            reader.tagged_fields()
            reader.end()
            member = g.members.get(key.member_id)
            if member is not None:
                member.member_epoch, member.previous_member_epoch, member.assigned = epoch, previous, assigned
        elif t == STATE_PARTITION_METADATA:
            g.initialized = frozenset() if value is None else self._initialized(value, what)

    def _member(self, g: _Loading, member_id: str, value: bytes, what: str) -> None:
        reader = _reader(value, what)
        rack_id = reader.string(True, nullable=True)
        client_id = reader.string(True)
        client_host = reader.string(True)
        topics = frozenset(reader.array(True, lambda: reader.string(True)))
        reader.tagged_fields()
        reader.end()
        member = g.members.get(member_id)
        if member is None:
            g.members[member_id] = ShareMember(member_id, rack_id, client_id, client_host, topics)
        else:
            member.rack_id, member.client_id, member.client_host = rack_id, client_id, client_host
            member.subscribed_topics = topics

    def _initialized(self, value: bytes, what: str) -> frozenset[TopicPartition]:
        reader = _reader(value, what)

        def topic_partitions() -> list[TopicPartition]:
            topic_id = _uuid(reader)
            reader.string(True)
            ps = reader.array(True, lambda: reader.int(4))
            reader.int(8)
            reader.tagged_fields()
            name = self._names(topic_id)
            return [] if name is None else [(name, p) for p in ps]

        def topic() -> None:
            _uuid(reader)
            reader.string(True)
            reader.tagged_fields()
        reader.array(True, topic_partitions)   # initializing: done again at the next assignment
        initialized = [tp for row in reader.array(True, topic_partitions) for tp in row]
        reader.array(True, topic)
        reader.tagged_fields()
        reader.end()
        return frozenset(initialized)

    def groups(self) -> dict[str, ShareGroup]:
        """The groups the records leave (one whose epoch record is gone, or never came, is not one)."""
        found = {}
        for group_id, g in self._groups.items():
            if g.epoch is None:
                continue
            found[group_id] = ShareGroup(group_id, g.epoch, g.assignment_epoch, g.members,
                                         {m: p for m, p in g.target.items() if m in g.members}, g.metadata_hash,
                                         g.initialized)
        return found
