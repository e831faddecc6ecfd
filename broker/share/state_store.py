"""The durable state of every share-partition: Kafka's share snapshots and updates in `__share_group_state`.

A write appends one record to the share-partition's partition of the topic
(internal_topics.py) and returns once it is on disk. Like Kafka's share
coordinator, the first write of a share-partition is a ShareSnapshot, and so
is every write after `share.coordinator.snapshot.update.records.per.snapshot`
updates; the others are ShareUpdates, which a replay lays over the state so
far with Kafka's combiner (state_records.combine: where batches overlap, the
higher delivery count, then state, wins).

The topic is compacted, which keeps only the newest snapshot and the newest
update of each share-partition (their keys differ in the record type), so an
update must stand on the snapshot alone: each one carries the whole batch
list of the new state. An update is written only when the new state is
everywhere at or past the last one written (start offset, leader epoch and
every offset's (delivery count, state) never go back, the state epoch is
unchanged): then the newest snapshot with any subset of the later updates
ending with the newest replays to the same state, so a replay gives the
written state before, during and after any compaction. A state that goes
back anywhere (a lower start offset, a delivery count lowered, a new state
epoch) is written as a snapshot instead.

On start `load` replays the topic in log order: a snapshot replaces, an
update overlays, a snapshot tombstone deletes. States are kept as a replay
leaves them (`state_records.canonical`).
"""
from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from logstore.broker.coordinator.internal_topics import SHARE_STATE_TOPIC, InternalTopics
from logstore.broker.share import state_records as records
from logstore.broker.share.state_records import ShareSnapshot, ShareUpdate
from logstore.broker.share.types import SharePartitionKey, ShareState
from logstore.errors import CoordinatorNotAvailableError, CorruptRecordError, LogStoreError, StorageError

if TYPE_CHECKING:
    from logstore.log import Log
    from logstore.manager import LogManager


_NO_SNAPSHOT = 1 << 62   # as many updates as no setting allows between snapshots


@dataclass(frozen=True, slots=True)
class _Logged:
    """What the log holds of one share-partition: its replayed state and the newest snapshot under it."""

    state: ShareState
    snapshot: ShareState
    snapshot_epoch: int
    updates: int   # updates written since that snapshot


