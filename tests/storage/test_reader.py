"""Read-only views (logstore.reader): what a scan beside a live writer sees, and that it never writes."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logstore import Log, LogConfig
from logstore.errors import OffsetOutOfRangeError, SegmentDeletedError
from logstore.filenames import SNAPSHOT_SUFFIX
from logstore.reader import PartitionView, StoreView

pa = pytest.importorskip("pyarrow")

SMALL = LogConfig.from_properties({"segment.bytes": 2048, "index.interval.bytes": 64})


def rows(scan, **kwargs) -> list[tuple]:
    """(offset, timestamp, key, value) of every record a scan yields."""
    found = []
    for batch in scan.read_arrow(**kwargs):
        found.extend(zip(*(batch.column(name).to_pylist() for name in ("offset", "timestamp", "key", "value"))))
    return found


def library_rows(log: Log, start: int, end: int, isolation: str) -> list[tuple]:
    """The same records through the library's own read."""
    return [(r.offset, r.timestamp, r.key, r.value)
            for r in log.iter_records(start, max_offset=end, isolation=isolation)]


def fingerprint(directory: Path) -> dict[str, str]:
    """Every file's name and content hash: a view must leave them all as they were."""
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


# A workload: ("plain", n), ("txn", producer, n) opens or extends that producer's
# transaction, ("end", producer, commit) closes it with a marker.
steps = st.lists(st.one_of(
    st.tuples(st.just("plain"), st.integers(1, 6)),
    st.tuples(st.just("txn"), st.integers(0, 2), st.integers(1, 6)),
    st.tuples(st.just("end"), st.integers(0, 2), st.booleans()),
), min_size=1, max_size=40)


def write(log: Log, workload) -> None:
    sequences = {0: 0, 1: 0, 2: 0}
    open_txns = set()
    for step in workload:
        if step[0] == "plain":
            log.append_records([b"p%d" % i for i in range(step[1])], keys=[b"k"] * step[1])
        elif step[0] == "txn":
            _, pid, n = step
            log.append_records([b"t%d-%d" % (pid, i) for i in range(n)], producer_id=1000 + pid, producer_epoch=0,
                               base_sequence=sequences[pid], transactional=True)
            sequences[pid] += n
            open_txns.add(pid)
        elif step[1] in open_txns:
            log.write_txn_marker(1000 + step[1], 0, 0, commit=step[2])
            open_txns.discard(step[1])


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(workload=steps, cut=st.tuples(st.floats(0, 1), st.floats(0, 1)))
def test_a_view_of_a_live_log_reads_what_the_library_reads(tmp_path_factory, workload, cut):
    directory = tmp_path_factory.mktemp("live") / "t-0"
    with Log.open(str(directory), SMALL) as log:
        write(log, workload)
        before = fingerprint(directory)
        with PartitionView.open(str(directory)) as view:
            assert view.high_watermark == log.log_end_offset
            assert view.last_stable_offset == log.last_stable_offset
            for isolation in ("read_committed", "read_uncommitted"):
                end = view.end_offset(isolation)
                start, stop = sorted(int(c * end) for c in cut)
                scan = view.scan(start, stop, isolation)
                assert rows(scan) == library_rows(log, start, stop, isolation)
                # Any cut of the range reads the same records, piece by piece.
                assert [r for piece in scan.split(3) for r in rows(piece)] == rows(scan)
        assert fingerprint(directory) == before


def test_the_preallocated_index_of_the_active_segment_is_searched_only_where_written(tmp_path):
    directory = tmp_path / "t-0"
    with Log.open(str(directory), LogConfig.from_properties({"index.interval.bytes": 64})) as log:
        for i in range(200):
            log.append_records([b"v%d" % i])
        index = directory / "00000000000000000000.index"
        assert index.stat().st_size == LogConfig().segment_index_bytes  # a live writer's file
        written = log.active_segment.offset_index
        with PartitionView.open(str(directory)) as view:
            seen = view._segments[0].offset_index
            # The zero-filled slots would send every lookup back to the segment's first byte.
            assert seen.entries == written.entries > 10
            assert seen.lookup(150) == written.lookup(150) != (0, 0)
            assert [r[0] for r in rows(view.scan(150, 152, "read_uncommitted"))] == [150, 151]
            assert view.offset_for_timestamp(0) == 0


