"""kafka-python 3.0.12 as an independent oracle for the v2 and legacy codecs.

Both directions for every codec kafka-python can run here: what we encode,
kafka-python decodes to the same records (and its CRC check passes); what
kafka-python encodes, we decode to the same records (and validate deeply).
Legacy magic 0/1 messages and wrappers come from kafka-python's
LegacyRecordBatchBuilder and go through our decode_legacy / iter_entries.
"""
from __future__ import annotations

import struct
import zlib

import kafka.codec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatch, LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

import fuzzing
import logstore.formats.kafka as K
from logstore.errors import CorruptRecordError
from logstore.native.compression import decompress

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.data_too_large])
HAS_CODEC = {0: lambda: True, 1: kafka.codec.has_gzip, 2: kafka.codec.has_snappy,
             3: kafka.codec.has_lz4, 4: kafka.codec.has_zstd}


def test_kafka_python_has_every_codec():
    # Every oracle test below runs for all five codecs only if this holds; a missing
    # codec library must show up as a failure, not as quietly fewer comparisons.
    missing = [K.CODEC_NAMES[c] for c, has in HAS_CODEC.items() if not has()]
    assert not missing, f"kafka-python lacks codec libraries for {missing}"


CODECS = [c for c, has in HAS_CODEC.items() if has()]

payloads = st.none() | st.binary(max_size=40) | st.sampled_from([b"", b"x" * 200, b"abc" * 6000])
headers = st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=12)), max_size=3)
records = st.lists(st.tuples(payloads, payloads, headers, st.integers(0, 2**50)), min_size=1, max_size=60)
producers = st.one_of(st.just((-1, -1, -1, False)),
                      st.tuples(st.integers(0, 2**63 - 1), st.integers(0, 2**15 - 1),
                                st.integers(0, 2**31 - 1), st.booleans()))


def _kafka_python_records(buf: bytes) -> tuple[DefaultRecordBatch, list]:
    batch = DefaultRecordBatch(buf)
    assert batch.validate_crc()  # before iteration, as kafka-python requires
    return batch, [(r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers]) for r in batch]


def _ours(records) -> list:
    return [(r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers]) for r in records]


@SETTINGS
@given(st.sampled_from(CODECS), records, producers, st.integers(0, 2**62), st.integers(-1, 2**31 - 1),
       st.none() | st.integers(0, 2**50))
def test_what_we_encode_kafka_python_decodes(codec, recs, producer, base_offset, leader_epoch, append_time):
    pid, epoch, seq, transactional = producer
    buf = K.encode_batch([r[0] for r in recs], [r[1] for r in recs], [r[2] for r in recs],
                         [r[3] for r in recs], base_offset=base_offset, compression=codec,
                         producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                         transactional=transactional, partition_leader_epoch=leader_epoch,
                         log_append_time=append_time)
    batch, theirs = _kafka_python_records(buf)
    expected = [(base_offset + i, r[3] if append_time is None else append_time, r[0], r[1], list(r[2]))
                for i, r in enumerate(recs)]
    assert theirs == expected
    assert (batch.base_offset, batch.leader_epoch, batch.magic) == (base_offset, leader_epoch, 2)
    assert (batch.compression_type, batch.timestamp_type, batch.is_transactional, batch.is_control_batch) == (
        codec, int(append_time is not None), transactional, False)
    assert (batch.first_timestamp, batch.max_timestamp) == (
        recs[0][3], max(r[3] for r in recs) if append_time is None else append_time)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (pid, epoch, seq)
    assert (batch.last_offset_delta, batch.records_count) == (len(recs) - 1, len(recs))
    if seq >= 0:
        assert batch.last_sequence == K.read_header(buf).last_sequence


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from(CODECS), records), min_size=1, max_size=4))
def test_kafka_python_walks_a_log_of_our_batches(parts):
    log, offset, expected = b"", 0, []
    for codec, recs in parts:
        log += K.encode_batch([r[0] for r in recs], [r[1] for r in recs], [r[2] for r in recs],
                              [r[3] for r in recs], base_offset=offset, compression=codec)
        expected += [(offset + i, r[3], r[0], r[1], list(r[2])) for i, r in enumerate(recs)]
        offset += len(recs)
    theirs = []
    memory = MemoryRecords(log)
    while memory.has_next():
        batch = memory.next_batch()
        assert batch.validate_crc()
        theirs += [(r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers]) for r in batch]
    assert theirs == expected


