"""Kafka's on-disk batch format: v2 RecordBatch read/write, magic 0/1 read.

The façade over `logstore.native`: the codecs are compiled, the framing of a
log buffer (on-disk-format.md §1) is walked here. Every entry starts with
offset int64, size int32, 4 format-specific bytes and the magic byte; where
each field sits is the native codec's to know (native/batch_header.pxd), so
this module reads fields through it and never at byte offsets of its own.
The append path (Kafka's LogValidator, offsets assigned in place) is
`kafka_append`'s, re-exported here.
"""
from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from logstore.errors import CorruptRecordError, InvalidRecordError
from logstore.formats.kafka_append import (
    AppendInfo,
    assign_offsets,
    recompress,
    recompress_cost,
    require_keys,
    try_validate_append,
    validate_append,
)
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
from logstore.native.legacy import CRC_OFFSET as LEGACY_CRC_OFFSET
from logstore.native.legacy import LegacyEntry, decode_legacy, peek_timestamp
from logstore.native.record_batch import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    CRC_OFFSET,
    CREATE_TIME,
    ENTRY_OVERHEAD,
    LENGTH_OFFSET,
    LOG_APPEND_TIME,
    MAGIC_OFFSET,
    MAX_SEQUENCE,
    RECORD_BATCH_OVERHEAD,
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
    peek_header,
    read_entry_prefix,
    read_header,
    validate_batch,
    validate_records,
)

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = [
    "CODEC_IDS", "CODEC_NAMES", "DEFAULT_MAX_DECOMPRESSED", "GZIP", "LZ4", "NONE", "SNAPPY",
    "ZSTD", "CONTROL_ABORT", "CONTROL_COMMIT", "CREATE_TIME", "LOG_APPEND_TIME", "MAX_SEQUENCE",
    "RECORD_BATCH_OVERHEAD", "LOG_OVERHEAD", "BatchBuilder", "BatchHeader", "ColumnarBuilder",
    "Columns", "ControlRecord", "Entry", "LegacyEntry", "NativeBuffer", "Record",
    "decode_columnar", "decode_entry", "decode_legacy", "decode_records", "decode_unsigned_varint", "decode_varint",
    "decode_varlong", "decrement_sequence", "encode_batch", "encode_control_batch",
    "encode_unsigned_varint", "encode_varint", "encode_varlong", "entry_end",
    "increment_sequence", "iter_entries", "AppendInfo", "EntryBounds", "validate_append", "try_validate_append",
    "assign_offsets", "peek_entry", "build_control_batch", "ProducerBatch", "peek_producer_batch",
    "read_marker", "entry_bounds", "scan_entries",
    "read_control_record", "peek_header", "read_header", "validate_batch", "validate_records",
    "EntryPrefix", "entry_prefix", "crc_position", "ProducedBatch", "peek_produced_batch",
    "NAME", "require_keys", "column_builder", "add_columns", "add_entries", "recompress", "recompress_cost",
]

LOG_OVERHEAD = ENTRY_OVERHEAD
"""Bytes before every entry's payload: offset int64 and size int32."""
MIN_ENTRY_SIZE = 14  # the smallest magic 0 message
KNOWN_MAGICS = (0, 1, 2)

Entry = BatchHeader | LegacyEntry
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


def iter_entries(buf: Buffer, start: int = 0, *, verify_crc: bool = True,
                 max_decompressed: int = DEFAULT_MAX_DECOMPRESSED) -> Generator[Entry, None, None]:
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
    while (prefix := read_entry_prefix(view, pos)) is not None:
        _, size, magic = prefix
        if size < MIN_ENTRY_SIZE:
            raise CorruptRecordError(f"entry size {size} is below the minimum {MIN_ENTRY_SIZE}",
                                     pos + LENGTH_OFFSET)
        if LOG_OVERHEAD + size > end - pos:
            return
        if magic == 2:
            yield validate_batch(view, pos, verify_crc=verify_crc)
        elif magic in (0, 1):
            yield decode_legacy(view, pos, verify_crc=verify_crc, max_decompressed=max_decompressed)
        else:
            raise CorruptRecordError(f"unknown magic byte {magic}", pos + MAGIC_OFFSET)
        pos += LOG_OVERHEAD + size


