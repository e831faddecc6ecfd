# cython: language_level=3
"""`__consumer_offsets` replayed from decoded columns: committed offsets and group metadata.

A group coordinator's load makes one committed offset per (group, topic,
partition) ever committed: a million for 10,000 groups of 100 partitions.
Record objects and a struct-decoded key and value per record cost about
3 µs each; here each row of a `Columns` (record_batch's columnar decode,
CRCs already checked) is read in place and lands in the caller's dicts as a
`CommittedOffset`, the coordinator's value type, defined here so that the
replay fills one in place.

The layouts read (group_log.py has Kafka's full schemas; a string is an
int16 length and that many UTF-8 bytes):

    OffsetCommitKey    int16 version 0|1, string group, string topic, int32 partition
    GroupMetadataKey   int16 version 2, string group
    OffsetCommitValue  int16 version 0..3, int64 offset, int32 leaderEpoch (v3),
                       string metadata, int64 commitTimestamp, int64 expireTimestamp (v1)

Any other row (key types 3 and up: KIP-848 and share-group records; value
v4, the flexible one; a length that does not fit, bytes that are not UTF-8)
stops the replay at that row, for the Python decoders to apply or refuse.
`plain_run` finds the batches whose records go to columns: plain v2 ones
(batch_header.pxd's layout), neither transactional nor control.
"""
cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.dict cimport PyDict_GetItem, PyDict_SetItem
from cpython.object cimport PyObject, PyObject_RichCompare
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int16_t, int32_t, int64_t
from libc.string cimport memcmp

from batch_header cimport (
    ATTRIBUTES_AT,
    BASE_OFFSET_AT,
    BATCH_LENGTH_AT,
    CONTROL_FLAG,
    ENTRY_PREFIX_SIZE,
    LAST_OFFSET_DELTA_AT,
    LOG_OVERHEAD,
    MAGIC_AT,
    MIN_BATCH_LENGTH,
    TRANSACTIONAL_FLAG,
    read_be16,
    read_be32,
    read_be64,
)


cdef extern from *:
    """
    /* A group's offsets hold (str, int) keys and CommittedOffset values (no references but to a str): no
       cycle can pass through them, yet the collector would visit every entry of every group at each full
       collection (a million for the load above). Untracked, it does not; CPython tracks a dict again by
       itself when something that may hold a reference cycle is put in it. */
    static void ls_untrack(PyObject *d) {
        if (PyObject_GC_IsTracked(d)) PyObject_GC_UnTrack(d);
    }

    /* A (topic, partition) key: its items are a str and an int, so the collector need never see it. */
    static PyObject *ls_pair(PyObject *a, PyObject *b) {
        PyObject *t = PyTuple_Pack(2, a, b);
        if (t != NULL) PyObject_GC_UnTrack(t);
        return t;
    }
    """
    dict _PyDict_NewPresized(Py_ssize_t size)
    object ls_pair(object a, object b)
    void ls_untrack(object d)


# Partitions below this share their keys across groups; a higher one gets a key of its own.
cdef enum:
    MAX_SHARED_PARTITION = 1 << 16


cdef inline bint _bit(const unsigned char* bits, Py_ssize_t row) noexcept nogil:
    return (bits[row >> 3] >> (row & 7)) & 1


cdef object _utf8(const unsigned char* p, Py_ssize_t n):
    """The str of UTF-8 bytes, or None when they are not UTF-8 (the row is then the Python decoders')."""
    try:
        return PyUnicode_DecodeUTF8(<const char*>p, n, NULL)
    except UnicodeDecodeError:
        return None


cdef class _Text:
    """The str of the last bytes decoded: the rows of a batch repeat their group and topic."""

    cdef const unsigned char* at
    cdef Py_ssize_t size
    cdef object text

    cdef object of(self, const unsigned char* p, Py_ssize_t n):
        if n == 0:
            return ""
        if self.text is None or n != self.size or (p != self.at and memcmp(p, self.at, n) != 0):
            self.text = _utf8(p, n)
            self.at, self.size = p, n
        return self.text


_FIELDS = ("offset", "leader_epoch", "metadata", "commit_timestamp", "expire_timestamp", "log_offset")


