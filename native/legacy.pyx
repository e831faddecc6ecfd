# cython: language_level=3
"""Legacy message sets, magic 0 and 1 (on-disk-format.md §4), read only.

    entry:   offset int64, size int32, then a message of `size` bytes
    message: crc uint32 (CRC-32 of magic..end), magic int8, attributes int8,
             [timestamp int64, magic 1 only], keyLength int32, key,
             valueLength int32, value

A compressed message ("wrapper") holds a compressed legacy message set in its
value. Magic 1 wrappers carry relative inner offsets and the absolute offset
of the last inner message; magic 0 wrappers carry absolute inner offsets.
Each inner message is read with its own magic, as Kafka does.
"""
cimport cython
from libc.stdint cimport int8_t, int32_t, int64_t, uint32_t

from batch_header cimport BATCH_LENGTH_AT, ENTRY_PREFIX_SIZE, LOG_OVERHEAD, MAGIC_AT

import zlib

from logstore.errors import CorruptRecordError, InvalidRecordError, UnsupportedCompressionError
from logstore.native.compression import DEFAULT_MAX_DECOMPRESSED, decompress
from logstore.native.record_batch import Record

DEF MIN_MESSAGE_V0 = 14
DEF MIN_MESSAGE_V1 = 22
# The message's CRC follows the log overhead; a magic 1 message's timestamp follows crc, magic and attributes.
DEF CRC_AT = 12
DEF TIMESTAMP_AT = 18

CRC_OFFSET = CRC_AT


cdef inline int32_t _be32(const unsigned char[::1] b, Py_ssize_t i):
    return <int32_t>((<uint32_t>b[i] << 24) | (<uint32_t>b[i + 1] << 16) | (<uint32_t>b[i + 2] << 8) | b[i + 3])


cdef inline int64_t _be64(const unsigned char[::1] b, Py_ssize_t i):
    return <int64_t>((<unsigned long long><uint32_t>_be32(b, i) << 32) | <uint32_t>_be32(b, i + 4))


@cython.final
cdef class LegacyEntry:
    """One magic 0/1 log entry (a plain message or a compressed wrapper), decoded.

    `offset` is the entry's offset field (the last inner offset for a wrapper);
    `records` holds the message itself or the wrapper's inner messages with
    absolute offsets. Timestamps are ms, -1 for magic 0.
    """
    cdef readonly int64_t position
    cdef readonly int64_t offset
    cdef readonly int32_t size_in_bytes
    cdef readonly int8_t magic
    cdef readonly uint32_t crc
    cdef readonly int8_t attributes
    cdef readonly int64_t timestamp
    cdef readonly list records

    @property
    def compression(self):
        """Codec id: 0 none, 1 gzip, 2 snappy, 3 lz4 (4 zstd is rejected)."""
        return self.attributes & 0x07

    @property
    def timestamp_type(self):
        """None for magic 0, else 0 CREATE_TIME or 1 LOG_APPEND_TIME."""
        if self.magic == 0:
            return None
        return 1 if self.attributes & 0x08 else 0

    @property
    def base_offset(self):
        """Offset of the first record in the entry."""
        return self.records[0].offset if self.records else self.offset

    @property
    def last_offset(self):
        """The entry's offset field: its last record's offset."""
        return self.offset

    @property
    def next_offset(self):
        """The offset after this entry."""
        return self.offset + 1

    def __repr__(self):
        return (f"LegacyEntry(position={self.position}, offset={self.offset}, magic={self.magic}, "
                f"attributes=0x{self.attributes:02x}, records={len(self.records)})")


cdef tuple _message(const unsigned char[::1] b, Py_ssize_t pos, Py_ssize_t base, bint verify_crc):
    """Parse the entry at `pos`; return (offset, size, magic, crc, attrs, ts, key, value)."""
    cdef Py_ssize_t n = b.shape[0]
    if pos < 0:
        raise CorruptRecordError(f"negative position {pos}", -1)
    if n - pos < ENTRY_PREFIX_SIZE:
        raise CorruptRecordError(f"truncated legacy entry: {n - pos} bytes left", base + pos)
    cdef int64_t offset = _be64(b, pos)
    cdef int32_t size = _be32(b, pos + BATCH_LENGTH_AT)
    cdef int8_t magic = <int8_t>b[pos + MAGIC_AT]
    if magic not in (0, 1):
        raise CorruptRecordError(f"legacy message has magic {magic}", base + pos + MAGIC_AT)
    cdef int32_t minimum = MIN_MESSAGE_V0 if magic == 0 else MIN_MESSAGE_V1
    if size < minimum:
        raise CorruptRecordError(f"legacy message size {size} is below the minimum {minimum}",
                                 base + pos + BATCH_LENGTH_AT)
    if size > n - pos - LOG_OVERHEAD:
        raise CorruptRecordError(
            f"legacy message of {size} bytes runs past the end of the buffer", base + pos + BATCH_LENGTH_AT)
    cdef Py_ssize_t end = pos + LOG_OVERHEAD + size
    cdef uint32_t crc = <uint32_t>_be32(b, pos + CRC_AT)
    if verify_crc:
        actual = zlib.crc32(b[pos + MAGIC_AT:end])
        if actual != crc:
            raise CorruptRecordError(
                f"legacy message CRC mismatch: stored {crc}, computed {actual}", base + pos + CRC_AT)
    cdef int8_t attrs = <int8_t>b[pos + 17]
    cdef Py_ssize_t cur = pos + TIMESTAMP_AT
    cdef int64_t ts = -1
    if magic == 1:
        ts = _be64(b, cur)
        cur += 8
    key, cur = _sized(b, cur, end, base, "key")
    value, cur = _sized(b, cur, end, base, "value")
    if cur != end:
        raise CorruptRecordError(f"legacy message has {end - cur} bytes after its value", base + cur)
    return offset, size, magic, crc, attrs, ts, key, value


