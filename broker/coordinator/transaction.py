"""The transaction coordinator: one state machine per transactional id over `__transaction_state`.

Every transition is written to the id's partition of `__transaction_state`
(Kafka's records and partitioning) before it takes effect, and the state is
rebuilt from that topic on start. While a transition is being written the id
holds it as `pending`; a request that finds one answers
CONCURRENT_TRANSACTIONS, as Kafka does, so no lock is held across a write.

Ending a transaction is Kafka's three steps: PrepareCommit/PrepareAbort
persisted (the decision), a COMMIT/ABORT marker appended to every partition
of the transaction, then CompleteCommit/CompleteAbort. A Prepare state found
on start, or left by a marker write that failed, is finished by
`complete_prepared`, so a crash at any moment ends every transaction the way
it was decided. Unlike Kafka, EndTxn is answered after the markers are on
disk rather than after the decision, so a read_committed consumer sees a
committed transaction as soon as its producer does, and the producer's next
transaction does not meet CONCURRENT_TRANSACTIONS.

The parts, each given what it uses: `InternalTopics` (internal_topics.py,
creation and partitioning), `TxnStateStore` (txn_state_store.py, the ids in
memory and their records), `TxnMarkerWriter` and `TxnCompleter`
(txn_markers.py), `TxnTimeouts` (txn_timeouts.py), InitProducerId's
transition (txn_init.py). This façade keeps the client APIs' transitions.
The locks and who takes them in which order are in docs/threads-and-locks.md.

The coordinator never touches a socket. Its methods block (on fsyncs) and
are safe to call from several threads. AddPartitionsToTxn and EndTxn also
come in steps (`*_durably`, txn_steps.py) that return where they would wait
for an fsync, so the broker runs them on its event loop and awaits the
fsyncs there, holding no thread; the blocking methods are those steps run
in the calling thread. Errors are `LogStoreError`s carrying Kafka's codes.
"""
from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Never

from logstore.broker.coordinator.internal_topics import (
    INTERNAL_TOPICS,
    OFFSETS_TOPIC,
    TXN_STATE_TOPIC,
    InternalTopics,
    ShareStateTopicConfig,
)
from logstore.broker.coordinator.txn_config import TxnConfig
from logstore.broker.coordinator.txn_init import init_transit
from logstore.broker.coordinator.txn_log import TxnState
from logstore.broker.coordinator.txn_markers import TxnCompleter, TxnMarkerWriter
from logstore.broker.coordinator.txn_metadata import (
    COORDINATOR_EPOCH,
    ENDED,
    EPOCH_EXHAUSTED,
    MAX_EPOCH,
    PREPARED,
    TV_0,
    TV_2,
    TWO_PHASE_TIMEOUT_MS,
    TxnMetadata,
    completed,
)
from logstore.broker.coordinator.txn_state_store import TxnStateStore
from logstore.broker.coordinator.txn_steps import Step, after, run_blocking
from logstore.broker.coordinator.txn_timeouts import TxnTimeouts
from logstore.errors import (
    ConcurrentTransactionsError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidRequestError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    ProducerFencedError,
    TransactionalIdNotFoundError,
    UnknownTopicOrPartitionError,
)

if TYPE_CHECKING:
    from logstore.manager import LogManager

__all__ = ["COORDINATOR_EPOCH", "EPOCH_EXHAUSTED", "INTERNAL_TOPICS", "MAX_EPOCH", "OFFSETS_TOPIC", "TXN_STATE_TOPIC",
           "TransactionCoordinator", "TxnConfig", "TxnMetadata"]


TRANSACTION_ABORTABLE = 120  # Kafka's code for a partition a transaction does not hold (KIP-890)


def _now_ms() -> int:
    return int(time.time() * 1000)


