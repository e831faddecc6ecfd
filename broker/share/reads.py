"""What a share fetch reads of a partition: the log's batches from an offset, each marked deliverable or not.

A share-partition hands out offsets, not batches: the records go to the
client whole, as Kafka's ShareFetch sends them, and the acquired ranges tell
it which offsets are its own. Control batches and, for read_committed
groups, batches of aborted transactions are never deliverable: the
share-partition archives their offsets as it meets them.

Only the batches' headers are read to decide: a fetch's byte budget is the
client's (tens of MiB) while its record budget is a few hundred, so the walk
stops once the batches cover the records wanted, and only the bytes handed
out are read in the end.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from logstore.formats.kafka import (
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    entry_prefix,
    iter_entries,
    peek_header,
    read_marker,
)
from logstore.log import Log
from logstore.read_committed import READ_COMMITTED, READ_UNCOMMITTED, CommittedFilter
from logstore.segment import FileSlice

# (first offset, last offset, deliverable), as SharePartition.acquire takes them.
BatchSpan = tuple[int, int, bool]
# What one pread takes in while walking headers: several small batches' headers at once.
_HEADER_READ = 4096


@dataclass(slots=True)
class ShareRead:
    """The batches of one read, in log order, and where to get their bytes."""

    spans: list[BatchSpan]
    # Where each span's batch ends in the read, so the answer can stop after the last batch handed out.
    ends: list[int]
    source: FileSlice | None = None
    data: bytes = b""

    def through(self, last_offset: int) -> bytes:
        """The bytes of every batch up to the one holding `last_offset`."""
        end = 0
        for (first, _, _), batch_end in zip(self.spans, self.ends, strict=True):
            if first > last_offset:
                break
            end = batch_end
        if self.source is None:
            return self.data[:end]
        return _pread(self.source, 0, end)

    def close(self) -> None:
        """Release the read's descriptor (idempotent)."""
        if self.source is not None:
            self.source.close()


EMPTY = ShareRead([], [])


def read_batches(log: Log, offset: int, max_bytes: int, max_records: int, committed: bool) -> ShareRead:
    """The whole batches from the one holding `offset` until they cover `max_records` offsets, at most
    `max_bytes` but at least one; below the last stable offset for a read_committed group, else the high
    watermark. The caller closes the result."""
    if offset >= (log.last_stable_offset if committed else log.high_watermark):
        return EMPTY
    fetched = log.read(offset, max_bytes, isolation=READ_COMMITTED if committed else READ_UNCOMMITTED,
                       min_one_message=True)
    source = fetched.records
    if source is None or not fetched.size:
        return EMPTY
    keep = CommittedFilter(fetched.aborted_transactions or []) if committed else None
    read = ShareRead([], [], source)
    covered = 0
    chunk, chunk_at = b"", 0
    pos = 0
    while pos < source.size and covered < max_records:
        if pos + RECORD_BATCH_OVERHEAD > chunk_at + len(chunk):
            chunk, chunk_at = _pread(source, pos, _HEADER_READ), pos
        prefix = entry_prefix(chunk, pos - chunk_at)
        if prefix is None or pos + prefix.size > source.size:
            break   # a partial batch at the end of the slice
        if prefix.magic < 2:
            # Legacy entries (a converted old Kafka dir) have no v2 header: read the range whole.
            read.close()
            return _read_whole(log, offset, max_bytes, committed)
        header = peek_header(chunk, pos - chunk_at)
        if header is None:
            break
        read.spans.append((header.base_offset, header.last_offset, _deliverable(header, keep, source, pos)))
        pos += prefix.size
        read.ends.append(pos)
        covered += header.last_offset - max(header.base_offset, offset) + 1
    if not read.spans:
        read.close()
        return EMPTY
    return read


def _deliverable(header: BatchHeader, keep: CommittedFilter | None, source: FileSlice, pos: int) -> bool:
    if keep is None:
        return not header.is_control
    return keep.keep(header, lambda: read_marker(_pread(source, pos, header.size_in_bytes)).type_name == "ABORT")


def _read_whole(log: Log, offset: int, max_bytes: int, committed: bool) -> ShareRead:
    """A read of a range holding magic 0/1 entries: all its bytes at once, walked as iter_entries walks."""
    fetched = log.read(offset, max_bytes, isolation=READ_COMMITTED if committed else READ_UNCOMMITTED,
                       min_one_message=True)
    data = fetched.records.read() if fetched.records is not None and fetched.size else b""
    if fetched.records is not None:
        fetched.records.close()
    keep = CommittedFilter(fetched.aborted_transactions or []) if committed else None
    read = ShareRead([], [], None, data)
    # The bytes came from this log's own segments, checked when appended: no CRC pass here.
    for entry in iter_entries(data, verify_crc=False):
        if keep is not None:
            at = entry.position
            deliverable = keep.keep(entry, lambda: read_marker(data, at).type_name == "ABORT")
        else:
            deliverable = not getattr(entry, "is_control", False)
        read.spans.append((entry.base_offset, entry.last_offset, deliverable))
        read.ends.append(entry.position + entry.size_in_bytes)
    return read


def _pread(source: FileSlice, at: int, size: int) -> bytes:
    """Up to `size` bytes of the slice from `at` (fewer at its end)."""
    size = min(size, source.size - at)
    return os.pread(source.fd, size, source.position + at) if size > 0 else b""
