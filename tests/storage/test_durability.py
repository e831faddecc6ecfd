"""Durability without blocking: `Log.durable` futures share fsyncs, and a failed fsync moves nothing."""
from __future__ import annotations

import os
import threading

import pytest

import logstore
import logstore.formats.kafka as K
from logstore.checkpoints import CLEAN_SHUTDOWN_MARKER
from logstore.config import LogConfig
from logstore.errors import StorageError
from logstore.log import Log

WAIT = 30


class _GatedSync:
    """Counts fdatasync calls; the first one waits for `release` (or raises `fail`)."""

    def __init__(self, monkeypatch, fail: BaseException | None = None):
        self.calls = 0
        self.entered = threading.Event()
        self.release = threading.Event()
        self._fail = fail
        self._real = os.fdatasync
        monkeypatch.setattr(os, "fdatasync", self)

    def __call__(self, fd):
        self.calls += 1
        if self.calls == 1:
            self.entered.set()
            assert self.release.wait(WAIT)
            if self._fail is not None:
                raise self._fail
        self._real(fd)


def _append(log: Log, value: bytes = b"x") -> int:
    return log.append_records([value]).last_offset


def test_durable_futures_wait_for_one_shared_fsync(tmp_path, monkeypatch):
    with Log.open(str(tmp_path / "t-0")) as log:
        sync = _GatedSync(monkeypatch)
        first = log.durable(_append(log) + 1)
        assert sync.entered.wait(WAIT)
        # Appended while the first fsync runs: none of these is on disk yet.
        later = [log.durable(_append(log, b"%d" % i) + 1) for i in range(3)]
        assert not any(f.done() for f in [first, *later])
        assert log.recovery_point == 0
        sync.release.set()
        assert first.result(WAIT) >= 1
        assert [f.result(WAIT) >= 4 for f in later] == [True] * 3
        assert log.recovery_point == log.log_end_offset == 4
        # The three that queued behind the first fsync shared the second.
        assert sync.calls == 2


def test_a_durable_future_for_flushed_offsets_is_already_done(tmp_path):
    with Log.open(str(tmp_path / "t-0")) as log:
        end = _append(log) + 1
        log.flush()
        future = log.durable(end)
        assert future.done() and future.result() == end


def test_a_failed_fsync_fails_the_waiters_and_takes_the_log_offline(tmp_path, monkeypatch):
    log = Log.open(str(tmp_path / "t-0"))
    sync = _GatedSync(monkeypatch, fail=OSError(5, "Input/output error"))
    future = log.durable(_append(log) + 1)
    assert sync.entered.wait(WAIT)
    sync.release.set()
    with pytest.raises(OSError, match="Input/output error"):
        future.result(WAIT)
    assert log.recovery_point == 0
    # A retried fsync may "succeed" after the kernel dropped the pages: the log goes offline.
    with pytest.raises(StorageError, match="failed fsync"):
        log.durable(log.log_end_offset).result(WAIT)
    with pytest.raises(StorageError, match="failed fsync"):
        log.flush()
    with pytest.raises(StorageError, match="failed fsync") as info:
        _append(log)
    assert info.value.code == 56  # KAFKA_STORAGE_ERROR
    assert log.read_records(0)[0].value == b"x"
    # Closing still closes the files, and says the shutdown was not clean.
    with pytest.raises(StorageError, match="failed fsync"):
        log.close()
    assert log.active_segment.closed


def test_close_makes_outstanding_futures_durable(tmp_path, monkeypatch):
    log = Log.open(str(tmp_path / "t-0"))
    sync = _GatedSync(monkeypatch)
    first = log.durable(_append(log) + 1)
    assert sync.entered.wait(WAIT)
    second = log.durable(_append(log) + 1)
    closer = threading.Thread(target=log.close)
    closer.start()
    sync.release.set()
    closer.join(WAIT)
    assert not closer.is_alive()
    assert first.result(WAIT) >= 1 and second.result(WAIT) == 2
    with pytest.raises(StorageError):
        log.durable(3).result(WAIT)


def test_every_batch_of_a_multi_batch_append_can_be_indexed(tmp_path):
    config = LogConfig.from_properties({"index.interval.bytes": "100"})
    with Log.open(str(tmp_path / "t-0"), config) as log:
        batches = [K.encode_batch([None] * 3, [b"%03d" % i * 20] * 3, None, [1_000 + i] * 3) for i in range(4)]
        log.append(bytearray(b"".join(batches)))
        segment = log.active_segment
        positions = [0]
        for batch in batches[:-1]:
            positions.append(positions[-1] + len(batch))
        # The first batch opens the segment (nothing since the last entry); each later one is indexed
        # at its own start by its own last offset, not the append's.
        assert [segment.offset_index.entry(i) for i in range(segment.offset_index.entries)] == \
            [(3 * i + 2, positions[i]) for i in range(1, 4)]
        assert [segment.time_index.entry(i) for i in range(segment.time_index.entries)] == \
            [(1_000 + i, 3 * i + 2) for i in range(1, 4)]
        for offset in range(12):
            found = segment.translate_offset(offset)
            assert found.position == positions[offset // 3]


def test_a_store_with_an_offline_log_shuts_down_unclean(tmp_path, monkeypatch):
    store = logstore.open(str(tmp_path), start_scheduler=False)
    store.create_topic("t", 2)
    store.log("t", 1).append_records([b"kept"], durable=True)

    def failing(fd):
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(os, "fdatasync", failing)
    with pytest.raises(OSError):
        store.log("t", 0).append_records([b"lost?"], durable=True)
    monkeypatch.undo()
    with pytest.raises(StorageError, match="failed fsync"):
        store.close()
    assert not (tmp_path / CLEAN_SHUTDOWN_MARKER).exists()
    with logstore.open(str(tmp_path), start_scheduler=False) as reopened:
        assert not reopened.log("t", 0).recovery_report.clean_shutdown
        assert [r.value for r in reopened.log("t", 1).read_records(0)] == [b"kept"]
