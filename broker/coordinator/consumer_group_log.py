"""`__consumer_offsets` records of KIP-848 consumer groups, as Kafka 4.0's group coordinator writes them.

The key's leading int16 is the record type; types 0-2 are the classic ones
in group_log.py. Keys are never flexible; every value here is
version 0, flexible (compact lengths, a tagged-field section closing each
struct; unknown tags are skipped, so a later Kafka's additions load).
Partitions are named by topic id (16 bytes), as in Kafka.

  3 ConsumerGroupMetadata         key (group)          value Epoch int32
  4 ConsumerGroupPartitionMetadata key (group)         value Topics [TopicId uuid, TopicName string,
                                                             NumPartitions int32, PartitionMetadata
                                                             [Partition int32, Racks [string]]]
  5 ConsumerGroupMemberMetadata   key (group, member)  value InstanceId string?, RackId string?,
                                                             ClientId string, ClientHost string,
                                                             SubscribedTopicNames [string],
                                                             SubscribedTopicRegex string?,
                                                             RebalanceTimeoutMs int32, ServerAssignor string?
                                                             tag 0 ClassicMemberMetadata? [SessionTimeoutMs
                                                             int32, SupportedProtocols [Name string,
                                                             Metadata bytes]]: a member speaking the
                                                             classic protocol (group_migration.py)
  6 ConsumerGroupTargetAssignmentMetadata key (group)  value AssignmentEpoch int32
  7 ConsumerGroupTargetAssignmentMember key (group, member) value TopicPartitions [TopicId uuid,
                                                             Partitions [int32]]
  8 ConsumerGroupCurrentMemberAssignment key (group, member) value MemberEpoch int32,
                                                             PreviousMemberEpoch int32, State int8,
                                                             AssignedPartitions [TopicId, Partitions],
                                                             PartitionsPendingRevocation [TopicId, Partitions]

A null value is a tombstone. `records_between` turns a change of a group
into the records Kafka would write for it; `ConsumerGroupLoader` replays
them, in log order, back into groups.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from logstore.broker.coordinator.consumer_group import ClassicMetadata, ConsumerGroup, ConsumerMember, MemberState
from logstore.broker.coordinator.record_family import (
    VALUE_VERSION,
    GroupKey,
    RecordFamily,
    Records,
    TopicIds,
    TopicNames,
    TopicPartition,
    epoch_value,
    put_partitions,
    put_uuid,
    read_epoch,
    read_partitions,
    read_uuid,
    value_reader,
    value_writer,
)
from logstore.broker.coordinator.records import Reader, Writer

GROUP_EPOCH, PARTITION_METADATA, MEMBER_METADATA, TARGET_EPOCH, TARGET_MEMBER, CURRENT_ASSIGNMENT = range(3, 9)
CLASSIC_MEMBER_TAG = 0   # ConsumerGroupMemberMetadataValue's tagged ClassicMemberMetadata
_STATE_BYTES = {MemberState.STABLE: 0, MemberState.UNREVOKED_PARTITIONS: 1, MemberState.UNRELEASED_PARTITIONS: 2}
_STATES = {v: k for k, v in _STATE_BYTES.items()}
FAMILY = RecordFamily(GROUP_EPOCH, CURRENT_ASSIGNMENT, MEMBER_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT, TARGET_EPOCH)

ConsumerKey = GroupKey
encode_key = FAMILY.encode_key
decode_key = FAMILY.decode_key
__all__ = ["VALUE_VERSION", "ConsumerGroupLoader", "ConsumerKey", "decode_key", "encode_key", "records_between"]


# -- values ------------------------------------------------------------------------------------------

def _partition_metadata_value(counts: Mapping[str, int], topic_ids: TopicIds) -> bytes:
    rows = [(topic_id, t, n) for t, n in sorted(counts.items()) if (topic_id := topic_ids(t)) is not None]
    w = value_writer().array_header(True, len(rows))
    for topic_id, name, n in rows:
        put_uuid(w, topic_id).string(True, name).int(4, n).array_header(True, 0).tagged_fields()
    return w.tagged_fields().getvalue()


def _member_value(m: ConsumerMember) -> bytes:
    w = value_writer().string(True, m.instance_id).string(True, m.rack_id).string(True, m.client_id)
    w.string(True, m.client_host).array_header(True, len(m.subscribed_topics))
    for topic in sorted(m.subscribed_topics):
        w.string(True, topic)
    w.string(True, m.subscribed_regex).int(4, m.rebalance_timeout_ms).string(True, m.server_assignor)
    return w.tagged_fields({} if m.classic is None else {CLASSIC_MEMBER_TAG: _classic_value(m.classic)}).getvalue()


# Kafka writes a nullable struct with a presence byte (1) before it, in a tagged field too.
_PRESENT = 1


def _classic_value(classic: ClassicMetadata) -> bytes:
    w = Writer().int(1, _PRESENT).int(4, classic.session_timeout_ms).array_header(True, len(classic.protocols))
    for name, metadata in classic.protocols:
        w.string(True, name).bytes_(True, metadata).tagged_fields()
    return w.tagged_fields().getvalue()


def _read_classic(data: bytes, what: str) -> ClassicMetadata:
    reader = Reader(data, f"{what} ClassicMemberMetadata")
    # Records written here before the presence byte start with the session timeout's high byte (0).
    if data[:1] == bytes([_PRESENT]):
        reader.int(1)
    session_timeout_ms = reader.int(4)

    def protocol() -> tuple[str, bytes]:
        name, metadata = reader.string(True), reader.bytes(True)
        reader.tagged_fields()
        return name, metadata or b""
    protocols = tuple(reader.array(True, protocol))
    reader.tagged_fields()
    reader.end()
    return ClassicMetadata(session_timeout_ms, protocols)


def _assignment_value(m: ConsumerMember, topic_ids: TopicIds) -> bytes:
    w = value_writer().int(4, m.member_epoch).int(4, m.previous_member_epoch).int(1, _STATE_BYTES[m.state])
    put_partitions(w, m.assigned, topic_ids)
    put_partitions(w, m.pending_revocation, topic_ids)
    return w.tagged_fields().getvalue()


# -- what a change writes ------------------------------------------------------------------------------

def records_between(before: ConsumerGroup | None, after: ConsumerGroup | None,
                    topic_ids: TopicIds) -> Records:
    """The (key, value) records that turn `before` into `after` (None: no group), in Kafka's order:
    members' metadata, subscription metadata, group epoch, target assignment, current assignments."""
    either = after or before
    if either is None:
        raise ValueError("records_between needs a group before or after the change")
    group_id = either.group_id
    old = before or ConsumerGroup(group_id, group_epoch=-1, assignment_epoch=-1)
    out = FAMILY.writer(group_id)
    put = out.put
    if after is None:
        out.group_tombstones(old.members)
        put(TARGET_EPOCH, None)
        put(PARTITION_METADATA, None)
        put(GROUP_EPOCH, None)
        return out.records
    out.member_tombstones(old.members.keys() - after.members.keys())
    out.member_metadata(old, after, _member_value)
    if after.subscribed_counts != old.subscribed_counts:
        put(PARTITION_METADATA, _partition_metadata_value(after.subscribed_counts, topic_ids))
    if after.group_epoch != old.group_epoch:
        put(GROUP_EPOCH, epoch_value(after.group_epoch))
    out.targets(old, after, topic_ids)
    for member_id in old.target.keys() - after.target.keys():
        if member_id in after.members:
            put(TARGET_MEMBER, None, member_id)
    out.target_epoch(old, after)
    out.assignments(old, after, lambda m: _assignment_value(m, topic_ids))
    return out.records


