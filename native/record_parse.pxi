# Record parsing shared by every decoder (the parser itself is records.h).
# Included by record_batch.pyx, which holds the imports and constants.


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

    Py_ssize_t read_varint "ls_varint" (const unsigned char* p, Py_ssize_t pos, Py_ssize_t end,
                                        int32_t* out) noexcept nogil
    Py_ssize_t read_varlong "ls_varlong" (const unsigned char* p, Py_ssize_t pos, Py_ssize_t end,
                                          int64_t* out) noexcept nogil

    int _check_delta "ls_check_delta" (const RawRecord* r, int32_t* prev, int32_t last_delta,
                                       Py_ssize_t pos, ParseError* e) noexcept nogil

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
            f"record count {h.record_count} cannot fit in {end[0]} decompressed bytes", pos + RECORD_COUNT_AT)
    return raw
