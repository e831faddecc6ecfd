"""One partition: a `<topic>-<partition>` directory of segments.

Appends are serialised by one lock and never wait for the disk unless the
caller asks for durability; then they share fsyncs (group commit, in
durability.py). Reads take no lock: they work from the current segment list
and pread the files.

Storage errors are Kafka's: every failed write (append, roll, index,
snapshot, checkpoint, fsync) raises a KAFKA_STORAGE_ERROR
(`StorageIOError`, still the `OSError` it was) and goes through the log
dir's `LogDirState` (log_dir_failures.py), shared by the store's logs in that
dir. An ENOSPC that left the files as they were fails only its call, so a
full disk makes a log read-only until space returns: a torn append is cut
back to the segment's logical end, a roll whose new segment cannot be made
is undone, a producer snapshot that cannot be written is skipped (the state
is in memory, the log holds the truth) and a leader-epoch checkpoint that
cannot be rewritten is trimmed in memory. Anything else takes the dir
offline: this log and its neighbours refuse appends, and `close` writes
nothing and says the shutdown was not clean. A leader epoch is assigned
before the write, as Kafka's append does, so a checkpoint that cannot be
written leaves nothing appended.
"""
from __future__ import annotations

import bisect
import contextlib
import logging
import os
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, TypedDict, Unpack

