"""What every part of the group coordinator shares: the lock, the clock, the deadline heap, and the
appends to `__consumer_offsets` with the replies held until they are durable.

Kafka 4's group coordinator runs each `__consumer_offsets` partition as a
shard whose managers share one context (the record appender, the timer and
the clock); this is that context, for all partitions at once. A call decides
under `lock`, collecting what it appended and what it answers in an
`Effects`, and `finish` waits for the fsyncs after the lock is released.
"""
from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, TypeVar

from logstore.broker.coordinator.internal_topics import OFFSETS_TOPIC
from logstore.errors import CoordinatorNotAvailableError, LogStoreError

if TYPE_CHECKING:
    from logstore.log import AppendResult, Log
    from logstore.manager import LogManager

log = logging.getLogger(__name__)

# (deadline ms, sequence, group id, member id or None for the group's own deadline)
Timer = tuple[int, int, str, str | None]
T = TypeVar("T")


class Effects:
    """What a call decided under the lock and does after it: replies to release, appends to wait for."""

    def __init__(self) -> None:
        # Futures of different results (JoinResult, SyncResult): `answer` pairs each with a value of its own.
        self.replies: list[tuple[Future[Any], object]] = []
        self.appended: list[tuple[Log, int]] = []

    def answer(self, waiter: Future[T] | None, value: T | BaseException) -> None:
        """Release `waiter` with `value` (a result or an error) once the call's appends are durable."""
        if waiter is not None:
            self.replies.append((waiter, value))


class GroupContext:
    """The group coordinator's shared context: the store it appends to, its clock (ms), its lock and its
    deadline heap.

    `lock` (reentrant) guards every group and the heap; each manager takes it
    around a call's decision and never waits for an fsync while holding it.
    Task-safe: any thread may call, the lock serialises them.
    """

    def __init__(self, store: LogManager, clock: Callable[[], int], on_timer: Callable[[], None],
                 fsync: bool) -> None:
        self.store = store
        self.clock = clock
        self.lock = threading.RLock()
        self._on_timer = on_timer
        self._fsync = fsync
        self._timers: list[Timer] = []
        self._seq = itertools.count()
        self._wake_at: int | None = None

    # -- deadlines ---------------------------------------------------------------------------

    def schedule(self, deadline: int, group_id: str, member_id: str | None = None) -> None:
        """Queue a deadline (ms) of a group (`member_id` None) or one of its members; under the lock."""
        heapq.heappush(self._timers, (deadline, next(self._seq), group_id, member_id))
        if self._wake_at is None or deadline < self._wake_at:
            self._wake_at = deadline
            self._on_timer()

    def due(self, now: int) -> Iterator[tuple[int, str, str | None]]:
        """Pop every deadline passed at `now`, those queued while iterating included; under the lock."""
        while self._timers and self._timers[0][0] <= now:
            deadline, _, group_id, member_id = heapq.heappop(self._timers)
            yield deadline, group_id, member_id

    def rearm(self) -> int | None:
        """The next deadline (ms), or None, remembered as the one the owner will wake for; under the lock."""
        self._wake_at = self._timers[0][0] if self._timers else None
        return self._wake_at

    # -- the log -----------------------------------------------------------------------------

    def append(self, fx: Effects, partition: int, keys: list[bytes], values: list[bytes | None], *,
               producer_id: int | None = None, producer_epoch: int = -1) -> AppendResult:
        """Append records to a `__consumer_offsets` partition (under the lock); `fx` waits for them to be
        durable. `producer_id` (with `producer_epoch`) makes the batch transactional."""
        target = self.store.log(OFFSETS_TOPIC, partition)
        if producer_id is None:
            batch = target.format.encode_batch(keys, values)
        else:
            batch = target.format.encode_batch(keys, values, producer_id=producer_id, producer_epoch=producer_epoch,
                                               base_sequence=0, transactional=True)
        result = target.append(bytearray(batch), client=False)
        fx.appended.append((target, result.last_offset + 1))
        return result

    def finish(self, fx: Effects, strict: bool = True) -> None:
        """After the lock: wait for the appends to be durable, then release the held replies.

        `strict`: an append that did not reach the disk raises CoordinatorNotAvailableError
        (else it is logged: group metadata is rewritten at the next change anyway).
        """
        error = None
        if self._fsync:
            for target, end in fx.appended:
                try:
                    target.durable(end).result()
                except Exception as exc:  # noqa: BLE001 - reported to whoever waits on this call
                    error = exc
        for waiter, value in fx.replies:
            if isinstance(value, BaseException):
                waiter.set_exception(value)
            else:
                waiter.set_result(value)
        if error is not None:
            if strict:
                raise CoordinatorNotAvailableError(f"{OFFSETS_TOPIC} not written: {error}") from error
            log.warning("%s not flushed: %s", OFFSETS_TOPIC, error)

    def unsynced(self, fx: Effects) -> list[tuple[Log, int]]:
        """For a call that holds no replies: the appends its caller waits for instead of `finish` (none
        when this coordinator does not fsync)."""
        assert not fx.replies, "held replies are released by finish()"
        return fx.appended if self._fsync else []

    # -- topics ------------------------------------------------------------------------------

    def topic_id(self, topic: str) -> bytes | None:
        """The topic's id, or None if it is gone."""
        try:
            return self.store.topic_id(topic)
        except LogStoreError:
            return None

    def topic_names(self) -> dict[bytes, str]:
        """Topic id -> name of every topic."""
        names = {}
        for topic in self.store.topics():
            topic_id = self.topic_id(topic)
            if topic_id is not None:
                names[topic_id] = topic
        return names
