"""Kafka's on-disk batch format: v2 RecordBatch read/write, magic 0/1 read.

The façade over `logstore.native`: the codecs are compiled, the framing of a
log buffer (on-disk-format.md §1) is walked here. Every entry starts with
offset int64, size int32, 4 format-specific bytes and the magic byte at 16.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterator, NamedTuple, Union

from crc32c import crc32c

from logstore.errors import CorruptRecordError, InvalidRecordError
from logstore.native.compression import (
    CODEC_IDS,
    CODEC_NAMES,
    DEFAULT_MAX_DECOMPRESSED,
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
)
from logstore.native.cleaner import count_null_keys
from logstore.native.legacy import LegacyEntry, decode_legacy
from logstore.native.record_batch import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    CONTROL_FLAG,
    CREATE_TIME,
    LOG_APPEND_TIME,
    MAX_SEQUENCE,
    RECORD_BATCH_OVERHEAD,
    TRANSACTIONAL_FLAG,
    BatchBuilder,
    BatchHeader,
    ColumnarBuilder,
    Columns,
    NativeBuffer,
    Record,
    decode_columnar,
    decode_records,
    decode_unsigned_varint,
    decode_varint,
    decode_varlong,
    decrement_sequence,
    encode_batch,
    encode_control_batch,
    encode_unsigned_varint,
    encode_varint,
    encode_varlong,
    increment_sequence,
    read_header,
    validate_batch,
    validate_records,
)

__all__ = [
    "CODEC_IDS", "CODEC_NAMES", "DEFAULT_MAX_DECOMPRESSED", "GZIP", "LZ4", "NONE", "SNAPPY",
    "ZSTD", "CONTROL_ABORT", "CONTROL_COMMIT", "CREATE_TIME", "LOG_APPEND_TIME", "MAX_SEQUENCE",
    "RECORD_BATCH_OVERHEAD", "LOG_OVERHEAD", "BatchBuilder", "BatchHeader", "ColumnarBuilder",
    "Columns", "ControlRecord", "Entry", "LegacyEntry", "NativeBuffer", "Record",
    "decode_columnar", "decode_entry", "decode_legacy", "decode_records", "decode_unsigned_varint", "decode_varint",
    "decode_varlong", "decrement_sequence", "encode_batch", "encode_control_batch",
    "encode_unsigned_varint", "encode_varint", "encode_varlong", "entry_end",
    "increment_sequence", "iter_entries", "AppendInfo", "EntryBounds", "validate_append",
    "assign_offsets", "peek_entry", "build_control_batch", "ProducerBatch", "peek_producer_batch",
    "read_marker", "entry_bounds", "scan_entries",
    "read_control_record", "read_header", "validate_batch", "validate_records",
]

LOG_OVERHEAD = 12
"""Bytes before every entry's payload: offset int64 and size int32."""
MAGIC_POSITION = 16
MIN_ENTRY_PREFIX = 17
MIN_ENTRY_SIZE = 14  # the smallest magic 0 message

Entry = Union[BatchHeader, LegacyEntry]
"""A log entry: a v2 batch header, or a decoded magic 0/1 message or wrapper."""

CONTROL_TYPE_NAMES = {-1: "EMPTY", 0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER",
                      4: "SNAPSHOT_FOOTER", 5: "KRAFT_VERSION", 6: "KRAFT_VOTERS"}


@dataclass(frozen=True)
class ControlRecord:
    """A control record's key (version, type) and, for markers, the marker's version and coordinator epoch."""

    version: int
    type: int
    coordinator_epoch: int | None = None
    marker_version: int | None = None

    @property
    def type_name(self) -> str:
        """ABORT, COMMIT, a KRaft type name, or UNKNOWN."""
        return CONTROL_TYPE_NAMES.get(self.type, "UNKNOWN")


EMPTIED_MARKER = ControlRecord(0, -1)