# -- loading ----------------------------------------------------------------------------------------

@dataclass
class _Loading:
    epoch: int | None = None
    assignment_epoch: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, frozenset[TopicPartition]] = field(default_factory=dict)


class ConsumerGroupLoader:
    """Replays consumer-group records in log order; `groups()` is what they leave."""

    def __init__(self, topic_names: TopicNames):
        self._names = topic_names
        self._groups: dict[str, _Loading] = {}

    def replay(self, key: ConsumerKey, value: bytes | None) -> None:
        """Apply one record (value None: a tombstone)."""
        what = f"consumer group {key.group!r} record type {key.record_type}"
        g = self._groups.setdefault(key.group, _Loading())
        t = key.record_type
        if FAMILY.replay_target(g, key, value, what, self._names):
            return
        if t == GROUP_EPOCH:
            if value is None:
                self._groups.pop(key.group, None)
            else:
                g.epoch = read_epoch(value, what)
        elif t == PARTITION_METADATA:
            g.counts = {} if value is None else self._counts(value, what)
        elif t == MEMBER_METADATA:
            if value is None:
                g.members.pop(key.member_id, None)
            else:
                self._member(g, key.member_id, value, what)
        elif t == CURRENT_ASSIGNMENT and value is not None:
            member = g.members.get(key.member_id)
            reader = value_reader(value, what)
            epoch, previous, state = reader.int(4), reader.int(4), reader.int(1)
            assigned = read_partitions(reader, self._names)
            pending = read_partitions(reader, self._names)
            reader.tagged_fields()
            reader.end()
            if member is not None:
                member.member_epoch, member.previous_member_epoch = epoch, previous
                member.state = _STATES.get(state, MemberState.STABLE)
                member.assigned, member.pending_revocation = assigned, pending

    def _counts(self, value: bytes, what: str) -> dict[str, int]:
        reader = value_reader(value, what)

        def topic() -> tuple[str, int]:
            read_uuid(reader)
            name = reader.string(True)
            n = reader.int(4)

            def rack_entry() -> None:
                reader.int(4)
                reader.array(True, lambda: reader.string(True))
                reader.tagged_fields()
            reader.array(True, rack_entry)
            reader.tagged_fields()
            return name, n
        counts = dict(reader.array(True, topic))
        reader.tagged_fields()
        reader.end()
        return counts

    def _member(self, g: _Loading, member_id: str, value: bytes, what: str) -> None:
        reader = value_reader(value, what)
        instance_id = reader.string(True, nullable=True)
        rack_id = reader.string(True, nullable=True)
        client_id = reader.string(True)
        client_host = reader.string(True)
        topics = frozenset(reader.array(True, lambda: reader.string(True)))
        regex = reader.string(True, nullable=True)
        rebalance_timeout_ms = reader.int(4)
        assignor = reader.string(True, nullable=True)
        tagged = reader.tagged_fields()
        reader.end()
        classic = _read_classic(tagged[CLASSIC_MEMBER_TAG], what) if CLASSIC_MEMBER_TAG in tagged else None
        member = g.members.get(member_id)
        if member is None:
            g.members[member_id] = ConsumerMember(member_id, instance_id, rack_id, client_id, client_host, topics,
                                                  assignor, rebalance_timeout_ms, regex or None, classic=classic)
        else:
            member.instance_id, member.rack_id, member.client_id, member.client_host = (
                instance_id, rack_id, client_id, client_host)
            member.subscribed_topics, member.subscribed_regex = topics, regex or None
            member.rebalance_timeout_ms, member.server_assignor = rebalance_timeout_ms, assignor
            member.classic = classic

    def groups(self) -> dict[str, ConsumerGroup]:
        """The groups the records leave (one whose epoch record is gone, or never came, is not one)."""
        found = {}
        for group_id, g in self._groups.items():
            if g.epoch is None:
                continue
            found[group_id] = ConsumerGroup(group_id, g.epoch, g.assignment_epoch, g.members,
                                            {m: p for m, p in g.target.items() if m in g.members}, g.counts)
        return found
