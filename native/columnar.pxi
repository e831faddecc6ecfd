# Columnar decode: Arrow-ready buffers, no Python object per record.
# Included by record_batch.pyx, which holds the imports and constants.


@cython.final
cdef class NativeBuffer:
    """A malloc'd byte buffer exposed through the buffer protocol (zero-copy to Arrow)."""
    cdef char* data
    cdef Py_ssize_t size
    cdef Py_ssize_t shape[1]
    cdef Py_ssize_t strides[1]

    def __dealloc__(self):
        free(self.data)

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


cdef NativeBuffer _adopt(char* data, Py_ssize_t size):
    cdef NativeBuffer nb = NativeBuffer.__new__(NativeBuffer)
    nb.data = data
    nb.size = size
    return nb


cdef int _reserve(Growable* g, Py_ssize_t extra) except -1:
    if _grow(g, g.size + extra) != 0:
        raise MemoryError()
    return 0


@cython.final
cdef class Columns:
    """Arrow-ready columns of `count` records.

    `offsets` and `timestamps` are little-endian int64; `key_offsets` and
    `value_offsets` are count+1 little-endian int32 into `key_data` /
    `value_data`; `key_validity` / `value_validity` are Arrow validity bitmaps
    (bit set = not null), with `key_null_count` / `value_null_count`.
    """
    cdef readonly Py_ssize_t count
    cdef readonly object offsets
    cdef readonly object timestamps
    cdef readonly object key_offsets
    cdef readonly object key_data
    cdef readonly object key_validity
    cdef readonly Py_ssize_t key_null_count
    cdef readonly object value_offsets
    cdef readonly object value_data
    cdef readonly object value_validity
    cdef readonly Py_ssize_t value_null_count

    def to_arrow(self):
        """A pyarrow.RecordBatch (offset, timestamp, key, value) sharing these buffers."""
        import pyarrow as pa
        n = self.count
        buf = pa.py_buffer
        arrays = [
            pa.Array.from_buffers(pa.int64(), n, [None, buf(self.offsets)]),
            pa.Array.from_buffers(pa.int64(), n, [None, buf(self.timestamps)]),
            pa.Array.from_buffers(pa.binary(), n, [buf(self.key_validity), buf(self.key_offsets),
                                                   buf(self.key_data)], self.key_null_count),
            pa.Array.from_buffers(pa.binary(), n, [buf(self.value_validity), buf(self.value_offsets),
                                                   buf(self.value_data)], self.value_null_count),
        ]
        return pa.RecordBatch.from_arrays(arrays, names=["offset", "timestamp", "key", "value"])


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
    Not thread-safe; one builder per task. No Python object is created per record.
    """
    cdef Growable offsets, timestamps, key_offsets, key_data, key_valid
    cdef Growable value_offsets, value_data, value_valid
    cdef readonly Py_ssize_t count
    cdef Py_ssize_t key_nulls, value_nulls

    def __cinit__(self):
        memset(&self.offsets, 0, sizeof(Growable))
        memset(&self.timestamps, 0, sizeof(Growable))
        memset(&self.key_offsets, 0, sizeof(Growable))
        memset(&self.key_data, 0, sizeof(Growable))
        memset(&self.key_valid, 0, sizeof(Growable))
        memset(&self.value_offsets, 0, sizeof(Growable))
        memset(&self.value_data, 0, sizeof(Growable))
        memset(&self.value_valid, 0, sizeof(Growable))
        self._start()

    cdef _start(self):
        self.count = 0
        self.key_nulls = 0
        self.value_nulls = 0
        _reserve(&self.key_offsets, 4)
        _reserve(&self.value_offsets, 4)
        (<int32_t*>self.key_offsets.data)[0] = 0
        (<int32_t*>self.value_offsets.data)[0] = 0
        self.key_offsets.size = 4
        self.value_offsets.size = 4

    def __dealloc__(self):
        free(self.offsets.data)
        free(self.timestamps.data)
        free(self.key_offsets.data)
        free(self.key_data.data)
        free(self.key_valid.data)
        free(self.value_offsets.data)
        free(self.value_data.data)
        free(self.value_valid.data)

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
        cdef const unsigned char* p = <const unsigned char*>b.buf.buf
        cdef BatchHeader h = _checked_header(buf, p, b.buf.len, pos, 0, verify_crc)
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
        # Bits past the committed rows may be left over from a rejected batch.
        _clear_bits_from(&self.key_valid, self.count, total)
        _clear_bits_from(&self.value_valid, self.count, total)
        cdef ColumnarAppend c
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
        with nogil:
            rc = _columnar_append(&c, p, start, end, &e)
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
        """Hand the buffers to a Columns object and start empty."""
        cdef Columns c = Columns.__new__(Columns)
        c.count = self.count
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
        self._start()
        return c

    cdef NativeBuffer _take(self, Growable* g):
        cdef NativeBuffer nb = _adopt(g.data, g.size)
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
