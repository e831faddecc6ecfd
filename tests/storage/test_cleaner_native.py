"""The cleaner's native offset map and batch filter against a plain-Python model of Kafka's rules."""
from __future__ import annotations

import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from logstore.errors import CorruptRecordError
from logstore.native.cleaner import OffsetMap, count_null_keys, empty_batch, filter_batch, key_digest
from logstore.native.record_batch import decode_records, encode_batch, encode_control_batch, validate_batch

KEYS = [b"", b"a", b"b", b"key-c", b"d" * 40]
NOW = 1_700_000_000_000
RETENTION = 5_000


@given(st.binary(max_size=300))
def test_digest_is_xxh3_128(key):
    assert key_digest(key) == xxhash.xxh3_128_digest(key)


@given(st.lists(st.tuples(st.sampled_from(KEYS + [b"k%d" % i for i in range(40)]),
                          st.integers(0, 10_000)), max_size=200))
def test_offset_map_keeps_the_last_put_per_key_until_full(puts):
    offset_map = OffsetMap(20 * 50, load_factor=0.5)   # room for 25 keys
    offset_map.clear(0)
    model: dict[bytes, int] = {}
    for key, offset in puts:
        stored = offset_map.put(key, offset)
        assert stored == (len(model) < 25), "a full map refuses every put, as Kafka's maxDesiredMapSize check does"
        if stored:
            model[key] = offset
            assert offset_map.latest_offset == offset
    assert offset_map.size == len(model)
    for key, offset in model.items():
        assert offset_map.get(key) == offset
    assert offset_map.get(b"never put") == -1


def test_offset_map_memory_per_key_is_within_target():
    offset_map = OffsetMap(128 * 1024 * 1024)
    assert offset_map.bytes_per_entry <= 24
    assert offset_map.capacity == int(offset_map.slots * 0.9)


def test_offsets_past_the_slot_range_end_the_round():
    offset_map = OffsetMap(2000)
    offset_map.clear(10)
    assert not offset_map.put(b"k", 9)
    assert not offset_map.put(b"k", 10 + 0xFFFFFFFF)
    assert offset_map.put(b"k", 10 + 0xFFFFFFFE)


def test_put_batch_maps_keys_from_the_start_offset_and_stops_when_full():
    batch = encode_batch([b"a", None, b"b", b"a", b"c"], [b"1", b"2", b"3", b"4", b"5"], base_offset=100,
                         timestamps=NOW)
    offset_map = OffsetMap(20 * 10)
    offset_map.clear(100)
    assert offset_map.put_batch(batch, 0, 101)
    assert (offset_map.get(b"a"), offset_map.get(b"b"), offset_map.get(b"c")) == (103, 102, 104)
    assert offset_map.latest_offset == 104
    small = OffsetMap(20 * 2, load_factor=1.0)
    small.clear(100)
    assert not small.put_batch(batch, 0, 100)
    assert small.latest_offset == 102, "the round ends after the last key the map took"


def test_filter_refuses_a_truncated_batch():
    batch = encode_batch([b"a"], [b"1"], timestamps=NOW)
    offset_map = OffsetMap(2000)
    with pytest.raises(CorruptRecordError):
        filter_batch(offset_map, batch[:-3], 0, discard_records=False, retain_empty=False,
                     marker_for_empty_txn=False, now_ms=NOW, delete_retention_ms=RETENTION)


records = st.lists(st.tuples(st.one_of(st.none(), st.sampled_from(KEYS)),
                             st.one_of(st.none(), st.binary(max_size=30)),
                             st.integers(-5_000, 5_000)), min_size=1, max_size=12)


def _expected(batch_records, base, mapped, latest, discard, horizon, now):
    """Kafka's shouldRetainRecord over (offset, key, value, timestamp) tuples."""
    kept = []
    for i, (key, value, ts) in enumerate(batch_records):
        offset = base + i
        if discard:
            continue
        if offset > latest:
            kept.append((offset, key, value, ts))
        elif key is not None:
            if offset >= mapped.get(key, -1) and (value is not None or horizon is None or now < horizon):
                kept.append((offset, key, value, ts))
    return kept


@settings(max_examples=300, deadline=None)
@given(records, st.sampled_from([0, 1, 3, 4]), st.integers(0, 30), st.booleans(), st.booleans(),
       st.integers(-1, 14), st.booleans(), st.booleans())