@cython.final
@cython.no_gc
cdef class CommittedOffset:
    """A committed offset, and where its record sits in `__consumer_offsets` (the later record wins): offset,
    leader epoch, metadata, commit and expire timestamps (ms since the epoch, -1 for none), log offset (-1
    before its record is written). Immutable, and compared, unpacked and `_replace`d as the named tuple it
    replaces.

    A coordinator's start makes one per offset ever committed, so it is one 64-byte object with its numbers in
    place, where a tuple of them took 96 bytes and two int objects 64 more: replaying a million went from 146
    to 92 ns an offset, much of the difference the page faults of a heap grown by 96 MB less. It references
    nothing but a str (or None), so the collector never tracks it.
    """

    cdef readonly int64_t offset
    cdef readonly int32_t leader_epoch
    cdef readonly str metadata
    cdef readonly int64_t commit_timestamp
    cdef readonly int64_t expire_timestamp
    cdef readonly int64_t log_offset

    _fields = _FIELDS

    def __init__(self, int64_t offset, int32_t leader_epoch, str metadata, int64_t commit_timestamp,
                 int64_t expire_timestamp=-1, int64_t log_offset=-1):
        self.offset, self.leader_epoch, self.metadata = offset, leader_epoch, metadata
        self.commit_timestamp, self.expire_timestamp, self.log_offset = commit_timestamp, expire_timestamp, log_offset

    def _replace(self, **changes) -> CommittedOffset:
        """A copy with the named fields changed."""
        values = dict(zip(_FIELDS, self._tuple()))
        unknown = changes.keys() - values.keys()
        if unknown:
            raise ValueError(f"got unexpected field names: {sorted(unknown)!r}")
        values.update(changes)
        return CommittedOffset(**values)

    cdef tuple _tuple(self):
        return (self.offset, self.leader_epoch, self.metadata, self.commit_timestamp, self.expire_timestamp,
                self.log_offset)

    def __len__(self):
        return 6

    def __getitem__(self, index):
        return self._tuple()[index]

    def __iter__(self):
        return iter(self._tuple())

    def __richcmp__(self, other, int op):
        if isinstance(other, CommittedOffset):
            other = (<CommittedOffset>other)._tuple()
        elif not isinstance(other, tuple):
            return NotImplemented
        return PyObject_RichCompare(self._tuple(), other, op)

    def __hash__(self):
        return hash(self._tuple())

    def __repr__(self):
        return (f"CommittedOffset(offset={self.offset}, leader_epoch={self.leader_epoch}, "
                f"metadata={self.metadata!r}, commit_timestamp={self.commit_timestamp}, "
                f"expire_timestamp={self.expire_timestamp}, log_offset={self.log_offset})")

    def __reduce__(self):
        return CommittedOffset, self._tuple()


