"""Long-polling Fetches parked until one of their own partitions changes (Kafka's fetch purgatory, keyed
by partition).

A Fetch with less than `min_bytes` parks on the partitions it asked for; an
append wakes only the Fetches parked on the partitions it wrote, so the cost
of an append does not grow with the number of parked Fetches or the number
of partitions they list. A marker written by the transaction coordinator
(another thread) moves a last stable offset: the broker hands its
partitions to `wake` on the event loop, which wakes the read_committed
Fetches parked there. A wake of `None` (an append whose partitions are not
known, shutdown) wakes every parked Fetch: always correct, only slower.
"""
from __future__ import annotations

import asyncio
from collections.abc import Iterable

__all__ = ["FetchWaiters", "TopicPartition"]

TopicPartition = tuple[str, int]


class FetchWaiters:
    """Parked Fetches by partition: each a future that the first append to any of its partitions resolves.

    Owned by the broker; used from the event loop only. A Fetch registers in the same step as its read,
    so no append can fall between the two.
    """

    def __init__(self) -> None:
        self._parked: dict[TopicPartition, set[asyncio.Future[None]]] = {}

    def __len__(self) -> int:
        """How many partitions have a Fetch parked on them."""
        return len(self._parked)

    async def wait(self, partitions: Iterable[TopicPartition], timeout: float,
                   gone: asyncio.Future[None] | None = None) -> None:
        """Return at the next append to one of `partitions`, after `timeout` s, or once `gone` resolves."""
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        keys = set(partitions)
        for key in keys:
            self._parked.setdefault(key, set()).add(woken)
        try:
            await asyncio.wait([woken] if gone is None else [woken, gone], timeout=max(timeout, 0),
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            for key in keys:
                parked = self._parked.get(key)
                if parked is not None:
                    parked.discard(woken)
                    if not parked:
                        del self._parked[key]
            woken.cancel()

    def wake(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Wake the Fetches parked on any of `partitions` (None: every parked Fetch)."""
        if partitions is None:
            woken = {future for parked in self._parked.values() for future in parked}
        else:
            woken = {future for key in partitions for future in self._parked.get(key, ())}
        for future in woken:
            if not future.done():
                future.set_result(None)
