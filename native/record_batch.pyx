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
run without the GIL. The record parser and the columnar loop are C
(records.h) so they inline; the rest is split into the .pxi files included
at the bottom.
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


# One extension module, one file per concern.
include "batch_header.pxi"
include "record_parse.pxi"
include "decode_objects.pxi"
include "columnar.pxi"
include "encode.pxi"
include "varint_api.pxi"
