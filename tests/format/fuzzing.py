"""Mutation helpers and the fuzz loop behind test_hostile_input.py.

The loop takes valid log entries (v2 batches of every codec and frame variant,
magic 0/1 messages and wrappers built with kafka-python, the spec's vectors),
mutates them (bit flips with and without the checksum fixed up, truncation,
length and count lies, varint abuse, splices, garbage) and feeds every result
to every decoder. Decoders may only fail with CorruptRecordError and its
subclasses, with `.position` an int in [-1, len(buf)]; decoders that share a
parser must agree (see `exercise`).

It runs as a script in a subprocess so that a hang or a crash in native code
fails a test instead of taking the test runner down:

    python tests/format/fuzzing.py --seed S --start I --stop J [--verbose]

Input i of a run is drawn from random.Random(f"{S}:{i}") over a seed set built
from S alone, so `--start i --stop i+1 --verbose` replays exactly one input.
Before each input the loop writes it to `--crash-file` (a mmap), so after a
segfault or a timeout the parent still knows which bytes did it.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import mmap
import os
import random
import re
import struct
import sys
import traceback
import zlib
from dataclasses import dataclass
from pathlib import Path

import cramjam
import crc32c
import lz4.frame
import xxhash
import zstandard

import logstore.formats.kafka as K
from logstore.errors import CorruptRecordError
from logstore.native.compression import compress as ours_compress

CORPUS_DIR = Path(__file__).resolve().parent / "corpus"
# tests/vectors (spec_vectors.VECTORS_DIR): this file also runs as a script, without tests/ on sys.path.
VECTORS_DIR = Path(__file__).resolve().parents[1] / "vectors"
FUZZ_MAX_DECOMPRESSED = 4 << 20
"""max_decompressed for every decode in the loop: keeps one input's memory small."""
MAX_INPUT = 1 << 20
CRASH_HEADER = 16  # index int64 (-1: finished), length int64, then the input

I32 = (0, 1, -1, -2, 2, 6, 7, 63, 64, 127, 128, 8191, 8192, 16383, 16384,
       2**31 - 1, 2**31 - 2, -2**31, -2**31 + 1, 2**30, 0x7fff, -0x8000)
I64 = (0, 1, -1, 2**63 - 1, -2**63, 2**62, 2**32, 2**31, 2**50, -2**50)
I16 = (0, 1, -1, 0x7fff, -0x8000, 0x07, 0x08, 0x10, 0x20, 0x30, 0x40, 0x80, 0x0105)
BYTES = (0x00, 0x01, 0x7f, 0x80, 0xff, 0xfe, 0x81)

# ---------------------------------------------------------------------------
# Encodings and checksums, written independently of the code under test


def uvarint(u: int, pad: int = 0) -> bytes:
    """Unsigned LEB128 of u, with `pad` extra (non-minimal) zero groups."""
    out = bytearray()
    while True:
        b = u & 0x7F
        u >>= 7
        if u or pad:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)
        if not u:
            out.extend([0x80] * (pad - 1) + [0x00])
            return bytes(out)


def varint(n: int, pad: int = 0) -> bytes:
    """Zigzag varint of an int32 (or varlong of a wider int), optionally non-minimal."""
    bits = 32 if -2**31 <= n < 2**31 else 64
    return uvarint(((n << 1) ^ (n >> (bits - 1))) & ((1 << bits) - 1), pad)


def read_varint(buf, pos: int) -> tuple[int, int]:
    """(value, next position) of the zigzag varint at pos; IndexError/ValueError if malformed."""
    u = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        u |= (b & 0x7F) << shift
        if b < 0x80:
            return (u >> 1) ^ -(u & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def fix_v2_crc(buf: bytearray, pos: int = 0) -> None:
    """Rewrite the CRC-32C of the v2 batch at pos over [pos+21, its claimed end or the buffer end)."""
    if len(buf) - pos < 21:
        return
    length = struct.unpack_from(">i", buf, pos + 8)[0]
    end = min(len(buf), pos + 12 + max(length, 9))
    struct.pack_into(">I", buf, pos + 17, crc32c.crc32c(memoryview(buf)[pos + 21:end]))


def fix_legacy_crc(buf: bytearray, pos: int = 0) -> None:
    """Rewrite the CRC-32 of the magic 0/1 message at pos over [pos+16, its claimed end or the buffer end)."""
    if len(buf) - pos < 16:
        return
    size = struct.unpack_from(">i", buf, pos + 8)[0]
    end = min(len(buf), pos + 12 + max(size, 4))
    struct.pack_into(">I", buf, pos + 12, zlib.crc32(memoryview(buf)[pos + 16:end]))


def fix_entry_crc(buf: bytearray, pos: int) -> None:
    """Fix the checksum of the entry at pos according to its (possibly mutated) magic byte."""
    if len(buf) - pos > 16:
        if buf[pos + 16] == 2:
            fix_v2_crc(buf, pos)
        elif buf[pos + 16] in (0, 1):
            fix_legacy_crc(buf, pos)


def entry_starts(buf) -> list[int]:
    """Start positions of the entries of a well-formed log buffer (framing only)."""
    starts, pos = [], 0
    while len(buf) - pos >= 17:
        size = struct.unpack_from(">i", buf, pos + 8)[0]
        if size < 14 or pos + 12 + size > len(buf):
            break
        starts.append(pos)
        pos += 12 + size
    return starts or [0]


def legacy_message(offset: int, magic: int, attrs: int, ts: int, key, value) -> bytes:
    """One magic 0/1 log entry with a correct CRC-32."""
    body = bytes([magic, attrs & 0xFF]) + (struct.pack(">q", ts) if magic == 1 else b"")
    for part in (key, value):
        body += struct.pack(">i", -1) if part is None else struct.pack(">i", len(part)) + part
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(message)) + message


