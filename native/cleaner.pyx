# cython: language_level=3
"""The log cleaner's hot loops: the key -> latest offset map and the batch filter.

`OffsetMap` is Kafka's SkimpyOffsetMap with a 128-bit xxh3 digest in place
of MD5: one open-addressing table in fixed memory, 20 bytes a slot (the
16-byte digest and the offset as a uint32 past `base_offset`), filled to
`load_factor` at most. Two keys whose digests collide count as one key, as
in Kafka; with 128 bits that is never expected to happen.

`filter_batch` is what Kafka's MemoryRecords.filterTo does to one v2 batch
under the cleaner's record filter (LogCleaner.shouldRetainRecord). Parsing,
hashing and copying run without the GIL; decompressing, compressing and the
CRC are library calls.

Empty slots hold 0xFFFFFFFF as their offset, so a round's end can never
reach 2^32 - 1 offsets past its start: `put` refuses such an offset as if
the map were full, and the round ends there.
"""
cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcmp, memcpy, memset

from batch_header cimport (
    ATTRIBUTES_AT,
    BASE_TIMESTAMP_AT,
    BATCH_LENGTH_AT,
    CODEC_MASK,
    CONTROL_FLAG,
    CRC_AT,
    CRC_START,
    DELETE_HORIZON_FLAG,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_AT,
    MAX_TIMESTAMP_AT,
    MIN_BATCH_LENGTH,
    MIN_RECORD_SIZE,
    RECORD_COUNT_AT,
    TIMESTAMP_TYPE_MASK,
    HeaderFields,
    read_be32,
    read_fields,
    write_be16,
    write_be32,
    write_be64,
    write_fields,
)

include "varint.pxi"

from crc32c import crc32c as _crc32c

from logstore.errors import CorruptRecordError, InvalidRecordError
from logstore.native.compression import compress, decompress

cdef extern from *:
    """
    #define XXH_INLINE_ALL
    #include "vendor/xxhash/xxhash.h"
    """
    ctypedef struct XXH128_hash_t:
        unsigned long long low64
        unsigned long long high64
    XXH128_hash_t XXH3_128bits(const void* data, size_t length) noexcept nogil

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
    int _parse_record "ls_parse_record" (const unsigned char* p, Py_ssize_t pos, Py_ssize_t end,
                                         RawRecord* r, ParseError* e) noexcept nogil
    int _check_delta "ls_check_delta" (const RawRecord* r, int32_t* prev, int32_t last_delta, Py_ssize_t pos,
                                       ParseError* e) noexcept nogil

DEF SLOT_BYTES = 20
DEF DIGEST_BYTES = 16
DEF NO_TIMESTAMP = -1

BYTES_PER_SLOT = SLOT_BYTES
cdef uint32_t EMPTY = 0xFFFFFFFFU


cdef inline void _digest(const unsigned char* key, Py_ssize_t length, unsigned char* out) noexcept nogil:
    cdef XXH128_hash_t h = XXH3_128bits(key, <size_t>length)
    memcpy(out, &h.low64, 8)
    memcpy(out + 8, &h.high64, 8)


cdef struct Kept:
    Py_ssize_t start
    Py_ssize_t end
    int64_t timestamp
    bint null_value


