"""One partition: a `<topic>-<partition>` directory of segments.

Appends are serialised by one lock and never wait for the disk unless the
caller asks for durability; then they share fsyncs (group commit, in
durability.py). Reads take no lock: they work from the current segment list
and pread the files.
"""
from __future__ import annotations

import bisect
import logging
import os
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict, Unpack

from logstore.checkpoints import LEADER_EPOCH_CHECKPOINT, fsync_dir
from logstore.config import LogConfig
from logstore.durability import GroupCommit, roll_flusher
from logstore.epoch_cache import LeaderEpochCache
from logstore.errors import OffsetOutOfRangeError, RecordBatchTooLargeError, StorageError
from logstore.filenames import DELETED_SUFFIX, SWAP_SUFFIX, parse_partition_dir
from logstore.filesystem import OS, FileSystem
from logstore.formats import DEFAULT_FORMAT, LogFormat
from logstore.index import AbortedTxn, sync_file
from logstore.loader import LoadMode, RecoveryReport, cut_log, load_log
from logstore.producer_rebuild import reload_producer_state
from logstore.producer_state import (
    DEFAULT_EXPIRATION_MS,
    ORIGIN_CLIENT,
    ORIGIN_COORDINATOR,
    ProducerEntry,
    ProducerStateManager,
)
from logstore.read_committed import READ_UNCOMMITTED, CommittedFilter, check_isolation, collect_aborted
from logstore.segment import FileSlice, LogSegment, segments_between

if TYPE_CHECKING:
    from typing_extensions import Buffer

    from logstore.formats.kafka import AppendInfo, Entry, Record

log = logging.getLogger(__name__)

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4