from logstore.checkpoints import LEADER_EPOCH_CHECKPOINT, fsync_dir
from logstore.config import LogConfig
from logstore.dir_sync import dir_syncer
from logstore.durability import GroupCommit, Settle, roll_flusher
from logstore.epoch_cache import INITIAL_LEADER_EPOCH, LeaderEpochCache
from logstore.errors import InvalidProducerEpochError, OffsetOutOfRangeError, RecordBatchTooLargeError, StorageError
from logstore.filenames import DELETED_SUFFIX, SEGMENT_SUFFIXES, SWAP_SUFFIX, offset_path, parse_partition_dir
from logstore.filesystem import OS, FileSystem
from logstore.formats import DEFAULT_FORMAT, LogFormat
from logstore.formats.protocol import RecordRules
from logstore.index import AbortedTxn, sync_file
from logstore.loader import LoadMode, RecoveryReport, cut_log, load_log
from logstore.log_dir_failures import LogDirState, write_failed
from logstore.producer_rebuild import reload_producer_state
from logstore.producer_state import (
    DEFAULT_EXPIRATION_MS,
    ORIGIN_CLIENT,
    ORIGIN_COORDINATOR,
    ProducerEntry,
    ProducerStateManager,
    snapshot_path,
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


class AppendResult(NamedTuple):
    """Where an append landed: its offsets, the max timestamp, the broker's time if it stamped them (a tuple:
    every append makes one, and a frozen dataclass costs four times as much to make)."""

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
                 fs: FileSystem = OS, dir_state: LogDirState | None = None):
        self.directory = directory
        # segment.jitter.ms' stable per-partition draw (`_maybe_roll`): a hash of the path, taken once.
        self._roll_draw = zlib.crc32(directory.encode())
        self.fs = fs
        # Shared by every log of the store in the same log dir: an I/O error in one takes them all offline.
        self.dir_state = dir_state if dir_state is not None else LogDirState(os.path.dirname(directory))
        self.topic, self.partition = parse_partition_dir(os.path.basename(directory))
        self._name = f"{self.topic}-{self.partition}"   # as Kafka's messages name the partition
        self.config = config
        self.format = fmt
        self.recovery_report = report
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._next_offset = log_end_offset
        self._log_start_offset = log_start_offset
        self._lock = threading.RLock()
        syncer = dir_syncer(self.dir_state, fs)
        self._group = GroupCommit(recovery_point, end=lambda: self._next_offset, sync=self._sync,
                                  name=directory, dir_state=self.dir_state, syncer=syncer,
                                  covered=self._covered_by_dir_sync, in_memory=syncer.memory_backed)
        self._pending_deletes: list[tuple[float, LogSegment]] = []
        # Rolled segments whose indexes and txnindex no fsync has covered yet (see `_sync`).
        self._rolled: list[LogSegment] = []
        # Called (outside the log's locks) after a truncation lowered the recovery point,
        # so the owner can rewrite its checkpoint before anything is appended above it.
        self.on_truncated: Callable[[Log], None] | None = None
        self._closed = False
        self.epoch_cache = epoch_cache or LeaderEpochCache(os.path.join(directory, LEADER_EPOCH_CHECKPOINT), fs=fs)
        self._trim_epochs(end=log_end_offset, start=log_start_offset, lead=True)
        self.producers = producers or ProducerStateManager(directory, fs=fs)
        self.producers.map_end_offset = log_end_offset

    @classmethod
    def open(cls, directory: str, config: LogConfig | None = None, *, clean_shutdown: bool = False,
             recovery_point: int = 0, log_start_offset: int = 0, fmt: LogFormat = DEFAULT_FORMAT,
             on_batch: Callable[[LogSegment, Entry], None] | None = None,
             producer_id_expiration_ms: int = DEFAULT_EXPIRATION_MS, fs: FileSystem = OS,
             dir_state: LogDirState | None = None) -> Log:
        """Open (creating if needed) a partition directory, recovering it if the shutdown was unclean
        (`loader.load_log`: segments, offsets and producer state come from there). `dir_state` is its
        log dir's, shared with the store's other logs there (default: one of its own)."""
        config = config or LogConfig()
        # One listing serves the whole open: which segments, indexes, snapshots and checkpoint exist.
        try:
            names = fs.listdir(directory)
        except FileNotFoundError:
            fs.makedirs(directory, exist_ok=True)
            names = []
        epoch_cache = LeaderEpochCache(os.path.join(directory, LEADER_EPOCH_CHECKPOINT),
                                       exists=LEADER_EPOCH_CHECKPOINT in names, fs=fs)
        loaded = load_log(directory, config, LoadMode.WRITE, clean_shutdown=clean_shutdown,
                          recovery_point=recovery_point, log_start_offset=log_start_offset, fmt=fmt,
                          epoch_cache=epoch_cache, producer_id_expiration_ms=producer_id_expiration_ms,
                          on_batch=on_batch, names=names, fs=fs)
        return cls(directory, loaded.segments, config=config, log_end_offset=loaded.log_end_offset,
                   log_start_offset=loaded.log_start_offset, recovery_point=loaded.recovery_point,
                   report=loaded.report, fmt=fmt, epoch_cache=epoch_cache, producers=loaded.producers, fs=fs,
                   dir_state=dir_state)

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

    def validate(self, records: Buffer, *, client: bool = True, work_limit: int = -1) -> AppendInfo | None:
        """Check a writable records field as `append` does, and summarise it for `append(validated=)`.

        `client=True` is Kafka's LogValidator under this topic's config: every
        record walked, timestamps within message.timestamp.before/after.max.ms
        of now (CreateTime), keys in a compacted topic; a maxTimestamp the
        records contradict is corrected in place. With `work_limit` >= 0 the
        answer is None when that would cost more (`AppendInfo.check_cost`):
        validate again without one, off the event loop. With a compression.type
        other than `producer`, batches in another codec are recompressed
        (`AppendInfo.records` holds the bytes to append). Takes no lock: any thread.
        """
        config = self.config
        info: AppendInfo | None
        if not client:
            info = self.format.validate_append(records, client=False)
        else:
            rules = RecordRules(int(time.time() * 1000), self._name, not config.log_append_time,
                                config.message_timestamp_before_max_ms, config.message_timestamp_after_max_ms,
                                config.compacts)
            if work_limit < 0:
                info = self.format.validate_append(records, max_batch_size=config.max_message_bytes, rules=rules)
            else:
                info = self.format.try_validate_append(records, work_limit, max_batch_size=config.max_message_bytes,
                                                       rules=rules)
        if info is not None and client and config.recompresses:
            # Kafka's LogValidator: batches not in the topic's codec are stored in it.
            cost = self.format.recompress_cost(info, config.compression_type)
            if cost and 0 <= work_limit < info.check_cost + cost:
                return None
            info = self.format.recompress(records, info, config.compression_type, config.compression_level,
                                          max_batch_size=config.max_message_bytes)
        for header in info.batches if info is not None else ():
            if header.size_in_bytes > config.segment_bytes:
                # Kafka's code 18, apart from max.message.bytes' MESSAGE_TOO_LARGE: no segment could hold it.
                raise RecordBatchTooLargeError(
                    f"batch of {header.size_in_bytes} bytes is larger than segment.bytes {config.segment_bytes}",
                    header.position)
        return info

    def append(self, records: Buffer, *, leader_epoch: int = 0, client: bool = True,
               durable: bool = False, validated: AppendInfo | None = None) -> AppendResult:
        """Validate a records field, give it the next offsets and write it.

        `client=True` applies Kafka's produce rules (internal writers pass
        False to write control batches); `validated` is what `validate`
        answered for these very bytes, which are then not checked again.
        `durable=True` returns only after an fsync that covers this append,
        shared with concurrent appends.
        """
        buf = records if type(records) is bytearray or not memoryview(records).readonly else bytearray(records)
        config = self.config
        info = validated if validated is not None else self.validate(buf, client=client)
        # Without a work limit `validate` answers or raises.
        assert info is not None
        if info.records is not None:
            buf = info.records   # recompressed to the topic's compression.type
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
            if leader_epoch >= 0:
                # Before the write, as Kafka's append does: a checkpoint that cannot be written then
                # leaves nothing appended.
                self.epoch_cache.assign(leader_epoch, first)
            self.format.assign_offsets(buf, info, first, leader_epoch=leader_epoch, log_append_time=append_time)
            spans, offset = [], first
            for header in info.batches:
                offset += header.last_offset_delta + 1
                spans.append((header.size_in_bytes, offset - 1,
                              header.max_timestamp if append_time is None else append_time))
            segment.append(buf, spans)
        except (OSError, StorageError) as exc:
            self.producers.rollback(prepared)
            raise write_failed(self.dir_state, f"append to {self.directory}", exc) from exc
        except BaseException:
            self.producers.rollback(prepared)
            raise
        try:
            self.producers.commit(prepared, segment.txn_index, last + 1)
        except OSError as exc:
            # The bytes are in the log, the producer state half applied (an abort's `.txnindex` entry
            # failed): only a restart's recovery can rebuild it.
            raise self.dir_state.fail(f"append to {segment.txn_index.path}", exc) from exc
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
                         durable: bool = False, transaction_version: int = 0) -> AppendResult:
        """End the producer's open transaction with a COMMIT or ABORT marker (what the coordinator writes).

        A marker of transaction version 2 (KIP-890 part 2) carries the epoch its
        coordinator bumped when the transaction ended, so it must be above the
        epoch this partition knows for the producer (INVALID_PRODUCER_EPOCH
        otherwise, as Kafka's ProducerAppendInfo checks): one at that epoch
        could end the producer's next transaction.
        """
        timestamp = int(time.time() * 1000) if timestamp is None else timestamp
        marker = self.format.build_control_batch(commit, coordinator_epoch, producer_id, producer_epoch, timestamp)
        if transaction_version >= 2:
            # Checked before the append takes the lock again: a producer's markers come from its one
            # coordinator, one at a time, so nothing moves its epoch in between.
            with self._lock:
                entry = self.producers.entry(producer_id)
            if entry is not None and producer_epoch <= entry.epoch:
                raise InvalidProducerEpochError(
                    f"transaction marker of producer {producer_id} at epoch {producer_epoch} in "
                    f"{self.topic}-{self.partition}: transaction version 2 needs an epoch above {entry.epoch}")
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
        roll_ms = config.segment_ms - (self._roll_draw % (config.segment_jitter_ms + 1)
                                       if config.segment_jitter_ms else 0)
        if (segment.is_full_for(size, config.segment_bytes, last_offset)
                or (segment.size > 0 and segment.time_waited_for_roll(now, max_timestamp) > roll_ms)):
            return self.roll()
        return segment

    def roll(self) -> LogSegment:
        """Start a new segment at the log end offset (the old one's indexes are trimmed).

        A new segment that cannot be made is undone (its files removed, the old one active again);
        a producer snapshot that cannot be written is skipped (the state stays in memory, and a
        restart replays the log from an older snapshot).
        """
        with self._lock:
            self._check_open()
            old = self._segments[-1]
            if old.base_offset == self._next_offset and old.size == 0:
                return old
            base = self._next_offset
            try:
                old.on_becoming_inactive()
                new = LogSegment(self.directory, base, index_interval_bytes=self.config.index_interval_bytes,
                                 max_index_size=self.config.segment_index_bytes, fmt=self.format, fs=self.fs)
            except (OSError, StorageError) as exc:
                raise write_failed(self.dir_state, f"roll of {self.directory} to segment {base}", exc,
                                   intact=self._undo_roll(old, base)) from exc
            self._rolled.append(old)
            self._set_segments(self._segments + [new])
            log.debug("%s: rolled to segment %d", self.directory, new.base_offset)
            # Kafka's snapshot at every roll, so a restart replays at most the active segment.
            snapshot = self._take_snapshot(sync=False)

        def flush_rolled(offset: int) -> None:
            self.flush(offset)
            if snapshot is not None:
                try:
                    sync_file(snapshot, self.fs)
                except OSError as exc:
                    # A failed fsync, like the log's own (durability.py): the dir is no longer trusted.
                    raise self.dir_state.fail(f"fsync of {snapshot}", exc) from exc
        roll_flusher.submit(flush_rolled, new.base_offset, self.directory)
        return new

    def _undo_roll(self, old: LogSegment, base: int) -> bool:
        """Remove what a failed roll made of the segment at `base` and make `old` active again; whether
        the log is as before."""
        try:
            for suffix in SEGMENT_SUFFIXES:
                try:
                    self.fs.unlink(offset_path(self.directory, base, suffix))
                except FileNotFoundError:
                    pass
            old.make_active()
        except (OSError, StorageError) as exc:
            log.error("%s: cannot undo the roll to segment %d: %s", self.directory, base, exc)
            return False
        return True

    def _take_snapshot(self, *, sync: bool) -> str | None:
        """The producer snapshot at the log end, or None when none was written: one that cannot be
        written is removed and skipped after an ENOSPC (the state is in memory, the log holds the truth),
        and takes the log dir offline after any other error."""
        try:
            return self.producers.take_snapshot(sync=sync)
        except OSError as exc:
            path = snapshot_path(self.directory, self.producers.map_end_offset)
            try:
                self.fs.unlink(path)
                removed = True
            except FileNotFoundError:
                removed = True
            except OSError:
                removed = False
            error = write_failed(self.dir_state, f"producer snapshot {path}", exc, intact=removed)
            if not self.dir_state.online:
                raise error from exc
            log.warning("%s: producer snapshot skipped (%s); the state stays in memory", self.directory, exc)
            return None

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

    def is_durable(self, offset: int) -> bool:
        """Whether every offset below `offset` is on disk now (`GroupCommit.is_durable`)."""
        return self._group.is_durable(offset)

    def when_durable(self, offset: int, settle: Settle) -> None:
        """Call `settle` with the recovery point once every offset below `offset` is on disk, or with the
        error that means it never will be (`GroupCommit.when_durable`)."""
        self._group.when_durable(offset, settle)

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
            if not segment.closed:
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

    def _covered_by_dir_sync(self, start: int, end: int) -> None:
        # A syncfs of the log dir's file system is about to do all `_sync` would: the rolled segments it
        # covers whole need no flush of their own (a txnindex it covers may be fsynced once more later).
        del self._rolled[:]

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
            with self._io("truncation"):
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
            with self._io("truncation"):
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
        self._trim_epochs(clear=True)
        self.producers.reset(offset)
        self._after_truncation()

    def _after_truncation(self) -> None:
        self._group.lower_to(self._next_offset)
        self._log_start_offset = min(self._log_start_offset, self._next_offset)
        self._trim_epochs(end=self._next_offset)

    def delete_records(self, offset: int) -> int:
        """Move the log start offset up to `offset` (DeleteRecords); returns the new start."""
        with self._lock:
            self._check_open()
            if offset > self.high_watermark or offset < 0:
                raise OffsetOutOfRangeError(f"cannot delete records up to {offset}: high watermark is "
                                            f"{self.high_watermark}")
            if offset > self._log_start_offset:
                self._log_start_offset = offset
                self._trim_epochs(start=offset)
                with self._io("delete of records"):
                    self._delete_segments(lambda seg, nxt: nxt is not None and nxt.base_offset <= offset)
                    self.producers.delete_snapshots(lambda o: o >= self._log_start_offset)
            return self._log_start_offset

    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """Retention: remove whole segments past retention.ms, over retention.bytes, or below the
        log start offset; never the active one. Returns how many went."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        config = self.config
        with self._lock, self._io("retention"):
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
        self._trim_epochs(start=self._log_start_offset)
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
            with self._io("swap of cleaned segments"):
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
        with self._group.idle(), self._io("delete of old segments"):
            for _, segment in due:
                segment.delete()
        return len(due)

    # -- lifecycle -----------------------------------------------------------------------

    def _trim_epochs(self, *, end: int | None = None, start: int | None = None, clear: bool = False,
                     lead: bool = False) -> None:
        """Drop leader epochs at or past the log end, below the log start, or all; kept in memory only when
        the checkpoint cannot be written (a full disk must not stop retention or an open): the file then
        holds extra entries, which the next open drops again. `lead`: an open, after which this store leads
        the partition (see `LeaderEpochCache.truncate_from_end`)."""
        cache = self.epoch_cache

        def trim() -> None:
            if clear:
                cache.clear()
            if end is not None:
                cache.truncate_from_end(end, lead=INITIAL_LEADER_EPOCH if lead else None)
            if start is not None:
                cache.truncate_from_start(start)
        try:
            trim()
        except OSError as exc:
            log.warning("%s: %s not rewritten (%s); its entries are trimmed in memory", self.directory,
                        LEADER_EPOCH_CHECKPOINT, exc)
            persist, cache.persist = cache.persist, False
            try:
                trim()
            finally:
                cache.persist = persist

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError(f"log {self.directory} is closed")
        self.dir_state.check()

    @contextlib.contextmanager
    def _io(self, what: str) -> Iterator[None]:
        """Kafka's maybeHandleIOException: an I/O error inside takes the log dir offline."""
        try:
            yield
        except OSError as exc:
            raise write_failed(self.dir_state, f"{what} of {self.directory}", exc) from exc

    def close(self) -> None:
        """Flush, trim the indexes and close every file (a clean shutdown of this partition).

        Nothing is written to an offline log dir. The files are closed even
        when a step fails; the StorageError then says the shutdown was not
        clean (the store writes no clean-shutdown marker for the dir). A
        producer snapshot that a full disk refuses is not such a failure: a
        clean open replays the log after an older one.
        """
        with self._lock:
            if self._closed:
                return
            failure: StorageError | None = None
            try:
                if self.dir_state.online:
                    with self._group.urgent():
                        with self._io("trim"):
                            self.active_segment.cut_stray_bytes()
                        self.flush()
                    # At the log end, so the next open replays nothing.
                    self._take_snapshot(sync=True)
            except StorageError as exc:
                failure = exc
            finally:
                self._closed = True
                self._group.close()
                try:
                    self.delete_expired_files(all_now=True)
                except (OSError, StorageError) as exc:
                    failure = failure or write_failed(self.dir_state, f"delete of old segments of {self.directory}",
                                                      exc)
                for segment in self._segments:
                    try:
                        segment.close()
                    except StorageError as exc:
                        failure = failure or exc
            if failure is None and not self.dir_state.online:
                failure = self.dir_state.error()
            if failure is not None:
                raise failure

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
