# cython: language_level=3
"""Binary search and appends over Kafka's `.index` and `.timeindex` entries.

The entries live in a buffer the caller owns (the map of a preallocated
index file); only the first `entries` slots are valid, the rest are zeros.
Everything is big-endian as on disk (on-disk-format.md §5.3, §5.4):

    .index      relativeOffset int32 | position int32          (8 bytes)
    .timeindex  timestamp int64      | relativeOffset int32    (12 bytes)

The searches run on the raw bytes so a lookup costs one method call and
about twenty loads, whatever the size of the index.

Every touch of those bytes runs under `map_guard.h`: if the file was cut
under its map, or a write into the sparse, preallocated file needs a block
a full disk does not have, the access raises `IndexAccessError` instead of
SIGBUS ending the process. Each access is a C
function over an `_Access` record (inputs in, results out) so that nothing
Python owns is live while it runs.
"""
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from libc.errno cimport errno
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t

import os

from logstore.errors import LogStoreError, StorageError

DEF OFFSET_ENTRY = 8
DEF TIME_ENTRY = 12
DEF INT32_MAX = 2147483647


cdef extern from "map_guard.h":
    ctypedef int (*ls_guarded_body)(void* ctx) noexcept nogil
    int LS_FAULT
    int ls_guard_install() noexcept nogil
    int ls_guarded(const void* start, size_t length, ls_guarded_body body, void* ctx) noexcept nogil


class InvalidOffsetError(LogStoreError):
    """An index entry that would break the strictly increasing order of the index."""

    error_name = "KAFKA_STORAGE_ERROR"


class IndexFullError(LogStoreError):
    """An append to an index that has no free slot left; the segment must roll first."""

    error_name = "KAFKA_STORAGE_ERROR"


class IndexAccessError(StorageError):
    """A read or write of an index map that faulted (SIGBUS): the file was cut under the map, or a write
    needed a block of a sparse, preallocated file on a full disk."""


if ls_guard_install() != 0:
    raise OSError(errno, f"cannot install the index maps' SIGBUS handler: {os.strerror(errno)}")


cdef inline int32_t _be32(const uint8_t* p) noexcept nogil:
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) |
                     (<uint32_t>p[2] << 8) | <uint32_t>p[3])


cdef inline int64_t _be64(const uint8_t* p) noexcept nogil:
    return <int64_t>((<uint64_t><uint32_t>_be32(p) << 32) | <uint64_t><uint32_t>_be32(p + 4))


cdef inline void _put32(uint8_t* p, int32_t v) noexcept nogil:
    cdef uint32_t u = <uint32_t>v
    p[0] = u >> 24
    p[1] = u >> 16
    p[2] = u >> 8
    p[3] = u


cdef inline void _put64(uint8_t* p, int64_t v) noexcept nogil:
    _put32(p, <int32_t>(<uint64_t>v >> 32))
    _put32(p + 4, <int32_t><uint32_t>v)


cdef struct _Access:
    uint8_t* data
    Py_ssize_t entries
    int64_t base_offset
    int64_t target      # the key searched, or the first field written
    int64_t value       # the second field written
    Py_ssize_t slot     # the slot read or written; the slot found (-1: none)
    int64_t first       # the fields read
    int64_t second


# -- the accesses (no GIL needed, no Python object touched) ---------------------------------

cdef int _offset_floor(void* ctx) noexcept nogil:
    # Largest slot whose offset <= target, or -1; with its entry.
    cdef _Access* a = <_Access*>ctx
    cdef Py_ssize_t lo = 0, hi = a.entries - 1, mid
    cdef int64_t rel = a.target - a.base_offset
    a.slot = -1
    if a.entries == 0 or _be32(a.data) > rel:
        return 0
    while lo < hi:
        mid = hi - (hi - lo) // 2
        if _be32(a.data + mid * OFFSET_ENTRY) <= rel:
            lo = mid
        else:
            hi = mid - 1
    a.slot = lo
    a.first = a.base_offset + _be32(a.data + lo * OFFSET_ENTRY)
    a.second = _be32(a.data + lo * OFFSET_ENTRY + 4)
    return 0


cdef int _offset_read(void* ctx) noexcept nogil:
    cdef _Access* a = <_Access*>ctx
    a.first = a.base_offset + _be32(a.data + a.slot * OFFSET_ENTRY)
    a.second = _be32(a.data + a.slot * OFFSET_ENTRY + 4)
    return 0


cdef int _offset_write(void* ctx) noexcept nogil:
    cdef _Access* a = <_Access*>ctx
    _put32(a.data + a.slot * OFFSET_ENTRY, <int32_t>(a.target - a.base_offset))
    _put32(a.data + a.slot * OFFSET_ENTRY + 4, <int32_t>a.value)
    return 0


