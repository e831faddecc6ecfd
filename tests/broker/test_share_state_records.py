"""`__share_group_state` records byte for byte against Kafka 4.2's schemas (ShareSnapshotKey/Value,
ShareUpdateKey/Value), the damage each decoder refuses, Kafka's batch combiner, and the partition a
share-partition's records go to.

The expected bytes are assembled by hand from the schema, field by field, not by the code under test.
"""
from __future__ import annotations

import struct

import pytest

from logstore.broker.coordinator.internal_topics import ShareStateTopicConfig, share_partition_key
from logstore.broker.coordinator.partitioning import partition_for
from logstore.broker.coordinator.record_json import share_group_state_record
from logstore.broker.share import state_records as r
from logstore.broker.share.types import DeliveryState, ShareState, StateBatch
from logstore.dump_records import UnknownRecordType
from logstore.errors import CorruptRecordError

TOPIC_ID = bytes(range(16))
KEY = ("orders-workers", TOPIC_ID, 7)
A, Q, K, X = DeliveryState.AVAILABLE, DeliveryState.ACQUIRED, DeliveryState.ACKNOWLEDGED, DeliveryState.ARCHIVED


def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


KEY_FIELDS = i16(len(b"orders-workers")) + b"orders-workers" + TOPIC_ID + i32(7)
BATCHES = (StateBatch(100, 104, K, 1), StateBatch(105, 105, A, 3), StateBatch(106, 110, X, 5))
# Compact array: count + 1 as a varint; each element closed by an empty tagged-field section (0).
BATCH_BYTES = (b"\x04"
               + i64(100) + i64(104) + i8(2) + i16(1) + b"\x00"
               + i64(105) + i64(105) + i8(0) + i16(3) + b"\x00"
               + i64(106) + i64(110) + i8(4) + i16(5) + b"\x00")
STATE = ShareState(state_epoch=2, leader_epoch=9, start_offset=100, batches=BATCHES)
SNAPSHOT = r.ShareSnapshot(snapshot_epoch=4, state=STATE, create_timestamp=1_764_000_000_000,
                           write_timestamp=1_764_000_000_500, delivery_complete_count=10)
SNAPSHOT_BYTES = (i16(0) + i32(4) + i32(2) + i32(9) + i64(100) + i64(1_764_000_000_000) + i64(1_764_000_000_500)
                  + BATCH_BYTES
                  # tagged fields: one, tag 0 (DeliveryCompleteCount), 4 bytes
                  + b"\x01" + b"\x00" + b"\x04" + i32(10))
UPDATE = r.ShareUpdate(snapshot_epoch=4, leader_epoch=9, start_offset=100, batches=BATCHES,
                       delivery_complete_count=10)
UPDATE_BYTES = i16(0) + i32(4) + i32(9) + i64(100) + BATCH_BYTES + b"\x01\x00\x04" + i32(10)


def test_snapshot_key_is_type_0_then_group_topic_id_and_partition():
    assert r.encode_key(r.SNAPSHOT, KEY) == i16(0) + KEY_FIELDS
    assert r.decode_key(i16(0) + KEY_FIELDS) == (r.SNAPSHOT, KEY)


def test_update_key_is_type_1_with_the_same_fields():
    assert r.encode_key(r.UPDATE, KEY) == i16(1) + KEY_FIELDS
    assert r.decode_key(i16(1) + KEY_FIELDS) == (r.UPDATE, KEY)
    # Different bytes: compaction keeps the newest snapshot and the newest update of a share-partition.
    assert r.encode_key(r.UPDATE, KEY) != r.encode_key(r.SNAPSHOT, KEY)


def test_snapshot_value_bytes():
    assert r.encode_snapshot(SNAPSHOT) == SNAPSHOT_BYTES
    assert r.decode_snapshot(SNAPSHOT_BYTES) == SNAPSHOT


def test_update_value_bytes():
    assert r.encode_update(UPDATE) == UPDATE_BYTES
    assert r.decode_update(UPDATE_BYTES) == UPDATE


def test_delivery_complete_count_at_its_default_is_left_out():
    snapshot = r.ShareSnapshot(0, ShareState(0, 0, 0, ()), 5, 5)
    assert r.encode_snapshot(snapshot) == i16(0) + i32(0) * 3 + i64(0) + i64(5) + i64(5) + b"\x01" + b"\x00"
    assert r.decode_snapshot(r.encode_snapshot(snapshot)).delivery_complete_count == -1
    update = r.ShareUpdate(0, 3, -1, ())
    assert r.encode_update(update) == i16(0) + i32(0) + i32(3) + i64(-1) + b"\x01" + b"\x00"
    assert r.decode_update(r.encode_update(update)) == update


