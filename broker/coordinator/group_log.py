"""`__consumer_offsets` records: Kafka's OffsetCommit and GroupMetadata keys and values (spec §9.2–9.3).

The key's leading int16 is the record type: 0 and 1 are an OffsetCommitKey
(group, topic, partition; one layout, Kafka writes 1), 2 a GroupMetadataKey
(group). Types 3 and up are KIP-848 consumer-group and KIP-932 share-group
records that a classic group does not keep: `decode_key` returns None for
them so that the classic loading passes over them instead of failing (types
3-8 are read by consumer_group_log.py; the others are skipped). A null
value is a tombstone and never reaches these decoders.

Written as a current Kafka broker writes them: key v1 and v2,
OffsetCommitValue v3 (v1 when the commit carries an expire timestamp, the
only version with that field), GroupMetadataValue v3. Every value version
0..4 is read; v4 is flexible (compact lengths, a tagged-field section closing
each struct, unknown tags skipped). Keys are never flexible.

  OffsetCommitValue  offset int64, leaderEpoch int32 (v3+), metadata string,
                     commitTimestamp int64, expireTimestamp int64 (v1 only)
  GroupMetadataValue protocolType string, generation int32, protocol nullable
                     string, leader nullable string, currentStateTimestamp
                     int64 (v2+), members [memberId string, groupInstanceId
                     nullable string (v3+), clientId string, clientHost
                     string, rebalanceTimeout int32 (v1+), sessionTimeout
                     int32, subscription bytes, assignment bytes]

A coordinator's load reads a record per offset ever committed, so the
versions Kafka writes are also read natively (logstore.native.offset_replay,
re-exported here): `plain_run` finds the batches to decode in columns,
`OffsetReplay` applies their offsets and group metadata in place, as
`CommittedOffset`s, `group_metadata` backs `decode_group_value` and
`decode_group_fields` (the load's: plain tuples, no value objects). The
decoders below read every version and refuse what is corrupt; the native
ones leave them whatever they do not read themselves.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from logstore.broker.coordinator.records import Reader, Writer
from logstore.errors import CorruptRecordError
from logstore.native.offset_replay import CommittedOffset, OffsetReplay, group_metadata, plain_run

__all__ = ["CommittedOffset", "GroupKey", "GroupValue", "MemberValue", "OffsetKey", "OffsetReplay", "OffsetValue",
           "decode_group_fields", "decode_group_value", "decode_key", "decode_offset_value", "encode_group_key",
           "encode_group_value", "encode_offset_fields", "encode_offset_key", "encode_offset_value", "plain_run"]

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
OFFSET_VALUE_VERSION_WITH_EXPIRE = 1
GROUP_VALUE_VERSION = 3
_VALUE_VERSIONS = range(0, 5)
_FIRST_FLEXIBLE = 4
# The fixed parts of the offset records (big-endian, as every Kafka message schema).
_VERSION_AND_LENGTH = struct.Struct(">hh")     # version, the group's length
_LENGTH = struct.Struct(">h")
_PARTITION = struct.Struct(">i")
_V3_HEAD = struct.Struct(">hqih")              # version, offset, leader epoch, the metadata's length
_V1_HEAD = struct.Struct(">hqh")               # version, offset, the metadata's length
_V1_TAIL = struct.Struct(">qq")                # commit timestamp, expire timestamp
_TIMESTAMP = struct.Struct(">q")


@dataclass(frozen=True)
class OffsetKey:
    """The key of a committed offset (key versions 0 and 1)."""

    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupKey:
    """The key of a group's metadata (key version 2)."""

    group: str


