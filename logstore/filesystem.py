"""The file-system seam: every file operation of the storage library goes through a `FileSystem`.

Descriptor-level, like the `os` calls it replaces: a segment's descriptor is
shared by its writer, any number of preads and `sendfile` (`FileSlice`), so a
handle object would only wrap the int those need. Two ways to map a file:
`mmap` (CPython's, which keeps a copy of the descriptor while it lives: for a
scan that unmaps when done) and `map_file` (a `FileMap`, which keeps none: for
the index maps that live as long as their segment). `OsFileSystem` passes every
call to `os` and looks the function up at call time (the storage benchmark
counts fsyncs by patching `os.fsync`); `OS` is the instance modules default to.
Tests substitute `tests/storage/fault_fs.py`'s `FaultFileSystem`, which
remembers what was fsynced and can lose the rest, as a power cut does.

What a caller may rely on, as POSIX gives it: data written is durable only
after `fsync`/`fdatasync` of its file; a create, rename or unlink only after
`fsync_dir` of its directory; `rename` replaces its target atomically;
`syncfs` makes all of that durable at once for every file and directory of
the file system holding its path. On a file system held only in memory
(tmpfs, ramfs: `memory_backed`) every one of those syncs is a no-op that
returns at once: there is no device below the page cache to write to.
"""
from __future__ import annotations

import fcntl
import mmap
import os
import shutil
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from logstore.native.file_map import FileMap, fs_type, pwrite_holding_gil, syncfs_path

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = ["FileSystem", "OsFileSystem", "OS", "MEMORY_FILE_SYSTEMS"]

# statfs(2) magic numbers of the file systems kept only in memory: tmpfs (and /dev/shm), ramfs.
MEMORY_FILE_SYSTEMS = frozenset({0x01021994, 0x858458F6})
MEMINFO = "/proc/meminfo"


@runtime_checkable
class FileSystem(Protocol):
    """What storage does to files and directories (descriptors are the OS's ints)."""

    def open(self, path: str, flags: int, mode: int = 0o644) -> int:
        """A descriptor for `path` (os.open's flags)."""

    def close(self, fd: int) -> None:
        """Close a descriptor this file system opened."""

    def pread(self, fd: int, size: int, position: int) -> bytes:
        """Up to `size` bytes at `position`."""

    def preadinto(self, fd: int, buf: memoryview, position: int) -> int:
        """Read into `buf` from `position`; the bytes read (fewer at the end of the file)."""

    def pwrite(self, fd: int, data: Buffer, position: int) -> int:
        """Write `data` at `position`; the bytes written."""

    def write(self, fd: int, data: Buffer) -> int:
        """Write `data` at the descriptor's offset; the bytes written."""

    def truncate(self, fd: int, size: int) -> None:
        """Set the file's length to `size` bytes."""

    def size(self, fd: int) -> int:
        """The file's length in bytes."""

    def fsync(self, fd: int) -> None:
        """Make the file's data and length durable."""

    def fdatasync(self, fd: int) -> None:
        """Make the file's data durable (what an acknowledged append needs)."""

    def mmap(self, fd: int, length: int, *, writable: bool) -> mmap.mmap:
        """Map the first `length` bytes; writes through a writable map are durable after `fsync`."""

    def map_file(self, fd: int, length: int, *, writable: bool) -> FileMap:
        """Map the first `length` bytes holding no descriptor (`fd` may be closed at once); writes
        through a writable map are durable after `fsync` of the file."""

    def flock(self, fd: int) -> None:
        """Take an exclusive lock on the open file, or raise BlockingIOError."""

    def rename(self, src: str, dst: str) -> None:
        """Move `src` to `dst`, atomically replacing any file there."""

    def unlink(self, path: str) -> None:
        """Remove a file (FileNotFoundError if there is none)."""

    def listdir(self, path: str) -> list[str]:
        """The names in a directory."""

    def exists(self, path: str) -> bool:
        """Whether anything is at `path`."""

    def isdir(self, path: str) -> bool:
        """Whether `path` is a directory."""

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        """Create a directory and its missing parents."""

    def rmtree(self, path: str) -> None:
        """Remove a directory and everything under it, ignoring errors."""

    def fsync_dir(self, path: str) -> None:
        """Make the creates, renames and unlinks in a directory durable."""

    def syncfs(self, path: str) -> None:
        """Make everything written, created, renamed or unlinked on the file system holding `path` durable."""

    def memory_backed(self, path: str) -> bool:
        """Whether `path` is on a file system kept only in memory, whose syncs write nothing and never wait."""

    def unwritten_bytes(self) -> int | None:
        """File data the kernel holds that is not on its device yet, machine-wide (None when unknown)."""

    def mtime(self, path: str) -> float:
        """The file's modification time (seconds since the epoch)."""

    def set_mtime(self, path: str, mtime: float) -> None:
        """Set the file's access and modification times to `mtime`."""

    def read_file(self, path: str) -> bytes:
        """The whole content of a small file."""