@SETTINGS
@given(st.sampled_from(CODECS), records, producers, st.integers(0, 2**62), st.integers(-1, 2**31 - 1))
def test_what_kafka_python_encodes_we_decode(codec, recs, producer, base_offset, leader_epoch):
    pid, epoch, seq, transactional = producer
    builder = MemoryRecordsBuilder(2, codec, 1 << 30, transactional=transactional, producer_id=pid,
                                   producer_epoch=epoch, base_sequence=seq)
    for key, value, hdrs, ts in recs:
        assert builder.append(ts, key, value, hdrs) is not None
    builder.close()
    buf = bytearray(builder.buffer())
    # The broker's in-place assignment (§2.7): both fields are outside the CRC.
    struct.pack_into(">qii", buf, 0, base_offset, len(buf) - 12, leader_epoch)
    buf = bytes(buf)
    _, theirs = _kafka_python_records(buf)
    header = K.validate_batch(buf, deep=True)
    assert _ours(K.decode_records(buf)) == theirs
    assert [(o, t, k, v, [(hk, hv) for hk, hv in h]) for o, t, k, v, h in theirs] == [
        (base_offset + i, r[3], r[0], r[1], list(r[2])) for i, r in enumerate(recs)]
    assert header.compression == buf[22] & 0x07  # kafka-python sends uncompressed when it does not pay
    assert (header.base_offset, header.partition_leader_epoch) == (base_offset, leader_epoch)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (pid, epoch, seq)
    assert header.is_transactional == transactional and header.record_count == len(recs)
    columns = K.decode_columnar(buf).to_arrow()
    assert columns.column("key").to_pylist() == [r[0] for r in recs]
    assert columns.column("value").to_pylist() == [r[1] for r in recs]


@SETTINGS
@given(st.sampled_from(CODECS), st.lists(st.tuples(st.integers(1, 3), payloads, st.integers(0, 2**50)),
                                         min_size=1, max_size=30))
def test_kafka_python_offset_gaps_decode_to_the_same_offsets(codec, steps):
    # Offset deltas with gaps, as a compacted batch has them; the first delta need not be 0.
    builder = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, 1 << 30)
    offset = 0
    for gap, value, ts in steps:
        offset += gap
        builder.append(offset, ts, None, value, [])
    buf = bytes(builder.build())
    _, theirs = _kafka_python_records(buf)
    header = K.validate_batch(buf, deep=True)
    assert header.last_offset_delta == offset
    assert _ours(K.decode_records(buf)) == theirs
    assert [o for o, *_ in theirs] == [sum(g for g, _, _ in steps[:i + 1]) for i in range(len(steps))]


def test_kafka_python_control_batches_agree():
    for commit in (True, False):
        buf = K.encode_control_batch(commit, 77, 4242, 3, 2**40, base_offset=10)
        batch, theirs = _kafka_python_records(buf)
        assert batch.is_control_batch and batch.is_transactional
        record = next(iter(DefaultRecordBatch(buf)))
        assert (record.type, record.version, record.commit) == (int(commit), 0, commit)
        ours = K.read_control_record(K.decode_records(buf)[0])
        assert (ours.type, ours.version, ours.coordinator_epoch) == (int(commit), 0, 77)


# ---------------------------------------------------------------------------
# Legacy: magic 0 and 1, plain message sets and compressed wrappers


def _wrap64(n: int) -> int:
    return (n + 2**63) % 2**64 - 2**63


