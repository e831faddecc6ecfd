# Kafka's LogValidator for a produced v2 batch: the header rules, then every
# record walked (records.h's ls_check_records), decompressed first when the
# batch is compressed. Included by record_batch.pyx, which holds the imports
# and constants.


cdef extern from "records.h":
    ctypedef struct _Fault "ls_fault":
        int32_t index
        int32_t kind
        int64_t timestamp

    ctypedef struct _RecordsWalk "ls_check":
        int64_t base_ts, now, before_max, after_max
        int32_t count
        int check_timestamps, require_keys
        int64_t max_ts
        int32_t failed
        int32_t faults
        _Fault fault[100]

    int _check_records "ls_check_records" (_RecordsWalk* c, const unsigned char* p, Py_ssize_t pos,
                                           Py_ssize_t end, ParseError* e) noexcept nogil

    enum:
        LS_MAX_FAULTS
        LS_NO_KEY
        LS_BAD_TIMESTAMP

RECORD_WITHOUT_KEY = LS_NO_KEY
TIMESTAMP_OUT_OF_RANGE = LS_BAD_TIMESTAMP
MAX_RECORD_FAULTS = LS_MAX_FAULTS
# Sections at least this long are walked without the GIL. Below it the walk
# takes less than the wait to get the GIL back from a thread that took it.
cdef Py_ssize_t _NOGIL_WALK_BYTES = 256 * 1024
# What checking a decompressed byte costs, by codec (none, gzip, snappy, lz4,
# zstd), in bytes of walking an uncompressed batch (0.3 ns a byte): measured
# on 100 B records, gzip inflates at 6-8 ns a byte, zstd 2.5-3, snappy 1,
# lz4 0.6, and the walk adds 0.2.
cdef Py_ssize_t _CHECK_COST[5]
_CHECK_COST[:] = [1, 24, 4, 2, 10]


@cython.final
cdef class RecordsCheck:
    """What `validate_produced` found in one batch. Immutable.

    `header` is the batch's header as appended (a maxTimestamp the records
    contradicted already corrected); `cost` what checking it took, in bytes
    of walking: the batch's bytes, plus its decompressed records weighted by
    how much slower their codec is to expand than a walk. A record that cannot be read is `broken`
    (why) at `broken_at` (its index in the batch, -1 when the fault is the
    section's: bytes left over); records that break a rule are counted in
    `fault_count`, the first MAX_RECORD_FAULTS listed in `faults` as (index,
    RECORD_WITHOUT_KEY or TIMESTAMP_OUT_OF_RANGE, timestamp in ms).
    """
    cdef readonly BatchHeader header
    cdef readonly Py_ssize_t cost
    cdef readonly int32_t broken_at
    cdef readonly object broken
    cdef readonly int32_t fault_count
    cdef readonly tuple faults

    @property
    def ok(self):
        """Whether every record is whole and keeps every rule."""
        return self.broken is None and self.fault_count == 0

    def __repr__(self):
        return (f"RecordsCheck(header={self.header!r}, cost={self.cost}, "
                f"broken_at={self.broken_at}, broken={self.broken!r}, fault_count={self.fault_count})")