def _lz4_header_checksum(descriptor: bytes) -> int:
    return (xxhash.xxh32_intdigest(descriptor) >> 8) & 0xFF


def lz4_stored_frame(plain: bytes, block: int = 1024) -> bytes:
    """An LZ4 frame (FLG 0x60, BD 0x40) whose blocks are all stored uncompressed (high bit set)."""
    out = bytearray(b"\x04\x22\x4d\x18\x60\x40")
    out.append(_lz4_header_checksum(b"\x60\x40"))
    for i in range(0, len(plain), block):
        chunk = plain[i:i + block]
        out += struct.pack("<I", len(chunk) | 0x80000000) + chunk
    return bytes(out + b"\x00\x00\x00\x00")


def _gzip_members(plain: bytes) -> bytes:
    half = len(plain) // 2
    return gzip.compress(plain[:half], mtime=0) + gzip.compress(plain[half:], mtime=0)


def _zstd_frames(plain: bytes) -> bytes:
    half = len(plain) // 2
    c = zstandard.ZstdCompressor(write_checksum=True)
    return c.compress(plain[:half]) + c.compress(plain[half:])


def _kafka_codec():
    import kafka.codec
    return kafka.codec


COMPRESSORS = {
    "none": (0, bytes),
    "gzip": (1, lambda p: ours_compress(1, p)),
    "gzip-std": (1, lambda p: gzip.compress(p, mtime=0)),
    "gzip-members": (1, _gzip_members),
    "snappy": (2, lambda p: ours_compress(2, p)),
    "snappy-raw": (2, lambda p: bytes(cramjam.snappy.compress_raw(p))),
    "snappy-small-chunks": (2, lambda p: _kafka_codec().snappy_encode(p, xerial_blocksize=256)),
    "lz4": (3, lambda p: ours_compress(3, p)),
    "lz4-checksums": (3, lambda p: lz4.frame.compress(p, block_linked=False, block_checksum=True,
                                                      content_checksum=True, store_size=True)),
    "lz4-4mb": (3, lambda p: lz4.frame.compress(p, block_linked=False, store_size=False,
                                                block_size=lz4.frame.BLOCKSIZE_MAX4MB)),
    "lz4-stored": (3, lz4_stored_frame),
    "zstd": (4, lambda p: ours_compress(4, p)),
    "zstd-frames": (4, _zstd_frames),
    "kafka-python-1": (1, lambda p: _kafka_codec().gzip_encode(p)),
    "kafka-python-2": (2, lambda p: _kafka_codec().snappy_encode(p)),
    "kafka-python-3": (3, lambda p: _kafka_codec().lz4_encode(p)),
    "kafka-python-4": (4, lambda p: _kafka_codec().zstd_encode(p)),
}
LEGACY_COMPRESSORS = {  # kafka-python's writers; magic 0 LZ4 has Kafka 0.8's broken header checksum
    (0, 1): lambda p: _kafka_codec().gzip_encode(p), (1, 1): lambda p: _kafka_codec().gzip_encode(p),
    (0, 2): lambda p: _kafka_codec().snappy_encode(p), (1, 2): lambda p: _kafka_codec().snappy_encode(p),
    (0, 3): lambda p: _kafka_codec().lz4_encode_old_kafka(p), (1, 3): lambda p: _kafka_codec().lz4_encode(p),
}


# ---------------------------------------------------------------------------
# Seeds: valid inputs to mutate


@dataclass(frozen=True)
class Seed:
    """A valid input. v2: `plain` is the uncompressed records section; legacy wrapper: the inner set."""

    name: str
    data: bytes
    kind: str               # "v2", "legacy" or "stream"
    plain: bytes = b""
    compressor: str = "none"
    magic: int = 2


def v2_from_plain(header: bytes, plain: bytes, compressor: str) -> bytes:
    """A v2 batch from a 61-byte header and uncompressed records, compressed and checksummed."""
    codec, fn = COMPRESSORS[compressor]
    section = fn(plain) if codec else plain
    buf = bytearray(header[:61]) + section
    attrs = (struct.unpack_from(">h", buf, 21)[0] & ~0x07) | codec
    struct.pack_into(">h", buf, 21, attrs)
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    fix_v2_crc(buf)
    return bytes(buf)


def _payload(rng: random.Random, big: bool = False):
    r = rng.random()
    if r < 0.12:
        return None
    if r < 0.2:
        return b""
    if big and r > 0.9:
        return rng.randbytes(rng.choice((63, 64, 127, 128, 200, 8192, 16384)))
    return rng.randbytes(rng.randint(1, 24))


def _records(rng: random.Random, n: int, big: bool = False):
    keys = [_payload(rng, big) for _ in range(n)]
    values = [_payload(rng, big) for _ in range(n)]
    headers = [[(rng.choice(("", "h", "trace-id", "ключ")), _payload(rng)) for _ in range(rng.randint(0, 3))]
               for _ in range(n)]
    base = rng.randint(0, 2**41)
    timestamps = [base + rng.randint(-5000, 5000) for _ in range(n)]
    return keys, values, headers, timestamps


