# cython: language_level=3
"""Compression dispatch for Kafka batches (on-disk-format.md §2.6).

Writers produce what Kafka's Java broker produces: gzip with the JDK 17
GZIPOutputStream header (OS byte 255, mtime 0) around a raw deflate stream;
snappy in snappy-java's xerial framing (32 KiB chunks); LZ4 frames with
independent 64 KiB blocks, FLG 0x60 / BD 0x40 and no checksums; plain zstd
frames. Readers accept what Kafka accepts: multi-member gzip, raw or xerial
snappy, LZ4 frames with independent blocks only (optional content size, block
checksums verified, content checksum ignored, header checksum ignored for
magic 0), and one or more zstd frames.

Every decompressor is bounded by `limit` bytes of output so that a
decompression bomb costs at most `limit` bytes of memory: what a section
declares of its size (snappy's lengths, a zstd frame's content size, LZ4's
block lengths) is checked before anything is allocated, and output grows
with what was really decompressed. `decompress_within` answers None where
`decompress` raises, so a caller can try a small limit first (on an event
loop) and the real one elsewhere.
"""
from cpython.bytearray cimport PyByteArray_FromStringAndSize

import struct
import zlib

import cramjam
import lz4.frame as _lz4_frame
import xxhash
import zstandard

from logstore.errors import CorruptRecordError, UnsupportedCompressionError

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4
CODEC_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")
CODEC_IDS = {name: i for i, name in enumerate(CODEC_NAMES)}

DEFAULT_MAX_DECOMPRESSED = 128 * 1024 * 1024
"""Upper bound on one batch's decompressed records section, in bytes."""

GZIP_DEFAULT_LEVEL = 6  # Kafka's compression.gzip.level -1 is zlib's 6
ZSTD_DEFAULT_LEVEL = 3  # Kafka's compression.zstd.level default
_JDK_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01"
_XERIAL_BLOCK = 32 * 1024
_LZ4_BLOCK_SIZES = {4: 64 * 1024, 5: 256 * 1024, 6: 1024 * 1024, 7: 4 * 1024 * 1024}
# An LZ4 sequence spends one byte per 255 bytes of match length: no block expands more than this per byte.
_LZ4_MAX_RATIO = 255
_lz4_into = cramjam.lz4.decompress_block_into
_ZSTD_FIRST_READ = 64 * 1024
_ZSTD_LAST_READ = 4 * 1024 * 1024
_BE32 = struct.Struct(">i")
_LE32 = struct.Struct("<I")


def compress(int codec, data, level=None):
    """Compress a records section with `codec` the way Kafka's writers do."""
    if codec == GZIP:
        lvl = GZIP_DEFAULT_LEVEL if level is None else level
        deflater = zlib.compressobj(lvl, zlib.DEFLATED, -15)
        body = deflater.compress(data) + deflater.flush()
        return b"".join((_JDK_GZIP_HEADER, body,
                         _LE32.pack(zlib.crc32(data)), _LE32.pack(len(data) & 0xFFFFFFFF)))
    if codec == SNAPPY:
        view = memoryview(data)
        parts = [_XERIAL_HEADER]
        for start in range(0, len(view), _XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(view[start:start + _XERIAL_BLOCK]))
            parts.append(_BE32.pack(len(block)))
            parts.append(block)
        return b"".join(parts)
    if codec == LZ4:
        # Levels 3 and up switch liblz4 to LZ4-HC, which Kafka's producers
        # do not use by default and which is several times slower to write.
        if level is not None and level >= 3:
            raise ValueError(f"LZ4 level {level} would select LZ4-HC; use a fast level (<= 2)")
        return _lz4_frame.compress(
            data, compression_level=0 if level is None else level,
            block_size=_lz4_frame.BLOCKSIZE_MAX64KB, block_linked=False,
            content_checksum=False, block_checksum=False, store_size=False)
    if codec == ZSTD:
        lvl = ZSTD_DEFAULT_LEVEL if level is None else level
        return zstandard.ZstdCompressor(level=lvl, write_content_size=False).compress(data)
    if codec == NONE:
        return bytes(data)
    raise UnsupportedCompressionError(f"unknown compression codec {codec}")


# Kafka's compression.lz4.level default: its writers use the fast compressor at it, LZ4-HC at any other.
KAFKA_LZ4_DEFAULT_LEVEL = 9


