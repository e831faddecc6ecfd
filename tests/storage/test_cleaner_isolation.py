"""A partition the cleaner cannot clean is isolated, as Kafka's uncleanable partitions are: a real corrupt
batch in an inactive segment of one compacted partition marks it uncleanable (logged once, shown by
`logstore cleaner`), the other compacted partitions (an internal topic among them) go on being
compacted, and the mark lasts until the store is opened again or the partition's segments change.
The native map and filter refuse a batch whose CRC holds but whose records lie."""
from __future__ import annotations

import io
import json
import logging
import struct

import pytest
from crc32c import crc32c

from logstore.cleaner_report import run as report
from logstore.errors import InvalidRecordError
from logstore.log_cleaner import read_uncleanable
from logstore.manager import LogManager
from logstore.native.cleaner import OffsetMap, count_null_keys, filter_batch
from logstore.native.record_batch import encode_batch

WAIT_S = 30.0
COMPACTED = {"cleanup.policy": "compact", "segment.bytes": 2048, "retention.ms": -1,
             "min.cleanable.dirty.ratio": 0.1}
# Rounds run when a test asks (await_round), not on their own.
SETTINGS = {"log.cleaner.backoff.ms": 3_600_000, "log.cleaner.dedupe.buffer.size": 1 << 20}
OFFSETS = "__consumer_offsets"
CRC_AT, CRC_FROM, COUNT_AT, RECORDS_AT = 17, 21, 57, 61


def _fill(store: LogManager, topic: str, n: int = 400, start: int = 0) -> None:
    target = store.log(topic, 0)
    for i in range(start, start + n):
        target.append_records([b"value-%d" % i], keys=[b"key-%d" % (i % 10)])


def _corrupt_second_segment(store: LogManager, topic: str) -> int:
    """Flip bytes inside the first batch of the partition's second (inactive) segment; its base offset."""
    segment = store.log(topic, 0).segments[1]
    with open(segment.log_path, "r+b") as f:
        f.seek(RECORDS_AT + 5)
        f.write(b"\xff\xff\xff")
    return segment.base_offset


def _open(path, *, cleaner: bool = True) -> LogManager:
    return LogManager(str(path), broker_settings={**SETTINGS, "log.cleaner.enable": cleaner})


def _rounds_until_marked(store: LogManager, rounds: int = 3) -> None:
    for _ in range(rounds):
        assert store.cleaner.await_round(WAIT_S)
        if store.cleaner.uncleanable_partitions():
            return


def _report(path) -> dict[str, dict]:
    out = io.StringIO()
    assert report([str(path)], as_json=True, out=out) == 0
    return {f"{r['topic']}-{r['partition']}": r for r in json.loads(out.getvalue())["partitions"]}


def test_a_corrupt_batch_isolates_its_partition_and_the_others_go_on(tmp_path, caplog):
    store = _open(tmp_path)
    try:
        store.create_topic("bad", 1, COMPACTED)
        # An internal topic: compacted by Kafka's default for it, with small segments here.
        store.create_topic(OFFSETS, 1, {"segment.bytes": 2048, "min.cleanable.dirty.ratio": 0.1})
        _fill(store, "bad")
        _fill(store, OFFSETS)
        _corrupt_second_segment(store, "bad")
        with caplog.at_level(logging.INFO, logger="logstore.log_cleaner"):
            for _ in range(3):
                assert store.cleaner.await_round(WAIT_S)
            # The healthy partition keeps being compacted, round after round.
            for more in (1, 2):
                first = store.cleaner.checkpoints.get((OFFSETS, 0), 0)
                _fill(store, OFFSETS, start=400 * more)
                assert store.cleaner.await_round(WAIT_S)
                assert store.cleaner.checkpoints.get((OFFSETS, 0), 0) > first
            assert ("bad", 0) not in store.cleaner.checkpoints
            marked = store.cleaner.uncleanable_partitions(str(tmp_path))
            assert list(marked) == [("bad", 0)] and "CRC mismatch" in marked[("bad", 0)].error
        failures = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(failures) == 1 and "bad-0" in failures[0].getMessage() and not failures[0].exc_info
        shown = _report(tmp_path)
        assert shown["bad-0"]["uncleanable"]["error"] == marked[("bad", 0)].error
        assert shown[f"{OFFSETS}-0"]["uncleanable"] is None and shown[f"{OFFSETS}-0"]["rounds"] >= 3
        table = io.StringIO()
        report([str(tmp_path)], out=table)
        lines = table.getvalue().splitlines()
        assert lines[0].split()[-1] == "uncleanable"
        assert lines[-1].startswith("bad-0: uncleanable since ") and "CRC mismatch" in lines[-1]
    finally:
        store.close()


