"""KRaft's `__cluster_metadata-0`: the record codec and the replay of a directory.

The expected bytes of the hand-made vectors are put together here with `struct` from
Kafka's message schemas (flexible encoding: compact lengths + 1, a tagged-field
section closing every struct), not read back from the code under test. Directories
are built with logstore's own batch encoder; the scenarios follow Kafka's
MetadataLoader (transactions, snapshots, RemoveTopicRecord dropping configs).
"""
from __future__ import annotations

import hashlib
import os
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import logstore.formats.kafka as K
from logstore.checkpoints import read_partition_metadata, topic_id_to_string
from logstore.cluster_metadata import (
    ClusterMetadata,
    MetadataRecord,
    decode_control_record,
    decode_metadata_record,
    encode_control_record,
    encode_metadata_record,
    read_cluster_metadata,
)
from logstore.errors import CorruptRecordError
from logstore.metadata_schemas import CONTROL_SCHEMAS, METADATA_SCHEMAS, FieldSpec

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                          HealthCheck.data_too_large])
REAL_KAFKA = Path(__file__).resolve().parents[1] / "fixtures" / "real-kafka"
LEADER_CHANGE, SNAPSHOT_HEADER, SNAPSHOT_FOOTER = 2, 3, 4


def uid(n: int) -> bytes:
    return bytes(15) + bytes([n])


def compact(data: bytes) -> bytes:
    """A compact string or byte string (length + 1 < 128 here)."""
    return bytes([len(data) + 1]) + data


def int32s(*values: int) -> bytes:
    """A compact int32 array."""
    return bytes([len(values) + 1]) + struct.pack(f">{len(values)}i", *values)


# -- known answers --------------------------------------------------------------------------------

VECTORS = [
    ("TOPIC_RECORD", 0, {"name": "orders", "topicId": topic_id_to_string(uid(7))},
     b"\x01\x02\x00" + compact(b"orders") + uid(7) + b"\x00"),
    ("PARTITION_RECORD", 0,
     {"partitionId": 2, "topicId": topic_id_to_string(uid(7)), "replicas": [1, 2], "isr": [1],
      "removingReplicas": [], "addingReplicas": [], "leader": 1, "leaderEpoch": 4, "partitionEpoch": 9,
      "leaderRecoveryState": 1},
     b"\x01\x03\x00" + struct.pack(">i", 2) + uid(7) + int32s(1, 2) + int32s(1) + int32s() + int32s()
     + struct.pack(">iii", 1, 4, 9) + b"\x01" + b"\x00\x01\x01"),
    ("PARTITION_RECORD", 1,
     {"partitionId": 0, "topicId": topic_id_to_string(uid(7)), "replicas": [1], "isr": [1],
      "removingReplicas": [], "addingReplicas": [], "leader": 1, "leaderEpoch": 0, "partitionEpoch": 0,
      "directories": [topic_id_to_string(uid(9))]},
     b"\x01\x03\x01" + struct.pack(">i", 0) + uid(7) + int32s(1) + int32s(1) + int32s() + int32s()
     + struct.pack(">iii", 1, 0, 0) + b"\x02" + uid(9) + b"\x00"),
    ("CONFIG_RECORD", 0, {"resourceType": 2, "resourceName": "orders", "name": "retention.ms", "value": None},
     b"\x01\x04\x00\x02" + compact(b"orders") + compact(b"retention.ms") + b"\x00" + b"\x00"),
    ("PARTITION_CHANGE_RECORD", 0,
     {"partitionId": 1, "topicId": topic_id_to_string(uid(7)), "isr": [1, 2], "leader": 2},
     b"\x01\x05\x00" + struct.pack(">i", 1) + uid(7) + b"\x02" + b"\x00\x09" + int32s(1, 2)
     + b"\x01\x04" + struct.pack(">i", 2)),
    ("PRODUCER_IDS_RECORD", 0, {"brokerId": 1, "brokerEpoch": 5, "nextProducerId": 7000},
     b"\x01\x0f\x00" + struct.pack(">iqq", 1, 5, 7000) + b"\x00"),
    ("FEATURE_LEVEL_RECORD", 0, {"name": "metadata.version", "featureLevel": 21},
     b"\x01\x0c\x00" + compact(b"metadata.version") + struct.pack(">h", 21) + b"\x00"),
    ("REGISTER_BROKER_RECORD", 1,
     {"brokerId": 1, "incarnationId": topic_id_to_string(uid(3)), "brokerEpoch": 12,
      "endPoints": [{"name": "PLAINTEXT", "host": "localhost", "port": 9092, "securityProtocol": 0}],
      "features": [{"name": "metadata.version", "minSupportedVersion": 1, "maxSupportedVersion": 21}],
      "rack": None, "fenced": True, "inControlledShutdown": False},
     b"\x01\x00\x01" + struct.pack(">i", 1) + uid(3) + struct.pack(">q", 12)
     + b"\x02" + compact(b"PLAINTEXT") + compact(b"localhost") + struct.pack(">Hh", 9092, 0) + b"\x00"
     + b"\x02" + compact(b"metadata.version") + struct.pack(">hh", 1, 21) + b"\x00"
     + b"\x00" + b"\x01" + b"\x00" + b"\x00"),
    ("CLIENT_QUOTA_RECORD", 0,
     {"entity": [{"entityType": "user", "entityName": None}], "key": "producer_byte_rate", "value": 1024.0,
      "remove": False},
     b"\x01\x0e\x00" + b"\x02" + compact(b"user") + b"\x00" + b"\x00" + compact(b"producer_byte_rate")
     + struct.pack(">d", 1024.0) + b"\x00" + b"\x00"),
    ("END_TRANSACTION_RECORD", 0, {}, b"\x01\x18\x00\x00"),
    ("ABORT_TRANSACTION_RECORD", 0, {"reason": "failover"},
     b"\x01\x19\x00" + b"\x01" + b"\x00\x09" + compact(b"failover")),
]


