"""The kafka format reads and patches header fields through the native codec (native/batch_header.pxd).

Scenarios: the peeks agree with the full validator, a magic 1 entry's peeked
timestamp is its own, offsets assigned in place equal a batch encoded with
them, and the Produce handler's peek of a records field.
"""
from __future__ import annotations

import pytest

from fuzzing import legacy_message
from logstore.errors import CorruptRecordError
from logstore.formats import kafka as K

TS = 1_700_000_000_000


def _batch(**kw) -> bytes:
    return K.encode_batch([b"k1", b"k2", None], [b"v1", None, b"v3"], timestamps=[TS, TS + 7, TS + 3], **kw)


BATCHES = {
    "plain": _batch(),
    "idempotent lz4": _batch(producer_id=42, producer_epoch=3, base_sequence=2147483646, compression=K.LZ4,
                             base_offset=1000, partition_leader_epoch=9),
    "transactional": _batch(producer_id=7, producer_epoch=1, base_sequence=0, transactional=True),
    "marker": K.build_control_batch(True, 5, 7, 1, TS, base_offset=12),
}


@pytest.mark.parametrize("name", sorted(BATCHES))
def test_the_peeks_agree_with_the_validator(name):
    buf = b"\x00" * 5 + BATCHES[name]
    full = K.validate_batch(buf, 5)
    assert K.peek_entry(buf, 5) == K.EntryBounds(5, full.size_in_bytes, full.base_offset, full.last_offset,
                                                 full.max_timestamp, 2)
    assert K.peek_producer_batch(buf, 5) == K.ProducerBatch(
        5, full.size_in_bytes, full.base_offset, full.last_offset, full.max_timestamp, full.producer_id,
        full.producer_epoch, full.base_sequence, full.last_sequence, full.is_transactional, full.is_control,
        full.partition_leader_epoch)
    assert K.entry_prefix(buf, 5) == K.EntryPrefix(5, full.base_offset, full.size_in_bytes, 2)
    # One byte short of the header: nothing to peek yet.
    assert K.peek_entry(buf[:5 + 60], 5) is None and K.peek_producer_batch(buf[:5 + 60], 5) is None


def test_a_sequence_that_wraps_is_peeked_wrapped():
    peeked = K.peek_producer_batch(BATCHES["idempotent lz4"])
    assert (peeked.base_sequence, peeked.last_sequence) == (2147483646, 0)  # 2^31 - 2, 2^31 - 1, 0


def test_a_magic_1_entry_peeks_its_own_timestamp():
    entry = legacy_message(41, 1, 0, TS + 123, b"key", b"value")
    decoded = next(K.iter_entries(entry))
    assert decoded.timestamp == TS + 123
    assert K.peek_entry(entry) == K.EntryBounds(0, len(entry), 41, 41, TS + 123, 1)
    assert K.peek_entry(legacy_message(3, 0, 0, -1, None, b"v")).max_timestamp == -1
    # The timestamp ends 26 bytes in: a shorter buffer cannot say it.
    assert K.peek_entry(entry[:25]) is None and K.peek_entry(entry[:26]).max_timestamp == TS + 123


@pytest.mark.parametrize("append_time", [None, TS + 500])
def test_assigned_offsets_equal_a_batch_encoded_with_them(append_time):
    buf = bytearray(_batch(producer_id=3, producer_epoch=0, base_sequence=0) * 2)
    info = K.validate_append(buf)
    assert K.assign_offsets(buf, info, 100, leader_epoch=4, log_append_time=append_time) == 105
    for base, header in zip((100, 103), K.validate_records(buf)):
        assert (header.base_offset, header.partition_leader_epoch) == (base, 4)
        if append_time is None:
            assert header.timestamp_type == K.CREATE_TIME and header.max_timestamp == TS + 7
        else:
            assert header.timestamp_type == K.LOG_APPEND_TIME and header.max_timestamp == append_time
            assert [r.timestamp for r in K.decode_records(buf, header.position)] == [append_time] * 3
    expected = _batch(producer_id=3, producer_epoch=0, base_sequence=0, base_offset=100, partition_leader_epoch=4)
    if append_time is None:
        assert bytes(buf[:len(expected)]) == expected


def test_assign_offsets_refuses_a_read_only_buffer():
    buf = _batch()
    with pytest.raises(TypeError):
        K.assign_offsets(buf, K.validate_append(buf), 0)


def test_a_crc_mismatch_is_reported_at_the_crc_field():
    v2 = bytearray(BATCHES["plain"])
    v2[-1] ^= 0xFF
    header = next(K.iter_entries(v2, verify_crc=False))
    with pytest.raises(CorruptRecordError) as caught:
        K.validate_batch(v2, 0)
    assert caught.value.position == K.crc_position(header) == 17
    v1 = bytearray(legacy_message(0, 1, 0, TS, b"k", b"v"))
    v1[-1] ^= 0xFF
    entry = K.decode_legacy(v1, 0, verify_crc=False)
    with pytest.raises(CorruptRecordError) as caught:
        K.decode_legacy(v1, 0)
    assert caught.value.position == K.crc_position(entry) == 12


def test_an_entry_prefix_says_whether_it_frames_an_entry():
    assert K.entry_prefix(b"\x00" * 16) is None
    garbage = K.entry_prefix(bytes(8) + (30).to_bytes(4, "big") + bytes(4) + b"\x07")
    assert (garbage.magic, garbage.magic_position, garbage.is_framed) == (7, 16, False)
    too_small = K.entry_prefix(bytes(8) + (13).to_bytes(4, "big") + bytes(4) + b"\x00")
    assert too_small.size == 25 and not too_small.is_framed


def test_the_produce_handler_peeks_the_first_batch():
    txn = BATCHES["transactional"]
    assert K.peek_produced_batch(txn) == K.ProducedBatch(2, len(txn), True, 7, 1)
    assert K.peek_produced_batch(txn + BATCHES["plain"]).size == len(txn)
    assert K.peek_produced_batch(txn[:16]) is None
    # The header cut short: magic and size only; the append's validator refuses the rest.
    assert K.peek_produced_batch(txn[:60]) == K.ProducedBatch(2, len(txn), False, -1, -1)
    legacy = legacy_message(0, 1, 0, TS, b"k", b"v")
    assert K.peek_produced_batch(legacy) == K.ProducedBatch(1, len(legacy), False, -1, -1)
