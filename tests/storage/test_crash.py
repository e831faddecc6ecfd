"""Crash recovery: a writer killed with SIGKILL mid-append, and torn or flipped last batches.

The kill tests run `crash_child.py` in a real process, read its
acknowledgements ("everything below n is durable") until a random count,
SIGKILL it, and reopen the store. Recovery must leave exactly the records
0..N-1 the child wrote, in order and byte for byte, with N at least the
last acknowledgement; every offset, index entry and timestamp must be found
where it is; the log must take appends at N; and a clean close after that
must reopen without scanning. Some series kill the same directory again and
again, and the next child recovers what the last one left (or what the test
recovered and closed), so recovering an already recovered log is covered.

A SIGKILL leaves the page cache alone, so the child's writes survive it and
what recovery meets is an index left preallocated, a recovery point behind
the log end and, rarely, a write cut short. The torn-write tests make the
worst of those on purpose: after a clean write, the last batch of the
active segment is cut at every byte or has a byte changed at every
position, and recovery must remove that batch, and nothing before it, and
say where.
"""
from __future__ import annotations

import os
import random
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import crash_child
import logstore
import logstore.formats.kafka as K
from killing import run_until_acks
from logstore.checkpoints import CLEAN_SHUTDOWN_MARKER, RECOVERY_POINT_CHECKPOINT, OffsetCheckpoint
from logstore.config import LogConfig
from logstore.log import MAX_TIMESTAMP, Log

KEY = (crash_child.TOPIC, 0)
BASE_TS = crash_child.BASE_TIMESTAMP


# ---------------------------------------------------------------------------
# Running and killing the child


@dataclass(frozen=True)
class Crash:
    """What one killed child said: the log end it opened with and its last acknowledgement."""

    opened_at: int
    acked: int
    acks: int


def _kill_after(directory: Path, seed: int, acks: int) -> Crash:
    """Start the child on `directory`, read `acks` acknowledgements, SIGKILL it and reap it."""
    opened_at, log_start, acked = run_until_acks([sys.executable, crash_child.__file__, str(directory), str(seed)],
                                             acks, directory.parent / f"{directory.name}-child-{seed}.err")
    assert log_start == 0
    return Crash(opened_at, acked, acks)


# ---------------------------------------------------------------------------
# Checking a recovered log


def _check_indexes(log: Log) -> None:
    """Every offset-index entry points at the start of the batch whose last offset it holds
    (appends and recovery index batch by batch); every time-index entry names an offset of
    its segment with that offset's timestamp."""
    segments = log.segments
    for i, segment in enumerate(segments):
        next_base = segments[i + 1].base_offset if i + 1 < len(segments) else log.log_end_offset
        previous = (segment.base_offset - 1, -1)
        index = segment.offset_index
        for slot in range(index.entries):
            offset, position = index.entry(slot)
            assert offset > previous[0] and position > previous[1], (segment, slot, offset, position)
            first = next(segment.iter_bounds(position))
            assert first.position == position and first.last_offset == offset, (segment, offset, position, first)
            found = segment.translate_offset(offset)
            assert found is not None and found.position == position, (segment, offset, position, found)
            assert offset < next_base
            previous = (offset, position)
        times = segment.time_index
        for slot in range(times.entries):
            timestamp, offset = times.entry(slot)
            assert segment.base_offset <= offset < next_base, (segment, slot, offset)
            assert timestamp == BASE_TS + offset, (segment, slot, timestamp, offset)