def test_unknown_tags_are_skipped():
    # A later Kafka's tag 5 (2 bytes) beside DeliveryCompleteCount: the known fields still load.
    later = UPDATE_BYTES[:-7] + b"\x02\x00\x04" + i32(10) + b"\x05\x02\xab\xcd"
    assert r.decode_update(later) == UPDATE
    # Inside a state batch too.
    first = i64(100) + i64(104) + i8(2) + i16(1)
    assert SNAPSHOT_BYTES.count(first + b"\x00") == 1
    batch_tag = SNAPSHOT_BYTES.replace(first + b"\x00", first + b"\x01\x07\x01\xff")
    assert r.decode_snapshot(batch_tag) == SNAPSHOT


def test_delivery_complete_count_counts_done_offsets_at_or_past_the_start():
    assert r.delivery_complete_count(STATE) == 5 + 5
    # A batch that starts below the start offset counts only from it.
    assert r.delivery_complete_count(ShareState(0, 0, 102, BATCHES)) == 3 + 5
    assert r.delivery_complete_count(ShareState(0, 0, 0, ())) == 0


@pytest.mark.parametrize("decode, data", [(r.decode_snapshot, SNAPSHOT_BYTES), (r.decode_update, UPDATE_BYTES),
                                          (r.decode_key, i16(0) + KEY_FIELDS)])
def test_every_truncation_is_a_corrupt_record(decode, data):
    for cut in range(len(data)):
        with pytest.raises(CorruptRecordError):
            decode(data[:cut])


@pytest.mark.parametrize("decode, data", [(r.decode_snapshot, SNAPSHOT_BYTES), (r.decode_update, UPDATE_BYTES),
                                          (r.decode_key, i16(1) + KEY_FIELDS)])
def test_trailing_bytes_are_a_corrupt_record(decode, data):
    with pytest.raises(CorruptRecordError, match="left over"):
        decode(data + b"\x00")


def test_damaged_values_are_corrupt_records():
    with pytest.raises(CorruptRecordError, match="version 1"):
        r.decode_snapshot(i16(1) + SNAPSHOT_BYTES[2:])
    # ARCHIVING (3) is never persisted.
    with pytest.raises(CorruptRecordError, match="DeliveryState 3"):
        r.decode_update(i16(0) + i32(0) + i32(0) + i64(0) + b"\x02" + i64(1) + i64(1) + i8(3) + i16(1) + b"\x00"
                        + b"\x00")
    with pytest.raises(CorruptRecordError, match="DeliveryCompleteCount has 2 bytes"):
        r.decode_update(UPDATE_BYTES[:-7] + b"\x01\x00\x02\x00\x0a")
    # An array count past the bytes there.
    with pytest.raises(CorruptRecordError):
        r.decode_update(i16(0) + i32(0) + i32(0) + i64(0) + b"\xff\xff\x03")


def test_a_key_of_another_record_type_is_refused():
    with pytest.raises(CorruptRecordError, match="record type 2"):
        r.decode_key(i16(2) + KEY_FIELDS)
    assert r.record_type(i16(2) + KEY_FIELDS) == 2
    with pytest.raises(CorruptRecordError):
        r.record_type(b"\x00")
    with pytest.raises(ValueError):
        r.encode_key(2, KEY)


def test_a_group_id_that_is_not_utf8_is_a_corrupt_record():
    with pytest.raises(CorruptRecordError, match="UTF-8"):
        r.decode_key(i16(0) + i16(2) + b"\xff\xfe" + TOPIC_ID + i32(0))


# -- Kafka's combiner ------------------------------------------------------------------------------------

def test_the_higher_delivery_count_wins_where_batches_overlap():
    old = (StateBatch(0, 9, K, 1),)
    new = (StateBatch(5, 14, A, 2),)
    assert r.combine(old + new, -1) == (StateBatch(0, 4, K, 1), StateBatch(5, 14, A, 2))
    # Order does not matter: the priority decides.
    assert r.combine(new + old, -1) == (StateBatch(0, 4, K, 1), StateBatch(5, 14, A, 2))


def test_at_the_same_count_the_later_state_wins():
    assert r.combine((StateBatch(0, 9, A, 1), StateBatch(3, 5, X, 1), StateBatch(4, 4, K, 1)), -1) == (
        StateBatch(0, 2, A, 1), StateBatch(3, 5, X, 1), StateBatch(6, 9, A, 1))


def test_a_swallowed_lower_batch_leaves_the_wider_one_whole():
    assert r.combine((StateBatch(0, 9, X, 3), StateBatch(2, 4, A, 1)), -1) == (StateBatch(0, 9, X, 3),)


def test_touching_runs_of_one_state_become_one_and_gaps_stay():
    assert r.combine((StateBatch(0, 4, K, 1), StateBatch(5, 9, K, 1), StateBatch(12, 13, K, 1)), -1) == (
        StateBatch(0, 9, K, 1), StateBatch(12, 13, K, 1))
    # Touching but different: two batches.
    assert r.combine((StateBatch(0, 4, K, 1), StateBatch(5, 9, A, 1)), -1) == (
        StateBatch(0, 4, K, 1), StateBatch(5, 9, A, 1))


