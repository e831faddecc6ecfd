# The v2 record batch header (on-disk-format.md §2, Kafka's DefaultRecordBatch):
# the one place in native/ that knows where its fields sit. record_batch.pyx
# (with its .pxi files), cleaner.pyx and legacy.pyx cimport it; everything is
# an enum or inline, so using it costs what the literals it replaces did.
#
#     0  baseOffset int64        27 baseTimestamp int64
#     8  batchLength int32       35 maxTimestamp int64
#     12 partitionLeaderEpoch    43 producerId int64
#     16 magic int8 = 2          51 producerEpoch int16
#     17 crc uint32 (CRC-32C of  53 baseSequence int32
#        bytes [21, end))        57 recordCount int32
#     21 attributes int16        61 records (one compressed blob when codec != 0)
#     23 lastOffsetDelta int32
#
# The first 17 bytes (offset, length, 4 bytes, magic) are the prefix every
# log entry shares, magic 0 and 1 included (on-disk-format.md §1).
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint16_t, uint32_t, uint64_t

cdef enum:
    BASE_OFFSET_AT = 0
    BATCH_LENGTH_AT = 8
    LEADER_EPOCH_AT = 12
    MAGIC_AT = 16
    CRC_AT = 17
    ATTRIBUTES_AT = 21
    LAST_OFFSET_DELTA_AT = 23
    BASE_TIMESTAMP_AT = 27
    MAX_TIMESTAMP_AT = 35
    PRODUCER_ID_AT = 43
    PRODUCER_EPOCH_AT = 51
    BASE_SEQUENCE_AT = 53
    RECORD_COUNT_AT = 57
    HEADER_SIZE = 61
    # batchLength counts the bytes after itself: every entry is this much longer.
    LOG_OVERHEAD = 12
    ENTRY_PREFIX_SIZE = 17
    MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
    # The CRC covers attributes to the end, so offsets and the leader epoch can be patched in place.
    CRC_START = ATTRIBUTES_AT
    # A record body is at least attributes, timestampDelta, offsetDelta,
    # keyLength, valueLength and headerCount: six bytes, plus its length
    # varint. It bounds the recordCount a header may claim.
    MIN_RECORD_SIZE = 7

# The attributes field.
cdef enum:
    CODEC_MASK = 0x07
    TIMESTAMP_TYPE_MASK = 0x08
    TRANSACTIONAL_FLAG = 0x10
    CONTROL_FLAG = 0x20
    DELETE_HORIZON_FLAG = 0x40


cdef struct HeaderFields:
    int64_t base_offset
    int32_t batch_length
    int32_t partition_leader_epoch
    int8_t magic
    uint32_t crc
    int16_t attributes
    int32_t last_offset_delta
    int64_t base_timestamp
    int64_t max_timestamp
    int64_t producer_id
    int16_t producer_epoch
    int32_t base_sequence
    int32_t record_count


cdef inline int32_t read_be32(const unsigned char* p) noexcept nogil:
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3])


cdef inline int64_t read_be64(const unsigned char* p) noexcept nogil:
    return <int64_t>((<uint64_t><uint32_t>read_be32(p) << 32) | <uint32_t>read_be32(p + 4))


cdef inline int16_t read_be16(const unsigned char* p) noexcept nogil:
    return <int16_t>((p[0] << 8) | p[1])


cdef inline void write_be16(unsigned char* p, int16_t v) noexcept nogil:
    p[0] = <unsigned char>((<uint32_t><uint16_t>v) >> 8)
    p[1] = <unsigned char>v


cdef inline void write_be32(unsigned char* p, int32_t v) noexcept nogil:
    cdef uint32_t u = <uint32_t>v
    p[0] = <unsigned char>(u >> 24)
    p[1] = <unsigned char>(u >> 16)
    p[2] = <unsigned char>(u >> 8)
    p[3] = <unsigned char>u


cdef inline void write_be64(unsigned char* p, int64_t v) noexcept nogil:
    cdef uint64_t u = <uint64_t>v
    write_be32(p, <int32_t>(u >> 32))
    write_be32(p + 4, <int32_t><uint32_t>u)


cdef inline void read_fields(const unsigned char* p, HeaderFields* h) noexcept nogil:
    """Every field of the header at `p`, which must hold HEADER_SIZE bytes; nothing is checked."""
    h.base_offset = read_be64(p + BASE_OFFSET_AT)
    h.batch_length = read_be32(p + BATCH_LENGTH_AT)
    h.partition_leader_epoch = read_be32(p + LEADER_EPOCH_AT)
    h.magic = <int8_t>p[MAGIC_AT]
    h.crc = <uint32_t>read_be32(p + CRC_AT)
    h.attributes = read_be16(p + ATTRIBUTES_AT)
    h.last_offset_delta = read_be32(p + LAST_OFFSET_DELTA_AT)
    h.base_timestamp = read_be64(p + BASE_TIMESTAMP_AT)
    h.max_timestamp = read_be64(p + MAX_TIMESTAMP_AT)
    h.producer_id = read_be64(p + PRODUCER_ID_AT)
    h.producer_epoch = read_be16(p + PRODUCER_EPOCH_AT)
    h.base_sequence = read_be32(p + BASE_SEQUENCE_AT)
    h.record_count = read_be32(p + RECORD_COUNT_AT)


cdef inline void write_fields(unsigned char* p, const HeaderFields* h) noexcept nogil:
    """Every field of `h` into the header at `p` (the CRC as given: seal it after the records)."""
    write_be64(p + BASE_OFFSET_AT, h.base_offset)
    write_be32(p + BATCH_LENGTH_AT, h.batch_length)
    write_be32(p + LEADER_EPOCH_AT, h.partition_leader_epoch)
    p[MAGIC_AT] = <unsigned char>h.magic
    write_be32(p + CRC_AT, <int32_t>h.crc)
    write_be16(p + ATTRIBUTES_AT, h.attributes)
    write_be32(p + LAST_OFFSET_DELTA_AT, h.last_offset_delta)
    write_be64(p + BASE_TIMESTAMP_AT, h.base_timestamp)
    write_be64(p + MAX_TIMESTAMP_AT, h.max_timestamp)
    write_be64(p + PRODUCER_ID_AT, h.producer_id)
    write_be16(p + PRODUCER_EPOCH_AT, h.producer_epoch)
    write_be32(p + BASE_SEQUENCE_AT, h.base_sequence)
    write_be32(p + RECORD_COUNT_AT, h.record_count)