def test_an_abort_marker_missing_from_the_txnindex_still_hides_its_transaction(tmp_path):
    directory = tmp_path / "t-0"
    with Log.open(str(directory), LogConfig()) as log:
        log.append_records([b"a"], producer_id=7, producer_epoch=0, base_sequence=0, transactional=True)
        log.write_txn_marker(7, 0, 0, commit=False)
        log.append_records([b"b"])
        # The marker is written before its index entry: a reader can fall between the two.
        os.truncate(directory / "00000000000000000000.txnindex", 0)
        with PartitionView.open(str(directory)) as view:
            assert [a.producer_id for a in view.aborted] == [7]
            assert [r[3] for r in rows(view.scan(0, view.last_stable_offset, "read_committed"))] == [b"b"]


def test_an_open_transaction_bounds_read_committed_scans(tmp_path):
    directory = tmp_path / "t-0"
    with Log.open(str(directory), SMALL) as log:
        log.append_records([b"before"])
        log.append_records([b"open"], producer_id=3, producer_epoch=0, base_sequence=0, transactional=True)
        log.append_records([b"after"])
        with PartitionView.open(str(directory)) as view:
            assert (view.last_stable_offset, view.high_watermark) == (1, 3)
            with pytest.raises(OffsetOutOfRangeError):
                view.scan(0, 3, "read_committed")
            assert [r[3] for r in rows(view.scan(0, 3, "read_uncommitted"))] == [b"before", b"open", b"after"]


def test_a_half_written_batch_at_the_tail_is_neither_seen_nor_removed(tmp_path):
    directory = tmp_path / "t-0"
    with Log.open(str(directory), LogConfig()) as log:
        log.append_records([b"whole"])
    segment = directory / "00000000000000000000.log"
    whole = segment.read_bytes()
    segment.write_bytes(whole + whole[:30])  # a writer mid-append
    with PartitionView.open(str(directory)) as view:
        assert view.high_watermark == 1
        assert [r[3] for r in rows(view.scan(0, 1, "read_uncommitted"))] == [b"whole"]
    assert segment.read_bytes() == whole + whole[:30]


def test_a_batch_still_being_copied_in_is_not_part_of_the_view(tmp_path):
    directory = tmp_path / "t-0"
    with Log.open(str(directory), LogConfig()) as log:
        log.append_records([b"first"])
        log.append_records([b"second"])
    segment = directory / "00000000000000000000.log"
    data = bytearray(segment.read_bytes())
    data[-1] ^= 0xFF  # the length is there, the last bytes are not yet
    segment.write_bytes(bytes(data))
    with PartitionView.open(str(directory)) as view:
        assert view.high_watermark == 1
        assert [r[3] for r in rows(view.scan(0, 1, "read_uncommitted"))] == [b"first"]


def test_a_corrupt_snapshot_is_passed_over_and_left_in_place(tmp_path):
    directory = tmp_path / "t-0"
    with Log.open(str(directory), SMALL) as log:
        for i in range(60):
            log.append_records([b"x" * 40], producer_id=5, producer_epoch=0, base_sequence=i, transactional=True)
        log.write_txn_marker(5, 0, 0, commit=True)
        snapshots = sorted(directory.glob("*" + SNAPSHOT_SUFFIX))
        assert snapshots
        snapshots[-1].write_bytes(b"\0" * 10)
        with PartitionView.open(str(directory)) as view:
            assert view.last_stable_offset == view.high_watermark == log.log_end_offset
        assert snapshots[-1].read_bytes() == b"\0" * 10


