"""Producer state of one partition: idempotence, fencing, open transactions, snapshots.

The per-producer entries live in the native `ProducerTable` (a fixed C
struct each). This module is the partition's bookkeeping around it, as
Kafka's ProducerStateManager: an append is checked against the table in a
stage and committed only after its bytes are written; markers complete
transactions and aborted ones go to the `.txnindex` of the marker's segment;
the first offset of the oldest open transaction bounds the last stable
offset; `.snapshot` files (Kafka's format) let a restart replay only the log
after the newest one. Rebuilding the state from the segments is the loader's
(`producer_rebuild.py`): this module never reads a segment.
"""
from __future__ import annotations

import heapq
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeVar

from logstore.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from logstore.filenames import SNAPSHOT_SUFFIX, offset_path, parse_offset
from logstore.filesystem import OS, FileSystem
from logstore.index import AbortedTxn, TxnIndex
from logstore.native import producer_state as native
from logstore.native.producer_state import ProducerEntry, ProducerTable

if TYPE_CHECKING:
    from logstore.formats.kafka import BatchHeader, ControlRecord, ProducerBatch

log = logging.getLogger(__name__)

DEFAULT_EXPIRATION_MS = 86_400_000

ORIGIN_CLIENT = native.ORIGIN_CLIENT
ORIGIN_COORDINATOR = native.ORIGIN_COORDINATOR
ORIGIN_REPLICATION = native.ORIGIN_REPLICATION

_ERRORS = {
    native.OUT_OF_ORDER_SEQUENCE_NUMBER: OutOfOrderSequenceError,
    native.INVALID_PRODUCER_EPOCH: InvalidProducerEpochError,
    native.INVALID_TXN_STATE: InvalidTxnStateError,
    native.TRANSACTION_COORDINATOR_FENCED: TransactionCoordinatorFencedError,
}

__all__ = ["ProducerStateManager", "ProducerEntry", "CompletedTxn", "PreparedAppend", "snapshot_path",
           "ORIGIN_CLIENT", "ORIGIN_COORDINATOR", "ORIGIN_REPLICATION"]


def snapshot_path(directory: str, offset: int) -> str:
    """`<20-digit offset>.snapshot` in a partition directory."""
    return offset_path(directory, offset, SNAPSHOT_SUFFIX)


