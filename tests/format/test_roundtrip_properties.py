"""Property tests of the v2 codec: whatever we encode decodes back exactly, by every decoder.

Random batches of 0..200 records (null, empty, small and large keys/values so
length varints take 1, 2 and 3 bytes; headers with empty and non-ASCII keys;
timestamps in [0, 2^50] in any order), every codec, producer fields including
base sequences that wrap, transactional and LOG_APPEND_TIME batches. The
expected header values are computed here from the spec (§2), not read back
from the code under test.
"""
from __future__ import annotations

import random
import struct

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import logstore.formats.kafka as K
from logstore.errors import InvalidRecordError
from logstore.native.record_batch import ENCODE_NOGIL_MIN_BYTES, ENCODE_NOGIL_MIN_RECORDS

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.data_too_large])
MAX_SEQ = 2**31 - 1
# Lengths either side of the varint size steps: zigzag doubles, so 64 and 8192 are where 2 and 3 bytes start.
BIG_SIZES = (63, 64, 127, 128, 129, 8191, 8192, 16383, 16384, 16385)


def _big(size_seed):
    size, seed = size_seed
    return random.Random(seed).randbytes(size)


payloads = st.integers(0, 99).flatmap(lambda r: (
    st.none() if r < 10 else
    st.just(b"") if r < 16 else
    st.tuples(st.sampled_from(BIG_SIZES), st.integers(0, 2**32)).map(_big) if r >= 97 else
    st.binary(min_size=1, max_size=40)))
header_keys = st.text(max_size=8) | st.sampled_from(["", "ключ", "キー", "emoji-😀", "trace-id"])
headers = st.lists(st.tuples(header_keys, st.none() | st.just(b"") | st.binary(max_size=16)), max_size=4)
record = st.tuples(payloads, payloads, headers, st.integers(0, 2**50))
producers = st.one_of(
    st.just((-1, -1, -1, False)),
    st.tuples(st.integers(0, 2**63 - 1), st.integers(0, 2**15 - 1),
              st.integers(0, 300) | st.integers(MAX_SEQ - 300, MAX_SEQ), st.booleans()))


@st.composite
def batches(draw, max_records=200):
    """Keyword arguments for encode_batch plus the records they describe."""
    recs = draw(st.lists(record, max_size=max_records))
    pid, epoch, seq, transactional = draw(producers)
    header_lists = [[(k.encode() if draw(st.booleans()) and k else k, v) for k, v in h] for _, _, h, _ in recs]
    return dict(
        keys=[r[0] for r in recs], values=[r[1] for r in recs], headers=header_lists,
        timestamps=[r[3] for r in recs],
        base_offset=draw(st.integers(0, 2**62)), compression=draw(st.sampled_from(range(5))),
        producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=transactional,
        partition_leader_epoch=draw(st.integers(-1, 2**31 - 1)),
        log_append_time=draw(st.none() | st.integers(0, 2**50)))


def expected_records(kw) -> list:
    """The Records the spec says a reader returns for encode_batch(**kw)."""
    out = []
    for i, (key, value, hdrs, ts) in enumerate(zip(kw["keys"], kw["values"], kw["headers"], kw["timestamps"])):
        if kw["log_append_time"] is not None:
            ts = kw["log_append_time"]
        hdrs = tuple((k.decode() if isinstance(k, bytes) else k, v) for k, v in hdrs)
        out.append(K.Record(kw["base_offset"] + i, ts, key, value, hdrs))
    return out


def check_header(h, kw, buf):
    """Every header field against the values §2 prescribes for this input."""
    n = len(kw["keys"])
    ts = kw["timestamps"]
    assert h.position == 0
    assert h.base_offset == kw["base_offset"]
    assert h.batch_length == len(buf) - 12 and h.size_in_bytes == len(buf)
    assert h.partition_leader_epoch == kw["partition_leader_epoch"]
    assert h.magic == 2
    assert h.crc == crc32c.crc32c(buf[21:]) == struct.unpack_from(">I", buf, 17)[0]
    append_time = kw["log_append_time"] is not None
    attributes = kw["compression"] | (0x08 if append_time else 0) | (0x10 if kw["transactional"] else 0)
    assert h.attributes == attributes
    assert (h.compression, h.timestamp_type) == (kw["compression"], int(append_time))
    assert (h.is_transactional, h.is_control, h.has_delete_horizon) == (kw["transactional"], False, False)
    assert h.record_count == n
    assert h.last_offset_delta == max(n - 1, 0)
    assert h.last_offset == kw["base_offset"] + max(n - 1, 0)
    assert h.next_offset == h.last_offset + 1
    assert h.base_timestamp == (ts[0] if n else -1)
    assert h.max_timestamp == (kw["log_append_time"] if append_time else max(ts) if n else -1)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (
        kw["producer_id"], kw["producer_epoch"], kw["base_sequence"])
    assert h.has_producer_id == (kw["producer_id"] >= 0)
    seq = kw["base_sequence"]
    assert h.last_sequence == (-1 if seq < 0 else (seq + max(n - 1, 0)) % 2**31)


