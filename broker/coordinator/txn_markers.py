"""Ending a decided transaction: a COMMIT or ABORT marker in every partition of it, then its Complete state.

Kafka's three steps: PrepareCommit/PrepareAbort persisted (the decision,
written by the coordinator before it calls here), a marker appended to every
partition of the transaction, then CompleteCommit/CompleteAbort. A Prepare
state found on start, or left by a marker write that failed, is finished by
`complete_prepared`, so a crash at any moment ends every transaction the way
it was decided.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from logstore.broker.coordinator.internal_topics import OFFSETS_TOPIC
from logstore.broker.coordinator.txn_log import TxnState
from logstore.broker.coordinator.txn_metadata import COORDINATOR_EPOCH, PREPARED, TxnMetadata, completed
from logstore.broker.coordinator.txn_state_store import TxnStateStore
from logstore.broker.coordinator.txn_steps import (
    Durably,
    Outcomes,
    Step,
    Waits,
    after,
    catching,
    first_error,
    run_blocking,
)
from logstore.errors import LogStoreError, StorageError, UnknownTopicOrPartitionError

if TYPE_CHECKING:
    from logstore.log import Log
    from logstore.manager import LogManager

log = logging.getLogger(__name__)


class TxnMarkerWriter:
    """Writes a transaction's markers to its partitions and waits for them to be durable.

    Holds no lock of its own: each partition's append takes that log's lock, one at a time.
    """

    def __init__(self, store: LogManager, fsync: bool,
                 on_markers: Callable[[list[tuple[str, int]]], None]) -> None:
        self._store = store
        self._fsync = fsync
        self._on_markers = on_markers
        # Called with (partition, producer id, commit) once a marker is durable in `__consumer_offsets`:
        # the group coordinator applies or drops that producer's transactional offsets.
        self.on_offsets_marker: Callable[[int, int, bool], None] = lambda partition, producer_id, commit: None

    def write(self, meta: TxnMetadata, commit: bool) -> None:
        """A marker in every partition of `meta`'s transaction (a deleted one is skipped); raises LogStoreError."""
        run_blocking(self.write_durably(meta, commit))

    def write_durably(self, meta: TxnMetadata, commit: bool) -> Step[None]:
        """`write` in steps: the markers appended now, the transaction's offsets applied and readers told
        once they are durable. Raises LogStoreError (an append failed) or, when resumed, the first marker
        fsync that failed or was not over in time."""
        waits: Waits = []
        try:
            for topic, partition in sorted(meta.partitions):
                try:
                    target = self._store.log(topic, partition)
                except UnknownTopicOrPartitionError:
                    continue  # deleted since it joined the transaction: nothing left to end
                if meta.epoch_bumping and _already_ended(target, meta):
                    continue
                result = target.write_txn_marker(meta.producer_id, meta.producer_epoch, COORDINATOR_EPOCH,
                                                 commit=commit, transaction_version=meta.client_version)
                if self._fsync:
                    waits.append((target, result.last_offset + 1))
        except BaseException:
            self._told(meta)
            raise
        if not waits:
            self._written(meta, commit, [])
            return None
        return Durably(waits, lambda outcomes: self._written(meta, commit, outcomes))

    def _written(self, meta: TxnMetadata, commit: bool, outcomes: Outcomes) -> None:
        try:
            error = first_error(outcomes)
            if error is not None:
                if isinstance(error, LogStoreError):
                    raise error
                raise StorageError(f"transaction markers not durable: {error}") from error
            for topic, partition in sorted(meta.partitions):
                if topic == OFFSETS_TOPIC:
                    self.on_offsets_marker(partition, meta.producer_id, commit)
        finally:
            self._told(meta)

    def _told(self, meta: TxnMetadata) -> None:
        """Wake the readers of the transaction's partitions (its markers moved their last stable offset)."""
        if meta.partitions:
            self._on_markers(sorted(meta.partitions))


def _already_ended(target: Log, meta: TxnMetadata) -> bool:
    """A TV_2 marker this partition already holds (a redo after a crash): the producer is at the marker's
    bumped epoch with no transaction open, and the log would refuse a second marker at that epoch."""
    entry = target.producers.entry(meta.producer_id)
    return entry is not None and entry.epoch == meta.producer_epoch and entry.txn_first_offset < 0