@cython.final
cdef class _Batch:
    """One v2 batch's header fields and its (decompressed) records, held for a filter or map pass."""

    cdef Py_buffer view, owner_view
    cdef bint held, owner_held
    cdef object owner
    cdef Py_ssize_t pos, stop
    cdef const unsigned char* head
    cdef const unsigned char* records
    cdef Py_ssize_t start, end
    cdef int64_t base_offset, last_offset, base_timestamp, max_timestamp
    cdef int16_t attributes
    cdef int32_t count

    def __cinit__(self, buf, Py_ssize_t pos):
        PyObject_GetBuffer(buf, &self.view, PyBUF_SIMPLE)
        self.held = True
        cdef const unsigned char* p = <const unsigned char*>self.view.buf
        if pos < 0 or self.view.len - pos < HEADER_SIZE:
            self.release()
            raise CorruptRecordError("batch header runs past the buffer", pos)
        cdef int32_t length = read_be32(p + pos + BATCH_LENGTH_AT)
        if p[pos + MAGIC_AT] != 2:
            self.release()
            raise CorruptRecordError(f"the cleaner's filter takes magic 2 batches, not {p[pos + MAGIC_AT]}",
                                     pos)
        if length < MIN_BATCH_LENGTH or length > self.view.len - pos - LOG_OVERHEAD:
            self.release()
            raise CorruptRecordError(f"batch length {length} is out of bounds", pos + BATCH_LENGTH_AT)
        self.pos = pos
        self.stop = pos + LOG_OVERHEAD + length
        self.head = p + pos
        cdef HeaderFields h
        read_fields(self.head, &h)
        self.base_offset = h.base_offset
        self.attributes = h.attributes
        self.last_offset = h.base_offset + h.last_offset_delta
        self.base_timestamp = h.base_timestamp
        self.max_timestamp = h.max_timestamp
        self.count = h.record_count
        cdef int codec = self.attributes & CODEC_MASK
        if codec == 0:
            self.records = p
            self.start = pos + HEADER_SIZE
            self.end = self.stop
        else:
            self.owner = decompress(codec, memoryview(buf)[pos + HEADER_SIZE:self.stop], position=pos + HEADER_SIZE)
            PyObject_GetBuffer(self.owner, &self.owner_view, PyBUF_SIMPLE)
            self.owner_held = True
            self.records = <const unsigned char*>self.owner_view.buf
            self.start = 0
            self.end = self.owner_view.len
        if self.count < 0 or self.count > (self.end - self.start) // MIN_RECORD_SIZE:
            self.release()
            raise CorruptRecordError(f"record count {self.count} cannot fit in the batch's records",
                                     pos + RECORD_COUNT_AT)

    cdef void release(self):
        if self.held:
            PyBuffer_Release(&self.view)
            self.held = False
        if self.owner_held:
            PyBuffer_Release(&self.owner_view)
            self.owner_held = False

    def __dealloc__(self):
        self.release()

    cdef raise_parse(self, ParseError* e):
        where = self.pos if self.owner is not None else e.position
        raise InvalidRecordError(e.message.decode(), where)

    cdef inline int next_record(self, Py_ssize_t* rpos, int32_t* prev, RawRecord* r, ParseError* e) noexcept nogil:
        """Parse the record at `rpos` and move past it: 0, or -1 with `e` set. Offset deltas must rise within
        lastOffsetDelta, as the validator requires of a produced batch, so that no record of a batch that lies
        about its offsets goes into the map or out of the filter."""
        cdef Py_ssize_t at = rpos[0]
        if _parse_record(self.records, at, self.end, r, e) != 0:
            return -1
        if _check_delta(r, prev, <int32_t>(self.last_offset - self.base_offset), at, e) != 0:
            return -1
        rpos[0] = r.end
        return 0

    cdef inline int check_end(self, Py_ssize_t rpos, ParseError* e) noexcept nogil:
        """0 if the records read fill the batch, as its count says they do; -1 with `e` set if bytes remain."""
        if rpos != self.end:
            e.message = "Incorrect declared batch size, records still remaining in file"
            e.position = rpos
            return -1
        return 0


cdef extern from *:
    """
    #include <sys/mman.h>
    /* The slot a digest starts probing at: Lemire's multiply-shift, no division. */
    static inline Py_ssize_t ls_slot_of(uint64_t h, Py_ssize_t slots) {
        return (Py_ssize_t)(((unsigned __int128)h * (uint64_t)slots) >> 64);
    }
    /* Anonymous memory with transparent huge pages asked for: random probes then miss the TLB far less. */
    static inline void *ls_map_table(size_t size) {
        void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            return NULL;
    #ifdef MADV_HUGEPAGE
        madvise(p, size, MADV_HUGEPAGE);
    #endif
        return p;
    }
    static inline void ls_unmap_table(void *p, size_t size) {
        if (p != NULL)
            munmap(p, size);
    }
    """
    Py_ssize_t _slot_of "ls_slot_of" (uint64_t h, Py_ssize_t slots) noexcept nogil
    void* _map_table "ls_map_table" (size_t size) noexcept nogil
    void _unmap_table "ls_unmap_table" (void* p, size_t size) noexcept nogil
    void __builtin_prefetch(const void* address, int rw) noexcept nogil