@pytest.mark.parametrize("type_name, version, data, raw", VECTORS, ids=[f"{v[0]}-v{v[1]}" for v in VECTORS])
def test_known_records_decode_and_encode_byte_for_byte(type_name, version, data, raw):
    record = decode_metadata_record(raw)
    assert record == MetadataRecord(METADATA_SCHEMAS[raw[1]].id, type_name, version, data)
    assert encode_metadata_record(type_name, version, data) == raw


CONTROL_VECTORS = [
    (LEADER_CHANGE, {"version": 0, "leaderId": 1, "voters": [{"voterId": 1}], "grantingVoters": [{"voterId": 1}]},
     struct.pack(">hi", 0, 1) + b"\x02" + struct.pack(">i", 1) + b"\x00" + b"\x02" + struct.pack(">i", 1)
     + b"\x00" + b"\x00"),
    (SNAPSHOT_HEADER, {"version": 0, "lastContainedLogTimestamp": 1_700_000_000_000},
     struct.pack(">hq", 0, 1_700_000_000_000) + b"\x00"),
    (SNAPSHOT_FOOTER, {"version": 0}, b"\x00\x00\x00"),
    (5, {"version": 0, "kRaftVersion": 1}, struct.pack(">hh", 0, 1) + b"\x00"),
    (6, {"version": 0, "voters": [{"voterId": 1, "voterDirectoryId": topic_id_to_string(uid(4)),
                                   "endpoints": [{"name": "CONTROLLER", "host": "h", "port": 9093}],
                                   "kRaftVersionFeature": {"minSupportedVersion": 0, "maxSupportedVersion": 1}}]},
     struct.pack(">h", 0) + b"\x02" + struct.pack(">i", 1) + uid(4) + b"\x02" + compact(b"CONTROLLER")
     + compact(b"h") + struct.pack(">H", 9093) + b"\x00" + struct.pack(">hh", 0, 1) + b"\x00" + b"\x00" + b"\x00"),
]


