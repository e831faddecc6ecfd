"""Which transactional batches and markers a cleaner round may drop: Kafka's CleanedTransactionMetadata.

`logstore.cleaner` feeds it every batch of a round in log order, with the
aborted transactions (from the `.txnindex`) of each range before its batches.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from logstore.index import AbortedTxn

if TYPE_CHECKING:
    from logstore.formats.kafka import BatchHeader


class TransactionTracker:
    """Which transactional batches and markers the cleaner may drop (Kafka's CleanedTransactionMetadata).

    Fed the aborted transactions of each segment before its batches, in log
    order. A batch of an aborted transaction may go at once; its ABORT marker
    stays (and keeps its `.txnindex` entry) while a round still saw data of
    the transaction, and a COMMIT marker stays while a round saw its data.
    """

    def __init__(self) -> None:
        self._pending: list[AbortedTxn] = []
        self._aborted: dict[int, list[AbortedTxn | bool]] = {}   # producer id -> [AbortedTxn, saw data]
        self._committed: set[int] = set()
        self.kept_aborted: list[AbortedTxn] = []

    def add_aborted(self, txns: Sequence[AbortedTxn]) -> None:
        """Aborted transactions found in the range about to be read."""
        known = {(t.producer_id, t.first_offset) for t in self._pending}
        self._pending.extend(t for t in txns if (t.producer_id, t.first_offset) not in known)
        self._pending.sort(key=lambda t: t.first_offset)

    def _reach(self, offset: int) -> None:
        while self._pending and self._pending[0].first_offset <= offset:
            txn = self._pending.pop(0)
            self._aborted.setdefault(txn.producer_id, [txn, False])

    def on_data(self, header: BatchHeader) -> bool:
        """A data batch was read; True if it belongs to an aborted transaction."""
        self._reach(header.last_offset)
        if not header.is_transactional:
            return False
        aborted = self._aborted.get(header.producer_id)
        if aborted is not None:
            aborted[1] = True
            return True
        self._committed.add(header.producer_id)
        return False

    def on_marker(self, header: BatchHeader, marker_type: str) -> bool:
        """A control batch was read (its marker's type name, EMPTY once emptied); True if it may go."""
        self._reach(header.last_offset)
        if marker_type == "EMPTY":
            return True
        if marker_type == "ABORT":
            aborted = self._aborted.pop(header.producer_id, None)
            if aborted is not None and aborted[1]:
                self.kept_aborted.append(cast(AbortedTxn, aborted[0]))  # the pair is [AbortedTxn, saw data]
                return False
            return True
        if marker_type == "COMMIT":
            if header.producer_id in self._committed:
                self._committed.discard(header.producer_id)
                return False
            return True
        return False
