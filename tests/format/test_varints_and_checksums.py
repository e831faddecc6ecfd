"""Primitive encodings of on-disk-format.md §0 and §2.4: checksums, varints, sequences.

Values come from vectors/crc32c_and_varints.json; the varint edge cases are
Kafka's ByteUtils.readVarint/readVarlong rules (at most 5/10 bytes, non-minimal
encodings accepted, bits past the width dropped).
"""
from __future__ import annotations

import zlib

import crc32c
import pytest

import logstore.formats.kafka as K
from logstore.errors import CorruptRecordError

MAX = 2147483647


def _cases(vector, section):
    _, doc = vector("crc32c_and_varints")
    return doc[section]


def _spec_increment(s, n):
    """incrementSequence exactly as written in §2.4."""
    return n - (MAX - s) - 1 if s > MAX - n else s + n


def _spec_decrement(s, n):
    """decrementSequence exactly as written in §2.4."""
    return MAX - (n - s) + 1 if s < n else s - n


def _crc_input(vector, case):
    if "input_hex" in case:
        return bytes.fromhex(case["input_hex"])
    # The one named input: the first kafka-python v2 broker batch, bytes 21..end.
    assert case["input"] == "kp v2 broker batch0 bytes 21..end"
    data, _ = vector("v2_broker_kafka011_single_record")
    return data[21:]


# ---------------------------------------------------------------------------
# Checksums


def test_crc32c_check_values(vector):
    cases = _cases(vector, "crc32c")
    assert [crc32c.crc32c(_crc_input(vector, c)) for c in cases] == [c["crc32c"] for c in cases]


def test_crc32_legacy_check_values(vector):
    cases = _cases(vector, "crc32_legacy")
    assert [zlib.crc32(bytes.fromhex(c["input_hex"])) for c in cases] == [c["crc32"] for c in cases]


def test_batch_crc_is_crc32c_from_attributes_to_end(vector):
    data, doc = vector("v2_broker_kafka011_single_record")
    stored = doc["expected"]["entries"][0]["crc"]
    assert K.read_header(data).crc == crc32c.crc32c(data[21:]) == stored


# ---------------------------------------------------------------------------
# Varints from the vector file


@pytest.mark.parametrize("section, encode, decode", [
    ("varint_zigzag_int32", K.encode_varint, K.decode_varint),
    ("varlong_zigzag_int64", K.encode_varlong, K.decode_varlong),
])
def test_zigzag_varints_match_vectors(vector, section, encode, decode):
    cases = _cases(vector, section)
    assert [encode(c["value"]).hex() for c in cases] == [c["hex"] for c in cases]
    # Decoded at an offset inside a larger buffer, with bytes after it.
    for c in cases:
        raw = bytes.fromhex(c["hex"])
        assert decode(b"\xaa" + raw + b"\x00", 1) == (c["value"], 1 + len(raw))


def test_unsigned_varints_match_vectors(vector):
    cases = _cases(vector, "unsigned_varint")
    assert [K.encode_unsigned_varint(c["value"]).hex() for c in cases] == [c["hex"] for c in cases]


# ---------------------------------------------------------------------------
# Varint edge cases


@pytest.mark.parametrize("decode, raw", [
    (K.decode_varint, "ffffffff8f01"),              # 5th byte still has the continuation bit
    (K.decode_varint, "8080808080808000"),
    (K.decode_varlong, "ffffffffffffffffffff01"),   # 11 bytes
    (K.decode_varlong, "8080808080808080808000"),
])
def test_overlong_varints_are_rejected(decode, raw):
    with pytest.raises(CorruptRecordError) as caught:
        decode(b"\x00" + bytes.fromhex(raw), 1)
    assert type(caught.value) is CorruptRecordError
    assert caught.value.position == 1


@pytest.mark.parametrize("decode, raw", [
    (K.decode_varint, ""),
    (K.decode_varint, "80"),
    (K.decode_varint, "ffffffff"),
    (K.decode_varlong, ""),
    (K.decode_varlong, "80"),
    (K.decode_varlong, "ffffffffffffffffff"),
])
def test_truncated_varints_are_rejected(decode, raw):
    with pytest.raises(CorruptRecordError) as caught:
        decode(b"\x00" + bytes.fromhex(raw), 1)
    assert type(caught.value) is CorruptRecordError
    assert caught.value.position == 1


@pytest.mark.parametrize("decode, raw, value", [
    (K.decode_varint, "8000", 0),                   # non-minimal: Kafka accepts up to 5 bytes
    (K.decode_varint, "8280808000", 1),
    (K.decode_varint, "8180808000", -1),
    (K.decode_varint, "ffffffff7f", -2147483648),   # bits past 32 drop, as in Kafka's int math
    (K.decode_varlong, "8000", 0),
    (K.decode_varlong, "80808080808080808000", 0),  # 10 bytes, the maximum
    (K.decode_varlong, "82808080808080808000", 1),
])
def test_nonminimal_varints_are_accepted(decode, raw, value):
    data = bytes.fromhex(raw)
    assert decode(data) == (value, len(data))


@pytest.mark.parametrize("value", [0, 1, -1, 63, -64, 64, 8191, -8192, 2**20, MAX, -MAX - 1])
def test_varint_roundtrip(value):
    raw = K.encode_varint(value)
    assert K.decode_varint(raw) == (value, len(raw))
    assert K.decode_varlong(raw) == (value, len(raw))  # same zigzag encoding in 64 bits


@pytest.mark.parametrize("value", [2**31, -(2**31) - 1, 2**53 + 1, 2**63 - 1, -(2**63)])
def test_varlong_roundtrip(value):
    raw = K.encode_varlong(value)
    assert K.decode_varlong(raw) == (value, len(raw))


# ---------------------------------------------------------------------------
# Sequence arithmetic (§2.4)


def test_sequence_wraps_at_int32_max():
    assert K.increment_sequence(MAX, 1) == 0
    assert K.decrement_sequence(0, 1) == MAX
    assert K.increment_sequence(MAX - 1, 3) == 1
    assert K.decrement_sequence(1, 3) == MAX - 1


@pytest.mark.parametrize("s", [0, 1, 5, 1000, MAX // 2, MAX - 5, MAX - 1, MAX])
@pytest.mark.parametrize("n", [0, 1, 2, 7, MAX // 3, MAX])
def test_sequence_arithmetic_follows_the_spec_formulas(s, n):
    assert K.increment_sequence(s, n) == _spec_increment(s, n)
    assert K.decrement_sequence(s, n) == _spec_decrement(s, n)
    assert K.decrement_sequence(K.increment_sequence(s, n), n) == s
