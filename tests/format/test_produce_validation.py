"""Kafka's LogValidator on produce: every record of a batch walked, compressed or not.

Batches here are built from the spec (on-disk-format.md §2) by a small
encoder of this module's own, which can make any part of a record lie; the
CRC is always recomputed, so only the inside lies and the header checks
pass. Each lie must be refused with Kafka's code (INVALID_RECORD, and the
index of the record at fault where there is one), every valid batch our
encoder or kafka-python writes must pass, and a decompression bomb must be
refused before it is expanded past the limit it is given.
"""
from __future__ import annotations

import struct

import crc32c
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.memory_records import MemoryRecordsBuilder

import logstore.formats.kafka as K
from logstore.errors import CorruptRecordError, InvalidRecordError
from logstore.formats.protocol import RecordRules, RecordValidationError, TimestampValidationError, record_errors
from logstore.native.compression import LZ4, ZSTD, compress, decompress_within
from logstore.native.record_batch import MAX_RECORD_FAULTS, validate_produced

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.data_too_large])
NOW = 1_700_000_000_000
HOUR = 3_600_000
RULES = RecordRules(now=NOW, partition="t-0", timestamp_after_max_ms=HOUR)
INVALID_RECORD, CORRUPT_MESSAGE, INVALID_TIMESTAMP = 87, 2, 32
HEADER = struct.Struct(">qiibIhiqqqhii")


def zigzag(n: int, width: int = 0) -> bytes:
    """A zigzag varint; `width` pads it with continuation bytes to that many bytes (an overlong varint)."""
    u = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        byte, u = u & 0x7F, u >> 7
        if not u and len(out) + 1 >= width:
            out.append(byte)
            return bytes(out)
        out.append(byte | 0x80)


def record(index: int, key: bytes | None, value: bytes | None, headers=(), ts_delta: int = 0, *,
           offset_delta: int | None = None, overlong_delta: int = 0, key_length: int | None = None,
           header_count: int | None = None, header_key_length: int | None = None, length_change: int = 0) -> bytes:
    """One record as §2.5 lays it out; each keyword makes one field lie (the length prefix stays true unless
    `length_change` says otherwise)."""
    body = bytearray(b"\x00")
    body += zigzag(ts_delta)
    body += zigzag(index if offset_delta is None else offset_delta, overlong_delta)
    if key_length is not None:
        body += zigzag(key_length) + (key or b"")
    else:
        body += zigzag(-1) if key is None else zigzag(len(key)) + key
    body += zigzag(-1) if value is None else zigzag(len(value)) + value
    body += zigzag(len(headers) if header_count is None else header_count)
    for i, (hkey, hvalue) in enumerate(headers):
        klen = header_key_length if header_key_length is not None and i == 0 else len(hkey)
        body += zigzag(klen) + hkey + (zigzag(-1) if hvalue is None else zigzag(len(hvalue)) + hvalue)
    return zigzag(len(body) + length_change) + bytes(body)


def batch(records: bytes, count: int, *, codec: int = 0, base_ts: int = NOW, max_ts: int = NOW,
          producer_id: int = -1, base_sequence: int = -1) -> bytearray:
    """A v2 batch around a records section (compressed with `codec`), recordCount `count`, CRC sealed."""
    section = compress(codec, records) if codec else records
    buf = bytearray(HEADER.pack(0, 49 + len(section), -1, 2, 0, codec, count - 1, base_ts, max_ts,
                                producer_id, 0 if producer_id >= 0 else -1, base_sequence, count) + section)
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    return buf


def check(buf, rules: RecordRules = RULES) -> K.AppendInfo:
    return K.validate_append(buf, rules=rules)


payload = st.none() | st.binary(max_size=30) | st.just(b"v" * 300)
headers = st.lists(st.tuples(st.binary(min_size=1, max_size=6), st.none() | st.binary(max_size=8)), max_size=2)
records = st.lists(st.tuples(st.binary(min_size=1, max_size=12), payload, headers, st.integers(-HOUR, HOUR)),
                   min_size=1, max_size=25)
codecs = st.sampled_from(range(5))


def _section(recs, at: int | None = None, **lies) -> bytes:
    return b"".join(record(i, k, v, h, ts, **(lies if i == at else {})) for i, (k, v, h, ts) in enumerate(recs))


# -- what must pass ------------------------------------------------------------------------------

@SETTINGS
@given(records, codecs)
def test_every_batch_of_the_spec_encoder_passes_and_stays_as_it_was(recs, codec):
    newest = NOW + max(r[3] for r in recs)
    buf = batch(_section(recs), len(recs), codec=codec, max_ts=newest)
    before = bytes(buf)
    info = check(buf)
    assert (info.record_count, info.offset_count, info.max_timestamp) == (len(recs), len(recs), newest)
    assert bytes(buf) == before


@SETTINGS
@given(records, codecs, st.integers(0, 2**31 - 1))
def test_every_batch_our_encoder_writes_passes(recs, codec, sequence):
    buf = bytearray(K.encode_batch([r[0] for r in recs], [r[1] for r in recs], [r[2] for r in recs],
                                   [NOW + r[3] for r in recs], compression=codec, producer_id=7,
                                   producer_epoch=0, base_sequence=sequence))
    info = check(buf)
    assert info.record_count == len(recs) and info.max_timestamp == NOW + max(r[3] for r in recs)