def compress_at_kafka_level(int codec, data, level):
    """`compress` with a level as Kafka's topic configs give it (compression.gzip/lz4/zstd.level), as Kafka's
    broker compresses at it: gzip -1 is zlib's default, lz4 9 the fast compressor and any other LZ4-HC."""
    if codec == GZIP and level == -1:
        level = None
    elif codec == LZ4:
        if level == KAFKA_LZ4_DEFAULT_LEVEL:
            return compress(LZ4, data)
        # liblz4's frame API turns to the HC compressor at 3; Kafka's HC levels 1 and 2 are HC's fastest.
        return _lz4_frame.compress(
            data, compression_level=max(level, 3),
            block_size=_lz4_frame.BLOCKSIZE_MAX64KB, block_linked=False,
            content_checksum=False, block_checksum=False, store_size=False)
    return compress(codec, data, level)


def decompress(int codec, data, Py_ssize_t limit=DEFAULT_MAX_DECOMPRESSED,
               Py_ssize_t position=-1, bint legacy_lz4_header=False):
    """Decompress a records section (bytes or bytearray); errors report byte `position` of the batch."""
    out = decompress_within(codec, data, limit, position, legacy_lz4_header)
    if out is None:
        raise CorruptRecordError(f"records section decompresses to more than {limit} bytes", position)
    return out


def decompress_within(int codec, data, Py_ssize_t limit, Py_ssize_t position=-1, bint legacy_lz4_header=False):
    """`decompress`, but None when the output would pass `limit` bytes (no more than that is produced)."""
    try:
        if codec == GZIP:
            out = _gunzip(data, limit)
        elif codec == SNAPPY:
            out = _unsnappy(data, limit)
        elif codec == LZ4:
            out = _unlz4(data, limit, legacy_lz4_header)
        elif codec == ZSTD:
            out = _unzstd(data, limit)
        elif codec == NONE:
            out = bytes(data) if len(data) <= limit else None
        else:
            raise UnsupportedCompressionError(f"unknown compression codec {codec}", position)
    except CorruptRecordError as exc:
        if exc.position >= 0 or position < 0:
            raise
        raise type(exc)(exc.reason, position) from None
    except (zlib.error, zstandard.ZstdError, cramjam.DecompressionError,
            RuntimeError, ValueError, struct.error) as exc:
        raise CorruptRecordError(
            f"{CODEC_NAMES[codec]} records section does not decompress: {exc}", position) from None
    return out


def _gunzip(data, Py_ssize_t limit):
    # Java's GZIPInputStream reads concatenated members and stops quietly at
    # anything after a member that is not another gzip header. Input is fed
    # in chunks that start small and grow within a member, so that zlib's copy
    # of the bytes after each member stays proportional to the member: a
    # flood of tiny members costs linear, not quadratic, time.
    view = memoryview(data).cast("B")
    cdef Py_ssize_t n = len(view)
    cdef Py_ssize_t off = 0
    cdef Py_ssize_t total = 0
    cdef Py_ssize_t chunk
    parts = []
    while True:
        inflater = zlib.decompressobj(31)
        chunk = 256
        while not inflater.eof:
            if off >= n:
                raise CorruptRecordError("gzip stream is truncated")
            piece = view[off:off + chunk]
            off += len(piece)
            out = inflater.decompress(piece, limit - total + 1)
            total += len(out)
            # Output stops at the limit + 1 bytes, leaving input unconsumed:
            # either way the records section is too big.
            if total > limit or inflater.unconsumed_tail:
                return None
            parts.append(out)
            if chunk < 262144:
                chunk *= 4
        off -= len(inflater.unused_data)
        if view[off:off + 2].tobytes() != b"\x1f\x8b":
            break
    return b"".join(parts)


def _snappy_raw(block, Py_ssize_t limit):
    # The raw format starts with the uncompressed length: check it before
    # letting the codec allocate.
    cdef Py_ssize_t length = 0
    cdef int shift = 0
    cdef Py_ssize_t i
    for i in range(min(len(block), 5)):
        length |= (block[i] & 0x7F) << shift
        if block[i] < 0x80:
            break
        shift += 7
    else:
        raise CorruptRecordError("snappy block has no valid length header")
    if length > limit:
        return None
    return bytes(cramjam.snappy.decompress_raw(block))


def _unsnappy(data, Py_ssize_t limit):
    view = memoryview(data).cast("B")
    if view[:8].tobytes() != _XERIAL_MAGIC:
        return _snappy_raw(view, limit)
    if len(view) < 16:
        raise CorruptRecordError("xerial snappy header is truncated")
    parts = []
    cdef Py_ssize_t total = 0
    cdef Py_ssize_t pos = 16
    cdef Py_ssize_t n
    while pos < len(view):
        if pos + 4 > len(view):
            raise CorruptRecordError("xerial snappy chunk length is truncated")
        n = _BE32.unpack_from(view, pos)[0]
        pos += 4
        if n < 0 or pos + n > len(view):
            raise CorruptRecordError("xerial snappy chunk runs past the records section")
        chunk = _snappy_raw(view[pos:pos + n], limit - total)
        if chunk is None:
            return None
        pos += n
        total += len(chunk)
        parts.append(chunk)
    return b"".join(parts)