def _kafka_python_misreads(buf: bytes) -> bool:
    """Whether kafka-python parses this batch differently from Kafka's Java reader by design.

    It reads the record attributes byte as a varint (so >= 0x80 shifts the record), and it
    keeps varint bits past 32 (64 for the timestamp delta) that Java's int arithmetic drops.
    """
    plain = buf[61:] if buf[22] & 0x07 == 0 else decompress(buf[22] & 0x07, buf[61:])
    for fields in fuzzing.record_fields(plain):
        for name, start, end in fields:
            if name == "attributes":
                if plain[start] >= 0x80:
                    return True
            elif name.endswith(("length", "delta", "count")):
                raw = sum((b & 0x7F) << (7 * i) for i, b in enumerate(plain[start:end]))
                if raw >= 1 << (64 if name == "timestamp_delta" else 32):
                    return True
    return False


def test_kafka_python_reads_mutated_batches_we_accept_the_same_way():
    # Hostile-input differential: a mutated batch we accept must mean the same records to
    # kafka-python whenever it accepts it too. It refuses some that Kafka's Java reader takes
    # (header keys that are not UTF-8, bytes after a gzip member), so its refusals prove
    # nothing, and batches it parses differently from Java by design are left out (see
    # _kafka_python_misreads). Offsets and timestamps wrap
    # at 64 bits as in Java; kafka-python's are unbounded ints.
    seed = 20261121
    seeds = [s for s in fuzzing.build_seeds(seed) if s.kind == "v2"]
    compared, mismatches = 0, []
    for index in range(6000):
        buf, desc = fuzzing.mutate(seeds, seed, index)
        try:
            if K.read_header(buf).size_in_bytes != len(buf):
                continue
            ours = _ours(K.decode_records(buf))
        except CorruptRecordError:
            continue
        if _kafka_python_misreads(buf):
            continue
        batch = DefaultRecordBatch(buf)
        if not batch.validate_crc():
            mismatches.append(f"{desc}: kafka-python's CRC check fails on a batch we accepted")
            continue
        try:
            theirs = [(_wrap64(r.offset), _wrap64(r.timestamp), r.key, r.value, [tuple(h) for h in r.headers])
                      for r in batch]
        except Exception:  # kafka-python's own strictness, see above
            continue
        compared += 1
        if theirs != ours:
            mismatches.append(f"{desc}: ours {ours[:2]} vs kafka-python {theirs[:2]}")
    assert not mismatches, f"{len(mismatches)} batches read differently, first: {mismatches[0]}"
    assert compared > 1000, f"only {compared} mutated batches accepted by both: the comparison is vacuous"


LEGACY_CODECS = [c for c in (0, 1, 2, 3) if HAS_CODEC[c]()]
legacy_records = st.lists(st.tuples(payloads, payloads, st.integers(0, 2**50)), min_size=1, max_size=30)


def _legacy_build(magic, codec, recs, first_offset):
    builder = LegacyRecordBatchBuilder(magic, codec, 1 << 30)
    for i, (key, value, ts) in enumerate(recs):
        assert builder.append(first_offset + i, ts, key, value) is not None
    return bytes(builder.build())


def _expected_legacy(magic, recs, first_offset, wrapper_ts=None):
    return [(first_offset + i, -1 if magic == 0 else ts if wrapper_ts is None else wrapper_ts, key, value)
            for i, (key, value, ts) in enumerate(recs)]


def _legacy_rows(records):
    return [(r.offset, r.timestamp, r.key, r.value) for r in records]


@SETTINGS
@given(st.sampled_from([0, 1]), legacy_records, st.integers(0, 2**40))
def test_kafka_python_legacy_message_sets_decode(magic, recs, first_offset):
    buf = _legacy_build(magic, 0, recs, first_offset)
    entries = list(K.iter_entries(buf))
    assert len(entries) == len(recs) and K.entry_end(entries[-1]) == len(buf)
    rows = []
    for entry in entries:
        assert isinstance(entry, K.LegacyEntry) and entry.magic == magic and entry.compression == 0
        assert entry.base_offset == entry.last_offset == entry.offset
        rows += _legacy_rows(K.decode_entry(buf, entry))
        assert _legacy_rows(K.decode_legacy(buf, entry.position).records) == _legacy_rows(entry.records)
    assert rows == _expected_legacy(magic, recs, first_offset)


