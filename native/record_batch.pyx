# cython: language_level=3
"""Kafka v2 RecordBatch (magic 2): header, validator, encoders, decoders.

Layout (on-disk-format.md §2, Kafka's DefaultRecordBatch / DefaultRecord):

    0  baseOffset int64        27 baseTimestamp int64
    8  batchLength int32       35 maxTimestamp int64
    12 partitionLeaderEpoch    43 producerId int64
    16 magic int8 = 2          51 producerEpoch int16
    17 crc uint32 (CRC-32C of  53 baseSequence int32
       bytes [21, end))        57 recordCount int32
    21 attributes int16        61 records (one compressed blob when codec != 0)
    23 lastOffsetDelta int32

    record: length varint, attributes int8, timestampDelta varlong,
            offsetDelta varint, keyLength varint, key, valueLength varint,
            value, headerCount varint, headers
    header: keyLength varint (>= 0), key (UTF-8), valueLength varint, value

Every parse is bounded by the buffer; every failure is a CorruptRecordError
(or subclass) carrying the byte position. Loops that touch no Python object
run without the GIL.
"""
cimport cython
from cpython.buffer cimport PyBUF_READ, PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.memoryview cimport PyMemoryView_FromMemory
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy, memset

include "varint.pxi"

import time

from crc32c import crc32c as _crc32c

from logstore.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordTooLargeError,
    UnsupportedCompressionError,
)
from logstore.native.compression import DEFAULT_MAX_DECOMPRESSED, compress, decompress

cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object, Py_ssize_t*) except NULL

# Sizes and positions within the header.
DEF HEADER_SIZE = 61
DEF LOG_OVERHEAD = 12
DEF MIN_BATCH_LENGTH = 49
DEF CRC_START = 21
# A record body is at least attributes, timestampDelta, offsetDelta,
# keyLength, valueLength and headerCount: six bytes, plus its length varint.
DEF MIN_RECORD_SIZE = 7

RECORD_BATCH_OVERHEAD = HEADER_SIZE
CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20
DELETE_HORIZON_FLAG = 0x40
CREATE_TIME = 0
LOG_APPEND_TIME = 1
NO_TIMESTAMP = -1
DEF MAX_SEQ = 2147483647
MAX_SEQUENCE = MAX_SEQ
cdef char* _FORMAT_B = "B"

cdef object _EMPTY_TUPLE = ()


def increment_sequence(int32_t sequence, int32_t increment):
    """Kafka's sequence arithmetic: int32 sequences wrap from 2^31-1 to 0."""
    if sequence > MAX_SEQUENCE - increment:
        return increment - (MAX_SEQUENCE - sequence) - 1
    return sequence + increment


def decrement_sequence(int32_t sequence, int32_t decrement):
    """Inverse of increment_sequence."""
    if sequence < decrement:
        return MAX_SEQUENCE - (decrement - sequence) + 1
    return sequence - decrement


cdef inline int32_t _inc_seq(int32_t s, int32_t n) noexcept nogil:
    if s > MAX_SEQ - n:
        return n - (MAX_SEQ - s) - 1
    return s + n


# ---------------------------------------------------------------------------
# Header


@cython.final
@cython.freelist(64)
cdef class BatchHeader:
    """The 61-byte header of one v2 batch, decoded; `position` is its byte position.

    Immutable. Offsets are Kafka offsets, timestamps are milliseconds, sizes
    are bytes.
    """
    cdef readonly int64_t position
    cdef readonly int64_t base_offset
    cdef readonly int32_t batch_length
    cdef readonly int32_t partition_leader_epoch
    cdef readonly int8_t magic
    cdef readonly uint32_t crc
    cdef readonly int16_t attributes
    cdef readonly int32_t last_offset_delta
    cdef readonly int64_t base_timestamp
    cdef readonly int64_t max_timestamp
    cdef readonly int64_t producer_id
    cdef readonly int16_t producer_epoch
    cdef readonly int32_t base_sequence
    cdef readonly int32_t record_count

    @property
    def size_in_bytes(self):
        """Total bytes of the batch including the 12-byte log overhead."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self):
        """Offset of the last record the batch was written with."""
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self):
        """The offset after this batch."""
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self):
        """Codec id: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd."""
        return self.attributes & CODEC_MASK

    @property
    def timestamp_type(self):
        """0 CREATE_TIME, 1 LOG_APPEND_TIME."""
        return 1 if self.attributes & TIMESTAMP_TYPE_MASK else 0

    @property
    def is_transactional(self):
        """Whether the transactional attribute bit is set."""
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self):
        """Whether this is a control batch (transaction marker)."""
        return bool(self.attributes & CONTROL_FLAG)

    @property
    def has_delete_horizon(self):
        """Whether baseTimestamp holds the cleaner's delete horizon."""
        return bool(self.attributes & DELETE_HORIZON_FLAG)

    @property
    def has_producer_id(self):
        """Whether the batch belongs to an idempotent or transactional producer."""
        return self.producer_id >= 0

    @property
    def last_sequence(self):
        """Sequence of the last record, with wrap-around; -1 without a producer."""
        if self.base_sequence < 0:
            return -1
        return _inc_seq(self.base_sequence, self.last_offset_delta)

    def __repr__(self):
        return (f"BatchHeader(position={self.position}, base_offset={self.base_offset}, "
                f"last_offset={self.last_offset}, count={self.record_count}, "
                f"size={self.size_in_bytes}, attributes=0x{self.attributes:04x}, "
                f"producer_id={self.producer_id}, producer_epoch={self.producer_epoch}, "
                f"base_sequence={self.base_sequence}, crc={self.crc})")


cdef BatchHeader _read_header(const unsigned char* p, int64_t position):
    cdef BatchHeader h = BatchHeader.__new__(BatchHeader)
    h.position = position
    h.base_offset = read_be64(p)
    h.batch_length = read_be32(p + 8)
    h.partition_leader_epoch = read_be32(p + 12)
    h.magic = <int8_t>p[16]
    h.crc = <uint32_t>read_be32(p + 17)
    h.attributes = read_be16(p + 21)
    h.last_offset_delta = read_be32(p + 23)
    h.base_timestamp = read_be64(p + 27)
    h.max_timestamp = read_be64(p + 35)
    h.producer_id = read_be64(p + 43)
    h.producer_epoch = read_be16(p + 51)
    h.base_sequence = read_be32(p + 53)
    h.record_count = read_be32(p + 57)
    return h


cdef struct View:
    const unsigned char* p
    Py_ssize_t n