def _v2_seeds(rng: random.Random) -> list[Seed]:
    seeds = []
    shapes = [(0, False), (1, False), (3, False), (12, False), (40, False), (4, True)]
    for compressor in COMPRESSORS:
        for n, big in shapes:
            keys, values, headers, ts = _records(rng, n, big)
            pid = rng.choice((-1, rng.randint(0, 2**40)))
            plain_batch = K.encode_batch(
                keys, values, headers, ts, base_offset=rng.choice((0, rng.randint(0, 2**40))),
                producer_id=pid, producer_epoch=-1 if pid < 0 else rng.randint(0, 5),
                base_sequence=-1 if pid < 0 else rng.choice((0, 2**31 - 2)),
                transactional=pid >= 0 and rng.random() < 0.5,
                log_append_time=rng.choice((None, None, 2**41)))
            plain = plain_batch[61:]
            seeds.append(Seed(f"v2/{compressor}/{n}{'big' if big else ''}",
                              v2_from_plain(plain_batch, plain, compressor), "v2", plain, compressor))
    for commit in (True, False):
        marker = K.encode_control_batch(commit, 7, 1234, 3, 2**40, base_offset=99)
        seeds.append(Seed(f"v2/control/{commit}", marker, "v2", marker[61:], "none"))
    # A control batch emptied by the cleaner: count 0, no records section.
    empty_control = bytearray(K.encode_control_batch(True, 7, 1234, 3, 2**40)[:61])
    struct.pack_into(">i", empty_control, 57, 0)
    seeds.append(Seed("v2/control/empty", v2_from_plain(empty_control, b"", "none"), "v2", b"", "none"))
    seeds.extend(_kafka_python_v2_seeds(rng))
    return seeds


def _kafka_python_v2_seeds(rng: random.Random) -> list[Seed]:
    from kafka.record.default_records import DefaultRecordBatchBuilder
    seeds = []
    for codec in (0, 1, 2, 3, 4):
        appends, offset = [], 0
        for _ in range(6):
            offset += rng.choice((1, 1, 3))  # gaps, as after compaction; the first delta is not 0
            appends.append((offset, rng.randint(0, 2**41), rng.randbytes(8), b"abc" * rng.randint(0, 30),
                            [("h", b"v")]))
        built = []
        for c in (codec, 0):
            builder = DefaultRecordBatchBuilder(2, c, False, -1, -1, -1, 1 << 30)
            for args in appends:
                builder.append(*args)
            built.append(bytes(builder.build()))
        data, plain_batch = built
        actual = data[22] & 0x07  # kafka-python falls back to none when compression does not pay
        seeds.append(Seed(f"v2/kafka-python/{codec}", data, "v2", plain_batch[61:],
                          f"kafka-python-{actual}" if actual else "none"))
    return seeds


def _legacy_seeds(rng: random.Random) -> list[Seed]:
    from kafka.record.legacy_records import LegacyRecordBatchBuilder
    seeds = []
    for magic in (0, 1):
        for codec in (0, 1, 2, 3):
            for n in (1, 4):
                entries = [(i, 2**40 + i, _payload(rng, True), _payload(rng)) for i in range(n)]
                plain_builder = LegacyRecordBatchBuilder(magic, 0, 1 << 30)
                for offset, ts, key, value in entries:
                    plain_builder.append(offset, ts, key, value)
                inner = bytes(plain_builder.build())
                if codec == 0:
                    seeds.append(Seed(f"legacy/v{magic}/plain/{n}", inner, "stream", magic=magic))
                    continue
                builder = LegacyRecordBatchBuilder(magic, codec, 1 << 30)
                for offset, ts, key, value in entries:
                    builder.append(offset, ts, key, value)
                wrapper = bytearray(builder.build())
                if magic == 1 and rng.random() < 0.5:
                    struct.pack_into(">q", wrapper, 0, 1000 + n - 1)  # absolute offset of the last inner
                seeds.append(Seed(f"legacy/v{magic}/codec{codec}/{n}", bytes(wrapper), "legacy",
                                  inner, str(codec), magic))
    return seeds


def _vector_seeds() -> list[Seed]:
    seeds = []
    if VECTORS_DIR.is_dir():
        for path in sorted(VECTORS_DIR.glob("*.hex")):
            if path.name.startswith(("v0", "v1", "v2", "real_broker")):
                data = bytes.fromhex("".join(path.read_text().split()))
                seeds.append(Seed(f"vector/{path.stem}", data, "stream"))
    return seeds


def build_seeds(seed: int) -> list[Seed]:
    """The valid inputs of a run: deterministic in `seed`."""
    rng = random.Random(f"seeds:{seed}")
    return _v2_seeds(rng) + _legacy_seeds(rng) + _vector_seeds()


# ---------------------------------------------------------------------------
# Record structure (for mutations that lie about one field)


def record_fields(plain: bytes) -> list[list[tuple[str, int, int]]]:
    """Per record, the (name, start, end) spans of its fields; stops at the first malformed record."""
    records, pos = [], 0
    try:
        while pos < len(plain):
            fields = []
            length, body = read_varint(plain, pos)
            fields.append(("length", pos, body))
            end = body + length
            if length < 0 or end > len(plain):
                break
            fields.append(("attributes", body, body + 1))
            cur = body + 1
            for name in ("timestamp_delta", "offset_delta"):
                _, nxt = read_varint(plain, cur)
                fields.append((name, cur, nxt))
                cur = nxt
            for name in ("key", "value"):
                n, nxt = read_varint(plain, cur)
                fields.append((name + "_length", cur, nxt))
                cur = nxt + max(n, 0)
                fields.append((name, nxt, cur))
            count, cur2 = read_varint(plain, cur)
            fields.append(("header_count", cur, cur2))
            cur = cur2
            for _ in range(max(count, 0)):
                for name in ("header_key", "header_value"):
                    n, nxt = read_varint(plain, cur)
                    fields.append((name + "_length", cur, nxt))
                    cur = nxt + max(n, 0)
                    fields.append((name, nxt, cur))
            if cur != end:
                break
            records.append(fields)
            pos = end
    except (IndexError, ValueError):
        pass
    return records