def test_batches_below_the_start_offset_are_cut():
    batches = (StateBatch(0, 4, K, 1), StateBatch(5, 9, A, 2), StateBatch(10, 12, X, 5))
    assert r.combine(batches, 7) == (StateBatch(7, 9, A, 2), StateBatch(10, 12, X, 5))
    assert r.combine(batches, 13) == ()
    assert r.combine(batches, -1) == batches


def test_apply_update_keeps_the_state_epoch_and_moves_the_start():
    current = ShareState(3, 1, 0, (StateBatch(0, 9, A, 1),))
    update = r.ShareUpdate(0, 2, 4, (StateBatch(4, 6, K, 1),))
    assert r.apply_update(current, update) == ShareState(3, 2, 4, (StateBatch(4, 6, K, 1), StateBatch(7, 9, A, 1)))
    # -1: the start offset is not moved.
    unchanged = r.apply_update(current, r.ShareUpdate(0, 2, -1, ()))
    assert unchanged == ShareState(3, 2, 0, current.batches)


def test_canonical_sorts_and_merges():
    state = ShareState(0, 0, 2, (StateBatch(6, 9, K, 1), StateBatch(0, 5, K, 1)))
    assert r.canonical(state) == ShareState(0, 0, 2, (StateBatch(2, 9, K, 1),))


# -- where the records go ------------------------------------------------------------------------------

def test_a_share_partition_hashes_as_kafkas_share_partition_key():
    # Kafka's Uuid.toString: base64url without padding.
    assert share_partition_key(*KEY) == "orders-workers:AAECAwQFBgcICQoLDA0ODw:7"
    # Java's String.hashCode of that string is -841288488 (worked out by hand: sum of c * 31^(n-1-i)).
    assert partition_for(share_partition_key(*KEY), 50) == 841288488 % 50 == 38


def test_share_state_topic_settings_under_kafkas_names():
    config = ShareStateTopicConfig.from_settings({"share.coordinator.state.topic.num.partitions": 3,
                                                  "share.coordinator.state.topic.segment.bytes": 4096,
                                                  "unrelated": 1})
    assert config == ShareStateTopicConfig(partitions=3, segment_bytes=4096)
    assert ShareStateTopicConfig.from_settings({}) == ShareStateTopicConfig(50, 104_857_600)


# -- as kafka-dump-log --share-group-state-decoder prints them ------------------------------------------

def test_dump_json_of_a_snapshot_an_update_and_a_tombstone():
    key_json = {"groupId": "orders-workers", "topicId": "AAECAwQFBgcICQoLDA0ODw", "partition": 7}
    batches = [{"firstOffset": 100, "lastOffset": 104, "deliveryState": 2, "deliveryCount": 1},
               {"firstOffset": 105, "lastOffset": 105, "deliveryState": 0, "deliveryCount": 3},
               {"firstOffset": 106, "lastOffset": 110, "deliveryState": 4, "deliveryCount": 5}]
    assert share_group_state_record(i16(0) + KEY_FIELDS, SNAPSHOT_BYTES) == (
        {"type": "0", "data": key_json},
        {"version": "0", "data": {"snapshotEpoch": 4, "stateEpoch": 2, "leaderEpoch": 9, "startOffset": 100,
                                  "deliveryCompleteCount": 10, "createTimestamp": 1_764_000_000_000,
                                  "writeTimestamp": 1_764_000_000_500, "stateBatches": batches}})
    assert share_group_state_record(i16(1) + KEY_FIELDS, UPDATE_BYTES) == (
        {"type": "1", "data": key_json},
        {"version": "0", "data": {"snapshotEpoch": 4, "leaderEpoch": 9, "startOffset": 100,
                                  "deliveryCompleteCount": 10, "stateBatches": batches}})
    assert share_group_state_record(i16(1) + KEY_FIELDS, None) == ({"type": "1", "data": key_json}, "<DELETE>")


def test_dump_json_leaves_out_a_count_at_its_default_and_names_unknown_types():
    _, payload = share_group_state_record(i16(1) + KEY_FIELDS, r.encode_update(r.ShareUpdate(0, 3, -1, ())))
    assert payload == {"version": "0", "data": {"snapshotEpoch": 0, "leaderEpoch": 3, "startOffset": -1,
                                                "stateBatches": []}}
    with pytest.raises(UnknownRecordType):
        share_group_state_record(i16(2) + KEY_FIELDS, b"")
    with pytest.raises(CorruptRecordError):
        share_group_state_record(None, SNAPSHOT_BYTES)
    with pytest.raises(CorruptRecordError):
        share_group_state_record(i16(0) + KEY_FIELDS, SNAPSHOT_BYTES[:-1])
