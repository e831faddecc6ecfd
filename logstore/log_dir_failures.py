"""Log dirs taken offline by an I/O error: Kafka's LogDirFailureChannel, the one way storage gives up on data.

Kafka's rule, which this module applies: an I/O error on a log dir's write
path (an append, a roll, an index, a snapshot, a checkpoint, an fsync) means
what is on that disk can no longer be trusted, so the whole dir goes
offline. Its partitions then answer KAFKA_STORAGE_ERROR to reads and writes,
nothing more is written there, the store writes no clean-shutdown marker for
it (the next start recovers every tail in it), and once every log dir is
offline the broker stops. A failed fsync is such an error too: after one the
kernel may have dropped the dirty pages, and a retry could "succeed" without
them.

One exception keeps a full disk from costing a dir: an ENOSPC whose call
left the files as they were (`StorageIOError.intact`: the stray bytes of a
torn write cut back, a temporary file removed) fails only that call, with a
retriable KAFKA_STORAGE_ERROR; the dir stays online and appends succeed
again once space returns.
"""
from __future__ import annotations

import errno
import logging
import os
import threading
from collections.abc import Callable, Iterable

from logstore.errors import LogDirOfflineError, StorageError, StorageIOError

log = logging.getLogger(__name__)

__all__ = ["LogDirFailureChannel", "LogDirState", "write_failed"]


class LogDirState:
    """One log dir: online, or offline with the failure that took it there (the first one; it stays)."""

    def __init__(self, path: str, on_offline: Callable[[LogDirState], None] | None = None):
        self.path = path
        self._on_offline = on_offline
        self._lock = threading.Lock()
        self.failure: str | None = None
        """What took the dir offline, e.g. `a failed fsync: [Errno 5] Input/output error`; None while online."""

    @property
    def online(self) -> bool:
        """Whether the dir still takes reads and writes."""
        return self.failure is None

    def error(self) -> LogDirOfflineError:
        """What a call on this offline dir raises."""
        return LogDirOfflineError(f"log dir {self.path} is offline after {self.failure}")

    def check(self) -> None:
        """Raise LogDirOfflineError once the dir is offline."""
        if self.failure is not None:
            raise self.error()

    def fail(self, what: str, exc: BaseException) -> StorageError:
        """Take the dir offline because `what` (e.g. `fsync`, `append to <file>`) failed with `exc`; returns
        the error the failed call raises: a StorageError as it is, an `OSError` as a `StorageIOError`."""
        # The OSError at the root says it all (errno, file); a StorageIOError only wraps one.
        root = exc.__cause__ if isinstance(exc, StorageIOError) and isinstance(exc.__cause__, OSError) else exc
        reason = f"a failed {what}: {root}"
        with self._lock:
            first = self.failure is None
            if first:
                self.failure = reason
        if first:
            log.error("log dir %s is offline after %s; its partitions answer KAFKA_STORAGE_ERROR until a restart "
                      "recovers them", self.path, reason)
            if self._on_offline is not None:
                self._on_offline(self)
        message = f"{what} failed: {root}; log dir {self.path} is offline"
        if isinstance(exc, StorageError) and not isinstance(exc, StorageIOError):
            return exc
        return StorageIOError(message, exc) if isinstance(exc, OSError) else LogDirOfflineError(message)


def write_failed(state: LogDirState, what: str, exc: BaseException, *, intact: bool = False) -> StorageError:
    """The error a failed write of the log dir `state` raises: a retriable one, the dir online, for an ENOSPC
    that left the files as they were (`intact`, or the `StorageIOError`'s own flag); anything else takes the
    dir offline. An error already about an offline dir is returned as it is."""
    if isinstance(exc, LogDirOfflineError):
        return exc
    intact = intact or (isinstance(exc, StorageIOError) and exc.intact)
    if intact and isinstance(exc, OSError) and exc.errno == errno.ENOSPC and state.online:
        # The same object when the layer below already made it: its message names the file.
        return exc if isinstance(exc, StorageIOError) else StorageIOError(
            f"{what} failed: {exc.strerror or exc}; nothing was written (the log is as before)", exc, intact=True)
    return state.fail(what, exc)


class LogDirFailureChannel:
    """The states of a store's log dirs, and what happens when they go offline.

    `on_all_offline(reason)` (settable; called from the failing thread) is
    how a broker learns it must stop: Kafka halts once no log dir is left.
    """

    def __init__(self, log_dirs: Iterable[str]):
        self._states = {d: LogDirState(d, self._went_offline) for d in log_dirs}
        self.on_all_offline: Callable[[str], None] | None = None

    def state(self, log_dir: str) -> LogDirState:
        """The state of `log_dir` (one of the store's, given as its absolute path)."""
        return self._states[os.path.abspath(log_dir)]

    @property
    def offline_dirs(self) -> list[str]:
        """The log dirs an I/O error took offline, in the store's order."""
        return [d for d, s in self._states.items() if not s.online]

    def _went_offline(self, state: LogDirState) -> None:
        if all(not s.online for s in self._states.values()):
            reason = "; ".join(f"{d}: {s.failure}" for d, s in self._states.items())
            log.critical("every log dir is offline (%s)", reason)
            if self.on_all_offline is not None:
                self.on_all_offline(reason)
