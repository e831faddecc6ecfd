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
"""
from __future__ import annotations

import asyncio
import logging
import struct
from datetime import UTC, datetime

from logstore.broker.api import api, build, response_type
from logstore.broker.coordinator.transaction import INTERNAL_TOPICS
from logstore.broker.protocol import ZERO_MS, ErrorCode
from logstore.errors import LogStoreError

log = logging.getLogger(__name__)

KEY = 0
MAGIC_OFFSET = 16
# The v2 batch header up to the producer epoch: length, (epoch, magic, crc), attributes, (...), producer id, epoch.
BATCH_HEADER = struct.Struct(">8xi9xh20xqh")
LENGTH_END = 12
TRANSACTIONAL = 0x10


def _partition(version, index, error, base_offset=-1, append_time=-1, log_start=-1, message=None):
    return build(response_type(KEY, version, "PartitionProduceResponse"), index=index, error_code=error,
                 base_offset=base_offset,
                 log_append_time=None if append_time < 0 else datetime.fromtimestamp(append_time / 1000, UTC),
                 log_start_offset=log_start, record_errors=(), error_message=message)


def _append(broker, topic, partition, records, transactional_id):
    """(error, result, log) of one partition's append."""
    try:
        if topic in INTERNAL_TOPICS:
            return ErrorCode.invalid_topic_exception, None, None
        log_ = broker.store.log(topic, partition)
        if records is None or len(records) <= MAGIC_OFFSET:
            return ErrorCode.invalid_record, None, None
        if records[MAGIC_OFFSET] < 2:
            return ErrorCode.unsupported_for_message_format, None, None
        if len(records) >= BATCH_HEADER.size:
            batch_length, attributes, producer_id, epoch = BATCH_HEADER.unpack_from(records)
            # Kafka's rule for Produce v3+; a length that runs past the end is the validator's to report.
            if batch_length + LENGTH_END < len(records):
                return ErrorCode.invalid_record, None, None
            if attributes & TRANSACTIONAL:
                with broker.transactions.verified_write(transactional_id, producer_id, epoch, topic, partition):
                    return ErrorCode.none, log_.append(records), log_
        return ErrorCode.none, log_.append(records), log_
    except LogStoreError as exc:
        return ErrorCode(exc.code), exc, None


@api(KEY, 0, 10, accept_from=3)
async def handle(request, body):
    """Append every partition's records; reply per partition, after the fsync for acks=-1."""
    broker = request.broker
    version = request.version
    acks = body.acks
    timeout = body.timeout_ms / 1000
    topics, waits = [], []
    for topic in body.topic_data:
        rows = []
        for data in topic.partition_data:
            if acks not in (-1, 0, 1):
                rows.append(_partition(version, data.index, ErrorCode.invalid_required_acks))
                continue
            error, result, log_ = _append(broker, topic.name, data.index, data.records, body.transactional_id)
            if error != ErrorCode.none:
                message = str(result) if isinstance(result, LogStoreError) else None
                rows.append(_partition(version, data.index, error, message=message))
                continue
            rows.append(_partition(version, data.index, ErrorCode.none, result.first_offset, result.log_append_time,
                                   result.log_start_offset))
            if acks == -1 and broker.config["logstore.acks.all.fsync"]:
                waits.append((len(topics), len(rows) - 1, log_, result.last_offset + 1))
        topics.append((topic.name, rows))
    broker.notify_appended()
    if waits:
        futures = [asyncio.wrap_future(log_.durable(end)) for _, _, log_, end in waits]
        done, pending = await asyncio.wait(futures, timeout=max(timeout, 0.001))
        for (t, r, _, _), fut in zip(waits, futures):
            failed = fut in pending or fut.exception() is not None
            if failed:
                error = ErrorCode.request_timed_out if fut in pending else ErrorCode.kafka_storage_error
                if fut in done:
                    log.error("fsync for %s failed: %s", topics[t][0], fut.exception())
                topics[t][1][r] = _partition(version, topics[t][1][r].index, error)
    if acks == 0:
        return None
    return build(response_type(KEY, version), throttle_time=ZERO_MS, responses=tuple(
        build(response_type(KEY, version, "TopicProduceResponse"), name=name, partition_responses=tuple(rows))
        for name, rows in topics))
