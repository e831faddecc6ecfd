"""The native producer table's plain-Python twin: the tests' oracle and the bench's peer.

tests/producer/test_producer_table.py checks `logstore.native.producer_state.ProducerTable`
against it step by step; bench/test_producer_state.py times it beside the native table (its
conftest puts this folder on the import path). One module for both, so the peer the bench
measures is the oracle the tests trust.

Written from on-disk-format.md §7 and §8 and the shape of Kafka's own classes, with none of
the native table's tricks: a dict of producer id → `ModelEntry` (Kafka's ProducerStateEntry),
each holding a deque(maxlen=5) of batch metadata tuples `(last_seq, last_offset, offset_delta,
timestamp)` as ProducerStateEntry holds an ArrayDeque of BatchMetadata. Staging is Kafka's
ProducerAppendInfo: an "updated entry" per producer that starts as a copy of the committed one
without its batches, merged into it on commit (ProducerStateEntry.update). An update outside
begin()/commit() changes the committed entry in place, which ends in the same state as a
stage of one.

Where the spec is loose it follows Kafka (ProducerAppendInfo.checkSequence): with the epoch
matching and no cached batch, only sequence 0 is in order, unless the committed epoch is
unknown (-1), which accepts any sequence.

It is also written to be fast, so the bench's ratios are not flattered by a careless peer:
`__slots__` entries, plain tuples, no copy of an entry for a check, -1 rather than None for
"no open transaction" (as the native table and Kafka's snapshot have it).
"""
from __future__ import annotations

from collections import deque

INT32_MAX = 2**31 - 1
RETAIN = 5
CLIENT, COORDINATOR, REPLICATION = 0, 1, 2
OUT_OF_ORDER, INVALID_EPOCH, INVALID_TXN_STATE, COORDINATOR_FENCED = 45, 47, 48, 52
DUPLICATE = 1


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


class ModelEntry:
    """One producer (ProducerStateEntry); txn_first_offset is -1 when no transaction is open."""

    __slots__ = ("batches", "coordinator_epoch", "epoch", "last_timestamp", "producer_id", "txn_first_offset")

    def __init__(self, producer_id: int, epoch: int = -1, coordinator_epoch: int = -1,
                 txn_first_offset: int = -1, last_timestamp: int = -1):
        self.producer_id = producer_id
        self.epoch = epoch
        self.coordinator_epoch = coordinator_epoch
        self.txn_first_offset = txn_first_offset
        self.last_timestamp = last_timestamp
        self.batches: deque = deque(maxlen=RETAIN)

    def without_batches(self) -> ModelEntry:
        """Kafka's withProducerIdAndBatchMetadata(id, empty): the fields, no batches."""
        return ModelEntry(self.producer_id, self.epoch, self.coordinator_epoch, self.txn_first_offset,
                          self.last_timestamp)

    def last_seq(self) -> int:
        """The last sequence of the newest cached batch, -1 without one."""
        return self.batches[-1][0] if self.batches else -1

    def set_epoch(self, epoch: int) -> None:
        """A new epoch forgets the cached batches."""
        if epoch != self.epoch:
            self.epoch = epoch
            self.batches.clear()

    def add_batch(self, epoch, last_seq, first_offset, last_offset, timestamp, transactional) -> int:
        """ProducerAppendInfo.appendDataBatch: the offset a transaction opened at, else -1."""
        self.set_epoch(epoch)
        # Kafka keeps (int) (lastOffset - firstOffset); the readers narrow it (`int32`), off the hot path.
        self.batches.append((last_seq, last_offset, last_offset - first_offset, timestamp))
        self.last_timestamp = timestamp
        if transactional and self.txn_first_offset < 0:
            self.txn_first_offset = first_offset
            return first_offset
        return -1

    def add_marker(self, epoch, coordinator_epoch, timestamp) -> int:
        """ProducerAppendInfo.appendEndTxnMarker: the first offset of the transaction it ends, else -1."""
        completed = self.txn_first_offset
        self.set_epoch(epoch)
        self.coordinator_epoch = coordinator_epoch
        self.txn_first_offset = -1
        self.last_timestamp = timestamp
        return completed

    def merge(self, updated: ModelEntry) -> None:
        """ProducerStateEntry.update(nextEntry)."""
        self.set_epoch(updated.epoch)
        self.batches.extend(updated.batches)
        self.coordinator_epoch = updated.coordinator_epoch
        self.txn_first_offset = updated.txn_first_offset
        self.last_timestamp = updated.last_timestamp

    def view(self) -> tuple:
        """What ProducerTable.get returns, as a plain tuple."""
        return (self.producer_id, self.epoch, self.coordinator_epoch, self.txn_first_offset, self.last_timestamp,
                [(decrement_sequence(s, int32(d)), s, o - int32(d), o, t) for s, o, d, t in self.batches])


