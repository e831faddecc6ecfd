"""The share-partitions of this broker (Kafka's SharePartitionManager): loaded or initialized on first use,
records acquired from the log, acknowledgements applied, locks expired, every change made durable.

Each share-partition (group × topic partition) has its own lock around its
in-memory state (partition.py) and a second one that orders its writes to
`__share_group_state` (state_store.py): a change is made under the first, and
written under the second by whoever gets there first with the newest state,
so concurrent consumers of one partition share an fsync instead of queueing
for one each, and an older state never lands after a newer one.

Acknowledgements are durable before they are answered; so are acquisitions,
which keeps delivery counts across a restart (Kafka writes them only with the
next state change). Records that become available again (released, or a lock
expired) wake the ShareFetches parked on their partition.
"""
from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from logstore.broker.share.partition import SharePartition
from logstore.broker.share.reads import EMPTY, read_batches
from logstore.broker.share.types import AcquiredRange, SharePartitionKey, ShareState
from logstore.errors import InvalidConfigError, LogStoreError

if TYPE_CHECKING:
    from logstore.broker.share.state_store import ShareStateStore
    from logstore.manager import LogManager

log = logging.getLogger(__name__)

GroupSetting = Callable[[str, str], Any]
# A group config's broker-wide default (Kafka's GroupConfig falls back to these settings).
BROKER_DEFAULTS = {"share.record.lock.duration.ms": "group.share.record.lock.duration.ms",
                   "share.delivery.count.limit": "group.share.delivery.count.limit",
                   "share.session.timeout.ms": "group.share.session.timeout.ms",
                   "share.heartbeat.interval.ms": "group.share.heartbeat.interval.ms"}
GROUP_DEFAULTS = {"share.auto.offset.reset": "latest", "share.isolation.level": "read_uncommitted"}
_DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$")


def broker_group_setting(settings: dict[str, Any]) -> GroupSetting:
    """A group-config lookup that knows only the broker's defaults (no group overrides)."""
    def value(group_id: str, name: str) -> Any:
        if name in BROKER_DEFAULTS:
            return settings[BROKER_DEFAULTS[name]]
        return GROUP_DEFAULTS[name]
    return value


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class _Entry:
    """One loaded share-partition: its state, the topic name it reads, and its write ordering."""

    state: SharePartition
    topic: str
    lock: threading.Lock = field(default_factory=threading.Lock)
    write_lock: threading.Lock = field(default_factory=threading.Lock)
    version: int = 0
    written: int = 0


@dataclass(frozen=True, slots=True)
class Acquired:
    """A partition's answer to a share fetch: the batches' bytes and the ranges this member now holds."""

    records: bytes
    ranges: list[AcquiredRange]


NOTHING = Acquired(b"", [])


