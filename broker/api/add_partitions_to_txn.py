"""AddPartitionsToTxn (24), v0-5: put partitions in the producer's transaction.

Behavior (v0-3, what producers send):
- A request-level error (wrong producer id or epoch, CONCURRENT_TRANSACTIONS
  while markers are being written) is repeated on every partition.
- If some partitions do not exist, those get UNKNOWN_TOPIC_OR_PARTITION and
  the others OPERATION_NOT_ATTEMPTED, and nothing is added.

Behavior (v4-5, KIP-890's batched form, which Kafka's brokers send each
other to verify a transactional Produce): it needs CLUSTER_ACTION on the
CLUSTER, else the whole answer is CLUSTER_AUTHORIZATION_FAILED, as Kafka
answers a client that sends it. Otherwise each transaction is handled on its
own: `verify_only` asks which partitions its open transaction holds (NONE,
or TRANSACTION_ABORTABLE for one it does not), else the partitions are added
as v0-3 adds them (the coordinator keys the transaction on version 0: only
Produce v12 and TxnOffsetCommit v5 make a transaction version 2 one).

Version notes: PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v2; v3 is
flexible; v5 only adds TRANSACTION_ABORTABLE to what may be answered. v0-3
frames are read and answered natively (`logstore.native.wire`, kio's bytes):
every transaction of a producer sends one.

Authorization (Kafka's KafkaApis): WRITE on each TRANSACTIONAL_ID, else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED on every partition of it; WRITE on each
TOPIC, else its partitions answer TOPIC_AUTHORIZATION_FAILED and the others
OPERATION_NOT_ATTEMPTED, and nothing is added.
"""
from __future__ import annotations

from functools import cache

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import (
    DENIED,
    AclOperation,
    AskedPartitions,
    ResourceType,
    Shape,
    authorized,
    denied,
    distinct_partitions,
)
from logstore.broker.api.txn_calls import durably
from logstore.broker.protocol import (
    ZERO_MS,
    ErrorCode,
    PartitionRows,
    PreEncoded,
    decode_kio,
    encode_kio,
    native_decoder,
    native_encoder,
    peek_api,
)
from logstore.errors import UnknownTopicOrPartitionError
from logstore.native.wire import decode_add_partitions_to_txn, encode_add_partitions_to_txn

KEY = 24
SHAPE = Shape(index=None)
BATCHED_FROM = 4

Errors = dict[tuple[str, int], ErrorCode]


async def _errors(request: Request, transactional_id: str, producer_id: int, producer_epoch: int,
                  asked_partitions: AskedPartitions, verify_only: bool = False) -> Errors:
    """Each partition's error (none when all were added, or are in the transaction for `verify_only`)."""
    refused = denied(request, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)
    if refused:
        return {(name, index): refused for name, rows in asked_partitions for index, _ in rows}
    allowed = authorized(request, AclOperation.WRITE, ResourceType.TOPIC, [name for name, _ in asked_partitions])
    errors = {(name, index): ErrorCode.none if name in allowed else DENIED[ResourceType.TOPIC]
              for name, rows in asked_partitions for index, _ in rows}
    if len(allowed) < len(asked_partitions):
        return {tp: error or ErrorCode.operation_not_attempted for tp, error in errors.items()}
    asked = list(errors)
    if verify_only:
        verified = await durably(request, request.broker.transactions.verify_partitions, transactional_id,
                                 producer_id, producer_epoch, asked)
        if not verified.ok:
            return dict.fromkeys(asked, verified.error)
        return {tp: ErrorCode(code) for tp, code in verified.result.items()}
    outcome = await durably(request, request.broker.transactions.add_partitions_durably, transactional_id,
                            producer_id, producer_epoch, asked)
    if isinstance(outcome.exc, UnknownTopicOrPartitionError):
        unknown = set(getattr(outcome.exc, "partitions", asked))
        return {tp: ErrorCode.unknown_topic_or_partition if tp in unknown else ErrorCode.operation_not_attempted
                for tp in asked}
    return dict.fromkeys(asked, outcome.error)


@cache
def _result_classes(version: int) -> tuple[type[KioMessage], type[KioMessage]]:
    return (response_type(KEY, version, "AddPartitionsToTxnTopicResult"),
            response_type(KEY, version, "AddPartitionsToTxnPartitionResult"))


def _topic_results(version: int, asked_partitions: AskedPartitions, errors: Errors) -> tuple[KioMessage, ...]:
    topic_cls, partition_cls = _result_classes(version)
    none = ErrorCode.none
    return tuple(topic_cls(name=name, results_by_partition=tuple(
        partition_cls(partition_index=p, partition_error_code=errors.get((name, p), none)) for p, _ in rows))
        for name, rows in asked_partitions)


_decode_native = native_decoder(decode_add_partitions_to_txn, "AddPartitionsToTxn")


def _decode(frame: bytes) -> tuple[str | None, KioMessage]:
    """Producers' versions natively, the batched ones (brokers') through kio."""
    if peek_api(frame)[1] < BATCHED_FROM:
        return _decode_native(frame)
    return decode_kio(frame)


_encode_native = native_encoder(encode_add_partitions_to_txn)


def _encode(correlation_id: int, version: int, answer: PartitionRows | ResponsePayload) -> PreEncoded:
    """Producers' versions natively, the batched ones through kio (as `_decode`)."""
    if isinstance(answer, PartitionRows):
        return _encode_native(correlation_id, version, answer)
    return encode_kio(correlation_id, version, answer)


# A batched request is a broker's, and may be large: decoded off the loop as kio's are.
@api(KEY, 0, 5, decode=_decode, encode=_encode, offload=True)
async def handle(request: Request, body: KioMessage) -> PartitionRows | ResponsePayload:
    """Add every partition asked, or none (v4+: per transaction, or verify them)."""
    version = request.version
    if version < BATCHED_FROM:
        asked = distinct_partitions(body.v3_and_below_topics, SHAPE)
        errors = await _errors(request, body.v3_and_below_transactional_id, body.v3_and_below_producer_id,
                               body.v3_and_below_producer_epoch, asked)
        none = ErrorCode.none
        return PartitionRows(0, [(name, [(p, errors.get((name, p), none)) for p, _ in rows]) for name, rows in asked])
    result_cls = response_type(KEY, version, "AddPartitionsToTxnResult")
    refused = denied(request, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER)
    results = []
    if not refused:
        for txn in body.transactions:
            asked = distinct_partitions(txn.topics, SHAPE)
            errors = await _errors(request, txn.transactional_id, txn.producer_id, txn.producer_epoch, asked,
                                   verify_only=txn.verify_only)
            results.append(build(result_cls, transactional_id=txn.transactional_id,
                                 topic_results=_topic_results(version, asked, errors)))
    return build(response_type(KEY, version), throttle_time=ZERO_MS, error_code=refused,
                 results_by_transaction=tuple(results))
