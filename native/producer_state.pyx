# cython: language_level=3
"""The per-partition producer-state table: dedup, fencing and open transactions in C.

One fixed C record per producer id (on-disk-format.md §8.1, Kafka's
ProducerStateEntry), no Python object per producer, 152 bytes:

    0   producerId int64 | currentTxnFirstOffset int64 (-1: none)
    16  lastSeq int32 x5 | offsetDelta int32 x5          (the batch ring)
    56  coordinatorEpoch int32 (-1: none) | producerEpoch int16 (-1: unknown)
    62  ring head uint8 | ring count uint8
    64  lastTimestamp int64 (-1: none) | lastOffset int64 x5 | timestamp int64 x5

The first 64 bytes are all that the duplicate and sequence checks read. A
cached batch's first offset is lastOffset - offsetDelta and its first
sequence lastSeq - offsetDelta wrapped at Int32.MAX (Kafka's
DefaultRecordBatch.decrementSequence), so neither is stored.

Records live in chunks of 4,096 (one malloc each, never moved, so growth
copies nothing and at most one chunk is partly empty; only chunk 0 starts
small and doubles up to 4,096, so a partition with few producers holds a
few KB), addressed by a dense index 0..len-1. An open-addressing hash of
int32 record indexes keyed by producer id (linear probing, Fibonacci
hashing, load at most 3/4) finds them. Removal moves the last record into
the hole and repoints its hash slot; the removed record's slot is closed by
backward-shift deletion, so there are no tombstones. About 152 + 4 / load
(5-11) bytes per producer.

Snapshot layout (§7, ProducerSnapshot version 1, big-endian):

    0 version int16 = 1 | 2 crc uint32 (CRC-32C of bytes [6, end)) | 6 count int32
    10 + 46 k: producerId int64 | epoch int16 | lastSequence int32 | lastOffset int64 |
               offsetDelta int32 | timestamp int64 | coordinatorEpoch int32 |
               currentTxnFirstOffset int64
"""
cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy, memset

cdef extern from *:
    void __builtin_prefetch(const void* address, int rw) noexcept nogil

from collections import namedtuple as _namedtuple

from crc32c import crc32c as _crc32c

from logstore.errors import CorruptSnapshotError

cdef enum:
    RING = 5                   # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN
    CHUNK_SHIFT = 12
    CHUNK_ENTRIES = 1 << CHUNK_SHIFT
    CHUNK_MASK = CHUNK_ENTRIES - 1
    MIN_SLOTS = 16
    MIN_CHUNK0 = 16
    STAGE_KEEP = 16            # staged records kept allocated between appends
    SNAPSHOT_V1 = 1
    SNAPSHOT_HEADER = 10
    SNAPSHOT_ENTRY = 46
    CRC_START = 6
    # Origins and error codes, for the C code; the Python names are below.
    FROM_CLIENT = 0
    FROM_COORDINATOR = 1
    FROM_REPLICATION = 2
    OK = 0
    OUT_OF_ORDER = 45
    BAD_EPOCH = 47
    BAD_TXN_STATE = 48
    COORDINATOR_FENCED = 52
    DUPLICATE_BATCH = 1

cdef int32_t INT32_MAX = 2147483647
cdef uint64_t FIBONACCI = 0x9E3779B97F4A7C15ULL

# Kafka error codes the checks answer with (logstore.errors has the full table).
NONE = OK
OUT_OF_ORDER_SEQUENCE_NUMBER = OUT_OF_ORDER
INVALID_PRODUCER_EPOCH = BAD_EPOCH
INVALID_TXN_STATE = BAD_TXN_STATE
TRANSACTION_COORDINATOR_FENCED = COORDINATOR_FENCED
DUPLICATE = DUPLICATE_BATCH  # append_batch only: a retry of a cached batch

# Who appends (Kafka's AppendOrigin): what the checks skip.
ORIGIN_CLIENT = FROM_CLIENT            # full validation
ORIGIN_COORDINATOR = FROM_COORDINATOR  # the group coordinator's offset commits: no sequence checks
ORIGIN_REPLICATION = FROM_REPLICATION  # followers and log recovery: no checks at all

SNAPSHOT_VERSION = SNAPSHOT_V1
NUM_BATCHES_TO_RETAIN = RING

ProducerEntry = _namedtuple("ProducerEntry", (
    "producer_id", "epoch", "coordinator_epoch", "txn_first_offset", "last_timestamp", "batches"),
    # Without it namedtuple guesses the module from the caller's frame, which a Cython module lacks,
    # and the entries neither pickle nor repr under their own module.
    module=__name__)
ProducerEntry.__doc__ = """One producer's state, copied out of the table (not a live view).

`epoch` is -1 when unknown, `coordinator_epoch` -1 before any marker,
`txn_first_offset` the first offset of its open transaction or -1,
`last_timestamp` (ms) -1 before any batch or marker. `batches` lists the
cached batch metadata oldest first, each `(first_seq, last_seq,
first_offset, last_offset, timestamp)`, at most 5.
"""


