"""The records of Kafka's internal topics as JSON, the way kafka-dump-log's decoders print them.

`offsets_record` (--offsets-decoder, `__consumer_offsets`),
`transaction_record` (--transaction-log-decoder, `__transaction_state`) and
`share_group_state_record` (--share-group-state-decoder, `__share_group_state`)
take a record's key and value bytes and return (key, payload):

    key      {"type": "<record type>", "data": {...}}    # a key's version is its record type
    payload  {"version": "<value version>", "data": {...}}, or "<DELETE>" for a tombstone

Field names are those of Kafka's generated JSON converters (the schema's
field name with a lower-case first letter); a field the version lacks is
left out, a tagged field shows only when it differs from its default;
bytes are base64, topic ids Kafka's base64url. In a classic group of
protocol type "consumer", each member's subscription and assignment are
shown decoded (ConsumerProtocolSubscription/Assignment at their own
version) when they parse, else as base64, as Kafka does. A transaction's
partitions are grouped by topic, topics and partitions in order (txn_log
reads them as a set). Tagged fields no schema here names are left out,
as Kafka's converters leave out unknown tags.

The coordinators' own readers decode what they keep: group_log (record
types 0-2), consumer_group_log (the keys of types 3-8), txn_log,
consumer_protocol, share.state_records (ShareSnapshot 0, ShareUpdate 1).
The values of types 3-16, which the coordinators replay into state rather
than decode into values, are read from the schemas below with
`records.Reader` (flexible version 0 structs):

  __consumer_offsets record types
   0, 1  OffsetCommit                          9  ShareGroupPartitionMetadata
   2     GroupMetadata                        10  ShareGroupMemberMetadata
   3     ConsumerGroupMetadata                11  ShareGroupMetadata
   4     ConsumerGroupPartitionMetadata       12  ShareGroupTargetAssignmentMetadata
   5     ConsumerGroupMemberMetadata          13  ShareGroupTargetAssignmentMember
   6     ConsumerGroupTargetAssignmentMetadata 14 ShareGroupCurrentMemberAssignment
   7     ConsumerGroupTargetAssignmentMember  15  ShareGroupStatePartitionMetadata
   8     ConsumerGroupCurrentMemberAssignment 16  ConsumerGroupRegularExpression

Share-group layouts (KIP-932) are Kafka 4.2's, and Kafka 4.0's preview ones
are read too (`_SHARE_VALUES`, at the end). Kafka writes a nullable tagged
struct (ConsumerGroupMemberMetadata's ClassicMemberMetadata, tag 0) after a
presence varint (1); a payload without it, the bare struct, is read too.
Another record type raises `UnknownRecordType` (not corruption: Kafka prints
"Unknown record type"); bytes that break their schema raise
`CorruptRecordError`.
"""
from __future__ import annotations

import base64
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import TypeAlias

from logstore.broker.coordinator import consumer_group_log, group_log, txn_log
from logstore.broker.coordinator.consumer_protocol import TopicPartitions, decode_assignment, decode_subscription
from logstore.broker.coordinator.group_state import CONSUMER_PROTOCOL
from logstore.broker.coordinator.records import Reader
from logstore.broker.share import state_records
from logstore.checkpoints import topic_id_to_string
from logstore.dump_records import UnknownRecordType
from logstore.errors import CorruptRecordError

TOMBSTONE = "<DELETE>"

# What the decoders return: JSON values, printed by the caller.
JsonValue: TypeAlias = "str | int | None | Sequence[JsonValue] | Mapping[str, JsonValue]"
JsonObject = dict[str, JsonValue]

# -- schemas of the values (and keys) the coordinators have no value decoder for ----------------------
# A field is (JSON name, type); a type is "int8".."int64", "string", "string?" (nullable), "bytes",
# "uuid", ("[]", element type) or a struct (a list of fields).
_Kind: TypeAlias = "str | tuple[str, _Kind] | list[tuple[str, _Kind]]"
_Struct = list[tuple[str, _Kind]]

