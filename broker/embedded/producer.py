"""The embedded producer: Kafka's producer API appending straight to the node's logs.

Records gather per partition in a batch built natively (`batch.size`,
`linger.ms`, as Kafka's accumulator does) and a full or lingering batch is
appended as the broker would append it: with the producer's id, epoch and
sequence, so the log's producer state deduplicates and fences exactly as for
a networked client. A send returns a future of the record's metadata,
completed once the batch is appended and, for acks=all, covered by the
group-commit fsync.

Transactions drive the node's transaction coordinator: a batch's partition
is added to the transaction before the batch is written, offsets go through
the group coordinator's transactional commit, and commit/abort are EndTxn.
As in the Java client, an error inside a transaction makes it abortable
(only `abort_transaction` is allowed next) and a fenced epoch is fatal.

Each step asks the node's authorizer what the broker's handler of its API
asks (access.py): the constructor of an idempotent producer IDEMPOTENT_WRITE
on the CLUSTER or WRITE on some topic, `send` WRITE on the topic (and, to
create it, CREATE on the CLUSTER or the topic), the transactional calls
WRITE on the TRANSACTIONAL_ID, `send_offsets_to_transaction` READ on the
group and the topics; a refusal raises its *AuthorizationFailedError (and,
inside a transaction, makes it abortable).
"""
from __future__ import annotations

import enum
import itertools
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar, TypeVarTuple

from logstore.broker.authorizer import CLUSTER_NAME, AclOperation, ResourceType
from logstore.broker.embedded.access import Access
from logstore.broker.embedded.partitioner import Partitioner
from logstore.broker.embedded.settings import PRODUCER_SETTINGS, parse_settings
from logstore.errors import (
    ConcurrentTransactionsError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    LogStoreError,
    ProducerFencedError,
)
from logstore.native.compression import CODEC_IDS
from logstore.native.record_batch import PendingRecord, SendPath

if TYPE_CHECKING:
    from concurrent.futures import Future

    from logstore.broker.embedded.membership import GroupMetadata
    from logstore.broker.node import Node
    from logstore.formats.kafka import BatchBuilder
    from logstore.formats.protocol import LogFormat
    from logstore.manager import LogManager

TopicPartition = tuple[str, int]
# How long a coordinator call answered CONCURRENT_TRANSACTIONS waits before it is tried again (retry.backoff.ms).
RETRY_BACKOFF_S = 0.02
MAX_BLOCK_S = 60.0                  # max.block.ms: how long init/commit keep retrying
_CLIENT_NUMBERS = itertools.count(1)
_FATAL = (ProducerFencedError, InvalidProducerEpochError, InvalidProducerIdMappingError)
# A record's headers: (key, value) pairs, as the batch builder takes them.
Headers = Sequence[tuple[str | bytes, bytes | None]]
_T = TypeVar("_T")
_Ts = TypeVarTuple("_Ts")


class IllegalStateError(RuntimeError):
    """A call the producer's state does not allow (Kafka's IllegalStateException)."""


class TransactionAbortedError(LogStoreError):
    """A record of a transaction that was aborted before the record was written."""


class RecordMetadata(NamedTuple):
    """Where a sent record landed."""

    topic: str
    partition: int
    offset: int
    timestamp: int


class _State(enum.Enum):
    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in transaction"
    ABORTABLE = "abortable error"
    FATAL = "fatal error"
    CLOSED = "closed"


class _Batch:
    """One partition's records on their way to the log, and whoever waits for them."""

    __slots__ = ("tp", "builder", "created", "done", "base_offset", "append_time", "error", "callbacks", "lock")

    def __init__(self, tp: TopicPartition, builder: BatchBuilder, created: float):
        self.tp = tp
        self.builder = builder
        self.created = created
        self.done = threading.Event()
        self.base_offset = -1
        self.append_time = -1
        self.error: BaseException | None = None
        self.callbacks: list[Callable[[], object]] | None = []  # None once done
        self.lock = threading.Lock()

    def finish(self, error: BaseException | None) -> None:
        """Release the batch's futures (once)."""
        with self.lock:
            if self.done.is_set():
                return
            self.error = error
            self.done.set()
            callbacks, self.callbacks = self.callbacks, None
        for callback in callbacks or ():
            callback()

    def when_done(self, callback: Callable[[], object]) -> None:
        """Call `callback()` once the batch is settled (at once if it is)."""
        with self.lock:
            if not self.done.is_set() and self.callbacks is not None:
                self.callbacks.append(callback)
                return
        callback()


