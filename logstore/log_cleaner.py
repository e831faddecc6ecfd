"""The background log cleaner of a LogManager, and the files it keeps in each log dir.

`cleaner-offset-checkpoint` (Kafka's: where each compacted partition's next
round starts) and `cleaner-state.json` (ours: the last round's figures and
the uncleanable partitions, for `logstore cleaner`; Kafka ignores files it
does not know in a log dir). The rounds themselves are `logstore.cleaner`.

As Kafka's LogCleanerManager does, a partition whose round fails on its data
(a corrupt batch) is marked uncleanable in its log dir: the failure is
logged once, the partition is left out of every later round, and the other
partitions go on being cleaned. The mark lasts until the store is opened
again, or until the log no longer holds the segments it had when it failed
(the partition deleted, truncated, or its old segments removed), when the
partition is tried again.

A storage failure is the disk's, not the partition's, and marks nothing (Kafka's
CleanerThread.cleanLog): an I/O error takes the log dir offline (its logs are
then left alone), except an ENOSPC whose round removed its output, which only
puts the round off; the partition is cleaned once space returns. The
cleaner's own files (`cleaner-offset-checkpoint`, `cleaner-state.json`)
that a full disk refuses are kept in memory and written at the next chance.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from logstore.checkpoints import CorruptCheckpointError, OffsetCheckpoint, write_atomically
from logstore.cleaner import Cleaner, CleanerStats, CleaningAborted, LogToClean, covering, log_to_clean
from logstore.errors import LogDirOfflineError, LogStoreError, StorageIOError
from logstore.filesystem import OS, FileSystem
from logstore.log import Log
from logstore.log_dir_failures import write_failed
from logstore.segment import LogSegment

log = logging.getLogger(__name__)

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
# Not Kafka's (it keeps these in metrics): what `logstore cleaner` shows; Kafka ignores the file.
CLEANER_STATE = "cleaner-state.json"
# Kafka's broker settings for the cleaner, with its defaults.
CLEANER_DEFAULTS: dict[str, object] = {
    "log.cleaner.enable": True,
    "log.cleaner.threads": 1,
    "log.cleaner.dedupe.buffer.size": 128 * 1024 * 1024,
    "log.cleaner.io.buffer.load.factor": 0.9,
    "log.cleaner.io.buffer.size": 512 * 1024,
    "log.cleaner.backoff.ms": 15_000,
}
# Those a running cleaner takes at once (`LogCleaner.reconfigure`), as Kafka's RECONFIGURABLE_CONFIGS.
LIVE_CLEANER_SETTINGS = frozenset({"log.cleaner.dedupe.buffer.size", "log.cleaner.io.buffer.load.factor",
                                   "log.cleaner.io.buffer.size", "log.cleaner.backoff.ms"})


def _read_state(log_dir: str, fs: FileSystem) -> dict[str, dict[str, dict[str, Any]]]:
    """`cleaner-state.json` of a log dir: {"logs": figures per partition, "uncleanable": marks per partition}."""
    path = os.path.join(log_dir, CLEANER_STATE)
    try:
        doc = json.loads(fs.read_file(path).decode("utf-8"))
    except FileNotFoundError:
        return {"logs": {}, "uncleanable": {}}
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptCheckpointError(path, 1, str(exc)) from None
    if not isinstance(doc, dict) or doc.get("version") != 0 or not isinstance(doc.get("logs"), dict) \
            or not isinstance(doc.get("uncleanable", {}), dict):
        raise CorruptCheckpointError(path, 1, "expected version 0 and logs")
    return {"logs": doc["logs"], "uncleanable": doc.get("uncleanable", {})}


def read_cleaner_state(log_dir: str, fs: FileSystem = OS) -> dict[str, dict[str, Any]]:
    """The last round's figures per partition (`<topic>-<partition>`) in one log dir ({} if none yet)."""
    return _read_state(log_dir, fs)["logs"]


def read_uncleanable(log_dir: str, fs: FileSystem = OS) -> dict[str, dict[str, Any]]:
    """The partitions (`<topic>-<partition>`) the running store's cleaner marked uncleanable in one log dir,
    each with `since_ms` and `error`."""
    return _read_state(log_dir, fs)["uncleanable"]


@dataclass(frozen=True)
class Uncleanable:
    """A partition whose cleaning failed (Kafka's uncleanable partition): when, why, and which log and
    inactive segments (with their sizes in bytes) it had then."""

    since_ms: int
    error: str
    log: Log
    segments: tuple[tuple[LogSegment, int], ...]

    def holds(self, current: Log | None) -> bool:
        """Whether the mark still holds for the partition's log now: the same log, still holding every segment
        it failed on at the same size (new segments may have rolled since)."""
        if current is not self.log or current.closed:
            return False
        now = current.segments
        return all(size == segment.size and any(held is segment for held in now) for segment, size in self.segments)


