"""The kafka format's append path: Kafka's LogValidator over a records field, and offsets assigned in place.

A producer's batch (`client=True`) is checked as Kafka's LogValidator does
it, natively (`logstore.native.record_batch.validate_produced`): the header
rules, then every record, decompressed if need be, whole and numbered
0, 1, 2, ... up to recordCount, held to the topic's `RecordRules`. Records
that break a rule are refused together, each named with its index (Kafka's
RecordValidationException); a batch whose records cannot be read is
refused as a whole. Internal writers' batches (markers, coordinator
records) are checked up to their CRC. A topic whose compression.type is not
`producer` gets batches in another codec recompressed (`recompress`), as
Kafka's LogValidator does; batches already in it stay the bytes they came as.
Re-exported by `logstore.formats.kafka`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from logstore.errors import InvalidRecordError, RecordTooLargeError
from logstore.formats.protocol import (
    LONG_MAX,
    RecordError,
    RecordRules,
    RecordValidationError,
    TimestampValidationError,
)
from logstore.native.cleaner import count_null_keys
from logstore.native.compression import CODEC_IDS
from logstore.native.record_batch import (
    RECORD_WITHOUT_KEY,
    BatchHeader,
    RecordsCheck,
    assign_batch_offsets,
    read_header,
    recompress_batch,
    validate_produced,
    validate_records,
)

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = ["AppendInfo", "assign_offsets", "recompress", "recompress_cost", "require_keys", "try_validate_append",
           "validate_append"]

# compression.type's names for the codecs (Kafka's BrokerCompressionType) → codec ids.
_TOPIC_CODECS = {"uncompressed": CODEC_IDS["none"], "gzip": CODEC_IDS["gzip"], "snappy": CODEC_IDS["snappy"],
                 "lz4": CODEC_IDS["lz4"], "zstd": CODEC_IDS["zstd"]}
# What recompressing a byte into each codec (none, gzip, snappy, lz4, zstd) costs in `check_cost` units (0.3 ns),
# at the default levels, measured on 100 B records of words (1,000 and 10,000 a batch, decompressing and copying
# included): gzip 125-165 ns a byte, zstd 25-35, snappy 9-12, lz4 4-5.5, none (decompress and copy) 2-4.
_COMPRESS_COST = (8, 500, 35, 15, 100)


@dataclass
class AppendInfo:
    """What validating a records field found: its batches and the offsets they need."""

    batches: list[BatchHeader]
    size: int
    offset_count: int
    record_count: int
    max_timestamp: int
    max_timestamp_batch: int
    """Index in `batches` of the batch holding the max timestamp (its last offset is indexed)."""
    check_cost: int = 0
    """What validating took, in bytes of walking records (a compressed batch's records count more)."""
    records: bytearray | None = None
    """The bytes to append instead of those validated, when `recompress` rewrote them; None: those bytes."""


def validate_append(buf: Buffer, *, client: bool = True, max_batch_size: int = -1,
                    rules: RecordRules | None = None) -> AppendInfo:
    """Check a records field about to be appended and summarise it (no offsets assigned yet).

    `client=True` is Kafka's LogValidator for a producer's batches: the
    header rules, then every record (decompressed if need be) whole, with
    offset deltas 0, 1, 2, ... and exactly recordCount of them, held to
    `rules` (timestamp bounds, keys; None: neither is checked); a
    maxTimestamp the records contradict is corrected in place, so `buf`
    must be writable. Internal writers
    (markers, coordinators) pass False: the header and CRC are checked and
    control batches are allowed.
    """
    info = _validate(buf, client, max_batch_size, rules, -1)
    # Without a work limit every batch is checked to the end.
    assert info is not None
    return info


def try_validate_append(buf: Buffer, work_limit: int, *, max_batch_size: int = -1,
                        rules: RecordRules | None = None) -> AppendInfo | None:
    """`validate_append(client=True)`, or None when that would cost more than `work_limit`
    (`AppendInfo.check_cost`): the caller validates it again without a limit, away from its event loop."""
    return _validate(buf, True, max_batch_size, rules, max(work_limit, 0))


_PERMISSIVE = RecordRules(now=0, partition="", create_time=False)


def _validate(buf: Buffer, client: bool, max_batch_size: int, rules: RecordRules | None,
              work_limit: int) -> AppendInfo | None:
    size = len(memoryview(buf))
    cost = 0
    if client:
        rules = rules or _PERMISSIVE
        batches: list[BatchHeader] = []
        pos = 0
        while pos < size:
            check = validate_produced(
                buf, pos, max_batch_size=max_batch_size, now=rules.now, create_time=rules.create_time,
                timestamp_before_max_ms=rules.timestamp_before_max_ms,
                timestamp_after_max_ms=rules.timestamp_after_max_ms, keys_required=rules.keys_required,
                work_limit=-1 if work_limit < 0 else max(work_limit - cost, 0))
            if check is None:
                return None
            if not check.ok:
                raise _refusal(check, rules)
            batches.append(check.header)
            cost += check.cost
            pos += check.header.size_in_bytes
    else:
        batches = validate_records(buf, client=False, max_batch_size=max_batch_size)
        cost = size
    if not batches:
        raise InvalidRecordError("an append needs at least one record batch", 0)
    offset_count = records = 0
    max_ts, max_index = -1, 0
    for i, header in enumerate(batches):
        offset_count += header.last_offset_delta + 1
        records += header.record_count
        if header.max_timestamp > max_ts:
            max_ts, max_index = header.max_timestamp, i
    return AppendInfo(batches, size, offset_count, records, max_ts, max_index, cost)


def _refusal(check: RecordsCheck, rules: RecordRules) -> InvalidRecordError:
    """Kafka's answer to a batch whose records `validate_produced` faulted: its message as Kafka words it,
    the records it names saying where (their own messages give the byte for a broken one)."""
    header = check.header
    if check.broken is not None:
        if check.broken_at < 0:
            return InvalidRecordError(check.broken, header.position)
        errors = [RecordError(check.broken_at, check.broken)]
        return RecordValidationError(_summary(1, errors), errors)
    errors = []
    timestamps = False
    for index, kind, timestamp in check.faults:
        if kind == RECORD_WITHOUT_KEY:
            errors.append(RecordError(index, f"Compacted topic cannot accept message without key in topic "
                                             f"partition {rules.partition}"))
        else:
            timestamps = True
            low = max(rules.now - rules.timestamp_before_max_ms, -LONG_MAX - 1)
            high = min(rules.now + rules.timestamp_after_max_ms, LONG_MAX)
            errors.append(RecordError(index, f"Timestamp {timestamp} of message with offset "
                                             f"{header.base_offset + index} is out of range. The timestamp "
                                             f"should be within [{low}, {high}]"))
    if timestamps:
        return TimestampValidationError("One or more records have been rejected due to invalid timestamp", errors)
    return RecordValidationError(_summary(check.fault_count, errors), errors)


def _summary(count: int, errors: list[RecordError]) -> str:
    shown = ", ".join(f"RecordError(batchIndex={e.batch_index}, message='{e.message}')" for e in errors[:3])
    return (f"One or more records have been rejected due to {count} record errors in total, and only "
            f"showing the first three errors at most: [{shown}]")


def require_keys(buf: Buffer, info: AppendInfo, partition: str) -> None:
    """Kafka's rule for compacted topics: a record without a key is refused (its batch index says which)."""
    for i, header in enumerate(info.batches):
        if count_null_keys(buf, header.position):
            raise InvalidRecordError(f"Compacted topic cannot accept message without key in topic "
                                     f"partition {partition} (batch {i}).", header.position)


def assign_offsets(buf: Buffer, info: AppendInfo, base_offset: int, *, leader_epoch: int = -1,
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
    if log_append_time is not None and log_append_time < 0:
        raise ValueError(f"negative log append time {log_append_time}")
    append_time = -1 if log_append_time is None else log_append_time
    offset = base_offset
    for header in info.batches:
        assign_batch_offsets(view, header.position, offset, leader_epoch, append_time)
        offset += header.last_offset_delta + 1
    if log_append_time is not None:
        info.max_timestamp, info.max_timestamp_batch = log_append_time, 0
    return offset - 1


def _codec_of(compression_type: str) -> int:
    try:
        return _TOPIC_CODECS[compression_type]
    except KeyError:
        raise ValueError(f"no codec is named {compression_type!r}") from None


def recompress_cost(info: AppendInfo, compression_type: str) -> int:
    """What `recompress` would cost in `check_cost` units (0 when no batch needs it): an upper bound, taking
    every unit validation cost for a byte to compress (a compressed batch's records cost it more than one)."""
    codec = _codec_of(compression_type)
    if all(header.compression == codec for header in info.batches):
        return 0
    return info.check_cost * _COMPRESS_COST[codec]


def recompress(buf: Buffer, info: AppendInfo, compression_type: str, level: int | None, *,
               max_batch_size: int = -1) -> AppendInfo:
    """Kafka's LogValidator for a topic whose compression.type is a codec: validated batches in another codec
    rewritten in this one at Kafka's `level` (its compression.gzip/lz4/zstd.level), into `AppendInfo.records`.

    Every record keeps its bytes (offset and timestamp deltas, key, value,
    headers) and every batch its producer id, epoch, base sequence and flags;
    `info` comes back unchanged when every batch is already in the codec, so
    those bytes are appended as they came. A rewritten batch larger than
    `max_batch_size` is refused, as Kafka re-checks a size recompression changed.
    """
    codec = _codec_of(compression_type)
    if all(header.compression == codec for header in info.batches):
        return info
    source = memoryview(buf)
    out = bytearray()
    batches: list[BatchHeader] = []
    for header in info.batches:
        start, end = header.position, header.position + header.size_in_bytes
        if header.compression == codec:
            batch: Buffer = source[start:end]
        else:
            batch = recompress_batch(source, start, codec, level)
            if 0 <= max_batch_size < len(batch):
                raise RecordTooLargeError(f"Message batch size is {len(batch)} bytes after recompression to "
                                          f"{compression_type}, which exceeds the maximum configured size of "
                                          f"{max_batch_size}.", start)
        batches.append(_header_at(out, batch))
    return AppendInfo(batches, len(out), info.offset_count, info.record_count, info.max_timestamp,
                      info.max_timestamp_batch, info.check_cost + recompress_cost(info, compression_type), out)


def _header_at(out: bytearray, batch: Buffer) -> BatchHeader:
    """Append `batch` to `out` and read its header where it now sits."""
    position = len(out)
    out += batch
    return read_header(out, position)
