"""`__transaction_state` records and coordinator partitioning: Kafka's bytes, checked by hand and by property."""
from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logstore.broker.coordinator.partitioning import java_string_hash, partition_for
from logstore.broker.coordinator.txn_log import (
    TxnLogValue,
    TxnState,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from logstore.errors import CorruptRecordError
from spec_vectors import VECTORS_DIR as VECTORS

# TransactionLogValue v0 laid out field by field from Kafka's schema (spec §9.4).
ONGOING_V0 = bytes.fromhex(
    "0000" "00000000000003e8" "0002" "0000ea60" "01"
    "00000001" "0001" "74" "00000002" "00000000" "00000002"
    "0000000000000005" "0000000000000004")
ONGOING = TxnLogValue(1000, 2, 60000, TxnState.ONGOING, frozenset({("t", 0), ("t", 2)}), 5, 4)


def test_key_v0_is_the_version_then_the_id():
    assert encode_key("txn-a") == bytes.fromhex("0000" "0005") + b"txn-a"
    assert decode_key(encode_key("grüße")) == "grüße"


def test_value_v0_has_kafkas_layout():
    assert encode_value(ONGOING, version=0) == ONGOING_V0
    assert decode_value(ONGOING_V0) == ONGOING


def test_value_v1_is_written_with_only_the_tags_that_are_not_their_default():
    # Flexible: compact array/string lengths (n + 1), a tag section per partition entry and at the end.
    assert encode_value(ONGOING) == bytes.fromhex(
        "0001" "00000000000003e8" "0002" "0000ea60" "01"
        "02" "02" "74" "03" "00000000" "00000002" "00"
        "0000000000000005" "0000000000000004" "00")
    bumped = TxnLogValue(1000, 2, 60000, TxnState.PREPARE_COMMIT, ONGOING.partitions, 5, 4,
                         previous_producer_id=-1, next_producer_id=1001, client_transaction_version=2)
    data = encode_value(bumped)
    assert data.endswith(bytes.fromhex("02" "01" "08" "00000000000003e9" "02" "02" "0002"))
    assert decode_value(data) == bumped


def test_empty_state_writes_a_null_partition_array():
    value = TxnLogValue(7, 0, 1000, TxnState.EMPTY, frozenset(), 9, -1)
    data = encode_value(value, version=0)
    assert data[17:21] == bytes.fromhex("ffffffff")
    assert decode_value(data) == value
    flexible = encode_value(value)
    assert flexible[17:18] == b"\x00"  # compact: null is a length of 0
    assert decode_value(flexible) == value


def test_value_v1_is_flexible_with_tagged_producer_ids_and_client_version():
    data = bytes.fromhex(
        "0001" "00000000000003e8" "0002" "0000ea60" "01"
        "02" "02" "74" "03" "00000000" "00000002" "00"
        "0000000000000005" "0000000000000004"
        "03" "00" "08" "0000000000000063" "05" "01" "09" "02" "02" "0002")
    value = decode_value(data)
    assert value.partitions == ONGOING.partitions
    assert (value.previous_producer_id, value.next_producer_id, value.client_transaction_version) == (99, -1, 2)


@pytest.mark.parametrize("data, message", [
    (b"\x00\x02" + ONGOING_V0[2:], "version 2"),
    (ONGOING_V0[:16] + b"\x08" + ONGOING_V0[17:], "TransactionStatus 8"),
    (ONGOING_V0 + b"\x00", "left over"),
])
def test_bad_values_are_refused(data, message):
    with pytest.raises(CorruptRecordError, match=message):
        decode_value(data)


def test_every_truncation_is_refused():
    for end in range(len(ONGOING_V0)):
        with pytest.raises(CorruptRecordError):
            decode_value(ONGOING_V0[:end])


partitions = st.frozensets(st.tuples(st.text(min_size=1, max_size=20), st.integers(0, 2**31 - 1)), max_size=20)


@given(st.integers(-1, 2**63 - 1), st.integers(-1, 32767), st.integers(1, 2**31 - 1),
       st.sampled_from([s for s in TxnState if s not in (TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE)]),
       partitions, st.integers(-1, 2**62), st.integers(-1, 2**62), st.integers(-1, 2**63 - 1),
       st.integers(-1, 2**63 - 1), st.sampled_from([0, 1, 2]), st.sampled_from([0, 1]))
def test_values_round_trip(pid, epoch, timeout, state, parts, updated, started, previous, following, client,
                           version):
    parts = frozenset() if state == TxnState.EMPTY else parts
    tags = dict(previous_producer_id=previous, next_producer_id=following, client_transaction_version=client)
    value = TxnLogValue(pid, epoch, timeout, state, parts, updated, started, **(tags if version else {}))
    assert decode_value(encode_value(value, version)) == value


@given(st.text(max_size=50))
def test_keys_round_trip(transactional_id):
    assert decode_key(encode_key(transactional_id)) == transactional_id


def test_partition_vectors_from_a_real_jvm():
    vectors = json.loads((VECTORS / "coordinator_partition_hash.json").read_text())
    for case in vectors["cases"]:
        text = bytes.fromhex(case["utf8_hex"]).decode("utf-8")
        assert java_string_hash(text) == case["javaHashCode"], case["id"]
        assert partition_for(text, vectors["numPartitions"]) == case["partition"], case["id"]


def test_a_character_outside_the_bmp_hashes_as_its_surrogate_pair():
    # "😀" is U+1F600: UTF-16 units D83D DE00, so hash = 31 * 0xD83D + 0xDE00.
    assert java_string_hash("\U0001F600") == 31 * 0xD83D + 0xDE00