cdef class OffsetReplay:
    """Applies the rows of one `Columns` (every record a plain, non-transactional batch held, in log order)
    to `offsets` (group id -> {(topic, partition): committed}) and `metadata` (group id -> (log offset,
    GroupMetadataValue bytes, or None for a tombstone)), as the coordinator's load keeps them: a commit
    replaces its partition's offset, an offset tombstone removes it, a group's last metadata record wins.

    `topic_keys` (topic -> its (topic, partition) keys by partition) may be shared by the replays of a whole
    load, so that every group of a topic, in any partition, holds the same keys. Holds the columns' buffers
    while it lives; not thread-safe.
    """

    cdef readonly Py_ssize_t count
    # The columns' buffers, held for the pointers below.
    cdef object buffers
    cdef const int64_t* log_offsets
    cdef const int32_t* key_at
    cdef const unsigned char* keys
    cdef const unsigned char* key_valid
    cdef const int32_t* value_at
    cdef const unsigned char* values
    cdef const unsigned char* value_valid
    cdef dict offsets
    cdef dict metadata
    cdef _Text groups, topics, texts
    cdef object group_id
    cdef dict group_offsets
    # The key of the last offset row read, whose group and topic are `group_id` and `topic`: the rows of a
    # commit differ in their partition only.
    cdef const unsigned char* last_key
    cdef Py_ssize_t last_size
    # topic -> [(topic, partition) by partition]: every group of a topic shares its keys (and topic str)
    cdef dict topic_keys
    cdef object topic
    cdef list keys_of_topic

    def __init__(self, columns, dict offsets not None, dict metadata not None, dict topic_keys=None):
        # The columns are little-endian, as Arrow's buffers on the hosts logstore builds for: native here.
        cdef const int64_t[::1] log_offsets = memoryview(columns.offsets).cast("q")
        cdef const int32_t[::1] key_at = memoryview(columns.key_offsets).cast("i")
        cdef const int32_t[::1] value_at = memoryview(columns.value_offsets).cast("i")
        cdef const unsigned char[::1] keys = columns.key_data
        cdef const unsigned char[::1] key_valid = columns.key_validity
        cdef const unsigned char[::1] values = columns.value_data
        cdef const unsigned char[::1] value_valid = columns.value_validity
        self.offsets, self.metadata = offsets, metadata
        self.groups, self.topics, self.texts = _Text(), _Text(), _Text()
        self.topic_keys = {} if topic_keys is None else topic_keys
        self.count = columns.count
        if self.count == 0:  # no row: no pointer is ever read
            return
        if log_offsets.shape[0] < self.count or key_at.shape[0] <= self.count or value_at.shape[0] <= self.count \
                or key_valid.shape[0] * 8 < self.count or value_valid.shape[0] * 8 < self.count:
            raise ValueError(f"columns shorter than their {self.count} rows")
        self.buffers = (log_offsets, key_at, value_at, keys, key_valid, values, value_valid)
        self.log_offsets, self.key_at, self.value_at = &log_offsets[0], &key_at[0], &value_at[0]
        self.key_valid, self.value_valid = &key_valid[0], &value_valid[0]
        self.keys = &keys[0] if keys.shape[0] else NULL
        self.values = &values[0] if values.shape[0] else NULL

    def offset(self, Py_ssize_t row) -> int:
        """The log offset of a row."""
        self._check(row)
        return self.log_offsets[row]

    def key(self, Py_ssize_t row) -> bytes | None:
        """A row's key bytes, or None."""
        self._check(row)
        if not _bit(self.key_valid, row):
            return None
        return PyBytes_FromStringAndSize(<const char*>self.keys + self.key_at[row],
                                         self.key_at[row + 1] - self.key_at[row])

    def value(self, Py_ssize_t row) -> bytes | None:
        """A row's value bytes, or None."""
        self._check(row)
        return self._value(row)

    def replay(self, Py_ssize_t start, Py_ssize_t stop) -> int:
        """Apply the rows from `start` below `stop`; the first row left to the caller, or `stop` when none is."""
        if start < 0 or stop > self.count:
            raise IndexError(f"rows {start}..{stop} of {self.count}")
        # The caller may have changed any group's offsets since the last call.
        self.group_id, self.group_offsets = None, None
        self.last_key, self.last_size = NULL, 0
        try:
            return self._replay(start, stop)
        finally:
            self._leave_group()

    cdef Py_ssize_t _replay(self, Py_ssize_t start, Py_ssize_t stop) except -1:
        cdef Py_ssize_t row, size
        cdef const unsigned char* key
        cdef int16_t version
        for row in range(start, stop):
            if not _bit(self.key_valid, row):
                continue  # a null key is nothing a coordinator keeps
            key = self.keys + self.key_at[row]
            size = self.key_at[row + 1] - self.key_at[row]
            if size < 4:
                return row
            version = read_be16(key)
            if version == 0 or version == 1:
                if not self._offset_row(row, key, size):
                    return row
            elif version == 2:
                if not self._group_row(row, key, size):
                    return row
            else:
                return row
        return stop

    cdef bint _offset_row(self, Py_ssize_t row, const unsigned char* key, Py_ssize_t size) except -1:
        cdef Py_ssize_t group_size, topic_at, topic_size
        cdef PyObject* found
        if size == self.last_size and memcmp(key + 2, self.last_key + 2, size - 6) == 0:
            tp = self._key(self.topic, read_be32(key + size - 4))  # the last row's group and topic
        else:
            group_size = read_be16(key + 2)
            topic_at = 4 + group_size
            if group_size < 0 or topic_at + 2 > size:
                return False
            topic_size = read_be16(key + topic_at)
            if topic_size < 0 or topic_at + 2 + topic_size + 4 != size:
                return False
            group = self.groups.of(key + 4, group_size)
            topic = self.topics.of(key + topic_at + 2, topic_size)
            if group is None or topic is None:
                return False
            if group is not self.group_id:
                self._leave_group()
                found = PyDict_GetItem(self.offsets, group)
                self.group_offsets = <dict><object>found if found != NULL else None
                self.group_id = group
            tp = self._key(topic, read_be32(key + size - 4))
            self.last_key, self.last_size = key, size
        if not _bit(self.value_valid, row):
            if self.group_offsets is not None:
                self.group_offsets.pop(tp, None)
            return True
        committed = self._committed(row)
        if committed is None:
            return False
        if self.group_offsets is None:
            # Sized at once for the group's rows that follow (a commit's partitions, in one batch).
            self.group_offsets = _PyDict_NewPresized(self._same_group(row, key + 2, read_be16(key + 2)))
            PyDict_SetItem(self.offsets, self.group_id, self.group_offsets)
        PyDict_SetItem(self.group_offsets, tp, committed)
        return True

    cdef Py_ssize_t _same_group(self, Py_ssize_t row, const unsigned char* group, Py_ssize_t size) noexcept:
        """How many rows from `row` on have keys of the same group (`group`: its length and bytes)."""
        cdef Py_ssize_t end = row + 1
        cdef const unsigned char* key
        while end < self.count and _bit(self.key_valid, end):
            key = self.keys + self.key_at[end]
            if self.key_at[end + 1] - self.key_at[end] < 4 + size or memcmp(key + 2, group, 2 + size) != 0:
                break
            end += 1
        return end - row

    cdef void _leave_group(self):
        if self.group_offsets is not None:
            ls_untrack(self.group_offsets)

    cdef object _key(self, object topic, int32_t partition):
        """The (topic, partition) key, shared by every group of the topic."""
        cdef PyObject* found
        cdef Py_ssize_t have
        if topic is not self.topic:
            found = PyDict_GetItem(self.topic_keys, topic)
            if found == NULL:
                self.keys_of_topic = []
                PyDict_SetItem(self.topic_keys, topic, self.keys_of_topic)
            else:
                self.keys_of_topic = <list><object>found
            self.topic = topic
        if partition < 0 or partition >= MAX_SHARED_PARTITION:
            return ls_pair(topic, partition)
        have = len(self.keys_of_topic)
        if partition < have:
            tp = self.keys_of_topic[partition]
            if tp is not None:
                return tp
        else:
            self.keys_of_topic.extend([None] * (partition + 1 - have))
        tp = self.keys_of_topic[partition] = ls_pair(topic, partition)
        return tp

    cdef CommittedOffset _committed(self, Py_ssize_t row):
        """The row's OffsetCommitValue v0..v3, or None for any other value."""
        cdef const unsigned char* p = self.values + self.value_at[row]
        cdef Py_ssize_t size = self.value_at[row + 1] - self.value_at[row]
        cdef Py_ssize_t at, text_size
        cdef int16_t version
        cdef int32_t leader_epoch = -1
        if size < 2:
            return None
        version = read_be16(p)
        if version < 0 or version > 3:
            return None
        at = 14 if version == 3 else 10
        if at + 2 > size:
            return None
        if version == 3:
            leader_epoch = read_be32(p + 10)
        text_size = read_be16(p + at)
        if text_size < 0 or at + 2 + text_size + (16 if version == 1 else 8) != size:
            return None
        text = self.texts.of(p + at + 2, text_size)
        if text is None:
            return None
        at += 2 + text_size
        cdef CommittedOffset committed = CommittedOffset.__new__(CommittedOffset)
        committed.offset = read_be64(p + 2)
        committed.leader_epoch = leader_epoch
        committed.metadata = text
        committed.commit_timestamp = read_be64(p + at)
        committed.expire_timestamp = read_be64(p + at + 8) if version == 1 else -1
        committed.log_offset = self.log_offsets[row]
        return committed

    cdef bint _group_row(self, Py_ssize_t row, const unsigned char* key, Py_ssize_t size) except -1:
        cdef Py_ssize_t group_size = read_be16(key + 2)
        if group_size < 0 or 4 + group_size != size:
            return False
        group = self.groups.of(key + 4, group_size)
        if group is None:
            return False
        PyDict_SetItem(self.metadata, group, (self.log_offsets[row], self._value(row)))
        return True

    cdef object _value(self, Py_ssize_t row):
        if not _bit(self.value_valid, row):
            return None
        return PyBytes_FromStringAndSize(<const char*>self.values + self.value_at[row],
                                         self.value_at[row + 1] - self.value_at[row])

    cdef int _check(self, Py_ssize_t row) except -1:
        if row < 0 or row >= self.count:
            raise IndexError(f"row {row} of {self.count}")
        return 0



