# The v2 batch header: decoding, framing checks and the header-only validator.
# Included by record_batch.pyx, which holds the imports and constants.


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
    cdef HeaderFields f
    read_fields(p, &f)
    cdef BatchHeader h = BatchHeader.__new__(BatchHeader)
    h.position = position
    h.base_offset = f.base_offset
    h.batch_length = f.batch_length
    h.partition_leader_epoch = f.partition_leader_epoch
    h.magic = f.magic
    h.crc = f.crc
    h.attributes = f.attributes
    h.last_offset_delta = f.last_offset_delta
    h.base_timestamp = f.base_timestamp
    h.max_timestamp = f.max_timestamp
    h.producer_id = f.producer_id
    h.producer_epoch = f.producer_epoch
    h.base_sequence = f.base_sequence
    h.record_count = f.record_count
    return h


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
                                 bint semantic=True, bint count_fits=True):
    """Bounds, magic and length of the batch at `pos`; with `semantic`, also
    the CRC (when asked), codec, counts and producer fields. `count_fits`
    refuses an uncompressed batch whose recordCount its bytes cannot hold
    (a caller that walks the records anyway finds that out record by record)."""
    cdef Py_ssize_t remaining = n - pos
    if pos < 0 or remaining < HEADER_SIZE:
        raise CorruptRecordError(
            f"truncated record batch: {max(remaining, 0)} bytes left, a batch needs at least {HEADER_SIZE}",
            base_position + pos)
    cdef int8_t magic = <int8_t>p[pos + MAGIC_AT]
    if magic != 2:
        raise CorruptRecordError(f"record batch has magic {magic}, expected 2",
                                 base_position + pos + MAGIC_AT)
    cdef int32_t length = read_be32(p + pos + BATCH_LENGTH_AT)
    if length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(
            f"record batch length {length} is below the minimum {MIN_BATCH_LENGTH}",
            base_position + pos + BATCH_LENGTH_AT)
    if <int64_t>length + LOG_OVERHEAD > remaining:
        raise CorruptRecordError(
            f"record batch of {length + LOG_OVERHEAD} bytes runs past the end of the buffer ({remaining} bytes left)",
            base_position + pos + BATCH_LENGTH_AT)
    cdef BatchHeader h = _read_header(p + pos, base_position + pos)
    if not semantic:
        return h
    if verify_crc:
        actual = _crc_of(obj, pos + CRC_START, pos + LOG_OVERHEAD + length)
        if actual != h.crc:
            raise CorruptRecordError(
                f"record batch CRC mismatch: stored {h.crc}, computed {actual}", base_position + pos + CRC_AT)
    if (h.attributes & CODEC_MASK) > 4:
        raise UnsupportedCompressionError(
            f"unknown compression codec {h.attributes & CODEC_MASK}", base_position + pos + ATTRIBUTES_AT)
    if h.record_count < 0:
        raise InvalidRecordError(f"negative record count {h.record_count}",
                                 base_position + pos + RECORD_COUNT_AT)
    if h.last_offset_delta < 0:
        raise InvalidRecordError(f"negative last offset delta {h.last_offset_delta}",
                                 base_position + pos + LAST_OFFSET_DELTA_AT)
    if (count_fits and (h.attributes & CODEC_MASK) == 0
            and h.record_count > (length - MIN_BATCH_LENGTH) // MIN_RECORD_SIZE):
        raise CorruptRecordError(
            f"record count {h.record_count} cannot fit in {length - MIN_BATCH_LENGTH} bytes of records",
            base_position + pos + RECORD_COUNT_AT)
    if (h.attributes & TRANSACTIONAL_FLAG) and h.producer_id < 0:
        raise InvalidRecordError("transactional batch without a producer id",
                                 base_position + pos + PRODUCER_ID_AT)
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
        raise InvalidRecordError("produced batch has no records", pos + RECORD_COUNT_AT)
    if <int64_t>h.last_offset_delta + 1 != h.record_count:
        raise InvalidRecordError(
            f"inconsistent batch offset range: lastOffsetDelta {h.last_offset_delta} "
            f"with {h.record_count} records", pos + LAST_OFFSET_DELTA_AT)
    if h.attributes & CONTROL_FLAG:
        raise InvalidRecordError("clients are not allowed to write control batches", pos + ATTRIBUTES_AT)
    if h.producer_id >= 0 and h.base_sequence < 0:
        raise InvalidRecordError(
            f"batch with producer id {h.producer_id} has invalid base sequence {h.base_sequence}",
            pos + BASE_SEQUENCE_AT)
    if h.attributes & TIMESTAMP_TYPE_MASK:
        raise InvalidTimestampError("producers may not set the timestamp type to LOG_APPEND_TIME",
                                    pos + ATTRIBUTES_AT)


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


def read_entry_prefix(buf, Py_ssize_t pos=0):
    """(offset, length, magic) of the log entry at `pos`, the prefix every magic shares; None when
    fewer than its 17 bytes are left. `length` counts the bytes after the first 12. Nothing is checked."""
    cdef _Buffer b = _Buffer(buf)
    cdef const unsigned char* p = <const unsigned char*>b.buf.buf
    if pos < 0 or b.buf.len - pos < ENTRY_PREFIX_SIZE:
        return None
    p += pos
    # The magic byte unsigned, as messages about an unknown one have always printed it.
    return read_be64(p + BASE_OFFSET_AT), read_be32(p + BATCH_LENGTH_AT), p[MAGIC_AT]


def peek_header(buf, Py_ssize_t pos=0):
    """The fields of the v2 header at `pos` as they stand, nothing checked (not even the magic);
    None when fewer than its 61 bytes are left."""
    cdef _Buffer b = _Buffer(buf)
    if pos < 0 or b.buf.len - pos < HEADER_SIZE:
        return None
    return _read_header(<const unsigned char*>b.buf.buf + pos, pos)


def assign_batch_offsets(buf, Py_ssize_t pos, int64_t base_offset, int32_t leader_epoch,
                         int64_t log_append_time=-1):
    """Patch the base offset and leader epoch into the v2 batch at `pos` of a writable buffer.

    Both lie before the CRC's range, so the batch stays sealed. A
    `log_append_time` >= 0 also sets the LOG_APPEND_TIME bit and the max
    timestamp, and reseals the CRC. The batch's framing must have been
    validated: only the header's bounds are checked here.
    """
    cdef Py_buffer view
    PyObject_GetBuffer(buf, &view, PyBUF_WRITABLE)
    cdef unsigned char* p = <unsigned char*>view.buf
    cdef Py_ssize_t end
    try:
        if pos < 0 or view.len - pos < HEADER_SIZE:
            raise CorruptRecordError("record batch header runs past the buffer", pos)
        p += pos
        write_be64(p + BASE_OFFSET_AT, base_offset)
        write_be32(p + LEADER_EPOCH_AT, leader_epoch)
        if log_append_time >= 0:
            end = pos + LOG_OVERHEAD + read_be32(p + BATCH_LENGTH_AT)
            if end > view.len or end < pos + HEADER_SIZE:
                raise CorruptRecordError("record batch runs past the buffer", pos + BATCH_LENGTH_AT)
            write_be16(p + ATTRIBUTES_AT, read_be16(p + ATTRIBUTES_AT) | _TIMESTAMP_TYPE_MASK)
            write_be64(p + MAX_TIMESTAMP_AT, log_append_time)
            write_be32(p + CRC_AT, <int32_t><uint32_t>_crc_of(buf, pos + CRC_START, end))
    finally:
        PyBuffer_Release(&view)