cdef class _Buffer:
    # Holds a Py_buffer for the duration of one call.
    cdef Py_buffer buf
    cdef bint held

    def __cinit__(self, obj):
        PyObject_GetBuffer(obj, &self.buf, PyBUF_SIMPLE)
        self.held = True

    def __dealloc__(self):
        if self.held:
            PyBuffer_Release(&self.buf)


cdef uint32_t _crc_of(object obj, Py_ssize_t start, Py_ssize_t stop):
    return _crc32c(memoryview(obj)[start:stop])


cdef BatchHeader _checked_header(object obj, const unsigned char* p, Py_ssize_t n,
                                 Py_ssize_t pos, Py_ssize_t base_position, bint verify_crc,
                                 bint semantic=True):
    """Bounds, magic and length of the batch at `pos`; with `semantic`, also
    the CRC (when asked), codec, counts and producer fields."""
    cdef Py_ssize_t remaining = n - pos
    if pos < 0 or remaining < HEADER_SIZE:
        raise CorruptRecordError(
            f"truncated record batch: {max(remaining, 0)} bytes left, a batch needs at least {HEADER_SIZE}",
            base_position + pos)
    cdef int8_t magic = <int8_t>p[pos + 16]
    if magic != 2:
        raise CorruptRecordError(f"record batch has magic {magic}, expected 2", base_position + pos + 16)
    cdef int32_t length = read_be32(p + pos + 8)
    if length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(
            f"record batch length {length} is below the minimum {MIN_BATCH_LENGTH}", base_position + pos + 8)
    if <int64_t>length + LOG_OVERHEAD > remaining:
        raise CorruptRecordError(
            f"record batch of {length + LOG_OVERHEAD} bytes runs past the end of the buffer ({remaining} bytes left)",
            base_position + pos + 8)
    cdef BatchHeader h = _read_header(p + pos, base_position + pos)
    if not semantic:
        return h
    if verify_crc:
        actual = _crc_of(obj, pos + CRC_START, pos + LOG_OVERHEAD + length)
        if actual != h.crc:
            raise CorruptRecordError(
                f"record batch CRC mismatch: stored {h.crc}, computed {actual}", base_position + pos + 17)
    if (h.attributes & CODEC_MASK) > 4:
        raise UnsupportedCompressionError(
            f"unknown compression codec {h.attributes & CODEC_MASK}", base_position + pos + 21)
    if h.record_count < 0:
        raise InvalidRecordError(f"negative record count {h.record_count}", base_position + pos + 57)
    if h.last_offset_delta < 0:
        raise InvalidRecordError(f"negative last offset delta {h.last_offset_delta}", base_position + pos + 23)
    if (h.attributes & CODEC_MASK) == 0 and h.record_count > (length - MIN_BATCH_LENGTH) // MIN_RECORD_SIZE:
        raise CorruptRecordError(
            f"record count {h.record_count} cannot fit in {length - MIN_BATCH_LENGTH} bytes of records",
            base_position + pos + 57)
    if (h.attributes & TRANSACTIONAL_FLAG) and h.producer_id < 0:
        raise InvalidRecordError("transactional batch without a producer id", base_position + pos + 43)
    return h


def read_header(buf, Py_ssize_t pos=0):
    """Decode the header of the v2 batch at `pos`; only its framing (bounds, magic, length) is checked."""
    cdef _Buffer b = _Buffer(buf)
    return _checked_header(buf, <const unsigned char*>b.buf.buf, b.buf.len, pos, 0, False, False)


def validate_batch(buf, Py_ssize_t pos=0, *, bint client=False, int64_t max_batch_size=-1,
                   bint verify_crc=True, bint deep=False):
    """Check the v2 batch at `pos` without allocating per record; return its header.

    Always: bounds, magic, length, CRC, codec, counts. `client=True` adds the
    stateless batch rules Kafka's LogValidator applies to produce requests:
    count > 0 and equal to lastOffsetDelta + 1, no control batches, a base
    sequence for producer ids, no LOG_APPEND_TIME (INVALID_TIMESTAMP). `max_batch_size` is
    max.message.bytes. `deep=True` also walks the records of an uncompressed
    batch (varint framing, offset deltas, header framing).
    """
    cdef _Buffer b = _Buffer(buf)
    cdef const unsigned char* p = <const unsigned char*>b.buf.buf
    cdef BatchHeader h = _checked_header(buf, p, b.buf.len, pos, 0, verify_crc)
    if max_batch_size >= 0 and h.batch_length + LOG_OVERHEAD > max_batch_size:
        raise RecordTooLargeError(
            f"record batch of {h.batch_length + LOG_OVERHEAD} bytes exceeds the maximum {max_batch_size}", pos)
    if client:
        _check_client_rules(h, pos)
    if deep and (h.attributes & CODEC_MASK) == 0:
        _walk_records(p + pos, HEADER_SIZE, h.batch_length + LOG_OVERHEAD, h, pos)
    return h


cdef _check_client_rules(BatchHeader h, Py_ssize_t pos):
    # Kafka does not insist on base offset 0: it overwrites it in place.
    if h.record_count <= 0:
        raise InvalidRecordError("produced batch has no records", pos + 57)
    if <int64_t>h.last_offset_delta + 1 != h.record_count:
        raise InvalidRecordError(
            f"inconsistent batch offset range: lastOffsetDelta {h.last_offset_delta} "
            f"with {h.record_count} records", pos + 23)
    if h.attributes & CONTROL_FLAG:
        raise InvalidRecordError("clients are not allowed to write control batches", pos + 21)
    if h.producer_id >= 0 and h.base_sequence < 0:
        raise InvalidRecordError(
            f"batch with producer id {h.producer_id} has invalid base sequence {h.base_sequence}", pos + 53)
    if h.attributes & TIMESTAMP_TYPE_MASK:
        raise InvalidTimestampError("producers may not set the timestamp type to LOG_APPEND_TIME", pos + 21)


def validate_records(buf, *, bint client=False, int64_t max_batch_size=-1, bint verify_crc=True):
    """Validate every v2 batch of a records field back to back; return their headers.

    The field must end exactly at a batch boundary.
    """
    cdef _Buffer b = _Buffer(buf)
    cdef const unsigned char* p = <const unsigned char*>b.buf.buf
    cdef Py_ssize_t n = b.buf.len
    cdef Py_ssize_t pos = 0
    cdef BatchHeader h
    headers = []
    while pos < n:
        h = _checked_header(buf, p, n, pos, 0, verify_crc)
        if max_batch_size >= 0 and h.batch_length + LOG_OVERHEAD > max_batch_size:
            raise RecordTooLargeError(
                f"record batch of {h.batch_length + LOG_OVERHEAD} bytes exceeds the maximum {max_batch_size}", pos)
        if client:
            _check_client_rules(h, pos)
        headers.append(h)
        pos += h.batch_length + LOG_OVERHEAD
    return headers


