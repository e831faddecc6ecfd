"""What a share fetch reads of a partition: the log's batches from an offset, each marked deliverable or not.

A share-partition hands out offsets, not batches: the records go to the
client whole, as Kafka's ShareFetch sends them, and the acquired ranges tell
it which offsets are its own. Control batches and, for read_committed
groups, batches of aborted transactions are never deliverable: the
share-partition archives their offsets as it meets them.
"""
from __future__ import annotations

from dataclasses import dataclass

from logstore.formats.kafka import entry_end, iter_entries, read_marker
from logstore.log import Log
from logstore.read_committed import READ_COMMITTED, READ_UNCOMMITTED, CommittedFilter

# (first offset, last offset, deliverable), as SharePartition.acquire takes them.
BatchSpan = tuple[int, int, bool]


@dataclass(frozen=True, slots=True)
class ShareRead:
    """A partition's bytes from one read and the batches they hold, in log order."""

    data: bytes
    spans: list[BatchSpan]
    # Where each span's batch ends in `data`, so the answer can stop after the last batch handed out.
    ends: list[int]

    def through(self, last_offset: int) -> bytes:
        """The bytes of every batch up to the one holding `last_offset`."""
        end = 0
        for (first, _, _), batch_end in zip(self.spans, self.ends, strict=True):
            if first > last_offset:
                break
            end = batch_end
        return self.data[:end]


EMPTY = ShareRead(b"", [], [])


def read_batches(log: Log, offset: int, max_bytes: int, committed: bool) -> ShareRead:
    """The whole batches from the one holding `offset`, at most `max_bytes` but at least one; below the
    last stable offset for a read_committed group, else the high watermark."""
    if offset >= (log.last_stable_offset if committed else log.high_watermark):
        return EMPTY
    fetched = log.read(offset, max_bytes, isolation=READ_COMMITTED if committed else READ_UNCOMMITTED,
                       min_one_message=True)
    data = fetched.records.read() if fetched.records is not None and fetched.size else b""
    if not data:
        return EMPTY
    keep = CommittedFilter(fetched.aborted_transactions or []) if committed else None
    spans: list[BatchSpan] = []
    ends: list[int] = []
    # The bytes came from this log's own segments, checked when appended: no CRC pass here.
    for entry in iter_entries(data, verify_crc=False):
        if keep is not None:
            at = entry.position
            deliverable = keep.keep(entry, lambda: read_marker(data, at).type_name == "ABORT")
        else:
            # Legacy (magic 0/1) entries have no control batches.
            deliverable = not getattr(entry, "is_control", False)
        spans.append((entry.base_offset, entry.last_offset, deliverable))
        ends.append(entry_end(entry))
    return ShareRead(data, spans, ends)
