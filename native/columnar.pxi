# Columnar decode: Arrow-ready buffers, no Python object per record.
# Included by record_batch.pyx, which holds the imports and constants.


cdef extern from "records.h":
    ctypedef struct ColumnarExtra "ls_columnar_extra":
        int32_t* types
        int32_t* header_lists
        Growable* hkey_offsets
        Growable* hkey_data
        Growable* hvalue_offsets
        Growable* hvalue_data
        Growable* hvalue_valid
        Py_ssize_t headers, hkey_size, hvalue_size, hvalue_nulls

    int _columnar_append_extra "ls_columnar_append_extra" (
        ColumnarAppend* c, ColumnarExtra* x, const unsigned char* p, Py_ssize_t pos, Py_ssize_t end,
        ParseError* e) noexcept nogil

# Arrow type of the headers column: Spark's Kafka schema, all fields nullable.
cdef object _HEADERS_TYPE = None
# Arrow type of µs timestamps: Spark's TimestampType as it crosses from Python.
cdef object _MICROS_TYPE = None


cdef object _headers_type():
    global _HEADERS_TYPE
    if _HEADERS_TYPE is None:
        import pyarrow as pa
        _HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    return _HEADERS_TYPE


cdef object _micros_type():
    global _MICROS_TYPE
    if _MICROS_TYPE is None:
        import pyarrow as pa
        _MICROS_TYPE = pa.timestamp("us", tz="UTC")
    return _MICROS_TYPE


# A builder releases the GIL for a batch once it has decoded this many records bytes holding it: for
# any batch this large, and for one in ~16 of a producer's (16 KiB by default, about a microsecond
# each). Releasing it around every small batch cost a scan 5% of its CPU; other threads still get in
# every few hundred microseconds.
cdef enum:
    NOGIL_BYTES = 256 * 1024


# Why `add_entries` stopped: the buffer holds no further whole entry, the range's end was reached, the
# builder holds `max_rows` rows, or the entry at the position is not a v2 batch (the caller decodes it).
ENTRIES_NEED_BYTES = 0
ENTRIES_END = 1
ENTRIES_FULL = 2
ENTRIES_LEGACY = 3


# Column buffers of finished batches, kept for the builders' next ones. A scan hands every batch to
# Arrow and starts the next at once: without these, each batch's megabytes came fresh from malloc,
# whose memory the kernel zero-fills page by page on first touch once free() has given it back (a
# third of a Spark scan task's CPU went to those faults). Only blocks of POOL_MIN_BYTES or more are
# kept, at most POOL_BLOCKS of them and POOL_MAX_BYTES in all; the GIL guards the pool (a buffer is
# released, and a builder grows, with the GIL held).
cdef enum:
    POOL_BLOCKS = 16
    POOL_MIN_BYTES = 64 * 1024
cdef Py_ssize_t POOL_MAX_BYTES = 64 * 1024 * 1024

cdef char* _pool_data[POOL_BLOCKS]
cdef Py_ssize_t _pool_capacity[POOL_BLOCKS]
cdef Py_ssize_t _pool_count = 0
cdef Py_ssize_t _pool_bytes = 0


cdef void _pool_give(char* data, Py_ssize_t capacity) noexcept:
    """Keep a block for a later batch, or free it when the pool is full or it is small."""
    global _pool_count, _pool_bytes
    if (data == NULL or capacity < POOL_MIN_BYTES or _pool_count == POOL_BLOCKS
            or _pool_bytes + capacity > POOL_MAX_BYTES):
        free(data)
        return
    _pool_data[_pool_count] = data
    _pool_capacity[_pool_count] = capacity
    _pool_count += 1
    _pool_bytes += capacity


