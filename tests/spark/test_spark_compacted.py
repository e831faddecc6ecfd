"""The Spark source over a compacted topic: offset gaps read as the library reads them, from the beginning,
from a starting offset inside a gap, and in ranges planned per segment."""
from __future__ import annotations

import json

import pytest

from logstore.manager import LogManager
from logstore.read_committed import READ_COMMITTED
from spark_logs import library_rows
from test_spark_batch import load, spark_rows

TOPIC = "table"
CONFIG = {"cleanup.policy": "compact", "segment.bytes": 1500, "retention.ms": -1,
          "min.cleanable.dirty.ratio": 0.01}


@pytest.fixture(scope="module")
def compacted(tmp_path_factory):
    """A log dir whose compacted partition has been cleaned: (path, library rows, offsets before cleaning)."""
    path = tmp_path_factory.mktemp("compacted")
    store = LogManager(str(path), broker_settings={"log.cleaner.backoff.ms": 3_600_000})
    try:
        store.create_topic(TOPIC, 1, CONFIG)
        log = store.log(TOPIC, 0)
        for i in range(300):
            # 20 hot keys and some written once, a tombstone now and then, transactions committed and
            # aborted among plain appends.
            key = b"once-%d" % i if i % 10 == 3 else b"key-%d" % (i % 20)
            value = None if i % 23 == 7 else b"v%d" % i
            log.append_records([value], keys=[key], timestamps=1_700_000_000_000 + i)
            if i % 50 == 10:
                log.append_records([b"txn-%d" % i] * 3, keys=[b"key-%d" % k for k in range(3)],
                                   timestamps=1_700_000_000_000 + i, producer_id=1000 + i, producer_epoch=0,
                                   base_sequence=0, transactional=True)
                log.write_txn_marker(1000 + i, 0, 3, commit=i % 100 == 10, timestamp=1_700_000_000_000 + i)
        log.roll()
        before = [r.offset for r in log.iter_records()]
        assert store.cleaner.await_round(30)
        rows = library_rows(log, TOPIC, 0, READ_COMMITTED)
        assert len(rows) < len(before) // 2, "the cleaner left too much"
    finally:
        store.close()
    return path, rows, before


def test_a_read_from_the_beginning_matches_the_library_gaps_and_all(spark, compacted):
    path, rows, _ = compacted
    got = spark_rows(load(spark, path, subscribe=TOPIC, startingOffsets="earliest"))
    assert got == rows
    offsets = [r.offset for r in got]
    assert offsets == sorted(set(offsets)) and offsets[-1] - offsets[0] + 1 > len(offsets), "no gaps to read"


def test_a_starting_offset_inside_a_gap_reads_from_the_next_record_left(spark, compacted):
    path, rows, before = compacted
    kept = {r.offset for r in rows}
    gap = next(o for o in before[len(before) // 2:] if o not in kept)
    got = spark_rows(load(spark, path, subscribe=TOPIC, startingOffsets=json.dumps({TOPIC: {"0": gap}})))
    assert got == [r for r in rows if r.offset >= gap]
    assert got[0].offset > gap


def test_ranges_split_over_tasks_read_each_record_once(spark, compacted):
    path, rows, _ = compacted
    got = spark_rows(load(spark, path, subscribe=TOPIC, startingOffsets="earliest", minPartitions="7"))
    assert got == rows