cdef struct _Cursor:
    const unsigned char* p
    Py_ssize_t at
    Py_ssize_t size
    bint bad


cdef inline int64_t _int(_Cursor* c, Py_ssize_t n) noexcept:
    """A big-endian int of n (2, 4 or 8) bytes; 0 and `bad` past the end."""
    if c.bad or c.size - c.at < n:
        c.bad = True
        return 0
    c.at += n
    if n == 2:
        return read_be16(c.p + c.at - 2)
    if n == 4:
        return read_be32(c.p + c.at - 4)
    return read_be64(c.p + c.at - 8)


cdef object _string(_Cursor* c, bint nullable):
    """An int16-length string (None when null and `nullable`); None and `bad` when it does not parse."""
    cdef Py_ssize_t n = _int(c, 2)
    if c.bad or n < 0:
        c.bad = c.bad or not nullable
        return None
    if c.size - c.at < n:
        c.bad = True
        return None
    text = _utf8(c.p + c.at, n)
    c.at += n
    c.bad = text is None
    return text


cdef object _blob(_Cursor* c):
    """int32-length bytes, b"" for null (what group_log's decoder keeps); `bad` when they do not fit."""
    cdef Py_ssize_t n = _int(c, 4)
    if c.bad or n < 0:
        return b""
    if c.size - c.at < n:
        c.bad = True
        return b""
    c.at += n
    return PyBytes_FromStringAndSize(<const char*>c.p + c.at - n, n)


