"""Every transactional id in memory, and its records in `__transaction_state`.

Each transition is written to the id's partition (Kafka's records,
txn_log.py) before it takes effect, and the state is rebuilt from that topic
on start. While a transition is being written the id holds it as `pending`;
a request that finds one answers CONCURRENT_TRANSACTIONS, as Kafka does, so
no lock is held across a write.
"""
from __future__ import annotations

import dataclasses
import threading
from typing import TYPE_CHECKING

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
        partition = self._store.log(TXN_STATE_TOPIC, self._topics.state_partition(transactional_id))
        value_bytes = None if value is None else encode_value(value)
        batch = partition.format.encode_batch([encode_key(transactional_id)], [value_bytes])
        partition.append(bytearray(batch), client=False, durable=durable and self._fsync)

    def persist(self, meta: TxnMetadata, transit: TxnMetadata, durable: bool = True,
                then: TxnState | None = None) -> None:
        """Write `transit` (its state already `meta.pending`), then make it current; on failure nothing changes.

        `then` becomes the pending state in the same step, so the caller keeps
        the id for its next write (no other thread can claim it in between).
        """
        try:
            self.write(meta.transactional_id, transit.log_value(), durable)
        except LogStoreError as exc:
            with self.lock:
                meta.pending = None
            raise CoordinatorNotAvailableError(
                f"transactional id {meta.transactional_id!r}: {TXN_STATE_TOPIC} not written: {exc}") from exc
        with self.lock:
            if transit.producer_id != meta.producer_id:
                self.by_producer.pop(meta.producer_id, None)
            self.by_producer[transit.producer_id] = meta.transactional_id
            for f in dataclasses.fields(TxnMetadata):
                setattr(meta, f.name, getattr(transit, f.name))
            meta.pending = then

    def add(self, meta: TxnMetadata) -> None:
        """A new transactional id (under the lock)."""
        self.txns[meta.transactional_id] = meta
        self.by_producer[meta.producer_id] = meta.transactional_id

    def forget(self, meta: TxnMetadata) -> None:
        """The id expired (under the lock)."""
        self.txns.pop(meta.transactional_id, None)
        self.by_producer.pop(meta.producer_id, None)