class ProducerModel:
    """Producer id → ModelEntry, with the native ProducerTable's operations and results.

    Owns nothing on disk. `stage` is the open append's updated entries (None outside
    begin()/commit()); `duplicate` and `opened_txn` are what the last `append_batch` found,
    as on the native table. Not thread-safe: one caller at a time.
    """

    def __init__(self):
        self.producers: dict[int, ModelEntry] = {}
        self.stage: dict[int, ModelEntry] | None = None
        self.duplicate: tuple[int, int, int] | None = None
        self.opened_txn = -1

    def __len__(self) -> int:
        return len(self.producers)

    # -- staging (ProducerAppendInfo) ---------------------------------------------------

    def begin(self) -> None:
        """Open a stage: later updates go to copies, applied by commit()."""
        assert self.stage is None
        self.stage = {}

    def commit(self) -> None:
        """Merge the stage into the committed entries."""
        for pid, updated in self.stage.items():
            current = self.producers.get(pid)
            if current is None:
                self.producers[pid] = updated
            else:
                current.merge(updated)
        self.stage = None

    def rollback(self) -> None:
        """Drop the stage."""
        self.stage = None

    def _entry(self, pid: int) -> ModelEntry:
        """The entry an update changes: the staged copy (made on first use), else the committed one."""
        if self.stage is not None:
            entry = self.stage.get(pid)
            if entry is None:
                current = self.producers.get(pid)
                entry = ModelEntry(pid) if current is None else current.without_batches()
                self.stage[pid] = entry
            return entry
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ModelEntry(pid)
        return entry

    # -- the append path ----------------------------------------------------------------

    def find_duplicate(self, pid, epoch, first_seq, last_seq):
        """(first offset, last offset, timestamp) of a cached batch with these sequences, or None."""
        current = self.producers.get(pid)
        if current is None or current.epoch != epoch:
            return None
        for seq, offset, delta, timestamp in current.batches:
            if seq == last_seq and decrement_sequence(seq, int32(delta)) == first_seq:
                return (offset - int32(delta), offset, timestamp)
        return None

    def append_batch(self, pid, epoch, first_seq, last_seq, first_offset, last_offset, max_timestamp,
                     transactional, origin) -> int:
        """ProducerTable.append_batch, as its three calls: 0, DUPLICATE (1) or an error code."""
        if origin == CLIENT:
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
        """Kafka's epoch, sequence and transaction checks of a data batch: 0 or an error code."""
        if origin == REPLICATION:
            return 0
        current = self.producers.get(pid)
        current_epoch = -1 if current is None else current.epoch
        updated = self.stage.get(pid) if self.stage is not None else None
        if updated is None:
            updated = current
            last = -1 if current is None else current.last_seq()
        elif updated.batches:
            last = updated.batches[-1][0]
        elif epoch == current_epoch:
            last = current.last_seq()
        else:
            last = -1
        updated_epoch = -1 if updated is None else updated.epoch
        if epoch < updated_epoch:
            return INVALID_EPOCH
        if origin == CLIENT:
            if epoch != updated_epoch:
                if first_seq != 0 and updated_epoch != -1:
                    return OUT_OF_ORDER
            elif current_epoch != -1 and not (first_seq == last + 1 or (first_seq == 0 and last == INT32_MAX)):
                return OUT_OF_ORDER
        if updated is not None and updated.txn_first_offset >= 0 and not transactional:
            return INVALID_TXN_STATE
        return 0

    def update_batch(self, pid, epoch, first_seq, last_seq, first_offset, last_offset, max_timestamp,
                     transactional) -> int:
        """Record a checked batch: the offset a transaction opened at, else -1."""
        return self._entry(pid).add_batch(epoch, last_seq, first_offset, last_offset, max_timestamp,
                                          transactional)

    def check_marker(self, pid, epoch, coordinator_epoch, origin) -> int:
        """Kafka's checks of a transaction marker: 0 or an error code."""
        if origin == REPLICATION:
            return 0
        updated = self.stage.get(pid) if self.stage is not None else None
        if updated is None:
            updated = self.producers.get(pid)
        if updated is None:
            return 0
        if epoch < updated.epoch:
            return INVALID_EPOCH
        if updated.coordinator_epoch > coordinator_epoch:
            return COORDINATOR_FENCED
        return 0

    def update_marker(self, pid, epoch, coordinator_epoch, timestamp) -> int:
        """Record a checked marker: the first offset of the transaction it ends, else -1."""
        return self._entry(pid).add_marker(epoch, coordinator_epoch, timestamp)

    # -- the map ------------------------------------------------------------------------

    def get(self, pid: int) -> tuple | None:
        """`(producer_id, epoch, coordinator_epoch, txn_first_offset, last_timestamp, batches)` as
        ProducerTable.get, or None."""
        entry = self.producers.get(pid)
        return None if entry is None else entry.view()

    view = get  # the oracle tests' name

    def remove(self, pid: int) -> bool:
        """Forget a producer; whether it was known."""
        return self.producers.pop(pid, None) is not None

    def expire(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Drop producers idle for `expiration_ms` without an open transaction; their ids."""
        gone = [pid for pid, e in self.producers.items()
                if e.txn_first_offset < 0 and now_ms - e.last_timestamp >= expiration_ms]
        for pid in gone:
            del self.producers[pid]
        return gone

    def open_transactions(self) -> list[tuple[int, int]]:
        """(first offset, producer id) of every open transaction, oldest first."""
        return sorted((e.txn_first_offset, pid) for pid, e in self.producers.items() if e.txn_first_offset >= 0)

    def snapshot_roundtrip(self, now_ms: int = -1, expiration_ms: int = -1) -> None:
        """What a `.snapshot` keeps (§7): the last batch, stamped with the producer's last timestamp."""
        kept = {}
        for pid, e in self.producers.items():
            if now_ms >= 0 and e.txn_first_offset < 0 and now_ms - e.last_timestamp >= expiration_ms:
                continue
            restored = e.without_batches()
            if e.batches and e.batches[-1][1] >= 0:
                seq, offset, delta, _ = e.batches[-1]
                restored.batches.append((seq, offset, delta, e.last_timestamp))
            kept[pid] = restored
        self.producers = kept
