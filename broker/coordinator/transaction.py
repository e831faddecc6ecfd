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

The coordinator never touches a socket. Its methods block (on fsyncs) and
are safe to call from several threads; the broker runs them in a pool.
Errors are `LogStoreError`s carrying Kafka's codes.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping

from logstore.crash_points import crash_point
from logstore.broker.coordinator.partitioning import partition_for
from logstore.broker.coordinator.txn_log import (TxnLogValue, TxnState, decode_key, decode_value, encode_key,
                                                 encode_value)
from logstore.errors import (ConcurrentTransactionsError, CoordinatorNotAvailableError, CorruptRecordError,
                             InvalidProducerEpochError, InvalidProducerIdMappingError, InvalidRequestError,
                             InvalidTransactionTimeoutError, InvalidTxnStateError, LogStoreError,
                             ProducerFencedError, StorageError, TopicExistsError, TransactionalIdNotFoundError,
                             UnknownTopicOrPartitionError)

log = logging.getLogger(__name__)

TXN_STATE_TOPIC = "__transaction_state"
OFFSETS_TOPIC = "__consumer_offsets"
INTERNAL_TOPICS = frozenset({TXN_STATE_TOPIC, OFFSETS_TOPIC})
# One coordinator ever leads these partitions, so markers never meet a newer coordinator epoch.
COORDINATOR_EPOCH = 0
# Kafka moves to a new producer id once the epoch reaches Short.MAX_VALUE - 1.
EPOCH_EXHAUSTED = 32766
MAX_EPOCH = 32767
_PREPARED = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
_ENDED = (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


@dataclass(frozen=True)
class TxnConfig:
    """The coordinator's settings, under Kafka's broker config names in `from_settings`."""

    state_partitions: int = 50            # transaction.state.log.num.partitions
    state_segment_bytes: int = 104_857_600  # transaction.state.log.segment.bytes
    offsets_partitions: int = 50          # offsets.topic.num.partitions
    offsets_segment_bytes: int = 104_857_600  # offsets.topic.segment.bytes
    max_timeout_ms: int = 900_000         # transaction.max.timeout.ms
    id_expiration_ms: int = 604_800_000   # transactional.id.expiration.ms
    fsync: bool = True                    # logstore.acks.all.fsync: transitions and markers fsynced

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> "TxnConfig":
        """From broker settings (missing names keep Kafka's defaults)."""
        names = {"transaction.state.log.num.partitions": "state_partitions",
                 "transaction.state.log.segment.bytes": "state_segment_bytes",
                 "offsets.topic.num.partitions": "offsets_partitions",
                 "offsets.topic.segment.bytes": "offsets_segment_bytes",
                 "transaction.max.timeout.ms": "max_timeout_ms",
                 "transactional.id.expiration.ms": "id_expiration_ms",
                 "logstore.acks.all.fsync": "fsync"}
        return cls(**{field: settings[name] for name, field in names.items() if name in settings})


@dataclass
class TxnMetadata:
    """What the coordinator knows of one transactional id."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[tuple[str, int]] = frozenset()
    start_ms: int = -1
    last_update_ms: int = -1
    # The id before the last epoch exhaustion, and the epoch before the last bump
    # (KIP-360: a retried InitProducerId is answered, not fenced).
    previous_producer_id: int = -1
    last_producer_epoch: int = -1
    pending: TxnState | None = None

    def transit(self, **changes) -> "TxnMetadata":
        """The metadata after a transition (not yet persisted)."""
        return dataclasses.replace(self, pending=None, **changes)

    def log_value(self) -> TxnLogValue:
        """The record that persists this metadata."""
        return TxnLogValue(self.producer_id, self.producer_epoch, self.timeout_ms, self.state, self.partitions,
                           self.last_update_ms, self.start_ms)

    @classmethod
    def from_log(cls, transactional_id: str, value: TxnLogValue) -> "TxnMetadata":
        """The metadata a persisted record describes."""
        return cls(transactional_id, value.producer_id, value.producer_epoch, value.timeout_ms, value.state,
                   value.partitions, value.start_ms, value.last_update_ms, value.previous_producer_id)


def _now_ms() -> int:
    return int(time.time() * 1000)


class TransactionCoordinator:
    """Transactional ids, their producer ids and epochs, and their transactions, over `__transaction_state`."""

    def __init__(self, store, allocate_producer_id: Callable[[], int], config: TxnConfig = TxnConfig(), *,
                 clock: Callable[[], int] = _now_ms, on_markers: Callable[[], None] | None = None):
        self.store = store
        self.config = config
        self._allocate = allocate_producer_id
        self._clock = clock
        self._on_markers = on_markers or (lambda: None)
        # Called with (partition, producer id, commit) once a marker is durable in `__consumer_offsets`:
        # the group coordinator applies or drops that producer's transactional offsets.
        self.on_offsets_marker: Callable[[int, int, bool], None] = lambda partition, producer_id, commit: None
        self._lock = threading.Lock()
        self._topic_lock = threading.Lock()
        # Internal topics known to exist (the broker refuses to delete them), so a write need not list the topics.
        self._created: set[str] = set()
        self._txns: dict[str, TxnMetadata] = {}
        self._by_producer: dict[int, str] = {}
        # The highest producer id any loaded record names (current, previous or next): none may be handed out again.
        self.highest_loaded_producer_id = -1

    # -- internal topics -----------------------------------------------------------------

    def _ensure_topic(self, name: str, partitions: int, segment_bytes: int) -> None:
        if name in self._created:
            return
        # Checked under the lock: a topic being created shows a partial partition count meanwhile,
        # and an id hashed over that count would land in the wrong partition.
        with self._topic_lock:
            if name not in self.store.topics():
                try:
                    # Records are written uncompressed (Kafka enforces it for __transaction_state).
                    self.store.create_topic(name, partitions, {"cleanup.policy": "compact",
                                                               "segment.bytes": segment_bytes})
                    log.info("created %s with %d partitions", name, partitions)
                except TopicExistsError:
                    pass
            self._created.add(name)

    def ensure_state_topic(self) -> None:
        """Create `__transaction_state` if it is missing (Kafka does so at the first lookup)."""
        self._ensure_topic(TXN_STATE_TOPIC, self.config.state_partitions, self.config.state_segment_bytes)

    def ensure_offsets_topic(self) -> None:
        """Create `__consumer_offsets` if it is missing (Kafka does so at the first group lookup)."""
        self._ensure_topic(OFFSETS_TOPIC, self.config.offsets_partitions, self.config.offsets_segment_bytes)

    def offsets_partition(self, group_id: str) -> tuple[str, int]:
        """The `__consumer_offsets` partition of a group (the topic is created if missing)."""
        self.ensure_offsets_topic()
        return OFFSETS_TOPIC, partition_for(group_id, self.store.partitions(OFFSETS_TOPIC))

    def state_partition(self, transactional_id: str) -> int:
        """The `__transaction_state` partition that holds `transactional_id` (the topic is created if missing).

        The count is the topic's own, as created: a changed setting must not move ids.
        """
        self.ensure_state_topic()
        return partition_for(transactional_id, self.store.partitions(TXN_STATE_TOPIC))

    # -- loading -------------------------------------------------------------------------

    def load(self) -> int:
        """Rebuild every transactional id from `__transaction_state`; how many there are.

        A record that cannot be decoded stops the load: guessing past it could
        finish a decided transaction the other way.
        """
        partitions = self.store.topics().get(TXN_STATE_TOPIC, 0)
        txns: dict[str, TxnMetadata] = {}
        highest = -1
        for p in range(partitions):
            for record in self.store.log(TXN_STATE_TOPIC, p).iter_records():
                try:
                    if record.key is None:
                        raise CorruptRecordError("a record without a key")
                    transactional_id = decode_key(record.key)
                    if record.value is None:
                        txns.pop(transactional_id, None)
                    else:
                        value = decode_value(record.value)
                        highest = max(highest, value.producer_id, value.previous_producer_id, value.next_producer_id)
                        txns[transactional_id] = TxnMetadata.from_log(transactional_id, value)
                except CorruptRecordError as exc:
                    raise StorageError(f"{TXN_STATE_TOPIC}-{p} offset {record.offset}: {exc}") from exc
        with self._lock:
            self._txns = txns
            self._by_producer = {m.producer_id: t for t, m in txns.items()}
            self.highest_loaded_producer_id = highest
        return len(txns)

    # -- persisting transitions ------------------------------------------------------------

    def _write(self, transactional_id: str, value: TxnLogValue | None, durable: bool = True) -> None:
        partition = self.store.log(TXN_STATE_TOPIC, self.state_partition(transactional_id))
        value_bytes = None if value is None else encode_value(value)
        batch = partition.format.encode_batch([encode_key(transactional_id)], [value_bytes])
        partition.append(bytearray(batch), client=False, durable=durable and self.config.fsync)

    def _persist(self, meta: TxnMetadata, transit: TxnMetadata, durable: bool = True,
                 then: TxnState | None = None) -> None:
        """Write `transit` (its state already `meta.pending`), then make it current; on failure nothing changes.

        `then` becomes the pending state in the same step, so the caller keeps
        the id for its next write (no other thread can claim it in between).
        """
        try:
            self._write(meta.transactional_id, transit.log_value(), durable)
        except LogStoreError as exc:
            with self._lock:
                meta.pending = None
            raise CoordinatorNotAvailableError(
                f"transactional id {meta.transactional_id!r}: {TXN_STATE_TOPIC} not written: {exc}") from exc
        with self._lock:
            if transit.producer_id != meta.producer_id:
                self._by_producer.pop(meta.producer_id, None)
            self._by_producer[transit.producer_id] = meta.transactional_id
            for f in dataclasses.fields(TxnMetadata):
                setattr(meta, f.name, getattr(transit, f.name))
            meta.pending = then

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
        _check_id(transactional_id)
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            raise InvalidTransactionTimeoutError(
                f"transaction timeout {timeout_ms} ms is not in 1..{self.config.max_timeout_ms} "
                "(transaction.max.timeout.ms)")
        self.ensure_state_topic()
        expected = (producer_id, producer_epoch) if producer_id >= 0 else None
        now = self._clock()
        with self._lock:
            meta = self._txns.get(transactional_id)
            if meta is None:
                meta = TxnMetadata(transactional_id, self._allocate(), -1, timeout_ms, TxnState.EMPTY,
                                   last_update_ms=now)
                self._txns[transactional_id] = meta
                self._by_producer[meta.producer_id] = transactional_id
            transit = self._init_transit(meta, timeout_ms, expected, now)
            meta.pending = transit.state
        if transit.state == TxnState.PREPARE_EPOCH_FENCE:
            self._fence_and_abort(meta, transit)
            raise ConcurrentTransactionsError(
                f"transactional id {transactional_id!r}: its open transaction was aborted to fence the "
                "previous producer; retry")
        self._persist(meta, transit)
        return transit.producer_id, transit.producer_epoch

    def _init_transit(self, meta: TxnMetadata, timeout_ms: int, expected, now: int) -> TxnMetadata:
        if meta.pending is not None:
            raise ConcurrentTransactionsError(f"transactional id {meta.transactional_id!r} is changing state")
        if expected is not None and not (
                meta.producer_epoch == -1 or expected[0] == meta.producer_id
                or (expected[0] == meta.previous_producer_id and expected[1] >= EPOCH_EXHAUSTED)):
            raise ProducerFencedError(f"producer {expected[0]} no longer holds {meta.transactional_id!r}")
        if meta.state in _PREPARED:
            raise ConcurrentTransactionsError(f"transactional id {meta.transactional_id!r} is ending a transaction")
        if meta.state == TxnState.ONGOING:
            # The bumped epoch goes into the abort's markers, which fences the old producer
            # in every partition; the caller's retry bumps once more.
            return meta.transit(state=TxnState.PREPARE_EPOCH_FENCE,
                                producer_epoch=min(meta.producer_epoch + 1, MAX_EPOCH), last_producer_epoch=-1)
        if meta.state not in _ENDED:
            raise AssertionError(f"transactional id {meta.transactional_id!r} is {meta.state.kafka_name}")
        fresh = dict(state=TxnState.EMPTY, timeout_ms=timeout_ms, partitions=frozenset(), start_ms=-1,
                     last_update_ms=now)
        if meta.producer_epoch >= EPOCH_EXHAUSTED and (expected is None or expected[1] == meta.producer_epoch):
            return meta.transit(producer_id=self._allocate(), producer_epoch=0,
                                previous_producer_id=meta.producer_id,
                                last_producer_epoch=meta.producer_epoch if expected else -1, **fresh)
        bumped = meta.producer_epoch + 1
        if expected is None:
            return meta.transit(producer_epoch=bumped, last_producer_epoch=-1, **fresh)
        if meta.producer_epoch == -1 or expected[1] == meta.producer_epoch:
            return meta.transit(producer_epoch=bumped, last_producer_epoch=meta.producer_epoch, **fresh)
        if expected[1] == meta.last_producer_epoch:
            # A retry of a bump that succeeded: answer it again, unchanged.
            return meta.transit(**fresh)
        raise ProducerFencedError(f"epoch {expected[1]} of producer {expected[0]} has been fenced")

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: Iterable[tuple[str, int]]) -> None:
        """AddPartitionsToTxn: put partitions in the producer's transaction, opening it if none is."""
        _check_id(transactional_id)
        partitions = frozenset(partitions)
        topics = self.store.topics()
        unknown = sorted(tp for tp in partitions if not 0 <= tp[1] < topics.get(tp[0], 0))
        if unknown:
            error = UnknownTopicOrPartitionError(f"no such partitions: {unknown}")
            error.partitions = unknown
            raise error
        now = self._clock()
        with self._lock:
            meta = self._member(transactional_id, producer_id, producer_epoch)
            if meta.state in _PREPARED:
                raise ConcurrentTransactionsError(f"transactional id {transactional_id!r} is ending a transaction")
            if meta.state == TxnState.ONGOING:
                if partitions <= meta.partitions:
                    return
                transit = meta.transit(partitions=meta.partitions | partitions, last_update_ms=now)
            elif meta.state in _ENDED:
                transit = meta.transit(state=TxnState.ONGOING, partitions=partitions, start_ms=now,
                                       last_update_ms=now)
            else:
                raise AssertionError(f"transactional id {transactional_id!r} is {meta.state.kafka_name}")
            meta.pending = transit.state
        self._persist(meta, transit)

    def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str) -> None:
        """AddOffsetsToTxn: put the group's `__consumer_offsets` partition in the transaction."""
        _check_id(transactional_id)
        self.add_partitions(transactional_id, producer_id, producer_epoch, [self.offsets_partition(group_id)])

    def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> None:
        """EndTxn: commit or abort the open transaction; returns once its markers are written."""
        _check_id(transactional_id)
        now = self._clock()
        wanted = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        with self._lock:
            meta = self._member(transactional_id, producer_id, producer_epoch)
            state = meta.state
            if state == TxnState.ONGOING:
                transit = meta.transit(state=wanted, last_update_ms=now)
                meta.pending = wanted
            elif state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT) and commit == (
                    state == TxnState.COMPLETE_COMMIT):
                return  # a retry of an EndTxn that succeeded
            elif state == wanted:
                raise ConcurrentTransactionsError(f"transactional id {transactional_id!r} is ending a transaction")
            else:
                raise InvalidTxnStateError(f"transactional id {transactional_id!r} cannot "
                                           f"{'commit' if commit else 'abort'} in state {state.kafka_name}")
        self._persist(meta, transit, then=_completed(wanted))
        crash_point("txn-prepared")
        self._complete(meta, claimed=True)

    def _member(self, transactional_id: str, producer_id: int, producer_epoch: int) -> TxnMetadata:
        """The id's metadata if this producer holds it now (called under the lock)."""
        meta = self._txns.get(transactional_id)
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
        with self._lock:
            name = transactional_id or self._by_producer.get(producer_id)
            meta = self._txns.get(name) if name is not None else None
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

    # -- ending transactions -------------------------------------------------------------

    def _fence_and_abort(self, meta: TxnMetadata, fence: TxnMetadata) -> None:
        """Abort an open transaction with the bumped epoch of `fence` (its state is `meta.pending`)."""
        transit = fence.transit(state=TxnState.PREPARE_ABORT, last_update_ms=self._clock())
        with self._lock:
            meta.pending = TxnState.PREPARE_ABORT
        self._persist(meta, transit, then=TxnState.COMPLETE_ABORT)
        crash_point("txn-prepared")
        self._complete(meta, claimed=True)

    def _complete(self, meta: TxnMetadata, claimed: bool = False) -> bool:
        """Write the markers of a prepared transaction, then its Complete state; False if not done now.

        `claimed`: the caller already holds the id (its pending state is the
        Complete one). A failure leaves the Prepare state for
        `complete_prepared` to retry: the decision is on disk already, so the
        caller has nothing to undo.
        """
        with self._lock:
            if meta.state not in _PREPARED or meta.pending is not (_completed(meta.state) if claimed else None):
                return False
            commit = meta.state == TxnState.PREPARE_COMMIT
            done = _completed(meta.state)
            meta.pending = done
            current = dataclasses.replace(meta)
        try:
            self._write_markers(current, commit)
            crash_point("txn-markers-written")
            # Not fsynced: lost, it is redone from the Prepare state; the id's next transition is fsynced after it.
            self._persist(meta, current.transit(state=done, partitions=frozenset(), last_update_ms=self._clock()),
                          durable=False)
            crash_point("txn-completed")
            return True
        except LogStoreError as exc:
            with self._lock:
                meta.pending = None
            log.warning("transactional id %r stays %s until its markers can be written: %s",
                        meta.transactional_id, meta.state.kafka_name, exc)
            return False

    def _write_markers(self, meta: TxnMetadata, commit: bool) -> None:
        waits = []
        try:
            for topic, partition in sorted(meta.partitions):
                try:
                    target = self.store.log(topic, partition)
                except UnknownTopicOrPartitionError:
                    continue  # deleted since it joined the transaction: nothing left to end
                result = target.write_txn_marker(meta.producer_id, meta.producer_epoch, COORDINATOR_EPOCH,
                                                 commit=commit)
                crash_point("txn-marker")
                if self.config.fsync:
                    waits.append(target.durable(result.last_offset + 1))
            for wait in waits:
                wait.result()
            for topic, partition in sorted(meta.partitions):
                if topic == OFFSETS_TOPIC:
                    self.on_offsets_marker(partition, meta.producer_id, commit)
        finally:
            if waits or meta.partitions:
                self._on_markers()

    def complete_prepared(self) -> list[str]:
        """Finish every transaction decided but not completed (after a start, or a failed marker write)."""
        with self._lock:
            prepared = [m for m in self._txns.values() if m.state in _PREPARED and m.pending is None]
        return [m.transactional_id for m in prepared if self._complete(m)]

    def abort_timed_out(self, now: int | None = None) -> list[str]:
        """Abort transactions open longer than their timeout, bumping the epoch so their producer is fenced."""
        now = self._clock() if now is None else now
        fences = []
        with self._lock:
            for meta in self._txns.values():
                if meta.state == TxnState.ONGOING and meta.pending is None and meta.start_ms + meta.timeout_ms < now:
                    fence = meta.transit(state=TxnState.PREPARE_EPOCH_FENCE,
                                         producer_epoch=min(meta.producer_epoch + 1, MAX_EPOCH),
                                         last_producer_epoch=-1)
                    meta.pending = fence.state
                    fences.append((meta, fence))
        aborted = []
        for meta, fence in fences:
            try:
                log.info("aborting transaction of %r (producer %d): open longer than its timeout of %d ms",
                         meta.transactional_id, meta.producer_id, meta.timeout_ms)
                self._fence_and_abort(meta, fence)
                aborted.append(meta.transactional_id)
            except LogStoreError as exc:
                log.warning("timed-out transaction of %r not aborted yet: %s", meta.transactional_id, exc)
        return aborted

    def expire_transactional_ids(self, now: int | None = None) -> list[str]:
        """Forget ids idle for transactional.id.expiration.ms with no transaction open (a tombstone each)."""
        now = self._clock() if now is None else now
        with self._lock:
            idle = [m for m in self._txns.values() if m.state in _ENDED and m.pending is None
                    and m.last_update_ms + self.config.id_expiration_ms <= now]
            for meta in idle:
                meta.pending = TxnState.DEAD
        expired = []
        for meta in idle:
            try:
                self._write(meta.transactional_id, None)
            except LogStoreError as exc:
                log.warning("transactional id %r not expired yet: %s", meta.transactional_id, exc)
                with self._lock:
                    meta.pending = None
                continue
            with self._lock:
                self._txns.pop(meta.transactional_id, None)
                self._by_producer.pop(meta.producer_id, None)
            expired.append(meta.transactional_id)
        return expired

    # -- what operators see ----------------------------------------------------------------

    def describe(self, transactional_id: str) -> TxnMetadata:
        """A copy of one id's metadata."""
        with self._lock:
            meta = self._txns.get(transactional_id)
            if meta is None:
                raise TransactionalIdNotFoundError(f"no transactional id {transactional_id!r}")
            return dataclasses.replace(meta)

    def transactions(self) -> list[TxnMetadata]:
        """Copies of every id's metadata, sorted by id."""
        with self._lock:
            return [dataclasses.replace(self._txns[t]) for t in sorted(self._txns)]


def _completed(prepared: TxnState) -> TxnState:
    return TxnState.COMPLETE_COMMIT if prepared == TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT


def _check_id(transactional_id: str | None) -> None:
    if not transactional_id:
        raise InvalidRequestError("a transactional id must be a non-empty string")
