"""The time a request's handling takes, for `request_percentage` quotas (Kafka's request handler time).

Kafka measures each request's time on its handler thread. Here a handler
runs as steps on the event loop, with blocking calls sent to the
coordinator pool; both are its time. `measured(quotas, request, handler)`
runs the handler's coroutine step by step, adding each step's time on the
loop to the request's `RequestClock`, and `in_pool(call)` wraps a call the
handler sends to the pool so that its time there is added too. When the
handler is done, its time (as a percentage of one thread-second) is recorded
against the client's request quota; if that is over, the response carries
the throttle time and the connection is muted for it (`Request.throttle`).
Produce and Fetch record it themselves (`request_throttle`), as Kafka's
KafkaApis does, to answer with the larger of their byte-rate throttle and
this one.
"""
from __future__ import annotations

import dataclasses
import time
import types
from collections.abc import Callable, Coroutine, Generator
from contextvars import ContextVar
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from kio.static.primitive import i32Timedelta

from logstore.broker.protocol import NATIVE_ANSWERS, ZERO_MS

if TYPE_CHECKING:
    from logstore.broker.api import Request
    from logstore.broker.quotas import ClientQuotas

__all__ = ["EXEMPT_APIS", "RequestClock", "in_pool", "measured", "request_throttle", "throttle_field",
           "with_throttle_time"]

_T = TypeVar("_T")
NANOS_TO_PERCENT = 100 / 1_000_000_000
# SaslHandshake and SaslAuthenticate run before the client has a principal: not charged to it.
EXEMPT_APIS = frozenset({17, 36})


@dataclasses.dataclass
class RequestClock:
    """The ns one request spent being handled so far; `recorded` once charged to its client."""

    ns: int = 0
    recorded: bool = False

    def add(self, ns: int) -> None:
        """Add time spent on this request (a loop step, a pool call); GIL-atomic enough for a counter
        only its own request's calls touch, one at a time."""
        self.ns += ns


_CLOCK: ContextVar[RequestClock | None] = ContextVar("logstore_request_clock", default=None)


@types.coroutine
def _timed(coro: Coroutine[Any, Any, _T], clock: RequestClock) -> Generator[Any, Any, _T]:
    """Drive `coro` as the awaiting task would, timing each of its steps."""
    value: Any = None
    error: BaseException | None = None
    while True:
        start = time.perf_counter_ns()
        try:
            yielded = coro.send(value) if error is None else coro.throw(error)
        except StopIteration as done:
            clock.add(time.perf_counter_ns() - start)
            result: _T = done.value
            return result
        clock.add(time.perf_counter_ns() - start)
        try:
            value, error = (yield yielded), None
        except BaseException as exc:  # noqa: BLE001 - handed to the handler, as the task would
            value, error = None, exc


def in_pool(call: Callable[..., _T]) -> Callable[..., _T]:
    """`call`, charging its time in a worker thread to the request being handled (if any)."""
    clock = _CLOCK.get()
    if clock is None:
        return call

    def timed(*args: Any) -> _T:
        start = time.perf_counter_ns()
        try:
            return call(*args)
        finally:
            clock.add(time.perf_counter_ns() - start)
    return timed


def request_throttle(quotas: ClientQuotas, request: Request) -> int:
    """Charge the request's time so far to its client's request quota; the throttle time in ms (Kafka's
    ClientRequestQuotaManager.maybeRecordAndGetThrottleTimeMs). 0 outside `measured`."""
    clock = _CLOCK.get()
    if clock is None or clock.recorded or request.api_key in EXEMPT_APIS:
        return 0
    clock.recorded = True
    return quotas.request.record(request.principal.name, request.client_id or "", clock.ns * NANOS_TO_PERCENT)


def throttle_field(ms: int) -> i32Timedelta:
    """A response's throttle_time_ms field of `ms`."""
    return ZERO_MS if ms == 0 else i32Timedelta.parse(timedelta(milliseconds=ms))


def with_throttle_time(response: Any, ms: int) -> Any:
    """A kio response with `throttle_time` set to `ms` (unchanged if it has no such field), or a natively
    encoded answer with its `throttle_ms`."""
    if isinstance(response, NATIVE_ANSWERS):
        return response._replace(throttle_ms=ms)
    if dataclasses.is_dataclass(response) and not isinstance(response, type) \
            and any(f.name == "throttle_time" for f in dataclasses.fields(response)):
        return dataclasses.replace(response, throttle_time=throttle_field(ms))
    return response


async def measured(quotas: ClientQuotas, request: Request, handler: Coroutine[Any, Any, _T]) -> _T:
    """Run a handler's coroutine, timing it for the client's request quota; its answer carries the throttle
    time if the quota is over (the connection is then muted for it)."""
    clock = RequestClock()
    token = _CLOCK.set(clock)
    try:
        response = await _timed(handler, clock)
        if response is None or not quotas.request.enabled:
            return response
        ms = request_throttle(quotas, request)
    finally:
        _CLOCK.reset(token)
    if ms > 0:
        quotas.request.throttled(request.principal.name, request.client_id or "", ms)
        request.throttle(ms)
        response = with_throttle_time(response, ms)
    return response