@dataclass(frozen=True)
class CompletedTxn:
    """A transaction a marker ended: its producer, first offset, the marker's offset, and how."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


@dataclass
class PreparedAppend:
    """What an append will change once written; `duplicate` instead says it was written before."""

    started: list[tuple[int, int]] = field(default_factory=list)
    completed: list[CompletedTxn] = field(default_factory=list)
    duplicate: tuple[int, int, int] | None = None
    """(first offset, last offset, timestamp) of the cached batch a retry matched."""


class AbortedTxnSink(Protocol):
    """Where a replay puts the transactions a marker aborts: a `TxnIndex`, a list, `AbortedSink`."""

    def append(self, txn: AbortedTxn, /) -> None: ...


# What a replay reads producer fields from: a scanned header, or the head `peek_producer_batch` read.
_Batch = TypeVar("_Batch", "BatchHeader", "ProducerBatch")


def _raise_for(code: int, pid: int, epoch: int, detail: str) -> None:
    error = _ERRORS.get(code)
    if error is not None:
        raise error(f"producer {pid} epoch {epoch}: {detail}")
    raise AssertionError(f"unknown producer-state result {code}")


class ProducerStateManager:
    """One partition's producer table, open transactions and `.snapshot` files."""

    def __init__(self, directory: str, *, expiration_ms: int = DEFAULT_EXPIRATION_MS, fs: FileSystem = OS):
        self.directory = directory
        self.fs = fs
        self.expiration_ms = expiration_ms
        self.table = ProducerTable()
        self.map_end_offset = 0
        self._ongoing: dict[int, int] = {}
        # (first offset, producer id) of open transactions; entries that no longer
        # match `_ongoing` are dropped when they reach the top. Readers ask for the
        # last stable offset from any thread, so the heap has its own lock.
        self._ongoing_heap: list[tuple[int, int]] = []
        self._heap_lock = threading.RLock()
        self._current_snapshot: int | None = None  # the snapshot file this state came from or went to

    # -- queries ---------------------------------------------------------------------------

    def entry(self, producer_id: int) -> ProducerEntry | None:
        """The producer's entry, or None if the partition knows no such producer."""
        return self.table.get(producer_id)

    def entries(self) -> dict[int, ProducerEntry]:
        """Every producer's entry by id."""
        return {e.producer_id: e for e in self.table.items()}

    @property
    def ongoing_transactions(self) -> dict[int, int]:
        """Producer id → first offset of its open transaction."""
        return dict(self._ongoing)

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction (markers are replicated at once on one node)."""
        with self._heap_lock:
            heap = self._ongoing_heap
            while heap and self._ongoing.get(heap[0][1]) != heap[0][0]:
                heapq.heappop(heap)
            return heap[0][0] if heap else None

    def last_stable_offset(self, log_start_offset: int, high_watermark: int) -> int:
        """Where read_committed reads stop: the first offset of the oldest open transaction (never below
        the log start), else the high watermark."""
        unstable = self.first_unstable_offset()
        if unstable is None or unstable >= high_watermark:
            return high_watermark
        return max(unstable, log_start_offset)

    # -- appends ---------------------------------------------------------------------------

    def prepare(self, batches: Iterable[BatchHeader], first_offset: int, origin: int,
                read_marker: Callable[[BatchHeader], ControlRecord]) -> PreparedAppend | None:
        """Check an append's batches in order against the table, staged; None if no batch has a producer.

        `batches` are header objects (producer_id, producer_epoch,
        base_sequence, last_sequence, last_offset_delta, max_timestamp,
        is_transactional, is_control); `read_marker(batch)` decodes a control
        batch's record. Raises the Kafka error of the first batch refused;
        nothing changes until `commit`.
        """
        batches = list(batches)
        if all(b.producer_id < 0 for b in batches):
            return None
        table = self.table
        prepared = PreparedAppend()
        table.begin()
        try:
            offset = first_offset
            for batch in batches:
                last = offset + batch.last_offset_delta
                pid = batch.producer_id
                if pid >= 0:
                    if batch.is_control:
                        self._stage_marker(batch, read_marker(batch), last, origin, prepared)
                    else:
                        epoch, first_seq, last_seq = batch.producer_epoch, batch.base_sequence, batch.last_sequence
                        code = table.append_batch(pid, epoch, first_seq, last_seq, offset, last, batch.max_timestamp,
                                                  batch.is_transactional, origin)
                        if code == native.DUPLICATE:
                            # Kafka answers the whole append with the first write's offsets.
                            table.rollback()
                            return PreparedAppend(duplicate=table.duplicate)
                        if code:
                            _raise_for(code, pid, epoch, f"batch with sequences {first_seq}..{last_seq} refused")
                        if table.opened_txn >= 0:
                            prepared.started.append((pid, table.opened_txn))
                offset = last + 1
        except BaseException:
            table.rollback()
            raise
        return prepared

    def _stage_marker(self, batch: BatchHeader, marker: ControlRecord, offset: int, origin: int,
                      prepared: PreparedAppend) -> None:
        if marker.coordinator_epoch is None:
            return  # a control record that is not a transaction marker
        pid, epoch = batch.producer_id, batch.producer_epoch
        code = self.table.check_marker(pid, epoch, marker.coordinator_epoch, origin)
        if code:
            _raise_for(code, pid, epoch, f"marker from coordinator epoch {marker.coordinator_epoch} refused")
        first = self.table.update_marker(pid, epoch, marker.coordinator_epoch, batch.max_timestamp)
        if first >= 0:
            prepared.completed.append(CompletedTxn(pid, first, offset, marker.type_name == "ABORT"))

    def commit(self, prepared: PreparedAppend | None, txn_index: TxnIndex, end_offset: int) -> None:
        """The append's bytes are written: apply what `prepare` staged."""
        if prepared is not None:
            self.table.commit()
            self._apply_transactions(prepared.started, prepared.completed, txn_index)
        self.map_end_offset = end_offset

    def rollback(self, prepared: PreparedAppend | None) -> None:
        """The append failed: forget what `prepare` staged."""
        if prepared is not None and self.table.staging:
            self.table.rollback()

    def _apply_transactions(self, started: Iterable[tuple[int, int]], completed: Iterable[CompletedTxn],
                            txn_index: AbortedTxnSink | None) -> None:
        with self._heap_lock:
            for pid, first in started:
                self._ongoing[pid] = first
                heapq.heappush(self._ongoing_heap, (first, pid))
            for txn in completed:
                self._ongoing.pop(txn.producer_id, None)
                if txn.aborted and txn_index is not None:
                    # Kafka's rule: the first offset of the oldest *other* open transaction,
                    # else just past the marker.
                    other = self.first_unstable_offset()
                    lso = other if other is not None else txn.last_offset + 1
                    txn_index.append(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, lso))

    # -- replay ----------------------------------------------------------------------------

    def replay(self, batch: _Batch, read_marker: Callable[[_Batch], ControlRecord] | None,
               txn_index: AbortedTxnSink | None = None) -> None:
        """Apply one batch already in the log (recovery): no checks; the transactions its marker aborts
        are appended to `txn_index` (a `TxnIndex`, or any sink with `append`) when it is given."""
        pid = batch.producer_id
        if pid >= 0:
            if batch.is_control:
                marker = read_marker(batch)  # type: ignore[misc]  # None is passed only for data batches
                if marker.coordinator_epoch is not None:
                    first = self.table.update_marker(pid, batch.producer_epoch, marker.coordinator_epoch,
                                                     batch.max_timestamp)
                    if first >= 0:
                        self._apply_transactions(
                            (), [CompletedTxn(pid, first, batch.last_offset, marker.type_name == "ABORT")],
                            txn_index)
            else:
                opened = self.table.update_batch(pid, batch.producer_epoch, batch.base_sequence,
                                                 batch.last_sequence, batch.base_offset, batch.last_offset,
                                                 batch.max_timestamp, batch.is_transactional)
                if opened >= 0:
                    self._apply_transactions([(pid, opened)], (), None)
        self.map_end_offset = batch.last_offset + 1

    # -- snapshots -------------------------------------------------------------------------

    def snapshot_offsets(self) -> list[int]:
        """Offsets of the `.snapshot` files in the directory, oldest first."""
        found = (parse_offset(name, SNAPSHOT_SUFFIX) for name in self.fs.listdir(self.directory))
        return sorted(offset for offset in found if offset is not None)

    def take_snapshot(self, *, sync: bool = True) -> str | None:
        """Write `<map end offset>.snapshot` unless this state was just loaded from or written to it;
        returns its path."""
        path = snapshot_path(self.directory, self.map_end_offset)
        # A file of that name from before (a kill inside its write, a truncated-away
        # past) is not this state: only our own is kept.
        if self.map_end_offset == self._current_snapshot and self.fs.exists(path):
            return None
        data = self.table.to_snapshot()
        # Kafka writes in place rather than rename: a torn file fails its CRC on load
        # and the previous snapshot is used.
        fs = self.fs
        fd = fs.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[fs.write(fd, view):]
            if sync:
                fs.fsync(fd)
        finally:
            fs.close(fd)
        self._current_snapshot = self.map_end_offset
        return path

    def delete_snapshots(self, keep: Callable[[int], bool]) -> list[int]:
        """Remove every snapshot whose offset fails `keep(offset)`; returns their offsets."""
        removed = []
        for offset in self.snapshot_offsets():
            if not keep(offset):
                try:
                    self.fs.unlink(snapshot_path(self.directory, offset))
                except FileNotFoundError:
                    pass
                removed.append(offset)
        return removed

    def read_snapshot(self, offset: int, now_ms: int) -> ProducerTable:
        """The table the `.snapshot` at `offset` holds (producers idle past expiration left out);
        CorruptSnapshotError or OSError when it cannot be read. Changes nothing."""
        data = self.fs.read_file(snapshot_path(self.directory, offset))
        return ProducerTable.from_snapshot(data, now_ms, self.expiration_ms)

    def restore(self, table: ProducerTable, map_end_offset: int, *, snapshot: int | None = None) -> None:
        """Replace the whole state by `table`, which reflects the log below `map_end_offset`
        (read from the snapshot at `snapshot`, if any)."""
        self.table = table
        self._current_snapshot = snapshot
        self.map_end_offset = map_end_offset
        ongoing = {pid: first for first, pid in table.open_transactions()}
        heap = [(first, pid) for pid, first in ongoing.items()]
        heapq.heapify(heap)
        with self._heap_lock:
            self._ongoing, self._ongoing_heap = ongoing, heap

    def reset(self, offset: int) -> None:
        """Forget every producer and snapshot: the log now starts empty at `offset`."""
        self.delete_snapshots(lambda o: False)
        self.restore(ProducerTable(), offset)

    def expire(self, now_ms: int | None = None) -> list[int]:
        """Drop producers idle for producer.id.expiration.ms that have no open transaction."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        return self.table.expire(now_ms, self.expiration_ms)

    def memory_bytes(self) -> int:
        """Bytes the native table holds."""
        return self.table.memory_bytes()