cdef int _time_floor(void* ctx) noexcept nogil:
    # Largest slot whose timestamp <= target, or -1; with its entry.
    cdef _Access* a = <_Access*>ctx
    cdef Py_ssize_t lo = 0, hi = a.entries - 1, mid
    a.slot = -1
    if a.entries == 0 or _be64(a.data) > a.target:
        return 0
    while lo < hi:
        mid = hi - (hi - lo) // 2
        if _be64(a.data + mid * TIME_ENTRY) <= a.target:
            lo = mid
        else:
            hi = mid - 1
    a.slot = lo
    a.first = _be64(a.data + lo * TIME_ENTRY)
    a.second = a.base_offset + _be32(a.data + lo * TIME_ENTRY + 8)
    return 0


cdef int _time_first_at_or_above(void* ctx) noexcept nogil:
    # First slot whose offset >= target (offsets never decrease), or `entries`.
    cdef _Access* a = <_Access*>ctx
    cdef Py_ssize_t lo = 0, hi = a.entries, mid
    while lo < hi:
        mid = (lo + hi) // 2
        if a.base_offset + _be32(a.data + mid * TIME_ENTRY + 8) < a.target:
            lo = mid + 1
        else:
            hi = mid
    a.slot = lo
    return 0


cdef int _time_read(void* ctx) noexcept nogil:
    cdef _Access* a = <_Access*>ctx
    a.first = _be64(a.data + a.slot * TIME_ENTRY)
    a.second = a.base_offset + _be32(a.data + a.slot * TIME_ENTRY + 8)
    return 0


cdef int _time_write(void* ctx) noexcept nogil:
    cdef _Access* a = <_Access*>ctx
    _put64(a.data + a.slot * TIME_ENTRY, a.target)
    _put32(a.data + a.slot * TIME_ENTRY + 8, <int32_t>(a.value - a.base_offset))
    return 0


cdef class _IndexCore:
    """A view of fixed-size entries in a writable buffer, `entries` of them valid."""

    cdef Py_buffer view
    cdef bint attached
    cdef uint8_t* data
    cdef Py_ssize_t entry_size
    cdef readonly Py_ssize_t capacity
    cdef readonly Py_ssize_t entries
    cdef readonly int64_t base_offset
    cdef public object path

    def __cinit__(self, buf, int64_t base_offset, Py_ssize_t entries, *args, **kwargs):
        self.attached = False
        self.entry_size = OFFSET_ENTRY

    cdef _attach(self, buf, int64_t base_offset, Py_ssize_t entries, Py_ssize_t entry_size, path):
        self.entry_size = entry_size
        self.base_offset = base_offset
        self.path = path
        if buf is None:
            self.capacity = 0
        else:
            # Read-only maps (closed segments, read-only directories) search fine.
            PyObject_GetBuffer(buf, &self.view, PyBUF_SIMPLE)
            self.attached = True
            self.data = <uint8_t*>self.view.buf
            self.capacity = self.view.len // entry_size
        if entries < 0 or entries > self.capacity:
            self.release()
            raise ValueError(f"{entries} entries do not fit a buffer of {self.capacity} slots")
        self.entries = entries

    def release(self):
        """Let go of the buffer so its map can be resized or closed."""
        if self.attached:
            PyBuffer_Release(&self.view)
            self.attached = False
        self.data = NULL
        self.capacity = 0
        self.entries = 0

    def __dealloc__(self):
        if self.attached:
            PyBuffer_Release(&self.view)

    @property
    def is_full(self):
        """Whether every slot holds an entry."""
        return self.entries >= self.capacity

    def set_entries(self, Py_ssize_t entries):
        """Trust the first `entries` slots (after a trim or resize of the file)."""
        if entries < 0 or entries > self.capacity:
            raise ValueError(f"{entries} entries do not fit {self.capacity} slots")
        self.entries = entries

    cdef int _run(self, ls_guarded_body body, _Access* a) except -1:
        """Run one access over the buffer; a fault on its pages raises IndexAccessError."""
        a.data = self.data
        a.entries = self.entries
        a.base_offset = self.base_offset
        if not self.attached:
            # No buffer: no slot, and no access reads one.
            return body(a)
        if ls_guarded(self.data, <size_t>self.view.len, body, a) == LS_FAULT:
            where = self.path if self.path is not None else f"index at base offset {self.base_offset}"
            raise IndexAccessError(f"{where}: a page of its map faulted (the file was cut under it, or the disk "
                                   f"is full and a preallocated page could not be written)")
        return 0

    cdef int _check_slot(self, Py_ssize_t slot) except -1:
        if slot < 0 or slot >= self.entries:
            raise IndexError(f"index slot {slot} outside 0..{self.entries - 1}")
        return 0

    cdef int _check_append(self) except -1:
        if self.entries >= self.capacity:
            raise IndexFullError(f"index at base offset {self.base_offset} is full ({self.capacity} entries)")
        if self.view.readonly:
            raise InvalidOffsetError(f"index at base offset {self.base_offset} is read-only")
        return 0

    cdef int32_t _relative(self, int64_t offset) except? -1:
        cdef int64_t rel = offset - self.base_offset
        if rel < 0 or rel > INT32_MAX:
            raise InvalidOffsetError(
                f"offset {offset} is not representable relative to base offset {self.base_offset}")
        return <int32_t>rel