ctypedef struct Entry:
    # First 64 bytes: all that find_duplicate and check_batch read.
    int64_t producer_id
    int64_t txn_first_offset      # -1: no open transaction
    int32_t last_seq[RING]        # the batch ring, one array per field
    int32_t offset_delta[RING]
    int32_t coordinator_epoch
    int16_t epoch
    uint8_t head                  # ring position of the oldest batch
    uint8_t count                 # batches in the ring, 0..5
    # The rest is written by updates.
    int64_t last_timestamp
    int64_t last_offset[RING]
    int64_t timestamp[RING]


ctypedef struct Staged:
    # Kafka's ProducerAppendInfo.updatedEntry: the committed entry's fields
    # with only the batches of the staged append in its ring.
    Entry entry
    int32_t committed_last_seq  # last sequence of the committed entry (-1: none)
    int16_t committed_epoch     # epoch of the committed entry (-1: no entry)


cdef inline int32_t _decrement_sequence(int32_t seq, int32_t by) noexcept nogil:
    # Java int arithmetic (wrapping), as DefaultRecordBatch.decrementSequence.
    if seq < by:
        return <int32_t>(<uint32_t>INT32_MAX - (<uint32_t>by - <uint32_t>seq) + 1u)
    return <int32_t>(<uint32_t>seq - <uint32_t>by)


cdef inline bint _in_sequence(int32_t last_seq, int32_t next_seq) noexcept nogil:
    return <int64_t>next_seq == <int64_t>last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


cdef inline int64_t _java_sub(int64_t a, int64_t b) noexcept nogil:
    # Java long subtraction (wrapping), as Kafka's expiration test computes it.
    return <int64_t>(<uint64_t>a - <uint64_t>b)


cdef inline void _init_entry(Entry* e, int64_t pid) noexcept nogil:
    memset(e, 0, sizeof(Entry))
    e.producer_id = pid
    e.txn_first_offset = -1
    e.last_timestamp = -1
    e.coordinator_epoch = -1
    e.epoch = -1


cdef inline int _last_pos(Entry* e) noexcept nogil:
    """Ring position of the newest batch; the ring must not be empty."""
    return (e.head + e.count - 1) % RING


cdef inline int32_t _last_seq(Entry* e) noexcept nogil:
    return -1 if e.count == 0 else e.last_seq[_last_pos(e)]


cdef inline void _push_batch(Entry* e, int32_t last_seq, int64_t last_offset, int32_t offset_delta,
                             int64_t timestamp) noexcept nogil:
    cdef int k
    if e.count < RING:
        k = (e.head + e.count) % RING
        e.count += 1
    else:
        k = e.head
        e.head = (e.head + 1) % RING
    e.last_seq[k] = last_seq
    e.offset_delta[k] = offset_delta
    e.last_offset[k] = last_offset
    e.timestamp[k] = timestamp


cdef inline void _prefetch_for_update(Entry* e) noexcept nogil:
    # The checks read the first 64 bytes; an update then writes the rest. On a
    # large table that is a cache miss of its own: start it now, so it overlaps
    # the interpreter's work between the calls.
    __builtin_prefetch(<char*>e + 64, 1)
    __builtin_prefetch(<char*>e + 128, 1)
    __builtin_prefetch(<char*>e + sizeof(Entry) - 1, 1)


cdef inline void _set_epoch(Entry* e, int16_t epoch) noexcept nogil:
    # ProducerStateEntry.maybeUpdateProducerEpoch: a new epoch forgets the batches.
    if e.epoch != epoch:
        e.epoch = epoch
        e.head = 0
        e.count = 0


cdef inline int64_t _add_batch(Entry* e, int16_t epoch, int32_t last_seq, int64_t first_offset,
                               int64_t last_offset, int64_t timestamp, bint transactional) noexcept nogil:
    # ProducerStateEntry.addBatch plus ProducerAppendInfo's transaction start.
    _set_epoch(e, epoch)
    # Kafka narrows the long offset difference to an int.
    _push_batch(e, last_seq, last_offset, <int32_t><uint32_t>_java_sub(last_offset, first_offset), timestamp)
    e.last_timestamp = timestamp
    if transactional and e.txn_first_offset < 0:
        e.txn_first_offset = first_offset
        return first_offset
    return -1


cdef inline int64_t _add_marker(Entry* e, int16_t epoch, int32_t coordinator_epoch,
                                int64_t timestamp) noexcept nogil:
    # ProducerAppendInfo.appendEndTxnMarker after its checks: ProducerStateEntry.update.
    cdef int64_t completed = e.txn_first_offset
    _set_epoch(e, epoch)
    e.coordinator_epoch = coordinator_epoch
    e.txn_first_offset = -1
    e.last_timestamp = timestamp
    return completed if completed >= 0 else -1


