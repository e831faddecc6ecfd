"""One sync of a log dir's file system for every partition of the dir that waits on one.

A partition's group commit (durability.py) shares an fdatasync among that
partition's appends; a producer that spreads acks=all records over 1,000
partitions still cost 1,000 fdatasyncs a window, each a journal commit (about
1 ms of disk time here, ~50 us of kernel CPU). Here a `DirSyncer` per log dir
takes the partitions with waiters in turns: when at least `SHARED_MIN` of them
wait at once, it claims each one's range (as a leader of its group commit: the
appends under way are waited for), makes them all durable with one syncfs(2)
of the file system holding the dir, then moves each recovery point and
settles the waiters. syncfs writes every dirty page and inode of that file
system and commits its journal: the segments' data, the indexes' mapped pages
and lengths, the txnindex, new directory entries: everything `Log._sync`
fsyncs one by one (the log's `covered` hook does its bookkeeping instead).

Why `SHARED_MIN` is 8: syncfs also writes every unrelated dirty file on that
file system (another process's, a cleaner's output), which costs one sync
of a few partitions more than their own fdatasyncs; measured on this VM's
ext4, four threads fdatasyncing N files of fresh 100 B writes took 0.5 ms
(N=2), 0.8 ms (8), 1.5 ms (16), 8.6 ms (100), 100 ms (1,000), one syncfs
0.2-0.6 ms, 1 ms and 10 ms: from about 8 files one journal commit is the
clear win, below it the per-file path keeps other files' writeback out of
the acknowledgement's latency. But that per-file path costs the broker far
more CPU than its syncs: an fdatasync in a pool thread per partition, each
thread taking the GIL back from the event loop twice. With 16 transactional
producers on ext4 a transaction cost 740 us of broker CPU with it and 540 us
with a syncfs for every turn of two or more partitions (OffsetCommits from 20
clients 129 and 96 us), and the rate rose from 1,290 to 1,580 txn/s. So a
turn of 2 to 7 partitions shares a syncfs too while the machine holds little
file data not yet written (`unwritten_bytes`: /proc/meminfo's Dirty and
Writeback, at most `QUIET_UNWRITTEN_MAX`); with more, a syncfs would write
it first (here 16 MiB took 10 ms, 256 MiB 88 ms; a 200 MB/s disk would take
20 ms for 4 MiB), and the turn keeps to one fdatasync per partition, the last
in the dir's thread, the others side by side in the shared pool. A turn of
one partition is always its own fdatasync, in the dir's thread.

The turns run in a thread of the dir's own, asleep on an eventfd between them.
Handing a turn to it and back is most of what a durable wait costs on fast
storage (on tmpfs a single-record acks=all Produce spent ~60 us of broker CPU
on it, next to ~100 us for the rest; a dir on tmpfs now takes no turns at all:
`memory_backed`), and most of that is thread wake-ups and GIL hand-offs rather
than Python. So a turn costs one wake-up each way: the
thread is woken by a write that lets go of the GIL (the thread can take it at
once), and it tells the waiters of a turn last, just before it sleeps
(`durability.hold_settles`), so that an event loop they wake does not find it
still holding the GIL.

A failed syncfs (Linux >= 5.8 reports writeback errors of the file system
since the descriptor was opened) takes the dir offline through its
`LogDirState` exactly as a failed fsync does, and every claimed partition's
waiters get the error.
"""
from __future__ import annotations

import logging
import os
import select
import threading
import time
import weakref

from .durability import SYNC_STATS, GroupCommit, hold_settles, run_held_settles
from .filesystem import FileSystem
from .log_dir_failures import LogDirState

log = logging.getLogger(__name__)

__all__ = ["DirSyncer", "QUIET_UNWRITTEN_MAX", "SHARED_MIN", "dir_syncer"]

SHARED_MIN = 8   # partitions waiting at once from which one syncfs serves them whatever is unwritten (see above)
# Below SHARED_MIN, two or more share a syncfs while the machine's unwritten file data is at most this.
QUIET_UNWRITTEN_MAX = 4 << 20
# How long that answer is kept. Reading /proc/meminfo costs ~13 us of CPU and lets the GIL go three times, for
# a sync thread taking ~1,000 turns a second; a turn that finds it stale risks one slow syncfs.
QUIET_RECHECK_S = 0.01
_clock = time.monotonic
IDLE_EXIT_S = 30.0   # a dir's sync thread ends after this long without turns (a new request starts another)


