"""The bench peer: Kafka's producer-state map ported straight to Python (dict + deque).

What the issue compares against: a `dict` of producer id → entry object, each
entry holding the epoch, coordinator epoch, open-transaction first offset,
last timestamp and a `collections.deque(maxlen=5)` of batch metadata tuples
`(last_seq, last_offset, offset_delta, timestamp)`, the way Kafka's
ProducerStateEntry holds an ArrayDeque of BatchMetadata. The operations are
the same as logstore.native.producer_state.ProducerTable's, with the same
results (tests/producer/test_producer_table.py does not run this module; the
bench checks once, untimed, that both sides end in the same state).

Entries use `__slots__` and the metadata are plain tuples: the lean way to
write it in Python, so the ratios are not flattered by a careless peer.
Staging follows Kafka's ProducerAppendInfo: a per-append dict of updated
entries that start without batches, merged into the map on commit.
"""
from __future__ import annotations

from collections import deque

INT32_MAX = 2**31 - 1
NUM_BATCHES_TO_RETAIN = 5
ORIGIN_CLIENT, ORIGIN_COORDINATOR, ORIGIN_REPLICATION = 0, 1, 2
OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE = 45, 47, 48
TRANSACTION_COORDINATOR_FENCED = 52
DUPLICATE = 1


def decrement_sequence(seq: int, by: int) -> int:
    """Kafka's DefaultRecordBatch.decrementSequence (for valid sequences)."""
    return INT32_MAX - (by - seq) + 1 if seq < by else seq - by


class PeerEntry:
    """One producer: Kafka's ProducerStateEntry."""

    __slots__ = ("producer_id", "epoch", "coordinator_epoch", "txn_first_offset", "last_timestamp", "batches")

    def __init__(self, producer_id: int, epoch: int = -1, coordinator_epoch: int = -1,
                 txn_first_offset: int = -1, last_timestamp: int = -1):
        self.producer_id = producer_id
        self.epoch = epoch
        self.coordinator_epoch = coordinator_epoch
        self.txn_first_offset = txn_first_offset
        self.last_timestamp = last_timestamp
        self.batches: deque = deque(maxlen=NUM_BATCHES_TO_RETAIN)

    def last_seq(self) -> int:
        return self.batches[-1][0] if self.batches else -1

    def set_epoch(self, epoch: int) -> None:
        if self.epoch != epoch:
            self.epoch = epoch
            self.batches.clear()

    def add_batch(self, epoch, last_seq, first_offset, last_offset, timestamp, transactional) -> int:
        self.set_epoch(epoch)
        self.batches.append((last_seq, last_offset, last_offset - first_offset, timestamp))
        self.last_timestamp = timestamp
        if transactional and self.txn_first_offset < 0:
            self.txn_first_offset = first_offset
            return first_offset
        return -1

    def add_marker(self, epoch, coordinator_epoch, timestamp) -> int:
        completed = self.txn_first_offset
        self.set_epoch(epoch)
        self.coordinator_epoch = coordinator_epoch
        self.txn_first_offset = -1
        self.last_timestamp = timestamp
        return completed

    def staged_copy(self) -> "PeerEntry":
        """Kafka's withProducerIdAndBatchMetadata(id, empty): the fields, no batches."""
        return PeerEntry(self.producer_id, self.epoch, self.coordinator_epoch, self.txn_first_offset,
                         self.last_timestamp)

    def merge(self, updated: "PeerEntry") -> None:
        """Kafka's ProducerStateEntry.update(nextEntry)."""
        self.set_epoch(updated.epoch)
        self.batches.extend(updated.batches)
        self.coordinator_epoch = updated.coordinator_epoch
        self.txn_first_offset = updated.txn_first_offset
        self.last_timestamp = updated.last_timestamp


