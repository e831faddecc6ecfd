"""`read_batches`, what a share fetch reads of a partition, over real logs: it walks batch headers only until
the batches cover the records wanted, hands out exactly the log's bytes of the batches acquired, marks
control and aborted batches undeliverable, and reads magic 0/1 entries whole."""
from __future__ import annotations

import time

import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from logstore.broker.share.reads import read_batches
from logstore.formats.kafka import iter_entries
from logstore.log import Log

TS = int(time.time() * 1000)
BIG = 1 << 30


@pytest.fixture
def log(tmp_path):
    opened = Log.open(str(tmp_path / "t-0"))
    yield opened
    opened.close()


def plain(log: Log, n: int, size: int = 10) -> None:
    log.append_records([b"v" * size] * n, timestamps=TS)


def log_bytes(log: Log) -> bytes:
    fetched = log.read(0, BIG)
    return fetched.records.read() if fetched.records is not None else b""


def test_the_walk_stops_once_the_batches_cover_the_records_wanted(log):
    for _ in range(10):
        plain(log, 100)
    read = read_batches(log, 0, BIG, 250, committed=False)
    try:
        assert read.spans == [(0, 99, True), (100, 199, True), (200, 299, True)]
        whole = log_bytes(log)
        ends = [e.position + e.size_in_bytes for e in iter_entries(whole, verify_crc=False)]
        assert read.ends == ends[:3]
        # The bytes handed out are the log's own, up to the batch holding the last offset acquired.
        assert read.through(150) == whole[:ends[1]]
        assert read.through(99) == whole[:ends[0]]
    finally:
        read.close()


def test_a_start_inside_a_batch_counts_only_the_offsets_from_there(log):
    for _ in range(4):
        plain(log, 100)
    read = read_batches(log, 150, BIG, 100, committed=False)
    try:
        # 50 offsets of the batch holding 150, then the next batch: 150 >= 100.
        assert read.spans == [(100, 199, True), (200, 299, True)]
    finally:
        read.close()


def test_the_first_batch_comes_whole_past_the_byte_budget_and_the_budget_bounds_the_rest(log):
    plain(log, 50, size=1000)
    plain(log, 50, size=1000)
    read = read_batches(log, 0, 100, 1000, committed=False)
    try:
        assert read.spans == [(0, 49, True)]
        assert len(read.through(49)) == read.ends[0] > 100
    finally:
        read.close()


def test_many_small_batches_are_walked_across_header_reads(log):
    for _ in range(300):
        plain(log, 1, size=40)
    read = read_batches(log, 0, BIG, 250, committed=False)
    try:
        # 300 batches of ~100 bytes span several 4 KiB header reads.
        assert read.spans == [(i, i, True) for i in range(250)]
        assert read.through(249) == log_bytes(log)[:read.ends[-1]]
    finally:
        read.close()


def test_nothing_past_the_end_or_the_last_stable_offset(log):
    plain(log, 10)
    assert read_batches(log, 10, BIG, 100, committed=False).spans == []
    log.append_records([b"t"] * 5, timestamps=TS, producer_id=7, producer_epoch=0, base_sequence=0,
                       transactional=True)
    assert read_batches(log, 10, BIG, 100, committed=True).spans == []
    read = read_batches(log, 10, BIG, 100, committed=False)
    try:
        assert read.spans == [(10, 14, True)]
    finally:
        read.close()


def test_control_and_aborted_batches_are_not_deliverable_to_read_committed(log):
    log.append_records([b"a"] * 3, timestamps=TS, producer_id=7, producer_epoch=0, base_sequence=0,
                       transactional=True)
    log.write_txn_marker(7, 0, 0, commit=False, timestamp=TS)
    log.append_records([b"c"] * 2, timestamps=TS, producer_id=8, producer_epoch=0, base_sequence=0,
                       transactional=True)
    log.write_txn_marker(8, 0, 0, commit=True, timestamp=TS)
    plain(log, 4)
    committed = read_batches(log, 0, BIG, 100, committed=True)
    uncommitted = read_batches(log, 0, BIG, 100, committed=False)
    try:
        assert committed.spans == [(0, 2, False), (3, 3, False), (4, 5, True), (6, 6, False), (7, 10, True)]
        assert uncommitted.spans == [(0, 2, True), (3, 3, False), (4, 5, True), (6, 6, False), (7, 10, True)]
    finally:
        committed.close()
        uncommitted.close()


def test_legacy_entries_are_read_whole(tmp_path):
    # Magic 0/1 entries reach a log only in a directory an old Kafka wrote: a segment file of them.
    builder = LegacyRecordBatchBuilder(1, 0, 1 << 20)
    for i in range(5):
        builder.append(i, timestamp=TS, key=None, value=b"old-%d" % i)
    (tmp_path / "t-0").mkdir()
    (tmp_path / "t-0" / "00000000000000000000.log").write_bytes(bytes(builder.build()))
    log = Log.open(str(tmp_path / "t-0"))
    try:
        plain(log, 3)
        _check_legacy_read(log)
    finally:
        log.close()


def _check_legacy_read(log: Log) -> None:
    read = read_batches(log, 0, BIG, 2, committed=False)
    try:
        # Magic 1 messages are one offset each; the whole range is read, and the v2 batch after them too.
        assert read.spans == [(i, i, True) for i in range(5)] + [(5, 7, True)]
        assert read.through(7) == log_bytes(log)
    finally:
        read.close()
