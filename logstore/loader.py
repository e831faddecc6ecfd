"""Opening a partition directory, and recovering it after an unclean shutdown: the one place recovery lives.

Kafka's LogLoader, in order (on-disk-format.md §5.1, §5.6):

1. Leftovers: `.deleted`, `.cleaned` and orphan index files go, `.swap`
   renames are finished (`leftover_files.py`).
2. Every segment is opened; an index that is missing or fails its sanity
   check is rebuilt from the log (an empty segment has nothing to index:
   its index files are made by its first append, so a new partition has
   none).
3. Unless the last shutdown was clean, every segment from the one holding
   the recovery point is scanned (framing, CRC, increasing offsets): the
   first broken or partial entry ends the log and every later segment goes.
   Producer state is brought to the first scanned segment's base from the
   newest snapshot below it, then rides on the scan, which also rebuilds the
   `.txnindex` of what it covers (`producer_rebuild.ScanReplay`).
4. Otherwise producer state is the newest snapshot at or below the log end
   plus a replay of the log after it.

`LoadMode.WRITE` makes the directory what it found (what a broker does);
`LoadMode.READ_ONLY` writes not one byte (no removal, no rename, no index
file, no truncation, no `.txnindex` reset, no snapshot written or deleted)
and still ends with the same segments, offsets, producer state, last stable
offset and aborted transactions: it is what a reader beside a live writer
(Spark) uses. The `RecoveryReport` says what was found and done (or, read
only, would be done), with byte positions.

A WRITE load on a full disk still opens the log: a torn tail is cut (a
truncate needs no space), indexes whose pages cannot be had are rebuilt in
memory and their files removed (`LogSegment.recover`; the next open
rebuilds them), and a producer snapshot that cannot be written is skipped
(`RecoveryReport.snapshot_skipped`: the state is in memory, and the next
open replays from an older snapshot). The log then serves reads, and takes
appends once space returns.
"""
from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict, cast

from logstore.config import LogConfig
from logstore.epoch_cache import LeaderEpochCache
from logstore.errors import CorruptRecordError, LogStoreError, SegmentDeletedError
from logstore.filenames import INDEX_SUFFIX, SNAPSHOT_SUFFIX, TIME_INDEX_SUFFIX, offset_name, parse_offset
from logstore.filesystem import OS, FileSystem
from logstore.formats import DEFAULT_FORMAT, LogFormat
from logstore.index import AbortedTxn, CorruptIndexError
from logstore.leftover_files import SegmentFiles, find_segment_files, settle_leftovers
from logstore.producer_rebuild import ScanReplay, SnapshotLoad, reload_producer_state
from logstore.producer_state import DEFAULT_EXPIRATION_MS, ProducerStateManager, snapshot_path
from logstore.segment import LogSegment

if TYPE_CHECKING:
    from logstore.formats.kafka import BatchHeader, Entry

log = logging.getLogger(__name__)

__all__ = ["LoadMode", "LoadedLog", "RecoveryReport", "Truncation", "cut_log", "load_log"]


class LoadMode(enum.Enum):
    """WRITE repairs the directory; READ_ONLY computes the same log and leaves every byte as it was."""

    WRITE = "write"
    READ_ONLY = "read-only"


@dataclass(frozen=True)
class Truncation:
    """Where recovery cut a segment, how many bytes went, and why."""

    base_offset: int
    position: int
    bytes_removed: int
    reason: str


@dataclass
class RecoveryReport:
    """What opening one partition directory found and did (read only: would have done).

    Offsets are log offsets, positions and sizes bytes.
    """

    directory: str
    clean_shutdown: bool
    segments: int = 0
    recovered_segments: list[int] = field(default_factory=list)
    bytes_scanned: int = 0
    rebuilt_indexes: list[tuple[int, str]] = field(default_factory=list)
    truncations: list[Truncation] = field(default_factory=list)
    deleted_segments: list[int] = field(default_factory=list)
    removed_files: list[str] = field(default_factory=list)
    log_end_offset: int = 0
    recovery_point: int = 0
    seconds: float = 0.0
    producer_state: SnapshotLoad | None = None
    """How the producer state was rebuilt (`producer_rebuild.SnapshotLoad`)."""
    mode: LoadMode = LoadMode.WRITE
    snapshot_skipped: str | None = None
    """Why the snapshot of the rebuilt producer state was not written (a full disk), if it was not."""

    @property
    def truncated(self) -> bool:
        """Whether recovery removed any bytes."""
        return bool(self.truncations)

    def summary(self) -> str:
        """One line for the broker log."""
        parts = [f"{self.segments} segments", f"log end offset {self.log_end_offset}"]
        if not self.clean_shutdown:
            parts.append(f"recovered {len(self.recovered_segments)} ({self.bytes_scanned} bytes)")
        for t in self.truncations:
            parts.append(f"truncated segment {t.base_offset} at byte {t.position} "
                         f"(-{t.bytes_removed} bytes: {t.reason})")
        if self.deleted_segments:
            parts.append(f"dropped later segments {self.deleted_segments}")
        if self.rebuilt_indexes:
            parts.append(f"rebuilt indexes {[b for b, _ in self.rebuilt_indexes]}")
        if self.snapshot_skipped:
            parts.append(f"producer snapshot not written ({self.snapshot_skipped})")
        if self.mode is LoadMode.READ_ONLY:
            parts.append("read only: nothing written")
        return f"{self.directory}: " + ", ".join(parts) + f" in {self.seconds * 1000:.1f} ms"