@pytest.mark.parametrize("control_type, data, raw", CONTROL_VECTORS, ids=[str(v[0]) for v in CONTROL_VECTORS])
def test_known_control_records_decode_and_encode_byte_for_byte(control_type, data, raw):
    assert decode_control_record(control_type, raw) == data
    assert encode_control_record(control_type, data) == raw


def test_type_names_are_kafkas_metadata_record_type_names():
    names = {s.id: s.type_name for s in METADATA_SCHEMAS.values()}
    assert names[21] == "ZK_MIGRATION_STATE_RECORD"
    assert names[17] == "BROKER_REGISTRATION_CHANGE_RECORD"
    assert names[28] == "CLEAR_ELR_RECORD"
    assert sorted(names) == [0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12, 14, 15, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26,
                             27, 28]


def test_an_unknown_type_or_version_decodes_to_empty_data_with_a_note():
    newer_type = decode_metadata_record(b"\x01\x63\x00\x05garbage")
    assert (newer_type.api_key, newer_type.type_name, newer_type.data) == (99, "UNKNOWN", {})
    assert "99" in newer_type.note
    newer_version = decode_metadata_record(b"\x01\x02\x07anything")
    assert (newer_version.type_name, newer_version.version, newer_version.data) == ("TOPIC_RECORD", 7, {})
    assert "version 7" in newer_version.note
    assert decode_control_record(0, b"\x00\x00\x00\x00\x00\x05") == {}  # a transaction marker, not KRaft's


# -- round trips over the whole table ----------------------------------------------------------------

_PLAIN = {"int8": st.integers(-2**7, 2**7 - 1), "int16": st.integers(-2**15, 2**15 - 1),
          "int32": st.integers(-2**31, 2**31 - 1), "int64": st.integers(-2**63, 2**63 - 1),
          "uint16": st.integers(0, 2**16 - 1), "bool": st.booleans(),
          "float64": st.floats(allow_nan=False), "uuid": st.binary(min_size=16, max_size=16).map(topic_id_to_string),
          "string": st.text(max_size=12) | st.sampled_from(["", "ключ", "x" * 200]),
          "bytes": st.binary(max_size=12) | st.just(b"\x00" * 300)}


def _value(spec: FieldSpec, version: int, nullable: bool):
    element = spec.element
    if element is not None:
        inner = FieldSpec(spec.name, element, False, spec.first, spec.last, None, None, spec.fields)
        base = st.lists(_value(inner, version, False), max_size=4)
    elif spec.type in _PLAIN:
        base = _PLAIN[spec.type]
    else:
        base = _struct(spec.fields, version)
    return st.none() | base if nullable else base


def _struct(fields: tuple[FieldSpec, ...], version: int):
    present = [f for f in fields if f.in_version(version)]
    required = {f.json_name: _value(f, version, f.nullable) for f in present if f.tag is None}
    # A tagged field equal to its default is not written, so Kafka's JSON leaves it out.
    optional = {f.json_name: _value(f, version, f.nullable).filter(lambda v, d=f.default: v != d)
                for f in present if f.tag is not None}
    return st.fixed_dictionaries(required, optional=optional)


ALL_VERSIONS = [(s.type_name, v) for s in METADATA_SCHEMAS.values() for v in range(s.first, s.last + 1)]


@pytest.mark.parametrize("type_name, version", ALL_VERSIONS, ids=[f"{t}-v{v}" for t, v in ALL_VERSIONS])
@SETTINGS
@given(data=st.data())
def test_every_record_type_and_version_round_trips(type_name, version, data):
    schema = next(s for s in METADATA_SCHEMAS.values() if s.type_name == type_name)
    fields = data.draw(_struct(schema.fields, version))
    raw = encode_metadata_record(type_name, version, fields)
    assert decode_metadata_record(raw) == MetadataRecord(schema.id, type_name, version, fields)
    assert encode_metadata_record(schema.name, version, decode_metadata_record(raw).data) == raw


@pytest.mark.parametrize("control_type", sorted(CONTROL_SCHEMAS))
@SETTINGS
@given(data=st.data())
def test_every_control_record_round_trips(control_type, data):
    fields = data.draw(_struct(CONTROL_SCHEMAS[control_type].fields, 0))
    assert decode_control_record(control_type, encode_control_record(control_type, fields)) == fields


