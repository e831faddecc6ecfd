"""A bounded set of open segment files: descriptors opened on demand and closed least-recently-used first.

Kafka keeps every segment's `.log` open; at one descriptor a segment, a
store of 20,000 partitions would not fit a 20,000-descriptor limit beside
its sockets. Here a `SegmentFile` opens its descriptor when first used and
gives it back when the process-wide `OPEN_FILES` needs the room for
another file, so a store of any size opens within the limit.

A descriptor is used only while pinned (`acquire`/`release`): the cache
never closes a pinned one, so a number cannot be closed and reused under a
pread, pwrite or fsync. What must outlive the pin (a read's bytes waiting in
a reply) takes its own `dup` while pinned. A reopen goes by name, so it
happens under the cache's lock, and so does a rename (`rename`): a reopen
never sees a half-renamed file.

Closing a descriptor with unsynced writes loses nothing: the pages stay in
the page cache, and an fsync through a later descriptor writes them (Linux
reports a write-back error nobody has seen to the next opener's fsync too).
"""
from __future__ import annotations

import errno
import os
import resource
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import TypeVar

from logstore.filesystem import FileSystem

__all__ = ["OPEN_FILES", "OpenFiles", "SegmentFile", "default_capacity"]

# The share of the process's open-files limit segment files may hold; the rest is for sockets,
# index opens, checkpoints and whatever else the process opens.
LIMIT_SHARE = 0.5
MIN_CAPACITY = 16

_T = TypeVar("_T")


def default_capacity() -> int:
    """Half the soft RLIMIT_NOFILE (at least MIN_CAPACITY)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(MIN_CAPACITY, int(soft * LIMIT_SHARE))


class SegmentFile:
    """One file's descriptor in an `OpenFiles`: opened on demand, pinned while used."""

    __slots__ = ("cache", "path", "fs", "_reopen_flags", "fd", "pins", "closed")

    def __init__(self, cache: OpenFiles, path: str, fs: FileSystem, flags: int):
        self.cache = cache
        self.path = path
        self.fs = fs
        # A reopen must find the file the first open made or found: never create it again.
        self._reopen_flags = flags & ~(os.O_CREAT | os.O_EXCL | os.O_TRUNC)
        self.fd = -1
        self.pins = 0
        self.closed = False

    def acquire(self) -> int:
        """The descriptor, opened if need be and pinned until `release`."""
        return self.cache.pin(self)

    def release(self) -> None:
        """Unpin what `acquire` pinned."""
        self.cache.unpin(self)

    def dup(self) -> int:
        """A duplicate descriptor of the file that the caller owns and closes."""
        fd = self.acquire()
        try:
            return os.dup(fd)
        finally:
            self.release()

    def call(self, op: Callable[[int], _T]) -> _T:
        """`op(fd)` with the descriptor pinned."""
        fd = self.acquire()
        try:
            return op(fd)
        finally:
            self.release()

    def rename(self, new_path: str) -> None:
        """Rename the file, with no reopen by the old name in between."""
        self.cache.rename(self, new_path)

    def close(self) -> None:
        """Close for good (idempotent); a pinned descriptor closes when its last pin goes."""
        self.cache.discard(self)


class OpenFiles:
    """At most `capacity` open descriptors of `SegmentFile`s (more only while pinned)."""

    def __init__(self, capacity: int | None = None):
        self.capacity = capacity if capacity is not None else default_capacity()
        self._lock = threading.Lock()
        # Open, unpinned-or-pinned files, least recently used first.
        self._open: OrderedDict[SegmentFile, None] = OrderedDict()
        self.reopens = 0

    def open(self, path: str, flags: int, fs: FileSystem, mode: int = 0o644) -> SegmentFile:
        """A file opened now with `flags` (so a missing or unwritable one fails here), kept in the set."""
        file = SegmentFile(self, path, fs, flags)
        with self._lock:
            self._make_room()
            file.fd = self._os_open(lambda: fs.open(path, flags, mode))
            self._open[file] = None
        return file

    def __len__(self) -> int:
        return len(self._open)

    def pin(self, file: SegmentFile) -> int:
        """The file's descriptor, pinned (reopened by name if the set had closed it)."""
        with self._lock:
            if file.fd < 0:
                if file.closed:   # as a descriptor closed under its user would answer
                    raise OSError(errno.EBADF, "segment file closed", file.path)
                self._make_room()
                file.fd = self._os_open(lambda: file.fs.open(file.path, file._reopen_flags))
                self.reopens += 1
                self._open[file] = None
            else:
                self._open.move_to_end(file)
            file.pins += 1
            return file.fd

    def unpin(self, file: SegmentFile) -> None:
        """Undo one `pin`; a file closed meanwhile lets go of its descriptor with the last pin."""
        with self._lock:
            file.pins -= 1
            if file.closed and file.pins == 0:
                self._close(file)

    def rename(self, file: SegmentFile, new_path: str) -> None:
        """Rename `file` on its file system under the lock reopens take."""
        with self._lock:
            file.fs.rename(file.path, new_path)
            file.path = new_path

    def discard(self, file: SegmentFile) -> None:
        """Close `file` for good."""
        with self._lock:
            file.closed = True
            if file.pins == 0:
                self._close(file)

    def _close(self, file: SegmentFile) -> None:
        if file.fd >= 0:
            self._open.pop(file, None)
            fd, file.fd = file.fd, -1
            file.fs.close(fd)

    def _make_room(self, target: int | None = None) -> None:
        """Close least-recently-used unpinned descriptors until fewer than `target` (the capacity) are open."""
        target = self.capacity if target is None else target
        if len(self._open) < target:
            return
        for file in list(self._open):
            if len(self._open) < target:
                break
            if file.pins == 0:
                self._close(file)

    def _os_open(self, opener: Callable[[], int]) -> int:
        try:
            return opener()
        except OSError as exc:
            # The process's table is full of other things (sockets): give back half of ours and try once more.
            if exc.errno not in (errno.EMFILE, errno.ENFILE) or not self._open:
                raise
            self._make_room(len(self._open) // 2)
            return opener()


# One set per process: the descriptor limit is the process's.
OPEN_FILES = OpenFiles()