def decode_entry(buf: Buffer, entry: Entry, *, verify_crc: bool = True,
                 max_decompressed: int = DEFAULT_MAX_DECOMPRESSED) -> list[Record]:
    """The records of an entry yielded by iter_entries (control records included)."""
    if isinstance(entry, LegacyEntry):
        return entry.records
    return decode_records(buf, entry.position, verify_crc=verify_crc,
                          max_decompressed=max_decompressed)


def column_builder(*, headers: bool = False, timestamp_types: bool = False,
                   timestamp_micros: bool = False) -> ColumnarBuilder:
    """A builder that gathers the records of many entries into Arrow-ready columns."""
    return ColumnarBuilder(headers=headers, timestamp_types=timestamp_types, timestamp_micros=timestamp_micros)


def add_columns(builder: ColumnarBuilder, buf: Buffer, entry: Entry, start_offset: int,
                end_offset: int) -> bool:
    """Add the records of an entry `iter_entries` yielded (its CRC already checked) with offsets in
    [start_offset, end_offset) to `builder`; False for a legacy entry, which the caller decodes."""
    if isinstance(entry, LegacyEntry):
        return False
    builder.add_batch(buf, entry.position, start_offset=start_offset, end_offset=end_offset,
                      skip_control=False, verify_crc=False)
    return True


def add_entries(builder: ColumnarBuilder, buf: Buffer, pos: int, start_offset: int, end_offset: int,
                max_rows: int) -> tuple[int, int]:
    """Add the records in [start_offset, end_offset) of the v2 batches from `pos` on (CRCs checked,
    control batches left out) in one native loop; (position, why) with why one of protocol's ENTRIES_*,
    ENTRIES_OTHER at a magic 0/1 entry."""
    return builder.add_entries(buf, pos, start_offset, end_offset, max_rows)


def entry_end(entry: Entry) -> int:
    """The byte position just after an entry."""
    return entry.position + entry.size_in_bytes


# What the storage layer asks of a format (see logstore/formats/__init__.py).

NAME = "kafka"
build_control_batch = encode_control_batch


class EntryBounds(NamedTuple):
    """The framing of one entry, read from its first bytes only (no CRC)."""

    position: int
    size: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    magic: int


def peek_entry(buf: Buffer, pos: int = 0) -> EntryBounds | None:
    """Framing of the entry at `pos`, or None if its header is not all in `buf`.

    Only offsets, size, magic and the max timestamp are read; the bytes after
    the header may lie beyond `buf`. A legacy entry's offset field is its last
    offset, and Kafka keeps no first offset for it.
    """
    return _peek(buf, pos)[0]


def _peek(buf: Buffer, pos: int) -> tuple[EntryBounds | None, BatchHeader | None]:
    """peek_entry's bounds, with the v2 header they came from (None for a legacy entry)."""
    prefix = read_entry_prefix(buf, pos)
    if prefix is None:
        return None, None
    offset, length, magic = prefix
    if length < MIN_ENTRY_SIZE:
        raise CorruptRecordError(f"entry size {length} is below the minimum {MIN_ENTRY_SIZE}",
                                 pos + LENGTH_OFFSET)
    size = LOG_OVERHEAD + length
    if magic == 2:
        header = peek_header(buf, pos)
        if header is None:
            return None, None
        if size < RECORD_BATCH_OVERHEAD:
            raise CorruptRecordError(f"record batch length {length} is below the minimum", pos + LENGTH_OFFSET)
        return EntryBounds(pos, size, offset, header.last_offset, header.max_timestamp, 2), header
    if magic == 1:
        timestamp = peek_timestamp(buf, pos)
        if timestamp is None:
            return None, None
        return EntryBounds(pos, size, offset, offset, timestamp, 1), None
    if magic == 0:
        return EntryBounds(pos, size, offset, offset, -1, 0), None
    raise CorruptRecordError(f"unknown magic byte {magic}", pos + MAGIC_OFFSET)


def scan_entries(buf: Buffer) -> list[BatchHeader] | None:
    """Every entry of `buf` when all are whole, valid v2 batches (one native pass, CRCs checked);
    None otherwise, and the caller walks with `iter_entries` to find where and why. Each has
    `position`, `size_in_bytes`, `last_offset` and `max_timestamp`."""
    try:
        return validate_records(buf, client=False, verify_crc=True)
    except CorruptRecordError:
        return None


