"""Produce (0): advertised from v0 (librdkafka 2.0 tests Produce v0 before it compresses), v3-12 served.

Per partition: Kafka's produce rules and producer state come from
`Log.append` (a retry of one of a producer's last five batches is answered
with the first write's offsets; a gap is OUT_OF_ORDER_SEQUENCE_NUMBER, an
old epoch INVALID_PRODUCER_EPOCH). acks must be -1, 0 or 1; acks=0 gets no
response. acks=-1 is answered once the group-commit fsync covers the append
(unless `logstore.acks.all.fsync=false`, Kafka's page-cache behaviour), or
REQUEST_TIMED_OUT if that takes longer than the request's timeout. The
request is decoded natively (`logstore.native.wire`): records are views of
the frame, not copies.

As in Kafka: each partition carries exactly one batch (INVALID_RECORD
otherwise), and the internal topics take no client writes
(INVALID_TOPIC_EXCEPTION). Every batch goes through Kafka's LogValidator
(`Log.validate`) before anything is appended: every record read,
decompressed if need be; a batch whose records lie about their count,
offsets or lengths is INVALID_RECORD, one whose bytes are damaged
CORRUPT_MESSAGE, timestamps outside message.timestamp.before/after.max.ms
INVALID_TIMESTAMP; records refused one by one are listed in v8+'s
`record_errors` with Kafka's `error_message`. One partition's refusal never
fails the others. A topic whose compression.type names a codec stores each
batch in it, recompressing those the producer sent in another (Kafka's
LogValidator; `Log.validate`). acks=-1 on a topic whose min.insync.replicas
is above 1 is NOT_ENOUGH_REPLICAS before anything is checked or appended, as
from a Kafka leader whose ISR is itself alone; acks=0 and 1 are not held to it.
A transactional batch is appended only if its partition is in its
producer's open transaction, checked with the transaction coordinator and
held against its transitions until written (KIP-890's server-side defence):
a late write is INVALID_TXN_STATE (TRANSACTION_ABORTABLE from v11, KIP-890,
as Kafka answers clients that know it), one from a fenced epoch
INVALID_PRODUCER_EPOCH. v12 is transaction version 2 (KIP-890 part 2): its
transactional partitions join their producer's transaction first, in one
coordinator call per producer, as Kafka's AddPartitionsToTxn from the
produce path (starting a transaction when none is open); a partition that
cannot join answers the coordinator's error (PRODUCER_FENCED as
INVALID_PRODUCER_EPOCH, as Kafka answers the produce path) and is not
appended. v11 only adds TRANSACTION_ABORTABLE; v13 (topic ids) is not served.

The request is handled in three steps: check every partition's batch,
append those that passed in the request's order, then (acks=-1) wait for
the fsync. The check runs on the event loop up to `INLINE_CHECK_COST` per
request; what is left (a large or highly compressed batch, a decompression
bomb) is checked in a worker thread, so no request holds the loop for long.
The appends follow on the loop, and the request is `applied` once they
are: the connection's next request is read while this one waits for its
fsync.

Authorization (Kafka's KafkaApis): a transactional request needs WRITE on
its TRANSACTIONAL_ID (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED on every
partition), and each topic WRITE on the TOPIC (else
TOPIC_AUTHORIZATION_FAILED on its partitions).

Quotas (Kafka's KafkaApis, KIP-219): once the batches are appended, the
request's size is recorded against the client's `producer_byte_rate` and
(unless acks=0) its handling time against `request_percentage`; if either is
over, the larger throttle time goes into the answer's throttle_time_ms and
the connection reads nothing more from the client for that long. The
records are appended either way.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Never

from logstore.broker.api import Request, api
from logstore.broker.api.kit import (
    AclOperation,
    Outcome,
    PartitionResult,
    ResourceType,
    Shape,
    attempt,
    denied,
    each_partition,
    failure,
    refuse,
)
from logstore.broker.api.txn_calls import durably
from logstore.broker.coordinator.transaction import INTERNAL_TOPICS
from logstore.broker.coordinator.txn_metadata import TV_2
from logstore.broker.durable_waits import NotDurableInTime
from logstore.broker.protocol import ErrorCode, PartitionRows, decode_native_produce, native_encoder
from logstore.broker.request_time import request_throttle
from logstore.errors import LogStoreError
from logstore.formats.protocol import record_errors
from logstore.native.wire import encode_produce

if TYPE_CHECKING:
    from logstore.formats.kafka import AppendInfo
    from logstore.log import AppendResult, Log
    from logstore.native.wire import ProducePartition, ProduceRequest

log = logging.getLogger(__name__)

KEY = 0
# Kafka's ProduceRequest: v11 may answer TRANSACTION_ABORTABLE, v12+ is transaction version 2.
ABORTABLE_FROM, IMPLICIT_ADD_FROM = 11, 12

# What checking one request's batches may cost on the event loop (`AppendInfo.check_cost`: bytes of walking
# records, a compressed batch's decompressed bytes weighted by its codec, 0.3 ns each here); the rest of the
# request is checked in a worker thread. This holds the loop about 2 ms at most and keeps a producer's
# everyday request on it (librdkafka's largest default batch, 1 MB of records in lz4, costs 2.5 MiB).
INLINE_CHECK_COST = 6 << 20
# Each check holds at most one batch's decompressed records (DEFAULT_MAX_DECOMPRESSED): the number of
# these threads bounds the memory decompression bombs can take, whatever the number of connections.
CHECK_THREADS = 2
_checks = ThreadPoolExecutor(CHECK_THREADS, thread_name_prefix="produce-check")

SHAPE = Shape(partitions="partition_data", index="index")
Appended = tuple["AppendResult", "Log"]   # where a partition's batch landed, and its log (to wait for the fsync)
Refused = dict[tuple[str, int], Outcome[Never]]   # partitions v12 could not put in their producer's transaction


@dataclass
class _Batch:
    """One partition's batch on its way to the log: checked (`info`), or too costly to check on the loop (None)."""

    log: Log
    topic: str
    partition: int
    buf: bytearray
    info: AppendInfo | None
    transactional: bool
    producer_id: int
    producer_epoch: int


