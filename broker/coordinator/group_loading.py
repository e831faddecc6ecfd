"""The group coordinator's load, one `__consumer_offsets` partition at a time (`GroupLoader`), and which
partitions serve meanwhile (`PartitionLoads`), as Kafka's coordinator tracks its partitions.

A broker listens before its coordinators have read their partitions (Kafka's
does): until a partition is loaded, a call for one of its groups answers
COORDINATOR_LOAD_IN_PROGRESS, which every client retries; a partition whose
load failed answers COORDINATOR_NOT_AVAILABLE. Nothing writes to a partition
while it loads, since every group call for it is refused, except the
transaction coordinator's markers: the offsets a marker ends may still be
pending in what the load reads, so a marker for a loading partition is kept
here and applied once the partition's groups are in.
"""
from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from logstore.broker.coordinator.internal_topics import OFFSETS_TOPIC
from logstore.errors import CoordinatorLoadInProgressError, CoordinatorNotAvailableError, LogStoreError

if TYPE_CHECKING:
    from logstore.broker.coordinator.classic_rebalance import ClassicRebalancer
    from logstore.broker.coordinator.consumer_timers import ConsumerTimers
    from logstore.broker.coordinator.group_context import GroupContext
    from logstore.broker.coordinator.group_offsets import OffsetManager
    from logstore.broker.coordinator.group_store import GroupStore
    from logstore.broker.coordinator.share_groups import ShareGroupManager

_pauses = 0
_paused_enabled = False
_pauses_lock = threading.Lock()


@contextmanager
def collection_paused() -> Iterator[None]:
    """CPython's cyclic collector held off while a load builds its groups (nested and concurrent pauses
    hold it off until the last ends; left off if it was off).

    A load makes tens of thousands of long-lived containers (groups, members) and nothing cyclic to
    collect; each time the survivors grow by a quarter, a full collection walks every tracked object of
    the process, three or four times per load of 10,000 groups (half its time). Held off, one collection
    follows the load instead.
    """
    global _pauses, _paused_enabled
    with _pauses_lock:
        if _pauses == 0:
            _paused_enabled = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _pauses_lock:
            _pauses -= 1
            if _pauses == 0 and _paused_enabled:
                gc.enable()


class PartitionLoads:
    """The partitions that are not serving (loading, or failed to load) and the markers waiting for them.

    Changed under the coordinator's lock (`lock`); `refusal` and `loading` read without it: a partition
    leaves the set only after its groups are installed, so a call that finds it gone finds its groups.
    """

    def __init__(self, lock: threading.RLock) -> None:
        self._changed = threading.Condition(lock)
        # partition -> the error its groups' calls get (a fresh one each time: tracebacks differ)
        self._unavailable: dict[int, tuple[type[LogStoreError], str]] = {}
        # partition -> (producer id, commit) of the markers written to it while it loads, in order
        self._markers: dict[int, list[tuple[int, bool]]] = {}

    def begin(self, partitions: range) -> None:
        """Every partition in `partitions` is loading (under the lock)."""
        self._unavailable = {p: (CoordinatorLoadInProgressError, f"{OFFSETS_TOPIC}-{p} is still loading")
                             for p in partitions}
        self._markers = {}

    @property
    def unavailable(self) -> bool:
        """Whether some partition does not serve (loading or failed)."""
        return bool(self._unavailable)

    @property
    def loading(self) -> bool:
        """Whether some partition is still loading."""
        return any(kind is CoordinatorLoadInProgressError for kind, _ in list(self._unavailable.values()))

    def refusal(self, partition: int) -> LogStoreError | None:
        """The error a call for a group of `partition` gets, or None when the partition serves."""
        if not self._unavailable:
            return None
        found = self._unavailable.get(partition)
        return None if found is None else found[0](found[1])

    def defer_marker(self, partition: int, producer_id: int, commit: bool) -> bool:
        """Keep a marker written to a partition that is loading, for `loaded` (under the lock); False when
        the partition serves and the marker is the caller's to apply now."""
        found = self._unavailable.get(partition)
        if found is None:
            return False
        if found[0] is CoordinatorLoadInProgressError:
            self._markers.setdefault(partition, []).append((producer_id, commit))
        return True

    def loaded(self, partition: int) -> list[tuple[int, bool]]:
        """The partition's groups are installed (under the lock): the markers to apply before it serves,
        which it does once the caller releases the lock."""
        markers = self._markers.pop(partition, [])
        self._unavailable.pop(partition, None)
        self._changed.notify_all()
        return markers

    def failed(self, partition: int, error: BaseException | str) -> None:
        """The partition could not be loaded (under the lock): its groups answer COORDINATOR_NOT_AVAILABLE."""
        self._markers.pop(partition, None)
        self._unavailable[partition] = (CoordinatorNotAvailableError,
                                        f"{OFFSETS_TOPIC}-{partition} could not be loaded: {error}")
        self._changed.notify_all()

    def abandon(self, why: str) -> None:
        """No partition still loading will be loaded (under the lock): each answers COORDINATOR_NOT_AVAILABLE."""
        for partition, (kind, _) in list(self._unavailable.items()):
            if kind is CoordinatorLoadInProgressError:
                self.failed(partition, why)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until no partition is loading (loaded or failed); False if `timeout` s passed first."""
        with self._changed:
            return self._changed.wait_for(lambda: not self.loading, timeout)


class GroupLoader:
    """Loads the groups one `__consumer_offsets` partition at a time: read outside the lock, then installed
    under it with their members' sessions and the markers that waited for them. Task-safe (the context's
    lock); one loader at a time."""

    def __init__(self, context: GroupContext, groups: GroupStore, loads: PartitionLoads,
                 rebalancer: ClassicRebalancer, consumer_timers: ConsumerTimers, shares: ShareGroupManager,
                 offsets: OffsetManager) -> None:
        self._context, self._groups, self._loads = context, groups, loads
        self._rebalancer, self._consumer_timers, self._shares, self._offsets = (rebalancer, consumer_timers,
                                                                                shares, offsets)

    def begin(self, partitions: range) -> range:
        """Forget every group; each of `partitions` loads from now (returned)."""
        with self._context.lock:
            self._groups.clear()
            self._consumer_timers.clear()
            self._loads.begin(partitions)
        return partitions

    def load(self, partition: int) -> int:
        """Read the partition's groups, then serve them; how many it holds."""
        now = self._context.clock()
        loaded = self._groups.read(partition, now, self._context.topic_names().get)
        groups, _, shares = loaded
        with self._context.lock:
            self._groups.install(loaded)
            if shares:
                self._shares.start_sessions(now)
            for group in groups.values():
                for member in group.members.values():
                    self._rebalancer.schedule_member(group, member, member.heartbeat_deadline)
                if group.consumer is not None:
                    self._consumer_timers.start_sessions(group, now)
            for producer_id, commit in self._loads.loaded(partition):
                self._offsets.complete_txn_offsets(partition, producer_id, commit)
            self._ended()
        return len(groups) + len(shares)

    def fail(self, partition: int, error: BaseException | str) -> None:
        """The partition could not be loaded: its groups answer COORDINATOR_NOT_AVAILABLE."""
        with self._context.lock:
            self._loads.failed(partition, error)
            self._ended()

    def abandon(self, why: str) -> None:
        """No partition still loading will be: each answers COORDINATOR_NOT_AVAILABLE."""
        with self._context.lock:
            self._loads.abandon(why)
            self._ended()

    def _ended(self) -> None:
        if not self._loads.loading:
            self._groups.loaded()