cdef struct Pending:
    unsigned char digest[16]
    int64_t offset
    unsigned char* slot


@cython.final
cdef class OffsetMap:
    """Key digest -> latest offset in fixed memory (Kafka's SkimpyOffsetMap, keyed by xxh3_128)."""

    cdef unsigned char* table
    cdef Pending* pending        # one batch's digests, hashed and prefetched before they are probed
    cdef Py_ssize_t pending_size
    cdef readonly Py_ssize_t slots
    cdef readonly Py_ssize_t capacity
    cdef readonly Py_ssize_t size
    cdef readonly int64_t base_offset
    cdef readonly int64_t latest_offset

    def __cinit__(self, Py_ssize_t memory_bytes, double load_factor=0.9):
        if not 0.0 < load_factor <= 1.0:
            raise ValueError(f"load factor {load_factor} is not in (0, 1]")
        self.slots = memory_bytes // SLOT_BYTES
        self.capacity = <Py_ssize_t>(self.slots * load_factor)
        if self.capacity < 1:
            raise ValueError(f"{memory_bytes} bytes hold no key (a slot is {SLOT_BYTES} bytes)")
        self.table = <unsigned char*>_map_table(self.slots * SLOT_BYTES)
        if self.table == NULL:
            raise MemoryError(f"cannot allocate the {memory_bytes}-byte offset map")
        self.clear(0)

    def __dealloc__(self):
        _unmap_table(self.table, self.slots * SLOT_BYTES)
        free(self.pending)

    @property
    def bytes_per_entry(self):
        """Memory per key the map can hold when filled to its load factor."""
        return <double>(self.slots * SLOT_BYTES) / self.capacity

    def clear(self, int64_t base_offset):
        """Empty the map for a round whose offsets start at `base_offset`."""
        with nogil:
            memset(self.table, 0xFF, self.slots * SLOT_BYTES)
        self.size = 0
        self.base_offset = base_offset
        self.latest_offset = -1

    cdef int _reserve(self, Py_ssize_t count) except -1:
        cdef Pending* grown
        if count > self.pending_size:
            grown = <Pending*>realloc(self.pending, count * sizeof(Pending))
            if grown == NULL:
                raise MemoryError()
            self.pending = grown
            self.pending_size = count
        return 0

    cdef inline unsigned char* _home(self, const unsigned char* digest) noexcept nogil:
        cdef uint64_t h
        memcpy(&h, digest, 8)
        return self.table + _slot_of(h, self.slots) * SLOT_BYTES

    cdef inline unsigned char* _find(self, const unsigned char* digest, unsigned char* slot) noexcept nogil:
        """The slot holding `digest`, or the empty slot where it would go, probing from `slot`."""
        cdef uint32_t rel
        cdef unsigned char* end = self.table + self.slots * SLOT_BYTES
        while True:
            memcpy(&rel, slot + DIGEST_BYTES, 4)
            if rel == EMPTY or memcmp(slot, digest, DIGEST_BYTES) == 0:
                return slot
            slot += SLOT_BYTES
            if slot == end:
                slot = self.table

    cdef inline int _store(self, const unsigned char* digest, unsigned char* home, int64_t offset) noexcept nogil:
        """1 if stored; 0 if the map is full or the offset is out of its range."""
        cdef int64_t rel = offset - self.base_offset
        if self.size >= self.capacity or rel < 0 or rel >= EMPTY:
            return 0
        cdef unsigned char* slot = self._find(digest, home)
        cdef uint32_t old
        memcpy(&old, slot + DIGEST_BYTES, 4)
        if old == EMPTY:
            memcpy(slot, digest, DIGEST_BYTES)
            self.size += 1
        cdef uint32_t value = <uint32_t>rel
        memcpy(slot + DIGEST_BYTES, &value, 4)
        self.latest_offset = offset
        return 1

    cdef inline int64_t _lookup(self, const unsigned char* digest, unsigned char* home) noexcept nogil:
        cdef unsigned char* slot = self._find(digest, home)
        cdef uint32_t rel
        memcpy(&rel, slot + DIGEST_BYTES, 4)
        if rel == EMPTY:
            return -1
        return self.base_offset + rel

    def put(self, key, int64_t offset):
        """Record `offset` as the latest for `key`; False if the map is full (or the offset out of range)."""
        cdef const unsigned char[::1] view = key
        cdef unsigned char digest[DIGEST_BYTES]
        _digest(&view[0] if len(view) else <const unsigned char*>"", len(view), digest)
        return bool(self._store(digest, self._home(digest), offset))

    def get(self, key):
        """The latest offset put for `key`, or -1."""
        cdef const unsigned char[::1] view = key
        cdef unsigned char digest[DIGEST_BYTES]
        _digest(&view[0] if len(view) else <const unsigned char*>"", len(view), digest)
        return self._lookup(digest, self._home(digest))

    def update_latest(self, int64_t offset):
        """The round has read up to `offset` (batches without keys count too, as in Kafka)."""
        if offset > self.latest_offset:
            self.latest_offset = offset

    def put_batch(self, buf, Py_ssize_t pos, int64_t start_offset):
        """Map every keyed record of the v2 data batch at `pos` from `start_offset` on; False if it filled."""
        cdef _Batch batch = _Batch(buf, pos)
        cdef RawRecord r
        cdef ParseError e
        cdef int32_t i
        cdef int rc = 0
        cdef int full = 0
        cdef Py_ssize_t n = 0, k
        cdef Py_ssize_t rpos = batch.start
        cdef int32_t prev = -1
        cdef const unsigned char* p = batch.records
        cdef Pending* q
        try:
            self._reserve(batch.count)
            with nogil:
                # Hash every key first, prefetching its home slot, so the probes below find them cached.
                for i in range(batch.count):
                    rc = batch.next_record(&rpos, &prev, &r, &e)
                    if rc != 0:
                        break
                    q = &self.pending[n]
                    q.offset = batch.base_offset + r.offset_delta
                    if r.key_pos >= 0 and q.offset >= start_offset:
                        _digest(p + r.key_pos, r.key_len, q.digest)
                        q.slot = self._home(q.digest)
                        __builtin_prefetch(q.slot, 1)
                        n += 1
                if rc == 0:
                    rc = batch.check_end(rpos, &e)
                if rc == 0:
                    for k in range(n):
                        if not self._store(self.pending[k].digest, self.pending[k].slot, self.pending[k].offset):
                            full = 1
                            break
            if rc != 0:
                batch.raise_parse(&e)
            if full:
                return False
            if batch.last_offset >= start_offset and batch.last_offset > self.latest_offset:
                self.latest_offset = batch.last_offset
            return True
        finally:
            batch.release()


