"""The column buffers a finished batch gives back are reused by the next batch and the next builder, and never
leak one batch's bytes into another's rows."""
from __future__ import annotations

import logstore.formats.kafka as K
from logstore.native import record_batch as R


def test_finished_buffers_are_reused_without_mixing_batches():
    first = K.encode_batch([b"a" * 8] * 2000, [b"x" * 100] * 2000, None, 5)
    second = K.encode_batch([None] * 1000, [b"y" * 150] * 1000, None, 5, base_offset=2000)
    builder = K.column_builder(timestamp_micros=True)
    builder.add_batch(first)
    batch = builder.finish().to_arrow()
    del batch  # Arrow lets go: its value buffer goes back to the pool
    blocks, pooled = R.pooled_buffers()
    assert blocks >= 1 and pooled >= 200_000
    builder.add_batch(second)
    columns = builder.finish().to_arrow()
    assert columns.column("key").null_count == 1000
    assert columns.column("value").to_pylist() == [b"y" * 150] * 1000
    assert columns.column("offset").to_pylist() == list(range(2000, 3000))