def test_the_mark_lasts_until_the_store_opens_again(tmp_path):
    store = _open(tmp_path)
    try:
        store.create_topic("bad", 1, COMPACTED)
        _fill(store, "bad")
        _corrupt_second_segment(store, "bad")
        _rounds_until_marked(store)
        assert list(store.cleaner.uncleanable_partitions()) == [("bad", 0)]
        assert list(read_uncleanable(str(tmp_path))) == ["bad-0"]
    finally:
        store.close()
    # Opened without the cleaner first: its first round would race the check that opening cleared the mark.
    store = _open(tmp_path, cleaner=False)
    try:
        assert store.cleaner.uncleanable_partitions() == {}
        assert read_uncleanable(str(tmp_path)) == {} and _report(tmp_path)["bad-0"]["uncleanable"] is None
    finally:
        store.close()
    store = _open(tmp_path)
    try:
        _rounds_until_marked(store)
        assert list(store.cleaner.uncleanable_partitions()) == [("bad", 0)], "tried again, and marked again"
    finally:
        store.close()


@pytest.mark.parametrize("change", ["truncated", "deleted"])
def test_the_mark_is_lifted_when_the_partition_changes(tmp_path, change):
    store = _open(tmp_path)
    try:
        store.create_topic("bad", 1, COMPACTED)
        _fill(store, "bad")
        corrupt = _corrupt_second_segment(store, "bad")
        _rounds_until_marked(store)
        assert list(store.cleaner.uncleanable_partitions()) == [("bad", 0)]
        if change == "truncated":
            store.log("bad", 0).truncate_to(corrupt)
            _fill(store, "bad", start=1000)
        else:
            store.delete_topic("bad")
        assert store.cleaner.await_round(WAIT_S)
        assert store.cleaner.uncleanable_partitions() == {} and read_uncleanable(str(tmp_path)) == {}
        if change == "truncated":
            assert store.cleaner.checkpoints[("bad", 0)] > corrupt, "cleaned again once the bad batch was gone"
    finally:
        store.close()


def _resealed(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, CRC_AT, crc32c(bytes(batch[CRC_FROM:])))
    return bytes(batch)


def _lying_batches() -> dict[str, bytes]:
    batch = encode_batch([b"a", b"b"], [b"1", b"2"], timestamps=1_700_000_000_000, base_offset=100)
    fewer = bytearray(batch)
    struct.pack_into(">i", fewer, COUNT_AT, 1)
    same_delta = bytearray(batch)
    second = RECORDS_AT + 1 + batch[RECORDS_AT] // 2   # after the first record (length varint, zigzag)
    assert same_delta[second + 3] == 2, "the second record's offset delta, zigzag-encoded 1"
    same_delta[second + 3] = 0
    return {"records-past-the-count": _resealed(fewer), "offset-delta-repeated": _resealed(same_delta)}


@pytest.mark.parametrize("lie", sorted(_lying_batches()))
def test_the_native_map_and_filter_refuse_a_batch_whose_records_lie(lie):
    batch = _lying_batches()[lie]
    offset_map = OffsetMap(2000)
    offset_map.clear(100)
    with pytest.raises(InvalidRecordError):
        offset_map.put_batch(batch, 0, 100)
    with pytest.raises(InvalidRecordError):
        filter_batch(offset_map, batch, 0, discard_records=False, retain_empty=False, marker_for_empty_txn=False,
                     now_ms=1_700_000_000_000, delete_retention_ms=1000)
    with pytest.raises(InvalidRecordError):
        count_null_keys(batch, 0)
