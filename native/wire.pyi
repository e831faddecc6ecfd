"""Type stubs for logstore.native.wire (the broker's hot codecs)."""
from typing import Any, Protocol

from typing_extensions import disjoint_base

class WireError(ValueError): ...

@disjoint_base
class ProducePartition:
    index: int
    records: memoryview | None

@disjoint_base
class ProduceTopic:
    name: str
    partition_data: list[ProducePartition]

@disjoint_base
class ProduceRequest:
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: list[ProduceTopic]

class _Sized(Protocol):
    size: int

def decode_produce(frame: bytes | bytearray | memoryview) -> tuple[str | None, ProduceRequest]: ...
def encode_fetch(correlation_id: int, version: int, error_code: int, session_id: int,
                 topics: list[tuple[str, list[tuple[Any, ...]]]]) -> list[bytes | _Sized]: ...

@disjoint_base
class OffsetCommitPartition:
    partition_index: int
    committed_offset: int
    committed_leader_epoch: int
    committed_metadata: str | None

@disjoint_base
class OffsetCommitTopic:
    name: str
    partitions: list[OffsetCommitPartition]

@disjoint_base
class OffsetCommitRequest:
    group_id: str
    generation_id_or_member_epoch: int
    member_id: str
    group_instance_id: str | None
    retention_time: int
    topics: list[OffsetCommitTopic]

def decode_offset_commit(frame: bytes | bytearray | memoryview) -> tuple[str | None, OffsetCommitRequest]: ...
def encode_offset_commit(correlation_id: int, version: int, throttle_ms: int,
                         topics: list[tuple[str, list[tuple[int, int]]]]) -> list[bytes]: ...
def encode_produce(correlation_id: int, version: int, throttle_ms: int,
                   topics: list[tuple[str, list[tuple[Any, ...]]]]) -> list[bytes]: ...

@disjoint_base
class AddPartitionsToTxnTopic:
    name: str
    partitions: list[int]

@disjoint_base
class AddPartitionsToTxnRequest:
    v3_and_below_transactional_id: str
    v3_and_below_producer_id: int
    v3_and_below_producer_epoch: int
    v3_and_below_topics: list[AddPartitionsToTxnTopic]

@disjoint_base
class EndTxnRequest:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool

def decode_add_partitions_to_txn(frame: bytes | bytearray | memoryview
                                 ) -> tuple[str | None, AddPartitionsToTxnRequest]: ...
def decode_end_txn(frame: bytes | bytearray | memoryview) -> tuple[str | None, EndTxnRequest]: ...
def encode_add_partitions_to_txn(correlation_id: int, version: int, throttle_ms: int,
                                 topics: list[tuple[str, list[tuple[int, int]]]]) -> list[bytes]: ...
def encode_end_txn(correlation_id: int, version: int, throttle_ms: int, error_code: int, producer_id: int,
                   producer_epoch: int) -> list[bytes]: ...