class RecordFuture(PendingRecord):
    """The future of one sent record: `result()` is its `RecordMetadata`, or raises why it was not written."""

    __slots__ = ()
    if TYPE_CHECKING:
        @property
        def _batch(self) -> _Batch: ...

    def done(self) -> bool:
        """Whether the record was written (or failed)."""
        return self._batch.done.is_set()

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """The record's metadata once written; raises its error, or TimeoutError."""
        batch = self._batch
        if not batch.done.wait(timeout):
            raise TimeoutError(f"record for {batch.tp[0]}-{batch.tp[1]} not written within {timeout} s")
        if batch.error is not None:
            raise batch.error
        timestamp = batch.append_time if batch.append_time >= 0 else self._timestamp
        return RecordMetadata(batch.tp[0], batch.tp[1], batch.base_offset + self._index, timestamp)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The record's error once settled, or None."""
        try:
            self.result(timeout)
        except TimeoutError:
            raise
        except BaseException as exc:  # noqa: BLE001 - handed back, not handled
            return exc
        return None

    def add_done_callback(self, fn: Callable[[RecordFuture], object]) -> None:
        """Call `fn(future)` once settled (at once if it is)."""
        self._batch.when_done(lambda: fn(self))


class Producer(SendPath):
    """Kafka's producer over an embedded node: idempotent by default, transactional with `transactional.id`.

    `send` is SendPath's: it appends natively when nothing needs deciding, else calls `_send`."""

    def __init__(self, node: Node, config: Mapping[str, Any] | None = None):
        self.settings = parse_settings(config, PRODUCER_SETTINGS, "producer")
        s = self.settings
        self._access = Access(node, s["principal"])
        self._node = node
        self._store: LogManager = node.store
        self._txns = node.transactions
        self._transactional_id: str | None = s["transactional.id"]
        if self._transactional_id is not None and not s["enable.idempotence"]:
            raise IllegalStateError("transactional.id needs enable.idempotence=true")
        self._idempotent = s["enable.idempotence"]
        self._wait_fsync = s["acks"] in ("all", "-1") and node.config["logstore.acks.all.fsync"]
        self._linger_s = s["linger.ms"] / 1000
        self._batch_bytes = max(s["batch.size"], 1)
        self._compression = CODEC_IDS[s["compression.type"]]
        self._client_id = s["client.id"] or f"producer-{next(_CLIENT_NUMBERS)}"
        self._partitioner = Partitioner(self._store, node.config["auto.create.topics.enable"],
                                        node.config["num.partitions"], self._may_create)
        self._counts, self._sticky, self._version = (self._partitioner.counts, self._partitioner.sticky,
                                                     self._partitioner.version)
        self._lock = threading.RLock()
        self._open: dict[TopicPartition, _Batch] = {}
        self._linger_zero = self._linger_s <= 0
        self._future_type = RecordFuture
        self._unsettled: set[_Batch] = set()
        self._unsettled_lock = threading.Lock()
        self._sequences: dict[TopicPartition, int] = {}
        self._in_txn: set[TopicPartition] = set()
        self._txn_on_coordinator = False
        self._error: BaseException | None = None
        self.producer_id, self.producer_epoch = -1, -1
        if self._transactional_id is not None:
            self._state = _State.UNINITIALIZED
        else:
            if self._idempotent:
                self._access.require_idempotent_write()
                self.producer_id, self.producer_epoch = self._txns.init_producer_id(None, 0)
            self._state = _State.READY
        node.add_client(self)

    def __repr__(self) -> str:
        return f"<Producer {self._client_id} {self._transactional_id or self.producer_id} {self._state.value}>"

    # -- sending ---------------------------------------------------------------------------

    @property
    def _state(self) -> _State:
        return self._state_now

    @_state.setter
    def _state(self, state: _State) -> None:
        self._state_now = state
        self._fast = self._access.everything and (
            state is _State.IN_TRANSACTION or (state is _State.READY and self._transactional_id is None))

    def _send(self, topic: str, value: bytes | None, key: bytes | None, partition: int | None,
              timestamp: int | None, headers: Headers | None) -> RecordFuture:
        """`send` where SendPath's native path does not go: checks, a new batch, a full one."""
        with self._lock:
            self._check_can_send()
            try:
                self._access.require(AclOperation.WRITE, ResourceType.TOPIC, (topic,))
            except LogStoreError as exc:
                self._failed(exc)
                raise
            now = time.time()
            ts = int(now * 1000) if timestamp is None else timestamp
            while True:
                tp = (topic, self._partitioner.partition(topic, key, partition))
                batch = self._open.get(tp)
                if batch is None:
                    batch = self._open_batch(tp, now)
                    batch.builder.append(ts, key, value, headers)
                    break
                if batch.builder.try_append(ts, key, value, headers, self._batch_bytes):
                    break
                # As Kafka's accumulator: a record that does not fit closes the batch; an unkeyed one then
                # follows the sticky partition to its next batch.
                self._write([tp])
            self._version = self._partitioner.version  # the caches SendPath reads are current for it
            builder = batch.builder
            future = RecordFuture(batch, len(builder) - 1, ts)
            if builder.size_in_bytes >= self._batch_bytes or self._linger_zero:
                self._write([tp])
            elif len(builder) == 1:
                self._node.wake()  # a new lingering batch: the upkeep must look at its deadline
            return future

    def _may_create(self, topic: str) -> None:
        """Raise unless the principal may create `topic` (Kafka's auto-creation: CREATE on the CLUSTER, else on
        the TOPIC)."""
        access = self._access
        if not access.allowed(AclOperation.CREATE, ResourceType.CLUSTER, (CLUSTER_NAME,)):
            access.require(AclOperation.CREATE, ResourceType.TOPIC, (topic,))

    def _check_can_send(self) -> None:
        state = self._state
        if state is _State.IN_TRANSACTION or (state is _State.READY and self._transactional_id is None):
            return
        if state is _State.FATAL:
            assert self._error is not None  # set with FATAL
            raise self._error
        if state is _State.ABORTABLE:
            raise IllegalStateError(f"abort_transaction() first: the transaction failed: {self._error}") \
                from self._error
        if state is _State.READY:
            raise IllegalStateError("a transactional producer sends only inside begin_transaction()")
        raise IllegalStateError(f"the producer is {state.value}")

    def _open_batch(self, tp: TopicPartition, now: float) -> _Batch:
        builder = self._tp_format(tp).BatchBuilder(
            compression=self._compression, producer_id=self.producer_id, producer_epoch=self.producer_epoch,
            base_sequence=self._sequences.get(tp, 0) if self._idempotent else -1,
            transactional=self._transactional_id is not None)
        batch = self._open[tp] = _Batch(tp, builder, now)
        with self._unsettled_lock:
            self._unsettled.add(batch)
        return batch

    def _tp_format(self, tp: TopicPartition) -> LogFormat:
        return self._store.log(*tp).format

    def _write(self, tps: Iterable[TopicPartition]) -> None:
        """Append the open batches of `tps` (under the lock)."""
        batches = [self._open.pop(tp) for tp in tps if tp in self._open]
        if not batches:
            return
        if self._transactional_id is not None:
            fresh = {b.tp for b in batches} - self._in_txn
            if fresh:
                try:
                    self._access.require(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, (self._txn_id,))
                    self._coordinator(self._txns.add_partitions, sorted(fresh))
                except LogStoreError as exc:
                    for batch in batches:
                        self._settle(batch, exc)
                    self._failed(exc)
                    return
                self._in_txn |= fresh
                self._txn_on_coordinator = True
        for batch in batches:
            self._partitioner.batch_written(batch.tp)
            self._append(batch)
        self._node.notify_appended([batch.tp for batch in batches])

    def _append(self, batch: _Batch) -> None:
        topic, p = batch.tp
        log_ = self._store.log(topic, p)
        buf = bytearray(batch.builder.build())
        try:
            if self._transactional_id is not None:
                with self._txns.verified_write(self._transactional_id, self.producer_id, self.producer_epoch,
                                               topic, p):
                    result = log_.append(buf)
            else:
                result = log_.append(buf)
        except LogStoreError as exc:
            self._settle(batch, exc)
            self._failed(exc)
            return
        count = len(batch.builder)
        if self._idempotent:
            self._sequences[batch.tp] = log_.format.increment_sequence(self._sequences.get(batch.tp, 0), count)
        batch.base_offset = result.first_offset
        batch.append_time = result.log_append_time
        if self._wait_fsync:
            def settle(durable: Future[int]) -> None:
                self._settle(batch, durable.exception())
            log_.durable(result.last_offset + 1).add_done_callback(settle)
        else:
            self._settle(batch, None)

    def _settle(self, batch: _Batch, error: BaseException | None) -> None:
        # Runs in the group-commit thread too: never under the producer's lock, which may be waiting on it.
        batch.finish(error)
        with self._unsettled_lock:
            self._unsettled.discard(batch)

    def _failed(self, error: BaseException) -> None:
        """Move to the state an error leaves (under the lock)."""
        if isinstance(error, InvalidProducerEpochError) and self._transactional_id is not None:
            # As the Java client reads INVALID_PRODUCER_EPOCH for a transactional producer: a newer one took over.
            error = ProducerFencedError(str(error))
        if isinstance(error, _FATAL):
            self._state, self._error = _State.FATAL, error
        elif self._state is _State.IN_TRANSACTION:
            self._state, self._error = _State.ABORTABLE, error

    def tick(self, now_ms: int) -> int | None:
        """Write the batches that lingered `linger.ms`; when the next one will have (the node's upkeep calls this)."""
        with self._lock:
            if not self._open:
                return None
            now = now_ms / 1000
            due = [tp for tp, b in self._open.items() if now - b.created >= self._linger_s]
            if due and self._state in (_State.READY, _State.IN_TRANSACTION):
                self._write(due)
            if not self._open:
                return None
            return int((min(b.created for b in self._open.values()) + self._linger_s) * 1000) + 1

    def flush(self, timeout: float | None = None) -> None:
        """Write every queued record and wait until all are settled; TimeoutError if that takes longer."""
        with self._lock:
            if self._state in (_State.READY, _State.IN_TRANSACTION):
                self._write(list(self._open))
            with self._unsettled_lock:
                waiting = list(self._unsettled)
        deadline = None if timeout is None else time.monotonic() + timeout
        for batch in waiting:
            left = None if deadline is None else max(deadline - time.monotonic(), 0)
            if not batch.done.wait(left):
                raise TimeoutError(f"{len(waiting)} batches not written within {timeout} s")

    # -- transactions ------------------------------------------------------------------------

    def _coordinator(self, call: Callable[[str, int, int, *_Ts], _T], *args: *_Ts) -> _T:
        """A transaction coordinator call for this producer, retried while the id is changing state."""
        transactional_id = self._txn_id
        deadline = time.monotonic() + MAX_BLOCK_S
        while True:
            try:
                return call(transactional_id, self.producer_id, self.producer_epoch, *args)
            except ConcurrentTransactionsError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(RETRY_BACKOFF_S)

    @property
    def _txn_id(self) -> str:
        """The transactional id, for the calls only a transactional producer reaches."""
        assert self._transactional_id is not None  # begin_transaction and init_transactions check
        return self._transactional_id

    def init_transactions(self) -> None:
        """Get this transactional id's producer id and a new epoch, fencing every older instance."""
        with self._lock:
            if self._transactional_id is None:
                raise IllegalStateError("init_transactions needs transactional.id")
            if self._state is not _State.UNINITIALIZED:
                raise IllegalStateError(f"init_transactions called twice (the producer is {self._state.value})")
            self._access.require(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, (self._transactional_id,))
            deadline = time.monotonic() + MAX_BLOCK_S
            while True:
                try:
                    pid, epoch = self._txns.init_producer_id(self._transactional_id,
                                                             self.settings["transaction.timeout.ms"])
                    break
                except ConcurrentTransactionsError:
                    # The previous instance's transaction is being aborted (or a decided one finished).
                    if time.monotonic() >= deadline:
                        raise
                    time.sleep(RETRY_BACKOFF_S)
            self.producer_id, self.producer_epoch = pid, epoch
            self._sequences.clear()
            self._state = _State.READY

    def begin_transaction(self) -> None:
        """Start a transaction: the records sent until commit or abort are in it."""
        with self._lock:
            if self._transactional_id is None or self._state is not _State.READY:
                raise IllegalStateError(f"begin_transaction: the producer is {self._state.value}"
                                        + ("" if self._transactional_id else " and not transactional"))
            self._state = _State.IN_TRANSACTION
            self._in_txn.clear()
            self._txn_on_coordinator = False

    def send_offsets_to_transaction(self, offsets: Mapping[TopicPartition, int],
                                    group_metadata: GroupMetadata) -> None:
        """Commit the consumer's offsets in this transaction (they apply only if it commits)."""
        with self._lock:
            if self._state is not _State.IN_TRANSACTION:
                self._check_can_send()
                raise IllegalStateError("send_offsets_to_transaction needs an open transaction")
            groups = self._node.groups
            access = self._access
            try:
                # AddOffsetsToTxn, then TxnOffsetCommit: the id, the group, and READ on the topics committed.
                access.require(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, (self._txn_id,))
                access.require(AclOperation.READ, ResourceType.GROUP, (group_metadata.group_id,))
                access.require(AclOperation.READ, ResourceType.TOPIC, sorted({topic for topic, _ in offsets}))
                self._coordinator(self._txns.add_offsets, group_metadata.group_id)
                self._txn_on_coordinator = True
                errors = groups.commit_txn_offsets(
                    self._txn_id, group_metadata.group_id, self.producer_id, self.producer_epoch,
                    group_metadata.member_id, group_metadata.group_instance_id, group_metadata.generation_id,
                    {tp: (offset, -1, "") for tp, offset in offsets.items()})
                failed = next((e for e in errors.values() if e is not None), None)
                if failed is not None:
                    raise failed
            except LogStoreError as exc:
                self._failed(exc)
                raise

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Write every record of the transaction, then commit it; raises (abortable) if any write failed."""
        with self._lock:
            if self._state is not _State.IN_TRANSACTION:
                self._check_can_send()
                raise IllegalStateError("commit_transaction needs an open transaction")
        self.flush(timeout)
        with self._lock:
            if self._state in (_State.ABORTABLE, _State.FATAL):
                raise self._error
            self._check_can_send()
            self._end_transaction(commit=True)

    def abort_transaction(self) -> None:
        """Drop the records not yet written and abort the transaction (its written records are never read committed)."""
        with self._lock:
            if self._state not in (_State.IN_TRANSACTION, _State.ABORTABLE):
                raise IllegalStateError(f"abort_transaction: the producer is {self._state.value}")
            aborted = TransactionAbortedError("the transaction was aborted before this record was written")
            for batch in self._open.values():
                self._settle(batch, aborted)
            self._open.clear()
            self._end_transaction(commit=False)

    def _end_transaction(self, commit: bool) -> None:
        """EndTxn, if the coordinator knows of this transaction (under the lock); the producer is ready after."""
        if self._txn_on_coordinator:
            try:
                self._access.require(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, (self._txn_id,))
                self._coordinator(self._txns.end_transaction, commit)
            except LogStoreError as exc:
                self._failed(exc)
                raise
        self._state, self._error = _State.READY, None

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self, timeout: float | None = None) -> None:
        """Write what is queued and stop; an open transaction is aborted, as Kafka's close does."""
        with self._lock:
            state = self._state
            if state is _State.CLOSED:
                return
        try:
            if state is _State.READY:
                self.flush(timeout)
            elif state in (_State.IN_TRANSACTION, _State.ABORTABLE):
                try:
                    self.abort_transaction()
                except LogStoreError:
                    pass  # fenced meanwhile: the newer instance aborted it, or its timeout will
        finally:
            with self._lock:
                self._state = _State.CLOSED
            self._node.remove_client(self)

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