cdef class OffsetIndexCore(_IndexCore):
    """`.index`: relative offset → byte position of the batch holding it."""

    def __init__(self, buf, int64_t base_offset, Py_ssize_t entries, path=None):
        self._attach(buf, base_offset, entries, OFFSET_ENTRY, path)

    cdef int _floor(self, int64_t target, _Access* a) except -1:
        a.target = target
        return self._run(_offset_floor, a)

    cdef int _read(self, Py_ssize_t slot, _Access* a) except -1:
        a.slot = slot
        return self._run(_offset_read, a)

    def floor_slot(self, int64_t target):
        """The slot of the largest entry whose offset is at most `target`, or -1."""
        cdef _Access a
        self._floor(target, &a)
        return a.slot

    def lookup(self, int64_t target):
        """(offset, position) of the largest entry at or below `target`; (base offset, 0) if none."""
        cdef _Access a
        self._floor(target, &a)
        if a.slot < 0:
            return (self.base_offset, 0)
        return (a.first, a.second)

    def entry(self, Py_ssize_t slot):
        """(offset, position) stored in `slot`."""
        cdef _Access a
        self._check_slot(slot)
        self._read(slot, &a)
        return (a.first, a.second)

    def last_entry(self):
        """The newest entry, or (base offset, 0) when empty."""
        if self.entries == 0:
            return (self.base_offset, 0)
        return self.entry(self.entries - 1)

    def append(self, int64_t offset, int64_t position):
        """Add (offset, position); offsets must strictly increase."""
        cdef _Access a
        self._relative(offset)
        if position < 0 or position > INT32_MAX:
            raise InvalidOffsetError(f"position {position} does not fit an index entry")
        if self.entries > 0:
            self._read(self.entries - 1, &a)
            if offset <= a.first:
                raise InvalidOffsetError(f"offset {offset} is not above the last indexed offset {a.first}")
        self._check_append()
        a.slot = self.entries
        a.target = offset
        a.value = position
        self._run(_offset_write, &a)
        self.entries += 1

    def truncate_to(self, int64_t offset):
        """Drop every entry at or above `offset`; returns the entries left."""
        cdef _Access a
        self._floor(offset, &a)
        if a.slot >= 0 and a.first == offset:
            a.slot -= 1
        self.entries = a.slot + 1
        return self.entries


cdef class TimeIndexCore(_IndexCore):
    """`.timeindex`: max timestamp so far → offset of the batch holding it."""

    def __init__(self, buf, int64_t base_offset, Py_ssize_t entries, path=None):
        self._attach(buf, base_offset, entries, TIME_ENTRY, path)

    cdef int _read(self, Py_ssize_t slot, _Access* a) except -1:
        a.slot = slot
        return self._run(_time_read, a)

    def lookup(self, int64_t timestamp):
        """(timestamp, offset) of the largest entry at or below `timestamp`; (-1, base offset) if none."""
        cdef _Access a
        a.target = timestamp
        self._run(_time_floor, &a)
        if a.slot < 0:
            return (-1, self.base_offset)
        return (a.first, a.second)

    def entry(self, Py_ssize_t slot):
        """(timestamp, offset) stored in `slot`."""
        cdef _Access a
        self._check_slot(slot)
        self._read(slot, &a)
        return (a.first, a.second)

    def last_entry(self):
        """The newest entry, or (-1, base offset) when empty."""
        if self.entries == 0:
            return (-1, self.base_offset)
        return self.entry(self.entries - 1)

    def maybe_append(self, int64_t timestamp, int64_t offset, bint final=False):
        """Add (timestamp, offset) if the timestamp is above the last one; True if added.

        The last slot is kept for the entry written when the segment closes
        (`final=True`), so ordinary appends report full one slot early.
        """
        cdef _Access a
        self._relative(offset)
        # An empty index's last entry reads as timestamp -1, so -1 is never stored.
        a.first = -1
        if self.entries > 0:
            self._read(self.entries - 1, &a)
            if offset < a.second:
                raise InvalidOffsetError(f"offset {offset} is below the last time-indexed offset {a.second}")
        if timestamp <= a.first:
            return False
        if not final and self.entries >= self.capacity - 1:
            raise IndexFullError(f"time index at base offset {self.base_offset} is full")
        self._check_append()
        a.slot = self.entries
        a.target = timestamp
        a.value = offset
        self._run(_time_write, &a)
        self.entries += 1
        return True

    @property
    def is_full(self):
        """Whether only the slot kept for the closing entry is left."""
        return self.entries >= self.capacity - 1

    def truncate_to(self, int64_t offset):
        """Drop every entry whose offset is at or above `offset`; returns the entries left."""
        cdef _Access a
        a.target = offset
        self._run(_time_first_at_or_above, &a)
        self.entries = a.slot
        return self.entries