def read_control_record(record: Record) -> ControlRecord:
    """Decode the key (and marker value) of a record from a control batch (§3)."""
    key = record.key
    if key is None or len(key) < 4:
        raise InvalidRecordError("control record key is shorter than 4 bytes")
    version = int.from_bytes(key[0:2], "big", signed=True)
    kind = int.from_bytes(key[2:4], "big", signed=True)
    if version < 0:
        raise InvalidRecordError(f"control record key has negative version {version}")
    if kind not in (CONTROL_ABORT, CONTROL_COMMIT):
        return ControlRecord(version, kind)
    value = record.value
    if value is None or len(value) < 6:
        raise InvalidRecordError("transaction marker value is shorter than 6 bytes")
    marker_version = int.from_bytes(value[0:2], "big", signed=True)
    if marker_version < 0:
        raise InvalidRecordError(f"transaction marker has negative version {marker_version}")
    return ControlRecord(version, kind, int.from_bytes(value[2:6], "big", signed=True), marker_version)


def iter_entries(buf, start: int = 0, *, verify_crc: bool = True,
                 max_decompressed: int = DEFAULT_MAX_DECOMPRESSED) -> Iterator[Entry]:
    """Walk the entries of a log buffer from `start`, Kafka's FileLogInputStream rules.

    Stops quietly at a partial tail (fewer than 17 bytes, or an entry running
    past the end); the position after the last entry yielded is the end of
    the valid bytes. v2 entries are yielded as headers (records decoded on
    demand with `decode_records`), legacy entries fully decoded.
    """
    view = memoryview(buf).cast("B")
    end = len(view)
    if start < 0:
        raise ValueError(f"negative start position {start}")
    pos = start
    while end - pos >= MIN_ENTRY_PREFIX:
        size = int.from_bytes(view[pos + 8:pos + 12], "big", signed=True)
        if size < MIN_ENTRY_SIZE:
            raise CorruptRecordError(f"entry size {size} is below the minimum {MIN_ENTRY_SIZE}", pos + 8)
        if LOG_OVERHEAD + size > end - pos:
            return
        magic = view[pos + MAGIC_POSITION]
        if magic == 2:
            yield validate_batch(view, pos, verify_crc=verify_crc)
        elif magic in (0, 1):
            yield decode_legacy(view, pos, verify_crc=verify_crc, max_decompressed=max_decompressed)
        else:
            raise CorruptRecordError(f"unknown magic byte {magic}", pos + MAGIC_POSITION)
        pos += LOG_OVERHEAD + size


def decode_entry(buf, entry: Entry, *, verify_crc: bool = True,
                 max_decompressed: int = DEFAULT_MAX_DECOMPRESSED) -> list:
    """The records of an entry yielded by iter_entries (control records included)."""
    if isinstance(entry, LegacyEntry):
        return entry.records
    return decode_records(buf, entry.position, verify_crc=verify_crc,
                          max_decompressed=max_decompressed)


def column_builder(*, headers: bool = False, timestamp_types: bool = False) -> ColumnarBuilder:
    """A builder that gathers the records of many entries into Arrow-ready columns."""
    return ColumnarBuilder(headers=headers, timestamp_types=timestamp_types)


def add_columns(builder: ColumnarBuilder, buf, entry: Entry, start_offset: int, end_offset: int) -> bool:
    """Add the records of an entry `iter_entries` yielded (its CRC already checked) with offsets in
    [start_offset, end_offset) to `builder`; False for a legacy entry, which the caller decodes."""
    if isinstance(entry, LegacyEntry):
        return False
    builder.add_batch(buf, entry.position, start_offset=start_offset, end_offset=end_offset,
                      skip_control=False, verify_crc=False)
    return True


def entry_end(entry: Entry) -> int:
    """The byte position just after an entry."""
    return entry.position + entry.size_in_bytes


# What the storage layer asks of a format (see logstore/formats/__init__.py).

