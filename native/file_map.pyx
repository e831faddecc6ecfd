# cython: language_level=3
"""A shared mapping of a file that holds no descriptor.

CPython's `mmap.mmap` keeps a `dup` of the descriptor it maps for as long as
the map lives, so each index map cost two descriptors (ours and its copy).
mmap(2) needs none once it returns: the mapping keeps the file alive by
itself, follows it through renames, and its writes reach the page cache the
file's other readers see. `FileMap` is that: map, then let the caller close
the descriptor.

Reading a page past the end of a file that was cut under the map raises
SIGBUS; the index searches guard their accesses (`logstore.native.index`).
Bytes read through the buffer protocol here are not guarded: callers that
may meet a damaged file read through the index cores.

`syncfs_path` and `fs_type` (statfs(2)'s f_type) are here too, as the file-system calls Python's `os`
lacks, and `pwrite_holding_gil`, a pwrite that `os` only offers with the GIL let go.
"""
from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_FillInfo
from cpython.exc cimport PyErr_CheckSignals
from libc.errno cimport EINTR, errno
from posix.mman cimport MADV_RANDOM, MAP_FAILED, MAP_SHARED, MS_SYNC, PROT_READ, PROT_WRITE, madvise, mmap, msync, munmap

import os


cdef extern from "<unistd.h>" nogil:
    int c_syncfs "syncfs"(int fd)
    int c_close "close"(int fd)
    ssize_t c_pwrite "pwrite"(int fd, const void* buf, size_t count, long offset)


cdef extern from "<fcntl.h>" nogil:
    int c_open "open"(const char* path, int flags)
    int O_RDONLY
    int O_CLOEXEC


cdef extern from "<sys/vfs.h>" nogil:
    ctypedef struct fs_stats "struct statfs":
        long f_type
    int c_statfs "statfs"(const char* path, fs_stats* buf)


def fs_type(path):
    """statfs(2)'s f_type of the file system holding `path` (its magic number: 0x01021994 for tmpfs);
    OSError when the path cannot be looked at."""
    cdef fs_stats stats
    cdef bytes name = os.fsencode(path)
    cdef const char* c_name = name
    cdef int rc
    with nogil:
        rc = c_statfs(c_name, &stats)
    if rc != 0:
        raise OSError(errno, os.strerror(errno), path)
    return stats.f_type


def syncfs_path(path):
    """syncfs(2) of the file system holding `path`: write its every dirty page and inode and commit its
    journal; OSError when that fails (since Linux 5.8 it reports writeback errors met since the descriptor
    opened). The open, the sync and the close let the GIL go once: a sync thread that let it go for each
    had to win it back from the event loop three times a sync."""
    cdef bytes name = os.fsencode(path)
    cdef const char* c_name = name
    cdef int fd, rc = -1, failed = 0
    with nogil:
        fd = c_open(c_name, O_RDONLY | O_CLOEXEC)
        if fd >= 0:
            rc = c_syncfs(fd)
            if rc != 0:
                failed = errno
            c_close(fd)
        else:
            failed = errno
    if fd < 0:
        raise OSError(failed, os.strerror(failed), path)
    if rc != 0:
        raise OSError(failed, os.strerror(failed))


def pwrite_holding_gil(int fd, const unsigned char[::1] data, long position):
    """pwrite(2) of `data` at `position` without letting the GIL go; the bytes written, OSError on failure.

    `os.pwrite` releases the GIL around the call. For a small write into the page cache (a few µs) that
    hands the GIL to whichever thread waits for it, and the caller then waits to get it back: with an
    fsync thread finishing, an append on the event loop measured 22 µs instead of 2. The loop is held
    up by the write either way; this keeps the other threads from taking the GIL for that moment."""
    cdef ssize_t n
    cdef size_t count = data.shape[0]
    cdef const void* start = &data[0] if count else NULL
    while True:
        n = c_pwrite(fd, start, count, position)
        if n >= 0:
            return n
        if errno != EINTR:
            raise OSError(errno, os.strerror(errno))
        # As PEP 475 retries: a handler that raises ends the call.
        PyErr_CheckSignals()


cdef class FileMap:
    """The first `length` bytes of a file, mapped shared; writable maps write through to the file.

    Owns the mapping, not the descriptor it was made from. `close` refuses
    while a buffer of it is exported (an index core holds one), as
    `mmap.mmap` does, so nothing can read an address that was unmapped.
    Not thread-safe: its owner (one index) serialises use.
    """

    cdef void* addr
    cdef Py_ssize_t length
    cdef Py_ssize_t exports
    cdef readonly bint writable

    def __cinit__(self, int fd, Py_ssize_t length, bint writable):
        self.addr = NULL
        if length <= 0:
            raise ValueError(f"cannot map {length} bytes")
        cdef int prot = PROT_READ | (PROT_WRITE if writable else 0)
        cdef void* addr
        with nogil:
            addr = mmap(NULL, <size_t>length, prot, MAP_SHARED, fd, 0)
        if addr == MAP_FAILED:
            raise OSError(errno, os.strerror(errno))
        self.addr = addr
        self.length = length
        self.writable = writable

    def __dealloc__(self):
        if self.addr != NULL:
            munmap(self.addr, <size_t>self.length)

    def __len__(self):
        return self.length if self.addr != NULL else 0

    @property
    def closed(self):
        """Whether the mapping is gone."""
        return self.addr == NULL

    def advise_random(self):
        """Tell the kernel accesses are random (binary searches): a fault then reads no pages around it."""
        self._check_open()
        if madvise(self.addr, <size_t>self.length, MADV_RANDOM) != 0:
            raise OSError(errno, os.strerror(errno))

    def sync(self):
        """msync(MS_SYNC): write the map's dirty pages to the file and wait for them."""
        self._check_open()
        cdef int rc
        with nogil:
            rc = msync(self.addr, <size_t>self.length, MS_SYNC)
        if rc != 0:
            raise OSError(errno, os.strerror(errno))

    def close(self):
        """Unmap; BufferError while a buffer of the map is still held."""
        if self.addr == NULL:
            return
        if self.exports:
            raise BufferError(f"cannot close a map with {self.exports} exported buffers")
        munmap(self.addr, <size_t>self.length)
        self.addr = NULL

    cdef int _check_open(self) except -1:
        if self.addr == NULL:
            raise ValueError("the map is closed")
        return 0

    def __getbuffer__(self, Py_buffer* view, int flags):
        self._check_open()
        if flags & PyBUF_WRITABLE and not self.writable:
            raise BufferError("the map is read-only")
        PyBuffer_FillInfo(view, self, self.addr, self.length, not self.writable, flags)
        self.exports += 1

    def __releasebuffer__(self, Py_buffer* view):
        self.exports -= 1
