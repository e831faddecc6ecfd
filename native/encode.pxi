# Encoders: the bulk encoder, the per-record builder and transaction markers.
# Included by record_batch.pyx, which holds the imports and constants.


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
    # The CRC goes in last, over the finished bytes.
    cdef HeaderFields f
    f.base_offset = base_offset
    f.batch_length = batch_length
    f.partition_leader_epoch = leader_epoch
    f.magic = 2
    f.crc = 0
    f.attributes = attributes
    f.last_offset_delta = last_offset_delta
    f.base_timestamp = base_ts
    f.max_timestamp = max_ts
    f.producer_id = producer_id
    f.producer_epoch = producer_epoch
    f.base_sequence = base_sequence
    f.record_count = count
    write_fields(p, &f)


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
    write_be32(p + CRC_AT, <int32_t>_crc_of(out, CRC_START, HEADER_SIZE + records_len))
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


cdef Py_ssize_t _size_records(Slot* slots, Py_ssize_t n, int64_t base_ts, HeaderSlot* hs,
                              int64_t* max_ts) noexcept nogil:
    """Each record's body size into its slot; the records' total length, the highest timestamp to `max_ts`."""
    cdef Py_ssize_t i
    cdef Py_ssize_t total = 0
    cdef Slot* s
    for i in range(n):
        s = &slots[i]
        if s.timestamp > max_ts[0]:
            max_ts[0] = s.timestamp
        s.body = _body_size(s, <int32_t>i, base_ts, hs)
        total += varint_size(<int32_t>s.body) + s.body
    return total


cdef void _write_records(unsigned char* w, Slot* slots, Py_ssize_t n, int64_t base_ts,
                         HeaderSlot* hs) noexcept nogil:
    """Every record at `w`, one after another (their body sizes already in the slots)."""
    cdef Py_ssize_t i
    for i in range(n):
        w = _write_record(w, &slots[i], <int32_t>i, base_ts, hs)


# The record loops let other threads run only when they are long: a coordinator's one-record batch built on
# the event loop would otherwise hand the GIL to a waiting sync thread and wait to get it back.
cdef Py_ssize_t NOGIL_MIN_RECORDS = 4096
cdef Py_ssize_t NOGIL_MIN_BYTES = 1 << 20
ENCODE_NOGIL_MIN_RECORDS = NOGIL_MIN_RECORDS
ENCODE_NOGIL_MIN_BYTES = NOGIL_MIN_BYTES


cdef inline int64_t _now_ms() noexcept:
    cdef timespec now
    clock_gettime(CLOCK_REALTIME, &now)
    return <int64_t>now.tv_sec * 1000 + now.tv_nsec // 1000000


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
        if n >= NOGIL_MIN_RECORDS:
            with nogil:
                total = _size_records(slots, n, base_ts, hs, &max_ts)
        else:
            total = _size_records(slots, n, base_ts, hs, &max_ts)
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
        if n >= NOGIL_MIN_RECORDS or total >= NOGIL_MIN_BYTES:
            with nogil:
                _write_records(records, slots, n, base_ts, hs)
        else:
            _write_records(records, slots, n, base_ts, hs)
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


def recompress_batch(buf, Py_ssize_t pos=0, int codec=0, level=None, *,
                     Py_ssize_t max_decompressed=DEFAULT_MAX_DECOMPRESSED):
    """The v2 batch at `pos` of `buf` with its records section in `codec` at Kafka's `level`: a new bytearray.

    What Kafka's LogValidator does when a topic's compression.type differs from
    the batch's codec, without re-encoding: in v2 every record (offset delta,
    timestamp delta, key, value, headers) is the same bytes whatever the codec,
    so the section is decompressed and compressed again and the header kept
    but for the codec bits, the length and the CRC (producer id, epoch, base
    sequence, transactional and timestamp-type bits unchanged). The batch must
    have been validated: its records are not walked again.
    """
    if codec < 0 or codec > 4:
        raise UnsupportedCompressionError(f"unknown compression codec {codec}")
    cdef _Buffer b = _Buffer(buf)
    cdef const unsigned char* p = <const unsigned char*>b.buf.buf
    cdef BatchHeader h = _checked_header(buf, p, b.buf.len, pos, 0, False)
    cdef Py_ssize_t start = pos + HEADER_SIZE
    cdef Py_ssize_t end = pos + h.batch_length + LOG_OVERHEAD
    cdef int source = h.attributes & _CODEC_MASK
    section = PyMemoryView_FromMemory(<char*>p + start, end - start, PyBUF_READ)
    raw = decompress(source, section, max_decompressed, start) if source != 0 else section
    packed = compress_at_kafka_level(codec, raw, level) if codec != 0 else raw
    cdef Py_ssize_t packed_len = len(packed)
    if HEADER_SIZE + packed_len - LOG_OVERHEAD > 2147483647:
        raise RecordTooLargeError("record batch would exceed 2 GiB", pos)
    out = bytearray(HEADER_SIZE + packed_len)
    cdef unsigned char* w = <unsigned char*>(<char*>out)
    memcpy(w, p + pos, HEADER_SIZE)
    cdef _Buffer packed_buf = _Buffer(packed)
    memcpy(w + HEADER_SIZE, packed_buf.buf.buf, packed_len)
    write_be32(w + BATCH_LENGTH_AT, <int32_t>(HEADER_SIZE + packed_len - LOG_OVERHEAD))
    write_be16(w + ATTRIBUTES_AT, <int16_t>((h.attributes & ~_CODEC_MASK) | codec))
    write_be32(w + CRC_AT, <int32_t>_crc_of(out, CRC_START, HEADER_SIZE + packed_len))
    return out


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
        self._put(_now_ms() if timestamp is None else timestamp, key, value, headers, -1)

    def try_append(self, timestamp, key, value, headers=None, Py_ssize_t limit=-1):
        """Add one record unless the batch holds some already and would then exceed `limit` bytes (as built
        uncompressed); whether it was added."""
        return self._put(_now_ms() if timestamp is None else timestamp, key, value, headers, limit) == 1

    cdef int _put(self, int64_t timestamp, object key, object value, object headers,
                  Py_ssize_t limit) except -1:
        # 1 if the record was added, 0 if `limit` (>= 0) refused it.
        cdef Slot s
        cdef HeaderSlot local[8]
        cdef HeaderSlot* hs = local
        cdef Py_ssize_t j, encoded
        cdef list keep = self.keep
        if self.built:
            raise RuntimeError("append after build()")
        if self.count == 2147483647:
            raise OverflowError("too many records for one batch")
        s.timestamp = timestamp
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
            s.body = _body_size(&s, self.count, s.timestamp if self.count == 0 else self.base_ts, hs)
            encoded = varint_size(<int32_t>s.body) + s.body
            if limit >= 0 and self.count > 0 and HEADER_SIZE + self.size + encoded > limit:
                return 0
            if self.count == 0:
                self.base_ts = s.timestamp
            self._ensure(encoded)
            self.size = _write_record(self.buf + self.size, &s, self.count, self.base_ts, hs) - self.buf
        finally:
            if hs != local:
                free(hs)
            # Bytes objects that were converted are copied already (or not needed); drop them.
            if keep:
                del keep[:]
        if s.timestamp > self.max_ts:
            self.max_ts = s.timestamp
        self.count += 1
        return 1

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
