"""Which internal partition owns a group id or transactional id: Kafka's rule, bit for bit.

Kafka hashes the id with Java's `String.hashCode`, which runs over UTF-16 code
units, so a character outside the BMP counts as its surrogate pair. A hash of
Integer.MIN_VALUE maps to partition 0 (Kafka's `Utils.abs` would otherwise
leave it negative).
"""
from __future__ import annotations

_INT32_MIN = -(1 << 31)


def java_string_hash(text: str) -> int:
    """Java's `String.hashCode` of `text`, as a signed 32-bit int."""
    units = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: str, partitions: int) -> int:
    """The partition of `__consumer_offsets` or `__transaction_state` that owns `key`."""
    h = java_string_hash(key)
    return (0 if h == _INT32_MIN else abs(h)) % partitions
