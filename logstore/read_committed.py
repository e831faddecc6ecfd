"""read_committed: the aborted transactions a fetch carries, and the batches a consumer keeps.

A read_committed fetch stops at the last stable offset and carries the
aborted transactions that overlap it (from the `.txnindex` files); the
consumer then drops the batches of those transactions and every control
batch. Both halves follow Kafka: the broker's collectAbortedTransactions and
the consumer's fetcher.
"""
from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from logstore.formats.kafka import Entry, LegacyEntry
from logstore.index import AbortedTxn

if TYPE_CHECKING:
    from logstore.segment import LogSegment

READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"
ISOLATION_LEVELS = (READ_UNCOMMITTED, READ_COMMITTED)


def check_isolation(isolation: str) -> bool:
    """True for read_committed; ValueError for a name Kafka does not have."""
    if isolation not in ISOLATION_LEVELS:
        raise ValueError(f"isolation must be one of {ISOLATION_LEVELS}, got {isolation!r}")
    return isolation == READ_COMMITTED


def collect_aborted(segments: Sequence[LogSegment], bases: Sequence[int], fetch_offset: int,
                    upper_bound: int) -> list[AbortedTxn]:
    """Aborted transactions overlapping [fetch_offset, upper_bound), walking the segments from the
    one holding `fetch_offset` until an entry's last stable offset shows later ones cannot matter."""
    found: list[AbortedTxn] = []
    for segment in segments[max(bisect.bisect_right(bases, fetch_offset) - 1, 0):]:
        txns, complete = segment.txn_index.collect(fetch_offset, upper_bound)
        found.extend(txns)
        if complete:
            break
    return found


class CommittedFilter:
    """Decides batch by batch, in log order, what a read_committed consumer sees."""

    def __init__(self, aborted: Sequence[AbortedTxn]):
        self._pending = deque(sorted(aborted, key=lambda t: t.first_offset))
        self._aborted_producers: set[int] = set()

    def keep(self, batch: Entry, is_abort_marker: Callable[[], bool]) -> bool:
        """Whether the consumer keeps `batch` (a header with producer and control fields)."""
        if isinstance(batch, LegacyEntry):
            return True  # magic 0/1: no producer ids, no control batches
        producer_id = batch.producer_id
        if producer_id >= 0:
            pending = self._pending
            while pending and pending[0].first_offset <= batch.last_offset:
                self._aborted_producers.add(pending.popleft().producer_id)
            if batch.is_control:
                if producer_id in self._aborted_producers and is_abort_marker():
                    self._aborted_producers.discard(producer_id)
                return False
            if batch.is_transactional and producer_id in self._aborted_producers:
                return False
        return not batch.is_control