@dataclass
class LoadedLog:
    """A loaded directory: its segments (oldest first), offsets, producer state and what recovery did.

    `aborted` holds every aborted transaction of the log, by marker offset:
    the `.txnindex` entries of the segments no scan rebuilt, plus those the
    rebuild met (which, written, are the rebuilt `.txnindex` entries).
    """

    segments: list[LogSegment]
    log_end_offset: int
    log_start_offset: int
    recovery_point: int
    report: RecoveryReport
    producers: ProducerStateManager | None = None
    aborted: list[AbortedTxn] = field(default_factory=list)

    @property
    def last_stable_offset(self) -> int:
        """Where read_committed reads stop (the log end is the high watermark on one node)."""
        # load_log always gives the producer state.
        return self.producers.last_stable_offset(  # type: ignore[union-attr]
            self.log_start_offset, self.log_end_offset)

    def close(self) -> None:
        """Close every segment (a load that is not handed to a `Log`)."""
        for segment in self.segments:
            segment.close()


def cut_log(segments: list[LogSegment], index: int, offset: int) -> list[LogSegment]:
    """Kafka's truncation of a log: `segments[index]` keeps what lies below `offset`, every later segment
    is deleted; returns the segments kept, the last made active. Recovery's cut after a broken entry and
    `Log.truncate_to` both end here."""
    for later in segments[index + 1:]:
        later.delete()
    kept = segments[:index + 1]
    kept[-1].truncate_to(offset)
    kept[-1].make_active()
    return kept


def load_log(directory: str, config: LogConfig | None = None, mode: LoadMode = LoadMode.WRITE, *,
             clean_shutdown: bool = False, recovery_point: int = 0, log_start_offset: int = 0,
             fmt: LogFormat = DEFAULT_FORMAT,
             epoch_cache: LeaderEpochCache | None = None, producer_id_expiration_ms: int = DEFAULT_EXPIRATION_MS,
             on_batch: Callable[[LogSegment, Entry], None] | None = None, names: list[str] | None = None,
             fs: FileSystem = OS) -> LoadedLog:
    """Open the segments of a partition directory and rebuild its producer state, recovering as Kafka would.

    Epochs of scanned batches newer than `epoch_cache` knows are assigned to
    it (WRITE only), so a crash between an append and the checkpoint write
    loses no epoch. `on_batch(segment, entry)` sees every entry recovery
    scans, in order. An empty directory gets an empty segment at
    `log_start_offset` (WRITE) or none (READ_ONLY). `names` is the
    directory's listing if the caller just made one: a clean open then
    lists nothing again and asks for no file that is not there.
    """
    config = config or LogConfig()
    write = mode is LoadMode.WRITE
    started = time.monotonic()
    report = RecoveryReport(directory, clean_shutdown, mode=mode)
    files = find_segment_files(directory, fmt, fs, names)
    report.removed_files = list(files.removed)
    if write:
        settle_leftovers(directory, files, fs)
    segments, missing = _open_segments(directory, files, config, fmt, write, fs)
    producers = ProducerStateManager(directory, expiration_ms=producer_id_expiration_ms, fs=fs)
    try:
        # The segment holding the recovery point: an unclean shutdown scans from there.
        bases = [s.base_offset for s in segments]
        first = max([i for i, b in enumerate(bases) if b <= recovery_point] or [0])
        for i, segment in enumerate(segments):
            # A segment the scan covers gets its indexes rebuilt by it: no separate check.
            if clean_shutdown or i < first:
                _check_indexes(segment, missing.get(segment.base_offset), report)
            elif not write and _index_problem(segment):
                # The scan below rebuilds these in memory; a writer rebuilds its files the same way.
                segment.use_memory_indexes()
        replay = None
        if not clean_shutdown and segments:
            replay = ScanReplay(producers, fmt, write=write)
            replay.begin(segments, segments[first].base_offset, log_start_offset=log_start_offset)
            segments = _recover_from(segments, first, report, _batch_hook(replay, epoch_cache if write else None,
                                                                          on_batch), write)
        if not segments and write:
            segments.append(LogSegment(directory, log_start_offset, index_interval_bytes=config.index_interval_bytes,
                                       max_index_size=config.segment_index_bytes, fmt=fmt, names=files.names,
                                       fs=fs))
        if write:
            for segment in segments[:-1]:
                segment.on_becoming_inactive()
            segments[-1].make_active()
        log_end_offset = segments[-1].read_next_offset() if segments else log_start_offset
        start = min(max(log_start_offset, segments[0].base_offset if segments else 0), log_end_offset)
        if replay is not None:
            replay.finish(segments, log_start_offset=start, log_end_offset=log_end_offset)
            load, replayed = replay.report, replay.aborted
            scanned_from = segments[first].base_offset
        else:
            load, replayed = reload_producer_state(producers, segments, log_start_offset=start,
                                                   log_end_offset=log_end_offset, clean_shutdown=clean_shutdown,
                                                   fmt=fmt, write=write, snapshots=_snapshot_offsets(files.names))
            scanned_from = None
        if write and (replay is not None or load.replayed_batches):
            # So the next open replays nothing (Kafka snapshots at the end of a rebuild).
            _snapshot_after_rebuild(producers, report)
        aborted = _aborted(segments, scanned_from, log_end_offset, replayed)
    except BaseException:
        for segment in segments:
            segment.close()
        raise
    report.producer_state = load
    report.segments = len(segments)
    report.log_end_offset = log_end_offset
    report.recovery_point = log_end_offset if clean_shutdown else min(recovery_point, log_end_offset)
    report.seconds = time.monotonic() - started
    log.info("%s", report.summary())
    return LoadedLog(segments, log_end_offset, start, report.recovery_point, report, producers, aborted)