def test_encoding_fills_left_out_fields_with_kafkas_defaults():
    raw = encode_metadata_record("PartitionRecord", 0, {"topicId": topic_id_to_string(uid(1))})
    data = decode_metadata_record(raw).data
    assert (data["partitionId"], data["leader"], data["leaderEpoch"], data["replicas"]) == (-1, -1, -1, [])
    with pytest.raises(ValueError, match="nope"):
        encode_metadata_record("TopicRecord", 0, {"nope": 1})
    with pytest.raises(ValueError):
        encode_metadata_record("TopicRecord", 1, {})


# -- hostile input: CorruptRecordError and nothing else ----------------------------------------------

def _decodes_or_refuses(raw: bytes) -> None:
    try:
        record = decode_metadata_record(raw)
    except CorruptRecordError:
        return
    assert isinstance(record, MetadataRecord)


@pytest.mark.parametrize("type_name, version, data, raw", VECTORS, ids=[f"{v[0]}-v{v[1]}" for v in VECTORS])
def test_every_truncation_of_a_record_is_corrupt(type_name, version, data, raw):
    for end in range(len(raw)):
        with pytest.raises(CorruptRecordError):
            decode_metadata_record(raw[:end])
    with pytest.raises(CorruptRecordError, match="left after"):
        decode_metadata_record(raw + b"\x00")


@pytest.mark.parametrize("raw, why", [
    (b"\x00\x02\x00", "frame version 0"),
    (b"\x02\x02\x00", "frame version 2"),
    (b"\x01\x80\x80\x02\x00", "above 32767"),
    (b"\x01\x02\xff\xff\xff\xff\xff\x01", "longer than 5 bytes"),
    (b"\x01\x02\x00\xff\xff\xff\xff\x07" + b"x" * 30, "runs past the end"),          # a 2 GiB name
    (b"\x01\x03\x00" + bytes(20) + b"\xff\xff\xff\xff\x0f", "runs past the end"),      # 4 billion replicas
    (b"\x01\x02\x00\x00" + uid(1) + b"\x00", "null string"),
    (b"\x01\x02\x00\x03\xff\xfe" + uid(1) + b"\x00", "not UTF-8"),
    (b"\x01\x02\x00\x01" + uid(1) + b"\x01\x05\xff\xff\xff\xff\x07", "runs past the end"),  # a huge tagged field
    (b"\x01\x05\x00" + bytes(20) + b"\x02\x01\x02\x00\x00\x05\x01\x00", "holds 2 bytes"),  # leader in 2 bytes
])
def test_hostile_records_are_refused_as_corrupt(raw, why):
    with pytest.raises(CorruptRecordError, match=why):
        decode_metadata_record(raw)


@SETTINGS
@given(st.binary(max_size=64))
def test_random_bytes_decode_or_are_refused_as_corrupt(raw):
    _decodes_or_refuses(raw)
    for control_type in range(7):
        try:
            decode_control_record(control_type, raw)
        except CorruptRecordError:
            pass


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([v[3] for v in VECTORS]), st.integers(0, 200), st.integers(0, 255),
       st.sampled_from(["flip", "insert", "delete"]))
def test_mutated_records_decode_or_are_refused_as_corrupt(raw, at, byte, how):
    at %= len(raw)
    if how == "flip":
        raw = raw[:at] + bytes([byte]) + raw[at + 1:]
    elif how == "insert":
        raw = raw[:at] + bytes([byte]) + raw[at:]
    else:
        raw = raw[:at] + raw[at + 1:]
    _decodes_or_refuses(raw)


def test_a_missing_value_is_corrupt():
    with pytest.raises(CorruptRecordError):
        decode_metadata_record(None)
    with pytest.raises(CorruptRecordError):
        decode_control_record(SNAPSHOT_HEADER, b"\x00")


# -- building a __cluster_metadata-0 directory ------------------------------------------------------

