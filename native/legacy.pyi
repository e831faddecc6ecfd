"""Type stubs for logstore.native.legacy (magic 0/1 message sets, read only)."""
from typing import final

from typing_extensions import Buffer

from logstore.native.record_batch import Record

CRC_OFFSET: int
DEFAULT_MAX_DECOMPRESSED: int

@final
class LegacyEntry:
    position: int
    offset: int
    size_in_bytes: int
    magic: int
    crc: int
    attributes: int
    timestamp: int
    records: list[Record]
    @property
    def compression(self) -> int: ...
    @property
    def timestamp_type(self) -> int | None: ...
    @property
    def base_offset(self) -> int: ...
    @property
    def last_offset(self) -> int: ...
    @property
    def next_offset(self) -> int: ...

def decode_legacy(buf: Buffer, pos: int = 0, *, verify_crc: bool = True,
                  max_decompressed: int = ...) -> LegacyEntry: ...
def peek_timestamp(buf: Buffer, pos: int = 0) -> int | None: ...