cdef int _refill(Growable* g, Py_ssize_t want) except -1:
    """Give an empty Growable room for `want` bytes: the smallest pooled block that holds them, else malloc."""
    global _pool_count, _pool_bytes
    cdef Py_ssize_t i, best = -1
    if g.data == NULL and want >= POOL_MIN_BYTES:
        for i in range(_pool_count):
            if _pool_capacity[i] >= want and (best < 0 or _pool_capacity[i] < _pool_capacity[best]):
                best = i
        if best >= 0:
            g.data = _pool_data[best]
            g.capacity = _pool_capacity[best]
            _pool_bytes -= g.capacity
            _pool_count -= 1
            _pool_data[best] = _pool_data[_pool_count]
            _pool_capacity[best] = _pool_capacity[_pool_count]
            return 0
    return _reserve(g, want - g.size)


# The buffer sizes of the last batch `add_entries` filled, by which a scan's next builder starts (a task of
# a reused Spark worker, say): without them its first batch grew from nothing by doubling, each step a
# copy and fresh pages, while the pool held blocks of the right size.
cdef Py_ssize_t _filled_sizes[9]


def pooled_buffers():
    """(blocks, bytes) the column buffer pool holds now (for tests)."""
    return _pool_count, _pool_bytes


@cython.final
cdef class NativeBuffer:
    """A malloc'd byte buffer exposed through the buffer protocol (zero-copy to Arrow); its block goes
    back to the builders' pool when Arrow lets go of it."""
    cdef char* data
    cdef Py_ssize_t size
    cdef Py_ssize_t capacity
    cdef Py_ssize_t shape[1]
    cdef Py_ssize_t strides[1]

    def __dealloc__(self):
        _pool_give(self.data, self.capacity)

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


cdef NativeBuffer _adopt(char* data, Py_ssize_t size, Py_ssize_t capacity):
    cdef NativeBuffer nb = NativeBuffer.__new__(NativeBuffer)
    nb.data = data
    nb.size = size
    nb.capacity = capacity
    return nb


cdef int _reserve(Growable* g, Py_ssize_t extra) except -1:
    if _grow(g, g.size + extra) != 0:
        raise MemoryError()
    return 0


cdef int _start_offsets(Growable* g) except -1:
    """Make `g` an offsets column of zero rows: the single int32 0."""
    _reserve(g, 4)
    (<int32_t*>g.data)[0] = 0
    g.size = 4
    return 0