def _interesting_int(rng: random.Random, current: int, room: int) -> int:
    return rng.choice((current + 1, current - 1, current + 2, room, room + 1, room - 1, -1, -2, 0,
                       current * 2 + 1, rng.choice(I32), rng.choice(I32), rng.choice(I64)))


def _encode_lie(rng: random.Random, value: int) -> bytes:
    r = rng.random()
    if r < 0.75:
        return varint(value)
    if r < 0.9:
        return varint(value, pad=rng.randint(1, 4))      # non-minimal, maybe too long
    return bytes([0xFF] * rng.randint(5, 11)) + b"\x01"  # far too long


# ---------------------------------------------------------------------------
# Mutators: (rng, seed) -> (bytes, description)


def _fixup(buf: bytearray, starts: list[int], rng: random.Random, p: float) -> str:
    if rng.random() < p:
        for s in starts:
            fix_entry_crc(buf, s)
        return " crc-fixed"
    return ""


def m_flip_bits(rng, seed):
    buf = bytearray(seed.data)
    positions = [rng.randrange(len(buf)) for _ in range(rng.choice((1, 1, 1, 2, 3, 8)))]
    for p in positions:
        buf[p] ^= 1 << rng.randrange(8)
    return buf, f"flip_bits{positions}" + _fixup(buf, entry_starts(seed.data), rng, 0.75)


def m_set_bytes(rng, seed):
    buf = bytearray(seed.data)
    positions = [rng.randrange(len(buf)) for _ in range(rng.randint(1, 4))]
    for p in positions:
        buf[p] = rng.choice(BYTES)
    return buf, f"set_bytes{positions}" + _fixup(buf, entry_starts(seed.data), rng, 0.75)


def m_truncate(rng, seed):
    data = seed.data
    cuts = [rng.randrange(len(data) + 1), rng.randrange(min(len(data), 17) + 1),
            rng.randrange(min(len(data), 70) + 1), len(data) - rng.randint(1, 4)]
    if seed.kind == "v2" and seed.compressor == "none":
        cuts += [61 + s for rec in record_fields(seed.plain) for _, s, _ in rec]
    cut = max(0, min(len(data), rng.choice(cuts)))
    buf = bytearray(data[:cut])
    desc = f"truncate({cut})"
    if cut > 21 and rng.random() < 0.5:  # claim the truncated length, so the lie reaches the parser
        struct.pack_into(">i", buf, 8, cut - 12)
        desc += " length-fixed"
        desc += _fixup(buf, [0], rng, 0.9)
    return buf, desc


V2_FIELDS = {"base_offset": (0, ">q"), "batch_length": (8, ">i"), "leader_epoch": (12, ">i"),
             "magic": (16, ">b"), "attributes": (21, ">h"), "last_offset_delta": (23, ">i"),
             "base_timestamp": (27, ">q"), "max_timestamp": (35, ">q"), "producer_id": (43, ">q"),
             "producer_epoch": (51, ">h"), "base_sequence": (53, ">i"), "record_count": (57, ">i")}
LEGACY_FIELDS = {"offset": (0, ">q"), "size": (8, ">i"), "magic": (16, ">b"), "attributes": (17, ">b"),
                 "timestamp": (18, ">q")}


def _lie_value(rng, fmt: str, current: int) -> int:
    edges = {">q": I64, ">i": I32, ">h": I16, ">b": (0, 1, 2, 3, -1, 0x7f, -0x80)}[fmt]
    bits = {">q": 64, ">i": 32, ">h": 16, ">b": 8}[fmt]
    value = rng.choice(edges + (current + 1, current - 1, current + rng.randint(-9, 9),
                                current ^ rng.randrange(1 << 8)))
    lo = -(1 << (bits - 1))
    return (value - lo) % (1 << bits) + lo


def m_header_lie(rng, seed):
    buf = bytearray(seed.data)
    start = rng.choice(entry_starts(seed.data))
    fields = V2_FIELDS if len(buf) > start + 16 and buf[start + 16] == 2 else LEGACY_FIELDS
    name = rng.choice(list(fields))
    off, fmt = fields[name]
    if start + off + struct.calcsize(fmt) > len(buf):
        return buf, f"header_lie(no room for {name})"
    current = struct.unpack_from(fmt, buf, start + off)[0]
    value = _lie_value(rng, fmt, current)
    struct.pack_into(fmt, buf, start + off, value)
    return buf, f"header_lie({name}@{start}: {current} -> {value})" + _fixup(buf, [start], rng, 0.85)


def m_append(rng, seed):
    buf = bytearray(seed.data)
    extra = rng.randbytes(rng.randint(1, 40))
    buf += extra
    desc = f"append({len(extra)} random bytes)"
    if rng.random() < 0.5 and len(seed.data) > 21:  # inside the batch: bytes after the last record
        struct.pack_into(">i", buf, 8, len(buf) - 12)
        desc += " length-grown" + _fixup(buf, [0], rng, 0.9)
    return buf, desc


