"""`LogFormat`: what the storage layer, the tools and the broker call on an on-disk format.

A format is a module (`logstore.formats.kafka` is the one there is); this
Protocol is its type, so `fmt` parameters can say what they hold and a checker
can tell a format module from any other. tests/format/test_log_format.py
checks the kafka module against it member by member.

Offsets are Kafka offsets, positions and sizes bytes, timestamps ms. `buf` is
any object with the buffer protocol (bytes, bytearray, memoryview, mmap).
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol, runtime_checkable

from logstore.errors import InvalidRecordError, InvalidTimestampError

LONG_MAX = (1 << 63) - 1

if TYPE_CHECKING:
    from typing_extensions import Buffer

    from logstore.formats.kafka import (
        AppendInfo,
        BatchHeader,
        ColumnarBuilder,
        ControlRecord,
        Entry,
        EntryBounds,
        ProducedBatch,
        ProducerBatch,
        Record,
    )
    from logstore.formats.kafka import BatchBuilder as _BatchBuilder

# Why `LogFormat.add_entries` stopped: no whole entry is left in the buffer at the position, the entry
# there begins at or past the end offset, the builder holds max_rows rows, or the entry there is one the
# caller decodes itself (`add_columns` returns False for it).
ENTRIES_NEED_BYTES = 0
ENTRIES_END = 1
ENTRIES_FULL = 2
ENTRIES_OTHER = 3


class RecordRules(NamedTuple):
    """What Kafka's LogValidator holds every produced record to beyond its framing, from the topic's config.

    `now` is the broker's clock (ms) the timestamps are judged by: with
    `create_time` (message.timestamp.type=CreateTime) a record's timestamp
    must lie in [now - timestamp_before_max_ms, now + timestamp_after_max_ms];
    with `keys_required` (a compacted topic) every record needs a key.
    `partition` (`topic-index`) names the partition in Kafka's messages.
    A tuple rather than a frozen dataclass: one is made for every produced batch.
    """

    now: int
    partition: str
    create_time: bool = True
    timestamp_before_max_ms: int = LONG_MAX
    timestamp_after_max_ms: int = LONG_MAX
    keys_required: bool = False


class RecordError(NamedTuple):
    """A record a produce refused: its index in its batch (Kafka's batchIndex) and why, in Kafka's words."""

    batch_index: int
    message: str


class RecordValidationError(InvalidRecordError):
    """Records of one batch that break Kafka's rules (INVALID_RECORD), each listed with its index.

    Kafka's RecordValidationException: Produce v8+ answers `record_errors`
    with the partition's error, and the message as its `error_message`.
    """

    def __init__(self, message: str, record_errors: Sequence[RecordError], position: int = -1):
        super().__init__(message, position)
        self.record_errors = tuple(record_errors)


class TimestampValidationError(InvalidTimestampError):
    """Records of one batch whose timestamps are out of range (INVALID_TIMESTAMP), each listed with its index."""

    def __init__(self, message: str, record_errors: Sequence[RecordError], position: int = -1):
        super().__init__(message, position)
        self.record_errors = tuple(record_errors)


def record_errors(exc: BaseException | None) -> tuple[RecordError, ...]:
    """The records an append refused one by one (Produce's `record_errors`); () for an error about the whole batch."""
    if isinstance(exc, (RecordValidationError, TimestampValidationError)):
        return exc.record_errors
    return ()


@runtime_checkable
class LogFormat(Protocol):
    """An on-disk batch format, as a module: framing, validation, producer fields, codecs.

    Stateless and thread-safe: every member is a function of its arguments.
    """

    NAME: str
    """The name the format is registered under (`logstore.formats.FORMATS`)."""

    # The append path.
    def validate_append(self, buf: Buffer, *, client: bool = True, max_batch_size: int = -1,
                        rules: RecordRules | None = None) -> AppendInfo:
        """Check a records field about to be appended and summarise it (no offsets assigned yet).

        `client=True` is Kafka's LogValidator for a producer's batches: every
        record walked, and held to `rules`; records breaking a rule raise a
        RecordValidationError or TimestampValidationError listing them.
        """
        ...

    def try_validate_append(self, buf: Buffer, work_limit: int, *, max_batch_size: int = -1,
                            rules: RecordRules | None = None) -> AppendInfo | None:
        """`validate_append(client=True)`, or None when that would cost more than `work_limit` (`check_cost`)."""
        ...

    def recompress_cost(self, info: AppendInfo, compression_type: str) -> int:
        """What `recompress` to a topic's compression.type would cost, in `check_cost` units (0: nothing to do)."""
        ...

    def recompress(self, buf: Buffer, info: AppendInfo, compression_type: str, level: int | None, *,
                   max_batch_size: int = -1) -> AppendInfo:
        """Validated batches not in the topic's codec (compression.type, Kafka's `level`) rewritten in it, into
        `AppendInfo.records`; `info` itself when none needs it."""
        ...

    def require_keys(self, buf: Buffer, info: AppendInfo, partition: str) -> None:
        """Refuse a record without a key (compacted topics)."""
        ...

    def assign_offsets(self, buf: Buffer, info: AppendInfo, base_offset: int, *, leader_epoch: int = -1,
                       log_append_time: int | None = None) -> int:
        """Write offsets (and the leader epoch) into a writable records field; return the last offset."""
        ...

    # Reads, index lookups and recovery.
    def peek_entry(self, buf: Buffer, pos: int = 0) -> EntryBounds | None:
        """Framing of the entry at `pos` from its first bytes only, or None if its header is not all in `buf`."""
        ...

    def iter_entries(self, buf: Buffer, start: int = 0, *, verify_crc: bool = True,
                     max_decompressed: int = ...) -> Iterator[Entry]:
        """Walk the whole, checked entries of a log buffer from `start`; stop quietly at a partial tail."""
        ...

    def scan_entries(self, buf: Buffer) -> list[BatchHeader] | None:
        """Every entry at once when all are whole and valid; None sends the caller to `iter_entries`."""
        ...

    def entry_bounds(self, buf: Buffer, entry: Entry) -> EntryBounds:
        """The framing of an entry `iter_entries` or `scan_entries` gave."""
        ...

    def entry_end(self, entry: Entry) -> int:
        """The byte position just after an entry."""
        ...

    # Producer state and transactions.
    def peek_producer_batch(self, buf: Buffer, pos: int = 0) -> ProducerBatch | None:
        """The producer fields of the entry at `pos` from its first bytes only, or None if not all in `buf`."""
        ...

    def read_marker(self, buf: Buffer, pos: int = 0) -> ControlRecord:
        """The control record of the whole control batch at `pos` (a marker's type and coordinator epoch)."""
        ...

    def read_control_record(self, record: Record) -> ControlRecord:
        """Decode a control batch's record."""
        ...

    def peek_produced_batch(self, records: Buffer) -> ProducedBatch | None:
        """The first entry of a Produce request's records field, as the handler checks it before appending."""
        ...

    # Records.
    def decode_entry(self, buf: Buffer, entry: Entry, *, verify_crc: bool = True,
                     max_decompressed: int = ...) -> list[Record]:
        """The records of an entry (control records included)."""
        ...

    def column_builder(self, *, headers: bool = False, timestamp_types: bool = False,
                       timestamp_micros: bool = False) -> ColumnarBuilder:
        """A builder that gathers the records of many entries into Arrow-ready columns."""
        ...

    def add_columns(self, builder: ColumnarBuilder, buf: Buffer, entry: Entry, start_offset: int,
                    end_offset: int) -> bool:
        """Add an entry's records in [start_offset, end_offset) to `builder`; False if the caller must decode."""
        ...

    def add_entries(self, builder: ColumnarBuilder, buf: Buffer, pos: int, start_offset: int, end_offset: int,
                    max_rows: int) -> tuple[int, int]:
        """Add the records in [start_offset, end_offset) of the entries from `pos` on, CRCs checked, control
        batches left out, until one of ENTRIES_*: (the position reached, which one)."""
        ...

    # Batches logstore writes.
    def encode_batch(self, keys: Sequence[bytes | None], values: Sequence[bytes | None],
                     headers: Sequence[Sequence[tuple[str | bytes, bytes | None]]] | None = None,
                     timestamps: int | Sequence[int] | None = None, *, base_offset: int = 0, compression: int = 0,
                     compression_level: int | None = None,
                     producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                     transactional: bool = False, control: bool = False, partition_leader_epoch: int = -1,
                     log_append_time: int | None = None) -> bytes:
        """One batch of records, as a producer would send it."""
        ...

    def build_control_batch(self, commit: bool, coordinator_epoch: int, producer_id: int, producer_epoch: int,
                            timestamp: int, *, base_offset: int = 0, partition_leader_epoch: int = -1) -> bytes:
        """A COMMIT or ABORT transaction marker batch."""
        ...

    BatchBuilder: type[_BatchBuilder]
    """Builds one batch a record at a time (`append(...)`, then `build()`), for in-process producers."""

    def increment_sequence(self, sequence: int, increment: int) -> int:
        """The format's sequence arithmetic (Kafka's wraps at 2^31 - 1)."""
        ...