def entry_bounds(buf: Buffer, entry: Entry) -> EntryBounds:
    """The framing of an entry `iter_entries` yielded from `buf`, without parsing a v2 header again."""
    if isinstance(entry, LegacyEntry):
        bounds = peek_entry(buf, entry.position)
        # iter_entries yields only whole entries, so the header of this one is all in `buf`.
        assert bounds is not None
        return bounds
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


def peek_producer_batch(buf: Buffer, pos: int = 0) -> ProducerBatch | None:
    """The producer fields of the entry at `pos`, or None if its header is not all in `buf`.

    Legacy entries carry no producer: they come back with producer id -1.
    """
    bounds, h = _peek(buf, pos)
    if bounds is None:
        return None
    if h is None:
        return ProducerBatch(pos, bounds.size, bounds.base_offset, bounds.last_offset, bounds.max_timestamp,
                             -1, -1, -1, -1, False, False, -1)
    return ProducerBatch(pos, bounds.size, h.base_offset, h.last_offset, h.max_timestamp, h.producer_id,
                         h.producer_epoch, h.base_sequence, h.last_sequence, h.is_transactional, h.is_control,
                         h.partition_leader_epoch)


def read_marker(buf: Buffer, pos: int = 0) -> ControlRecord:
    """The control record of the whole control batch at `pos` (a marker's type and coordinator epoch)."""
    records = decode_records(buf, pos, verify_crc=False)
    if not records:
        # The cleaner empties a marker whose transaction is gone: as in Kafka, it marks nothing now.
        return EMPTIED_MARKER
    if len(records) != 1:
        raise InvalidRecordError(f"a control batch holds {len(records)} records, not 1", pos)
    return read_control_record(records[0])


# What tools and the broker ask of an entry before (or instead of) decoding it.

class EntryPrefix(NamedTuple):
    """The bytes every entry starts with whatever its magic, read as they stand (nothing checked)."""

    position: int
    offset: int
    """The base offset of a v2 batch, the (last) offset of a legacy entry."""
    size: int
    """Bytes of the whole entry as its size field claims, the 12-byte log overhead included."""
    magic: int

    @property
    def magic_position(self) -> int:
        """Byte position of the magic byte."""
        return self.position + MAGIC_OFFSET

    @property
    def is_framed(self) -> bool:
        """Whether the size field and magic byte are ones a log entry can have (its bytes may still be bad)."""
        return self.size >= LOG_OVERHEAD + MIN_ENTRY_SIZE and self.magic in KNOWN_MAGICS


def entry_prefix(buf: Buffer, pos: int = 0) -> EntryPrefix | None:
    """The prefix of the entry at `pos`, or None when fewer than its 17 bytes are in `buf`."""
    prefix = read_entry_prefix(buf, pos)
    if prefix is None:
        return None
    offset, length, magic = prefix
    return EntryPrefix(pos, offset, LOG_OVERHEAD + length, magic)


def crc_position(entry: Entry) -> int:
    """Byte position of the CRC field of an entry `iter_entries` yielded (where a mismatch is reported)."""
    if isinstance(entry, LegacyEntry):
        return entry.position + LEGACY_CRC_OFFSET
    return entry.position + CRC_OFFSET


class ProducedBatch(NamedTuple):
    """The first entry of a Produce request's records field, as the handler checks it before the append.

    `size` is what the entry's size field claims, the 12-byte log overhead
    included. The producer fields are those of a v2 batch whose 61-byte header
    is all there; otherwise (False, -1, -1), and the append's validator
    refuses the batch.
    """

    magic: int
    size: int
    is_transactional: bool
    producer_id: int
    producer_epoch: int


def peek_produced_batch(records: Buffer) -> ProducedBatch | None:
    """The first entry of `records` from its first bytes only (no CRC); None when too short for its magic byte."""
    prefix = entry_prefix(records, 0)
    if prefix is None:
        return None
    header = peek_header(records, 0) if prefix.magic == 2 else None
    if header is None:
        return ProducedBatch(prefix.magic, prefix.size, False, -1, -1)
    return ProducedBatch(prefix.magic, prefix.size, header.is_transactional, header.producer_id,
                         header.producer_epoch)
