"""Producer state rebuilt from a partition's snapshots and segments, for the loader and for truncation.

Kafka's `rebuildProducerState` and `truncateAndReload`: the newest readable
snapshot at or below a target offset, then a replay of the log from it up
to the target. The rebuild itself only reads; `write=True` adds the one
side effect Kafka has, removing the snapshot files it passes over (stray
ones above the target or off the segment bases, corrupt ones). With
`write=False` the same files are passed over in place, so a read-only load
picks the same snapshot and reaches the same state as a writing one.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from logstore.errors import CorruptSnapshotError
from logstore.formats import LogFormat
from logstore.index import AbortedTxn, TxnIndex
from logstore.native.producer_state import ProducerTable
from logstore.producer_state import ProducerStateManager
from logstore.segment import LogSegment, segments_between

if TYPE_CHECKING:
    from logstore.formats.kafka import BatchHeader, ControlRecord, Entry, ProducerBatch

log = logging.getLogger(__name__)

__all__ = ["AbortedSink", "SnapshotLoad", "reload_producer_state", "replay_range", "restore_to", "ScanReplay"]


@dataclass
class SnapshotLoad:
    """How producer state was rebuilt on open: the snapshot used (offset), the corrupt ones passed
    over (offset, reason), where the replay began and how many producer batches it applied."""

    snapshot_offset: int | None = None
    corrupt_snapshots: list[tuple[int, str]] = field(default_factory=list)
    replayed_from: int | None = None
    replayed_batches: int = 0
    """Batches with a producer id applied to the state after the snapshot."""
    rebuilt_txn_indexes: list[int] = field(default_factory=list)
    """Base offsets of the segments whose aborted transactions the recovery scan rebuilt."""


class AbortedSink:
    """Where a replay puts the transactions a marker aborts: always `found`, and the marker's
    segment's `.txnindex` when one is given (a writing recovery)."""

    def __init__(self, found: list[AbortedTxn], txn_index: TxnIndex | None = None):
        self.found = found
        self.txn_index = txn_index

    def append(self, txn: AbortedTxn) -> None:
        """One aborted transaction, in marker order."""
        self.found.append(txn)
        if self.txn_index is not None:
            self.txn_index.append(txn)


def _kept_snapshots(offsets: Sequence[int], segments: Sequence[LogSegment], log_start_offset: int,
                    upper: int | None) -> set[int]:
    # Kafka keeps snapshots at segment bases, and the newest one if it is above every base.
    bases = {s.base_offset for s in segments}
    top = max(bases, default=0)
    return {o for o in offsets if o >= log_start_offset and (upper is None or o <= upper) and (o in bases or o > top)}


def pass_over_stray_snapshots(producers: ProducerStateManager, segments: Sequence[LogSegment], *,
                              log_start_offset: int, upper: int | None, write: bool,
                              offsets: Sequence[int] | None = None) -> list[int]:
    """The snapshot offsets a load may use (below `upper`, at a segment base or above every base);
    with `write`, the others are deleted. `offsets`: the snapshots a listing just found (None: list)."""
    offsets = producers.snapshot_offsets() if offsets is None else offsets
    kept = _kept_snapshots(offsets, segments, log_start_offset, upper)
    if write and len(kept) < len(offsets):
        producers.delete_snapshots(kept.__contains__)
    return sorted(kept)


def restore_to(producers: ProducerStateManager, candidates: Sequence[int], offset: int, log_start_offset: int,
               report: SnapshotLoad, *, write: bool, now_ms: int) -> int:
    """Load the newest readable snapshot of `candidates` at or below `offset` (recording, and with
    `write` deleting, corrupt ones), or start empty at `log_start_offset`; the offset the state
    now reflects."""
    for candidate in reversed([o for o in candidates if o <= offset]):
        try:
            table = producers.read_snapshot(candidate, now_ms)
        except (CorruptSnapshotError, OSError) as exc:
            # A read-only loader beside a writer may see a snapshot mid-write: it stays.
            log.warning("%s: snapshot %d is corrupt (%s); using an older one", producers.directory, candidate, exc)
            report.corrupt_snapshots.append((candidate, str(exc)))
            if write:
                # mypy cannot type a lambda with more parameters than `keep` takes (`bad` binds the candidate).
                producers.delete_snapshots(lambda o, bad=candidate: o != bad)  # type: ignore[misc]
            continue
        producers.restore(table, candidate, snapshot=candidate)
        report.snapshot_offset = candidate
        return candidate
    producers.restore(ProducerTable(), log_start_offset)
    return log_start_offset