def read_cleaner_checkpoints(log_dir: str, fs: FileSystem = OS) -> dict[tuple[str, int], int]:
    """The cleaner checkpoint of one log dir ({} if there is none)."""
    try:
        return OffsetCheckpoint(os.path.join(log_dir, CLEANER_CHECKPOINT), fs).read()
    except FileNotFoundError:
        return {}


class LogCleaner:
    """The background cleaner of a LogManager: picks the filthiest compacted log and cleans it.

    One thread (log.cleaner.threads above 1 is taken as 1: a second would only
    contend for the same two cores). Rounds wait `log.cleaner.backoff.ms` when
    nothing is due; `wake()` starts one now.
    """

    def __init__(self, logs: Callable[[], Mapping[tuple[str, int], Log]], log_dirs: Sequence[str],
                 settings: Mapping[str, Any], *, clock: Callable[[], int] | None = None, fs: FileSystem = OS):
        self._logs = logs
        self._fs = fs
        self._log_dirs = list(log_dirs)
        self._backoff_s = int(settings["log.cleaner.backoff.ms"]) / 1000
        self._clock = clock or (lambda: int(time.time() * 1000))
        self._stop = threading.Event()
        self._pausing = threading.Event()
        # Held for the whole of a round: `paused()` takes it to wait for a round it aborted.
        self._round_lock = threading.Lock()
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._cleaner = Cleaner(int(settings["log.cleaner.dedupe.buffer.size"]),
                                float(settings["log.cleaner.io.buffer.load.factor"]),
                                clock=self._clock, should_stop=self._stopping,
                                io_buffer_bytes=int(settings["log.cleaner.io.buffer.size"]), fs=fs)
        self.checkpoints: dict[tuple[str, int], int] = {}
        for log_dir in self._log_dirs:
            self.checkpoints.update(read_cleaner_checkpoints(log_dir, fs))
        self.last_stats: dict[tuple[str, int], CleanerStats] = {}
        # Kafka's uncleanable partitions (per log dir, by each log's directory); guarded by _lock.
        self._uncleanable: dict[tuple[str, int], Uncleanable] = {}
        # A new store forgets the marks of the last one, as Kafka's restart does.
        for log_dir in self._log_dirs:
            self._write_state(log_dir)
        self.rounds = 0
        # Since the store opened (plain numbers a broker's metrics read): rounds that cleaned a log, the bytes
        # they freed (read minus written), and when the last one ended (ms, 0 before any).
        self.cleanings = 0
        self.bytes_reclaimed = 0
        self.last_cleaning_ms = 0
        self._started = 0
        self._round_done = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None

    def reconfigure(self, settings: Mapping[str, Any]) -> None:
        """Run the next rounds with new buffer sizes and backoff (Kafka's LogCleaner.reconfigure, which restarts
        its threads): a round under way is aborted (it is cleaned again, whole, by the next)."""
        cleaner = Cleaner(int(settings["log.cleaner.dedupe.buffer.size"]),
                          float(settings["log.cleaner.io.buffer.load.factor"]),
                          clock=self._clock, should_stop=self._stopping,
                          io_buffer_bytes=int(settings["log.cleaner.io.buffer.size"]), fs=self._fs)
        with self.paused():
            self._cleaner = cleaner
            self._backoff_s = int(settings["log.cleaner.backoff.ms"]) / 1000
        # A wait already under way took the old backoff: the next one takes the new.
        self._wake.set()

    def start(self) -> None:
        """Run rounds in a daemon thread until `stop()`."""
        self._thread = threading.Thread(target=self._run, name="log-cleaner", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Abort the round under way and end the thread."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()

    def _stopping(self) -> bool:
        return self._stop.is_set() or self._pausing.is_set()

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Abort the round under way and run no other while the block runs (before a log is deleted)."""
        self._pausing.set()
        try:
            with self._round_lock:
                self._pausing.clear()
                yield
        finally:
            self._pausing.clear()

    def wake(self) -> None:
        """Start a round now rather than after the backoff."""
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                cleaned = self.clean_filthiest()
            except CleaningAborted:
                cleaned = False
            except Exception:
                log.exception("log cleaner round failed")
                cleaned = False
            if not cleaned:
                self._wake.wait(self._backoff_s)
                self._wake.clear()

    def uncleanable_partitions(self, log_dir: str | None = None) -> dict[tuple[str, int], Uncleanable]:
        """The partitions marked uncleanable (in `log_dir`, or in every log dir); the size of one log dir's is
        Kafka's `uncleanable-partitions-count`."""
        with self._lock:
            return {key: mark for key, mark in self._uncleanable.items()
                    if log_dir is None or os.path.dirname(mark.log.directory) == os.path.abspath(log_dir)}

    def candidates(self) -> list[LogToClean]:
        """Every compacted log with its sections now, filthiest first (uncleanable partitions left out)."""
        now = self._clock()
        found = []
        logs = self._logs()
        self._forget_lifted(logs)
        for key, target in sorted(logs.items()):
            if target.config.compacts and not target.closed and target.dir_state.online \
                    and key not in self._uncleanable:
                try:
                    found.append(log_to_clean(target, self.checkpoints.get(key), now))
                except Exception as exc:  # noqa: BLE001 - any failure isolates this partition only, as in Kafka
                    self._failed(target, exc)
        return sorted(found, key=lambda c: c.cleanable_ratio, reverse=True)

    def _forget_lifted(self, logs: Mapping[tuple[str, int], Log]) -> None:
        """Drop the marks of partitions deleted, truncated or rid of the segments they failed on."""
        with self._lock:
            lifted = [key for key, mark in self._uncleanable.items() if not mark.holds(logs.get(key))]
            dirs = {os.path.dirname(self._uncleanable[key].log.directory) for key in lifted}
            for key in lifted:
                log.info("%s-%d may be cleaned again: its segments changed", *key)
                del self._uncleanable[key]
            for log_dir in dirs:
                self._write_state(log_dir)

    def _failed(self, target: Log, exc: Exception) -> bool:
        """Deal with a failed round as Kafka's CleanerThread does; whether the next round may start at once
        (not when a full disk put this one off: the backoff gives it time to get space back)."""
        key = (target.topic, target.partition)
        if isinstance(exc, OSError):
            # An intact ENOSPC comes back as it is, the dir online; any other I/O error takes the dir offline.
            exc = write_failed(target.dir_state, f"cleaning of {target.directory}", exc)
        if isinstance(exc, LogDirOfflineError) or not target.dir_state.online:
            log.warning("cleaning %s-%d stopped: its log dir is offline (%s)", *key, exc)
            return True
        if isinstance(exc, StorageIOError):
            log.warning("cleaning %s-%d put off until the disk has space: %s", *key, exc)
            return False
        self._mark_uncleanable(target, exc)
        return True

    def _mark_uncleanable(self, target: Log, exc: Exception) -> None:
        """Leave the partition out of later rounds, saying so once (Kafka's markPartitionUncleanable)."""
        key = (target.topic, target.partition)
        mark = Uncleanable(self._clock(), f"{type(exc).__name__}: {exc}", target,
                           tuple((segment, segment.size) for segment in target.segments[:-1]))
        with self._lock:
            self._uncleanable[key] = mark
            self._write_state(os.path.dirname(target.directory))
        if isinstance(exc, LogStoreError):
            # Damaged data: the partition's, with nothing more for a traceback to tell.
            log.error("cleaning %s-%d failed, marking it uncleanable (the other partitions go on): %s", *key,
                      mark.error)
        else:
            log.exception("cleaning %s-%d failed, marking it uncleanable (the other partitions go on)", *key)

    def clean_filthiest(self) -> bool:
        """Clean the filthiest log that is due; False if none is."""
        with self._lock:
            self._started += 1
        try:
            with self._round_lock:
                return self._clean_once()
        finally:
            with self._lock:
                self.rounds += 1
                self._round_done.notify_all()

    def _clean_once(self) -> bool:
        due = [c for c in self.candidates() if c.ready]
        if not due:
            return False
        chosen = max(due, key=lambda c: (c.needs_compaction_now, c.cleanable_ratio))
        target = chosen.log
        key = (target.topic, target.partition)
        try:
            stats = self._cleaner.clean(chosen)
        except CleaningAborted:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure isolates this partition only, as in Kafka
            # Unless a full disk put it off, the next round starts at once: the others need not wait for this one.
            return self._failed(target, exc)
        with self._lock:
            self.checkpoints[key] = stats.end_offset
            self.last_stats[key] = stats
            self.cleanings += 1
            self.bytes_reclaimed += stats.bytes_reclaimed
            self.last_cleaning_ms = int(stats.finished * 1000)
            refused = self._write_checkpoint(os.path.dirname(target.directory))
            self._write_state(os.path.dirname(target.directory), f"{target.topic}-{target.partition}", stats)
        if refused is not None:
            # Outside `_lock`, which stays a leaf: the dir's state has a lock of its own.
            error = write_failed(target.dir_state, f"{CLEANER_CHECKPOINT} of {target.directory}", refused)
            if target.dir_state.online:
                log.warning("%s not written, kept in memory: %s", CLEANER_CHECKPOINT, error)
        log.info("cleaned %s-%d up to %d: %d of %d bytes kept, %d keys", target.topic, target.partition,
                 stats.end_offset, stats.bytes_written, stats.bytes_read, stats.keys_mapped)
        return True

    def _write_checkpoint(self, log_dir: str) -> OSError | None:
        """Rewrite the cleaner checkpoint of `log_dir`; the error if that failed. One a full disk refuses stays
        in memory (a restart before the next write only cleans again what was cleaned); any other failure
        takes the dir offline, as Kafka's checkpoint files do."""
        logs = self._logs()
        # Entries of deleted partitions drop out here.
        mine = {key: offset for key, offset in self.checkpoints.items()
                if key in logs and os.path.dirname(logs[key].directory) == log_dir}
        try:
            OffsetCheckpoint(os.path.join(log_dir, CLEANER_CHECKPOINT), self._fs).write(mine)
        except OSError as exc:
            return exc
        return None

    def _write_state(self, log_dir: str, name: str | None = None, stats: CleanerStats | None = None) -> None:
        """Rewrite a log dir's `cleaner-state.json`: a round's figures (if given) and the uncleanable marks now.
        The caller holds `_lock` (or is the constructor)."""
        try:
            state = _read_state(log_dir, self._fs)
        except CorruptCheckpointError:
            state = {"logs": {}, "uncleanable": {}}
        logs = state["logs"]
        if name is not None and stats is not None:
            previous = logs.get(name, {})
            logs[name] = {"last_clean_ms": int(stats.finished * 1000),
                          "duration_ms": int((stats.finished - stats.started) * 1000),
                          "end_offset": stats.end_offset, "bytes_read": stats.bytes_read,
                          "bytes_written": stats.bytes_written, "bytes_reclaimed": stats.bytes_reclaimed,
                          "bytes_reclaimed_total": previous.get("bytes_reclaimed_total", 0) + stats.bytes_reclaimed,
                          "records_read": stats.records_read, "records_kept": stats.records_kept,
                          "keys_mapped": stats.keys_mapped, "rounds": previous.get("rounds", 0) + 1}
        marks = {f"{key[0]}-{key[1]}": {"since_ms": mark.since_ms, "error": mark.error}
                 for key, mark in self._uncleanable.items() if os.path.dirname(mark.log.directory) == log_dir}
        if name is None and marks == state["uncleanable"]:
            return
        doc: dict[str, Any] = {"version": 0, "logs": {n: logs[n] for n in sorted(logs)}}
        if marks:
            doc["uncleanable"] = {n: marks[n] for n in sorted(marks)}
        try:
            write_atomically(os.path.join(log_dir, CLEANER_STATE), json.dumps(doc, indent=1).encode("utf-8"),
                             fsync=False, fs=self._fs)
        except OSError as exc:
            # What `logstore cleaner` shows, and nothing reads it back: not worth a log dir.
            log.warning("%s not written: %s", os.path.join(log_dir, CLEANER_STATE), exc)

    def dirty_ratio(self, target: Log) -> float:
        """The dirty share of a compacted log's bytes now (what `logstore cleaner` shows): the segments from its
        cleaner checkpoint up to the active one over those and the ones below the checkpoint (0.0 for none)."""
        segments = target.segments
        first_dirty = self.checkpoints.get((target.topic, target.partition), segments[0].base_offset)
        clean = sum(s.size for s in covering(segments, 0, first_dirty))
        dirty = sum(s.size for s in covering(segments[:-1], first_dirty, segments[-1].base_offset))
        return dirty / (clean + dirty) if clean + dirty else 0.0

    def await_cleanings(self, count: int, timeout_s: float) -> bool:
        """Wait, without waking the cleaner, until `count` rounds since the store opened have cleaned a log."""
        with self._lock:
            return self._round_done.wait_for(lambda: self.cleanings >= count, timeout_s)

    def await_round(self, timeout_s: float) -> bool:
        """Wake the cleaner and wait until it finished a round that started after this call."""
        with self._lock:
            # A round under way may have looked at the logs before the caller's change.
            target = self._started + 1
            self._wake.set()
            return self._round_done.wait_for(lambda: self.rounds >= target, timeout_s)
