"""A two-phase-commit transactional producer on the wire (KIP-939 over transaction version 2), for the Spark sink.

A participant of an external transaction: one instance opens a transaction,
writes batches the caller encoded (Produce v12 acks=all, which adds each
partition to the transaction implicitly) and `prepare_transaction()`s it:
everything is acknowledged and the transaction stays open, with no timeout
(2PC). Later another instance, in another process, `complete_transaction`s
it: InitProducerId v6 with keepPreparedTxn keeps the open transaction
(fencing the first instance) and answers the producer id and epoch it was
opened with; only when they are the prepared ones does EndTxn v5 commit or
abort it. The names mirror Kafka's Java producer (`prepareTransaction()`,
`completeTransaction(PreparedTxnState)`); `abort_transaction` is what
InitProducerId without keepPreparedTxn does to an open 2PC transaction (and
what `logstore transactions force-terminate` does to any).

Batches go out pipelined: `produce` sends one Produce request (one batch
per partition, any number of partitions) without waiting for its answer, up
to `max_in_flight` unanswered (Kafka's max.in.flight.requests.per.connection,
at most 5 for an idempotent producer: the broker remembers a producer's last
5 batches of each partition, so only a retry of one of those is recognised);
`flush` waits for every answer, `send` is one batch sent and acknowledged.
Each batch's sequence is taken when it is sent, as Kafka's producer does.
Retries follow Kafka's producer: a retriable error (or a broken connection)
sends the same batch again with the same sequence, so the broker keeps it
once (it answers a batch it had with that batch's offsets, or
DUPLICATE_SEQUENCE_NUMBER), with a growing backoff until
`delivery_timeout_s`. When a pipelined request fails, the batches sent after
it may have been refused (OUT_OF_ORDER_SEQUENCE_NUMBER: a gap behind them)
or appended; the producer drops the connection, with the answers still
unread, and sends every unanswered batch again in the order first sent,
each request acknowledged before the next, so every batch lands once and in
sequence order. A fatal error (PRODUCER_FENCED,
INVALID_PRODUCER_EPOCH, an authorization failure, ...) is a
`TxnProducerError` naming Kafka's error; the broker must enable
`transaction.two.phase.commit.enable`, which the authorization error says.
One node is coordinator and leader of every partition, so one connection
serves everything. Not thread-safe.
"""
from __future__ import annotations

import datetime
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.end_txn.v5.request import EndTxnRequest
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v6.request import InitProducerIdRequest
from kio.schema.produce.v12.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.types import ProducerId, TopicName, TransactionalId
from kio.static.primitive import Records, i16, i32, i32Timedelta

from logstore.broker.admin_client import AdminClient, BrokerUnavailableError, Sent, error_name
from logstore.broker.client_security import ClientSecurity
from logstore.formats import DEFAULT_FORMAT

__all__ = ["PreparedTxnState", "TxnProducerError", "TxnWireProducer"]

ACKS_ALL = i16(-1)
REQUEST_TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=30))
DELIVERY_TIMEOUT_S = 120.0   # Kafka's delivery.timeout.ms
BACKOFF_S, BACKOFF_MAX_S = 0.1, 1.0   # retry.backoff.ms, retry.backoff.max.ms
TWO_PHASE_SETTING = "transaction.two.phase.commit.enable"
MAX_IN_FLIGHT = 5   # max.in.flight.requests.per.connection's highest value for an idempotent producer

# Errors Kafka's producer retries: the request may be sent again as it was.
RETRIABLE = frozenset({
    ErrorCode.not_leader_or_follower, ErrorCode.request_timed_out, ErrorCode.not_enough_replicas,
    ErrorCode.not_enough_replicas_after_append, ErrorCode.unknown_topic_or_partition, ErrorCode.network_exception,
    ErrorCode.concurrent_transactions, ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available,
    ErrorCode.not_coordinator, ErrorCode.kafka_storage_error,
})


class TxnProducerError(Exception):
    """A fatal answer (Kafka's error name in `error`), or a transaction that is not the one prepared."""

    def __init__(self, message: str, error: str | None = None):
        super().__init__(message)
        self.error = error