class DirSyncer:
    """The turns of one log dir's partitions that wait for durability: shared syncs or their own."""

    def __init__(self, state: LogDirState, fs: FileSystem, shared_min: int = SHARED_MIN):
        # Weakly: the registry below keys syncers by their state, which must be able to die with its store.
        self._state = weakref.proxy(state)
        self._path = state.path
        self._fs = fs
        self.shared_min = shared_min
        # A dir on tmpfs: its syncs are no-ops, which its partitions' waiters skip (durability.py).
        self.memory_backed = fs.memory_backed(state.path)
        self._lock = threading.Lock()
        self._pending: list[GroupCommit] = []
        self._quiet_now, self._quiet_until = False, 0.0   # `_quiet`'s last answer, and until when it holds
        self._running = False      # turns are being run (or their thread woken) until `_pending` is empty
        self._thread: threading.Thread | None = None
        # The thread sleeps in a read of this eventfd; a write wakes it (`_start_turns`).
        self._wake = os.eventfd(0, os.EFD_CLOEXEC)
        weakref.finalize(self, os.close, self._wake)

    def request(self, group: GroupCommit) -> None:
        """`group` has waiters and no turn queued: give it one."""
        with self._lock:
            self._pending.append(group)
            if self._running:
                return
            self._running = True
        self._start_turns()

    def _start_turns(self) -> None:
        # The dir's own thread, not a pool submit per turn (a Future, a work item, a queue, a semaphore):
        # one eventfd write, whose syscall runs without the GIL, so the thread it wakes can take it at once.
        thread = None
        with self._lock:
            if self._thread is None:
                thread = self._thread = threading.Thread(target=self._serve, name=f"logstore-sync {self._path}",
                                                         daemon=True)
        if thread is not None:
            thread.start()
        else:
            os.eventfd_write(self._wake, 1)

    def _serve(self) -> None:
        # One eventfd write per change of `_running` to True while the thread lives, one read per `_run`
        # after the first; after IDLE_EXIT_S without one the thread ends (the next request starts another).
        hold_settles()
        idle = select.poll()
        idle.register(self._wake, select.POLLIN)
        while True:
            try:
                self._run()
            except Exception:
                # A turn's groups lost it (their waiters time out), as they would in a pool; the dir's
                # later turns must not (the next `_run` finds what is pending).
                log.exception("%s: a sync turn failed", self._path)
                continue
            if not idle.poll(IDLE_EXIT_S * 1000):
                with self._lock:
                    if not self._running:
                        self._thread = None
                        return
            os.eventfd_read(self._wake)

    def _run(self) -> None:
        # Whoever asked while a turn ran is the next turn: a shared sync's time gathers the next batch.
        # The waiters a turn satisfied hear of it before the next turn begins (when this thread holds
        # them back, as `_serve` does: then last thing before it sleeps).
        try:
            while True:
                run_held_settles()
                with self._lock:
                    batch, self._pending = self._pending, []
                    if not batch:
                        self._running = False
                        return
                if len(batch) >= self.shared_min or (len(batch) > 1 and self._quiet()):
                    self._sync_shared(batch)
                else:
                    # An fdatasync each, side by side in the pool; the last one in this thread, which would
                    # otherwise only hand it to another (a single partition's turn costs one thread wake-up).
                    for group in batch[:-1]:
                        group.drive_alone()
                    batch[-1].drive_here()
        finally:
            run_held_settles()

    def _quiet(self) -> bool:
        """Whether a syncfs now would write little but the turn's own appends (asked of the machine at most
        every QUIET_RECHECK_S)."""
        now = _clock()
        if now >= self._quiet_until:
            unwritten = self._fs.unwritten_bytes()
            self._quiet_now = unwritten is not None and unwritten <= QUIET_UNWRITTEN_MAX
            self._quiet_until = now + QUIET_RECHECK_S
        return self._quiet_now

    def _sync_shared(self, batch: list[GroupCommit]) -> None:
        claims = [(group, claim) for group in batch if (claim := group.claim()) is not None]
        if not claims:
            return
        appends = sum(group.appends_since_sync(ticket) for group, (ticket, _, _) in claims)
        error: BaseException | None = None
        began = time.perf_counter()
        try:
            self._fs.syncfs(self._path)
            SYNC_STATS.record((time.perf_counter() - began) * 1000, appends)
        except Exception as exc:
            # As after a failed fsync: the kernel may have dropped the pages, nothing claims durability again.
            error = self._state.fail(f"syncfs of {self._path}", exc)
            log.error("%s: syncfs failed: %s", self._path, exc)
        except BaseException as exc:  # noqa: BLE001 - a power cut in a test: the waiters hear of it, the syncer goes on
            error = exc
        for group, (ticket, _, end) in claims:
            group.settle_claim(ticket, end, error)


_syncers: weakref.WeakKeyDictionary[LogDirState, DirSyncer] = weakref.WeakKeyDictionary()
_syncers_lock = threading.Lock()


def dir_syncer(state: LogDirState, fs: FileSystem) -> DirSyncer:
    """The syncer of the log dir `state` stands for (one per state: the store's logs of a dir share it)."""
    with _syncers_lock:
        syncer = _syncers.get(state)
        if syncer is None:
            syncer = _syncers[state] = DirSyncer(state, fs)
        return syncer