_TOPIC_PARTITIONS: _Struct = [("topicId", "uuid"), ("partitions", ("[]", "int32"))]
_TOPIC_METADATA: _Struct = [("topicId", "uuid"), ("topicName", "string"), ("numPartitions", "int32"),
                           ("partitionMetadata", ("[]", [("partition", "int32"), ("racks", ("[]", "string"))]))]
_CLASSIC_MEMBER: _Struct = [("sessionTimeoutMs", "int32"),
                           ("supportedProtocols", ("[]", [("name", "string"), ("metadata", "bytes")]))]

_VALUES: dict[int, _Struct] = {
    3: [("epoch", "int32")],
    4: [("topics", ("[]", _TOPIC_METADATA))],
    5: [("instanceId", "string?"), ("rackId", "string?"), ("clientId", "string"), ("clientHost", "string"),
        ("subscribedTopicNames", ("[]", "string")), ("subscribedTopicRegex", "string?"),
        ("rebalanceTimeoutMs", "int32"), ("serverAssignor", "string?")],
    6: [("assignmentEpoch", "int32")],
    7: [("topicPartitions", ("[]", _TOPIC_PARTITIONS))],
    8: [("memberEpoch", "int32"), ("previousMemberEpoch", "int32"), ("state", "int8"),
        ("assignedPartitions", ("[]", _TOPIC_PARTITIONS)),
        ("partitionsPendingRevocation", ("[]", _TOPIC_PARTITIONS))],
    9: [("topics", ("[]", _TOPIC_METADATA))],
    10: [("rackId", "string?"), ("clientId", "string"), ("clientHost", "string"),
         ("subscribedTopicNames", ("[]", "string"))],
    11: [("epoch", "int32")],
    12: [("assignmentEpoch", "int32")],
    13: [("topicPartitions", ("[]", _TOPIC_PARTITIONS))],
    14: [("memberEpoch", "int32"), ("previousMemberEpoch", "int32"), ("state", "int8"),
         ("assignedPartitions", ("[]", _TOPIC_PARTITIONS))],
    15: [("initializedTopics", ("[]", [("topicId", "uuid"), ("topicName", "string"),
                                      ("partitions", ("[]", "int32"))])),
         ("deletingTopics", ("[]", [("topicId", "uuid"), ("topicName", "string")]))],
    16: [("topics", ("[]", "string")), ("version", "int64"), ("timestamp", "int64")],
}
# Nullable tagged structs of a value: record type -> {tag: (JSON name, struct)}.
_TAGGED: dict[int, dict[int, tuple[str, _Struct]]] = {5: {consumer_group_log.CLASSIC_MEMBER_TAG:
                                                              ("classicMemberMetadata", _CLASSIC_MEMBER)}}
# Keys of the types consumer_group_log does not read (keys are never flexible).
_SCHEMA_KEYS: dict[int, tuple[str, ...]] = {9: ("groupId",), 10: ("groupId", "memberId"), 11: ("groupId",),
                                            12: ("groupId",), 13: ("groupId", "memberId"),
                                            14: ("groupId", "memberId"), 15: ("groupId",),
                                            16: ("groupId", "regex")}
_INT_SIZES = {"int8": 1, "int16": 2, "int32": 4, "int64": 8}
_UUID = struct.Struct(">qq")


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(bytes(data)).decode("ascii")


def _read(reader: Reader, kind: _Kind, flexible: bool = True) -> JsonValue:
    """One field of type `kind` (see the schema notation above)."""
    if isinstance(kind, str):
        if kind in _INT_SIZES:
            return reader.int(_INT_SIZES[kind])
        if kind == "string":
            return reader.string(flexible)
        if kind == "string?":
            return reader.string(flexible, nullable=True)
        if kind == "bytes":
            return _b64(reader.bytes(flexible))
        if kind == "uuid":
            return topic_id_to_string(_UUID.pack(reader.int(8), reader.int(8)))
        raise AssertionError(f"no schema type {kind!r}")
    if isinstance(kind, tuple):
        element = kind[1]
        return reader.array(flexible, lambda: _read(reader, element, flexible))
    return _read_struct(reader, kind)