# ---------------------------------------------------------------------------
# Record parsing shared by every decoder


cdef extern from "records.h":
    ctypedef struct RawRecord "ls_record":
        int64_t timestamp_delta
        int32_t offset_delta
        Py_ssize_t key_pos
        int32_t key_len
        Py_ssize_t value_pos
        int32_t value_len
        int32_t header_count
        Py_ssize_t headers_pos
        Py_ssize_t end

    ctypedef struct ParseError "ls_error":
        const char* message
        Py_ssize_t position

    int _parse_record "ls_parse_record" (const unsigned char* p, Py_ssize_t pos, Py_ssize_t end,
                                         RawRecord* r, ParseError* e) noexcept nogil

    ctypedef struct Growable "ls_growable":
        char* data
        Py_ssize_t size
        Py_ssize_t capacity

    int _grow "ls_grow" (Growable* g, Py_ssize_t want) noexcept nogil

    ctypedef struct ColumnarAppend "ls_columnar":
        int64_t base_offset, base_ts, max_ts, start_offset, stop
        int append_time, bounded
        int32_t count, last_delta
        int64_t* offsets
        int64_t* timestamps
        int32_t* key_offsets
        int32_t* value_offsets
        Growable* key_data
        char* value_data
        unsigned char* key_valid
        unsigned char* value_valid
        Py_ssize_t n, key_size, value_size, key_nulls, value_nulls

    int _columnar_append "ls_columnar_append" (ColumnarAppend* c, const unsigned char* p,
                                               Py_ssize_t pos, Py_ssize_t end, ParseError* e) noexcept nogil


cdef inline int _fail(ParseError* e, const char* message, Py_ssize_t position) noexcept nogil:
    e.message = message
    e.position = position
    return -1


cdef inline int _check_delta(RawRecord* r, int32_t* prev, int32_t last_delta,
                             Py_ssize_t pos, ParseError* e) noexcept nogil:
    if r.offset_delta <= prev[0] or r.offset_delta > last_delta:
        return _fail(e, "record offset delta is out of order or past lastOffsetDelta", pos)
    prev[0] = r.offset_delta
    return 0


cdef _raise_parse(ParseError* e, Py_ssize_t base, bint compressed, Py_ssize_t batch_pos):
    if compressed:
        raise InvalidRecordError(
            f"{e.message.decode()} (at byte {e.position} of the decompressed records)", batch_pos)
    raise InvalidRecordError(e.message.decode(), base + e.position)


cdef _walk_records(const unsigned char* p, Py_ssize_t start, Py_ssize_t end,
                   BatchHeader h, Py_ssize_t base):
    cdef RawRecord r
    cdef ParseError e
    cdef int32_t prev = -1
    cdef int32_t i
    cdef int32_t count = h.record_count
    cdef int32_t last = h.last_offset_delta
    cdef int rc = 0
    cdef Py_ssize_t pos = start
    with nogil:
        for i in range(count):
            rc = _parse_record(p, pos, end, &r, &e)
            if rc == 0:
                rc = _check_delta(&r, &prev, last, pos, &e)
            if rc != 0:
                break
            pos = r.end
        if rc == 0 and pos != end:
            rc = _fail(&e, "bytes remain after the last record", pos)
    if rc != 0:
        _raise_parse(&e, base, False, base)


cdef _Buffer _records_section(object buf, BatchHeader h, Py_ssize_t pos, Py_ssize_t limit,
                              Py_ssize_t* start, Py_ssize_t* end):
    """The decompressed records of the batch at `pos` (None when uncompressed:
    they are buf[start:end])."""
    cdef int codec = h.attributes & CODEC_MASK
    cdef Py_ssize_t stop = pos + h.batch_length + LOG_OVERHEAD
    if codec == 0:
        start[0] = pos + HEADER_SIZE
        end[0] = stop
        return None
    cdef _Buffer raw = _Buffer(decompress(codec, memoryview(buf)[pos + HEADER_SIZE:stop], limit,
                                          pos + HEADER_SIZE))
    start[0] = 0
    end[0] = raw.buf.len
    if h.record_count > end[0] // MIN_RECORD_SIZE:
        raise CorruptRecordError(
            f"record count {h.record_count} cannot fit in {end[0]} decompressed bytes", pos + 57)
    return raw


# ---------------------------------------------------------------------------
# Decoding to Python objects


@cython.final
@cython.freelist(1024)
cdef class Record:
    """One record: offset, timestamp (ms), key, value, headers ((str, bytes|None), ...)."""
    cdef readonly int64_t offset
    cdef readonly int64_t timestamp
    cdef readonly object key
    cdef readonly object value
    cdef readonly tuple headers

    def __init__(self, int64_t offset, int64_t timestamp, key, value, headers=()):
        self.offset = offset
        self.timestamp = timestamp
        self.key = key
        self.value = value
        self.headers = tuple(headers)

    def __repr__(self):
        return (f"Record(offset={self.offset}, timestamp={self.timestamp}, key={self.key!r}, "
                f"value={self.value!r}, headers={self.headers!r})")

    def __eq__(self, other):
        if not isinstance(other, Record):
            return NotImplemented
        cdef Record o = <Record>other
        return (self.offset == o.offset and self.timestamp == o.timestamp and self.key == o.key
                and self.value == o.value and self.headers == o.headers)

    def __hash__(self):
        return hash((self.offset, self.timestamp, self.key, self.value, self.headers))


cdef inline object _bytes_or_none(const unsigned char* p, Py_ssize_t pos, int32_t n):
    if pos < 0:
        return None
    return PyBytes_FromStringAndSize(<const char*>p + pos, n)


cdef tuple _headers_of(const unsigned char* p, RawRecord* r):
    cdef tuple out = PyTuple_New(r.header_count)
    cdef Py_ssize_t pos = r.headers_pos
    cdef int32_t i
    cdef int32_t n
    for i in range(r.header_count):
        pos = read_varint(p, pos, r.end, &n)
        key = PyUnicode_DecodeUTF8(<const char*>p + pos, n, "replace")
        pos += n
        pos = read_varint(p, pos, r.end, &n)
        if n >= 0:
            value = PyBytes_FromStringAndSize(<const char*>p + pos, n)
            pos += n
        else:
            value = None
        pair = (key, value)
        Py_INCREF(pair)
        PyTuple_SET_ITEM(out, i, pair)
    return out


