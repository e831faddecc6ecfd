# The embedded producer's send, natively where nothing needs deciding.
# Included by record_batch.pyx, after encode.pxi (BatchBuilder) and arrow_encode.pxi (_murmur2).

cdef extern from *:
    """
    /* An instance of `type` (a subclass of PendingRecord that adds no state) without a call through Python. */
    static PyObject* logstore_new_record(PyObject* type, PyObject* no_args) {
        return ((PyTypeObject*)type)->tp_new((PyTypeObject*)type, no_args, NULL);
    }
    """
    object logstore_new_record(object type, object no_args)


cdef class PendingRecord:
    """A sent record: its batch, its index there and its timestamp (the embedded RecordFuture's state)."""

    cdef readonly object _batch
    cdef readonly Py_ssize_t _index
    cdef readonly int64_t _timestamp

    def __init__(self, batch, Py_ssize_t index, int64_t timestamp):
        self._batch = batch
        self._index = index
        self._timestamp = timestamp


cdef class SendPath:
    """The base of the embedded producer: `send` appends to an open batch here, in one native call, when the
    producer may send without a check (its `_fast`), the partition is known from the partitioner's caches, and
    the record fits the batch; anything else goes to the subclass's `_send`, which decides under the lock.

    Per record, Python's share of a send (the lock, the state and ACL checks, the partitioner, the timestamp,
    the future) costs several times the record's encoding; a C client's produce() costs about the encoding.
    """

    cdef object _held                   # the producer's RLock, which `_send` and the upkeep take too,
    cdef object _acquire, _release      # and its bound methods
    cdef public dict _open              # (topic, partition) -> the producer's open batch (`.builder`)
    cdef public dict _counts            # the partitioner's partition counts and sticky partitions, valid while
    cdef public dict _sticky            # `_version` is the store's `topics_version` (`_send` keeps it so)
    cdef public object _version
    cdef public object _store
    cdef public bint _fast              # the state and ACLs let a record through unchecked
    cdef public Py_ssize_t _batch_bytes
    cdef public bint _linger_zero
    cdef object _record_type

    @property
    def _lock(self):
        """The producer's lock (an RLock)."""
        return self._held

    @_lock.setter
    def _lock(self, lock):
        self._held, self._acquire, self._release = lock, lock.acquire, lock.release

    @property
    def _future_type(self):
        """What `send` returns: a subclass of PendingRecord that adds no state."""
        return self._record_type

    @_future_type.setter
    def _future_type(self, future_type):
        if not issubclass(future_type, PendingRecord) or future_type.__basicsize__ != PendingRecord.__basicsize__:
            raise TypeError(f"{future_type!r} must be a subclass of PendingRecord that adds no state")
        self._record_type = future_type

    def send(self, topic, value=None, key=None, *, partition=None, timestamp=None, headers=None):
        """Queue a record; the future settles once its batch is written (see the module doc)."""
        cdef object future
        if self._fast:
            future = self._send_open(topic, value, key, partition, timestamp, headers)
            if future is not None:
                return future
        return self._send(topic, value, key, partition, timestamp, headers)

    cdef object _send_open(self, object topic, object value, object key, object partition, object timestamp,
                           object headers):
        # The future, or None for `_send` to decide: nothing was appended then.
        cdef Py_ssize_t p
        cdef int64_t ts
        self._acquire()
        try:
            if not self._fast or self._record_type is None:
                return None
            p = self._partition(topic, key, partition)
            if p < 0:
                return None
            tp = (topic, p)
            batch = self._open.get(tp)
            if batch is None:
                return None
            builder = batch.builder
            if type(builder) is not BatchBuilder:
                return None
            if timestamp is None:
                ts = _now_ms()
            elif type(timestamp) is int:
                ts = timestamp
            else:
                return None
            if (<BatchBuilder>builder)._put(ts, key, value, headers, self._batch_bytes) == 0:
                return None
            future = logstore_new_record(self._record_type, _EMPTY_TUPLE)
            (<PendingRecord>future)._batch = batch
            (<PendingRecord>future)._index = (<BatchBuilder>builder).count - 1
            (<PendingRecord>future)._timestamp = ts
            if self._linger_zero or HEADER_SIZE + (<BatchBuilder>builder).size >= self._batch_bytes:
                self._write([tp])
            return future
        finally:
            self._release()

    cdef Py_ssize_t _partition(self, object topic, object key, object partition) except -2:
        # The partitioner's answer from its caches, or -1 where it would have to look further.
        if self._version != self._store.topics_version:
            return -1
        if partition is None and key is None:
            sticky = self._sticky.get(topic)
            return -1 if sticky is None else sticky
        counted = self._counts.get(topic)
        if counted is None:
            return -1
        cdef Py_ssize_t count = counted
        if partition is not None:
            return partition if type(partition) is int and 0 <= partition < count else -1
        if type(key) is not bytes:
            return -1
        return (_murmur2(<const unsigned char*>PyBytes_AS_STRING(key), len(<bytes>key)) & 0x7FFFFFFF) % count