# Writes up to this size go to the page cache in microseconds: they keep the GIL (larger ones let it go, as
# `os.pwrite` does, so other threads run while they copy).
PWRITE_HOLDING_GIL_MAX = 64 * 1024


class OsFileSystem:
    """The real file system: each call is the `os` function of the same name."""

    def open(self, path: str, flags: int, mode: int = 0o644) -> int:
        """A descriptor for `path` (os.open's flags)."""
        return os.open(path, flags, mode)

    def close(self, fd: int) -> None:
        """Close a descriptor this file system opened."""
        os.close(fd)

    def pread(self, fd: int, size: int, position: int) -> bytes:
        """Up to `size` bytes at `position`."""
        return os.pread(fd, size, position)

    def preadinto(self, fd: int, buf: memoryview, position: int) -> int:
        """Read into `buf` from `position`; the bytes read (fewer at the end of the file)."""
        return os.preadv(fd, [buf], position)

    def pwrite(self, fd: int, data: Buffer, position: int) -> int:
        """Write `data` at `position`; the bytes written (a small write keeps the GIL: `pwrite_holding_gil`)."""
        view = memoryview(data)
        if view.nbytes <= PWRITE_HOLDING_GIL_MAX and view.c_contiguous:
            return pwrite_holding_gil(fd, view.cast("B"), position)
        return os.pwrite(fd, data, position)

    def write(self, fd: int, data: Buffer) -> int:
        """Write `data` at the descriptor's offset; the bytes written."""
        return os.write(fd, data)

    def truncate(self, fd: int, size: int) -> None:
        """Set the file's length to `size` bytes."""
        os.ftruncate(fd, size)

    def size(self, fd: int) -> int:
        """The file's length in bytes."""
        return os.fstat(fd).st_size

    def fsync(self, fd: int) -> None:
        """Make the file's data and length durable."""
        os.fsync(fd)

    def fdatasync(self, fd: int) -> None:
        """Make the file's data durable (what an acknowledged append needs)."""
        os.fdatasync(fd)

    def mmap(self, fd: int, length: int, *, writable: bool) -> mmap.mmap:
        """Map the first `length` bytes; writes through a writable map are durable after `fsync`."""
        return mmap.mmap(fd, length, access=mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ)

    def map_file(self, fd: int, length: int, *, writable: bool) -> FileMap:
        """Map the first `length` bytes holding no descriptor (`fd` may be closed at once); writes
        through a writable map are durable after `fsync` of the file."""
        return FileMap(fd, length, writable)

    def flock(self, fd: int) -> None:
        """Take an exclusive lock on the open file, or raise BlockingIOError."""
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def rename(self, src: str, dst: str) -> None:
        """Move `src` to `dst`, atomically replacing any file there."""
        os.replace(src, dst)

    def unlink(self, path: str) -> None:
        """Remove a file (FileNotFoundError if there is none)."""
        os.unlink(path)

    def listdir(self, path: str) -> list[str]:
        """The names in a directory."""
        return os.listdir(path)

    def exists(self, path: str) -> bool:
        """Whether anything is at `path`."""
        return os.path.exists(path)

    def isdir(self, path: str) -> bool:
        """Whether `path` is a directory."""
        return os.path.isdir(path)

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        """Create a directory and its missing parents."""
        os.makedirs(path, exist_ok=exist_ok)

    def rmtree(self, path: str) -> None:
        """Remove a directory and everything under it, ignoring errors."""
        shutil.rmtree(path, ignore_errors=True)

    def fsync_dir(self, path: str) -> None:
        """Make the creates, renames and unlinks in a directory durable."""
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def syncfs(self, path: str) -> None:
        """Make everything written, created, renamed or unlinked on the file system holding `path` durable."""
        syncfs_path(path)

    def memory_backed(self, path: str) -> bool:
        """Whether `path` is on tmpfs or ramfs (False when it cannot be looked at)."""
        try:
            return fs_type(path) in MEMORY_FILE_SYSTEMS
        except OSError:
            return False

    def unwritten_bytes(self) -> int | None:
        """/proc/meminfo's Dirty plus Writeback: what a syncfs of any file system may have to write first."""
        try:
            with open(MEMINFO, "rb") as f:
                text = f.read()
        except OSError:
            return None
        total = 0
        for name in (b"\nDirty:", b"\nWriteback:"):
            at = text.find(name)
            if at < 0:
                return None
            total += int(text[at + len(name):text.index(b"kB", at)])
        return total * 1024

    def mtime(self, path: str) -> float:
        """The file's modification time (seconds since the epoch)."""
        return os.stat(path).st_mtime

    def set_mtime(self, path: str, mtime: float) -> None:
        """Set the file's access and modification times to `mtime`."""
        os.utime(path, (mtime, mtime))

    def read_file(self, path: str) -> bytes:
        """The whole content of a small file."""
        fd = self.open(path, os.O_RDONLY)
        try:
            chunks = []
            position = 0
            while chunk := self.pread(fd, 1 << 20, position):
                chunks.append(chunk)
                position += len(chunk)
            return b"".join(chunks)
        finally:
            self.close(fd)


OS = OsFileSystem()
