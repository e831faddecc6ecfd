# Arrow columns in, v2 batches out: the Spark sink's rows never become Python objects.
# Included by record_batch.pyx after encode.pxi, whose Slot/HeaderSlot, sizing and record writer it reuses.
#
# A column is read in place through its Arrow buffers (validity bitmap, int32 offsets, data), honouring
# the array's slice offset. Only binary and string columns (int32 offsets) are taken; the Python façade
# (logstore/formats/kafka_arrow.py) casts anything else first.
from libc.stdint cimport uintptr_t


cdef struct ArrowBinary:
    const unsigned char* validity    # NULL: no nulls
    const int32_t* offsets           # already advanced by the array's offset
    const char* data
    Py_ssize_t bit_offset            # the array's offset, for the validity bitmap
    bint all_null                    # a null-typed column, or no column


cdef inline const void* _address(object buffer):
    return NULL if buffer is None else <const void*><uintptr_t>buffer.address


cdef ArrowBinary _binary_column(object array, Py_ssize_t length, str what) except *:
    cdef ArrowBinary c
    c.validity = NULL
    c.offsets = NULL
    c.data = NULL
    c.bit_offset = 0
    c.all_null = True
    if array is None:
        return c
    if len(array) < length:
        raise ValueError(f"{what} has {len(array)} rows, {length} wanted")
    buffers = array.buffers()
    if len(buffers) == 1:      # pa.null(): every row null
        return c
    if len(buffers) != 3:
        raise TypeError(f"{what} must be a binary or string column, not {array.type}")
    cdef Py_ssize_t offset = array.offset
    c.all_null = array.null_count == len(array)
    c.validity = <const unsigned char*>_address(buffers[0]) if array.null_count else NULL
    c.bit_offset = offset
    c.offsets = (<const int32_t*>_address(buffers[1])) + offset
    c.data = <const char*>_address(buffers[2])
    if c.data == NULL:         # every value empty: Arrow may leave the data buffer out
        c.data = ""
    return c


cdef inline bint _is_null(ArrowBinary* c, Py_ssize_t i) noexcept nogil:
    cdef Py_ssize_t bit
    if c.all_null:
        return True
    if c.validity == NULL:
        return False
    bit = c.bit_offset + i
    return not ((c.validity[bit >> 3] >> (bit & 7)) & 1)


cdef inline const char* _cell(ArrowBinary* c, Py_ssize_t i, Py_ssize_t* n) noexcept nogil:
    if _is_null(c, i):
        n[0] = -1
        return NULL
    n[0] = c.offsets[i + 1] - c.offsets[i]
    return c.data + c.offsets[i]


