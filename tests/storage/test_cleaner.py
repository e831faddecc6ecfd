"""The log cleaner against an uncleaned twin: what read_committed sees never changes, offsets stay.

Every workload goes to two logs alike; only the first is cleaned. After each
round the cleaned log must hold a subset of the twin's records at the same
offsets, strictly increasing, with the same latest committed value per key;
below the round's end each key is left at most once and no aborted data is
left. Then a settling pass (time beyond delete.retention.ms, two rounds) must
have removed every tombstone below the end, and a reopen that rebuilds
producer state from the cleaned log alone must know every producer's last
sequence and epoch.
"""
from __future__ import annotations

import os
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction_workload import KEYS, Workload, all_records, latest_values, operations
from logstore.cleaner import Cleaner, group_by_size, log_to_clean
from logstore.config import LogConfig
from logstore.log import Log

RETENTION_MS = 1_000
CONFIG = {"segment.bytes": 700, "cleanup.policy": "compact", "delete.retention.ms": RETENTION_MS,
          "retention.ms": -1, "index.interval.bytes": 100, "min.cleanable.dirty.ratio": 0.0}


def _open(directory: str, **extra) -> Log:
    return Log.open(directory, LogConfig.from_properties({**CONFIG, **extra}))


def _check_round(cleaned: Log, twin: Log, stats) -> None:
    ours, theirs = all_records(cleaned), all_records(twin)
    for offset, record in ours.items():
        assert theirs.get(offset) == record, f"offset {offset} changed: {record} vs {theirs.get(offset)}"
    assert latest_values(cleaned) == latest_values(twin)
    committed = [r for r in cleaned.iter_records(isolation="read_committed") if r.offset < stats.end_offset]
    keys = [r.key for r in committed]
    assert len(keys) == len(set(keys)), f"duplicate keys below {stats.end_offset}: {keys}"
    # Below the end, everything read_uncommitted shows but read_committed hides is a marker: aborted data went.
    visible = {r.offset for r in committed}
    for record in cleaned.iter_records():
        if record.offset < stats.end_offset:
            assert record.offset in visible, f"aborted record at {record.offset} survived"


def _clean_everything(work: Workload, cleaned: Log, twin: Log):
    """Rounds (each after a little new dirt) until one reaches its first uncleanable offset."""
    for _ in range(200):
        work.apply(("plain", [(b"filler", b"x" * 600)], 0))
        work.apply(("plain", [(b"filler", b"y")], 0))
        stats = work.clean()
        assert stats is not None
        _check_round(cleaned, twin, stats)
        if stats.end_offset >= work.last_cleanable.first_uncleanable_offset:
            return stats
    raise AssertionError("the cleaner never caught up")


def _settle(work: Workload, cleaned: Log, twin: Log) -> None:
    """Close open transactions, clean everything (tombstones get their horizon), let the horizon pass,
    clean everything again: no tombstone is left below the end."""
    for pid in sorted(work.open):
        work.apply(("end", pid, False))
    _clean_everything(work, cleaned, twin)
    work.now += RETENTION_MS + 1
    stats = _clean_everything(work, cleaned, twin)
    tombstones = [r.offset for r in cleaned.iter_records() if r.value is None and r.offset < stats.end_offset]
    assert tombstones == []


def _rebuilt_producers(directory: str) -> dict[int, tuple[int, int]]:
    """(epoch, last sequence) per producer, rebuilt from the log alone (snapshots removed, unclean open)."""
    for name in os.listdir(directory):
        if name.endswith(".snapshot"):
            os.unlink(os.path.join(directory, name))
    reopened = Log.open(directory, LogConfig.from_properties(CONFIG), clean_shutdown=False)
    try:
        return {e.producer_id: (e.epoch, e.batches[-1][1]) for e in reopened.producer_entries() if e.batches}
    finally:
        reopened.close()


MAP_BYTES = st.sampled_from([20 * 4, 20 * 10, 1 << 16])
IO_BUFFERS = st.sampled_from([64, 700, 1 << 19])   # reads smaller than one batch, of a few, of all


@settings(max_examples=60, deadline=None)
@given(ops=operations, map_bytes=MAP_BYTES, io_buffer=IO_BUFFERS)
def test_cleaning_keeps_the_committed_view_and_every_retained_offset(ops, map_bytes, io_buffer):
    _clean_against_twin(ops, map_bytes, io_buffer)


@pytest.mark.soak
@settings(max_examples=1_500, deadline=None)
@given(ops=operations, map_bytes=MAP_BYTES, io_buffer=IO_BUFFERS)
def test_soak_cleaning_keeps_the_committed_view_and_every_retained_offset(ops, map_bytes, io_buffer):
    _clean_against_twin(ops, map_bytes, io_buffer)