@SETTINGS
@given(st.sampled_from([0, 1]), st.sampled_from([c for c in LEGACY_CODECS if c]), legacy_records,
       st.integers(0, 2**40))
def test_kafka_python_legacy_wrappers_decode(magic, codec, recs, first_offset):
    # kafka-python writes wrapper offset 0: magic 0 inner offsets are absolute, magic 1 with
    # wrapper offset 0 keeps the inner offsets as they are (Kafka's special case, §4).
    buf = _legacy_build(magic, codec, recs, first_offset if magic == 0 else 0)
    entry = K.decode_legacy(buf)
    expected = _expected_legacy(magic, recs, first_offset if magic == 0 else 0)
    assert (entry.magic, entry.compression, entry.size_in_bytes) == (magic, codec, len(buf))
    assert _legacy_rows(entry.records) == expected
    theirs = [(r.offset, -1 if r.timestamp is None else r.timestamp, r.key, r.value)
              for r in LegacyRecordBatch(buf, magic)]
    assert theirs == expected
    assert [_legacy_rows(K.decode_entry(buf, e)) for e in K.iter_entries(buf)] == [expected]


def _set_wrapper(buf: bytes, offset=None, attributes=None, timestamp=None) -> bytes:
    """Rewrite a magic 1 wrapper's offset (outside the CRC) and attributes/timestamp (CRC recomputed)."""
    out = bytearray(buf)
    if offset is not None:
        struct.pack_into(">q", out, 0, offset)
    if attributes is not None:
        out[17] = attributes
    if timestamp is not None:
        struct.pack_into(">q", out, 18, timestamp)
    struct.pack_into(">I", out, 12, zlib.crc32(out[16:]))
    return bytes(out)


@SETTINGS
@given(st.sampled_from([c for c in LEGACY_CODECS if c]), legacy_records, st.integers(0, 2**40),
       st.none() | st.integers(0, 2**50))
def test_magic1_wrapper_offsets_are_relative_to_its_last_inner(codec, recs, last_offset, append_time):
    buf = _legacy_build(1, codec, recs, 0)
    attributes = codec | (0x08 if append_time is not None else 0)
    buf = _set_wrapper(buf, offset=last_offset + len(recs) - 1, attributes=attributes, timestamp=append_time)
    entry = K.decode_legacy(buf)
    first = last_offset
    assert _legacy_rows(entry.records) == _expected_legacy(1, recs, first, append_time)
    assert entry.timestamp_type == int(append_time is not None)
    assert (entry.base_offset, entry.last_offset) == (first, first + len(recs) - 1)
    theirs = [(r.offset, r.timestamp, r.key, r.value) for r in LegacyRecordBatch(buf, 1)]
    assert theirs == _legacy_rows(entry.records)


@pytest.mark.parametrize("codec", [c for c in LEGACY_CODECS if c])
def test_mixed_legacy_and_v2_log_walks_in_order(codec):
    v0 = _legacy_build(0, codec, [(b"a", b"1", 5), (None, b"2", 6)], 0)
    v1 = _set_wrapper(_legacy_build(1, codec, [(b"b", None, 7), (b"c", b"", 8)], 0), offset=3)
    v1_plain = _legacy_build(1, 0, [(b"d", b"4", 9)], 4)
    v2 = K.encode_batch([b"e", None], [b"5", b"6"], None, [10, 11], base_offset=5, compression=codec)
    log = v0 + v1 + v1_plain + v2
    rows = [row for e in K.iter_entries(log) for row in _legacy_rows(K.decode_entry(log, e))]
    assert rows == [(0, -1, b"a", b"1"), (1, -1, None, b"2"), (2, 7, b"b", None), (3, 8, b"c", b""),
                    (4, 9, b"d", b"4"), (5, 10, b"e", b"5"), (6, 11, None, b"6")]
