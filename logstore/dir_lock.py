"""One open store per log dir: Kafka's `.lock` file, held with flock while the store is open.

flock rather than a pid file: the kernel drops the lock when its holder
dies, SIGKILL included, so a crash never leaves a stale lock a restart must
be told to ignore. The lock belongs to the open file, so a second store in
the same process is refused too, as Kafka refuses a second LogManager. The
holder's pid is written into the file only to name it in the error, so a
full disk that refuses those few bytes leaves the file empty and the lock
held: a store must open on a full disk (read-only until space returns).
Any other I/O error is a `StorageIOError` that names the file, with nothing
left open.
"""
from __future__ import annotations

import errno
import logging
import os

from logstore.errors import LogDirLockedError, StorageIOError
from logstore.filesystem import OS, FileSystem

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"


class DirLock:
    """An exclusive hold on one log dir, released by `release()` or by the process ending."""

    def __init__(self, log_dir: str, fs: FileSystem = OS):
        self.path = os.path.join(log_dir, LOCK_FILE)
        self._fs = fs
        try:
            fd = fs.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise self._error("cannot open", exc) from exc
        try:
            self._lock(log_dir, fd)
            self._write_pid(fd)
        except BaseException:
            fs.close(fd)
            raise
        self._fd: int | None = fd

    def _lock(self, log_dir: str, fd: int) -> None:
        try:
            self._fs.flock(fd)
        except BlockingIOError:
            holder = _holder(self._fs, fd)
            who = "another store open in this process" if holder == os.getpid() else (
                f"process {holder}" if holder else "another process")
            raise LogDirLockedError(
                f"log dir {log_dir} is in use by {who} (it holds {self.path}); several processes may not "
                "share one data directory: stop that one, or run a broker and connect to it as a client"
            ) from None
        except OSError as exc:
            raise self._error("cannot lock", exc) from exc

    def _write_pid(self, fd: int) -> None:
        try:
            self._fs.truncate(fd, 0)
            self._fs.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise self._error("cannot write the holder's pid to", exc) from exc
            try:
                # A part of the pid would name another process in a refusal.
                self._fs.truncate(fd, 0)
            except OSError as again:
                raise self._error("cannot write the holder's pid to", again) from exc
            log.warning("%s: the disk is full, the lock is held without the holder's pid", self.path)

    def _error(self, what: str, exc: OSError) -> StorageIOError:
        error = StorageIOError(f"{what} {self.path}: {exc.strerror or exc}", exc)
        # The OS's words, as on any OSError: a caller that names the file itself (the broker's start) adds them.
        error.strerror = exc.strerror
        return error

    def release(self) -> None:
        """Let another store open the directory."""
        if self._fd is not None:
            # Closing the only descriptor of the open file drops the flock.
            self._fs.close(self._fd)
            self._fd = None


def _holder(fs: FileSystem, fd: int) -> int | None:
    try:
        return int(fs.pread(fd, 32, 0).split()[0])
    except (OSError, ValueError, IndexError):
        return None
