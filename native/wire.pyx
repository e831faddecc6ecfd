# cython: language_level=3
"""The hot codecs of the broker: Produce requests in, Fetch responses out, and
the small exchanges every client repeats (small_wire.pxi: OffsetCommit
requests, OffsetCommit and Produce responses; txn_wire.pxi: AddPartitionsToTxn
and EndTxn, both ways).

Every other request and response goes through kio; the first two carry the
record bytes. A Produce request is read in place: each partition's records
is a memoryview of the frame, never a copy. A Fetch response is written as a
list of parts, the framing in bytes and each partition's records left as the
caller's object (a file slice to sendfile, or bytes), so nothing is re-encoded.
kio is the oracle of both in the tests. Tagged fields of flexible versions
are skipped whatever their tag, as Kafka skips the ones it does not know.
"""
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy

DEF PRODUCE_FIRST_FLEXIBLE = 9
DEF FETCH_FIRST_FLEXIBLE = 12


class WireError(ValueError):
    """Bytes that do not form the request their header names."""


cdef class ProducePartition:
    """One partition's records in a Produce request (a view of the frame)."""
    cdef readonly int32_t index
    cdef readonly object records

    def __repr__(self):
        size = None if self.records is None else len(self.records)
        return f"ProducePartition(index={self.index}, records=<{size} bytes>)"


cdef class ProduceTopic:
    """One topic of a Produce request."""
    cdef readonly str name
    cdef readonly list partition_data


cdef class ProduceRequest:
    """A Produce request body (v3 and up) with kio's field names."""
    cdef readonly object transactional_id
    cdef readonly int16_t acks
    cdef readonly int32_t timeout_ms
    cdef readonly list topic_data


cdef struct Cursor:
    const uint8_t* data
    Py_ssize_t pos
    Py_ssize_t end


cdef inline int need(Cursor* c, Py_ssize_t n) except -1:
    if n < 0 or c.end - c.pos < n:
        raise WireError(f"request ends at byte {c.end}, {n} more needed at byte {c.pos}")
    return 0


cdef inline int16_t read_i16(Cursor* c) except? -1:
    need(c, 2)
    cdef const uint8_t* p = c.data + c.pos
    c.pos += 2
    return <int16_t>((p[0] << 8) | p[1])


cdef inline int32_t read_i32(Cursor* c) except? -1:
    need(c, 4)
    cdef const uint8_t* p = c.data + c.pos
    c.pos += 4
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3])


cdef inline uint32_t read_uvarint(Cursor* c) except? 0xFFFFFFFF:
    cdef uint32_t value = 0
    cdef int shift = 0
    cdef uint8_t b
    while True:
        need(c, 1)
        b = c.data[c.pos]
        c.pos += 1
        if shift == 28 and b > 0x0F:
            raise WireError(f"unsigned varint longer than 32 bits at byte {c.pos - 1}")
        value |= <uint32_t>(b & 0x7F) << shift
        if not b & 0x80:
            return value
        shift += 7


cdef inline Py_ssize_t read_length(Cursor* c, bint flexible) except -2:
    """A string, bytes or array length; -1 is null."""
    cdef Py_ssize_t n
    if flexible:
        return <Py_ssize_t>read_uvarint(c) - 1
    n = read_i32(c)
    # -2 is how these readers report an error: a frame's own -2 (or below) must raise, not pose as one.
    if n < -1:
        raise WireError(f"length {n} at byte {c.pos - 4}")
    return n


cdef inline Py_ssize_t read_string_length(Cursor* c, bint flexible) except -2:
    cdef Py_ssize_t n
    if flexible:
        return <Py_ssize_t>read_uvarint(c) - 1
    n = read_i16(c)
    if n < -1:
        raise WireError(f"string length {n} at byte {c.pos - 2}")
    return n


cdef object read_string(Cursor* c, bint flexible, bint nullable):
    cdef Py_ssize_t n = read_string_length(c, flexible)
    if n < 0:
        if n == -1 and nullable:
            return None
        raise WireError(f"string length {n} at byte {c.pos}")
    need(c, n)
    value = PyUnicode_DecodeUTF8(<const char*>(c.data + c.pos), n, "strict")
    c.pos += n
    return value


