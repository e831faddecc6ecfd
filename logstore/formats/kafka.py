"""Kafka's on-disk batch format: v2 RecordBatch read/write, magic 0/1 read.

The façade over `logstore.native`: the codecs are compiled, the framing of a
log buffer (on-disk-format.md §1) is walked here. Every entry starts with
offset int64, size int32, 4 format-specific bytes and the magic byte at 16.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Union

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
from logstore.native.legacy import LegacyEntry, decode_legacy
from logstore.native.record_batch import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    CREATE_TIME,
    LOG_APPEND_TIME,
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
    "increment_sequence", "iter_entries",
    "read_control_record", "read_header", "validate_batch", "validate_records",
]

LOG_OVERHEAD = 12
"""Bytes before every entry's payload: offset int64 and size int32."""
MAGIC_POSITION = 16
MIN_ENTRY_PREFIX = 17
MIN_ENTRY_SIZE = 14  # the smallest magic 0 message

Entry = Union[BatchHeader, LegacyEntry]
"""A log entry: a v2 batch header, or a decoded magic 0/1 message or wrapper."""

CONTROL_TYPE_NAMES = {0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER",
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


def entry_end(entry: Entry) -> int:
    """The byte position just after an entry."""
    return entry.position + entry.size_in_bytes
