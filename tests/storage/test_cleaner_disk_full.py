"""The cleaner on a full or failing disk, as Kafka's CleanerThread handles it: a round that runs out of space
removes its `.cleaned` output, leaves the log as it was and the partition cleanable (the next round after
space returns cleans it); any other I/O error takes the log dir offline rather than marking the partition
uncleanable; a round whose swap fails part-way leaves its `.swap` for recovery, so nothing is lost. A
`cleaner-offset-checkpoint` a full disk refuses stays in memory; any other failure to write it takes the
dir offline.

Rounds run when a test calls `clean_filthiest()` (the cleaner's thread is not started).
"""
from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from fault_fs import FaultFileSystem
from logstore.errors import StorageError
from logstore.filesystem import OS, FileSystem
from logstore.log_cleaner import CLEANER_CHECKPOINT, read_cleaner_checkpoints, read_uncleanable
from logstore.manager import LogManager
from small_disk import fill, mounted_tmpfs

COMPACTED = {"cleanup.policy": "compact", "segment.bytes": 2048, "retention.ms": -1,
             "min.cleanable.dirty.ratio": 0.1}
SETTINGS = {"log.cleaner.enable": False, "log.cleaner.dedupe.buffer.size": 1 << 20}
TOPIC = "c"


def _open(path: Path, fs: FileSystem = OS) -> LogManager:
    return LogManager(str(path), broker_settings=SETTINGS, fs=fs)


def _fill(store: LogManager, n: int = 400) -> None:
    # Every other key is unique, so every segment keeps records: each group of a round writes output.
    target = store.log(TOPIC, 0)
    for i in range(n):
        key = b"unique-%d" % i if i % 2 else b"dup-%d" % (i % 10)
        target.append_records([b"value-%d" % i], keys=[key])


def _records(store: LogManager) -> list[tuple[int, bytes | None, bytes | None]]:
    target = store.log(TOPIC, 0)
    return [(r.offset, r.key, r.value) for r in target.read_records(target.log_start_offset)]


def _latest(records: list[tuple[int, bytes | None, bytes | None]]) -> dict[bytes | None, tuple[int, bytes | None]]:
    return {key: (offset, value) for offset, key, value in records}


def _files(store: LogManager) -> list[str]:
    return sorted(os.listdir(store.log(TOPIC, 0).directory))


def _leftovers(directory: str) -> list[str]:
    return [name for name in os.listdir(directory) if name.endswith((".cleaned", ".swap"))]


def _assert_put_off(store: LogManager, log_dir: Path, records: list, files: list[str]) -> None:
    """The round changed nothing: no mark, no checkpoint, no output left, the same records, the dir online."""
    assert store.cleaner.uncleanable_partitions() == {}
    assert read_uncleanable(str(log_dir)) == {}
    assert (TOPIC, 0) not in store.cleaner.checkpoints
    assert _files(store) == files, "the round's .cleaned files were removed"
    assert _records(store) == records
    assert store.log(TOPIC, 0).dir_state.online


def _assert_cleaned(store: LogManager, records: list) -> None:
    assert store.cleaner.uncleanable_partitions() == {}
    assert store.cleaner.checkpoints[(TOPIC, 0)] > 0
    now = _records(store)
    assert len(now) < len(records) and _latest(now) == _latest(records)
    assert _leftovers(store.log(TOPIC, 0).directory) == []


@contextmanager
def _compacted(path: Path, fs: FileSystem = OS, *, offline: bool = False) -> Iterator[LogManager]:
    """A store whose compacted topic is filled; closed at the end (`offline`: the closing must fail, as it does
    once an I/O error took the dir offline)."""
    store = _open(path, fs)
    try:
        store.create_topic(TOPIC, 1, COMPACTED)
        _fill(store)
        yield store
    finally:
        if offline:
            with pytest.raises(StorageError):
                store.close()
        else:
            store.close()


def _put_off_then_cleaned(store: LogManager, log_dir: Path, fault: Callable[[], object],
                          heal: Callable[[], object]) -> None:
    """After `fault()` a round is put off and changes nothing; after `heal()` the next one cleans."""
    records, files = _records(store), _files(store)
    fault()
    assert store.cleaner.clean_filthiest() is False
    _assert_put_off(store, log_dir, records, files)
    heal()
    assert store.cleaner.clean_filthiest() is True
    _assert_cleaned(store, records)


