"""The partition log: appends, rolls, reads, lookups, truncation, retention, flushing."""
from __future__ import annotations

import os
import threading

import pytest

import logstore.formats.kafka as K
from logstore.config import LogConfig
from logstore.errors import InvalidRecordError, OffsetOutOfRangeError, RecordBatchTooLargeError, RecordTooLargeError
from logstore.filesystem import OsFileSystem
from logstore.log import Log

TS = 1_700_000_000_000


def _config(**props):
    return LogConfig.from_properties({k.replace("_", "."): v for k, v in props.items()})


def _fill(log, batches, per_batch=3, ts_step=10):
    for i in range(batches):
        log.append_records([b"v%d.%d" % (i, j) for j in range(per_batch)], keys=[b"k"] * per_batch,
                           timestamps=TS + i * ts_step)


@pytest.fixture
def small(tmp_path):
    log = Log.open(str(tmp_path / "t-0"), _config(segment_bytes=1000, index_interval_bytes=150))
    yield log
    log.close()


def test_append_assigns_offsets_and_rolls_by_size(small):
    result = small.append_records([b"a", b"b"], timestamps=TS)
    assert (result.first_offset, result.last_offset, result.record_count) == (0, 1, 2)
    _fill(small, 40)
    assert small.log_end_offset == 122
    bases = [s.base_offset for s in small.segments]
    assert len(bases) > 3 and bases == sorted(bases) and bases[0] == 0
    assert all(s.size <= 1000 for s in small.segments)
    names = sorted(os.listdir(small.directory))
    assert f"{bases[1]:020d}.log" in names and f"{bases[1]:020d}.index" in names
    # Rolled segments have trimmed indexes; the active one is preallocated.
    for segment in small.segments[:-1]:
        assert os.path.getsize(segment.offset_index.path) == 8 * segment.offset_index.entries


def test_every_offset_of_a_multi_segment_log_is_found(small):
    _fill(small, 60)
    for offset in range(small.log_end_offset):
        assert small.read_records(offset, 1)[0].offset == offset
    assert [r.offset for r in small.iter_records()] == list(range(180))


def test_read_bounds_and_errors(small):
    _fill(small, 10)
    with pytest.raises(OffsetOutOfRangeError):
        small.read(31)
    assert small.read(30).records is None
    data = small.read(4, max_bytes=1)
    batch = next(K.iter_entries(small.read(3, 10_000).read()))
    assert data.size == batch.size_in_bytes  # min_one_message returns one whole batch
    assert small.read(4, max_bytes=1, min_one_message=False).size == 1
    assert [r.offset for r in small.iter_records(4, max_offset=9)] == list(range(4, 9))
    upper = small.read(0, 10_000, max_offset=6)
    assert [e.last_offset for e in K.iter_entries(upper.read())] == [2, 5]


def test_offset_for_timestamp(small):
    _fill(small, 30)
    assert small.offset_for_timestamp(TS) == (0, TS)
    assert small.offset_for_timestamp(TS + 15) == (6, TS + 20)
    assert small.offset_for_timestamp(TS + 290) == (87, TS + 290)
    assert small.offset_for_timestamp(TS + 291) is None
    assert small.offset_for_timestamp(-1) == (90, -1)
    assert small.offset_for_timestamp(-2) == (0, -1)
    assert small.offset_for_timestamp(-3) == (87, TS + 290)


def test_max_timestamp_lookup_finds_the_record_not_the_batch(small):
    small.append_records([b"a", b"b", b"c"], timestamps=[TS + 5, TS + 99, TS + 7])
    small.append_records([b"d"], timestamps=TS + 50)
    assert small.offset_for_timestamp(-3) == (1, TS + 99)


def test_truncate_to_removes_whole_batches_and_later_segments(small):
    _fill(small, 40)
    segments_before = len(small.segments)
    small.truncate_to(31)
    assert small.log_end_offset == 30
    assert len(small.segments) < segments_before
    assert [r.offset for r in small.iter_records()] == list(range(30))
    assert small.append_records([b"x"]).first_offset == 30
    small.truncate_fully_and_start_at(500)
    assert (small.log_start_offset, small.log_end_offset, len(small.segments)) == (500, 500, 1)
    assert small.append_records([b"y"]).first_offset == 500


def test_retention_by_bytes_time_and_start_offset_never_takes_the_active_segment(tmp_path):
    config = _config(segment_bytes=1000, retention_bytes=2500, file_delete_delay_ms=0)
    with Log.open(str(tmp_path / "t-0"), config) as log:
        _fill(log, 60)
        total = len(log.segments)
        deleted = log.delete_old_segments(now_ms=TS)
        assert deleted == total - len(log.segments) > 0
        assert log.size - log.segments[0].size < 2500 <= log.size
        assert log.log_start_offset == log.segments[0].base_offset
        assert any(n.endswith(".deleted") for n in os.listdir(log.directory))
        log.delete_expired_files()
        assert not any(n.endswith(".deleted") for n in os.listdir(log.directory))
        with pytest.raises(OffsetOutOfRangeError):
            log.read(0)
        assert log.delete_records(log.log_end_offset - 1) == log.log_end_offset - 1
        log.delete_old_segments(now_ms=TS)
        assert len(log.segments) == 1
    config = _config(segment_bytes=1000, retention_ms=1000)
    with Log.open(str(tmp_path / "u-0"), config) as log:
        _fill(log, 40, ts_step=100)
        log.delete_old_segments(now_ms=TS + 4000 - 1)
        assert log.segments[0].max_timestamp >= TS + 4000 - 1 - 1000 - 100
        log.delete_old_segments(now_ms=TS + 10**9)
        assert len(log.segments) == 1 and log.log_end_offset == 120


