"""Group commit: how a partition's appends become durable.

One thread at a time (the leader) fsyncs; everything appended before the
leader fixed its range rides on that fsync, and callers that arrived while it
ran wait and share the next one. So a burst of durable appends costs one fsync
per burst, not one per append. The leader first waits for appends already
under way (counted by `begin_write`/`end_write`), because those are exactly
the ones that would otherwise need an fsync of their own right after.

Waiting callers either block (`flush`) or hold a future (`durable`), the form
a server uses so that its request loop never blocks on a disk: the log dir's
`DirSyncer` (dir_sync.py) runs one fsync per turn for each partition with
waiters, in a thread of its own (and the shared pool, for several at once),
unless many partitions of the dir wait at once: then it claims each one's
range and makes them all durable with one syncfs of the dir's file system.

On a log dir kept in memory (tmpfs, ramfs: `FileSystem.memory_backed`) an
fsync writes nothing: there a waiter's recovery point follows the log's end at
once, in the waiter's thread, and no sync thread is woken.

A failed fsync takes the partition's whole log dir offline, through the same
`LogDirState` a failed write reaches (`logstore.log_dir_failures`): after one
the kernel may have dropped the dirty pages, so no later fsync may claim
durability; the callers and waiters get a `StorageIOError` (still the
`OSError` it was), and every later call on the dir KAFKA_STORAGE_ERROR.

Every fsync's time and the number of appends it covered go to `SYNC_STATS`,
plain counts in buckets that an embedding application (the broker's
Prometheus collector) reads when it likes; the library exports nothing.
"""
from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import os
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeAlias

from .errors import StorageError
from .log_dir_failures import LogDirState

if TYPE_CHECKING:
    from .dir_sync import DirSyncer

log = logging.getLogger(__name__)

# fsync releases the GIL, so partitions with waiters sync side by side.
_SYNC_WORKERS = max(4, 2 * (os.cpu_count() or 1))
_sync_pool: ThreadPoolExecutor | None = None
_sync_pool_lock = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    global _sync_pool
    with _sync_pool_lock:
        if _sync_pool is None:
            _sync_pool = ThreadPoolExecutor(_SYNC_WORKERS, thread_name_prefix="logstore-sync")
        return _sync_pool


def sync_pool() -> ThreadPoolExecutor:
    """The threads that run syncs for waiters (`when_durable`): per partition, or per log dir (dir_sync.py)."""
    return _pool()


# How a waiter hears of its offsets: the recovery point reached, or why it never will be.
Settle: TypeAlias = Callable[[int | BaseException], None]

