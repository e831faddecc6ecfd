"""Type stubs for logstore.native.compression (Kafka codec dispatch)."""
from typing_extensions import Buffer

NONE: int
GZIP: int
SNAPPY: int
LZ4: int
ZSTD: int
CODEC_NAMES: tuple[str, ...]
CODEC_IDS: dict[str, int]
DEFAULT_MAX_DECOMPRESSED: int
GZIP_DEFAULT_LEVEL: int
ZSTD_DEFAULT_LEVEL: int
KAFKA_LZ4_DEFAULT_LEVEL: int

def compress(codec: int, data: Buffer, level: int | None = None) -> bytes: ...
def compress_at_kafka_level(codec: int, data: Buffer, level: int | None) -> bytes: ...
def decompress(codec: int, data: Buffer, limit: int = ..., position: int = -1,
               legacy_lz4_header: bool = False) -> bytes: ...
def decompress_within(codec: int, data: Buffer, limit: int, position: int = -1,
                      legacy_lz4_header: bool = False) -> bytes | bytearray | None: ...
