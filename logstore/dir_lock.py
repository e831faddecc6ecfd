"""One open store per log dir: Kafka's `.lock` file, held with flock while the store is open.

flock rather than a pid file: the kernel drops the lock when its holder
dies, SIGKILL included, so a crash never leaves a stale lock a restart must
be told to ignore. The lock belongs to the open file, so a second store in
the same process is refused too, as Kafka refuses a second LogManager. The
holder's pid is written into the file only to name it in the error.
"""
from __future__ import annotations

import os

from logstore.errors import LogDirLockedError
from logstore.filesystem import OS, FileSystem

LOCK_FILE = ".lock"


class DirLock:
    """An exclusive hold on one log dir, released by `release()` or by the process ending."""

    def __init__(self, log_dir: str, fs: FileSystem = OS):
        self.path = os.path.join(log_dir, LOCK_FILE)
        self._fs = fs
        fd = fs.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fs.flock(fd)
        except BlockingIOError:
            holder = _holder(fs, fd)
            fs.close(fd)
            who = "another store open in this process" if holder == os.getpid() else (
                f"process {holder}" if holder else "another process")
            raise LogDirLockedError(
                f"log dir {log_dir} is in use by {who} (it holds {self.path}); several processes may not "
                "share one data directory: stop that one, or run a broker and connect to it as a client"
            ) from None
        fs.truncate(fd, 0)
        fs.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        self._fd: int | None = fd

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
