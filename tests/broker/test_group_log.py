"""`__consumer_offsets` records: the spec's vectors, hand-laid old and flexible versions, and properties."""
from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logstore.broker.coordinator.group_log import (
    OFFSET_KEY_VERSION,
    OFFSET_VALUE_VERSION,
    OFFSET_VALUE_VERSION_WITH_EXPIRE,
    GroupKey,
    GroupValue,
    MemberValue,
    OffsetKey,
    OffsetValue,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
)
from logstore.broker.coordinator.records import Writer
from logstore.errors import CorruptRecordError
from spec_vectors import VECTORS_DIR as VECTORS

RECORDS = json.loads((VECTORS / "v2_computed_consumer_offsets_records.json").read_text())["internalRecords"]


def _expected_key(fields: dict):
    if fields["type"] == "offset_commit":
        return OffsetKey(fields["group"], fields["topic"], fields["partition"])
    return GroupKey(fields["group"])


def _expected_value(key_type: str, fields: dict):
    if key_type == "offset_commit":
        return OffsetValue(fields["offset"], fields.get("leaderEpoch", -1), fields["metadata"],
                           fields["commitTimestamp"], fields.get("expireTimestamp", -1))
    members = tuple(MemberValue(m["memberId"], m["groupInstanceId"], m["clientId"], m["clientHost"],
                                m["rebalanceTimeout"], m["sessionTimeout"], bytes.fromhex(m["subscription"]),
                                bytes.fromhex(m["assignment"])) for m in fields["members"])
    return GroupValue(fields["protocolType"], fields["generation"], fields["protocol"], fields["leader"],
                      fields.get("currentStateTimestamp", -1), members)


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_vector_records_decode_to_the_documented_fields(name):
    record = RECORDS[name]
    key = decode_key(bytes.fromhex(record["key_hex"]))
    assert key == _expected_key(record["key"])
    if record["value_hex"] is None:
        return
    decode = decode_offset_value if isinstance(key, OffsetKey) else decode_group_value
    assert decode(bytes.fromhex(record["value_hex"])) == _expected_value(record["key"]["type"], record["value"])


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_keys_we_write_are_the_vector_bytes(name):
    record = RECORDS[name]
    key = decode_key(bytes.fromhex(record["key_hex"]))
    encoded = (encode_offset_key(key.group, key.topic, key.partition) if isinstance(key, OffsetKey)
               else encode_group_key(key.group))
    assert encoded.hex() == record["key_hex"]


@pytest.mark.parametrize("name, version", [
    ("offset_commit_k1_v3", 3), ("offset_commit_k1_v1_expire", 1), ("group_metadata_k2_v3", 3)])
def test_values_we_write_are_the_vector_bytes(name, version):
    record = RECORDS[name]
    assert record["value"]["valueVersion"] == version
    value = _expected_value(record["key"]["type"], record["value"])
    encode = encode_offset_value if isinstance(value, OffsetValue) else encode_group_value
    assert encode(value).hex() == record["value_hex"]


def test_an_offset_with_an_expire_timestamp_is_written_as_v1_without_its_leader_epoch():
    data = encode_offset_value(OffsetValue(42, leader_epoch=7, metadata="m", commit_timestamp=1,
                                           expire_timestamp=2))
    assert data[:2] == b"\x00\x01"
    assert decode_offset_value(data) == OffsetValue(42, -1, "m", 1, 2)


# OffsetCommitValue v0 and v2 share a layout: offset, metadata, commitTimestamp.
@pytest.mark.parametrize("version", ["0000", "0002"])
def test_offset_values_v0_and_v2_have_no_epoch_and_no_expiry(version):
    data = bytes.fromhex(version + "0000000000000009" "0002" "6d64" "0000000000000064")
    assert decode_offset_value(data) == OffsetValue(9, -1, "md", 100, -1)


def test_offset_value_v4_skips_unknown_tagged_fields():
    data = bytes.fromhex("0004" "0000000000000009" "00000003" "01" "0000000000000064"
                         "01" "05" "02" "abcd")
    assert decode_offset_value(data) == OffsetValue(9, 3, "", 100, -1)


MEMBER_V0 = ("0002" "6d31" "0002" "6331" "0004" "2f682d31" "00007530"
             "00000002" "0102" "00000001" "03")


