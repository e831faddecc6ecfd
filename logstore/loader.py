"""Opening a partition directory, and recovering it after an unclean shutdown.

Kafka's LogLoader, in order (on-disk-format.md §5.1, §5.6): remove files a
crash left half-done, open every segment, rebuild any index that is missing
or fails its sanity check, and, unless the last shutdown was clean, scan
every segment from the one holding the recovery point, cutting the log at
the first broken or partial entry and dropping every later segment. The
`RecoveryReport` says what was found and done, with byte positions.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from logstore.config import LogConfig
from logstore.epoch_cache import LeaderEpochCache
from logstore.errors import CorruptRecordError, LogStoreError
from logstore.formats import DEFAULT_FORMAT
from logstore.index import CorruptIndexError
from logstore.segment import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
)

log = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


@dataclass(frozen=True)
class Truncation:
    """Where recovery cut a segment, how many bytes went, and why."""

    base_offset: int
    position: int
    bytes_removed: int
    reason: str


@dataclass
class RecoveryReport:
    """What opening one partition directory found and did."""

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
    producer_state: Any = None
    """How the producer state was rebuilt (`producer_state.SnapshotLoad`), set by Log.open."""

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
        return f"{self.directory}: " + ", ".join(parts) + f" in {self.seconds * 1000:.1f} ms"


@dataclass
class LoadedLog:
    """The segments of a directory, ready for `Log`, and the offsets they imply."""

    segments: list[LogSegment]
    log_end_offset: int
    log_start_offset: int
    recovery_point: int
    report: RecoveryReport


def _base_offset(name: str) -> int | None:
    digits = name.split(".", 1)[0]
    return int(digits) if digits.isdigit() and len(digits) == 20 else None


def _clean_up_files(directory: str, fmt, report: RecoveryReport) -> None:
    """Delete what a crash left (`.deleted`, `.cleaned`, orphan indexes); finish `.swap` renames."""
    names = sorted(os.listdir(directory))
    for name in names:
        if name.endswith(DELETED_SUFFIX) or name.endswith(CLEANED_SUFFIX):
            os.unlink(os.path.join(directory, name))
            report.removed_files.append(name)
    names = sorted(os.listdir(directory))
    for name in names:
        if name.endswith(LOG_SUFFIX + SWAP_SUFFIX) and _base_offset(name) is not None:
            _complete_swap(directory, _base_offset(name), fmt, report)
    logs = {_base_offset(n) for n in os.listdir(directory) if n.endswith(LOG_SUFFIX)}
    for name in sorted(os.listdir(directory)):
        base = _base_offset(name)
        if base is None or base in logs:
            continue
        if any(name.endswith(s) or name.endswith(s + SWAP_SUFFIX) for s in INDEX_SUFFIXES):
            os.unlink(os.path.join(directory, name))
            report.removed_files.append(name)


def _complete_swap(directory: str, base: int, fmt, report: RecoveryReport) -> None:
    # A swap segment is whole cleaner output: it replaces every segment inside its range.
    swap = LogSegment(directory, base, fmt=fmt, writable=False, suffix=SWAP_SUFFIX)
    try:
        next_offset = max((b.last_offset + 1 for b in swap.iter_bounds()), default=base)
    finally:
        swap.close()
    # The cleaner ends every group's output at or past its last segment's base, so the swap's range reaches the
    # base of every segment it replaces. Only segment files go: a producer snapshot in the range stays.
    segment_suffixes = (LOG_SUFFIX,) + INDEX_SUFFIXES
    for name in sorted(os.listdir(directory)):
        other = _base_offset(name)
        if (other is not None and base <= other < max(next_offset, base + 1)
                and name.endswith(segment_suffixes)):
            os.unlink(os.path.join(directory, name))
            report.removed_files.append(name)
    for name in sorted(os.listdir(directory)):
        if _base_offset(name) == base and name.endswith(SWAP_SUFFIX):
            os.rename(os.path.join(directory, name), os.path.join(directory, name[:-len(SWAP_SUFFIX)]))


def _recover_segment(segment: LogSegment, report: RecoveryReport, on_batch) -> bool:
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


def load_log(directory: str, config: LogConfig | None = None, *, clean_shutdown: bool = False,
             recovery_point: int = 0, log_start_offset: int = 0, fmt=DEFAULT_FORMAT,
             on_batch: Callable | None = None, epoch_cache: LeaderEpochCache | None = None,
             before_recovery: Callable | None = None) -> LoadedLog:
    """Open the segments of a partition directory, recovering them as Kafka would.

    `on_batch(segment, entry)` sees every entry that recovery scans, in order,
    and `before_recovery(segments, base_offset)` is called once before the
    scan starts at `base_offset` (producer state replays through these).
    Epochs of scanned batches newer than `epoch_cache` knows are assigned to
    it, so a crash between an append and the checkpoint write loses no epoch.
    """
    config = config or LogConfig()
    started = time.monotonic()
    report = RecoveryReport(directory, clean_shutdown)
    _clean_up_files(directory, fmt, report)
    bases = sorted(b for b in (_base_offset(n) for n in os.listdir(directory)
                               if n.endswith(LOG_SUFFIX)) if b is not None)
    segments: list[LogSegment] = []
    opts = dict(index_interval_bytes=config.index_interval_bytes,
                max_index_size=config.segment_index_bytes, fmt=fmt)

    latest = [-1]

    def batch_hook(segment):
        if epoch_cache is None:
            return None if on_batch is None else (lambda entry: on_batch(segment, entry))
        latest[0] = -1 if epoch_cache.latest_epoch is None else epoch_cache.latest_epoch

        def hook(entry):
            if entry.magic >= 2 and entry.partition_leader_epoch > latest[0]:
                latest[0] = entry.partition_leader_epoch
                epoch_cache.assign(latest[0], entry.base_offset)
            if on_batch is not None:
                on_batch(segment, entry)
        return hook

    # After an unclean shutdown these get scanned anyway: no separate index rebuild.
    rescanned_from = None if clean_shutdown else max([b for b in bases if b <= recovery_point] or [-1])
    try:
        for base in bases:
            if rescanned_from is not None and base >= rescanned_from:
                segments.append(LogSegment(directory, base, **opts))
                continue
            missing = [s for s in (INDEX_SUFFIX, TIME_INDEX_SUFFIX)
                       if not os.path.exists(os.path.join(directory, f"{base:020d}{s}"))]
            segment = LogSegment(directory, base, **opts)
            segments.append(segment)
            reason = f"missing {' and '.join(missing)}" if missing else _index_problem(segment)
            if reason:
                report.rebuilt_indexes.append((base, reason))
                log.warning("%s: rebuilding the indexes of segment %d: %s", directory, base, reason)
                _recover_segment(segment, report, None)
        if not clean_shutdown:
            _recover_after(segments, recovery_point, report, batch_hook, before_recovery)
        if not segments:
            segments.append(LogSegment(directory, log_start_offset, **opts))
        for segment in segments[:-1]:
            segment.on_becoming_inactive()
        segments[-1].make_active()
    except BaseException:
        for segment in segments:
            segment.close()
        raise
    log_end_offset = segments[-1].read_next_offset()
    report.segments = len(segments)
    report.log_end_offset = log_end_offset
    report.recovery_point = log_end_offset if clean_shutdown else min(recovery_point, log_end_offset)
    report.seconds = time.monotonic() - started
    log.info("%s", report.summary())
    start = max(log_start_offset, segments[0].base_offset)
    return LoadedLog(segments, log_end_offset, min(start, log_end_offset), report.recovery_point, report)


def _index_problem(segment: LogSegment) -> str | None:
    try:
        segment.offset_index.sanity_check(segment.size)
        segment.time_index.sanity_check()
        segment.txn_index.sanity_check()
    except (CorruptIndexError, LogStoreError) as exc:
        return str(exc)
    return None


def _recover_after(segments: list[LogSegment], recovery_point: int, report: RecoveryReport, batch_hook,
                   before_recovery) -> None:
    """Scan the segment holding the recovery point and every later one; the first cut ends the log."""
    first = 0
    for i, segment in enumerate(segments):
        if segment.base_offset <= recovery_point:
            first = i
    if before_recovery is not None and first < len(segments):
        before_recovery(segments, segments[first].base_offset)
    for i in range(first, len(segments)):
        if _recover_segment(segments[i], report, batch_hook(segments[i])):
            for later in segments[i + 1:]:
                report.deleted_segments.append(later.base_offset)
                later.delete()
            del segments[i + 1:]
            return