# Upper bounds (inclusive) of the fsync-time buckets, ms, and of the appends-per-fsync buckets.
SYNC_MS_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class SyncStats:
    """The fsyncs of every GroupCommit of the process: how long each took (ms) and how many appends it made
    durable (Kafka's LogFlushRateAndTimeMs, and the group commit's batch size).

    Counts per bucket (the last one for values above every bound), with totals; updated under its own lock
    by the thread that ran the fsync, read without it (a reader may see one fsync half counted).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.time_counts = [0] * (len(SYNC_MS_BUCKETS) + 1)
        self.time_sum_ms = 0.0
        self.batch_counts = [0] * (len(BATCH_BUCKETS) + 1)
        self.batch_sum = 0
        self.syncs = 0

    def record(self, ms: float, appends: int) -> None:
        """One successful fsync of `ms` that covered `appends` appends."""
        with self._lock:
            self.syncs += 1
            self.time_counts[bisect_left(SYNC_MS_BUCKETS, ms)] += 1
            self.time_sum_ms += ms
            self.batch_counts[bisect_left(BATCH_BUCKETS, appends)] += 1
            self.batch_sum += appends


SYNC_STATS = SyncStats()


class GroupCommit:
    """The recovery point of one partition and the fsyncs that move it."""

    def __init__(self, recovery_point: int, *, end: Callable[[], int], sync: Callable[[int, int], None],
                 name: str = "", dir_state: LogDirState | None = None, syncer: DirSyncer | None = None,
                 covered: Callable[[int, int], None] | None = None, in_memory: bool = False):
        self._end = end
        # The log dir is on tmpfs: waiters need no sync (`when_durable`).
        self._in_memory = in_memory
        self._sync = sync
        # The log dir's syncer (dir_sync.py), and what the log does when a file-system sync stands in for `sync`.
        self._syncer = syncer
        self._covered = covered
        self._name = name
        self._dir = dir_state if dir_state is not None else LogDirState(os.path.dirname(name) or ".")
        # Reentrant: a truncation lowers the recovery point while holding `idle()`. Writers' counts take the
        # lock itself (C), not the condition's Python-level `with`: two per append.
        self._mutex = threading.RLock()
        self._cond = threading.Condition(self._mutex)
        self._recovery_point = recovery_point
        self._flushing = False
        self._closed = False
        self._writes_started = 0
        self._writes_done = 0
        self._writes_synced = 0     # appends begun before the last fsync that succeeded started
        self._urgent = 0
        self._waiters: list[tuple[int, int, Settle]] = []
        self._order = itertools.count()
        self._driving = False
        self.last_flush = time.monotonic()

    @property
    def recovery_point(self) -> int:
        """Every offset below this is on disk."""
        return self._recovery_point

    # -- writers ---------------------------------------------------------------------------

    def begin_write(self) -> None:
        """An append is under way (call before taking the log's lock)."""
        with self._mutex:
            self._writes_started += 1

    def end_write(self) -> None:
        """The append begun last by this thread has written its bytes or failed."""
        with self._mutex:
            self._writes_done += 1
            if self._flushing:
                self._cond.notify_all()

    @contextlib.contextmanager
    def urgent(self) -> Iterator[None]:
        """For holders of the log's lock: leaders stop waiting for appends that need that lock."""
        with self._cond:
            self._urgent += 1
            self._cond.notify_all()
        try:
            yield
        finally:
            with self._cond:
                self._urgent -= 1

    @contextlib.contextmanager
    def idle(self) -> Iterator[None]:
        """Hold off fsyncs while the caller changes the segments under them."""
        with self.urgent(), self._cond:
            while self._flushing:
                self._cond.wait()
            yield

    # -- flushing --------------------------------------------------------------------------

    def flush(self, offset: int | None = None) -> None:
        """Make every offset below `offset` (default: all appended) durable, sharing fsyncs."""
        claim = self._lead(offset, block=True)
        if claim is None:
            return
        ticket, start, end = claim
        done = False
        began = time.perf_counter()
        try:
            self._sync(start, end)
            done = True
            SYNC_STATS.record((time.perf_counter() - began) * 1000, ticket - self._writes_synced)
        except Exception as exc:
            # After a failed fsync the kernel may have dropped the dirty pages and a retry can
            # "succeed" without them: the dir goes offline, so nothing claims durability again.
            raise self._dir.fail(f"fsync of {self._name}", exc) from exc
        finally:
            self._finish(ticket, end, done)

    def _lead(self, offset: int | None, *, block: bool) -> tuple[int, int, int] | None:
        """Become the one that syncs: (ticket, start, end) once the appends under way are written, or None
        when nothing below `offset` is left to sync (or, unless `block`, another leader is at it)."""
        with self._cond:
            while True:
                self.check_healthy()
                end = self._end()
                target = end if offset is None else min(offset, end)
                if self._recovery_point >= target or self._closed:
                    return None
                if not self._flushing:
                    self._flushing = True
                    break
                if not block:
                    return None
                self._cond.wait()
            ticket = self._writes_started
            while self._writes_done < ticket and not self._urgent:
                self._cond.wait()
            return ticket, self._recovery_point, self._end()

    def _finish(self, ticket: int, end: int, done: bool) -> None:
        """The leader's sync of everything below `end` is over (`done`: it succeeded); settle who it satisfied."""
        with self._cond:
            self._flushing = False
            if done:
                self._writes_synced = max(self._writes_synced, ticket)
                self._recovery_point = max(self._recovery_point, end)
                self.last_flush = time.monotonic()
            ready = self._pop_ready()
            self._cond.notify_all()
        _settle_all(ready, self._recovery_point)

    def check_healthy(self) -> None:
        """Raise StorageError (LogDirOfflineError) once the log dir is offline: it takes no more writes."""
        self._dir.check()

    def _pop_ready(self) -> list[Settle]:
        ready = []
        while self._waiters and self._waiters[0][0] <= self._recovery_point:
            ready.append(heapq.heappop(self._waiters)[2])
        return ready

    def durable(self, offset: int) -> Future[int]:
        """A future that completes (with the recovery point) once every offset below `offset` is on disk."""
        fut: Future[int] = Future()
        self.when_durable(offset, lambda point: _settle_future(fut, point))
        return fut

    def is_durable(self, offset: int) -> bool:
        """Whether every offset below `offset` is on disk now (on a log dir in memory: once written)."""
        if self._in_memory and self._recovery_point < offset:
            self._follow_end()
        return self._recovery_point >= offset

    def when_durable(self, offset: int, settle: Settle) -> None:
        """Call `settle` once every offset below `offset` is on disk (with the recovery point), or with the
        error that means it never will be: at once in this thread, or later in the thread that synced.

        The form for callers that batch their own wake-ups (an event loop): no future per wait. On a log dir
        kept in memory (`in_memory`) the recovery point follows the log's end at once: an fsync there writes
        nothing, and handing it to the sync thread and back would cost two thread wake-ups for nothing."""
        if self._in_memory and self._recovery_point < offset:
            self._follow_end()
        now: int | BaseException | None = None
        start = False
        with self._cond:
            if self._recovery_point >= offset:
                now = self._recovery_point
            elif self._closed:
                now = StorageError(f"log {self._name} is closed")
            elif not self._dir.online:
                now = self._dir.error()
            else:
                heapq.heappush(self._waiters, (offset, next(self._order), settle))
                start = not self._driving
                self._driving = True
        if now is not None:
            settle(now)
        elif start:
            self._schedule()

    def _follow_end(self) -> None:
        # What is written is all the durability a file system in memory has: no sync to run or wait for.
        # Not while a leader syncs (its `_sync` walks the rolled segments `covered` forgets): then the
        # waiter takes a turn as on a disk.
        with self._cond:
            start, end = self._recovery_point, self._end()
            if end <= start or self._flushing or self._closed or not self._dir.online:
                return
            if self._covered is not None:
                self._covered(start, end)
            self._recovery_point = end
            self.last_flush = time.monotonic()
            ready = self._pop_ready()
        _settle_all(ready, end)

    def _schedule(self) -> None:
        """Queue this partition's next turn: at its log dir's syncer when it has one, else in the pool."""
        if self._syncer is not None:
            self._syncer.request(self)
        else:
            sync_pool().submit(self._drive)

    def _drive(self) -> None:
        # One fsync per turn, then back in the queue: partitions with waiters take turns.
        try:
            self.flush()
        except BaseException as exc:  # noqa: BLE001 - every waiter must hear of the failure
            log.error("%s: fsync failed: %s", self._name, exc)
            self._abandon(exc)
            return
        self._next_turn()

    def _next_turn(self) -> None:
        with self._cond:
            if not self._waiters or self._closed:
                self._driving = False
                return
        self._schedule()

    def _abandon(self, exc: BaseException) -> None:
        """Fail every waiter with `exc` (a failed sync, an offline dir) and stop driving."""
        with self._cond:
            failed = [w[2] for w in self._waiters]
            self._waiters.clear()
            self._driving = False
        _settle_all(failed, exc if isinstance(exc, Exception) else StorageError(str(exc)))

    # -- a sync shared by the log dir (logstore.dir_sync) -----------------------------------

    def drive_here(self) -> None:
        """Run this partition's next turn, a sync of its own, in the calling thread (a pool thread)."""
        self._drive()

    def drive_alone(self) -> None:
        """Run this partition's next turn in the pool with a sync of its own (what a partition of a log dir
        with few waiting partitions gets)."""
        sync_pool().submit(self._drive)

    def claim(self) -> tuple[int, int, int] | None:
        """For the log dir's syncer: lead this partition's next sync, which a sync of the whole file system
        will do; (ticket, start, end) with `covered(start, end)` done, or None when this turn needs no shared
        sync (nothing to sync, a sync of its own already running: it is driven as alone, or a failure: its
        waiters failed)."""
        try:
            claim = self._lead(None, block=False)
        except BaseException as exc:  # noqa: BLE001 - every waiter must hear of the failure
            self._abandon(exc)
            return None
        if claim is None:
            with self._cond:
                busy = self._flushing and bool(self._waiters)
            if busy:
                self.drive_alone()   # waits for that sync in the pool
            else:
                self._next_turn()
            return None
        if self._covered is not None:
            try:
                self._covered(claim[1], claim[2])
            except BaseException as exc:  # noqa: BLE001 - as a failed sync: released, waiters told
                self.settle_claim(claim[0], claim[2], exc)
                return None
        return claim

    def settle_claim(self, ticket: int, end: int, error: BaseException | None) -> None:
        """The shared sync of a claim is over: succeeded (`error` None), or failed and took the dir offline."""
        self._finish(ticket, end, error is None)
        if error is not None:
            self._abandon(error)
        else:
            self._next_turn()

    def appends_since_sync(self, ticket: int) -> int:
        """How many appends a sync claimed with `ticket` covers (for SYNC_STATS)."""
        return ticket - self._writes_synced

    def lower_to(self, offset: int) -> None:
        """After a truncation: nothing at or above `offset` exists any more."""
        with self._cond:
            self._recovery_point = min(self._recovery_point, offset)

    def close(self) -> None:
        """No more fsyncs; waiters that were not satisfied fail.

        The log's callbacks go too: they hold the log, which holds this, and in that cycle a closed (deleted)
        partition would wait for a full pass of the cycle collector (a frozen broker's are minutes apart);
        without it reference counting frees the partition at once."""
        with self._cond:
            while self._flushing:   # a sync under way still calls them
                self._cond.wait()
            self._closed = True
            self._end = itertools.repeat(self._end()).__next__
            self._sync = _closed_sync
            self._covered = None
            failed = [w[2] for w in self._waiters]
            self._waiters.clear()
            self._cond.notify_all()
        for settle in failed:
            settle(StorageError(f"log {self._name} closed before offset was durable"))


def _closed_sync(start: int, end: int) -> None:
    raise StorageError(f"offsets {start}-{end}: the log is closed")


class _Held(threading.local):
    settles: list[tuple[Settle, int | BaseException]] | None = None


_held = _Held()


def hold_settles() -> None:
    """In this thread, waiters satisfied (or failed) wait to hear of it until `run_held_settles()`: a sync
    thread tells them last, just before it sleeps, so that the event loop they wake does not find it still
    holding the GIL (a second wake-up of the loop, when it lets go)."""
    _held.settles = []


def run_held_settles() -> None:
    """Settle the waiters held since `hold_settles()` (or the last call); hold on."""
    held = _held.settles
    if held:
        _held.settles = []
        for settle, outcome in held:
            try:
                settle(outcome)
            except Exception:
                # One waiter's failing callback must not keep the others (or the thread's next turn) waiting.
                log.exception("a durability waiter's callback failed")


def _settle_all(settles: list[Settle], outcome: int | BaseException) -> None:
    held = _held.settles
    if held is not None:
        held.extend([(settle, outcome) for settle in settles])
    else:
        for settle in settles:
            settle(outcome)


def _settle_future(fut: Future[int], point: int | BaseException) -> None:
    if isinstance(point, BaseException):
        fut.set_exception(point)
    else:
        fut.set_result(point)


class RollFlusher:
    """One background thread that flushes segments that just rolled, as Kafka's scheduler does."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queue: list[tuple[Callable[[int], None], int, str]] = []
        self._thread: threading.Thread | None = None

    def submit(self, flush: Callable[[int], None], offset: int, name: str) -> None:
        """Call `flush(offset)` soon, on the flusher thread."""
        with self._cond:
            self._queue.append((flush, offset, name))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="logstore-flusher", daemon=True)
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue:
                    if not self._cond.wait(timeout=5.0):
                        self._thread = None
                        return
                flush, offset, name = self._queue.pop(0)
            try:
                flush(offset)
            except (OSError, ValueError, StorageError) as exc:
                log.warning("%s: background flush failed: %s", name, exc)


roll_flusher = RollFlusher()
