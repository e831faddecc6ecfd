"""A transition in steps, split where it waits for an fsync, so no thread need be held across the wait.

A coordinator call that writes returns a `Durably` step when its appends are
made but not yet durable: the (log, end offset) pairs to wait for, and what
to do once they are settled (`resume`, given per wait None or the error that
failed it). The broker waits on its event loop (`until_durable`, one wake-up
per fsync) and resumes there; `run_blocking` is the same call for a caller
that may block (the embedded clients, the upkeep thread), syncing in its own
thread as an append with durable=True does.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeAlias, TypeVar

if TYPE_CHECKING:
    from logstore.log import Log

T = TypeVar("T")
U = TypeVar("U")
E = TypeVar("E", bound=BaseException)

Waits = list[tuple["Log", int]]
Outcomes = list[BaseException | None]


@dataclass(frozen=True, slots=True)
class Durably(Generic[T]):
    """Appends made that must be durable before the call goes on: `resume(outcomes)` then answers (or waits
    again). Every step is resumed exactly once, whatever the outcomes: the id it claimed is released there."""

    waits: Waits
    resume: Callable[[Outcomes], T | Durably[T]]


Step: TypeAlias = T | Durably[T]


def after(step: Step[T], go_on: Callable[[T], Step[U]]) -> Step[U]:
    """`go_on(result)` once `step` has its result (at once if it has)."""
    if isinstance(step, Durably):
        resume = step.resume
        return Durably(step.waits, lambda outcomes: after(resume(outcomes), go_on))
    return go_on(step)


def catching(step: Step[T], kind: type[E], handle: Callable[[E], T]) -> Step[T]:
    """`step`, with an exception of `kind` that a later resume of it raises answered by `handle(exc)`."""
    if not isinstance(step, Durably):
        return step
    resume = step.resume

    def guarded(outcomes: Outcomes) -> Step[T]:
        try:
            going_on = resume(outcomes)
        except kind as exc:
            return handle(exc)
        return catching(going_on, kind, handle)
    return Durably(step.waits, guarded)


def first_error(outcomes: Outcomes) -> BaseException | None:
    """The first wait that failed (or timed out), None when all are durable."""
    for outcome in outcomes:
        if outcome is not None:
            return outcome
    return None


def run_blocking(step: Step[T]) -> T:
    """The call's result, syncing each step's appends in this thread (shared with concurrent fsyncs)."""
    while isinstance(step, Durably):
        step = step.resume([_flush(log, end) for log, end in step.waits])
    return step


def _flush(log: Log, end: int) -> BaseException | None:
    try:
        log.flush(end)
    except Exception as exc:  # noqa: BLE001 - the step decides what a failed fsync means
        return exc
    return None