def _read_struct(reader: Reader, fields: _Struct, tagged: dict[int, tuple[str, _Struct]] | None = None) -> JsonObject:
    """A flexible struct: its fields, then its tagged-field section (known tags shown, others skipped)."""
    data: JsonObject = {}
    for name, kind in fields:
        data[name] = _read(reader, kind)
    for tag, payload in reader.tagged_fields().items():
        if tagged and tag in tagged:
            name, struct_fields = tagged[tag]
            data[name] = _tagged_struct(payload, struct_fields, f"{reader.what} tag {tag}")
    return data


def _tagged_struct(payload: bytes, fields: _Struct, what: str) -> JsonObject | None:
    """A nullable struct in a tagged field: Kafka's presence varint then the struct, or the bare struct."""
    reader = Reader(payload, what)
    try:
        if reader.uvarint() == 0:
            reader.end()
            return None
        value = _read_struct(reader, fields)
        reader.end()
        return value
    except CorruptRecordError:
        bare = Reader(payload, what)
        value = _read_struct(bare, fields)
        bare.end()
        return value


def _version(data: bytes, what: str) -> int:
    if len(data) < 2:
        raise CorruptRecordError(f"{what} has {len(data)} bytes, fewer than its 2-byte version", 0)
    return int.from_bytes(bytes(data[:2]), "big", signed=True)


# -- __consumer_offsets ----------------------------------------------------------------------------------

def offsets_record(key: bytes | None, value: bytes | None) -> tuple[JsonObject, JsonObject | str]:
    """(key, payload) of a `__consumer_offsets` record as kafka-dump-log --offsets-decoder shows it."""
    if key is None:
        raise CorruptRecordError("a __consumer_offsets record has no key")
    record_type = _version(key, "__consumer_offsets key")
    key_json: JsonObject = {"type": str(record_type), "data": _offsets_key(record_type, key)}
    if value is None:
        return key_json, TOMBSTONE
    version = _version(value, "__consumer_offsets value")
    if record_type in (0, 1):
        data = _offset_commit_value(value, version)
    elif record_type == 2:
        data = _group_metadata_value(value, version)
    else:
        if version != consumer_group_log.VALUE_VERSION:
            raise CorruptRecordError(f"record type {record_type} value version {version} is not 0")
        data = _schema_value(record_type, value)
    return key_json, {"version": str(version), "data": data}


def _offsets_key(record_type: int, key: bytes) -> JsonObject:
    if record_type in (0, 1, 2):
        decoded = group_log.decode_key(key)
        if isinstance(decoded, group_log.GroupKey):
            return {"group": decoded.group}
        assert decoded is not None  # decode_key answers None only for types above 2
        return {"group": decoded.group, "topic": decoded.topic, "partition": decoded.partition}
    if consumer_group_log.GROUP_EPOCH <= record_type <= consumer_group_log.CURRENT_ASSIGNMENT:
        consumer_key = consumer_group_log.decode_key(key)
        assert consumer_key is not None  # decode_key answers None only for types outside 3-8
        data: JsonObject = {"groupId": consumer_key.group}
        if consumer_key.member is not None:
            data["memberId"] = consumer_key.member
        return data
    names = _SCHEMA_KEYS.get(record_type)
    if names is None:
        raise UnknownRecordType(record_type)
    reader = Reader(key, f"record type {record_type} key")
    reader.int(2)
    data = {name: reader.string(False) for name in names}
    reader.end()
    return data


def _offset_commit_value(value: bytes, version: int) -> JsonObject:
    v = group_log.decode_offset_value(value)
    data: JsonObject = {"offset": v.offset}
    if version >= 3:
        data["leaderEpoch"] = v.leader_epoch
    data.update(metadata=v.metadata, commitTimestamp=v.commit_timestamp)
    if version == 1:
        data["expireTimestamp"] = v.expire_timestamp
    return data