def encode_arrow_batch(keys, values, headers, Py_ssize_t start, Py_ssize_t stop, int64_t timestamp, *,
                       int compression=0, compression_level=None, int64_t producer_id=-1,
                       int16_t producer_epoch=-1, int32_t base_sequence=-1, bint transactional=False):
    """One v2 batch of rows [start, stop) of Arrow columns, every record stamped `timestamp` (ms).

    keys, values: binary or string arrays (None: every row null). headers:
    None or a list<struct<key: string, value: binary>> array; a null list is
    no headers, a null header key is refused. Nothing per row is a Python object.
    """
    if not 0 <= start <= stop:
        raise ValueError(f"rows [{start}, {stop}) are not a range")
    cdef Py_ssize_t n = stop - start
    if n > 2147483647:
        raise ValueError("too many records for one batch")
    cdef ArrowBinary kc = _binary_column(keys, stop, "key")
    cdef ArrowBinary vc = _binary_column(values, stop, "value")
    cdef ArrowBinary hk, hv
    cdef const unsigned char* list_validity = NULL
    cdef const int32_t* list_offsets = NULL
    cdef Py_ssize_t list_bit = 0
    cdef Py_ssize_t header_base = 0, header_total = 0
    if headers is not None:
        if len(headers) < stop:
            raise ValueError(f"headers has {len(headers)} rows, {stop} wanted")
        entries = headers.values
        list_buffers = headers.buffers()
        list_validity = <const unsigned char*>_address(list_buffers[0]) if headers.null_count else NULL
        list_bit = headers.offset
        list_offsets = (<const int32_t*>_address(list_buffers[1])) + list_bit
        header_base = list_offsets[start]
        header_total = list_offsets[stop] - header_base
        hk = _binary_column(entries.field(0), list_offsets[stop], "header key")
        hv = _binary_column(entries.field(1), list_offsets[stop], "header value")
    cdef int16_t attributes = _attributes(transactional, False, False, compression)
    cdef Slot* slots = <Slot*>malloc((n if n else 1) * sizeof(Slot))
    cdef HeaderSlot* hs = <HeaderSlot*>malloc((header_total if header_total else 1) * sizeof(HeaderSlot))
    cdef Py_ssize_t i, j, row, bit, total = 0, bad_header = -1
    cdef Slot* s
    cdef HeaderSlot* h
    cdef bytes out
    cdef unsigned char* records = NULL
    if slots == NULL or hs == NULL:
        free(slots)
        free(hs)
        raise MemoryError()
    try:
        with nogil:
            for i in range(n):
                row = start + i
                s = &slots[i]
                s.key = _cell(&kc, row, &s.key_len)
                s.value = _cell(&vc, row, &s.value_len)
                s.timestamp = timestamp
                s.first_header = 0
                s.header_count = 0
                if list_offsets != NULL:
                    bit = list_bit + row
                    if list_validity == NULL or (list_validity[bit >> 3] >> (bit & 7)) & 1:
                        s.first_header = list_offsets[row] - header_base
                        s.header_count = list_offsets[row + 1] - list_offsets[row]
                        for j in range(list_offsets[row], list_offsets[row + 1]):
                            h = &hs[j - header_base]
                            h.key = _cell(&hk, j, &h.key_len)
                            h.value = _cell(&hv, j, &h.value_len)
                            if h.key_len < 0 and bad_header < 0:
                                bad_header = row
                s.body = _body_size(s, <int32_t>i, timestamp, hs)
                total += varint_size(<int32_t>s.body) + s.body
        if bad_header >= 0:
            raise ValueError(f"row {bad_header}: a header's key is null (Kafka headers need a key)")
        if compression == 0:
            out = PyBytes_FromStringAndSize(NULL, HEADER_SIZE + total)
            records = <unsigned char*>PyBytes_AS_STRING(out) + HEADER_SIZE
        else:
            out = None
            records = <unsigned char*>malloc(total if total else 1)
            if records == NULL:
                raise MemoryError()
        with nogil:
            _write_records(records, slots, n, timestamp, hs)
        return _finish_batch(records, total, compression, compression_level, 0, -1, attributes,
                             <int32_t>(n - 1 if n else 0), timestamp if n else NO_TIMESTAMP,
                             timestamp if n else NO_TIMESTAMP, producer_id, producer_epoch, base_sequence,
                             <int32_t>n, out)
    finally:
        free(slots)
        free(hs)
        if compression != 0:
            free(records)


cdef inline uint32_t _murmur2(const unsigned char* data, Py_ssize_t length) noexcept nogil:
    # Kafka's Utils.murmur2 (seed 0x9747b28c, little-endian words), as unsigned 32 bits.
    cdef uint32_t m = 0x5BD1E995U
    cdef uint32_t h = 0x9747B28CU
    cdef uint32_t k
    cdef Py_ssize_t whole = length & ~(<Py_ssize_t>3)
    cdef Py_ssize_t i
    h ^= <uint32_t>length
    for i in range(0, whole, 4):
        k = (<uint32_t>data[i]) | (<uint32_t>data[i + 1] << 8) | (<uint32_t>data[i + 2] << 16) \
            | (<uint32_t>data[i + 3] << 24)
        k *= m
        k ^= k >> 24
        k *= m
        h = (h * m) ^ k
    cdef Py_ssize_t tail = length & 3
    if tail == 3:
        h ^= (<uint32_t>data[whole + 2]) << 16
    if tail >= 2:
        h ^= (<uint32_t>data[whole + 1]) << 8
    if tail >= 1:
        h ^= data[whole]
        h *= m
    h ^= h >> 13
    h *= m
    h ^= h >> 15
    return h


def murmur2(data):
    """Kafka's `Utils.murmur2` of `data` as an unsigned 32-bit value."""
    cdef _Buffer b = _Buffer(data)
    return _murmur2(<const unsigned char*>b.buf.buf, b.buf.len)


def murmur2_partitions(keys, int32_t partitions):
    """Each row's partition by Kafka's default partitioner, `(murmur2(key) & 0x7fffffff) % partitions`, as
    little-endian int32s (bytes); -1 where the key is null (the caller picks a sticky partition)."""
    if partitions <= 0:
        raise ValueError(f"a topic has at least one partition, not {partitions}")
    cdef Py_ssize_t n = len(keys)
    cdef ArrowBinary kc = _binary_column(keys, n, "key")
    out = PyBytes_FromStringAndSize(NULL, n * 4)
    cdef int32_t* p = <int32_t*>PyBytes_AS_STRING(out)
    cdef Py_ssize_t i, size
    cdef const char* key
    with nogil:
        for i in range(n):
            key = _cell(&kc, i, &size)
            p[i] = -1 if size < 0 else <int32_t>((_murmur2(<const unsigned char*>key, size) & 0x7FFFFFFF)
                                                  % <uint32_t>partitions)
    return out