class TransactionCoordinator:
    """Transactional ids, their producer ids and epochs, and their transactions, over `__transaction_state`.

    Task-safe: calls come from the broker's coordinator pool, the upkeep thread and in-process
    producers; the state store's lock serialises decisions and is never held across a write.
    """

    def __init__(self, store: LogManager, allocate_producer_id: Callable[[], int], config: TxnConfig = TxnConfig(),
                 *, clock: Callable[[], int] = _now_ms,
                 on_markers: Callable[[list[tuple[str, int]]], None] | None = None,
                 share_state_topic: ShareStateTopicConfig | None = None) -> None:
        self.store = store
        self.config = config
        self._allocate = allocate_producer_id
        self._clock = clock
        self._topics = InternalTopics(store, config, share_state_topic or ShareStateTopicConfig())
        # Shared with the share coordinator, whose `__share_group_state` is created the same way.
        self.internal_topics = self._topics
        self._state = TxnStateStore(store, self._topics, config.fsync)
        self._markers = TxnMarkerWriter(store, config.fsync, on_markers or (lambda partitions: None))
        self._completer = TxnCompleter(self._state, self._markers, clock)
        self._timeouts = TxnTimeouts(self._state, self._completer, clock, config)

    @property
    def on_offsets_marker(self) -> Callable[[int, int, bool], None]:
        """Called with (partition, producer id, commit) once a marker is durable in `__consumer_offsets`."""
        return self._markers.on_offsets_marker

    @on_offsets_marker.setter
    def on_offsets_marker(self, callback: Callable[[int, int, bool], None]) -> None:
        self._markers.on_offsets_marker = callback

    @property
    def lock(self) -> threading.Lock:
        """The lock every decision takes, held only briefly and never across a write or an fsync: a caller
        that finds it free may run a `*_durably` call on its event loop."""
        return self._state.lock

    @property
    def highest_loaded_producer_id(self) -> int:
        """The highest producer id any loaded record names (current, previous or next)."""
        return self._state.highest_loaded_producer_id

    # -- internal topics -----------------------------------------------------------------

    def ensure_state_topic(self) -> None:
        """Create `__transaction_state` if it is missing (Kafka does so at the first lookup)."""
        self._topics.ensure_state_topic()

    def ensure_share_state_topic(self) -> None:
        """Create `__share_group_state` if it is missing."""
        self._topics.ensure_share_state_topic()

    def ensure_offsets_topic(self) -> None:
        """Create `__consumer_offsets` if it is missing (Kafka does so at the first group lookup)."""
        self._topics.ensure_offsets_topic()

    def offsets_partition(self, group_id: str) -> tuple[str, int]:
        """The `__consumer_offsets` partition of a group (the topic is created if missing)."""
        return self._topics.offsets_partition(group_id)

    def state_partition(self, transactional_id: str) -> int:
        """The `__transaction_state` partition that holds `transactional_id` (the topic is created if missing)."""
        return self._topics.state_partition(transactional_id)

    def load(self) -> int:
        """Rebuild every transactional id from `__transaction_state`; how many there are."""
        return self._state.load()

    # -- the client APIs -----------------------------------------------------------------

    def init_producer_id(self, transactional_id: str | None, timeout_ms: int, producer_id: int = -1,
                         producer_epoch: int = -1) -> tuple[int, int]:
        """InitProducerId: (producer id, epoch) for a new or returning producer, fencing older instances.

        Without a transactional id: a fresh producer id at epoch 0. With one,
        the epoch is bumped; an open transaction is aborted first (with a
        bumped epoch that fences its producer) and ConcurrentTransactionsError
        asks the caller to retry. `producer_id`/`producer_epoch` (KIP-360) say
        which instance is asking.
        """
        if transactional_id is None:
            return self._allocate(), 0
        pid, epoch, _, _ = self.init_two_phase(transactional_id, timeout_ms, producer_id, producer_epoch)
        return pid, epoch

    def init_two_phase(self, transactional_id: str, timeout_ms: int, producer_id: int = -1,
                       producer_epoch: int = -1, enable_2pc: bool = False,
                       keep_prepared: bool = False) -> tuple[int, int, int, int]:
        """InitProducerId v6 (KIP-939): (producer id, epoch, ongoing producer id, ongoing epoch).

        `enable_2pc` makes the id's transactions two-phase-commit ones: their
        timeout is Integer.MAX_VALUE, persisted with them, and the timeout
        sweep never aborts them (the caller checked that the broker allows it
        and the principal may). `keep_prepared` keeps such a transaction open
        instead of aborting it: the epoch is bumped (fencing the instance that
        wrote it) and the transaction's own producer id and epoch are answered
        as the ongoing ones, so the new instance can end it with EndTxn. The
        ongoing id and epoch are -1 when nothing was kept.
        """
        return run_blocking(self.init_two_phase_durably(transactional_id, timeout_ms, producer_id, producer_epoch,
                                                        enable_2pc, keep_prepared))

    def init_two_phase_durably(self, transactional_id: str, timeout_ms: int, producer_id: int = -1,
                               producer_epoch: int = -1, enable_2pc: bool = False,
                               keep_prepared: bool = False) -> Step[tuple[int, int, int, int]]:
        """`init_two_phase` in steps (txn_steps.py); the first creates `__transaction_state` if it is missing
        (`state_topic_exists`), which blocks on many fsyncs."""
        _check_id(transactional_id)
        if enable_2pc:
            timeout_ms = TWO_PHASE_TIMEOUT_MS
        elif not 0 < timeout_ms <= self.config.max_timeout_ms:
            raise InvalidTransactionTimeoutError(
                f"transaction timeout {timeout_ms} ms is not in 1..{self.config.max_timeout_ms} "
                "(transaction.max.timeout.ms)")
        if keep_prepared and not enable_2pc:
            raise InvalidRequestError("keepPreparedTxn needs enable2Pc: only a two-phase-commit transaction is kept")
        self.ensure_state_topic()
        expected = (producer_id, producer_epoch) if producer_id >= 0 else None
        now = self._clock()
        with self._state.lock:
            meta = self._state.txns.get(transactional_id)
            if meta is None:
                meta = TxnMetadata(transactional_id, self._allocate(), -1, timeout_ms, TxnState.EMPTY,
                                   last_update_ms=now)
                self._state.add(meta)
            ongoing = (meta.producer_id, meta.producer_epoch)
            transit = init_transit(meta, timeout_ms, expected, now, self._allocate, keep_prepared)
            meta.pending = transit.state
        if transit.state == TxnState.PREPARE_EPOCH_FENCE:
            return after(self._completer.fence_and_abort_durably(meta, transit),
                         lambda _: _retry_after_fence(transactional_id))
        if transit.state != TxnState.ONGOING:
            ongoing = (-1, -1)
        answer = transit.producer_id, transit.producer_epoch, ongoing[0], ongoing[1]
        return after(self._state.persist_durably(meta, transit), lambda _: answer)

    @property
    def state_topic_exists(self) -> bool:
        """Whether `__transaction_state` exists (else the next InitProducerId creates it)."""
        return TXN_STATE_TOPIC in self.store.topics()

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: Iterable[tuple[str, int]], client_version: int = TV_0) -> None:
        """AddPartitionsToTxn: put partitions in the producer's transaction, opening it if none is.

        `client_version` TV_2 is the implicit add of a Produce v12+ or a
        TxnOffsetCommit v5+: the transaction then ends with an epoch bump.
        """
        run_blocking(self.add_partitions_durably(transactional_id, producer_id, producer_epoch, partitions,
                                                 client_version))

    def add_partitions_durably(self, transactional_id: str, producer_id: int, producer_epoch: int,
                               partitions: Iterable[tuple[str, int]], client_version: int = TV_0) -> Step[None]:
        """`add_partitions` in steps (txn_steps.py): decided and appended now, done once durable."""
        _check_id(transactional_id)
        partitions = frozenset(partitions)
        count = self.store.partition_count
        unknown = sorted(tp for tp in partitions if not 0 <= tp[1] < count(tp[0]))
        if unknown:
            error = UnknownTopicOrPartitionError(f"no such partitions: {unknown}")
            error.partitions = unknown
            raise error
        now = self._clock()
        with self._state.lock:
            meta = self._member(transactional_id, producer_id, producer_epoch)
            if meta.state in PREPARED:
                raise ConcurrentTransactionsError(f"transactional id {transactional_id!r} is ending a transaction")
            if meta.state == TxnState.ONGOING:
                if partitions <= meta.partitions:
                    return None
                transit = meta.transit(partitions=meta.partitions | partitions, last_update_ms=now,
                                       client_version=client_version)
            elif meta.state in ENDED:
                transit = meta.transit(state=TxnState.ONGOING, partitions=partitions, start_ms=now,
                                       last_update_ms=now, client_version=client_version)
            else:
                raise AssertionError(f"transactional id {transactional_id!r} is {meta.state.kafka_name}")
            meta.pending = transit.state
        return self._state.persist_durably(meta, transit)

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """AddPartitionsToTxn v4+ with VerifyOnly: which partitions are in the producer's open transaction.

        Kafka's codes: NONE for a partition in it, TRANSACTION_ABORTABLE for one
        that is not; the request's own error (INVALID_PRODUCER_ID_MAPPING,
        PRODUCER_FENCED, CONCURRENT_TRANSACTIONS while it ends) raised instead.
        """
        _check_id(transactional_id)
        with self._state.lock:
            meta = self._state.txns.get(transactional_id)
            if meta is None or meta.producer_id != producer_id:
                raise InvalidProducerIdMappingError(
                    f"producer {producer_id} does not hold transactional id {transactional_id!r}")
            if meta.producer_epoch != producer_epoch:
                raise ProducerFencedError(f"epoch {producer_epoch} of producer {producer_id} is not the current "
                                          f"epoch {meta.producer_epoch} of {transactional_id!r}")
            if meta.state in PREPARED:
                raise ConcurrentTransactionsError(f"transactional id {transactional_id!r} is ending a transaction")
            return {tp: 0 if tp in meta.partitions else TRANSACTION_ABORTABLE for tp in partitions}

    def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str,
                    client_version: int = TV_0) -> None:
        """AddOffsetsToTxn (or TxnOffsetCommit v5's implicit add, TV_2): put the group's `__consumer_offsets`
        partition in the transaction."""
        _check_id(transactional_id)
        self.add_partitions(transactional_id, producer_id, producer_epoch, [self.offsets_partition(group_id)],
                            client_version)

    def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                        client_version: int = TV_0) -> tuple[int, int]:
        """EndTxn: commit or abort the open transaction; returns once its markers are written.

        With TV_2 (EndTxn v5+) the Prepare state carries the epoch bumped by
        one, the markers are written with it, and the answer is the producer
        id and epoch the producer goes on with (a new id at epoch 0 once the
        epoch is exhausted); with TV_0 it is (-1, -1), as Kafka answers.
        """
        return run_blocking(self.end_transaction_durably(transactional_id, producer_id, producer_epoch, commit,
                                                         client_version))

    def end_transaction_durably(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                                client_version: int = TV_0) -> Step[tuple[int, int]]:
        """`end_transaction` in steps (txn_steps.py): the decision appended now, the markers once it is
        durable, the answer once they are."""
        _check_id(transactional_id)
        if client_version >= TV_2:
            return self._end_transaction_v2(transactional_id, producer_id, producer_epoch, commit)
        now = self._clock()
        wanted = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        with self._state.lock:
            meta = self._member(transactional_id, producer_id, producer_epoch)
            state = meta.state
            if state == TxnState.ONGOING:
                transit = meta.transit(state=wanted, last_update_ms=now, client_version=TV_0)
                meta.pending = wanted
            elif state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT) and commit == (
                    state == TxnState.COMPLETE_COMMIT):
                return -1, -1  # a retry of an EndTxn that succeeded
            elif state == wanted:
                raise ConcurrentTransactionsError(f"transactional id {transactional_id!r} is ending a transaction")
            else:
                raise InvalidTxnStateError(f"transactional id {transactional_id!r} cannot "
                                           f"{'commit' if commit else 'abort'} in state {state.kafka_name}")
        return self._ended(meta, transit, wanted, (-1, -1))

    def _ended(self, meta: TxnMetadata, transit: TxnMetadata, wanted: TxnState,
               answer: tuple[int, int]) -> Step[tuple[int, int]]:
        """The decision `transit` persisted, then its markers and Complete state; `answer` once done (markers
        that cannot be written yet leave the Prepare state to `complete_prepared`: the decision stands)."""
        decided = self._state.persist_durably(meta, transit, then=completed(wanted))
        return after(after(decided, lambda _: self._completer.complete_durably(meta, claimed=True)),
                     lambda _: answer)

    def _end_transaction_v2(self, transactional_id: str, producer_id: int, producer_epoch: int,
                            commit: bool) -> Step[tuple[int, int]]:
        """EndTxn under TV_2 (Kafka's endTransaction for clients that bump the epoch per transaction).

        A retry is told apart by its epoch, one below the bumped one (or the
        exhausted epoch of the previous producer id): it is answered with the
        current id and epoch. Abort is allowed with nothing in the transaction
        (Empty or Complete: an epoch bump and markers nowhere); commit is not.
        """
        now = self._clock()
        with self._state.lock:
            meta = self._state.txns.get(transactional_id)
            if meta is None:
                raise InvalidProducerIdMappingError(
                    f"producer {producer_id} does not hold transactional id {transactional_id!r}")
            state = meta.state
            retry_on_overflow = (meta.previous_producer_id == producer_id and producer_epoch == EPOCH_EXHAUSTED
                                 and meta.producer_epoch == 0)
            # A retry of this producer's own bumping end, not a zombie's one epoch below a fence's bump; after a
            # load the last epoch is unknown (-1) and the one below is taken for a retry, as Kafka does.
            retry_on_bump = (meta.producer_epoch == producer_epoch + 1
                             and meta.last_producer_epoch in (producer_epoch, -1))
            if meta.producer_id != producer_id and not retry_on_overflow:
                raise InvalidProducerIdMappingError(
                    f"producer {producer_id} does not hold transactional id {transactional_id!r}")
            if state in PREPARED:
                valid = retry_on_bump
            elif state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
                valid = retry_on_bump or retry_on_overflow or producer_epoch == meta.producer_epoch
            else:
                valid = producer_epoch == meta.producer_epoch
            if not valid:
                raise ProducerFencedError(f"epoch {producer_epoch} of producer {producer_id} is not the current "
                                          f"epoch {meta.producer_epoch} of {transactional_id!r}")
            if meta.pending is not None:
                raise ConcurrentTransactionsError(f"transactional id {transactional_id!r} is changing state")
            retry = retry_on_bump or retry_on_overflow
            wanted = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
            if state == TxnState.ONGOING:
                transit = self._bumped(meta, wanted, now, empty=False)
            elif state == (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT) and retry:
                return meta.producer_id, meta.producer_epoch
            elif not commit and not retry and state in ENDED:
                transit = self._bumped(meta, wanted, now, empty=True)
            elif state == wanted:
                raise ConcurrentTransactionsError(f"transactional id {transactional_id!r} is ending a transaction")
            else:
                raise InvalidTxnStateError(f"transactional id {transactional_id!r} cannot "
                                           f"{'commit' if commit else 'abort'} in state {state.kafka_name}")
            meta.pending = wanted
        return self._ended(meta, transit, wanted, _continued(transit))

    def _bumped(self, meta: TxnMetadata, wanted: TxnState, now: int, empty: bool) -> TxnMetadata:
        """The Prepare state of a TV_2 end: the epoch one higher (the markers carry it), and a next
        producer id if the current one's epochs are exhausted (called under the lock)."""
        next_id = self._allocate() if meta.producer_epoch >= EPOCH_EXHAUSTED else -1
        return meta.transit(state=wanted, producer_epoch=min(meta.producer_epoch + 1, MAX_EPOCH),
                            last_producer_epoch=meta.producer_epoch, next_producer_id=next_id,
                            client_version=TV_2, start_ms=now if empty else meta.start_ms, last_update_ms=now)

    def _member(self, transactional_id: str, producer_id: int, producer_epoch: int) -> TxnMetadata:
        """The id's metadata if this producer holds it now (called under the lock)."""
        meta = self._state.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            raise InvalidProducerIdMappingError(
                f"producer {producer_id} does not hold transactional id {transactional_id!r}")
        if producer_epoch != meta.producer_epoch:
            raise ProducerFencedError(f"epoch {producer_epoch} of producer {producer_id} is not the current "
                                      f"epoch {meta.producer_epoch} of {transactional_id!r}")
        if meta.pending is not None:
            raise ConcurrentTransactionsError(f"transactional id {transactional_id!r} is changing state")
        return meta

    @contextmanager
    def verified_write(self, transactional_id: str | None, producer_id: int, producer_epoch: int, topic: str,
                       partition: int) -> Iterator[None]:
        """Hold off transitions while a transactional batch is appended, if its partition is in the
        producer's open transaction (KIP-890's server-side defence): a late write can then
        never land after the markers, in what would become the next transaction."""
        with self._state.lock:
            name = transactional_id or self._state.by_producer.get(producer_id)
            meta = self._state.txns.get(name) if name is not None else None
            if meta is None or meta.producer_id != producer_id:
                raise InvalidTxnStateError(f"producer {producer_id} has no transaction open with this broker")
            if producer_epoch < meta.producer_epoch:
                raise InvalidProducerEpochError(
                    f"epoch {producer_epoch} of producer {producer_id} is older than {meta.producer_epoch}")
            if (meta.state != TxnState.ONGOING or meta.pending not in (None, TxnState.ONGOING)
                    or producer_epoch != meta.producer_epoch or (topic, partition) not in meta.partitions):
                raise InvalidTxnStateError(
                    f"{topic}-{partition} is not in an open transaction of producer {producer_id} "
                    f"epoch {producer_epoch}")
            yield

    # -- upkeep --------------------------------------------------------------------------

    def complete_prepared(self) -> list[str]:
        """Finish every transaction decided but not completed (after a start, or a failed marker write)."""
        return self._completer.complete_prepared()

    def abort_timed_out(self, now: int | None = None) -> list[str]:
        """Abort transactions open longer than their timeout, bumping the epoch so their producer is fenced."""
        return self._timeouts.abort_timed_out(now)

    def expire_transactional_ids(self, now: int | None = None) -> list[str]:
        """Forget ids idle for transactional.id.expiration.ms with no transaction open (a tombstone each)."""
        return self._timeouts.expire_transactional_ids(now)

    # -- what operators see ----------------------------------------------------------------

    def describe(self, transactional_id: str) -> TxnMetadata:
        """A copy of one id's metadata."""
        with self._state.lock:
            meta = self._state.txns.get(transactional_id)
            if meta is None:
                raise TransactionalIdNotFoundError(f"no transactional id {transactional_id!r}")
            return dataclasses.replace(meta)

    def transactions(self) -> list[TxnMetadata]:
        """Copies of every id's metadata, sorted by id."""
        with self._state.lock:
            return [dataclasses.replace(self._state.txns[t]) for t in sorted(self._state.txns)]


def _continued(prepared: TxnMetadata) -> tuple[int, int]:
    """The producer id and epoch a TV_2 producer goes on with once `prepared` completes."""
    if prepared.next_producer_id >= 0:
        return prepared.next_producer_id, 0
    return prepared.producer_id, prepared.producer_epoch


def _retry_after_fence(transactional_id: str) -> Never:
    raise ConcurrentTransactionsError(f"transactional id {transactional_id!r}: its open transaction was aborted "
                                      "to fence the previous producer; retry")


def _check_id(transactional_id: str | None) -> None:
    if not transactional_id:
        raise InvalidRequestError("a transactional id must be a non-empty string")