@dataclass(frozen=True)
class AppendResult:
    """Where an append landed: its offsets, the max timestamp, the broker's time if it stamped them."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int
    log_start_offset: int
    record_count: int
    size: int
    duplicate: bool = False
    """A producer's retry of a batch already in the log: nothing was written, the offsets are the first write's."""


@dataclass(frozen=True)
class FetchData:
    """A read: the batch bytes as a file slice (possibly ending mid-batch, as Kafka's do)."""

    fetch_offset: int
    records: FileSlice | None
    high_watermark: int
    log_start_offset: int
    last_stable_offset: int = -1
    aborted_transactions: list[AbortedTxn] | None = None
    """read_committed only: aborted transactions overlapping the slice, as a Fetch response carries them."""

    @property
    def size(self) -> int:
        """Bytes in the slice."""
        return self.records.size if self.records is not None else 0

    def read(self) -> bytes:
        """The bytes of the slice."""
        return self.records.read() if self.records is not None else b""


__all__ = ["AppendResult", "FetchData", "Log"]


class _RecordsOptions(TypedDict, total=False):
    """What `Log.read_records` passes on to `Log.iter_records`."""

    max_offset: int | None
    include_control: bool
    chunk_bytes: int
    isolation: str


class Log:
    """A partition log: append, read, roll, truncate, retention, flush."""

    def __init__(self, directory: str, segments: list[LogSegment], *, config: LogConfig,
                 log_end_offset: int, log_start_offset: int, recovery_point: int,
                 report: RecoveryReport | None = None, fmt: LogFormat = DEFAULT_FORMAT,
                 epoch_cache: LeaderEpochCache | None = None, producers: ProducerStateManager | None = None,
                 fs: FileSystem = OS):
        self.directory = directory
        self.fs = fs
        self.topic, self.partition = parse_partition_dir(os.path.basename(directory))
        self.config = config
        self.format = fmt
        self.recovery_report = report
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._next_offset = log_end_offset
        self._log_start_offset = log_start_offset
        self._lock = threading.RLock()
        self._group = GroupCommit(recovery_point, end=lambda: self._next_offset, sync=self._sync,
                                  name=directory)
        self._pending_deletes: list[tuple[float, LogSegment]] = []
        # Rolled segments whose indexes and txnindex no fsync has covered yet (see `_sync`).
        self._rolled: list[LogSegment] = []
        # Called (outside the log's locks) after a truncation lowered the recovery point,
        # so the owner can rewrite its checkpoint before anything is appended above it.
        self.on_truncated: Callable[[Log], None] | None = None
        self._closed = False
        self.epoch_cache = epoch_cache or LeaderEpochCache(os.path.join(directory, LEADER_EPOCH_CHECKPOINT), fs=fs)
        self.epoch_cache.truncate_from_end(log_end_offset)
        self.epoch_cache.truncate_from_start(log_start_offset)
        self.producers = producers or ProducerStateManager(directory, fs=fs)
        self.producers.map_end_offset = log_end_offset

    @classmethod
    def open(cls, directory: str, config: LogConfig | None = None, *, clean_shutdown: bool = False,
             recovery_point: int = 0, log_start_offset: int = 0, fmt: LogFormat = DEFAULT_FORMAT,
             on_batch: Callable[[LogSegment, Entry], None] | None = None,
             producer_id_expiration_ms: int = DEFAULT_EXPIRATION_MS, fs: FileSystem = OS) -> Log:
        """Open (creating if needed) a partition directory, recovering it if the shutdown was unclean
        (`loader.load_log`: segments, offsets and producer state come from there)."""
        config = config or LogConfig()
        fs.makedirs(directory, exist_ok=True)
        epoch_cache = LeaderEpochCache(os.path.join(directory, LEADER_EPOCH_CHECKPOINT), fs=fs)
        loaded = load_log(directory, config, LoadMode.WRITE, clean_shutdown=clean_shutdown,
                          recovery_point=recovery_point, log_start_offset=log_start_offset, fmt=fmt,
                          epoch_cache=epoch_cache, producer_id_expiration_ms=producer_id_expiration_ms,
                          on_batch=on_batch, fs=fs)
        return cls(directory, loaded.segments, config=config, log_end_offset=loaded.log_end_offset,
                   log_start_offset=loaded.log_start_offset, recovery_point=loaded.recovery_point,
                   report=loaded.report, fmt=fmt, epoch_cache=epoch_cache, producers=loaded.producers, fs=fs)

    # -- offsets -------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """Whether close() or delete() ran."""
        return self._closed

    @property
    def log_end_offset(self) -> int:
        """The offset the next append gets."""
        return self._next_offset

    @property
    def high_watermark(self) -> int:
        """On a single node every appended offset is replicated: the log end offset."""
        return self._next_offset

    @property
    def last_stable_offset(self) -> int:
        """read_committed reads stop here: the first offset of the oldest open transaction, else the
        high watermark."""
        return self.producers.last_stable_offset(self._log_start_offset, self.high_watermark)

    @property
    def log_start_offset(self) -> int:
        """The first offset a read may ask for."""
        return self._log_start_offset

    @property
    def recovery_point(self) -> int:
        """Every offset below this is on disk (fsynced)."""
        return self._group.recovery_point

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        """The segments, oldest first."""
        return tuple(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        """The segment appends go to."""
        return self._segments[-1]

    @property
    def size(self) -> int:
        """Bytes in every segment."""
        return sum(s.size for s in self._segments)

    def _segment_index(self, offset: int, bases: list[int]) -> int:
        return max(bisect.bisect_right(bases, offset) - 1, 0)

    def max_producer_id(self, *, scan_segments: bool = False) -> int:
        """The highest producer id in the producer state (with `scan_segments`, in any batch too), -1 for none."""
        highest = max(self.producers.entries(), default=-1)
        if scan_segments:
            with self._lock:
                for segment in self._segments:
                    for batch in segment.iter_bounds(peek=self.format.peek_producer_batch):
                        highest = max(highest, batch.producer_id)
        return highest

    # -- appends -------------------------------------------------------------------------

    def append(self, records: Buffer, *, leader_epoch: int = 0, client: bool = True,
               durable: bool = False) -> AppendResult:
        """Validate a records field, give it the next offsets and write it.

        `client=True` applies Kafka's produce rules (internal writers pass
        False to write control batches). `durable=True` returns only after
        an fsync that covers this append, shared with concurrent appends.
        """
        buf = records if not memoryview(records).readonly else bytearray(records)
        config = self.config
        info = self.format.validate_append(buf, client=client,
                                           max_batch_size=config.max_message_bytes if client else -1)
        if client and config.compacts:
            self.format.require_keys(buf, info, f"{self.topic}-{self.partition}")
        for header in info.batches:
            if header.size_in_bytes > config.segment_bytes:
                # Kafka's code 18, apart from max.message.bytes' MESSAGE_TOO_LARGE: no segment could hold it.
                raise RecordBatchTooLargeError(
                    f"batch of {header.size_in_bytes} bytes is larger than segment.bytes {config.segment_bytes}",
                    header.position)
        self._group.begin_write()
        try:
            with self._lock:
                result = self._append_locked(buf, info, leader_epoch,
                                             ORIGIN_CLIENT if client else ORIGIN_COORDINATOR)
        finally:
            self._group.end_write()
        if durable:
            self.flush(result.last_offset + 1)
        elif self._next_offset - self._group.recovery_point >= config.flush_messages:
            self.flush()
        return result

    def _append_locked(self, buf: Buffer, info: AppendInfo, leader_epoch: int, origin: int) -> AppendResult:
        self._check_open()
        self._group.check_healthy()
        config = self.config
        first = self._next_offset
        last = first + info.offset_count - 1
        now = int(time.time() * 1000)
        append_time = now if config.log_append_time else None
        max_ts = info.max_timestamp if append_time is None else append_time
        # Roll first: the snapshot a roll takes must not see this append.
        segment = self._maybe_roll(info.size, last, max_ts, now)
        prepared = self.producers.prepare(info.batches, first, origin,
                                          lambda batch: self.format.read_marker(buf, batch.position))
        if prepared is not None and prepared.duplicate is not None:
            dup_first, dup_last, dup_ts = prepared.duplicate
            # As Kafka answers a retry: the first write's offsets and timestamp, nothing appended.
            return AppendResult(dup_first, dup_last, dup_ts, dup_last, dup_ts, self._log_start_offset, 0, 0,
                                duplicate=True)
        try:
            self.format.assign_offsets(buf, info, first, leader_epoch=leader_epoch, log_append_time=append_time)
            spans, offset = [], first
            for header in info.batches:
                offset += header.last_offset_delta + 1
                spans.append((header.size_in_bytes, offset - 1,
                              header.max_timestamp if append_time is None else append_time))
            segment.append(buf, spans)
        except BaseException:
            self.producers.rollback(prepared)
            raise
        self.producers.commit(prepared, segment.txn_index, last + 1)
        if leader_epoch >= 0:
            self.epoch_cache.assign(leader_epoch, first)
        self._next_offset = last + 1
        offset_of_max = first if append_time is not None else spans[info.max_timestamp_batch][1]
        return AppendResult(first, last, max_ts, offset_of_max, append_time if append_time is not None else -1,
                            self._log_start_offset, info.record_count, info.size)

    def append_records(self, values: Iterable[bytes | None], *, keys: Sequence[bytes | None] | None = None,
                       headers: Sequence[Sequence[tuple[str | bytes, bytes | None]]] | None = None,
                       timestamps: int | Sequence[int] | None = None, compression: int = 0, durable: bool = False,
                       producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                       transactional: bool = False) -> AppendResult:
        """Build one batch from values (and keys, headers, timestamps) and append it.

        With a producer id, epoch and base sequence the append is idempotent:
        a retry of one of the producer's last five batches returns the first
        write's offsets (`duplicate=True`) and writes nothing; `transactional`
        puts it in the producer's open transaction (see `write_txn_marker`).
        """
        values = list(values)
        keys = list(keys) if keys is not None else [None] * len(values)
        batch = self.format.encode_batch(keys, values, headers, timestamps, compression=compression,
                                         producer_id=producer_id, producer_epoch=producer_epoch,
                                         base_sequence=base_sequence, transactional=transactional)
        return self.append(bytearray(batch), durable=durable)

    def write_txn_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, *,
                         commit: bool, timestamp: int | None = None, leader_epoch: int = 0,
                         durable: bool = False) -> AppendResult:
        """End the producer's open transaction with a COMMIT or ABORT marker (what the coordinator writes)."""
        timestamp = int(time.time() * 1000) if timestamp is None else timestamp
        marker = self.format.build_control_batch(commit, coordinator_epoch, producer_id, producer_epoch, timestamp)
        return self.append(bytearray(marker), leader_epoch=leader_epoch, client=False, durable=durable)

    def producer_entries(self) -> list[ProducerEntry]:
        """Every producer this partition remembers (DescribeProducers), by producer id, read between appends."""
        with self._lock:
            return sorted(self.producers.entries().values(), key=lambda e: e.producer_id)

    def expire_producers(self, now_ms: int | None = None) -> list[int]:
        """Drop producers idle for producer.id.expiration.ms (never one with an open transaction)."""
        with self._lock:
            return self.producers.expire(now_ms)

    def _maybe_roll(self, size: int, last_offset: int, max_timestamp: int, now: int) -> LogSegment:
        segment = self._segments[-1]
        config = self.config
        # A stable per-partition jitter, so partitions created together do not all roll together.
        roll_ms = config.segment_ms - (zlib.crc32(self.directory.encode()) % (config.segment_jitter_ms + 1)
                                       if config.segment_jitter_ms else 0)
        if (segment.is_full_for(size, config.segment_bytes, last_offset)
                or (segment.size > 0 and segment.time_waited_for_roll(now, max_timestamp) > roll_ms)):
            return self.roll()
        return segment

    def roll(self) -> LogSegment:
        """Start a new segment at the log end offset (the old one's indexes are trimmed)."""
        with self._lock:
            self._check_open()
            old = self._segments[-1]
            if old.base_offset == self._next_offset and old.size == 0:
                return old
            old.on_becoming_inactive()
            self._rolled.append(old)
            # Kafka's snapshot at every roll, so a restart replays at most the active segment.
            snapshot = self.producers.take_snapshot(sync=False)
            new = LogSegment(self.directory, self._next_offset, index_interval_bytes=self.config.index_interval_bytes,
                             max_index_size=self.config.segment_index_bytes, fmt=self.format, fs=self.fs)
            self._set_segments(self._segments + [new])
            log.debug("%s: rolled to segment %d", self.directory, new.base_offset)

        def flush_rolled(offset: int) -> None:
            self.flush(offset)
            if snapshot is not None:
                sync_file(snapshot, self.fs)
        roll_flusher.submit(flush_rolled, new.base_offset, self.directory)
        return new

    def _set_segments(self, segments: list[LogSegment]) -> None:
        self._segments = segments
        self._bases = [s.base_offset for s in segments]

    # -- flushing ------------------------------------------------------------------------

    def flush(self, offset: int | None = None) -> None:
        """Make every offset below `offset` (default: all) durable; concurrent callers share fsyncs."""
        self._group.flush(offset)

    def durable(self, offset: int) -> Future[int]:
        """A future that completes once every offset below `offset` is on disk, without blocking."""
        return self._group.durable(offset)

    def _sync(self, start: int, end: int) -> None:
        # No lock: appends write their bytes before moving the end, and
        # segments only leave the list while no fsync runs (GroupCommit.idle).
        created = False
        # An acknowledged append syncs only the active `.log`, so the recovery point can pass a segment
        # whose indexes were never synced; recovery trusts the indexes below it (aborted transactions
        # live only in the txnindex), so the first fsync after a roll covers the rolled segments whole.
        flushed = set()
        while self._rolled:   # pop: a roll may append meanwhile (under the log's lock, not ours)
            segment = self._rolled.pop(0)
            if segment.fd >= 0:
                created = segment.flush() or created
                flushed.add(segment)
        for segment, newest in segments_between(self._segments, start, end):
            if segment not in flushed:
                created = (segment.flush_log() if newest else segment.flush()) or created
            created = created or segment.base_offset >= start
        if created:
            # Kafka's LocalLog.flush: a segment rolled since the last flush (or a txnindex an abort
            # created) is durable only once its directory entry is, else a power cut drops the file.
            fsync_dir(self.directory, self.fs)

    def flush_if_due(self, now: float | None = None) -> bool:
        """Flush when flush.ms has passed since the last flush and something is unflushed."""
        now = time.monotonic() if now is None else now
        if (self._group.recovery_point < self._next_offset
                and (now - self._group.last_flush) * 1000 >= self.config.flush_ms):
            self.flush()
            return True
        return False

    # -- reads ---------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int = 1 << 20, *, max_offset: int | None = None,
             min_one_message: bool = True, isolation: str = READ_UNCOMMITTED) -> FetchData:
        """Batch bytes from the one holding `offset`, up to `max_bytes` and below `max_offset`.

        Like Kafka's, the slice may end inside a batch when `max_bytes` cuts
        it; readers drop a partial last batch. `max_offset` (the high
        watermark or last stable offset) ends the slice at the start of the
        batch holding it. `read_committed` also stops at the last stable
        offset and adds the aborted transactions the slice may hold. Raises
        OffsetOutOfRangeError outside [log start offset, log end offset].
        """
        committed = check_isolation(isolation)
        segments, bases = self._segments, self._bases
        end = self._next_offset
        start = self._log_start_offset
        lso = self.last_stable_offset
        if offset < start or offset > end:
            raise OffsetOutOfRangeError(f"offset {offset} is outside [{start}, {end}] of {self.directory}")
        upper = end if max_offset is None else min(max_offset, end)
        if committed:
            upper = min(upper, lso)
        empty = FetchData(offset, None, end, start, lso, [] if committed else None)
        if offset >= upper:
            return empty
        for i in range(self._segment_index(offset, bases), len(segments)):
            segment = segments[i]
            max_position = None
            if upper < end and (i == len(segments) - 1 or upper < bases[i + 1]):
                found = segment.translate_offset(upper)
                max_position = found.position if found is not None else segment.size
            result = segment.read(offset, max_bytes, max_position, min_one_message)
            if result is not None:
                aborted = None
                if committed:
                    # Kafka's bound when the index says nothing closer: the next segment's base.
                    bound = min(upper, bases[i + 1]) if i + 1 < len(bases) else upper
                    aborted = collect_aborted(segments, bases, offset, bound)
                return FetchData(offset, result[1] if result[1].size else None, end, start, lso, aborted)
        return empty

    def iter_records(self, offset: int | None = None, *, max_offset: int | None = None,
                     include_control: bool = False, chunk_bytes: int = 1 << 20,
                     isolation: str = READ_UNCOMMITTED) -> Iterator[Record]:
        """Every record from `offset` (default: the log start) below `max_offset`, decoded.

        `read_committed` stops at the last stable offset and leaves out the
        records of aborted transactions and every control record.
        """
        offset = self._log_start_offset if offset is None else offset
        upper = self._next_offset if max_offset is None else min(max_offset, self._next_offset)
        keep = None
        if check_isolation(isolation):
            upper = min(upper, self.last_stable_offset)
            keep = CommittedFilter(collect_aborted(self._segments, self._bases, offset, upper)).keep
        fmt = self.format
        for entry, buf in self._iter_entries(offset, upper, chunk_bytes):
            if keep is not None:
                if not keep(entry, lambda: fmt.read_marker(buf, entry.position).type_name == "ABORT"):
                    continue
            elif getattr(entry, "is_control", False) and not include_control:
                continue
            for record in fmt.decode_entry(buf, entry):
                if offset <= record.offset < upper:
                    yield record

    def iter_batches(self, offset: int | None = None, *,
                     chunk_bytes: int = 1 << 20) -> Iterator[tuple[Entry, list[Record]]]:
        """Every batch from the one holding `offset` (default: the log start) to the log end, as
        (header, records): what a coordinator replays, producer ids and control batches included."""
        offset = self._log_start_offset if offset is None else offset
        for entry, buf in self._iter_entries(offset, self._next_offset, chunk_bytes):
            yield entry, self.format.decode_entry(buf, entry)

    def _iter_entries(self, offset: int, upper: int, chunk_bytes: int) -> Iterator[tuple[Entry, bytes]]:
        """(entry, the buffer it lies in) for the entries holding offsets from `offset` below `upper`."""
        fmt = self.format
        while offset < upper:
            # Bytes up to the log end: `upper` may fall inside a batch, whose head still counts.
            data = self.read(offset, chunk_bytes)
            if data.records is None:
                return
            buf = data.read()
            next_offset = offset
            for entry in fmt.iter_entries(buf):
                next_offset = entry.last_offset + 1
                yield entry, buf
            if next_offset <= offset:
                raise StorageError(f"{self.directory}: no whole batch at offset {offset}")
            offset = next_offset

    def read_records(self, offset: int, max_records: int | None = None,
                     **kwargs: Unpack[_RecordsOptions]) -> list[Record]:
        """Decoded records from `offset`, at most `max_records`."""
        found = []
        for record in self.iter_records(offset, **kwargs):
            found.append(record)
            if max_records is not None and len(found) >= max_records:
                break
        return found

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """ListOffsets: (offset, timestamp) of the first record at or after `timestamp`.

        -1 is the latest offset (the high watermark), -2 and -4 the earliest,
        -3 the record with the largest timestamp. None when no record is late enough.
        """
        if timestamp == LATEST_TIMESTAMP:
            return (self.high_watermark, -1)
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return (self._log_start_offset, -1)
        segments = list(self._segments)
        if timestamp == MAX_TIMESTAMP:
            best = max(segments, key=lambda s: s.max_timestamp)
            max_ts, batch_last = best.max_timestamp_and_offset
            if max_ts < 0:
                return None
            holding = best.translate_offset(batch_last)
            start = holding.base_offset if holding is not None else best.base_offset
            return best.find_offset_by_timestamp(max_ts, max(start, self._log_start_offset))
        if timestamp < 0:
            raise ValueError(f"unknown special timestamp {timestamp}")
        for segment in segments:
            if segment.largest_timestamp >= timestamp:
                found = segment.find_offset_by_timestamp(timestamp, self._log_start_offset)
                if found is not None:
                    return found
        return None

    # -- truncation and retention ----------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove every batch from the one holding `offset` onwards."""
        with self._lock, self._group.idle():
            self._check_open()
            if offset >= self._next_offset:
                return
            if offset <= self._segments[0].base_offset:
                self._truncate_fully(offset)
            else:
                self._truncate_segments(offset)
        self._notify_truncated()

    def _truncate_segments(self, offset: int) -> None:
        # The last segment starting below `offset` holds it (offsets at or below the first base truncate fully).
        keep = cut_log(self._segments, bisect.bisect_left(self._bases, offset) - 1, offset)
        active = keep[-1]
        self._set_segments(keep)
        self._next_offset = max(active.read_next_offset(), active.base_offset)
        self._after_truncation()
        # Kafka's truncateAndReload: the newest snapshot at or below the new end, then a replay.
        reload_producer_state(self.producers, keep, log_start_offset=self._log_start_offset,
                              log_end_offset=self._next_offset, clean_shutdown=False, fmt=self.format)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start an empty log at `offset`."""
        with self._lock, self._group.idle():
            self._check_open()
            self._truncate_fully(offset)
        self._notify_truncated()

    def _notify_truncated(self) -> None:
        if self.on_truncated is not None:
            self.on_truncated(self)

    def _truncate_fully(self, offset: int) -> None:
        for segment in self._segments:
            segment.delete()
        fresh = LogSegment(self.directory, offset, index_interval_bytes=self.config.index_interval_bytes,
                           max_index_size=self.config.segment_index_bytes, fmt=self.format, fs=self.fs)
        self._set_segments([fresh])
        self._next_offset = offset
        self._log_start_offset = offset
        self.epoch_cache.clear()
        self.producers.reset(offset)
        self._after_truncation()

    def _after_truncation(self) -> None:
        self._group.lower_to(self._next_offset)
        self._log_start_offset = min(self._log_start_offset, self._next_offset)
        self.epoch_cache.truncate_from_end(self._next_offset)

    def delete_records(self, offset: int) -> int:
        """Move the log start offset up to `offset` (DeleteRecords); returns the new start."""
        with self._lock:
            self._check_open()
            if offset > self.high_watermark or offset < 0:
                raise OffsetOutOfRangeError(f"cannot delete records up to {offset}: high watermark is "
                                            f"{self.high_watermark}")
            if offset > self._log_start_offset:
                self._log_start_offset = offset
                self.epoch_cache.truncate_from_start(offset)
                self._delete_segments(lambda seg, nxt: nxt is not None and nxt.base_offset <= offset)
                self.producers.delete_snapshots(lambda o: o >= self._log_start_offset)
            return self._log_start_offset

    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """Retention: remove whole segments past retention.ms, over retention.bytes, or below the
        log start offset; never the active one. Returns how many went."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        config = self.config
        with self._lock:
            self._check_open()
            deleted = self._delete_segments(
                lambda seg, nxt: nxt is not None and nxt.base_offset <= self._log_start_offset)
            if not config.deletes:
                return deleted
            if config.retention_ms >= 0:
                deleted += self._delete_segments(lambda seg, nxt: now_ms - seg.largest_timestamp > config.retention_ms)
            if config.retention_bytes >= 0:
                excess = self.size - config.retention_bytes

                def over_size(seg: LogSegment, nxt: LogSegment) -> bool:
                    nonlocal excess
                    if excess - seg.size < 0:
                        return False
                    excess -= seg.size
                    return True
                deleted += self._delete_segments(over_size)
            return deleted

    def _delete_segments(self, predicate: Callable[[LogSegment, LogSegment], bool]) -> int:
        """Delete the oldest segments while `predicate(segment, next)` holds, keeping the active one."""
        segments = self._segments
        count = 0
        while count < len(segments) - 1 and predicate(segments[count], segments[count + 1]):
            count += 1
        if not count:
            return 0
        doomed, kept = segments[:count], segments[count:]
        self._set_segments(kept)
        self._log_start_offset = max(self._log_start_offset, kept[0].base_offset)
        self.epoch_cache.truncate_from_start(self._log_start_offset)
        self.producers.delete_snapshots(lambda o: o >= self._log_start_offset)
        due = time.monotonic() + self.config.file_delete_delay_ms / 1000
        for segment in doomed:
            # Kafka's two-step delete: readers holding a slice keep a valid file until the delay passes.
            segment.rename_with_suffix(DELETED_SUFFIX)
            self._pending_deletes.append((due, segment))
        log.info("%s: deleted segments %s", self.directory, [s.base_offset for s in doomed])
        return count

    def replace_segments(self, cleaned: LogSegment, replaced: Sequence[LogSegment]) -> bool:
        """Swap cleaner output in for the consecutive segments it was made from, by Kafka's renames.

        `cleaned` (flushed, its files still `.cleaned`) becomes `.swap`, the
        old segments `.deleted`, then the swap loses its suffix; a crash at
        any step leaves files the loader turns into either the old segments
        or the new one. False, with nothing renamed, when the old segments
        are no longer all in the log (retention or a truncation ran since).
        """
        with self._lock:
            self._check_open()
            segments = self._segments
            start = next((i for i, s in enumerate(segments) if s is replaced[0]), None)
            end = None if start is None else start + len(replaced)
            # The active segment is never cleaned: appends go on while the cleaner works.
            if end is None or end >= len(segments) or any(a is not b for a, b in zip(segments[start:end], replaced)):
                return False
            cleaned.rename_with_suffix(SWAP_SUFFIX)
            fsync_dir(self.directory, self.fs)
            due = time.monotonic() + self.config.file_delete_delay_ms / 1000
            for segment in replaced:
                segment.rename_with_suffix(DELETED_SUFFIX)
                self._pending_deletes.append((due, segment))
            fsync_dir(self.directory, self.fs)
            cleaned.rename_with_suffix("")
            fsync_dir(self.directory, self.fs)
            self._set_segments(segments[:start] + [cleaned] + segments[end:])
        return True

    def delete_expired_files(self, now: float | None = None, *, all_now: bool = False) -> int:
        """Remove `.deleted` segments whose file.delete.delay.ms has passed."""
        now = time.monotonic() if now is None else now
        with self._lock:
            due = [p for p in self._pending_deletes if all_now or p[0] <= now]
            self._pending_deletes = [p for p in self._pending_deletes if p not in due]
        with self._group.idle():
            for _, segment in due:
                segment.delete()
        return len(due)

    # -- lifecycle -----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError(f"log {self.directory} is closed")

    def close(self) -> None:
        """Flush, trim the indexes and close every file (a clean shutdown of this partition).

        The files are closed even when the flush fails; the StorageError then
        says the shutdown was not clean.
        """
        with self._lock:
            if self._closed:
                return
            try:
                with self._group.urgent():
                    self.flush()
                # At the log end, so the next open replays nothing.
                self.producers.take_snapshot()
            finally:
                self._closed = True
                self._group.close()
                self.delete_expired_files(all_now=True)
                for segment in self._segments:
                    segment.close()

    def delete(self) -> None:
        """Close and remove the whole directory."""
        with self._lock, self._group.idle():
            if not self._closed:
                self._closed = True
                self._group.close()
                for _, segment in self._pending_deletes:
                    segment.delete()
                self._pending_deletes = []
                for segment in self._segments:
                    segment.delete()
            self.fs.rmtree(self.directory)

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Log({self.topic}-{self.partition}, start={self._log_start_offset}, "
                f"end={self._next_offset}, segments={len(self._segments)})")
