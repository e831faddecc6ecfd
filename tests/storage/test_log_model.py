"""Log against an in-memory model: random appends, reads, rolls, retention, truncation, reopens.

The model is what a reader may observe: the records (offset → key, value,
timestamp), the batches they were appended in (truncation removes whole
batches), the log start offset and the log end offset. Record n is stamped
`T0 + n`, so every timestamp lookup has one right answer. Segments are
small (2 KiB) and densely indexed, so rolls and index lookups happen in
nearly every run. Retention decisions depend on segment sizes, which the
model does not track: the retention rule reads the segment list before the
call and predicts from Kafka's rules which segments must go.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

import logstore.formats.kafka as K
from logstore.config import LogConfig
from logstore.errors import OffsetOutOfRangeError
from logstore.log import MAX_TIMESTAMP, Log

T0 = 1_000_000
RETENTION_MS = 100
CONFIG = LogConfig.from_properties({
    "segment.bytes": 2048,
    "index.interval.bytes": 256,
    "segment.index.bytes": 1024,
    "retention.bytes": 4096,
    "retention.ms": RETENTION_MS,
    "file.delete.delay.ms": 0,
})

records_st = st.lists(st.tuples(st.none() | st.binary(max_size=8), st.binary(max_size=150)),
                      min_size=1, max_size=8)
buffer_st = st.lists(records_st, min_size=1, max_size=3)
codec_st = st.sampled_from([0, 0, 0, K.GZIP, K.LZ4, K.ZSTD, K.SNAPPY])


@dataclass(frozen=True)
class ModelBatch:
    """One appended batch: its first and last offsets."""

    base_offset: int
    last_offset: int


class LogModel(RuleBasedStateMachine):
    """A Log and the records a reader should see in it."""

    def __init__(self):
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="log-model-")
        self.directory = os.path.join(self.root, "model-0")
        self.log = Log.open(self.directory, CONFIG, clean_shutdown=True)
        self.records: dict[int, tuple[bytes | None, bytes]] = {}
        self.batches: list[ModelBatch] = []
        self.start = 0
        self.end = 0

    def teardown(self):
        self.log.close()
        shutil.rmtree(self.root, ignore_errors=True)

    # -- helpers ------------------------------------------------------------------------

    def _expected(self, offset: int, limit: int | None = None) -> list[tuple]:
        stop = self.end if limit is None else min(self.end, offset + limit)
        return [(o, *self.records[o], T0 + o) for o in range(offset, stop)]

    def _batch_holding(self, offset: int) -> ModelBatch:
        return next(b for b in self.batches if b.base_offset <= offset <= b.last_offset)

    def _cut(self, new_end: int) -> None:
        self.batches = [b for b in self.batches if b.base_offset < new_end]
        self.records = {o: r for o, r in self.records.items() if o < new_end}
        self.end = new_end
        self.start = min(self.start, new_end)

    def _reopen(self, *, clean: bool, recovery_point: int):
        self.log.close()
        self.log = Log.open(self.directory, CONFIG, clean_shutdown=clean, recovery_point=recovery_point,
                            log_start_offset=self.start)
        return self.log.recovery_report

    # -- appends ------------------------------------------------------------------------

    @initialize(buffers=st.lists(buffer_st, max_size=12))
    def start_with_some_records(self, buffers):
        for batches in buffers:
            self.append(batches, 0, False, False)

    @rule(batches=buffer_st, codec=codec_st, durable=st.booleans(), one_call=st.booleans())
    def append(self, batches, codec, durable, one_call):
        first = offset = self.end
        buf = bytearray()
        appended = []
        for records in batches:
            keys, values = zip(*records)
            timestamps = [T0 + offset + i for i in range(len(records))]
            buf += K.encode_batch(list(keys), list(values), timestamps=timestamps, compression=codec)
            appended.append(ModelBatch(offset, offset + len(records) - 1))
            offset += len(records)
        if one_call and len(batches) == 1:
            keys, values = zip(*batches[0])
            result = self.log.append_records(values, keys=keys, timestamps=[T0 + o for o in range(first, offset)],
                                             compression=codec, durable=durable)
        else:
            result = self.log.append(buf, durable=durable)
        assert (result.first_offset, result.last_offset) == (first, offset - 1)
        assert result.record_count == offset - first
        assert (result.max_timestamp, result.offset_of_max_timestamp) == (T0 + offset - 1, offset - 1)
        for records, batch in zip(batches, appended):
            for i, record in enumerate(records):
                self.records[batch.base_offset + i] = record
        self.batches += appended
        self.end = offset
        if durable:
            assert self.log.recovery_point >= offset

    # -- reads --------------------------------------------------------------------------

    @rule(data=st.data(), limit=st.none() | st.integers(1, 20))
    def read_records(self, data, limit):
        offset = data.draw(st.integers(self.start, self.end), label="offset")
        found = self.log.read_records(offset, limit)
        assert [(r.offset, r.key, r.value, r.timestamp) for r in found] == self._expected(offset, limit)

    @rule(data=st.data())
    def read_records_below_max_offset(self, data):
        offset = data.draw(st.integers(self.start, self.end), label="offset")
        max_offset = data.draw(st.integers(offset, self.end), label="max offset")
        found = self.log.read_records(offset, max_offset=max_offset)
        assert [(r.offset, r.key, r.value, r.timestamp) for r in found] == \
            self._expected(offset, max_offset - offset)

    @rule(data=st.data(), max_bytes=st.integers(1, 4096))
    def read_starts_at_the_batch_holding_the_offset(self, data, max_bytes):
        offset = data.draw(st.integers(self.start, self.end), label="offset")
        fetched = self.log.read(offset, max_bytes)
        assert (fetched.fetch_offset, fetched.high_watermark, fetched.log_start_offset) == \
            (offset, self.end, self.start)
        if offset == self.end:
            assert fetched.records is None
            return
        first = K.peek_entry(fetched.read(), 0)
        batch = self._batch_holding(offset)
        assert (first.base_offset, first.last_offset) == (batch.base_offset, batch.last_offset)
        # min_one_message: the whole first batch even when max_bytes is smaller.
        assert fetched.size >= first.size

    @rule(data=st.data())
    def reads_outside_the_log_are_out_of_range(self, data):
        below = data.draw(st.none() if self.start == 0 else st.integers(0, self.start - 1), label="below")
        for offset in ([] if below is None else [below]) + [self.end + 1]:
            with pytest.raises(OffsetOutOfRangeError):
                self.log.read(offset)
        if below is not None:
            with pytest.raises(OffsetOutOfRangeError):
                self.log.read_records(below)

    @rule(data=st.data())
    def offset_for_timestamp(self, data):
        target = data.draw(st.integers(self.start - 3, self.end + 2), label="timestamp offset")
        expected_offset = max(target, self.start)
        expected = (expected_offset, T0 + expected_offset) if expected_offset < self.end else None
        assert self.log.offset_for_timestamp(T0 + target) == expected

    # -- segments, retention, truncation --------------------------------------------------

    @rule()
    def roll(self):
        before = [s.base_offset for s in self.log.segments]
        empty = self.log.active_segment.size == 0
        self.log.roll()
        after = [s.base_offset for s in self.log.segments]
        assert after == (before if empty else before + [self.end])

    @rule(data=st.data())
    def delete_records(self, data):
        offset = data.draw(st.integers(self.start, self.end), label="offset")
        assert self.log.delete_records(offset) == max(self.start, offset)
        if offset > self.start:
            # Moving the start deletes the segments wholly below it at once.
            segments = self.log.segments
            assert len(segments) == 1 or segments[1].base_offset > offset
            self.start = offset
        with pytest.raises(OffsetOutOfRangeError):
            self.log.delete_records(self.end + 1)

    @rule(now=st.integers(0, 400))
    def delete_old_segments(self, now):
        now_ms = T0 + self.end + now - 200
        segments = [(s.base_offset, s.size) for s in self.log.segments]
        nexts = [b for b, _ in segments[1:]]
        # Kafka's order: below the log start, then past retention.ms, then over retention.bytes;
        # the active segment never goes.
        keep = list(zip(segments, nexts))
        while keep and keep[0][1] <= self.start:
            keep.pop(0)
        while keep and now_ms - (T0 + keep[0][1] - 1) > RETENTION_MS:
            keep.pop(0)
        excess = sum(size for (_, size), _ in keep) + segments[-1][1] - CONFIG.retention_bytes
        while keep and excess - keep[0][0][1] >= 0:
            excess -= keep.pop(0)[0][1]
        expected = [base for (base, _), _ in keep] + [segments[-1][0]]
        assert self.log.delete_old_segments(now_ms) == len(segments) - len(expected)
        assert [s.base_offset for s in self.log.segments] == expected
        self.start = max(self.start, expected[0])
        self.log.delete_expired_files(all_now=True)
        names = [n for n in os.listdir(self.directory) if n[:1].isdigit()]
        assert {int(n.split(".")[0]) for n in names if not n.endswith(".snapshot")} == set(expected)
        # Producer snapshots below the new log start go with their segments.
        assert all(self.start <= int(n.split(".")[0]) <= self.end for n in names if n.endswith(".snapshot"))

    @rule(data=st.data())
    def truncate_to(self, data):
        offset = data.draw(st.integers(self.start, self.end + 1), label="offset")
        self.log.truncate_to(offset)
        if offset < self.end:
            self._cut(self._batch_holding(offset).base_offset)

    @rule(data=st.data())
    def truncate_fully_and_start_at(self, data):
        offset = data.draw(st.integers(0, self.end + 50), label="offset")
        self.log.truncate_fully_and_start_at(offset)
        self.batches, self.records = [], {}
        self.start = self.end = offset
        assert [s.base_offset for s in self.log.segments] == [offset]

    @rule()
    def flush(self):
        self.log.flush()
        assert self.log.recovery_point == self.end

    # -- reopening ------------------------------------------------------------------------

    @rule()
    def reopen_clean(self):
        report = self._reopen(clean=True, recovery_point=self.end)
        assert report.clean_shutdown
        assert (report.recovered_segments, report.truncations, report.rebuilt_indexes) == ([], [], [])
        assert self.log.recovery_point == self.end

    @rule(data=st.data())
    def reopen_unclean(self, data):
        recovery_point = data.draw(st.integers(self.start, self.end), label="recovery point")
        report = self._reopen(clean=False, recovery_point=recovery_point)
        bases = [s.base_offset for s in self.log.segments]
        first = max([i for i, base in enumerate(bases) if base <= recovery_point], default=0)
        assert report.recovered_segments == bases[first:]
        assert (report.truncations, report.deleted_segments, report.rebuilt_indexes) == ([], [], [])
        assert report.recovery_point == self.log.recovery_point == min(recovery_point, self.end)

    # -- invariants -----------------------------------------------------------------------

    @invariant()
    def offsets_match(self):
        assert (self.log.log_start_offset, self.log.log_end_offset) == (self.start, self.end)

    @invariant()
    def every_record_reads_back(self):
        found = self.log.read_records(self.start)
        assert [(r.offset, r.key, r.value, r.timestamp) for r in found] == self._expected(self.start)

    @invariant()
    def newest_record_is_found_by_timestamp(self):
        if self.start < self.end:
            newest = (self.end - 1, T0 + self.end - 1)
            assert self.log.offset_for_timestamp(MAX_TIMESTAMP) == newest
            assert self.log.offset_for_timestamp(T0 + self.end - 1) == newest

    @invariant()
    def segments_and_indexes_are_consistent(self):
        segments = self.log.segments
        bases = [s.base_offset for s in segments]
        assert bases == sorted(set(bases)) and bases[0] <= self.start and bases[-1] <= self.end
        model_bases = {b.base_offset for b in self.batches}
        for i, segment in enumerate(segments):
            next_base = bases[i + 1] if i + 1 < len(bases) else self.end
            # A segment starts at a batch (or is empty and at the log end).
            assert segment.base_offset in model_bases or (segment.size == 0 and segment.base_offset == self.end)
            index = segment.offset_index
            for slot in range(index.entries):
                offset, position = index.entry(slot)
                # Each entry is one batch's last offset at that batch's position.
                first = next(segment.iter_bounds(position))
                assert first.position == position and first.last_offset == offset, (segment, offset, first)
                found = segment.translate_offset(offset)
                assert found is not None and found.position == position, (segment, offset, position, found)
                assert offset < next_base
            times = segment.time_index
            for slot in range(times.entries):
                timestamp, offset = times.entry(slot)
                assert segment.base_offset <= offset < next_base and timestamp == T0 + offset, \
                    (segment, timestamp, offset)


def test_log_matches_the_model():
    run_state_machine_as_test(LogModel, settings=settings(
        max_examples=60, stateful_step_count=40, deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]))


@pytest.mark.soak
def test_log_matches_the_model_soak():
    run_state_machine_as_test(LogModel, settings=settings(
        max_examples=1000, stateful_step_count=80, deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]))