def _completion(prepared: TxnMetadata, done: TxnState, now: int) -> TxnMetadata:
    """The Complete state after `prepared`'s markers: under TV_2, a prepared next producer id becomes
    the id at epoch 0, the exhausted one its previous id (Kafka's prepareComplete)."""
    if prepared.epoch_bumping and prepared.next_producer_id >= 0:
        return prepared.transit(state=done, partitions=frozenset(), last_update_ms=now,
                                producer_id=prepared.next_producer_id, producer_epoch=0,
                                previous_producer_id=prepared.producer_id, next_producer_id=-1)
    return prepared.transit(state=done, partitions=frozenset(), last_update_ms=now, next_producer_id=-1)


class TxnCompleter:
    """Carries out decided transactions: markers, then the Complete state (Kafka's TransactionMarkerChannel
    and the completion that follows it). Task-safe: the id's `pending` state says who carries it out."""

    def __init__(self, state: TxnStateStore, markers: TxnMarkerWriter, clock: Callable[[], int]) -> None:
        self._state = state
        self._markers = markers
        self._clock = clock

    def fence_and_abort(self, meta: TxnMetadata, fence: TxnMetadata) -> None:
        """Abort an open transaction with the bumped epoch of `fence` (its state is `meta.pending`)."""
        run_blocking(self.fence_and_abort_durably(meta, fence))

    def fence_and_abort_durably(self, meta: TxnMetadata, fence: TxnMetadata) -> Step[bool]:
        """`fence_and_abort` in steps: the PrepareAbort appended now, its markers once it is durable."""
        transit = fence.transit(state=TxnState.PREPARE_ABORT, last_update_ms=self._clock())
        with self._state.lock:
            meta.pending = TxnState.PREPARE_ABORT
        return after(self._state.persist_durably(meta, transit, then=TxnState.COMPLETE_ABORT),
                     lambda _: self.complete_durably(meta, claimed=True))

    def complete(self, meta: TxnMetadata, claimed: bool = False) -> bool:
        """Write the markers of a prepared transaction, then its Complete state; False if not done now.

        `claimed`: the caller already holds the id (its pending state is the
        Complete one). A failure leaves the Prepare state for
        `complete_prepared` to retry: the decision is on disk already, so the
        caller has nothing to undo.
        """
        return run_blocking(self.complete_durably(meta, claimed))

    def complete_durably(self, meta: TxnMetadata, claimed: bool = False) -> Step[bool]:
        """`complete` in steps: the markers appended now, the Complete state once they are durable."""
        with self._state.lock:
            if meta.state not in PREPARED or meta.pending is not (completed(meta.state) if claimed else None):
                return False
            commit = meta.state == TxnState.PREPARE_COMMIT
            done = completed(meta.state)
            meta.pending = done
            current = meta.copy()
        try:
            step = after(self._markers.write_durably(current, commit),
                         lambda _: self._markers_durable(meta, current, done))
        except LogStoreError as exc:
            return self._not_completed(meta, exc)
        return catching(step, LogStoreError, lambda exc: self._not_completed(meta, exc))

    def _markers_durable(self, meta: TxnMetadata, current: TxnMetadata, done: TxnState) -> bool:
        # Not fsynced: lost, it is redone from the Prepare state; the id's next transition is fsynced after it.
        self._state.persist(meta, _completion(current, done, self._clock()), durable=False)
        return True

    def _not_completed(self, meta: TxnMetadata, exc: LogStoreError) -> bool:
        with self._state.lock:
            meta.pending = None
        log.warning("transactional id %r stays %s until its markers can be written: %s",
                    meta.transactional_id, meta.state.kafka_name, exc)
        return False

    def complete_prepared(self) -> list[str]:
        """Finish every transaction decided but not completed (after a start, or a failed marker write)."""
        with self._state.lock:
            prepared = [m for m in self._state.txns.values() if m.state in PREPARED and m.pending is None]
        return [m.transactional_id for m in prepared if self.complete(m)]