@cython.final
cdef class Columns:
    """Arrow-ready columns of `count` records.

    `offsets` and `timestamps` are little-endian int64 (timestamps in ms, or
    in µs when `timestamp_micros`); `key_offsets` and
    `value_offsets` are count+1 little-endian int32 into `key_data` /
    `value_data`; `key_validity` / `value_validity` are Arrow validity bitmaps
    (bit set = not null), with `key_null_count` / `value_null_count`.

    The optional columns are None unless the builder was asked for them.
    `timestamp_types`: int32 per record, 0 CreateTime, 1 LogAppendTime.
    Headers, `header_count` of them in all: `header_offsets` (count+1 int32)
    gives each record's first header; per header, `header_key_offsets` into
    `header_key_data` (UTF-8) and `header_value_offsets` into
    `header_value_data`, with `header_value_validity` and
    `header_value_null_count` (count+1 and header_count+1 int32 offsets).
    """
    cdef readonly Py_ssize_t count
    cdef readonly object offsets
    cdef readonly object timestamps
    cdef readonly bint timestamp_micros
    cdef readonly object key_offsets
    cdef readonly object key_data
    cdef readonly object key_validity
    cdef readonly Py_ssize_t key_null_count
    cdef readonly object value_offsets
    cdef readonly object value_data
    cdef readonly object value_validity
    cdef readonly Py_ssize_t value_null_count
    cdef readonly object timestamp_types
    cdef readonly object header_count
    cdef readonly object header_offsets
    cdef readonly object header_key_offsets
    cdef readonly object header_key_data
    cdef readonly object header_value_offsets
    cdef readonly object header_value_data
    cdef readonly object header_value_validity
    cdef readonly object header_value_null_count

    def to_arrow(self):
        """A pyarrow.RecordBatch on these buffers: offset, timestamp, key, value[, timestampType][, headers].

        The timestamp column is int64 ms, or timestamp[us, tz=UTC] when `timestamp_micros`."""
        import pyarrow as pa
        n = self.count
        buf = pa.py_buffer
        arrays = [
            pa.Array.from_buffers(pa.int64(), n, [None, buf(self.offsets)]),
            pa.Array.from_buffers(_micros_type() if self.timestamp_micros else pa.int64(), n,
                                  [None, buf(self.timestamps)]),
            pa.Array.from_buffers(pa.binary(), n, [buf(self.key_validity), buf(self.key_offsets),
                                                   buf(self.key_data)], self.key_null_count),
            pa.Array.from_buffers(pa.binary(), n, [buf(self.value_validity), buf(self.value_offsets),
                                                   buf(self.value_data)], self.value_null_count),
        ]
        names = ["offset", "timestamp", "key", "value"]
        if self.timestamp_types is not None:
            arrays.append(pa.Array.from_buffers(pa.int32(), n, [None, buf(self.timestamp_types)]))
            names.append("timestampType")
        if self.header_offsets is not None:
            m = self.header_count
            entry_type = _headers_type().value_type
            keys = pa.Array.from_buffers(pa.string(), m, [None, buf(self.header_key_offsets),
                                                          buf(self.header_key_data)], 0)
            values = pa.Array.from_buffers(
                pa.binary(), m, [buf(self.header_value_validity), buf(self.header_value_offsets),
                                 buf(self.header_value_data)], self.header_value_null_count)
            entries = pa.Array.from_buffers(entry_type, m, [None], 0, children=[keys, values])
            arrays.append(pa.Array.from_buffers(_headers_type(), n, [None, buf(self.header_offsets)], 0,
                                                children=[entries]))
            names.append("headers")
        return pa.RecordBatch.from_arrays(arrays, names=names)


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
    Not thread-safe; one builder per task. No Python object is created per
    record or header. `headers` / `timestamp_types` add the optional columns
    of Spark's Kafka schema (see Columns); without them the loop is the
    plain one. `timestamp_micros` keeps timestamps in µs (Spark's unit),
    scaled in the batch's own pass while its rows are still in cache.
    """
    cdef Growable offsets, timestamps, key_offsets, key_data, key_valid
    cdef Growable value_offsets, value_data, value_valid
    cdef Growable types, header_lists, hkey_offsets, hkey_data, hvalue_offsets, hvalue_data, hvalue_valid
    cdef readonly Py_ssize_t count
    cdef readonly bint headers
    cdef readonly bint timestamp_types
    cdef readonly bint timestamp_micros
    cdef Py_ssize_t key_nulls, value_nulls, header_count, hvalue_nulls
    cdef Py_ssize_t held_bytes   # records bytes decoded since the GIL was last released
    cdef bint filled             # add_entries stopped on max_rows since the last finish()

    def __cinit__(self, *, bint headers=False, bint timestamp_types=False, bint timestamp_micros=False):
        memset(&self.offsets, 0, sizeof(Growable))
        memset(&self.timestamps, 0, sizeof(Growable))
        memset(&self.key_offsets, 0, sizeof(Growable))
        memset(&self.key_data, 0, sizeof(Growable))
        memset(&self.key_valid, 0, sizeof(Growable))
        memset(&self.value_offsets, 0, sizeof(Growable))
        memset(&self.value_data, 0, sizeof(Growable))
        memset(&self.value_valid, 0, sizeof(Growable))
        memset(&self.types, 0, sizeof(Growable))
        memset(&self.header_lists, 0, sizeof(Growable))
        memset(&self.hkey_offsets, 0, sizeof(Growable))
        memset(&self.hkey_data, 0, sizeof(Growable))
        memset(&self.hvalue_offsets, 0, sizeof(Growable))
        memset(&self.hvalue_data, 0, sizeof(Growable))
        memset(&self.hvalue_valid, 0, sizeof(Growable))
        self.headers = headers
        self.timestamp_types = timestamp_types
        self.timestamp_micros = timestamp_micros
        self._start()

    cdef _start(self):
        self.count = 0
        self.key_nulls = 0
        self.value_nulls = 0
        self.header_count = 0
        self.hvalue_nulls = 0
        _start_offsets(&self.key_offsets)
        _start_offsets(&self.value_offsets)
        if self.headers:
            _start_offsets(&self.header_lists)
            _start_offsets(&self.hkey_offsets)
            _start_offsets(&self.hvalue_offsets)

    def __dealloc__(self):
        # The next task's builder starts from these.
        _pool_give(self.offsets.data, self.offsets.capacity)
        _pool_give(self.timestamps.data, self.timestamps.capacity)
        _pool_give(self.key_offsets.data, self.key_offsets.capacity)
        _pool_give(self.key_data.data, self.key_data.capacity)
        free(self.key_valid.data)
        _pool_give(self.value_offsets.data, self.value_offsets.capacity)
        _pool_give(self.value_data.data, self.value_data.capacity)
        free(self.value_valid.data)
        free(self.types.data)
        free(self.header_lists.data)
        free(self.hkey_offsets.data)
        free(self.hkey_data.data)
        free(self.hvalue_offsets.data)
        free(self.hvalue_data.data)
        free(self.hvalue_valid.data)

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
        return self._add(buf, <const unsigned char*>b.buf.buf, b.buf.len, pos, start_offset, bounded, stop,
                         skip_control, verify_crc, max_decompressed)

    def add_entries(self, buf, Py_ssize_t pos, int64_t start_offset, int64_t end_offset, Py_ssize_t max_rows, *,
                    bint verify_crc=True, Py_ssize_t max_decompressed=DEFAULT_MAX_DECOMPRESSED):
        """Add the records with start_offset <= offset < end_offset of the v2 batches from `pos` on,
        control batches left out, one after another without returning to Python per batch.

        Returns (position, why): where it stopped and why (ENTRIES_NEED_BYTES: no whole entry left
        there; ENTRIES_END: the entry there begins at or past end_offset, nothing of it checked;
        ENTRIES_FULL: the builder holds max_rows rows or more; ENTRIES_LEGACY: a magic 0/1 entry
        is there). A corrupt batch raises CorruptRecordError.
        """
        cdef _Buffer b = _Buffer(buf)
        cdef const unsigned char* p = <const unsigned char*>b.buf.buf
        cdef Py_ssize_t n = b.buf.len
        cdef int32_t length
        cdef int why = ENTRIES_NEED_BYTES
        if self.count == 0 and self.value_data.data == NULL:
            self._presize(_filled_sizes)
        while self.count < max_rows:
            if pos < 0 or n - pos < ENTRY_PREFIX_SIZE:
                break
            if read_be64(p + pos + BASE_OFFSET_AT) >= end_offset:
                why = ENTRIES_END
                break
            length = read_be32(p + pos + BATCH_LENGTH_AT)
            if length >= 0 and <int64_t>length + LOG_OVERHEAD > n - pos:
                break  # a partial tail: the caller reads on from `pos`
            if p[pos + MAGIC_AT] != 2:
                why = ENTRIES_LEGACY
                break
            self._add(buf, p, n, pos, start_offset, True, end_offset, True, verify_crc, max_decompressed)
            pos += LOG_OVERHEAD + length
        else:
            why = ENTRIES_FULL
            self.filled = True
        return pos, why

    cdef BatchHeader _add(self, object buf, const unsigned char* p, Py_ssize_t size, Py_ssize_t pos,
                          int64_t start_offset, bint bounded, int64_t stop, bint skip_control, bint verify_crc,
                          Py_ssize_t max_decompressed):
        cdef BatchHeader h = _checked_header(buf, p, size, pos, 0, verify_crc)
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
        if self.timestamp_types:
            _reserve(&self.types, 4 * <Py_ssize_t>count)
        if self.headers:
            _reserve(&self.header_lists, 4 * <Py_ssize_t>count)
        # Bits past the committed rows may be left over from a rejected batch.
        _clear_bits_from(&self.key_valid, self.count, total)
        _clear_bits_from(&self.value_valid, self.count, total)
        cdef ColumnarAppend c
        cdef ColumnarExtra x
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
        cdef bint extra = self.headers or self.timestamp_types
        cdef Py_ssize_t i
        cdef int64_t* micros = <int64_t*>self.timestamps.data
        if extra:
            x.types = <int32_t*>self.types.data if self.timestamp_types else NULL
            x.header_lists = <int32_t*>self.header_lists.data if self.headers else NULL
            x.hkey_offsets = &self.hkey_offsets
            x.hkey_data = &self.hkey_data
            x.hvalue_offsets = &self.hvalue_offsets
            x.hvalue_data = &self.hvalue_data
            x.hvalue_valid = &self.hvalue_valid
            x.headers = self.header_count
            x.hkey_size = self.hkey_data.size
            x.hvalue_size = self.hvalue_data.size
            x.hvalue_nulls = self.hvalue_nulls
        self.held_bytes += end - start
        cdef bint release = self.held_bytes >= NOGIL_BYTES
        if release:
            self.held_bytes = 0
        if extra:
            if not release:
                rc = _columnar_append_extra(&c, &x, p, start, end, &e)
            else:
                with nogil:
                    rc = _columnar_append_extra(&c, &x, p, start, end, &e)
        elif not release:
            rc = _columnar_append(&c, p, start, end, &e)
        else:
            with nogil:
                rc = _columnar_append(&c, p, start, end, &e)
        if rc == 0 and self.timestamp_micros:
            for i in range(self.count, c.n):
                micros[i] *= 1000
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
        if self.headers:
            if x.hkey_size > 2147483647 or x.hvalue_size > 2147483647 or x.headers > 2147483647:
                raise OverflowError("header columns exceed 2 GiB or 2^31 headers; finish() more often")
            self.header_count = x.headers
            self.hkey_data.size = x.hkey_size
            self.hvalue_data.size = x.hvalue_size
            self.hvalue_nulls = x.hvalue_nulls
            self.header_lists.size = 4 * (n + 1)
            self.hkey_offsets.size = 4 * (x.headers + 1)
            self.hvalue_offsets.size = 4 * (x.headers + 1)
        if self.timestamp_types:
            self.types.size = 4 * n
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
        """Hand the buffers to a Columns object and start empty, with room for as many bytes as these held."""
        cdef Py_ssize_t[9] used = [self.offsets.size, self.timestamps.size, self.key_offsets.size,
                                   self.key_data.size, self.value_offsets.size, self.value_data.size,
                                   (self.count + 7) // 8, (self.count + 7) // 8, self.types.size]
        cdef Columns c = Columns.__new__(Columns)
        c.count = self.count
        c.timestamp_micros = self.timestamp_micros
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
        if self.timestamp_types:
            c.timestamp_types = self._take(&self.types)
        if self.headers:
            self.hvalue_valid.size = (self.header_count + 7) // 8
            c.header_count = self.header_count
            c.header_offsets = self._take(&self.header_lists)
            c.header_key_offsets = self._take(&self.hkey_offsets)
            c.header_key_data = self._take(&self.hkey_data)
            c.header_value_offsets = self._take(&self.hvalue_offsets)
            c.header_value_data = self._take(&self.hvalue_data)
            c.header_value_validity = self._take(&self.hvalue_valid)
            c.header_value_null_count = self.hvalue_nulls
        # The next batch is most likely the same size: reserving it now spares the doublings' copies.
        self._presize(used)
        if self.filled:
            _filled_sizes[:] = used
            self.filled = False
        self._start()
        return c

    cdef _presize(self, Py_ssize_t* used):
        """Room in each buffer for the bytes `used` names (and an eighth more), pooled blocks first."""
        cdef Growable* grown[9]
        grown[:] = [&self.offsets, &self.timestamps, &self.key_offsets, &self.key_data, &self.value_offsets,
                    &self.value_data, &self.key_valid, &self.value_valid, &self.types]
        cdef int i
        cdef Py_ssize_t want
        for i in range(9):
            want = used[i] + used[i] // 8
            if grown[i].capacity < want and (i != 8 or self.timestamp_types):
                _refill(grown[i], want)

    cdef NativeBuffer _take(self, Growable* g):
        cdef NativeBuffer nb = _adopt(g.data, g.size, g.capacity)
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