@SETTINGS
@given(records, st.sampled_from(range(5)))
def test_every_batch_kafka_python_writes_passes(recs, codec):
    builder = MemoryRecordsBuilder(2, codec, 1 << 30)
    for key, value, hdrs, ts in recs:
        assert builder.append(NOW + ts, key, value, [(k.hex(), v) for k, v in hdrs]) is not None
    builder.close()
    info = check(bytearray(builder.buffer()))
    assert info.record_count == len(recs)


# -- what must not -------------------------------------------------------------------------------

@st.composite
def lies(draw):
    """(records section, recordCount, the index of the record at fault or None for the section's fault)."""
    recs = draw(records)
    n = len(recs)
    at = draw(st.integers(0, n - 1))
    kind = draw(st.sampled_from(["more", "fewer", "delta", "overlong", "length", "key", "header_count",
                                 "header_key", "trailing", "truncated"]))
    if kind == "more":
        return _section(recs), n + draw(st.integers(1, 2**31 - 1 - n)), n
    if kind == "fewer" and n > 1:
        return _section(recs), draw(st.integers(1, n - 1)), None
    if kind == "delta":
        delta = draw(st.integers(-2**31, 2**31 - 1).filter(lambda d: d != at))
        return _section(recs, at, offset_delta=delta), n, at
    if kind == "overlong":   # an offset delta in 6 bytes: Kafka's readVarint takes at most 5
        return _section(recs, at, overlong_delta=6), n, at
    if kind == "length":
        return _section(recs, at, length_change=draw(st.sampled_from([-3, -2, -1, 1, 2, 3]))), n, at
    if kind == "key":        # the key claims more than its whole record
        return _section(recs, at, key_length=draw(st.integers(2000, 2**31 - 1))), n, at
    if kind == "header_count":
        count = draw(st.integers(-2**31, -1) | st.integers(2000, 2**31 - 1))
        return _section(recs, at, header_count=count), n, at
    if kind == "header_key" and recs[at][2]:
        return _section(recs, at, header_key_length=draw(st.integers(-2**31, -1))), n, at
    if kind == "truncated":  # the last record's bytes gone, the count unchanged
        return _section(recs[:-1]), n, n - 1
    return _section(recs) + draw(st.binary(min_size=1, max_size=9)), n, None


@SETTINGS
@given(lies(), codecs)
def test_a_batch_whose_inside_lies_is_refused_as_invalid_record(lie, codec):
    section, count, at = lie
    buf = batch(section, count, codec=codec)
    assert K.read_header(buf).crc == crc32c.crc32c(bytes(buf[21:]))   # the CRC holds: only the inside lies
    with pytest.raises(InvalidRecordError) as refused:
        check(buf)
    assert refused.value.code == INVALID_RECORD
    if at is None:
        assert record_errors(refused.value) == ()
    else:
        assert isinstance(refused.value, RecordValidationError)
        assert [e.batch_index for e in record_errors(refused.value)] == [at]


def test_a_batch_claiming_2_31_records_in_90_bytes_is_refused():
    # Finding 5: one such batch advanced the partition's offsets by 2^31.
    for codec in range(5):
        buf = batch(record(0, b"k", b"v"), 2**31 - 1, codec=codec)
        with pytest.raises(RecordValidationError) as refused:
            check(buf)
        assert [e.batch_index for e in refused.value.record_errors] == [1]
        assert "premature EOF" in refused.value.record_errors[0].message


def test_a_damaged_crc_or_section_is_a_corrupt_message():
    buf = batch(_section([(b"k", b"v", [], 0)] * 3), 3)
    buf[-1] ^= 1
    with pytest.raises(CorruptRecordError) as refused:
        check(buf)
    assert refused.value.code == CORRUPT_MESSAGE and "CRC" in str(refused.value)
    garbage = bytearray(HEADER.pack(0, 49 + 16, -1, 2, 0, LZ4, 0, NOW, NOW, -1, -1, -1, 1) + b"\x04\x22\x4d\x18" * 4)
    struct.pack_into(">I", garbage, 17, crc32c.crc32c(bytes(garbage[21:])))
    with pytest.raises(CorruptRecordError) as refused:
        check(garbage)
    assert refused.value.code == CORRUPT_MESSAGE


# -- the rules a record breaks on its own ----------------------------------------------------------

def test_timestamps_out_of_range_are_invalid_timestamp_with_each_record_named():
    deltas = [0, HOUR + 1, -5, 10 * 365 * 24 * HOUR, HOUR]
    recs = [(b"k", b"v", [], d) for d in deltas]
    with pytest.raises(TimestampValidationError) as refused:
        check(batch(_section(recs), 5, max_ts=NOW + max(deltas)))
    assert refused.value.code == INVALID_TIMESTAMP
    assert str(refused.value).startswith("One or more records have been rejected due to invalid timestamp")
    assert [e.batch_index for e in refused.value.record_errors] == [1, 3]
    assert refused.value.record_errors[0].message == (
        f"Timestamp {NOW + HOUR + 1} of message with offset 1 is out of range. The timestamp should be "
        f"within [{NOW - (2**63 - 1)}, {NOW + HOUR}]")