@dataclass
class _Budget:
    """What checking a request's batches may still cost on the event loop (`INLINE_CHECK_COST`)."""

    left: int


def _row(result: PartitionResult[Appended], fsync_errors: dict[int, ErrorCode], version: int) -> tuple[Any, ...]:
    """A partition's row as `encode_produce` writes it: its offsets once appended, or the error (the fsync's,
    if that failed)."""
    if id(result) in fsync_errors:
        return (result.index, fsync_errors[id(result)], -1, -1, -1, (), None)
    outcome = result.outcome
    if not outcome.ok:
        return (result.index, outcome.error, -1, -1, -1, _record_errors(outcome.exc, version), outcome.message)
    info, _ = outcome.result
    return (result.index, ErrorCode.none, info.first_offset, info.log_append_time, info.log_start_offset, (), None)


def _record_errors(exc: LogStoreError | None, version: int) -> list[tuple[int, str | None]]:
    """v8+'s `record_errors`: the records the validator refused one by one (Kafka's batchIndex and message)."""
    refused = record_errors(exc)
    if not refused or version < 8:
        return []
    return [(e.batch_index, e.message) for e in refused]


def _prepare(request: Request, topic: str, partition: int, records: memoryview | None, acks: int,
             budget: _Budget) -> _Batch | Outcome[Never]:
    """One partition's batch checked as far as the request's budget for the event loop goes, or its refusal."""
    if topic in INTERNAL_TOPICS:
        return refuse(ErrorCode.invalid_topic_exception)
    log_ = request.broker.store.log(topic, partition)
    min_isr = log_.config.min_insync_replicas
    if acks == -1 and min_isr > 1:
        # Kafka's leader refuses before it appends: this node is the partition's one in-sync replica.
        return refuse(ErrorCode.not_enough_replicas,
                      f"The size of the current ISR Set({request.broker.node_id}) is insufficient to satisfy "
                      f"the min.isr requirement of {min_isr} for partition {topic}-{partition}")
    batch = None if records is None else log_.format.peek_produced_batch(records)
    if records is None or batch is None:
        return refuse(ErrorCode.invalid_record)
    if batch.magic < 2:
        return refuse(ErrorCode.unsupported_for_message_format)
    # Kafka's rule for Produce v3+ (one batch); a size that runs past the end is the validator's to report.
    if batch.size < len(records):
        return refuse(ErrorCode.invalid_record)
    # The log patches offsets (and may correct maxTimestamp) in place: a copy of the frame's bytes.
    buf = bytearray(records)
    limit = budget.left
    # Charged before the check, so a batch refused halfway (a bad CRC) has paid for what it cost.
    budget.left -= len(buf)
    info = log_.validate(buf, work_limit=limit) if limit > 0 else None
    # A batch the loop could not finish spent up to what was left: the rest of the request goes to the thread.
    budget.left = 0 if info is None else limit - info.check_cost
    return _Batch(log_, topic, partition, buf, info, batch.is_transactional, batch.producer_id, batch.producer_epoch)


