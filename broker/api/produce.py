"""Produce (0): advertised from v0 (librdkafka 2.0 tests Produce v0 before it compresses), v3-10 served.

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
(INVALID_TOPIC_EXCEPTION). A transactional batch is appended only if its
partition is in its producer's open transaction, checked with the
transaction coordinator and held against its transitions until written
(KIP-890's server-side defence): a late write is INVALID_TXN_STATE, one from
a fenced epoch INVALID_PRODUCER_EPOCH.

Authorization (Kafka's KafkaApis): a transactional request needs WRITE on
its TRANSACTIONAL_ID (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED on every
partition), and each topic WRITE on the TOPIC (else
TOPIC_AUTHORIZATION_FAILED on its partitions).
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Never

from logstore.broker.api import Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import (
    AclOperation,
    Outcome,
    PartitionResult,
    ResourceType,
    Shape,
    denied,
    each_partition,
    error_code,
    refuse,
    topic_rows,
)
from logstore.broker.coordinator.transaction import INTERNAL_TOPICS
from logstore.broker.protocol import ZERO_MS, ErrorCode, decode_native_produce
from logstore.errors import LogStoreError

if TYPE_CHECKING:
    from logstore.log import AppendResult, Log
    from logstore.native.wire import ProducePartition, ProduceRequest

log = logging.getLogger(__name__)

KEY = 0


SHAPE = Shape(partitions="partition_data", index="index")
FAILED = dict(base_offset=-1, log_append_time=None, log_start_offset=-1, record_errors=())
Appended = tuple["AppendResult", "Log"]   # where a partition's batch landed, and its log (to wait for the fsync)


def _fields(result: PartitionResult[Appended], fsync_errors: dict[int, ErrorCode]) -> dict[str, object]:
    """A partition's row: its offsets once appended, or the error (the fsync's, if that failed)."""
    if id(result) in fsync_errors:
        return dict(FAILED, index=result.index, error_code=fsync_errors[id(result)], error_message=None)
    if not result.outcome.ok:
        return dict(FAILED, index=result.index)
    info, _ = result.outcome.result
    return dict(index=result.index, base_offset=info.first_offset, record_errors=(),
                log_append_time=None if info.log_append_time < 0
                else datetime.fromtimestamp(info.log_append_time / 1000, UTC),
                log_start_offset=info.log_start_offset)


def _append(request: Request, topic: str, partition: int, records: memoryview | None,
            transactional_id: str | None) -> Appended | Outcome[Never]:
    """One partition's append, or its refusal with the code the checks chose (a Kafka error's, with its message)."""
    broker = request.broker
    try:
        if topic in INTERNAL_TOPICS:
            return refuse(ErrorCode.invalid_topic_exception)
        log_ = broker.store.log(topic, partition)
        batch = None if records is None else log_.format.peek_produced_batch(records)
        if records is None or batch is None:
            return refuse(ErrorCode.invalid_record)
        if batch.magic < 2:
            return refuse(ErrorCode.unsupported_for_message_format)
        # Kafka's rule for Produce v3+ (one batch); a size that runs past the end is the validator's to report.
        if batch.size < len(records):
            return refuse(ErrorCode.invalid_record)
        if batch.is_transactional:
            with broker.transactions.verified_write(transactional_id, batch.producer_id, batch.producer_epoch,
                                                    topic, partition):
                return log_.append(records), log_
        return log_.append(records), log_
    except LogStoreError as exc:
        return refuse(error_code(request, exc), str(exc))


def _answer(request: Request,
            transactional_id: str | None) -> Callable[[str, int, ProducePartition], Appended | Outcome[Never]]:
    """The per-partition answer: append, or refuse with the code the checks chose."""
    def append(topic: str, index: int, data: ProducePartition) -> Appended | Outcome[Never]:
        return _append(request, topic, index, data.records, transactional_id)
    return append


@api(KEY, 0, 10, accept_from=3, decode=decode_native_produce, replies=lambda body: body.acks != 0)
async def handle(request: Request, body: ProduceRequest) -> ResponsePayload | None:
    """Append every partition's records; reply per partition, after the fsync for acks=-1."""
    broker = request.broker
    version = request.version
    acks = body.acks
    timeout = body.timeout_ms / 1000
    error = ErrorCode.none
    if body.transactional_id is not None:
        error = denied(request, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id)
    if error == ErrorCode.none and acks not in (-1, 0, 1):
        error = ErrorCode.invalid_required_acks
    results = each_partition(request, body.topic_data, _answer(request, body.transactional_id),
                             operation=AclOperation.WRITE, shape=SHAPE, error=error)
    broker.notify_appended()
    fsync_errors: dict[int, ErrorCode] = {}
    waits = [r for _, rows in results for r in rows if r.outcome.ok]
    if waits and acks == -1 and broker.config["logstore.acks.all.fsync"]:
        futures = [asyncio.wrap_future(log_.durable(info.last_offset + 1))
                   for info, log_ in (r.outcome.result for r in waits)]
        _, pending = await asyncio.wait(futures, timeout=max(timeout, 0.001))
        for result, fut in zip(waits, futures):
            if fut in pending:
                fsync_errors[id(result)] = ErrorCode.request_timed_out
            elif fut.exception() is not None:
                log.error("fsync for %s failed: %s", result.topic, fut.exception())
                fsync_errors[id(result)] = ErrorCode.kafka_storage_error
    if acks == 0:
        return None
    topics = topic_rows(results, response_type(KEY, version, "TopicProduceResponse"),
                        response_type(KEY, version, "PartitionProduceResponse"),
                        lambda result: _fields(result, fsync_errors), partitions_field="partition_responses")
    return build(response_type(KEY, version), throttle_time=ZERO_MS, responses=topics)
