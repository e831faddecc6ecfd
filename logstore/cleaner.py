"""Log compaction: Kafka's log cleaner for logs with `cleanup.policy` containing `compact`.

One round over a log (Kafka's Cleaner.doClean):

1. The dirty section runs from the cleaner checkpoint (`cleaner-offset-checkpoint`)
   to the first uncleanable offset: the lowest of the active segment's base,
   the first unstable offset (an open transaction), and the first segment
   younger than `min.compaction.lag.ms`.
2. An offset map (native, fixed memory: `log.cleaner.dedupe.buffer.size`)
   takes key -> latest offset over the dirty section, keyed by the key's
   xxh3_128 digest; records of aborted transactions and control batches are
   not mapped. If it fills, the round stops where it filled.
3. Every segment below the mapped end is rewritten, in groups whose sizes fit
   `segment.bytes` and the index limit, into one `.cleaned` segment per group,
   keeping each retained record's offset. A record stays if no later record
   has its key, and a tombstone only until its batch's delete horizon
   (`delete.retention.ms` after the round that first saw it) has passed.
   Records of aborted transactions go; a transaction marker goes once its
   transaction's data is gone and its horizon has passed; the last batch of
   every live producer stays (emptied if need be), so producer state survives
   and idempotent retries are still recognised.
4. Each group is swapped in by Kafka's renames (Log.replace_segments), and
   the checkpoint moves to the mapped end.

Groups go by the segments' sizes before cleaning, so full segments are
cleaned one per group and often leave small or empty ones. Kafka merges
those at its next round; ours rewrites the groups they now form at once,
with the same map and clock (which keep what the first pass kept).

One deliberate difference from Kafka: when a group of several segments keeps
nothing at or past its last segment's base, its output ends with an empty
batch (no records, no producer) at that base. A `.swap` file's offset range
then always reaches the base of every segment it replaces, so the loader,
which deletes the segments inside that range, can never leave old and new
segments side by side after a crash mid-swap. Legacy (magic 0/1) entries are copied
unchanged: their records are not compacted.
"""
from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar, cast

from logstore.cleaner_txns import TransactionTracker
from logstore.errors import StorageError, StorageIOError
from logstore.filenames import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    offset_path,
)
from logstore.filesystem import OS, FileSystem
from logstore.formats.kafka import LOG_OVERHEAD, entry_prefix, peek_header
from logstore.log import Log
from logstore.native.cleaner import OffsetMap, empty_batch, filter_batch
from logstore.read_committed import collect_aborted
from logstore.segment import HasBaseOffset, LogSegment, segments_between

if TYPE_CHECKING:
    from logstore.formats.kafka import BatchHeader

log = logging.getLogger(__name__)

DEFAULT_DEDUPE_BUFFER_BYTES = 128 * 1024 * 1024   # log.cleaner.dedupe.buffer.size
DEFAULT_IO_BUFFER_BYTES = 512 * 1024   # log.cleaner.io.buffer.size: what one read takes (a larger batch: whole)

_Segment = TypeVar("_Segment", bound=HasBaseOffset)


class CleaningAborted(StorageError):
    """The log closed, or its segments changed under the cleaner: the round's output is dropped."""


@dataclass(frozen=True)
class LogToClean:
    """A compacted log's clean and dirty sections at one moment (Kafka's LogToClean)."""

    log: Log
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    needs_compaction_now: bool = False

    @property
    def cleanable_ratio(self) -> float:
        """The dirty share of the bytes below the first uncleanable offset."""
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0

    @property
    def ready(self) -> bool:
        """Whether the log is due: dirtier than min.cleanable.dirty.ratio, or past max.compaction.lag.ms."""
        if self.cleanable_bytes <= 0:
            return False
        return self.needs_compaction_now or self.cleanable_ratio > self.log.config.min_cleanable_dirty_ratio


@dataclass
class CleanerStats:
    """What one round read, kept and reclaimed."""

    started: float = field(default_factory=time.time)
    finished: float = 0.0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    keys_mapped: int = 0
    end_offset: int = -1

    @property
    def bytes_reclaimed(self) -> int:
        """Bytes the rewrite removed."""
        return self.bytes_read - self.bytes_written


