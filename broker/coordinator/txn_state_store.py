"""Every transactional id in memory, and its records in `__transaction_state`.

Each transition is written to the id's partition (Kafka's records,
txn_log.py) before it takes effect, and the state is rebuilt from that topic
on start. While a transition is being written the id holds it as `pending`;
a request that finds one answers CONCURRENT_TRANSACTIONS, as Kafka does, so
no lock is held across a write.
"""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Never

from logstore.broker.coordinator.internal_topics import TXN_STATE_TOPIC, InternalTopics
from logstore.broker.coordinator.txn_log import (
    TxnLogValue,
    TxnState,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from logstore.broker.coordinator.txn_metadata import TxnMetadata
from logstore.broker.coordinator.txn_steps import Durably, Outcomes, Step, Waits, first_error, run_blocking
from logstore.errors import CoordinatorNotAvailableError, CorruptRecordError, LogStoreError, StorageError

if TYPE_CHECKING:
    from logstore.manager import LogManager


class TxnStateStore:
    """The transactional ids (`txns`, by id, and `by_producer`, id by producer id) and their records.

    `lock` guards both maps and every `TxnMetadata` in them (its `pending` state included); it is
    never held across an append or an fsync. Task-safe.
    """

    def __init__(self, store: LogManager, topics: InternalTopics, fsync: bool) -> None:
        self._store = store
        self._topics = topics
        self._fsync = fsync
        self.lock = threading.Lock()
        self.txns: dict[str, TxnMetadata] = {}
        self.by_producer: dict[int, str] = {}
        # The highest producer id any loaded record names (current, previous or next): none may be handed out again.
        self.highest_loaded_producer_id = -1
        # Each id's partition of `__transaction_state` and record key, once written (without the lock: a
        # dict's item assignment is atomic, and two threads could only store the same pair).
        self._keys: dict[str, tuple[int, bytes]] = {}

    def load(self) -> int:
        """Rebuild every transactional id from `__transaction_state`; how many there are.

        A record that cannot be decoded stops the load: guessing past it could
        finish a decided transaction the other way.
        """
        partitions = self._store.topics().get(TXN_STATE_TOPIC, 0)
        txns: dict[str, TxnMetadata] = {}
        highest = -1
        for p in range(partitions):
            for record in self._store.log(TXN_STATE_TOPIC, p).iter_records():
                try:
                    if record.key is None:
                        raise CorruptRecordError("a record without a key")
                    transactional_id = decode_key(record.key)
                    if record.value is None:
                        txns.pop(transactional_id, None)
                    else:
                        value = decode_value(record.value)
                        highest = max(highest, value.producer_id, value.previous_producer_id, value.next_producer_id)
                        txns[transactional_id] = TxnMetadata.from_log(transactional_id, value)
                except CorruptRecordError as exc:
                    raise StorageError(f"{TXN_STATE_TOPIC}-{p} offset {record.offset}: {exc}") from exc
        with self.lock:
            self.txns = txns
            self.by_producer = {m.producer_id: t for t, m in txns.items()}
            self.highest_loaded_producer_id = highest
        return len(txns)

    def write(self, transactional_id: str, value: TxnLogValue | None, durable: bool = True) -> None:
        """Append the id's record (None: a tombstone), waiting for its fsync if `durable` (outside the lock)."""
        waits = self.append(transactional_id, value)
        if durable:
            for partition, end in waits:
                partition.flush(end)

    def append(self, transactional_id: str, value: TxnLogValue | None) -> Waits:
        """Append the id's record (None: a tombstone) without waiting: the (log, end) its fsync is waited on
        at (none when the coordinator does not fsync)."""
        known = self._keys.get(transactional_id)
        if known is None:
            # The id's partition never moves (the topic's partition count is fixed as created), nor its
            # key: hashing and encoding the id for each record was a good part of a small transaction's work.
            known = self._keys[transactional_id] = (self._topics.state_partition(transactional_id),
                                                    encode_key(transactional_id))
        index, key = known
        partition = self._store.log(TXN_STATE_TOPIC, index)
        value_bytes = None if value is None else encode_value(value)
        batch = partition.format.encode_batch([key], [value_bytes])
        result = partition.append(bytearray(batch), client=False)
        return [(partition, result.last_offset + 1)] if self._fsync else []

    def persist(self, meta: TxnMetadata, transit: TxnMetadata, durable: bool = True,
                then: TxnState | None = None) -> None:
        """Write `transit` (its state already `meta.pending`), then make it current; on failure nothing changes.

        `then` becomes the pending state in the same step, so the caller keeps
        the id for its next write (no other thread can claim it in between).
        """
        run_blocking(self.persist_durably(meta, transit, durable, then))

    def persist_durably(self, meta: TxnMetadata, transit: TxnMetadata, durable: bool = True,
                        then: TxnState | None = None) -> Step[None]:
        """`persist` in steps: the record appended now, made current once its fsync is over (not waited
        for unless `durable`). A failed append or fsync (or one past the caller's wait) releases the id
        unchanged and raises CoordinatorNotAvailableError, as Kafka answers."""
        try:
            waits = self.append(meta.transactional_id, transit.log_value())
        except LogStoreError as exc:
            self._failed(meta, exc)
        if not durable or not waits:
            self._make_current(meta, transit, then)
            return None
        return Durably(waits, lambda outcomes: self._settle(meta, transit, then, outcomes))

    def _settle(self, meta: TxnMetadata, transit: TxnMetadata, then: TxnState | None, outcomes: Outcomes) -> None:
        error = first_error(outcomes)
        if error is not None:
            self._failed(meta, error)
        self._make_current(meta, transit, then)

    def _failed(self, meta: TxnMetadata, error: BaseException) -> Never:
        with self.lock:
            meta.pending = None
        raise CoordinatorNotAvailableError(
            f"transactional id {meta.transactional_id!r}: {TXN_STATE_TOPIC} not written: {error}") from error

    def _make_current(self, meta: TxnMetadata, transit: TxnMetadata, then: TxnState | None) -> None:
        with self.lock:
            if transit.producer_id != meta.producer_id:
                self.by_producer.pop(meta.producer_id, None)
            self.by_producer[transit.producer_id] = meta.transactional_id
            meta.take(transit, then)

    def add(self, meta: TxnMetadata) -> None:
        """A new transactional id (under the lock)."""
        self.txns[meta.transactional_id] = meta
        self.by_producer[meta.producer_id] = meta.transactional_id

    def forget(self, meta: TxnMetadata) -> None:
        """The id expired (under the lock)."""
        self.txns.pop(meta.transactional_id, None)
        self.by_producer.pop(meta.producer_id, None)
        self._keys.pop(meta.transactional_id, None)