def _clean_against_twin(ops, map_bytes: int, io_buffer: int) -> None:
    """Apply the workload to a cleaned log and its twin; check every round, the settled state and a reopen."""
    with tempfile.TemporaryDirectory() as root:
        cleaned, twin = _open(os.path.join(root, "c-0")), _open(os.path.join(root, "t-0"))
        try:
            work = Workload([cleaned, twin], Cleaner(map_bytes, io_buffer_bytes=io_buffer))
            for op in ops:
                work.apply(op)
                if op[0] == "clean" and work.rounds:
                    _check_round(cleaned, twin, work.rounds[-1])
            _settle(work, cleaned, twin)
            expected = {e.producer_id: (e.epoch, e.batches[-1][1]) for e in twin.producer_entries() if e.batches}
        finally:
            cleaned.close()
            twin.close()
        assert _rebuilt_producers(os.path.join(root, "c-0")) == expected
        reopened = _open(os.path.join(root, "c-0"))
        twin = _open(os.path.join(root, "t-0"))
        try:
            assert latest_values(reopened) == latest_values(twin)
        finally:
            reopened.close()
            twin.close()


def test_a_round_rewrites_duplicates_into_one_segment_per_group(tmp_path):
    cleaned = _open(str(tmp_path / "c-0"))
    try:
        work = Workload([cleaned], Cleaner(1 << 16))
        for i in range(200):
            work.apply(("plain", [(KEYS[i % 3], b"value-%d" % i)], 0))
        before = len(cleaned.segments)
        stats = work.clean()
        assert stats.end_offset == cleaned.segments[-1].base_offset
        assert stats.keys_mapped == 3
        assert stats.bytes_reclaimed > 0
        kept = [r.offset for r in cleaned.iter_records() if r.offset < stats.end_offset]
        last_of = {KEYS[i % 3]: i for i in range(200) if i < stats.end_offset}
        assert kept == sorted(last_of.values())
        # Groups go by size before cleaning, so each full segment is first cleaned alone; the round then
        # merges what its output left small: one segment below the end, and the active one.
        assert before > 20 and len(cleaned.segments) == 2
        assert cleaned.segments[0].size < cleaned.config.segment_bytes
    finally:
        cleaned.close()


def test_nothing_at_or_above_the_first_unstable_offset_is_cleaned(tmp_path):
    cleaned = _open(str(tmp_path / "c-0"))
    try:
        work = Workload([cleaned], Cleaner(1 << 16))
        for i in range(50):
            work.apply(("plain", [(KEYS[0], b"before-%d" % i)], 0))
        work.apply(("txn", 20, [(KEYS[0], b"open")], 0))
        unstable = cleaned.log_end_offset - 1
        for i in range(100):
            work.apply(("plain", [(KEYS[0], b"later-%d" % i)], 0))
        cleanable = log_to_clean(cleaned, None, work.now)
        assert cleanable.first_uncleanable_offset == unstable < cleaned.segments[-1].base_offset
        stats = work.clean()
        assert stats.end_offset == unstable
        offsets = [r.offset for r in cleaned.iter_records()]
        assert offsets[-101:] == list(range(unstable, unstable + 101))
        assert len(offsets) < 50 + 101
    finally:
        cleaned.close()


def test_min_compaction_lag_holds_young_segments_back(tmp_path):
    cleaned = _open(str(tmp_path / "c-0"), **{"min.compaction.lag.ms": 10_000})
    try:
        work = Workload([cleaned], Cleaner(1 << 16))
        for i in range(60):
            work.apply(("plain", [(KEYS[0], b"v%d" % i)], 0))
        assert not log_to_clean(cleaned, None, work.now).ready
        work.now += 10_001
        assert log_to_clean(cleaned, None, work.now).ready
    finally:
        cleaned.close()


def test_groups_fit_segment_bytes(tmp_path):
    cleaned = _open(str(tmp_path / "c-0"))
    try:
        work = Workload([cleaned])
        for i in range(80):
            work.apply(("plain", [(KEYS[i % 6], b"v" * 50)], 0))
        segments = cleaned.segments[:-1]
        groups = group_by_size(segments, 1_500, 1 << 20, cleaned.segments[-1].base_offset)
        assert [s for g in groups for s in g] == list(segments)
        assert all(sum(s.size for s in g) <= 1_500 or len(g) == 1 for g in groups)
    finally:
        cleaned.close()