cdef inline void _merge(Entry* committed, Entry* updated) noexcept nogil:
    # ProducerStateEntry.update(nextEntry): the committed batches survive unless
    # the epoch changed; the staged append's batches are pushed after them.
    cdef int i, k
    _set_epoch(committed, updated.epoch)
    for i in range(updated.count):
        k = (updated.head + i) % RING
        _push_batch(committed, updated.last_seq[k], updated.last_offset[k], updated.offset_delta[k],
                    updated.timestamp[k])
    committed.coordinator_epoch = updated.coordinator_epoch
    committed.txn_first_offset = updated.txn_first_offset
    committed.last_timestamp = updated.last_timestamp


cdef object _entry_object(Entry* e):
    cdef int i, k
    batches = []
    for i in range(e.count):
        k = (e.head + i) % RING
        batches.append((_decrement_sequence(e.last_seq[k], e.offset_delta[k]), e.last_seq[k],
                        _java_sub(e.last_offset[k], e.offset_delta[k]), e.last_offset[k], e.timestamp[k]))
    return ProducerEntry(e.producer_id, e.epoch, e.coordinator_epoch, e.txn_first_offset,
                         e.last_timestamp, batches)


cdef inline uint32_t _get32(const uint8_t* p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | <uint32_t>p[3]


cdef inline int64_t _get64(const uint8_t* p) noexcept nogil:
    return <int64_t>((<uint64_t>_get32(p) << 32) | <uint64_t>_get32(p + 4))


cdef inline void _put16(uint8_t* p, uint16_t v) noexcept nogil:
    p[0] = v >> 8
    p[1] = v


cdef inline void _put32(uint8_t* p, uint32_t v) noexcept nogil:
    p[0] = v >> 24
    p[1] = v >> 16
    p[2] = v >> 8
    p[3] = v


cdef inline void _put64(uint8_t* p, uint64_t v) noexcept nogil:
    _put32(p, <uint32_t>(v >> 32))
    _put32(p + 4, <uint32_t>v)


@cython.final
@cython.binding(False)
cdef class ProducerTable:
    """Producer id → epoch, coordinator epoch, open transaction, last timestamp, last 5 batches.

    Owns: C memory only (`memory_bytes()`), nothing on disk; `to_snapshot()`
    and `from_snapshot()` convert to and from `.snapshot` file bytes, the
    caller writes and reads the files.

    Invariants: one record per producer id; at most 5 cached batches, oldest
    dropped first, all cleared when the epoch changes; a producer with an
    open transaction is never expired.

    The append path, per batch of a client append (§8.2):
    `find_duplicate` (against committed state), then `check_batch` (a
    Kafka error code, 0 if accepted; mutates nothing), then `update_batch`.
    Markers: `check_marker`, then `update_marker`. Several batches of one
    append are prepared between `begin()` and `commit()` (or `rollback()`):
    while staged, checks and updates see and change private copies, exactly
    as Kafka's ProducerAppendInfo does, and the table itself is unchanged
    until `commit()`; `remove`, `clear` and `expire` refuse to run then.

    Units: offsets are log offsets, timestamps and durations milliseconds.
    Not thread-safe and not task-safe: one owner (the partition's Log, under
    its append lock) serialises every call.
    """

    cdef Entry** chunks
    cdef Py_ssize_t nchunks          # chunks allocated
    cdef Py_ssize_t chunks_cap       # length of the chunks pointer array
    cdef Py_ssize_t chunk0_cap       # records chunk 0 holds (16..4,096)
    cdef Py_ssize_t count            # records in use: indexes 0..count-1
    cdef int32_t* slots              # hash: record index, or -1 for empty
    cdef Py_ssize_t nslots           # a power of two
    cdef int shift                   # 64 - log2(nslots)
    cdef Staged* stage
    cdef Py_ssize_t stage_len
    cdef Py_ssize_t stage_cap
    cdef Py_ssize_t stage_hint       # the stage record used last
    cdef bint staged
    cdef uint64_t changes            # inserts and removals, for items()
    cdef readonly int64_t opened_txn  # set by append_batch: the transaction it opened, or -1
    cdef readonly object duplicate    # set by append_batch: the cached batch it matched

    def __cinit__(self, Py_ssize_t capacity_hint=0):
        self.chunks = NULL
        self.slots = NULL
        self.stage = NULL
        self.opened_txn = -1
        self._alloc_slots(MIN_SLOTS)
        if capacity_hint > 0:
            self._reserve(capacity_hint)

    def __dealloc__(self):
        cdef Py_ssize_t i
        if self.chunks != NULL:
            for i in range(self.nchunks):
                free(self.chunks[i])
            free(self.chunks)
        free(self.slots)
        free(self.stage)

    # -- storage ---------------------------------------------------------------------

    cdef inline Entry* _at(self, Py_ssize_t index) noexcept nogil:
        return &self.chunks[index >> CHUNK_SHIFT][index & CHUNK_MASK]

    cdef inline Py_ssize_t _home(self, int64_t pid) noexcept nogil:
        return <Py_ssize_t>((<uint64_t>pid * FIBONACCI) >> self.shift)

    cdef inline Py_ssize_t _probe(self, int64_t pid) noexcept nogil:
        """The slot holding pid's record index, or the empty slot where it would go."""
        cdef Py_ssize_t mask = self.nslots - 1
        cdef Py_ssize_t h = self._home(pid)
        cdef int32_t s
        while True:
            s = self.slots[h]
            if s < 0 or self._at(s).producer_id == pid:
                return h
            h = (h + 1) & mask

    cdef inline Entry* _lookup(self, int64_t pid) noexcept nogil:
        cdef int32_t s = self.slots[self._probe(pid)]
        return NULL if s < 0 else self._at(s)

    cdef int _alloc_slots(self, Py_ssize_t nslots) except -1:
        cdef int32_t* slots = <int32_t*>malloc(nslots * sizeof(int32_t))
        cdef Py_ssize_t i, h, mask = nslots - 1
        cdef int bits = 0
        if slots == NULL:
            raise MemoryError()
        memset(slots, 0xFF, nslots * sizeof(int32_t))
        free(self.slots)
        self.slots = slots
        self.nslots = nslots
        while (<Py_ssize_t>1 << bits) < nslots:
            bits += 1
        self.shift = 64 - bits
        for i in range(self.count):
            h = self._home(self._at(i).producer_id)
            while slots[h] >= 0:
                h = (h + 1) & mask
            slots[h] = <int32_t>i
        return 0

    cdef int _reserve(self, Py_ssize_t n) except -1:
        """Room for n records: chunks allocated, hash sized for load <= 3/4.

        Chunk 0 starts at 16 records and doubles (realloc, moving records) up
        to 4,096, so a partition with a handful of producers holds a few KB;
        chunks 1 and up are allocated at full size and never move.
        """
        cdef Py_ssize_t want = (n + CHUNK_MASK) >> CHUNK_SHIFT
        cdef Py_ssize_t cap, nslots
        cdef Entry** grown
        cdef Entry* chunk
        if n > INT32_MAX:
            raise OverflowError("a ProducerTable holds at most 2**31 - 1 producers")
        if want > self.chunks_cap:
            cap = max(want, 2 * self.chunks_cap, 8)
            grown = <Entry**>realloc(self.chunks, cap * sizeof(Entry*))
            if grown == NULL:
                raise MemoryError()
            self.chunks = grown
            self.chunks_cap = cap
        if n > self.chunk0_cap and self.chunk0_cap < CHUNK_ENTRIES:
            cap = max(self.chunk0_cap, MIN_CHUNK0)
            while cap < n and cap < CHUNK_ENTRIES:
                cap *= 2
            chunk = <Entry*>realloc(self.chunks[0] if self.nchunks else NULL, cap * sizeof(Entry))
            if chunk == NULL:
                raise MemoryError()
            self.chunks[0] = chunk
            self.chunk0_cap = cap
            self.nchunks = max(self.nchunks, 1)
        while self.nchunks < want:
            chunk = <Entry*>malloc(CHUNK_ENTRIES * sizeof(Entry))
            if chunk == NULL:
                raise MemoryError()
            self.chunks[self.nchunks] = chunk
            self.nchunks += 1
        if 4 * n > 3 * self.nslots:
            nslots = self.nslots
            while 4 * n > 3 * nslots:
                nslots *= 2
            self._alloc_slots(nslots)
        return 0

    cdef Entry* _insert(self, int64_t pid) except NULL:
        """A fresh record for pid, which must be absent."""
        self._reserve(self.count + 1)
        cdef Py_ssize_t h = self._probe(pid)
        cdef Entry* e = self._at(self.count)
        _init_entry(e, pid)
        self.slots[h] = <int32_t>self.count
        self.count += 1
        self.changes += 1
        return e

    cdef void _delete_slot(self, Py_ssize_t hole) noexcept nogil:
        # Backward-shift deletion: pull later members of the probe run into the
        # hole while their home position allows it; the run then ends cleanly.
        cdef Py_ssize_t mask = self.nslots - 1
        cdef Py_ssize_t j = hole, home
        cdef int32_t s
        while True:
            j = (j + 1) & mask
            s = self.slots[j]
            if s < 0:
                break
            home = self._home(self._at(s).producer_id)
            if ((j - home) & mask) >= ((j - hole) & mask):
                self.slots[hole] = s
                hole = j
        self.slots[hole] = -1

    cdef void _remove_slot(self, Py_ssize_t h) noexcept nogil:
        """Remove the record that hash slot h points at."""
        cdef Py_ssize_t index = self.slots[h]
        cdef Py_ssize_t last = self.count - 1
        cdef Entry* moved
        self._delete_slot(h)
        if index != last:
            moved = self._at(last)
            self.slots[self._probe(moved.producer_id)] = <int32_t>index
            memcpy(self._at(index), moved, sizeof(Entry))
        self.count -= 1
        self.changes += 1
        # Keep at most one empty chunk: growth after a shrink is not thrashed.
        while self.nchunks > ((self.count + CHUNK_MASK) >> CHUNK_SHIFT) + 1:
            self.nchunks -= 1
            free(self.chunks[self.nchunks])
            self.chunks[self.nchunks] = NULL

    cdef int _not_staged(self, str what) except -1:
        if self.staged:
            raise RuntimeError(f"{what} while an append is staged; commit() or rollback() first")
        return 0

    # -- staging ---------------------------------------------------------------------

    cdef inline Staged* _staged(self, int64_t pid) noexcept nogil:
        cdef Py_ssize_t i = self.stage_hint
        if i < self.stage_len and self.stage[i].entry.producer_id == pid:
            return &self.stage[i]
        for i in range(self.stage_len):
            if self.stage[i].entry.producer_id == pid:
                self.stage_hint = i
                return &self.stage[i]
        return NULL

    cdef Staged* _stage_entry(self, int64_t pid) except NULL:
        """pid's staged record, made on first touch from the committed entry without its batches."""
        cdef Staged* st = self._staged(pid)
        cdef Staged* grown
        cdef Entry* committed
        cdef Py_ssize_t cap
        if st != NULL:
            return st
        if self.stage_len == self.stage_cap:
            cap = max(4, 2 * self.stage_cap)
            grown = <Staged*>realloc(self.stage, cap * sizeof(Staged))
            if grown == NULL:
                raise MemoryError()
            self.stage = grown
            self.stage_cap = cap
        st = &self.stage[self.stage_len]
        committed = self._lookup(pid)
        if committed == NULL:
            _init_entry(&st.entry, pid)
            st.committed_epoch = -1
            st.committed_last_seq = -1
        else:
            memcpy(&st.entry, committed, sizeof(Entry))
            st.entry.head = 0
            st.entry.count = 0
            st.committed_epoch = committed.epoch
            st.committed_last_seq = _last_seq(committed)
        self.stage_hint = self.stage_len
        self.stage_len += 1
        return st

    cdef void _drop_stage(self) noexcept:
        self.staged = False
        self.stage_len = 0
        self.stage_hint = 0
        if self.stage_cap > STAGE_KEEP:
            free(self.stage)
            self.stage = NULL
            self.stage_cap = 0

    def begin(self):
        """Start staging an append: until commit() or rollback(), updates change private copies."""
        if self.staged:
            raise RuntimeError("begin() while an append is already staged")
        self.staged = True
        self.stage_len = 0

    def commit(self):
        """Apply the staged updates (Kafka's ProducerStateManager.update for each producer)."""
        cdef Py_ssize_t i, h
        cdef Staged* st
        if not self.staged:
            raise RuntimeError("commit() without begin()")
        # Room for every staged producer first: nothing below can fail halfway.
        self._reserve(self.count + self.stage_len)
        for i in range(self.stage_len):
            st = &self.stage[i]
            h = self._probe(st.entry.producer_id)
            if self.slots[h] < 0:
                memcpy(self._at(self.count), &st.entry, sizeof(Entry))
                self.slots[h] = <int32_t>self.count
                self.count += 1
                self.changes += 1
            else:
                _merge(self._at(self.slots[h]), &st.entry)
        self._drop_stage()

    def rollback(self):
        """Drop the staged updates; the table is as before begin(). A no-op when nothing is staged."""
        self._drop_stage()

    @property
    def staging(self) -> bool:
        """Whether an append is staged (begin() called, no commit() or rollback() yet)."""
        return self.staged

    # -- the append path -------------------------------------------------------------

    def find_duplicate(self, int64_t pid, int16_t epoch, int32_t first_seq, int32_t last_seq, /):
        """The committed cached batch with this epoch and exactly this sequence range.

        Returns `(first_offset, last_offset, timestamp)` of the oldest such
        batch (Kafka's findDuplicateBatch), or None. Staged updates are not seen.
        """
        return self._find_duplicate(pid, epoch, first_seq, last_seq)

    cdef object _find_duplicate(self, int64_t pid, int16_t epoch, int32_t first_seq, int32_t last_seq):
        cdef Entry* e = self._lookup(pid)
        cdef int i, k
        if e == NULL:
            return None
        _prefetch_for_update(e)
        if e.epoch != epoch:
            return None
        for i in range(e.count):
            k = (e.head + i) % RING
            if e.last_seq[k] == last_seq and _decrement_sequence(last_seq, e.offset_delta[k]) == first_seq:
                return (_java_sub(e.last_offset[k], e.offset_delta[k]), e.last_offset[k], e.timestamp[k])
        return None

    def append_batch(self, int64_t pid, int16_t epoch, int32_t first_seq, int32_t last_seq,
                     int64_t first_offset, int64_t last_offset, int64_t max_timestamp, bint transactional,
                     int origin, /):
        """The append path of one data batch in one call: `find_duplicate` (client origin), then
        `check_batch`, then `update_batch` if it passed.

        Returns 0 when applied (`opened_txn` is then the first offset of a
        transaction it opened, else -1), DUPLICATE (1) when it repeats a
        cached batch (`duplicate` is then `(first_offset, last_offset,
        timestamp)`), or the Kafka error code; a duplicate or an error
        changes nothing.
        """
        cdef int code
        if origin == FROM_CLIENT:
            found = self._find_duplicate(pid, epoch, first_seq, last_seq)
            if found is not None:
                self.duplicate = found
                return DUPLICATE_BATCH
        code = self._check_batch(pid, epoch, first_seq, last_seq, transactional, origin)
        if code == OK:
            self.opened_txn = self._update_batch(pid, epoch, last_seq, first_offset, last_offset, max_timestamp,
                                                 transactional)
        return code

    def check_batch(self, int64_t pid, int16_t epoch, int32_t first_seq, int32_t last_seq,
                    bint transactional, int origin, /):
        """Validate a data batch (§8.2 steps 1-3, no duplicate check); mutates nothing.

        Returns 0, INVALID_PRODUCER_EPOCH (47), OUT_OF_ORDER_SEQUENCE_NUMBER (45)
        or INVALID_TXN_STATE (48), checked in that order. ORIGIN_COORDINATOR
        skips the sequence check, ORIGIN_REPLICATION every check (spec §8.2;
        Kafka's appendDataBatch still throws InvalidTxnState for replicated
        appends, which recovery never meets in a log a leader validated).
        While staged, the batch is checked against the staged batches of the
        producer, if any. As in Kafka, "unknown producer, any sequence"
        looks at the committed epoch: a producer new to the table is not
        sequence-checked for the whole of a staged append.
        """
        return self._check_batch(pid, epoch, first_seq, last_seq, transactional, origin)

    cdef int _check_batch(self, int64_t pid, int16_t epoch, int32_t first_seq, int32_t last_seq,
                          bint transactional, int origin) except -1:
        cdef Entry* e
        cdef Staged* st
        cdef int16_t committed_epoch
        cdef int32_t current_last_seq
        if origin == FROM_REPLICATION:
            return OK
        if origin != FROM_CLIENT and origin != FROM_COORDINATOR:
            raise ValueError(f"unknown append origin {origin}")
        st = self._staged(pid) if self.staged else NULL
        if st != NULL:
            e = &st.entry
            committed_epoch = st.committed_epoch
            if e.count:
                current_last_seq = _last_seq(e)
            elif epoch == committed_epoch:
                current_last_seq = st.committed_last_seq
            else:
                current_last_seq = -1
        else:
            e = self._lookup(pid)
            if e == NULL:
                committed_epoch = current_last_seq = -1
            else:
                _prefetch_for_update(e)
                committed_epoch = e.epoch
                current_last_seq = _last_seq(e)
        # Fencing and the sequence rules of ProducerAppendInfo.checkProducerEpoch
        # and checkSequence. "e" is Kafka's updatedEntry, committed_epoch the
        # epoch of its currentEntry.
        if e != NULL and epoch < e.epoch:
            return BAD_EPOCH
        if origin == FROM_CLIENT:
            if e == NULL or epoch != e.epoch:
                # A new epoch starts at 0, unless the producer's epoch is unknown.
                if first_seq != 0 and e != NULL and e.epoch != -1:
                    return OUT_OF_ORDER
            elif committed_epoch != -1 and not _in_sequence(current_last_seq, first_seq):
                # Same epoch and no cached batch (only a marker left, or a
                # snapshot entry without a batch): current_last_seq is -1, so
                # only sequence 0 is in order. Spec §8.8 reads as if any
                # sequence were accepted there; Kafka (checkSequence since
                # KIP-360) accepts any only when the committed epoch is unknown.
                return OUT_OF_ORDER
        if e != NULL and e.txn_first_offset >= 0 and not transactional:
            return BAD_TXN_STATE
        return OK

    def update_batch(self, int64_t pid, int16_t epoch, int32_t first_seq, int32_t last_seq,
                     int64_t first_offset, int64_t last_offset, int64_t max_timestamp, bint transactional, /):
        """Apply an accepted data batch (ProducerStateEntry.addBatch + transaction start).

        A new epoch clears the cached batches; the batch's metadata is pushed
        (the oldest of 6 is dropped); the last timestamp becomes
        `max_timestamp`; a transactional batch from a producer with no open
        transaction opens one at `first_offset`. Returns that first offset
        if this batch opened a transaction, else -1. Creates the entry if
        absent. `first_seq` is not stored: as in Kafka, the first sequence
        is derived from `last_seq` and the offset delta.
        """
        return self._update_batch(pid, epoch, last_seq, first_offset, last_offset, max_timestamp, transactional)

    cdef int64_t _update_batch(self, int64_t pid, int16_t epoch, int32_t last_seq, int64_t first_offset,
                               int64_t last_offset, int64_t max_timestamp, bint transactional) except? -2:
        return _add_batch(self._entry_to_change(pid), epoch, last_seq, first_offset, last_offset, max_timestamp,
                          transactional)

    cdef Entry* _entry_to_change(self, int64_t pid) except NULL:
        # The staged copy while an append is staged, else the committed entry (made if absent).
        cdef Entry* e
        if self.staged:
            return &self._stage_entry(pid).entry
        e = self._lookup(pid)
        return e if e != NULL else self._insert(pid)

    def check_marker(self, int64_t pid, int16_t epoch, int32_t coordinator_epoch, int origin, /):
        """Fence a COMMIT/ABORT marker (§8.3): 0, INVALID_PRODUCER_EPOCH (47) or
        TRANSACTION_COORDINATOR_FENCED (52); always 0 for ORIGIN_REPLICATION."""
        cdef Entry* e
        cdef Staged* st
        if origin == FROM_REPLICATION:
            return OK
        if origin != FROM_CLIENT and origin != FROM_COORDINATOR:
            raise ValueError(f"unknown append origin {origin}")
        st = self._staged(pid) if self.staged else NULL
        e = &st.entry if st != NULL else self._lookup(pid)
        if e == NULL:
            return OK
        if epoch < e.epoch:
            return BAD_EPOCH
        if e.coordinator_epoch > coordinator_epoch:
            return COORDINATOR_FENCED
        return OK

    def update_marker(self, int64_t pid, int16_t epoch, int32_t coordinator_epoch, int64_t timestamp, /):
        """Apply a COMMIT/ABORT marker; returns the first offset of the transaction it
        completed, or -1 if the producer had none open (the marker completes nothing).

        The epoch becomes `epoch` (clearing the batches if it changed), the
        coordinator epoch `coordinator_epoch`, the last timestamp `timestamp`;
        the open transaction is closed. Creates the entry if absent.
        """
        return _add_marker(self._entry_to_change(pid), epoch, coordinator_epoch, timestamp)

    # -- the map ---------------------------------------------------------------------

    def __len__(self):
        return self.count

    def __contains__(self, pid):
        return self._lookup(<int64_t>pid) != NULL

    def get(self, int64_t pid):
        """pid's committed state as a ProducerEntry, or None."""
        cdef Entry* e = self._lookup(pid)
        return None if e == NULL else _entry_object(e)

    def items(self):
        """Every producer's committed state as ProducerEntry, in no particular order.

        Adding or removing producers while iterating raises RuntimeError.
        """
        cdef Py_ssize_t i = 0
        cdef uint64_t changes = self.changes
        while i < self.count:
            yield _entry_object(self._at(i))
            if self.changes != changes:
                raise RuntimeError("ProducerTable changed size during iteration")
            i += 1

    def remove(self, int64_t pid):
        """Forget pid; True if it was there."""
        self._not_staged("remove()")
        cdef Py_ssize_t h = self._probe(pid)
        if self.slots[h] < 0:
            return False
        self._remove_slot(h)
        return True

    def clear(self):
        """Forget every producer and give back the memory."""
        self._not_staged("clear()")
        cdef Py_ssize_t i
        for i in range(self.nchunks):
            free(self.chunks[i])
        free(self.chunks)
        self.chunks = NULL
        self.nchunks = self.chunks_cap = self.chunk0_cap = 0
        self.count = 0
        self.changes += 1
        self._alloc_slots(MIN_SLOTS)

    def expire(self, int64_t now_ms, int64_t expiration_ms):
        """Remove producers with no open transaction idle for at least expiration_ms (§8.6).

        Idle means `now_ms - last_timestamp >= expiration_ms` (Java long
        arithmetic, as Kafka's isProducerExpired). Returns the removed ids.
        """
        self._not_staged("expire()")
        cdef Py_ssize_t i = self.count - 1
        cdef Entry* e
        removed = []
        # Downwards: the record moved into a hole comes from above, already seen.
        while i >= 0:
            e = self._at(i)
            if e.txn_first_offset < 0 and _java_sub(now_ms, e.last_timestamp) >= expiration_ms:
                removed.append(e.producer_id)
                self._remove_slot(self._probe(e.producer_id))
            i -= 1
        return removed

    def open_transactions(self):
        """`(first_offset, producer_id)` of every committed open transaction, sorted."""
        cdef Py_ssize_t i
        cdef Entry* e
        found = []
        for i in range(self.count):
            e = self._at(i)
            if e.txn_first_offset >= 0:
                found.append((e.txn_first_offset, e.producer_id))
        found.sort()
        return found

    def memory_bytes(self):
        """Bytes held by the table's own allocations (records, hash, chunk list, stage)."""
        return ((self.chunk0_cap + max(self.nchunks - 1, 0) * CHUNK_ENTRIES) * <Py_ssize_t>sizeof(Entry)
                + self.chunks_cap * <Py_ssize_t>sizeof(Entry*)
                + self.nslots * <Py_ssize_t>sizeof(int32_t)
                + self.stage_cap * <Py_ssize_t>sizeof(Staged))

    def __sizeof__(self):
        return object.__sizeof__(self) + self.memory_bytes()

    def __repr__(self):
        return f"<ProducerTable {self.count} producers, {self.memory_bytes()} bytes>"

    # -- snapshots -------------------------------------------------------------------

    def to_snapshot(self):
        """The committed state as `.snapshot` bytes (§7): only each producer's last batch."""
        cdef Py_ssize_t i, n = self.count
        cdef Entry* e
        cdef int k
        cdef uint8_t* p
        out = PyBytes_FromStringAndSize(NULL, SNAPSHOT_HEADER + SNAPSHOT_ENTRY * n)
        cdef uint8_t* base = <uint8_t*>PyBytes_AS_STRING(out)
        _put16(base, SNAPSHOT_V1)
        _put32(base + CRC_START, <uint32_t>n)
        p = base + SNAPSHOT_HEADER
        for i in range(n):
            e = self._at(i)
            _put64(p, <uint64_t>e.producer_id)
            _put16(p + 8, <uint16_t>e.epoch)
            if e.count:
                k = _last_pos(e)
                _put32(p + 10, <uint32_t>e.last_seq[k])
                _put64(p + 14, <uint64_t>e.last_offset[k])
                _put32(p + 22, <uint32_t>e.offset_delta[k])
            else:
                _put32(p + 10, <uint32_t>-1)
                _put64(p + 14, <uint64_t>-1)
                _put32(p + 22, 0)
            _put64(p + 26, <uint64_t>e.last_timestamp)
            _put32(p + 34, <uint32_t>e.coordinator_epoch)
            _put64(p + 38, <uint64_t>e.txn_first_offset)
            p += SNAPSHOT_ENTRY
        # The bytes object is still ours alone: the CRC goes in place.
        _put32(base + 2, <uint32_t>_crc32c(memoryview(out)[CRC_START:]))
        return out

    @staticmethod
    def from_snapshot(data, int64_t now_ms=-1, int64_t expiration_ms=-1):
        """A table from `.snapshot` bytes; CorruptSnapshotError if they are not a valid snapshot.

        Checked: version 1, length = 10 + 46 * count, CRC-32C. An entry
        restores one cached batch when its lastOffset >= 0 and an open
        transaction when its currentTxnFirstOffset >= 0 (as Kafka's
        readSnapshot). When `now_ms >= 0`, producers with no open transaction
        and `now_ms - timestamp >= expiration_ms` are dropped (loadFromSnapshot).
        A producer id listed twice keeps its last entry.
        """
        cdef const uint8_t[::1] view
        cdef const uint8_t* p
        cdef Py_ssize_t size, i
        cdef int64_t count, pid, last_offset, timestamp, txn
        cdef int16_t version
        cdef int32_t last_seq, delta
        cdef Entry* e
        cdef ProducerTable table
        if now_ms >= 0 and expiration_ms < 0:
            raise ValueError("from_snapshot: now_ms given without expiration_ms")
        try:
            view = memoryview(data).cast("B")
        except TypeError as exc:
            raise TypeError(f"from_snapshot needs bytes-like data, not {type(data).__name__}") from exc
        size = view.shape[0]
        if size < SNAPSHOT_HEADER:
            raise CorruptSnapshotError(f"snapshot truncated: {size} bytes, shorter than the 10-byte header")
        p = &view[0]
        version = <int16_t>((p[0] << 8) | p[1])
        if version != SNAPSHOT_V1:
            raise CorruptSnapshotError(f"snapshot has unknown version {version} (only 1 is known)")
        count = <int32_t>_get32(p + CRC_START)
        if count < 0:
            raise CorruptSnapshotError(f"snapshot entry count is negative ({count})")
        if size != SNAPSHOT_HEADER + SNAPSHOT_ENTRY * count:
            raise CorruptSnapshotError(
                f"snapshot truncated or padded: {count} entries need {SNAPSHOT_HEADER + SNAPSHOT_ENTRY * count} "
                f"bytes, found {size}")
        stored = _get32(p + 2)
        computed = _crc32c(view[CRC_START:])
        if stored != computed:
            raise CorruptSnapshotError(f"snapshot CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")
        table = ProducerTable(count)
        p += SNAPSHOT_HEADER
        for i in range(count):
            pid = _get64(p)
            last_seq = <int32_t>_get32(p + 10)
            last_offset = _get64(p + 14)
            delta = <int32_t>_get32(p + 22)
            timestamp = _get64(p + 26)
            txn = _get64(p + 38)
            if now_ms >= 0 and txn < 0 and _java_sub(now_ms, timestamp) >= expiration_ms:
                # Kafka filters before loading: an expired duplicate id does not
                # replace an earlier live one.
                p += SNAPSHOT_ENTRY
                continue
            e = table._lookup(pid)
            if e == NULL:
                e = table._insert(pid)
            else:
                _init_entry(e, pid)
            e.epoch = <int16_t>((p[8] << 8) | p[9])
            e.last_timestamp = timestamp
            e.coordinator_epoch = <int32_t>_get32(p + 34)
            e.txn_first_offset = txn if txn >= 0 else -1
            if last_offset >= 0:
                _push_batch(e, last_seq, last_offset, delta, timestamp)
            p += SNAPSHOT_ENTRY
        return table
