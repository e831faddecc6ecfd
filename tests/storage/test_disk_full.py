"""A full or failing disk, on the fault-injecting file system: nothing acknowledged is lost, an ENOSPC whose
stray bytes were cut back is a retriable KAFKA_STORAGE_ERROR, any other write error takes the log dir
offline (as Kafka's LogDirFailureChannel does), and a store opens and closes on a full disk.

Each case writes through a `FaultFileSystem` that runs out of space (`set_free_space`: the write that
needs more puts in what fits, then raises ENOSPC, as the kernel's short write and the failing call
after it do) or fails one chosen write part-way (`fail_write`).
"""
from __future__ import annotations

import errno
import os

import pytest

import logstore
from fault_fs import FaultFileSystem
from logstore.checkpoints import CLEAN_SHUTDOWN_MARKER, RECOVERY_POINT_CHECKPOINT
from logstore.errors import StorageError
from logstore.filesystem import OS
from logstore.log import Log
from small_disk import fill, mounted_tmpfs

KAFKA_STORAGE_ERROR = 56


def _values(log: Log) -> list[bytes]:
    return [r.value for r in log.read_records(log.log_start_offset)]


def _offsets(log: Log) -> list[int]:
    return [r.offset for r in log.read_records(log.log_start_offset)]


def _log_file_size(log: Log) -> int:
    return os.path.getsize(log.active_segment.log_path)


def test_a_torn_append_on_a_full_disk_loses_no_acknowledged_record(tmp_path):
    # The sequence: ENOSPC part-way through a pwrite, a clean stop, a reopen, more acks=all appends,
    # then an unclean reopen. Before the fix the stray bytes survived the clean stop, the reopen trusted the
    # file's length, new appends landed after the garbage and the unclean recovery cut them off.
    path = str(tmp_path / "t-0")
    fs = FaultFileSystem()
    log = Log.open(path, fs=fs)
    acked = []
    for i in range(5):
        log.append_records([b"acked-%d" % i], durable=True)
        acked.append(b"acked-%d" % i)
    fs.set_free_space(30)
    with pytest.raises(OSError):
        log.append_records([b"y" * 300], durable=True)
    fs.set_free_space(None)
    log.close()

    log = Log.open(path, clean_shutdown=True)
    for i in range(5, 10):
        log.append_records([b"acked-%d" % i], durable=True)
        acked.append(b"acked-%d" % i)
    end = log.log_end_offset
    # A crash: the files stay as they are (the old object is dropped unclosed), the next open is unclean
    # and scans from offset 0.
    log = Log.open(path, clean_shutdown=False, recovery_point=0)
    assert (log.log_end_offset, _values(log), _offsets(log)) == (end, acked, list(range(10)))
    log.close()


def test_enospc_is_a_retriable_storage_error_and_appends_go_on_once_space_returns(tmp_path):
    fs = FaultFileSystem()
    log = Log.open(str(tmp_path / "t-0"), fs=fs)
    log.append_records([b"before"], durable=True)
    size = log.active_segment.size
    fs.set_free_space(20)
    with pytest.raises(StorageError) as info:
        log.append_records([b"z" * 500], durable=True)
    assert (info.value.code, info.value.retriable, info.value.errno) == (KAFKA_STORAGE_ERROR, True, errno.ENOSPC)
    # The stray bytes are cut back: the file ends where the log does, and reads never saw them.
    assert _log_file_size(log) == log.active_segment.size == size
    assert (log.log_end_offset, _values(log)) == (1, [b"before"])
    # Still full: still refused, still consistent.
    with pytest.raises(StorageError):
        log.append_records([b"z" * 500])
    fs.set_free_space(None)
    assert log.append_records([b"after"], durable=True).first_offset == 1
    log.close()
    with Log.open(str(tmp_path / "t-0"), clean_shutdown=True) as reopened:
        assert _values(reopened) == [b"before", b"after"]