def m_garbage(rng, seed):
    buf = bytearray(rng.randbytes(rng.randint(0, 300)))
    desc = f"garbage({len(buf)})"
    if len(buf) >= 61 and rng.random() < 0.6:  # plausible framing around random content
        struct.pack_into(">i", buf, 8, len(buf) - 12)
        buf[16] = rng.choice((2, 2, 2, 0, 1))
        if rng.random() < 0.7:
            struct.pack_into(">h", buf, 21, rng.randrange(8))
        desc += f" framed(magic={buf[16]})" + _fixup(buf, [0], rng, 0.9)
    return buf, desc


def _close_v2(rng, seed: Seed, plain: bytes, desc: str, count_delta: int = 0):
    header = bytearray(seed.data[:61])
    if count_delta and rng.random() < 0.5:  # keep recordCount/lastOffsetDelta honest about the splice
        count = struct.unpack_from(">i", header, 57)[0] + count_delta
        struct.pack_into(">i", header, 57, count)
        struct.pack_into(">i", header, 23, max(count - 1, 0))
        desc += " counts-fixed"
    return v2_from_plain(header, plain, seed.compressor), desc


def m_record_lie(rng, seed):
    """Replace one varint of one record with a lie; maybe re-fit the record's length around it."""
    records = record_fields(seed.plain)
    if not records:
        return m_plain_splice(rng, seed)
    rec = rng.choice(records)
    candidates = [f for f in rec if f[0] not in ("attributes", "key", "value", "header_key", "header_value")]
    name, s, e = rng.choice(candidates)
    current, _ = read_varint(seed.plain, s)
    body_end = read_varint(seed.plain, rec[0][1])[0] + rec[0][2]
    value = _interesting_int(rng, current, body_end - e)
    lie = _encode_lie(rng, value)
    plain = seed.plain[:s] + lie + seed.plain[e:]
    desc = f"record_lie({name}@{s}: {current} -> {value} as {lie.hex()})"
    if name != "length" and rng.random() < 0.6:
        body_start = rec[0][2]
        new_body = plain[body_start:body_end + len(lie) - (e - s)]
        plain = plain[:rec[0][1]] + varint(len(new_body)) + plain[body_start:]
        desc += " record-length-refit"
    return _close_v2(rng, seed, plain, desc)


def m_plain_splice(rng, seed):
    plain = seed.plain
    records = record_fields(plain)
    spans = [(rec[0][1], read_varint(plain, rec[0][1])[0] + rec[0][2]) for rec in records]
    op = rng.choice(("delete", "insert", "drop", "dup", "swap", "cut", "random", "flip"))
    delta = 0
    if op == "drop" and spans:
        s, e = rng.choice(spans)
        plain, delta = plain[:s] + plain[e:], -1
    elif op == "dup" and spans:
        s, e = rng.choice(spans)
        plain, delta = plain[:e] + plain[s:e] + plain[e:], 1
    elif op == "swap" and len(spans) >= 2:
        (s1, e1), (s2, e2) = sorted(rng.sample(spans, 2))
        plain = plain[:s1] + plain[s2:e2] + plain[e1:s2] + plain[s1:e1] + plain[e2:]
    elif op == "cut":
        bounds = [s for rec in records for _, s, _ in rec] + [len(plain)]
        at = max(0, rng.choice(bounds) - rng.choice((0, 0, 1)))
        plain = plain[:at]
    elif op == "random":
        plain = rng.randbytes(rng.randint(0, 2 * len(plain) + 8))
    elif op == "flip" and plain:
        mutable = bytearray(plain)
        for _ in range(rng.randint(1, 3)):
            mutable[rng.randrange(len(mutable))] ^= 1 << rng.randrange(8)
        plain = bytes(mutable)
    elif op == "insert" or not plain:
        at = rng.randint(0, len(plain))
        plain = plain[:at] + rng.randbytes(rng.randint(1, 12)) + plain[at:]
    else:
        at = rng.randrange(len(plain))
        plain = plain[:at] + plain[at + rng.randint(1, 8):]
    return _close_v2(rng, seed, plain, f"plain_splice({op})", delta)


def m_stream(rng, seed):
    """Mutate the compressed bytes: frame headers, block/chunk lengths, trailers; fix length and CRC."""
    buf = bytearray(seed.data)
    n = len(buf) - 61
    if n <= 0:
        return m_flip_bits(rng, seed)
    op = rng.choice(("head", "tail", "any", "cut", "words", "words"))
    if op == "cut":
        del buf[61 + rng.randrange(n):]
    elif op == "words":
        # Overwrite an aligned-looking 4-byte word with a length lie (LZ4 block size, xerial chunk).
        at = 61 + rng.randrange(max(n - 3, 1))
        word = rng.choice((0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0x10000, 0x10001, 0x80000010, n))
        fmt = rng.choice(("<I", ">I"))
        if at + 4 <= len(buf):
            struct.pack_into(fmt, buf, at, word)
    else:
        lo, hi = {"head": (61, 61 + min(n, 16)), "tail": (len(buf) - min(n, 8), len(buf)),
                  "any": (61, len(buf))}[op]
        for _ in range(rng.randint(1, 3)):
            buf[rng.randrange(lo, hi)] = rng.choice(BYTES + (rng.randrange(256),))
    desc = f"stream({op})"
    if buf[61:65] == b"\x04\x22\x4d\x18" and len(buf) > 68 and rng.random() < 0.7:
        hc_at = 61 + 6 + (8 if buf[65] & 0x08 else 0)
        if hc_at < len(buf):
            buf[hc_at] = _lz4_header_checksum(bytes(buf[65:hc_at]))
            desc += " lz4-hc-fixed"
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    fix_v2_crc(buf)
    return buf, desc