NAME = "kafka"
build_control_batch = encode_control_batch
_BE_I64 = struct.Struct(">q")
_BE_I32 = struct.Struct(">i")
_ATTRIBUTES = struct.Struct(">h")
TIMESTAMP_TYPE_FLAG = 0x08


class EntryBounds(NamedTuple):
    """The framing of one entry, read from its first bytes only (no CRC)."""

    position: int
    size: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    magic: int


def peek_entry(buf, pos: int = 0) -> EntryBounds | None:
    """Framing of the entry at `pos`, or None if its header is not all in `buf`.

    Only offsets, size, magic and the max timestamp are read; the bytes after
    the header may lie beyond `buf`. A legacy entry's offset field is its last
    offset, and Kafka keeps no first offset for it.
    """
    view = memoryview(buf)
    available = len(view) - pos
    if available < MIN_ENTRY_PREFIX:
        return None
    offset = _BE_I64.unpack_from(view, pos)[0]
    size = _BE_I32.unpack_from(view, pos + 8)[0]
    if size < MIN_ENTRY_SIZE:
        raise CorruptRecordError(f"entry size {size} is below the minimum {MIN_ENTRY_SIZE}", pos + 8)
    magic = view[pos + MAGIC_POSITION]
    if magic == 2:
        if available < RECORD_BATCH_OVERHEAD:
            return None
        if size + LOG_OVERHEAD < RECORD_BATCH_OVERHEAD:
            raise CorruptRecordError(f"record batch length {size} is below the minimum", pos + 8)
        delta = _BE_I32.unpack_from(view, pos + 23)[0]
        return EntryBounds(pos, LOG_OVERHEAD + size, offset, offset + delta,
                           _BE_I64.unpack_from(view, pos + 35)[0], 2)
    if magic == 1:
        if available < 30:
            return None
        return EntryBounds(pos, LOG_OVERHEAD + size, offset, offset, _BE_I64.unpack_from(view, pos + 22)[0], 1)
    if magic == 0:
        return EntryBounds(pos, LOG_OVERHEAD + size, offset, offset, -1, 0)
    raise CorruptRecordError(f"unknown magic byte {magic}", pos + MAGIC_POSITION)


def scan_entries(buf) -> list[BatchHeader] | None:
    """Every entry of `buf` when all are whole, valid v2 batches (one native pass, CRCs checked);
    None otherwise, and the caller walks with `iter_entries` to find where and why. Each has
    `position`, `size_in_bytes`, `last_offset` and `max_timestamp`."""
    try:
        return validate_records(buf, client=False, verify_crc=True)
    except CorruptRecordError:
        return None


def entry_bounds(buf, entry: Entry) -> EntryBounds:
    """The framing of an entry `iter_entries` yielded from `buf`, without parsing a v2 header again."""
    if isinstance(entry, LegacyEntry):
        return peek_entry(buf, entry.position)
    return EntryBounds(entry.position, entry.size_in_bytes, entry.base_offset, entry.last_offset,
                       entry.max_timestamp, 2)


class ProducerBatch(NamedTuple):
    """What producer state needs of an entry, read from its first 61 bytes only (no CRC)."""

    position: int
    size: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_sequence: int
    is_transactional: bool
    is_control: bool
    partition_leader_epoch: int


_V2_HEADER = struct.Struct(">qiibIhiqqqhii")


def peek_producer_batch(buf, pos: int = 0) -> ProducerBatch | None:
    """The producer fields of the entry at `pos`, or None if its header is not all in `buf`.

    Legacy entries carry no producer: they come back with producer id -1.
    """
    bounds = peek_entry(buf, pos)
    if bounds is None:
        return None
    if bounds.magic < 2:
        return ProducerBatch(pos, bounds.size, bounds.base_offset, bounds.last_offset, bounds.max_timestamp,
                             -1, -1, -1, -1, False, False, -1)
    (base, _, leader_epoch, _, _, attributes, delta, _, max_ts, pid, epoch, base_seq,
     _) = _V2_HEADER.unpack_from(buf, pos)
    last_seq = -1 if base_seq < 0 else increment_sequence(base_seq, delta)
    return ProducerBatch(pos, bounds.size, base, base + delta, max_ts, pid, epoch, base_seq, last_seq,
                         bool(attributes & TRANSACTIONAL_FLAG), bool(attributes & CONTROL_FLAG), leader_epoch)