class _SegmentOptions(TypedDict):
    """What `_open_segments` opens every `LogSegment` with."""

    index_interval_bytes: int
    max_index_size: int
    fmt: LogFormat
    writable: bool
    names: set[str]
    fs: FileSystem


def _open_segments(directory: str, files: SegmentFiles, config: LogConfig, fmt: LogFormat,
                   write: bool, fs: FileSystem) -> tuple[list[LogSegment], dict[int, list[str]]]:
    """The segments of `files` (base offset → state suffix), and the index files each lacked."""
    segments: list[LogSegment] = []
    lacking: dict[int, list[str]] = {}
    names = files.names
    opts: _SegmentOptions = dict(index_interval_bytes=config.index_interval_bytes,
                                 max_index_size=config.segment_index_bytes, fmt=fmt, writable=write, names=names,
                                 fs=fs)
    try:
        for base, suffix in files.segments.items():
            missing = [s for s in (INDEX_SUFFIX, TIME_INDEX_SUFFIX) if offset_name(base, s + suffix) not in names]
            try:
                segment = LogSegment(directory, base, suffix=suffix, **opts)
            except FileNotFoundError:
                # Beside a live writer, retention removes the oldest segments: one gone between listing and
                # opening is no longer part of the log. Anywhere else it is a hole.
                if write or segments:
                    raise SegmentDeletedError(f"{directory}: segment {base} vanished while being opened") from None
                continue
            segments.append(segment)
            if missing:
                lacking[base] = missing
    except BaseException:
        for segment in segments:
            segment.close()
        raise
    return segments, lacking


def _check_indexes(segment: LogSegment, missing: list[str] | None, report: RecoveryReport) -> None:
    """Rebuild the indexes of a segment no scan covers if they are missing or fail their sanity check."""
    if missing and not segment.size:
        # Nothing to index, nothing to rebuild: an empty segment's index files are made by its first
        # append (a new partition has none), or at once by a Kafka broker that opens it.
        missing = None
    reason = f"missing {' and '.join(missing)}" if missing else _index_problem(segment)
    if reason:
        report.rebuilt_indexes.append((segment.base_offset, reason))
        log.warning("%s: rebuilding the indexes of segment %d: %s", report.directory, segment.base_offset, reason)
        if not segment.indexes_writable:
            segment.use_memory_indexes()
        _recover_segment(segment, report, None)


def _snapshot_offsets(names: set[str]) -> list[int]:
    """The offsets of the producer snapshots among `names`, oldest first."""
    found = (parse_offset(name, SNAPSHOT_SUFFIX) for name in names if name.endswith(SNAPSHOT_SUFFIX))
    return sorted(offset for offset in found if offset is not None)