def test_a_roll_on_a_full_disk_leaves_a_consistent_log(tmp_path):
    fs = FaultFileSystem()
    path = str(tmp_path / "t-0")
    log = Log.open(path, logstore.config.LogConfig.from_properties({"segment.bytes": 200}), fs=fs)
    while len(log.segments) == 1:
        log.append_records([b"r" * 40], durable=True)
    acked = _values(log)
    end = log.log_end_offset
    # The roll's producer snapshot cannot be written: it is skipped (the state is in memory) and leaves no
    # torn file; the append after the roll is refused and cut back.
    fs.set_free_space(0)
    with pytest.raises(StorageError) as info:
        log.append_records([b"r" * 40], durable=True)
    assert info.value.retriable and log.log_end_offset == end
    assert sorted(n for n in os.listdir(path) if n.endswith(".snapshot")) == ["00000000000000000001.snapshot"]
    assert _log_file_size(log) == log.active_segment.size == 0
    fs.set_free_space(None)
    log.append_records([b"r" * 40], durable=True)
    acked.append(b"r" * 40)
    # A new segment's index files are made by its first append (Kafka's LazyIndex): when the disk refuses
    # them, that append is refused and cut back; the roll before it stands, an empty segment that the next
    # append fills.
    segments, end = len(log.segments), log.log_end_offset
    fs.fail_write(f"{path}/{end:020d}.index", op="truncate", error=errno.ENOSPC)
    with pytest.raises(StorageError) as info:
        log.append_records([b"r" * 40], durable=True)
    assert info.value.retriable and log.log_end_offset == end
    assert (len(log.segments), log.active_segment.size) == (segments + 1, 0)
    assert all(os.path.getsize(os.path.join(path, n)) == 0 for n in os.listdir(path)
               if n.startswith(f"{end:020d}.") and "index" in n)
    log.append_records([b"r" * 40], durable=True)
    acked.append(b"r" * 40)
    assert len(log.segments) == segments + 1
    # The refused growth was tried again: the index has its room (segment.index.bytes), not none.
    assert os.path.getsize(os.path.join(path, f"{end:020d}.index")) == 10 * 1024 * 1024
    # A roll that fails part-way (the old segment's index not trimmed) is undone: no file of the new
    # segment stays, and the old one takes appends again.
    fs.fail_write(f"{path}/{log.active_segment.base_offset:020d}.index", op="truncate", error=errno.ENOSPC)
    for _ in range(10):   # a 200-byte segment rolls within a few appends
        segments, files = len(log.segments), sorted(os.listdir(path))
        try:
            log.append_records([b"r" * 40], durable=True)
        except StorageError as exc:
            assert exc.retriable
            break
        acked.append(b"r" * 40)
    else:
        pytest.fail("no roll met the refused trim")
    assert (len(log.segments), sorted(os.listdir(path))) == (segments, files)
    log.append_records([b"r" * 40], durable=True)
    acked.append(b"r" * 40)
    assert len(log.segments) == segments + 1
    log.close()
    with Log.open(path, clean_shutdown=False, recovery_point=0) as reopened:
        assert _values(reopened) == acked


def _store(tmp_path, fs, dirs=("a",)):
    return logstore.open([str(tmp_path / d) for d in dirs], start_scheduler=False, fs=fs)


def test_eio_mid_append_takes_the_whole_log_dir_offline(tmp_path):
    fs = FaultFileSystem()
    store = _store(tmp_path, fs, dirs=("a", "b"))
    store.create_topic("t", 4)    # two partitions in each log dir
    in_a = [p for p in range(4) if os.path.dirname(store.log("t", p).directory) == str(tmp_path / "a")]
    in_b = [p for p in range(4) if p not in in_a]
    for p in range(4):
        store.log("t", p).append_records([b"acked-%d" % p], durable=True)
    fs.fail_write(f"{tmp_path}/a/t-{in_a[0]}/*.log", error=errno.EIO, written=7)
    with pytest.raises(StorageError) as info:
        store.log("t", in_a[0]).append_records([b"lost"], durable=True)
    assert info.value.code == KAFKA_STORAGE_ERROR
    # Every partition of that dir answers KAFKA_STORAGE_ERROR, reads and writes; the other dir serves on.
    for p in in_a:
        with pytest.raises(StorageError, match="offline"):
            store.log("t", p).append_records([b"refused"])
        with pytest.raises(StorageError, match="offline"):
            store.log("t", p).read(0)
    for p in in_b:
        store.log("t", p).append_records([b"more-%d" % p], durable=True)
    assert store.offline_dirs == [str(tmp_path / "a")]
    with pytest.raises(StorageError, match="offline"):
        store.close()
    # The offline dir gets no clean-shutdown marker: the next start recovers its tail.
    assert not (tmp_path / "a" / CLEAN_SHUTDOWN_MARKER).exists()
    assert (tmp_path / "b" / CLEAN_SHUTDOWN_MARKER).exists()
    with _store(tmp_path, OS, dirs=("a", "b")) as reopened:
        for p in in_a:
            log = reopened.log("t", p)
            assert not log.recovery_report.clean_shutdown
            assert _values(log) == [b"acked-%d" % p]
            assert _log_file_size(log) == log.active_segment.size
        for p in in_b:
            assert _values(reopened.log("t", p)) == [b"acked-%d" % p, b"more-%d" % p]


