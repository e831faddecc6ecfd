"""Arrow columns to Kafka v2 batches, and Kafka's default partitioner over an Arrow key column.

What a writer that already holds its rows as Arrow (Spark's sink) needs: the
native encoder reads the columns' buffers in place, so no row becomes a Python
object, and `partitions_for_keys` runs Kafka's `Utils.murmur2` natively over
the whole column. Binary and string columns are taken as they are; large
ones (64-bit offsets) are cast to their 32-bit form first, as no Kafka record
can be longer than 2 GiB anyway.
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from logstore.native.record_batch import encode_arrow_batch, murmur2, murmur2_partitions

__all__ = ["encode_arrow", "murmur2", "partitions_for_keys", "binary_column", "HEADERS_TYPE"]

HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
"""Spark's Kafka `headers` column: array<struct<key: string, value: binary>>."""


def binary_column(column: pa.Array | pa.ChunkedArray | None) -> pa.Array | None:
    """A key or value column in the form the encoder reads: one chunk, binary or string, 32-bit offsets."""
    if column is None:
        return None
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    kind = column.type
    if pa.types.is_null(kind) or pa.types.is_binary(kind) or pa.types.is_string(kind):
        return column
    if pa.types.is_large_binary(kind) or pa.types.is_binary_view(kind):
        return column.cast(pa.binary())
    if pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
        return column.cast(pa.string())
    raise TypeError(f"a key or value column must be binary or string, not {kind}")


def headers_column(column: pa.Array | pa.ChunkedArray | None) -> pa.Array | None:
    """A headers column in the form the encoder reads (None: no headers)."""
    if column is None:
        return None
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if column.type != HEADERS_TYPE:
        column = column.cast(HEADERS_TYPE)
    return column


def encode_arrow(keys: pa.Array | None, values: pa.Array, headers: pa.Array | None, start: int, stop: int,
                 timestamp_ms: int, *, producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                 transactional: bool = False, compression: int = 0) -> bytes:
    """One v2 batch of rows [start, stop): keys and values from `binary_column`, headers from `headers_column`."""
    return encode_arrow_batch(keys, values, headers, start, stop, timestamp_ms, compression=compression,
                              producer_id=producer_id, producer_epoch=producer_epoch,
                              base_sequence=base_sequence, transactional=transactional)


def partitions_for_keys(keys: pa.Array | None, partitions: int, length: int) -> pa.Int32Array:
    """Each row's partition by Kafka's default partitioner; null where the key is null."""
    if keys is None:
        return pa.nulls(length, pa.int32())
    raw = pa.py_buffer(murmur2_partitions(keys, partitions))
    found = pa.Array.from_buffers(pa.int32(), length, [None, raw])
    # -1 stands for a null key: Arrow's nulls from it, so callers fill them with their sticky choice.
    return found if keys.null_count == 0 else pc.if_else(pc.equal(found, pa.scalar(-1, pa.int32())),
                                                         pa.scalar(None, pa.int32()), found)