def decode_records(buf, Py_ssize_t pos=0, *, bint verify_crc=True,
                   Py_ssize_t max_decompressed=DEFAULT_MAX_DECOMPRESSED):
    """Decode the v2 batch at `pos` into a list of Record (control records included)."""
    cdef _Buffer b = _Buffer(buf)
    cdef const unsigned char* p = <const unsigned char*>b.buf.buf
    cdef BatchHeader h = _checked_header(buf, p, b.buf.len, pos, 0, verify_crc)
    cdef Py_ssize_t start, end
    cdef _Buffer owner = _records_section(buf, h, pos, max_decompressed, &start, &end)
    if owner is not None:
        p = <const unsigned char*>owner.buf.buf
    cdef int32_t count = h.record_count
    cdef int32_t last = h.last_offset_delta
    cdef int32_t prev = -1
    cdef int64_t base_offset = h.base_offset
    cdef int64_t base_ts = h.base_timestamp
    cdef bint append_time = h.attributes & TIMESTAMP_TYPE_MASK
    cdef RawRecord r
    cdef ParseError e
    cdef Record rec
    cdef list out = PyList_New(count)
    cdef int32_t i
    for i in range(count):
        if _parse_record(p, start, end, &r, &e) != 0 or _check_delta(&r, &prev, last, start, &e) != 0:
            _raise_parse(&e, 0, owner is not None, pos)
        rec = Record.__new__(Record)
        rec.offset = base_offset + r.offset_delta
        rec.timestamp = h.max_timestamp if append_time else base_ts + r.timestamp_delta
        rec.key = _bytes_or_none(p, r.key_pos, r.key_len)
        rec.value = _bytes_or_none(p, r.value_pos, r.value_len)
        rec.headers = _EMPTY_TUPLE if r.header_count == 0 else _headers_of(p, &r)
        Py_INCREF(rec)
        PyList_SET_ITEM(out, i, rec)
        start = r.end
    if start != end:
        e.message = "bytes remain after the last record"
        e.position = start
        _raise_parse(&e, 0, owner is not None, pos)
    return out


# ---------------------------------------------------------------------------
# Columnar decoding


@cython.final
cdef class NativeBuffer:
    """A malloc'd byte buffer exposed through the buffer protocol (zero-copy to Arrow)."""
    cdef char* data
    cdef Py_ssize_t size
    cdef Py_ssize_t shape[1]
    cdef Py_ssize_t strides[1]

    def __dealloc__(self):
        free(self.data)

    def __len__(self):
        return self.size

    def __getbuffer__(self, Py_buffer* view, int flags):
        self.shape[0] = self.size
        self.strides[0] = 1
        # Arrow refuses a NULL pointer even for an empty buffer.
        view.buf = self.data if self.data != NULL else _FORMAT_B
        view.obj = self
        view.len = self.size
        view.readonly = 1
        view.itemsize = 1
        view.format = _FORMAT_B if (flags & 0x0004) else NULL  # PyBUF_FORMAT
        view.ndim = 1
        view.shape = self.shape if (flags & 0x0008) else NULL  # PyBUF_ND
        view.strides = self.strides if (flags & 0x0010) == 0x0010 else NULL  # PyBUF_STRIDES
        view.suboffsets = NULL
        view.internal = NULL

    def __releasebuffer__(self, Py_buffer* view):
        pass

    def tobytes(self):
        """Copy the contents into a bytes object."""
        return PyBytes_FromStringAndSize(self.data, self.size)


cdef NativeBuffer _adopt(char* data, Py_ssize_t size):
    cdef NativeBuffer nb = NativeBuffer.__new__(NativeBuffer)
    nb.data = data
    nb.size = size
    return nb


cdef int _reserve(Growable* g, Py_ssize_t extra) except -1:
    if _grow(g, g.size + extra) != 0:
        raise MemoryError()
    return 0


@cython.final
cdef class Columns:
    """Arrow-ready columns of `count` records.

    `offsets` and `timestamps` are little-endian int64; `key_offsets` and
    `value_offsets` are count+1 little-endian int32 into `key_data` /
    `value_data`; `key_validity` / `value_validity` are Arrow validity bitmaps
    (bit set = not null), with `key_null_count` / `value_null_count`.
    """
    cdef readonly Py_ssize_t count
    cdef readonly object offsets
    cdef readonly object timestamps
    cdef readonly object key_offsets
    cdef readonly object key_data
    cdef readonly object key_validity
    cdef readonly Py_ssize_t key_null_count
    cdef readonly object value_offsets
    cdef readonly object value_data
    cdef readonly object value_validity
    cdef readonly Py_ssize_t value_null_count

    def to_arrow(self):
        """A pyarrow.RecordBatch (offset, timestamp, key, value) sharing these buffers."""
        import pyarrow as pa
        n = self.count
        buf = pa.py_buffer
        arrays = [
            pa.Array.from_buffers(pa.int64(), n, [None, buf(self.offsets)]),
            pa.Array.from_buffers(pa.int64(), n, [None, buf(self.timestamps)]),
            pa.Array.from_buffers(pa.binary(), n, [buf(self.key_validity), buf(self.key_offsets),
                                                   buf(self.key_data)], self.key_null_count),
            pa.Array.from_buffers(pa.binary(), n, [buf(self.value_validity), buf(self.value_offsets),
                                                   buf(self.value_data)], self.value_null_count),
        ]
        return pa.RecordBatch.from_arrays(arrays, names=["offset", "timestamp", "key", "value"])