def test_group_value_v0_uses_the_session_timeout_for_the_rebalance_timeout():
    data = bytes.fromhex("0000" "0008" + b"consumer".hex() + "00000004" "0005" + b"range".hex() + "0002" "6d31"
                         "00000001" + MEMBER_V0)
    assert decode_group_value(data) == GroupValue(
        "consumer", 4, "range", "m1", -1, (MemberValue("m1", None, "c1", "/h-1", 30000, 30000, b"\x01\x02", b"\x03"),))


def test_group_value_v1_has_a_rebalance_timeout_but_no_state_timestamp():
    member = "0002" "6d31" "0002" "6331" "0004" "2f682d31" "0000ea60" "00007530" "00000000" "00000000"
    data = bytes.fromhex("0001" "0000" "00000000" "ffff" "ffff" "00000001" + member)
    assert decode_group_value(data) == GroupValue(
        "", 0, None, None, -1, (MemberValue("m1", None, "c1", "/h-1", 60000, 30000, b"", b""),))


def test_group_value_v2_has_a_state_timestamp_but_no_instance_id():
    data = bytes.fromhex("0002" "0000" "00000000" "ffff" "ffff" "0000000000000063" "00000000")
    assert decode_group_value(data) == GroupValue("", 0, None, None, 99, ())


def test_group_value_v4_is_flexible_and_skips_unknown_tags_in_members_and_at_the_top():
    member = ("03" "6d31" "03" "6931" "03" "6331" "05" "2f682d31" "0000ea60" "00007530"
              "03" "0102" "01" "01" "07" "01" "ff")
    data = bytes.fromhex("0004" "09" + b"consumer".hex() + "00000004" "06" + b"range".hex() + "03" "6d31"
                         "0000000000000063" "02" + member + "02" "00" "00" "03" "02" "0000")
    assert decode_group_value(data) == GroupValue(
        "consumer", 4, "range", "m1", 99, (MemberValue("m1", "i1", "c1", "/h-1", 60000, 30000, b"\x01\x02", b""),))


def test_null_member_blobs_decode_as_empty_bytes():
    member = "0002" "6d31" "ffff" "0002" "6331" "0004" "2f682d31" "0000ea60" "00007530" "ffffffff" "ffffffff"
    data = bytes.fromhex("0003" "0000" "00000000" "ffff" "ffff" "ffffffffffffffff" "00000001" + member)
    (member_value,) = decode_group_value(data).members
    assert (member_value.subscription, member_value.assignment) == (b"", b"")


@pytest.mark.parametrize("version", [3, 4, 8, 9, 15, 16, 32767])
def test_keys_of_other_record_types_are_skipped(version):
    assert decode_key(version.to_bytes(2, "big") + b"\x00\x03abc\xff") is None


@pytest.mark.parametrize("data, message", [
    ("fffe0001" "67", "key version -2"),
    ("0002" "000167" "00", "left over"),
    ("0001" "000167", "wanted"),
])
def test_bad_keys_are_refused(data, message):
    with pytest.raises(CorruptRecordError, match=message):
        decode_key(bytes.fromhex(data))


V3 = bytes.fromhex(RECORDS["offset_commit_k1_v3"]["value_hex"])
GROUP_V3 = bytes.fromhex(RECORDS["group_metadata_k2_v3"]["value_hex"])


@pytest.mark.parametrize("decode, data, message", [
    (decode_offset_value, b"\x00\x05" + V3[2:], "OffsetCommitValue version 5"),
    (decode_offset_value, b"\xff\xff" + V3[2:], "version -1"),
    (decode_offset_value, V3 + b"\x00", "left over"),
    (decode_group_value, b"\x00\x05" + GROUP_V3[2:], "GroupMetadataValue version 5"),
    (decode_group_value, GROUP_V3 + b"\x00", "left over"),
])
def test_bad_values_are_refused(decode, data, message):
    with pytest.raises(CorruptRecordError, match=message):
        decode(data)


@pytest.mark.parametrize("name", [n for n in sorted(RECORDS) if RECORDS[n]["value_hex"]])
def test_every_truncation_of_a_vector_value_is_refused(name):
    data = bytes.fromhex(RECORDS[name]["value_hex"])
    decode = decode_offset_value if name.startswith("offset") else decode_group_value
    for end in range(len(data)):
        with pytest.raises(CorruptRecordError):
            decode(data[:end])


