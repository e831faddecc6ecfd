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
the acknowledgement's latency. A smaller turn runs as before: one fdatasync
per partition in the shared pool.

A failed syncfs (Linux >= 5.8 reports writeback errors of the file system
since the descriptor was opened) takes the dir offline through its
`LogDirState` exactly as a failed fsync does, and every claimed partition's
waiters get the error.
"""
from __future__ import annotations

import logging
import threading
import time
import weakref

from .durability import SYNC_STATS, GroupCommit, sync_pool
from .filesystem import FileSystem
from .log_dir_failures import LogDirState

log = logging.getLogger(__name__)

__all__ = ["DirSyncer", "SHARED_MIN", "dir_syncer"]

SHARED_MIN = 8   # partitions waiting at once from which one syncfs serves them (see above)


class DirSyncer:
    """The turns of one log dir's partitions that wait for durability: shared syncs or their own."""

    def __init__(self, state: LogDirState, fs: FileSystem, shared_min: int = SHARED_MIN):
        # Weakly: the registry below keys syncers by their state, which must be able to die with its store.
        self._state = weakref.proxy(state)
        self._path = state.path
        self._fs = fs
        self.shared_min = shared_min
        self._lock = threading.Lock()
        self._pending: list[GroupCommit] = []
        self._running = False

    def request(self, group: GroupCommit) -> None:
        """`group` has waiters and no turn queued: give it one."""
        with self._lock:
            self._pending.append(group)
            if self._running:
                return
            self._running = True
        sync_pool().submit(self._run)

    def _run(self) -> None:
        # Whoever asked while a turn ran is the next turn: a shared sync's time gathers the next batch.
        while True:
            with self._lock:
                batch, self._pending = self._pending, []
                if not batch:
                    self._running = False
                    return
            if len(batch) < self.shared_min:
                # An fdatasync each, side by side in the pool; the last one in this thread, which would
                # otherwise only hand it to another (a single partition's turn costs one thread wake-up).
                for group in batch[:-1]:
                    group.drive_alone()
                batch[-1].drive_here()
            else:
                self._sync_shared(batch)

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