def _group_metadata_value(value: bytes, version: int) -> JsonObject:
    g = group_log.decode_group_value(value)
    data: JsonObject = {"protocolType": g.protocol_type, "generation": g.generation, "protocol": g.protocol,
            "leader": g.leader}
    if version >= 2:
        data["currentStateTimestamp"] = g.current_state_timestamp
    consumer = g.protocol_type == CONSUMER_PROTOCOL
    members: list[JsonObject] = []
    for m in g.members:
        member: JsonObject = {"memberId": m.member_id}
        if version >= 3:
            member["groupInstanceId"] = m.group_instance_id
        member.update(clientId=m.client_id, clientHost=m.client_host)
        if version >= 1:
            member["rebalanceTimeout"] = m.rebalance_timeout_ms
        member.update(sessionTimeout=m.session_timeout_ms,
                      subscription=_blob(m.subscription, _subscription_json if consumer else None),
                      assignment=_blob(m.assignment, _assignment_json if consumer else None))
        members.append(member)
    data["members"] = members
    return data


def _blob(data: bytes, decode: Callable[[bytes], JsonObject] | None) -> JsonValue:
    """A member's subscription or assignment: decoded when it parses (consumer groups), else base64."""
    if decode is not None and len(data):
        try:
            return decode(data)
        except CorruptRecordError:
            pass
    return _b64(data)


def _partitions_json(partitions: TopicPartitions) -> list[JsonObject]:
    return [{"topic": topic, "partitions": list(ids)} for topic, ids in partitions]


def _subscription_json(data: bytes) -> JsonObject:
    s = decode_subscription(data)
    out: JsonObject = {"topics": list(s.topics), "userData": _b64(s.user_data)}
    if s.version >= 1:
        out["ownedPartitions"] = _partitions_json(s.owned_partitions)
    if s.version >= 2:
        out["generationId"] = s.generation_id
    if s.version >= 3:
        out["rackId"] = s.rack_id
    return out


def _assignment_json(data: bytes) -> JsonObject:
    a = decode_assignment(data)
    return {"assignedPartitions": _partitions_json(a.partitions), "userData": _b64(a.user_data)}


# -- __transaction_state ---------------------------------------------------------------------------------

def transaction_record(key: bytes | None, value: bytes | None) -> tuple[JsonObject, JsonObject | str]:
    """(key, payload) of a `__transaction_state` record as kafka-dump-log --transaction-log-decoder shows it."""
    if key is None:
        raise CorruptRecordError("a __transaction_state record has no key")
    record_type = _version(key, "TransactionLogKey")
    if record_type != txn_log.KEY_VERSION:
        raise UnknownRecordType(record_type)
    key_json: JsonObject = {"type": str(record_type), "data": {"transactionalId": txn_log.decode_key(key)}}
    if value is None:
        return key_json, TOMBSTONE
    version = _version(value, "TransactionLogValue")
    v = txn_log.decode_value(value)
    data: JsonObject = {"producerId": v.producer_id}
    if version >= 1:
        if v.previous_producer_id != -1:
            data["previousProducerId"] = v.previous_producer_id
        if v.next_producer_id != -1:
            data["nextProducerId"] = v.next_producer_id
    data.update(producerEpoch=v.producer_epoch, transactionTimeoutMs=v.timeout_ms,
                transactionStatus=int(v.state), transactionPartitions=_txn_partitions(v))
    data.update(transactionLastUpdateTimestampMs=v.last_update_ms, transactionStartTimestampMs=v.start_ms)
    if version >= 1 and v.client_transaction_version != 0:
        data["clientTransactionVersion"] = v.client_transaction_version
    return key_json, {"version": str(version), "data": data}


def _txn_partitions(v: txn_log.TxnLogValue) -> list[JsonObject] | None:
    if v.state == txn_log.TxnState.EMPTY and not v.partitions:
        return None  # written as a null array in state Empty
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(v.partitions):
        by_topic.setdefault(topic, []).append(partition)
    return [{"topic": topic, "partitionIds": ids} for topic, ids in by_topic.items()]