@dataclass
class _Request:
    """A Produce request sent and not yet acknowledged whole: its batches still unanswered, by partition, with
    their record counts."""

    batches: dict[tuple[str, int], tuple[bytes, int]]
    sent: Sent | None = None
    """The request on the wire, None once its connection was dropped (to be sent again)."""


@dataclass(frozen=True)
class PreparedTxnState:
    """What a prepared transaction is known by: its transactional id, producer id and epoch (Kafka's
    PreparedTxnState)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int


def _fatal(code: int, what: str, transactional_id: str) -> TxnProducerError:
    name = error_name(code)
    hint = ""
    if code == ErrorCode.transactional_id_authorization_failed:
        hint = (f" (two-phase commit needs the broker setting {TWO_PHASE_SETTING}=true, and TWO_PHASE_COMMIT "
                "on the transactional id when an authorizer is on)")
    elif code in (ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch):
        hint = " (another instance of the transactional id took over)"
    return TxnProducerError(f"{what} for transactional id {transactional_id!r}: {name}{hint}", name)


class TxnWireProducer:
    """One producer instance of a transactional id over one connection to the broker."""

    def __init__(self, bootstrap: str, *, security: ClientSecurity | None = None,
                 delivery_timeout_s: float = DELIVERY_TIMEOUT_S, client_id: str = "logstore-2pc-producer",
                 client: AdminClient | None = None, max_in_flight: int = MAX_IN_FLIGHT):
        if not 1 <= max_in_flight <= MAX_IN_FLIGHT:
            raise ValueError(f"max_in_flight must be 1 to {MAX_IN_FLIGHT}, not {max_in_flight}")
        # A driver completing many transactions shares its one connection (`client`, left open at close).
        self._own = client is None
        self.client = client or AdminClient(bootstrap, security=security, client_id=client_id)
        self.delivery_timeout_s = delivery_timeout_s
        self.max_in_flight = max_in_flight
        self.in_flight: deque[_Request] = deque()
        """Requests sent and not yet acknowledged, oldest first."""
        self.transactional_id: str | None = None
        self.producer_id = -1
        self.producer_epoch = -1
        self.ongoing: tuple[int, int] = (-1, -1)
        """The open transaction InitProducerId answered (keepPreparedTxn): (producer id, epoch), (-1, -1) for none."""
        self.sequences: dict[tuple[str, int], int] = {}
        self.records = 0

    def close(self) -> None:
        """Close the connection (the transaction, if any, stays as it is on the broker)."""
        if self._own:
            self.client.close()

    def __enter__(self) -> TxnWireProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _retry(self, what: str, attempt: Callable[[], tuple[int, Any]], done: frozenset[int] = frozenset()) -> Any:
        """`attempt()` → (error code, answer) until no retriable error; a broken connection is retried too."""
        deadline = time.monotonic() + self.delivery_timeout_s
        backoff = BACKOFF_S
        while True:
            try:
                code, answer = attempt()
            except BrokerUnavailableError as exc:
                if time.monotonic() + backoff > deadline:
                    raise TxnProducerError(f"{what}: {exc}") from exc
                code, answer = ErrorCode.network_exception, None
            if code == ErrorCode.none or code in done:
                return answer
            if code not in RETRIABLE or time.monotonic() + backoff > deadline:
                raise _fatal(code, what, self.transactional_id or "")
            time.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX_S)

    def init(self, transactional_id: str, timeout_ms: int, *, enable_2pc: bool = True,
             keep_prepared: bool = False) -> None:
        """InitProducerId v6: this instance becomes the id's producer (fencing the one before); without
        keep_prepared an open transaction is aborted first (CONCURRENT_TRANSACTIONS is waited out)."""
        self.flush()
        self.transactional_id = transactional_id
        request = InitProducerIdRequest(
            transactional_id=TransactionalId(transactional_id),
            transaction_timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=timeout_ms)),
            enable2_pc=enable_2pc, keep_prepared_txn=keep_prepared)

        def attempt() -> tuple[int, Any]:
            answer = self.client.request(request)
            return answer.error_code, answer

        answer = self._retry("InitProducerId", attempt)
        self.producer_id, self.producer_epoch = answer.producer_id, answer.producer_epoch
        self.ongoing = (answer.ongoing_txn_producer_id, answer.ongoing_txn_producer_epoch)
        self.sequences = {}
        self.records = 0

    def sequence(self, topic: str, partition: int) -> int:
        """The base sequence of the next batch of `topic`-`partition` (the caller encodes it into the batch)."""
        return self.sequences.get((topic, partition), 0)

    def send(self, topic: str, partition: int, batch: bytes) -> None:
        """Produce v12 acks=all of one transactional batch encoded with this producer's id, epoch and the
        partition's next sequence; returns once it (and everything sent before) is acknowledged."""
        self.produce([(topic, partition, batch)])
        self.flush()

    def produce(self, batches: Sequence[tuple[str, int, bytes]]) -> None:
        """One Produce v12 request (acks=all) of `batches`, one per partition, each encoded with this producer's
        id, epoch and its partition's next sequence; returns once sent, with at most `max_in_flight` requests
        unanswered (waiting for the oldest's answer first when that many are)."""
        if self.transactional_id is None:
            raise TxnProducerError("send before init")
        request = _Request({})
        for topic, partition, batch in batches:
            header = DEFAULT_FORMAT.peek_producer_batch(batch)
            expected = self.sequence(topic, partition)
            if (topic, partition) in request.batches:
                raise ValueError(f"two batches for {topic}-{partition} in one request")
            if header is None or (header.producer_id, header.producer_epoch, header.base_sequence) != \
                    (self.producer_id, self.producer_epoch, expected) or not header.is_transactional:
                raise ValueError(f"the batch for {topic}-{partition} is not this producer's next transactional "
                                 f"batch (producer {self.producer_id}, epoch {self.producer_epoch}, sequence "
                                 f"{expected})")
            count = header.last_sequence - header.base_sequence + 1
            request.batches[(topic, partition)] = (batch, count)
        if not request.batches:
            return
        while len(self.in_flight) >= self.max_in_flight:
            self._complete_oldest()
        for (topic, partition), (_, count) in request.batches.items():
            self.sequences[(topic, partition)] = DEFAULT_FORMAT.increment_sequence(self.sequence(topic, partition),
                                                                                   count)
        self.in_flight.append(request)
        if len(self.in_flight) > 1 and self.in_flight[0].sent is None:
            return   # the pipeline is being resent in order: this one goes after the others
        try:
            request.sent = self.client.send(self._produce_request(request))
        except BrokerUnavailableError:
            self._resend_all()

    def flush(self) -> None:
        """Wait until every request sent is acknowledged (retrying as Kafka's producer does)."""
        while self.in_flight:
            self._complete_oldest()

    def _produce_request(self, request: _Request) -> ProduceRequest:
        topics: dict[str, list[PartitionProduceData]] = {}
        for (topic, partition), (batch, _) in request.batches.items():
            topics.setdefault(topic, []).append(PartitionProduceData(index=i32(partition), records=Records(batch)))
        return ProduceRequest(
            transactional_id=TransactionalId(self.transactional_id or ""), acks=ACKS_ALL, timeout=REQUEST_TIMEOUT,
            topic_data=tuple(TopicProduceData(name=TopicName(topic), partition_data=tuple(rows))
                             for topic, rows in topics.items()))

    def _settle(self, request: _Request, answer: Any) -> list[tuple[str, int, int]]:
        """Take the acknowledged batches out of `request`; the others' (topic, partition, error code)."""
        codes: dict[tuple[str, int], int] = {}
        for topic_row in answer.responses:
            for row in topic_row.partition_responses:
                codes[(topic_row.name, row.index)] = row.error_code
        for key, code in codes.items():
            if key in request.batches and code in (ErrorCode.none, ErrorCode.duplicate_sequence_number):
                self.records += request.batches.pop(key)[1]
        # A partition the answer left out is not acknowledged: sent again, as after a lost answer.
        return [(topic, partition, codes.get((topic, partition), ErrorCode.network_exception))
                for topic, partition in request.batches]

    def _complete_oldest(self) -> None:
        """The oldest request's answer; on a failure, everything unanswered sent again in order."""
        request = self.in_flight[0]
        if request.sent is None:
            self._resend_all()
            return
        try:
            answer = self.client.receive(request.sent)
        except BrokerUnavailableError:
            self._resend_all()
            return
        failed = self._settle(request, answer)
        if not failed:
            self.in_flight.popleft()
            return
        for topic, partition, code in failed:
            if code not in RETRIABLE and code != ErrorCode.out_of_order_sequence_number:
                raise _fatal(code, f"Produce to {topic}-{partition}", self.transactional_id or "")
        self._resend_all()

    def _resend_all(self) -> None:
        """After a failure in the pipeline: drop the connection (the answers unread with it) and send every
        unacknowledged batch again, one request at a time, in the order first sent."""
        self.client.close()
        for request in self.in_flight:
            request.sent = None
        while self.in_flight:
            request = self.in_flight[0]
            what = "Produce to " + ", ".join(f"{t}-{p}" for t, p in request.batches)

            def attempt(request: _Request = request) -> tuple[int, Any]:
                failed = self._settle(request, self.client.request(self._produce_request(request)))
                # The first error decides: retriable ones are retried (the rest of the request with them).
                return (failed[0][2], None) if failed else (ErrorCode.none, None)

            self._retry(what, attempt)
            self.in_flight.popleft()

    def prepare_transaction(self) -> PreparedTxnState:
        """Everything sent is acknowledged (send waits for it): the open transaction, for another instance to
        complete."""
        if self.transactional_id is None:
            raise TxnProducerError("prepare before init")
        self.flush()
        return PreparedTxnState(self.transactional_id, self.producer_id, self.producer_epoch)

    def complete_transaction(self, prepared: PreparedTxnState, commit: bool, timeout_ms: int, *,
                             kept_since: bool = False) -> None:
        """As a new instance: keep the id's open transaction, check it is `prepared`, commit or abort it.

        Every keep bumps the epoch the coordinator answers as the ongoing one, so a completer that died
        after its keep leaves the transaction at a later epoch of the same producer id: `kept_since`
        accepts that (for a caller that knows nothing else began a transaction under the id since).
        Raises TxnProducerError when the open transaction is another (or none: `self.ongoing` says which),
        without ending it.
        """
        self.init(prepared.transactional_id, timeout_ms, enable_2pc=True, keep_prepared=True)
        producer_id, epoch = self.ongoing
        if (producer_id, epoch) != (prepared.producer_id, prepared.producer_epoch) and not (
                kept_since and producer_id == prepared.producer_id and epoch > prepared.producer_epoch):
            raise TxnProducerError(
                f"transactional id {prepared.transactional_id!r} has "
                f"{'no open transaction' if self.ongoing[0] < 0 else 'open transaction %d/%d' % self.ongoing}, "
                f"not the prepared {prepared.producer_id}/{prepared.producer_epoch}: refusing to "
                f"{'commit' if commit else 'abort'} it", "NOT_PREPARED")
        self.end_transaction(commit)

    def end_transaction(self, commit: bool) -> None:
        """EndTxn v5 of this instance's transaction; the producer goes on with the id and epoch answered."""
        self.flush()
        request = EndTxnRequest(transactional_id=TransactionalId(self.transactional_id or ""),
                                producer_id=ProducerId(self.producer_id), producer_epoch=i16(self.producer_epoch),
                                committed=commit)

        def attempt() -> tuple[int, Any]:
            answer = self.client.request(request)
            return answer.error_code, answer

        answer = self._retry("EndTxn", attempt)
        self.producer_id, self.producer_epoch, self.sequences = answer.producer_id, answer.producer_epoch, {}


def abort_transaction(client: AdminClient, transactional_id: str, timeout_ms: int) -> None:
    """Abort whatever transaction `transactional_id` has open, 2PC or not, and fence its producer."""
    with TxnWireProducer("", client=client) as producer:
        producer.init(transactional_id, timeout_ms, enable_2pc=True, keep_prepared=False)
