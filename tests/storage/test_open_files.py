"""Segment files within a bound of open descriptors (logstore/open_files.py): opened on demand, closed least
recently used first, never while pinned, reopened by their current name; a store of many more segments than
the bound writes, rolls, reads, cleans and deletes as ever (issue 25, finding 4)."""
from __future__ import annotations

import errno
import os
import threading

import pytest

from logstore.filesystem import OsFileSystem
from logstore.manager import open_store
from logstore.open_files import OPEN_FILES, OpenFiles

CAPACITY = 4


@pytest.fixture
def small_cache(monkeypatch):
    """The process's set of open segment files, bounded at CAPACITY for the test."""
    monkeypatch.setattr(OPEN_FILES, "capacity", CAPACITY)
    return OPEN_FILES


def _fds_under(directory: str) -> int:
    """This process's descriptors on segment files under `directory` (not the dir's `.lock`)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:
            continue
        if target.startswith(str(directory) + os.sep) and ".log" in os.path.basename(target):
            count += 1
    return count


def _values(log, start: int = 0) -> list[bytes]:
    return [r.value for r in log.read_records(start)]


def test_a_store_of_many_segments_holds_at_most_the_bound(tmp_path, small_cache):
    store = open_store(str(tmp_path), {"segment.bytes": 1024})
    try:
        store.create_topic("t", 20)
        for round_ in range(30):
            for p in range(20):
                store.log("t", p).append_records([f"{p}:{round_}".encode() * 10])
            assert _fds_under(tmp_path) <= CAPACITY
        assert sum(len(store.log("t", p).segments) for p in range(20)) > 10 * CAPACITY
        for p in range(20):
            assert _values(store.log("t", p)) == [f"{p}:{r}".encode() * 10 for r in range(30)]
        assert _fds_under(tmp_path) <= CAPACITY
        reopens = small_cache.reopens
        assert reopens > 0
    finally:
        store.close()
    assert _fds_under(tmp_path) == 0
    reopened = open_store(str(tmp_path), {"segment.bytes": 1024})
    try:
        assert _values(reopened.log("t", 7)) == [f"7:{r}".encode() * 10 for r in range(30)]
    finally:
        reopened.close()


def test_retention_and_deletion_of_closed_segments(tmp_path, small_cache):
    store = open_store(str(tmp_path), {"segment.bytes": 1024, "retention.bytes": 4096,
                                        "file.delete.delay.ms": 0})
    try:
        store.create_topic("t", 3)
        for i in range(200):
            store.log("t", i % 3).append_records([f"{i}".encode() * 20])
        for p in range(3):
            log = store.log("t", p)
            before = len(log.segments)
            log.delete_old_segments()
            assert len(log.segments) < before
            values = _values(log, log.log_start_offset)
            assert values == [f"{i}".encode() * 20 for i in range(200) if i % 3 == p][-len(values):]
        store.delete_topic("t")
    finally:
        store.close()
    assert not any(name.startswith("t-") and not name.endswith("-delete") for name in os.listdir(tmp_path))
    assert _fds_under(tmp_path) == 0


def test_compaction_swaps_in_segments_whose_files_were_closed(tmp_path, small_cache):
    store = open_store(str(tmp_path), {"segment.bytes": 1024, "cleanup.policy": "compact"},
                       broker_settings={"log.cleaner.enable": False})
    try:
        store.create_topic("c", 4)
        for i in range(400):
            store.log("c", i % 4).append_records([f"v{i}".encode()], keys=[f"k{i % 16}".encode()])
        for p in range(4):
            store.log("c", p).roll()
        while store.cleaner.clean_filthiest():
            pass
        for p in range(4):
            records = list(store.log("c", p).read_records(0))
            assert len(records) == 4   # cleaned: the latest of each of the partition's keys, nothing else
            latest = {r.key: r.value for r in records}
            assert latest == {f"k{k}".encode(): f"v{max(i for i in range(400) if i % 16 == k)}".encode()
                              for k in range(16) if k % 4 == p}
    finally:
        store.close()


def test_concurrent_reads_and_appends_never_see_another_files_bytes(tmp_path, small_cache):
    small_cache.capacity = 2
    store = open_store(str(tmp_path), {"segment.bytes": 4096})
    partitions = 8
    errors: list[str] = []
    try:
        store.create_topic("t", partitions)

        def writer(p: int) -> None:
            for i in range(300):
                store.log("t", p).append_records([f"{p}:{i}".encode()])

        def reader(p: int) -> None:
            for _ in range(40):
                for record in store.log("t", p).read_records(0):
                    if not record.value.startswith(f"{p}:".encode()):
                        errors.append(f"partition {p} read {record.value!r}")
                        return

        threads = [threading.Thread(target=f, args=(p,)) for p in range(partitions) for f in (writer, reader)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        for p in range(partitions):
            assert _values(store.log("t", p)) == [f"{p}:{i}".encode() for i in range(300)]
    finally:
        store.close()


def test_a_pinned_descriptor_is_never_closed_and_a_discarded_one_closes_with_its_last_pin(tmp_path):
    cache = OpenFiles(capacity=2)
    fs = OsFileSystem()
    files = [cache.open(str(tmp_path / f"f{i}"), os.O_RDWR | os.O_CREAT, fs) for i in range(3)]
    pinned = files[0]
    fd = pinned.acquire()
    others = [cache.open(str(tmp_path / f"g{i}"), os.O_RDWR | os.O_CREAT, fs) for i in range(5)]
    assert os.fstat(fd).st_ino == os.stat(tmp_path / "f0").st_ino   # still open, still f0
    assert len(cache) <= 2 + 1
    pinned.close()
    assert os.fstat(fd).st_ino == os.stat(tmp_path / "f0").st_ino   # closed only with the last pin
    pinned.release()
    with pytest.raises(OSError):
        os.fstat(fd)
    with pytest.raises(OSError) as closed:
        pinned.acquire()
    assert closed.value.errno == errno.EBADF
    for f in files[1:] + others:
        f.close()
    assert len(cache) == 0


def test_a_closed_descriptor_reopens_by_the_files_new_name(tmp_path):
    cache = OpenFiles(capacity=1)
    fs = OsFileSystem()
    first = cache.open(str(tmp_path / "a.log"), os.O_RDWR | os.O_CREAT, fs)
    first.call(lambda fd: os.pwrite(fd, b"first", 0))
    second = cache.open(str(tmp_path / "b.log"), os.O_RDWR | os.O_CREAT, fs)   # closes a.log's
    assert first.fd == -1
    first.rename(str(tmp_path / "a.log.deleted"))
    assert first.call(lambda fd: os.pread(fd, 5, 0)) == b"first"
    assert cache.reopens == 1
    first.close()
    second.close()


class _FullTable(OsFileSystem):
    """Refuses the next open with EMFILE once, as a process whose descriptor table sockets filled."""

    def __init__(self) -> None:
        super().__init__()
        self.refuse = False

    def open(self, path: str, flags: int, mode: int = 0o644) -> int:
        if self.refuse:
            self.refuse = False
            raise OSError(errno.EMFILE, "Too many open files")
        return super().open(path, flags, mode)


def test_a_full_descriptor_table_gives_back_half_of_the_sets_files_and_retries(tmp_path):
    cache = OpenFiles(capacity=100)
    fs = _FullTable()
    files = [cache.open(str(tmp_path / f"f{i}"), os.O_RDWR | os.O_CREAT, fs) for i in range(10)]
    fs.refuse = True
    last = cache.open(str(tmp_path / "last"), os.O_RDWR | os.O_CREAT, fs)
    assert len(cache) == 5 and last.fd >= 0
    assert [f.fd >= 0 for f in files] == [False] * 6 + [True] * 4   # the least recently used went
    for f in [*files, last]:
        f.close()