# -- share groups: Kafka 4.1+ layouts first, then the 4.0 preview's in `_VALUES` -------------------------

_INIT_TOPIC: _Struct = [("topicId", "uuid"), ("topicName", "string"), ("partitions", ("[]", "int32")),
                        ("createTimestamp", "int64")]
# Kafka 4.1 added ShareGroupMetadata's MetadataHash and reshaped ShareGroupStatePartitionMetadata (both still
# value version 0: share groups were a preview before), so a value is tried in the newer layout first.
_SHARE_VALUES: dict[int, _Struct] = {
    11: [("epoch", "int32"), ("metadataHash", "int64")],
    15: [("initializingTopics", ("[]", _INIT_TOPIC)), ("initializedTopics", ("[]", _INIT_TOPIC)),
         ("deletingTopics", ("[]", [("topicId", "uuid"), ("topicName", "string")]))],
}


def _schema_value(record_type: int, value: bytes) -> JsonObject:
    """A version-0 value of record types 3-16 read from its schema (a share-group one in Kafka 4.2's layout,
    else in Kafka 4.0's)."""
    layouts = [_VALUES[record_type]]
    if record_type in _SHARE_VALUES:
        layouts.insert(0, _SHARE_VALUES[record_type])
    for i, fields in enumerate(layouts):
        reader = Reader(value, f"record type {record_type} value")
        reader.int(2)
        try:
            data = _read_struct(reader, fields, _TAGGED.get(record_type))
            reader.end()
            return data
        except CorruptRecordError:
            if i == len(layouts) - 1:
                raise
    raise AssertionError("unreachable: the last layout returns or raises")


# -- __share_group_state ---------------------------------------------------------------------------------

def share_group_state_record(key: bytes | None, value: bytes | None) -> tuple[JsonObject, JsonObject | str]:
    """(key, payload) of a `__share_group_state` record as kafka-dump-log --share-group-state-decoder shows it."""
    if key is None:
        raise CorruptRecordError("a __share_group_state record has no key")
    record_type = state_records.record_type(key)
    if record_type not in (state_records.SNAPSHOT, state_records.UPDATE):
        raise UnknownRecordType(record_type)
    _, (group_id, topic_id, partition) = state_records.decode_key(key)
    key_json: JsonObject = {"type": str(record_type), "data": {"groupId": group_id,
                                                               "topicId": topic_id_to_string(topic_id),
                                                               "partition": partition}}
    if value is None:
        return key_json, TOMBSTONE
    version = _version(value, "__share_group_state value")
    data: JsonObject
    if record_type == state_records.SNAPSHOT:
        snapshot = state_records.decode_snapshot(value)
        s = snapshot.state
        data = {"snapshotEpoch": snapshot.snapshot_epoch, "stateEpoch": s.state_epoch,
                "leaderEpoch": s.leader_epoch, "startOffset": s.start_offset}
        count, batches = snapshot.delivery_complete_count, s.batches
        tail: JsonObject = {"createTimestamp": snapshot.create_timestamp,
                            "writeTimestamp": snapshot.write_timestamp}
    else:
        update = state_records.decode_update(value)
        data = {"snapshotEpoch": update.snapshot_epoch, "leaderEpoch": update.leader_epoch,
                "startOffset": update.start_offset}
        count, batches, tail = update.delivery_complete_count, update.batches, {}
    # A tagged field shows only when it differs from its default, in its place in the schema.
    if count != state_records.UNKNOWN_COUNT:
        data["deliveryCompleteCount"] = count
    data.update(tail)
    data["stateBatches"] = [{"firstOffset": b.first_offset, "lastOffset": b.last_offset,
                             "deliveryState": int(b.delivery_state), "deliveryCount": b.delivery_count}
                            for b in batches]
    return key_json, {"version": str(version), "data": data}