text = st.text(max_size=20)
i32 = st.integers(-2**31, 2**31 - 1)
i64 = st.integers(-2**63, 2**63 - 1)
offset_values = st.one_of(
    st.builds(OffsetValue, i64, i32, text, i64, st.just(-1)),
    st.builds(OffsetValue, i64, st.just(-1), text, i64, st.integers(0, 2**63 - 1)))
members = st.builds(MemberValue, text, st.none() | text, text, text, i32, i32, st.binary(max_size=40),
                    st.binary(max_size=40))
group_values = st.builds(GroupValue, text, i32, st.none() | text, st.none() | text, i64,
                         st.lists(members, max_size=4).map(tuple))


@given(offset_values)
def test_offset_values_round_trip(value):
    assert decode_offset_value(encode_offset_value(value)) == value


@given(group_values)
def test_group_values_round_trip(value):
    assert decode_group_value(encode_group_value(value)) == value


@given(text, text, i32)
def test_keys_round_trip(group, topic, partition):
    assert decode_key(encode_offset_key(group, topic, partition)) == OffsetKey(group, topic, partition)
    assert decode_key(encode_group_key(group)) == GroupKey(group)


def _general_offset_key(group: str, topic: str, partition: int) -> bytes:
    """OffsetCommitKey v1 through the general Writer, the oracle of the fixed-struct encoder."""
    return Writer().int(2, OFFSET_KEY_VERSION).string(False, group).string(False, topic).int(4, partition).getvalue()


def _general_offset_value(value: OffsetValue) -> bytes:
    """OffsetCommitValue v1/v3 through the general Writer, the oracle of the fixed-struct encoder."""
    if value.expire_timestamp >= 0:
        w = Writer().int(2, OFFSET_VALUE_VERSION_WITH_EXPIRE).int(8, value.offset)
        w.string(False, value.metadata).int(8, value.commit_timestamp).int(8, value.expire_timestamp)
    else:
        w = Writer().int(2, OFFSET_VALUE_VERSION).int(8, value.offset).int(4, value.leader_epoch)
        w.string(False, value.metadata).int(8, value.commit_timestamp)
    return w.getvalue()


@given(st.text(max_size=300), st.text(max_size=300), i32)
def test_the_fixed_struct_offset_key_is_the_general_encoders_bytes(group, topic, partition):
    assert encode_offset_key(group, topic, partition) == _general_offset_key(group, topic, partition)


@given(st.one_of(offset_values, st.builds(OffsetValue, i64, i32, st.text(max_size=300) | st.none(), i64,
                                           st.integers(-1, 2**63 - 1))))
def test_the_fixed_struct_offset_value_is_the_general_encoders_bytes(value):
    assert encode_offset_value(value) == _general_offset_value(value)


def test_an_offset_record_string_over_32767_bytes_is_refused_as_the_general_encoder_refuses_it():
    with pytest.raises(struct.error):
        _general_offset_key("g" * 32768, "t", 0)
    with pytest.raises(struct.error):
        encode_offset_key("g" * 32768, "t", 0)
    with pytest.raises(struct.error):
        encode_offset_value(OffsetValue(1, -1, "m" * 32768, 0, -1))


def _decodes_or_is_refused(decode, data):
    """Any outcome but an exception other than CorruptRecordError (which would fail the test)."""
    try:
        decode(data)
    except CorruptRecordError:
        pass


def _only_the_whole_record_decodes(decode, encoded: bytes, value, end: int):
    if end == len(encoded):
        assert decode(encoded) == value
    else:
        with pytest.raises(CorruptRecordError):
            decode(encoded[:end])


@given(offset_values, st.data())
def test_a_prefix_of_an_offset_value_is_refused(value, data):
    encoded = encode_offset_value(value)
    _only_the_whole_record_decodes(decode_offset_value, encoded, value, data.draw(st.integers(0, len(encoded))))


@given(group_values, st.data())
def test_a_prefix_of_a_group_value_is_refused(value, data):
    encoded = encode_group_value(value)
    _only_the_whole_record_decodes(decode_group_value, encoded, value, data.draw(st.integers(0, len(encoded))))


@given(st.binary(max_size=80), st.sampled_from([0, 1, 2, 3, 4]))
def test_garbage_values_decode_or_are_refused(payload, version):
    data = version.to_bytes(2, "big") + payload
    _decodes_or_is_refused(decode_offset_value, data)
    _decodes_or_is_refused(decode_group_value, data)


@given(st.binary(max_size=40))
def test_garbage_keys_decode_or_are_refused(data):
    _decodes_or_is_refused(decode_key, data)