class ShareStateStore:
    """Every share-partition's durable state (`ShareState`, canonical) and its records in
    `__share_group_state`.

    `_lock` guards both maps; it is held around a write's decision and its append (no fsync),
    never while waiting for an fsync. `_logged` is what the log holds, `_durable` what is on
    disk and what `read` answers; a change reaches `_durable` only once its fsync returned, in
    the order the log holds the changes. Task-safe: any thread may call.
    """

    def __init__(self, store: LogManager, topics: InternalTopics, *, fsync: bool, snapshot_every: int,
                 clock: Callable[[], int]) -> None:
        """`snapshot_every`: updates between snapshots (Kafka's snapshot.update.records.per.snapshot);
        `clock`: the wall clock in ms, for the snapshots' timestamps."""
        self._store = store
        self._topics = topics
        self._fsync = fsync
        self._snapshot_every = snapshot_every
        self._clock = clock
        self._lock = threading.Lock()
        self._logged: dict[SharePartitionKey, _Logged] = {}
        self._durable: dict[SharePartitionKey, ShareState] = {}
        # Each change's place in the log order, so a change made durable late never hides a newer one.
        self._seq = itertools.count(1)
        self._logged_seq: dict[SharePartitionKey, int] = {}
        self._durable_seq: dict[SharePartitionKey, int] = {}

    # -- start ---------------------------------------------------------------------------------

    def load(self) -> None:
        """Replay `__share_group_state` (if it exists) into the share-partitions' states.

        A record that cannot be decoded stops the load: guessing past it could
        hand out again records already acknowledged.
        """
        logged: dict[SharePartitionKey, _Logged] = {}
        for p in range(self._store.topics().get(SHARE_STATE_TOPIC, 0)):
            for record in self._store.log(SHARE_STATE_TOPIC, p).iter_records():
                try:
                    if record.key is None:
                        raise CorruptRecordError("a record without a key")
                    _replay(logged, record.key, record.value)
                except CorruptRecordError as exc:
                    raise StorageError(f"{SHARE_STATE_TOPIC}-{p} offset {record.offset}: {exc}") from exc
        with self._lock:
            self._logged = logged
            self._durable = {key: entry.state for key, entry in logged.items()}
            self._logged_seq = {key: next(self._seq) for key in logged}
            self._durable_seq = dict(self._logged_seq)

    # -- reads ---------------------------------------------------------------------------------

    def read(self, key: SharePartitionKey) -> ShareState | None:
        """The share-partition's durable state, or None if it has none."""
        with self._lock:
            return self._durable.get(key)

    def keys(self, group_id: str | None = None) -> list[SharePartitionKey]:
        """The share-partitions with a durable state (of `group_id` only, if given), sorted."""
        with self._lock:
            return sorted(k for k in self._durable if group_id is None or k[0] == group_id)

    # -- writes --------------------------------------------------------------------------------

    def write(self, key: SharePartitionKey, state: ShareState) -> None:
        """Make `state` the share-partition's state, durable when this returns.

        Raises a LogStoreError (CoordinatorNotAvailableError for a failed append or fsync) and
        leaves the state read as it was if the record is not known to be on disk.
        """
        state = records.canonical(state)
        target = self._partition_log(key)
        with self._lock:
            entry, record_type, value = self._plan(key, state)
            batch = target.format.encode_batch([records.encode_key(record_type, key)], [value])
            end = self._append(target, bytearray(batch))
            self._logged[key] = entry
            seq = self._logged_seq[key] = next(self._seq)
        self._await(target, end)
        with self._lock:
            if seq > self._durable_seq.get(key, 0):
                self._durable[key] = state
                self._durable_seq[key] = seq

    def delete(self, keys: Iterable[SharePartitionKey]) -> None:
        """Forget share-partitions: a tombstone for each of their two record keys, durable when this returns.

        Keys with no state are skipped. Each `__share_group_state` partition's tombstones go in one
        batch, which a cut leaves whole or not at all: never a snapshot deleted and its update kept.
        """
        wanted = sorted(set(keys))
        with self._lock:
            known = [k for k in wanted if k in self._logged]
        by_partition: dict[int, list[SharePartitionKey]] = {}
        for key in known:
            # The topic exists: these keys were written.
            by_partition.setdefault(self._topics.share_state_partition(*key), []).append(key)
        for group in (by_partition[p] for p in sorted(by_partition)):
            target = self._partition_log(group[0])
            keys_bytes = [records.encode_key(kind, k) for k in group for kind in (records.UPDATE, records.SNAPSHOT)]
            with self._lock:
                batch = target.format.encode_batch(keys_bytes, [None] * len(keys_bytes))
                end = self._append(target, bytearray(batch))
                seqs = {}
                for key in group:
                    self._logged.pop(key, None)
                    seqs[key] = self._logged_seq[key] = next(self._seq)
            self._await(target, end)
            with self._lock:
                for key, seq in seqs.items():
                    if seq > self._durable_seq.get(key, 0):
                        self._durable.pop(key, None)
                        self._durable_seq[key] = seq

    # -- inside --------------------------------------------------------------------------------

    def _partition_log(self, key: SharePartitionKey) -> Log:
        # Outside the lock: the first call creates the topic, which fsyncs.
        try:
            return self._store.log(SHARE_STATE_TOPIC, self._topics.share_state_partition(*key))
        except LogStoreError as exc:
            raise CoordinatorNotAvailableError(f"{SHARE_STATE_TOPIC} not available: {exc}") from exc

    def _plan(self, key: SharePartitionKey, state: ShareState) -> tuple[_Logged, int, bytes]:
        """(what the log will hold, record type, value) of writing `state`; under the lock."""
        current = self._logged.get(key)
        count = records.delivery_complete_count(state)
        if current is not None and current.updates < self._snapshot_every and _may_update(current, state):
            update = ShareUpdate(current.snapshot_epoch, state.leader_epoch, state.start_offset, state.batches,
                                 count)
            return (_Logged(state, current.snapshot, current.snapshot_epoch, current.updates + 1),
                    records.UPDATE, records.encode_update(update))
        epoch = 0 if current is None else current.snapshot_epoch + 1
        now = self._clock()
        snapshot = ShareSnapshot(epoch, state, now, now, count)
        return _Logged(state, state, epoch, 0), records.SNAPSHOT, records.encode_snapshot(snapshot)

    @staticmethod
    def _append(target: Log, batch: bytearray) -> int:
        """Append (no fsync); the end offset to wait for."""
        try:
            result = target.append(batch, client=False)
        except LogStoreError as exc:
            raise CoordinatorNotAvailableError(f"{SHARE_STATE_TOPIC} not written: {exc}") from exc
        return result.last_offset + 1

    def _await(self, target: Log, end: int) -> None:
        if not self._fsync:
            return
        try:
            # This thread would only wait for the sync pool's: it takes part in the fsync itself.
            target.flush(end)
            if target.recovery_point < end:
                raise StorageError(f"{SHARE_STATE_TOPIC} closed before the write was flushed")
        except Exception as exc:  # noqa: BLE001 - any failed fsync is the same answer to the caller
            raise CoordinatorNotAvailableError(f"{SHARE_STATE_TOPIC} not flushed: {exc}") from exc


def _may_update(current: _Logged, state: ShareState) -> bool:
    """Whether an update carrying `state` replays to `state` over the newest snapshot and over any
    updates since it (see the module's docstring)."""
    last = current.state
    if (state.state_epoch != last.state_epoch or state.start_offset < last.start_offset
            or state.leader_epoch < last.leader_epoch):
        return False
    # Laid over the last state (and so over every earlier one since the snapshot), nothing changes.
    return all(records.combine(before.batches + state.batches, state.start_offset) == state.batches
               for before in (last, current.snapshot))


def _replay(logged: dict[SharePartitionKey, _Logged], key_bytes: bytes, value: bytes | None) -> None:
    """Apply one record of `__share_group_state` to `logged`, as Kafka's share coordinator replays it."""
    kind, key = records.decode_key(key_bytes)
    current = logged.get(key)
    if kind == records.SNAPSHOT:
        if value is None:
            logged.pop(key, None)
            return
        snapshot = records.decode_snapshot(value)
        state = records.canonical(snapshot.state)
        logged[key] = _Logged(state, state, snapshot.snapshot_epoch, 0)
    elif value is not None:   # an update's tombstone only clears its key for compaction
        update = records.decode_update(value)
        state = records.apply_update(None if current is None else current.state, update)
        if current is None:
            # No snapshot under it (a log Kafka pruned oddly): the next write is a snapshot.
            logged[key] = _Logged(state, state, update.snapshot_epoch, _NO_SNAPSHOT)
        else:
            logged[key] = _Logged(state, current.snapshot, current.snapshot_epoch, current.updates + 1)