cdef int skip_tagged_fields(Cursor* c) except -1:
    cdef uint32_t count = read_uvarint(c)
    cdef uint32_t i, size
    for i in range(count):
        read_uvarint(c)
        size = read_uvarint(c)
        need(c, size)
        c.pos += size
    return 0


def decode_produce(frame):
    """(client_id, ProduceRequest) of a whole Produce v3+ frame, records as views of `frame`.

    `frame` is the bytes after the size prefix; a writable buffer gives
    writable records, so the log can assign offsets in place.
    """
    cdef const uint8_t[::1] view = frame
    cdef Cursor c
    c.data = &view[0] if view.shape[0] else NULL
    c.pos = 0
    c.end = view.shape[0]
    whole = memoryview(frame)
    read_i16(&c)
    cdef int16_t version = read_i16(&c)
    read_i32(&c)
    cdef bint flexible = version >= PRODUCE_FIRST_FLEXIBLE
    if version < 3:
        raise WireError(f"Produce v{version} has no transactional id; v3 is the first decoded")
    # The header's client id is an int16 string in header v1 and v2 alike.
    client_id = read_string(&c, False, True)
    if flexible:
        skip_tagged_fields(&c)
    cdef ProduceRequest request = ProduceRequest.__new__(ProduceRequest)
    request.transactional_id = read_string(&c, flexible, True)
    request.acks = read_i16(&c)
    request.timeout_ms = read_i32(&c)
    cdef Py_ssize_t topics = read_length(&c, flexible)
    cdef Py_ssize_t partitions, size, t, p
    cdef ProduceTopic topic
    cdef ProducePartition partition
    request.topic_data = []
    if topics < 0:
        raise WireError("a Produce request with a null topic array")
    # Each element takes at least one byte, so a count above the bytes left is a lie:
    # checked before any list grows with it.
    need(&c, topics)
    for t in range(topics):
        topic = ProduceTopic.__new__(ProduceTopic)
        topic.name = read_string(&c, flexible, False)
        topic.partition_data = []
        partitions = read_length(&c, flexible)
        if partitions < 0:
            raise WireError(f"topic {topic.name!r} has a null partition array")
        need(&c, partitions)
        for p in range(partitions):
            partition = ProducePartition.__new__(ProducePartition)
            partition.index = read_i32(&c)
            size = read_length(&c, flexible)
            if size == -1:
                partition.records = None
            elif size < 0:
                raise WireError(f"records length {size} at byte {c.pos}")
            else:
                need(&c, size)
                partition.records = whole[c.pos:c.pos + size]
                c.pos += size
            if flexible:
                skip_tagged_fields(&c)
            topic.partition_data.append(partition)
        if flexible:
            skip_tagged_fields(&c)
        request.topic_data.append(topic)
    if flexible:
        skip_tagged_fields(&c)
    return client_id, request


