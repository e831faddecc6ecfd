"""The acquisition locks of one share-partition: one deadline per acquisition or renewal, not per record.

Kafka schedules an AcquisitionLockTimerTask per acquired batch; here a lock is a stamp that the records it
covers carry in the share-partition's per-offset array, and this table keeps, per stamp, the deadline,
the offset span it was taken over and how many records still carry it, with a heap of deadlines for the
caller's timer. A lock that no record carries any more is dropped at once, so the table holds no more
than the acquisitions still outstanding.
"""
from __future__ import annotations

import heapq
from collections.abc import Iterable

_STAMP_MASK = 0xFFFFFFFF              # stamps fit array('I') entries; 0 is never handed out


class AcquisitionLocks:
    """stamp -> [deadline ms, first offset, last offset, records held], and a heap of (deadline, stamp).

    Invariant: every stamp in the table is held by at least one record. Not task-safe: its share-partition's
    caller serialises access.
    """

    def __init__(self) -> None:
        self._locks: dict[int, list[int]] = {}
        self._heap: list[tuple[int, int]] = []
        self._next = 1

    def peek_stamp(self) -> int:
        """The stamp the next `add` hands out (records are stamped before their lock is added)."""
        return self._next

    def add(self, deadline: int, first: int, last: int, held: int) -> int:
        """Register the next stamp over `held` records between first and last until `deadline`."""
        stamp = self._next
        self._locks[stamp] = [deadline, first, last, held]
        heapq.heappush(self._heap, (deadline, stamp))
        self._next = ((stamp + 1) & _STAMP_MASK) or 1
        if len(self._heap) > 2 * len(self._locks) + 64:
            # Locks dropped before their deadline leave heap entries behind: rebuild once they pile up.
            self._heap = [(lock[0], s) for s, lock in self._locks.items()]
            heapq.heapify(self._heap)
        return stamp

    def drop(self, runs: Iterable[tuple[int, int]]) -> None:
        """(stamp, records) pairs no longer held under their lock; a lock left holding nothing goes."""
        for stamp, n in runs:
            lock = self._locks[stamp]
            lock[3] -= n
            if lock[3] <= 0:
                del self._locks[stamp]

    def deadline(self, stamp: int) -> int | None:
        """A held lock's deadline (ms)."""
        lock = self._locks.get(stamp)
        return lock[0] if lock is not None else None

    def next_deadline(self) -> int | None:
        """The earliest deadline (ms) of any lock still held."""
        while self._heap:
            deadline, stamp = self._heap[0]
            if self.deadline(stamp) == deadline:
                return deadline
            heapq.heappop(self._heap)
        return None

    def due(self, now_ms: int) -> list[tuple[int, int, int]]:
        """(stamp, first offset, last offset) of each lock whose deadline is at or before now_ms, taken off
        the timer (the caller releases the records still carrying the stamp)."""
        out = []
        while self._heap and self._heap[0][0] <= now_ms:
            deadline, stamp = heapq.heappop(self._heap)
            lock = self._locks.get(stamp)
            if lock is not None and lock[0] == deadline:
                out.append((stamp, lock[1], lock[2]))
        return out

    def clear(self) -> None:
        """Every lock gone (the window was cleared)."""
        self._locks.clear()
        self._heap.clear()
