"""A plain-Python model of the producer-state table, for the tests.

Written from on-disk-format.md §7 and §8 and the shape of Kafka's own classes,
with none of the native table's tricks: a dict of entries, each with a
deque(maxlen=5) of batch metadata `(last_seq, last_offset, offset_delta,
timestamp)`, and staging done the way Kafka's ProducerAppendInfo does it:
an "updated entry" per producer that starts as a copy of the committed one
without its batches, merged into the committed entry on commit
(ProducerStateEntry.update). An append without begin() is a stage of one.

Where the spec is loose the model follows Kafka (ProducerAppendInfo.checkSequence):
with the epoch matching and no cached batch, only sequence 0 is in order,
unless the committed epoch is unknown (-1), which accepts any sequence.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

INT32_MAX = 2**31 - 1
RETAIN = 5
CLIENT, COORDINATOR, REPLICATION = 0, 1, 2
OUT_OF_ORDER, INVALID_EPOCH, INVALID_TXN_STATE, COORDINATOR_FENCED = 45, 47, 48, 52


def int32(value: int) -> int:
    """Java int narrowing."""
    value &= 0xFFFFFFFF
    return value - 2**32 if value > INT32_MAX else value


def decrement_sequence(seq: int, by: int) -> int:
    """DefaultRecordBatch.decrementSequence: the first sequence of a batch."""
    return int32(INT32_MAX - (by - seq) + 1) if seq < by else int32(seq - by)


def increment_sequence(seq: int, by: int) -> int:
    """DefaultRecordBatch.incrementSequence: the last sequence of a batch."""
    return by - (INT32_MAX - seq) - 1 if seq > INT32_MAX - by else seq + by


@dataclass
class ModelEntry:
    """One producer (ProducerStateEntry); txn_first_offset None when no transaction is open."""

    producer_id: int
    epoch: int = -1
    coordinator_epoch: int = -1
    txn_first_offset: int | None = None
    last_timestamp: int = -1
    batches: deque = field(default_factory=lambda: deque(maxlen=RETAIN))

    def without_batches(self) -> "ModelEntry":
        return ModelEntry(self.producer_id, self.epoch, self.coordinator_epoch, self.txn_first_offset,
                          self.last_timestamp)

    def last_seq(self) -> int:
        return self.batches[-1][0] if self.batches else -1

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch = epoch
            self.batches.clear()

    def view(self) -> tuple:
        """What ProducerTable.get returns, as a plain tuple."""
        return (self.producer_id, self.epoch, self.coordinator_epoch,
                -1 if self.txn_first_offset is None else self.txn_first_offset, self.last_timestamp,
                [(decrement_sequence(s, d), s, o - d, o, t) for s, o, d, t in self.batches])


class ProducerModel:
    """Producer id → ModelEntry, with the native table's operations."""

    def __init__(self):
        self.producers: dict[int, ModelEntry] = {}
        self.stage: dict[int, ModelEntry] | None = None

    # -- staging (ProducerAppendInfo) ---------------------------------------------------

    def begin(self) -> None:
        assert self.stage is None
        self.stage = {}

    def commit(self) -> None:
        for pid, updated in self.stage.items():
            current = self.producers.get(pid)
            if current is None:
                self.producers[pid] = updated
            else:
                current.set_epoch(updated.epoch)
                current.batches.extend(updated.batches)
                current.coordinator_epoch = updated.coordinator_epoch
                current.txn_first_offset = updated.txn_first_offset
                current.last_timestamp = updated.last_timestamp
        self.stage = None

    def rollback(self) -> None:
        self.stage = None

    def _updated(self, pid: int, create: bool) -> ModelEntry | None:
        stage = self.stage if self.stage is not None else {}
        updated = stage.get(pid)
        if updated is None:
            current = self.producers.get(pid)
            updated = ModelEntry(pid) if current is None else current.without_batches()
            if create:
                stage[pid] = updated
        return updated

    def _apply(self, pid: int, change):
        direct = self.stage is None
        if direct:
            self.begin()
        result = change(self._updated(pid, create=True))
        if direct:
            self.commit()
        return result

    # -- the append path ----------------------------------------------------------------

    def find_duplicate(self, pid, epoch, first_seq, last_seq):
        current = self.producers.get(pid)
        if current is None or current.epoch != epoch:
            return None
        for seq, offset, delta, timestamp in current.batches:
            if seq == last_seq and decrement_sequence(seq, delta) == first_seq:
                return (offset - delta, offset, timestamp)
        return None

    def check_batch(self, pid, epoch, first_seq, last_seq, transactional, origin) -> int:
        if origin == REPLICATION:
            return 0
        current = self.producers.get(pid)
        current_epoch = -1 if current is None else current.epoch
        updated = self._updated(pid, create=False)
        if epoch < updated.epoch:
            return INVALID_EPOCH
        if origin == CLIENT:
            if epoch != updated.epoch:
                if first_seq != 0 and updated.epoch != -1:
                    return OUT_OF_ORDER
            else:
                if updated.batches:
                    last = updated.last_seq()
                elif epoch == current_epoch:
                    last = current.last_seq()
                else:
                    last = -1
                if not (current_epoch == -1 or first_seq == last + 1 or (first_seq == 0 and last == INT32_MAX)):
                    return OUT_OF_ORDER
        if updated.txn_first_offset is not None and not transactional:
            return INVALID_TXN_STATE
        return 0

    def update_batch(self, pid, epoch, first_seq, last_seq, first_offset, last_offset, max_timestamp,
                     transactional) -> int:
        def change(entry: ModelEntry) -> int:
            entry.set_epoch(epoch)
            entry.batches.append((last_seq, last_offset, int32(last_offset - first_offset), max_timestamp))
            entry.last_timestamp = max_timestamp
            if transactional and entry.txn_first_offset is None:
                entry.txn_first_offset = first_offset
                return first_offset
            return -1
        return self._apply(pid, change)

    def check_marker(self, pid, epoch, coordinator_epoch, origin) -> int:
        if origin == REPLICATION:
            return 0
        updated = self._updated(pid, create=False)
        if epoch < updated.epoch:
            return INVALID_EPOCH
        if updated.coordinator_epoch > coordinator_epoch:
            return COORDINATOR_FENCED
        return 0

    def update_marker(self, pid, epoch, coordinator_epoch, timestamp) -> int:
        def change(entry: ModelEntry) -> int:
            completed = -1 if entry.txn_first_offset is None else entry.txn_first_offset
            entry.set_epoch(epoch)
            entry.coordinator_epoch = coordinator_epoch
            entry.txn_first_offset = None
            entry.last_timestamp = timestamp
            return completed
        return self._apply(pid, change)

    # -- the map ------------------------------------------------------------------------

    def view(self, pid: int) -> tuple | None:
        entry = self.producers.get(pid)
        return None if entry is None else entry.view()

    def remove(self, pid: int) -> bool:
        return self.producers.pop(pid, None) is not None

    def expire(self, now_ms: int, expiration_ms: int) -> list[int]:
        gone = [pid for pid, e in self.producers.items()
                if e.txn_first_offset is None and now_ms - e.last_timestamp >= expiration_ms]
        for pid in gone:
            del self.producers[pid]
        return gone

    def open_transactions(self) -> list[tuple[int, int]]:
        return sorted((e.txn_first_offset, pid) for pid, e in self.producers.items()
                      if e.txn_first_offset is not None)

    def snapshot_roundtrip(self, now_ms: int = -1, expiration_ms: int = -1) -> None:
        """What a `.snapshot` keeps (§7): the last batch, stamped with the producer's last timestamp."""
        kept = {}
        for pid, e in self.producers.items():
            if now_ms >= 0 and e.txn_first_offset is None and now_ms - e.last_timestamp >= expiration_ms:
                continue
            restored = e.without_batches()
            if e.batches and e.batches[-1][1] >= 0:
                seq, offset, delta, _ = e.batches[-1]
                restored.batches.append((seq, offset, delta, e.last_timestamp))
            kept[pid] = restored
        self.producers = kept