def test_an_enospc_that_cannot_be_cut_back_takes_the_dir_offline(tmp_path):
    fs = FaultFileSystem()
    store = _store(tmp_path, fs)
    store.create_topic("t", 2)
    store.log("t", 0).append_records([b"acked"], durable=True)
    fs.fail_write("*/t-0/*.log", error=errno.ENOSPC, written=9)
    fs.fail_write("*/t-0/*.log", op="truncate", error=errno.EIO)
    with pytest.raises(StorageError):
        store.log("t", 0).append_records([b"x" * 100], durable=True)
    with pytest.raises(StorageError, match="offline"):
        store.log("t", 1).append_records([b"refused"])
    with pytest.raises(StorageError):
        store.close()
    assert not (tmp_path / "a" / CLEAN_SHUTDOWN_MARKER).exists()
    with _store(tmp_path, OS) as reopened:
        assert _values(reopened.log("t", 0)) == [b"acked"]


def test_a_failed_fsync_and_a_failed_write_are_one_mechanism(tmp_path):
    fs = FaultFileSystem()
    store = _store(tmp_path, fs)
    store.create_topic("t", 2)
    store.log("t", 1).append_records([b"kept"], durable=True)
    fs.fail_at(1, "fsync", "*/t-0/*.log")
    with pytest.raises(StorageError):
        store.log("t", 0).append_records([b"not durable"], durable=True)
    # The failed fsync took the dir offline, not only its partition.
    with pytest.raises(StorageError, match="failed fsync"):
        store.log("t", 1).append_records([b"refused"])
    assert store.offline_dirs == [str(tmp_path / "a")]
    with pytest.raises(StorageError):
        store.close()
    with _store(tmp_path, OS) as reopened:
        assert _values(reopened.log("t", 1)) == [b"kept"]


def test_the_marker_is_written_only_if_every_checkpoint_of_the_close_was(tmp_path):
    fs = FaultFileSystem()
    store = _store(tmp_path, fs)
    store.create_topic("t")
    store.log("t").append_records([b"acked"], durable=True)
    fs.fail_write(f"*/{RECOVERY_POINT_CHECKPOINT}.tmp", error=errno.ENOSPC)
    with pytest.raises(StorageError):
        store.close()
    assert not (tmp_path / "a" / CLEAN_SHUTDOWN_MARKER).exists()
    with _store(tmp_path, OS) as reopened:
        assert not reopened.log("t").recovery_report.clean_shutdown
        assert _values(reopened.log("t")) == [b"acked"]


def test_a_store_closes_on_a_full_disk_and_recovers_on_the_next_open(tmp_path):
    fs = FaultFileSystem()
    store = _store(tmp_path, fs)
    store.create_topic("t", 3)
    for p in range(3):
        for i in range(3):
            store.log("t", p).append_records([b"%d-%d" % (p, i)], producer_id=7 + p, producer_epoch=0,
                                             base_sequence=i, durable=True)
    fs.set_free_space(0)
    with pytest.raises(StorageError):
        store.close()
    assert not (tmp_path / "a" / CLEAN_SHUTDOWN_MARKER).exists()
    assert not [n for n in os.listdir(tmp_path / "a") if n.endswith(".tmp")]
    with _store(tmp_path, OS) as reopened:
        for p in range(3):
            log = reopened.log("t", p)
            assert _values(log) == [b"%d-%d" % (p, i) for i in range(3)]
            # The producer state came back from the log: a retry of the last batch is a duplicate.
            assert log.append_records([b"%d-2" % p], producer_id=7 + p, producer_epoch=0,
                                      base_sequence=2).duplicate