def read_marker(buf, pos: int = 0) -> ControlRecord:
    """The control record of the whole control batch at `pos` (a marker's type and coordinator epoch)."""
    records = decode_records(buf, pos, verify_crc=False)
    if not records:
        # The cleaner empties a marker whose transaction is gone: as in Kafka, it marks nothing now.
        return EMPTIED_MARKER
    if len(records) != 1:
        raise InvalidRecordError(f"a control batch holds {len(records)} records, not 1", pos)
    return read_control_record(records[0])


@dataclass
class AppendInfo:
    """What validating a records field found: its batches and the offsets they need."""

    batches: list
    size: int
    offset_count: int
    record_count: int
    max_timestamp: int
    max_timestamp_batch: int
    """Index in `batches` of the batch holding the max timestamp (its last offset is indexed)."""


def validate_append(buf, *, client: bool = True, max_batch_size: int = -1) -> AppendInfo:
    """Check a records field about to be appended and summarise it (no offsets assigned yet).

    `client=True` applies Kafka's produce rules; internal writers (markers,
    coordinators) pass False so control batches are allowed.
    """
    batches = validate_records(buf, client=client, max_batch_size=max_batch_size)
    if not batches:
        raise InvalidRecordError("an append needs at least one record batch", 0)
    offset_count = records = 0
    max_ts, max_index = -1, 0
    for i, header in enumerate(batches):
        offset_count += header.last_offset_delta + 1
        records += header.record_count
        if header.max_timestamp > max_ts:
            max_ts, max_index = header.max_timestamp, i
    return AppendInfo(batches, len(memoryview(buf)), offset_count, records, max_ts, max_index)


def require_keys(buf, info: AppendInfo, partition: str) -> None:
    """Kafka's rule for compacted topics: a record without a key is refused (its batch index says which)."""
    for i, header in enumerate(info.batches):
        if count_null_keys(buf, header.position):
            raise InvalidRecordError(f"Compacted topic cannot accept message without key in topic "
                                     f"partition {partition} (batch {i}).", header.position)


def assign_offsets(buf, info: AppendInfo, base_offset: int, *, leader_epoch: int = -1,
                   log_append_time: int | None = None) -> int:
    """Write offsets (and the leader epoch) into a writable records field; returns the last offset.

    The headers in `info` keep the values they were validated with.

    Base offset and leader epoch sit outside the CRC, so this is a patch in
    place. With `log_append_time` (message.timestamp.type=LogAppendTime) the
    max timestamp and timestamp type change too and the CRC is recomputed.
    """
    view = memoryview(buf)
    if view.readonly:
        raise TypeError("assign_offsets needs a writable buffer")
    offset = base_offset
    for header in info.batches:
        pos = header.position
        _BE_I64.pack_into(view, pos, offset)
        _BE_I32.pack_into(view, pos + 12, leader_epoch)
        if log_append_time is not None:
            end = pos + header.size_in_bytes
            attributes = header.attributes | TIMESTAMP_TYPE_FLAG
            _ATTRIBUTES.pack_into(view, pos + 21, attributes)
            _BE_I64.pack_into(view, pos + 35, log_append_time)
            crc = crc32c(view[pos + 21:end])
            struct.pack_into(">I", view, pos + 17, crc)
        offset += header.last_offset_delta + 1
    if log_append_time is not None:
        info.max_timestamp, info.max_timestamp_batch = log_append_time, 0
    return offset - 1
