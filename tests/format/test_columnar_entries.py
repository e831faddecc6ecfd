"""ColumnarBuilder.add_entries, the scan's native loop over a chunk of a segment, against the per-entry path.

`PartitionScan.read_arrow` hands a whole chunk to `add_entries`, which walks
its batches without coming back to Python per batch. It must keep exactly
what the per-entry path (`iter_entries` + `add_batch`) keeps: records in
[start, end), control batches left out, CRCs checked; and stop where that path
would: at a partial tail (NEED_BYTES), at the first entry at or past the end
(END), after the batch that fills the builder (FULL), at a magic 0/1 entry
the caller decodes (LEGACY). Also here: `timestamp_micros`, Spark's unit.
"""
from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fuzzing
import logstore.formats.kafka as K
from logstore.errors import CorruptRecordError
from logstore.formats import protocol
from logstore.native import record_batch as R

COLUMNS = ("offset", "timestamp", "key", "value", "timestampType")

entry_kinds = st.lists(st.one_of(
    st.tuples(st.just("data"), st.integers(1, 5), st.sampled_from([K.NONE, K.GZIP, K.ZSTD]), st.booleans()),
    st.tuples(st.just("control"), st.just(1), st.just(K.NONE), st.just(False)),
    st.tuples(st.just("legacy"), st.just(1), st.sampled_from([0, 1]), st.just(False)),
), min_size=1, max_size=12)


def log_buffer(kinds) -> tuple[bytes, list[int]]:
    """Entries with dense offsets from 100, and where each starts."""
    parts, starts, offset, size = [], [], 100, 0
    for kind, count, codec, append_time in kinds:
        if kind == "data":
            entry = K.encode_batch([b"k%d" % (offset + i) for i in range(count)],
                                   [None if (offset + i) % 3 == 0 else b"v%d" % (offset + i) for i in range(count)],
                                   None, [1_700_000_000_000 + offset + i for i in range(count)],
                                   base_offset=offset, compression=codec,
                                   log_append_time=1_700_000_999_000 if append_time else None)
        elif kind == "control":
            entry = K.encode_control_batch(True, 5, 7, 0, 99, base_offset=offset)
        else:
            entry = fuzzing.legacy_message(offset, codec, 0, 1_600_000_000_000 + offset, b"lk", b"lv%d" % offset)
        parts.append(entry)
        starts.append(size)
        size += len(entry)
        offset += count
    return b"".join(parts), starts


def rows(batch: pa.RecordBatch) -> list[tuple]:
    return list(zip(*(batch.column(c).to_pylist() for c in COLUMNS)))


def expected(buf: bytes, start: int, end: int) -> list:
    """The per-entry path: rows of v2 batches, ("legacy", offset) where a magic 0/1 entry stands."""
    builder = K.column_builder(timestamp_types=True)
    found: list = []
    for entry in K.iter_entries(buf):
        if entry.base_offset >= end:
            break
        if isinstance(entry, K.LegacyEntry):
            if builder.count:
                found.extend(rows(builder.finish().to_arrow()))
            found.append(("legacy", entry.offset))
        elif not entry.is_control:
            K.add_columns(builder, buf, entry, start, end)
    if builder.count:
        found.extend(rows(builder.finish().to_arrow()))
    return found


def walked(buf: bytes, start: int, end: int, max_rows: int) -> tuple[list, int, int]:
    """add_entries over the buffer as the reader drives it: rows, legacy markers, where and why it stopped."""
    builder = K.column_builder(timestamp_types=True)
    found: list = []
    pos, why = K.add_entries(builder, buf, 0, start, end, max_rows)
    while why in (protocol.ENTRIES_FULL, protocol.ENTRIES_OTHER):
        if why == protocol.ENTRIES_FULL:
            assert builder.count >= max_rows
            found.extend(rows(builder.finish().to_arrow()))
        else:
            entry = next(K.iter_entries(buf, pos))
            assert isinstance(entry, K.LegacyEntry)
            if builder.count:
                found.extend(rows(builder.finish().to_arrow()))
            found.append(("legacy", entry.offset))
            pos = K.entry_end(entry)
        pos, why = K.add_entries(builder, buf, pos, start, end, max_rows)
    if builder.count:
        found.extend(rows(builder.finish().to_arrow()))
    return found, pos, why