def meta(type_name: str, version: int = 0, **data) -> bytes:
    return encode_metadata_record(type_name, version, data)


def topic(name: str, n: int) -> bytes:
    return meta("TopicRecord", name=name, topicId=topic_id_to_string(uid(n)))


def partition(n: int, number: int) -> bytes:
    return meta("PartitionRecord", 1, partitionId=number, topicId=topic_id_to_string(uid(n)), replicas=[1],
                isr=[1], leader=1, directories=[topic_id_to_string(uid(200))])


def config(resource: str, name: str, value: str | None, resource_type: int = 2) -> bytes:
    return meta("ConfigRecord", resourceType=resource_type, resourceName=resource, name=name, value=value)


def begin() -> bytes:
    return meta("BeginTransactionRecord", name="create topics")


def end() -> bytes:
    return meta("EndTransactionRecord")


def abort() -> bytes:
    return meta("AbortTransactionRecord", reason="controller failover")


class MetadataLog:
    """Writes batches at increasing offsets, as a controller appends them."""

    def __init__(self, directory: Path):
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.next_offset = 0
        self.segment = self.directory / f"{0:020d}.log"
        self.segment.write_bytes(b"")

    def batch(self, *values: bytes) -> int:
        """Append one batch of metadata records; returns its last offset."""
        self._write(K.encode_batch([None] * len(values), list(values), base_offset=self.next_offset,
                                   timestamps=1_700_000_000_000, partition_leader_epoch=3))
        self.next_offset += len(values)
        return self.next_offset - 1

    def control(self, control_type: int, data: dict) -> int:
        self._write(control_batch(control_type, data, self.next_offset))
        self.next_offset += 1
        return self.next_offset - 1

    def roll(self) -> None:
        self.segment = self.directory / f"{self.next_offset:020d}.log"
        self.segment.write_bytes(b"")

    def _write(self, data: bytes) -> None:
        with open(self.segment, "ab") as f:
            f.write(data)


def control_batch(control_type: int, data: dict, offset: int) -> bytes:
    return K.encode_batch([struct.pack(">hh", 0, control_type)], [encode_control_record(control_type, data)],
                          base_offset=offset, control=True, timestamps=1_700_000_000_000)


def write_snapshot(directory: Path, end_offset: int, epoch: int, *batches: list[bytes], footer: bool = True) -> Path:
    """A snapshot file as Kafka's RecordsSnapshotWriter lays it out: header, batches, footer, offsets from 0."""
    data = bytearray(control_batch(SNAPSHOT_HEADER, {"version": 0, "lastContainedLogTimestamp": 1}, 0))
    offset = 1
    for values in batches:
        data += K.encode_batch([None] * len(values), values, base_offset=offset, timestamps=1)
        offset += len(values)
    if footer:
        data += control_batch(SNAPSHOT_FOOTER, {"version": 0}, offset)
    path = directory / f"{end_offset:020d}-{epoch:010d}.checkpoint"
    path.write_bytes(bytes(data))
    return path


def corrupt_crc(path: Path, batch_position: int) -> None:
    data = bytearray(path.read_bytes())
    data[batch_position + 17] ^= 0xFF
    path.write_bytes(bytes(data))


def fingerprint(directory: Path) -> dict:
    return {p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(directory.iterdir())}