def group_metadata(const unsigned char[::1] value not None):
    """A GroupMetadataValue of version 0..3 as (protocolType, generation, protocol, leader,
    currentStateTimestamp, members), each member (memberId, groupInstanceId, clientId, clientHost,
    rebalanceTimeout, sessionTimeout, subscription, assignment) with group_log's defaults for fields its
    version lacks; None for v4 (flexible) or bytes that do not parse, which group_log's decoder reads or
    refuses."""
    cdef _Cursor c
    cdef int64_t version, count, i, rebalance, session
    c.p, c.at, c.size, c.bad = &value[0] if value.shape[0] else NULL, 0, value.shape[0], False
    version = _int(&c, 2)
    if c.bad or version < 0 or version > 3:
        return None
    protocol_type = _string(&c, False)
    generation = _int(&c, 4)
    protocol = _string(&c, True)
    leader = _string(&c, True)
    timestamp = _int(&c, 8) if version >= 2 else -1
    count = _int(&c, 4)
    # Every member takes at least 18 bytes (three strings and a timeout, two blobs' lengths).
    if c.bad or count < 0 or count > (c.size - c.at) // 18:
        return None
    members = []
    for i in range(count):
        member_id = _string(&c, False)
        instance_id = _string(&c, True) if version >= 3 else None
        client_id = _string(&c, False)
        client_host = _string(&c, False)
        rebalance = _int(&c, 4) if version >= 1 else -1
        session = _int(&c, 4)
        if version == 0:
            rebalance = session  # v0 predates the rebalance timeout: Kafka uses the session timeout
        subscription = _blob(&c)
        assignment = _blob(&c)
        if c.bad:
            return None
        members.append((member_id, instance_id, client_id, client_host, rebalance, session, subscription,
                        assignment))
    if c.bad or c.at != c.size:
        return None
    return protocol_type, generation, protocol, leader, timestamp, members


def plain_run(buf, Py_ssize_t pos):
    """(position, next offset) after the whole v2 batches from `pos` on that are neither transactional nor
    control (header fields only: the columns' decode checks each CRC); (pos, -1) when the entry at `pos`
    is not one, or is not whole. A length below a batch's minimum ends the run, for the entry walk to
    refuse."""
    cdef Py_buffer view
    cdef const unsigned char* p
    cdef Py_ssize_t size, at = pos
    cdef int64_t length, next_offset = -1
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        p, size = <const unsigned char*>view.buf, view.len
        if pos < 0 or pos > size:
            raise IndexError(f"position {pos} of {size} bytes")
        while size - at >= ENTRY_PREFIX_SIZE and p[at + MAGIC_AT] == 2:
            length = read_be32(p + at + BATCH_LENGTH_AT)
            if length < MIN_BATCH_LENGTH or length + LOG_OVERHEAD > size - at:
                break
            if read_be16(p + at + ATTRIBUTES_AT) & (TRANSACTIONAL_FLAG | CONTROL_FLAG):
                break
            next_offset = read_be64(p + at + BASE_OFFSET_AT) + read_be32(p + at + LAST_OFFSET_DELTA_AT) + 1
            at += length + LOG_OVERHEAD
        return at, next_offset
    finally:
        PyBuffer_Release(&view)