class PeerProducerMap:
    """Producer id → PeerEntry in a dict, with ProducerTable's operations."""

    def __init__(self):
        self.producers: dict[int, PeerEntry] = {}
        self.stage: dict[int, PeerEntry] | None = None

    def __len__(self) -> int:
        return len(self.producers)

    def find_duplicate(self, pid, epoch, first_seq, last_seq):
        entry = self.producers.get(pid)
        if entry is None or entry.epoch != epoch:
            return None
        for b_last_seq, b_last_offset, b_delta, b_timestamp in entry.batches:
            if b_last_seq == last_seq and decrement_sequence(b_last_seq, b_delta) == first_seq:
                return (b_last_offset - b_delta, b_last_offset, b_timestamp)
        return None

    def append_batch(self, pid, epoch, first_seq, last_seq, first_offset, last_offset, max_timestamp,
                     transactional, origin) -> int:
        """The append path in one call, as ProducerTable.append_batch: 0, DUPLICATE (1) or an error code."""
        if origin == ORIGIN_CLIENT:
            found = self.find_duplicate(pid, epoch, first_seq, last_seq)
            if found is not None:
                self.duplicate = found
                return DUPLICATE
        code = self.check_batch(pid, epoch, first_seq, last_seq, transactional, origin)
        if code == 0:
            self.opened_txn = self.update_batch(pid, epoch, first_seq, last_seq, first_offset, last_offset,
                                                max_timestamp, transactional)
        return code

    def check_batch(self, pid, epoch, first_seq, last_seq, transactional, origin) -> int:
        if origin == ORIGIN_REPLICATION:
            return 0
        committed = self.producers.get(pid)
        committed_epoch = -1 if committed is None else committed.epoch
        entry = self.stage.get(pid) if self.stage is not None else None
        if entry is None:
            entry = committed
            current_last_seq = -1 if committed is None else committed.last_seq()
        elif entry.batches:
            current_last_seq = entry.batches[-1][0]
        elif epoch == committed_epoch:
            current_last_seq = committed.last_seq()
        else:
            current_last_seq = -1
        stored_epoch = -1 if entry is None else entry.epoch
        if epoch < stored_epoch:
            return INVALID_PRODUCER_EPOCH
        if origin == ORIGIN_CLIENT:
            if epoch != stored_epoch:
                if first_seq != 0 and stored_epoch != -1:
                    return OUT_OF_ORDER_SEQUENCE_NUMBER
            elif committed_epoch != -1 and not (
                    first_seq == current_last_seq + 1 or (first_seq == 0 and current_last_seq == INT32_MAX)):
                return OUT_OF_ORDER_SEQUENCE_NUMBER
        if entry is not None and entry.txn_first_offset >= 0 and not transactional:
            return INVALID_TXN_STATE
        return 0

    def _entry(self, pid) -> PeerEntry:
        if self.stage is not None:
            entry = self.stage.get(pid)
            if entry is None:
                committed = self.producers.get(pid)
                entry = PeerEntry(pid) if committed is None else committed.staged_copy()
                self.stage[pid] = entry
            return entry
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = PeerEntry(pid)
        return entry

    def update_batch(self, pid, epoch, first_seq, last_seq, first_offset, last_offset, max_timestamp,
                     transactional) -> int:
        return self._entry(pid).add_batch(epoch, last_seq, first_offset, last_offset, max_timestamp, transactional)

    def check_marker(self, pid, epoch, coordinator_epoch, origin) -> int:
        if origin == ORIGIN_REPLICATION:
            return 0
        entry = self.stage.get(pid) if self.stage is not None else None
        if entry is None:
            entry = self.producers.get(pid)
        if entry is None:
            return 0
        if epoch < entry.epoch:
            return INVALID_PRODUCER_EPOCH
        if entry.coordinator_epoch > coordinator_epoch:
            return TRANSACTION_COORDINATOR_FENCED
        return 0

    def update_marker(self, pid, epoch, coordinator_epoch, timestamp) -> int:
        return self._entry(pid).add_marker(epoch, coordinator_epoch, timestamp)

    def begin(self) -> None:
        self.stage = {}

    def commit(self) -> None:
        for pid, updated in self.stage.items():
            committed = self.producers.get(pid)
            if committed is None:
                self.producers[pid] = updated
            else:
                committed.merge(updated)
        self.stage = None

    def rollback(self) -> None:
        self.stage = None

    def get(self, pid):
        """`(producer_id, epoch, coordinator_epoch, txn_first_offset, last_timestamp, batches)` as ProducerTable.get."""
        e = self.producers.get(pid)
        if e is None:
            return None
        return (e.producer_id, e.epoch, e.coordinator_epoch, e.txn_first_offset, e.last_timestamp,
                [(decrement_sequence(s, d), s, o - d, o, t) for s, o, d, t in e.batches])