def covering(segments: Sequence[_Segment], start: int, end: int) -> list[_Segment]:
    """The segments that may hold offsets in [start, end), by base offsets alone."""
    if start >= end:
        return []
    return [segment for segment, _ in segments_between(segments, start, end)]


def first_batch_timestamp(segment: LogSegment) -> int:
    """The max timestamp of the segment's first batch (-1 if none): how old its oldest dirt is."""
    for bounds in segment.iter_bounds():
        return bounds.max_timestamp
    return -1


def log_to_clean(log: Log, checkpoint: int | None, now_ms: int) -> LogToClean:
    """The clean and dirty sections of `log` given its checkpoint (Kafka's cleanableOffsets)."""
    config = log.config
    segments = log.segments
    start = log.log_start_offset
    first_dirty = start if checkpoint is None or checkpoint < start or checkpoint > log.log_end_offset else checkpoint
    uncleanable = min(segments[-1].base_offset, log.last_stable_offset)
    dirty = covering(segments[:-1], first_dirty, uncleanable)
    if config.min_compaction_lag_ms > 0:
        for segment in dirty:
            # Kafka's rule: a segment holding anything younger than the lag is not cleaned yet.
            if segment.largest_timestamp > now_ms - config.min_compaction_lag_ms:
                uncleanable = min(uncleanable, max(segment.base_offset, first_dirty))
                break
    needs_now = False
    if config.max_compaction_lag_ms < (1 << 63) - 1:
        stamps = [t for t in (first_batch_timestamp(s) for s in dirty) if t > 0]
        needs_now = bool(stamps) and min(stamps) < now_ms - config.max_compaction_lag_ms
    clean_bytes = sum(s.size for s in covering(segments, start, first_dirty))
    cleanable = covering(segments[:-1], first_dirty, uncleanable)
    return LogToClean(log, first_dirty, max(uncleanable, first_dirty), clean_bytes,
                      sum(s.size for s in cleanable), needs_now)


def _whole_entries(buf: memoryview) -> int:
    """How many leading bytes of `buf` are whole entries (Kafka framing: offset, then size)."""
    pos, end = 0, len(buf)
    while (prefix := entry_prefix(buf, pos)) is not None:
        if prefix.size <= LOG_OVERHEAD or prefix.size > end - pos:
            break
        pos += prefix.size
    return pos


def _read_spans(segment: LogSegment, position: int, chunk: int) -> Iterator[tuple[int, memoryview]]:
    """(file position, bytes) of whole entries from `position` on, about `chunk` bytes at a time.

    One read per chunk, as Kafka's cleaner reads into its I/O buffer; an entry
    larger than the chunk is read whole on its own.
    """
    end = segment.size
    while position < end:
        buf = memoryview(segment.pread(min(chunk, end - position), position))
        used = _whole_entries(buf)
        if used == 0:
            prefix = entry_prefix(buf)
            if prefix is None:
                return
            buf = memoryview(segment.pread(prefix.size, position))
            used = _whole_entries(buf)
            if used == 0:
                return   # a torn tail: recovery's business, not the cleaner's
        yield position, buf[:used]
        position += used


def _put_off(target: Log, exc: BaseException) -> StorageIOError:
    """What a round that ran out of space raises once its output is gone: an `intact` ENOSPC, the log being
    as before (a full disk costs the round, not the log dir)."""
    return StorageIOError(f"cleaning {target.directory} ran out of space ({exc}); its output was removed and the "
                          "log is as before", OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), target.directory),
                          intact=True)


def _remove_cleaned(directory: str, base_offset: int, fs: FileSystem, exc: BaseException) -> None:
    """Remove what a `.cleaned` segment that failed to open left (by name: there is no segment to ask)."""
    for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
        path = offset_path(directory, base_offset, suffix + CLEANED_SUFFIX)
        try:
            fs.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as failure:
            raise StorageIOError(f"cleaner output {path} could not be removed after {exc}: {failure}",
                                 failure) from exc


def _index_bytes(segment: LogSegment) -> int:
    return segment.offset_index.entries * segment.offset_index.entry_size


def _time_index_bytes(segment: LogSegment) -> int:
    return segment.time_index.entries * segment.time_index.entry_size


