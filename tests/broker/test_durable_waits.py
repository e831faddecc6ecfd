"""until_durable: a request's waits for fsyncs on the event loop, over real logs, real files and real fsyncs."""
from __future__ import annotations

import asyncio
import os
import threading

import pytest

from both_loops import LOOPS, run_on
from logstore.broker.durable_waits import Deadlines, LoopInbox, NotDurableInTime, until_durable
from logstore.errors import StorageError
from logstore.log import Log

WAIT = 30


class _HeldSync:
    """The first fdatasync waits for `release` (then fails with `fail`, if given); later ones are real."""

    def __init__(self, monkeypatch, fail: BaseException | None = None):
        self.calls = 0
        self.entered = threading.Event()
        self.release = threading.Event()
        self._fail = fail
        self._real = os.fdatasync
        monkeypatch.setattr(os, "fdatasync", self)

    def __call__(self, fd: int) -> None:
        self.calls += 1
        if self.calls == 1:
            self.entered.set()
            assert self.release.wait(WAIT)
            if self._fail is not None:
                raise self._fail
        self._real(fd)


def _end(log: Log, value: bytes = b"x") -> int:
    return log.append_records([value]).last_offset + 1


def test_waits_on_two_logs_answer_once_both_are_durable(tmp_path):
    async def run():
        inbox = LoopInbox(asyncio.get_running_loop())
        with Log.open(str(tmp_path / "a-0")) as a, Log.open(str(tmp_path / "b-0")) as b:
            waits = [(a, _end(a)), (b, _end(b)), (b, _end(b))]
            assert await until_durable(inbox, waits, WAIT) == [None, None, None]
            assert a.recovery_point == 1 and b.recovery_point == 2
            # A wait that ended before its timeout leaves no deadline behind.
            assert len(inbox.deadlines) == 0
            # Already durable: answered without a wait.
            assert await until_durable(inbox, [(a, 1)], 0.001) == [None]
    asyncio.run(run())


def test_a_wait_past_its_timeout_is_not_durable_in_time_and_a_later_one_is(tmp_path, monkeypatch):
    async def run():
        inbox = LoopInbox(asyncio.get_running_loop())
        with Log.open(str(tmp_path / "a-0")) as a, Log.open(str(tmp_path / "b-0")) as b:
            b_end = _end(b)
            b.flush()
            sync = _HeldSync(monkeypatch)
            outcomes = await until_durable(inbox, [(a, _end(a)), (b, b_end)], 0.05)
            # The held fsync may start after the wait gave up (a loaded machine): it runs all the same.
            assert await asyncio.get_running_loop().run_in_executor(None, sync.entered.wait, WAIT)
            assert isinstance(outcomes[0], NotDurableInTime) and outcomes[1] is None
            sync.release.set()
            assert await until_durable(inbox, [(a, 1)], WAIT) == [None]
            assert len(inbox.deadlines) == 0
    asyncio.run(run())


def test_a_failed_fsync_is_each_waits_storage_error(tmp_path, monkeypatch):
    async def run():
        inbox = LoopInbox(asyncio.get_running_loop())
        log = Log.open(str(tmp_path / "a-0"))
        sync = _HeldSync(monkeypatch, fail=OSError(5, "Input/output error"))
        waiting = asyncio.ensure_future(until_durable(inbox, [(log, _end(log)), (log, _end(log))], WAIT))
        await asyncio.get_running_loop().run_in_executor(None, sync.entered.wait, WAIT)
        sync.release.set()
        outcomes = await waiting
        assert all(isinstance(o, OSError) and "Input/output error" in str(o) for o in outcomes)
        # The log dir is offline: a later wait is refused at once, without an fsync.
        (later,) = await until_durable(inbox, [(log, log.log_end_offset + 1)], WAIT)
        assert isinstance(later, StorageError) and sync.calls == 1
        with pytest.raises(StorageError, match="failed fsync"):
            log.close()
    asyncio.run(run())


def test_calls_posted_from_threads_run_on_the_loop_in_order(tmp_path):
    async def run():
        loop = asyncio.get_running_loop()
        inbox = LoopInbox(loop)
        ran: list[tuple[int, bool]] = []
        done = loop.create_future()
        loop_thread = threading.get_ident()

        def note(i: int) -> None:
            ran.append((i, threading.get_ident() == loop_thread))
            if len(ran) == 200:
                done.set_result(None)

        posters = [threading.Thread(target=lambda k=k: [inbox.post(note, k * 100 + i) for i in range(100)])
                   for k in range(2)]
        for t in posters:
            t.start()
        await asyncio.wait_for(done, WAIT)
        for t in posters:
            t.join()
        assert all(on_loop for _, on_loop in ran)
        for k in range(2):
            assert [i for i, _ in ran if i // 100 == k] == [k * 100 + i for i in range(100)]
    asyncio.run(run())


@LOOPS
def test_a_deadline_before_the_armed_one_is_kept_first(new_loop):
    async def run():
        loop = asyncio.get_running_loop()
        deadlines = Deadlines(loop)
        late, soon = loop.create_future(), loop.create_future()
        deadlines.add(late, WAIT)
        started = loop.time()
        deadlines.add(soon, 0.05)
        await asyncio.wait_for(soon, WAIT)
        assert loop.time() - started >= 0.05 - 0.001 and not late.done() and len(deadlines) == 1
        deadlines.discard(late)
        assert len(deadlines) == 0
    run_on(new_loop, run)


@LOOPS
def test_the_timer_goes_on_for_the_deadlines_left_once_the_earliest_wait_ended(new_loop):
    async def run():
        loop = asyncio.get_running_loop()
        deadlines = Deadlines(loop)
        ended, waiting = loop.create_future(), loop.create_future()
        deadlines.add(ended, 0.02)
        deadlines.add(waiting, 0.1)
        ended.set_result(None)       # its wait is over before its deadline
        deadlines.discard(ended)
        started = loop.time()
        await asyncio.wait_for(waiting, WAIT)
        assert loop.time() - started >= 0.1 - 0.02 - 0.001 and len(deadlines) == 0
    run_on(new_loop, run)