class SharePartitionManager:
    """Every share-partition of the broker, keyed (group id, topic id, partition).

    Task-safe: calls come from the broker's coordinator pool and the upkeep thread. `_lock` guards the
    map only; each entry's own locks guard its state and its writes.
    """

    def __init__(self, store: LogManager, states: ShareStateStore, group_setting: GroupSetting, *,
                 max_in_flight: int, clock: Callable[[], int] = _now_ms,
                 on_available: Callable[[Iterable[tuple[str, int]]], None] = lambda partitions: None,
                 on_deadline: Callable[[], None] = lambda: None) -> None:
        self._store = store
        self._states = states
        self._setting = group_setting
        self._max_in_flight = max_in_flight
        self._clock = clock
        self._on_available = on_available
        self._on_deadline = on_deadline
        self._lock = threading.Lock()
        self._entries: dict[SharePartitionKey, _Entry] = {}
        self._wake_at: int | None = None

    # -- loading --------------------------------------------------------------------------------

    def _entry(self, group_id: str, topic: str, partition: int) -> _Entry:
        key = (group_id, self._store.topic_id(topic), partition)
        with self._lock:
            entry = self._entries.get(key)
        if entry is not None:
            return entry
        persisted = self._states.read(key)
        created = persisted is None
        if persisted is None:
            persisted = ShareState(0, -1, self._initial_offset(group_id, topic, partition), ())
        state = SharePartition(persisted, max_in_flight=self._max_in_flight,
                               delivery_limit=self._setting(group_id, "share.delivery.count.limit"))
        # A state not on disk yet starts as a change to write.
        fresh = _Entry(state, topic, version=1 if created else 0)
        with self._lock:
            entry = self._entries.setdefault(key, fresh)
        if created and entry is fresh:
            # Kafka's InitializeShareGroupState: the start offset is fixed once, so a later reset policy or
            # a restart does not move it.
            self._write(key, entry)
        return entry

    def _initial_offset(self, group_id: str, topic: str, partition: int) -> int:
        """Where a share-partition starts: `share.auto.offset.reset` of its group."""
        partition_log = self._store.log(topic, partition)
        policy = str(self._setting(group_id, "share.auto.offset.reset"))
        if policy == "earliest":
            return partition_log.log_start_offset
        if policy.startswith("by_duration:"):
            found = partition_log.offset_for_timestamp(self._clock() - _duration_ms(policy[len("by_duration:"):]))
            return found[0] if found is not None else partition_log.high_watermark
        return partition_log.high_watermark

    def initialize(self, group_id: str, partitions: Iterable[tuple[str, int]]) -> None:
        """Make the share state of these partitions exist and durable (a group was assigned them)."""
        for topic, partition in partitions:
            try:
                self._entry(group_id, topic, partition)
            except LogStoreError as exc:
                log.warning("share state of %s for %s-%d not initialized: %s", group_id, topic, partition, exc)

    # -- fetch and acknowledge -----------------------------------------------------------------

    def acquire(self, group_id: str, member_id: str, topic: str, partition: int, max_records: int,
                max_bytes: int) -> Acquired:
        """Records for `member_id` from one partition: at most about `max_records` (whole batches)."""
        entry = self._entry(group_id, topic, partition)
        partition_log = self._store.log(topic, partition)
        committed = self._setting(group_id, "share.isolation.level") == "read_committed"
        lock_ms = int(self._setting(group_id, "share.record.lock.duration.ms"))
        with entry.lock:
            sp = entry.state
            now = self._clock()
            changed = sp.expire(now)
            if sp.start_offset < partition_log.log_start_offset:
                sp.move_start(partition_log.log_start_offset)
                changed = True
            ranges: list[AcquiredRange] = []
            read = EMPTY
            if sp.can_acquire():
                read = read_batches(partition_log, sp.next_fetch_offset(), max_bytes, max_records, committed)
                if read.spans:
                    ranges = sp.acquire(member_id, read.spans, max_records, lock_ms, now)
                    changed = True
            if changed:
                entry.version += 1
            deadline = sp.next_deadline()
        try:
            # The batches' bytes do not change once appended: read outside the lock.
            records = read.through(ranges[-1].last_offset) if ranges else b""
        finally:
            read.close()
        # Also a change an acknowledgement left unwritten (acknowledge's `write=False`): one fsync for both.
        self._write((group_id, self._store.topic_id(topic), partition), entry)
        if deadline is not None:
            self._deadline(deadline)
        if not ranges:
            return NOTHING
        return Acquired(records, ranges)

    def acknowledge(self, group_id: str, member_id: str, topic: str, partition: int,
                    batches: Iterable[tuple[int, int, tuple[int, ...]]], *, write: bool = True) -> int:
        """Apply a partition's acknowledgement batches (first, last, types); durable when it returns, or
        with `write=False` once the caller's next `acquire` or `flush` of the partition returns.

        The error code of the first batch refused (0 if none); the batches before it stay applied, as
        Kafka applies them one by one.
        """
        entry = self._entry(group_id, topic, partition)
        lock_ms = int(self._setting(group_id, "share.record.lock.duration.ms"))
        error = 0
        with entry.lock:
            now = self._clock()
            changed = entry.state.expire(now)
            available = False
            for first, last, types in batches:
                before = entry.state.next_fetch_offset()
                error = entry.state.acknowledge(member_id, first, last, types, now, lock_ms)
                if error:
                    break
                changed = True
                available = available or entry.state.next_fetch_offset() < before
            if changed:
                entry.version += 1
        if changed and write:
            self._write((group_id, self._store.topic_id(topic), partition), entry)
        if available:
            self._on_available([(topic, partition)])
        return error

    def flush(self, group_id: str, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """Make every change to these share-partitions durable (what `acknowledge(write=False)` left);
        the error code of each that could not be written."""
        failed: dict[tuple[str, int], int] = {}
        for topic, partition in partitions:
            try:
                key = (group_id, self._store.topic_id(topic), partition)
                with self._lock:
                    entry = self._entries.get(key)
                if entry is not None:
                    self._write(key, entry)
            except LogStoreError as exc:
                failed[(topic, partition)] = exc.code
        return failed

    def release_member(self, group_id: str, member_id: str) -> None:
        """A member left or its session closed: what it holds is released at once."""
        for key, entry in self._group_entries(group_id):
            with entry.lock:
                changed = entry.state.release_member(member_id)
                if changed:
                    entry.version += 1
            if changed:
                self._write(key, entry)
                self._on_available([(entry.topic, key[2])])

    def delete_group(self, group_id: str) -> None:
        """A share group was deleted: its share-partitions go, in memory and in `__share_group_state`."""
        keys = [key for key, _ in self._group_entries(group_id)]
        keys += [key for key in self._states.keys(group_id) if key not in keys]
        with self._lock:
            for key in keys:
                self._entries.pop(key, None)
        self._states.delete(keys)

    def reset(self, group_id: str, topic: str, partition: int, offset: int) -> None:
        """Set a share-partition's start offset (AlterShareGroupOffsets on an empty group): the window is
        cleared, durable on return."""
        key = (group_id, self._store.topic_id(topic), partition)
        entry = self._entry(group_id, topic, partition)
        with entry.lock:
            entry.state.move_start(offset, reset=True)
            entry.version += 1
        self._write(key, entry)
        self._on_available([(topic, partition)])

    def delete_topic(self, group_id: str, topic_id: bytes) -> None:
        """Forget a group's share state of one topic (DeleteShareGroupOffsets on an empty group)."""
        keys = [key for key in self._states.keys(group_id) if key[1] == topic_id]
        with self._lock:
            keys += [key for key in self._entries if key[0] == group_id and key[1] == topic_id and key not in keys]
            for key in keys:
                self._entries.pop(key, None)
        self._states.delete(keys)

    def group_states(self, group_id: str) -> dict[SharePartitionKey, ShareState]:
        """Every share-partition of a group with its state now (loaded ones as they are in memory)."""
        states = {key: state for key in self._states.keys(group_id)
                  if (state := self._states.read(key)) is not None}
        for key, entry in self._group_entries(group_id):
            with entry.lock:
                states[key] = entry.state.state()
        return states

    def _group_entries(self, group_id: str) -> list[tuple[SharePartitionKey, _Entry]]:
        with self._lock:
            return [(key, entry) for key, entry in self._entries.items() if key[0] == group_id]

    # -- durability -----------------------------------------------------------------------------

    def _write(self, key: SharePartitionKey, entry: _Entry) -> None:
        """Make the entry's newest state durable, unless a write that already holds it did."""
        with entry.write_lock:
            with entry.lock:
                version = entry.version
                if version <= entry.written:
                    return
                state = entry.state.state()
            self._states.write(key, state)
            entry.written = max(entry.written, version)

    # -- lock expiry ----------------------------------------------------------------------------

    def _deadline(self, deadline: int) -> None:
        with self._lock:
            earlier = self._wake_at is None or deadline < self._wake_at
            if earlier:
                self._wake_at = deadline
        if earlier:
            self._on_deadline()

    def tick(self, now_ms: int) -> int | None:
        """Expire the locks due at `now_ms`; the next deadline (ms) or None."""
        with self._lock:
            entries = list(self._entries.items())
            self._wake_at = None
        soonest: int | None = None
        for key, entry in entries:
            with entry.lock:
                changed = entry.state.expire(now_ms)
                if changed:
                    entry.version += 1
                deadline = entry.state.next_deadline()
            if changed:
                try:
                    self._write(key, entry)
                except LogStoreError as exc:
                    log.warning("share state of %s not written after lock expiry: %s", key, exc)
                self._on_available([(entry.topic, key[2])])
            if deadline is not None and (soonest is None or deadline < soonest):
                soonest = deadline
        return self._merge_wake(soonest)

    def _merge_wake(self, deadline: int | None) -> int | None:
        """The next wake: `deadline` or one a call set meanwhile, whichever is sooner."""
        with self._lock:
            if deadline is not None and (self._wake_at is None or deadline < self._wake_at):
                self._wake_at = deadline
            return self._wake_at

    def close(self) -> None:
        """Nothing to release: the state on disk is complete after every call."""

    # -- reading ------------------------------------------------------------------------------

    def state(self, group_id: str, topic: str, partition: int) -> ShareState | None:
        """A share-partition's state as it would be persisted now (loaded ones), else as persisted."""
        key = (group_id, self._store.topic_id(topic), partition)
        with self._lock:
            entry = self._entries.get(key)
        if entry is None:
            return self._states.read(key)
        with entry.lock:
            return entry.state.state()


def _duration_ms(text: str) -> int:
    """An ISO-8601 duration (PnDTnHnMnS) in ms, as share.auto.offset.reset's by_duration takes it."""
    match = _DURATION.match(text)
    if match is None or text in ("P", "PT"):
        raise InvalidConfigError(f"Invalid duration {text!r} in share.auto.offset.reset")
    days, hours, minutes, seconds = (float(part) if part else 0.0 for part in match.groups())
    return int(timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds).total_seconds() * 1000)