def group_by_size(segments: Sequence[LogSegment], max_bytes: int, max_index_bytes: int,
                  end: int) -> list[list[LogSegment]]:
    """Consecutive segments in groups whose log and index sizes fit the limits and whose offsets fit one
    segment's 32-bit deltas (Kafka's groupSegmentsBySize)."""
    groups: list[list[LogSegment]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        size, index, time_index = segments[i].size, _index_bytes(segments[i]), _time_index_bytes(segments[i])
        i += 1
        while i < len(segments):
            nxt = segments[i]
            last = segments[i + 1].base_offset - 1 if i + 1 < len(segments) else end - 1
            if not (size + nxt.size <= max_bytes and index + _index_bytes(nxt) <= max_index_bytes
                    and time_index + _time_index_bytes(nxt) <= max_index_bytes
                    and (nxt.size == 0 or last - group[0].base_offset <= 0x7FFFFFFF)):
                break
            group.append(nxt)
            size += nxt.size
            index += _index_bytes(nxt)
            time_index += _time_index_bytes(nxt)
            i += 1
        groups.append(group)
    return groups


class Cleaner:
    """Cleans one log at a time with one fixed-size offset map (one of Kafka's cleaner threads)."""

    def __init__(self, dedupe_buffer_bytes: int = DEFAULT_DEDUPE_BUFFER_BYTES,
                 load_factor: float = 0.9, *, clock: Callable[[], int] | None = None,
                 should_stop: Callable[[], bool] = lambda: False, io_buffer_bytes: int = DEFAULT_IO_BUFFER_BYTES,
                 fs: FileSystem = OS):
        self._map_size = (dedupe_buffer_bytes, load_factor)
        self._fs = fs
        self._offset_map: OffsetMap | None = None
        self._clock = clock or (lambda: int(time.time() * 1000))
        self._should_stop = should_stop
        self._read_chunk = io_buffer_bytes

    @property
    def offset_map(self) -> OffsetMap:
        """The map, allocated at the first round (most stores never compact anything)."""
        if self._offset_map is None:
            self._offset_map = OffsetMap(*self._map_size)
        return self._offset_map

    def _check(self, target: Log) -> None:
        if self._should_stop() or target.closed:
            raise CleaningAborted(f"cleaning of {target.directory} aborted")

    def clean(self, cleanable: LogToClean) -> CleanerStats:
        """One round over the log; the stats say where it ended (the new checkpoint)."""
        target, now = cleanable.log, self._clock()
        stats = CleanerStats()
        end = self._build_map(cleanable, stats)
        segments = [s for s in target.segments[:-1] if s.base_offset < end]
        segments = covering(segments, target.log_start_offset, end) if segments else []
        tracker = TransactionTracker()
        last_of_producers = {e.producer_id: (e.batches[-1][3] if e.batches else None, e.epoch)
                             for e in target.producer_entries()}
        config = target.config
        for group in group_by_size(segments, config.segment_bytes, config.segment_index_bytes, end):
            self._clean_group(target, group, tracker, last_of_producers, now, stats)
        self._merge_small(target, end, last_of_producers, now)
        stats.end_offset = end
        stats.finished = time.time()
        return stats

    # -- the offset map ----------------------------------------------------------------------

    def _build_map(self, cleanable: LogToClean, stats: CleanerStats) -> int:
        """Map the dirty section's keys; the offset after the last one mapped (the round's end)."""
        try:
            return self._map_dirty(cleanable)
        finally:
            stats.keys_mapped = self.offset_map.size

    def _map_dirty(self, cleanable: LogToClean) -> int:
        target = cleanable.log
        start, upper = cleanable.first_dirty_offset, cleanable.first_uncleanable_offset
        offset_map = self.offset_map
        offset_map.clear(start)
        segments = target.segments
        dirty = covering(segments[:-1], start, upper)
        tracker = TransactionTracker()
        tracker.add_aborted(collect_aborted(segments, [s.base_offset for s in segments], start, upper))
        fmt = target.format
        end = start
        for i, segment in enumerate(dirty):
            following = dirty[i + 1].base_offset if i + 1 < len(dirty) else upper
            position = 0
            found = segment.translate_offset(start) if segment.base_offset < start else None
            if found is not None:
                position = found.position
            for _position, buf in _read_spans(segment, position, self._read_chunk):
                self._check(target)
                for entry in fmt.iter_entries(buf):
                    if entry.base_offset >= upper:
                        return end
                    if entry.magic == 2:
                        # Magic 2: a v2 batch header, which mypy cannot tell from the byte.
                        entry = cast("BatchHeader", entry)
                        if entry.is_control:
                            tracker.on_marker(entry, fmt.read_marker(buf, entry.position).type_name)
                        elif not tracker.on_data(entry) and entry.last_offset >= start:
                            if not offset_map.put_batch(buf, entry.position, start):
                                # Full mid-batch: the round ends after the last key the map took.
                                return max(offset_map.latest_offset + 1, start)
                    if entry.last_offset >= start:
                        offset_map.update_latest(entry.last_offset)
                    end = max(end, entry.last_offset + 1)
            # Offsets past a segment's last batch (removed earlier) belong to it too.
            end = max(end, min(following, upper))
            offset_map.update_latest(end - 1)
        return end

    # -- rewriting ---------------------------------------------------------------------------

    def _merge_small(self, target: Log, end: int, last_of_producers: Mapping[int, tuple[int | None, int]],
                     now: int) -> None:
        """Rewrite again the groups the round's output now forms, so that what it shrank is merged now
        rather than at the next round (groups go by the sizes before cleaning, as in Kafka)."""
        config = target.config
        segments = [s for s in target.segments[:-1] if s.base_offset < end]
        segments = covering(segments, target.log_start_offset, end) if segments else []
        groups = group_by_size(segments, config.segment_bytes, config.segment_index_bytes, end)
        if all(len(group) == 1 for group in groups):
            return
        # The same map and clock: what the round kept, this keeps. The tracker must see every batch in order.
        tracker, scratch = TransactionTracker(), CleanerStats()
        for group in groups:
            if len(group) > 1:
                self._clean_group(target, group, tracker, last_of_producers, now, scratch)
            else:
                self._track_segment(target, group[0], tracker)

    def _track_segment(self, target: Log, segment: LogSegment, tracker: TransactionTracker) -> None:
        """Show the tracker a segment left as it is."""
        segments = target.segments
        fmt = target.format
        tracker.add_aborted(collect_aborted(segments, [s.base_offset for s in segments], segment.base_offset,
                                            segment.read_next_offset()))
        for _, buf in _read_spans(segment, 0, self._read_chunk):
            for entry in fmt.iter_entries(buf):
                if entry.magic == 2:
                    # Magic 2: a v2 batch header, which mypy cannot tell from the byte.
                    entry = cast("BatchHeader", entry)
                    if entry.is_control:
                        tracker.on_marker(entry, fmt.read_marker(buf, entry.position).type_name)
                    else:
                        tracker.on_data(entry)

    def _clean_group(self, target: Log, group: list[LogSegment], tracker: TransactionTracker,
                     last_of_producers: Mapping[int, tuple[int | None, int]], now: int,
                     stats: CleanerStats) -> None:
        """Rewrite one group into a `.cleaned` segment and swap it in.

        Until the swap starts, a failure removes the output, so the log and its directory are as they were;
        an ENOSPC is then raised as an `intact` StorageIOError (a full disk puts the round off, nothing more).
        Once the swap started its files are left as they are: the `.swap` may hold the only copy of what the
        group keeps, and the loader finishes or undoes the swap at the next open.
        """
        config = target.config
        base = group[0].base_offset
        try:
            cleaned = LogSegment(target.directory, base, index_interval_bytes=config.index_interval_bytes,
                                 max_index_size=config.segment_index_bytes, fmt=target.format, suffix=CLEANED_SUFFIX,
                                 fs=self._fs)
        except BaseException as exc:
            _remove_cleaned(target.directory, base, self._fs, exc)
            if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
                raise _put_off(target, exc) from exc
            raise
        swapping = False
        try:
            tracker.kept_aborted = []
            segments = target.segments
            bases = [s.base_offset for s in segments]
            written_end = group[0].base_offset
            for i, segment in enumerate(group):
                upper = group[i + 1].base_offset if i + 1 < len(group) else segment.read_next_offset()
                tracker.add_aborted(collect_aborted(segments, bases, segment.base_offset, upper))
                written_end = max(written_end, self._clean_segment(target, segment, cleaned, tracker,
                                                                   last_of_producers, now, stats))
            if len(group) > 1 and written_end <= group[-1].base_offset:
                # The `.swap` must reach the base of every segment it replaces (see the module docstring).
                marker = empty_batch(group[-1].base_offset)
                cleaned.append(marker, [(len(marker), group[-1].base_offset, -1)])
            for txn in tracker.kept_aborted:
                cleaned.txn_index.append(txn)
            cleaned.on_becoming_inactive()
            cleaned.flush()
            # Kafka keeps the group's last modification time, which time-based retention reads.
            self._fs.set_mtime(cleaned.log_path, self._fs.mtime(group[-1].log_path))
            self._check(target)
            swapping = True
            swapped = target.replace_segments(cleaned, group)
            swapping = False
            if not swapped:
                raise CleaningAborted(f"{target.directory}: segments changed while cleaning")
        except BaseException as exc:
            if swapping:
                raise
            # Asked before the files go: an index map's fault reads as a full disk only while they exist.
            full = cleaned.is_full_disk_fault(exc)
            try:
                cleaned.delete()
            except OSError as failure:
                raise StorageIOError(f"cleaner output {cleaned.log_path} could not be removed after {exc}: "
                                     f"{failure}", failure) from exc
            if full:
                raise _put_off(target, exc) from exc
            raise

    def _clean_segment(self, target: Log, segment: LogSegment, cleaned: LogSegment, tracker: TransactionTracker,
                       last_of_producers: Mapping[int, tuple[int | None, int]], now: int,
                       stats: CleanerStats) -> int:
        """Write what the segment keeps to `cleaned`; the offset after the last batch written (or 0)."""
        written_end = 0
        fmt = target.format
        retention = target.config.delete_retention_ms
        for _, buf in _read_spans(segment, 0, self._read_chunk):
            self._check(target)
            stats.bytes_read += len(buf)
            out: list[bytes | memoryview]
            sizes: list[tuple[int, int, int]]
            out, sizes = [], []
            for entry in fmt.iter_entries(buf):
                if entry.magic != 2:
                    kept = bytes(buf[entry.position:entry.position + entry.size_in_bytes])
                    out.append(kept)
                    sizes.append((len(kept), entry.last_offset, fmt.entry_bounds(buf, entry).max_timestamp))
                    continue
                # Magic 2: a v2 batch header, which mypy cannot tell from the byte.
                entry = cast("BatchHeader", entry)
                stats.records_read += entry.record_count
                if entry.is_control:
                    marker = fmt.read_marker(buf, entry.position).type_name
                    can_discard = tracker.on_marker(entry, marker)
                    discard = can_discard and entry.has_delete_horizon and entry.base_timestamp <= now
                else:
                    can_discard = discard = tracker.on_data(entry)
                retain_empty = False
                if entry.has_producer_id:
                    last = last_of_producers.get(entry.producer_id)
                    if last is not None:
                        if last[0] is not None:
                            retain_empty |= entry.last_offset == last[0]
                        else:
                            retain_empty |= entry.is_control and entry.producer_epoch == last[1]
                result, kept_count, _ = filter_batch(
                    self.offset_map, buf, entry.position, discard_records=discard, retain_empty=retain_empty,
                    marker_for_empty_txn=can_discard and entry.is_control, now_ms=now,
                    delete_retention_ms=retention)
                if result is None:
                    continue
                # An untouched batch is a view of the read buffer: joined below, copied once.
                stats.records_kept += kept_count
                out.append(result)
                # A whole batch the filter kept: its header is all there.
                sizes.append((len(result), entry.last_offset,
                              peek_header(result).max_timestamp))  # type: ignore[union-attr]
            if out:
                data = b"".join(out)
                cleaned.append(data, sizes)
                stats.bytes_written += len(data)
                written_end = sizes[-1][1] + 1
        return written_end