def build_with_builder(kw) -> bytes:
    """The same batch through BatchBuilder, one append per record."""
    builder = K.BatchBuilder(
        base_offset=kw["base_offset"], compression=kw["compression"], producer_id=kw["producer_id"],
        producer_epoch=kw["producer_epoch"], base_sequence=kw["base_sequence"],
        transactional=kw["transactional"], partition_leader_epoch=kw["partition_leader_epoch"],
        log_append_time=kw["log_append_time"])
    for key, value, hdrs, ts in zip(kw["keys"], kw["values"], kw["headers"], kw["timestamps"]):
        builder.append(ts, key, value, hdrs)
    assert len(builder) == len(kw["keys"])
    return builder.build()


def column_values(cols, side) -> list:
    """The keys or values of a Columns, None where the validity bitmap says null."""
    n = cols.count
    bounds = struct.unpack(f"<{n + 1}i", memoryview(getattr(cols, side + "_offsets")))
    data = bytes(memoryview(getattr(cols, side + "_data")))
    valid = bytes(memoryview(getattr(cols, side + "_validity")))
    return [data[bounds[i]:bounds[i + 1]] if valid[i >> 3] >> (i & 7) & 1 else None for i in range(n)]


def check_columns(cols, expected):
    """Columns hold exactly `expected` (a list of Record), raw buffers and Arrow view alike."""
    n = len(expected)
    assert cols.count == n
    assert list(struct.unpack(f"<{n}q", memoryview(cols.offsets))) == [r.offset for r in expected]
    assert list(struct.unpack(f"<{n}q", memoryview(cols.timestamps))) == [r.timestamp for r in expected]
    keys, values = column_values(cols, "key"), column_values(cols, "value")
    assert keys == [r.key for r in expected]
    assert values == [r.value for r in expected]
    assert cols.key_null_count == keys.count(None)
    assert cols.value_null_count == values.count(None)
    table = cols.to_arrow()
    table.validate(full=True)
    assert table.schema.names == ["offset", "timestamp", "key", "value"]
    assert table.column("offset").to_pylist() == [r.offset for r in expected]
    assert table.column("timestamp").to_pylist() == [r.timestamp for r in expected]
    assert table.column("key").to_pylist() == [r.key for r in expected]
    assert table.column("value").to_pylist() == [r.value for r in expected]


@SETTINGS
@given(batches())
def test_encoded_batch_decodes_to_its_input_everywhere(kw):
    buf = K.encode_batch(**kw)
    expected = expected_records(kw)
    header = K.validate_batch(buf, deep=True)
    check_header(header, kw, buf)
    check_header(K.read_header(buf), kw, buf)
    assert K.decode_records(buf) == expected
    check_columns(K.decode_columnar(buf), expected)
    entries = list(K.iter_entries(buf))
    assert len(entries) == 1 and K.entry_end(entries[0]) == len(buf)
    assert K.decode_entry(buf, entries[0]) == expected


@SETTINGS
@given(batches())
def test_batch_builder_writes_the_same_bytes_as_encode_batch(kw):
    assert build_with_builder(kw) == K.encode_batch(**kw)


@SETTINGS
@given(batches(max_records=60), st.integers(0, 4000))
def test_try_append_fills_a_batch_up_to_its_limit_and_no_further(kw, limit):
    # Records go in until one would take the uncompressed batch past `limit`; the first always goes in. What
    # went in is exactly the batch encode_batch writes of those records.
    kw["compression"] = 0
    builder = K.BatchBuilder(
        base_offset=kw["base_offset"], producer_id=kw["producer_id"], producer_epoch=kw["producer_epoch"],
        base_sequence=kw["base_sequence"], transactional=kw["transactional"],
        partition_leader_epoch=kw["partition_leader_epoch"], log_append_time=kw["log_append_time"])
    records = list(zip(kw["keys"], kw["values"], kw["headers"], kw["timestamps"]))
    taken = 0
    for key, value, hdrs, ts in records:
        if not builder.try_append(ts, key, value, hdrs, limit):
            break
        taken += 1
    assert taken == len(builder)
    built = builder.build()
    for field in ("keys", "values", "headers", "timestamps"):
        kw[field] = kw[field][:taken]
    assert built == K.encode_batch(**kw)
    assert taken <= 1 or len(built) <= limit
    if taken < len(records):
        key, value, hdrs, ts = records[taken]
        kw.update(keys=kw["keys"] + [key], values=kw["values"] + [value], headers=kw["headers"] + [hdrs],
                  timestamps=kw["timestamps"] + [ts])
        assert taken >= 1 and len(K.encode_batch(**kw)) > limit