cdef tuple _sized(const unsigned char[::1] b, Py_ssize_t cur, Py_ssize_t end, Py_ssize_t base, str what):
    if end - cur < 4:
        raise CorruptRecordError(f"legacy message {what} length is truncated", base + cur)
    cdef int32_t length = _be32(b, cur)
    cur += 4
    if length < 0:
        return None, cur
    if length > end - cur:
        raise CorruptRecordError(f"legacy message {what} runs past the message", base + cur - 4)
    return bytes(b[cur:cur + length]), cur + length


def peek_timestamp(buf, Py_ssize_t pos=0):
    """The timestamp (ms) of the magic 1 message at `pos` from its first bytes only (no CRC), -1 for
    magic 0; None when they are not all in `buf`."""
    cdef const unsigned char[::1] b = memoryview(buf).cast("B")
    if pos < 0 or b.shape[0] - pos < ENTRY_PREFIX_SIZE:
        return None
    if b[pos + MAGIC_AT] == 0:
        return -1
    if b.shape[0] - pos < TIMESTAMP_AT + 8:
        return None
    return _be64(b, pos + TIMESTAMP_AT)


def decode_legacy(buf, Py_ssize_t pos=0, *, bint verify_crc=True,
                  Py_ssize_t max_decompressed=DEFAULT_MAX_DECOMPRESSED):
    """Decode the magic 0/1 entry at `pos` into a LegacyEntry with its records."""
    cdef const unsigned char[::1] b = memoryview(buf).cast("B")
    offset, size, magic, crc, attrs, ts, key, value = _message(b, pos, 0, verify_crc)
    cdef LegacyEntry entry = LegacyEntry.__new__(LegacyEntry)
    entry.position = pos
    entry.offset = offset
    entry.size_in_bytes = size + LOG_OVERHEAD
    entry.magic = magic
    entry.crc = crc
    entry.attributes = attrs
    entry.timestamp = ts
    cdef int codec = attrs & 0x07
    if codec == 0:
        entry.records = [Record(offset, ts, key, value)]
        return entry
    if codec == 4:
        raise UnsupportedCompressionError("zstd is not allowed in magic 0/1 messages", pos + 17)
    if codec > 4:
        raise UnsupportedCompressionError(f"unknown compression codec {codec}", pos + 17)
    if value is None:
        raise InvalidRecordError("compressed legacy message has a null value", pos)
    inner = decompress(codec, value, max_decompressed, pos, legacy_lz4_header=(magic == 0))
    entry.records = _inner_records(inner, offset, magic, attrs, ts, pos, verify_crc)
    return entry


cdef list _inner_records(object inner, int64_t wrapper_offset, int8_t magic, int8_t attrs,
                         int64_t wrapper_ts, Py_ssize_t pos, bint verify_crc):
    cdef const unsigned char[::1] b = memoryview(inner).cast("B")
    cdef Py_ssize_t cur = 0
    cdef Py_ssize_t n = b.shape[0]
    messages = []
    while cur < n:
        try:
            m = _message(b, cur, 0, verify_crc)
        except CorruptRecordError as exc:
            raise type(exc)(f"inner message: {exc.reason} (at byte {exc.position} of the decompressed set)",
                            pos) from None
        if m[4] & 0x07:
            raise InvalidRecordError("compressed legacy message holds a compressed inner message", pos)
        messages.append(m)
        cur += m[1] + LOG_OVERHEAD
    if not messages:
        raise InvalidRecordError("compressed legacy message has no inner records", pos)
    # Python ints: a hostile wrapper offset must not wrap around in C.
    shift = 0
    last_inner = messages[len(messages) - 1][0]
    if magic >= 1 and wrapper_offset != 0:
        if wrapper_offset < last_inner:
            raise InvalidRecordError(
                f"wrapper offset {wrapper_offset} is below its last inner offset {last_inner}", pos)
        shift = wrapper_offset - last_inner
    inner_offsets = [m[0] + shift for m in messages]
    if min(inner_offsets) < -(1 << 63) or max(inner_offsets) >= (1 << 63):
        raise InvalidRecordError("inner offsets fall outside the int64 range", pos)
    cdef bint append_time = magic >= 1 and (attrs & 0x08)
    return [Record(o, wrapper_ts if append_time else m[5], m[6], m[7])
            for o, m in zip(inner_offsets, messages)]
