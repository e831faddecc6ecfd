# Varints for callers outside the hot loops (tests, internal-topic schemas).
# Included by record_batch.pyx, which holds the imports and constants.


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
    cdef Py_ssize_t end = read_varint(<const unsigned char*>b.buf.buf, pos, b.buf.len, &value) if pos >= 0 else -1
    if end < 0:
        raise CorruptRecordError("varint is truncated or longer than 5 bytes", pos)
    return value, end


def decode_varlong(buf, Py_ssize_t pos=0):
    """(value, next position) of the zigzag varlong at `pos`."""
    cdef _Buffer b = _Buffer(buf)
    cdef int64_t value
    cdef Py_ssize_t end = read_varlong(<const unsigned char*>b.buf.buf, pos, b.buf.len, &value) if pos >= 0 else -1
    if end < 0:
        raise CorruptRecordError("varlong is truncated or longer than 10 bytes", pos)
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
