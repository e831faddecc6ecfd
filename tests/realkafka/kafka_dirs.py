"""Real Kafka log directories (tests/fixtures/real-kafka) and an independent oracle over them.

The oracle reads segments with kafka-python's record classes and decodes
`__consumer_offsets` records by hand with `struct`; it imports nothing from
logstore, so a test can hold logstore's view of a directory against it.

Formats, from Kafka's message schemas (group-coordinator module):

    control record key   version int16, type int16 (0 = ABORT, 1 = COMMIT)
    OffsetCommitKey      version int16 (0 or 1), group string, topic string, partition int32
                         (2 is GroupMetadataKey, 3+ are KIP-848 group records: skipped)
    OffsetCommitValue    version int16, then
                         v0: offset int64, metadata string, commitTimestamp int64
                         v1: offset int64, metadata string, commitTimestamp int64, expireTimestamp int64
                         v2: offset int64, metadata string, commitTimestamp int64
                         v3: offset int64, leaderEpoch int32, metadata string, commitTimestamp int64
                         v4: as v3 with a compact string and tagged fields (flexible)
    string               int16 length + UTF-8 bytes; compact string: uvarint length + 1
"""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

from kafka.errors import CorruptRecordError
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.legacy_records import LegacyRecordBatch
from kafka.record.memory_records import MemoryRecords

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "real-kafka"

ABORT, COMMIT = 0, 1
OFFSETS_TOPIC = "__consumer_offsets"


@dataclass(frozen=True)
class OracleRecord:
    """One record as kafka-python decodes it; offsets and timestamps (ms) as in the log."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    producer_id: int
    is_transactional: bool
    is_control: bool


def manifest() -> list[dict]:
    """The entries of MANIFEST.json, one per fixture log dir."""
    return json.loads((FIXTURES / "MANIFEST.json").read_text())


def fixture_dirs() -> list[Path]:
    """The fixture log dirs, in manifest order."""
    return [FIXTURES / entry["name"] for entry in manifest()]


def partition_dirs(log_dir: Path) -> list[Path]:
    """The `<topic>-<partition>` directories of a log dir, sorted by topic then partition."""
    found = [p for p in Path(log_dir).iterdir() if p.is_dir() and _split_partition(p.name)]
    return sorted(found, key=lambda p: _split_partition(p.name))


def _split_partition(name: str) -> tuple[str, int] | None:
    """(topic, partition) of a partition directory name, or None if it is not one."""
    topic, _, number = name.rpartition("-")
    return (topic, int(number)) if topic and number.isdigit() else None


def segment_files(partition_dir: Path) -> list[Path]:
    """The `.log` segments of a partition, in base-offset order."""
    logs = [p for p in Path(partition_dir).glob("*.log") if p.stem.isdigit()]
    return sorted(logs, key=lambda p: int(p.stem))


def decode_partition(partition_dir: Path) -> list[OracleRecord]:
    """Every record of every segment in offset order; the first partial or bad batch ends the log."""
    records: list[OracleRecord] = []
    for segment in segment_files(partition_dir):
        whole = _decode_segment(segment.read_bytes(), records)
        if not whole:
            break
    return records


def _decode_segment(data: bytes, out: list[OracleRecord]) -> bool:
    """Append a segment's records to `out`; False if it ends in a partial or corrupt batch."""
    batches = MemoryRecords(data)
    read = 0
    while batches.has_next():
        try:
            batch = batches.next_batch()
            if not batch.validate_crc():
                return False
            decoded = _v2_records(batch) if isinstance(batch, DefaultRecordBatch) else _legacy_records(batch)
        except (CorruptRecordError, struct.error, AssertionError):
            return False
        out.extend(decoded)
        read += batch.size_in_bytes
    return read == len(data)


def _v2_records(batch: DefaultRecordBatch) -> list[OracleRecord]:
    """The records of one magic-2 batch, carrying the batch's producer and flags."""
    return [
        OracleRecord(r.offset, r.timestamp, r.key, r.value, tuple(r.headers),
                     batch.producer_id, batch.is_transactional, batch.is_control_batch)
        for r in batch
    ]


def _legacy_records(batch: LegacyRecordBatch) -> list[OracleRecord]:
    """The records of a magic 0/1 message set entry (a compressed wrapper yields its inner ones)."""
    return [
        OracleRecord(r.offset, r.timestamp, r.key, r.value, (), -1, False, False)
        for r in batch
    ]


def control_type(record: OracleRecord) -> int:
    """The type of a control record (0 = ABORT, 1 = COMMIT, 2+ = KRaft control records)."""
    _version, kind = struct.unpack_from(">hh", record.key)
    return kind


