"""The `.lock` of a log dir on a failing disk: an I/O error opening, locking or writing it is a
`StorageIOError` (KAFKA_STORAGE_ERROR, still the `OSError`) naming the file, with nothing left open or
locked; a full disk that refuses the holder's pid leaves the lock held and the store open."""
from __future__ import annotations

import errno
import os

import pytest

import logstore
from fault_fs import FaultFileSystem
from logstore.dir_lock import LOCK_FILE
from logstore.errors import LogDirLockedError, StorageError, StorageIOError
from logstore.manager import LogManager

KAFKA_STORAGE_ERROR = 56


class NoLocksDisk(FaultFileSystem):
    """A file system whose flock fails as one out of lock records does (ENOLCK)."""

    def flock(self, fd: int) -> None:
        """Refuse every lock."""
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _refused(path, fs=None) -> StorageIOError:
    """The error an open of the store at `path` raises; it must leave no descriptor behind."""
    before = _open_fds()
    with pytest.raises(StorageError) as refused:
        LogManager(str(path), **({} if fs is None else {"fs": fs}))
    assert _open_fds() <= before, "the refused open left a descriptor open"
    assert isinstance(refused.value, StorageIOError) and isinstance(refused.value, OSError)
    assert refused.value.code == KAFKA_STORAGE_ERROR
    return refused.value


def test_an_io_error_writing_the_pid_is_a_storage_error_naming_the_lock_file(tmp_path):
    fs = FaultFileSystem()
    fs.fail_write(f"*/{LOCK_FILE}", error=errno.EIO, written=2)
    error = _refused(tmp_path, fs)
    assert error.errno == errno.EIO
    assert str(error) == f"cannot write the holder's pid to {tmp_path / LOCK_FILE}: injected: Input/output error"
    # Nothing was left locked.
    with logstore.open(str(tmp_path)) as store:
        assert store.topics() == {}


def test_a_lock_file_that_cannot_be_opened_is_a_storage_error(tmp_path):
    (tmp_path / LOCK_FILE).mkdir()
    error = _refused(tmp_path)
    assert error.errno == errno.EISDIR
    assert str(error) == f"cannot open {tmp_path / LOCK_FILE}: Is a directory"


def test_a_lock_the_system_refuses_is_a_storage_error_with_nothing_left_open(tmp_path):
    error = _refused(tmp_path, NoLocksDisk())
    assert error.errno == errno.ENOLCK
    assert str(error) == f"cannot lock {tmp_path / LOCK_FILE}: {os.strerror(errno.ENOLCK)}"


def test_a_new_log_dir_on_a_full_disk_opens_locked_without_the_pid(tmp_path):
    fs = FaultFileSystem()
    fs.set_free_space(0)
    store = LogManager(str(tmp_path), fs=fs)
    try:
        assert (tmp_path / LOCK_FILE).read_bytes() == b"", "no part of a pid"
        with pytest.raises(LogDirLockedError, match="in use by another process"):
            logstore.open(str(tmp_path))
    finally:
        fs.set_free_space(None)
        store.close()
    with logstore.open(str(tmp_path)) as again:
        assert (tmp_path / LOCK_FILE).read_bytes() == b"%d\n" % os.getpid()
        assert again.topics() == {}


def test_a_pid_cut_short_by_a_full_disk_is_not_left_in_the_file(tmp_path):
    fs = FaultFileSystem()
    fs.fail_write(f"*/{LOCK_FILE}", error=errno.ENOSPC, written=2)
    with LogManager(str(tmp_path), fs=fs):
        assert (tmp_path / LOCK_FILE).read_bytes() == b""