cdef inline Py_ssize_t _after_timestamp(const unsigned char* p, Py_ssize_t pos, Py_ssize_t end) noexcept nogil:
    """Where a parsed record's offsetDelta starts (after length, attributes and timestampDelta)."""
    cdef int32_t length
    cdef int64_t delta
    pos = read_varint(p, pos, end, &length)
    return read_varlong(p, pos + 1, end, &delta)


def filter_batch(OffsetMap offset_map, buf, Py_ssize_t pos, *, bint discard_records, bint retain_empty,
                 bint marker_for_empty_txn, int64_t now_ms, int64_t delete_retention_ms):
    """The v2 batch at `pos` as the cleaner keeps it: (batch bytes or None if dropped, kept, removed).

    An unchanged batch comes back as a memoryview of `buf`; a changed one as
    new bytes with the same base and last offsets, producer fields and codec.
    """
    cdef _Batch batch = _Batch(buf, pos)
    cdef bint control = batch.attributes & CONTROL_FLAG
    cdef bint has_horizon = batch.attributes & DELETE_HORIZON_FLAG
    cdef bint append_time = batch.attributes & TIMESTAMP_TYPE_MASK
    cdef Kept* kept = <Kept*>malloc(max(batch.count, 1) * sizeof(Kept))
    if kept == NULL:
        batch.release()
        raise MemoryError()
    cdef RawRecord r
    cdef ParseError e
    cdef int32_t i
    cdef int rc = 0
    cdef Py_ssize_t n = 0, rpos = batch.start
    cdef int32_t prev = -1
    cdef bint tombstone = False, retain
    cdef int64_t found, latest = offset_map.latest_offset
    cdef Pending* q
    cdef const unsigned char* p = batch.records
    try:
        offset_map._reserve(batch.count)
        with nogil:
            # First pass: parse, and hash and prefetch the keys that need a lookup.
            for i in range(batch.count):
                kept[i].start = rpos
                rc = batch.next_record(&rpos, &prev, &r, &e)
                if rc != 0:
                    break
                q = &offset_map.pending[i]
                q.offset = batch.base_offset + r.offset_delta
                q.slot = NULL
                kept[i].end = r.end
                kept[i].timestamp = batch.max_timestamp if append_time else batch.base_timestamp + r.timestamp_delta
                kept[i].null_value = r.value_pos < 0
                if r.key_pos >= 0 and not (discard_records or control or q.offset > latest):
                    _digest(p + r.key_pos, r.key_len, q.digest)
                    q.slot = offset_map._home(q.digest)
                    __builtin_prefetch(q.slot, 0)
            if rc == 0:
                rc = batch.check_end(rpos, &e)
            # Second pass: Kafka's shouldRetainRecord; kept records are compacted to the front of `kept`.
            if rc == 0:
                for i in range(batch.count):
                    q = &offset_map.pending[i]
                    if discard_records:
                        retain = False
                    elif control or q.offset > latest:
                        retain = True
                    elif q.slot != NULL:
                        found = offset_map._lookup(q.digest, q.slot)
                        retain = q.offset >= found and (
                            not kept[i].null_value or not has_horizon or now_ms < batch.base_timestamp)
                    else:
                        retain = False
                    if retain:
                        if kept[i].null_value:
                            tombstone = True
                        kept[n] = kept[i]
                        n += 1
        if rc != 0:
            batch.raise_parse(&e)
        removed = batch.count - n
        if n == 0:
            if not retain_empty:
                return None, 0, removed
            return _empty_header(batch), 0, removed
        set_horizon = (tombstone or marker_for_empty_txn) and not has_horizon
        if n == batch.count and not set_horizon:
            return memoryview(buf)[batch.pos:batch.stop], n, 0
        horizon = now_ms + delete_retention_ms if set_horizon else (batch.base_timestamp if has_horizon
                                                                    else NO_TIMESTAMP)
        return _rebuild(batch, kept, n, horizon), n, removed
    finally:
        free(kept)
        batch.release()