def test_the_stop_reasons_are_the_protocols():
    assert (R.ENTRIES_NEED_BYTES, R.ENTRIES_END, R.ENTRIES_FULL, R.ENTRIES_LEGACY) == (
        protocol.ENTRIES_NEED_BYTES, protocol.ENTRIES_END, protocol.ENTRIES_FULL, protocol.ENTRIES_OTHER)


@settings(max_examples=300, deadline=None)
@given(kinds=entry_kinds, cut=st.integers(0, 400), bounds=st.tuples(st.integers(95, 140), st.integers(95, 150)),
       max_rows=st.integers(1, 12))
def test_add_entries_keeps_and_stops_where_the_per_entry_path_does(kinds, cut, bounds, max_rows):
    whole, starts = log_buffer(kinds)
    buf = whole[:max(0, len(whole) - cut)]
    start, end = bounds
    found, pos, why = walked(buf, start, end, max_rows)
    assert found == expected(buf, start, end)
    if why == protocol.ENTRIES_END:
        assert pos in starts and K.read_entry_prefix(buf, pos)[0] >= end
    else:
        assert why == protocol.ENTRIES_NEED_BYTES
        # Stopped at the end of the buffer or at the first entry not wholly in it, every whole one taken.
        ends = dict(zip(starts, starts[1:] + [len(whole)]))
        assert pos == len(buf) or (pos in ends and ends[pos] > len(buf))


def test_a_corrupt_batch_inside_the_range_raises_and_one_past_it_ends_the_walk():
    buf, starts = log_buffer([("data", 3, K.NONE, False)] * 3)
    broken = bytearray(buf)
    broken[starts[1] + 70] ^= 0xFF  # a record byte of the second batch: its CRC no longer matches
    with pytest.raises(CorruptRecordError):
        K.add_entries(K.column_builder(), bytes(broken), 0, 0, 1000, 100)
    builder = K.column_builder()
    # The second batch begins at offset 103: a range ending there never looks at it.
    assert K.add_entries(builder, bytes(broken), 0, 0, 103, 100) == (starts[1], protocol.ENTRIES_END)
    assert builder.count == 3


def test_micros_are_spark_timestamps_of_the_same_instants():
    buf = K.encode_batch([b"a", b"b", b"c"], [b"1", b"2", b"3"], None, [1_700_000_000_123, -1, 0])
    plain, micros = K.column_builder(), K.column_builder(timestamp_micros=True)
    for builder in (plain, micros):
        builder.add_batch(buf)
    millis, spark = plain.finish().to_arrow(), micros.finish().to_arrow()
    assert spark.schema.field("timestamp").type == pa.timestamp("us", tz="UTC")
    assert spark.column("timestamp").cast(pa.int64()).to_pylist() == [1_700_000_000_123_000, -1000, 0]
    assert millis.column("timestamp").to_pylist() == [1_700_000_000_123, -1, 0]
    assert spark.drop_columns(["timestamp"]).equals(millis.drop_columns(["timestamp"]))


def test_a_builder_reserves_the_last_batchs_size_and_still_grows_past_it():
    small = K.encode_batch([b"k"] * 2, [b"v" * 10] * 2, None, 5)
    large = K.encode_batch([b"k"] * 50, [b"v" * 1000] * 50, None, 5, base_offset=2)
    builder = K.column_builder()
    builder.add_batch(small)
    assert builder.finish().count == 2
    builder.add_batch(large)
    columns = builder.finish()
    assert columns.count == 50 and len(columns.value_data) == 50_000
    assert columns.to_arrow().column("value").to_pylist() == [b"v" * 1000] * 50