def test_filter_batch_matches_kafkas_rules(batch_records, codec, map_shift, discard, retain_empty, latest_shift,
                                          empty_txn_marker, second_pass_after_horizon):
    base = 1_000
    keys = [k for k, _, _ in batch_records]
    values = [v for _, v, _ in batch_records]
    stamps = [NOW + t for _, _, t in batch_records]
    batch = encode_batch(keys, values, timestamps=stamps, base_offset=base, compression=codec,
                         producer_id=7, producer_epoch=2, base_sequence=40, transactional=False)
    # The map: some keys' latest offsets land inside the batch, some after it.
    offset_map = OffsetMap(20 * 100)
    offset_map.clear(base)
    mapped = {}
    for i, key in enumerate(keys):
        if key is not None:
            mapped[key] = base + i + (map_shift if (i + map_shift) % 3 == 0 else 0)
    for key, offset in mapped.items():
        assert offset_map.put(key, offset)
    latest = base + latest_shift if latest_shift < len(keys) else max(mapped.values(), default=base - 1)
    offset_map.update_latest(latest)
    latest = offset_map.latest_offset
    full = [(k, v, NOW + t) for k, v, t in batch_records]
    expected = _expected(full, base, mapped, latest, discard, None, NOW)

    out, kept, removed = filter_batch(offset_map, batch, 0, discard_records=discard, retain_empty=retain_empty,
                                      marker_for_empty_txn=empty_txn_marker, now_ms=NOW,
                                      delete_retention_ms=RETENTION)
    assert (kept, removed) == (len(expected), len(full) - len(expected))
    original = validate_batch(batch, deep=True)
    if not expected:
        if not retain_empty:
            assert out is None
            return
        header = validate_batch(bytes(out), deep=True)
        assert header.record_count == 0 and header.compression == 0 and header.base_timestamp == -1
        assert (header.base_offset, header.last_offset) == (original.base_offset, original.last_offset)
        assert header.max_timestamp == original.max_timestamp
        return
    out = bytes(out)
    header = validate_batch(out, deep=True)
    set_horizon = any(v is None for _, _, v, _ in expected) or empty_txn_marker
    if len(expected) == len(full) and not set_horizon:
        assert out == batch, "an untouched batch is copied as it was"
    assert (header.base_offset, header.last_offset, header.producer_id, header.producer_epoch,
            header.base_sequence, header.compression) == (base, original.last_offset, 7, 2, 40, codec)
    assert header.has_delete_horizon == set_horizon
    if set_horizon:
        assert header.base_timestamp == NOW + RETENTION
    assert header.max_timestamp == max(ts for _, _, _, ts in expected)
    got = [(r.offset, r.key, r.value, r.timestamp) for r in decode_records(out)]
    assert got == expected

    if set_horizon and second_pass_after_horizon:
        # Past the horizon, the tombstones that are still the latest for their key go; the rest stays as is.
        later = NOW + RETENTION
        again, kept2, _ = filter_batch(offset_map, out, 0, discard_records=False, retain_empty=False,
                                       marker_for_empty_txn=False, now_ms=later, delete_retention_ms=RETENTION)
        expected2 = [(o, k, v, t) for o, k, v, t in expected
                     if o > latest or v is not None]
        assert kept2 == len(expected2)
        if not expected2:
            assert again is None
            return
        header2 = validate_batch(bytes(again), deep=True)
        assert header2.has_delete_horizon and header2.base_timestamp == NOW + RETENTION
        assert [(r.offset, r.key, r.value, r.timestamp) for r in decode_records(bytes(again))] == expected2


@pytest.mark.parametrize("discard", [False, True])
def test_control_batches_keep_their_marker_until_discarded(discard):
    marker = encode_control_batch(True, 3, producer_id=9, producer_epoch=1, timestamp=NOW, base_offset=50)
    offset_map = OffsetMap(2000)
    offset_map.clear(0)
    offset_map.update_latest(100)
    out, kept, removed = filter_batch(offset_map, marker, 0, discard_records=discard, retain_empty=False,
                                      marker_for_empty_txn=True, now_ms=NOW, delete_retention_ms=RETENTION)
    if discard:
        assert (out, kept, removed) == (None, 0, 1)
        return
    header = validate_batch(bytes(out), deep=True)
    assert (kept, removed) == (1, 0)
    assert header.is_control and header.has_delete_horizon and header.base_timestamp == NOW + RETENTION
    assert bytes(out)[61:] != b"" and decode_records(bytes(out))[0].offset == 50


def test_a_discarded_last_batch_of_a_producer_stays_as_an_empty_header():
    batch = encode_batch([b"a", b"b"], [b"1", b"2"], timestamps=NOW, base_offset=10, compression=3,
                         producer_id=5, producer_epoch=0, base_sequence=8, transactional=True)
    offset_map = OffsetMap(2000)
    offset_map.clear(0)
    out, kept, removed = filter_batch(offset_map, batch, 0, discard_records=True, retain_empty=True,
                                      marker_for_empty_txn=False, now_ms=NOW, delete_retention_ms=RETENTION)
    header = validate_batch(bytes(out), deep=True)
    assert (kept, removed) == (0, 2)
    assert (header.record_count, header.last_sequence, header.is_transactional, header.compression) == (0, 9, True, 0)
    # An already-empty batch that need not stay goes (Kafka drops it).
    out2, _, _ = filter_batch(offset_map, bytes(out), 0, discard_records=False, retain_empty=False,
                              marker_for_empty_txn=False, now_ms=NOW, delete_retention_ms=RETENTION)
    assert out2 is None


def test_an_offset_holding_batch_is_a_valid_empty_batch():
    header = validate_batch(empty_batch(12_345), deep=True)
    assert (header.base_offset, header.last_offset, header.record_count) == (12_345, 12_345, 0)
    assert (header.producer_id, header.is_transactional, header.is_control) == (-1, False, False)


@pytest.mark.parametrize("codec", [0, 3])
def test_null_keys_are_counted_in_every_codec(codec):
    batch = encode_batch([b"a", None, b"", None], [b"1", b"2", None, b"4"], timestamps=NOW, compression=codec)
    assert count_null_keys(batch, 0) == 2
    assert count_null_keys(encode_batch([b"k"], [None], timestamps=NOW), 0) == 0
