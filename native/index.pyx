# cython: language_level=3
"""Binary search and appends over Kafka's `.index` and `.timeindex` entries.

The entries live in a buffer the caller owns (the mmap of a preallocated
index file); only the first `entries` slots are valid, the rest are zeros.
Everything is big-endian as on disk (on-disk-format.md §5.3, §5.4):

    .index      relativeOffset int32 | position int32          (8 bytes)
    .timeindex  timestamp int64      | relativeOffset int32    (12 bytes)

The searches run on the raw bytes so a lookup costs one method call and
about twenty loads, whatever the size of the index.
"""
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t

from logstore.errors import LogStoreError

DEF OFFSET_ENTRY = 8
DEF TIME_ENTRY = 12
DEF INT32_MAX = 2147483647


class InvalidOffsetError(LogStoreError):
    """An index entry that would break the strictly increasing order of the index."""

    error_name = "KAFKA_STORAGE_ERROR"


class IndexFullError(LogStoreError):
    """An append to an index that has no free slot left; the segment must roll first."""

    error_name = "KAFKA_STORAGE_ERROR"


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


cdef class _IndexCore:
    """A view of fixed-size entries in a writable buffer, `entries` of them valid."""

    cdef Py_buffer view
    cdef bint attached
    cdef uint8_t* data
    cdef Py_ssize_t entry_size
    cdef readonly Py_ssize_t capacity
    cdef readonly Py_ssize_t entries
    cdef readonly int64_t base_offset

    def __cinit__(self, buf, int64_t base_offset, Py_ssize_t entries, *args):
        self.attached = False
        self.entry_size = OFFSET_ENTRY

    cdef _attach(self, buf, int64_t base_offset, Py_ssize_t entries, Py_ssize_t entry_size):
        self.entry_size = entry_size
        self.base_offset = base_offset
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
        """Let go of the buffer so its mmap can be resized or closed."""
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

    def __init__(self, buf, int64_t base_offset, Py_ssize_t entries):
        self._attach(buf, base_offset, entries, OFFSET_ENTRY)

    cdef inline int64_t _offset_at(self, Py_ssize_t slot) noexcept nogil:
        return self.base_offset + _be32(self.data + slot * OFFSET_ENTRY)

    cdef Py_ssize_t _floor_slot(self, int64_t target) noexcept nogil:
        # Largest slot whose offset <= target, or -1.
        cdef Py_ssize_t lo = 0, hi = self.entries - 1, mid
        if self.entries == 0 or self._offset_at(0) > target:
            return -1
        while lo < hi:
            mid = hi - (hi - lo) // 2
            if self._offset_at(mid) <= target:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def floor_slot(self, int64_t target):
        """The slot of the largest entry whose offset is at most `target`, or -1."""
        return self._floor_slot(target)

    def lookup(self, int64_t target):
        """(offset, position) of the largest entry at or below `target`; (base offset, 0) if none."""
        cdef Py_ssize_t slot = self._floor_slot(target)
        if slot < 0:
            return (self.base_offset, 0)
        return (self._offset_at(slot), _be32(self.data + slot * OFFSET_ENTRY + 4))

    def entry(self, Py_ssize_t slot):
        """(offset, position) stored in `slot`."""
        self._check_slot(slot)
        return (self._offset_at(slot), _be32(self.data + slot * OFFSET_ENTRY + 4))

    def last_entry(self):
        """The newest entry, or (base offset, 0) when empty."""
        if self.entries == 0:
            return (self.base_offset, 0)
        return self.entry(self.entries - 1)

    def append(self, int64_t offset, int64_t position):
        """Add (offset, position); offsets must strictly increase."""
        cdef int32_t rel = self._relative(offset)
        if position < 0 or position > INT32_MAX:
            raise InvalidOffsetError(f"position {position} does not fit an index entry")
        if self.entries > 0 and offset <= self._offset_at(self.entries - 1):
            raise InvalidOffsetError(
                f"offset {offset} is not above the last indexed offset {self._offset_at(self.entries - 1)}")
        self._check_append()
        cdef uint8_t* p = self.data + self.entries * OFFSET_ENTRY
        _put32(p, rel)
        _put32(p + 4, <int32_t>position)
        self.entries += 1

    def truncate_to(self, int64_t offset):
        """Drop every entry at or above `offset`; returns the entries left."""
        cdef Py_ssize_t slot = self._floor_slot(offset)
        if slot >= 0 and self._offset_at(slot) == offset:
            slot -= 1
        self.entries = slot + 1
        return self.entries


cdef class TimeIndexCore(_IndexCore):
    """`.timeindex`: max timestamp so far → offset of the batch holding it."""

    def __init__(self, buf, int64_t base_offset, Py_ssize_t entries):
        self._attach(buf, base_offset, entries, TIME_ENTRY)

    cdef inline int64_t _ts_at(self, Py_ssize_t slot) noexcept nogil:
        return _be64(self.data + slot * TIME_ENTRY)

    cdef inline int64_t _offset_at(self, Py_ssize_t slot) noexcept nogil:
        return self.base_offset + _be32(self.data + slot * TIME_ENTRY + 8)

    def lookup(self, int64_t timestamp):
        """(timestamp, offset) of the largest entry at or below `timestamp`; (-1, base offset) if none."""
        cdef Py_ssize_t lo = 0, hi = self.entries - 1, mid
        if self.entries == 0 or self._ts_at(0) > timestamp:
            return (-1, self.base_offset)
        while lo < hi:
            mid = hi - (hi - lo) // 2
            if self._ts_at(mid) <= timestamp:
                lo = mid
            else:
                hi = mid - 1
        return (self._ts_at(lo), self._offset_at(lo))

    def entry(self, Py_ssize_t slot):
        """(timestamp, offset) stored in `slot`."""
        self._check_slot(slot)
        return (self._ts_at(slot), self._offset_at(slot))

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
        cdef int32_t rel = self._relative(offset)
        if self.entries > 0 and offset < self._offset_at(self.entries - 1):
            raise InvalidOffsetError(
                f"offset {offset} is below the last time-indexed offset {self._offset_at(self.entries - 1)}")
        # An empty index's last entry reads as timestamp -1, so -1 is never stored.
        if timestamp <= (self._ts_at(self.entries - 1) if self.entries > 0 else -1):
            return False
        if not final and self.entries >= self.capacity - 1:
            raise IndexFullError(f"time index at base offset {self.base_offset} is full")
        self._check_append()
        cdef uint8_t* p = self.data + self.entries * TIME_ENTRY
        _put64(p, timestamp)
        _put32(p + 8, rel)
        self.entries += 1
        return True

    @property
    def is_full(self):
        """Whether only the slot kept for the closing entry is left."""
        return self.entries >= self.capacity - 1

    def truncate_to(self, int64_t offset):
        """Drop every entry whose offset is at or above `offset`; returns the entries left."""
        # Offsets are non-decreasing: find the first slot at or above the target.
        cdef Py_ssize_t lo = 0, hi = self.entries, mid
        while lo < hi:
            mid = (lo + hi) // 2
            if self._offset_at(mid) < offset:
                lo = mid + 1
            else:
                hi = mid
        self.entries = lo
        return self.entries