def _unlz4(data, Py_ssize_t limit, bint legacy_header):
    view = memoryview(data).cast("B")
    cdef const unsigned char[:] v = view
    cdef Py_ssize_t size = v.shape[0]
    if size < 7 or v[0] != 0x04 or v[1] != 0x22 or v[2] != 0x4D or v[3] != 0x18:
        raise CorruptRecordError("not an LZ4 frame (bad magic)")
    cdef int flg = v[4]
    cdef int bd = v[5]
    if (flg >> 6) != 1:
        raise CorruptRecordError("unsupported LZ4 frame version")
    if flg & 0x02:
        raise CorruptRecordError("reserved bit set in LZ4 frame flags")
    if not (flg & 0x20):
        raise CorruptRecordError("LZ4 frames with dependent blocks are not supported (Kafka requires block independence)")
    if bd & 0x8F or (bd >> 4) & 0x07 not in _LZ4_BLOCK_SIZES:
        raise CorruptRecordError("invalid LZ4 block descriptor")
    cdef Py_ssize_t max_block = _LZ4_BLOCK_SIZES[(bd >> 4) & 0x07]
    cdef bint block_checksum = flg & 0x10
    cdef Py_ssize_t pos = 6
    if flg & 0x08:
        pos += 8  # content size: present but unused, as in Kafka
    if pos + 1 > size:
        raise CorruptRecordError("LZ4 frame header is truncated")
    # Kafka 0.8/0.9 computed the header checksum over the magic as well;
    # Kafka ignores the checksum for magic 0 and so do we.
    if not legacy_header and v[pos] != (xxhash.xxh32_intdigest(view[4:pos]) >> 8) & 0xFF:
        raise CorruptRecordError("LZ4 frame header checksum mismatch")
    pos += 1
    # Walk the block headers first (Kafka's framing rules, cheap), bounding
    # what each block can expand to; a content checksum is ignored, as Kafka
    # does, and a declared content size is not trusted.
    blocks = []
    cdef Py_ssize_t n, room
    cdef Py_ssize_t bound = 0
    cdef unsigned int word
    while True:
        if pos + 4 > size:
            raise CorruptRecordError("LZ4 frame is truncated before its end mark")
        word = v[pos] | (v[pos + 1] << 8) | (v[pos + 2] << 16) | (<unsigned int>v[pos + 3] << 24)
        pos += 4
        if word == 0:
            break
        n = word & 0x7FFFFFFF
        if n > max_block or pos + n + (4 if block_checksum else 0) > size:
            raise CorruptRecordError("LZ4 block length is out of bounds")
        room = n if word & 0x80000000 else min(max_block, _LZ4_MAX_RATIO * (n + 1))
        blocks.append((pos, n, word & 0x80000000, room))
        bound += room
        pos += n
        if block_checksum:
            if _LE32.unpack_from(view, pos)[0] != xxhash.xxh32_intdigest(view[pos - n:pos]):
                raise CorruptRecordError("LZ4 block checksum mismatch")
            pos += 4
    # One buffer for the worst case the blocks allow, up to the limit, filled in
    # place; it is not zeroed first, since only what a block wrote is kept.
    cdef Py_ssize_t capacity = min(bound, limit)
    out = PyByteArray_FromStringAndSize(NULL, capacity)
    cdef Py_ssize_t total = 0
    cdef Py_ssize_t space
    into = memoryview(out)
    for start, n, stored, room in blocks:
        space = min(room, capacity - total)
        if stored:
            if n > space:
                return None
            into[total:total + n] = view[start:start + n]
            total += n
            continue
        try:
            total += _lz4_into(view[start:start + n], into[total:total + space])
        except cramjam.DecompressionError:
            if space == room:
                raise
            # Corrupt, or only too big for what is left of the limit: the block's own room tells which.
            _lz4_into(view[start:start + n], bytearray(room))
            return None
    into.release()
    del out[total:]
    return out


def _unzstd(data, Py_ssize_t limit):
    try:
        declared = zstandard.frame_content_size(data)
    except zstandard.ZstdError:
        declared = -1  # no size in the header: the reads below find out
    if declared > limit:
        return None
    reader = zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True)
    # Each read allocates what it asks for: ask for growing chunks, not the whole limit, so a bomb
    # costs what it really expanded to (one read may also stop at a frame boundary).
    parts = []
    cdef Py_ssize_t total = 0
    cdef Py_ssize_t chunk = _ZSTD_FIRST_READ
    while True:
        more = reader.read(min(chunk, limit + 1 - total))
        if not more:
            break
        parts.append(more)
        total += len(more)
        if total > limit:
            return None
        chunk = min(chunk * 4, _ZSTD_LAST_READ)
    return b"".join(parts)
