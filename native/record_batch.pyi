"""Type stubs for logstore.native.record_batch (Kafka v2 RecordBatch codec)."""
from collections.abc import Iterable, Sequence
from typing import Any, final

import pyarrow
from typing_extensions import Buffer, disjoint_base

_Headers = Sequence[tuple[str | bytes, bytes | None]]

RECORD_BATCH_OVERHEAD: int
ENCODE_NOGIL_MIN_RECORDS: int
ENCODE_NOGIL_MIN_BYTES: int
DEFAULT_MAX_DECOMPRESSED: int
ENTRY_OVERHEAD: int
ENTRY_PREFIX: int
LENGTH_OFFSET: int
MAGIC_OFFSET: int
CRC_OFFSET: int
CODEC_MASK: int
TIMESTAMP_TYPE_MASK: int
TRANSACTIONAL_FLAG: int
CONTROL_FLAG: int
DELETE_HORIZON_FLAG: int
CREATE_TIME: int
LOG_APPEND_TIME: int
NO_TIMESTAMP: int
MAX_SEQUENCE: int
CONTROL_ABORT: int
CONTROL_COMMIT: int
RECORD_WITHOUT_KEY: int
TIMESTAMP_OUT_OF_RANGE: int
MAX_RECORD_FAULTS: int

def increment_sequence(sequence: int, increment: int) -> int: ...
def decrement_sequence(sequence: int, decrement: int) -> int: ...

@final
class BatchHeader:
    position: int
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    @property
    def size_in_bytes(self) -> int: ...
    @property
    def last_offset(self) -> int: ...
    @property
    def next_offset(self) -> int: ...
    @property
    def compression(self) -> int: ...
    @property
    def timestamp_type(self) -> int: ...
    @property
    def is_transactional(self) -> bool: ...
    @property
    def is_control(self) -> bool: ...
    @property
    def has_delete_horizon(self) -> bool: ...
    @property
    def has_producer_id(self) -> bool: ...
    @property
    def last_sequence(self) -> int: ...

@final
class RecordsCheck:
    header: BatchHeader
    cost: int
    broken_at: int
    broken: str | None
    fault_count: int
    faults: tuple[tuple[int, int, int], ...]
    @property
    def ok(self) -> bool: ...

@final
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    def __init__(self, offset: int, timestamp: int, key: bytes | None, value: bytes | None,
                 headers: Iterable[tuple[str, bytes | None]] = ...) -> None: ...

@final
class NativeBuffer:
    def __len__(self) -> int: ...
    def tobytes(self) -> bytes: ...

ENTRIES_NEED_BYTES: int
ENTRIES_END: int
ENTRIES_FULL: int
ENTRIES_LEGACY: int

@final
class Columns:
    count: int
    offsets: NativeBuffer
    timestamps: NativeBuffer
    timestamp_micros: bool
    key_offsets: NativeBuffer
    key_data: NativeBuffer
    key_validity: NativeBuffer
    key_null_count: int
    value_offsets: NativeBuffer
    value_data: NativeBuffer
    value_validity: NativeBuffer
    value_null_count: int
    # None unless the builder was asked for timestamp_types / headers.
    timestamp_types: NativeBuffer | None
    header_count: int | None
    header_offsets: NativeBuffer | None
    header_key_offsets: NativeBuffer | None
    header_key_data: NativeBuffer | None
    header_value_offsets: NativeBuffer | None
    header_value_data: NativeBuffer | None
    header_value_validity: NativeBuffer | None
    header_value_null_count: int | None
    def to_arrow(self) -> pyarrow.RecordBatch: ...

@final
class ColumnarBuilder:
    count: int
    headers: bool
    timestamp_types: bool
    timestamp_micros: bool
    def __init__(self, *, headers: bool = False, timestamp_types: bool = False,
                 timestamp_micros: bool = False) -> None: ...
    def add_batch(self, buf: Buffer, pos: int = 0, *, start_offset: int = ..., end_offset: int | None = None,
                  skip_control: bool = True, verify_crc: bool = True,
                  max_decompressed: int = ...) -> BatchHeader: ...
    def add_entries(self, buf: Buffer, pos: int, start_offset: int, end_offset: int, max_rows: int, *,
                    verify_crc: bool = True, max_decompressed: int = ...) -> tuple[int, int]: ...
    def finish(self) -> Columns: ...