def test_a_snapshot_then_the_log_after_it_replays_as_kafkas_metadata_loader_would(tmp_path):
    directory = tmp_path / "__cluster_metadata-0"
    log = MetadataLog(directory)
    log.control(LEADER_CHANGE, {"version": 0, "leaderId": 1, "voters": [{"voterId": 1}],
                                "grantingVoters": [{"voterId": 1}]})                        # 0
    log.batch(meta("FeatureLevelRecord", name="metadata.version", featureLevel=20))        # 1
    log.batch(topic("orders", 1), partition(1, 0), config("orders", "retention.ms", "1"))  # 2-4
    write_snapshot(directory, 6, 3, [
        meta("FeatureLevelRecord", name="metadata.version", featureLevel=21),
        meta("FeatureLevelRecord", name="group.version", featureLevel=1),
        meta("FeatureLevelRecord", name="transaction.version", featureLevel=2),
    ], [
        topic("orders", 1), partition(1, 0), partition(1, 1),
        config("orders", "cleanup.policy", "compact"), config("orders", "retention.ms", "1000"),
        topic("old", 2), partition(2, 0), config("old", "segment.bytes", "1048576"),
    ], [
        config("", "log.retention.ms", "5000", resource_type=4),
        config("1", "log.flush.interval.messages", "1", resource_type=4),   # one broker's: not a default
        meta("ProducerIdsRecord", brokerId=1, brokerEpoch=5, nextProducerId=1000),
    ])
    # This batch begins before the snapshot's end (6): offset 5 is in the snapshot, 6 and 7 are replayed.
    log.batch(topic("ghost", 9), partition(1, 2), config("orders", "retention.ms", None))  # 5-7
    log.batch(config("orders", "segment.bytes", "1048576"))                                 # 8
    log.batch(meta("RemoveTopicRecord", topicId=topic_id_to_string(uid(2))))                # 9
    log.batch(meta("ProducerIdsRecord", brokerId=1, brokerEpoch=5, nextProducerId=2000))     # 10
    log.batch(begin(), topic("aborted", 3), partition(3, 0))                                # 11-13
    log.batch(config("aborted", "cleanup.policy", "compact"), abort())                       # 14-15
    log.roll()
    log.batch(begin(), topic("committed", 4))                                               # 16-17
    log.batch(partition(4, 0), partition(4, 1), config("committed", "max.message.bytes", "2000000"), end())  # 18-21
    log.batch(meta("FeatureLevelRecord", name="group.version", featureLevel=0),
              meta("NoOpRecord"), b"\x01\x63\x00\x00")                                     # 22-24: a type 99
    log.control(LEADER_CHANGE, {"version": 0, "leaderId": 1, "voters": [], "grantingVoters": []})  # 25
    corrupt_at = log.segment.stat().st_size
    log.batch(topic("after-the-corruption", 5), partition(5, 0))                            # 26-27: cut
    log.batch(topic("after-that", 6))                                                        # 28
    corrupt_crc(log.segment, corrupt_at)
    before = fingerprint(directory)

    found = read_cluster_metadata(directory)

    assert fingerprint(directory) == before, "reading must not touch the directory"
    assert found.snapshot == "00000000000000000006-0000000003.checkpoint"
    assert found.end_offset == 26
    assert set(found.topics) == {"orders", "committed"}
    orders, committed = found.topics["orders"], found.topics["committed"]
    assert (orders.topic_id, orders.partitions) == (uid(1), 3)
    assert orders.configs == {"cleanup.policy": "compact", "segment.bytes": "1048576"}
    assert (committed.topic_id, committed.partitions, committed.configs) == (uid(4), 2,
                                                                           {"max.message.bytes": "2000000"})
    assert found.broker_configs == {"log.retention.ms": "5000"}
    assert found.next_producer_id == 2000
    assert found.features == {"metadata.version": 21, "transaction.version": 2}


def test_without_a_snapshot_the_log_replays_from_offset_zero(tmp_path):
    directory = tmp_path / "__cluster_metadata-0"
    log = MetadataLog(directory)
    log.batch(meta("FeatureLevelRecord", name="metadata.version", featureLevel=7))          # 0
    log.batch(config("t", "cleanup.policy", "compact"), topic("t", 1), partition(1, 0))    # 1-3
    log.batch(meta("RemoveTopicRecord", topicId=topic_id_to_string(uid(1))))                # 4
    log.batch(topic("t", 2), partition(2, 0), partition(2, 1))                               # 5-7: made again
    found = read_cluster_metadata(directory)
    assert found == ClusterMetadata({"t": found.topics["t"]}, {}, None, {"metadata.version": 7}, 8, None)
    assert (found.topics["t"].topic_id, found.topics["t"].partitions, found.topics["t"].configs) == (uid(2), 2, {})


