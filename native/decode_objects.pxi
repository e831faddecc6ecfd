# Decoding a batch to Python Record objects.
# Included by record_batch.pyx, which holds the imports and constants.


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