cdef class _Writer:
    """A growing byte buffer cut into parts wherever a records object is placed."""
    cdef uint8_t* buf
    cdef Py_ssize_t pos
    cdef Py_ssize_t cap
    cdef Py_ssize_t total
    cdef list parts

    def __cinit__(self):
        self.cap = 4096
        self.buf = <uint8_t*>PyMem_Malloc(self.cap)
        if self.buf == NULL:
            raise MemoryError()
        self.pos = 0
        self.total = 0
        self.parts = []

    def __dealloc__(self):
        PyMem_Free(self.buf)

    cdef inline int reserve(self, Py_ssize_t n) except -1:
        cdef Py_ssize_t cap = self.cap
        cdef uint8_t* grown
        if self.pos + n <= cap:
            return 0
        while cap < self.pos + n:
            cap *= 2
        grown = <uint8_t*>PyMem_Realloc(self.buf, cap)
        if grown == NULL:
            raise MemoryError()
        self.buf = grown
        self.cap = cap
        return 0

    cdef inline int big_endian(self, uint64_t u, int n) except -1:
        self.reserve(n)
        cdef int i
        for i in range(n):
            self.buf[self.pos + i] = (u >> (8 * (n - 1 - i))) & 0xFF
        self.pos += n
        return 0

    cdef inline int i16(self, int16_t v) except -1:
        return self.big_endian(<uint16_t>v, 2)

    cdef inline int i32(self, int32_t v) except -1:
        return self.big_endian(<uint32_t>v, 4)

    cdef inline int i64(self, int64_t v) except -1:
        return self.big_endian(<uint64_t>v, 8)

    cdef inline int uvarint(self, uint32_t v) except -1:
        self.reserve(5)
        while v >= 0x80:
            self.buf[self.pos] = (v & 0x7F) | 0x80
            self.pos += 1
            v >>= 7
        self.buf[self.pos] = v
        self.pos += 1
        return 0

    cdef inline int length(self, Py_ssize_t n, bint flexible) except -1:
        """An array or bytes length; -1 writes null."""
        if flexible:
            return self.uvarint(<uint32_t>(n + 1))
        return self.i32(<int32_t>n)

    cdef int string(self, str s, bint flexible) except -1:
        cdef bytes raw = s.encode("utf-8")
        cdef Py_ssize_t n = len(raw)
        if flexible:
            self.uvarint(<uint32_t>(n + 1))
        else:
            if n > 0x7FFF:
                raise WireError(f"string of {n} bytes does not fit an int16 length")
            self.i16(<int16_t>n)
        self.reserve(n)
        memcpy(self.buf + self.pos, <const char*>raw, n)
        self.pos += n
        return 0

    cdef int flush(self) except -1:
        if self.pos:
            self.parts.append(PyBytes_FromStringAndSize(<const char*>self.buf, self.pos))
            self.total += self.pos
            self.pos = 0
        return 0

    cdef int records(self, object records, bint flexible) except -1:
        """A records field: a buffer is copied in when small, else kept as a part like a file slice."""
        cdef Py_ssize_t n
        if records is None:
            return self.length(-1, flexible)
        if isinstance(records, memoryview):
            n = records.nbytes
        elif isinstance(records, (bytes, bytearray)):
            n = len(records)
        else:
            n = records.size
        self.length(n, flexible)
        if n == 0:
            return 0
        if isinstance(records, bytes) and n < 4096:
            self.reserve(n)
            memcpy(self.buf + self.pos, <const char*>(<bytes>records), n)
            self.pos += n
            return 0
        self.flush()
        self.parts.append(records)
        self.total += n
        return 0


def encode_fetch(int32_t correlation_id, int version, int16_t error_code, int32_t session_id, list topics):
    """The frame of a Fetch v4-12 response as parts (bytes, and each records object as given).

    `topics` is [(name, [(partition, error_code, high_watermark,
    last_stable_offset, log_start_offset, aborted or None, records), ...]),
    ...] where aborted is [(producer_id, first_offset), ...] and records is
    None, bytes, or an object with `.size` (a file slice) that the sender
    writes itself. The first part starts with the frame's size.
    """
    if not 4 <= version <= 12:
        raise WireError(f"Fetch v{version} is not encoded here")
    cdef bint flexible = version >= FETCH_FIRST_FLEXIBLE
    cdef _Writer w = _Writer()
    w.i32(0)  # the size, patched once known
    w.i32(correlation_id)
    if flexible:
        w.uvarint(0)  # response header v1: no tagged fields
    w.i32(0)  # throttle_time_ms
    if version >= 7:
        w.i16(error_code)
        w.i32(session_id)
    w.length(len(topics), flexible)
    cdef tuple row
    for name, partitions in topics:
        w.string(name, flexible)
        w.length(len(partitions), flexible)
        for row in partitions:
            w.i32(row[0])
            w.i16(row[1])
            w.i64(row[2])
            w.i64(row[3])
            if version >= 5:
                w.i64(row[4])
            aborted = row[5]
            if aborted is None:
                w.length(-1, flexible)
            else:
                w.length(len(aborted), flexible)
                for producer_id, first_offset in aborted:
                    w.i64(producer_id)
                    w.i64(first_offset)
                    if flexible:
                        w.uvarint(0)
            if version >= 11:
                w.i32(-1)  # preferred_read_replica: this broker
            w.records(row[6], flexible)
            if flexible:
                w.uvarint(0)
        if flexible:
            w.uvarint(0)
    if flexible:
        w.uvarint(0)
    w.flush()
    first = bytearray(w.parts[0])
    size = w.total - 4
    first[0:4] = size.to_bytes(4, "big", signed=True)
    w.parts[0] = bytes(first)
    return w.parts


include "small_wire.pxi"
include "txn_wire.pxi"