def test_the_past_bound_and_what_is_not_checked():
    old = [(b"k", b"v", [], -2 * HOUR)]
    check(batch(_section(old), 1, max_ts=NOW - 2 * HOUR))   # before.max.ms is unbounded by default
    with pytest.raises(TimestampValidationError):
        check(batch(_section(old), 1, max_ts=NOW - 2 * HOUR), RecordRules(NOW, "t-0", timestamp_before_max_ms=HOUR))
    far = [(b"k", b"v", [], 100 * HOUR)]
    # LogAppendTime topics take the broker's clock, and a record without a timestamp (-1) is not judged.
    check(batch(_section(far), 1, max_ts=NOW + 100 * HOUR), RecordRules(NOW, "t-0", create_time=False,
                                                                        timestamp_after_max_ms=0))
    check(batch(_section([(b"k", b"v", [], 0)]), 1, base_ts=-1, max_ts=-1), RecordRules(NOW, "t-0",
                                                                                       timestamp_after_max_ms=0))


def test_records_without_a_key_in_a_compacted_topic_are_each_named():
    n = 3 * MAX_RECORD_FAULTS
    section = b"".join(record(i, None if i % 2 else b"k", b"v") for i in range(n))
    with pytest.raises(RecordValidationError) as refused:
        check(batch(section, n), RecordRules(NOW, "orders-3", keys_required=True))
    errors = refused.value.record_errors
    assert [e.batch_index for e in errors] == list(range(1, n, 2))[:MAX_RECORD_FAULTS]
    assert errors[0].message == "Compacted topic cannot accept message without key in topic partition orders-3"
    assert str(refused.value).startswith(f"One or more records have been rejected due to {n // 2} record errors "
                                         "in total, and only showing the first three errors at most: "
                                         "[RecordError(batchIndex=1, message='Compacted topic")


@pytest.mark.parametrize("codec", range(5))
def test_a_max_timestamp_the_records_contradict_is_corrected_in_place(codec):
    buf = batch(_section([(b"k", b"v", [], 5), (b"k", b"v", [], 9)]), 2, codec=codec, max_ts=NOW + 400 * HOUR)
    info = check(buf)
    assert info.max_timestamp == NOW + 9 == K.validate_batch(bytes(buf), client=True).max_timestamp
    with pytest.raises(TypeError, match="writable"):
        check(bytes(batch(_section([(b"k", b"v", [], 5)]), 1, codec=codec, max_ts=NOW + 400 * HOUR)))


# -- bounded work ----------------------------------------------------------------------------------

def _bomb(codec: int, size: int) -> bytes:
    if codec == ZSTD:
        return zstandard.ZstdCompressor(write_content_size=False).compress(bytes(size))
    return compress(codec, bytes(size))


@pytest.mark.parametrize("codec", range(1, 5))
def test_a_decompression_bomb_is_refused_at_the_limit(codec):
    bomb = _bomb(codec, 8 << 20)
    assert decompress_within(codec, bomb, 1 << 20) is None
    assert len(decompress_within(codec, bomb, 8 << 20)) == 8 << 20
    buf = batch(b"", 1, codec=codec)
    buf[61:] = bomb
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    assert validate_produced(buf, now=NOW, work_limit=1 << 20) is None
    with pytest.raises(CorruptRecordError, match="decompresses to more than"):
        validate_produced(buf, now=NOW, max_decompressed=1 << 20)


def test_a_zstd_frame_declaring_too_much_is_refused_before_it_is_read():
    # The frame says 1 GiB and its blocks are garbage: refused for its size, so never decompressed.
    # Magic, then a descriptor for a single-segment frame with an 8-byte content size (RFC 8878 §3.1.1.1).
    header = b"\x28\xb5\x2f\xfd\xe0" + (1 << 30).to_bytes(8, "little")
    assert zstandard.frame_content_size(header + b"\xff" * 64) == 1 << 30
    assert decompress_within(ZSTD, header + b"\xff" * 64, 1 << 20) is None


def test_work_limit_stops_before_the_crc_and_decompression():
    small = batch(_section([(b"k", b"v" * 100, [], 0)] * 10), 10)
    assert K.try_validate_append(small, len(small) - 1) is None
    info = K.try_validate_append(small, len(small))
    assert info is not None and info.check_cost == len(small)
    packed = batch(_section([(b"k", b"v" * 100, [], 0)] * 10), 10, codec=LZ4)
    info = K.try_validate_append(packed, 1 << 20)
    assert info is not None and info.check_cost > len(small)
    assert K.try_validate_append(packed, info.check_cost - 1) is None
    # A damaged batch past the limit is not judged either: that is the thread's to do.
    packed[-1] ^= 1
    assert K.try_validate_append(packed, len(packed) - 1) is None