def test_a_transaction_still_open_at_the_end_of_the_log_does_not_count(tmp_path):
    directory = tmp_path / "__cluster_metadata-0"
    log = MetadataLog(directory)
    log.batch(topic("kept", 1), partition(1, 0))                                             # 0-1
    log.batch(begin(), topic("pending", 2), partition(2, 0))                                 # 2-4
    found = read_cluster_metadata(directory)
    assert set(found.topics) == {"kept"}
    assert found.end_offset == 5


def test_a_half_written_batch_at_the_tail_ends_the_log(tmp_path):
    directory = tmp_path / "__cluster_metadata-0"
    log = MetadataLog(directory)
    log.batch(topic("a", 1), partition(1, 0))                                                # 0-1
    whole = log.segment.stat().st_size
    log.batch(topic("b", 2), partition(2, 0))                                                # 2-3: torn
    with open(log.segment, "r+b") as f:
        f.truncate(whole + 30)
    found = read_cluster_metadata(directory)
    assert (set(found.topics), found.end_offset) == ({"a"}, 2)
    assert log.segment.stat().st_size == whole + 30


def test_a_corrupt_newest_snapshot_is_passed_over_for_the_one_before(tmp_path):
    directory = tmp_path / "__cluster_metadata-0"
    log = MetadataLog(directory)
    for n in range(6):
        log.batch(topic(f"t{n}", n + 1))                                                     # 0-5
    write_snapshot(directory, 2, 1, [topic("t0", 1), topic("t1", 2)])
    newest = write_snapshot(directory, 4, 1, [topic("t0", 1), topic("t1", 2), topic("t2", 3), topic("t3", 4)])
    corrupt_crc(newest, len(control_batch(SNAPSHOT_HEADER, {"version": 0, "lastContainedLogTimestamp": 1}, 0)))
    write_snapshot(directory, 5, 1, [topic("t0", 1)], footer=False)                          # never finished
    found = read_cluster_metadata(directory)
    assert found.snapshot == "00000000000000000002-0000000001.checkpoint"
    assert set(found.topics) == {f"t{n}" for n in range(6)}
    assert found.end_offset == 6


def test_a_snapshot_alone_is_the_metadata(tmp_path):
    directory = tmp_path / "__cluster_metadata-0"
    directory.mkdir()
    write_snapshot(directory, 40, 2, [topic("t", 1), partition(1, 0)])
    found = read_cluster_metadata(directory)
    assert (set(found.topics), found.end_offset) == ({"t"}, 40)
    assert found.snapshot == "00000000000000000040-0000000002.checkpoint"


def test_a_log_that_starts_after_every_snapshot_ends_is_not_replayed(tmp_path, caplog):
    directory = tmp_path / "__cluster_metadata-0"
    log = MetadataLog(directory)
    log.next_offset = 10
    log.roll()
    log.batch(topic("t", 1))                                                                 # 10
    assert read_cluster_metadata(directory) is None
    assert "nothing holds the records from 0" in caplog.text
    write_snapshot(directory, 8, 1, [topic("s", 2)])
    found = read_cluster_metadata(directory)
    assert (set(found.topics), found.end_offset) == ({"s"}, 8)
    assert "nothing holds the records from 8" in caplog.text
    write_snapshot(directory, 10, 1, [topic("s", 2)])
    assert set(read_cluster_metadata(directory).topics) == {"s", "t"}


def test_a_directory_without_metadata_reads_as_none(tmp_path):
    assert read_cluster_metadata(tmp_path / "missing") is None
    directory = tmp_path / "__cluster_metadata-0"
    directory.mkdir()
    (directory / "quorum-state").write_text('{"leaderId":1,"leaderEpoch":3,"votedId":-1}')
    assert read_cluster_metadata(directory) is None
    MetadataLog(directory)  # an empty segment
    assert read_cluster_metadata(directory) is None


