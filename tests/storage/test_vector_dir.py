"""The `segment_txn` vector directory: logstore opens Kafka's files and rebuilds them byte for byte."""
from __future__ import annotations

import json

import pytest

from logstore.config import LogConfig
from logstore.log import Log
from vector_dirs import VECTORS

EXPECTED = json.loads((VECTORS / "segment_txn" / "segment_txn.json").read_text())["expected"]
CONFIG = LogConfig.from_properties({"index.interval.bytes": EXPECTED["indexIntervalBytes"]})
SEGMENT_FILES = ("00000000000000000000.log", "00000000000000000000.index",
                 "00000000000000000000.timeindex", "00000000000000000000.txnindex")


def _files(directory):
    return {name: (directory / name).read_bytes() for name in SEGMENT_FILES + ("leader-epoch-checkpoint",)}


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "unclean"])
def test_open_and_close_leaves_every_file_byte_identical(segment_txn_dir, clean):
    before = _files(segment_txn_dir)
    log = Log.open(str(segment_txn_dir), CONFIG, clean_shutdown=clean, recovery_point=0)
    report = log.recovery_report
    assert report.recovered_segments == ([] if clean else [0])
    assert not report.truncated
    log.close()
    assert _files(segment_txn_dir) == before


def test_unclean_open_rebuilds_missing_indexes_exactly(segment_txn_dir):
    before = _files(segment_txn_dir)
    (segment_txn_dir / "00000000000000000000.index").unlink()
    (segment_txn_dir / "00000000000000000000.timeindex").write_bytes(b"\x01" * 7)
    log = Log.open(str(segment_txn_dir), CONFIG, clean_shutdown=True)
    assert [base for base, _ in log.recovery_report.rebuilt_indexes] == [0]
    log.close()
    assert _files(segment_txn_dir) == before


def test_every_offset_maps_to_its_batch(segment_txn_dir):
    with Log.open(str(segment_txn_dir), CONFIG, clean_shutdown=True) as log:
        assert log.log_end_offset == EXPECTED["logEndOffset"]
        segment = log.active_segment
        for batch in EXPECTED["batches"]:
            for offset in range(batch["baseOffset"], batch["lastOffset"] + 1):
                found = segment.translate_offset(offset)
                assert (found.position, found.size) == (batch["position"], batch["size"])
        index = [segment.offset_index.entry(i) for i in range(segment.offset_index.entries)]
        assert index == [(e["offset"], e["position"]) for e in EXPECTED["offsetIndex"]]
        times = [segment.time_index.entry(i) for i in range(segment.time_index.entries)]
        assert times == [(e["timestamp"], e["offset"]) for e in EXPECTED["timeIndex"]]
        aborted = segment.txn_index.entries
        assert [(t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset) for t in aborted] == [
            (e["producerId"], e["firstOffset"], e["lastOffset"], e["lastStableOffset"])
            for e in EXPECTED["abortedTxns"]]


def test_records_and_timestamps_read_back(segment_txn_dir):
    data_batches = [b for b in EXPECTED["batches"] if not b["isControl"]]
    data_offsets = [o for b in data_batches for o in range(b["baseOffset"], b["lastOffset"] + 1)]
    with Log.open(str(segment_txn_dir), CONFIG, clean_shutdown=True) as log:
        assert [r.offset for r in log.iter_records(0)] == data_offsets
        assert [r.offset for r in log.iter_records(0, include_control=True)] == list(range(12))
        assert log.offset_for_timestamp(-2) == (0, -1)
        assert log.offset_for_timestamp(-1) == (12, -1)
        assert log.offset_for_timestamp(-3) == (11, 1700000000050)
        for record in log.iter_records(0, include_control=True):
            found = log.offset_for_timestamp(record.timestamp)
            expected = min((r for r in log.iter_records(0, include_control=True)
                            if r.timestamp >= record.timestamp), key=lambda r: r.offset)
            assert found == (expected.offset, expected.timestamp)
        assert log.offset_for_timestamp(1700000000051) is None