cdef int _clear_bits_from(Growable* g, Py_ssize_t first, Py_ssize_t stop) except -1:
    """Make room for `stop` bits and zero bits first..stop-1; `size` stays the committed bytes."""
    cdef Py_ssize_t need = (stop + 7) // 8
    if _grow(g, need) != 0:
        raise MemoryError()
    if first & 7:
        g.data[first >> 3] = <char>(g.data[first >> 3] & ((1 << (first & 7)) - 1))
        first = (first + 7) & ~7
    if first // 8 < need:
        memset(g.data + first // 8, 0, need - first // 8)
    return 0


cdef inline void _set_bit(char* bitmap, Py_ssize_t i) noexcept nogil:
    bitmap[i >> 3] = <char>(bitmap[i >> 3] | (1 << (i & 7)))


@cython.final
cdef class ColumnarBuilder:
    """Decodes the records of many v2 batches into one set of column buffers.

    Owns its growing buffers until `finish()` hands them to a Columns object.
    Not thread-safe; one builder per task. No Python object is created per record.
    """
    cdef Growable offsets, timestamps, key_offsets, key_data, key_valid
    cdef Growable value_offsets, value_data, value_valid
    cdef readonly Py_ssize_t count
    cdef Py_ssize_t key_nulls, value_nulls

    def __cinit__(self):
        memset(&self.offsets, 0, sizeof(Growable))
        memset(&self.timestamps, 0, sizeof(Growable))
        memset(&self.key_offsets, 0, sizeof(Growable))
        memset(&self.key_data, 0, sizeof(Growable))
        memset(&self.key_valid, 0, sizeof(Growable))
        memset(&self.value_offsets, 0, sizeof(Growable))
        memset(&self.value_data, 0, sizeof(Growable))
        memset(&self.value_valid, 0, sizeof(Growable))
        self._start()

    cdef _start(self):
        self.count = 0
        self.key_nulls = 0
        self.value_nulls = 0
        _reserve(&self.key_offsets, 4)
        _reserve(&self.value_offsets, 4)
        (<int32_t*>self.key_offsets.data)[0] = 0
        (<int32_t*>self.value_offsets.data)[0] = 0
        self.key_offsets.size = 4
        self.value_offsets.size = 4

    def __dealloc__(self):
        free(self.offsets.data)
        free(self.timestamps.data)
        free(self.key_offsets.data)
        free(self.key_data.data)
        free(self.key_valid.data)
        free(self.value_offsets.data)
        free(self.value_data.data)
        free(self.value_valid.data)

    def add_batch(self, buf, Py_ssize_t pos=0, *, int64_t start_offset=-9223372036854775807 - 1,
                  end_offset=None, bint skip_control=True,
                  bint verify_crc=True, Py_ssize_t max_decompressed=DEFAULT_MAX_DECOMPRESSED):
        """Append the records of the v2 batch at `pos` with start_offset <= offset < end_offset.

        end_offset None means no upper bound. Returns the header. Control
        batches are skipped unless skip_control is false.
        """
        cdef bint bounded = end_offset is not None
        cdef int64_t stop = end_offset if bounded else 0
        cdef _Buffer b = _Buffer(buf)
        cdef const unsigned char* p = <const unsigned char*>b.buf.buf
        cdef BatchHeader h = _checked_header(buf, p, b.buf.len, pos, 0, verify_crc)
        if skip_control and (h.attributes & CONTROL_FLAG):
            return h
        if h.base_offset + h.last_offset_delta < start_offset or (bounded and h.base_offset >= stop):
            return h
        cdef Py_ssize_t start, end
        cdef _Buffer owner = _records_section(buf, h, pos, max_decompressed, &start, &end)
        if owner is not None:
            p = <const unsigned char*>owner.buf.buf
        cdef int32_t count = h.record_count
        cdef Py_ssize_t total = self.count + count
        # Bounded by the records section: count <= section / MIN_RECORD_SIZE.
        _reserve(&self.offsets, 8 * <Py_ssize_t>count)
        _reserve(&self.timestamps, 8 * <Py_ssize_t>count)
        _reserve(&self.key_offsets, 4 * <Py_ssize_t>count)
        _reserve(&self.value_offsets, 4 * <Py_ssize_t>count)
        # Values get the records section as an upper bound up front; keys,
        # usually small, grow as they come. Reserving the bound twice made
        # every call fault in twice the memory it used.
        _reserve(&self.value_data, end - start)
        # Bits past the committed rows may be left over from a rejected batch.
        _clear_bits_from(&self.key_valid, self.count, total)
        _clear_bits_from(&self.value_valid, self.count, total)
        cdef ColumnarAppend c
        cdef ParseError e
        cdef int rc
        c.base_offset = h.base_offset
        c.base_ts = h.base_timestamp
        c.max_ts = h.max_timestamp
        c.start_offset = start_offset
        c.stop = stop
        c.append_time = 1 if h.attributes & TIMESTAMP_TYPE_MASK else 0
        c.bounded = bounded
        c.count = h.record_count
        c.last_delta = h.last_offset_delta
        c.offsets = <int64_t*>self.offsets.data
        c.timestamps = <int64_t*>self.timestamps.data
        c.key_offsets = <int32_t*>self.key_offsets.data
        c.value_offsets = <int32_t*>self.value_offsets.data
        c.key_data = &self.key_data
        c.value_data = self.value_data.data
        c.key_valid = <unsigned char*>self.key_valid.data
        c.value_valid = <unsigned char*>self.value_valid.data
        c.n = self.count
        c.key_size = self.key_data.size
        c.value_size = self.value_data.size
        c.key_nulls = self.key_nulls
        c.value_nulls = self.value_nulls
        with nogil:
            rc = _columnar_append(&c, p, start, end, &e)
        if rc == -2:
            raise MemoryError()
        if rc != 0:
            # Nothing of a corrupt batch is kept: sizes are only committed below.
            _raise_parse(&e, 0, owner is not None, pos)
        cdef Py_ssize_t n = c.n
        cdef Py_ssize_t key_size = c.key_size
        cdef Py_ssize_t value_size = c.value_size
        if key_size > 2147483647 or value_size > 2147483647:
            raise OverflowError("column data exceeds 2 GiB; finish() more often")
        self.count = n
        self.key_data.size = key_size
        self.value_data.size = value_size
        self.key_nulls = c.key_nulls
        self.value_nulls = c.value_nulls
        self.offsets.size = 8 * n
        self.timestamps.size = 8 * n
        self.key_offsets.size = 4 * (n + 1)
        self.value_offsets.size = 4 * (n + 1)
        return h

    def finish(self):
        """Hand the buffers to a Columns object and start empty."""
        cdef Columns c = Columns.__new__(Columns)
        c.count = self.count
        self.key_valid.size = (self.count + 7) // 8
        self.value_valid.size = (self.count + 7) // 8
        c.offsets = self._take(&self.offsets)
        c.timestamps = self._take(&self.timestamps)
        c.key_offsets = self._take(&self.key_offsets)
        c.key_data = self._take(&self.key_data)
        c.key_validity = self._take(&self.key_valid)
        c.key_null_count = self.key_nulls
        c.value_offsets = self._take(&self.value_offsets)
        c.value_data = self._take(&self.value_data)
        c.value_validity = self._take(&self.value_valid)
        c.value_null_count = self.value_nulls
        self._start()
        return c

    cdef NativeBuffer _take(self, Growable* g):
        cdef NativeBuffer nb = _adopt(g.data, g.size)
        g.data = NULL
        g.size = 0
        g.capacity = 0
        return nb


def decode_columnar(buf, Py_ssize_t pos=0, *, bint verify_crc=True,
                    Py_ssize_t max_decompressed=DEFAULT_MAX_DECOMPRESSED):
    """Decode the v2 batch at `pos` into Columns (control records included)."""
    cdef ColumnarBuilder builder = ColumnarBuilder()
    builder.add_batch(buf, pos, skip_control=False, verify_crc=verify_crc,
                      max_decompressed=max_decompressed)
    return builder.finish()


# ---------------------------------------------------------------------------
# Encoding


cdef struct Slot:
    const char* key
    Py_ssize_t key_len       # -1: null
    const char* value
    Py_ssize_t value_len     # -1: null
    int64_t timestamp
    Py_ssize_t body
    Py_ssize_t first_header
    Py_ssize_t header_count


cdef struct HeaderSlot:
    const char* key
    Py_ssize_t key_len
    const char* value
    Py_ssize_t value_len


cdef inline const char* _bytes_ptr(object obj, Py_ssize_t* n, list keep, str what) except? NULL:
    # bytes are used in place; other buffer types are copied once to bytes.
    if obj is None:
        n[0] = -1
        return NULL
    if type(obj) is not bytes:
        if isinstance(obj, str):
            raise TypeError(f"{what} must be bytes or None, not str")
        obj = bytes(obj)
        keep.append(obj)
    n[0] = len(<bytes>obj)
    if n[0] > 2147483647:
        raise ValueError(f"{what} is longer than 2 GiB")
    return PyBytes_AS_STRING(obj)


cdef inline const char* _header_key_ptr(object key, Py_ssize_t* n, list keep) except NULL:
    if isinstance(key, str):
        return PyUnicode_AsUTF8AndSize(key, n)
    cdef const char* p = _bytes_ptr(key, n, keep, "header key")
    if p == NULL:
        raise TypeError("header key must not be None")
    return p


cdef inline Py_ssize_t _body_size(Slot* s, int32_t offset_delta, int64_t base_ts,
                                  HeaderSlot* hs) noexcept nogil:
    cdef Py_ssize_t size = 1 + varlong_size(s.timestamp - base_ts) + varint_size(offset_delta)
    cdef Py_ssize_t j
    cdef HeaderSlot* h
    if s.key_len < 0:
        size += 1
    else:
        size += varint_size(<int32_t>s.key_len) + s.key_len
    if s.value_len < 0:
        size += 1
    else:
        size += varint_size(<int32_t>s.value_len) + s.value_len
    size += varint_size(<int32_t>s.header_count)
    for j in range(s.first_header, s.first_header + s.header_count):
        h = &hs[j]
        size += varint_size(<int32_t>h.key_len) + h.key_len
        if h.value_len < 0:
            size += 1
        else:
            size += varint_size(<int32_t>h.value_len) + h.value_len
    return size


cdef inline unsigned char* _write_record(unsigned char* w, Slot* s, int32_t offset_delta,
                                         int64_t base_ts, HeaderSlot* hs) noexcept nogil:
    cdef Py_ssize_t j
    cdef HeaderSlot* h
    w = write_varint(w, <int32_t>s.body)
    w[0] = 0
    w += 1
    w = write_varlong(w, s.timestamp - base_ts)
    w = write_varint(w, offset_delta)
    if s.key_len < 0:
        w = write_varint(w, -1)
    else:
        w = write_varint(w, <int32_t>s.key_len)
        memcpy(w, s.key, s.key_len)
        w += s.key_len
    if s.value_len < 0:
        w = write_varint(w, -1)
    else:
        w = write_varint(w, <int32_t>s.value_len)
        memcpy(w, s.value, s.value_len)
        w += s.value_len
    w = write_varint(w, <int32_t>s.header_count)
    for j in range(s.first_header, s.first_header + s.header_count):
        h = &hs[j]
        w = write_varint(w, <int32_t>h.key_len)
        memcpy(w, h.key, h.key_len)
        w += h.key_len
        if h.value_len < 0:
            w = write_varint(w, -1)
        else:
            w = write_varint(w, <int32_t>h.value_len)
            memcpy(w, h.value, h.value_len)
            w += h.value_len
    return w


cdef void _write_header(unsigned char* p, int64_t base_offset, int32_t batch_length,
                        int32_t leader_epoch, int16_t attributes, int32_t last_offset_delta,
                        int64_t base_ts, int64_t max_ts, int64_t producer_id,
                        int16_t producer_epoch, int32_t base_sequence, int32_t count) noexcept nogil:
    write_be64(p, base_offset)
    write_be32(p + 8, batch_length)
    write_be32(p + 12, leader_epoch)
    p[16] = 2
    write_be16(p + 21, attributes)
    write_be32(p + 23, last_offset_delta)
    write_be64(p + 27, base_ts)
    write_be64(p + 35, max_ts)
    write_be64(p + 43, producer_id)
    write_be16(p + 51, producer_epoch)
    write_be32(p + 53, base_sequence)
    write_be32(p + 57, count)


cdef bytes _finish_batch(const unsigned char* records, Py_ssize_t records_len, int codec, object level,
                         int64_t base_offset, int32_t leader_epoch, int16_t attributes,
                         int32_t last_offset_delta, int64_t base_ts, int64_t max_ts,
                         int64_t producer_id, int16_t producer_epoch, int32_t base_sequence,
                         int32_t count, bytes out):
    """Compress if asked, then write the header and CRC. `out` may already hold
    the uncompressed records at position 61."""
    if codec != 0:
        # A read-only view of the encoded records: the compressor reads them in place.
        packed = compress(codec, PyMemoryView_FromMemory(<char*>records, records_len, PyBUF_READ), level)
        records_len = len(packed)
        out = PyBytes_FromStringAndSize(NULL, HEADER_SIZE + records_len)
        memcpy(PyBytes_AS_STRING(out) + HEADER_SIZE, PyBytes_AS_STRING(packed), records_len)
    if HEADER_SIZE + records_len - LOG_OVERHEAD > 2147483647:
        raise RecordTooLargeError("record batch would exceed 2 GiB")
    cdef unsigned char* p = <unsigned char*>PyBytes_AS_STRING(out)
    _write_header(p, base_offset, <int32_t>(HEADER_SIZE + records_len - LOG_OVERHEAD), leader_epoch,
                  attributes | codec, last_offset_delta, base_ts, max_ts, producer_id,
                  producer_epoch, base_sequence, count)
    write_be32(p + 17, <int32_t>_crc_of(out, CRC_START, HEADER_SIZE + records_len))
    return out


cdef int16_t _attributes(bint transactional, bint control, bint append_time, int codec) except -1:
    if codec < 0 or codec > 4:
        raise UnsupportedCompressionError(f"unknown compression codec {codec}")
    cdef int16_t a = 0
    if transactional:
        a |= TRANSACTIONAL_FLAG
    if control:
        a |= CONTROL_FLAG
    if append_time:
        a |= TIMESTAMP_TYPE_MASK
    return a


cdef inline int64_t _now_ms():
    return <int64_t>(time.time() * 1000)


def encode_batch(keys, values, headers=None, timestamps=None, *, int64_t base_offset=0,
                 int compression=0, compression_level=None, int64_t producer_id=-1,
                 int16_t producer_epoch=-1, int32_t base_sequence=-1, bint transactional=False,
                 bint control=False, int32_t partition_leader_epoch=-1, log_append_time=None):
    """Build one v2 batch from parallel sequences in a single call (no Python call per record).

    keys/values: sequences of bytes or None. headers: None or one sequence of
    (str|bytes, bytes|None) pairs per record. timestamps: None (now), one int
    for all, or one int per record, in ms. log_append_time: an int sets
    LOG_APPEND_TIME with that maxTimestamp.
    """
    key_seq = keys if type(keys) in (list, tuple) else list(keys)
    value_seq = values if type(values) in (list, tuple) else list(values)
    cdef Py_ssize_t n = len(key_seq)
    if len(value_seq) != n:
        raise ValueError(f"{n} keys but {len(value_seq)} values")
    if n > 2147483647:
        raise ValueError("too many records for one batch")
    header_seq = None
    if headers is not None:
        header_seq = headers if type(headers) in (list, tuple) else list(headers)
        if len(header_seq) != n:
            raise ValueError(f"{n} records but {len(header_seq)} header lists")
    cdef int16_t attributes = _attributes(transactional, control, log_append_time is not None, compression)
    cdef list keep = []
    cdef Slot* slots = <Slot*>malloc((n if n else 1) * sizeof(Slot))
    cdef HeaderSlot* hs = NULL
    cdef Py_ssize_t header_total = 0
    cdef Py_ssize_t header_cap = 0
    cdef Py_ssize_t i, j
    cdef Py_ssize_t total = 0
    cdef int64_t base_ts, max_ts, ts
    cdef bint same_ts
    cdef Slot* s
    cdef bytes out
    cdef unsigned char* w
    cdef unsigned char* records = NULL
    cdef HeaderSlot* grown
    if slots == NULL:
        raise MemoryError()
    try:
        same_ts = timestamps is None or isinstance(timestamps, int)
        ts = _now_ms() if timestamps is None else (timestamps if same_ts else 0)
        if not same_ts and len(timestamps) != n:
            raise ValueError(f"{n} records but {len(timestamps)} timestamps")
        for i in range(n):
            s = &slots[i]
            s.key = _bytes_ptr(key_seq[i], &s.key_len, keep, "key")
            s.value = _bytes_ptr(value_seq[i], &s.value_len, keep, "value")
            s.timestamp = ts if same_ts else timestamps[i]
            s.first_header = header_total
            s.header_count = 0
            if header_seq is not None and header_seq[i]:
                record_headers = header_seq[i]
                s.header_count = len(record_headers)
                if header_total + s.header_count > header_cap:
                    header_cap = max(2 * header_cap, header_total + s.header_count, 16)
                    grown = <HeaderSlot*>realloc(hs, header_cap * sizeof(HeaderSlot))
                    if grown == NULL:
                        raise MemoryError()
                    hs = grown
                for j, (hkey, hvalue) in enumerate(record_headers):
                    hs[header_total + j].key = _header_key_ptr(hkey, &hs[header_total + j].key_len, keep)
                    hs[header_total + j].value = _bytes_ptr(
                        hvalue, &hs[header_total + j].value_len, keep, "header value")
                header_total += s.header_count
        base_ts = slots[0].timestamp if n else NO_TIMESTAMP
        max_ts = NO_TIMESTAMP
        with nogil:
            for i in range(n):
                s = &slots[i]
                if s.timestamp > max_ts:
                    max_ts = s.timestamp
                s.body = _body_size(s, <int32_t>i, base_ts, hs)
                total += varint_size(<int32_t>s.body) + s.body
        if log_append_time is not None:
            max_ts = log_append_time
        if compression == 0:
            out = PyBytes_FromStringAndSize(NULL, HEADER_SIZE + total)
            records = <unsigned char*>PyBytes_AS_STRING(out) + HEADER_SIZE
        else:
            out = None
            records = <unsigned char*>malloc(total if total else 1)
            if records == NULL:
                raise MemoryError()
        w = records
        with nogil:
            for i in range(n):
                w = _write_record(w, &slots[i], <int32_t>i, base_ts, hs)
        return _finish_batch(records, total, compression, compression_level, base_offset,
                             partition_leader_epoch, attributes, <int32_t>(n - 1 if n else 0),
                             base_ts, max_ts, producer_id, producer_epoch, base_sequence,
                             <int32_t>n, out)
    finally:
        free(slots)
        free(hs)
        if compression != 0:
            free(records)


CONTROL_ABORT = 0
CONTROL_COMMIT = 1


def encode_control_batch(bint commit, int32_t coordinator_epoch, int64_t producer_id,
                         int16_t producer_epoch, int64_t timestamp, *, int64_t base_offset=0,
                         int32_t partition_leader_epoch=-1):
    """Build a COMMIT/ABORT transaction marker batch exactly as Kafka writes it (78 bytes)."""
    key = b"\x00\x00\x00\x01" if commit else b"\x00\x00\x00\x00"
    cdef unsigned char value[6]
    write_be16(value, 0)
    write_be32(value + 2, coordinator_epoch)
    return encode_batch([key], [PyBytes_FromStringAndSize(<char*>value, 6)], None, timestamp,
                        base_offset=base_offset, producer_id=producer_id,
                        producer_epoch=producer_epoch, base_sequence=-1, transactional=True,
                        control=True, partition_leader_epoch=partition_leader_epoch)


@cython.final
cdef class BatchBuilder:
    """Builds one v2 batch a record at a time (Kafka's MemoryRecordsBuilder shape).

    Owns a growing buffer of encoded records; `build()` compresses, writes the
    header and CRC and may be called once. Not thread-safe.
    """
    cdef unsigned char* buf
    cdef Py_ssize_t size
    cdef Py_ssize_t capacity
    cdef int32_t count
    cdef int64_t base_ts
    cdef int64_t max_ts
    cdef readonly int64_t base_offset
    cdef int codec
    cdef object level
    cdef int64_t producer_id
    cdef int16_t producer_epoch
    cdef int32_t base_sequence
    cdef int32_t leader_epoch
    cdef int16_t attrs
    cdef object log_append_time
    cdef list keep
    cdef bint built

    def __cinit__(self, *, int64_t base_offset=0, int compression=0, compression_level=None,
                  int64_t producer_id=-1, int16_t producer_epoch=-1, int32_t base_sequence=-1,
                  bint transactional=False, int32_t partition_leader_epoch=-1,
                  log_append_time=None, Py_ssize_t initial_capacity=16384):
        self.attrs = _attributes(transactional, False, log_append_time is not None, compression)
        self.codec = compression
        self.level = compression_level
        self.base_offset = base_offset
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.leader_epoch = partition_leader_epoch
        self.log_append_time = log_append_time
        self.base_ts = NO_TIMESTAMP
        self.max_ts = NO_TIMESTAMP
        self.keep = []
        self.capacity = max(initial_capacity, 64)
        self.buf = <unsigned char*>malloc(self.capacity)
        if self.buf == NULL:
            raise MemoryError()

    def __dealloc__(self):
        free(self.buf)

    def __len__(self):
        return self.count

    @property
    def size_in_bytes(self):
        """Bytes of the batch so far if it were built uncompressed."""
        return HEADER_SIZE + self.size

    def append(self, timestamp, key, value, headers=None):
        """Add one record; timestamp in ms (None: now)."""
        cdef Slot s
        cdef HeaderSlot local[8]
        cdef HeaderSlot* hs = local
        cdef Py_ssize_t j
        cdef list keep = self.keep
        if self.built:
            raise RuntimeError("append after build()")
        if self.count == 2147483647:
            raise OverflowError("too many records for one batch")
        s.timestamp = _now_ms() if timestamp is None else timestamp
        s.key = _bytes_ptr(key, &s.key_len, keep, "key")
        s.value = _bytes_ptr(value, &s.value_len, keep, "value")
        s.first_header = 0
        s.header_count = 0 if not headers else len(headers)
        if s.header_count > 8:
            hs = <HeaderSlot*>malloc(s.header_count * sizeof(HeaderSlot))
            if hs == NULL:
                raise MemoryError()
        try:
            if s.header_count:
                for j, (hkey, hvalue) in enumerate(headers):
                    hs[j].key = _header_key_ptr(hkey, &hs[j].key_len, keep)
                    hs[j].value = _bytes_ptr(hvalue, &hs[j].value_len, keep, "header value")
            if self.count == 0:
                self.base_ts = s.timestamp
            s.body = _body_size(&s, self.count, self.base_ts, hs)
            self._ensure(varint_size(<int32_t>s.body) + s.body)
            self.size = _write_record(self.buf + self.size, &s, self.count, self.base_ts, hs) - self.buf
        finally:
            if hs != local:
                free(hs)
        if s.timestamp > self.max_ts:
            self.max_ts = s.timestamp
        self.count += 1
        # Bytes objects that were converted are copied already; drop them.
        if keep:
            del keep[:]

    cdef int _ensure(self, Py_ssize_t extra) except -1:
        cdef Py_ssize_t cap = self.capacity
        cdef unsigned char* grown
        if self.size + extra <= cap:
            return 0
        while cap < self.size + extra:
            cap *= 2
        grown = <unsigned char*>realloc(self.buf, cap)
        if grown == NULL:
            raise MemoryError()
        self.buf = grown
        self.capacity = cap
        return 0

    def build(self):
        """Return the finished batch as bytes."""
        if self.built:
            raise RuntimeError("build() called twice")
        self.built = True
        cdef bytes out = None
        if self.codec == 0:
            out = PyBytes_FromStringAndSize(NULL, HEADER_SIZE + self.size)
            memcpy(PyBytes_AS_STRING(out) + HEADER_SIZE, self.buf, self.size)
        max_ts = self.max_ts if self.log_append_time is None else self.log_append_time
        return _finish_batch(self.buf, self.size, self.codec, self.level, self.base_offset,
                             self.leader_epoch, self.attrs,
                             self.count - 1 if self.count else 0, self.base_ts, max_ts,
                             self.producer_id, self.producer_epoch, self.base_sequence,
                             self.count, out)


# ---------------------------------------------------------------------------
# Varints for callers outside the hot loops (tests, internal-topic schemas)


def encode_varint(int32_t value):
    """Zigzag varint bytes of an int32, shortest form."""
    cdef unsigned char out[5]
    return PyBytes_FromStringAndSize(<char*>out, write_varint(out, value) - out)


def encode_varlong(int64_t value):
    """Zigzag varlong bytes of an int64, shortest form."""
    cdef unsigned char out[10]
    return PyBytes_FromStringAndSize(<char*>out, write_varlong(out, value) - out)


def encode_unsigned_varint(uint64_t value):
    """Unsigned LEB128 bytes, shortest form."""
    cdef unsigned char out[10]
    return PyBytes_FromStringAndSize(<char*>out, write_uvarint(out, value) - out)


def decode_varint(buf, Py_ssize_t pos=0):
    """(value, next position) of the zigzag varint at `pos`."""
    cdef _Buffer b = _Buffer(buf)
    cdef int32_t value
    cdef Py_ssize_t end = read_varint(<const unsigned char*>b.buf.buf, pos, b.buf.len, &value) if pos >= 0 else VARINT_TRUNCATED
    if end == VARINT_TOO_LONG:
        raise CorruptRecordError("varint is longer than 5 bytes", pos)
    if end < 0:
        raise CorruptRecordError("varint is truncated", pos)
    return value, end


def decode_varlong(buf, Py_ssize_t pos=0):
    """(value, next position) of the zigzag varlong at `pos`."""
    cdef _Buffer b = _Buffer(buf)
    cdef int64_t value
    cdef Py_ssize_t end = read_varlong(<const unsigned char*>b.buf.buf, pos, b.buf.len, &value) if pos >= 0 else VARINT_TRUNCATED
    if end == VARINT_TOO_LONG:
        raise CorruptRecordError("varlong is longer than 10 bytes", pos)
    if end < 0:
        raise CorruptRecordError("varlong is truncated", pos)
    return value, end


def decode_unsigned_varint(buf, Py_ssize_t pos=0):
    """(value, next position) of the unsigned LEB128 varint (at most 10 bytes) at `pos`."""
    cdef _Buffer b = _Buffer(buf)
    cdef const unsigned char* p = <const unsigned char*>b.buf.buf
    cdef uint64_t value = 0
    cdef int shift = 0
    cdef Py_ssize_t i = pos
    while True:
        if i < 0 or i >= b.buf.len:
            raise CorruptRecordError("unsigned varint is truncated", pos)
        value |= (<uint64_t>(p[i] & 0x7F)) << shift
        i += 1
        if p[i - 1] < 0x80:
            return value, i
        shift += 7
        if shift > 63:
            raise CorruptRecordError("unsigned varint is longer than 10 bytes", pos)