def committed_records(partition_dir: Path) -> list[OracleRecord]:
    """What a read_committed consumer sees: no control records, no aborted ones, nothing past the LSO."""
    records = decode_partition(partition_dir)
    open_txns: dict[int, list[int]] = {}  # producer id -> offsets of its open transaction
    aborted: set[int] = set()
    for record in records:
        if record.is_control:
            kind = control_type(record)
            if kind in (ABORT, COMMIT):
                offsets = open_txns.pop(record.producer_id, [])
                if kind == ABORT:
                    aborted.update(offsets)
        elif record.is_transactional:
            open_txns.setdefault(record.producer_id, []).append(record.offset)
    stable = min((offsets[0] for offsets in open_txns.values()), default=None)
    return [
        r for r in records
        if not r.is_control and r.offset not in aborted and (stable is None or r.offset < stable)
    ]


def offsets_partitions(log_dir: Path) -> list[Path]:
    """The `__consumer_offsets-N` directories present in a log dir."""
    return [p for p in partition_dirs(log_dir) if _split_partition(p.name)[0] == OFFSETS_TOPIC]


def committed_offsets(log_dir: Path) -> dict[tuple[str, str, int], int]:
    """The latest committed offset per (group, topic, partition) in the `__consumer_offsets` partitions present."""
    offsets: dict[tuple[str, str, int], int] = {}
    for partition in offsets_partitions(log_dir):
        _apply_offsets_partition(decode_partition(partition), offsets)
    return offsets


def _apply_offsets_partition(records: list[OracleRecord], offsets: dict) -> None:
    """Replay one `__consumer_offsets` partition: plain commits at once, transactional ones at their COMMIT."""
    pending: dict[int, list[OracleRecord]] = {}
    for record in records:
        if record.is_control:
            kind = control_type(record)
            if kind in (ABORT, COMMIT):
                staged = pending.pop(record.producer_id, [])
                if kind == COMMIT:
                    for commit in staged:
                        _apply_offset_record(commit, offsets)
        elif record.is_transactional:
            pending.setdefault(record.producer_id, []).append(record)
        else:
            _apply_offset_record(record, offsets)


def _apply_offset_record(record: OracleRecord, offsets: dict) -> None:
    """Apply one offset-commit record (or its tombstone); other record kinds are skipped."""
    key = decode_offset_commit_key(record.key)
    if key is None:
        return
    if record.value is None:
        offsets.pop(key, None)
    else:
        offsets[key] = decode_offset_commit_value(record.value)["offset"]


def decode_offset_commit_key(key: bytes) -> tuple[str, str, int] | None:
    """(group, topic, partition) of an OffsetCommitKey v0/v1; None for the other key versions."""
    (version,) = struct.unpack_from(">h", key, 0)
    if version not in (0, 1):
        return None
    group, pos = _string(key, 2)
    topic, pos = _string(key, pos)
    (partition,) = struct.unpack_from(">i", key, pos)
    if pos + 4 != len(key):
        raise ValueError(f"{len(key) - pos - 4} bytes left after an offset commit key")
    return group, topic, partition


def decode_offset_commit_value(value: bytes) -> dict:
    """The fields of an OffsetCommitValue v0-v4 (offset first in every version)."""
    (version,) = struct.unpack_from(">h", value, 0)
    if not 0 <= version <= 4:
        raise ValueError(f"unknown OffsetCommitValue version {version}")
    (offset,) = struct.unpack_from(">q", value, 2)
    fields = {"version": version, "offset": offset, "leader_epoch": -1, "expire_timestamp": -1}
    pos = 10
    if version >= 3:
        (fields["leader_epoch"],) = struct.unpack_from(">i", value, pos)
        pos += 4
    if version >= 4:
        fields["metadata"], pos = _compact_string(value, pos)
    else:
        fields["metadata"], pos = _string(value, pos)
    (fields["commit_timestamp"],) = struct.unpack_from(">q", value, pos)
    pos += 8
    if version == 1:
        (fields["expire_timestamp"],) = struct.unpack_from(">q", value, pos)
        pos += 8
    if version >= 4:
        pos = _skip_tagged_fields(value, pos)
    if pos != len(value):
        raise ValueError(f"{len(value) - pos} bytes left after an OffsetCommitValue v{version}")
    return fields


def _string(data: bytes, pos: int) -> tuple[str, int]:
    """A non-null int16-length string at pos, and the position after it."""
    (length,) = struct.unpack_from(">h", data, pos)
    if length < 0 or pos + 2 + length > len(data):
        raise ValueError(f"bad string length {length} at {pos}")
    return data[pos + 2:pos + 2 + length].decode("utf-8"), pos + 2 + length


def _uvarint(data: bytes, pos: int) -> tuple[int, int]:
    """An unsigned varint at pos, and the position after it."""
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _compact_string(data: bytes, pos: int) -> tuple[str, int]:
    """A non-null compact string (uvarint length + 1) at pos, and the position after it."""
    length_plus_one, pos = _uvarint(data, pos)
    if length_plus_one == 0:
        raise ValueError(f"null compact string at {pos}")
    end = pos + length_plus_one - 1
    return data[pos:end].decode("utf-8"), end


def _skip_tagged_fields(data: bytes, pos: int) -> int:
    """The position after a flexible version's tagged-field section."""
    count, pos = _uvarint(data, pos)
    for _ in range(count):
        _tag, pos = _uvarint(data, pos)
        size, pos = _uvarint(data, pos)
        pos += size
    return pos
