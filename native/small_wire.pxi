# Included by wire.pyx: the codecs of the most frequent small exchanges. A consumer commits its offsets
# about as often as it fetches, and every produce is answered: through kio these cost more broker CPU than
# the coordinator's work or the append itself (issue 30). Their answers are `PartitionRows` in Python:
# topics of (partition, error code, ...) tuples, written here with kio's exact bytes.

DEF OFFSET_COMMIT_FIRST_FLEXIBLE = 8
DEF PRODUCE_RESPONSE_FIRST_FLEXIBLE = 9


cdef inline int64_t read_i64(Cursor* c) except? -1:
    need(c, 8)
    cdef const uint8_t* p = c.data + c.pos
    cdef uint64_t value = 0
    cdef int i
    for i in range(8):
        value = (value << 8) | p[i]
    c.pos += 8
    return <int64_t>value


cdef class OffsetCommitPartition:
    """One partition of an OffsetCommit request."""
    cdef readonly int32_t partition_index
    cdef readonly int64_t committed_offset
    cdef readonly int32_t committed_leader_epoch
    cdef readonly object committed_metadata

    def __repr__(self):
        return (f"OffsetCommitPartition(partition_index={self.partition_index}, "
                f"committed_offset={self.committed_offset}, committed_leader_epoch={self.committed_leader_epoch}, "
                f"committed_metadata={self.committed_metadata!r})")


cdef class OffsetCommitTopic:
    """One topic of an OffsetCommit request."""
    cdef readonly str name
    cdef readonly list partitions

    def __repr__(self):
        return f"OffsetCommitTopic(name={self.name!r}, partitions={self.partitions!r})"


cdef class OffsetCommitRequest:
    """An OffsetCommit request body (v2-9) with kio's field names; `retention_time` in ms, -1 from v5."""
    cdef readonly str group_id
    cdef readonly int32_t generation_id_or_member_epoch
    cdef readonly str member_id
    cdef readonly object group_instance_id
    cdef readonly int64_t retention_time
    cdef readonly list topics

    def __repr__(self):
        return (f"OffsetCommitRequest(group_id={self.group_id!r}, "
                f"generation_id_or_member_epoch={self.generation_id_or_member_epoch}, member_id={self.member_id!r}, "
                f"group_instance_id={self.group_instance_id!r}, retention_time={self.retention_time}, "
                f"topics={self.topics!r})")


cdef int16_t request_head(Cursor* c, const uint8_t[::1] view, int16_t first, int16_t last, str name) except? -1:
    """Point `c` at the frame in `view`, past the api key, version and correlation id; the version, which
    must be in first..last."""
    c.data = &view[0] if view.shape[0] else NULL
    c.pos = 0
    c.end = view.shape[0]
    read_i16(c)
    cdef int16_t version = read_i16(c)
    read_i32(c)
    if not first <= version <= last:
        raise WireError(f"{name} v{version} is not decoded here")
    return version


def decode_offset_commit(frame):
    """(client_id, OffsetCommitRequest) of a whole OffsetCommit v2-9 frame (the bytes after the size)."""
    cdef const uint8_t[::1] view = frame
    cdef Cursor c
    cdef int16_t version = request_head(&c, view, 2, 9, "OffsetCommit")
    cdef bint flexible = version >= OFFSET_COMMIT_FIRST_FLEXIBLE
    # The header's client id is an int16 string in header v1 and v2 alike.
    client_id = read_string(&c, False, True)
    if flexible:
        skip_tagged_fields(&c)
    cdef OffsetCommitRequest request = OffsetCommitRequest.__new__(OffsetCommitRequest)
    request.group_id = read_string(&c, flexible, False)
    request.generation_id_or_member_epoch = read_i32(&c)
    request.member_id = read_string(&c, flexible, False)
    request.group_instance_id = read_string(&c, flexible, True) if version >= 7 else None
    request.retention_time = read_i64(&c) if version <= 4 else -1
    cdef Py_ssize_t topics = read_length(&c, flexible)
    cdef Py_ssize_t partitions, t, p
    cdef OffsetCommitTopic topic
    cdef OffsetCommitPartition partition
    if topics < 0:
        raise WireError("an OffsetCommit request with a null topic array")
    # Every element takes at least a byte: a count above the bytes left is refused before a list grows.
    need(&c, topics)
    request.topics = []
    for t in range(topics):
        topic = OffsetCommitTopic.__new__(OffsetCommitTopic)
        topic.name = read_string(&c, flexible, False)
        partitions = read_length(&c, flexible)
        if partitions < 0:
            raise WireError(f"topic {topic.name!r} has a null partition array")
        need(&c, partitions)
        topic.partitions = []
        for p in range(partitions):
            partition = OffsetCommitPartition.__new__(OffsetCommitPartition)
            partition.partition_index = read_i32(&c)
            partition.committed_offset = read_i64(&c)
            partition.committed_leader_epoch = read_i32(&c) if version >= 6 else -1
            partition.committed_metadata = read_string(&c, flexible, True)
            if flexible:
                skip_tagged_fields(&c)
            topic.partitions.append(partition)
        if flexible:
            skip_tagged_fields(&c)
        request.topics.append(topic)
    if flexible:
        skip_tagged_fields(&c)
    return client_id, request