def _check(batches: list[_Batch]) -> list[AppendInfo | LogStoreError]:
    """In a worker thread: validate the batches the event loop left, in order, each to its own answer."""
    checked: list[AppendInfo | LogStoreError] = []
    for batch in batches:
        try:
            info = batch.log.validate(batch.buf)
        except LogStoreError as exc:
            checked.append(exc)
        else:
            # Without a work limit `validate` answers or raises.
            assert info is not None
            checked.append(info)
    return checked


def _append(request: Request, batch: _Batch, info: AppendInfo, transactional_id: str | None) -> Appended:
    """Append a checked batch (inside its producer's verified transaction, if it is transactional)."""
    log_ = batch.log
    if batch.transactional:
        with request.broker.transactions.verified_write(transactional_id, batch.producer_id, batch.producer_epoch,
                                                        batch.topic, batch.partition):
            return log_.append(batch.buf, validated=info), log_
    return log_.append(batch.buf, validated=info), log_


def _appended(request: Request, row: PartitionResult[_Batch], checked: dict[int, AppendInfo | LogStoreError],
              transactional_id: str | None, refused: Refused) -> PartitionResult[Appended]:
    """A partition's row after the append step: its batch appended, or why not."""
    outcome: Outcome[Appended]
    if not row.outcome.ok:
        outcome = Outcome(None, row.outcome.error, row.outcome.message, row.outcome.exc)
    elif (row.topic, row.index) in refused:
        outcome = refused[(row.topic, row.index)]
    else:
        batch = row.outcome.result
        info = batch.info if batch.info is not None else checked[id(batch)]
        if isinstance(info, LogStoreError):
            outcome = failure(request, info)
        else:
            outcome = attempt(request, _append, request, batch, info, transactional_id)
            if outcome.error == ErrorCode.invalid_txn_state and request.version >= ABORTABLE_FROM:
                outcome = Outcome(None, ErrorCode.transaction_abortable, outcome.message, outcome.exc)
    return PartitionResult(row.topic, row.index, row.asked, outcome)


async def _join_transactions(request: Request, transactional_id: str,
                             prepared: list[tuple[str, list[PartitionResult[_Batch]]]]
                             ) -> Refused:
    """v12+: put each transactional batch's partition in its producer's transaction; the refused ones."""
    by_producer: dict[tuple[int, int], list[tuple[str, int]]] = {}
    for _, rows in prepared:
        for row in rows:
            if row.outcome.ok and row.outcome.result.transactional:
                batch = row.outcome.result
                by_producer.setdefault((batch.producer_id, batch.producer_epoch), []).append((row.topic, row.index))
    refused: Refused = {}
    for (producer_id, producer_epoch), partitions in by_producer.items():
        added = await durably(request, request.broker.transactions.add_partitions_durably, transactional_id,
                              producer_id, producer_epoch, partitions, TV_2)
        if not added.ok:
            error = ErrorCode.invalid_producer_epoch if added.error == ErrorCode.producer_fenced else added.error
            refused.update(dict.fromkeys(partitions, Outcome(None, error, added.message, added.exc)))
    return refused


def _answer(request: Request, acks: int,
            budget: _Budget) -> Callable[[str, int, ProducePartition], _Batch | Outcome[Never]]:
    """The per-partition answer of the check step."""
    def prepare(topic: str, index: int, data: ProducePartition) -> _Batch | Outcome[Never]:
        return _prepare(request, topic, index, data.records, acks, budget)
    return prepare