def test_a_segment_deleted_after_planning_is_data_loss_unless_skipped(tmp_path):
    directory = tmp_path / "t-0"
    with Log.open(str(directory), SMALL) as log:
        for _ in range(100):
            log.append_records([b"y" * 40])
        with PartitionView.open(str(directory)) as view:
            scan = view.scan(0, view.high_watermark, "read_uncommitted")
            first, second = view.segments[0], view.segments[1]
        os.unlink(directory / f"{first.base_offset:020d}.log")
        with pytest.raises(SegmentDeletedError):
            rows(scan)
        assert rows(scan, skip_deleted=True)[0][0] == second.base_offset


def test_a_store_view_lists_partition_directories_only(tmp_path):
    for name in ("a-0", "a-1", "b-0", "a-2." + "0" * 32 + "-delete", "not a partition", "c-x"):
        (tmp_path / name).mkdir()
    (tmp_path / "recovery-point-offset-checkpoint").write_text("0\n0\n")
    store = StoreView(str(tmp_path))
    assert store.topics() == {"a": 2, "b": 1}
    with store.view("a", 1) as view:
        assert (view.high_watermark, view.segments) == (0, ())


@pytest.mark.parametrize("chunk", [64, 300, 4 << 20])
def test_chunks_smaller_than_a_batch_and_batches_cut_by_chunks_read_every_record(tmp_path, monkeypatch, chunk):
    # The chunked scan reads a batch larger than a chunk whole, and picks up a batch a chunk cut at its start.
    import logstore.reader as reader
    monkeypatch.setattr(reader, "SCAN_CHUNK_BYTES", chunk)
    directory = tmp_path / "t-0"
    with Log.open(str(directory), LogConfig.from_properties({"segment.bytes": 4096})) as log:
        for i in range(40):
            log.append_records([b"v%d-" % i * (i % 7 * 20 + 1)] * (i % 3 + 1), keys=[b"k"] * (i % 3 + 1))
        with PartitionView.open(str(directory)) as view:
            end = view.high_watermark
            for start, stop in ((0, end), (5, end - 5), (17, 18)):
                scan = view.scan(start, stop, "read_uncommitted")
                assert rows(scan) == library_rows(log, start, stop, "read_uncommitted")
                assert rows(scan, batch_rows=2) == rows(scan)


def test_spark_timestamps_come_out_in_microseconds_from_v2_and_legacy_entries(tmp_path):
    import struct
    import zlib

    import logstore.formats.kafka as K
    directory = tmp_path / "t-0"
    directory.mkdir()
    v2 = K.encode_batch([b"a", b"b"], [b"1", b"2"], None, [1_700_000_000_001, 1_700_000_000_002], base_offset=0)
    # One magic 1 message at offset 2 (a log Kafka 0.10 wrote): crc, magic, attributes, timestamp, key, value.
    body = bytes([1, 0]) + struct.pack(">qi", 1_600_000_000_000, 1) + b"c" + struct.pack(">i", 1) + b"3"
    message = struct.pack(">I", zlib.crc32(body)) + body
    legacy = struct.pack(">qi", 2, len(message)) + message
    later = K.encode_batch([b"d"], [b"4"], None, [1_700_000_000_004], base_offset=3)
    (directory / "00000000000000000000.log").write_bytes(v2 + legacy + later)
    with PartitionView.open(str(directory)) as view:
        scan = view.scan(0, view.high_watermark, "read_uncommitted")
        millis = rows(scan, timestamp_types=True)
        batches = list(scan.read_arrow(timestamp_types=True, timestamp_micros=True))
    assert [r[0] for r in millis] == [0, 1, 2, 3]
    assert all(b.schema.field("timestamp").type == pa.timestamp("us", tz="UTC") for b in batches)
    micros = [t for b in batches for t in b.column("timestamp").cast(pa.int64()).to_pylist()]
    assert micros == [r[1] * 1000 for r in millis]