def test_a_round_out_of_space_leaves_the_log_as_it_was_and_the_next_one_cleans(tmp_path):
    fs = FaultFileSystem(real_syncs=False)
    with _compacted(tmp_path, fs) as store:
        # Put off: the backoff applies, as after a round with nothing to do.
        _put_off_then_cleaned(store, tmp_path, lambda: fs.set_free_space(0), lambda: fs.set_free_space(None))


def test_an_enospc_at_the_fsync_of_the_cleaned_segment_puts_the_round_off(tmp_path):
    fs = FaultFileSystem(real_syncs=False)
    with _compacted(tmp_path, fs) as store:
        _put_off_then_cleaned(store, tmp_path, lambda: fs.fail_at(1, "fsync", "*.log.cleaned", error=errno.ENOSPC),
                              lambda: None)


def test_a_full_tmpfs_puts_the_round_off_until_space_returns(tmp_path):
    with mounted_tmpfs(tmp_path / "disk", "4m") as disk, _compacted(disk / "data") as store:
        fillers: list[Path] = []
        _put_off_then_cleaned(store, disk / "data", lambda: fillers.append(fill(disk)),
                              lambda: fillers.pop().unlink())


def test_an_io_error_writing_the_cleaned_segment_takes_the_dir_offline_not_the_partition(tmp_path):
    # Kafka's CleanerThread: an IOException takes the log dir offline; the partition is not marked uncleanable.
    fs = FaultFileSystem(real_syncs=False)
    with _compacted(tmp_path, fs, offline=True) as store:
        target = store.log(TOPIC, 0)
        fs.fail_write("*.log.cleaned", error=errno.EIO, written=10)
        store.cleaner.clean_filthiest()
        assert not target.dir_state.online
        assert store.cleaner.uncleanable_partitions() == {} and read_uncleanable(str(tmp_path)) == {}
        assert _leftovers(target.directory) == [], "the round's output was removed"
        # Nothing more is tried on an offline dir.
        assert store.cleaner.candidates() == []


@pytest.mark.parametrize("error", [errno.EIO, errno.ENOSPC])
def test_a_swap_that_fails_part_way_is_left_for_recovery_and_loses_nothing(tmp_path, error):
    fs = FaultFileSystem(real_syncs=False)
    with _compacted(tmp_path, fs, offline=True) as store:
        records, target = _records(store), store.log(TOPIC, 0)
        # The old segments are `.deleted` by now: the `.swap` holds the only copy of what the group keeps.
        fs.fail_at(1, "rename", "*.log.swap -> *", error=error)
        store.cleaner.clean_filthiest()
        assert not target.dir_state.online
        assert store.cleaner.uncleanable_partitions() == {}
        assert any(name.endswith(".swap") for name in os.listdir(target.directory))
    store = _open(tmp_path)
    try:
        assert _latest(_records(store)) == _latest(records)
        assert store.log(TOPIC, 0).log_end_offset == records[-1][0] + 1
    finally:
        store.close()


def test_a_cleaner_checkpoint_a_full_disk_refuses_is_kept_in_memory(tmp_path):
    fs = FaultFileSystem(real_syncs=False)
    with _compacted(tmp_path, fs) as store:
        records = _records(store)
        fs.fail_write(f"*/{CLEANER_CHECKPOINT}.tmp", error=errno.ENOSPC, written=3)
        assert store.cleaner.clean_filthiest() is True
        _assert_cleaned(store, records)
        assert store.log(TOPIC, 0).dir_state.online
        assert not (tmp_path / CLEANER_CHECKPOINT).exists() and not (tmp_path / f"{CLEANER_CHECKPOINT}.tmp").exists()
        # The next round's write carries it.
        _fill(store, 100)
        assert store.cleaner.clean_filthiest() is True
        assert read_cleaner_checkpoints(str(tmp_path)) == {(TOPIC, 0): store.cleaner.checkpoints[(TOPIC, 0)]}


def test_an_io_error_writing_the_cleaner_checkpoint_takes_the_dir_offline(tmp_path):
    fs = FaultFileSystem(real_syncs=False)
    with _compacted(tmp_path, fs, offline=True) as store:
        target = store.log(TOPIC, 0)
        fs.fail_write(f"*/{CLEANER_CHECKPOINT}.tmp", error=errno.EIO)
        store.cleaner.clean_filthiest()
        assert not target.dir_state.online and store.cleaner.uncleanable_partitions() == {}
