"""A log dir on tmpfs (durability.py's `in_memory`): a waiter needs no sync, since an fsync writes nothing
there: the recovery point follows the log's end in the waiting thread, with no sync thread and no fsync;
concurrent appends and waits from many threads all settle, and a broker on such a dir acknowledges acks=all
and keeps it across a SIGKILL (the page cache outlives the process). `is_durable` answers at once there.
"""
from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from fault_fs import FaultFileSystem
from logstore.durability import SYNC_STATS
from logstore.filesystem import OS
from test_dir_sync import TOPIC, _store, acks_all_read_back_after_sigkill, waits_from_threads

SHM = "/dev/shm"


@pytest.fixture
def memory_dir() -> Iterator[Path]:
    # Linux mounts /dev/shm as tmpfs (containers included): a machine without it fails here, not silently.
    assert OS.memory_backed(SHM), f"{SHM} is not tmpfs on this machine"
    path = Path(tempfile.mkdtemp(prefix="logstore-test-", dir=SHM))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _sync_threads(path: Path) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("logstore-sync ") and str(path) in t.name]


def test_the_file_systems_are_told_apart(memory_dir, tmp_path):
    assert OS.memory_backed(str(memory_dir))
    assert OS.memory_backed(str(tmp_path)) == OS.memory_backed(tempfile.gettempdir())
    assert not OS.memory_backed(str(memory_dir / "missing"))


def test_a_wait_on_a_dir_kept_in_memory_is_settled_in_the_waiting_thread(memory_dir):
    with _store(memory_dir / "d") as store:
        log = store.log(TOPIC, 0)
        for value in (b"first", b"second"):
            syncs = SYNC_STATS.syncs
            end = log.append_records([value]).last_offset + 1
            heard: list[tuple[int | BaseException, threading.Thread]] = []
            log.when_durable(end, lambda point: heard.append((point, threading.current_thread())))
            assert heard == [(end, threading.current_thread())]
            assert log.recovery_point == end
            log.when_durable(end, lambda point: heard.append((point, threading.current_thread())))
            assert heard[-1] == (end, threading.current_thread())
            assert SYNC_STATS.syncs == syncs
        assert not _sync_threads(memory_dir)


def test_is_durable_answers_at_once_in_memory_and_after_the_fsync_on_a_disk(memory_dir, tmp_path):
    # The broker's durable waits ask this first and set up no wait when it answers yes.
    with _store(memory_dir / "d") as store:
        log = store.log(TOPIC, 0)
        end = log.append_records([b"in memory"]).last_offset + 1
        assert log.is_durable(end)
        assert log.recovery_point == end
        assert not log.is_durable(end + 1)
    with _store(tmp_path / "d", fs=FaultFileSystem()) as store:   # never memory-backed: a disk's rules
        log = store.log(TOPIC, 0)
        end = log.append_records([b"on a disk"]).last_offset + 1
        assert not log.is_durable(end)
        log.flush(end)
        assert log.is_durable(end)


def test_waits_from_many_threads_on_a_dir_kept_in_memory_are_all_settled(memory_dir):
    waits_from_threads(memory_dir / "d", partitions=3, threads=4, waits=200)


def test_a_broker_on_tmpfs_acknowledges_acks_all_and_keeps_it_across_sigkill(memory_dir):
    acks_all_read_back_after_sigkill(memory_dir / "broker", partitions=20, per_partition=50)