@dataclass(frozen=True)
class OffsetValue:
    """One committed offset; timestamps are ms since the epoch, -1 for none."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1


@dataclass(frozen=True)
class MemberValue:
    """A classic group member as persisted; timeouts in ms, blobs opaque (ConsumerProtocol for consumers)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupValue:
    """A classic group's persisted state; `current_state_timestamp` in ms, -1 when unknown."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: tuple[MemberValue, ...] = ()


def decode_key(data: bytes) -> OffsetKey | GroupKey | None:
    """The key, or None for a record type this coordinator does not keep (3+: KIP-848, share groups)."""
    reader = Reader(data, "__consumer_offsets key")
    version = reader.int(2)
    if version < 0:
        raise CorruptRecordError(f"__consumer_offsets key version {version} is negative")
    if version > GROUP_KEY_VERSION:
        return None
    group = reader.string(False)
    key: GroupKey | OffsetKey
    if version == GROUP_KEY_VERSION:
        key = GroupKey(group)
    else:
        topic = reader.string(False)
        key = OffsetKey(group, topic, reader.int(4))
    reader.end()
    return key


def encode_offset_key(group: str, topic: str, partition: int) -> bytes:
    """OffsetCommitKey v1."""
    # Fixed structs around the two strings: every OffsetCommit encodes one key per partition, and the
    # general Writer cost as much again (tests/broker/test_group_log.py holds the two to the same bytes).
    g, t = group.encode("utf-8"), topic.encode("utf-8")
    return b"".join((_VERSION_AND_LENGTH.pack(OFFSET_KEY_VERSION, len(g)), g, _LENGTH.pack(len(t)), t,
                     _PARTITION.pack(partition)))


def encode_group_key(group: str) -> bytes:
    """GroupMetadataKey v2."""
    return Writer().int(2, GROUP_KEY_VERSION).string(False, group).getvalue()


def encode_offset_value(value: OffsetValue) -> bytes:
    """OffsetCommitValue v3, or v1 when `expire_timestamp` >= 0 (Kafka's rule; v1 has no leader epoch)."""
    return encode_offset_fields(value.offset, value.leader_epoch, value.metadata, value.commit_timestamp,
                                value.expire_timestamp)


def encode_offset_fields(offset: int, leader_epoch: int, metadata: str | None, commit_timestamp: int,
                         expire_timestamp: int) -> bytes:
    """`encode_offset_value` of the fields themselves (an OffsetCommit's path makes no OffsetValue)."""
    data = b"" if metadata is None else metadata.encode("utf-8")
    length = -1 if metadata is None else len(data)
    if expire_timestamp >= 0:
        return b"".join((_V1_HEAD.pack(OFFSET_VALUE_VERSION_WITH_EXPIRE, offset, length), data,
                         _V1_TAIL.pack(commit_timestamp, expire_timestamp)))
    return b"".join((_V3_HEAD.pack(OFFSET_VALUE_VERSION, offset, leader_epoch, length), data,
                     _TIMESTAMP.pack(commit_timestamp)))


def decode_offset_value(data: bytes) -> OffsetValue:
    """An OffsetCommitValue of version 0..4."""
    reader = Reader(data, "OffsetCommitValue")
    version = _value_version(reader)
    flexible = version >= _FIRST_FLEXIBLE
    offset = reader.int(8)
    leader_epoch = reader.int(4) if version >= 3 else -1
    metadata = reader.string(flexible)
    commit_timestamp = reader.int(8)
    expire_timestamp = reader.int(8) if version == 1 else -1
    if flexible:
        reader.tagged_fields()
    reader.end()
    return OffsetValue(offset, leader_epoch, metadata, commit_timestamp, expire_timestamp)


def encode_group_value(value: GroupValue) -> bytes:
    """GroupMetadataValue v3."""
    w = Writer().int(2, GROUP_VALUE_VERSION).string(False, value.protocol_type).int(4, value.generation)
    w.string(False, value.protocol).string(False, value.leader).int(8, value.current_state_timestamp)
    w.array_header(False, len(value.members))
    for m in value.members:
        w.string(False, m.member_id).string(False, m.group_instance_id)
        w.string(False, m.client_id).string(False, m.client_host)
        w.int(4, m.rebalance_timeout_ms).int(4, m.session_timeout_ms)
        w.bytes_(False, m.subscription).bytes_(False, m.assignment)
    return w.getvalue()


# A GroupMetadataValue's fields in GroupValue's order, each member's in MemberValue's.
MemberFields = tuple[str, str | None, str, str, int, int, bytes, bytes]
GroupFields = tuple[str, int, str | None, str | None, int, list[MemberFields]]


def decode_group_fields(data: bytes) -> GroupFields:
    """`decode_group_value`'s fields as plain tuples: a load decodes one per group, and a frozen dataclass
    costs more to make than the native decode of the bytes."""
    fields = group_metadata(data)
    if fields is not None:
        return fields
    v = decode_group_value(data)  # the flexible version (or bytes it refuses)
    return (v.protocol_type, v.generation, v.protocol, v.leader, v.current_state_timestamp,
            [(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
              m.session_timeout_ms, m.subscription, m.assignment) for m in v.members])


def decode_group_value(data: bytes) -> GroupValue:
    """A GroupMetadataValue of version 0..4."""
    fields = group_metadata(data)  # the non-flexible versions, natively: a load decodes one per group
    if fields is not None:
        protocol_type, generation, protocol, leader, timestamp, read = fields
        return GroupValue(protocol_type, generation, protocol, leader, timestamp, tuple(MemberValue(*m) for m in read))
    reader = Reader(data, "GroupMetadataValue")
    version = _value_version(reader)
    flexible = version >= _FIRST_FLEXIBLE
    protocol_type = reader.string(flexible)
    generation = reader.int(4)
    protocol = reader.string(flexible, nullable=True)
    leader = reader.string(flexible, nullable=True)
    current_state_timestamp = reader.int(8) if version >= 2 else -1

    def member() -> MemberValue:
        member_id = reader.string(flexible)
        group_instance_id = reader.string(flexible, nullable=True) if version >= 3 else None
        client_id = reader.string(flexible)
        client_host = reader.string(flexible)
        rebalance_timeout_ms = reader.int(4) if version >= 1 else None
        session_timeout_ms = reader.int(4)
        # The schema forbids null blobs; Kafka's own reader would refuse them, a lenient b"" loses nothing.
        subscription = reader.bytes(flexible) or b""
        assignment = reader.bytes(flexible) or b""
        if flexible:
            reader.tagged_fields()
        if rebalance_timeout_ms is None:
            # v0 predates the rebalance timeout; Kafka then rebalances within the session timeout.
            rebalance_timeout_ms = session_timeout_ms
        return MemberValue(member_id, group_instance_id, client_id, client_host, rebalance_timeout_ms,
                           session_timeout_ms, subscription, assignment)

    members = tuple(reader.array(flexible, member))
    if flexible:
        reader.tagged_fields()
    reader.end()
    return GroupValue(protocol_type, generation, protocol, leader, current_state_timestamp, members)


def _value_version(reader: Reader) -> int:
    version = reader.int(2)
    if version not in _VALUE_VERSIONS:
        raise CorruptRecordError(f"{reader.what} version {version} is not one of 0..4")
    return version
