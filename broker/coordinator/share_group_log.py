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

from collections.abc import Iterable
from dataclasses import dataclass, field

from logstore.broker.coordinator.record_family import (
    GroupKey,
    RecordFamily,
    Records,
    TopicIds,
    TopicNames,
    TopicPartition,
    by_topic,
    put_partitions,
    put_uuid,
    read_partitions,
    read_uuid,
    target_value,
    value_reader,
    value_writer,
)
from logstore.broker.coordinator.share_group import ShareGroup, ShareMember

(LEGACY_PARTITION_METADATA, MEMBER_METADATA, GROUP_EPOCH, TARGET_EPOCH, TARGET_MEMBER, CURRENT_ASSIGNMENT,
 STATE_PARTITION_METADATA) = range(9, 16)
STABLE_STATE = 0
FAMILY = RecordFamily(LEGACY_PARTITION_METADATA, STATE_PARTITION_METADATA, MEMBER_METADATA, TARGET_MEMBER,
                      CURRENT_ASSIGNMENT, TARGET_EPOCH)

ShareKey = GroupKey
encode_key = FAMILY.encode_key
decode_key = FAMILY.decode_key
__all__ = ["ShareGroupLoader", "ShareKey", "decode_key", "encode_key", "records_between", "target_value"]


# -- values ------------------------------------------------------------------------------------------

def member_value(m: ShareMember) -> bytes:
    """ShareGroupMemberMetadataValue."""
    w = value_writer().string(True, m.rack_id).string(True, m.client_id).string(True, m.client_host)
    w.array_header(True, len(m.subscribed_topics))
    for topic in sorted(m.subscribed_topics):
        w.string(True, topic)
    return w.tagged_fields().getvalue()


def group_epoch_value(epoch: int, hash_: int) -> bytes:
    """ShareGroupMetadataValue."""
    return value_writer().int(4, epoch).int(8, hash_).tagged_fields().getvalue()


def assignment_value(m: ShareMember, topic_ids: TopicIds) -> bytes:
    """ShareGroupCurrentMemberAssignmentValue."""
    w = value_writer().int(4, m.member_epoch).int(4, m.previous_member_epoch).int(1, STABLE_STATE)
    put_partitions(w, m.assigned, topic_ids)
    return w.tagged_fields().getvalue()


def state_partitions_value(initialized: Iterable[TopicPartition], topic_ids: TopicIds, timestamp: int) -> bytes:
    """ShareGroupStatePartitionMetadataValue: nothing initializing or deleting (the share state of an
    assigned partition is initialized before its member is answered), `initialized` as InitializedTopics."""
    w = value_writer().array_header(True, 0)
    rows = by_topic(initialized, topic_ids)
    w.array_header(True, len(rows))
    for topic_id, name, ps in rows:
        put_uuid(w, topic_id).string(True, name).array_header(True, len(ps))
        for p in ps:
            w.int(4, p)
        w.int(8, timestamp).tagged_fields()
    return w.array_header(True, 0).tagged_fields().getvalue()


# -- what a change writes ------------------------------------------------------------------------------

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
    out = FAMILY.writer(group_id)
    put = out.put
    if after is None:
        out.group_tombstones(old.members)   # then the share state's, as Kafka's ShareGroup orders them
        put(TARGET_EPOCH, None)
        put(GROUP_EPOCH, None)
        put(STATE_PARTITION_METADATA, None)
        return out.records
    out.member_tombstones(old.members.keys() - after.members.keys())
    out.member_metadata(old, after, member_value)
    if (after.group_epoch, after.metadata_hash) != (old.group_epoch, old.metadata_hash):
        put(GROUP_EPOCH, group_epoch_value(after.group_epoch, after.metadata_hash))
    out.targets(old, after, topic_ids)
    out.target_epoch(old, after)
    out.assignments(old, after, lambda m: assignment_value(m, topic_ids))
    if after.initialized != old.initialized and (before is not None or after.initialized):
        put(STATE_PARTITION_METADATA, state_partitions_value(after.initialized, topic_ids, now))
    return out.records


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
        if FAMILY.replay_target(g, key, value, what, self._names):
            return
        if t == GROUP_EPOCH:
            if value is None:
                self._groups.pop(key.group, None)
                return
            reader = value_reader(value, what)
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
        elif t == CURRENT_ASSIGNMENT and value is not None:
            reader = value_reader(value, what)
            epoch, previous = reader.int(4), reader.int(4)
            reader.int(1)
            assigned = read_partitions(reader, self._names)
            reader.tagged_fields()
            reader.end()
            member = g.members.get(key.member_id)
            if member is not None:
                member.member_epoch, member.previous_member_epoch, member.assigned = epoch, previous, assigned
        elif t == STATE_PARTITION_METADATA:
            g.initialized = frozenset() if value is None else self._initialized(value, what)

    def _member(self, g: _Loading, member_id: str, value: bytes, what: str) -> None:
        reader = value_reader(value, what)
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
        reader = value_reader(value, what)

        def topic_partitions() -> list[TopicPartition]:
            topic_id = read_uuid(reader)
            reader.string(True)
            ps = reader.array(True, lambda: reader.int(4))
            reader.int(8)
            reader.tagged_fields()
            name = self._names(topic_id)
            return [] if name is None else [(name, p) for p in ps]

        def topic() -> None:
            read_uuid(reader)
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