def test_a_malformed_record_in_a_batch_whose_crc_holds_is_corrupt(tmp_path):
    directory = tmp_path / "__cluster_metadata-0"
    log = MetadataLog(directory)
    log.batch(topic("t", 1))                                                                 # 0
    log.batch(topic("u", 2)[:-5])                                                            # 1: cut short
    with pytest.raises(CorruptRecordError, match="offset 1"):
        read_cluster_metadata(directory)


def test_record_types_and_versions_from_a_newer_kafka_are_read_by_their_known_fields(tmp_path):
    directory = tmp_path / "__cluster_metadata-0"
    log = MetadataLog(directory)
    # TopicRecord v1 as a future Kafka might write it: one more field after the known ones.
    newer_topic = b"\x01\x02\x01" + compact(b"t") + uid(1) + struct.pack(">i", 42) + b"\x00"
    log.batch(newer_topic, b"\x01\x63\x00\x00", partition(1, 0))                              # 0-2
    found = read_cluster_metadata(directory)
    assert (found.topics["t"].topic_id, found.topics["t"].partitions) == (uid(1), 1)


# -- logs Kafka wrote --------------------------------------------------------------------------------

REAL_DIRS = sorted(REAL_KAFKA.glob("*/__cluster_metadata-0")) if REAL_KAFKA.is_dir() else []


def _records_of(path: Path):
    data = path.read_bytes()
    for entry in K.iter_entries(data):
        for record in K.decode_entry(data, entry):
            yield entry, record


@pytest.mark.parametrize("directory", REAL_DIRS, ids=[p.parent.name for p in REAL_DIRS])
def test_every_record_kafka_wrote_decodes_to_a_known_type(directory):
    files = sorted(directory.glob("*.log")) + sorted(directory.glob("*.checkpoint"))
    seen = set()
    for path in files:
        for entry, record in _records_of(path):
            if entry.is_control:
                control = K.read_control_record(record)
                assert control.type in CONTROL_SCHEMAS, f"{path.name}: control type {control.type}"
                decode_control_record(control.type, record.value)
                seen.add(control.type_name)
            else:
                decoded = decode_metadata_record(record.value)
                assert decoded.note is None, f"{path.name} offset {record.offset}: {decoded.note}"
                seen.add(decoded.type_name)
    assert "TOPIC_RECORD" in seen or "FEATURE_LEVEL_RECORD" in seen


def _brokers(directory: Path) -> set[int]:
    return {decode_metadata_record(record.value).data["brokerId"]
            for path in sorted(directory.glob("*.log")) + sorted(directory.glob("*.checkpoint"))
            for entry, record in _records_of(path)
            if not entry.is_control and decode_metadata_record(record.value).type_name == "REGISTER_BROKER_RECORD"}


@pytest.mark.parametrize("directory", REAL_DIRS, ids=[p.parent.name for p in REAL_DIRS])
def test_kafkas_metadata_names_the_topic_directories_beside_it(directory):
    found = read_cluster_metadata(directory)
    on_disk: dict[str, list[Path]] = {}
    for path in directory.parent.iterdir():
        name, _, number = path.name.rpartition("-")
        if path.is_dir() and name and number.isdigit() and name != "__cluster_metadata":
            on_disk.setdefault(name, []).append(path)
    assert set(on_disk) <= set(found.topics)
    for name, paths in on_disk.items():
        topic = found.topics[name]
        assert all(int(p.name.rpartition("-")[2]) < topic.partitions for p in paths), name
        for path in paths:
            if (path / "partition.metadata").exists():
                assert read_partition_metadata(path / "partition.metadata") == topic.topic_id, path.name
    if len(_brokers(directory)) == 1:  # one node holds every partition of every topic
        assert set(found.topics) == set(on_disk)
        assert {n: t.partitions for n, t in found.topics.items()} == {n: len(p) for n, p in on_disk.items()}


def test_reading_leaves_no_file_open(tmp_path):
    directory = tmp_path / "__cluster_metadata-0"
    log = MetadataLog(directory)
    log.batch(topic("t", 1))
    write_snapshot(directory, 1, 1, [topic("t", 1)])
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        read_cluster_metadata(directory)
    assert len(os.listdir("/proc/self/fd")) == before