def _index_problem(segment: LogSegment) -> str | None:
    try:
        segment.offset_index.sanity_check(segment.size)
        segment.time_index.sanity_check()
        segment.txn_index.sanity_check()
    except (CorruptIndexError, LogStoreError) as exc:
        return str(exc)
    return None


def _batch_hook(replay: ScanReplay, epoch_cache: LeaderEpochCache | None,
                on_batch: Callable[[LogSegment, Entry], None] | None
                ) -> Callable[[LogSegment], Callable[[Entry], None]]:
    """The per-entry callback of the scan of one segment: producer state, leader epochs, `on_batch`."""
    latest = [-1]

    def for_segment(segment: LogSegment) -> Callable[[Entry], None]:
        entry_hook = replay.entry
        if epoch_cache is None and on_batch is None:
            return lambda entry: entry_hook(segment, entry)
        latest[0] = -1 if epoch_cache is None or epoch_cache.latest_epoch is None else epoch_cache.latest_epoch

        def hook(entry: Entry) -> None:
            entry_hook(segment, entry)
            if epoch_cache is not None and entry.magic >= 2:
                # Recovery refuses magic > 2: a v2 batch header, which mypy cannot tell from the byte.
                entry = cast("BatchHeader", entry)
                if entry.partition_leader_epoch > latest[0]:
                    latest[0] = entry.partition_leader_epoch
                    epoch_cache.assign(latest[0], entry.base_offset)
            if on_batch is not None:
                on_batch(segment, entry)
        return hook
    return for_segment


def _recover_segment(segment: LogSegment, report: RecoveryReport, on_batch: Callable[[Entry], None] | None) -> bool:
    """Rebuild one segment; True if bytes were cut off its end."""
    size = segment.size
    truncated, error = segment.recover(on_batch)
    report.recovered_segments.append(segment.base_offset)
    report.bytes_scanned += size
    if truncated:
        reason = error.reason if isinstance(error, CorruptRecordError) else "partial entry at the end of the file"
        report.truncations.append(Truncation(segment.base_offset, segment.size, truncated, reason))
        log.warning("%s: segment %d cut at byte %d (%d bytes): %s", report.directory,
                    segment.base_offset, segment.size, truncated, reason)
    return bool(truncated)


def _recover_from(segments: list[LogSegment], first: int, report: RecoveryReport,
                  batch_hook: Callable[[LogSegment], Callable[[Entry], None]], write: bool) -> list[LogSegment]:
    """Scan `segments[first:]`; the first cut ends the log. Returns the segments that remain."""
    for i in range(first, len(segments)):
        if _recover_segment(segments[i], report, batch_hook(segments[i])):
            report.deleted_segments.extend(s.base_offset for s in segments[i + 1:])
            if write:
                return cut_log(segments, i, segments[i].read_next_offset())
            for later in segments[i + 1:]:
                later.close()
            return segments[:i + 1]
    return segments


def _snapshot_after_rebuild(producers: ProducerStateManager, report: RecoveryReport) -> None:
    """Snapshot the rebuilt producer state; on a disk that refuses it (full), keep the state in memory only:
    the snapshot saves a replay, the log is the truth, and a start must not fail for it."""
    try:
        producers.take_snapshot()
    except OSError as exc:
        path = snapshot_path(producers.directory, producers.map_end_offset)
        try:
            producers.fs.unlink(path)
        except FileNotFoundError:
            pass
        report.snapshot_skipped = f"{exc.strerror or exc}"
        log.warning("%s: producer snapshot at %d not written (%s); the rebuilt state is kept in memory",
                    report.directory, producers.map_end_offset, exc.strerror or exc)


def _aborted(segments: list[LogSegment], scanned_from: int | None, log_end_offset: int,
             replayed: list[AbortedTxn]) -> list[AbortedTxn]:
    """The aborted transactions of the log: `.txnindex` entries of segments no scan rebuilt, and those
    the rebuild met (a marker's index entry may not be written yet beside a live writer)."""
    # By marker: a replay from above the log start sees a transaction begin later than the index says.
    found = {}
    for segment in segments:
        if scanned_from is not None and segment.base_offset >= scanned_from:
            continue
        for txn in segment.txn_index.entries:
            if txn.last_offset < log_end_offset:
                found[(txn.producer_id, txn.last_offset)] = txn
    for txn in replayed:
        found.setdefault((txn.producer_id, txn.last_offset), txn)
    return sorted(found.values(), key=lambda t: t.last_offset)