def m_legacy_field(rng, seed):
    """Lie about a wrapper's key/value length or attributes."""
    buf = bytearray(seed.data)
    key_at = 18 + (8 if seed.magic == 1 else 0)
    key_len = struct.unpack_from(">i", buf, key_at)[0]
    target = rng.choice((key_at, key_at + 4 + max(key_len, 0)))
    current = struct.unpack_from(">i", buf, target)[0]
    value = _lie_value(rng, ">i", current)
    struct.pack_into(">i", buf, target, value)
    return buf, f"legacy_field(@{target}: {current} -> {value})" + _fixup(buf, [0], rng, 0.85)


def m_legacy_inner(rng, seed):
    """Mutate a wrapper's inner message set, recompress, rebuild the wrapper with a good CRC."""
    inner = bytearray(seed.plain)
    starts = entry_starts(seed.plain)
    op = rng.choice(("flip", "offset", "size", "attrs", "magic", "cut", "empty"))
    at = rng.choice(starts)
    if op == "flip":
        for _ in range(rng.randint(1, 3)):
            inner[rng.randrange(len(inner))] ^= 1 << rng.randrange(8)
    elif op == "offset":
        struct.pack_into(">q", inner, at, rng.choice(I64 + (rng.randint(-9, 9),)))
    elif op == "size":
        struct.pack_into(">i", inner, at + 8, _lie_value(rng, ">i", struct.unpack_from(">i", inner, at + 8)[0]))
    elif op == "attrs":
        inner[at + 17] = rng.choice((1, 2, 3, 4, 7, 8, 0x88))
    elif op == "magic":
        inner[at + 16] = rng.choice((0, 1, 2, 5))
    elif op == "cut":
        del inner[rng.randrange(len(inner) + 1):]
    else:
        inner = bytearray()
    if rng.random() < 0.8:
        for s in starts:
            fix_entry_crc(inner, s)
    codec = int(seed.compressor)
    value = LEGACY_COMPRESSORS[(seed.magic, codec)](bytes(inner))
    offset, = struct.unpack_from(">q", seed.data, 0)
    ts = struct.unpack_from(">q", seed.data, 18)[0] if seed.magic == 1 else -1
    attrs = seed.data[17]
    return bytearray(legacy_message(offset, seed.magic, attrs, ts, None, value)), f"legacy_inner({op}@{at})"


def m_concat(rng, seed, other: Seed):
    buf = bytearray(seed.data + other.data)
    return buf, f"concat(+{other.name})"


V2_MUTATORS = [m_flip_bits] * 4 + [m_set_bytes, m_truncate, m_truncate, m_header_lie, m_header_lie,
                                   m_append, m_garbage, m_record_lie, m_record_lie, m_record_lie,
                                   m_plain_splice, m_plain_splice, m_stream]
LEGACY_MUTATORS = [m_flip_bits] * 3 + [m_set_bytes, m_truncate, m_header_lie, m_header_lie, m_legacy_field,
                                       m_legacy_inner, m_legacy_inner, m_legacy_inner, m_append, m_garbage]
STREAM_MUTATORS = [m_flip_bits] * 3 + [m_set_bytes, m_truncate, m_header_lie, m_header_lie, m_append, m_garbage]


def mutate(seeds: list[Seed], seed: int, index: int) -> tuple[bytes, str]:
    """Input `index` of run `seed`: deterministic."""
    rng = random.Random(f"{seed}:{index}")
    base = rng.choice(seeds)
    if base.kind == "v2":
        mutator = rng.choice(V2_MUTATORS)
        if mutator in (m_record_lie, m_plain_splice) and not base.plain:
            mutator = m_flip_bits
        if mutator is m_stream and base.compressor == "none":
            mutator = m_flip_bits
    elif base.kind == "legacy":
        mutator = rng.choice(LEGACY_MUTATORS)
    else:
        mutator = rng.choice(STREAM_MUTATORS)
    prefix = ""
    if rng.random() < 0.05:
        buf, prefix = m_concat(rng, base, rng.choice(seeds))
        base = Seed(base.name, bytes(buf), "stream")
        mutator, prefix = rng.choice(STREAM_MUTATORS), prefix + " "
    buf, desc = mutator(rng, base)
    return bytes(buf[:MAX_INPUT]), f"seed={seed} index={index} base={base.name} {prefix}{desc}"


# ---------------------------------------------------------------------------
# Exercising the decoders


@dataclass
class Failure:
    """A decoder misbehaving on one input."""

    kind: str       # "untyped", "bad-position", "inconsistent"
    call: str
    detail: str

    def signature(self) -> str:
        """Groups failures that are the same bug."""
        return f"{self.kind}|{self.call}|{re.sub(r'-?[0-9]+', '#', self.detail)[:160]}"


class _Calls:
    def __init__(self, buf: bytes):
        self.buf = buf
        self.failures: list[Failure] = []

    def __call__(self, name, fn, *args, **kwargs):
        """(True, result) or (False, the typed error); an untyped error is recorded as a failure."""
        try:
            return True, fn(*args, **kwargs)
        except CorruptRecordError as exc:
            pos = exc.position
            if type(pos) is not int or not -1 <= pos <= len(self.buf):
                self.fail("bad-position", name, f"{type(exc).__name__} position={pos!r}: {exc}")
            return False, exc
        except Exception as exc:  # anything else escaping a decoder is the bug being hunted
            where = traceback.extract_tb(exc.__traceback__)[-1]
            self.fail("untyped", name, f"{type(exc).__name__}: {exc} [{Path(where.filename).name}:{where.lineno}]")
            return False, exc

    def fail(self, kind, name, detail):
        self.failures.append(Failure(kind, name, detail))


