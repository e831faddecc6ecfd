"""Type stubs for logstore.native.wire (the broker's Produce decoder and Fetch encoder)."""
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
