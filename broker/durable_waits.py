"""Waiting on the event loop for appends to become durable, with one wake-up per fsync.

A request that answers after the fsync (acks=all, an offset commit) used to hold a
`concurrent.futures.Future` per partition, chained to an asyncio future, and
`asyncio.wait` with a timeout: several objects, callbacks and a self-pipe write
per waiter. Here the sync thread posts every waiter its fsync satisfied to one
inbox, drained by one loop callback, and a request waits on one loop future.
Its timeout is an entry in the inbox's `Deadlines`, not a loop timer of its own.
"""
from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Callable, Sequence
from functools import partial
from typing import Protocol


class Durable(Protocol):
    """What can be waited on: `logstore.log.Log`'s `is_durable` and `when_durable`."""

    def is_durable(self, offset: int) -> bool: ...

    def when_durable(self, offset: int, settle: Callable[[int | BaseException], None]) -> None: ...


class LoopInbox:
    """Calls posted from any thread, run on the loop in order, with one loop wake-up for a burst of them."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.deadlines = Deadlines(loop)
        self._lock = threading.Lock()
        self._calls: list[tuple[Callable[..., None], tuple[object, ...]]] = []
        self._thread = threading.get_ident()

    def post(self, call: Callable[..., None], *args: object) -> None:
        """Run `call(*args)` on the loop soon (at once if this is the loop's thread)."""
        if threading.get_ident() == self._thread:
            call(*args)
            return
        with self._lock:
            self._calls.append((call, args))
            wake = len(self._calls) == 1
        if wake and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self._lock:
            calls, self._calls = self._calls, []
        for call, args in calls:
            call(*args)


class Deadlines:
    """Loop futures set (to None) at their deadlines unless they are done first, all on one loop timer.

    A uvloop timer per durable wait, armed and then cancelled when the fsync came first, cost ~8 us of
    broker CPU a single-record acks=all Produce on disk (bench/small_requests.py). Here a wait is a dict
    entry; the one timer is armed for the earliest deadline, and when it fires it sets what is due and is
    armed again for the earliest left, if any. Waits share a timeout mostly, so deadlines come in order and
    a steady stream of waits costs one timer a timeout.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self._due: dict[asyncio.Future[None], float] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf

    def __len__(self) -> int:
        return len(self._due)

    def add(self, future: asyncio.Future[None], timeout: float) -> None:
        """Set `future` `timeout` s from now, unless it is done or discarded before."""
        at = self._loop.time() + timeout
        self._due[future] = at
        if at < self._timer_at:
            self._arm(at)

    def discard(self, future: asyncio.Future[None]) -> None:
        """Forget `future`'s deadline (its wait is over)."""
        self._due.pop(future, None)

    def _arm(self, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = at
        self._timer = self._loop.call_at(at, self._fire)

    def _fire(self) -> None:
        self._timer, self._timer_at = None, math.inf
        # A loop may run a timer up to its clock's resolution early (uvloop: 1 ms).
        now = self._loop.time() + _TIMER_SLACK_S
        due = [future for future, at in self._due.items() if at <= now]
        for future in due:
            del self._due[future]
            if not future.done():
                future.set_result(None)
        if self._due:
            self._arm(min(self._due.values()))


_TIMER_SLACK_S = 0.001


class NotDurableInTime(Exception):
    """A wait's timeout passed before its fsync finished (the fsync still runs): Kafka's REQUEST_TIMED_OUT."""


_PENDING = NotDurableInTime("not durable within the request's timeout")


class _Waits:
    """One request's waits: each one's outcome (None once durable), the future set once all settled."""

    __slots__ = ("outcomes", "left", "done")

    def __init__(self, count: int, done: asyncio.Future[None]):
        self.outcomes: list[BaseException | None] = [_PENDING] * count
        self.left = count
        self.done = done

    def settle(self, index: int, point: int | BaseException) -> None:
        self.outcomes[index] = point if isinstance(point, BaseException) else None
        self.left -= 1
        if self.left == 0 and not self.done.done():
            self.done.set_result(None)


async def until_durable(inbox: LoopInbox, waits: Sequence[tuple[Durable, int]],
                        timeout: float) -> list[BaseException | None]:
    """Wait until each (log, offset) is durable below offset, at most `timeout` s; per wait None, the
    storage error that failed it, or NotDurableInTime."""
    if all(log.is_durable(offset) for log, offset in waits):
        # Already durable (a log dir in memory, or an fsync that covered these appends): no wait to set up.
        return [None] * len(waits)
    loop = inbox.loop   # the loop this runs on (asyncio.get_running_loop() costs a getpid(2) on Python 3.11)
    state = _Waits(len(waits), loop.create_future())
    for index, (log, offset) in enumerate(waits):
        log.when_durable(offset, partial(_post, inbox, state, index))
    if state.left:
        deadlines = inbox.deadlines
        deadlines.add(state.done, timeout)
        try:
            await state.done
        finally:
            deadlines.discard(state.done)
    # A copy: waits that settle after the timeout must not change the answer being built.
    return list(state.outcomes)


def _post(inbox: LoopInbox, state: _Waits, index: int, point: int | BaseException) -> None:
    inbox.post(state.settle, index, point)

