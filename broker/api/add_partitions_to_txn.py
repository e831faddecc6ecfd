"""AddPartitionsToTxn (24), v0-3: put partitions in the producer's transaction.

A request-level error (wrong producer id or epoch, CONCURRENT_TRANSACTIONS
while markers are being written) is repeated on every partition. If some
partitions do not exist, those get UNKNOWN_TOPIC_OR_PARTITION and the others
OPERATION_NOT_ATTEMPTED, and nothing is added. PRODUCER_FENCED is
INVALID_PRODUCER_EPOCH before v2. v4+ (the broker-to-broker verification
form of KIP-890) is not advertised: this broker verifies in-process.

Authorization (Kafka's KafkaApis): WRITE on the TRANSACTIONAL_ID, else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED on every partition; WRITE on each
TOPIC, else its partitions answer TOPIC_AUTHORIZATION_FAILED and the others
OPERATION_NOT_ATTEMPTED, and nothing is added.
"""
from __future__ import annotations

from logstore.broker.api import KioMessage, Request, ResponsePayload, api, build, response_type
from logstore.broker.api.kit import (
    AclOperation,
    ResourceType,
    Shape,
    coordinate,
    denied,
    distinct_partitions,
    each_partition,
)
from logstore.broker.protocol import ZERO_MS, ErrorCode
from logstore.errors import UnknownTopicOrPartitionError

KEY = 24
SHAPE = Shape(index=None)


async def _errors(request: Request, body: KioMessage) -> dict[tuple[str, int], ErrorCode]:
    """Each partition's error (none when all were added)."""
    topics = body.v3_and_below_topics
    transactional_id = body.v3_and_below_transactional_id
    refused = denied(request, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)
    checked = each_partition(request, topics, lambda topic, index, asked: None, operation=AclOperation.WRITE,
                             shape=SHAPE, error=refused)
    errors = {(r.topic, r.index): r.error for _, rows in checked for r in rows}
    if any(errors.values()):
        if refused:
            return errors
        return {tp: error or ErrorCode.operation_not_attempted for tp, error in errors.items()}
    asked = list(errors)
    outcome = await coordinate(request, request.broker.transactions.add_partitions, transactional_id,
                               body.v3_and_below_producer_id, body.v3_and_below_producer_epoch, asked)
    if isinstance(outcome.exc, UnknownTopicOrPartitionError):
        unknown = set(getattr(outcome.exc, "partitions", asked))
        return {tp: ErrorCode.unknown_topic_or_partition if tp in unknown else ErrorCode.operation_not_attempted
                for tp in asked}
    return dict.fromkeys(asked, outcome.error)


@api(KEY, 0, 3)
async def handle(request: Request, body: KioMessage) -> ResponsePayload:
    """Add every partition asked, or none."""
    version = request.version
    errors = await _errors(request, body)
    partition_cls = response_type(KEY, version, "AddPartitionsToTxnPartitionResult")
    topic_cls = response_type(KEY, version, "AddPartitionsToTxnTopicResult")
    topics = tuple(build(topic_cls, name=name, results_by_partition=tuple(
        build(partition_cls, partition_index=p, partition_error_code=errors.get((name, p), ErrorCode.none))
        for p, _ in rows)) for name, rows in distinct_partitions(body.v3_and_below_topics, SHAPE))
    return build(response_type(KEY, version), throttle_time=ZERO_MS, results_by_topic_v3_and_below=topics)