@pytest.mark.parametrize("records, value_bytes", [
    (ENCODE_NOGIL_MIN_RECORDS - 1, 3), (ENCODE_NOGIL_MIN_RECORDS, 3),
    (2, ENCODE_NOGIL_MIN_BYTES // 2 - 64), (2, ENCODE_NOGIL_MIN_BYTES // 2)])
def test_encode_batch_writes_the_same_bytes_with_and_without_the_gil(records, value_bytes):
    # Small batches are built holding the GIL, long ones without it: both sides of each threshold.
    kw = {"keys": [b"k%d" % i for i in range(records)], "values": [bytes([i % 251]) * value_bytes
                                                                   for i in range(records)],
          "headers": [[("h", b"%d" % i)] for i in range(records)],
          "timestamps": [1_700_000_000_000 + i for i in range(records)], "base_offset": 7, "compression": K.NONE,
          "producer_id": 3, "producer_epoch": 1, "base_sequence": 0, "transactional": False,
          "partition_leader_epoch": 2, "log_append_time": None}
    buf = K.encode_batch(**kw)
    assert build_with_builder(kw) == buf
    assert K.decode_records(buf) == expected_records(kw)


@SETTINGS
@given(batches(max_records=20))
def test_client_rules_accept_exactly_what_a_producer_may_send(kw):
    buf = K.encode_batch(**kw)
    # Kafka overwrites the base offset in place, so any base offset is fine (§8.2).
    allowed = (len(kw["keys"]) > 0 and kw["log_append_time"] is None
               and (kw["producer_id"] < 0 or kw["base_sequence"] >= 0))
    if allowed:
        K.validate_batch(buf, client=True)
    else:
        with pytest.raises(InvalidRecordError):
            K.validate_batch(buf, client=True)


@SETTINGS
@given(batches(max_records=20), st.integers(0, 2**62))
def test_batch_moved_to_another_base_offset_keeps_its_crc(kw, new_base):
    # The broker assigns offsets in place (§2.7): baseOffset is outside the CRC.
    buf = bytearray(K.encode_batch(**kw))
    struct.pack_into(">q", buf, 0, new_base)
    records = K.decode_records(bytes(buf))
    assert [r.offset for r in records] == [new_base + i for i in range(len(kw["keys"]))]
    assert K.validate_batch(bytes(buf), deep=True).crc == struct.unpack_from(">I", buf, 17)[0]


def _slice(kw, a, b, base_offset):
    """Records [a, b) of kw as a batch of their own at base_offset."""
    part = {k: (v[a:b] if isinstance(v, list) else v) for k, v in kw.items()}
    part["base_offset"] = base_offset
    return part


@SETTINGS
@given(batches(max_records=60), st.data())
def test_columnar_builder_returns_exactly_the_records_in_range(kw, data):
    n = len(kw["keys"])
    bounds = [0] + sorted(data.draw(st.lists(st.integers(0, n), max_size=4))) + [n]
    parts = [_slice(kw, a, b, 1000 + a) for a, b in zip(bounds, bounds[1:]) if b > a]
    encoded = [K.encode_batch(**p) for p in parts]
    if encoded and data.draw(st.booleans()):
        # A transaction marker between data batches: skipped by default.
        encoded.insert(1, K.encode_control_batch(True, 5, 7, 0, 99, base_offset=1000 + n))
    start = data.draw(st.integers(995, 1005 + n))
    end = data.draw(st.integers(995, 1005 + n))
    stream = b"".join(encoded)
    builder = K.ColumnarBuilder()
    pos = 0
    for batch in encoded:
        header = builder.add_batch(stream, pos, start_offset=start, end_offset=end)
        assert header.position == pos and header.size_in_bytes == len(batch)
        pos += len(batch)
    everything = [r for p in parts for r in expected_records(p)]
    wanted = [r for r in everything if start <= r.offset < end]
    assert builder.count == len(wanted)
    check_columns(builder.finish(), wanted)
    assert builder.count == 0
    check_columns(builder.finish(), [])


def test_control_records_are_kept_when_asked():
    marker = K.encode_control_batch(False, 11, 7, 2, 1234, base_offset=50)
    builder = K.ColumnarBuilder()
    assert builder.add_batch(marker).is_control
    assert builder.count == 0
    builder.add_batch(marker, skip_control=False)
    check_columns(builder.finish(), K.decode_records(marker))
    check_columns(K.decode_columnar(marker), K.decode_records(marker))


@SETTINGS
@given(st.integers(0, MAX_SEQ), st.integers(0, MAX_SEQ))
def test_sequence_arithmetic_wraps_at_int32_max(seq, n):
    assert K.increment_sequence(seq, n) == (seq + n) % 2**31
    assert K.decrement_sequence(K.increment_sequence(seq, n), n) == seq


@pytest.mark.parametrize("level", [3, 9, 12])
def test_lz4_refuses_levels_that_select_lz4_hc(level):
    with pytest.raises(ValueError, match="LZ4-HC"):
        K.encode_batch([b"k"], [b"v"], timestamps=1, compression=K.LZ4, compression_level=level)