def test_roll_by_time_uses_batch_timestamps(tmp_path):
    with Log.open(str(tmp_path / "t-0"), _config(segment_ms=1000)) as log:
        log.append_records([b"a"], timestamps=TS)
        log.append_records([b"b"], timestamps=TS + 1000)
        assert len(log.segments) == 1
        log.append_records([b"c"], timestamps=TS + 1001)
        assert [s.base_offset for s in log.segments] == [0, 2]


def test_bad_appends_change_nothing(small):
    small.append_records([b"a"])
    good = bytearray(K.encode_batch([None], [b"x"]))
    bad = bytearray(good)
    bad[-1] ^= 1
    with pytest.raises(InvalidRecordError.__mro__[1]):
        small.append(good + bad)
    control = K.encode_control_batch(True, 0, 5, 0, TS)
    with pytest.raises(InvalidRecordError):
        small.append(control)
    # Larger than segment.bytes (1000) is Kafka's RECORD_LIST_TOO_LARGE (18); max.message.bytes' is code 10.
    with pytest.raises(RecordBatchTooLargeError) as refused:
        small.append(K.encode_batch([None], [b"x" * 2000]))
    assert refused.value.code == 18
    small.config = small.config.with_overrides({"max.message.bytes": 500})
    with pytest.raises(RecordTooLargeError) as refused:
        small.append(K.encode_batch([None], [b"x" * 600]))
    assert refused.value.code == 10 and not isinstance(refused.value, RecordBatchTooLargeError)
    assert small.log_end_offset == 1 and small.active_segment.size == small.read(0).size
    assert small.append(control, client=False).first_offset == 1


def test_leader_epoch_is_stamped_and_checkpointed(tmp_path):
    with Log.open(str(tmp_path / "t-0")) as log:
        log.append(K.encode_batch([None], [b"a"]), leader_epoch=3)
        log.append(K.encode_batch([None], [b"b"]), leader_epoch=3)
        log.append(K.encode_batch([None], [b"c"]), leader_epoch=5)
        assert [e.partition_leader_epoch for e in K.iter_entries(log.read(0).read())] == [3, 3, 5]
    assert open(tmp_path / "t-0" / "leader-epoch-checkpoint").read() == "0\n2\n3 0\n5 2\n"


def test_recovery_restores_epochs_the_checkpoint_missed(tmp_path):
    """A crash after an append in a new epoch but before its checkpoint write loses no epoch."""
    path = tmp_path / "t-0"
    with Log.open(str(path)) as log:
        log.append(K.encode_batch([None], [b"a"]), leader_epoch=3)
        log.flush()
        before = (path / "leader-epoch-checkpoint").read_text()
        log.append(K.encode_batch([None], [b"b"]), leader_epoch=5)
        log.append(K.encode_batch([None], [b"c"]), leader_epoch=7)
    (path / "leader-epoch-checkpoint").write_text(before)
    with Log.open(str(path), recovery_point=1) as log:
        assert log.epoch_cache.entries == [(3, 0), (5, 1), (7, 2)]
    assert (path / "leader-epoch-checkpoint").read_text() == "0\n3\n3 0\n5 1\n7 2\n"


def test_log_append_time_stamps_batches(tmp_path):
    with Log.open(str(tmp_path / "t-0"), _config(message_timestamp_type="LogAppendTime")) as log:
        result = log.append_records([b"a", b"b"], timestamps=5)
        assert result.log_append_time > TS
        entry = next(K.iter_entries(log.read(0).read()))  # CRC re-checked here
        assert entry.timestamp_type == K.LOG_APPEND_TIME and entry.max_timestamp == result.log_append_time


def test_durable_appends_share_fsyncs(tmp_path, monkeypatch):
    """Appends that arrive while an fsync runs are all covered by the next one."""
    writes = threading.Condition()
    state = {"writes": 0, "syncs": 0}
    real_write, real_sync = OsFileSystem.pwrite, os.fdatasync

    def counting_write(self, fd, data, position):
        n = real_write(self, fd, data, position)
        with writes:
            state["writes"] += 1
            writes.notify_all()
        return n

    def slow_first_sync(fd):
        with writes:
            state["syncs"] += 1
            if state["syncs"] == 1:
                # Hold the first fsync until every writer has written its batch.
                assert writes.wait_for(lambda: state["writes"] == 8, timeout=30)
        real_sync(fd)

    with Log.open(str(tmp_path / "t-0")) as log:
        # At the file-system seam: a small write does not go through os.pwrite (`pwrite_holding_gil`).
        monkeypatch.setattr(OsFileSystem, "pwrite", counting_write)
        monkeypatch.setattr(os, "fdatasync", slow_first_sync)
        results = []
        threads = [threading.Thread(target=lambda: results.append(log.append_records([b"x"], durable=True)))
                   for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(results) == 8 and log.recovery_point == log.log_end_offset == 8
        # One fsync per append would be 8; the first covers what was written
        # before it started, the second everything that queued behind it.
        assert 1 <= state["syncs"] <= 2


def test_flush_messages_moves_the_recovery_point(tmp_path):
    with Log.open(str(tmp_path / "t-0"), _config(flush_messages=5)) as log:
        for _ in range(4):
            log.append_records([b"x"])
        assert log.recovery_point == 0
        log.append_records([b"x"])
        assert log.recovery_point == 5
