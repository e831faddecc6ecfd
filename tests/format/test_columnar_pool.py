"""The column buffers a finished batch gives back are reused by the next batch and the next builder, and never
leak one batch's bytes into another's rows."""
from __future__ import annotations

import subprocess
import sys

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


# In a fresh interpreter: the pool is the process's, and what earlier tests left in it (up to its bound)
# decides whether this test's blocks are pooled at all.
_NEXT_BUILDER = """
import logstore.formats.kafka as K
from logstore.native import record_batch as R
buf = K.encode_batch([b"k" * 8] * 3000, [b"v" * 120] * 3000, None, 5)
first = K.column_builder(timestamp_types=True, timestamp_micros=True)
assert K.add_entries(first, buf, 0, 0, 1 << 40, 1000) == (len(buf), 2)  # ENTRIES_FULL: the batch filled
batch = first.finish().to_arrow()
del first, batch
blocks, pooled = R.pooled_buffers()
assert pooled >= 3000 * 120, pooled
second = K.column_builder(timestamp_types=True, timestamp_micros=True)
assert K.add_entries(second, buf, 0, 0, 1 << 40, 5000) == (len(buf), 0)  # ENTRIES_NEED_BYTES: all read
assert R.pooled_buffers()[0] < blocks, (R.pooled_buffers(), blocks)  # the large columns came from the pool
columns = second.finish().to_arrow()
assert columns.column("value").to_pylist() == [b"v" * 120] * 3000
assert columns.column("key").to_pylist() == [b"k" * 8] * 3000
assert columns.column("offset").to_pylist() == list(range(3000))
"""


def test_a_scans_next_builder_starts_from_the_pooled_buffers_of_the_last_filled_batch():
    # A Spark worker runs one task after another, each with a builder of its own: the first batch of the
    # next task takes the blocks the last one gave back instead of growing from nothing.
    done = subprocess.run([sys.executable, "-c", _NEXT_BUILDER], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