cdef int nullable_string(_Writer w, object s, bint flexible) except -1:
    if s is None:
        if flexible:
            return w.uvarint(0)
        return w.i16(-1)
    return w.string(s, flexible)


cdef list framed(_Writer w):
    """The writer's bytes as a whole frame: its first four bytes (reserved) become the size."""
    cdef uint32_t size = <uint32_t>(w.pos - 4)
    w.buf[0] = (size >> 24) & 0xFF
    w.buf[1] = (size >> 16) & 0xFF
    w.buf[2] = (size >> 8) & 0xFF
    w.buf[3] = size & 0xFF
    return [PyBytes_FromStringAndSize(<const char*>w.buf, w.pos)]


cdef _Writer response_head(int32_t correlation_id, bint flexible):
    cdef _Writer w = _Writer()
    w.i32(0)  # the size, set by `framed`
    w.i32(correlation_id)
    if flexible:
        w.uvarint(0)  # response header v1: no tagged fields
    return w


def encode_offset_commit(int32_t correlation_id, int version, int32_t throttle_ms, list topics):
    """The frame of an OffsetCommit v2-9 response, as one part in a list.

    `topics` is [(name, [(partition_index, error_code), ...]), ...].
    """
    if not 2 <= version <= 9:
        raise WireError(f"OffsetCommit v{version} is not encoded here")
    cdef bint flexible = version >= OFFSET_COMMIT_FIRST_FLEXIBLE
    cdef _Writer w = response_head(correlation_id, flexible)
    if version >= 3:
        w.i32(throttle_ms)
    partition_errors(w, topics, flexible)
    return framed(w)


cdef int partition_errors(_Writer w, list topics, bint flexible) except -1:
    """What OffsetCommit and AddPartitionsToTxn answers end with: topics of (partition_index, error_code)
    rows, and the body's tag section."""
    cdef tuple row
    cdef list rows
    w.length(len(topics), flexible)
    for name, rows in topics:
        w.string(name, flexible)
        w.length(len(rows), flexible)
        for row in rows:
            w.i32(row[0])
            w.i16(row[1])
            if flexible:
                w.uvarint(0)
        if flexible:
            w.uvarint(0)
    if flexible:
        w.uvarint(0)
    return 0


def encode_produce(int32_t correlation_id, int version, int32_t throttle_ms, list topics):
    """The frame of a Produce v3-12 response, as one part in a list.

    `topics` is [(name, [row, ...]), ...], a row (index, error_code,
    base_offset, log_append_time_ms, log_start_offset, record_errors,
    error_message) with record_errors [(batch_index, message or None), ...];
    -1 is "none" for the times and offsets. The tagged current_leader and
    node_endpoints (v10+) are left out: this broker leads every partition.
    """
    if not 3 <= version <= 12:
        raise WireError(f"Produce v{version} is not encoded here")
    cdef bint flexible = version >= PRODUCE_RESPONSE_FIRST_FLEXIBLE
    cdef _Writer w = response_head(correlation_id, flexible)
    w.length(len(topics), flexible)
    cdef tuple row
    cdef list rows
    for name, rows in topics:
        w.string(name, flexible)
        w.length(len(rows), flexible)
        for row in rows:
            w.i32(row[0])
            w.i16(row[1])
            w.i64(row[2])
            w.i64(row[3])
            if version >= 5:
                w.i64(row[4])
            if version >= 8:
                errors = row[5]
                w.length(len(errors), flexible)
                for batch_index, message in errors:
                    w.i32(batch_index)
                    nullable_string(w, message, flexible)
                    if flexible:
                        w.uvarint(0)
                nullable_string(w, row[6], flexible)
            if flexible:
                w.uvarint(0)
        if flexible:
            w.uvarint(0)
    w.i32(throttle_ms)
    if flexible:
        w.uvarint(0)
    return framed(w)