def columns_rows(cols) -> list[tuple]:
    """(offset, timestamp, key, value) per row of a Columns, read from its raw buffers; checks their shape."""
    n = cols.count
    offsets, timestamps = memoryview(cols.offsets), memoryview(cols.timestamps)
    sizes = {"offsets": (len(offsets), 8 * n), "timestamps": (len(timestamps), 8 * n)}
    rows_keys, rows_values = [], []
    for side, out in (("key", rows_keys), ("value", rows_values)):
        bounds = memoryview(getattr(cols, side + "_offsets"))
        data = bytes(memoryview(getattr(cols, side + "_data")))
        validity = bytes(memoryview(getattr(cols, side + "_validity")))
        sizes[side + "_offsets"] = (len(bounds), 4 * (n + 1))
        sizes[side + "_validity"] = (len(validity), (n + 7) // 8)
        b = struct.unpack(f"<{n + 1}i", bounds) if len(bounds) == 4 * (n + 1) else (0,) * (n + 1)
        nulls = 0
        for i in range(n):
            valid = len(validity) > i >> 3 and validity[i >> 3] >> (i & 7) & 1
            nulls += not valid
            out.append(data[b[i]:b[i + 1]] if valid else ("NULL", b[i + 1] - b[i]))
        if nulls != getattr(cols, side + "_null_count"):
            raise AssertionError(f"{side} null count {getattr(cols, side + '_null_count')} but {nulls} null bits")
        if b[0] != 0 or b[n] != len(data) or any(b[i] > b[i + 1] for i in range(n)):
            raise AssertionError(f"{side} offsets do not span the data")
    for name, (got, want) in sizes.items():
        if got != want:
            raise AssertionError(f"{name} buffer has {got} bytes, expected {want}")
    offs = struct.unpack(f"<{n}q", offsets) if n else ()
    tss = struct.unpack(f"<{n}q", timestamps) if n else ()
    return [(offs[i], tss[i], rows_keys[i], rows_values[i]) for i in range(n)]


def record_rows(records) -> list[tuple]:
    """The rows a Columns holds for a list of Record."""
    return [(r.offset, r.timestamp, r.key if r.key is not None else ("NULL", 0),
             r.value if r.value is not None else ("NULL", 0)) for r in records]


_PREFIX = K.encode_batch([b"p0", b"p1"], [b"v0", b"v1"], timestamps=7)
_SUFFIX = K.encode_batch([None, None, None], [None, None, None], timestamps=9, base_offset=100)
_PREFIX_ROWS = record_rows(K.decode_records(_PREFIX))
_SUFFIX_ROWS = record_rows(K.decode_records(_SUFFIX))


def exercise(buf: bytes, *, arrow: bool = True) -> list[Failure]:
    """Feed `buf` to every decoder; return what misbehaved (an empty list is a pass)."""
    call = _Calls(buf)
    limit = FUZZ_MAX_DECOMPRESSED
    ok_h, header = call("read_header", K.read_header, buf)
    call("validate_batch", K.validate_batch, buf)
    call("validate_batch(client)", K.validate_batch, buf, client=True, max_batch_size=1048588)
    ok_deep, _ = call("validate_batch(deep)", K.validate_batch, buf, deep=True)
    call("validate_batch(deep,no-crc)", K.validate_batch, buf, deep=True, verify_crc=False)
    call("validate_records", K.validate_records, buf)
    ok_r, records = call("decode_records", K.decode_records, buf, max_decompressed=limit)
    call("decode_records(no-crc)", K.decode_records, buf, verify_crc=False, max_decompressed=limit)
    ok_c, cols = call("decode_columnar", K.decode_columnar, buf, max_decompressed=limit)
    if ok_h and header.compression == 0 and ok_deep != ok_r:
        call.fail("inconsistent", "validate_batch(deep)/decode_records",
                  f"deep {'accepts' if ok_deep else 'rejects'}, decode_records {'accepts' if ok_r else 'rejects'}")
    if ok_r != ok_c:
        call.fail("inconsistent", "decode_columnar/decode_records",
                  f"columnar {'accepts' if ok_c else 'rejects'}, decode_records {'accepts' if ok_r else 'rejects'}")
    elif ok_r:
        _compare_columns(call, "decode_columnar", cols, record_rows(records), arrow)
        if header.is_control:
            for record in records:
                call("read_control_record", K.read_control_record, record)
    _sandwich(call, buf, ok_r, records, header if ok_h else None, arrow)
    for verify in (True, False):
        _walk_entries(call, buf, verify)
    call("decode_legacy", K.decode_legacy, buf, max_decompressed=limit)
    call("decode_legacy(no-crc)", K.decode_legacy, buf, verify_crc=False, max_decompressed=limit)
    for pos in sorted({0, len(buf) // 2, max(len(buf) - 1, 0)}):
        call("decode_varint", K.decode_varint, buf, pos)
        call("decode_varlong", K.decode_varlong, buf, pos)
    return call.failures


def _compare_columns(call, name, cols, expected_rows, arrow):
    try:
        rows = columns_rows(cols)
        if rows != expected_rows:
            first = next(i for i, (a, b) in enumerate(zip(rows + [None] * len(expected_rows), expected_rows))
                         if a != b)
            raise AssertionError(f"row {first} of {len(expected_rows)} differs from decode_records")
        if arrow:
            cols.to_arrow().validate(full=True)
    except Exception as exc:  # the columns do not describe the records
        call.fail("inconsistent", name, f"{type(exc).__name__}: {exc}")


def _sandwich(call, buf, ok_r, records, header, arrow):
    """A ColumnarBuilder fed good, hostile, good batches holds exactly the good rows plus the hostile ones it took."""
    builder = K.ColumnarBuilder()
    builder.add_batch(_PREFIX)
    ok, _ = call("ColumnarBuilder.add_batch", builder.add_batch, buf, max_decompressed=FUZZ_MAX_DECOMPRESSED)
    builder.add_batch(_SUFFIX)
    middle = []
    if ok and header is not None and not header.is_control:
        if not ok_r:
            call.fail("inconsistent", "ColumnarBuilder.add_batch/decode_records",
                      "add_batch accepts, decode_records rejects")
            return
        middle = record_rows(records)
    _compare_columns(call, "ColumnarBuilder(good, hostile, good)", builder.finish(),
                     _PREFIX_ROWS + middle + _SUFFIX_ROWS, arrow)


def _walk_entries(call, buf, verify):
    suffix = "" if verify else "(no-crc)"
    it = K.iter_entries(buf, verify_crc=verify)
    last_end = 0
    while True:
        ok, entry = call("iter_entries" + suffix, next, it, None)
        if not ok or entry is None:
            return
        end = K.entry_end(entry)
        if not last_end < end <= len(buf):
            call.fail("inconsistent", "iter_entries" + suffix, f"entry ends at {end} after {last_end} of {len(buf)}")
            return
        last_end = end
        call("decode_entry" + suffix, K.decode_entry, buf, entry, verify_crc=verify)


# ---------------------------------------------------------------------------
# The loop (runs in a subprocess, see test_hostile_input.py)


def run(seed: int, start: int, stop: int, crash_file: str | None = None, verbose: bool = False,
        max_examples: int = 3, abort_at: int | None = None) -> dict:
    """Exercise inputs [start, stop) of run `seed`; a JSON-able summary of the failures by signature."""
    seeds = build_seeds(seed)
    mm = None
    if crash_file:
        with open(crash_file, "wb") as f:
            f.truncate(CRASH_HEADER + MAX_INPUT)
        fd = os.open(crash_file, os.O_RDWR)
        mm = mmap.mmap(fd, CRASH_HEADER + MAX_INPUT)
        os.close(fd)
        struct.pack_into(">qq", mm, 0, -1, 0)
    found: dict[str, dict] = {}
    for index in range(start, stop):
        buf, desc = mutate(seeds, seed, index)
        if mm is not None:
            mm[CRASH_HEADER:CRASH_HEADER + len(buf)] = buf
            struct.pack_into(">qq", mm, 0, index, len(buf))
        if index == abort_at:
            os.abort()  # the harness's self-test: die the way a segfault would
        failures = exercise(buf)
        if verbose:
            print(desc, "->", [f.__dict__ for f in failures] or "ok")
        for failure in failures:
            entry = found.setdefault(failure.signature(), {"count": 0, "examples": [],
                                                           "signature": failure.signature(), **failure.__dict__})
            entry["count"] += 1
            if len(entry["examples"]) < max_examples:
                entry["examples"].append({"index": index, "mutation": desc, "hex": buf.hex()})
    if mm is not None:
        struct.pack_into(">qq", mm, 0, -1, 0)
        mm.close()
    return {"seed": seed, "start": start, "stop": stop, "seeds": len(seeds), "failures": found}


def read_crash_file(path: str) -> tuple[int, bytes] | None:
    """(index, input) the loop was exercising when it died, or None if it finished."""
    data = Path(path).read_bytes()
    if len(data) < CRASH_HEADER:
        return None
    index, length = struct.unpack_from(">qq", data, 0)
    if index < 0:
        return None
    return index, data[CRASH_HEADER:CRASH_HEADER + length]


def save_corpus(buf: bytes, tag: str) -> Path:
    """Keep an input that made a decoder misbehave, as hex (64 characters a line) named by its hash."""
    CORPUS_DIR.mkdir(exist_ok=True)
    digest = hashlib.sha256(buf).hexdigest()[:12]
    kept = sorted(CORPUS_DIR.glob(f"*-{digest}.hex"))
    if kept:
        return kept[0]
    tag = re.sub(r"[^a-z0-9]+", "-", tag.lower()).strip("-")[:40]
    path = CORPUS_DIR / f"{tag}-{digest}.hex"
    if not path.exists():
        text = buf.hex()
        path.write_text("".join(text[i:i + 64] + "\n" for i in range(0, len(text), 64)))
    return path


def load_corpus(path: Path) -> bytes:
    """The bytes of one corpus file."""
    return bytes.fromhex("".join(path.read_text().split()))


def main(argv=None) -> int:
    """Command line: run a slice of the loop and print the JSON summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--stop", type=int, required=True)
    parser.add_argument("--crash-file")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--abort-at", type=int, help="self-test: abort at this input")
    args = parser.parse_args(argv)
    summary = run(args.seed, args.start, args.stop, args.crash_file, args.verbose, abort_at=args.abort_at)
    json.dump(summary, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