def test_a_store_opens_on_a_full_disk_after_an_unclean_stop(tmp_path):
    store = _store(tmp_path, OS)
    store.create_topic("t", 2)
    for p in range(2):
        for i in range(4):
            store.log("t", p).append_records([b"%d-%d" % (p, i)], producer_id=3, producer_epoch=0,
                                             base_sequence=i + 4 * p, durable=True)
    # A crash: no close, the kernel drops the directory lock.
    store._release_dirs()
    store._stop.set()
    fs = FaultFileSystem()
    fs.set_free_space(0)
    reopened = _store(tmp_path, fs)
    for p in range(2):
        log = reopened.log("t", p)
        assert not log.recovery_report.clean_shutdown
        assert _values(log) == [b"%d-%d" % (p, i) for i in range(4)]
        # Read-only until space returns: refused as KAFKA_STORAGE_ERROR, the log untouched.
        with pytest.raises(StorageError) as info:
            log.append_records([b"refused"], durable=True)
        assert info.value.code == KAFKA_STORAGE_ERROR
    assert reopened.offline_dirs == []
    fs.set_free_space(None)
    for p in range(2):
        reopened.log("t", p).append_records([b"%d-later" % p], durable=True)
    reopened.close()
    assert (tmp_path / "a" / CLEAN_SHUTDOWN_MARKER).exists()
    with _store(tmp_path, OS) as again:
        for p in range(2):
            assert _values(again.log("t", p)) == [*(b"%d-%d" % (p, i) for i in range(4)), b"%d-later" % p]


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EMFILE])
def test_a_topic_creation_that_fails_midway_leaves_nothing(tmp_path, error):
    fs = FaultFileSystem()
    store = _store(tmp_path, fs)
    store.create_topic("kept")
    fs.fail_write("*/big-17/partition.metadata.tmp", error=error)
    with pytest.raises(StorageError):
        store.create_topic("big", 40, {"retention.ms": 1000})
    assert store.topics() == {"kept": 1}
    assert sorted(n for n in os.listdir(tmp_path / "a") if n.startswith("big")) == []
    assert store.topic_overrides("big") == {}
    # The name is free again, and nothing of the failed call comes back after a restart.
    store.create_topic("big", 2)
    store.delete_topic("big")
    store.close()
    with _store(tmp_path, OS) as reopened:
        assert reopened.topics() == {"kept": 1}


@pytest.fixture
def tmpfs(tmp_path):
    """A small tmpfs of its own, unmounted at teardown."""
    with mounted_tmpfs(tmp_path / "tmpfs", "16m") as mount:
        yield mount


def test_a_recovery_on_a_real_full_disk_keeps_its_indexes_in_memory(tmpfs):
    # On a real file system: the rebuilt index pages of the sparse preallocated files cannot be had.
    config = {"index.interval.bytes": 1}
    store = logstore.open(str(tmpfs / "d"), config, start_scheduler=False)
    store.create_topic("t")
    log = store.log("t")
    for i in range(2000):
        log.append_records([b"%05d" % i], timestamps=1_000 + i)
    log.flush()
    store._release_dirs()   # a crash
    store._stop.set()
    segment_dir = tmpfs / "d" / "t-0"
    for name in os.listdir(segment_dir):
        if name.endswith((".index", ".timeindex")):
            # What a power cut leaves of an index never synced: its length, not its pages (a sparse file).
            with open(segment_dir / name, "r+b") as f:
                length = os.fstat(f.fileno()).st_size
                f.truncate(0)
                f.truncate(length)
    filler = fill(tmpfs)
    with logstore.open(str(tmpfs / "d"), config, start_scheduler=False) as reopened:
        log = reopened.log("t")
        assert not log.recovery_report.clean_shutdown
        assert [r.value for r in log.read_records(0)] == [b"%05d" % i for i in range(2000)]
        assert log.offset_for_timestamp(1_500) == (500, 1_500)
        # The index files went (the next open rebuilds them), which gave their space back: take it again.
        assert not [n for n in os.listdir(segment_dir) if n.endswith((".index", ".timeindex"))]
        fill(tmpfs)
        with pytest.raises(StorageError) as info:
            log.append_records([b"x" * 3 * 4096])
        assert info.value.retriable
        os.unlink(filler)
        assert log.append_records([b"later"], timestamps=3_000).first_offset == 2000
    with logstore.open(str(tmpfs / "d"), config, start_scheduler=False) as again:
        log = again.log("t")
        assert log.recovery_report.clean_shutdown and log.recovery_report.rebuilt_indexes
        assert log.read_records(1999, 2)[1].value == b"later"
        assert log.offset_for_timestamp(1_500) == (500, 1_500)