def validate_produced(buf, Py_ssize_t pos=0, *, int64_t max_batch_size=-1, int64_t now=0,
                      int64_t timestamp_before_max_ms=INT64_MAX, int64_t timestamp_after_max_ms=INT64_MAX,
                      bint create_time=True, bint keys_required=False,
                      Py_ssize_t max_decompressed=DEFAULT_MAX_DECOMPRESSED, Py_ssize_t work_limit=-1):
    """Kafka's LogValidator for the produced v2 batch at `pos`: a RecordsCheck, or None (see `work_limit`).

    First `validate_batch(client=True, max_batch_size=...)`, which raises; then
    every record, decompressed into at most `max_decompressed` bytes. With
    `create_time` (message.timestamp.type=CreateTime) timestamps must lie in
    [now - timestamp_before_max_ms, now + timestamp_after_max_ms] (ms), and a
    maxTimestamp that is not the records' largest is corrected as Kafka does:
    in place, the CRC resealed, so the buffer must then be writable.
    `keys_required` (a compacted topic) refuses records without a key. With
    `work_limit` >= 0 the answer is None when checking would cost more (see
    RecordsCheck.cost), found before the CRC is computed, or as soon as the
    records decompress past what the limit leaves: check it again without a
    limit, away from an event loop.
    """
    if timestamp_before_max_ms < 0 or timestamp_after_max_ms < 0:
        raise ValueError("timestamp bounds must be >= 0 ms")
    cdef _Buffer b = _Buffer(buf)
    cdef const unsigned char* p = <const unsigned char*>b.buf.buf
    if (work_limit >= 0 and b.buf.len - pos >= HEADER_SIZE and pos >= 0
            and <int64_t>read_be32(p + pos + BATCH_LENGTH_AT) + LOG_OVERHEAD > work_limit):
        return None
    # A recordCount the bytes cannot hold is the walk's to find: Kafka's "premature EOF", INVALID_RECORD.
    cdef BatchHeader h = _checked_header(buf, p, b.buf.len, pos, 0, True, True, False)
    cdef Py_ssize_t size = h.batch_length + LOG_OVERHEAD
    if max_batch_size >= 0 and size > max_batch_size:
        raise RecordTooLargeError(f"record batch of {size} bytes exceeds the maximum {max_batch_size}", pos)
    _check_client_rules(h, pos)
    cdef int codec = h.attributes & _CODEC_MASK
    cdef Py_ssize_t start = pos + HEADER_SIZE
    cdef Py_ssize_t end = pos + size
    cdef Py_ssize_t limit
    cdef _Buffer raw = None
    cdef const unsigned char* records = p
    if codec != 0:
        limit = max_decompressed if work_limit < 0 else min((work_limit - size) // _CHECK_COST[codec],
                                                             max_decompressed)
        out = decompress_within(codec, memoryview(buf)[start:end], limit, start)
        if out is None:
            if limit < max_decompressed:
                return None
            raise CorruptRecordError(f"records section decompresses to more than {max_decompressed} bytes", start)
        raw = _Buffer(out)
        records = <const unsigned char*>raw.buf.buf
        start, end = 0, raw.buf.len
    cdef _RecordsWalk w
    cdef ParseError e
    cdef int rc
    w.base_ts = h.base_timestamp
    w.now = now
    w.before_max = timestamp_before_max_ms
    w.after_max = timestamp_after_max_ms
    w.count = h.record_count
    w.check_timestamps = create_time
    w.require_keys = keys_required
    if end - start >= _NOGIL_WALK_BYTES:
        with nogil:
            rc = _check_records(&w, records, start, end, &e)
    else:
        rc = _check_records(&w, records, start, end, &e)
    cdef RecordsCheck check = RecordsCheck.__new__(RecordsCheck)
    check.cost = size + (end * _CHECK_COST[codec] if codec != 0 else 0)
    check.broken_at = -1
    check.fault_count = 0
    check.faults = ()
    if rc != 0:
        where = "of the decompressed records" if codec != 0 else "of the records field"
        check.broken = f"{e.message.decode()} (at byte {e.position} {where})"
        check.broken_at = w.failed
        check.header = h
        return check
    check.fault_count = w.faults
    if w.faults:
        check.faults = tuple((w.fault[k].index, w.fault[k].kind, w.fault[k].timestamp)
                             for k in range(min(w.faults, LS_MAX_FAULTS)))
    elif create_time and w.max_ts != h.max_timestamp:
        _set_max_timestamp(buf, pos, size, w.max_ts)
        h = _read_header(p + pos, pos)
    check.header = h
    return check


cdef _set_max_timestamp(object buf, Py_ssize_t pos, Py_ssize_t size, int64_t max_timestamp):
    # Kafka's DefaultRecordBatch.setMaxTimestamp: the field is inside the CRC, so the CRC follows.
    cdef Py_buffer view
    try:
        PyObject_GetBuffer(buf, &view, PyBUF_WRITABLE)
    except BufferError:
        raise TypeError("correcting a batch's maxTimestamp needs a writable buffer") from None
    try:
        write_be64(<unsigned char*>view.buf + pos + MAX_TIMESTAMP_AT, max_timestamp)
        write_be32(<unsigned char*>view.buf + pos + CRC_AT,
                   <int32_t>_crc_of(buf, pos + CRC_START, pos + size))
    finally:
        PyBuffer_Release(&view)