@final
class BatchBuilder:
    base_offset: int
    def __init__(self, *, base_offset: int = 0, compression: int = 0, compression_level: int | None = None,
                 producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                 transactional: bool = False, partition_leader_epoch: int = -1,
                 log_append_time: int | None = None, initial_capacity: int = 16384) -> None: ...
    def __len__(self) -> int: ...
    @property
    def size_in_bytes(self) -> int: ...
    def append(self, timestamp: int | None, key: bytes | None, value: bytes | None,
               headers: _Headers | None = None) -> None: ...
    def try_append(self, timestamp: int | None, key: bytes | None, value: bytes | None,
                   headers: _Headers | None = None, limit: int = -1) -> bool: ...
    def build(self) -> bytes: ...

@disjoint_base
class PendingRecord:
    @property
    def _batch(self) -> Any: ...
    @property
    def _index(self) -> int: ...
    @property
    def _timestamp(self) -> int: ...
    def __init__(self, batch: Any, index: int, timestamp: int) -> None: ...

@disjoint_base
class SendPath:
    _lock: Any
    _open: dict[Any, Any]
    _partitioner: Any
    _store: Any
    _fast: bool
    _batch_bytes: int
    _linger_zero: bool
    _future_type: type[PendingRecord]
    def send(self, topic: str, value: bytes | None = None, key: bytes | None = None, *,
             partition: int | None = None, timestamp: int | None = None,
             headers: _Headers | None = None) -> Any: ...

def read_header(buf: Buffer, pos: int = 0) -> BatchHeader: ...
def read_entry_prefix(buf: Buffer, pos: int = 0) -> tuple[int, int, int] | None: ...
def peek_header(buf: Buffer, pos: int = 0) -> BatchHeader | None: ...
def assign_batch_offsets(buf: Buffer, pos: int, base_offset: int, leader_epoch: int,
                         log_append_time: int = -1) -> None: ...
def validate_batch(buf: Buffer, pos: int = 0, *, client: bool = False, max_batch_size: int = -1,
                   verify_crc: bool = True, deep: bool = False) -> BatchHeader: ...
def validate_records(buf: Buffer, *, client: bool = False, max_batch_size: int = -1,
                     verify_crc: bool = True) -> list[BatchHeader]: ...
def validate_produced(buf: Buffer, pos: int = 0, *, max_batch_size: int = -1, now: int = 0,
                      timestamp_before_max_ms: int = ..., timestamp_after_max_ms: int = ...,
                      create_time: bool = True, keys_required: bool = False, max_decompressed: int = ...,
                      work_limit: int = -1) -> RecordsCheck | None: ...
def decode_records(buf: Buffer, pos: int = 0, *, verify_crc: bool = True,
                   max_decompressed: int = ...) -> list[Record]: ...
def decode_columnar(buf: Buffer, pos: int = 0, *, verify_crc: bool = True,
                    max_decompressed: int = ...) -> Columns: ...
def pooled_buffers() -> tuple[int, int]: ...
def encode_batch(keys: Sequence[bytes | None], values: Sequence[bytes | None],
                 headers: Sequence[_Headers] | None = None,
                 timestamps: int | Sequence[int] | None = None, *, base_offset: int = 0,
                 compression: int = 0, compression_level: int | None = None, producer_id: int = -1,
                 producer_epoch: int = -1, base_sequence: int = -1, transactional: bool = False,
                 control: bool = False, partition_leader_epoch: int = -1,
                 log_append_time: int | None = None) -> bytes: ...
def recompress_batch(buf: Buffer, pos: int = 0, codec: int = 0, level: int | None = None, *,
                     max_decompressed: int = ...) -> bytearray: ...
def encode_control_batch(commit: bool, coordinator_epoch: int, producer_id: int, producer_epoch: int,
                         timestamp: int, *, base_offset: int = 0,
                         partition_leader_epoch: int = -1) -> bytes: ...
def encode_varint(value: int) -> bytes: ...
def encode_varlong(value: int) -> bytes: ...
def encode_unsigned_varint(value: int) -> bytes: ...
def decode_varint(buf: Buffer, pos: int = 0) -> tuple[int, int]: ...
def decode_varlong(buf: Buffer, pos: int = 0) -> tuple[int, int]: ...
def decode_unsigned_varint(buf: Buffer, pos: int = 0) -> tuple[int, int]: ...
def encode_arrow_batch(keys: pyarrow.Array | None, values: pyarrow.Array | None, headers: pyarrow.Array | None,
                       start: int, stop: int, timestamp: int, *, compression: int = 0,
                       compression_level: int | None = None, producer_id: int = -1, producer_epoch: int = -1,
                       base_sequence: int = -1, transactional: bool = False) -> bytes: ...
def murmur2(data: Buffer) -> int: ...
def murmur2_partitions(keys: pyarrow.Array | None, partitions: int) -> bytes: ...
