# cython: language_level=3
"""Kafka v2 RecordBatch (magic 2): header, validator, encoders, decoders.

Layout (on-disk-format.md §2, Kafka's DefaultRecordBatch / DefaultRecord):
the 61-byte header is batch_header.pxd's, then recordCount records (one
compressed blob when the codec is not 0):

    record: length varint, attributes int8, timestampDelta varlong,
            offsetDelta varint, keyLength varint, key, valueLength varint,
            value, headerCount varint, headers
    header: keyLength varint (>= 0), key (UTF-8), valueLength varint, value

Every parse is bounded by the buffer; every failure is a CorruptRecordError
(or subclass) carrying the byte position. Loops that touch no Python object
run without the GIL. `validate_produced` is Kafka's LogValidator: every
record of a produced batch walked, compressed or not. The record parser and the columnar loop are C
(records.h) so they inline; the rest is split into the .pxi files included
at the bottom.
"""
cimport cython
from cpython.buffer cimport PyBUF_READ, PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.memoryview cimport PyMemoryView_FromMemory
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport INT64_MAX
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy, memset
from posix.time cimport CLOCK_REALTIME, clock_gettime, timespec

from batch_header cimport (
    ATTRIBUTES_AT,
    BASE_OFFSET_AT,
    BASE_SEQUENCE_AT,
    BATCH_LENGTH_AT,
    CRC_AT,
    CRC_START,
    ENTRY_PREFIX_SIZE,
    HEADER_SIZE,
    LAST_OFFSET_DELTA_AT,
    LEADER_EPOCH_AT,
    LOG_OVERHEAD,
    MAGIC_AT,
    MAX_TIMESTAMP_AT,
    MIN_BATCH_LENGTH,
    MIN_RECORD_SIZE,
    PRODUCER_ID_AT,
    RECORD_COUNT_AT,
    HeaderFields,
    read_be16,
    read_be32,
    read_be64,
    read_fields,
    write_be16,
    write_be32,
    write_be64,
    write_fields,
)
from batch_header cimport CODEC_MASK as _CODEC_MASK
from batch_header cimport CONTROL_FLAG as _CONTROL_FLAG
from batch_header cimport DELETE_HORIZON_FLAG as _DELETE_HORIZON_FLAG
from batch_header cimport TIMESTAMP_TYPE_MASK as _TIMESTAMP_TYPE_MASK
from batch_header cimport TRANSACTIONAL_FLAG as _TRANSACTIONAL_FLAG

include "varint.pxi"

from crc32c import crc32c as _crc32c

from logstore.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordTooLargeError,
    UnsupportedCompressionError,
)
from logstore.native.compression import (
    DEFAULT_MAX_DECOMPRESSED,
    compress,
    compress_at_kafka_level,
    decompress,
    decompress_within,
)

cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object, Py_ssize_t*) except NULL

RECORD_BATCH_OVERHEAD = HEADER_SIZE
ENTRY_OVERHEAD = LOG_OVERHEAD
ENTRY_PREFIX = ENTRY_PREFIX_SIZE
LENGTH_OFFSET = BATCH_LENGTH_AT
MAGIC_OFFSET = MAGIC_AT
CRC_OFFSET = CRC_AT
CODEC_MASK = _CODEC_MASK
TIMESTAMP_TYPE_MASK = _TIMESTAMP_TYPE_MASK
TRANSACTIONAL_FLAG = _TRANSACTIONAL_FLAG
CONTROL_FLAG = _CONTROL_FLAG
DELETE_HORIZON_FLAG = _DELETE_HORIZON_FLAG
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


# One extension module, one file per concern.
include "batch_header.pxi"
include "record_parse.pxi"
include "produce_check.pxi"
include "decode_objects.pxi"
include "columnar.pxi"
include "encode.pxi"
include "arrow_encode.pxi"
include "send_path.pxi"
include "varint_api.pxi"