cdef bytes _empty_header(_Batch batch):
    """Kafka's writeEmptyHeader: the batch's offsets and producer fields, no records, no codec."""
    out = PyBytes_FromStringAndSize(<const char*>batch.head, HEADER_SIZE)
    cdef unsigned char* h = <unsigned char*>PyBytes_AS_STRING(out)
    write_be32(h + BATCH_LENGTH_AT, MIN_BATCH_LENGTH)
    write_be16(h + ATTRIBUTES_AT, batch.attributes & ~(CODEC_MASK | DELETE_HORIZON_FLAG))
    write_be64(h + BASE_TIMESTAMP_AT, NO_TIMESTAMP)
    write_be32(h + RECORD_COUNT_AT, 0)
    _seal(h, HEADER_SIZE)
    return out


cdef void _seal(unsigned char* h, Py_ssize_t size):
    write_be32(h + CRC_AT, <int32_t><uint32_t>_crc32c(PyBytes_FromStringAndSize(<const char*>h + CRC_START,
                                                                           size - CRC_START)))


cdef bytes _rebuild(_Batch batch, Kept* kept, Py_ssize_t n, int64_t horizon):
    """The kept records in a new batch as Kafka's builder writes it: the base timestamp is the delete
    horizon when there is one, else the first kept record's timestamp; deltas follow from it."""
    cdef int64_t base = horizon if horizon != NO_TIMESTAMP else kept[0].timestamp
    cdef int64_t max_ts = NO_TIMESTAMP
    cdef Py_ssize_t i, total = 0, body, tail
    cdef const unsigned char* p = batch.records
    cdef unsigned char* w
    cdef bytes records
    cdef Py_ssize_t* tails = <Py_ssize_t*>malloc(n * sizeof(Py_ssize_t))
    if tails == NULL:
        raise MemoryError()
    try:
        with nogil:
            for i in range(n):
                tails[i] = _after_timestamp(p, kept[i].start, kept[i].end)
                body = 1 + varlong_size(kept[i].timestamp - base) + (kept[i].end - tails[i])
                total += varint_size(<int32_t>body) + body
                if kept[i].timestamp > max_ts:
                    max_ts = kept[i].timestamp
        records = PyBytes_FromStringAndSize(NULL, total)
        w = <unsigned char*>PyBytes_AS_STRING(records)
        with nogil:
            for i in range(n):
                tail = kept[i].end - tails[i]
                body = 1 + varlong_size(kept[i].timestamp - base) + tail
                w = write_varint(w, <int32_t>body)
                w[0] = 0
                w = write_varlong(w + 1, kept[i].timestamp - base)
                memcpy(w, p + tails[i], tail)
                w += tail
    finally:
        free(tails)
    cdef int codec = batch.attributes & CODEC_MASK
    if codec:
        records = compress(codec, records)
    cdef Py_ssize_t size = HEADER_SIZE + len(records)
    out = PyBytes_FromStringAndSize(NULL, size)
    cdef unsigned char* h = <unsigned char*>PyBytes_AS_STRING(out)
    memcpy(h, batch.head, HEADER_SIZE)
    memcpy(h + HEADER_SIZE, PyBytes_AS_STRING(records), len(records))
    write_be32(h + BATCH_LENGTH_AT, <int32_t>(size - LOG_OVERHEAD))
    cdef int16_t attributes = batch.attributes & ~DELETE_HORIZON_FLAG
    if horizon != NO_TIMESTAMP:
        attributes |= DELETE_HORIZON_FLAG
    write_be16(h + ATTRIBUTES_AT, attributes)
    write_be64(h + BASE_TIMESTAMP_AT, base)
    write_be64(h + MAX_TIMESTAMP_AT,
               batch.max_timestamp if batch.attributes & TIMESTAMP_TYPE_MASK else max_ts)
    write_be32(h + RECORD_COUNT_AT, <int32_t>n)
    _seal(h, size)
    return out


