"""Share-group records in `__consumer_offsets`, byte for byte per Kafka 4.2's schemas (record types 10-15),
what a change writes and in which order, and loading them back (Kafka 4.0's layouts included)."""
from __future__ import annotations

from logstore.broker.coordinator.share_group import ShareGroup, ShareMember
from logstore.broker.coordinator.share_group_log import (
    CURRENT_ASSIGNMENT,
    GROUP_EPOCH,
    MEMBER_METADATA,
    STATE_PARTITION_METADATA,
    TARGET_EPOCH,
    TARGET_MEMBER,
    ShareGroupLoader,
    ShareKey,
    decode_key,
    encode_key,
    records_between,
)

TOPIC_ID = bytes(range(16))
IDS = {"t": TOPIC_ID}.get
NAMES = {TOPIC_ID: "t"}.get


def _group() -> ShareGroup:
    member = ShareMember("m", None, "c", "/h", frozenset({"t"}), member_epoch=5, previous_member_epoch=4,
                         assigned=frozenset({("t", 1)}))
    return ShareGroup("g", group_epoch=5, assignment_epoch=5, members={"m": member}, target={"m": member.assigned},
                      metadata_hash=0x0102030405060708, initialized=frozenset({("t", 1)}))


def test_keys_are_kafkas():
    assert encode_key(ShareKey(GROUP_EPOCH, "g")) == b"\x00\x0b" + b"\x00\x01g"
    member_key = encode_key(ShareKey(CURRENT_ASSIGNMENT, "g", "m"))
    assert member_key == b"\x00\x0e\x00\x01g\x00\x01m"
    assert decode_key(member_key) == ShareKey(14, "g", "m")
    assert decode_key(encode_key(ShareKey(STATE_PARTITION_METADATA, "g"))) == ShareKey(15, "g")
    assert decode_key(b"\x00\x08\x00\x01g\x00\x01m") is None, "type 8 is a consumer group's"
    assert decode_key(b"\x00\x10\x00\x01g\x00\x01r") is None, "type 16 is a consumer group's regex"


def test_values_are_kafkas():
    records = dict(records_between(None, _group(), IDS, now=1_000))
    key = encode_key
    assert records[key(ShareKey(MEMBER_METADATA, "g", "m"))] == (
        b"\x00\x00" + b"\x00" + b"\x02c" + b"\x03/h" + b"\x02\x02t" + b"\x00")   # rack null, ["t"], no tags
    assert records[key(ShareKey(GROUP_EPOCH, "g"))] == (
        b"\x00\x00" + b"\x00\x00\x00\x05" + bytes(range(1, 9)) + b"\x00")         # Epoch, MetadataHash
    assert records[key(ShareKey(TARGET_EPOCH, "g"))] == b"\x00\x00" + b"\x00\x00\x00\x05" + b"\x00"
    partitions = b"\x02" + TOPIC_ID + b"\x02" + b"\x00\x00\x00\x01" + b"\x00"     # [t: [1]]
    assert records[key(ShareKey(TARGET_MEMBER, "g", "m"))] == b"\x00\x00" + partitions + b"\x00"
    assert records[key(ShareKey(CURRENT_ASSIGNMENT, "g", "m"))] == (
        b"\x00\x00" + b"\x00\x00\x00\x05" + b"\x00\x00\x00\x04" + b"\x00" + partitions + b"\x00")
    assert records[key(ShareKey(STATE_PARTITION_METADATA, "g"))] == (
        b"\x00\x00" + b"\x01"                                                      # no InitializingTopics
        + b"\x02" + TOPIC_ID + b"\x02t" + b"\x02\x00\x00\x00\x01" + (1_000).to_bytes(8, "big") + b"\x00"
        + b"\x01" + b"\x00")                                                       # no DeletingTopics, no tags


def test_a_change_writes_kafkas_records_in_kafkas_order():
    written = records_between(None, _group(), IDS)
    assert [decode_key(k).record_type for k, _ in written] == [10, 11, 13, 12, 14, 15]
    before = _group()
    after = before.copy()
    after.remove("m")
    assert [(decode_key(k).record_type, v) for k, v in records_between(before, after, IDS)] == [
        (14, None), (13, None), (10, None), (11, records_between(None, after, IDS)[0][1])]
    assert [(decode_key(k).record_type, v) for k, v in records_between(before, None, IDS)] == [
        (14, None), (13, None), (10, None), (12, None), (11, None), (15, None)]
    assert records_between(before, before.copy(), IDS) == [], "a heartbeat that changes nothing writes nothing"


def test_loading_replays_them_and_takes_kafka_4_0s_layouts():
    loader = ShareGroupLoader(NAMES)
    for k, v in records_between(None, _group(), IDS, now=1_000):
        loader.replay(decode_key(k), v)
    loaded = loader.groups()["g"]
    expected = _group()
    assert (loaded.group_epoch, loaded.assignment_epoch, loaded.metadata_hash, loaded.initialized) == (
        expected.group_epoch, expected.assignment_epoch, expected.metadata_hash, expected.initialized)
    assert loaded.members["m"].assignment_key() == expected.members["m"].assignment_key()
    assert loaded.members["m"].metadata_key() == expected.members["m"].metadata_key()
    assert loaded.target == expected.target

    old = ShareGroupLoader(NAMES)
    old.replay(ShareKey(9, "g"), b"\x00\x00\x01\x00")                      # 4.0's ShareGroupPartitionMetadata
    old.replay(ShareKey(GROUP_EPOCH, "g"), b"\x00\x00\x00\x00\x00\x03\x00")  # 4.0's ShareGroupMetadata
    assert (old.groups()["g"].group_epoch, old.groups()["g"].metadata_hash) == (3, 0)

    for k, v in records_between(_group(), None, IDS):
        loader.replay(decode_key(k), v)
    assert loader.groups() == {}, "tombstones end the group"


def test_the_dump_decoder_prints_kafka_4_2s_share_records_and_still_reads_4_0s():
    from logstore.broker.coordinator.record_json import offsets_record
    from logstore.checkpoints import topic_id_to_string

    shown = {}
    for k, v in records_between(None, _group(), IDS, now=1_000):
        key, payload = offsets_record(k, v)
        shown[key["type"]] = payload["data"]
    assert shown["11"] == {"epoch": 5, "metadataHash": 0x0102030405060708}
    assert shown["15"] == {"initializingTopics": [], "deletingTopics": [], "initializedTopics": [
        {"topicId": topic_id_to_string(TOPIC_ID), "topicName": "t", "partitions": [1], "createTimestamp": 1_000}]}
    assert shown["14"]["assignedPartitions"] == [{"topicId": topic_id_to_string(TOPIC_ID), "partitions": [1]}]
    assert offsets_record(encode_key(ShareKey(GROUP_EPOCH, "g")), b"\x00\x00\x00\x00\x00\x03\x00")[1] == {
        "version": "0", "data": {"epoch": 3}}