def replay_range(producers: ProducerStateManager, segments: Sequence[LogSegment], start: int, end: int, fmt: LogFormat,
                 aborted: list[AbortedTxn], report: SnapshotLoad) -> None:
    """Apply the batches of [start, end) from `segments`; the transactions they abort go to `aborted`
    (the segments' `.txnindex` files already hold them and are never written)."""
    for segment, _ in segments_between(segments, start, end):
        found = segment.translate_offset(start) if start > segment.base_offset else None
        position = found.position if found is not None else 0

        def read_marker(batch: ProducerBatch, segment: LogSegment = segment) -> ControlRecord:
            return fmt.read_marker(segment.pread(batch.size, batch.position))

        for batch in segment.iter_bounds(position, peek=fmt.peek_producer_batch):
            if batch.base_offset >= end:
                return
            if batch.last_offset >= start:
                producers.replay(batch, read_marker, aborted)
                report.replayed_batches += batch.producer_id >= 0


def reload_producer_state(producers: ProducerStateManager, segments: Sequence[LogSegment], *,
                          log_start_offset: int, log_end_offset: int, clean_shutdown: bool, fmt: LogFormat,
                          write: bool = True, now_ms: int | None = None,
                          snapshots: Sequence[int] | None = None) -> tuple[SnapshotLoad, list[AbortedTxn]]:
    """The state of a log no scan rebuilt (a clean open, a truncation): the newest readable snapshot at
    or below the log end, then the log after it (Kafka's loader and truncateAndReload). Returns how,
    and the aborted transactions the replay met. `snapshots`: the snapshot offsets, if just listed."""
    report = SnapshotLoad()
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    candidates = pass_over_stray_snapshots(producers, segments, log_start_offset=log_start_offset,
                                           upper=log_end_offset, write=write, offsets=snapshots)
    start = restore_to(producers, candidates, log_end_offset, log_start_offset, report, write=write, now_ms=now_ms)
    aborted: list[AbortedTxn] = []
    if not candidates and clean_shutdown:
        # Kafka's rule: a cleanly closed log with no snapshot at all predates idempotence.
        producers.map_end_offset = log_end_offset
        return report, aborted
    if start < log_end_offset:
        report.replayed_from = start
        replay_range(producers, segments, start, log_end_offset, fmt, aborted, report)
    producers.map_end_offset = log_end_offset
    return report, aborted


class ScanReplay:
    """Producer state riding on recovery's scan of the unflushed tail (Kafka's recoverSegment).

    `begin` brings the state to the first scanned segment's base and, with
    `write`, empties the `.txnindex` of every scanned segment; `entry` then
    applies each batch the scan finds valid, its aborted transactions going
    to `aborted` (and, with `write`, back into the marker's `.txnindex`).
    Single-threaded: the loader calls it in log order.
    """

    def __init__(self, producers: ProducerStateManager, fmt: LogFormat, *, write: bool):
        self.producers = producers
        self.format = fmt
        self.write = write
        self.report = SnapshotLoad()
        self.aborted: list[AbortedTxn] = []

    def begin(self, segments: Sequence[LogSegment], base_offset: int, *, log_start_offset: int,
              now_ms: int | None = None) -> None:
        """Before the scan from `base_offset`: Kafka's truncateAndReload to that segment."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        producers, report = self.producers, self.report
        # What lies above the base is rewritten by the scan: snapshots there are stale.
        candidates = pass_over_stray_snapshots(producers, segments, log_start_offset=log_start_offset,
                                               upper=base_offset, write=self.write)
        start = restore_to(producers, candidates, base_offset, log_start_offset, report, write=self.write,
                           now_ms=now_ms)
        report.replayed_from = start
        if start < base_offset:
            replay_range(producers, segments, start, base_offset, self.format, self.aborted, report)
        for segment in segments:
            if segment.base_offset >= base_offset:
                if self.write:
                    segment.txn_index.reset()
                report.rebuilt_txn_indexes.append(segment.base_offset)
        producers.map_end_offset = max(producers.map_end_offset, base_offset)

    def entry(self, segment: LogSegment, entry: Entry) -> None:
        """One entry the scan of `segment` found valid."""
        # The hot loop of a reopen after a crash: one call per batch of the unflushed tail.
        producers = self.producers
        if entry.magic >= 2:
            # Recovery refuses magic > 2: a v2 batch header, which mypy cannot tell from the byte.
            entry = cast("BatchHeader", entry)
            if entry.producer_id >= 0:
                if entry.is_control:
                    fmt = self.format
                    sink = AbortedSink(self.aborted, segment.txn_index if self.write else None)
                    producers.replay(
                        entry, lambda b: fmt.read_marker(segment.pread(b.size_in_bytes, b.position)),
                        sink)
                else:
                    producers.replay(entry, None)
                self.report.replayed_batches += 1
        producers.map_end_offset = entry.last_offset + 1

    def finish(self, segments: Sequence[LogSegment], *, log_start_offset: int, log_end_offset: int) -> None:
        """After the scan: snapshots above the recovered log end are stale (deleted with `write`)."""
        pass_over_stray_snapshots(self.producers, segments, log_start_offset=log_start_offset,
                                  upper=log_end_offset, write=self.write)
        self.producers.map_end_offset = log_end_offset