def _check_content(log: Log, end: int, exhaustive_from: int, rng: random.Random) -> None:
    """The log holds records 0..end-1 of the child, byte for byte, each found by offset and timestamp.

    Offsets from `exhaustive_from` on (what this round wrote or recovery
    rescanned) are all looked up; earlier ones, checked by earlier rounds,
    by a sample.
    """
    assert log.log_start_offset == 0
    assert log.log_end_offset == end
    records = log.read_records(0)
    assert [r.offset for r in records] == list(range(end))
    for record in records:
        assert (record.key, record.value, record.timestamp) == crash_child.record_for(record.offset)
    exhaustive_from = min(exhaustive_from, end)
    looked_up = rng.sample(range(exhaustive_from), min(exhaustive_from, 200)) + list(range(exhaustive_from, end))
    for offset in looked_up:
        assert log.read_records(offset, 1)[0].offset == offset
        assert log.offset_for_timestamp(BASE_TS + offset) == (offset, BASE_TS + offset)
    assert log.offset_for_timestamp(BASE_TS + end) is None
    if end:
        assert log.offset_for_timestamp(BASE_TS - 1) == (0, BASE_TS)
        assert log.offset_for_timestamp(MAX_TIMESTAMP) == (end - 1, BASE_TS + end - 1)
    _check_indexes(log)


def _recover_and_check(directory: Path, crash: Crash, checked: int, rng: random.Random) -> tuple[int, int]:
    """Reopen a killed store, check it, append, close cleanly and reopen.

    Offsets below `checked` were looked up one by one by an earlier round.
    Returns the log end offset recovery found and the one after the appends.
    """
    assert not (directory / CLEAN_SHUTDOWN_MARKER).exists()
    recovery_point = OffsetCheckpoint(directory / RECOVERY_POINT_CHECKPOINT).read().get(KEY, 0)
    with logstore.open(str(directory), crash_child.CONFIG, start_scheduler=False) as store:
        log = store.log(*KEY)
        report = log.recovery_report
        end = log.log_end_offset
        assert not report.clean_shutdown
        assert crash.opened_at <= crash.acked <= end, (crash, report.summary())
        assert recovery_point <= end
        # The scan starts at the segment holding the checkpointed recovery point (after
        # any segment whose indexes failed their check and were rebuilt first).
        bases = [s.base_offset for s in log.segments]
        first = max([i for i, base in enumerate(bases) if base <= recovery_point], default=0)
        rebuilt = [base for base, _ in report.rebuilt_indexes]
        assert report.recovered_segments == rebuilt + bases[first:], report.summary()
        assert report.log_end_offset == end
        _check_content(log, end, min([checked] + report.recovered_segments), rng)

        count = rng.randint(1, 30)
        appended = log.append(crash_child.records_buffer(end, count, rng))
        assert (appended.first_offset, appended.last_offset) == (end, end + count - 1)
        assert log.log_end_offset == end + count
    assert (directory / CLEAN_SHUTDOWN_MARKER).exists()

    with logstore.open(str(directory), crash_child.CONFIG, start_scheduler=False) as store:
        log = store.log(*KEY)
        assert log.recovery_report.clean_shutdown
        assert log.recovery_report.recovered_segments == []
        assert log.recovery_report.truncations == []
        assert log.log_end_offset == end + count
        tail = log.read_records(end)
        assert [r.offset for r in tail] == list(range(end, end + count))
        for record in tail:
            assert (record.key, record.value, record.timestamp) == crash_child.record_for(record.offset)
        _check_indexes(log)
    return end, end + count


def _crash_series(base: Path, seed: int, rounds: int) -> None:
    """`rounds` kills of writers on one directory, each followed by a checked recovery.

    After each kill the test recovers either the directory itself (so the next
    child opens a cleanly closed, once-recovered log) or a copy of it (so the
    next child recovers the crash itself, appends, and is killed in turn).
    """
    rng = random.Random(seed)
    directory = base / f"store-{seed}"
    expected = checked = 0
    for round_ in range(rounds):
        acks = rng.choice([0, rng.randint(1, 10), rng.randint(10, 200)])
        crash = _kill_after(directory, seed * 1000 + round_, acks)
        assert crash.opened_at == expected, "the child opened at a different end than the test recovered"
        in_place = round_ == rounds - 1 or rng.random() < 0.5
        target = directory if in_place else base / f"copy-{seed}-{round_}"
        if not in_place:
            shutil.copytree(directory, target)
        recovered, appended = _recover_and_check(target, crash, checked, rng)
        checked = recovered
        # On a copy, the test's appends stay in the copy: the next child must recover to `recovered`.
        expected = appended if in_place else recovered
        if not in_place:
            shutil.rmtree(target)


