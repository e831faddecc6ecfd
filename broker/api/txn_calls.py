"""What the transaction APIs share: a transaction coordinator call run in steps on the event loop, each
fsync of `__transaction_state` or of a marker awaited there, holding no pool thread.

A step decides under the coordinator's lock, which is held only for moments (never across a write or
an fsync): when it is free the step runs on the loop, else in the coordinator pool as before, so the
loop never queues behind it. Between steps the id is claimed (its `pending` state), so the answers
are those of the blocking calls: the state is durable before the client hears of it, and a failed or
late fsync of a transition answers COORDINATOR_NOT_AVAILABLE with the id unchanged, as Kafka answers
a `__transaction_state` append that failed or timed out.
"""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, TypeVar, TypeVarTuple, cast

from logstore.broker.api import Request
from logstore.broker.api.kit import Outcome, attempt, coordinate
from logstore.broker.coordinator.txn_steps import Durably, Step
from logstore.errors import LogStoreError

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

# Kafka's request.timeout.ms default: how long its coordinator waits for a `__transaction_state` append.
WRITE_TIMEOUT_S = 30.0


class _Abandoned(Exception):
    """The request's task was cancelled while it waited (the broker stopping): the step is resumed as a
    wait that failed, so the id it claimed is not left claimed."""


async def durably(request: Request, call: Callable[[*Ts], Step[T]], *args: *Ts) -> Outcome[T]:
    """`call(*args)`, a coordinator's `*_durably` call, carried to its answer: each step on the loop when the
    coordinator's lock is free at once (else in the pool), each wait for an fsync on the loop."""
    lock = request.broker.transactions.lock
    outcome: Outcome[Step[T]] = await _soon(request, lock, call, *args)
    while outcome.ok and isinstance(outcome.value, Durably):
        step = outcome.value
        try:
            outcomes = await request.broker.until_durable(step.waits, WRITE_TIMEOUT_S)
        except asyncio.CancelledError:
            _abandon(step)
            raise
        outcome = await _soon(request, lock, step.resume, outcomes)
    # Not a step any more: the call's own result (or its failure).
    return cast(Outcome[T], outcome)


async def _soon(request: Request, lock: threading.Lock, call: Callable[[*Ts], T], *args: *Ts) -> Outcome[T]:
    """On the loop if `lock` is free at once (the call takes it itself, for a moment), else in the pool."""
    if lock.acquire(blocking=False):
        lock.release()
        return attempt(request, call, *args)
    pooled = asyncio.ensure_future(coordinate(request, call, *args))
    try:
        return await asyncio.shield(pooled)
    except asyncio.CancelledError:
        # The call goes on in its thread; a step it returns must still be resumed.
        pooled.add_done_callback(_abandon_pooled)
        raise


def _abandon_pooled(pooled: asyncio.Future[Outcome[Any]]) -> None:
    if pooled.cancelled() or pooled.exception() is not None:
        return
    step = pooled.result().value
    if isinstance(step, Durably):
        _abandon(step)


def _abandon(step: Durably[Any]) -> None:
    """Resume a step nobody waits for any more as if its fsyncs failed: the id it holds is released."""
    going_on: Step[Any] = step
    while isinstance(going_on, Durably):
        try:
            going_on = going_on.resume([_Abandoned("the request was cancelled")] * len(going_on.waits))
        except LogStoreError:
            return