# Answers written natively: kio's bytes (tests/broker/test_wire_small_codecs.py).
@api(KEY, 0, 12, accept_from=3, decode=decode_native_produce, replies=lambda body: body.acks != 0,
     encode=native_encoder(encode_produce))
async def handle(request: Request, body: ProduceRequest) -> PartitionRows | None:
    """Check every partition's batch, append those that pass, reply per partition (after the fsync for acks=-1)."""
    broker = request.broker
    version = request.version
    acks = body.acks
    timeout = body.timeout_ms / 1000
    error = ErrorCode.none
    if body.transactional_id is not None:
        error = denied(request, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id)
    if error == ErrorCode.none and acks not in (-1, 0, 1):
        error = ErrorCode.invalid_required_acks
    prepared = each_partition(request, body.topic_data, _answer(request, acks, _Budget(INLINE_CHECK_COST)),
                              operation=AclOperation.WRITE, shape=SHAPE, error=error)
    left = [row.outcome.result for _, rows in prepared for row in rows
            if row.outcome.ok and row.outcome.result.info is None]
    checked: dict[int, AppendInfo | LogStoreError] = {}
    if left:
        answers = await asyncio.get_running_loop().run_in_executor(_checks, _check, left)
        checked = {id(batch): answer for batch, answer in zip(left, answers)}
    refused: Refused = {}
    if version >= IMPLICIT_ADD_FROM and body.transactional_id is not None:
        refused = await _join_transactions(request, body.transactional_id, prepared)
    results = [(topic, [_appended(request, row, checked, body.transactional_id, refused) for row in rows])
               for topic, rows in prepared]
    if broker.metrics is not None:   # metrics.port: records and bytes in per topic, counted once per request
        broker.metrics.produced(results)
    # Muted before the connection may read on (`applied`), so the client's next request waits out the throttle.
    throttle_ms = _throttle(request, body)
    request.applied()
    waits = [r for _, rows in results for r in rows if r.outcome.ok]
    broker.notify_appended([(r.topic, r.index) for r in waits])
    fsync_errors: dict[int, ErrorCode] = {}
    if waits and acks == -1 and broker.config["logstore.acks.all.fsync"]:
        outcomes = await broker.until_durable([(log_, info.last_offset + 1)
                                               for info, log_ in (r.outcome.result for r in waits)],
                                              max(timeout, 0.001))
        for result, outcome in zip(waits, outcomes):
            if isinstance(outcome, NotDurableInTime):
                fsync_errors[id(result)] = ErrorCode.request_timed_out
            elif outcome is not None:
                log.error("fsync for %s failed: %s", result.topic, outcome)
                fsync_errors[id(result)] = ErrorCode.kafka_storage_error
    if acks == 0:
        return None
    return PartitionRows(throttle_ms, [(topic, [_row(result, fsync_errors, version) for result in rows])
                                       for topic, rows in results])


def _request_size(body: ProduceRequest) -> int:
    """The request's size in bytes (Kafka records request.sizeInBytes): the frame the records are views of."""
    views = [p.records for t in body.topic_data for p in t.partition_data if p.records is not None]
    if views and isinstance(views[0].obj, (bytes, bytearray)):
        return len(views[0].obj)
    return sum(view.nbytes for view in views)


def _throttle(request: Request, body: ProduceRequest) -> int:
    """Record the request against the client's produce and request quotas; the larger throttle time (ms),
    and the connection muted for it."""
    quotas = request.broker.quotas
    user, client_id = request.principal.name, request.client_id or ""
    bandwidth = quotas.produce.record(user, client_id, _request_size(body)) if quotas.produce.enabled else 0
    # Kafka enforces no request quota on acks=0: the client is never told.
    handling = request_throttle(quotas, request) if body.acks != 0 and quotas.request.enabled else 0
    throttle_ms = max(bandwidth, handling)
    if throttle_ms > 0:
        (quotas.produce if bandwidth > handling else quotas.request).throttled(user, client_id, throttle_ms)
        request.throttle(throttle_ms)
    return throttle_ms
