# Included by wire.pyx after small_wire.pxi: the codecs of the two requests a transactional producer sends
# with every transaction besides its Produce, AddPartitionsToTxn (v0-3, the producers' form) and EndTxn.
# Through kio their decode and encode cost a transaction about 30 us of broker CPU (issue 30).

DEF ADD_PARTITIONS_FIRST_FLEXIBLE = 3
DEF ADD_PARTITIONS_LAST_SERVED = 3
DEF END_TXN_FIRST_FLEXIBLE = 3
DEF END_TXN_FIRST_WITH_PRODUCER = 5


cdef class AddPartitionsToTxnTopic:
    """One topic of an AddPartitionsToTxn v0-3 request: its name and partition indexes."""
    cdef readonly str name
    cdef readonly list partitions

    def __repr__(self):
        return f"AddPartitionsToTxnTopic(name={self.name!r}, partitions={self.partitions!r})"


cdef class AddPartitionsToTxnRequest:
    """An AddPartitionsToTxn request body (v0-3) with kio's field names."""
    cdef readonly str v3_and_below_transactional_id
    cdef readonly int64_t v3_and_below_producer_id
    cdef readonly int16_t v3_and_below_producer_epoch
    cdef readonly list v3_and_below_topics

    def __repr__(self):
        return (f"AddPartitionsToTxnRequest(v3_and_below_transactional_id={self.v3_and_below_transactional_id!r}, "
                f"v3_and_below_producer_id={self.v3_and_below_producer_id}, "
                f"v3_and_below_producer_epoch={self.v3_and_below_producer_epoch}, "
                f"v3_and_below_topics={self.v3_and_below_topics!r})")


def decode_add_partitions_to_txn(frame):
    """(client_id, AddPartitionsToTxnRequest) of a whole AddPartitionsToTxn v0-3 frame (after the size)."""
    cdef const uint8_t[::1] view = frame
    cdef Cursor c
    cdef int16_t version = request_head(&c, view, 0, ADD_PARTITIONS_LAST_SERVED, "AddPartitionsToTxn")
    cdef bint flexible = version >= ADD_PARTITIONS_FIRST_FLEXIBLE
    client_id = read_string(&c, False, True)
    if flexible:
        skip_tagged_fields(&c)
    cdef AddPartitionsToTxnRequest request = AddPartitionsToTxnRequest.__new__(AddPartitionsToTxnRequest)
    request.v3_and_below_transactional_id = read_string(&c, flexible, False)
    request.v3_and_below_producer_id = read_i64(&c)
    request.v3_and_below_producer_epoch = read_i16(&c)
    cdef Py_ssize_t topics = read_length(&c, flexible)
    cdef Py_ssize_t partitions, t, p
    cdef AddPartitionsToTxnTopic topic
    if topics < 0:
        raise WireError("an AddPartitionsToTxn request with a null topic array")
    # Every element takes at least a byte: a count above the bytes left is refused before a list grows.
    need(&c, topics)
    request.v3_and_below_topics = []
    for t in range(topics):
        topic = AddPartitionsToTxnTopic.__new__(AddPartitionsToTxnTopic)
        topic.name = read_string(&c, flexible, False)
        partitions = read_length(&c, flexible)
        if partitions < 0:
            raise WireError(f"topic {topic.name!r} has a null partition array")
        need(&c, 4 * partitions)
        topic.partitions = [read_i32(&c) for p in range(partitions)]
        if flexible:
            skip_tagged_fields(&c)
        request.v3_and_below_topics.append(topic)
    if flexible:
        skip_tagged_fields(&c)
    return client_id, request


cdef class EndTxnRequest:
    """An EndTxn request body (v0-5) with kio's field names."""
    cdef readonly str transactional_id
    cdef readonly int64_t producer_id
    cdef readonly int16_t producer_epoch
    cdef readonly bint committed

    def __repr__(self):
        return (f"EndTxnRequest(transactional_id={self.transactional_id!r}, producer_id={self.producer_id}, "
                f"producer_epoch={self.producer_epoch}, committed={self.committed})")


def decode_end_txn(frame):
    """(client_id, EndTxnRequest) of a whole EndTxn v0-5 frame (the bytes after the size)."""
    cdef const uint8_t[::1] view = frame
    cdef Cursor c
    cdef int16_t version = request_head(&c, view, 0, 5, "EndTxn")
    cdef bint flexible = version >= END_TXN_FIRST_FLEXIBLE
    client_id = read_string(&c, False, True)
    if flexible:
        skip_tagged_fields(&c)
    cdef EndTxnRequest request = EndTxnRequest.__new__(EndTxnRequest)
    request.transactional_id = read_string(&c, flexible, False)
    request.producer_id = read_i64(&c)
    request.producer_epoch = read_i16(&c)
    need(&c, 1)
    # Kafka reads a boolean as any byte other than zero.
    request.committed = c.data[c.pos] != 0
    c.pos += 1
    if flexible:
        skip_tagged_fields(&c)
    return client_id, request


def encode_add_partitions_to_txn(int32_t correlation_id, int version, int32_t throttle_ms, list topics):
    """The frame of an AddPartitionsToTxn v0-3 response, as one part in a list.

    `topics` is [(name, [(partition_index, error_code), ...]), ...].
    """
    if not 0 <= version <= ADD_PARTITIONS_LAST_SERVED:
        raise WireError(f"AddPartitionsToTxn v{version} is not encoded here")
    cdef bint flexible = version >= ADD_PARTITIONS_FIRST_FLEXIBLE
    cdef _Writer w = response_head(correlation_id, flexible)
    w.i32(throttle_ms)
    partition_errors(w, topics, flexible)
    return framed(w)


def encode_end_txn(int32_t correlation_id, int version, int32_t throttle_ms, int16_t error_code,
                   int64_t producer_id, int16_t producer_epoch):
    """The frame of an EndTxn v0-5 response, as one part in a list (the producer id and epoch from v5)."""
    if not 0 <= version <= 5:
        raise WireError(f"EndTxn v{version} is not encoded here")
    cdef bint flexible = version >= END_TXN_FIRST_FLEXIBLE
    cdef _Writer w = response_head(correlation_id, flexible)
    w.i32(throttle_ms)
    w.i16(error_code)
    if version >= END_TXN_FIRST_WITH_PRODUCER:
        w.i64(producer_id)
        w.i16(producer_epoch)
    if flexible:
        w.uvarint(0)
    return framed(w)