@pytest.mark.parametrize("seed", range(6))
def test_killed_writer_leaves_an_acknowledged_prefix(tmp_path, seed):
    # 12 kills in all; seeds 2 and 5 kill the same directory three times.
    _crash_series(tmp_path, seed, rounds=1 + seed % 3)


@pytest.mark.soak
@pytest.mark.parametrize("seed", range(100, 125))
def test_killed_writer_soak(tmp_path, seed):
    # 125 kills in all, five to a directory.
    _crash_series(tmp_path, seed, rounds=5)


# ---------------------------------------------------------------------------
# Torn and damaged batches, at the Log level

TORN_CONFIG = LogConfig.from_properties({"segment.bytes": 2048, "index.interval.bytes": 256,
                                         "segment.index.bytes": 1024, "retention.ms": -1})


@dataclass(frozen=True)
class Batch:
    """Where one batch of the written log lies."""

    segment: int
    base_offset: int
    last_offset: int
    position: int
    size: int


@dataclass(frozen=True)
class Written:
    """A cleanly closed log of crash_child records: its files' bytes and its batches."""

    directory: Path
    files: dict[str, bytes]
    batches: list[Batch]
    end: int

    @property
    def segments(self) -> list[int]:
        return sorted({b.segment for b in self.batches})

    def log_path(self, segment: int) -> Path:
        return self.directory / f"{segment:020d}.log"

    def restore(self) -> None:
        """Put every file back as it was after the clean close (rewriting only what changed)."""
        for name in os.listdir(self.directory):
            if name not in self.files:
                os.unlink(self.directory / name)
        for name, data in self.files.items():
            fd = os.open(self.directory / name, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                if os.fstat(fd).st_size != len(data) or os.pread(fd, len(data), 0) != data:
                    os.pwrite(fd, data, 0)
                    os.ftruncate(fd, len(data))
            finally:
                os.close(fd)

    def reopen(self, recovery_point: int = 0) -> Log:
        """Open after an unclean shutdown: every segment from `recovery_point`'s is scanned."""
        return Log.open(str(self.directory), TORN_CONFIG, clean_shutdown=False, recovery_point=recovery_point)


def _write_log(base: Path, last_codec: int = 0) -> Written:
    """Three or more segments of small batches, the last one `last_codec`-compressed, closed cleanly."""
    directory = base / "torn-0"
    rng = random.Random(20)
    with Log.open(str(directory), TORN_CONFIG, clean_shutdown=True) as log:
        n = 0
        while len(log.segments) < 3 or log.active_segment.size < 1000:
            count = rng.randint(1, 6)
            log.append(crash_child.records_buffer(n, count, rng))
            n += count
        keys, values, timestamps = zip(*(crash_child.record_for(n + i) for i in range(4)))
        log.append(bytearray(K.encode_batch(list(keys), list(values), timestamps=list(timestamps),
                                            compression=last_codec)))
        batches = [Batch(s.base_offset, b.base_offset, b.last_offset, b.position, b.size)
                   for s in log.segments for b in s.iter_bounds()]
        end = log.log_end_offset
    files = {name: (directory / name).read_bytes() for name in os.listdir(directory)}
    return Written(directory, files, batches, end)


def _check_cut(log: Log, written: Written, batch: Batch, bytes_removed: int) -> None:
    """Recovery removed `batch` and everything after it, nothing before, and said where."""
    report = log.recovery_report
    assert [(t.base_offset, t.position, t.bytes_removed) for t in report.truncations] == \
        [(batch.segment, batch.position, bytes_removed)], report.summary()
    assert report.truncations[0].reason
    assert report.deleted_segments == [s for s in written.segments if s > batch.segment]
    assert report.log_end_offset == log.log_end_offset == batch.base_offset
    assert [s.base_offset for s in log.segments] == [s for s in written.segments if s <= batch.segment]
    assert written.log_path(batch.segment).stat().st_size == batch.position
    records = log.read_records(0)
    assert [r.offset for r in records] == list(range(batch.base_offset))
    for record in records:
        assert (record.key, record.value, record.timestamp) == crash_child.record_for(record.offset)
    _check_indexes(log)
    key, value, timestamp = crash_child.record_for(batch.base_offset)
    appended = log.append_records([value], keys=[key], timestamps=timestamp)
    assert appended.first_offset == batch.base_offset
    assert log.read_records(batch.base_offset)[0].value == value


@pytest.mark.parametrize("codec", [0, K.GZIP], ids=["uncompressed", "gzip"])
def test_last_batch_torn_at_every_byte_is_cut_whole(tmp_path, codec):
    written = _write_log(tmp_path, codec)
    last = written.batches[-1]
    for cut in range(last.position + 1, last.position + last.size):
        written.restore()
        os.truncate(written.log_path(last.segment), cut)
        with written.reopen() as log:
            _check_cut(log, written, last, cut - last.position)


# Bytes 0-7 (base offset) and 12-15 (partition leader epoch) are outside the
# CRC, which starts at the attributes (byte 21); the base offset has its own
# cases below, and nothing on disk can tell a changed leader epoch from a real one.
UNCHECKED = set(range(0, 8)) | set(range(12, 16))


@pytest.mark.parametrize("codec", [0, K.GZIP], ids=["uncompressed", "gzip"])
def test_last_batch_with_a_changed_byte_anywhere_is_cut_whole(tmp_path, codec):
    written = _write_log(tmp_path, codec)
    last = written.batches[-1]
    path = written.log_path(last.segment)
    for at in range(last.size):
        if at in UNCHECKED:
            continue
        written.restore()
        with open(path, "r+b") as f:
            f.seek(last.position + at)
            f.write(bytes([written.files[path.name][last.position + at] ^ (0x01, 0x80, 0xFF)[at % 3]]))
        with written.reopen() as log:
            _check_cut(log, written, last, last.size)


def _with_base_offset(written: Written, batch: Batch, base_offset: int) -> None:
    path = written.log_path(batch.segment)
    data = bytearray(written.files[path.name])
    data[batch.position:batch.position + 8] = base_offset.to_bytes(8, "big", signed=True)
    path.write_bytes(data)


@pytest.mark.parametrize("change", ["repeats the previous batch's offsets", "negative",
                                    "2**31 past the segment base"])
def test_last_batch_with_a_base_offset_breaking_the_order_is_cut(tmp_path, change):
    written = _write_log(tmp_path)
    last, previous = written.batches[-1], written.batches[-2]
    assert previous.segment == last.segment
    span = last.last_offset - last.base_offset
    _with_base_offset(written, last, {
        "repeats the previous batch's offsets": previous.last_offset - span,
        "negative": -1 - span,
        "2**31 past the segment base": last.segment + 2**31,
    }[change])
    with written.reopen() as log:
        _check_cut(log, written, last, last.size)


def test_last_batch_moved_forward_is_kept_as_a_gap(tmp_path):
    # Offsets may skip (compaction leaves gaps), so a base offset moved forward is a
    # valid log: recovery keeps it and the log end follows it.
    written = _write_log(tmp_path)
    last = written.batches[-1]
    _with_base_offset(written, last, last.base_offset + 10)
    with written.reopen() as log:
        assert log.recovery_report.truncations == []
        assert log.log_end_offset == written.end + 10
        assert [r.offset for r in log.read_records(last.base_offset)] == \
            list(range(last.base_offset + 10, written.end + 10))


@pytest.mark.parametrize("where", ["middle of the active segment", "first segment"])
def test_damaged_batch_before_the_end_cuts_the_log_there(tmp_path, where):
    written = _write_log(tmp_path)
    active = written.segments[-1]
    if where == "first segment":
        victim = [b for b in written.batches if b.segment == written.segments[0]][1]
    else:
        victim = [b for b in written.batches if b.segment == active][1]
    path = written.log_path(victim.segment)
    data = bytearray(written.files[path.name])
    data[victim.position + victim.size - 1] ^= 0x40
    path.write_bytes(data)
    with written.reopen() as log:
        _check_cut(log, written, victim, len(data) - victim.position)