def key_digest(key):
    """The key's xxh3_128 digest in its canonical (big-endian) form, as the xxhash package prints it."""
    cdef const unsigned char[::1] view = key
    cdef XXH128_hash_t h = XXH3_128bits(&view[0] if len(view) else <const unsigned char*>"", len(view))
    return h.high64.to_bytes(8, "big") + h.low64.to_bytes(8, "big")


def empty_batch(int64_t offset):
    """A batch of no records at `offset`, without producer or timestamps: it only holds the offset."""
    cdef HeaderFields f
    memset(&f, 0, sizeof(f))
    f.base_offset = offset
    f.batch_length = MIN_BATCH_LENGTH
    f.partition_leader_epoch = -1
    f.magic = 2
    f.base_timestamp = NO_TIMESTAMP
    f.max_timestamp = NO_TIMESTAMP
    f.producer_id = -1
    f.producer_epoch = -1
    f.base_sequence = -1
    out = PyBytes_FromStringAndSize(NULL, HEADER_SIZE)
    cdef unsigned char* h = <unsigned char*>PyBytes_AS_STRING(out)
    write_fields(h, &f)
    _seal(h, HEADER_SIZE)
    return out


def count_null_keys(buf, Py_ssize_t pos):
    """How many records of the v2 batch at `pos` have no key (a compacted topic refuses them)."""
    cdef _Batch batch = _Batch(buf, pos)
    cdef RawRecord r
    cdef ParseError e
    cdef int32_t i
    cdef int rc = 0
    cdef Py_ssize_t nulls = 0, rpos = batch.start
    cdef int32_t prev = -1
    try:
        with nogil:
            for i in range(batch.count):
                rc = batch.next_record(&rpos, &prev, &r, &e)
                if rc != 0:
                    break
                if r.key_pos < 0:
                    nulls += 1
            if rc == 0:
                rc = batch.check_end(rpos, &e)
        if rc != 0:
            batch.raise_parse(&e)
        return nulls
    finally:
        batch.release()
