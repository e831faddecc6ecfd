"""Waiting on the event loop for appends to become durable, with one wake-up per fsync.

A request that answers after the fsync (acks=all, an offset commit) used to hold a
`concurrent.futures.Future` per partition, chained to an asyncio future, and
`asyncio.wait` with a timeout: several objects, callbacks and a self-pipe write
per waiter. Here the sync thread posts every waiter its fsync satisfied to one
inbox, drained by one loop callback, and a request waits on one loop future.
"""
from __future__ import annotations

import asyncio
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
        timer = loop.call_later(timeout, _time_out, state.done)
        try:
            await state.done
        finally:
            timer.cancel()
    # A copy: waits that settle after the timeout must not change the answer being built.
    return list(state.outcomes)


def _post(inbox: LoopInbox, state: _Waits, index: int, point: int | BaseException) -> None:
    inbox.post(state.settle, index, point)


def _time_out(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)
